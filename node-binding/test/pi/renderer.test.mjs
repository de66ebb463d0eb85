// The TUI card renderer the extension registers for its step and message cards (Pi calls it only
// in the TUI, never in RPC mode, so it is called here as Pi would: with a theme and a width).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { visibleWidth } from '@earendil-works/pi-tui';

import piwExtension from '../../extension/index.js';
import { fitColumns, messageParts, messageText, stepMessage } from '../../extension/format.js';
import { textColumns } from '../../extension/width.js';
import { decisionLines, decisionText } from '../../lib/decision-text.js';
import { DecisionComponent } from '../../extension/decision.js';

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

/** A card as Pi draws it: its rows, with the theme's colours taken off. */
function draw(message, width, expanded = false) {
  const { renderers } = register();
  const options = { expanded, keyText: (binding) => (binding === 'app.tools.expand' ? 'ctrl+o' : '?') };
  const rows = renderers.get(message.customType)(message, options, theme).render(width).map(plain);
  for (const row of rows) assert.ok(visibleWidth(row) <= width, `${JSON.stringify(row)} fits ${width} columns`);
  return rows;
}

const interaction = {
  interaction_id: 'int_7',
  attempt_id: 'att_3',
  node_id: 'draft',
  kind: 'agent',
  request: {
    workflow: 'titles',
    node: 'draft',
    prompt: 'Propose a title for the release notes.\nKeep it under eight words.',
    expectedOutput: '{"title": string}',
  },
};

test('a step card shows the start of the step, and expanded (Pi\'s expand key) the whole step contract', () => {
  const content = stepMessage(interaction, 'titles', 1);
  const message = { customType: 'piw-step', content, details: { node: 'draft', runId: 'run_1', reminder: 1 } };
  const collapsed = draw(message, 80);
  assert.equal(collapsed[0], ' workflow step draft · run run_1 · reminder 1');
  assert.equal(collapsed.length, 1 + 4 + 1, 'the head, four rows, the hint');
  assert.equal(collapsed.at(-1), ' … ctrl+o to expand');
  assert.ok(!collapsed.join('\n').includes('"action":"submit"'), 'collapsed, the card is short');
  // Expanded: every line of the step, the prompt, the expected output and the exact submit call.
  const expanded = draw(message, 200, true);
  assert.deepEqual(expanded.slice(1), content.split('\n').map((line) => ` ${line}`));
  assert.ok(expanded.includes(' Propose a title for the release notes.'));
  assert.ok(expanded.includes(' Expected output: {"title": string}'));
  assert.ok(expanded.includes(` ${JSON.stringify({ action: 'submit', interactionId: 'int_7', output: '<your JSON output>' })}`));
  // Narrow, the same text wrapped: nothing is cut at the edge.
  const narrow = draw(message, 30, true);
  const ink = (text) => text.replace(/\s+/g, '');
  assert.equal(ink(narrow.slice(1).join('')), ink(content));
});

test('a notify card shows the message, not the output JSON', () => {
  const text = messageText({ kind: 'notify', run_id: 'run_4', content: { kind: 'progress', message: 'hello from the workflow' } });
  assert.equal(text, 'hello from the workflow');
  const rows = draw({ customType: 'piw-message', content: text, details: { kind: 'notify', runId: 'run_4', content: { kind: 'progress', message: 'hello from the workflow' } } }, 80);
  assert.deepEqual(rows, [' workflow notify · run run_4', ' hello from the workflow']);
});

