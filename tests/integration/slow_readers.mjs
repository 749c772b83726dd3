// slow_readers.mjs - a slow reader costs bounded memory (issue 30, item 4):
// CALLS calls of the `stream` tool (N progress events each, SQLite store)
// whose answers are never read must not grow the server's RSS by more than
// MAX_MB, another client's initialize + tools/list on a fresh connection is
// answered within 1 s all along, the streams once read deliver every event
// and the result, and what they held goes back once they are gone.
//
//   node slow_readers.mjs SERVER_BINARY [CALLS N MAX_MB]
//
// The streams come from 127.0.0.1, the probing client from 127.0.0.2.
import { connect } from "node:net";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, initializeFrom, postFrom, sleep, startServer, stopServer, until } from "./mcp_http.mjs";

const [bin, callsArg, nArg, maxArg] = process.argv.slice(2);
if (!bin) {
  console.error("usage: slow_readers.mjs SERVER_BINARY [CALLS N MAX_MB]");
  process.exit(2);
}
const CALLS = Number(callsArg ?? 200), N = Number(nArg ?? 10000), MAX_MB = Number(maxArg ?? 50);
/* What may stay once they are gone: the store keeps the last 256 closed
 * streams cached (each its ring of 256 events, ~12 MB here), SQLite its
 * pages, and glibc what it does not give back (by hand, 200 × 2,500: 17-20
 * MB most runs, 29-32 MB in some, before and after 2026-12-06's changes
 * alike). Before, the 300 MB the unread answers had held stayed. */
const BACK_MB = (MAX_MB * 4) / 5;
const PER_SESSION = 8; /* the scheduler runs 8 calls of a session at once */
const t = checker();

const status = (pid) => readFileSync(`/proc/${pid}/status`, "utf8");
const kb = (pid, field) => Number(status(pid).match(new RegExp(field + ":\\s+(\\d+)"))[1]);

async function metric(url, name) {
  const r = await fetch(url.replace(/\/mcp$/, "/metrics"));
  const m = (await r.text()).match(new RegExp("^" + name + " (\\S+)$", "m"));
  return m ? Number(m[1]) : NaN;
}

