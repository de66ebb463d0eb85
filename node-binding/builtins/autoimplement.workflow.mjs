// autoimplement: carries out a plan that was already chosen. Given only the task, the model
// first finds that plan where the project keeps its plans (the input's `documents`, else its
// docs); none found ends the run `blocked` before anything changes. The model implements it; the
// workflow runs the project's own checks (a bounded command batch, one progress track in the
// widget) and sends failures back for another round; the model then reviews the change, and
// P0-P2 findings go back for another round until a review finds none (each finding keeps its
// id across rounds, so a later review must say what became of it); then the change is
// delivered (`./autoimplement/delivery.mjs`): committed in each repository it spans, pushed to
// a branch of its own, one pull request each (opened once), its review comments sent back and
// answered, its CI followed (a failure is another round), merged when asked at the head that
// was checked, and reported on once. Every loop is bounded. A model that says it is blocked
// is challenged once before the run ends `blocked`; a step that runs out of time is tried
// again a bounded number of times.
// Exits: `completed` (what was done, checked, reviewed, committed, what CI said, the delivery) or
// `blocked` (the stage, why, and the evidence).
import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { isAbsolute, join, normalize, sep } from 'node:path';

import { action, agent, compute, defineWorkflow, idempotentEffect, runCommandBatch } from '../index.js';
import {
  checkDeliveryAnswer,
  deliveryEdges,
  deliveryNodes,
  deliveryPromptLines,
  deliveryResult,
  deliveryRoutes,
  deliveryWork,
  readDeliveryInput,
  workDir,
} from './autoimplement/delivery.mjs';
import { checkPlan, optionalText, planDigest, planSections, record, sectionsText, text, texts } from './plan.mjs';

/** Rounds of implementation after the first (failing checks, review findings, failing CI). */
const DEFAULT_MAX_ROUNDS = 4;
/** Reviews of one change before open findings end the run. */
const DEFAULT_MAX_REVIEWS = 3;
/** Retries of a step that ran out of time, over the whole run. */
const MAX_TIMEOUT_RETRIES = 2;
/** A claim of being blocked is challenged this many times; the next one ends the run. */
const MAX_CHALLENGES = 1;
const DEFAULT_CHECK_TIMEOUT_MS = 15 * 60_000;
const DEFAULT_CI_TIMEOUT_MS = 30 * 60_000;
/** What a receipt keeps of a command's output: its end, where test runners put the verdict. */
const OUTPUT_TAIL_CHARS = 4_000;
const CHECK_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;
const SEVERITIES = ['P0', 'P1', 'P2', 'P3'];
const BLOCKING = new Set(['P0', 'P1', 'P2']);

/** A path inside the project: relative, never out of it through `..`. */
function projectPath(value, what) {
  const p = normalize(text(value, what, 400));
  if (isAbsolute(p) || p === '..' || p.startsWith(`..${sep}`)) throw new Error(`${what} must be a path inside the project, got ${JSON.stringify(value)}`);
  return p;
}

/** `[{ id, command, args?, cwd?, timeoutMs? }]`: the project's own checks. */
function checkList(value, what) {
  if (!Array.isArray(value) || value.length < 1 || value.length > 16) throw new Error(`${what} must be an array of 1 to 16 commands`);
  const seen = new Set();
  return value.map((c, i) => {
    const check = record(c, `${what}[${i}]`);
    const id = text(check.id, `${what}[${i}].id`, 64);
    if (!CHECK_ID.test(id) || seen.has(id)) throw new Error(`${what}[${i}].id ${JSON.stringify(id)} must be unique and match ${CHECK_ID.source}`);
    seen.add(id);
    const timeoutMs = check.timeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
    if (!(Number.isSafeInteger(timeoutMs) && timeoutMs > 0 && timeoutMs <= 60 * 60_000)) throw new Error(`${what}[${i}].timeoutMs must be 1 to 3600000`);
    return {
      id,
      command: text(check.command, `${what}[${i}].command`, 400),
      args: texts(check.args, `${what}[${i}].args`, { max: 64, chars: 4_000 }),
      cwd: check.cwd === undefined ? '.' : projectPath(check.cwd, `${what}[${i}].cwd`),
      timeoutMs,
    };
  });
}

