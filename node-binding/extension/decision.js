// The TUI dialog of a protected human decision: the request's lines (../lib/decision-text.js),
// scrollable, above the choices. In RPC mode the same lines, as text, are the select's title.

import { fitColumns, wrapColumns } from './width.js';

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
