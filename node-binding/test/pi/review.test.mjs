// A run of the session that stops for review while the model works on its step: the workflow
// file is edited while the model works on step 2 of 2, so the child that judges the submission
// finds a changed source and the run stops for review. `submit` says so at once (not a timeout),
// the session gets one card saying what a person does (no second one after a Pi restart), the
// turn on the step is stopped, and `retryRun(..., { acceptSource: true })` lets the run go on
// with the edited file, judging the submission it kept.
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, pkgDir, until } from './harness.mjs';

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
const reviewCards = (pi, from = 0) => pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'review');

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

test('the session gets one review card saying what a person does, the turn on the step stops, and an accepted source lets the run go on', async () => {
  // After hearing of the review the model would go on working: its turn is held open.
  const model = scriptModel(() => ({ text: 'still working', hold: new Promise(() => {}) }));
  const pi = await env.startPi({ sessionId: 'review-card' });
  const client = await env.client();
  const { runId, from } = await editWhileOnStepTwo(pi, client, 'review-card', model);
  const card = await until(() => reviewCards(pi, from)[0], 'the review card');
  assert.match(card.content, /stopped for review: source_changed/);
  assert.ok(card.content.includes(`piw run retry ${runId}`), card.content);
  assert.ok(card.content.includes(`piw run retry ${runId} --accept-source`), card.content);
  assert.match(card.content, /submission for step second is kept/);
  assert.equal(card.details.runId, runId);
  // The turn working on the step is stopped; the card is the one message about it.
  await pi.waitEvent((e) => e.type === 'agent_settled' && e.aborted === true, 'the turn stopped', from);
  assert.equal(pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'turn_stopped').length, 0);
  assert.equal((await client.runStatus(runId)).run.paused, false, 'nothing paused');
  assert.equal(reviewCards(pi, from).length, 1);
  await pi.quit();

  // A restarted Pi finds the card in the session: not shown a second time.
  const again = await env.startPi({ sessionId: 'review-card' });
  const after = again.mark();
  await again.prompt('/workflow list');
  await again.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'a refresh after the restart', after);
  assert.equal(reviewCards(again).length, 0, 'not shown a second time');

  // A person accepts the edited file: the kept submission is judged and the run completes.
  const retried = await client.retryRun(runId, { acceptSource: true, reason: 'the edit is wanted', by: 'test' });
  assert.ok(['queued', 'waiting'].includes(retried.status), retried.status);
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { first: { title: 'one' }, second: { title: 'two' } });
  await again.quit();
});

test('a run that goes on after its review presents its step again, once, with the verdict on the submission it kept', async () => {
  const wf = join(env.project, '.pi', 'workflows', 'picky.workflow.mjs');
  writeFileSync(
    wf,
    `import { defineWorkflow, agent, compute } from ${JSON.stringify(join(pkgDir, 'index.js'))};
export default defineWorkflow({
  name: 'picky', startAt: 'draft',
  nodes: {
    draft: agent({ prompt: 'PICKY-STEP give a title', expectedOutput: '{"title": string}', validate: (o) => {
      if (o?.title === 'bad') throw new Error('title must not be "bad"');
      return o;
    } }),
    done: compute({ run: ({ outputs }) => outputs.draft }),
  },
  edges: [{ from: 'draft', to: 'done' }],
});`,
  );
  let release;
  const released = new Promise((r) => (release = r));
  let reached;
  const atStep = new Promise((r) => (reached = r));
  env.model.script = ({ lastText }) => {
    const id = stepId(lastText);
    if (id && /went on after its review/.test(lastText)) return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'good' } } } };
    if (id && /PICKY-STEP/.test(lastText)) {
      reached();
      return { hold: released, tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'bad' } } } };
    }
    return { text: 'ok' };
  };
  const pi = await env.startPi({ sessionId: 'review-again' });
  const client = await env.client();
  const { run_id: runId } = await client.startRun(wf, { input: {}, sessionId: 'review-again' });
  await atStep;
  appendFileSync(wf, '\n// edited\n');
  const from = pi.mark();
  release();
  await until(() => reviewCards(pi, from)[0], 'the review card');
  await pi.waitSettled(from);
  const after = pi.mark();
  await client.retryRun(runId, { acceptSource: true, reason: 'keep the edit', by: 'test' });
  // The kept submission is judged (rejected), and the step comes back to the model, saying so.
  const step = await until(
    () => pi.customMessages('piw-step', after).find((m) => /went on after its review/.test(m.content)),
    'the step presented again',
  );
  assert.match(step.content, /rejected: title must not be "bad"/);
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { title: 'good' });
  assert.equal(pi.customMessages('piw-step', after).length, 1, 'presented again once');
  await pi.quit();
});
