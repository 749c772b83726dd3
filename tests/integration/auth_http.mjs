// auth_http.mjs - src/auth/ wired into the HTTP transport (test_auth_http),
// on the wire, against oidc-provider (authz_server.mjs), first by hand, then
// with the official TypeScript SDK's client and its client-credentials
// provider, which has to find everything from the 401 alone.
//
//   node auth_http.mjs path/to/test_auth_http
//
// By hand: a request without a token is 401 with
// `WWW-Authenticate: Bearer resource_metadata="<path-suffixed metadata URL>"`;
// the metadata at both well-known URLs names the resource and the issuer;
// the issuer's own metadata gives the token endpoint; a client-credentials
// token for the resource (RFC 8707) calls a tool and the answer names the
// principal; a token lacking a tool's scope is 403 insufficient_scope with
// that scope; a bad token is 401 invalid_token; the issuer down with an
// unknown kid is 503 with Retry-After.
import { spawn } from "node:child_process";
import { createHash, createPrivateKey, sign } from "node:crypto";
import { createInterface } from "node:readline";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./multinode_env.mjs";
import { startAuthzServer, privateJwk, post, SECRET } from "./authz_server.mjs";
import { watchdog } from "./watchdog.mjs";

const server = process.argv[2];
if (!server) {
  console.error("usage: node auth_http.mjs TEST_AUTH_HTTP");
  process.exit(2);
}
const sdk = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "peers", "node_modules",
  "@modelcontextprotocol", "sdk", "dist", "esm");
let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; console.log(`ok   ${what}`); }
  else { failed++; console.log(`FAIL ${what}${detail !== undefined ? ": " + JSON.stringify(detail) : ""}`); }
}

async function rpc(url, body, token) {
  const headers = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (token) headers.authorization = `Bearer ${token}`;
  const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: r.status, www: r.headers.get("www-authenticate"), retry: r.headers.get("retry-after"),
           body: await r.text() };
}
const call = (name, id = 2) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: {} } });

