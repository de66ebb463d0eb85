// How a run's end is presented in its origin session: with the workflow's presentation
// instructions a model turn (exactly once, across Pi restarts, and never lost while it waits in
// Pi's queue for a turn); without them a result card and no turn (decisions.test.mjs,
// restart.test.mjs). Also the TUI card renderer.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await env?.close();
});

const presentationRequests = () => env.model.requests.filter((r) => /PRESENT-THE-RESULT/.test(r.allText));

test('a run with presentation instructions that ends while Pi is closed gets one presentation turn at the next start, never a second', async () => {
  env.addWorkflow('presented.workflow.mjs', 'presented');
  env.model.script = () => ({ text: 'You have 3 apples.' });
  const gate = join(env.root, 'open');
  const pi = await env.startPi({ sessionId: 'present' });
  await pi.prompt(`/workflow presented --input-json ${JSON.stringify({ gate })}`);
  const client = await env.client();
  const [started] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'present' });
    return runs.length && runs[0].status === 'running' && runs;
  }, 'the run computing');
  pi.kill('SIGKILL');
  await pi.exited;
  writeFileSync(gate, '');
  const run = await client.waitForRun(started.run_id, { timeoutMs: 30_000 });
  assert.deepEqual(run.result, { apples: 3 });

  const second = await env.startPi({ sessionId: 'present' });
  const card = await until(() => second.customMessages('piw-message').find((m) => m.details.kind === 'terminal'), 'the presentation');
  assert.match(card.content, /PRESENT-THE-RESULT/);
  assert.match(card.content, /"apples": 3/);
  await until(() => presentationRequests().length === 1, 'the presentation turn reaching the model');
  await second.waitSettled();
  await second.quit();

  const third = await env.startPi({ sessionId: 'present' });
  await third.prompt(`/workflow status ${started.run_id}`);
  await third.waitNotify(/completed/);
  assert.equal(third.customMessages('piw-message').length, 0, 'not presented a second time');
  assert.equal(presentationRequests().length, 1, 'exactly one presentation turn');
  await third.quit();
});

test('an assistantMessage step is answered by the visible reply; an ordinary checkpoint is presented to the model and answered with the tool', async () => {
  env.addWorkflow('reply.workflow.mjs', 'reply');
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'user' && /GREET-STEP/.test(lastText)) return { text: 'Hello there!' };
    if (last.role === 'user' && /CONFIRM-CHECKPOINT/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'answer', answer: { ok: true } } } };
    }
    return { text: 'done' };
  };
  const pi = await env.startPi();
  const from = pi.mark();
  await pi.prompt('/workflow reply');
  const client = await env.client();
  const [started] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'session-a' });
    return runs.length && runs;
  }, 'the run');
  const run = await client.waitForRun(started.run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { greeting: 'Hello there!', confirmed: { ok: true } });
  const steps = pi.customMessages('piw-step', from);
  assert.deepEqual(
    steps.map((m) => [m.details.kind, m.details.node]),
    [
      ['assistant_message', 'greet'],
      ['checkpoint', 'confirm'],
    ],
  );
  await pi.waitEvent(
    (e) => e.type === 'tool_execution_end' && !e.isError && /answered checkpoint confirm/.test(JSON.stringify(e.result)),
    'the answer accepted',
    from,
  );
  await pi.quit();
});

const terminalCards = (pi, from = 0) => pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'terminal');

