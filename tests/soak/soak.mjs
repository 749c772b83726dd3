// Soak (issue "Prove it"): clients × calls of the non-idempotent
// `ledger_append` and long `stream` calls, through the fault-injecting proxy
// (cuts, resets, stalls, cuts at and inside SSE events), while the server is
// kill -9ed, killed by its own crash points, and clients are killed (SIGKILL
// and client crash points) and restarted on their state files.
//
// Verdict:
//   - atomic clients: every ledger_append they issued exists exactly once in
//     the ledger (no loss, no duplicate); every stream they received is
//     complete, in order, each event applied exactly once;
//   - naive clients (cursor_after_dispatch, cursor_before_dispatch): every
//     violation their mode causes is detected and typed (duplicate_effect,
//     dispatch_log_inconsistent), never silent: no event applied twice, and
//     no event missing without a typed report.
//
//   node soak.mjs --proxy BIN --server BIN --client BIN [--seconds S] [--seed N]
//                 [--clients K] [--kill-every-ms MS]
// make soak runs the long variant; CTest `soak_short` the short one.
import { spawn } from "node:child_process";
import { reaped } from "../integration/reap.mjs";
import { freePort } from "../integration/ports.mjs";
import { mkdtempSync, rmSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { rng } from "../integration/crash_clients.mjs";

const arg = (name, def) => {
  const i = process.argv.indexOf("--" + name);
  return i > 0 ? process.argv[i + 1] : def;
};
const PROXY = arg("proxy"), SERVER = arg("server"), CLIENT = arg("client");
if (!PROXY || !SERVER || !CLIENT) {
  console.error("usage: soak.mjs --proxy BIN --server BIN --client BIN [--seconds S] [--seed N] [--clients K]");
  process.exit(2);
}
const SECONDS = Number(arg("seconds", 45));
const SEED = Number(arg("seed", 1));
const CLIENTS = Number(arg("clients", 4));
const KILL_EVERY = Number(arg("kill-every-ms", 2500));
const t0 = Date.now();
const HARD_DEADLINE = t0 + (SECONDS + 120) * 1000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const dir = mkdtempSync(join(tmpdir(), "tidemark-soak-"));
const violations = [];
const violate = (m) => { violations.push(m); console.log("VIOLATION " + m); };
const stats = { serverKills: 0, serverCrashPoints: 0, clientKills: 0, clientCrashPoints: 0,
  resumes: 0, calls: 0, typed: {}, proxyFaults: "" };


function startProc(bin, args, env = {}, onExit) {
  return new Promise((resolve, reject) => {
    const p = reaped(spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }));
    let out = "", err = "";
    const t = setTimeout(() => reject(new Error(`${bin} did not start: ${err}`)), 15000);
    p.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^listening on (\S+)$/m);
      if (m) { clearTimeout(t); resolve({ p, url: m[1] }); }
    });
    p.stderr.on("data", (d) => { err += d; if (err.length > 100000) err = err.slice(-50000); });
    p.on("exit", (code, sig) => { p.stderrText = err; clearTimeout(t); onExit?.(code, sig, p); reject(new Error(`${bin} exited (${code ?? sig}) before it listened`)); });
  });
}

// ---- server (restarted on the same port and database) ----------------------------
const port = await freePort();
const db = join(dir, "server.db");
const srand = rng(SEED);
let server = null;
let serverWanted = true;
const serverPoints = ["append_before_commit", "commit_before_emit", "effect_before_commit", "started_before_run"];

