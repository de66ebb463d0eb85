// The resource model: one requested outcome, with `spec` (owned by whoever asks for it) and
// `status` (owned by its controller). Pure functions of values: the host stores resources and
// makes every commit; these say what a valid resource is and what each change does to it, so
// the host's checks and the in-memory backend of the tests agree.
//
// - `metadata.resourceVersion` changes on every write and is the compare-and-swap token;
// - `metadata.generation` changes only when `spec` changes (compared as canonical JSON);
// - `spec` and `status` are JSON only, at most 1 MiB each as canonical JSON in UTF-8.
import { createHash } from 'node:crypto';

import { ControllerError, ResourceConflictError } from './errors.js';

/** The largest `spec`, and the largest `status`, as canonical JSON in UTF-8 bytes. */
export const MAX_RESOURCE_VALUE_BYTES = 1024 * 1024;
/** The longest resource key, effect key or workflow request key, in characters. */
export const MAX_KEY_LENGTH = 512;
/** A finalizer's (and an effect kind's) form. */
const FINALIZER = /^[A-Za-z][A-Za-z0-9_.-]*$/;

const invalid = (message) => new ControllerError('invalid_resource', message);

/** `value` with object keys sorted, after checking it is JSON: the one normal form. */
function normalize(value, path, seen) {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new ControllerError('invalid_json', `${path} is ${value}, not a JSON number; store a finite number or a string`);
    return value;
  }
  if (typeof value !== 'object') {
    throw new ControllerError('invalid_json', `${path} is a ${typeof value}, which JSON cannot hold; store plain data (objects, arrays, strings, finite numbers, booleans, null)`);
  }
  if (seen.has(value)) throw new ControllerError('invalid_json', `${path} refers back to itself (a cycle); store a tree of plain data`);
  seen.add(value);
  try {
    if (Array.isArray(value)) return value.map((item, i) => normalize(item, `${path}[${i}]`, seen));
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      const kind = proto?.constructor?.name ?? 'object';
      throw new ControllerError('invalid_json', `${path} is a ${kind}, not a plain object; store its data (a string, or an object of its fields)`);
    }
    const out = {};
    for (const k of Object.keys(value).sort()) {
      if (value[k] === undefined) continue; // as JSON.stringify: an absent field
      out[k] = normalize(value[k], `${path}.${k}`, seen);
    }
    return out;
  } finally {
    seen.delete(value);
  }
}

/** Throws a `ControllerError` (`invalid_json`) naming the first part of `value` JSON cannot hold. */
export function assertJsonValue(value, what = 'value') {
  normalize(value, what, new Set());
}

/** `value` as JSON with sorted keys; refuses functions, cycles, non-finite numbers, class instances. */
export function canonicalJson(value, what = 'value') {
  return JSON.stringify(normalize(value, what, new Set()));
}

/** The hex SHA-256 of `canonicalJson(value)`: equal for equal data whatever the key order. */
export function jsonFingerprint(value, what = 'value') {
  return createHash('sha256').update(canonicalJson(value, what)).digest('hex');
}

/** Checks `value` is JSON of at most 1 MiB; returns its canonical JSON. */
export function boundedJson(value, what) {
  const json = canonicalJson(value, what);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > MAX_RESOURCE_VALUE_BYTES) {
    throw new ControllerError(
      'too_large',
      `${what} is ${bytes} bytes as JSON, over the ${MAX_RESOURCE_VALUE_BYTES}-byte limit; keep large data elsewhere (a file, a run's result) and store a reference`,
    );
  }
  return json;
}

/** Checks a resource key, an effect key or a workflow request key. */
export function assertKey(value, what) {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_KEY_LENGTH || [...value].some((c) => c.codePointAt(0) < 32 || c.codePointAt(0) === 127)) {
    throw invalid(`${what} must be 1-${MAX_KEY_LENGTH} printable characters, not ${JSON.stringify(value)}`);
  }
}

