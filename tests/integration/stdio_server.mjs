// stdio_server.mjs - tidemark-everything --stdio (tidemark_server_run_stdio):
//  - raw lines: garbage, an over-long line, a non-message and a bad JSON-RPC
//    request answered typed (data.reason), the next request still served,
//    nothing but JSON-RPC lines on stdout;
//  - the official SDK v1 1.32.2 client (StdioClientTransport): tools/list,
//    tools/call, progress, an elicitation answered (2025 era);
//  - the SDK v2 2.4.0 client (@modelcontextprotocol/client/stdio) pinned to
//    2026-07-28: a call, an MRTR elicitation round, listen + list_changed;
//  - ledger_append with --store sqlite: one row; kill -9 mid-call, restart:
//    recovery finishes it, exactly one row.
//
//   node stdio_server.mjs TIDEMARK_EVERYTHING PEERS_DIR VAR_DIR
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { checker, until } from "./mcp_http.mjs";

const [bin, peers, varDir] = process.argv.slice(2);
if (!bin || !peers || !varDir) {
  console.error("usage: stdio_server.mjs TIDEMARK_EVERYTHING PEERS_DIR VAR_DIR");
  process.exit(2);
}
const require = createRequire(join(resolve(peers), "package.json"));
const t = checker();
const textOf = (r) => (r?.content ?? []).map((x) => x.text ?? "").join("");
const LOG = ["--log-level", "warn"];
// The SDKs' StdioClientTransport passes only a few safe variables to the
// server it spawns; the sanitizers' options (make test-tsan's log_path,
// suppressions and exitcode) must reach it like every other child.
const SAN_ENV = Object.fromEntries(Object.entries(process.env)
  .filter(([k]) => /^(TSAN|ASAN|LSAN|UBSAN)_OPTIONS$/.test(k)));

// A raw stdio child: lines in, parsed lines out (every stdout line must be JSON).
function rawChild(args) {
  const proc = spawn(bin, ["--stdio", ...LOG, ...args], { stdio: ["pipe", "pipe", "pipe"] });
  const c = { proc, msgs: [], junk: [], err: "", exited: null };
  let buf = "";
  proc.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try { c.msgs.push(JSON.parse(line)); } catch { c.junk.push(line); }
    }
  });
  proc.stderr.on("data", (d) => { c.err += d; });
  proc.on("exit", (code, sig) => { c.exited = { code, sig }; });
  proc.stdin.on("error", () => {});
  c.send = (o) => proc.stdin.write((typeof o === "string" ? o : JSON.stringify(o)) + "\n");
  c.wait = (pred, what, ms = 10000) => until(what, () => c.msgs.find(pred), ms);
  c.byId = (id, what, ms) => c.wait((m) => m.id === id && (m.result || m.error), what, ms);
  c.kill = async (sig = "SIGKILL") => {
    if (c.exited) return;
    proc.kill(sig);
    await until("child exit", () => c.exited, 10000);
  };
  return c;
}

const INIT = (id) => ({ jsonrpc: "2.0", id, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });

async function rawRound() {
  const c = rawChild(["--store", "memory"]);
  c.send("this is not json");
  let e = await c.wait((m) => m.error?.data?.reason === "invalid_json", "garbage answered").catch(() => null);
  t.check("garbage line: -32700 with reason invalid_json, id null",
    e?.error?.code === -32700 && e.id === null, JSON.stringify(c.msgs));
  c.send("x".repeat(16 * 1024 * 1024 + 10));
  e = await c.wait((m) => m.error?.data?.reason === "line_too_long", "long line answered", 20000).catch(() => null);
  t.check("over-long line: -32600 with reason line_too_long", e?.error?.code === -32600 && e.id === null,
    JSON.stringify(e));
  c.send("42");
  e = await c.wait((m) => m.error?.data?.reason === "not_a_message", "number answered").catch(() => null);
  t.check("a JSON number: -32600 not_a_message", e?.error?.code === -32600, JSON.stringify(e));
  c.send(INIT(1));
  let r = await c.byId(1, "initialize").catch(() => null);
  t.check("initialize after the bad lines works", r?.result?.protocolVersion === "2025-11-25", JSON.stringify(r));
  c.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  c.send(INIT(2));
  r = await c.byId(2, "second initialize").catch(() => null);
  t.check("a second initialize is refused (one session per process)",
    r?.error?.data?.reason === "already_initialized", JSON.stringify(r));
  c.send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "echo", arguments: { text: "hi" },
    _meta: { "dev.tidemark/idempotency-key": "" } } });
  r = await c.byId(3, "bad call").catch(() => null);
  t.check("an invalid request with a known id: typed error with that id",
    r?.error?.code === -32602 && typeof r?.error?.data?.reason === "string", JSON.stringify(r));
  c.send({ jsonrpc: "2.0", id: "s4", method: "tools/call", params: { name: "echo", arguments: { text: "hi" } } });
  r = await c.byId("s4", "echo").catch(() => null);
  t.check("the next call still works", textOf(r?.result) === "hi", JSON.stringify(r));
  const sent5 = Date.now();
  c.send({ jsonrpc: "2.0", id: 5, method: "tools/call",
    params: { name: "ledger_append", arguments: { entry: "c25", delay_ms: 1500 } } });
  await new Promise((res) => setTimeout(res, 300));
  c.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 5, reason: "test" } });
  c.send({ jsonrpc: "2.0", id: 6, method: "tools/call", params: { name: "echo", arguments: { text: "c" } } });
  r = await c.byId(6, "echo after cancel").catch(() => null);
  t.check("2025: a call after notifications/cancelled is answered", textOf(r?.result) === "c", JSON.stringify(r));
  r = await c.byId(5, "the cancelled call's end", 6000).catch(() => null);
  const took = Date.now() - sent5;
  // ledger_append's delay does not look at the cancellation; it sees it after.
  t.check("2025: the cancelled call ends -32800 cancelled (as on HTTP), not with its result",
    r?.error?.code === -32800 && r?.error?.data?.reason === "cancelled",
    `${took} ms ${JSON.stringify(r)}`);
  t.check("stdout held JSON-RPC lines only", c.junk.length === 0, c.junk.slice(0, 3).join("|").slice(0, 200));
  c.proc.stdin.end();
  await until("exit at end of input", () => c.exited, 15000).catch(() => null);
  t.check("end of input: the process exits 0", c.exited?.code === 0, JSON.stringify(c.exited) + c.err.slice(-300));
}

