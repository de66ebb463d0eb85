// A run detached while its agent step is already open (`piw run detach`, or
// `/workflow detach` from the session): the step goes to the Pi the host starts (its bridge)
// at once, and the session's own turn on that step stops, whatever moment the detach lands
// in: while the session's model works on the step, just before its submission is bound,
// while a submission is being judged, and with Pi already closed. Real Pi, the mock model,
// the host's detached settings.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { DETACHED, piEnv, until } from './harness.mjs';

let env;
let release = () => {};
beforeEach(async () => {
  env = await piEnv();
  env.addWorkflow('agent.workflow.mjs', 'agent-step');
  env.addWorkflow('slow-verdict.workflow.mjs', 'slow-verdict');
});
afterEach(async () => {
  release();
  await env?.close();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];
/** The bridge offers the model only `update` and `submit`; a session offers every action. */
const fromBridge = (tools) => {
  const tool = tools.find((t) => (t.function ?? t).name === 'workflow');
  return (tool?.function ?? tool)?.parameters?.properties?.action?.enum?.length === 2;
};
const submitTitle = (id, title) => ({ name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title } } });

/**
 * Scripts the model: the bridge's model submits "From the bridge" (once `bridgeHold`
 * resolves, when given); the session's model gets `session(id)` for the step (a reply,
 * possibly held). Returns how often each was asked for the step.
 */
function script(session, bridgeHold = null) {
  const asked = { session: 0, bridge: 0 };
  env.model.script = ({ last, lastText, tools }) => {
    const id = last.role === 'user' ? stepId(lastText) : null;
    if (!id) return { text: 'ok' };
    if (fromBridge(tools)) {
      asked.bridge += 1;
      return { tool: submitTitle(id, 'From the bridge'), ...(bridgeHold ? { hold: bridgeHold } : {}) };
    }
    asked.session += 1;
    return session(id);
  };
  return asked;
}

async function startIn(pi, c, sessionId, workflow, input) {
  await pi.prompt(`/workflow ${workflow} --input-json ${JSON.stringify(input)}`);
  return until(async () => (await c.listRuns({ sessionId }))[0]?.run_id, 'the run');
}

const turnStopped = (pi, from) =>
  until(() => pi.customMessages('piw-message', from).find((m) => m.details?.kind === 'turn_stopped'), "the session's turn stopped");

test("detached while the session's model works on its step: that turn stops, unpaused, and the host's Pi answers the step", async () => {
  const held = new Promise((r) => (release = r));
  const asked = script((id) => ({ hold: held, tool: submitTitle(id, 'From the session') }));
  const c = await env.client({ hostEnv: DETACHED });
  const pi = await env.startPi({ sessionId: 'working' });
  const runId = await startIn(pi, c, 'working', 'agent-step', { task: 'the docs' });
  await until(() => asked.session > 0, "the session's model at work on the step");

  const from = pi.mark();
  const detached = await c.detachRun(runId);
  assert.equal(detached.changed, true);
  const stopped = await turnStopped(pi, from);
  assert.match(stopped.content, /Stop working on workflow step draft .*the run was detached.*Do not submit it/s);
  const settled = await pi.waitSettled(from);
  assert.equal(settled.aborted, true, 'the turn was stopped');

  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { title: 'From the bridge' });
  assert.equal(asked.bridge, 1);
  const status = await c.runStatus(runId);
  assert.equal(status.run.paused, false, 'the stopped turn paused nothing');
  await pi.quit();
});

test("detached just before the session's submission is bound: it is refused as no longer the session's, and the bridge answers", async () => {
  const barriers = join(env.root, 'barriers');
  mkdirSync(barriers);
  writeFileSync(join(barriers, 'submit.hold'), '');
  let releaseBridge;
  const bridgeHeld = new Promise((r) => (releaseBridge = r));
  release = () => {
    rmSync(join(barriers, 'submit.hold'), { force: true });
    releaseBridge();
  };
  const asked = script((id) => ({ tool: submitTitle(id, 'From the session') }), bridgeHeld);
  const c = await env.client({ hostEnv: DETACHED });
  const pi = await env.startPi({ sessionId: 'racing', extraEnv: { PIW_PI_BARRIER_DIR: barriers } });
  const runId = await startIn(pi, c, 'racing', 'agent-step', { task: 'the docs' });
  await until(() => existsSync(join(barriers, 'submit.reached')), "the session's submit call");

  // Detached while the call waits; the bridge's model is at work on the step (held).
  const from = pi.mark();
  await c.detachRun(runId);
  await until(() => asked.bridge > 0, "the bridge's model at work on the step");
  rmSync(join(barriers, 'submit.hold'));
  const end = await pi.waitEvent((e) => e.type === 'tool_execution_end' && e.toolName === 'workflow', "the session's submit", from);
  assert.equal(end.isError, true, JSON.stringify(end.result));
  assert.match(JSON.stringify(end.result), /no longer this session's: the run was detached/);
  const stopped = await turnStopped(pi, from);
  assert.match(stopped.content, /the run was detached/);

  releaseBridge();
  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { title: 'From the bridge' });
  await pi.quit();
});

test('detached while the session\'s submission is being judged: the verdict comes first; rejected, the step goes to the bridge and the session is told not to submit again', async () => {
  const gate = join(env.root, 'verdict');
  release = () => writeFileSync(gate, '');
  script((id) => ({ tool: submitTitle(id, 'bad') }));
  const c = await env.client({ hostEnv: DETACHED });
  const pi = await env.startPi({ sessionId: 'judged' });
  const runId = await startIn(pi, c, 'judged', 'slow-verdict', { task: 'the docs', verdictGate: gate });
  await until(async () => (await c.runStatus(runId)).interactions[0]?.status === 'validating', 'the submission being judged');

  const from = pi.mark();
  await c.detachRun(runId);
  await turnStopped(pi, from);
  release();
  await pi.waitEvent(
    (e) => e.type === 'message_end' && e.message?.role === 'custom' && e.message.details?.kind === 'verdict' && /no longer this session's/.test(e.message.content),
    'the rejection, reported with the step handed over',
    from,
  );

  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { title: 'From the bridge' });
  const status = await c.runStatus(runId);
  assert.equal(status.interactions.length, 1, 'one step, answered once');
  assert.equal(status.interactions[0].status, 'settled');
  await pi.quit();
});

test('detached with Pi already closed while its step was open: the host\'s Pi answers it', async () => {
  const held = new Promise((r) => (release = r));
  const asked = script(() => ({ hold: held, text: 'still thinking' }));
  const c = await env.client({ hostEnv: DETACHED });
  const pi = await env.startPi({ sessionId: 'closed' });
  const runId = await startIn(pi, c, 'closed', 'agent-step', { task: 'the docs' });
  await until(() => asked.session > 0, "the session's model at work on the step");
  await pi.quit();
  assert.equal((await c.runStatus(runId)).interactions[0].status, 'pending');

  await c.detachRun(runId);
  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { title: 'From the bridge' });
  assert.equal(asked.bridge, 1);
});
