// JS workflows run by the Node worker runtime in supervised children.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';

import { alive, pkgDir, sleep, startHost, writeWorkflow } from './helpers.mjs';

const examples = resolve(pkgDir, '..', 'examples');
let host;

before(async () => {
  host = await startHost();
});

after(async () => {
  await host?.stop();
});

test('every node gets { input, outputs, results, state, signal }: latest output wins, a failure removes it', async () => {
  const file = writeWorkflow(
    host.dir,
    'chain',
    `export default piw.defineWorkflow({
      name: 'chain', startAt: 'a', maxSteps: 20,
      nodes: {
        a: piw.compute({ run: ({ input, outputs }) => ({ n: input.n + 1 + (outputs.b?.n ?? 0) }) }),
        b: piw.compute({ run: async ({ outputs, results }) => {
          await new Promise((r) => setTimeout(r, 5));
          if (results.a.output.n > 20) throw new Error('too big');
          return { n: outputs.a.n * 10 };
        } }),
        c: piw.compute({ run: ({ input, outputs, results, state, signal }) => ({
          a: outputs.a, b: outputs.b ?? null, bResult: results.b,
          run: state.runId, node: state.node, visit: state.visit, input, aborted: signal.aborted,
        }) }),
      },
      edges: [
        { from: 'a', to: 'b' },
        { from: 'b', switch: { on: '$result.outcome', cases: { ok: 'a', failed: 'c' } } },
      ],
    });`,
  );
  const { run_id: runId } = await host.client.startRun(file, { input: { n: 1 } });
  const run = await host.client.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error);
  // a: 2, b: 20, a: 22, b fails (removing its output 20), c.
  assert.deepEqual(run.result, {
    a: { n: 22 },
    b: null,
    bResult: { outcome: 'failed', error: 'node b failed: too big' },
    run: runId,
    node: 'c',
    visit: 1,
    input: { n: 1 },
    aborted: false,
  });
});

test('a failing node routes on $result.outcome; without such an edge the run fails', async () => {
  const file = writeWorkflow(
    host.dir,
    'routes',
    `export default piw.defineWorkflow({
      name: 'routes', startAt: 'risky',
      nodes: {
        risky: piw.compute({ run: ({ input }) => { if (input.fail) throw new Error('boom ' + input.fail); return { fine: true }; } }),
        recover: piw.compute({ run: () => ({ recovered: true }) }),
        proceed: piw.compute({ run: ({ outputs }) => outputs.risky }),
        strict: piw.compute({ run: () => { throw new Error('no route for this'); } }),
      },
      edges: [
        { from: 'risky', switch: { on: '$result.outcome', cases: { ok: 'proceed', failed: 'recover', cancelled: 'recover' } } },
        { from: 'recover', to: 'strict' },
      ],
    });`,
  );
  const c = host.client;
  const ok = await c.waitForRun((await c.startRun(file, { input: {} })).run_id, { timeoutMs: 20_000 });
  assert.deepEqual([ok.status, ok.result], ['completed', { fine: true }]);
  const { run_id: runId } = await c.startRun(file, { input: { fail: 1 } });
  const failed = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(failed.status, 'failed');
  assert.equal(failed.error, 'node strict failed: no route for this');
  // The CLI says it the same way.
  const { execFileSync } = await import('node:child_process');
  const shown = execFileSync(process.env.PIW_HOST_BIN ?? (await import('./helpers.mjs')).hostBin, ['run', 'status', runId], {
    env: { ...process.env, HOME: host.dir, PIW_HOME: host.home },
    encoding: 'utf8',
  });
  assert.match(shown, /^error node strict failed: no route for this$/m);
  const { attempts } = await c.runStatus(runId);
  assert.deepEqual(
    attempts.map((a) => [a.node_id, a.status]).reverse(), // newest first
    [['risky', 'failed'], ['recover', 'ok'], ['strict', 'failed']],
  );
});

test('a file written as the reference documents it, importing @osolmaz/pi-workflows, runs unchanged (.ts and .mts)', async () => {
  // No node_modules anywhere near: the runtime resolves the package names itself.
  const dir = join(host.dir, 'project', '.pi', 'workflows');
  mkdirSync(dir, { recursive: true });
  const body = (name) => `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";
import * as piw from "piw";

type Input = { task?: string };

export default defineWorkflow({
  name: "${name}",
  title: ({ input }) => \`example: \${(input as Input).task}\`,
  startAt: "prepare",
  maxSteps: 50,
  nodes: {
    prepare: compute({ run: ({ input }): { task: string } => ({ task: String((input as Input).task) }) }),
    finish: piw.compute({ run: ({ outputs }) => ({ done: (outputs.prepare as { task: string }).task }) }),
  },
  edges: [{ from: "prepare", to: "finish" }],
});
`;
  for (const [name, suffix] of [['example', '.workflow.ts'], ['examplem', '.workflow.mts']]) {
    const file = join(dir, `${name}${suffix}`);
    writeFileSync(file, body(name));
    const run = await host.client.waitForRun((await host.client.startRun(file, { input: { task: 'ts' } })).run_id, {
      timeoutMs: 20_000,
    });
    assert.equal(run.status, 'completed', run.error);
    assert.deepEqual(run.result, { done: 'ts' });
  }
});