/** An integer input from `min` to `max`, `fallback` when absent. */
function bounded(value, fallback, what, min, max) {
  const n = value ?? fallback;
  if (!(Number.isSafeInteger(n) && n >= min && n <= max)) throw new Error(`autoimplement ${what} must be an integer from ${min} to ${max}`);
  return n;
}

/**
 * `{ task, plan?, planDigest?, documents?, checks?, maxRounds?, maxReviews?, concurrency?,
 * commit?, push?, ciTimeoutMs?, repository?, baseBranch?, merge? }`: without `plan`, the task
 * names the work whose plan the model finds (in `documents` when given).
 */
function readInput(raw) {
  const input = record(raw ?? {}, 'autoimplement input');
  const given = input.plan !== undefined && input.plan !== null;
  if (!given && (typeof input.task !== 'string' || input.task.trim() === '')) {
    throw new Error('autoimplement input needs task (the work whose chosen plan it finds and carries out), or plan (the plan to carry out)');
  }
  const ciTimeoutMs = input.ciTimeoutMs ?? DEFAULT_CI_TIMEOUT_MS;
  if (!(Number.isSafeInteger(ciTimeoutMs) && ciTimeoutMs > 0 && ciTimeoutMs <= 60 * 60_000)) throw new Error('autoimplement ciTimeoutMs must be 1 to 3600000');
  return {
    task: text(input.task ?? input.plan?.summary, 'autoimplement input task', 8_000),
    ...(given
      ? { plan: input.plan, planDigest: input.planDigest === undefined ? planDigest(input.plan) : text(input.planDigest, 'autoimplement input planDigest', 200) }
      : {}),
    documents: texts(input.documents, 'autoimplement input documents', { chars: 400 }),
    ...(input.checks === undefined ? {} : { checks: checkList(input.checks, 'autoimplement input checks') }),
    maxRounds: bounded(input.maxRounds, DEFAULT_MAX_ROUNDS, 'maxRounds', 0, 20),
    maxReviews: bounded(input.maxReviews, DEFAULT_MAX_REVIEWS, 'maxReviews', 1, 10),
    concurrency: bounded(input.concurrency, 1, 'concurrency', 1, 8),
    commit: input.commit !== false,
    push: input.push !== false,
    ciTimeoutMs,
    scope: optionalText(input.scope, 'autoimplement input scope', 4_000),
    ...readDeliveryInput(input),
  };
}

/**
 * The plan the model found: `found` with the plan (a planning built-in's shape, or its text)
 * and the project files it came from, each there; or `none` with the reason.
 */
function checkFoundPlan(value, { state }) {
  const answer = record(value, 'the answer');
  if (answer.route !== 'found' && answer.route !== 'none') throw new Error('route must be "found" or "none"');
  const reason = text(answer.reason, 'reason', 4_000);
  if (answer.route === 'none') return { route: 'none', reason };
  const documents = texts(answer.documents, 'documents (the files the plan is written in)', { min: 1, max: 16, chars: 400 }).map((d, i) => {
    const file = projectPath(d, `documents[${i}]`);
    let isFile = false;
    try {
      isFile = statSync(join(state.projectDir, file)).isFile();
    } catch {
      // absent: said below
    }
    if (!isFile) throw new Error(`documents[${i}] ${JSON.stringify(file)} is no file in the project: name the files the plan is written in`);
    return file;
  });
  let plan;
  if (typeof answer.plan === 'string') plan = text(answer.plan, 'plan', 40_000);
  else if (answer.plan !== null && typeof answer.plan === 'object' && !Array.isArray(answer.plan)) plan = checkPlan(answer.plan);
  else throw new Error('plan must be { summary, steps: [{ title, detail, files? }], checks?, risks? } or the plan\'s text as written');
  return { route: 'found', plan, planDigest: planDigest(plan), documents, reason };
}

