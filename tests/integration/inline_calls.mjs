// inline_calls.mjs - a tool declared non-blocking and idempotent
// (TIDEMARK_TOOL_NONBLOCKING: echo, stream) runs on the thread that read its
// POST, and everything one call writes commits in one transaction: on
// SQLite at power durability, N serial calls cost about N group commits
// (tidemark_commits_total), in both eras.
// Quiet calls: a call of such a tool that is also read-only has nothing to
// make durable until it sends something. In 2025 it is answered as JSON
// and writes nothing (echo) unless it notifies (stream with a progress
// token: its stream opens at the first notification, and the answer is the
// whole stream, priming event, progress and result, each with a durable id,
// still about one commit per call) or would block (stream with delay_ms:
// TIDEMARK_EAGAIN, on a worker, recorded as before). A key-less 2026-07-28
// call asking no progress writes nothing at all. ledger_append (atomic,
// non-blocking) also runs inline: about N commits for N calls, each row
// once; with delay_ms its handler says TIDEMARK_EAGAIN and the call runs
// again on a worker. An SSE answer whose stream has ended by its first
// commit is sent whole, with its length, in one write; a stream with events
// before its end goes out as they come (chunked). Before inline calls a call cost two commits (its
// stream, record and priming event; then its response); before quiet
// calls a 2025 echo was an SSE stream and a commit.
//   node inline_calls.mjs TIDEMARK_SERVER
import { checker, startServer, stopServer, initialize, post, messages, toolCall } from "./mcp_http.mjs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: inline_calls.mjs TIDEMARK_SERVER"); process.exit(2); }
const t = checker();
const N = 40;
// A commit per call, and a few more for the server's own writes that may
// fall in the window (a busy session's touch, ephemeral sessions' deletes):
// the code before this change took 53-70 (2025), 69-70 (2026-07-28) and 81
// (ledger_append, a record barrier each) for 40 calls.
const SLACK = N / 8;
const V = "2026-07-28";
const META = { "io.modelcontextprotocol/protocolVersion": V,
  "io.modelcontextprotocol/clientInfo": { name: "inline-calls", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {} };

async function commits(url) {
  const m = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const line = m.split("\n").find((l) => l.startsWith("tidemark_commits_total"));
  return line ? Number(line.split(/\s+/)[1]) : NaN;
}

// The commit count once the writes of what came before are in (a session's
// touch, a worker call's records): the same on two reads 300 ms apart, or
// NaN after 10 s, which fails the check that uses it.
async function settledCommits(url) {
  const end = Date.now() + 10000;
  let last = await commits(url);
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 300));
    const now = await commits(url);
    if (now === last) return now;
    last = now;
  }
  return NaN;
}

let nextId = 1;
async function ledgerRows(url, sid) {
  const id = nextId++;
  const m = await messages(await post(url, sid, toolCall(id, "ledger_read", {}),
    { headers: { "mcp-protocol-version": "2025-11-25" } }));
  return m.msgs.find((x) => x.id === id)?.result?.structuredContent?.entries ?? [];
}

const LEGACY = { headers: { "mcp-protocol-version": "2025-11-25" } };

// N serial 2025 echo calls: how many were answered as JSON with their text.
async function legacyCalls(url, sid) {
  let whole = 0;
  for (let i = 0; i < N; i++) {
    const id = nextId++; // a new request each time
    const res = await post(url, sid, toolCall(id, "echo", { text: "l" + i }), LEGACY);
    const json = (res.headers.get("content-type") ?? "").startsWith("application/json");
    const m = await messages(res);
    const r = m.msgs.find((x) => x.id === id);
    if (m.status === 200 && json && r?.result?.content?.[0]?.text === "l" + i) whole++;
  }
  return whole;
}

