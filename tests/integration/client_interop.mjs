// tidemark-client against the official TypeScript SDK server (stateful, the
// SDK's example in-memory event store; tests/integration/sdk_server.mjs) and
// against tidemark-server: list and call tools, receive progress, read a
// resource, get a prompt, and survive a connection cut mid-call (the server
// closes the call's SSE response; the client resumes with Last-Event-ID and
// gets every remaining event exactly once).
//
//   node client_interop.mjs CLIENT TIDEMARK_SERVER SDK_SERVER_SCRIPT
import { spawn, spawnSync } from "node:child_process";
import { reaped } from "./reap.mjs";

const [client, tmServer, sdkScript] = process.argv.slice(2);
if (!client || !tmServer || !sdkScript) {
  console.error("usage: client_interop.mjs CLIENT TIDEMARK_SERVER SDK_SERVER_SCRIPT");
  process.exit(2);
}
let passed = 0, failed = 0;
const procs = [];
function check(name, cond, detail) {
  if (cond) { passed++; console.log("ok   " + name); }
  else { failed++; console.log("FAIL " + name + (detail ? ": " + detail : "")); }
}

function startServer(cmd, args, env = {}) {
  return new Promise((resolve, reject) => {
    const p = reaped(spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, ...env } }));
    procs.push(p);
    let out = "";
    const t = setTimeout(() => reject(new Error(`${cmd} did not start`)), 15000);
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^listening on (\S+)$/m);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
  });
}

// Legacy era throughout: these are the legacy session's guarantees (a cut
// stream resumed with Last-Event-ID); the 2026-07-28 era is tested by the
// modern_client_* tests.
function tm(url, ...args) {
  const r = spawnSync(client, ["--protocol", "legacy", url, ...args], { encoding: "utf8", timeout: 30000 });
  return { code: r.status, out: r.stdout ?? "", err: r.stderr ?? "" };
}
const progressOf = (err) => [...err.matchAll(/^progress (\d+)\/(\d+)/gm)].map((m) => Number(m[1]));
const seq = (n) => Array.from({ length: n }, (_, i) => i + 1).join();

async function suite(label, url, cutUrl, cutArgs) {
  const tools = tm(url, "tools");
  check(`${label}: tools lists echo and stream`, tools.code === 0 && /^echo\b/m.test(tools.out) && /^stream\b/m.test(tools.out), tools.out + tools.err);
  const echo = tm(url, "call", "echo", "text=hello interop");
  check(`${label}: call echo`, echo.code === 0 && echo.out.trim() === "hello interop", echo.out + echo.err);
  const st = tm(url, "call", "stream", "n=5");
  check(`${label}: call stream with progress 1..5`, st.code === 0 && st.out.trim() === "streamed 5" &&
    progressOf(st.err).join() === seq(5), st.out + st.err);
  const cut = tm(cutUrl, "call", "stream", "n=8", "delay_ms=30", ...cutArgs);
  check(`${label}: stream cut mid-call resumes: progress 1..8 exactly once, one result`,
    cut.code === 0 && cut.out.trim() === "streamed 8" && progressOf(cut.err).join() === seq(8),
    `exit ${cut.code}: ${cut.out} ${cut.err}`);
}

try {
  const tmUrl = await startServer(tmServer, ["--listen", "127.0.0.1:0", "--store", "memory",
    "--log-level", "warn", "--retry-ms", "100"]);
  await suite("tidemark-server", tmUrl, tmUrl, ["close_after=3"]);
  const sdkUrl = await startServer(process.execPath, [sdkScript, "--port", "0"]);
  const sdkCutUrl = await startServer(process.execPath, [sdkScript, "--port", "0"],
    { SDK_SERVER_CUT_AFTER: "3", SDK_SERVER_RETRY_MS: "100" });
  await suite("sdk-server", sdkUrl, sdkCutUrl, []);
  const rd = tm(sdkUrl, "read", "test://hello");
  check("sdk-server: read resource", rd.code === 0 && /"text": "hello"/.test(rd.out), rd.out + rd.err);
  const pr = tm(sdkUrl, "prompt", "greet", "name=Ada");
  check("sdk-server: get prompt", pr.code === 0 && /Hello, Ada!/.test(pr.out), pr.out + pr.err);
} catch (e) {
  failed++;
  console.log("FAIL aborted: " + (e.stack ?? e));
} finally {
  for (const p of procs) p.kill("SIGTERM");
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
