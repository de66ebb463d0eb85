// The sanity-check built-in end to end: real Pi with the extension starts the run; the reviewers
// are Pi processes of their own (the package's Pi) that talk to the same mock model on
// 127.0.0.1; a fixture git repository with a change to review; `gh` is a fake on PATH (or
// absent), never the network.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { Client } from '../../index.js';
import { WAIT_MS, alive, piEnv, stopHost, until } from './harness.mjs';

let env;
let releaseHeld;
beforeEach(async () => {
  env = await piEnv();
  fixtureRepo(env.project);
});
afterEach(async () => {
  releaseHeld?.();
  await env?.close();
});

const git = (dir, ...args) => {
  const r = spawnSync('git', ['-c', 'user.name=Fixture', '-c', 'user.email=fixture@example.invalid', ...args], { cwd: dir, encoding: 'utf8', env: { ...env.env } });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
};

/** A project under git: a parser with a failing test, then a commit that fixes it. */
function fixtureRepo(dir) {
  mkdirSync(join(dir, 'src'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'fixture', type: 'module', scripts: { test: 'node --test' } }, null, 2));
  writeFileSync(join(dir, 'src', 'parse.js'), 'export const parse = (text) => text.split(",").map(Number);\n');
  writeFileSync(
    join(dir, 'src', 'parse.test.js'),
    'import assert from "node:assert"; import test from "node:test"; import { parse } from "./parse.js";\ntest("empty input", () => assert.deepEqual(parse(""), []));\n',
  );
  writeFileSync(join(dir, '.gitignore'), '.pi/\n');
  git(dir, 'init', '-q');
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'fixture');
  writeFileSync(join(dir, 'src', 'parse.js'), 'export const parse = (text) => (text === "" ? [] : text.split(",").map(Number));\n');
  git(dir, 'commit', '-q', '-am', 'parse: guard empty input');
}

/** A `gh` that answers `pr view` with a pull request, on a PATH of its own. */
function fakeGh() {
  const bin = join(env.root, 'bin');
  mkdirSync(bin, { recursive: true });
  const pr = { number: 7, title: 'Guard empty input in parse', body: 'Fixes #3: parse("") gave [0].', url: 'https://example.invalid/pr/7', baseRefName: 'main', headRefName: 'fix' };
  writeFileSync(join(bin, 'gh'), `#!/bin/sh\n[ "$1 $2" = "pr view" ] || exit 2\necho '${JSON.stringify(pr)}'\n`);
  chmodSync(join(bin, 'gh'), 0o755);
  return `${bin}:${env.env.PATH}`;
}

/** Which prompt a model request is: `review:<areas>`, `verification`, or null (anything else). */
const kindOf = (t) => {
  if (/^# Sanity verification/m.test(t)) return 'verification';
  if (/^# Sanity review/m.test(t)) return `review:${/^Areas: (.+)$/m.exec(t)?.[1]}`;
  return null;
};
const isReview = (t) => kindOf(t)?.startsWith('review:');
const AREAS = ['necessity', 'duplication', 'contracts', 'scope_tests'];
const ev = (path, symbol, detail) => ({ path, symbol, detail });
/** A reviewer's answer per area; `contracts` cites a function the repository does not have. */
const FINDINGS = {
  necessity: { area: 'necessity', assessment: 'pass', summary: 'The empty-input test fails without the guard.', evidence: [ev('src/parse.test.js', 'empty input', 'asserts parse("") is []')] },
  duplication: { area: 'duplication', assessment: 'pass', summary: 'No other parser exists.', evidence: [ev('src/parse.js', 'parse', 'the only parser')] },
  contracts: { area: 'contracts', assessment: 'concern', summary: 'It adds a parser registry nobody calls.', evidence: [ev('src/registry.js', 'registerParser', 'a new public registry')] },
  scope_tests: { area: 'scope_tests', assessment: 'concern', summary: 'Whitespace-only input is not tested.', evidence: [ev('src/parse.test.js', 'empty input', 'only the empty string is tested')], alternative: 'add one test for " "' },
};
const reviewOf = (areas) => ({ areas: areas.map((a) => FINDINGS[a]), acceptanceCase: 'The guard is one line and fixes a real bug.', questions: ['Is " " valid input?'], unknowns: [] });
/** A verifier that carries the reviews' claims over as they are (the workflow checks them). */
const VERIFIED = {
  verdict: 'simplify',
  summary: 'The fix is right; the registry it mentions is not needed.',
  findings: AREAS.map((a) => FINDINGS[a]),
  requiredChanges: ['Add a test for whitespace-only input.'],
  questionsForContributor: ['Is " " valid input?'],
  unknowns: [],
};

/** The mock model as the reviewers meet it: `answer(kind, request)` gives each one's reply. */
function reviewers(answer) {
  return (request) => {
    const kind = kindOf(request.lastText);
    return kind ? answer(kind, request) : { text: 'ok' };
  };
}
const areasOf = (kind) => kind.slice('review:'.length).split(', ');

/**
 * Reviewer processes working in the test's project, any left behind: Pi processes (Pi names
 * itself `pi`) started by a run's code (they have its `PIW_RUN_ID`).
 */
function processesIn(dir) {
  const found = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      const ofRun = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').some((v) => v.startsWith('PIW_RUN_ID='));
      if (ofRun && readlinkSync(`/proc/${pid}/cwd`).startsWith(dir) && (cmdline === 'pi' || cmdline.includes('--print'))) found.push(`${pid} ${cmdline.slice(0, 200)}`);
    } catch {
      // gone, or not ours
    }
  }
  return found;
}

