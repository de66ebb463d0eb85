// The backend of a reconcile pass: everything durable a pass does goes through it. The host
// serves it to the child process a pass runs in; `MemoryBackend` (memory-backend.js) serves it
// in one process for tests.
//
// Every call is idempotent by its key: a pass that is killed at any point and run again (the
// same resource, the same keys) finds what the first one recorded and does nothing twice. A
// call's answer may be lost (the child dies before reading it); the next pass's same call gets
// the same record.

/**
 * @typedef {'pending' | 'applied' | 'rejected' | 'indeterminate'} EffectState
 *
 * @typedef {object} EffectRecord One intended external effect of one resource, keyed by
 *   `(resourceUid, key)`; recorded before the effect is attempted.
 * @property {string} key
 * @property {string} resourceUid
 * @property {number} generation The resource's generation when the effect was first recorded.
 * @property {string} kind
 * @property {string} requestFingerprint Hex SHA-256 of the request's canonical JSON.
 * @property {EffectState} state `pending` until an outcome is known; `applied` and `rejected` are final.
 * @property {string} startedAt ISO time it was recorded.
 * @property {string} [completedAt] ISO time it became `applied` or `rejected`.
 * @property {string} [externalRef] What the provider named it (a merge commit, an id).
 * @property {string} [error] Why it was rejected, or why its outcome is unknown.
 *
 * @typedef {'pending' | 'running' | 'waiting' | 'succeeded' | 'failed' | 'interrupted'} ChildWorkflowState
 *
 * @typedef {object} ChildWorkflowRecord A child workflow request of one resource, keyed by
 *   `(resourceUid, requestKey)`; each start of it is an attempt with its own run.
 * @property {string} requestId Stable for the request's life.
 * @property {string} resourceUid
 * @property {string} requestKey
 * @property {string} workflow
 * @property {string} inputFingerprint Hex SHA-256 of the input's canonical JSON.
 * @property {ChildWorkflowState} state
 * @property {number} attempt 1 for the first run, one more for each run after an interrupted one.
 * @property {string} [runId] The current attempt's run.
 * @property {string} [error]
 *
 * @typedef {object} ControllerBackend
 * @property {(req: { resourceUid: string, key: string, kind: string, generation: number, requestFingerprint: string }) => Promise<{ record: EffectRecord, created: boolean }>} recordEffect
 *   Records an effect as `pending` before it is attempted, or returns the record already kept
 *   under `key` (`created: false`). The same key with another `requestFingerprint`, `kind` or
 *   `generation` rejects with an `EffectRequestConflictError` (code `effect_conflict`).
 * @property {(req: { resourceUid: string, key: string }) => Promise<EffectRecord | null>} effect
 *   The record kept under `key`, or null.
 * @property {(req: { resourceUid: string, key: string, state: 'applied' | 'rejected' | 'indeterminate', externalRef?: string, error?: string }) => Promise<EffectRecord>}
 *   settleEffect Records what became of an effect. Idempotent: settling a final effect in the
 *   state it has returns it unchanged; moving an `applied` or `rejected` effect to another
 *   state rejects (code `effect_final`).
 * @property {(req: { resourceUid: string, requestKey: string, workflow: string, input: unknown, inputFingerprint: string }) => Promise<ChildWorkflowRecord>}
 *   ensureWorkflowRun Finds the child run request kept under `requestKey`, or records it and
 *   starts its first run; an `interrupted` request gets a new attempt (a new run). The same key
 *   with another `workflow` or `inputFingerprint` rejects with a `WorkflowRequestConflictError`
 *   (code `workflow_conflict`). It returns at once with the request's state; the run's end
 *   wakes the resource again.
 */

/** The calls a backend must have, for a check at the start of a pass. */
export const BACKEND_METHODS = ['recordEffect', 'effect', 'settleEffect', 'ensureWorkflowRun'];
