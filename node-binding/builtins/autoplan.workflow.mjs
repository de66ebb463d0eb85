// autoplan: from a problem to an implementation plan. The model frames the problem, lays out
// the practical ways to solve it, describes the ideal end state apart from them, picks the
// approach (measured against that ideal), and writes the plan for the pick. Nothing is changed
// in the project: every step only reads and answers. At the end the model presents the plan to
// the person in prose (the run's presentation turn).
// Exits: `ready` (the plan, its digest, and whether it differs from `previousPlan`) or
// `blocked` (why no plan can be made now).
import { agent, compute, defineWorkflow } from '../index.js';
import { checkPlan, exactKeys, optionalText, planDigest, record, text, texts } from './plan.mjs';

/** The plan step's deadline: writing a whole plan may take longer than the other steps. */
export const PLAN_TIMEOUT_MS = 30 * 60_000;
const INPUT_KEYS = ['problem', 'task', 'scope', 'constraints', 'previousPlan', 'newEvidence', 'feedback'];
const OPTION_ID = /^[a-z][a-z0-9-]{0,40}$/;

/** `{ problem (or task), scope?, constraints?, previousPlan?, newEvidence?, feedback? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'autoplan input');
  exactKeys(input, INPUT_KEYS, 'autoplan input');
  if (input.problem !== undefined && input.task !== undefined) throw new Error('autoplan input: give the problem once, as problem (task is the same field)');
  return {
    task: text(input.problem ?? input.task, 'autoplan input problem (the problem to plan for; task also works)', 8_000),
    scope: optionalText(input.scope, 'autoplan input scope', 4_000),
    constraints: texts(input.constraints, 'autoplan input constraints'),
    ...(input.previousPlan === undefined ? {} : { previousPlan: input.previousPlan }),
    ...(input.newEvidence === undefined ? {} : { newEvidence: input.newEvidence }),
    feedback: optionalText(input.feedback, 'autoplan input feedback', 8_000),
  };
}

function checkFrame(value) {
  const frame = record(value, 'the frame');
  return {
    problem: text(frame.problem, 'problem', 4_000),
    success: texts(frame.success, 'success', { min: 1 }),
    inScope: texts(frame.inScope, 'inScope'),
    outOfScope: texts(frame.outOfScope, 'outOfScope'),
  };
}

function checkOptions(value) {
  const list = record(value, 'the options').options;
  if (!Array.isArray(list) || list.length < 2 || list.length > 4) {
    throw new Error('options must be an array of 2 to 4 distinct approaches');
  }
  const seen = new Set();
  return {
    options: list.map((o, i) => {
      const option = record(o, `option ${i + 1}`);
      const id = text(option.id, `option ${i + 1} id`, 41);
      if (!OPTION_ID.test(id) || seen.has(id)) throw new Error(`option id ${JSON.stringify(id)} must be unique, lowercase, [a-z0-9-]`);
      seen.add(id);
      return {
        id,
        title: text(option.title, `option ${id} title`, 200),
        approach: text(option.approach, `option ${id} approach`, 8_000),
        tradeoffs: texts(option.tradeoffs, `option ${id} tradeoffs`, { min: 1 }),
      };
    }),
  };
}

function checkIdeal(value) {
  const ideal = record(value, 'the ideal');
  return {
    ideal: text(ideal.ideal, 'ideal (the best end state, whatever it takes)', 8_000),
    beyondReach: texts(ideal.beyondReach, 'beyondReach'),
    worth: texts(ideal.worth, 'worth'),
  };
}

function checkChoice(value, { outputs }) {
  const choice = record(value, 'the choice');
  const ids = outputs.options.options.map((o) => o.id);
  if (choice.status !== 'ready' && choice.status !== 'blocked') throw new Error('status must be "ready" or "blocked"');
  const chosen = text(choice.chosen, 'chosen', 41);
  if (!ids.includes(chosen)) throw new Error(`chosen must be one of the options: ${ids.join(', ')}`);
  const rejected = Array.isArray(choice.rejected) ? choice.rejected.map((r, i) => record(r, `rejected[${i}]`)) : null;
  const others = ids.filter((id) => id !== chosen);
  if (!rejected || rejected.length !== others.length || !others.every((id) => rejected.some((r) => r.id === id))) {
    throw new Error(`rejected must give one reason for each option not chosen: ${others.join(', ')}`);
  }
  return {
    status: choice.status,
    chosen,
    why: text(choice.why, 'why', 4_000),
    againstIdeal: text(choice.againstIdeal, 'againstIdeal (how the choice stands against the ideal)', 4_000),
    leftOut: texts(choice.leftOut, 'leftOut'),
    rejected: rejected.map((r) => ({ id: r.id, reason: text(r.reason, `reason for rejecting ${r.id}`, 2_000) })),
    ...(choice.status === 'blocked' ? { blocker: text(choice.blocker, 'blocker (what stops any plan now)', 4_000) } : {}),
  };
}

const context = (input) =>
  [
    `Problem: ${input.task}`,
    input.scope ? `Scope: ${input.scope}` : 'Scope: not given; keep to what this project owns.',
    input.constraints.length ? `Constraints:\n${input.constraints.map((c) => `- ${c}`).join('\n')}` : null,
    input.previousPlan === undefined ? null : `A plan made before (revise it, or say why it no longer holds): ${JSON.stringify(input.previousPlan)}`,
    input.newEvidence === undefined ? null : `New evidence since then (the plan must account for it): ${JSON.stringify(input.newEvidence)}`,
    input.feedback ? `What the person asked to change: ${input.feedback}` : null,
  ]
    .filter(Boolean)
    .join('\n');

/** What the model is asked to do with the finished run: tell the person, in prose. */
function presentation({ finalOutput }) {
  const result = finalOutput && typeof finalOutput === 'object' && 'status' in finalOutput ? finalOutput : finalOutput?.output;
  if (result?.status === 'ready') {
    return [
      'The autoplan run above has finished with a plan. Present it to the person in a few short paragraphs of',
      'prose, not as JSON: the approach chosen and why, how it stands against the ideal end state and what',
      'was left out of scope, then the steps in order and how the result will be checked.',
      result.previousPlanDigest ? `Say whether it changed from the earlier plan (${result.changed ? 'it did' : 'it did not'}) and what changed.` : null,
      'Do not ask the person to choose between approaches: the choice is made. Do not start implementing.',
    ]
      .filter(Boolean)
      .join(' ');
  }
  if (result?.status === 'blocked') {
    return 'The autoplan run above ended blocked. Tell the person in plain words what stops a plan now and what would unblock it. Do not start implementing.';
  }
  return undefined;
}

