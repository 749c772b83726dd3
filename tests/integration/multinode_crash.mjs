// Multi-node crash test (issue 6, CTest multinode_crash): clients stream
// `stream` and `ledger_append` calls through HAProxy (round-robin, no
// stickiness) to three tidemark-server nodes sharing one Redis (AOF,
// appendfsync always); nodes are kill -9ed and restarted at seeded random
// moments. A call whose node died is finished by a surviving node once the
// dead node's lease lapses (re-run: both tools are atomic or idempotent).
// Asserts over the whole run:
//   - every stream's events arrive exactly once, in order (dense seqs from 1),
//     and each call ends in exactly one response, never an error;
//   - progress of each `stream` call is exactly 1..n, once each;
//   - no resume is ever answered with an error (cursor_ahead included), and
//     every live node's metrics count no cursor_ahead at the end;
//   - no event id is ever used for two different payloads;
//   - every ledger_append effect exactly once: each confirmed entry is one
//     row of the shared ledger (read through the load balancer at the end),
//     and no row exists that no client was told about.
//
//   node multinode_crash.mjs TIDEMARK_SERVER
// Environment: CRASH_SEED (1), CRASH_KILLS (12), CRASH_CLIENTS (4),
// CRASH_DEADLINE_S (200), TM_STORE (redis; pg: a PostgreSQL cluster, store_env.mjs).
// Exits 77 when the store's server or haproxy is missing.
import { STORE, StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";
import { makeCrashClients, rng } from "./crash_clients.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: multinode_crash.mjs TIDEMARK_SERVER");
  process.exit(2);
}
skipUnlessStoreTools();
const SEED = Number(process.env.CRASH_SEED ?? 1);
const KILLS = Number(process.env.CRASH_KILLS ?? 12);
const CLIENTS = Number(process.env.CRASH_CLIENTS ?? 4);
const DEADLINE_MS = Number(process.env.CRASH_DEADLINE_S ?? 200) * 1000;
const NODES = 3;
const t0 = Date.now();

const killRand = rng(SEED);

const violations = [];
function violate(msg) {
  violations.push(msg);
  console.log("VIOLATION " + msg);
}

// ---- the cluster under test ------------------------------------------------------
const cl = new StoreCluster({ bin, nodes: NODES, quiet: !process.env.CRASH_VERBOSE });
function watchNode(i) {
  const nd = cl.nodes[i];
  nd.proc.on("exit", (code, sig) => {
    if (!nd.proc.killedByTest && code !== 0)
      violate(`node ${i} exited by itself (code ${code}, signal ${sig})`);
  });
}
async function currentUrl() {
  if (Date.now() - t0 > DEADLINE_MS) throw new Error("deadline");
  return cl.url;
}

const { client, call, stats, confirmed, sleep, checkLedger } =
  makeCrashClients({ currentUrl, violate, violations, rng, seed: SEED, t0, deadlineMs: DEADLINE_MS });

// ---- run -------------------------------------------------------------------------------
let killsDone = 0;
try {
  await cl.start();
  for (let i = 0; i < NODES; i++) watchNode(i);
  let stopping = false;
  const clients = Array.from({ length: CLIENTS }, (_, k) => client(k, () => (stopping ? 0 : Infinity)));
  while (killsDone < KILLS && Date.now() - t0 < DEADLINE_MS && violations.length < 20) {
    await sleep(300 + Math.floor(killRand() * 900));
    const i = Math.floor(killRand() * NODES);
    await cl.killNode(i, "SIGKILL");
    killsDone++;
    await sleep(Math.floor(killRand() * 500)); // sometimes two nodes are down at once
    await cl.startNode(i);
    watchNode(i);
  }
  stopping = true;
  const results = await Promise.all(clients);
  const ledgerRows = await checkLedger(results[0].sid);
  let recovered = 0; // re-runs by survivors (counters of nodes still up at the end)
  for (let i = 0; i < NODES; i++) {
    const metrics = await (await fetch(cl.nodes[i].url.replace(/\/mcp$/, "/metrics"))).text();
    const ahead = /tidemark_resumes_total\{outcome="ahead"\} (\d+)/.exec(metrics)?.[1];
    if (ahead !== "0") violate(`node ${i}: cursor_ahead counted: ${ahead}`);
    recovered += Number(/tidemark_requests_recovered_total (\d+)/.exec(metrics)?.[1] ?? 0);
  }
  const calls = results.reduce((a, b) => a + b.calls, 0);
  console.log(`multinode crash test: store ${STORE}, seed ${SEED}, ${NODES} nodes, ${killsDone} kills, ${CLIENTS} clients, ` +
    `${calls} calls, ${stats.eventsReceived} events, ${stats.resumes} resumes, ${stats.posts} POSTs (${stats.retriedPosts} retried, ` +
    `${stats.dedupJson} answered from records), ${confirmed.size} ledger calls confirmed, ` +
    `${ledgerRows} ledger rows, ${recovered} calls re-run by a surviving node, ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (killsDone < KILLS) violate(`only ${killsDone} of ${KILLS} kills before the deadline`);
  if (calls < CLIENTS * 2) violate(`too little work done: ${calls} calls`);
} catch (e) {
  violate("aborted: " + (e.stack ?? e));
} finally {
  await cl.stop();
}
console.log(`${violations.length === 0 ? 1 : 0} passed, ${violations.length === 0 ? 0 : 1} failed`);
process.exit(violations.length === 0 ? 0 : 1);
