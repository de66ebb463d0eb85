// Protected human decisions through ctx.ui dialogs (extension_ui_request/response), the tool's
// `answer` refusing them, and workflow messages (notify output, the run's end) delivered once.
import assert from 'node:assert/strict';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { Client } from '../../index.js';
import { hostBin, piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await env?.close();
});

test('a protected decision is answered through the select dialog; the tool cannot answer it', async () => {
  env.addWorkflow('decision.workflow.mjs', 'ship');
  let runId = null;
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'user' && /answer it yourself/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'answer', runId, answer: { choice: 'yes' } } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  await pi.prompt('/workflow ship');
  const dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
  assert.match(dialog.title, /Ship it\?/);
  assert.deepEqual(dialog.options, ['Ship', 'Hold']);
  runId = (await client.listRuns({ sessionId: 'session-a' }))[0].run_id;
  // The dialog started no model turn.
  assert.equal(env.model.requests.length, 0);
  const toolFrom = pi.mark();
  await pi.prompt('answer it yourself');
  const refused = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the answer tool call', toolFrom);
  assert.equal(refused.isError, true);
  assert.match(JSON.stringify(refused.result), /protected human decision: a person must decide/);
  await pi.waitSettled(toolFrom);
  pi.respondUi(dialog.id, { value: 'Ship' });
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { shipped: true });
  const { decisions } = await client.runStatus(runId);
  assert.equal(decisions[0].answered_by, 'person');
  // The result card arrives once, with no model turn for it.
  await until(() => pi.customMessages('piw-message', from).some((m) => m.details.kind === 'terminal'), 'the result card');
  assert.equal(pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'terminal').length, 1);
  await pi.quit();
});

test("the dialog asks for text only for the choice that collects it, and again until it fits the choice's rule", async () => {
  env.addWorkflow('reasoned.workflow.mjs', 'reasoned');
  env.model.script = () => ({ text: 'ok' });
  const pi = await env.startPi();
  const client = await env.client();

  // A choice without text: no text dialog follows the pick.
  let from = pi.mark();
  await pi.prompt('/workflow reasoned');
  let dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
  const shipped = (await client.listRuns({ sessionId: 'session-a' }))[0].run_id;
  pi.respondUi(dialog.id, { value: 'Ship' });
  let run = await client.waitForRun(shipped, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { choice: 'ship', reason: null });
  assert.equal(pi.events.slice(from).filter((e) => e.type === 'extension_ui_request' && e.method === 'input').length, 0);

  // The choice with a reason: asked with the workflow's prompt and rule; a short reason is not
  // sent (the run keeps waiting) and the person is asked again.
  from = pi.mark();
  await pi.prompt('/workflow reasoned');
  dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
  const held = (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== shipped).run_id;
  pi.respondUi(dialog.id, { value: 'Hold' });
  const ask = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the reason dialog', from);
  assert.match(ask.title, /Why hold\? \(at least 5 characters\)/);
  const again = pi.mark();
  pi.respondUi(ask.id, { value: 'no' });
  const reask = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the reason dialog again', again);
  assert.match(reask.title, /at least 5 characters, got 2/);
  const status = await client.runStatus(held);
  assert.equal(status.run.status, 'waiting');
  assert.equal(status.decisions[0].status, 'pending');
  pi.respondUi(reask.id, { value: 'not ready yet' });
  run = await client.waitForRun(held, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { choice: 'hold', reason: 'not ready yet' });
  await pi.quit();
});

test('the dialog shows what is decided: the title, summary and every block of the presentation, in order (RPC: the select\'s title)', async () => {
  env.addWorkflow('plan.workflow.mjs', 'plan');
  const pi = await env.startPi();
  const client = await env.client();
  const from = pi.mark();
  await pi.prompt('/workflow plan');
  const dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
  const steps = Array.from({ length: 30 }, (_, i) => `• Step ${i + 1} of the plan.`);
  assert.equal(
    dialog.title,
    [
      'Workflow plan: Approve the migration plan',
      '',
      'Move the store to the new schema in thirty steps.',
      '',
      'Changes',
      '',
      'Every table is copied, then swapped.',
      ...steps,
      '',
      'Facts',
      'Tables: 12',
      'Downtime: none',
      'piw migrate --dry-run',
      '  then: piw migrate',
      '',
      'END-OF-PLAN',
    ].join('\n'),
  );
  assert.deepEqual(dialog.options, ['Approve', 'Reject']);
  const [{ run_id: runId }] = await client.listRuns({ sessionId: 'session-a' });
  pi.respondUi(dialog.id, { value: 'Reject' });
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { approved: false });
  await pi.quit();
});