for (const how of ['killed', 'quits']) {
  test(`Pi ${how} during the presentation turn: the next start presents the run's end again, once; the one after, not at all`, async () => {
    env.addWorkflow('presented.workflow.mjs', 'presented');
    let presentations = 0;
    env.model.script = ({ lastText }) => {
      if (!/PRESENT-THE-RESULT/.test(lastText)) return { text: 'ok' };
      presentations += 1;
      // The first presentation turn streams until Pi is gone.
      return presentations === 1 ? { text: 'You have', hold: new Promise(() => {}) } : { text: 'You have 3 apples.' };
    };
    const sessionId = `cut-${how}`;
    const pi = await env.startPi({ sessionId });
    // A session Pi has saved (it writes the file once the conversation has started).
    await pi.prompt('hi');
    await pi.waitSettled();
    const gate = join(env.root, 'open');
    writeFileSync(gate, '');
    const from = pi.mark();
    await pi.prompt(`/workflow presented --input-json ${JSON.stringify({ gate })}`);
    await until(() => terminalCards(pi, from)[0], 'the presentation');
    await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', 'the presentation turn streaming', from);
    if (how === 'killed') pi.kill('SIGKILL');
    else pi.child.stdin.end(); // an orderly quit: the turn is aborted
    await pi.exited;

    const again = await env.startPi({ sessionId });
    const card = await until(() => terminalCards(again)[0], 'the presentation at the next start');
    assert.match(card.content, /^Pi stopped before the turn that presents this ended/);
    assert.match(card.content, /PRESENT-THE-RESULT/);
    await again.waitSettled();
    assert.equal(presentations, 2);
    // Given to the model again, not shown again: the session shows the run's end once.
    const { data } = await again.send({ type: 'get_messages' });
    const ends = data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message' && m.details?.kind === 'terminal');
    assert.deepEqual(ends.map((m) => m.display), [true, false], 'one card, and the copy its turn carried');
    assert.equal(card.display, false);
    await again.quit();

    const third = await env.startPi({ sessionId });
    await third.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'the first refresh');
    assert.equal(terminalCards(third).length, 0, 'not presented a third time');
    const client = await env.client();
    assert.deepEqual(await client.claimMessages(sessionId, { claimant: `pi:${sessionId}` }), [], 'acknowledged');
    assert.equal(presentations, 2, 'one presentation turn cut short, one that ended');
    await third.quit();
  });
}

/**
 * A run of `presented` ends while the model streams a turn that the test holds open (its first
 * chunk sent, the rest held): its presentation waits in Pi's queue as a steer. Returns Pi, the
 * release of the held turn and the run.
 */
async function runEndsWhileStreaming(sessionId, extraEnv = {}) {
  env.addWorkflow('presented.workflow.mjs', 'presented');
  let release;
  const held = new Promise((r) => (release = r));
  env.model.script = ({ lastText }) => (/HOLD-ME/.test(lastText) ? { text: 'ok', hold: held } : { text: 'ok' });
  const gate = join(env.root, `open-${sessionId}`);
  const pi = await env.startPi({ sessionId, extraEnv });
  // A session Pi has saved (it writes the file once the conversation has started).
  await pi.prompt('hi');
  await pi.waitSettled();
  await pi.prompt(`/workflow presented --input-json ${JSON.stringify({ gate })}`);
  const client = await env.client();
  const [run] = await until(async () => {
    const runs = await client.listRuns({ sessionId });
    return runs.length && runs[0].status === 'running' && runs;
  }, 'the run computing');
  const from = pi.mark();
  await pi.prompt('HOLD-ME');
  // Mid-turn: the model's reply has begun streaming.
  await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', 'the held reply streaming', from);
  writeFileSync(gate, '');
  await client.waitForRun(run.run_id, { timeoutMs: 30_000 });
  // The extension has handed the presentation to Pi (its notification comes with it).
  await pi.waitNotify(/presented completed/, from);
  return { pi, release: () => release(), client, run };
}

