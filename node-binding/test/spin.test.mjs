// A node that never yields (`while (true) {}`): the host kills its child at the node's deadline
// and routes the run on `timed_out`, and a separate client process stays responsive meanwhile, also
// while the host itself does not answer.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { alive, pkgIndex, sleep, startHost, writeWorkflow } from './helpers.mjs';

let host;

// The host runs on a test clock: the node's deadline passes when the test moves the clock,
// never while a slow machine is still looking for the node.
let clock;
let clockOffset = 0;
function advanceClock(ms) {
  clockOffset += ms;
  writeFileSync(`${clock}.tmp`, String(clockOffset));
  renameSync(`${clock}.tmp`, clock);
}

before(async () => {
  const { tempDir } = await import('./helpers.mjs');
  clock = join(tempDir('piw-clock-'), 'clock');
  host = await startHost({ PIW_TEST_CLOCK: clock });
});

after(async () => {
  await host?.stop();
});

/** How long the test stops the host while the probe's calls are in flight. */
const STALL_MS = 3_000;

/**
 * Runs a second Node process that keeps 100 calls in flight on a host that does not answer
 * (stopped with SIGSTOP for STALL_MS) and reports its event-loop lag. A client that waited on
 * the host on its event loop would lag by the whole stall; a free loop lags by its own
 * scheduling noise (tens of milliseconds on a loaded machine).
 */
async function probeLagThroughAStall(home, runId, hostPid) {
  const script = join(host.dir, 'lag-probe.mjs');
  writeFileSync(
    script,
    `import { monitorEventLoopDelay } from 'node:perf_hooks';
    import { Client } from ${JSON.stringify(pkgIndex)};
    const client = await Client.connect({ home: ${JSON.stringify(home)}, start: false });
    await client.status();
    process.stdout.write('ready\\n');
    await new Promise((r) => process.stdin.once('data', r));
    const h = monitorEventLoopDelay({ resolution: 5 });
    h.enable();
    const started = performance.now();
    const calls = Array.from({ length: 100 }, (_, i) =>
      i % 2 ? client.status() : client.runStatus(${JSON.stringify(runId)}));
    const ok = (await Promise.all(calls)).length;
    const waitedMs = performance.now() - started;
    h.disable();
    await client.close();
    process.stdout.write(JSON.stringify({ ok, waitedMs, maxLagMs: h.max / 1e6, meanLagMs: h.mean / 1e6 }) + '\\n');
    process.exit(0);`,
  );
  const p = spawn(process.execPath, [script], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const exited = new Promise((resolve, reject) => {
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`probe exited ${code}: ${out}`))));
  });
  const ready = new Promise((resolve) => {
    p.stdout.on('data', (d) => {
      out += d;
      if (out.startsWith('ready\n')) resolve();
    });
  });
  await Promise.race([ready, exited]);
  process.kill(hostPid, 'SIGSTOP');
  try {
    p.stdin.write('go\n');
    await sleep(STALL_MS);
  } finally {
    process.kill(hostPid, 'SIGCONT');
  }
  await exited;
  return JSON.parse(out.slice('ready\n'.length));
}

test('a node spinning forever is killed at its deadline; clients stay responsive', async (t) => {
  const file = writeWorkflow(
    host.dir,
    'spin',
    `export default piw.defineWorkflow({
      name: 'spin', startAt: 'spin',
      nodes: {
        spin: piw.compute({ run: () => { while (true) {} }, timeoutMs: 60_000 }),
        after: piw.compute({ run: () => ({ recovered: 'after timeout' }) }),
      },
      edges: [{ from: 'spin', switch: { on: '$result.outcome', cases: { timed_out: 'after' } } }],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  // Wait until the node body is spinning.
  let spinning;
  for (let i = 0; i < 3000 && !spinning; i++) {
    const s = await c.runStatus(runId);
    spinning = s.attempts.find((a) => a.node_id === 'spin' && a.status === 'running');
    if (!spinning) await sleep(10);
  }
  assert.ok(spinning, 'the spin node started');
  const children = () => host.client.status().then((s) => s.active_children);
  assert.equal(await children(), 1);

  const lag = await probeLagThroughAStall(host.home, runId, host.pid);
  t.diagnostic(
    `second client: ${lag.ok} calls in flight for ${lag.waitedMs.toFixed(0)} ms on a stopped host; ` +
      `max event-loop lag ${lag.maxLagMs.toFixed(1)} ms, mean ${lag.meanLagMs.toFixed(1)} ms`,
  );
  assert.equal(lag.ok, 100);
  // The calls were in flight through the stall (nothing answers a stopped host) ...
  assert.ok(lag.waitedMs >= STALL_MS / 2, `the calls waited only ${lag.waitedMs} ms`);
  // ... and the client's loop stayed free: a loop blocked on them would lag by the stall.
  assert.ok(lag.maxLagMs < STALL_MS / 3, `event-loop lag ${lag.maxLagMs} ms through a ${STALL_MS} ms stall`);

  // Past the node's deadline on the host's clock, in steps shorter than a lease (a longer jump
  // is a host stall, after which the claim could not renew itself): the host kills the child.
  for (let step = 0; step < 4; step++) {
    advanceClock(20_000);
    await c.runStatus(runId); // wakes a host asleep until an older deadline ...
    await c.runStatus(runId); // ... which has done that work by this answer
  }
  const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
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
    [['spin', 'timed_out'], ['after', 'ok']],
  );
  // The spinning child is gone (its whole group was killed).
  for (let i = 0; i < 3000 && (await children()) > 0; i++) await sleep(10);
  assert.equal(await children(), 0);
  assert.equal(alive(host.pid), true);
});
