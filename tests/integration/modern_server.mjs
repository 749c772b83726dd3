// modern_server.mjs - the server's 2026-07-28 era beyond what the official
// suite checks: both eras on one endpoint at once, the typed errors and
// their reasons (-32022 data, header mismatches, refused methods and
// notifications), MRTR state (a round trip; tampered and expired state never
// run the handler), idempotency keys (replay, re-issue while running, a key
// reused with other params; the ledger holds exactly one row), and a
// listener receiving list_changed made by another server process sharing
// the Redis store.
//   node modern_server.mjs TIDEMARK_EVERYTHING VAR_DIR
import { checker, startServer, stopServer, serversFor, initialize, post, messages,
  toolCall, reasonOf, until, sleep } from "./mcp_http.mjs";
import { sseEvents } from "./sse.mjs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [bin] = process.argv.slice(2);
const t = checker();
const V = "2026-07-28";
const META = { "io.modelcontextprotocol/protocolVersion": V,
  "io.modelcontextprotocol/clientInfo": { name: "modern-server-test", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": { elicitation: {}, sampling: {}, roots: {} } };
let nextId = 1;

function mname(method, params) {
  if (method === "tools/call" || method === "prompts/get") return params?.name;
  if (method === "resources/read") return params?.uri;
  return undefined;
}

// One modern request: the headers a conforming client sends, overridable.
async function req(url, method, params = {}, { headers = {}, meta = {}, id = nextId++, drop = [] } = {}) {
  const p = { ...params, _meta: { ...META, ...meta } };
  const h = { "content-type": "application/json", accept: "application/json, text/event-stream",
    "mcp-protocol-version": V, "mcp-method": method };
  const n = mname(method, p);
  if (n !== undefined) h["mcp-name"] = n;
  for (const d of drop) delete h[d];
  Object.assign(h, headers);
  const res = await fetch(url, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", id, method, params: p }) });
  const m = await messages(res);
  return { status: res.status, session: res.headers.get("mcp-session-id"), msgs: m.msgs,
    msg: m.msgs.find((x) => x.id === id) };
}
const call = (url, name, args = {}, opts = {}) =>
  req(url, "tools/call", { name, arguments: args, ...(opts.params ?? {}) }, opts);
const text = (r) => r.msg?.result?.content?.[0]?.text;
const errCode = (r) => r.msg?.error?.code;

async function eras(url) {
  // A 2025 session and modern requests side by side on one endpoint.
  const sid = await initialize(url, "2025-11-25");
  const legacy = await messages(await post(url, sid, { jsonrpc: "2.0", id: 1, method: "tools/list" },
    { headers: { "mcp-protocol-version": "2025-11-25" } }));
  const modern = await req(url, "tools/list");
  t.check("legacy tools/list in its session", Array.isArray(legacy.msgs[0]?.result?.tools));
  t.check("legacy result has no resultType", legacy.msgs[0]?.result?.resultType === undefined);
  t.check("modern tools/list beside it", modern.status === 200 && modern.msg?.result?.resultType === "complete");
  t.check("modern result names the server in _meta",
    modern.msg?.result?._meta?.["io.modelcontextprotocol/serverInfo"]?.name === "tidemark-everything");
  t.check("modern list carries caching hints", Number.isInteger(modern.msg?.result?.ttlMs) &&
    ["public", "private"].includes(modern.msg?.result?.cacheScope));
  const withSid = await req(url, "tools/list", {}, { headers: { "mcp-session-id": sid } });
  t.check("a session id on a modern request is ignored, none minted",
    withSid.status === 200 && withSid.session === null);
  const lping = await messages(await post(url, sid, { jsonrpc: "2.0", id: 2, method: "ping" },
    { headers: { "mcp-protocol-version": "2025-11-25" } }));
  t.check("legacy ping still works", lping.status === 200 && lping.msgs[0]?.result !== undefined);
  const logs = await call(url, "test_logging_tool", {}, { meta: { "io.modelcontextprotocol/logLevel": "info" } });
  t.check("with a logLevel the call streams its log messages",
    logs.msgs.filter((m) => m.method === "notifications/message").length === 3 && text(logs));
  const quiet = await call(url, "test_logging_tool");
  t.check("without a logLevel, no notifications/message", quiet.msgs.length === 1 && text(quiet));
  const disc = await req(url, "server/discover");
  t.check("server/discover lists both eras", disc.msg?.result?.supportedVersions?.includes(V) &&
    disc.msg?.result?.supportedVersions?.includes("2025-11-25"));
}

async function errors(url) {
  const uv = await req(url, "tools/list", {}, { headers: { "mcp-protocol-version": "2099-01-01" },
    meta: { "io.modelcontextprotocol/protocolVersion": "2099-01-01" } });
  t.check("unsupported version: 400 -32022", uv.status === 400 && errCode(uv) === -32022);
  t.check("-32022 data: requested and every version served",
    uv.msg?.error?.data?.requested === "2099-01-01" &&
    ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"].every((v) => uv.msg?.error?.data?.supported?.includes(v)));
  const cases = [
    ["version header differs from _meta", "tools/list", {}, { meta: { "io.modelcontextprotocol/protocolVersion": "2025-11-25" } }, "header_mismatch"],
    ["Mcp-Method missing", "tools/list", {}, { drop: ["mcp-method"] }, "header_missing"],
    ["Mcp-Method differs", "tools/list", {}, { headers: { "mcp-method": "prompts/list" } }, "header_mismatch"],
    ["Mcp-Name missing", "tools/call", { name: "test_simple_text" }, { drop: ["mcp-name"] }, "header_missing"],
    ["Mcp-Name differs", "tools/call", { name: "test_simple_text" }, { headers: { "mcp-name": "other" } }, "header_mismatch"],
    ["Mcp-Name bad Base64", "tools/call", { name: "test_simple_text" }, { headers: { "mcp-name": "=?base64?dGVzdA?=" } }, "header_invalid"],
    ["Mcp-Param missing", "tools/call", { name: "test_custom_header", arguments: { region: "eu" } }, {}, "header_missing"],
    ["Mcp-Param differs", "tools/call", { name: "test_custom_header", arguments: { region: "eu" } }, { headers: { "mcp-param-region": "us" } }, "header_mismatch"],
  ];
  for (const [what, method, params, opts, reason] of cases) {
    const r = await req(url, method, params, opts);
    t.check(`${what}: 400 -32020 ${reason}`, r.status === 400 && errCode(r) === -32020 && reasonOf(r.msg) === reason,
      `${r.status} ${JSON.stringify(r.msg?.error)}`);
  }
  const b64 = Buffer.from("test_simple_text").toString("base64");
  const ok = await req(url, "tools/call", { name: "test_simple_text", arguments: {} }, { headers: { "mcp-name": `=?base64?${b64}?=` } });
  t.check("Mcp-Name in the Base64 sentinel form is decoded", ok.status === 200 && text(ok));
  const prm = await call(url, "test_custom_header", { region: "Hello, 世界" },
    { headers: { "mcp-param-region": "=?base64?" + Buffer.from("Hello, 世界").toString("base64") + "?=" } });
  t.check("Mcp-Param-Region decoded and matched", text(prm) === "region=Hello, 世界", JSON.stringify(prm.msg));
  const meta = await req(url, "tools/list", { _meta: {} }, { meta: { "io.modelcontextprotocol/clientCapabilities": undefined } });
  t.check("_meta without clientCapabilities: 400 -32602 invalid_request_meta",
    meta.status === 400 && errCode(meta) === -32602 && reasonOf(meta.msg) === "invalid_request_meta");
  for (const m of ["ping", "logging/setLevel", "resources/subscribe", "initialize"]) {
    const r = await req(url, m, m === "logging/setLevel" ? { level: "info" } : {});
    t.check(`${m} refused: 404 -32601 method_removed`, r.status === 404 && errCode(r) === -32601 && reasonOf(r.msg) === "method_removed");
  }
  const unk = await req(url, "no/such");
  t.check("unknown method: 404 -32601 method_not_found", unk.status === 404 && reasonOf(unk.msg) === "method_not_found");
  const get = await fetch(url, { headers: { accept: "text/event-stream", "mcp-protocol-version": V } });
  const gb = await get.json();
  t.check("GET with the modern header: 405 typed", get.status === 405 && gb?.error?.data?.reason === "method_not_allowed");
  for (const n of ["notifications/roots/list_changed", "notifications/elicitation/complete"]) {
    const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json",
      accept: "application/json, text/event-stream", "mcp-protocol-version": V, "mcp-method": n },
    body: JSON.stringify({ jsonrpc: "2.0", method: n, params: { _meta: META } }) });
    const b = await r.json();
    t.check(`${n} refused: 400 notification_not_supported`, r.status === 400 && b?.error?.data?.reason === "notification_not_supported");
  }
  const lbad = await req(url, "subscriptions/listen", { notifications: { resourceSubscriptions: "x" } });
  t.check("listen with a bad filter: -32602 invalid_params", errCode(lbad) === -32602 && reasonOf(lbad.msg) === "invalid_params");
  const lnone = await req(url, "subscriptions/listen", {});
  t.check("listen without notifications: -32602", errCode(lnone) === -32602);
  const nf = await req(url, "resources/read", { uri: "test://nope" });
  t.check("resource not found: -32602 resource_not_found with data.uri",
    errCode(nf) === -32602 && reasonOf(nf.msg) === "resource_not_found" && nf.msg?.error?.data?.uri === "test://nope");
  const cap = await call(url, "test_missing_capability", {}, { meta: { "io.modelcontextprotocol/clientCapabilities": {} } });
  t.check("undeclared capability: 400 -32021 {requiredCapabilities: {sampling}}",
    cap.status === 400 && errCode(cap) === -32021 && cap.msg?.error?.data?.requiredCapabilities?.sampling !== undefined);
}

async function mrtr(url, shortUrl) {
  const r1 = await call(url, "test_mrtr_runs");
  const st = r1.msg?.result?.requestState;
  t.check("round 1: input_required with a sealed requestState",
    r1.msg?.result?.resultType === "input_required" && r1.msg?.result?.inputRequests?.go?.method === "elicitation/create" && typeof st === "string");
  const answer = { go: { action: "accept", content: { go: "yes" } } };
  const tampered = st.slice(0, -2) + (st.endsWith("AA") ? "BB" : "AA");
  const bad = await call(url, "test_mrtr_runs", {}, { params: { inputResponses: answer, requestState: tampered } });
  t.check("tampered requestState: -32602 request_state_invalid", errCode(bad) === -32602 && reasonOf(bad.msg) === "request_state_invalid");
  const foreign = await call(url, "test_input_required_result_elicitation", {}, { params: { inputResponses: answer, requestState: st } });
  t.check("a state sealed for another tool: request_state_invalid", reasonOf(foreign.msg) === "request_state_invalid");
  // The short-lived server seals for 300 ms.
  const s1 = await call(shortUrl, "test_mrtr_runs");
  const sst = s1.msg?.result?.requestState;
  await sleep(600);
  const exp = await call(shortUrl, "test_mrtr_runs", {}, { params: { inputResponses: answer, requestState: sst } });
  t.check("expired requestState: -32602 request_state_expired", errCode(exp) === -32602 && reasonOf(exp.msg) === "request_state_expired");
  const ok = await call(url, "test_mrtr_runs", {}, { params: { inputResponses: answer, requestState: st } });
  // Runs: round 1 (1), then this retry (2): the refused ones never ran.
  const n1 = Number((text(ok) ?? "").replace("runs=", ""));
  t.check("the retry completes; the refused retries never ran the handler", ok.msg?.result?.resultType === "complete" &&
    text(ok)?.startsWith("runs=") && n1 === 2 + 0, text(ok));
  const m1 = await call(url, "test_input_required_result_multi_round");
  const m2 = await call(url, "test_input_required_result_multi_round", {}, { params: {
    inputResponses: { step1: { action: "accept", content: { name: "Ann" } } }, requestState: m1.msg?.result?.requestState } });
  const m3 = await call(url, "test_input_required_result_multi_round", {}, { params: {
    inputResponses: { step2: { action: "accept", content: { color: "red" } } }, requestState: m2.msg?.result?.requestState } });
  t.check("two rounds: the second re-run carries round 1's answer in the state", text(m3) === "Ann likes red", JSON.stringify(m3.msg));
}

async function keys(url, url2) {
  const k = "key-" + Math.random();
  const a = await call(url, "ledger_append", { entry: k }, { meta: { "dev.tidemark/idempotency-key": k } });
  const b = await call(url2, "ledger_append", { entry: k }, { meta: { "dev.tidemark/idempotency-key": k }, id: 9001 });
  t.check("a key's first call completes", a.msg?.result?.resultType === "complete", JSON.stringify(a.msg));
  t.check("its re-issue (other node, new id) gets the recorded result under its own id",
    b.msg?.id === 9001 && JSON.stringify(b.msg?.result?.content) === JSON.stringify(a.msg?.result?.content));
  const reused = await call(url, "ledger_append", { entry: k + "-other" }, { meta: { "dev.tidemark/idempotency-key": k } });
  t.check("the key with other params: -32602 idempotency_key_reused", errCode(reused) === -32602 && reasonOf(reused.msg) === "idempotency_key_reused");
  // Input rounds under one key: each round is its own request of the key.
  const k3 = "rounds-" + Math.random();
  const km = { "dev.tidemark/idempotency-key": k3 };
  const q1 = await call(url, "test_mrtr_runs", {}, { meta: km });
  const p2 = { inputResponses: { go: { action: "accept", content: { go: "y" } } }, requestState: q1.msg?.result?.requestState };
  const q2 = await call(url2, "test_mrtr_runs", {}, { meta: km, params: p2 });
  const q2again = await call(url, "test_mrtr_runs", {}, { meta: km, params: p2, id: 9003 });
  const q1again = await call(url2, "test_mrtr_runs", {}, { meta: km, id: 9004 });
  t.check("a keyed call's input round completes under the same key", q2.msg?.result?.resultType === "complete", JSON.stringify(q2.msg));
  t.check("the round's re-issue replays it without running it", q2again.msg?.id === 9003 && text(q2again) === text(q2), `${text(q2)} / ${text(q2again)}`);
  t.check("the first round's re-issue replays its input request",
    q1again.msg?.result?.resultType === "input_required" && q1again.msg?.result?.requestState === q1.msg?.result?.requestState);
  const k2 = "slow-" + Math.random();
  const first = call(url, "ledger_append", { entry: k2, delay_ms: 1500 }, { meta: { "dev.tidemark/idempotency-key": k2 } });
  await sleep(300);
  const again = await call(url2, "ledger_append", { entry: k2, delay_ms: 1500 }, { meta: { "dev.tidemark/idempotency-key": k2 }, id: 9002 });
  const f = await first;
  t.check("a re-issue while the first runs waits for its result", again.msg?.id === 9002 &&
    JSON.stringify(again.msg?.result?.content) === JSON.stringify(f.msg?.result?.content), JSON.stringify(again.msg));
  // The same key's first request sent to both nodes at once, three times:
  // whichever begins its record first runs, the other waits for it.
  for (let i = 0; i < 3; i++) {
    const kk = `both-${i}-` + Math.random();
    const mk = { "dev.tidemark/idempotency-key": kk };
    const [x, y] = await Promise.all([
      call(url, "ledger_append", { entry: kk, delay_ms: 300 }, { meta: mk, id: 9100 + i }),
      call(url2, "ledger_append", { entry: kk, delay_ms: 300 }, { meta: mk, id: 9200 + i })]);
    const rows = await call(url, "ledger_read", { entry: kk });
    t.check(`key sent to both nodes at once (${i}): both answered alike, one ledger row`,
      x.msg?.id === 9100 + i && y.msg?.id === 9200 + i &&
      JSON.stringify(x.msg?.result?.content) === JSON.stringify(y.msg?.result?.content) &&
      rows.msg?.result?.structuredContent?.count === 1,
      `${JSON.stringify(x.msg)} / ${JSON.stringify(y.msg)} / ${JSON.stringify(rows.msg?.result?.structuredContent)}`);
  }
  for (const [what, entry] of [["replayed key", k], ["re-issued while running", k2]]) {
    const rows = await call(url, "ledger_read", { entry });
    t.check(`${what}: exactly one ledger row`, rows.msg?.result?.structuredContent?.count === 1, JSON.stringify(rows.msg?.result));
  }
  const rows = await call(url, "ledger_read", { entry: k + "-other" });
  t.check("the refused reuse wrote nothing", rows.msg?.result?.structuredContent?.count === 0);
}

// A listener outlives the session TTL while it is connected (the janitor
// sees it attached), and is still fed.
async function listenerTtl(url) {
  const ac = new AbortController();
  const res = await fetch(url, { method: "POST", signal: ac.signal, headers: { "content-type": "application/json",
    accept: "application/json, text/event-stream", "mcp-protocol-version": V, "mcp-method": "subscriptions/listen" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 78, method: "subscriptions/listen",
    params: { _meta: META, notifications: { toolsListChanged: true } } }) });
  const got = [];
  const reader = (async () => {
    try { for await (const ev of sseEvents(res.body)) if (ev.data) got.push(JSON.parse(ev.data)); } catch { /* aborted */ }
  })();
  await until("the acknowledgement", () => got.length >= 1, 5000).catch(() => {});
  await sleep(2600); /* more than twice the 1 s TTL */
  await call(url, "test_trigger_tool_change");
  const lc = await until("list_changed after the TTL", () => got.find((m) => m.method === "notifications/tools/list_changed"), 5000).catch(() => null);
  t.check("a connected listener outlives the session TTL and is still fed", !!lc);
  ac.abort();
  await reader;
}

