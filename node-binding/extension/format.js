// What the model and the person see: the step message of an interactive request (read through
// the request contract, tolerating missing fields), result cards, widget lines and the footer.

import { formatProgressLine, prioritizeProgressEstimates, progressTracksFromStatus } from '../lib/progress.js';
import { fitColumns } from './width.js';

/** Custom message types this extension adds to a session. */
export const STEP = 'piw-step';
export const MESSAGE = 'piw-message';

const str = (v) => (typeof v === 'string' && v.trim() !== '' ? v : null);
const json = (v) => {
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
};

/** The request of an interaction or a decision, read through the contract. */
export function readRequest(request) {
  const r = request && typeof request === 'object' && !Array.isArray(request) ? request : {};
  return {
    workflow: str(r.workflow),
    title: str(r.title),
    node: str(r.node),
    kind: str(r.kind),
    prompt: str(r.prompt),
    expectedOutput: str(r.expectedOutput),
    statusDetail: str(r.statusDetail),
    maxChars: typeof r.maxChars === 'number' ? r.maxChars : null,
    summary: str(r.summary),
    question: str(r.question),
    details: str(r.details),
    choices: Array.isArray(r.choices)
      ? r.choices.filter((c) => c && typeof c.id === 'string').map((c) => ({ id: c.id, label: str(c.label) ?? c.id, description: str(c.description) }))
      : [],
    textInput: r.textInput && typeof r.textInput === 'object' ? r.textInput : null,
    extra: r.extra && typeof r.extra === 'object' ? r.extra : null,
    // Nothing the contract names: an older runtime's request, shown raw.
    raw: str(r.prompt) || str(r.summary) || str(r.question) ? null : request,
  };
}

/**
 * The step message of an agent or assistant-message request (`reminder` 0 for the first
 * presentation): the step contract and the exact `submit` call.
 */
export function stepMessage(interaction, workflowName, reminder = 0) {
  const req = readRequest(interaction.request);
  const workflow = req.workflow ?? workflowName ?? 'workflow';
  const lines = [];
  if (reminder > 0) {
    lines.push(`Reminder ${reminder} of 2: this workflow step is still waiting for your submission.`);
  }
  lines.push(
    `Workflow step — workflow: ${workflow}${req.title ? ` (${req.title})` : ''}, step: ${req.node ?? interaction.node_id}, attempt: ${interaction.attempt_id}`,
  );
  if (req.prompt) lines.push('', req.prompt);
  if (req.raw !== null) lines.push('', 'Request:', json(req.raw));
  if (req.extra) lines.push('', 'Extra:', json(req.extra));
  if (interaction.kind === 'assistant_message') {
    lines.push(
      '',
      `Answer with one message${req.maxChars ? ` of at most ${req.maxChars} characters` : ''}: your next reply is submitted as this step's output.`,
    );
  } else {
    lines.push('', `Expected output: ${req.expectedOutput ?? 'JSON (see the request)'}`);
    lines.push(
      '',
      'Submit it with the workflow tool, exactly:',
      JSON.stringify({ action: 'submit', interactionId: interaction.interaction_id, output: '<your JSON output>' }),
      'A validation error comes back as a tool error: fix the output and submit again.',
      'On a long step, note progress with {"action":"update","message":"..."} (the step stays open).',
    );
  }
  return lines.join('\n');
}

/** The message that asks the model to answer an ordinary checkpoint (`reminder` 0 for the first presentation). */
export function checkpointMessage(decision, run, reminder = 0) {
  const req = readRequest(decision.request);
  const lines = [];
  if (reminder > 0) {
    lines.push(`Reminder ${reminder} of 2: this workflow checkpoint is still waiting for your answer.`);
  }
  lines.push(`Workflow checkpoint — workflow: ${req.workflow ?? run.workflow_name}, step: ${req.node ?? decision.node_id}`);
  if (req.summary) lines.push('', req.summary);
  if (req.prompt) lines.push('', req.prompt);
  if (req.raw !== null) lines.push('', 'Request:', json(req.raw));
  lines.push(
    '',
    'Answer it with the workflow tool:',
    JSON.stringify({ action: 'answer', runId: run.run_id, answer: '<your answer as JSON>' }),
  );
  return lines.join('\n');
}

/** Text of a workflow message (`notify` output or a run's end). */
export function messageText(message) {
  const c = message.content;
  if (message.kind === 'terminal' && c && typeof c === 'object') {
    const head = `Workflow ${c.workflow ?? ''} ${c.status ?? 'ended'} (run ${message.run_id})`;
    const rest = [];
    if (c.error) rest.push(`error: ${c.error}`);
    if (c.result !== undefined && c.result !== null) rest.push(`result: ${json(c.result)}`);
    if (c.reason) rest.push(`reason: ${c.reason}`);
    return [head, ...rest].join('\n');
  }
  if (typeof c === 'string') return c;
  if (c && typeof c === 'object' && typeof c.text === 'string') return c.text;
  return json(c);
}

