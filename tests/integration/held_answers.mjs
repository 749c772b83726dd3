// held_answers.mjs - a POST's call stream sends nothing until its first
// events are durable (docs/design.md, "Whole answers"); what else ends
// that wait. Commits are slowed to 1.5 s (TIDEMARK_COMMIT_DELAY_MS, a
// crash-points build) and keep-alives come every 200 ms:
//  - a keep-alive tick ends the wait: the headers come long before the
//    commit, chunked, keep-alive comments before the answer, which follows
//    on the same response once committed;
//  - SIGTERM while an answer is held: the server still exits (cleanly,
//    within the deadline) and the POST settles, answered or cut.
//   node held_answers.mjs TIDEMARK_SERVER_CRASHPOINTS
import { checker, startServer, initialize, post, toolCall } from "./mcp_http.mjs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [bin] = process.argv.slice(2);
if (!bin) { console.error("usage: held_answers.mjs TIDEMARK_SERVER_CRASHPOINTS"); process.exit(2); }
const t = checker();
const DELAY_MS = 1500;
const LEGACY = { headers: { "mcp-protocol-version": "2025-11-25" } };

// Read res's body to its end (or until ms), noting when each part came.
async function readAll(res, ms) {
  const reader = res.body.getReader();
  const parts = [];
  const dec = new TextDecoder();
  const deadline = setTimeout(() => reader.cancel().catch(() => {}), ms);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parts.push({ at: Date.now(), text: dec.decode(value, { stream: true }) });
    }
  } catch { /* cut */ }
  clearTimeout(deadline);
  return parts;
}

function exitOf(proc, ms) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve({ code: proc.exitCode });
    const timer = setTimeout(() => resolve({ timeout: true }), ms);
    proc.once("exit", (code, sig) => { clearTimeout(timer); resolve({ code, sig }); });
  });
}

const dir = mkdtempSync(join(tmpdir(), "tidemark-held-"));
const env = { TIDEMARK_COMMIT_DELAY_MS: String(DELAY_MS) };
const flags = ["--store", "sqlite:" + join(dir, "t.db"), "--durability", "power", "--keepalive-ms", "200"];
let s = await startServer(bin, flags, { env });
try {
  const sid = await initialize(s.url);
  const sent = Date.now();
  const res = await post(s.url, sid, toolCall(7, "ledger_append", { entry: "held" }), LEGACY);
  const headersAfter = Date.now() - sent;
  const parts = await readAll(res, 20000);
  const body = parts.map((p) => p.text).join("");
  const first = parts[0]?.text ?? "";
  t.check("a keep-alive tick ends the wait: headers long before the commit",
    headersAfter < DELAY_MS - 300, `${headersAfter} ms (commit delay ${DELAY_MS} ms)`);
  const ka = body.indexOf(": keep-alive"), answer = body.indexOf('"result"');
  t.check("... chunked, its first part without the answer, keep-alives before it",
    res.headers.get("transfer-encoding") === "chunked" && !first.includes('"result"') &&
    ka >= 0 && ka < answer, JSON.stringify(body));
  t.check("... the answer follows on the same response once committed",
    /"entry":"held"/.test(body) && /id: [0-9a-f]{16}-r\d+-2-[A-Za-z0-9_-]{12}\n/.test(body), JSON.stringify(body));

  // SIGTERM while an answer is held (its commit delayed): the server exits
  const pending = post(s.url, sid, toolCall(8, "ledger_append", { entry: "cut" }), LEGACY)
    .then((r) => readAll(r, 20000)).then(() => "answered", () => "cut");
  await new Promise((r) => setTimeout(r, 300)); // the POST is read and held (no commit for 1.5 s)
  s.proc.kill("SIGTERM");
  const exit = await exitOf(s.proc, 15000);
  t.check("SIGTERM while an answer is held: the server exits cleanly", !exit.timeout && exit.code === 0,
    JSON.stringify(exit));
  const settled = await Promise.race([pending, new Promise((r) => setTimeout(() => r("hung"), 15000))]);
  t.check("... and the held POST settles", settled !== "hung", settled);
} finally {
  if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
}
t.done();