// N serial 2025 stream calls (n progress each): how many were answered
// with the whole stream, every event with a durable id.
async function legacyStreams(url, sid, args, n) {
  let whole = 0;
  for (let i = 0; i < N; i++) {
    const id = nextId++;
    const m = await messages(await post(url, sid, toolCall(id, "stream", args, { progressToken: "p" + id }),
      LEGACY));
    const ids = m.events.filter((e) => e.id).map((e) => e.id);
    const progress = m.msgs.filter((x) => x.method === "notifications/progress").length;
    const r = m.msgs.find((x) => x.id === id);
    if (m.status === 200 && ids.length === n + 2 && new Set(ids).size === n + 2 && progress === n &&
        r?.result?.content?.[0]?.text === `streamed ${n}`) whole++;
  }
  return whole;
}

async function modernCalls(url, meta = {}) {
  let whole = 0;
  for (let i = 0; i < N; i++) {
    const body = { jsonrpc: "2.0", id: i + 1, method: "tools/call",
      params: { name: "echo", arguments: { text: "m" + i }, _meta: { ...META, ...meta } } };
    const res = await fetch(url, { method: "POST", body: JSON.stringify(body), headers: {
      "content-type": "application/json", accept: "application/json, text/event-stream",
      "mcp-protocol-version": V, "mcp-method": "tools/call", "mcp-name": "echo" } });
    const m = await messages(res);
    if (m.status === 200 && m.msgs[0]?.result?.content?.[0]?.text === "m" + i) whole++;
  }
  return whole;
}

// An SSE answer sent whole: its length known, not chunked.
function whole(res) {
  return (res.headers.get("content-type") ?? "").startsWith("text/event-stream") &&
    Number(res.headers.get("content-length")) > 0 && !res.headers.get("transfer-encoding");
}

