// Pi going away never costs a run: SIGKILL while a run computes, a request that comes while
// Pi is closed (nor does a step's deadline run then: presence.test.mjs); two sessions in one
// project never see each other's requests or messages. The host going away never holds Pi: a host that does
// not answer does not keep Pi from quitting; a host that restarts is followed again.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { Client } from '../../index.js';
import { alive, piEnv, sleep, until } from './harness.mjs';

let env;
/** A host the test stopped with SIGSTOP: continued at the end, pass or fail. */
let stoppedHost = null;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  if (stoppedHost !== null) {
    try {
      process.kill(stoppedHost, 'SIGCONT');
    } catch {
      // gone
    }
    stoppedHost = null;
  }
  await env?.close();
});

const terminalCards = (pi, from = 0) => pi.customMessages('piw-message', from).filter((m) => m.details.kind === 'terminal');

test('SIGKILL Pi while a run computes: the run completes, the next start shows its result exactly once', async () => {
  env.addWorkflow('gate.workflow.mjs', 'gate');
  const gate = join(env.root, 'open');
  const pi = await env.startPi({ sessionId: 'crash' });
  await pi.prompt(`/workflow gate --input-json ${JSON.stringify({ gate })}`);
  const client = await env.client();
  const [started] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'crash' });
    return runs.length && runs[0].status === 'running' && runs;
  }, 'the run computing');
  pi.kill('SIGKILL');
  await pi.exited;
  writeFileSync(gate, '');
  const run = await client.waitForRun(started.run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed');
  const second = await env.startPi({ sessionId: 'crash' });
  const card = await until(() => terminalCards(second)[0], 'the result card');
  assert.match(card.content, /gate completed/);
  // The person says something: Pi keeps the session, and the card with it (a session with
  // nothing but cards is not kept, and its cards come again: cards-kept.test.mjs).
  const said = second.mark();
  await second.prompt('thanks');
  await second.waitSettled(said);
  await second.quit();
  const third = await env.startPi({ sessionId: 'crash' });
  await third.prompt('/workflow status ' + started.run_id);
  await third.waitNotify(/completed/);
  assert.equal(terminalCards(third).length, 0, 'not shown a second time');
  await third.quit();
});

test('a request that arrives while Pi is closed is presented once at the next start, and not again after a restart', async () => {
  env.addWorkflow('agent.workflow.mjs', 'titles');
  env.model.script = () => ({ text: 'thinking about it' });
  const client = await env.client();
  const { run_id } = await client.startRun(join(env.project, '.pi/workflows/titles.workflow.mjs'), { input: { task: 'x' }, sessionId: 'later' });
  await client.waitForRun(run_id, { untilParked: true, timeoutMs: 30_000 });
  const pi = await env.startPi({ sessionId: 'later' });
  const steps = await until(() => pi.customMessages('piw-step').length > 0 && pi.customMessages('piw-step'), 'the step');
  assert.equal(steps[0].details.runId, run_id);
  await pi.waitSettled();
  pi.kill('SIGKILL');
  await pi.exited;
  const again = await env.startPi({ sessionId: 'later' });
  // The widget shows the run: the extension has looked at the host since this start.
  await again.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setStatus' && /wf titles/.test(e.statusText ?? ''), 'the footer status');
  assert.equal(again.customMessages('piw-step').filter((m) => m.details.reminder === 0).length, 0, 'presented once per session');
  await again.quit();
});

const stepId = (text) => /"interactionId":"([^"]+)"/.exec(text)?.[1];

for (const how of ['killed', 'quits']) {
  test(`Pi ${how} while the model streams a step's turn: the next start presents the step again, once, and the run goes on`, async () => {
    env.addWorkflow('agent.workflow.mjs', 'titles');
    let stepTurns = 0;
    env.model.script = ({ last, lastText }) => {
      if (last.role === 'tool') return { text: 'done' };
      const id = stepId(lastText);
      if (!id) return { text: 'ok' };
      stepTurns += 1;
      // The first turn on the step streams until Pi is gone.
      if (stepTurns === 1) return { text: 'Thinking', hold: new Promise(() => {}) };
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'After the restart' } } } };
    };
    const sessionId = `step-${how}`;
    const pi = await env.startPi({ sessionId });
    // A session Pi has saved (it writes the file once the conversation has started).
    await pi.prompt('hi');
    await pi.waitSettled();
    const client = await env.client();
    const from = pi.mark();
    const { run_id } = await client.startRun(join(env.project, '.pi/workflows/titles.workflow.mjs'), { input: { task: 'x' }, sessionId });
    // The step message is in the session (its message_end came before the reply began).
    await until(() => pi.customMessages('piw-step', from)[0], 'the step');
    await pi.waitEvent((e) => e.type === 'message_start' && e.message?.role === 'assistant', "the step's turn streaming", from);
    if (how === 'killed') pi.kill('SIGKILL');
    else pi.child.stdin.end(); // an orderly quit: the turn is aborted
    await pi.exited;
    assert.equal((await client.runStatus(run_id)).run.paused, false, 'quitting is no Escape: the run is not paused');

    const again = await env.startPi({ sessionId });
    const run = await client.waitForRun(run_id, { timeoutMs: 30_000 });
    assert.deepEqual(run.result, { title: 'After the restart' });
    const steps = again.customMessages('piw-step');
    assert.equal(steps.length, 1, 'presented again once');
    assert.match(steps[0].content, /^Pi stopped before the turn that carried this workflow step ended/);
    assert.equal(steps[0].details.reminder, 0, 'no reminder used up');
    assert.equal(stepTurns, 2);
    await again.quit();
  });
}

