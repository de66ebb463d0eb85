// Run ids as a person types them in the Pi session: `/workflow <verb> <runId>` and the tool's
// `runId` take a run's id or a unique prefix of it, as the CLI does (cli/src/run_ids.rs); an
// ambiguous prefix lists the runs it could mean, an id no run has says so.
import assert from 'node:assert/strict';
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

test('a run is named by its id or a unique prefix of it, in the command and the tool; an ambiguous prefix lists its runs; an unknown id says no run has it', async () => {
  env.addWorkflow('gate.workflow.mjs', 'gate');
  // Both runs compute until the test ends: the gate never opens.
  const input = JSON.stringify({ gate: join(env.root, 'never') });
  let toolRunId = null;
  env.model.script = ({ last, lastText }) =>
    last.role === 'user' && /STATUS-BY-PREFIX/.test(lastText)
      ? { tool: { name: 'workflow', arguments: { action: 'status', runId: toolRunId } } }
      : { text: 'ok' };
  const pi = await env.startPi();
  await pi.prompt(`/workflow gate --input-json ${input}`);
  await pi.prompt(`/workflow gate --input-json ${input}`);
  const client = await env.client();
  const runs = await until(async () => {
    const r = await client.listRuns({ sessionId: 'session-a' });
    return r.length === 2 && r;
  }, 'both runs');
  // Newest first, as the ambiguous prefix lists them.
  const [a, b] = runs.map((r) => r.run_id);
  // Ids begin with their start time: what both share is ambiguous; a little more is one run.
  let shared = 0;
  while (a[shared] === b[shared]) shared += 1;
  const shortA = a.slice(0, shared + 1);
  const shortB = b.slice(0, shared + 1);

  let from = pi.mark();
  await pi.prompt(`/workflow status ${shortA}`);
  await pi.waitNotify(new RegExp(`^run ${a}: gate running`), from);

  from = pi.mark();
  await pi.prompt(`/workflow status ${a.slice(0, shared)}`);
  const ambiguous = await pi.waitNotify(/is ambiguous/, from);
  assert.match(ambiguous.message, new RegExp(`^workflow: run id ${a.slice(0, shared)} is ambiguous: it begins 2 runs`));
  assert.match(ambiguous.message, new RegExp(`\\n  ${a}  running  gate\\n  ${b}  running  gate\\ngive more of the id$`));

  from = pi.mark();
  await pi.prompt('/workflow status run-nope');
  const unknown = await pi.waitNotify(/^workflow: /, from);
  assert.match(unknown.message, /^workflow: no run has the id run-nope \(nor an id beginning with it\)/);

  // The model's tool resolves its runId the same way.
  toolRunId = shortB;
  from = pi.mark();
  await pi.prompt('STATUS-BY-PREFIX');
  const status = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the status tool call', from);
  assert.equal(status.isError, false, JSON.stringify(status.result));
  assert.match(JSON.stringify(status.result), new RegExp(`run ${b}: gate running`));
  await pi.waitSettled(from);

  // Every verb: answer (its first word is a run when it begins with run-) and cancel.
  from = pi.mark();
  await pi.prompt(`/workflow answer ${shortB} yes`);
  await pi.waitNotify(new RegExp(`^workflow: run ${b} has no pending checkpoint or decision`), from);
  from = pi.mark();
  await pi.prompt(`/workflow cancel ${shortA}`);
  await pi.waitNotify(new RegExp(`^cancelled run ${a}$`), from);
  assert.equal((await client.runStatus(a)).run.status, 'cancelled');
  assert.equal((await client.runStatus(b)).run.status, 'running');
  await pi.quit();
});
