// pruneRuns against a real host: finished runs go with a dry run first, runs still going stay.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { startHost, writeWorkflow } from './helpers.mjs';

let host;

before(async () => {
  host = await startHost();
});

after(async () => {
  await host?.stop();
});

test('pruneRuns removes finished runs only, and a dry run changes nothing', async () => {
  const c = host.client;
  const quick = writeWorkflow(
    host.dir,
    'quick',
    `export default piw.defineWorkflow({
      name: 'quick', startAt: 'done',
      nodes: { done: piw.compute({ run: () => ({ ok: true }) }) }, edges: [],
    });`,
  );
  const gate = writeWorkflow(
    host.dir,
    'gate',
    `export default piw.defineWorkflow({
      name: 'gate', startAt: 'gate',
      nodes: { gate: piw.checkpoint({ summary: 'go on?' }) }, edges: [],
    });`,
  );
  const finished = [];
  for (let i = 0; i < 3; i++) {
    const { run_id } = await c.startRun(quick);
    await c.waitForRun(run_id, { timeoutMs: 60_000 });
    finished.push(run_id);
  }
  const { run_id: waiting } = await c.startRun(gate);
  const parked = await c.waitForRun(waiting, { untilParked: true, timeoutMs: 60_000 });
  assert.equal(parked.status, 'waiting');

  const dry = await c.pruneRuns({ keep: 1, dryRun: true });
  assert.deepEqual(dry, { dryRun: true, count: 2, runIds: finished.slice(0, 2) });
  assert.equal((await c.listRuns()).length, 4);

  const gone = await c.pruneRuns({ statuses: ['completed'], keep: 1 });
  assert.deepEqual(gone, { dryRun: false, count: 2, runIds: finished.slice(0, 2) });
  const left = (await c.listRuns()).map((r) => r.run_id).sort();
  assert.deepEqual(left, [finished[2], waiting].sort());
  assert.deepEqual(await c.pruneRuns({ keep: 0, dryRun: true }), { dryRun: true, count: 1, runIds: [finished[2]] });
  await assert.rejects(c.pruneRuns({ statuses: ['waiting'] }), (e) => e.code === 'malformed');
  assert.deepEqual(await c.diagnose(), []);
});
