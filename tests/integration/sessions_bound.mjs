// sessions_bound.mjs - sessions are bounded (issue 30, item 3): past the
// per-address limit initialize is refused typed (429 too_many_sessions with
// Retry-After) while another address is still served; past the limit in all,
// 503; and many sessions of one client cost little resident memory (idle
// ones live in the store, not in the process).
//
//   node sessions_bound.mjs SERVER_BINARY limit
//   node sessions_bound.mjs SERVER_BINARY memory N MAX_KB_PER_SESSION
//
// The abusive client sends from 127.0.0.1, the well-behaved one from
// 127.0.0.2 (all of 127/8 is loopback).
import { Agent, request as httpRequest } from "node:http";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, JSONH, startServer, stopServer } from "./mcp_http.mjs";

const [bin, scenario, ...rest] = process.argv.slice(2);
if (!bin || !scenario) {
  console.error("usage: sessions_bound.mjs SERVER_BINARY limit | memory N MAX_KB_PER_SESSION");
  process.exit(2);
}
const t = checker();

// One POST on a keep-alive agent bound to a source address.
function postOn(agent, url, sid, body) {
  const u = new URL(url);
  const h = { ...JSONH };
  if (sid) h["mcp-session-id"] = sid;
  const data = JSON.stringify(body);
  h["content-length"] = Buffer.byteLength(data);
  return new Promise((resolve) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: "POST",
      headers: h, agent }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { text += d; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.setTimeout(30000, () => { req.destroy(); resolve({ status: 0, error: "timeout" }); });
    req.on("error", (e) => resolve({ status: 0, error: String(e) }));
    req.end(data);
  });
}

const agentFrom = (localAddress, n = 4) =>
  new Agent({ keepAlive: true, maxSockets: n, localAddress });

const initMsg = (id) => ({ jsonrpc: "2.0", id, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bound", version: "1" } } });

// An initialize: {status, sid, body, retryAfter}.
async function init(agent, url, id = 0) {
  const r = await postOn(agent, url, null, initMsg(id));
  let body = null;
  try { body = JSON.parse(r.text); } catch { /* SSE or empty */ }
  if (!body && r.text) {
    const m = r.text.match(/^data: (.*)$/m);
    if (m) body = JSON.parse(m[1]);
  }
  return { status: r.status, sid: r.headers?.["mcp-session-id"], body,
    retryAfter: r.headers?.["retry-after"], error: r.error };
}

// `count` initializes over the agent's sockets, `par` at a time; the results.
async function initMany(agent, url, count, par = 4) {
  const out = [];
  let next = 0;
  async function worker() {
    while (next < count) {
      const i = next++;
      out[i] = await init(agent, url, i);
    }
  }
  await Promise.all(Array.from({ length: par }, worker));
  return out;
}

const sqliteStore = () => "sqlite:" + join(mkdtempSync(join(tmpdir(), "tidemark-sess-")), "t.db");
const rssKb = (pid) => Number(readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]);
const reason = (r) => r.body?.error?.data?.reason;

async function limit() {
  const perAddr = 50, all = 80;
  for (const store of ["memory", sqliteStore()]) {
    const kind = store === "memory" ? "memory" : "sqlite";
    const s = await startServer(bin, ["--store", store, "--durability", "process",
      "--max-sessions-per-address", String(perAddr), "--max-sessions", String(all)]);
    const a1 = agentFrom("127.0.0.1"), a2 = agentFrom("127.0.0.2");
    try {
      const first = await initMany(a1, s.url, perAddr);
      t.check(`${kind}: ${perAddr} sessions from one address are made`,
        first.every((r) => r.status === 200 && r.sid), JSON.stringify(first.find((r) => !r.sid)));
      const over = await init(a1, s.url, 999);
      t.check(`${kind}: one more from that address is refused 429 too_many_sessions`,
        over.status === 429 && !over.sid && reason(over) === "too_many_sessions" &&
        over.body?.error?.data?.limit === perAddr, JSON.stringify(over));
      t.check(`${kind}: the 429 says when to retry`, Number(over.retryAfter) > 0, String(over.retryAfter));
      const other = await init(a2, s.url, 1);
      t.check(`${kind}: another address (127.0.0.2) still gets a session`,
        other.status === 200 && !!other.sid, JSON.stringify(other));
      const ping = other.sid && await postOn(a2, s.url, other.sid, { jsonrpc: "2.0", id: 2, method: "ping" });
      t.check(`${kind}: and is served on it`, ping?.status === 200, JSON.stringify(ping));
      // A session deleted gives its place back.
      const del = await new Promise((resolve) => {
        const u = new URL(s.url);
        const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: "DELETE",
          headers: { "mcp-session-id": first[0].sid }, agent: a1 }, (res) => { res.resume(); res.on("end", () => resolve(res.statusCode)); });
        req.on("error", () => resolve(0));
        req.end();
      });
      const again = await init(a1, s.url, 1000);
      t.check(`${kind}: after a DELETE the address may make one again`,
        del === 200 && again.status === 200 && !!again.sid, `${del} ${JSON.stringify(again)}`);
      // The limit in all: 127.0.0.2 fills it, then anyone is refused 503.
      const fill = await initMany(a2, s.url, all - perAddr - 1);
      const full = await init(agentFrom("127.0.0.3", 1), s.url, 5);
      t.check(`${kind}: past --max-sessions in all, 503 too_many_sessions`,
        fill.every((r) => r.sid) && full.status === 503 && reason(full) === "too_many_sessions" &&
        Number(full.retryAfter) > 0, JSON.stringify([full, fill.filter((r) => !r.sid).slice(0, 2)]));
      // Existing sessions keep working at the limit.
      const old = await postOn(a1, s.url, first[1].sid, { jsonrpc: "2.0", id: 3, method: "ping" });
      t.check(`${kind}: sessions made before are still served at the limit`, old.status === 200,
        JSON.stringify(old));
    } finally {
      a1.destroy(); a2.destroy();
      await stopServer(s);
    }
    if (kind !== "sqlite") continue;
    // The store keeps where each session came from: the count survives a restart.
    const s2 = await startServer(bin, ["--store", store, "--durability", "process",
      "--max-sessions-per-address", String(perAddr), "--max-sessions", String(all + 10)]);
    const b1 = agentFrom("127.0.0.1");
    try {
      const after = await init(b1, s2.url, 7);
      t.check("sqlite: after a restart the address is still at its limit (429)",
        after.status === 429 && reason(after) === "too_many_sessions", JSON.stringify(after));
    } finally {
      b1.destroy();
      await stopServer(s2);
    }
  }
}

