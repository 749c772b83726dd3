// Crash test (issue "Durable event log"): clients stream through `stream` and
// `ledger_append` while tidemark-server is kill -9ed at seeded random moments
// and restarted on the same SQLite database. Asserts, over the whole run:
//   - every stream's events arrive exactly once, in order (dense seqs from 1),
//     and each stream ends in exactly one response;
//   - progress of each `stream` call is exactly 1..n, once each;
//   - no resume is ever answered cursor_ahead (or any other error);
//   - no event id is ever used for two different payloads;
//   - every ledger_append the client retried until it got a result exists
//     exactly once in the ledger.
//
//   node crash_test.mjs SERVER_BINARY
// Environment: CRASH_SEED (default 1), CRASH_KILLS (default 20),
// CRASH_CLIENTS (default 4), CRASH_DEADLINE_S (default 240),
// CRASH_DURABILITY (power|process, default power), CRASH_SERVER_ARGS (extra flags).
// The long variant: CRASH_KILLS=200 CRASH_CLIENTS=8 (see docs/design.md).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: crash_test.mjs SERVER_BINARY");
  process.exit(2);
}
const SEED = Number(process.env.CRASH_SEED ?? 1);
const KILLS = Number(process.env.CRASH_KILLS ?? 20);
const CLIENTS = Number(process.env.CRASH_CLIENTS ?? 4);
const DEADLINE_MS = Number(process.env.CRASH_DEADLINE_S ?? 240) * 1000;
const DURABILITY = process.env.CRASH_DURABILITY ?? "power";
const EXTRA = (process.env.CRASH_SERVER_ARGS ?? "").split(" ").filter(Boolean);
const t0 = Date.now();

// Seeded PRNG (mulberry32): the same seed gives the same kill schedule and workload.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const killRand = rng(SEED);

const violations = [];
function violate(msg) {
  violations.push(msg);
  console.log("VIOLATION " + msg);
}

// ---- the server under test --------------------------------------------------
const dir = mkdtempSync(join(tmpdir(), "tidemark-crash-"));
const db = join(dir, "tidemark.db");
let server = null; // { proc, url, gen }
let gen = 0;
let upWaiters = [];

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(bin, ["--listen", "127.0.0.1:0", "--store", "sqlite:" + db,
      "--durability", DURABILITY, "--log-level", "warn", "--keepalive-ms", "1000", ...EXTRA],
      { stdio: ["ignore", "pipe", "inherit"] });
    let buf = "";
    const timer = setTimeout(() => reject(new Error("server did not start")), 15000);
    proc.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/^listening on (\S+)$/m);
      if (m && !server) {
        clearTimeout(timer);
        gen++;
        server = { proc, url: m[1], gen };
        const w = upWaiters;
        upWaiters = [];
        w.forEach((f) => f());
        resolve();
      }
    });
    proc.on("exit", (code, sig) => {
      if (server && server.proc === proc) server = null;
      if (!proc.killedByTest && code !== 0)
        violate(`server exited by itself (code ${code}, signal ${sig})`);
    });
  });
}

async function killServer() {
  const s = server;
  if (!s) return;
  s.proc.killedByTest = true;
  const exited = new Promise((r) => s.proc.once("exit", r));
  s.proc.kill("SIGKILL");
  await exited;
  server = null;
}

// The current server URL, waiting (bounded) while it restarts.
async function currentUrl() {
  while (!server) {
    if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
    await new Promise((r) => { upWaiters.push(r); setTimeout(r, 200); });
  }
  return server.url;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- SSE ----------------------------------------------------------------------
// Yields {id, event, data} per dispatched event; throws on a cut connection.
async function* sse(body) {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = { id: null, event: null, data: null };
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const c = line.indexOf(":");
        const f = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? "" : line.slice(c + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (f === "id") ev.id = v;
        else if (f === "event") ev.event = v;
        else if (f === "data") ev.data = ev.data === null ? v : ev.data + "\n" + v;
      }
      if (ev.data !== null) yield ev;
    }
  }
}

