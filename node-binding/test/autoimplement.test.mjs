// The autoimplement built-in through the client, on a fixture git repository: a host killed
// while the run waits for its review and another killed just after the commit, before its
// receipt is kept (the run resumes from its durable boundary: nothing is implemented, checked
// or committed twice); and the timeout route on the host's test clock (a step that runs out of
// time is asked again, a bounded number of times, then the run ends blocked). `gh` is not on
// the PATH here: CI is skipped, and the result says why. Without a plan in the input: the
// model's answer of where the plan is written is checked before the run carries it out.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { planDigest } from '../builtins/plan.mjs';
import { BUILTINS_DIR } from '../extension/resolve.js';
import { Client } from '../index.js';
import { CHECKS, FIX, fixtureRepo, gitIn, PLAN, PLAN_DOC, toolsPath } from './fixture-repo.mjs';
import { alive, hostBin, killInstallation, tempDir } from './helpers.mjs';

const WORKFLOW = join(BUILTINS_DIR, 'autoimplement.workflow.mjs');

// The fixture's check is `node --test`: under this test runner's variable it would report to a
// parent that is not there and exit 0 whatever its tests say. The hosts inherit this process's
// environment. (Removed once the tests are declared: the runner reads it when the first is.)
before(() => {
  delete process.env.NODE_TEST_CONTEXT;
});

/** A fixture project, a PIW_HOME and the host environment (PATH: git and node only). */
function setup() {
  const dir = tempDir('piw-autoimpl-');
  const projectDir = join(dir, 'project');
  mkdirSync(projectDir);
  const first = fixtureRepo(projectDir);
  const env = { HOME: dir, PIW_KILL_GRACE_MS: '300', PATH: toolsPath(dir) };
  return { dir, home: join(dir, 'home'), projectDir, first, env };
}

async function pending(client, sessionId, node) {
  const [ask] = await client.listInteractions(sessionId);
  assert.equal(ask?.node_id, node, JSON.stringify(ask));
  return ask;
}