/** The plan being carried out: the input's, or the one the model found. */
const planOf = ({ input, outputs }) => (input.plan !== undefined ? input.plan : outputs.findPlan.plan);
const digestOf = ({ input, outputs }) => input.planDigest ?? outputs.findPlan.planDigest;
/** Where the plan came from, as the result says it. */
const sourceOf = ({ input, outputs }) =>
  input.plan !== undefined ? { from: 'input' } : { from: 'found', documents: outputs.findPlan.documents, reason: outputs.findPlan.reason };

function checkImplementation(value, ctx) {
  const { state } = ctx;
  const answer = record(value, 'the answer');
  if (answer.status !== 'done' && answer.status !== 'blocked') throw new Error('status must be "done" or "blocked"');
  const summary = text(answer.summary, 'summary', 4_000);
  if (answer.status === 'blocked') return { status: 'blocked', summary, blocker: text(answer.blocker, 'blocker (what stops the work now)', 4_000), round: state.visit };
  return { status: 'done', summary, files: texts(answer.files, 'files', { max: 200, chars: 400 }), round: state.visit, ...checkDeliveryAnswer(answer, ctx) };
}

function checkChallenge(value) {
  const answer = record(value, 'the answer');
  if (answer.route !== 'continue' && answer.route !== 'blocked') throw new Error('route must be "continue" or "blocked"');
  const reason = text(answer.reason, 'reason', 2_000);
  const tried = texts(answer.tried, 'tried (what you checked before concluding)', { max: 8, chars: 500 });
  if (answer.route === 'continue') return { route: 'continue', reason, tried, nextAction: text(answer.nextAction, 'nextAction (what you will do now)', 2_000) };
  if (tried.length === 0) throw new Error('a confirmed blocker needs tried: the ways around it you checked');
  return { route: 'blocked', reason, tried };
}

/** The findings a review left open that block: P0 to P2. */
const openFindings = (review) => (review?.findings ?? []).filter((f) => BLOCKING.has(f.severity));

/**
 * A review: every finding with an id, a severity, what and where; each blocking finding the
 * last review left open is either still listed (same id) or named in `resolved`.
 */
function checkReview(value, { outputs, state }) {
  const answer = record(value, 'the review');
  if (!Array.isArray(answer.findings) || answer.findings.length > 50) throw new Error('findings must be an array of at most 50 findings (empty when there are none)');
  const seen = new Set();
  const findings = answer.findings.map((f, i) => {
    const finding = record(f, `findings[${i}]`);
    const id = text(finding.id, `findings[${i}].id`, 40);
    if (seen.has(id)) throw new Error(`finding id ${JSON.stringify(id)} is used twice`);
    seen.add(id);
    if (!SEVERITIES.includes(finding.severity)) throw new Error(`findings[${i}].severity must be one of ${SEVERITIES.join(', ')}`);
    return {
      id,
      severity: finding.severity,
      title: text(finding.title, `findings[${i}].title`, 200),
      detail: text(finding.detail, `findings[${i}].detail`, 4_000),
      ...(finding.file === undefined ? {} : { file: text(finding.file, `findings[${i}].file`, 400) }),
    };
  });
  const resolved = texts(answer.resolved, 'resolved', { max: 50, chars: 40 });
  const unaccounted = openFindings(outputs.review).filter((f) => !seen.has(f.id) && !resolved.includes(f.id));
  if (unaccounted.length) {
    throw new Error(`say what became of the open findings ${unaccounted.map((f) => f.id).join(', ')}: list each again (still open) or name it in resolved`);
  }
  return { round: state.visit, findings, resolved, blocking: findings.filter((f) => BLOCKING.has(f.severity)).length };
}

function checkChecks(value) {
  return { checks: checkList(record(value, 'the answer').checks, 'checks') };
}

const checksOf = ({ input, outputs }) => input.checks ?? outputs.chooseChecks.checks;
/** The most of the diff a review request carries (requests are at most 240 KiB). */
const MAX_DIFF_BYTES = 100_000;

/** `git <args>` in `cwd`: its output, or an error with the command and git's own words. */
function git(cwd, args) {
  try {
    return execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 });
  } catch (e) {
    const why = String(e.stderr || e.message).trim().slice(0, 1_000);
    throw new Error(`git ${args.join(' ')} failed in ${cwd} (autoimplement works in a git repository): ${why}`);
  }
}

