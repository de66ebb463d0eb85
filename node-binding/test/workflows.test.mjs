// JS workflows run by the Node worker runtime in supervised children.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';

import { pkgDir, startHost, writeWorkflow } from './helpers.mjs';

const examples = resolve(pkgDir, '..', 'examples');
let host;

before(async () => {
  host = await startHost();
});

after(async () => {
  await host?.stop();
});

test('a JS workflow runs to completion, each node fed the previous output', async () => {
  const file = writeWorkflow(
    host.dir,
    'chain',
    `export default piw.defineWorkflow({
      name: 'chain', start: 'a',
      nodes: {
        a: piw.compute((input) => ({ n: input.n + 1 })),
        b: piw.compute(async (input) => { await new Promise((r) => setTimeout(r, 5)); return { n: input.n * 10 }; }),
        c: piw.compute((input, ctx) => ({ n: input.n + 1, run: ctx.runId, first: ctx.runInput })),
      },
      edges: [piw.to('a', 'b'), piw.to('b', 'c')],
    });`,
  );
  const { run_id: runId } = await host.client.startRun(file, { input: { n: 1 } });
  const run = await host.client.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { n: 21, run: runId, first: { n: 1 } });
});

test('a failing node routes on $result.outcome; without such an edge the run fails', async () => {
  const file = writeWorkflow(
    host.dir,
    'routes',
    `export default piw.defineWorkflow({
      name: 'routes', start: 'risky',
      nodes: {
        risky: piw.compute((input) => { if (input.fail) throw new Error('boom ' + input.fail); return { fine: true }; }),
        recover: piw.compute(() => ({ recovered: true })),
        proceed: piw.compute((input) => input),
        strict: piw.compute(() => { throw new Error('no route for this'); }),
      },
      edges: [
        piw.onOutcome('risky', { succeeded: 'proceed', failed: 'recover' }),
        piw.to('recover', 'strict'),
      ],
    });`,
  );
  const c = host.client;
  const ok = await c.waitForRun((await c.startRun(file, { input: {} })).run_id, { timeoutMs: 20_000 });
  assert.deepEqual([ok.status, ok.result], ['completed', { fine: true }]);
  const { run_id: runId } = await c.startRun(file, { input: { fail: 1 } });
  const failed = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(failed.status, 'failed');
  assert.match(failed.error, /no route for this/);
  const { attempts } = await c.runStatus(runId);
  assert.deepEqual(
    attempts.map((a) => [a.node_id, a.status]).reverse(), // newest first
    [['risky', 'failed'], ['recover', 'succeeded'], ['strict', 'failed']],
  );
});

test('a .workflow.ts source runs with its types stripped by Node', async () => {
  const file = writeWorkflow(
    host.dir,
    'typed',
    `interface Input { name: string }
    const greet = (input: Input): { greeting: string } => ({ greeting: 'hello ' + input.name });
    export default piw.defineWorkflow({ name: 'typed', start: 'greet', nodes: { greet: piw.compute(greet) } });`,
    '.workflow.ts',
  );
  const run = await host.client.waitForRun((await host.client.startRun(file, { input: { name: 'ts' } })).run_id, {
    timeoutMs: 20_000,
  });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { greeting: 'hello ts' });
});

test('an invalid graph is refused when the workflow is defined', async () => {
  const { defineWorkflow, compute, to } = await import('../index.js');
  assert.throws(
    () => defineWorkflow({ name: 'bad', start: 'a', nodes: { a: compute(() => 1) }, edges: [to('a', 'missing')] }),
    (e) => e.code === 'invalid_graph' && /missing/.test(e.message),
  );
});

