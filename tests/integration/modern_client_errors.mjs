// modern_client_errors.mjs (CTest modern_client_errors): the typed errors and
// the era decisions of the modern client, against fake servers (in this file):
//   - InputRequiredResult without end: input_rounds_exceeded after 16 rounds
//     (exit 6; the server saw 1 + 16 requests, each with a new id);
//   - malformed InputRequiredResult (inputRequests not an object; neither
//     inputRequests nor requestState): malformed_input_required (exit 6);
//   - an input request the CLI cannot answer (sampling): input_request_unsupported;
//   - -32022 naming only a version nobody speaks: no_common_version (exit 6);
//   - -32022 naming only 2025-11-25, and a plain 405 to server/discover: a
//     legacy session (initialize), the call answered;
//   - --log-level: _meta logLevel on every modern request, none without it;
//   - a cacheable tools/list (ttlMs) is asked once per process;
//   - x-mcp-header: a nested properties chain mirrored (string, integer,
//     boolean); annotations under items or anyOf leave the tool out, and a
//     call of it is refused unsent; -32020 re-learns the tools; Mcp-Name in the
//     base64 sentinel form where it must be.
//   node modern_client_errors.mjs CLIENT
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { reaped } from "./reap.mjs";
import { checker } from "./mcp_http.mjs";

const [client] = process.argv.slice(2);
const t = checker();
const META = "io.modelcontextprotocol/";

// A fake server: `era` decides how server/discover is answered.
async function fake(era) {
  const seen = [];
  const server = createServer((req, res) => {
    if (req.method !== "POST") { res.writeHead(405); res.end(); return; }
    let data = "";
    req.on("data", (d) => { data += d; });
    req.on("end", () => {
      const body = JSON.parse(data);
      seen.push({ ...body, headers: req.headers });
      const send = (status, obj, headers = {}) => {
        res.writeHead(status, { "content-type": "application/json", ...headers });
        res.end(JSON.stringify({ jsonrpc: "2.0", id: body.id, ...obj }));
      };
      const ok = (result) => send(200, { result: { resultType: "complete", ...result } });
      if (body.method === "server/discover") {
        if (era === "nothing-in-common")
          return send(400, { error: { code: -32022, message: "Unsupported protocol version",
            data: { supported: ["1999-01-01"], requested: "2026-07-28" } } });
        if (era === "legacy-listed")
          return send(400, { error: { code: -32022, message: "Unsupported protocol version",
            data: { supported: ["2025-11-25"], requested: "2026-07-28" } } });
        if (era === "plain-405") { res.writeHead(405); res.end(); return undefined; }
        return ok({ supportedVersions: ["2026-07-28"], capabilities: { tools: {} } });
      }
      if (body.method === "initialize")
        return send(200, { result: { protocolVersion: "2025-11-25", capabilities: { tools: {} },
          serverInfo: { name: "fake", version: "1" } } }, { "mcp-session-id": "legacy-session-1" });
      if (!("id" in body)) { res.writeHead(202); res.end(); return undefined; }
      if (body.method === "resources/read")
        return ok({ contents: [{ uri: body.params?.uri, text: "x" }] });
      if (body.method === "tools/list" && era === "nested") {
        const nested = { type: "object", properties: { filter: { type: "object", properties: {
          region: { type: "string", "x-mcp-header": "Region" }, n: { type: "integer", "x-mcp-header": "N" },
          on: { type: "boolean", "x-mcp-header": "On" } } } } };
        const inItems = { type: "object", properties: { list: { type: "array",
          items: { type: "object", properties: { v: { type: "string", "x-mcp-header": "V" } } } } } };
        const inAnyOf = { type: "object", properties: { x: { anyOf: [{ type: "string", "x-mcp-header": "X" }] } } };
        return ok({ tools: [{ name: "nested", inputSchema: nested }, { name: "in_items", inputSchema: inItems },
          { name: "in_anyof", inputSchema: inAnyOf }] });
      }
      if (body.method === "tools/call" && era === "nested") {
        const h = req.headers;
        return ok({ content: [{ type: "text", text: `${h["mcp-param-region"]} ${h["mcp-param-n"]} ${h["mcp-param-on"]}` }] });
      }
      if (body.method === "tools/list" && era === "header-change") {
        // The first listing has no x-mcp-header; later ones do (the schema changed).
        const lists = seen.filter((m) => m.method === "tools/list").length;
        const region = lists > 1 ? { type: "string", "x-mcp-header": "Region" } : { type: "string" };
        return ok({ ttlMs: 60000, tools: [{ name: "hdr", inputSchema: { type: "object", properties: { region } } }] });
      }
      if (body.method === "tools/call" && era === "header-change") {
        if (req.headers["mcp-param-region"] !== body.params?.arguments?.region)
          return send(400, { error: { code: -32020, message: "Header mismatch: Mcp-Param-Region" } });
        return ok({ content: [{ type: "text", text: `region ${req.headers["mcp-param-region"]}` }] });
      }
      if (body.method === "tools/list")
        return ok({ ttlMs: era === "no-ttl" ? 0 : 60000, cacheScope: "private",
          tools: ["loop", "bad", "empty", "sample", "plain", "cutme"]
          .map((name) => ({ name, inputSchema: { type: "object" } })) });
      const name = body.params?.name;
      if (name === "loop")
        return ok({ resultType: "input_required", requestState: `round-${seen.length}` });
      if (name === "bad") return ok({ resultType: "input_required", inputRequests: "not an object" });
      if (name === "empty") return ok({ resultType: "input_required" });
      if (name === "cutme") { // a stream cut before the result
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(": cut\n\n");
        setTimeout(() => req.socket.destroy(), 30);
        return undefined;
      }
      if (name === "sample")
        return ok({ resultType: "input_required", inputRequests: { s: { method: "sampling/createMessage",
          params: { messages: [], maxTokens: 5 } } } });
      return ok({ content: [{ type: "text", text: `plain ${body.params?._meta?.[META + "logLevel"] ?? "-"}` }] });
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { server, seen, url: `http://127.0.0.1:${server.address().port}/mcp` };
}

function run(args, ms = 20000) {
  return new Promise((resolve) => {
    const proc = reaped(spawn(client, args, { stdio: ["ignore", "pipe", "pipe"] }));
    let out = "", err = "";
    const timer = setTimeout(() => proc.kill("SIGKILL"), ms);
    proc.stdout.on("data", (d) => { out += d; });
    proc.stderr.on("data", (d) => { err += d; });
    proc.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out, err, reason: (/"reason":\s*"([a-z_]+)"/.exec(out) ?? [])[1] ?? "" });
    });
  });
}
const brief = (r) => `exit ${r.code}; out ${r.out.slice(0, 300)}; err ${r.err.slice(0, 200)}`;

