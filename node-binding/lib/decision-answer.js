// A human decision's answers: the text each choice collects, its length rule, and an answer
// typed as text (`/workflow answer`, a channel's reply) read against the decision's choices.
// Pure: the session's dialogs, the `/workflow` command and the decision channels share them.
import { readRequest } from './request-contract.js';

/**
 * The text each choice of a human decision collects: choice id -> `{ label, placeholder,
 * minLength, maxLength, required, perChoice }`, or null for a choice that takes no text. Read
 * from each choice's `input` when the request carries them; a request with only the
 * decision-wide `textInput` does not say which choice it belongs to, so every choice offers it,
 * optional (`perChoice` false: whether it is needed, and its length, are the host's to check).
 */
export function choiceInputs(request) {
  const raw = request && typeof request === 'object' && Array.isArray(request.choices) ? request.choices : [];
  // A choice's own input: `input` (as `choice({ input })` names it), or `textInput`.
  const own = (c) => (c && typeof c === 'object' ? c.input ?? c.textInput ?? null : null);
  const perChoice = raw.some((c) => own(c) && typeof own(c) === 'object');
  const shared = request?.textInput && typeof request.textInput === 'object' ? request.textInput : null;
  const count = (v) => (Number.isInteger(v) && v >= 0 ? v : null);
  const inputs = new Map();
  for (const c of raw) {
    if (!c || typeof c.id !== 'string') continue;
    const i = perChoice ? own(c) : shared;
    if (!i || typeof i !== 'object') {
      inputs.set(c.id, null);
      continue;
    }
    const minLength = count(i.minLength);
    inputs.set(c.id, {
      label: [i.label, i.prompt, i.name].find((v) => typeof v === 'string' && v.trim() !== '') ?? 'Text',
      placeholder: typeof i.placeholder === 'string' ? i.placeholder : '',
      minLength,
      maxLength: count(i.maxLength),
      // The shared input's `required` is its own choice's rule, not known here: the host checks it.
      required: perChoice ? (minLength ?? 0) > 0 : false,
      perChoice,
    });
  }
  return inputs;
}

/** The length rule of a text input, for the person (`""` when it has none). */
export function textRule(input) {
  const { minLength: min, maxLength: max } = input;
  if (min !== null && max !== null) return `${min} to ${max} characters`;
  if (min !== null && min > 0) return `at least ${min} characters`;
  if (max !== null) return `at most ${max} characters`;
  return input.required ? 'required' : '';
}

/** Why `text` does not fit `input` (null when it does). Lengths count as the workflow counts them (UTF-16 units). */
export function textProblem(text, input) {
  if (input.minLength !== null && text.length < input.minLength) return `${input.label}: at least ${input.minLength} characters, got ${text.length}`;
  if (input.maxLength !== null && text.length > input.maxLength) return `${input.label}: at most ${input.maxLength} characters, got ${text.length}`;
  if (input.required && text.trim() === '') return `${input.label}: an answer is required`;
  return null;
}

/**
 * The answer `/workflow answer` gives a human decision, or why it does not fit the decision
 * (`{ problem }`): `raw` is `{"choice": id, "text": ...}` as JSON, or a choice's id or label
 * followed by its text (`reject too vague`).
 */
export function humanAnswer(request, raw) {
  const { choices } = readRequest(request);
  const inputs = choiceInputs(request);
  if (choices.length === 0) return { answer: { choice: null, text: raw } };
  const listing = choices
    .map((c) => {
      const input = inputs.get(c.id);
      const name = c.label === c.id ? c.id : `${c.id} ("${c.label}")`;
      if (!input) return name;
      const rule = textRule(input);
      return `${name} <${input.label}${rule ? `, ${rule}` : ''}>`;
    })
    .join(', ');
  let parsed;
  try {
    parsed = JSON.parse(raw);
  } catch {
    parsed = raw;
  }
  let picked;
  let text;
  if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
    picked = choices.find((c) => c.id === parsed.choice);
    text = typeof parsed.text === 'string' ? parsed.text : null;
  } else {
    const given = String(parsed);
    const lower = given.toLowerCase();
    let best = null;
    for (const c of choices) {
      for (const name of [c.id, c.label]) {
        const n = name.toLowerCase();
        const fits = lower === n || lower.startsWith(`${n} `);
        if (fits && (!best || n.length > best.length)) best = { c, length: n.length };
      }
    }
    picked = best?.c;
    text = best ? given.slice(best.length).trim() : null;
  }
  if (!picked) return { problem: `that answer names none of the choices; answer with one of: ${listing}` };
  const input = inputs.get(picked.id);
  if (!input) {
    if (text) return { problem: `${picked.label} takes no text; answer with one of: ${listing}` };
    return { answer: { choice: picked.id, text: null } };
  }
  const problem = textProblem(text ?? '', input);
  if (problem) return { problem: `${picked.label} needs its text (${problem}); answer with one of: ${listing}` };
  return { answer: { choice: picked.id, text: input.perChoice ? (text ?? '') : text || null } };
}
