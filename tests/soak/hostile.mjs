// hostile.mjs - a hostile-client soak: at once, against one tidemark-server
// (SQLite), for --seconds:
//   - a fuzzer (from 127.0.0.3) sending mutated requests and headers; every
//     answer must be typed (a JSON-RPC error body with data.reason on 4xx/5xx)
//     and no 5xx other than the limits' own 503s;
//   - slow-header connections (from 127.0.0.2) trickling a byte at a time,
//     reopened whenever the server cuts them;
//   - one session (from 127.0.0.4) keeping 32 slow calls in flight, each
//     connection cut at once;
//   - a well-behaved client (127.0.0.1) doing ledger_append + echo rounds,
//     each call answered within 2 s (a correctness bound, not a benchmark),
//     every ledger entry exactly once (retries included).
//
//   node hostile.mjs --server BIN [--seconds 30] [--seed 1] [--slow 300]
// Short variant in make test (hostile_short); long: make soak-hostile.
import { connect } from "node:net";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  callTool, checker, initialize, initializeFrom, ledgerCount, postFrom, rawHttp, sleep,
  startServer, stopServer, timed, toolCall,
} from "../integration/mcp_http.mjs";

const arg = (name, def) => {
  const i = process.argv.indexOf("--" + name);
  return i > 0 ? process.argv[i + 1] : def;
};
const bin = arg("server");
if (!bin) { console.error("usage: hostile.mjs --server BIN [--seconds N] [--seed N] [--slow N]"); process.exit(2); }
const SECONDS = Number(arg("seconds", 30)), SLOW = Number(arg("slow", 300));
let seed = Number(arg("seed", 1)) >>> 0 || 1;
const rnd = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 2 ** 32; };
const pick = (a) => a[Math.floor(rnd() * a.length)];
const t = checker();

const dir = mkdtempSync(join(tmpdir(), "tidemark-hostile-"));
const server = await startServer(bin, ["--store", "sqlite:" + join(dir, "h.db"),
  "--request-deadline-ms", "2000", "--keepalive-ms", "1000"]);
const url = server.url, u = new URL(url);
const end = Date.now() + SECONDS * 1000;
const running = () => Date.now() < end;

// ---- the fuzzer -------------------------------------------------------------------
const bases = [
  { jsonrpc: "2.0", id: 1, method: "ping" },
  { jsonrpc: "2.0", id: 2, method: "tools/list" },
  { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "echo", arguments: { text: "x" } } },
  { jsonrpc: "2.0", id: 4, method: "resources/subscribe", params: { uri: "test://a" } },
  { jsonrpc: "2.0", id: 5, method: "logging/setLevel", params: { level: "debug" } },
  { jsonrpc: "2.0", id: 6, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "f", version: "1" } } },
  { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 3 } },
  { jsonrpc: "2.0", id: "r", result: {} },
];
const weird = () => pick([null, true, 0, -1, 2 ** 63, 1e308, "", "\u0000", "é\u{1F600}", "x".repeat(2000),
  [], {}, [[[[]]]], { a: { b: { c: {} } } }, "s".repeat(70000)]);
function mutate(msg) {
  const m = structuredClone(msg);
  const keys = ["jsonrpc", "id", "method", "params", "result", "error"];
  for (let n = 1 + Math.floor(rnd() * 3); n > 0; n--) {
    const k = pick(keys), r = rnd();
    if (r < 0.3) delete m[k];
    else if (r < 0.7) m[k] = weird();
    else if (m.params && typeof m.params === "object") m.params[pick(["name", "arguments", "uri", "_meta", "level"])] = weird();
  }
  return m;
}
function body() {
  const r = rnd();
  let text = JSON.stringify(r < 0.1 ? Array.from({ length: 1 + Math.floor(rnd() * 80) }, () => mutate(pick(bases))) : mutate(pick(bases)));
  if (r > 0.85) text = text.slice(0, Math.floor(rnd() * text.length));          // truncated
  else if (r > 0.8) text = "[".repeat(500) + "]".repeat(500);                      // deep
  else if (r > 0.75) text = Buffer.from(Array.from({ length: 64 }, () => Math.floor(rnd() * 256))).toString("latin1");
  return text;
}
function headers(sid) {
  const h = [];
  const add = (k, v) => h.push(`${k}: ${v}`);
  add("Host", rnd() < 0.9 ? "127.0.0.1" : pick(["evil.example", "", "127.0.0.1:80.evil", "[::1]"]));
  add("Content-Type", rnd() < 0.85 ? "application/json" : pick(["text/plain", "application/jsonx", "", "application/json; charset=x"]));
  add("Accept", rnd() < 0.85 ? "application/json, text/event-stream" : pick(["*/*", "text/html", ""]));
  if (rnd() < 0.2) add("Origin", pick(["http://localhost", "https://evil.example", "null", "http://localhost:80.evil"]));
  if (rnd() < 0.3) add("MCP-Protocol-Version", pick(["2025-11-25", "2025-06-18", "1999-01-01", "", "x".repeat(300)]));
  if (sid && rnd() < 0.8) add("Mcp-Session-Id", rnd() < 0.9 ? sid : pick(["", "0".repeat(32), "x".repeat(5000)]));
  if (rnd() < 0.05) add("Last-Event-ID", pick(["", "garbage", "0000000000000000-r1-1", "x".repeat(3000)]));
  return h;
}
const stats = { fuzz: 0, byStatus: {}, untyped: [], bad5xx: [] };
const allowed5xx = new Set(["too_many_connections", "store_unavailable", "shutting_down"]);
async function fuzzer() {
  let sid = null;
  while (running()) {
    if (!sid || rnd() < 0.01) sid = await initializeFrom("127.0.0.3", url).catch(() => null);
    const b = body();
    const method = rnd() < 0.9 ? "POST" : pick(["GET", "DELETE", "PUT"]);
    let text = `${method} /mcp HTTP/1.1\r\n${headers(sid).join("\r\n")}\r\n`;
    text += rnd() < 0.03 ? `Content-Length: ${b.length}\r\nContent-Length: 3\r\n\r\n${b}` : `Content-Length: ${Buffer.byteLength(b, "latin1")}\r\n\r\n${b}`;
    const r = await rawHttp(url, text, { localAddress: "127.0.0.3", ms: 4000 });
    stats.fuzz++;
    stats.byStatus[r.status] = (stats.byStatus[r.status] ?? 0) + 1;
    if (r.status >= 400) {
      let reason = null;
      try { reason = JSON.parse(r.body)?.error?.data?.reason; } catch { /* not JSON */ }
      if (!reason && stats.untyped.length < 5) stats.untyped.push([r.status, text.slice(0, 200), r.body.slice(0, 200)]);
      if (r.status >= 500 && !allowed5xx.has(reason) && stats.bad5xx.length < 5) stats.bad5xx.push([r.status, reason, text.slice(0, 300)]);
    }
  }
}

