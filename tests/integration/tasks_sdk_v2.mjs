// tasks_sdk_v2.mjs - a task survives kill -9 of its server, seen through the
// official TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0,
// pinned in peers/). 2.4.0 has no tasks runtime: its Client rejects a
// resultType "task" answer, so the task-creating tools/call goes through its
// Streamable HTTP transport's send() (the transport derives MCP-Protocol-
// Version, Mcp-Method and Mcp-Name from the message), and tasks/get through
// client.request() with a permissive result schema (the SDK sets Mcp-Name
// from params.taskId; the test's fetch records that it did).
//
// tidemark-everything on SQLite (a temp dir): ledger_append {entry,
// delay_ms: 2500} with a fresh idempotency key and the tasks extension in
// clientCapabilities -> CreateTaskResult; kill -9 of the server by PID;
// restart on the same database and port; the same call re-issued under the
// same key -> the same taskId; tasks/get polled (at pollIntervalMs, with a
// deadline) until terminal -> completed with ledger_append's result; the
// ledger holds the entry exactly once.
//
//   node tasks_sdk_v2.mjs TIDEMARK_EVERYTHING PEERS_DIR
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { checker, sleep, startServer, stopServer } from "./mcp_http.mjs";
import { KEY, MODERN, modernLedgerCount } from "./modern_http.mjs";

const [bin, peers] = process.argv.slice(2);
if (!bin || !peers) {
  console.error("usage: tasks_sdk_v2.mjs TIDEMARK_EVERYTHING PEERS_DIR");
  process.exit(2);
}
const require = createRequire(join(resolve(peers), "package.json"));
const { Client, StreamableHTTPClientTransport } = await import(require.resolve("@modelcontextprotocol/client"));

const t = checker();
const EXT = "io.modelcontextprotocol/tasks";
const CAPS = { elicitation: {}, extensions: { [EXT]: {} } };
const CAPS_KEY = "io.modelcontextprotocol/clientCapabilities";
const TERMINAL = ["completed", "failed", "cancelled"];
// A Standard Schema that takes any result: tasks/get is not a method the
// SDK's registry validates for us.
const anyResult = { "~standard": { version: 1, vendor: "tidemark-test", validate: (value) => ({ value }) } };

// Every POST the SDK makes: method and Mcp-Name, as sent.
const sent = [];
async function recordingFetch(url, init) {
  const h = new Headers(init?.headers);
  let method = null;
  try { method = JSON.parse(init?.body ?? "null")?.method ?? null; } catch { /* not JSON */ }
  sent.push({ method, mcpName: h.get("mcp-name"), mcpMethod: h.get("mcp-method") });
  return fetch(url, init);
}

// A Client pinned to 2026-07-28 on a transport that records its POSTs, and
// raw(): a request sent with transport.send(), its answer taken off the
// transport before the Client sees it (string ids; the Client's are numbers).
async function sdkClient(url) {
  const tr = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
  const c = new Client({ name: "tasks-sdk-v2", version: "1.0.0" },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode: { pin: MODERN } } });
  await c.connect(tr);
  const waiting = new Map();
  const inner = tr.onmessage;
  tr.onmessage = (msg, extra) => {
    const w = typeof msg?.id === "string" ? waiting.get(msg.id) : undefined;
    if (w && ("result" in msg || "error" in msg)) { waiting.delete(msg.id); w(msg); return; }
    inner?.(msg, extra);
  };
  let n = 0;
  const raw = (method, params, ms = 10000) => new Promise((res, rej) => {
    const id = "raw-" + ++n;
    const timer = setTimeout(() => { waiting.delete(id); rej(new Error(`no answer to ${method} ${id}`)); }, ms);
    waiting.set(id, (m) => { clearTimeout(timer); res(m); });
    const _meta = { "io.modelcontextprotocol/protocolVersion": MODERN,
      "io.modelcontextprotocol/clientInfo": { name: "tasks-sdk-v2", version: "1.0.0" },
      [CAPS_KEY]: CAPS, ...(params._meta ?? {}) };
    tr.send({ jsonrpc: "2.0", id, method, params: { ...params, _meta } })
      .catch((e) => { clearTimeout(timer); waiting.delete(id); rej(e); });
  });
  const getTask = (taskId) => c.request({ method: "tasks/get", params: { taskId, _meta: { [CAPS_KEY]: CAPS } } },
    anyResult, { timeout: 10000 });
  return { c, tr, raw, getTask };
}

// Poll tasks/get at the task's pollIntervalMs until a terminal status or
// the deadline; resolves the terminal result and the number of polls.
async function pollTerminal(getTask, taskId, ms) {
  const end = Date.now() + ms;
  for (let polls = 1; ; polls++) {
    const r = await getTask(taskId);
    if (TERMINAL.includes(r?.status)) return { r, polls };
    if (Date.now() > end) throw new Error(`task ${taskId} not terminal after ${ms} ms: ${JSON.stringify(r)}`);
    const wait = Number.isInteger(r?.pollIntervalMs) && r.pollIntervalMs > 0 ? r.pollIntervalMs : 100;
    await sleep(Math.min(wait, Math.max(0, end - Date.now())));
  }
}

