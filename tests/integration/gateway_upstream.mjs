// gateway_upstream.mjs (CTest gateway_upstream): tidemark-gateway --upstream
// in front of a Streamable HTTP server built only from the official
// TypeScript SDK 1.32.2 (sdk_server.mjs, in-memory event store):
//   - the official SDK client through the gateway: tools, progress, and a cut
//     of its own connection after 5 of 40 progress notifications resumed with
//     exactly the 35 missing and one result (sdk_client.mjs, strict ids);
//   - tidemark-check passes every check against the gateway;
//   - the upstream's elicitation reaches the gateway's client and its answer
//     goes back; a 2026-07-28 client is served from the 2025 upstream;
//   - the upstream killed mid-call: a typed error, never a silent answer;
//   - a fault-injecting proxy (tm-proxy) between the gateway and the
//     upstream cuts every upstream response after 2000-3000 bytes: the
//     gateway resumes upstream with Last-Event-ID, and its client gets the
//     40 progress notifications once each, in order, and the one result.
//   node gateway_upstream.mjs GATEWAY CLIENT CHECK NODE SDK_SERVER_JS SDK_CLIENT_JS PROXY
import { spawn } from "node:child_process";
import { reaped } from "./reap.mjs";
import { readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, cliBrief, spawnCli, startServer, stopServer, until } from "./mcp_http.mjs";
import { freePort, waitTcp } from "./multinode_env.mjs";

const [gateway, client, check, node, sdkServer, sdkClient, proxy] = process.argv.slice(2);
const t = checker();
let up = null, gw = null, px = null;
const log = join(tmpdir(), `tm-gw-proxy-${process.pid}.log`);

// The gateway -> upstream responses cut by tm-proxy (every one longer than
// 2000 bytes, somewhere in 2000-3000): the upstream stream is resumed.
async function upstreamCut() {
  up = await startSdkServer();
  const port = await freePort();
  px = { proc: spawnCli(proxy, ["--listen", `127.0.0.1:${port}`, "--target", new URL(up.url).host,
    "--seed", "1", "--mode", "cut", "--rate", "1", "--min-offset", "2000", "--max-offset", "3000",
    "--log", log], { ms: 120000 }).proc };
  await waitTcp(port);
  gw = await startServer(gateway, ["--store", "memory", "--upstream", `http://127.0.0.1:${port}/mcp`],
    { ms: 30000 });
  const r = await spawnCli(client, ["--protocol", "legacy", "--json", gw.url, "call", "stream", "n=40",
    "delay_ms=20"]).done;
  const seen = [...r.err.matchAll(/progress (\d+)\/40/g)].map((m) => Number(m[1]));
  const faults = (readFileSync(log, "utf8").match(/^fault /gm) ?? []).length;
  t.check("upstream responses were cut by the proxy", faults >= 2, `${faults} faults`);
  t.check("through the cuts: progress 1..40 once each, in order, and the result",
    r.code === 0 && r.json?.content?.[0]?.text === "streamed 40" && seen.length === 40 &&
      seen.every((v, i) => v === i + 1), `${JSON.stringify(seen)}; ` + cliBrief(r));
}

// sdk_server.mjs prints its URL once it listens (a port of its own).
function startSdkServer() {
  return new Promise((resolve, reject) => {
    const proc = reaped(spawn(node, [sdkServer], { stdio: ["ignore", "pipe", "pipe"] }));
    let out = "";
    const timer = setTimeout(() => reject(new Error("sdk_server.mjs did not start")), 15000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = /^listening on (\S+)$/m.exec(out);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1] }); }
    });
    proc.once("exit", (c) => { clearTimeout(timer); reject(new Error(`sdk_server.mjs exited (${c})`)); });
  });
}
try {
  up = await startSdkServer();
  gw = await startServer(gateway, ["--store", "memory", "--upstream", up.url], { ms: 30000 });
  const u = gw.url;
  let r = await spawnCli(node, [sdkClient, u], { env: { SDK_CLIENT_STRICT_IDS: "1" } }).done;
  t.check("the SDK client through the gateway: tools, progress, cut and resume exactly once",
    r.code === 0 && /OK all steps passed/.test(r.out), cliBrief(r));
  r = await spawnCli(check, [u], { ms: 120000 }).done;
  t.check("tidemark-check: no check failed", r.code === 0 && /\b0 failed/.test(r.out), cliBrief(r));
  r = await spawnCli(client, ["--protocol", "legacy", "--elicit", "accept", "--json", u, "call",
    "ask_elicitation", "message=hi"]).done;
  t.check("the upstream's elicitation is answered by the gateway's client",
    r.code === 0 && /^elicited: accept/.test(r.json?.content?.[0]?.text ?? ""), cliBrief(r));
  r = await spawnCli(client, ["--protocol", "modern", "--json", u, "call", "echo", "text=modern"]).done;
  t.check("a 2026-07-28 client served from the 2025 upstream",
    r.code === 0 && r.json?.content?.[0]?.text === "modern" && r.json.resultType === "complete", cliBrief(r));
  const slow = spawnCli(client, ["--protocol", "legacy", "--json", u, "call", "stream", "n=50",
    "delay_ms=100"]);
  let seen = "";
  slow.proc.stderr.on("data", (d) => { seen += d; });
  await until("progress of the call through the gateway", async () => /progress 3\/50/.test(seen), 15000);
  await stopServer(up, "SIGKILL");
  up = null;
  r = await slow.done;
  t.check("the upstream killed mid-call: a typed error, not a result",
    r.code !== 0 && typeof r.json?.data?.reason === "string" && !/streamed/.test(r.out), cliBrief(r));
  await stopServer(gw);
  gw = null;
  await upstreamCut();
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(gw);
  await stopServer(up);
  await stopServer(px);
  rmSync(log, { force: true });
}
t.done();
