// Detached runs with the HOST launching their bridges real Pi in RPC mode with
// extension/bridge.js as a supervised child of the host, the mock model, and the host's
// settings `PIW_DETACHED_PROVIDER` / `_MODEL` / `_PI_ARGS`. A bridge's pid is what its run's
// lock file (`$PIW_HOME/bridges/<run>.lock`, its handshake) holds.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { alive, DETACHED, hostBin, piCli, piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('agent.workflow.mjs', 'titles');
  env.addWorkflow('gated.workflow.mjs', 'gated');
  env.addWorkflow('slow.workflow.mjs', 'slow');
  env.addWorkflow('echo.workflow.mjs', 'echo');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];
const workflowFile = (name) => `${env.project}/.pi/workflows/${name}.workflow.mjs`;
const submit = (id, output) => ({ tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output } } });
const lockFile = (runId) => join(env.piwHome, 'bridges', `${runId}.lock`);
/** The pid of the bridge serving `runId` (it has taken its run), once there is one. */
const bridgePid = (runId, not = null) =>
  until(() => {
    if (!existsSync(lockFile(runId))) return null;
    const pid = Number(readFileSync(lockFile(runId), 'utf8').trim());
    return pid > 0 && pid !== not && alive(pid) ? pid : null;
  }, `the bridge of ${runId}`);
const client = (hostEnv = {}) => env.client({ hostEnv: { ...DETACHED, ...hostEnv } });
const attemptOf = async (c, runId, node) => (await c.runStatus(runId)).attempts.filter((a) => a.node_id === node);

test('the host serves a detached agent step through its own Pi child: validate refuses the first submission, accepts the second; the tool offers only update and submit', async () => {
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
  const c = await client();
  const { run_id } = await c.startRun(workflowFile('titles'), { input: { task: 'tests' }, projectDir: env.project });
  const run = await c.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed');
  assert.equal(run.execution_mode, 'detached');
  assert.deepEqual(run.result, { title: 'Fix flaky test' });
  assert.equal(submits, 2);
  const [draft] = await attemptOf(c, run_id, 'draft');
  assert.equal(draft.status, 'ok');
  // The workflow tool as the host's Pi offers it to the model: only update and submit.
  const tool = env.model.requests[0].tools.find((t) => (t.function ?? t).name === 'workflow');
  const schema = (tool.function ?? tool).parameters;
  assert.deepEqual(schema.properties.action.enum, ['update', 'submit']);
  for (const p of ['workflow', 'input', 'runId', 'answer']) assert.ok(!(p in schema.properties), `no ${p} parameter`);
  assert.match(env.model.requests[0].allText, /Propose a title for tests/);
  // The bridge is gone with the step: no child left.
  await until(async () => (await c.status()).active_children === 0, 'no child left');
});

test('the model of a detached step ends its turns without submitting: reminders, then the attempt fails and the run routes', async () => {
  env.model.script = () => ({ text: 'I will not submit' });
  const c = await client();
  const { run_id } = await c.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const run = await c.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: null, why: 'failed' });
  const [draft] = await attemptOf(c, run_id, 'draft');
  assert.equal(draft.error, 'no submission after 2 reminders');
  // The step message and its two reminders reached the model.
  assert.equal(env.model.requests.filter((r) => r.last.role !== 'tool' && /workflow step|interactionId/.test(r.allText)).length >= 3, true);
});

test('the Pi child killed mid-step: the attempt fails with why and the run routes; the host serves the next detached run', async () => {
  let release;
  const held = new Promise((r) => (release = r));
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? { ...submit(id, { title: 'never taken' }), hold: held } : { text: 'ok' };
  };
  const c = await client();
  const { run_id } = await c.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const pid = await bridgePid(run_id);
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  process.kill(pid, 'SIGKILL');
  const run = await c.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: null, why: 'failed' });
  const drafts = await attemptOf(c, run_id, 'draft');
  assert.deepEqual(drafts.map((a) => a.status), ['failed']);
  assert.match(drafts[0].error, /the Pi bridge was killed by signal 9/);
  release();
  // The host keeps serving: the next detached run completes through a new bridge.
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'second' }) : { text: 'ok' };
  };
  const next = await c.startRun(workflowFile('titles'), { input: { task: 'y' }, projectDir: env.project });
  assert.deepEqual((await c.waitForRun(next.run_id, { timeoutMs: 60_000 })).result, { title: 'second' });
});

