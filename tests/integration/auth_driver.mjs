// auth_driver.mjs - src/auth/ against a real authorization server.
//
//   node auth_driver.mjs path/to/test_auth_driver
//
// Starts oidc-provider (authz_server.mjs) on a loopback port picked here,
// drives test_auth_driver (one command a line, one JSON answer a line) and
// checks: the refusal table (garbage, malformed header, missing, expired,
// nbf ahead, wrong iss, wrong aud, wrong key, unknown kid, alg none, HS256
// keyed with the public key), each with its own reason and one wire answer;
// RS256, ES256 (issued by the server) and EdDSA tokens accepted with the
// principal (iss, sub) and its id; scopes per tool and method, with the
// hierarchy; the metadata document at both paths; a rotated key accepted
// without restart; the JWKS refresh rate-limited; the issuer down (a known kid
// still validates, an unknown one is issuer_unavailable); introspection
// (active, inactive, cached, the issuer down, the cache running out).
import { spawn } from "node:child_process";
import { createHash, createHmac, createPrivateKey, createPublicKey, sign }
  from "node:crypto";
import { createInterface } from "node:readline";
import { freePort, sleep } from "./multinode_env.mjs";
import { startAuthzServer, privateJwk, publicJwk, SECRET } from "./authz_server.mjs";

const driverPath = process.argv[2];
if (!driverPath) {
  console.error("usage: node auth_driver.mjs TEST_AUTH_DRIVER");
  process.exit(2);
}
let failed = 0, passed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; console.log(`ok   ${what}`); }
  else { failed++; console.log(`FAIL ${what}${detail ? ": " + JSON.stringify(detail) : ""}`); }
}

// ---- the driver ----------------------------------------------------------------
const drv = spawn(driverPath, [], { stdio: ["pipe", "pipe", "inherit"] });
const lines = createInterface({ input: drv.stdout });
const waiting = [];
lines.on("line", (l) => { const w = waiting.shift(); if (w) w(JSON.parse(l)); });
const exited = new Promise((r) => drv.once("exit", r));
function cmd(...words) {
  return new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error(`driver: no answer to ${words[0]} in 20 s`)), 20000);
    waiting.push((v) => { clearTimeout(t); res(v); });
    drv.stdin.write(words.join(" ") + "\n");
  });
}
const checkTok = (tok, method = "tools/call", tool = "echo") => cmd("check", tok ?? "-", method, tool);

// Poll f until pred(result) within ms; returns the last result.
async function until(f, pred, ms = 10000) {
  const end = Date.now() + ms;
  let v;
  do { v = await f(); if (pred(v)) return v; await sleep(100); } while (Date.now() < end);
  return v;
}

// ---- tokens made here ------------------------------------------------------------
const b64u = (o) => Buffer.from(typeof o === "string" ? o : JSON.stringify(o)).toString("base64url");
function jws(header, payload, key, alg = header.alg) {
  const input = `${b64u(header)}.${b64u(payload)}`;
  if (alg === "none") return `${input}.`;
  if (alg === "HS256") return `${input}.${createHmac("sha256", key).update(input).digest("base64url")}`;
  const k = createPrivateKey({ key, format: "jwk" });
  const opts = alg === "ES256" ? { key: k, dsaEncoding: "ieee-p1363" } : k;
  const sig = sign(alg === "EdDSA" ? null : "sha256", Buffer.from(input), opts);
  return `${input}.${sig.toString("base64url")}`;
}
const principalId = (iss, sub) => createHash("sha256").update(`${iss}\0${sub}`).digest("hex");

