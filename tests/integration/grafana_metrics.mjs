// grafana_metrics.mjs (CTest grafana_metrics): every metric a query of
// examples/grafana-dashboard.json names is exported on a live
// tidemark-server's /metrics (a "# TYPE" line of its family, a histogram
// for _bucket/_sum/_count), and the histograms of issue 33 have samples
// once the server did what they measure: a call, a streamed call (commit
// to emit), a resume (events replayed), a session deleted (its duration).
//   node grafana_metrics.mjs SERVER DASHBOARD_JSON
import { readFileSync } from "node:fs";
import { callTool, checker, initialize, startServer, stopServer } from "./mcp_http.mjs";

const [server, dashboardPath] = process.argv.slice(2);
const t = checker();

// Metric names of a PromQL expression: label matchers and by/without
// lists taken out first (label names look like metric names).
function metricNames(expr) {
  const bare = expr.replace(/\{[^}]*\}/g, " ").replace(/\b(by|without)\s*\([^)]*\)/g, " ")
    .replace(/\[[^\]]*\]/g, " ").replace(/"[^"]*"/g, " ");
  return [...bare.matchAll(/\b(tidemark_[a-z0-9_]+|mcp_[a-z0-9_]+)\b/g)].map((m) => m[1]);
}

const dash = JSON.parse(readFileSync(dashboardPath, "utf8"));
const exprs = dash.panels.flatMap((p) => p.targets.map((x) => x.expr));
const names = [...new Set(exprs.flatMap(metricNames))];
t.check("the dashboard's queries name metrics", names.length >= 15, JSON.stringify(names));

const s = await startServer(server, ["--store", "memory"]);
try {
  const base = s.url.replace(/\/mcp$/, "");
  const sid = await initialize(s.url);
  await callTool(s.url, sid, 1, "echo", { text: "x" });
  const streamed = await callTool(s.url, sid, 2, "stream", { n: 3, delay_ms: 5 }, { progressToken: "p" });
  const first = streamed.events.find((e) => e.id)?.id;
  const res = await fetch(s.url, { headers: { accept: "text/event-stream", "mcp-session-id": sid,
    "last-event-id": first ?? "" }, signal: AbortSignal.timeout(10000) });
  await res.text();
  t.check("a resume of the streamed call's stream", res.status === 200 && first, `${res.status} ${first}`);
  const del = await fetch(s.url, { method: "DELETE", headers: { "mcp-session-id": sid } });
  t.check("the session deleted", del.status === 200 || del.status === 204, `${del.status}`);
  const text = await (await fetch(`${base}/metrics`)).text();
  const types = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]));
  for (const n of names) {
    const m = /^(.*)_(bucket|sum|count)$/.exec(n);
    const family = m && types.get(m[1]) === "histogram" ? m[1] : n;
    t.check(`${n} is exported`, types.has(family) && (family === n || types.get(family) === "histogram"),
      `families: ${[...types.keys()].join(" ")}`);
  }
  const sampled = (re) => re.test(text);
  t.check("mcp_server_operation_duration_seconds has the echo call's series",
    sampled(/^mcp_server_operation_duration_seconds_count\{mcp_method_name="tools\/call",gen_ai_tool_name="echo",[^}]*\} [1-9]/m), text.slice(0, 200));
  t.check("mcp_server_session_duration_seconds counted the deleted session",
    sampled(/^mcp_server_session_duration_seconds_count\{[^}]*\} [1-9]/m));
  t.check("tidemark_commit_to_emit_seconds counted the streamed call's live events",
    sampled(/^tidemark_commit_to_emit_seconds_count [1-9]/m));
  t.check("tidemark_resume_replayed_events counted the resume",
    sampled(/^tidemark_resume_replayed_events_count [1-9]/m));
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  await stopServer(s);
}
t.done();
