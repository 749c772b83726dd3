// modern_cluster.mjs - the 2026-07-28 era on three nodes sharing one Redis,
// behind HAProxy (round-robin, no stickiness), and across kill -9:
//   - an MRTR round whose retry lands on another node completes there (the
//     sealed requestState opens on any node); a tampered state is refused
//     typed on a third node and the handler does not run;
//   - a subscriptions/listen stream on node A gets the list_changed caused
//     through node C, after its acknowledgement, with its subscriptionId;
//   - ledger_append re-issued under the same idempotency key (a new request
//     id each time) after kill -9 of the node running it exists exactly once,
//     for kills at several moments; the same key with other params is refused
//     typed (idempotency_key_reused) and adds no row;
//   - a key-less external_call cut by kill -9 mid-run is finished by a
//     survivor as outcome_unknown, never re-run;
//   - a key-less ledger_append (atomic) cut by kill -9 and re-issued by the
//     client as a new call exists once: the survivor does not re-run the
//     orphan, whose answer nobody could ever get.
//
//   node modern_cluster.mjs TIDEMARK_EVERYTHING
// TM_STORE=pg: the nodes share a PostgreSQL cluster instead (store_env.mjs).
// Exits 77 when the store's server or haproxy is missing.
import { sleep } from "./multinode_env.mjs";
import { StoreCluster, skipUnlessStoreTools } from "./store_env.mjs";
import { checker, until } from "./mcp_http.mjs";
import { sseEvents } from "./sse.mjs";
import { KEY, modern, modernCall, modernLedgerCount, modernPost } from "./modern_http.mjs";

const bin = process.argv[2];
if (!bin) {
  console.error("usage: modern_cluster.mjs TIDEMARK_EVERYTHING");
  process.exit(2);
}
skipUnlessStoreTools();
const t = checker();
const cl = new StoreCluster({ bin, nodes: 3 });
const node = (i) => cl.nodes[i].url;
const reasonOf = (r) => r?.response?.error?.data?.reason;

async function metric(i, name) {
  const m = await (await fetch(node(i).replace(/\/mcp$/, "/metrics"))).text();
  return Number(new RegExp(`^${name} (\\d+)`, "m").exec(m)?.[1] ?? 0);
}

async function mrtrAcrossNodes() {
  const tool = "test_input_required_result_elicitation";
  const r1 = await modernCall(node(0), 1, tool, {});
  const res1 = r1.response?.result;
  t.check("MRTR: node 0 answers input_required with inputRequests and a requestState",
    res1?.resultType === "input_required" && res1?.inputRequests?.user_name?.method === "elicitation/create" &&
    typeof res1?.requestState === "string", JSON.stringify(r1.response));
  const answers = { user_name: { action: "accept", content: { name: "Alice" } } };
  const r2 = await modern(node(2), 2, "tools/call",
    { name: tool, arguments: {}, inputResponses: answers, requestState: res1?.requestState });
  const res2 = r2.response?.result;
  t.check("MRTR: the retry on node 2 completes with the answer",
    res2 && res2.resultType !== "input_required" && JSON.stringify(res2.content ?? "").includes("Alice"),
    JSON.stringify(r2.response));
  const s = res1?.requestState ?? "";
  const flipped = s.slice(0, 10) + (s[10] === "A" ? "B" : "A") + s.slice(11);
  const r3 = await modern(node(1), 3, "tools/call",
    { name: tool, arguments: {}, inputResponses: answers, requestState: flipped });
  t.check("MRTR: a tampered requestState is refused on node 1 (-32602 request_state_invalid)",
    r3.response?.error?.code === -32602 && reasonOf(r3) === "request_state_invalid", JSON.stringify(r3.response));
}

// Open a listen stream on node i; resolves {next(pred, ms), close()}.
async function listen(i, id, notifications) {
  const ctl = new AbortController();
  const res = await modernPost(node(i), id, "subscriptions/listen", { notifications }, { signal: ctl.signal });
  const seen = [];
  const waiters = [];
  (async () => {
    try {
      for await (const ev of sseEvents(res.body)) {
        if (!ev.data) continue;
        seen.push(JSON.parse(ev.data));
        for (const w of waiters.splice(0)) w();
      }
    } catch { /* aborted */ }
  })();
  return {
    status: res.status,
    seen,
    async next(pred, ms = 10000) {
      const end = Date.now() + ms;
      for (;;) {
        const m = seen.find(pred);
        if (m) return m;
        if (Date.now() > end) return null;
        await new Promise((r) => { waiters.push(r); setTimeout(r, 100); });
      }
    },
    close: () => ctl.abort(),
  };
}

