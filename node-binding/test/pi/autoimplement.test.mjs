// autoimplement end to end: real Pi with the extension, the mock model answering each step as
// the test scripts it (its "implementation" writes the fixture's files), on one fixture git
// repository (a parser whose check fails) reset between tests, with a bare origin and a fake
// `gh` on a PATH of git and node only. The independent reviewer is a second Pi, started by the
// run, on the same mock model (Pi's default model in its settings): its requests are told apart
// by their system prompt. The happy path (checks named by the model, one review, the commit
// pushed to a branch of its own, its pull request opened, CI green, reported on and left
// ready); a fix that fails the check and a P1 from the reviewer, each needing another round,
// the reviewer read-only (push: false: nothing pushed, CI skipped, and said); a reviewer
// answering garbage, retried, then the run blocked; a blocker challenged three times, then the
// run ends blocked; a re-plan through plan-change; the pull request's CI failing once (another
// round, a second commit pushed, the same pull request); the host killed while the reviewer
// works; started with a task only (through pi-workflows' example file): the model finds the
// plan in the fixture's docs, or finds none and the run ends blocked with nothing changed.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, test } from 'node:test';

import { REVIEWER_SYSTEM_PROMPT } from '../../builtins/autoimplement/review.mjs';
import { planDigest } from '../../builtins/plan.mjs';
import { Client } from '../../index.js';
import { CHECKS, FIX, fixtureRepo, ghLog, gitIn, PLAN, PLAN_DOC, resetRepo, toolsPath, WRONG_FIX } from '../fixture-repo.mjs';
import { alive, hostBin, piEnv, until } from './harness.mjs';

let env;
let pi;
let client;
let first;
let ghState;
let path;
before(async () => {
  // The fixture's check is `node --test`: under this test runner's variable it would report to
  // a parent that is not there and exit 0 whatever its tests say. The host inherits this
  // process's environment. (Removed once the tests are declared: the runner reads it when the
  // first is.)
  delete process.env.NODE_TEST_CONTEXT;
  env = await piEnv();
  // The reviewer's model: Pi's default, as a detached run's bridge gets it.
  writeFileSync(join(env.agentDir, 'settings.json'), JSON.stringify({ defaultProvider: 'mock', defaultModel: 'mock-model' }));
  first = fixtureRepo(env.project);
  ghState = join(env.root, 'gh.json');
  // The host (started here, before Pi) and so every run sees only these tools: never a real gh.
  path = toolsPath(env.root, { ghState });
  client = await Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PATH: path } });
  // So does a host the extension starts again.
  pi = await env.startPi({ extraEnv: { PATH: path } });
});
beforeEach(() => {
  resetRepo(env.project, first);
  writeFileSync(`${ghState}.log`, '');
});
after(async () => {
  await client?.close().catch(() => {});
  await env?.close();
});

const textOf = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((b) => b.text ?? '').join(''));
const stepOf = (m) => {
  const t = textOf(m);
  const id = /"interactionId":"([^"]+)"/.exec(t)?.[1];
  const node = /, step: ([\w.-]+), attempt:/.exec(t)?.[1];
  return m.role === 'user' && id && node ? { id, node, text: t } : null;
};

const isReviewer = (request) => request.messages[0]?.role === 'system' && textOf(request.messages[0]).includes(REVIEWER_SYSTEM_PROMPT.split('\n')[0]);
const CLEAN = { p0: [], p1: [], p2: [], lower: [], reason: 'does what the plan says' };
/** The plan given, said to be documented already (no autodoc step). */
const DOCUMENTED = { status: 'current', planDigest: planDigest(PLAN), documents: [PLAN_DOC] };

/**
 * The mock model: the n-th request of a step (per node) is answered with `answers[node](n,
 * prompt)` (or a Promise of it: the turn waits); each step's prompt is kept in `asked` (node ->
 * prompts). After a tool result the turn ends. A step message steered into a running turn may
 * reach the model twice: a repeat of an interaction already answered is answered the same.
 * The reviewer's requests (its own Pi) go to `answers.reviewer(n, request)` (n counts reviewer
 * processes: requests without a tool result), kept in `asked.reviewer`; its reply is a review
 * object (sent as JSON text) or `{ text }` / `{ tool }` as the mock takes them.
 */
