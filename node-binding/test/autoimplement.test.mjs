// The autoimplement built-in through the client, on a fixture git repository, with a stand-in
// for Pi as its independent reviewer (`PIW_PI`: a script that logs what it was started with and
// answers as the test says): a P2-only review addressed once and checked without another
// review, then a host killed after those checks ran, before their receipt (the run resumes:
// nothing is implemented, checked or committed twice); P1 findings back to fixing; a reviewer
// that dies, retried then blocking; the timeout fallback on the host's test clock (a step that
// runs out of time gets a bounded decision of where to go); a re-plan through plan-change when
// the work shows the plan does not hold; a found plan documented through autodoc; the input
// fields of the review and planning half. `gh` is not on the PATH in these: CI is skipped, and
// the result says why.
// Delivery, with a fake `gh` on the PATH whose every call is logged: a pull request opened once
// although the host died between its creation and the receipt; its review comments sent back and
// answered once; a failing check sent back; no merge unless asked; a host killed between the
// merge and its receipt (the merge happens once); a head that moved (no merge, blocked); a change
// spanning two repositories (a pull request each, merged one after the other).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';

import { readReviewInput, REVIEWER_SYSTEM_PROMPT, reviewerModel } from '../builtins/autoimplement/review.mjs';
import { planDigest } from '../builtins/plan.mjs';
import { BUILTINS_DIR } from '../lib/workflow-names.js';
import { Client } from '../index.js';
import { CHECKS, fakeReviewer, FIX, fixtureRepo, ghLog, gitIn, PLAN, PLAN_DOC, toolsPath } from './fixture-repo.mjs';
import { alive, hostBin, killInstallation, tempDir } from './helpers.mjs';

const WORKFLOW = join(BUILTINS_DIR, 'autoimplement.workflow.mjs');
/** The plan given, said to be documented already (no autodoc step). */
const DOCUMENTED = { status: 'current', planDigest: planDigest(PLAN), documents: [PLAN_DOC] };
const CLEAN = { review: { p0: [], p1: [], p2: [], lower: [], reason: 'does what the plan says' } };

// The fixture's check is `node --test`: under this test runner's variable it would report to a
// parent that is not there and exit 0 whatever its tests say. The hosts inherit this process's
// environment. (Removed once the tests are declared: the runner reads it when the first is.)
before(() => {
  delete process.env.NODE_TEST_CONTEXT;
});

/**
 * A fixture project, a PIW_HOME, the reviewer stand-in and the host environment (PATH: git and
 * node only; Pi's default model in its settings, as the reviewer finds it).
 */
function setup() {
  const dir = tempDir('piw-autoimpl-');
  const projectDir = join(dir, 'project');
  mkdirSync(projectDir);
  const first = fixtureRepo(projectDir);
  const agentDir = join(dir, 'agent');
  mkdirSync(agentDir);
  writeFileSync(join(agentDir, 'settings.json'), JSON.stringify({ defaultProvider: 'mock', defaultModel: 'mock-model' }));
  const reviewer = fakeReviewer(dir);
  const env = { HOME: dir, PIW_KILL_GRACE_MS: '300', PATH: toolsPath(dir), PIW_PI: reviewer.file, PI_CODING_AGENT_DIR: agentDir };
  return { dir, home: join(dir, 'home'), projectDir, first, env, reviewer };
}

/** Answers the steps of run `runId` one by one: `answer(node, output)` -> `{ ask, verdict }`. */
function answerer(c, runId, sessionId) {
  return async (node, output) => {
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    const ask = await pending(c, sessionId, node);
    const { submission_id } = await c.submitInteraction(ask, output);
    return { ask, verdict: await c.waitForSubmission(runId, submission_id, { timeoutMs: 30_000 }) };
  };
}

async function cleanup(clients, home, dir) {
  for (const c of clients) {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
  }
  await killInstallation(home);
  rmSync(dir, { recursive: true, force: true });
}

async function pending(client, sessionId, node) {
  const [ask] = await client.listInteractions(sessionId);
  assert.equal(ask?.node_id, node, JSON.stringify(ask));
  return ask;
}

