// client_first_hour.mjs (CTest client_first_hour): what a new user of
// tidemark-client meets in the first hour. --version; --help lists every
// flag (one spelling for times, *-ms; the old spellings still work but are
// not shown) and nothing outside the repository; each first-hour mistake
// gets a sentence on stderr saying what happened and its own exit code:
// nothing listening (exit 3, "cannot connect to URL: Connection refused"),
// a URL that is not an MCP endpoint (exit 3, "no MCP endpoint at URL (HTTP
// 404)", not a lost session), an unknown command (exit 2, before anything
// is sent), resume without --state (exit 2); progress as plain lines when
// stderr is not a terminal, and as one line rewritten in place when it is.
//
//   node client_first_hour.mjs TIDEMARK_CLIENT VERSION
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { freePort } from "./ports.mjs";
import { progressMsg, resultMsg, send, sseBlock, sseHead, eid, startHostile } from "./hostile_server.mjs";

const [client, version] = process.argv.slice(2);
if (!client || !version) {
  console.error("usage: client_first_hour.mjs TIDEMARK_CLIENT VERSION");
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), "tm-first-hour-"));
let passed = 0, failed = 0;
function check(name, cond, detail) {
  if (cond) { passed++; console.log("ok   " + name); }
  else { failed++; console.log("FAIL " + name + (detail !== undefined ? ": " + String(detail).slice(0, 600) : "")); }
}

function run(args, { timeoutMs = 30000 } = {}) {
  const t0 = Date.now();
  const proc = reaped(spawn(client, args, { stdio: ["ignore", "pipe", "pipe"] }));
  let out = "", err = "";
  proc.stdout.on("data", (d) => { out += d; });
  proc.stderr.on("data", (d) => { err += d; });
  const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs);
  return new Promise((resolve) => proc.on("close", (code, sig) => {
    clearTimeout(timer);
    const reason = (/"reason":\s*"([a-z_]+)"/.exec(out) ?? [])[1] ?? "";
    resolve({ code, sig, out, err, reason, ms: Date.now() - t0 });
  }));
}
const brief = (r) => `exit ${r.code}${r.sig ? " " + r.sig : ""}, reason ${r.reason || "-"}, ${r.ms} ms; ` +
  `out ${JSON.stringify(r.out.slice(0, 200))}; err ${JSON.stringify(r.err.slice(0, 300))}`;

// A loopback port nothing listens on for the whole test: port 1 (tcpmux,
// privileged: no test's server binds it, while a port picked free and
// released can be taken by another test's server meanwhile: ctest runs two
// at once, and one did, answering 404), once seen refused; else one picked.
async function deadPort() {
  const refused = await new Promise((resolve) => {
    const s = connect(1, "127.0.0.1");
    s.once("connect", () => { s.destroy(); resolve(false); });
    s.once("error", (e) => resolve(e.code === "ECONNREFUSED"));
  });
  return refused ? 1 : freePort();
}
// An HTTP server that answers everything with `status`, counting requests.
function plainServer(status) {
  const stats = { requests: 0 };
  const srv = createServer((req, res) => {
    stats.requests++;
    req.resume();
    req.on("end", () => { res.writeHead(status, { "Content-Type": "text/plain" }); res.end("not here\n"); });
  });
  return new Promise((resolve) => srv.listen(0, "127.0.0.1", () => resolve({
    url: `http://127.0.0.1:${srv.address().port}/mcp`, stats,
    close: () => new Promise((r) => { srv.closeAllConnections?.(); srv.close(() => r()); }),
  })));
}

