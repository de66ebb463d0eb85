// The controller authoring API: `defineController({ name, initialStatus, reconcile })` and the
// three results a pass returns (`settled`, `requeue`, `requeueAfter(ms)`), each optionally
// carrying a status patch.
import { ControllerError } from './errors.js';

const CONTROLLER = Symbol.for('piw.controller');
/** A controller's name: a lower-case word with dashes (`pull-request`). */
export const CONTROLLER_NAME = /^[a-z][a-z0-9-]*$/;

const invalid = (message) => new ControllerError('invalid_controller', message);

/** Throws a `ControllerError` (`invalid_controller`) naming what is wrong and what to write instead. */
export function assertValidControllerDefinition(definition) {
  if (definition === null || typeof definition !== 'object' || Array.isArray(definition)) {
    throw invalid('defineController takes one object: defineController({ name, initialStatus, reconcile })');
  }
  if (typeof definition.name !== 'string' || !CONTROLLER_NAME.test(definition.name)) {
    throw invalid(`controller name ${JSON.stringify(definition.name)} must be lower-case letters, digits and dashes, starting with a letter (such as "pull-request")`);
  }
  if (typeof definition.initialStatus !== 'function') {
    throw invalid(`controller "${definition.name}": initialStatus must be a function of the spec returning the controller's first status, such as initialStatus: () => ({ phase: "observing" })`);
  }
  if (typeof definition.reconcile !== 'function') {
    throw invalid(`controller "${definition.name}": reconcile must be a function (ctx, resource) returning ctx.settled(), ctx.requeue() or ctx.requeueAfter(ms)`);
  }
  if (definition.timeoutMs !== undefined && (!Number.isSafeInteger(definition.timeoutMs) || definition.timeoutMs <= 0)) {
    throw invalid(`controller "${definition.name}": timeoutMs must be a positive whole number of milliseconds, not ${JSON.stringify(definition.timeoutMs)}`);
  }
}

/** Defines a controller; export it as the module's default. Throws what is wrong with it. */
export function defineController(definition) {
  assertValidControllerDefinition(definition);
  if (!isControllerDefinition(definition)) {
    Object.defineProperty(definition, CONTROLLER, { value: true, enumerable: false });
  }
  return definition;
}

/** Whether `value` came from `defineController`. */
export function isControllerDefinition(value) {
  return value !== null && typeof value === 'object' && value[CONTROLLER] === true;
}

function withStatus(result, status) {
  return status === undefined ? result : { ...result, status };
}

/** No further pass until something changes (a new spec, a deletion, a child run ending, an event). */
export function settled(status) {
  return withStatus({ kind: 'settled' }, status);
}

/** Another pass as soon as a worker is free. */
export function requeue(status) {
  return withStatus({ kind: 'requeue' }, status);
}

/** Another pass after `afterMs` milliseconds (a positive whole number). */
export function requeueAfter(afterMs, status) {
  if (!Number.isSafeInteger(afterMs) || afterMs <= 0) {
    throw new ControllerError('invalid_result', `requeueAfter takes a positive whole number of milliseconds, not ${JSON.stringify(afterMs)}; use requeue() for another pass at once`);
  }
  return withStatus({ kind: 'requeue', afterMs }, status);
}

/** The result helpers a pass's context carries (`ctx.settled`, ...). */
export function createResultHelpers() {
  return { settled, requeue, requeueAfter };
}

const PATCH_FIELDS = new Set(['controllerStatus', 'conditions', 'workflowRun', 'finalizers']);

/**
 * Checks what `reconcile` returned: one of the three results, its status patch made of the
 * known fields. Throws a `ControllerError` (`invalid_result`) saying what to return instead.
 */
export function assertReconcileResult(result) {
  const use = 'return ctx.settled(status?), ctx.requeue(status?) or ctx.requeueAfter(ms, status?)';
  if (result === null || typeof result !== 'object') {
    throw new ControllerError('invalid_result', `reconcile returned ${result === undefined ? 'nothing' : JSON.stringify(result)}; ${use}`);
  }
  if (result.kind !== 'settled' && result.kind !== 'requeue') {
    throw new ControllerError('invalid_result', `reconcile returned a result of kind ${JSON.stringify(result.kind)}; ${use}`);
  }
  if (result.kind === 'settled' && result.afterMs !== undefined) {
    throw new ControllerError('invalid_result', 'a settled result has no afterMs; use ctx.requeueAfter(ms) for a later pass');
  }
  if (result.kind === 'requeue' && result.afterMs !== undefined && (!Number.isSafeInteger(result.afterMs) || result.afterMs <= 0)) {
    throw new ControllerError('invalid_result', `requeue afterMs must be a positive whole number of milliseconds, not ${JSON.stringify(result.afterMs)}`);
  }
  const patch = result.status;
  if (patch === undefined) return;
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) {
    throw new ControllerError('invalid_result', `a result's status must be an object { controllerStatus?, conditions?, workflowRun?, finalizers? }, not ${JSON.stringify(patch)}`);
  }
  for (const k of Object.keys(patch)) {
    if (!PATCH_FIELDS.has(k)) {
      throw new ControllerError('invalid_result', `a result's status has no field "${k}"; it takes controllerStatus, conditions, workflowRun and finalizers (put your own fields in controllerStatus)`);
    }
  }
  if (patch.conditions !== undefined && !Array.isArray(patch.conditions)) {
    throw new ControllerError('invalid_result', "a result's status.conditions must be an array of conditions");
  }
}
