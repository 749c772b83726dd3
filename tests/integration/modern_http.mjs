// modern_http.mjs - requests on the 2026-07-28 ("modern") wire for the tests:
// no session, version, client info and capabilities in every request's
// _meta, the MCP-Protocol-Version, Mcp-Method and Mcp-Name headers.
import { JSONH, messages } from "./mcp_http.mjs";

export const MODERN = "2026-07-28";
export const KEY = "dev.tidemark/idempotency-key";

// The _meta every modern request carries, plus extra (say an idempotency key).
export function meta(extra = {}, capabilities = { elicitation: {} }) {
  return {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": { name: "tidemark-test", version: "1" },
    "io.modelcontextprotocol/clientCapabilities": capabilities,
    ...extra,
  };
}

// The standard headers of a request: Mcp-Name is params.name or params.uri.
export function headersFor(method, params = {}) {
  const h = { ...JSONH, "mcp-protocol-version": MODERN, "mcp-method": method };
  const name = params.name ?? params.uri;
  if (name !== undefined && ["tools/call", "resources/read", "prompts/get"].includes(method))
    h["mcp-name"] = /^[\x20-\x7e]*$/.test(name) && name.trim() === name
      ? name : `=?base64?${Buffer.from(name, "utf8").toString("base64")}?=`;
  return h;
}

// POST one modern request; opts.headers override or add headers, opts.meta
// adds to _meta, opts.signal aborts. Resolves the fetch Response.
export function modernPost(url, id, method, params = {}, opts = {}) {
  const p = { ...params, _meta: { ...meta(opts.meta ?? {}, opts.capabilities), ...(params._meta ?? {}) } };
  const body = { jsonrpc: "2.0", id, method, params: p };
  return fetch(url, { method: "POST", headers: { ...headersFor(method, p), ...(opts.headers ?? {}) },
    body: JSON.stringify(body), signal: opts.signal });
}

// A modern request read to its end: {status, msgs, events, response}.
export async function modern(url, id, method, params = {}, opts = {}) {
  const m = await messages(await modernPost(url, id, method, params, opts));
  return { ...m, response: m.msgs.find((x) => x.id !== undefined && (x.result || x.error)) };
}

export const modernCall = (url, id, name, args, opts = {}) =>
  modern(url, id, "tools/call", { name, arguments: args }, opts);

// How many ledger rows carry entry (ledger_read, modern).
export async function modernLedgerCount(url, entry) {
  const r = await modernCall(url, "read-" + Math.random(), "ledger_read", { entry });
  return r.response?.result?.structuredContent?.count ?? null;
}
