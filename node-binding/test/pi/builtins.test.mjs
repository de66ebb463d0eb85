// The built-in workflows end to end: real Pi with the extension, the mock model answering each
// step as the test scripts it, the fixture git repository of `test/fixture-repo.mjs` (a small
// project whose check fails, its accepted plan in docs/plans). autoplan (every phase; the
// presentation turn; a revision with new evidence; blocked), autodoc (the model edits the docs
// of another repository and verifies them; a plan found rather than given; a failed
// verification), plan-approval (continue; replan with a text; the policy's auto-continue at its
// deadline on the host's test clock; skip), plan-change (a replan round, then approved; bounded
// replans), and the package's skills.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { planDigest } from '../../builtins/plan.mjs';
import { Client } from '../../index.js';
import { PLAN_DOC, fixtureRepo } from '../fixture-repo.mjs';
import { hostBin, piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  fixtureRepo(env.project);
});
afterEach(async () => {
  await env?.close();
});

const gitStatus = (dir) => spawnSync('git', ['status', '--porcelain'], { cwd: dir, encoding: 'utf8' }).stdout;
const sha256 = (text) => `sha256:${createHash('sha256').update(text).digest('hex')}`;

const textOf = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((b) => b.text ?? '').join(''));
const stepOf = (m) => {
  const t = textOf(m);
  const id = /"interactionId":"([^"]+)"/.exec(t)?.[1];
  const node = /, step: ([\w.-]+), attempt:/.exec(t)?.[1];
  return m.role === 'user' && id && node ? { id, node } : null;
};

/**
 * The mock model: each step's submission from `answers` (node id -> output); `onPrompt(text)`
 * answers an ordinary prompt (a tool call or text). After a tool result the turn ends.
 */
function scripted(answers, onPrompt = () => ({ text: 'ok' })) {
  return ({ last }) => {
    if (last.role === 'tool') return { text: 'done' };
    const step = stepOf(last);
    if (step) {
      assert.ok(Object.hasOwn(answers, step.node), `no scripted answer for step ${step.node}`);
      // A function is the model's work on the step (an edit, say), given the step's text.
      const answer = typeof answers[step.node] === 'function' ? answers[step.node](textOf(last)) : answers[step.node];
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step.id, output: answer } } };
    }
    return onPrompt(textOf(last));
  };
}

const FRAME = { problem: 'parse("") returns [0] instead of []', success: ['npm test passes'], inScope: ['src/parse.js'], outOfScope: ['the test'] };
const OPTIONS = {
  options: [
    { id: 'guard', title: 'Guard empty input', approach: 'Return [] for an empty string before splitting.', tradeoffs: ['one more branch'] },
    { id: 'rewrite', title: 'Rewrite the parser', approach: 'A tokenizer that skips empty fields.', tradeoffs: ['more code to review'] },
  ],
};
const IDEAL = { ideal: 'A parser whose grammar makes empty input an empty list', beyondReach: [], worth: ['no special cases'] };
const CHOSEN = { status: 'ready', chosen: 'guard', why: 'smallest change', againstIdeal: 'the guard reaches the ideal for this input', leftOut: ['a new grammar'], rejected: [{ id: 'rewrite', reason: 'too much for one bug' }] };
const PLAN = {
  summary: 'Return an empty list for empty input',
  steps: [{ title: 'Guard', detail: 'Return [] when text is empty', files: ['src/parse.js'] }],
  checks: ['npm test'],
  risks: ['none known'],
};
/** The plan a revision makes. */
const PLAN2 = { ...PLAN, steps: [...PLAN.steps, { title: 'Whitespace', detail: 'Treat whitespace-only input as empty', files: ['src/parse.js'] }] };

async function onlyRun(client, sessionId = 'session-a') {
  return until(async () => (await client.listRuns({ sessionId }))[0]?.run_id, 'the run');
}

