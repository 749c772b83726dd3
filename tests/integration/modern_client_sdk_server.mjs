#!/usr/bin/env node
// A 2026-07-28 ("modern") MCP server built only from the official TypeScript
// SDK v2 (@modelcontextprotocol/server 2.4.0 and its Node adapter, pinned in
// peers/), over Streamable HTTP, for testing tidemark-client in the modern era.
//
//   node tests/integration/modern_client_sdk_server.mjs [--port N]
//
// Listens on 127.0.0.1, endpoint /mcp; prints one line "listening on URL" on
// stdout when ready. createMcpHandler serves both eras (legacy stateless
// fallback by default). Tools:
//   echo {text}            -> text <text>
//   add {a, b}             -> text "sum <a+b>"
//   confirm {what}         -> an InputRequiredResult with an elicitation (key
//                             "confirm", requestState "st-<what>"); the retry
//                             answers "confirmed <what>: <action> <JSON content>"
//                             and checks the state came back unchanged
//   touch {}               -> publishes tools/list_changed and resources/updated
//                             (test://hello) on the listen bus, then text "touched"
// Resource test://hello ("hello"); prompt greet {name} -> "Hello, <name>!".
// GET /stats (not MCP): what the server saw, as JSON (methods, headers of calls).
import http from 'node:http';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const peers = path.resolve(process.env.TIDEMARK_PEERS_DIR ?? path.join(here, '..', '..', 'peers'));
const req = createRequire(path.join(peers, 'package.json'));
const load = (name) => import(pathToFileURL(req.resolve(name)).href);
const { McpServer, createMcpHandler, inputRequired, fromJsonSchema } = await load('@modelcontextprotocol/server');
const { toNodeHandler } = await load('@modelcontextprotocol/node');

const portArg = process.argv.indexOf('--port');
const port = portArg > 0 ? Number(process.argv[portArg + 1]) : 0;
const stats = { methods: [], calls: [] };

const schema = (props, required = Object.keys(props)) =>
  fromJsonSchema({ type: 'object', properties: props, required });
const text = (t) => ({ content: [{ type: 'text', text: t }] });

let handler;
function factory() {
  const s = new McpServer({ name: 'modern-sdk-peer', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: {} } });
  s.registerTool('echo', { description: 'echo text', inputSchema: schema({ text: { type: 'string' } }) },
    async ({ text: t }) => text(t));
  s.registerTool('add', { description: 'add two numbers',
    inputSchema: schema({ a: { type: 'number' }, b: { type: 'number' } }),
    annotations: { readOnlyHint: true } }, async ({ a, b }) => text(`sum ${a + b}`));
  s.registerTool('confirm', { description: 'asks for a confirmation (MRTR)',
    inputSchema: schema({ what: { type: 'string' } }) }, async ({ what }, ctx) => {
    const responses = ctx.mcpReq.inputResponses;
    const answer = responses?.confirm;
    if (!answer) {
      return inputRequired({
        inputRequests: {
          confirm: inputRequired.elicit({ message: `Confirm ${what}?`,
            requestedSchema: { type: 'object', properties: { ok: { type: 'boolean', default: true } } } }),
        },
        requestState: `st-${what}`,
      });
    }
    const state = typeof ctx.mcpReq.requestState === "function" ? ctx.mcpReq.requestState() : ctx.mcpReq.requestState;
    if (state !== `st-${what}`) return { ...text(`bad state ${state}`), isError: true };
    return text(`confirmed ${what}: ${answer.action} ${JSON.stringify(answer.content ?? {})}`);
  });
  s.registerTool('touch', { description: 'publish change notifications', inputSchema: schema({}, []) },
    async () => {
      handler.notify.toolsChanged();
      handler.notify.resourceUpdated('test://hello');
      return text('touched');
    });
  s.registerResource('hello', 'test://hello', { mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'hello' }] }));
  s.registerPrompt('greet', { description: 'greet someone', argsSchema: schema({ name: { type: 'string' } }) },
    async ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}!` } }] }));
  return s;
}

handler = createMcpHandler(factory, { onerror: (e) => process.stderr.write(`sdk: ${e.message}\n`) });
const node = toNodeHandler(handler);
const server = http.createServer((request, response) => {
  if (request.method === 'GET' && request.url === '/stats') {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(stats));
    return;
  }
  const chunks = [];
  request.on('data', (d) => chunks.push(d));
  request.on('end', () => {
    let body = null;
    try { body = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { /* not JSON */ }
    if (body?.method) {
      stats.methods.push({ method: body.method, version: request.headers['mcp-protocol-version'] ?? null,
        session: request.headers['mcp-session-id'] ?? null, mcpMethod: request.headers['mcp-method'] ?? null,
        mcpName: request.headers['mcp-name'] ?? null, id: body.id ?? null,
        key: body.params?._meta?.['dev.tidemark/idempotency-key'] ?? null });
    }
    node(request, response, body ?? undefined);
  });
});
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening on http://127.0.0.1:${server.address().port}/mcp\n`);
});
const stop = () => { server.closeAllConnections?.(); server.close(() => process.exit(0)); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
