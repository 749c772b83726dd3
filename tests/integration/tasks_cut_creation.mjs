// tasks_cut_creation.mjs (CTest tasks_cut_creation, _stream): a task
// creation cut by a crash between its writes (the store session made, its
// record not: crash point task_session_created; or its stream opened too:
// task_stream_opened; on PostgreSQL, the stream's number taken but the
// stream not made: pg_stream_reserved) is finished by the re-issue under its
// idempotency key: the same taskId, the task runs to completed, the ledger
// entry exists once. Before the first fix the re-issue answered -32602
// task_not_found for ever; before the second (pg_stream_reserved) the task's
// response went to "r1", which never existed, not to the stream the re-issue
// opened and the record names: the task never completed and recovery
// re-ran it every half second.
// STORE: sqlite (default) or pg (a throw-away PostgreSQL cluster, one node;
// exits 77 when PostgreSQL is not installed).
//   node tasks_cut_creation.mjs TIDEMARK_SERVER_CRASHPOINTS [CRASH_POINT] [STORE]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, startServer, stopServer, until } from "./mcp_http.mjs";
import { modern, modernLedgerCount, KEY } from "./modern_http.mjs";
import { freePort } from "./multinode_env.mjs";
import { pgCluster } from "./pg_env.mjs";
import { skipUnlessStoreTools } from "./store_env.mjs";

const [bin, point = "task_session_created", store = "sqlite"] = process.argv.slice(2);
if (store === "pg") skipUnlessStoreTools({ store: "pg", withLb: false });
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-cut-creation-"));
const CAPS = { extensions: { "io.modelcontextprotocol/tasks": {} } };
const key = "cut-" + Date.now();
const args = { entry: key, delay_ms: 0 };
const create = (url, id) => modern(url, id, "tools/call", { name: "ledger_append", arguments: args },
  { capabilities: CAPS, meta: { [KEY]: key } }).catch((e) => ({ error: e }));
const get = async (url, taskId) => (await modern(url, "g" + Math.random(), "tasks/get", { taskId },
  { capabilities: CAPS, headers: { "mcp-name": taskId } })).response?.result;

let s = null, pg = null;
try {
  const port = await freePort();
  if (store === "pg") pg = await pgCluster(false, "start", join(dir, "pg"), "0");
  const flags = ["--store", pg ?? "sqlite:" + join(dir, "t.db"), "--listen", `127.0.0.1:${port}`];
  s = await startServer(bin, flags, { env: { TIDEMARK_SERVER_CRASH: `${point}:1` } });
  const first = await create(s.url, "c1");
  const died = await until("the server dies at the crash point", async () =>
    s.proc.exitCode !== null || s.proc.signalCode !== null, 10000).catch(() => false);
  t.check(`the creation is cut before its record (crash point ${point})`,
    died && !first.response?.result?.taskId, JSON.stringify(first.response ?? String(first.error)));
  s = await startServer(bin, flags);
  const again = (await create(s.url, "c2")).response?.result;
  t.check("the re-issue under the key answers CreateTaskResult",
    again?.resultType === "task" && /^[0-9a-f]{32}$/.test(again?.taskId ?? ""), JSON.stringify(again));
  const done = await until("the task completed", async () => {
    const r = await get(s.url, again.taskId);
    return r?.status === "completed" && r;
  }, 15000).catch(() => null);
  t.check("the task runs to completed", done?.result?.content?.[0]?.text === "appended", JSON.stringify(done));
  const third = (await create(s.url, "c3")).response?.result;
  t.check("a third issue under the key: the same task", third?.taskId === again?.taskId, JSON.stringify(third));
  t.check("the ledger holds the entry once", (await modernLedgerCount(s.url, key)) === 1);
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(s);
  if (pg) await pgCluster(false, "stop", join(dir, "pg"));
  rmSync(dir, { recursive: true, force: true });
}
t.done();
