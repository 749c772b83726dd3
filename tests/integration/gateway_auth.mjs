// gateway_auth.mjs (CTest gateway_auth): tidemark-gateway has
// tidemark-server's authorization, limits and health endpoints (the same
// flags, the same code): against a real authorization server (oidc-provider,
// authz_server.mjs) the gateway refuses a request without a token (401 with
// the resource metadata), serves one with a token through its stdio child,
// answers /healthz and /readyz, and refuses a body over --max-body (413).
//   node gateway_auth.mjs GATEWAY CLIENT TIDEMARK_EVERYTHING
import { checker, cliBrief, spawnCli, startServer, stopServer } from "./mcp_http.mjs";
import { startAuthzServer } from "./authz_server.mjs";
import { freePort } from "./multinode_env.mjs";

const [gateway, client, everything] = process.argv.slice(2);
const t = checker();
let as = null, gw = null;
try {
  const port = await freePort();
  const resource = `http://127.0.0.1:${port}/mcp`;
  as = await startAuthzServer({ port: await freePort(), resource });
  gw = await startServer(gateway, ["--listen", `127.0.0.1:${port}`, "--store", "memory",
    "--max-body", "4096", "--stdio", `${everything} --stdio --store memory`,
    "--auth-resource", resource, "--auth-issuer", as.issuer, "--auth-jwks-uri", as.jwksUri,
    "--auth-scope", "*=mcp:tools", "--auth-scopes-supported", "mcp:tools"], { ms: 30000 });
  const u = gw.url;
  for (const p of ["/healthz", "/readyz"]) {
    const r = await fetch(new URL(p, u));
    t.check(`${p} answers 200 without a token`, r.status === 200, String(r.status));
  }
  const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25",
    capabilities: {}, clientInfo: { name: "t", version: "1" } } };
  const h = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  let r = await fetch(u, { method: "POST", headers: h, body: JSON.stringify(init) });
  const www = r.headers.get("www-authenticate") ?? "";
  t.check("no token: 401 with the resource metadata", r.status === 401 && /resource_metadata=/.test(www),
    `${r.status} ${www}`);
  const token = await as.token({ scope: "mcp:tools" });
  const c = await spawnCli(client, ["--protocol", "legacy", "--token", token, "--json", u, "call", "echo",
    "text=authorized"]).done;
  t.check("with a token: the child's tool answers through the gateway",
    c.code === 0 && c.json?.content?.[0]?.text === "authorized", cliBrief(c));
  r = await fetch(u, { method: "POST", headers: { ...h, authorization: `Bearer ${token}` },
    body: JSON.stringify({ ...init, params: { ...init.params, pad: "x".repeat(8192) } }) });
  const body = await r.text();
  t.check("a body over --max-body: 413 body_too_large", r.status === 413 && /body_too_large/.test(body),
    `${r.status} ${body.slice(0, 200)}`);
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(gw);
  await as?.stop();
}
t.done();
