// Standby workers: Node workers started ahead of time that take exactly one run's envelope.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { alive, hostBin, sleep, startHost, writeWorkflow } from './helpers.mjs';

/** Pids of the live processes whose parent is `pid`. */
function childrenOf(pid) {
  const out = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid && fields[0] !== 'Z') out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out.sort();
}

/** `/proc/<pid>/stat`, or why it could not be read. */
function procStat(pid) {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').trim();
  } catch (e) {
    return e.code;
  }
}

/** Whether `pid` runs: it exists and is not a zombie. */
function running(pid) {
  const stat = procStat(pid);
  return stat.includes(') ') && stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
}

async function until(what, f, ms = 30_000, explain = () => '') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; ${explain()}`);
    await sleep(10);
  }
}

const WHOAMI = `export default piw.defineWorkflow({ name: 'whoami', startAt: 'me', edges: [],
  nodes: { me: piw.compute({ run: () => ({ pid: process.pid, cwd: process.cwd(), runId: process.env.PIW_RUN_ID }) }) } });`;

test('a standby worker serves exactly one run, in its project directory, and the pool refills', async () => {
  const host = await startHost({ PIW_STANDBY_WORKERS: '2' });
  try {
    const file = writeWorkflow(host.dir, 'whoami', WHOAMI);
    const projectDir = join(host.dir, 'project');
    mkdirSync(projectDir);
    const c = host.client;
    assert.deepEqual(childrenOf(host.pid), [], 'no standby worker before the first Node run');
    const run = async () => {
      const { run_id: runId } = await c.startRun(file, { projectDir });
      const r = await c.waitForRun(runId, { timeoutMs: 20_000 });
      assert.equal(r.status, 'completed', r.error);
      assert.equal(r.result.runId, runId);
      assert.equal(r.result.cwd, projectDir);
      return r.result.pid;
    };
    const cold = await run();
    const standby = await until('two standby workers', () => {
      const kids = childrenOf(host.pid).filter((p) => p !== cold);
      return kids.length === 2 ? kids : null;
    });
    const served = [];
    for (let i = 0; i < 4; i++) {
      served.push(await run());
      // Let the pool refill before the next activation.
      await until('the pool to refill', () => childrenOf(host.pid).filter((p) => !served.includes(p)).length >= 2);
    }
    assert.ok(standby.includes(served[0]), `run served by a standby worker ${served[0]} of ${standby}`);
    assert.equal(new Set([cold, ...served]).size, 5, 'every run had its own process');
    const waiting = childrenOf(host.pid).filter((p) => !served.includes(p) && p !== cold);
    assert.equal(waiting.length, 2);
    await host.stop();
    for (const pid of waiting) await until(`standby worker ${pid} to exit`, () => !alive(pid));
  } finally {
    await host.stop();
  }
});

test("a run served by a standby worker has that worker's output in its log (`piw logs`)", async () => {
  const host = await startHost({ PIW_STANDBY_WORKERS: '1' });
  try {
    const file = writeWorkflow(
      host.dir,
      'noisy',
      `export default piw.defineWorkflow({ name: 'noisy', startAt: 'say', edges: [],
        nodes: { say: piw.compute({ run: () => { console.error('said by ' + process.env.PIW_RUN_ID);
          console.log('on stdout too'); return { pid: process.pid }; } }) } });`,
    );
    const run = async () => {
      const { run_id: runId } = await host.client.startRun(file);
      const r = await host.client.waitForRun(runId, { timeoutMs: 20_000 });
      assert.equal(r.status, 'completed', r.error);
      return { runId, pid: r.result.pid };
    };
    const cold = await run();
    const [standby] = await until('a standby worker', () => {
      const kids = childrenOf(host.pid).filter((p) => p !== cold.pid);
      return kids.length === 1 ? kids : null;
    });
    const warm = await run();
    assert.equal(warm.pid, standby, 'served by the standby worker');
    for (const { runId } of [cold, warm]) {
      const logs = JSON.parse(
        execFileSync(hostBin, ['logs', runId, '--json'], { env: { ...process.env, PIW_HOME: host.home } }),
      );
      assert.equal(logs.children.length, 1, JSON.stringify(logs));
      const output = logs.children[0].output;
      assert.ok(output.includes(`said by ${runId}\n`) && output.includes('on stdout too\n'), output);
    }
  } finally {
    await host.stop();
  }
});

test('an idle host drains its standby pools (PIW_STANDBY_IDLE_MS) and the next run refills them', async () => {
  // The drain counts from the pool's last change (a launch, or a worker that joined), so each
  // worker is seen waiting before it goes; a hang would only reach the generous deadlines.
  const host = await startHost({ PIW_STANDBY_WORKERS: '2', PIW_STANDBY_IDLE_MS: '5000' });
  try {
    const file = writeWorkflow(host.dir, 'whoami', WHOAMI);
    const c = host.client;
    const run = async () => {
      const { run_id: runId } = await c.startRun(file);
      const r = await c.waitForRun(runId, { timeoutMs: 20_000 });
      assert.equal(r.status, 'completed', r.error);
      return r.result.pid;
    };
    for (let round = 0; round < 2; round++) {
      const pid = await run();
      const pool = await until(`round ${round}: the pool to fill`, () => {
        const kids = childrenOf(host.pid).filter((p) => p !== pid);
        return kids.length === 2 ? kids : null;
      });
      await until(`round ${round}: the pool to drain`, () => childrenOf(host.pid).length === 0, 30_000, () =>
        `children ${childrenOf(host.pid)}`,
      );
      for (const p of pool) assert.ok(!running(p), `standby worker ${p} stopped`);
      assert.equal((await c.status()).standby_workers, 0);
    }
  } finally {
    await host.stop();
  }
});

test('PIW_STANDBY_WORKERS=0 starts no standby worker', async () => {
  // The host keeps a pool only for launches that name one, and with 0 workers none does
  // (host_dispatch::no_standby_pool_is_named_when_standby_workers_is_zero): here, that the
  // setting reaches the host. No sleep-then-"nothing happened": the run's own child is the
  // last child the host has, and once it is gone no process of the host is left.
  const host = await startHost({ PIW_STANDBY_WORKERS: '0' });
  try {
    const file = writeWorkflow(host.dir, 'whoami', WHOAMI);
    for (let i = 0; i < 2; i++) {
      const { run_id: runId } = await host.client.startRun(file);
      assert.equal((await host.client.waitForRun(runId, { timeoutMs: 20_000 })).status, 'completed');
      await until('the run\'s child gone', () => childrenOf(host.pid).length === 0);
      assert.equal((await host.client.status()).standby_workers, 0);
    }
  } finally {
    await host.stop();
  }
});

test('standby workers killed while they wait cost no run anything', async () => {
  const host = await startHost({ PIW_STANDBY_WORKERS: '3' });
  try {
    const file = writeWorkflow(host.dir, 'whoami', WHOAMI);
    const c = host.client;
    const run = async () => {
      const { run_id: runId } = await c.startRun(file, { sessionId: 'standby-deaths' });
      return c.waitForRun(runId, { timeoutMs: 20_000 });
    };
    // Every event of these runs: a loss would show as `child_lost`.
    const kinds = [];
    const sub = await c.subscribe({ sessionId: 'standby-deaths' });
    const watching = (async () => {
      for await (const e of sub) kinds.push(e.event_kind);
    })();
    const served = [(await run()).result.pid];
    for (let round = 0; round < 3; round++) {
      const idle = await until('three standby workers', () => {
        const kids = childrenOf(host.pid).filter((p) => !served.includes(p));
        return kids.length >= 3 ? kids : null;
      });
      for (const pid of idle) process.kill(pid, 'SIGKILL');
      const runs = await Promise.all([run(), run(), run()]);
      served.push(...runs.map((r) => r.result?.pid));
      for (const r of runs) {
        assert.equal(r.status, 'completed', `${r.status}: ${r.review_reason ?? r.error}`);
        assert.ok(!idle.includes(r.result.pid), 'no run was served by a killed worker');
      }
    }
    await sub.close();
    await watching;
    assert.equal(kinds.filter((k) => k === 'child_lost').length, 0, `events: ${kinds.join(' ')}`);
    assert.equal(kinds.filter((k) => k === 'completed').length, 10);
  } finally {
    await host.stop();
  }
});

test('a standby worker handed a run whose commit then fails is stopped, and the run goes on later', async () => {
  // The answer's batch activates the run and hands a standby worker its envelope before the
  // commit; this host fails that commit once (as a full disk would).
  const host = await startHost({
    PIW_STANDBY_WORKERS: '1',
    PIW_FAULT: 'fail_commit:checkpoint.answer',
    PIW_HANDSHAKE_TIMEOUT_MS: '120000',
  });
  try {
    const file = writeWorkflow(
      host.dir,
      'gate',
      `export default piw.defineWorkflow({ name: 'gate', startAt: 'ask',
        nodes: { ask: piw.checkpoint({ summary: 'go?' }),
                 done: piw.compute({ run: () => ({ pid: process.pid }) }) },
        edges: [{ from: 'ask', to: 'done' }] });`,
    );
    const c = host.client;
    const { run_id: runId } = await c.startRun(file, {});
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
    // The run's own child must be gone first (its exit recorded): while the host still counts
    // it, the run is not activated in the answer's batch, so no worker gets the envelope before
    // the failing commit and the worker below is never stopped. (Seen on a loaded machine: the
    // pool's worker sleeping as the host's only child, 30 s after the answer.)
    await until("the run's own child to be gone", async () => (await c.status()).active_children === 0);
    // Then the host's one child is the pool's worker.
    const [standby] = await until('a standby worker', () => {
      const kids = childrenOf(host.pid);
      return kids.length === 1 ? kids : null;
    });
    // The process exists as soon as it is forked; the pool lists it a moment later (after its
    // spawn returns). Only a listed worker is handed a run.
    await until('the pool to list its worker', async () => (await c.status()).standby_workers === 1);
    const { decisions } = await c.runStatus(runId);
    const failed = await c.answerCheckpoint(runId, decisions[0].decision_id, 'yes').catch((e) => e);
    assert.ok(failed instanceof Error, 'the answer did not commit');
    assert.equal(failed.code, 'internal');
    // Gone or a zombie (the host reaps its children when it is done with them), and said
    // what it was when it was not.
    await until(`the standby worker ${standby} that got the envelope to be stopped`, () => !running(standby), 30_000, () =>
      `its /proc stat: ${procStat(standby)}; the host's children: ${childrenOf(host.pid).map((p) => `${p} ${procStat(p)}`).join(' | ')}`);
    // The host counted it until it was gone.
    await until('no live child', async () => (await c.status()).active_children === 0);
    assert.equal((await c.runStatus(runId)).run.status, 'waiting', 'the run is as before the answer');
    await c.answerCheckpoint(runId, decisions[0].decision_id, 'yes');
    const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(run.status, 'completed', run.error);
    assert.notEqual(run.result.pid, standby);
  } finally {
    await host.stop();
  }
});

test('the standby warm-up rehearses a whole run and leaves nothing behind', async () => {
  const { warmUp } = await import('../lib/runtime.js');
  const cwd = process.cwd();
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const before = timers();
  assert.equal(await warmUp(), true, 'the warm-up workflow ran to its end');
  assert.equal(process.cwd(), cwd);
  assert.equal(timers(), before, 'no timer left pending');
});
