// client_auth_oidc.mjs - tidemark-client's authorization against a real
// authorization server (oidc-provider, pinned in peers/) and a Client ID
// Metadata Document served on loopback.
//
//   node client_auth_oidc.mjs TIDEMARK_CLIENT
//
// 1. login by authorization code + PKCE: the client registers itself (DCR,
//    application_type native, its loopback redirect), prints the
//    authorization URL; this test is the browser: it follows it to
//    oidc-provider's login page, signs in, consents, and the redirect reaches
//    the client's loopback port; the client exchanges the code and lists the
//    tools of a protected MCP server (a small one here, verifying the JWT
//    against the provider's JWKS, audience = the resource).
// 2. a later run with the same state file calls a tool with the kept token:
//    no login; the state file is 0600; no token in any output.
// 3. client credentials (--client-id, --client-secret-file), and --token.
// 4. a Client ID Metadata Document: a small authorization server that
//    supports them fetches the document this test serves on loopback,
//    checks its client_id and redirect_uris, and the client logs in with
//    the document's URL as its client_id (no registration). Its tokens then
//    stop being accepted: a later run refreshes (refresh_token grant, the
//    resource indicator), no new authorization.
// 5. login by code + PKCE against tidemark-server itself with authorization
//    on (JWTs checked against oidc-provider's key set, audience its own URL),
//    a later call with the kept token, and a typed refusal without one.
import { spawn } from "node:child_process";
import { createServer, request } from "node:http";
import { createHash } from "node:crypto";
import { mkdtempSync, statSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./ports.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const peers = join(here, "..", "..", "peers", "node_modules");
const client = process.argv[2];
if (!client) { console.error("usage: node client_auth_oidc.mjs TIDEMARK_CLIENT"); process.exit(2); }
const { default: Provider } = await import(join(peers, "oidc-provider", "lib", "index.js"));
const jose = await import(join(peers, "jose", "dist", "webapi", "index.js"));

const dir = mkdtempSync(join(tmpdir(), "tm-client-auth-"));
const children = new Set();
let failures = 0;
function check(ok, what, detail) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${!ok && detail ? `: ${detail}` : ""}`);
  if (!ok) failures++;
}

function listen(server) {
  return new Promise((res, rej) => { server.once("error", rej); server.listen(0, "127.0.0.1", () => res(server.address().port)); });
}
// ---- the authorization server ----------------------------------------------------------
const SECRET = "tm-client-auth-secret-0123456789abcdef";
const asPort = await freePort();
const issuer = `http://127.0.0.1:${asPort}`;
const mcpPort = await freePort();
const resource = `http://127.0.0.1:${mcpPort}/mcp`;
const provider = new Provider(issuer, {
  clients: [{ client_id: "cc", client_secret: SECRET, grant_types: ["client_credentials"],
              redirect_uris: [], response_types: [], token_endpoint_auth_method: "client_secret_basic" }],
  scopes: ["mcp:tools"],
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => ({ scope: "mcp:tools", audience: indicator || resource,
                                                    accessTokenTTL: 300, accessTokenFormat: "jwt",
                                                    jwt: { sign: { alg: "RS256" } } }),
    },
  },
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
});
provider.on("server_error", (ctx, err) => console.error("authz server error:", err));
const asServer = createServer(provider.callback());
await new Promise((r) => asServer.listen(asPort, "127.0.0.1", r));
const jwks = jose.createRemoteJWKSet(new URL(`${issuer}/jwks`));

