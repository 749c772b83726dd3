// pg_patroni.mjs (CTest pg_patroni; make soak-ha for many failovers, issue
// 29): Patroni as the failover manager of the PostgreSQL store. etcd on
// loopback ports picked here, three Patroni members running exactly
// examples/patroni/patroni-n{0,1,2}.yml (synchronous_mode, one synchronous
// standby; ports and directories put in), HAProxy running
// examples/patroni/haproxy.cfg (port 5000 -> the member whose REST API
// answers GET /primary). Two tidemark-server nodes behind HAProxy: node 0
// on the multi-host URI (target_session_attrs=read-write), node 1 through
// the PostgreSQL HAProxy; clients append ledger entries and stream (each
// request re-sent under its id until it has a definite answer). Per
// failover: kill -9 the leader member (its Patroni and its postgres),
// Patroni promotes the synchronous standby; before the next round the killed
// member is started again and must rejoin as a replica (pg_rewind).
// Asserts: writes are served again within PATRONI_WRITES_BACK_S of the kill
// (printed: kill -> new leader -> first write acknowledged), through both
// kinds of URI; every acknowledged ledger entry exactly once, none
// unacknowledged; every event a client received still exists, same payload.
//
//   node pg_patroni.mjs TIDEMARK_SERVER
// Environment: PATRONI_SEED (1), PATRONI_FAILOVERS (1; make soak-ha: 5),
// PATRONI_CLIENTS (3), PATRONI_WRITES_BACK_S (30), PATRONI_DEADLINE_S (170),
// PATRONI_VERBOSE=1 (Patroni, etcd and node logs).
// Exits 77 when patroni, etcd, haproxy or PostgreSQL 15 is not installed.
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync }
  from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeCrashClients, rng } from "./crash_clients.mjs";
import { checker, initialize, sleep, until } from "./mcp_http.mjs";
import { freePort, stopProc, waitTcp } from "./multinode_env.mjs";
import { PgCluster, checkEventsExist, haveTool, killPostgres, refusedTyped, transient503, unsettledError } from "./pg_env.mjs";
import { reaped } from "./reap.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: pg_patroni.mjs TIDEMARK_SERVER");
  process.exit(2);
}
const example = (f) => readFileSync(new URL(`../../examples/patroni/${f}`, import.meta.url), "utf8");
const PG_BIN = /^\s*bin_dir: (\S+)/m.exec(example("patroni-n0.yml"))[1];
const missing = ["patroni", "etcd", "haproxy"].filter((x) => !haveTool(x));
if (!existsSync(join(PG_BIN, "initdb"))) missing.push(`PostgreSQL (${PG_BIN})`);
if (missing.length) {
  console.log(`SKIP: not installed: ${missing.join(", ")} (scripts/install-deps.sh --test installs them)`);
  process.exit(77);
}
const SEED = Number(process.env.PATRONI_SEED ?? 1);
const FAILOVERS = Number(process.env.PATRONI_FAILOVERS ?? 1);
const CLIENTS = Number(process.env.PATRONI_CLIENTS ?? 3);
const WRITES_BACK_MS = Number(process.env.PATRONI_WRITES_BACK_S ?? 30) * 1000;
const DEADLINE_MS = Number(process.env.PATRONI_DEADLINE_S ?? 170) * 1000;
const VERBOSE = !!process.env.PATRONI_VERBOSE;
const t0 = Date.now();
const rand = rng(SEED);
const t = checker();
const violations = [];
const violate = (msg) => { violations.push(msg); console.log("VIOLATION " + msg); };
const since = (x) => ((Date.now() - x) / 1000).toFixed(2) + " s";
const say = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
console.log(`pg_patroni: PATRONI_SEED=${SEED} PATRONI_FAILOVERS=${FAILOVERS} PATRONI_CLIENTS=${CLIENTS}`);

// Patroni and PostgreSQL run as the postgres user when the test is root.
const root = process.getuid() === 0;
const pgUser = root ? { uid: Number(spawnSync("id", ["-u", "postgres"], { encoding: "utf8" }).stdout),
  gid: Number(spawnSync("id", ["-g", "postgres"], { encoding: "utf8" }).stdout) } : {};
if (root && !(pgUser.uid > 0)) {
  console.log("FAIL: run as root, the test needs a postgres user");
  process.exit(1);
}
const work = mkdtempSync(join(tmpdir(), "tidemark-patroni-"));
chmodSync(work, 0o755);
const own = (p) => { if (root) chownSync(p, pgUser.uid, pgUser.gid); };
own(work);

