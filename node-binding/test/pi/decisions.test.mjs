// Protected human decisions through ctx.ui dialogs (extension_ui_request/response), the tool's
// `answer` refusing them, and workflow messages (notify output, the run's end) delivered once.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

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
  assert.match(messages[0].content, /hello from the workflow: greet everyone/);
  assert.equal(messages[1].details.kind, 'terminal');
  assert.match(messages[1].content, /completed/);
  assert.equal(env.model.requests.length, 0, 'no model turn');
  const client = await env.client();
  assert.deepEqual(await client.claimMessages('session-a'), [], 'every message was acknowledged');
  await pi.quit();
});