// Authorization and TLS belong to HTTP: --stdio with them is refused, typed.
async function refusedRound() {
  const c = rawChild(["--store", "memory", "--auth-resource", "https://mcp.example/mcp",
    "--auth-issuer", "https://issuer.example", "--auth-jwks-uri", "https://issuer.example/jwks"]);
  await until("exit", () => c.exited, 10000).catch(() => null);
  t.check("--stdio with authorization: refused (exit 1, said on stderr, nothing on stdout)",
    c.exited?.code === 1 && /stdio/.test(c.err) && c.msgs.length === 0 && c.junk.length === 0,
    JSON.stringify(c.exited) + c.err.slice(-300));
}

// 2026-07-28 requests written by hand: a tool whose argument is mirrored in
// an Mcp-Param-* header, and a cancelled call.
async function modernRawRound() {
  const c = rawChild(["--store", "memory"]);
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {} };
  const call = (id, name, args) => ({ jsonrpc: "2.0", id, method: "tools/call",
    params: { name, arguments: args, _meta: meta } });
  c.send(call(1, "test_custom_header", { region: "eu-west \u00fc" }));
  let r = await c.byId(1, "custom header call").catch(() => null);
  t.check("modern: a tool with an x-mcp-header argument is callable over stdio", r?.result && !r.result.isError,
    JSON.stringify(r));
  c.send(call(2, "ledger_append", { entry: "cancel-me", delay_ms: 3000 }));
  await new Promise((res) => setTimeout(res, 300));
  c.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 2, reason: "test",
    _meta: meta } });
  c.send(call(3, "echo", { text: "after cancel" }));
  r = await c.byId(3, "echo after cancel").catch(() => null);
  t.check("modern: the next call is answered after a cancel", textOf(r?.result) === "after cancel",
    JSON.stringify(r));
  await new Promise((res) => setTimeout(res, 3500));
  t.check("modern: the cancelled call gets no answer", !c.msgs.some((m) => m.id === 2),
    JSON.stringify(c.msgs.find((m) => m.id === 2)));
  const SUB = "io.modelcontextprotocol/subscriptionId";
  c.send({ jsonrpc: "2.0", id: "L1", method: "subscriptions/listen",
    params: { notifications: { toolsListChanged: true }, _meta: meta } });
  const ack = await c.wait((m) => m.method === "notifications/subscriptions/acknowledged", "ack").catch(() => null);
  t.check("modern listen: acknowledged on stdout with its subscriptionId", ack?.params?._meta?.[SUB] === "L1",
    JSON.stringify(ack));
  c.send(call(7, "test_trigger_tool_change", {}));
  await c.byId(7, "trigger").catch(() => null);
  const lc = await c.wait((m) => m.method === "notifications/tools/list_changed", "list_changed").catch(() => null);
  t.check("modern listen: list_changed on the one channel, carrying subscriptionId",
    lc?.params?._meta?.[SUB] === "L1", JSON.stringify(lc));
  c.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "L1", _meta: meta } });
  c.send(call(8, "echo", { text: "after listen" }));
  r = await c.byId(8, "echo after listen").catch(() => null);
  t.check("modern listen cancelled: calls still served", textOf(r?.result) === "after listen");
  t.check("modern: nothing but JSON-RPC on stdout", c.junk.length === 0);
  c.proc.stdin.end();
  await until("exit", () => c.exited, 15000).catch(() => null);
  t.check("modern: exits 0 at end of input", c.exited?.code === 0, JSON.stringify(c.exited));
}

