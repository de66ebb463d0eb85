// The TUI card renderer the extension registers for its step and message cards (Pi calls it only
// in the TUI, never in RPC mode, so it is called here as Pi would: with a theme and a width).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { visibleWidth } from '@earendil-works/pi-tui';

import piwExtension from '../../extension/index.js';
import { fitColumns } from '../../extension/format.js';
import { textColumns } from '../../extension/width.js';

/** The extension's registrations, through a stand-in for Pi's ExtensionAPI. */
function register() {
  const renderers = new Map();
  const tools = [];
  const commands = new Map();
  piwExtension({
    on() {},
    registerTool: (t) => tools.push(t),
    registerCommand: (name, c) => commands.set(name, c),
    registerMessageRenderer: (type, fn) => renderers.set(type, fn),
  });
  return { renderers, tools, commands };
}

test('a complete subcommand offers no completion, so one Enter runs it (Enter on a menu only applies its item)', async () => {
  const { commands } = register();
  const complete = commands.get('workflow').getArgumentCompletions;
  assert.deepEqual(await complete('sta'), [{ value: 'status', label: 'status' }]);
  assert.equal(await complete('status'), null);
  assert.equal(await complete('list'), null);
});

const theme = { fg: (color, text) => `<${color}>${text}</${color}>` };
const plain = (line) => line.replace(/<\/?[a-z]+>/g, '');

test('a step card shows the node, the run and the reminder, then the first three lines of the step', () => {
  const { renderers } = register();
  const message = {
    customType: 'piw-step',
    content: 'Workflow titles, step draft\nPropose a title\nExpected output: {"title": string}\nSubmit with ...',
    details: { node: 'draft', runId: 'run_1', reminder: 1 },
  };
  const lines = renderers.get('piw-step')(message, { expanded: false }, theme).render(80);
  assert.deepEqual(lines, [
    ' <accent>workflow step draft · run run_1 · reminder 1</accent>',
    ' Workflow titles, step draft',
    ' Propose a title',
    ' Expected output: {"title": string}',
  ]);
});

test('a result card shows the kind, the run and the status; no line is wider than the width', () => {
  const { renderers } = register();
  const message = {
    customType: 'piw-message',
    content: `Workflow gate completed (run run_2)\nresult: ${'x'.repeat(200)}\n漢字漢字漢字漢字漢字漢字`,
    details: { kind: 'terminal', runId: 'run_2', content: { status: 'completed' } },
  };
  const card = renderers.get('piw-message')(message, { expanded: false }, theme);
  assert.equal(plain(card.render(80)[0]), ' workflow terminal · run run_2 · completed');
  for (const width of [12, 20, 40]) {
    for (const line of card.render(width)) {
      const columns = [...plain(line)].reduce((n, ch) => n + (ch.codePointAt(0) >= 0x2e80 ? 2 : 1), 0);
      assert.ok(columns <= width, `${JSON.stringify(line)} fits ${width} columns`);
    }
  }
});

test('the tool schema is plain JSON Schema: a flat object with an enum action', () => {
  const { tools } = register();
  const { parameters } = tools.find((t) => t.name === 'workflow');
  assert.equal(parameters.type, 'object');
  assert.deepEqual(parameters.required, ['action']);
  assert.deepEqual(parameters.properties.action.enum, ['list', 'start', 'status', 'pause', 'resume', 'cancel', 'answer', 'update', 'submit']);
  for (const p of Object.values(parameters.properties)) assert.notEqual(p.type, 'object', 'flat');
});

// Text whose columns a per-code-point count gets wrong, with the columns a terminal gives it.
const CLUSTERS = [
  ['plain ascii', 11],
  ['👩‍👩‍👧‍👦 family (ZWJ)', 2 + 13],
  ['👍🏽 skin tone', 2 + 10],
  ['🇫🇷 flag', 2 + 5],
  ['1️⃣ keycap', 2 + 7],
  ['❤️ vs16, ✓ text', 2 + 13],
  ['e\u0301te\u0301 combining', 3 + 10],
  ['漢字 かな 한국어', 4 + 1 + 4 + 1 + 6],
  ['ｆｕｌｌ', 8],
  ['zero\u200bwidth', 9],
  ['नमस्ते', 4],
];

test('text is measured per grapheme cluster, as Pi and terminals draw it', () => {
  for (const [text, columns] of CLUSTERS) {
    assert.equal(textColumns(text), columns, JSON.stringify(text));
    assert.equal(textColumns(text), visibleWidth(text), `${JSON.stringify(text)} as Pi measures it`);
  }
});

test('a line is cut between grapheme clusters, to at most the width Pi measures', () => {
  const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });
  const clusters = (text) => [...segmenter.segment(text)].map((s) => s.segment);
  const line = CLUSTERS.map(([text]) => text).join(' · ');
  const whole = clusters(line);
  for (let width = 0; width <= textColumns(line) + 1; width += 1) {
    const fitted = fitColumns(line, width);
    assert.ok(visibleWidth(fitted) <= width, `${JSON.stringify(fitted)} fits ${width} columns`);
    // Whole clusters only, and as many as fit.
    const kept = clusters(fitted);
    assert.deepEqual(kept, whole.slice(0, kept.length), `${width}: cut inside a cluster`);
    const next = whole[kept.length];
    if (next !== undefined) assert.ok(visibleWidth(fitted + next) > width, `${width}: stopped early`);
  }
});