test('the Pi child killed while its submission is judged: the verdict stands, nothing is taken twice, no new bridge starts', async () => {
  const gate = join(env.root, 'gate');
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'good' }) : { text: 'waiting', hold: new Promise(() => {}) };
  };
  const c = await client();
  const { run_id } = await c.startRun(workflowFile('gated'), { input: { gate }, projectDir: env.project });
  const pid = await bridgePid(run_id);
  await until(async () => (await c.runStatus(run_id)).interactions.some((i) => i.status === 'validating'), 'the submission in validation');
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 'the bridge gone');
  writeFileSync(gate, '');
  const run = await c.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: 'good' });
  assert.deepEqual((await attemptOf(c, run_id, 'draft')).map((a) => a.status), ['ok']);
  const status = await c.runStatus(run_id);
  assert.equal(status.interactions.length, 1);
  assert.equal(env.model.requests.filter((r) => r.last.role === 'user' && stepId(r.lastText)).length, 1, 'the step was presented once');
});

test('a Pi child hung past the node deadline (test clock) is stopped, the attempt times out and routes, and the host serves on', async () => {
  const clock = join(env.root, 'clock');
  const advance = (ms) => {
    writeFileSync(`${clock}.tmp`, String(ms));
    renameSync(`${clock}.tmp`, clock);
  };
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'thinking', hold: new Promise(() => {}) } : { text: 'ok' });
  const c = await client({ PIW_TEST_CLOCK: clock });
  const { run_id } = await c.startRun(workflowFile('slow'), { projectDir: env.project });
  const pid = await bridgePid(run_id);
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  process.kill(pid, 'SIGSTOP');
  advance(700_000);
  await c.runStatus(run_id); // wakes a host asleep until the old deadline
  const run = await c.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: null, why: 'timed out' });
  assert.deepEqual((await attemptOf(c, run_id, 'draft')).map((a) => a.status), ['timed_out']);
  await until(() => !alive(pid), 'the hung bridge killed');
  env.model.script = () => ({ text: 'ok' });
  const next = await c.startRun(workflowFile('echo'), { input: { n: 1 }, projectDir: env.project });
  assert.deepEqual((await c.waitForRun(next.run_id, { timeoutMs: 60_000 })).result, { input: { n: 1 } });
});

test('the host killed while its Pi child works: after a restart the orphan is gone and the step runs again', async () => {
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'thinking', hold: new Promise(() => {}) } : { text: 'ok' });
  const first = await client();
  const { run_id } = await first.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const orphan = await bridgePid(run_id);
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  const { pid: host } = await first.status();
  await first.close();
  process.kill(host, 'SIGKILL');
  await until(() => !alive(host), 'the host gone');
  assert.ok(alive(orphan), 'the bridge outlived its host (its turn is held)');
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'after restart' }) : { text: 'ok' };
  };
  const second = await client();
  await until(() => !alive(orphan), 'the orphan killed by the new host');
  const run = await second.waitForRun(run_id, { timeoutMs: 60_000 });
  assert.deepEqual(run.result, { title: 'after restart' });
  assert.deepEqual((await attemptOf(second, run_id, 'draft')).map((a) => a.status), ['ok']);
  assert.equal(env.model.requests.filter((r) => r.last.role === 'user' && stepId(r.lastText)).length, 2, 'presented again by the new bridge');
});

test('two detached runs at once get a Pi child each, and PIW_MAX_CHILDREN counts them', async () => {
  const releases = [];
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (!id) return { text: 'ok' };
    const title = /Propose a title for (\w+)/.exec(lastText)?.[1] ?? 'x';
    return { ...submit(id, { title }), hold: new Promise((r) => releases.push(r)) };
  };
  const c = await client({ PIW_MAX_CHILDREN: '2' });
  const a = await c.startRun(workflowFile('titles'), { input: { task: 'alpha' }, projectDir: env.project });
  const b = await c.startRun(workflowFile('titles'), { input: { task: 'beta' }, projectDir: env.project });
  const [pa, pb] = [await bridgePid(a.run_id), await bridgePid(b.run_id)];
  assert.notEqual(pa, pb);
  await until(() => releases.length === 2, 'both turns');
  assert.equal((await c.status()).active_children, 2);
  // No slot left: a third run waits in the queue.
  const third = await c.startRun(workflowFile('echo'), { input: { n: 3 }, projectDir: env.project });
  assert.equal((await c.runStatus(third.run_id)).run.status, 'queued');
  for (const r of releases) r();
  assert.deepEqual((await c.waitForRun(a.run_id, { timeoutMs: 60_000 })).result, { title: 'alpha' });
  assert.deepEqual((await c.waitForRun(b.run_id, { timeoutMs: 60_000 })).result, { title: 'beta' });
  assert.deepEqual((await c.waitForRun(third.run_id, { timeoutMs: 60_000 })).result, { input: { n: 3 } });
});

