#!/usr/bin/env node
// Interoperability peer: a stateful Streamable HTTP MCP server built only from
// the official MCP TypeScript SDK (pinned in peers/), for testing Tidemark's
// client side against it.
//
//   node tests/integration/sdk_server.mjs [--port N]      (default/0: a free port)
//
// Listens on 127.0.0.1, endpoint /mcp. Once ready, prints exactly one line on
// stdout:   listening on http://127.0.0.1:PORT/mcp
// (everything else goes to stderr). Exits 0 on SIGTERM/SIGINT after closing
// every session.
//
// Server: the SDK's createMcpExpressApp (DNS-rebinding protection = Host must be
// 127.0.0.1, localhost or [::1], any port; otherwise 403) + one McpServer and one
// StreamableHTTPServerTransport per session (sessionIdGenerator: randomUUID) with
// its own InMemoryEventStore imported from the SDK's examples (resumability).
// Routing is the SDK examples' own:
//   - known Mcp-Session-Id          -> that session's transport (POST/GET/DELETE)
//   - unknown Mcp-Session-Id        -> 404 {"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}
//   - no session id, not initialize -> 400 {"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}
//   - no session id + initialize    -> new session (response carries mcp-session-id)
// Transport behaviour (SDK): POST answers text/event-stream; GET opens the
// standalone stream (409 if one is already open); GET + Last-Event-ID replays the
// stream that event id belongs to; DELETE -> 200 and the session is gone.
//
// Tools (same contract as Tidemark's demo server):
//   echo {text}                 -> text <text>
//   stream {n, delay_ms?}       -> n notifications/progress (progress 1..n, total n)
//                                  for the request's progressToken, delay_ms before
//                                  each, then text "streamed <n>"
//   ask_sampling {prompt}       -> sampling/createMessage to the client, then text
//                                  "sampled: <client's text>"
//   ask_elicitation {message}   -> elicitation/create (form: name/age/subscribe with
//                                  defaults Ada/36/true), then text
//                                  "elicited: <action> <JSON of content, {} if none>"
//   list_roots {}               -> roots/list to the client, then text
//                                  "roots: <JSON array of uris>"
// Resource test://hello (text/plain "hello"); prompt greet {name} -> user text
// "Hello, <name>!".
//
// Environment:
//   TIDEMARK_PEERS_DIR      peers/ folder holding node_modules (default: ../../peers
//                           relative to this script)
//   SDK_SERVER_CUT_AFTER=k  every `stream` call closes its SSE response (the SDK's
//                           closeSSEStream mechanism) once, right after its k-th
//                           progress notification (k=0: before the first; k>=n:
//                           never); the rest (progress and result) is stored and
//                           only reachable by GET + Last-Event-ID. Uses the request
//                           handler's extra.closeSSEStream (offered by the SDK only
//                           to clients at protocol >= 2025-11-25), else the
//                           transport's public closeSSEStream(requestId)
//   SDK_SERVER_RETRY_MS=ms  transport retryInterval: priming events then carry
//                           "retry: ms" (default: unset, no retry field)
//   SDK_SERVER_VERBOSE=1    log each HTTP request and transport errors to stderr
//
// Note: the SDK's example InMemoryEventStore orders replay by event id
// "<streamId>_<Date.now()>_<random>", so events stored in the same millisecond
// may replay out of order or be skipped; the `stream` tool therefore keeps its
// events in distinct milliseconds (costs at most ~1 ms per notification).

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { sdkImport, sdkRoot, sdkVersion } from './sdk_resolve.mjs';

const VERBOSE = process.env.SDK_SERVER_VERBOSE === '1';
const vlog = (...args) => {
    if (VERBOSE) console.error('[sdk_server]', ...args);
};

function usage(msg) {
    if (msg) console.error(msg);
    console.error('usage: node tests/integration/sdk_server.mjs [--port N]');
    process.exit(2);
}

function parseNonNegInt(s, what) {
    if (s === undefined || !/^\d+$/.test(s)) usage(`invalid ${what}: ${s}`);
    return Number(s);
}

