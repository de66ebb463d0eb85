// monitor: sees a goal through to its end, checking on a schedule. Each check is a read-only
// look at the real target (the model uses its ordinary tools) that ends in one of four routes:
// `done` (the goal holds), `blocked` (it cannot go on safely, or needs a decision nobody gave),
// `wait` (work is moving, or something outside must happen first) and `act` (the goal is not
// reached, nothing is moving, and a step the task already allows would move it). A `wait`
// reports what was seen without a model turn (a message, and the check's progress tracks with
// their ETA in the widget and `piw view`) and then sleeps on a durable timer: no process runs
// and no child slot is held until the next check, and the timer survives host restarts. An
// `act` does one step: `advance` or `recover` in one agent step, `repair` (a defect in code or
// configuration) through plan-change and autoimplement; the next check follows at once, never
// after a sleep, so every action is verified. Bounded: at most `maxChecks` checks, a few actions
// per failure, and one repair per failure and target state.
// `repair: false` makes it observe only (no `act` at all); `repair: { approval, scope,
// constraints, repository }` shapes the repairs. A check (and an action) that outlasts
// `checkTimeoutMinutes` ends the monitor `blocked`.
// Exits: `done`, `blocked` (with the stage and why) and `limit` (the checks ran out; what the
// last check saw); each result has `reason`, `observation`, `goalState`, `workState`, `checks`.
import { realpathSync } from 'node:fs';
import { isAbsolute } from 'node:path';

import { action, agent, compute, defineWorkflow, idempotentEffect, includeWorkflow, notify, wait } from '../index.js';
import autoimplement from './autoimplement.workflow.mjs';
import planChange from './plan-change.workflow.mjs';
import { record, text, texts } from './plan.mjs';

export const DEFAULT_EVERY_MINUTES = 30;
export const DEFAULT_MAX_CHECKS = 1_000;
/** Direct actions (`advance`, `recover`) taken for one failure before the monitor stops. */
const MAX_ACTIONS_PER_FAILURE = 3;
const DEFAULT_STOP_WHEN = 'Only when the person explicitly asks to stop.';
/** A check's (and an action's) bound: at least an hour, and at least the interval. */
const MIN_CHECK_TIMEOUT_MINUTES = 60;
const INPUT_KEYS = ['task', 'stopWhen', 'everyMinutes', 'maxChecks', 'checkTimeoutMinutes', 'repair'];
const REPAIR_KEYS = ['authorized', 'approval', 'scope', 'constraints', 'repository', 'baseBranch', 'merge'];
const APPROVAL_KEYS = ['mode', 'audience', 'timeoutMinutes', 'maxReplans'];
const ROUTES = ['done', 'blocked', 'wait', 'act'];
const GOAL_STATES = ['complete', 'incomplete', 'blocked'];
const WORK_STATES = ['running', 'waiting', 'idle', 'failed', 'stopped', 'unknown'];
const ACTION_KINDS = ['advance', 'recover', 'repair'];
const TRACK_STATUSES = ['pending', 'running', 'waiting', 'blocked', 'failed', 'completed'];
const ID = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;

/** An integer input from `min` to `max`, `fallback` when absent. */
function bounded(value, fallback, what, min, max) {
  const n = value ?? fallback;
  if (!(Number.isSafeInteger(n) && n >= min && n <= max)) throw new Error(`monitor ${what} must be an integer from ${min} to ${max}`);
  return n;
}

/**
 * The repair policy: absent, repairs are allowed (with plan-change's approval of their plan);
 * `false`, the monitor only observes; an object shapes the repairs.
 */
