// pg_failover.mjs (CTest pg_failover, issue 29): failover of the PostgreSQL
// store. A real PostgreSQL 15 cluster (tests/tools/pg_cluster.sh: a primary
// and two standbys, synchronous_standby_names 'ANY 1 (s1, s2)'), two
// tidemark-server nodes on `--store <URI of the three nodes,
// target_session_attrs=read-write> --durability replicated` behind HAProxy
// (round-robin, no stickiness). Clients append ledger entries and stream
// progress, each request re-sent under its id (or its stream resumed) until
// it has a definite answer: a 503, or an answer without an event id saying
// the outcome is not settled yet (store_failed), is a pause; a typed refusal
// (the tool did not run) is an answer. Per failover: SIGKILL of the primary
// (the postmaster and every process it forked, at once), the standby with
// the highest received LSN promoted, the other following it, the dead one
// copied back as a standby. Asserts:
//   - every acknowledged ledger entry is in the ledger exactly once, and no
//     row exists that no client was told about (ledger_read through HAProxy);
//   - every event a client received exists after the failovers, same payload
//     (each stream replayed from its first event through HAProxy); each
//     stream a client saw is dense and in order, and every POST answered
//     with a stream carried its events (crash_clients.mjs);
//   - a tidemark-client streaming a call across the first failover,
//     SIGKILLed at the kill, finishes it with `resume`: each event's effect
//     exactly once, seqs dense (its state file's effects table), the result;
//   - the official TypeScript SDK client (peers/) cut at the kill resumes its
//     call's stream with its last event id: the result, progress rising and
//     never repeated (progress a tool could not make durable while the store
//     was down is not sent: values may be skipped, never duplicated);
//   - writes are served again within PG_WRITES_BACK_S of the kill, and within
//     PG_WRITES_AFTER_S of the moment the new primary has a standby again
//     (printed: kill -> promoted -> follower streaming -> first write
//     acknowledged; promoting here is bash and psql, slow on a loaded machine).
// Then on the last primary: one standby stopped, writes go on; both
// stopped, a write is refused typed within the store timeout (503 with
// data.reason, or an unsettled-outcome error without an event id) with
// nothing emitted, and the same request re-sent once a standby is back is
// acknowledged and in the ledger once. Last, --durability replicated on a
// primary without synchronous standbys (a fresh database, and one a power
// node set up): the node starts, refuses writes 503 store_not_replicated,
// /readyz says so; --durability power takes writes there.
//
//   node pg_failover.mjs TIDEMARK_SERVER TIDEMARK_CLIENT
// Environment: PG_SEED (1) seeds the workload and the failover moments;
// PG_FAILOVERS (2; CTest runs 1, the long variant e.g. PG_FAILOVERS=20);
// PG_CLIENTS (3); PG_WRITES_BACK_S (30); PG_WRITES_AFTER_S (5);
// PG_DEADLINE_S (200); PG_VERBOSE=1 shows node logs; PG_NODE_ARGS: more
// tidemark-server flags (e.g. "--log-level debug");
// PG_KEEP=1 keeps the clusters' directories (logs).
// Exits 77 when PostgreSQL (initdb, pg_ctl) or HAProxy is not installed.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeCrashClients, rng } from "./crash_clients.mjs";
import { callTool, checker, cliBrief, initialize, messages, post, sleep, spawnCli, toolCall, until } from "./mcp_http.mjs";
import { PgCluster, checkEventsExist, haveTool, killPgNode, pgCluster, refusedTyped, transient503, unsettledError } from "./pg_env.mjs";
import { sdkImport } from "./sdk_resolve.mjs";

const [bin, clientBin] = process.argv.slice(2);
if (!bin || !clientBin) {
  console.error("usage: pg_failover.mjs TIDEMARK_SERVER TIDEMARK_CLIENT");
  process.exit(2);
}
if (!haveTool("haproxy")) {
  console.log("SKIP: haproxy not installed (scripts/install-deps.sh --test installs it)");
  process.exit(77);
}
const SEED = Number(process.env.PG_SEED ?? 1);
const FAILOVERS = Number(process.env.PG_FAILOVERS ?? 2);
const CLIENTS = Number(process.env.PG_CLIENTS ?? 3);
const WRITES_BACK_MS = Number(process.env.PG_WRITES_BACK_S ?? 30) * 1000;
const WRITES_AFTER_MS = Number(process.env.PG_WRITES_AFTER_S ?? 5) * 1000;
const DEADLINE_MS = Number(process.env.PG_DEADLINE_S ?? 200) * 1000;
const VERBOSE = !!process.env.PG_VERBOSE;
const STORE_TIMEOUT_MS = 2000;
const t0 = Date.now();
const rand = rng(SEED);
const t = checker();
const violations = [];
const violate = (msg) => { violations.push(msg); console.log("VIOLATION " + msg); };
const since = (t) => ((Date.now() - t) / 1000).toFixed(2) + " s";
const say = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
console.log(`pg_failover: PG_SEED=${SEED} PG_FAILOVERS=${FAILOVERS} PG_CLIENTS=${CLIENTS}`);

