// autodoc: records a plan that was already chosen in the project's canonical documentation,
// so the decision outlives the session. The model finds where the project keeps such plans and
// writes the document's new text; the workflow itself writes the file, as a managed effect
// (an idempotent one: it compares the file with the wanted text first, so a retry after a crash
// never writes twice or clobbers a later edit with the same content).
// Exits: `documented` (the file, and whether it changed) or `blocked`.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, normalize, sep } from 'node:path';

import { action, agent, compute, defineWorkflow, idempotentEffect } from '../index.js';
import { planDigest, planSections, record, sectionsText, text, texts } from './plan.mjs';

/** The most text one document write carries (the node output limit is 240 KiB). */
const MAX_DOC_CHARS = 200_000;

/** `{ task, plan, planDigest?, documents? }` (`documents`: files the person points at). */
function readInput(raw) {
  const input = record(raw ?? {}, 'autodoc input');
  if (input.plan === undefined || input.plan === null) throw new Error('autodoc input needs plan (the chosen plan to record)');
  return {
    task: text(input.task, 'autodoc input task', 8_000),
    plan: input.plan,
    planDigest: input.planDigest === undefined ? planDigest(input.plan) : text(input.planDigest, 'autodoc input planDigest', 200),
    documents: texts(input.documents, 'autodoc input documents'),
  };
}

/** A project-relative file the workflow may write: inside the project, not in `.git`. */
function projectFile(value) {
  const file = normalize(text(value, 'file', 400));
  if (isAbsolute(file) || file === '..' || file.startsWith(`..${sep}`) || file.split(sep).includes('.git')) {
    throw new Error(`file must be a path inside the project (relative to its root, not in .git), got ${JSON.stringify(value)}`);
  }
  return file;
}

function checkInspection(value) {
  const answer = record(value, 'the answer');
  const routes = ['current', 'update', 'blocked'];
  if (!routes.includes(answer.route)) throw new Error(`route must be one of ${routes.join(', ')}`);
  const reason = text(answer.reason, 'reason', 4_000);
  if (answer.route === 'blocked') return { route: 'blocked', reason };
  const file = projectFile(answer.file);
  if (answer.route === 'current') return { route: 'current', file, reason };
  if (typeof answer.content !== 'string' || answer.content.trim() === '') {
    throw new Error('content must be the complete new text of the file');
  }
  if (answer.content.length > MAX_DOC_CHARS) throw new Error(`content is ${answer.content.length} characters; at most ${MAX_DOC_CHARS}`);
  return { route: 'update', file, content: answer.content.endsWith('\n') ? answer.content : `${answer.content}\n`, reason };
}

const digestOf = (data) => `sha256:${createHash('sha256').update(data).digest('hex')}`;

function readOrNull(path) {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    if (e.code === 'ENOENT') return null;
    throw e;
  }
}

export default defineWorkflow({
  name: 'autodoc',
  title: ({ input }) => `autodoc: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'inspect',
  maxSteps: 10,
  exits: { documented: { from: 'documented' }, blocked: { from: 'blocked' } },
  nodes: {
    inspect: agent({
      statusDetail: 'finding where the plan belongs',
      prompt: ({ input }) =>
        [
          `Task: ${input.task}`,
          `The chosen plan (${input.planDigest}):`,
          sectionsText(planSections(input.plan), 3),
          input.documents.length ? `The person points at: ${input.documents.join(', ')}` : null,
          '',
          'Record this plan in the project\'s canonical documentation; do not redesign or implement it.',
          'Find where the project keeps plans and design decisions (its docs folder, an architecture or',
          'design file, a plans directory; follow the project\'s own guidance such as AGENTS.md or',
          'CONTRIBUTING). Read that file (do not edit it yourself: the workflow writes it):',
          '- route "current": it already records this plan completely; name the file.',
          '- route "update": give the file (relative to the project root) and its complete new text,',
          '  keeping everything else in it as it is. A new file is fine where the project keeps such files.',
          '- route "blocked": no suitable place exists, or the project\'s rules forbid the change; say why.',
        ]
          .filter((l) => l !== null)
          .join('\n'),
      expectedOutput: '{ "route": "current" | "update" | "blocked", "file"?: "path/relative/to/project", "content"?: "the complete new text", "reason": string }',
      validate: checkInspection,
    }),
    write: action({
      effect: idempotentEffect('doc_write'),
      run: ({ outputs, state, effect }) => {
        const { file, content } = outputs.inspect;
        const path = join(state.projectDir, file);
        const before = readOrNull(path);
        // The check that makes a retry safe: the wanted text already there is a write done
        // (on a retry, most likely by the attempt that died before its receipt was kept).
        if (before === content) return { file, digest: digestOf(content), changed: Boolean(effect?.retry), retried: Boolean(effect?.retry) };
        mkdirSync(dirname(path), { recursive: true });
        const tmp = `${path}.piw-${state.attemptId}.tmp`;
        writeFileSync(tmp, content);
        renameSync(tmp, path);
        return { file, digest: digestOf(content), changed: true, before: before === null ? null : digestOf(before) };
      },
    }),
    documented: compute({
      run: ({ input, outputs }) => ({
        status: 'documented',
        task: input.task,
        planDigest: input.planDigest,
        file: outputs.inspect.file,
        changed: outputs.inspect.route === 'update' && outputs.write.changed,
        reason: outputs.inspect.reason,
      }),
    }),
    blocked: compute({
      run: ({ input, outputs }) => ({ status: 'blocked', task: input.task, planDigest: input.planDigest, reason: outputs.inspect.reason }),
    }),
  },
  edges: [
    { from: 'inspect', switch: { on: '$.route', cases: { current: 'documented', update: 'write', blocked: 'blocked' } } },
    { from: 'write', to: 'documented' },
  ],
});
