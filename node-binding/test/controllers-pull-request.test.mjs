// The pull-request controller example (examples/controllers/) end to end against a fake forge
// on 127.0.0.1, one pass at a time on the in-memory backend, each outcome committed as the host
// will commit it: a moved head, checks failing then passing, one merge however the passes go
// (a pass killed after the forge merged and before the merge was recorded included), and a
// deletion that takes the label off before the resource goes.
import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { MemoryBackend, loadControllerFile, runReconcilePass } from '../lib/controllers/index.js';
import { startFakeForge } from './fake-forge.mjs';
import { pkgDir } from './helpers.mjs';

const EXAMPLE = join(pkgDir, '..', 'examples', 'controllers', 'pull-request.controller.mjs');
const HEAD = 'a1b2c3d';
let forge;
let controller;

before(async () => {
  forge = await startFakeForge();
  controller = await loadControllerFile(EXAMPLE);
});
after(async () => {
  await forge?.close();
});

/** A resource for pull request `number` on a fresh backend. */
function watch(number, expectedHeadSha = HEAD) {
  forge.openPull(number, HEAD);
  const backend = new MemoryBackend();
  const resource = backend.putResource(controller, `${forge.repository}#${number}`, { apiUrl: forge.url, repository: forge.repository, number, expectedHeadSha, pollMs: 1000 });
  return { backend, key: resource.metadata.key };
}

/** One pass over the stored resource, committed; returns the outcome and the resource after it. */
async function pass({ backend, key }) {
  const read = backend.getResource('pull-request', key);
  const outcome = await runReconcilePass({ definition: controller, resource: read, backend, deadlineMs: 30_000 });
  assert.notEqual(outcome.kind, 'error', outcome.message);
  assert.notEqual(outcome.kind, 'deadline');
  return { outcome, resource: backend.commit(read, outcome) };
}

/** Passes until one settles (at most `max`), like the host's queue with no wait between them. */
async function untilSettled(w, max = 10) {
  for (let i = 0; i < max; i += 1) {
    const r = await pass(w);
    if (r.outcome.kind === 'settled') return r;
  }
  assert.fail(`no settled pass in ${max}`);
}

const condition = (resource, type) => resource.status.conditions.find((c) => c.type === type);

test('checks failing then passing: waits, then merges the expected head once', async () => {
  const w = watch(1);
  forge.setChecks(HEAD, 'failure');
  let r = await pass(w);
  assert.equal(r.outcome.kind, 'requeue', 'the first pass adds the finalizer');
  assert.deepEqual(r.resource.metadata.finalizers, ['pull-request.label']);
  assert.deepEqual(forge.pull(1).labels, [], 'the label comes after the finalizer is committed');
  r = await pass(w);
  assert.deepEqual(forge.pull(1).labels, ['piw-watching']);
  r = await pass(w);
  assert.deepEqual([r.outcome.kind, r.outcome.afterMs], ['requeue', 1000]);
  const failing = condition(r.resource, 'ChecksPassed');
  assert.deepEqual([failing.status, failing.reason, failing.message], [false, 'ChecksFailing', `checks on ${HEAD}: failure`]);
  r = await pass(w);
  assert.equal(condition(r.resource, 'ChecksPassed').reason, 'ChecksFailing', 'still failing: still waiting');
  assert.equal(forge.mergesOf(1), 0);

  forge.setChecks(HEAD, 'success');
  r = await untilSettled(w);
  assert.equal(forge.mergesOf(1), 1);
  assert.deepEqual(r.resource.status.controllerStatus, { phase: 'merged', headSha: HEAD, mergeSha: forge.pull(1).mergeSha });
  assert.equal(condition(r.resource, 'Merged').status, true);
  // More passes (events arriving again) never merge again.
  for (let i = 0; i < 3; i += 1) await pass(w);
  assert.equal(forge.mergesOf(1), 1);
  const merges = w.backend.effects(r.resource.metadata.uid).filter((e) => e.kind === 'forge-merge');
  assert.deepEqual(merges.map((e) => [e.key, e.state]), [[`merge:1:${HEAD}`, 'applied']]);
});

test('a moved head is a condition, never a merge; a new expected head then merges', async () => {
  const w = watch(2);
  forge.setChecks(HEAD, 'success');
  forge.setChecks('e5f6a7b', 'success');
  forge.push(2, 'e5f6a7b');
  let r = await untilSettled(w);
  assert.equal(forge.mergesOf(2), 0);
  assert.equal(forge.pull(2).merged, false);
  assert.equal(r.resource.status.controllerStatus.phase, 'head-moved');
  const moved = condition(r.resource, 'HeadCurrent');
  assert.deepEqual([moved.status, moved.reason], [false, 'HeadMoved']);
  assert.match(moved.message, /the head is e5f6a7b, not the expected a1b2c3d; set spec\.expectedHeadSha/);

  // Whoever asked reviews the new head and asks for it: a new generation.
  const before = forge.mergesOf(2);
  const spec = { ...w.backend.getResource('pull-request', w.key).spec, expectedHeadSha: 'e5f6a7b' };
  assert.equal(w.backend.putResource(controller, w.key, spec).metadata.generation, 2);
  r = await untilSettled(w);
  assert.equal(forge.mergesOf(2), before + 1);
  assert.equal(forge.pull(2).merged, true);
  assert.equal(r.resource.status.observedGeneration, 2);
  assert.equal(condition(r.resource, 'HeadCurrent').status, true);
});

