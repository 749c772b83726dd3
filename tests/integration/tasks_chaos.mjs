// tasks_chaos.mjs - crash test of durable tasks (the io.modelcontextprotocol/tasks
// extension, protocol 2026-07-28; CTest tasks_chaos_sqlite, tasks_chaos_redis,
// tasks_chaos_pg).
//
// Concurrent tidemark-client processes, each with its own state file, make task
// calls (call --task) of ledger_append (a unique entry per call), stream and
// external_call, each under a unique idempotency key, while server nodes are
// kill -9ed and restarted at seeded random moments:
//   --mode sqlite  one node on a SQLite file, killed and restarted on the same
//                  file and port
//   --mode redis   three nodes on one Redis behind HAProxy (multinode_env.mjs),
//                  random nodes killed and restarted (at least one stays up)
//   --mode pg      the same on a PostgreSQL cluster (store_env.mjs)
// Some server starts are armed with TIDEMARK_SERVER_CRASH=
// task_created_before_answer:N (the node kills itself after it committed a new
// task but before it answered CreateTaskResult; the client's re-issue under the
// same key must find that task). Some client processes are armed with a client
// crash point (task_before_record, task_recorded, task_polled,
// task_before_commit) or SIGKILLed at a random moment, then `resume`d until
// resume exits 0 and the state's outstanding list is empty.
// Checked at the end (each printed; exit 1 on any failure):
//   - every call reached a terminal outcome (ledger_append and stream completed;
//     external_call completed or failed with outcome_unknown), nothing is left
//     outstanding in any state file;
//   - every ledger_append entry is exactly one ledger row (ledger_read through a
//     live node), written by the task the client was told about, and no row
//     exists that no call asked for;
//   - each state's effects table holds each task:<id> exactly once (n == 1),
//     one row per finished task call;
//   - every task id seen for a key (state file, result, effects, ledger row) is
//     the same one, and there are as many distinct task ids as keys;
//   - the server crash point task_created_before_answer was reached, and client
//     processes were killed mid-poll (task id recorded, task unfinished) and
//     resumed: the run cannot pass vacuously.
//
// CI (make test): --seconds 35 per mode. Long variant, e.g.:
//   node tests/integration/tasks_chaos.mjs --mode redis \
//     --server build/bin/tidemark-server-crashpoints \
//     --client build/bin/tidemark-client-crashpoints --seconds 600 --clients 6
// Options: --seed N (default: $TASKS_CHAOS_SEED, else from the clock; printed),
// --seconds S (35), --clients K (4), --max-down N (nodes the chaos keeps down at
// once, 1), --verbose (one line per call). Exit 77 (skip) in redis or pg mode
// when the store's server or haproxy is missing. TASKS_CHAOS_KEEP=1 keeps the temp dir;
// TASKS_CHAOS_LOG sets the nodes' --log-level (info; printed on failure).
// The schedule is seeded, the timing is not: a seed reruns the same workload
// and kill plan, not the same interleaving.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker } from "./mcp_http.mjs";
import { modernCall } from "./modern_http.mjs";
import { freePort, stopProc, sleep } from "./multinode_env.mjs";
import { StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";
import { rng } from "./crash_clients.mjs";
import { reaped } from "./reap.mjs";

const arg = (name, def) => {
  const i = process.argv.indexOf("--" + name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
};
const MODE = arg("mode"), SERVER = arg("server"), CLIENT = arg("client");
if (!["sqlite", "redis", "pg"].includes(MODE) || !SERVER || !CLIENT) {
  console.error("usage: tasks_chaos.mjs --mode sqlite|redis|pg --server BIN --client BIN " +
    "[--seconds S] [--seed N] [--clients K] [--max-down N] [--verbose]");
  process.exit(2);
}
if (MODE !== "sqlite") skipUnlessStoreTools({ store: MODE });
const SEED = Number(arg("seed", process.env.TASKS_CHAOS_SEED ?? (Date.now() % 1000000)));
const SECONDS = Number(arg("seconds", 35));
const CLIENTS = Number(arg("clients", 4));
const VERBOSE = process.argv.includes("--verbose");
// Nodes the chaos keeps down at once (a node that kills itself at its crash
// point comes on top). Redis: 1 of 3, so HAProxy always has a node to send to;
// --max-down 3 also lets every node be down (HAProxy then answers 503).
const MAX_DOWN = Number(arg("max-down", 1));
const NODES = MODE === "sqlite" ? 1 : 3;
const DRAIN_MS = 60000;           // after the chaos: every call must end within this
const CALL_TIMEOUT_MS = 15000;    // the client's --timeout-ms (exit 3 after it)
const WATCHDOG_MS = CALL_TIMEOUT_MS + 20000; // a client process running longer is a hang
const CLIENT_POINTS = ["task_before_record", "task_recorded", "task_polled", "task_before_commit"];
const SERVER_POINT = "task_created_before_answer";

console.log(`tasks_chaos: mode ${MODE}, seed ${SEED}, ${SECONDS} s of chaos, ${CLIENTS} clients ` +
  `(rerun: --seed ${SEED})`);
const t = checker();
const t0 = Date.now();
const elapsed = () => ((Date.now() - t0) / 1000).toFixed(1) + "s";
const dir = mkdtempSync(join(tmpdir(), "tidemark-tasks-chaos-"));
const stats = { serverKills: 0, serverStarts: 0, armedStarts: 0, crashPointReached: 0,
  clientCrashPoints: Object.fromEntries(CLIENT_POINTS.map((p) => [p, 0])), clientSigkills: 0,
  killedMidPoll: 0, killedBeforeTaskId: 0, resumes: 0, resumesFailed: 0, reissues: 0, calls: 0, clientExit3: 0 };
const problems = [];            // violations seen during the run (reported as checks at the end)
const problem = (m) => { problems.push(m); console.log(`[${elapsed()}] PROBLEM ${m}`); };

// ---- nodes ---------------------------------------------------------------------------
// nodes[i] = { proc, armed } while up, null while down; url: where clients go.
const srand = rng(SEED);
const serverLogs = [];          // every node start's stderr, for the end and for diagnosis
let cluster = null, sqlitePort = 0, url = "";
const nodes = new Array(NODES).fill(null);
let stopping = false;

function onNodeExit(i, proc) {
  if (nodes[i]?.proc === proc) nodes[i] = null;
  if (proc.listening && !proc.killedByTest && !stopping) {
    const self = /crash point task_created_before_answer reached/.test(proc.log.text);
    console.log(`[${elapsed()}] node ${i} exited by itself (${proc.exitCode ?? proc.signalCode})` +
      (self ? " at crash point " + SERVER_POINT : ""));
    if (!self) problem(`node ${i} exited without being killed and not at the crash point: ` +
      proc.log.text.slice(-2000));
  }
}

function spawnNode(i, armed) {
  const args = MODE === "sqlite"
    ? ["--listen", `127.0.0.1:${sqlitePort}`, "--store", "sqlite:" + join(dir, "server.db")]
    : ["--listen", `127.0.0.1:${cluster.nodePorts[i]}`, "--store", cluster.storeUri,
       "--keepalive-ms", "1000"];
  const env = { ...process.env };
  delete env.TIDEMARK_SERVER_CRASH;
  if (armed) env.TIDEMARK_SERVER_CRASH = `${SERVER_POINT}:${armed}`;
  const proc = reaped(spawn(SERVER, [...args, "--log-level", process.env.TASKS_CHAOS_LOG ?? "info"],
    { stdio: ["ignore", "pipe", "pipe"], env }));
  const log = { node: i, armed, text: "" };
  serverLogs.push(log);
  proc.log = log;
  proc.stderr.on("data", (d) => {
    log.text += d;
    if (log.text.length > 200000) log.text = log.text.slice(-100000);
    if (String(d).includes(`crash point ${SERVER_POINT} reached`)) stats.crashPointReached++;
  });
  let out = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`node ${i} did not start: ${log.text}`)), 15000);
    proc.stdout.on("data", (d) => {
      out += d;
      if (/^listening on \S+$/m.test(out) && !proc.listening) {
        proc.listening = true;
        clearTimeout(timer);
        resolve(proc);
      }
    });
    // "close", not "exit": its stderr (the crash point's line) is read by then.
    proc.once("close", () => {
      clearTimeout(timer);
      onNodeExit(i, proc);
      reject(new Error(`node ${i} exited (${proc.exitCode ?? proc.signalCode}) before it listened: ${log.text}`));
    });
  });
}