test('shape and graph errors are refused when the workflow is defined, naming the node', async () => {
  const { defineWorkflow, compute, agent, assistantMessage } = await import('../index.js');
  const a = compute({ run: () => 1 });
  const refused = (def, pattern) =>
    assert.throws(() => defineWorkflow(def), (e) => e.code === 'invalid_graph' && pattern.test(e.message), String(pattern));
  refused({ name: 'bad', startAt: 'a', nodes: { a }, edges: [{ from: 'a', to: 'missing' }] }, /"missing"/);
  refused({ name: 'bad', startAt: 'a', nodes: { a, b: a }, edges: [] }, /node "b" cannot be reached/);
  refused(
    { name: 'bad', startAt: 'a', nodes: { a, b: a }, edges: [{ from: 'a', to: 'b' }, { from: 'a', to: 'a' }] },
    /node "a" has two outgoing edges/,
  );
  refused({ name: 'bad', startAt: 'a', nodes: { a: () => 1 }, edges: [] }, /node a must be made with compute/);
  refused({ name: 'bad', start: 'a', nodes: { a }, edges: [] }, /startAt/);
  refused({ name: 'bad', startAt: 'a', nodes: { a }, edges: [], maxSteps: 0 }, /maxSteps/);
  refused(
    { name: 'bad', startAt: 'a', nodes: { a }, edges: [{ from: 'a', switch: { on: '$result.outcome', cases: { succeeded: 'a' } } }] },
    /expected ok, failed, timed_out or cancelled/,
  );
  assert.throws(() => compute(() => 1), /compute\(\) needs an options object/);
  assert.throws(() => agent({ prompt: 'x', expectedOutput: assistantMessage(), validate: (o) => o }), /validate cannot/);
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

test('an action: an error from run settles the effect failed; a crash leaves a manual effect in doubt', async () => {
  const file = writeWorkflow(
    host.dir,
    'doubt',
    `export default piw.defineWorkflow({
      name: 'doubt', startAt: 'act',
      nodes: {
        act: piw.action({
          effect: piw.manualEffect('card.charge'),
          run: ({ input }) => {
            if (input.refuse) throw new Error('card declined');
            process.kill(process.pid, 'SIGKILL');
          },
        }),
        declined: piw.compute({ run: ({ results }) => ({ declined: results.act.error }) }),
      },
      edges: [{ from: 'act', switch: { on: '$result.outcome', cases: { ok: 'declined', failed: 'declined' } } }],
    });`,
  );
  const c = host.client;
  const refused = await c.waitForRun((await c.startRun(file, { input: { refuse: true } })).run_id, { timeoutMs: 20_000 });
  assert.equal(refused.status, 'completed', JSON.stringify(refused));
  assert.deepEqual(refused.result, { declined: 'node act failed: card declined' });
  const settled = (await c.runStatus(refused.run_id)).effects;
  assert.equal(settled[0].state, 'failed');
  // The effect key comes from run, effect type, node and visit; workflow code does not choose it.
  assert.equal(settled[0].effect_key, `${refused.run_id}:card.charge:act:1`);

  const { run_id: runId } = await c.startRun(file, { input: {} });
  const doubtful = await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.equal(doubtful.status, 'review', JSON.stringify(doubtful));
  const { effects } = await c.runStatus(runId);
  assert.equal(effects[0].state, 'uncertain');
});

test('an output over the 64 MiB value limit fails its node with a clear error', async () => {
  const file = writeWorkflow(
    host.dir,
    'huge',
    `export default piw.defineWorkflow({ name: 'huge', startAt: 'big', edges: [],
      nodes: { big: piw.compute({ run: () => ({ blob: 'x'.repeat(64 * 1024 * 1024) }) }) } });`,
  );
  const run = await host.client.waitForRun((await host.client.startRun(file)).run_id, { timeoutMs: 60_000 });
  assert.equal(run.status, 'failed');
  assert.match(run.error, /the output is \d+ bytes of JSON; at most 67108864/);
});

test('a shell step\'s 5 MB output is stored apart and the next node, the client and a resumed child read it whole', async () => {
  const c = host.client;
  const file = writeWorkflow(
    host.dir,
    'bigout',
    `export default piw.defineWorkflow({
      name: 'bigout', startAt: 'big',
      nodes: {
        big: piw.shell({
          effect: piw.idempotentEffect('cmd.big'),
          exec: () => ({ command: 'sh', args: ['-c', 'head -c 5000000 /dev/zero | tr "\\\\0" x'], maxOutputChars: 6_000_000 }),
        }),
        // Looks like a reference at its top level: stays the workflow's own data.
        fake: piw.compute({ run: () => ({ $piw: 'value', sha256: '0'.repeat(64), bytes: 1 }) }),
        ask: piw.checkpoint({ summary: 'go on?' }),
        read: piw.compute({ run: ({ outputs }) => ({
          len: outputs.big.stdout.length,
          whole: outputs.big.stdout === 'x'.repeat(5_000_000),
          fake: outputs.fake,
          echo: outputs.big.stdout,
        }) }),
      },
      edges: [{ from: 'big', to: 'fake' }, { from: 'fake', to: 'ask' }, { from: 'ask', to: 'read' }],
    });`,
  );
  const { run_id: runId } = await c.startRun(file);
  // Parked on the checkpoint: the child that ran \`big\` is gone, so \`read\` runs in a new
  // child that gets the output from the host.
  const parked = await c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
  assert.equal(parked.status, 'waiting', JSON.stringify(parked));
  const kept = await c.runStatus(runId, { references: true });
  const stored = kept.attempts.find((a) => a.node_id === 'big').output;
  assert.equal(stored.$piw, 'value');
  assert.ok(stored.bytes > 5_000_000 && stored.preview.length <= 200, JSON.stringify(stored).slice(0, 300));
  const decision = kept.decisions.find((d) => d.status === 'pending');
  await c.answerCheckpoint(runId, decision.decision_id, 'yes');
  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.len, 5_000_000);
  assert.equal(run.result.whole, true);
  assert.equal(run.result.echo, 'x'.repeat(5_000_000));
  assert.deepEqual(run.result.fake, { $piw: 'value', sha256: '0'.repeat(64), bytes: 1 });
  const { attempts, effects } = await c.runStatus(runId);
  assert.equal(attempts.find((a) => a.node_id === 'big').output.stdout, 'x'.repeat(5_000_000));
  assert.equal(effects[0].receipt.stdout.length, 5_000_000);
  assert.deepEqual(await c.diagnose(), []);
});

test('a run input shaped like a stored value reference is the caller\'s own data', async () => {
  const file = writeWorkflow(
    host.dir,
    'echo-input',
    `export default piw.defineWorkflow({ name: 'echo-input', startAt: 'echo', edges: [],
      nodes: { echo: piw.compute({ run: ({ input }) => ({ input }) }) } });`,
  );
  const input = { $piw: 'value', sha256: 'a'.repeat(64), bytes: 3, preview: '' };
  const run = await host.client.waitForRun((await host.client.startRun(file, { input })).run_id, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { input });
});

test('node code that returns what JSON cannot hold fails the node, not the child', async () => {
  const file = writeWorkflow(
    host.dir,
    'odd',
    `export default piw.defineWorkflow({
      name: 'odd', startAt: 'big',
      nodes: {
        big: piw.compute({ run: () => ({ n: 10n }) }),
        done: piw.compute({ run: ({ results, state }) => ({ why: results.big.error, attempt: typeof state.attemptId }), timeoutMs: 10_000 }),
      },
      edges: [{ from: 'big', switch: { on: '$result.outcome', cases: { failed: 'done' } } }],
    });`,
  );
  const c = host.client;
  const run = await c.waitForRun((await c.startRun(file)).run_id, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', JSON.stringify(run));
  assert.match(run.result.why, /the output is not JSON/);
  assert.equal(run.result.attempt, 'string');
});

test('pure steps reported together stay inside the payload limit, however large their outputs', async () => {
  const file = writeWorkflow(
    host.dir,
    'heavy',
    `const nodes = {};
    const edges = [];
    for (let i = 0; i < 12; i++) {
      // Each output is 40 KB: 12 of them together are far over the 256 KiB payload limit.
      nodes['n' + i] = piw.compute({ run: ({ outputs }) => ({ part: 'x'.repeat(40_000), count: (outputs['n' + (i - 1)]?.count ?? 0) + 1 }) });
      if (i > 0) edges.push({ from: 'n' + (i - 1), to: 'n' + i });
    }
    nodes.last = piw.compute({ run: ({ outputs }) => ({ count: outputs.n11.count }) });
    edges.push({ from: 'n11', to: 'last' });
    export default piw.defineWorkflow({ name: 'heavy', startAt: 'n0', nodes, edges });`,
  );
  const run = await host.client.waitForRun((await host.client.startRun(file)).run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', JSON.stringify({ status: run.status, error: run.error, review: run.review_reason }));
  assert.deepEqual(run.result, { count: 12 });
});

test('a slow pure node does not hold the steps before it: they are reported while it runs', async () => {
  const marker = join(host.dir, 'slow-started');
  const release = join(host.dir, 'slow-release');
  const file = writeWorkflow(
    host.dir,
    'slowpure',
    `import { existsSync, writeFileSync } from 'node:fs';
    export default piw.defineWorkflow({
      name: 'slowpure', startAt: 'fast',
      nodes: {
        fast: piw.compute({ run: () => ({ a: 1 }) }),
        slow: piw.compute({ run: async ({ outputs }) => {
          writeFileSync(${JSON.stringify(marker)}, 'started');
          // Runs until the test has looked (however long a loaded machine takes to look).
          while (!existsSync(${JSON.stringify(release)})) await new Promise((r) => setTimeout(r, 10));
          return outputs.fast;
        } }),
      },
      edges: [{ from: 'fast', to: 'slow' }],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  let seen;
  for (let i = 0; i < 3000 && !seen; i++) {
    const { attempts } = await c.runStatus(runId);
    if (existsSync(marker)) {
      seen = attempts.find((a) => a.node_id === 'slow' && a.status === 'running');
      if (seen) assert.equal(attempts.find((a) => a.node_id === 'fast').status, 'ok');
    }
    if (!seen) await new Promise((r) => setTimeout(r, 10));
  }
  writeFileSync(release, '');
  assert.ok(seen, 'the fast step was reported while the slow node ran');
  assert.equal((await c.waitForRun(runId, { timeoutMs: 20_000 })).status, 'completed');
});

test('a file the workflow imports is verified before a resumed run loads any code', async () => {
  const marker = join(host.dir, 'helper-loaded');
  const helper = join(host.dir, 'helper.mjs');
  writeFileSync(helper, `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'loaded');\nexport const factor = 2;\n`);
  const file = writeWorkflow(
    host.dir,
    'imports',
    `import { factor } from './helper.mjs';
    export default piw.defineWorkflow({
      name: 'imports', startAt: 'ask',
      nodes: {
        ask: piw.checkpoint({ summary: 'continue?' }),
        done: piw.compute({ run: () => ({ factor }) }),
      },
      edges: [{ from: 'ask', to: 'done' }],
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
    `export default piw.defineWorkflow({ name: 'plainjs', startAt: 'a', edges: [], nodes: { a: piw.compute({ run: () => ({ js: true }) }) } });`,
    '.workflow.js',
  );
  const run = await host.client.waitForRun((await host.client.startRun(file)).run_id, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { js: true });
});

/** Polls the run until `pick(status)` returns something (bounded: only a hang reaches it). */
async function until(c, runId, pick) {
  for (let i = 0; i < 1500; i++) {
    const found = pick(await c.runStatus(runId));
    if (found) return found;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`run ${runId}: the condition never held`);
}

test('the review example: a rejected draft, a corrected one, then the checkpoint', async () => {
  const c = host.client;
  const session = 'session-review-example';
  const { run_id: runId } = await c.startRun(join(examples, 'review.workflow.mjs'), {
    sessionId: session,
    input: { topic: 'the flaky test' },
  });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [draft] = await c.listInteractions(session);
  assert.match(draft.request.prompt, /the flaky test/);
  assert.equal(draft.request.statusDetail, 'drafting a task');
  const bad = await c.submitInteraction(draft, { title: 'x', priority: 2 });
  const verdict = await c.waitForSubmission(runId, bad.submission_id, { timeoutMs: 20_000 });
  assert.equal(verdict.state, 'rejected');
  assert.equal(verdict.error, 'title must be a string of 3 to 80 characters');
  // validate normalises: the trimmed title is the node's output.
  const good = await c.submitInteraction(draft, '{"title": "  Fix the flaky test ", "priority": 2}');
  assert.equal((await c.waitForSubmission(runId, good.submission_id, { timeoutMs: 20_000 })).state, 'accepted');
  const decision = await until(c, runId, (s) => s.decisions.find((d) => d.status === 'pending'));
  assert.deepEqual(decision.request, {
    workflow: 'review',
    title: null,
    node: 'confirm',
    kind: 'checkpoint',
    summary: 'Create "Fix the flaky test" with priority 2?',
    prompt: null,
  });
  await c.answerCheckpoint(runId, decision.decision_id, 'yes');
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.deepEqual(run.result, { created: true, title: 'Fix the flaky test', run: runId });
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
    `export default piw.defineWorkflow({ name: 'accept', startAt: 'ask',
      nodes: { ask: piw.agent({ prompt: 'title?',
                                validate: (r) => { if (typeof r?.title !== 'string') throw new Error('title'); return { title: r.title.toUpperCase() }; } }),
               done: piw.compute({ run: ({ outputs }) => ({ got: outputs.ask.title }) }) },
      edges: [{ from: 'ask', to: 'done' }] });`,
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
    // The resumed child normalised the accepted submission exactly as the first would have.
    assert.deepEqual(run.result, { got: 'SHIP' });
    const status = await c.runStatus(runId);
    assert.equal(status.interactions.length, 1, 'the model was asked once');
    assert.equal(status.interactions[0].last_submission.state, 'accepted');
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
  }
});

test('a loop without an exit stops at maxSteps with a clear reason, a bounded number of attempts and events', async () => {
  const file = writeWorkflow(
    host.dir,
    'loop',
    `export default piw.defineWorkflow({
      name: 'loop', startAt: 'a', maxSteps: 7,
      nodes: {
        a: piw.compute({ run: ({ state }) => ({ at: 'a', visit: state.visit }) }),
        b: piw.compute({ run: ({ state }) => ({ at: 'b', visit: state.visit }) }),
      },
      edges: [{ from: 'a', to: 'b' }, { from: 'b', to: 'a' }],
    });`,
  );
  const c = host.client;
  const { run_id: runId } = await c.startRun(file);
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'failed');
  assert.match(run.error, /step limit: maxSteps is 7/);
  const { attempts } = await c.runStatus(runId);
  assert.equal(attempts.length, 7);
  assert.ok(attempts.every((a) => a.status === 'ok'), JSON.stringify(attempts));

  // Without maxSteps the limit is 100.
  const open = writeWorkflow(
    host.dir,
    'loop100',
    `export default piw.defineWorkflow({
      name: 'loop100', startAt: 'a',
      nodes: { a: piw.compute({ run: () => 1 }), b: piw.compute({ run: () => 2 }) },
      edges: [{ from: 'a', to: 'b' }, { from: 'b', to: 'a' }],
    });`,
  );
  const dflt = await c.waitForRun((await c.startRun(open)).run_id, { timeoutMs: 30_000 });
  assert.match(dflt.error, /maxSteps is 100/);
  assert.equal((await c.runStatus(dflt.run_id)).attempts.length, 100);
});

test('a workflow that cannot load fails the run at once, naming file, line and column', async () => {
  const c = host.client;
  const dir = join(host.dir, 'broken');
  mkdirSync(dir, { recursive: true });
  const cases = [
    ['syntax.workflow.mjs', 'const a = 1;\nexport default {\n  x: = 2\n};\n', /syntax\.workflow\.mjs:3:6: Unexpected token '='/],
    ['invalid.workflow.ts', 'const a: number = 1;\nconst b = a *;\nexport default b;\n', /invalid\.workflow\.ts:2:\d+: ERR_INVALID_TYPESCRIPT_SYNTAX/],
    ['missing.workflow.mjs', 'import x from "no-such-package-here";\nexport default x;\n', /ERR_MODULE_NOT_FOUND: Cannot find package 'no-such-package-here'/],
    ['plain.workflow.mjs', 'export default { name: "not a workflow" };\n', /must export default defineWorkflow/],
    [
      'graph.workflow.mjs',
      'import { compute, defineWorkflow } from "piw";\nexport default defineWorkflow({ name: "g", startAt: "a", nodes: { a: compute({ run: () => 1 }) }, edges: [{ from: "a", to: "zz" }] });\n',
      /"zz", which is not a node of the graph/,
    ],
  ];
  for (const [name, text, reason] of cases) {
    const file = join(dir, name);
    writeFileSync(file, text);
    const { run_id: runId } = await c.startRun(file);
    const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
    // Failed at once by the first child (before, three child losses sent it to review).
    assert.equal(run.status, 'failed', `${name}: ${JSON.stringify(run)}`);
    assert.match(run.error, reason, name);
  }
});

test('decision, assistantMessage, humanDecision with text input, and notify, through the host', async () => {
  const c = host.client;
  const session = 'session-kinds';
  const file = writeWorkflow(
    host.dir,
    'kinds',
    `const verdicts = ['y', 'n'];
    const choices = piw.defineHumanChoices({
      continue: piw.choice({ label: 'Continue' }),
      replan: piw.choice({ label: 'Replan', description: 'Back to planning',
        input: piw.textInput({ name: 'instructions', prompt: 'What should change?', placeholder: 'smaller' }) }),
    });
    export default piw.defineWorkflow({
      name: 'kinds', startAt: 'same', title: ({ input, workflowName }) => workflowName + ' for ' + input.who,
      nodes: {
        same: piw.decision({ choices: verdicts, question: ({ input }) => 'Same as ' + input.who + '?' }),
        explain: piw.agent({ prompt: 'Explain it', expectedOutput: piw.assistantMessage({ maxChars: 300 }) }),
        approve: piw.humanDecision({
          audience: 'operator', choices,
          request: ({ outputs }) => ({ title: 'Approve?', subject: outputs.explain, presentation: { summary: 'Read the explanation.' } }),
        }),
        tell: piw.notify({ kind: 'final', message: ({ outputs }) => 'replan: ' + outputs.approve.input.instructions + ' by ' + outputs.approve.provenance }),
        other: piw.compute({ run: () => 'other' }),
      },
      edges: [
        piw.decisionEdge({ from: 'same', choices: verdicts, cases: { y: 'explain', n: 'other' } }),
        { from: 'explain', to: 'approve' },
        piw.humanDecisionEdge({ from: 'approve', choices, cases: { continue: 'other', replan: 'tell' } }),
      ],
    });`,
  );
  const { run_id: runId } = await c.startRun(file, { sessionId: session, input: { who: 'me' } });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [same] = await c.listInteractions(session);
  assert.equal(same.request.kind, 'agent');
  assert.equal(same.request.title, 'kinds for me');
  assert.match(same.request.prompt, /^Same as me\?/);
  assert.equal(same.request.expectedOutput, '{ "route": "y" | "n" }');
  const wrong = await c.submitInteraction(same, { route: 'maybe' });
  assert.equal((await c.waitForSubmission(runId, wrong.submission_id, { timeoutMs: 20_000 })).state, 'rejected');
  const right = await c.submitInteraction(same, 'Here you go: {"route": "y"}');
  assert.equal((await c.waitForSubmission(runId, right.submission_id, { timeoutMs: 20_000 })).state, 'accepted');

  let explain;
  for (let i = 0; i < 1500 && !explain; i++) {
    explain = (await c.listInteractions(session)).find((x) => x.node_id === 'explain');
    if (!explain) await new Promise((r) => setTimeout(r, 20));
  }
  assert.deepEqual(
    { ...explain.request },
    { workflow: 'kinds', title: 'kinds for me', node: 'explain', kind: 'assistant_message', prompt: 'Explain it', maxChars: 300 },
  );
  assert.equal(explain.kind, 'assistant_message');
  const said = await c.submitInteraction(explain, 'It is the same because nothing changed.');
  assert.equal((await c.waitForSubmission(runId, said.submission_id, { timeoutMs: 20_000 })).state, 'accepted');

  const approve = await until(c, runId, (s) => s.decisions.find((d) => d.status === 'pending'));
  assert.equal(approve.kind, 'human_decision');
  assert.deepEqual(approve.request, {
    workflow: 'kinds',
    title: 'kinds for me',
    node: 'approve',
    kind: 'human_decision',
    question: 'Approve?',
    details: 'Read the explanation.',
    choices: [
      { id: 'continue', label: 'Continue' },
      { id: 'replan', label: 'Replan', description: 'Back to planning', input: { name: 'instructions', prompt: 'What should change?', placeholder: 'smaller' } },
    ],
    textInput: { label: 'What should change?', placeholder: 'smaller', required: true },
    audience: 'operator',
    extra: { subject: 'It is the same because nothing changed.', presentation: { summary: 'Read the explanation.' } },
  });
  await c.answerHumanDecision(runId, approve.decision_id, { choice: 'replan', text: 'smaller steps' });
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { kind: 'final', message: 'replan: smaller steps by human' });
  const messages = await c.claimMessages(session);
  assert.deepEqual(messages.find((m) => m.kind === 'notify').content, { kind: 'final', message: 'replan: smaller steps by human' });
});

test("the host refuses an answer that does not fit a human decision's choices, naming them; the run keeps waiting", async () => {
  const c = host.client;
  const file = writeWorkflow(
    host.dir,
    'strict-answer',
    `const choices = piw.defineHumanChoices({
      go: piw.choice({ label: 'Go' }),
      stop: piw.choice({ label: 'Stop', input: piw.textInput({ name: 'reason', prompt: 'Why?', minLength: 5, maxLength: 20 }) }),
    });
    export default piw.defineWorkflow({
      name: 'strict-answer', startAt: 'ask',
      nodes: { ask: piw.humanDecision({ choices }), went: piw.compute({ run: () => 'went' }),
        stopped: piw.compute({ run: ({ outputs }) => outputs.ask.input.reason }) },
      edges: [piw.humanDecisionEdge({ from: 'ask', choices, cases: { go: 'went', stop: 'stopped' } })],
    });`,
  );
  const { run_id: runId } = await c.startRun(file);
  const ask = await until(c, runId, (s) => s.decisions.find((d) => d.status === 'pending'));
  const rule = {
    choices: [
      { id: 'go', text: null },
      { id: 'stop', text: { name: 'reason', min_length: 5, max_length: 20 } },
    ],
  };
  for (const [answer, says] of [
    [{ choice: null }, /choice of: go, stop \(with a text of 5 to 20 characters\); got no choice/],
    [{ choice: 'maybe' }, /got choice "maybe"/],
    ['go', /got no choice/],
    [{ choice: 'stop', text: 'no' }, /choice stop needs a text of 5 to 20 characters as "text"; got 2 characters/],
    [{ choice: 'stop', text: 'x'.repeat(21) }, /got 21 characters/],
    [{ choice: 'stop' }, /got no text/],
  ]) {
    await assert.rejects(c.answerHumanDecision(runId, ask.decision_id, answer), (e) => {
      assert.equal(e.code, 'malformed', e.message);
      assert.match(e.message, says);
      assert.deepEqual(e.details, rule);
      return true;
    });
  }
  const still = await c.runStatus(runId);
  assert.equal(still.run.status, 'waiting');
  assert.equal(still.decisions.find((d) => d.decision_id === ask.decision_id).status, 'pending');
  // The text may come as `input.<name>` too, as the runtime reads it.
  await c.answerHumanDecision(runId, ask.decision_id, { choice: 'stop', input: { reason: 'too risky' } });
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result, 'too risky');
});