test('autoplan frames, compares, sets the ideal, chooses and plans (ready), then presents the plan in prose; a revision with new evidence says whether the plan changed; a choice it cannot carry out ends blocked', async () => {
  const answers = { frame: FRAME, options: OPTIONS, ideal: IDEAL, choose: CHOSEN, plan: PLAN };
  env.model.script = scripted(answers, (t) => (/Present it to the person in a few short paragraphs of prose/.test(t) ? { text: 'The plan: guard empty input.' } : { text: 'ok' }));
  const pi = await env.startPi();
  const client = await env.client();
  await pi.prompt('/workflow autoplan parse("") should give an empty list');
  const runId = await onlyRun(client);
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const r = run.result;
  assert.deepEqual(
    { status: r.status, task: r.task, frame: r.frame, proposal: r.proposal, ideal: r.ideal, selection: r.selection, plan: r.plan, planDigest: r.planDigest, changed: r.changed, previous: 'previousPlanDigest' in r },
    { status: 'ready', task: 'parse("") should give an empty list', frame: FRAME, proposal: OPTIONS, ideal: IDEAL, selection: CHOSEN, plan: PLAN, planDigest: planDigest(PLAN), changed: true, previous: false },
  );
  assert.match(run.source_root, /builtins\/autoplan\.workflow\.mjs$/);
  // The steps the model saw: each framed with the problem; the choice measured against the ideal.
  const prompts = env.model.requests.map((r) => textOf(r.last)).filter((t) => /Workflow step/.test(t));
  // (A step message steered into a running turn may end two model requests.)
  assert.deepEqual([...new Set(prompts.map((t) => /, step: (\w+),/.exec(t)[1]))], ['frame', 'options', 'ideal', 'choose', 'plan']);
  assert.match(prompts[0], /Problem: parse\(""\) should give an empty list/);
  assert.match(prompts.find((t) => /step: choose/.test(t)), /Ideal end state: \{"ideal":"A parser whose grammar/);
  // The run's end is presented by a model turn with the plan, and the model's prose is shown.
  const presentation = await until(() => env.model.requests.map((r) => textOf(r.last)).find((t) => /Present it to the person in a few short paragraphs of prose/.test(t)), 'the presentation turn');
  assert.match(presentation, /Return \[\] when text is empty/);
  assert.equal(gitStatus(env.project), '', 'nothing was written');

  // A revision: the earlier plan and new evidence reach the model; the same plan comes back.
  await pi.waitIdle();
  const reviseFrom = env.model.requests.length;
  const revised = { problem: 'decide what parse("") means', constraints: ['no new dependencies'], previousPlan: PLAN, newEvidence: { ci: 'whitespace-only input fails too' }, feedback: 'also cover whitespace-only input' };
  await pi.prompt(`/workflow builtin:autoplan --input-json ${JSON.stringify(revised)}`);
  const revisedId = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((x) => x.run_id !== runId)?.run_id, 'the second run');
  const second = await client.waitForRun(revisedId, { timeoutMs: 60_000 });
  assert.equal(second.status, 'completed', second.error ?? second.review_reason);
  assert.deepEqual({ changed: second.result.changed, previousPlanDigest: second.result.previousPlanDigest }, { changed: false, previousPlanDigest: planDigest(PLAN) });
  const steps = env.model.requests.slice(reviseFrom).map((r) => textOf(r.last));
  const framed = steps.find((t) => /step: frame/.test(t));
  assert.match(framed, /Constraints:\n- no new dependencies/);
  assert.match(framed, /A plan made before .*"summary":"Return an empty list for empty input"/);
  assert.match(framed, /New evidence since then \(the plan must account for it\): \{"ci":"whitespace-only input fails too"\}/);
  assert.match(framed, /What the person asked to change: also cover whitespace-only input/);
  assert.match(steps.find((t) => /step: plan,/.test(t)), /New evidence since then/);
  const presented = await until(() => env.model.requests.slice(reviseFrom).map((x) => textOf(x.last)).find((t) => /Present it to the person/.test(t)), 'the second presentation');
  assert.match(presented, /Say whether it changed from the earlier plan \(it did not\)/);

  // Blocked: no option within scope meets the criteria.
  await pi.waitIdle();
  env.model.script = scripted({ ...answers, choose: { ...CHOSEN, status: 'blocked', blocker: 'Nobody said whether "" is valid input' } }, (t) =>
    /ended blocked/.test(t) ? { text: 'blocked: ask the owner' } : { text: 'ok' },
  );
  await pi.prompt(`/workflow builtin:autoplan --input-json ${JSON.stringify({ problem: 'decide what parse("") means' })}`);
  const blockedId = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((x) => x.run_id !== runId && x.run_id !== revisedId)?.run_id, 'the third run');
  const blocked = await client.waitForRun(blockedId, { timeoutMs: 60_000 });
  assert.equal(blocked.status, 'completed', blocked.error ?? blocked.review_reason);
  assert.deepEqual(
    { status: blocked.result.status, reason: blocked.result.reason, ideal: blocked.result.ideal, proposal: blocked.result.proposal, selection: blocked.result.selection.status },
    { status: 'blocked', reason: 'Nobody said whether "" is valid input', ideal: IDEAL, proposal: OPTIONS, selection: 'blocked' },
  );
  await until(() => env.model.requests.some((r) => /The autoplan run above ended blocked/.test(textOf(r.last))), 'the blocked presentation');
  await pi.quit();
});

