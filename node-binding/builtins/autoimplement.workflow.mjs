// autoimplement: carries out a plan that was already chosen. Given only the task, the model
// first finds that plan where the project keeps its plans (the input's `documents`, else its
// docs); none found ends the run `blocked` before anything changes, and a plan whose
// documentation is missing or stale is documented first. The model implements it; the workflow
// runs the project's own checks (a bounded command batch, one progress track in the widget) and
// sends failures back for another round; an independent reviewer (a separate read-only Pi)
// reviews the change, and P0/P1 findings go back for another round (P2 alone is addressed
// once); work or findings that show the plan does not hold re-plan it through plan-change
// (./autoimplement/review.mjs has these phases); then the change is
// delivered (`./autoimplement/delivery.mjs`): committed in each repository it spans, pushed to
// a branch of its own, one pull request each (opened once), its review comments sent back and
// answered, its CI followed (a failure is another round), merged when asked at the head that
// was checked, and reported on once. Every loop is bounded. A model that says it is blocked
// is challenged three times before the run ends `blocked`; a step that runs out of time gets a
// bounded fallback decision of where to go.
// Exits: `completed` (what was done, checked, reviewed, committed, what CI said, the delivery) or
// `blocked` (the stage, why, and the evidence).
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
import {
  authorityLines,
  currentDigest,
  currentPlan,
  planSource,
  readReviewInput,
  reviewBlocked,
  reviewEdges,
  reviewIncludes,
  reviewNodes,
  reviewRoundsOf,
} from './autoimplement/review.mjs';
import { planDigest, planSections, record, sectionsText, text, texts } from './plan.mjs';

/** Rounds of implementation after the first (failing checks, review findings, failing CI). */
const DEFAULT_MAX_ROUNDS = 4;
/** Reviews with P0/P1 findings before they end the run. */
const DEFAULT_MAX_REVIEWS = 3;
const DEFAULT_CHECK_TIMEOUT_MS = 15 * 60_000;
const DEFAULT_CI_TIMEOUT_MS = 30 * 60_000;
/** What a receipt keeps of a command's output: its end, where test runners put the verdict. */
const OUTPUT_TAIL_CHARS = 4_000;
const CHECK_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;

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
 * `{ task, plan?, planDigest?, documents?, checks?, maxRounds?, maxReviews?, commit?, push?,
 * ciTimeoutMs? }`, the review and planning fields (`scope`, `constraints`, `approval`,
 * `documentation`, `concurrency`: ./autoimplement/review.mjs) and the delivery's
 * (`repository`, `baseBranch`, `merge`): without `plan`, the task names the work whose plan the
 * model finds (in `documents` when given).
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
    commit: input.commit !== false,
    push: input.push !== false,
    ciTimeoutMs,
    ...readReviewInput(input),
    ...readDeliveryInput(input),
  };
}

/** The plan being carried out, its digest and where it came from (the last re-plan's, the found one, the input's). */
const planOf = currentPlan;
const digestOf = currentDigest;
const sourceOf = planSource;

function checkImplementation(value, ctx) {
  const { state } = ctx;
  const answer = record(value, 'the answer');
  if (!['done', 'issue', 'blocked'].includes(answer.status)) throw new Error('status must be "done", "issue" or "blocked"');
  const summary = text(answer.summary, 'summary', 4_000);
  const planned = currentDigest(ctx);
  if (answer.status === 'issue') {
    if (answer.issueKind !== 'design' && answer.issueKind !== 'implementation') throw new Error('an issue needs issueKind: "design" (the plan does not hold) or "implementation" (a local problem)');
    return { status: 'issue', summary, issueKind: answer.issueKind, evidence: text(answer.evidence, 'evidence (what shows it)', 4_000), files: texts(answer.files, 'files', { max: 200, chars: 400 }), round: state.visit, planDigest: planned };
  }
  if (answer.status === 'blocked') return { status: 'blocked', summary, blocker: text(answer.blocker, 'blocker (what stops the work now)', 4_000), round: state.visit, planDigest: planned };
  return { status: 'done', summary, files: texts(answer.files, 'files', { max: 200, chars: 400 }), round: state.visit, planDigest: planned, ...checkDeliveryAnswer(answer, ctx) };
}

function checkChecks(value) {
  return { checks: checkList(record(value, 'the answer').checks, 'checks') };
}

const checksOf = ({ input, outputs }) => input.checks ?? outputs.chooseChecks.checks;

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
  if (outputs.triageReview?.route === 'fix' && outputs.triageReview.implementRound === outputs.implement?.round) {
    lines.push('The independent review found (fix every one; the next review checks them):');
    for (const f of [...outputs.review.p0, ...outputs.review.p1]) lines.push(`- [${f.severity}] ${f.summary}${f.file ? ` (${f.file})` : ''}`);
  }
  if (outputs.implement?.status === 'issue') lines.push(`You reported a local problem: ${outputs.implement.summary} (${outputs.implement.evidence})`);
  if (outputs.adoptPlan && outputs.implement && outputs.implement.planDigest !== outputs.adoptPlan.planDigest) {
    lines.push(`The plan was changed (revision ${outputs.adoptPlan.revision}) because of: ${JSON.stringify(outputs.replanGuard.evidence)}\nCarry out the plan above from what is already in the working tree.`);
  }
  lines.push(...deliveryWork(ctx));
  if (outputs.challengeBlocker?.route === 'continue' && outputs.implement?.status === 'blocked') lines.push(`You decided to go on despite a blocker: ${outputs.challengeBlocker.nextAction}`);
  if (results.implement?.outcome === 'timed_out') lines.push('Your last attempt ran out of time: carry on from what is already in the working tree.');
  return lines;
}

