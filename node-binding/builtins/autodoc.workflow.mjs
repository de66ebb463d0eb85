// autodoc: records a plan that was already chosen in the canonical documentation of a
// repository (the project's, or `repository`), so the decision outlives the session. Without a
// plan in its input, the model first finds the chosen one (in the conversation and the
// project's plan documents) or ends blocked: autodoc never designs a plan. The model checks
// whether the documents already hold the plan, edits them when they do not, and then runs the
// repository's documentation checks; the workflow itself records what each file holds
// afterwards (its digest), read from the disk rather than taken from the model.
// Exits: `ready` (the documents and their digests, and the verification) or `blocked`.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { isAbsolute, join, normalize, resolve, sep } from 'node:path';

import { agent, compute, defineWorkflow } from '../index.js';
import { exactKeys, planDigest, planSections, record, sectionsText, text, texts } from './plan.mjs';

/** The edit step's deadline (a large document takes a while), and the checks'. */
export const UPDATE_TIMEOUT_MS = 30 * 60_000;
export const VERIFY_TIMEOUT_MS = 20 * 60_000;
const INPUT_KEYS = ['task', 'plan', 'planDigest', 'repository', 'documents', 'evidence'];

/** `{ task, plan?, planDigest?, repository?, documents?, evidence? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'autodoc input');
  exactKeys(input, INPUT_KEYS, 'autodoc input');
  return {
    task: text(input.task, 'autodoc input task', 8_000),
    ...(input.plan === undefined || input.plan === null ? {} : { plan: input.plan }),
    ...(input.planDigest === undefined ? {} : { planDigest: text(input.planDigest, 'autodoc input planDigest', 200) }),
    ...(input.repository === undefined ? {} : { repository: text(input.repository, 'autodoc input repository', 4_000) }),
    documents: texts(input.documents, 'autodoc input documents', { max: 64, chars: 4_000 }),
    ...(input.evidence === undefined ? {} : { evidence: input.evidence }),
  };
}

/** The repository whose documents hold the plan: `repository` (relative to the project), else the project. */
function repositoryDir(input, projectDir) {
  const dir = input.repository === undefined ? projectDir : resolve(projectDir, input.repository);
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {}
  if (!isDir) {
    throw new Error(`autodoc repository ${JSON.stringify(input.repository ?? dir)} is not a directory: give the path of the repository whose documentation records the plan (absolute, or relative to the project)`);
  }
  return dir;
}

/** A repository-relative document path: inside the repository, not in `.git`. */
function documentPath(value, what) {
  const file = normalize(text(value, what, 400));
  if (isAbsolute(file) || file === '..' || file.startsWith(`..${sep}`) || file.split(sep).includes('.git')) {
    throw new Error(`${what} must be a path inside the repository (relative to its root, not in .git), got ${JSON.stringify(value)}`);
  }
  return file;
}

function documentList(value, what, { min = 1 } = {}) {
  const files = texts(value, what, { min, max: 64, chars: 400 }).map((f, i) => documentPath(f, `${what}[${i}]`));
  return [...new Set(files)];
}

/** What each file holds now: `sha256:<hex>` of its bytes, or null when it does not exist. */
function digestsOf(repo, files) {
  return Object.fromEntries(
    files.map((f) => {
      const path = join(repo, f);
      return [f, existsSync(path) ? `sha256:${createHash('sha256').update(readFileSync(path)).digest('hex')}` : null];
    }),
  );
}

/** The plan being documented: the input's, or the one the model found. */
const planOf = (input, outputs) => (input.plan !== undefined ? input.plan : outputs.locate.plan);
const digestOf = (input, outputs) => input.planDigest ?? planDigest(planOf(input, outputs));

function checkLocated(value) {
  const answer = record(value, 'the answer');
  if (answer.route !== 'found' && answer.route !== 'blocked') throw new Error('route must be "found" or "blocked"');
  const reason = text(answer.reason, 'reason', 4_000);
  if (answer.route === 'blocked') return { route: 'blocked', reason, evidence: answer.evidence ?? null };
  if (answer.plan === undefined || answer.plan === null || answer.plan === '') throw new Error('plan must be the chosen plan, as it was chosen (required when found)');
  return { route: 'found', plan: answer.plan, sources: texts(answer.sources, 'sources', { min: 1 }), reason, evidence: answer.evidence ?? null };
}

