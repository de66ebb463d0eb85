// plan-approval: a person decides on a plan before anyone acts on it. The decision is
// protected (only a person answers it, never the model) and shows the plan itself: its
// summary, steps, checks and risks. Continue, stop, or replan with a text saying what should
// change. The approval policy (`approval: { mode, audience, timeoutMinutes, maxReplans }`):
// `auto` (the default) asks and continues by itself when nobody answered within
// `timeoutMinutes` (default 10; the host applies it at the deadline, also after a restart);
// `required` waits for the person; `skip` continues without asking. `audience` says which
// decision channels get the question (see the package README, "Decision channels").
// Exits: `continue`, `stop`, `replan` (with the person's instructions); each carries the
// `resolution`: who or what decided (`human`, `timeout`, or `skipped`).
import {
  choice,
  compute,
  defineHumanChoices,
  defineWorkflow,
  humanDecision,
  humanDecisionEdge,
  textInput,
} from '../index.js';
import { exactKeys, planSections, record, sectionsText, text } from './plan.mjs';

/** How long `auto` waits for a person before it continues, unless the input says. */
export const DEFAULT_AUTO_CONTINUE_MS = 10 * 60 * 1000;
/** Who a plan decision is for when the input does not say: every decision channel. */
export const DEFAULT_AUDIENCE = 'operator';
/** How many times a person may ask for a new plan in one plan change, unless the input says. */
export const DEFAULT_MAX_REPLANS = 3;
const MAX_TIMEOUT_MINUTES = 24 * 60;
const MAX_REPLANS = 20;
const MODES = ['auto', 'required', 'skip'];
const POLICY_KEYS = ['mode', 'audience', 'timeoutMinutes', 'maxReplans'];
/** piw's older flat form of the policy, still taken when `approval` is not given. */
const FLAT_KEYS = ['mode', 'audience', 'autoContinueMs', 'maxReplans'];

/**
 * The approval policy of `input` (`what` names the workflow in errors), resolved with its
 * defaults: `{ mode, audience, maxReplans, timeoutMinutes?, autoContinueMs? }` (the last two
 * only for `auto`). It is given as `approval: { mode, audience, timeoutMinutes, maxReplans }`,
 * or in piw's older flat form (`mode`, `audience`, `autoContinueMs`, `maxReplans` beside the
 * other fields); not both.
 */
export function readApproval(input, what) {
  const flatGiven = FLAT_KEYS.filter((k) => input[k] !== undefined);
  let raw;
  if (input.approval !== undefined) {
    if (flatGiven.length) {
      throw new Error(`${what} input: give the approval policy once: move ${flatGiven.join(', ')} into approval: { ${POLICY_KEYS.join(', ')} } (autoContinueMs becomes timeoutMinutes)`);
    }
    raw = record(input.approval, `${what} input approval`);
    exactKeys(raw, POLICY_KEYS, `${what} input approval`);
  } else {
    raw = { mode: input.mode, audience: input.audience, maxReplans: input.maxReplans };
  }
  const mode = raw.mode ?? 'auto';
  if (!MODES.includes(mode)) throw new Error(`${what} approval mode must be one of ${MODES.join(', ')}, got ${JSON.stringify(mode)}`);
  const minutes = raw.timeoutMinutes;
  const ms = input.approval === undefined ? input.autoContinueMs : undefined;
  if (mode !== 'auto' && (minutes !== undefined || ms !== undefined)) {
    throw new Error(`${what} approval ${minutes !== undefined ? 'timeoutMinutes' : 'autoContinueMs'} applies only to mode "auto" (mode "${mode}" ${mode === 'skip' ? 'asks nobody' : 'waits for the person'}); leave it out or use mode "auto"`);
  }
  if (minutes !== undefined && !(Number.isInteger(minutes) && minutes >= 1 && minutes <= MAX_TIMEOUT_MINUTES)) {
    throw new Error(`${what} approval timeoutMinutes must be a whole number of minutes from 1 to ${MAX_TIMEOUT_MINUTES}`);
  }
  if (ms !== undefined && !(Number.isSafeInteger(ms) && ms > 0 && ms <= MAX_TIMEOUT_MINUTES * 60_000)) {
    throw new Error(`${what} autoContinueMs must be a positive whole number of milliseconds, at most ${MAX_TIMEOUT_MINUTES * 60_000} (or give approval.timeoutMinutes)`);
  }
  const maxReplans = raw.maxReplans ?? DEFAULT_MAX_REPLANS;
  if (!(Number.isInteger(maxReplans) && maxReplans >= 0 && maxReplans <= MAX_REPLANS)) {
    throw new Error(`${what} approval maxReplans must be a whole number from 0 to ${MAX_REPLANS}`);
  }
  const policy = {
    mode,
    audience: raw.audience === undefined ? DEFAULT_AUDIENCE : text(raw.audience, `${what} approval audience`, 200),
    maxReplans,
  };
  if (mode === 'auto') {
    policy.autoContinueMs = ms ?? (minutes ?? DEFAULT_AUTO_CONTINUE_MS / 60_000) * 60_000;
    policy.timeoutMinutes = minutes ?? policy.autoContinueMs / 60_000;
  }
  return policy;
}