async function startServer() {
  for (;;) {
    if (!serverWanted || Date.now() > HARD_DEADLINE) return;
    const env = {};
    if (srand() < 0.35) {
      env.TIDEMARK_SERVER_CRASH = `${serverPoints[Math.floor(srand() * serverPoints.length)]}:${1 + Math.floor(srand() * 40)}`;
    }
    try {
      const s = await startProc(SERVER, ["--listen", `127.0.0.1:${port}`, "--store", "sqlite:" + db,
        "--log-level", "error", "--retry-ms", "50", "--keepalive-ms", "500"], env, (code, sig, proc) => {
        const current = server && server.p === proc;
        if (current) server = null;
        if (sig === "SIGKILL" && !proc.killedByTest) stats.serverCrashPoints++;
        /* restart a server that died by itself (crash point) once it had been up */
        if (current && serverWanted && !proc.killedByTest) setTimeout(() => startServer().catch(() => {}), 10);
      });
      server = s;
      return;
    } catch (e) {
      if (!serverWanted) return;
      await sleep(50); // the port may still be held by the dying process
    }
  }
}
// Stop the current server by its PID and wait until it has exited.
async function stopServer(sig) {
  const s = server;
  if (!s) return;
  s.p.killedByTest = true;
  const gone = new Promise((r) => s.p.once("exit", r));
  s.p.kill(sig);
  await gone;
}
await startServer();
const proxyLog = join(dir, "proxy.log");
const proxy = await startProc(PROXY, ["--listen", "127.0.0.1:0", "--target", `127.0.0.1:${port}`,
  "--seed", String(SEED), "--mode", "mixed", "--rate", "0.25", "--stall-ms", "300", "--log", proxyLog]);
const URL = proxy.url.replace(/\/?$/, "") + "/mcp";

// ---- clients ------------------------------------------------------------------------
function runClient(args, env, killAfterMs) {
  return new Promise((resolve) => {
    const p = reaped(spawn(CLIENT, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }));
    let out = "", err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    let timer = null;
    if (killAfterMs) timer = setTimeout(() => p.kill("SIGKILL"), killAfterMs);
    // "close", not "exit": exit can come before the last of stdout (the typed reason).
    p.on("close", (code, sig) => { clearTimeout(timer); resolve({ code, sig, out, err }); });
  });
}

const crashPointOf = { atomic: "atomic_before_commit",
  cursor_after_dispatch: "after_dispatch_before_cursor",
  cursor_before_dispatch: "after_cursor_before_dispatch" };
const issuedLedger = new Map(); // entry -> client
const clientsOut = [];

async function client(k, mode) {
  const rand = rng(SEED * 977 + k);
  let gen = 0;
  let state = join(dir, `client${k}-${gen}.db`);
  // Legacy era: the soak proves the legacy session's exactly-once (cursors,
  // dispatch log, Last-Event-ID); a 2026-07-28 stream is not resumable.
  const base = () => ["--protocol", "legacy", "--state", state, "--persist", mode, "--record-effects", "--quiet",
                      "--timeout", "30000"];
  const info = { k, mode, calls: 0, ledger: [], detected: [], states: [state] };
  clientsOut.push(info);
  let n = 0;
  while (Date.now() - t0 < SECONDS * 1000) {
    n++;
    const isLedger = rand() < 0.5;
    const entry = `c${k}-g${gen}-${n}`;
    // The ledger call carries an idempotency key: re-issuing it after a kill
    // (under a new request id) is answered from the server's record.
    const opts = isLedger ? ["--idempotency-key", entry] : [];
    const args = isLedger ? ["call", "ledger_append", `entry=${entry}`]
                          : ["call", "stream", `n=${30 + Math.floor(rand() * 120)}`, "delay_ms=2"];
    const env = {};
    let killAfter = 0;
    const r0 = rand();
    if (r0 < 0.12) { env.TIDEMARK_CLIENT_CRASH = `${crashPointOf[mode]}:${1 + Math.floor(rand() * 20)}`; }
    else if (r0 < 0.2) { killAfter = 20 + Math.floor(rand() * 300); }
    if (isLedger) { issuedLedger.set(entry, k); info.ledger.push(entry); }
    info.calls++;
    stats.calls++;
    let r = await runClient([...base(), ...opts, URL, ...args], env, killAfter);
    const hist = [];
    info.hist ??= {};
    if (isLedger) info.hist[entry] = hist;
    hist.push(`run:${r.code}/${r.sig ?? ""}/${env.TIDEMARK_CLIENT_CRASH ?? ""}/${killAfter}`);
    if (r.sig === "SIGKILL") {
      if (env.TIDEMARK_CLIENT_CRASH && /crash point/.test(r.err)) stats.clientCrashPoints++;
      else stats.clientKills++;
    }
    // Drive what is outstanding to its end, restarting as often as needed.
    // A client killed before it recorded the request never issued it: the
    // application then issues it again ("retried until it got a result").
    let tries = 0;
    // Killed, or failed in transport (possibly before it recorded the call:
    // e.g. it could not connect): the outcome is unknown to the application.
    let killed = !!r.sig || r.code === 3;
    while ((r.sig || r.code === 3) && tries++ < 50 && Date.now() < HARD_DEADLINE) {
      stats.resumes++;
      killed ||= !!r.sig;
      r = await runClient([...base(), URL, "resume"], {}, 0);
      hist.push(`resume:${r.code}/${r.sig ?? ""}:${r.out.replace(/\s+/g, " ").slice(0, 160)}`);
    }
    // After a kill or a transport failure the application cannot know
    // whether its ledger call was ever sent: it issues it again with the same
    // idempotency key until it gets a result.
    while (isLedger && killed && r.code !== 4 && tries++ < 50 && Date.now() < HARD_DEADLINE) {
      stats.reissued = (stats.reissued ?? 0) + 1;
      r = await runClient([...base(), ...opts, URL, ...args], {}, 0);
      if (r.code === 0) break;
      await sleep(50);
    }
    if (r.code === 1) /* both tools are atomic or idempotent: no error is ever due */
      violate(`client ${k}: ${args.slice(0, 2).join(" ")} ${entry} answered with an error: ${r.out.slice(0, 300)}`);
    if (r.code === 4) {
      const reason = (/"reason":\s*"([a-z_]+)"/.exec(r.out) ?? [])[1] ?? "?";
      stats.typed[reason] = (stats.typed[reason] ?? 0) + 1;
      info.detected.push(reason);
      if (mode === "atomic") violate(`atomic client ${k}: typed failure ${reason}: ${r.out.slice(0, 300)}`);
      // The naive client's state is poisoned by design: start a new one.
      gen++;
      state = join(dir, `client${k}-${gen}.db`);
      info.states.push(state);
    } else if (r.code !== 0 && r.code !== 1) {
      violate(`client ${k} (${mode}): ${args.join(" ")} ended with exit ${r.code} ${r.sig ?? ""}: ${r.out.slice(0, 200)} ${r.err.slice(-300)}`);
    }
  }
  return info;
}

