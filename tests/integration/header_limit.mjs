#!/usr/bin/env node
// Header and body limits with libmicrohttpd's small per-connection pool
// (max header bytes + a reserve; 10 KiB by default):
//   - headers just under the limit are served;
//   - headers over it get 431 with a JSON-RPC error, data.reason
//     "headers_too_large" and data.limit, then the connection closes
//     (POST and GET);
//   - headers far over the pool still get a 431 (libmicrohttpd's own);
//   - a body of megabytes (up to --max-body) still works: the body is not
//     kept in the pool, and a large answer streams through it;
//   - over --max-body is still 413 body_too_large.
//
//   node tests/integration/header_limit.mjs http://127.0.0.1:PORT/mcp
//
// Raw node:net sockets, one connection per request (Connection: close), so
// the header sizes are exactly what is sent. Every read has a deadline.

import net from 'node:net';
import assert from 'node:assert/strict';

const URL_ = new URL(process.argv[2] ?? '');
const LIMIT = Number(process.env.HEADER_LIMIT ?? 8192); // max header bytes (--max-header-bytes)
const MAX_BODY = 4 * 1024 * 1024; // the default --max-body
const TIMEOUT_MS = 10000;

// Send raw bytes; resolve with everything the server sent before it closed.
// halfClose: end the sending side after the request (one write: none left
// to fail once the server has closed). A request whose client half-closes
// may be dropped unanswered by libmicrohttpd when it reads the FIN before it
// has processed the request (docs/design.md, "Known limitations"): what
// must be answered is sent without it (Connection: close ends it).
function exchange(head, body = '', halfClose = true) {
    return new Promise((resolve, reject) => {
        const s = net.connect(Number(URL_.port), URL_.hostname);
        const chunks = [];
        const timer = setTimeout(() => {
            s.destroy();
            reject(new Error(`no complete answer within ${TIMEOUT_MS} ms`));
        }, TIMEOUT_MS);
        s.on('data', (d) => chunks.push(d));
        s.on('error', () => {}); // judged by what arrived before the close
        s.on('close', () => {
            clearTimeout(timer);
            resolve(Buffer.concat(chunks));
        });
        if (halfClose)
            s.end(head + body);
        else
            s.write(head + body);
    });
}

// Status, headers (lower-case names) and the de-chunked body.
function parse(raw) {
    const end = raw.indexOf('\r\n\r\n');
    assert.ok(end > 0, `expected an HTTP answer, got ${raw.length} bytes: ${raw.toString().slice(0, 200)}`);
    const lines = raw.subarray(0, end).toString().split('\r\n');
    const status = Number(lines[0].split(' ')[1]);
    const headers = {};
    for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    let body = raw.subarray(end + 4);
    if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
        const parts = [];
        let p = 0;
        for (;;) {
            const nl = body.indexOf('\r\n', p);
            const n = parseInt(body.subarray(p, nl).toString(), 16);
            if (!(n > 0))
                break;
            parts.push(body.subarray(nl + 2, nl + 2 + n));
            p = nl + 2 + n + 2;
        }
        body = Buffer.concat(parts);
    }
    return { status, headers, body: body.toString() };
}

function request(method, headers, body = '', halfClose = true) {
    const all = { Host: `${URL_.hostname}:${URL_.port}`, Connection: 'close', ...headers };
    if (method === 'POST')
        all['Content-Length'] = Buffer.byteLength(body);
    let head = `${method} ${URL_.pathname} HTTP/1.1\r\n`;
    for (const [k, v] of Object.entries(all))
        head += `${k}: ${v}\r\n`;
    return exchange(head + '\r\n', body, halfClose).then(parse);
}

const POST_H = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
const rpc = (id, method, params) => JSON.stringify({ jsonrpc: '2.0', id, method, params });

// The JSON-RPC message of an answer: JSON, or the last SSE data line.
function message(ans) {
    if (/event-stream/.test(ans.headers['content-type'] ?? '')) {
        const data = ans.body.split('\n').filter((l) => l.startsWith('data: ') && l.length > 6);
        return JSON.parse(data[data.length - 1].slice(6));
    }
    return JSON.parse(ans.body);
}

