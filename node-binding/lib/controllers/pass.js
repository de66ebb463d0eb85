// One reconcile pass: what a controller's child process runs for one resource. It calls the
// controller's `reconcile(ctx, resource)` once, bounded by a deadline, and returns what came of
// it (a typed outcome and the status to commit). It commits nothing itself: the status goes
// back to the host, which writes it with the `resourceVersion` the pass read; effects and child
// runs go through the backend as they happen, so a pass killed half-way is safe to run again.
import { applyStatusPatch, assertCondition } from './conditions.js';
import { assertReconcileResult, createResultHelpers, isControllerDefinition } from './definition.js';
import { BACKEND_METHODS } from './backend.js';
import { boundedMessage, ControllerError, EffectRequestConflictError } from './errors.js';
import { assertFinalizers, assertKey, assertKind, boundedJson, jsonFingerprint } from './resource.js';

/** A pass's deadline when neither the caller nor the definition (`timeoutMs`) gives one. */
export const DEFAULT_PASS_DEADLINE_MS = 60_000;
const LEVELS = ['debug', 'info', 'warn', 'error'];

/** Why a pass's `signal` aborts at its deadline. */
export class PassDeadlineError extends ControllerError {
  constructor(deadlineMs) {
    super('deadline', `the reconcile pass ran past its deadline of ${deadlineMs} ms and was abandoned`);
    this.name = 'PassDeadlineError';
    this.deadlineMs = deadlineMs;
  }
}

/**
 * The backend as this pass sees it: once the pass has ended (an abandoned pass's code may
 * still be running: JavaScript cannot stop a promise), every call is refused, so nothing it
 * does later reaches the store.
 */
function guard(backend, isOver) {
  const out = {};
  for (const m of BACKEND_METHODS) {
    out[m] = async (req) => {
      if (isOver()) throw new ControllerError('pass_abandoned', `the reconcile pass was abandoned; its ${m} was not sent`);
      return backend[m](req);
    };
  }
  return out;
}

/** `ctx.effects`: external effects recorded before they are attempted. */
function effectsFor(resource, backend, signal, touched) {
  let used = false;
  return {
    /** The record kept under `key` for this resource, or null: what an earlier pass did. */
    async get(key) {
      assertKey(key, 'effect key');
      return backend.effect({ resourceUid: resource.metadata.uid, key });
    },
    async ensure(definition) {
      if (definition === null || typeof definition !== 'object') {
        throw new ControllerError('invalid_effect', 'ctx.effects.ensure takes { key, kind, request, observe, apply }');
      }
      const { key, kind, request, observe, apply } = definition;
      assertKey(key, 'effect key');
      assertKind(kind);
      if (typeof observe !== 'function' || typeof apply !== 'function') {
        throw new ControllerError(
          'invalid_effect',
          `effect ${JSON.stringify(key)} needs observe(signal) (was it done? { state: "applied" | "not_applied" | "indeterminate" }) and apply(signal) (do it: { state: "applied" | "rejected" | "indeterminate" })`,
        );
      }
      if (used) {
        throw new ControllerError('invalid_effect', `a pass ensures one effect; return ctx.requeue() after the first and ensure ${JSON.stringify(key)} in the next pass (it reads the world again first)`);
      }
      used = true;
      const requestFingerprint = jsonFingerprint(request, `effect ${key}'s request`);
      const resourceUid = resource.metadata.uid;
      const { record, created } = await backend.recordEffect({ resourceUid, key, kind, generation: resource.metadata.generation, requestFingerprint });
      // The backend enforces the key's fingerprint; checked here too, so a backend that does not cannot lead to a second effect.
      if (record.requestFingerprint !== requestFingerprint) throw new EffectRequestConflictError(key);
      if (record.kind !== kind) throw new EffectRequestConflictError(key, 'kind');
      if (record.state === 'applied' || record.state === 'rejected') {
        touched.push(record);
        return record;
      }
      if (!created) {
        // Recorded by an earlier pass that may have applied it before it could say so: ask the world first.
        const seen = await observe(signal);
        if (seen?.state === 'applied' || seen?.state === 'indeterminate') {
          const settled = await backend.settleEffect({
            resourceUid,
            key,
            state: seen.state,
            ...(seen.state === 'applied' && typeof seen.externalRef === 'string' ? { externalRef: seen.externalRef } : {}),
            ...(seen.state === 'indeterminate' ? { error: 'observe could not tell whether the effect was applied' } : {}),
          });
          touched.push(settled);
          return settled;
        }
        if (seen?.state !== 'not_applied') {
          throw new ControllerError('invalid_effect', `effect ${JSON.stringify(key)}: observe returned ${JSON.stringify(seen)}; return { state: "applied" }, { state: "not_applied" } or { state: "indeterminate" }`);
        }
      }
      let outcome;
      try {
        outcome = await apply(signal);
      } catch (e) {
        // It may have happened: the next pass observes before it tries again.
        outcome = { state: 'indeterminate', error: boundedMessage(e) };
      }
      if (!['applied', 'rejected', 'indeterminate'].includes(outcome?.state)) {
        outcome = { state: 'indeterminate', error: `apply returned ${JSON.stringify(outcome)}; it must return { state: "applied" | "rejected" | "indeterminate" }` };
      }
      const settled = await backend.settleEffect({
        resourceUid,
        key,
        state: outcome.state,
        ...(outcome.state === 'applied' && typeof outcome.externalRef === 'string' ? { externalRef: outcome.externalRef } : {}),
        ...(outcome.state !== 'applied' && outcome.error !== undefined ? { error: boundedMessage(outcome.error) } : {}),
      });
      touched.push(settled);
      return settled;
    },
  };
}