test('an explicit detached start is refused at once when Pi cannot serve it: no provider set, or a model Pi lacks', async () => {
  const bare = await env.client();
  await assert.rejects(
    bare.startRun(workflowFile('titles'), { input: { task: 'x' }, executionMode: 'detached', projectDir: env.project }),
    (e) => e.code === 'pi_unusable' && /cannot start a detached run: no Pi provider and model to serve its steps, and Pi has no default model .*PIW_DETACHED_PROVIDER/.test(e.message),
  );
  const piw_detached = { provider: 'mock', model: 'no-such-model' };
  await assert.rejects(
    bare.startRun(workflowFile('titles'), { input: { task: 'x', piw_detached }, executionMode: 'detached', projectDir: env.project }),
    (e) => e.code === 'pi_unusable' && /cannot start a detached run: Pi .* cannot serve a detached run with provider mock and model no-such-model: Pi offers no model no-such-model of provider mock/.test(e.message),
  );
  assert.deepEqual(await bare.listRuns({}), []);
  assert.equal(env.model.requests.length, 0);
});

test("/workflow <name> --detached and the tool's start with detached: the host's Pi answers the steps, the origin session gets the run's end and never the step", async () => {
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (id) return submit(id, { title: /Propose a title for (\w+)/.exec(lastText)?.[1] ?? 'x' });
    // The person's model starts the second run through the tool.
    if (last.role === 'user' && /start titles detached/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'titles', input: { task: 'tool' }, detached: true } } };
    }
    return { text: 'ok' };
  };
  const person = await env.startPi({ sessionId: 'person', extraEnv: DETACHED });
  const from = person.mark();
  await person.prompt('/workflow titles --detached command');
  const c = await client();
  await person.prompt('start titles detached');
  const ends = await until(() => {
    const got = person.customMessages('piw-message', from).filter((m) => m.details?.kind === 'terminal');
    return got.length === 2 ? got : null;
  }, "both runs' ends in the origin session");
  assert.match(ends.map((m) => m.content).join('\n'), /command/);
  assert.match(ends.map((m) => m.content).join('\n'), /tool/);
  const runs = await c.listRuns({ sessionId: 'person' });
  assert.equal(runs.length, 2);
  for (const r of runs) {
    assert.equal(r.execution_mode, 'detached');
    assert.equal(r.status, 'completed');
  }
  assert.deepEqual(runs.map((r) => r.result.title).sort(), ['command', 'tool']);
  assert.equal(person.customMessages('piw-step', from).length, 0, 'the person was never shown a step');
  await person.quit();
});

test("the Pi model comes from the workflow, else the run's input, else the host; a run none names one for waits for a client", async () => {
  env.addWorkflow('pinned.workflow.mjs', 'pinned');
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: /Propose a title for (\w+)/.exec(lastText)?.[1] ?? 'x' }) : { text: 'ok' };
  };
  // A host with no detached settings of its own.
  const c = await env.client();
  const pinned = await c.startRun(workflowFile('pinned'), { input: { task: 'workflow' }, projectDir: env.project });
  assert.deepEqual((await c.waitForRun(pinned.run_id, { timeoutMs: 60_000 })).result, { title: 'workflow' });
  const piw_detached = { provider: 'mock', model: 'mock-model', pi_args: ['--offline', '--no-builtin-tools'] };
  const byInput = await c.startRun(workflowFile('titles'), { input: { task: 'input', piw_detached }, projectDir: env.project });
  assert.deepEqual((await c.waitForRun(byInput.run_id, { timeoutMs: 60_000 })).result, { title: 'input' });
  // An explicit detached start with the model in its input passes the host's check.
  const explicit = await c.startRun(workflowFile('titles'), { input: { task: 'explicit', piw_detached }, executionMode: 'detached', sessionId: 'someone', projectDir: env.project });
  assert.deepEqual((await c.waitForRun(explicit.run_id, { timeoutMs: 60_000 })).result, { title: 'explicit' });
  // Nothing names a model: the step waits for a client (a script answering it), no bridge.
  const requests = env.model.requests.length;
  const unnamed = await c.startRun(workflowFile('titles'), { input: { task: 'script' }, projectDir: env.project });
  const parked = await c.waitForRun(unnamed.run_id, { untilParked: true, timeoutMs: 30_000 });
  assert.equal(parked.status, 'waiting');
  assert.equal(existsSync(lockFile(unnamed.run_id)), false);
  const [open] = (await c.runStatus(unnamed.run_id)).interactions;
  await c.submitInteraction(open, { title: 'by script' });
  assert.deepEqual((await c.waitForRun(unnamed.run_id, { timeoutMs: 60_000 })).result, { title: 'by script' });
  assert.equal(env.model.requests.length, requests, 'no model turn for it');
});

