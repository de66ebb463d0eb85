// A detached run of a session that waits on an ordinary checkpoint: its model is not asked (a
// person answers), so its open origin session gets one card per checkpoint saying where the run
// is parked and how a person answers it; not again after Pi restarts.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';

import { DETACHED, piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await env?.close();
});

const parkedCards = (pi, from = 0) => pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'checkpoint');

test('a detached run parked at a checkpoint tells its origin session once per checkpoint how a person answers it', async () => {
  const file = env.addWorkflow('twocheck.workflow.mjs', 'twocheck');
  // A host that may start detached runs (its Pi settings), before Pi connects to it.
  const client = await env.client({ hostEnv: DETACHED });
  const pi = await env.startPi({ sessionId: 'parked' });
  // A session Pi has saved (it writes the file once the conversation has started).
  await pi.prompt('hi');
  await pi.waitSettled();
  const turns = env.model.requests.length;
  const { run_id: runId } = await client.startRun(file, { sessionId: 'parked', executionMode: 'detached', projectDir: env.project });

  const first = await until(() => parkedCards(pi)[0], 'the card of the first checkpoint');
  assert.equal(first.details.runId, runId);
  assert.match(first.content, new RegExp(`^Workflow twocheck \\(run ${runId}, detached\\) is parked at checkpoint first, waiting for a person's answer\\.`));
  assert.match(first.content, /CHECK-ONE: go on\?/);
  assert.match(first.content, new RegExp(`/workflow answer ${runId} <answer> here, or piw run answer ${runId} <answer> from a shell\\.$`));
  assert.equal(env.model.requests.length, turns, 'no model turn for it');
  await pi.quit();

  // Not again at the next start: the session holds it.
  const again = await env.startPi({ sessionId: 'parked' });
  const from = again.mark();
  await again.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'the first refresh');
  await again.prompt(`/workflow answer ${runId} "yes"`);
  // The next checkpoint gets its own card, and the first none again.
  const second = await until(() => parkedCards(again, from)[0], 'the card of the second checkpoint');
  assert.match(second.content, /parked at checkpoint second/);
  assert.match(second.content, /CHECK-TWO: still go on\?/);
  assert.deepEqual(parkedCards(again).map((m) => m.details.node), ['second']);
  await again.prompt(`/workflow answer ${runId} "sure"`);
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { first: 'yes', second: 'sure' });
  await until(() => again.customMessages('piw-message').some((m) => m.details.kind === 'terminal'), 'the result card');
  const { data } = await again.send({ type: 'get_messages' });
  const inSession = data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message' && m.details?.kind === 'checkpoint');
  assert.deepEqual(inSession.map((m) => m.details.node), ['first', 'second'], 'one card per checkpoint in the session');
  await again.quit();
});
