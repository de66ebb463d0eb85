// plan-change: a change from problem to an approved, documented plan. autoplan makes the plan,
// autodoc records it in the project's docs, plan-approval asks the person; a replan goes back
// to autoplan with the plan and the person's instructions, at most `maxReplans` times.
// Exits: `approved` (the plan, its digest and where it is documented), `stopped` (the person
// stopped it, or the replans ran out), `blocked` (no plan could be made or documented).
import { compute, defineWorkflow, includeWorkflow } from '../index.js';
import autodoc from './autodoc.workflow.mjs';
import autoplan from './autoplan.workflow.mjs';
import planApproval from './plan-approval.workflow.mjs';
import { record, text, texts } from './plan.mjs';

const DEFAULT_MAX_REPLANS = 2;

/** `{ task, scope?, constraints?, documents?, mode?, autoContinueMs?, maxReplans? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'plan-change input');
  const maxReplans = input.maxReplans ?? DEFAULT_MAX_REPLANS;
  if (!(Number.isSafeInteger(maxReplans) && maxReplans >= 0 && maxReplans <= 10)) {
    throw new Error('plan-change maxReplans must be an integer from 0 to 10');
  }
  return {
    ...input,
    task: text(input.task ?? input.problem, 'plan-change input task', 8_000),
    documents: texts(input.documents, 'plan-change input documents'),
    maxReplans,
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
          ...(replan ? { previousPlan: replan.plan, feedback: replan.instructions } : {}),
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
      }),
    }),
  },
  exits: { approved: { from: 'approved' }, stopped: { from: 'stopped' }, blocked: { from: 'blocked' } },
  nodes: {
    // Counts the replans asked for: one more than allowed stops the change.
    again: compute({
      run: ({ input, state }) => ({ replans: state.visit, route: state.visit > input.maxReplans ? 'exhausted' : 'replan' }),
    }),
    approved: compute({
      run: ({ input, outputs }) => ({
        status: 'approved',
        task: input.task,
        plan: planOf(outputs).plan,
        planDigest: planOf(outputs).planDigest,
        documentedIn: outputs.doc.output.file ?? null,
        decidedBy: outputs.approval.output.decidedBy,
      }),
    }),
    stopped: compute({
      run: ({ input, outputs }) => ({
        status: 'stopped',
        task: input.task,
        planDigest: planOf(outputs).planDigest,
        reason:
          outputs.approval.exit === 'stop'
            ? 'the person stopped it'
            : `the person asked for a new plan ${outputs.again.replans} times; at most ${input.maxReplans} replans`,
      }),
    }),
    blocked: compute({
      run: ({ input, outputs }) => ({
        status: 'blocked',
        task: input.task,
        stage: outputs.plan.exit === 'blocked' ? 'plan' : 'doc',
        reason: outputs.plan.exit === 'blocked' ? outputs.plan.output.reason : outputs.doc.output.reason,
      }),
    }),
  },
  edges: [
    { from: 'plan.ready', to: 'doc' },
    { from: 'plan.blocked', to: 'blocked' },
    { from: 'doc.documented', to: 'approval' },
    { from: 'doc.blocked', to: 'blocked' },
    { from: 'approval.continue', to: 'approved' },
    { from: 'approval.stop', to: 'stopped' },
    { from: 'approval.replan', to: 'again' },
    { from: 'again', switch: { on: '$.route', cases: { replan: 'plan', exhausted: 'stopped' } } },
  ],
});
