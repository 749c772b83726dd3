// Scenario tests of the durable store (SQLite) over raw HTTP, each starting
// and killing real tidemark-server processes on one database file:
//   resume table rows, --on-gap=event, a restored older database (cursor_ahead
//   then epoch_mismatch), sessions surviving kill -9, retry of a completed
//   request, retry of an in-flight request, re-run of an atomic tool after a
//   crash, outcome_unknown, idempotency keys, --emit=early, /metrics.
//
//   node durable_test.mjs SERVER_BINARY
import { spawn } from "node:child_process";
import { reaped } from "./reap.mjs";
import { copyFileSync, existsSync, mkdtempSync, rmSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sseEvents } from "./sse.mjs";

const bin = process.argv[2];
if (!bin) { console.error("usage: durable_test.mjs SERVER_BINARY"); process.exit(2); }
const DEADLINE = Date.now() + 120000;
const dir = mkdtempSync(join(tmpdir(), "tidemark-durable-"));
let passed = 0, failed = 0;
const procs = new Set();

function check(name, cond, detail = "") {
  if (cond) { passed++; console.log("ok   " + name); }
  else { failed++; console.log("FAIL " + name + (detail ? ": " + detail : "")); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(20);
  }
}

// ---- servers -----------------------------------------------------------------
function start(db, ...flags) {
  return new Promise((resolve, reject) => {
    const proc = reaped(spawn(bin, ["--listen", "127.0.0.1:0", "--store", "sqlite:" + db,
      "--log-level", "warn", "--keepalive-ms", "500", ...flags], { stdio: ["ignore", "pipe", "inherit"] }));
    procs.add(proc);
    let out = "";
    const t = setTimeout(() => reject(new Error("server did not start")), 15000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^listening on (\S+)$/m);
      if (m) { clearTimeout(t); resolve({ proc, url: m[1] }); }
    });
    proc.on("exit", () => procs.delete(proc));
  });
}
async function stop(s, signal = "SIGTERM") {
  if (s.proc.exitCode !== null || s.proc.signalCode) return;
  const done = new Promise((r) => s.proc.once("exit", r));
  s.proc.kill(signal);
  await done;
}

// ---- HTTP helpers --------------------------------------------------------------
const JSONH = { "content-type": "application/json", accept: "application/json, text/event-stream" };
async function initialize(url, version = "2025-11-25") {
  const r = await fetch(url, { method: "POST", headers: JSONH, body: JSON.stringify({
    jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "durable", version: "1" } } }) });
  const sid = r.headers.get("mcp-session-id");
  await r.json();
  await (await post(url, sid, { jsonrpc: "2.0", method: "notifications/initialized" })).text();
  return sid;
}
function post(url, sid, body, signal) {
  return fetch(url, { method: "POST", headers: { ...JSONH, "mcp-session-id": sid }, body: JSON.stringify(body), signal });
}
function getStream(url, sid, cursor, signal) {
  const h = { accept: "text/event-stream", "mcp-session-id": sid };
  if (cursor) h["last-event-id"] = cursor;
  return fetch(url, { headers: h, signal });
}
function toolCall(id, name, args, extraMeta = {}) {
  return { jsonrpc: "2.0", id, method: "tools/call",
    params: { name, arguments: args, _meta: { progressToken: "t" + id, ...extraMeta } } };
}
// Read SSE events; stop early (aborting the connection) when stopAfter(events) is true.
async function readEvents(res, stopAfter, ctl) {
  const events = [];
  try {
    for await (const ev of sseEvents(res.body)) {
      events.push(ev);
      if (stopAfter && stopAfter(events)) { ctl?.abort(); return events; }
    }
  } catch (e) {
    if (!ctl?.signal.aborted) throw e;
  }
  return events;
}
const seqOf = (id) => Number(id.split("-")[2]);
const epochOf = (id) => id.split("-")[0];
const streamOf = (id) => id.split("-")[1];
// The id without its mac (an id as issued before macs): "<epoch>-<stream>-<seq>".
const bare = (id) => id.split("-").slice(0, 3).join("-");
const responseOf = (events, id) => events.map((e) => e.data && JSON.parse(e.data)).find((m) => m && m.id === id);
async function errorOf(res) {
  const body = await res.json().catch(() => null);
  return { status: res.status, reason: body?.error?.data?.reason, data: body?.error?.data };
}
// Call a tool to completion on its POST stream.
async function callToEnd(url, sid, id, name, args, meta) {
  const res = await post(url, sid, toolCall(id, name, args, meta));
  return readEvents(res);
}