async function main() {
  const asPort = await freePort();
  const resource = `http://127.0.0.1:${await freePort()}/mcp`;
  let as = await startAuthzServer({ port: asPort, resource, keys: ["rs1", "es1", "ed1"] });
  const iss = as.issuer;
  console.log(`authorization server: ${iss}, resource ${resource}`);
  const now = Math.floor(Date.now() / 1000);
  const claims = (over = {}) => ({ iss, aud: resource, sub: "alice", scope: "mcp:tools",
    iat: now, exp: now + 300, ...over });
  const rs1 = privateJwk("rs1");
  const mine = (c, kid = "rs1", alg = "RS256", key = rs1) => jws({ alg, kid, typ: "at+jwt" }, c, key);

  // typ: at+jwt required (RFC 9068), on an instance of its own.
  let r = await cmd("jwks", iss, as.jwksUri, resource, "2000", "typ");
  r = await checkTok(await as.token({ client: "es", scope: "mcp:tools" }));
  check(r.status === 200, "typ at+jwt required: the server's token (at+jwt) passes", r);
  r = await checkTok(jws({ alg: "RS256", kid: "rs1", typ: "JWT" }, claims(), rs1));
  check(r.status === 401 && r.reason === "wrong_type", "typ JWT when at+jwt is required -> wrong_type", r);
  r = await checkTok(jws({ alg: "RS256", kid: "rs1", typ: "application/AT+JWT" }, claims(), rs1));
  check(r.status === 200, "typ application/AT+JWT is at+jwt", r);

  // Rate limit 2 s between JWKS fetches.
  r = await cmd("jwks", iss, as.jwksUri, resource, "2000");
  check(r.rc === 0, "tm_auth_new (JWT mode)", r);

  // -- accepted tokens
  const rsTok = await as.token({ client: "rs", scope: "mcp:tools" });
  r = await checkTok(rsTok);
  check(r.status === 200 && r.reason === "ok" && r.sub === "rs" && r.id === principalId(iss, "rs") &&
        r.scope === "mcp:tools" && r.www === "", "RS256 token from the server: principal (iss, sub)", r);
  const esTok = await as.token({ client: "es", scope: "mcp:tools mcp:read" });
  r = await checkTok(esTok, "resources/read", "-");
  check(r.status === 200 && r.sub === "es" && r.scope === "mcp:tools mcp:read", "ES256 token from the server", r);
  r = await checkTok(mine(claims(), "ed1", "EdDSA", privateJwk("ed1")));
  check(r.status === 200 && r.sub === "alice" && r.id === principalId(iss, "alice"), "EdDSA token", r);
  r = await checkTok(mine(claims({ aud: ["https://other.example", resource] })));
  check(r.status === 200, "aud as an array naming the resource", r);
  r = await checkTok(mine(claims({ exp: now - 10 })));
  check(r.status === 200, "exp 10 s ago is within the leeway", r);

  // -- the refusal table: each its reason, one wire answer
  const md = `${new URL(resource).origin}/.well-known/oauth-protected-resource/mcp`;
  const invalid = `Bearer error="invalid_token", resource_metadata="${md}", scope="mcp:tools"`;
  const otherRsa = privateJwk("rs8"); // another RSA key, presented under other kids
  const rsPem = createPublicKey({ key: publicJwk("rs1"), format: "jwk" }).export({ type: "spki", format: "pem" });
  const table = [
    ["garbage", "not-a-token", "garbage"],
    ["three garbage parts", "aaa.bbb.ccc", "garbage"],
    ["JWE-shaped (five parts)", "a.b.c.d.e", "garbage"],
    ["expired", mine(claims({ exp: now - 120 })), "expired"],
    ["nbf in the future", mine(claims({ nbf: now + 300 })), "not_yet_valid"],
    ["wrong iss", mine(claims({ iss: "http://127.0.0.1:1" })), "wrong_issuer"],
    ["wrong aud", mine(claims({ aud: "http://127.0.0.1:1/mcp" })), "wrong_audience"],
    ["wrong aud from the server (another resource)",
      await as.token({ client: "rs", res: "http://127.0.0.1:2/other" }), "wrong_audience"],
    ["wrong key (kid rs1)", mine(claims(), "rs1", "RS256", otherRsa), "bad_signature"],
    ["ES256 header on the RSA key", mine(claims(), "rs1", "ES256", privateJwk("es1")), "bad_signature"],
    ["alg none", jws({ alg: "none", typ: "at+jwt" }, claims()), "alg_none"],
    ["HS256 keyed with the public key", jws({ alg: "HS256", kid: "rs1" }, claims(), rsPem), "alg_not_allowed"],
    ["no exp", mine(claims({ exp: undefined })), "bad_claims"],
    ["no sub", mine({ iss, aud: resource, exp: now + 300 }), "bad_claims"],
  ];
  for (const [what, tok, reason] of table) {
    r = await checkTok(tok);
    check(r.status === 401 && r.reason === reason && r.www === invalid && r.id === "",
          `refused: ${what} -> ${reason}`, r);
  }
  r = await checkTok(null);
  check(r.status === 401 && r.reason === "missing" &&
        r.www === `Bearer resource_metadata="${md}", scope="mcp:tools"`, "no token: 401 without error", r);
  for (const [what, raw] of [["Basic scheme", "raw:Basic_abc"], ["Bearer and nothing", "raw:Bearer_"],
                             ["two tokens", "raw:Bearer_a_b"], ["token over 8192 bytes", "x".repeat(9000)]]) {
    r = await checkTok(raw);
    check(r.status === 401 && r.reason === "malformed" && r.www === invalid, `refused: ${what} -> malformed`, r);
  }

  // -- scopes: per tool, per method, the hierarchy
  const readTok = await as.token({ client: "rs", scope: "mcp:read" });
  r = await checkTok(readTok, "tools/call", "echo");
  check(r.status === 403 && r.reason === "insufficient_scope" && r.sub === "rs" &&
        r.www === `Bearer error="insufficient_scope", resource_metadata="${md}", scope="mcp:tools"`,
        "403 insufficient_scope names the tool's scope", r);
  r = await checkTok(rsTok, "tools/call", "admin_reset");
  check(r.status === 403 && r.www.includes('scope="mcp:admin"'), "a tool with its own scope", r);
  const adminTok = await as.token({ client: "rs", scope: "mcp:admin" });
  r = await checkTok(adminTok, "tools/call", "admin_reset");
  check(r.status === 200, "the admin scope for its tool", r);
  r = await checkTok(adminTok, "tools/call", "echo");
  check(r.status === 200, "mcp:admin implies mcp:tools (hierarchy)", r);
  r = await checkTok(readTok, "tools/list", "-");
  check(r.status === 200, "a method without a rule needs no scope", r);
  r = await checkTok(rsTok, "resources/read", "-");
  check(r.status === 403 && r.www.includes('scope="mcp:read"'), "a method rule (resources/read)", r);

  // -- the metadata document
  for (const p of ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"]) {
    r = await cmd("meta", p);
    check(r.rc === 0 && r.doc.resource === resource && r.doc.authorization_servers[0] === iss &&
          r.doc.scopes_supported.join(" ") === "mcp:read mcp:tools mcp:admin" &&
          r.doc.bearer_methods_supported[0] === "header", `metadata at ${p}`, r);
  }
  r = await cmd("meta", "/.well-known/oauth-protected-resource/other");
  check(r.rc === -4, "no metadata at another path", r);

  // -- unknown kids: refreshes are rate-limited (one per 2 s at most)
  const before = as.counts.jwks, t0 = Date.now();
  for (let i = 0; i < 10; i++) {
    r = await checkTok(mine(claims(), `nope${i}`, "RS256", otherRsa));
    if (r.reason !== "unknown_kid") break;
  }
  const fetches = as.counts.jwks - before, allowed = Math.ceil((Date.now() - t0) / 2000) + 1;
  check(r.reason === "unknown_kid" && r.status === 401, "unknown kid -> unknown_kid", r);
  check(fetches <= allowed, `10 unknown kids made ${fetches} JWKS fetches (at most ${allowed})`);

  // -- many threads at once: known kids never wait for a fetch, and unknown
  // kids make one fetch per refresh interval however many ask
  r = await cmd("par", "8", "25", rsTok, esTok, readTok);
  check(r.rc === 0 && r.errors === 0 && r.status["200"] === 400 && r.status["403"] === 200,
        "8 threads x 25 x 3 tokens: every answer right", r);
  await sleep(2100); // past the refresh interval
  const burst0 = as.counts.jwks;
  const strangers = Array.from({ length: 6 }, (_, i) => mine(claims(), `par${i}`, "RS256", otherRsa));
  const tb = Date.now();
  r = await cmd("par", "8", "3", ...strangers, rsTok);
  const burst = as.counts.jwks - burst0, burstAllowed = Math.ceil((Date.now() - tb) / 2000) + 1;
  check(r.rc === 0 && r.errors === 0 && r.reason.unknown_kid === 144 && r.reason.ok === 24,
        "8 threads x 3 x 6 unknown kids + a known one: unknown_kid, ok", r);
  check(burst >= 1 && burst <= burstAllowed,
        `144 unknown-kid checks from 8 threads made ${burst} JWKS fetches (1 to ${burstAllowed})`);

  // -- rotation: the server restarts with a new RSA key first; no restart here
  await as.stop();
  as = await startAuthzServer({ port: asPort, resource, keys: ["rs2", "rs1", "es1", "ed1"] });
  const rotTok = await as.token({ client: "rs", scope: "mcp:tools" });
  check(JSON.parse(Buffer.from(rotTok.split(".")[0], "base64url")).kid === "rs2", "the server signs with rs2 now");
  r = await until(() => checkTok(rotTok), (v) => v.status === 200);
  check(r.status === 200 && r.sub === "rs", "a new kid after rotation is accepted without restart", r);
  r = await checkTok(rsTok);
  check(r.status === 200, "the old kid still validates", r);

  // -- the issuer down
  await as.stop();
  r = await checkTok(rotTok);
  check(r.status === 200, "issuer down: a known kid validates from the cache", r);
  const rs9 = privateJwk("rs9");
  r = await until(() => checkTok(mine(claims(), "rs9", "RS256", rs9)), (v) => v.reason !== "unknown_kid", 6000);
  check(r.status === 503 && r.reason === "issuer_unavailable" && r.www === "",
        "issuer down: an unknown kid is issuer_unavailable (503)", r);
  r = await checkTok("garbage");
  check(r.status === 401 && r.reason === "garbage", "issuer down: garbage is still 401", r);

  r = await cmd("counts");
  check(r.expired === 1 && r.alg_none === 1 && r.insufficient_scope === 203 && r.issuer_unavailable >= 1,
        "reasons counted for metrics", r);

  // -- introspection
  as = await startAuthzServer({ port: asPort, resource, keys: ["rs1", "es1"] });
  r = await cmd("introspect", iss, as.introspectionUri, resource, "rs-introspect", SECRET, "1500");
  check(r.rc === 0, "tm_auth_new (introspection mode)", r);
  const opaque = await as.token({ client: "opaque", scope: "mcp:tools" });
  const n0 = as.counts.introspection;
  r = await checkTok(opaque);
  check(r.status === 200 && r.sub === "opaque" && r.id === principalId(iss, "opaque") && r.scope === "mcp:tools",
        "introspection: active token -> principal (client_id as sub)", r);
  r = await checkTok(opaque);
  check(r.status === 200 && as.counts.introspection === n0 + 1, "introspection: the second check is cached",
        { r, asked: as.counts.introspection - n0 });
  r = await checkTok("Zm9vYmFyYmF6cXV4");
  check(r.status === 401 && r.reason === "inactive", "introspection: unknown token -> inactive", r);
  const n1 = as.counts.introspection;
  r = await checkTok("Zm9vYmFyYmF6cXV4");
  check(r.reason === "inactive" && as.counts.introspection === n1 + 1, "introspection: inactive is not cached", r);
  const readOpaque = await as.token({ client: "opaque", scope: "mcp:read" });
  r = await checkTok(readOpaque);
  check(r.status === 403 && r.reason === "insufficient_scope", "introspection: scopes apply", r);
  await as.stop();
  r = await checkTok(opaque);
  check(r.status === 200, "introspection, issuer down: a cached answer holds", r);
  r = await checkTok("c29tZXRoaW5nZWxzZQ");
  check(r.status === 503 && r.reason === "issuer_unavailable", "introspection, issuer down: 503", r);
  r = await until(() => checkTok(opaque), (v) => v.status !== 200, 5000);
  check(r.status === 503 && r.reason === "issuer_unavailable", "introspection: the cache runs out (1.5 s)", r);

}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`FAIL ${e.stack}`);
}
drv.stdin.end();
await Promise.race([exited, sleep(5000)]);
if (drv.exitCode === null) drv.kill("SIGKILL");
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