export default defineWorkflow({
  name: 'autoimplement',
  title: ({ input }) => `autoimplement: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'prepare',
  maxSteps: 300,
  includes: reviewIncludes,
  exits: { completed: { from: 'finalize' }, blocked: { from: 'blocked' } },
  nodes: {
    ...reviewNodes(),
    implement: agent({
      statusDetail: 'implementing the plan',
      timeoutMs: 8 * 60 * 60_000,
      prompt: (ctx) => {
        const { input, state } = ctx;
        const open = openWork(ctx);
        return [
          `Task: ${input.task}`,
          `The plan to carry out (${digestOf(ctx)}):`,
          sectionsText(planSections(planOf(ctx)), 3),
          ...authorityLines(input),
          ...deliveryPromptLines(ctx),
          '',
          state.visit === 1 && open.length === 0
            ? 'Implement this plan in the working tree: make the changes its steps describe, keep to its scope, and add or update tests where the plan says.'
            : `Round ${state.visit}: the work is not done yet.\n${open.join('\n')}`,
          'Do not commit or push: the workflow runs the project\'s checks, has the change reviewed and commits it.',
          'Answer status "done" with a summary (its first line becomes the commit subject) and the files you changed;',
          'or status "issue" with issueKind "design" and the evidence when what you found shows the plan itself does not hold',
          '(the plan is then changed), or issueKind "implementation" for a local problem you will fix next round;',
          'or status "blocked" with the blocker, only when something outside your reach stops the work now.',
        ]
          .filter((l) => l !== null)
          .join('\n');
      },
      expectedOutput:
        '{ "status": "done" | "issue" | "blocked", "summary": string, "files"?: [string], "repositories"?: [string], "replies"?: [{ "id": string, "reply": string }], "issueKind"?: "design" | "implementation", "evidence"?: string, "blocker"?: string }',
      validate: checkImplementation,
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
        const ran = await batch(ctx, 'checks', 'project checks', items, ctx.input.concurrency.verification);
        return { passed: ran.every((i) => i.outcome === 'succeeded'), items: ran };
      },
    }),
    // Counts the rounds of rework asked for: one more than allowed ends the run.
    rework: compute({
      run: ({ input, state }) => ({ reworks: state.visit, route: state.visit > input.maxRounds ? 'exhausted' : 'again' }),
    }),
    ...deliveryNodes({ planOf, digestOf }),
    ...deliveryRoutes,
    blocked: compute({
      run: (ctx) => {
        const { input, outputs } = ctx;
        const found = input.plan !== undefined || outputs.findPlan?.route === 'found';
        const base = { status: 'blocked', task: input.task, ...(found ? { planDigest: digestOf(ctx), planSource: sourceOf(ctx) } : {}) };
        const stopped = reviewBlocked(ctx);
        if (stopped) return { ...base, ...stopped };
        if (outputs.rework?.route === 'exhausted') {
          const failing = outputs.verify && !outputs.verify.passed ? outputs.verify.items.filter((i) => i.outcome !== 'succeeded').map((i) => i.id) : [];
          return { ...base, stage: 'rework', reason: `still not done after ${input.maxRounds} rounds of rework`, evidence: { failingChecks: failing, ci: outputs.watchCi ?? null } };
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
          plan: planOf(ctx),
          implementation: outputs.implement,
          verification: { passed: outputs.verify.passed, checks: outputs.verify.items.map((i) => ({ id: i.id, outcome: i.outcome, exitCode: i.exitCode })) },
          reviewRounds: reviewRoundsOf(outputs.triageReview.rounds),
          ...(outputs.addressP2 && outputs.triageReview.route === 'p2' ? { p2: { addressed: outputs.addressP2.addressed, skipped: outputs.addressP2.skipped } } : {}),
          summary: outputs.implement.summary,
          files: outputs.implement.files,
          rounds: outputs.implement.round,
          checks: outputs.verify.items.map((i) => ({ id: i.id, outcome: i.outcome })),
          reviews: outputs.review.round,
          ...deliveryResult(ctx),
        };
      },
    }),
  },
  edges: [
    ...reviewEdges(),
    { from: 'chooseChecks', switch: { on: '$result.outcome', cases: { ok: 'verify', timed_out: 'timedOut' } } },
    { from: 'rework', switch: { on: '$.route', cases: { again: 'implement', exhausted: 'blocked' } } },
    ...deliveryEdges,
  ],
});