async function session() {
    const init = await request('POST', POST_H, rpc(0, 'initialize', {
        protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'header_limit', version: '1' },
    }));
    assert.equal(init.status, 200);
    const sid = init.headers['mcp-session-id'];
    assert.ok(sid, 'initialize answered with a session id');
    const h = { ...POST_H, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' };
    const done = await request('POST', h, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    assert.equal(done.status, 202);
    return h;
}

function expectTooLarge(ans, what) {
    assert.equal(ans.status, 431, `${what}: status`);
    assert.equal(ans.headers.connection, 'close', `${what}: the connection closes`);
    const m = JSON.parse(ans.body);
    assert.equal(m.error.code, -32600, `${what}: error.code`);
    assert.equal(m.error.data.reason, 'headers_too_large', `${what}: data.reason`);
    assert.equal(m.error.data.limit, LIMIT, `${what}: data.limit`);
}

const cases = [
    ['headers just under the limit are served', async (h) => {
        const ans = await request('POST', { ...h, 'X-Pad': 'a'.repeat(LIMIT - 1200) }, rpc(1, 'ping', {}));
        assert.equal(ans.status, 200);
        assert.deepEqual(message(ans).result, {});
    }],
    ['POST with headers over the limit: 431 headers_too_large', async (h) => {
        expectTooLarge(await request('POST', { ...h, 'X-Pad': 'a'.repeat(LIMIT) }, rpc(2, 'ping', {})), 'POST');
    }],
    ['many small header fields over the limit: 431 headers_too_large', async (h) => {
        const many = {};
        for (let i = 0; i < Math.round(LIMIT * 96 / 8192); i++) // over the limit, inside the pool
            many[`X-F${i}`] = 'v'.repeat(16);
        expectTooLarge(await request('POST', { ...h, ...many }, rpc(3, 'ping', {})), 'many fields');
    }],
    ['GET with headers over the limit: 431 headers_too_large', async (h) => {
        const g = { Accept: 'text/event-stream', 'Mcp-Session-Id': h['Mcp-Session-Id'],
            'MCP-Protocol-Version': '2025-11-25', 'X-Pad': 'a'.repeat(LIMIT) };
        expectTooLarge(await request('GET', g), 'GET');
    }],
    ['headers far past the pool: still a 431', async (h) => {
        const ans = await request('POST', { ...h, 'X-Pad': 'a'.repeat(40000) }, rpc(4, 'ping', {}));
        assert.equal(ans.status, 431);
    }],
    ['a 3 MiB body and a 1 MiB answer pass the small pool', async (h) => {
        const text = 'x'.repeat(1 << 20);
        const body = rpc(5, 'tools/call', { name: 'echo', arguments: { text } });
        const ans = await request('POST', h, body + ' '.repeat(3 * 1024 * 1024 - body.length));
        assert.equal(ans.status, 200);
        assert.equal(message(ans).result.content[0].text, text);
    }],
    ['a body over --max-body: 413 body_too_large', async (h) => {
        const body = rpc(6, 'ping', {});
        const ans = await request('POST', h, body + ' '.repeat(MAX_BODY + 1 - body.length));
        assert.equal(ans.status, 413);
        assert.equal(JSON.parse(ans.body).error.data.reason, 'body_too_large');
    }],
    ['the session still answers', async (h) => {
        // the I/O thread may still be draining the 413's body: no half-close
        const ans = await request('POST', h, rpc(7, 'ping', {}), false);
        assert.equal(ans.status, 200);
        assert.deepEqual(message(ans).result, {});
    }],
];

let failed = 0;
const h = await session();
for (const [name, fn] of cases) {
    try {
        await fn(h);
        console.log(`ok   ${name}`);
    } catch (e) {
        failed++;
        console.log(`FAIL ${name}: ${e.message}`);
    }
}
console.log(`${cases.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
