#!/usr/bin/env node
// Bad-input test: a table of malformed / hostile HTTP requests against a
// running tidemark-server, over raw node:http (no fetch, no npm packages), so
// that arbitrary Host / Origin headers and malformed bodies can be sent.
//
//   node tests/integration/bad_input.mjs http://127.0.0.1:PORT/mcp
//
// The server must run with `--retain-events 5 --max-body 65536` (the gap and
// body-limit cases depend on both).
//
// Each case names a request and the expected HTTP status, JSON-RPC error.code
// and error.data.reason (as in docs/design.md, "The contract", item 4, and the 2025-11-25 transport
// spec). After every case a `ping` on the session opened at the start must
// still be answered; at the end a resume of a completed stream must replay the
// same events as before the cases ran (nothing committed was lost).
//
// Output: one line per case (`ok  <name>` / `FAIL <name>: ...`), then
// `N passed, M failed`; exit 1 if anything failed.
//
// Environment: BAD_INPUT_DEADLINE_MS (global deadline, default 60000),
//              BAD_INPUT_VERBOSE=1 (print responses of failing cases).

import http from 'node:http';
import assert from 'node:assert/strict';

const DEADLINE_MS = Number(process.env.BAD_INPUT_DEADLINE_MS ?? 60000);
const REQUEST_TIMEOUT_MS = 5000;
const VERBOSE = process.env.BAD_INPUT_VERBOSE === '1';
const RETAIN = 5;          // --retain-events the server runs with
const MAX_BODY = 65536;    // --max-body the server runs with
const STREAM_N = 8;        // progress notifications of the stream tool call
const SETUP_DELAY_MS = 20; // delay_ms between them in the setup call

if (!process.argv[2]) {
    console.error('usage: bad_input.mjs URL');
    process.exit(2);
}
const ENDPOINT = new URL(process.argv[2]);
const T0 = Date.now();
const deadline = T0 + DEADLINE_MS;

const globalTimer = setTimeout(() => {
    console.log(`FAIL global deadline: expected the run to finish within ${DEADLINE_MS} ms, got a timeout`);
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
}, DEADLINE_MS);
globalTimer.unref();

let passed = 0;
let failed = 0;

// ---------------------------------------------------------------------------
// HTTP helpers
// ---------------------------------------------------------------------------

function remaining(ms) {
    return Math.max(1, Math.min(ms, deadline - Date.now()));
}

// One request on a fresh connection (agent:false: no keep-alive reuse, so a
// case cannot leak state into the next one through a shared socket).
// Resolves {status, headers, buf, text, json} once the body has ended.
function send({ method = 'POST', path = ENDPOINT.pathname + ENDPOINT.search, headers = {}, body,
                setHost = true, timeoutMs = REQUEST_TIMEOUT_MS } = {}) {
    return new Promise((resolve, reject) => {
        const req = http.request({
            host: ENDPOINT.hostname, port: ENDPOINT.port, path, method, headers,
            agent: false, setHost,
        });
        const timer = setTimeout(() => req.destroy(new Error(`timeout after ${timeoutMs} ms`)),
                                 remaining(timeoutMs));
        req.on('response', (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => {
                clearTimeout(timer);
                const buf = Buffer.concat(chunks);
                const text = buf.toString('utf8');
                let json;
                try { json = text.length ? JSON.parse(text) : undefined; } catch { json = undefined; }
                resolve({ status: res.statusCode, headers: res.headers, buf, text, json });
            });
            res.on('error', (e) => { clearTimeout(timer); reject(e); });
        });
        req.on('error', (e) => { clearTimeout(timer); reject(e); });
        if (body !== undefined) req.write(body);
        req.end();
    });
}

// A long-lived SSE GET: resolves on the response head; events accumulate in
// .events as they arrive. close() drops the connection.
function openStream(headers) {
    return new Promise((resolve, reject) => {
        const req = http.request({
            host: ENDPOINT.hostname, port: ENDPOINT.port, path: ENDPOINT.pathname,
            method: 'GET', headers, agent: false,
        });
        const timer = setTimeout(() => req.destroy(new Error('timeout waiting for stream head')),
                                 remaining(REQUEST_TIMEOUT_MS));
        req.on('response', (res) => {
            clearTimeout(timer);
            const h = { status: res.statusCode, headers: res.headers, text: '', events: [], ended: false,
                        close() { req.destroy(); } };
            res.setEncoding('utf8');
            res.on('data', (d) => { h.text += d; h.events = parseSse(h.text); });
            res.on('end', () => { h.ended = true; });
            res.on('error', () => { h.ended = true; });
            resolve(h);
        });
        req.on('error', (e) => { clearTimeout(timer); reject(e); });
        req.end();
    });
}

// Poll a condition (never a blind sleep) until it holds or the time is up.
async function until(cond, ms = REQUEST_TIMEOUT_MS) {
    const end = Date.now() + remaining(ms);
    while (Date.now() < end) {
        if (cond()) return true;
        await new Promise((r) => setTimeout(r, 10));
    }
    return cond();
}

