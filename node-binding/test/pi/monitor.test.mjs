// The built-in monitor end to end: real Pi with the extension, the mock model answering each
// check as the test scripts it, and the host on a test clock so that the durable wait between
// checks ends when the test moves the clock (never by waiting real time). A goal reached after
// a wait and an action; a host killed while the run waits; the checks running out; unknown
// input failing the run before any step. (The bounds on actions and repairs: test/builtins.test.mjs.)
import assert from 'node:assert/strict';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { Client } from '../../index.js';
import { PLAN, PLAN_DOC, fixtureRepo } from '../fixture-repo.mjs';
import { alive, hostBin, piEnv, until } from './harness.mjs';

let env;
let clock;
beforeEach(async () => {
  env = await piEnv();
  clock = join(env.root, 'clock');
});
afterEach(async () => {
  await env?.close();
});

/** Moves the host's test clock `ms` ahead of the wall clock. */
const advance = (ms) => {
  writeFileSync(`${clock}.tmp`, String(ms));
  renameSync(`${clock}.tmp`, clock);
};
/** A client that starts the host (when none runs) on the test clock. */
const clockedClient = () =>
  Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock } });

const textOf = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((b) => b.text ?? '').join(''));
const stepOf = (m) => {
  const t = textOf(m);
  const id = /"interactionId":"([^"]+)"/.exec(t)?.[1];
  const node = /, step: ([\w.-]+), attempt:/.exec(t)?.[1];
  return m.role === 'user' && id && node ? { id, node, text: t } : null;
};

/**
 * The mock model: each step of node `n` takes the next answer of `answers[n]` (a step asked
 * again, as a steer can, gets the same one); `seen` collects the step texts in order.
 */
function sequenced(answers, seen = []) {
  const given = new Map();
  const next = Object.fromEntries(Object.entries(answers).map(([k, v]) => [k, [...v]]));
  return ({ last }) => {
    if (last.role === 'tool') return { text: 'done' };
    const step = stepOf(last);
    if (!step) return { text: 'ok' };
    if (!given.has(step.id)) {
      assert.ok(next[step.node]?.length, `no scripted answer left for step ${step.node}`);
      given.set(step.id, next[step.node].shift());
      seen.push(step);
    }
    return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step.id, output: given.get(step.id) } } };
  };
}

const TASK = 'Keep the nightly build going until all 10 modules are built. You may restart the build with `make resume`; do not change the sources.';
const moving = (completed) => ({
  route: 'wait',
  summary: `The build is running: ${completed} of 10 modules built.`,
  goal: 'incomplete',
  work: 'running',
  evidence: [`build.log: module ${completed} finished`],
  progress: [{ key: 'modules', label: 'Modules built', status: 'running', completed, total: 10, unit: 'modules' }],
});
const stalled = {
  route: 'act',
  summary: 'The build stopped at module 7 and nothing runs.',
  goal: 'incomplete',
  work: 'idle',
  evidence: ['build.log ends with "killed"', 'no make process'],
  action: {
    kind: 'recover',
    what: 'modules 8 to 10 are not built',
    next: 'run `make resume`',
    authority: 'the task allows restarting the build with make resume',
    changes: ['the build directory'],
    verify: 'build.log shows module 8 starting',
    failureId: 'build-killed',
    stateId: 'module-7',
  },
};
const finished = { route: 'done', summary: 'All 10 modules are built.', goal: 'complete', work: 'stopped', evidence: ['build.log: 10 of 10'] };

async function onlyRun(client) {
  return until(async () => (await client.listRuns({ sessionId: 'session-a' }))[0]?.run_id, 'the run');
}

/** Waits until the run sleeps on its timer, and returns its status. */
async function sleeping(client, runId) {
  return until(async () => {
    const s = await client.runStatus(runId);
    return s.run.status === 'waiting' && s.run.wake_at && !s.claim?.owner_id && s;
  }, 'the run waiting on its timer');
}

