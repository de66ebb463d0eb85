// autoimplement end to end: real Pi with the extension, the mock model answering each step as
// the test scripts it (its "implementation" writes the fixture's files), on one fixture git
// repository (a parser whose check fails) reset between tests, with a bare origin and a fake
// `gh` on a PATH of git and node only. The happy path (checks named by the model, one review,
// the commit pushed to a branch of its own, its pull request opened, CI green, reported on and
// left ready); a fix that fails the check and a review with a P1 finding, each needing another
// round (push: false: nothing pushed, CI skipped, and said); a blocker challenged once, then the
// run ends blocked; the pull request's CI failing once (another round, a second commit pushed,
// the same pull request); the host killed while the model reviews; started
// with a task only (through pi-workflows' example file): the model finds the plan in the
// fixture's docs, or finds none and the run ends blocked with nothing changed.
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, test } from 'node:test';

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

/**
 * The mock model: the n-th request of a step (per node) is answered with `answers[node](n,
 * prompt)` (or a Promise of it: the turn waits); each step's prompt is kept in `asked` (node ->
 * prompts). After a tool result the turn ends. A step message steered into a running turn may
 * reach the model twice: a repeat of an interaction already answered is answered the same.
 */
function scripted(answers) {
  const asked = {};
  const given = new Map();
  env.model.script = async ({ last }) => {
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
    review: () => widgetShown.promise.then(() => ({ findings: [] })),
  });
  const earlier = await runIds();
  const from = pi.mark();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN })}`);
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
  assert.deepEqual(Object.fromEntries(Object.entries(asked).map(([k, v]) => [k, v.length])), { implement: 1, chooseChecks: 1, review: 1 });
  assert.match(asked.implement[0], /Implement this plan in the working tree/);
  assert.match(asked.review[0], /\+export const parse = \(text\) => \(text === "" \? \[\] :/);
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
  const kinds = effects.map((e) => /:(run_checks|git_commit|git_push|ci_watch|github_[a-z]+):/.exec(JSON.stringify(e))?.[1] ?? JSON.stringify(e)).sort();
  assert.deepEqual(
    kinds,
    ['ci_watch', 'git_commit', 'git_push', 'github_answer', 'github_merge', 'github_pr', 'github_read', 'github_report', 'run_checks'],
    JSON.stringify(effects),
  );
  // The progress tracks kept with the run: the checks' and CI's.
  const track = (key) => updates.find((u) => u.type === 'progress' && u.key === key)?.data;
  assert.deepEqual(track('checks'), { schema: 'pi-workflows.progress.v1', status: 'completed', label: 'project checks', completed: 1, total: 1, unit: 'checks' });
  assert.equal(track('ci').status, 'completed');
});

test('a fix that fails the check, then a review finding, each go back for another round; push: false: CI skipped, and said', async () => {
  writeFileSync(ghState, JSON.stringify({}));
  const asked = scripted({
    implement: (n) => {
      write(n === 1 ? WRONG_FIX : FIX);
      if (n === 3) writeFileSync(join(env.project, 'src', 'blank.test.js'), 'import assert from "node:assert"; import test from "node:test"; import { parse } from "./parse.js";\ntest("blank", () => assert.deepEqual(parse(" "), [0]));\n');
      return { status: 'done', summary: ['Guard whitespace', 'Guard the empty string', 'Cover blank input with a test'][n - 1], files: ['src/parse.js'] };
    },
    review: (n) =>
      n === 1
        ? { findings: [{ id: 'blank', severity: 'P1', title: 'blank input untested', detail: 'parse(" ") is not covered by a test', file: 'src/parse.test.js' }, { id: 'nit', severity: 'P3', title: 'naming', detail: 'text could be input' }] }
        : { findings: [{ id: 'nit', severity: 'P3', title: 'naming', detail: 'text could be input' }], resolved: ['blank'] },
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow builtin:autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, checks: CHECKS, push: false })}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'completed');
  assert.deepEqual({ rounds: run.result.rounds, reviews: run.result.reviews }, { rounds: 3, reviews: 2 });
  assert.equal(asked.implement.length, 3);
  // Round 2 was told which check failed and how; round 3 the open finding by its id.
  assert.match(asked.implement[1], /Round 2: the work is not done yet\.\nThese checks fail:\n- test \(failed, exit 1\):/);
  assert.match(asked.implement[1], /empty input/);
  assert.doesNotMatch(asked.implement[1], /The review found/);
  assert.match(asked.implement[2], /The review found .*\n- blank \[P1\] blank input untested: parse\(" "\) is not covered by a test \(src\/parse\.test\.js\)/);
  assert.doesNotMatch(asked.implement[2], /nit/, 'a P3 finding is not sent back');
  // The second review was asked about the finding the first left open.
  assert.match(asked.review[1], /The last review left these open.*\n- blank \[P1\]/);
  assert.match(asked.review[1], /New files \(read them\): src\/blank\.test\.js/);
  assert.deepEqual(run.result.ci, { route: 'skipped', reason: 'no CI followed: push: false in the input' });
  assert.equal(run.result.delivery.status, 'skipped');
  assert.deepEqual(ghCalls(), [], 'GitHub not asked');
  assert.equal(gitIn(env.project, 'log', '-1', '--format=%s'), 'Cover blank input with a test');
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..HEAD`), '1', 'one commit, after the last round');
  assert.equal(gitIn(env.project, 'rev-parse', 'origin/main'), first, 'nothing pushed');
  assert.equal(gitIn(env.project, 'branch', '--show-current'), 'main', 'committed where the work was');
  const { attempts } = await client.runStatus(runId);
  assert.deepEqual(attempts.filter((a) => a.node_id === 'verify').map((a) => a.output.passed).reverse(), [false, true, true]); // (newest first)
});

