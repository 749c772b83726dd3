// auth_server.mjs - the server as an OAuth 2.1 resource server, on the wire,
// against tokens from a real authorization server (oidc-provider,
// authz_server.mjs):
//
//   node auth_server.mjs TIDEMARK_EVERYTHING table     both eras
//   node auth_server.mjs TIDEMARK_EVERYTHING sdk       the TypeScript SDKs over TLS
//   node auth_server.mjs TIDEMARK_EVERYTHING cluster   three Redis nodes behind HAProxy
//   node auth_server.mjs TIDEMARK_EVERYTHING introspect opaque tokens (RFC 7662)
//
// table: no token -> 401 naming a metadata URL that serves the document;
// garbage, expired, not yet valid, wrong issuer, wrong audience, wrong key,
// alg none, HS256 "signed" with the public key -> 401 invalid_token; a token
// lacking the tool's scope -> 403 naming it; the right token -> 200. Then the
// principals: B with A's session id -> 404 unknown_session (as a session that
// does not exist), B with A's idempotency key -> its own call (two ledger
// rows, one each), B with A's requestState -> request_state_invalid. The
// issuer down: an unknown kid -> 503 issuer_unavailable with Retry-After, a
// known kid still 200. Metrics count refusals by reason; no token and no
// session id in the log at info level.
// sdk: a CA, a server certificate made here (openssl); the SDK 1.32.2 client
// (client credentials, discovery from the 401) and the 2.4.0 client (a
// bearer token) connect over HTTPS and call a tool.
// cluster: a session made through node A by principal A is 404 to principal
// B on node C (and still A's there).
import { spawn, spawnSync } from "node:child_process";
import { createHmac, createPrivateKey, createPublicKey, sign } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { checker, startServer, stopServer, post, messages, reasonOf } from "./mcp_http.mjs";
import { modern, modernCall, modernPost, KEY } from "./modern_http.mjs";
import { Cluster, freePort, missingTools } from "./multinode_env.mjs";
import { startAuthzServer, privateJwk, SECRET } from "./authz_server.mjs";
import { watchdog } from "./watchdog.mjs";

const [bin, part = "table"] = process.argv.slice(2);
if (!bin) {
  console.error("usage: node auth_server.mjs TIDEMARK_EVERYTHING table|sdk|cluster|introspect");
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const t = checker();
// Fail with the step it was at, before CTest's 90 s timeout kills it silently,
// even when its event loop is blocked (watchdog.mjs).
const wd = watchdog(80000, part);
wd.step("start");
const cleanups = [];

const b64u = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
// A JWT signed with the named key of authz_server.mjs (kid: the name unless given).
function jwt(claims, { key = "rs1", kid = key, alg = "RS256" } = {}) {
  const input = `${b64u({ alg, kid, typ: "JWT" })}.${b64u(claims)}`;
  const k = createPrivateKey({ key: privateJwk(key), format: "jwk" });
  return `${input}.${sign("sha256", Buffer.from(input), k).toString("base64url")}`;
}

function authFlags(as, resource) {
  return ["--auth-resource", resource, "--auth-issuer", as.issuer, "--auth-jwks-uri", as.jwksUri,
    "--auth-scope", "ledger_append=mcp:write", "--auth-scope", "*=mcp:tools",
    "--auth-scopes-supported", "mcp:tools mcp:write", "--auth-jwks-min-refresh-ms", "500"];
}

const bearer = (tok) => (tok ? { authorization: `Bearer ${tok}` } : {});
const init = (id = 0) => ({ jsonrpc: "2.0", id, method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } });
const call = (id, name, args = {}) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } });

// Every exchange has a deadline: a server that never answers fails the
// check that waits for it, not the whole run at CTest's timeout.
async function legacy(url, sid, body, tok) {
  const r = await post(url, sid, body, { headers: bearer(tok), signal: AbortSignal.timeout(15000) });
  const www = r.headers.get("www-authenticate"), retry = r.headers.get("retry-after");
  const m = await messages(r);
  return { status: r.status, www, retry, sid: r.headers.get("mcp-session-id"), msg: m.msgs.find((x) => x.id !== undefined || x.error) };
}

async function session(url, tok) {
  const r = await legacy(url, null, init(), tok);
  if (r.status !== 200 || !r.sid) throw new Error(`initialize: ${r.status}`);
  await legacy(url, r.sid, { jsonrpc: "2.0", method: "notifications/initialized" }, tok);
  return r.sid;
}