// ---- PostgreSQL through pg_cluster.sh (asynchronously: the clients keep running) ----
const work = mkdtempSync(join(tmpdir(), "tidemark-pgfo-"));
process.on("exit", (code) => { if (code === 77) rmSync(work, { recursive: true, force: true }); });
const pgDirs = [];
const pg = (...args) => pgCluster(VERBOSE, ...args);
async function pgStopAll() {
  for (const d of pgDirs) {
    const t = Date.now();
    await pg("stop", d).catch((e) => console.log(String(e)));
    say(`PostgreSQL in ${d} stopped in ${since(t)}`);
  }
}
const { retryable, reasons: transientReasons } = transient503();
const readLog = (f) => { try { return readFileSync(f, "utf8"); } catch { return ""; } };

let cl = null;
let timer = null;
const currentUrl = async () => {
  if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
  return cl.url;
};
const crash = makeCrashClients({ currentUrl, violate, violations, rng, seed: SEED, t0,
  deadlineMs: DEADLINE_MS, retryable, retryError: unsettledError,
  refusedError: refusedTyped, progressMayDrop: true });

// One ledger_append driven to its answer (same request id on every attempt).
async function append(sid, entry, id = entry) {
  const r = await crash.call(sid, id, "ledger_append", { entry });
  const ok = r && !r.response.error;
  if (ok) crash.confirmed.set(entry, 1);
  else console.log(`   ledger_append ${entry}: ${JSON.stringify(r?.response?.error ?? null)}`);
  return ok ? r : null;
}

// ---- a tidemark-client and an SDK client streaming across the first failover ----
const N_STREAM = 60, STREAM_DELAY = 40;

