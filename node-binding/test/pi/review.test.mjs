// A run of the session that stops for review while the model works on its step: the workflow
// file is edited while the model works on step 2 of 2, so the child that judges the submission
// finds a changed source and the run stops for review. `submit` says so at once (not a timeout).
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

let env;
let file;
beforeEach(async () => {
  env = await piEnv();
  file = env.addWorkflow('twostep.workflow.mjs', 'twostep');
});
afterEach(async () => {
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];

/**
 * The model submits step one at once; on step two it streams its first chunk and waits until
 * the test releases it (the file is edited meanwhile), then submits. `afterReview` answers the
 * tool result that says the run stopped for review.
 */
function scriptModel(afterReview) {
  let release;
  const released = new Promise((r) => (release = r));
  let reachedTwo;
  const atTwo = new Promise((r) => (reachedTwo = r));
  env.model.script = ({ lastText }) => {
    if (/stopped for review/.test(lastText)) return afterReview();
    const id = stepId(lastText);
    if (id && /STEP-ONE/.test(lastText)) return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'one' } } } };
    if (id && /STEP-TWO/.test(lastText)) {
      reachedTwo();
      return { hold: released, tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'two' } } } };
    }
    return { text: 'ok' };
  };
  return { atTwo, release };
}

/** The run started in `sessionId`, held at step two with its workflow file edited, then released. */
async function editWhileOnStepTwo(pi, client, sessionId, model) {
  const { run_id } = await client.startRun(file, { input: { task: 'x' }, sessionId });
  await model.atTwo;
  appendFileSync(file, '\n// edited while the model worked on step two\n');
  const from = pi.mark();
  model.release();
  return { runId: run_id, from };
}

test('submit says at once that the run stopped for review because its workflow file changed; the submission is kept', async () => {
  const model = scriptModel(() => ({ text: 'understood' }));
  const pi = await env.startPi({ sessionId: 'review-submit' });
  const client = await env.client();
  const { runId, from } = await editWhileOnStepTwo(pi, client, 'review-submit', model);
  const end = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the step two submit', from);
  const said = JSON.stringify(end.result);
  assert.match(said, /stopped for review/);
  assert.match(said, /source_changed/);
  assert.match(said, /submission is kept/);
  assert.match(said, /Do not submit it again/);
  assert.doesNotMatch(said, /did not answer/);
  const st = await client.runStatus(runId);
  assert.equal(st.run.status, 'review');
  assert.match(st.run.review_reason, /^source_changed: /);
  assert.equal(st.interactions.find((i) => i.node_id === 'second').last_submission.state, 'validating');
  await pi.quit();
});