{
  const f = await fake("modern");
  let n0 = f.seen.length;
  let r = await run([f.url, "call", "loop"]);
  const loop = f.seen.slice(n0).filter((m) => m.method === "tools/call");
  t.check("endless input rounds: exit 6, input_rounds_exceeded", r.code === 6 && r.reason === "input_rounds_exceeded", brief(r));
  t.check("endless input rounds: 1 + 16 requests, every one with its own id, each echoing the last state",
    loop.length === 17 && new Set(loop.map((m) => m.id)).size === 17 &&
    loop.slice(1).every((m) => /^round-\d+$/.test(m.params?.requestState ?? "")) && loop[0].params?.requestState === undefined,
    `${loop.length} calls`);
  t.check("endless input rounds: no inputResponses without inputRequests", loop.every((m) => m.params?.inputResponses === undefined));
  r = await run([f.url, "call", "bad"]);
  t.check("inputRequests not an object: exit 6, malformed_input_required", r.code === 6 && r.reason === "malformed_input_required", brief(r));
  r = await run([f.url, "call", "empty"]);
  t.check("neither inputRequests nor requestState: malformed_input_required", r.code === 6 && r.reason === "malformed_input_required", brief(r));
  r = await run([f.url, "call", "sample"]);
  t.check("a sampling request the CLI cannot answer: exit 6, input_request_unsupported",
    r.code === 6 && r.reason === "input_request_unsupported", brief(r));

  n0 = f.seen.length;
  r = await run(["--log-level", "info", f.url, "call", "plain"]);
  const withLevel = f.seen.slice(n0);
  t.check("--log-level: the call carries _meta logLevel", r.code === 0 && r.out.trim() === "plain info", brief(r));
  t.check("--log-level: every request carries it (discover, tools/list, the call)",
    withLevel.length >= 3 && withLevel.every((m) => m.params?._meta?.[META + "logLevel"] === "info"),
    JSON.stringify(withLevel.map((m) => m.method)));
  n0 = f.seen.length;
  r = await run([f.url, "call", "plain"]);
  t.check("without --log-level: no logLevel", r.code === 0 && r.out.trim() === "plain -", brief(r));
  t.check("every modern request: protocolVersion, clientInfo, clientCapabilities in _meta, the header matching",
    f.seen.filter((m) => "id" in m).every((m) => m.params?._meta?.[META + "protocolVersion"] === "2026-07-28" &&
      m.params._meta[META + "clientInfo"]?.name === "tidemark-client" &&
      typeof m.params._meta[META + "clientCapabilities"] === "object" &&
      m.headers["mcp-protocol-version"] === "2026-07-28" && !m.headers["mcp-session-id"]));

  // Mcp-Name of values that are not plain header text: the base64 sentinel.
  const names = ["test://ünïcode", " lead", "=?base64?literal?=", "tab\there"];
  for (const uri of names) {
    n0 = f.seen.length;
    r = await run([f.url, "read", uri]);
    const h = f.seen.slice(n0).find((m) => m.method === "resources/read")?.headers["mcp-name"] ?? "";
    const m = /^=\?base64\?(.*)\?=$/.exec(h);
    t.check(`Mcp-Name of ${JSON.stringify(uri)} in the base64 sentinel form`,
      r.code === 0 && m && Buffer.from(m[1], "base64").toString("utf8") === uri, `${brief(r)} header ${h}`);
  }
  n0 = f.seen.length;
  r = await run([f.url, "read", "test://plain-ascii?x=1 y"]);
  t.check("Mcp-Name of plain ASCII (inner space included) as it is",
    f.seen.slice(n0).find((m) => m.method === "resources/read")?.headers["mcp-name"] === "test://plain-ascii?x=1 y", brief(r));

  // tools/list is cacheable (ttlMs 60000): a cut key-less call needs the
  // tools twice (its headers, then whether the tool is safe to re-issue).
  n0 = f.seen.length;
  r = await run(["--no-idempotency-key", f.url, "call", "cutme"]);
  t.check("a cut key-less call of an unsafe tool: exit 4, continuity_unprovable",
    r.code === 4 && r.reason === "continuity_unprovable", brief(r));
  t.check("tools/list with ttlMs 60000 asked once (the second answer from the cache)",
    f.seen.slice(n0).filter((m) => m.method === "tools/list").length === 1,
    f.seen.slice(n0).map((m) => m.method).join(","));
  f.server.close();
}

