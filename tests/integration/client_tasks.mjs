// client_tasks.mjs (CTest client_tasks): tidemark-client following tasks of
// the io.modelcontextprotocol/tasks extension (2026-07-28) against
// tidemark-everything on a SQLite store:
//   - `call --task`: the task polled to its end, its outcome applied once
//     (the effects row "task:<id>"), nothing left outstanding; without
//     --task an optional task tool answers plainly and a required one is
//     -32021; a failed task (JSON-RPC error) and an isError result; an
//     input_required task answered (tasks/update) to completion;
//   - the client killed at each step (crash points: before the task id is
//     saved, after, after a poll, inside the transaction that applies the
//     outcome) and `resume`d: the ledger entry once, the outcome applied
//     once, nothing outstanding;
//   - the server killed (-9) and restarted on the same file and port while
//     the client polls: the call completes, the ledger entry once;
//   - cancel-task from another client: the follower ends task_cancelled.
//   node client_tasks.mjs CLIENT CLIENT_CRASHPOINTS TIDEMARK_EVERYTHING
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, cliBrief, spawnCli, startServer, stopServer, until } from "./mcp_http.mjs";
import { freePort } from "./multinode_env.mjs";

const [client, crashClient, everything] = process.argv.slice(2);
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-client-tasks-"));
const db = "sqlite:" + join(dir, "server.db");

const start = (bin, args, env = {}) => spawnCli(bin, args, { env, ms: 40000 });
const brief = cliBrief;
const M = ["--protocol", "modern"];
const run = (args, env) => start(client, [...M, ...args], env).done;
const crashRun = (point, args) =>
  start(crashClient, [...M, ...args], { TIDEMARK_CLIENT_CRASH: `${point}:1` }).done;

const stateOf = async (state, u) => (await run(["--state", state, u, "state"])).json;
const effectsOf = async (state, u) => (await run(["--state", state, u, "effects"])).json ?? [];
const taskRows = (effects) => effects.filter((e) => /^task:[0-9a-f]{32}$/.test(e.event_id));
const ledger = async (u, entry) =>
  (await run(["--json", u, "call", "ledger_read", `entry=${entry}`])).json?.structuredContent?.count;

// One task's outcome applied once, nothing outstanding.
async function appliedOnce(what, state, u) {
  const rows = taskRows(await effectsOf(state, u));
  t.check(`${what}: the task's outcome applied once (one task: effect, n=1)`,
    rows.length === 1 && rows[0].n === 1, JSON.stringify(rows));
  const st = await stateOf(state, u);
  t.check(`${what}: nothing outstanding`, st?.outstanding?.length === 0, JSON.stringify(st?.outstanding));
  return rows[0]?.event_id?.slice(5);
}

async function basics(u) {
  const s1 = join(dir, "b1.db");
  let r = await run(["--state", s1, "--record-effects", u, "call", "--task", "slow_compute",
    "seconds=0.3", "label=first"]);
  t.check("call --task: the task's result", r.code === 0 && /Computed first/.test(r.out), brief(r));
  await appliedOnce("call --task", s1, u);

  const s2 = join(dir, "b2.db");
  r = await run(["--state", s2, "--record-effects", "--json", u, "call", "slow_compute", "seconds=0"]);
  t.check("without --task an optional task tool answers plainly",
    r.code === 0 && r.json?.resultType === "complete" && !r.json.taskId, brief(r));
  t.check("... and no task outcome is dispatched", taskRows(await effectsOf(s2, u)).length === 0);
  r = await run(["--json", u, "call", "failing_job"]);
  t.check("without --task a required task tool is -32021", r.code === 1 && r.json?.code === -32021, brief(r));
  r = await run(["--json", u, "call", "--task", "failing_job"]);
  t.check("with --task it runs: an isError result, exit 1",
    r.code === 1 && r.json?.isError === true && /failed/.test(r.json?.content?.[0]?.text ?? ""), brief(r));
  const s3 = join(dir, "b3.db");
  r = await run(["--state", s3, "--record-effects", "--json", u, "call", "--task", "protocol_error_job"]);
  t.check("a failed task: its JSON-RPC error is the call's, exit 1",
    r.code === 1 && r.json?.code === -32603, brief(r));
  await appliedOnce("a failed task", s3, u);
  r = await run(["--json", "--elicit", "accept", u, "call", "--task", "confirm_delete", "filename=a.txt"]);
  t.check("an input_required task: answered by tasks/update, it completes",
    r.code === 0 && /the file|a\.txt/.test(r.json?.content?.[0]?.text ?? ""), brief(r));
}

