#!/usr/bin/env node
// Interoperability test: the official MCP TypeScript SDK client (pinned in
// peers/) against a running tidemark-server over Streamable HTTP.
//
//   node tests/integration/sdk_client.mjs http://127.0.0.1:PORT/mcp
//
// Steps (one PASS/FAIL line each; exit 0 only if every assertion held):
//   1. initialize + protocol version + tools/list contains echo and stream
//   2. tools/call echo
//   3. tools/call stream {n:5} with progress notifications
//   4. tools/call stream {n:40, delay_ms:50}: drop the SSE response's TCP
//      connection after >= 5 progress notifications, then resume on a brand
//      new transport (same session) with the last SSE event id as the
//      SDK resumptionToken (HTTP GET + Last-Event-ID).
//
// Environment:
//   TIDEMARK_PEERS_DIR        peers/ folder holding node_modules (default: ../../peers
//                             relative to this script)
//   SDK_CLIENT_DEADLINE_MS    global deadline (default 30000)
//   SDK_CLIENT_RESUME_GAP_MS  pause between the cut and the resume, so the server
//                             has stored events to replay (default 400)
//   SDK_CLIENT_STRICT_IDS=1   additionally check Tidemark's event id format
//                             <16 hex>-r<k>-<seq>, dense seq, and priming events
//   SDK_CLIENT_VERBOSE=1      log HTTP exchanges and transport errors to stderr
//   SDK_CLIENT_PROFILE        "tidemark" (default: echo {text}, stream {n, delay_ms})
//                             or "everything": the official server-everything's
//                             echo {message} and trigger-long-running-operation
//                             {duration, steps} (behind tidemark-gateway)

import { sdkImport, sdkRoot, sdkVersion } from './sdk_resolve.mjs';

const DEADLINE_MS = Number(process.env.SDK_CLIENT_DEADLINE_MS ?? 30000);
const STRICT_IDS = process.env.SDK_CLIENT_STRICT_IDS === '1';
const VERBOSE = process.env.SDK_CLIENT_VERBOSE === '1';
const RESUME_GAP_MS = Number(process.env.SDK_CLIENT_RESUME_GAP_MS ?? 400);
const STEP_WAIT_MS = 10000; // per-condition deadline (always bounded by the global one too)

// The two tools the steps use, by server: an echo, and a call that sends
// progress 1..n (total n) at 50 ms intervals when asked for the slow form.
const PROFILES = {
    tidemark: {
        echo: { name: 'echo', args: t => ({ text: t }), text: t => t },
        stream: { name: 'stream', args: (n, slow) => (slow ? { n, delay_ms: 50 } : { n }),
                  text: n => `streamed ${n}`, n: a => a?.n }
    },
    everything: {
        echo: { name: 'echo', args: t => ({ message: t }), text: t => `Echo: ${t}` },
        stream: { name: 'trigger-long-running-operation',
                  args: (n, slow) => ({ duration: (slow ? 0.05 : 0.02) * n, steps: n }),
                  text: (n, a) => `Long running operation completed. Duration: ${a.duration} seconds, Steps: ${n}.`,
                  n: a => a?.steps }
    }
};
const PROFILE = PROFILES[process.env.SDK_CLIENT_PROFILE ?? 'tidemark'];
if (!PROFILE) {
    console.error(`unknown SDK_CLIENT_PROFILE ${process.env.SDK_CLIENT_PROFILE}`);
    process.exit(2);
}
const ECHO = PROFILE.echo, STREAM = PROFILE.stream;

// ---------------------------------------------------------------------------
// Failure handling and global deadline
// ---------------------------------------------------------------------------
let currentStep = 'setup';
let finished = false;

function finish(code, line) {
    if (finished) return;
    finished = true;
    if (line) (code === 0 ? console.log : console.error)(line);
    process.exit(code);
}

class AssertionFailure extends Error {}

function fail(message) {
    throw new AssertionFailure(message);
}

function assert(cond, message) {
    if (!cond) fail(message);
}

function vlog(...args) {
    if (VERBOSE) console.error('[sdk_client]', ...args);
}

const fmt = v => JSON.stringify(v);

const globalTimer = setTimeout(() => {
    finish(1, `FAIL ${currentStep}: global deadline of ${DEADLINE_MS} ms exceeded`);
}, DEADLINE_MS);

