// Crash test (issue "Durable event log"): clients stream through `stream` and
// `ledger_append` while tidemark-server is kill -9ed at seeded random moments
// and restarted on the same SQLite database. Asserts, over the whole run:
//   - every stream's events arrive exactly once, in order (dense seqs from 1),
//     and each stream ends in exactly one response;
//   - progress of each `stream` call is exactly 1..n, once each;
//   - no resume is ever answered cursor_ahead (or any other error);
//   - no event id is ever used for two different payloads;
//   - every ledger_append the client retried until it got a result exists
//     exactly once in the ledger.
//
//   node crash_test.mjs SERVER_BINARY
// Environment: CRASH_SEED (default 1), CRASH_KILLS (default 20),
// CRASH_CLIENTS (default 4), CRASH_DEADLINE_S (default 240),
// CRASH_DURABILITY (power|process, default power), CRASH_SERVER_ARGS (extra flags).
// The long variant: CRASH_KILLS=200 CRASH_CLIENTS=8 (see docs/design.md).
import { spawn } from "node:child_process";
import { reaped } from "./reap.mjs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeCrashClients, rng } from "./crash_clients.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: crash_test.mjs SERVER_BINARY");
  process.exit(2);
}
const SEED = Number(process.env.CRASH_SEED ?? 1);
const KILLS = Number(process.env.CRASH_KILLS ?? 20);
const CLIENTS = Number(process.env.CRASH_CLIENTS ?? 4);
const DEADLINE_MS = Number(process.env.CRASH_DEADLINE_S ?? 240) * 1000;
const DURABILITY = process.env.CRASH_DURABILITY ?? "power";
const EXTRA = (process.env.CRASH_SERVER_ARGS ?? "").split(" ").filter(Boolean);
const t0 = Date.now();

const killRand = rng(SEED);

const violations = [];
function violate(msg) {
  violations.push(msg);
  console.log("VIOLATION " + msg);
}

// ---- the server under test --------------------------------------------------
const dir = mkdtempSync(join(tmpdir(), "tidemark-crash-"));
const db = join(dir, "tidemark.db");
let server = null; // { proc, url, gen }
let gen = 0;
let upWaiters = [];

function startServer() {
  return new Promise((resolve, reject) => {
    const proc = reaped(spawn(bin, ["--listen", "127.0.0.1:0", "--store", "sqlite:" + db,
      "--durability", DURABILITY, "--log-level", "warn", "--keepalive-ms", "1000", ...EXTRA],
      { stdio: ["ignore", "pipe", "inherit"] }));
    let buf = "";
    const timer = setTimeout(() => reject(new Error("server did not start")), 15000);
    proc.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/^listening on (\S+)$/m);
      if (m && !server) {
        clearTimeout(timer);
        gen++;
        server = { proc, url: m[1], gen };
        const w = upWaiters;
        upWaiters = [];
        w.forEach((f) => f());
        resolve();
      }
    });
    proc.on("exit", (code, sig) => {
      if (server && server.proc === proc) server = null;
      if (!proc.killedByTest && code !== 0)
        violate(`server exited by itself (code ${code}, signal ${sig})`);
    });
  });
}

async function killServer() {
  const s = server;
  if (!s) return;
  s.proc.killedByTest = true;
  const exited = new Promise((r) => s.proc.once("exit", r));
  s.proc.kill("SIGKILL");
  await exited;
  server = null;
}

// The current server URL, waiting (bounded) while it restarts.
async function currentUrl() {
  while (!server) {
    if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
    await new Promise((r) => { upWaiters.push(r); setTimeout(r, 200); });
  }
  return server.url;
}

const { client, call, stats, confirmed, sleep, checkLedger } =
  makeCrashClients({ currentUrl, violate, violations, rng, seed: SEED, t0, deadlineMs: DEADLINE_MS });

// ---- run -------------------------------------------------------------------------------
let killsDone = 0;
const killerRand = killRand;
try {
  await startServer();
  let stopping = false;
  const clients = Array.from({ length: CLIENTS }, (_, k) => client(k, () => (stopping ? 0 : Infinity)));
  while (killsDone < KILLS && Date.now() - t0 < DEADLINE_MS) {
    await sleep(100 + Math.floor(killerRand() * 400));
    await killServer();
    killsDone++;
    await startServer();
  }
  stopping = true;
  const results = await Promise.all(clients);
  // Every confirmed ledger entry exists exactly once.
  const url = await currentUrl();
  await checkLedger(results[0].sid);
  const metrics = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const ahead = /tidemark_resumes_total\{outcome="ahead"\} (\d+)/.exec(metrics)?.[1];
  if (ahead !== "0") violate(`cursor_ahead counted: ${ahead}`);
  const calls = results.reduce((a, b) => a + b.calls, 0);
  console.log(`crash test: seed ${SEED}, ${killsDone} kills, ${CLIENTS} clients, ${calls} calls, ` +
    `${stats.eventsReceived} events, ${stats.resumes} resumes, ${stats.posts} POSTs (${stats.retriedPosts} retried, ` +
    `${stats.dedupJson} answered from records), ${confirmed.size} ledger entries, ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (killsDone < KILLS) violate(`only ${killsDone} of ${KILLS} kills before the deadline`);
  if (calls < CLIENTS * 2) violate(`too little work done: ${calls} calls`);
} catch (e) {
  violate("aborted: " + (e.stack ?? e));
} finally {
  if (server) { server.proc.killedByTest = true; server.proc.kill("SIGTERM"); }
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${violations.length === 0 ? 1 : 0} passed, ${violations.length === 0 ? 0 : 1} failed`);
process.exit(violations.length === 0 ? 0 : 1);