test('a blocker is challenged once: the model goes on, says it is blocked again, and the run ends blocked', async () => {
  const asked = scripted({
    implement: (n) => ({ status: 'blocked', summary: 'not started', blocker: n === 1 ? 'the test may be wrong' : 'the test asserts behaviour nobody specified' }),
    challenge: () => ({ route: 'continue', reason: 'the plan says what "" means', tried: ['read the plan'], nextAction: 'implement the guard the plan describes' }),
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, checks: CHECKS })}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(
    { status: run.result.status, stage: run.result.stage, reason: run.result.reason, challenged: run.result.evidence.route },
    { status: 'blocked', stage: 'implement', reason: 'the test asserts behaviour nobody specified', challenged: 'continue' },
  );
  assert.deepEqual({ implement: asked.implement.length, challenge: asked.challenge.length }, { implement: 2, challenge: 1 });
  assert.match(asked.challenge[0], /You said the work is blocked: the test may be wrong/);
  assert.match(asked.implement[1], /You decided to go on despite a blocker: implement the guard the plan describes/);
  const { attempts } = await client.runStatus(runId);
  assert.equal(attempts.filter((a) => ['verify', 'commit'].includes(a.node_id)).length, 0, 'nothing checked or committed');
  assert.equal(gitIn(env.project, 'rev-parse', 'HEAD'), first);
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
        return { route: 'found', plan: PLAN, documents: [PLAN_DOC], reason: 'the accepted plan for this task' };
      },
      implement: () => {
        write(FIX);
        return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
      },
      chooseChecks: () => ({ checks: CHECKS }),
      review: () => ({ findings: [] }),
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
    assert.deepEqual(Object.fromEntries(Object.entries(asked).map(([k, v]) => [k, v.length])), { findPlan: 1, implement: 1, chooseChecks: 1, review: 1 });
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
  assert.deepEqual(attempts.map((a) => a.node_id).filter((n) => !['start', 'afterFind', 'blocked'].includes(n)), ['findPlan']);
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
    review: () => ({ findings: [] }),
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, checks: CHECKS })}`);
  const runId = await newRun(earlier);
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.ci.route, 'green');
  assert.match(asked.implement[1], /The pull request's CI failed:\n- https:\/\/example\.invalid\/p\/pull\/1: lint \(https:\/\/example\.invalid\/ci\/lint\)/);
  assert.equal(asked.review.length, 2, 'the second round was reviewed too');
  const branch = gitIn(env.project, 'branch', '--show-current');
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..origin/${branch}`), '2', 'two commits, both pushed');
  assert.equal(gitIn(env.project, 'log', '-1', '--format=%s', `origin/${branch}`), 'Name the parameter input, as lint wants');
  assert.equal(ghCalls().filter((c) => c === 'pr create').length, 1, 'one pull request for both rounds');
});

test('the host killed while the model reviews: a host starts again, the run resumes at its review, nothing done twice', async () => {
  writeFileSync(ghState, JSON.stringify({}));
  const release = latch();
  const asked = scripted({
    implement: () => {
      write(FIX);
      return { status: 'done', summary: 'Return [] for empty input', files: ['src/parse.js'] };
    },
    // The review's answer waits until the test has killed the host and started another.
    review: () => release.promise.then(() => ({ findings: [] })),
  });
  const earlier = await runIds();
  await pi.prompt(`/workflow autoimplement --input-json ${JSON.stringify({ task: 'parse("") should give []', plan: PLAN, checks: CHECKS })}`);
  const runId = await newRun(earlier);
  await until(() => asked.review?.length === 1, 'the review with the model');
  const { pid } = await client.status();
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 'the host gone');
  await client.close().catch(() => {});
  client = await Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PATH: path } });
  release.open();
  const run = await client.waitForRun(runId, { timeoutMs: 90_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'completed');
  assert.equal(asked.implement.length, 1, 'implemented once');
  const { attempts } = await client.runStatus(runId);
  const count = (node) => attempts.filter((a) => a.node_id === node).length;
  assert.deepEqual({ verify: count('verify'), commit: count('commit') }, { verify: 1, commit: 1 });
  assert.equal(gitIn(env.project, 'rev-list', '--count', `${first}..HEAD`), '1', 'one commit');
});