// ---- global checks ---------------------------------------------------------------
const payloadById = new Map(); // "session event-id" -> payload, across the whole run
const streamSeq = new Map();   // "session/stream" -> last seq received
let eventsReceived = 0, resumes = 0, posts = 0, retriedPosts = 0, dedupJson = 0;

function checkEvent(session, ev) {
  const m = /^([0-9a-f]{16})-(g|r[1-9][0-9]*)-([1-9][0-9]*)$/.exec(ev.id ?? "");
  if (!m) { violate(`bad event id ${ev.id}`); return null; }
  // Ids name a position in a stream of one session (DESIGN §3).
  const gid = session + " " + ev.id;
  const prev = payloadById.get(gid);
  if (prev !== undefined && prev !== ev.data) violate(`id ${ev.id} reused: ${prev} vs ${ev.data}`);
  else if (prev !== undefined) violate(`event ${ev.id} delivered twice`);
  payloadById.set(gid, ev.data);
  const key = session + "/" + m[2];
  const seq = Number(m[3]);
  const last = streamSeq.get(key) ?? 0;
  if (seq !== last + 1) violate(`stream ${key}: got seq ${seq} after ${last}`);
  streamSeq.set(key, Math.max(last, seq));
  eventsReceived++;
  return m[2];
}

// ---- a client ------------------------------------------------------------------------
const H = { "content-type": "application/json", accept: "application/json, text/event-stream" };

async function post(url, sid, body) {
  const h = { ...H, "mcp-protocol-version": "2025-11-25" };
  if (sid) h["mcp-session-id"] = sid;
  return fetch(url, { method: "POST", headers: h, body: JSON.stringify(body) });
}

async function connect() {
  for (;;) {
    try {
      const url = await currentUrl();
      const r = await post(url, null, { jsonrpc: "2.0", id: 0, method: "initialize",
        params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "crash", version: "1" } } });
      if (r.status !== 200) throw new Error("initialize " + r.status);
      const sid = r.headers.get("mcp-session-id");
      await r.text();
      const n = await post(url, sid, { jsonrpc: "2.0", method: "notifications/initialized" });
      await n.text();
      return sid;
    } catch (e) {
      if (e.message === "deadline") throw e;
      await sleep(20);
    }
  }
}

// One tools/call, driven to its single response across any number of kills.
async function call(sid, id, name, args) {
  const req = { jsonrpc: "2.0", id, method: "tools/call",
    params: { name, arguments: args, _meta: { progressToken: `p${id}` } } };
  let cursor = null, response = null, streamName = null;
  const progress = [];
  const consume = async (res) => {
    for await (const ev of sse(res.body)) {
      const st = checkEvent(sid, ev);
      if (st) streamName = st;
      cursor = ev.id;
      if (!ev.data) continue;
      const msg = JSON.parse(ev.data);
      if (msg.method === "notifications/progress") progress.push(msg.params.progress);
      else if (msg.id === id) {
        if (response) violate(`request ${id}: second response`);
        response = msg;
      }
    }
  };
  let attempts = 0;
  while (!response) {
    if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
    attempts++;
    try {
      const url = await currentUrl();
      let res;
      if (!cursor) {
        posts++;
        if (attempts > 1) retriedPosts++;
        res = await post(url, sid, req);
      } else {
        resumes++;
        res = await fetch(url, { headers: { accept: "text/event-stream", "mcp-session-id": sid,
          "mcp-protocol-version": "2025-11-25", "last-event-id": cursor } });
      }
      const ctype = res.headers.get("content-type") ?? "";
      if (res.status === 200 && ctype.startsWith("application/json")) {
        response = await res.json(); // a retried request answered from its record
        dedupJson++;
        break;
      }
      if (res.status === 409) { await res.text(); await sleep(30); continue; }
      if (res.status !== 200) {
        const body = await res.text();
        violate(`request ${id} (${cursor ? "resume " + cursor : "post"}): HTTP ${res.status} ${body}`);
        if (cursor) return null;
        continue;
      }
      await consume(res);
    } catch (e) {
      if (e.message === "deadline") throw e;
      // cut by a kill: resume (or re-POST if nothing arrived yet)
      await sleep(10);
    }
  }
  return { response, progress, streamName };
}

