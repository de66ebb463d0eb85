// The bridge of detached runs real Pi in RPC mode with extension/bridge.js serving
// one run's steps, started here as the host's launcher starts it (`env.startBridge`, which uses
// `bridgeCommand`); the run is started through the client as a detached run is. These hosts
// launch no bridges themselves (no `PIW_DETACHED_PROVIDER`), except where a test says so;
// detached.test.mjs has the host launching them.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { BRIDGE_EXIT, Client, preflightBridge } from '../../index.js';
import { WorkflowSession } from '../../extension/session.js';
import { alive, DETACHED, piCli, piEnv, pkgDir, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('agent.workflow.mjs', 'titles');
  env.addWorkflow('gated.workflow.mjs', 'gated');
  env.addWorkflow('confirm.workflow.mjs', 'confirm');
  env.addWorkflow('reply.workflow.mjs', 'reply');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];
const workflowFile = (name) => `${env.project}/.pi/workflows/${name}.workflow.mjs`;
const submit = (id, output) => ({ tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output } } });
/** The bridge's exit, bounded: only a hang reaches the bound. */
const exitOf = (pi) => until(() => pi.child.exitCode !== null || pi.child.signalCode !== null, 'the bridge to exit').then(() => pi.exited);

test('a detached agent step completes through the bridge: the first submission fails validate, the second is accepted; the tool offers only update and submit', async () => {
  let submits = 0;
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (id) {
      submits++;
      return submit(id, { title: 'bad' });
    }
    if (last.role === 'tool' && /rejected this output/.test(lastText)) {
      submits++;
      return submit(/interactionId (\S+)\)/.exec(lastText)[1], { title: 'Fix flaky test' });
    }
    return { text: 'done' };
  };
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('titles'), { input: { task: 'tests' }, projectDir: env.project });
  assert.equal((await client.runStatus(run_id)).run.execution_mode, 'detached');
  const pi = env.startBridge(run_id);
  const exit = await exitOf(pi);
  assert.equal(exit.code, BRIDGE_EXIT.done, pi.stderr);
  assert.match(pi.stderr, /piw bridge: run .*: the run ended: completed/);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { title: 'Fix flaky test' });
  assert.equal(submits, 2);
  const ends = pi.events.filter((e) => e.type === 'tool_execution_end');
  assert.equal(ends.length, 2);
  assert.equal(ends[0].isError, true);
  assert.match(JSON.stringify(ends[0].result), /title must not be/);
  assert.equal(ends[1].isError, false);
  assert.match(JSON.stringify(ends[1].result), /accepted: step draft/);
  const steps = pi.customMessages('piw-step');
  assert.equal(steps.length, 1, 'the step is presented once');
  assert.match(steps[0].content, /Propose a title for tests/);
  // The workflow tool as Pi offers it to the model: only update and submit.
  const tool = env.model.requests[0].tools.find((t) => (t.function ?? t).name === 'workflow');
  const schema = (tool.function ?? tool).parameters;
  assert.deepEqual(schema.properties.action.enum, ['update', 'submit']);
  for (const p of ['workflow', 'input', 'runId', 'answer']) assert.ok(!(p in schema.properties), `no ${p} parameter`);
});

test('the model ends its turns without submitting: two reminders, then the attempt fails and the run routes on', async () => {
  env.model.script = () => ({ text: 'I will not submit' });
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const pi = env.startBridge(run_id);
  const exit = await exitOf(pi);
  assert.equal(exit.code, BRIDGE_EXIT.done, pi.stderr);
  assert.deepEqual(pi.customMessages('piw-step').map((m) => m.details.reminder), [0, 1, 2]);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { title: null, why: 'failed' });
  const draft = (await client.runStatus(run_id)).attempts.find((a) => a.node_id === 'draft');
  assert.equal(draft.error, 'no submission after 2 reminders');
});