// A call on its own connection, POSTed raw; nothing of the answer is read
// until read() is called. The socket is paused before the answer can come.
function openStream(url, sid, id) {
  const u = new URL(url);
  const body = JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call",
    params: { name: "stream", arguments: { n: N }, _meta: { progressToken: "p" + id } } });
  const sock = connect({ host: u.hostname, port: Number(u.port), localAddress: "127.0.0.1" });
  sock.pause();
  sock.write(`POST ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\n` +
    `Accept: application/json, text/event-stream\r\nMcp-Session-Id: ${sid}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  const s = { sock, bytes: 0, text: "", closed: false };
  sock.on("error", () => { s.closed = true; });
  sock.on("close", () => { s.closed = true; });
  s.read = () => new Promise((resolve) => {
    sock.setEncoding("utf8");
    sock.on("data", (d) => {
      s.text += d;
      if (s.text.includes(`"id":${id},"result"`)) resolve(s); /* the call's answer */
    });
    sock.on("close", () => resolve(s));
    sock.resume();
  });
  return s;
}

// The body of a raw HTTP/1.1 answer, its chunks joined (chunked) or as is.
function body(text) {
  const i = text.indexOf("\r\n\r\n");
  if (i < 0) return "";
  let rest = text.slice(i + 4);
  if (!/^transfer-encoding:\s*chunked/im.test(text.slice(0, i))) return rest;
  let out = "";
  for (;;) {
    const e = rest.indexOf("\r\n");
    const n = e < 0 ? 0 : parseInt(rest.slice(0, e), 16);
    if (!n) return out;
    out += rest.slice(e + 2, e + 2 + n); /* ASCII answers: characters are bytes */
    rest = rest.slice(e + 2 + n + 2);
  }
}

// initialize + tools/list on fresh connections from 127.0.0.2: ms taken.
async function probe(url) {
  const t0 = Date.now();
  const sid = await initializeFrom("127.0.0.2", url);
  const r = await postFrom("127.0.0.2", url, sid, { jsonrpc: "2.0", id: 1, method: "tools/list" });
  if (r.status !== 200 || !r.text.includes('"stream"')) throw new Error("tools/list: " + r.status);
  return Date.now() - t0;
}

// Probes one after another until stop() is called: the slowest, in ms.
function prober(url) {
  const p = { worst: 0, count: 0, errors: [], running: true };
  p.done = (async () => {
    while (p.running) {
      try {
        const ms = await probe(url);
        p.worst = Math.max(p.worst, ms);
        p.count++;
      } catch (e) {
        p.errors.push(String(e));
      }
      await sleep(50);
    }
  })();
  p.stop = async () => { p.running = false; await p.done; return p; };
  return p;
}

// The metric is the same twice, 500 ms apart (what the server writes to
// stuck streams has settled).
async function settled(url, name, ms = 30000) {
  let last = await metric(url, name);
  return until(name + " settled", async () => {
    await sleep(500);
    const now = await metric(url, name);
    const same = now === last;
    last = now;
    return same;
  }, ms);
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), "tidemark-slow-"));
  const db = join(dir, "t.db");
  const s = await startServer(bin, ["--store", "sqlite:" + db, "--durability", "process"]);
  const pid = s.proc.pid;
  try {
    // Warm up: threads, the store's caches, one stream read whole.
    const sids = [];
    for (let i = 0; i < Math.ceil(CALLS / PER_SESSION); i++) sids.push(await initializeFrom("127.0.0.1", s.url));
    const warm = openStream(s.url, sids[0], 0);
    await warm.read();
    warm.sock.destroy();
    await probe(s.url);
    const before = kb(pid, "VmRSS");
    const appended0 = await metric(s.url, "tidemark_events_appended_total");

    const p = prober(s.url);
    const t0 = Date.now();
    const streams = [];
    for (let i = 0; i < CALLS; i++) streams.push(openStream(s.url, sids[Math.floor(i / PER_SESSION)], i + 1));
    await until("every call's events appended", async () =>
      await metric(s.url, "tidemark_events_appended_total") >= appended0 + CALLS * N, 60000);
    await settled(s.url, "tidemark_events_emitted_total");
    const unread = kb(pid, "VmRSS");
    console.log(`RssAnon ${kb(pid, "RssAnon")} kB, RssFile ${kb(pid, "RssFile")} kB, RssShmem ${kb(pid, "RssShmem")} kB`);
    const probes = await p.stop();
    const addedMb = (unread - before) / 1024;
    console.log(`${CALLS} unread streams of ${N} events in ${Date.now() - t0} ms: RSS ${before} kB -> ` +
      `${unread} kB (+${addedMb.toFixed(1)} MB); ${probes.count} probes, slowest ${probes.worst} ms`);
    t.check(`${CALLS} unread streams add under ${MAX_MB} MB of RSS`, addedMb < MAX_MB,
      `+${addedMb.toFixed(1)} MB`);
    t.check("another client's initialize + tools/list answered within 1 s meanwhile",
      probes.count > 0 && probes.errors.length === 0 && probes.worst < 1000,
      `slowest ${probes.worst} ms of ${probes.count}; ${probes.errors.slice(0, 2)}`);

    // Half of them read now: every event comes, then the result.
    const half = streams.slice(0, CALLS / 2);
    await Promise.all(half.map((x) => x.read()));
    const whole = half.filter((x) => {
      const b = body(x.text);
      return (b.match(/"notifications\/progress"/g) ?? []).length === N && b.includes(`"streamed ${N}"`);
    });
    t.check(`each of ${half.length} streams, read late, has its ${N} events and its result`,
      whole.length === half.length, `${whole.length} whole; one: ${half.find((x) => !whole.includes(x))?.text.slice(-300)}`);

    // All gone (the other half never read): what they held goes back.
    for (const x of streams) x.sock.destroy();
    await until("the streams' connections closed", async () =>
      await metric(s.url, "tidemark_connections_open") <= 1, 30000);
    await probe(s.url);
    /* The server gives freed heap back from its janitor, once a second:
     * RSS is read until it is back within the bound, for up to 10 s. */
    const t1 = Date.now();
    await until("RSS back", async () => kb(pid, "VmRSS") - before < BACK_MB * 1024, 10000).catch(() => null);
    const after = kb(pid, "VmRSS"), peak = kb(pid, "VmHWM");
    console.log(`after the streams closed: RSS ${after} kB (${((after - before) / 1024).toFixed(1)} MB over ` +
      `the start; waited ${Date.now() - t1} ms for it), peak ${peak} kB`);
    t.check(`RSS within ${BACK_MB} MB of the start once the streams are gone`,
      after - before < BACK_MB * 1024, `${after} kB against ${before} kB`);
  } finally {
    await stopServer(s);
    rmSync(dir, { recursive: true, force: true }); /* ~70 MB of database a run */
  }
}

try {
  await main();
} catch (e) {
  t.check("no exception", false, e.stack);
}
t.done();
