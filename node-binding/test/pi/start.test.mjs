// Starting workflows from Pi: by name from the tool and from /workflow, the project winning a
// name collision, reserved words refused; the extension's step message, submit with a
// validation error returned as a tool error, and the result delivered once.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { alive, piEnv, until } from './harness.mjs';

let env;
before(async () => {
  env = await piEnv();
});
after(async () => {
  await env?.close();
});

test('the tool starts a workflow by name; a rejected submit is a tool error, the corrected one is accepted', async () => {
  env.addWorkflow('agent.workflow.mjs', 'titles', 'project');
  let submits = 0;
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'user' && /start titles/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'titles', input: { task: 'tests' } } } };
    }
    const step = /"interactionId":"([^"]+)"/.exec(lastText);
    if (step) {
      submits++;
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step[1], output: { title: 'bad' } } } };
    }
    if (last.role === 'tool' && /rejected this output/.test(lastText)) {
      const id = /interactionId (\S+)\)/.exec(lastText)[1];
      submits++;
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'Fix flaky test' } } } };
    }
    return { text: 'done' };
  };
  const pi = await env.startPi();
  const from = pi.mark();
  await pi.prompt('please start titles');
  const steps = await until(() => pi.customMessages('piw-step', from).length > 0 && pi.customMessages('piw-step', from), 'the step message');
  assert.match(steps[0].content, /workflow: agent-step/);
  assert.match(steps[0].content, /Propose a title for tests/);
  assert.match(steps[0].content, /"action":"submit"/);
  const rejected = await pi.waitEvent(
    (e) => e.type === 'tool_execution_end' && e.isError && /title must not be/.test(JSON.stringify(e.result)),
    'the rejected submit as a tool error',
    from,
  );
  assert.ok(rejected);
  await pi.waitEvent(
    (e) => e.type === 'tool_execution_end' && !e.isError && /accepted: step draft/.test(JSON.stringify(e.result)),
    'the accepted submit',
    from,
  );
  const end = await until(() => pi.customMessages('piw-message', from).find((m) => m.details?.kind === 'terminal'), 'the result card');
  assert.match(end.content, /completed/);
  assert.match(end.content, /Fix flaky test/);
  assert.equal(submits, 2);
  assert.equal(pi.customMessages('piw-step', from).length, 1, 'the step is presented once');
  await pi.waitNotify(/workflow titles completed/, from);
  await pi.quit();
});

test('/workflow starts by name with trailing text as { task }; a project file overrides a global one', async () => {
  env.addWorkflow('notify.workflow.mjs', 'greet', 'global');
  env.addWorkflow('notify.workflow.mjs', 'greet', 'project');
  const pi = await env.startPi({ sessionId: 'cmd' });
  const from = pi.mark();
  await pi.prompt('/workflow greet the whole team');
  const card = await until(() => pi.customMessages('piw-message', from).find((m) => m.details.kind === 'notify'), 'the notify');
  assert.match(card.content, /hello from the workflow: the whole team/);
  const client = await env.client();
  const [run] = await client.listRuns({ sessionId: 'cmd' });
  const status = await client.runStatus(run.run_id);
  assert.equal(status.run.source_root, `${env.project}/.pi/workflows/greet.workflow.mjs`);
  await pi.prompt('/workflow list');
  const listed = await pi.waitNotify(/Workflows:/, from);
  assert.match(listed.message, /greet \(project: /);
  assert.match(listed.message, /titles \(project: /);
  await pi.quit();
});

test('reserved words and unknown names are refused with a clear message', async () => {
  const pi = await env.startPi({ sessionId: 'words' });
  const from = pi.mark();
  env.model.script = ({ last }) =>
    last.role === 'tool' ? { text: 'ok' } : { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'status' } } };
  await pi.prompt('start the status workflow');
  const refused = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the start call', from);
  assert.equal(refused.isError, true);
  assert.match(JSON.stringify(refused.result), /\\"status\\" is a \/workflow subcommand, not a workflow name/);
  await pi.waitSettled(from);
  await pi.prompt('/workflow nosuchflow');
  await pi.waitNotify(/no workflow named "nosuchflow"/, from);
  await pi.quit();
});

test('without a host binary the person is told once, in a notification; nothing is written over the TUI', async () => {
  // An installation of its own: the file's other tests leave a host running in the shared one.
  const pi = await env.startPi({ sessionId: 'nohost', extraEnv: { PIW_HOST_BIN: '/nonexistent/piw', PIW_HOME: join(env.root, 'no-host') } });
  const told = await pi.waitNotify(/piw: refresh failed: cannot start the piw host/);
  assert.equal(told.notifyType, 'warning');
  env.model.script = () => ({ text: 'ok' });
  // Two more refreshes (each settled turn schedules one) fail the same way: not told again.
  for (let i = 0; i < 2; i++) {
    const turn = pi.mark();
    await pi.prompt('hi');
    await pi.waitSettled(turn);
  }
  await pi.quit();
  assert.equal(pi.notifications().filter((m) => /refresh failed/.test(m)).length, 1, 'told once');
  assert.doesNotMatch(pi.stderr, /refresh failed/, 'nothing written to stderr (the TUI)');
});

test('a hung host makes a tool call fail after the bound; with the host killed the next call starts one and nothing is lost', async () => {
  env.addWorkflow('decision.workflow.mjs', 'ship');
  const pi = await env.startPi({ sessionId: 'killed', extraEnv: { PIW_PI_CALL_TIMEOUT_MS: '2000' } });
  const from = pi.mark();
  await pi.prompt('/workflow ship');
  await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the dialog', from);
  const client = await env.client();
  const [run] = await client.listRuns({ sessionId: 'killed' });
  const { pid } = await client.status();
  await client.close();
  let calls = 0;
  env.model.script = ({ last }) => {
    if (last.role === 'tool') return { text: 'ok' };
    calls++;
    return { tool: { name: 'workflow', arguments: { action: 'status', runId: run.run_id } } };
  };
  process.kill(pid, 'SIGSTOP');
  try {
    const first = pi.mark();
    await pi.prompt('status please');
    const failed = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the failing call', first);
    assert.equal(failed.isError, true, JSON.stringify(failed.result));
    assert.match(JSON.stringify(failed.result), /the piw host did not answer [a-z.]+ within 2 s/);
    // Pi stayed responsive meanwhile: it answers a command at once.
    await pi.send({ type: 'get_state' });
    await pi.waitSettled(first);
  } finally {
    process.kill(pid, 'SIGKILL');
    process.kill(pid, 'SIGCONT');
  }
  await until(() => !alive(pid), 'the host gone');
  const second = pi.mark();
  await pi.prompt('status again');
  const ok = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the next call', second);
  assert.equal(ok.isError, false, JSON.stringify(ok.result));
  assert.match(JSON.stringify(ok.result), /waiting for human_decision approve/);
  assert.equal(calls, 2);
  await pi.quit();
});

test('`pi install <package>` loads the extension without -e', async () => {
  const { code, out } = await env.piInstall();
  assert.equal(code, 0, out);
  const pi = await env.startPi({ sessionId: 'installed', extension: false });
  const reply = await pi.send({ type: 'get_commands' });
  assert.ok(reply.data.commands.some((c) => c.name === 'workflow'), JSON.stringify(reply.data));
  await pi.quit();
});