/** At most `max` bytes of `s` (cut at a character), saying so when cut. */
function clip(s, max) {
  const bytes = Buffer.from(s, 'utf8');
  if (bytes.length <= max) return s;
  return `${bytes.subarray(0, max).toString('utf8').replace(/\uFFFD$/, '')}\n… (cut at ${max} bytes of ${bytes.length}: read the rest with git diff HEAD)`;
}
const tail = (s) => (s.length > OUTPUT_TAIL_CHARS ? `…${s.slice(-OUTPUT_TAIL_CHARS)}` : s);

/** Publishes one progress track's state; a run stopped meanwhile is not an error. */
async function progress(ctx, key, label, completed, total, status) {
  if (ctx.signal.aborted) return;
  await ctx.publishUpdate({
    type: 'progress',
    key,
    data: { schema: 'pi-workflows.progress.v1', status, label, completed, total, unit: key === 'ci' ? 'steps' : 'checks' },
  });
}

/** Runs a batch and keeps one progress track of it current, item by item. */
async function batch(ctx, key, label, items, maxConcurrency) {
  await progress(ctx, key, label, 0, items.length, 'running');
  const result = await runCommandBatch(
    { items, maxConcurrency: Math.min(maxConcurrency, items.length) },
    { signal: ctx.signal, onItemSettled: (_item, completed, total) => progress(ctx, key, label, completed, total, completed === total ? 'completed' : 'running') },
  );
  return result.items.map((r) => ({
    id: r.id,
    outcome: r.outcome,
    exitCode: r.exitCode,
    durationMs: r.durationMs,
    stdout: tail(r.stdout),
    stderr: tail(r.stderr),
    ...(r.error ? { error: r.error } : {}),
  }));
}

/** What the model is told about the work still open: failing checks, findings, CI, its own next step. */
function openWork(ctx) {
  const { outputs, results } = ctx;
  const lines = [];
  if (outputs.verify && !outputs.verify.passed) {
    lines.push('These checks fail:');
    for (const item of outputs.verify.items.filter((i) => i.outcome !== 'succeeded')) {
      lines.push(`- ${item.id} (${item.outcome}, exit ${item.exitCode}):\n${[item.stderr, item.stdout].filter(Boolean).join('\n').slice(-2_000)}`);
    }
  }
  const findings = openFindings(outputs.review);
  if (findings.length) {
    lines.push('The review found (address every one; the next review checks each by its id):');
    for (const f of findings) lines.push(`- ${f.id} [${f.severity}] ${f.title}: ${f.detail}${f.file ? ` (${f.file})` : ''}`);
  }
  lines.push(...deliveryWork(ctx));
  if (outputs.challenge?.route === 'continue') lines.push(`You decided to go on despite a blocker: ${outputs.challenge.nextAction}`);
  if (results.implement?.outcome === 'timed_out') lines.push('Your last attempt ran out of time: carry on from what is already in the working tree.');
  return lines;
}

