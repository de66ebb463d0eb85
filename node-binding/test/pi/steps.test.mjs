// Interactive steps in the origin session: reminders when a turn settles without a submission,
// Escape (an aborted turn) pauses the run and resume continues the same request (presented once),
// one active request per session (a paused run's request does not hold the others back), a stale
// attempt refused, Escape while `submit` waits for the validation.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { Client } from '../../index.js';
import { hostBin, piEnv, pkgDir, sleep, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('agent.workflow.mjs', 'titles');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];
const textOf = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((b) => b.text ?? '').join(''));
const isStep = (m) => m.role === 'user' && stepId(textOf(m));

test('a turn that settles without a submission gets two reminders, then the attempt fails and routes', async () => {
  env.model.script = () => ({ text: 'I will not submit' });
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/titles.workflow.mjs`, { input: { task: 'x' }, sessionId: 'session-a' });
  await pi.waitNotify(/step draft .* failed: no submission after 2 reminders; the run goes on at gaveUp/, from);
  const steps = pi.customMessages('piw-step', from);
  assert.deepEqual(steps.map((m) => m.details.reminder), [0, 1, 2]);
  assert.match(steps[1].content, /Reminder 1 of 2/);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { title: null, why: 'failed' });
  const { attempts } = await client.runStatus(run_id);
  const draft = attempts.find((a) => a.node_id === 'draft');
  assert.equal(draft.status, 'failed');
  assert.equal(draft.error, 'no submission after 2 reminders');
  // Three turns (the step, two reminders), nothing after the attempt failed.
  assert.equal(pi.events.filter((e) => e.type === 'agent_settled').length, 3);
  await pi.quit();
});

test('a step whose every submission was rejected fails with the rejection, not as one without a submission', async () => {
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'tool') return { text: 'I tried' };
    const id = stepId(lastText);
    return id ? { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'bad' } } } } : { text: 'ok' };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/titles.workflow.mjs`, { input: { task: 'x' }, sessionId: 'session-a' });
  await pi.waitNotify(/step draft .* failed: no accepted submission after 2 reminders; the last was rejected: .*title must not be "bad"/, from);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { title: null, why: 'failed' });
  const draft = (await client.runStatus(run_id)).attempts.find((a) => a.node_id === 'draft');
  assert.match(draft.error, /^no accepted submission after 2 reminders; the last was rejected: .*title must not be "bad"/);
  await pi.quit();
});

