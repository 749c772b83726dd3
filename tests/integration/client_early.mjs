// client_early.mjs (CTest client_early): tidemark-client against a server in
// emit-early mode (`--emit early`; docs/design.md, "Emit-then-reconcile"),
// which writes events to the wire before they are durable and announces its
// durable head. Commits are slowed to 150 ms (TIDEMARK_COMMIT_DELAY_MS, a
// test build), so the client always holds events that are not durable yet;
// the server is kill -9ed mid-call three times and restarted on the same
// port, losing them. The client must dispatch only events announced durable,
// so its cursor is never above what the server kept:
//   - the call ends with its result, exit 0;
//   - progress 1..N arrives exactly once, in order;
//   - the recorded effects (one per dispatched event) have dense seqs, each once;
//   - the server never answered a resume with cursor_ahead (its metrics).
//
//   node client_early.mjs TIDEMARK_CLIENT TIDEMARK_SERVER_CRASHPOINTS
import { spawn, spawnSync } from "node:child_process";
import { reaped } from "./reap.mjs";
import { freePort } from "./ports.mjs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [client, server] = process.argv.slice(2);
if (!client || !server) {
  console.error("usage: client_early.mjs TIDEMARK_CLIENT TIDEMARK_SERVER");
  process.exit(2);
}
const N = 400, KILL_AT = [60, 180, 300];
let passed = 0, failed = 0;
function check(name, cond, detail) {
  if (cond) { passed++; console.log("ok   " + name); }
  else { failed++; console.log("FAIL " + name + (detail ? ": " + detail : "")); }
}
const dir = mkdtempSync(join(tmpdir(), "tm-client-early-"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let srv = null;
function startServer(port) {
  return new Promise((resolve, reject) => {
    const p = reaped(spawn(server, ["--listen", `127.0.0.1:${port}`, "--store", `sqlite:${join(dir, "server.db")}`,
      "--emit", "early", "--durability", "power", "--retry-ms", "50", "--log-level", "warn"],
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, TIDEMARK_COMMIT_DELAY_MS: "150" } }));
    let out = "";
    const t = setTimeout(() => reject(new Error("server did not start")), 15000);
    p.stdout.on("data", (d) => {
      out += d;
      if (/^listening on /m.test(out)) { clearTimeout(t); resolve(p); }
    });
    p.on("exit", () => clearTimeout(t));
  });
}
async function killServer() {
  const p = srv;
  srv = null;
  const gone = new Promise((r) => p.once("exit", r));
  p.kill("SIGKILL");
  await gone;
}

try {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/mcp`;
  srv = await startServer(port);
  const state = join(dir, "client.db");
  // Legacy era: the emit-early stream's ids and durable announcements.
  const cl = reaped(spawn(client, ["--protocol", "legacy", "--state", state, "--record-effects", "--timeout-ms", "120000", url,
    "call", "stream", `n=${N}`, "delay_ms=5"], { stdio: ["ignore", "pipe", "pipe"] }));
  let out = "", err = "", last = 0;
  cl.stdout.on("data", (d) => { out += d; });
  cl.stderr.on("data", (d) => {
    err += d;
    const m = [...String(d).matchAll(/^progress (\d+)\//gm)];
    if (m.length) last = Number(m[m.length - 1][1]);
  });
  const exited = new Promise((r) => cl.on("close", (code) => r(code)));
  let kills = 0;
  for (const at of KILL_AT) {
    const deadline = Date.now() + 60000;
    while (last < at && cl.exitCode === null && Date.now() < deadline) await sleep(5);
    if (cl.exitCode !== null) break;
    await killServer();
    kills++;
    srv = await startServer(port);
  }
  const code = await Promise.race([exited, sleep(120000).then(() => "timeout")]);
  if (code === "timeout") cl.kill("SIGKILL");
  check(`${kills} kills -9 of the server mid-call`, kills === KILL_AT.length);
  check("the call ends with its result (exit 0)", code === 0 && out.trim() === `streamed ${N}`,
    `exit ${code}: ${out.slice(0, 200)} ${err.split("\n").filter((l) => !l.startsWith("progress")).join(" | ").slice(0, 600)}`);
  const progress = [...err.matchAll(/^progress (\d+)\//gm)].map((m) => Number(m[1]));
  const dense = progress.length === N && progress.every((p, i) => p === i + 1);
  check(`progress 1..${N} exactly once, in order`, dense, `${progress.length} values`);
  const eff = spawnSync(client, ["--state", state, url, "effects"], { encoding: "utf8", timeout: 30000 });
  let effects = [];
  try { effects = JSON.parse(eff.stdout); } catch { /* checked below */ }
  const seqs = effects.filter((e) => e.stream === "r1").map((e) => e.seq);
  const uniqueDense = seqs.length > N && seqs.every((s, i) => i === 0 || s === seqs[i - 1] + 1) &&
    new Set(effects.map((e) => e.event_id)).size === effects.length;
  check("effects: one per event, dense seqs, no event twice", uniqueDense,
    `${seqs.length} effects, first ${seqs.slice(0, 3)}, ${eff.stderr}`);
  const metrics = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const ahead = /tidemark_resumes_total\{outcome="ahead"\} (\d+)/.exec(metrics)?.[1];
  check("no resume answered cursor_ahead", ahead === "0", `ahead=${ahead}`);
} catch (e) {
  failed++;
  console.log("FAIL aborted: " + (e.stack ?? e));
} finally {
  if (srv) { const p = srv; const gone = new Promise((r) => p.once("exit", r)); p.kill("SIGTERM"); await gone; }
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
