// mcp_http.mjs - what the server-side scenario tests share: start a real
// tidemark-server (or a two-node Redis cluster), speak MCP over raw HTTP,
// read answers. Every process is started on a loopback port it reports and
// is stopped by PID; every wait has a deadline.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { sseEvents } from "./sse.mjs";
import { Cluster, missingTools, stopProc } from "./multinode_env.mjs";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(20);
  }
}

// A tally of named checks; exit code 1 if any failed.
export function checker() {
  const t = { passed: 0, failed: 0 };
  t.check = (name, cond, detail = "") => {
    if (cond) { t.passed++; console.log("ok   " + name); }
    else { t.failed++; console.log("FAIL " + name + (detail ? ": " + detail : "")); }
    return cond;
  };
  t.done = () => {
    console.log(`${t.passed} passed, ${t.failed} failed`);
    process.exit(t.failed ? 1 : 0);
  };
  return t;
}

// Start `bin` with flags; resolves {proc, url, log} once it listens.
export function startServer(bin, flags, { env, ms = 15000 } = {}) {
  return new Promise((resolve, reject) => {
    const proc = reaped(spawn(bin, ["--listen", "127.0.0.1:0", "--log-level", "warn", ...flags],
      { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }));
    const s = { proc, url: null, log: "" };
    let out = "";
    const t = setTimeout(() => reject(new Error("server did not start: " + s.log)), ms);
    proc.stderr.on("data", (d) => { s.log += d; });
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^listening on (\S+)$/m);
      if (m && !s.url) { clearTimeout(t); s.url = m[1]; resolve(s); }
    });
    proc.once("exit", (c, sig) => { clearTimeout(t); if (!s.url) reject(new Error(`server exited (${c ?? sig}): ${s.log}`)); });
  });
}

export const stopServer = (s, sig = "SIGTERM") => stopProc(s?.proc, sig);

// Servers for a store kind: "memory", "sqlite" or "redis" (two nodes on one
// Redis: urls[0] and urls[1] are different nodes, so a retry can land on
// the other). Returns {urls, stop()} or null when redis is missing.
export async function serversFor(bin, kind, flags = []) {
  if (kind === "redis") {
    if (missingTools().includes("redis-server")) return null;
    const c = new Cluster({ bin, nodes: 2, nodeArgs: flags });
    await c.startRedis();
    await c.startNode(0);
    await c.startNode(1);
    return { urls: [c.nodes[0].url, c.nodes[1].url], stop: () => c.stop() };
  }
  const store = kind === "sqlite"
    ? "sqlite:" + join(mkdtempSync(join(tmpdir(), "tidemark-test-")), "t.db") : "memory";
  const s = await startServer(bin, ["--store", store, ...flags]);
  return { urls: [s.url, s.url], server: s, stop: () => stopServer(s) };
}

export const JSONH = { "content-type": "application/json", accept: "application/json, text/event-stream" };

export function post(url, sid, body, { signal, headers = {}, raw = false } = {}) {
  const h = { ...JSONH, ...headers };
  if (sid) h["mcp-session-id"] = sid;
  return fetch(url, { method: "POST", headers: h, body: raw ? body : JSON.stringify(body), signal });
}

export async function initialize(url, version = "2025-11-25", headers = {}) {
  const r = await post(url, null, { jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "test", version: "1" } } },
  { headers });
  const sid = r.headers.get("mcp-session-id");
  await r.text();
  if (!sid) throw new Error(`initialize answered ${r.status} without a session`);
  await (await post(url, sid, { jsonrpc: "2.0", method: "notifications/initialized" }, { headers })).text();
  return sid;
}

export function toolCall(id, name, args, meta = {}) {
  return { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, _meta: meta } };
}

// Every JSON-RPC message of an answer, SSE or JSON, with the HTTP status.
export async function messages(res) {
  const out = { status: res.status, msgs: [], events: [] };
  if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    for await (const ev of sseEvents(res.body)) {
      out.events.push(ev);
      if (ev.data) out.msgs.push(JSON.parse(ev.data));
    }
  } else {
    const t = await res.text();
    if (t) out.msgs.push(...[].concat(JSON.parse(t)));
  }
  return out;
}

// POST a call and read its answer to the end; the final response message.
export async function callTool(url, sid, id, name, args, meta = {}, opts = {}) {
  const m = await messages(await post(url, sid, toolCall(id, name, args, meta), opts));
  return { ...m, response: m.msgs.find((x) => x.id !== undefined && (x.result || x.error)) };
}

export const reasonOf = (msg) => msg?.error?.data?.reason;

// How many ledger rows carry this entry (ledger_read through any node).
export async function ledgerCount(url, sid, entry) {
  const r = await callTool(url, sid, "read-" + Math.random(), "ledger_read", { entry });
  return r.response?.result?.structuredContent?.count ?? null;
}