{
  const f = await fake("no-ttl");
  const r = await run(["--no-idempotency-key", f.url, "call", "cutme"]);
  t.check("no-ttl: the same cut call", r.code === 4 && r.reason === "continuity_unprovable", brief(r));
  t.check("tools/list with ttlMs 0 asked each time it is needed (twice)",
    f.seen.filter((m) => m.method === "tools/list").length === 2, f.seen.map((m) => m.method).join(","));
  f.server.close();
}

{
  const f = await fake("nothing-in-common");
  const r = await run([f.url, "tools"]);
  t.check("-32022 naming only versions the client does not speak: exit 6, no_common_version",
    r.code === 6 && r.reason === "no_common_version" && r.out.includes("1999-01-01"), brief(r));
  t.check("nothing in common: no initialize tried", !f.seen.some((m) => m.method === "initialize"));
  f.server.close();
}

{
  const f = await fake("header-change");
  const r = await run([f.url, "call", "hdr", "region=eu-west"]);
  const methods = f.seen.map((m) => m.method);
  t.check("HeaderMismatch (-32020): tools/list again, then the call again with the header, answered",
    r.code === 0 && r.out.trim() === "region eu-west" &&
    methods.join(",") === "server/discover,tools/list,tools/call,tools/list,tools/call", brief(r) + " " + methods.join(","));
  const calls = f.seen.filter((m) => m.method === "tools/call");
  t.check("HeaderMismatch: the retry has a new id", calls.length === 2 && calls[0].id !== calls[1].id);
  f.server.close();
}

{
  const f = await fake("nested");
  let r = await run(["--json", f.url, "tools"]);
  const names = (JSON.parse(r.out || "[]")).map((x) => x.name);
  t.check("x-mcp-header under items or anyOf: the tool is left out of tools; a nested properties chain is kept",
    r.code === 0 && names.join(",") === "nested", brief(r));
  r = await run(["--args", '{"filter":{"region":"eu-1","n":-7,"on":false}}', f.url, "call", "nested"]);
  t.check("headers from a nested properties chain: string, integer, boolean", r.code === 0 && r.out.trim() === "eu-1 -7 false",
    brief(r));
  r = await run([f.url, "call", "in_items"]);
  t.check("a call of a tool left out: exit 6, invalid_tool_definition, never sent",
    r.code === 6 && r.reason === "invalid_tool_definition" &&
    !f.seen.some((m) => m.method === "tools/call" && m.params?.name === "in_items"), brief(r));
  f.server.close();
}

for (const era of ["legacy-listed", "plain-405"]) {
  const f = await fake(era);
  const r = await run([f.url, "call", "plain"]);
  const methods = f.seen.map((m) => m.method);
  t.check(`${era}: discover, then a legacy session (initialize, initialized) and the call`,
    r.code === 0 && r.out.trim() === "plain -" && methods[0] === "server/discover" && methods[1] === "initialize" &&
    methods.includes("notifications/initialized"), brief(r) + " " + methods.join(","));
  const call = f.seen.find((m) => m.method === "tools/call");
  t.check(`${era}: the legacy call carries the session and no modern _meta`,
    call?.headers["mcp-session-id"] === "legacy-session-1" && !call?.params?._meta?.[META + "protocolVersion"] &&
    call?.headers["mcp-protocol-version"] === "2025-11-25", JSON.stringify(call?.headers));
  f.server.close();
}

t.done();