test('a changed mounted source stops the resumed run for review before any module code runs', async () => {
  const marker = join(host.dir, 'loaded-marker');
  const lib = join(host.dir, 'lib.mjs');
  writeFileSync(lib, 'export const factor = 2;\n');
  const file = writeWorkflow(
    host.dir,
    'mounted',
    `import { writeFileSync } from 'node:fs';
    import { factor } from './lib.mjs';
    writeFileSync(${JSON.stringify(marker)}, 'loaded');
    export default piw.defineWorkflow({
      name: 'mounted', start: 'ask', baseUrl: import.meta.url, mounts: { lib: './lib.mjs' },
      nodes: {
        ask: piw.checkpoint({ request: () => ({ question: 'continue?' }) }),
        done: piw.compute((input) => ({ factor, input })),
      },
      edges: [piw.to('ask', 'done')],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file, {});
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.ok(existsSync(marker), 'the first child loaded the module');
  const { decisions } = await c.runStatus(runId);
  // Change the included source while the run waits, then let it resume.
  writeFileSync(lib, 'export const factor = 3;\n');
  const { rmSync } = await import('node:fs');
  rmSync(marker);
  await c.answerCheckpoint(runId, decisions[0].decision_id, 'yes');
  const run = await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.equal(run.status, 'review');
  assert.match(run.review_reason, /source_changed/);
  assert.equal(existsSync(marker), false, 'no module code ran in the resumed child');
});

test('the effect example appends exactly one line although its child is killed mid-effect', async () => {
  const log = join(host.dir, 'effect.log');
  const marker = join(host.dir, 'crashed-once');
  const { run_id: runId } = await host.client.startRun(join(examples, 'append-once.workflow.mjs'), {
    input: { file: log, line: 'deploy', crashAfterAppendOnce: marker },
  });
  const run = await host.client.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', JSON.stringify(run));
  assert.ok(existsSync(marker), 'the first child was killed after appending');
  const lines = readFileSync(log, 'utf8').split('\n').filter(Boolean);
  assert.deepEqual(lines, [`deploy [run ${runId}]`]);
  assert.deepEqual(run.result, { appended: false, line: lines[0], lines: 1 });
  const { effects } = await host.client.runStatus(runId);
  assert.equal(effects.length, 1);
  assert.equal(effects[0].state, 'applied');
});

test('the pipeline example routes on its output', async () => {
  const names = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta'];
  const text = Array.from({ length: 25 }, (_, i) => names[i % 7]).join(' ');
  const run = await host.client.waitForRun(
    (await host.client.startRun(join(examples, 'pipeline.workflow.mjs'), { input: { text } })).run_id,
    { timeoutMs: 20_000 },
  );
  assert.equal(run.status, 'completed');
  assert.equal(run.result.size, 'long');
  assert.equal(run.result.total, 25);
  assert.match(run.result.summary, /a long text: 25 words, 7 distinct/);
});

test('an action: EffectFailed settles the effect failed; any other exception leaves it in doubt', async () => {
  const file = writeWorkflow(
    host.dir,
    'doubt',
    `export default piw.defineWorkflow({
      name: 'doubt', start: 'act',
      nodes: {
        act: piw.action({
          effect: { key: () => 'charge' },
          apply: (input) => {
            if (input.refuse) throw new piw.EffectFailed('card declined');
            throw new Error('the network went away');
          },
        }),
        declined: piw.compute(() => ({ declined: true })),
      },
      edges: [piw.onOutcome('act', { failed: 'declined' })],
    });`,
  );
  const c = host.client;
  const refused = await c.waitForRun((await c.startRun(file, { input: { refuse: true } })).run_id, { timeoutMs: 20_000 });
  assert.equal(refused.status, 'completed', JSON.stringify(refused));
  assert.deepEqual(refused.result, { declined: true });
  assert.equal((await c.runStatus(refused.run_id)).effects[0].state, 'failed');

  const { run_id: runId } = await c.startRun(file, { input: {} });
  const doubtful = await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.equal(doubtful.status, 'review', JSON.stringify(doubtful));
  const { effects } = await c.runStatus(runId);
  assert.equal(effects[0].state, 'uncertain');
});

test('an output too large for the host fails its node with a clear error', async () => {
  const file = writeWorkflow(
    host.dir,
    'huge',
    `export default piw.defineWorkflow({ name: 'huge', start: 'big',
      nodes: { big: piw.compute(() => ({ blob: 'x'.repeat(300_000) })) } });`,
  );
  const run = await host.client.waitForRun((await host.client.startRun(file)).run_id, { timeoutMs: 20_000 });
  assert.equal(run.status, 'failed');
  assert.match(run.error, /the output is \d+ bytes of JSON; at most 245760/);
});

test('node code that throws or returns what JSON cannot hold fails the node, not the child', async () => {
  const file = writeWorkflow(
    host.dir,
    'odd',
    `export default piw.defineWorkflow({
      name: 'odd', start: 'big',
      nodes: {
        big: piw.compute(() => ({ n: 10n })),
        badKey: piw.action({ effect: { key: () => { throw new Error('no key'); } }, apply: () => 1 }),
        done: piw.compute((input, ctx) => ({ attempt: typeof ctx.attemptId }), { timeoutMs: 10_000 }),
      },
      edges: [
        piw.onOutcome('big', { failed: 'badKey' }),
        piw.onOutcome('badKey', { failed: 'done' }),
      ],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', JSON.stringify(run));
  const { attempts } = await c.runStatus(runId);
  const failed = attempts.filter((a) => a.status === 'failed').reverse(); // oldest first
  assert.match(failed[0].error, /the output is not JSON/);
  assert.match(failed[1].error, /effect.key: no key/);
  assert.deepEqual(run.result, { attempt: 'string' });
});

test('pure steps reported together stay inside the payload limit, however large their outputs', async () => {
  const file = writeWorkflow(
    host.dir,
    'heavy',
    `const nodes = {};
    const edges = [];
    for (let i = 0; i < 12; i++) {
      // Each output is 40 KB: 12 of them together are far over the 256 KiB payload limit.
      nodes['n' + i] = piw.compute((input) => ({ part: 'x'.repeat(40_000), count: (input?.count ?? 0) + 1 }));
      if (i > 0) edges.push(piw.to('n' + (i - 1), 'n' + i));
    }
    nodes.last = piw.compute((input) => ({ count: input.count }));
    edges.push(piw.to('n11', 'last'));
    export default piw.defineWorkflow({ name: 'heavy', start: 'n0', nodes, edges });`,
  );
  const run = await host.client.waitForRun((await host.client.startRun(file)).run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', JSON.stringify({ status: run.status, error: run.error, review: run.review_reason }));
  assert.deepEqual(run.result, { count: 12 });
});

test('a slow pure node does not hold the steps before it: they are reported while it runs', async () => {
  const marker = join(host.dir, 'slow-started');
  const file = writeWorkflow(
    host.dir,
    'slowpure',
    `import { writeFileSync } from 'node:fs';
    export default piw.defineWorkflow({
      name: 'slowpure', start: 'fast',
      nodes: {
        fast: piw.compute(() => ({ a: 1 })),
        slow: piw.compute(async (input) => {
          writeFileSync(${JSON.stringify(marker)}, 'started');
          await new Promise((r) => setTimeout(r, 1000));
          return input;
        }),
      },
      edges: [piw.to('fast', 'slow')],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  let seen;
  for (let i = 0; i < 400 && !seen; i++) {
    const { attempts } = await c.runStatus(runId);
    if (existsSync(marker)) {
      seen = attempts.find((a) => a.node_id === 'slow' && a.status === 'running');
      if (seen) assert.equal(attempts.find((a) => a.node_id === 'fast').status, 'succeeded');
    }
    if (!seen) await new Promise((r) => setTimeout(r, 10));
  }
  assert.ok(seen, 'the fast step was reported while the slow node ran');
  assert.equal((await c.waitForRun(runId, { timeoutMs: 20_000 })).status, 'completed');
});

test('a file the workflow imports is verified like a mount, without being declared', async () => {
  const marker = join(host.dir, 'helper-loaded');
  const helper = join(host.dir, 'helper.mjs');
  writeFileSync(helper, `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'loaded');\nexport const factor = 2;\n`);
  const file = writeWorkflow(
    host.dir,
    'imports',
    `import { factor } from './helper.mjs';
    export default piw.defineWorkflow({
      name: 'imports', start: 'ask',
      nodes: {
        ask: piw.checkpoint({ request: () => ({ question: 'continue?' }) }),
        done: piw.compute(() => ({ factor })),
      },
      edges: [piw.to('ask', 'done')],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.ok(existsSync(marker), 'the first child loaded the helper');
  const { decisions } = await c.runStatus(runId);
  writeFileSync(helper, `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'loaded');\nexport const factor = 3;\n`);
  const { rmSync } = await import('node:fs');
  rmSync(marker);
  await c.answerCheckpoint(runId, decisions[0].decision_id, 'yes');
  const run = await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.equal(run.status, 'review');
  assert.match(run.review_reason, /source_changed.*helper\.mjs/);
  assert.equal(existsSync(marker), false, 'no module code ran in the resumed child');
});

test('a .workflow.js source runs (ES module syntax is detected without a package.json)', async () => {
  const file = writeWorkflow(
    host.dir,
    'plainjs',
    `export default piw.defineWorkflow({ name: 'plainjs', start: 'a', nodes: { a: piw.compute(() => ({ js: true })) } });`,
    '.workflow.js',
  );
  const run = await host.client.waitForRun((await host.client.startRun(file)).run_id, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { js: true });
});

test('the review example: a rejected draft, a corrected one, then the checkpoint', async () => {
  const c = host.client;
  const session = 'session-review-example';
  const { run_id: runId } = await c.startRun(join(examples, 'review.workflow.mjs'), {
    sessionId: session,
    input: { topic: 'the flaky test' },
  });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [draft] = await c.listInteractions(session);
  assert.match(draft.request.instructions, /the flaky test/);
  const bad = await c.submitInteraction(draft, { title: 'x', priority: 2 });
  const verdict = await c.waitForSubmission(runId, bad.submission_id, { timeoutMs: 20_000 });
  assert.equal(verdict.state, 'rejected');
  assert.equal(verdict.error, 'title must be a string of 3 to 80 characters');
  const good = await c.submitInteraction(draft, { title: 'Fix the flaky test', priority: 2 });
  assert.equal((await c.waitForSubmission(runId, good.submission_id, { timeoutMs: 20_000 })).state, 'accepted');
  let decision;
  for (let i = 0; i < 500 && !decision; i++) {
    decision = (await c.runStatus(runId)).decisions.find((d) => d.status === 'pending');
    if (!decision) await new Promise((r) => setTimeout(r, 10));
  }
  assert.match(decision.request.question, /Fix the flaky test/);
  await c.answerCheckpoint(runId, decision.decision_id, 'yes');
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.deepEqual(run.result, { created: true, run: runId });
});

test('a submission accepted just before the host died goes on with the accepted result after a restart', async () => {
  const { Client } = await import('../index.js');
  const { hostBin, tempDir } = await import('./helpers.mjs');
  const dir = tempDir();
  const home = join(dir, 'home');
  const env = { HOME: dir, PIW_KILL_GRACE_MS: '300' };
  const file = writeWorkflow(
    dir,
    'accept',
    `export default piw.defineWorkflow({ name: 'accept', start: 'ask',
      nodes: { ask: piw.agent({ request: () => ({ q: 'title?' }),
                                validate: (r) => (typeof r?.title === 'string' ? undefined : 'title') }),
               done: piw.compute((draft) => ({ got: draft.title })) },
      edges: [piw.to('ask', 'done')] });`,
  );
  // This host aborts right after it commits the validation child's verdict, before the child
  // can propose the transition.
  const dying = await Client.connect({
    home,
    hostBin,
    hostEnv: { ...env, PIW_FAULT: 'after_commit:worker.validation_result' },
  });
  const { pid } = await dying.status();
  const { run_id: runId } = await dying.startRun(file, { sessionId: 's-accept' });
  await dying.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [ask] = await dying.listInteractions('s-accept');
  await dying.submitInteraction(ask, { title: 'ship' });
  for (let i = 0; i < 500; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  await dying.close().catch(() => {});
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.deepEqual(run.result, { got: 'ship' });
    const status = await c.runStatus(runId);
    assert.equal(status.interactions.length, 1, 'the model was asked once');
    assert.equal(status.interactions[0].last_submission.state, 'accepted');
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
  }
});