function scripted(answers) {
  const asked = {};
  const given = new Map();
  env.model.script = async (request) => {
    const { last } = request;
    if (isReviewer(request)) {
      if (last.role === 'user') (asked.reviewer ??= []).push(request);
      assert.ok(answers.reviewer, 'no scripted answer for the reviewer');
      const reply = await answers.reviewer(asked.reviewer.length, request);
      return reply.text !== undefined || reply.tool || reply.hold ? reply : { text: JSON.stringify(reply) };
    }
    if (last.role === 'tool') return { text: 'done' };
    const step = stepOf(last);
    if (!step) return { text: 'ok' };
    assert.ok(Object.hasOwn(answers, step.node), `no scripted answer for step ${step.node}`);
    if (!given.has(step.id)) {
      (asked[step.node] ??= []).push(step.text);
      given.set(step.id, answers[step.node](asked[step.node].length, step.text));
    }
    return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step.id, output: await given.get(step.id) } } };
  };
  return asked;
}

/** A promise and the function that resolves it. */
function latch() {
  let open;
  const promise = new Promise((r) => (open = r));
  return { promise, open };
}

const write = (content) => writeFileSync(join(env.project, 'src', 'parse.js'), content);
const ghCalls = () => ghLog(ghState).map((a) => a.slice(0, 2).join(' '));
const PASS = { name: 'test', state: 'SUCCESS', bucket: 'pass', link: 'https://example.invalid/ci/1' };

async function newRun(before) {
  return until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => !before.includes(r.run_id))?.run_id, 'the run');
}
const runIds = async () => (await client.listRuns({ sessionId: 'session-a' })).map((r) => r.run_id);

test('the happy path: implemented, checked (the checks the model named), reviewed, committed, pushed, its pull request opened, CI green, reported', async () => {
  writeFileSync(ghState, JSON.stringify({ checks: [PASS] }));
  const widgetShown = latch();
  const asked = scripted({
    implement: () => {
      write(FIX);
      return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
    },
    chooseChecks: () => ({ checks: CHECKS }),
    // The review waits until the widget has shown the checks' track (the run is live meanwhile).
    reviewer: () => widgetShown.promise.then(() => CLEAN),
  });
  const earlier = await runIds();
  const from = pi.mark();
  const input = { task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, concurrency: { reviewer: 1, ciWatch: 2, verification: 1 } };
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify(input)}`);
  const runId = await newRun(earlier);
  // Progress per batch item, in the widget: the checks' track once its item ended.
  await pi.waitEvent(
    (e) => e.type === 'extension_ui_request' && e.method === 'setWidget' && (e.widgetLines ?? []).some((l) => /project checks\s+1\/1 checks/.test(l)),
    "the widget showing the checks' track",
    from,
  );
  widgetShown.open();
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'completed');
  assert.deepEqual(run.result.checks, [{ id: 'test', outcome: 'succeeded' }]);
  const url = 'https://example.invalid/p/pull/1';
  assert.deepEqual(run.result.ci, { route: 'green', reason: 'every check passed', relatedFailures: [], unrelatedFailures: [], pr: url, checks: [{ name: 'test', bucket: 'pass' }] });
  assert.deepEqual(
    { status: run.result.delivery.status, merged: run.result.delivery.merged, pr: run.result.delivery.pr, reportComment: run.result.delivery.reportComment },
    { status: 'completed', merged: false, pr: url, reportComment: `${url}#issuecomment-9000` },
  );
  assert.deepEqual(Object.fromEntries(Object.entries(asked).map(([k, v]) => [k, v.length])), { implement: 1, chooseChecks: 1, reviewer: 1 });
  assert.match(asked.implement[0], /Implement this plan in the working tree/);
  assert.match(asked.reviewer[0].lastText, /\+export const parse = \(text\) => \(text === "" \? \[\] :/);
  assert.deepEqual(run.result.reviewRounds.map((r) => [r.route, r.reviewer.model]), [['clean', 'mock/mock-model']]);
  // Committed on a branch of its own, pushed, proposed; the fake gh was asked in this order.
  const head = gitIn(env.project, 'rev-parse', 'HEAD');
  const branch = gitIn(env.project, 'branch', '--show-current');
  assert.match(branch, /^piw\/autoimplement-/);
  assert.equal(run.result.commit.sha, head);
  assert.equal(gitIn(env.project, 'rev-parse', `origin/${branch}`), head);
  assert.equal(gitIn(env.project, 'rev-parse', 'origin/main'), first, 'the base is untouched');
  assert.deepEqual(ghCalls(), ['pr list', 'pr create', 'pr view', 'pr view', 'api repos/{owner}/{repo}/pulls/1/comments', 'pr checks', 'pr checks', 'pr view', 'pr comment']);
  // Each side effect a managed effect: the push a manual one, the rest safe to repeat.
  const { effects, updates } = await client.runStatus(runId);
  const kinds = effects.map((e) => /:(run_checks|git_commit|git_push|ci_watch|pi_review|github_[a-z]+):/.exec(JSON.stringify(e))?.[1] ?? JSON.stringify(e)).sort();
  assert.deepEqual(
    kinds,
    ['ci_watch', 'git_commit', 'git_push', 'github_answer', 'github_merge', 'github_pr', 'github_read', 'github_report', 'pi_review', 'run_checks'],
    JSON.stringify(effects),
  );
  // The progress tracks kept with the run: the checks' and CI's.
  const track = (key) => updates.find((u) => u.type === 'progress' && u.key === key)?.data;
  assert.deepEqual(track('checks'), { schema: 'pi-workflows.progress.v1', status: 'completed', label: 'project checks', completed: 1, total: 1, unit: 'checks' });
  assert.equal(track('ci').status, 'completed');
});