test('monitor: a check that waits reports progress and sleeps without a process; the next check acts, the one after finds the goal done', async () => {
  const seen = [];
  env.model.script = sequenced({ observe: [moving(3), stalled, finished], act: [{ status: 'done', evidence: ['make resume started module 8'] }] }, seen);
  const client = await clockedClient();
  try {
    const pi = await env.startPi({ extraEnv: { PIW_TEST_CLOCK: clock } });
    const from = pi.mark();
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, stopWhen: 'all 10 modules are built', everyMinutes: 15 })}`);
    const runId = await onlyRun(client);
    const waiting = await sleeping(client, runId);
    // The wake time was decided once, 15 minutes after the check; nothing runs meanwhile.
    assert.ok(waiting.run.wake_at >= Date.now() + 14 * 60_000, JSON.stringify(waiting.run));
    // The run's child has exited: the timer is the host's.
    const child = (await until(async () => {
      const s = await client.runStatus(runId);
      return s.last_child?.exited && s;
    }, "the run's child gone")).last_child;
    assert.equal(alive(child.pid), false, JSON.stringify(child));
    // The check's tracks are progress updates (the widget and `piw view` give their ETA), and
    // the session got the report without a model turn.
    const track = waiting.updates.find((u) => u.key === 'monitor/modules');
    assert.deepEqual({ type: track.type, completed: track.data.completed, total: track.data.total }, { type: 'progress', completed: 3, total: 10 });
    const report = await until(() => pi.customMessages('piw-message', from).find((m) => m.details?.kind === 'notify'), 'the report');
    assert.match(JSON.stringify(report.content), /Monitor check 1: The build is running: 3 of 10 modules built\. Next check in 15 min\./);
    assert.equal(seen.length, 1, 'no second check before the timer');

    advance(15 * 60_000 + 1_000);
    await client.runStatus(runId); // wakes a host asleep until the old deadline
    const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.deepEqual({ status: run.result.status, checks: run.result.checks, summary: run.result.summary }, { status: 'done', checks: 3, summary: 'All 10 modules are built.' });
    // The reference's result fields.
    assert.deepEqual(
      { reason: run.result.reason, observation: run.result.observation, goalState: run.result.goalState, workState: run.result.workState, reported: run.result.reported },
      { reason: 'the goal holds: All 10 modules are built.', observation: 'All 10 modules are built.', goalState: 'complete', workState: 'stopped', reported: true },
    );
    assert.deepEqual(seen.map((s) => s.node), ['observe', 'observe', 'act', 'observe']);
    assert.match(seen[1].text, /Check 2 of at most 1000/);
    assert.match(seen[2].text, /Take exactly this step \(recover\), nothing more: run `make resume`/);
    // The check after an action came at once (no sleep between them), told what the action did.
    assert.match(seen[3].text, /Since then: recover: run `make resume`\. It ended done: make resume started module 8/);
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

test('monitor: the host killed while a run waits; the timer fires after the restart and the goal is reached', async () => {
  const seen = [];
  env.model.script = sequenced({ observe: [moving(5), finished] }, seen);
  let client = await clockedClient();
  try {
    const pi = await env.startPi({ extraEnv: { PIW_TEST_CLOCK: clock } });
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, everyMinutes: 60 })}`);
    const runId = await onlyRun(client);
    const before = await sleeping(client, runId);
    const { pid } = await client.status();
    await client.close();
    process.kill(pid, 'SIGKILL');
    // The clock passes the wake time while no host runs; the next host fires the timer at start.
    advance(61 * 60_000);
    client = await clockedClient();
    await until(async () => (await client.status()).pid !== pid, 'another host');
    const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'done');
    assert.equal(run.result.checks, 2);
    assert.deepEqual(seen.map((s) => s.node), ['observe', 'observe']);
    // The wake time was not decided again after the restart.
    const timers = (await client.runStatus(runId)).run;
    assert.equal(timers.wake_at ?? null, null, 'no timer left');
    assert.ok(before.run.wake_at > 0);
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