/** Presentation instructions a terminal message carries, if its workflow has any. */
export function presentationOf(message) {
  const c = message.content;
  return message.kind === 'terminal' && c && typeof c === 'object' ? str(c.presentation) : null;
}

const MARK = { ok: '✓', succeeded: '✓', failed: '✗', timed_out: '⏱', running: '▶', waiting: '…', interrupted: '↻', cancelled: '■' };

/** The widget (at most 10 lines) and the footer status of a run's status. */
export function widgetOf(status, progress, now = Date.now()) {
  const { run, attempts } = status;
  // The run's progress tracks (its latest `progress` update per key, `run.status` → `updates`)
  // with their ETA: `overall` first, then failed, blocked and waiting ones; at most four lines.
  let estimates = [];
  try {
    estimates = prioritizeProgressEstimates(progressTracksFromStatus(status.updates, new Date(now)).map((t) => t.estimate));
  } catch {
    // A track the widget cannot read is left out, never the widget.
  }
  const tracks = estimates.map((e) => `  ${formatProgressLine(e, new Date(now))}`.slice(0, 200));
  if (tracks.length > 4) tracks.splice(3, tracks.length, `  +${estimates.length - 3} more progress tracks`);
  const head = `wf ${run.workflow_name} ${run.paused ? 'paused' : run.status}${run.current_node ? ` ${run.current_node}` : ''}`;
  // The host lists attempts newest first: read them oldest first, so that a node's last
  // attempt is its newest and the nodes come in the order of their latest visits.
  // An interrupted attempt is not a visit: the node opens again for the same visit (a pause, a
  // lost child, a route the host parks after).
  const visits = new Map();
  for (const a of [...attempts].reverse()) {
    const v = visits.get(a.node_id) ?? { count: 0, last: a };
    if (a.status !== 'interrupted') v.count += 1;
    v.last = a;
    visits.delete(a.node_id);
    visits.set(a.node_id, v);
  }
  const lines = [`${head} · run ${run.run_id}`];
  const nodes = [...visits.entries()];
  // Keep the nodes visited last when there are more than fit.
  const shown = progress && !estimates.some((e) => progress === `progress:${e.key}`);
  const room = Math.max(1, (shown ? 7 : 8) - tracks.length);
  for (const [node, { count, last }] of nodes.slice(-room)) {
    const active = node === run.current_node && !['completed', 'failed', 'cancelled', 'timed_out'].includes(run.status);
    const took =
      typeof last.started_at === 'number' && typeof last.finished_at === 'number'
        ? ` ${Math.max(0, last.finished_at - last.started_at)} ms`
        : '';
    lines.push(`${active ? '→' : ' '} ${MARK[last.status] ?? '·'} ${node}${count > 1 ? ` ×${count}` : ''}${took}`);
  }
  lines.push(...tracks);
  // The note of the last progress event, unless it only names a track shown above.
  if (shown) lines.push(`  ${progress}`.slice(0, 200));
  return { lines: lines.slice(0, 10), status: head };
}

export { fitColumns };

/** The plain lines of a step or message card: its head (run, node, status) and up to three lines of content. */
export function cardText(message) {
  const d = message.details ?? {};
  const head =
    message.customType === STEP
      ? `workflow step ${d.node ?? ''} · run ${d.runId ?? ''}${d.reminder ? ` · reminder ${d.reminder}` : ''}`
      : `workflow ${d.kind ?? 'message'} · run ${d.runId ?? ''}${d.content?.status ? ` · ${d.content.status}` : ''}`;
  const body = typeof message.content === 'string' ? message.content.split('\n').slice(0, 3) : [];
  return [head, ...body];
}

/**
 * The TUI component of a card (Pi's `Component`: `render(width)` and `invalidate()`). Written
 * here rather than taken from `@earendil-works/pi-tui` so that loading the extension does not
 * load a second copy of Pi's TUI (see docs/PERFORMANCE.md, "Pi extension start").
 */
export class CardComponent {
  constructor(message, theme) {
    this.lines = cardText(message);
    this.theme = theme;
  }

  render(width) {
    const room = Math.max(1, width - 1);
    return this.lines.map((line, i) => {
      const fitted = fitColumns(line, room);
      return ` ${i === 0 && this.theme?.fg ? this.theme.fg('accent', fitted) : fitted}`;
    });
  }

  invalidate() {}
}
