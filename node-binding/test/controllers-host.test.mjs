// Controllers served by a real host, with no Pi anywhere: the pull-request example
// (examples/controllers/) registered in a project, its resources applied, and every pass run by
// the host in a child of its own against a fake forge on 127.0.0.1: checks failing then
// passing, the head moving, one merge when the pass's child is killed (SIGKILL) between the
// forge's merge and the effect's settle, a deletion that waits for its finalizer, and a host
// stopped and started again in the middle of a merge, which loses and doubles nothing.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { startFakeForge } from './fake-forge.mjs';
import { alive, pkgDir, sleep, startHost } from './helpers.mjs';

const EXAMPLE = join(pkgDir, '..', 'examples', 'controllers', 'pull-request.controller.mjs');
const NAME = 'pull-request';
const HEAD = 'a1b2c3d';

let forge;
let host;
let client;
let project;
let source;

before(async () => {
  forge = await startFakeForge();
  host = await startHost();
  client = host.client;
  project = join(host.dir, 'project');
  mkdirSync(join(project, '.pi', 'controllers'), { recursive: true });
  source = join(project, '.pi', 'controllers', 'pull-request.controller.mjs');
  copyFileSync(EXAMPLE, source);
  await register(client);
});

after(async () => {
  await host?.stop();
  await forge?.close();
});

async function register(c) {
  const sourceHash = createHash('sha256').update(readFileSync(source)).digest('hex');
  const reg = await c.request('controller.register', {}, { project_dir: project, name: NAME, source_path: source, source_hash: sourceHash, pass_deadline_ms: 60_000 });
  assert.equal(reg.body.controller.enabled, false, 'registered, not yet started');
  const on = await c.request('controller.enable', {}, { project_dir: project, name: NAME });
  assert.equal(on.body.controller.enabled, true);
}

const ref = (key) => ({ project_dir: project, controller: NAME, key });

async function apply(key, spec, c = client) {
  return (await c.request('resource.apply', {}, { ...ref(key), spec })).body;
}

async function get(key, c = client) {
  return (await c.request('resource.get', {}, ref(key))).body;
}

/** Reads the resource until `done(reply)` holds (or it is gone, when `done` accepts null); only a hang reaches the bound. */
async function until(key, done, what, c = client) {
  const deadline = Date.now() + 60_000;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await get(key, c);
    } catch (e) {
      if (e.code !== 'not_found') throw e;
      last = null;
    }
    if (done(last)) return last;
    await sleep(50);
  }
  assert.fail(`waiting for ${what}: ${JSON.stringify(last, null, 2)?.slice(0, 4000)}`);
}

const condition = (reply, type) => reply?.resource.status?.conditions.find((c) => c.type === type);
const phase = (reply) => reply?.resource.status?.controllerStatus?.phase;

function spec(number, expectedHeadSha = HEAD) {
  return { apiUrl: forge.url, repository: forge.repository, number, expectedHeadSha, pollMs: 200 };
}

/** The pids of this installation's pass children. */
function passChildren() {
  const entry = `PIW_HOME=${host.home}`;
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        const env = readFileSync(`/proc/${name}/environ`, 'latin1').split('\0');
        return env.includes(entry) && readFileSync(`/proc/${name}/cmdline`, 'latin1').includes('controllers/child.js');
      } catch {
        return false;
      }
    })
    .map(Number);
}

