// authz_server.mjs - a real OAuth 2.1 authorization server for the tests of
// src/auth/: oidc-provider (pinned in peers/) on a loopback port the caller
// picks, issuing access tokens for a resource indicator (RFC 8707) through
// the client credentials grant.
//
//   import { startAuthzServer } from "./authz_server.mjs";
//   const as = await startAuthzServer({ port, resource, keys: ["rs1", "es1"] });
//   const tok = await as.token({ client: "rs", scope: "mcp:tools" });
//   await as.stop();   // the issuer is down; start again on the same port
//                      // with other keys to rotate
//
// Clients: "rs" gets RS256 JWTs, "es" ES256 JWTs, "opaque" opaque tokens (for
// introspection, resource `${resource}` too), "rs-introspect" is the resource
// server's own confidential client for the introspection endpoint. Keys are
// fixed test keys by name (privateJwk below), so a restart with
// ["rs2", "rs1", "es1"] signs RS256 with a new kid and still publishes the old.
//
// Run alone (`node authz_server.mjs [port] [resource]`) it prints its issuer
// URL on stdout and serves until SIGTERM.
import { createServer, request } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";

const here = dirname(fileURLToPath(import.meta.url));
const peers = join(here, "..", "..", "peers", "node_modules");

export const SECRET = "tm-authz-test-secret-0123456789abcdef";
export const SCOPES = ["mcp:read", "mcp:tools", "mcp:admin", "mcp:write"];

// Private JWKs by name (kid = the name): "rs*" RSA 2048, "es*" P-256, "ed*"
// Ed25519, read from test_keys.json (rs1 rs2 rs7 rs8 rs9 es1 es2 ed1 ed2).
// They are not generated here: Node 20's generateKeyPairSync followed by
// export({format: "jwk"}) can deadlock the main thread for good (a garbage
// collection inside the export runs the key generation job's destructor,
// which waits on the mutex the export holds; seen in gdb as ~KeyGenJob under
// ExportJWKRsaKey): 2 of 540 loaded runs of auth_server_cluster, and once
// in CI.
const testKeys = JSON.parse(readFileSync(join(here, "test_keys.json"), "utf8"));
export function privateJwk(name) {
  const jwk = testKeys[name];
  if (!jwk || name.startsWith("_")) throw new Error(`no test key named ${name} in test_keys.json`);
  const kind = name.slice(0, 2);
  const alg = { es: "ES256", ed: "EdDSA" }[kind] ?? "RS256";
  return { ...jwk, kid: name, use: "sig", alg };
}

export function publicJwk(name) {
  const { d, p, q, dp, dq, qi, ...pub } = privateJwk(name);
  return pub;
}

async function loadProvider() {
  const mod = await import(join(peers, "oidc-provider", "lib", "index.js"));
  return mod.default ?? mod.Provider;
}

function clients() {
  const base = {
    client_secret: SECRET,
    grant_types: ["client_credentials"],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: "client_secret_basic",
    scope: SCOPES.join(" "),
  };
  return ["rs", "es", "opaque", "rs-introspect"].map((id) => ({ ...base, client_id: id }));
}

function config(resource, keys) {
  return {
    clients: clients(),
    ttl: { ClientCredentials: 300 },
    jwks: { keys: keys.map(privateJwk) },
    scopes: SCOPES,
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true, allowedPolicy: () => true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator, client) => ({
          scope: SCOPES.join(" "),
          audience: indicator,
          accessTokenTTL: 300,
          accessTokenFormat: client.clientId === "opaque" ? "opaque" : "jwt",
          jwt: { sign: { alg: client.clientId === "es" ? "ES256" : "RS256" } },
        }),
      },
    },
  };
}

// One POST on a connection of its own (a server restarted on the same port
// must not meet a kept-alive socket of the one before). -> { status, body }
export function post(url, authorization, body) {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: "POST", agent: false,
      headers: { authorization, "content-type": "application/x-www-form-urlencoded" },
    }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { data += c; });
      res.on("end", () => resolve({ status: res.statusCode, body: data }));
    });
    req.setTimeout(10000, () => req.destroy(new Error(`POST ${url}: no answer in 10 s`)));
    req.on("error", reject);
    req.end(body);
  });
}

// Start on 127.0.0.1:port. resource: the audience tokens are issued for.
export async function startAuthzServer({ port, resource, keys = ["rs1", "es1"] }) {
  const Provider = await loadProvider();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, config(resource, keys));
  provider.on("server_error", (ctx, err) => console.error("authz server error:", err));
  // Requests seen, by endpoint (the tests check the JWKS refresh's rate limit
  // and the introspection cache with them).
  const counts = { jwks: 0, introspection: 0, token: 0 };
  const cb = provider.callback();
  const server = createServer((req, res) => {
    const path = (req.url || "").split("?")[0];
    if (path === "/jwks") counts.jwks++;
    else if (path === "/token/introspection") counts.introspection++;
    else if (path === "/token") counts.token++;
    cb(req, res);
  });
  const sockets = new Set();
  server.on("connection", (s) => { sockets.add(s); s.on("close", () => sockets.delete(s)); });
  await new Promise((res, rej) => { server.once("error", rej); server.listen(port, "127.0.0.1", res); });
  const basic = (id) => "Basic " + Buffer.from(`${id}:${SECRET}`).toString("base64");
  return {
    issuer,
    port,
    counts,
    jwksUri: `${issuer}/jwks`,
    introspectionUri: `${issuer}/token/introspection`,
    basic,
    // An access token (the string) for client, scope, resource.
    async token({ client = "rs", scope = "mcp:tools", res = resource } = {}) {
      const body = new URLSearchParams({ grant_type: "client_credentials", scope, resource: res });
      const r = await post(`${issuer}/token`, basic(client), body.toString());
      const j = JSON.parse(r.body);
      if (r.status !== 200) throw new Error(`token request failed: ${r.status} ${r.body}`);
      return j.access_token;
    },
    async stop() {
      for (const s of sockets) s.destroy();
      await new Promise((res) => server.close(res));
    },
  };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const port = Number(process.argv[2] || 0);
  const resource = process.argv[3] || "http://127.0.0.1/mcp";
  if (!port) {
    console.error("usage: node authz_server.mjs PORT [RESOURCE]");
    process.exit(2);
  }
  const as = await startAuthzServer({ port, resource });
  console.log(as.issuer);
  process.on("SIGTERM", () => as.stop().then(() => process.exit(0)));
}