/** Waits (bounded) until the session's open step is `node`'s. */
async function stepAt(client, sessionId, node) {
  for (let i = 0; i < 3000; i++) {
    const [ask] = await client.listInteractions(sessionId);
    if (ask?.node_id === node) return ask;
    await new Promise((r) => setTimeout(r, 20));
  }
  return pending(client, sessionId, node);
}

async function waitDead(pid) {
  for (let i = 0; i < 1500 && alive(pid); i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(alive(pid), false, 'the host died');
}

test('a P2-only review is addressed once and checked, not reviewed again; a host killed after those checks ran, before their receipt: nothing is done twice', async () => {
  const { dir, home, projectDir, first, env, reviewer } = setup();
  const clients = [];
  const connect = async (extra = {}) => {
    const c = await Client.connect({ home, hostBin, hostEnv: { ...env, ...extra } });
    clients.push(c);
    return c;
  };
  try {
    reviewer.setAnswers([{ review: { p0: [], p1: [], p2: [{ kind: 'implementation', summary: 'parse(" ") is untested', file: 'src/parse.test.js' }], lower: [{ kind: 'implementation', summary: 'text could be input' }], reason: 'fine but for a missing test' } }]);
    let c = await connect();
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS }, sessionId: 's-impl', projectDir });
    const answer = answerer(c, runId, 's-impl');
    const implement = await answer('implement', (writeFileSync(join(projectDir, 'src', 'parse.js'), FIX), { status: 'done', summary: 'Return [] for empty input\n\nparse("") gave [0].', files: ['src/parse.js'] }));
    assert.match(implement.ask.request.prompt, /1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
    // The reviewer ran (one process), then the P2 finding goes to addressP2.
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    const p2 = await pending(c, 's-impl', 'addressP2');
    assert.match(p2.request.prompt, /- \(implementation\) parse\(" "\) is untested \(src\/parse\.test\.js\)/);
    assert.doesNotMatch(p2.request.prompt, /text could be input/, 'lower findings are not sent back');
    const [call] = reviewer.calls();
    assert.match(call.prompt, /-export const parse = \(text\) => text\.split/);

    // The first host is killed while the run waits; the second dies just before it keeps the
    // receipt of the checks that follow the P2 work (the first effect it settles).
    const { pid: firstPid } = await c.status();
    process.kill(firstPid, 'SIGKILL');
    await waitDead(firstPid);
    await c.close().catch(() => {});
    c = await connect({ PIW_FAULT: 'before_op:effect_settled' });
    const { pid } = await c.status();
    await c.submitInteraction(await pending(c, 's-impl', 'addressP2'), { addressed: [], skipped: [{ finding: 'parse(" ") is untested', reason: 'blank input is out of the plan' }] });
    await waitDead(pid);
    await c.close().catch(() => {});
    assert.equal(gitIn(projectDir, 'rev-list', '--count', 'HEAD'), '1', 'the host died before the commit');

    c = await connect();
    const run = await c.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed');
    assert.deepEqual(run.result.checks, [{ id: 'test', outcome: 'succeeded' }]);
    assert.deepEqual(run.result.ci, { route: 'skipped', reason: 'no CI followed: gh (the GitHub CLI) is not installed' });
    assert.deepEqual(run.result.plan, PLAN);
    assert.equal(run.result.implementation.summary, 'Return [] for empty input\n\nparse("") gave [0].');
    assert.deepEqual(run.result.verification, { passed: true, checks: [{ id: 'test', outcome: 'succeeded', exitCode: 0 }] });
    assert.deepEqual(
      run.result.reviewRounds.map((r) => [r.round, r.route, r.p2.length, r.lower.length, r.reviewer.tools.join(',')]),
      [[1, 'p2', 1, 1, 'read,grep,find,ls']],
    );
    assert.deepEqual(run.result.p2.skipped, [{ finding: 'parse(" ") is untested', reason: 'blank input is out of the plan' }]);
    assert.equal(reviewer.calls().length, 1, 'not reviewed again for the P2 work');
    // One commit, with the summary as its subject and the run's trailer.
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '1');
    assert.match(gitIn(projectDir, 'log', '-1', '--format=%B'), /^Return \[\] for empty input\n\nparse\(""\) gave \[0\]\.\n\nPlan: sha256:[0-9a-f]{64}\nPiw-Run: /);
    assert.equal(run.result.commit.sha, gitIn(projectDir, 'rev-parse', 'HEAD'));
    assert.equal(gitIn(projectDir, 'status', '--porcelain'), '');

    const { attempts, effects } = await c.runStatus(runId);
    const of = (node) => attempts.filter((a) => a.node_id === node);
    assert.equal(of('implement').length, 1, 'implemented once');
    assert.equal(of('verify').filter((a) => a.status === 'ok').length, 2, 'checked after the implementation and after the P2 work (that once more after the crash)');
    assert.equal(of('addressP2').length, 1, 'P2 addressed once');
    assert.equal(of('review').length, 1, 'reviewed once');
    assert.equal(of('commit').length, 1, JSON.stringify(of('commit')));
    assert.deepEqual(
      effects.map((e) => [JSON.stringify(e).match(/:(run_checks|git_commit|pi_review):/)?.[1], e.state]).filter(([kind]) => kind).sort(),
      [['git_commit', 'applied'], ['pi_review', 'applied'], ['run_checks', 'applied'], ['run_checks', 'applied']],
    );
  } finally {
    await cleanup(clients, home, dir);
  }
});

