// What a worker process loads before its run arrives: every run's child imports the worker
// runtime and the package, so whatever they load at import time is paid once per run (and per
// standby worker). Each test looks at a fresh Node process.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

import { pkgDir, pkgIndex } from './helpers.mjs';

const runtime = join(pkgDir, 'lib', 'runtime.js');

test('importing the worker runtime and the package makes no Intl formatter', () => {
  const probe = `
    let formatters = 0;
    const NumberFormat = Intl.NumberFormat;
    Intl.NumberFormat = function (...args) { formatters += 1; return new NumberFormat(...args); };
    await import(${JSON.stringify(runtime)});
    await import(${JSON.stringify(pkgIndex)});
    console.log(JSON.stringify({ formatters }));`;
  const out = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8' });
  assert.equal(out.status, 0, out.stderr);
  const { formatters } = JSON.parse(out.stdout);
  assert.equal(formatters, 0, 'Intl.NumberFormat constructed at import');
});

test('the package still formats numbers after making its formatter on demand', async () => {
  const piw = await import(pkgIndex);
  const line = piw.formatProgressLine({ key: 'rows', data: { status: 'running', completed: 4200, total: 10000 } });
  assert.match(line, /4,200\/10,000/);
});
