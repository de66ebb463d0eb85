// Interactive steps in the origin session: reminders when a turn settles without a submission,
// Escape (an aborted turn) pauses the run and resume continues the same request (presented once),
// one active request per session (a paused run's request does not hold the others back), a stale
// attempt refused, Escape while `submit` waits for the validation.
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, pkgDir, sleep, until } from './harness.mjs';

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
  await client.waitForRun(a.run_id, { untilParked: true, timeoutMs: 30_000 }).catch(() => {});
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
    (e) => e.type === 'tool_execution_end' && e.isError && /is closed: it already took an output \(accepted\); this output was not submitted; this session's current request is interaction/.test(JSON.stringify(e.result)),
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