function checkInspection(value, { outputs }) {
  const answer = record(value, 'the answer');
  const routes = ['current', 'update', 'blocked'];
  if (!routes.includes(answer.route)) throw new Error(`route must be one of ${routes.join(', ')}`);
  const reason = text(answer.reason, 'reason', 4_000);
  const evidence = answer.evidence ?? null;
  if (answer.route === 'blocked') return { route: 'blocked', reason, evidence };
  const files = documentList(answer.files, 'files');
  const digests = digestsOf(outputs.prepare.repository, files);
  if (answer.route === 'current') {
    const missing = files.filter((f) => digests[f] === null);
    if (missing.length) throw new Error(`route "current" needs documents that exist; not found in the repository: ${missing.join(', ')}`);
  }
  return { route: answer.route, files, digests, reason, evidence };
}

function checkUpdate(value, { outputs }) {
  const answer = record(value, 'the answer');
  const repo = outputs.prepare.repository;
  const files = documentList(answer.files, 'files');
  const now = digestsOf(repo, files);
  const missing = files.filter((f) => now[f] === null);
  if (missing.length) throw new Error(`these files are not in the repository: ${missing.join(', ')}; edit or create them first, then submit again`);
  // A file the check did not name counts as changed: what it held before is not known.
  const before = outputs.inspect.digests;
  if (files.every((f) => Object.hasOwn(before, f) && before[f] === now[f])) {
    throw new Error(`none of ${files.join(', ')} changed since the check: edit the documents so they record the plan, then submit the files you changed`);
  }
  return { files, summary: text(answer.summary, 'summary', 4_000) };
}

function checkVerification(value, { outputs }) {
  const answer = record(value, 'the answer');
  if (typeof answer.passed !== 'boolean') throw new Error('passed must be true or false');
  const commands = Array.isArray(answer.commands) ? answer.commands.map((c, i) => record(c, `commands[${i}]`)) : null;
  if (!commands) throw new Error('commands must list the checks you ran: [{ "command": string, "outcome": string }] (empty when the repository has none)');
  const failures = texts(answer.failures, 'failures');
  if (!answer.passed && failures.length === 0) throw new Error('a verification that did not pass names its failures');
  return {
    passed: answer.passed,
    commands: commands.map((c, i) => ({ command: text(c.command, `commands[${i}].command`, 2_000), outcome: text(c.outcome, `commands[${i}].outcome`, 4_000) })),
    failures,
    // What the documents hold once verified (the checks may have fixed their form).
    digests: digestsOf(outputs.prepare.repository, outputs.update.files),
  };
}

const where = (outputs, input) =>
  input.repository === undefined ? 'the project' : `the repository at ${outputs.prepare.repository}`;