async function onlyRun(client, sessionId = 'session-a') {
  return until(async () => (await client.listRuns({ sessionId }))[0]?.run_id, 'the run');
}

test("pi-workflows' sanity-check example runs unchanged: four parallel reviewers, each isolated with read tools, then a verification that keeps only supported claims", async () => {
  env.model.script = reviewers((kind) =>
    kind === 'verification' ? { text: `\`\`\`json\n${JSON.stringify(VERIFIED)}\n\`\`\`` } : { text: `Here is my review.\n\`\`\`json\n${JSON.stringify(reviewOf(areasOf(kind)))}\n\`\`\`` },
  );
  // The reviewers' model is Pi's default one.
  writeFileSync(join(env.agentDir, 'settings.json'), JSON.stringify({ defaultProvider: 'mock', defaultModel: 'mock-model' }));
  // examples/workflows/sanity-check.workflow.ts of pi-workflows 0.12.1, as it is.
  writeFileSync(join(env.project, '.pi', 'workflows', 'sanity.workflow.ts'), 'export { sanityCheckWorkflow as default } from "@osolmaz/pi-workflows/builtins";\n');
  const pi = await env.startPi({ extraEnv: { PATH: fakeGh() } });
  const from = pi.mark();
  // The extension starts the host with Pi's environment (the fake gh's PATH); then this client.
  await pi.prompt(`/workflow sanity --input-json ${JSON.stringify({ mode: 'parallel' })}`);
  const client = await env.client();
  const runId = await onlyRun(client);
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const result = run.result;
  // The reference's result fields, the verification's verdict.
  assert.equal(result.verdict, 'simplify');
  assert.equal(result.summary, VERIFIED.summary);
  assert.deepEqual(result.requiredChanges, VERIFIED.requiredChanges);
  assert.deepEqual(result.questionsForContributor, VERIFIED.questionsForContributor);
  // The four areas reach the result, one finding each.
  assert.deepEqual(result.findings.map((f) => f.area), AREAS);
  assert.deepEqual(result.findings[0], FINDINGS.necessity);
  assert.deepEqual(result.findings[3], FINDINGS.scope_tests);
  // The claim about a function the repository does not have is removed; its finding, left
  // without evidence, is unclear and said so.
  assert.deepEqual(result.removedClaims, [{ area: 'contracts', path: 'src/registry.js', symbol: 'registerParser', detail: 'a new public registry', reason: 'src/registry.js is not in the repository' }]);
  assert.deepEqual({ assessment: result.findings[2].assessment, evidence: result.findings[2].evidence }, { assessment: 'unclear', evidence: [] });
  assert.match(result.unknowns.join('\n'), /contracts: the evidence for "It adds a parser registry nobody calls\." is not in the repository/);
  assert.equal(result.incomplete, false);
  assert.deepEqual(result.reviews.map((r) => [r.id, r.status, r.model]), AREAS.map((a) => [a, 'reviewed', 'mock/mock-model']));
  assert.equal(result.evidence.pullRequest, 'read');
  assert.equal(result.evidence.base.how, 'the parent commit');
  // Progress per reviewer, as the widget and `piw view` show it.
  const { updates } = await client.runStatus(runId);
  assert.deepEqual(
    updates.map((u) => [u.key, u.data.status, u.data.completed]).sort(),
    [['agents/review', 'completed', 4], ...AREAS.map((a) => [`agents/review/${a}`, 'completed', 1]), ['agents/verification', 'completed', 1], ['agents/verification/verification', 'completed', 1]].sort(),
  );

  // Each reviewer was asked once, in a session of its own (no other reviewer's words in it),
  // with only the read tools, and saw the change, the commits and the pull request; then the
  // verifier, with the reviews and the claim the workflow could not find.
  const asked = env.model.requests.filter((r) => kindOf(r.lastText));
  assert.deepEqual(asked.map((r) => kindOf(r.lastText)).sort(), [...AREAS.map((a) => `review:${a}`), 'verification'].sort());
  assert.equal(kindOf(asked.at(-1).lastText), 'verification', 'the verification comes after every review');
  for (const r of asked) {
    assert.deepEqual(r.tools.map((t) => t.function?.name ?? t.name).sort(), ['find', 'grep', 'ls', 'read']);
    assert.equal(r.messages.filter((m) => m.role === 'user').length, 1, 'a fresh session');
    assert.match(r.lastText, /\+export const parse = \(text\) => \(text === "" \? \[\] :/);
    assert.match(r.lastText, /parse: guard empty input/);
    assert.match(r.lastText, /Guard empty input in parse/);
  }
  const verification = asked.at(-1).lastText;
  assert.match(verification, /Remove every claim the evidence does not support/);
  assert.match(verification, /src\/registry\.js :: registerParser \(src\/registry\.js is not in the repository\)/);
  assert.match(verification, /The guard is one line and fixes a real bug\./, 'the reviews');

  // One report reached the session, as the run's notification.
  const summary = await until(() => {
    const m = pi.customMessages('piw-message', from).filter((x) => x.details?.kind === 'notify');
    return pi.customMessages('piw-message', from).some((x) => x.details?.kind === 'terminal') && m;
  }, 'the report and the run end');
  assert.equal(summary.length, 1, JSON.stringify(summary));
  const text = JSON.stringify(summary[0].content);
  assert.match(text, /Sanity check: simplify/);
  assert.match(text, /Pull request: read with gh/);
  assert.match(text, /scope_tests \(concern\): Whitespace-only input is not tested\./);
  assert.match(text, /Claims removed \(not in the repository\):\\n- contracts: src\/registry\.js :: registerParser/);
  assert.match(result.report, /^Sanity check: simplify\n/);
  assert.deepEqual(processesIn(env.project), []);
  await pi.quit();
});

test('reviewers that fail or hang past their bound: the run says which and why, and no reviewer is left running', async () => {
  const held = new Promise((r) => (releaseHeld = r));
  env.model.script = reviewers((kind) => {
    if (kind === 'review:necessity') return { text: 'I think it is fine.' }; // no JSON: not the review asked for
    // Hangs after its first chunk until the test ends.
    return { hold: held, text: '{}' };
  });
  const pi = await env.startPi();
  // The bound every reviewer gets: the one that answers must start its Pi and answer within
  // it however loaded the machine is, so it is the suite's wait for what must happen.
  await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify({ model: 'mock/mock-model', mode: 'parallel', reviewTimeoutMs: WAIT_MS })}`);
  const client = await env.client();
  const runId = await onlyRun(client);
  // The held reviewers run (their Pi is found as the check below looks for one).
  await until(() => processesIn(env.project).length === 3, 'the held reviewers running');
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'failed', JSON.stringify(run));
  assert.match(run.error, new RegExp(`no reviewer answered: necessity failed: answered without the review asked for: .*; duplication timed out: no answer within ${WAIT_MS} ms; its Pi process was killed; contracts timed out: .*; scope_tests timed out: `));
  assert.equal(env.model.requests.filter((r) => isReview(r.lastText)).length, 4);
  assert.equal(env.model.requests.filter((r) => kindOf(r.lastText) === 'verification').length, 0, 'nothing to verify');
  // The hung reviewers' Pi processes are gone: nothing runs in the project any more.
  await until(() => processesIn(env.project).length === 0, `no reviewer left: ${processesIn(env.project).join('; ')}`);
  await pi.quit();
});

test('the host killed while a reviewer runs: the restarted host kills that reviewer, the review runs again and the run completes', async () => {
  const held = new Promise((r) => (releaseHeld = r));
  let asked = 0;
  let firstArrived;
  const arrived = new Promise((r) => (firstArrived = r));
  env.model.script = reviewers((kind) => {
    if (kind === 'verification') return { text: JSON.stringify(VERIFIED) };
    asked += 1;
    if (asked > 1) return { text: JSON.stringify(reviewOf(areasOf(kind))) };
    firstArrived();
    return { hold: held, text: '{}' };
  });
  const pi = await env.startPi();
  // Serial (the default): one reviewer for the four areas, then the verification.
  await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify({ model: 'mock/mock-model' })}`);
  let client = await env.client();
  const runId = await onlyRun(client);
  await arrived;
  const first = processesIn(env.project);
  assert.equal(first.length, 1, first.join('; '));
  const { pid } = await client.status();
  await client.close();
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 'the host gone');
  // The extension starts a host again (its session has a live run), with Pi's environment;
  // that host kills what the dead one's children left running, the reviewer among them.
  await until(async () => {
    try {
      const c = await Client.connect({ home: env.piwHome, start: false });
      const { pid: now } = await c.status();
      await c.close();
      return now !== pid;
    } catch {
      return false;
    }
  }, 'a host started again');
  client = await env.client();
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result.reviews.map((r) => [r.id, r.areas, r.status]), [['review', AREAS, 'reviewed']]);
  assert.equal(run.result.verdict, 'simplify');
  assert.equal(asked, 2, 'the review ran again');
  assert.deepEqual(env.model.requests.map((r) => kindOf(r.lastText)).filter(Boolean), [`review:${AREAS.join(', ')}`, `review:${AREAS.join(', ')}`, 'verification'], 'serial: two sessions (the first killed with its host)');
  const firstPid = first[0].split(' ')[0];
  await until(() => !alive(Number(firstPid)), `the first reviewer (${first[0]}) gone`);
  assert.deepEqual(processesIn(env.project), []);
  await pi.quit();
});

