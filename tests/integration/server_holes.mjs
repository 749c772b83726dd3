// server_holes.mjs - regression tests for the holes a hostile client found in
// the server (issue 10), each a real server driven over HTTP:
//
//   node server_holes.mjs SERVER_BINARY STORE SCENARIO
//   STORE: memory | sqlite | redis (two nodes on one Redis; retries go to the
//   other node). SCENARIO: ids | slowloris | streams | starvation | framing | limits
//   | diskfull (SQLite, a server built with crash points: its fault VFS).
// Attack traffic comes from 127.0.0.2 (all of 127/8 is loopback), the
// well-behaved client from 127.0.0.1, so per-address fairness shows.
import { connect } from "node:net";
import { mkdtempSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sseEvents } from "./sse.mjs";
import {
  callTool, checker, initialize, initializeFrom, ledgerCount, messages, post, postFrom, rawHttp,
  reasonOf, serversFor, sleep, timed, toolCall, until,
} from "./mcp_http.mjs";

const [bin, kind, scenario] = process.argv.slice(2);
if (!bin || !kind || !scenario) {
  console.error("usage: server_holes.mjs SERVER_BINARY memory|sqlite|redis SCENARIO");
  process.exit(2);
}
const t = checker();
const tag = Math.random().toString(36).slice(2, 8);

// Send the same ledger_append three times (alternating nodes); the ledger
// must hold it once and every answer must be the same success.
async function thrice(urls, sid, id, entry, meta = {}) {
  const answers = [];
  for (let i = 0; i < 3; i++)
    answers.push(await callTool(urls[i % 2], sid, id, "ledger_append", { entry }, meta));
  return answers;
}

// Items 1-3: request ids and idempotency keys are keyed exactly, whatever
// their length or bytes; over the documented limits they are refused typed.
async function ids(urls) {
  const sid = await initialize(urls[0]);
  const long = (n, c = "x") => c.repeat(n);
  for (const n of [150, 200, 1024]) {
    const entry = `id${n}-${tag}`;
    const a = await thrice(urls, sid, long(n), entry);
    t.check(`id of ${n} bytes: every retry answered appended`,
      a.every((x) => x.response?.result?.content?.[0]?.text === "appended"),
      JSON.stringify(a.map((x) => x.status + " " + JSON.stringify(x.response?.error ?? null))));
    t.check(`id of ${n} bytes: one ledger row after 3 sends`, await ledgerCount(urls[0], sid, entry) === 1,
      String(await ledgerCount(urls[0], sid, entry)));
  }
  // Two ids equal for 170 bytes are two requests.
  const p = long(170);
  for (const s of ["A", "B"]) await callTool(urls[0], sid, p + s, "ledger_append", { entry: `pfx-${tag}` });
  t.check("ids sharing a 170-byte prefix are two requests", await ledgerCount(urls[0], sid, `pfx-${tag}`) === 2);
  // An id with NUL bytes: a retry gets the stored answer (never 500).
  const nul = "a\u0000b\u0000" + tag;
  const an = await thrice(urls, sid, nul, `nul-${tag}`);
  t.check("NUL id: retries answered 200 with the stored response",
    an.every((x) => x.status === 200 && x.response?.id === nul && x.response?.result),
    JSON.stringify(an.map((x) => [x.status, x.response])));
  t.check("NUL id: one ledger row", await ledgerCount(urls[0], sid, `nul-${tag}`) === 1);
  t.check("ids 'a\\0b' and 'a' are different requests",
    (await callTool(urls[0], sid, "a", "ledger_append", { entry: `nul-${tag}` })).response?.result &&
    await ledgerCount(urls[0], sid, `nul-${tag}`) === 2);
  // Idempotency keys: long keys sharing a prefix are different calls; the
  // same key under new request ids is one call.
  const kp = long(300, "k");
  for (const s of ["1", "2"])
    await callTool(urls[0], sid, "k" + s + tag, "ledger_append", { entry: `key-${tag}` },
      { "dev.tidemark/idempotency-key": kp + s });
  t.check("keys sharing a 300-byte prefix are two calls", await ledgerCount(urls[0], sid, `key-${tag}`) === 2);
  const ak = [];
  for (let i = 0; i < 3; i++)
    ak.push(await callTool(urls[i % 2], sid, `re-${i}-${tag}`, "ledger_append", { entry: `rekey-${tag}` },
      { "dev.tidemark/idempotency-key": "\u0000" + kp }));
  t.check("a re-issued key (with NUL) is one call, answered under each new id",
    ak.every((x, i) => x.response?.id === `re-${i}-${tag}` && x.response?.result) &&
    await ledgerCount(urls[0], sid, `rekey-${tag}`) === 1,
    JSON.stringify(ak.map((x) => [x.status, x.response])));
  // Over the limits: typed refusals, and nothing ran.
  const big = await messages(await post(urls[0], sid, toolCall(long(1025), "ledger_append", { entry: `big-${tag}` })));
  t.check("id over 1024 bytes: 400 id_too_long", big.status === 400 && reasonOf(big.msgs[0]) === "id_too_long",
    JSON.stringify([big.status, big.msgs[0]?.error]));
  const bk = await messages(await post(urls[0], sid, toolCall("bk" + tag, "ledger_append", { entry: `big-${tag}` },
    { "dev.tidemark/idempotency-key": long(513) })));
  t.check("key over 512 bytes: 400 -32602 idempotency_key_too_long",
    bk.status === 400 && bk.msgs[0]?.error?.code === -32602 && reasonOf(bk.msgs[0]) === "idempotency_key_too_long",
    JSON.stringify([bk.status, bk.msgs[0]?.error]));
  const nk = await messages(await post(urls[0], sid, toolCall("nk" + tag, "ledger_append", { entry: `big-${tag}` },
    { "dev.tidemark/idempotency-key": 7 })));
  t.check("non-string key: 400 invalid_idempotency_key", nk.status === 400 && reasonOf(nk.msgs[0]) === "invalid_idempotency_key");
  t.check("refused calls did not run", await ledgerCount(urls[0], sid, `big-${tag}`) === 0);
}

