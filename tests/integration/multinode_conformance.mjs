// multinode_conformance.mjs (CTest multinode_conformance, issue 6): three
// tidemark-everything nodes sharing one Redis behind HAProxy round-robin (no
// stickiness); the official conformance suite (--suite all) must pass 32/32
// through the load balancer. Before it, two cross-node checks: a sampling
// answer reaching the node that waits for it, and session state (logging
// level, subscriptions) holding whichever node takes a request.
//   node multinode_conformance.mjs TIDEMARK_EVERYTHING CONFORMANCE_SH PEERS_DIR
// TM_STORE=pg: the nodes share a PostgreSQL cluster instead (store_env.mjs).
// Exits 77 (skipped) only when the store's server or haproxy is not installed.
import { spawn } from "node:child_process";
import { StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";
import { readMessages } from "./sse.mjs";

const H = { "content-type": "application/json", accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2025-11-25" };

// Step 1 of issue 6, made deterministic: the sampling request waits on node
// 0, its answer is POSTed to node 1 directly (not through the LB), and the
// tool's result must still come out on node 0's stream.
// A session initialized on node url; returns the headers its requests carry.
async function openSession(url, capabilities, name) {
  const init = await fetch(url, { method: "POST", headers: H, body: JSON.stringify({ jsonrpc: "2.0", id: 0,
    method: "initialize", params: { protocolVersion: "2025-11-25", capabilities,
      clientInfo: { name, version: "1" } } }) });
  if (init.status !== 200) throw new Error("initialize " + init.status);
  const sid = init.headers.get("mcp-session-id");
  await init.text();
  const hs = { ...H, "mcp-session-id": sid };
  await (await fetch(url, { method: "POST", headers: hs,
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) })).text();
  return hs;
}

async function crossNodeSampling(cl) {
  const [a, b] = [cl.nodes[0].url, cl.nodes[1].url];
  const hs = await openSession(a, { sampling: {} }, "multinode");
  const res = await fetch(a, { method: "POST", headers: hs, body: JSON.stringify({ jsonrpc: "2.0", id: 7,
    method: "tools/call", params: { name: "test_sampling", arguments: { prompt: "hi" } } }),
    signal: AbortSignal.timeout(20000) });
  let answered = false, text = null;
  await readMessages(res, async (msg) => {
    if (msg.method === "sampling/createMessage" && !answered) {
      answered = true;
      const r = await fetch(b, { method: "POST", headers: hs, body: JSON.stringify({ jsonrpc: "2.0",
        id: msg.id, result: { role: "assistant", model: "m", content: { type: "text", text: "from node 1" } } }) });
      if (r.status !== 202) throw new Error("answer to node 1: HTTP " + r.status);
      await r.text();
    } else if (msg.id === 7) {
      text = JSON.stringify(msg.result ?? msg.error);
    }
  });
  if (text === null) throw new Error("cross-node sampling: stream ended without a result");
  if (!answered || !text.includes("from node 1")) throw new Error("cross-node sampling: " + text);
  console.log("cross-node sampling: request on node 0, answer via node 1: ok");
}

// One request to one node; every message of its answer, which must end in a result.
async function rpc(url, hs, id, method, params) {
  const res = await fetch(url, { method: "POST", headers: hs, body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
    signal: AbortSignal.timeout(10000) });
  if (res.status !== 200) throw new Error(`${method} on ${url}: HTTP ${res.status} ${await res.text()}`);
  const msgs = [];
  await readMessages(res, (m) => msgs.push(m));
  const last = msgs.find((m) => m.id === id);
  if (!last || !last.result) throw new Error(`${method} on ${url}: ${JSON.stringify(last ?? msgs)}`);
  return msgs;
}

async function waitFor(what, pred, ms) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Session state lives in the store, so each request may go to another node:
// the logging level set through one node holds for a tool on another; a
// subscription made through one node, an update signalled on a second, and
// the notification arrives on the standalone stream held by a third.
async function crossNodeSessionState(cl) {
  const [a, b, c] = cl.nodes.map((n) => n.url);
  const hs = await openSession(a, {}, "multinode-state");
  const sid = hs["mcp-session-id"];
  const ctl = new AbortController();
  const get = await fetch(b, { method: "GET", headers: { accept: "text/event-stream", "mcp-session-id": sid,
    "mcp-protocol-version": "2025-11-25" }, signal: ctl.signal });
  if (get.status !== 200) throw new Error("GET on node 1: HTTP " + get.status);
  const seen = [];
  const pump = readMessages(get, (m) => seen.push(m)).catch(() => {});
  const logs = (msgs) => msgs.filter((m) => m.method === "notifications/message").length;
  try {
    await rpc(c, hs, 1, "logging/setLevel", { level: "warning" });
    const quiet = await rpc(a, hs, 2, "tools/call", { name: "test_tool_with_logging", arguments: {} });
    if (logs(quiet) !== 0) throw new Error(`level "warning" set via node 2, node 0 still sent ${logs(quiet)} info messages`);
    await rpc(b, hs, 3, "logging/setLevel", { level: "info" });
    const loud = await rpc(c, hs, 4, "tools/call", { name: "test_tool_with_logging", arguments: {} });
    if (logs(loud) !== 3) throw new Error(`level "info" set via node 1: node 2 sent ${logs(loud)} of 3 messages`);

    const updated = (uri) => seen.some((m) => m.method === "notifications/resources/updated" && m.params?.uri === uri);
    await rpc(c, hs, 5, "resources/subscribe", { uri: "test://watched-resource" });
    await rpc(a, hs, 6, "tools/call", { name: "update_resource", arguments: {} });
    await waitFor("the update on node 1's GET stream", () => updated("test://watched-resource"), 5000);
    await rpc(a, hs, 7, "resources/unsubscribe", { uri: "test://watched-resource" });
    await rpc(b, hs, 8, "resources/subscribe", { uri: "test://static-text" });
    await rpc(c, hs, 9, "tools/call", { name: "update_resource", arguments: {} }); // unsubscribed: nothing
    await rpc(c, hs, 10, "tools/call", { name: "update_resource", arguments: { uri: "test://static-text" } });
    await waitFor("the second update", () => updated("test://static-text"), 5000);
    const got = seen.filter((m) => m.method === "notifications/resources/updated").map((m) => m.params.uri);
    if (JSON.stringify(got) !== JSON.stringify(["test://watched-resource", "test://static-text"]))
      throw new Error("resource updates on the standalone stream: " + JSON.stringify(got));
    console.log("cross-node session state: log level, subscriptions and updates across 3 nodes: ok");
  } finally {
    ctl.abort();
    await pump;
  }
}

const [bin, conformance, peers] = process.argv.slice(2);
if (!bin || !conformance || !peers) {
  console.error("usage: multinode_conformance.mjs TIDEMARK_EVERYTHING CONFORMANCE_SH PEERS_DIR");
  process.exit(2);
}
skipUnlessStoreTools();

const cl = new StoreCluster({ bin, nodes: 3 });
let rc = 1;
try {
  await cl.start();
  console.log(`cluster: ${cl.storeName}, nodes ${cl.nodes.map((n) => n.port).join(", ")}, ` +
    `haproxy ${cl.url}`);
  await crossNodeSampling(cl);
  await crossNodeSessionState(cl);
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
