// store_env.mjs - the multi-node tests' store, picked by TM_STORE:
//   redis (default)  one redis-server (multinode_env.mjs's Cluster as it is)
//   pg               a throw-away PostgreSQL cluster (tests/tools/pg_cluster.sh:
//                    a primary and TM_PG_STANDBYS synchronous standbys, 0 by
//                    default) on loopback ports it picks, under the cluster's
//                    temp dir; every node gets its multi-host libpq URI
//                    (target_session_attrs=read-write).
// StoreCluster is a Cluster whose startRedis/stopRedis start and stop
// whichever store was picked, so a test written for Redis runs on either.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Cluster, missingTools } from "./multinode_env.mjs";
import { PG_CLUSTER, haveTool, pgCluster } from "./pg_env.mjs";

export const STORE = process.env.TM_STORE || "redis";
if (!["redis", "pg"].includes(STORE)) {
  console.error(`TM_STORE=${STORE}: must be redis or pg`);
  process.exit(2);
}

function havePgServer() {
  if (process.env.PG_BIN) return existsSync(join(process.env.PG_BIN, "initdb"));
  let versions = [];
  try { versions = readdirSync("/usr/lib/postgresql"); } catch { /* none */ }
  return versions.some((v) => existsSync(join("/usr/lib/postgresql", v, "bin", "initdb"))) || haveTool("initdb");
}

// The programs a test on store (STORE unless given) needs that are not
// installed; withLb: whether it puts HAProxy in front of the nodes.
export function missingStoreTools({ withLb = true, store = STORE } = {}) {
  const miss = store === "redis" ? missingTools() : [
    ...(havePgServer() ? [] : ["PostgreSQL server (initdb)"]),
    ...(haveTool("haproxy") ? [] : ["haproxy"])];
  return withLb ? miss : miss.filter((t) => t !== "haproxy");
}

// Exit 77 (skipped, said on stdout) when missingStoreTools() names anything.
export function skipUnlessStoreTools(opts = {}) {
  const miss = missingStoreTools(opts);
  if (!miss.length) return;
  console.log(`SKIP: store ${opts.store ?? STORE}: not installed: ${miss.join(", ")} (scripts/install-deps.sh --test installs them)`);
  process.exit(77);
}

// o.store (STORE unless given) picks the store; the rest is Cluster's.
export class StoreCluster extends Cluster {
  constructor(o) {
    super(o);
    this.store = o.store ?? STORE;
  }
  get storeUri() { return this.store === "pg" ? this.pgUri : super.storeUri; }
  // What the test log says about the store.
  get storeName() { return this.store === "pg" ? `PostgreSQL ${this.pgUri}` : `redis :${this.redisPort}`; }

  async startRedis() {
    if (this.store !== "pg") return super.startRedis();
    this.pgDir = join(this.dir, "pg");
    const standbys = Number(process.env.TM_PG_STANDBYS ?? 0);
    // A test that dies without stop() (an uncaught error) must not leave
    // PostgreSQL running: pg_ctl detached it from this process.
    if (!this.pgExitHook) {
      this.pgExitHook = () => {
        if (this.pgDir && existsSync(this.pgDir))
          spawnSync("bash", [PG_CLUSTER, "stop", this.pgDir], { stdio: "ignore", timeout: 30000 });
      };
      process.once("exit", this.pgExitHook);
    }
    this.pgUri = await pgCluster(!this.quiet, "start", this.pgDir, standbys);
  }

  async stopRedis(sig = "SIGTERM") {
    if (this.store !== "pg") return super.stopRedis(sig);
    if (this.pgDir && existsSync(this.pgDir)) await pgCluster(!this.quiet, "stop", this.pgDir);
    this.pgUri = null;
  }
}