const confirmed = new Map(); // ledger entry -> count of results received

async function client(k, stopAt) {
  const rand = rng(SEED * 1000 + k);
  const sid = await connect();
  let id = 1, calls = 0;
  while (Date.now() < stopAt() && violations.length < 20) {
    const reqId = id++;
    if (rand() < 0.5) {
      const n = 20 + Math.floor(rand() * 200);
      const r = await call(sid, reqId, "stream", { n, delay_ms: Math.floor(rand() * 3) });
      if (!r) continue;
      if (r.response.error) violate(`stream ${reqId}: error ${JSON.stringify(r.response.error)}`);
      else if (r.response.result?.content?.[0]?.text !== `streamed ${n}`)
        violate(`stream ${reqId}: result ${JSON.stringify(r.response.result)}`);
      // dedup-by-JSON answers carry no progress; otherwise it must be exactly 1..n
      if (r.progress.length && (r.progress.length !== n || r.progress.some((p, i) => p !== i + 1)))
        violate(`stream ${reqId}: progress ${r.progress.length} values, expected 1..${n}: ${r.progress.slice(0, 8)}...`);
    } else {
      const entry = `c${k}-e${reqId}`;
      const r = await call(sid, reqId, "ledger_append", { entry });
      if (!r) continue;
      if (r.response.error) violate(`ledger ${entry}: error ${JSON.stringify(r.response.error)}`);
      else confirmed.set(entry, (confirmed.get(entry) ?? 0) + 1);
    }
    calls++;
  }
  return { sid, calls };
}

// ---- run -------------------------------------------------------------------------------
let killsDone = 0;
const killerRand = killRand;
try {
  await startServer();
  let stopping = false;
  const clients = Array.from({ length: CLIENTS }, (_, k) => client(k, () => (stopping ? 0 : Infinity)));
  while (killsDone < KILLS && Date.now() - t0 < DEADLINE_MS) {
    await sleep(100 + Math.floor(killerRand() * 400));
    await killServer();
    killsDone++;
    await startServer();
  }
  stopping = true;
  const results = await Promise.all(clients);
  // Every confirmed ledger entry exists exactly once.
  const url = await currentUrl();
  const sid = results[0].sid;
  const r = await call(sid, 999999, "ledger_read", {});
  const rows = r.response.result.structuredContent.entries;
  const counts = new Map();
  for (const row of rows) counts.set(row.entry, (counts.get(row.entry) ?? 0) + 1);
  for (const [entry] of confirmed)
    if (counts.get(entry) !== 1) violate(`ledger entry ${entry} exists ${counts.get(entry) ?? 0} times`);
  for (const [entry, c] of counts)
    if (!confirmed.has(entry)) violate(`ledger entry ${entry} (x${c}) was never confirmed to a client`);
  const metrics = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const ahead = /tidemark_resumes_total\{outcome="ahead"\} (\d+)/.exec(metrics)?.[1];
  if (ahead !== "0") violate(`cursor_ahead counted: ${ahead}`);
  const calls = results.reduce((a, b) => a + b.calls, 0);
  console.log(`crash test: seed ${SEED}, ${killsDone} kills, ${CLIENTS} clients, ${calls} calls, ` +
    `${eventsReceived} events, ${resumes} resumes, ${posts} POSTs (${retriedPosts} retried, ` +
    `${dedupJson} answered from records), ${confirmed.size} ledger entries, ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (killsDone < KILLS) violate(`only ${killsDone} of ${KILLS} kills before the deadline`);
  if (calls < CLIENTS * 2) violate(`too little work done: ${calls} calls`);
} catch (e) {
  violate("aborted: " + (e.stack ?? e));
} finally {
  if (server) { server.proc.killedByTest = true; server.proc.kill("SIGTERM"); }
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${violations.length === 0 ? 1 : 0} passed, ${violations.length === 0 ? 0 : 1} failed`);
process.exit(violations.length === 0 ? 0 : 1);
