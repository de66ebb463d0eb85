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

const lensOf = (t) => /^# Sanity review/m.test(t) && /^Lens: (\w+)/m.exec(t)?.[1];
const REVIEWS = {
  necessity: { verdict: 'keep', summary: 'The failing empty-input test shows the bug; the guard is the smallest fix.', findings: [], questions: [] },
  tests: {
    verdict: 'simplify',
    summary: 'The test covers empty input only.',
    findings: [{ severity: 'low', file: 'src/parse.test.js', detail: 'no test for whitespace-only input' }],
    questions: ['Is " " valid input?'],
  },
};

/** The mock model as the reviewers meet it: `answer(lens, request)` gives each one's reply. */
function reviewers(answer) {
  return (request) => {
    const lens = lensOf(request.lastText);
    return lens ? answer(lens, request) : { text: 'ok' };
  };
}

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

test("pi-workflows' sanity-check example runs unchanged: two parallel reviewers, each isolated with read tools, then one summary", async () => {
  env.model.script = reviewers((lens) => ({ text: `Here is my review.\n\`\`\`json\n${JSON.stringify(REVIEWS[lens])}\n\`\`\`` }));
  // The reviewers' model is Pi's default one.
  writeFileSync(join(env.agentDir, 'settings.json'), JSON.stringify({ defaultProvider: 'mock', defaultModel: 'mock-model' }));
  // examples/workflows/sanity-check.workflow.ts of pi-workflows 0.12.1, as it is.
  writeFileSync(join(env.project, '.pi', 'workflows', 'sanity.workflow.ts'), 'export { sanityCheckWorkflow as default } from "@osolmaz/pi-workflows/builtins";\n');
  const pi = await env.startPi({ extraEnv: { PATH: fakeGh() } });
  const from = pi.mark();
  // The extension starts the host with Pi's environment (the fake gh's PATH); then this client.
  await pi.prompt(`/workflow sanity --input-json ${JSON.stringify({ mode: 'parallel', lenses: ['necessity', 'tests'] })}`);
  const client = await env.client();
  const runId = await onlyRun(client);
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.equal(run.result.verdict, 'simplify', 'the worst verdict a reviewer gave');
  assert.equal(run.result.incomplete, false);
  assert.deepEqual(run.result.reviews.map((r) => [r.lens, r.status, r.model]), [['necessity', 'reviewed', 'mock/mock-model'], ['tests', 'reviewed', 'mock/mock-model']]);
  assert.deepEqual(run.result.reviews[1].review, REVIEWS.tests);
  assert.equal(run.result.evidence.pullRequest, 'read');
  assert.equal(run.result.evidence.base.how, 'the parent commit');
  // Progress per reviewer, as the widget and `piw view` show it.
  const { updates } = await client.runStatus(runId);
  assert.deepEqual(
    updates.map((u) => [u.key, u.data.status, u.data.completed ?? null]).sort(),
    [['sanity-check/reviewers', 'completed', 2], ['sanity-check/reviewers/necessity', 'completed', null], ['sanity-check/reviewers/tests', 'completed', null]],
  );

  // Each reviewer was asked once, in a session of its own (no other reviewer's words in it),
  // with only the read tools, and saw the change, the commits and the pull request.
  const asked = env.model.requests.filter((r) => lensOf(r.lastText));
  assert.deepEqual(asked.map((r) => lensOf(r.lastText)).sort(), ['necessity', 'tests']);
  for (const r of asked) {
    assert.deepEqual(r.tools.map((t) => t.function?.name ?? t.name).sort(), ['find', 'grep', 'ls', 'read']);
    assert.equal(r.messages.filter((m) => m.role === 'user').length, 1, 'a fresh session');
    assert.match(r.lastText, /\+export const parse = \(text\) => \(text === "" \? \[\] :/);
    assert.match(r.lastText, /parse: guard empty input/);
    assert.match(r.lastText, /Guard empty input in parse/);
    assert.doesNotMatch(r.lastText, new RegExp(`Lens: ${lensOf(r.lastText) === 'tests' ? 'necessity' : 'tests'}`));
  }

  // One summary reached the session, as the run's notification.
  const summary = await until(() => {
    const m = pi.customMessages('piw-message', from).filter((x) => x.details?.kind === 'notify');
    return pi.customMessages('piw-message', from).some((x) => x.details?.kind === 'terminal') && m;
  }, 'the summary and the run end');
  assert.equal(summary.length, 1, JSON.stringify(summary));
  const text = JSON.stringify(summary[0].content);
  assert.match(text, /Sanity check: simplify/);
  assert.match(text, /Pull request: read with gh/);
  assert.match(text, /\[low\] src\/parse\.test\.js: no test for whitespace-only input/);
  assert.deepEqual(processesIn(env.project), []);
  await pi.quit();
});

test('a reviewer that fails and one that hangs past its bound: the run says which and why, and no reviewer is left running', async () => {
  const held = new Promise((r) => (releaseHeld = r));
  env.model.script = reviewers((lens) => {
    if (lens === 'necessity') return { text: 'I think it is fine.' }; // no JSON: not the review asked for
    // Hangs after its first chunk until the test ends.
    return { hold: held, text: '{}' };
  });
  const pi = await env.startPi();
  // The bound every reviewer gets: the one that answers must start its Pi and answer within
  // it however loaded the machine is, so it is the suite's wait for what must happen.
  await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify({ model: 'mock/mock-model', lenses: ['necessity', 'tests'], reviewTimeoutMs: WAIT_MS })}`);
  const client = await env.client();
  const runId = await onlyRun(client);
  // The held reviewer runs (its Pi is found as the check below looks for one).
  await until(() => processesIn(env.project).length === 1, 'the held reviewer running');
  const run = await client.waitForRun(runId, { timeoutMs: 120_000 });
  assert.equal(run.status, 'failed', JSON.stringify(run));
  assert.match(run.error, new RegExp(`no reviewer answered: necessity failed: answered without the review asked for: .*; tests timed out: no answer within ${WAIT_MS} ms; its Pi process was killed`));
  assert.equal(env.model.requests.filter((r) => lensOf(r.lastText)).length, 2, 'serial: one, then the other');
  // The hung reviewer's Pi is gone: nothing runs in the project any more.
  await until(() => processesIn(env.project).length === 0, `no reviewer left: ${processesIn(env.project).join('; ')}`);
  await pi.quit();
});

test('the host killed while a reviewer runs: the restarted host kills that reviewer, the review runs again and the run completes', async () => {
  const held = new Promise((r) => (releaseHeld = r));
  let asked = 0;
  let firstArrived;
  const arrived = new Promise((r) => (firstArrived = r));
  env.model.script = reviewers(() => {
    asked += 1;
    if (asked > 1) return { text: JSON.stringify(REVIEWS.necessity) };
    firstArrived();
    return { hold: held, text: '{}' };
  });
  const pi = await env.startPi();
  await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify({ model: 'mock/mock-model', lenses: ['necessity'] })}`);
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
  assert.deepEqual(run.result.reviews.map((r) => [r.lens, r.status]), [['necessity', 'reviewed']]);
  assert.equal(asked, 2, 'the review ran again');
  const firstPid = first[0].split(' ')[0];
  await until(() => !alive(Number(firstPid)), `the first reviewer (${first[0]}) gone`);
  assert.deepEqual(processesIn(env.project), []);
  await pi.quit();
});

test('a run cancelled while its reviewers run takes them along', async () => {
  const held = new Promise((r) => (releaseHeld = r));
  env.model.script = reviewers(() => ({ hold: held, text: '{}' }));
  const pi = await env.startPi();
  await pi.prompt(`/workflow builtin:sanity-check --input-json ${JSON.stringify({ model: 'mock/mock-model', mode: 'parallel', lenses: ['necessity', 'design'] })}`);
  const client = await env.client();
  const runId = await onlyRun(client);
  await until(() => processesIn(env.project).length === 2, 'both reviewers running');
  await client.cancelRun(runId);
  assert.equal((await client.waitForRun(runId, { timeoutMs: 30_000 })).status, 'cancelled');
  await until(() => processesIn(env.project).length === 0, 'no reviewer left');
  await pi.quit();
});

test('an unusable Pi or model is refused before any reviewer starts or any evidence is read', async () => {
  env.model.script = reviewers(() => ({ text: JSON.stringify(REVIEWS.necessity) }));
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
  assert.equal(env.model.requests.filter((r) => lensOf(r.lastText)).length, 0, 'no reviewer asked the model');
});
