// multinode_env.mjs - a throwaway cluster on loopback for the multi-node tests
// (issue 6): one redis-server (AOF, appendfsync always, data in a temp dir),
// N Tidemark nodes on `--store redis://...`, and HAProxy round-robin without
// stickiness in front. Every process is started on a port picked here and
// stopped by PID; every wait has a deadline.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { freePort } from "./ports.mjs";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Which of the external programs are missing (the tests skip only then).
export function missingTools() {
  return ["redis-server", "haproxy"].filter(
    (t) => spawnSync("sh", ["-c", `command -v ${t}`], { timeout: 10000 }).status !== 0);
}

// Ports a test names before their server binds them (ports.mjs).
export { freePort };

// Resolve once something accepts TCP on port, or throw at the deadline.
export async function waitTcp(port, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const ok = await new Promise((r) => {
      const c = connect(port, "127.0.0.1");
      c.once("connect", () => { c.destroy(); r(true); });
      c.once("error", () => r(false));
    });
    if (ok) return;
    await sleep(25);
  }
  throw new Error(`nothing listening on ${port} after ${ms} ms`);
}

function exited(proc) {
  return proc.exitCode !== null || proc.signalCode !== null;
}

export async function stopProc(proc, sig = "SIGTERM", ms = 10000) {
  if (!proc || exited(proc)) return;
  const done = new Promise((r) => proc.once("exit", r));
  proc.kill(sig);
  const t = setTimeout(() => { if (!exited(proc)) proc.kill("SIGKILL"); }, ms);
  await done;
  clearTimeout(t);
}

// Run a redis-cli command against the cluster's Redis; returns stdout.
export function redisCli(port, ...args) {
  const r = spawnSync("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args],
    { encoding: "utf8", timeout: 10000 });
  if (r.status !== 0) throw new Error(`redis-cli ${args.join(" ")}: ${r.stderr}`);
  return r.stdout.trim();
}

export class Cluster {
  constructor({ bin, nodes = 3, nodeArgs = [], quiet = true }) {
    this.bin = bin;
    this.n = nodes;
    this.nodeArgs = nodeArgs;
    this.quiet = quiet;
    this.dir = mkdtempSync(join(tmpdir(), "tidemark-multinode-"));
    this.redisDir = join(this.dir, "redis");
    this.nodes = [];   // index -> { proc, url, port } or null while down
    this.redis = null;
    this.lb = null;
    this.logs = [];
  }

  get storeUri() { return `redis://127.0.0.1:${this.redisPort}`; }
  get url() { return `http://127.0.0.1:${this.lbPort}/mcp`; }

  async startRedis() {
    if (!this.redisPort) this.redisPort = await freePort();
    mkdirSync(this.redisDir, { recursive: true });
    const proc = reaped(spawn("redis-server", ["--port", String(this.redisPort), "--bind", "127.0.0.1",
      "--dir", this.redisDir, "--appendonly", "yes", "--appendfsync", "always",
      "--save", "", "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"],
      { stdio: ["ignore", "ignore", "inherit"] }));
    this.redis = proc;
    await waitTcp(this.redisPort);
    const end = Date.now() + 10000;
    for (;;) { // loaded (PING answers PONG, not LOADING)
      try { if (redisCli(this.redisPort, "PING") === "PONG") break; } catch { /* not yet */ }
      if (Date.now() > end) throw new Error("redis did not become ready");
      await sleep(25);
    }
  }

  async stopRedis(sig = "SIGTERM") {
    await stopProc(this.redis, sig);
    this.redis = null;
  }

  async startNode(i) {
    // A node started for the first time binds port 0 and reports the port it
    // got ("listening on URL"), so no other process can take a port picked
    // here before the node binds it; a restart binds the port it had.
    if (!this.nodePorts) this.nodePorts = [];
    const port = this.nodePorts[i] || 0;
    const proc = reaped(spawn(this.bin, ["--listen", `127.0.0.1:${port}`, "--store", this.storeUri,
      "--log-level", this.quiet ? "warn" : "info", "--keepalive-ms", "1000", ...this.nodeArgs],
      { stdio: ["ignore", "pipe", "inherit"] }));
    let buf = "";
    const url = await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`node ${i} did not start`)), 15000);
      proc.stdout.on("data", (d) => {
        buf += d;
        const m = buf.match(/^listening on (\S+)$/m);
        if (m) { clearTimeout(t); resolve(m[1]); }
      });
      proc.once("exit", (c, s) => { clearTimeout(t); reject(new Error(`node ${i} exited (${c ?? s})`)); });
    });
    proc.stdout.resume();
    this.nodePorts[i] = Number(new URL(url).port);
    this.nodes[i] = { proc, url, port: this.nodePorts[i] };
    return this.nodes[i];
  }

  async killNode(i, sig = "SIGKILL") {
    const nd = this.nodes[i];
    if (!nd) return;
    nd.proc.killedByTest = true;
    await stopProc(nd.proc, sig);
    this.nodes[i] = null;
  }

  // After the nodes (its configuration names their ports). lbPort may be
  // set before, when the nodes' flags must name the balancer's URL.
  async startLb() {
    if (!this.lbPort) this.lbPort = await freePort();
    // The configuration users get (examples/haproxy.cfg), with our ports:
    // its frontend port, and one server line per node in the shape of its first.
    const shipped = readFileSync(new URL("../../examples/haproxy.cfg", import.meta.url), "utf8");
    const first = shipped.match(/^\s*server \S+ 127\.0\.0\.1:\d+(.*)$/m);
    if (!first) throw new Error("examples/haproxy.cfg: no server line");
    const servers = this.nodePorts.map((p, i) => `  server n${i} 127.0.0.1:${p}${first[1]}`).join("\n");
    const cfg = shipped.replace(/^\s*server .*\n?/gm, "")
      .replace(/bind 127\.0\.0\.1:\d+/, `bind 127.0.0.1:${this.lbPort}`).trimEnd() + "\n" + servers + "\n";
    const cfgPath = join(this.dir, "haproxy.cfg");
    writeFileSync(cfgPath, cfg);
    const chk = spawnSync("haproxy", ["-c", "-q", "-f", cfgPath], { encoding: "utf8", timeout: 20000 });
    if (chk.status !== 0) throw new Error("haproxy config: " + chk.stderr + chk.stdout);
    this.lb = reaped(spawn("haproxy", ["-db", "-f", cfgPath], { stdio: ["ignore", "ignore", "pipe"] }));
    this.lb.stderr.on("data", (d) => {
      const s = String(d);
      if (!/Server be\/n\d+ is (DOWN|UP)|backend be has no server available|^\s*$/m.test(s) && !this.quiet)
        process.stderr.write("[haproxy] " + s);
    });
    await waitTcp(this.lbPort);
    if (exited(this.lb)) throw new Error(`haproxy exited (${this.lb.exitCode ?? this.lb.signalCode})`);
  }

  async start() {
    await this.startRedis();
    for (let i = 0; i < this.n; i++) await this.startNode(i);
    await this.startLb();
  }

  async stop() {
    await stopProc(this.lb);
    for (let i = 0; i < this.nodes.length; i++) {
      const nd = this.nodes[i];
      if (nd) { nd.proc.killedByTest = true; await stopProc(nd.proc); }
    }
    await this.stopRedis();
    if (existsSync(this.dir)) rmSync(this.dir, { recursive: true, force: true });
  }
}
