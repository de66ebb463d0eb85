// message.claim claims only a frame's worth of messages (`more`): the Pi extension claims again
// until a claim comes back empty, not only after a full batch, or the messages that did not fit
// the first claim would wait for some later event, which may never come.
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

test('messages that fill more than one frame all reach the session at its next start', async () => {
  const file = env.addWorkflow('loud.workflow.mjs', 'loud');
  const client = await env.client();
  const { run_id } = await client.startRun(file, { sessionId: 'loud' });
  const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  const pi = await env.startPi({ sessionId: 'loud' });
  const messages = await until(() => {
    const m = pi.customMessages('piw-message');
    return m.length >= 22 && m;
  }, 'all twenty-one notify messages and the end').catch((e) => {
    const kinds = pi.customMessages('piw-message').map((m) => m.details.kind);
    throw new Error(`${e.message}: the session holds ${JSON.stringify(kinds)}`);
  });
  assert.deepEqual(
    messages.map((m) => m.details.kind),
    [...Array(21).fill('notify'), 'terminal'],
  );
  // The 200 KB message was stored apart; the session got it whole.
  const text = (m) => (typeof m.content === 'string' ? m.content : m.content.map((b) => b.text ?? '').join(''));
  assert.ok(text(messages[20]).includes(`huge: ${'y'.repeat(200_000)}`), text(messages[20]).slice(0, 300));
  await pi.quit();
});