// SSE: events separated by a blank line; keeps only complete events.
function parseSse(text) {
    const events = [];
    const norm = text.replace(/\r\n?/g, '\n');
    const blocks = norm.split('\n\n');
    blocks.pop(); // incomplete tail (or '' after the last separator)
    for (const block of blocks) {
        const ev = { id: undefined, event: undefined, data: undefined, retry: undefined };
        let hasData = false;
        for (const line of block.split('\n')) {
            if (line === '' || line.startsWith(':')) continue;
            const i = line.indexOf(':');
            const field = i < 0 ? line : line.slice(0, i);
            let value = i < 0 ? '' : line.slice(i + 1);
            if (value.startsWith(' ')) value = value.slice(1);
            if (field === 'data') { ev.data = hasData ? ev.data + '\n' + value : value; hasData = true; }
            else if (field === 'id') ev.id = value;
            else if (field === 'event') ev.event = value;
            else if (field === 'retry') ev.retry = value;
        }
        if (ev.id !== undefined || hasData) events.push(ev);
    }
    return events;
}

// <epoch>-<stream>-<seq>-<mac>: the mac is 12 base64url characters (it may
// hold '-'); ids without one are accepted by the server at or below the head.
const ID_RE = /^([0-9a-f]{16})-(g|r[1-9][0-9]*)-([1-9][0-9]*)-([A-Za-z0-9_-]{12})$/;
function parseId(id) {
    const m = ID_RE.exec(id ?? '');
    return m ? { epoch: m[1], stream: m[2], seq: Number(m[3]), mac: m[4] } : null;
}
// The same id with the first character of its mac changed.
const alterMac = (id) => {
    const p = parseId(id);
    return `${p.epoch}-${p.stream}-${p.seq}-${p.mac[0] === 'A' ? 'B' : 'A'}${p.mac.slice(1)}`;
};

// ---------------------------------------------------------------------------
// Request builders
// ---------------------------------------------------------------------------

const ACCEPT_BOTH = 'application/json, text/event-stream';

// Headers for a POST: JSON + Accept both + (optionally) a session and its
// negotiated MCP-Protocol-Version. `omit` drops headers by lowercase name.
function postHeaders(sess, extra = {}, omit = []) {
    const h = { 'Content-Type': 'application/json', 'Accept': ACCEPT_BOTH };
    if (sess) {
        h['Mcp-Session-Id'] = sess.id;
        h['MCP-Protocol-Version'] = sess.version;
    }
    Object.assign(h, extra);
    for (const k of Object.keys(h)) if (omit.includes(k.toLowerCase())) delete h[k];
    return h;
}

function getHeaders(sess, extra = {}, omit = []) {
    const h = { 'Accept': 'text/event-stream' };
    if (sess) {
        h['Mcp-Session-Id'] = sess.id;
        h['MCP-Protocol-Version'] = sess.version;
    }
    Object.assign(h, extra);
    for (const k of Object.keys(h)) if (omit.includes(k.toLowerCase())) delete h[k];
    return h;
}

const ping = (id = 1) => JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' });

function initBody(version) {
    return JSON.stringify({
        jsonrpc: '2.0', id: 1, method: 'initialize',
        params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'bad-input', version: '1' } },
    });
}

