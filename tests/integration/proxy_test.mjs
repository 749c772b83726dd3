// Fault-injecting proxy test (issue 5, item 1): tm-proxy in front of a tiny
// raw HTTP/1.1 server whose responses are known byte for byte (chunked SSE,
// Content-Length SSE, CRLF SSE, a large plain body, a small JSON body).
// Asserts, for every mode and several seeds:
//   - whatever a client receives is a prefix of what the server sent (never altered bytes);
//   - none / unreached: byte-identical pass-through, keep-alive included;
//   - cut: ends with FIN after exactly the logged offset; reset: ends with RST, a prefix;
//   - event-boundary: ends exactly after the k-th SSE event (k from the log), body ends in a blank line;
//   - mid-event: ends right after the id line of an event, inside it;
//   - stall: everything delivered, and not before --stall-ms have passed;
//   - the same seed gives the same plans and cut offsets, another seed different ones;
//   - --rate splits connections between faults and pass-through; concurrency; SIGTERM summary.
// Prints a table of injected faults and `N passed, M failed`; exits non-zero on failure.
//
//   node proxy_test.mjs PATH/TO/tm-proxy
import { spawn } from "node:child_process";
import { reaped } from "./reap.mjs";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const PROXY = process.argv[2];
if (!PROXY) {
  console.error("usage: proxy_test.mjs TM_PROXY_BINARY");
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), "tm-proxy-test-"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let passed = 0;
let failed = 0;
function check(name, cond, detail = "") {
  if (cond) {
    passed++;
  } else {
    failed++;
    console.log(`FAIL ${name}${detail ? ": " + detail : ""}`);
  }
  return cond;
}

// Poll a condition until it holds or the deadline passes (never a blind sleep).
async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

// ---- the known responses ------------------------------------------------------
const EVENTS = 50;
function sseBody(eol) {
  let s = `: stream start${eol}${eol}`; // a comment block: not an event
  for (let n = 1; n <= EVENTS; n++) s += `id: ${n}${eol}data: payload-${n}${eol}${eol}`;
  return Buffer.from(s);
}
function chunked(body, sizes) {
  const parts = [];
  let i = 0;
  for (let k = 0; i < body.length; k++) {
    const piece = body.subarray(i, i + sizes[k % sizes.length]);
    parts.push(Buffer.from(piece.length.toString(16) + "\r\n"), piece, Buffer.from("\r\n"));
    i += piece.length;
  }
  parts.push(Buffer.from("0\r\n\r\n"));
  return Buffer.concat(parts);
}
function bigBody(n) {
  const b = Buffer.alloc(n);
  let x = 12345;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}
const SSE_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
const ROUTES = {
  "/sse": Buffer.concat([
    Buffer.from(SSE_HEAD + "Transfer-Encoding: chunked\r\n\r\n"),
    chunked(sseBody("\n"), [7, 40, 25, 3, 90, 18, 1, 55]),
  ]),
  "/sse-cl": (() => {
    const b = sseBody("\n");
    return Buffer.concat([Buffer.from(SSE_HEAD + `Content-Length: ${b.length}\r\n\r\n`), b]);
  })(),
  "/sse-crlf": Buffer.concat([
    Buffer.from(SSE_HEAD + "Transfer-Encoding: chunked\r\n\r\n"),
    chunked(sseBody("\r\n"), [11, 64, 2, 37, 29]),
  ]),
  "/big": (() => {
    const b = bigBody(256 * 1024);
    return Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: ${b.length}\r\n\r\n`), b]);
  })(),
  "/json": (() => {
    const b = Buffer.from('{"jsonrpc":"2.0","id":1,"result":{}}\n\n{"not":"an event"}');
    return Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n`), b]);
  })(),
};
// Write pattern: raw bytes split at offsets unrelated to chunk or event framing.
const WRITE_SIZES = [5, 33, 17, 64, 2, 41, 120, 9];