test("autodoc: the model edits another repository's docs and verifies them (ready, updated); without a plan it finds the chosen one and finds the docs current; a failed verification ends blocked", async () => {
  // Another repository, named by the input: its docs get the plan; the project stays untouched.
  const other = join(env.root, 'docs-repo');
  mkdirSync(join(other, 'docs'), { recursive: true });
  writeFileSync(join(other, 'docs', 'README.md'), '# Docs\n');
  const doc = '# Plan: empty input\n\nReturn an empty list for empty input.\n\n1. Guard: return [] when text is empty (src/parse.js)\n';
  env.model.script = scripted(
    {
      inspect: { route: 'update', files: ['docs/plans/empty-input.md'], reason: 'docs/ holds the plans', evidence: 'no plan file yet' },
      update: () => {
        mkdirSync(join(other, 'docs', 'plans'), { recursive: true });
        writeFileSync(join(other, 'docs', 'plans', 'empty-input.md'), doc);
        return { files: ['docs/plans/empty-input.md'], summary: 'recorded the empty-input plan' };
      },
      verify: { passed: true, commands: [{ command: 'npx markdownlint docs', outcome: 'no problems' }], failures: [] },
    },
    (t) =>
      /record the plan/.test(t)
        ? { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'builtin:autodoc', input: { task: 'empty input', plan: PLAN, repository: other, evidence: { ci: 'red' } } } } }
        : { text: 'ok' },
  );
  const pi = await env.startPi();
  const client = await env.client();
  await pi.prompt('record the plan');
  const runId = await onlyRun(client);
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const r = run.result;
  assert.deepEqual(
    { status: r.status, task: r.task, plan: r.plan, planDigest: r.planDigest, documentation: r.documentation.state, files: r.documentation.files, digests: r.documentation.digests, passed: r.verification.passed, file: r.file, changed: r.changed },
    { status: 'ready', task: 'empty input', plan: PLAN, planDigest: planDigest(PLAN), documentation: 'updated', files: ['docs/plans/empty-input.md'], digests: { 'docs/plans/empty-input.md': sha256(doc) }, passed: true, file: 'docs/plans/empty-input.md', changed: true },
  );
  assert.deepEqual(r.verification.commands, [{ command: 'npx markdownlint docs', outcome: 'no problems' }]);
  assert.equal(gitStatus(env.project), '', 'the project is untouched');
  const steps = env.model.requests.map((x) => textOf(x.last)).filter((t) => /Workflow step/.test(t));
  assert.deepEqual([...new Set(steps.map((t) => /, step: (\w+),/.exec(t)[1]))], ['inspect', 'update', 'verify']);
  const inspect = steps.find((t) => /step: inspect/.test(t));
  assert.match(inspect, /1\. Guard: Return \[\] when text is empty/);
  assert.ok(inspect.includes(`Repository: ${other}`), inspect);
  assert.match(inspect, /Evidence: \{"ci":"red"\}/);
  assert.match(steps.find((t) => /step: verify/.test(t)), /Documents written: docs\/plans\/empty-input\.md/);

  // No plan given: the model finds the chosen one in the project's plans, which already hold it.
  await pi.waitIdle();
  env.model.script = scripted(
    {
      locate: { route: 'found', plan: PLAN, sources: [PLAN_DOC], reason: 'the accepted plan for this task' },
      inspect: { route: 'current', files: [PLAN_DOC], reason: 'it records the whole plan' },
    },
    (t) => (/find and record/.test(t) ? { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'autodoc', input: { task: 'parse("") should give []' } } } } : { text: 'ok' }),
  );
  await pi.prompt('find and record');
  const foundId = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((x) => x.run_id !== runId)?.run_id, 'the second run');
  const found = await client.waitForRun(foundId, { timeoutMs: 60_000 });
  assert.equal(found.status, 'completed', found.error ?? found.review_reason);
  assert.deepEqual(
    { status: found.result.status, plan: found.result.plan, state: found.result.documentation.state, digests: found.result.documentation.digests, changed: found.result.changed },
    { status: 'ready', plan: PLAN, state: 'current', digests: { [PLAN_DOC]: sha256(readFileSync(join(env.project, PLAN_DOC))) }, changed: false },
  );
  assert.match(env.model.requests.map((x) => textOf(x.last)).find((t) => /step: locate/.test(t)), /Find the plan that was already chosen for this task: in this conversation/);

  // The checks fail: blocked, saying which. An update that changed nothing is sent back first.
  await pi.waitIdle();
  let updates = 0;
  env.model.script = scripted(
    {
      inspect: { route: 'update', files: ['docs/plans/README.md'], reason: 'the index lists plans' },
      update: () => {
        updates += 1;
        if (updates > 1) writeFileSync(join(env.project, 'docs', 'plans', 'README.md'), '# Plans\n\n- [empty input](empty-input.md\n');
        return { files: ['docs/plans/README.md'], summary: 'listed the plan' };
      },
      verify: { passed: false, commands: [{ command: 'npx markdown-link-check docs', outcome: '1 dead link' }], failures: ['docs/plans/README.md: an unclosed link'] },
    },
    (t) => (/link the plan/.test(t) ? { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'autodoc', input: { task: 'link it', plan: PLAN } } } } : { text: 'ok' }),
  );
  await pi.prompt('link the plan');
  const failedId = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((x) => x.run_id !== runId && x.run_id !== foundId)?.run_id, 'the third run');
  const failed = await client.waitForRun(failedId, { timeoutMs: 60_000 });
  assert.equal(failed.status, 'completed', failed.error ?? failed.review_reason);
  assert.deepEqual({ status: failed.result.status, stage: failed.result.stage, reason: failed.result.reason }, { status: 'blocked', stage: 'verify', reason: 'the documentation checks failed: docs/plans/README.md: an unclosed link' });
  assert.equal(updates, 2);
  assert.ok(
    env.model.requests.some((x) => /none of docs\/plans\/README\.md changed since the check/.test(textOf(x.last))),
    'the unchanged update was refused with why',
  );
  await pi.quit();
});

