// modern_client_reissue.mjs (CTest modern_client_reissue): a cut modern call
// is re-issued only when that is safe, against a fake 2026-07-28 server
// (in this file) that cuts the first stream of a call:
//   1. a keyed call (tidemark-client makes the key) is re-issued once, with
//      the same key and a new JSON-RPC id, and answered;
//   2. a key-less call of a tool that is neither idempotent nor read-only is
//      not re-issued: exit 4, continuity_unprovable, the server saw it once;
//   3. a key-less call of a read-only tool is re-issued (new id);
//   4. a client killed (SIGKILL) while its keyed call is running kept the call
//      and its key in the state file before sending it; restarted, `resume`
//      re-issues it with the same key and a new id, and gets the answer;
//   5. the same for a call killed in its second round (after an
//      InputRequiredResult was answered): resume re-issues that round
//      (inputResponses, requestState, the round's key) and finishes it.
//   node modern_client_reissue.mjs CLIENT
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { checker, until } from "./mcp_http.mjs";

const [client] = process.argv.slice(2);
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-modern-reissue-"));
const KEY = "dev.tidemark/idempotency-key";

// ---- the fake server ------------------------------------------------------------------
const calls = []; // {id, name, key, version, mcpName}
const seenKeys = new Map(); // key -> times seen
const tools = [
  { name: "pay", inputSchema: { type: "object", properties: { amount: { type: "integer" } } } },
  { name: "look", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
  { name: "hold", inputSchema: { type: "object" } },
  { name: "ask", inputSchema: { type: "object" } },
];
let holdRelease = false;

function reply(res, id, result) {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", id, result: { resultType: "complete", ...result } }));
}
const text = (s) => ({ content: [{ type: "text", text: s }] });

// The first stream of a call: headers, a progress notification, then the cut.
function cut(req, res, id) {
  res.writeHead(200, { "content-type": "text/event-stream" });
  res.write(`data: ${JSON.stringify({ jsonrpc: "2.0", method: "notifications/progress",
    params: { progressToken: id, progress: 1 } })}\n\n`);
  setTimeout(() => req.socket.destroy(), 50);
}

function onCall(req, res, body) {
  const p = body.params ?? {};
  const key = p._meta?.[KEY] ?? null;
  calls.push({ id: body.id, name: p.name, key, version: req.headers["mcp-protocol-version"],
    mcpName: req.headers["mcp-name"] });
  const n = key ? (seenKeys.get(key) ?? 0) + 1 : 1;
  if (key) seenKeys.set(key, n);
  const earlier = calls.filter((c) => c.name === p.name && c.key === key).length;
  if (p.name === "pay") return key && n > 1 ? reply(res, body.id, text(`paid ${key}`)) : cut(req, res, body.id);
  if (p.name === "look") return earlier > 1 ? reply(res, body.id, text("looked")) : cut(req, res, body.id);
  if (p.name === "ask") {
    if (!p.inputResponses)
      return reply(res, body.id, { resultType: "input_required", requestState: "ask-state-1",
        inputRequests: { ok: { method: "elicitation/create", params: { message: "ok?",
          requestedSchema: { type: "object", properties: { yes: { type: "boolean", default: true } } } } } } });
    if (!holdRelease) { res.writeHead(200, { "content-type": "text/event-stream" }); res.write(": held\n\n"); return undefined; }
    return reply(res, body.id, text(`asked ${p.requestState} ${JSON.stringify(p.inputResponses)}`));
  }
  if (p.name === "hold") {
    if (holdRelease) return reply(res, body.id, text(`held ${key}`));
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(": held\n\n"); // and never answered: the client is killed meanwhile
    return undefined;
  }
  return reply(res, body.id, { ...text("?"), isError: true });
}

const server = createServer((req, res) => {
  if (req.method !== "POST") { res.writeHead(405); res.end(); return; }
  let data = "";
  req.on("data", (d) => { data += d; });
  req.on("end", () => {
    const body = JSON.parse(data);
    if (body.method === "server/discover")
      return reply(res, body.id, { supportedVersions: ["2026-07-28"], capabilities: { tools: {} },
        serverInfo: { name: "reissue-fake", version: "1" } });
    if (body.method === "tools/list") return reply(res, body.id, { tools, ttlMs: 0 });
    if (body.method === "tools/call") return onCall(req, res, body);
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", id: body.id, error: { code: -32601, message: "no" } }));
    return undefined;
  });
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const url = `http://127.0.0.1:${server.address().port}/mcp`;

// ---- the client -------------------------------------------------------------------------
function start(args, ms = 20000) {
  const proc = reaped(spawn(client, ["--retry-min-ms", "50", ...args], { stdio: ["ignore", "pipe", "pipe"] }));
  let out = "", err = "";
  const timer = setTimeout(() => proc.kill("SIGKILL"), ms);
  proc.stdout.on("data", (d) => { out += d; });
  proc.stderr.on("data", (d) => { err += d; });
  const done = new Promise((resolve) => proc.on("close", (code, sig) => {
    clearTimeout(timer);
    const reason = (/"reason":\s*"([a-z_]+)"/.exec(out) ?? [])[1] ?? "";
    resolve({ code, sig, out, err, reason });
  }));
  return { proc, done };
}
const run = (args) => start(args).done;
const brief = (r) => `exit ${r.code}${r.sig ? " " + r.sig : ""}; out ${r.out.slice(0, 300)}; err ${r.err.slice(0, 300)}`;
const callsOf = (name) => calls.filter((c) => c.name === name);
const json = (s) => { try { return JSON.parse(s); } catch { return null; } };

// 1. keyed: re-issued once, same key, new id.
{
  const state = join(dir, "keyed.db");
  const r = await run(["--state", state, url, "call", "pay", "amount=5"]);
  const c = callsOf("pay");
  t.check("keyed call answered after one re-issue", r.code === 0 && /^paid tmk-[0-9a-f]{32}$/.test(r.out.trim()), brief(r));
  t.check("keyed: the server saw it twice, same key, a new id",
    c.length === 2 && c[0].key && c[0].key === c[1].key && c[0].id !== c[1].id, JSON.stringify(c));
  t.check("keyed: both carried MCP-Protocol-Version 2026-07-28 and Mcp-Name pay",
    c.every((x) => x.version === "2026-07-28" && x.mcpName === "pay"), JSON.stringify(c));
  const st = json((await run(["--state", state, url, "state"])).out);
  t.check("keyed: nothing left outstanding", st?.outstanding?.length === 0, JSON.stringify(st?.outstanding));
}

// 2. key-less, not idempotent: never re-issued.
{
  const before = callsOf("pay").length;
  const r = await run(["--no-idempotency-key", url, "call", "pay", "amount=7"]);
  const c = callsOf("pay").slice(before);
  t.check("key-less non-idempotent call: exit 4, continuity_unprovable",
    r.code === 4 && r.reason === "continuity_unprovable", brief(r));
  t.check("key-less non-idempotent call: sent once, without a key", c.length === 1 && c[0].key === null, JSON.stringify(c));
}

// 3. key-less, read-only: re-issued with a new id.
{
  const r = await run(["--no-idempotency-key", url, "call", "look"]);
  const c = callsOf("look");
  t.check("key-less read-only call re-issued and answered", r.code === 0 && r.out.trim() === "looked", brief(r));
  t.check("read-only: twice, new id, no key", c.length === 2 && c[0].id !== c[1].id && c.every((x) => x.key === null),
    JSON.stringify(c));
}

// 4. killed after persisting, restarted: the same key again, a new id.
{
  const state = join(dir, "killed.db");
  const k = start(["--state", state, url, "call", "hold"]);
  await until("the held call at the server", () => callsOf("hold").length === 1, 10000);
  k.proc.kill("SIGKILL");
  const killed = await k.done;
  t.check("the client was killed while its call ran", killed.sig === "SIGKILL", brief(killed));
  const st = json((await run(["--state", state, url, "state"])).out);
  const row = st?.outstanding?.[0];
  const first = callsOf("hold")[0];
  t.check("the state kept the call outstanding with the key it sent",
    st?.outstanding?.length === 1 && row?.method === "tools/call" && row?.idem_key === first.key,
    JSON.stringify(st?.outstanding));
  holdRelease = true;
  const r = await run(["--state", state, url, "resume"]);
  const c = callsOf("hold");
  t.check("resume re-issued it and got the answer", r.code === 0 && r.out.includes(`held ${first.key}`), brief(r));
  t.check("resume: the same key, a new id", c.length === 2 && c[1].key === first.key && c[1].id !== first.id,
    JSON.stringify(c));
  const st2 = json((await run(["--state", state, url, "state"])).out);
  t.check("resume: nothing left outstanding", st2?.outstanding?.length === 0, JSON.stringify(st2?.outstanding));
}

// 5. killed in the second round: resume re-issues that round.
{
  holdRelease = false;
  const state = join(dir, "round.db");
  const k = start(["--state", state, "--elicit", "accept", url, "call", "ask"]);
  await until("the second round at the server", () => callsOf("ask").length === 2, 10000);
  k.proc.kill("SIGKILL");
  await k.done;
  const st = json((await run(["--state", state, url, "state"])).out);
  const [r1, r2] = callsOf("ask");
  t.check("killed in round 2: that round is the one outstanding, with the round's key",
    st?.outstanding?.length === 1 && r2.key === `${r1.key}#2` && st.outstanding[0].idem_key === r2.key,
    JSON.stringify({ outstanding: st?.outstanding, calls: callsOf("ask") }));
  holdRelease = true;
  const r = await run(["--state", state, url, "resume"]);
  const c = callsOf("ask");
  t.check("resume re-issues round 2 (its answers, the state, the key; a new id) and finishes it",
    r.code === 0 && r.out.includes('asked ask-state-1 {\\"ok\\":{\\"action\\":\\"accept\\",\\"content\\":{\\"yes\\":true}}}') &&
    c.length === 3 && c[2].key === r2.key && c[2].id !== r2.id, brief(r) + JSON.stringify(c));
}

server.closeAllConnections?.();
server.close();
t.done();