const ports = {};
const members = []; // i -> { proc, rest, pg, dir }
let etcd = null, pgLb = null, cl = null;

function logTo(name) {
  return VERBOSE ? "inherit" : openSync(join(work, name + ".log"), "a");
}

// A port picked free may be taken before etcd binds it (another test's
// server): etcd then exits at once, and is started again on new ports.
async function startEtcd() {
  for (let attempt = 1; ; attempt++) {
    ports.etcd = await freePort();
    ports.etcdPeer = await freePort();
    const c = `http://127.0.0.1:${ports.etcd}`, p = `http://127.0.0.1:${ports.etcdPeer}`;
    etcd = reaped(spawn("etcd", ["--name", "e0", "--data-dir", join(work, "etcd"),
      "--listen-client-urls", c, "--advertise-client-urls", c, "--listen-peer-urls", p,
      "--initial-advertise-peer-urls", p, "--initial-cluster", `e0=${p}`, "--logger", "zap",
      "--log-level", "warn"], { stdio: ["ignore", logTo("etcd"), logTo("etcd")] }));
    let exited = false;
    etcd.once("exit", () => { exited = true; });
    const up = await until("etcd healthy", async () => {
      if (exited) return "exited";
      try { return (await (await fetch(c + "/health")).json()).health === "true"; } catch { return false; }
    }, 20000);
    if (up === true) return;
    if (attempt === 3) throw new Error("etcd exited at start three times (see etcd.log)");
    rmSync(join(work, "etcd"), { recursive: true, force: true });
  }
}

// The example member file with this run's ports and directories.
function memberConfig(i) {
  const dir = join(work, `n${i}`);
  return example(`patroni-n${i}.yml`)
    .replaceAll(`127.0.0.1:${8008 + i}`, `127.0.0.1:${ports.rest[i]}`)
    .replaceAll(`127.0.0.1:${5432 + i}`, `127.0.0.1:${ports.pg[i]}`)
    .replaceAll("127.0.0.1:2379", `127.0.0.1:${ports.etcd}`)
    .replace(/^(\s*data_dir:) .*$/m, `$1 ${dir}`)
    .replace(/^(\s*pgpass:) .*$/m, `$1 ${join(work, `n${i}.pgpass`)}`)
    .replace(/^(\s*unix_socket_directories:) .*$/m, `$1 ${work}`);
}

function startMember(i) {
  const cfg = join(work, `patroni-n${i}.yml`);
  writeFileSync(cfg, memberConfig(i));
  own(cfg);
  const proc = reaped(spawn("patroni", [cfg], { cwd: work, ...pgUser,
    env: { ...process.env, HOME: work, PATRONI_LOG_LEVEL: VERBOSE ? "INFO" : "WARNING" },
    stdio: ["ignore", logTo(`patroni-n${i}`), logTo(`patroni-n${i}`)] }));
  members[i] = { proc, dir: join(work, `n${i}`) };
}

// Member i dies: its Patroni, then its postgres (every process, at once).
async function killMember(i) {
  members[i].proc.kill("SIGKILL");
  const at = await killPostgres(members[i].dir);
  await until(`member ${i} dead`, () => members[i].proc.exitCode !== null || members[i].proc.signalCode !== null, 10000);
  return at || Date.now();
}

async function rest(i, path) {
  try {
    const r = await fetch(`http://127.0.0.1:${ports.rest[i]}${path}`, { signal: AbortSignal.timeout(1000) });
    await r.text();
    return r.status;
  } catch { return 0; }
}
async function leader() {
  for (let i = 0; i < 3; i++) if (await rest(i, "/primary") === 200) return i;
  return -1;
}

// i: a member, or "lb" for whichever member HAProxy sends connections to.
function psql(i, sql, db = "postgres") {
  return new Promise((resolve) => {
    const port = i === "lb" ? ports.pgLb : ports.pg[i];
    const p = reaped(spawn(join(PG_BIN, "psql"), ["-X", "-A", "-t", "-q", "-h", "127.0.0.1", "-p",
      String(port), "-U", "postgres", "-d", db, "-c", sql],
    { env: { ...process.env, PGCONNECT_TIMEOUT: "2" }, stdio: ["ignore", "pipe", "pipe"] }));
    let out = "", err = "";
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => { err += d; });
    p.on("close", (code) => resolve({ code, out: out.trim(), err }));
  });
}