test('the tool lists the built-ins; a project file of the same name overrides one', async () => {
  env.model.script = ({ last }) => (last.role === 'tool' ? { text: 'done' } : { tool: { name: 'workflow', arguments: { action: 'list' } } });
  const pi = await env.startPi();
  let from = pi.mark();
  await pi.prompt('what workflows are there?');
  let listed = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the list', from);
  const workflows = listed.result.details.workflows;
  assert.deepEqual(workflows.filter((w) => w.scope === 'builtin').map((w) => w.name), ['autodoc', 'autoimplement', 'autoplan', 'monitor', 'plan-approval', 'plan-change', 'sanity-check']);
  await pi.waitSettled(from);
  const listFrom = pi.mark();
  await pi.prompt('/workflow list');
  await pi.waitNotify(/autoplan \(builtin: .*builtins\/autoplan\.workflow\.mjs\)/, listFrom);
  env.addWorkflow('notify.workflow.mjs', 'autodoc');
  await pi.waitSettled(from);
  from = pi.mark();
  await pi.prompt('and now?');
  listed = await pi.waitEvent((e) => e.type === 'tool_execution_end', 'the list again', from);
  assert.equal(listed.result.details.workflows.find((w) => w.name === 'autodoc').scope, 'project');
  await pi.quit();
});