test("nothing else naming one, Pi's own default model (its settings) serves a detached step, and the bridge's model sees the project's context files", async () => {
  writeFileSync(join(env.agentDir, 'settings.json'), JSON.stringify({ defaultProvider: 'mock', defaultModel: 'mock-model' }));
  writeFileSync(join(env.project, 'AGENTS.md'), 'Project rule: keep titles short. CONTEXT-MARKER-7f3a\n');
  let sawContext = null;
  env.model.script = ({ last, lastText, allText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (!id) return { text: 'ok' };
    sawContext = allText.includes('CONTEXT-MARKER-7f3a');
    return submit(id, { title: 'from Pi defaults' });
  };
  // The host names no model (no PIW_DETACHED_PROVIDER / _MODEL), nor does the run or the
  // workflow: Pi's agent directory has the default.
  const c = await env.client({ hostEnv: { PI_CODING_AGENT_DIR: env.agentDir, PI_OFFLINE: '1', PIW_DETACHED_PI_ARGS: '--offline --no-builtin-tools' } });
  const run = await c.startRun(workflowFile('titles'), { input: { task: 'x' }, executionMode: 'detached', sessionId: 'someone', projectDir: env.project });
  const done = await c.waitForRun(run.run_id, { timeoutMs: 60_000 });
  assert.equal(done.status, 'completed', done.error ?? done.review_reason);
  assert.deepEqual(done.result, { title: 'from Pi defaults' });
  assert.equal(sawContext, true, "the bridge's model saw the project's AGENTS.md");
});

test("an explicit detached start reads a JavaScript workflow's graph first: its own model counts, and a workflow with no step for a model needs none", async () => {
  env.addWorkflow('pinned.workflow.mjs', 'pinned');
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'pinned by the workflow' }) : { text: 'ok' };
  };
  // A host with no detached model of its own, and Pi with no default: only the workflow names one.
  const c = await env.client();
  const pinned = await c.startRun(workflowFile('pinned'), { input: { task: 'x' }, executionMode: 'detached', sessionId: 'someone', projectDir: env.project });
  const done = await c.waitForRun(pinned.run_id, { timeoutMs: 60_000 });
  assert.equal(done.status, 'completed', done.error ?? done.review_reason);
  assert.deepEqual(done.result, { title: 'pinned by the workflow' });
  // Compute nodes only: nothing to check, the start goes on.
  const echo = await c.startRun(workflowFile('echo'), { input: { task: 'y' }, executionMode: 'detached', projectDir: env.project });
  assert.equal((await c.waitForRun(echo.run_id, { timeoutMs: 60_000 })).status, 'completed');
  // An agent step and no model anywhere: refused, as before.
  await assert.rejects(
    c.startRun(workflowFile('titles'), { input: { task: 'z' }, executionMode: 'detached', projectDir: env.project }),
    /cannot start a detached run: no Pi provider and model/,
  );
});