async function v1Round() {
  const { Client } = await import(require.resolve("@modelcontextprotocol/sdk/client/index.js"));
  const { StdioClientTransport } = await import(require.resolve("@modelcontextprotocol/sdk/client/stdio.js"));
  const types = await import(require.resolve("@modelcontextprotocol/sdk/types.js"));
  const c = new Client({ name: "stdio-v1", version: "1.0.0" },
    { capabilities: { elicitation: {}, sampling: {} } });
  c.setRequestHandler(types.CreateMessageRequestSchema, async (req) => ({ role: "assistant",
    model: "stdio-model", content: { type: "text", text: "sampled: " + req.params.messages[0].content.text } }));
  c.setRequestHandler(types.ElicitRequestSchema, async () => ({ action: "accept",
    content: { username: "alice", email: "alice@example.com" } }));
  const tr = new StdioClientTransport({ command: bin, args: ["--stdio", ...LOG, "--store", "memory"],
    env: SAN_ENV, stderr: "pipe" });
  let err = "";
  tr.stderr?.on("data", (d) => { err += d; });
  await c.connect(tr);
  t.check("v1: initialized over stdio (serverInfo, tools capability)",
    c.getServerVersion()?.name === "tidemark-everything" && !!c.getServerCapabilities()?.tools,
    JSON.stringify(c.getServerVersion()));
  const tools = await c.listTools();
  t.check("v1: tools/list", tools.tools.some((x) => x.name === "echo") && tools.tools.length > 10,
    String(tools.tools.length));
  const echo = await c.callTool({ name: "echo", arguments: { text: "v1 stdio" } });
  t.check("v1: tools/call echo", textOf(echo) === "v1 stdio", JSON.stringify(echo));
  const progress = [];
  await c.callTool({ name: "test_tool_with_progress", arguments: {} }, undefined,
    { onprogress: (p) => progress.push(p) });
  t.check("v1: progress notifications delivered", progress.length >= 2, JSON.stringify(progress));
  const el = await c.callTool({ name: "test_elicitation", arguments: { message: "who?" } });
  t.check("v1: elicitation answered over stdio and the call completes",
    /accept/.test(textOf(el)) && /alice/.test(textOf(el)), JSON.stringify(el));
  const sm = await c.callTool({ name: "test_sampling", arguments: { prompt: "tide" } });
  t.check("v1: sampling/createMessage answered over stdio", textOf(sm).includes("sampled: tide"),
    JSON.stringify(sm));
  await c.close();
  await new Promise((res) => setTimeout(res, 300));
  t.check("v1: nothing wrong on the server's stderr", !/Sanitizer|error/i.test(err), err.slice(-400));
}

async function v2Round() {
  const { Client } = await import(require.resolve("@modelcontextprotocol/client"));
  const { StdioClientTransport } = await import(require.resolve("@modelcontextprotocol/client/stdio"));
  const c = new Client({ name: "stdio-v2", version: "1.0.0" },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode: { pin: "2026-07-28" } } });
  c.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: { name: "Alice" } }));
  const tr = new StdioClientTransport({ command: bin, args: ["--stdio", ...LOG, "--store", "memory"],
    env: SAN_ENV, stderr: "pipe" });
  let err = "";
  tr.stderr?.on("data", (d) => { err += d; });
  await c.connect(tr);
  t.check("v2: pinned 2026-07-28 over stdio", c.getNegotiatedProtocolVersion() === "2026-07-28",
    String(c.getNegotiatedProtocolVersion()));
  const echo = await c.callTool({ name: "echo", arguments: { text: "v2 stdio" } });
  t.check("v2: tools/call echo", textOf(echo) === "v2 stdio", JSON.stringify(echo));
  const m = await c.callTool({ name: "test_input_required_result_elicitation", arguments: {} });
  t.check("v2: MRTR elicitation round completes", textOf(m).includes("Alice"), JSON.stringify(m));
  let changed = 0;
  c.setNotificationHandler("notifications/tools/list_changed", () => { changed++; });
  const sub = await c.listen({ toolsListChanged: true });
  t.check("v2: subscriptions/listen acknowledged", sub.honoredFilter?.toolsListChanged === true,
    JSON.stringify(sub.honoredFilter));
  await c.callTool({ name: "test_trigger_tool_change", arguments: {} });
  await until("list_changed", () => changed > 0, 10000).catch(() => null);
  t.check("v2: notifications/tools/list_changed on the one channel", changed > 0);
  const again = await c.callTool({ name: "echo", arguments: { text: "after listen" } });
  t.check("v2: calls still answered while the listener is open", textOf(again) === "after listen");
  await sub.close();
  await c.close();
  await new Promise((res) => setTimeout(res, 300));
  t.check("v2: nothing wrong on the server's stderr", !/Sanitizer|error/i.test(err), err.slice(-400));
}