test('checks failing then passing: the host reconciles with no Pi and merges the expected head once', async () => {
  forge.openPull(1, HEAD);
  forge.setChecks(HEAD, 'failure');
  const created = await apply(`${forge.repository}#1`, spec(1));
  assert.equal(created.outcome, 'created');
  assert.deepEqual([created.resource.resource_version, created.resource.generation, created.resource.status], [1, 1, null]);

  const waiting = await until(created.resource.key, (r) => condition(r, 'ChecksPassed')?.reason === 'ChecksFailing', 'failing checks reported');
  assert.deepEqual(waiting.resource.finalizers, ['pull-request.label']);
  assert.deepEqual(forge.pull(1).labels, ['piw-watching']);
  assert.equal(forge.mergesOf(1), 0);
  assert.equal(waiting.queue.reason, 'requeue after 200 ms', 'waiting on the checks, not failing');

  forge.setChecks(HEAD, 'success');
  const merged = await until(created.resource.key, (r) => phase(r) === 'merged' && r.queue === null, 'the merge, settled');
  assert.equal(forge.mergesOf(1), 1);
  assert.equal(merged.resource.status.controllerStatus.mergeSha, forge.pull(1).mergeSha);
  assert.deepEqual(
    merged.effects.filter((e) => e.kind === 'forge-merge').map((e) => [e.key, e.state, e.external_ref]),
    [[`merge:1:${HEAD}`, 'applied', forge.pull(1).mergeSha]],
  );
  assert.ok(merged.passes.every((p) => p.outcome !== 'error' && p.outcome !== 'deadline'), JSON.stringify(merged.passes));

  // Asking again runs another pass; it reads the forge and merges nothing.
  const before = merged.passes.at(-1).pass_id;
  await client.request('resource.reconcile', {}, ref(created.resource.key));
  await until(created.resource.key, (r) => r.passes.at(-1).pass_id !== before && r.queue === null, 'another settled pass');
  assert.equal(forge.mergesOf(1), 1);
});

test('a moved head is reported, never merged; a new spec (generation 2) merges the new head', async () => {
  const key = `${forge.repository}#2`;
  forge.openPull(2, HEAD);
  forge.setChecks('e5f6a7b', 'success');
  forge.push(2, 'e5f6a7b');
  await apply(key, spec(2));
  const moved = await until(key, (r) => phase(r) === 'head-moved', 'the moved head reported');
  assert.equal(condition(moved, 'HeadCurrent').reason, 'HeadMoved');
  assert.equal(forge.mergesOf(2), 0);

  const updated = await apply(key, spec(2, 'e5f6a7b'));
  assert.equal(updated.outcome, 'updated');
  assert.equal(updated.resource.generation, 2);
  const merged = await until(key, (r) => phase(r) === 'merged', 'the new head merged');
  assert.equal(merged.resource.status.observedGeneration, 2);
  assert.equal(forge.mergesOf(2), 1);
});

