// layers.mjs (CTest layers): the architecture as the object files show it.
// A file "calls" another when it uses a symbol defined there (nm). Checked:
//  1. arrows between layers (src/<layer>/) point down only, as
//     docs/design.md "Layers" draws them;
//  2. inside each layer no cycle of calls runs through more than MAX_CYCLE
//     files (issue 31: a newcomer can follow a layer file by file).
//   node layers.mjs OBJECT...   (the objects of tidemark_obj, ';' or ' ' separated)
import { execFileSync } from "node:child_process";

const MAX_CYCLE = 3;
const below = {
  base: [],
  common: ["base"], mcp: ["base"], otel: ["base"], transport: ["base"], auth: ["base"],
  log: ["base", "common"],
  server: ["base", "common", "mcp", "otel", "transport", "auth", "log"],
  client: ["base", "common", "mcp", "otel", "transport"],
  gateway: ["base", "common", "mcp", "otel", "transport", "auth", "log", "server", "client"],
};

const objects = process.argv.slice(2).flatMap((a) => a.split(";")).filter((o) => o.endsWith(".o"));
const files = new Map(); // "layer/name" -> {layer, defs, uses}
for (const o of objects) {
  const m = /\/src\/([a-z]+)\/([A-Za-z0-9_]+)\.c\.o$/.exec(o);
  if (!m) continue; // generated code (the OTLP protobuf) has no layer of its own
  const f = { layer: m[1], name: `${m[1]}/${m[2]}`, defs: new Set(), uses: new Set() };
  for (const line of execFileSync("nm", [o], { encoding: "utf8" }).split("\n")) {
    const p = line.trim().split(/\s+/);
    if (p.length === 3 && "TDBR".includes(p[1])) f.defs.add(p[2]);
    else if (p.length === 2 && p[0] === "U") f.uses.add(p[1]);
  }
  files.set(f.name, f);
}
let failed = 0;
const fail = (msg) => { failed++; console.log(`FAIL ${msg}`); };
if (files.size < 50) fail(`only ${files.size} objects of src/ given`);

const definer = new Map();
for (const f of files.values()) for (const s of f.defs) definer.set(s, f);
const calls = new Map([...files.keys()].map((k) => [k, new Set()]));
for (const f of files.values())
  for (const s of f.uses) {
    const g = definer.get(s);
    if (!g || g === f) continue;
    if (g.layer === f.layer) calls.get(f.name).add(g.name);
    else if (!(below[f.layer] ?? []).includes(g.layer))
      fail(`${f.name} calls up or across into ${g.name} (${s})`);
  }

// Strongly connected components (Tarjan), then the longest simple cycle in
// each by depth-first search from its first member (bounded work).
function components(nodes) {
  let index = 0;
  const idx = new Map(), low = new Map(), stack = [], on = new Set(), out = [];
  const visit = (v) => {
    idx.set(v, index); low.set(v, index++); stack.push(v); on.add(v);
    for (const w of calls.get(v)) {
      if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); }
      else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const c = [];
      let w;
      do { w = stack.pop(); on.delete(w); c.push(w); } while (w !== v);
      out.push(c);
    }
  };
  for (const v of nodes) if (!idx.has(v)) visit(v);
  return out;
}
function longestCycle(comp) {
  const order = [...comp].sort(), rank = new Map(order.map((v, i) => [v, i]));
  let best = [], steps = 0;
  const dfs = (start, v, path, seen) => {
    if (++steps > 2e6) throw new Error("too many paths");
    for (const w of calls.get(v)) {
      if (!rank.has(w)) continue;
      if (w === start) { if (path.length > best.length) best = [...path]; }
      else if (!seen.has(w) && rank.get(w) > rank.get(start)) {
        seen.add(w); path.push(w); dfs(start, w, path, seen); path.pop(); seen.delete(w);
      }
    }
  };
  for (const s of order) dfs(s, s, [s], new Set([s]));
  return best;
}
const layers = [...new Set([...files.values()].map((f) => f.layer))].sort();
for (const layer of layers) {
  const nodes = [...files.keys()].filter((k) => files.get(k).layer === layer);
  let longest = [];
  for (const c of components(nodes).filter((c) => c.length > 1)) {
    let cyc;
    try { cyc = longestCycle(c); } catch (e) { fail(`${layer}: ${c.length} files call each other: ${c.join(" ")}`); continue; }
    if (cyc.length > longest.length) longest = cyc;
  }
  const say = longest.length ? `${longest.join(" -> ")} -> ${longest[0]}` : "none";
  if (longest.length > MAX_CYCLE) fail(`${layer}: a cycle of ${longest.length} files: ${say}`);
  else console.log(`ok   ${layer}: ${nodes.length} files, longest cycle ${longest.length} (${say})`);
}
console.log(failed ? `${failed} failed` : "all layers point down; no cycle longer than 3");
process.exit(failed ? 1 : 0);