// ---- table ------------------------------------------------------------------

async function badTokens(as, resource) {
  const now = Math.floor(Date.now() / 1000);
  const good = { iss: as.issuer, aud: resource, sub: "forged", exp: now + 300, iat: now, scope: "mcp:tools" };
  const pubPem = createPublicKey({ key: privateJwk("rs1"), format: "jwk" }).export({ type: "spki", format: "pem" });
  const hsInput = `${b64u({ alg: "HS256", kid: "rs1" })}.${b64u(good)}`;
  return {
    garbage: "not-a-token-at-all",
    expired: jwt({ ...good, exp: now - 3600, iat: now - 7200 }),
    "not yet valid": jwt({ ...good, nbf: now + 3600 }),
    "wrong issuer": jwt({ ...good, iss: "http://127.0.0.1:9/other" }),
    "wrong audience": jwt({ ...good, aud: "http://127.0.0.1:9/mcp" }),
    "wrong key": jwt(good, { key: "rs9", kid: "rs1" }),
    "alg none": `${b64u({ alg: "none", kid: "rs1" })}.${b64u(good)}.`,
    "HS256 with the public key": `${hsInput}.${createHmac("sha256", pubPem).update(hsInput).digest("base64url")}`,
  };
}

async function table() {
  const asPort = await freePort(), port = await freePort();
  const resource = `http://127.0.0.1:${port}/mcp`;
  const as = await startAuthzServer({ port: asPort, resource });
  cleanups.push(() => as.stop().catch(() => {}));
  const tdir = mkdtempSync(join(tmpdir(), "tidemark-auth-"));
  cleanups.push(() => rmSync(tdir, { recursive: true, force: true }));
  const scrape = "scrape-" + Math.random().toString(36).slice(2);
  writeFileSync(join(tdir, "metrics.token"), scrape + "\n");
  const s = await startServer(bin, ["--store", "memory", "--listen", `127.0.0.1:${port}`,
    "--log-level", "info", "--metrics-token-file", join(tdir, "metrics.token"), ...authFlags(as, resource)]);
  cleanups.push(() => stopServer(s));
  const url = s.url, md = `http://127.0.0.1:${port}/.well-known/oauth-protected-resource/mcp`;

  // no token, both eras
  let r = await legacy(url, null, init());
  t.check("2025: no token -> 401 naming the metadata", r.status === 401 &&
    r.www === `Bearer resource_metadata="${md}"` && reasonOf(r.msg) === "unauthorized", JSON.stringify(r));
  const mr = await modernPost(url, 1, "tools/call", { name: "echo", arguments: { text: "x" } });
  const mwww = mr.headers.get("www-authenticate");
  let m = await messages(mr);
  t.check("2026-07-28: no token -> 401 naming the metadata and the tool's scope",
    m.status === 401 && reasonOf(m.msgs[0]) === "unauthorized" &&
    mwww === `Bearer resource_metadata="${md}", scope="mcp:tools"`, JSON.stringify([m.status, m.msgs, mwww]));
  for (const u of [md, `http://127.0.0.1:${port}/.well-known/oauth-protected-resource`]) {
    const d = await fetch(u);
    const doc = await d.json();
    t.check(`metadata at ${u.replace(/^http:\/\/[^/]+/, "")}`, d.status === 200 && doc.resource === resource &&
      doc.authorization_servers?.[0] === as.issuer, JSON.stringify(doc));
  }
  const h = await fetch(`http://127.0.0.1:${port}/healthz`);
  t.check("/healthz needs no token", h.status === 200);

  // invalid tokens: 401 invalid_token, both eras
  for (const [what, tok] of Object.entries(await badTokens(as, resource))) {
    r = await legacy(url, null, init(), tok);
    m = await modernCall(url, 2, "echo", { text: "x" }, { headers: bearer(tok) });
    t.check(`${what}: 401 invalid_token in both eras`, r.status === 401 &&
      r.www?.startsWith('Bearer error="invalid_token"') && reasonOf(r.msg) === "invalid_token" &&
      m.status === 401 && reasonOf(m.msgs[0]) === "invalid_token", JSON.stringify([r, m.status, m.msgs]));
  }

  // scopes
  const tokA = await as.token({ client: "rs", scope: "mcp:tools" });
  const tokAw = await as.token({ client: "rs", scope: "mcp:tools mcp:write" });
  const tokBw = await as.token({ client: "es", scope: "mcp:tools mcp:write" });
  const sidA = await session(url, tokA);
  r = await legacy(url, sidA, call(3, "ledger_append", { entry: "e" }), tokA);
  t.check("2025: missing scope -> 403 insufficient_scope naming mcp:write", r.status === 403 &&
    r.www === `Bearer error="insufficient_scope", resource_metadata="${md}", scope="mcp:write"` &&
    r.msg?.error?.data?.scope === "mcp:write", JSON.stringify(r));
  m = await modernCall(url, 3, "ledger_append", { entry: "e" }, { headers: bearer(tokA) });
  t.check("2026-07-28: missing scope -> 403 naming it", m.status === 403 &&
    reasonOf(m.msgs[0]) === "insufficient_scope", JSON.stringify(m.msgs));
  r = await legacy(url, sidA, call(4, "echo", { text: "hi" }), tokA);
  t.check("2025: the right token -> 200", r.status === 200 && r.msg?.result?.content?.[0]?.text === "hi", JSON.stringify(r));
  m = await modernCall(url, 4, "echo", { text: "hi" }, { headers: bearer(tokA) });
  t.check("2026-07-28: the right token -> 200", m.status === 200 && m.response?.result?.content?.[0]?.text === "hi",
    JSON.stringify(m.msgs));

  // principals: sessions (2025)
  r = await legacy(url, sidA, call(5, "echo", { text: "b" }), tokBw);
  const r404 = await legacy(url, "0123456789abcdef0123456789abcdef", call(5, "echo", { text: "b" }), tokBw);
  t.check("B with A's session id -> 404 unknown_session, as a session that does not exist",
    r.status === 404 && reasonOf(r.msg) === "unknown_session" && r404.status === 404 &&
    JSON.stringify(r.msg) === JSON.stringify(r404.msg), JSON.stringify([r, r404]));
  const g = await fetch(url, { headers: { accept: "text/event-stream", "mcp-session-id": sidA, ...bearer(tokBw) } });
  await g.body?.cancel();
  const d = await fetch(url, { method: "DELETE", headers: { "mcp-session-id": sidA, ...bearer(tokBw) } });
  t.check("B's GET and DELETE of A's session -> 404", g.status === 404 && d.status === 404, `${g.status} ${d.status}`);
  r = await legacy(url, sidA, call(6, "echo", { text: "still" }), tokA);
  t.check("A's session is still A's", r.status === 200, JSON.stringify(r));

  // principals: idempotency keys (2026-07-28)
  const entry = "auth-key-" + Date.now(), key = { [KEY]: "k-" + entry };
  const a1 = await modernCall(url, 7, "ledger_append", { entry }, { headers: bearer(tokAw), meta: key });
  const a2 = await modernCall(url, 8, "ledger_append", { entry }, { headers: bearer(tokAw), meta: key });
  const b1 = await modernCall(url, 9, "ledger_append", { entry }, { headers: bearer(tokBw), meta: key });
  const rows = (await modernCall(url, 10, "ledger_read", { entry }, { headers: bearer(tokAw) }))
    .response?.result?.structuredContent?.entries ?? [];
  const kA = a1.response?.result?.structuredContent?.key, kB = b1.response?.result?.structuredContent?.key;
  t.check("A's re-issue under its key is A's call again (same key)", a2.response?.result?.structuredContent?.key === kA && kA,
    JSON.stringify([a1.msgs, a2.msgs]));
  t.check("B with A's idempotency key -> its own new call: two ledger rows, one each",
    rows.length === 2 && kA && kB && kA !== kB && rows.some((x) => x.request_key === kA) &&
    rows.some((x) => x.request_key === kB), JSON.stringify([rows, kA, kB]));

  // principals: sealed requestState (2026-07-28)
  const tool = "test_input_required_result_request_state";
  const st = await modernCall(url, 11, tool, {}, { headers: bearer(tokA) });
  const state = st.response?.result?.requestState;
  const answers = { confirm: { action: "accept", content: { ok: true } } };
  const bs = await modern(url, 12, "tools/call", { name: tool, arguments: {}, requestState: state,
    inputResponses: answers }, { headers: bearer(tokBw) });
  const as2 = await modern(url, 13, "tools/call", { name: tool, arguments: {}, requestState: state,
    inputResponses: answers }, { headers: bearer(tokA) });
  t.check("B with A's requestState -> request_state_invalid", state && reasonOf(bs.response) === "request_state_invalid",
    JSON.stringify(bs.msgs));
  t.check("A with its own requestState -> the result", /state-ok/.test(as2.response?.result?.content?.[0]?.text ?? ""),
    JSON.stringify(as2.msgs));

  // principals: tasks (2026-07-28, the tasks extension)
  const TASKS = { extensions: { "io.modelcontextprotocol/tasks": {} } };
  const tc = await modern(url, 15, "tools/call", { name: "slow_compute", arguments: { seconds: 0.1, label: "a" } },
    { headers: bearer(tokA), capabilities: TASKS });
  const taskId = tc.response?.result?.taskId;
  const tget = (id, tok) => modern(url, "tg-" + tok.slice(-6), "tasks/get", { taskId: id },
    { headers: { ...bearer(tok), "mcp-name": id }, capabilities: TASKS });
  const tA = await tget(taskId, tokA), tB = await tget(taskId, tokBw);
  const tNone = await tget("0".repeat(32), tokBw);
  t.check("B with A's task id -> not found, exactly as a task that does not exist; A sees it",
    !!taskId && tA.response?.result?.taskId === taskId && tB.response?.error?.code === tNone.response?.error?.code &&
    tB.response?.error?.code === -32602 && reasonOf(tB.response) === reasonOf(tNone.response) &&
    tB.response?.error?.message === tNone.response?.error?.message,
    JSON.stringify([tc.response, tA.response, tB.response, tNone.response]));

  // results that differ by principal are private
  const rd = await modern(url, 14, "resources/read", { uri: "test://static-text" }, { headers: bearer(tokA) });
  t.check("2026-07-28 resources/read with authorization: cacheScope private",
    rd.response?.result?.cacheScope === "private", JSON.stringify(rd.msgs));

  // key rotation: the issuer comes back signing with a new key (kid rs2);
  // the server takes the new kid without a restart, and the old one still
  await as.stop();
  const asRot = await startAuthzServer({ port: asPort, resource, keys: ["rs2", "rs1", "es1"] });
  cleanups.push(() => asRot.stop().catch(() => {}));
  const rot = await asRot.token({ client: "rs", scope: "mcp:tools" });
  const rotEnd = Date.now() + 10000;
  do { m = await modernCall(url, 17, "echo", { text: "rot" }, { headers: bearer(rot) }); }
  while (m.status !== 200 && Date.now() < rotEnd);
  t.check("a token signed with a new kid after rotation is accepted without a restart; the old kid still is",
    JSON.parse(Buffer.from(rot.split(".")[0], "base64url")).kid === "rs2" && m.status === 200 &&
    (await modernCall(url, 18, "echo", { text: "old" }, { headers: bearer(tokA) })).status === 200,
    JSON.stringify(m.msgs));

  // the issuer down
  await asRot.stop();
  const now = Math.floor(Date.now() / 1000);
  const unknown = jwt({ iss: as.issuer, aud: resource, sub: "x", exp: now + 60, scope: "mcp:tools" }, { key: "rs7" });
  const end = Date.now() + 5000;
  do { r = await legacy(url, null, init(), unknown); } while (r.status === 401 && Date.now() < end);
  m = await modernCall(url, 15, "echo", { text: "x" }, { headers: bearer(unknown) });
  t.check("issuer down, unknown kid: 503 issuer_unavailable with Retry-After, both eras",
    r.status === 503 && r.retry === "1" && reasonOf(r.msg) === "issuer_unavailable" &&
    m.status === 503 && reasonOf(m.msgs[0]) === "issuer_unavailable", JSON.stringify([r, m.status, m.msgs]));
  r = await legacy(url, sidA, call(16, "echo", { text: "k" }), tokA);
  m = await modernCall(url, 16, "echo", { text: "k" }, { headers: bearer(tokA) });
  t.check("issuer down, known kid: still 200, both eras", r.status === 200 && m.status === 200, JSON.stringify([r, m.status]));

  // metrics and logs
  const m401 = await fetch(`http://127.0.0.1:${port}/metrics`, { headers: bearer(tokA) });
  await m401.text();
  t.check("/metrics without its scrape token (an MCP token is not one) -> 401", m401.status === 401, String(m401.status));
  const mt = await (await fetch(`http://127.0.0.1:${port}/metrics`, { headers: bearer(scrape) })).text();
  const n = (reason) => Number((mt.match(new RegExp(`tidemark_auth_refused_total\\{reason="${reason}"\\} (\\d+)`)) ?? [])[1]);
  t.check("metrics count refusals by reason", n("missing") >= 2 && n("expired") >= 2 && n("alg_none") >= 2 &&
    n("insufficient_scope") >= 2 && n("issuer_unavailable") >= 2 && n("wrong_audience") >= 2,
    mt.split("\n").filter((l) => l.includes("auth")).join(" | "));
  await stopServer(s);
  const secrets = [tokA, tokAw, tokBw, sidA, tokA.split(".")[2]];
  t.check("no token and no session id in the log (info level)", s.log.length > 0 &&
    !secrets.some((x) => s.log.includes(x)), s.log.slice(0, 400));
  t.check("no sanitizer report from the server", !/AddressSanitizer|LeakSanitizer|runtime error:/.test(s.log),
    s.log.slice(s.log.search(/Sanitizer|runtime error/), 3000));
}

