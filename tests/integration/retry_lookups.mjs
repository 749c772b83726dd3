// retry_lookups.mjs - how a 2025 session on a store of one node tells a
// retry from a new request once it has more request records than it keeps
// keys for (256): a call whose integer id is above every id recorded in the
// session is new without asking the store (clients' ids rise); any other
// id asks the store (tidemark_request_lookups_total), and a retry is still
// answered from its record and appends nothing.
//   node retry_lookups.mjs TIDEMARK_SERVER
import { checker, startServer, stopServer, initialize, callTool } from "./mcp_http.mjs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: retry_lookups.mjs TIDEMARK_SERVER"); process.exit(2); }
const t = checker();
const FIRST = 300; // past the 256 keys a session keeps
const MORE = 40;

async function metric(url, name) {
  const m = await (await fetch(url.replace(/\/mcp$/, "/metrics"))).text();
  const line = m.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(/\s+/)[1]) : NaN;
}
const lookups = (url) => metric(url, "tidemark_request_lookups_total");

const entryOf = (r) => r.response?.result?.structuredContent?.entry;
const append = (url, sid, id, entry) => callTool(url, sid, id, "ledger_append", { entry });

// Calls ids[i] with entry "e<id>"; how many were answered with their entry.
async function appendAll(url, sid, ids) {
  let ok = 0;
  for (const id of ids) if (entryOf(await append(url, sid, id, "e" + id)) === "e" + id) ok++;
  return ok;
}
const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

const dir = mkdtempSync(join(tmpdir(), "tidemark-lookups-"));
const s = await startServer(bin, ["--store", "sqlite:" + join(dir, "t.db"), "--durability", "process"]);
try {
  const sid = await initialize(s.url);
  t.check(`${FIRST} ledger_append calls with rising ids answered`,
    (await appendAll(s.url, sid, range(1, FIRST))) === FIRST);
  let before = await lookups(s.url);
  const more = await appendAll(s.url, sid, range(FIRST + 1, FIRST + MORE));
  let asked = (await lookups(s.url)) - before;
  t.check(`${MORE} more with rising ids answered`, more === MORE, `${more}`);
  t.check("... without asking the store whether each is a retry", asked === 0, `${asked} lookups`);

  // Retries of recorded integer ids (the oldest and the newest): from the record
  const dedupBefore = await metric(s.url, "tidemark_requests_deduplicated_total");
  before = await lookups(s.url);
  const old = await append(s.url, sid, 1, "e1");
  const last = await append(s.url, sid, FIRST + MORE, "e" + (FIRST + MORE));
  asked = (await lookups(s.url)) - before;
  const dedup = (await metric(s.url, "tidemark_requests_deduplicated_total")) - dedupBefore;
  t.check("a retry of the first id and of the last get their recorded answers",
    entryOf(old) === "e1" && entryOf(last) === "e" + (FIRST + MORE), `${entryOf(old)} ${entryOf(last)}`);
  t.check("... both from their records, each after asking the store", dedup === 2 && asked === 2,
    `${dedup} deduplicated, ${asked} lookups`);

  // A new id below the highest, and a string id: the store is asked; they run once
  before = await lookups(s.url);
  const low = await append(s.url, sid, -7, "low");
  const str = await append(s.url, sid, "abc", "str");
  t.check("a new integer id below the highest and a string id run",
    entryOf(low) === "low" && entryOf(str) === "str", `${entryOf(low)} ${entryOf(str)}`);
  t.check("... each after asking the store", (await lookups(s.url)) - before === 2);
  const lowAgain = await append(s.url, sid, -7, "low");
  const strAgain = await append(s.url, sid, "abc", "str");
  t.check("their retries get their recorded answers",
    entryOf(lowAgain) === "low" && entryOf(strAgain) === "str");

  const rows = (await callTool(s.url, sid, "read", "ledger_read", {})).response?.result
    ?.structuredContent?.entries ?? [];
  const want = FIRST + MORE + 2;
  t.check(`the ledger holds each of the ${want} entries once`,
    rows.length === want && new Set(rows.map((r) => r.entry)).size === want, `${rows.length} rows`);
} finally {
  await stopServer(s);
  rmSync(dir, { recursive: true, force: true });
}
t.done();
