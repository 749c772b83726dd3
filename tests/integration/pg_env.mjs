// pg_env.mjs - what the PostgreSQL failover tests share (pg_failover.mjs,
// pg_patroni.mjs): tests/tools/pg_cluster.sh run without blocking the
// clients, tidemark nodes on a PostgreSQL URI behind HAProxy, the 503s of a
// store failing over counted by reason, and the check that every event a
// client received still exists after a failover.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Cluster } from "./multinode_env.mjs";
import { reaped } from "./reap.mjs";
import { sseEvents } from "./sse.mjs";

export const PG_CLUSTER = fileURLToPath(new URL("../tools/pg_cluster.sh", import.meta.url));

export const haveTool = (t) => spawnSync("sh", ["-c", `command -v ${t}`], { timeout: 10000 }).status === 0;

// pg_cluster.sh ARGS... asynchronously; resolves its stdout (trimmed). Its
// exit 77 (PostgreSQL not installed) ends the test as skipped.
export function pgCluster(verbose, ...args) {
  return new Promise((resolve, reject) => {
    const p = reaped(spawn("bash", [PG_CLUSTER, ...args.map(String)], { stdio: ["ignore", "pipe", "pipe"] }));
    let out = "", err = "";
    p.stdout.on("data", (d) => { out += d; });
    p.stderr.on("data", (d) => { err += d; });
    p.on("close", (code) => {
      if (verbose && err) process.stderr.write(err);
      if (code === 77) { console.log("SKIP: " + err.trim()); process.exit(77); }
      if (code !== 0) reject(new Error(`pg_cluster.sh ${args.join(" ")}: exit ${code}: ${err.slice(-1500)}`));
      else resolve(out.trim());
    });
  });
}

const alive = (pid) => {
  try { return readFileSync(`/proc/${pid}/stat`, "utf8").split(" ")[2] !== "Z"; } catch { return false; }
};

// SIGKILL the PostgreSQL server of dataDir as a machine dying would: its
// postmaster and every process it forked, at once (each child runs in a
// session of its own, so no process group holds them; the postmaster is
// stopped first, so it forks nothing while its children are listed).
// Resolves the time of the kill once every one of them is gone, or 0 when
// no server ran there.
export async function killPostgres(dataDir) {
  let pid = 0;
  try { pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]); } catch { /* none */ }
  if (!pid || !alive(pid)) return 0;
  process.kill(pid, "SIGSTOP");
  const procs = [pid];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = readFileSync(`/proc/${d}/stat`, "utf8");
      if (Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[1]) === pid) procs.push(Number(d));
    } catch { /* gone */ }
  }
  // children first: a child outliving the postmaster by a moment is told of
  // its death (PR_SET_PDEATHSIG) and says goodbye to its client, which a
  // dying machine would not
  for (const p of [...procs.slice(1), pid]) try { process.kill(p, "SIGKILL"); } catch { /* gone */ }
  const at = Date.now();
  const end = at + 10000;
  while (procs.some(alive)) {
    if (Date.now() > end) throw new Error(`${dataDir}: processes ${procs.filter(alive)} survive SIGKILL`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return at;
}

// Node n of the pg_cluster.sh cluster in dir killed so (done here rather
// than by pg_cluster.sh kill so that the moment is exact).
export const killPgNode = (dir, n) => killPostgres(join(dir, `n${n}`));

// Tidemark nodes on PostgreSQL behind HAProxy (multinode_env.mjs's Cluster
// with the store swapped): pgUri for every node, or pgUris[i] for node i.
export class PgCluster extends Cluster {
  constructor(o) {
    super(o);
    this.pgUris = o.pgUris ?? Array.from({ length: o.nodes }, () => o.pgUri);
    this.uriNow = this.pgUris[0];
  }
  get storeUri() { return this.uriNow; }
  startNode(i) {
    this.uriNow = this.pgUris[i];
    return super.startNode(i);
  }
  async start() {
    for (let i = 0; i < this.n; i++) await this.startNode(i);
    await this.startLb();
  }
}

// retryable(status, body) for crash_clients.mjs: a 503 is a pause, counted
// by its data.reason in reasons.
export function transient503() {
  const reasons = new Map();
  const retryable = (status, body) => {
    if (status !== 503) return false;
    let reason = "(untyped)";
    try { reason = JSON.parse(body).error?.data?.reason ?? reason; } catch { /* not JSON */ }
    reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
    return true;
  };
  return { retryable, reasons };
}

// retryError for crash_clients.mjs: a JSON-RPC error saying the request's
// outcome is not settled yet ("retry it then").
export const unsettledError = (err) => ["store_failed", "store_unavailable"].includes(err?.data?.reason);

// refusedError for crash_clients.mjs: a definite, typed refusal by the store.
export const refusedTyped = (err) => /^store_/.test(err?.data?.reason ?? "");

// Every event a client received (payloads: crash_clients.mjs's map
// "session event-id" -> data) is replayed with the same data by a resume
// from its stream's first received event, through url. Returns
// {checked, streams, missing}; the first few misses go to violate.
export async function checkEventsExist(url, payloads, violate) {
  const byStream = new Map(); // "sid stream" -> [{seq, id, data}]
  for (const [key, data] of payloads) {
    const [sid, id] = key.split(" ");
    const m = /^[0-9a-f]{16}-(g|r\d+)-(\d+)(?:-[A-Za-z0-9_-]{12})?$/.exec(id);
    if (!m) continue;
    const k = sid + " " + m[1];
    if (!byStream.has(k)) byStream.set(k, []);
    byStream.get(k).push({ seq: Number(m[2]), id, data });
  }
  let checked = 0, missing = 0;
  for (const [k, evs] of byStream) {
    const sid = k.split(" ")[0];
    evs.sort((a, b) => a.seq - b.seq);
    if (evs.length < 2) continue;
    const res = await fetch(url, { headers: { accept: "text/event-stream", "mcp-session-id": sid,
      "mcp-protocol-version": "2025-11-25", "last-event-id": evs[0].id }, signal: AbortSignal.timeout(15000) });
    const got = new Map();
    if (res.status === 200) {
      for await (const ev of sseEvents(res.body)) if (ev.id) got.set(ev.id, ev.data);
    } else {
      await res.text();
    }
    for (const ev of evs.slice(1)) {
      checked++;
      if (got.get(ev.id) !== ev.data) {
        missing++;
        if (missing <= 5)
          violate(`event ${ev.id} of session ${sid}: replay gave ${JSON.stringify(got.get(ev.id) ?? null).slice(0, 80)} (HTTP ${res.status})`);
      }
    }
  }
  return { checked, streams: byStream.size, missing };
}
