// cursors.mjs - forged Last-Event-IDs cannot ring the cursor_ahead alarm
// (issue 30, item 5): event ids carry a MAC under the key the nodes share
// through the store, so a forged or altered id is 400 malformed_cursor and
// tidemark_resumes_total{outcome="ahead"} counts only ids this store issued.
//
//   node cursors.mjs SERVER_BINARY STORE SCENARIO
//   STORE: memory | sqlite | redis (two nodes on one Redis: ids issued by one
//   verify on the other). SCENARIO: forged | lost (SQLite: a real id above
//   the head, after an older copy of the database is put back and the server
//   is started with --accept-loss, still counts as ahead).
import { copyFileSync, mkdtempSync, readdirSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { sseEvents } from "./sse.mjs";
import { checker, initialize, serversFor, startServer, stopServer, until } from "./mcp_http.mjs";

const [bin, kind, scenario] = process.argv.slice(2);
if (!bin || !kind || !scenario) {
  console.error("usage: cursors.mjs SERVER_BINARY memory|sqlite|redis forged|lost");
  process.exit(2);
}
const t = checker();
const H = (sid, extra = {}) => ({ accept: "text/event-stream", "mcp-session-id": sid,
  "mcp-protocol-version": "2025-11-25", ...extra });

// GET with a cursor: {status, reason}; a 200 stream is closed at once.
async function resume(url, sid, cursor) {
  const ac = new AbortController();
  const r = await fetch(url, { headers: H(sid, { "last-event-id": cursor }), signal: ac.signal });
  let reason = null;
  if (r.status !== 200) {
    const b = await r.text();
    try { reason = JSON.parse(b)?.error?.data?.reason ?? null; } catch { reason = b; }
  }
  ac.abort();
  await r.body?.cancel().catch(() => {});
  return { status: r.status, reason };
}

// The standalone stream's first event (its priming event): its id.
async function primingId(url, sid) {
  return until("a GET stream that is not attached elsewhere", async () => {
    const ac = new AbortController();
    const r = await fetch(url, { headers: H(sid), signal: ac.signal });
    if (r.status !== 200) { await r.text(); return null; }
    let id = null;
    try {
      for await (const ev of sseEvents(r.body)) if (ev.id) { id = ev.id; break; }
    } catch { /* aborted below */ }
    ac.abort();
    return id;
  });
}

async function metric(url, outcome) {
  const txt = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const m = txt.match(new RegExp(`^tidemark_resumes_total\\{outcome="${outcome}"\\} (\\d+)`, "m"));
  return m ? Number(m[1]) : 0;
}

// "<epoch>-<stream>-<seq>-<mac>" split at its first three dashes (the mac
// may hold a dash itself).
function parts(id) {
  const m = id.match(/^([0-9a-f]{16})-(g|r[1-9][0-9]*)-([1-9][0-9]*)(?:-([A-Za-z0-9_-]{12}))?$/);
  if (!m) throw new Error("not an event id: " + id);
  return { epoch: m[1], stream: m[2], seq: Number(m[3]), mac: m[4] ?? "" };
}
const idOf = (p, seq, mac) => `${p.epoch}-${p.stream}-${seq}${mac ? "-" + mac : ""}`;
const randomMac = () => randomBytes(9).toString("base64url");

async function forged(urls) {
  const sid = await initialize(urls[0]);
  const other = await initialize(urls[0]);
  const real = await primingId(urls[0], sid);
  t.check("the standalone stream's id carries a 12-character mac",
    !!real && parts(real).mac.length === 12, String(real));
  if (!real) return;
  const p = parts(real);
  const theirs = await primingId(urls[0], other);
  const q = parts(theirs);
  urls = [...new Set(urls)]; // memory and SQLite: one server
  const before = [];
  for (const u of urls) before.push(await metric(u, "ahead"));
  const cursors = [];
  for (let i = 1; i <= 25; i++) cursors.push(idOf(p, p.seq + i, p.mac));      // seq changed, mac kept
  for (let i = 1; i <= 25; i++) cursors.push(idOf(p, p.seq + i, ""));         // mac stripped
  for (let i = 1; i <= 25; i++) cursors.push(idOf(p, p.seq + i, randomMac())); // random mac
  for (let i = 0; i < 25; i++) cursors.push(idOf(q, q.seq + i, q.mac));       // another session's
  const answers = [];
  for (let i = 0; i < cursors.length; i++) answers.push(await resume(urls[i % urls.length], sid, cursors[i]));
  const wrong = answers.map((a, i) => [cursors[i], a]).filter(([, a]) => a.status !== 400 ||
    a.reason !== "malformed_cursor");
  t.check("100 forged cursors ahead: each 400 malformed_cursor", wrong.length === 0,
    JSON.stringify(wrong.slice(0, 5)));
  for (let i = 0; i < urls.length; i++)
    t.check(`node ${i}: tidemark_resumes_total{outcome="ahead"} did not move`,
      await metric(urls[i], "ahead") === before[i], String(await metric(urls[i], "ahead")));
  // The real id resumes, on every node (the key is the store's).
  for (let i = 0; i < urls.length; i++) {
    const ok = await resume(urls[i], sid, real);
    t.check(`node ${i}: the real id resumes (200)`, ok.status === 200, JSON.stringify(ok));
  }
  // Another session's real id, at its own seq, names nothing here.
  const foreign = await resume(urls[0], sid, theirs);
  t.check("another session's real id: 400 malformed_cursor", foreign.status === 400 &&
    foreign.reason === "malformed_cursor", JSON.stringify(foreign));
  // An id issued before macs (no mac) still resumes at or below the head.
  const old = await resume(urls[0], sid, idOf(p, p.seq, ""));
  t.check("a mac-less id at the head still resumes (200)", old.status === 200, JSON.stringify(old));
}

// Real loss: the standalone stream had seq 2 when an older copy (seq 1) was
// put back; the id of seq 2 verifies and is above the head.
async function lost() {
  const dir = mkdtempSync(join(tmpdir(), "tidemark-cursors-"));
  const db = join(dir, "t.db");
  const flags = ["--store", "sqlite:" + db];
  let s = await startServer(bin, flags);
  const sid = await initialize(s.url);
  const first = await primingId(s.url, sid);
  await stopServer(s);
  const files = readdirSync(dir).filter((f) => f.startsWith("t.db") && !f.endsWith(".head"));
  for (const f of files) copyFileSync(join(dir, f), join(dir, "keep-" + f));
  s = await startServer(bin, flags);
  const second = await primingId(s.url, sid);
  await stopServer(s);
  t.check("two priming events: seq 1 then 2", parts(first).seq === 1 && parts(second).seq === 2,
    `${first} ${second}`);
  for (const f of readdirSync(dir).filter((f) => f.startsWith("t.db") && !f.endsWith(".head")))
    unlinkSync(join(dir, f));
  for (const f of files) copyFileSync(join(dir, "keep-" + f), join(dir, f));
  s = await startServer(bin, [...flags, "--accept-loss", "--log-level", "warn"]);
  try {
    const forgedAhead = await resume(s.url, sid, idOf(parts(second), 3, parts(second).mac));
    t.check("a forged seq 3: 400 malformed_cursor", forgedAhead.reason === "malformed_cursor",
      JSON.stringify(forgedAhead));
    t.check("ahead still 0 after the forgery", await metric(s.url, "ahead") === 0);
    const a = await resume(s.url, sid, second);
    t.check("the real id of the lost event: 400 cursor_ahead", a.status === 400 &&
      a.reason === "cursor_ahead", JSON.stringify(a));
    t.check('tidemark_resumes_total{outcome="ahead"} is 1', await metric(s.url, "ahead") === 1,
      String(await metric(s.url, "ahead")));
    t.check("one cursor_ahead WARN line", (s.log.match(/cursor_ahead/g) ?? []).length === 1, s.log);
  } finally {
    await stopServer(s);
  }
}

if (scenario === "lost") {
  if (kind !== "sqlite") { console.error("lost: sqlite only"); process.exit(2); }
  try { await lost(); } catch (e) { t.check("scenario ran to the end", false, e.stack); }
  t.done();
}
const servers = await serversFor(bin, kind);
if (!servers) { console.log("SKIP: redis-server not installed"); process.exit(77); }
try {
  await forged(servers.urls);
} catch (e) {
  t.check("scenario ran to the end", false, e.stack);
} finally {
  await servers.stop();
}
t.done();
