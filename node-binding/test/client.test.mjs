// Every client method against a real host, including the typed error codes.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, before, test } from 'node:test';

import { Client, PiwError } from '../index.js';
import { code, hostBin, sleep, startHost, writeWorkflow } from './helpers.mjs';

let host;
let steps;
let ask;
const session = 'session-client-test';

before(async () => {
  host = await startHost();
  steps = writeWorkflow(
    host.dir,
    'steps',
    `export default piw.defineWorkflow({
      name: 'steps', startAt: 'gate',
      nodes: {
        gate: piw.checkpoint({ summary: 'go on?' }),
        decide: piw.humanDecision({
          choices: piw.defineHumanChoices({ ship: piw.choice({ label: 'Ship it' }), hold: piw.choice({ label: 'Hold' }) }),
          request: () => ({ title: 'ship it?' }),
        }),
        tell: piw.notify({ kind: 'progress', message: ({ outputs }) => 'decided ' + outputs.decide.choice }),
        done: piw.compute({ run: ({ outputs }) => ({ finished: true, last: outputs.decide, gate: outputs.gate }) }),
      },
      edges: [{ from: 'gate', to: 'decide' }, { from: 'decide', to: 'tell' }, { from: 'tell', to: 'done' }],
    });`,
  );
  ask = writeWorkflow(
    host.dir,
    'ask',
    `export default piw.defineWorkflow({
      name: 'ask', startAt: 'ask',
      nodes: {
        ask: piw.agent({
          prompt: ({ input }) => 'say 42 about ' + JSON.stringify(input),
          expectedOutput: '{ "value": 42 }',
          validate: (result) => { if (result?.value !== 42) throw new Error('value must be 42, got ' + result?.value); return result; },
        }),
        done: piw.compute({ run: ({ outputs }) => ({ accepted: outputs.ask }) }),
      },
      edges: [{ from: 'ask', to: 'done' }],
    });`,
  );
});

after(async () => {
  await host?.stop();
});

test('a submission over the 64 MiB value limit is refused before anything is sent', async () => {
  // The step does not exist: a submission that reached the host would be refused as unknown.
  const output = { blob: 'z'.repeat(64 * 1024 * 1024) };
  await assert.rejects(host.client.submitInteraction({ run_id: 'run-none', node_id: 'ask', attempt_id: 'att-none', interaction_id: 'int-none' }, output), (e) => {
    assert.equal(e.code, 'value_too_large', e.message);
    assert.match(e.message, /over the limit of 67108864 bytes \(64 MiB\) a value may have; nothing was submitted/);
    assert.equal(e.details.limit, 64 * 1024 * 1024);
    return true;
  });
});

test('status names the host, its pid, epoch and paths', async () => {
  const s = await host.client.status();
  assert.equal(s.pid, host.pid);
  assert.equal(s.schema_id, 'piw.state.v1');
  assert.ok(s.epoch >= 1);
  assert.equal(s.home, host.home);
  assert.equal(host.client.isOpen, true);
});

test('checkpoint, human decision, notify and messages', async () => {
  const c = host.client;
  const { run_id: runId } = await c.startRun(steps, { sessionId: session, input: { n: 1 } });
  let run = await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  assert.equal(run.status, 'waiting');
  let s = await c.runStatus(runId);
  const gate = s.decisions.find((d) => d.status === 'pending');
  assert.equal(gate.kind, 'checkpoint');

  await c.answerCheckpoint(runId, gate.decision_id, 'yes');
  // Wait for the run to park again, at the protected decision.
  for (;;) {
    s = await c.runStatus(runId);
    if (s.run.status === 'waiting' && s.decisions.some((d) => d.kind === 'human_decision' && d.status === 'pending')) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const decide = s.decisions.find((d) => d.kind === 'human_decision');
  // The model-facing path may not answer a protected human decision.
  const refused = await c.answerCheckpoint(runId, decide.decision_id, 'yes').catch((e) => e);
  assert.ok(refused instanceof PiwError, String(refused));
  assert.ok(['unauthorized', 'invalid_transition'].includes(refused.code), refused.code);
  const answered = await c.answerHumanDecision(runId, decide.decision_id, { choice: 'ship', text: null });
  assert.equal(answered.answered_by, 'person');

  run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result.finished, true);
  assert.deepEqual(run.result.last, { choice: 'ship', provenance: 'human' });
  assert.equal(run.result.gate, 'yes');

  // The notify node's message, then the run's terminal message, in order.
  const messages = await c.claimMessages(session);
  assert.deepEqual(messages.map((m) => m.kind), ['notify', 'terminal']);
  assert.deepEqual(messages[0].content, { kind: 'progress', message: 'decided ship' });
  assert.equal(messages[1].content.status, 'completed');
  for (const m of messages) {
    const ack = await c.ackMessage(m.message_id);
    assert.equal(ack.message_id, m.message_id);
  }
  assert.deepEqual(await c.claimMessages(session), []);
});

