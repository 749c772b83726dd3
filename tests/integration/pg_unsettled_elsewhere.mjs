// pg_unsettled_elsewhere.mjs (CTest pg_unsettled_elsewhere): a call whose
// record could not be confirmed on one node, re-sent to another node only.
// A real PostgreSQL 15 primary with one synchronous standby
// (tests/tools/pg_cluster.sh), two tidemark-server nodes on it with
// --durability replicated and a 1 s store timeout. The standby is stopped,
// a ledger_append POSTed to node 0 is refused (its record's commit waits
// for the standby: not confirmed, the call unsettled there), the standby
// comes back, and the client re-sends the request under its id to node 1
// alone, as a load balancer may send every retry. Node 0 gets no request
// from then on. Asserts:
//   - the re-sent request reaches its result within a deadline (node 0
//     settles its call by itself once the store takes writes again; node 1
//     follows the record; node 0's lease holds, so nobody takes it over);
//   - the entry is in the ledger exactly once.
// The nodes' recoverer pauses 3 s between asking whether a commit is in
// doubt and reading the record (TIDEMARK_RECOVER_READ_DELAY_MS, a
// crash-point build), and the standby stays down 1.5 s (three recoverer
// periods) after node 0 is ready again (/readyz: its writer reconnected):
// the record's commit lands while the recoverer is between its two
// questions.
//
//   node pg_unsettled_elsewhere.mjs TIDEMARK_SERVER
// Exits 77 when the PostgreSQL server binaries are not installed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callTool, checker, initialize, sleep, startServer, stopServer, until } from "./mcp_http.mjs";
import { pgCluster, refusedTyped } from "./pg_env.mjs";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: pg_unsettled_elsewhere.mjs TIDEMARK_SERVER"); process.exit(2); }
const SETTLE_MS = 20000;
const DOWN_MS = 1500; // the standby's outage after node 0 is ready: three recoverer periods
const V = { "mcp-protocol-version": "2025-11-25" };
const t = checker();
const work = mkdtempSync(join(tmpdir(), "tidemark-pg-unsettled-"));
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

const pause = (r) => r.status === 503 || refusedTyped(r.response?.error);

try {
  const uri = (await pg("start", pgDir, 1)).split("\n")[0];
  for (let i = 0; i < 2; i++)
    nodes.push(await startServer(bin, ["--store", uri, "--durability", "replicated", "--store-timeout-ms", "1000"],
      { env: { TIDEMARK_RECOVER_READ_DELAY_MS: "3000" } }));
  const sid = await initialize(nodes[0].url);
  const warm = await callTool(nodes[1].url, sid, "warm", "ledger_append", { entry: "warm" }, {}, { headers: V });
  t.check("node 1: a call in the session succeeds", !!warm.response?.result, JSON.stringify(warm.response));

  await pg("stop-node", pgDir, 1);
  const first = await callTool(nodes[0].url, sid, "x", "ledger_append", { entry: "x" }, {}, { headers: V });
  t.check(`standby stopped: node 0 refuses the call typed (HTTP ${first.status}, ${first.response?.error?.data?.reason})`,
    pause(first), JSON.stringify(first.msgs).slice(0, 300));
  const readyz = nodes[0].url.replace(/\/mcp$/, "/readyz");
  const ready = await until("node 0 /readyz 200", async () => (await fetch(readyz).catch(() => null))?.status === 200, 10000)
    .catch(() => false);
  t.check("node 0 is ready again with the standby still stopped (its writer reconnected)", ready);
  await sleep(DOWN_MS);
  await pg("start-node", pgDir, 1);

  const t0 = Date.now();
  let last = null;
  while (Date.now() - t0 < SETTLE_MS) {
    try {
      last = await callTool(nodes[1].url, sid, "x", "ledger_append", { entry: "x" }, {},
        { headers: V, signal: AbortSignal.timeout(SETTLE_MS - (Date.now() - t0) + 1) });
    } catch (e) {
      last = { status: 0, why: `no answer within ${SETTLE_MS} ms (${e.name})` };
      break;
    }
    if (!pause(last)) break;
    await sleep(200);
  }
  t.check(`standby back: the call re-sent to node 1 alone reaches its result (${Date.now() - t0} ms)`,
    !!last?.response?.result && !last.response.result.isError, last?.why ?? JSON.stringify(last?.response).slice(0, 300));
  const cnt = await callTool(nodes[1].url, sid, "count", "ledger_read", { entry: "x" }, {}, { headers: V });
  t.check("... and the entry is in the ledger exactly once", cnt.response?.result?.structuredContent?.count === 1,
    JSON.stringify(cnt.response).slice(0, 300));
} catch (e) {
  t.check("no exception", false, e.stack);
}
clearTimeout(deadline);
if (t.failed) for (const [i, n] of nodes.entries()) console.log(`--- node ${i} log, last 2000 bytes:\n` + n.log.slice(-2000));
await cleanup();
t.done();