test('the reviewer is a separate read-only Pi: its P1 findings go back to fixing, a clean review lets the change through; constraints reach every prompt', async () => {
  const { dir, home, projectDir, first, env, reviewer } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    reviewer.setAnswers([
      { text: `Here is the review:\n\`\`\`json\n${JSON.stringify({ p0: [], p1: [{ kind: 'implementation', summary: 'parse(" ") gives [0]', file: 'src/parse.js' }], p2: [], lower: [], reason: 'one bug' })}\n\`\`\`` },
      CLEAN,
    ]);
    const input = { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, scope: 'src/ only', constraints: ['Keep parse synchronous'], concurrency: { reviewer: 1, verification: 1 } };
    const { run_id: runId } = await c.startRun(WORKFLOW, { input, sessionId: 's-p1', projectDir });
    const answer = answerer(c, runId, 's-p1');
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    const firstRound = await answer('implement', { status: 'done', summary: 'Guard the empty string' });
    assert.match(firstRound.ask.request.prompt, /Authorized scope: src\/ only\nConstraints \(keep every one\):\n- Keep parse synchronous/);
    const second = await answer('implement', { status: 'done', summary: 'Guard blank input too' });
    assert.match(second.ask.request.prompt, /Round 2: the work is not done yet\.\nThe independent review found .*\n- \[P1\] parse\(" "\) gives \[0\] \(src\/parse\.js\)/);
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed');
    assert.deepEqual(run.result.reviewRounds.map((r) => r.route), ['critical', 'clean']);
    const calls = reviewer.calls();
    assert.equal(calls.length, 2);
    for (const { args, prompt } of calls) {
      // A review of its own: no session, only the read tools (last, so nothing widens them), its own system prompt.
      assert.deepEqual(args.slice(0, 2), ['--print', '--no-session']);
      assert.deepEqual(args.slice(-3, -1), ['--tools', 'read,grep,find,ls']);
      assert.equal(args[args.indexOf('--system-prompt') + 1], REVIEWER_SYSTEM_PROMPT);
      assert.ok(!args.includes('--provider'), "Pi's default model: Pi chooses it, as a bridge's Pi does");
      assert.match(prompt, /Constraints \(keep every one\):\n- Keep parse synchronous/);
      assert.match(prompt, new RegExp(`## The change: ${projectDir.replaceAll('/', '\\/')} against ${first}`));
    }
    assert.match(calls[1].prompt, /The last review found these P0\/P1 problems; check whether each is fixed:\n- \[P1\] parse\(" "\) gives \[0\]/);
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '1', 'one commit, after the clean review');
  } finally {
    await cleanup([c], home, dir);
  }
});

