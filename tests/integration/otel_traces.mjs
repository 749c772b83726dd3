// otel_traces.mjs (CTest otel_traces): OpenTelemetry traces across client,
// gateway and server, exported as OTLP/HTTP to a receiver in this
// process (docs/design.md "Tracing"):
//   - the official TypeScript SDK client, inside a span of the
//     OpenTelemetry JS SDK (@opentelemetry/sdk-trace-node) whose
//     traceparent it carries in params._meta, calls echo through
//     tidemark-gateway to a child tidemark-server --stdio: one trace, the
//     gateway's SERVER span under the TS span, its CLIENT span under that,
//     the child's SERVER span under the CLIENT span, named and attributed as
//     the MCP semantic conventions say;
//   - tidemark-client's own CLIENT span heads a trace the same way;
//   - a traceparent HTTP header is the parent when _meta has none;
//   - OTEL_TRACES_SAMPLER=always_off: calls succeed, no span is exported
//     (the processes exit, which flushes their queues, before it is judged);
//   - an unreachable collector: calls succeed, the spans are counted dropped;
//   - both encodings: http/protobuf (the default; decoded here with the
//     official opentelemetry-proto definitions) and http/json; grpc asked
//     for: a warning at start, and the spans arrive as http/protobuf.
//   - a server's request to the client (elicitation) is a CLIENT span under
//     the call's SERVER span, and the client's answer a SERVER span under
//     that; initialize and notifications/initialized are the client's
//     CLIENT spans with the server's SERVER spans under them;
//   node otel_traces.mjs GATEWAY SERVER CLIENT EVERYTHING
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";
import { callTool, checker, cliBrief, initialize, spawnCli, startServer, stopServer, until }
  from "./mcp_http.mjs";
import { peersDir, sdkImport } from "./sdk_resolve.mjs";
import { freePort } from "./multinode_env.mjs";

const [gateway, server, client, everything] = process.argv.slice(2);
const t = checker();
const req = createRequire(join(peersDir, "package.json"));
const spans = []; // every span received: {service, ...span}
let posts = 0;
const decodeErrors = [];

// OTLP protobuf decoded with the official definitions (opentelemetry-proto,
// as generated into @opentelemetry/otlp-transformer), put in the shape of
// OTLP JSON: ids lowercase hex, 64-bit numbers decimal strings.
const pbRoot = req("@opentelemetry/otlp-transformer/build/src/generated/root.js");
const pbRequest = pbRoot.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
function pbAsJson(buf) {
  return pbRequest.toObject(pbRequest.decode(buf), { longs: String, enums: Number, bytes: (b) => b,
    defaults: false, oneofs: false });
}
const hex = (b) => (b && b.length ? Buffer.from(b).toString("hex") : undefined);
function pbSpan(s) {
  const out = { ...s, traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId) };
  if (!out.parentSpanId) delete out.parentSpanId;
  return out;
}

// The OTLP/HTTP receiver: POST /v1/traces as application/json or
// application/x-protobuf; spans kept with their resource's service.name and
// the encoding they came in (wire: "json" or "protobuf").
function receiver() {
  return new Promise((resolve) => {
    const srv = createServer((rq, rs) => {
      const chunks = [];
      rq.on("data", (d) => chunks.push(d));
      rq.on("end", () => {
        posts++;
        const type = rq.headers["content-type"] ?? "";
        const wire = type.startsWith("application/json") ? "json"
          : type.startsWith("application/x-protobuf") ? "protobuf" : null;
        const ok = rq.method === "POST" && rq.url === "/v1/traces" && wire !== null;
        try {
          const body = Buffer.concat(chunks);
          const msg = wire === "json" ? JSON.parse(body.toString()) : pbAsJson(body);
          for (const rsp of msg.resourceSpans ?? []) {
            const svc = rsp.resource?.attributes?.find((a) => a.key === "service.name")?.value?.stringValue;
            for (const ss of rsp.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) spans.push({ service: svc, wire, ...(wire === "json" ? s : pbSpan(s)) });
            }
          }
        } catch (e) { /* counted below: nothing kept */ decodeErrors.push(String(e)); }
        rs.writeHead(ok ? 200 : 400, { "content-type": type || "application/json" });
        rs.end(wire === "protobuf" ? "" : "{}");
      });
    });
    srv.listen(0, "127.0.0.1", () => resolve(srv));
  });
}

const attr = (s, k) => {
  const v = s?.attributes?.find((a) => a.key === k)?.value;
  return v?.stringValue ?? v?.intValue;
};
const find = (pred) => spans.find(pred);
const brief = () => JSON.stringify(spans.map((s) =>
  [s.service, s.name, s.kind, s.traceId, s.spanId, s.parentSpanId ?? ""]));

