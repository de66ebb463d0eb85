// The workflow authoring API. A definition compiles to the core's data-only graph snapshot
// (node ids, kinds, timeouts, retry contracts, edges; no functions), validated by the same
// code the host uses; the functions stay with the workflow module and run in its child.
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { native as addon } from './native.js';
import { native, PiwError } from './errors.js';

const WORKFLOW = Symbol.for('piw.workflow');
const RETRY = new Set(['never', 'idempotency_key', 'read_back']);

function fn(value, what) {
  if (typeof value !== 'function') throw new PiwError('invalid_graph', `${what} must be a function`);
  return value;
}

function optionalFn(value, what) {
  return value === undefined ? undefined : fn(value, what);
}

function timeout(options) {
  const ms = options?.timeoutMs;
  if (ms === undefined) return undefined;
  if (!Number.isInteger(ms) || ms <= 0) {
    throw new PiwError('invalid_graph', `timeoutMs must be a positive integer, got ${ms}`);
  }
  return ms;
}

function node(kind, fields, options) {
  return Object.freeze({ [WORKFLOW]: 'node', kind, timeoutMs: timeout(options), ...fields });
}

/** A pure step: `run(input, ctx)` returns its output. May rerun after a crash. */
export function compute(run, options = {}) {
  if (typeof run === 'object' && run !== null) return compute(run.run, run);
  return node('compute', { run: fn(run, 'compute(run)') }, options);
}

/**
 * A side-effecting step, performed only through a managed effect:
 * `{ effect: { key(input), fingerprint?(input), retry? }, apply(input, ctx), timeoutMs? }`.
 * `apply` runs at most once per effect key unless `retry` is `idempotency_key` or `read_back`;
 * its return value is the effect's receipt and the node's output (also when replayed).
 */
export function action(spec) {
  const retry = spec?.effect?.retry ?? 'never';
  if (!RETRY.has(retry)) {
    throw new PiwError('invalid_graph', `effect.retry must be one of ${[...RETRY].join(', ')}, got ${retry}`);
  }
  return node(
    'action',
    {
      retry,
      effectKey: fn(spec.effect.key, 'action effect.key'),
      fingerprint: optionalFn(spec.effect.fingerprint, 'action effect.fingerprint'),
      apply: fn(spec.apply, 'action apply'),
    },
    spec,
  );
}

function interactive(kind) {
  return (spec = {}) =>
    node(
      kind,
      {
        request: optionalFn(spec.request, `${kind} request`),
        validate: optionalFn(spec.validate, `${kind} validate`),
      },
      spec,
    );
}

/**
 * An agent step answered by the model in the origin Pi session:
 * `{ request(input) => request, validate?(result, input) => error string | undefined }`.
 * A submission counts only after `validate` accepts it (in a supervised child); the node's
 * output is the accepted result.
 */
export const agent = interactive('agent');

/** An assistant-message step: like `agent`, answered with one message. */
export const assistantMessage = interactive('assistant_message');

function decision(kind) {
  return (spec = {}) => node(kind, { request: optionalFn(spec.request, `${kind} request`) }, spec);
}

/** An ordinary checkpoint, answered through the model-facing tool. Output: `{ answer }`. */
export const checkpoint = decision('checkpoint');

/** A protected human decision, answered only by a person. Output: `{ answer }`. */
export const humanDecision = decision('human_decision');

/** Sends a workflow message to the origin session: `content(input)`. Output: its input. */
export function notify(content, options = {}) {
  const make = typeof content === 'function' ? content : () => content;
  return node('notify', { content: make }, options);
}

/** Edge helpers: `to('a', 'b')`, `switchOn('a', '$.path', cases, dflt)`, `onOutcome('a', cases, dflt)`. */
export function to(from, next) {
  return { from, to: next };
}

export function switchOn(from, on, cases, dflt) {
  return { from, switch: { on, cases, ...(dflt === undefined ? {} : { default: dflt }) } };
}

export function onOutcome(from, cases, dflt) {
  return switchOn(from, '$result.outcome', cases, dflt);
}

/**
 * Defines a workflow: `{ name, start, nodes: { id: node }, edges?, mounts? }`. `mounts` names
 * other source files the workflow includes (`{ name: path }`, relative to `baseUrl`, normally
 * `import.meta.url`): they are verified before a resumed run loads any code.
 * Throws `invalid_graph` with the reason when the graph is not valid.
 */
export function defineWorkflow(def) {
  if (!def || typeof def !== 'object') throw new PiwError('invalid_graph', 'defineWorkflow needs an object');
  const nodes = {};
  for (const [id, n] of Object.entries(def.nodes ?? {})) {
    if (!n || n[WORKFLOW] !== 'node') {
      throw new PiwError('invalid_graph', `node ${id} must be made with compute(), action(), agent(), ...`);
    }
    nodes[id] = {
      kind: n.kind,
      ...(n.timeoutMs === undefined ? {} : { timeout_ms: n.timeoutMs }),
      ...(n.kind === 'action' ? { retry: n.retry } : {}),
    };
  }
  const snapshot = { name: def.name, start: def.start, nodes, edges: def.edges ?? [] };
  const { snapshot: graph, digest } = native(() => addon.compileGraph(snapshot));
  const base = def.baseUrl ? dirname(fileURLToPath(def.baseUrl)) : process.cwd();
  const mounts = Object.fromEntries(
    Object.entries(def.mounts ?? {}).map(([name, path]) => [name, resolve(base, path)]),
  );
  return Object.freeze({
    [WORKFLOW]: 'workflow',
    name: def.name,
    graph,
    digest,
    nodes: Object.freeze({ ...def.nodes }),
    mounts: Object.freeze(mounts),
  });
}

const EFFECT_FAILED = Symbol.for('piw.effect_failed');

/**
 * Thrown by an action's `apply` when the effect certainly did not happen (the other system
 * refused it): the effect is settled `failed` and the node fails. Any other exception from
 * `apply` leaves the effect in doubt: under `never` it becomes `uncertain` and the run stops
 * for review; under `idempotency_key` or `read_back` it is retried.
 */
export class EffectFailed extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'EffectFailed';
    this[EFFECT_FAILED] = true;
  }
}

/** Whether `e` is an `EffectFailed` (also one from another copy of this package). */
export function isEffectFailed(e) {
  return Boolean(e) && e[EFFECT_FAILED] === true;
}

/** Whether `value` was made by `defineWorkflow`. */
export function isWorkflow(value) {
  return Boolean(value) && value[WORKFLOW] === 'workflow';
}
