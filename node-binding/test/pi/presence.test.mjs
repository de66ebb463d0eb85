// An agent step's deadline counts only the time it is presented: while its origin session has
// a live Pi (or its detached run's bridge holds it). Pi closed for longer than the step's
// timeout costs the step nothing; with Pi open the timeout passes as before. The host runs on
// a test clock: time passes when a test moves it (`slow.workflow.mjs`: a ten-minute timeout).
import assert from 'node:assert/strict';
import { chmodSync, existsSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { DETACHED, piCli, piEnv, until } from './harness.mjs';

let env;
let clock;
const advance = (ms) => {
  writeFileSync(`${clock}.tmp`, String(ms));
  renameSync(`${clock}.tmp`, clock);
};
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('slow.workflow.mjs', 'slow');
  clock = join(env.root, 'clock');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];
const submit = (id, output) => ({ tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output } } });
const workflowFile = (name) => join(env.project, '.pi/workflows', `${name}.workflow.mjs`);
const stepOf = async (client, runId) => (await client.runStatus(runId)).interactions[0];

test('a step presented in its session, Pi closed while the clock passes its timeout: the next start presents it again and the submission is accepted', async () => {
  let stepTurns = 0;
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'tool') return { text: 'done' };
    const id = stepId(lastText);
    if (!id) return { text: 'ok' };
    stepTurns += 1;
    // The first turn on the step streams until Pi is gone.
    if (stepTurns === 1) return { text: 'Thinking', hold: new Promise(() => {}) };
    return submit(id, { title: 'After the break' });
  };
  const client = await env.client({ hostEnv: { PIW_TEST_CLOCK: clock, PIW_KILL_GRACE_MS: '300' } });
  const sessionId = 'away';
  const pi = await env.startPi({ sessionId });
  // A session Pi has saved (it writes the file once the conversation has started).
  await pi.prompt('hi');
  await pi.waitSettled();
  const from = pi.mark();
  const { run_id } = await client.startRun(workflowFile('slow'), { input: { task: 'x' }, sessionId });
  await until(() => pi.customMessages('piw-step', from)[0], 'the step');
  await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', "the step's turn streaming", from);
  assert.notEqual((await stepOf(client, run_id)).deadline_at, null, 'presented: its time runs');
  pi.child.stdin.end();
  await pi.exited;
  // Pi is gone: the step has no deadline while nobody presents it.
  await until(async () => (await stepOf(client, run_id)).deadline_at === null, 'the step released');
  advance(3_600_000);
  await client.runStatus(run_id); // wakes a host asleep until a deadline
  const waiting = await client.runStatus(run_id);
  assert.equal(waiting.run.status, 'waiting');
  assert.equal(waiting.interactions[0].status, 'pending', 'an hour with Pi closed used up none of its ten minutes');

  const again = await env.startPi({ sessionId });
  const run = await client.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: 'After the break' });
  const { attempts } = await client.runStatus(run_id);
  assert.deepEqual(attempts.filter((a) => a.node_id === 'draft').map((a) => a.status), ['ok']);
  assert.equal(again.customMessages('piw-step').length, 1, 'presented again once');
  await again.quit();
});

test('with Pi open, the clock passing the timeout expires the step as before', async () => {
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'Thinking', hold: new Promise(() => {}) } : { text: 'ok' });
  const client = await env.client({ hostEnv: { PIW_TEST_CLOCK: clock, PIW_KILL_GRACE_MS: '300' } });
  const pi = await env.startPi({ sessionId: 'here' });
  const from = pi.mark();
  const { run_id } = await client.startRun(workflowFile('slow'), { input: { task: 'x' }, sessionId: 'here' });
  await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', "the step's turn streaming", from);
  advance(700_000);
  await client.runStatus(run_id); // wakes a host asleep until the old deadline
  const run = await client.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: null, why: 'timed out' });
  await pi.quit();
});

test('a detached step uses no time before its bridge says hello (a Pi slow to start), and runs out while the bridge holds it', async () => {
  // The host's Pi waits for a barrier before it starts: until then nobody presents the step.
  const barrier = join(env.root, 'pi-may-start');
  const launched = join(env.root, 'pi-launched');
  const wrapper = join(env.root, 'slow-pi.sh');
  writeFileSync(
    wrapper,
    `#!/bin/sh\n: > "${launched}"\nwhile [ ! -e "${barrier}" ]; do sleep 0.05; done\nexec "${process.execPath}" "${piCli}" "$@"\n`,
  );
  chmodSync(wrapper, 0o755);
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'Thinking', hold: new Promise(() => {}) } : { text: 'ok' });
  // The handshake bound is far beyond what the clock moves here: only the step's time counts.
  const client = await env.client({
    hostEnv: { ...DETACHED, PIW_PI: wrapper, PIW_TEST_CLOCK: clock, PIW_BRIDGE_HANDSHAKE_MS: '100000000', PIW_KILL_GRACE_MS: '300' },
  });
  const { run_id } = await client.startRun(workflowFile('slow'), { input: { task: 'x' }, projectDir: env.project });
  await until(() => existsSync(launched), 'the bridge launched');
  await until(async () => (await client.runStatus(run_id)).interactions.length === 1, 'the step open');
  advance(3_600_000);
  await client.runStatus(run_id); // wakes a host asleep until a deadline
  const before = await client.runStatus(run_id);
  assert.equal(before.interactions[0].status, 'pending');
  assert.equal(before.interactions[0].deadline_at, null, 'no bridge holds it: no deadline');

  writeFileSync(barrier, '');
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  const held = await until(async () => (await stepOf(client, run_id)).deadline_at, 'the step held');
  // Its ten minutes run from the hello, after the hour the clock moved: none was used before.
  assert.ok(held > Date.now() + 3_600_000 + 500_000, `deadline ${held}`);
  advance(3_600_000 + 700_000);
  await client.runStatus(run_id); // wakes a host asleep until the deadline
  const run = await client.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: null, why: 'timed out' });
});