// One start at a time per node; a node already up is left as it is.
const starting = new Array(NODES).fill(null);
function startNode(i, armed = 0) {
  if (nodes[i]) return Promise.resolve();
  if (!starting[i]) starting[i] = startNodeNow(i, armed).finally(() => { starting[i] = null; });
  return starting[i];
}

async function startNodeNow(i, armed) {
  for (let attempt = 0; ; attempt++) {
    try {
      const proc = await spawnNode(i, armed);
      nodes[i] = { proc, armed };
      stats.serverStarts++;
      if (armed) stats.armedStarts++;
      return;
    } catch (e) {
      // The port may still be held by the dead process for a moment: retry, bounded.
      if (attempt >= 20) throw e;
      await sleep(100);
    }
  }
}

async function killNode(i) {
  const nd = nodes[i];
  if (!nd) return;
  nd.proc.killedByTest = true;
  nodes[i] = null;
  await stopProc(nd.proc, "SIGKILL");
  stats.serverKills++;
}

// A restart is armed now and then: the N-th task created on it kills it
// between the commit and CreateTaskResult.
const armChoice = () => (srand() < 0.35 ? 1 + Math.floor(srand() * 3) : 0);

async function chaos(until) {
  while (Date.now() < until) {
    await sleep(700 + srand() * 2300);
    if (Date.now() >= until) break;
    const up = nodes.map((n, i) => (n ? i : -1)).filter((i) => i >= 0);
    if (up.length === 0 || NODES - up.length >= MAX_DOWN) continue;
    const i = up[Math.floor(srand() * up.length)];
    const down = MODE === "sqlite" ? srand() * 1500 : 300 + srand() * 3000;
    const armed = armChoice();
    console.log(`[${elapsed()}] kill -9 node ${i}; restart in ${Math.round(down)} ms` +
      (armed ? `, armed ${SERVER_POINT}:${armed}` : ""));
    await killNode(i);
    setTimeout(() => { if (!stopping && !nodes[i]) startNode(i, armed).catch((e) => problem(String(e))); },
      down);
  }
}