async function initialize(version) {
    const res = await send({ headers: postHeaders(null), body: initBody(version) });
    const id = res.headers['mcp-session-id'];
    if (res.status !== 200 || !id || res.json?.result?.protocolVersion !== version)
        throw new Error(`initialize ${version}: status ${res.status}, session ${id}, body ${res.text.slice(0, 200)}`);
    const sess = { id, version };
    const n = await send({ headers: postHeaders(sess),
                           body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
    if (n.status !== 202) throw new Error(`notifications/initialized ${version}: status ${n.status}`);
    return sess;
}

// tools/call stream {n} as SSE; returns the parsed events (the stream ends
// when the response has been committed).
async function callStream(sess, reqId, n, delayMs) {
    const args = delayMs ? { n, delay_ms: delayMs } : { n };
    const body = JSON.stringify({
        jsonrpc: '2.0', id: reqId, method: 'tools/call',
        params: { name: 'stream', arguments: args, _meta: { progressToken: `bad-input-${reqId}` } },
    });
    const res = await send({ headers: postHeaders(sess), body });
    if (res.status !== 200 || !String(res.headers['content-type']).startsWith('text/event-stream'))
        throw new Error(`tools/call stream: status ${res.status}, content-type ${res.headers['content-type']}, body ${res.text.slice(0, 200)}`);
    return parseSse(res.text);
}

async function resume(sess, cursor) {
    const res = await send({ method: 'GET', headers: getHeaders(sess, { 'Last-Event-ID': cursor }) });
    res.events = String(res.headers['content-type']).startsWith('text/event-stream') ? parseSse(res.text) : [];
    return res;
}

// ---------------------------------------------------------------------------
// Comparison helpers
// ---------------------------------------------------------------------------

const show = (v) => (v === undefined ? 'undefined' : JSON.stringify(v));

// Every key of `want` must be deep-equal in `got` (recursively for objects).
function subsetMismatch(want, got, path = 'data') {
    for (const [k, v] of Object.entries(want)) {
        const g = got?.[k];
        if (v && typeof v === 'object' && !Array.isArray(v)) {
            const m = subsetMismatch(v, g, `${path}.${k}`);
            if (m) return m;
        } else {
            try { assert.deepStrictEqual(g, v); } catch { return `${path}.${k}=${show(v)}, got ${show(g)}`; }
        }
    }
    return null;
}

// Check a response against a case's expectations; returns a list of problems.
function verify(exp, res, ctx) {
    const problems = [];
    if (res.status !== exp.status)
        problems.push(`status ${exp.status}, got ${res.status} (${res.text.slice(0, 160).replace(/\s+/g, ' ')})`);
    if (exp.code !== undefined || exp.reason !== undefined) {
        const ct = String(res.headers['content-type'] ?? '');
        const err = res.json?.error;
        if (!ct.startsWith('application/json'))
            problems.push(`Content-Type application/json, got ${show(res.headers['content-type'])}`);
        if (!err) {
            problems.push(`a JSON-RPC error body, got ${show(res.text.slice(0, 160))}`);
        } else {
            if (exp.code !== undefined && err.code !== exp.code)
                problems.push(`error.code ${exp.code}, got ${show(err.code)}`);
            if (exp.reason !== undefined && err.data?.reason !== exp.reason)
                problems.push(`error.data.reason ${show(exp.reason)}, got ${show(err.data?.reason)}`);
            if (exp.data) {
                const m = subsetMismatch(exp.data, err.data);
                if (m) problems.push(m);
            }
            if (res.json?.jsonrpc !== '2.0') problems.push(`jsonrpc "2.0", got ${show(res.json?.jsonrpc)}`);
            if ('idNull' in exp && exp.idNull && res.json.id !== null)
                problems.push(`id null, got ${show(res.json.id)}`);
        }
    }
    if (exp.allow !== undefined && res.headers.allow !== exp.allow)
        problems.push(`Allow ${show(exp.allow)}, got ${show(res.headers.allow)}`);
    if (exp.check) {
        let m;
        try { m = exp.check(res, ctx); } catch (e) { m = `check threw ${e.message}`; }
        if (m) problems.push(m);
    }
    return problems;
}

// ---------------------------------------------------------------------------
// Setup: sessions and one completed stream with more events than retained
// ---------------------------------------------------------------------------

const ctx = {};

async function setup() {
    ctx.A = await initialize('2025-11-25');   // the liveness session
    ctx.B = await initialize('2025-11-25');   // fewer streams than A (only g)
    ctx.C = await initialize('2025-11-25');   // ended by DELETE during the run
    ctx.S0618 = await initialize('2025-06-18');
    ctx.S0326 = await initialize('2025-03-26');

    // priming + STREAM_N progress + response on a POST stream of A. The
    // progress token makes the tool emit its notifications (more events than
    // retained); delay_ms keeps the live reader in step with the tool so the
    // POST stream shows every id (a reader left behind is its own case below).
    ctx.live = await callStream(ctx.A, 2, STREAM_N, SETUP_DELAY_MS);
    const last = ctx.live[ctx.live.length - 1];
    const lid = parseId(last?.id);
    if (!lid) throw new Error(`stream call: no parsable event id in ${show(ctx.live)}`);
    let resp;
    try { resp = JSON.parse(last.data); } catch { resp = undefined; }
    if (resp?.id !== 2 || !resp?.result) throw new Error(`stream call: last event is not the response: ${last.data}`);
    ctx.epoch = lid.epoch;
    ctx.stream = lid.stream;
    ctx.head = lid.seq;
    ctx.headId = last.id;
    if (ctx.head !== STREAM_N + 2)
        throw new Error(`stream call: expected head ${STREAM_N + 2} (priming + ${STREAM_N} progress + response), got ${ctx.head}`);
    ctx.firstRetained = ctx.head - RETAIN + 1;
    ctx.cursor = (seq, epoch = ctx.epoch, stream = ctx.stream) => `${epoch}-${stream}-${seq}`;

    // The replay a resume from the retention boundary gives now; compared at the end.
    const r = await resume(ctx.A, ctx.cursor(ctx.firstRetained - 1));
    if (r.status !== 200) throw new Error(`baseline resume: status ${r.status} ${r.text.slice(0, 200)}`);
    ctx.baseline = r.events.map((e) => ({ id: e.id, data: e.data }));
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

const P = (sess, body, extra, omit) => ({ method: 'POST', headers: postHeaders(sess, extra, omit), body });
const G = (sess, extra, omit) => ({ method: 'GET', headers: getHeaders(sess, extra, omit) });

const INVALID = { status: 400, code: -32600 };
const PARSE = { status: 400, code: -32700, reason: 'parse_error', idNull: true };

function deep(n, inner = '1') { return '['.repeat(n) + inner + ']'.repeat(n); }

function idEcho(expectedId, rawFragment) {
    return (res) => {
        if (!res.json || !('result' in res.json)) return `a result, got ${res.text.slice(0, 160)}`;
        try { assert.deepStrictEqual(res.json.id, expectedId); } catch {
            return `id ${show(expectedId)}, got ${show(res.json.id)}`;
        }
        if (rawFragment && !res.text.includes(rawFragment))
            return `raw response containing ${rawFragment}, got ${res.text.slice(0, 160)}`;
        return null;
    };
}

function replayCheck(fromSeq) {
    return (res, c) => {
        const seqs = res.events.map((e) => parseId(e.id)?.seq);
        const want = [];
        for (let s = fromSeq; s <= c.head; s++) want.push(s);
        try { assert.deepStrictEqual(seqs, want); } catch { return `replayed seqs ${show(want)}, got ${show(seqs)}`; }
        return null;
    };
}

// The live-stream rule above, for one call of `stream {n}` without delay.
async function liveStreamProblem(sess, n) {
    const evs = await callStream(sess, 1, n);
    const label = `(n=${n})`;
    if (evs.some((e) => e.event === 'gap')) return null;
    const withId = evs.filter((e) => e.id !== undefined);
    const seqs = withId.map((e) => parseId(e.id)?.seq);
    for (let i = 0; i < seqs.length; i++)
        if (seqs[i] !== i + 1) {
            const shown = seqs.length > 12 ? [...seqs.slice(0, 6), '...', ...seqs.slice(-3)] : seqs;
            return `${label} dense seqs from 1 or an 'event: gap', got seqs ${show(shown)}, no gap signalled`;
        }
    let last;
    try { last = JSON.parse(evs[evs.length - 1]?.data || 'null'); } catch { last = null; }
    if (last?.id === 1 && (last.result || last.error)) return null; // complete and dense
    if (withId.length === 0)
        return `${label} the response, an 'event: gap', or an event id to resume from, got a stream that ended with no event (${show(evs)})`;
    // Ended early: the typed error must come on resume.
    const cursor = withId[withId.length - 1].id;
    const r = await resume(sess, cursor);
    const err = r.json?.error;
    if (r.status === 400 && err?.data?.reason === 'resumption_gap' && Array.isArray(err.data.missing) &&
        err.data.missing[0] === parseId(cursor).seq + 1)
        return null;
    return `${label} a stream that ended early at ${cursor} without the response to resume with 400 resumption_gap from ${parseId(cursor).seq + 1}, got ${r.status} ${r.text.slice(0, 160)}`;
}

const UNICODE_ID = 'é中😀 "q" \\ / \b\f\n\r\t \u2028 end';
const UNICODE_ID_JSON = '"\\u00e9\\u4e2d\\ud83d\\ude00 \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u2028 end"';

const cases = [
    // ---- body syntax ----------------------------------------------------------
    { name: 'malformed JSON', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1,"method":"ping"'), expect: PARSE },
    { name: 'empty body', req: (c) => P(c.A, ''), expect: PARSE },
    { name: 'trailing garbage after the object', req: (c) => P(c.A, ping(1) + ' x'), expect: PARSE },
    { name: 'invalid UTF-8 in a string', req: (c) => P(c.A, Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":"'), Buffer.from([0xc3, 0x28]), Buffer.from('","method":"ping"}')])), expect: PARSE },
    { name: 'raw NUL byte inside a string id', req: (c) => P(c.A, Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":"a'), Buffer.from([0]), Buffer.from('b","method":"ping"}')])), expect: PARSE },
    { name: 'duplicate object keys', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}'), expect: PARSE },
    { name: 'deeply nested array body (10000 levels)', req: (c) => P(c.A, deep(10000)), expect: PARSE },
    { name: 'deeply nested params (10000 levels)', req: (c) => P(c.A, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":${deep(10000)}}}`), expect: PARSE },
    { name: 'valid JSON number, not an object/array', req: (c) => P(c.A, '42'), expect: { ...INVALID, reason: 'invalid_request', idNull: true } },
    { name: 'valid JSON string, not an object/array', req: (c) => P(c.A, '"ping"'), expect: { ...INVALID, reason: 'invalid_request', idNull: true } },
    { name: 'valid JSON null, not an object/array', req: (c) => P(c.A, 'null'), expect: { ...INVALID, reason: 'invalid_request', idNull: true } },

    // ---- JSON-RPC envelope ----------------------------------------------------
    { name: 'jsonrpc "1.0"', req: (c) => P(c.A, '{"jsonrpc":"1.0","id":1,"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_jsonrpc_version' } },
    { name: 'jsonrpc missing', req: (c) => P(c.A, '{"id":1,"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_jsonrpc_version' } },
    { name: 'jsonrpc as number 2.0', req: (c) => P(c.A, '{"jsonrpc":2.0,"id":1,"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_jsonrpc_version' } },
    { name: 'id is a float', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1.5,"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_id', idNull: true } },
    { name: 'id is a bool', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":true,"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_id', idNull: true } },
    { name: 'id is an object', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_id', idNull: true } },
    { name: 'id null with a method', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":null,"method":"ping"}'), expect: { ...INVALID, reason: 'invalid_id', idNull: true } },
    { name: 'method is a number', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1,"method":5}'), expect: { ...INVALID, reason: 'invalid_method' } },
    { name: 'method is empty', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1,"method":""}'), expect: { ...INVALID, reason: 'invalid_method' } },
    { name: 'params is a number', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1,"method":"ping","params":5}'), expect: { ...INVALID, reason: 'invalid_params' } },
    { name: 'params is a string (notification)', req: (c) => P(c.A, '{"jsonrpc":"2.0","method":"notifications/initialized","params":"x"}'), expect: { ...INVALID, reason: 'invalid_params' } },
    { name: 'params is an array (MCP wants an object)', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}'), expect: { status: 200, code: -32602, reason: 'invalid_params', check: (r) => (r.json?.id === 7 ? null : `id 7, got ${show(r.json?.id)}`) } },
    { name: 'result and error both present', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}'), expect: { ...INVALID, reason: 'invalid_request' } },
    { name: 'unknown method', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":"u1","method":"no/such/method"}'), expect: { status: 200, code: -32601, reason: 'method_not_found', data: { method: 'no/such/method' }, check: (r) => (r.json?.id === 'u1' ? null : `id "u1", got ${show(r.json?.id)}`) } },
    { name: 'initialize without params', req: () => P(null, '{"jsonrpc":"2.0","id":1,"method":"initialize"}'), expect: { status: 400, code: -32602, reason: 'invalid_params' } },

    // ---- exact ids -------------------------------------------------------------
    { name: '64-bit integer id 9007199254740993 echoed exactly', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}'),
      expect: { status: 200, check: (r) => (r.text.includes('"id":9007199254740993') ? null : `raw "id":9007199254740993, got ${r.text.slice(0, 160)}`) } },
    { name: 'id -9223372036854775808 echoed exactly', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}'),
      expect: { status: 200, check: (r) => (r.text.includes('"id":-9223372036854775808') ? null : `raw "id":-9223372036854775808, got ${r.text.slice(0, 160)}`) } },
    { name: 'escaped NUL (\\u0000) inside a string id echoed', req: (c) => P(c.A, '{"jsonrpc":"2.0","id":"a\\u0000b","method":"ping"}'),
      expect: { status: 200, check: idEcho('a\u0000b') } },
    { name: 'unicode/escaped string id echoed with the same value', req: (c) => P(c.A, `{"jsonrpc":"2.0","id":${UNICODE_ID_JSON},"method":"ping"}`),
      expect: { status: 200, check: idEcho(UNICODE_ID) } },

    // ---- body size ---------------------------------------------------------------
    { name: 'oversized body (70000 bytes)', req: (c) => P(c.A, ping(1) + ' '.repeat(70000)), expect: { status: 413, code: -32600, reason: 'body_too_large', data: { limit: MAX_BODY } } },
    { name: 'body one byte over the limit', req: (c) => { const b = ping(1); return P(c.A, b + ' '.repeat(MAX_BODY + 1 - b.length)); }, expect: { status: 413, code: -32600, reason: 'body_too_large' } },
    { name: 'body exactly at the limit is accepted', req: (c) => { const b = ping(3); return P(c.A, b + ' '.repeat(MAX_BODY - b.length)); }, expect: { status: 200, check: idEcho(3) } },

    // ---- headers on POST ---------------------------------------------------------
    { name: 'POST without session header', req: () => P(null, ping(1)), expect: { status: 400, code: -32600, reason: 'session_required' } },
    { name: 'POST with unknown session', req: (c) => P({ id: 'deadbeefdeadbeefdeadbeefdeadbeef', version: '2025-11-25' }, ping(1)), expect: { status: 404, code: -32001, reason: 'unknown_session' } },
    { name: 'POST Accept application/json only', req: (c) => P(c.A, ping(1), { Accept: 'application/json' }), expect: { status: 406, code: -32600, reason: 'not_acceptable' } },
    { name: 'POST Accept text/event-stream only', req: (c) => P(c.A, ping(1), { Accept: 'text/event-stream' }), expect: { status: 406, code: -32600, reason: 'not_acceptable' } },
    { name: 'POST without Accept', req: (c) => P(c.A, ping(1), {}, ['accept']), expect: { status: 406, code: -32600, reason: 'not_acceptable' } },
    { name: 'POST Content-Type text/plain', req: (c) => P(c.A, ping(1), { 'Content-Type': 'text/plain' }), expect: { status: 415, code: -32600, reason: 'unsupported_media_type' } },
    { name: 'POST without Content-Type', req: (c) => P(c.A, ping(1), {}, ['content-type']), expect: { status: 415, code: -32600, reason: 'unsupported_media_type' } },
    { name: 'POST Content-Type application/json-patch+json', req: (c) => P(c.A, ping(1), { 'Content-Type': 'application/json-patch+json' }), expect: { status: 415, code: -32600, reason: 'unsupported_media_type' } },
    { name: 'POST Content-Type application/json; charset=utf-8 accepted', req: (c) => P(c.A, ping(4), { 'Content-Type': 'application/json; charset=utf-8' }), expect: { status: 200, check: idEcho(4) } },
    { name: 'POST unsupported MCP-Protocol-Version', req: (c) => P(c.A, ping(1), { 'MCP-Protocol-Version': '1999-01-01' }), expect: { status: 400, code: -32600, reason: 'unsupported_protocol_version', data: { received: '1999-01-01' } } },
    { name: 'POST MCP-Protocol-Version 2024-11-05 (not supported)', req: (c) => P(c.A, ping(1), { 'MCP-Protocol-Version': '2024-11-05' }), expect: { status: 400, code: -32600, reason: 'unsupported_protocol_version' } },
    // A supported version other than the negotiated one is neither invalid nor
    // unsupported (transports.mdx: only those MUST get 400); the server keeps
    // following the negotiated version, so it cannot unlock batches.
    { name: 'POST supported MCP-Protocol-Version other than negotiated', req: (c) => P(c.A, ping(6), { 'MCP-Protocol-Version': '2025-06-18' }), expect: { status: 200, check: idEcho(6) } },
    { name: 'batch on a 2025-11-25 session claiming MCP-Protocol-Version 2025-03-26', req: (c) => P(c.A, `[${ping(1)}]`, { 'MCP-Protocol-Version': '2025-03-26' }), expect: { status: 400, code: -32600, reason: 'batch_not_supported' } },
    { name: 'bad Origin', req: (c) => P(c.A, ping(1), { Origin: 'http://evil.example' }), expect: { status: 403, code: -32600, reason: 'forbidden_origin', idNull: true } },
    { name: 'Origin null', req: (c) => P(c.A, ping(1), { Origin: 'null' }), expect: { status: 403, code: -32600, reason: 'forbidden_origin', idNull: true } },
    { name: 'Origin localhost.evil.example', req: (c) => P(c.A, ping(1), { Origin: 'http://localhost.evil.example' }), expect: { status: 403, code: -32600, reason: 'forbidden_origin' } },
    { name: 'Origin http://localhost:3000 accepted', req: (c) => P(c.A, ping(5), { Origin: 'http://localhost:3000' }), expect: { status: 200, check: idEcho(5) } },
    { name: 'bad Host', req: (c) => P(c.A, ping(1), { Host: 'evil.example' }), expect: { status: 403, code: -32600, reason: 'forbidden_host' } },
    { name: 'Host localhost.evil.example:8080', req: (c) => P(c.A, ping(1), { Host: 'localhost.evil.example:8080' }), expect: { status: 403, code: -32600, reason: 'forbidden_host' } },
    { name: 'GET with bad Host', req: (c) => G(c.A, { Host: 'evil.example' }), expect: { status: 403, code: -32600, reason: 'forbidden_host' } },
    { name: 'no Host header', req: (c) => ({ ...P(c.A, ping(1)), setHost: false }), expect: { status: 403, code: -32600, reason: 'forbidden_host' } },

    // ---- batches ---------------------------------------------------------------
    { name: 'batch under a 2025-06-18 session', req: (c) => P(c.S0618, `[${ping(1)},${ping(2)}]`), expect: { status: 400, code: -32600, reason: 'batch_not_supported' } },
    { name: 'batch under a 2025-11-25 session', req: (c) => P(c.A, `[${ping(1)}]`), expect: { status: 400, code: -32600, reason: 'batch_not_supported' } },
    { name: 'batch under a 2025-03-26 session works', req: (c) => P(c.S0326, `[${ping(11)},${ping('twelve')}]`),
      expect: { status: 200, check: (r) => {
          if (!Array.isArray(r.json) || r.json.length !== 2) return `an array of 2 responses, got ${r.text.slice(0, 200)}`;
          const ids = r.json.map((m) => m.id).sort((a, b) => String(a).localeCompare(String(b)));
          if (!r.json.every((m) => m.jsonrpc === '2.0' && m.result && typeof m.result === 'object')) return `results, got ${r.text.slice(0, 200)}`;
          try { assert.deepStrictEqual(ids, [11, 'twelve']); } catch { return `ids [11,"twelve"], got ${show(ids)}`; }
          return null;
      } } },
    { name: 'batch (2025-03-26) with an invalid element and a ping', req: (c) => P(c.S0326, `[1,${ping(13)}]`),
      expect: { status: 200, check: (r) => {
          if (!Array.isArray(r.json) || r.json.length !== 2) return `an array of 2 responses, got ${r.text.slice(0, 200)}`;
          const e = r.json.find((m) => m.error);
          const ok = r.json.find((m) => m.result);
          if (!e || e.id !== null || e.error.code !== -32600) return `an error -32600 with id null, got ${r.text.slice(0, 200)}`;
          if (!ok || ok.id !== 13) return `a result for id 13, got ${r.text.slice(0, 200)}`;
          return null;
      } } },
    { name: 'batch (2025-03-26) of notifications only', req: (c) => P(c.S0326, '[{"jsonrpc":"2.0","method":"notifications/x"}]'), expect: { status: 202, check: (r) => (r.text === '' ? null : `empty body, got ${r.text.slice(0, 100)}`) } },
    { name: 'empty batch', req: (c) => P(c.S0326, '[]'), expect: { status: 400, code: -32600, reason: 'invalid_request', idNull: true, check: (r) => (Array.isArray(r.json) ? 'a single error object, got an array' : null) } },
    { name: 'initialize inside a batch', req: () => P(null, `[${initBody('2025-03-26')}]`), expect: { status: 400, code: -32600, reason: 'invalid_request' } },
    { name: 'initialize inside a batch of a 2025-03-26 session', req: (c) => P(c.S0326, `[${initBody('2025-03-26')},${ping(1)}]`), expect: { status: 400, code: -32600, reason: 'invalid_request' } },

    // ---- HTTP method / path ------------------------------------------------------
    { name: 'PUT', req: (c) => ({ method: 'PUT', headers: postHeaders(c.A), body: ping(1) }), expect: { status: 405, code: -32600, reason: 'method_not_allowed', allow: 'GET, POST, DELETE' } },
    { name: 'PATCH', req: (c) => ({ method: 'PATCH', headers: postHeaders(c.A), body: ping(1) }), expect: { status: 405, code: -32600, reason: 'method_not_allowed', allow: 'GET, POST, DELETE' } },
    { name: 'unknown path', req: (c) => ({ ...P(c.A, ping(1)), path: '/nope' }), expect: { status: 404, code: -32600, reason: 'not_found' } },
    { name: 'endpoint path with a suffix', req: (c) => ({ ...P(c.A, ping(1)), path: ENDPOINT.pathname + 'x' }), expect: { status: 404, code: -32600, reason: 'not_found' } },

    // ---- GET ---------------------------------------------------------------------
    { name: 'GET Accept application/json', req: (c) => G(c.A, { Accept: 'application/json' }), expect: { status: 406, code: -32600, reason: 'not_acceptable' } },
    { name: 'GET without Accept', req: (c) => G(c.A, {}, ['accept']), expect: { status: 406, code: -32600, reason: 'not_acceptable' } },
    { name: 'GET without session header', req: () => G(null), expect: { status: 400, code: -32600, reason: 'session_required' } },
    { name: 'GET with unknown session', req: () => G({ id: 'nope', version: '2025-11-25' }), expect: { status: 404, code: -32001, reason: 'unknown_session' } },
    { name: 'GET unsupported MCP-Protocol-Version', req: (c) => G(c.A, { 'MCP-Protocol-Version': '1999-01-01' }), expect: { status: 400, code: -32600, reason: 'unsupported_protocol_version' } },

    // ---- Last-Event-ID (the resume table of docs/design.md) --------------------------------------
    { name: 'Last-Event-ID garbage', req: (c) => G(c.A, { 'Last-Event-ID': 'garbage' }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID uppercase epoch', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(7, c.epoch.toUpperCase().replace(/^[0-9]/, 'A')) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID 15-hex epoch', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(7, c.epoch.slice(1)) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID seq 0', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(0) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID seq with leading zero', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor('07') }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID negative seq', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(-1) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID 30-digit seq', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor('1'.repeat(30)) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID bad stream name', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(7, c.epoch, 'x1') }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID stream r0', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(7, c.epoch, 'r0') }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID from another session (stream exists there)', req: (c) => G(c.B, { 'Last-Event-ID': c.cursor(c.head - 1) }), expect: { status: 400, code: -32600, reason: 'unknown_stream' } },
    { name: 'Last-Event-ID of a stream no session has', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(1, c.epoch, 'r999') }), expect: { status: 400, code: -32600, reason: 'unknown_stream' } },
    { name: 'Last-Event-ID from another epoch', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(c.head - 1, c.epoch === '0123456789abcdef' ? 'fedcba9876543210' : '0123456789abcdef') }), expect: { status: 400, code: -32600, reason: 'epoch_mismatch' } },
    // No mac can be forged for a seq the server never issued: a cursor ahead
    // without one is malformed, so cursor_ahead names only ids it issued.
    { name: 'Last-Event-ID ahead of the head, no mac', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(c.head + 1) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID far ahead (18 digits), no mac', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor('9'.repeat(18)) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID ahead of the head with the head\'s mac', req: (c) => G(c.A, { 'Last-Event-ID': `${c.cursor(c.head + 1)}-${parseId(c.headId).mac}` }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID with its mac altered', req: (c) => G(c.A, { 'Last-Event-ID': alterMac(c.headId) }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID with a mac, from another session', req: (c) => G(c.B, { 'Last-Event-ID': c.headId }), expect: { status: 400, code: -32600, reason: 'malformed_cursor' } },
    { name: 'Last-Event-ID as issued, at the head, replays nothing and ends', run: async (c) => resume(c.A, c.headId), expect: { status: 200, check: (r) => (r.events.length === 0 ? null : `no events, got ${show(r.events)}`) } },
    { name: 'Last-Event-ID older than retention (seq 1)', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(1) }), expect: { status: 400, code: -32600, reason: 'resumption_gap', data: { missing: [2, STREAM_N + 2 - RETAIN] } } },
    { name: 'Last-Event-ID one before the boundary', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(c.firstRetained - 2) }), expect: { status: 400, code: -32600, reason: 'resumption_gap', data: { missing: [STREAM_N + 2 - RETAIN, STREAM_N + 2 - RETAIN] } } },
    { name: 'Last-Event-ID in the gap with a forged epoch (gap row first)', req: (c) => G(c.A, { 'Last-Event-ID': c.cursor(1, '0000000000000000') }), expect: { status: 400, code: -32600, reason: 'resumption_gap', data: { missing: [2, STREAM_N + 2 - RETAIN] } } },
    { name: 'Last-Event-ID at the retention boundary replays all retained', run: async (c) => resume(c.A, c.cursor(c.firstRetained - 1)), expect: { status: 200, check: (r, c) => replayCheck(c.firstRetained)(r, c) } },
    { name: 'Last-Event-ID at the head replays nothing and ends', run: async (c) => resume(c.A, c.cursor(c.head)), expect: { status: 200, check: (r) => (r.events.length === 0 ? null : `no events, got ${show(r.events)}`) } },

    // ---- 409: a stream already attached ------------------------------------------
    { name: 'GET standalone stream while one is attached', run: async (c) => {
          c.hold = await openStream(getHeaders(c.A));
          if (c.hold.status !== 200) return { status: c.hold.status, headers: c.hold.headers, text: `first GET answered ${c.hold.status}`, json: undefined };
          // 2025-11-25: the standalone stream is primed; wait for that event.
          await until(() => c.hold.events.length > 0);
          c.gPrimed = c.hold.events[0]?.id;
          return send({ method: 'GET', headers: getHeaders(c.A) });
      }, expect: { status: 409, code: -32600, reason: 'stream_attached' } },
    { name: 'GET Last-Event-ID of the attached standalone stream', run: async (c) => {
          try {
              if (!parseId(c.gPrimed)) return { status: 0, headers: {}, text: `no priming event on the held stream (${show(c.hold?.events)})`, json: undefined };
              return await send({ method: 'GET', headers: getHeaders(c.A, { 'Last-Event-ID': c.gPrimed }) });
          } finally {
              c.hold?.close();
          }
      }, expect: { status: 409, code: -32600, reason: 'stream_attached' } },

    // ---- live stream under retention ---------------------------------------------
    // The contract: no message is skipped; a known gap is reported with a
    // typed error, never hidden. A POST stream whose reader falls more than
    // --retain-events behind the tool must deliver every seq, or signal
    // `event: gap`, or end early so that a resume from the last id it did
    // deliver is answered 400 resumption_gap. A stream that skips seqs, or
    // ends with no id and no response, loses messages silently. Without a
    // delay the tool outruns the reader: n=8 usually, n=200 near-certainly.
    { name: 'live POST stream under retention never skips silently', run: async () => {
          for (const n of [STREAM_N, 200]) {
              const sess = await initialize('2025-11-25');
              const problem = await liveStreamProblem(sess, n);
              if (problem) return { status: 200, headers: {}, text: '', problem };
          }
          return { status: 200, headers: {}, text: '', problem: null };
      }, expect: { status: 200, check: (r) => r.problem } },

    // ---- ended session -----------------------------------------------------------
    { name: 'DELETE without session header', req: () => ({ method: 'DELETE', headers: {} }), expect: { status: 400, code: -32600, reason: 'session_required' } },
    { name: 'DELETE a session', req: (c) => ({ method: 'DELETE', headers: { 'Mcp-Session-Id': c.C.id, 'MCP-Protocol-Version': c.C.version } }), expect: { status: 200 } },
    { name: 'POST on an ended session', req: (c) => P(c.C, ping(1)), expect: { status: 404, code: -32001, reason: 'unknown_session' } },
    { name: 'GET on an ended session', req: (c) => G(c.C), expect: { status: 404, code: -32001, reason: 'unknown_session' } },
    { name: 'DELETE an ended session again', req: (c) => ({ method: 'DELETE', headers: { 'Mcp-Session-Id': c.C.id } }), expect: { status: 404, code: -32001, reason: 'unknown_session' } },
];

// ---------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------

function report(name, problems, res) {
    if (problems.length === 0) {
        passed++;
        console.log(`ok  ${name}`);
    } else {
        failed++;
        console.log(`FAIL ${name}: expected ${problems.join('; expected ')}`);
        if (VERBOSE && res) console.error(`     response: ${res.status} ${JSON.stringify(res.headers)} ${String(res.text).slice(0, 400)}`);
    }
}

async function liveness(afterName) {
    try {
        const r = await send({ headers: postHeaders(ctx.A), body: ping('alive') });
        if (r.status !== 200 || r.json?.id !== 'alive' || !r.json?.result || typeof r.json.result !== 'object')
            return `ping after it answered 200 with a result, got ${r.status} ${r.text.slice(0, 160)}`;
        return null;
    } catch (e) {
        return `ping after it answered 200 with a result, got ${e.message}`;
    }
}

async function main() {
    try {
        await setup();
    } catch (e) {
        console.log(`FAIL setup: expected sessions and a completed stream, got ${e.message}`);
        console.log(`0 passed, 1 failed`);
        process.exit(1);
    }

    for (const c of cases) {
        if (Date.now() >= deadline) {
            report(c.name, ['to run before the global deadline, got no time left'], null);
            continue;
        }
        let res;
        let problems;
        try {
            res = c.run ? await c.run(ctx) : await send(c.req(ctx));
            problems = verify(c.expect, res, ctx);
        } catch (e) {
            problems = [`a response, got ${e.message}`];
        }
        const alive = await liveness(c.name);
        if (alive) problems.push(alive);
        report(c.name, problems, res);
    }

    // Nothing committed is lost: the completed stream replays as it did before.
    {
        const name = 'final: completed stream on the original session still replays';
        const problems = [];
        try {
            const r = await resume(ctx.A, ctx.cursor(ctx.firstRetained - 1));
            const got = r.events.map((e) => ({ id: e.id, data: e.data }));
            if (r.status !== 200) problems.push(`status 200, got ${r.status} ${r.text.slice(0, 160)}`);
            else {
                try { assert.deepStrictEqual(got, ctx.baseline); } catch {
                    problems.push(`the baseline replay ${show(ctx.baseline.map((e) => e.id))}, got ${show(got.map((e) => e.id))}`);
                }
                const lastMsg = got.length ? JSON.parse(got[got.length - 1].data) : null;
                if (ctx.baseline.length !== RETAIN || lastMsg?.id !== 2 || !lastMsg?.result)
                    problems.push(`${RETAIN} events ending with the response to id 2, got ${got.length} events ending ${show(got[got.length - 1]?.data)}`);
            }
        } catch (e) {
            problems.push(`a replay, got ${e.message}`);
        }
        report(name, problems, null);
    }

    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
}

main().catch((e) => {
    console.log(`FAIL harness: expected no exception, got ${e.stack || e}`);
    console.log(`${passed} passed, ${failed + 1} failed`);
    process.exit(1);
});
