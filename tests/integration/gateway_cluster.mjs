// gateway_cluster.mjs (CTest gateway_cluster): two tidemark-gateway nodes
// on one Redis behind HAProxy (round-robin, no stickiness), each with the
// official server-everything over stdio: one 2025 session is served from
// either node (each node starts its own child for the session, initialized
// with the session's recorded params), and the official SDK client cut
// mid-call resumes through the balancer — the missing events once, from
// whichever node the resume lands on.
// TM_STORE=pg: the gateways share a PostgreSQL cluster instead (store_env.mjs).
// Exits 77 (skipped) when the store's server or haproxy is not installed.
//   node gateway_cluster.mjs GATEWAY CLIENT NODE EVERYTHING_JS SDK_CLIENT_JS
import { join } from "node:path";
import { checker, cliBrief, spawnCli } from "./mcp_http.mjs";
import { StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";

const [gateway, client, node, everythingJs, sdkClient] = process.argv.slice(2);
const t = checker();
skipUnlessStoreTools();
const c = new StoreCluster({ bin: gateway, nodes: 2, nodeArgs: ["--stdio", `${node} ${everythingJs} stdio`] });
try {
  await c.start();
  const u = `http://127.0.0.1:${c.lbPort}/mcp`;
  const state = join(c.dir, "client.db");
  const texts = [];
  for (let i = 0; i < 4; i++) {
    const r = await spawnCli(client, ["--protocol", "legacy", "--state", state, "--json", u, "call", "echo",
      `message=n${i}`]).done;
    texts.push(r.code === 0 ? r.json?.content?.[0]?.text : cliBrief(r));
  }
  t.check("one session, four calls through the balancer (both nodes): each answered",
    texts.every((x, i) => x === `Echo: n${i}`), JSON.stringify(texts));
  const served = [];
  for (const nd of c.nodes) {
    const m = await (await fetch(new URL("/metrics", nd.url))).text();
    served.push(Number((/^tidemark_http_requests_total (\d+)$/m.exec(m) ?? [])[1] ?? 0));
  }
  t.check("both nodes served requests of the session", served.every((n) => n > 1), JSON.stringify(served));
  const st = (await spawnCli(client, ["--state", state, u, "state"]).done).json;
  t.check("... in one session", typeof st?.session?.[0]?.id === "string" && st.session[0].id.length > 0,
    JSON.stringify(st?.session));
  const r = await spawnCli(node, [sdkClient, u], { env: { SDK_CLIENT_PROFILE: "everything" } }).done;
  t.check("the SDK client cut mid-call resumes through the balancer, exactly once",
    r.code === 0 && /OK all steps passed/.test(r.out), cliBrief(r));
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await c.stop();
}
t.done();
