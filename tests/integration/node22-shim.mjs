// Lets the MCP conformance suite 0.2.x (peers/node_modules/conformance2)
// start on Node 20. Its bundle does `import { globSync } from "fs"`, and
// fs.globSync only exists from Node 22 on, so on Node 20 the import fails at
// link time ("does not provide an export named 'globSync'").
//
//   node --import ./tests/integration/node22-shim.mjs \
//        peers/node_modules/conformance2/dist/index.js server --url URL ...
//
// Nothing in node_modules is edited. This one file plays three parts, told
// apart by the query string of the URL it was loaded under:
//   (none)       the --import preload: on a Node without fs.globSync it
//                registers this file (?role=hooks) as a module resolve hook;
//                on Node 22+ it does nothing at all.
//   ?role=hooks  the hook (it runs on Node's loader thread): a bare "fs" or
//                "node:fs" imported by a module of the conformance package
//                itself (the nearest package.json is named
//                @modelcontextprotocol/conformance, so also under an npm
//                alias; not its own dependencies) resolves to ?role=fs.
//   ?role=fs     the stand-in for node:fs: everything node:fs exports, its
//                default export, and globSync below.
//
// The bundle calls it once: globSync(`**/checks.json`, { cwd: dir }), and
// reads the result as an array of paths relative to cwd (it takes dirname()
// of each as the scenario's name). globSync here does what Node 22's does
// for that and for the usual rest:
//   pattern  a string or an array of strings; `*`, `?`, `[abc]`, `[a-z]`,
//            `[!x]` / `[^x]`, `\` escapes, `{a,b}` braces (nested too), and
//            `**` as a whole segment (any depth, zero included). Like
//            Node's, `*` / `?` / `**` do not match a name starting with a
//            dot unless the pattern segment itself starts with one.
//            Extglobs (`+(a|b)` ...) are not supported: taken literally.
//   options  cwd (string or file: URL; default process.cwd()), exclude (a
//            function given each candidate - a path, or a Dirent with
//            withFileTypes - returning true to drop it and, for a directory,
//            not descend into it; or an array of patterns), withFileTypes.
//   result   string[]: relative to cwd for a relative pattern, absolute for
//            an absolute one, with the platform's separator, no duplicates,
//            no "." entry; or fs.Dirent[] with withFileTypes. Unreadable
//            directories are skipped, as in Node.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export * from 'node:fs';
export default fs;

const role = new URL(import.meta.url).searchParams.get('role');

if (role === null && typeof fs.globSync !== 'function') {
    const { register } = await import('node:module');
    const self = new URL(import.meta.url);
    self.search = '';
    const fsUrl = new URL(self); fsUrl.searchParams.set('role', 'fs');
    const hooksUrl = new URL(self); hooksUrl.searchParams.set('role', 'hooks');
    register(hooksUrl.href, { data: { fsUrl: fsUrl.href } });
}

// ---- resolve hook (role=hooks) ----
const CONFORMANCE = '@modelcontextprotocol/conformance';
let shimFsUrl = null;
const pkgOfDir = new Map();   // directory -> name in its nearest package.json

export function initialize(data) {
    shimFsUrl = data && data.fsUrl;
}

function packageName(dir) {
    const seen = [];
    let name = null;
    for (let d = dir; ; d = path.dirname(d)) {
        if (pkgOfDir.has(d)) { name = pkgOfDir.get(d); break; }
        seen.push(d);
        const pj = path.join(d, 'package.json');
        let text = null;
        try { text = fs.readFileSync(pj, 'utf8'); } catch { /* none here */ }
        if (text !== null) {
            try { name = JSON.parse(text).name ?? ''; } catch { name = ''; }
            break;
        }
        if (path.dirname(d) === d) { name = ''; break; }
    }
    for (const d of seen) pkgOfDir.set(d, name);
    return name;
}

function fromConformance(parentURL) {
    if (!parentURL || !parentURL.startsWith('file:')) return false;
    let file;
    try { file = fileURLToPath(parentURL); } catch { return false; }
    return packageName(path.dirname(file)) === CONFORMANCE;
}

export async function resolve(specifier, context, next) {
    if (shimFsUrl && (specifier === 'fs' || specifier === 'node:fs') &&
        fromConformance(context.parentURL)) {
        return { url: shimFsUrl, format: 'module', shortCircuit: true };
    }
    return next(specifier, context);
}

// ---- globSync (role=fs) ----