test('two Pi sessions in one project never see each other\'s requests or messages', async () => {
  env.addWorkflow('agent.workflow.mjs', 'titles');
  env.addWorkflow('notify.workflow.mjs', 'hello');
  env.model.script = () => ({ text: 'ok' });
  const a = await env.startPi({ sessionId: 'left' });
  const b = await env.startPi({ sessionId: 'right' });
  await a.prompt('/workflow titles from-left');
  await b.prompt('/workflow hello from-right');
  await until(() => a.customMessages('piw-step').length > 0, 'the left step');
  await until(() => b.customMessages('piw-message').some((m) => m.details.kind === 'terminal'), 'the right result');
  const client = await env.client();
  const left = await client.listRuns({ sessionId: 'left' });
  const right = await client.listRuns({ sessionId: 'right' });
  assert.equal(left.length, 1);
  assert.equal(right.length, 1);
  assert.ok(a.customMessages('piw-step').every((m) => m.details.runId === left[0].run_id));
  assert.ok(a.customMessages('piw-message').every((m) => m.details.runId === left[0].run_id));
  assert.equal(b.customMessages('piw-step').length, 0);
  assert.ok(b.customMessages('piw-message').every((m) => m.details.runId === right[0].run_id));
  assert.match(a.customMessages('piw-step')[0].content, /Propose a title for from-left/);
  await a.quit();
  await b.quit();
});

test('Pi killed between adding a message and acknowledging it: the next start acknowledges it without adding it again', async () => {
  env.addWorkflow('notify.workflow.mjs', 'hello');
  env.model.script = () => ({ text: 'hello' });
  // A session Pi has saved (it writes the file once the model has answered).
  const first = await env.startPi({ sessionId: 'fault' });
  await first.prompt('hi');
  await first.waitSettled();
  await first.quit();
  const client = await env.client();
  const { run_id } = await client.startRun(join(env.project, '.pi/workflows/hello.workflow.mjs'), { input: { task: 'once' }, sessionId: 'fault' });
  await client.waitForRun(run_id, { timeoutMs: 30_000 });
  const dying = await env.startPi({ sessionId: 'fault', extraEnv: { PIW_PI_FAULT: 'kill_before_ack' } }).catch(() => null);
  if (dying) assert.equal((await dying.exited).signal, 'SIGKILL');
  const pi = await env.startPi({ sessionId: 'fault' });
  // The refresh that follows the start ends with the widget (cleared: no live run).
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'the first refresh');
  const reply = await pi.send({ type: 'get_messages' });
  const kinds = reply.data.messages.filter((m) => m.role === 'custom' && m.customType === 'piw-message').map((m) => m.details.kind);
  assert.deepEqual(kinds, ['notify', 'terminal'], 'each message once');
  // The killed start added the notice and died before its acknowledgement; this start
  // acknowledged it without adding it again, then delivered the rest.
  assert.deepEqual(pi.customMessages('piw-message').map((m) => m.details.kind), ['terminal']);
  assert.deepEqual(await client.claimMessages('fault'), [], 'both acknowledged');
  await pi.quit();
});

test('Pi quits within its close bound while the host is alive but does not answer', async () => {
  const pi = await env.startPi({ sessionId: 'hang', extraEnv: { PIW_PI_CLOSE_TIMEOUT_MS: '2000' } });
  // Subscribed: the first refresh has ended with the widget.
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setWidget', 'the first refresh');
  const client = await env.client();
  const { pid } = await client.status();
  process.kill(pid, 'SIGSTOP');
  stoppedHost = pid;
  pi.child.stdin.end(); // an orderly quit
  // The host stays stopped until after the check: Pi must not need it to exit.
  const exited = await Promise.race([pi.exited.then(() => true), sleep(10_000).then(() => false)]);
  assert.equal(exited, true, 'Pi still runs 10 s after the quit (its close bound is 2 s)');
});

