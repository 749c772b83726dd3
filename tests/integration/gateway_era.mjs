// gateway_era.mjs (CTest gateway_era): a 2026-07-28 client through
// tidemark-gateway in front of a 2025-only stdio server (the official
// server-everything): tidemark-client --protocol modern finds the modern era
// (server/discover is the gateway's), lists the child's tools, calls them
// (a result, a JSON-RPC error passed on as the child sent it, progress on the
// call's stream), and a 2025 client of the same gateway is served too.
//   node gateway_era.mjs GATEWAY CLIENT NODE EVERYTHING_JS
import { checker, cliBrief, spawnCli, startServer, stopServer } from "./mcp_http.mjs";

const [gateway, client, node, everythingJs] = process.argv.slice(2);
const t = checker();

const run = (args) => spawnCli(client, args).done;
const brief = cliBrief;

const gw = await startServer(gateway, ["--store", "memory", "--stdio", `${node} ${everythingJs} stdio`],
  { ms: 30000 });
const u = gw.url;
try {
  const M = ["--protocol", "modern"];
  let r = await run([...M, "--json", u, "tools"]);
  const names = (r.json ?? []).map((x) => x.name);
  t.check("modern: the child's tools are listed", r.code === 0 && names.includes("echo") &&
    names.includes("trigger-long-running-operation"), brief(r));
  r = await run([...M, "--json", u, "call", "echo", "message=bridged"]);
  t.check("modern: a call of the 2025-only child answers", r.code === 0 &&
    r.json?.content?.[0]?.text === "Echo: bridged" && r.json?.resultType === "complete", brief(r));
  r = await run([...M, "--json", u, "call", "get-sum", "a=2", "b=40"]);
  t.check("modern: its structured answer", r.code === 0 && /42/.test(r.json?.content?.[0]?.text ?? ""), brief(r));
  r = await run([...M, u, "call", "trigger-long-running-operation", "duration=1", "steps=5"]);
  const steps = (r.err.match(/progress \d+\/5/g) ?? []).length;
  t.check("modern: progress of the child reaches the client", r.code === 0 && steps === 5 &&
    /Steps: 5/.test(r.out), `${steps} progress lines; ` + brief(r));
  r = await run([...M, "--json", u, "call", "get-sum", "a=x"]);
  t.check("modern: the child's error for bad arguments is passed on, typed", r.code === 1 &&
    (Number.isInteger(r.json?.code) || r.json?.isError === true), brief(r));
  r = await run(["--protocol", "legacy", "--json", u, "call", "echo", "message=old"]);
  t.check("2025 client of the same gateway", r.code === 0 && r.json?.content?.[0]?.text === "Echo: old", brief(r));
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(gw);
}
t.done();