async function listenAcrossNodes() {
  const sub = await listen(0, "listen-1", { toolsListChanged: true });
  const ack = await sub.next((m) => m.method === "notifications/subscriptions/acknowledged");
  t.check("listen on node 0: acknowledged first, with the subscriptionId and toolsListChanged",
    sub.status === 200 && ack && sub.seen[0] === ack &&
    ack.params?._meta?.["io.modelcontextprotocol/subscriptionId"] === "listen-1" &&
    ack.params?.notifications?.toolsListChanged === true, JSON.stringify(sub.seen));
  const r = await modernCall(node(2), 10, "test_trigger_tool_change", {});
  t.check("a tool list change through node 2", r.response?.result && !r.response.error, JSON.stringify(r.response));
  const ch = await sub.next((m) => m.method === "notifications/tools/list_changed");
  t.check("listen on node 0 gets notifications/tools/list_changed made through node 2, with its subscriptionId",
    ch?.params?._meta?.["io.modelcontextprotocol/subscriptionId"] === "listen-1", JSON.stringify(sub.seen));
  sub.close();
}

// Re-issue (new id each time) through the load balancer until a complete
// answer, within the deadline; every answer that is not "come back" counts.
async function reissueUntilDone(name, args, key, ms = 45000) {
  const end = Date.now() + ms;
  let last;
  for (let n = 0; Date.now() < end; n++) {
    try {
      last = await modernCall(cl.url, `${key}-re${n}`, name, args, { meta: { [KEY]: key } });
      if (last.response?.result) return last;
      const why = reasonOf(last);
      if (last.response?.error && !["store_unavailable", "request_in_flight", "shutting_down"].includes(why) &&
          last.status !== 503 && last.status !== 502)
        return last;
    } catch { /* the node behind the balancer died under us */ }
    await sleep(100);
  }
  return last;
}

async function keyedLedgerAcrossKills() {
  for (const [round, killAfterMs] of [[1, 0], [2, 150], [3, 600]]) {
    const key = `kill-${round}-${Date.now()}`;
    const entry = `modern-${key}`;
    const args = { entry, delay_ms: 400 };
    const victim = round % 3;
    const first = modernCall(node(victim), `${key}-first`, "ledger_append", args, { meta: { [KEY]: key } })
      .catch(() => null);
    await sleep(killAfterMs); // any moment is valid: the assertions hold for each
    await cl.killNode(victim);
    await first;
    const a = await reissueUntilDone("ledger_append", args, key);
    const b = await reissueUntilDone("ledger_append", args, key);
    await cl.startNode(victim);
    const rows = await modernLedgerCount(cl.url, entry);
    t.check(`kill -9 round ${round} (after ${killAfterMs} ms): re-issues under the same key complete, ` +
      `same result, and the entry exists exactly once`,
      a?.response?.result && JSON.stringify(a.response.result.content) === JSON.stringify(b?.response?.result?.content) &&
      rows === 1, JSON.stringify({ a: a?.response, b: b?.response, rows }));
    if (round === 1) {
      const other = await modernCall(cl.url, `${key}-other`, "ledger_append", { entry: entry + "-x" },
        { meta: { [KEY]: key } });
      t.check("the same key with other params: -32602 idempotency_key_reused, no row",
        other.response?.error?.code === -32602 && reasonOf(other) === "idempotency_key_reused" &&
        await modernLedgerCount(cl.url, entry + "-x") === 0, JSON.stringify(other.response));
    }
  }
}