// ---- scenarios --------------------------------------------------------------------
async function resumeTable() {
  const db = join(dir, "table.db");
  const s = await start(db, "--retain-events", "5");
  const a = await initialize(s.url), b = await initialize(s.url);
  const ev1 = await callToEnd(s.url, a, 1, "stream", { n: 2 }); // a/r1: 1 + 2 + 1 = 4 events
  // a/r2: 22 events, 5 retained; paced so the live reader mostly keeps up with
  // retention (under a sanitizer it may fall behind and be told of a gap: the
  // expected range below is computed from the stream's head, not from how
  // many events the live reader saw)
  const ev2 = (await callToEnd(s.url, a, 2, "stream", { n: 20, delay_ms: 5 })).filter((e) => e.id);
  await callToEnd(s.url, b, 1, "stream", { n: 1 });              // b/r1: 3 events
  const last1 = ev1.at(-1).id;
  let res = await getStream(s.url, a, ev1[1].id);
  let evs = await readEvents(res);
  check("sqlite resume ok: exactly the events after the cursor",
    res.status === 200 && evs.map((e) => e.id).join() === ev1.slice(2).map((e) => e.id).join(),
    `${res.status} ${evs.map((e) => e.id)}`);
  res = await getStream(s.url, a, last1);
  evs = await readEvents(res);
  check("sqlite resume at the head of an ended stream: 200, nothing, ends", res.status === 200 && evs.length === 0);
  const rows = [
    ["malformed_cursor", a, "not-an-id", 400],
    ["unknown_stream (stream of another session, no mac)", b, bare(ev2[0].id), 400, "unknown_stream"],
    ["another session's id (its mac names that session)", b, ev2[0].id, 400, "malformed_cursor"],
    ["forged cursor ahead (seq altered, mac kept)", a,
      `${epochOf(last1)}-r1-${seqOf(last1) + 5}-${last1.split("-").slice(3).join("-")}`, 400, "malformed_cursor"],
    ["forged cursor ahead (no mac)", a, `${epochOf(last1)}-r1-${seqOf(last1) + 5}`, 400, "malformed_cursor"],
    ["epoch_mismatch", a, `0123456789abcdef-r1-2`, 400],
    ["resumption_gap", a, bare(ev2.at(-1).id).replace(/-\d+$/, "-2"), 400], // seq 2 of a/r2
  ];
  for (const [name, sid, cursor, status, reason0] of rows) {
    const reason = reason0 ?? name;
    const e = await errorOf(await getStream(s.url, sid, cursor));
    check(`sqlite ${name}`, e.status === status && e.reason === reason, JSON.stringify(e));
    if (reason === "cursor_ahead")
      check("sqlite cursor_ahead carries data.durable_head", e.data?.durable_head === seqOf(last1), JSON.stringify(e.data));
    if (reason === "resumption_gap")
      check("sqlite resumption_gap carries the exact missing range",
        JSON.stringify(e.data?.missing) === JSON.stringify([3, seqOf(ev2.at(-1).id) - 5]), JSON.stringify(e.data));
  }
  const ctl = new AbortController();
  const g1 = await getStream(s.url, a, null, ctl.signal);
  const g2 = await getStream(s.url, a, null);
  const e2 = await errorOf(g2);
  check("sqlite second standalone GET: 409 stream_attached", g1.status === 200 && e2.status === 409 && e2.reason === "stream_attached", JSON.stringify(e2));
  ctl.abort();
  const m = await (await fetch(s.url.replace(/\/mcp$/, "/metrics"))).text();
  const metric = (re) => Number(re.exec(m)?.[1] ?? NaN);
  check("metrics count resumes by outcome",
    metric(/tidemark_resumes_total\{outcome="ahead"\} (\d+)/) === 0 && // forged: not ahead
    metric(/tidemark_resumes_total\{outcome="malformed"\} (\d+)/) === 4 &&
    metric(/tidemark_resumes_total\{outcome="epoch"\} (\d+)/) === 1 &&
    metric(/tidemark_resumes_total\{outcome="gap"\} (\d+)/) === 1 &&
    metric(/tidemark_resumes_total\{outcome="conflict"\} (\d+)/) === 1 &&
    metric(/tidemark_resumes_total\{outcome="ok"\} (\d+)/) === 2, m.split("\n").filter((l) => l.includes("resumes_total")).join(" "));
  check("metrics expose appended/emitted/commit histograms",
    metric(/tidemark_events_appended_total (\d+)/) >= 28 && /tidemark_commit_latency_seconds_count \d+/.test(m) &&
    /tidemark_commit_batch_size_bucket/.test(m) && metric(/tidemark_sessions_open (\d+)/) === 2,
    m.split("\n").filter((l) => /appended|sessions_open|latency_seconds_count/.test(l)).join(" "));
  await stop(s);
}

