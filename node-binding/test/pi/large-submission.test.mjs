// A submission as large as a node output, through real Pi: the model's output over the
// protocol's 256 KiB payload is uploaded by the client (`interaction.value_put`) and submitted
// as its reference; `validate` sees it whole and the run's result holds it. One over 64 MiB is
// refused at once, and the tool says why (its size and the limit), nothing sent to the host.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('large-output.workflow.mjs', 'large');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];

test('a 1 MB output is uploaded, validated whole and is the run result', async () => {
  const size = 1_000_000;
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'tool') return { text: 'done' };
    const id = stepId(lastText);
    return id ? { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { blob: 'b'.repeat(size) } } } } : { text: 'ok' };
  };
  const pi = await env.startPi();
  const client = await env.client();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/large.workflow.mjs`, { input: { size }, sessionId: 'session-a' });
  const run = await client.waitForRun(run_id, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', JSON.stringify(run.error ?? null));
  assert.equal(run.result.blob.length, size);
  assert.equal(run.result.blob, 'b'.repeat(size));
  // The tool said it was accepted, not refused.
  const toolReply = env.model.requests.find((r) => r.last.role === 'tool');
  assert.match(toolReply.lastText, /accepted/i);
  const { attempts } = await client.runStatus(run_id);
  assert.equal(attempts.find((a) => a.node_id === 'make').output.blob.length, size);
  await pi.quit();
});

test('an output over the limit is refused at once: the tool result names the size and the limit', async () => {
  // The session's client refuses over its limit, lowered here to 1 MiB (the 64 MiB limit itself:
  // client.test.mjs): Pi carries the refused tool call in every later request of the session.
  const limit = 1024 * 1024;
  const size = 2 * limit;
  let sent = false;
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'tool') return { text: 'I cannot make it smaller' };
    const id = stepId(lastText);
    if (id && !sent) {
      sent = true;
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { blob: 'z'.repeat(size) } } } };
    }
    return { text: 'no' };
  };
  const pi = await env.startPi({ extraEnv: { PIW_TEST_SUBMISSION_LIMIT: String(limit) } });
  const client = await env.client();
  const { run_id } = await client.startRun(`${env.project}/.pi/workflows/large.workflow.mjs`, { input: { size }, sessionId: 'session-a' });
  await until(() => env.model.requests.some((r) => r.last.role === 'tool'), 'the tool result of the submission', 120_000);
  const toolReply = env.model.requests.find((r) => r.last.role === 'tool');
  assert.match(toolReply.lastText, /too large to submit: the submission is \d+ bytes of JSON, over the limit of 1048576 bytes \(1 MiB\) a value may have; nothing was submitted/);
  assert.doesNotMatch(toolReply.lastText, /262144/);
  // Nothing reached the host: the step is still open, no submission was taken.
  const { interactions } = await client.runStatus(run_id);
  assert.equal(interactions[0].status, 'pending');
  assert.equal(interactions[0].last_submission ?? null, null);
  await pi.quit();
});

test('a step that fails for want of a submission names the last refusal, not "no submission"', async () => {
  // The session's end of a step after its reminders, on a stand-in for Pi and the host: the 70 MB
  // turn above would take minutes of Pi's time per reminder.
  const { WorkflowSession } = await import('../../extension/session.js');
  const failed = [];
  const item = { interaction_id: 'int-1', run_id: 'run-1', node_id: 'make', attempt_id: 'att-1' };
  const session = Object.assign(Object.create(WorkflowSession.prototype), {
    submitRefusals: new Map(),
    remindersOf: () => 2,
    lastAssistantText: () => null,
    call: async (_kind, fn) => fn({ failInteraction: async (_i, reason) => (failed.push(reason), { routed_to: 'gaveUp' }) }),
    ctx: { ui: { notify: () => {} } },
  });
  const active = { type: 'interaction', kind: 'agent', id: 'int-1', runId: 'run-1', item };
  const status = { run: { workflow_name: 'large' }, interactions: [{ interaction_id: 'int-1', last_submission: null }] };
  session.noteSubmitRefusal('int-1', 'this output is too large to submit: ... over the limit of 67108864 bytes');
  await session.afterTurn(active, status);
  assert.deepEqual(failed, ['no submission after 2 reminders; the last was refused: this output is too large to submit: ... over the limit of 67108864 bytes']);
  // Without a refusal, as before.
  session.submitRefusals.clear();
  await session.afterTurn(active, status);
  assert.equal(failed[1], 'no submission after 2 reminders');
});