let proc;
// A watchdog under CTest's 90 s: a step that never ends fails the test and
// names the step, even with the event loop blocked (watchdog.mjs; every fetch
// has no deadline of its own).
const wd = watchdog(75000, "auth_http");
async function main() {
  const asPort = await freePort();
  wd.step("the authorization server starts");
  const as = await startAuthzServer({ port: asPort, resource: "http://127.0.0.1/unused" });
  wd.step("test_auth_http prints its URL");
  proc = spawn(server, [as.issuer, as.jwksUri], { stdio: ["pipe", "pipe", "inherit"] });
  const url = await new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error("test_auth_http printed no URL in 10 s")), 10000);
    createInterface({ input: proc.stdout }).once("line", (l) => { clearTimeout(t); res(l.replace(/^URL /, "")); });
  });
  const origin = new URL(url).origin;
  const md = `${origin}/.well-known/oauth-protected-resource/mcp`;
  console.log(`server ${url}, issuer ${as.issuer}`);

  // -- by hand, as a client would discover it
  wd.step("requests by hand");
  let r = await rpc(url, { jsonrpc: "2.0", id: 1, method: "initialize", params: {} });
  check(r.status === 401 && r.www === `Bearer resource_metadata="${md}"`, "no token: 401 naming the metadata", r);
  r = await rpc(url, call("echo"));
  check(r.status === 401 && r.www === `Bearer resource_metadata="${md}", scope="mcp:tools"`,
        "no token on a tool: the challenge names its scope", r);
  for (const u of [md, `${origin}/.well-known/oauth-protected-resource`]) {
    const m = await fetch(u);
    const doc = await m.json();
    check(m.status === 200 && doc.resource === url && doc.authorization_servers[0] === as.issuer &&
          m.headers.get("content-type") === "application/json", `metadata at ${u}`, doc);
  }
  const asMeta = await (await fetch(`${as.issuer}/.well-known/openid-configuration`)).json();
  const token = async (scope) => {
    const t = await post(asMeta.token_endpoint, as.basic("rs"),
      new URLSearchParams({ grant_type: "client_credentials", scope, resource: url }).toString());
    return JSON.parse(t.body).access_token;
  };
  const tools = await token("mcp:tools");
  r = await rpc(url, call("echo"), tools);
  const id = createHash("sha256").update(`${as.issuer}\0rs`).digest("hex");
  check(r.status === 200 && JSON.parse(r.body).result.content[0].text === `id=${id} sub=rs scope=mcp:tools`,
        "a token for the resource: the call answers with the principal", r);
  r = await rpc(url, call("admin_reset"), tools);
  check(r.status === 403 &&
        r.www === `Bearer error="insufficient_scope", resource_metadata="${md}", scope="mcp:admin"`,
        "a tool needing mcp:admin: 403 insufficient_scope", r);
  r = await rpc(url, call("admin_reset"), await token("mcp:admin"));
  check(r.status === 200, "mcp:admin for admin_reset", r);
  r = await rpc(url, call("echo"), `${tools.slice(0, -4)}AAAA`);
  check(r.status === 401 && r.www === `Bearer error="invalid_token", resource_metadata="${md}", scope="mcp:tools"`,
        "a damaged token: 401 invalid_token", r);
  r = await rpc(url, call("echo"), await (async () => {
    const t = await post(asMeta.token_endpoint, as.basic("rs"),
      new URLSearchParams({ grant_type: "client_credentials", scope: "mcp:tools", resource: "http://127.0.0.1:9/mcp" }).toString());
    return JSON.parse(t.body).access_token;
  })());
  check(r.status === 401 && r.www.startsWith('Bearer error="invalid_token"'),
        "a token for another resource: 401 (no token passthrough, audience bound)", r);

  // -- the official SDK, from the 401 alone
  wd.step("the SDK client");
  const { Client } = await import(join(sdk, "client", "index.js"));
  const { StreamableHTTPClientTransport } = await import(join(sdk, "client", "streamableHttp.js"));
  const { ClientCredentialsProvider } = await import(join(sdk, "client", "auth-extensions.js"));
  const provider = new ClientCredentialsProvider({ clientId: "rs", clientSecret: SECRET,
    expectedIssuer: as.issuer, scope: "mcp:tools" });
  const client = new Client({ name: "auth-http-test", version: "0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  await client.connect(transport); // the 401, the metadata, the token, the retry: all the SDK's
  const res = await client.callTool({ name: "echo", arguments: {} });
  check(res.content?.[0]?.text === `id=${id} sub=rs scope=mcp:tools`,
        "the SDK's client-credentials client: discovery from the 401, token, call", res);
  const tok = provider.tokens()?.access_token;
  const aud = tok && JSON.parse(Buffer.from(tok.split(".")[1], "base64url")).aud;
  check(aud === url, "the SDK asked for a token for this resource (aud)", aud);
  await client.close();

  // -- the issuer down: an unknown kid is 503 with Retry-After
  wd.step("the issuer down");
  await as.stop();
  const rs7 = privateJwk("rs7");
  const now = Math.floor(Date.now() / 1000);
  const b64u = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const input = `${b64u({ alg: "RS256", kid: "rs7" })}.${b64u({ iss: as.issuer, aud: url, sub: "x", exp: now + 60 })}`;
  const forged = `${input}.${sign("sha256", Buffer.from(input), createPrivateKey({ key: rs7, format: "jwk" })).toString("base64url")}`;
  const end = Date.now() + 5000;
  do { r = await rpc(url, call("echo"), forged); } while (r.status === 401 && Date.now() < end);
  check(r.status === 503 && r.retry === "1" && r.www === null, "issuer down, unknown kid: 503 Retry-After", r);
  r = await rpc(url, call("echo"), tools);
  check(r.status === 200, "issuer down, known kid: still 200", r);
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL ${e.stack}`);
}
wd.step("test_auth_http exits");
if (proc) {
  proc.stdin.end();
  const t = setTimeout(() => proc.kill("SIGKILL"), 5000);
  await new Promise((r) => (proc.exitCode !== null ? r() : proc.once("exit", r)));
  clearTimeout(t);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
