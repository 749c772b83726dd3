// quickstart.mjs - the README's quickstart, run as written: the bash block
// after the "quickstart" marker, against a server started here (PORT is the
// one knob the block reads). It must initialize, cut a call, and resume after
// the last id it saw with exactly the rest of the stream, ending in the result.
//
//   node quickstart.mjs SERVER_BINARY README
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { checker, startServer, stopServer } from "./mcp_http.mjs";

const [bin, readme] = process.argv.slice(2);
const t = checker();
const text = readFileSync(readme, "utf8");
const m = text.match(/<!-- quickstart:[^\n]*-->\n```bash\n([\s\S]*?)\n```/);
t.check("the README has a quickstart block", !!m);
const s = await startServer(bin, ["--store", "memory"]);
try {
  const port = new URL(s.url).port;
  const r = spawnSync("bash", ["-c", "set -e\n" + m[1]], { encoding: "utf8", timeout: 60000,
    env: { ...process.env, PORT: port } });
  const out = r.stdout ?? "";
  t.check("the block runs to the end in bash", r.status === 0, `${r.status} ${r.stderr}`);
  t.check("it got a session id", /^session [0-9a-f]{32}$/m.test(out), out.slice(0, 300));
  const [cut, resumed] = out.split(/^--- resuming after (\S+)$/m).filter((_, i) => i !== 1);
  const last = out.match(/^--- resuming after (\S+)$/m)?.[1];
  const seqs = (x) => [...(x ?? "").matchAll(/^id: [0-9a-f]{16}-r\d+-(\d+)-[A-Za-z0-9_-]{12}$/gm)].map((a) => Number(a[1]));
  const a = seqs(cut), b = seqs(resumed);
  t.check("the cut stream carried some events, not all", a.length > 1 && !/"result"/.test(cut), cut);
  t.check("the resume went on at exactly the next seq", last && b[0] === Number(last.split("-")[2]) + 1,
    JSON.stringify({ last, a, b }));
  t.check("no gap, no repeat, and it ends with the call's result",
    b.every((v, i) => i === 0 || v === b[i - 1] + 1) && /"id":2,"result"/.test(resumed), resumed);
} finally {
  await stopServer(s);
}
t.done();
