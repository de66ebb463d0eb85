// Public helpers pi-workflows workflows import: JSON out of model text, canonical JSON and its
// digest.

/** How many `{`/`[` starts the embedded-JSON scan tries, so hostile text cannot stall it. */
const MAX_EMBEDDED_STARTS = 64;

function parsed(text) {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return null;
  }
}

/** The body of the first ``` fence (a `json` tag dropped), or null. */
function fenced(text) {
  const open = text.indexOf('```');
  if (open < 0) return null;
  let from = open + 3;
  const tag = /^json(?=[ \t\r\n])/i.exec(text.slice(from));
  if (tag) from += tag[0].length;
  const close = text.indexOf('```', from);
  return close < 0 ? null : text.slice(from, close).trim();
}

/** The balanced `{...}` or `[...]` starting at `start` (strings respected), or null. */
function balanced(text, start) {
  const open = [];
  let quoted = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === '"') {
      quoted = true;
    } else if (c === '{' || c === '[') {
      open.push(c === '{' ? '}' : ']');
    } else if (c === '}' || c === ']') {
      if (open.pop() !== c) return null;
      if (open.length === 0) return text.slice(start, i + 1);
    }
  }
  return null;
}

/**
 * A JSON value out of text a model wrote. `mode` `strict`: the whole text; `fenced`: or the
 * first ``` fence; `compat` (default): or the first object or array embedded in prose that
 * parses. Throws when there is none.
 */
export function parseJsonValue(text, options = {}) {
  const mode = options.mode ?? 'compat';
  if (!['strict', 'fenced', 'compat'].includes(mode)) throw new Error(`unknown JSON parse mode ${mode}`);
  const body = typeof text === 'string' ? text.trim() : '';
  if (body === '') throw new Error('expected JSON, got empty text');
  const whole = parsed(body);
  if (whole) return whole.value;
  if (mode !== 'strict') {
    const inFence = fenced(body);
    const fromFence = inFence === null ? null : parsed(inFence);
    if (fromFence) return fromFence.value;
  }
  if (mode === 'compat') {
    let tried = 0;
    for (let i = 0; i < body.length && tried < MAX_EMBEDDED_STARTS; i++) {
      if (body[i] !== '{' && body[i] !== '[') continue;
      tried++;
      const candidate = balanced(body, i);
      const value = candidate === null ? null : parsed(candidate);
      if (value) return value.value;
    }
  }
  throw new Error(`no JSON value in the text (${mode}): ${body.length > 200 ? `${body.slice(0, 200)}…` : body}`);
}

/** The whole text as JSON (`parseJsonValue` in `strict` mode). */
export function parseStrictJsonValue(text) {
  return parseJsonValue(text, { mode: 'strict' });
}

/** The tolerant parse (`parseJsonValue` in `compat` mode). */
export function extractJsonValue(text) {
  return parseJsonValue(text, { mode: 'compat' });
}

function sortedKeys(value) {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (value !== null && typeof value === 'object') {
    // The reference orders keys with `localeCompare`: the same order gives the same digests.
    const keys = Object.keys(value).sort((a, b) => a.localeCompare(b));
    return Object.fromEntries(keys.map((k) => [k, sortedKeys(value[k])]));
  }
  return value;
}

/** JSON text with every object's keys sorted, so equal values give equal text. */
export function canonicalJson(value) {
  return JSON.stringify(sortedKeys(value));
}

/** `sha256:<hex>` of `canonicalJson(value)`. */
export function digest(value) {
  return `sha256:${process.getBuiltinModule('node:crypto').createHash('sha256').update(canonicalJson(value)).digest('hex')}`;
}
