// smuggling.mjs - request smuggling and body limits at the HTTP layer
// (issue 30, items 1 and 2), against a real tidemark-server over raw
// sockets:
//   - every framing ambiguity (whitespace before a colon, an obs-fold line,
//     a repeated Host / Content-Length / Transfer-Encoding, a
//     Transfer-Encoding other than one `chunked`, Content-Length with
//     Transfer-Encoding) is answered with one typed 400 (JSON-RPC error,
//     error.data.reason) and the connection is closed: nothing after it on
//     the connection is read as a request, and no ledger_append sent in
//     the request or hidden in its body has run;
//   - a declared Content-Length over --max-body gets 413 body_too_large
//     before any of the body is sent, then the connection closes;
//   - a chunked body gets 413 body_too_large once it passes --max-body (the
//     client cannot push the whole 64 MiB through), at once when a chunk's
//     size line, seen with its first bytes, passes it; a chunk size no
//     body can have (ffffffffffffffff) gets 400 invalid_chunk_size; then
//     the connection closes;
//   - well-formed requests (one Content-Length, one `chunked`) still run.
//
//   node smuggling.mjs SERVER_BINARY
//
// Every read has a deadline; the server is started on a port it picks and
// stopped by PID.
import { connect } from "node:net";
import {
  callTool, checker, initialize, ledgerCount, startServer, stopServer, toolCall,
} from "./mcp_http.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: smuggling.mjs SERVER_BINARY");
  process.exit(2);
}
const t = checker();
const tag = Math.random().toString(36).slice(2, 8);
const MAX_BODY = 4 << 20; // the default --max-body
const MIB = 1 << 20;

// One raw exchange: connect, run send(sock) (which may write in pieces),
// collect every byte until the server closes the connection or ms pass
// (with one: until one whole answer came). Resolves {raw, closed, firstMs
// (to the first byte), sent}.
function exchange(port, send, ms = 5000, { one = false } = {}) {
  return new Promise((resolve) => {
    const sock = connect({ host: "127.0.0.1", port });
    const t0 = Date.now();
    const st = { raw: Buffer.alloc(0), closed: false, firstMs: null, sent: 0, stop: false };
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      st.stop = true;
      sock.destroy();
      resolve(st);
    };
    const timer = setTimeout(finish, ms);
    sock.on("data", (d) => {
      if (st.firstMs === null) st.firstMs = Date.now() - t0;
      st.raw = Buffer.concat([st.raw, d]);
      if (one && responses(st.raw).list.length > 0) finish();
    });
    sock.on("end", () => { st.closed = true; finish(); });
    sock.on("close", () => { st.closed = true; finish(); });
    sock.on("error", () => { st.closed = true; finish(); });
    sock.on("connect", () => send(sock, st));
  });
}

// The HTTP responses in raw, in order: [{status, headers, body}], and what
// follows the last complete one.
function responses(raw) {
  const out = [];
  let s = raw.toString("latin1");
  for (;;) {
    const i = s.indexOf("\r\n\r\n");
    if (!s.startsWith("HTTP/") || i < 0) break;
    const lines = s.slice(0, i).split("\r\n");
    const headers = {};
    for (const l of lines.slice(1)) {
      const c = l.indexOf(":");
      if (c > 0) headers[l.slice(0, c).toLowerCase()] = l.slice(c + 1).trim();
    }
    const n = Number(headers["content-length"] ?? 0);
    out.push({ status: Number(lines[0].split(" ")[1]), headers, body: s.slice(i + 4, i + 4 + n) });
    s = s.slice(i + 4 + n);
  }
  return { list: out, rest: s };
}

const reasonIn = (body) => {
  try { return JSON.parse(body)?.error?.data?.reason; } catch { return undefined; }
};

function chunked(text) {
  return `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n0\r\n\r\n`;
}

