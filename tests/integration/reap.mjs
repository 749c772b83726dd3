// reap.mjs - child processes a test harness starts are killed (SIGKILL, by
// PID) when the harness exits for any reason, an uncaught exception included,
// so no server outlives its test holding CTest's output pipe open.
const live = new Set();
process.on("exit", () => {
  for (const p of live) try { p.kill("SIGKILL"); } catch { /* already gone */ }
});

// Track proc until it exits; returns it. A spawn error (e.g. EACCES) is
// reported as an exit, so waiters on "exit" are not left hanging.
export function reaped(proc) {
  live.add(proc);
  proc.once("exit", () => live.delete(proc));
  proc.once("error", (e) => {
    live.delete(proc);
    console.error(`spawn ${proc.spawnfile}: ${e.message}`);
    proc.emit("exit", null, "spawn-error");
  });
  return proc;
}
