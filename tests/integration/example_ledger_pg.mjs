// example_ledger_pg.mjs (CTest example_ledger_pg, issue 29): examples/atomic_ledger.c
// on the PostgreSQL store. A real PostgreSQL 15 primary with two standbys,
// synchronous_standby_names 'ANY 1 (s1, s2)' (tests/tools/pg_cluster.sh,
// loopback ports it picks), the example started with its URI:
//   - an append and its retry under the same request id: one row, the retry
//     answered from the record;
//   - kill -9 of the example, restarted on the same database: the row is there;
//   - the primary killed, the most advanced standby promoted and the other
//     following it (a commit is acknowledged only once a standby has it, so
//     the new primary needs one too): the example, pointed at every host with
//     target_session_attrs=read-write, finds the new primary by itself, the
//     row is there, a new append lands once.
//   node example_ledger_pg.mjs EXAMPLE_ATOMIC_LEDGER
// Exits 77 when PostgreSQL is not installed.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callTool, checker, initialize, stopServer, until } from "./mcp_http.mjs";
import { freePort, waitTcp } from "./multinode_env.mjs";
import { pgCluster } from "./pg_env.mjs";
import { reaped } from "./reap.mjs";

const [bin] = process.argv.slice(2);
if (!bin) {
  console.error("usage: example_ledger_pg.mjs EXAMPLE_ATOMIC_LEDGER");
  process.exit(2);
}
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-example-pg-"));
const verbose = process.env.PG_VERBOSE === "1";

async function startExample(store) {
  const port = await freePort();
  const proc = reaped(spawn(bin, [String(port), store],
    { stdio: ["ignore", "ignore", verbose ? "inherit" : "ignore"] }));
  await waitTcp(port, 15000);
  return { proc, url: `http://127.0.0.1:${port}/mcp` };
}

const count = async (url, sid) => (await callTool(url, sid, "c" + Math.random(), "count", { entry: "x" }))
  .response?.result?.content?.[0]?.text;

let ex = null;
try {
  const uri = await pgCluster(verbose, "start", dir, "2");
  ex = await startExample(uri);
  const sid = await initialize(ex.url);
  const a1 = await callTool(ex.url, sid, "a1", "append", { entry: "x" });
  const a2 = await callTool(ex.url, sid, "a1", "append", { entry: "x" }); // a retry
  t.check("an append and its retry: answered, one row", a1.response?.result && a2.response?.result &&
    JSON.stringify(a1.response.result) === JSON.stringify(a2.response.result) &&
    await count(ex.url, sid) === "1", JSON.stringify([a1.response, a2.response, await count(ex.url, sid)]));

  await stopServer(ex, "SIGKILL");
  ex = await startExample(uri);
  t.check("the row survives kill -9 of the example", await count(ex.url, sid) === "1");

  // The primary dies; the most advanced standby has every acknowledged commit.
  await pgCluster(verbose, "kill", dir, "0");
  const next = Number(await pgCluster(verbose, "most-advanced", dir, "1", "2"));
  await pgCluster(verbose, "promote", dir, String(next));
  await pgCluster(verbose, "follow", dir, String(3 - next), String(next));
  let rows = null;
  await until("a read after the failover", async () => {
    try { rows = await count(ex.url, sid); } catch { rows = null; }
    return rows !== null && rows !== undefined;
  }, 30000);
  t.check("after the failover: the session and its row are on the new primary", rows === "1", String(rows));
  let a3 = null;
  const t0 = Date.now();
  await until("a write after the failover", async () => {
    try { a3 = await callTool(ex.url, sid, "a3", "append", { entry: "x" }); } catch { a3 = null; }
    return a3?.response?.result;
  }, 30000);
  console.log(`writes served again ${Date.now() - t0} ms after the read came back`);
  const a4 = await callTool(ex.url, sid, "a3", "append", { entry: "x" });
  t.check("a new append after the failover lands once", a3?.response?.result && a4.response?.result &&
    await count(ex.url, sid) === "2", JSON.stringify([a3?.response, a4.response]));
} catch (e) {
  t.check("ran to the end", false, e.stack);
} finally {
  if (ex) await stopServer(ex);
  await pgCluster(verbose, "stop", dir).catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
t.done();