export default defineWorkflow({
  name: 'autoimplement',
  title: ({ input }) => `autoimplement: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'start',
  maxSteps: 300,
  exits: { completed: { from: 'finalize' }, blocked: { from: 'blocked' } },
  nodes: {
    start: compute({ run: ({ input }) => ({ route: input.plan !== undefined ? 'given' : 'find' }) }),
    findPlan: agent({
      statusDetail: 'finding the chosen plan',
      timeoutMs: 30 * 60_000,
      prompt: ({ input }) =>
        [
          `Task: ${input.task}`,
          '',
          'A plan for this task was already chosen and written down; find it. Do not devise, improve or',
          'implement a plan, and change nothing.',
          input.documents.length
            ? `Look in the documents the person points at: ${input.documents.join(', ')}.`
            : 'Look where the project keeps its plans and design decisions (its docs folder, a plans directory,\nan architecture or design file; follow the project\'s own guidance such as AGENTS.md or CONTRIBUTING).',
          '- route "found": the plan (as { summary, steps: [{ title, detail, files? }], checks?, risks? },',
          '  or its text as written), the files it is written in (relative to the project root) and why it is this task\'s plan.',
          '- route "none": no plan for this task is written down, or none clearly is the chosen one; say why.',
        ].join('\n'),
      expectedOutput:
        '{ "route": "found" | "none", "plan"?: { "summary": string, "steps": [{ "title": string, "detail": string, "files"?: [string] }], "checks"?: [string], "risks"?: [string] } | string, "documents"?: [string], "reason": string }',
      validate: checkFoundPlan,
    }),
    afterFind: compute({ run: ({ outputs }) => ({ route: outputs.findPlan.route }) }),
    implement: agent({
      statusDetail: 'implementing the plan',
      timeoutMs: 2 * 60 * 60_000,
      prompt: (ctx) => {
        const { input, state } = ctx;
        const open = openWork(ctx);
        return [
          `Task: ${input.task}`,
          `The plan to carry out (${digestOf(ctx)}):`,
          sectionsText(planSections(planOf(ctx)), 3),
          input.scope ? `Scope: ${input.scope}` : null,
          ...deliveryPromptLines(ctx),
          '',
          state.visit === 1 && open.length === 0
            ? 'Implement this plan in the working tree: make the changes its steps describe, keep to its scope, and add or update tests where the plan says.'
            : `Round ${state.visit}: the work is not done yet.\n${open.join('\n')}`,
          'Do not commit or push: the workflow runs the project\'s checks, has the change reviewed and commits it.',
          'Answer status "done" with a summary (its first line becomes the commit subject) and the files you changed;',
          'or status "blocked" with the blocker, only when something outside your reach stops the work now.',
        ]
          .filter((l) => l !== null)
          .join('\n');
      },
      expectedOutput:
        '{ "status": "done" | "blocked", "summary": string, "files"?: [string], "repositories"?: [string], "replies"?: [{ "id": string, "reply": string }], "blocker"?: string }',
      validate: checkImplementation,
    }),
    afterImplement: compute({
      run: ({ input, outputs }) => ({
        route: outputs.implement.status === 'blocked' ? 'blocked' : input.checks || outputs.chooseChecks ? 'verify' : 'choose',
      }),
    }),
    chooseChecks: agent({
      statusDetail: 'finding the project\'s checks',
      prompt: ({ input }) =>
        [
          `Task: ${input.task}`,
          '',
          'Name the project\'s own checks that prove this change works: its tests, linters and type checks,',
          'as the project runs them (its package.json scripts, Makefile, CI configuration, contributing guide).',
          'Give each as a command and its arguments (no shell), with the folder it runs in relative to the',
          'project root. The workflow runs them after every round of implementation.',
        ].join('\n'),
      expectedOutput: '{ "checks": [{ "id": "test", "command": "npm", "args": ["test"], "cwd"?: ".", "timeoutMs"?: 900000 }] }',
      validate: checkChecks,
    }),
    // Running the checks again changes nothing the run relies on: safe to repeat after a crash.
    verify: action({
      effect: idempotentEffect('run_checks'),
      timeoutMs: (ctx) => checksOf(ctx).reduce((sum, c) => sum + c.timeoutMs, 0) + 60_000,
      run: async (ctx) => {
        const items = checksOf(ctx).map((c) => ({
          id: c.id,
          command: c.command,
          args: c.args,
          cwd: join(workDir(ctx), c.cwd),
          timeoutMs: c.timeoutMs,
          maxOutputChars: 200_000,
        }));
        const ran = await batch(ctx, 'checks', 'project checks', items, ctx.input.concurrency);
        return { passed: ran.every((i) => i.outcome === 'succeeded'), items: ran };
      },
    }),
    afterVerify: compute({ run: ({ outputs }) => ({ route: outputs.verify.passed ? 'review' : 'rework' }) }),
    // Counts the rounds of rework asked for: one more than allowed ends the run.
    rework: compute({
      run: ({ input, state }) => ({ reworks: state.visit, route: state.visit > input.maxRounds ? 'exhausted' : 'again' }),
    }),
    // The change as the reviewer sees it: reading the working tree is no side effect.
    change: compute({
      run: (ctx) => {
        const dir = workDir(ctx);
        return {
          stat: git(dir, ['diff', 'HEAD', '--stat']).trim(),
          diff: clip(git(dir, ['diff', 'HEAD']), MAX_DIFF_BYTES),
          added: git(dir, ['ls-files', '--others', '--exclude-standard']).split('\n').filter(Boolean).slice(0, 200),
        };
      },
    }),
    review: agent({
      statusDetail: 'reviewing the change',
      timeoutMs: 60 * 60_000,
      prompt: (ctx) => {
        const { input, outputs, state } = ctx;
        const open = openFindings(outputs.review);
        return [
          `Task: ${input.task}`,
          `The plan (${digestOf(ctx)}):`,
          sectionsText(planSections(planOf(ctx)), 3),
          '',
          `Review ${state.visit} of the change in the working tree (uncommitted; the project's checks pass):`,
          outputs.change.stat || '(no tracked file changed)',
          outputs.change.added.length ? `New files (read them): ${outputs.change.added.join(', ')}` : null,
          '```diff',
          outputs.change.diff,
          '```',
          '',
          'Review it as a strict senior engineer: does it do what the plan says, is it correct, safe, tested,',
          'and does it fit the project? Report each problem as a finding with a short unique id, a severity',
          '(P0 broken or unsafe, P1 wrong or missing behaviour, P2 should be fixed before merging, P3 a nit),',
          'a title, the detail and the file. Do not change anything; the findings go back to the implementation.',
          open.length
            ? `The last review left these open; list each again with the same id if it still holds, or name it in "resolved":\n${open
                .map((f) => `- ${f.id} [${f.severity}] ${f.title}: ${f.detail}`)
                .join('\n')}`
            : null,
        ]
          .filter((l) => l !== null)
          .join('\n');
      },
      expectedOutput: '{ "findings": [{ "id": string, "severity": "P0" | "P1" | "P2" | "P3", "title": string, "detail": string, "file"?: string }], "resolved"?: [string] }',
      validate: checkReview,
    }),
    // Counts the reviews that found blocking problems: one more than allowed ends the run.
    triage: compute({
      run: ({ input, outputs, state }) => {
        if (outputs.review.blocking === 0) return { route: 'clean' };
        return { route: state.visit >= input.maxReviews ? 'exhausted' : 'rework', reviews: state.visit };
      },
    }),
    ...deliveryNodes({ planOf, digestOf }),
    ...deliveryRoutes,
    // Counts a claimed blocker: the first is challenged, the next ends the run.
    challengeGate: compute({ run: ({ state }) => ({ route: state.visit > MAX_CHALLENGES ? 'blocked' : 'challenge' }) }),
    challenge: agent({
      statusDetail: 'challenging a blocker',
      prompt: ({ input, outputs }) =>
        [
          `Task: ${input.task}`,
          `You said the work is blocked: ${outputs.implement.blocker}`,
          '',
          'Before the run stops, look at that claim once more. It is blocked only if the problem stops the',
          'work now, is outside what you may change or decide, and no practical way around it exists',
          '(a different approach within the plan, a reasonable default, a smaller first step).',
          'Answer route "continue" with the next action you will take, or route "blocked" with what you tried.',
        ].join('\n'),
      expectedOutput: '{ "route": "continue" | "blocked", "reason": string, "tried": [string], "nextAction"?: string }',
      validate: checkChallenge,
    }),
    afterChallenge: compute({ run: ({ outputs }) => ({ route: outputs.challenge.route }) }),
    // Counts the steps that ran out of time; the one that did is tried again while some are left.
    timedOut: compute({
      run: ({ results, state }) => {
        const node = ['findPlan', 'implement', 'chooseChecks', 'review', 'challenge', 'verify', 'watchCi'].find((n) => results[n]?.outcome === 'timed_out');
        return { node, timeouts: state.visit, route: state.visit > MAX_TIMEOUT_RETRIES ? 'blocked' : node };
      },
    }),
    blocked: compute({
      run: (ctx) => {
        const { input, outputs, results } = ctx;
        if (outputs.findPlan?.route === 'none') return { status: 'blocked', task: input.task, stage: 'plan', reason: outputs.findPlan.reason, evidence: null };
        const found = input.plan !== undefined || outputs.findPlan?.route === 'found';
        const base = { status: 'blocked', task: input.task, ...(found ? { planDigest: digestOf(ctx), planSource: sourceOf(ctx) } : {}) };
        if (outputs.timedOut?.route === 'blocked') {
          return { ...base, stage: 'timeout', reason: `${outputs.timedOut.node} ran out of time ${MAX_TIMEOUT_RETRIES + 1} times`, evidence: results[outputs.timedOut.node]?.error ?? null };
        }
        if (outputs.implement?.status === 'blocked') {
          return { ...base, stage: 'implement', reason: outputs.implement.blocker, evidence: outputs.challenge ?? null };
        }
        if (outputs.rework?.route === 'exhausted') {
          const failing = outputs.verify && !outputs.verify.passed ? outputs.verify.items.filter((i) => i.outcome !== 'succeeded').map((i) => i.id) : [];
          return { ...base, stage: 'rework', reason: `still not done after ${input.maxRounds} rounds of rework`, evidence: { failingChecks: failing, ci: outputs.watchCi ?? null } };
        }
        if (outputs.triage?.route === 'exhausted') {
          return { ...base, stage: 'review', reason: `${outputs.review.blocking} P0-P2 findings still open after ${input.maxReviews} reviews`, evidence: openFindings(outputs.review) };
        }
        return { ...base, ...outputs.deliveryStop, commit: outputs.commit };
      },
    }),
    finalize: compute({
      run: (ctx) => {
        const { input, outputs } = ctx;
        return {
          status: 'completed',
          task: input.task,
          planDigest: digestOf(ctx),
          planSource: sourceOf(ctx),
          summary: outputs.implement.summary,
          files: outputs.implement.files,
          rounds: outputs.implement.round,
          checks: outputs.verify.items.map((i) => ({ id: i.id, outcome: i.outcome })),
          reviews: outputs.review.round,
          findings: outputs.review.findings,
          ...deliveryResult(ctx),
        };
      },
    }),
  },
  edges: [
    { from: 'start', switch: { on: '$.route', cases: { given: 'implement', find: 'findPlan' } } },
    { from: 'findPlan', switch: { on: '$result.outcome', cases: { ok: 'afterFind', timed_out: 'timedOut' } } },
    { from: 'afterFind', switch: { on: '$.route', cases: { found: 'implement', none: 'blocked' } } },
    { from: 'implement', switch: { on: '$result.outcome', cases: { ok: 'afterImplement', timed_out: 'timedOut' } } },
    { from: 'afterImplement', switch: { on: '$.route', cases: { verify: 'verify', choose: 'chooseChecks', blocked: 'challengeGate' } } },
    { from: 'chooseChecks', switch: { on: '$result.outcome', cases: { ok: 'verify', timed_out: 'timedOut' } } },
    { from: 'verify', switch: { on: '$result.outcome', cases: { ok: 'afterVerify', timed_out: 'timedOut' } } },
    { from: 'afterVerify', switch: { on: '$.route', cases: { review: 'change', rework: 'rework' } } },
    { from: 'rework', switch: { on: '$.route', cases: { again: 'implement', exhausted: 'blocked' } } },
    { from: 'change', to: 'review' },
    { from: 'review', switch: { on: '$result.outcome', cases: { ok: 'triage', timed_out: 'timedOut' } } },
    { from: 'triage', switch: { on: '$.route', cases: { clean: 'commit', rework: 'rework', exhausted: 'blocked' } } },
    { from: 'challengeGate', switch: { on: '$.route', cases: { challenge: 'challenge', blocked: 'blocked' } } },
    { from: 'challenge', switch: { on: '$result.outcome', cases: { ok: 'afterChallenge', timed_out: 'timedOut' } } },
    { from: 'afterChallenge', switch: { on: '$.route', cases: { continue: 'implement', blocked: 'blocked' } } },
    ...deliveryEdges,
    {
      from: 'timedOut',
      switch: {
        on: '$.route',
        cases: { findPlan: 'findPlan', implement: 'implement', chooseChecks: 'chooseChecks', review: 'review', challenge: 'challenge', verify: 'verify', watchCi: 'watchCi', blocked: 'blocked' },
      },
    },
  ],
});