test('a fix that fails the check, then a P1 from the independent reviewer, each go back for another round; the reviewer only reads; constraints reach every prompt; push: false: CI skipped, and said', async () => {
  writeFileSync(ghState, JSON.stringify({}));
  const state = () => `${gitIn(env.project, 'status', '--porcelain', '--untracked-files=all')}\n${gitIn(env.project, 'diff')}`;
  const seen = [];
  const asked = scripted({
    implement: (n) => {
      write(n === 1 ? WRONG_FIX : FIX);
      if (n === 3) writeFileSync(join(env.project, 'src', 'blank.test.js'), 'import assert from "node:assert"; import test from "node:test"; import { parse } from "./parse.js";\ntest("blank", () => assert.deepEqual(parse(" "), [0]));\n');
      return { status: 'done', summary: ['Guard whitespace', 'Guard the empty string', 'Cover blank input with a test'][n - 1], files: ['src/parse.js'] };
    },
    // The first reviewer tries to write a file (it has no tool for that), then finds a P1; the
    // second finds none. What the repository looks like is kept at each of its requests.
    reviewer: (n, request) => {
      seen.push({ n, tools: request.tools.map((t) => t.function?.name ?? t.name).sort(), state: state() });
      if (n === 1 && request.last.role === 'user') return { tool: { name: 'write', arguments: { path: 'src/reviewer-was-here.js', content: 'x' } } };
      return n === 1
        ? { p0: [], p1: [{ kind: 'implementation', summary: 'blank input is untested', file: 'src/parse.test.js' }], p2: [], lower: [{ kind: 'implementation', summary: 'text could be input' }], reason: 'one gap' }
        : CLEAN;
    },
  });
  const earlier = await runIds();
  const input = { task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, constraints: ['Keep parse synchronous'], push: false };
  await pi.prompt(`/workflow builtin:autoimplement --input-json ${JSON.stringify(input)}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
  assert.deepEqual({ rounds: run.result.rounds, reviews: run.result.reviews }, { rounds: 3, reviews: 2 });
  assert.deepEqual(run.result.reviewRounds.map((r) => [r.route, r.p1.length]), [['critical', 1], ['clean', 0]]);
  assert.equal(asked.implement.length, 3);
  // Round 2 was told which check failed and how; round 3 the reviewer's P1.
  assert.match(asked.implement[1], /Round 2: the work is not done yet\.\nThese checks fail:\n- test \(failed, exit 1\):/);
  assert.match(asked.implement[1], /empty input/);
  assert.doesNotMatch(asked.implement[1], /independent review/);
  assert.match(asked.implement[2], /The independent review found .*\n- \[P1\] blank input is untested \(src\/parse\.test\.js\)/);
  assert.doesNotMatch(asked.implement[2], /text could be input/, 'lower findings are not sent back');
  for (const prompt of asked.implement) assert.match(prompt, /Constraints \(keep every one\):\n- Keep parse synchronous/);
  // The reviewer: a Pi of its own (two processes, one per review), its own system prompt, only
  // the read tools; the write it tried did not happen, and the repository was the same at the
  // end of its review as at its start.
  assert.equal(asked.reviewer.length, 2);
  for (const r of asked.reviewer) {
    assert.match(r.lastText, /Constraints \(keep every one\):\n- Keep parse synchronous/);
    assert.match(r.lastText, new RegExp(`## The change: .* against ${first}`));
  }
  assert.match(asked.reviewer[1].lastText, /The last review found these P0\/P1 problems; check whether each is fixed:\n- \[P1\] blank input is untested/);
  assert.match(asked.reviewer[1].lastText, /New files \(read them\): src\/blank\.test\.js/);
  for (const s of seen) assert.deepEqual(s.tools, ['find', 'grep', 'ls', 'read']);
  const firstReview = seen.filter((s) => s.n === 1);
  assert.equal(firstReview.length, 2, 'its first request, then the one after its refused write');
  assert.equal(firstReview[1].state, firstReview[0].state, 'the reviewer changed nothing');
  assert.deepEqual(run.result.ci, { route: 'skipped', reason: 'no CI followed: push: false in the input' });
  assert.equal(run.result.delivery.status, 'skipped');
  assert.deepEqual(ghCalls(), [], 'GitHub not asked');
  assert.equal(gitIn(env.project, 'log', '-1', '--format=%s'), 'Cover blank input with a test');
  assert.equal(gitIn(env.project, 'ls-files', 'src/reviewer-was-here.js'), '');
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..HEAD`), '1', 'one commit, after the last round');
  assert.equal(gitIn(env.project, 'rev-parse', 'origin/main'), first, 'nothing pushed');
  const { attempts } = await client.runStatus(runId);
  assert.deepEqual(attempts.filter((a) => a.node_id === 'verify').map((a) => a.output.passed).reverse(), [false, true, true]); // (newest first)
});

test('a reviewer that answers garbage is started again, twice at most, then the run ends blocked saying why', async () => {
  writeFileSync(ghState, JSON.stringify({}));
  const asked = scripted({
    implement: () => {
      write(FIX);
      return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
    },
    reviewer: () => ({ text: 'Looks fine to me!' }),
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS })}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'blocked');
  assert.equal(run.result.stage, 'review');
  assert.match(run.result.reason, /^the independent reviewer gave no review: no review after 3 reviewer starts: the reviewer answered without the review asked for/);
  assert.equal(asked.reviewer.length, 3, 'three reviewer processes');
  assert.equal(gitIn(env.project, 'rev-parse', 'HEAD'), first, 'nothing committed');
});

test('a blocker is challenged, three times at most: the model goes on each time, says it is blocked a fourth time, and the run ends blocked', async () => {
  const asked = scripted({
    implement: (n) => ({ status: 'blocked', summary: 'not started', blocker: n < 4 ? `the test may be wrong (${n})` : 'the test asserts behaviour nobody specified' }),
    challengeBlocker: (n) => ({ route: 'continue', reason: 'the plan says what "" means', tried: ['read the plan'], nextAction: `implement the guard the plan describes (${n})` }),
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS })}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(
    { status: run.result.status, stage: run.result.stage, reason: run.result.reason, challenges: run.result.evidence.challenges.attempts },
    { status: 'blocked', stage: 'implement', reason: 'the test asserts behaviour nobody specified', challenges: 3 },
  );
  assert.deepEqual({ implement: asked.implement.length, challengeBlocker: asked.challengeBlocker.length }, { implement: 4, challengeBlocker: 3 });
  assert.match(asked.challengeBlocker[0], /You said the work is blocked: the test may be wrong \(1\)/);
  assert.match(asked.challengeBlocker[1], /You were challenged before and answered: the plan says what "" means/);
  assert.match(asked.implement[1], /You decided to go on despite a blocker: implement the guard the plan describes \(1\)/);
  const { attempts } = await client.runStatus(runId);
  assert.equal(attempts.filter((a) => ['verify', 'commit'].includes(a.node_id)).length, 0, 'nothing checked or committed');
  assert.equal(gitIn(env.project, 'rev-parse', 'HEAD'), first);
});

test('the implementation shows the plan does not hold: the run re-plans through plan-change (autoplan, autodoc, approval skipped as asked) and carries out the new plan', async () => {
  writeFileSync(ghState, JSON.stringify({}));
  const newPlan = { summary: 'Guard split for empty input', steps: [{ title: 'Guard split', detail: 'Return [] before splitting an empty text', files: ['src/parse.js'] }], checks: ['node --test'], risks: [] };
  const asked = scripted({
    implement: (n) => {
      if (n === 1) return { status: 'issue', issueKind: 'design', summary: 'the plan guards the wrong place', evidence: 'the empty case comes from split(); the guard belongs there' };
      write(FIX);
      return { status: 'done', summary: 'Guard split for empty input', files: ['src/parse.js'] };
    },
    'redesign.plan.frame': () => ({ problem: 'guard empty input', success: ['parse("") is []'], inScope: ['src'], outOfScope: [] }),
    'redesign.plan.options': () => ({ options: [{ id: 'split', title: 'Guard split', approach: 'guard before split', tradeoffs: ['small'] }, { id: 'parse', title: 'Guard parse', approach: 'as before', tradeoffs: ['wrong place'] }] }),
    'redesign.plan.ideal': () => ({ ideal: 'empty input handled where the text is split', beyondReach: [], worth: ['one place'] }),
    'redesign.plan.choose': () => ({ status: 'ready', chosen: 'split', why: 'the evidence', againstIdeal: 'it is the ideal here', leftOut: [], rejected: [{ id: 'parse', reason: 'wrong place' }] }),
    'redesign.plan.plan': () => newPlan,
    'redesign.doc.inspect': () => ({ route: 'current', files: [PLAN_DOC], reason: 'recorded already' }),
    reviewer: () => CLEAN,
  });
  const earlier = await runIds();
  const input = { task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, constraints: ['No new dependencies'], approval: { mode: 'skip' }, push: false };
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify(input)}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
  assert.deepEqual(run.result.plan, newPlan);
  assert.equal(run.result.planSource.from, 'replanned');
  // autoplan saw the old plan, the evidence and the constraints; the new plan went to the model.
  assert.match(asked['redesign.plan.frame'][0], /No new dependencies/);
  assert.match(asked['redesign.plan.frame'][0], /A plan made before .*Return an empty list for empty input/);
  assert.match(asked.implement[1], /1\. Guard split: Return \[\] before splitting an empty text/);
  assert.match(asked.implement[1], /The plan was changed \(revision 1\) because of: .*the guard belongs there/);
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..HEAD`), '1');
});