// Expands {a,b} braces (nested) into a list of patterns; a brace with no
// top-level comma, or unbalanced, stays literal.
function expandBraces(p) {
    let depth = 0, start = -1;
    for (let i = 0; i < p.length; i++) {
        const c = p[i];
        if (c === '\\') { i++; continue; }
        if (c === '[') {           // a class: skip to its end
            const end = classEnd(p, i);
            if (end > 0) { i = end; continue; }
        }
        if (c === '{') { if (depth++ === 0) start = i; }
        else if (c === '}' && depth > 0 && --depth === 0) {
            const body = p.slice(start + 1, i);
            const alts = splitTopLevel(body);
            if (alts.length < 2) continue;
            const pre = p.slice(0, start), post = p.slice(i + 1);
            // pre holds no top-level brace group (this is the first one)
            const res = [];
            for (const a of alts)
                for (const tail of expandBraces(a + post)) res.push(pre + tail);
            return res;
        }
    }
    return [p];
}

function splitTopLevel(body) {
    const alts = [];
    let depth = 0, last = 0;
    for (let i = 0; i < body.length; i++) {
        const c = body[i];
        if (c === '\\') { i++; continue; }
        if (c === '{') depth++;
        else if (c === '}') depth--;
        else if (c === ',' && depth === 0) { alts.push(body.slice(last, i)); last = i + 1; }
    }
    alts.push(body.slice(last));
    return alts;
}

// Index of the `]` closing the class that opens at i, or -1.
function classEnd(s, i) {
    let j = i + 1;
    if (s[j] === '!' || s[j] === '^') j++;
    if (s[j] === ']') j++;
    for (; j < s.length; j++) {
        if (s[j] === '\\') { j++; continue; }
        if (s[j] === ']') return j;
        if (s[j] === '/') return -1;
    }
    return -1;
}

const reEscape = (c) => c.replace(/[|\\{}()[\]^$+*?.\/-]/g, '\\$&');

function hasMagic(seg) {
    for (let i = 0; i < seg.length; i++) {
        const c = seg[i];
        if (c === '\\') { i++; continue; }
        if (c === '*' || c === '?') return true;
        if (c === '[' && classEnd(seg, i) > 0) return true;
    }
    return false;
}

function unescapeSeg(seg) {
    return seg.replace(/\\(.)/g, '$1');
}

// One path segment's pattern as an anchored RegExp.
function segRegExp(seg) {
    let re = '';
    for (let i = 0; i < seg.length; i++) {
        const c = seg[i];
        if (c === '\\' && i + 1 < seg.length) { re += reEscape(seg[++i]); continue; }
        if (c === '*') { while (seg[i + 1] === '*') i++; re += '[^/]*'; continue; }
        if (c === '?') { re += '[^/]'; continue; }
        if (c === '[') {
            const end = classEnd(seg, i);
            if (end > 0) {
                let body = seg.slice(i + 1, end), neg = false;
                if (body[0] === '!' || body[0] === '^') { neg = true; body = body.slice(1); }
                body = body.replace(/\\(.)/g, '$1').replace(/[\\\]^]/g, '\\$&');
                re += (neg ? '[^/' : '[') + body + ']';
                i = end;
                continue;
            }
        }
        re += reEscape(c);
    }
    return new RegExp('^' + re + '$', process.platform === 'win32' || process.platform === 'darwin' ? 'i' : '');
}

function readDir(dir) {
    try { return fs.readdirSync(dir, { withFileTypes: true }); } catch { return []; }
}

function isDirEntry(abs, dirent) {
    if (dirent && dirent.isDirectory()) return true;
    if (dirent && !dirent.isSymbolicLink()) return false;
    try { return fs.statSync(abs).isDirectory(); } catch { return false; }
}

function makeDirent(abs) {
    const dir = path.dirname(abs), base = path.basename(abs);
    const d = readDir(dir).find((e) => e.name === base);
    if (d) {
        // Node 20's Dirent has .path (and from 20.12 .parentPath); set both
        if (d.parentPath === undefined) d.parentPath = dir;
        if (d.path === undefined) d.path = dir;
    }
    return d;
}