async function gapEvent() {
  const s = await start(join(dir, "gap.db"), "--retain-events", "5", "--on-gap", "event");
  const a = await initialize(s.url);
  const ev = (await callToEnd(s.url, a, 1, "stream", { n: 20, delay_ms: 5 })).filter((e) => e.id);
  const res = await getStream(s.url, a, ev[1].id);
  const evs = await readEvents(res);
  const head = seqOf(ev.at(-1).id);
  check("--on-gap=event: 'event: gap' with the missing range first",
    res.status === 200 && evs[0]?.event === "gap" && JSON.stringify(JSON.parse(evs[0].data).missing) === JSON.stringify([3, head - 5]),
    `HTTP ${res.status}, first event ${JSON.stringify(evs[0])}`);
  check("--on-gap=event: then exactly the retained events",
    evs.slice(1).map((e) => seqOf(e.id)).join() === [head - 4, head - 3, head - 2, head - 1, head].join(),
    evs.slice(1).map((e) => e.id).join());
  await stop(s);
}

async function ageAndTtl() {
  const s = await start(join(dir, "age.db"), "--retain-seconds", "1", "--session-ttl", "2");
  const a = await initialize(s.url);
  const ev = (await callToEnd(s.url, a, 1, "stream", { n: 3 })).filter((e) => e.id);
  // Events older than 1 s are trimmed by the background sweep: the cursor at
  // seq 1 then names a gap of exactly the trimmed events.
  const e = await until("age retention to trim", async () => {
    const r = await errorOf(await getStream(s.url, a, ev[0].id));
    return r.reason === "resumption_gap" ? r : null;
  }, 8000);
  check("--retain-seconds: old events trimmed, exact missing range",
    JSON.stringify(e.data.missing) === JSON.stringify([2, seqOf(ev.at(-1).id)]), JSON.stringify(e));
  // Watch the sessions gauge (asking the session itself would keep it alive).
  await until("session to expire", async () => {
    const m = await (await fetch(s.url.replace(/\/mcp$/, "/metrics"))).text();
    return /tidemark_sessions_open 0\b/.test(m);
  }, 10000);
  const gone = await post(s.url, a, { jsonrpc: "2.0", id: 9, method: "ping" });
  check("--session-ttl: an idle session expires (404 unknown_session)",
    gone.status === 404 && (await errorOf(gone)).reason === "unknown_session");
  await stop(s);
}

