// The built-in workflows (node-binding/builtins/): found by `builtin:<id>` and by name after the
// project's and the user's files, listed with them, importable as `piw/builtins` and
// `@osolmaz/pi-workflows/builtins`, included by `includeWorkflow('builtin:<id>')`, and verified
// on resume like any source. The runs use a copy of the package, so a test can change a
// built-in the way an upgrade of the installed package would.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { appendFileSync, cpSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { planDigest } from '../builtins/plan.mjs';
import { BUILTINS_DIR, listWorkflows, resolveWorkflow } from '../lib/workflow-names.js';
import { fixtureRepo } from './fixture-repo.mjs';
import { pkgDir, startHost, tempDir } from './helpers.mjs';

const IDS = ['autodoc', 'autoimplement', 'autoplan', 'monitor', 'plan-approval', 'plan-change', 'sanity-check'];

test('builtin:<id> names the built-in; a bare name finds it after the project and global files; both are listed', async () => {
  const dir = tempDir();
  const cwd = join(dir, 'p');
  const home = join(dir, 'h');
  mkdirSync(join(cwd, '.pi', 'workflows'), { recursive: true });
  mkdirSync(join(home, '.pi', 'agent', 'workflows'), { recursive: true });
  for (const id of IDS) {
    assert.deepEqual(await resolveWorkflow(`builtin:${id}`, cwd, home), { name: id, path: join(BUILTINS_DIR, `${id}.workflow.mjs`), scope: 'builtin' });
    assert.deepEqual(await resolveWorkflow(id, cwd, home), { name: id, path: join(BUILTINS_DIR, `${id}.workflow.mjs`), scope: 'builtin' });
  }
  let listed = await listWorkflows(cwd, home);
  assert.deepEqual(listed.filter((w) => w.scope === 'builtin').map((w) => w.name), IDS);

  // A global file, then a project file, of the same name overrides the built-in by name and in
  // the list; `builtin:` still names the built-in.
  const global = join(home, '.pi', 'agent', 'workflows', 'autoplan.workflow.mjs');
  writeFileSync(global, 'export default null;\n');
  assert.equal((await resolveWorkflow('autoplan', cwd, home)).path, global);
  const own = join(cwd, '.pi', 'workflows', 'autoplan.workflow.js');
  writeFileSync(own, 'export default null;\n');
  assert.deepEqual(await resolveWorkflow('autoplan', cwd, home), { name: 'autoplan', path: own, scope: 'project' });
  assert.equal((await resolveWorkflow('builtin:autoplan', cwd, home)).scope, 'builtin');
  listed = await listWorkflows(cwd, home);
  assert.deepEqual(listed.filter((w) => w.name === 'autoplan'), [{ name: 'autoplan', path: own, scope: 'project' }]);

  await assert.rejects(resolveWorkflow('builtin:nope', cwd, home), /no built-in workflow "nope"; the built-ins are autodoc, autoimplement, autoplan, monitor, plan-approval, plan-change, sanity-check/);
  await assert.rejects(resolveWorkflow('nope', cwd, home), /no workflow named "nope" .* nor among the built-ins/);
});

let host;
let copy;
let project;

before(async () => {
  // The package as an install has it (its code, built-ins and addon), its dependencies linked.
  const dir = tempDir('piw-builtins-');
  copy = join(dir, 'pkg');
  for (const f of ['package.json', 'index.js', 'worker.js', 'pi-cli.mjs', 'piw.linux-x64-gnu.node']) cpSync(join(pkgDir, f), join(copy, f));
  for (const d of ['lib', 'extension', 'builtins']) cpSync(join(pkgDir, d), join(copy, d), { recursive: true });
  symlinkSync(join(pkgDir, 'node_modules'), join(copy, 'node_modules'));
  host = await startHost({ PIW_NODE_WORKER: join(copy, 'worker.js'), PIW_NODE: process.execPath });
  project = join(host.dir, 'project');
  mkdirSync(join(project, '.pi', 'workflows'), { recursive: true });
});

after(async () => {
  await host?.stop();
});

function write(name, text) {
  const file = join(project, '.pi', 'workflows', name);
  writeFileSync(file, text);
  return file;
}

const PLAN = { summary: 'Fix the parser', steps: [{ title: 'Test', detail: 'Add a failing test' }, { title: 'Fix', detail: 'Handle empty input' }], checks: ['npm test'] };
const PLAN_DIGEST = planDigest(PLAN);

