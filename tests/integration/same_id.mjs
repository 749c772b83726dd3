// same_id.mjs - a 2025 request and a copy of it (same session, same request
// id) sent at once run the tool once, and both are answered with its one
// result (model/requests.pml, the 2025 begin; docs/design.md, "One record
// rule"). Each pair is a ledger_append (an atomic tool): run inline (a quiet
// call under the POST's hold) and, with delay_ms, on a worker.
//
//   node same_id.mjs SERVER_BINARY STORE [PAIRS]
//   STORE: memory | sqlite | redis (two nodes on one Redis, exit 77 when
//   redis-server is missing: the copies go to one node, then each to
//   another node, where the second begin finds the first's record)
import { checker, initialize, messages, post, serversFor, toolCall } from "./mcp_http.mjs";

const [bin, kind, pairsArg] = process.argv.slice(2);
if (!bin || !kind) {
  console.error("usage: same_id.mjs SERVER_BINARY memory|sqlite|redis [PAIRS]");
  process.exit(2);
}
const PAIRS = Number(pairsArg || 60);
const VERSION = "2025-06-18";
const H = { "mcp-protocol-version": VERSION };
const t = checker();

const servers = await serversFor(bin, kind);
if (!servers) {
  console.log("redis-server is not installed: skipped");
  process.exit(77);
}

// The final response of a POST's answer (JSON or SSE), with its status.
async function answer(res) {
  const m = await messages(res);
  return { status: m.status, msg: m.msgs.find((x) => x.id !== undefined && (x.result || x.error)) };
}

// PAIRS calls, each sent twice at once; DELAY > 0 sends them to a worker.
async function pairs([url, url2], sid, tag, delay, base) {
  const bad = [];
  for (let i = 1; i <= PAIRS; i++) {
    const args = { entry: `${tag}-${i}` };
    if (delay) args.delay_ms = delay;
    const call = toolCall(base + i, "ledger_append", args);
    delete call.params._meta;
    const [a, b] = await Promise.all([post(url, sid, call, { headers: H }).then(answer),
                                      post(url2, sid, call, { headers: H }).then(answer)]);
    const ok = (x) => x.status === 200 && x.msg?.id === call.id && x.msg?.result &&
      !x.msg.result.isError;
    if (!ok(a) || !ok(b) || JSON.stringify(a.msg.result) !== JSON.stringify(b.msg.result))
      bad.push({ i, a, b });
  }
  return bad;
}

// Ledger rows per entry of this tag.
async function rows(url, sid, tag) {
  const r = await answer(await post(url, sid, toolCall(`read-${tag}`, "ledger_read", {}), { headers: H }));
  const list = r.msg?.result?.structuredContent?.entries;
  if (!Array.isArray(list)) return null;
  const per = new Map();
  for (const row of list)
    if (typeof row.entry === "string" && row.entry.startsWith(tag + "-"))
      per.set(row.entry, (per.get(row.entry) || 0) + 1);
  return per;
}

try {
  const url = servers.urls[0];
  const sid = await initialize(url, VERSION);
  const phases = [["inline", 0, [url, url]], ["on a worker", 20, [url, url]]];
  if (servers.urls[1] !== url) phases.push(["on two nodes", 20, servers.urls]);
  for (const [[what, delay, urls], n] of phases.map((p, n) => [p, n])) {
    const tag = `s${Date.now()}${n}`;
    const bad = await pairs(urls, sid, tag, delay, 10000 * (n + 1));
    t.check(`${what}: both copies of each of ${PAIRS} calls answered with its one result`,
      bad.length === 0, `${bad.length} not: ` + JSON.stringify(bad.slice(0, 2)));
    const per = await rows(url, sid, tag);
    const counts = per ? [...per.values()] : [];
    t.check(`${what}: exactly one ledger row per call`, per !== null && per.size === PAIRS &&
      counts.every((n) => n === 1),
      per ? `${per.size} entries, ${counts.filter((n) => n > 1).length} with more than one row`
          : "ledger_read gave no rows");
  }
} finally {
  await servers.stop();
}
t.done();