async function restartAndRetries() {
  const db = join(dir, "life.db");
  let s = await start(db);
  const sid = await initialize(s.url);
  // retry of a completed request: answered from its record, effect once
  const first = responseOf(await callToEnd(s.url, sid, 10, "ledger_append", { entry: "once" }), 10);
  const again = await post(s.url, sid, toolCall(10, "ledger_append", { entry: "once" }));
  const againBody = await again.json();
  check("retry of a completed request: stored response, same result",
    again.status === 200 && JSON.stringify(againBody) === JSON.stringify(first), JSON.stringify(againBody));
  // idempotency key: a re-issue under a new request id is deduplicated too
  const k1 = responseOf(await callToEnd(s.url, sid, 11, "ledger_append", { entry: "keyed" }, { "dev.tidemark/idempotency-key": "K-1" }), 11);
  const k2res = await post(s.url, sid, toolCall(12, "ledger_append", { entry: "keyed" }, { "dev.tidemark/idempotency-key": "K-1" }));
  const k2 = await k2res.json();
  check("idempotency key: re-issue under a new id gets the stored result with its own id",
    k2.id === 12 && JSON.stringify(k2.result) === JSON.stringify(k1.result), JSON.stringify(k2));
  // A copy of a running call while its first connection still reads: it
  // waits for the call's outcome and is answered from the record.
  const ctl1 = new AbortController();
  const held = await post(s.url, sid, toolCall(21, "stream", { n: 10, delay_ms: 50 }), ctl1.signal);
  const heldEvents = readEvents(held);
  const copy = await post(s.url, sid, toolCall(21, "stream", { n: 10, delay_ms: 50 }));
  const copyType = copy.headers.get("content-type") ?? "";
  const copyBody = copyType.startsWith("application/json") ? await copy.json() : await copy.text();
  const heldResp = responseOf(await heldEvents, 21);
  check("copy of a running call beside its live connection: answered from the record, same result",
    copy.status === 200 && copyBody?.id === 21 && heldResp &&
    JSON.stringify(copyBody.result) === JSON.stringify(heldResp.result),
    `${copy.status} ${copyType} ${JSON.stringify(copyBody)}`);

  // retry after the first connection has gone: attach to the running
  // stream, replayed from its start. The server has let the connection go
  // once no SSE connection is attached (the streams gauge is back to 0).
  const ctl = new AbortController();
  const orig = await post(s.url, sid, toolCall(20, "stream", { n: 30, delay_ms: 50 }), ctl.signal);
  const seen = await readEvents(orig, (e) => e.length >= 5, ctl);
  await until("old connection gone", async () => {
    const m = await (await fetch(s.url.replace(/\/mcp$/, "/metrics"))).text();
    return /tidemark_streams_open 0\b/.test(m);
  });
  const live = await post(s.url, sid, toolCall(20, "stream", { n: 30, delay_ms: 50 }));
  const liveType = `${live.status} ${live.headers.get("content-type")}`;
  const attached = await readEvents(live);
  const resp = attached.filter((e) => e.data && JSON.parse(e.data).id === 20);
  check("retry in flight: attached stream replays from seq 1, same stream, one response",
    attached[0] && seqOf(attached[0].id) === 1 && streamOf(attached[0].id) === streamOf(seen[0].id) &&
    resp.length === 1 && attached.length === 32,
    `${liveType}: ${attached.length} events, first ${attached[0]?.id}`);

  // re-run of an atomic tool after a crash
  const ctl2 = new AbortController();
  const r30 = await post(s.url, sid, toolCall(30, "ledger_append", { entry: "atomic", delay_ms: 2000 }), ctl2.signal);
  const e30 = await readEvents(r30, (e) => e.length >= 2, ctl2); // priming + "working"
  // outcome_unknown for a tool that is neither atomic nor idempotent
  const ctl3 = new AbortController();
  const r40 = await post(s.url, sid, toolCall(40, "external_call", { delay_ms: 3000 }), ctl3.signal);
  const e40 = await readEvents(r40, (e) => e.length >= 2, ctl3);
  await stop(s, "SIGKILL");
  s = await start(db);
  const list = await post(s.url, sid, { jsonrpc: "2.0", id: 50, method: "tools/list" });
  check("session survives kill -9: new POSTs are served", list.status === 200 && (await list.json()).result?.tools?.length >= 5);
  const after30 = await readEvents(await getStream(s.url, sid, e30.at(-1).id));
  const resp30 = responseOf(after30, 30);
  check("atomic tool re-run after a crash: the resumed stream ends in its result",
    resp30?.result?.structuredContent?.entry === "atomic", JSON.stringify(resp30));
  const after40 = await readEvents(await getStream(s.url, sid, e40.at(-1).id));
  const resp40 = responseOf(after40, 40);
  check("non-idempotent tool cut by a crash: typed outcome_unknown",
    resp40?.error?.data?.reason === "outcome_unknown" && resp40.error.code === -32010, JSON.stringify(resp40));
  const retry40 = await (await post(s.url, sid, toolCall(40, "external_call", { delay_ms: 3000 }))).json();
  check("retry of the outcome_unknown request: same answer, never a silent re-run",
    retry40?.error?.data?.reason === "outcome_unknown", JSON.stringify(retry40));
  const rows = responseOf(await callToEnd(s.url, sid, 60, "ledger_read", {}), 60).result.structuredContent.entries;
  const count = (e) => rows.filter((r) => r.entry === e).length;
  check("ledger: every effect exactly once", count("once") === 1 && count("keyed") === 1 && count("atomic") === 1,
    JSON.stringify(rows.map((r) => r.entry)));
  await stop(s);
}

