// What the planning built-ins share: checks of the model's structured answers, the plan's
// digest, and the plan as text a person reads (the approval dialog, the documentation).
import { digest } from '../index.js';

/** An object, or an error naming `what`. */
export function record(value, what) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${what} must be a JSON object`);
  return value;
}

/** Refuses a field of `value` not in `allowed`, naming the fields it takes. */
export function exactKeys(value, allowed, what) {
  const unknown = Object.keys(value).filter((k) => !allowed.includes(k));
  if (unknown.length) {
    throw new Error(`${what} has no field ${unknown.map((k) => JSON.stringify(k)).join(', ')}; it takes ${allowed.join(', ')}`);
  }
}

/** Trimmed non-empty text of at most `max` characters. */
export function text(value, what, max = 20_000) {
  if (typeof value !== 'string' || value.trim() === '') throw new Error(`${what} must be a non-empty string`);
  const t = value.trim();
  if (t.length > max) throw new Error(`${what} is ${t.length} characters; at most ${max}`);
  return t;
}

/** Optional text: `undefined` when absent. */
export function optionalText(value, what, max) {
  return value === undefined || value === null ? undefined : text(value, what, max);
}

/** A list of texts (`min`..`max` items); absent is an empty list when `min` is 0. */
export function texts(value, what, { min = 0, max = 32, chars = 4_000 } = {}) {
  if (value === undefined && min === 0) return [];
  if (!Array.isArray(value) || value.length < min || value.length > max) {
    throw new Error(`${what} must be an array of ${min === max ? min : `${min} to ${max}`} strings`);
  }
  return value.map((v, i) => text(v, `${what}[${i}]`, chars));
}

/**
 * The plan's identity, so an approval names the exact plan it approved: `sha256:` and the
 * SHA-256 of its canonical JSON (keys in a fixed order, as `digest` writes it), which a plan
 * keeps through storage, whatever order its keys were in.
 */
export function planDigest(plan) {
  return digest(plan);
}

/**
 * A plan as the planning built-ins write it (`{ summary, steps: [{ title, detail, files? }],
 * checks?, risks? }`) checked and normalised. Anything else with a `summary` is kept as given.
 */
export function checkPlan(value) {
  const plan = record(value, 'the plan');
  const steps = plan.steps;
  if (!Array.isArray(steps) || steps.length === 0 || steps.length > 40) {
    throw new Error('the plan needs steps: an array of 1 to 40 { title, detail, files? }');
  }
  return {
    summary: text(plan.summary, 'the plan summary', 4_000),
    steps: steps.map((s, i) => {
      const step = record(s, `step ${i + 1}`);
      return {
        title: text(step.title, `step ${i + 1} title`, 200),
        detail: text(step.detail, `step ${i + 1} detail`, 8_000),
        ...(step.files === undefined ? {} : { files: texts(step.files, `step ${i + 1} files`, { max: 64, chars: 400 }) }),
      };
    }),
    checks: texts(plan.checks, 'the plan checks'),
    risks: texts(plan.risks, 'the plan risks'),
  };
}

/**
 * The plan as sections of text: `[{ title, body }]`: the summary, the numbered steps, how it
 * is checked and what could go wrong. A plan of another shape is shown as its JSON.
 */
export function planSections(plan) {
  if (!plan || typeof plan !== 'object' || !Array.isArray(plan.steps)) {
    return [{ title: 'Plan', body: typeof plan === 'string' ? plan : JSON.stringify(plan, null, 2) }];
  }
  const sections = [];
  if (plan.summary) sections.push({ title: 'Summary', body: String(plan.summary) });
  sections.push({
    title: 'Steps',
    body: plan.steps
      .map((s, i) => `${i + 1}. ${s.title}: ${s.detail}${s.files?.length ? ` (${s.files.join(', ')})` : ''}`)
      .join('\n'),
  });
  if (plan.checks?.length) sections.push({ title: 'Checks', body: plan.checks.map((c) => `- ${c}`).join('\n') });
  if (plan.risks?.length) sections.push({ title: 'Risks', body: plan.risks.map((r) => `- ${r}`).join('\n') });
  return sections;
}

/** Sections as one text (Markdown headings at `level`). */
export function sectionsText(sections, level = 2) {
  const mark = '#'.repeat(level);
  return sections.map((s) => `${mark} ${s.title}\n\n${s.body}`).join('\n\n');
}