// N sessions from one client on SQLite: RSS growth per session.
async function memory(n, maxKb) {
  // 0: no limit (as the flags' help says)
  const s = await startServer(bin, ["--store", sqliteStore(), "--durability", "process",
    "--max-sessions-per-address", "0", "--max-sessions", "0"]);
  const pid = s.proc.pid;
  const a1 = agentFrom("127.0.0.1"), a2 = agentFrom("127.0.0.2", 1);
  try {
    // Warm up (threads, the store's caches), then measure.
    await initMany(a1, s.url, 2000);
    const before = rssKb(pid);
    const t0 = Date.now();
    const made = await initMany(a1, s.url, n);
    const after = rssKb(pid);
    const ok = made.filter((r) => r.sid).length;
    const per = ((after - before) * 1024) / n;
    console.log(`${n} sessions in ${Date.now() - t0} ms: RSS ${before} kB -> ${after} kB, ` +
      `${per.toFixed(0)} bytes a session`);
    t.check(`all ${n} initializes answered with a session`, ok === n,
      JSON.stringify(made.find((r) => !r.sid)));
    t.check(`RSS growth per session under ${maxKb} KB`, per < maxKb * 1024, `${per.toFixed(0)} bytes`);
    // A session made long ago still works (loaded from the store on demand).
    const old = await postOn(a1, s.url, made[0].sid, { jsonrpc: "2.0", id: 1, method: "ping" });
    t.check("the first session is still served", old.status === 200, JSON.stringify(old));
    const other = await init(a2, s.url, 1);
    t.check("another address gets a session", other.status === 200 && !!other.sid, JSON.stringify(other));
  } finally {
    a1.destroy(); a2.destroy();
    await stopServer(s);
  }
}

try {
  if (scenario === "limit") await limit();
  else if (scenario === "memory") await memory(Number(rest[0] ?? 20000), Number(rest[1] ?? 2));
  else { console.error("unknown scenario " + scenario); process.exit(2); }
} catch (e) {
  t.check("no exception", false, e.stack);
}
t.done();
