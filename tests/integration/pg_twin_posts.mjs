// pg_twin_posts.mjs (CTest pg_twin_posts): one request POSTed to two nodes
// of a PostgreSQL store at the same moment, as a client that timed out on
// one node and re-sent it through a load balancer to the other does. A
// real PostgreSQL 15 primary (tests/tools/pg_cluster.sh), two
// tidemark-server nodes on it whose commits are slowed
// (TIDEMARK_COMMIT_DELAY_MS, a slow store: both nodes read the request's
// record as absent before either's begin commits). The tool is `stream`,
// annotated idempotent. Asserts, for every pair:
//   - both POSTs reach the request's one response: on the stream they were
//     answered with, or by resuming that stream from its last event id
//     within a deadline (a stream no record names never ends: a client
//     holding its events would wait on it forever);
//   - exactly one stream in the store holds the call's events (one run is
//     the request's; the other node's POST follows it).
// Then the same for `ledger_append` (atomic, not idempotent): there each
// node's begin is not waited for; the call runs at once and its begin,
// row and response commit together, the store checking in that
// transaction whose the record is. Asserts for every pair: both POSTs get
// the request's one response (the loser from the winner's record; a 409
// request_in_flight is re-sent until answered), and the entry is in the
// ledger exactly once. With each pair, 100 ms later, the same request is
// re-sent once to each node while both runs are in flight (a client's
// retry on the same node): each must reach the response from the one POST
// (its stream, resumed if cut, or JSON from the record), never a stream of
// a run that lost.
//
//   node pg_twin_posts.mjs TIDEMARK_SERVER_CRASHPOINTS
// Environment: TWIN_PAIRS (4), TWIN_DELAY_MS (300), PG_VERBOSE=1.
// Exits 77 when the PostgreSQL server binaries are not installed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, initialize, ledgerCount, messages, post, startServer, stopServer, toolCall } from "./mcp_http.mjs";
import { pgCluster } from "./pg_env.mjs";
import { sseEvents } from "./sse.mjs";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: pg_twin_posts.mjs TIDEMARK_SERVER_CRASHPOINTS"); process.exit(2); }
const PAIRS = Number(process.env.TWIN_PAIRS ?? 4);
const DELAY_MS = Number(process.env.TWIN_DELAY_MS ?? 300);
const RESUME_MS = 8000;
const t = checker();
const work = mkdtempSync(join(tmpdir(), "tidemark-pg-twin-"));
const pgDir = join(work, "pg");
const pg = (...a) => pgCluster(!!process.env.PG_VERBOSE, ...a);
const nodes = [];
const deadline = setTimeout(() => {
  console.log("FAIL deadline (120 s)");
  cleanup().then(() => process.exit(1));
}, 120000);

async function cleanup() {
  for (const n of nodes.splice(0)) await stopServer(n).catch(() => {});
  await pg("stop", pgDir).catch(() => {});
  if (!process.env.PG_KEEP) rmSync(work, { recursive: true, force: true });
}

const isResponse = (m, id) => m && m.id === id && (m.result || m.error);

// Resume the stream of event `last` until the response of id, or the deadline.
async function resume(url, sid, last, id) {
  const ctl = AbortSignal.timeout(RESUME_MS);
  try {
    const res = await fetch(url, { signal: ctl, headers: { accept: "text/event-stream", "mcp-session-id": sid,
      "mcp-protocol-version": "2025-11-25", "last-event-id": last } });
    if (res.status !== 200) return { why: `resume answered HTTP ${res.status}` };
    for await (const ev of sseEvents(res.body)) {
      const m = ev.data ? JSON.parse(ev.data) : null;
      if (isResponse(m, id)) return { response: m };
    }
    return { why: `the resumed stream of ${last} ended without the response` };
  } catch (e) {
    return { why: `no response resuming from ${last} within ${RESUME_MS} ms (${e.name})` };
  }
}

// POST the call to url and follow it to its response.
async function follow(url, sid, id) {
  const res = await post(url, sid, toolCall(id, "stream", { n: 5 }, { progressToken: `t${id}` }),
    { headers: { "mcp-protocol-version": "2025-11-25" } });
  const m = await messages(res);
  const direct = m.msgs.find((x) => isResponse(x, id));
  if (direct) return { response: direct, how: `HTTP ${m.status}` };
  const last = m.events.filter((e) => e.id).pop()?.id;
  if (!last) return { why: `HTTP ${m.status}, no response and no event id: ${JSON.stringify(m.msgs).slice(0, 200)}` };
  const r = await resume(url, sid, last, id);
  return { ...r, how: `resumed from ${last}` };
}

// POST ledger_append {entry} as request id to url until it is answered
// with a response (a 409 request_in_flight: the other node's run is not
// committed yet; re-sent under the same id), within RESUME_MS.
async function appendOnce(url, sid, id, entry) {
  const until = Date.now() + RESUME_MS;
  let why = "";
  while (Date.now() < until) {
    const m = await messages(await post(url, sid, toolCall(id, "ledger_append", { entry }),
      { headers: { "mcp-protocol-version": "2025-11-25" } }));
    const r = m.msgs.find((x) => isResponse(x, id));
    if (m.status !== 409 && r) return { response: r, how: `HTTP ${m.status}` };
    why = `HTTP ${m.status}: ${JSON.stringify(m.msgs).slice(0, 200)}`;
    await new Promise((res) => setTimeout(res, 100));
  }
  return { why: `no response within ${RESUME_MS} ms (last: ${why})` };
}

