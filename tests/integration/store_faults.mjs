// store_faults.mjs - the store's holes of issue 10 through tidemark-server
// (SQLite), as a hostile operator or disk produces them:
//   two servers on one database file;
//   an older copy of the database put back (and --accept-loss);
//   8 KiB of garbage in the middle of the database;
//   a full disk (fault VFS of the crash-points build, armed by a file) that
//   comes back: calls and initialize must work again without a restart.
//
//   node store_faults.mjs SERVER SERVER_CRASHPOINTS
import { spawn } from "node:child_process";
import { reaped } from "./reap.mjs";
import { closeSync, copyFileSync, existsSync, mkdtempSync, openSync, rmSync, statSync, unlinkSync,
  writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sseEvents } from "./sse.mjs";

const [bin, binFault] = process.argv.slice(2);
if (!bin || !binFault) { console.error("usage: store_faults.mjs SERVER SERVER_CRASHPOINTS"); process.exit(2); }
const dir = mkdtempSync(join(tmpdir(), "tidemark-store-faults-"));
let passed = 0, failed = 0;
function check(name, cond, detail = "") {
  if (cond) { passed++; console.log("ok   " + name); }
  else { failed++; console.log("FAIL " + name + (detail ? ": " + detail : "")); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Start a server; resolves {proc, url} once listening, or {proc, code, err}
// if it exits first.
function start(exe, db, flags = [], env = {}) {
  return new Promise((resolve) => {
    const proc = reaped(spawn(exe, ["--listen", "127.0.0.1:0", "--store", "sqlite:" + db,
      "--log-level", "warn", ...flags], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } }));
    let out = "", err = "";
    const t = setTimeout(() => resolve({ proc, err, code: "timeout" }), 20000);
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/^listening on (\S+)$/m);
      if (m) { clearTimeout(t); resolve({ proc, url: m[1], get err() { return err; } }); }
    });
    proc.stderr.on("data", (d) => { err += d; });
    proc.on("exit", (code) => { clearTimeout(t); resolve({ proc, code, err }); });
  });
}
async function stop(s) {
  if (!s.proc || s.proc.exitCode !== null || s.proc.signalCode) return;
  const done = new Promise((r) => s.proc.once("exit", r));
  s.proc.kill("SIGTERM");
  await done;
}

const JSONH = { "content-type": "application/json", accept: "application/json, text/event-stream" };
async function initialize(url) {
  const r = await fetch(url, { method: "POST", headers: JSONH, body: JSON.stringify({
    jsonrpc: "2.0", id: 0, method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "faults", version: "1" } } }) });
  const sid = r.headers.get("mcp-session-id");
  const body = await r.text();
  if (r.status !== 200 || !sid) return { status: r.status, body };
  await (await post(url, sid, { jsonrpc: "2.0", method: "notifications/initialized" })).text();
  return { status: 200, sid };
}
function post(url, sid, body) {
  return fetch(url, { method: "POST", headers: { ...JSONH, "mcp-session-id": sid }, body: JSON.stringify(body) });
}
// A ledger_append call to its end: "ok" when it answered with a result.
async function call(url, sid, id, entry) {
  const res = await post(url, sid, { jsonrpc: "2.0", id, method: "tools/call",
    params: { name: "ledger_append", arguments: { entry } } });
  if (res.status !== 200) { await res.text(); return { status: res.status }; }
  if (!(res.headers.get("content-type") || "").includes("text/event-stream")) {
    const j = await res.json().catch(() => null);
    return { status: res.status, error: j?.error };
  }
  let msg = null;
  for await (const ev of sseEvents(res.body)) {
    const m = ev.data ? JSON.parse(ev.data) : null;
    if (m && m.id === id) msg = m;
  }
  return { status: 200, ok: !!msg?.result && !msg.result.isError, msg };
}
async function ledger(url, sid, id) {
  const res = await post(url, sid, { jsonrpc: "2.0", id, method: "tools/call", params: { name: "ledger_read", arguments: {} } });
  let rows = null;
  for await (const ev of sseEvents(res.body)) {
    const m = ev.data ? JSON.parse(ev.data) : null;
    if (m && m.id === id) rows = m.result?.structuredContent?.entries;
  }
  return rows;
}

async function twoWriters() {
  const db = join(dir, "two.db");
  const a = await start(bin, db);
  const b = await start(bin, db);
  check("a second server on the same database exits non-zero", b.code !== undefined && b.code !== 0 && !b.url,
    `code ${b.code}`);
  check("...saying which process holds it",
    b.err.includes(`database ${db} is in use by another process (pid ${a.proc.pid})`), b.err.trim());
  const s = await initialize(a.url);
  check("the first server is unharmed", s.status === 200);
  await stop(a);
  const c = await start(bin, db);
  check("once it stopped, the database opens again", !!c.url, c.err);
  await stop(c);
}