const approvalInput = (extra = {}) => JSON.stringify({ task: 'empty input', plan: PLAN, planDigest: planDigest(PLAN), ...extra });

test('plan-approval shows the plan in its protected dialog: continue, and replan with instructions', async () => {
  const pi = await env.startPi();
  const client = await env.client();
  let from = pi.mark();
  await pi.prompt(`/workflow plan-approval --input-json ${approvalInput()}`);
  let dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the approval dialog', from);
  assert.match(dialog.title, /Approve the plan for: empty input/);
  assert.match(dialog.title, /### Steps\n\n1\. Guard: Return \[\] when text is empty \(src\/parse\.js\)/);
  assert.match(dialog.title, /### Checks\n\n- npm test/);
  assert.deepEqual(dialog.options.map((o) => o.split(' — ')[0]), ['Continue', 'Stop', 'Replan']);
  const first = await onlyRun(client);
  pi.respondUi(dialog.id, { value: dialog.options[0] });
  let run = await client.waitForRun(first, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.equal(run.result.status, 'continue');
  assert.equal(run.result.decidedBy, 'human');
  assert.deepEqual({ provenance: run.result.resolution.provenance, choice: run.result.resolution.decision.choice }, { provenance: 'human', choice: 'continue' });
  assert.equal(env.model.requests.length, 0, 'a person decided; no model turn');

  from = pi.mark();
  await pi.prompt(`/workflow builtin:plan-approval --input-json ${approvalInput({ revision: 2 })}`);
  dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the second dialog', from);
  assert.match(dialog.title, /revision 2/);
  const second = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== first)?.run_id, 'the second run');
  pi.respondUi(dialog.id, { value: dialog.options[2] });
  const ask = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the instructions dialog', from);
  assert.match(ask.title, /What should the new plan do differently\?/);
  pi.respondUi(ask.id, { value: 'also handle whitespace-only input' });
  run = await client.waitForRun(second, { timeoutMs: 30_000 });
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual({ status: run.result.status, instructions: run.result.instructions, revision: run.result.revision }, { status: 'replan', instructions: 'also handle whitespace-only input', revision: 2 });
  await pi.quit();
});

test("plan-approval's policy: auto continues by itself at timeoutMinutes on the host's test clock; skip never asks", async () => {
  // The host runs on a test clock: the deadline passes when this test moves it.
  const clock = join(env.root, 'clock');
  const advance = (ms) => {
    writeFileSync(`${clock}.tmp`, String(ms));
    renameSync(`${clock}.tmp`, clock);
  };
  const client = await Client.connect({ home: env.piwHome, hostBin, hostEnv: { HOME: env.home, PI_CODING_AGENT_DIR: env.agentDir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock } });
  try {
    const pi = await env.startPi();
    let from = pi.mark();
    await pi.prompt(`/workflow plan-approval --input-json ${approvalInput({ approval: { mode: 'auto', timeoutMinutes: 1 } })}`);
    await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the approval dialog', from);
    const runId = await onlyRun(client);
    advance(60_001);
    await client.runStatus(runId); // wakes a host asleep until the old deadline
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error);
    assert.deepEqual({ status: run.result.status, decidedBy: run.result.decidedBy, provenance: run.result.resolution.provenance }, { status: 'continue', decidedBy: 'timeout', provenance: 'timeout' });
    await pi.waitNotify(/was closed: nobody answered in time, so the workflow's onTimeout response was applied/, from);

    from = pi.mark();
    await pi.prompt(`/workflow plan-approval --input-json ${approvalInput({ approval: { mode: 'skip' } })}`);
    const skipped = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== runId)?.run_id, 'the skipped run');
    const done = await client.waitForRun(skipped, { timeoutMs: 30_000 });
    assert.deepEqual({ status: done.result.status, decidedBy: done.result.decidedBy, resolution: done.result.resolution }, { status: 'continue', decidedBy: 'skip', resolution: { provenance: 'skipped', revision: 1 } });
    assert.deepEqual((await client.runStatus(skipped)).decisions, [], 'no decision was made');
    assert.equal(pi.events.slice(from).filter((e) => e.type === 'extension_ui_request' && e.method === 'select').length, 0);
    assert.equal(existsSync(join(env.project, 'docs', 'plans', 'README.md')), true);
    await pi.quit();
  } finally {
    await client.close().catch(() => {});
  }
});

