// tasks.mjs - the tasks extension (io.modelcontextprotocol/tasks) on
// tidemark-everything, on one store kind per run:
//   node tasks.mjs BIN memory|sqlite|redis      create -> get -> completed (on
//       Redis the get on the other node), cancel, input_required +
//       tasks/update, TTL expiry, a re-issued creation, the gates
//       (TM_STORE=pg with redis: two nodes on PostgreSQL instead)
//   node tasks.mjs BIN crash-sqlite|crash-redis  kill -9 of the node running
//       a ledger_append task: the restarted server (SQLite) or the survivor
//       (Redis) finishes it, the ledger entry exists exactly once; an
//       external_call task cut the same way ends failed, outcome_unknown
import { checker, until, serversFor, startServer, stopServer } from "./mcp_http.mjs";
import { modern, modernPost, modernLedgerCount, KEY } from "./modern_http.mjs";
import { Cluster } from "./multinode_env.mjs";
import { StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [bin, kind] = process.argv.slice(2);
const t = checker();
const EXT = "io.modelcontextprotocol/tasks";
const CAPS = { elicitation: {}, extensions: { [EXT]: {} } };
let n = 0;

// A tools/call declaring the extension; opts.meta adds to _meta.
const call = (url, name, args, opts = {}) =>
  modern(url, "c" + ++n, "tools/call", { name, arguments: args }, { capabilities: CAPS, ...opts });
// A tasks/* request with Mcp-Name: taskId (opts.headers override).
const task = (url, method, params, opts = {}) =>
  modern(url, "t" + ++n, method, params,
    { capabilities: CAPS, ...opts, headers: { "mcp-name": params.taskId, ...(opts.headers ?? {}) } });
const get = async (url, id) => (await task(url, "tasks/get", { taskId: id })).response;
const status = async (url, id) => (await get(url, id))?.result?.status;
const settled = (url, id, want, ms = 15000) =>
  until(`task ${id} ${want}`, async () => { const r = await get(url, id); return r?.result?.status === want && r; }, ms);

async function lifecycle(a, b) {
  const c = await call(a, "slow_compute", { seconds: 0.3, label: "life" });
  const cr = c.response?.result;
  t.check("tools/call of a task tool answers CreateTaskResult", cr?.resultType === "task" &&
    /^[0-9a-f]{32}$/.test(cr?.taskId ?? "") && ["working", "completed"].includes(cr?.status),
    JSON.stringify(c.response));
  t.check("CreateTaskResult carries no result, error or requestState",
    cr && !("result" in cr) && !("error" in cr) && !("requestState" in cr));
  const first = await get(b, cr.taskId); // at once, from the other node on Redis
  t.check("tasks/get resolves at once after CreateTaskResult (other node on Redis)",
    first?.result?.taskId === cr.taskId && first.result.resultType === "complete", JSON.stringify(first));
  const done = await settled(b, cr.taskId, "completed");
  t.check("the task completes with the tool's result inlined",
    /Computed life/.test(done.result.result?.content?.[0]?.text ?? ""), JSON.stringify(done.result));
  t.check("createdAt / lastUpdatedAt are ISO 8601, ttlMs and pollIntervalMs integers",
    /^\d{4}-\d\d-\d\dT/.test(done.result.createdAt) && /^\d{4}-\d\d-\d\dT/.test(done.result.lastUpdatedAt) &&
    Number.isInteger(done.result.ttlMs) && Number.isInteger(done.result.pollIntervalMs));
  const plain = await modern(a, "p" + ++n, "tools/call", { name: "slow_compute", arguments: { seconds: 0 } });
  t.check("a client without the extension gets a plain result from an optional task tool",
    plain.response?.result?.resultType === "complete" && !plain.response.result.taskId);
  const req = await modern(a, "q" + ++n, "tools/call", { name: "failing_job", arguments: {} });
  t.check("... and -32021 from a required one", req.response?.error?.code === -32021 &&
    req.response.error.data?.requiredCapabilities?.extensions?.[EXT] !== undefined);
  const bad = await task(a, "tasks/get", { taskId: cr.taskId }, { headers: { "mcp-name": "other" } });
  t.check("Mcp-Name not the taskId: 400 -32020", bad.status === 400 && bad.response?.error?.code === -32020);
  const none = await task(a, "tasks/get", { taskId: "0".repeat(32) });
  t.check("unknown taskId: -32602", none.response?.error?.code === -32602);
}

async function cancel(a, b) {
  const c = (await call(a, "slow_compute", { seconds: 30, label: "cancel" })).response?.result;
  const ack = await task(b, "tasks/cancel", { taskId: c?.taskId });
  t.check("tasks/cancel acks with an empty complete result",
    ack.response?.result?.resultType === "complete" && !("status" in ack.response.result));
  const r = await settled(a, c.taskId, "cancelled", 8000).catch(() => null);
  t.check("the running task ends cancelled (cancel asked on the other node on Redis)", !!r);
}

async function input(a, b) {
  const c = (await call(a, "confirm_delete", { filename: "x.txt" })).response?.result;
  const w = await settled(b, c?.taskId, "input_required").catch(() => null);
  t.check("a task asking for input is input_required with its inputRequests",
    w?.result?.inputRequests?.confirm?.method === "elicitation/create", JSON.stringify(w?.result));
  const ign = await task(b, "tasks/update", { taskId: c.taskId, inputResponses: { nope: { action: "accept" } } });
  t.check("tasks/update with an unknown key is acked and ignored",
    ign.response?.result?.resultType === "complete" && await status(a, c.taskId) === "input_required");
  const bad = await task(b, "tasks/update", { taskId: c.taskId, inputResponses: 5 });
  t.check("tasks/update without an inputResponses object: -32602", bad.response?.error?.code === -32602);
  const up = await task(b, "tasks/update", { taskId: c.taskId,
    inputResponses: { confirm: { action: "accept", content: { confirm: true } } } });
  t.check("tasks/update acks", up.response?.result?.resultType === "complete");
  const d = await settled(a, c.taskId, "completed").catch(() => null);
  t.check("the task resumes with the answer and completes",
    /Deleted x\.txt/.test(d?.result?.result?.content?.[0]?.text ?? ""), JSON.stringify(d?.result));
  // cancelled on the other node while it waits for input: it runs nowhere, so
  // that node ends it (on a shared store, as the record's node from then on)
  const w2 = (await call(a, "confirm_delete", { filename: "y.txt" })).response?.result;
  await settled(a, w2?.taskId, "input_required").catch(() => null);
  const ack = await task(b, "tasks/cancel", { taskId: w2?.taskId });
  const e = await settled(a, w2?.taskId, "cancelled", 8000).catch(() => null);
  t.check("a task waiting for input, cancelled on the other node, ends cancelled",
    ack.response?.result?.resultType === "complete" && !!e, JSON.stringify(ack.response));
}

// subscriptions/listen with taskIds: the acknowledgement agrees to the
// principal's live tasks only, and notifications/tasks reports the end.
async function listen(a, b) {
  const c = (await call(a, "slow_compute", { seconds: 1, label: "heard" })).response?.result;
  const ctl = new AbortController();
  const seen = [];
  const res = await modernPost(b, "l" + ++n, "subscriptions/listen",
    { notifications: { taskIds: [c.taskId, "f".repeat(32)] } }, { capabilities: CAPS, signal: ctl.signal });
  const reader = (async () => {
    const dec = new TextDecoder();
    let buf = "";
    try {
      for await (const chunk of res.body) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line.startsWith("data:")) try { seen.push(JSON.parse(line.slice(5))); } catch { /* partial */ }
        }
      }
    } catch { /* aborted */ }
  })();
  const ack = await until("ack", () => seen.find((x) => x.method === "notifications/subscriptions/acknowledged"), 5000).catch(() => null);
  t.check("listen acknowledges only the principal's existing task ids",
    JSON.stringify(ack?.params?.notifications?.taskIds) === JSON.stringify([c.taskId]), JSON.stringify(ack));
  const note = await until("notifications/tasks", () => seen.find((x) => x.method === "notifications/tasks" &&
    x.params?.status === "completed"), 10000).catch(() => null);
  t.check("notifications/tasks carries the completed task with its result (listener on the other node on Redis)",
    note?.params?.taskId === c.taskId && /Computed heard/.test(note.params.result?.content?.[0]?.text ?? ""),
    JSON.stringify(seen));
  ctl.abort();
  await reader;
  const nox = await modern(a, "x" + ++n, "subscriptions/listen", { notifications: { taskIds: [c.taskId] } });
  t.check("listen for taskIds without the extension: -32021", nox.response?.error?.code === -32021,
    JSON.stringify(nox.response));
}