process.on('unhandledRejection', err => {
    finish(1, `FAIL ${currentStep}: unhandled rejection: ${err?.stack ?? err}`);
});


const { Client } = await sdkImport('client/index.js');
const { StreamableHTTPClientTransport } = await sdkImport('client/streamableHttp.js');
const { CallToolResultSchema, ProgressNotificationSchema, SUPPORTED_PROTOCOL_VERSIONS, LATEST_PROTOCOL_VERSION } =
    await sdkImport('types.js');

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------
const serverUrlArg = process.argv[2];
if (!serverUrlArg) {
    console.error('usage: node tests/integration/sdk_client.mjs http://HOST:PORT/mcp');
    process.exit(2);
}
let serverUrl;
try {
    serverUrl = new URL(serverUrlArg);
} catch {
    console.error(`invalid URL: ${serverUrlArg}`);
    process.exit(2);
}

// ---------------------------------------------------------------------------
// Condition waiting (event driven; every wait has a deadline)
// ---------------------------------------------------------------------------
const waiters = new Set();
function notify() {
    for (const w of [...waiters]) w();
}
function waitFor(pred, what, timeoutMs = STEP_WAIT_MS) {
    return new Promise((resolve, reject) => {
        let timer;
        const check = () => {
            let ok;
            try {
                ok = pred();
            } catch (e) {
                waiters.delete(check);
                clearTimeout(timer);
                reject(e);
                return;
            }
            if (ok) {
                waiters.delete(check);
                clearTimeout(timer);
                resolve(ok);
            }
        };
        timer = setTimeout(() => {
            waiters.delete(check);
            reject(new AssertionFailure(`timed out after ${timeoutMs} ms waiting for ${what}`));
        }, timeoutMs);
        waiters.add(check);
        check();
    });
}

// ---------------------------------------------------------------------------
// Instrumented fetch handed to the SDK transports.
//  - records every HTTP exchange (method, request headers, status, content type);
//  - observes SSE bodies (end / error) without altering their bytes;
//  - can "arm" a cut: the next POST whose JSON body matches a predicate gets
//    its own AbortController. Aborting it makes undici tear down the socket
//    carrying the in-flight SSE response (a real connection drop, seen by the
//    server as a reset/close), while the SDK transport itself stays open.
// ---------------------------------------------------------------------------
const exchanges = [];
let armedCut = null; // { match(msg), controller, request, exchange }

