// A small project under git for the built-ins' tests: a parser whose test fails (`parse("")`
// gives `[0]`), the accepted plan to fix it in its docs, the fixes a scripted "implementation"
// writes, a PATH that holds only the tools the workflows run (so no `gh` of the machine is ever
// reached), and a fake `gh` that keeps pull requests, comments, checks and merges in a state
// file the test writes, and logs every call.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export const BROKEN = 'export const parse = (text) => text.split(",").map(Number);\n';
/** A fix that is not one: the check still fails. */
export const WRONG_FIX = 'export const parse = (text) => (text.trim() === "" ? [0] : text.split(",").map(Number));\n';
export const FIX = 'export const parse = (text) => (text === "" ? [] : text.split(",").map(Number));\n';
export const PLAN = {
  summary: 'Return an empty list for empty input',
  steps: [{ title: 'Guard', detail: 'Return [] when text is empty', files: ['src/parse.js'] }],
  checks: ['node --test'],
  risks: ['none known'],
};
/** Where the fixture project keeps `PLAN`, as autodoc would have written it. */
export const PLAN_DOC = 'docs/plans/empty-input.md';
const PLAN_TEXT = `# ${PLAN.summary}\n\nAccepted plan for: parse("") should give [].\n\n## Steps\n\n1. ${PLAN.steps[0].title}: ${PLAN.steps[0].detail} (${PLAN.steps[0].files.join(', ')})\n`;
/** The project's own check, as a workflow's input names it. */
export const CHECKS = [{ id: 'test', command: 'node', args: ['--test'] }];

const which = (name) => {
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  assert.equal(r.status, 0, `${name} is needed`);
  return r.stdout.trim();
};

