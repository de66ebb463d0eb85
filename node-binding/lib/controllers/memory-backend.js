// A `ControllerBackend` in one process's memory, for tests and for trying a controller without
// a host. It also stands in for the host's side of a pass (storing resources, committing a
// pass's outcome with compare-and-swap, removing a deleted resource, moving child runs), so a
// test can drive passes end to end; the host implements the same rules over its own store.
import { randomUUID } from 'node:crypto';

import { ControllerError, EffectRequestConflictError, ResourceNotFoundError, WorkflowRequestConflictError } from './errors.js';
import { createResource, isDeletable, withDeletionRequested, withSpec, withStatus } from './resource.js';

const FINAL_EFFECT = new Set(['applied', 'rejected']);
const clone = (v) => structuredClone(v);

export class MemoryBackend {
  /** @param {{ now?: () => Date }} [options] `now` dates records (a test's clock). */
  constructor({ now = () => new Date() } = {}) {
    this.now = now;
    this.resources = new Map(); // `${controller}/${key}` -> resource
    this.effectRecords = new Map(); // `${uid}\0${key}` -> EffectRecord
    this.workflowRecords = new Map(); // `${uid}\0${requestKey}` -> ChildWorkflowRecord
    /** Every child run started, in order: `{ requestId, runId, attempt, workflow, input }`. */
    this.startedRuns = [];
  }

  // -- the backend a pass calls --------------------------------------------------------------

  async recordEffect({ resourceUid, key, kind, generation, requestFingerprint }) {
    const id = `${resourceUid}\0${key}`;
    const existing = this.effectRecords.get(id);
    if (existing) {
      if (existing.requestFingerprint !== requestFingerprint) throw new EffectRequestConflictError(key);
      if (existing.kind !== kind) throw new EffectRequestConflictError(key, 'kind');
      if (existing.generation !== generation) throw new EffectRequestConflictError(key, 'generation');
      return { record: clone(existing), created: false };
    }
    const record = { key, resourceUid, generation, kind, state: 'pending', requestFingerprint, startedAt: this.now().toISOString() };
    this.effectRecords.set(id, record);
    return { record: clone(record), created: true };
  }

  async effect({ resourceUid, key }) {
    const record = this.effectRecords.get(`${resourceUid}\0${key}`);
    return record ? clone(record) : null;
  }

  async settleEffect({ resourceUid, key, state, externalRef, error }) {
    const record = this.effectRecords.get(`${resourceUid}\0${key}`);
    if (!record) throw new ControllerError('not_found', `no effect ${JSON.stringify(key)} is recorded; record it (recordEffect) before settling it`);
    if (FINAL_EFFECT.has(record.state)) {
      if (record.state === state) return clone(record);
      throw new ControllerError('effect_final', `effect ${JSON.stringify(key)} is already ${record.state}; it cannot become ${state}`);
    }
    record.state = state;
    if (externalRef !== undefined) record.externalRef = externalRef;
    if (error !== undefined) record.error = error;
    else delete record.error;
    if (FINAL_EFFECT.has(state)) record.completedAt = this.now().toISOString();
    return clone(record);
  }

  async ensureWorkflowRun({ resourceUid, requestKey, workflow, input, inputFingerprint }) {
    const id = `${resourceUid}\0${requestKey}`;
    let record = this.workflowRecords.get(id);
    if (record) {
      if (record.workflow !== workflow) throw new WorkflowRequestConflictError(requestKey, 'workflow');
      if (record.inputFingerprint !== inputFingerprint) throw new WorkflowRequestConflictError(requestKey);
      if (record.state !== 'interrupted') return clone(record);
    } else {
      record = { requestId: randomUUID(), resourceUid, requestKey, workflow, inputFingerprint, state: 'pending', attempt: 0 };
      this.workflowRecords.set(id, record);
    }
    record.attempt += 1;
    record.runId = `${workflow}-${record.requestId.slice(0, 8)}-${record.attempt}`;
    record.state = 'running';
    delete record.error;
    this.startedRuns.push({ requestId: record.requestId, runId: record.runId, attempt: record.attempt, workflow, input: clone(input) });
    return clone(record);
  }

  // -- the host's side, for tests ------------------------------------------------------------

  /** Stores `spec` for `key` (a new resource, or a new spec for an existing one). */
  putResource(definition, key, spec) {
    const id = `${definition.name}/${key}`;
    const current = this.resources.get(id);
    const next = current
      ? withSpec(current, spec)
      : createResource({ controller: definition.name, key, uid: randomUUID(), spec, initialStatus: definition.initialStatus(spec) });
    this.resources.set(id, next);
    return clone(next);
  }

  /** The stored resource, or null once it is gone. */
  getResource(controller, key) {
    const r = this.resources.get(`${controller}/${key}`);
    return r ? clone(r) : null;
  }

  /** Requests the resource's deletion: it stays until its finalizers are gone. */
  requestDeletion(controller, key) {
    const id = `${controller}/${key}`;
    const r = this.resources.get(id);
    if (!r) throw new ResourceNotFoundError(controller, key);
    const next = withDeletionRequested(r, this.now().toISOString());
    this.resources.set(id, next);
    return clone(next);
  }

  /**
   * Commits a pass's outcome for the resource as it was read (`read`): its status and
   * finalizers, if `resourceVersion` is still the one read (else `ResourceConflictError`, and
   * the host runs another pass). A settled pass of a resource being deleted with no finalizer
   * left removes it. Returns the stored resource, or null when it was removed. An error or a
   * deadline commits nothing.
   */
  commit(read, outcome) {
    const id = `${read.metadata.controller}/${read.metadata.key}`;
    const current = this.resources.get(id);
    if (!current) throw new ResourceNotFoundError(read.metadata.controller, read.metadata.key);
    if (outcome.status === null) return clone(current);
    const next = withStatus(current, { expectedResourceVersion: read.metadata.resourceVersion, status: outcome.status, finalizers: outcome.finalizers });
    if (outcome.kind === 'settled' && isDeletable(next)) {
      this.resources.delete(id);
      return null;
    }
    this.resources.set(id, next);
    return clone(next);
  }

  /** Every effect of a resource. */
  effects(resourceUid) {
    return [...this.effectRecords.values()].filter((e) => e.resourceUid === resourceUid).map(clone);
  }

  /** Moves a child run (what the host does when the run's state changes). */
  setWorkflowState(requestId, { state, error }) {
    const record = [...this.workflowRecords.values()].find((w) => w.requestId === requestId);
    if (!record) throw new ControllerError('not_found', `no workflow request ${requestId}`);
    record.state = state;
    if (error !== undefined) record.error = error;
    return clone(record);
  }
}