async function instrumentedFetch(input, init = {}) {
    const method = (init.method ?? 'GET').toUpperCase();
    const headers = new Headers(init.headers);
    const ex = {
        method,
        lastEventId: headers.get('last-event-id'),
        sessionId: headers.get('mcp-session-id'),
        protocolVersion: headers.get('mcp-protocol-version'),
        body: typeof init.body === 'string' ? init.body : undefined,
        status: undefined,
        contentType: undefined,
        streamState: 'none', // none | open | ended | errored | cancelled
        streamError: undefined
    };
    exchanges.push(ex);

    if (armedCut && !armedCut.controller && method === 'POST' && ex.body) {
        let msg;
        try {
            msg = JSON.parse(ex.body);
        } catch {
            msg = undefined;
        }
        if (msg && armedCut.match(msg)) {
            const own = new AbortController();
            const outer = init.signal;
            if (outer) {
                if (outer.aborted) own.abort(outer.reason);
                else outer.addEventListener('abort', () => own.abort(outer.reason), { once: true });
            }
            init = { ...init, signal: own.signal };
            armedCut.controller = own;
            armedCut.request = msg;
            armedCut.exchange = ex;
        }
    }

    const res = await fetch(input, init);
    ex.status = res.status;
    ex.contentType = res.headers.get('content-type');
    vlog(`${method} -> ${res.status} ${ex.contentType ?? ''}`,
        ex.lastEventId ? `(Last-Event-ID ${ex.lastEventId})` : '', ex.body ? ex.body.slice(0, 120) : '');
    notify();
    if (!res.body || !/^\s*text\/event-stream/i.test(ex.contentType ?? '')) return res;

    // Pass the bytes through untouched, only noting how the stream finishes.
    ex.streamState = 'open';
    const reader = res.body.getReader();
    const settle = (state, err) => {
        if (ex.streamState !== 'open') return;
        ex.streamState = state;
        ex.streamError = err;
        vlog(`${method} SSE stream ${state}${err ? `: ${err}` : ''}`);
        notify();
    };
    const body = new ReadableStream({
        async pull(controller) {
            let chunk;
            try {
                chunk = await reader.read();
            } catch (err) {
                settle('errored', err);
                controller.error(err);
                return;
            }
            if (chunk.done) {
                settle('ended');
                controller.close();
            } else {
                controller.enqueue(chunk.value);
            }
        },
        cancel(reason) {
            settle('cancelled', reason);
            return reader.cancel(reason);
        }
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
}

// ---------------------------------------------------------------------------
// Helpers for building instrumented clients
// ---------------------------------------------------------------------------
const NO_AUTO_RECONNECT = {
    // The test drives resumption explicitly; a transparent reconnect by the
    // transport would hide what we want to observe.
    maxRetries: 0,
    initialReconnectionDelay: 1000,
    maxReconnectionDelay: 1000,
    reconnectionDelayGrowFactor: 1
};

function makeClient(label, transportOpts) {
    const transport = new StreamableHTTPClientTransport(serverUrl, {
        fetch: instrumentedFetch,
        reconnectionOptions: NO_AUTO_RECONNECT,
        ...transportOpts
    });
    const rec = { label, transport, raw: [], errors: [] };
    // Protocol.connect() chains a pre-existing onmessage, so this sees every
    // JSON-RPC message the transport delivers, before the SDK dispatches it.
    transport.onmessage = msg => {
        rec.raw.push(msg);
        notify();
    };
    const client = new Client({ name: 'tidemark-sdk-interop', version: '1.0.0' }, { capabilities: {} });
    client.onerror = err => {
        rec.errors.push(err);
        vlog(`${label} transport/protocol error: ${err?.message ?? err}`);
        notify();
    };
    rec.client = client;
    return rec;
}

function textOf(result) {
    assert(result && Array.isArray(result.content), `result has no content array: ${fmt(result)}`);
    assert(!result.isError, `tool returned isError: ${fmt(result)}`);
    assert(result.content.length === 1, `expected exactly 1 content item, got ${fmt(result.content)}`);
    const [item] = result.content;
    assert(item.type === 'text', `expected text content, got ${fmt(item)}`);
    return item.text;
}

function range(a, b) {
    const out = [];
    for (let i = a; i <= b; i++) out.push(i);
    return out;
}

const sameList = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);

const isResponseTo = id => m => m && ('result' in m || 'error' in m) && m.id === id;
const isProgressFor = token => m => m && m.method === 'notifications/progress' && m.params?.progressToken === token;

// Strict Tidemark id checks (opt-in): <16 hex>-r<k>-<seq>[-<12 base64url mac>],
// dense increasing seq.
const ID_RE = /^([0-9a-f]{16})-r(\d+)-(\d+)(?:-[A-Za-z0-9_-]{12})?$/;
function checkIdsDense(ids, what, { startAfter } = {}) {
    if (!STRICT_IDS) return;
    let prev;
    if (startAfter !== undefined) {
        const m = ID_RE.exec(startAfter);
        assert(m, `${what}: resumption token ${fmt(startAfter)} does not match ${ID_RE}`);
        prev = m;
    }
    for (const id of ids) {
        const m = ID_RE.exec(id);
        assert(m, `${what}: event id ${fmt(id)} does not match ${ID_RE}`);
        if (prev) {
            assert(m[1] === prev[1] && m[2] === prev[2], `${what}: id ${id} not in same stream as ${prev[0]}`);
            assert(Number(m[3]) === Number(prev[3]) + 1, `${what}: seq not dense: ${prev[0]} then ${id}`);
        }
        prev = m;
    }
}

// ---------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------
let c1; // main client, used for steps 1-4 (pre-cut)
let protocolVersion;
let sessionId;

async function step1() {
    currentStep = '1 initialize/list';
    c1 = makeClient('client1');
    await c1.client.connect(c1.transport);
    protocolVersion = c1.transport.protocolVersion;
    assert(SUPPORTED_PROTOCOL_VERSIONS.includes(protocolVersion),
        `negotiated protocol version ${fmt(protocolVersion)} not in SDK-supported ${fmt(SUPPORTED_PROTOCOL_VERSIONS)}`);
    sessionId = c1.transport.sessionId;
    assert(typeof sessionId === 'string' && sessionId.length > 0, 'server did not assign an Mcp-Session-Id (needed for resumption)');
    const { tools } = await c1.client.listTools();
    const names = tools.map(t => t.name);
    for (const want of [ECHO.name, STREAM.name]) assert(names.includes(want), `tools/list lacks ${fmt(want)}: got ${fmt(names)}`);
    const server = c1.client.getServerVersion();
    console.log(`PASS 1 initialize: protocol ${protocolVersion}${protocolVersion === LATEST_PROTOCOL_VERSION ? ' (latest)' : ''}, ` +
        `server ${server?.name}/${server?.version}, session ${sessionId}, tools ${fmt(names)}`);
}

async function step2() {
    currentStep = '2 echo';
    const result = await c1.client.callTool({ name: ECHO.name, arguments: ECHO.args('hello tidemark') });
    const text = textOf(result);
    assert(text === ECHO.text('hello tidemark'), `echo returned ${fmt(text)}, expected ${fmt(ECHO.text('hello tidemark'))}`);
    console.log(`PASS 2 echo: ${fmt(text)}`);
}

async function step3() {
    currentStep = '3 stream n=5';
    const progress = [];
    const tokens = [];
    const args5 = STREAM.args(5, false);
    const result = await c1.client.callTool({ name: STREAM.name, arguments: args5 }, CallToolResultSchema, {
        onprogress: p => progress.push(p),
        onresumptiontoken: t => tokens.push(t)
    });
    const values = progress.map(p => p.progress);
    assert(sameList(values, [1, 2, 3, 4, 5]), `progress values ${fmt(values)}, expected [1,2,3,4,5]`);
    const totals = progress.map(p => p.total);
    assert(totals.every(t => t === 5), `progress totals ${fmt(totals)}, expected all 5`);
    const text = textOf(result);
    assert(text === STREAM.text(5, args5), `stream result ${fmt(text)}, expected ${fmt(STREAM.text(5, args5))}`);
    assert(new Set(tokens).size === tokens.length, `duplicate SSE event ids: ${fmt(tokens)}`);
    if (STRICT_IDS) {
        const expected = 5 + 1 + (protocolVersion >= '2025-11-25' ? 1 : 0); // progress + result (+ priming)
        assert(tokens.length === expected, `expected ${expected} SSE event ids, got ${tokens.length}: ${fmt(tokens)}`);
        checkIdsDense(tokens, 'step 3');
    }
    console.log(`PASS 3 stream n=5: progress ${fmt(values)}, result ${fmt(text)}, ${tokens.length} SSE event ids`);
}

async function step4() {
    currentStep = '4 cut+resume';
    const N = 40;
    const CUT_AFTER = 5;
    const args = STREAM.args(N, true);

    // ---- Phase A: start the call on client1, cut after >= CUT_AFTER progress notifications.
    const progressA = [];
    const tokensA = [];
    armedCut = {
        match: m => m.method === 'tools/call' && m.params?.name === STREAM.name && STREAM.n(m.params?.arguments) === N
    };
    const outcomeA = { done: false };
    c1.client
        .callTool({ name: STREAM.name, arguments: args }, CallToolResultSchema, {
            onprogress: p => {
                progressA.push(p);
                notify();
            },
            onresumptiontoken: t => {
                tokensA.push(t);
                notify();
            },
            timeout: DEADLINE_MS
        })
        .then(
            r => Object.assign(outcomeA, { done: true, result: r }),
            e => Object.assign(outcomeA, { done: true, error: e })
        )
        .finally(notify);

    await waitFor(() => progressA.length >= CUT_AFTER || outcomeA.done, `${CUT_AFTER} progress notifications before the cut`);
    assert(!outcomeA.done, `call finished before the cut (${fmt(outcomeA.error?.message ?? outcomeA.result)}); server too fast?`);
    const cut = armedCut;
    assert(cut.controller, 'the stream tools/call POST was not seen by the instrumented fetch');
    const requestId = cut.request.id;
    const progressToken = cut.request.params?._meta?.progressToken;
    assert(progressToken !== undefined, 'SDK did not attach a progressToken to the request');
    assert(/^\s*text\/event-stream/i.test(cut.exchange.contentType ?? ''),
        `tools/call response is ${fmt(cut.exchange.contentType)}, expected text/event-stream`);

    cut.controller.abort(new Error('tidemark interop test: deliberate connection drop'));
    // Wait until the SDK transport has actually seen its SSE reader fail, so
    // that every event it parsed before the drop has been dispatched.
    const errCountBefore = c1.errors.length;
    await waitFor(
        () => cut.exchange.streamState !== 'open' &&
            c1.errors.slice(errCountBefore).some(e => /SSE stream disconnected/.test(String(e?.message))),
        'the SDK transport to report the dropped SSE stream'
    );
    assert(cut.exchange.streamState === 'errored',
        `the tools/call SSE response ${cut.exchange.streamState} instead of failing at the cut`);
    armedCut = null;

    const seenA = progressA.map(p => p.progress);
    const k = seenA.length;
    const lastToken = tokensA.at(-1);
    assert(lastToken !== undefined, 'no resumption token (SSE event id) captured before the cut');
    assert(sameList(seenA, range(1, k)), `progress before cut ${fmt(seenA)} is not 1..${k}`);
    assert(k < N, `all ${N} progress notifications arrived before the cut; nothing left to resume`);
    assert(!c1.raw.some(isResponseTo(requestId)), 'final result arrived before the cut');
    assert(!outcomeA.done, `call settled right at the cut: ${fmt(outcomeA.error?.message ?? outcomeA.result)}`);

    // Scenario shaping, not a correctness wait: stay away long enough for the
    // server to produce more events into its log, so the resume below must
    // replay stored events and then switch to the live tail. The assertions
    // hold for any length of this pause (0 included).
    await new Promise(resolve => setTimeout(resolve, RESUME_GAP_MS));

    // Simulate the client going away: close client1 (no DELETE is sent, the
    // session stays alive server-side). The pending call rejects locally.
    await c1.client.close();
    await waitFor(() => outcomeA.done, 'the abandoned call to settle after client1.close()');

    // ---- Phase B: brand-new transport + client on the same session, resume with the last token.
    const c2 = makeClient('client2', { sessionId });
    const progressB = [];
    const stray = [];
    // The replayed notifications carry the ORIGINAL request's progressToken
    // (client1's request id), which client2's Protocol has no handler for, so
    // we take over notifications/progress on client2 (public SDK API).
    c2.client.setNotificationHandler(ProgressNotificationSchema, n => {
        if (n.params.progressToken === progressToken) progressB.push(n.params);
        else stray.push(n.params);
        notify();
    });
    await c2.client.connect(c2.transport); // sessionId set => SDK skips initialize
    c2.transport.setProtocolVersion(protocolVersion);

    const tokensB = [];
    const exIndex = exchanges.length;
    const errBase = c2.errors.length;
    const outcomeB = { done: false };
    // client.request/callTool with resumptionToken: the transport does NOT POST
    // the request; it GETs the endpoint with Last-Event-ID and maps the
    // replayed response onto this new request's id (replayMessageId).
    c2.client
        .callTool({ name: STREAM.name, arguments: args }, CallToolResultSchema, {
            resumptionToken: lastToken,
            onresumptiontoken: t => {
                tokensB.push(t);
                notify();
            },
            timeout: DEADLINE_MS
        })
        .then(
            r => Object.assign(outcomeB, { done: true, result: r }),
            e => Object.assign(outcomeB, { done: true, error: e })
        )
        .finally(notify);
    // A failed resumption GET (non-2xx, stream closed before the response, ...)
    // only reaches transport.onerror; the SDK never settles the request, so
    // watch for errors too instead of waiting for the request timeout.
    await waitFor(() => outcomeB.done || c2.errors.length > errBase, 'the resumed call to complete', DEADLINE_MS);
    const resumeEx = exchanges.slice(exIndex).filter(e => e.method === 'GET');
    if (!outcomeB.done || outcomeB.error) {
        const g = resumeEx[0];
        fail(`resumption failed: ${outcomeB.error?.message ?? c2.errors.slice(errBase).map(e => e?.message).join('; ')}` +
            (g ? ` [GET Last-Event-ID ${g.lastEventId} -> HTTP ${g.status} ${g.contentType ?? ''}, stream ${g.streamState}]` : ' [no GET sent]') +
            `; progress before cut 1..${k}, after resume ${fmt(progressB.map(p => p.progress))}`);
    }
    const resultB = outcomeB.result;
    assert(resumeEx.length === 1, `expected exactly 1 resumption GET, saw ${resumeEx.length}`);
    const get = resumeEx[0];
    assert(get.lastEventId === lastToken, `resumption GET carried Last-Event-ID ${fmt(get.lastEventId)}, expected ${fmt(lastToken)}`);
    assert(get.sessionId === sessionId, `resumption GET carried Mcp-Session-Id ${fmt(get.sessionId)}, expected ${fmt(sessionId)}`);
    assert(!exchanges.slice(exIndex).some(e => e.method === 'POST'), 'resumption unexpectedly POSTed');

    // The server should end the resumed stream after the response; wait for
    // that so any duplicate trailing events would be observed.
    await waitFor(() => get.streamState !== 'open', 'the server to end the resumed SSE stream after the response');
    assert(get.streamState === 'ended', `resumed SSE stream did not end cleanly: ${get.streamState} ${get.streamError ?? ''}`);

    const seenB = progressB.map(p => p.progress);
    const expectB = range(k + 1, N);
    assert(sameList(seenB, expectB),
        `progress after resume ${fmt(seenB)}, expected ${fmt(expectB)} (last before cut: ${k}, token ${lastToken})`);
    const union = [...seenA, ...seenB];
    assert(sameList(union, range(1, N)), `union of progress ${fmt(union)} is not 1..${N}`);
    const totals = [...progressA, ...progressB].map(p => p.total);
    assert(totals.every(t => t === N), `progress totals ${fmt(totals)}, expected all ${N}`);
    assert(stray.length === 0, `progress notifications for unexpected tokens: ${fmt(stray)}`);

    const rawResponses = c2.raw.filter(m => 'result' in m || 'error' in m);
    assert(rawResponses.length === 1, `expected exactly 1 response on the resumed stream, got ${rawResponses.length}: ${fmt(rawResponses)}`);
    const rawProgress = c2.raw.filter(isProgressFor(progressToken)).map(m => m.params.progress);
    assert(sameList(rawProgress, expectB), `raw progress on resumed stream ${fmt(rawProgress)} != ${fmt(expectB)}`);
    const text = textOf(resultB);
    assert(text === STREAM.text(N, args), `resumed result ${fmt(text)}, expected ${fmt(STREAM.text(N, args))}`);
    const bad = c2.errors.filter(e => /unknown (token|message ID)|SSE stream disconnected|reconnect/i.test(String(e?.message)));
    assert(bad.length === 0, `client2 reported: ${bad.map(e => e.message).join('; ')}`);
    assert(new Set([...tokensA, ...tokensB]).size === tokensA.length + tokensB.length, 'SSE event ids repeated across the resume');
    checkIdsDense(tokensA, 'step 4 before the cut');
    checkIdsDense(tokensB, 'step 4 resumed stream', { startAfter: lastToken });

    console.log(`PASS 4 cut+resume: cut after progress ${k} (token ${lastToken}); ` +
        `resumed GET replayed/streamed ${seenB.length} progress [${seenB[0]}..${seenB.at(-1)}], ` +
        `1 result ${fmt(text)}, stream ended by server`);

    // Best-effort cleanup (not part of the assertions).
    try {
        await c2.transport.terminateSession();
    } catch (e) {
        vlog(`terminateSession: ${e?.message ?? e}`);
    }
    await c2.client.close();
}

try {
    vlog(`SDK ${sdkVersion()} from ${sdkRoot()}`);
    await step1();
    await step2();
    await step3();
    await step4();
    clearTimeout(globalTimer);
    finish(0, `OK all steps passed (SDK ${sdkVersion()}, ${serverUrl.href})`);
} catch (err) {
    const msg = err instanceof AssertionFailure
        ? err.message
        : `${err?.message ?? err}${err?.cause ? ` (cause: ${err.cause.message ?? err.cause})` : ''}${VERBOSE ? `\n${err?.stack}` : ''}`;
    finish(1, `FAIL ${currentStep}: ${msg}`);
}