async function waitDead(pid) {
  for (let i = 0; i < 1500 && alive(pid); i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(alive(pid), false, 'the host died');
}

test('a host killed at the review, then one killed after the commit before its receipt: the run resumes, nothing is done twice', async () => {
  const { dir, home, projectDir, first, env } = setup();
  const clients = [];
  const connect = async (extra = {}) => {
    const c = await Client.connect({ home, hostBin, hostEnv: { ...env, ...extra } });
    clients.push(c);
    return c;
  };
  try {
    let c = await connect();
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, checks: CHECKS }, sessionId: 's-impl', projectDir });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    const implement = await pending(c, 's-impl', 'implement');
    assert.match(implement.request.prompt, /1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
    // The scripted implementation: the fix, then the answer.
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await c.submitInteraction(implement, { status: 'done', summary: 'Return [] for empty input\n\nparse("") gave [0].', files: ['src/parse.js'] });
    let parked = await c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
    assert.equal(parked.status, 'waiting', JSON.stringify(parked));
    const review = await pending(c, 's-impl', 'review');
    assert.match(review.request.prompt, /-export const parse = \(text\) => text\.split/);

    // The first kill: the run waits for its review.
    const { pid: first_pid } = await c.status();
    process.kill(first_pid, 'SIGKILL');
    await waitDead(first_pid);
    await c.close().catch(() => {});

    // The second host dies just before it keeps the commit's receipt.
    c = await connect({ PIW_FAULT: 'before_op:effect_settled' });
    const { pid: second_pid } = await c.status();
    await c.submitInteraction(await pending(c, 's-impl', 'review'), { findings: [{ id: 'n1', severity: 'P3', title: 'naming', detail: 'text could be input' }] });
    await waitDead(second_pid);
    await c.close().catch(() => {});
    assert.equal(gitIn(projectDir, 'rev-list', '--count', 'HEAD'), '2', 'the commit was made before the host died');

    c = await connect();
    const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed');
    assert.deepEqual(run.result.checks, [{ id: 'test', outcome: 'succeeded' }]);
    assert.deepEqual(run.result.ci, { route: 'skipped', reason: 'no CI followed: gh (the GitHub CLI) is not installed' });
    assert.equal(run.result.findings[0].severity, 'P3', 'a P3 finding does not hold the change');
    // One commit, with the summary as its subject and the run's trailer.
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '1');
    const message = gitIn(projectDir, 'log', '-1', '--format=%B');
    assert.match(message, /^Return \[\] for empty input\n\nparse\(""\) gave \[0\]\.\n\nPlan: sha256:[0-9a-f]{64}\nPiw-Run: /);
    assert.equal(run.result.commit.sha, gitIn(projectDir, 'rev-parse', 'HEAD'));
    assert.equal(gitIn(projectDir, 'status', '--porcelain'), '');

    const { attempts, effects } = await c.runStatus(runId);
    const of = (node) => attempts.filter((a) => a.node_id === node);
    assert.equal(of('implement').length, 1, 'implemented once');
    assert.equal(of('verify').length, 1, 'checked once');
    assert.equal(of('review').length, 1, 'the review waited through the first kill and was answered once');
    assert.equal(of('commit').length, 2, JSON.stringify(of('commit')));
    assert.equal(of('commit').find((a) => a.status === 'ok').output.retried, true, 'the retry found the commit and made none');
    assert.deepEqual(
      effects.map((e) => [e.effect_type ?? JSON.stringify(e).match(/:(run_checks|git_commit):/)?.[1], e.state]).sort(),
      [['git_commit', 'applied'], ['run_checks', 'applied']],
    );
  } finally {
    for (const c of clients) {
      await c.request('host.stop').catch(() => {});
      await c.close().catch(() => {});
    }
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a step that runs out of time is asked again, twice at most; the third time ends the run blocked', async () => {
  const { dir, home, projectDir, env } = setup();
  const clock = join(dir, 'clock');
  let offset = 0;
  const advance = (ms) => {
    offset += ms;
    writeFileSync(`${clock}.tmp`, String(offset));
    renameSync(`${clock}.tmp`, clock);
  };
  const c = await Client.connect({ home, hostBin, hostEnv: { ...env, PIW_TEST_CLOCK: clock } });
  try {
    // A step's time runs while its session is there to present it: this client stands in for it.
    await c.subscribe({ sessionId: 's-late' });
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, checks: CHECKS }, sessionId: 's-late', projectDir });
    const seen = [];
    for (let round = 1; round <= 3; round++) {
      await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
      const ask = await pending(c, 's-late', 'implement');
      assert.ok(!seen.includes(ask.interaction_id), 'a new request each time');
      seen.push(ask.interaction_id);
      if (round > 1) assert.match(ask.request.prompt, /Your last attempt ran out of time: carry on from what is already in the working tree/);
      advance(2 * 60 * 60_000 + 1);
      await c.runStatus(runId); // wakes a host asleep until the old deadline
    }
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'blocked');
    assert.equal(run.result.stage, 'timeout');
    assert.equal(run.result.reason, 'implement ran out of time 3 times');
    const { attempts } = await c.runStatus(runId);
    assert.deepEqual(attempts.filter((a) => a.node_id === 'implement').map((a) => a.status), ['timed_out', 'timed_out', 'timed_out']);
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a review must say what became of each finding the last one left open; P0-P2 go back, P3 do not; reviews are bounded', async () => {
  const { dir, home, projectDir, env } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, checks: CHECKS, maxReviews: 2 }, sessionId: 's-rev', projectDir });
    const answer = async (node, output) => {
      await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
      const ask = await pending(c, 's-rev', node);
      const { submission_id } = await c.submitInteraction(ask, output);
      return { ask, verdict: await c.waitForSubmission(runId, submission_id, { timeoutMs: 30_000 }) };
    };
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await answer('implement', { status: 'done', summary: 'Guard the empty string' });
    const p2 = { id: 'blank', severity: 'P2', title: 'blank input', detail: 'parse(" ") untested' };
    assert.equal((await answer('review', { findings: [p2, { id: 'nit', severity: 'P3', title: 'naming', detail: 'input' }] })).verdict.state, 'accepted');
    const { ask } = await answer('implement', { status: 'done', summary: 'Test blank input' });
    assert.match(ask.request.prompt, /- blank \[P2\] blank input: parse\(" "\) untested/);
    assert.doesNotMatch(ask.request.prompt, /nit/);
    // Forgetting the open finding is refused, naming it; the model answers again.
    const forgot = await answer('review', { findings: [] });
    assert.equal(forgot.verdict.state, 'rejected');
    assert.match(forgot.verdict.error, /say what became of the open findings blank: list each again \(still open\) or name it in resolved/);
    assert.match(forgot.ask.request.prompt, /The last review left these open; .*\n- blank \[P2\]/);
    // Still open at the last review allowed: the run ends blocked with it.
    assert.equal((await c.submitInteraction(await pending(c, 's-rev', 'review'), { findings: [p2] })).state, 'validating');
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.deepEqual(
      { status: run.result.status, stage: run.result.stage, reason: run.result.reason, open: run.result.evidence.map((f) => f.id) },
      { status: 'blocked', stage: 'review', reason: '1 P0-P2 findings still open after 2 reviews', open: ['blank'] },
    );
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});