// ---- sdk over TLS -------------------------------------------------------------

function makeCerts(dir) {
  const q = (...a) => {
    const r = spawnSync("openssl", a, { cwd: dir, encoding: "utf8", timeout: 30000 });
    if (r.status !== 0) throw new Error(`openssl ${a[0]}: ${r.stderr}`);
  };
  q("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
    "-out", "ca.pem", "-days", "2", "-subj", "/CN=tidemark auth test CA");
  q("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server.key",
    "-out", "server.csr", "-subj", "/CN=127.0.0.1");
  writeFileSync(join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  q("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
    "-out", "server.pem", "-days", "2", "-extfile", "server.ext");
}

async function sdk() {
  const dir = mkdtempSync(join(tmpdir(), "tidemark-auth-tls-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  makeCerts(dir);
  const asPort = await freePort(), port = await freePort();
  const resource = `https://127.0.0.1:${port}/mcp`;
  const as = await startAuthzServer({ port: asPort, resource });
  cleanups.push(() => as.stop().catch(() => {}));
  const s = await startServer(bin, ["--store", "memory", "--listen", `127.0.0.1:${port}`,
    "--tls-cert", join(dir, "server.pem"), "--tls-key", join(dir, "server.key"), ...authFlags(as, resource)]);
  cleanups.push(() => stopServer(s));
  t.check("the server says https", s.url === resource, s.url);
  const token = await as.token({ client: "es", scope: "mcp:tools" });
  // Node's fetch reads NODE_EXTRA_CA_CERTS at start: the clients run in a
  // child (asynchronously: the authorization server runs in this process).
  const child = spawn(process.execPath, [join(here, "auth_server_sdk.mjs"), resource, as.issuer, token],
    { env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") }, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (x) => { out += x; process.stdout.write(x); });
  const killer = setTimeout(() => child.kill("SIGKILL"), 45000);
  const status = await new Promise((res) => child.once("close", (code) => res(code)));
  clearTimeout(killer);
  for (const line of out.split("\n")) {
    const mm = line.match(/^(\d+) passed, (\d+) failed$/);
    if (mm) { t.passed += Number(mm[1]); t.failed += Number(mm[2]); }
  }
  t.check("the SDK clients' run ended", status === 0, `status ${status}`);
  // tidemark-client over the same TLS: it verifies the server, against the
  // test's CA with --cacert, and refuses it (typed) against the system's.
  const tmClient = join(dirname(bin), "tidemark-client");
  const runClient = (args) => spawnSync(tmClient, ["--json", "--timeout-ms", "10000", "--token", token, ...args,
    resource, "call", "echo", "text=over-tls"], { encoding: "utf8", timeout: 30000 });
  const ok = runClient(["--cacert", join(dir, "ca.pem")]);
  t.check("tidemark-client --cacert CA: verifies the server and calls echo over TLS",
    ok.status === 0 && /over-tls/.test(ok.stdout), `exit ${ok.status}; ${ok.stdout} ${ok.stderr}`);
  const bad = runClient([]);
  t.check("tidemark-client without the CA: the server is not trusted, a typed failure, no call",
    bad.status !== 0 && /"reason"/.test(bad.stdout) && !/over-tls/.test(bad.stdout),
    `exit ${bad.status}; ${bad.stdout} ${bad.stderr}`);
  const plain = await fetch(`http://127.0.0.1:${port}/mcp`).then(() => "answered", (e) => "refused");
  t.check("plain HTTP on the TLS port gets no MCP answer", plain === "refused", plain);
}

// ---- introspection ------------------------------------------------------------

async function introspect() {
  const asPort = await freePort(), port = await freePort();
  const resource = `http://127.0.0.1:${port}/mcp`;
  const as = await startAuthzServer({ port: asPort, resource });
  cleanups.push(() => as.stop().catch(() => {}));
  const dir = mkdtempSync(join(tmpdir(), "tidemark-auth-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "secret"), `${SECRET}\n`);
  const s = await startServer(bin, ["--store", "memory", "--listen", `127.0.0.1:${port}`,
    "--auth-resource", resource, "--auth-issuer", as.issuer, "--auth-introspection-uri", as.introspectionUri,
    "--auth-client-id", "rs-introspect", "--auth-client-secret-file", join(dir, "secret"),
    "--auth-scope", "*=mcp:tools"]);
  cleanups.push(() => stopServer(s));
  const opaque = await as.token({ client: "opaque", scope: "mcp:tools" });
  t.check("an opaque token (not a JWT)", opaque.split(".").length !== 3, opaque.slice(0, 8));
  let r = await legacy(s.url, null, init(), opaque);
  t.check("introspection: an active opaque token -> 200 and a session", r.status === 200 && r.sid, JSON.stringify(r));
  const m = await modernCall(s.url, 1, "echo", { text: "opaque" }, { headers: bearer(opaque) });
  t.check("introspection: 2026-07-28 call -> 200", m.response?.result?.content?.[0]?.text === "opaque", JSON.stringify(m.msgs));
  r = await legacy(s.url, null, init(), opaque.slice(0, -2) + "zz");
  t.check("introspection: an unknown token -> 401 invalid_token", r.status === 401 && reasonOf(r.msg) === "invalid_token",
    JSON.stringify(r));
  const bad = await new Promise((res) => {
    const p = spawn(bin, ["--store", "memory", "--listen", "127.0.0.1:0", "--auth-issuer", as.issuer],
      { stdio: ["ignore", "ignore", "pipe"] });
    p.once("exit", (code) => res(code));
  });
  t.check("auth settings without --auth-resource: the server refuses to start", bad !== 0 && bad !== null, String(bad));
}

// ---- cluster ------------------------------------------------------------------

async function cluster() {
  const missing = missingTools();
  if (missing.length) {
    console.log(`skip: ${missing.join(", ")} missing`);
    t.check("cluster test skipped (no redis-server/haproxy)", true);
    return;
  }
  const asPort = await freePort();
  const c = new Cluster({ bin, nodes: 3 });
  cleanups.push(() => c.stop());
  wd.step("redis");
  await c.startRedis();
  c.lbPort = await freePort(); // the resource is the balancer's URL
  const resource = c.url;
  wd.step("authorization server");
  const as = await startAuthzServer({ port: asPort, resource });
  cleanups.push(() => as.stop().catch(() => {}));
  c.nodeArgs = authFlags(as, resource);
  wd.step("nodes");
  for (let i = 0; i < 3; i++) await c.startNode(i); // each binds a port of its own
  wd.step("balancer");
  await c.startLb();
  wd.step("tokens");
  const tokA = await as.token({ client: "rs", scope: "mcp:tools" });
  const tokB = await as.token({ client: "es", scope: "mcp:tools" });
  const [a, , cNode] = c.nodes.map((n) => n.url);
  wd.step("session on node A");
  const sid = await session(a, tokA);
  wd.step("calls on node C and the balancer");
  const rB = await legacy(cNode, sid, call(1, "echo", { text: "b" }), tokB);
  t.check("principal B on node C with A's session (made on node A) -> 404 unknown_session",
    rB.status === 404 && reasonOf(rB.msg) === "unknown_session", JSON.stringify(rB));
  const rA = await legacy(cNode, sid, call(2, "echo", { text: "a" }), tokA);
  t.check("principal A on node C -> 200 (the binding is in the store)", rA.status === 200 &&
    rA.msg?.result?.content?.[0]?.text === "a", JSON.stringify(rA));
  const viaLb = await legacy(resource, sid, call(3, "echo", { text: "lb" }), tokB);
  t.check("principal B through the balancer -> 404", viaLb.status === 404, JSON.stringify(viaLb));
}

try {
  await ({ table, sdk, cluster, introspect }[part] ?? (() => { throw new Error(`unknown part ${part}`); }))();
} catch (e) {
  t.check("no exception", false, e.stack);
}
for (const f of cleanups.reverse()) await f();
t.done();