// A node that died at its crash point is restarted (the chaos loop only
// restarts the nodes it killed itself).
async function reviver() {
  while (!stopping) {
    await sleep(100);
    for (let i = 0; i < NODES; i++) {
      const last = serverLogs.filter((l) => l.node === i).at(-1);
      if (!nodes[i] && last && /crash point task_created_before_answer reached/.test(last.text) &&
          !last.revived) {
        last.revived = true;
        await sleep(srand() * 800);
        if (!stopping && !nodes[i]) await startNode(i, armChoice()).catch((e) => problem(String(e)));
      }
    }
  }
}

// ---- clients --------------------------------------------------------------------------
function run(args, { env = {}, killAfterMs = 0, watchdog = WATCHDOG_MS } = {}) {
  return new Promise((resolve) => {
    const p = reaped(spawn(CLIENT, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }));
    let out = "", err = "", hung = false;
    const started = Date.now();
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => { err += d; });
    const kt = killAfterMs ? setTimeout(() => { p.sigkilled = true; p.kill("SIGKILL"); }, killAfterMs) : null;
    const wt = setTimeout(() => { hung = true; p.kill("SIGKILL"); }, watchdog);
    p.once("close", (code, signal) => {
      clearTimeout(kt); clearTimeout(wt);
      resolve({ code, signal, out, err, hung, sigkilled: !!p.sigkilled && !hung, ms: Date.now() - started });
    });
  });
}

const parse = (s) => { try { return JSON.parse(s); } catch { return undefined; } };
const base = (state) => ["--protocol", "modern", "--state", state, "--record-effects", "--json",
  "--timeout-ms", String(CALL_TIMEOUT_MS)];