// Killed at point, resumed: once.
async function killedAt(point, u) {
  const state = join(dir, `k-${point}.db`), entry = `kill-${point}`;
  const k = await crashRun(point, ["--state", state, "--record-effects", u, "call", "--task",
    "ledger_append", `entry=${entry}`, "delay_ms=300"]);
  t.check(`${point}: the client dies there`, k.sig === "SIGKILL" || k.code === 137, brief(k));
  const st = await stateOf(state, u);
  const row = st?.outstanding?.[0];
  const recorded = point !== "task_before_record";
  t.check(`${point}: the call stays outstanding${recorded ? " with its task id" : " (no task id yet)"}`,
    st?.outstanding?.length === 1 &&
      (recorded ? /^[0-9a-f]{32}$/.test(row?.task_id ?? "") : row?.task_id == null),
    JSON.stringify(st?.outstanding));
  const r = await run(["--state", state, "--record-effects", "--json", u, "resume"]);
  t.check(`${point}: resume finishes it`,
    r.code === 0 && r.json?.[0]?.result?.content?.[0]?.text === "appended", brief(r));
  const id = await appliedOnce(point, state, u);
  if (recorded)
    t.check(`${point}: the task resumed is the one saved`, id === row?.task_id, `${id} vs ${row?.task_id}`);
  t.check(`${point}: the ledger holds the entry once`, (await ledger(u, entry)) === 1);
  const again = await run(["--state", state, "--record-effects", "--json", u, "resume"]);
  t.check(`${point}: a second resume does nothing`,
    again.code === 0 && Array.isArray(again.json) && again.json.length === 0 &&
      taskRows(await effectsOf(state, u)).length === 1, brief(again));
}

// The server killed and restarted (same file, same port) while the client polls.
async function serverRestart(srv, port) {
  const u = srv.url, state = join(dir, "restart.db"), entry = "restart-1";
  const c = start(client, [...M, "--state", state, "--record-effects", u, "call", "--task",
    "ledger_append", `entry=${entry}`, "delay_ms=2500"]);
  await until("the task id in the client's state", async () =>
    !!(await stateOf(state, u))?.outstanding?.[0]?.task_id, 15000);
  await stopServer(srv, "SIGKILL");
  srv = await startServer(everything, ["--store", db, "--listen", `127.0.0.1:${port}`]);
  const r = await c.done;
  t.check("server restarted mid-poll: the call completes", r.code === 0 && r.out.trim() === "appended", brief(r));
  await appliedOnce("server restarted", state, u);
  t.check("server restarted: the ledger holds the entry once", (await ledger(u, entry)) === 1);
  return srv;
}

// Killed before the task id was saved, then a resume answered 503 (a proxy
// with every server down): the call stays outstanding; the resume once the
// server is back finishes it, once. (Before: the 503 ended the call.)
async function refusedWhileDown(srv, port) {
  const u = srv.url, state = join(dir, "down.db"), entry = "down-1";
  const k = await crashRun("task_before_record", ["--state", state, "--record-effects", u, "call",
    "--task", "ledger_append", `entry=${entry}`]);
  t.check("503: the client dies before saving the task id", k.sig === "SIGKILL" || k.code === 137, brief(k));
  await stopServer(srv);
  const down = createServer((req, res) => {
    req.resume();
    res.writeHead(503, { "content-type": "text/plain", "retry-after": "1" });
    res.end("no server is available");
  });
  await new Promise((ok) => down.listen(port, "127.0.0.1", ok));
  const r = await run(["--state", state, "--record-effects", "--json", u, "resume"]);
  await new Promise((ok) => down.close(ok));
  const st = await stateOf(state, u);
  t.check("503 to the resume: the call stays outstanding", r.code !== 0 && st?.outstanding?.length === 1,
    brief(r) + JSON.stringify(st?.outstanding));
  srv = await startServer(everything, ["--store", db, "--listen", `127.0.0.1:${port}`]);
  const again = await run(["--state", state, "--record-effects", "--json", u, "resume"]);
  t.check("the server back: the resume finishes it",
    again.code === 0 && again.json?.[0]?.result?.content?.[0]?.text === "appended", brief(again));
  await appliedOnce("after a 503", state, u);
  t.check("after a 503: the ledger holds the entry once", (await ledger(u, entry)) === 1);
  return srv;
}

async function cancel(u) {
  const state = join(dir, "cancel.db");
  const c = start(client, [...M, "--state", state, "--record-effects", "--json", u, "call", "--task",
    "slow_compute", "seconds=20", "label=long"]);
  let id = null;
  await until("the task id in the client's state", async () =>
    !!(id = (await stateOf(state, u))?.outstanding?.[0]?.task_id), 15000);
  const x = await run([u, "cancel-task", id]);
  t.check("cancel-task is acknowledged", x.code === 0, brief(x));
  const r = await c.done;
  t.check("the follower ends task_cancelled (exit 1)",
    r.code === 1 && r.json?.data?.reason === "task_cancelled" && r.json.data.taskId === id, brief(r));
  await appliedOnce("cancelled", state, u);
  const bad = await run([u, "cancel-task", "a\tb"]);
  t.check("cancel-task of an unusable id: usage error, nothing sent", bad.code !== 0, brief(bad));
}

const port = await freePort();
let srv = await startServer(everything, ["--store", db, "--listen", `127.0.0.1:${port}`]);
try {
  await basics(srv.url);
  for (const p of ["task_before_record", "task_recorded", "task_polled", "task_before_commit"])
    await killedAt(p, srv.url);
  srv = await serverRestart(srv, port);
  srv = await refusedWhileDown(srv, port);
  await cancel(srv.url);
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(srv);
  rmSync(dir, { recursive: true, force: true });
}
t.done();
