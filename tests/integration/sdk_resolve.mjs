// sdk_resolve.mjs - load the pinned official TypeScript SDK from
// peers/node_modules (ESM build, resolved through the package's own
// "exports" map). TIDEMARK_PEERS_DIR overrides the peers folder.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const scriptDir = path.dirname(fileURLToPath(import.meta.url));
export const peersDir = path.resolve(process.env.TIDEMARK_PEERS_DIR ?? path.join(scriptDir, '..', '..', 'peers'));

function locateSdk() {
    const req = createRequire(path.join(peersDir, 'package.json'));
    let resolved;
    try {
        resolved = req.resolve('@modelcontextprotocol/sdk/server');
    } catch (e) {
        throw new Error(`cannot resolve @modelcontextprotocol/sdk from ${peersDir} (run npm ci in peers/): ${e.message}`);
    }
    // Walk up to the package root.
    let dir = path.dirname(resolved);
    for (;;) {
        try {
            const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
            if (pkg.name === '@modelcontextprotocol/sdk') return { root: dir, pkg };
        } catch {
            /* keep walking */
        }
        const up = path.dirname(dir);
        if (up === dir) throw new Error(`no @modelcontextprotocol/sdk package.json above ${resolved}`);
        dir = up;
    }
}

let sdk = null;
// The SDK package's folder (its own dependencies, e.g. zod, resolve from there).
export function sdkRoot() {
    sdk ??= locateSdk();
    return sdk.root;
}
// The SDK's version, from its package.json.
export function sdkVersion() {
    sdk ??= locateSdk();
    return sdk.pkg.version;
}
// import() of one module of the SDK, e.g. sdkImport('client/index.js').
export async function sdkImport(subpath) {
    sdk ??= locateSdk();
    const pattern = sdk.pkg.exports?.['./*']?.import;
    if (typeof pattern !== 'string') throw new Error('unexpected SDK exports map (no "./*" import pattern)');
    return import(pathToFileURL(path.join(sdk.root, pattern.replace('*', subpath))).href);
}