// What the last failed attempt said, for the error.
const said = (r) => `exit ${r.code ?? r.signal}${r.hung ? " (hung)" : ""}: ${(r.err || r.out).trim().slice(-400)}`;
async function readState(state) {
  let r;
  for (let a = 0; a < 5; a++) {
    r = await run(["--state", state, url, "state"], { watchdog: 10000 });
    const j = parse(r.out);
    if (r.code === 0 && j) return j;
    await sleep(50);
  }
  throw new Error(`cannot read state ${state}: ${said(r)}`);
}
// A client process killed before it opened its state leaves no effects
// table: --record-effects makes it (empty), as the calls' own processes do.
async function readEffects(state) {
  let r;
  for (let a = 0; a < 5; a++) {
    r = await run(["--state", state, "--record-effects", url, "effects"], { watchdog: 10000 });
    const j = parse(r.out);
    if (r.code === 0 && Array.isArray(j)) return j;
    await sleep(50);
  }
  throw new Error(`cannot read effects of ${state}: ${said(r)}`);
}

// The task id a result names: ledger_append's structuredContent.key and
// external_call's idempotencyKey are "<taskId>/t".
const tidOfResult = (res) => {
  const k = res?.structuredContent?.key ?? res?.structuredContent?.idempotencyKey;
  return typeof k === "string" && k.endsWith("/t") ? k.slice(0, -2) : null;
};

const calls = [];               // every call: {client, key, tool, entry, args, outcome, tids:Set, ...}
let streamIsTask = null;

function describe(c) {
  const o = c.outcome && (c.outcome.status + (c.outcome.reason ? " " + c.outcome.reason : "") +
    (c.outcome.result ? " " + JSON.stringify(c.outcome.result.content?.[0]?.text) : "") +
    (c.outcome.unparsed !== undefined ? ` stdout not JSON: ${JSON.stringify(c.outcome.unparsed)} ` +
      `stderr: ${JSON.stringify(c.outcome.stderr)}` : ""));
  return `${c.key} (${c.tool}${c.entry ? " " + c.entry : ""}): outcome ${o}, ` +
    `task ids ${JSON.stringify([...c.tids])}, history ${c.history.join(" | ")}`;
}

function killMode(r, allowKills) {
  if (!allowKills) return {};
  const x = r();
  if (x < 0.18) {
    const point = CLIENT_POINTS[Math.floor(r() * CLIENT_POINTS.length)];
    const n = point === "task_polled" ? 1 + Math.floor(r() * 3) : 1;
    return { point, env: { TIDEMARK_CLIENT_CRASH: `${point}:${n}` } };
  }
  if (x < 0.38) return { killAfterMs: 80 + Math.floor(r() * 1800) };
  return {};
}

// Note what a finished client process did to the call: kills counted,
// the state's record of it taken (its task id, if recorded).
async function afterProcess(c, state, r, what, mode) {
  const killed = r.signal === "SIGKILL" && !r.hung;
  if (r.hung) problem(`${c.key}: ${what} still running after ${WATCHDOG_MS} ms (killed)`);
  const reached = /crash point (\S+) reached/.exec(r.err)?.[1];
  if (killed) {
    if (reached) stats.clientCrashPoints[reached] = (stats.clientCrashPoints[reached] ?? 0) + 1;
    else if (r.sigkilled) stats.clientSigkills++;
  }
  const st = await readState(state);
  const o = st.outstanding.find((x) => x.idem_key === c.key);
  if (o?.task_id) c.tids.add(o.task_id);
  for (const x of st.outstanding)
    if (x.idem_key !== c.key) problem(`${state}: outstanding call of another key ${JSON.stringify(x)}`);
  if (killed) {
    c.killed = true;
    if (o?.task_id) { stats.killedMidPoll++; c.killedMidPoll = true; }
    else if (o) stats.killedBeforeTaskId++;
  }
  c.history.push(`${elapsed()}+${r.ms}ms ${what}:${r.code ?? r.signal}${reached ? "@" + reached : mode.killAfterMs ? "@sigkill" : ""}` +
    `${o ? (o.task_id ? "/out:" + o.task_id.slice(0, 8) : "/out:-") : "/done"}` +
    (r.code !== 0 && !killed ? ` [${(r.err.trim().split("\n").at(-1) ?? "").slice(0, 300)}]` : ""));
  return { killed, outstanding: st.outstanding };
}