async function main() {
  const server = await startServer(bin, ["--store", "memory"]);
  try {
    const url = server.url, port = Number(new URL(url).port);
    const sid = await initialize(url);
    const host = `Host: 127.0.0.1:${port}\r\n`;
    const head = (extra) => `POST /mcp HTTP/1.1\r\n${host}Content-Type: application/json\r\n` +
      `Accept: application/json, text/event-stream\r\nMcp-Session-Id: ${sid}\r\n${extra}\r\n`;
    const call = (entry) => JSON.stringify(toolCall(`c-${entry}`, "ledger_append", { entry }));
    // A complete request for a ledger row: what a smuggler hides in a body.
    const hidden = (entry) => head(`Content-Length: ${Buffer.byteLength(call(entry))}\r\n`) + call(entry);

    // [name, request text given its entry, status, reason]
    const rows = [
      ["space before the colon of Content-Length, a request in the body", (e) => {
        const h = hidden(e);
        return head(`Content-Length : ${h.length}\r\n`) + h;
      }, 400, "invalid_field_name"],
      ["tab before the colon of Content-Length, a request in the body", (e) => {
        const h = hidden(e);
        return head(`Content-Length\t: ${h.length}\r\n`) + h;
      }, 400, "invalid_field_name"],
      ["Content-Length folded (obs-fold) onto the next line, a request in the body", (e) => {
        const h = hidden(e);
        return head(`Content-Length:\r\n ${h.length}\r\n`) + h;
      }, 400, "obs_fold"],
      ["Content-Length folded with a tab", (e) => {
        const h = hidden(e);
        return head(`Content-Length:\r\n\t${h.length}\r\n`) + h;
      }, 400, "obs_fold"],
      ["an obs-fold on another field", (e) =>
        head(`X-Note: a\r\n b\r\nContent-Length: ${call(e).length}\r\n`) + call(e), 400, "obs_fold"],
      ["an obs-fold on the last field", (e) =>
        head(`Content-Length: ${call(e).length}\r\nX-Note: a\r\n b\r\n`) + call(e), 400, "obs_fold"],
      ["'Transfer-Encoding : chunked' with Content-Length", (e) =>
        head(`Content-Length: ${call(e).length}\r\nTransfer-Encoding : chunked\r\n`) + call(e),
        400, "invalid_field_name"],
      ["two Host headers, ours first", (e) =>
        head(`Host: evil.example\r\nContent-Length: ${call(e).length}\r\n`) + call(e), 400, "repeated_host"],
      ["two Content-Length", (e) => {
        const h = hidden(e);
        return head(`Content-Length: ${h.length}\r\nContent-Length: 0\r\n`) + h;
      }, 400, "repeated_content_length"],
      ["two Transfer-Encoding: chunked", (e) =>
        head("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n") + chunked(call(e)),
        400, "repeated_transfer_encoding"],
      ["Content-Length with Transfer-Encoding: chunked", (e) => {
        const h = hidden(e);
        return head(`Content-Length: ${h.length}\r\nTransfer-Encoding: chunked\r\n`) + chunked(call(e)) + h;
      }, 400, "content_length_with_transfer_encoding"],
      ["Transfer-Encoding: chunked, identity", (e) =>
        head("Transfer-Encoding: chunked, identity\r\n") + chunked(call(e)), 400, "invalid_transfer_encoding"],
      ["Transfer-Encoding: xchunked", (e) =>
        head("Transfer-Encoding: xchunked\r\n") + chunked(call(e)), 400, "invalid_transfer_encoding"],
      ["Transfer-Encoding: gzip, chunked", (e) =>
        head("Transfer-Encoding: gzip, chunked\r\n") + chunked(call(e)), 400, "invalid_transfer_encoding"],
      ["Transfer-Encoding: identity", (e) => {
        const h = hidden(e);
        return head("Transfer-Encoding: identity\r\n") + h;
      }, 400, "invalid_transfer_encoding"],
    ];
    const entries = [];
    for (const [i, [name, text, status, reason]] of rows.entries()) {
      const entry = `smug-${tag}-${i}`;
      entries.push([name, entry]);
      const r = await exchange(port, (s) => s.write(text(entry)));
      const { list, rest } = responses(r.raw);
      const first = list[0];
      t.check(`${name}: ${status} ${reason}, Connection: close, then closed, nothing else answered`,
        first?.status === status && reasonIn(first.body) === reason &&
        /close/i.test(first.headers.connection ?? "") && r.closed && list.length === 1 && rest === "",
        JSON.stringify({ statuses: list.map((x) => x.status), reason: first && reasonIn(first.body),
          connection: first?.headers.connection, closed: r.closed, rest: rest.slice(0, 80),
          raw: r.raw.toString("latin1").slice(0, 300) }));
    }

    // Well-formed framing still works: one Content-Length, one chunked.
    const okCl = await exchange(port, (s) => s.write(hidden(`ok-${tag}-cl`)), 5000, { one: true });
    const okTe = await exchange(port, (s) =>
      s.write(head("Transfer-Encoding: Chunked\r\n") + chunked(call(`ok-${tag}-te`))), 5000, { one: true });
    for (const [name, r] of [["one Content-Length", okCl], ["Transfer-Encoding: chunked", okTe]])
      t.check(`${name}: 200`, responses(r.raw).list[0]?.status === 200,
        r.raw.toString("latin1").slice(0, 200));

    // A body over --max-body.
    // (a) Content-Length 64 MiB, headers only: answered before any body byte.
    const cl = await exchange(port, (s) =>
      s.write(head(`Content-Length: ${64 * MIB}\r\n`)), 10000);
    const clr = responses(cl.raw).list[0];
    t.check(`Content-Length 64 MiB, no body sent: 413 body_too_large at once (${cl.firstMs} ms), closed`,
      clr?.status === 413 && reasonIn(clr.body) === "body_too_large" && cl.closed && cl.firstMs < 2000,
      JSON.stringify({ ms: cl.firstMs, closed: cl.closed, raw: cl.raw.toString("latin1").slice(0, 200) }));
    // (b) bodies pushed as fast as the server takes them, 1 MiB a write,
    // until an answer comes: chunked (1 MiB chunks, or one chunk of size
    // ffffffffffffffff) and Content-Length 64 MiB.
    const push = (framing, first, chunks) => (s, st) => {
      const piece = Buffer.alloc(MIB, 0x20);
      const frame = Buffer.concat([Buffer.from(`${MIB.toString(16)}\r\n`), piece, Buffer.from("\r\n")]);
      /* with its first bytes: a chunk size line is seen with them */
      st.sent += first ? MIB : 0;
      s.write(first ? Buffer.concat([Buffer.from(head(framing) + first), piece]) : head(framing));
      // Between two writes the event loop polls (setImmediate), so an
      // answer is read as soon as it comes: a write the kernel takes at once
      // drains on the next tick, and a chain of those would never read.
      const more = () => {
        while (!st.stop && st.raw.length === 0 && st.sent < 64 * MIB) {
          st.sent += MIB;
          if (!s.write(chunks ? frame : piece)) return s.once("drain", () => setImmediate(more));
        }
      };
      more();
    };
    const te = "Transfer-Encoding: chunked\r\n";
    for (const [name, send, status, why] of [
      ["chunked, 64 MiB in 1 MiB chunks", push(te, "", true), 413, "body_too_large"],
      ["chunked, a chunk size of ffffffffffffffff, then 64 MiB", push(te, "ffffffffffffffff\r\n", false),
        400, "invalid_chunk_size"],
      ["chunked, a chunk size of 10000000 (256 MiB), then 64 MiB", push(te, "10000000\r\n", false),
        413, "body_too_large"],
      ["Content-Length 64 MiB, the body sent at once", push(`Content-Length: ${64 * MIB}\r\n`, "", false),
        413, "body_too_large"]]) {
      const r = await exchange(port, send, 20000);
      const a = responses(r.raw).list[0];
      console.log(`     ${name}: answer after ${r.firstMs} ms, ${r.sent / MIB} MiB written by then`);
      t.check(`${name}: ${status} ${why} before the client could send 24 MiB, closed`,
        a?.status === status && reasonIn(a.body) === why && r.closed && r.sent < 24 * MIB,
        JSON.stringify({ ms: r.firstMs, sentMiB: r.sent / MIB, closed: r.closed,
          raw: r.raw.toString("latin1").slice(0, 200) }));
    }
    // (c) a chunked body within the limit still works.
    const pad = " ".repeat(MAX_BODY - 1000);
    const within = await exchange(port, (s) => s.write(head("Transfer-Encoding: chunked\r\n") +
      chunked(call(`ok-${tag}-big`) + pad)), 10000, { one: true });
    t.check("a chunked body just under --max-body: 200", responses(within.raw).list[0]?.status === 200,
      within.raw.toString("latin1").slice(0, 200));

    // Nothing refused ran; what was well-formed ran once.
    for (const [name, entry] of entries) {
      const n = await ledgerCount(url, sid, entry);
      t.check(`${name}: no ledger row`, n === 0, `count ${n}`);
    }
    for (const e of ["cl", "te", "big"])
      t.check(`well-formed request (${e}): one ledger row`, await ledgerCount(url, sid, `ok-${tag}-${e}`) === 1);
    const live = await callTool(url, sid, "live", "ledger_read", {});
    t.check("the server still answers", !!live.response?.result);
  } finally {
    await stopServer(server);
  }
  t.done();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
