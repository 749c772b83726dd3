// mcp_http.mjs - what the server-side scenario tests share: start a real
// tidemark-server (or a two-node Redis cluster), speak MCP over raw HTTP,
// read answers. Every process is started on a loopback port it reports and
// is stopped by PID; every wait has a deadline.
import { spawn } from "node:child_process";
import { connect } from "node:net";
import { request as httpRequest } from "node:http";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { sseEvents } from "./sse.mjs";
import { Cluster, missingTools, stopProc } from "./multinode_env.mjs";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(20);
  }
}

// A tally of named checks; exit code 1 if any failed.
export function checker() {
  const t = { passed: 0, failed: 0 };
  t.check = (name, cond, detail = "") => {
    if (cond) { t.passed++; console.log("ok   " + name); }
    else { t.failed++; console.log("FAIL " + name + (detail ? ": " + detail : "")); }
    return cond;
  };
  t.done = () => {
    console.log(`${t.passed} passed, ${t.failed} failed`);
    process.exit(t.failed ? 1 : 0);
  };
  return t;
}

// Start `bin` with flags; resolves {proc, url, log} once it listens.
export function startServer(bin, flags, { env, ms = 15000 } = {}) {
  return new Promise((resolve, reject) => {
    const proc = reaped(spawn(bin, ["--listen", "127.0.0.1:0", "--log-level", "warn", ...flags],
      { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }));
    const s = { proc, url: null, log: "" };
    let out = "";
    const t = setTimeout(() => reject(new Error("server did not start: " + s.log)), ms);
    proc.stderr.on("data", (d) => { s.log += d; });
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^listening on (\S+)$/m);
      if (m && !s.url) { clearTimeout(t); s.url = m[1]; resolve(s); }
    });
    proc.once("exit", (c, sig) => { clearTimeout(t); if (!s.url) reject(new Error(`server exited (${c ?? sig}): ${s.log}`)); });
  });
}

export const stopServer = (s, sig = "SIGTERM") => stopProc(s?.proc, sig);

// Run a command-line program (tidemark-client, say): {proc, done}, done
// resolving {code, sig, out, err, json} (json: stdout parsed, or null) once
// it exits; it is killed (SIGKILL) after ms.
export function spawnCli(bin, args, { env = {}, ms = 60000 } = {}) {
  const proc = reaped(spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env } }));
  let out = "", err = "";
  const timer = setTimeout(() => proc.kill("SIGKILL"), ms);
  proc.stdout.on("data", (d) => { out += d; });
  proc.stderr.on("data", (d) => { err += d; });
  const done = new Promise((resolve) => proc.on("close", (code, sig) => {
    clearTimeout(timer);
    let json = null;
    try { json = JSON.parse(out); } catch { /* not JSON */ }
    resolve({ code, sig, out, err, json });
  }));
  return { proc, done };
}
// What a spawnCli run left, for a failed check's detail.
export const cliBrief = (r) =>
  `exit ${r.code}${r.sig ? " " + r.sig : ""}; out ${r.out.slice(0, 400)}; err ${r.err.slice(-300)}`;

// Servers for a store kind: "memory", "sqlite" or "redis" (two nodes on one
// Redis: urls[0] and urls[1] are different nodes, so a retry can land on
// the other). Returns {urls, stop()} or null when redis is missing.
export async function serversFor(bin, kind, flags = [], env = {}) {
  if (kind === "redis") {
    if (missingTools().includes("redis-server")) return null;
    const c = new Cluster({ bin, nodes: 2, nodeArgs: flags });
    await c.startRedis();
    await c.startNode(0);
    await c.startNode(1);
    return { urls: [c.nodes[0].url, c.nodes[1].url], stop: () => c.stop() };
  }
  const store = kind === "sqlite"
    ? "sqlite:" + join(mkdtempSync(join(tmpdir(), "tidemark-test-")), "t.db") : "memory";
  const s = await startServer(bin, ["--store", store, ...flags], { env });
  return { urls: [s.url, s.url], server: s, stop: () => stopServer(s) };
}

export const JSONH = { "content-type": "application/json", accept: "application/json, text/event-stream" };

export function post(url, sid, body, { signal, headers = {}, raw = false } = {}) {
  const h = { ...JSONH, ...headers };
  if (sid) h["mcp-session-id"] = sid;
  return fetch(url, { method: "POST", headers: h, body: raw ? body : JSON.stringify(body), signal });
}

export async function initialize(url, version = "2025-11-25", headers = {}) {
  const r = await post(url, null, { jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "test", version: "1" } } },
  { headers });
  const sid = r.headers.get("mcp-session-id");
  await r.text();
  if (!sid) throw new Error(`initialize answered ${r.status} without a session`);
  await (await post(url, sid, { jsonrpc: "2.0", method: "notifications/initialized" }, { headers })).text();
  return sid;
}

export function toolCall(id, name, args, meta = {}) {
  return { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args, _meta: meta } };
}