/** Whether `pid` is gone (or a zombie waiting to be reaped). */
function gone(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

test('shell: exec, parse, updates.parseLine, capped output, non-zero exits', async () => {
  const c = host.client;
  const session = 'session-shell';
  const file = writeWorkflow(
    host.dir,
    'shell',
    `export default piw.defineWorkflow({
      name: 'shell', startAt: 'lines',
      nodes: {
        lines: piw.shell({
          effect: piw.idempotentEffect('cmd.lines'),
          exec: ({ input }) => ({
            command: 'sh',
            args: ['-c', 'echo one; echo "progress 2"; echo "$GREETING" >&2; cat; printf "%0300d" 0'],
            env: { GREETING: 'hi' },
            stdin: input.feed,
            maxOutputChars: 100,
          }),
          updates: { parseLine: ({ stream, text }) =>
            text.startsWith('progress') ? { type: 'count', key: stream, data: { n: Number(text.split(' ')[1]) } } : null },
        }),
        bad: piw.shell({
          effect: piw.manualEffect('cmd.bad'),
          exec: () => ({ command: 'sh', args: ['-c', 'echo nope >&2; exit 3'] }),
        }),
        tolerant: piw.action({
          effect: piw.idempotentEffect('cmd.tolerant'),
          exec: () => ({ command: 'sh', args: ['-c', 'exit 4'], allowNonZeroExit: true }),
          parse: (result, { results }) => ({ code: result.exitCode, bad: results.bad.error }),
        }),
      },
      edges: [
        { from: 'lines', to: 'bad' },
        { from: 'bad', switch: { on: '$result.outcome', cases: { failed: 'tolerant' } } },
      ],
    });`,
  );
  const sub = await c.subscribe({ sessionId: session });
  const { run_id: runId } = await c.startRun(file, { sessionId: session, input: { feed: 'fed\n' } });
  const progress = [];
  for await (const e of sub) {
    if (e.run_id === runId && e.event_kind === 'progress') progress.push(e.data);
    if (e.run_id === runId && ['completed', 'failed', 'review'].includes(e.status)) break;
  }
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { code: 4, bad: 'node bad failed: sh -c echo nope >&2; exit 3 exited with 3: nope' });
  assert.deepEqual(progress, [{ message: 'count:stdout', data: { type: 'count', key: 'stdout', data: { n: 2 } } }]);
  const { attempts, effects } = await c.runStatus(runId);
  const lines = attempts.find((a) => a.node_id === 'lines').output;
  assert.equal(lines.stdout, 'one\nprogress 2\nfed\n' + '0'.repeat(100 - 'one\nprogress 2\nfed\n'.length));
  assert.equal(lines.stderr, 'hi\n');
  assert.equal(lines.truncated, true);
  assert.equal(lines.exitCode, 0);
  assert.deepEqual(
    effects.map((e) => e.state),
    ['applied', 'failed', 'applied'],
  );
});

