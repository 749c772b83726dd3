// harness_test.mjs - the test harness's own promises, on which every
// multi-process test leans:
//
//   node harness_test.mjs watchdog   a run stuck in a synchronous child
//       process (its event loop blocked, so no setTimeout fires) is failed by
//       watchdog.mjs at its deadline: a FAIL line naming the step, the main
//       thread's kernel wait and the stuck child; the run and every
//       descendant killed, well before CTest's timeout
//   node harness_test.mjs ports      ports.mjs hands out ports below the
//       kernel's ephemeral range (where `--listen :0` and outgoing
//       connections never land), never the same port to two processes at
//       once, and frees them when their process exits
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checker, spawnCli } from "./mcp_http.mjs";
import { portRange, reserve } from "./ports.mjs";

const part = process.argv[2];
const t = checker();
const mod = (name) => JSON.stringify(new URL(name, import.meta.url).href);
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };

// A child node running `code` (an ES module body): {code, sig, out} (stdout
// and stderr), once it exits.
async function node(code) {
  const r = await spawnCli(process.execPath, ["--input-type=module", "-e", code], { ms: 90000 }).done;
  return { code: r.code, sig: r.sig, out: r.out + r.err };
}

async function watchdogPart() {
  // The stuck child's grandchild carries the marker too: a sleep of 61.PID s.
  const marker = `61.${process.pid}`;
  const t0 = Date.now();
  const r = await node(`
    import { spawnSync } from "node:child_process";
    import { watchdog } from ${mod("./watchdog.mjs")};
    const wd = watchdog(1500, "stuck run");
    wd.step("the synchronous child");
    setTimeout(() => console.log("the event loop ran"), 200);
    spawnSync("sh", ["-c", "sleep ${marker}; :"]);
    console.log("spawnSync returned");`);
  const ms = Date.now() - t0;
  t.check("the stuck run ends within 10 s of its start (deadline 1.5 s)", ms < 10000, `${ms} ms`);
  t.check("it is killed (SIGKILL), not left to CTest", r.sig === "SIGKILL", `code ${r.code} sig ${r.sig}`);
  t.check("a FAIL line names the run and the step it was at",
    /FAIL stuck run done within 1\.5 s: still at: the synchronous child/.test(r.out), r.out);
  t.check("it names the main thread's kernel wait", /main thread: state \S, wchan \S+, syscall \d+/.test(r.out), r.out);
  t.check("it names the stuck child with its command line", r.out.includes(marker), r.out);
  t.check("the event loop never ran (the case a setTimeout watchdog misses)",
    !r.out.includes("the event loop ran") && !r.out.includes("spawnSync returned"), r.out);
  const left = spawnSync("pgrep", ["-f", marker], { encoding: "utf8", timeout: 5000 }).stdout.trim();
  t.check("no descendant outlives it (the stuck sh nor its sleep)", left === "", left);
}

async function portsPart() {
  const [lo, hi] = portRange();
  const N = 40;
  const code = `
    import { freePort } from ${mod("./ports.mjs")};
    const ps = [];
    for (let i = 0; i < ${N}; i++) ps.push(await freePort());
    console.log(JSON.stringify(ps));
    await new Promise((r) => setTimeout(r, 300)); // hold them while the other asks`;
  const rs = await Promise.all([node(code), node(code), node(code)]);
  const lists = rs.map((r) => { try { return JSON.parse(r.out.trim().split("\n").pop()); } catch { return []; } });
  const all = lists.flat();
  t.check(`three processes got ${N} ports each`, lists.every((l) => l.length === N), rs.map((r) => r.out).join("|"));
  t.check(`all below the ephemeral range (${lo}-${hi})`, all.every((p) => p >= lo && p <= hi),
    all.filter((p) => p < lo || p > hi).join(","));
  t.check("no port given twice", new Set(all).size === all.length);
  const lockDir = join(tmpdir(), "tidemark-test-ports");
  t.check("their reservations are gone once they exit",
    all.every((p) => !existsSync(join(lockDir, String(p)))));
  // A reservation left by a killed process is taken over, not lost.
  const killed = spawn(process.execPath, ["--input-type=module", "-e",
    `import { freePort } from ${mod("./ports.mjs")}; console.log(await freePort()); setInterval(() => {}, 1000);`],
  { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((r) => killed.stdout.once("data", (d) => r(Number(String(d).trim()))));
  killed.kill("SIGKILL");
  await new Promise((r) => killed.on("close", r));
  t.check("a killed process leaves its reservation behind", existsSync(join(lockDir, String(port))));
  t.check("which the next taker reclaims", !alive(killed.pid) && reserve(port), `port ${port}`);
}

const parts = { watchdog: watchdogPart, ports: portsPart };
if (!parts[part]) { console.error("usage: node harness_test.mjs watchdog|ports"); process.exit(2); }
await parts[part]();
t.done();