// ---- server killer --------------------------------------------------------------------
const killer = (async () => {
  const krand = rng(SEED + 99);
  while (Date.now() - t0 < SECONDS * 1000) {
    await sleep(KILL_EVERY / 2 + Math.floor(krand() * KILL_EVERY));
    if (server) {
      await stopServer("SIGKILL");
      stats.serverKills++;
      await startServer();
    }
  }
})();

const modes = ["atomic", "atomic", "cursor_after_dispatch", "cursor_before_dispatch"];
const results = await Promise.all(Array.from({ length: CLIENTS }, (_, k) => client(k, modes[k % modes.length])));
await killer;

// ---- verdict ----------------------------------------------------------------------------
// The verdict reads the truth: from a server with no crash point armed,
// directly, not through the fault-injecting proxy (both could fail the read).
while (!server && Date.now() < HARD_DEADLINE) await sleep(50);
serverWanted = false;
await stopServer("SIGTERM");
server = await startProc(SERVER, ["--listen", "127.0.0.1:0", "--store", "sqlite:" + db, "--log-level", "error"]);
const ledgerRes = await runClient(["--json", server.url, "call", "ledger_read"], {}, 0); // url ends in /mcp
let rows = [];
try { rows = JSON.parse(ledgerRes.out).structuredContent.entries; } catch {
  violate(`ledger_read failed (exit ${ledgerRes.code} ${ledgerRes.sig ?? ""}): ${ledgerRes.out}${ledgerRes.err}`);
}
const count = new Map();
for (const r of rows) count.set(r.entry, (count.get(r.entry) ?? 0) + 1);
let ledgerOk = 0, ledgerDup = 0, ledgerLost = 0;
for (const info of results) {
  for (const e of info.ledger) {
    const c = count.get(e) ?? 0;
    if (c === 1) ledgerOk++;
    else if (c > 1) { ledgerDup++; violate(`ledger entry ${e} exists ${c} times`); }
    else if (info.mode === "atomic") { ledgerLost++; violate(`ledger entry ${e} (atomic client ${info.k}) lost: ${(info.hist?.[e] ?? []).join(" | ")}`); }
  }
}
// Client-side effects: per stream dense and exactly once (atomic); naive
// modes may miss events only where a typed report was made.
let streamsChecked = 0, eventsApplied = 0;
for (const info of results) {
  for (const st of info.states) {
    if (!existsSync(st)) continue;
    const r = await runClient(["--state", st, URL, "effects"], {}, 0);
    let eff = [];
    try { eff = JSON.parse(r.out); } catch { violate(`effects of ${st} unreadable`); continue; }
    const byStream = new Map();
    for (const e of eff) {
      if (e.n !== 1) violate(`client ${info.k} (${info.mode}): event ${e.event_id} applied ${e.n} times`);
      if (!byStream.has(e.stream)) byStream.set(e.stream, []);
      byStream.get(e.stream).push(e.seq);
      eventsApplied += e.n;
    }
    for (const [name, seqs] of byStream) {
      streamsChecked++;
      seqs.sort((a, b) => a - b);
      const holes = seqs.some((s, i) => i > 0 && s !== seqs[i - 1] + 1) || seqs[0] !== 2;
      if (holes && info.mode === "atomic")
        violate(`client ${info.k}: stream ${name} has holes: ${seqs.slice(0, 12).join(",")}`);
      if (holes && info.mode !== "atomic" && info.detected.length === 0)
        violate(`client ${info.k} (${info.mode}): stream ${name} has holes but nothing was reported`);
    }
  }
}
serverWanted = false;
await stopServer("SIGTERM");
await new Promise((r) => { if (proxy.p.exitCode !== null) r(); else { proxy.p.once("exit", r); proxy.p.kill("SIGTERM"); } });
let faultsInjected = 0;
try {
  const lines = readFileSync(proxyLog, "utf8").split("\n");
  const kinds = {};
  for (const l of lines) { const m = /mode=(\S+)/.exec(l); if (m && /fault|cut|reset|stall/.test(l)) kinds[m[1]] = (kinds[m[1]] ?? 0) + 1; }
  faultsInjected = Object.entries(kinds).filter(([k]) => k !== "none").reduce((a, [, v]) => a + v, 0);
  stats.proxyFaults = Object.entries(kinds).map(([k, v]) => `${k} ${v}`).join(", ") || "(see proxy log)";
} catch { stats.proxyFaults = "(no proxy log)"; }
// A run that did too little proves nothing: it fails.
if (stats.calls < CLIENTS * 2) violate(`too little work: ${stats.calls} calls`);
if (stats.serverKills === 0) violate("no server was killed");
if (faultsInjected === 0) violate("the proxy injected no fault");
if (streamsChecked === 0) violate("no client stream was checked");