test('shell: a throwing updates.parseLine fails the node with its error and stops the command; a bad timeoutMs starts nothing', async () => {
  const c = host.client;
  const started = join(host.dir, 'bad-timeout-started');
  const file = writeWorkflow(
    host.dir,
    'shell-bad',
    `export default piw.defineWorkflow({
      name: 'shell-bad', startAt: 'parse',
      nodes: {
        parse: piw.shell({
          effect: piw.idempotentEffect('cmd.parse'),
          exec: () => ({ command: 'sh', args: ['-c', 'echo ok; echo bad; exec sleep 600'] }),
          updates: { parseLine: ({ text }) => { if (text === 'bad') throw new Error('cannot parse ' + text); return { type: 'line', key: 'out', data: { text } }; } },
        }),
        timeout: piw.shell({
          effect: piw.idempotentEffect('cmd.timeout'),
          exec: () => ({ command: 'touch', args: [${JSON.stringify(started)}], timeoutMs: -1 }),
        }),
        // Longer than a Node timer can wait (which would fire at once).
        huge: piw.shell({
          effect: piw.idempotentEffect('cmd.huge'),
          exec: () => ({ command: 'touch', args: [${JSON.stringify(started)}], timeoutMs: 1e10 }),
        }),
        seen: piw.compute({ run: ({ results }) => ({ parse: results.parse.error, timeout: results.timeout.error, huge: results.huge.error }) }),
      },
      edges: [
        { from: 'parse', switch: { on: '$result.outcome', cases: { failed: 'timeout' } } },
        { from: 'timeout', switch: { on: '$result.outcome', cases: { failed: 'huge' } } },
        { from: 'huge', switch: { on: '$result.outcome', cases: { failed: 'seen' } } },
      ],
    });`,
  );
  const run = await c.waitForRun((await c.startRun(file)).run_id, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, {
    parse: 'node parse failed: updates.parseLine failed: cannot parse bad',
    timeout: 'node timeout failed: timeoutMs must be a positive number of milliseconds, at most 2147483647',
    huge: 'node huge failed: timeoutMs must be a positive number of milliseconds, at most 2147483647',
  });
  assert.equal(existsSync(started), false, 'no command with a bad timeoutMs ran');
  const { effects } = await c.runStatus(run.run_id);
  assert.deepEqual(effects.map((e) => e.state), ['failed', 'failed', 'failed']);
});