/** Checks a list of finalizers: identifiers (`pull-request.cleanup`), none twice. */
export function assertFinalizers(finalizers) {
  if (!Array.isArray(finalizers)) throw invalid(`finalizers must be an array of names, not ${JSON.stringify(finalizers)}`);
  const seen = new Set();
  for (const f of finalizers) {
    if (typeof f !== 'string' || !FINALIZER.test(f)) throw invalid(`finalizer ${JSON.stringify(f)} must match ${FINALIZER.source}`);
    if (seen.has(f)) throw invalid(`finalizer ${JSON.stringify(f)} is listed twice`);
    seen.add(f);
  }
}

/** Checks an effect kind (`github-merge`). */
export function assertKind(kind) {
  if (typeof kind !== 'string' || !FINALIZER.test(kind)) throw invalid(`effect kind ${JSON.stringify(kind)} must match ${FINALIZER.source}`);
}

/** Checks a whole status (`observedGeneration`, `conditions`, `controllerStatus`, `workflowRun`). */
export function assertStatus(status, what = 'status') {
  boundedJson(status, what);
}

/**
 * A new resource: `resourceVersion` 1, `generation` 1, the controller's initial status.
 * `uid` is the store's (never reused).
 */
export function createResource({ controller, key, uid, spec, initialStatus }) {
  assertKey(key, 'resource key');
  assertKey(uid, 'resource uid');
  boundedJson(spec, 'spec');
  const status = { observedGeneration: 0, conditions: [], controllerStatus: initialStatus };
  boundedJson(status, 'status');
  return {
    metadata: { uid, controller, key, resourceVersion: 1, generation: 1, finalizers: [] },
    spec: structuredClone(spec),
    status: structuredClone(status),
  };
}

/** The check of a write's compare-and-swap token. */
function expectVersion(resource, expected) {
  if (expected !== undefined && resource.metadata.resourceVersion !== expected) {
    throw new ResourceConflictError(resource.metadata.controller, resource.metadata.key, expected, resource.metadata.resourceVersion);
  }
}

/**
 * `resource` with a new spec: unchanged (the same object) when the spec is equal as canonical
 * JSON, else `generation` and `resourceVersion` both advance. A resource being deleted takes
 * no new spec.
 */
export function withSpec(resource, spec, { expectedResourceVersion } = {}) {
  expectVersion(resource, expectedResourceVersion);
  const json = boundedJson(spec, 'spec');
  if (json === canonicalJson(resource.spec)) return resource;
  if (resource.metadata.deletionTimestamp !== undefined) {
    throw invalid(`resource ${resource.metadata.controller}/${resource.metadata.key} is being deleted; it takes no new spec (create it again once it is gone)`);
  }
  const m = resource.metadata;
  return { ...resource, metadata: { ...m, resourceVersion: m.resourceVersion + 1, generation: m.generation + 1 }, spec: structuredClone(spec) };
}

/** `resource` with its deletion requested at `now` (once: a second request changes nothing). */
export function withDeletionRequested(resource, now) {
  if (resource.metadata.deletionTimestamp !== undefined) return resource;
  const m = resource.metadata;
  return { ...resource, metadata: { ...m, resourceVersion: m.resourceVersion + 1, deletionTimestamp: now } };
}

/**
 * `resource` with the status (and finalizers) a reconcile pass wrote, if its
 * `resourceVersion` is still `expectedResourceVersion` (else `ResourceConflictError`).
 * Unchanged (the same object, the same version) when nothing differs.
 */
export function withStatus(resource, { expectedResourceVersion, status, finalizers }) {
  expectVersion(resource, expectedResourceVersion);
  const json = boundedJson(status, 'status');
  if (finalizers !== undefined) assertFinalizers(finalizers);
  const sameFinalizers = finalizers === undefined || canonicalJson(finalizers) === canonicalJson(resource.metadata.finalizers);
  if (json === canonicalJson(resource.status) && sameFinalizers) return resource;
  const m = resource.metadata;
  return {
    ...resource,
    metadata: { ...m, resourceVersion: m.resourceVersion + 1, finalizers: finalizers === undefined ? m.finalizers : [...finalizers] },
    status: structuredClone(status),
  };
}

/** Whether a resource is to be removed from the store: deletion requested, no finalizer left. */
export function isDeletable(resource) {
  return resource.metadata.deletionTimestamp !== undefined && resource.metadata.finalizers.length === 0;
}
