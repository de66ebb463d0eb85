// plan-change: a change from problem to an approved, documented plan. autoplan makes the plan,
// autodoc records it in the documentation, plan-approval asks the person (by default it goes
// on with the plan when nobody answered in 10 minutes); a replan goes back to autoplan with the
// plan and the person's instructions, at most `maxReplans` times. A plan that comes back the
// same as the one it revises is not asked about again: the change ends blocked.
// Exits (the reference's names): `ready` (the approved plan, its digest, its documents and who
// approved it) and `blocked` (no plan could be made or documented, it did not change, the
// person stopped it, or the replans ran out: `stage` and `reason` say which).
import { compute, defineWorkflow, includeWorkflow } from '../index.js';
import autodoc from './autodoc.workflow.mjs';
import autoplan from './autoplan.workflow.mjs';
import planApproval, { readApproval } from './plan-approval.workflow.mjs';
import { exactKeys, optionalText, record, text, texts } from './plan.mjs';

const INPUT_KEYS = [
  'task',
  'scope',
  'constraints',
  'repository',
  'documents',
  'previousPlan',
  'newEvidence',
  'approval',
  // piw's older flat form of the approval policy.
  'mode',
  'audience',
  'autoContinueMs',
  'maxReplans',
];

/** `{ task, scope?, constraints?, repository?, documents?, previousPlan?, newEvidence?, approval? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'plan-change input');
  exactKeys(input, INPUT_KEYS, 'plan-change input');
  return {
    task: text(input.task, 'plan-change input task', 8_000),
    ...(input.scope === undefined ? {} : { scope: text(input.scope, 'plan-change input scope', 4_000) }),
    constraints: texts(input.constraints, 'plan-change input constraints'),
    ...(input.repository === undefined ? {} : { repository: optionalText(input.repository, 'plan-change input repository', 4_000) }),
    documents: texts(input.documents, 'plan-change input documents', { max: 64 }),
    ...(input.previousPlan === undefined ? {} : { previousPlan: input.previousPlan }),
    ...(input.newEvidence === undefined ? {} : { newEvidence: input.newEvidence }),
    approval: readApproval(input, 'plan-change'),
  };
}

/** The plan autoplan made last (its `ready` exit's output). */
const planOf = (outputs) => outputs.plan.output;

/** The latest replan the person asked for, or null. */
const replanOf = (outputs) => (outputs.approval?.exit === 'replan' ? outputs.approval.output : null);

