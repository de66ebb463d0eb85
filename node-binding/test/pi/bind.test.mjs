// What a call from Pi acts on: `submit` answers the request the model was shown (a paused run's
// request does not hold another run's back; a repeated call never lands on a step presented
// later), the tool and the command act only on this session's runs, a run started without
// input gets `{}`; `pi -p "/workflow <name>"` prints the run; a checkpoint reminder is headed as
// a step's.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { WAIT_MS, piCli, piEnv, pkgDir, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];
const submit = (output, interactionId) => ({
  tool: { name: 'workflow', arguments: interactionId ? { action: 'submit', interactionId, output } : { action: 'submit', output } },
});
const toolEnds = (pi, from) => pi.events.slice(from).filter((e) => e.type === 'tool_execution_end' && e.toolName === 'workflow');

/**
 * Starts `/workflow <name>` in a Pi whose session holds the presentation of the step named
 * `second` at a barrier until `release()`: the model's repeat of the first step's call then
 * always comes before the second step is shown, whatever the machine's speed.
 */
async function startHeld(client, name) {
  const barriers = join(env.root, 'barriers');
  mkdirSync(barriers, { recursive: true });
  writeFileSync(join(barriers, 'present-second.hold'), '');
  const pi = await env.startPi({ extraEnv: { PIW_PI_BARRIER_DIR: barriers } });
  const from = pi.mark();
  await pi.prompt(`/workflow ${name}`);
  const [started] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'session-a' });
    return runs.length && runs;
  }, 'the run');
  return { pi, from, started, release: () => rmSync(join(barriers, 'present-second.hold')) };
}

