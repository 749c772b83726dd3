// gateway_exactly.mjs (CTest gateway_exactly): effects through
// tidemark-gateway stay exactly once. The stdio server is
// `tidemark-everything --stdio` on a Redis store (its children share it), the
// gateway runs on SQLite with `--safe-tool ledger_append` (safe: the gateway
// hands the child the call's idempotency key, and a Tidemark child runs a
// keyed call once), and a tidemark-client (2025 session, state file) calls:
//   1. ledger_append, the gateway kill -9ed mid-call and restarted on the
//      same port and store: the client's stream resumes, the call is re-run
//      by the gateway's recovery at a new child, the entry exists once;
//   2. ledger_append, the stdio children killed mid-call: the call is sent
//      again to the restarted child, the entry exists once;
//   3. stream (not named safe: the child's own idempotentHint is not trusted
//      by default), the children killed while it runs there (its progress
//      reached the client): the call ends -32010 outcome_unknown, not re-sent.
// TM_STORE=pg: the children's store is a PostgreSQL cluster instead (store_env.mjs).
// Exits 77 (skipped) when the store's server is not installed.
//   node gateway_exactly.mjs GATEWAY CLIENT TIDEMARK_EVERYTHING
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, cliBrief, spawnCli, startServer, stopServer, until } from "./mcp_http.mjs";
import { freePort } from "./multinode_env.mjs";
import { StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";

const [gateway, client, everything] = process.argv.slice(2);
const t = checker();
skipUnlessStoreTools({ withLb: false });
const dir = mkdtempSync(join(tmpdir(), "tm-gw-exactly-"));
const redis = new StoreCluster({ bin: everything, nodes: 0 });

const start = (args) => spawnCli(client, args);
const run = (args) => start(args).done;
const brief = cliBrief;
const L = ["--protocol", "legacy"];

let gw = null, port = 0;
const startGateway = async () => {
  gw = await startServer(gateway, ["--store", "sqlite:" + join(dir, "gw.db"), "--listen", `127.0.0.1:${port}`,
    "--stdio", `${everything} --stdio --log-level warn --store '${redis.storeUri}'`,
    "--safe-tool", "ledger_append"], { ms: 30000 });
  return gw.url;
};
const ledger = async (u, entry) =>
  (await run([...L, "--json", u, "call", "ledger_read", `entry=${entry}`])).json?.structuredContent?.count;
// The gateway's stdio children (its direct children: each has its own group).
const children = () => (spawnSync("pgrep", ["-P", String(gw.proc.pid)]).stdout.toString().trim()
  .split(/\s+/).filter(Boolean).map(Number));
// A call in flight at the gateway: its stream has started (the state names it).
const inFlight = (state, u) => until("the call in flight", async () =>
  !!(await run([...L, "--state", state, u, "state"])).json?.outstanding?.[0]?.stream, 15000);

async function gatewayKilled(u) {
  const state = join(dir, "c1.db");
  const c = start([...L, "--state", state, "--json", u, "call", "ledger_append", "entry=gw-kill", "delay_ms=1500"]);
  await inFlight(state, u);
  await stopServer(gw, "SIGKILL");
  await startGateway();
  let r = await c.done;
  if (r.code !== 0) // the client gave up while the gateway was down: its resume goes on
    r = await run([...L, "--state", state, "--json", u, "resume"]);
  const text = r.json?.content?.[0]?.text ?? r.json?.[0]?.result?.content?.[0]?.text;
  t.check("gateway kill -9 mid-call: the client gets the result", text === "appended", brief(r));
  const n = await ledger(u, "gw-kill");
  t.check("gateway kill -9: the ledger holds the entry once", n === 1, `count ${n}`);
}

async function childKilled(u, tool, entry) {
  const state = join(dir, `c-${entry}.db`);
  const args = tool === "ledger_append" ? [`entry=${entry}`, "delay_ms=1500"] : ["n=40", "delay_ms=100"];
  // The session's child up first (the state keeps the session): the kill
  // below hits the call, not the child's start.
  const warm = await run([...L, "--state", state, "--json", u, "call", "ledger_read", "entry=none"]);
  t.check(`${tool}: the session's child answers`, warm.code === 0, brief(warm));
  const c = start([...L, "--state", state, "--json", u, "call", tool, ...args]);
  let err = "";
  c.proc.stderr.on("data", (d) => { err += d; });
  if (tool === "stream") // running at the child: its progress came through
    await until("progress of the call at the child", async () => /progress 2\/40/.test(err), 20000);
  else
    await inFlight(state, u);
  const pids = children();
  t.check(`${tool}: the gateway has stdio children to kill`, pids.length >= 2, JSON.stringify(pids));
  for (const pid of pids) try { process.kill(pid, "SIGKILL"); } catch { /* gone */ }
  return c.done;
}

try {
  await redis.startRedis();
  port = await freePort();
  const u = await startGateway();
  let r = await run([...L, "--json", u, "call", "ledger_append", "entry=plain"]);
  t.check("a call through the gateway", r.code === 0 && r.json?.content?.[0]?.text === "appended", brief(r));
  await gatewayKilled(u);
  r = await childKilled(u, "ledger_append", "child-kill");
  t.check("stdio children killed mid-call: a safe call is sent again and answered",
    r.code === 0 && r.json?.content?.[0]?.text === "appended", brief(r));
  const n = await ledger(u, "child-kill");
  t.check("children killed: the ledger holds the entry once", n === 1, `count ${n}`);
  r = await childKilled(u, "stream", "ext");
  t.check("stdio children killed mid-call: a call not safe ends outcome_unknown",
    r.code !== 0 && r.json?.code === -32010 && r.json?.data?.reason === "outcome_unknown", brief(r));
  t.check("plain and the others: each entry once", (await ledger(u, "plain")) === 1);
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(gw);
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
t.done();
