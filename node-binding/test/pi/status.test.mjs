// `/workflow status` and the tool's `status` in the Pi session: a run's result is shown as a
// bounded preview with how to see it whole, however large it is.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

/** What a status shows at most, result and all (format.js previews 2,000 characters of a result). */
const MOST_SHOWN = 3_000;

let env;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await env?.close();
});

test('the status of a run with a large result shows a bounded preview and how to see it whole', async () => {
  env.addWorkflow('big.workflow.mjs', 'big');
  let asked = null;
  env.model.script = ({ last, lastText }) =>
    last.role === 'user' && /STATUS-OF-IT/.test(lastText) ? { tool: { name: 'workflow', arguments: { action: 'status', runId: asked } } } : { text: 'ok' };
  const pi = await env.startPi();
  const client = await env.client();
  // Stored apart (over 64 KiB) and kept in the run's record (under it), each larger than a preview.
  for (const size of [5_000_000, 50_000]) {
    const from = pi.mark();
    await pi.prompt(`/workflow big --input-json ${JSON.stringify({ size })}`);
    // Its run, once it ended and its card came.
    const card = await until(() => pi.customMessages('piw-message', from).find((m) => m.details.kind === 'terminal'), 'its card');
    const run = (await client.runStatus(card.details.runId, { references: true })).run;
    assert.equal(run.status, 'completed');
    const status = pi.mark();
    await pi.prompt(`/workflow status ${run.run_id}`);
    const shown = await pi.waitNotify(new RegExp(`^run ${run.run_id}: big completed`), status);
    assert.ok(shown.message.length < MOST_SHOWN, `${shown.message.length} characters shown`);
    assert.match(shown.message, /result: \{"blob":"xxx/);
    assert.match(shown.message, new RegExp(`… \\(${size + 11} bytes; piw run status ${run.run_id} --json prints it whole, piw view shows it\\)$`));

    // The model's tool: the same preview, and no copy of the result in the tool result's details.
    asked = run.run_id;
    const tool = pi.mark();
    await pi.prompt('STATUS-OF-IT');
    const result = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the status tool call', tool);
    assert.equal(result.isError, false);
    const text = JSON.stringify(result.result);
    assert.ok(text.length < 2 * MOST_SHOWN, `${text.length} characters in the tool result`);
    assert.match(text, /piw run status .* --json prints it whole/);
    await pi.waitSettled(tool);
  }
  await pi.quit();
});