// ---------------------------------------------------------------------------
// Arguments and environment
// ---------------------------------------------------------------------------
let port = 0;
{
    const argv = process.argv.slice(2);
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === '--port') port = parseNonNegInt(argv[++i], '--port');
        else if (a.startsWith('--port=')) port = parseNonNegInt(a.slice(7), '--port');
        else if (a === '-h' || a === '--help') usage();
        else usage(`unknown argument: ${a}`);
    }
    if (port > 65535) usage(`invalid --port: ${port}`);
}
const CUT_AFTER =
    process.env.SDK_SERVER_CUT_AFTER !== undefined && process.env.SDK_SERVER_CUT_AFTER !== ''
        ? parseNonNegInt(process.env.SDK_SERVER_CUT_AFTER, 'SDK_SERVER_CUT_AFTER')
        : undefined;
const RETRY_MS =
    process.env.SDK_SERVER_RETRY_MS !== undefined && process.env.SDK_SERVER_RETRY_MS !== ''
        ? parseNonNegInt(process.env.SDK_SERVER_RETRY_MS, 'SDK_SERVER_RETRY_MS')
        : undefined;


// zod, as the SDK itself resolves it (ESM entry from zod's exports map).
async function importZod() {
    const req = createRequire(path.join(sdkRoot(), 'package.json'));
    const pkgPath = req.resolve('zod/package.json');
    const pkg = JSON.parse(readFileSync(pkgPath, 'utf8'));
    const entry = pkg.exports?.['.']?.import;
    if (typeof entry === 'string') return import(pathToFileURL(path.join(path.dirname(pkgPath), entry)).href);
    return req('zod');
}

const { McpServer } = await sdkImport('server/mcp.js');
const { StreamableHTTPServerTransport } = await sdkImport('server/streamableHttp.js');
const { createMcpExpressApp } = await sdkImport('server/express.js');
const { isInitializeRequest } = await sdkImport('types.js');
const { InMemoryEventStore } = await sdkImport('examples/shared/inMemoryEventStore.js');
const zmod = await importZod();
const z = zmod.z ?? zmod.default ?? zmod;

// ---------------------------------------------------------------------------
// MCP server (one per session)
// ---------------------------------------------------------------------------
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// Wait until Date.now() is past `ms` (see the note on InMemoryEventStore above).
async function pastMillisecond(ms) {
    while (Date.now() <= ms) await sleep(1);
}

const text = t => ({ content: [{ type: 'text', text: t }] });