async function restoredDatabase() {
  const db = join(dir, "restore.db");
  const backup = join(dir, "restore-backup.db");
  let s = await start(db);
  const sid = await initialize(s.url);
  const ctl = new AbortController();
  const res = await post(s.url, sid, toolCall(1, "stream", { n: 40, delay_ms: 25 }), ctl.signal);
  const first = await readEvents(res, (e) => e.length >= 10, ctl);
  await stop(s); // clean stop: the call is left "started", the files are quiescent
  for (const ext of ["", "-wal", "-shm"]) if (existsSync(db + ext)) copyFileSync(db + ext, backup + ext);
  // Epoch 2: recovery re-runs the call to its end; the client follows it.
  s = await start(db);
  const rest = await readEvents(await getStream(s.url, sid, first.at(-1).id));
  const cursor = rest.at(-1).id; // the response, seq 42, written under epoch 2
  check("restart: the resumed stream continues to its response", responseOf(rest, 1)?.result && seqOf(cursor) === 42, cursor);
  await stop(s, "SIGKILL");
  // Put the older copy back: seqs 11.. of epoch 2 are lost and will be reused.
  for (const ext of ["", "-wal", "-shm"]) {
    if (existsSync(db + ext)) unlinkSync(db + ext);
    if (existsSync(backup + ext)) copyFileSync(backup + ext, db + ext);
  }
  // The head file beside it still says 42 commits: the store refuses to start
  // on the shorter copy unless told to accept the loss (store_faults tests the refusal).
  s = await start(db, "--accept-loss");
  const early = await errorOf(await getStream(s.url, sid, cursor));
  check("restored older database: a cursor naming a lost event gets cursor_ahead before its seq is reused",
    early.status === 400 && early.reason === "cursor_ahead" && early.data.durable_head < 42, JSON.stringify(early));
  await until("the re-run to pass seq 42", async () => {
    const e = await errorOf(await getStream(s.url, sid, cursor));
    return e.reason !== "cursor_ahead" ? e : null;
  });
  const late = await errorOf(await getStream(s.url, sid, cursor));
  check("restored older database: epoch_mismatch once the seq is reused, never a silent resume",
    late.status === 400 && late.reason === "epoch_mismatch", JSON.stringify(late));
  await stop(s);
}

async function emitEarly() {
  const s = await start(join(dir, "early.db"), "--emit", "early");
  const sid = await initialize(s.url);
  const evs = await callToEnd(s.url, sid, 1, "stream", { n: 50 });
  const durable = evs.filter((e) => e.event === "tidemark-durable").map((e) => JSON.parse(e.data).durable_head);
  const ids = evs.filter((e) => e.id).map((e) => seqOf(e.id));
  check("--emit=early: events dense and complete", ids.join() === Array.from({ length: 52 }, (_, i) => i + 1).join());
  check("--emit=early: durable head announced first (0), rising, reaching the last event",
    evs[0].event === "tidemark-durable" && durable[0] === 0 &&
    durable.every((d, i) => i === 0 || d > durable[i - 1]) && durable.at(-1) === 52, durable.join());
  // A cursor above the head that this store did not issue is not ahead.
  const e = await errorOf(await getStream(s.url, sid, `${epochOf(evs.find((x) => x.id).id)}-r1-99`));
  check("--emit=early: a forged cursor above the head is malformed_cursor", e.reason === "malformed_cursor", JSON.stringify(e));
  await stop(s);
}

try {
  const timer = setTimeout(() => { console.log("FAIL deadline"); process.exit(1); }, DEADLINE - Date.now());
  await resumeTable();
  await gapEvent();
  await ageAndTtl();
  await restartAndRetries();
  await restoredDatabase();
  await emitEarly();
  clearTimeout(timer);
} catch (e) {
  failed++;
  console.log("FAIL aborted: " + (e.stack ?? e));
} finally {
  for (const p of procs) p.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