function startCliStream(url, state) {
  const c = spawnCli(clientBin, ["--protocol", "legacy", "--state", state, "--record-effects", url,
    "call", "stream", `n=${N_STREAM}`, `delay_ms=${STREAM_DELAY}`], { ms: 120000 });
  c.progress = () => (c.proc.stderrText ?? "").match(/^progress \d+\//gm)?.length ?? 0;
  c.proc.stderrText = "";
  c.proc.stderr.on("data", (d) => { c.proc.stderrText += d; });
  return c;
}

// A tool's progress that could not be made durable (the store down) is not
// sent: progress may skip values, never repeat or go back.
const rising = (p) => p.every((v, i) => v >= 1 && v <= N_STREAM && (i === 0 || v > p[i - 1]));

async function cliResumeCheck(url, state, first) {
  const r = await spawnCli(clientBin, ["--protocol", "legacy", "--state", state, "--record-effects", url,
    "resume"], { ms: 90000 }).done;
  t.check("tidemark-client: resume after the failover finishes the call (exit 0, the result)",
    r.code === 0 && r.out.includes(`streamed ${N_STREAM}`), `first run: ${cliBrief(first)}; resume: ${cliBrief(r)}`);
  const e = await spawnCli(clientBin, ["--state", state, url, "effects"], { ms: 30000 }).done;
  const eff = e.json ?? [];
  const seqs = eff.map((x) => x.seq);
  // seq 1 is the priming event (no message); then progress, then the response
  t.check(`tidemark-client: every event's effect exactly once, seqs dense (${seqs.length} effects, seqs ${seqs[0]}..${seqs.at(-1)})`,
    seqs.length > 0 && seqs.every((q, i) => q === i + 2) && eff.every((x) => x.n === 1),
    JSON.stringify(eff.slice(0, 3)) + cliBrief(e));
}

const sdk = {};
try {
  sdk.Client = (await sdkImport("client/index.js")).Client;
  sdk.Transport = (await sdkImport("client/streamableHttp.js")).StreamableHTTPClientTransport;
  const types = await sdkImport("types.js");
  sdk.CallToolResultSchema = types.CallToolResultSchema;
  sdk.ProgressNotificationSchema = types.ProgressNotificationSchema;
} catch (e) {
  console.log(`FAIL the TypeScript SDK is not installed (npm ci in peers/): ${e.message}`);
  process.exit(1);
}
const NO_RECONNECT = { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000,
  reconnectionDelayGrowFactor: 1 };

// SDK client 1 starts the call on a fetch the test can cut.
async function startSdkStream(url) {
  const s = { progress: [], tokens: [], done: false, ctl: new AbortController(), errors: [] };
  const fetchCut = (input, init = {}) => fetch(input, { ...init,
    signal: init.signal ? AbortSignal.any([init.signal, s.ctl.signal]) : s.ctl.signal });
  s.transport = new sdk.Transport(new URL(url), { fetch: fetchCut, reconnectionOptions: NO_RECONNECT });
  s.client = new sdk.Client({ name: "pg-failover-sdk", version: "1" }, { capabilities: {} });
  s.client.onerror = (e) => s.errors.push(e);
  await s.client.connect(s.transport);
  s.sid = s.transport.sessionId;
  s.protocolVersion = s.transport.protocolVersion;
  s.client.callTool({ name: "stream", arguments: { n: N_STREAM, delay_ms: STREAM_DELAY } },
    sdk.CallToolResultSchema, {
      onprogress: (p) => s.progress.push(p.progress),
      onresumptiontoken: (tok) => s.tokens.push(tok),
      timeout: DEADLINE_MS,
    }).then((r) => { s.done = true; s.result = r; }, (e) => { s.done = true; s.error = e; });
  return s;
}

// SDK client 2, a new transport on the same session, resumes with the last token.
async function sdkResumeCheck(url, s) {
  const lastToken = s.tokens.at(-1);
  const before = [...s.progress];
  const transport = new sdk.Transport(new URL(url), { sessionId: s.sid, reconnectionOptions: NO_RECONNECT });
  const client = new sdk.Client({ name: "pg-failover-sdk", version: "1" }, { capabilities: {} });
  const errors = [];
  client.onerror = (e) => errors.push(e);
  const after = [];
  client.setNotificationHandler(sdk.ProgressNotificationSchema, (n) => after.push(n.params.progress));
  await client.connect(transport);
  transport.setProtocolVersion(s.protocolVersion);
  const out = { done: false };
  client.callTool({ name: "stream", arguments: { n: N_STREAM, delay_ms: STREAM_DELAY } },
    sdk.CallToolResultSchema, { resumptionToken: lastToken, timeout: 60000 })
    .then((r) => Object.assign(out, { done: true, result: r }), (e) => Object.assign(out, { done: true, error: e }));
  try {
    await until("the SDK's resumed call", () => out.done || errors.length > 0, 60000);
  } catch { /* reported below */ }
  const all = [...before, ...after];
  const text = out.result?.content?.[0]?.text;
  t.check(`SDK client: resumed with Last-Event-ID ${lastToken} after the failover: the result`,
    out.done && !out.error && text === `streamed ${N_STREAM}`,
    `${out.error?.message ?? ""} ${errors.map((e) => e.message).join("; ")} ${JSON.stringify(out.result)}`);
  const distinct = new Set(all).size;
  t.check(`SDK client: progress rising, none twice, across the cut (${before.length} before, ${after.length} after; ` +
    `${N_STREAM - distinct} values not sent while the store was down, ${all.length - distinct} repeated)`,
  rising(all), JSON.stringify(all));
  await client.close().catch(() => {});
}

// ---- one failover ----
const times = [];
async function failover(k, primary, standbys, extra) {
  const tKill = await killPgNode(pgDir, primary);
  say(`failover ${k + 1}: node ${primary} (primary) killed`);
  if (extra) extra.onKill();
  // A write that starts right after the kill, on its own session, re-sent
  // under its id until acknowledged: when writes are served again.
  // A typed refusal ("the tool did not run") is an answer: a new request then.
  const probe = (async () => {
    for (let a = 0; Date.now() - tKill < WRITES_BACK_MS * 2; a++) {
      const r = await append(probeSid, `probe-f${k}`, `probe-f${k}-${a}`);
      if (r) return { r, at: Date.now() };
      await sleep(100);
    }
    return { r: null, at: Date.now() };
  })();
  await sleep(Math.floor(rand() * 500)); // a failover manager's detection time
  say(`failover ${k + 1}: asking standbys ${standbys.join(", ")} which is most advanced`);
  const m = Number(await pg("most-advanced", pgDir, ...standbys));
  say(`failover ${k + 1}: promoting node ${m}`);
  await pg("promote", pgDir, m);
  const tPromoted = Date.now();
  const other = standbys.find((x) => x !== m);
  await pg("follow", pgDir, other, m);
  const tFollowed = Date.now();
  const { r, at } = await probe;
  const back = at - tKill;
  times.push(back);
  say(`failover ${k + 1}: kill -> promoted node ${m} ${((tPromoted - tKill) / 1000).toFixed(2)} s -> ` +
    `node ${other} following ${((tFollowed - tKill) / 1000).toFixed(2)} s -> first write acknowledged ` +
    `${(back / 1000).toFixed(2)} s (${((at - tPromoted) / 1000).toFixed(2)} s after the promotion)`);
  t.check(`failover ${k + 1}: writes served again ${(back / 1000).toFixed(2)} s after the kill (bound ${WRITES_BACK_MS / 1000} s), ` +
    `${((at - tFollowed) / 1000).toFixed(2)} s after the new primary had its standby (bound ${WRITES_AFTER_MS / 1000} s)`,
  r && back <= WRITES_BACK_MS && at - tFollowed <= WRITES_AFTER_MS);
  return { newPrimary: m, other };
}

let probeSid = null;
let pgDir = null;

async function standbyLoss(primary, a, b) {
  const node0 = cl.nodes[0].url;
  // One standby stopped: writes go on through the other.
  await pg("stop-node", pgDir, a);
  const tA = Date.now();
  let ok = 0;
  for (let i = 0; i < 5; i++) if (await append(probeSid, `one-standby-${i}`)) ok++;
  t.check(`one standby (node ${a}) stopped: 5 writes acknowledged in ${since(tA)}`, ok === 5);
  t.check("... and none waited for the store timeout", Date.now() - tA < STORE_TIMEOUT_MS * 2,
    `${Date.now() - tA} ms`);
  // Both stopped: refused typed, nothing emitted. Typed: 503 with
  // data.reason, or (the answer's stream already open) an error without an
  // event id saying the outcome is not settled.
  await pg("stop-node", pgDir, b);
  const refused = async (id, name, args) => {
    const tB = Date.now();
    const res = await post(node0, probeSid, toolCall(id, name, args, { progressToken: id }),
      { headers: { "mcp-protocol-version": "2025-11-25" }, signal: AbortSignal.timeout(STORE_TIMEOUT_MS + 10000) });
    const m = await messages(res);
    const ms = Date.now() - tB;
    const err = m.msgs.find((x) => x.error)?.error;
    const typed = (m.status === 503 && typeof err?.data?.reason === "string") ||
      (m.status === 200 && unsettledError(err) && m.events.every((e) => !e.id || !e.data));
    t.check(`both standbys stopped: ${name} refused typed (HTTP ${m.status}, ${err?.data?.reason}) in ${ms} ms`,
      typed && ms <= STORE_TIMEOUT_MS + 3000, JSON.stringify(m.msgs).slice(0, 300));
    const emitted = m.events.filter((e) => e.id && e.data);
    t.check(`... ${name}: nothing emitted (${emitted.length} events)`, emitted.length === 0,
      JSON.stringify(emitted).slice(0, 300));
  };
  await refused("outage-1", "ledger_append", { entry: "outage-1" });
  await refused("outage-2", "stream", { n: 3 });
  const ready = await fetch(node0.replace(/\/mcp$/, "/readyz"));
  say(`both standbys stopped: node 0 /readyz ${ready.status} ${await ready.text()}`);
  // A standby back: the same request, re-sent, is acknowledged, once.
  await pg("start-node", pgDir, a);
  const tBack = Date.now();
  const r = await append(probeSid, "outage-1");
  t.check(`standby node ${a} back: the refused write, re-sent under its id, acknowledged ${since(tBack)} later`,
    !!r, JSON.stringify(r?.response));
  const cnt = await crash.call(probeSid, "count-outage-1", "ledger_read", { entry: "outage-1" });
  t.check("... and in the ledger exactly once",
    cnt?.response?.result?.structuredContent?.count === 1, JSON.stringify(cnt?.response));
  await pg("start-node", pgDir, b);
}

// --durability replicated on a primary without synchronous standbys: a
// node starts (on a fresh database, and on one a power node set up) and
// refuses writes typed, /readyz says why; --durability power takes them.
async function notReplicated() {
  const dir = join(work, "single");
  pgDirs.push(dir);
  const uri = await pg("start", dir, 0);
  const node = async (durability) => {
    const c = new PgCluster({ bin, nodes: 1, pgUri: uri, quiet: !VERBOSE, nodeArgs: ["--durability", durability,
      "--store-timeout-ms", String(STORE_TIMEOUT_MS)] });
    try { await c.startNode(0); } catch (e) { return { c, err: e.message }; }
    return { c, url: c.nodes[0].url };
  };
  const stop = async ({ c }) => { if (c.nodes[0]) c.nodes[0].proc.killedByTest = true; await c.stop(); };
  const refusesTyped = async (what) => {
    const n = await node("replicated");
    if (!t.check(`--durability replicated, no synchronous standby, ${what}: the node starts`, !n.err, n.err)) {
      await stop(n);
      return;
    }
    const r = await post(n.url, null, { jsonrpc: "2.0", id: 0, method: "initialize", params: {
      protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } });
    const body = await r.text();
    let reason = null;
    try { reason = JSON.parse(body).error?.data?.reason; } catch { /* not JSON */ }
    t.check(`... and refuses writes: initialize 503 store_not_replicated (${r.status} ${reason})`,
      r.status === 503 && reason === "store_not_replicated", body.slice(0, 300));
    const ready = await fetch(n.url.replace(/\/mcp$/, "/readyz"));
    const rb = await ready.text();
    t.check(`... /readyz says so (${ready.status} ${rb.trim()})`, ready.status === 503 && rb.includes("store_not_replicated"));
    await stop(n);
  };
  await refusesTyped("fresh database");
  const p = await node("power");
  if (t.check("the same primary with --durability power: the node starts", !p.err, p.err)) {
    const sid = await initialize(p.url);
    const a = await callTool(p.url, sid, 1, "ledger_append", { entry: "power-1" });
    t.check("... and takes writes", a.status === 200 && a.response?.result && !a.response.result.isError,
      JSON.stringify(a.msgs).slice(0, 300));
  }
  await stop(p);
  await refusesTyped("database set up by a power node");
  await pg("stop", dir);
}

// ---- run ----
let exitCode = 1;
try {
  timer = setTimeout(() => {
    console.log(`FAIL pg_failover: watchdog: deadline of ${DEADLINE_MS / 1000} s passed`);
    pgStopAll().finally(() => process.exit(1));
  }, DEADLINE_MS + 20000);
  pgDir = join(work, "ha");
  pgDirs.push(pgDir);
  const tPg = Date.now();
  const uri = await pg("start", pgDir, 2);
  say(`PostgreSQL: primary + 2 synchronous standbys up in ${since(tPg)}: ${uri}`);
  cl = new PgCluster({ bin, nodes: 2, pgUri: uri, quiet: !VERBOSE,
    nodeArgs: ["--durability", "replicated", "--store-timeout-ms", String(STORE_TIMEOUT_MS),
      ...(process.env.PG_NODE_ARGS ?? "").split(" ").filter(Boolean)] });
  await cl.start();
  for (let i = 0; i < 2; i++) {
    cl.nodes[i].proc.on("exit", (code, sig) => {
      if (!cl.nodes[i]?.proc.killedByTest) violate(`tidemark node ${i} exited by itself (${code ?? sig})`);
    });
  }
  say(`tidemark: 2 nodes behind HAProxy at ${cl.url}`);
  probeSid = await initialize(cl.url);
  t.check("a write through HAProxy before any failover", !!(await append(probeSid, "first")));

  let stopping = false;
  const clients = Array.from({ length: CLIENTS }, (_, k) =>
    crash.client(k, () => (stopping ? 0 : Infinity)).catch((e) => { violate(`client ${k}: ${e.message}`); return null; }));

  let primary = 0, standbys = [1, 2];
  for (let k = 0; k < FAILOVERS && violations.length < 20; k++) {
    await sleep(800 + Math.floor(rand() * 1500)); // load before the kill
    let extra = null;
    if (k === 0) {
      const state = join(work, "client-state.db");
      const cli = startCliStream(cl.url, state);
      const s = await startSdkStream(cl.url);
      const started = await until("5 progress events at both clients", () =>
        (cli.progress() >= 5 && s.progress.length >= 5) || s.done, 20000).catch(() => false);
      const stop = () => { cli.proc.kill("SIGKILL"); s.ctl.abort(new Error("cut at the failover")); };
      if (t.check(`tidemark-client and the SDK client streaming before the kill (progress ${cli.progress()} and ${s.progress.length})`,
        started && !s.done, `SDK: ${s.error?.message ?? JSON.stringify(s.result) ?? ""} ${s.errors.map((e) => e.message).join("; ")}; ` +
        `tidemark-client stderr: ${cli.proc.stderrText.slice(-300)}`))
        extra = { onKill: stop, cli, s, state };
      else {
        stop();
        await s.client.close().catch(() => {});
      }
    }
    const { newPrimary, other } = await failover(k, primary, standbys, extra);
    if (extra) {
      const first = await extra.cli.done;
      say(`tidemark-client killed after ${extra.cli.progress()} progress events; the SDK client cut after ${extra.s.progress.length}`);
      await cliResumeCheck(cl.url, extra.state, first);
      await extra.s.client.close().catch(() => {});
      await sdkResumeCheck(cl.url, extra.s);
    }
    if (k + 1 < FAILOVERS) {
      await pg("rejoin", pgDir, primary, newPrimary);
      say(`node ${primary} copied back from node ${newPrimary} as a standby`);
      standbys = [other, primary];
    } else {
      standbys = [other];
    }
    primary = newPrimary;
  }
  await sleep(500);
  stopping = true;
  const done = await Promise.all(clients);
  const calls = done.reduce((n, c) => n + (c?.calls ?? 0), 0);
  say(`clients: ${calls} calls, ${JSON.stringify(crash.stats)}, 503s by reason ${JSON.stringify(Object.fromEntries(transientReasons))}`);
  t.check(`clients made calls across the failovers (${calls})`, calls > 0);
  const rows = await crash.checkLedger(probeSid);
  t.check(`every acknowledged ledger entry exactly once, none unacknowledged (${crash.confirmed.size} acknowledged, ${rows} rows)`,
    rows > 0 && !violations.some((v) => v.startsWith("ledger")));
  const ev = await checkEventsExist(cl.url, crash.payloads, violate);
  t.check(`every event a client received exists after the failovers, same payload (${ev.checked} events, ${ev.streams} streams)`,
    ev.missing === 0 && ev.checked > 0, `${ev.missing} missing or changed`);
  t.check(`every POST answered with a stream carried its events (${crash.stats.emptyStreams} empty of ${crash.stats.posts})`,
    crash.stats.emptyStreams === 0);
  t.check(`no violation seen by the clients (${violations.length})`, violations.length === 0, violations.slice(0, 5).join("; "));

  // The last primary with its standbys: the dead node copied back first.
  if (standbys.length < 2) {
    const dead = [0, 1, 2].find((x) => x !== primary && !standbys.includes(x));
    await pg("rejoin", pgDir, dead, primary);
    standbys.push(dead);
  }
  await standbyLoss(primary, standbys[0], standbys[1]);
  await notReplicated();
  say(`writes served again after a kill of the primary: ${times.map((x) => (x / 1000).toFixed(2) + " s").join(", ")}`);
  exitCode = 0;
} catch (e) {
  t.check("aborted: " + (e.stack ?? e), false);
} finally {
  clearTimeout(timer);
  const tStop = Date.now();
  if (cl) await cl.stop().catch(() => {});
  say(`tidemark nodes and HAProxy stopped in ${since(tStop)}`);
  await pgStopAll();
  // What PostgreSQL refused (a deadlock, a constraint) says why a batch failed.
  for (const d of pgDirs) for (const n of [0, 1, 2]) {
    const errs = readLog(join(d, `n${n}.log`)).split("\n").filter((l) => /ERROR|FATAL|PANIC/.test(l) &&
      !/terminating (connection|walreceiver process) due to administrator|the database system is (starting up|shutting down)|not currently accepting|recovery is in progress|could not receive data from WAL stream|could not connect to the primary/.test(l));
    if (errs.length) console.log(`PostgreSQL ${d}/n${n}.log, ${errs.length} error line(s):\n  ` + errs.slice(0, 12).join("\n  "));
  }
  if (process.env.PG_KEEP) console.log(`kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
}
say(`pg_failover: done in ${since(t0)}`);
t.done();