// ---- the protected MCP server (stateless, JSON answers) ---------------------------------
const seenTokens = new Set();
const refused = { n: 0 };
function mcpServer(port, verify, asUrl) {
  const prm = `http://127.0.0.1:${port}/.well-known/oauth-protected-resource/mcp`;
  const server = createServer(async (req, res) => {
    const send = (status, body, headers = {}) => {
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(body === undefined ? "" : JSON.stringify(body));
    };
    if (req.method === "GET" && req.url === "/.well-known/oauth-protected-resource/mcp")
      return send(200, { resource: `http://127.0.0.1:${port}/mcp`, authorization_servers: [asUrl],
                         scopes_supported: ["mcp:tools"] });
    if (req.url !== "/mcp") return send(404, { error: "not_found" });
    if (req.method !== "POST") return send(405, {});
    let raw = "";
    for await (const c of req) raw += c;
    const auth = req.headers.authorization || "";
    let who = null;
    if (auth.startsWith("Bearer ")) {
      seenTokens.add(auth.slice(7));
      who = await verify(auth.slice(7)).catch(() => null);
    }
    if (!who && ++refused.n)
      return send(401, { error: "invalid_token" },
                  { "www-authenticate": `Bearer resource_metadata="${prm}", scope="mcp:tools"` });
    const msg = JSON.parse(raw);
    if (msg.id === undefined) return send(202);
    const ok = (result) => send(200, { jsonrpc: "2.0", id: msg.id, result });
    if (msg.method === "initialize")
      return ok({ protocolVersion: "2025-11-25", capabilities: { tools: {} },
                  serverInfo: { name: "protected", version: "1" } });
    if (msg.method === "tools/list")
      return ok({ tools: [{ name: "whoami", inputSchema: { type: "object" } }] });
    if (msg.method === "tools/call" && msg.params?.name === "whoami")
      return ok({ content: [{ type: "text", text: `you are ${who}` }] });
    return send(200, { jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } });
  });
  server.listen(port, "127.0.0.1");
  return server;
}
const verifyOidc = async (token) => {
  const { payload } = await jose.jwtVerify(token, jwks, { issuer, audience: resource });
  if (!String(payload.scope || "").split(" ").includes("mcp:tools")) throw new Error("scope");
  return payload.sub || payload.client_id;
};
const mcp = mcpServer(mcpPort, verifyOidc, issuer);

// ---- running the client ------------------------------------------------------------------
function run(args, { onStderrLine } = {}) {
  return new Promise((resolve) => {
    const p = spawn(client, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, TIDEMARK_TOKEN: "" } });
    children.add(p);
    let out = "", err = "", pending = "";
    const timer = setTimeout(() => p.kill("SIGKILL"), 40000);
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => {
      err += d;
      pending += d;
      let i;
      while ((i = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, i);
        pending = pending.slice(i + 1);
        if (onStderrLine) onStderrLine(line);
      }
    });
    p.on("close", (code) => { clearTimeout(timer); children.delete(p); resolve({ code, out, err }); });
  });
}

// The browser: GET/POST with a cookie jar, redirects followed by hand.
function http(url, { method = "GET", body, jar }) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const headers = { cookie: [...jar.entries()].map(([k, v]) => `${k}=${v}`).join("; ") };
    if (body) headers["content-type"] = "application/x-www-form-urlencoded";
    const req = request(u, { method, headers, agent: false }, (res) => {
      for (const c of res.headers["set-cookie"] || []) {
        const [kv] = c.split(";");
        const eq = kv.indexOf("=");
        jar.set(kv.slice(0, eq).trim(), kv.slice(eq + 1));
      }
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { data += c; });
      res.on("end", () => resolve({ status: res.statusCode, location: res.headers.location, body: data }));
    });
    req.setTimeout(10000, () => req.destroy(new Error(`${method} ${url}: no answer`)));
    req.on("error", reject);
    req.end(body);
  });
}

// Sign in as user and consent, from the authorization URL to the redirect.
async function browse(authUrl, user, pages) {
  const jar = new Map();
  let url = authUrl, method = "GET", body;
  for (let i = 0; i < 20; i++) {
    const r = await http(url, { method, body, jar });
    if (r.status >= 300 && r.status < 400 && r.location) {
      url = new URL(r.location, url).toString();
      method = "GET"; body = undefined;
      if (url.startsWith("http://127.0.0.1:") && new URL(url).pathname === "/callback") {
        const last = await http(url, { jar });   // the client's loopback redirect
        return last.status;
      }
      continue;
    }
    const action = /<form[^>]*action="([^"]+)"/.exec(r.body)?.[1];
    const prompt = /name="prompt" value="([^"]+)"/.exec(r.body)?.[1];
    if (r.status !== 200 || !action || !prompt) throw new Error(`unexpected page ${r.status} at ${url}: ${r.body.slice(0, 200)}`);
    pages.push(prompt);
    url = new URL(action.replace(/&amp;/g, "&"), url).toString();
    method = "POST";
    body = prompt === "login" ? new URLSearchParams({ prompt, login: user, password: "pw" }).toString()
                              : new URLSearchParams({ prompt }).toString();
  }
  throw new Error("too many pages");
}

