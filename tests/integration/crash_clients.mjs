// The client side of the crash tests (crash_test.mjs: one server;
// multinode_crash.mjs: nodes behind a load balancer): clients drive
// tools/call requests to their single response across any number of kills,
// checking every event (dense seqs from 1, no id reused for another payload,
// no duplicate) and every response.
//
//   const { client, call, stats, confirmed, payloads } =
//       makeCrashClients({ currentUrl, violate, violations, rng, seed, t0, deadlineMs, retryable });
// retryable(status, body), optional: true when an HTTP answer other than
// 200/409 is transient (a store failing over answers 503): the request is
// re-sent under its id (or its stream resumed) after a pause, not a violation.
// retryError(error), optional: true when a JSON-RPC error answer says the
// request's outcome is not settled yet (store_failed: "retry it then"); such
// an answer carries no event id (it is not durable), and the request is
// re-sent under its id (or its stream resumed) after a pause.
// refusedError(error), optional: true when a JSON-RPC error answer is a
// definite, typed refusal (the tool did not run, say): counted in
// stats.refused, the entry is not confirmed, no violation.
// progressMayDrop, optional: progress notifications a tool could not send
// (the store down) may be missing: strictly increasing within 1..n is enough
// (else exactly 1..n).
// stats.emptyStreams counts 200 text/event-stream answers that ended cleanly
// with no event and no message (a client can neither resume nor finish).

// Seeded PRNG (mulberry32): the same seed gives the same schedule and workload.
import { sseEvents } from "./sse.mjs";