test('the head moving between the check and the merge: the forge refuses, the controller reports it', async () => {
  const w = watch(3);
  forge.setChecks(HEAD, 'success');
  await pass(w); // finalizer
  await pass(w); // label
  // The head moves after the pass read it and before the merge request: the forge's own
  // precondition (the sha of the merge) refuses.
  const read = w.backend.getResource('pull-request', w.key);
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (url, init) => {
    if (init?.method === 'PUT') forge.push(3, 'f00ba47');
    return realFetch(url, init);
  };
  let outcome;
  try {
    outcome = await runReconcilePass({ definition: controller, resource: read, backend: w.backend, deadlineMs: 30_000 });
  } finally {
    globalThis.fetch = realFetch;
  }
  const r = w.backend.commit(read, outcome);
  assert.equal(outcome.kind, 'settled');
  assert.equal(forge.mergesOf(3), 0);
  assert.deepEqual([condition(r, 'Merged').reason, condition(r, 'Merged').message], ['MergeRejected', 'Head branch was modified. Review and try the merge again.']);
});

test('a pass killed after the forge merged, before the merge was recorded: the next pass observes and does not merge again', async () => {
  const w = watch(4);
  forge.setChecks(HEAD, 'success');
  await pass(w); // finalizer
  await pass(w); // label
  const read = w.backend.getResource('pull-request', w.key);
  const child = fork(join(pkgDir, 'test', 'controllers-pass-child.mjs'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const exited = once(child, 'exit');
  child.on('message', async (m) => {
    if (m.type !== 'call') return;
    try {
      child.send({ type: 'reply', id: m.id, value: await w.backend[m.method](m.req) });
    } catch (e) {
      child.send({ type: 'reply', id: m.id, error: { message: e.message, code: e.code } });
    }
  });
  const merged = new Promise((resolve) => {
    // The forge has merged; its answer is not sent until the child is dead.
    forge.onMerge = async () => {
      resolve();
      await exited;
    };
  });
  child.send({ type: 'pass', file: EXAMPLE, resource: read, deadlineMs: 30_000 });
  await merged;
  child.kill('SIGKILL');
  const [, signal] = await exited;
  forge.onMerge = null;
  assert.equal(signal, 'SIGKILL');
  assert.equal(forge.mergesOf(4), 1);
  const [effect] = w.backend.effects(read.metadata.uid).filter((e) => e.kind === 'forge-merge');
  assert.equal(effect.state, 'pending', 'the merge was recorded before it was sent, and never settled');
  assert.equal(w.backend.getResource('pull-request', w.key).metadata.resourceVersion, read.metadata.resourceVersion, 'the killed pass committed nothing');

  const r = await untilSettled(w);
  assert.equal(forge.mergesOf(4), 1, 'observed as merged: not merged again');
  const [after] = w.backend.effects(read.metadata.uid).filter((e) => e.kind === 'forge-merge');
  assert.deepEqual([after.state, after.externalRef], ['applied', forge.pull(4).mergeSha]);
  assert.equal(r.resource.status.controllerStatus.phase, 'merged');
});

test('deletion: the finalizer keeps the resource until the label is off the pull request', async () => {
  const w = watch(5);
  forge.setChecks(HEAD, 'pending');
  await pass(w); // finalizer
  await pass(w); // label
  let r = await pass(w);
  assert.equal(condition(r.resource, 'ChecksPassed').reason, 'ChecksPending');
  assert.deepEqual(forge.pull(5).labels, ['piw-watching']);

  w.backend.requestDeletion('pull-request', w.key);
  const read = w.backend.getResource('pull-request', w.key);
  assert.ok(read.metadata.deletionTimestamp);
  r = await pass(w);
  assert.equal(r.outcome.kind, 'settled');
  assert.deepEqual(forge.pull(5).labels, [], 'the label was removed');
  assert.equal(r.resource, null, 'no finalizer left: the resource is gone');
  assert.equal(w.backend.getResource('pull-request', w.key), null);
  assert.equal(forge.mergesOf(5), 0);
  const unlabels = forge.log.filter((l) => l.method === 'DELETE' && l.path.includes('/issues/5/'));
  assert.equal(unlabels.length, 1);
});

test('deletion: a label removal whose outcome is unknown keeps the finalizer, and is observed next time', async () => {
  const w = watch(6);
  forge.setChecks(HEAD, 'pending');
  await pass(w);
  await pass(w);
  w.backend.requestDeletion('pull-request', w.key);
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (url, init) => {
    if (init?.method === 'DELETE') {
      await realFetch(url, init); // the forge removes it; the answer is lost
      throw new TypeError('fetch failed');
    }
    return realFetch(url, init);
  };
  let r;
  try {
    r = await pass(w);
  } finally {
    globalThis.fetch = realFetch;
  }
  assert.deepEqual([r.outcome.kind, r.resource.metadata.finalizers], ['requeue', ['pull-request.label']]);
  assert.equal(condition(r.resource, 'Released').reason, 'LabelRemovalUncertain');
  r = await pass(w);
  assert.equal(r.resource, null);
  assert.equal(forge.log.filter((l) => l.method === 'DELETE' && l.path.includes('/issues/6/')).length, 1);
});