async function ttl(a) {
  const c = (await call(a, "short_lived_task", { seconds: 0 })).response?.result;
  t.check("a short-lived task says its ttlMs", c?.ttlMs === 1500, JSON.stringify(c));
  t.check("... and is readable within it", (await get(a, c.taskId))?.result?.taskId === c.taskId);
  const gone = await until("expiry", async () => {
    const r = await get(a, c.taskId);
    return r?.error?.code === -32602 && r;
  }, 6000).catch(() => null);
  t.check("after its TTL tasks/get answers -32602", !!gone && gone.error.data?.reason !== undefined,
    JSON.stringify(gone));
}

async function reissue(a, b) {
  const key = "tasks-" + Date.now() + "-" + Math.random();
  const entry = "e-" + key;
  const one = (await call(a, "ledger_append", { entry }, { meta: { [KEY]: key } })).response?.result;
  const two = (await call(b, "ledger_append", { entry }, { meta: { [KEY]: key } })).response?.result;
  t.check("a creation re-issued under the same key returns the same taskId",
    one?.taskId && one.taskId === two?.taskId, JSON.stringify([one, two]));
  await settled(a, one.taskId, "completed");
  const three = (await call(b, "ledger_append", { entry }, { meta: { [KEY]: key } })).response?.result;
  t.check("... also once completed", three?.taskId === one.taskId);
  t.check("the ledger entry exists exactly once", await modernLedgerCount(a, entry) === 1);
  const other = await call(a, "ledger_append", { entry: "else" }, { meta: { [KEY]: key } });
  t.check("the key with other arguments: idempotency_key_reused",
    other.response?.error?.data?.reason === "idempotency_key_reused", JSON.stringify(other.response));
}