export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function makeCrashClients({ currentUrl, violate, violations, rng, seed, t0, deadlineMs, retryable,
  retryError, refusedError, progressMayDrop }) {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ---- global checks ---------------------------------------------------------------
  const payloadById = new Map(); // "session event-id" -> payload, across the whole run
  const streamSeq = new Map();   // "session/stream" -> last seq received
  const stats = { eventsReceived: 0, resumes: 0, posts: 0, retriedPosts: 0, dedupJson: 0, transient: 0,
    unsettled: 0, emptyStreams: 0,
    refused: 0 };

  function checkEvent(session, ev) {
    // <epoch>-<stream>-<seq>, and the server's 12-character MAC where it adds one
    const m = /^([0-9a-f]{16})-(g|r[1-9][0-9]*)-([1-9][0-9]*)(?:-[A-Za-z0-9_-]{12})?$/.exec(ev.id ?? "");
    if (!m) { violate(`bad event id ${ev.id}`); return null; }
    // Ids name a position in a stream of one session (docs/design.md, "The contract", item 2).
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
    stats.eventsReceived++;
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
    const unsettled = (msg) => msg?.id === id && msg.error && retryError?.(msg.error);
    const consume = async (res) => {
      for await (const ev of sseEvents(res.body)) {
        if (!ev.id && ev.data) { /* a message that is not an event: only "not settled yet" may be */
          let m = null;
          try { m = JSON.parse(ev.data); } catch { /* checked below */ }
          if (unsettled(m)) { stats.unsettled++; continue; }
        }
        const st = checkEvent(sid, ev);
        if (st) streamName = st;
        let msg = null;
        if (ev.data) {
          try { msg = JSON.parse(ev.data); } catch { violate(`request ${id}: event ${ev.id} is not JSON: ${ev.data.slice(0, 100)}`); }
        }
        cursor = ev.id; /* only once the event is taken */
        if (!msg) continue;
        if (msg.method === "notifications/progress") progress.push(msg.params.progress);
        else if (msg.id === id) {
          if (response) violate(`request ${id}: second response`);
          response = msg;
        }
      }
    };
    let attempts = 0;
    while (!response) {
      if (Date.now() - t0 > deadlineMs) throw new Error("deadline");
      attempts++;
      try {
        const url = await currentUrl();
        let res;
        if (!cursor) {
          stats.posts++;
          if (attempts > 1) stats.retriedPosts++;
          res = await post(url, sid, req);
        } else {
          stats.resumes++;
          res = await fetch(url, { headers: { accept: "text/event-stream", "mcp-session-id": sid,
            "mcp-protocol-version": "2025-11-25", "last-event-id": cursor } });
        }
        const ctype = res.headers.get("content-type") ?? "";
        if (res.status === 200 && ctype.startsWith("application/json")) {
          const m = await res.json(); // a retried request answered from its record
          if (unsettled(m)) { stats.unsettled++; await sleep(100); continue; }
          response = m;
          stats.dedupJson++;
          break;
        }
        if (res.status === 409) { await res.text(); await sleep(30); continue; }
        if (res.status !== 200) {
          const body = await res.text();
          if (retryable?.(res.status, body)) { stats.transient++; await sleep(100); continue; }
          violate(`request ${id} (${cursor ? "resume " + cursor : "post"}): HTTP ${res.status} ${body}`);
          if (cursor) return null;
          continue;
        }
        const before = stats.eventsReceived + stats.unsettled;
        await consume(res);
        if (stats.eventsReceived + stats.unsettled === before) {
          stats.emptyStreams++;
          console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] request ${id} of session ${sid}: ` +
            `a 200 event stream ended with no event (${cursor ? "resume " + cursor : "post"}, attempt ${attempts})`);
        }
      } catch (e) {
        if (e.message === "deadline") throw e;
        // A harness bug is not a cut connection: report it.
        if (e instanceof TypeError && !/fetch failed|terminated|network|socket/i.test(e.message))
          violate(`request ${id}: ${e.stack ?? e}`);
        // cut by a kill: resume (or re-POST if nothing arrived yet)
        await sleep(10);
      }
    }
    return { response, progress, streamName };
  }

  // A progress list in short: runs of consecutive values as a-b.
  const brief = (p) => {
    const out = [];
    for (let i = 0; i < p.length; i++) {
      let j = i;
      while (j + 1 < p.length && p[j + 1] === p[j] + 1) j++;
      out.push(j > i ? `${p[i]}-${p[j]}` : `${p[i]}`);
      i = j;
    }
    return out.join(",").slice(0, 200);
  };

  const confirmed = new Map(); // ledger entry -> count of results received

  async function client(k, stopAt) {
    const rand = rng(seed * 1000 + k);
    const sid = await connect();
    let id = 1, calls = 0;
    while (Date.now() < stopAt() && violations.length < 20) {
      const reqId = id++;
      if (rand() < 0.5) {
        const n = 20 + Math.floor(rand() * 200);
        const r = await call(sid, reqId, "stream", { n, delay_ms: Math.floor(rand() * 3) });
        if (!r) continue;
        if (r.response.error && refusedError?.(r.response.error)) stats.refused++;
        else if (r.response.error) violate(`stream ${reqId}: error ${JSON.stringify(r.response.error)}`);
        else if (r.response.result?.content?.[0]?.text !== `streamed ${n}`)
          violate(`stream ${reqId}: result ${JSON.stringify(r.response.result)}`);
        // dedup-by-JSON answers carry no progress; otherwise it must be exactly 1..n
        const exact = (p) => p.length === n && p.every((v, i) => v === i + 1);
        const rising = (p) => p.every((v, i) => v >= 1 && v <= n && (i === 0 || v > p[i - 1]));
        if (r.progress.length && !r.response.error && !(progressMayDrop ? rising : exact)(r.progress))
          violate(`stream ${reqId}: progress ${r.progress.length} values, expected 1..${n}: ${brief(r.progress)}`);
      } else {
        const entry = `c${k}-e${reqId}`;
        // a third of them take a while, so kills land between "started" and the commit
        const delay = rand() < 0.33 ? 20 + Math.floor(rand() * 200) : 0;
        const r = await call(sid, reqId, "ledger_append", delay ? { entry, delay_ms: delay } : { entry });
        if (!r) continue;
        if (r.response.error && refusedError?.(r.response.error)) stats.refused++;
        else if (r.response.error) violate(`ledger ${entry}: error ${JSON.stringify(r.response.error)}`);
        else if (confirmed.has(entry)) violate(`ledger ${entry}: confirmed twice`);
        else confirmed.set(entry, 1);
      }
      calls++;
    }
    return { sid, calls };
  }

  // Every confirmed ledger entry exists exactly once in the ledger, and no
  // row exists that no client was told about. Read through session sid.
  async function checkLedger(sid) {
    const r = await call(sid, 999999, "ledger_read", {});
    const rows = r?.response?.result?.structuredContent?.entries;
    if (!Array.isArray(rows)) {
      violate(`ledger_read failed: ${JSON.stringify(r?.response)}`);
      return 0;
    }
    const counts = new Map();
    for (const row of rows) counts.set(row.entry, (counts.get(row.entry) ?? 0) + 1);
    for (const [entry] of confirmed)
      if (counts.get(entry) !== 1) {
        // which requests wrote them (one key twice: one request's effect twice)
        const keys = rows.filter((row) => row.entry === entry).map((row) => row.request_key?.split("/").pop());
        violate(`ledger entry ${entry} exists ${counts.get(entry) ?? 0} times${keys.length > 1 ? ` (request keys ${keys.join(", ")})` : ""}`);
      }
    for (const [entry, c] of counts)
      if (!confirmed.has(entry)) violate(`ledger entry ${entry} (x${c}) was never confirmed to a client`);
    return rows.length;
  }

  // payloads: "session event-id" -> data of every event a client received.
  return { client, call, stats, confirmed, sleep, checkLedger, payloads: payloadById };
}
