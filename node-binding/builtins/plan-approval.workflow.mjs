// plan-approval: a person decides on a plan before anyone acts on it. The decision is
// protected (only a person answers it, never the model) and shows the plan itself: its
// summary, steps, checks and risks. Continue, stop, or replan with a text saying what should
// change. Modes: `required` (the default) waits for the person; `auto` continues by itself
// when nobody answered within `autoContinueMs` (the host applies it at the deadline, also
// after a restart); `skip` continues without asking.
// Exits: `continue`, `stop`, `replan` (with the person's instructions).
import {
  choice,
  compute,
  defineHumanChoices,
  defineWorkflow,
  humanDecision,
  humanDecisionEdge,
  textInput,
} from '../index.js';
import { planDigest, planSections, record, sectionsText, text } from './plan.mjs';

/** How long `auto` waits for a person before it continues, unless the input says. */
export const DEFAULT_AUTO_CONTINUE_MS = 10 * 60 * 1000;
const MODES = ['required', 'auto', 'skip'];

const choices = defineHumanChoices({
  continue: choice({ label: 'Continue', description: 'go ahead with this plan' }),
  stop: choice({ label: 'Stop', description: 'do not carry it out' }),
  replan: choice({
    label: 'Replan',
    description: 'make a new plan with your instructions',
    input: textInput({ name: 'instructions', prompt: 'What should the new plan do differently?', minLength: 1, maxLength: 4_000 }),
  }),
});

/** `{ task, plan, planDigest?, mode?, autoContinueMs?, revision?, audience? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'plan-approval input');
  if (input.plan === undefined || input.plan === null) throw new Error('plan-approval input needs plan (the plan to decide on)');
  const mode = input.mode ?? 'required';
  if (!MODES.includes(mode)) throw new Error(`plan-approval mode must be one of ${MODES.join(', ')}, got ${JSON.stringify(mode)}`);
  const wait = input.autoContinueMs ?? DEFAULT_AUTO_CONTINUE_MS;
  if (!(Number.isSafeInteger(wait) && wait > 0 && wait <= 2 ** 31 - 1)) {
    throw new Error('plan-approval autoContinueMs must be a positive integer number of milliseconds');
  }
  const revision = input.revision ?? 1;
  if (!(Number.isSafeInteger(revision) && revision > 0)) throw new Error('plan-approval revision must be a positive integer');
  return {
    task: text(input.task, 'plan-approval input task', 8_000),
    plan: input.plan,
    planDigest: input.planDigest === undefined ? planDigest(input.plan) : text(input.planDigest, 'plan-approval input planDigest', 200),
    mode,
    autoContinueMs: wait,
    revision,
    ...(input.audience === undefined ? {} : { audience: text(input.audience, 'plan-approval input audience', 200) }),
  };
}

/** The outcome every exit carries: what was decided on, and how. */
const outcome = (input, status, decision) => ({
  status,
  task: input.task,
  plan: input.plan,
  planDigest: input.planDigest,
  revision: input.revision,
  decidedBy: decision ? decision.provenance : 'skip',
});

export default defineWorkflow({
  name: 'plan-approval',
  title: ({ input }) => `plan approval: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'gate',
  maxSteps: 8,
  exits: { continue: { from: 'continued' }, stop: { from: 'stopped' }, replan: { from: 'replan' } },
  nodes: {
    gate: compute({ run: ({ input }) => ({ mode: input.mode }) }),
    approve: humanDecision({
      choices,
      audience: ({ input }) => input.audience ?? 'the person who asked for the plan',
      request: ({ input }) => {
        const sections = [{ title: 'Task', body: input.task }, ...planSections(input.plan)];
        return {
          title: `Approve the plan for: ${input.task.slice(0, 120)}`,
          subject: { task: input.task, plan: input.plan, planDigest: input.planDigest, revision: input.revision },
          presentation: {
            summary: `${sectionsText(sections.slice(1), 3)}\n\n(plan ${input.planDigest.slice(0, 19)}, revision ${input.revision})`,
            sections,
          },
          revision: input.revision,
        };
      },
      onTimeout: ({ input }) =>
        input.mode === 'auto' ? { afterMs: input.autoContinueMs, response: { choice: 'continue' } } : undefined,
    }),
    continued: compute({ run: ({ input, outputs }) => outcome(input, 'continue', outputs.approve) }),
    stopped: compute({ run: ({ input, outputs }) => outcome(input, 'stop', outputs.approve) }),
    replan: compute({
      run: ({ input, outputs }) => ({
        ...outcome(input, 'replan', outputs.approve),
        instructions: outputs.approve.input.instructions,
      }),
    }),
  },
  edges: [
    { from: 'gate', switch: { on: '$.mode', cases: { required: 'approve', auto: 'approve', skip: 'continued' } } },
    humanDecisionEdge({ from: 'approve', choices, cases: { continue: 'continued', stop: 'stopped', replan: 'replan' } }),
  ],
});