test('a result card shows the result, bounded, and all of it expanded; no row is wider than the width', () => {
  const result = { title: 'Faster starts', items: Array.from({ length: 30 }, (_, i) => `item ${i} 漢字`) };
  const content = { workflow: 'gate', status: 'completed', result };
  const message = {
    customType: 'piw-message',
    content: messageText({ kind: 'terminal', run_id: 'run_2', content }),
    details: { kind: 'terminal', runId: 'run_2', content },
  };
  const rows = draw(message, 80);
  assert.equal(rows[0], ' workflow gate completed · run run_2');
  assert.match(rows[1], /^ result: \{"title":"Faster starts","items":\["item 0 漢字"/);
  assert.equal(rows.length, 1 + 4 + 1, 'bounded: four rows and the hint');
  assert.equal(rows.at(-1), ' … ctrl+o to expand');
  const expanded = draw(message, 80, true);
  assert.deepEqual(expanded.slice(1), [' result:', ...JSON.stringify(result, null, 2).split('\n').map((l) => ` ${l}`)]);
  for (const width of [1, 2, 12, 20, 40]) {
    draw(message, width);
    draw(message, width, true);
  }
  // A result of megabytes: as many rows as a card shows, never more.
  const huge = { workflow: 'gate', status: 'completed', result: { text: 'x'.repeat(2_000_000), lines: Array(50_000).fill('row') } };
  const big = { customType: 'piw-message', content: '', details: { kind: 'terminal', runId: 'run_2', content: huge } };
  assert.equal(draw(big, 80).length, 1 + 4 + 1);
  const open = draw(big, 80, true);
  assert.equal(open.length, 1 + 400 + 1);
  assert.equal(open.at(-1), ' … (the session file holds the whole text)');
  // A small result needs no expanding.
  const small = { workflow: 'gate', status: 'completed', result: true };
  assert.deepEqual(draw({ customType: 'piw-message', content: '', details: { kind: 'terminal', runId: 'run_2', content: small } }, 80), [
    ' workflow gate completed · run run_2',
    ' result: true',
  ]);
});

test("a failed run's card shows its reason within the width", () => {
  const error = 'node fetch failed: the request to https://example.invalid/api/v1/items timed out after 30000 ms (3 tries)';
  const content = { workflow: 'sync', status: 'failed', error };
  const message = { customType: 'piw-message', content: `Workflow sync failed (run run_9)\nerror: ${error}`, details: { kind: 'terminal', runId: 'run_9', content } };
  const rows = draw(message, 40);
  assert.equal(rows[0], ' workflow sync failed · run run_9');
  // Wrapped, not cut: every word of the reason is on the card.
  assert.equal(rows.slice(1).join('').replace(/\s+/g, ''), `error: ${error}`.replace(/\s+/g, ''));
});

test("a run's end is read from the message's own text at the places its details name, after a prefix and before the presentation", () => {
  const content = { workflow: 'sync', status: 'failed', error: 'boom\nsecond line', result: { n: 1 }, reason: 'gave up', presentation: 'PRESENT IT' };
  const { text, parts } = messageParts({ kind: 'terminal', run_id: 'run_9', content });
  assert.equal(text, messageText({ kind: 'terminal', run_id: 'run_9', content }));
  const again = 'Pi stopped before the turn that presents this ended; present it now.\n\n';
  const shifted = Object.fromEntries(Object.entries(parts).map(([k, [a, b]]) => [k, [a + again.length, b + again.length]]));
  const message = {
    customType: 'piw-message',
    content: `${again}${text}\n\nPRESENT IT`,
    details: { kind: 'terminal', runId: 'run_9', workflow: 'sync', status: 'failed', stored: false, parts: shifted, turn: true },
  };
  assert.deepEqual(draw(message, 80, true), [' workflow sync failed · run run_9', ' error: boom', ' second line', ' reason: gave up', ' result:', ' {', '   "n": 1', ' }']);
  assert.deepEqual(draw(message, 80), [' workflow sync failed · run run_9', ' error: boom', ' second line', ' reason: gave up', ' result: {"n":1}', ' … ctrl+o to expand']);
});

test('the tool schema is plain JSON Schema: a flat object with an enum action', () => {
  const { tools } = register();
  const { parameters } = tools.find((t) => t.name === 'workflow');
  assert.equal(parameters.type, 'object');
  assert.deepEqual(parameters.required, ['action']);
  assert.deepEqual(parameters.properties.action.enum, ['list', 'start', 'status', 'pause', 'resume', 'detach', 'cancel', 'answer', 'update', 'submit']);
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

test('a decision without a presentation shows its subject; a block of an unknown kind is shown, not left out; the onTimeout response is said', () => {
  const request = {
    workflow: 'ship',
    question: 'Ship it?',
    details: null,
    choices: [{ id: 'go', label: 'Ship' }, { id: 'no', label: 'Hold' }],
    extra: { subject: { version: '1.2.0' }, onTimeout: { afterMs: 600_000, response: { choice: 'no' } } },
  };
  assert.equal(
    decisionText(request),
    ['Workflow ship: Ship it?', '', 'Subject:', '{', '  "version": "1.2.0"', '}', '', 'If nobody answers within 10 min, the workflow goes on with "Hold".'].join('\n'),
  );
  const odd = { question: 'Go?', extra: { presentation: { summary: 'Go?', blocks: [{ kind: 'table', rows: [['a', 'b']] }] } } };
  // A summary the question already says is not said twice.
  assert.deepEqual(decisionText(odd, 'wf').split('\n'), ['Workflow wf: Go?', '{', '  "kind": "table",', '  "rows": [', '    [', '      "a",', '      "b"', '    ]', '  ]', '}']);
});

test('the decision dialog fits every width, pages through the request and moves the selection', () => {
  const lines = decisionLines({
    workflow: 'plan',
    question: 'Approve 漢字 the plan',
    extra: { presentation: { summary: 'A summary that is long enough to wrap at narrow widths, with 漢字 in it.', blocks: [{ kind: 'bullets', items: Array.from({ length: 40 }, (_, i) => `item ${i}`) }] } },
  });
  let picked = null;
  const keys = { 'tui.select.down': '\x1b[B', 'tui.select.confirm': '\r' };
  const dialog = new DecisionComponent({
    lines,
    labels: ['Approve', 'Reject — stop here'],
    tui: { terminal: { rows: 20 }, requestRender() {} },
    theme,
    keybindings: { matches: (data, action) => keys[action] === data },
    done: (v) => (picked = v),
  });
  for (const width of [1, 2, 8, 20, 33, 80]) {
    for (const row of dialog.render(width).map(plain)) assert.ok(visibleWidth(row) <= width, `${JSON.stringify(row)} fits ${width}`);
  }
  const first = dialog.render(60).map(plain);
  assert.equal(first.at(-1), ' ↑↓ choose · Enter reads on (decides at the end) · Esc later');
  // Enter before the end has been on screen reads on: nobody decides on a request half read.
  dialog.handleInput('\r');
  assert.equal(picked, null);
  assert.match(dialog.render(60).map(plain)[10], /^ ── rows 10–19 of /);
  dialog.handleInput('\x1b[1;2A');
  // A page is what the terminal's 20 rows leave after the choices and 8 rows of Pi's own.
  assert.equal(first.length, 10 + 1 + 2 + 1, 'the page, the rule, the choices, the keys');
  assert.match(first[10], /^ ── rows 1–10 of \d+ · Shift\+↓ more ──$/);
  dialog.handleInput('\x1b[1;2B');
  const second = dialog.render(60).map(plain);
  // A page on, keeping one row of the last page in view.
  assert.match(second[10], /^ ── rows 10–19 of \d+ · Shift\+↓ more · Shift\+↑ back ──$/);
  for (let i = 0; i < 10; i++) dialog.handleInput('\x1b[1;2B');
  const last = dialog.render(60).map(plain);
  assert.equal(last[9], ' • item 39');
  assert.equal(last.at(-1), ' ↑↓ choose · Enter decide · Shift+↑↓ scroll · Esc later');
  // Seen once, it stays decidable when paged back.
  dialog.handleInput('\x1b[1;2A');
  dialog.handleInput('\x1b[B');
  assert.deepEqual(dialog.render(60).map(plain).slice(11, 13), ['   Approve', ' > Reject — stop here']);
  dialog.handleInput('\r');
  assert.equal(picked, 1);
});