async function versionAndHelp() {
  const v = await run(["--version"]);
  check(`--version prints "tidemark-client ${version}", exit 0`,
    v.code === 0 && v.out === `tidemark-client ${version}\n` && v.err === "", brief(v));
  const h = await run(["--help"]);
  const flags = ["--state", "--json", "--args", "--persist", "--idempotent-handlers", "--record-effects",
    "--idempotency-key", "--timeout-ms", "--retry-min-ms", "--retry-max-ms", "--max-held-bytes",
    "--quiet", "--version", "--help"];
  const missing = flags.filter((f) => !h.out.includes(f));
  check("--help lists every flag, exit 0", h.code === 0 && missing.length === 0, `missing ${missing}; ${brief(h)}`);
  const commands = ["tools", "call", "resources", "read", "prompts", "prompt", "listen", "resume", "end",
    "effects", "state"];
  const noCmd = commands.filter((c) => !new RegExp(`^  ${c}\\b`, "m").test(h.out));
  check("--help lists every command", noCmd.length === 0, `missing ${noCmd}`);
  check("--help: times are spelled *-ms only (old spellings not shown)",
    !/--timeout(?!-ms)|--retry-min(?!-ms)|--retry-max(?!-ms)/.test(h.out), h.out);
  check("--help: no path outside the repository, no DESIGN section",
    !/\.\.\/|DESIGN|\/work\/|\/home\//.test(h.out), h.out);
  check("--help: exit codes listed", /Exit codes:/.test(h.out) && /5 the session was lost/.test(h.out), h.out);
}

async function nothingListening() {
  const port = await deadPort();
  const url = `http://127.0.0.1:${port}/mcp`;
  const want = `cannot connect to ${url}: Connection refused`;
  const r = await run(["--timeout-ms", "3000", url, "tools"]);
  check("nothing listening: exit 3 with 'cannot connect to URL: Connection refused' on stderr",
    r.code === 3 && r.err.includes(want) && r.reason === "cannot_connect", brief(r));
  const state = join(dir, "refused.db");
  const c = await run(["--timeout-ms", "3000", "--state", state, url, "call", "echo", "text=hi"]);
  check("nothing listening, a call with --state: the same, never continuity_unprovable",
    c.code === 3 && c.err.includes(want) && c.reason === "cannot_connect" &&
    !/continuity_unprovable|reconnect_exhausted/.test(c.out + c.err), brief(c));
  // The old spelling of the time flag still works.
  const old = await run(["--timeout", "2000", "--retry-min", "10", "--retry-max", "20", url, "tools"]);
  check("--timeout / --retry-min / --retry-max (old spellings) still work",
    old.code === 3 && old.err.includes(want) && old.ms < 2000 + 4000, brief(old));
  // Without a timeout of its own the client gives up within its reconnect budget.
  const def = await run([url, "tools"], { timeoutMs: 60000 });
  check("nothing listening, default settings: exit 3 within the reconnect budget (< 30 s)",
    def.code === 3 && def.err.includes(want) && def.ms < 30000, brief(def));
}

async function notAnEndpoint() {
  const srv = await plainServer(404);
  try {
    const r = await run(["--timeout-ms", "5000", srv.url, "tools"]);
    check("a URL that answers 404: exit 3 'no MCP endpoint at URL (HTTP 404)', not session_lost",
      r.code === 3 && r.err.includes(`no MCP endpoint at ${srv.url} (HTTP 404)`) && r.reason === "no_endpoint" &&
      !/session_lost/.test(r.out + r.err), brief(r));
  } finally { await srv.close(); }
}

async function usageMistakes() {
  const srv = await plainServer(404);
  try {
    const u = await run([srv.url, "frobnicate"]);
    check("unknown command: exit 2, says so, sends nothing",
      u.code === 2 && /unknown command 'frobnicate'/.test(u.err) && u.out === "" && srv.stats.requests === 0,
      `${brief(u)}; ${srv.stats.requests} requests`);
    const m = await run([srv.url, "resume"]);
    check("resume without --state: exit 2, says it needs one, sends nothing",
      m.code === 2 && /resume needs --state FILE/.test(m.err) && srv.stats.requests === 0,
      `${brief(m)}; ${srv.stats.requests} requests`);
    const n = await run([srv.url, "call"]);
    check("call without a NAME: exit 2 with its usage", n.code === 2 && /call NAME/.test(n.err), brief(n));
    const t = await run(["--timeout-ms", "soon", srv.url, "tools"]);
    check("--timeout-ms that is not a number: exit 2, says so",
      t.code === 2 && /--timeout-ms wants a positive number/.test(t.err), brief(t));
    const x = await run([srv.url]);
    check("a URL without a COMMAND: exit 2, says so", x.code === 2 && /COMMAND/.test(x.err), brief(x));
  } finally { await srv.close(); }
}

// A call streaming progress 1..3 of 3, then its result.
function progressServer() {
  return startHostile({ onCall: async (ctx) => {
    sseHead(ctx.res, 100);
    await send(ctx.res, sseBlock({ id: eid("r1", 1), data: "" }));
    for (let p = 1; p <= 3; p++)
      await send(ctx.res, sseBlock({ id: eid("r1", p + 1), data: progressMsg(ctx.token, p, 3, `step ${p}`) }));
    await send(ctx.res, sseBlock({ id: eid("r1", 5), data: resultMsg(ctx.id, "all done") }));
    ctx.res.end();
  } });
}

async function progressLines() {
  const srv = await progressServer();
  try {
    const r = await run([srv.url, "call", "stream", "n=3"]);
    const lines = r.err.split("\n").filter((l) => l.startsWith("progress"));
    check("progress, stderr not a terminal: plain lines, one per notification",
      r.code === 0 && /all done/.test(r.out) &&
      lines.join("|") === "progress 1/3 step 1|progress 2/3 step 2|progress 3/3 step 3" &&
      !/\r|\x1b\[/.test(r.err), brief(r));
    const q = await run(["--quiet", srv.url, "call", "stream", "n=3"]);
    check("--quiet: no progress", q.code === 0 && !/progress/.test(q.err), brief(q));
  } finally { await srv.close(); }
  // On a terminal (script(1) gives the client one): one line, rewritten.
  if (spawnSync("script", ["--version"]).status !== 0) {
    check("progress on a terminal: script(1) is needed for this check", false);
    return;
  }
  const srv2 = await progressServer();
  try {
    const cmd = [client, srv2.url, "call", "stream", "n=3"].map((a) => `'${a}'`).join(" ");
    const r = await new Promise((resolve) => {
      const p = reaped(spawn("script", ["-qec", `${cmd} 2>&1`, "/dev/null"], { stdio: ["ignore", "pipe", "pipe"] }));
      let out = "";
      p.stdout.on("data", (d) => { out += d; });
      const timer = setTimeout(() => p.kill("SIGKILL"), 30000);
      p.on("close", (code) => { clearTimeout(timer); resolve({ code, out }); });
    });
    const redraws = (r.out.match(/\r\x1b\[K(?=progress)/g) ?? []).length;
    check("progress, stderr a terminal: one line rewritten in place (\\r + clear), ended before the result",
      r.code === 0 && redraws === 3 && /progress 3\/3 step 3\r?\n/.test(r.out) && /all done/.test(r.out) &&
      !/progress 1\/3 step 1\r?\n/.test(r.out), JSON.stringify(r.out.slice(0, 400)));
  } finally { await srv2.close(); }
}

try {
  await versionAndHelp();
  await usageMistakes();
  await nothingListening();
  await notAnEndpoint();
  await progressLines();
} catch (e) {
  failed++;
  console.log(`FAIL aborted: ${e.stack ?? e}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