// The leader i streams to both others, one of them synchronously.
async function replicating(i) {
  const r = await psql(i, "SELECT count(*) FILTER (WHERE state = 'streaming') || '|' || " +
    "count(*) FILTER (WHERE sync_state = 'sync') FROM pg_stat_replication");
  return r.code === 0 && r.out === "2|1";
}

async function startPgLb() {
  ports.pgLb = await freePort();
  let cfg = example("haproxy.cfg").replace("bind 127.0.0.1:5000", `bind 127.0.0.1:${ports.pgLb}`);
  for (let i = 0; i < 3; i++)
    cfg = cfg.replace(`127.0.0.1:${5432 + i} `, `127.0.0.1:${ports.pg[i]} `)
      .replace(`check port ${8008 + i}`, `check port ${ports.rest[i]}`);
  const path = join(work, "haproxy-pg.cfg");
  writeFileSync(path, cfg);
  const chk = spawnSync("haproxy", ["-c", "-q", "-f", path], { encoding: "utf8", timeout: 20000 });
  if (chk.status !== 0) throw new Error("haproxy-pg config: " + chk.stderr + chk.stdout);
  pgLb = reaped(spawn("haproxy", ["-db", "-f", path], { stdio: ["ignore", "ignore", logTo("haproxy-pg")] }));
  await waitTcp(ports.pgLb);
  // HAProxy counts every server up until its checks say otherwise: a node
  // started at once could open its store on a replica (read-only) and stop.
  await until("HAProxy sends connections to the leader only", async () => {
    for (let k = 0; k < 6; k++) {
      const r = await psql("lb", "SELECT pg_is_in_recovery()");
      if (r.code !== 0 || r.out !== "f") return false;
    }
    return true;
  }, 30000);
}

const { retryable, reasons } = transient503();
const crash = makeCrashClients({ currentUrl: async () => {
  if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
  return cl.url;
}, violate, violations, rng, seed: SEED, t0, deadlineMs: DEADLINE_MS, retryable, retryError: unsettledError,
  refusedError: refusedTyped, progressMayDrop: true });

async function append(sid, entry) {
  const r = await crash.call(sid, entry, "ledger_append", { entry });
  const ok = r && !r.response.error;
  if (ok) crash.confirmed.set(entry, 1);
  return ok;
}

const times = [];
async function failover(k, sids, last) {
  const old = await leader();
  const tKill = await killMember(old);
  say(`failover ${k + 1}: leader n${old} killed (Patroni and postgres, SIGKILL)`);
  // One write per tidemark node, each on a session of its own, started now.
  const probes = [0, 1].map((n) => {
    const url = cl.nodes[n].url;
    const c = makeCrashClients({ currentUrl: async () => url, violate, violations, rng, seed: SEED,
      t0, deadlineMs: DEADLINE_MS, retryable, retryError: unsettledError,
  refusedError: refusedTyped, progressMayDrop: true });
    // A typed refusal ("the tool did not run") is an answer: a new request then.
    return (async () => {
      const entry = `probe-f${k}-n${n}`;
      for (let a = 0; Date.now() - tKill < WRITES_BACK_MS * 2; a++) {
        const r = await c.call(sids[n], `${entry}-${a}`, "ledger_append", { entry });
        if (r && !r.response.error) {
          crash.confirmed.set(entry, 1);
          return { ok: true, at: Date.now() };
        }
        console.log(`   ledger_append ${entry} on node ${n}: ${JSON.stringify(r?.response?.error ?? null)}`);
        await sleep(100);
      }
      return { ok: false, at: Date.now() };
    })();
  });
  const nl = await until("a new leader", async () => { const l = await leader(); return l >= 0 && l !== old ? l + 1 : 0; },
    WRITES_BACK_MS) - 1;
  const tLeader = Date.now();
  const res = await Promise.all(probes);
  const back = Math.max(...res.map((r) => r.at)) - tKill;
  times.push(back);
  say(`failover ${k + 1}: kill -> n${nl} leader ${((tLeader - tKill) / 1000).toFixed(2)} s -> first write ` +
    `acknowledged: node 0 (multi-host URI) ${((res[0].at - tKill) / 1000).toFixed(2)} s, ` +
    `node 1 (HAProxy /primary) ${((res[1].at - tKill) / 1000).toFixed(2)} s`);
  t.check(`failover ${k + 1}: writes served again through both URIs ${(back / 1000).toFixed(2)} s after the kill ` +
    `(bound ${WRITES_BACK_MS / 1000} s)`, res.every((r) => r.ok) && back <= WRITES_BACK_MS);
  if (last) return;
  // The killed member back: Patroni rewinds it and it follows the new leader.
  const tRejoin = Date.now();
  startMember(old);
  await until(`n${old} rejoined as a replica`, async () => (await rest(old, "/replica")) === 200 &&
    await replicating(nl), 60000);
  say(`failover ${k + 1}: n${old} rejoined as a replica in ${since(tRejoin)}`);
}