// Every JSON-RPC message of an answer, SSE or JSON, with the HTTP status.
export async function messages(res) {
  const out = { status: res.status, msgs: [], events: [] };
  if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    for await (const ev of sseEvents(res.body)) {
      out.events.push(ev);
      if (ev.data) out.msgs.push(JSON.parse(ev.data));
    }
  } else {
    const t = await res.text();
    if (t) out.msgs.push(...[].concat(JSON.parse(t)));
  }
  return out;
}

// POST a call and read its answer to the end; the final response message.
export async function callTool(url, sid, id, name, args, meta = {}, opts = {}) {
  const m = await messages(await post(url, sid, toolCall(id, name, args, meta), opts));
  return { ...m, response: m.msgs.find((x) => x.id !== undefined && (x.result || x.error)) };
}

export const reasonOf = (msg) => msg?.error?.data?.reason;

// How many ledger rows carry this entry (ledger_read through any node).
export async function ledgerCount(url, sid, entry) {
  const r = await callTool(url, sid, "read-" + Math.random(), "ledger_read", { entry });
  return r.response?.result?.structuredContent?.count ?? null;
}

// One raw HTTP/1.1 exchange on a fresh TCP connection from localAddress:
// resolves {status, headers, body, closed} once the server closed or
// answered completely (Content-Length), or at the deadline (timedOut).
export function rawHttp(url, text, { localAddress = "127.0.0.1", ms = 5000 } = {}) {
  const u = new URL(url);
  return new Promise((resolve) => {
    const sock = connect({ host: u.hostname, port: Number(u.port), localAddress });
    let buf = Buffer.alloc(0), done = false;
    const finish = (extra) => {
      if (done) return;
      done = true;
      clearTimeout(t);
      sock.destroy();
      const s = buf.toString("latin1"), i = s.indexOf("\r\n\r\n");
      const head = i < 0 ? s : s.slice(0, i), lines = head.split("\r\n");
      const headers = {};
      for (const l of lines.slice(1)) { const c = l.indexOf(":"); if (c > 0) headers[l.slice(0, c).toLowerCase()] = l.slice(c + 1).trim(); }
      resolve({ status: Number((lines[0] || "").split(" ")[1]) || 0, headers,
        body: i < 0 ? "" : s.slice(i + 4), ...extra });
    };
    const t = setTimeout(() => finish({ timedOut: true }), ms);
    sock.on("connect", () => sock.write(text));
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      const s = buf.toString("latin1"), i = s.indexOf("\r\n\r\n");
      const m = /content-length:\s*(\d+)/i.exec(s.slice(0, i));
      if (i >= 0 && m && buf.length >= i + 4 + Number(m[1])) finish({ closed: false });
    });
    sock.on("end", () => finish({ closed: true }));
    sock.on("error", () => finish({ closed: true, error: true }));
  });
}

// A timed call: resolves {ms, ok, detail}, at the latest after limitMs
// (then ok is false); never throws.
export async function timed(fn, limitMs = 10000) {
  const t0 = Date.now();
  let timer;
  const late = new Promise((r) => { timer = setTimeout(() => r({ late: true }), limitMs); });
  try {
    const v = await Promise.race([fn(), late]);
    if (v?.late) return { ms: Date.now() - t0, ok: false, detail: `no answer in ${limitMs} ms` };
    return { ms: Date.now() - t0, ok: !!v, detail: v };
  } catch (e) {
    return { ms: Date.now() - t0, ok: false, detail: String(e) };
  } finally {
    clearTimeout(timer);
  }
}

// POST from a chosen local address (fetch cannot pick one): resolves
// {status, headers, text}. With cut, resolves as soon as the answer's
// headers arrive and closes the connection (a client that goes away).
export function postFrom(localAddress, url, sid, body, { cut = false, ms = 10000, headers = {} } = {}) {
  const u = new URL(url);
  const h = { ...JSONH, ...headers };
  if (sid) h["mcp-session-id"] = sid;
  const data = typeof body === "string" ? body : JSON.stringify(body);
  h["content-length"] = Buffer.byteLength(data);
  return new Promise((resolve) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: "POST",
      headers: h, localAddress, agent: false }, (res) => {
      if (cut) { resolve({ status: res.statusCode, headers: res.headers, text: "" }); req.destroy(); return; }
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { text += d; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text }));
      res.on("error", () => resolve({ status: res.statusCode, headers: res.headers, text, error: true }));
    });
    req.setTimeout(ms, () => { req.destroy(); resolve({ status: 0, timedOut: true }); });
    req.on("error", (e) => resolve({ status: 0, error: String(e) }));
    req.end(data);
  });
}

// initialize from a chosen local address; the session id.
export async function initializeFrom(localAddress, url, version = "2025-11-25") {
  const r = await postFrom(localAddress, url, null, { jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "hostile", version: "1" } } });
  const sid = r.headers?.["mcp-session-id"];
  if (!sid) throw new Error(`initialize from ${localAddress}: ${r.status} ${r.text ?? r.error}`);
  await postFrom(localAddress, url, sid, { jsonrpc: "2.0", method: "notifications/initialized" });
  return sid;
}