test('a run cancelled while its reviewers run takes them along', async () => {
  const held = new Promise((r) => (releaseHeld = r));
  env.model.script = reviewers(() => ({ hold: held, text: '{}' }));
  const pi = await env.startPi();
  await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify({ model: 'mock/mock-model', mode: 'parallel', maxConcurrency: 2 })}`);
  const client = await env.client();
  const runId = await onlyRun(client);
  await until(() => processesIn(env.project).length === 2, 'both reviewers running');
  await client.cancelRun(runId);
  assert.equal((await client.waitForRun(runId, { timeoutMs: 30_000 })).status, 'cancelled');
  await until(() => processesIn(env.project).length === 0, 'no reviewer left');
  await pi.quit();
});

test('an unusable Pi or model is refused before any reviewer starts or any evidence is read', async () => {
  env.model.script = reviewers(() => ({ text: '{}' }));
  const old = join(env.root, 'old-pi');
  writeFileSync(old, '#!/bin/sh\necho 1.5.2\n');
  chmodSync(old, 0o755);
  const cases = [
    [{ PIW_PI: join(env.root, 'no-such-pi') }, { model: 'mock/mock-model' }, /Pi not found: PIW_PI=.*no-such-pi does not exist/],
    [{ PIW_PI: old }, { model: 'mock/mock-model' }, /Pi \(PIW_PI=.*old-pi\) is version 1\.5\.2; piw needs 1\.6\.0 or newer/],
    [{}, { model: 'mock/no-such-model' }, /Pi has no model mock\/no-such-model \(it lists mock\/mock-model\)/],
    [{}, {}, /sanity-check needs a model for its reviewers: give input\.model as "provider\/model", or set defaultProvider and defaultModel in .*settings\.json/],
  ];
  for (const [i, [extraEnv, input, expected]] of cases.entries()) {
    // A Pi session (and so a host) per case: the host passes its environment on to runs.
    const pi = await env.startPi({ sessionId: `s${i}`, extraEnv });
    await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify(input)}`);
    const client = await env.client();
    const runId = await onlyRun(client, `s${i}`);
    const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
    assert.equal(run.status, 'failed', JSON.stringify(run));
    assert.match(run.error, expected);
    const { attempts } = await client.runStatus(runId);
    assert.deepEqual(attempts.map((a) => a.node_id), ['check'], 'nothing after the check ran');
    await pi.quit();
    await stopHost(env.piwHome);
  }
  assert.equal(env.model.requests.filter((r) => kindOf(r.lastText)).length, 0, 'no reviewer asked the model');
});
