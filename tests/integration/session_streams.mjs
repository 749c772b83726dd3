#!/usr/bin/env node
// Sessions and their attached streams (the server runs with
// --session-ttl-seconds 1):
//   - a session whose standalone GET stream is open is not idle: it outlives
//     a session created after it that has no stream and expires;
//   - DELETE of a session ends its open stream.
//
//   node tests/integration/session_streams.mjs http://127.0.0.1:PORT/mcp
//
// Every wait polls a condition under a deadline.

import assert from 'node:assert/strict';

const URL_ = process.argv[2];
const DEADLINE_MS = 15000;
const V = '2025-11-25';
const POST_H = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };

async function session() {
    const init = await fetch(URL_, { method: 'POST', headers: POST_H, body: JSON.stringify({
        jsonrpc: '2.0', id: 0, method: 'initialize',
        params: { protocolVersion: V, capabilities: {}, clientInfo: { name: 'session_streams', version: '1' } },
    }) });
    assert.equal(init.status, 200);
    await init.text();
    const sid = init.headers.get('mcp-session-id');
    const h = { ...POST_H, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': V };
    const ok = await fetch(URL_, { method: 'POST', headers: h,
        body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
    assert.equal(ok.status, 202);
    return h;
}

async function pingStatus(h) {
    const r = await fetch(URL_, { method: 'POST', headers: h,
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) });
    await r.text();
    return r.status;
}

async function sessionsOpen() {
    const r = await fetch(new URL('/metrics', URL_));
    const m = /^tidemark_sessions_open (\d+)$/m.exec(await r.text());
    return m ? Number(m[1]) : -1;
}

// Open the standalone stream; resolves once its 200 headers arrived, with a
// promise that resolves when the server ends it.
async function openStream(h) {
    const ctl = new AbortController();
    const r = await fetch(URL_, { headers: { Accept: 'text/event-stream', 'Mcp-Session-Id': h['Mcp-Session-Id'],
        'MCP-Protocol-Version': V }, signal: ctl.signal });
    assert.equal(r.status, 200);
    const reader = r.body.getReader();
    const ended = (async () => {
        try {
            while (!(await reader.read()).done);
        } catch { /* aborted */ }
    })();
    return { ended, abort: () => ctl.abort() };
}

async function until(what, fn) {
    const end = Date.now() + DEADLINE_MS;
    while (Date.now() < end) {
        if (await fn())
            return;
        await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`expected ${what} within ${DEADLINE_MS} ms`);
}

const a = await session();
const stream = await openStream(a);
const b = await session();
// Watched through /metrics: a request in a session would touch it.
await until('one of the two sessions to expire', async () => (await sessionsOpen()) === 1);
assert.equal(await pingStatus(b), 404, 'the session without a stream expired');
assert.equal(await pingStatus(a), 200, 'the session with an open stream is still there');
console.log('ok   a session with an open stream does not expire; one without does');

const del = await fetch(URL_, { method: 'DELETE', headers: { 'Mcp-Session-Id': a['Mcp-Session-Id'],
    'MCP-Protocol-Version': V } });
assert.ok(del.status === 200 || del.status === 204, `DELETE: ${del.status}`);
let ended = false;
stream.ended.then(() => { ended = true; });
try {
    await until('DELETE to end the session\'s open stream', async () => ended);
    console.log('ok   DELETE ends the session\'s open stream');
} finally {
    stream.abort();
}