function buildServer(transport) {
    const mcp = new McpServer({ name: 'tidemark-sdk-peer-server', version: sdkVersion() });
    const srv = mcp.server;

    mcp.registerTool(
        'echo',
        {
            description: 'Returns its text argument as text content.',
            inputSchema: { text: z.string() },
            annotations: { readOnlyHint: true, idempotentHint: true }
        },
        async ({ text: t }) => text(t)
    );

    mcp.registerTool(
        'stream',
        {
            description: 'Sends n progress notifications (delay_ms apart), then returns.',
            inputSchema: {
                n: z.number().int().min(0).max(1000000),
                delay_ms: z.number().int().min(0).max(60000).optional()
            },
            annotations: { readOnlyHint: true, idempotentHint: true }
        },
        async ({ n, delay_ms }, extra) => {
            const token = extra._meta?.progressToken;
            const delay = delay_ms ?? 0;
            // The priming event was stored before this handler started.
            let lastStored = Date.now();
            const cut = () => {
                vlog(`stream request ${extra.requestId}: closing its SSE stream`);
                if (extra.closeSSEStream) extra.closeSSEStream();
                else transport.closeSSEStream(extra.requestId);
            };
            if (CUT_AFTER === 0) cut();
            for (let i = 1; i <= n; i++) {
                if (extra.signal.aborted) throw new Error('cancelled');
                if (delay) await sleep(delay);
                if (token !== undefined) {
                    await pastMillisecond(lastStored);
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: n }
                    });
                    lastStored = Date.now();
                }
                if (CUT_AFTER !== undefined && i === CUT_AFTER) cut();
            }
            await pastMillisecond(lastStored);
            return text(`streamed ${n}`);
        }
    );

    mcp.registerTool(
        'ask_sampling',
        {
            description: 'Asks the client for a sampling/createMessage completion of prompt.',
            inputSchema: { prompt: z.string() }
        },
        async ({ prompt }, extra) => {
            const res = await srv.createMessage(
                { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 50 },
                { relatedRequestId: extra.requestId }
            );
            const parts = Array.isArray(res.content) ? res.content : [res.content];
            const got = parts
                .filter(c => c?.type === 'text')
                .map(c => c.text)
                .join('');
            return text(`sampled: ${got}`);
        }
    );

    mcp.registerTool(
        'ask_elicitation',
        {
            description: 'Asks the client for form input (elicitation/create).',
            inputSchema: { message: z.string() }
        },
        async ({ message }, extra) => {
            const res = await srv.elicitInput(
                {
                    mode: 'form',
                    message,
                    requestedSchema: {
                        type: 'object',
                        properties: {
                            name: { type: 'string', default: 'Ada' },
                            age: { type: 'integer', default: 36 },
                            subscribe: { type: 'boolean', default: true }
                        }
                    }
                },
                { relatedRequestId: extra.requestId }
            );
            return text(`elicited: ${res.action} ${JSON.stringify(res.content ?? {})}`);
        }
    );

    mcp.registerTool(
        'list_roots',
        { description: "Lists the client's roots (roots/list).", inputSchema: {} },
        async (_args, extra) => {
            const res = await srv.listRoots(undefined, { relatedRequestId: extra.requestId });
            return text(`roots: ${JSON.stringify(res.roots.map(r => r.uri))}`);
        }
    );

    mcp.registerResource(
        'hello',
        'test://hello',
        { description: 'A fixed text resource.', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'hello' }] })
    );

    mcp.registerPrompt(
        'greet',
        { description: 'Greets someone by name.', argsSchema: { name: z.string() } },
        ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}!` } }] })
    );

    return mcp;
}

// ---------------------------------------------------------------------------
// HTTP: routing as in the SDK's examples (ssePollingExample / simpleStreamableHttp)
// ---------------------------------------------------------------------------
const sessions = new Map(); // session id -> { transport, mcp }
const jsonRpcError = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });

const app = createMcpExpressApp({ host: '127.0.0.1' });

app.all('/mcp', async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    if (VERBOSE) {
        const lei = req.headers['last-event-id'];
        const what = `${req.method} session=${sessionId ?? '-'}${lei ? ` last-event-id=${lei}` : ''}`;
        vlog(`${what} (${typeof req.body?.method === 'string' ? req.body.method : 'no method'})`);
        res.on('close', () => vlog(`${what} -> ${res.statusCode}${res.writableFinished ? '' : ' (aborted)'} closed`));
    }
    try {
        const session = sessionId ? sessions.get(sessionId) : undefined;
        if (session) {
            await session.transport.handleRequest(req, res, req.body);
            return;
        }
        if (sessionId) return jsonRpcError(res, 404, -32001, 'Session not found');
        if (req.method !== 'POST' || !isInitializeRequest(req.body))
            return jsonRpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');

        const transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            eventStore: new InMemoryEventStore(),
            ...(RETRY_MS !== undefined ? { retryInterval: RETRY_MS } : {}),
            onsessioninitialized: id => {
                vlog(`session ${id} initialized`);
                sessions.set(id, { transport, mcp });
            }
        });
        transport.onclose = () => {
            const sid = transport.sessionId;
            if (sid && sessions.delete(sid)) vlog(`session ${sid} closed`);
        };
        const mcp = buildServer(transport);
        await mcp.connect(transport);
        // Protocol.connect installed its own onerror; chain a logger in front.
        const protoOnError = transport.onerror;
        transport.onerror = err => {
            vlog(`transport error: ${err?.message ?? err}`);
            protoOnError?.(err);
        };
        await transport.handleRequest(req, res, req.body);
        // Rejected initialize (406, 415, ...): no session was created, drop it.
        if (transport.sessionId === undefined) await transport.close();
    } catch (err) {
        console.error('[sdk_server] error handling request:', err);
        if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal server error');
    }
});

const httpServer = app.listen(port, '127.0.0.1', err => {
    if (err) {
        console.error('[sdk_server] listen failed:', err);
        process.exit(1);
    }
    const addr = httpServer.address();
    process.stdout.write(`listening on http://127.0.0.1:${addr.port}/mcp\n`);
});
httpServer.on('error', err => {
    console.error('[sdk_server] server error:', err);
    process.exit(1);
});

// ---------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------
let shuttingDown = false;
async function shutdown(signal) {
    if (shuttingDown) return;
    shuttingDown = true;
    vlog(`${signal}: shutting down`);
    setTimeout(() => process.exit(0), 2000).unref();
    for (const { transport } of [...sessions.values()]) {
        try {
            await transport.close();
        } catch (err) {
            vlog(`closing a session failed: ${err?.message ?? err}`);
        }
    }
    httpServer.close(() => process.exit(0));
    httpServer.closeAllConnections?.();
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('unhandledRejection', err => console.error('[sdk_server] unhandled rejection:', err));