test('shell: a command that ignores SIGTERM and starts a grandchild is killed whole, at its timeout and on cancel', async () => {
  const c = host.client;
  const pids = join(host.dir, 'shell-pids');
  const file = writeWorkflow(
    host.dir,
    'stubborn',
    `export default piw.defineWorkflow({
      name: 'stubborn', startAt: 'run',
      nodes: {
        run: piw.shell({
          effect: piw.idempotentEffect('cmd.stubborn'),
          exec: ({ input }) => ({
            command: 'sh',
            // Both the shell and its background grandchild ignore SIGTERM.
            args: ['-c', 'trap "" TERM; sleep 600 & echo "$$ $!" > ' + input.pids + '; wait'],
            ...(input.timeoutMs ? { timeoutMs: input.timeoutMs } : {}),
          }),
        }),
        after: piw.compute({ run: ({ results }) => results.run }),
      },
      edges: [{ from: 'run', switch: { on: '$result.outcome', cases: { failed: 'after' } } }],
    });`,
  );
  // The pid file exists as soon as the shell opens it for the redirection, before `echo` has
  // written to it: wait for its whole line.
  const started = async (name) => {
    const path = `${pids}-${name}`;
    const whole = () => (existsSync(path) ? readFileSync(path, 'utf8') : '').endsWith('\n');
    for (let i = 0; i < 1500 && !whole(); i++) await new Promise((r) => setTimeout(r, 20));
    const text = readFileSync(path, 'utf8').trim();
    const all = text.split(/\s+/).map(Number);
    assert.equal(all.length, 2, text);
    return all;
  };
  const allGone = async (all) => {
    for (let i = 0; i < 1500 && !all.every(gone); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(all.every(gone), `still running: ${all.filter((p) => !gone(p))}`);
  };

  // At its timeout: the group gets SIGTERM, then SIGKILL after the grace; the node fails.
  // A timeout long enough for the shell to write its pids first on a loaded machine.
  const timed = await c.startRun(file, { input: { pids: `${pids}-timeout`, timeoutMs: 5000 } });
  const timedPids = await started('timeout');
  const run = await c.waitForRun(timed.run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.match(run.result.error, /timed out after 5000 ms/);
  await allGone(timedPids);

  // On cancel: the worker takes its commands' groups down before it goes.
  const cancelled = await c.startRun(file, { input: { pids: `${pids}-cancel` } });
  const cancelPids = await started('cancel');
  await c.cancelRun(cancelled.run_id, { reason: 'test' });
  await allGone(cancelPids);
  assert.equal((await c.waitForRun(cancelled.run_id, { timeoutMs: 20_000 })).status, 'cancelled');
});

test('the deploy and disk-usage examples: a manual effect with updates and routing, a shell action', async () => {
  const c = host.client;
  const deploy = join(examples, 'deploy.workflow.mjs');
  const ok = await c.waitForRun((await c.startRun(deploy, { sessionId: 's-deploy', input: { targets: ['a', 'b'] } })).run_id, {
    timeoutMs: 20_000,
  });
  assert.equal(ok.status, 'completed', ok.error);
  assert.deepEqual(ok.result, { kind: 'final', message: 'Deployed a, b' });
  const refused = await c.waitForRun(
    (await c.startRun(deploy, { sessionId: 's-deploy', input: { targets: ['a', 'broken'] } })).run_id,
    { timeoutMs: 20_000 },
  );
  assert.deepEqual(refused.result, { kind: 'final', message: 'Deploy failed: node deploy failed: target broken refused the deploy' });

  const dir = join(host.dir, 'du');
  mkdirSync(join(dir, 'big'), { recursive: true });
  mkdirSync(join(dir, 'small'), { recursive: true });
  writeFileSync(join(dir, 'big', 'f'), 'x'.repeat(200_000));
  const du = await c.waitForRun((await c.startRun(join(examples, 'disk-usage.workflow.mjs'), { input: { dir } })).run_id, {
    timeoutMs: 20_000,
  });
  assert.equal(du.status, 'completed', du.error);
  assert.equal(du.result[0].path, dir);
  assert.equal(du.result[1].path, join(dir, 'big'));
});

test('humanDecision onTimeout: applied at the saved deadline with timeout provenance, also after the host was down', async () => {
  const { Client } = await import('../index.js');
  const { hostBin, killInstallation, tempDir } = await import('./helpers.mjs');
  const dir = tempDir();
  const home = join(dir, 'home');
  // The host runs on a test clock: the deadline passes when this test moves the clock, never
  // by itself while a slow machine is still setting the run up.
  const clock = join(dir, 'clock');
  let offset = 0;
  const advance = (ms) => {
    offset += ms;
    writeFileSync(`${clock}.tmp`, String(offset));
    renameSync(`${clock}.tmp`, clock);
  };
  const env = { HOME: dir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock };
  const file = writeWorkflow(
    dir,
    'timeout',
    `const choices = piw.defineHumanChoices({ go: piw.choice({ label: 'Go' }), stop: piw.choice({ label: 'Stop' }) });
    export default piw.defineWorkflow({ name: 'timeout', startAt: 'ask',
      nodes: {
        ask: piw.humanDecision({ choices, onTimeout: { afterMs: 600000, response: { choice: 'go' } } }),
        went: piw.compute({ run: ({ outputs }) => outputs.ask }),
        stopped: piw.compute({ run: ({ outputs }) => outputs.ask }),
      },
      edges: [piw.humanDecisionEdge({ from: 'ask', choices, cases: { go: 'went', stop: 'stopped' } })] });`,
  );
  let c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    // Host up: the response is applied at the deadline.
    const first = await c.startRun(file);
    const parked = await c.waitForRun(first.run_id, { untilParked: true, timeoutMs: 20_000 });
    assert.equal(parked.status, 'waiting');
    const { decisions } = await c.runStatus(first.run_id);
    assert.deepEqual(decisions[0].request.extra.onTimeout, { afterMs: 600000, response: { choice: 'go' } });
    advance(600_001);
    await c.runStatus(first.run_id); // wakes a host asleep until the old deadline
    const done = await c.waitForRun(first.run_id, { timeoutMs: 30_000 });
    assert.equal(done.status, 'completed', done.error);
    assert.deepEqual(done.result, { choice: 'go', provenance: 'timeout' });

    // Host down across the deadline: the next host applies it.
    const second = await c.startRun(file);
    await c.waitForRun(second.run_id, { untilParked: true, timeoutMs: 20_000 });
    const before = await c.runStatus(second.run_id);
    assert.equal(before.decisions[0].status, 'pending', 'the decision is still open when the host stops');
    const { pid } = await c.status();
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    for (let i = 0; i < 1500 && alive(pid); i++) await sleep(20);
    assert.equal(alive(pid), false);
    advance(600_001);
    c = await Client.connect({ home, hostBin, hostEnv: env });
    const run = await c.waitForRun(second.run_id, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error);
    assert.deepEqual(run.result, { choice: 'go', provenance: 'timeout' });
    // The host answered it: nobody (no person, no model) is recorded as the answerer.
    const [decision] = (await c.runStatus(second.run_id)).decisions;
    assert.equal(decision.status, 'answered');
    assert.equal(decision.answered_by, null);
    assert.deepEqual(decision.answer, { choice: 'go', text: null, provenance: 'timeout' });
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
  }
});

test('composition: an included workflow runs under its mount path, with local context, exits and includedResult; a changed included file stops the resumed run', async () => {
  const c = host.client;
  const dir = join(host.dir, 'compose');
  mkdirSync(dir, { recursive: true });
  const marker = join(dir, 'child-loaded');
  const childFile = join(dir, 'repair.workflow.mjs');
  const child = (extra = '') => `import { checkpoint, compute, defineWorkflow } from 'piw';
${extra}
export default defineWorkflow({
  name: 'repair', startAt: 'fix',
  nodes: {
    fix: compute({ run: ({ input, outputs, state }) => ({ fixed: input.issue, seen: Object.keys(outputs), node: state.node }) }),
    confirm: checkpoint({ summary: ({ outputs }) => 'fixed ' + outputs.fix.fixed + '?' }),
    finalize: compute({ run: ({ input, outputs }) => ({ done: outputs.fix.fixed, answer: outputs.confirm, input }) }),
    blocked: compute({ run: () => ({ blocked: true }) }),
  },
  edges: [
    { from: 'fix', to: 'confirm' },
    { from: 'confirm', switch: { on: '$.ok', cases: { true: 'finalize', false: 'blocked' } } },
  ],
  exits: {
    completed: { from: 'finalize', validate: (output) => ({ ...output, validated: true }) },
    blocked: { from: 'blocked' },
  },
});
`;
  writeFileSync(childFile, child());
  const parent = join(dir, 'parent.workflow.mjs');
  writeFileSync(
    parent,
    `import { compute, defineWorkflow, includeWorkflow, includedResult } from '@osolmaz/pi-workflows';
import repair from './repair.workflow.mjs';
export default defineWorkflow({
  name: 'parent', startAt: 'check', maxSteps: 30,
  includes: { repair: includeWorkflow(repair, { input: ({ outputs }) => ({ issue: outputs.check.issue }) }) },
  nodes: {
    check: compute({ run: ({ outputs }) => ({ next: outputs.repair ? 'finish' : 'repair', issue: 'bug-1' }) }),
    finish: compute({ run: ({ outputs }) => ({ result: includedResult(repair, outputs.repair), keys: Object.keys(outputs).sort() }) }),
  },
  edges: [
    { from: 'check', switch: { on: '$.next', cases: { repair: 'repair', finish: 'finish' } } },
    { from: 'repair.completed', to: 'check' },
    { from: 'repair.blocked', to: 'finish' },
  ],
});
`,
  );
  const { run_id: runId } = await c.startRun(parent);
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  let s = await c.runStatus(runId);
  const confirm = s.decisions.find((d) => d.status === 'pending');
  assert.equal(confirm.request.node, 'repair.confirm');
  assert.equal(confirm.request.summary, 'fixed bug-1?');
  // The answer resumes the run in a new child: it rebuilds the included workflow's context.
  await c.answerCheckpoint(runId, confirm.decision_id, { ok: true });
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, {
    result: {
      exit: 'completed',
      output: { done: 'bug-1', answer: { ok: true }, input: { issue: 'bug-1' }, validated: true },
    },
    keys: ['check', 'repair'],
  });
  s = await c.runStatus(runId);
  const oldestFirst = [...s.attempts].reverse();
  assert.deepEqual(
    oldestFirst.map((a) => a.node_id),
    ['check', 'repair.fix', 'repair.confirm', 'repair.finalize', 'check', 'finish'],
  );
  assert.deepEqual(oldestFirst[1].output, { fixed: 'bug-1', seen: [], node: 'repair.fix' });

  // A changed included file: the resumed run stops for review before any of its code runs.
  const second = await c.startRun(parent);
  await c.waitForRun(second.run_id, { untilParked: true, timeoutMs: 20_000 });
  const pending = (await c.runStatus(second.run_id)).decisions.find((d) => d.status === 'pending');
  writeFileSync(childFile, child(`import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'loaded');`));
  await c.answerCheckpoint(second.run_id, pending.decision_id, { ok: true });
  const stopped = await c.waitForRun(second.run_id, { untilParked: true, timeoutMs: 20_000 });
  assert.equal(stopped.status, 'review');
  assert.match(stopped.review_reason, /source_changed.*repair\.workflow\.mjs/);
  assert.equal(existsSync(marker), false, 'no code of the changed file ran');
});