test('pause, resume, detach and cancel, with stale revisions refused', async () => {
  const c = host.client;
  const { run_id: runId } = await c.startRun(steps, { sessionId: session });
  await assert.rejects(c.pauseRun(runId, { expectedRevision: 999_999 }), (err) => {
    // The rejection's details come along, off the message.
    assert.equal(err.code, 'stale_revision');
    assert.equal(err.details.expected, 999_999);
    assert.equal(typeof err.details.current, 'number');
    assert.ok(!err.message.includes('\x1e'), err.message);
    return true;
  });
  // A rejection without details has none.
  await assert.rejects(c.runStatus('run-nope'), (err) => {
    assert.equal(err.code, 'not_found');
    assert.equal(err.details, undefined);
    return true;
  });
  const paused = await c.pauseRun(runId);
  assert.equal(paused.paused, true);
  const resumed = await c.resumeRun(runId);
  assert.equal(resumed.paused, false);
  // This host names no Pi model for detached steps: a detach is refused, saying why (the
  // CLI's and Pi's tests detach on hosts that do).
  await assert.rejects(c.detachRun(runId), (err) => {
    assert.equal(err.code, 'invalid_transition');
    assert.match(err.message, /cannot detach run .*: nothing names a Pi provider and model to answer its steps/);
    return true;
  });
  assert.equal((await c.runStatus(runId)).run.execution_mode, 'interactive');
  const cancelled = await c.cancelRun(runId, { reason: 'test' });
  assert.equal(cancelled.status, 'cancelled');
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'cancelled');
  await assert.rejects(c.cancelRun(runId), code('invalid_transition'));
  await assert.rejects(c.detachRun(runId), code('invalid_transition'));
});

test('listRuns filters by session and limit', async () => {
  const c = host.client;
  const mine = await c.listRuns({ sessionId: session });
  assert.ok(mine.length >= 2);
  assert.ok(mine.every((r) => r.origin_session === session));
  assert.equal((await c.listRuns({ limit: 1 })).length, 1);
  assert.deepEqual(await c.listRuns({ sessionId: 'nobody' }), []);
});

test('listRuns({ unfinished: true }) lists the runs that have not ended, past any number that have', async () => {
  const c = host.client;
  const mine = 'session-unfinished';
  const { run_id: waiting } = await c.startRun(steps, { sessionId: mine });
  await c.waitForRun(waiting, { untilParked: true, timeoutMs: 20_000 });
  const { run_id: cancelled } = await c.startRun(steps, { sessionId: mine });
  await c.cancelRun(cancelled);
  const ids = (runs) => runs.map((r) => r.run_id);
  assert.deepEqual(ids(await c.listRuns({ sessionId: mine })), [cancelled, waiting]);
  // The newest run has ended: a limit of one still finds the one that has not.
  assert.deepEqual(ids(await c.listRuns({ sessionId: mine, unfinished: true, limit: 1 })), [waiting]);
  await c.cancelRun(waiting);
  assert.deepEqual(await c.listRuns({ sessionId: mine, unfinished: true }), []);
});