export function gitIn(dir, ...args) {
  const r = spawnSync('git', args, { cwd: dir, encoding: 'utf8' });
  assert.equal(r.status, 0, `git ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

/**
 * Makes the project in `dir` (committed, with a bare `origin` at `<dir>.git` and `main`
 * pushed) and returns the first commit.
 */
export function fixtureRepo(dir) {
  mkdirSync(join(dir, 'src'), { recursive: true });
  mkdirSync(join(dir, 'docs', 'plans'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'fixture', type: 'module', scripts: { test: 'node --test' } }, null, 2));
  writeFileSync(join(dir, 'src', 'parse.js'), BROKEN);
  writeFileSync(
    join(dir, 'src', 'parse.test.js'),
    'import assert from "node:assert"; import test from "node:test"; import { parse } from "./parse.js";\ntest("empty input", () => assert.deepEqual(parse(""), []));\n',
  );
  writeFileSync(join(dir, 'docs', 'plans', 'README.md'), '# Plans\n\nOne file per accepted plan.\n');
  writeFileSync(join(dir, 'docs', 'plans', PLAN_DOC.split('/').pop()), PLAN_TEXT);
  gitIn(dirname(dir), 'init', '-q', '--bare', '-b', 'main', `${dir}.git`);
  gitIn(dir, 'init', '-q', '-b', 'main');
  gitIn(dir, 'config', 'user.name', 'Fixture');
  gitIn(dir, 'config', 'user.email', 'fixture@example.invalid');
  gitIn(dir, 'add', '-A');
  gitIn(dir, 'commit', '-q', '-m', 'fixture');
  gitIn(dir, 'remote', 'add', 'origin', `${dir}.git`);
  gitIn(dir, 'push', '-q', 'origin', 'main');
  return gitIn(dir, 'rev-parse', 'HEAD');
}

/**
 * The project back at its first commit on `main`, other branches and untracked files gone,
 * `origin` holding only `main` there too.
 */
export function resetRepo(dir, first) {
  gitIn(dir, 'checkout', '-q', '-f', 'main');
  gitIn(dir, 'reset', '-q', '--hard', first);
  gitIn(dir, 'clean', '-qfdx');
  for (const b of gitIn(dir, 'for-each-ref', '--format=%(refname:short)', 'refs/heads/').split('\n')) if (b && b !== 'main') gitIn(dir, 'branch', '-q', '-D', b);
  for (const b of gitIn(dir, 'ls-remote', '--heads', 'origin').split('\n')) {
    const ref = b.split('\t')[1];
    if (ref && ref !== 'refs/heads/main') gitIn(dir, 'push', '-q', 'origin', `:${ref}`);
  }
  gitIn(dir, 'push', '-q', '--force', 'origin', `${first}:refs/heads/main`);
}

/** The calls the fake `gh` logged for `ghState`, each its arguments. */
export function ghLog(ghState) {
  let text = '';
  try {
    text = readFileSync(`${ghState}.log`, 'utf8');
  } catch {
    // no call yet
  }
  return text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

/**
 * A folder of the tools the workflows run (`git`, `node`) and, with `ghState`, a fake `gh`
 * answering from the JSON file `ghState` the test writes (and the fake updates, as GitHub
 * would). Its repository is the one whose `origin` (a bare repository) the call runs in; a
 * pull request's head is read from there. The state:
 * - `prs`: `[{ number, url, origin, headRefName, baseRefName, state, title, body, comments,
 *   reviews, inline, checks?, checkRounds? }]`: `pr create` adds one, `pr list` / `pr view`
 *   read them, `pr comment` and `api …/replies` add comments (by `piw-bot`), `pr merge` merges
 *   (refused when `--match-head-commit` is not the head, as GitHub does).
 * - `checks` (or per pull request `checks`, or `checkRounds`: the n-th `pr checks --json` of that
 *   pull request reads the n-th list, the last from then on); `noChecks: true`: none reported.
 * - `barrier: 'pr merge' | 'pr create'`: that call, once done, creates `<ghState>.reached` and
 *   waits for `<ghState>.release` before it answers (once).
 * - `moveHeadOn: 'merge' | 'checks'`: someone pushes to the head branch at the pull request's
 *   first `pr merge` (before GitHub looks at the head) or its first `pr checks --json`.
 * Each call's arguments go to `<ghState>.log`, one JSON line each. Returns the folder, to be
 * the whole PATH.
 */
export function toolsPath(dir, { ghState } = {}) {
  const bin = join(dir, 'tools');
  mkdirSync(bin, { recursive: true });
  symlinkSync(which('git'), join(bin, 'git'));
  symlinkSync(process.execPath, join(bin, 'node'));
  if (ghState) {
    const gh = join(bin, 'gh');
    writeFileSync(gh, `#!${process.execPath}\nconst STATE = ${JSON.stringify(ghState)};\n${FAKE_GH}`);
    chmodSync(gh, 0o755);
  }
  return bin;
}

