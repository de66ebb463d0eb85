// Starting workflows from Pi: by name from the tool and from /workflow, the project winning a
// name collision, reserved words refused; the extension's step message, submit with a
// validation error returned as a tool error, and the result delivered once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

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