test("a paused run's request does not hold back the submission for another run's step", async () => {
  env.addWorkflow('agent.workflow.mjs', 'titles');
  let release;
  const held = new Promise((r) => (release = r));
  let calls = 0;
  env.model.script = async ({ last, lastText }) => {
    calls++;
    if (calls === 1) {
      await held; // run A's step turn streams until the test stops it
      return { text: 'too late' };
    }
    if (last.role === 'user' && /RUN-B/.test(lastText)) return submit({ title: 'B' }, stepId(lastText));
    return { text: 'ok' };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const file = `${env.project}/.pi/workflows/titles.workflow.mjs`;
  const a = await client.startRun(file, { input: { task: 'RUN-A' }, sessionId: 'session-a' });
  await pi.waitEvent((e) => e.type === 'agent_start', 'the step turn', from);
  await until(() => calls === 1, 'the model request');
  await pi.send({ type: 'abort' });
  release();
  await pi.waitNotify(/workflow paused at draft/, from);
  assert.equal((await client.runStatus(a.run_id)).run.paused, true);
  const b = await client.startRun(file, { input: { task: 'RUN-B' }, sessionId: 'session-a' });
  const run = await client.waitForRun(b.run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { title: 'B' }, 'the submission for B was taken');
  // The run ends once the host took the submission; the tool's call ends in Pi a moment later.
  const ends = await until(() => {
    const e = toolEnds(pi, from);
    return e.length >= 1 && e;
  }, '1 workflow tool calls ended');
  assert.equal(ends.length, 1, JSON.stringify(ends.map((e) => e.result)));
  assert.equal(ends[0].isError, false, JSON.stringify(ends[0].result));
  assert.equal((await client.runStatus(a.run_id)).run.paused, true, 'A stays paused');
  await pi.quit();
});

test('a repeated submit without an interaction id gets the original receipt, never the next step', async () => {
  env.addWorkflow('twostep.workflow.mjs', 'twostep');
  const client = await env.client();
  const secondWaits = async () => {
    const [r] = await client.listRuns({ sessionId: 'session-a' });
    return r && (await client.runStatus(r.run_id)).interactions.some((i) => i.node_id === 'second' && i.status === 'pending');
  };
  let phase = 0;
  env.model.script = async ({ last, lastText }) => {
    if (last.role === 'tool' && phase === 1) {
      phase = 2;
      // The model retries its call once the next step waits in the host, before it is shown.
      await until(secondWaits, 'the second step waiting');
      return submit({ title: 'ONE' });
    }
    if (last.role === 'user' && /STEP-TWO/.test(lastText) && phase < 3) {
      phase = 3;
      return submit({ title: 'TWO' });
    }
    if (last.role === 'user' && /STEP-ONE/.test(lastText) && phase === 0) {
      phase = 1;
      return submit({ title: 'ONE' });
    }
    return { text: 'ok' };
  };
  // Step two is not presented until the repeat's call has ended (see startHeld).
  const { pi, from, started, release } = await startHeld(client, 'twostep');
  await until(() => toolEnds(pi, from).length >= 2, 'the repeated submit ended');
  release();
  const run = await client.waitForRun(started.run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { first: { title: 'ONE' }, second: { title: 'TWO' } });
  // The run ends once the host took the submission; the tool's call ends in Pi a moment later.
  const ends = await until(() => {
    const e = toolEnds(pi, from);
    return e.length >= 3 && e;
  }, '3 workflow tool calls ended');
  assert.equal(ends.length, 3, JSON.stringify(ends.map((e) => e.result)));
  assert.equal(ends[1].isError, false, JSON.stringify(ends[1].result));
  assert.match(JSON.stringify(ends[1].result), /already accepted: step first/);
  assert.equal(ends[1].result.details.submissionId, ends[0].result.details.submissionId);
  await pi.quit();
});

test('a repeated checkpoint answer without a run id is not taken by the next checkpoint', async () => {
  env.addWorkflow('twocheck.workflow.mjs', 'twocheck');
  const client = await env.client();
  const secondWaits = async () => {
    const [r] = await client.listRuns({ sessionId: 'session-a' });
    return r && (await client.runStatus(r.run_id)).decisions.some((d) => d.node_id === 'second' && d.status === 'pending');
  };
  const answer = (value) => ({ tool: { name: 'workflow', arguments: { action: 'answer', answer: value } } });
  let phase = 0;
  env.model.script = async ({ last, lastText }) => {
    if (last.role === 'tool' && phase === 1) {
      phase = 2;
      // The model repeats its call once the next checkpoint waits in the host, before it is shown.
      await until(secondWaits, 'the second checkpoint waiting');
      return answer({ go: 1 });
    }
    if (last.role === 'user' && /CHECK-TWO/.test(lastText) && phase < 3) {
      phase = 3;
      return answer({ go: 2 });
    }
    if (last.role === 'user' && /CHECK-ONE/.test(lastText) && phase === 0) {
      phase = 1;
      return answer({ go: 1 });
    }
    return { text: 'ok' };
  };
  // The second checkpoint is not presented until the repeat's call has ended (see above).
  const { pi, from, started, release } = await startHeld(client, 'twocheck');
  await until(() => toolEnds(pi, from).length >= 2, 'the repeated answer ended');
  release();
  const run = await client.waitForRun(started.run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { first: { go: 1 }, second: { go: 2 } });
  // The run ends once the host took the submission; the tool's call ends in Pi a moment later.
  const ends = await until(() => {
    const e = toolEnds(pi, from);
    return e.length >= 3 && e;
  }, '3 workflow tool calls ended');
  assert.equal(ends.length, 3, JSON.stringify(ends.map((e) => e.result)));
  assert.equal(ends[1].isError, false, JSON.stringify(ends[1].result));
  assert.match(JSON.stringify(ends[1].result), /already answered: checkpoint first/);
  await pi.quit();
});

test("another session's run: the tool and the command refuse to answer, pause or cancel it; a person's answer is recorded as such", async () => {
  const file = env.addWorkflow('confirm.workflow.mjs', 'confirm');
  const client = await env.client();
  const theirs = await client.startRun(file, { input: {}, sessionId: 'session-a' });
  await client.waitForRun(theirs.run_id, { untilParked: true, timeoutMs: 30_000 });
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'user' && /answer their checkpoint/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'answer', runId: theirs.run_id, answer: 'yes' } } };
    }
    if (last.role === 'user' && /cancel their run/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'cancel', runId: theirs.run_id } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi({ sessionId: 'session-b' });
  for (const ask of ['answer their checkpoint', 'cancel their run']) {
    const from = pi.mark();
    await pi.prompt(ask);
    const end = await pi.waitEvent((e) => e.type === 'tool_execution_end', `the tool call to ${ask}`, from);
    assert.equal(end.isError, true, JSON.stringify(end.result));
    assert.match(JSON.stringify(end.result), new RegExp(`run ${theirs.run_id} belongs to Pi session session-a`));
    assert.doesNotMatch(JSON.stringify(end.result), /piw run/, 'the model is not shown a way around the rule');
    await pi.waitSettled(from);
  }
  for (const command of [`answer ${theirs.run_id} yes`, `pause ${theirs.run_id}`, `cancel ${theirs.run_id}`]) {
    const from = pi.mark();
    await pi.prompt(`/workflow ${command}`);
    await pi.waitNotify(new RegExp(`workflow: run ${theirs.run_id} belongs to Pi session session-a: .*from a shell, piw run`), from);
  }
  const status = await client.runStatus(theirs.run_id);
  assert.equal(status.run.status, 'waiting');
  assert.equal(status.run.paused, false);
  assert.equal(status.decisions[0].status, 'pending');

  // This session's own checkpoint, answered by the person's command: a person's answer.
  const mine = await client.startRun(file, { input: {}, sessionId: 'session-b' });
  await client.waitForRun(mine.run_id, { untilParked: true, timeoutMs: 30_000 });
  await pi.prompt(`/workflow answer ${mine.run_id} {"go": true}`);
  const run = await client.waitForRun(mine.run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { answer: { go: true } });
  assert.equal((await client.runStatus(mine.run_id)).decisions[0].answered_by, 'person');
  await pi.quit();
});

