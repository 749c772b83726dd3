// pg_commits.mjs (CTest pg_commits): what one call costs in commits that
// wait for a standby, on a real PostgreSQL 15 primary with one synchronous
// standby (tests/tools/pg_cluster.sh) and tidemark-server --durability
// replicated. A 2025 ledger_append (atomic, non-blocking) runs on the
// thread that read its POST: its record's begin, its stream's priming
// event, its row and its result commit together, the store checking in
// that transaction that the record is this node's: N serial calls cost at
// most N + slack commits (tidemark_commits_total). Before, the begin was
// waited for on its own and the row and result came in a second commit:
// 2N (and 3N before the priming event went with the begin). Every call
// answered, each row once, a retry of a request id answered from its
// record and appending nothing.
//
//   node pg_commits.mjs TIDEMARK_SERVER
// Exits 77 when the PostgreSQL server binaries are not installed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, initialize, messages, post, startServer, stopServer, toolCall, ledgerCount } from "./mcp_http.mjs";
import { pgCluster } from "./pg_env.mjs";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: pg_commits.mjs TIDEMARK_SERVER"); process.exit(2); }
const N = 30;
// the server's own writes that may fall in the window (a session's touch, a
// block of stream numbers, a retried batch); 2N before the change, far above
const SLACK = 8;
const LEGACY = { headers: { "mcp-protocol-version": "2025-11-25" } };
const t = checker();
const work = mkdtempSync(join(tmpdir(), "tidemark-pg-commits-"));
const pgDir = join(work, "pg");
const pg = (...a) => pgCluster(!!process.env.PG_VERBOSE, ...a);
let node = null;
let last = null; // the last call answered wrongly
const deadline = setTimeout(() => {
  console.log("FAIL deadline (100 s)");
  cleanup().then(() => process.exit(1));
}, 100000);

async function cleanup() {
  if (node) await stopServer(node).catch(() => {});
  node = null;
  await pg("stop", pgDir).catch(() => {});
  rmSync(work, { recursive: true, force: true });
}

async function commits(url) {
  const m = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const line = m.split("\n").find((l) => l.startsWith("tidemark_commits_total"));
  return line ? Number(line.split(/\s+/)[1]) : NaN;
}

async function append(url, sid, id, entry) {
  const m = await messages(await post(url, sid, toolCall(id, "ledger_append", { entry }), LEGACY));
  const r = { ok: m.msgs.find((x) => x.id === id)?.result?.structuredContent?.entry === entry,
    primed: m.events.length > 0 && !!m.events[0].id && m.events[0].data === "" };
  if (!r.ok || !r.primed) last = { status: m.status, msgs: m.msgs };
  return r;
}

try {
  const uri = (await pg("start", pgDir, 1)).split("\n")[0];
  node = await startServer(bin, ["--store", uri, "--durability", "replicated"]);
  const sid = await initialize(node.url);
  await append(node.url, sid, "warm", "warm"); // the session's first touch, its stream numbers
  const before = await commits(node.url);
  let answered = 0, primed = 0;
  for (let i = 0; i < N; i++) {
    const r = await append(node.url, sid, i + 1, "c" + i);
    answered += r.ok;
    primed += r.primed;
  }
  const used = (await commits(node.url)) - before;
  t.check(`${N} ledger_append calls answered`, answered === N, `${answered} (${JSON.stringify(last)})`);
  t.check(`... each stream opened by a priming event with an id`, primed === N, `${primed}`);
  t.check(`${N} serial calls in at most ${N + SLACK} commits (${used})`, used <= N + SLACK, `${used} commits`);
  const again = await append(node.url, sid, 1, "c0");
  t.check("a retry of request 1 is answered from its record", again.ok);
  for (const i of [0, N - 1]) {
    const n = await ledgerCount(node.url, sid, "c" + i);
    t.check(`entry c${i} is in the ledger once`, n === 1, `${n}`);
  }
} catch (e) {
  t.check("no exception", false, e.stack);
}
clearTimeout(deadline);
if (t.failed && node) console.log("--- node log, last 2000 bytes:\n" + node.log.slice(-2000));
await cleanup();
t.done();
