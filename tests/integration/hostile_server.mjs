// hostile_server.mjs - a fake MCP server (Streamable HTTP) that misbehaves on
// purpose, for the client's hole tests (client_holes.mjs). It speaks just
// enough MCP to get a tidemark-client to its tools/call: initialize (JSON,
// Mcp-Session-Id), notifications (202), tools/list (one tool, `stream`, with
// no idempotent or read-only annotation, so the client may not re-send it
// blindly), DELETE. What happens to the call's POST and to resume GETs is
// the scenario's: onCall(ctx) and onGet(ctx) get the raw request and
// response and write whatever they like, garbage included.
//
// Every request is counted (stats), so a test can assert how many times the
// call was POSTed and how many resumes were tried, with which Last-Event-ID.
import { createServer } from "node:http";

export const EPOCH = "00c0ffee00c0ffee";
export const SESSION = "5e55104000000000000000000000abcd";
export const eid = (stream, seq) => `${EPOCH}-${stream}-${seq}`;

export const progressMsg = (token, p, total, message) => JSON.stringify({
  jsonrpc: "2.0", method: "notifications/progress",
  params: { progressToken: token, progress: p, total, ...(message ? { message } : {}) },
});
export const resultMsg = (id, text) => JSON.stringify({
  jsonrpc: "2.0", id, result: { content: [{ type: "text", text }] },
});

// The SSE response head; retry (optional) as its own block.
export function sseHead(res, retry) {
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
    "Mcp-Session-Id": SESSION });
  if (retry !== undefined) res.write(`retry: ${retry}\n\n`);
}

// One SSE block. id: undefined = no id line, "" = an empty `id:`; data may be
// a string or a Buffer (raw bytes, e.g. invalid UTF-8); undefined = no data
// line, "" = an empty `data:` (a priming event).
export function sseBlock({ id, event, data }) {
  const parts = [];
  if (event !== undefined) parts.push(Buffer.from(`event: ${event}\n`));
  if (id !== undefined) parts.push(Buffer.from(id === "" ? "id:\n" : `id: ${id}\n`));
  if (data !== undefined) {
    parts.push(Buffer.from("data: "));
    parts.push(Buffer.isBuffer(data) ? data : Buffer.from(data));
    parts.push(Buffer.from("\n"));
  }
  parts.push(Buffer.from("\n"));
  return Buffer.concat(parts);
}

// Write a block, waiting for the socket to drain; false once the peer is gone.
export function send(res, block) {
  if (res.destroyed || res.writableEnded) return Promise.resolve(false);
  return new Promise((resolve) => {
    const ok = res.write(block, (err) => { if (err) resolve(false); });
    if (ok) resolve(true);
    else {
      const done = (v) => { res.off("drain", onDrain); res.off("close", onClose); resolve(v); };
      const onDrain = () => done(true);
      const onClose = () => done(false);
      res.once("drain", onDrain);
      res.once("close", onClose);
    }
  });
}

// The usual first part of the call's stream: priming event (seq 1) and
// progress 1..k (seqs 2..k+1) of total.
export async function streamStart(ctx, k, total, retry = 100) {
  sseHead(ctx.res, retry);
  await send(ctx.res, sseBlock({ id: eid("r1", 1), data: "" }));
  for (let p = 1; p <= k; p++)
    await send(ctx.res, sseBlock({ id: eid("r1", p + 1), data: progressMsg(ctx.token, p, total) }));
}

const TOOLS = [{ name: "stream", description: "n progress notifications, then a result",
  inputSchema: { type: "object", properties: { n: { type: "integer" } } } }];

export function startHostile({ onCall, onGet, tools = TOOLS } = {}) {
  const stats = { calls: 0, callIds: [], callKeys: [], gets: [], posts: 0, sockets: 0, methods: [] };
  const open = new Set();
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => handle(req, res, Buffer.concat(chunks).toString("utf8")));
  });
  server.on("connection", (s) => {
    stats.sockets++;
    open.add(s);
    s.once("close", () => open.delete(s));
  });
  function json(res, status, body) {
    res.writeHead(status, { "Content-Type": "application/json", "Mcp-Session-Id": SESSION });
    res.end(JSON.stringify(body));
  }
  function handle(req, res, body) {
    if (req.method === "DELETE") return json(res, 200, {});
    if (req.method === "GET") {
      const last = req.headers["last-event-id"] ?? null;
      stats.gets.push(last);
      if (!onGet) { res.writeHead(405); return res.end(); }
      return onGet({ req, res, last, stats, n: stats.gets.length });
    }
    stats.posts++;
    let msg;
    try { msg = JSON.parse(body); } catch { return json(res, 400, { jsonrpc: "2.0", id: null, error: { code: -32700, message: "parse error" } }); }
    stats.methods.push(msg.method ?? "(response)");
    if (msg.method === "initialize")
      return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { protocolVersion: msg.params.protocolVersion,
        capabilities: { tools: {} }, serverInfo: { name: "hostile", version: "0" } } });
    if (msg.id === undefined || msg.method === undefined) { res.writeHead(202); return res.end(); }
    if (msg.method === "tools/list") return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { tools } });
    if (msg.method === "tools/call") {
      stats.calls++;
      stats.callIds.push(msg.id);
      stats.callKeys.push(msg.params?._meta?.["dev.tidemark/idempotency-key"] ?? null);
      const token = msg.params?._meta?.progressToken ?? msg.id;
      return onCall({ req, res, msg, id: msg.id, token, stats, n: stats.calls });
    }
    return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: {} });
  }
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/mcp`, stats,
        close: () => new Promise((r) => { for (const s of open) s.destroy(); server.close(() => r()); }),
      });
    });
  });
}
