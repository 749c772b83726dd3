// watchdog.mjs - a deadline for a whole test run that holds even when the
// run's own thread is stuck in a system call (a synchronous child process, a
// blocked write), where a setTimeout never fires and CTest would report a
// silent timeout. A worker thread waits on shared memory; if the run has not
// ended by the deadline it prints, as a FAIL line, the step the run was at,
// what the main thread waits on in the kernel and the live descendants with
// their command lines, then kills them and the run (SIGKILL), so no child
// keeps CTest's output pipe open.
//
//   import { watchdog } from "./watchdog.mjs";
//   const wd = watchdog(80000, "cluster");   // under the test's CTest TIMEOUT
//   wd.step("nodes");                         // where the run is now
import { Worker, isMainThread, workerData } from "node:worker_threads";
import { readFileSync, readdirSync, writeSync } from "node:fs";
import { spawnSync } from "node:child_process";

const STEP_BYTES = 256;

export function watchdog(ms, what) {
  const sab = new SharedArrayBuffer(STEP_BYTES);
  const bytes = new Uint8Array(sab);
  const w = new Worker(new URL(import.meta.url), {
    workerData: { watchdog: { sab, ms, what, pid: process.pid } }, execArgv: [] });
  w.unref();
  return {
    step(s) {
      const b = Buffer.from(String(s)).subarray(0, STEP_BYTES - 1);
      bytes.fill(0);
      bytes.set(b);
    },
  };
}

// ---- the worker thread ---------------------------------------------------------

const read = (p) => { try { return readFileSync(p, "utf8"); } catch { return ""; } };

// pid, ppid and state of every process, from /proc/*/stat.
function processes() {
  const out = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const st = read(`/proc/${d}/stat`);
    const m = st.match(/^\d+ \(.*\) (\S) (\d+)/s);
    if (m) out.push({ pid: Number(d), state: m[1], ppid: Number(m[2]) });
  }
  return out;
}

function descendants(root) {
  const all = processes(), found = [];
  const walk = (pid) => {
    for (const p of all) if (p.ppid === pid) { found.push(p); walk(p.pid); }
  };
  walk(root);
  return found;
}

// x86_64 numbers of the calls a stuck harness is usually in.
const SYSCALLS = { 0: "read", 1: "write", 7: "poll", 61: "wait4", 202: "futex", 232: "epoll_wait",
  247: "waitid", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait" };

function thread(pid, tid) {
  const sc = read(`/proc/${pid}/task/${tid}/syscall`).split(" ")[0].trim();
  const stat = read(`/proc/${pid}/task/${tid}/stat`).match(/^\d+ \(.*\) (\S)/s);
  return `state ${stat ? stat[1] : "?"}, wchan ${read(`/proc/${pid}/task/${tid}/wchan`) || "?"}, ` +
    `syscall ${sc}${SYSCALLS[sc] ? ` (${SYSCALLS[sc]})` : ""}`;
}

function expire({ sab, ms, what, pid }) {
  const step = Buffer.from(new Uint8Array(sab)).toString().replace(/\0[\s\S]*$/, "");
  const kids = descendants(pid);
  const lines = [`FAIL ${what} done within ${ms / 1000} s: still at: ${step}`,
    `  main thread: ${thread(pid, pid)}`];
  for (const k of kids) {
    const cmd = read(`/proc/${k.pid}/cmdline`).split("\0").join(" ").trim();
    lines.push(`  descendant ${k.pid} (parent ${k.ppid}, state ${k.state}): ${cmd}`);
  }
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    if (Number(tid) === pid) continue;
    lines.push(`  thread ${tid} ${read(`/proc/${pid}/task/${tid}/comm`).trim()}: ${thread(pid, tid)}`);
  }
  writeSync(1, lines.join("\n") + "\n");
  // Every thread's stack, when asked for and gdb is there (a few seconds).
  if (process.env.TM_WATCHDOG_GDB) {
    const g = spawnSync("gdb", ["-p", String(pid), "-batch", "-ex", "thread apply all bt 30"],
      { encoding: "utf8", timeout: 60000 });
    writeSync(1, (g.stdout || "") + (g.stderr || "") + "\n");
  }
  for (const k of kids) try { process.kill(k.pid, "SIGKILL"); } catch { /* gone */ }
  process.kill(pid, "SIGKILL");
}

if (!isMainThread && workerData?.watchdog) {
  const never = new Int32Array(new SharedArrayBuffer(4));
  Atomics.wait(never, 0, 0, workerData.watchdog.ms); // only the deadline ends this wait
  expire(workerData.watchdog);
}