// ---- the server: raw HTTP/1.1, keep-alive, responses exactly as above ----------
function startServer() {
  const server = net.createServer({ allowHalfOpen: true }, (sock) => {
    sock.setNoDelay(true);
    let inbuf = Buffer.alloc(0);
    const queue = [];
    let busy = false;
    let clientEnded = false;
    sock.on("error", () => {});
    sock.on("end", () => {
      clientEnded = true;
      if (!busy) sock.end();
    });
    sock.on("data", (d) => {
      inbuf = Buffer.concat([inbuf, d]);
      for (;;) {
        const e = inbuf.indexOf("\r\n\r\n");
        if (e < 0) break;
        const line = inbuf.subarray(0, inbuf.indexOf("\r\n")).toString();
        inbuf = inbuf.subarray(e + 4);
        queue.push(line.split(" ")[1]);
      }
      pump();
    });
    async function pump() {
      if (busy) return;
      busy = true;
      while (queue.length && !sock.destroyed) {
        const path = queue.shift();
        const raw = ROUTES[path] ?? Buffer.from("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        if (path === "/big") {
          sock.write(raw.subarray(0, 1000));
          sock.write(raw.subarray(1000));
          continue;
        }
        for (let i = 0, k = 0; i < raw.length && !sock.destroyed; k++) {
          const n = WRITE_SIZES[k % WRITE_SIZES.length];
          sock.write(raw.subarray(i, i + n));
          i += n;
          if (k % 4 === 3) await sleep(1); // SSE arrives over time, in odd pieces
        }
      }
      busy = false;
      if (clientEnded && !sock.destroyed) sock.end();
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

// ---- the proxy ------------------------------------------------------------------
let proxyCount = 0;
const allLogs = [];
async function startProxy(serverPort, args) {
  const log = join(dir, `proxy-${++proxyCount}.log`);
  const proc = reaped(spawn(PROXY, ["--listen", "127.0.0.1:0", "--target", `127.0.0.1:${serverPort}`, "--log", log, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  }));
  let out = "";
  let err = "";
  let exited = null;
  proc.stdout.on("data", (d) => (out += d));
  proc.stderr.on("data", (d) => (err += d));
  proc.on("exit", (code, signal) => (exited = { code, signal }));
  await waitFor(() => /listening on 127\.0\.0\.1:\d+\n/.test(out) || exited, 10000, "proxy listening line");
  if (exited) throw new Error(`tm-proxy exited early: ${JSON.stringify(exited)} ${err}`);
  const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(out)[1]);
  allLogs.push(log);
  return {
    port,
    log,
    args,
    parse: () => parseLog(existsSync(log) ? readFileSync(log, "utf8") : ""),
    async stop() {
      proc.kill("SIGTERM");
      await waitFor(() => exited, 10000, "proxy exit after SIGTERM");
      return { ...exited, stderr: err };
    },
  };
}

function kv(line) {
  const o = { kind: line.split(" ")[0] };
  for (const m of line.matchAll(/(\S+?)=(\S*)/g)) o[m[1]] = m[2];
  return o;
}
function parseLog(text) {
  const conns = new Map();
  let summary = null;
  for (const line of text.split("\n")) {
    if (!line) continue;
    const o = kv(line);
    if (o.kind === "summary") summary = o;
    if (!o.conn) continue;
    const c = conns.get(o.conn) ?? { id: Number(o.conn) };
    c[o.kind] = o;
    conns.set(o.conn, c);
  }
  return { conns, summary, byPeerPort: (p) => [...conns.values()].find((c) => c.open?.peer === `127.0.0.1:${p}`) };
}

// ---- the client: raw socket, pipelined keep-alive requests ----------------------------
// How the connection ended: "complete" (all expected bytes, then a clean close),
// "fin", "reset" or "timeout". libuv reports a RST that follows data as a plain
// EOF, so after an early EOF the client writes a probe byte: into a half-closed
// connection it goes through, into a reset one it fails (EPIPE/ECONNRESET).
function rawFetch(port, paths, deadlineMs = 20000) {
  const expectedLen = paths.reduce((a, p) => a + ROUTES[p].length, 0);
  return new Promise((resolve) => {
    const chunks = [];
    const times = [];
    let total = 0;
    let complete = false;
    let resolved = false;
    let localPort = null;
    const t0 = Date.now();
    const s = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true });
    const timer = setTimeout(() => finish("timeout"), deadlineMs);
    s.on("connect", () => {
      localPort = s.localPort;
      s.write(paths.map((p) => `GET ${p} HTTP/1.1\r\nHost: test\r\n\r\n`).join(""));
    });
    s.on("data", (d) => {
      chunks.push(d);
      times.push(Date.now());
      total += d.length;
      if (total >= expectedLen && !complete) {
        complete = true;
        s.end();
      }
    });
    s.on("end", () => {
      if (complete) return finish("complete");
      s.write("probe", (err) => finish(err ? "reset" : "fin"));
    });
    s.on("error", (e) => finish(["ECONNRESET", "EPIPE"].includes(e.code) ? "reset" : `error:${e.code}`));
    s.on("close", () => finish(complete ? "complete" : "closed"));
    function finish(how) {
      if (resolved) return;
      resolved = true;
      s.destroy();
      clearTimeout(timer);
      let maxGap = 0;
      for (let i = 1; i < times.length; i++) maxGap = Math.max(maxGap, times[i] - times[i - 1]);
      resolve({ how, data: Buffer.concat(chunks), localPort, ms: Date.now() - t0, maxGap });
    }
  });
}

// Decode HTTP responses from (possibly truncated) raw bytes; returns their bodies.
function decode(buf) {
  const out = [];
  let i = 0;
  while (i < buf.length) {
    const he = buf.indexOf("\r\n\r\n", i);
    if (he < 0) break;
    const head = buf.subarray(i, he).toString("latin1");
    i = he + 4;
    const sse = /content-type: text\/event-stream/i.test(head);
    const parts = [];
    out.push({ sse, parts });
    if (/transfer-encoding: chunked/i.test(head)) {
      for (;;) {
        const le = buf.indexOf("\r\n", i);
        if (le < 0) return out.map(finishBody);
        const size = parseInt(buf.subarray(i, le).toString(), 16);
        i = le + 2;
        if (size === 0) {
          i += 2;
          break;
        }
        parts.push(buf.subarray(i, Math.min(i + size, buf.length)));
        if (i + size > buf.length) return out.map(finishBody);
        i += size + 2;
      }
    } else {
      const len = Number(/content-length: (\d+)/i.exec(head)[1]);
      parts.push(buf.subarray(i, Math.min(i + len, buf.length)));
      i += len;
    }
  }
  return out.map(finishBody);
}
function finishBody(r) {
  return { sse: r.sse, body: Buffer.concat(r.parts).toString("latin1") };
}
const countEvents = (s) => (s.match(/payload-\d+(\r\n\r\n|\n\n)/g) ?? []).length;

function isPrefix(got, exp) {
  return got.length <= exp.length && exp.subarray(0, got.length).equals(got);
}

// Check one connection's result against its log record and the mode's promise.
function verify(name, res, paths, rec, stallMs) {
  const exp = Buffer.concat(paths.map((p) => ROUTES[p]));
  if (!check(`${name}: log record`, rec && rec.open && rec.close, `port ${res.localPort}`)) return;
  const fault = rec.close.fault;
  const off = Number(rec.close.offset);
  const tag = `${name} [conn ${rec.id} ${rec.open.mode} plan=${rec.open.plan} fault=${fault} offset=${rec.close.offset} event=${rec.close.event}]`;
  check(`${tag}: bytes are a prefix of what the server sent`, isPrefix(res.data, exp), `got ${res.data.length} bytes`);
  check(`${tag}: proxy counted the bytes the client got`, fault === "reset" || Number(rec.close.s2c) === res.data.length,
    `s2c=${rec.close.s2c} client=${res.data.length}`);
  if (fault === "none" || fault === "unreached") {
    check(`${tag}: pass-through is byte-identical`, res.how === "complete" && res.data.equals(exp), `${res.how} ${res.data.length}/${exp.length}`);
  } else if (fault === "cut") {
    check(`${tag}: cut ends with FIN at the offset`, res.how === "fin" && res.data.length === off && off < exp.length,
      `${res.how} ${res.data.length}`);
  } else if (fault === "reset") {
    check(`${tag}: reset ends with RST`, res.how === "reset", res.how);
    check(`${tag}: reset delivers the planned prefix`, res.data.length === off, `${res.data.length} vs ${off}`);
  } else if (fault === "stall") {
    check(`${tag}: stall delivers everything`, res.how === "complete" && res.data.equals(exp), `${res.how} ${res.data.length}/${exp.length}`);
    // Bytes past the stall offset cannot arrive before the stall ends, so the
    // whole exchange takes at least --stall-ms (a lower bound that event-loop
    // lag cannot fake; 5 ms for clock rounding; the largest gap between reads
    // is reported, not asserted).
    check(`${tag}: stall pauses for --stall-ms`, res.ms >= stallMs - 5 && off < exp.length,
      `took ${res.ms} ms, largest gap ${res.maxGap} ms`);
  } else if (fault === "event-boundary" || fault === "mid-event") {
    const k = Number(rec.close.event);
    const bodies = decode(res.data).filter((b) => b.sse);
    const last = bodies.length ? bodies[bodies.length - 1].body : "";
    const n = bodies.reduce((a, b) => a + countEvents(b.body), 0);
    check(`${tag}: FIN at the logged offset`, res.how === "fin" && res.data.length === off, `${res.how} ${res.data.length}`);
    if (fault === "event-boundary") {
      check(`${tag}: ends with a blank line`, /(\n\n|\r\n\r\n)$/.test(last), JSON.stringify(last.slice(-20)));
      check(`${tag}: exactly k complete events`, n === k && k === Number(rec.open.plan.split(":")[1]), `events=${n} k=${k}`);
    } else {
      const tail = last.slice(Math.max(last.lastIndexOf("\n\n"), last.lastIndexOf("\r\n\r\n")) + 2).replace(/^\r\n/, "");
      check(`${tag}: ends right after the event's id line`, /^id: \d+(\r\n|\n)$/.test(tail), JSON.stringify(tail));
      check(`${tag}: k-1 complete events before it`, n === k - 1, `events=${n} k=${k}`);
    }
  } else {
    check(`${tag}: known fault kind`, false, fault);
  }
}

// Run sequential connections through one proxy and verify each.
async function runSeries(serverPort, name, args, pathsList, stallMs = 0) {
  const px = await startProxy(serverPort, args);
  const results = [];
  for (const paths of pathsList) results.push({ paths, res: await rawFetch(px.port, paths) });
  for (const { paths, res } of results) {
    const rec = await waitFor(() => {
      const r = px.parse().byPeerPort(res.localPort);
      return r?.close ? r : null;
    }, 10000, `log close line for ${name}`).catch(() => null);
    verify(name, res, paths, rec, stallMs);
  }
  const st = await px.stop();
  check(`${name}: proxy exits 0 on SIGTERM`, st.code === 0, JSON.stringify(st));
  const kinds = [...px.parse().conns.values()].map((c) => `${c.close?.fault}@${c.close?.offset}`);
  console.log(`ran ${name}: ${results.length} connections: ${kinds.join(" ")}`);
  return { px, results };
}

// ---- the tests ----------------------------------------------------------------------
const server = await startServer();
const SP = server.address().port;
const KEEPALIVE = ["/sse", "/json", "/big", "/sse-cl", "/sse-crlf"];
const STALL = 300;

try {
  // Pass-through, keep-alive and single requests.
  await runSeries(SP, "none", ["--mode", "none", "--seed", "1"], [["/sse"], ["/sse-cl"], ["/sse-crlf"], ["/big"], ["/json"], KEEPALIVE]);

  for (const seed of [1, 2, 3, 4]) {
    await runSeries(SP, `cut seed ${seed}`, ["--mode", "cut", "--seed", String(seed)], [["/big"], ["/sse"], KEEPALIVE]);
    await runSeries(SP, `reset seed ${seed}`, ["--mode", "reset", "--seed", String(seed)], [["/big"], ["/sse"], KEEPALIVE]);
    await runSeries(SP, `stall seed ${seed}`, ["--mode", "stall", "--seed", String(seed), "--stall-ms", String(STALL), "--max-offset", "1000"],
      [["/big"], ["/sse"]], STALL);
    await runSeries(SP, `event-boundary seed ${seed}`, ["--mode", "event-boundary", "--seed", String(seed), "--max-event", "40"],
      [["/sse"], ["/sse-cl"], ["/sse-crlf"], ["/json", "/sse"]]);
    // k up to 90: a fault may hit the second stream of a keep-alive connection.
    await runSeries(SP, `event-boundary keep-alive seed ${seed}`, ["--mode", "event-boundary", "--seed", String(seed), "--max-event", "90"],
      [["/sse", "/sse"], ["/sse-cl", "/big", "/sse-crlf"]]);
    await runSeries(SP, `mid-event seed ${seed}`, ["--mode", "mid-event", "--seed", String(seed), "--max-event", "90"],
      [["/sse"], ["/sse-cl"], ["/sse-crlf"], ["/sse", "/json", "/sse"]]);
  }

  // Reproducibility: same seed, same plans, same offsets, same bytes; another seed differs.
  const mixedArgs = (seed) => ["--mode", "mixed", "--seed", String(seed), "--stall-ms", "100", "--max-offset", "3000", "--max-event", "90"];
  const workload = Array.from({ length: 12 }, (_, i) => (i % 2 ? ["/sse", "/sse-cl"] : ["/big"]));
  const sig = async (seed) => {
    const { px, results } = await runSeries(SP, `mixed seed ${seed}`, mixedArgs(seed), workload, 100);
    const log = px.parse();
    return [...log.conns.values()].map((c, i) =>
      [c.open.mode, c.open.plan, c.close.fault, c.close.offset, c.close.event, c.close.s2c, results[i]?.res.data.length].join(" "));
  };
  const a = await sig(7);
  const b = await sig(7);
  const c = await sig(8);
  check("same seed gives the same per-connection plans and cut offsets", JSON.stringify(a) === JSON.stringify(b),
    `\n  ${a.join("\n  ")}\nvs\n  ${b.join("\n  ")}`);
  check("another seed gives other plans", JSON.stringify(a) !== JSON.stringify(c));
  check("mixed mode uses several fault kinds", new Set(a.map((l) => l.split(" ")[0])).size >= 3, a.join("; "));

  // --rate: some connections faulted, the rest pass through untouched.
  {
    const { px } = await runSeries(SP, "rate 0.5", ["--mode", "cut", "--seed", "3", "--rate", "0.5"], Array.from({ length: 16 }, () => ["/big"]));
    const modes = [...px.parse().conns.values()].map((c) => c.open.mode);
    const cut = modes.filter((m) => m === "cut").length;
    check("--rate 0.5 faults some and passes some", cut > 0 && cut < modes.length, `${cut}/${modes.length} cut`);
    const { px: px0 } = await runSeries(SP, "rate 0", ["--mode", "cut", "--seed", "3", "--rate", "0"], Array.from({ length: 4 }, () => ["/big"]));
    check("--rate 0 faults nothing", [...px0.parse().conns.values()].every((c) => c.open.mode === "none"));
  }

  // Many connections at once through one proxy (pass-through and mixed).
  for (const [name, args] of [
    ["concurrent none", ["--mode", "none", "--seed", "5"]],
    ["concurrent mixed", ["--mode", "mixed", "--seed", "5", "--stall-ms", "200", "--max-event", "90"]],
  ]) {
    const px = await startProxy(SP, args);
    const jobs = Array.from({ length: 40 }, (_, i) => (i % 3 === 0 ? ["/big", "/sse"] : i % 3 === 1 ? ["/sse-cl", "/sse"] : ["/sse-crlf"]));
    const t0 = Date.now();
    const results = await Promise.all(jobs.map((p) => rawFetch(px.port, p)));
    const wall = Date.now() - t0;
    for (let i = 0; i < jobs.length; i++) {
      const rec = await waitFor(() => {
        const r = px.parse().byPeerPort(results[i].localPort);
        return r?.close ? r : null;
      }, 10000, "log close line").catch(() => null);
      verify(name, results[i], jobs[i], rec, 200);
    }
    const stalls = [...px.parse().conns.values()].filter((c) => c.close?.fault === "stall").length;
    if (name === "concurrent mixed") /* seed 5 stalls several connections at once */
      check(`${name}: ${stalls} stalls overlap (one poll loop, no serialisation)`, stalls >= 3 && wall < stalls * 200,
        `${stalls} stalls, ${wall} ms`);
    const st = await px.stop();
    const conns = px.parse().conns.size;
    check(`${name}: SIGTERM summary on stderr`, st.code === 0 && new RegExp(`summary connections=${conns} faults=\\d+`).test(st.stderr), st.stderr);
  }

  // Unreachable target: the client is closed, the proxy keeps running.
  {
    const dead = net.createServer();
    await new Promise((r) => dead.listen(0, "127.0.0.1", r));
    const deadPort = dead.address().port;
    await new Promise((r) => dead.close(r));
    const px = await startProxy(deadPort, ["--mode", "none", "--seed", "1"]);
    const res = await rawFetch(px.port, ["/json"]);
    check("unreachable target: client gets an empty close", res.data.length === 0 && res.how !== "timeout", res.how);
    await waitFor(() => [...px.parse().conns.values()].some((c) => c.close?.end === "connect_error"), 5000, "connect_error").catch(() => {});
    check("unreachable target: logged end=connect_error", [...px.parse().conns.values()].some((c) => c.close?.end === "connect_error"));
    const st = await px.stop();
    check("unreachable target: proxy still exits 0", st.code === 0);
  }
} catch (e) {
  check("test run", false, e.stack);
}

// ---- the table of injected faults, from every proxy log ------------------------------------
const table = new Map();
for (const log of allLogs) {
  if (!existsSync(log)) continue;
  for (const c of parseLog(readFileSync(log, "utf8")).conns.values()) {
    if (!c.close) continue;
    const key = c.open.mode;
    const t = table.get(key) ?? { conns: 0, hit: 0, unreached: 0, min: Infinity, max: -Infinity, ends: new Map() };
    t.conns++;
    if (c.close.fault === "unreached") t.unreached++;
    else if (c.close.fault !== "none") {
      t.hit++;
      t.min = Math.min(t.min, Number(c.close.offset));
      t.max = Math.max(t.max, Number(c.close.offset));
    }
    t.ends.set(c.close.end, (t.ends.get(c.close.end) ?? 0) + 1);
    table.set(key, t);
  }
}
console.log("\ninjected faults (all proxy runs):");
console.log("mode            conns   hit  unreached  offsets          ends");
for (const [mode, t] of [...table.entries()].sort()) {
  const offs = t.hit ? `${t.min}..${t.max}` : "-";
  const ends = [...t.ends.entries()].map(([k, v]) => `${k}=${v}`).join(",");
  console.log(`${mode.padEnd(15)} ${String(t.conns).padStart(5)} ${String(t.hit).padStart(5)} ${String(t.unreached).padStart(10)}  ${offs.padEnd(15)}  ${ends}`);
}

server.close();
if (failed === 0) rmSync(dir, { recursive: true, force: true });
else console.log(`proxy logs kept in ${dir}`);
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