test('pi install brings the skills: one for operating workflows and one per built-in', async () => {
  const { code, out } = await env.piInstall();
  assert.equal(code, 0, out);
  const pi = await env.startPi({ sessionId: 'installed', extension: false, skills: true });
  const reply = await pi.send({ type: 'get_commands' });
  const skills = reply.data.commands.filter((c) => c.source === 'skill');
  assert.deepEqual(skills.map((c) => c.name).sort(), ['skill:autodoc', 'skill:autoimplement', 'skill:autoplan', 'skill:monitor', 'skill:pi-workflows', 'skill:plan-approval', 'skill:plan-change', 'skill:sanity-check']);
  for (const s of skills) assert.ok(s.description.length > 80, `${s.name} says when to use it`);
  assert.equal(pi.stderr.includes('skill'), false, pi.stderr);
  await pi.quit();

  // One turned off in Pi's settings (the package entry's skills filter), as the README says.
  const settingsFile = join(env.agentDir, 'settings.json');
  const settings = JSON.parse(readFileSync(settingsFile, 'utf8'));
  settings.packages = settings.packages.map((source) => ({ source, skills: ['!skills/autodoc'] }));
  writeFileSync(settingsFile, JSON.stringify(settings));
  const filtered = await env.startPi({ sessionId: 'filtered', extension: false, skills: true });
  const names = (await filtered.send({ type: 'get_commands' })).data.commands.filter((c) => c.source === 'skill').map((c) => c.name);
  assert.deepEqual(names.sort(), ['skill:autoimplement', 'skill:autoplan', 'skill:monitor', 'skill:pi-workflows', 'skill:plan-approval', 'skill:plan-change', 'skill:sanity-check']);
  await filtered.quit();
});

