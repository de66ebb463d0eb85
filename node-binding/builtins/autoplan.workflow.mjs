// autoplan: from a problem to an implementation plan. The model frames the problem, lays out
// the practical ways to solve it, picks one (or says why it cannot), and writes the plan for
// the pick. Nothing is changed in the project: every step only reads and answers.
// Exits: `ready` (the plan and its digest) or `blocked` (why no plan can be made now).
import { agent, compute, defineWorkflow } from '../index.js';
import { checkPlan, optionalText, planDigest, record, text, texts } from './plan.mjs';

const OPTION_ID = /^[a-z][a-z0-9-]{0,40}$/;

/** `{ task (or problem), scope?, constraints?, previousPlan?, feedback? }`. */
function readInput(raw) {
  const input = record(raw ?? {}, 'autoplan input');
  const task = input.task ?? input.problem;
  return {
    task: text(task, 'autoplan input task (the problem to plan for; `problem` also works)', 8_000),
    scope: optionalText(input.scope, 'autoplan input scope', 4_000),
    constraints: texts(input.constraints, 'autoplan input constraints'),
    ...(input.previousPlan === undefined ? {} : { previousPlan: input.previousPlan }),
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
    input.feedback ? `What the person asked to change: ${input.feedback}` : null,
  ]
    .filter(Boolean)
    .join('\n');

export default defineWorkflow({
  name: 'autoplan',
  title: ({ input }) => `autoplan: ${input.task.slice(0, 60)}`,
  input: readInput,
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
          'approaches that reuse what the project already has; leave out ones that need changes outside it.',
        ].join('\n'),
      expectedOutput: '{ "options": [{ "id": "lowercase-id", "title": string, "approach": string, "tradeoffs": [string] }] }',
      validate: checkOptions,
    }),
    choose: agent({
      statusDetail: 'choosing an approach',
      prompt: ({ input, outputs }) =>
        [
          context(input),
          `Frame: ${JSON.stringify(outputs.frame)}`,
          `Options: ${JSON.stringify(outputs.options.options)}`,
          '',
          'Choose the best practical option yourself (do not ask the person): the one that meets the',
          'success criteria with the least new machinery and risk. Give one reason for rejecting each',
          'other option. If no option can be carried out now (missing access, a decision only someone',
          'else can make, a contradiction in the request), answer status "blocked" and name the blocker.',
        ].join('\n'),
      expectedOutput:
        '{ "status": "ready" | "blocked", "chosen": "<option id>", "why": string, "rejected": [{ "id": string, "reason": string }], "blocker"?: string }',
      validate: checkChoice,
    }),
    plan: agent({
      statusDetail: 'writing the implementation plan',
      prompt: ({ input, outputs }) => {
        const chosen = outputs.options.options.find((o) => o.id === outputs.choose.chosen);
        return [
          context(input),
          `Frame: ${JSON.stringify(outputs.frame)}`,
          `Chosen approach: ${JSON.stringify(chosen)}`,
          '',
          'Write the implementation plan for the chosen approach: a summary, then ordered steps small',
          'enough to review one by one (each with what to do and the files it touches), the checks that',
          'prove it works (the project\'s own tests and commands), and the risks. Do not implement it.',
        ].join('\n');
      },
      expectedOutput:
        '{ "summary": string, "steps": [{ "title": string, "detail": string, "files"?: [string] }], "checks": [string], "risks": [string] }',
      validate: checkPlan,
    }),
    ready: compute({
      run: ({ input, outputs }) => ({
        status: 'ready',
        task: input.task,
        frame: outputs.frame,
        options: outputs.options.options,
        choice: outputs.choose,
        plan: outputs.plan,
        planDigest: planDigest(outputs.plan),
      }),
    }),
    blocked: compute({
      run: ({ input, outputs }) => ({
        status: 'blocked',
        task: input.task,
        frame: outputs.frame,
        options: outputs.options.options,
        choice: outputs.choose,
        reason: outputs.choose.blocker,
      }),
    }),
  },
  edges: [
    { from: 'frame', to: 'options' },
    { from: 'options', to: 'choose' },
    { from: 'choose', switch: { on: '$.status', cases: { ready: 'plan', blocked: 'blocked' } } },
    { from: 'plan', to: 'ready' },
  ],
});