test('monitor: the checks run out (limit); unknown input fails the run before any step', async () => {
  const seen = [];
  env.model.script = sequenced({ observe: [moving(1), moving(2)] }, seen);
  const client = await clockedClient();
  try {
    const pi = await env.startPi({ extraEnv: { PIW_TEST_CLOCK: clock } });
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, everyMinutes: 1, maxChecks: 2 })}`);
    const runId = await onlyRun(client);
    await sleeping(client, runId);
    advance(2 * 60_000);
    await client.runStatus(runId);
    const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.deepEqual(
      { status: run.result.status, checks: run.result.checks, goalState: run.result.goalState, workState: run.result.workState, reason: run.result.reason, observation: run.result.observation },
      { status: 'limit', checks: 2, goalState: 'incomplete', workState: 'running', reason: 'reached the limit of 2 checks', observation: 'The build is running: 2 of 10 modules built.' },
    );

    // Unknown input fails the run at its input check, before any step, saying why.
    const refused = pi.mark();
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, audience: 'ops' })}`);
    await pi.waitNotify(/workflow monitor failed/, refused);
    const [failed] = (await client.listRuns({ sessionId: 'session-a' })).filter((r) => r.run_id !== runId);
    assert.match((await client.runStatus(failed.run_id)).run.error, /monitor input audience is not supported \(it takes task, stopWhen, everyMinutes, maxChecks, checkTimeoutMinutes, repair\)/);
    assert.equal(seen.length, 2, 'no step of the refused run reached the model');
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

test('monitor: a check that outlasts checkTimeoutMinutes on the host clock ends the monitor blocked, saying so', async () => {
  let presented;
  const shown = new Promise((r) => (presented = r));
  env.model.script = ({ last }) => {
    const step = stepOf(last);
    if (!step) return { text: 'ok' };
    presented();
    return { text: 'Looking at the build', hold: new Promise(() => {}) };
  };
  const client = await clockedClient();
  try {
    const pi = await env.startPi({ extraEnv: { PIW_TEST_CLOCK: clock } });
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, everyMinutes: 1, checkTimeoutMinutes: 5 })}`);
    const runId = await onlyRun(client);
    await shown;
    // Four minutes on the host's clock: the check still runs.
    advance(4 * 60_000);
    await client.runStatus(runId);
    const before = await client.runStatus(runId);
    assert.equal(before.run.status, 'waiting', JSON.stringify(before.run)); // on its step, not ended
    // Past five: the step times out and the monitor ends, its result saying why.
    advance(5 * 60_000 + 1_000);
    await client.runStatus(runId); // wakes a host asleep until the old deadline
    const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.deepEqual(
      { status: run.result.status, stage: run.result.stage, reason: run.result.reason, checks: run.result.checks, goalState: run.result.goalState },
      { status: 'blocked', stage: 'check', reason: 'a check gave no answer within checkTimeoutMinutes (5 minutes)', checks: 0, goalState: 'blocked' },
    );
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

const repairing = {
  route: 'act',
  summary: 'The build fails: parse("") gives [0].',
  goal: 'incomplete',
  work: 'failed',
  evidence: ['npm test: empty input fails'],
  action: {
    kind: 'repair',
    what: 'parse("") gives [0]',
    next: 'make parse return [] for empty input',
    authority: 'the task allows fixing the parser',
    changes: ['src/parse.js'],
    verify: 'npm test passes',
    failureId: 'empty-input',
    stateId: 'broken',
  },
};

test('monitor: repair: false only observes; an action is refused and the model is told so', async () => {
  const seen = [];
  let refusal = null;
  env.model.script = ({ last }) => {
    if (last.role === 'tool') {
      const said = textOf(last);
      if (/only observes/.test(said) && refusal === null) {
        refusal = said;
        const id = seen.at(-1).id;
        return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { ...repairing, route: 'blocked', reason: 'a repair is needed and this monitor only observes', action: undefined } } } };
      }
      return { text: 'done' };
    }
    const step = stepOf(last);
    if (!step) return { text: 'ok' };
    seen.push(step);
    return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step.id, output: repairing } } };
  };
  const client = await clockedClient();
  try {
    const pi = await env.startPi({ extraEnv: { PIW_TEST_CLOCK: clock } });
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, repair: false })}`);
    const runId = await onlyRun(client);
    const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.match(refusal, /this monitor only observes \(its input says repair: false\): choose "wait", "done" or "blocked"/);
    assert.deepEqual({ status: run.result.status, stage: run.result.stage, reason: run.result.reason }, { status: 'blocked', stage: 'check', reason: 'a repair is needed and this monitor only observes' });
    assert.deepEqual(seen.map((s) => s.node), ['observe'], 'no plan, repair or action step');
    assert.match(seen[0].text, /This monitor only observes: it takes no action of any kind/);
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