test("started with a task only, through pi-workflows' example: the model finds the plan in the project's docs and the run carries it out", async () => {
  writeFileSync(ghState, JSON.stringify({}));
  // examples/workflows/autoimplement.workflow.ts of pi-workflows 0.12.1, as it is, where the
  // user keeps workflows (outside the fixture's repository: nothing of it is committed).
  const example = join(env.agentDir, 'workflows', 'autoimplement.workflow.ts');
  writeFileSync(example, 'export { autoimplementWorkflow as default } from "@osolmaz/pi-workflows/builtins";\n');
  try {
    const asked = scripted({
      // The plan as the model reads it in the fixture's doc.
      findPlan: () => {
        assert.match(readFileSync(join(env.project, PLAN_DOC), 'utf8'), /1\. Guard: Return \[\] when text is empty/);
        return { route: 'found', plan: PLAN, documentation: 'current', documents: [PLAN_DOC], reason: 'the accepted plan for this task' };
      },
      implement: () => {
        write(FIX);
        return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
      },
      chooseChecks: () => ({ checks: CHECKS }),
      reviewer: () => CLEAN,
    });
    const earlier = await runIds();
    await pi.prompt('/workflow autoimplement parse("") should give []');
    const runId = await newRun(earlier);
    const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
    assert.equal(run.status, 'completed', run.error ?? run.review_reason);
    assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
    assert.equal(run.source_root, example, 'the example file was the workflow started');
    assert.deepEqual(run.result.planSource, { from: 'found', documents: [PLAN_DOC], reason: 'the accepted plan for this task' });
    assert.equal(run.result.planDigest, planDigest(PLAN));
    assert.deepEqual(Object.fromEntries(Object.entries(asked).map(([k, v]) => [k, v.length])), { findPlan: 1, implement: 1, chooseChecks: 1, reviewer: 1 });
    assert.match(asked.findPlan[0], /Task: parse\(""\) should give \[\]/);
    assert.match(asked.findPlan[0], /Look where the project keeps its plans/);
    assert.match(asked.implement[0], /1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
    assert.match(gitIn(env.project, 'log', '-1', '--format=%B'), new RegExp(`^Return \\[\\] for empty input\n\nPlan: ${planDigest(PLAN)}\n`));
  } finally {
    rmSync(example, { force: true });
  }
});

test('started with a task only and no plan for it in the project: the run ends blocked, nothing implemented or changed', async () => {
  const asked = scripted({
    findPlan: () => ({ route: 'none', reason: 'no plan in docs/plans is about separators' }),
  });
  const earlier = await runIds();
  await pi.prompt('/workflow autoimplement parse should accept ";" as a separator');
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.match(run.source_root, /builtins\/autoimplement\.workflow\.mjs$/);
  assert.deepEqual(run.result, { status: 'blocked', task: 'parse should accept ";" as a separator', stage: 'plan', reason: 'no plan in docs/plans is about separators', evidence: null });
  assert.deepEqual(Object.keys(asked), ['findPlan']);
  const { attempts } = await client.runStatus(runId);
  assert.deepEqual(attempts.map((a) => a.node_id).filter((n) => !['prepare', 'routeFoundPlan', 'blocked'].includes(n)), ['findPlan']);
  assert.equal(gitIn(env.project, 'rev-parse', 'HEAD'), first);
  assert.equal(gitIn(env.project, 'status', '--porcelain'), '');
});

test("the pull request's CI fails: another round with the failure, a second commit pushed to the same pull request, CI green", async () => {
  const lint = { name: 'lint', state: 'FAILURE', bucket: 'fail', link: 'https://example.invalid/ci/lint' };
  writeFileSync(ghState, JSON.stringify({ checkRounds: [[lint], [{ ...lint, state: 'SUCCESS', bucket: 'pass' }]] }));
  const asked = scripted({
    implement: (n) => {
      write(n === 1 ? FIX : FIX.replace('(text)', '(input)').replaceAll('text', 'input'));
      return { status: 'done', summary: n === 1 ? 'Return [] for empty input' : 'Name the parameter input, as lint wants', files: ['src/parse.js'] };
    },
    reviewer: () => CLEAN,
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS })}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.ci.route, 'green');
  assert.match(asked.implement[1], /The pull request's CI failed:\n- https:\/\/example\.invalid\/p\/pull\/1: lint \(https:\/\/example\.invalid\/ci\/lint\)/);
  assert.equal(asked.reviewer.length, 2, 'the second round was reviewed too');
  const branch = gitIn(env.project, 'branch', '--show-current');
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..origin/${branch}`), '2', 'two commits, both pushed');
  assert.equal(gitIn(env.project, 'log', '-1', '--format=%s', `origin/${branch}`), 'Name the parameter input, as lint wants');
  assert.equal(ghCalls().filter((c) => c === 'pr create').length, 1, 'one pull request for both rounds');
});

test('the host killed while the reviewer works: the restarted host kills that reviewer, the review runs again, nothing else is done twice', async () => {
  writeFileSync(ghState, JSON.stringify({}));
  const release = latch();
  const arrived = latch();
  const asked = scripted({
    implement: () => {
      write(FIX);
      return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
    },
    // The first reviewer's answer is held until the test has killed the host; the next one answers.
    reviewer: (n) => {
      if (n > 1) return CLEAN;
      arrived.open();
      return { hold: release.promise, text: '{}' };
    },
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, documentation: DOCUMENTED, checks: CHECKS, push: false })}`);
  const runId = await newRun(earlier);
  await arrived.promise;
  const reviewers = reviewerProcesses();
  assert.equal(reviewers.length, 1, reviewers.join('; '));
  const { pid } = await client.status();
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 'the host gone');
  await client.close().catch(() => {});
  client = await Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PATH: path } });
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  release.open();
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'completed', JSON.stringify(run.result));
  assert.equal(asked.implement.length, 1, 'implemented once');
  assert.equal(asked.reviewer.length, 2, 'the review ran again');
  await until(() => !alive(Number(reviewers[0].split(' ')[0])), `the first reviewer (${reviewers[0]}) gone`);
  const { attempts } = await client.runStatus(runId);
  const count = (node) => attempts.filter((a) => a.node_id === node).length;
  assert.deepEqual({ verify: count('verify'), commit: count('commit') }, { verify: 1, commit: 1 });
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..HEAD`), '1', 'one commit');
});

/** Reviewer Pi processes the run started in the test's project (`--print`, with its `PIW_RUN_ID`). */
function reviewerProcesses() {
  const found = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      const ofRun = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').some((v) => v.startsWith('PIW_RUN_ID='));
      if (ofRun && readlinkSync(`/proc/${pid}/cwd`).startsWith(env.project) && (cmdline === 'pi' || cmdline.includes('--print'))) found.push(`${pid} ${cmdline.slice(0, 200)}`);
    } catch {
      // gone, or not ours
    }
  }
  return found;
}