function readRepair(value) {
  if (value === false) return { authorized: false };
  if (value === undefined || value === null) return { authorized: true };
  const repair = record(value, 'monitor input repair (false to only observe, or { approval?, scope?, constraints?, repository? })');
  const unknown = Object.keys(repair).find((k) => !REPAIR_KEYS.includes(k));
  if (unknown) throw new Error(`monitor input repair.${unknown} is not supported (it takes ${REPAIR_KEYS.join(', ')})`);
  if (repair.authorized !== undefined && repair.authorized !== true) {
    throw new Error('monitor input repair.authorized must be true when given; to only observe, give repair: false');
  }
  if (repair.merge !== undefined && typeof repair.merge !== 'boolean') {
    throw new Error('monitor input repair.merge must be true (a repair merges its pull request once CI is green) or false (the default: it leaves it ready)');
  }
  let approval;
  if (repair.approval !== undefined) {
    approval = record(repair.approval, 'monitor input repair.approval');
    const bad = Object.keys(approval).find((k) => !APPROVAL_KEYS.includes(k));
    if (bad) throw new Error(`monitor input repair.approval.${bad} is not supported (it takes ${APPROVAL_KEYS.join(', ')})`);
  }
  let repository;
  if (repair.repository !== undefined) {
    repository = text(repair.repository, 'monitor input repair.repository', 4_000);
    if (!isAbsolute(repository)) throw new Error('monitor input repair.repository must be an absolute path (the project the monitor runs in)');
  }
  return {
    authorized: true,
    ...(approval ? { approval } : {}),
    ...(repair.scope === undefined ? {} : { scope: text(repair.scope, 'monitor input repair.scope', 4_000) }),
    ...(repair.constraints === undefined ? {} : { constraints: texts(repair.constraints, 'monitor input repair.constraints', { max: 32, chars: 2_000 }) }),
    ...(repository ? { repository } : {}),
    // Passed on to autoimplement, which checks the branch name and merges only when `true`.
    ...(repair.baseBranch === undefined ? {} : { baseBranch: repair.baseBranch }),
    ...(repair.merge === undefined ? {} : { merge: repair.merge }),
  };
}

/**
 * `{ task, stopWhen?, everyMinutes?, maxChecks?, checkTimeoutMinutes?, repair? }`; anything
 * else is refused before the run starts.
 */
function readInput(raw) {
  const input = record(raw ?? {}, 'monitor input');
  const unknown = Object.keys(input).find((k) => !INPUT_KEYS.includes(k));
  if (unknown) throw new Error(`monitor input ${unknown} is not supported (it takes ${INPUT_KEYS.join(', ')})`);
  const everyMinutes = bounded(input.everyMinutes, DEFAULT_EVERY_MINUTES, 'everyMinutes', 1, 1_440);
  return {
    task: text(input.task, 'monitor input task (the goal, what the monitor may do, and its limits)', 8_000),
    stopWhen: input.stopWhen === undefined || input.stopWhen === null ? DEFAULT_STOP_WHEN : text(input.stopWhen, 'monitor input stopWhen', 4_000),
    everyMinutes,
    maxChecks: bounded(input.maxChecks, DEFAULT_MAX_CHECKS, 'maxChecks', 1, 1_000),
    checkTimeoutMinutes: bounded(input.checkTimeoutMinutes, Math.max(MIN_CHECK_TIMEOUT_MINUTES, everyMinutes), 'checkTimeoutMinutes', 5, 1_440),
    repair: readRepair(input.repair),
  };
}