test('plan-change plans, documents and asks; a replan goes back to autoplan with the instructions and the evidence; replans are bounded (exits ready, blocked)', async () => {
  const doc = '# Plan: empty input\n\nReturn an empty list for empty input.\n';
  const planning = {
    'plan.frame': FRAME,
    'plan.options': OPTIONS,
    'plan.ideal': IDEAL,
    'plan.choose': CHOSEN,
    // After a replan the model follows the instructions: the plan changes.
    'plan.plan': (t) => (/What the person asked to change/.test(t) ? PLAN2 : PLAN),
    'doc.inspect': { route: 'update', files: ['docs/plans/empty-input-2.md'], reason: 'docs/plans holds plans' },
    'doc.update': (t) => {
      writeFileSync(join(env.project, 'docs', 'plans', 'empty-input-2.md'), /Whitespace/.test(t) ? `${doc}\n2. Whitespace\n` : doc);
      return { files: ['docs/plans/empty-input-2.md'], summary: 'recorded it' };
    },
    'doc.verify': { passed: true, commands: [], failures: [] },
  };
  env.model.script = scripted(planning);
  const pi = await env.startPi();
  const client = await env.client();
  let from = pi.mark();
  await pi.prompt('/workflow plan-change parse("") should give an empty list');
  let dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the first approval', from);
  assert.match(dialog.title, /1\. Guard: Return \[\] when text is empty/);
  // The default policy: it goes on by itself after 10 minutes, and says so.
  assert.match(dialog.title, /Nobody answering within 10 minutes continues with this plan/);
  assert.equal(readFileSync(join(env.project, 'docs', 'plans', 'empty-input-2.md'), 'utf8'), doc, 'documented before the approval');
  const runId = await onlyRun(client);
  const replanFrom = env.model.requests.length;
  const second = pi.mark();
  pi.respondUi(dialog.id, { value: dialog.options[2] });
  const ask = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the instructions', from);
  pi.respondUi(ask.id, { value: 'also cover whitespace-only input' });
  dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the second approval', second);
  assert.match(dialog.title, /revision 2/);
  assert.match(dialog.title, /Whitespace: Treat whitespace-only input as empty/);
  const framed = env.model.requests.slice(replanFrom).map((r) => textOf(r.last)).find((t) => /step: plan\.frame/.test(t));
  assert.match(framed, /What the person asked to change: also cover whitespace-only input/);
  assert.match(framed, /A plan made before .*"summary":"Return an empty list for empty input"/);
  pi.respondUi(dialog.id, { value: dialog.options[0] });
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const r = run.result;
  assert.deepEqual(
    { status: r.status, plan: r.plan, planDigest: r.planDigest, revision: r.revision, documents: r.documents, state: r.documentation.state, provenance: r.approval.provenance, documentedIn: r.documentedIn, decidedBy: r.decidedBy },
    { status: 'ready', plan: PLAN2, planDigest: planDigest(PLAN2), revision: 2, documents: ['docs/plans/empty-input-2.md'], state: 'updated', provenance: 'human', documentedIn: 'docs/plans/empty-input-2.md', decidedBy: 'human' },
  );

  // The reference's approval policy, required with one replan; the change's evidence reaches
  // planning and documentation. The second replan stops the change.
  await pi.waitIdle();
  from = pi.mark();
  const evidenceFrom = env.model.requests.length;
  const input = { task: 'again', newEvidence: { ci: 'whitespace fails' }, approval: { mode: 'required', maxReplans: 1 } };
  await pi.prompt(`/workflow builtin:plan-change --input-json ${JSON.stringify(input)}`);
  const bounded = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((x) => x.run_id !== runId)?.run_id, 'the second run');
  for (const round of [1, 2]) {
    const mark = round === 1 ? from : pi.mark();
    dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', `approval ${round}`, mark);
    assert.doesNotMatch(dialog.title, /Nobody answering within/, 'required mode has no deadline');
    if (round === 2) assert.match(dialog.title, /revision 2/);
    pi.respondUi(dialog.id, { value: dialog.options[2] });
    const why = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the instructions', mark);
    pi.respondUi(why.id, { value: `try harder ${round}` });
  }
  const stopped = await client.waitForRun(bounded, { timeoutMs: 60_000 });
  assert.equal(stopped.status, 'completed', stopped.error ?? stopped.review_reason);
  assert.deepEqual({ status: stopped.result.status, stage: stopped.result.stage, evidence: stopped.result.evidence }, { status: 'blocked', stage: 'approval', evidence: { replans: 2, limit: 1 } });
  assert.match(stopped.result.reason, /at most 1 replans/);
  const seen = env.model.requests.slice(evidenceFrom).map((r) => textOf(r.last));
  assert.match(seen.find((t) => /step: plan\.frame/.test(t)), /New evidence since then \(the plan must account for it\): \{"ci":"whitespace fails"\}/);
  assert.match(seen.find((t) => /step: doc\.inspect/.test(t)), /Evidence: \{"ci":"whitespace fails"\}/);
  // Two approval decisions, no third: the bound held.
  assert.equal((await client.runStatus(bounded)).decisions.filter((d) => d.kind === 'human_decision').length, 2);
  await pi.quit();
});