test("a pass child killed between the forge's merge and the effect's settle: the next pass observes and merges nothing", async () => {
  const key = `${forge.repository}#3`;
  forge.openPull(3, HEAD);
  forge.setChecks(HEAD, 'success');
  let killed = 0;
  forge.onMerge = async () => {
    // The forge has merged; its answer is never read: the pass's child dies first.
    for (const pid of passChildren()) {
      process.kill(pid, 'SIGKILL');
      killed += 1;
    }
  };
  try {
    await apply(key, spec(3));
    const merged = await until(key, (r) => phase(r) === 'merged' && r.queue === null, 'the merge observed after the kill');
    assert.ok(killed >= 1, 'the pass child in the merge was killed');
    assert.equal(forge.mergesOf(3), 1, 'observed as merged: not merged again');
    const [effect] = merged.effects.filter((e) => e.kind === 'forge-merge');
    assert.deepEqual([effect.state, effect.external_ref], ['applied', forge.pull(3).mergeSha]);
    const outcomes = merged.passes.map((p) => p.outcome);
    assert.ok(outcomes.includes('error'), `the killed pass is recorded as failed: ${outcomes}`);
    assert.match(merged.passes.find((p) => p.outcome === 'error').message, /^the pass's child exited by signal 9 before it finished$/);
  } finally {
    forge.onMerge = null;
  }
});

test('deletion: the finalizer keeps the resource until the label is off the pull request', async () => {
  const key = `${forge.repository}#4`;
  forge.openPull(4, HEAD);
  forge.setChecks(HEAD, 'pending');
  await apply(key, spec(4));
  await until(key, (r) => condition(r, 'ChecksPassed')?.reason === 'ChecksPending', 'pending checks reported');
  assert.deepEqual(forge.pull(4).labels, ['piw-watching']);

  const asked = (await client.request('resource.delete', {}, ref(key))).body;
  assert.equal(asked.state, 'pending');
  assert.ok(asked.resource.deletion_requested_at > 0);
  await until(key, (r) => r === null, 'the resource gone');
  assert.deepEqual(forge.pull(4).labels, []);
  assert.equal(forge.log.filter((l) => l.method === 'DELETE' && l.path.includes('/issues/4/')).length, 1);
  assert.equal(forge.mergesOf(4), 0);
  const list = (await client.request('resource.list', {}, { project_dir: project, controller: NAME })).body;
  assert.ok(!list.resources.some((r) => r.key === key));
});

test('a host stopped in the middle of a merge and started again loses and doubles nothing', async () => {
  const key = `${forge.repository}#5`;
  forge.openPull(5, HEAD);
  forge.setChecks(HEAD, 'success');
  let reached;
  const inMerge = new Promise((resolve) => {
    reached = resolve;
  });
  forge.onMerge = async () => {
    reached();
    await new Promise(() => {}); // the answer never comes: the host stops under the pass
  };
  let restarted;
  try {
    await apply(key, spec(5));
    await inMerge;
    forge.onMerge = null;
    await client.request('host.stop').catch(() => {});
    const deadline = Date.now() + 30_000;
    while (passChildren().length > 0 && Date.now() < deadline) await sleep(20);
    assert.deepEqual(passChildren(), [], "the host stopped its pass's child");

    restarted = await host.connect(); // starts a new host on the same installation
    const merged = await until(key, (r) => phase(r) === 'merged' && r.queue === null, 'the merge after the restart', restarted);
    assert.equal(forge.mergesOf(5), 1, 'merged once');
    const [effect] = merged.effects.filter((e) => e.kind === 'forge-merge');
    assert.equal(effect.state, 'applied');
    const outcomes = merged.passes.map((p) => p.outcome);
    assert.ok(outcomes.includes('interrupted'), `the stopped pass is recorded as interrupted: ${outcomes}`);
    assert.ok(!outcomes.includes('error') && !outcomes.includes('deadline'), `a restart is not the controller's failure: ${outcomes}`);
    const findings = (await restarted.request('diagnose')).body.findings;
    assert.deepEqual(findings, []);
  } finally {
    forge.onMerge = null;
    client = restarted ?? client;
  }
});

test('a host killed (SIGKILL) in the middle of a merge: the next host requeues the pass without counting an error', async () => {
  const key = `${forge.repository}#6`;
  forge.openPull(6, HEAD);
  forge.setChecks(HEAD, 'success');
  let reached;
  const inMerge = new Promise((resolve) => {
    reached = resolve;
  });
  forge.onMerge = async () => {
    reached();
    await new Promise(() => {}); // the answer never comes: the host dies under the pass
  };
  let restarted;
  try {
    await apply(key, spec(6));
    await inMerge;
    forge.onMerge = null;
    const { pid } = await client.status();
    process.kill(pid, 'SIGKILL');
    const deadline = Date.now() + 30_000;
    while (alive(pid) && Date.now() < deadline) await sleep(20);
    assert.equal(alive(pid), false);

    restarted = await host.connect();
    const merged = await until(key, (r) => phase(r) === 'merged' && r.queue === null, 'the merge after the crash', restarted);
    assert.equal(forge.mergesOf(6), 1, 'merged once');
    const outcomes = merged.passes.map((p) => p.outcome);
    assert.ok(outcomes.includes('interrupted'), `the dead host's pass is recorded as interrupted: ${outcomes}`);
    assert.ok(!outcomes.includes('error') && !outcomes.includes('deadline'), `a crash of the host is not the controller's failure: ${outcomes}`);
    assert.deepEqual((await restarted.request('diagnose')).body.findings, []);
  } finally {
    forge.onMerge = null;
    client = restarted ?? client;
  }
});

test('a child workflow run: started once by its request key, its end wakes a settled resource, a cancelled run gets a new attempt', async () => {
  const gate = join(host.dir, 'tally.gate');
  mkdirSync(join(project, '.pi', 'workflows'), { recursive: true });
  writeFileSync(
    join(project, '.pi', 'workflows', 'tally.workflow.mjs'),
    `import * as piw from ${JSON.stringify(join(pkgDir, 'index.js'))};
import { existsSync } from 'node:fs';
export default piw.defineWorkflow({
  name: 'tally', startAt: 'count',
  nodes: { count: piw.compute({ run: async ({ input }) => {
    while (!existsSync(input.gate)) await new Promise((r) => setTimeout(r, 50));
    return { doubled: input.n * 2 };
  } }) },
  edges: [],
});
`,
  );
  const tally = join(project, '.pi', 'controllers', 'tally.controller.mjs');
  writeFileSync(
    tally,
    `import { defineController } from 'piw/controllers';
export default defineController({
  name: 'tally',
  initialStatus: () => ({ phase: 'new' }),
  async reconcile(ctx, resource) {
    const run = await ctx.workflows.ensure({ requestKey: 'tally:' + resource.metadata.generation, workflow: 'tally', input: { n: resource.spec.n, gate: resource.spec.gate } });
    const seen = { phase: run.state, runId: run.runId ?? null, attempt: run.attempt };
    // Settled whatever the run's state: only the run's end brings the next pass.
    return ctx.settled({ controllerStatus: seen, workflowRun: { requestId: run.requestId, runId: run.runId, state: run.state, attempt: run.attempt } });
  },
});
`,
  );
  const hash = createHash('sha256').update(readFileSync(tally)).digest('hex');
  await client.request('controller.register', {}, { project_dir: project, name: 'tally', source_path: tally, source_hash: hash, pass_deadline_ms: null });
  await client.request('controller.enable', {}, { project_dir: project, name: 'tally' });
  const at = { project_dir: project, controller: 'tally', key: 'one' };
  const read = async () => (await client.request('resource.get', {}, at)).body;
  const wait = async (done, what) => {
    const deadline = Date.now() + 60_000;
    let last;
    while (Date.now() < deadline) {
      last = await read();
      if (done(last)) return last;
      await sleep(50);
    }
    assert.fail(`waiting for ${what}: ${JSON.stringify(last)?.slice(0, 3000)}`);
  };
  const cs = (r) => r.resource.status?.controllerStatus;
  await client.request('resource.apply', {}, { ...at, spec: { n: 21, gate } });

  const first = await wait((r) => cs(r)?.phase === 'running' && r.queue === null, 'the first attempt running, the resource settled');
  assert.equal(first.resource.status.controllerStatus.attempt, 1);
  const run1 = cs(first).runId;
  // Another pass finds the same request: no second run.
  const before = first.passes.length;
  await client.request('resource.reconcile', {}, at);
  const again = await wait((r) => r.passes.length > before && r.queue === null, 'another settled pass');
  assert.deepEqual([cs(again).runId, cs(again).attempt], [run1, 1]);

  // Cancelled: the run's end wakes the resource, whose pass starts attempt 2.
  await client.cancelRun(run1, { reason: 'the test stops it' });
  const second = await wait((r) => cs(r)?.attempt === 2 && r.queue === null, 'a second attempt after the cancel');
  const run2 = cs(second).runId;
  assert.notEqual(run2, run1);

  // It succeeds: its end wakes the settled resource once more.
  writeFileSync(gate, '');
  const done = await wait((r) => cs(r)?.phase === 'succeeded' && r.queue === null, 'the run succeeded and seen');
  assert.deepEqual([cs(done).runId, cs(done).attempt], [run2, 2]);
  assert.deepEqual(done.resource.status.workflowRun.state, 'succeeded');
  const status = await client.runStatus(run2);
  assert.equal(status.run.status, 'completed');
});
