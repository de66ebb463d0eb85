// What a person deciding a protected human decision sees: the request's presentation (title,
// summary, sections, paragraphs, bullets, fields, preformatted blocks) as lines, and the TUI
// dialog that shows them, scrollable, above the choices. A person never picks a choice without
// the request's text in front of them: in RPC mode the same lines are the select's title.

import { fitColumns, wrapColumns } from './width.js';

const str = (v) => (typeof v === 'string' && v.trim() !== '' ? v : null);
const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : null);
const pretty = (v) => {
  try {
    return JSON.stringify(v, null, 2) ?? String(v);
  } catch {
    return String(v);
  }
};

/** A duration in ms as a person reads it: `45 s`, `10 min`, `2 h 30 min`. */
export function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
}

/**
 * The lines of a human decision's request, for the person: `[{ text, style }]`, `style` one of
 * `title`, `section`, `text`, `pre` (kept as written), `note`. Reads the presentation the Node
 * runtime keeps under `extra.presentation` (`{ summary, blocks: [{ kind: 'section', title } |
 * { kind: 'paragraph', text } | { kind: 'bullets', items } | { kind: 'fields', items: [{ label,
 * value }] } | { kind: 'preformatted', text }] }`); a block of another kind is shown as JSON,
 * never left out. Without a presentation, the request's `subject` is shown as JSON: what the
 * person approves is always on screen.
 */
export function decisionLines(request, workflowName = null) {
  const r = obj(request) ?? {};
  const extra = obj(r.extra) ?? {};
  const presentation = obj(extra.presentation);
  const lines = [];
  const add = (text, style = 'text') => {
    for (const line of String(text).replace(/\r\n?/g, '\n').split('\n')) lines.push({ text: line, style });
  };
  const blank = () => {
    if (lines.length > 0 && lines[lines.length - 1].text !== '') lines.push({ text: '', style: 'text' });
  };
  const workflow = str(r.workflow) ?? workflowName ?? 'workflow';
  const question = str(r.question) ?? str(r.title);
  add(`Workflow ${workflow}: ${question ?? 'a decision'}`, 'title');
  const summary = str(presentation?.summary) ?? str(r.details);
  // A request without a title asks its summary (the runtime's `question`): said once.
  if (summary && summary !== question) {
    blank();
    add(summary);
  }
  const blocks = Array.isArray(presentation?.blocks) ? presentation.blocks : [];
  for (const b of blocks) {
    const block = obj(b);
    switch (block?.kind) {
      case 'section':
        blank();
        add(String(block.title ?? ''), 'section');
        break;
      case 'paragraph':
        blank();
        add(String(block.text ?? ''));
        break;
      case 'bullets':
        for (const item of Array.isArray(block.items) ? block.items : []) add(`• ${typeof item === 'string' ? item : pretty(item)}`);
        break;
      case 'fields':
        for (const item of Array.isArray(block.items) ? block.items : []) {
          const f = obj(item);
          add(f ? `${f.label ?? ''}: ${typeof f.value === 'string' ? f.value : pretty(f.value)}` : pretty(item));
        }
        break;
      case 'preformatted':
        add(String(block.text ?? ''), 'pre');
        break;
      default:
        add(pretty(b), 'pre');
    }
  }
  if (!presentation && extra.subject !== undefined) {
    blank();
    add('Subject:', 'section');
    add(pretty(extra.subject), 'pre');
  }
  // Nothing the contract names: an older runtime's request, shown raw.
  if (!question && !summary && !presentation) {
    blank();
    add(pretty(request), 'pre');
  }
  const timeout = obj(extra.onTimeout);
  const response = obj(timeout?.response);
  if (response && typeof response.choice === 'string') {
    const choices = Array.isArray(r.choices) ? r.choices : [];
    const label = str(choices.find((c) => c?.id === response.choice)?.label) ?? response.choice;
    const after = typeof timeout.afterMs === 'number' && timeout.afterMs > 0 ? ` within ${duration(timeout.afterMs)}` : ' in time';
    blank();
    add(`If nobody answers${after}, the workflow goes on with "${label}".`, 'note');
  }
  return lines;
}

/** The lines as plain text (the RPC select's title). */
export function decisionText(request, workflowName = null) {
  return decisionLines(request, workflowName)
    .map((l) => l.text)
    .join('\n');
}

/**
 * Shift+Up and Shift+Down as terminals send them (xterm's form, rxvt's): they page the
 * request. Pi keeps PageUp and PageDown for itself in its regular mode (they never reach a
 * dialog), so these are the keys that always do.
 */
