// The autoimplement built-in through the client, on a fixture git repository: a host killed
// while the run waits for its review and another killed just after the commit, before its
// receipt is kept (the run resumes from its durable boundary: nothing is implemented, checked
// or committed twice); and the timeout route on the host's test clock (a step that runs out of
// time is asked again, a bounded number of times, then the run ends blocked). `gh` is not on
// the PATH here: CI is skipped, and the result says why. Without a plan in the input: the
// model's answer of where the plan is written is checked before the run carries it out.
// Delivery, with a fake `gh` on the PATH whose every call is logged: a pull request opened once
// although the host died between its creation and the receipt; its review comments sent back and
// answered once; a failing check sent back; no merge unless asked; a host killed between the
// merge and its receipt (the merge happens once); a head that moved (no merge, blocked); a change
// spanning two repositories (a pull request each, merged one after the other).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { planDigest } from '../builtins/plan.mjs';
import { BUILTINS_DIR } from '../lib/workflow-names.js';
import { Client } from '../index.js';
import { CHECKS, FIX, fixtureRepo, ghLog, gitIn, PLAN, PLAN_DOC, toolsPath } from './fixture-repo.mjs';
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

const PASS = { name: 'test', state: 'SUCCESS', bucket: 'pass', link: 'https://example.invalid/ci/1' };
const LINT_FAIL = { name: 'lint', state: 'FAILURE', bucket: 'fail', link: 'https://example.invalid/ci/lint' };

/** `setup()` with a fake `gh` on the PATH answering from `state`. */
function setupGh(state) {
  const s = setup();
  const ghState = join(s.dir, 'gh.json');
  writeFileSync(ghState, JSON.stringify(state));
  return { ...s, ghState, env: { ...s.env, PATH: toolsPath(join(s.dir, 'gh'), { ghState }) } };
}
const ghState = (file) => JSON.parse(readFileSync(file, 'utf8'));
const callsOf = (file, ...head) => ghLog(file).filter((a) => head.every((h, i) => a[i] === h));

/** Resolves once `file` exists (a barrier the fake `gh` reached); only a hang reaches the deadline. */
async function reached(file) {
  for (let i = 0; i < 3000 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 20));
  assert.ok(existsSync(file), `${file} was reached`);
}

/**
 * Answers the run's steps until it ends or `stop()` says so: the n-th request of a node gets
 * `answers[node](n, ask)`; each must be accepted. Returns the prompts asked, by node.
 */
async function drive(c, runId, sessionId, answers, asked = {}, stop = () => false) {
  for (;;) {
    const run = await c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
    if (run.status !== 'waiting' || stop(asked)) return { run, asked };
    const [ask] = await c.listInteractions(sessionId);
    assert.ok(Object.hasOwn(answers, ask.node_id), `no answer for ${ask.node_id}`);
    (asked[ask.node_id] ??= []).push(ask.request.prompt);
    const { submission_id } = await c.submitInteraction(ask, answers[ask.node_id](asked[ask.node_id].length, ask));
    const verdict = await c.waitForSubmission(runId, submission_id, { timeoutMs: 60_000 });
    assert.equal(verdict.state, 'accepted', verdict.error);
  }
}

const fixed = (projectDir) => () => {
  writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
  return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
};