/**
 * Adds `count` ended runs of `sessionId` to the host's database behind its back (one SQL
 * statement, no children): thousands of runs in a moment. Started at `base` ms, seven at a time
 * sharing a start time, so pages also end among equal times.
 */
function seedRuns(home, { sessionId, count, base, prefix }) {
  // A project directory of 500 bytes: 2,100 records are more than one reply holds.
  const projectDir = '/projects/' + 'p'.repeat(490);
  const db = new DatabaseSync(join(home, 'state.sqlite'));
  try {
    db.exec('PRAGMA busy_timeout = 10000');
    db.prepare(`INSERT INTO runs (run_id, workflow_name, source_root, source_hash, mounted_sources,
        input, input_hash, origin_session, execution_mode, project_dir, status, revision,
        created_at, updated_at, finished_at)
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
      SELECT printf('%s-%05d', ?, i), 'seeded', '/nowhere/seeded.workflow.json', '0', '{}',
        'null', '0', ?, 'detached', ?, 'cancelled', 0, ? + i / 7, ? + i / 7, ? + i / 7
      FROM n`).run(count, prefix, sessionId, projectDir, base, base, base);
  } finally {
    db.close();
  }
  return Array.from({ length: count }, (_, i) => `${prefix}-${String(i).padStart(5, '0')}`);
}

test('allRuns and listRunsPage reach every one of 2,100 runs exactly once while runs start and end', async (t) => {
  // A host of its own: the seeded runs have no history, which diagnose would report.
  const many = await startHost();
  t.after(() => many.stop());
  const c = many.client;
  const steps = writeWorkflow(many.dir, 'steps', `export default piw.defineWorkflow({
    name: 'steps', startAt: 'gate', nodes: { gate: piw.checkpoint({ summary: 'go on?' }) }, edges: [] });`);
  const sessionId = 'session-many';
  const base = Date.now() - 1_000_000;
  const seeded = seedRuns(many.home, { sessionId, count: 2_100, base, prefix: 'run-seeded' });
  // More than one reply holds: the page is cut to what fits and says more follow.
  const first = await c.listRunsPage({ sessionId, limit: 10_000 });
  assert.ok(first.runs.length > 0 && first.runs.length < 2_100, `${first.runs.length}`);
  assert.equal(first.more, true);
  assert.equal(typeof first.nextCursor, 'string');
  // Newest first, equal start times by run id; the next page goes on after the first.
  const order = seeded
    .map((id, i) => [Math.floor(i / 7), id])
    .sort(([a, x], [b, y]) => b - a || (x < y ? -1 : 1))
    .map(([, id]) => id);
  const ids = (runs) => runs.map((r) => r.run_id);
  assert.deepEqual(ids(first.runs), order.slice(0, first.runs.length));
  const next = await c.listRuns({ sessionId, limit: 3, cursor: first.nextCursor });
  assert.deepEqual(ids(next), order.slice(first.runs.length, first.runs.length + 3));

  // Every run once, newest first, while a newer run starts, an older one is added and a run
  // not listed yet changes status.
  const seen = new Map();
  let older = null;
  let newer = null;
  for await (const run of c.allRuns({ sessionId })) {
    seen.set(run.run_id, (seen.get(run.run_id) ?? 0) + 1);
    if (seen.size === 150) {
      newer = (await c.startRun(steps, { sessionId })).run_id;
      [older] = seedRuns(many.home, { sessionId, count: 1, base: base - 5, prefix: 'run-older' });
      const db = new DatabaseSync(join(many.home, 'state.sqlite'));
      db.exec('PRAGMA busy_timeout = 10000');
      db.prepare("UPDATE runs SET status = 'failed' WHERE run_id = ?").run(seeded[3]);
      db.close();
    }
  }
  const twice = [...seen].filter(([, n]) => n > 1);
  assert.deepEqual(twice, []);
  assert.deepEqual(seeded.filter((id) => !seen.has(id)), []);
  assert.equal(seen.get(older), 1, 'a run older than the cursor is listed');
  assert.equal(seen.has(newer), false, 'a run newer than the first page is not');
  await c.cancelRun(newer);
});