test('a presentation waiting as a steer when the queue is cleared is delivered again in the same process, once', async () => {
  const { pi, release, client } = await runEndsWhileStreaming('cleared');
  await pi.send({ type: 'clear_queue' });
  const from = pi.mark();
  release();
  await pi.waitSettled(from);
  // Delivered again after the turn (a fresh turn: the queue was cleared, the turn not aborted).
  const card = await until(() => terminalCards(pi)[0], 'the presentation in this process');
  assert.match(card.content, /PRESENT-THE-RESULT/);
  await until(() => presentationRequests().length > 0, 'the presentation turn reaching the model');
  // Acknowledged: even the extension's own claimant (which gets back what it holds) gets nothing.
  await until(async () => (await client.claimMessages('cleared', { claimant: 'pi:cleared' })).length === 0, 'the acknowledgement');
  const reply = await pi.send({ type: 'get_messages' });
  assert.equal(reply.data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message').length, 1);
  await pi.quit();
});

test('a presentation waiting as a steer when Pi quits mid-turn is delivered at the next start, once', async () => {
  const { pi, release } = await runEndsWhileStreaming('quit');
  await pi.quit(); // aborts the held turn, then exits
  release();
  const again = await env.startPi({ sessionId: 'quit' });
  const card = await until(() => terminalCards(again)[0], 'the presentation at the next start');
  assert.match(card.content, /PRESENT-THE-RESULT/);
  await again.waitSettled();
  await again.quit();
  const third = await env.startPi({ sessionId: 'quit' });
  await third.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'the first refresh');
  const reply = await third.send({ type: 'get_messages' });
  assert.equal(reply.data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message').length, 1, 'in the session once');
  assert.equal(terminalCards(third).length, 0, 'not delivered a second time');
  await third.quit();
});

test('a refresh still running when Pi quits mid-turn adds nothing to the closing session: the presentation waiting as a steer comes at the next start, with its turn, once', async () => {
  const barriers = join(env.root, 'barriers');
  mkdirSync(barriers);
  const { pi, release } = await runEndsWhileStreaming('closing', { PIW_PI_BARRIER_DIR: barriers });
  // A refresh claims the presentation again (this claimant holds it) and waits with it.
  writeFileSync(join(barriers, 'claimed.hold'), '');
  writeFileSync(join(barriers, 'closing.hold'), '');
  await pi.prompt('/workflow list');
  await until(() => existsSync(join(barriers, 'claimed.reached')), 'a refresh holding its claim');
  pi.child.stdin.end(); // quit: the held turn is aborted, then the session closes
  await until(() => existsSync(join(barriers, 'closing.reached')), 'the session closing');
  // The refresh goes on while the session closes; then the close.
  rmSync(join(barriers, 'claimed.hold'));
  await until(() => existsSync(join(barriers, 'claimed.passed')), 'the refresh going on');
  rmSync(join(barriers, 'closing.hold'));
  await pi.exited;
  release();
  const again = await env.startPi({ sessionId: 'closing' });
  const card = await until(() => terminalCards(again)[0], 'the presentation at the next start');
  assert.match(card.content, /PRESENT-THE-RESULT/);
  await until(() => env.model.requests.some((r) => /PRESENT-THE-RESULT/.test(r.lastText)), 'its turn');
  await again.waitSettled();
  const reply = await again.send({ type: 'get_messages' });
  assert.equal(reply.data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message').length, 1, 'in the session once');
  await again.quit();
});

test('Escape (queue cleared, turn aborted) while a presentation waits as a steer: it is added again in the same process without a turn', async () => {
  const { pi, release, client } = await runEndsWhileStreaming('escape');
  const from = pi.mark();
  await pi.send({ type: 'clear_queue' });
  await pi.send({ type: 'abort' });
  await pi.waitEvent((e) => e.type === 'agent_settled' && e.aborted === true, 'the aborted settle', from);
  release();
  const card = await until(() => terminalCards(pi, from)[0], 'the presentation in this process');
  assert.match(card.content, /PRESENT-THE-RESULT/);
  await until(async () => (await client.claimMessages('escape', { claimant: 'pi:escape' })).length === 0, 'the acknowledgement');
  // A turn it had started would have asked the model before this next turn ends.
  const next = pi.mark();
  await pi.prompt('after');
  await pi.waitSettled(next);
  assert.equal(env.model.requests.filter((r) => /PRESENT-THE-RESULT/.test(r.lastText)).length, 0, 'no turn of its own after Escape');
  assert.ok(env.model.requests.some((r) => r.lastText === 'after' && /PRESENT-THE-RESULT/.test(r.allText)), 'in the context of the next turn');
  await pi.quit();
});