// The TS SDK client inside a JS SDK span: returns that span's context.
async function tsClientCall(url) {
  const { NodeTracerProvider } = req("@opentelemetry/sdk-trace-node");
  const { InMemorySpanExporter, SimpleSpanProcessor } = req("@opentelemetry/sdk-trace-base");
  const { W3CTraceContextPropagator } = req("@opentelemetry/core");
  const api = req("@opentelemetry/api");
  const mem = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(mem)] });
  const tracer = provider.getTracer("otel_traces");
  const { Client } = await sdkImport("client/index.js");
  const { StreamableHTTPClientTransport } = await sdkImport("client/streamableHttp.js");
  const c = new Client({ name: "otel-ts", version: "1.0.0" }, { capabilities: {} });
  await c.connect(new StreamableHTTPClientTransport(new URL(url)));
  const span = tracer.startSpan("ts-root", { kind: api.SpanKind.CLIENT });
  const meta = {};
  new W3CTraceContextPropagator().inject(api.trace.setSpan(api.ROOT_CONTEXT, span), meta,
    api.defaultTextMapSetter);
  const res = await c.callTool({ name: "echo", arguments: { text: "traced" }, _meta: meta });
  span.end();
  await c.close();
  return { ctx: span.spanContext(), meta, res };
}

// No OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf, the default.
const OTEL = (port, extra = {}) => ({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
  OTEL_BSP_SCHEDULE_DELAY: "50", ...extra });

async function throughGateway(port) {
  // The gateway exports protobuf (the default), its child JSON.
  const child = `env OTEL_SERVICE_NAME=tm-child OTEL_EXPORTER_OTLP_PROTOCOL=http/json ${server} --stdio --store memory`;
  const gw = await startServer(gateway, ["--store", "memory", "--stdio", child],
    { env: OTEL(port, { OTEL_SERVICE_NAME: "tm-gateway" }), ms: 30000 });
  try {
    const { ctx, meta, res } = await tsClientCall(gw.url);
    t.check("the TS client's call through the gateway succeeds",
      res?.content?.[0]?.text === "traced", JSON.stringify(res));
    t.check("the JS SDK put a sampled traceparent in _meta",
      meta.traceparent === `00-${ctx.traceId}-${ctx.spanId}-01`, JSON.stringify(meta));
    const tid = ctx.traceId;
    const gs = await until("the gateway's SERVER span", async () => find((s) => s.service === "tm-gateway" &&
      s.kind === 2 && s.traceId === tid && s.name === "tools/call echo"), 15000).catch(() => null);
    t.check("gateway SERVER span 'tools/call echo' in the TS trace, child of the TS span",
      gs && gs.parentSpanId === ctx.spanId, brief());
    t.check("its attributes: mcp.method.name, gen_ai.tool.name, mcp.session.id, jsonrpc.request.id",
      gs && attr(gs, "mcp.method.name") === "tools/call" && attr(gs, "gen_ai.tool.name") === "echo" &&
        /^[0-9a-f]+$/.test(attr(gs, "mcp.session.id") ?? "") && attr(gs, "jsonrpc.request.id") !== undefined &&
        attr(gs, "mcp.protocol.version") !== undefined, JSON.stringify(gs?.attributes));
    const gc = await until("the gateway's CLIENT span", async () => find((s) => s.service === "tm-gateway" &&
      s.kind === 3 && s.traceId === tid), 15000).catch(() => null);
    t.check("gateway CLIENT span to the child, child of its SERVER span",
      gc && gs && gc.parentSpanId === gs.spanId && gc.name === "tools/call echo", brief());
    const cs = await until("the child's SERVER span", async () => find((s) => s.service === "tm-child" &&
      s.kind === 2 && s.traceId === tid), 15000).catch(() => null);
    t.check("the child's SERVER span, child of the gateway's CLIENT span",
      cs && gc && cs.parentSpanId === gc.spanId && cs.name === "tools/call echo", brief());
    t.check("OTLP JSON (the child): ids hex, times decimal strings",
      cs && cs.wire === "json" && /^[0-9a-f]{32}$/.test(cs.traceId) && /^[0-9a-f]{16}$/.test(cs.spanId) &&
        /^\d+$/.test(cs.startTimeUnixNano) && BigInt(cs.endTimeUnixNano) >= BigInt(cs.startTimeUnixNano),
      JSON.stringify(cs));
    t.check("OTLP protobuf (the gateway, by default): decoded with the official definitions, times in order",
      gs && gc && gs.wire === "protobuf" && gc.wire === "protobuf" && gs.kind === 2 && gc.kind === 3 &&
        /^[0-9a-f]{32}$/.test(gs.traceId) && BigInt(gs.startTimeUnixNano) > 1600000000000000000n &&
        BigInt(gs.endTimeUnixNano) >= BigInt(gs.startTimeUnixNano) &&
        !gs.status?.code && decodeErrors.length === 0,
      JSON.stringify(gs) + decodeErrors.join("; "));
    // tidemark-client's own CLIENT span heads a trace through the gateway.
    const r = await spawnCli(client, ["--json", gw.url, "call", "echo", "text=cli"],
      { env: OTEL(port, { OTEL_SERVICE_NAME: "tm-cli" }) }).done;
    t.check("tidemark-client's call succeeds", r.code === 0 && r.json?.content?.[0]?.text === "cli", cliBrief(r));
    const cc = find((s) => s.service === "tm-cli" && s.kind === 3 && s.name === "tools/call echo");
    t.check("tidemark-client exported its CLIENT span at exit, a root",
      cc && !cc.parentSpanId && attr(cc, "gen_ai.tool.name") === "echo", brief());
    const gs2 = cc && await until("the gateway span under the CLI's", async () => find((s) =>
      s.service === "tm-gateway" && s.kind === 2 && s.traceId === cc.traceId), 15000).catch(() => null);
    const cs2 = cc && await until("the child span under the CLI's", async () => find((s) =>
      s.service === "tm-child" && s.kind === 2 && s.traceId === cc.traceId), 15000).catch(() => null);
    t.check("the gateway's and the child's spans are in the CLI's trace",
      gs2 && cs2 && gs2.parentSpanId === cc.spanId, brief());
  } finally {
    await stopServer(gw);
  }
}

