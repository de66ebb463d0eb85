// What the model and the person see: the step message of an interactive request (read through
// the request contract, tolerating missing fields), result cards, widget lines and the footer.

import { formatProgressLine, prioritizeProgressEstimates, progressTracksFromStatus } from '../lib/progress.js';
import { readRequest } from '../lib/request-contract.js';
import { fitColumns, wrapColumns } from './width.js';

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

/**
 * The card of a detached run parked at an ordinary checkpoint: where, what it asks (its summary,
 * bounded), and how a person answers it. Its model is not asked: a person answers.
 */
export function parkedCheckpointText(decision, run) {
  const req = readRequest(decision.request);
  const what = req.summary ?? req.prompt;
  const lines = [`Workflow ${req.workflow ?? run.workflow_name} (run ${run.run_id}, detached) is parked at checkpoint ${req.node ?? decision.node_id}, waiting for a person's answer.`];
  if (what) lines.push('', what.length > 1_000 ? `${what.slice(0, 1_000)}…` : what);
  lines.push('', `A person answers it: /workflow answer ${run.run_id} <answer> here, or piw run answer ${run.run_id} <answer> from a shell.`);
  return lines.join('\n');
}

/**
 * A result over 64 KiB, which the host stores apart and names by a reference: its start, its
 * size and the command that prints it whole; `null` for any other value.
 */
function storedText(result, runId) {
  if (result?.$piw !== 'value') return null;
  return `${result.preview}… (${result.bytes} bytes: piw run value ${runId ?? '<run>'} ${result.sha256})`;
}

/** The most characters of a run's result `/workflow status` shows; the rest is a command away. */
export const RESULT_PREVIEW_CHARS = 2_000;

/**
 * A run's result as `/workflow status` shows it: whole when short, else its start, its size and
 * how to see it whole (a result of megabytes is never one notification). `result` may be the
 * reference of a value stored apart (`run.status` with references).
 */
export function resultPreview(result, runId) {
  const whole = `piw run status ${runId} --json prints it whole, piw view shows it`;
  if (result?.$piw === 'literal') return resultPreview(result.value, runId);
  if (result?.$piw === 'value') return `${result.preview}… (${result.bytes} bytes; ${whole})`;
  const text = JSON.stringify(result) ?? String(result);
  if (text.length <= RESULT_PREVIEW_CHARS) return text;
  // Not half a surrogate pair at the cut.
  const cut = /[\uD800-\uDBFF]/.test(text[RESULT_PREVIEW_CHARS - 1]) ? RESULT_PREVIEW_CHARS - 1 : RESULT_PREVIEW_CHARS;
  return `${text.slice(0, cut)}… (${Buffer.byteLength(text)} bytes; ${whole})`;
}

/** Text of a workflow message (`notify` output or a run's end). */
export function messageText(message) {
  return messageParts(message).text;
}

/**
 * Text of a workflow message, and for a run's end where in it its `error`, `result` and
 * `reason` are (`parts`: name -> `[start, end]` offsets): a card reads them from the
 * message's own text, so the session keeps each value once (not again in `details`).
 */
export function messageParts(message) {
  const c = message.content;
  if (message.kind === 'terminal' && c && typeof c === 'object') {
    let text = `Workflow ${c.workflow ?? ''} ${c.status ?? 'ended'} (run ${message.run_id})`;
    const parts = {};
    const add = (name, value) => {
      text += `\n${name}: `;
      parts[name] = [text.length, text.length + value.length];
      text += value;
    };
    if (c.error) add('error', String(c.error));
    if (c.result !== undefined && c.result !== null) add('result', storedText(c.result, message.run_id) ?? json(c.result));
    if (c.reason) add('reason', String(c.reason));
    return { text, parts };
  }
  return { text: otherText(c), parts: null };
}

function otherText(c) {
  if (typeof c === 'string') return c;
  // A `notify` node's output is `{ kind, message }`: the message is what it says.
  if (c && typeof c === 'object' && typeof c.message === 'string') return c.message;
  if (c && typeof c === 'object' && typeof c.text === 'string') return c.text;
  return json(c);
}

/** Presentation instructions a terminal message carries, if its workflow has any. */
export function presentationOf(message) {
  const c = message.content;
  return message.kind === 'terminal' && c && typeof c === 'object' ? str(c.presentation) : null;
}

/**
 * When a run waiting on a durable timer wakes, as a person reads it relative to `now`:
 * `wakes in 2 h`, `wakes in 5 min`, `wakes in 40 s`, `wakes now` once the time has come (the host
 * fires it at its next deadline pass); beyond a day the UTC time. `null` without a timer.
 */
