// modern_client_sdk.mjs (CTest modern_client_sdk): tidemark-client against
// the official TypeScript SDK servers, one per era:
//   - v2 (@modelcontextprotocol/server 2.4.0, modern_client_sdk_server.mjs):
//     the client finds the modern era out (server/discover) and lists and
//     calls tools, reads a resource, gets a prompt, answers an elicitation
//     round (InputRequiredResult, requestState echoed, a new id, the key of
//     the round), listens (subscriptions/listen) for the notifications a call
//     publishes; every request carries MCP-Protocol-Version 2026-07-28,
//     Mcp-Method, Mcp-Name where it applies and no session; --protocol legacy
//     talks to the same server in the legacy era;
//   - v1 (@modelcontextprotocol/sdk 1.32.2, sdk_server.mjs): auto falls back
//     to initialize and a session; --protocol modern refuses (exit 6,
//     modern_unsupported).
//   node modern_client_sdk.mjs CLIENT SDK_V2_SERVER_MJS SDK_V1_SERVER_MJS
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { checker, until } from "./mcp_http.mjs";
import { stopProc } from "./multinode_env.mjs";

const [client, v2Server, v1Server] = process.argv.slice(2);
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-modern-sdk-"));

function startNode(script) {
  return new Promise((resolve, reject) => {
    const proc = reaped(spawn(process.execPath, [script, "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] }));
    let out = "", log = "";
    const timer = setTimeout(() => reject(new Error(`${script} did not start: ${log}`)), 15000);
    proc.stderr.on("data", (d) => { log += d; });
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (\S+)/);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1] }); }
    });
    proc.once("exit", (c) => { clearTimeout(timer); reject(new Error(`${script} exited ${c}: ${log}`)); });
  });
}

// Run the client; resolves {code, out, err, reason}. onOut sees stdout as it comes.
function run(args, { ms = 20000, onOut } = {}) {
  return new Promise((resolve) => {
    const proc = reaped(spawn(client, args, { stdio: ["ignore", "pipe", "pipe"] }));
    let out = "", err = "";
    const timer = setTimeout(() => proc.kill("SIGKILL"), ms);
    proc.stdout.on("data", (d) => { out += d; onOut?.(out); });
    proc.stderr.on("data", (d) => { err += d; });
    proc.on("close", (code) => {
      clearTimeout(timer);
      const reason = (/"reason":\s*"([a-z_]+)"/.exec(out) ?? [])[1] ?? "";
      resolve({ code, out, err, reason });
    });
  });
}
const json = (s) => { try { return JSON.parse(s); } catch { return null; } };
const brief = (r) => `exit ${r.code}; out ${r.out.slice(0, 300)}; err ${r.err.slice(0, 300)}`;

async function stats(url) {
  const res = await fetch(new URL("/stats", url));
  return res.json();
}