function outcomeOf(r) {
  if (r.code === 0) {
    const result = parse(r.out);
    return result === undefined ? { status: "completed", unparsed: r.out.slice(0, 2000), stderr: r.err.slice(-2000) }
      : { status: "completed", result };
  }
  const e = parse(r.out);
  if (r.code === 1 && e) return { status: "failed", reason: e?.data?.reason, code: e?.code, message: e?.message };
  return null;
}

async function finish(c, state, r, drainEnd, chaosEnd) {
  // Resume until the state has nothing outstanding.
  for (let attempt = 0; ; attempt++) {
    const st = await readState(state);
    if (st.outstanding.length === 0) break;
    if (Date.now() > drainEnd) { problem(`${c.key}: still outstanding at the drain deadline: ` +
      JSON.stringify(st.outstanding)); return; }
    const mode = killMode(r, Date.now() < chaosEnd && attempt < 6);
    stats.resumes++;
    const rr = await run([...base(state), url, "resume"], { env: mode.env, killAfterMs: mode.killAfterMs });
    const { killed } = await afterProcess(c, state, rr, "resume", mode);
    const arr = parse(rr.out);
    if (Array.isArray(arr)) {
      for (const x of arr) {
        if ("result" in x) c.outcome = { status: "completed", result: x.result };
        else if ("error" in x) c.outcome = { status: "failed", reason: x.error?.data?.reason,
          code: x.error?.code, message: x.error?.message };
        const tid = tidOfResult(x.result);
        if (tid) c.tids.add(tid);
      }
    }
    if (!killed && rr.code !== 0) {
      stats.resumesFailed++;
      await sleep(150 + r() * 500); // a node may be down: retry (bounded by the drain deadline)
    }
  }
}

async function client(k, chaosEnd, drainEnd) {
  const r = rng(SEED * 7919 + k + 1);
  const state = join(dir, `client${k}.db`);
  let effects = [];
  for (let i = 0; Date.now() < chaosEnd; i++) {
    const x = r();
    const tool = x < 0.5 ? "ledger_append" : x < 0.75 ? "external_call" : "stream";
    const key = `s${SEED}-c${k}-${i}`;
    const c = { client: k, state, key, tool, entry: null, outcome: null, tids: new Set(), history: [],
      killedMidPoll: false };
    let argv;
    if (tool === "ledger_append") {
      c.entry = "E-" + key;
      argv = [`entry=${c.entry}`, `delay_ms=${Math.floor(r() * 1200)}`];
    } else if (tool === "external_call") {
      argv = [`delay_ms=${100 + Math.floor(r() * 1400)}`];
    } else {
      c.n = 2 + Math.floor(r() * 5);
      argv = [`n=${c.n}`, `delay_ms=${50 + Math.floor(r() * 200)}`];
    }
    calls.push(c);
    stats.calls++;
    // A call process that left nothing behind (killed before its call was
    // recorded, or a transport failure before anything was sent: exit 3 and
    // nothing outstanding) is issued again under the same key, as an
    // application would.
    for (let attempt = 0; ; attempt++) {
      // Each client's first call process, until some client was killed
      // mid-poll, crashes right after recording its task id: the check that
      // clients were killed mid-poll and resumed then holds on every seed (a
      // slow ASan run's random kills all landed before the task id once).
      const mode = i === 0 && stats.killedMidPoll === 0 && Date.now() < chaosEnd
        ? { point: "task_recorded", env: { TIDEMARK_CLIENT_CRASH: "task_recorded:1" } }
        : killMode(r, Date.now() < chaosEnd);
      if (attempt) stats.reissues++;
      const cr = await run([...base(state), "--idempotency-key", key, url, "call", "--task", tool, ...argv],
        { env: mode.env, killAfterMs: mode.killAfterMs });
      if (cr.code === 3) stats.clientExit3++;
      await afterProcess(c, state, cr, "call", mode);
      const o = outcomeOf(cr);
      if (o) { c.outcome = o; const tid = tidOfResult(o.result); if (tid) c.tids.add(tid); }
      await finish(c, state, r, drainEnd, chaosEnd);
      // The effects this call added (one task row for a task call).
      const now = await readEffects(state);
      const before = new Set(effects.map((e) => e.event_id));
      c.newEffects = (c.newEffects ?? []).concat(now.filter((e) => !before.has(e.event_id)));
      for (const e of c.newEffects) if (e.event_id.startsWith("task:")) c.tids.add(e.event_id.slice(5));
      effects = now;
      if (c.outcome || c.newEffects.length) break;
      if (Date.now() > drainEnd) { problem(`${c.key}: no outcome by the drain deadline: ${describe(c)}`); break; }
      await sleep(100 + r() * 400);
    }
    if (VERBOSE) console.log(`[${elapsed()}] ${describe(c)}`);
  }
}

