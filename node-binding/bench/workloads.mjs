// Benchmarks W1a, W1b and W2 of the Node addon (prints figures; asserts nothing).
//
//   node bench/workloads.mjs            (from node-binding/, after `npm run build`)
//
// Every workload runs against a real host (every commit fsynced before it is acknowledged) in a
// temp PIW_HOME, next to
// floors measured in the same run: a bare SQLite commit (WAL, synchronous=FULL, through
// node:sqlite in the same directory) and a bare `node -e 0` start.
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';

import { Client, findHostBin } from '../index.js';

const pkgIndex = new URL('../index.js', import.meta.url).pathname;
const hostBin = process.env.PIW_HOST_BIN ?? findHostBin();
const dir = mkdtempSync(join(tmpdir(), 'piw-bench-'));
// Milliseconds on CLOCK_MONOTONIC, which every process on the machine shares: W2 compares a
// stamp taken in the client with one taken in the worker. Not `performance.timeOrigin +
// performance.now()`: each process's time origin is off the wall clock by about its own
// bootstrap time (measured here: ~1.2 ms late), which skewed W2 by that much.
const now = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p99 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.99))];
const fmt = (ms) => `${ms.toFixed(2)} ms`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function bareCommitMs(n = 200) {
  const db = new DatabaseSync(join(dir, 'floor.sqlite'));
  db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)');
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  const times = [];
  for (let i = 0; i < n; i++) {
    const t = now();
    insert.run(`value ${i}`);
    times.push(now() - t);
  }
  db.close();
  return median(times);
}

function bareNodeStartMs(n = 15) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const t = now();
    spawnSync(process.execPath, ['-e', '0']);
    times.push(now() - t);
  }
  return median(times);
}

/** The hosts started, stopped at the end even when a workload fails. */
const hosts = [];

async function host(name, env = {}) {
  const home = join(dir, name);
  const client = await Client.connect({ home, hostBin, hostEnv: { HOME: dir, ...env } });
  hosts.push({ home, client });
  return { home, client };
}

function workflow(name, body) {
  const file = join(dir, `${name}.workflow.mjs`);
  writeFileSync(file, `import * as piw from ${JSON.stringify(pkgIndex)};\n${body}\n`);
  return file;
}

const twenty = workflow(
  'twenty',
  `const nodes = {};
  const edges = [];
  for (let i = 0; i < 20; i++) {
    nodes['n' + i] = piw.compute({ run: ({ outputs }) => ({ step: i, total: (outputs['n' + (i - 1)]?.total ?? 0) + i }) });
    if (i > 0) edges.push({ from: 'n' + (i - 1), to: 'n' + i });
  }
  export default piw.defineWorkflow({ name: 'twenty', startAt: 'n0', nodes, edges });`,
);

const stamp = workflow(
  'stamp',
  `import { appendFileSync } from 'node:fs';
  export default piw.defineWorkflow({ name: 'stamp', startAt: 'first', edges: [], nodes: {
    first: piw.compute({ run: ({ input }) => {
      appendFileSync(input.file, String(Number(process.hrtime.bigint()) / 1e6) + '\\n');
      return { ok: true };
    } }),
  } });`,
);

async function runOnce(client, file, input) {
  const { run_id: runId } = await client.startRun(file, { input });
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  if (run.status !== 'completed') throw new Error(`run ${runId} ended ${run.status}: ${run.error}`);
  return run;
}

/** Start call to first node body, `n` times, one after another. */
async function activation(client, label, n, settleMs) {
  const file = join(dir, `${label}.stamps`);
  writeFileSync(file, '');
  const starts = [];
  for (let i = 0; i < n; i++) {
    await sleep(settleMs); // let a standby pool refill between activations
    starts.push(now());
    await runOnce(client, stamp, { file });
  }
  const stamps = readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);
  return stamps.map((t, i) => t - starts[i]);
}