const FAKE_GH = String.raw`
const { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } = require('node:fs');
const { execFileSync } = require('node:child_process');
const { basename } = require('node:path');
const args = process.argv.slice(2);
appendFileSync(STATE + '.log', JSON.stringify(args) + '\n');
const state = JSON.parse(readFileSync(STATE, 'utf8'));
state.prs ??= [];
const save = () => { writeFileSync(STATE + '.tmp', JSON.stringify(state, null, 2)); renameSync(STATE + '.tmp', STATE); };
const fail = (msg, code = 1) => { process.stderr.write(msg + '\n'); process.exit(code); };
const flag = (name) => { const i = args.indexOf(name); return i < 0 ? undefined : args[i + 1]; };
const stdin = () => readFileSync(0, 'utf8');
const origin = (() => { try { return execFileSync('git', ['remote', 'get-url', 'origin'], { encoding: 'utf8' }).trim(); } catch { return null; } })();
const gitO = (...a) => execFileSync('git', ['--git-dir', origin, ...a], { encoding: 'utf8', env: { ...process.env, GIT_AUTHOR_NAME: 'Someone', GIT_AUTHOR_EMAIL: 'someone@example.invalid', GIT_COMMITTER_NAME: 'Someone', GIT_COMMITTER_EMAIL: 'someone@example.invalid' } }).trim();
const headOf = (pr) => pr.mergedHead ?? gitO('rev-parse', 'refs/heads/' + pr.headRefName);
const find = (ref) => state.prs.find((p) => p.origin === origin && (p.url === ref || String(p.number) === String(ref)));
const moveHead = (pr) => { const h = headOf(pr); const c = gitO('commit-tree', h + '^{tree}', '-p', h, '-m', 'someone else'); gitO('update-ref', 'refs/heads/' + pr.headRefName, c); };
const barrier = (on) => {
  if (state.barrier !== on || existsSync(STATE + '.reached')) return;
  writeFileSync(STATE + '.reached', '');
  const until = Date.now() + 120000;
  while (!existsSync(STATE + '.release') && Date.now() < until) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
};
const view = (pr, fields) => {
  const all = { ...pr, headRefOid: headOf(pr), mergeCommit: pr.mergeCommit ?? null, comments: pr.comments ?? [], reviews: pr.reviews ?? [] };
  return Object.fromEntries(fields.split(',').map((f) => [f, all[f] ?? null]));
};
const [a0, a1] = args;
if (!origin && a0 !== 'api') fail('fake gh: not in a repository with an origin', 2);
if (a0 === 'pr' && a1 === 'list') {
  const found = state.prs.filter((p) => p.origin === origin && p.headRefName === flag('--head') && p.baseRefName === flag('--base') && p.state === 'OPEN');
  process.stdout.write(JSON.stringify(found.map((p) => view(p, flag('--json')))));
} else if (a0 === 'pr' && a1 === 'create') {
  const number = Math.max(0, ...state.prs.map((p) => p.number)) + 1;
  const url = 'https://example.invalid/' + basename(origin, '.git') + '/pull/' + number;
  state.prs.push({ number, url, origin, headRefName: flag('--head'), baseRefName: flag('--base'), state: 'OPEN', title: flag('--title'), body: stdin(), comments: [], reviews: [], inline: [] });
  save();
  barrier('pr create');
  process.stdout.write(url + '\n');
} else if (a0 === 'pr' && a1 === 'view') {
  const pr = find(args[2]);
  if (!pr) fail('no pull requests found for ' + args[2]);
  process.stdout.write(JSON.stringify(view(pr, flag('--json'))));
} else if (a0 === 'pr' && a1 === 'comment') {
  const pr = find(args[2]);
  if (!pr) fail('no pull request ' + args[2]);
  const id = 9000 + state.prs.reduce((n, p) => n + p.comments.length + p.inline.length, 0);
  const url = pr.url + '#issuecomment-' + id;
  pr.comments.push({ id: String(id), author: { login: 'piw-bot' }, body: stdin(), url });
  save();
  process.stdout.write(url + '\n');
} else if (a0 === 'api') {
  const path = args.find((a) => a.startsWith('repos/'));
  const m = /^repos\/\{owner\}\/\{repo\}\/pulls\/(\d+)\/comments(?:\/(\d+)\/replies)?$/.exec(path ?? '');
  const pr = m && find(m[1]);
  if (!pr) fail('fake gh: unexpected api ' + args.join(' '), 2);
  if (m[2]) {
    const id = 9000 + state.prs.reduce((n, p) => n + p.comments.length + p.inline.length, 0);
    const body = args[args.indexOf('-f') + 1].replace(/^body=/, '');
    const c = { id, user: { login: 'piw-bot' }, body, in_reply_to_id: Number(m[2]), html_url: pr.url + '#discussion_r' + id };
    pr.inline.push(c);
    save();
    process.stdout.write(JSON.stringify(c));
  } else process.stdout.write(JSON.stringify(pr.inline));
} else if (a0 === 'pr' && a1 === 'checks') {
  const pr = find(args[2]);
  if (!pr) fail('no pull request ' + args[2]);
  if (state.noChecks) fail("no checks reported on the '" + pr.headRefName + "' branch");
  if (args.includes('--watch')) { process.stdout.write('checks done\n'); process.exit(0); }
  const n = readFileSync(STATE + '.log', 'utf8').split('\n').filter((l) => l.includes('"--json"') && l.includes('"checks"') && l.includes(JSON.stringify(pr.url))).length;
  if (state.moveHeadOn === 'checks' && !pr.moved) { moveHead(pr); pr.moved = true; save(); }
  const rounds = pr.checkRounds ?? state.checkRounds ?? [pr.checks ?? state.checks ?? []];
  process.stdout.write(JSON.stringify(rounds[Math.min(n, rounds.length) - 1]));
} else if (a0 === 'repo' && a1 === 'view') {
  process.stdout.write(JSON.stringify(state.mergeMethods ?? { squashMergeAllowed: true, mergeCommitAllowed: true, rebaseMergeAllowed: false }));
} else if (a0 === 'pr' && a1 === 'merge') {
  const pr = find(args[2]);
  if (!pr) fail('no pull request ' + args[2]);
  if (pr.state !== 'OPEN') fail('Pull request ' + pr.url + ' is not mergeable: it is ' + pr.state.toLowerCase());
  if (state.moveHeadOn === 'merge' && !pr.moved) { moveHead(pr); pr.moved = true; save(); }
  const head = headOf(pr);
  const match = flag('--match-head-commit');
  if (match !== undefined && match !== head) fail('Head branch was modified. Review and try the merge again.');
  gitO('update-ref', 'refs/heads/' + pr.baseRefName, head);
  Object.assign(pr, { state: 'MERGED', mergedHead: head, mergeCommit: { oid: head } });
  save();
  barrier('pr merge');
  process.stdout.write('Merged pull request ' + pr.url + '\n');
} else {
  fail('fake gh: unexpected ' + args.join(' '), 2);
}
`;