test("without a plan the model finds it in the documents given: an answer naming no file of the project, or no plan, is refused; the plan's text is carried out", async () => {
  const { dir, home, projectDir, first, env } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const refused = await c.waitForRun((await c.startRun(WORKFLOW, { input: { checks: CHECKS }, sessionId: 's-none', projectDir })).run_id, { timeoutMs: 30_000 });
    assert.equal(refused.status, 'failed');
    assert.match(refused.error, /invalid input: autoimplement input needs task \(the work whose chosen plan it finds and carries out\), or plan/);

    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', documents: [PLAN_DOC], checks: CHECKS }, sessionId: 's-find', projectDir });
    const answer = async (node, output) => {
      await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
      const ask = await pending(c, 's-find', node);
      const { submission_id } = await c.submitInteraction(ask, output);
      return { ask, verdict: await c.waitForSubmission(runId, submission_id, { timeoutMs: 30_000 }) };
    };
    const missing = await answer('findPlan', { route: 'found', plan: PLAN, documents: ['docs/plans/other.md'], reason: 'it is there' });
    assert.match(missing.ask.request.prompt, /Look in the documents the person points at: docs\/plans\/empty-input\.md\./);
    assert.equal(missing.verdict.state, 'rejected');
    assert.match(missing.verdict.error, /documents\[0\] "docs\/plans\/other\.md" is no file in the project/);
    const outside = await answer('findPlan', { route: 'found', plan: PLAN, documents: ['../outside.md'], reason: 'it is there' });
    assert.match(outside.verdict.error, /documents\[0\] must be a path inside the project/);
    const noSteps = await answer('findPlan', { route: 'found', plan: { summary: 'guard it' }, documents: [PLAN_DOC], reason: 'it is there' });
    assert.match(noSteps.verdict.error, /the plan needs steps/);
    const planText = readFileSync(join(projectDir, PLAN_DOC), 'utf8');
    assert.equal((await answer('findPlan', { route: 'found', plan: planText, documents: [PLAN_DOC], reason: 'the accepted plan' })).verdict.state, 'accepted');
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    const implemented = await answer('implement', { status: 'done', summary: 'Guard the empty string' });
    assert.match(implemented.ask.request.prompt, /1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
    assert.equal((await answer('review', { findings: [] })).verdict.state, 'accepted');
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed');
    assert.deepEqual(run.result.planSource, { from: 'found', documents: [PLAN_DOC], reason: 'the accepted plan' });
    assert.equal(run.result.planDigest, planDigest(planText.trim()));
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '1');
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});
