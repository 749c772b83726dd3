// legacy_same_id.mjs - replays requests.pml's counterexample
// bad-2025-no-claim (once finding-2025-eexist-runs) on a running
// tidemark-server: two 2025 POSTs of the same session and the same
// request id sent at once, each a
// ledger_append (an atomic tool: exactly once per request). Prints how many
// requests wrote more than one ledger row; exit 1 when any did.
//
//   node model/witness/legacy_same_id.mjs URL [PAIRS] [DELAY_MS]
//   (URL of a fresh server, e.g. tidemark-server --store sqlite:/tmp/x.db;
//    DELAY_MS > 0 runs the tool on a worker instead of inline)
const [url, pairsArg, delayArg] = process.argv.slice(2);
if (!url) {
  console.error("usage: legacy_same_id.mjs URL [PAIRS] [DELAY_MS]");
  process.exit(2);
}
const PAIRS = Number(pairsArg || 100);
const DELAY = Number(delayArg || 0);
const VERSION = "2025-06-18";

async function post(body, sid) {
  const headers = { "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": VERSION };
  if (sid) headers["Mcp-Session-Id"] = sid;
  const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  return { r, text: await r.text() };
}

// The JSON-RPC response with this id, from a JSON or an SSE body.
function response(text, id) {
  const lines = text.startsWith("{") ? [text] : text.split("\n").filter((l) => l.startsWith("data: "))
    .map((l) => l.slice(6));
  for (const l of lines) {
    try {
      const m = JSON.parse(l);
      if (m.id === id) return m;
    } catch { /* not JSON: a priming event */ }
  }
  return null;
}

const init = await post({ jsonrpc: "2.0", id: 0, method: "initialize", params: {
  protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "legacy_same_id", version: "1" } } });
const sid = init.r.headers.get("mcp-session-id");
if (!sid) {
  console.error("no session:", init.r.status, init.text.slice(0, 200));
  process.exit(2);
}
await post({ jsonrpc: "2.0", method: "notifications/initialized" }, sid);
const tag = `w${Date.now()}-`;
for (let i = 1; i <= PAIRS; i++) {
  const args = { entry: tag + i };
  if (DELAY) args.delay_ms = DELAY;
  const call = { jsonrpc: "2.0", id: 1000 + i, method: "tools/call",
                 params: { name: "ledger_append", arguments: args } };
  await Promise.all([post(call, sid), post(call, sid)]);
}
const read = await post({ jsonrpc: "2.0", id: 1, method: "tools/call",
                          params: { name: "ledger_read", arguments: {} } }, sid);
const rows = response(read.text, 1)?.result?.structuredContent?.entries;
if (!Array.isArray(rows)) {
  console.error("ledger_read gave no rows:", read.text.slice(0, 300));
  process.exit(2);
}
const per = new Map();
for (const row of rows) {
  if (typeof row.entry === "string" && row.entry.startsWith(tag))
    per.set(row.entry, (per.get(row.entry) || 0) + 1);
}
const twice = [...per].filter(([, n]) => n > 1).length;
console.log(`${PAIRS} requests sent twice at once: ${per.size} with a row, ${twice} with more than one`);
process.exit(twice ? 1 : 0);