// A well-behaved client's round: initialize, ping, echo; each answered.
async function probe(url, i) {
  const sid = await initialize(url);
  const ping = await messages(await post(url, sid, { jsonrpc: "2.0", id: 1, method: "ping" }));
  const echo = await callTool(url, sid, 2, "echo", { text: "probe" + i });
  return ping.msgs[0]?.result && echo.response?.result?.content?.[0]?.text === "probe" + i;
}

// Item 5: 4,200 connections from one address trickling a header byte
// every 500 ms. Past the per-address limit (4096) each gets a typed 503 at
// once; the others are cut at the request deadline; meanwhile probes from
// another address are served (before: 0 of 6 in 30 s).
async function slowloris(urls) {
  const u = new URL(urls[0]);
  const N = 4200, socks = [];
  for (let i = 0; i < N; i++) {
    const s = connect({ host: u.hostname, port: Number(u.port), localAddress: "127.0.0.2" });
    s.got = "";
    s.opened = Date.now();
    s.on("data", (d) => { s.got += d; });
    s.on("close", () => { s.closedAt = Date.now(); });
    s.on("error", () => {});
    s.on("connect", () => s.write("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    socks.push(s);
    if (i % 500 === 499) await sleep(20);
  }
  const trickle = setInterval(() => { for (const s of socks) if (!s.closedAt) s.write("X"); }, 500);
  try {
    await until("the 4,200 connections to be accepted or refused",
      () => socks.every((s) => s.closedAt || s.readyState === "open"), 20000);
    const probes = [];
    for (let i = 0; i < 6; i++) probes.push(await timed(() => probe(urls[0], i)));
    t.check("6 of 6 probes from another address answered within 2 s each",
      probes.every((p) => p.ok && p.ms < 2000), JSON.stringify(probes.map((p) => [p.ok, p.ms, p.ok ? "" : p.detail])));
    const refused = socks.filter((s) => /^HTTP\/1\.1 503/.test(s.got) && /too_many_connections/.test(s.got));
    t.check("connections past the per-address limit get 503 too_many_connections",
      refused.length >= N - 4096 && refused.length <= N - 4096 + 64, `${refused.length} refused`);
    await until("the trickling connections to be cut at the deadline",
      () => socks.every((s) => s.closedAt), 15000).catch(() => {});
    const late = socks.filter((s) => !s.closedAt || s.closedAt - s.opened > 3000 + 2500);
    t.check("every trickling connection cut within the 3 s request deadline (+2.5 s)", late.length === 0,
      `${late.length} still open or late`);
    t.check("the server still serves after the attack", (await timed(() => probe(urls[0], 9))).ok);
  } finally {
    clearInterval(trickle);
    for (const s of socks) s.destroy();
  }
}

// Item 5, streams: 8,000 idle SSE streams (from two addresses) leave the
// server answering /metrics and calls promptly (before: both timed out).
async function streams(urls) {
  const url = urls[0], u = new URL(url);
  const N = 8000, socks = [];
  const open = (addr, sid) => new Promise((resolve) => {
    const s = connect({ host: u.hostname, port: Number(u.port), localAddress: addr });
    s.got = "";
    setTimeout(() => resolve(s), 10000);
    s.on("data", (d) => { s.got += d; if (/\r\n\r\n/.test(s.got)) resolve(s); });
    s.on("error", () => resolve(s));
    s.on("close", () => resolve(s));
    s.on("connect", () => s.write(`GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n` +
      `Mcp-Session-Id: ${sid}\r\n\r\n`));
    socks.push(s);
  });
  try {
    for (let i = 0; i < N; i += 200) {
      const batch = [];
      for (let k = i; k < i + 200 && k < N; k++) {
        const addr = k % 2 ? "127.0.0.2" : "127.0.0.3";
        batch.push(initializeFrom(addr, url).then((sid) => open(addr, sid)));
      }
      await Promise.all(batch);
    }
    const live = socks.filter((s) => /^HTTP\/1\.1 200/.test(s.got) && !s.destroyed).length;
    t.check(`${N} idle SSE streams open`, live === N, `${live} open`);
    const m = await timed(async () => {
      const r = await fetch(url.replace(/\/mcp$/, "/metrics"));
      const txt = await r.text();
      return r.status === 200 && /tidemark_streams_open (\d+)/.exec(txt)?.[1];
    }, 5000);
    t.check("/metrics answered within 2 s, counting the streams", m.ok && m.ms < 2000 && Number(m.detail) >= N,
      JSON.stringify(m));
    const p = await timed(() => probe(url, 0), 5000);
    t.check("initialize, ping and echo answered within 2 s", p.ok && p.ms < 2000, JSON.stringify(p));
  } finally {
    for (const s of socks) s.destroy();
  }
}

// Item 6: slow calls from one client (their connections cut at once) must
// not hold back anyone else: one session with 16, then five sessions of one
// address with 10 each; a probe from another address stays prompt.
async function starvation(urls) {
  const url = urls[0];
  const slow = (sid, id) => postFrom("127.0.0.2", url, sid,
    toolCall(id, "external_call", { delay_ms: 6000 }), { cut: true });
  // First, while nothing else runs: a session's queue is bounded (--max-queued-per-session 20 here): 8
  // run, 20 wait, the next is refused 429 before anything is recorded.
  const q = await initializeFrom("127.0.0.2", url);
  const first = await Promise.all(Array.from({ length: 28 }, (_, i) => slow(q, "q" + i)));
  const over = await postFrom("127.0.0.2", url, q, toolCall("q-over", "external_call", { delay_ms: 1 }));
  let body = null;
  try { body = JSON.parse(over.text); } catch { /* an SSE answer: not refused */ }
  t.check("a full session queue: 429 too_many_requests with Retry-After",
    first.every((r) => r.status === 200) && over.status === 429 &&
    reasonOf(body) === "too_many_requests" && over.headers["retry-after"] === "1",
    JSON.stringify([first.map((r) => r.status).join(""), over.status, over.text]));
  const one = await initializeFrom("127.0.0.2", url);
  const cut = await Promise.all(Array.from({ length: 16 }, (_, i) => slow(one, "s" + i)));
  t.check("16 slow calls of one session accepted", cut.every((r) => r.status === 200),
    JSON.stringify(cut.map((r) => r.status)));
  const p1 = [];
  for (let i = 0; i < 3; i++) p1.push(await timed(() => probe(url, i)));
  t.check("one session's 16 slow calls: initialize, ping, echo of others within 2 s",
    p1.every((p) => p.ok && p.ms < 2000), JSON.stringify(p1.map((p) => [p.ok, p.ms])));
  const own = await timed(async () => (await postFrom("127.0.0.2", url, one,
    { jsonrpc: "2.0", id: "own-ping", method: "ping" })).status === 200);
  t.check("the busy session itself can still ping", own.ok && own.ms < 2000, JSON.stringify(own));
  const many = await Promise.all(Array.from({ length: 5 }, () => initializeFrom("127.0.0.2", url)));
  await Promise.all(many.flatMap((sid) => Array.from({ length: 10 }, (_, i) => slow(sid, "m" + i))));
  const p2 = [];
  for (let i = 0; i < 3; i++) p2.push(await timed(() => probe(url, 10 + i)));
  t.check("one address's 94 slow calls: others answered within 2 s",
    p2.every((p) => p.ok && p.ms < 2000), JSON.stringify(p2.map((p) => [p.ok, p.ms])));
}

// Item 12: ambiguous framing is refused (request smuggling behind a proxy),
// and one request cannot multiply its size without bound.
async function framing(urls) {
  const url = urls[0];
  const sid = await initialize(url);
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
  const req = (extra) => `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Accept: application/json, text/event-stream\r\nMcp-Session-Id: ${sid}\r\n${extra}\r\n${body}`;
  const rows = [
    ["two different Content-Length", `Content-Length: ${body.length}\r\nContent-Length: 5\r\n`, "repeated_content_length"],
    ["two equal Content-Length", `Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\n`, "repeated_content_length"],
    ["Content-Length with Transfer-Encoding", `Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n`,
      "content_length_with_transfer_encoding"],
  ];
  for (const [name, extra, reason] of rows) {
    const r = await rawHttp(url, req(extra));
    let why = null;
    try { why = reasonOf(JSON.parse(r.body)); } catch { /* not JSON */ }
    t.check(`${name}: 400 ${reason}, connection closed`,
      r.status === 400 && why === reason && /close/i.test(r.headers.connection ?? ""),
      JSON.stringify([r.status, r.headers.connection, r.body.slice(0, 200)]));
  }
  const ok = await rawHttp(url, req(`Content-Length: ${body.length}\r\n`));
  t.check("one Content-Length: answered 200", ok.status === 200, JSON.stringify([ok.status, ok.body]));
  // Batches are bounded (2025-03-26 is the version that has them).
  const old = await initialize(url, "2025-03-26");
  const batch = (n) => Array.from({ length: n }, (_, i) => ({ jsonrpc: "2.0", id: i, method: "ping" }));
  const big = await messages(await post(url, old, batch(65)));
  t.check("a batch of 65: 400 batch_too_large", big.status === 400 && reasonOf(big.msgs[0]) === "batch_too_large",
    JSON.stringify([big.status, big.msgs[0]]));
  const fine = await messages(await post(url, old, batch(64)));
  t.check("a batch of 64: 64 answers", fine.status === 200 && fine.msgs.length === 64);
  // Versions without batches refuse any batch as such, whatever its size.
  for (const n of [2, 65, 10000]) {
    const nb = await messages(await post(url, sid, batch(n)));
    t.check(`a batch of ${n} on 2025-11-25: 400 batch_not_supported`,
      nb.status === 400 && reasonOf(nb.msgs[0]) === "batch_not_supported", JSON.stringify([nb.status, nb.msgs[0]]));
  }
  const huge = await callTool(url, sid, 9, "stream", { n: 10001 });
  t.check("stream n=10001 refused by the demo tool", huge.response?.result?.isError === true);
}

// Item 8: a full disk. Calls in flight end with a typed store_failed error
// (no SSE id: nothing of it is committed) instead of a stream that just
// stops; meanwhile new work gets 503 store_unavailable and a retry of a
// failed call 503 store_failed; once space is back the server takes writes
// again without a restart and settles the failed calls as after a crash:
// the atomic one re-runs (once), the other ends outcome_unknown.
async function diskfull(urls, env) {
  const url = urls[0];
  const sid = await initialize(url);
  const start = (id, name, args) => post(url, sid, toolCall(id, name, args, { progressToken: id }));
  const readAll = async (res) => {
    const evs = [];
    for await (const ev of sseEvents(res.body)) evs.push(ev);
    return evs;
  };
  const a = await start("ext", "external_call", { delay_ms: 1500 });
  const b = await start("led", "ledger_append", { entry: "full-" + tag, delay_ms: 1500 });
  const ea = readAll(a), eb = readAll(b);
  await sleep(300);
  writeFileSync(env.fullFile, "");
  const [va, vb] = await Promise.all([ea, eb].map((p) => timed(() => p, 10000)));
  for (const [name, v] of [["external_call", va], ["ledger_append", vb]]) {
    const last = v.ok ? v.detail.at(-1) : null;
    let msg = null;
    try { msg = JSON.parse(last?.data); } catch { /* none */ }
    t.check(`${name} in flight: its stream ends with store_failed, sent without an id`,
      v.ok && last.id === null && reasonOf(msg) === "store_failed", JSON.stringify(v.ok ? v.detail : v));
  }
  const init = await post(url, null, { jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } });
  const ib = await init.json().catch(() => null);
  t.check("initialize while the disk is full: 503 store_unavailable",
    init.status === 503 && reasonOf(ib) === "store_unavailable", JSON.stringify([init.status, ib]));
  const ra = await post(url, sid, toolCall("ext", "external_call", { delay_ms: 1500 }));
  const rab = await ra.json().catch(() => null);
  t.check("a retry of the failed call meanwhile: 503 store_failed", ra.status === 503 && reasonOf(rab) === "store_failed",
    JSON.stringify([ra.status, rab]));
  unlinkSync(env.fullFile);
  await until("the store to take writes again", async () => (await timed(() => initialize(url), 3000)).ok, 20000);
  const settled = async (id, name, args) => until(`${id} to be settled`, async () => {
    const r = await callTool(url, sid, id, name, args);
    return r.status === 200 && r.response ? r.response : null;
  }, 10000);
  const sa = await settled("ext", "external_call", { delay_ms: 1500 });
  t.check("then the non-idempotent call is settled outcome_unknown", reasonOf(sa) === "outcome_unknown",
    JSON.stringify(sa));
  const sb = await settled("led", "ledger_append", { entry: "full-" + tag, delay_ms: 1500 });
  t.check("and the atomic one re-ran to its result", sb?.result?.content?.[0]?.text === "appended",
    JSON.stringify(sb));
  t.check("its effect exists exactly once", await ledgerCount(url, sid, "full-" + tag) === 1);
}

// Items 7 (the limits part): subscriptions per session and uri length.
async function limits(urls) {
  const sid = await initialize(urls[0]);
  const sub = async (id, uri, on = true) => (await messages(await post(urls[1], sid,
    { jsonrpc: "2.0", id, method: on ? "resources/subscribe" : "resources/unsubscribe", params: { uri } }))).msgs[0];
  let ok = 0;
  for (let i = 0; i < 256; i++) if ((await sub(i, `test://r/${i}`))?.result) ok++;
  t.check("256 subscriptions accepted", ok === 256, String(ok));
  const over = await sub(300, "test://r/over");
  t.check("the 257th: too_many_subscriptions with the limit",
    reasonOf(over) === "too_many_subscriptions" && over.error.data.limit === 256, JSON.stringify(over));
  t.check("re-subscribing an existing one at the limit is fine", !!(await sub(301, "test://r/7"))?.result);
  await sub(302, "test://r/7", false);
  t.check("after an unsubscribe there is room again", !!(await sub(303, "test://r/new"))?.result);
  const long = await sub(304, "test://" + "u".repeat(2048));
  t.check("a uri over 2048 bytes: uri_too_long", reasonOf(long) === "uri_too_long", JSON.stringify(long));
  const nul = await sub(305, "test://a\u0000b");
  t.check("a uri with NUL: invalid_params", reasonOf(nul) === "invalid_params", JSON.stringify(nul));
}

const scenarios = {
  ids: { fn: ids },
  slowloris: { fn: slowloris, flags: ["--request-deadline-ms", "3000"] },
  streams: { fn: streams },
  starvation: { fn: starvation, flags: ["--max-queued-per-session", "20"] },
  framing: { fn: framing },
  limits: { fn: limits },
  diskfull: { fn: diskfull, fullFile: true },
};
const sc = scenarios[scenario];
if (!sc) { console.error("unknown scenario " + scenario); process.exit(2); }
const env = {};
if (sc.fullFile) env.fullFile = join(mkdtempSync(join(tmpdir(), "tidemark-full-")), "full");
const servers = await serversFor(bin, kind, sc.flags ?? [],
  env.fullFile ? { TIDEMARK_SQLITE_FULL_FILE: env.fullFile } : {});
if (!servers) { console.log("SKIP: redis-server not installed"); process.exit(77); }
try {
  await sc.fn(servers.urls, env);
} catch (e) {
  t.check("scenario ran to the end", false, e.stack);
} finally {
  await servers.stop();
}
t.done();
