// The built-in workflows end to end: real Pi with the extension, the mock model answering each
// step as the test scripts it, a fixture git repository made here (a small project whose check
// fails). autoplan (a plan; a blocked plan), autodoc (the plan written into the project's docs
// by the workflow; blocked), plan-approval (continue; replan with a text; auto-continue at its
// deadline on the host's test clock), plan-change (a replan round, then approved; bounded
// replans), and the package's skills.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { Client } from '../../index.js';
import { hostBin, piEnv, until } from './harness.mjs';

let env;
beforeEach(async () => {
  env = await piEnv();
  fixtureRepo(env.project);
});
afterEach(async () => {
  await env?.close();
});

/** A small project under git: a parser whose test fails, and a docs folder for plans. */
function fixtureRepo(dir) {
  mkdirSync(join(dir, 'src'), { recursive: true });
  mkdirSync(join(dir, 'docs', 'plans'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'fixture', type: 'module', scripts: { test: 'node --test' } }, null, 2));
  writeFileSync(join(dir, 'src', 'parse.js'), 'export const parse = (text) => text.split(",").map(Number);\n');
  writeFileSync(
    join(dir, 'src', 'parse.test.js'),
    'import assert from "node:assert"; import test from "node:test"; import { parse } from "./parse.js";\ntest("empty input", () => assert.deepEqual(parse(""), []));\n',
  );
  writeFileSync(join(dir, 'docs', 'plans', 'README.md'), '# Plans\n\nOne file per accepted plan.\n');
  const git = (...args) => {
    const r = spawnSync('git', ['-c', 'user.name=Fixture', '-c', 'user.email=fixture@example.invalid', ...args], { cwd: dir, encoding: 'utf8', env: { ...env.env } });
    assert.equal(r.status, 0, r.stderr);
  };
  git('init', '-q');
  git('add', '-A');
  git('commit', '-q', '-m', 'fixture');
}

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
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step.id, output: answers[step.node] } } };
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
const PLAN = {
  summary: 'Return an empty list for empty input',
  steps: [{ title: 'Guard', detail: 'Return [] when text is empty', files: ['src/parse.js'] }],
  checks: ['npm test'],
  risks: ['none known'],
};

async function onlyRun(client, sessionId = 'session-a') {
  return until(async () => (await client.listRuns({ sessionId }))[0]?.run_id, 'the run');
}

test('autoplan frames, compares, chooses and plans (ready); a choice it cannot carry out ends blocked', async () => {
  env.model.script = scripted({
    frame: FRAME,
    options: OPTIONS,
    choose: { status: 'ready', chosen: 'guard', why: 'smallest change', rejected: [{ id: 'rewrite', reason: 'too much for one bug' }] },
    plan: PLAN,
  });
  const pi = await env.startPi();
  const client = await env.client();
  await pi.prompt('/workflow autoplan parse("") should give an empty list');
  const runId = await onlyRun(client);
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.status, 'ready');
  assert.equal(run.result.task, 'parse("") should give an empty list');
  assert.equal(run.result.choice.chosen, 'guard');
  assert.deepEqual(run.result.plan, PLAN);
  assert.match(run.result.planDigest, /^sha256:[0-9a-f]{64}$/);
  assert.match(run.source_root, /builtins\/autoplan\.workflow\.mjs$/);
  // The steps the model saw: each framed with the problem; nothing was written.
  const prompts = env.model.requests.map((r) => textOf(r.last)).filter((t) => /Workflow step/.test(t));
  // (A step message steered into a running turn may end two model requests.)
  assert.deepEqual([...new Set(prompts.map((t) => /, step: (\w+),/.exec(t)[1]))], ['frame', 'options', 'choose', 'plan']);
  assert.match(prompts[0], /Problem: parse\(""\) should give an empty list/);
  assert.equal(spawnSync('git', ['status', '--porcelain'], { cwd: env.project, encoding: 'utf8' }).stdout, '');

  env.model.script = scripted({
    frame: FRAME,
    options: OPTIONS,
    choose: { status: 'blocked', chosen: 'guard', why: 'the test may be wrong', rejected: [{ id: 'rewrite', reason: 'same doubt' }], blocker: 'Nobody said whether "" is valid input' },
  });
  const replanFrom = env.model.requests.length;
  const replanInput = { problem: 'decide what parse("") means', constraints: ['no new dependencies'], previousPlan: PLAN, feedback: 'also cover whitespace-only input' };
  await pi.prompt(`/workflow builtin:autoplan --input-json ${JSON.stringify(replanInput)}`);
  const blockedId = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== runId)?.run_id, 'the second run');
  const blocked = await client.waitForRun(blockedId, { timeoutMs: 60_000 });
  assert.equal(blocked.status, 'completed', blocked.error ?? blocked.review_reason);
  assert.equal(blocked.result.status, 'blocked');
  assert.equal(blocked.result.reason, 'Nobody said whether "" is valid input');
  // A replan: the earlier plan and the person's instructions reach the model with the problem.
  const framed = env.model.requests.slice(replanFrom).map((r) => textOf(r.last)).find((t) => /step: frame/.test(t));
  assert.match(framed, /Constraints:\n- no new dependencies/);
  assert.match(framed, /A plan made before .*"summary":"Return an empty list for empty input"/);
  assert.match(framed, /What the person asked to change: also cover whitespace-only input/);
  await pi.quit();
});

