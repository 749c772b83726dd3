// cluster.mjs - for bench/tasks.sh: the multi-node tests' cluster
// (tests/integration/multinode_env.mjs): one redis-server (AOF, appendfsync
// always), N tidemark-everything nodes on it, HAProxy round-robin in front,
// all on loopback ports picked here. Prints "url <HAProxy URL>" once all
// answer, then runs until its stdin ends (the script that started it exits)
// or SIGTERM/SIGINT, and stops every process by PID.
//
//   node bench/cluster.mjs TIDEMARK_EVERYTHING [NODES]
import { Cluster, missingTools } from "../tests/integration/multinode_env.mjs";

const [bin, nodes = "3"] = process.argv.slice(2);
if (!bin) {
  console.error("usage: cluster.mjs TIDEMARK_EVERYTHING [NODES]");
  process.exit(2);
}
const missing = missingTools();
if (missing.length) {
  console.log("skip " + missing.join(" "));
  process.exit(0);
}
const c = new Cluster({ bin, nodes: Number(nodes) });
let stopping = null;
const stop = (code) => {
  stopping ??= c.stop().catch((e) => console.error("cluster.mjs: " + e)).then(() => process.exit(code));
  return stopping;
};
process.on("SIGTERM", () => stop(0));
process.on("SIGINT", () => stop(0));
process.stdin.on("end", () => stop(0));
process.stdin.on("error", () => stop(0));
process.stdin.resume();
try {
  await c.start();
  console.log("url " + c.url);
} catch (e) {
  console.error("cluster.mjs: " + (e?.stack ?? e));
  await stop(1);
}