test('a bridge killed while its submission is being validated: no second acceptance, a new bridge finishes the step', async () => {
  const gate = join(env.root, 'gate');
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'bad' }) : { text: 'waiting' };
  };
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('gated'), { input: { gate }, projectDir: env.project });
  const first = env.startBridge(run_id);
  // The submission is in validation (held at the gate): the bridge is killed under it.
  await until(async () => (await client.runStatus(run_id)).interactions.some((i) => i.status === 'validating'), 'the submission in validation');
  first.kill('SIGKILL');
  await first.exited;
  // The new bridge's model repeats its submit call, as models do.
  let secondSubmits = 0;
  let shown = null;
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (id) {
      shown = id;
      secondSubmits++;
      return submit(id, { title: 'good' });
    }
    if (last.role === 'tool' && /accepted: step draft/.test(lastText) && secondSubmits === 1) {
      secondSubmits++;
      return submit(shown, { title: 'good' });
    }
    return { text: 'ok' };
  };
  const second = env.startBridge(run_id);
  await second.ready();
  // Held in validation, the step is not presented again.
  assert.equal(second.customMessages('piw-step').length, 0);
  writeFileSync(gate, '');
  const exit = await exitOf(second);
  assert.equal(exit.code, BRIDGE_EXIT.done, second.stderr);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { title: 'good' });
  const status = await client.runStatus(run_id);
  const drafts = status.attempts.filter((a) => a.node_id === 'draft');
  assert.deepEqual(drafts.map((a) => a.status), ['ok']);
  // The first submission was rejected once its validation ran; the new bridge presented the step once.
  assert.equal(second.customMessages('piw-step').length, 1);
  assert.equal(secondSubmits, 2);
  const ends = second.events.filter((e) => e.type === 'tool_execution_end');
  assert.match(JSON.stringify(ends[0].result), /accepted: step draft/);
  assert.match(JSON.stringify(ends[1].result), /already accepted|closed/);
});

test('two bridges for one run: the second is refused at once, the first answers', async () => {
  let release;
  const held = new Promise((r) => (release = r));
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? { ...submit(id, { title: 'one' }), hold: held } : { text: 'ok' };
  };
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const first = env.startBridge(run_id);
  await until(() => env.model.requests.length > 0, "the first bridge's turn");
  const second = env.startBridge(run_id);
  const refused = await exitOf(second);
  assert.equal(refused.code, BRIDGE_EXIT.busy, second.stderr);
  assert.match(second.stderr, /another bridge \(pid \d+\) serves run/);
  assert.equal(second.customMessages('piw-step').length, 0);
  release();
  const exit = await exitOf(first);
  assert.equal(exit.code, BRIDGE_EXIT.done, first.stderr);
  assert.deepEqual((await client.waitForRun(run_id, { timeoutMs: 30_000 })).result, { title: 'one' });
  assert.equal(env.model.requests.filter((r) => r.last.role === 'user' && stepId(r.lastText)).length, 1);
});

test("a person's session never presents a detached run's steps, even as its origin; it gets the run's end", async () => {
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'from the bridge' }) : { text: 'ok' };
  };
  // The host (the session starts it) serves detached steps itself: its own bridge.
  const person = await env.startPi({ sessionId: 'person', extraEnv: DETACHED });
  const from = person.mark();
  const client = await env.client({ hostEnv: DETACHED });
  const { run_id } = await client.startRun(workflowFile('titles'), {
    input: { task: 'x' },
    sessionId: 'person',
    executionMode: 'detached',
    projectDir: env.project,
  });
  assert.equal((await client.runStatus(run_id)).run.execution_mode, 'detached');
  // The person's session lists nothing to answer.
  assert.deepEqual(await client.listInteractions('person'), []);
  const end = await until(() => person.customMessages('piw-message', from).find((m) => m.details?.kind === 'terminal'), "the run's end in the origin session");
  assert.match(end.content, /from the bridge/);
  assert.equal(person.customMessages('piw-step', from).length, 0, 'the person was never shown the step');
  assert.equal(env.model.requests.filter((r) => r.last.role === 'user' && stepId(r.lastText)).length, 1, "the host's bridge presented it");
  await person.quit();
});

test('the bridge refuses a run that is not detached, and a missing run', async () => {
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('titles'), { input: { task: 'x' }, sessionId: 'someone', projectDir: env.project });
  const pi = env.startBridge(run_id);
  assert.equal((await exitOf(pi)).code, BRIDGE_EXIT.unusable, pi.stderr);
  assert.match(pi.stderr, /is not detached/);
  const none = env.startBridge('run-0123456789abcdef');
  assert.equal((await exitOf(none)).code, BRIDGE_EXIT.unusable, none.stderr);
  assert.match(none.stderr, /no run run-0123456789abcdef/);
});