test('a reviewer that dies or answers garbage is retried, twice at most, then the run ends blocked saying why: never a silent pass', async () => {
  const { dir, home, projectDir, first, env, reviewer } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    reviewer.setAnswers([{ exit: 1 }, { text: 'looks good to me' }, { exit: 3 }, CLEAN]);
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS }, sessionId: 's-dead', projectDir });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await answerer(c, runId, 's-dead')('implement', { status: 'done', summary: 'Guard the empty string' });
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'blocked');
    assert.equal(run.result.stage, 'review');
    assert.match(run.result.reason, /^the independent reviewer gave no review: no review after 3 reviewer starts: the reviewer's Pi \(PIW_PI=.*fake-pi\.mjs\) exited with 3: fake reviewer: crashed$/);
    const [{ failedAttempts }] = run.result.evidence;
    assert.equal(failedAttempts.length, 3);
    assert.match(failedAttempts[0], /fake reviewer: crashed/);
    assert.match(failedAttempts[1], /the reviewer answered without the review asked for/);
    assert.equal(reviewer.calls().length, 3, 'three starts, the fourth answer never asked for');
    assert.equal(gitIn(projectDir, 'rev-parse', 'HEAD'), first, 'nothing committed');
  } finally {
    await cleanup([c], home, dir);
  }
});

test('a step that runs out of time gets a fallback decision, three at most; the route must fit the step; the fourth timeout ends the run blocked', async () => {
  const { dir, home, projectDir, env } = setup();
  const clock = join(dir, 'clock');
  let offset = 0;
  const advance = (ms) => {
    offset += ms;
    writeFileSync(`${clock}.tmp`, String(offset));
    renameSync(`${clock}.tmp`, clock);
  };
  const c = await Client.connect({ home, hostBin, hostEnv: { ...env, PIW_TEST_CLOCK: clock } });
  // A step's time runs while its session is there to present it: a client that follows the
  // session stands in for it. The subscription is kept referenced: one the garbage collector
  // takes is ended on the host, and the session goes away with it.
  const presence = await Client.connect({ home, hostBin });
  let following = null;
  try {
    // findPlan (30 minutes) is the step that runs out of time.
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', checks: CHECKS }, sessionId: 's-late', projectDir });
    const answer = answerer(c, runId, 's-late');
    for (let round = 1; round <= 4; round++) {
      const ask = await stepAt(c, 's-late', 'findPlan');
      following ??= await presence.subscribe({ sessionId: 's-late' });
      // Its time runs once it is held (presented to the session): only then is the clock moved.
      const held = async () => (await c.runStatus(runId)).attempts.some((t) => t.attempt_id === ask.attempt_id && t.deadline_at !== null);
      for (let i = 0; i < 3000 && !(await held()); i++) await new Promise((r) => setTimeout(r, 20));
      assert.ok(await held(), `findPlan (round ${round}) presented to the session`);
      // Twice its bound: its deadline counts only held time, so a hold that came a little after
      // the request moved it on; the next step opens after this, with a deadline of its own.
      advance(2 * 30 * 60_000);
      await c.runStatus(runId); // wakes a host asleep until the old deadline
      if (round === 4) break;
      await stepAt(c, 's-late', 'timeoutFallback');
      const verify = await answer('timeoutFallback', { route: 'verify', reason: 'it looks done', evidence: ['git diff is empty'] });
      assert.match(verify.ask.request.prompt, new RegExp(`The step findPlan ran out of time .*; fallback ${round} of 3\\.`));
      assert.equal(verify.verdict.state, 'rejected');
      assert.match(verify.verdict.error, /route after findPlan ran out of time must be one of retry, blocked/);
      assert.equal((await answer('timeoutFallback', { route: 'retry', reason: 'nothing found yet', evidence: ['git status is clean'] })).verdict.state, 'accepted');
    }
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'blocked');
    assert.equal(run.result.stage, 'timeout');
    assert.equal(run.result.reason, 'findPlan ran out of time after 3 timeout fallbacks');
    const { attempts } = await c.runStatus(runId);
    assert.deepEqual(attempts.filter((a) => a.node_id === 'findPlan').map((a) => a.status), ['timed_out', 'timed_out', 'timed_out', 'timed_out']);
    assert.equal(attempts.filter((a) => a.node_id === 'timeoutFallback' && a.status === 'ok').length, 3);
  } finally {
    await following?.close().catch(() => {});
    await presence.close().catch(() => {});
    await cleanup([c], home, dir);
  }
});

