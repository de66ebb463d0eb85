// Conditions: the latest known state of one stable aspect of a resource (`Ready`, `Merged`),
// keyed by `type`. `lastTransitionTime` says when `status` last changed: a pass that reports
// the same status again (with another reason or message) keeps the time.
import { ControllerError } from './errors.js';

const STATUSES = [true, false, 'unknown'];
const bad = (message) => new ControllerError('invalid_condition', message);

/** Checks a condition input `{ type, status, reason, message? }`. */
export function assertCondition(value) {
  if (value === null || typeof value !== 'object') throw bad(`a condition must be an object; build one with conditionTrue/conditionFalse/conditionUnknown(type, reason, message)`);
  if (typeof value.type !== 'string' || value.type.trim() === '') throw bad('a condition needs a non-empty type (such as "Ready")');
  if (typeof value.reason !== 'string' || value.reason.trim() === '') throw bad(`condition ${JSON.stringify(value.type)} needs a non-empty reason (such as "ChecksPending")`);
  if (!STATUSES.includes(value.status)) {
    throw bad(`condition ${JSON.stringify(value.type)} has status ${JSON.stringify(value.status)}; use true, false or "unknown"`);
  }
  if (value.message !== undefined && typeof value.message !== 'string') throw bad(`condition ${JSON.stringify(value.type)}'s message must be a string`);
}

function condition(type, status, reason, message) {
  const value = { type, status, reason, ...(message !== undefined ? { message } : {}) };
  assertCondition(value);
  return value;
}

/** A condition input whose status is `true`. */
export const conditionTrue = (type, reason, message) => condition(type, true, reason, message);
/** A condition input whose status is `false`. */
export const conditionFalse = (type, reason, message) => condition(type, false, reason, message);
/** A condition input whose status is `"unknown"`. */
export const conditionUnknown = (type, reason, message) => condition(type, 'unknown', reason, message);

/**
 * `current` conditions with `updates` merged by type: each update takes `observedGeneration`
 * `generation`, and keeps the previous `lastTransitionTime` when its status is the same, else
 * takes `now`. Conditions not updated stay as they were. A type updated twice is refused.
 */
export function mergeConditions(current, updates, generation, now) {
  const byType = new Map(current.map((c) => [c.type, c]));
  const seen = new Set();
  for (const update of updates) {
    assertCondition(update);
    if (seen.has(update.type)) throw bad(`condition ${JSON.stringify(update.type)} was set twice in one pass; set each type once`);
    seen.add(update.type);
    const previous = byType.get(update.type);
    byType.set(update.type, {
      type: update.type,
      status: update.status,
      reason: update.reason,
      ...(update.message !== undefined ? { message: update.message } : {}),
      observedGeneration: generation,
      lastTransitionTime: previous !== undefined && previous.status === update.status ? previous.lastTransitionTime : now,
    });
  }
  return [...byType.values()];
}

/**
 * The status after a pass: `observedGeneration` the generation the pass read, conditions
 * merged, `controllerStatus` replaced when the patch has one, `workflowRun` replaced (or
 * removed by `null`) when the patch has one.
 */
export function applyStatusPatch(current, patch, generation, now) {
  const next = {
    observedGeneration: generation,
    conditions: mergeConditions(current.conditions ?? [], patch?.conditions ?? [], generation, now),
    controllerStatus: patch !== undefined && Object.hasOwn(patch, 'controllerStatus') ? patch.controllerStatus : current.controllerStatus,
  };
  const run = patch?.workflowRun === undefined ? current.workflowRun : patch.workflowRun;
  if (run !== undefined && run !== null) next.workflowRun = run;
  return next;
}