function oneOf(value, allowed, what) {
  if (!allowed.includes(value)) throw new Error(`${what} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return value;
}

function stableId(value, what) {
  const id = text(value, what, 128);
  if (!ID.test(id)) throw new Error(`${what} must match ${ID.source} (the same text for the same facts, check after check)`);
  return id;
}

/** The check's progress tracks: `[{ key, label, status, completed?, total?, unit? }]`, at most 8. */
function checkTracks(value) {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.length > 8) throw new Error('progress must be an array of at most 8 tracks');
  const keys = new Set();
  return value.map((t, i) => {
    const track = record(t, `progress[${i}]`);
    const key = stableId(track.key, `progress[${i}].key`);
    if (keys.has(key)) throw new Error(`progress[${i}].key ${key} is given twice`);
    keys.add(key);
    const out = { key, label: text(track.label, `progress[${i}].label`, 200), status: oneOf(track.status, TRACK_STATUSES, `progress[${i}].status`) };
    if (track.completed !== undefined || track.total !== undefined) {
      const { completed, total } = track;
      if (!(Number.isFinite(completed) && completed >= 0)) throw new Error(`progress[${i}].completed must be a number, at least 0`);
      if (!(Number.isFinite(total) && total > 0 && total >= completed)) throw new Error(`progress[${i}].total must be a number above 0, at least completed`);
      Object.assign(out, { completed, total, unit: text(track.unit, `progress[${i}].unit (what is counted)`, 32) });
    }
    return out;
  });
}

/** What the read-only check saw, and its route; `observeOnly` refuses every action. */
function checkObservation(value, observeOnly = false) {
  const seen = record(value, 'the check');
  const route = oneOf(seen.route, ROUTES, 'route');
  if (route === 'act' && observeOnly) throw new Error('this monitor only observes (its input says repair: false): choose "wait", "done" or "blocked"');
  const out = {
    route,
    summary: text(seen.summary, 'summary (what you saw, in a sentence or two)', 2_000),
    goal: oneOf(seen.goal, GOAL_STATES, 'goal'),
    work: oneOf(seen.work, WORK_STATES, 'work'),
    evidence: texts(seen.evidence, 'evidence (the facts you read, where you read them)', { min: 1, max: 16, chars: 2_000 }),
    progress: checkTracks(seen.progress),
  };
  if (route === 'done' && out.goal !== 'complete') throw new Error('route "done" needs goal "complete": say what is left, or choose another route');
  if (route !== 'done' && out.goal === 'complete') throw new Error('goal "complete" needs route "done"');
  if ((route === 'wait' || route === 'act') && out.goal !== 'incomplete') throw new Error(`route "${route}" needs goal "incomplete"`);
  if (route === 'act' && !['idle', 'failed', 'stopped'].includes(out.work)) throw new Error('route "act" needs work "idle", "failed" or "stopped": while work is running or waiting, choose "wait"');
  if (route === 'blocked') out.reason = text(seen.reason, 'reason (what stops the monitor, or the decision it needs)', 4_000);
  else if (seen.reason !== undefined && seen.reason !== null) out.reason = text(seen.reason, 'reason', 4_000);
  if (route === 'act') {
    const a = record(seen.action, 'action (required with route "act")');
    out.action = {
      kind: oneOf(a.kind, ACTION_KINDS, 'action.kind'),
      what: text(a.what, 'action.what (what is incomplete)', 2_000),
      next: text(a.next, 'action.next (the exact step to take)', 4_000),
      authority: text(a.authority, 'action.authority (where the task or the project allows it)', 2_000),
      changes: texts(a.changes, 'action.changes (files, systems or resources it may change)', { min: 1, max: 32, chars: 400 }),
      verify: text(a.verify, 'action.verify (how the next check tells it worked)', 2_000),
      failureId: stableId(a.failureId, 'action.failureId'),
      stateId: stableId(a.stateId, 'action.stateId'),
    };
  }
  return out;
}

function checkActionResult(value) {
  const result = record(value, 'the result');
  return {
    status: oneOf(result.status, ['done', 'failed', 'blocked'], 'status'),
    evidence: texts(result.evidence, 'evidence (what you did and what you saw after)', { min: 1, max: 16, chars: 2_000 }),
  };
}

/** The task, its stop condition, and what the last check and action showed. */
function briefing({ input, outputs }) {
  const last = outputs.observe;
  const t = outputs.tally;
  const outcome =
    t?.route === 'direct' && outputs.act
      ? ` It ended ${outputs.act.status}: ${outputs.act.evidence.join(' ')}`
      : t?.route === 'repair' && outputs.implement
        ? ` The repair ended ${outputs.implement.exit}.`
        : '';
  const acted = t?.lastAction ? `${t.lastAction}.${outcome}` : null;
  return [
    `Task (the goal, what you may do, and the limits): ${input.task}`,
    `Stop when: ${input.stopWhen}`,
    last ? `The previous check saw: ${last.summary}` : 'This is the first check.',
    acted ? `Since then: ${acted}` : null,
  ]
    .filter(Boolean)
    .join('\n');
}

const observe = agent({
  statusDetail: 'checking the target',
  timeoutMs: ({ input }) => input.checkTimeoutMinutes * 60_000,
  prompt: (ctx) =>
    [
      briefing(ctx),
      '',
      `Check ${ctx.outputs.tally ? ctx.outputs.tally.checks + 1 : 1} of at most ${ctx.input.maxChecks}. Look at the real target with`,
      'your tools, and change NOTHING: read files, logs, outputs and the state of the systems',
      "the task names. This workflow's own state is no evidence that any work is running. Then",
      'answer with one route:',
      '- "done": the goal holds now (goal "complete");',
      '- "blocked": it cannot go on safely, or the next step needs authority the task does not give',
      '  (spending, a change it forbids, a decision): say what in `reason`;',
      '- "wait": work is moving, or something outside must happen first;',
      ...(ctx.input.repair.authorized
        ? [
            '- "act": the goal is not reached, nothing is moving, and one step the task already allows',
            '  would move it: "advance" (start or continue the work), "recover" (restart or resume it',
            '  after it stopped) or "repair" (fix a defect in code or configuration). Give the same',
            '  `failureId` and `stateId` for the same facts as an earlier check did.',
          ]
        : ['This monitor only observes: it takes no action of any kind, so never answer "act".']),
      '`goal` is "complete", "incomplete" or "blocked"; `work` (the target\'s own work, not this',
      'monitor) is "running", "waiting" (on something outside), "idle", "failed", "stopped" or "unknown".',
      'Counted work (items, modules, steps) goes in `progress` as tracks with `completed` and `total`.',
    ].join('\n'),
  expectedOutput:
    '{ "route": "done" | "blocked" | "wait" | "act", "summary": string, "goal": "complete" | "incomplete" | "blocked", ' +
    '"work": "running" | "waiting" | "idle" | "failed" | "stopped" | "unknown", "evidence": [string], ' +
    '"progress"?: [{ "key": string, "label": string, "status": "running" | "waiting" | "blocked" | "failed" | "completed" | "pending", "completed"?: number, "total"?: number, "unit"?: string }], ' +
    '"reason"?: string, "action"?: { "kind": "advance" | "recover" | "repair", "what": string, "next": string, "authority": string, ' +
    '"changes": [string], "verify": string, "failureId": string, "stateId": string } }',
  validate: (output, { input }) => checkObservation(output, !input.repair.authorized),
});

/**
 * After each check: how many there were, which failures were acted on and repaired, and where
 * the monitor goes next. A repair of a failure whose facts come back unchanged, or one action
 * too many for one failure, ends the monitor instead of looping.
 */
const tally = compute({
  run: ({ input, outputs }) => {
    const before = outputs.tally ?? { checks: 0, actions: {}, repaired: [] };
    const seen = outputs.observe;
    const checks = before.checks + 1;
    const actions = { ...before.actions };
    const repaired = [...before.repaired];
    const next = (route, extra = {}) => ({ checks, actions, repaired, route, lastAction: null, ...extra });
    if (seen.route === 'done' || seen.route === 'blocked') return next(seen.route);
    if (checks >= input.maxChecks) return next('limit');
    if (seen.route === 'wait') return next('wait');
    const a = seen.action;
    if (a.kind === 'repair') {
      const key = `${a.failureId}@${a.stateId}`;
      if (repaired.includes(key)) {
        return next('stop', { reason: `the repair of ${a.failureId} did not change what the check sees (${a.stateId}); not repairing it again` });
      }
      repaired.push(key);
      return next('repair', { lastAction: `a repair of ${a.failureId}: ${a.next}` });
    }
    actions[a.failureId] = (actions[a.failureId] ?? 0) + 1;
    if (actions[a.failureId] > MAX_ACTIONS_PER_FAILURE) {
      return next('stop', { reason: `${MAX_ACTIONS_PER_FAILURE} actions for ${a.failureId} did not resolve it` });
    }
    return next('direct', { lastAction: `${a.kind}: ${a.next}` });
  },
});

const act = agent({
  statusDetail: 'acting on the last check',
  timeoutMs: ({ input }) => input.checkTimeoutMinutes * 60_000,
  prompt: (ctx) => {
    const a = ctx.outputs.observe.action;
    return [
      briefing(ctx),
      '',
      `Take exactly this step (${a.kind}), nothing more: ${a.next}`,
      `Why it is allowed: ${a.authority}`,
      `It may change only: ${a.changes.join('; ')}`,
      `How it will be checked: ${a.verify}`,
      'If it turns out to need anything beyond that, stop and answer "blocked". Answer "failed" when you',
      'tried and it did not work. The next check will look at the result.',
    ].join('\n');
  },
  expectedOutput: '{ "status": "done" | "failed" | "blocked", "evidence": [string] }',
  validate: checkActionResult,
});

/** The check's tracks as durable progress updates (the widget and `piw view` show their ETA). */
const report = action({
  effect: idempotentEffect('monitor.progress'),
  run: ({ outputs, publishUpdate }) => {
    const seen = outputs.observe;
    for (const t of seen.progress) {
      const { key, label, status, ...counts } = t;
      publishUpdate({ type: 'progress', key: `monitor/${key}`, data: { schema: 'pi-workflows.progress.v1', label, status, ...counts } });
    }
    return { tracks: seen.progress.length };
  },
});

/**
 * The node whose step outlasted `checkTimeoutMinutes` and ended the monitor: `observe`, `act`,
 * or null. A step that timed out routes straight to `blocked`, so its latest result tells.
 */
function lateNode(results) {
  if (results.observe?.outcome === 'timed_out') return 'observe';
  if (results.act?.outcome === 'timed_out') return 'act';
  return null;
}

/**
 * The fields every exit's result has: why it ended, what the last check saw (its goal and the
 * target's work), how many checks ran, and the last repair's result when one ran. `reported`:
 * the run's end message carries this result to the session that started it.
 */
function finishFields(outputs, reason, goalState) {
  const seen = outputs.observe;
  return {
    reason,
    observation: seen?.summary ?? null,
    goalState: goalState ?? seen?.goal ?? 'incomplete',
    workState: seen?.work ?? 'unknown',
    checks: outputs.tally?.checks ?? 0,
    reported: true,
    ...(outputs.implement ? { repair: { exit: outputs.implement.exit, output: outputs.implement.output } } : {}),
  };
}

export default defineWorkflow({
  name: 'monitor',
  title: ({ input }) => `monitor: ${input.task.slice(0, 60)}`,
  input: readInput,
  startAt: 'prepare',
  // The most a run may take (the host's bound): a check is at most five steps, so 1,000 checks
  // and their repairs fit.
  maxSteps: 10_000,
  includes: {
    // The repair's plan, approved as `repair.approval` says (plan-change's own default: a
    // person decides) before anything changes.
    plan: includeWorkflow(planChange, {
      input: ({ input, outputs }) => {
        const a = outputs.observe.action;
        const { repair } = input;
        return {
          task: `${a.what}\n\nFix: ${a.next}`,
          constraints: [`Within the monitor's task: ${input.task}`, `It may change only: ${a.changes.join('; ')}`, `Verified by: ${a.verify}`, ...(repair.constraints ?? [])],
          ...(repair.scope ? { scope: repair.scope } : {}),
          ...(repair.approval ? { approval: repair.approval } : {}),
        };
      },
    }),
    implement: includeWorkflow(autoimplement, {
      input: ({ input, outputs }) => {
        const { repair } = input;
        const scope = [repair.scope, ...(repair.constraints ?? []).map((c) => `Constraint: ${c}`)].filter(Boolean).join('\n');
        return {
          task: outputs.plan.output.task,
          plan: outputs.plan.output.plan,
          planDigest: outputs.plan.output.planDigest,
          // plan-change documented it: autoimplement does not document it again.
          documentation: { status: 'current', planDigest: outputs.plan.output.planDigest, documents: outputs.plan.output.documents },
          ...(scope ? { scope } : {}),
          ...(repair.baseBranch === undefined ? {} : { baseBranch: repair.baseBranch }),
          ...(repair.merge === undefined ? {} : { merge: repair.merge }),
        };
      },
    }),
  },
  exits: { done: { from: 'done' }, blocked: { from: 'blocked' }, limit: { from: 'limit' } },
  nodes: {
    // A repair works in the project the monitor runs in: a `repair.repository` naming another
    // fails the run here, before any check, saying where to start it instead.
    prepare: compute({
      run: ({ input, state }) => {
        const where = input.repair.repository;
        if (where) {
          let same = false;
          try {
            same = realpathSync(where) === realpathSync(state.projectDir);
          } catch {
            // a path that does not exist is not the project: said below
          }
          if (!same) throw new Error(`monitor input repair.repository ${where} is not the project this run works in (${state.projectDir}): start the monitor from ${where}, or leave repair.repository out`);
        }
        return { checkTimeoutMinutes: input.checkTimeoutMinutes, repair: input.repair.authorized ? 'authorized' : 'observe only' };
      },
    }),
    observe,
    tally,
    act,
    // The action's answer, to route on (an `act` that timed out routes to `blocked` instead).
    acted: compute({ run: ({ outputs }) => outputs.act }),
    report,
    tell: notify({
      kind: 'progress',
      message: ({ input, outputs }) =>
        `Monitor check ${outputs.tally.checks}: ${outputs.observe.summary} Next check in ${input.everyMinutes} min.`,
    }),
    sleep: wait({ for: ({ input }) => input.everyMinutes * 60_000 }),
    done: compute({
      run: ({ outputs }) => ({
        status: 'done',
        ...finishFields(outputs, outputs.observe.reason ?? `the goal holds: ${outputs.observe.summary}`),
        summary: outputs.observe.summary,
        evidence: outputs.observe.evidence,
      }),
    }),
    limit: compute({
      run: ({ input, outputs }) => ({
        status: 'limit',
        ...finishFields(outputs, `reached the limit of ${input.maxChecks} checks`),
        summary: outputs.observe.summary,
      }),
    }),
    // Reached from a blocked check, an action that was blocked, a repair that was refused or
    // did not help, or too many actions for one failure.
    blocked: compute({
      run: ({ input, outputs, results }) => {
        const t = outputs.tally;
        const why =
          lateNode(results) === 'observe'
            ? { stage: 'check', reason: `a check gave no answer within checkTimeoutMinutes (${input.checkTimeoutMinutes} minutes)` }
            : lateNode(results) === 'act'
              ? { stage: 'act', reason: `the action gave no result within checkTimeoutMinutes (${input.checkTimeoutMinutes} minutes)` }
              : outputs.observe.route === 'blocked'
            ? { stage: 'check', reason: outputs.observe.reason }
            : t.route === 'stop'
              ? { stage: 'act', reason: t.reason }
              : t.route === 'repair'
                ? outputs.plan.exit === 'blocked'
                  ? { stage: 'repair-plan', reason: outputs.plan.output.reason }
                  : { stage: 'repair', reason: outputs.implement.output.reason }
                : { stage: 'act', reason: `the action was blocked: ${outputs.act.evidence.join(' ')}` };
        return { status: 'blocked', ...finishFields(outputs, why.reason, 'blocked'), summary: outputs.observe?.summary ?? null, ...why };
      },
    }),
  },
  edges: [
    { from: 'prepare', to: 'observe' },
    { from: 'observe', switch: { on: '$result.outcome', cases: { ok: 'tally', timed_out: 'blocked' } } },
    {
      from: 'tally',
      switch: { on: '$.route', cases: { done: 'done', blocked: 'blocked', stop: 'blocked', limit: 'limit', wait: 'report', direct: 'act', repair: 'plan' } },
    },
    { from: 'act', switch: { on: '$result.outcome', cases: { ok: 'acted', timed_out: 'blocked' } } },
    { from: 'acted', switch: { on: '$.status', cases: { done: 'observe', failed: 'observe', blocked: 'blocked' } } },
    { from: 'report', to: 'tell' },
    { from: 'tell', to: 'sleep' },
    { from: 'sleep', to: 'observe' },
    { from: 'plan.ready', to: 'implement' },
    { from: 'plan.blocked', to: 'blocked' },
    { from: 'implement.completed', to: 'observe' },
    { from: 'implement.blocked', to: 'blocked' },
  ],
});
