// The three behaviours of a client crash between receipt and cursor save,
// reproduced and fixed (issue "Client", acceptance). For each persistence
// mode and crash point, tidemark-client-crashpoints (crash points compiled
// in) calls `stream` on a running tidemark-server, recording every
// dispatched event as an effect in its state file, and is SIGKILLed at the
// 5th event by the armed crash point. It is then restarted on the same state
// file with `resume`, and the outcome and the effects are checked:
//   cursor_before_dispatch -> the skipped event is detected (never silent)
//   cursor_after_dispatch  -> the duplicate is detected: failed closed, or
//                             suppressed with --idempotent-handlers
//   atomic                 -> every effect exactly once
// A table of mode x crash point x outcome is printed and asserted.
//
//   node client_crash_matrix.mjs CLIENT_WITH_CRASHPOINTS SERVER_BINARY
import { spawn, spawnSync } from "node:child_process";
import { reaped } from "./reap.mjs";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [client, serverBin] = process.argv.slice(2);
if (!client || !serverBin) {
  console.error("usage: client_crash_matrix.mjs CLIENT SERVER");
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), "tidemark-matrix-"));
const N = 12;          // progress events of the call
const CRASH_AT = 5;    // the n-th time the crash point is reached

const server = await new Promise((resolve, reject) => {
  const p = reaped(spawn(serverBin, ["--listen", "127.0.0.1:0", "--store", "memory", "--log-level", "warn",
    "--retry-ms", "100"], { stdio: ["ignore", "pipe", "inherit"] }));
  let out = "";
  const t = setTimeout(() => reject(new Error("server did not start")), 10000);
  p.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/^listening on (\S+)$/m);
    if (m) { clearTimeout(t); resolve({ p, url: m[1] }); }
  });
});

// Legacy era: cursors, the dispatch log and Last-Event-ID are the legacy
// session's (a 2026-07-28 stream is not resumable).
function run(args, env = {}) {
  const r = spawnSync(client, ["--protocol", "legacy", ...args],
                      { env: { ...process.env, ...env }, encoding: "utf8", timeout: 60000 });
  return { code: r.status, signal: r.signal, out: r.stdout, err: r.stderr };
}

const rows = [
  // mode, crash point, extra flags, expected outcome
  ["atomic", "atomic_before_commit", [], "exactly_once"],
  ["cursor_after_dispatch", "after_dispatch_before_cursor", [], "duplicate_detected_failed_closed"],
  ["cursor_after_dispatch", "after_dispatch_before_cursor", ["--idempotent-handlers"], "duplicate_suppressed"],
  ["cursor_before_dispatch", "after_cursor_before_dispatch", [], "skip_detected"],
  // crash points that do not exist in a mode are never reached: no crash
  ["atomic", "after_dispatch_before_cursor", [], "no_crash"],
];

const table = [];
let failed = 0;
for (const [mode, point, extra, expect] of rows) {
  const state = join(dir, `${mode}-${point}-${extra.length}.db`);
  const base = ["--state", state, "--persist", mode, "--record-effects", "--quiet", ...extra, server.url];
  const first = run([...base, "call", "stream", `n=${N}`, "delay_ms=10"],
    { TIDEMARK_CLIENT_CRASH: `${point}:${CRASH_AT}` });
  const crashed = first.signal === "SIGKILL";
  let outcome, resumeCode = null, reason = "";
  if (!crashed) {
    outcome = first.code === 0 ? "no_crash" : `first run failed (${first.code})`;
  } else {
    const second = run([...base, "resume"]);
    resumeCode = second.code;
    const m = /"reason":\s*"([a-z_]+)"/.exec(second.out);
    reason = m ? m[1] : "";
    const eff = JSON.parse(run(["--state", state, server.url, "effects"]).out || "[]");
    const seqs = eff.map((e) => e.seq);
    const dup = eff.some((e) => e.n !== 1);
    // events with a message: progress 1..N (seqs 2..N+1) and the response (N+2)
    const complete = seqs.join() === Array.from({ length: N + 1 }, (_, i) => i + 2).join();
    const gotResult = /streamed 12/.test(second.out);
    if (resumeCode === 0 && gotResult && complete && !dup)
      outcome = extra.length ? "duplicate_suppressed" : "exactly_once";
    else if (resumeCode === 4 && reason === "duplicate_effect" && !dup)
      outcome = "duplicate_detected_failed_closed";
    else if (resumeCode === 4 && reason === "dispatch_log_inconsistent" && !dup)
      outcome = "skip_detected";
    else
      outcome = `unexpected (exit ${resumeCode}, reason ${reason || "-"}, effects ${seqs.join(",")}${dup ? ", duplicates" : ""})`;
  }
  const ok = outcome === expect;
  if (!ok) failed++;
  table.push([mode + (extra.length ? " +idempotent" : ""), point, crashed ? "killed" : "-", outcome, ok ? "ok" : "FAIL"]);
}

const w = [26, 30, 7, 34, 4];
const line = (cells) => cells.map((c, i) => String(c).padEnd(w[i])).join(" ");
console.log(line(["mode", "crash point", "client", "outcome", ""]));
for (const r of table) console.log(line(r));
server.p.kill("SIGTERM");
rmSync(dir, { recursive: true, force: true });
console.log(`${rows.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