export default defineWorkflow({
  name: 'autodoc',
  title: ({ input }) => `autodoc: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'prepare',
  maxSteps: 24,
  exits: { ready: { from: 'ready' }, blocked: { from: 'blocked' } },
  nodes: {
    prepare: compute({
      run: ({ input, state }) => ({ route: input.plan === undefined ? 'locate' : 'inspect', repository: repositoryDir(input, state.projectDir) }),
    }),
    locate: agent({
      statusDetail: 'finding the chosen plan',
      prompt: ({ input, outputs }) =>
        [
          `Task: ${input.task}`,
          `Repository: ${outputs.prepare.repository}`,
          input.documents.length ? `Documents to look at: ${input.documents.join(', ')}` : null,
          input.evidence === undefined ? null : `Evidence: ${JSON.stringify(input.evidence)}`,
          '',
          'Find the plan that was already chosen for this task: in this conversation, and in the documents',
          "named above or where the repository keeps its plans. Only find it: do not design, improve or",
          'replace it, and change nothing. Answer "found" with the plan as it was chosen and where you found',
          'it (sources), or "blocked" when there is no single clear chosen plan (none, or several competing).',
        ]
          .filter((l) => l !== null)
          .join('\n'),
      expectedOutput: '{ "route": "found" | "blocked", "plan"?: the chosen plan, "sources"?: [string], "reason": string, "evidence"?: any }',
      validate: checkLocated,
    }),
    inspect: agent({
      statusDetail: 'checking the documentation',
      prompt: ({ input, outputs }) =>
        [
          `Task: ${input.task}`,
          `The chosen plan (${digestOf(input, outputs)}):`,
          sectionsText(planSections(planOf(input, outputs)), 3),
          `Repository: ${outputs.prepare.repository}`,
          input.documents.length ? `Documents the person points at: ${input.documents.join(', ')}` : null,
          input.evidence === undefined ? null : `Evidence: ${JSON.stringify(input.evidence)}`,
          '',
          `Check whether the canonical documentation of ${where(outputs, input)} already records this plan`,
          'completely and accurately. Find where it keeps plans and design decisions (its docs or plans',
          'folder, an architecture or design file; follow its own guidance such as AGENTS.md or',
          'CONTRIBUTING). Read, but do not change anything in this step:',
          '- route "current": the documents already hold the whole plan and its limits; name them (files).',
          '- route "update": they are missing or out of date and can be put right; name the files to write',
          '  (relative to the repository root; a new file where the repository keeps such files is fine).',
          '- route "blocked": no safe place exists, or the repository\'s rules forbid the change; say why.',
        ]
          .filter((l) => l !== null)
          .join('\n'),
      expectedOutput: '{ "route": "current" | "update" | "blocked", "files"?: ["path/relative/to/repository"], "reason": string, "evidence"?: any }',
      validate: checkInspection,
    }),
    update: agent({
      statusDetail: 'writing the documentation',
      timeoutMs: UPDATE_TIMEOUT_MS,
      prompt: ({ input, outputs }) =>
        [
          `Task: ${input.task}`,
          `The chosen plan (${digestOf(input, outputs)}):`,
          sectionsText(planSections(planOf(input, outputs)), 3),
          `Repository: ${outputs.prepare.repository}`,
          `Documents to write: ${outputs.inspect.files.join(', ')} (${outputs.inspect.reason})`,
          '',
          'Edit these documents now so they record the plan exactly: what it is for (in the words of the',
          'request), its scope and what it leaves out, the steps, how it will be checked. Follow the',
          "repository's documentation conventions (file names, headings, plain language) and keep one",
          'source of truth: update an existing document rather than starting a competing one. Do not',
          'redesign the plan and do not change code. Put no secrets or machine-specific paths in them.',
          'Then submit the files you changed (relative to the repository root) and a one-line summary.',
        ].join('\n'),
      expectedOutput: '{ "files": ["path/relative/to/repository"], "summary": string }',
      validate: checkUpdate,
    }),
    verify: agent({
      statusDetail: 'verifying the documentation',
      timeoutMs: VERIFY_TIMEOUT_MS,
      prompt: ({ outputs }) =>
        [
          `Repository: ${outputs.prepare.repository}`,
          `Documents written: ${outputs.update.files.join(', ')} (${outputs.update.summary})`,
          '',
          "Run the repository's own checks that apply to these documents (its documentation, format and",
          'link checks; a SimpleDoc check where the repository follows SimpleDoc) and read them once more for',
          'secrets or private paths. You may fix the form of these documents where a check asks for it;',
          'change nothing else. Report each command you ran and what it said; passed is false when a',
          'problem remains, with the failures.',
        ].join('\n'),
      expectedOutput: '{ "passed": boolean, "commands": [{ "command": string, "outcome": string }], "failures": [string] }',
      validate: checkVerification,
    }),
    ready: compute({
      run: ({ input, outputs }) => {
        const updated = outputs.inspect.route === 'update';
        const files = updated ? outputs.update.files : outputs.inspect.files;
        return {
          status: 'ready',
          task: input.task,
          plan: planOf(input, outputs),
          planDigest: digestOf(input, outputs),
          documentation: {
            state: updated ? 'updated' : 'current',
            files,
            digests: updated ? outputs.verify.digests : outputs.inspect.digests,
            evidence: updated ? { summary: outputs.update.summary, verification: outputs.verify } : outputs.inspect.evidence,
          },
          verification: updated ? outputs.verify : { passed: true, reason: 'the documentation already recorded the plan' },
          file: files[0],
          changed: updated,
          reason: outputs.inspect.reason,
        };
      },
    }),
    blocked: compute({
      run: ({ input, outputs, results }) => {
        const why =
          results.verify?.outcome === 'ok' && outputs.verify?.passed === false
            ? { stage: 'verify', reason: `the documentation checks failed: ${outputs.verify.failures.join('; ')}`, evidence: outputs.verify }
            : outputs.inspect?.route === 'blocked'
              ? { stage: 'inspect', reason: outputs.inspect.reason, evidence: outputs.inspect.evidence }
              : { stage: 'locate', reason: outputs.locate.reason, evidence: outputs.locate.evidence };
        return {
          status: 'blocked',
          task: input.task,
          ...why,
          ...(input.plan !== undefined || outputs.locate?.route === 'found' ? { planDigest: digestOf(input, outputs) } : {}),
        };
      },
    }),
  },
  edges: [
    { from: 'prepare', switch: { on: '$.route', cases: { locate: 'locate', inspect: 'inspect' } } },
    { from: 'locate', switch: { on: '$.route', cases: { found: 'inspect', blocked: 'blocked' } } },
    { from: 'inspect', switch: { on: '$.route', cases: { current: 'ready', update: 'update', blocked: 'blocked' } } },
    { from: 'update', to: 'verify' },
    { from: 'verify', switch: { on: '$.passed', cases: { true: 'ready', false: 'blocked' } } },
  ],
});