/** A project workflow that includes plan-approval by its built-in name. */
const approving = () =>
  write(
    'approve-it.workflow.mjs',
    `import { compute, defineWorkflow, includeWorkflow } from "piw";
export default defineWorkflow({
  name: "approve-it",
  startAt: "approval",
  includes: { approval: includeWorkflow("builtin:plan-approval") },
  nodes: { done: compute({ run: ({ outputs }) => outputs.approval }) },
  edges: [
    { from: "approval.continue", to: "done" },
    { from: "approval.stop", to: "done" },
    { from: "approval.replan", to: "done" },
  ],
});
`,
  );

async function parkedDecision(runId) {
  const parked = await host.client.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
  assert.equal(parked.status, 'waiting', JSON.stringify(parked));
  return (await host.client.runStatus(runId)).decisions.find((d) => d.status === 'pending');
}

test('includeWorkflow("builtin:plan-approval") runs the built-in; its decision shows the plan', async () => {
  const c = host.client;
  const file = approving();
  const skipped = await c.waitForRun((await c.startRun(file, { input: { task: 'parser', plan: PLAN, planDigest: PLAN_DIGEST, mode: 'skip' }, projectDir: project })).run_id, { timeoutMs: 30_000 });
  assert.equal(skipped.status, 'completed', JSON.stringify(skipped));
  assert.equal(skipped.result.exit, 'continue');
  assert.equal(skipped.result.output.decidedBy, 'skip');
  assert.deepEqual(skipped.result.output.resolution, { provenance: 'skipped', revision: 1 });
  assert.equal(skipped.result.output.planDigest, PLAN_DIGEST);
  // No decision was made at all.
  assert.deepEqual((await c.runStatus(skipped.run_id)).decisions, []);

  const { run_id: runId } = await c.startRun(file, { input: { task: 'parser', plan: PLAN, planDigest: PLAN_DIGEST }, projectDir: project });
  const d = await parkedDecision(runId);
  assert.equal(d.kind, 'human_decision', JSON.stringify(d));
  assert.match(d.request.question, /Approve the plan for: parser/);
  assert.match(d.request.details, /### Steps\n\n1\. Test: Add a failing test\n2\. Fix: Handle empty input/);
  assert.deepEqual(d.request.extra.presentation.sections.map((s) => s.title), ['Task', 'Summary', 'Steps', 'Checks']);
  assert.deepEqual(d.request.choices.map((ch) => ch.id), ['continue', 'stop', 'replan']);
  await c.answerHumanDecision(runId, d.decision_id, { choice: 'replan', text: 'use the new tokenizer' });
  const done = await c.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(done.status, 'completed', JSON.stringify(done));
  assert.equal(done.result.exit, 'replan');
  assert.equal(done.result.output.instructions, 'use the new tokenizer');
  assert.deepEqual(
    { provenance: done.result.output.resolution.provenance, choice: done.result.output.resolution.decision.choice, audience: done.result.output.resolution.decision.audience },
    { provenance: 'human', choice: 'replan', audience: 'operator' },
  );
});

test("plan-approval's policy: auto after 10 minutes for the operator by default; timeoutMinutes and audience as given; required has no deadline", async () => {
  const c = host.client;
  const file = approving();
  const asked = async (extra) => {
    const { run_id: runId } = await c.startRun(file, { input: { task: 'parser', plan: PLAN, planDigest: PLAN_DIGEST, ...extra }, projectDir: project });
    const d = await parkedDecision(runId);
    const approve = (await c.runStatus(runId)).attempts.find((a) => a.node_id === 'approval.approve');
    await c.cancelRun(runId);
    return { audience: d.request.audience, waits: approve.deadline_at == null ? null : approve.deadline_at - approve.started_at, details: d.request.details };
  };
  const byDefault = await asked({});
  assert.deepEqual({ audience: byDefault.audience, waits: byDefault.waits }, { audience: 'operator', waits: 10 * 60_000 });
  assert.match(byDefault.details, /Nobody answering within 10 minutes continues with this plan/);
  assert.deepEqual(await asked({ approval: { timeoutMinutes: 3, audience: 'ops' } }).then(({ audience, waits }) => ({ audience, waits })), { audience: 'ops', waits: 3 * 60_000 });
  assert.deepEqual(await asked({ approval: { mode: 'required' } }).then(({ waits }) => waits), null);
  // piw's older flat fields still work.
  assert.equal((await asked({ mode: 'auto', autoContinueMs: 90_000 })).waits, 90_000);
  // The reference's skip: no decision at all.
  const skipped = await c.waitForRun((await c.startRun(file, { input: { task: 'parser', plan: PLAN, planDigest: PLAN_DIGEST, approval: { mode: 'skip' } }, projectDir: project })).run_id, { timeoutMs: 30_000 });
  assert.deepEqual({ exit: skipped.result.exit, resolution: skipped.result.output.resolution }, { exit: 'continue', resolution: { provenance: 'skipped', revision: 1 } });
  assert.deepEqual((await c.runStatus(skipped.run_id)).decisions, []);
});

test('the planning built-ins refuse what they do not take, saying what to use instead', async () => {
  const { autoplanWorkflow, autodocWorkflow, planApprovalWorkflow, planChangeWorkflow } = await import('../builtins/index.js');
  const refuses = (workflow, input, message) => assert.throws(() => workflow.input(input), message, JSON.stringify(input));
  const approval = { task: 't', plan: PLAN, planDigest: PLAN_DIGEST };
  refuses(planApprovalWorkflow, { task: 't', plan: PLAN }, /plan-approval input needs planDigest: the plan's identity, as autoplan's result gives it/);
  refuses(planApprovalWorkflow, { ...approval, approval: { mode: 'required', timeoutMinutes: 5 } }, /timeoutMinutes applies only to mode "auto" .*leave it out or use mode "auto"/);
  refuses(planApprovalWorkflow, { ...approval, approval: { mode: 'auto' }, mode: 'skip' }, /give the approval policy once: move mode into approval: \{ mode, audience, timeoutMinutes, maxReplans \}/);
  refuses(planApprovalWorkflow, { ...approval, approval: { timeout: 5 } }, /plan-approval input approval has no field "timeout"; it takes mode, audience, timeoutMinutes, maxReplans/);
  refuses(planApprovalWorkflow, { ...approval, approval: { timeoutMinutes: 24 * 60 + 1 } }, /timeoutMinutes must be a whole number of minutes from 1 to 1440/);
  refuses(planApprovalWorkflow, { ...approval, approval: { maxReplans: 21 } }, /maxReplans must be a whole number from 0 to 20/);
  refuses(planApprovalWorkflow, { ...approval, reviewers: ['a'] }, /plan-approval input has no field "reviewers"; it takes task, plan, planDigest, approval, revision/);
  refuses(autoplanWorkflow, { problem: 'p', evidence: 'x' }, /autoplan input has no field "evidence"; it takes problem, task, scope, constraints, previousPlan, newEvidence, feedback/);
  refuses(autoplanWorkflow, { problem: 'p', task: 'q' }, /give the problem once, as problem/);
  refuses(autodocWorkflow, { task: 't', newEvidence: 1 }, /autodoc input has no field "newEvidence"; it takes task, plan, planDigest, repository, documents, evidence/);
  refuses(planChangeWorkflow, { task: 't', feedback: 'x' }, /plan-change input has no field "feedback"; it takes task, scope, constraints, repository, documents, previousPlan, newEvidence, approval/);
  refuses(planChangeWorkflow, { task: 't', approval: { mode: 'skip', timeoutMinutes: 1 } }, /plan-change approval timeoutMinutes applies only to mode "auto"/);
  // What each takes, resolved with the reference's defaults.
  assert.deepEqual(planChangeWorkflow.input({ task: 't' }).approval, { mode: 'auto', audience: 'operator', maxReplans: 3, autoContinueMs: 600_000, timeoutMinutes: 10 });
  assert.deepEqual(autoplanWorkflow.input({ problem: 'p', newEvidence: { ci: 'red' } }).newEvidence, { ci: 'red' });
  // An edge from an exit the included workflow does not have names the ones it has.
  const { compute, defineWorkflow, includeWorkflow } = await import('../index.js');
  assert.throws(
    () => defineWorkflow({ name: 'x', startAt: 'doc', includes: { doc: includeWorkflow(autodocWorkflow) }, nodes: { done: compute({ run: () => 1 }) }, edges: [{ from: 'doc.documented', to: 'done' }] }),
    /edge 0 from doc\.documented: autodoc \(mount doc\) has no exit "documented"; its exits are doc\.ready, doc\.blocked/,
  );
  // autodoc's repository must be a directory; the run says so.
  const run = await host.client.waitForRun(
    (await host.client.startRun(join(BUILTINS_DIR, 'autodoc.workflow.mjs'), { input: { task: 't', plan: PLAN, repository: 'no-such-repo' }, projectDir: project })).run_id,
    { timeoutMs: 30_000 },
  );
  assert.equal(run.status, 'failed', JSON.stringify(run));
  assert.match(run.error, /autodoc repository "no-such-repo" is not a directory: give the path of the repository whose documentation records the plan/);
});

test('piw/builtins and @osolmaz/pi-workflows/builtins resolve in a workflow file', async () => {
  const c = host.client;
  for (const [name, specifier] of [['reexport-a', '@osolmaz/pi-workflows/builtins'], ['reexport-b', 'piw/builtins']]) {
    const file = write(`${name}.workflow.ts`, `export { planApprovalWorkflow as default } from "${specifier}";\n`);
    const run = await c.waitForRun((await c.startRun(file, { input: { task: 't', plan: 'ship it', planDigest: planDigest('ship it'), mode: 'skip' }, projectDir: project })).run_id, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', `${specifier}: ${JSON.stringify(run)}`);
    assert.equal(run.result.status, 'continue');
  }
  // The reference's monitor re-exported: piw's loads, and checks its input.
  const monitor = write('reexport-monitor.workflow.ts', 'export { monitorWorkflow as default } from "@osolmaz/pi-workflows/builtins";\n');
  const checked = await c.waitForRun((await c.startRun(monitor, { input: {}, projectDir: project })).run_id, { timeoutMs: 30_000 });
  assert.equal(checked.status, 'failed', JSON.stringify(checked));
  assert.match(checked.error, /monitor input task .* must be a non-empty string/);
  // An export of the reference's piw lacks: the run fails to load, naming it.
  const file = write('lacking.workflow.ts', 'export { presentPlan as default } from "@osolmaz/pi-workflows/builtins";\n');
  const run = await c.waitForRun((await c.startRun(file, { input: {}, projectDir: project })).run_id, { timeoutMs: 30_000 });
  assert.equal(run.status, 'failed', JSON.stringify(run));
  assert.match(run.error, /does not provide an export named 'presentPlan'/);
});

test("pi-workflows' example that re-exports its autoplan loads unchanged and asks its first step", async () => {
  const c = host.client;
  // examples/workflows/autoplan.workflow.ts of pi-workflows 0.12.1, as it is.
  const file = write('example-autoplan.workflow.ts', 'export { autoplanWorkflow as default } from "@osolmaz/pi-workflows/builtins";\n');
  const { run_id: runId } = await c.startRun(file, { input: { problem: 'parse("") gives [0]' }, sessionId: 's-example', projectDir: project });
  const parked = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
  assert.equal(parked.status, 'waiting', JSON.stringify(parked));
  const [ask] = await c.listInteractions('s-example');
  assert.equal(ask.node_id, 'frame');
  assert.match(ask.request.prompt, /Problem: parse\(""\) gives \[0\]/);
  await c.cancelRun(runId);
});

test("pi-workflows' example that re-exports its autoimplement loads unchanged and, given a plan without its documentation, has it documented first", async () => {
  const c = host.client;
  // examples/workflows/autoimplement.workflow.ts of pi-workflows 0.12.1, as it is.
  const file = write('example-autoimplement.workflow.ts', 'export { autoimplementWorkflow as default } from "@osolmaz/pi-workflows/builtins";\n');
  // autoimplement works in a git repository (the reviewer diffs against the commit it started from).
  const repo = join(host.dir, 'impl-project');
  mkdirSync(repo);
  fixtureRepo(repo);
  const { run_id: runId } = await c.startRun(file, { input: { task: 'empty input', plan: PLAN }, sessionId: 's-example-impl', projectDir: repo });
  const parked = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
  assert.equal(parked.status, 'waiting', JSON.stringify(parked));
  const [ask] = await c.listInteractions('s-example-impl');
  assert.equal(ask.node_id, 'documentation.inspect', 'autodoc, included as documentation');
  assert.match(ask.request.prompt, /2\. Fix: Handle empty input/);
  await c.cancelRun(runId);
});

test('a built-in that changes while a run waits sends the run to review, as a changed file does', async () => {
  const c = host.client;
  const file = approving();
  // The included built-in itself, then a module it imports.
  for (const changed of ['plan-approval.workflow.mjs', 'plan.mjs']) {
    const { run_id: runId } = await c.startRun(file, { input: { task: 'parser', plan: PLAN, planDigest: PLAN_DIGEST }, projectDir: project });
    const d = await parkedDecision(runId);
    appendFileSync(join(copy, 'builtins', changed), '// changed by an upgrade\n');
    await c.answerHumanDecision(runId, d.decision_id, { choice: 'continue' });
    const stopped = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    assert.equal(stopped.status, 'review', `${changed}: ${JSON.stringify(stopped)}`);
    assert.match((await c.runStatus(runId)).run.review_reason, new RegExp(changed.replace('.', '\\.')));
    await c.cancelRun(runId);
  }
  // A run started on the built-in directly: its root is verified like any root.
  const root = join(copy, 'builtins', 'plan-approval.workflow.mjs');
  const { run_id: direct } = await c.startRun(root, { input: { task: 'parser', plan: PLAN, planDigest: PLAN_DIGEST }, projectDir: project });
  const d = await parkedDecision(direct);
  appendFileSync(root, '// changed again\n');
  await c.answerHumanDecision(direct, d.decision_id, { choice: 'continue' });
  const stopped = await c.waitForRun(direct, { untilParked: true, timeoutMs: 30_000 });
  assert.equal(stopped.status, 'review', JSON.stringify(stopped));
  await c.cancelRun(direct);
});

/**
 * A workflow in the style of pi-workflows' `examples/workflows/approved-plan.workflow.ts`: it
 * includes plan-change from pi-workflows' own source tree, with the reference's approval input,
 * and routes on the reference's exits.
 */
const APPROVED_PLAN = `import { compute, defineWorkflow, includeWorkflow } from "@osolmaz/pi-workflows";
import changePlan from "../../src/builtins/plan-change.workflow.js";

type Request = { task: string };

export default defineWorkflow({
  name: "reviewed-plan",
  startAt: "begin",
  maxSteps: 60,
  includes: {
    change: includeWorkflow(changePlan, {
      input: ({ input }) => ({
        task: (input as Request).task,
        approval: { mode: "auto" as const, audience: "maintainers", timeoutMinutes: 5, maxReplans: 1 },
      }),
    }),
  },
  nodes: {
    begin: compute({ run: () => ({ route: "plan" }) }),
    accepted: compute({ run: ({ outputs }) => ({ outcome: "accepted", change: outputs.change }) }),
    refused: compute({ run: ({ outputs }) => ({ outcome: "refused", change: outputs.change }) }),
  },
  edges: [
    { from: "begin", to: "change" },
    { from: "change.ready", to: "accepted" },
    { from: "change.blocked", to: "refused" },
  ],
});
`;

/** Answers the run's steps from `answers` (node id -> output) and its decision with `decide`. */
async function drive(c, runId, session, answers, decide) {
  for (;;) {
    const run = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    if (run.status !== 'waiting') return run;
    const [ask] = (await c.listInteractions(session)).filter((i) => i.run_id === runId);
    if (ask) {
      assert.ok(Object.hasOwn(answers, ask.node_id), `no answer for ${ask.node_id}`);
      // A function is the model's work before it answers (an edit), returning the answer.
      const answer = typeof answers[ask.node_id] === 'function' ? answers[ask.node_id](ask) : answers[ask.node_id];
      const { submission_id } = await c.submitInteraction(ask, answer);
      const verdict = await c.waitForSubmission(runId, submission_id);
      assert.equal(verdict.state, 'accepted', JSON.stringify(verdict));
      continue;
    }
    const d = (await c.runStatus(runId)).decisions.find((x) => x.status === 'pending');
    assert.ok(d, JSON.stringify(run));
    await c.answerHumanDecision(runId, d.decision_id, await decide(d));
  }
}

test("a copy of pi-workflows' approved-plan example: its import of the reference's source tree fails with the line that fixes it; with that line it runs", async () => {
  const c = host.client;
  const file = write('reviewed-plan.workflow.ts', APPROVED_PLAN);
  const failed = await c.waitForRun((await c.startRun(file, { input: { task: 'parser' }, projectDir: project })).run_id, { timeoutMs: 30_000 });
  assert.equal(failed.status, 'failed', JSON.stringify(failed));
  const fix = /import \{ planChangeWorkflow as changePlan \} from "@osolmaz\/pi-workflows\/builtins";/.exec(failed.error);
  assert.ok(fix, failed.error);
  assert.match(failed.error, /"\.\.\/\.\.\/src\/builtins\/plan-change\.workflow\.js": it is in pi-workflows' own source tree/);
  // One piw does not have says so.
  const other = write('other-builtin.workflow.ts', 'export { default } from "../../src/builtins/no-such-thing.workflow.js";\n');
  const lacking = await c.waitForRun((await c.startRun(other, { input: {}, projectDir: project })).run_id, { timeoutMs: 30_000 });
  assert.match(lacking.error, /it is in pi-workflows' own source tree, which piw does not have, and piw has no built-in "no-such-thing"/);

  // The one line changed as the error says; nothing else.
  writeFileSync(file, APPROVED_PLAN.replace('import changePlan from "../../src/builtins/plan-change.workflow.js";', fix[0]));
  const PLANNED = {
    'change.plan.frame': { problem: 'parse("") gives [0]', success: ['npm test passes'], inScope: ['src'], outOfScope: [] },
    'change.plan.options': {
      options: [
        { id: 'guard', title: 'Guard', approach: 'Return [] for empty input', tradeoffs: ['a branch'] },
        { id: 'rewrite', title: 'Rewrite', approach: 'A tokenizer', tradeoffs: ['more code'] },
      ],
    },
    'change.plan.ideal': { ideal: 'a parser that cannot misread input', beyondReach: [], worth: ['fewer bugs'] },
    'change.plan.choose': { status: 'ready', chosen: 'guard', why: 'smallest', againstIdeal: 'a step toward it', leftOut: [], rejected: [{ id: 'rewrite', reason: 'too big' }] },
    'change.plan.plan': PLAN,
    'change.doc.inspect': { route: 'blocked', reason: 'no docs folder' },
  };
  // Ready: planned, documented, and continued by the audience the input named.
  mkdirSync(join(project, 'docs'), { recursive: true });
  const { run_id: readyId } = await c.startRun(file, { input: { task: 'parser' }, sessionId: 's-approved', projectDir: project });
  let audience = null;
  let waits = null;
  const documented = {
    ...PLANNED,
    'change.doc.inspect': { route: 'update', files: ['docs/parser-plan.md'], reason: 'docs' },
    'change.doc.update': () => {
      writeFileSync(join(project, 'docs', 'parser-plan.md'), '# Parser plan\n');
      return { files: ['docs/parser-plan.md'], summary: 'recorded the parser plan' };
    },
    'change.doc.verify': { passed: true, commands: [], failures: [] },
  };
  const ready = await drive(c, readyId, 's-approved', documented, async (d) => {
    audience = d.request.audience;
    // The auto mode's wait is the input's timeoutMinutes.
    const approve = (await c.runStatus(readyId)).attempts.find((a) => a.node_id === 'change.approval.approve');
    waits = approve.deadline_at - approve.started_at;
    return { choice: 'continue' };
  });
  assert.equal(ready.status, 'completed', ready.error ?? ready.review_reason);
  assert.equal(audience, 'maintainers');
  assert.equal(ready.result.outcome, 'accepted');
  assert.equal(ready.result.change.exit, 'ready');
  const out = ready.result.change.output;
  assert.deepEqual(
    { status: out.status, task: out.task, revision: out.revision, documents: out.documents, documentedIn: out.documentedIn, decidedBy: out.decidedBy, provenance: out.approval.provenance, state: out.documentation.state },
    { status: 'ready', task: 'parser', revision: 1, documents: ['docs/parser-plan.md'], documentedIn: 'docs/parser-plan.md', decidedBy: 'human', provenance: 'human', state: 'updated' },
  );
  // autoplan's plan, normalised (no risks given: an empty list), and its digest.
  assert.deepEqual(out.plan, { ...PLAN, risks: [] });
  assert.equal(out.planDigest, planDigest({ ...PLAN, risks: [] }));
  assert.equal(out.documentation.digests['docs/parser-plan.md'], `sha256:${createHash('sha256').update('# Parser plan\n').digest('hex')}`);
  assert.equal(waits, 5 * 60_000);

  // Blocked: the documentation could not be written.
  const { run_id: blockedId } = await c.startRun(file, { input: { task: 'parser' }, sessionId: 's-blocked', projectDir: project });
  const blocked = await drive(c, blockedId, 's-blocked', PLANNED, () => assert.fail('no decision'));
  assert.equal(blocked.status, 'completed', blocked.error ?? blocked.review_reason);
  assert.equal(blocked.result.outcome, 'refused');
  const { evidence, ...why } = blocked.result.change.output;
  assert.equal(blocked.result.change.exit, 'blocked');
  assert.deepEqual(why, { status: 'blocked', task: 'parser', stage: 'doc', reason: 'no docs folder', planDigest: planDigest({ ...PLAN, risks: [] }) });
  assert.equal(evidence.stage, 'inspect');
});

test('plan-change: a revision that gives the same plan again is not documented or asked about: blocked; autoplan gives its plan step 30 minutes', async () => {
  const c = host.client;
  const same = {
    'plan.frame': { problem: 'p', success: ['npm test passes'], inScope: ['src'], outOfScope: [] },
    'plan.options': {
      options: [
        { id: 'guard', title: 'Guard', approach: 'Return [] for empty input', tradeoffs: ['a branch'] },
        { id: 'rewrite', title: 'Rewrite', approach: 'A tokenizer', tradeoffs: ['more code'] },
      ],
    },
    'plan.ideal': { ideal: 'i', beyondReach: [], worth: [] },
    'plan.choose': { status: 'ready', chosen: 'guard', why: 'smallest', againstIdeal: 'close', leftOut: [], rejected: [{ id: 'rewrite', reason: 'too big' }] },
    'plan.plan': PLAN,
  };
  const previousPlan = { ...PLAN, risks: [] };
  const { run_id: runId } = await c.startRun(join(BUILTINS_DIR, 'plan-change.workflow.mjs'), {
    input: { task: 'parser', previousPlan, newEvidence: 'the tests still fail' },
    sessionId: 's-same',
    projectDir: project,
  });
  const run = await drive(c, runId, 's-same', same, () => assert.fail('no decision for an unchanged plan'));
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(
    { status: run.result.status, stage: run.result.stage, changed: run.result.evidence.changed, previous: run.result.evidence.previousPlanDigest },
    { status: 'blocked', stage: 'plan', changed: false, previous: planDigest(previousPlan) },
  );
  assert.match(run.result.reason, /planning gave the same plan again/);
  const { autoplanWorkflow } = await import('../builtins/index.js');
  assert.equal(autoplanWorkflow.graph.nodes.plan.timeout_ms, 30 * 60_000);
});

test('monitor: a repair whose facts come back unchanged is not tried again; a failure gets at most three direct actions; the checks are counted', async () => {
  const { monitorWorkflow } = await import('../builtins/index.js');
  const tally = monitorWorkflow.nodes.tally.run;
  const input = { task: 't', stopWhen: 's', everyMinutes: 5, maxChecks: 10 };
  const act = (kind, failureId = 'f1', stateId = 's1') => ({ route: 'act', action: { kind, next: 'do it', failureId, stateId } });
  // Each check goes through tally with the tally before it, as the runtime gives `outputs`.
  const checks = (observations) => {
    let before;
    return observations.map((observe) => (before = tally({ input, outputs: { observe, ...(before ? { tally: before } : {}) } })));
  };

  const repairs = checks([act('repair'), act('repair', 'f1', 's2'), act('repair', 'f1', 's1')]);
  assert.deepEqual(repairs.map((t) => t.route), ['repair', 'repair', 'stop']);
  assert.match(repairs[2].reason, /the repair of f1 did not change what the check sees \(s1\); not repairing it again/);

  const direct = checks([act('recover'), act('advance'), { route: 'wait' }, act('recover', 'f2'), act('recover'), act('recover')]);
  assert.deepEqual(direct.map((t) => t.route), ['direct', 'direct', 'wait', 'direct', 'direct', 'stop']);
  assert.match(direct[5].reason, /3 actions for f1 did not resolve it/);
  assert.deepEqual(direct.map((t) => t.checks), [1, 2, 3, 4, 5, 6]);

  const limited = checks(Array.from({ length: 10 }, () => ({ route: 'wait' })));
  assert.deepEqual(limited.map((t) => t.route), [...Array(9).fill('wait'), 'limit']);
  // The goal reached on the last allowed check is `done`, not `limit`.
  assert.equal(checks([...Array(9).fill({ route: 'wait' }), { route: 'done' }])[9].route, 'done');
});

test("monitor: a repair's baseBranch and merge are kept for autoimplement; a merge that is not a boolean is refused", async () => {
  const { monitorWorkflow } = await import('../builtins/index.js');
  const repair = (r) => monitorWorkflow.input({ task: 't', repair: r }).repair;
  assert.deepEqual(repair({ baseBranch: 'release', merge: true }), { authorized: true, baseBranch: 'release', merge: true });
  assert.deepEqual(repair(undefined), { authorized: true });
  assert.throws(() => repair({ merge: 'yes' }), /repair\.merge must be true .* or false/);
});

test("sanity-check: the reference's input, areas and verdicts; lenses refused with what to use; an unsupported claim is removed", async () => {
  const sanity = await import('../builtins/sanity-check.workflow.mjs');
  const readInput = sanity.default.input;
  assert.deepEqual(readInput({}), { mode: 'serial', reviewTimeoutMs: 20 * 60_000, maxConcurrency: 1 });
  assert.deepEqual(readInput({ mode: 'parallel', baseRef: 'origin/main' }), { mode: 'parallel', baseRef: 'origin/main', reviewTimeoutMs: 20 * 60_000, maxConcurrency: 4 });
  assert.throws(() => readInput({ lenses: ['necessity'] }), /input\.lenses is not taken: every run reviews the four areas necessity, duplication, contracts, scope_tests/);
  assert.throws(() => readInput({ mode: 'serial', maxConcurrency: 2 }), /maxConcurrency applies to mode "parallel"/);
  assert.throws(() => readInput({ baseRef: '--output=x' }), /plain git reference/);
  assert.deepEqual(sanity.reviewersFor('serial').map((r) => [r.id, r.areas]), [['review', ['necessity', 'duplication', 'contracts', 'scope_tests']]]);
  assert.deepEqual(sanity.reviewersFor('parallel').map((r) => r.areas), [['necessity'], ['duplication'], ['contracts'], ['scope_tests']]);
  assert.deepEqual(sanity.VERDICTS, ['keep', 'simplify', 'refactor', 'drop', 'needs_evidence']);

  const finding = (area, assessment, evidence) => ({ area, assessment, summary: `${area} said`, evidence });
  const ev = (path, symbol) => ({ path, symbol, detail: 'shows it' });
  const verification = (verdict, findings) => ({ verdict, summary: 's', findings, requiredChanges: [], questionsForContributor: [], unknowns: [] });
  const four = [finding('necessity', 'pass', [ev('a.js', 'parse')]), finding('duplication', 'unclear', []), finding('contracts', 'concern', [ev('pull request', 'body')]), finding('scope_tests', 'pass', [ev('a.test.js', 'empty input')])];
  assert.equal(sanity.checkVerification(verification('refactor', four)).verdict, 'refactor');
  assert.throws(() => sanity.checkVerification(verification('rework', four)), /verdict must be one of keep, simplify, refactor, drop, needs_evidence/);
  assert.throws(() => sanity.checkVerification(verification('keep', four.slice(1))), /exactly one entry for each of necessity, duplication, contracts, scope_tests \(missing necessity\)/);
  assert.throws(() => sanity.checkVerification(verification('keep', [finding('necessity', 'pass', []), ...four.slice(1)])), /the necessity finding says pass: it needs evidence/);
  assert.throws(() => sanity.checkReview({ areas: four, acceptanceCase: 'x' }, ['necessity']), /not asked: duplication, contracts, scope_tests/);

  // Claims checked against a repository: a missing file, a symbol not in its file, a file the
  // change deleted (in the diff), and evidence that is no file (kept).
  const repository = tempDir();
  writeFileSync(join(repository, 'a.js'), 'export const parse = () => [];\n');
  const context = { repository, diff: '--- a/old.js\n+++ /dev/null\n-export function legacyParse() {}\n' };
  const result = sanity.dropUnsupported(
    verification('simplify', [
      finding('necessity', 'pass', [ev('a.js', 'parse()'), ev('./a.js:1', 'function frobnicate')]),
      finding('duplication', 'concern', [ev('src/registry.js', 'registerParser')]),
      finding('contracts', 'concern', [ev('pull request', 'body'), ev('old.js', 'legacyParse')]),
      finding('scope_tests', 'unclear', [ev('../outside.js', 'x')]),
    ]),
    context,
  );
  assert.deepEqual(result.removedClaims.map((c) => [c.area, c.path, c.reason]), [
    ['necessity', './a.js:1', 'function frobnicate is not in ./a.js:1'],
    ['duplication', 'src/registry.js', 'src/registry.js is not in the repository'],
    ['scope_tests', '../outside.js', '../outside.js is outside the repository'],
  ]);
  assert.deepEqual(result.findings.map((f) => [f.area, f.assessment, f.evidence.length]), [['necessity', 'pass', 1], ['duplication', 'unclear', 0], ['contracts', 'concern', 2], ['scope_tests', 'unclear', 0]]);
  assert.deepEqual(result.unknowns, ['duplication: the evidence for "duplication said" is not in the repository, so the finding is unclear']);
});