test('the release example includes the approval example: a person replans through the mount', async () => {
  const c = host.client;
  const { run_id: runId } = await c.startRun(join(examples, 'release.workflow.mjs'), { sessionId: 's-release', input: { version: '1.2.0' } });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const decision = (await c.runStatus(runId)).decisions.find((d) => d.status === 'pending');
  assert.equal(decision.request.node, 'approve.approve');
  assert.equal(decision.request.question, 'Approve the plan "release 1.2.0"?');
  await c.answerHumanDecision(runId, decision.decision_id, { choice: 'replan', text: 'ship 1.2.1 instead' });
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { version: '1.2.0', exit: 'replanned', output: { replan: 'ship 1.2.1 instead' } });
});

test('the triage example (TypeScript): input normaliser, decision, assistant message', async () => {
  const c = host.client;
  const session = 's-triage';
  const file = join(examples, 'triage.workflow.ts');
  const refused = await c.waitForRun((await c.startRun(file, { sessionId: session, input: {} })).run_id, { timeoutMs: 20_000 });
  assert.equal(refused.status, 'failed');
  assert.match(refused.error, /invalid input: input.report must be a non-empty string/);

  const { run_id: runId } = await c.startRun(file, { sessionId: session, input: { report: 'login is down' } });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [classify] = await c.listInteractions(session);
  assert.match(classify.request.prompt, /login is down/);
  const verdict = await c.submitInteraction(classify, { route: 'urgent' });
  assert.equal((await c.waitForSubmission(runId, verdict.submission_id, { timeoutMs: 20_000 })).state, 'accepted');
  let explain;
  for (let i = 0; i < 1500 && !explain; i++) {
    explain = (await c.listInteractions(session)).find((x) => x.node_id === 'explain');
    if (!explain) await sleep(20);
  }
  assert.equal(explain.request.maxChars, 600);
  await c.submitInteraction(explain, 'Nobody can sign in. Fix it first.');
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { urgent: true, explanation: 'Nobody can sign in. Fix it first.' });
});

test('timeoutMs as a function: decided with the node context when the attempt starts, saved and enforced by the host, never decided again', async () => {
  const c = host.client;
  const dir = join(host.dir, 'dyn-timeout');
  mkdirSync(dir, { recursive: true });
  const calls = join(dir, 'calls.log');
  const file = writeWorkflow(
    dir,
    'dyn',
    `import { appendFileSync } from 'node:fs';
    export default piw.defineWorkflow({
      name: 'dyn', startAt: 'ask',
      nodes: {
        // The first node: its attempt is opened by the child's node_started.
        ask: piw.agent({
          prompt: 'give a timeout',
          expectedOutput: '{ "ms": number | null }',
          validate: (o) => o,
          timeoutMs: ({ input, state }) => {
            appendFileSync(${JSON.stringify(calls)}, state.node + '\\n');
            return input.askMinutes === null ? null : input.askMinutes * 60000;
          },
        }),
        // Opened by a transition: the child decides from the outputs so far.
        spin: piw.compute({
          // Never ends by itself and ignores the abort signal (the interval keeps the child alive).
          run: () => new Promise(() => setInterval(() => {}, 1000)),
          timeoutMs: ({ outputs }) => outputs.ask.ms,
        }),
        late: piw.compute({ run: ({ results }) => results.spin.outcome }),
      },
      edges: [
        { from: 'ask', to: 'spin' },
        { from: 'spin', switch: { on: '$result.outcome', cases: { timed_out: 'late' } } },
      ],
    });`,
  );
  const askMs = 7 * 24 * 3600 * 1000;
  const session = 'session-dyn-timeout';
  // A step's time runs while its session is there to present it: this client stands in for it.
  const present = await c.subscribe({ sessionId: session });
  const before = Date.now();
  const { run_id: runId } = await c.startRun(file, { sessionId: session, input: { askMinutes: askMs / 60000 } });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const after = Date.now();
  const [ask] = (await c.runStatus(runId)).attempts;
  assert.equal(ask.node_id, 'ask');
  assert.ok(ask.deadline_at >= before + askMs && ask.deadline_at <= after + askMs, JSON.stringify({ ask, before, after }));
  const [request] = await c.listInteractions(session);
  // The spin node's deadline comes from the submission; the host alone ends it (the node
  // never returns), routing timed_out.
  const sub = await c.submitInteraction(request, { ms: 1500 });
  assert.equal((await c.waitForSubmission(runId, sub.submission_id, { timeoutMs: 20_000 })).state, 'accepted');
  const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.equal(run.result, 'timed_out');
  const { attempts } = await c.runStatus(runId);
  const spin = attempts.find((a) => a.node_id === 'spin');
  assert.equal(spin.status, 'timed_out');
  assert.ok(spin.deadline_at !== null);
  // Decided once, by the child that opened the attempt: not by the child that validated the
  // submission, nor the one that went on after it.
  assert.deepEqual(readFileSync(calls, 'utf8').split('\n').filter(Boolean), ['ask']);

  // null: no deadline.
  const none = await c.startRun(file, { sessionId: `${session}-none`, input: { askMinutes: null } });
  await c.waitForRun(none.run_id, { untilParked: true, timeoutMs: 20_000 });
  assert.equal((await c.runStatus(none.run_id)).attempts[0].deadline_at, null);

  // A function that throws fails its node, naming it.
  const bad = writeWorkflow(
    dir,
    'badtimeout',
    `export default piw.defineWorkflow({ name: 'badtimeout', startAt: 'a',
      nodes: { a: piw.compute({ run: () => 1, timeoutMs: () => { throw new Error('no policy'); } }) }, edges: [] });`,
  );
  const failed = await c.waitForRun((await c.startRun(bad)).run_id, { timeoutMs: 20_000 });
  assert.equal(failed.status, 'failed');
  assert.match(failed.error, /node a failed in its timeoutMs: no policy/);
  await c.cancelRun(none.run_id).catch(() => {});
  await present.close();
});