test('host stop stops the Pi child with the host, and loses nothing: the next host presents the step again', async () => {
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'thinking', hold: new Promise(() => {}) } : { text: 'ok' });
  const first = await client();
  const { run_id } = await first.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const bridge = await bridgePid(run_id);
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  const { pid: host } = await first.status();
  await first.request('host.stop');
  await first.close();
  await until(() => !alive(host), 'the host stopped');
  assert.equal(alive(bridge), false, 'the bridge stopped before its host exited');
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? submit(id, { title: 'next host' }) : { text: 'ok' };
  };
  const second = await client();
  assert.deepEqual((await second.waitForRun(run_id, { timeoutMs: 60_000 })).result, { title: 'next host' });
  // The stop failed nothing: one attempt, answered through the next host's bridge.
  assert.deepEqual((await attemptOf(second, run_id, 'draft')).map((a) => a.status), ['ok']);
});

test('PIW_PI names the Pi to run; one that is a wrapper script (Pi a process of its group, not the one started) shakes hands too', async () => {
  const wrapper = join(env.root, 'pi-wrapper.sh');
  // No exec: the Pi that takes the run's lock is the wrapper's child.
  writeFileSync(wrapper, `#!/bin/sh\n"${process.execPath}" "${piCli}" "$@"\n`);
  chmodSync(wrapper, 0o755);
  const clock = join(env.root, 'clock');
  let release;
  const held = new Promise((r) => (release = r));
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? { ...submit(id, { title: 'wrapped' }), hold: held } : { text: 'ok' };
  };
  const c = await client({ PIW_PI: wrapper, PIW_TEST_CLOCK: clock });
  const { run_id } = await c.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  // The host saw the handshake (the log says so); then the handshake bound passes harmlessly.
  await until(() => readFileSync(join(env.piwHome, 'host.log'), 'utf8').includes(`the bridge took its run run_id=${run_id}`), 'the handshake');
  writeFileSync(`${clock}.tmp`, '120000');
  renameSync(`${clock}.tmp`, clock);
  await c.runStatus(run_id); // wakes a host asleep until the old deadline
  release();
  assert.deepEqual((await c.waitForRun(run_id, { timeoutMs: 60_000 })).result, { title: 'wrapped' });
});

test('pausing a run stops its Pi child, resuming starts a new one for the same step; cancelling stops it for good', async () => {
  let hold = true;
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (!id) return { text: 'ok' };
    return hold ? { text: 'thinking', hold: new Promise(() => {}) } : submit(id, { title: 'after resume' });
  };
  const c = await client();
  const { run_id } = await c.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const first = await bridgePid(run_id);
  await until(() => env.model.requests.length > 0, "the bridge's turn");
  await c.pauseRun(run_id);
  await until(() => !alive(first), 'the bridge stopped at the pause');
  assert.equal((await c.runStatus(run_id)).run.paused, true);
  hold = false;
  await c.resumeRun(run_id);
  assert.deepEqual((await c.waitForRun(run_id, { timeoutMs: 60_000 })).result, { title: 'after resume' });
  assert.deepEqual((await attemptOf(c, run_id, 'draft')).map((a) => a.status), ['ok'], 'the same attempt, answered once');

  hold = true;
  const second = await c.startRun(workflowFile('titles'), { input: { task: 'y' }, projectDir: env.project });
  const pid = await bridgePid(second.run_id);
  await c.cancelRun(second.run_id, { reason: 'not needed' });
  await until(() => !alive(pid), 'the bridge stopped at the cancel');
  assert.equal((await c.runStatus(second.run_id)).run.status, 'cancelled');
  await until(async () => (await c.status()).active_children === 0, 'no child left');
});

test('a host started with a detached step open serves it before any client asks anything (piw host serve)', async () => {
  env.model.script = ({ last, lastText }) => (last.role === 'user' && stepId(lastText) ? { text: 'thinking', hold: new Promise(() => {}) } : { text: 'ok' });
  const first = await client();
  const { run_id } = await first.startRun(workflowFile('titles'), { input: { task: 'x' }, projectDir: env.project });
  const orphan = await bridgePid(run_id);
  const { pid: host } = await first.status();
  await first.close();
  process.kill(host, 'SIGKILL');
  await until(() => !alive(host), 'the host gone');
  // A host in the foreground that no client ever asks anything (env.close stops it).
  const serve = spawn(hostBin, ['host', 'serve'], { env: { ...env.env, ...DETACHED }, stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  serve.stdout.on('data', (c) => (out += c));
  await until(() => out.includes('piw host ready'), 'the host ready');
  const next = await bridgePid(run_id, orphan);
  assert.notEqual(next, orphan);
  await until(() => !alive(orphan), 'the orphan killed at the start');
});