// A listener on node 0; the change made through node 1.
async function listen(url0, url1) {
  const ac = new AbortController();
  const res = await fetch(url0, { method: "POST", signal: ac.signal, headers: { "content-type": "application/json",
    accept: "application/json, text/event-stream", "mcp-protocol-version": V, "mcp-method": "subscriptions/listen" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 77, method: "subscriptions/listen",
    params: { _meta: META, notifications: { toolsListChanged: true } } }) });
  const got = [];
  const reader = (async () => {
    try { for await (const ev of sseEvents(res.body)) if (ev.data) got.push(JSON.parse(ev.data)); } catch { /* aborted */ }
  })();
  await until("the acknowledgement", () => got.length >= 1, 5000).catch(() => {});
  t.check("listen: acknowledged first, with its subscriptionId",
    got[0]?.method === "notifications/subscriptions/acknowledged" &&
    got[0]?.params?._meta?.["io.modelcontextprotocol/subscriptionId"] === 77 &&
    got[0]?.params?.notifications?.toolsListChanged === true);
  await call(url1, "test_trigger_prompt_change");
  await call(url1, "test_trigger_tool_change");
  const lc = await until("tools/list_changed from the other node",
    () => got.find((m) => m.method === "notifications/tools/list_changed"), 8000).catch(() => null);
  t.check("a tools change made through another process reaches the listener", !!lc);
  t.check("its notification carries the subscriptionId", lc?.params?._meta?.["io.modelcontextprotocol/subscriptionId"] === 77);
  t.check("a prompts change it did not ask for never arrives", !got.some((m) => m.method === "notifications/prompts/list_changed"));
  ac.abort();
  await reader;
}