// ---- slow headers -------------------------------------------------------------------
const slow = { opened: 0, cut: 0 };
async function slowloris() {
  const socks = new Set();
  const open = () => {
    const s = connect({ host: u.hostname, port: Number(u.port), localAddress: "127.0.0.2" });
    slow.opened++;
    s.on("error", () => {});
    s.on("close", () => { socks.delete(s); slow.cut++; if (running()) setTimeout(open, 50); });
    s.on("connect", () => s.write("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    socks.add(s);
  };
  for (let i = 0; i < SLOW; i++) open();
  while (running()) {
    for (const s of socks) if (!s.connecting) s.write("x");
    await sleep(400);
  }
  for (const s of socks) s.destroy();
}

// ---- one session flooding slow calls ----------------------------------------------------
const flood = { sent: 0 };
async function flooder() {
  const sid = await initializeFrom("127.0.0.4", url);
  const lane = async (k) => {
    for (let i = 0; running(); i++) {
      await postFrom("127.0.0.4", url, sid, toolCall(`f${k}-${i}`, "external_call", { delay_ms: 2000 }), { cut: true });
      flood.sent++;
      await sleep(2000);
    }
  };
  await Promise.all(Array.from({ length: 32 }, (_, k) => lane(k)));
}

// ---- the well-behaved client -----------------------------------------------------------
const good = { calls: 0, slow: [], failed: [], times: [], entries: [] };
async function wellBehaved() {
  const sid = await initialize(url);
  for (let i = 0; running(); i++) {
    const entry = `good-${i}`;
    for (const [id, name, args] of [[`l${i}`, "ledger_append", { entry }], [`l${i}`, "ledger_append", { entry }],
      [`e${i}`, "echo", { text: entry }]]) {
      const r = await timed(() => callTool(url, sid, id, name, args), 10000);
      good.calls++;
      good.times.push(r.ms);
      const res = r.ok ? r.detail.response : null;
      const ok = res?.result && !res.result.isError;
      if (!ok && good.failed.length < 5) good.failed.push([id, r.ms, JSON.stringify(res ?? r.detail).slice(0, 300)]);
      if (r.ms > 2000 && good.slow.length < 5) good.slow.push([id, r.ms]);
    }
    good.entries.push(entry);
    await sleep(20);
  }
  return sid;
}

const [sid] = await Promise.all([wellBehaved(), fuzzer(), slowloris(), flooder()]);
const q = (p) => { const v = [...good.times].sort((a, b) => a - b); return v[Math.min(v.length - 1, Math.floor(p * v.length))]; };
console.log(`good client: ${good.calls} calls, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`);
console.log(`fuzzer: ${stats.fuzz} requests, by status ${JSON.stringify(stats.byStatus)}`);
console.log(`slow headers: ${slow.opened} opened, ${slow.cut} cut; flood: ${flood.sent} slow calls`);
t.check("the well-behaved client did real work", good.calls >= 30, String(good.calls));
t.check("every call of the well-behaved client answered successfully", good.failed.length === 0, JSON.stringify(good.failed));
t.check("every call of the well-behaved client answered within 2 s", good.slow.length === 0, JSON.stringify(good.slow));
let wrong = [];
for (const e of good.entries) {
  const n = await ledgerCount(url, sid, e);
  if (n !== 1) wrong.push([e, n]);
}
t.check(`each of ${good.entries.length} ledger entries exactly once`, wrong.length === 0, JSON.stringify(wrong.slice(0, 5)));
t.check("the fuzzer ran", stats.fuzz >= 50, String(stats.fuzz));
t.check("every refusal is typed (data.reason)", stats.untyped.length === 0, JSON.stringify(stats.untyped));
t.check("no 5xx beyond the limits' own", stats.bad5xx.length === 0, JSON.stringify(stats.bad5xx));
t.check("slow-header connections were cut and reopened", slow.cut >= SLOW, `${slow.cut} cut`);
t.check("the server is alive", server.proc.exitCode === null && (await timed(() => initialize(url), 3000)).ok);
await stopServer(server);
t.check("the server stopped cleanly", server.proc.exitCode === 0, String(server.proc.exitCode));
t.done();
