// plan-change: a change from problem to an approved, documented plan. autoplan makes the plan,
// autodoc records it in the project's docs, plan-approval asks the person; a replan goes back
// to autoplan with the plan and the person's instructions, at most `maxReplans` times.
// Exits (the reference's names): `ready` (the approved plan, its digest and where it is
// documented) and `blocked` (no plan could be made or documented, the person stopped it, or the
// replans ran out: `stage` and `reason` say which).
import { compute, defineWorkflow, includeWorkflow } from '../index.js';
import autodoc from './autodoc.workflow.mjs';
import autoplan from './autoplan.workflow.mjs';
import planApproval from './plan-approval.workflow.mjs';
import { record, text, texts } from './plan.mjs';

const DEFAULT_MAX_REPLANS = 2;
const APPROVAL_KEYS = ['mode', 'audience', 'timeoutMinutes', 'maxReplans'];

/**
 * The approval settings, flat (`mode`, `autoContinueMs`, `maxReplans`, `audience`) or as the
 * reference gives them (`approval: { mode, audience, timeoutMinutes, maxReplans }`).
 */
function readApproval(input) {
  if (input.approval === undefined) return { mode: input.mode, autoContinueMs: input.autoContinueMs, maxReplans: input.maxReplans, audience: input.audience };
  const approval = record(input.approval, 'plan-change input approval');
  const unknown = Object.keys(approval).find((k) => !APPROVAL_KEYS.includes(k));
  if (unknown) throw new Error(`plan-change approval.${unknown} is not supported (it takes ${APPROVAL_KEYS.join(', ')})`);
  const minutes = approval.timeoutMinutes;
  if (minutes !== undefined && !(Number.isSafeInteger(minutes) && minutes >= 1 && minutes * 60_000 <= 2 ** 31 - 1)) {
    throw new Error('plan-change approval.timeoutMinutes must be a whole number of minutes, from 1 to 35791');
  }
  return {
    mode: approval.mode ?? input.mode,
    autoContinueMs: minutes === undefined ? input.autoContinueMs : minutes * 60_000,
    maxReplans: approval.maxReplans ?? input.maxReplans,
    audience: approval.audience ?? input.audience,
  };
}

/** `{ task, scope?, constraints?, documents?, previousPlan?, mode?, autoContinueMs?, maxReplans?, audience?, approval? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'plan-change input');
  const { mode, autoContinueMs, maxReplans = DEFAULT_MAX_REPLANS, audience } = readApproval(input);
  if (!(Number.isSafeInteger(maxReplans) && maxReplans >= 0 && maxReplans <= 10)) {
    throw new Error('plan-change maxReplans must be an integer from 0 to 10');
  }
  const { approval: _approval, ...rest } = input;
  return {
    ...rest,
    task: text(input.task ?? input.problem, 'plan-change input task', 8_000),
    documents: texts(input.documents, 'plan-change input documents'),
    maxReplans,
    ...(mode === undefined ? {} : { mode }),
    ...(autoContinueMs === undefined ? {} : { autoContinueMs }),
    ...(audience === undefined ? {} : { audience: text(audience, 'plan-change audience', 200) }),
  };
}

/** The plan autoplan made last (its `ready` exit's output). */
const planOf = (outputs) => outputs.plan.output;

export default defineWorkflow({
  name: 'plan-change',
  title: ({ input }) => `plan change: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'plan',
  maxSteps: 200,
  includes: {
    plan: includeWorkflow(autoplan, {
      input: ({ input, outputs }) => {
        const replan = outputs.approval?.exit === 'replan' ? outputs.approval.output : null;
        return {
          task: input.task,
          ...(input.scope === undefined ? {} : { scope: input.scope }),
          ...(input.constraints === undefined ? {} : { constraints: input.constraints }),
          ...(replan
            ? { previousPlan: replan.plan, feedback: replan.instructions }
            : input.previousPlan === undefined
              ? {}
              : { previousPlan: input.previousPlan }),
        };
      },
    }),
    doc: includeWorkflow(autodoc, {
      input: ({ input, outputs }) => ({
        task: input.task,
        plan: planOf(outputs).plan,
        planDigest: planOf(outputs).planDigest,
        documents: input.documents,
      }),
    }),
    approval: includeWorkflow(planApproval, {
      input: ({ input, outputs }) => ({
        task: input.task,
        plan: planOf(outputs).plan,
        planDigest: planOf(outputs).planDigest,
        revision: (outputs.again?.replans ?? 0) + 1,
        ...(input.mode === undefined ? {} : { mode: input.mode }),
        ...(input.autoContinueMs === undefined ? {} : { autoContinueMs: input.autoContinueMs }),
        ...(input.audience === undefined ? {} : { audience: input.audience }),
      }),
    }),
  },
  exits: { ready: { from: 'ready' }, blocked: { from: 'blocked' } },
  nodes: {
    // Counts the replans asked for: one more than allowed stops the change.
    again: compute({
      run: ({ input, state }) => ({ replans: state.visit, route: state.visit > input.maxReplans ? 'exhausted' : 'replan' }),
    }),
    ready: compute({
      run: ({ input, outputs }) => ({
        status: 'ready',
        task: input.task,
        plan: planOf(outputs).plan,
        planDigest: planOf(outputs).planDigest,
        revision: outputs.approval.output.revision,
        documentedIn: outputs.doc.output.file ?? null,
        decidedBy: outputs.approval.output.decidedBy,
      }),
    }),
    // Reached from a blocked plan, a blocked documentation, the person's stop, or the replans
    // running out; the latest result of each stage says which (a stage that ran again after a
    // replan replaced its earlier result).
    blocked: compute({
      run: ({ input, outputs }) => {
        const why =
          outputs.plan.exit === 'blocked'
            ? { stage: 'plan', reason: outputs.plan.output.reason }
            : outputs.doc?.exit === 'blocked'
              ? { stage: 'doc', reason: outputs.doc.output.reason }
              : outputs.approval?.exit === 'stop'
                ? { stage: 'approval', reason: 'the person stopped it' }
                : { stage: 'approval', reason: `the person asked for a new plan ${outputs.again.replans} times; at most ${input.maxReplans} replans` };
        return {
          status: 'blocked',
          task: input.task,
          ...why,
          ...(outputs.plan.exit === 'ready' ? { planDigest: planOf(outputs).planDigest } : {}),
        };
      },
    }),
  },
  edges: [
    { from: 'plan.ready', to: 'doc' },
    { from: 'plan.blocked', to: 'blocked' },
    { from: 'doc.documented', to: 'approval' },
    { from: 'doc.blocked', to: 'blocked' },
    { from: 'approval.continue', to: 'ready' },
    { from: 'approval.stop', to: 'blocked' },
    { from: 'approval.replan', to: 'again' },
    { from: 'again', switch: { on: '$.route', cases: { replan: 'plan', exhausted: 'blocked' } } },
  ],
});