test("an included workflow's own maxSteps bounds each invocation of its mount; re-entering starts a new count", async () => {
  const c = host.client;
  const dir = join(host.dir, 'mount-steps');
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'inner.workflow.mjs'),
    `import { compute, defineWorkflow } from 'piw';
export default defineWorkflow({
  name: 'inner', startAt: 'count', maxSteps: 4,
  nodes: {
    count: compute({ run: ({ input, outputs }) => {
      const n = (outputs.count?.n ?? 0) + 1;
      return { n, again: n < input.rounds };
    } }),
    done: compute({ run: ({ outputs }) => outputs.count.n }),
  },
  edges: [{ from: 'count', switch: { on: '$.again', cases: { true: 'count', false: 'done' } } }],
  exits: { finished: { from: 'done' } },
});
`,
  );
  const parent = join(dir, 'outer.workflow.mjs');
  writeFileSync(
    parent,
    `import { compute, defineWorkflow, includeWorkflow } from 'piw';
import inner from './inner.workflow.mjs';
export default defineWorkflow({
  name: 'outer', startAt: 'start', maxSteps: 50,
  includes: { inner: includeWorkflow(inner) },
  nodes: {
    start: compute({ run: () => ({}) }),
    again: compute({ run: ({ state }) => ({ more: state.visit < 2 }) }),
    end: compute({ run: ({ outputs }) => outputs.inner }),
  },
  edges: [
    { from: 'start', to: 'inner' },
    { from: 'inner.finished', to: 'again' },
    { from: 'again', switch: { on: '$.more', cases: { true: 'inner', false: 'end' } } },
  ],
});
`,
  );
  // Exactly the limit in each of two invocations: 8 attempts inside the mount in all.
  const ok = await c.waitForRun((await c.startRun(parent, { input: { rounds: 3 } })).run_id, { timeoutMs: 30_000 });
  assert.equal(ok.status, 'completed', ok.error);
  assert.deepEqual(ok.result, { exit: 'finished', output: 3 });
  const okAttempts = (await c.runStatus(ok.run_id)).attempts;
  assert.equal(okAttempts.filter((a) => a.node_id.startsWith('inner.')).length, 8);

  // One more round than the included workflow allows: its invocation stops the run.
  const over = await c.waitForRun((await c.startRun(parent, { input: { rounds: 5 } })).run_id, { timeoutMs: 30_000 });
  assert.equal(over.status, 'failed');
  assert.match(over.error, /the workflow included as inner reached its step limit: its maxSteps is 4/);
  const attempts = (await c.runStatus(over.run_id)).attempts;
  assert.deepEqual(
    attempts.map((a) => a.node_id).reverse(),
    ['start', 'inner.count', 'inner.count', 'inner.count', 'inner.count'],
  );
});

test('composition by discovered name or path: resolved before the first node, every file recorded and verified on resume', async () => {
  const c = host.client;
  const project = join(host.dir, 'named-project');
  const flows = join(project, 'flows');
  const global = join(host.dir, '.pi', 'agent', 'workflows'); // the host's HOME is host.dir
  const local = join(project, '.pi', 'workflows');
  for (const d of [flows, global, local]) mkdirSync(d, { recursive: true });
  const marker = join(project, 'changed-code-ran');
  const greet = (from, extra = '') => `import { compute, defineWorkflow } from 'piw';
${extra}
export default defineWorkflow({ name: 'greet', startAt: 'hi',
  nodes: { hi: compute({ run: ({ input }) => ({ from: ${JSON.stringify(from)}, to: input.who }) }) },
  edges: [], exits: { done: { from: 'hi' } } });
`;
  writeFileSync(join(global, 'greet.workflow.mjs'), greet('global'));
  writeFileSync(
    join(flows, 'helper.workflow.mjs'),
    `import { compute, defineWorkflow } from 'piw';
export default defineWorkflow({ name: 'helper', startAt: 'h',
  nodes: { h: compute({ run: ({ input }) => input.n * 2 }) }, edges: [], exits: { out: { from: 'h' } } });
`,
  );
  const parent = join(flows, 'parent.workflow.mjs');
  writeFileSync(
    parent,
    `import { checkpoint, compute, defineWorkflow, includeWorkflow } from '@osolmaz/pi-workflows';
export default defineWorkflow({
  name: 'parent', startAt: 'ask',
  includes: {
    g: includeWorkflow('greet', { input: () => ({ who: 'you' }) }),
    h: includeWorkflow({ workflow: './helper.workflow.mjs', input: () => ({ n: 21 }) }),
  },
  nodes: {
    ask: checkpoint({ summary: 'go?' }),
    end: compute({ run: ({ outputs }) => ({ g: outputs.g, h: outputs.h }) }),
  },
  edges: [{ from: 'ask', to: 'g' }, { from: 'g.done', to: 'h' }, { from: 'h.out', to: 'end' }],
});
`,
  );
  const startParked = async () => {
    const { run_id: runId } = await c.startRun(parent, { projectDir: project });
    const run = await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
    assert.equal(run.status, 'waiting', run.error);
    return runId;
  };
  const answer = async (runId) => {
    const pending = (await c.runStatus(runId)).decisions.find((d) => d.status === 'pending');
    await c.answerCheckpoint(runId, pending.decision_id, 'go');
    return c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  };

  // The global file by name, the helper by a path relative to the including file.
  const first = await answer(await startParked());
  assert.equal(first.status, 'completed', first.error ?? first.review_reason);
  assert.deepEqual(first.result, { g: { exit: 'done', output: { from: 'global', to: 'you' } }, h: { exit: 'out', output: 42 } });

  // A name-resolved file that changed while the run waited: review, before its code runs.
  const changed = await startParked();
  writeFileSync(join(global, 'greet.workflow.mjs'), greet('global', `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'ran');`));
  const stopped = await answer(changed);
  assert.equal(stopped.status, 'review');
  assert.match(stopped.review_reason, /source_changed.*greet\.workflow\.mjs/);
  assert.equal(existsSync(marker), false, 'no code of the changed file ran');
  writeFileSync(join(global, 'greet.workflow.mjs'), greet('global'));

  // A project file that now hides the global one: review too, before its code runs.
  const hidden = await startParked();
  writeFileSync(join(local, 'greet.workflow.mjs'), greet('project', `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(marker)}, 'ran');`));
  const refused = await answer(hidden);
  assert.equal(refused.status, 'review');
  assert.match(refused.review_reason, /source_changed: includeWorkflow\("greet"\) now resolves to .*named-project\/\.pi\/workflows\/greet\.workflow\.mjs/);
  assert.equal(existsSync(marker), false, 'no code of the hiding file ran');

  // A new run: the project's file wins the name.
  writeFileSync(join(local, 'greet.workflow.mjs'), greet('project'));
  const fresh = await answer(await startParked());
  assert.equal(fresh.status, 'completed', fresh.error);
  assert.equal(fresh.result.g.output.from, 'project');

  // Through a symlink to the project: the same files, so a resumed run goes on.
  const linked = join(host.dir, 'named-link');
  symlinkSync(project, linked);
  const { run_id: viaLink } = await c.startRun(join(linked, 'flows', 'parent.workflow.mjs'), { projectDir: linked });
  assert.equal((await c.waitForRun(viaLink, { untilParked: true, timeoutMs: 20_000 })).status, 'waiting');
  const linkedDone = await answer(viaLink);
  assert.equal(linkedDone.status, 'completed', linkedDone.error ?? linkedDone.review_reason);

  // An unknown name fails the run at once, saying where it looked.
  writeFileSync(
    join(flows, 'unknown.workflow.mjs'),
    `import { compute, defineWorkflow, includeWorkflow } from 'piw';
export default defineWorkflow({ name: 'unknown', startAt: 'x', includes: { m: includeWorkflow('no-such-flow') },
  nodes: { x: compute({ run: () => 1 }) }, edges: [{ from: 'x', to: 'm' }] });
`,
  );
  const unknown = await c.waitForRun((await c.startRun(join(flows, 'unknown.workflow.mjs'), { projectDir: project })).run_id, { timeoutMs: 20_000 });
  assert.equal(unknown.status, 'failed');
  assert.match(unknown.error, /cannot include "no-such-flow".*no workflow named "no-such-flow"/);
});

test('source cycles are refused before the first node, naming the cycle: by reference and by direct import', async () => {
  const c = host.client;
  const dir = join(host.dir, 'cycles');
  mkdirSync(dir, { recursive: true });
  const ran = join(dir, 'a-node-ran');
  const byPath = (name, other, mount) => `import { compute, defineWorkflow, includeWorkflow } from 'piw';
import { writeFileSync } from 'node:fs';
export default defineWorkflow({ name: '${name}', startAt: 's',
  includes: { ${mount}: includeWorkflow('./${other}.workflow.mjs') },
  nodes: { s: compute({ run: () => writeFileSync(${JSON.stringify(ran)}, 'x') }) },
  edges: [{ from: 's', to: '${mount}' }], exits: { out: { from: 's' } } });
`;
  writeFileSync(join(dir, 'a.workflow.mjs'), byPath('a', 'b', 'toB'));
  writeFileSync(join(dir, 'b.workflow.mjs'), byPath('b', 'a', 'toA'));
  const refs = await c.waitForRun((await c.startRun(join(dir, 'a.workflow.mjs'))).run_id, { timeoutMs: 20_000 });
  assert.equal(refs.status, 'failed');
  assert.match(
    refs.error,
    /workflow source cycle: \S*cycles\/a\.workflow\.mjs -> \(includes\.toB\) \S*cycles\/b\.workflow\.mjs -> \(includes\.toA\) \S*cycles\/a\.workflow\.mjs/,
  );

  const byImport = (name, other) => `import { compute, defineWorkflow, includeWorkflow } from 'piw';
import other from './${other}.workflow.mjs';
export default defineWorkflow({ name: '${name}', startAt: 's', includes: { m: includeWorkflow(other) },
  nodes: { s: compute({ run: () => 1 }) }, edges: [{ from: 's', to: 'm' }], exits: { out: { from: 's' } } });
`;
  writeFileSync(join(dir, 'c.workflow.mjs'), byImport('c', 'd'));
  writeFileSync(join(dir, 'd.workflow.mjs'), byImport('d', 'c'));
  const imports = await c.waitForRun((await c.startRun(join(dir, 'c.workflow.mjs'))).run_id, { timeoutMs: 20_000 });
  assert.equal(imports.status, 'failed');
  assert.match(imports.error, /workflow source cycle: \S*cycles\/c\.workflow\.mjs -> \S*cycles\/d\.workflow\.mjs -> \S*cycles\/c\.workflow\.mjs/);
  assert.equal(existsSync(ran), false, 'no node ran');
  assert.equal((await c.runStatus(imports.run_id)).attempts.length, 0);
});

