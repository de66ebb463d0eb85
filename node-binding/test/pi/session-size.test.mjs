// What a workflow message costs the Pi session file: its content once (its text), the details
// only ids and kinds (and for a run's end where its parts are in the text), however large it is;
// the cards still read what they show from the stored entries.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { CardComponent } from '../../extension/format.js';
import { piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await env?.close();
});

/** The session files under the harness's session directory. */
function sessionFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sessionFiles(path));
    else if (name.endsWith('.jsonl')) out.push(path);
  }
  return out;
}

test('a 1 MB notify message and a 50 KB result are each kept once in the session file, and their cards still show them', async () => {
  env.addWorkflow('shout.workflow.mjs', 'shout');
  const pi = await env.startPi({ sessionId: 'sized' });
  // A session Pi has saved (it writes the file once the conversation has started).
  await pi.prompt('hi');
  await pi.waitSettled();
  const from = pi.mark();
  await pi.prompt(`/workflow shout --input-json ${JSON.stringify({ size: 1_000_000 })}`);
  await until(() => pi.customMessages('piw-message', from).some((m) => m.details.kind === 'terminal'), 'the result card');
  const client = await env.client();
  await until(async () => (await client.claimMessages('sized', { claimant: 'pi:sized' })).length === 0, 'both acknowledged');
  await pi.quit();

  const [file] = sessionFiles(join(env.root, 's'));
  const size = statSync(file).size;
  assert.ok(size < 1_000_000 + 50_000 + 200_000, `the session file holds ${size} bytes`);
  const entries = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const cards = entries.filter((e) => e.type === 'custom_message' && e.customType === 'piw-message');
  assert.deepEqual(cards.map((e) => e.details.kind), ['notify', 'terminal']);
  const [notify, end] = cards;
  assert.ok(notify.content.startsWith('SHOUT nnn') && notify.content.length === 1_000_006);
  for (const e of cards) {
    assert.ok(JSON.stringify(e.details).length < 500, `details of ${e.details.kind}: ${JSON.stringify(e.details).slice(0, 300)}`);
  }
  // The cards, drawn from the stored entries as Pi draws them.
  const draw = (e, expanded = false) => new CardComponent(e, { expanded }, null).render(80);
  const told = draw(notify);
  assert.equal(told[0], ` workflow notify · run ${end.details.runId}`);
  assert.match(told.slice(1, 3).join('|'), /^ SHOUT\| n{79}$/);
  const collapsed = draw(end);
  assert.equal(collapsed[0], ` workflow shout completed · run ${end.details.runId}`);
  // Collapsed, the result is one line of JSON (wrapped at the width).
  assert.match(collapsed.slice(1, 3).join('|'), /^ result:\| \{"blob":"z{70}/);
  const expanded = draw(end, true);
  assert.deepEqual(expanded.slice(1, 3), [' result:', ' {']);
  assert.match(expanded.slice(3, 5).join('|'), /^ {3}"blob":\| "z{70}/);
});