export function wakeText(wakeAt, now = Date.now()) {
  if (typeof wakeAt !== 'number') return null;
  const secs = Math.ceil(Math.max(0, wakeAt - now) / 1000);
  if (secs === 0) return 'wakes now';
  if (secs < 60) return `wakes in ${secs} s`;
  if (secs < 3570) return `wakes in ${Math.round(secs / 60)} min`;
  if (secs < 86_400) return `wakes in ${Math.max(1, Math.round(secs / 3600))} h`;
  return `wakes ${new Date(wakeAt).toISOString().slice(0, 16)}Z`;
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
  const wakes = wakeText(run.wake_at, now);
  const head = `wf ${run.workflow_name} ${run.paused ? 'paused' : run.status}${run.current_node ? ` ${run.current_node}` : ''}${wakes ? ` · ${wakes}` : ''}`;
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

/** Rows of a collapsed card's body; the rest is behind Pi's expand key. */
export const CARD_ROWS = 4;
/** Rows of an expanded card's body at most (a card is not a pager: the session file holds it all). */
export const CARD_EXPANDED_ROWS = 400;

/**
 * Whether a run's review reason is about a changed source (a child found a source that differs
 * from the one the run recorded): the host's `is_source_change`, the one review a person may
 * leave with `piw run retry --accept-source`.
 */
export function isSourceChange(reason) {
  return typeof reason === 'string' && /^source_changed(?::|$)/.test(reason);
}

/**
 * The card a session gets when one of its runs stops for review (`status`: its `run.status`):
 * that it stopped, why, and what a person does to let it go on. No turn: the model is told not
 * to work on the run's steps meanwhile.
 */
export function reviewCardText(status) {
  const { run } = status;
  const id = run.run_id;
  const reason = run.review_reason ?? 'no reason given';
  const lines = [`Workflow ${run.workflow_name} (run ${id}) stopped for review: ${reason}`];
  const kept = (status.interactions ?? []).filter((i) => i.last_submission?.state === 'validating' || i.status === 'validating');
  for (const i of kept) lines.push(`The submission for step ${i.node_id} is kept: it is judged when the run goes on.`);
  const uncertain = (status.effects ?? []).filter((e) => e.state === 'uncertain');
  if (isSourceChange(reason)) {
    lines.push(
      `Its workflow file changed while it ran. A person either restores the file and runs \`piw run retry ${id}\`, or continues with the edited workflow: \`piw run retry ${id} --accept-source\`.`,
    );
  } else if (uncertain.length > 0) {
    for (const e of uncertain) {
      lines.push(
        `Effect ${e.effect_key ?? e.effect_id} may have happened: a person checks, then records it with \`piw run resolve-effect ${id} ${e.effect_id} --applied <receipt-json>\` or \`--failed <error>\`; the run then goes on.`,
      );
    }
  } else {
    lines.push(`A person fixes the cause, then runs \`piw run retry ${id}\` (\`piw run cancel ${id}\` ends it instead).`);
  }
  lines.push('The run does not go on until then: do not work on its steps or submit for it.');
  return lines.join('\n');
}

/**
 * What a step or message card carries: `{ head, lines, compact }`. `lines` is everything
 * (shown expanded); `compact` what a collapsed card shows first. A run's end is read from the
 * message's own content (its error, reason and result), not from the text the model got
 * (which may carry presentation instructions).
 */
export function cardText(message) {
  const d = message.details ?? {};
  // Pi's custom message content: a string, or text (and image) blocks.
  const text =
    typeof message.content === 'string'
      ? message.content
      : Array.isArray(message.content)
        ? message.content.filter((b) => b?.type === 'text').map((b) => b.text).join('\n')
        : messageText({ content: message.content });
  const lines = text.split('\n');
  if (message.customType === STEP) {
    const head = `workflow step ${d.node ?? ''} · run ${d.runId ?? ''}${d.reminder ? ` · reminder ${d.reminder}` : ''}`;
    return { head, lines, compact: lines.filter((l) => l.trim() !== '') };
  }
  const end = d.kind === 'terminal' ? runEnd(d, text) : null;
  if (end) {
    const head = `${['workflow', str(end.workflow), str(end.status) ?? 'ended'].filter(Boolean).join(' ')} · run ${d.runId ?? ''}`;
    const about = [];
    if (end.error) about.push(...`error: ${end.error}`.split('\n'));
    if (end.reason) about.push(...`reason: ${end.reason}`.split('\n'));
    const has = end.result !== null;
    const compact = has ? [...about, `result: ${end.result.line}`] : about;
    const pretty = has ? end.result.pretty : '';
    const full = !has ? about : pretty.includes('\n') ? [...about, 'result:', ...pretty.split('\n')] : compact;
    return { head, lines: full, compact };
  }
  const head = `workflow ${d.kind ?? 'message'} · run ${d.runId ?? ''}`;
  return { head, lines, compact: lines.filter((l) => l.trim() !== '') };
}

/**
 * A run's end as its card shows it: `{ workflow, status, error, reason, result: { line, pretty }
 * | null }`, read from the message's text at the places `details.parts` names (`messageParts`),
 * or from `details.content` (what earlier versions kept there); null when the details have
 * neither.
 */
function runEnd(d, text) {
  const c = d.content;
  if (c && typeof c === 'object') {
    if (c.result === undefined || c.result === null) return { ...c, result: null };
    const shown = storedText(c.result, d.runId);
    return { ...c, result: { line: shown ?? JSON.stringify(c.result), pretty: shown ?? json(c.result) } };
  }
  if (!d.parts || typeof d.parts !== 'object') return null;
  const at = (name) => {
    const p = d.parts[name];
    return Array.isArray(p) && p.length === 2 ? text.slice(p[0], p[1]) : null;
  };
  const result = at('result');
  let line = result;
  if (result !== null && !d.stored) {
    // Kept pretty in the text; one line collapsed.
    try {
      line = JSON.stringify(JSON.parse(result));
    } catch {
      // shown as it is
    }
  }
  return { workflow: d.workflow, status: d.status, error: at('error'), reason: at('reason'), result: result === null ? null : { line, pretty: result } };
}

/**
 * The TUI component of a card (Pi's `Component`: `render(width)` and `invalidate()`), collapsed
 * or expanded (Pi's `expanded` render option, toggled by its expand key as for tool results).
 * Every row fits the width: the body is wrapped, never cut at the edge. Written here rather
 * than taken from `@earendil-works/pi-tui` so that loading the extension does not load a second
 * copy of Pi's TUI (see docs/PERFORMANCE.md, "Pi extension start").
 */
export class CardComponent {
  constructor(message, options, theme) {
    this.card = cardText(message);
    this.expanded = Boolean(options?.expanded);
    this.expandKey = (typeof options?.keyText === 'function' && options.keyText('app.tools.expand')) || 'ctrl+o';
    this.theme = theme;
  }

  render(width) {
    if (this.cache?.width === width) return this.cache.rows;
    // A column of margin, as Pi's own cards have, when there is room for it.
    const pad = width > 1 ? ' ' : '';
    const room = Math.max(1, width - pad.length);
    const style = (color, line) => (this.theme?.fg ? this.theme.fg(color, line) : line);
    const rows = [`${pad}${style('accent', fitColumns(this.card.head, room))}`];
    const note = (text) => rows.push(`${pad}${style('dim', fitColumns(text, room))}`);
    const limit = this.expanded ? CARD_EXPANDED_ROWS : CARD_ROWS;
    const shown = wrapRows(this.expanded ? this.card.lines : this.card.compact, room, limit);
    for (const row of shown.slice(0, limit)) rows.push(`${pad}${row}`);
    if (this.expanded) {
      if (shown.length > limit) note('… (the session file holds the whole text)');
    } else if (shown.length > limit || !sameWords(this.card.compact, this.card.lines)) {
      // Expanding shows more than blank rows or the same words again.
      note(`… ${this.expandKey} to expand`);
    }
    this.cache = { width, rows };
    return rows;
  }

  invalidate() {
    this.cache = null;
  }
}

/**
 * `lines` wrapped to `room` columns, stopping once more than `limit` rows are made (a card
 * shows at most that many: a result of megabytes is not wrapped whole at every frame).
 */
function wrapRows(lines, room, limit) {
  const rows = [];
  // Enough text for limit + 1 rows however narrow its characters.
  const most = (limit + 1) * room * 8;
  for (const line of lines) {
    if (rows.length > limit) break;
    rows.push(...wrapColumns(line.length > most ? line.slice(0, most) : line, room));
  }
  return rows;
}

/** Whether two texts have the same words (wrapping and blank lines aside). */
function sameWords(a, b) {
  const words = (lines) => lines.join(' ').split(/\s+/).filter(Boolean).join(' ');
  return words(a) === words(b);
}
