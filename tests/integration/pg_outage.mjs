// pg_outage.mjs (CTest pg_outage): a PostgreSQL store that loses its only
// synchronous standby, and gets it back. A real PostgreSQL 15 cluster (a
// primary and one standby, tests/tools/pg_cluster.sh), one tidemark-server
// on it with --durability replicated and a 1 s store timeout. Asserts:
//   - with the standby stopped, a streaming call and a ledger_append are
//     refused typed within the store timeout (503 with data.reason, or an
//     answer stream carrying a store_failed error without an event id, never
//     an empty stream), and nothing is emitted;
//   - with the standby back, each refused request re-sent under its id
//     reaches its end (the stream call's result, the append acknowledged)
//     within a deadline, and the append is in the ledger exactly once;
//   - a new call after that succeeds.
// The short sibling of pg_failover's standby-loss phase, run in make test.
//
//   node pg_outage.mjs TIDEMARK_SERVER
// Exits 77 when the PostgreSQL server binaries are not installed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callTool, checker, initialize, messages, post, startServer, stopServer, toolCall, until }
  from "./mcp_http.mjs";
import { pgCluster } from "./pg_env.mjs";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: pg_outage.mjs TIDEMARK_SERVER"); process.exit(2); }
const STORE_TIMEOUT_MS = 1000;
const V = { headers: { "mcp-protocol-version": "2025-11-25" } };
const t = checker();
const work = mkdtempSync(join(tmpdir(), "tidemark-pg-outage-"));
const pgDir = join(work, "pg");
const pg = (...a) => pgCluster(!!process.env.PG_VERBOSE, ...a);
let srv = null;
const deadline = setTimeout(() => { console.log("FAIL deadline (150 s)"); cleanup().then(() => process.exit(1)); }, 150000);

async function cleanup() {
  if (srv) await stopServer(srv).catch(() => {});
  srv = null;
  await pg("stop", pgDir).catch(() => {});
  if (!process.env.PG_KEEP) rmSync(work, { recursive: true, force: true });
}

// Typed: a 503 with data.reason, or a 200 stream whose only message is a
// store_* error and whose events carry no id with data.
async function refused(url, sid, id, name, args) {
  const t0 = Date.now();
  const res = await post(url, sid, toolCall(id, name, args, { progressToken: id }),
    { ...V, signal: AbortSignal.timeout(STORE_TIMEOUT_MS + 15000) });
  const m = await messages(res);
  const ms = Date.now() - t0;
  const err = m.msgs.find((x) => x.error)?.error;
  const reason = err?.data?.reason;
  const typed = (m.status === 503 && typeof reason === "string") ||
    (m.status === 200 && /^store_/.test(reason ?? "") && m.events.every((e) => !e.id || !e.data));
  t.check(`standby stopped: ${name} refused typed (HTTP ${m.status}, ${reason}) in ${ms} ms`,
    typed && ms <= STORE_TIMEOUT_MS + 5000, JSON.stringify(m).slice(0, 400));
  const emitted = m.events.filter((e) => e.id && e.data);
  t.check(`... ${name}: nothing emitted (${emitted.length} events)`, emitted.length === 0,
    JSON.stringify(emitted).slice(0, 300));
}

// Re-send until an answer that is not a pause (503, or store_* error).
async function settled(url, sid, id, name, args) {
  let last = null;
  await until(`${name} ${id} settled`, async () => {
    const r = await callTool(url, sid, id, name, args, { progressToken: id },
      { ...V, signal: AbortSignal.timeout(20000) });
    last = r;
    return r.status === 200 && r.response && !/^store_/.test(r.response.error?.data?.reason ?? "");
  }, 30000).catch(() => {});
  return last;
}

try {
  const uri = (await pg("start", pgDir, 1)).split("\n")[0];
  srv = await startServer(bin, ["--store", uri, "--durability", "replicated",
    "--store-timeout-ms", String(STORE_TIMEOUT_MS), ...(process.env.PG_LOG ? ["--log-level", process.env.PG_LOG] : [])]);
  const sid = await initialize(srv.url);
  const first = await callTool(srv.url, sid, "before", "ledger_append", { entry: "before" }, {}, V);
  t.check("standby up: a call succeeds", !!first.response?.result, JSON.stringify(first.response));

  await pg("stop-node", pgDir, 1);
  await refused(srv.url, sid, "out-stream", "stream", { n: 3 });
  await refused(srv.url, sid, "out-append", "ledger_append", { entry: "out-append" });

  await pg("start-node", pgDir, 1);
  const s = await settled(srv.url, sid, "out-stream", "stream", { n: 3 });
  t.check("standby back: the refused stream call, re-sent, reaches its result",
    !!s?.response?.result && !s.response.result.isError, String(JSON.stringify(s?.response)).slice(0, 300));
  const a = await settled(srv.url, sid, "out-append", "ledger_append", { entry: "out-append" });
  t.check("standby back: the refused append, re-sent, is acknowledged",
    !!a?.response?.result && !a.response.result.isError, String(JSON.stringify(a?.response)).slice(0, 300));
  const cnt = await callTool(srv.url, sid, "count", "ledger_read", { entry: "out-append" }, {}, V);
  t.check("... and in the ledger exactly once", cnt.response?.result?.structuredContent?.count === 1,
    JSON.stringify(cnt.response).slice(0, 300));
  const after = await callTool(srv.url, sid, "after", "ledger_append", { entry: "after" }, {}, V);
  t.check("a new call succeeds", !!after.response?.result, JSON.stringify(after.response));
} catch (e) {
  t.check("no exception", false, e.stack);
}
clearTimeout(deadline);
if (t.failed && srv) console.log("--- server log, last 3000 bytes:\n" + srv.log.slice(-3000));
await cleanup();
t.done();