export function globSync(pattern, options = {}) {
    const patterns = Array.isArray(pattern) ? pattern : [pattern];
    for (const p of patterns)
        if (typeof p !== 'string')
            throw new TypeError('The "pattern" argument must be of type string or an instance of Array');
    let cwd = options.cwd ?? process.cwd();
    if (cwd instanceof URL || (typeof cwd === 'string' && cwd.startsWith('file:'))) cwd = fileURLToPath(cwd);
    cwd = path.resolve(String(cwd));
    const withFileTypes = !!options.withFileTypes;
    let exclude = options.exclude;
    if (Array.isArray(exclude)) {
        const ex = exclude.map((x) => ({ abs: path.isAbsolute(x), parts: expandBraces(x) }));
        exclude = (p) => {
            const s = typeof p === 'string' ? p : path.join(p.parentPath ?? p.path, p.name);
            return ex.some(({ parts }) => parts.some((q) => matchWhole(q, s, cwd)));
        };
    } else if (exclude !== undefined && typeof exclude !== 'function') {
        throw new TypeError('The "options.exclude" property must be of type function or an instance of Array');
    }

    const results = new Map();  // display string -> absolute path
    for (const p0 of patterns) {
        for (const p of expandBraces(p0)) {
            const absolute = path.isAbsolute(p);
            const norm = process.platform === 'win32' ? p.replace(/\\/g, '/') : p;
            let segs = norm.split('/');
            let root;
            if (absolute) { root = path.parse(path.resolve(p)).root; segs = segs.slice(1); if (segs[0] === '' && process.platform === 'win32') segs = segs.slice(1); }
            else root = cwd;
            const dirOnly = segs.length > 1 && segs[segs.length - 1] === '';
            segs = segs.filter((s, i) => s !== '' || i === 0 && segs.length === 1);
            const shown = (abs) => (absolute ? abs : path.relative(cwd, abs));
            const candidate = (abs, dirent) => {
                if (!exclude) return true;
                const arg = withFileTypes ? (dirent ?? makeDirent(abs)) : shown(abs);
                return !(arg && exclude(arg));
            };
            const emit = (abs, dirent) => {
                const s = shown(abs);
                if (s === '' || results.has(s)) return;
                if (dirOnly && !isDirEntry(abs, dirent)) return;
                results.set(s, abs);
            };
            walk(root, segs, 0, emit, candidate);
        }
    }
    const out = [...results.keys()];
    if (!withFileTypes) return out;
    return out.map((s) => makeDirent(results.get(s))).filter(Boolean);
}

// Whether pattern q matches path s (relative to cwd unless absolute).
function matchWhole(q, s, cwd) {
    const abs = path.isAbsolute(s) ? s : path.resolve(cwd, s);
    const target = path.isAbsolute(q) ? abs : path.relative(cwd, abs);
    const parts = target.split(path.sep).filter(Boolean);
    const segs = q.split('/').filter(Boolean);
    const m = (i, j) => {
        if (i === segs.length) return j === parts.length;
        if (segs[i] === '**') {
            for (let k = j; k <= parts.length; k++) {
                if (k > j && parts[k - 1].startsWith('.')) break;
                if (m(i + 1, k)) return true;
            }
            return false;
        }
        if (j === parts.length) return false;
        if (!segMatches(segs[i], parts[j])) return false;
        return m(i + 1, j + 1);
    };
    return m(0, 0);
}

function segMatches(seg, name) {
    if (seg === '.' || seg === '..') return name === seg;
    if (!hasMagic(seg)) return unescapeSeg(seg) === name;
    if (name.startsWith('.') && !seg.startsWith('.')) return false;
    return segRegExp(seg).test(name);
}

function walk(dir, segs, i, emit, candidate, seen = new Set()) {
    if (i === segs.length) { emit(dir, undefined); return; }
    const seg = segs[i];
    if (seg === '**') {
        // zero directories
        walk(dir, segs, i + 1, emit, candidate, seen);
        let real;
        try { real = fs.realpathSync(dir); } catch { return; }
        if (seen.has(real)) return;          // a symlink loop
        const next = new Set(seen); next.add(real);
        for (const e of readDir(dir)) {
            if (e.name.startsWith('.')) continue;
            const abs = path.join(dir, e.name);
            if (!candidate(abs, e)) continue;
            if (e.isDirectory()) walk(abs, segs, i, emit, candidate, next);
            else if (i === segs.length - 1) emit(abs, e);   // a trailing `**` matches files too
        }
        return;
    }
    const last = i === segs.length - 1;
    if (seg === '.' || seg === '..' || !hasMagic(seg)) {
        const abs = path.join(dir, seg === '.' || seg === '..' ? seg : unescapeSeg(seg));
        try { fs.lstatSync(abs); } catch { return; }
        if (!candidate(abs, undefined)) return;
        if (last) emit(abs, undefined);
        else walk(abs, segs, i + 1, emit, candidate, seen);
        return;
    }
    const re = segRegExp(seg);
    const dotOk = seg.startsWith('.');
    for (const e of readDir(dir)) {
        if (e.name.startsWith('.') && !dotOk) continue;
        if (!re.test(e.name)) continue;
        const abs = path.join(dir, e.name);
        if (!candidate(abs, e)) continue;
        if (last) emit(abs, e);
        else if (isDirEntry(abs, e)) walk(abs, segs, i + 1, emit, candidate, seen);
    }
}