// kill -9 while a keyed call runs; the restarted server finishes it
// (ledger_append is atomic: re-run) and the re-issue gets that result.
async function crash(dir) {
  const db = join(mkdtempSync(join(dir || tmpdir(), "modern-crash-")), "t.db");
  const a = await startServer(bin, ["--store", "sqlite:" + db]);
  const k = "crash-" + Math.random();
  const meta = { "dev.tidemark/idempotency-key": k };
  const first = call(a.url, "ledger_append", { entry: k, delay_ms: 3000 }, { meta }).catch(() => null);
  await sleep(700);
  await stopServer(a, "SIGKILL");
  await first;
  const b = await startServer(bin, ["--store", "sqlite:" + db]);
  try {
    const again = await call(b.url, "ledger_append", { entry: k, delay_ms: 3000 }, { meta, id: 9100 });
    t.check("after kill -9 the re-issue gets the recovered result",
      again.msg?.id === 9100 && again.msg?.result?.resultType === "complete", JSON.stringify(again.msg));
    const rows = await call(b.url, "ledger_read", { entry: k });
    t.check("after kill -9: exactly one ledger row", rows.msg?.result?.structuredContent?.count === 1,
      JSON.stringify(rows.msg?.result?.structuredContent));
  } finally {
    await stopServer(b);
  }
}

