// Multi-node crash test (issue 6, CTest multinode_crash): clients stream
// `stream` and `ledger_append` calls through HAProxy (round-robin, no
// stickiness) to three tidemark-server nodes sharing one Redis (AOF,
// appendfsync always); nodes are kill -9ed and restarted at seeded random
// moments. A call whose node died is finished by a surviving node once the
// dead node's lease lapses (re-run: both tools are atomic or idempotent).
// Asserts over the whole run:
//   - every stream's events arrive exactly once, in order (dense seqs from 1),
//     and each call ends in exactly one response, never an error;
//   - progress of each `stream` call is exactly 1..n, once each;
//   - no resume is ever answered with an error (cursor_ahead included), and
//     every live node's metrics count no cursor_ahead at the end;
//   - no event id is ever used for two different payloads.
// ledger_append: on Redis its atomic effect lives in each node's private
// in-memory SQLite database (see store_redis.c), so the rows are neither
// shared nor kept across a kill: this test checks that each ledger_append
// gets exactly one successful response, not the rows (docs/design.md,
// Known limitations).
//
//   node multinode_crash.mjs TIDEMARK_SERVER
// Environment: CRASH_SEED (1), CRASH_KILLS (12), CRASH_CLIENTS (4),
// CRASH_DEADLINE_S (200). Exits 77 when redis-server or haproxy is missing.
import { Cluster, missingTools } from "./multinode_env.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: multinode_crash.mjs TIDEMARK_SERVER");
  process.exit(2);
}
const missing = missingTools();
if (missing.length) {
  console.log(`SKIP: not installed: ${missing.join(", ")} (scripts/install-deps.sh installs them)`);
  process.exit(77);
}
const SEED = Number(process.env.CRASH_SEED ?? 1);
const KILLS = Number(process.env.CRASH_KILLS ?? 12);
const CLIENTS = Number(process.env.CRASH_CLIENTS ?? 4);
const DEADLINE_MS = Number(process.env.CRASH_DEADLINE_S ?? 200) * 1000;
const NODES = 3;
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

// ---- the cluster under test ------------------------------------------------------
const cl = new Cluster({ bin, nodes: NODES, quiet: !process.env.CRASH_VERBOSE });
function watchNode(i) {
  const nd = cl.nodes[i];
  nd.proc.on("exit", (code, sig) => {
    if (!nd.proc.killedByTest && code !== 0)
      violate(`node ${i} exited by itself (code ${code}, signal ${sig})`);
  });
}
async function currentUrl() {
  if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
  return cl.url;
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
      else if (confirmed.has(entry)) violate(`ledger ${entry}: confirmed twice`);
      else confirmed.set(entry, 1);
    }
    calls++;
  }
  return { sid, calls };
}

// ---- run -------------------------------------------------------------------------------
let killsDone = 0;
try {
  await cl.start();
  for (let i = 0; i < NODES; i++) watchNode(i);
  let stopping = false;
  const clients = Array.from({ length: CLIENTS }, (_, k) => client(k, () => (stopping ? 0 : Infinity)));
  while (killsDone < KILLS && Date.now() - t0 < DEADLINE_MS && violations.length < 20) {
    await sleep(300 + Math.floor(killRand() * 900));
    const i = Math.floor(killRand() * NODES);
    await cl.killNode(i, "SIGKILL");
    killsDone++;
    await sleep(Math.floor(killRand() * 500)); // sometimes two nodes are down at once
    await cl.startNode(i);
    watchNode(i);
  }
  stopping = true;
  const results = await Promise.all(clients);
  for (let i = 0; i < NODES; i++) {
    const metrics = await (await fetch(cl.nodes[i].url.replace(/\/mcp$/, "/metrics"))).text();
    const ahead = /tidemark_resumes_total\{outcome="ahead"\} (\d+)/.exec(metrics)?.[1];
    if (ahead !== "0") violate(`node ${i}: cursor_ahead counted: ${ahead}`);
  }
  const calls = results.reduce((a, b) => a + b.calls, 0);
  console.log(`multinode crash test: seed ${SEED}, ${NODES} nodes, ${killsDone} kills, ${CLIENTS} clients, ` +
    `${calls} calls, ${eventsReceived} events, ${resumes} resumes, ${posts} POSTs (${retriedPosts} retried, ` +
    `${dedupJson} answered from records), ${confirmed.size} ledger calls confirmed once, ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (killsDone < KILLS) violate(`only ${killsDone} of ${KILLS} kills before the deadline`);
  if (calls < CLIENTS * 2) violate(`too little work done: ${calls} calls`);
} catch (e) {
  violate("aborted: " + (e.stack ?? e));
} finally {
  await cl.stop();
}
console.log(`${violations.length === 0 ? 1 : 0} passed, ${violations.length === 0 ? 0 : 1} failed`);
process.exit(violations.length === 0 ? 0 : 1);
