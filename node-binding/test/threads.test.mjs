// The addon in the main thread and in worker threads, closing a client with calls in flight, and
// where a client looks for its installation.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { Client } from '../index.js';
import { code, pkgDir, pkgIndex, startHost, tempDir, writeWorkflow } from './helpers.mjs';

let host;
let parked;

before(async () => {
  host = await startHost();
  const file = writeWorkflow(
    host.dir,
    'parked',
    `export default piw.defineWorkflow({ name: 'parked', startAt: 'ask', edges: [],
      nodes: { ask: piw.checkpoint({ summary: 'never answered' }) } });`,
  );
  parked = (await host.client.startRun(file)).run_id;
  await host.client.waitForRun(parked, { untilParked: true, timeoutMs: 20_000 });
});

after(async () => {
  await host?.stop();
});

function inWorker(source, workerData) {
  return new Promise((resolve, reject) => {
    const w = new Worker(`import(${JSON.stringify(pkgIndex)}).then(async (piw) => { ${source} })`, {
      eval: true,
      workerData,
    });
    let message;
    w.on('message', (m) => (message = m));
    w.on('error', reject);
    w.on('exit', (exitCode) => (exitCode === 0 ? resolve(message) : reject(new Error(`worker exited ${exitCode}`))));
  });
}

test('the addon loads and works in the main thread and in worker threads at once', async () => {
  const source = `
    const { parentPort, workerData } = await import('node:worker_threads');
    const c = await piw.Client.connect({ home: workerData.home, start: false });
    const s = await c.status();
    const r = await c.runStatus(workerData.runId);
    await c.close();
    parentPort.postMessage({ pid: s.pid, status: r.run.status });`;
  const results = await Promise.all([
    inWorker(source, { home: host.home, runId: parked }),
    inWorker(source, { home: host.home, runId: parked }),
    host.client.status().then((s) => ({ pid: s.pid, status: 'waiting' })),
  ]);
  for (const r of results) assert.deepEqual(r, { pid: host.pid, status: 'waiting' });
});

test('closing a client rejects calls in flight with client_closed, without a hang', async () => {
  const c = await host.connect();
  const sub = await c.subscribe({ runId: parked });
  // Nothing will happen to this run: in flight until close.
  const pendingEvent = sub.next().then(
    (v) => ({ value: v }),
    (e) => ({ code: e.code }),
  );
  const waiting = c.waitForRun(parked); // in flight until close
  const calls = Array.from({ length: 100 }, (_, i) => (i % 2 ? c.status() : c.runStatus(parked)));
  const all = Promise.allSettled([...calls, waiting]);
  await c.close();
  const settled = await all;
  for (const s of settled) {
    if (s.status === 'rejected') assert.equal(s.reason.code, 'client_closed', s.reason.message);
  }
  assert.equal(settled.at(-1).status, 'rejected', 'the waiter was in flight');
  const ev = await pendingEvent;
  assert.ok(ev.value === null || ev.code === 'client_closed', JSON.stringify(ev));
  await assert.rejects(c.status(), code('client_closed'));
  assert.equal(c.isOpen, false);
  // The host and other clients are unaffected.
  assert.equal((await host.client.runStatus(parked)).run.status, 'waiting');
});

test('a worker thread that closes its client mid-flight and exits leaves no hang', async () => {
  const message = await inWorker(
    `const { parentPort, workerData } = await import('node:worker_threads');
     const c = await piw.Client.connect({ home: workerData.home, start: false });
     const all = Promise.allSettled(Array.from({ length: 50 }, () => c.status()));
     await c.close();
     const settled = await all;
     const codes = settled.filter((s) => s.status === 'rejected').map((s) => s.reason.code);
     parentPort.postMessage({ done: settled.length, codes: [...new Set(codes)] });`,
    { home: host.home },
  );
  assert.equal(message.done, 50);
  assert.ok(message.codes.every((c) => c === 'client_closed'), JSON.stringify(message.codes));
});

test('a relative PIW_HOME is refused with invalid_home, also from a worker thread', async () => {
  // A worker thread's process.env is its own copy: the package hands that PIW_HOME to the
  // addon, which refuses it as the CLI does. `start: false`: nothing is created in the working
  // directory (the test process's), not even where the check is missing.
  const message = await inWorker(
    `
    const { parentPort } = await import('node:worker_threads');
    process.env.PIW_HOME = './rel/home';
    try {
      await piw.Client.connect({ start: false });
      parentPort.postMessage({ code: 'none' });
    } catch (e) {
      parentPort.postMessage({ code: e.code, message: e.message });
    }`,
    {},
  );
  assert.deepEqual(message, {
    code: 'invalid_home',
    message: 'PIW_HOME must be an absolute path, got ./rel/home',
  });
});

test('the example runner says a relative PIW_HOME is refused and exits 1', () => {
  const cwd = tempDir();
  try {
    const r = spawnSync(
      process.execPath,
      [join(pkgDir, '..', 'examples', 'run.mjs'), join(pkgDir, '..', 'examples', 'hello.workflow.json')],
      // PIW_HOST_BIN=/bin/false: no host could start here even if the home were accepted.
      { cwd, encoding: 'utf8', env: { ...process.env, PIW_HOME: 'rel', PIW_HOST_BIN: '/bin/false' } },
    );
    assert.equal(r.status, 1, r.stderr);
    assert.equal(r.stderr.trim(), 'piw: PIW_HOME must be an absolute path, got rel [invalid_home]');
    assert.deepEqual(readdirSync(cwd), [], 'nothing made in the working directory');
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
});

test('connecting where no host runs fails with connect_failed', async () => {
  await assert.rejects(
    Client.connect({ home: `${host.dir}/nowhere`, start: false }),
    code('connect_failed'),
  );
});