async function keylessExternalNeverRerun() {
  const victim = 1;
  const before = [0, 2].map((i) => metric(i, "tidemark_requests_recovered_total"));
  const recovered0 = (await Promise.all(before)).reduce((a, b) => a + b, 0);
  const unknown0 = (await Promise.all([0, 2].map((i) => metric(i, "tidemark_outcome_unknown_total"))))
    .reduce((a, b) => a + b, 0);
  const ctl = new AbortController();
  const res = await modernPost(node(victim), "ext-1", "tools/call",
    { name: "external_call", arguments: { delay_ms: 5000 }, _meta: { progressToken: "p1" } }, { signal: ctl.signal });
  let started = false;
  try {
    for await (const ev of sseEvents(res.body)) {
      const m = ev.data ? JSON.parse(ev.data) : null;
      if (m?.method === "notifications/progress") { started = true; break; }
    }
  } catch { /* cut */ }
  t.check("key-less external_call: its progress says it is running on node 1", started, `HTTP ${res.status}`);
  await cl.killNode(victim);
  ctl.abort();
  let unknown = unknown0;
  await until("a survivor to finish the dead node's call", async () => {
    unknown = (await Promise.all([0, 2].map((i) => metric(i, "tidemark_outcome_unknown_total"))))
      .reduce((a, b) => a + b, 0);
    return unknown > unknown0;
  }, 45000).catch(() => {});
  const recovered = (await Promise.all([0, 2].map((i) => metric(i, "tidemark_requests_recovered_total"))))
    .reduce((a, b) => a + b, 0);
  t.check("key-less external_call cut by kill -9: finished as outcome_unknown by a survivor, never re-run",
    unknown === unknown0 + 1 && recovered === recovered0, JSON.stringify({ unknown0, unknown, recovered0, recovered }));
  await cl.startNode(victim);
}

// A key-less ledger_append cut by kill -9 after it started: the client (as
// the spec tells it) re-issues it under a new id, a new call. The survivor
// must not also re-run the orphan (it is atomic, but nobody can ever get its
// answer): the entry exists exactly once, the orphan ends outcome_unknown.
async function keylessAtomicNotRerun() {
  const victim = 2;
  const entry = `keyless-${Date.now()}`;
  const args = { entry, delay_ms: 3000 };
  const sum = async (name) => (await Promise.all([0, 1].map((i) => metric(i, name)))).reduce((a, b) => a + b, 0);
  const recovered0 = await sum("tidemark_requests_recovered_total");
  const unknown0 = await sum("tidemark_outcome_unknown_total");
  const ctl = new AbortController();
  const res = await modernPost(node(victim), "la-1", "tools/call",
    { name: "ledger_append", arguments: args, _meta: { progressToken: "p2" } }, { signal: ctl.signal });
  let started = false;
  try {
    for await (const ev of sseEvents(res.body)) {
      const m = ev.data ? JSON.parse(ev.data) : null;
      if (m?.method === "notifications/progress") { started = true; break; }
    }
  } catch { /* cut */ }
  t.check("key-less ledger_append: its progress says it is running on node 2", started, `HTTP ${res.status}`);
  await cl.killNode(victim);
  ctl.abort();
  const again = await modernCall(node(0), "la-2", "ledger_append", { entry, delay_ms: 0 });
  let unknown = unknown0;
  await until("a survivor to finish the dead node's call", async () => {
    unknown = await sum("tidemark_outcome_unknown_total");
    return unknown > unknown0;
  }, 45000).catch(() => {});
  const recovered = await sum("tidemark_requests_recovered_total");
  const rows = await modernLedgerCount(node(1), entry);
  t.check("key-less ledger_append cut by kill -9 and re-issued by the client: exactly one row, " +
    "the orphan answered outcome_unknown and not re-run",
    again.response?.result && rows === 1 && unknown === unknown0 + 1 && recovered === recovered0,
    JSON.stringify({ again: again.response, rows, unknown0, unknown, recovered0, recovered }));
  await cl.startNode(victim);
}

try {
  await cl.start();
  console.log(`cluster: ${cl.storeName}, nodes ${cl.nodes.map((n) => n.port).join(", ")}, haproxy ${cl.url}`);
  await mrtrAcrossNodes();
  await listenAcrossNodes();
  await keyedLedgerAcrossKills();
  await keylessExternalNeverRerun();
  await keylessAtomicNotRerun();
} catch (e) {
  t.check("the scenario ran to its end", false, e.stack);
} finally {
  await cl.stop();
}
process.exit(t.done());
