// multinode_conformance.mjs (CTest multinode_conformance, issue 6): three
// tidemark-everything nodes sharing one Redis behind HAProxy round-robin (no
// stickiness); the official conformance suite (--suite all) must pass 32/32
// through the load balancer.
//   node multinode_conformance.mjs TIDEMARK_EVERYTHING CONFORMANCE_SH PEERS_DIR
// Exits 77 (skipped) only when redis-server or haproxy is not installed.
import { spawn } from "node:child_process";
import { Cluster, missingTools } from "./multinode_env.mjs";

const H = { "content-type": "application/json", accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2025-11-25" };

// Step 1 of issue 6, made deterministic: the sampling request waits on node
// 0, its answer is POSTed to node 1 directly (not through the LB), and the
// tool's result must still come out on node 0's stream.
async function crossNodeSampling(cl) {
  const [a, b] = [cl.nodes[0].url, cl.nodes[1].url];
  const init = await fetch(a, { method: "POST", headers: H, body: JSON.stringify({ jsonrpc: "2.0", id: 0,
    method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: { sampling: {} },
      clientInfo: { name: "multinode", version: "1" } } }) });
  if (init.status !== 200) throw new Error("initialize " + init.status);
  const sid = init.headers.get("mcp-session-id");
  await init.text();
  const hs = { ...H, "mcp-session-id": sid };
  await (await fetch(a, { method: "POST", headers: hs,
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) })).text();
  const res = await fetch(a, { method: "POST", headers: hs, body: JSON.stringify({ jsonrpc: "2.0", id: 7,
    method: "tools/call", params: { name: "test_sampling", arguments: { prompt: "hi" } } }),
    signal: AbortSignal.timeout(20000) });
  const dec = new TextDecoder();
  let buf = "", answered = false;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("");
      if (!data) continue;
      const msg = JSON.parse(data);
      if (msg.method === "sampling/createMessage" && !answered) {
        answered = true;
        const r = await fetch(b, { method: "POST", headers: hs, body: JSON.stringify({ jsonrpc: "2.0",
          id: msg.id, result: { role: "assistant", model: "m", content: { type: "text", text: "from node 1" } } }) });
        if (r.status !== 202) throw new Error("answer to node 1: HTTP " + r.status);
        await r.text();
      } else if (msg.id === 7) {
        const text = JSON.stringify(msg.result ?? msg.error);
        if (!answered || !text.includes("from node 1")) throw new Error("cross-node sampling: " + text);
        console.log("cross-node sampling: request on node 0, answer via node 1: ok");
        return;
      }
    }
  }
  throw new Error("cross-node sampling: stream ended without a result");
}

const [bin, conformance, peers] = process.argv.slice(2);
if (!bin || !conformance || !peers) {
  console.error("usage: multinode_conformance.mjs TIDEMARK_EVERYTHING CONFORMANCE_SH PEERS_DIR");
  process.exit(2);
}
const missing = missingTools();
if (missing.length) {
  console.log(`SKIP: not installed: ${missing.join(", ")} (scripts/install-deps.sh installs them)`);
  process.exit(77);
}

const cl = new Cluster({ bin, nodes: 3 });
let rc = 1;
try {
  await cl.start();
  console.log(`cluster: redis :${cl.redisPort}, nodes ${cl.nodes.map((n) => n.port).join(", ")}, ` +
    `haproxy ${cl.url}`);
  await crossNodeSampling(cl);
  rc = await new Promise((resolve) => {
    const p = spawn(conformance, [peers, cl.url], { stdio: "inherit" });
    const t = setTimeout(() => p.kill("SIGKILL"), 150000);
    p.on("exit", (code) => { clearTimeout(t); resolve(code ?? 1); });
  });
  for (let i = 0; i < cl.nodes.length; i++)
    if (!cl.nodes[i] || cl.nodes[i].proc.exitCode !== null) { console.error(`node ${i} died`); rc = 1; }
} catch (e) {
  console.error("multinode_conformance: " + (e.stack ?? e));
  rc = 1;
} finally {
  await cl.stop();
}
process.exit(rc);