test('an exception node code throws where nobody catches it fails that node, named, not the child', async () => {
  const c = host.client;
  const file = writeWorkflow(
    host.dir,
    'uncaught',
    `export default piw.defineWorkflow({
      name: 'uncaught', startAt: 'a',
      nodes: {
        a: piw.compute({ run: ({ input }) => new Promise(() => {
          setInterval(() => {}, 1000); // would keep running; the failure ends the node anyway
          if (input.kind === 'timer') setTimeout(() => { throw new Error('late boom'); }, 1);
          else Promise.reject(new Error('nobody awaited this'));
        }) }),
        recovered: piw.compute({ run: ({ results }) => results.a }),
      },
      edges: [{ from: 'a', switch: { on: '$result.outcome', cases: { failed: 'recovered' } } }],
    });`,
  );
  for (const [kind, error] of [['timer', 'node a failed: late boom'], ['rejection', 'node a failed: nobody awaited this']]) {
    const run = await c.waitForRun((await c.startRun(file, { input: { kind } })).run_id, { timeoutMs: 20_000 });
    assert.equal(run.status, 'completed', `${kind}: ${run.error ?? run.review_reason}`);
    assert.deepEqual(run.result, { outcome: 'failed', error });
    const { attempts } = await c.runStatus(run.run_id);
    assert.deepEqual(attempts.map((a) => [a.node_id, a.status]).reverse(), [['a', 'failed'], ['recovered', 'ok']]);
    // Each attempt says when it opened and ended (the Pi widget shows how long it took).
    const [recovered, a] = attempts;
    assert.ok(Number.isInteger(a.started_at) && a.finished_at >= a.started_at, JSON.stringify(a));
    assert.ok(recovered.started_at >= a.finished_at && recovered.finished_at >= recovered.started_at, JSON.stringify(recovered));
  }
});


test("an exception validate leaves uncaught rejects the submission with its message; one in an action's run is quoted in the review reason", async () => {
  const c = host.client;
  const session = 'session-validate-uncaught';
  const file = writeWorkflow(
    host.dir,
    'validate-uncaught',
    `export default piw.defineWorkflow({
      name: 'validate-uncaught', startAt: 'ask',
      nodes: {
        ask: piw.agent({ prompt: 'Give { n }', validate: (out) => {
          if (out.n !== 1) { Promise.reject(new Error('n must be 1, got ' + out.n)); return new Promise(() => {}); }
          return out;
        } }),
        act: piw.action({ effect: piw.manualEffect('act.once'), run: () => new Promise(() => {
          setTimeout(() => { throw new Error('the action broke'); }, 1);
        }) }),
      },
      edges: [{ from: 'ask', to: 'act' }],
    });`,
  );
  const { run_id: runId } = await c.startRun(file, { sessionId: session });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [ask] = await c.listInteractions(session);
  const wrong = await c.submitInteraction(ask, { n: 2 });
  const verdict = await c.waitForSubmission(runId, wrong.submission_id, { timeoutMs: 20_000 });
  assert.equal(verdict.state, 'rejected');
  assert.equal(verdict.error, 'n must be 1, got 2');
  const right = await c.submitInteraction(ask, { n: 1 });
  assert.equal((await c.waitForSubmission(runId, right.submission_id, { timeoutMs: 20_000 })).state, 'accepted');
  const stopped = await until(c, runId, (s) => (s.run.status === 'review' ? s.run : null));
  assert.match(stopped.review_reason, /its last stderr line: piw worker: uncaught exception: the action broke$/);
});


test('a node deadline longer than a Node timer can wait does not abort the node at once', async () => {
  const c = host.client;
  const file = writeWorkflow(
    host.dir,
    'long-deadline',
    `export default piw.defineWorkflow({
      name: 'long-deadline', startAt: 'a',
      nodes: {
        // 30 days. A timer Node cannot hold would fire after 1 ms, before this 5 ms one.
        a: piw.compute({ timeoutMs: 30 * 24 * 3600 * 1000,
          run: ({ signal }) => new Promise((r) => setTimeout(() => r({ aborted: signal.aborted }), 5)) }),
      },
      edges: [],
    });`,
  );
  const run = await c.waitForRun((await c.startRun(file)).run_id, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { aborted: false });
});

test('wait() and waitThen(): the run parks on the host timer with no child, the wake time is decided once, and it goes on then', async () => {
  const { Client } = await import('../index.js');
  const { hostBin, killInstallation, tempDir } = await import('./helpers.mjs');
  const dir = tempDir();
  const home = join(dir, 'home');
  const clock = join(dir, 'clock');
  let offset = 0;
  const advance = (ms) => {
    offset += ms;
    writeFileSync(`${clock}.tmp`, String(offset));
    renameSync(`${clock}.tmp`, clock);
  };
  const env = { HOME: dir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock };
  const calls = join(dir, 'calls');
  const file = writeWorkflow(
    dir,
    'naps',
    `import { appendFileSync } from 'node:fs';
    export default piw.defineWorkflow({ name: 'naps', startAt: 'prep',
      nodes: {
        // Pure steps the runtime reports together: the wait flushes them first.
        prep: piw.compute({ run: () => ({ ready: true }) }),
        // Computed from the context, once: the file counts how often the code runs.
        check: piw.compute({ run: ({ input }) => {
          appendFileSync(${JSON.stringify(calls)}, 'check\\n');
          return piw.waitThen({ for: input.every, output: { checked: 1 } });
        } }),
        nap: piw.wait({ until: ({ outputs }) => { appendFileSync(${JSON.stringify(calls)}, 'nap\\n'); return Date.now() + 3 * 3600_000 + outputs.check.checked; },
                        output: ({ outputs }) => ({ after: outputs.check }) }),
      },
      edges: [{ from: 'prep', to: 'check' }, { from: 'check', to: 'nap' }] });`,
  );
  let c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const { run_id: runId } = await c.startRun(file, { input: { every: '2h' } });
    // A run on a timer is not parked for a request (`untilParked` waits on): read its status.
    const onTimer = (r) => r.status === 'waiting' && r.wake_at != null;
    for (let i = 0; i < 1500 && !onTimer((await c.runStatus(runId)).run); i++) await sleep(20);
    const parked = (await c.runStatus(runId)).run;
    assert.equal(parked.status, 'waiting');
    const first = parked.wake_at;
    assert.equal(first, parked.updated_at + 2 * 3600_000, 'two hours from the host clock');
    for (let i = 0; i < 1500 && (await c.status()).active_children !== 0; i++) await sleep(20);
    assert.equal((await c.status()).active_children, 0, 'no child runs while the run waits');
    // Across a host restart, the same wake time.
    const { pid } = await c.status();
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    for (let i = 0; i < 1500 && alive(pid); i++) await sleep(20);
    c = await Client.connect({ home, hostBin, hostEnv: env });
    assert.equal((await c.runStatus(runId)).run.wake_at, first);
    advance(2 * 3600_000);
    await c.runStatus(runId); // wakes a host asleep until the old deadline
    const atNap = (r) => r.current_node === 'nap' && r.status === 'waiting';
    for (let i = 0; i < 1500 && !atNap((await c.runStatus(runId)).run); i++) await sleep(20);
    const napping = (await c.runStatus(runId)).run;
    assert.equal(napping.status, 'waiting');
    assert.equal(napping.current_node, 'nap');
    assert.ok(napping.wake_at > first, 'the wait node has its own wake time');
    advance(4 * 3600_000);
    await c.runStatus(runId);
    const done = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(done.status, 'completed', done.error);
    assert.deepEqual(done.result, { after: { checked: 1 } });
    assert.equal(readFileSync(calls, 'utf8'), 'check\nnap\n', 'each node code ran once');
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
  }
});