async function olderCopy() {
  const db = join(dir, "older.db"), old = join(dir, "older-copy.db");
  let s = await start(bin, db);
  const { sid } = await initialize(s.url);
  for (let i = 1; i <= 3; i++) await call(s.url, sid, i, "before-" + i);
  await stop(s);
  copyFileSync(db, old);
  s = await start(bin, db);
  for (let i = 4; i <= 6; i++) await call(s.url, sid, i, "after-" + i);
  await stop(s);
  for (const ext of ["-wal", "-shm"]) if (existsSync(db + ext)) unlinkSync(db + ext);
  copyFileSync(old, db);
  s = await start(bin, db);
  check("an older copy put back: the server refuses to start", !s.url && s.code !== 0, `code ${s.code}`);
  check("...saying acknowledged writes are missing", /acknowledged writes are missing/.test(s.err), s.err.trim());
  s = await start(bin, db, ["--accept-loss"]);
  check("--accept-loss starts it", !!s.url, s.err);
  if (s.url) {
    const rows = await ledger(s.url, sid, 50);
    check("...on what the copy holds", rows && rows.length === 3, JSON.stringify(rows));
    await stop(s);
  }
}

async function damagedFile() {
  const db = join(dir, "damaged.db");
  let s = await start(bin, db);
  const { sid } = await initialize(s.url);
  for (let i = 1; i <= 200; i++) await call(s.url, sid, i, "x".repeat(2000) + i);
  await stop(s);
  const size = statSync(db).size;
  const fd = openSync(db, "r+");
  const g = Buffer.alloc(8192);
  for (let i = 0; i < g.length; i++) g[i] = (0x5a ^ (i * 131)) & 0xff;
  writeSync(fd, g, 0, g.length, Math.floor(size / 2 / 4096) * 4096);
  closeSync(fd);
  s = await start(bin, db);
  check("8 KiB of garbage in the database: the server refuses to start", !s.url && s.code !== 0, `code ${s.code}`);
  check("...saying the database is damaged", /is damaged/.test(s.err), s.err.trim());
  await stop(s);
}

async function diskFull() {
  const db = join(dir, "full.db"), ctl = join(dir, "disk-full");
  const s = await start(binFault, db, [], { TIDEMARK_SQLITE_FULL_FILE: ctl });
  check("crash-points server starts", !!s.url, s.err);
  if (!s.url) return;
  const a = await initialize(s.url);
  const first = await call(s.url, a.sid, 1, "one");
  check("before: a call succeeds", first.ok, JSON.stringify(first));
  writeFileSync(ctl, "");
  await sleep(100);
  const during = await call(s.url, a.sid, 2, "two");
  check("disk full: the call does not succeed", !during.ok, JSON.stringify(during));
  // Never an empty answer: a typed error (an HTTP error, or a JSON-RPC error
  // naming the store) tells the client what happened and to re-send.
  const typed = during.status !== 200 ? !!during.status : /^store_/.test(during.msg?.error?.data?.reason ?? "");
  check("disk full: the call is answered with a typed error", typed, JSON.stringify(during));
  const init = await initialize(s.url);
  check("disk full: initialize does not succeed", init.status !== 200, JSON.stringify(init));
  rmSync(ctl);
  const t0 = Date.now();
  let back = null;
  for (let i = 3; Date.now() - t0 < 15000; i++) {
    const r = await call(s.url, a.sid, i, "back-" + i);
    if (r.ok) { back = r; break; }
    await sleep(100);
  }
  check("space back: calls succeed again without a restart", !!back, `after ${Date.now() - t0} ms`);
  console.log(`     (calls succeed again ${Date.now() - t0} ms after space came back)`);
  const again = await initialize(s.url);
  check("space back: initialize succeeds again", again.status === 200, JSON.stringify(again));
  const rows = await ledger(s.url, a.sid, 900);
  const entries = (rows || []).map((r) => r.entry);
  check("nothing committed lost, nothing failed applied",
    entries.includes("one") && !entries.includes("two") && entries.some((e) => e.startsWith("back-")),
    JSON.stringify(entries));
  await stop(s);
}

try {
  const timer = setTimeout(() => { console.log("FAIL deadline"); process.exit(1); }, 170000);
  await twoWriters();
  await olderCopy();
  await damagedFile();
  await diskFull();
  clearTimeout(timer);
} catch (e) {
  failed++;
  console.log("FAIL aborted: " + (e.stack ?? e));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
