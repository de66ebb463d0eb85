// What a worker process loads before its run arrives: every run's child imports the worker
// runtime and the package, so whatever they load at import time is paid once per run (and per
// standby worker). Each test looks at a fresh Node process.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { pkgDir, pkgIndex } from './helpers.mjs';

const runtime = join(pkgDir, 'lib', 'runtime.js');

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