test('monitor: repair.approval asks before repairing: the plan waits in its approval dialog, then goes on as the policy says', async () => {
  fixtureRepo(env.project);
  const seen = [];
  const answers = {
    observe: repairing,
    'plan.plan.frame': { problem: 'parse("") gives [0]', success: ['npm test passes'], inScope: ['src/parse.js'], outOfScope: ['the test'] },
    'plan.plan.options': { options: [{ id: 'guard', title: 'Guard empty input', approach: 'Return [] for an empty string.', tradeoffs: ['one branch'] }, { id: 'rewrite', title: 'Rewrite', approach: 'A tokenizer.', tradeoffs: ['more code'] }] },
    'plan.plan.ideal': { ideal: 'A parser whose grammar makes empty input an empty list', beyondReach: [], worth: ['no special cases'] },
    'plan.plan.choose': { status: 'ready', chosen: 'guard', why: 'smallest change', againstIdeal: 'the guard reaches it for this input', leftOut: [], rejected: [{ id: 'rewrite', reason: 'too much' }] },
    'plan.plan.plan': PLAN,
    'plan.doc.inspect': { route: 'update', files: [PLAN_DOC], reason: 'docs/plans holds plans' },
    'plan.doc.update': () => {
      mkdirSync(join(env.project, dirname(PLAN_DOC)), { recursive: true });
      writeFileSync(join(env.project, PLAN_DOC), '# Plan: empty input\n\nReturn [] for empty input.\n');
      return { files: [PLAN_DOC], summary: 'recorded the plan' };
    },
    'plan.doc.verify': { passed: true, commands: [], failures: [] },
  };
  env.model.script = ({ last }) => {
    if (last.role === 'tool') return { text: 'done' };
    const step = stepOf(last);
    if (!step) return { text: 'ok' };
    if (!seen.some((s) => s.id === step.id)) seen.push(step);
    if (!Object.hasOwn(answers, step.node)) return { text: 'waiting', hold: new Promise(() => {}) };
    const answer = answers[step.node];
    return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step.id, output: typeof answer === 'function' ? answer() : answer } } };
  };
  const client = await clockedClient();
  try {
    const pi = await env.startPi({ extraEnv: { PIW_TEST_CLOCK: clock } });
    const from = pi.mark();
    await pi.prompt(`/workflow monitor --input-json ${JSON.stringify({ task: TASK, repair: { approval: { mode: 'auto', timeoutMinutes: 3 }, constraints: ['keep the public API'] } })}`);
    const dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the approval dialog', from);
    assert.match(dialog.title, /Guard/);
    const runId = await onlyRun(client);
    assert.equal(seen.some((s) => s.node.startsWith('implement.')), false, 'nothing implemented before the approval');
    // The policy's own deadline (3 minutes, on the host's clock) lets the plan go on.
    advance(3 * 60_000 + 1_000);
    await client.runStatus(runId);
    await until(() => seen.some((s) => s.node.startsWith('implement.')), 'the repair implemented after the approval');
    assert.equal(seen.find((s) => s.node.startsWith('implement.')).node, 'implement.implement', 'the plan plan-change documented is not documented again');
    const planned = seen.find((s) => s.node === 'plan.plan.frame');
    assert.match(planned.text, /keep the public API/);
    await client.cancelRun(runId);
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});