export default defineWorkflow({
  name: 'autoplan',
  title: ({ input }) => `autoplan: ${input.task.slice(0, 60)}`,
  input: readInput,
  presentationPrompt: presentation,
  startAt: 'frame',
  maxSteps: 20,
  exits: { ready: { from: 'ready' }, blocked: { from: 'blocked' } },
  nodes: {
    frame: agent({
      statusDetail: 'framing the problem',
      prompt: ({ input }) =>
        [
          context(input),
          '',
          'Read the project as much as you need (do not change anything) and frame the problem:',
          'what is wrong or missing, what "done" looks like in checkable terms, and which parts of',
          'the project the work may touch and which it must leave alone. Do not propose a solution yet.',
          'Never count on changing what this project does not own (another project, an outside service).',
        ].join('\n'),
      expectedOutput: '{ "problem": string, "success": [string], "inScope": [string], "outOfScope": [string] }',
      validate: checkFrame,
    }),
    options: agent({
      statusDetail: 'comparing approaches',
      prompt: ({ input, outputs }) =>
        [
          context(input),
          `Frame: ${JSON.stringify(outputs.frame)}`,
          '',
          'Lay out two to four genuinely different ways to solve it within the scope. For each: a short',
          'lowercase id, a title, the approach in a few sentences, and its costs and risks. Prefer',
          'approaches that reuse what the project already has and would still hold up in a year;',
          'leave out ones that need changes outside the scope.',
        ].join('\n'),
      expectedOutput: '{ "options": [{ "id": "lowercase-id", "title": string, "approach": string, "tradeoffs": [string] }] }',
      validate: checkOptions,
    }),
    ideal: agent({
      statusDetail: 'describing the ideal end state',
      prompt: ({ input, outputs }) =>
        [
          context(input),
          `Frame: ${JSON.stringify(outputs.frame)}`,
          `Approaches so far: ${JSON.stringify(outputs.options.options)}`,
          '',
          'Put the approaches aside for a moment and describe the ideal end state for this problem: what the',
          'best possible outcome would be if nothing held it back. It may be one of the approaches, or go',
          'beyond the scope. Name what it would need that this project does not control (beyondReach),',
          'rather than assuming it can change, and what it would be worth over the approaches (worth).',
        ].join('\n'),
      expectedOutput: '{ "ideal": string, "beyondReach": [string], "worth": [string] }',
      validate: checkIdeal,
    }),
    choose: agent({
      statusDetail: 'choosing an approach',
      prompt: ({ input, outputs }) =>
        [
          context(input),
          `Frame: ${JSON.stringify(outputs.frame)}`,
          `Options: ${JSON.stringify(outputs.options.options)}`,
          `Ideal end state: ${JSON.stringify(outputs.ideal)}`,
          '',
          'Choose the best practical option yourself (do not ask the person). Measure each against the',
          'ideal: take the one closest to it that fits the scope, can be done through what this project',
          'controls and is worth its cost; between options of equal result take the simpler. Say how the',
          'choice stands against the ideal (againstIdeal) and what it leaves out (leftOut). Give one reason',
          'for rejecting each other option. The ideal needing outside changes is no reason to block; answer',
          'status "blocked" with a blocker only when no option within scope can meet the success criteria.',
        ].join('\n'),
      expectedOutput:
        '{ "status": "ready" | "blocked", "chosen": "<option id>", "why": string, "againstIdeal": string, "leftOut": [string], "rejected": [{ "id": string, "reason": string }], "blocker"?: string }',
      validate: checkChoice,
    }),
    plan: agent({
      statusDetail: 'writing the implementation plan',
      timeoutMs: PLAN_TIMEOUT_MS,
      prompt: ({ input, outputs }) => {
        const chosen = outputs.options.options.find((o) => o.id === outputs.choose.chosen);
        return [
          context(input),
          `Frame: ${JSON.stringify(outputs.frame)}`,
          `Chosen approach: ${JSON.stringify(chosen)}`,
          `How it stands against the ideal: ${outputs.choose.againstIdeal}`,
          '',
          'Write the implementation plan for the chosen approach: a summary, then ordered steps small',
          'enough to review one by one (each with what to do and the files it touches), the checks that',
          "prove it works (the project's own tests and commands), and the risks. Cover changed interfaces,",
          'compatibility and failure handling where they apply; stay within the scope.',
          input.previousPlan === undefined ? null : 'Where the new evidence or the instructions show the earlier plan wrong, correct it.',
          'Do not implement it.',
        ]
          .filter((l) => l !== null)
          .join('\n');
      },
      expectedOutput:
        '{ "summary": string, "steps": [{ "title": string, "detail": string, "files"?: [string] }], "checks": [string], "risks": [string] }',
      validate: checkPlan,
    }),
    ready: compute({
      run: ({ input, outputs }) => {
        const digest = planDigest(outputs.plan);
        const previous = input.previousPlan === undefined ? undefined : planDigest(input.previousPlan);
        return {
          status: 'ready',
          task: input.task,
          frame: outputs.frame,
          proposal: outputs.options,
          ideal: outputs.ideal,
          selection: outputs.choose,
          plan: outputs.plan,
          planDigest: digest,
          ...(previous === undefined ? {} : { previousPlanDigest: previous }),
          changed: previous === undefined || previous !== digest,
        };
      },
    }),
    blocked: compute({
      run: ({ input, outputs }) => ({
        status: 'blocked',
        task: input.task,
        frame: outputs.frame,
        proposal: outputs.options,
        ideal: outputs.ideal,
        selection: outputs.choose,
        reason: outputs.choose.blocker,
      }),
    }),
  },
  edges: [
    { from: 'frame', to: 'options' },
    { from: 'options', to: 'ideal' },
    { from: 'ideal', to: 'choose' },
    { from: 'choose', switch: { on: '$.status', cases: { ready: 'plan', blocked: 'blocked' } } },
    { from: 'plan', to: 'ready' },
  ],
});
