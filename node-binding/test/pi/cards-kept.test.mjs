// Workflow cards a session never kept: Pi 1.6 writes no session file until the session has a
// user or assistant message, so a session that only received workflow cards (a run started
// with `/workflow` and no chat) keeps nothing of them when Pi quits. The extension
// acknowledges a message to the host only once it is durable where the person will see it
// again (the session file holds it); until then the host gives it again at the next start,
// and the person sees each card exactly once. Real Pi, the mock model.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('notify.workflow.mjs', 'notifier');
});
afterEach(async () => {
  await env?.close();
});

/** The workflow cards in the session as Pi holds it (`get_messages`): kinds, in order. */
async function cardsIn(pi) {
  const { data } = await pi.send({ type: 'get_messages' });
  return data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message').map((m) => m.details?.kind);
}

test('cards of a session with no chat are delivered again after Pi quits, once each; kept once the session is', async () => {
  const c = await env.client();
  let pi = await env.startPi({ sessionId: 'quiet' });
  await pi.prompt(`/workflow notifier --input-json ${JSON.stringify({ task: 'cards' })}`);
  await until(async () => (await cardsIn(pi)).includes('terminal'), 'both cards in the session');
  assert.deepEqual(await cardsIn(pi), ['notify', 'terminal']);
  const [run] = await c.listRuns({ sessionId: 'quiet' });
  assert.equal((await c.waitForRun(run.run_id, { timeoutMs: 30_000 })).status, 'completed');
  await pi.quit();

  // Pi kept no session file (nothing but cards): the cards come again, each once.
  pi = await env.startPi({ sessionId: 'quiet' });
  await until(async () => (await cardsIn(pi)).includes('terminal'), 'the cards given again');
  assert.deepEqual(await cardsIn(pi), ['notify', 'terminal'], 'each card once');

  // The person writes something: Pi keeps the session, and with it the cards.
  env.model.script = () => ({ text: 'noted' });
  const from = pi.mark();
  await pi.prompt('thanks');
  await pi.waitSettled(from);
  await pi.quit();
  pi = await env.startPi({ sessionId: 'quiet' });
  const kept = await cardsIn(pi);
  assert.deepEqual(kept, ['notify', 'terminal'], 'kept by Pi, not given a third time');
  // A refresh (what would deliver them again) happens and adds nothing.
  await pi.prompt('/workflow list');
  assert.deepEqual(await cardsIn(pi), ['notify', 'terminal']);
  await pi.quit();
});
