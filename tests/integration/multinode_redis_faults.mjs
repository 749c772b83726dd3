// multinode_redis_faults.mjs (CTest multinode_redis_faults, issue 6): three
// tidemark-server nodes on one Redis behind HAProxy, and Redis misbehaving:
//  1. Redis kill -9ed and restarted (AOF, appendfsync always) while a call
//     streams: the call completes, every event exactly once and in order, and
//     a later replay of the whole stream returns the same bytes (nothing lost).
//  2. Redis brought back with an older copy of its data (copied aside mid-
//     stream): the cursor naming the last event received, now lost, is
//     answered 400 cursor_ahead or epoch_mismatch, never a silent resume.
//  3. Redis flushed (FLUSHALL): the session is gone, 404 for POST and resume,
//     and a new initialize gets a new session.
//   node multinode_redis_faults.mjs TIDEMARK_SERVER
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { sseEvents } from "./sse.mjs";
import { Cluster, missingTools, redisCli, sleep } from "./multinode_env.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: multinode_redis_faults.mjs TIDEMARK_SERVER");
  process.exit(2);
}
const missing = missingTools();
if (missing.length) {
  console.log(`SKIP: not installed: ${missing.join(", ")} (scripts/install-deps.sh installs them)`);
  process.exit(77);
}

let failures = 0;
function check(cond, msg) {
  console.log(`${cond ? "ok  " : "FAIL"} ${msg}`);
  if (!cond) failures++;
}

const H = { "content-type": "application/json", accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2025-11-25" };
const cl = new Cluster({ bin, nodes: 3 });

async function post(sid, body) {
  const h = { ...H };
  if (sid) h["mcp-session-id"] = sid;
  return fetch(cl.url, { method: "POST", headers: h, body: JSON.stringify(body) });
}

async function initialize() {
  const r = await post(null, { jsonrpc: "2.0", id: 0, method: "initialize", params: {
    protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "faults", version: "1" } } });
  if (r.status !== 200) throw new Error("initialize: HTTP " + r.status);
  const sid = r.headers.get("mcp-session-id");
  await r.text();
  await (await post(sid, { jsonrpc: "2.0", method: "notifications/initialized" })).text();
  return sid;
}

// <epoch>-<stream>-<seq>-<mac>; the mac (12 base64url characters) may hold
// '-' and end in digits, so the seq is the third field from the left.
const seqOf = (id) => Number(/^[0-9a-f]{16}-(?:g|r\d+)-(\d+)-[A-Za-z0-9_-]{12}$/.exec(id)?.[1]);
const resumeGet = (sid, cursor) => fetch(cl.url, { headers: { accept: "text/event-stream",
  "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25", "last-event-id": cursor },
  signal: AbortSignal.timeout(30000) });

// Drive one `stream` call to its response across cuts; onEvent(ev, count)
// runs for each event (it may break Redis). Returns the events in order.
async function streamCall(sid, id, n, delay, onEvent) {
  const events = [];
  let cursor = null, response = null;
  const end = Date.now() + 60000;
  while (!response && Date.now() < end) {
    try {
      const res = cursor ? await resumeGet(sid, cursor)
        : await post(sid, { jsonrpc: "2.0", id, method: "tools/call",
          params: { name: "stream", arguments: { n, delay_ms: delay }, _meta: { progressToken: "p" + id } } });
      if (res.status === 409) { await res.text(); await sleep(50); continue; }
      if (res.status !== 200) throw new Error(`HTTP ${res.status} ${await res.text()}`);
      if ((res.headers.get("content-type") ?? "").startsWith("application/json")) {
        response = await res.json();
        break;
      }
      for await (const ev of sseEvents(res.body)) {
        if (!ev.id) continue;
        events.push(ev);
        cursor = ev.id;
        if (ev.data) {
          const m = JSON.parse(ev.data);
          if (m.id === id) response = m;
        }
        if (onEvent) await onEvent(ev, events.length);
      }
    } catch (e) {
      if (/HTTP/.test(e.message)) throw e;
      await sleep(100);
    }
  }
  return { events, response };
}

function dense(events) {
  return events.every((ev, i) => seqOf(ev.id) === i + 1);
}

async function waitNodesReady(sid) {
  // A cheap request that touches Redis on whichever node answers.
  const end = Date.now() + 15000;
  while (Date.now() < end) {
    try {
      const r = await post(sid, { jsonrpc: "2.0", id: 1, method: "ping" });
      await r.text();
      if (r.status === 200) return;
    } catch { /* not yet */ }
    await sleep(100);
  }
  throw new Error("cluster did not answer after the Redis restart");
}