test('autodoc, started by the tool, has the workflow write the plan into the docs; a project with no place for it ends blocked', async () => {
  const doc = '# Plan: empty input\n\nReturn an empty list for empty input.\n\n1. Guard: return [] when text is empty (src/parse.js)\n';
  env.model.script = scripted(
    { inspect: { route: 'update', file: 'docs/plans/empty-input.md', content: doc, reason: 'docs/plans holds one file per plan' } },
    (t) => (/record the plan/.test(t) ? { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'builtin:autodoc', input: { task: 'empty input', plan: PLAN } } } } : { text: 'ok' }),
  );
  const pi = await env.startPi();
  const client = await env.client();
  await pi.prompt('record the plan');
  const runId = await onlyRun(client);
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(
    { status: run.result.status, file: run.result.file, changed: run.result.changed },
    { status: 'documented', file: 'docs/plans/empty-input.md', changed: true },
  );
  assert.equal(readFileSync(join(env.project, 'docs', 'plans', 'empty-input.md'), 'utf8'), doc);
  // The write was the workflow's managed effect, with its receipt.
  const { effects } = await client.runStatus(runId);
  assert.equal(effects.length, 1, JSON.stringify(effects));
  assert.match(JSON.stringify(effects[0]), /:doc_write:write:/);
  assert.equal(effects[0].state, 'applied', JSON.stringify(effects));
  // The step showed the plan itself.
  assert.match(env.model.requests.map((r) => textOf(r.last)).find((t) => /step: inspect/.test(t)), /1\. Guard: Return \[\] when text is empty/);

  env.model.script = scripted(
    { inspect: { route: 'blocked', reason: 'the project forbids docs changes without review' } },
    (t) => (/again/.test(t) ? { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'autodoc', input: { task: 'again', plan: 'a text plan' } } } } : { text: 'ok' }),
  );
  // The run completed when the step's answer committed; Pi may still be finishing that turn.
  await pi.waitIdle();
  await pi.prompt('again');
  const blockedId = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== runId)?.run_id, 'the second run');
  const blocked = await client.waitForRun(blockedId, { timeoutMs: 60_000 });
  assert.equal(blocked.status, 'completed', blocked.error ?? blocked.review_reason);
  assert.equal(blocked.result.status, 'blocked');
  assert.equal(spawnSync('git', ['status', '--porcelain'], { cwd: env.project, encoding: 'utf8' }).stdout, '?? docs/plans/empty-input.md\n');
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

const approvalInput = (extra = {}) => JSON.stringify({ task: 'empty input', plan: PLAN, ...extra });

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

