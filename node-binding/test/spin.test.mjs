// A node that never yields (`while (true) {}`): the host kills its child at the node's deadline
// and routes the run on `timed_out`, and a separate client process stays responsive meanwhile.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { alive, pkgIndex, sleep, startHost, writeWorkflow } from './helpers.mjs';

let host;

before(async () => {
  host = await startHost();
});

after(async () => {
  await host?.stop();
});

/** Runs a second Node process that keeps 100 calls in flight and reports its event-loop lag. */
function probeLag(home, runId) {
  const script = join(host.dir, 'lag-probe.mjs');
  writeFileSync(
    script,
    `import { monitorEventLoopDelay } from 'node:perf_hooks';
    import { Client } from ${JSON.stringify(pkgIndex)};
    const client = await Client.connect({ home: ${JSON.stringify(home)}, start: false });
    const h = monitorEventLoopDelay({ resolution: 5 });
    h.enable();
    let ok = 0;
    for (let round = 0; round < 5; round++) {
      const calls = Array.from({ length: 100 }, (_, i) =>
        i % 2 ? client.status() : client.runStatus(${JSON.stringify(runId)}));
      ok += (await Promise.all(calls)).length;
      await new Promise((r) => setTimeout(r, 20));
    }
    h.disable();
    await client.close();
    console.log(JSON.stringify({ ok, maxLagMs: h.max / 1e6, meanLagMs: h.mean / 1e6 }));`,
  );
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`probe exited ${code}`))));
  });
}

test('a node spinning forever is killed at its deadline; clients stay responsive', async (t) => {
  const file = writeWorkflow(
    host.dir,
    'spin',
    `export default piw.defineWorkflow({
      name: 'spin', start: 'spin',
      nodes: {
        spin: piw.compute(() => { while (true) {} }, { timeoutMs: 1500 }),
        after: piw.compute(() => ({ recovered: 'after timeout' })),
      },
      edges: [piw.onOutcome('spin', { timed_out: 'after' })],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  // Wait until the node body is spinning.
  let spinning;
  for (let i = 0; i < 500 && !spinning; i++) {
    const s = await c.runStatus(runId);
    spinning = s.attempts.find((a) => a.node_id === 'spin' && a.status === 'running');
    if (!spinning) await sleep(10);
  }
  assert.ok(spinning, 'the spin node started');
  const children = () => host.client.status().then((s) => s.active_children);
  assert.equal(await children(), 1);

  const lag = await probeLag(host.home, runId);
  t.diagnostic(`second client: max event-loop lag ${lag.maxLagMs.toFixed(1)} ms, mean ${lag.meanLagMs.toFixed(1)} ms, ${lag.ok} calls`);
  assert.equal(lag.ok, 500);
  assert.ok(lag.maxLagMs < 50, `event-loop lag ${lag.maxLagMs} ms with 100 calls in flight`);

  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', JSON.stringify(run));
  assert.deepEqual(run.result, { recovered: 'after timeout' });
  // The timeout is a durable boundary: the host routes to `after` and parks the run for a
  // fresh child (the boundary shows as an attempt interrupted with `parked`).
  const { attempts } = await c.runStatus(runId);
  assert.deepEqual(
    attempts
      .filter((a) => a.error !== 'parked')
      .map((a) => [a.node_id, a.status])
      .reverse(), // newest first
    [['spin', 'timed_out'], ['after', 'succeeded']],
  );
  // The spinning child is gone (its whole group was killed).
  for (let i = 0; i < 200 && (await children()) > 0; i++) await sleep(10);
  assert.equal(await children(), 0);
  assert.equal(alive(host.pid), true);
});