test('an interactive submission is validated: rejected with the validate error, then accepted', async () => {
  const c = host.client;
  const askSession = 'session-ask';
  const { run_id: runId } = await c.startRun(ask, { sessionId: askSession, input: { q: 1 } });
  await c.waitForRun(runId, { untilParked: true, timeoutMs: 20_000 });
  const [interaction] = await c.listInteractions(askSession);
  assert.equal(interaction.run_id, runId);
  assert.equal(interaction.kind, 'agent');
  // The request the Pi extension presents (the contract in README.md).
  assert.deepEqual(interaction.request, {
    workflow: 'ask',
    title: null,
    node: 'ask',
    kind: 'agent',
    prompt: 'say 42 about {"q":1}',
    expectedOutput: '{ "value": 42 }',
    statusDetail: null,
  });

  const wrong = await c.submitInteraction(interaction, { value: 7 });
  assert.equal(wrong.state, 'validating');
  const verdict = await c.waitForSubmission(runId, wrong.submission_id, { timeoutMs: 20_000 });
  assert.equal(verdict.state, 'rejected');
  assert.match(verdict.error, /value must be 42, got 7/);
  // The same request is still open, and shows why the last try was rejected.
  const [again] = await c.listInteractions(askSession);
  assert.equal(again.interaction_id, interaction.interaction_id);
  assert.equal(again.last_submission.state, 'rejected');

  // A string holding JSON (here in a fence, as a model may write it) is parsed before validate.
  const right = await c.submitInteraction(again, '```json\n{ "value": 42 }\n```');
  const ok = await c.waitForSubmission(runId, right.submission_id, { timeoutMs: 20_000 });
  assert.equal(ok.state, 'accepted');
  const run = await c.waitForRun(runId, { timeoutMs: 20_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { accepted: { value: 42 } });
  assert.deepEqual(await c.listInteractions(askSession), []);
});

test('subscriptions deliver a run and a session in order, and end on close', async () => {
  const c = host.client;
  const sessionSub = await c.subscribe({ sessionId: 'session-sub' });
  const { run_id: runId } = await c.startRun(steps, { sessionId: 'session-sub' });
  const runSub = await c.subscribe({ runId });
  const seen = [];
  for await (const e of sessionSub) {
    seen.push(e);
    if (e.status === 'waiting') break;
  }
  assert.ok(seen.every((e) => e.run_id === runId));
  assert.equal(seen[0].event_kind, 'started');
  const seqs = seen.map((e) => e.seq);
  assert.deepEqual(seqs, seqs.map((_, i) => seqs[0] + i), 'gap-free and in order');
  // A step's outcome reads as the authoring API says it (`ok`), as in run.status.
  const gate = (await c.runStatus(runId)).decisions.find((d) => d.status === 'pending');
  await c.answerCheckpoint(runId, gate.decision_id, 'yes');
  let transitioned;
  // next(), not `for await ... break`: breaking out would close the subscription.
  while (!transitioned) {
    const e = await runSub.next();
    assert.notEqual(e, null, 'the subscription ended before the transition');
    if (e.event_kind === 'transitioned') transitioned = e;
  }
  assert.deepEqual([transitioned.data.from, transitioned.data.outcome, transitioned.data.to], ['gate', 'ok', 'decide']);
  assert.equal((await c.runStatus(runId)).attempts.find((a) => a.node_id === 'gate').status, 'ok');
  await c.cancelRun(runId);
  const fromRun = [];
  // By its kind: an event's `status` is the run's after the commit that made it, so the
  // events of the commit that cancelled (a request the child made in the same batch, say) all
  // say `cancelled`, and stopping at the first would leave the cancellation itself unread.
  for await (const e of runSub) {
    fromRun.push(e);
    if (e.event_kind === 'cancelled') break;
  }
  assert.ok(fromRun.length >= 1);
  await runSub.close();
  assert.equal(await runSub.next(), null);
  await sessionSub.close();
});

test('typed errors: not_found, malformed, idempotency, replay, unknown kinds', async () => {
  const c = host.client;
  await assert.rejects(c.runStatus('run-does-not-exist'), code('not_found'));
  await assert.rejects(c.request('run.explode'), code('malformed'));
  await assert.rejects(c.request('run.status', {}), code('malformed'));
  await assert.rejects(c.startRun('/nonexistent/x.workflow.mjs'), (e) => e instanceof PiwError && e.code.length > 0);
  // A value the addon cannot turn into JSON (a cycle, or nested deeper than the protocol
  // allows) fails before anything is sent, with the code the host gives a too-deep request.
  const cyclic = {};
  cyclic.self = cyclic;
  let deep = {};
  for (let i = 0; i < 200; i++) deep = { d: deep };
  for (const input of [cyclic, deep]) {
    await assert.rejects(c.startRun(steps, { input }), (e) => {
      assert.ok(e instanceof PiwError, String(e));
      assert.equal(e.code, 'malformed');
      assert.match(e.message, /nesting depth/);
      return true;
    });
  }

  const first = await c.startRun(steps, { idempotencyKey: 'start-once', input: { a: 1 } });
  const again = await c.startRun(steps, { idempotencyKey: 'start-once', input: { a: 1 } });
  assert.equal(again.run_id, first.run_id);
  await assert.rejects(
    c.startRun(steps, { idempotencyKey: 'start-once', input: { a: 2 } }),
    code('idempotency_conflict'),
  );
  // Every failure names its request, generated or given, so a caller can resend it safely.
  await assert.rejects(c.pauseRun('run-does-not-exist'), (e) => {
    assert.equal(e.code, 'not_found');
    assert.match(e.requestId, /^req-[0-9a-f]{28}$/);
    return true;
  });
  await assert.rejects(c.pauseRun('run-does-not-exist', { requestId: 'mine-1' }), (e) => {
    assert.equal(e.requestId, 'mine-1');
    return true;
  });
  await assert.rejects(c.request('run.explode'), (e) => typeof e.requestId === 'string');
  const r1 = await c.request('run.pause', { requestId: 'pause-1', runId: first.run_id });
  const r2 = await c.request('run.pause', { requestId: 'pause-1', runId: first.run_id });
  assert.equal(r1.replayed, false);
  assert.equal(r2.replayed, true);
  assert.deepEqual(r2.body, r1.body);
  await c.cancelRun(first.run_id);
});

test('diagnose is clean after all of the above', async () => {
  assert.deepEqual(await host.client.diagnose(), []);
});

test('leaving a for-await loop ends the subscription on the host (no slot leaks)', async () => {
  const c = await host.connect();
  const { run_id: runId } = await c.startRun(steps, { sessionId: 'session-loop' });
  // A connection may hold 64 subscriptions; 100 loops that break must not use them up.
  for (let i = 0; i < 100; i++) {
    const sub = await c.subscribe({ runId });
    const p = c.pauseRun(runId).then(() => c.resumeRun(runId));
    for await (const _event of sub) break;
    await p;
  }
  await c.cancelRun(runId);
  await c.close();
});

test('ensureHost: callers racing on a fresh installation end with exactly one host', async () => {
  const { ensureHost } = await import('../index.js');
  const { tempDir, hostBin, alive, sleep } = await import('./helpers.mjs');
  const { rmSync } = await import('node:fs');
  const { join } = await import('node:path');
  const dir = tempDir();
  const home = join(dir, 'home');
  try {
    const statuses = await Promise.all(
      Array.from({ length: 6 }, () => ensureHost({ home, hostBin, hostEnv: { HOME: dir } })),
    );
    const pids = new Set(statuses.map((s) => s.pid));
    assert.equal(pids.size, 1, `one host: ${[...pids]}`);
    const c = await Client.connect({ home, start: false });
    await c.request('host.stop');
    await c.close();
    const [pid] = pids;
    for (let i = 0; i < 500 && alive(pid); i++) await sleep(10);
    assert.equal(alive(pid), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('waitForRun goes on through a burst of events it fell behind on', async () => {
  const c = host.client;
  const go = `${host.dir}/chatty.go`;
  const marker = `${host.dir}/chatty.done`;
  // 6,000 steps, each at least one event: more than a subscription buffers (4,096) even after
  // whatever the socket buffers hold when this thread looks again, so the overflow below does
  // not depend on speed. (Steps, not updates: a run's progress events are bounded by rate.)
  const chatty = writeWorkflow(
    host.dir,
    'chatty',
    `import { existsSync, writeFileSync } from 'node:fs';
    export default piw.defineWorkflow({
      name: 'chatty', startAt: 'wait', maxSteps: 10000,
      nodes: {
        wait: piw.action({
          effect: piw.idempotentEffect('wait'),
          run: async () => {
            while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 10));
            return { step: 0 };
          },
        }),
        talk: piw.compute({
          run: ({ outputs }) => {
            const step = (outputs.talk?.step ?? 0) + 1;
            if (step === 6000) writeFileSync(${JSON.stringify(marker)}, 'done');
            return { step, next: step < 6000 ? 'again' : 'done' };
          },
        }),
        done: piw.compute({ run: ({ outputs }) => ({ said: outputs.talk.step }) }),
      },
      edges: [
        { from: 'wait', to: 'talk' },
        { from: 'talk', switch: { on: '$.next', cases: { again: 'talk', done: 'done' } } },
      ],
    });`,
  );
  const { run_id: runId } = await c.startRun(chatty);
  // A second subscription that nobody reads while this thread is blocked: it shows that the
  // burst overflowed a reader's buffer.
  const unread = await c.subscribe({ runId });
  // The burst starts only once waitForRun has subscribed (and so will fall behind it).
  const subscribe = c.subscribe.bind(c);
  let subscribed;
  const waitSubscribed = new Promise((resolve) => (subscribed = resolve));
  c.subscribe = async (filter) => {
    const sub = await subscribe(filter);
    subscribed();
    return sub;
  };
  let waiting;
  try {
    waiting = c.waitForRun(runId, { timeoutMs: 240_000 });
    await Promise.race([waitSubscribed, waiting]);
  } finally {
    delete c.subscribe;
  }
  writeFileSync(go, '');
  // Block this thread until the run has completed on the host (asked synchronously, through
  // the CLI): its events pile up in the addon's buffers, unread. Each step is durable: tens
  // of seconds on a loaded machine; the bound is only for a hang.
  const until = Date.now() + 180_000;
  const completed = () =>
    existsSync(marker) &&
    JSON.parse(execFileSync(hostBin, ['run', 'status', runId, '--json'], { env: { ...process.env, PIW_HOME: host.home } }))
      .run.status === 'completed';
  while (!completed()) {
    assert.ok(Date.now() < until, 'the chatty run never completed');
  }
  let seen = 0;
  const overflow = await (async () => {
    for (;;) {
      try {
        const event = await unread.next();
        if (event === null || event.event_kind === 'completed') return null;
        seen += 1;
      } catch (e) {
        return e;
      }
    }
  })();
  assert.equal(overflow?.code, 'subscription_overflow', `the unread subscription ended after ${seen} events: ${overflow}`);
  const run = await waiting;
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { said: 6000 });
});

test('a run in review is retried once fixed; runStatus pages its attempts', async () => {
  const c = host.client;
  const fixed = `${host.dir}/retry.fixed`;
  const flaky = writeWorkflow(
    host.dir,
    'flaky',
    `import { existsSync } from 'node:fs';
    export default piw.defineWorkflow({
      name: 'flaky', startAt: 'work',
      nodes: {
        work: piw.compute({
          run: async () => {
            if (!existsSync(${JSON.stringify(fixed)})) process.exit(1);
            return { ok: true };
          },
        }),
      },
      edges: [],
    });`,
  );
  const { run_id: runId } = await c.startRun(flaky);
  const stopped = await c.waitForRun(runId, { timeoutMs: 60_000, untilParked: true });
  assert.equal(stopped.status, 'review');
  await assert.rejects(
    c.resolveEffect(runId, 'eff-nope', { failed: 'no such effect' }),
    code('not_found'),
  );
  // An outcome that is neither `{ applied }` nor `{ failed }` is refused before it is sent.
  await assert.rejects(c.resolveEffect(runId, 'eff-nope', { done: true }), code('invalid_input'));
  writeFileSync(fixed, '');
  const retried = await c.retryRun(runId, { reason: 'fixed it', by: 'test' });
  assert.equal(retried.status, 'queued');
  const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed');
  assert.deepEqual(run.result, { ok: true });
  await assert.rejects(c.retryRun(runId), code('invalid_transition'));
  // Newest first, as many as asked for, with the count of all.
  const page = await c.runStatus(runId, { attemptsLimit: 1 });
  assert.equal(page.attempts.length, 1);
  assert.equal(page.attempts[0].status, 'ok');
  assert.ok(page.attempt_count > 1, `${page.attempt_count}`);
  const older = await c.runStatus(runId, { attemptsBefore: page.attempts[0].attempt_id });
  assert.equal(older.attempts.length, page.attempt_count - 1);
  assert.ok(older.attempts.every((a) => a.status === 'interrupted'));
});

test('waitForRun({ untilParked }) goes on past a durable timer and returns once the run waits on a request', async () => {
  const { mkdtempSync, renameSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  // The host runs on a test clock: the timer fires when this test moves the clock, never by
  // itself, so the run sleeps on it for as long as the test says.
  const clockDir = mkdtempSync(join(tmpdir(), 'piw-clock-'));
  const clock = join(clockDir, 'clock');
  writeFileSync(clock, '0');
  const timed = await startHost({ PIW_TEST_CLOCK: clock });
  try {
    const c = timed.client;
    const file = writeWorkflow(
      timed.dir,
      'nap-then-ask',
      `export default piw.defineWorkflow({
        name: 'nap-then-ask', startAt: 'nap',
        nodes: {
          nap: piw.wait({ for: '1h', output: { slept: true } }),
          ask: piw.checkpoint({ summary: 'go on?' }),
        },
        edges: [{ from: 'nap', to: 'ask' }],
      });`,
    );
    const { run_id: runId } = await c.startRun(file);
    const onTimer = (r) => r.status === 'waiting' && r.wake_at != null;
    for (let i = 0; i < 1500 && !onTimer((await c.runStatus(runId)).run); i++) await sleep(20);
    assert.ok(onTimer((await c.runStatus(runId)).run), 'the run sleeps on its timer');
    // Asked while the run sleeps: no request to answer yet, so the wait goes on...
    let checked;
    const firstCheck = new Promise((resolve) => (checked = resolve));
    c.runStatus = async (...args) => {
      const status = await Client.prototype.runStatus.apply(c, args);
      checked();
      return status;
    };
    const parked = c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
    await firstCheck; // it has read the run, asleep on its timer (the clock stands still)
    delete c.runStatus;
    // ...until the timer fires (the clock moves past it) and the run asks its checkpoint.
    writeFileSync(`${clock}.tmp`, String(2 * 3600_000));
    renameSync(`${clock}.tmp`, clock);
    await c.runStatus(runId); // wakes a host asleep until the old deadline
    const run = await parked;
    assert.equal(run.status, 'waiting');
    assert.equal(run.current_node, 'ask', JSON.stringify(run));
    assert.equal(run.wake_at ?? null, null);
    // The request the "Driving runs" pattern looks for is there.
    const { decisions } = await c.runStatus(runId);
    const [pending] = decisions.filter((d) => d.status === 'pending');
    assert.equal(pending?.node_id, 'ask');
    await c.answerCheckpoint(runId, pending.decision_id, 'yes');
    assert.equal((await c.waitForRun(runId, { timeoutMs: 60_000 })).status, 'completed');
  } finally {
    await timed.stop();
    rmSync(clockDir, { recursive: true, force: true });
  }
});
