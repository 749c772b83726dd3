// install_examples.mjs - the library as a user meets it: installed into a
// prefix of our choosing (not the one cached in the build tree), exporting
// only tidemark_* symbols, every program installed and answering --version,
// and the two examples built against the installed library through
// pkg-config, started, and called.
//
//   node install_examples.mjs BUILD_DIR SOURCE_DIR VERSION
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { callTool, checker, initialize, stopServer } from "./mcp_http.mjs";
import { freePort, waitTcp } from "./multinode_env.mjs";
import { reaped } from "./reap.mjs";

const [build, src, version] = process.argv.slice(2);
if (!build || !src || !version) {
  console.error("usage: install_examples.mjs BUILD_DIR SOURCE_DIR VERSION");
  process.exit(2);
}
const t = checker();
const prefix = mkdtempSync(join(tmpdir(), "tidemark-prefix-"));
const run = (cmd, args, env = {}) =>
  spawnSync(cmd, args, { encoding: "utf8", env: { ...process.env, ...env }, timeout: 120000 });

const inst = run("cmake", ["--install", build, "--prefix", prefix]);
t.check("cmake --install into a given prefix", inst.status === 0, inst.stderr);
const libdir = ["lib", "lib64", "lib/x86_64-linux-gnu"].map((d) => join(prefix, d))
  .find((d) => existsSync(join(d, "libtidemark.so")));
t.check("the shared library is installed under the prefix", !!libdir, readdirSync(prefix).join(" "));

const nm = run("nm", ["-D", "--defined-only", join(libdir, "libtidemark.so")]);
const syms = nm.stdout.split("\n").map((l) => l.trim().split(/\s+/)[2]).filter(Boolean);
const foreign = syms.filter((s) => !s.startsWith("tidemark_") && s !== "_init" && s !== "_fini");
t.check(`nm -D: only tidemark_* exported (${syms.length} symbols)`, nm.status === 0 && syms.length > 20 &&
  foreign.length === 0, foreign.slice(0, 10).join(" "));

for (const p of ["tidemark-server", "tidemark-everything", "tidemark-client", "tidemark-check"]) {
  const v = run(join(prefix, "bin", p), ["--version"]);
  t.check(`${p} installed, --version says ${version}`, v.status === 0 && v.stdout.trim() === `${p} ${version}`,
    JSON.stringify([v.status, v.stdout, v.stderr]));
}

const pc = { PKG_CONFIG_PATH: join(libdir, "pkgconfig") };
const flags = run("pkg-config", ["--cflags", "--libs", "tidemark"], pc);
t.check("pkg-config finds tidemark", flags.status === 0, flags.stderr);
const exe = {};
for (const ex of ["hello", "atomic_ledger"]) {
  exe[ex] = join(prefix, ex);
  const cc = run("sh", ["-c", `cc -std=c11 -Wall -Wextra -Werror ${join(src, "examples", ex + ".c")} ` +
    `${flags.stdout.trim()} -o ${exe[ex]}`], pc);
  t.check(`examples/${ex}.c builds against the installed library`, cc.status === 0, cc.stderr);
}

const env = { LD_LIBRARY_PATH: libdir };
// The examples print nothing of their own: give them a port, wait for it.
async function startExample(bin, store) {
  const port = await freePort();
  const proc = reaped(spawn(bin, [String(port), store], { stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, ...env } }));
  await waitTcp(port, 15000);
  return { proc, url: `http://127.0.0.1:${port}/mcp` };
}
try {
  const h = await startExample(exe.hello, "memory");
  const sid = await initialize(h.url);
  const r = await callTool(h.url, sid, 1, "hello", { name: "example" });
  t.check("hello answers its tool", r.response?.result?.content?.[0]?.text === "hello, example",
    JSON.stringify(r.response));
  await stopServer(h);

  const db = "sqlite:" + join(prefix, "var", "ledger.db");
  let l = await startExample(exe.atomic_ledger, db);
  let s2 = await initialize(l.url);
  const a1 = await callTool(l.url, s2, "a1", "append", { entry: "x" });
  const a2 = await callTool(l.url, s2, "a1", "append", { entry: "x" }); // a retry
  const count = async (url, sid) => (await callTool(url, sid, "c" + Math.random(), "count", { entry: "x" }))
    .response?.result?.content?.[0]?.text;
  t.check("atomic_ledger: a retried append is answered from its record, one row",
    a1.response?.result && a2.response?.result && await count(l.url, s2) === "1");
  await stopServer(l, "SIGKILL");
  l = await startExample(exe.atomic_ledger, db);
  t.check("atomic_ledger: the row survives kill -9 (its folder was created by the library)",
    await count(l.url, s2) === "1");
  await stopServer(l);
} catch (e) {
  t.check("examples ran to the end", false, e.stack);
} finally {
  rmSync(prefix, { recursive: true, force: true });
}
t.done();