test('after the host restarts, the session follows it again: a run that ends then is shown without any action', async () => {
  env.addWorkflow('gate.workflow.mjs', 'gate');
  const gate = join(env.root, 'open');
  const pi = await env.startPi({ sessionId: 'restart' });
  await pi.prompt(`/workflow gate --input-json ${JSON.stringify({ gate })}`);
  let client = await env.client();
  const [run] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'restart' });
    return runs.length && runs[0].status === 'running' && runs;
  }, 'the run computing');
  const { pid } = await client.status();
  await client.request('host.stop').catch(() => {});
  await until(() => !alive(pid), 'the host gone');
  // Another client (the CLI, another Pi session, a script) starts the host again.
  client = await env.client();
  writeFileSync(gate, '');
  assert.equal((await client.waitForRun(run.run_id, { timeoutMs: 30_000 })).status, 'completed');
  const card = await until(() => terminalCards(pi)[0], 'the result card in the running session');
  assert.match(card.content, /gate completed/);
  await pi.quit();
});

test('the host dies while Pi is idle with a live run of the session: the widget says the run does not progress, the extension starts a host again, the run goes on', async () => {
  env.addWorkflow('gate.workflow.mjs', 'gate');
  const gate = join(env.root, 'open');
  const pi = await env.startPi({ sessionId: 'orphan' });
  await pi.prompt(`/workflow gate --input-json ${JSON.stringify({ gate })}`);
  let client = await env.client();
  const [run] = await until(async () => {
    const runs = await client.listRuns({ sessionId: 'orphan' });
    return runs.length && runs[0].status === 'running' && runs;
  }, 'the run computing');
  // The session knows the run is live: its widget shows it.
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'setStatus' && /wf gate/.test(e.statusText ?? ''), 'the footer status');
  const { pid } = await client.status();
  await client.close();
  const from = pi.mark();
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 'the host gone');
  await pi.waitEvent(
    (e) => e.type === 'extension_ui_request' && e.method === 'setWidget' && (e.widgetLines ?? []).some((l) => /the host is not running: run .* does not progress/.test(l)),
    'the widget saying so',
    from,
  );
  // No client of the test starts one: the extension does.
  const restarted = await until(async () => {
    try {
      const c = await Client.connect({ home: env.piwHome, start: false });
      const { pid: now } = await c.status();
      await c.close();
      return now !== pid && now;
    } catch {
      return false;
    }
  }, 'a host started again');
  assert.ok(alive(restarted));
  client = await env.client();
  writeFileSync(gate, '');
  assert.equal((await client.waitForRun(run.run_id, { timeoutMs: 30_000 })).status, 'completed');
  const card = await until(() => terminalCards(pi)[0], 'the result card in the running session');
  assert.match(card.content, /gate completed/);
  await pi.quit();
});

test('a submit the host dies under is sent again to the next host and taken once; the model hears it was accepted', async () => {
  env.addWorkflow('agent.workflow.mjs', 'titles');
  // The first host started dies just before it commits a submission (as a crash would); the
  // hosts started after it run clean. A wrapper around the real binary decides, by a marker.
  const { hostBin } = await import('./harness.mjs');
  const marker = join(env.root, 'faulty-host-started');
  const wrapper = join(env.root, 'piw-first-host-dies');
  writeFileSync(
    wrapper,
    `#!/bin/sh\nif [ -e '${marker}' ]; then exec '${hostBin}' "$@"; fi\n: > '${marker}'\nPIW_FAULT=before_commit:interaction.submit exec '${hostBin}' "$@"\n`,
    { mode: 0o755 },
  );
  const submits = [];
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? /"interactionId":"([^"]+)"/.exec(lastText)?.[1] : null;
    if (!id) return { text: 'ok' };
    submits.push(id);
    return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'Once' } } } };
  };
  const pi = await env.startPi({ sessionId: 'crash-submit', extraEnv: { PIW_HOST_BIN: wrapper } });
  const from = pi.mark();
  await pi.prompt('/workflow titles the release');
  const ended = await pi.waitEvent((e) => e.type === 'tool_execution_end' && e.toolName === 'workflow', 'the submit call', from);
  assert.equal(ended.isError, false, JSON.stringify(ended.result));
  assert.match(JSON.stringify(ended.result), /accepted: step draft/);
  const client = await env.client();
  const [run] = await client.listRuns({ sessionId: 'crash-submit' });
  const done = await client.waitForRun(run.run_id, { timeoutMs: 30_000 });
  assert.deepEqual(done.result, { title: 'Once' });
  const status = await client.runStatus(run.run_id);
  assert.equal(status.interactions.length, 1);
  assert.equal(submits.length, 1, 'the model submitted once');
  await pi.quit();
});
