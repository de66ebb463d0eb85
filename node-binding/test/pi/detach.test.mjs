// `/workflow detach`: a run started in a Pi session carries on after that Pi is closed. Its
// step is answered by the Pi the host starts (the bridge), and the session gets the run's
// result when it is opened again. Real Pi, the mock model, the host's detached settings.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { DETACHED, piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('gated-step.workflow.mjs', 'gated-step');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];

test('/workflow detach: the run carries on once Pi is closed, its step answered by the host\'s Pi; the session gets the result when it opens again', async () => {
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    return id ? { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'Docs, detached' } } } } : { text: 'ok' };
  };
  const c = await env.client({ hostEnv: DETACHED });
  const gate = join(env.root, 'gate');
  let pi = await env.startPi({ sessionId: 'closing' });
  await pi.prompt(`/workflow gated-step --input-json ${JSON.stringify({ gate, task: 'the docs' })}`);
  const runId = await until(async () => (await c.listRuns({ sessionId: 'closing' }))[0]?.run_id, 'the run');
  assert.equal((await c.runStatus(runId)).run.execution_mode, 'interactive');
  let from = pi.mark();
  await pi.prompt('/workflow detach');
  await pi.waitNotify(new RegExp(`detached run ${runId}: a Pi the host starts answers its steps from now on`), from);
  assert.equal((await c.runStatus(runId)).run.execution_mode, 'detached');
  await pi.quit();

  // Pi is closed: the step comes, and the host's Pi answers it.
  const asked = env.model.requests.length;
  writeFileSync(gate, '');
  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { title: 'Docs, detached' });
  const answered = env.model.requests.slice(asked).find((r) => stepId(r.lastText ?? ''));
  assert.ok(answered, 'the step reached a model after Pi was closed');
  const tool = answered.tools.find((t) => (t.function ?? t).name === 'workflow');
  assert.deepEqual((tool.function ?? tool).parameters.properties.action.enum, ['update', 'submit'], "the host's Pi, not the session");

  // The session, opened again, gets the run's result.
  pi = await env.startPi({ sessionId: 'closing' });
  from = 0;
  const terminal = await until(() => pi.customMessages('piw-message', from).find((m) => m.details?.kind === 'terminal'), 'the result in the session');
  assert.match(JSON.stringify(terminal.content), /gated-step completed/);
  await pi.quit();
});
