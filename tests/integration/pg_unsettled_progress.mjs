// pg_unsettled_progress.mjs (CTest pg_unsettled_progress): a streaming call
// whose writes are in doubt is not run again until the doubt is gone. A real
// PostgreSQL 15 primary with one synchronous standby
// (tests/tools/pg_cluster.sh), one tidemark-server on it with --durability
// replicated and a 1 s store timeout. A `stream` call (atomic: re-run after a
// failed final write, progress continuing from the highest value on the
// stream) is POSTed; after its first progress events the standby is stopped:
// the call's later writes wait for the standby, are not confirmed (the
// writer closes the connection; each backend still waits, and commits once
// the standby is back), and its result fails, so the call is unsettled. The
// standby stays down while the recoverer makes several passes with the
// writer connected again. Then it comes back, every waiting COMMIT lands,
// and the client resumes the stream from its last event to the result.
// Asserts:
//   - the call reaches its single result;
//   - the stream, read again from its first event, carries progress 1..N
//     exactly once, in order (a re-run that read the stream while commits
//     were in doubt started below values that landed later and sent them
//     again; a batch sent beside the doubtful ones took its seqs first);
//   - every event id of the stream is dense and unique;
//   - the node said it held writes back for a COMMIT in doubt (the case
//     this test is about happened).
//
//   node pg_unsettled_progress.mjs TIDEMARK_SERVER
// Exits 77 when the PostgreSQL server binaries are not installed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, initialize, post, sleep, startServer, stopServer, toolCall, until } from "./mcp_http.mjs";
import { pgCluster } from "./pg_env.mjs";
import { sseEvents } from "./sse.mjs";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: pg_unsettled_progress.mjs TIDEMARK_SERVER"); process.exit(2); }
const N = 60, DELAY_MS = 100;   // the call runs about 6 s
const DOWN_MS = 2500;           // the standby's outage once the call is unsettled: five recoverer passes
const SETTLE_MS = 30000;
const V = { "mcp-protocol-version": "2025-11-25" };
const t = checker();
const work = mkdtempSync(join(tmpdir(), "tidemark-pg-progress-"));
const pgDir = join(work, "pg");
const pg = (...a) => pgCluster(!!process.env.PG_VERBOSE, ...a);
let node = null;
const deadline = setTimeout(() => {
  console.log("FAIL deadline (150 s)");
  cleanup().then(() => process.exit(1));
}, 150000);

async function cleanup() {
  if (node) await stopServer(node).catch(() => {});
  node = null;
  await pg("stop", pgDir).catch(() => {});
  if (!process.env.PG_KEEP) rmSync(work, { recursive: true, force: true });
}

// Read an SSE answer: every event {id, msg}; onEvent may act on each.
async function readStream(res, onEvent = () => {}) {
  const out = [];
  if (!(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    const body = await res.text();
    return { events: out, json: body ? JSON.parse(body) : null, status: res.status };
  }
  try {
    for await (const ev of sseEvents(res.body)) {
      const e = { id: ev.id, msg: ev.data ? JSON.parse(ev.data) : null };
      out.push(e);
      await onEvent(e);
    }
  } catch { /* cut: the caller resumes */ }
  return { events: out, status: res.status };
}

const resume = (sid, cursor) => fetch(node.url, { headers: { accept: "text/event-stream", "mcp-session-id": sid,
  ...V, "last-event-id": cursor } });
const progressOf = (evs) => evs.filter((e) => e.msg?.method === "notifications/progress")
  .map((e) => e.msg.params.progress);
const resultOf = (evs) => evs.find((e) => e.msg?.id === "s" && e.id)?.msg;

try {
  const uri = (await pg("start", pgDir, 1)).split("\n")[0];
  node = await startServer(bin, ["--store", uri, "--durability", "replicated", "--store-timeout-ms", "1000"]);
  const sid = await initialize(node.url);

  let stopped = null;
  const first = await readStream(await post(node.url, sid, toolCall("s", "stream", { n: N, delay_ms: DELAY_MS },
    { progressToken: "p" }), { headers: V }), async (e) => {
    if (!stopped && e.msg?.params?.progress >= 3) stopped = pg("stop-node", pgDir, 1);
  });
  await stopped;
  const ids = first.events.filter((e) => e.id);
  const unsettled = first.events.find((e) => !e.id && e.msg?.error?.data?.reason === "store_failed");
  t.check(`standby stopped after progress 3: the call's result is not confirmed (${ids.length} events, ` +
    `then ${unsettled ? "store_failed" : "no store_failed"})`, ids.length >= 3 && !!unsettled && !resultOf(first.events),
  JSON.stringify(first.events.slice(-2)).slice(0, 300));

  const readyz = node.url.replace(/\/mcp$/, "/readyz");
  const ready = await until("/readyz 200", async () => (await fetch(readyz).catch(() => null))?.status === 200, 10000)
    .catch(() => false);
  t.check("the writer is connected again with the standby still stopped", ready);
  await sleep(DOWN_MS); // recoverer passes while the call's COMMITs are in doubt
  await pg("start-node", pgDir, 1);

  // Resume from the last event until the result arrives.
  let cursor = ids.at(-1)?.id, result = null;
  const t0 = Date.now();
  while (!result && Date.now() - t0 < SETTLE_MS) {
    const r = await readStream(await resume(sid, cursor));
    for (const e of r.events) if (e.id) cursor = e.id;
    result = resultOf(r.events);
    if (!result) await sleep(200);
  }
  t.check(`standby back: the call reaches its result (${Date.now() - t0} ms)`,
    result?.result?.content?.[0]?.text === `streamed ${N}`, JSON.stringify(result).slice(0, 300));

  // The whole stream again, from its first event.
  const all = ids.slice(0, 1).concat((await readStream(await resume(sid, ids[0].id))).events.filter((e) => e.id));
  const seqs = all.map((e) => Number(e.id.split("-")[2]));
  t.check(`the stream's event ids are dense and unique (${seqs.length} events)`,
    seqs.every((s, i) => i === 0 || s === seqs[i - 1] + 1), seqs.join(","));
  const p = progressOf(all);
  t.check(`its progress is 1..${N}, each once, in order (${p.length} values)`,
    p.length === N && p.every((v, i) => v === i + 1), p.join(","));
  t.check("one result on the stream", all.filter((e) => e.msg?.id === "s").length === 1);
  t.check("the node held writes back while a COMMIT was in doubt", /still in doubt/.test(node.log));
} catch (e) {
  t.check("no exception", false, e.stack);
}
clearTimeout(deadline);
if (t.failed && node) console.log("--- node log, last 3000 bytes:\n" + node.log.slice(-3000));
await cleanup();
t.done();