// One POST of ledger_append (409 request_in_flight re-sent) followed to
// its response: on the stream it was answered with, resumed from its last
// event id if the stream ended without it.
async function appendFollow(url, sid, id, entry) {
  const until = Date.now() + RESUME_MS;
  while (Date.now() < until) {
    const m = await messages(await post(url, sid, toolCall(id, "ledger_append", { entry }),
      { headers: { "mcp-protocol-version": "2025-11-25" } }));
    if (m.status === 409) {
      await new Promise((res) => setTimeout(res, 100));
      continue;
    }
    const direct = m.msgs.find((x) => isResponse(x, id));
    if (direct) return { response: direct, how: `HTTP ${m.status}` };
    const last = m.events.filter((e) => e.id).pop()?.id;
    if (!last) return { why: `HTTP ${m.status}, no response and no event id` };
    const r = await resume(url, sid, last, id);
    return { ...r, how: `resumed from ${last}` };
  }
  return { why: `409 for ${RESUME_MS} ms` };
}

async function streamsHolding(token) {
  const out = await pg("psql", pgDir, 0, "SELECT count(DISTINCT sid) FROM tm_events " +
    `WHERE position('"progressToken":"${token}"' in convert_from(data, 'UTF8')) > 0`);
  return Number(out);
}

try {
  const uri = (await pg("start", pgDir, 0)).split("\n")[0];
  const env = { TIDEMARK_COMMIT_DELAY_MS: String(DELAY_MS) };
  for (let i = 0; i < 2; i++) nodes.push(await startServer(bin, ["--store", uri], { env }));
  const sid = await initialize(nodes[0].url);
  // Each node's first call of the session (its first touch, its block of
  // stream numbers) before the pairs, so a pair's POSTs wait only on their begins.
  for (let i = 0; i < 2; i++) {
    const w = await follow(nodes[i].url, sid, `warm${i}`);
    t.check(`node ${i}: a call succeeds`, !!w.response?.result, w.why ?? JSON.stringify(w.response));
  }
  for (let k = 1; k <= PAIRS; k++) {
    const id = 100 + k;
    const [a, b] = await Promise.all(nodes.map((n) => follow(n.url, sid, id)));
    const ok = (r) => r.response?.result?.content?.[0]?.text === "streamed 5";
    t.check(`pair ${k}: the POST to node 0 reaches the response (${a.how})`, ok(a), a.why ?? JSON.stringify(a.response));
    t.check(`pair ${k}: the POST to node 1 reaches the response (${b.how})`, ok(b), b.why ?? JSON.stringify(b.response));
    const n = await streamsHolding(`t${id}`);
    t.check(`pair ${k}: one stream holds the call's events (${n})`, n === 1);
  }
  const lost = () => nodes.reduce((a, n) => a + (n.log.match(/is another node's \(begun there first/g) ?? []).length, 0);
  const lostBefore = lost();
  for (let k = 1; k <= PAIRS; k++) {
    const id = 200 + k, entry = `twin-${k}`;
    const later = (n) => new Promise((res) => setTimeout(res, 100)).then(() => appendFollow(n.url, sid, id, entry));
    const [a, b, ra, rb] = await Promise.all([...nodes.map((n) => appendOnce(n.url, sid, id, entry)),
      ...nodes.map(later)]);
    const ok = (r) => r.response?.result?.structuredContent?.entry === entry;
    t.check(`ledger pair ${k}: node 0 answered (${a.how})`, ok(a), a.why ?? JSON.stringify(a.response));
    t.check(`ledger pair ${k}: node 1 answered (${b.how})`, ok(b), b.why ?? JSON.stringify(b.response));
    t.check(`ledger pair ${k}: node 0's retry answered (${ra.how})`, ok(ra), ra.why ?? JSON.stringify(ra.response));
    t.check(`ledger pair ${k}: node 1's retry answered (${rb.how})`, ok(rb), rb.why ?? JSON.stringify(rb.response));
    const count = await ledgerCount(nodes[0].url, sid, entry);
    t.check(`ledger pair ${k}: the entry is in the ledger once`, count === 1, `${count}`);
  }
  // the race ran: a run that lost it wrote nothing and said so; at most one
  // a pair (a retry that ran the call again would be another)
  const races = lost() - lostBefore;
  if (process.env.PG_VERBOSE)
    for (const n of nodes) console.log(n.log.split("\n").filter((l) => /another node's|begun|WARN/.test(l)).join("\n"));
  t.check(`ledger pairs: one run of a pair lost the race and wrote nothing (${races} of ${PAIRS})`,
    races >= 1 && races <= PAIRS);
} catch (e) {
  t.check("no exception", false, e.stack);
}
clearTimeout(deadline);
if (t.failed) for (const [i, n] of nodes.entries()) console.log(`--- node ${i} log, last 2000 bytes:\n` + n.log.slice(-2000));
await cleanup();
t.done();