try {
  await cl.start();

  // ---- 1. Redis kill -9 + restart mid-stream (AOF always): nothing lost.
  {
    const sid = await initialize();
    let restarted = false;
    const { events, response } = await streamCall(sid, 10, 80, 15, async (ev, k) => {
      if (k === 30 && !restarted) {
        restarted = true;
        await cl.stopRedis("SIGKILL");
        await cl.startRedis();
      }
    });
    check(restarted, "1: Redis was restarted mid-stream");
    check(response && response.result?.content?.[0]?.text === "streamed 80",
      `1: the call completed across the Redis restart (${JSON.stringify(response?.result ?? response?.error)})`);
    check(dense(events), `1: ${events.length} events, each once, in order`);
    // replay the whole stream from its first event: the same bytes
    const res = await resumeGet(sid, events[0].id);
    const replay = [];
    if (res.status === 200) for await (const ev of sseEvents(res.body)) if (ev.id) replay.push(ev);
    check(res.status === 200 && replay.length === events.length - 1 &&
      replay.every((ev, i) => ev.id === events[i + 1].id && ev.data === events[i + 1].data),
      `1: replay after the restart returns the same ${replay.length} events (HTTP ${res.status})`);
  }

  // ---- 2. Redis back with an older copy of its data: no silent resume.
  {
    const sid = await initialize();
    const aof = join(cl.redisDir, "appendonlydir"), saved = join(cl.dir, "redis-old");
    let copied = false;
    const { events, response } = await streamCall(sid, 20, 60, 15, async (ev, k) => {
      if (k === 15 && !copied) {
        copied = true;
        const r = spawnSync("cp", ["-a", aof, saved]);
        if (r.status !== 0) throw new Error("HTTP copy failed"); // (aborts the call)
      }
    });
    check(copied && response && dense(events), `2: stream of ${events.length} events completed after the copy`);
    const last = events[events.length - 1].id;
    await cl.stopRedis("SIGKILL");
    spawnSync("rm", ["-rf", aof]);
    spawnSync("cp", ["-a", saved, aof]);
    await cl.startRedis();
    await waitNodesReady(sid);
    const head = Number(redisCli(cl.redisPort, "HGET", `tm:{${sid}}:m:r1`, "head") || "0");
    check(head < seqOf(last), `2: Redis lost events (head now ${head}, client holds seq ${seqOf(last)})`);
    // Ask every node (round-robin) a few times, also after recovery may have
    // written under the new epoch: always a typed refusal.
    const seen = new Set();
    let silent = 0;
    for (let k = 0; k < 6; k++) {
      const r = await resumeGet(sid, last);
      const body = await r.text();
      let reason = null;
      try { reason = JSON.parse(body).error?.data?.reason; } catch { /* SSE */ }
      if (r.status === 400 && (reason === "cursor_ahead" || reason === "epoch_mismatch")) seen.add(reason);
      else { silent++; console.log(`   resume of lost ${last}: HTTP ${r.status} ${body.slice(0, 200)}`); }
      await sleep(300);
    }
    check(silent === 0, `2: a cursor naming a lost event is refused (${[...seen].join(", ")}), never resumed`);
  }

  // ---- 3. FLUSHALL: the session is gone.
  {
    const sid = await initialize();
    const { events, response } = await streamCall(sid, 30, 5, 0);
    check(response && dense(events), "3: a call before the flush completed");
    redisCli(cl.redisPort, "FLUSHALL");
    const codes = [];
    for (let k = 0; k < 3; k++) { // each node in turn
      const p = await post(sid, { jsonrpc: "2.0", id: 31 + k, method: "tools/call",
        params: { name: "stream", arguments: { n: 2 } } });
      await p.text();
      const g = await resumeGet(sid, events[1].id);
      await g.text();
      codes.push(p.status, g.status);
    }
    check(codes.every((c) => c === 404), `3: after FLUSHALL every POST and resume is 404 (${codes.join(" ")})`);
    const sid2 = await initialize();
    check(sid2 && sid2 !== sid, "3: a new initialize gets a new session");
    const r2 = await streamCall(sid2, 40, 3, 0);
    check(r2.response?.result?.content?.[0]?.text === "streamed 3" && dense(r2.events),
      "3: the new session works");
  }
} catch (e) {
  check(false, "aborted: " + (e.stack ?? e));
} finally {
  await cl.stop();
}
console.log(failures ? `multinode_redis_faults: ${failures} check(s) failed` : "multinode_redis_faults: all checks passed");
process.exit(failures ? 1 : 0);