try {
  const commit = bareCommitMs();
  const nodeStart = bareNodeStartMs();
  console.log('floors');
  console.log(`  bare SQLite commit (WAL, synchronous=FULL)  p50 ${fmt(commit)}`);
  console.log(`  bare \`node -e 0\` start                       p50 ${fmt(nodeStart)}`);

  const warm = await host('warm');
  for (let i = 0; i < 3; i++) await runOnce(warm.client, twenty, { total: 0 }); // warm-up

  const w1a = [];
  for (let i = 0; i < 9; i++) {
    await sleep(150);
    const t = now();
    await runOnce(warm.client, twenty, { total: 0 });
    w1a.push(now() - t);
  }
  console.log('W1a: one run of 20 compute nodes, start call to awaited result (9 runs)');
  console.log(`  p50 ${fmt(median(w1a))}   min ${fmt(Math.min(...w1a))}   max ${fmt(Math.max(...w1a))}   target <= 15 ms`);
  console.log(`  = ${(median(w1a) / commit).toFixed(1)} bare commits; 20 nodes need >= 21 commits at one per transition`);

  await sleep(300);
  const t0 = now();
  const started = await Promise.all(
    Array.from({ length: 50 }, () => warm.client.startRun(twenty, { input: { total: 0 } })),
  );
  const runs = await Promise.all(started.map((s) => warm.client.waitForRun(s.run_id, { timeoutMs: 120_000 })));
  const w1b = now() - t0;
  const failed = runs.filter((r) => r.status !== 'completed').length;
  console.log('W1b: 50 such runs started at once');
  console.log(
    `  total ${fmt(w1b)}   ${((50 * 20) / (w1b / 1000)).toFixed(0)} steps/s   target >= 5000 steps/s` +
      (failed ? `   (${failed} runs did not complete!)` : ''),
  );
  console.log(`  floor: 1000 bare commits one after another = ${fmt(1000 * commit)}`);
  const cores = availableParallelism();
  console.log(
    `  floor: 50 runs need 50 worker processes (one run per process): 50 bare node starts on ${cores} cores >= ${fmt((50 * nodeStart) / cores)}` +
      ` -> at most ${((50 * 20) / ((50 * nodeStart) / cores / 1000)).toFixed(0)} steps/s before any workflow work`,
  );

  await activation(warm.client, 'warmup', 3, 150);
  const w2 = await activation(warm.client, 'w2', 20, 150);
  console.log('W2: start call to first node body running, standby workers (20 runs)');
  console.log(`  p50 ${fmt(median(w2))}   p99 ${fmt(p99(w2))}   target <= 3 ms`);

  // The standby pools drain after PIW_STANDBY_IDLE_MS without a launch; the first start after
  // that spawns a cold worker (and refills the pool). Short idle time here; 10 minutes by default.
  const drained = await host('drained', { PIW_STANDBY_IDLE_MS: '300' });
  const rssKiB = async (client) => {
    const { pid } = await client.status();
    return Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
  };
  // The host logs each drain; a drain can come before the run that refilled the pool has
  // finished, so the bench counts them rather than watching the pool.
  const drains = () => (readFileSync(join(drained.home, 'host.log'), 'utf8').match(/standby pools drained/g) ?? []).length;
  const drainedAfter = async (before) => {
    const end = now() + 30_000;
    while (drains() <= before) {
      if (now() > end) throw new Error('timed out waiting for the standby pool to drain');
      await sleep(20);
    }
    await sleep(200); // the drained workers exit
  };
  let count = drains();
  await activation(drained.client, 'drainedwarmup', 1, 0);
  const afterDrain = [];
  for (let i = 0; i < 5; i++) {
    await drainedAfter(count);
    count = drains();
    afterDrain.push(...(await activation(drained.client, `drained${i}`, 1, 0)));
  }
  await drainedAfter(count);
  const rssDrained = await rssKiB(drained.client);
  const rssWithPool = await rssKiB(warm.client);
  const { standby_workers: warmPool } = await warm.client.status();
  console.log('First start after the standby pool drained (5 runs), next to W2 warm');
  console.log(`  p50 ${fmt(median(afterDrain))}   (W2 warm p50 ${fmt(median(w2))})`);
  console.log(`  host resident: ${(rssWithPool / 1024).toFixed(1)} MiB with ${warmPool} standby workers (after W1b and W2), ${(rssDrained / 1024).toFixed(1)} MiB drained   target <= 10 MiB idle`);

  const cold = await host('cold', { PIW_STANDBY_WORKERS: '0' });
  await activation(cold.client, 'coldwarmup', 2, 0);
  const c = await activation(cold.client, 'cold', 10, 0);
  console.log('Cold activation (no standby workers), start call to first node body (10 runs)');
  console.log(
    `  p50 ${fmt(median(c))}   = ${(median(c) / nodeStart).toFixed(2)}x a bare node start   target <= 1.3x`,
  );
} finally {
  for (const h of hosts) {
    await h.client.request('host.stop').catch(() => {});
    await h.client.close().catch(() => {});
  }
  await sleep(300);
  rmSync(dir, { recursive: true, force: true });
}