test('a dialog closes when the decision is answered elsewhere; /workflow answer decides it', async () => {
  env.addWorkflow('decision.workflow.mjs', 'ship');
  const pi = await env.startPi({ sessionId: 'session-b' });
  const client = await env.client();
  const from = pi.mark();
  await pi.prompt('/workflow ship');
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
  const runId = (await client.listRuns({ sessionId: 'session-b' }))[0].run_id;
  await pi.prompt(`/workflow answer ${runId} no`);
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { shipped: false });
  // The open dialog was dismissed (its abort), and is not offered again.
  await pi.waitNotify(/workflow ship completed/, from);
  const selects = pi.events.slice(from).filter((e) => e.type === 'extension_ui_request' && e.method === 'select');
  assert.equal(selects.length, 1);
  await pi.quit();
});

test('notify output and the result reach the session once, without a model turn', async () => {
  env.addWorkflow('notify.workflow.mjs', 'hello', 'global');
  const pi = await env.startPi();
  const from = pi.mark();
  await pi.prompt('/workflow hello greet everyone');
  const messages = await until(() => {
    const m = pi.customMessages('piw-message', from);
    return m.length >= 2 && m;
  }, 'the notify and the result');
  assert.equal(messages[0].details.kind, 'notify');
  // The message itself, not the node's output JSON.
  assert.equal(messages[0].content, 'hello from the workflow: greet everyone');
  assert.equal(messages[1].details.kind, 'terminal');
  assert.match(messages[1].content, /completed/);
  assert.equal(env.model.requests.length, 0, 'no model turn');
  const client = await env.client();
  assert.deepEqual(await client.claimMessages('session-a'), [], 'every message was acknowledged');
  await pi.quit();
});

test('an open dialog closes when the host applies the decision\'s onTimeout response at its deadline', async () => {
  // The host runs on a test clock: the deadline passes when this test moves it, never by itself.
  const clock = join(env.root, 'clock');
  const advance = (ms) => {
    writeFileSync(`${clock}.tmp`, String(ms));
    renameSync(`${clock}.tmp`, clock);
  };
  const client = await Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock } });
  try {
    env.addWorkflow('expiring.workflow.mjs', 'expiring');
    const pi = await env.startPi({ sessionId: 'session-c' });
    const from = pi.mark();
    await pi.prompt('/workflow expiring');
    await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
    const [{ run_id: runId }] = await client.listRuns({ sessionId: 'session-c' });
    advance(600_001);
    await client.runStatus(runId); // wakes a host asleep until the old deadline
    // Closed by the workflow's own response, and said so: not "answered" as if a person had.
    await pi.waitNotify(/workflow decision ask \(run .*\) was closed: nobody answered in time, so the workflow's onTimeout response was applied \(Go\)/, from);
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.deepEqual(run.result, { choice: 'go', provenance: 'timeout' });
    await pi.waitNotify(/workflow expiring completed/, from);
    // Closed, and not offered again.
    const selects = pi.events.slice(from).filter((e) => e.type === 'extension_ui_request' && e.method === 'select');
    assert.equal(selects.length, 1);
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

test('a model that answered a checkpoint of a run and then tries its protected decision hears that a person decides it, and cannot answer it', async () => {
  env.addWorkflow('guarded.workflow.mjs', 'guarded');
  let runId = null;
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'user' && /GUARD-CHECKPOINT/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'answer', answer: { go: true } } } };
    }
    if (last.role === 'user' && /decide it yourself/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'answer', runId, answer: { choice: 'yes' } } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi({ sessionId: 'guarded' });
  const client = await env.client();
  const from = pi.mark();
  await pi.prompt('/workflow guarded');
  // The model answers the checkpoint; then the decision's dialog opens.
  await pi.waitEvent((e) => e.type === 'tool_execution_end' && !e.isError && /answered checkpoint confirm/.test(JSON.stringify(e.result)), 'the checkpoint answered', from);
  const dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the select dialog', from);
  runId = (await client.listRuns({ sessionId: 'guarded' }))[0].run_id;
  await pi.waitSettled(from);
  const toolFrom = pi.mark();
  await pi.prompt('decide it yourself');
  const refused = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the answer tool call', toolFrom);
  assert.equal(refused.isError, true);
  const said = JSON.stringify(refused.result);
  assert.match(said, /decision approve \(.*\) of run .* is a protected human decision: a person must decide it/);
  assert.match(said, /its dialog, or \/workflow answer .* or from a shell \(piw run decide /);
  assert.doesNotMatch(said, /is closed/);
  await pi.waitSettled(toolFrom);
  const waiting = await client.runStatus(runId);
  assert.equal(waiting.decisions.find((d) => d.node_id === 'approve').status, 'pending');
  pi.respondUi(dialog.id, { value: 'Ship' });
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { confirmed: { go: true }, shipped: true });
  assert.equal((await client.runStatus(runId)).decisions.find((d) => d.node_id === 'approve').answered_by, 'person');
  await pi.quit();
});