const choices = defineHumanChoices({
  continue: choice({ label: 'Continue', description: 'go ahead with this plan' }),
  stop: choice({ label: 'Stop', description: 'do not carry it out' }),
  replan: choice({
    label: 'Replan',
    description: 'make a new plan with your instructions',
    input: textInput({ name: 'instructions', prompt: 'What should the new plan do differently?', minLength: 1, maxLength: 4_000 }),
  }),
});

const INPUT_KEYS = ['task', 'plan', 'planDigest', 'approval', 'revision', ...FLAT_KEYS];

/** `{ task, plan, planDigest, approval?, revision? }` (or the policy's older flat fields). */
function readInput(raw) {
  const input = record(raw ?? {}, 'plan-approval input');
  exactKeys(input, INPUT_KEYS, 'plan-approval input');
  if (input.plan === undefined || input.plan === null) throw new Error('plan-approval input needs plan (the plan to decide on)');
  if (input.planDigest === undefined) {
    throw new Error("plan-approval input needs planDigest: the plan's identity, as autoplan's result gives it (sha256: and the SHA-256 of the plan's canonical JSON, as `digest` of the package gives it)");
  }
  const revision = input.revision ?? 1;
  if (!(Number.isSafeInteger(revision) && revision > 0)) throw new Error('plan-approval revision must be a positive integer');
  return {
    task: text(input.task, 'plan-approval input task', 8_000),
    plan: input.plan,
    planDigest: text(input.planDigest, 'plan-approval input planDigest', 200),
    revision,
    approval: readApproval(input, 'plan-approval'),
  };
}

/** Who or what decided: skipped by the policy, or the decision's answer (a person or the deadline). */
function resolutionOf(input, decision) {
  if (!decision) return { provenance: 'skipped', revision: input.revision };
  return {
    provenance: decision.provenance,
    decision: { ...decision, revision: input.revision, planDigest: input.planDigest, audience: input.approval.audience },
  };
}

/** The outcome every exit carries: what was decided on, and how. */
const outcome = (input, status, decision) => ({
  status,
  task: input.task,
  plan: input.plan,
  planDigest: input.planDigest,
  revision: input.revision,
  resolution: resolutionOf(input, decision),
  decidedBy: decision ? decision.provenance : 'skip',
  approval: input.approval,
});

export default defineWorkflow({
  name: 'plan-approval',
  title: ({ input }) => `plan approval: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'gate',
  maxSteps: 8,
  exits: { continue: { from: 'continued' }, stop: { from: 'stopped' }, replan: { from: 'replan' } },
  nodes: {
    gate: compute({ run: ({ input }) => ({ route: input.approval.mode === 'skip' ? 'skip' : 'ask' }) }),
    approve: humanDecision({
      choices,
      audience: ({ input }) => input.approval.audience,
      request: ({ input }) => {
        const sections = [{ title: 'Task', body: input.task }, ...planSections(input.plan)];
        const auto =
          input.approval.mode === 'auto'
            ? `\n\nNobody answering within ${input.approval.timeoutMinutes} minutes continues with this plan.`
            : '';
        return {
          title: `Approve the plan for: ${input.task.slice(0, 120)}`,
          subject: { task: input.task, plan: input.plan, planDigest: input.planDigest, revision: input.revision },
          presentation: {
            summary: `${sectionsText(sections.slice(1), 3)}\n\n(plan ${input.planDigest.slice(0, 19)}, revision ${input.revision})${auto}`,
            sections,
          },
          revision: input.revision,
        };
      },
      onTimeout: ({ input }) =>
        input.approval.mode === 'auto' ? { afterMs: input.approval.autoContinueMs, response: { choice: 'continue' } } : undefined,
    }),
    continued: compute({ run: ({ input, outputs }) => outcome(input, 'continue', input.approval.mode === 'skip' ? null : outputs.approve) }),
    stopped: compute({ run: ({ input, outputs }) => outcome(input, 'stop', outputs.approve) }),
    replan: compute({
      run: ({ input, outputs }) => ({
        ...outcome(input, 'replan', outputs.approve),
        instructions: outputs.approve.input.instructions,
      }),
    }),
  },
  edges: [
    { from: 'gate', switch: { on: '$.route', cases: { ask: 'approve', skip: 'continued' } } },
    humanDecisionEdge({ from: 'approve', choices, cases: { continue: 'continued', stop: 'stopped', replan: 'replan' } }),
  ],
});