test('a run started without input gets {} (the command without text, the tool without input)', async () => {
  env.addWorkflow('echo.workflow.mjs', 'echo');
  env.model.script = ({ last, lastText }) =>
    last.role === 'user' && /start echo/.test(lastText) ? { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'echo' } } } : { text: 'ok' };
  const pi = await env.startPi();
  const client = await env.client();
  await pi.prompt('/workflow echo');
  const [byCommand] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'session-a' });
    return runs.length === 1 && runs;
  }, 'the run the command started');
  assert.deepEqual((await client.waitForRun(byCommand.run_id, { timeoutMs: 30_000 })).result, { input: {} });
  const from = pi.mark();
  await pi.prompt('start echo');
  await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the start call', from);
  const byTool = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== byCommand.run_id), 'the run the tool started');
  assert.deepEqual((await client.waitForRun(byTool.run_id, { timeoutMs: 30_000 })).result, { input: {} });
  await pi.quit();
});

test('pi -p "/workflow <name>" prints the run it started (there is no UI to notify)', async () => {
  env.addWorkflow('echo.workflow.mjs', 'echo');
  const args = [
    piCli, '-p', '/workflow echo',
    '--session-dir', join(env.root, 's'), '--session-id', 'printed',
    '--no-skills', '--no-themes', '--no-prompt-templates', '--no-context-files', '--offline', '--no-builtin-tools',
    '--provider', 'mock', '--model', 'mock-model', '-e', pkgDir,
  ];
  const child = spawn(process.execPath, args, { cwd: env.project, env: env.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (c) => (out += c));
  child.stderr.on('data', (c) => (err += c));
  const timer = setTimeout(() => child.kill('SIGKILL'), WAIT_MS);
  const code = await new Promise((r) => child.on('exit', r));
  clearTimeout(timer);
  assert.equal(code, 0, err);
  const client = await env.client();
  const [run] = await client.listRuns({ sessionId: 'printed' });
  assert.ok(run, `a run was started: ${out}${err}`);
  // On stderr: Pi keeps stdout for the model's answer.
  assert.match(err, new RegExp(`started echo: run ${run.run_id}`));
});

test('a checkpoint reminder is headed like a step reminder', async () => {
  const file = env.addWorkflow('confirm.workflow.mjs', 'confirm');
  env.model.script = () => ({ text: 'not answering' });
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  await client.startRun(file, { input: {}, sessionId: 'session-a' });
  const reminders = await until(() => {
    const steps = pi.customMessages('piw-step', from);
    return steps.length >= 3 && steps;
  }, 'the checkpoint and two reminders');
  assert.deepEqual(reminders.map((m) => m.details.reminder), [0, 1, 2]);
  assert.match(reminders[0].content, /^Workflow checkpoint — /);
  assert.match(reminders[1].content, /^Reminder 1 of 2: this workflow checkpoint is still waiting for your answer\.\nWorkflow checkpoint — /);
  assert.match(reminders[2].content, /^Reminder 2 of 2: /);
  await pi.quit();
});
