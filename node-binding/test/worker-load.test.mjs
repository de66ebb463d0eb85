// What a worker process loads before its run arrives: every run's child imports the worker
// runtime and the package, so whatever they load at import time is paid once per run (and per
// standby worker). Each test looks at a fresh Node process.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { pkgDir, pkgIndex } from './helpers.mjs';

const runtime = join(pkgDir, 'lib', 'runtime.js');
const workerJs = join(pkgDir, 'worker.js');

/** Built-ins a worker needs only when a workflow uses them (commands, hashes, file lookups). */
const ON_DEMAND = ['child_process', 'crypto', 'os', 'fs/promises', 'net', 'dgram'];

test('importing the worker runtime and the package loads no on-demand built-in and makes no Intl formatter', () => {
  const probe = `
    let formatters = 0;
    const NumberFormat = Intl.NumberFormat;
    Intl.NumberFormat = function (...args) { formatters += 1; return new NumberFormat(...args); };
    await import(${JSON.stringify(runtime)});
    await import(${JSON.stringify(pkgIndex)});
    const builtins = process.moduleLoadList.filter((m) => m.startsWith('NativeModule ')).map((m) => m.slice(13));
    console.log(JSON.stringify({ formatters, builtins }));`;
  const out = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8' });
  assert.equal(out.status, 0, out.stderr);
  const { formatters, builtins } = JSON.parse(out.stdout);
  assert.deepEqual(ON_DEMAND.filter((m) => builtins.includes(m)), [], 'built-ins loaded at import');
  assert.equal(formatters, 0, 'Intl.NumberFormat constructed at import');
});

test('the package still formats numbers and hashes after loading them on demand', async () => {
  const piw = await import(pkgIndex);
  const line = piw.formatProgressLine({ key: 'rows', data: { status: 'running', completed: 4200, total: 10000 } });
  assert.match(line, /4,200\/10,000/);
  assert.match(piw.digest({ a: 1 }), /^sha256:[0-9a-f]{64}$/);
});

/** A process that runs `readWhileIdle(0, idleMs, …)` and prints what it read; "idle" goes to stderr. */
function reader(idleMs) {
  const code = `
    const { readWhileIdle } = await import(${JSON.stringify(runtime)});
    const text = await readWhileIdle(0, ${idleMs}, () => process.stderr.write('idle\\n'));
    process.stdout.write('read ' + text);`;
  return spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['pipe', 'pipe', 'pipe'] });
}

/** Resolves when `child` exits: `{ code, stdout, stderr }`. */
function collect(child, onStderr = () => {}) {
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => {
    stderr += d;
    onStderr(stderr);
  });
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

test('an envelope that arrives before the idle time runs nothing idle, and leaves no timer', async () => {
  // An hour: the reader would not exit before it if the idle timer were left pending.
  const child = reader(3_600_000);
  const done = collect(child);
  child.stdin.end('{"envelope":1}');
  const { code, stdout, stderr } = await done;
  assert.equal(code, 0, stderr);
  assert.equal(stdout, 'read {"envelope":1}');
  assert.equal(stderr, '');
});

test('a worker idle past the idle time runs its idle work once, then still reads its envelope', async () => {
  const child = reader(0);
  const done = collect(child, (stderr) => {
    if (stderr.includes('idle') && child.stdin.writable) child.stdin.end('late');
  });
  const { code, stdout, stderr } = await done;
  assert.equal(code, 0, stderr);
  assert.equal(stdout, 'read late');
  assert.equal(stderr, 'idle\n');
});

test('a standby worker that waits for its run loads the TypeScript compiler meanwhile', async () => {
  // NODE_DEBUG=module logs each CommonJS load: amaro is one.
  const child = spawn(process.execPath, [workerJs], {
    env: { ...process.env, PIW_STANDBY: '1', NODE_DEBUG: 'module' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const deadline = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const done = collect(child, (stderr) => {
    if (/REQUEST amaro /.test(stderr) && child.stdin.writable) child.stdin.end();
  });
  const { stderr } = await done;
  clearTimeout(deadline);
  assert.match(stderr, /REQUEST amaro /, 'amaro loaded while waiting');
  assert.match(stderr, /cannot read the launch envelope/, 'then it read stdin to its end');
});