const dir = mkdtempSync(join(tmpdir(), "tidemark-inline-"));
const s = await startServer(bin, ["--store", "sqlite:" + join(dir, "t.db"), "--durability", "power"]);
try {
  const sid = await initialize(s.url);
  await legacyCalls(s.url, sid); // warm: the session's first touch, caches
  let before = await commits(s.url);
  const lw = await legacyCalls(s.url, sid);
  let used = (await commits(s.url)) - before;
  t.check(`2025: ${N} echo calls answered as JSON`, lw === N, `${lw}`);
  // (a session's touch may fall in the window)
  t.check(`2025: ${N} quiet echo calls write (almost) nothing`, used <= 2, `${used} commits`);
  before = await commits(s.url);
  const sw = await legacyStreams(s.url, sid, { n: 3 }, 3);
  used = (await commits(s.url)) - before;
  t.check(`2025: ${N} stream calls that notify answered whole (priming, 3 progress, result; durable ids)`,
    sw === N, `${sw}`);
  t.check(`2025: ${N} serial stream calls in at most ${N + SLACK} commits`, used <= N + SLACK,
    `${used} commits`);
  const few = 4;
  const slowStreams = await legacyStreams(s.url, sid, { n: 2, delay_ms: 1 }, 2);
  t.check(`2025: stream calls that would block run on a worker, answered whole`,
    slowStreams === N, `${slowStreams}`);
  const quietStream = await messages(await post(s.url, sid, toolCall(901, "stream", { n: few }), LEGACY));
  t.check("2025: a stream call with no progress token sends nothing: JSON",
    quietStream.events.length === 0 &&
    quietStream.msgs.find((x) => x.id === 901)?.result?.content?.[0]?.text === `streamed ${few}`,
    JSON.stringify(quietStream.msgs));
  // Key-less, no progress asked, a read-only idempotent non-blocking tool:
  // nothing to make durable, so nothing is written at all. A write of what
  // came before (a session's touch, due every few seconds) can still fall in
  // a window of calls, so up to three windows are tried: calls that wrote
  // would leave no window without a commit.
  const windows = [];
  let mw = N;
  for (let w = 0; w < 3 && !windows.includes(0); w++) {
    before = await settledCommits(s.url);
    const answered = await modernCalls(s.url);
    if (answered < mw) mw = answered;
    windows.push((await commits(s.url)) - before);
  }
  t.check(`2026-07-28: ${N} echo calls answered`, mw === N, `${mw}`);
  t.check(`2026-07-28: ${N} key-less echo calls without progress write nothing`, windows.includes(0),
    `commits in each window of ${N} calls: ${windows.join(", ")}`);
  // With a progress token the call has a stream (and its store session)
  before = await commits(s.url);
  const pw = await modernCalls(s.url, { progressToken: "p" });
  used = (await commits(s.url)) - before;
  t.check(`2026-07-28: ${N} echo calls with a progress token answered`, pw === N, `${pw}`);
  // (+ the queued deletes of the calls' ephemeral sessions, batched a second later)
  t.check(`2026-07-28: ... in at most ${N + 2 * SLACK} commits`, used <= N + 2 * SLACK,
    `${used} commits`);
  // ledger_append: atomic and non-blocking: inline, its row in the same commit
  before = await commits(s.url);
  let appended = 0, sized = 0;
  const firstLedgerId = nextId;
  for (let i = 0; i < N; i++) {
    const id = nextId++;
    const res = await post(s.url, sid, toolCall(id, "ledger_append", { entry: "inline-" + i }), LEGACY);
    if (whole(res)) sized++;
    const m = await messages(res);
    if (m.msgs.find((x) => x.id === id)?.result?.structuredContent?.entry === "inline-" + i) appended++;
  }
  used = (await commits(s.url)) - before;
  t.check(`2025: ${N} ledger_append calls answered`, appended === N, `${appended}`);
  // Its stream was whole at its first commit: one response with its length
  t.check(`2025: ${N} ledger_append SSE answers each sent whole, with a Content-Length`,
    sized === N, `${sized}`);
  t.check(`2025: ${N} serial ledger_append calls in at most ${N + SLACK} commits`, used <= N + SLACK,
    `${used} commits`);
  // Each call's record was begun and completed in one commit (written once,
  // completed): a retry of its request id gets the stored answer and
  // appends nothing.
  let replayed = 0;
  for (const i of [0, N - 1]) {
    const m = await messages(await post(s.url, sid, toolCall(firstLedgerId + i, "ledger_append",
      { entry: "inline-" + i }), LEGACY));
    if (m.msgs.find((x) => x.id === firstLedgerId + i)?.result?.structuredContent?.entry === "inline-" + i)
      replayed++;
  }
  t.check("a retry of an inline ledger_append gets its recorded answer", replayed === 2, `${replayed}`);
  const rows = await ledgerRows(s.url, sid);
  t.check(`the ledger holds each of the ${N} entries once`,
    rows.length === N && new Set(rows.map((r) => r.entry)).size === N, `${rows.length} rows`);
  // With delay_ms the handler says TIDEMARK_EAGAIN and runs again on a
  // worker: its stream has its priming event before its answer, so it is
  // sent as it comes (chunked), not held until the call ends.
  const ledRes = await post(s.url, sid, toolCall(900, "ledger_append", { entry: "slow-x", delay_ms: 50 }),
    { headers: { "mcp-protocol-version": "2025-11-25" } });
  const chunked = ledRes.headers.get("transfer-encoding") === "chunked";
  const led = await messages(ledRes);
  t.check("a call that would block runs again on a worker and answers",
    led.msgs.find((x) => x.id === 900)?.result?.structuredContent?.entry === "slow-x");
  t.check("... its stream sent as it comes (chunked)", chunked,
    `transfer-encoding ${ledRes.headers.get("transfer-encoding")}`);
  const slow = (await ledgerRows(s.url, sid)).filter((r) => r.entry === "slow-x");
  t.check("... its row once", slow.length === 1, `${slow.length}`);
} finally {
  await stopServer(s);
  rmSync(dir, { recursive: true, force: true });
}
t.done();