// tidemark-client calls test_elicitation of tidemark-everything: the
// server's elicitation/create is a CLIENT span under the call's SERVER
// span, which is under the client's CLIENT span; initialize has a span.
async function serverAsks(port) {
  const s = await startServer(everything, ["--store", "memory"], { env: OTEL(port, { OTEL_SERVICE_NAME: "tm-ev" }) });
  try {
    const r = await spawnCli(client, ["--protocol", "legacy", "--elicit", "accept", "--json", s.url, "call", "test_elicitation"],
      { env: OTEL(port, { OTEL_SERVICE_NAME: "tm-cli2" }) }).done;
    t.check("the elicitation call succeeds", r.code === 0 && /accept/.test(JSON.stringify(r.json)), cliBrief(r));
    const cc = find((x) => x.service === "tm-cli2" && x.name === "tools/call test_elicitation");
    const sc = cc && await until("the call's SERVER span", async () => find((x) => x.service === "tm-ev" &&
      x.kind === 2 && x.parentSpanId === cc.spanId), 15000).catch(() => null);
    const ask = sc && await until("the elicitation's CLIENT span", async () => find((x) => x.service === "tm-ev" &&
      x.kind === 3 && x.parentSpanId === sc.spanId), 15000).catch(() => null);
    t.check("the server's elicitation/create: a CLIENT span under the call's SERVER span",
      ask && ask.name === "elicitation/create" && ask.traceId === cc.traceId && !ask.status?.code, brief());
    const init = await until("initialize's span", async () => find((x) => x.service === "tm-ev" &&
      x.name === "initialize" && x.kind === 2), 15000).catch(() => null);
    t.check("initialize: a SERVER span with the session it made",
      init && /^[0-9a-f]+$/.test(attr(init, "mcp.session.id") ?? ""), brief());
    // The client library's side of the same exchanges (the CLI has exited:
    // its spans are all in).
    const ci = find((x) => x.service === "tm-cli2" && x.name === "initialize" && x.kind === 3);
    t.check("the client's initialize: a CLIENT span, the server's initialize its child, one session",
      ci && init && init.parentSpanId === ci.spanId && init.traceId === ci.traceId &&
        attr(ci, "mcp.session.id") === attr(init, "mcp.session.id") &&
        attr(ci, "mcp.protocol.version") === "2025-11-25", brief());
    const cn = find((x) => x.service === "tm-cli2" && x.name === "notifications/initialized" && x.kind === 3);
    const sn = cn && await until("the server's notification span", async () => find((x) =>
      x.service === "tm-ev" && x.name === "notifications/initialized" && x.kind === 2), 15000).catch(() => null);
    t.check("notifications/initialized: the client's CLIENT span, the server's SERVER span its child",
      cn && sn && sn.parentSpanId === cn.spanId && attr(sn, "jsonrpc.request.id") === undefined &&
        attr(sn, "mcp.session.id") === attr(init, "mcp.session.id"), brief());
    const ans = ask && find((x) => x.service === "tm-cli2" && x.name === "elicitation/create" && x.kind === 2);
    t.check("the client answering elicitation/create: a SERVER span under the server's CLIENT span",
      ans && ans.parentSpanId === ask.spanId && ans.traceId === cc.traceId && !ans.status?.code &&
        attr(ans, "jsonrpc.request.id") !== undefined, brief());
  } finally {
    await stopServer(s);
  }
}