// login: run the client, be the browser once it prints the URL.
async function login(args, user) {
  const pages = [];
  let browsing = null;
  const r = await run(args, {
    onStderrLine: (line) => {
      if (!browsing && /^https?:\/\/\S+/.test(line.trim()))
        browsing = browse(line.trim(), user, pages).catch((e) => e);
    },
  });
  const loop = browsing ? await browsing : new Error("no authorization URL printed");
  return { ...r, loop, pages };
}

try {
  // 1. login (authorization code + PKCE, DCR), tools listed.
  const state = join(dir, "state.db");
  const base = ["--state", state, "--protocol", "legacy", "--json"];
  const l = await login([...base, "login", resource], "alice");
  check(l.code === 0, "login exits 0", `exit ${l.code}; ${l.err}`);
  check(l.loop === 200, "the browser's redirect reached the client's loopback port", String(l.loop));
  check(l.pages.join(",") === "login,consent", "oidc-provider's login and consent pages were driven", l.pages.join(","));
  check(/whoami/.test(l.out), "login lists the protected server's tools", l.out);

  // 2. the token from the state file: a call with no login.
  const refusedBefore = refused.n;
  const c2 = await run([...base, resource, "call", "whoami"]);
  check(refused.n === refusedBefore, "... sent from its first request (no 401 met)",
        `${refused.n - refusedBefore} refused`);
  check(c2.code === 0 && /you are alice/.test(c2.out), "a later run calls a tool with the kept token",
        `exit ${c2.code}; ${c2.out} ${c2.err}`);
  check((statSync(state).mode & 0o777) === 0o600, "the state file is owner-only (0600)",
        (statSync(state).mode & 0o777).toString(8));
  const outputs = l.out + l.err + c2.out + c2.err;
  check(seenTokens.size > 0 && [...seenTokens].every((t) => !outputs.includes(t)),
        "no token appears in the client's output");

  // 3. client credentials, then a token given with --token.
  const secretFile = join(dir, "secret");
  writeFileSync(secretFile, SECRET + "\n", { mode: 0o600 });
  const cc = await run(["--protocol", "legacy", "--json", "--client-id", "cc", "--client-secret-file",
                        secretFile, resource, "call", "whoami"]);
  check(cc.code === 0 && /you are cc/.test(cc.out), "client credentials: the call is made as cc",
        `exit ${cc.code}; ${cc.out} ${cc.err}`);
  const noauth = await run(["--protocol", "legacy", "--json", resource, "call", "whoami"]);
  check(noauth.code !== 0 && /unauthorized/.test(noauth.out), "without any way to authorize: a typed refusal (unauthorized)",
        `exit ${noauth.code}; ${noauth.out}`);
  const tok = [...seenTokens].find((t) => t.split(".").length === 3);
  const withTok = await run(["--protocol", "legacy", "--json", "--token", tok, resource, "call", "whoami"]);
  check(withTok.code === 0 && /you are/.test(withTok.out), "--token: the given token is sent",
        `exit ${withTok.code}; ${withTok.out} ${withTok.err}`);

  // 4. Client ID Metadata Document on loopback.
  const docPort = await freePort();
  const redirectPort = await freePort();
  const docUrl = `http://127.0.0.1:${docPort}/client.json`;
  const redirectUri = `http://127.0.0.1:${redirectPort}/callback`;
  const docServer = createServer((req, res) => {
    res.writeHead(req.url === "/client.json" ? 200 : 404, { "content-type": "application/json" });
    res.end(JSON.stringify({ client_id: docUrl, client_name: "tidemark-client", redirect_uris: [redirectUri],
                             grant_types: ["authorization_code", "refresh_token"], response_types: ["code"],
                             token_endpoint_auth_method: "none", application_type: "native" }));
  });
  docServer.listen(docPort, "127.0.0.1");
  const cimdPort = await freePort();
  const cimdIssuer = `http://127.0.0.1:${cimdPort}`;
  const codes = new Map();
  const cimdSeen = { fetched: 0, registered: 0, refreshed: 0, refreshResource: null };
  const cimdValid = new Set();
  const cimdAs = createServer(async (req, res) => {
    const u = new URL(req.url, cimdIssuer);
    const json = (s, b) => { res.writeHead(s, { "content-type": "application/json" }); res.end(JSON.stringify(b)); };
    if (u.pathname === "/.well-known/oauth-authorization-server")
      return json(200, { issuer: cimdIssuer, authorization_endpoint: `${cimdIssuer}/authorize`,
                         token_endpoint: `${cimdIssuer}/token`, registration_endpoint: `${cimdIssuer}/register`,
                         response_types_supported: ["code"], code_challenge_methods_supported: ["S256"],
                         token_endpoint_auth_methods_supported: ["none"],
                         client_id_metadata_document_supported: true,
                         authorization_response_iss_parameter_supported: true });
    if (u.pathname === "/register") { cimdSeen.registered++; return json(400, { error: "not_here" }); }
    if (u.pathname === "/authorize") {
      const q = u.searchParams;
      const doc = await fetch(q.get("client_id")).then((r) => r.json()).catch(() => null);
      cimdSeen.fetched++;
      if (!doc || doc.client_id !== q.get("client_id") || !doc.redirect_uris.includes(q.get("redirect_uri")) ||
          q.get("code_challenge_method") !== "S256")
        return json(400, { error: "invalid_client" });
      const code = `code-${Date.now()}`;
      codes.set(code, { challenge: q.get("code_challenge"), client: q.get("client_id") });
      const to = new URL(q.get("redirect_uri"));
      to.searchParams.set("code", code); to.searchParams.set("state", q.get("state")); to.searchParams.set("iss", cimdIssuer);
      res.writeHead(302, { location: to.toString() }); return res.end();
    }
    if (u.pathname === "/token") {
      let raw = ""; for await (const c of req) raw += c;
      const f = new URLSearchParams(raw), c = codes.get(f.get("code"));
      if (f.get("grant_type") === "refresh_token") {
        if (f.get("refresh_token") !== "rt-1" || f.get("client_id") !== docUrl) return json(400, { error: "invalid_grant" });
        cimdSeen.refreshed++;
        cimdSeen.refreshResource = f.get("resource");
        const t = `cimd-token-r-${Date.now()}`;
        cimdValid.add(t);
        return json(200, { access_token: t, token_type: "Bearer", expires_in: 300 });
      }
      const s256 = createHash("sha256").update(f.get("code_verifier") || "").digest("base64url");
      if (!c || c.challenge !== s256 || c.client !== f.get("client_id")) return json(400, { error: "invalid_grant" });
      const t = `cimd-token-${Date.now()}`;
      cimdValid.add(t);
      return json(200, { access_token: t, token_type: "Bearer", expires_in: 300, refresh_token: "rt-1" });
    }
    json(404, {});
  });
  await new Promise((r) => cimdAs.listen(cimdPort, "127.0.0.1", r));
  const mcp2Port = await freePort();
  const mcp2 = mcpServer(mcp2Port, async (t) => (cimdValid.has(t) ? "cimd" : null), cimdIssuer);
  const cimdState = join(dir, "cimd.db");
  const pages = [];
  let hop = null;
  const cm = await run(["--state", cimdState, "--protocol", "legacy", "--json", "--client-metadata-url", docUrl, "--redirect-port",
                        String(redirectPort), "login", `http://127.0.0.1:${mcp2Port}/mcp`], {
    onStderrLine: (line) => { if (!hop && /^http:\/\/\S+/.test(line.trim())) hop = browse(line.trim(), "x", pages).catch((e) => e); },
  });
  const hopped = hop ? await hop : "no URL";
  check(cm.code === 0 && hopped === 200 && /whoami/.test(cm.out),
        "CIMD: login with the document's URL as client_id", `exit ${cm.code}; ${hopped}; ${cm.out} ${cm.err}`);
  check(cimdSeen.fetched === 1 && cimdSeen.registered === 0,
        "CIMD: the authorization server fetched the document; no registration", JSON.stringify(cimdSeen));
  cimdValid.clear(); // every token issued so far is refused from now on
  const rf = await run(["--state", cimdState, "--protocol", "legacy", "--json", `http://127.0.0.1:${mcp2Port}/mcp`,
                        "call", "whoami"]);
  check(rf.code === 0 && /you are cimd/.test(rf.out) && cimdSeen.refreshed === 1 && cimdSeen.fetched === 1,
        "refused token: refreshed (one refresh_token grant, no new authorization)",
        `exit ${rf.code}; ${JSON.stringify(cimdSeen)}; ${rf.out} ${rf.err}`);
  check(cimdSeen.refreshResource === `http://127.0.0.1:${mcp2Port}/mcp`, "the refresh names the resource",
        String(cimdSeen.refreshResource));
  mcp2.close(); docServer.close(); cimdAs.close();

  // 5. the same login against tidemark-server itself with authorization on:
  //    JWT access tokens checked against oidc-provider's key set, audience =
  //    its own URL.
  const tmPort = await freePort();
  const tmUrl = `http://127.0.0.1:${tmPort}/mcp`;
  const server = spawn(join(dirname(client), "tidemark-server"),
    ["--listen", `127.0.0.1:${tmPort}`, "--store", "memory", "--log-level", "warn", "--auth-resource", tmUrl,
     "--auth-issuer", issuer, "--auth-jwks-uri", `${issuer}/jwks`, "--auth-scopes-supported", "mcp:tools"],
    { stdio: ["ignore", "pipe", "inherit"] });
  children.add(server);
  await new Promise((resolve, reject) => {
    let buf = "";
    const t = setTimeout(() => reject(new Error("tidemark-server did not start")), 15000);
    server.stdout.on("data", (d) => { buf += d; if (/listening on/.test(buf)) { clearTimeout(t); resolve(); } });
    server.once("exit", (c) => { clearTimeout(t); reject(new Error(`tidemark-server exited (${c})`)); });
  });
  const tmState = join(dir, "tm.db");
  const tl = await login(["--state", tmState, "--protocol", "legacy", "--json", "login", tmUrl], "bob");
  check(tl.code === 0 && tl.loop === 200 && /echo/.test(tl.out),
        "tidemark-server with authorization on: login by code + PKCE lists its tools",
        `exit ${tl.code}; ${tl.loop}; ${tl.out} ${tl.err}`);
  const te = await run(["--state", tmState, "--protocol", "legacy", "--json", tmUrl, "call", "echo", "text=hi"]);
  check(te.code === 0 && /hi/.test(te.out), "... and a later run calls echo there with the kept token",
        `exit ${te.code}; ${te.out} ${te.err}`);
  const tn = await run(["--protocol", "legacy", "--json", tmUrl, "call", "echo", "text=hi"]);
  check(tn.code !== 0 && /unauthorized/.test(tn.out), "... and without a token it is refused, typed",
        `exit ${tn.code}; ${tn.out}`);
} catch (e) {
  check(false, "the test ran", e.stack);
} finally {
  for (const p of children) p.kill("SIGKILL");
  mcp.close();
  asServer.closeAllConnections?.();
  asServer.close();
  rmSync(dir, { recursive: true, force: true });
}
console.log(failures ? `client_auth_oidc: ${failures} check(s) failed` : "client_auth_oidc: all checks passed");
process.exit(failures ? 1 : 0);
