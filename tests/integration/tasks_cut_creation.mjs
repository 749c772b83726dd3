// tasks_cut_creation.mjs (CTest tasks_cut_creation): a task creation cut
// by a crash between its writes (the store session made, its record not) is
// finished by the re-issue under its idempotency key: the same taskId, the
// task runs to completed, the ledger entry exists once. Before the fix the
// re-issue answered -32602 task_not_found for ever and the call was lost.
//   node tasks_cut_creation.mjs TIDEMARK_SERVER_CRASHPOINTS
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, startServer, stopServer, until } from "./mcp_http.mjs";
import { modern, modernLedgerCount, KEY } from "./modern_http.mjs";
import { freePort } from "./multinode_env.mjs";

const [bin] = process.argv.slice(2);
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-cut-creation-"));
const CAPS = { extensions: { "io.modelcontextprotocol/tasks": {} } };
const key = "cut-" + Date.now();
const args = { entry: key, delay_ms: 0 };
const create = (url, id) => modern(url, id, "tools/call", { name: "ledger_append", arguments: args },
  { capabilities: CAPS, meta: { [KEY]: key } }).catch((e) => ({ error: e }));
const get = async (url, taskId) => (await modern(url, "g" + Math.random(), "tasks/get", { taskId },
  { capabilities: CAPS, headers: { "mcp-name": taskId } })).response?.result;

let s = null;
try {
  const port = await freePort();
  const flags = ["--store", "sqlite:" + join(dir, "t.db"), "--listen", `127.0.0.1:${port}`];
  s = await startServer(bin, flags, { env: { TIDEMARK_SERVER_CRASH: "task_session_created:1" } });
  const first = await create(s.url, "c1");
  const died = await until("the server dies at the crash point", async () =>
    s.proc.exitCode !== null || s.proc.signalCode !== null, 10000).catch(() => false);
  t.check("the creation is cut after its session, before its record (crash point)",
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
  rmSync(dir, { recursive: true, force: true });
}
t.done();
