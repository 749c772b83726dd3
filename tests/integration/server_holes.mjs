// server_holes.mjs - regression tests for the holes a hostile client found in
// the server (issue 10), each a real server driven over HTTP:
//
//   node server_holes.mjs SERVER_BINARY STORE SCENARIO
//   STORE: memory | sqlite | redis (two nodes on one Redis; retries go to the
//   other node). SCENARIO: ids.
import {
  callTool, checker, initialize, ledgerCount, post, reasonOf, serversFor, toolCall, messages,
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

const scenarios = { ids };
const fn = scenarios[scenario];
if (!fn) { console.error("unknown scenario " + scenario); process.exit(2); }
const servers = await serversFor(bin, kind);
if (!servers) { console.log("SKIP: redis-server not installed"); process.exit(77); }
try {
  await fn(servers.urls);
} catch (e) {
  t.check("scenario ran to the end", false, e.stack);
} finally {
  await servers.stop();
}
t.done();
