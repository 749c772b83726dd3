// client_holes.mjs (CTest client_holes_*): tidemark-client against a hostile
// fake server (hostile_server.mjs) that plays, one scenario each, the ways a
// server can walk around the client's resumption validator. Each run is
// `tidemark-client --state S --record-effects URL call stream n=5`, and the
// client's answer is asserted: exit code, typed reason, the state it left
// (cursor, dispatch log, effects: no event logged as applied whose handler
// did not run), how often the call was POSTed, how many resumes were tried,
// how long it took and how much memory it used.
//
//   node client_holes.mjs TIDEMARK_CLIENT SCENARIO...   (no scenario: all)
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { eid, progressMsg, resultMsg, send, sseBlock, sseHead, startHostile, streamStart }
  from "./hostile_server.mjs";

const [client, ...wanted] = process.argv.slice(2);
if (!client) {
  console.error("usage: client_holes.mjs TIDEMARK_CLIENT [SCENARIO...]");
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), "tm-client-holes-"));
let passed = 0, failed = 0;
function check(name, cond, detail) {
  if (cond) { passed++; console.log("ok   " + name); }
  else { failed++; console.log("FAIL " + name + (detail !== undefined ? ": " + String(detail).slice(0, 600) : "")); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(cond, ms, what) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

// Start the client; returns {proc, done}; done resolves to its outcome.
// rss: sample its peak resident set (VmHWM) while it runs.
function startClient(args, { timeoutMs = 30000, rss = false } = {}) {
  const t0 = Date.now();
  const proc = reaped(spawn(client, args, { stdio: ["ignore", "pipe", "pipe"] }));
  let out = "", err = "", hwmKb = 0, killed = false;
  const sample = () => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${proc.pid}/status`, "utf8"));
      if (m) hwmKb = Math.max(hwmKb, Number(m[1]));
    } catch { /* exited */ }
  };
  const sampler = rss ? setInterval(sample, 5) : null;
  const timer = setTimeout(() => { killed = true; proc.kill("SIGKILL"); }, timeoutMs);
  proc.stdout.on("data", (d) => { out += d; });
  proc.stderr.on("data", (d) => { err += d; });
  // "close", not "exit": exit may come before the last of stdout is read.
  const done = new Promise((resolve) => proc.on("close", (code, sig) => {
    clearTimeout(timer);
    if (sampler) clearInterval(sampler);
    const reason = (/"reason":\s*"([a-z_]+)"/.exec(out) ?? [])[1] ?? "";
    resolve({ code, sig, out, err, reason, killed, ms: Date.now() - t0, hwmMb: hwmKb / 1024 });
  }));
  return { proc, done };
}
const runClient = (args, opts) => startClient(args, opts).done;
const brief = (r) => `exit ${r.code}${r.sig ? " " + r.sig : ""}${r.killed ? " (killed by the test)" : ""}, ` +
  `reason ${r.reason || "-"}, ${r.ms} ms; out ${r.out.replace(/\s+/g, " ").slice(0, 240)}; ` +
  `err ${r.err.split("\n").filter((l) => !l.startsWith("progress")).join(" | ").slice(0, 300)}`;

let stateN = 0;
const newState = () => join(dir, `state${++stateN}.db`);
const callArgs = (url, state, extra = []) =>
  ["--state", state, "--record-effects", ...extra, url, "call", "stream", "n=5"];

async function effectsOf(url, state) {
  const r = await runClient(["--state", state, url, "effects"]);
  try { return JSON.parse(r.out); } catch { return null; }
}
async function stateOf(url, state) {
  const r = await runClient(["--state", state, url, "state"]);
  try { return JSON.parse(r.out); } catch { return null; }
}
const seqsOf = (eff, stream) => (eff ?? []).filter((e) => e.stream === stream).map((e) => e.seq);

// The state left behind: the cursor of r1 is at `seq`, every dispatch row of
// an event that carried a message has its effect row (the handler ran in the
// transaction that logged it), and nothing of another stream was applied.
async function checkState(name, url, state, seq, effectSeqs) {
  const eff = await effectsOf(url, state);
  const st = await stateOf(url, state);
  check(`${name}: effects are r1 ${effectSeqs.join(",")} exactly once`,
    eff && seqsOf(eff, "r1").join() === effectSeqs.join() && eff.every((e) => e.n === 1) &&
    eff.every((e) => e.stream === "r1"), JSON.stringify(eff));
  const cur = st?.cursors?.find((c) => c.stream === "r1");
  check(`${name}: cursor of r1 stays at seq ${seq}`, cur && cur.seq === seq && cur.event_id === eid("r1", seq) &&
    st.cursors.length === 1, JSON.stringify(st?.cursors));
  const withMessage = (st?.dispatch ?? []).filter((d) => d.seq !== 1 || d.stream !== "r1");
  const applied = new Set((eff ?? []).map((e) => e.event_id));
  check(`${name}: no event logged as dispatched without its effect`,
    st && withMessage.every((d) => applied.has(d.event_id)) && withMessage.length === effectSeqs.length,
    JSON.stringify(st?.dispatch));
}

// A stream cut after progress 3 of 5 (cursor r1-4), whose resume is answered
// by `answer` (a function writing the GET's response). The client must refuse
// typed (exit 4, reason) and keep its cursor and effects as they were.
async function cutThenResume(name, reason, answer) {
  let callId = null;
  const srv = await startHostile({
    onCall: async (ctx) => { callId = ctx.id; await streamStart(ctx, 3, 5); ctx.res.end(); },
    onGet: (ctx) => answer(ctx, callId),
  });
  try {
    const state = newState();
    const r = await runClient(callArgs(srv.url, state, ["--timeout-ms", "10000"]));
    check(`${name}: refused, exit 4 ${reason}`, r.code === 4 && r.reason === reason && !/streamed/.test(r.out), brief(r));
    check(`${name}: one POST of the call, one resume from r1-4`, srv.stats.calls === 1 &&
      srv.stats.gets.length === 1 && srv.stats.gets[0] === eid("r1", 4),
      `calls ${srv.stats.calls}, gets ${JSON.stringify(srv.stats.gets)}`);
    await checkState(name, srv.url, state, 4, [2, 3, 4]);
  } finally { await srv.close(); }
}

const endWith = (res, blocks) => { sseHead(res, 100); for (const b of blocks) res.write(b); res.end(); };

// Control for the cases above: under an idempotency key the call may be re-sent.
async function idempotencyKeyControl() {
  const srv = await startHostile({ onCall: async (ctx) => {
    if (ctx.n === 1) return ctx.req.socket.destroy();
    await streamStart(ctx, 5, 5);
    await send(ctx.res, sseBlock({ id: eid("r1", 7), data: resultMsg(ctx.id, "streamed 5") }));
    ctx.res.end();
  } });
  try {
    const r = await runClient(callArgs(srv.url, newState(), ["--idempotency-key", "k-1", "--timeout-ms", "10000"]));
    check("idempotency_key: re-sent under its key, answered", r.code === 0 && /streamed 5/.test(r.out) &&
      srv.stats.calls === 2 && srv.stats.callKeys.every((k) => k === "k-1"),
      `${brief(r)}; calls ${srv.stats.calls} keys ${srv.stats.callKeys}`);
  } finally { await srv.close(); }
}

const scenarios = {
  // 1. The resume is answered by the result as the first event of another stream.
  stream_switch: () => cutThenResume("stream_switch", "stream_mismatch", ({ res }, id) =>
    endWith(res, [sseBlock({ id: eid("r2", 1), data: resultMsg(id, "streamed 5") })])),
  // 2. After structured ids, the resume answers with an id that does not parse.
  opaque_switch: () => cutThenResume("opaque_switch", "continuity_lost", ({ res }, id) =>
    endWith(res, [sseBlock({ id: "foreign-6", data: resultMsg(id, "streamed 5") })])),
  // 3. The result under an empty `id:` ...
  empty_id: () => cutThenResume("empty_id", "continuity_lost", ({ res }, id) =>
    endWith(res, [sseBlock({ id: "", data: resultMsg(id, "streamed 5") })])),
  // ... or under no id at all (it would inherit r1-4 by the SSE rules).
  missing_id: () => cutThenResume("missing_id", "continuity_lost", ({ res }, id) =>
    endWith(res, [sseBlock({ data: resultMsg(id, "streamed 5") })])),
  // The resume GET answered with a plain JSON response: no event, no id.
  json_on_resume: () => cutThenResume("json_on_resume", "continuity_lost", ({ res }, id) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(resultMsg(id, "streamed 5"));
  }),

  // 4. An event whose data is invalid UTF-8, or not JSON, at its right place.
  malformed_utf8: () => malformed("malformed_utf8", Buffer.from([0x7b, 0xff, 0xfe, 0x22, 0x7d])),
  not_json: () => malformed("not_json", "this is not json"),

  // 5. Garbage where the call's answer should be; the tool is not annotated
  // idempotent: the client must not POST the call again.
  garbage_sse: () => noResend("garbage_sse", ({ res }) => {
    sseHead(res);
    res.end("\u0000\u0001garbage{{{\nmore garbage\n");
  }),
  garbage_http: () => noResend("garbage_http", ({ req }) => {
    req.socket.end("this is not an HTTP response\r\n\r\n\u0000\u0001");
  }),
  silent_close: async () => {
    await noResend("silent_close", ({ req }) => { req.socket.destroy(); });
    await idempotencyKeyControl();
  },
  // The call's answer cut inside its headers: libcurl reports a complete 200
  // with no body, which is no answer.
  call_headers_cut: () => noResend("call_headers_cut", ({ req }) => {
    req.socket.end("HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 11:39:22 GMT\r\n");
  }),
  // A resume cut inside its headers is a cut, not an (empty) answer: the
  // client resumes again and gets the rest, exactly once.
  resume_headers_cut: async () => {
    let callId = null;
    const srv = await startHostile({
      onCall: async (ctx) => { callId = ctx.id; await streamStart(ctx, 3, 5); ctx.res.end(); },
      onGet: ({ req, res, n }) => {
        if (n === 1) return req.socket.end("HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 11:39:22 GMT\r\n");
        endWith(res, [sseBlock({ id: eid("r1", 5), data: progressMsg(callId, 4, 5) }),
          sseBlock({ id: eid("r1", 6), data: progressMsg(callId, 5, 5) }),
          sseBlock({ id: eid("r1", 7), data: resultMsg(callId, "streamed 5") })]);
      },
    });
    try {
      const state = newState();
      const r = await runClient(callArgs(srv.url, state, ["--timeout-ms", "10000"]));
      check("resume_headers_cut: resumed again, the result arrives (exit 0)", r.code === 0 &&
        /streamed 5/.test(r.out), brief(r));
      check("resume_headers_cut: two resumes, both from r1-4", srv.stats.gets.join() ===
        [eid("r1", 4), eid("r1", 4)].join() && srv.stats.calls === 1, JSON.stringify(srv.stats.gets));
      const eff = await effectsOf(srv.url, state);
      check("resume_headers_cut: effects r1 2..7 exactly once", seqsOf(eff, "r1").join() === "2,3,4,5,6,7" &&
        eff.every((e) => e.n === 1), JSON.stringify(eff));
    } finally { await srv.close(); }
  },
  // A resume refused 409 stream_attached (the server still holds the stream
  // on a killed client's connection) is transient: resume again.
  resume_attached: async () => {
    let callId = null;
    const srv = await startHostile({
      onCall: async (ctx) => { callId = ctx.id; await streamStart(ctx, 3, 5); ctx.res.end(); },
      onGet: ({ res, n }) => {
        if (n === 1) {
          res.writeHead(409, { "Content-Type": "application/json" });
          return res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32600,
            message: "Conflict", data: { reason: "stream_attached" } } }));
        }
        endWith(res, [sseBlock({ id: eid("r1", 5), data: progressMsg(callId, 4, 5) }),
          sseBlock({ id: eid("r1", 6), data: progressMsg(callId, 5, 5) }),
          sseBlock({ id: eid("r1", 7), data: resultMsg(callId, "streamed 5") })]);
      },
    });
    try {
      const state = newState();
      const r = await runClient(callArgs(srv.url, state, ["--timeout-ms", "10000"]));
      check("resume_attached: resumed again after 409 stream_attached (exit 0)", r.code === 0 &&
        /streamed 5/.test(r.out) && srv.stats.gets.length === 2, `${brief(r)}; gets ${srv.stats.gets.length}`);
      const eff = await effectsOf(srv.url, state);
      check("resume_attached: effects r1 2..7 exactly once", seqsOf(eff, "r1").join() === "2,3,4,5,6,7" &&
        eff.every((e) => e.n === 1), JSON.stringify(eff));
    } finally { await srv.close(); }
  },
  // A 200 with an empty body, or a 202, is no answer to a request.
  empty_answer: () => noResend("empty_answer", ({ res }) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end();
  }),
  accepted_answer: () => noResend("accepted_answer", ({ res }) => { res.writeHead(202); res.end(); }),

  // 6. retry: 999999999 after progress 3: the client must time out at
  // --timeout-ms, and a SIGTERM must leave the call resumable.
  retry_timeout: async () => {
    const srv = await startHostile({
      onCall: async (ctx) => { await streamStart(ctx, 3, 5, 999999999); ctx.res.end(); },
      onGet: ({ res }) => endWith(res, []),
    });
    try {
      const r = await runClient(callArgs(srv.url, newState(), ["--timeout-ms", "3000"]), { timeoutMs: 20000 });
      // Bounded by the deadline (plus start-up under a loaded sanitizer build), not by the retry.
      check("retry_timeout: exit 3 timeout at --timeout-ms 3000", r.code === 3 && r.reason === "timeout" &&
        r.ms >= 3000 && r.ms < 3000 + 4000, brief(r));
      check("retry_timeout: no resume sent after the deadline", srv.stats.gets.length === 0,
        JSON.stringify(srv.stats.gets));
    } finally { await srv.close(); }
  },
  retry_sigterm: async () => {
    let callId = null, ended = false;
    const srv = await startHostile({
      onCall: async (ctx) => {
        callId = ctx.id;
        await streamStart(ctx, 3, 5, 999999999);
        ctx.res.end(() => { ended = true; });
      },
      onGet: ({ res, last }) => {
        if (last !== eid("r1", 4)) return endWith(res, []);
        endWith(res, [sseBlock({ id: eid("r1", 5), data: progressMsg(callId, 4, 5) }),
          sseBlock({ id: eid("r1", 6), data: progressMsg(callId, 5, 5) }),
          sseBlock({ id: eid("r1", 7), data: resultMsg(callId, "streamed 5") })]);
      },
    });
    try {
      const state = newState();
      const c = startClient(callArgs(srv.url, state, ["--timeout-ms", "60000"]));
      await until(() => ended, 10000, "the cut");
      await sleep(300); // the client is now waiting out its (clamped) retry
      const t0 = Date.now();
      c.proc.kill("SIGTERM");
      const r = await c.done;
      check("retry_sigterm: SIGTERM ends the client promptly, exit 3", r.code === 3 && Date.now() - t0 < 5000, brief(r));
      check("retry_sigterm: nothing sent after SIGTERM", srv.stats.gets.length === 0 && srv.stats.calls === 1,
        `gets ${JSON.stringify(srv.stats.gets)} calls ${srv.stats.calls}`);
      const res = await runClient(["--state", state, "--record-effects", srv.url, "resume"]);
      check("retry_sigterm: a later resume finishes the call from r1-4", res.code === 0 &&
        /streamed 5/.test(res.out) && srv.stats.gets.join() === eid("r1", 4), `${brief(res)}; gets ${srv.stats.gets}`);
      const eff = await effectsOf(srv.url, state);
      check("retry_sigterm: effects r1 2..7 exactly once", seqsOf(eff, "r1").join() === "2,3,4,5,6,7" &&
        eff.every((e) => e.n === 1), JSON.stringify(eff));
    } finally { await srv.close(); }
  },

  // 7. retry: 0 and one `event: ping` per resume: pings are not progress.
  storm: async () => {
    const srv = await startHostile({
      onCall: async (ctx) => { await streamStart(ctx, 1, 5, 0); ctx.res.end(); },
      onGet: ({ res }) => { sseHead(res, 0); res.end(sseBlock({ event: "ping", data: "{}" })); },
    });
    try {
      const r = await runClient(callArgs(srv.url, newState(), ["--timeout-ms", "5000"]), { timeoutMs: 20000 });
      check("storm: ends in transport failure (exit 3) by --timeout-ms", r.code === 3 &&
        ["timeout", "reconnect_exhausted"].includes(r.reason) && r.ms < 5000 + 4000, brief(r));
      check("storm: resumes bounded by the attempt budget (<= 8)", srv.stats.gets.length <= 8 &&
        srv.stats.gets.length >= 2, `${srv.stats.gets.length} resume GETs`);
      check("storm: the call POSTed once", srv.stats.calls === 1, `${srv.stats.calls} POSTs`);
    } finally { await srv.close(); }
  },

  // 8. An emit-early server that never announces anything durable, sending
  // 400 events of 1 MB: the held-back bytes are bounded, the stream refused.
  early_flood: async () => {
    const big = "x".repeat(1000000);
    const srv = await startHostile({ onCall: async (ctx) => {
      sseHead(ctx.res, 100);
      await send(ctx.res, sseBlock({ event: "tidemark-durable", data: JSON.stringify({ durable_head: 0 }) }));
      await send(ctx.res, sseBlock({ id: eid("r1", 1), data: "" }));
      for (let p = 1; p <= 400; p++)
        if (!await send(ctx.res, sseBlock({ id: eid("r1", p + 1), data: progressMsg(ctx.token, p, 400, big) }))) return;
      if (ctx.n <= 2) ctx.res.end(); // later re-sends are held open until the timeout
    } });
    try {
      const state = newState();
      const r = await runClient(callArgs(srv.url, state, ["--timeout-ms", "20000"]), { timeoutMs: 40000, rss: true });
      check("early_flood: refused, exit 4 held_back_overflow", r.code === 4 && r.reason === "held_back_overflow", brief(r));
      check(`early_flood: peak RSS bounded (< 100 MB): ${r.hwmMb.toFixed(1)} MB`, r.hwmMb > 0 && r.hwmMb < 100);
      check("early_flood: the call POSTed once", srv.stats.calls === 1, `${srv.stats.calls} POSTs`);
      const eff = await effectsOf(srv.url, state);
      check("early_flood: nothing applied (nothing was durable)", eff && eff.length === 0, JSON.stringify(eff));
    } finally { await srv.close(); }
  },

  // 9. An id of 100 KB mid-stream, and an id with a NUL byte: the fault named
  // is the id's, and the cursor stays where it was.
  long_id: () => badId("long_id", Buffer.from("x".repeat(100 * 1024))),
  nul_id: () => badId("nul_id", Buffer.from(`${eid("r1", 3)}\u0000junk`)),
};

// Progress 1 (seq 2), then seq 3 with bad data, then the rest of a good stream.
async function malformed(name, data) {
  const srv = await startHostile({ onCall: async (ctx) => {
    await streamStart(ctx, 1, 5);
    await send(ctx.res, sseBlock({ id: eid("r1", 3), data }));
    for (let p = 3; p <= 5; p++) await send(ctx.res, sseBlock({ id: eid("r1", p + 1), data: progressMsg(ctx.token, p, 5) }));
    await send(ctx.res, sseBlock({ id: eid("r1", 7), data: resultMsg(ctx.id, "streamed 5") }));
    ctx.res.end();
  } });
  try {
    const state = newState();
    const r = await runClient(callArgs(srv.url, state, ["--timeout-ms", "10000"]));
    check(`${name}: refused, exit 4 malformed_event`, r.code === 4 && r.reason === "malformed_event", brief(r));
    await checkState(name, srv.url, state, 2, [2]);
  } finally { await srv.close(); }
}

async function noResend(name, answer) {
  const srv = await startHostile({ onCall: answer });
  try {
    const r = await runClient(callArgs(srv.url, newState(), ["--timeout-ms", "10000"]));
    check(`${name}: uncertainty reported, exit 4 continuity_unprovable`, r.code === 4 &&
      r.reason === "continuity_unprovable", brief(r));
    check(`${name}: the call POSTed exactly once`, srv.stats.calls === 1,
      `${srv.stats.calls} POSTs of the call (${srv.stats.sockets} connections)`);
  } finally { await srv.close(); }
}

async function badId(name, id) {
  const srv = await startHostile({ onCall: async (ctx) => {
    await streamStart(ctx, 1, 5);
    await send(ctx.res, Buffer.concat([Buffer.from("id: "), id, Buffer.from("\n"),
      Buffer.from(`data: ${progressMsg(ctx.token, 2, 5)}\n\n`)]));
    for (let p = 3; p <= 5; p++) await send(ctx.res, sseBlock({ id: eid("r1", p + 1), data: progressMsg(ctx.token, p, 5) }));
    await send(ctx.res, sseBlock({ id: eid("r1", 7), data: resultMsg(ctx.id, "streamed 5") }));
    ctx.res.end();
  } });
  try {
    const state = newState();
    const r = await runClient(callArgs(srv.url, state, ["--timeout-ms", "10000"]));
    check(`${name}: refused, exit 4 malformed_event_id`, r.code === 4 && r.reason === "malformed_event_id", brief(r));
    await checkState(name, srv.url, state, 2, [2]);
  } finally { await srv.close(); }
}

const names = wanted.length ? wanted : Object.keys(scenarios);
try {
  for (const n of names) {
    if (!scenarios[n]) { failed++; console.log(`FAIL unknown scenario ${n}`); continue; }
    try { await scenarios[n](); } catch (e) { failed++; console.log(`FAIL ${n}: aborted: ${e.stack ?? e}`); }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