test('work that shows the plan does not hold is re-planned through plan-change (autoplan, autodoc, approval) and the new plan carried out', async () => {
  const { dir, home, projectDir, first, env } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const input = { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, constraints: ['No new dependencies'], approval: { mode: 'skip' } };
    const { run_id: runId } = await c.startRun(WORKFLOW, { input, sessionId: 's-replan', projectDir });
    const answer = answerer(c, runId, 's-replan');
    await answer('implement', { status: 'issue', issueKind: 'design', summary: 'the plan guards the wrong function', evidence: 'parse is called through split(); the guard belongs there' });
    // plan-change, with the evidence and the old plan: autoplan's steps, then autodoc's.
    const frame = await answer('redesign.plan.frame', { problem: 'guard empty input', success: ['parse("") is []'], inScope: ['src'], outOfScope: [] });
    assert.match(frame.ask.request.prompt, /No new dependencies/);
    assert.match(frame.ask.request.prompt, /A plan made before .*Return an empty list for empty input/);
    await answer('redesign.plan.options', { options: [{ id: 'split', title: 'Guard split', approach: 'guard in split', tradeoffs: ['small'] }, { id: 'parse', title: 'Guard parse', approach: 'as before', tradeoffs: ['wrong place'] }] });
    await answer('redesign.plan.ideal', { ideal: 'empty input handled where the text is split', beyondReach: [], worth: ['one place'] });
    await answer('redesign.plan.choose', { status: 'ready', chosen: 'split', why: 'the evidence', againstIdeal: 'it is the ideal here', leftOut: [], rejected: [{ id: 'parse', reason: 'wrong place' }] });
    const newPlan = { summary: 'Guard split for empty input', steps: [{ title: 'Guard split', detail: 'Return [] before splitting an empty text', files: ['src/parse.js'] }], checks: ['node --test'], risks: [] };
    await answer('redesign.plan.plan', newPlan);
    const [doc] = await c.listInteractions('s-replan').then(async () => {
      await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
      return c.listInteractions('s-replan');
    });
    assert.match(doc.node_id, /^redesign\.doc/);
    await c.waitForSubmission(runId, (await c.submitInteraction(doc, { route: 'current', files: [PLAN_DOC], reason: 'the doc is rewritten later' })).submission_id, { timeoutMs: 30_000 });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    const again = await answer('implement', { status: 'done', summary: 'Guard split for empty input' });
    assert.match(again.ask.request.prompt, /1\. Guard split: Return \[\] before splitting an empty text/);
    assert.match(again.ask.request.prompt, /The plan was changed \(revision 1\) because of: .*the guard belongs there/);
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
    assert.equal(run.result.plan.summary, 'Guard split for empty input');
    assert.equal(run.result.planSource.from, 'replanned');
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '1');
  } finally {
    await cleanup([c], home, dir);
  }
});

