// auth_server_sdk.mjs URL ISSUER TOKEN - run by auth_server.mjs (sdk) with
// NODE_EXTRA_CA_CERTS naming the test's CA: the official TypeScript SDK's
// clients connect to Tidemark over HTTPS with a bearer token and call a tool.
//   1.32.2: the client-credentials provider, which finds the resource
//           metadata and the issuer from the 401 alone and gets its token;
//   2.4.0:  a bearer token the test got (Authorization on every request).
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { checker } from "./mcp_http.mjs";
import { SECRET } from "./authz_server.mjs";

const [url, issuer, token] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const peers = join(here, "..", "..", "peers");
const sdk = join(peers, "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm");
const t = checker();

try {
  const { Client } = await import(join(sdk, "client", "index.js"));
  const { StreamableHTTPClientTransport } = await import(join(sdk, "client", "streamableHttp.js"));
  const { ClientCredentialsProvider } = await import(join(sdk, "client", "auth-extensions.js"));
  const provider = new ClientCredentialsProvider({ clientId: "rs", clientSecret: SECRET,
    expectedIssuer: issuer, scope: "mcp:tools" });
  const client = new Client({ name: "auth-tls-v1", version: "0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
  const res = await client.callTool({ name: "echo", arguments: { text: "over tls, v1" } });
  t.check("SDK 1.32.2 over TLS: 401, metadata, client-credentials token, call",
    res.content?.[0]?.text === "over tls, v1", JSON.stringify(res));
  await client.close();
} catch (e) {
  t.check("SDK 1.32.2 over TLS", false, e.stack);
}

try {
  const require = createRequire(join(peers, "package.json"));
  const { Client, StreamableHTTPClientTransport } = await import(require.resolve("@modelcontextprotocol/client"));
  const client = new Client({ name: "auth-tls-v2", version: "0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  const res = await client.callTool({ name: "echo", arguments: { text: "over tls, v2" } });
  t.check("SDK 2.4.0 over TLS with a bearer token: call", res.content?.[0]?.text === "over tls, v2",
    JSON.stringify(res));
  await client.close();
} catch (e) {
  t.check("SDK 2.4.0 over TLS", false, e.stack);
}
t.done();