// Create a ledger_append and an external_call task on `on`, kill it, and
// have `after()` give the URL that should finish them.
async function crash(startOn, kill, after) {
  const entry = "crash-" + Date.now();
  let url = await startOn();
  const led = (await call(url, "ledger_append", { entry, delay_ms: 4000 },
    { meta: { [KEY]: "k-" + entry } })).response?.result;
  const ext = (await call(url, "external_call", { delay_ms: 4000 })).response?.result;
  t.check("both tasks created", !!led?.taskId && !!ext?.taskId);
  await kill();
  url = await after();
  const done = await settled(url, led.taskId, "completed", 20000).catch(() => null);
  t.check("the ledger_append task is finished after kill -9", !!done, JSON.stringify(done));
  t.check("its ledger entry exists exactly once", await modernLedgerCount(url, entry) === 1);
  const f = await settled(url, ext.taskId, "failed", 20000).catch(() => null);
  t.check("the external_call task ends failed, outcome_unknown (not re-run)",
    f?.result?.error?.data?.reason === "outcome_unknown", JSON.stringify(f?.result));
}

// Two nodes on one store: Redis, or PostgreSQL with TM_STORE=pg.
async function twoNodes() {
  const c = new StoreCluster({ bin, nodes: 2 });
  await c.startRedis();
  await c.startNode(0);
  await c.startNode(1);
  return { urls: [c.nodes[0].url, c.nodes[1].url], stop: () => c.stop() };
}

async function main() {
  if (kind === "crash-sqlite") {
    const db = "sqlite:" + join(mkdtempSync(join(tmpdir(), "tidemark-tasks-")), "t.db");
    let s = null;
    await crash(async () => (s = await startServer(bin, ["--store", db])).url,
      () => stopServer(s, "SIGKILL"), async () => (s = await startServer(bin, ["--store", db])).url);
    await stopServer(s);
    return;
  }
  if (kind === "crash-redis") {
    skipUnlessStoreTools({ withLb: false, store: "redis" }); // exit 77
    const c = new Cluster({ bin, nodes: 2 });
    try {
      await c.startRedis();
      await c.startNode(0);
      await c.startNode(1);
      await crash(async () => c.nodes[0].url, () => c.killNode(0), async () => c.nodes[1].url);
    } finally { await c.stop(); }
    return;
  }
  if (kind === "redis") skipUnlessStoreTools({ withLb: false }); // exit 77
  const s = kind === "redis" ? await twoNodes() : await serversFor(bin, kind);
  try {
    const [a, b] = s.urls;
    await lifecycle(a, b);
    await cancel(a, b);
    await input(a, b);
    await listen(a, b);
    await ttl(a);
    await reissue(a, b);
  } finally { await s.stop(); }
}

main().then(() => t.done(), (e) => { console.log("FAIL " + (e?.stack ?? e)); process.exit(1); });