let exitCode = 1;
const watchdog = setTimeout(() => {
  console.log(`FAIL pg_patroni: watchdog: deadline of ${DEADLINE_MS / 1000} s passed`);
  cleanup().finally(() => process.exit(1));
}, DEADLINE_MS + 20000);

async function cleanup() {
  if (cl) await cl.stop().catch(() => {});
  await stopProc(pgLb, "SIGKILL");
  // The data is thrown away: every member killed (Patroni, then its postgres by PID).
  for (let i = 0; i < members.length; i++) if (members[i]) await killMember(i).catch((e) => console.log(String(e)));
  await stopProc(etcd, "SIGKILL");
  rmSync(work, { recursive: true, force: true });
}

try {
  ports.pg = [await freePort(), await freePort(), await freePort()];
  ports.rest = [await freePort(), await freePort(), await freePort()];
  await startEtcd();
  say(`etcd on 127.0.0.1:${ports.etcd}`);
  const tBoot = Date.now();
  for (let i = 0; i < 3; i++) startMember(i);
  const l0 = await until("a leader", async () => { const l = await leader(); return l >= 0 ? l + 1 : 0; }, 90000) - 1;
  await until("two replicas streaming, one synchronous", () => replicating(l0), 90000);
  say(`Patroni: n${l0} leader, two replicas streaming (one synchronous) in ${since(tBoot)}`);
  const c = await psql(l0, "CREATE DATABASE tidemark");
  if (c.code !== 0) throw new Error("CREATE DATABASE: " + c.err);
  await startPgLb();
  const hosts = ports.pg.map((p) => `127.0.0.1:${p}`).join(",");
  const uris = [`postgresql://postgres@${hosts}/tidemark?target_session_attrs=read-write&connect_timeout=2`,
    `postgresql://postgres@127.0.0.1:${ports.pgLb}/tidemark?connect_timeout=2`];
  cl = new PgCluster({ bin, nodes: 2, pgUris: uris, quiet: !VERBOSE,
    nodeArgs: ["--durability", "replicated", "--store-timeout-ms", "2000"] });
  await cl.start();
  say(`tidemark: node 0 on ${uris[0]}, node 1 on ${uris[1]}, HAProxy at ${cl.url}`);
  const sids = [await initialize(cl.nodes[0].url), await initialize(cl.nodes[1].url)];
  const probeSid = await initialize(cl.url);
  t.check("a write before any failover", await append(probeSid, "first"));

  let stopping = false;
  const clients = Array.from({ length: CLIENTS }, (_, k) =>
    crash.client(k, () => (stopping ? 0 : Infinity)).catch((e) => { violate(`client ${k}: ${e.message}`); return null; }));
  for (let k = 0; k < FAILOVERS && violations.length < 20; k++) {
    await sleep(1000 + Math.floor(rand() * 2000));
    await failover(k, sids, k + 1 === FAILOVERS);
  }
  await sleep(1000);
  stopping = true;
  const done = await Promise.all(clients);
  const calls = done.reduce((n, x) => n + (x?.calls ?? 0), 0);
  say(`clients: ${calls} calls, ${JSON.stringify(crash.stats)}, 503s by reason ${JSON.stringify(Object.fromEntries(reasons))}`);
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
  say(`writes served again after a kill of the leader: ${times.map((x) => (x / 1000).toFixed(2) + " s").join(", ")}`);
  exitCode = 0;
} catch (e) {
  t.check("aborted: " + (e.stack ?? e), false);
  if (!VERBOSE) for (const f of ["patroni-n0", "patroni-n1", "patroni-n2"]) {
    try { console.log(`---- ${f}.log (tail)\n` + readFileSync(join(work, f + ".log"), "utf8").slice(-1500)); } catch { /* none */ }
  }
} finally {
  clearTimeout(watchdog);
  await cleanup();
}
say(`pg_patroni: done in ${since(t0)}`);
if (exitCode && !t.failed) t.failed++;
t.done();