async function ledgerRound() {
  const db = join(varDir, "stdio_ledger.db");
  for (const f of [db, db + "-wal", db + "-shm"]) rmSync(f, { force: true });
  const store = ["--store", "sqlite:" + db];
  const count = async (c, id, entry) => {
    c.send({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "ledger_read", arguments: { entry } } });
    const r = await c.byId(id, "ledger_read");
    return r.result?.structuredContent?.count;
  };
  let c = rawChild(store);
  c.send(INIT(1));
  await c.byId(1, "initialize");
  c.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  c.send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "ledger_append", arguments: { entry: "one" } } });
  const r = await c.byId(2, "ledger_append");
  t.check("ledger_append over stdio answered", !r.error, JSON.stringify(r));
  t.check("ledger_append over stdio: one row", (await count(c, 3, "one")) === 1);
  // Mid-call: the tool sleeps, the process is killed, a new one recovers it.
  c.send({ jsonrpc: "2.0", id: 4, method: "tools/call",
    params: { name: "ledger_append", arguments: { entry: "crash", delay_ms: 3000 } } });
  await new Promise((res) => setTimeout(res, 800)); // the call has begun (its record is written first)
  await c.kill("SIGKILL");
  t.check("kill -9 mid-call: no answer was written", !c.msgs.some((m) => m.id === 4));
  c = rawChild(store);
  c.send(INIT(1));
  await c.byId(1, "initialize after restart");
  let n = null;
  const end = Date.now() + 20000;
  for (let i = 10; Date.now() < end; i++) {
    n = await count(c, i, "crash");
    if (n >= 1) break;
    await new Promise((res) => setTimeout(res, 200));
  }
  t.check("after the restart recovery finished the call: one row", n === 1, String(n));
  await new Promise((res) => setTimeout(res, 500));
  t.check("still exactly one row (not re-run twice)", (await count(c, 99, "crash")) === 1);
  t.check("the first row is still one", (await count(c, 100, "one")) === 1);
  c.proc.stdin.end();
  await until("exit", () => c.exited, 15000).catch(() => null);
  await c.kill();
}

// 2026-07-28 with an idempotency key: kill -9 mid-call, restart, the same key
// re-issued by a new client process gets the one outcome (one row).
async function modernCrashRound() {
  const db = join(varDir, "stdio_modern.db");
  for (const f of [db, db + "-wal", db + "-shm"]) rmSync(f, { force: true });
  const store = ["--store", "sqlite:" + db];
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {}, "dev.tidemark/idempotency-key": "stdio-k1" };
  const call = { jsonrpc: "2.0", id: 1, method: "tools/call",
    params: { name: "ledger_append", arguments: { entry: "mk", delay_ms: 3000 }, _meta: meta } };
  let c = rawChild(store);
  c.send(call);
  await new Promise((res) => setTimeout(res, 800));
  await c.kill("SIGKILL");
  t.check("modern keyed call: killed before its answer", !c.msgs.some((m) => m.id === 1));
  c = rawChild(store);
  c.send({ ...call, id: 2 });
  const r = await c.byId(2, "re-issued keyed call", 20000).catch(() => null);
  t.check("modern keyed call re-issued after the restart: answered", r && !r.error, JSON.stringify(r));
  const rmeta = { ...meta };
  delete rmeta["dev.tidemark/idempotency-key"];
  c.send({ jsonrpc: "2.0", id: 3, method: "tools/call",
    params: { name: "ledger_read", arguments: { entry: "mk" }, _meta: rmeta } });
  const n = await c.byId(3, "ledger_read").catch(() => null);
  t.check("modern keyed call across the crash: exactly one row", n?.result?.structuredContent?.count === 1,
    JSON.stringify(n?.result?.structuredContent));
  c.proc.stdin.end();
  await until("exit", () => c.exited, 15000).catch(() => null);
  await c.kill();
}

for (const [name, fn] of [["raw", rawRound], ["refused", refusedRound], ["modern raw", modernRawRound], ["v1", v1Round], ["v2", v2Round], ["ledger", ledgerRound], ["modern crash", modernCrashRound]]) {
  try { await fn(); } catch (e) { t.check(`${name} round ran to the end`, false, e?.stack ?? String(e)); }
}
t.done();