// ---- the end ---------------------------------------------------------------------------
async function ledgerRows() {
  const end = Date.now() + 30000;
  for (;;) {
    try {
      const r = await modernCall(url, "read-" + Date.now(), "ledger_read", {});
      const sc = r.response?.result?.structuredContent;
      if (sc && Array.isArray(sc.entries)) return sc.entries;
    } catch { /* a node may still be starting */ }
    if (Date.now() > end) throw new Error("ledger_read did not answer");
    await sleep(200);
  }
}

async function probeStream() {
  const state = join(dir, "probe.db");
  const r = await run([...base(state), "--idempotency-key", `s${SEED}-probe`, url, "call", "--task",
    "stream", "n=1"]);
  const eff = await readEffects(state);
  streamIsTask = eff.length === 1;
  if (r.code !== 0) throw new Error("probe stream call failed: " + r.out + r.err);
  console.log(`stream with --task: ${streamIsTask ? "runs as a task" :
    "answered as a plain call (the server's stream tool takes no task): its calls are checked as plain calls"}`);
}

async function main() {
  if (MODE === "sqlite") {
    sqlitePort = await freePort();
    url = `http://127.0.0.1:${sqlitePort}/mcp`;
    await startNode(0, 0);
  } else {
    cluster = new StoreCluster({ bin: SERVER, nodes: NODES, store: MODE });
    rmSync(cluster.dir, { recursive: true, force: true });
    cluster.dir = dir; // one temp dir for everything
    cluster.redisDir = join(dir, "redis");
    await cluster.startRedis();
    cluster.nodePorts = [];
    for (let i = 0; i < NODES; i++) cluster.nodePorts[i] = await freePort();
    for (let i = 0; i < NODES; i++) await startNode(i, 0);
    await cluster.startLb();
    url = cluster.url;
  }
  await probeStream();
  // The first chaos restart of a node hits the crash point early: node 0 is
  // restarted armed at once, so the run never depends on luck for it.
  await killNode(0);
  await startNode(0, 1 + Math.floor(srand() * 2));
  console.log(`[${elapsed()}] node 0 restarted armed ${SERVER_POINT}:${nodes[0].armed}; chaos starts`);

  const chaosEnd = Date.now() + SECONDS * 1000;
  const drainEnd = chaosEnd + DRAIN_MS;
  const workers = [];
  for (let k = 0; k < CLIENTS; k++) workers.push(client(k, chaosEnd, drainEnd));
  const chaosDone = chaos(chaosEnd);
  const reviverDone = reviver();
  await chaosDone;
  console.log(`[${elapsed()}] chaos over: every node up, the clients finish their calls`);
  // Every node up (those still down restart unarmed), then the drain.
  for (let i = 0; i < NODES; i++) if (!nodes[i]) await startNode(i, 0).catch(() => { /* a pending restart won */ });
  await Promise.all(workers);
  stopping = true;
  await reviverDone;
  for (let i = 0; i < NODES; i++) if (!nodes[i]) await startNode(i, 0);
  console.log(`[${elapsed()}] all clients done`);

  // ---- checks ----
  console.log(`\nstats: ${JSON.stringify(stats)}`);
  const byTool = (tool) => calls.filter((c) => c.tool === tool);
  console.log(`calls: ${calls.length} (ledger_append ${byTool("ledger_append").length}, external_call ` +
    `${byTool("external_call").length}, stream ${byTool("stream").length})`);
  t.check("no problem during the run (hang, unexpected exit, call left outstanding)", problems.length === 0,
    problems.slice(0, 10).join("\n"));

  const taskCall = (c) => c.tool !== "stream" || streamIsTask;
  const bad = [];
  let cancelledPlain = 0;
  for (const c of calls) {
    const o = c.outcome;
    if (c.tool === "ledger_append" || c.tool === "stream") {
      // An outcome applied by a client killed after its commit is known from
      // its effect (and, for ledger_append, from the ledger row below).
      if (o?.status === "completed") {
        if (c.tool === "stream" && !new RegExp(`streamed ${c.n}`).test(JSON.stringify(o.result))) bad.push(describe(c));
      } else if (!taskCall(c) && c.killed && o?.status === "failed" && o.reason === "cancelled") {
        // A plain (non-task) call is cancelled when its client goes away: the
        // resume's re-issue under the key is answered with that record.
        cancelledPlain++;
      } else if (!(o === null && taskCall(c) && c.newEffects?.length === 1)) bad.push(describe(c));
    } else if (!(o?.status === "completed" || (o?.status === "failed" && o.reason === "outcome_unknown") ||
                 (o === null && c.newEffects?.length === 1))) bad.push(describe(c));
  }
  t.check(`every call reached a terminal outcome (ledger_append/stream completed, external_call completed ` +
    `or failed outcome_unknown): ${calls.length - bad.length}/${calls.length}`, bad.length === 0,
    bad.slice(0, 10).join("\n"));
  if (!streamIsTask) console.log(`     stream (plain calls): ${cancelledPlain} cancelled by their client's kill`);
  const unknown = byTool("external_call").filter((c) => c.outcome?.status === "failed").length;
  console.log(`     external_call: ${unknown} failed outcome_unknown, ` +
    `${byTool("external_call").filter((c) => c.outcome?.status === "completed").length} completed`);

  const left = [];
  for (let k = 0; k < CLIENTS; k++) {
    const st = await readState(join(dir, `client${k}.db`));
    if (st.outstanding.length) left.push(`client${k}: ${JSON.stringify(st.outstanding)}`);
  }
  t.check("no state file has an outstanding call", left.length === 0, left.join("\n"));

  // Effects: n == 1 each; one task row per finished task call (none for plain calls).
  const effBad = [];
  let effRows = 0;
  for (let k = 0; k < CLIENTS; k++) {
    const eff = await readEffects(join(dir, `client${k}.db`));
    effRows += eff.length;
    for (const e of eff) if (e.n !== 1 || !e.event_id.startsWith("task:")) effBad.push(`client${k}: ${JSON.stringify(e)}`);
    const mine = calls.filter((c) => c.client === k && taskCall(c)).length;
    if (eff.length !== mine) effBad.push(`client${k}: ${eff.length} effect rows for ${mine} task calls`);
  }
  for (const c of calls) {
    const want = taskCall(c) ? 1 : 0;
    if ((c.newEffects?.length ?? -1) !== want) effBad.push(`${c.key}: ${c.newEffects?.length} new effects, ` +
      `want ${want}: ${describe(c)}`);
  }
  t.check(`each state's effects: every task:<id> applied exactly once (n == 1), one per task call ` +
    `(${effRows} rows)`, effBad.length === 0, effBad.slice(0, 10).join("\n"));

  // Ledger: each entry exactly once, by the task its client knows.
  const rows = await ledgerRows();
  const count = new Map(), rowTid = new Map();
  for (const row of rows) {
    count.set(row.entry, (count.get(row.entry) ?? 0) + 1);
    rowTid.set(row.entry, String(row.request_key ?? "").replace(/\/t$/, ""));
  }
  const ledgerBad = [];
  for (const c of byTool("ledger_append")) {
    if (count.get(c.entry) !== 1) ledgerBad.push(`${c.entry}: ${count.get(c.entry) ?? 0} rows; ${describe(c)}`);
    else c.tids.add(rowTid.get(c.entry));
  }
  const asked = new Set(byTool("ledger_append").map((c) => c.entry));
  for (const e of count.keys()) if (!asked.has(e)) ledgerBad.push(`row nobody asked for: ${e}`);
  t.check(`every ledger_append entry appears exactly once in ledger_read (${rows.length} rows, ` +
    `${asked.size} entries)`, ledgerBad.length === 0, ledgerBad.slice(0, 10).join("\n"));

  // One task per key: every id seen for a key is the same, and the ids are distinct.
  const tidBad = [];
  const all = new Map();
  for (const c of calls.filter(taskCall)) {
    if (c.tids.size !== 1) tidBad.push(`${c.key}: task ids ${JSON.stringify([...c.tids])}; ${describe(c)}`);
    for (const id of c.tids) {
      if (all.has(id) && all.get(id) !== c.key) tidBad.push(`task ${id} for keys ${all.get(id)} and ${c.key}`);
      all.set(id, c.key);
    }
  }
  const keys = calls.filter(taskCall).length;
  t.check(`no task created twice for one key: ${all.size} distinct task ids for ${keys} keys`,
    tidBad.length === 0 && all.size === keys, tidBad.slice(0, 10).join("\n"));

  t.check(`the crash point ${SERVER_POINT} was reached (${stats.crashPointReached} times, ` +
    `${stats.armedStarts} armed starts)`, stats.crashPointReached >= 1);
  const midPollResumed = calls.filter((c) => c.killedMidPoll &&
    (c.outcome !== null || c.newEffects?.length === 1)).length;
  t.check(`clients were killed mid-poll and resumed (${stats.killedMidPoll} kills mid-poll, ` +
    `${midPollResumed} calls finished after one; client crash points ${JSON.stringify(stats.clientCrashPoints)}, ` +
    `${stats.clientSigkills} random SIGKILLs, ${stats.resumes} resumes)`,
    stats.killedMidPoll >= 1 && midPollResumed >= 1);
  t.check(`server nodes were killed (${stats.serverKills} kill -9, ${stats.serverStarts} starts)`,
    stats.serverKills >= 2);
}

