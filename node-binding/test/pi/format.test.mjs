// The widget's lines, from a run's status as the host gives it (attempts newest first).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { messageText, widgetOf } from '../../extension/format.js';

const attempt = (node_id, status, started_at, finished_at = started_at + 5) => ({
  attempt_id: `att-${node_id}-${started_at}`,
  node_id,
  status,
  error: null,
  started_at,
  finished_at,
});

const run = (current_node, status = 'running') => ({
  run_id: 'run_1',
  workflow_name: 'loop',
  status,
  paused: false,
  current_node,
});

test("the widget shows a revisited node's latest outcome, visits and timing, and keeps the most recent nodes", () => {
  // Oldest first: a fails, b, a succeeds, then c..j, then k runs.
  const oldestFirst = [
    attempt('a', 'failed', 1000, 1010),
    attempt('b', 'ok', 1100, 1130),
    attempt('a', 'ok', 1200, 1207),
    ...'cdefghij'.split('').map((n, i) => attempt(n, 'ok', 2000 + i * 100)),
    attempt('k', 'running', 3000, null),
  ];
  const { lines, status } = widgetOf({ run: run('k'), attempts: [...oldestFirst].reverse() }, null);
  assert.equal(status, 'wf loop running k');
  assert.equal(lines.length, 9);
  assert.equal(lines[0], 'wf loop running k · run run_1');
  // The eight nodes visited last, in the order of their latest visits; the oldest (b, then a) fall off.
  assert.deepEqual(lines.slice(1), [
    '  ✓ d 5 ms',
    '  ✓ e 5 ms',
    '  ✓ f 5 ms',
    '  ✓ g 5 ms',
    '  ✓ h 5 ms',
    '  ✓ i 5 ms',
    '  ✓ j 5 ms',
    '→ ▶ k',
  ]);
  const few = widgetOf({ run: run('b', 'completed'), attempts: [...oldestFirst.slice(0, 3)].reverse() }, 'step 2 of 3');
  assert.deepEqual(few.lines, ['wf loop completed b · run run_1', '  ✓ b 30 ms', '  ✓ a ×2 7 ms', '  step 2 of 3']);
});

test('an interrupted attempt is not a visit: a node reached through a route the host parked after counts once', () => {
  // draft fails, the host routes to gaveUp and parks (that attempt is interrupted), a child runs it.
  const oldestFirst = [attempt('draft', 'failed', 1000, 1010), attempt('gaveUp', 'interrupted', 1010, 1010), attempt('gaveUp', 'ok', 1020, 1025)];
  const { lines } = widgetOf({ run: run('gaveUp', 'completed'), attempts: [...oldestFirst].reverse() }, null);
  assert.deepEqual(lines.slice(1), ['  ✗ draft 10 ms', '  ✓ gaveUp 5 ms']);
});

test("the widget shows the run's progress tracks with their ETA, overall and blocked first, within ten lines", () => {
  const at = Date.parse('2026-08-16T10:00:00Z');
  const progress = (key, data, samples = []) => ({
    type: 'progress',
    key,
    node_id: 'k',
    attempt_id: 'att',
    data: { schema: 'pi-workflows.progress.v1', ...data },
    seq: 1,
    at: samples.at(-1)?.[0] ?? at,
    samples,
  });
  // Worker A: 100 rows a minute for four minutes, 600 of 1,000 done: 4 minutes left.
  const a = progress('worker-a', { label: 'Worker A', status: 'running', completed: 600, total: 1000, unit: 'rows' }, [0, 1, 2, 3, 4].map((m) => [at + m * 60_000, 200 + m * 100]));
  const overall = progress('overall', { status: 'running', completed: 1, total: 3, unit: 'jobs' }, [[at, 1]]);
  const blocked = progress('worker-b', { label: 'Worker B', status: 'blocked' });
  const other = { type: 'note', key: 'n', data: { text: 'hi' }, seq: 2, at, samples: [] };
  const oldestFirst = 'abcdefghij'.split('').map((n, i) => attempt(n, 'ok', 2000 + i * 100));
  const { lines } = widgetOf(
    { run: run('j'), attempts: [...oldestFirst].reverse(), updates: [a, blocked, other, overall] },
    null,
    at + 4 * 60_000,
  );
  assert.ok(lines.length <= 10, lines.join('\n'));
  assert.deepEqual(lines.slice(-3), [
    '  overall  1/3 jobs  ETA unavailable (needs another progress sample)',
    '  Worker B  blocked  ETA unavailable (progress is blocked)',
    '  Worker A  600/1,000 rows  ETA 4m',
  ]);
  // Nodes make room for the tracks: the newest ones stay.
  assert.equal(lines[lines.length - 4], '→ ✓ j 5 ms');
  // Without updates the widget is as it was.
  assert.equal(widgetOf({ run: run('j'), attempts: [...oldestFirst].reverse() }, null).lines.length, 9);
});

test('a run waiting on a durable timer says when it wakes, in the widget and its footer status', () => {
  const now = Date.parse('2026-08-16T10:00:00Z');
  const waiting = { ...run('nap', 'waiting'), wake_at: now + 2 * 3600_000 };
  const { lines, status } = widgetOf({ run: waiting, attempts: [attempt('nap', 'waiting', now - 5, null)] }, null, now);
  assert.equal(status, 'wf loop waiting nap · wakes in 2 h');
  assert.equal(lines[0], 'wf loop waiting nap · wakes in 2 h · run run_1');
  const soon = widgetOf({ run: { ...waiting, wake_at: now + 90_000 }, attempts: [] }, null, now);
  assert.equal(soon.status, 'wf loop waiting nap · wakes in 2 min');
  const later = widgetOf({ run: { ...waiting, wake_at: now + 3 * 86_400_000 }, attempts: [] }, null, now);
  assert.equal(later.status, 'wf loop waiting nap · wakes 2026-08-19T10:00Z');
  const none = widgetOf({ run: { ...run('a'), wake_at: null }, attempts: [] }, null, now);
  assert.equal(none.status, 'wf loop running a');
});

test("a terminal message whose result is stored apart shows the result's start, size and the command that prints it, not the reference", () => {
  const sha256 = 'ab'.repeat(32);
  const message = {
    kind: 'terminal',
    run_id: 'run-1',
    content: { status: 'completed', workflow: 'big', result: { $piw: 'value', sha256, bytes: 5000012, preview: '{"stdout":"xxx' } },
  };
  const text = messageText(message);
  assert.match(text, /^Workflow big completed \(run run-1\)\nresult: \{"stdout":"xxx… \(5000012 bytes: piw run value run-1 (ab)+\)$/);
  assert.doesNotMatch(text, /\$piw/);
  const plain = messageText({ ...message, content: { ...message.content, result: { n: 1 } } });
  assert.match(plain, /result: \{\s*"n": 1\s*\}/);
});