test('plan-approval in auto mode continues by itself at its deadline; skip never asks', async () => {
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
    await pi.prompt(`/workflow plan-approval --input-json ${approvalInput({ mode: 'auto', autoContinueMs: 60_000 })}`);
    await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the approval dialog', from);
    const runId = await onlyRun(client);
    advance(60_001);
    await client.runStatus(runId); // wakes a host asleep until the old deadline
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error);
    assert.deepEqual({ status: run.result.status, decidedBy: run.result.decidedBy }, { status: 'continue', decidedBy: 'timeout' });
    await pi.waitNotify(/was closed: nobody answered in time, so the workflow's onTimeout response was applied/, from);

    from = pi.mark();
    await pi.prompt(`/workflow plan-approval --input-json ${approvalInput({ mode: 'skip' })}`);
    const skipped = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== runId)?.run_id, 'the skipped run');
    const done = await client.waitForRun(skipped, { timeoutMs: 30_000 });
    assert.deepEqual({ status: done.result.status, decidedBy: done.result.decidedBy }, { status: 'continue', decidedBy: 'skip' });
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

test('plan-change plans, documents and asks; a replan goes back to autoplan with the instructions; replans are bounded (exits ready, blocked)', async () => {
  const doc = '# Plan: empty input\n\nReturn an empty list for empty input.\n';
  env.model.script = scripted({
    'plan.frame': FRAME,
    'plan.options': OPTIONS,
    'plan.choose': { status: 'ready', chosen: 'guard', why: 'smallest change', rejected: [{ id: 'rewrite', reason: 'too much' }] },
    'plan.plan': PLAN,
    'doc.inspect': { route: 'update', file: 'docs/plans/empty-input.md', content: doc, reason: 'docs/plans holds plans' },
  });
  const pi = await env.startPi();
  const client = await env.client();
  let from = pi.mark();
  await pi.prompt('/workflow plan-change parse("") should give an empty list');
  let dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the first approval', from);
  assert.match(dialog.title, /1\. Guard: Return \[\] when text is empty/);
  assert.equal(readFileSync(join(env.project, 'docs', 'plans', 'empty-input.md'), 'utf8'), doc, 'documented before the approval');
  const runId = await onlyRun(client);
  const replanFrom = env.model.requests.length;
  const second = pi.mark();
  pi.respondUi(dialog.id, { value: dialog.options[2] });
  const ask = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the instructions', from);
  pi.respondUi(ask.id, { value: 'also cover whitespace-only input' });
  dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the second approval', second);
  assert.match(dialog.title, /revision 2/);
  const framed = env.model.requests.slice(replanFrom).map((r) => textOf(r.last)).find((t) => /step: plan\.frame/.test(t));
  assert.match(framed, /What the person asked to change: also cover whitespace-only input/);
  pi.respondUi(dialog.id, { value: dialog.options[0] });
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(
    { status: run.result.status, documentedIn: run.result.documentedIn, decidedBy: run.result.decidedBy },
    { status: 'ready', documentedIn: 'docs/plans/empty-input.md', decidedBy: 'human' },
  );

  // No replan allowed: the first replan stops the change.
  from = pi.mark();
  await pi.prompt(`/workflow builtin:plan-change --input-json ${JSON.stringify({ task: 'again', maxReplans: 0 })}`);
  dialog = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'select', 'the approval', from);
  const bounded = await until(async () => (await client.listRuns({ sessionId: 'session-a' })).find((r) => r.run_id !== runId)?.run_id, 'the second run');
  pi.respondUi(dialog.id, { value: dialog.options[2] });
  const why = await pi.waitEvent((e) => e.type === 'extension_ui_request' && e.method === 'input', 'the instructions', from);
  pi.respondUi(why.id, { value: 'try harder' });
  const stopped = await client.waitForRun(bounded, { timeoutMs: 60_000 });
  assert.equal(stopped.status, 'completed', stopped.error ?? stopped.review_reason);
  assert.deepEqual({ status: stopped.result.status, stage: stopped.result.stage }, { status: 'blocked', stage: 'approval' });
  assert.match(stopped.result.reason, /at most 0 replans/);
  await pi.quit();
});