test('the previous step\'s settled turn is never counted against the next: every step submitted at once, no reminder', async () => {
  env.addWorkflow('three.workflow.mjs', 'three');
  const barriers = join(env.root, 'barriers');
  mkdirSync(barriers);
  // The refresh that presents step b waits until the test lets it go.
  writeFileSync(join(barriers, 'present-b.hold'), '');
  let releaseA;
  const heldA = new Promise((r) => (releaseA = r));
  let releaseB;
  const heldB = new Promise((r) => (releaseB = r));
  env.model.script = ({ messages, last, lastText }) => {
    const step = [...messages].reverse().find(isStep);
    const node = /STEP-([ABC])/.exec(step ? textOf(step) : '')?.[1];
    // Step a's turn ends with a reply the test holds open (after a's submission).
    if (last.role === 'tool') return node === 'A' ? { text: 'ok', hold: heldA } : { text: 'ok' };
    const id = stepId(lastText);
    if (!id) return { text: 'ok' };
    const submit = { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { word: `w${node}` } } } };
    // Step b's turn is held until the settle of a's turn has been handled.
    return node === 'B' ? { ...submit, hold: heldB } : submit;
  };
  const pi = await env.startPi({ sessionId: 'three', extraEnv: { PIW_PI_BARRIER_DIR: barriers } });
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/three.workflow.mjs`, { sessionId: 'three' });
  // a is accepted (b waits to be presented) and a's turn streams its last reply.
  await until(() => existsSync(join(barriers, 'present-b.reached')), 'the refresh that presents b');
  await until(() => env.model.requests.some((r) => r.last.role === 'tool'), "a's turn after its submission");
  const settleMark = pi.mark();
  releaseA();
  await pi.waitSettled(settleMark);
  // b is presented after a's turn settled, and before that settle is handled.
  const presentMark = pi.mark();
  rmSync(join(barriers, 'present-b.hold'));
  await until(() => pi.customMessages('piw-step', from).some((m) => m.details.node === 'b'), 'step b presented');
  // The refresh that presented b ends with the widget; the next one handles a's settle first.
  await until(
    () => pi.events.slice(presentMark).filter((e) => e.type === 'extension_ui_request' && e.method === 'setWidget').length >= 2,
    "a's settle handled",
  );
  releaseB();
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { a: 'wA', b: 'wB', c: 'wC' });
  const steps = pi.customMessages('piw-step', from);
  assert.deepEqual(steps.map((m) => [m.details.node, m.details.reminder]), [['a', 0], ['b', 0], ['c', 0]], 'each step presented once, no reminder');
  await pi.quit();
});

test('Escape (an aborted turn) pauses the run; resume presents the same request again', async () => {
  let hold;
  const held = new Promise((r) => (hold = r));
  let calls = 0;
  env.model.script = async ({ messages }) => {
    calls++;
    if (calls === 1) {
      await held; // the step's turn streams until the test aborts it
      return { text: 'too late' };
    }
    const step = [...messages].reverse().find(isStep);
    const id = stepId(textOf(step));
    return messages[messages.length - 1].role === 'tool' ? { text: 'done' } : { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'Resumed' } } } };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/titles.workflow.mjs`, { input: { task: 'x' }, sessionId: 'session-a' });
  await pi.waitEvent((e) => e.type === 'agent_start', 'the step turn', from);
  await until(() => calls === 1, 'the model request');
  await pi.send({ type: 'abort' });
  hold();
  await pi.waitEvent((e) => e.type === 'agent_settled' && e.aborted === true, 'the aborted settle', from);
  await pi.waitNotify(/workflow paused at draft/, from);
  assert.equal((await client.runStatus(run_id)).run.paused, true);
  const before = pi.customMessages('piw-step', from).length;
  const resumeFrom = pi.mark();
  await pi.prompt(`/workflow resume ${run_id}`);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { title: 'Resumed' });
  const after = pi.customMessages('piw-step', resumeFrom);
  assert.equal(after.length, 1, 'the same request is presented once after the resume');
  assert.equal(after[0].details.key, pi.customMessages('piw-step', from)[0].details.key);
  assert.equal(before, 1);
  await pi.quit();
});

test('one active request per session: the second run waits; a stale interaction id is refused', async () => {
  const seen = [];
  let stale = null;
  env.model.script = ({ messages, last, lastText }) => {
    if (last.role === 'tool') return { text: 'ok' };
    const id = stepId(lastText);
    if (!id) return { text: 'ok' };
    seen.push(id);
    if (seen.length === 2 && stale === null) {
      stale = seen[0];
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: seen[0], output: { title: 'late' } } } };
    }
    return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: `t${seen.length}` } } } };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const file = `${env.project}/.pi/workflows/titles.workflow.mjs`;
  const a = await client.startRun(file, { input: { task: 'a' }, sessionId: 'session-a' });
  await client.waitForRun(a.run_id, { untilParked: true, timeoutMs: 30_000 });
  const b = await client.startRun(file, { input: { task: 'b' }, sessionId: 'session-a' });
  const ra = await client.waitForRun(a.run_id, { timeoutMs: 30_000 });
  const rb = await client.waitForRun(b.run_id, { timeoutMs: 30_000 });
  assert.equal(ra.status, 'completed');
  assert.equal(rb.status, 'completed');
  const steps = pi.customMessages('piw-step', from).filter((m) => m.details.reminder === 0);
  assert.equal(steps.length, 2);
  assert.equal(steps[0].details.runId, a.run_id, 'the first run is presented first');
  assert.equal(steps[1].details.runId, b.run_id);
  const refused = await pi.waitEvent(
    (e) => e.type === 'tool_execution_end' && e.isError && /is closed: it was already accepted; this output was not submitted; this session's current request is interaction/.test(JSON.stringify(e.result)),
    'the stale submit refused',
    from,
  );
  assert.match(JSON.stringify(refused.result), new RegExp(steps[1].details.key));
  await pi.quit();
});

