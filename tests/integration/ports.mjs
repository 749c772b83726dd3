// ports.mjs - loopback ports a test names before the process that binds them
// starts (a balancer's port baked into the nodes' flags, an authorization
// server restarted on its port), so that no other process can take one
// meanwhile:
//
//   - below the kernel's ephemeral range (ip_local_port_range), where no
//     `--listen 127.0.0.1:0` and no outgoing connection is ever given a port;
//   - reserved among the tests CTest runs at once by a lock file per port
//     (O_EXCL) holding the owner's PID, removed when the owner exits; one
//     whose owner is dead (killed at a timeout) is taken over;
//   - bound once here, so a port some other program listens on is skipped.
//
// A port stays reserved until the process exits: tests restart servers on
// the ports they had.
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync, chmodSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const lockDir = join(tmpdir(), "tidemark-test-ports");
const held = new Set();
process.on("exit", () => {
  for (const p of held) try { unlinkSync(join(lockDir, String(p))); } catch { /* gone */ }
});

// [lo, hi]: the ports below the ephemeral range, from 10000 up.
export function portRange() {
  let low = 32768;
  try {
    low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  } catch { /* not Linux: the usual default */ }
  return [10000, Math.max(low - 1, 10001)];
}

const alive = (pid) => {
  try { process.kill(pid, 0); return true; } catch (e) { return e.code === "EPERM"; }
};

// Create the lock file of port for this process (taking over a dead
// owner's); false if a live process holds it.
export function reserve(port) {
  const path = join(lockDir, String(port));
  for (let tries = 0; tries < 2; tries++) {
    try {
      const fd = openSync(path, "wx", 0o666);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      held.add(port);
      return true;
    } catch (e) {
      if (e.code !== "EEXIST") throw e;
      let owner = 0;
      try { owner = Number(readFileSync(path, "utf8")); } catch { continue; /* just removed */ }
      if (owner && alive(owner)) return false;
      // Dead owner, or a file still being written: only a dead owner's goes.
      if (!owner) return false;
      try { unlinkSync(path); } catch { /* another taker was first */ }
    }
  }
  return false;
}

const bindable = (port) => new Promise((resolve) => {
  const s = createServer();
  s.once("error", () => resolve(false));
  s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
});

// A port reserved for this process that nothing listens on now.
export async function freePort() {
  try { mkdirSync(lockDir, { recursive: true, mode: 0o1777 }); chmodSync(lockDir, 0o1777); } catch { /* another user's */ }
  const [lo, hi] = portRange();
  for (let i = 0; i < 500; i++) {
    const port = lo + Math.floor(Math.random() * (hi - lo + 1));
    if (held.has(port) || !reserve(port)) continue;
    if (await bindable(port)) return port;
    // Someone outside the tests listens there: keep it reserved (so it is
    // not tried again) and pick another.
  }
  throw new Error(`no free port in ${lo}-${hi} after 500 tries`);
}