test('the preflight: a usable provider and model pass; a model Pi lacks or a provider without credentials is refused with why', async () => {
  const opts = { pi: piCli, env: env.env, cwd: env.project };
  assert.deepEqual(await preflightBridge({ ...opts, provider: 'mock', model: 'mock-model' }), { provider: 'mock', model: 'mock-model' });
  await assert.rejects(preflightBridge({ ...opts, provider: 'mock', model: 'no-such-model' }), (e) => e.code === 'pi_unusable' && /Pi offers no model no-such-model of provider mock/.test(e.message));
  await assert.rejects(preflightBridge({ ...opts, provider: 'openai', model: 'gpt-4o' }), (e) => e.code === 'pi_unusable' && /provider openai .*no credentials/.test(e.message));
  await assert.rejects(preflightBridge({ ...opts, provider: 'mock' }), (e) => e.code === 'pi_unusable' && /needs a provider and a model/.test(e.message));
  await assert.rejects(preflightBridge({ ...opts, pi: '/nonexistent/pi', provider: 'mock', model: 'mock-model' }), (e) => e.code === 'pi_unusable' && /cannot run Pi/.test(e.message));
  // A Pi older than 1.6 is refused.
  const old = join(env.root, 'old-pi.mjs');
  writeFileSync(old, "process.stdout.write('1.5.9\\n');\n");
  await assert.rejects(preflightBridge({ ...opts, pi: old, provider: 'mock', model: 'mock-model' }), (e) => e.code === 'pi_unusable' && /is version 1\.5\.9; a detached run needs Pi 1\.6\.0 or newer/.test(e.message));
  // The same as a command, for the host's launcher.
  const command = (model) => spawnSync(process.execPath, [join(pkgDir, 'lib', 'bridge-preflight.js'), piCli, 'mock', model], { env: env.env, cwd: env.project, encoding: 'utf8' });
  const ready = command('mock-model');
  assert.equal(ready.status, 0, ready.stderr);
  assert.equal(ready.stdout, 'ready mock mock-model\n');
  const refused = command('no-such-model');
  assert.equal(refused.status, 2);
  assert.match(refused.stderr, /Pi offers no model no-such-model of provider mock/);
});

test('a run waiting on a checkpoint has no step for a bridge: it exits, and no session presents it to its model', async () => {
  // Passes the host's detached-start check; no bridge of the host's: no interactive step.
  const client = await env.client({ hostEnv: DETACHED });
  const { run_id } = await client.startRun(workflowFile('confirm'), { sessionId: 'person', executionMode: 'detached', projectDir: env.project });
  await client.waitForRun(run_id, { untilParked: true, timeoutMs: 30_000 });
  const pi = env.startBridge(run_id);
  assert.equal((await exitOf(pi)).code, BRIDGE_EXIT.done, pi.stderr);
  assert.match(pi.stderr, /the run waits on a checkpoint \(confirm\), which a bridge never answers/);
  assert.equal(env.model.requests.length, 0);
  // The origin session's choice of the request to present skips the detached run's checkpoint.
  const status = await client.runStatus(run_id);
  const session = new WorkflowSession({}, { sessionManager: { getSessionId: () => 'person' }, cwd: env.project });
  assert.equal(session.pendingCheckpoint(new Map([[run_id, status]])), null);
  const interactive = { ...status, run: { ...status.run, execution_mode: 'interactive' } };
  assert.equal(session.pendingCheckpoint(new Map([[run_id, interactive]]))?.id, status.decisions[0].decision_id);
});

test('an assistantMessage step is answered by the visible reply; the bridge stops at the checkpoint that follows', async () => {
  env.model.script = ({ last, lastText }) => (last.role === 'user' && /GREET-STEP/.test(lastText) ? { text: 'Hello there' } : { text: 'ok' });
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('reply'), { projectDir: env.project });
  const pi = env.startBridge(run_id);
  assert.equal((await exitOf(pi)).code, BRIDGE_EXIT.done, pi.stderr);
  assert.match(pi.stderr, /waits on a checkpoint \(confirm\)/);
  const status = await client.runStatus(run_id);
  const decision = status.decisions.find((d) => d.status === 'pending');
  await client.answerCheckpoint(run_id, decision.decision_id, 'yes');
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { greeting: 'Hello there', confirmed: 'yes' });
});

test('the host goes away under a bridge: it exits (hostGone) once its turn settled, and never starts a host', async () => {
  let release;
  const held = new Promise((r) => (release = r));
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'thinking', hold: held } : { text: 'ok' });
  const client = await env.client();
  const { run_id } = await client.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const pi = env.startBridge(run_id);
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  const { pid } = await client.status();
  await client.close();
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 'the host gone');
  release();
  const exit = await exitOf(pi);
  assert.equal(exit.code, BRIDGE_EXIT.hostGone, pi.stderr);
  assert.match(pi.stderr, /piw bridge: run .*: the piw host closed the connection/);
  // A bridge started while no host runs starts none: it exits at once.
  const late = env.startBridge(run_id);
  assert.equal((await exitOf(late)).code, BRIDGE_EXIT.hostGone, late.stderr);
  assert.equal(await hostAnswers(), false, 'no host was started');
});

async function hostAnswers() {
  try {
    const c = await Client.connect({ home: env.piwHome, start: false });
    await c.close();
    return true;
  } catch {
    return false;
  }
}