/** `ctx.workflows`: child runs found or started by a stable request key. */
function workflowsFor(resource, backend) {
  return {
    async ensure(request) {
      if (request === null || typeof request !== 'object') throw new ControllerError('invalid_workflow_request', 'ctx.workflows.ensure takes { requestKey, workflow, input }');
      const { requestKey, workflow, input } = request;
      assertKey(requestKey, 'workflow request key');
      assertKey(workflow, 'workflow name');
      const inputJson = boundedJson(input ?? null, `workflow ${workflow}'s input`);
      return backend.ensureWorkflowRun({
        resourceUid: resource.metadata.uid,
        requestKey,
        workflow,
        input: JSON.parse(inputJson),
        inputFingerprint: jsonFingerprint(input ?? null),
      });
    },
  };
}

/**
 * Runs `definition.reconcile` once for `resource`.
 *
 * @param {object} options
 * @param {object} options.definition From `defineController`.
 * @param {object} options.resource The resource as the host read it (its `resourceVersion` is what the status write expects).
 * @param {import('./backend.js').ControllerBackend} options.backend
 * @param {number} [options.deadlineMs] The pass is abandoned after this long (default: the definition's `timeoutMs`, else 60 s).
 * @param {() => Date} [options.now] The clock of conditions' transition times.
 * @param {(entry: object) => void} [options.onLog] Called with each `ctx.log` entry as it is written.
 * @returns {Promise<object>} `{ kind, afterMs?, message?, deadlineMs?, status, finalizers?, effects, logs }`:
 *   `kind` `settled`, `requeue` (with `afterMs` for a later pass), `error` (with `message`) or
 *   `deadline`; `status` the whole status to commit (null after an error or the deadline).
 */
export async function runReconcilePass({ definition, resource, backend, deadlineMs, now = () => new Date(), onLog } = {}) {
  if (!isControllerDefinition(definition)) throw new ControllerError('invalid_controller', 'runReconcilePass needs a definition from defineController({...})');
  const missing = BACKEND_METHODS.filter((m) => typeof backend?.[m] !== 'function');
  if (missing.length) throw new ControllerError('invalid_backend', `the backend lacks ${missing.join(', ')}`);
  const limit = deadlineMs ?? definition.timeoutMs ?? DEFAULT_PASS_DEADLINE_MS;
  if (!Number.isSafeInteger(limit) || limit <= 0) throw new ControllerError('invalid_deadline', `deadlineMs must be a positive whole number of milliseconds, not ${JSON.stringify(limit)}`);

  let over = false;
  const abort = new AbortController();
  const effects = [];
  const logs = [];
  const written = {};
  const log = Object.fromEntries(
    LEVELS.map((level) => [
      level,
      (message, fields) => {
        if (over) return;
        const entry = { level, message: String(message), ...(fields !== undefined ? { fields } : {}), at: now().toISOString() };
        logs.push(entry);
        onLog?.(entry);
      },
    ]),
  );
  const guarded = guard(backend, () => over);
  const ctx = {
    signal: abort.signal,
    log,
    effects: effectsFor(resource, guarded, abort.signal, effects),
    workflows: workflowsFor(resource, guarded),
    ...createResultHelpers(),
    setControllerStatus(value) {
      written.controllerStatus = value;
    },
    setCondition(condition) {
      assertCondition(condition);
      written.conditions = [...(written.conditions ?? []).filter((c) => c.type !== condition.type), condition];
    },
    setWorkflowRun(run) {
      written.workflowRun = run;
    },
    setFinalizers(finalizers) {
      assertFinalizers(finalizers);
      written.finalizers = [...finalizers];
    },
  };

  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => {
      const reason = new PassDeadlineError(limit);
      abort.abort(reason);
      reject(reason);
    }, limit);
  });
  const end = (outcome) => {
    over = true;
    clearTimeout(timer);
    return { ...outcome, effects, logs };
  };
  let result;
  try {
    result = await Promise.race([Promise.resolve().then(() => definition.reconcile(ctx, resource)), deadline]);
    assertReconcileResult(result);
  } catch (e) {
    if (e instanceof PassDeadlineError) return end({ kind: 'deadline', deadlineMs: limit, status: null });
    return end({ kind: 'error', message: boundedMessage(e), ...(e?.code ? { code: e.code } : {}), status: null });
  }
  try {
    const patch = result.status ?? {};
    const merged = {
      ...(Object.hasOwn(written, 'controllerStatus') ? { controllerStatus: written.controllerStatus } : {}),
      ...(written.workflowRun !== undefined ? { workflowRun: written.workflowRun } : {}),
      ...patch,
      // Conditions set through ctx.setCondition, except a type the result sets again.
      conditions: [...(written.conditions ?? []).filter((c) => !(patch.conditions ?? []).some((p) => p?.type === c.type)), ...(patch.conditions ?? [])],
    };
    const finalizers = patch.finalizers ?? written.finalizers;
    if (finalizers !== undefined) assertFinalizers(finalizers);
    const status = applyStatusPatch(resource.status, merged, resource.metadata.generation, now().toISOString());
    boundedJson(status, 'status');
    return end({ kind: result.kind, ...(result.afterMs !== undefined ? { afterMs: result.afterMs } : {}), status, ...(finalizers !== undefined ? { finalizers } : {}) });
  } catch (e) {
    return end({ kind: 'error', message: boundedMessage(e), ...(e?.code ? { code: e.code } : {}), status: null });
  }
}
