// modern_sdk_v2.mjs - the official TypeScript SDK v2 client
// (@modelcontextprotocol/client 2.4.0, pinned in peers/) against
// tidemark-everything: pinned to 2026-07-28 (tools, resources, prompts, an
// MRTR elicitation round answered by its elicitation handler,
// subscriptions/listen notifications), in 'auto' negotiation (it must pick
// the modern era here), and in legacy mode (initialize and a session).
//
//   node modern_sdk_v2.mjs TIDEMARK_EVERYTHING PEERS_DIR
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { checker, startServer, stopServer } from "./mcp_http.mjs";

const [bin, peers] = process.argv.slice(2);
if (!bin || !peers) {
  console.error("usage: modern_sdk_v2.mjs TIDEMARK_EVERYTHING PEERS_DIR");
  process.exit(2);
}
const require = createRequire(join(resolve(peers), "package.json"));
const { Client, StreamableHTTPClientTransport } = await import(require.resolve("@modelcontextprotocol/client"));
const t = checker();
const MODERN = "2026-07-28";

function client(mode) {
  const c = new Client({ name: "sdk-v2-interop", version: "1.0.0" },
    { capabilities: { elicitation: {} }, versionNegotiation: { mode } });
  c.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: { name: "Alice" } }));
  return c;
}
const textOf = (r) => (r?.content ?? []).map((x) => x.text ?? "").join("");

async function modernRound(url) {
  const c = client({ pin: MODERN });
  await c.connect(new StreamableHTTPClientTransport(new URL(url)));
  t.check("pinned 2026-07-28: connected in the modern era", c.getNegotiatedProtocolVersion() === MODERN,
    String(c.getNegotiatedProtocolVersion()));
  const tools = await c.listTools();
  t.check("modern tools/list lists echo and the MRTR tool",
    tools.tools.some((x) => x.name === "echo") &&
    tools.tools.some((x) => x.name === "test_input_required_result_elicitation"), tools.tools.map((x) => x.name).join());
  const echo = await c.callTool({ name: "echo", arguments: { text: "v2" } });
  t.check("modern tools/call echo", textOf(echo) === "v2", JSON.stringify(echo));
  const res = await c.readResource({ uri: "test://static-text" });
  t.check("modern resources/read", res.contents?.[0]?.uri === "test://static-text", JSON.stringify(res));
  const p = await c.getPrompt({ name: "test_simple_prompt" });
  t.check("modern prompts/get", Array.isArray(p.messages) && p.messages.length > 0, JSON.stringify(p));
  const m = await c.callTool({ name: "test_input_required_result_elicitation", arguments: {} });
  t.check("modern MRTR: the SDK answers inputRequests with its elicitation handler and the retry completes",
    textOf(m).includes("Alice"), JSON.stringify(m));
  let changed = 0;
  c.setNotificationHandler("notifications/tools/list_changed", () => { changed++; });
  const sub = await c.listen({ toolsListChanged: true });
  t.check("modern subscriptions/listen acknowledged with toolsListChanged", sub.honoredFilter?.toolsListChanged === true,
    JSON.stringify(sub.honoredFilter));
  await c.callTool({ name: "test_trigger_tool_change", arguments: {} });
  const end = Date.now() + 10000;
  while (changed === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  t.check("modern listen: notifications/tools/list_changed delivered", changed > 0);
  await sub.close();
  await c.close();
}

async function autoRound(url) {
  const c = client("auto");
  await c.connect(new StreamableHTTPClientTransport(new URL(url)));
  t.check("auto negotiation picks 2026-07-28 against tidemark", c.getNegotiatedProtocolVersion() === MODERN,
    String(c.getNegotiatedProtocolVersion()));
  await c.close();
}

async function legacyRound(url) {
  const c = client("legacy");
  const tr = new StreamableHTTPClientTransport(new URL(url));
  await c.connect(tr);
  t.check("legacy mode: initialize gives a session in a 2025 version",
    !!tr.sessionId && /^2025-/.test(c.getNegotiatedProtocolVersion() ?? ""),
    `${tr.sessionId} ${c.getNegotiatedProtocolVersion()}`);
  const echo = await c.callTool({ name: "echo", arguments: { text: "legacy" } });
  t.check("legacy tools/call echo", textOf(echo) === "legacy", JSON.stringify(echo));
  await c.close();
}

let s;
try {
  s = await startServer(bin, ["--store", "memory"]);
  for (const round of [modernRound, autoRound, legacyRound]) {
    try {
      await round(s.url);
    } catch (e) {
      t.check(`${round.name} ran to its end`, false, e.stack);
    }
  }
} finally {
  await stopServer(s);
}
t.done();
