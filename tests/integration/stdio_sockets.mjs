// stdio_sockets.mjs - a `tidemark-server --stdio` process (SQLite store in a
// temporary folder) holds no TCP socket while it serves: checked after
// initialize, while a 2025 call streams progress, while a 2026-07-28 call
// streams progress, and after both answered (the calls must complete).
//
// How the sockets are found, without ss or lsof: every descriptor of the
// process (/proc/PID/fd) that is a socket reads "socket:[INODE]"; the
// kernel's TCP tables as the process's network namespace sees them
// (/proc/PID/net/tcp and tcp6, column 10 "inode") list the inode of every
// TCP socket, listening or connected. A descriptor whose inode is in a TCP
// table is a TCP socket of the process. Each look also counts the sockets
// at all, and the test first proves the method on a socket it knows (the
// test's own listening TCP server, in this Node process's tables), so an
// empty answer cannot come from a method that finds nothing.
//
// Without /proc (not Linux) the test is skipped (exit 77).
//
//   node stdio_sockets.mjs TIDEMARK_SERVER VAR_DIR
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { checker, until } from "./mcp_http.mjs";

const [bin, varDir] = process.argv.slice(2);
if (!bin || !varDir) {
  console.error("usage: stdio_sockets.mjs TIDEMARK_SERVER VAR_DIR");
  process.exit(2);
}
if (!existsSync("/proc/self/net/tcp") || !existsSync("/proc/self/fd")) {
  console.log("SKIP: no /proc/PID/fd and /proc/PID/net/tcp here");
  process.exit(77);
}
const t = checker();

// The inodes of the TCP sockets in pid's network namespace.
function tcpInodes(pid) {
  const inodes = new Set();
  for (const f of ["tcp", "tcp6"]) {
    let txt = "";
    try { txt = readFileSync(`/proc/${pid}/net/${f}`, "utf8"); } catch { continue; }
    for (const line of txt.split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 9 && cols[9] !== "0") inodes.add(cols[9]);
    }
  }
  return inodes;
}

// pid's sockets: every socket descriptor, and those of them that are TCP.
function sockets(pid) {
  const all = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let l = "";
    try { l = readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { continue; } // closed meanwhile
    const m = /^socket:\[(\d+)\]$/.exec(l);
    if (m) all.push({ fd, inode: m[1] });
  }
  const tcp = tcpInodes(pid);
  return { all, tcp: all.filter((s) => tcp.has(s.inode)) };
}

// The method finds a TCP socket that is there: this process's own listener.
const probe = createServer();
await new Promise((res) => probe.listen(0, "127.0.0.1", res));
const own = sockets(process.pid);
t.check("the method finds a known TCP socket (this test's own listener)", own.tcp.length >= 1,
  JSON.stringify(own));
probe.close();

const dir = mkdtempSync(join(varDir, "stdio-sockets-"));
const proc = spawn(bin, ["--stdio", "--log-level", "warn", "--store", "sqlite:" + join(dir, "t.db")],
  { stdio: ["pipe", "pipe", "pipe"] });
const msgs = [];
let buf = "", err = "", exited = null;
proc.stdout.on("data", (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    try { msgs.push(JSON.parse(line)); } catch { msgs.push({ junk: line }); }
  }
});
proc.stderr.on("data", (d) => { err += d; });
proc.on("exit", (code, sig) => { exited = { code, sig }; });
const send = (o) => proc.stdin.write(JSON.stringify(o) + "\n");
const wait = (pred, what, ms = 15000) => until(what, () => msgs.find(pred), ms);
const answer = (id, what, ms) => wait((m) => m.id === id && (m.result || m.error), what, ms);

function noTcp(when) {
  const s = sockets(proc.pid);
  t.check(`${when}: no TCP socket (${s.all.length} socket(s) in all)`, s.tcp.length === 0,
    JSON.stringify(s.tcp));
}

try {
  send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25",
    capabilities: {}, clientInfo: { name: "sockets", version: "1" } } });
  const init = await answer(1, "initialize");
  t.check("initialize answered", init?.result?.protocolVersion === "2025-11-25", JSON.stringify(init));
  send({ jsonrpc: "2.0", method: "notifications/initialized" });
  noTcp("after initialize");

  // A 2025 call streaming 6 progress events, 200 ms apart: looked at while
  // it streams (its first progress is out, its result is not).
  send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "stream",
    arguments: { n: 6, delay_ms: 200 }, _meta: { progressToken: "p2" } } });
  await wait((m) => m.method === "notifications/progress" && m.params?.progressToken === "p2",
    "2025 progress");
  t.check("2025 call: still streaming when looked at", !msgs.some((m) => m.id === 2));
  noTcp("while a 2025 call streams");
  const r2 = await answer(2, "2025 call's result");
  t.check("2025 call: answered after its progress", !!r2?.result && !r2.result.isError,
    JSON.stringify(r2));

  // The same in the 2026-07-28 era (no session; a stream of its own).
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {}, progressToken: "p3" };
  send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "stream",
    arguments: { n: 6, delay_ms: 200 }, _meta: meta } });
  await wait((m) => m.method === "notifications/progress" && m.params?.progressToken === "p3",
    "2026-07-28 progress");
  noTcp("while a 2026-07-28 call streams");
  const r3 = await answer(3, "2026-07-28 call's result");
  t.check("2026-07-28 call: answered", !!r3?.result && !r3.result.isError, JSON.stringify(r3));
  noTcp("after both calls");
  t.check("stdout held JSON-RPC lines only", !msgs.some((m) => m.junk !== undefined));
} catch (e) {
  t.check("ran to the end", false, e?.stack ?? String(e));
}
proc.stdin.end();
await until("exit at end of input", () => exited, 15000).catch(() => null);
if (!exited) proc.kill("SIGKILL");
t.check("end of input: exits 0", exited?.code === 0, JSON.stringify(exited) + err.slice(-300));
rmSync(dir, { recursive: true, force: true });
t.done();