test('the pull request is opened once though the host died before its receipt; its comments go back and are answered once; a failing check goes back; no merge unless asked; one report', async () => {
  const { dir, home, projectDir, first, env, ghState: state } = setupGh({ barrier: 'pr create', checkRounds: [[LINT_FAIL], [PASS]] });
  const clients = [];
  const connect = async () => {
    const c = await Client.connect({ home, hostBin, hostEnv: env });
    clients.push(c);
    return c;
  };
  try {
    let c = await connect();
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, checks: CHECKS }, sessionId: 's-pr', projectDir });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await c.submitInteraction(await pending(c, 's-pr', 'implement'), { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
    await c.submitInteraction(await pending(c, 's-pr', 'review'), { findings: [] });

    // gh has opened the pull request; the host dies before the step's receipt is kept.
    await reached(`${state}.reached`);
    const { pid } = await c.status();
    process.kill(pid, 'SIGKILL');
    await waitDead(pid);
    await c.close().catch(() => {});
    // Meanwhile a reviewer comments on a line and on the conversation.
    const now = ghState(state);
    const [pr] = now.prs;
    pr.inline.push({ id: 501, user: { login: 'alice' }, body: 'Also cover parse(" ")?', path: 'src/parse.js', line: 1, html_url: `${pr.url}#discussion_r501` });
    pr.comments.push({ id: 'IC_1', author: { login: 'bob' }, body: 'Please mention the empty case in the docs.', url: `${pr.url}#issuecomment-1` });
    writeFileSync(state, JSON.stringify(now));
    writeFileSync(`${state}.release`, '');

    c = await connect();
    // The comments come back to the implementer; an answer that leaves one unanswered is refused.
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
    const { submission_id } = await c.submitInteraction(await pending(c, 's-pr', 'implement'), {
      status: 'done',
      summary: 'Cover blank input',
      replies: [{ id: 'c1', reply: 'Covered by a test now.' }],
    });
    const refused = await c.waitForSubmission(runId, submission_id, { timeoutMs: 30_000 });
    assert.equal(refused.state, 'rejected');
    assert.match(refused.error, /answer each review comment in replies: c2 \(what you changed for it, or why you did not\)/);
    const { run, asked } = await drive(c, runId, 's-pr', {
      implement: (n, ask) => {
        if (n === 1) {
          assert.match(ask.request.prompt, /- c1 by alice on https:\/\/example\.invalid\/project\/pull\/1 at src\/parse\.js:1: Also cover parse\(" "\)\?/);
          assert.match(ask.request.prompt, /- c2 by bob on .*: Please mention the empty case in the docs\./);
          writeFileSync(join(projectDir, 'src', 'blank.test.js'), 'import assert from "node:assert"; import test from "node:test"; import { parse } from "./parse.js";\ntest("blank", () => assert.deepEqual(parse(" "), [0]));\n');
          return { status: 'done', summary: 'Cover blank input', replies: [{ id: 'c1', reply: 'Covered by a test now.' }, { id: 'c2', reply: 'The docs say so already.' }] };
        }
        assert.match(ask.request.prompt, /The pull request's CI failed:\n- https:\/\/example\.invalid\/project\/pull\/1: lint \(https:\/\/example\.invalid\/ci\/lint\)/);
        assert.doesNotMatch(ask.request.prompt, /c1 by alice/, 'answered comments are not asked again');
        writeFileSync(join(projectDir, 'src', 'parse.js'), FIX.replaceAll('text', 'input'));
        return { status: 'done', summary: 'Satisfy lint' };
      },
      review: () => ({ findings: [] }),
    });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
    assert.equal(asked.implement.length, 2);

    // One pull request, found again by the retry rather than opened again.
    assert.equal(callsOf(state, 'pr', 'create').length, 1, JSON.stringify(ghLog(state)));
    const after = ghState(state);
    assert.equal(after.prs.length, 1);
    const opened = after.prs[0];
    assert.equal(opened.baseRefName, 'main');
    assert.match(opened.headRefName, /^piw\/autoimplement-/);
    assert.equal(opened.title, PLAN.summary);
    assert.match(opened.body, /1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
    assert.match(opened.body, /`test`: succeeded/);
    const { attempts } = await c.runStatus(runId);
    const publishes = attempts.filter((a) => a.node_id === 'publish');
    assert.equal(publishes.filter((a) => a.output?.retried).length, 1, JSON.stringify(publishes));

    // Each comment answered once, in its thread or on the conversation.
    const answers = callsOf(state, 'api', '--method', 'POST');
    assert.deepEqual(answers.map((a) => a[3]), ['repos/{owner}/{repo}/pulls/1/comments/501/replies']);
    assert.match(opened.inline.find((x) => x.in_reply_to_id === 501).body, /piw:answered inline:501 -->\nCovered by a test now\./);
    const conversation = opened.comments.filter((x) => x.author.login === 'piw-bot').map((x) => x.body);
    assert.equal(conversation.length, 2, 'one answer and one report');
    assert.match(conversation[0], /piw:answered comment:IC_1 -->\nThe docs say so already\./);
    assert.match(conversation[1], /<!-- piw:report /);

    // CI read twice (failed, then passed); nothing merged.
    assert.equal(callsOf(state, 'pr', 'checks').filter((a) => a.includes('--json')).length, 2);
    assert.equal(callsOf(state, 'pr', 'merge').length, 0, 'merge was not asked for');
    assert.equal(opened.state, 'OPEN');
    assert.equal(gitIn(projectDir, 'rev-parse', `origin/${opened.headRefName}`), gitIn(projectDir, 'rev-parse', 'HEAD'));
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '3', 'a commit per round');
    assert.deepEqual(run.result.ci, { route: 'green', reason: 'every check passed', relatedFailures: [], unrelatedFailures: [], pr: opened.url, checks: [{ name: 'test', bucket: 'pass' }] });
    const report = `${opened.url}#issuecomment-${opened.comments.find((x) => x.body.includes('piw:report')).url.split('-').pop()}`;
    assert.deepEqual(run.result.delivery, {
      status: 'completed',
      merged: false,
      pr: opened.url,
      reportComment: report,
      reason: '1 pull request ready: merge was not asked for',
      repositories: [{ repository: projectDir, pr: opened.url, merged: false, reportComment: report, reason: 'left ready: the input did not ask to merge (merge: true)' }],
    });
  } finally {
    writeFileSync(`${state}.release`, '');
    for (const c of clients) {
      await c.request('host.stop').catch(() => {});
      await c.close().catch(() => {});
    }
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the host killed between the merge and its receipt: the next host reads the pull request merged and merges nothing again', async () => {
  const { dir, home, projectDir, env, ghState: state } = setupGh({ barrier: 'pr merge', checks: [PASS] });
  const clients = [];
  const connect = async () => {
    const c = await Client.connect({ home, hostBin, hostEnv: env });
    clients.push(c);
    return c;
  };
  try {
    let c = await connect();
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, checks: CHECKS, merge: true }, sessionId: 's-merge', projectDir });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await c.submitInteraction(await pending(c, 's-merge', 'implement'), { status: 'done', summary: 'Return [] for empty input' });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 60_000 });
    await c.submitInteraction(await pending(c, 's-merge', 'review'), { findings: [] });
    // GitHub merged; the host dies before the step's receipt is kept.
    await reached(`${state}.reached`);
    const { pid } = await c.status();
    process.kill(pid, 'SIGKILL');
    await waitDead(pid);
    await c.close().catch(() => {});
    writeFileSync(`${state}.release`, '');

    c = await connect();
    const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
    const head = gitIn(projectDir, 'rev-parse', 'HEAD');
    const merges = callsOf(state, 'pr', 'merge');
    assert.deepEqual(merges, [['pr', 'merge', 'https://example.invalid/project/pull/1', '--squash', '--match-head-commit', head]], 'merged once, at the head CI passed');
    const [pr] = ghState(state).prs;
    assert.equal(pr.state, 'MERGED');
    assert.equal(gitIn(`${projectDir}.git`, 'rev-parse', 'main'), head);
    assert.equal(run.result.delivery.merged, true);
    assert.equal(run.result.delivery.repositories[0].reason, `merged at ${head.slice(0, 12)}`, 'the retry found it merged');
    assert.equal(pr.comments.filter((x) => x.body.includes('piw:report')).length, 1, 'one report');
    const { attempts, effects } = await c.runStatus(runId);
    const mergeSteps = attempts.filter((a) => a.node_id === 'merge');
    assert.equal(mergeSteps.length, 2, 'the merge step ran again after the crash');
    assert.equal(mergeSteps.find((a) => a.status === 'ok').output.retried, true, 'it knew it was a retry');
    assert.ok(effects.some((e) => JSON.stringify(e).includes(':github_merge:')), JSON.stringify(effects));
  } finally {
    writeFileSync(`${state}.release`, '');
    for (const c of clients) {
      await c.request('host.stop').catch(() => {});
      await c.close().catch(() => {});
    }
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});

