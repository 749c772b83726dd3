// first_hour.mjs - what a new user meets first, each asserted: --version on
// every program, errors that say what happened (a port in use, a bad option
// value), /healthz and /readyz, /metrics for a scrape host, JSON log lines,
// the help naming the demo tools.
//
//   node first_hour.mjs BIN_DIR VERSION
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { checker, rawHttp, startServer, stopServer } from "./mcp_http.mjs";

const [bindir, version] = process.argv.slice(2);
const t = checker();
const run = (p, args) => spawnSync(join(bindir, p), args, { encoding: "utf8", timeout: 20000 });
const server = join(bindir, "tidemark-server");

for (const p of ["tidemark-server", "tidemark-everything", "tidemark-client", "tidemark-check",
  "tidemark-bench", "tidemark-conformance-client", "tm-proxy"]) {
  const v = run(p, ["--version"]);
  t.check(`${p} --version`, v.status === 0 && v.stdout.trim() === `${p} ${version}`,
    JSON.stringify([v.status, v.stdout.slice(0, 100), v.stderr.slice(0, 200)]));
}
const help = run("tidemark-server", ["--help"]);
t.check("tidemark-server --help names its five tools", help.status === 0 &&
  ["echo", "stream", "ledger_append", "ledger_read", "external_call"].every((n) => help.stdout.includes(n)));
const bad = run("tidemark-server", ["--durability", "fast"]);
t.check("a bad option value names the option", bad.status !== 0 && /--durability: bad value 'fast'/.test(bad.stderr),
  bad.stderr);

const s = await startServer(server, ["--store", "memory", "--log-format", "json", "--log-level", "info"]);
try {
  const port = new URL(s.url).port;
  const again = run("tidemark-server", ["--store", "memory", "--listen", `127.0.0.1:${port}`]);
  t.check("a port in use says so", again.status !== 0 && /127\.0\.0\.1 port \d+: Address already in use/.test(again.stderr),
    again.stderr);
  const base = s.url.replace(/\/mcp$/, "");
  for (const [path, status] of [["/healthz", "ok"], ["/readyz", "ready"]]) {
    const r = await rawHttp(s.url, `GET ${path} HTTP/1.1\r\nHost: probe.example\r\nConnection: close\r\n\r\n`);
    let b = null;
    try { b = JSON.parse(r.body); } catch { /* not JSON */ }
    t.check(`${path}: 200 ${status}, without the Host check`, r.status === 200 && b?.status === status,
      JSON.stringify([r.status, r.body]));
  }
  const post = await fetch(base + "/readyz", { method: "POST" });
  t.check("/readyz takes GET only (405)", post.status === 405);
  const m = await rawHttp(s.url, "GET /metrics HTTP/1.1\r\nHost: probe.example\r\nConnection: close\r\n\r\n");
  t.check("/metrics with a Host not allowed: 403 forbidden_host", m.status === 403 && /forbidden_host/.test(m.body),
    JSON.stringify([m.status, m.body]));
  await new Promise((r) => setTimeout(r, 100));
  const lines = s.log.split("\n").filter(Boolean);
  const parsed = lines.map((l) => { try { return JSON.parse(l); } catch { return null; } });
  t.check("--log-format json: every line is a JSON object with an ISO-8601 time, a level and a message",
    lines.length > 0 && parsed.every((o) => o && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(o.ts) &&
      typeof o.level === "string" && typeof o.msg === "string"), lines.slice(0, 3).join("\n"));
  t.check("the log says where it listens", parsed.some((o) => o?.msg?.startsWith("listening on http://")));
} finally {
  await stopServer(s);
}
const sm = await startServer(server, ["--store", "memory", "--metrics-address", "127.0.0.1"]);
try {
  const r = await rawHttp(sm.url, "GET /metrics HTTP/1.1\r\nHost: probe.example\r\nConnection: close\r\n\r\n");
  t.check("/metrics from a --metrics-address: 200 without the Host check",
    r.status === 200 && /tidemark_http_requests_total/.test(r.body), String(r.status));
} finally {
  await stopServer(sm);
}
t.done();