// A traceparent header is the parent when _meta has none.
async function headerParent(port) {
  const s = await startServer(server, ["--store", "memory"],
    { env: OTEL(port, { OTEL_SERVICE_NAME: "tm-hdr", OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" }) });
  try {
    const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const sid = await initialize(s.url);
    const r = await callTool(s.url, sid, 7, "echo", { text: "h" }, {}, { headers: { traceparent: tp } });
    t.check("a call with a traceparent header succeeds", r.response?.result?.content?.[0]?.text === "h",
      JSON.stringify(r.response));
    const sp = await until("the span under the header's context", async () => find((x) =>
      x.service === "tm-hdr" && x.traceId === "4bf92f3577b34da6a3ce929d0e0e4736"), 15000).catch(() => null);
    t.check("the HTTP traceparent header is the SERVER span's parent",
      sp && sp.parentSpanId === "00f067aa0ba902b7" && attr(sp, "jsonrpc.request.id") === "7", brief());
    // A name that needs escaping in OTLP JSON (quote, backslash, newline, a
    // control byte, non-ASCII): the span arrives with it intact.
    const odd = 'no"such\\tool\n\u0001é';
    await callTool(s.url, sid, 9, odd, {}, { traceparent: "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" });
    const os = await until("the escaped span", async () => find((x) =>
      x.traceId === "5bf92f3577b34da6a3ce929d0e0e4736"), 15000).catch(() => null);
    t.check("a tool name that needs escaping survives OTLP JSON, and its error is typed",
      os && os.name === `tools/call ${odd}` && attr(os, "gen_ai.tool.name") === odd &&
        os.status?.code === 2 && attr(os, "error.type") !== undefined, JSON.stringify(os));
    await durableSpans(s.url, sid);
  } finally {
    await stopServer(s);
  }
}

// One call from tidemark-client to a tidemark-server under sampler; both
// processes have exited (their queues flushed at exit) when it returns.
async function sampledRun(port, name, sampler) {
  const env = OTEL(port, { OTEL_SERVICE_NAME: name, OTEL_TRACES_SAMPLER: sampler,
    OTEL_BSP_SCHEDULE_DELAY: "60000" }); // only the flush at exit exports
  const s = await startServer(server, ["--store", "memory"], { env });
  const r = await spawnCli(client, ["--json", s.url, "call", "echo", "text=" + name], { env }).done;
  t.check(`${sampler}: the call succeeds`, r.code === 0 && r.json?.content?.[0]?.text === name, cliBrief(r));
  const exited = new Promise((res) => s.proc.once("exit", res));
  await stopServer(s);
  await exited;
  return spans.filter((x) => x.service === name);
}

// A call with a stream: the commit of its record is a span under its
// SERVER span; the same request again is answered from its record (a span
// saying so); a GET resuming its stream is a tidemark.resume span.
async function durableSpans(url, sid) {
  const tid = "0af7651916cd43dd8448eb211c80319c";
  const tp = (span) => `00-${tid}-${span}-01`;
  const first = await callTool(url, sid, 8, "stream", { n: 2, delay_ms: 1 }, { progressToken: "p", traceparent: tp("b7ad6b7169203331") });
  const ids = first.events.map((e) => e.id).filter(Boolean);
  t.check("a streamed call's answer has event ids", first.response?.result && ids.length > 0, JSON.stringify(first.events));
  const call = await until("the streamed call's span", async () => find((x) => x.traceId === tid &&
    x.parentSpanId === "b7ad6b7169203331" && x.kind === 2), 15000).catch(() => null);
  const commit = call && await until("its commit span", async () => find((x) => x.traceId === tid &&
    x.name === "tidemark.store.commit" && x.parentSpanId === call.spanId), 15000).catch(() => null);
  t.check("the commit that made the answer durable: an INTERNAL span under the call's",
    commit && commit.kind === 1 && attr(commit, "tidemark.store.durability") === "power" &&
      Number(attr(commit, "tidemark.store.seq")) >= 1 &&
      Number(attr(commit, "tidemark.store.batch_size")) >= 1, brief());
  const again = await callTool(url, sid, 8, "stream", { n: 2, delay_ms: 1 }, { progressToken: "p", traceparent: tp("00000000000000a1") });
  t.check("the same request again: the recorded answer", JSON.stringify(again.response?.result) ===
    JSON.stringify(first.response?.result), JSON.stringify(again.response));
  const rec = await until("the record span", async () => find((x) => x.traceId === tid &&
    x.parentSpanId === "00000000000000a1"), 15000).catch(() => null);
  t.check("a request answered from its record: a span marked tidemark.record=answered",
    rec && attr(rec, "tidemark.record") === "answered" && rec.name === "tools/call stream", brief());
  const res = await fetch(url, { headers: { accept: "text/event-stream", "mcp-session-id": sid,
    "last-event-id": ids[0], traceparent: tp("00000000000000b2") }, signal: AbortSignal.timeout(10000) });
  await res.text().catch(() => "");
  const rs = await until("the resume span", async () => find((x) => x.traceId === tid &&
    x.parentSpanId === "00000000000000b2"), 15000).catch(() => null);
  t.check("a resume: a tidemark.resume SERVER span with the events it replays",
    res.status === 200 && rs && rs.name === "tidemark.resume" && Number(attr(rs, "tidemark.resume.replayed")) >= 0,
    `${res.status} ${brief()}`);
}

// Sampling off: nothing exported; the same run sampled exports both spans
// (so the flush at exit is what the "off" run is judged after).
async function samplingOff(port) {
  const on = await sampledRun(port, "tm-on", "always_on");
  t.check("always_on: the client's and the server's spans exported by exit",
    on.some((x) => x.kind === 3) && on.some((x) => x.kind === 2), brief());
  const off = await sampledRun(port, "tm-off", "always_off");
  t.check("always_off: no span exported by the server or the client", off.length === 0, brief());
}

// A protocol that is not spoken (grpc): warned about, protobuf sent over HTTP.
async function unknownProtocol(port) {
  const s = await startServer(server, ["--store", "memory"],
    { env: OTEL(port, { OTEL_SERVICE_NAME: "tm-grpc", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }) });
  try {
    const warned = await until("the warning", async () =>
      /OTLP protocol grpc is not supported; traces are sent as http\/protobuf/.test(s.log), 5000)
      .catch(() => false);
    t.check("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: a clear warning at start", warned, s.log);
    const sid = await initialize(s.url);
    await callTool(s.url, sid, 3, "echo", { text: "pb" });
    const sp = await until("a span of tm-grpc", async () => find((x) => x.service === "tm-grpc" &&
      x.name === "tools/call echo"), 15000).catch(() => null);
    t.check("grpc asked: the spans arrive as http/protobuf", sp?.wire === "protobuf", brief());
  } finally {
    await stopServer(s);
  }
}

// A collector that refuses connections: calls unaffected, drops counted.
async function unreachable() {
  const dead = await freePort(); // nothing listens there
  const env = OTEL(dead, { OTEL_SERVICE_NAME: "tm-dead" });
  const s = await startServer(server, ["--store", "memory"], { env });
  try {
    for (let i = 0; i < 3; i++) {
      const r = await spawnCli(client, ["--json", s.url, "call", "echo", `text=d${i}`], { env, ms: 20000 }).done;
      t.check(`unreachable collector: call ${i} succeeds`, r.code === 0 && r.json?.content?.[0]?.text === `d${i}`,
        cliBrief(r));
    }
    const base = s.url.replace(/\/mcp$/, "");
    const dropped = await until("spans counted dropped", async () => {
      const m = await (await fetch(`${base}/metrics`)).text();
      const v = Number(/^tidemark_otel_spans_dropped_total (\d+)$/m.exec(m)?.[1] ?? 0);
      return v >= 3 ? v : 0;
    }, 15000).catch(() => 0);
    t.check("unreachable collector: the server's spans are counted dropped", dropped >= 3, `${dropped}`);
  } finally {
    await stopServer(s);
  }
}

const rcv = await receiver();
const port = rcv.address().port;
try {
  await throughGateway(port);
  await headerParent(port);
  await serverAsks(port);
  await samplingOff(port);
  await unknownProtocol(port);
  await unreachable();
  t.check("the receiver was posted to", posts > 0, `${posts}`);
} catch (e) {
  t.check("no exception", false, e.stack);
} finally {
  rcv.close();
}
if (process.env.OTEL_TRACES_DUMP) console.log(brief());
t.done();