// A call whose atomic effect is refused at commit: the answer is what was
// committed (effect_failed), never the result the handler returned; the
// same as the 2025 era's stream says, and the same again under a key.
async function effectRefused(url) {
  const r = await call(url, "effect_refused");
  t.check("effect refused at commit: answered effect_failed, not the handler's result",
    errCode(r) === -32603 && r.msg?.error?.data?.reason === "effect_failed" && !r.msg?.result,
    JSON.stringify(r.msgs));
  const meta = { "dev.tidemark/idempotency-key": "eff-" + Date.now() };
  const k1 = await call(url, "effect_refused", {}, { meta });
  const k2 = await call(url, "effect_refused", {}, { meta });
  t.check("... under an idempotency key too, and its re-issue gets the same committed answer",
    k1.msg?.error?.data?.reason === "effect_failed" && k2.msg?.error?.data?.reason === "effect_failed",
    JSON.stringify([k1.msgs, k2.msgs]));
}

const main = async () => {
  const mem = await startServer(bin, ["--store", "memory"]);
  const short = await startServer(bin, ["--store", "memory", "--request-state-ttl-ms", "300",
    "--session-ttl-seconds", "1"]);
  try {
    await eras(mem.url);
    await errors(mem.url);
    await effectRefused(mem.url);
    await mrtr(mem.url, short.url);
    await crash(process.argv[3]);
    await listenerTtl(short.url);
  } finally {
    await stopServer(mem);
    await stopServer(short);
  }
  // On SQLite the held POST is answered from the commit's own callback,
  // which must say the fallback when the effect failed there
  const sq = await serversFor(bin, "sqlite");
  try {
    await effectRefused(sq.urls[0]);
  } finally {
    await sq.stop();
  }
  const nodes = await serversFor(bin, "redis");
  if (!nodes) {
    t.check("redis-server available for the two-node part", false);
  } else {
    try {
      await keys(nodes.urls[0], nodes.urls[1]);
      await listen(nodes.urls[0], nodes.urls[1]);
      await effectRefused(nodes.urls[0]);
    } finally {
      await nodes.stop();
    }
  }
  t.done();
};
main().catch((e) => { console.error(e); process.exit(1); });