test('the review and planning inputs: concurrency, approval, documentation and constraints are read with their defaults, or refused saying what to use', async () => {
  const read = (extra) => readReviewInput({ task: 't', ...extra });
  assert.deepEqual(read({}), { constraints: [], approval: { mode: 'auto', audience: 'operator', timeoutMinutes: 10, maxReplans: 3 }, concurrency: { reviewer: 4, ciWatch: 4, verification: 2 } });
  assert.deepEqual(read({ concurrency: { reviewer: 2 } }).concurrency, { reviewer: 2, ciWatch: 4, verification: 2 });
  assert.throws(() => read({ concurrency: 3 }), /concurrency must be an object \{ reviewer, ciWatch, verification \}: for 3 checks at once, give \{ "verification": 3 \}/);
  assert.throws(() => read({ concurrency: { reviewer: 9 } }), /concurrency\.reviewer must be an integer from 1 to 8/);
  assert.throws(() => read({ concurrency: { checks: 1 } }), /concurrency\.checks is not supported \(it takes reviewer, ciWatch, verification\)/);
  assert.deepEqual(read({ approval: { mode: 'required', audience: 'lead' } }).approval, { mode: 'required', audience: 'lead', maxReplans: 3 });
  assert.throws(() => read({ approval: { mode: 'skip', timeoutMinutes: 5 } }), /autoimplement approval timeoutMinutes applies only to mode "auto"/);
  assert.throws(() => read({ approval: { mode: 'later' } }), /autoimplement approval mode must be one of/);
  assert.throws(() => read({ constraints: 'one' }), /constraints must be an array/);
  assert.deepEqual(read({ plan: PLAN, documentation: DOCUMENTED }).documentation, DOCUMENTED);
  assert.throws(() => read({ documentation: DOCUMENTED }), /documentation needs plan/);
  assert.throws(() => read({ plan: PLAN, documentation: { ...DOCUMENTED, planDigest: 'sha256:0' } }), /documentation\.planDigest sha256:0 is not the given plan's digest/);
  assert.throws(() => read({ plan: PLAN, documentation: { ...DOCUMENTED, status: 'stale' } }), /documentation\.status must be "current" \(leave documentation out to have the plan documented\)/);

  // The reviewer's model, found as a detached run's bridge finds its own: the run's
  // piw_detached, the host's PIW_DETACHED_*, Pi's default; none: null (the review says so).
  const agentDir = tempDir('piw-agent-');
  const named = read({ piw_detached: { provider: 'p', model: 'm', pi_args: ['--offline'] } });
  assert.deepEqual(reviewerModel(named, { PI_CODING_AGENT_DIR: agentDir, PIW_DETACHED_PROVIDER: 'hp', PIW_DETACHED_MODEL: 'hm' }), { provider: 'p', model: 'm', piArgs: ['--offline'], source: 'named' });
  assert.deepEqual(reviewerModel(read({}), { PI_CODING_AGENT_DIR: agentDir, PIW_DETACHED_PROVIDER: 'hp', PIW_DETACHED_MODEL: 'hm', PIW_DETACHED_PI_ARGS: '--a --b' }), { provider: 'hp', model: 'hm', piArgs: ['--a', '--b'], source: 'named' });
  assert.equal(reviewerModel(read({}), { PI_CODING_AGENT_DIR: agentDir }), null);
  writeFileSync(join(agentDir, 'settings.json'), JSON.stringify({ defaultProvider: 'dp', defaultModel: 'dm' }));
  assert.deepEqual(reviewerModel(read({}), { PI_CODING_AGENT_DIR: agentDir }), { provider: 'dp', model: 'dm', piArgs: [], source: 'pi-settings' });
  rmSync(agentDir, { recursive: true, force: true });

  // Through a run: refused at the start, with the same words.
  const { dir, home, projectDir, env } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const refused = await c.waitForRun((await c.startRun(WORKFLOW, { input: { task: 'x', concurrency: 2 }, sessionId: 's-in', projectDir })).run_id, { timeoutMs: 30_000 });
    assert.equal(refused.status, 'failed');
    assert.match(refused.error, /invalid input: autoimplement concurrency must be an object/);
  } finally {
    await cleanup([c], home, dir);
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
    const answer = answerer(c, runId, 's-find');
    const missing = await answer('findPlan', { route: 'found', plan: PLAN, documents: ['docs/plans/other.md'], reason: 'it is there' });
    assert.match(missing.ask.request.prompt, /Look in the documents the person points at: docs\/plans\/empty-input\.md\./);
    assert.equal(missing.verdict.state, 'rejected');
    assert.match(missing.verdict.error, /documents\[0\] "docs\/plans\/other\.md" is no file in the project/);
    const outside = await answer('findPlan', { route: 'found', plan: PLAN, documents: ['../outside.md'], reason: 'it is there' });
    assert.match(outside.verdict.error, /documents\[0\] must be a path inside the project/);
    const noSteps = await answer('findPlan', { route: 'found', plan: { summary: 'guard it' }, documents: [PLAN_DOC], reason: 'it is there' });
    assert.match(noSteps.verdict.error, /the plan needs steps/);
    const badDoc = await answer('findPlan', { route: 'found', plan: PLAN, documentation: 'old', documents: [PLAN_DOC], reason: 'it is there' });
    assert.match(badDoc.verdict.error, /documentation must be "current", "missing" or "stale"/);
    const planText = readFileSync(join(projectDir, PLAN_DOC), 'utf8');
    assert.equal((await answer('findPlan', { route: 'found', plan: planText, documentation: 'current', documents: [PLAN_DOC], reason: 'the accepted plan' })).verdict.state, 'accepted');
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    const implemented = await answer('implement', { status: 'done', summary: 'Guard the empty string' });
    assert.match(implemented.ask.request.prompt, /1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed');
    assert.deepEqual(run.result.planSource, { from: 'found', documents: [PLAN_DOC], reason: 'the accepted plan' });
    assert.equal(run.result.planDigest, planDigest(planText.trim()));
    assert.equal(gitIn(projectDir, 'rev-list', '--count', `${first}..HEAD`), '1');
  } finally {
    await cleanup([c], home, dir);
  }
});

test('a plan found whose documentation is stale is documented through autodoc before it is carried out', async () => {
  const { dir, home, projectDir, env } = setup();
  const c = await Client.connect({ home, hostBin, hostEnv: env });
  try {
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', checks: CHECKS }, sessionId: 's-doc', projectDir });
    const answer = answerer(c, runId, 's-doc');
    await answer('findPlan', { route: 'found', plan: PLAN, documentation: 'stale', documents: [PLAN_DOC], reason: 'the accepted plan, its doc lacks the risks' });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    const [doc] = await c.listInteractions('s-doc');
    assert.match(doc.node_id, /^documentation\./);
    assert.match(doc.request.prompt, /Return \[\] when text is empty/);
    const content = `${readFileSync(join(projectDir, PLAN_DOC), 'utf8')}\n## Risks\n\n- none known\n`;
    await c.waitForSubmission(runId, (await c.submitInteraction(doc, { route: 'update', files: [PLAN_DOC], reason: 'add the risks' })).submission_id, { timeoutMs: 30_000 });
    // autodoc's model edits the document, then runs the documentation checks.
    writeFileSync(join(projectDir, PLAN_DOC), content);
    await answer('documentation.update', { files: [PLAN_DOC], summary: 'added the risks' });
    await answer('documentation.verify', { passed: true, commands: [], failures: [] });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    const implemented = await answer('implement', { status: 'done', summary: 'Guard the empty string' });
    assert.match(implemented.ask.request.prompt, /1\. Guard: Return \[\] when text is empty/);
    assert.equal(readFileSync(join(projectDir, PLAN_DOC), 'utf8'), content, 'written by autodoc before the implementation');
    const run = await c.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
    assert.equal(run.result.planSource.from, 'found');
  } finally {
    await cleanup([c], home, dir);
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
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS }, sessionId: 's-pr', projectDir });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await c.submitInteraction(await pending(c, 's-pr', 'implement'), { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] });

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
    const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, merge: true }, sessionId: 's-merge', projectDir });
    await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
    await c.submitInteraction(await pending(c, 's-merge', 'implement'), { status: 'done', summary: 'Return [] for empty input' });
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
      const { run_id: runId } = await c.startRun(WORKFLOW, { input: { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, merge: true }, sessionId: 's-moved', projectDir });
      const { run } = await drive(c, runId, 's-moved', { implement: fixed(projectDir) });
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
      input: { task: 'empty input', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, repository: projectDir, merge: true },
      sessionId: 's-two',
      projectDir: workspace,
    });
    const { run, asked } = await drive(c, runId, 's-two', {
      implement: () => {
        writeFileSync(join(projectDir, 'src', 'parse.js'), FIX);
        writeFileSync(join(otherDir, 'src', 'parse.js'), FIX);
        return { status: 'done', summary: 'Return [] for empty input', repositories: [otherDir, projectDir] };
      },
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