/**
 * A stand-in for Pi as the autoimplement reviewer starts it (`PIW_PI=<the returned file>`): it
 * answers `--version` with 1.6.0; a review (`--print`) reads its prompt from stdin, logs `{ args,
 * prompt }` as one JSON line to `<dir>/reviewer.log`, and answers with the n-th entry of
 * `<dir>/reviewer.json` (the last one from then on): `{ review }` (printed as JSON), `{ text }`,
 * or `{ exit }` (dies with that code and a line on stderr). `setAnswers(list)` rewrites them;
 * `calls()` reads the log.
 */
export function fakeReviewer(dir) {
  const file = join(dir, 'fake-pi.mjs');
  const log = join(dir, 'reviewer.log');
  const answers = join(dir, 'reviewer.json');
  writeFileSync(
    file,
    `import { appendFileSync, readFileSync } from 'node:fs';
const args = process.argv.slice(2);
if (args.includes('--version')) { process.stdout.write('pi 1.6.0\\n'); process.exit(0); }
let prompt = '';
process.stdin.setEncoding('utf8');
for await (const chunk of process.stdin) prompt += chunk;
appendFileSync(${JSON.stringify(log)}, JSON.stringify({ args, prompt }) + '\\n');
const n = readFileSync(${JSON.stringify(log)}, 'utf8').split('\\n').filter(Boolean).length;
const list = JSON.parse(readFileSync(${JSON.stringify(answers)}, 'utf8'));
const answer = list[Math.min(n, list.length) - 1];
if (answer.exit !== undefined) { process.stderr.write('fake reviewer: crashed\\n'); process.exit(answer.exit); }
process.stdout.write(answer.text ?? JSON.stringify(answer.review));
`,
  );
  writeFileSync(log, '');
  writeFileSync(answers, JSON.stringify([{ review: { p0: [], p1: [], p2: [], lower: [], reason: 'clean' } }]));
  return {
    file,
    setAnswers: (list) => writeFileSync(answers, JSON.stringify(list)),
    calls: () => readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)),
  };
}
