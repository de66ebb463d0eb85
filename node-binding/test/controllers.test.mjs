// The controller API without a host: definitions and results, the resource model, conditions,
// one reconcile pass's effects, child runs and deadline, and discovery, against the in-memory
// backend.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

import {
  ControllerError,
  EffectRequestConflictError,
  MAX_RESOURCE_VALUE_BYTES,
  MemoryBackend,
  ResourceConflictError,
  WorkflowRequestConflictError,
  canonicalJson,
  conditionFalse,
  conditionTrue,
  conditionUnknown,
  createResource,
  defineController,
  discoverControllers,
  isControllerDefinition,
  jsonFingerprint,
  loadControllerFile,
  loadDiscoveredControllers,
  mergeConditions,
  requeue,
  requeueAfter,
  runReconcilePass,
  settled,
  withDeletionRequested,
  withSpec,
  withStatus,
} from '../lib/controllers/index.js';

const tmp = mkdtempSync(join(tmpdir(), 'piw-controllers-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A test clock: each call gives the next second. */
function clock(start = Date.UTC(2026, 0, 1)) {
  let t = start;
  const now = () => new Date(t);
  now.advance = (ms) => {
    t += ms;
  };
  return now;
}

const generous = 30_000;
const noop = () => {};
const named = (name, reconcile, extra = {}) => defineController({ name, initialStatus: () => ({ phase: 'new' }), reconcile, ...extra });

test('defineController refuses a bad definition with what to write instead', () => {
  const ok = { name: 'pull-request', initialStatus: () => ({}), reconcile: () => settled() };
  assert.equal(isControllerDefinition(defineController({ ...ok })), true);
  assert.equal(isControllerDefinition({ ...ok }), false, 'only defineController brands a definition');
  const cases = [
    [null, /takes one object/],
    [{ ...ok, name: 'Pull_Request' }, /lower-case letters, digits and dashes.*"pull-request"/],
    [{ ...ok, name: undefined }, /controller name undefined/],
    [{ ...ok, initialStatus: { phase: 'x' } }, /initialStatus must be a function/],
    [{ ...ok, reconcile: undefined }, /reconcile must be a function \(ctx, resource\) returning ctx\.settled\(\)/],
    [{ ...ok, timeoutMs: 0 }, /timeoutMs must be a positive whole number/],
  ];
  for (const [definition, message] of cases) {
    assert.throws(() => defineController(definition), (e) => e instanceof ControllerError && e.code === 'invalid_controller' && message.test(e.message), String(message));
  }
});

test('the result helpers build the three results; requeueAfter takes a positive whole number', () => {
  assert.deepEqual(settled(), { kind: 'settled' });
  assert.deepEqual(requeue({ controllerStatus: 1 }), { kind: 'requeue', status: { controllerStatus: 1 } });
  assert.deepEqual(requeueAfter(500), { kind: 'requeue', afterMs: 500 });
  for (const bad of [0, -1, 1.5, '500', Infinity]) {
    assert.throws(() => requeueAfter(bad), (e) => e.code === 'invalid_result' && /use requeue\(\) for another pass at once/.test(e.message));
  }
});

test('a reconcile result that is not one of the three is an error outcome saying what to return', async () => {
  const backend = new MemoryBackend();
  const cases = [
    [() => undefined, /reconcile returned nothing; return ctx\.settled/],
    [() => ({ kind: 'done' }), /kind "done"; return ctx\.settled\(status\?\), ctx\.requeue\(status\?\) or ctx\.requeueAfter\(ms, status\?\)/],
    [() => ({ kind: 'settled', afterMs: 5 }), /a settled result has no afterMs/],
    [() => ({ kind: 'requeue', afterMs: -5 }), /positive whole number/],
    [(ctx) => ctx.settled({ phase: 'x' }), /status has no field "phase".*put your own fields in controllerStatus/],
  ];
  for (const [i, [reconcile, message]] of cases.entries()) {
    const definition = named('bad-result', reconcile);
    const resource = backend.putResource(definition, `k${i}`, {});
    const out = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
    assert.equal(out.kind, 'error', String(message));
    assert.equal(out.code, 'invalid_result');
    assert.match(out.message, message);
    assert.equal(out.status, null);
  }
});

test('generation changes only with the spec; resourceVersion with every write and guards it', () => {
  const r1 = createResource({ controller: 'c', key: 'k', uid: 'u1', spec: { b: 1, a: [1, 2] }, initialStatus: { phase: 'new' } });
  assert.deepEqual([r1.metadata.resourceVersion, r1.metadata.generation], [1, 1]);
  assert.deepEqual(r1.status, { observedGeneration: 0, conditions: [], controllerStatus: { phase: 'new' } });
  // The same spec in another key order: no write.
  assert.equal(withSpec(r1, { a: [1, 2], b: 1 }), r1);
  const r2 = withSpec(r1, { a: [1, 2], b: 2 });
  assert.deepEqual([r2.metadata.resourceVersion, r2.metadata.generation], [2, 2]);
  const status = { ...r2.status, observedGeneration: 2, controllerStatus: { phase: 'seen' } };
  const r3 = withStatus(r2, { expectedResourceVersion: 2, status });
  assert.deepEqual([r3.metadata.resourceVersion, r3.metadata.generation], [3, 2], 'a status write leaves the generation');
  assert.equal(withStatus(r3, { expectedResourceVersion: 3, status }), r3, 'an equal status is no write');
  assert.throws(() => withStatus(r3, { expectedResourceVersion: 2, status: { ...status, controllerStatus: 'x' } }), (e) => e instanceof ResourceConflictError && /resourceVersion 3, the write expected 2/.test(e.message));
  const r4 = withDeletionRequested(r3, '2026-01-01T00:00:00.000Z');
  assert.deepEqual([r4.metadata.resourceVersion, r4.metadata.generation, r4.metadata.deletionTimestamp], [4, 2, '2026-01-01T00:00:00.000Z']);
  assert.equal(withDeletionRequested(r4, 'later'), r4, 'a second deletion request changes nothing');
  assert.throws(() => withSpec(r4, { other: true }), /being deleted/);
});

test('spec and status are JSON only, at most 1 MiB each as canonical JSON', () => {
  assert.equal(canonicalJson({ b: 1, a: { d: 2, c: 3 } }), '{"a":{"c":3,"d":2},"b":1}');
  assert.equal(jsonFingerprint({ x: 1, y: 2 }), jsonFingerprint({ y: 2, x: 1 }));
  const cyclic = { a: {} };
  cyclic.a.back = cyclic;
  const cases = [
    [{ f: () => 1 }, /spec\.f is a function, which JSON cannot hold/],
    [cyclic, /spec\.a\.back refers back to itself \(a cycle\)/],
    [{ n: NaN }, /spec\.n is NaN, not a JSON number/],
    [{ n: [1, Infinity] }, /spec\.n\[1\] is Infinity/],
    [{ when: new Date(0) }, /spec\.when is a Date, not a plain object/],
    [{ big: 10n }, /bigint/],
  ];
  for (const [spec, message] of cases) {
    assert.throws(() => createResource({ controller: 'c', key: 'k', uid: 'u', spec, initialStatus: {} }), (e) => e.code === 'invalid_json' && message.test(e.message), String(message));
  }
  // At the bound: {"s":"..."} is 8 bytes around the string.
  const fits = { s: 'x'.repeat(MAX_RESOURCE_VALUE_BYTES - 8) };
  assert.equal(createResource({ controller: 'c', key: 'k', uid: 'u', spec: fits, initialStatus: {} }).metadata.generation, 1);
  const over = { s: `${'x'.repeat(MAX_RESOURCE_VALUE_BYTES - 9)}é` }; // é is two bytes in UTF-8
  assert.throws(() => createResource({ controller: 'c', key: 'k', uid: 'u', spec: over, initialStatus: {} }), (e) => e.code === 'too_large' && /spec is 1048577 bytes/.test(e.message));
  assert.throws(
    () => createResource({ controller: 'c', key: 'k', uid: 'u', spec: {}, initialStatus: { s: 'x'.repeat(MAX_RESOURCE_VALUE_BYTES) } }),
    (e) => e.code === 'too_large' && /^status is/.test(e.message),
  );
});

test("a condition's lastTransitionTime changes only when its status changes", async () => {
  const now = clock();
  const t0 = now().toISOString();
  let c = mergeConditions([], [conditionUnknown('Ready', 'Starting')], 1, t0);
  now.advance(1000);
  c = mergeConditions(c, [conditionUnknown('Ready', 'StillStarting', 'more')], 1, now().toISOString());
  assert.equal(c[0].lastTransitionTime, t0, 'same status, another reason: the time stays');
  assert.equal(c[0].reason, 'StillStarting');
  now.advance(1000);
  const t2 = now().toISOString();
  c = mergeConditions(c, [conditionTrue('Ready', 'Done'), conditionFalse('Other', 'No')], 2, t2);
  assert.deepEqual(c.map((x) => [x.type, x.status, x.lastTransitionTime, x.observedGeneration]), [['Ready', true, t2, 2], ['Other', false, t2, 2]]);
  assert.throws(() => mergeConditions(c, [conditionTrue('Ready', 'A'), conditionFalse('Ready', 'B')], 2, t2), /set twice in one pass/);
  assert.throws(() => conditionTrue('Ready', ''), /needs a non-empty reason/);
  assert.throws(() => mergeConditions([], [{ type: 'Ready', status: 'yes', reason: 'R' }], 1, t2), /use true, false or "unknown"/);

  // Through passes, with the setters and the result's patch.
  const backend = new MemoryBackend({ now });
  const states = ['unknown', 'unknown', true];
  const definition = named('conditions', (ctx) => {
    ctx.setCondition({ type: 'Ready', status: states.shift(), reason: 'R' });
    ctx.setControllerStatus({ phase: 'seen' });
    return ctx.settled({ conditions: [conditionTrue('Seen', 'Yes')] });
  });
  let resource = backend.putResource(definition, 'k', {});
  const times = [];
  for (let i = 0; i < 3; i += 1) {
    now.advance(60_000);
    const out = await runReconcilePass({ definition, resource, backend, deadlineMs: generous, now });
    assert.equal(out.kind, 'settled');
    resource = backend.commit(resource, out);
    times.push(resource.status.conditions.find((x) => x.type === 'Ready').lastTransitionTime);
  }
  assert.equal(times[1], times[0], 'unknown then unknown: unchanged');
  assert.notEqual(times[2], times[1], 'unknown then true: changed');
  assert.equal(times[2], now().toISOString());
  assert.deepEqual(resource.status.controllerStatus, { phase: 'seen' });
  assert.equal(resource.status.observedGeneration, 1);
});

/** A world with one switch an effect turns on, counting how often it is turned. */
function world() {
  return { done: false, applies: 0, observes: 0 };
}
const flip = (w, { fail } = {}) => ({
  key: 'flip:1',
  kind: 'switch',
  request: { to: 'on' },
  observe: () => {
    w.observes += 1;
    return w.done ? { state: 'applied', externalRef: 'seen' } : { state: 'not_applied' };
  },
  apply: () => {
    w.applies += 1;
    w.done = true;
    if (fail) throw new Error(fail);
    return { state: 'applied', externalRef: 'ref-1' };
  },
});

test('an applied effect is never applied again, however often the pass runs', async () => {
  const backend = new MemoryBackend();
  const w = world();
  const definition = named('effects', async (ctx) => {
    const e = await ctx.effects.ensure(flip(w));
    return ctx.settled({ controllerStatus: { effect: e.state } });
  });
  const resource = backend.putResource(definition, 'k', {});
  for (let i = 0; i < 3; i += 1) {
    const out = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
    assert.equal(out.kind, 'settled');
    assert.equal(out.status.controllerStatus.effect, 'applied');
  }
  assert.equal(w.applies, 1);
  assert.equal(w.observes, 0, 'a key known applied needs no look at the world');
  const [record] = backend.effects(resource.metadata.uid);
  assert.equal(record.state, 'applied');
  assert.equal(record.externalRef, 'ref-1');
});

test('an effect recorded but not known applied is observed first, and applied only if not done', async () => {
  for (const doneBefore of [true, false]) {
    const backend = new MemoryBackend();
    const w = world();
    const definition = named('effects', async (ctx) => ctx.settled({ controllerStatus: (await ctx.effects.ensure(flip(w))).state }));
    const resource = backend.putResource(definition, 'k', {});
    // An earlier pass recorded the effect and died before it learned the outcome.
    await backend.recordEffect({ resourceUid: resource.metadata.uid, key: 'flip:1', kind: 'switch', generation: 1, requestFingerprint: jsonFingerprint({ to: 'on' }) });
    w.done = doneBefore;
    const out = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
    assert.equal(out.status.controllerStatus, 'applied');
    assert.equal(w.observes, 1);
    assert.equal(w.applies, doneBefore ? 0 : 1, `done before: ${doneBefore}`);
    assert.equal(backend.effects(resource.metadata.uid)[0].externalRef, doneBefore ? 'seen' : 'ref-1');
  }
});

test('an apply that throws leaves the effect indeterminate; the next pass observes, not applies', async () => {
  const backend = new MemoryBackend();
  const w = world();
  let fail = 'connection reset';
  const definition = named('effects', async (ctx) => {
    const e = await ctx.effects.ensure(flip(w, { fail }));
    return ctx.settled({ controllerStatus: { state: e.state, error: e.error ?? null } });
  });
  const resource = backend.putResource(definition, 'k', {});
  const first = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  assert.deepEqual(first.status.controllerStatus, { state: 'indeterminate', error: 'connection reset' });
  fail = undefined;
  const second = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  assert.deepEqual(second.status.controllerStatus, { state: 'applied', error: null });
  assert.deepEqual([w.applies, w.observes], [1, 1]);
  // observe itself may not know: the effect stays indeterminate, nothing is applied.
  const b2 = new MemoryBackend();
  const unsure = named('effects', async (ctx) => ctx.settled({ controllerStatus: (await ctx.effects.ensure({ ...flip(w), key: 'k2', observe: () => ({ state: 'indeterminate' }) })).state }));
  const r2 = b2.putResource(unsure, 'k', {});
  await b2.recordEffect({ resourceUid: r2.metadata.uid, key: 'k2', kind: 'switch', generation: 1, requestFingerprint: jsonFingerprint({ to: 'on' }) });
  const out = await runReconcilePass({ definition: unsure, resource: r2, backend: b2, deadlineMs: generous });
  assert.equal(out.status.controllerStatus, 'indeterminate');
  assert.equal(w.applies, 1);
});

test('an effect key reused with another request, or a second effect in one pass, is refused', async () => {
  const backend = new MemoryBackend();
  const w = world();
  let request = { to: 'on' };
  const definition = named('effects', async (ctx) => {
    await ctx.effects.ensure({ ...flip(w), request });
    return ctx.settled();
  });
  const resource = backend.putResource(definition, 'k', {});
  assert.equal((await runReconcilePass({ definition, resource, backend, deadlineMs: generous })).kind, 'settled');
  request = { to: 'off' };
  const out = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  assert.equal(out.kind, 'error');
  assert.equal(out.code, 'effect_conflict');
  assert.match(out.message, /effect key "flip:1" was already recorded with another request; .*put what differs/);
  assert.equal(w.applies, 1);
  await assert.rejects(backend.recordEffect({ resourceUid: resource.metadata.uid, key: 'flip:1', kind: 'switch', generation: 1, requestFingerprint: 'other' }), EffectRequestConflictError);

  const two = named('two-effects', async (ctx) => {
    await ctx.effects.ensure({ ...flip(world()), key: 'a' });
    await ctx.effects.ensure({ ...flip(world()), key: 'b' });
    return ctx.settled();
  });
  const r2 = backend.putResource(two, 'k', {});
  const out2 = await runReconcilePass({ definition: two, resource: r2, backend, deadlineMs: generous });
  assert.equal(out2.kind, 'error');
  assert.match(out2.message, /a pass ensures one effect; return ctx\.requeue\(\) after the first and ensure "b" in the next pass/);
  assert.deepEqual(backend.effects(r2.metadata.uid).map((e) => e.key), ['a']);
});

test('ctx.workflows.ensure finds the child run by its key, and refuses the key with another input', async () => {
  const backend = new MemoryBackend();
  let input = { number: 7, head: 'abc' };
  const definition = named('children', async (ctx) => {
    const run = await ctx.workflows.ensure({ requestKey: 'review:1', workflow: 'review', input });
    return ctx.requeueAfter(1000, { workflowRun: { requestId: run.requestId, runId: run.runId, state: run.state, attempt: run.attempt } });
  });
  const resource = backend.putResource(definition, 'k', {});
  const a = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  const b = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  assert.equal(a.kind, 'requeue');
  assert.equal(a.afterMs, 1000);
  assert.deepEqual(b.status.workflowRun, a.status.workflowRun, 'the same run, found again');
  assert.equal(backend.startedRuns.length, 1);
  assert.deepEqual(backend.startedRuns[0].input, { number: 7, head: 'abc' });
  // Interrupted: the next pass starts another attempt of the same request.
  backend.setWorkflowState(a.status.workflowRun.requestId, { state: 'interrupted' });
  const c = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  assert.equal(c.status.workflowRun.attempt, 2);
  assert.equal(c.status.workflowRun.requestId, a.status.workflowRun.requestId);
  assert.equal(backend.startedRuns.length, 2);
  input = { number: 7, head: 'def' };
  const d = await runReconcilePass({ definition, resource, backend, deadlineMs: generous });
  assert.equal(d.kind, 'error');
  assert.match(d.message, /workflow request key "review:1" was already used with another input; a changed input needs a new request key/);
  await assert.rejects(
    backend.ensureWorkflowRun({ resourceUid: resource.metadata.uid, requestKey: 'review:1', workflow: 'other', input: null, inputFingerprint: 'x' }),
    WorkflowRequestConflictError,
  );
});

test('a pass past its deadline is abandoned: outcome deadline, its signal aborted, its later calls refused', async () => {
  const backend = new MemoryBackend();
  let release;
  const held = new Promise((resolve) => {
    release = resolve;
  });
  let signal;
  let late = null;
  const definition = named('slow', async (ctx) => {
    signal = ctx.signal;
    await held; // a hang: only the deadline ends the pass
    try {
      await ctx.effects.ensure(flip(world()));
    } catch (e) {
      late = e;
    }
    return ctx.settled();
  });
  const resource = backend.putResource(definition, 'k', {});
  const out = await runReconcilePass({ definition, resource, backend, deadlineMs: 50 });
  assert.deepEqual({ kind: out.kind, deadlineMs: out.deadlineMs, status: out.status }, { kind: 'deadline', deadlineMs: 50, status: null });
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason.code, 'deadline');
  release();
  await held;
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(late?.code, 'pass_abandoned', 'the abandoned code reaches no backend');
  assert.deepEqual(backend.effects(resource.metadata.uid), []);
  // The definition's timeoutMs is the deadline when the caller gives none.
  const timed = named('timed', () => new Promise(noop), { timeoutMs: 20 });
  const out2 = await runReconcilePass({ definition: timed, resource: backend.putResource(timed, 'k', {}), backend });
  assert.equal(out2.kind, 'deadline');
  assert.equal(out2.deadlineMs, 20);
});

test('a thrown error is an error outcome with its message; a status over 1 MiB is refused', async () => {
  const backend = new MemoryBackend();
  const boom = named('boom', () => {
    throw new Error('forge unreachable');
  });
  const out = await runReconcilePass({ definition: boom, resource: backend.putResource(boom, 'k', {}), backend, deadlineMs: generous });
  assert.deepEqual({ kind: out.kind, message: out.message, status: out.status }, { kind: 'error', message: 'forge unreachable', status: null });
  const big = named('big', (ctx) => ctx.settled({ controllerStatus: 'x'.repeat(MAX_RESOURCE_VALUE_BYTES) }));
  const out2 = await runReconcilePass({ definition: big, resource: backend.putResource(big, 'k', {}), backend, deadlineMs: generous });
  assert.equal(out2.kind, 'error');
  assert.equal(out2.code, 'too_large');
  const fn = named('fn', (ctx) => ctx.settled({ controllerStatus: { cb: () => 1 } }));
  const out3 = await runReconcilePass({ definition: fn, resource: backend.putResource(fn, 'k', {}), backend, deadlineMs: generous });
  assert.match(out3.message, /status\.controllerStatus\.cb is a function/);
});

test('a pass logs through ctx.log into its outcome', async () => {
  const backend = new MemoryBackend();
  const seen = [];
  const definition = named('logs', (ctx) => {
    ctx.log.info('looked', { n: 1 });
    ctx.log.warn('odd');
    return ctx.requeue();
  });
  const out = await runReconcilePass({ definition, resource: backend.putResource(definition, 'k', {}), backend, deadlineMs: generous, now: clock(), onLog: (e) => seen.push(e.message) });
  assert.deepEqual(out.logs.map((l) => [l.level, l.message, l.fields]), [['info', 'looked', { n: 1 }], ['warn', 'odd', undefined]]);
  assert.deepEqual(seen, ['looked', 'odd']);
});

test('discovery: project over global, TypeScript loads, a duplicate name or a broken file is reported with its path', async () => {
  const cwd = join(tmp, 'project');
  const home = join(tmp, 'home');
  const projectDir = join(cwd, '.pi', 'controllers');
  const globalDir = join(home, '.pi', 'agent', 'controllers');
  mkdirSync(projectDir, { recursive: true });
  mkdirSync(globalDir, { recursive: true });
  const source = (name) => `import { defineController } from "@osolmaz/pi-workflows/controllers";\nexport default defineController({ name: "${name}", initialStatus: () => ({}), reconcile: (ctx) => ctx.settled() });\n`;
  writeFileSync(join(projectDir, 'alpha.controller.ts'), `enum Phase { A }\nconst p: Phase = Phase.A;\n${source('alpha')}`);
  writeFileSync(join(globalDir, 'alpha.controller.mjs'), source('alpha-global'));
  writeFileSync(join(globalDir, 'beta.controller.mjs'), source('beta').replace('@osolmaz/pi-workflows/controllers', 'piw/controllers'));
  writeFileSync(join(globalDir, 'notes.md'), 'not a controller');
  const found = await discoverControllers({ cwd, homeDir: home });
  assert.deepEqual(found.map((f) => [f.name, f.source]), [['alpha', 'project'], ['beta', 'global']]);
  const loaded = await loadDiscoveredControllers({ cwd, homeDir: home });
  assert.deepEqual(loaded.map((d) => d.name), ['alpha', 'beta']);
  assert.ok(loaded.every(isControllerDefinition));

  // Two files defining one name: refused, naming both.
  writeFileSync(join(projectDir, 'gamma.controller.mjs'), source('beta'));
  await assert.rejects(loadDiscoveredControllers({ cwd, homeDir: home }), (e) => {
    assert.equal(e.code, 'duplicate_controller');
    assert.match(e.message, new RegExp(`controller "beta" is defined both by ${join(globalDir, 'beta.controller.mjs')} and by ${join(projectDir, 'gamma.controller.mjs')}`));
    return true;
  });
  rmSync(join(projectDir, 'gamma.controller.mjs'));
  // A file that fails to load, and one that exports no controller: both reported.
  writeFileSync(join(projectDir, 'broken.controller.mjs'), 'export default defineController({ name: "broken" });\n');
  writeFileSync(join(projectDir, 'plain.controller.mjs'), 'export default { name: "plain" };\n');
  await assert.rejects(loadDiscoveredControllers({ cwd, homeDir: home }), (e) => {
    assert.equal(e.code, 'load_failed');
    assert.deepEqual(e.failures.map((f) => f.path), [join(projectDir, 'broken.controller.mjs'), join(projectDir, 'plain.controller.mjs')]);
    assert.match(e.failures[0].message, /broken\.controller\.mjs failed to load: defineController is not defined/);
    assert.match(e.failures[1].message, /must export default defineController\(\{ name, initialStatus, reconcile \}\)/);
    return true;
  });
  // Two files of one stem in one directory.
  writeFileSync(join(projectDir, 'alpha.controller.mjs'), source('alpha'));
  await assert.rejects(discoverControllers({ cwd, homeDir: home }), /two controller files named "alpha" in .*alpha\.controller\.mjs and .*alpha\.controller\.ts; keep one/);
  assert.equal((await loadControllerFile(join(globalDir, 'beta.controller.mjs'))).name, 'beta');
});