async function modern() {
  const srv = await startNode(v2Server);
  const u = srv.url;
  try {
    let r = await run(["--json", u, "tools"]);
    const names = (json(r.out) ?? []).map((x) => x.name).sort().join(",");
    t.check("v2: tools lists echo, add, confirm, touch", r.code === 0 && names === "add,confirm,echo,touch", brief(r));
    r = await run([u, "call", "echo", "text=hi there"]);
    t.check("v2: call echo answers the text", r.code === 0 && r.out.trim() === "hi there", brief(r));
    r = await run(["--json", u, "read", "test://hello"]);
    t.check("v2: read test://hello", r.code === 0 && json(r.out)?.contents?.[0]?.text === "hello", brief(r));
    r = await run(["--json", u, "resources"]);
    t.check("v2: resources lists test://hello", r.code === 0 && json(r.out)?.resources?.[0]?.uri === "test://hello", brief(r));
    r = await run(["--json", u, "prompt", "greet", "name=Ada"]);
    t.check("v2: prompt greet", r.code === 0 && json(r.out)?.messages?.[0]?.content?.text === "Hello, Ada!", brief(r));
    r = await run(["--json", u, "prompts"]);
    t.check("v2: prompts lists greet", r.code === 0 && json(r.out)?.[0]?.name === "greet", brief(r));

    const before = (await stats(u)).methods.length;
    r = await run(["--elicit", "accept", u, "call", "confirm", "what=deploy"]);
    t.check("v2: an elicitation round answered with the schema's default, then the result",
      r.code === 0 && r.out.trim() === 'confirmed deploy: accept {"ok":true}', brief(r));
    const calls = (await stats(u)).methods.slice(before).filter((m) => m.method === "tools/call");
    t.check("v2: the round is the request again under a new id, its key the round's",
      calls.length === 2 && calls[0].id !== calls[1].id && /^tmk-[0-9a-f]{32}$/.test(calls[0].key ?? "") &&
      calls[1].key === `${calls[0].key}#2`, JSON.stringify(calls));
    r = await run([u, "call", "confirm", "what=x"]);
    t.check("v2: a declined elicitation is an answer too", r.code === 0 && r.out.trim() === "confirmed x: decline {}", brief(r));

    // listen, and a call that publishes what it listens for.
    let acked = false;
    const lp = run([u, "listen", "--tools", "--resource", "test://hello", "6"], {
      onOut: (o) => { acked = o.includes("notifications/subscriptions/acknowledged"); } });
    await until("the listen acknowledgement", () => acked, 10000);
    r = await run([u, "call", "touch"]);
    t.check("v2: touch", r.code === 0 && r.out.trim() === "touched", brief(r));
    const l = await lp;
    const lines = l.out.trim().split("\n").map(json);
    const methods = lines.map((m) => m?.method);
    t.check("v2: listen prints the acknowledgement, tools/list_changed and resources/updated, one JSON line each",
      l.code === 0 && methods[0] === "notifications/subscriptions/acknowledged" &&
      methods.includes("notifications/tools/list_changed") &&
      lines.some((m) => m?.method === "notifications/resources/updated" && m.params?.uri === "test://hello"),
      brief(l));
    t.check("v2: the acknowledged filter is the one asked for",
      JSON.stringify(lines[0]?.params?.notifications) === JSON.stringify({ toolsListChanged: true, resourceSubscriptions: ["test://hello"] }),
      JSON.stringify(lines[0]));

    const all = (await stats(u)).methods;
    t.check("v2: every request is modern: MCP-Protocol-Version 2026-07-28, Mcp-Method, no session",
      all.length > 10 && all.every((m) => m.version === "2026-07-28" && m.mcpMethod === m.method && m.session === null),
      JSON.stringify(all.filter((m) => !(m.version === "2026-07-28" && m.mcpMethod === m.method && m.session === null))));
    t.check("v2: Mcp-Name on tools/call, resources/read, prompts/get",
      all.filter((m) => ["tools/call", "resources/read", "prompts/get"].includes(m.method)).every((m) => m.mcpName),
      JSON.stringify(all.filter((m) => !m.mcpName)));
    t.check("v2: no initialize, no GET stream in the modern era",
      !all.some((m) => m.method === "initialize" || m.method === "notifications/initialized"));

    const state = join(dir, "modern.db");
    r = await run(["--state", state, u, "call", "add", "a=2", "b=40"]);
    t.check("v2: call add with a state file", r.code === 0 && r.out.trim() === "sum 42", brief(r));
    r = await run(["--state", state, u, "state"]);
    const st = json(r.out);
    t.check("v2: the state file keeps the era (2026-07-28, no session id) and nothing outstanding",
      r.code === 0 && st?.session?.[0]?.version === "2026-07-28" && st?.session?.[0]?.id === "" &&
      st?.outstanding?.length === 0,
      r.out.slice(0, 400));

    // The same server in the legacy era (its stateless fallback).
    const n0 = (await stats(u)).methods.length;
    r = await run(["--protocol", "legacy", u, "call", "echo", "text=old"]);
    const legacy = (await stats(u)).methods.slice(n0);
    t.check("v2: --protocol legacy: initialize, no server/discover, the call answered",
      r.code === 0 && r.out.trim() === "old" && legacy[0]?.method === "initialize" &&
      !legacy.some((m) => m.method === "server/discover"), brief(r) + JSON.stringify(legacy));
  } finally {
    await stopProc(srv.proc);
  }
}

async function legacy() {
  const srv = await startNode(v1Server);
  const u = srv.url;
  try {
    let r = await run([u, "call", "echo", "text=from v1"]);
    t.check("v1: auto falls back to a legacy session and the call is answered", r.code === 0 && r.out.trim() === "from v1", brief(r));
    r = await run(["--json", u, "tools"]);
    t.check("v1: tools", r.code === 0 && (json(r.out) ?? []).some((x) => x.name === "echo"), brief(r));
    r = await run(["--elicit", "accept", u, "call", "ask_elicitation", "message=hi"]);
    t.check("v1: a legacy elicitation (a server request on the stream) accepted with defaults",
      r.code === 0 && r.out.includes("elicited: accept") && r.out.includes('"name":"Ada"'), brief(r));
    r = await run(["--protocol", "modern", u, "tools"]);
    t.check("v1: --protocol modern refuses a legacy server (exit 6, modern_unsupported)",
      r.code === 6 && r.reason === "modern_unsupported", brief(r));
  } finally {
    await stopProc(srv.proc);
  }
}

await modern();
await legacy();
t.done();