async function scenario(state) {
  const db = join(state.dir, "tasks.db");
  state.server = await startServer(bin, ["--store", "sqlite:" + db]);
  const url = state.server.url;
  const port = new URL(url).port;
  let sdk = state.sdk = await sdkClient(url);
  t.check("the SDK client connected in the 2026-07-28 era", sdk.c.getNegotiatedProtocolVersion() === MODERN,
    String(sdk.c.getNegotiatedProtocolVersion()));

  const key = "sdk-v2-" + Date.now() + "-" + Math.random().toString(16).slice(2);
  const entry = "entry-" + key;
  const callParams = { name: "ledger_append", arguments: { entry, delay_ms: 2500 }, _meta: { [KEY]: key } };
  const created = await sdk.raw("tools/call", callParams);
  const cr = created.result;
  t.check("tools/call with the tasks extension answers a CreateTaskResult",
    cr?.resultType === "task" && /^[0-9a-f]{32}$/.test(cr?.taskId ?? "") &&
    Number.isInteger(cr?.pollIntervalMs) && Number.isInteger(cr?.ttlMs), JSON.stringify(created));
  t.check("... still working (the tool sleeps 2.5 s)", cr?.status === "working", JSON.stringify(cr));
  const callPost = sent.find((s) => s.method === "tools/call");
  t.check("the SDK transport sent Mcp-Method / Mcp-Name from the message",
    callPost?.mcpMethod === "tools/call" && callPost?.mcpName === "ledger_append", JSON.stringify(callPost));
  if (!cr?.taskId) throw new Error("no task to follow");
  const before = await sdk.getTask(cr.taskId);
  t.check("tasks/get through client.request before the kill: the task, working",
    before?.taskId === cr.taskId && before?.status === "working", JSON.stringify(before));

  const proc = state.server.proc;
  await stopServer(state.server, "SIGKILL");
  t.check("the server died of SIGKILL (pid " + proc.pid + ")", proc.signalCode === "SIGKILL",
    `${proc.exitCode} ${proc.signalCode}`);
  await sdk.c.close().catch(() => {});

  state.server = await startServer(bin, ["--store", "sqlite:" + db, "--listen", "127.0.0.1:" + port]);
  t.check("restarted on the same database and port", state.server.url === url, state.server.url);
  sdk = state.sdk = await sdkClient(state.server.url);

  const again = await sdk.raw("tools/call", callParams);
  t.check("re-issued after the restart under the same key: the same taskId",
    again.result?.resultType === "task" && again.result?.taskId === cr.taskId, JSON.stringify(again));

  const from = sent.length;
  const { r: done, polls } = await pollTerminal(sdk.getTask, cr.taskId, 30000);
  const gets = sent.slice(from).filter((s) => s.method === "tasks/get");
  t.check(`every tasks/get (${gets.length}, ${polls} polls) carried Mcp-Method: tasks/get and Mcp-Name: taskId`,
    gets.length === polls && gets.every((s) => s.mcpMethod === "tasks/get" && s.mcpName === cr.taskId),
    JSON.stringify(gets));
  t.check("the task ends completed after kill -9 and restart", done.status === "completed", JSON.stringify(done));
  const res = done.result;
  // structuredContent.key is the server's request key of the append: for a
  // task it names the task's record (taskId/...), not the client's key.
  t.check("its result is ledger_append's CallToolResult ('appended', the entry, made under the task)",
    res?.content?.[0]?.text === "appended" && res?.structuredContent?.entry === entry &&
    String(res?.structuredContent?.key ?? "").startsWith(cr.taskId) && res?.isError !== true,
    JSON.stringify(done));

  const read = await sdk.c.callTool({ name: "ledger_read", arguments: { entry } });
  t.check("the ledger holds the entry exactly once (ledger_read through the SDK)",
    read?.structuredContent?.count === 1, JSON.stringify(read?.structuredContent));
  const third = await sdk.raw("tools/call", callParams);
  t.check("re-issued once completed: the same taskId again",
    third.result?.taskId === cr.taskId, JSON.stringify(third));
  t.check("... and still exactly one ledger row (raw modern ledger_read)",
    await modernLedgerCount(state.server.url, entry) === 1);
}

const state = { dir: mkdtempSync(join(tmpdir(), "tidemark-tasks-sdk-")), server: null, sdk: null };
try {
  await scenario(state);
} catch (e) {
  t.check("the scenario ran to its end", false, e?.stack ?? String(e));
} finally {
  await state.sdk?.c.close().catch(() => {});
  await stopServer(state.server);
  rmSync(state.dir, { recursive: true, force: true });
}
if (t.passed + t.failed === 0) t.check("some check ran", false);
t.done();
