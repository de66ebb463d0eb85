// A human decision's request as a person reads it: its presentation (title, summary, sections,
// paragraphs, bullets, fields, preformatted blocks) as lines, and those lines as plain text. A
// person never picks a choice without the request's text in front of them: the Pi extension's
// dialog shows the lines, its RPC select and the decision channels the text.

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
