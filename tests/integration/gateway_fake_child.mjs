// gateway_fake_child.mjs - a small stdio MCP server whose misbehaviour is
// chosen on the command line, for tests/unit/test_stdio_upstream.c.
//   node gateway_fake_child.mjs MODE [FAIL_FILE]
// MODE: ok | refuse-init | die-at-init | silent.
// With FAIL_FILE: when that file exists at start, exit 7 at once (a restart
// that cannot succeed).
// Tools (tools/call name): echo (returns what it saw: the id it got, whether
// notifications/initialized came first, the initialize params, its pid),
// crash (exit 1 mid-call), garbage (two bad stdout lines, then the answer),
// batch (a progress notification and the answer in one JSON array).
import fs from 'node:fs';
import readline from 'node:readline';

const mode = process.argv[2] || 'ok';
const failFile = process.argv[3];
if (failFile && fs.existsSync(failFile)) {
  process.stderr.write('fail file present, exiting\n');
  process.exit(7);
}
let initParams = null;
let initialized = false;
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');

function onInitialize(msg) {
  if (mode === 'refuse-init') return send({ jsonrpc: '2.0', id: msg.id, error: { code: -32602, message: 'no' } });
  if (mode === 'die-at-init') process.exit(3);
  if (mode === 'silent') return;
  initParams = msg.params;
  send({
    jsonrpc: '2.0', id: msg.id,
    result: { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} },
              serverInfo: { name: 'fake-child', version: '1' } },
  });
}

function onCall(msg) {
  const name = msg.params?.name;
  if (name === 'crash') {
    process.stderr.write(`crashing on request ${JSON.stringify(msg.id)}\n`);
    process.exit(1);
  }
  if (name === 'batch') { // a 2025-03-26 batch: a progress notification and the answer
    const token = msg.params?._meta?.progressToken;
    return process.stdout.write(JSON.stringify([
      { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: token, progress: 1 } },
      { jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: 'batched' }] } },
    ]) + '\n');
  }
  if (name === 'garbage') {
    process.stdout.write('this is not json\n');
    process.stdout.write('{"unterminated": \n');
  }
  send({
    jsonrpc: '2.0', id: msg.id,
    result: { content: [{ type: 'text', text: 'ok' }],
              structuredContent: { idSeen: msg.id, initialized, initParams, pid: process.pid } },
  });
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let msg;
  try { msg = JSON.parse(line); } catch { process.stderr.write(`bad line from the gateway: ${line}\n`); return; }
  if (msg.method === 'initialize') return onInitialize(msg);
  if (msg.method === 'notifications/initialized') { initialized = true; return; }
  if (msg.method === 'tools/call') return onCall(msg);
  if (msg.id !== undefined && msg.method)
    send({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'method not found' } });
});
rl.on('close', () => process.exit(0));
