// modern_client_tidemark.mjs (CTest modern_client_tidemark): tidemark-client
// against Tidemark's own server (tidemark-everything) in the 2026-07-28 era:
//   - the era is found out (server/discover) and kept in the state file;
//   - exactly once without a session: a client killed (SIGKILL) while its
//     ledger_append runs is restarted with `resume`; the call is re-issued
//     with the key it saved (a new id) and answered; the ledger holds the
//     entry once; the same key sent again is answered from the record, and
//     the ledger still holds it once;
//   - an elicitation round (InputRequiredResult) answered and completed;
//   - listen: the acknowledgement and a resources/updated a call causes.
//   node modern_client_tidemark.mjs CLIENT TIDEMARK_EVERYTHING
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { reaped } from "./reap.mjs";
import { checker, startServer, stopServer, until } from "./mcp_http.mjs";

const [client, everything] = process.argv.slice(2);
const t = checker();
const dir = mkdtempSync(join(tmpdir(), "tm-modern-tm-"));

function start(args, ms = 30000) {
  const proc = reaped(spawn(client, args, { stdio: ["ignore", "pipe", "pipe"] }));
  let out = "", err = "";
  const timer = setTimeout(() => proc.kill("SIGKILL"), ms);
  proc.stdout.on("data", (d) => { out += d; });
  proc.stderr.on("data", (d) => { err += d; });
  const r = { proc, out: () => out };
  r.done = new Promise((resolve) => proc.on("close", (code, sig) => {
    clearTimeout(timer);
    resolve({ code, sig, out, err, reason: (/"reason":\s*"([a-z_]+)"/.exec(out) ?? [])[1] ?? "" });
  }));
  return r;
}
const run = (args) => start(args).done;
const json = (s) => { try { return JSON.parse(s); } catch { return null; } };
const brief = (r) => `exit ${r.code}${r.sig ? " " + r.sig : ""}; out ${r.out.slice(0, 300)}; err ${r.err.slice(0, 300)}`;

const srv = await startServer(everything, ["--store", "memory"]);
const u = srv.url;
const ledger = async (entry) =>
  json((await run(["--json", u, "call", "ledger_read", `entry=${entry}`])).out)?.structuredContent?.count;
try {
  const state = join(dir, "a.db");
  let r = await run(["--state", state, u, "call", "echo", "text=modern"]);
  t.check("echo in the modern era", r.code === 0 && r.out.trim() === "modern", brief(r));
  let st = json((await run(["--state", state, u, "state"])).out);
  t.check("the state keeps the modern era", st?.session?.[0]?.version === "2026-07-28" && st.session[0].id === "",
    JSON.stringify(st?.session));

  // Killed while the call runs, restarted: the same key again. The call has
  // reached the server when its HTTP requests (tools/list, then the call:
  // the era is in the state already) are counted there.
  // (Each look at /metrics is a request too: those are taken off.)
  let looks = 0;
  const requests = async () => Number((/^tidemark_http_requests_total (\d+)$/m
    .exec(await (await fetch(new URL("/metrics", u))).text()) ?? [])[1] ?? NaN) - looks++;
  const before = await requests();
  const k = start(["--state", state, u, "call", "ledger_append", "entry=once-1", "delay_ms=1500"]);
  await until("the call at the server", async () => (await requests()) >= before + 2, 10000);
  k.proc.kill("SIGKILL");
  const killed = await k.done;
  st = json((await run(["--state", state, u, "state"])).out);
  const key = st?.outstanding?.[0]?.idem_key;
  t.check("killed mid-call: the call and its key stay outstanding",
    killed.sig === "SIGKILL" && /^tmk-[0-9a-f]{32}$/.test(key ?? ""), brief(killed) + JSON.stringify(st?.outstanding));
  r = await run(["--json", "--state", state, u, "resume"]);
  const res = json(r.out)?.[0]?.result;
  t.check("resume re-issues it and gets the result", r.code === 0 && res?.content?.[0]?.text === "appended", brief(r));
  t.check("the result is the keyed call's (the server's key names the client's)",
    typeof res?.structuredContent?.key === "string" && res.structuredContent.key.endsWith(key), JSON.stringify(res));
  t.check("the ledger holds the entry once", (await ledger("once-1")) === 1);
  st = json((await run(["--state", state, u, "state"])).out);
  t.check("nothing outstanding after resume", st?.outstanding?.length === 0, JSON.stringify(st?.outstanding));
  r = await run(["--idempotency-key", key, u, "call", "ledger_append", "entry=once-1", "delay_ms=1500"]);
  t.check("the same key again: answered from the record", r.code === 0 && r.out.trim() === "appended", brief(r));
  t.check("the ledger still holds it once", (await ledger("once-1")) === 1);

  r = await run(["--elicit", "accept", u, "call", "test_elicitation"]);
  t.check("an elicitation round answered and completed", r.code === 0 && /accept/.test(r.out), brief(r));

  let acked = false;
  const l = start([u, "listen", "--resource", "test://watched-resource", "5"]);
  l.proc.stdout.on("data", () => { acked ||= l.out().includes("notifications/subscriptions/acknowledged"); });
  await until("the listen acknowledgement", () => acked, 10000);
  r = await run([u, "call", "update_resource"]);
  const lr = await l.done;
  const lines = lr.out.trim().split("\n").map(json);
  t.check("listen: the acknowledgement, then resources/updated for the URI",
    r.code === 0 && lr.code === 0 && lines[0]?.method === "notifications/subscriptions/acknowledged" &&
    lines.some((m) => m?.method === "notifications/resources/updated" && m.params?.uri === "test://watched-resource"),
    brief(lr));
} finally {
  await stopServer(srv);
}
t.done();