export default defineWorkflow({
  name: 'plan-change',
  title: ({ input }) => `plan change: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'plan',
  maxSteps: 200,
  includes: {
    plan: includeWorkflow(autoplan, {
      input: ({ input, outputs }) => {
        const replan = replanOf(outputs);
        // After a replan: the plan the person saw, and their instructions; the change's own
        // evidence goes with every round.
        const previousPlan = replan ? replan.plan : input.previousPlan;
        return {
          problem: input.task,
          ...(input.scope === undefined ? {} : { scope: input.scope }),
          constraints: input.constraints,
          ...(previousPlan === undefined ? {} : { previousPlan }),
          ...(input.newEvidence === undefined ? {} : { newEvidence: input.newEvidence }),
          ...(replan ? { feedback: replan.instructions } : {}),
        };
      },
    }),
    doc: includeWorkflow(autodoc, {
      input: ({ input, outputs }) => ({
        task: input.task,
        plan: planOf(outputs).plan,
        planDigest: planOf(outputs).planDigest,
        ...(input.repository === undefined ? {} : { repository: input.repository }),
        documents: input.documents,
        ...(input.newEvidence === undefined ? {} : { evidence: input.newEvidence }),
      }),
    }),
    approval: includeWorkflow(planApproval, {
      input: ({ input, outputs }) => {
        const { mode, audience, maxReplans, autoContinueMs } = input.approval;
        return {
          task: input.task,
          plan: planOf(outputs).plan,
          planDigest: planOf(outputs).planDigest,
          revision: (outputs.again?.replans ?? 0) + 1,
          // The resolved policy, in the flat form (it keeps a wait of any length in milliseconds).
          mode,
          audience,
          maxReplans,
          ...(autoContinueMs === undefined ? {} : { autoContinueMs }),
        };
      },
    }),
  },
  exits: { ready: { from: 'ready' }, blocked: { from: 'blocked' } },
  nodes: {
    // A revision (of the input's previous plan, or after a replan) that changed nothing is not
    // documented or asked about again.
    assess: compute({
      run: ({ outputs }) => {
        const design = planOf(outputs);
        return design.previousPlanDigest !== undefined && !design.changed ? { route: 'unchanged' } : { route: 'document' };
      },
    }),
    // Counts the replans asked for: one more than allowed stops the change.
    again: compute({
      run: ({ input, state }) => ({ replans: state.visit, limit: input.approval.maxReplans, route: state.visit > input.approval.maxReplans ? 'exhausted' : 'replan' }),
    }),
    // Why the change is blocked: exactly one of these runs, and `blocked` reports it.
    planBlocked: compute({ run: ({ outputs }) => ({ stage: 'plan', reason: outputs.plan.output.reason, evidence: outputs.plan.output }) }),
    unchanged: compute({
      run: ({ outputs }) => ({
        stage: 'plan',
        reason: 'planning gave the same plan again: the new evidence or instructions changed nothing in it',
        evidence: planOf(outputs),
      }),
    }),
    docBlocked: compute({ run: ({ outputs }) => ({ stage: 'doc', reason: outputs.doc.output.reason, evidence: outputs.doc.output }) }),
    stopped: compute({ run: ({ outputs }) => ({ stage: 'approval', reason: 'the person stopped the plan change', evidence: outputs.approval.output }) }),
    exhausted: compute({
      run: ({ outputs }) => ({
        stage: 'approval',
        reason: `the person asked for a new plan ${outputs.again.replans} times; at most ${outputs.again.limit} replans`,
        evidence: { replans: outputs.again.replans, limit: outputs.again.limit },
      }),
    }),
    ready: compute({
      run: ({ input, outputs }) => {
        const approved = outputs.approval.output;
        const documented = outputs.doc.output;
        return {
          status: 'ready',
          task: input.task,
          plan: approved.plan,
          planDigest: approved.planDigest,
          documents: documented.documentation.files,
          revision: approved.revision,
          approval: approved.resolution,
          documentation: documented.documentation,
          documentedIn: documented.file,
          decidedBy: approved.decidedBy,
        };
      },
    }),
    blocked: compute({
      run: ({ input, outputs }) => {
        const cause = ['planBlocked', 'unchanged', 'docBlocked', 'stopped', 'exhausted'].map((id) => outputs[id]).find(Boolean);
        return {
          status: 'blocked',
          task: input.task,
          ...cause,
          ...(outputs.plan.exit === 'ready' ? { planDigest: planOf(outputs).planDigest } : {}),
        };
      },
    }),
  },
  edges: [
    { from: 'plan.ready', to: 'assess' },
    { from: 'plan.blocked', to: 'planBlocked' },
    { from: 'assess', switch: { on: '$.route', cases: { document: 'doc', unchanged: 'unchanged' } } },
    { from: 'doc.ready', to: 'approval' },
    { from: 'doc.blocked', to: 'docBlocked' },
    { from: 'approval.continue', to: 'ready' },
    { from: 'approval.stop', to: 'stopped' },
    { from: 'approval.replan', to: 'again' },
    { from: 'again', switch: { on: '$.route', cases: { replan: 'plan', exhausted: 'exhausted' } } },
    { from: 'planBlocked', to: 'blocked' },
    { from: 'unchanged', to: 'blocked' },
    { from: 'docBlocked', to: 'blocked' },
    { from: 'stopped', to: 'blocked' },
    { from: 'exhausted', to: 'blocked' },
  ],
});