const SHIFT_UP = ['\x1b[1;2A', '\x1b[a'];
const SHIFT_DOWN = ['\x1b[1;2B', '\x1b[b'];

const STYLE = { title: 'accent', section: 'accent', note: 'warning', pre: 'muted' };

/**
 * The TUI dialog of a human decision (Pi's `Component`, for `ctx.ui.custom`): the request's
 * lines, wrapped to the width and paged (Shift+↑↓) when they do not fit the terminal, then
 * the choices (up/down, Enter); Escape leaves it for later. Enter decides only once the last
 * row of the request has been on screen (before, it pages on). `done(index | undefined)`.
 * Written here rather than with `@earendil-works/pi-tui` for the reason the cards are
 * (docs/PERFORMANCE.md, "Pi extension start").
 */
export class DecisionComponent {
  constructor({ lines, labels, tui, theme, keybindings, done }) {
    this.lines = lines;
    this.labels = labels;
    this.tui = tui;
    this.theme = theme;
    this.keybindings = keybindings;
    this.done = done;
    this.selected = 0;
    this.scroll = 0;
    /** Rows of the request the last render showed at once (a page). */
    this.page = 1;
    /** Whether the request's last row has been on screen: until then Enter reads on, never decides. */
    this.seenAll = false;
  }

  /**
   * Rows of the request shown at once: what the terminal leaves after the choices, the rule and
   * the keys row, and Pi's own rows around the dialog (widget, footer: about six).
   */
  viewport() {
    const rows = Number(this.tui?.terminal?.rows) || 24;
    return Math.max(3, rows - this.labels.length - 8);
  }

  render(width) {
    const pad = width > 1 ? ' ' : '';
    const room = Math.max(1, width - pad.length);
    const style = (name, text) => (this.theme?.fg && STYLE[name] ? this.theme.fg(STYLE[name], text) : text);
    // The wrapped request, kept per width (rendered at every frame; moving the selection keeps it).
    if (this.wrapped?.width !== width) {
      this.wrapped = { width, body: this.lines.flatMap((l) => wrapColumns(l.text, room).map((row) => style(l.style, row))) };
    }
    const { body } = this.wrapped;
    const view = this.viewport();
    this.page = Math.min(view, body.length);
    this.scroll = Math.max(0, Math.min(this.scroll, body.length - view));
    const rows = body.slice(this.scroll, this.scroll + view).map((row) => `${pad}${row}`);
    const rule = (text) => `${pad}${style('pre', fitColumns(text, room))}`;
    if (body.length > view) {
      const last = Math.min(body.length, this.scroll + view);
      rows.push(rule(`── rows ${this.scroll + 1}–${last} of ${body.length}${last < body.length ? ' · Shift+↓ more' : ''}${this.scroll > 0 ? ' · Shift+↑ back' : ''} ──`));
    } else {
      rows.push('');
    }
    this.labels.forEach((label, i) => {
      const line = fitColumns(`${i === this.selected ? '> ' : '  '}${label}`, room);
      rows.push(`${pad}${i === this.selected ? style('title', line) : line}`);
    });
    if (this.scroll + view >= body.length) this.seenAll = true;
    rows.push(rule(this.seenAll ? '↑↓ choose · Enter decide · Shift+↑↓ scroll · Esc later' : '↑↓ choose · Enter reads on (decides at the end) · Esc later'));
    return rows;
  }

  handleInput(data) {
    const is = (action) => this.keybindings?.matches?.(data, action);
    // A person decides only once the whole request has been on screen.
    if (is('tui.select.confirm') && this.seenAll) {
      this.done(this.selected);
      return;
    }
    if (is('tui.select.cancel')) {
      this.done(undefined);
      return;
    }
    if (is('tui.select.up')) this.selected = (this.selected - 1 + this.labels.length) % this.labels.length;
    else if (is('tui.select.down')) this.selected = (this.selected + 1) % this.labels.length;
    else if (is('tui.select.pageUp') || SHIFT_UP.includes(data)) this.scroll = Math.max(0, this.scroll - Math.max(1, this.page - 1));
    else if (is('tui.select.pageDown') || is('tui.select.confirm') || SHIFT_DOWN.includes(data)) this.scroll += Math.max(1, this.page - 1);
    else return;
    this.tui?.requestRender?.();
  }

  invalidate() {
    // The theme may have changed: styled rows are made again.
    this.wrapped = null;
  }
}