const row = (a, b) => console.log(String(a).padEnd(44) + b);
console.log(`\nsoak: seed ${SEED}, ${SECONDS} s, ${CLIENTS} clients (${results.map((r) => r.mode).join(", ")})`);
row("faults injected", "");
row("  proxy (cut/reset/stall/event-boundary/mid-event)", stats.proxyFaults);
row("  server kill -9", stats.serverKills);
row("  server crash points hit", stats.serverCrashPoints);
row("  client SIGKILL", stats.clientKills);
row("  client crash points hit", stats.clientCrashPoints);
row("work", "");
row("  calls", stats.calls);
row("  client restarts (resume)", stats.resumes);
row("  ledger calls re-issued (same idempotency key)", stats.reissued ?? 0);
row("  ledger entries issued / exactly once", `${results.reduce((a, r) => a + r.ledger.length, 0)} / ${ledgerOk}`);
row("  ledger duplicates / lost (atomic)", `${ledgerDup} / ${ledgerLost}`);
row("  streams checked, effects applied", `${streamsChecked}, ${eventsApplied}`);
row("naive-mode violations detected (typed)", JSON.stringify(stats.typed));
row("violations", violations.length);
rmSync(dir, { recursive: true, force: true });
console.log(`${violations.length ? 0 : 1} passed, ${violations.length ? 1 : 0} failed`);
process.exit(violations.length ? 1 : 0);
