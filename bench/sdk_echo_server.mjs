#!/usr/bin/env node
// sdk_echo_server.mjs - the baseline of bench/http.sh: a stateful Streamable
// HTTP MCP server made only of the official TypeScript SDK (the version
// pinned in peers/), set up as the SDK's own examples do it: express through
// createMcpExpressApp, one McpServer and StreamableHTTPServerTransport per
// session, each with the SDK examples' InMemoryEventStore (as
// tests/integration/sdk_server.mjs, which the tests use).
//
//   node bench/sdk_echo_server.mjs        (a free port on 127.0.0.1)
//
// Prints "listening on http://127.0.0.1:PORT/mcp" once ready. Tools:
//   echo {text}            -> text <text>
//   ledger_append {entry}  -> appends {session, entry} to one in-memory array
//                             (the process's ledger), text "appended <entry>"
//                             and structuredContent {entry, n}
//   stream {n}             -> n notifications/progress to the call's progress
//                             token (sent one after another, as tidemark's demo
//                             tool does), then text "streamed <n>"
// SIGTERM/SIGINT: close every session and exit 0.
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { sdkImport, sdkRoot } from '../tests/integration/sdk_resolve.mjs';

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

const ledger = [];
const text = t => ({ content: [{ type: 'text', text: t }] });

function buildServer(sessionOf) {
    const mcp = new McpServer({ name: 'tidemark-bench-sdk-server', version: '1' });
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
        'ledger_append',
        {
            description: 'Appends one entry to the in-memory ledger.',
            inputSchema: { entry: z.string() },
            annotations: { readOnlyHint: false, idempotentHint: false }
        },
        async ({ entry }) => {
            ledger.push({ session: sessionOf(), entry });
            return { ...text(`appended ${entry}`), structuredContent: { entry, n: ledger.length } };
        }
    );
    mcp.registerTool(
        'stream',
        {
            description: 'Sends n progress notifications, then answers.',
            inputSchema: { n: z.number().int().min(0).max(10000) }
        },
        async ({ n }, extra) => {
            const token = extra._meta?.progressToken;
            if (token !== undefined)
                for (let i = 1; i <= n; i++)
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: n }
                    });
            return text(`streamed ${n}`);
        }
    );
    return mcp;
}

const sessions = new Map();
const jsonRpcError = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
const app = createMcpExpressApp({ host: '127.0.0.1' });

async function newSession(req, res) {
    const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new InMemoryEventStore(),
        onsessioninitialized: id => sessions.set(id, transport)
    });
    transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
    await buildServer(() => transport.sessionId).connect(transport);
    await transport.handleRequest(req, res, req.body);
    if (transport.sessionId === undefined) await transport.close();
}

app.all('/mcp', async (req, res) => {
    const sid = req.headers['mcp-session-id'];
    try {
        const transport = sid ? sessions.get(sid) : undefined;
        if (transport) return await transport.handleRequest(req, res, req.body);
        if (sid) return jsonRpcError(res, 404, -32001, 'Session not found');
        if (req.method !== 'POST' || !isInitializeRequest(req.body))
            return jsonRpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
        await newSession(req, res);
    } catch (err) {
        console.error('[sdk_echo_server] error:', err);
        if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal server error');
    }
});

const httpServer = app.listen(0, '127.0.0.1', err => {
    if (err) {
        console.error('[sdk_echo_server] listen failed:', err);
        process.exit(1);
    }
    process.stdout.write(`listening on http://127.0.0.1:${httpServer.address().port}/mcp\n`);
});

async function shutdown() {
    setTimeout(() => process.exit(0), 2000).unref();
    for (const t of [...sessions.values()]) await t.close().catch(() => {});
    httpServer.close(() => process.exit(0));
    httpServer.closeAllConnections?.();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