// Diagnosis (SQLite mode, when the sqlite3 shell is installed): task sessions
// in the server's store without their "task" attribute or their record "t":
// a creation cut between its writes.
function halfCreatedTasks() {
  if (MODE !== "sqlite") return;
  const q = "SELECT s.id, (SELECT group_concat(name) FROM tm_session_attrs a WHERE a.session = s.id)," +
    " (SELECT group_concat(key || ':' || state) FROM tm_requests r WHERE r.session = s.id)" +
    " FROM tm_sessions s WHERE s.version = '2026-07-28' AND NOT EXISTS (SELECT 1 FROM tm_requests r" +
    " WHERE r.session = s.id AND (r.key = 't' OR r.key LIKE 'k:%' OR r.key LIKE 's:%'))";
  const r = spawnSync("sqlite3", [join(dir, "server.db"), q], { encoding: "utf8", timeout: 10000 });
  if (r.status !== 0) return;
  const rows = r.stdout.trim() ? r.stdout.trim().split("\n") : [];
  console.log(`diagnosis: ${rows.length} task session(s) in the store without their record "t"` +
    (rows.length ? " (id|attrs|records): " + rows.slice(0, 10).join(", ") : ""));
}

async function cleanup() {
  stopping = true;
  for (let i = 0; i < NODES; i++) {
    const nd = nodes[i];
    nodes[i] = null;
    if (nd) { nd.proc.killedByTest = true; await stopProc(nd.proc); }
  }
  if (cluster) { await stopProc(cluster.lb); await cluster.stopRedis(); }
  if (t.failed || process.exitCode) {
    const logs = serverLogs.filter((l) => l.text.trim()).slice(-6);
    for (const l of logs) console.log(`--- node ${l.node} (armed ${l.armed}) stderr, last 3000 bytes:\n` +
      l.text.slice(-3000));
  }
  if (t.failed || process.exitCode) try { halfCreatedTasks(); } catch { /* diagnosis only */ }
  if (process.env.TASKS_CHAOS_KEEP === "1") console.log("kept " + dir);
  else if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
}

main()
  .catch((e) => { t.check("the run completed", false, e?.stack ?? String(e)); })
  .finally(async () => {
    await cleanup();
    console.log(`tasks_chaos ${MODE}: seed ${SEED}, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    t.done();
  });