test('update records progress on the open step without completing it; the widget shows it', async () => {
  let phase = 0;
  env.model.script = ({ last, lastText }) => {
    const id = stepId(lastText);
    if (id && phase === 0) {
      phase = 1;
      return { tool: { name: 'workflow', arguments: { action: 'update', message: 'read 3 files' } } };
    }
    if (last.role === 'tool' && phase === 1) {
      phase = 2;
      return { tool: { name: 'workflow', arguments: { action: 'submit', output: { title: 'With progress' } } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/titles.workflow.mjs`, { input: { task: 'x' }, sessionId: 'session-a' });
  const noted = await pi.waitEvent((e) => e.type === 'tool_execution_end' && e.toolName === 'workflow', 'the update', from);
  assert.equal(noted.isError, false, JSON.stringify(noted.result));
  assert.match(JSON.stringify(noted.result), /progress noted for step draft/);
  await pi.waitEvent(
    (e) => e.type === 'extension_ui_request' && e.method === 'setWidget' && (e.widgetLines ?? []).some((l) => /read 3 files/.test(l)),
    'the widget with the progress',
    from,
  );
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { title: 'With progress' });
  await pi.quit();
});

test('update in the structured form workflows publish: checked, kept as the latest for its key with a receipt, shown as a progress track; a wrong step is refused', async () => {
  let phase = 0;
  const data = { schema: 'pi-workflows.progress.v1', label: 'Files', status: 'running', completed: 1, total: 4, unit: 'files' };
  env.model.script = ({ last, lastText }) => {
    const id = stepId(lastText);
    if (id && phase === 0) {
      phase = 1;
      return { tool: { name: 'workflow', arguments: { action: 'update', step: 'elsewhere', update: { type: 'progress', key: 'overall', data } } } };
    }
    if (last.role === 'tool' && phase === 1) {
      phase = 2;
      return { tool: { name: 'workflow', arguments: { action: 'update', step: 'draft', update: { type: 'progress', key: 'overall', data: { ...data, completed: 9 } } } } };
    }
    if (last.role === 'tool' && phase === 2) {
      phase = 3;
      return { tool: { name: 'workflow', arguments: { action: 'update', step: 'draft', update: { type: 'progress', key: 'overall', data } } } };
    }
    if (last.role === 'tool' && phase === 3) {
      phase = 4;
      return { tool: { name: 'workflow', arguments: { action: 'submit', output: { title: 'Tracked' } } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/titles.workflow.mjs`, { input: { task: 'x' }, sessionId: 'session-a' });
  const ends = [];
  for (let i = 0; i < 3; i++) {
    ends.push(await pi.waitEvent((e) => e.type === 'tool_execution_end' && e.toolName === 'workflow' && !ends.includes(e), `update ${i + 1}`, from));
  }
  assert.equal(ends[0].isError, true);
  assert.match(JSON.stringify(ends[0].result), /update is for step elsewhere, but the open step is draft/);
  assert.equal(ends[1].isError, true);
  assert.match(JSON.stringify(ends[1].result), /update refused: progress.total must be at least progress.completed/);
  assert.equal(ends[2].isError, false, JSON.stringify(ends[2].result));
  const receipt = ends[2].result.details.receipt;
  assert.equal(receipt.type, 'progress');
  assert.equal(receipt.key, 'overall');
  assert.equal(typeof receipt.seq, 'number');
  assert.match(receipt.updateId, /^upd_/);
  await pi.waitEvent(
    (e) => e.type === 'extension_ui_request' && e.method === 'setWidget' && (e.widgetLines ?? []).some((l) => /^ {2}Files {2}1\/4 files/.test(l)),
    'the widget with the track',
    from,
  );
  const status = await client.runStatus(run_id);
  assert.deepEqual(status.updates.map((u) => [u.type, u.key, u.data.completed, u.node_id]), [['progress', 'overall', 1, 'draft']]);
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { title: 'Tracked' });
  await pi.quit();
});

test('a paused run\'s pending step does not keep another run\'s step from being presented', async () => {
  env.model.script = () => ({ text: 'ok' });
  const client = await env.client();
  const file = join(env.project, '.pi/workflows/titles.workflow.mjs');
  const a = await client.startRun(file, { input: { task: 'A' }, sessionId: 'two' });
  await client.waitForRun(a.run_id, { untilParked: true, timeoutMs: 30_000 });
  await client.pauseRun(a.run_id);
  const b = await client.startRun(file, { input: { task: 'B' }, sessionId: 'two' });
  await client.waitForRun(b.run_id, { untilParked: true, timeoutMs: 30_000 });
  const pi = await env.startPi({ sessionId: 'two' });
  const step = await until(() => pi.customMessages('piw-step')[0], 'a step presented');
  assert.equal(step.details.runId, b.run_id);
  assert.ok(pi.customMessages('piw-step').every((m) => m.details.runId === b.run_id), 'the paused run is not presented');
  await pi.quit();
});

test('resuming a run whose step was never presented presents it once', async () => {
  let release;
  const held = new Promise((r) => (release = r));
  env.model.script = async () => {
    await held;
    return { text: 'ok' };
  };
  const client = await env.client();
  const file = join(env.project, '.pi/workflows/titles.workflow.mjs');
  const a = await client.startRun(file, { input: { task: 'A' }, sessionId: 'res' });
  await client.waitForRun(a.run_id, { untilParked: true, timeoutMs: 30_000 });
  await client.pauseRun(a.run_id);
  const pi = await env.startPi({ sessionId: 'res' });
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'the first refresh');
  assert.equal(pi.customMessages('piw-step').length, 0, 'a paused run is not presented');
  await pi.prompt(`/workflow resume ${a.run_id}`);
  const first = await until(() => pi.customMessages('piw-step')[0], 'the step after the resume');
  assert.match(first.content, /^The workflow was resumed\./);
  release();
  // Everything the resume sent is in the first model request: the step once.
  await pi.waitSettled();
  assert.equal((env.model.requests[0].allText.match(/Workflow step — workflow/g) ?? []).length, 1, 'the model saw the step once');
  assert.equal(pi.customMessages('piw-step').filter((m) => m.details.reminder === 0).length, 1, 'presented once');
  await pi.quit();
});

test('Escape while submit waits for the validation returns at once; the verdict is reported when it comes', async () => {
  const gate = join(env.root, 'validate-now');
  writeFileSync(
    join(env.project, '.pi', 'workflows', 'slowval.workflow.mjs'),
    `import { existsSync } from 'node:fs';
import { defineWorkflow, agent, compute } from ${JSON.stringify(join(pkgDir, 'index.js'))};
export default defineWorkflow({
  name: 'slowval', startAt: 'draft',
  nodes: {
    draft: agent({ prompt: 'SLOW-STEP give a title', validate: async (o) => {
      while (!existsSync(${JSON.stringify(gate)})) await new Promise((r) => setTimeout(r, 20));
      return o;
    } }),
    done: compute({ run: ({ outputs }) => outputs.draft }),
  },
  edges: [{ from: 'draft', to: 'done' }],
});`,
  );
  let submits = 0;
  env.model.script = ({ lastText }) => {
    if (/SLOW-STEP/.test(lastText) && !/Reminder/.test(lastText)) {
      submits += 1;
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: stepId(lastText), output: { title: 't' } } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi({ sessionId: 'esc-submit' });
  const client = await env.client();
  const from = pi.mark();
  await pi.prompt('/workflow slowval');
  await pi.waitEvent((e) => e.type === 'tool_execution_start', 'the submit call', from);
  const [run] = await until(async () => {
    const st = (await client.listRuns({ sessionId: 'esc-submit' }))[0];
    return st && (await client.runStatus(st.run_id)).interactions.some((i) => i.status === 'validating') && [st];
  }, 'the submission validating');
  await pi.send({ type: 'abort' });
  // The validation cannot end before the gate opens: the tool ended without its verdict.
  const end = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the submit end', from);
  assert.equal(existsSync(gate), false);
  assert.match(JSON.stringify(end.result), /outcome is not known yet/);
  writeFileSync(gate, '');
  await pi.waitNotify(/workflow step draft .*: submission accepted/, from);
  assert.equal((await client.waitForRun(run.run_id, { timeoutMs: 30_000 })).status, 'completed');
  await until(() => pi.customMessages('piw-message', from).some((m) => m.details.kind === 'verdict'), 'the verdict card');
  assert.equal(submits, 1, 'submitted once');
  await pi.quit();
});

test('a run cancelled while the model works on its step stops the turn; the run\'s card says why; nothing is paused, no new turn', async () => {
  env.model.script = ({ lastText }) => (stepId(lastText) ? { text: 'Working on it', hold: new Promise(() => {}) } : { text: 'ok' });
  const pi = await env.startPi({ sessionId: 'cancel' });
  const client = await env.client();
  const from = pi.mark();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/titles.workflow.mjs`, { input: { task: 'x' }, sessionId: 'cancel' });
  await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', "the step's turn streaming", from);
  const requests = env.model.requests.length;
  await client.cancelRun(run_id, { reason: 'not needed' });
  await pi.waitEvent((e) => e.type === 'agent_settled' && e.aborted === true, 'the turn stopped', from);
  const card = await until(() => pi.customMessages('piw-message', from).find((m) => m.details.kind === 'terminal'), "the run's card");
  assert.match(card.content, /cancelled/);
  // Settled and handled: a refresh after it ends with the widget.
  const after = pi.mark();
  await pi.prompt('/workflow list');
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'a refresh after the stop', after);
  assert.equal(pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'turn_stopped').length, 0, 'the run\'s card is the one message');
  assert.equal(pi.notifications(from).filter((n) => /paused/.test(n)).length, 0, 'nothing paused');
  assert.equal(env.model.requests.length, requests, 'no new turn');
  await pi.quit();
});

test('a step that times out while the model works on it stops the turn with one message saying so; the next step gets its own turn; a late submit hears that it timed out', async () => {
  // The host runs on a test clock: the deadline passes when this test moves it.
  const clock = join(env.root, 'clock');
  const advance = (ms) => {
    writeFileSync(`${clock}.tmp`, String(ms));
    renameSync(`${clock}.tmp`, clock);
  };
  const client = await Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock } });
  try {
    env.addWorkflow('deadline.workflow.mjs', 'deadline');
    let firstId = null;
    let late = null;
    env.model.script = ({ messages, last }) => {
      // The newest step in the context (cards without a turn may come after it).
      const step = [...messages].reverse().find(isStep);
      const id = step ? stepId(textOf(step)) : null;
      if (!id) return { text: 'ok' };
      if (/Answer first/.test(textOf(step))) {
        firstId = id;
        return { text: 'Working on it', hold: new Promise(() => {}) };
      }
      const submit = (interactionId) => ({ tool: { name: 'workflow', arguments: { action: 'submit', interactionId, output: { ok: true } } } });
      // On the second step the model submits the first one late, once, then the second.
      if (late === null) {
        late = 'sent';
        return submit(firstId);
      }
      if (late === 'sent') {
        late = 'done';
        return submit(id);
      }
      return { text: 'ok' };
    };
    const pi = await env.startPi({ sessionId: 'late' });
    const from = pi.mark();
    await pi.prompt('/workflow deadline');
    await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', "the first step's turn streaming", from);
    const [{ run_id: runId }] = await client.listRuns({ sessionId: 'late' });
    advance(60_000);
    await client.runStatus(runId); // wakes a host asleep until the old deadline
    await pi.waitEvent((e) => e.type === 'agent_settled' && e.aborted === true, 'the turn stopped', from);
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed');
    assert.equal(run.paused, false);
    const stopped = pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'turn_stopped');
    assert.equal(stopped.length, 1);
    assert.match(stopped[0].content, /Stop working on workflow step first .*: it timed out/);
    const steps = pi.customMessages('piw-step', from);
    assert.deepEqual(steps.map((m) => [m.details.node, m.details.reminder]), [['first', 0], ['second', 0]]);
    const refused = await pi.waitEvent((e) => e.type === 'tool_execution_end' && e.isError, 'the late submit refused', from);
    assert.match(JSON.stringify(refused.result), new RegExp(`interaction ${firstId} \\(step [^)]*\\) is closed: it timed out`));
    assert.equal(pi.notifications(from).filter((n) => /paused/.test(n)).length, 0, 'nothing paused');
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});