for (const [when, expected] of [
  ['checks', /^the head of https:\/\/example\.invalid\/project\/pull\/1 moved from [0-9a-f]{12} to [0-9a-f]{12} after its CI was watched: not merged$/],
  ['merge', /^the head of https:\/\/example\.invalid\/project\/pull\/1 moved from [0-9a-f]{12} to [0-9a-f]{12} while merging: GitHub refused the merge$/],
]) {
  test(`a head that moved ${when === 'checks' ? 'after CI was read' : 'while GitHub merges'}: nothing merged, the run ends blocked saying so`, async () => {
    const { dir, home, projectDir, env, ghState: state } = setupGh({ moveHeadOn: when, checks: [PASS] });
    const c = await Client.connect({ home, hostBin, hostEnv: env });
    try {
      const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, checks: CHECKS, merge: true }, sessionId: 's-moved', projectDir });
      const { run } = await drive(c, runId, 's-moved', { implement: fixed(projectDir), review: () => ({ findings: [] }) });
      assert.equal(run.status, 'completed', run.error ?? run.review_reason);
      const head = gitIn(projectDir, 'rev-parse', 'HEAD');
      const [pr] = ghState(state).prs;
      assert.equal(pr.state, 'OPEN', 'not merged');
      assert.notEqual(gitIn(`${projectDir}.git`, 'rev-parse', pr.headRefName), head, 'someone else pushed');
      assert.equal(run.result.status, 'blocked');
      assert.equal(run.result.stage, 'merge');
      assert.match(run.result.reason, expected);
      assert.equal(run.result.evidence.expected, head);
      assert.equal(callsOf(state, 'pr', 'merge').length, when === 'checks' ? 0 : 1, 'a head seen moved is not merged at all');
      assert.equal(pr.comments.length, 0, 'no report');
    } finally {
      await c.request('host.stop').catch(() => {});
      await c.close().catch(() => {});
      await killInstallation(home);
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

test('a change spanning two repositories, the first given as repository: a pull request each, both watched, merged one after the other', async () => {
  const { dir, home, projectDir, env, ghState: state } = setupGh({ checks: [PASS] });
  const otherDir = join(dir, 'other');
  mkdirSync(otherDir);
  fixtureRepo(otherDir);
  const workspace = join(dir, 'workspace');
  mkdirSync(workspace);
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    for (const [input, error] of [
      [{ repository: 'project' }, /autoimplement input repository must be an absolute path to a git work tree, got "project"/],
      [{ repository: workspace }, /autoimplement input repository ".*workspace" is not a git work tree: give the absolute path of the repository's checkout/],
      [{ repository: projectDir, merge: 'yes' }, /autoimplement input merge must be true \(merge each pull request once its CI is green\) or false \(leave it ready\), got "yes"/],
    ]) {
      const refused = await c.waitForRun((await c.startRun(WORKFLOW, { input: { task: 't', plan: PLAN, ...input }, sessionId: 's-bad', projectDir: workspace })).run_id, { timeoutMs: 30_000 });
      assert.equal(refused.status, 'failed');
      assert.match(refused.error, error);
    }

    const { run_id: runId } = await c.startRun(WORKFLOW, {
      input: { task: 'empty input', plan: PLAN, checks: CHECKS, repository: projectDir, merge: true },
      sessionId: 's-two',
      projectDir: workspace,
    });
    const { run, asked } = await drive(c, runId, 's-two', {
      implement: () => {
        writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
        writeFileSync(join(otherDir, 'src', 'parse.js'), FIX);
        return { status: 'done', summary: 'Return [] for empty input', repositories: [otherDir, projectDir] };
      },
      review: () => ({ findings: [] }),
    });
    assert.match(asked.implement[0], new RegExp(`Work in the repository ${projectDir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.`));
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
    const prs = ghState(state).prs;
    assert.deepEqual(
      prs.map((p) => [p.url, p.origin, p.state]),
      [
        ['https://example.invalid/project/pull/1', `${projectDir}.git`, 'MERGED'],
        ['https://example.invalid/other/pull/2', `${otherDir}.git`, 'MERGED'],
      ],
    );
    assert.equal(callsOf(state, 'pr', 'create').length, 2);
    assert.deepEqual(callsOf(state, 'pr', 'checks').filter((a) => a.includes('--watch')).map((a) => a[2]).sort(), prs.map((p) => p.url).sort(), 'both watched');
    assert.deepEqual(callsOf(state, 'pr', 'merge').map((a) => a[2]), prs.map((p) => p.url), 'merged in order');
    for (const d of [projectDir, otherDir]) assert.equal(gitIn(`${d}.git`, 'rev-parse', 'main'), gitIn(d, 'rev-parse', 'HEAD'));
    const { delivery, ci } = run.result;
    assert.deepEqual(
      delivery.repositories.map((r) => [r.repository, r.pr, r.merged]),
      [
        [projectDir, prs[0].url, true],
        [otherDir, prs[1].url, true],
      ],
    );
    assert.deepEqual({ merged: delivery.merged, pr: delivery.pr, reason: delivery.reason }, { merged: true, pr: prs[0].url, reason: 'merged 2 pull requests after CI passed' });
    assert.equal(ci.route, 'green');
    assert.deepEqual(ci.targets.map((t) => t.pr), prs.map((p) => p.url));
    assert.deepEqual(run.result.checks, [{ id: 'test', outcome: 'succeeded' }], 'the checks ran in the repository');
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
    rmSync(dir, { recursive: true, force: true });
  }
});
