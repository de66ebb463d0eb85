// A small project under git for the built-ins' tests: a parser whose test fails (`parse("")`
// gives `[0]`), the accepted plan to fix it in its docs, the fixes a scripted "implementation"
// writes, a PATH that holds only the tools the workflows run (so no `gh` of the machine is ever
// reached), and a fake `gh` that answers from a state file the test writes and logs every call.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
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

/** The project back at its first commit, untracked files gone, `origin/main` there too. */
export function resetRepo(dir, first) {
  gitIn(dir, 'reset', '-q', '--hard', first);
  gitIn(dir, 'clean', '-qfdx');
  gitIn(dir, 'push', '-q', '--force', 'origin', `${first}:refs/heads/main`);
}

/**
 * A folder of the tools the workflows run (`git`, `node`) and, with `ghState`, a fake `gh`:
 * `pr view` answers the pull request in the JSON file `ghState` (`{ pr: { number, url } }`, its
 * head read from the bare origin), or fails as gh does with no pull request; `pr checks --watch`
 * succeeds; `pr checks --json` prints `checks` from the state (or, with `rounds`, the n-th list
 * of it at the n-th call). Each call's arguments go to
 * `<ghState>.log`, one JSON line each. Returns the folder, to be the whole PATH.
 */
export function toolsPath(dir, { ghState, origin } = {}) {
  const bin = join(dir, 'tools');
  mkdirSync(bin, { recursive: true });
  symlinkSync(which('git'), join(bin, 'git'));
  symlinkSync(process.execPath, join(bin, 'node'));
  if (ghState) {
    const gh = join(bin, 'gh');
    writeFileSync(
      gh,
      `#!${process.execPath}
const { appendFileSync, readFileSync } = require('node:fs');
const { execFileSync } = require('node:child_process');
const args = process.argv.slice(2);
appendFileSync(${JSON.stringify(`${ghState}.log`)}, JSON.stringify(args) + '\\n');
const state = JSON.parse(readFileSync(${JSON.stringify(ghState)}, 'utf8'));
if (args[0] === 'pr' && args[1] === 'view') {
  if (!state.pr) { process.stderr.write('no pull requests found for branch "main"\\n'); process.exit(1); }
  const head = execFileSync('git', ['--git-dir', ${JSON.stringify(origin)}, 'rev-parse', 'main'], { encoding: 'utf8' }).trim();
  process.stdout.write(JSON.stringify({ ...state.pr, headRefName: 'main', headRefOid: head }));
} else if (args[0] === 'pr' && args[1] === 'checks' && args.includes('--watch')) {
  process.stdout.write('All checks were successful\\n');
} else if (args[0] === 'pr' && args[1] === 'checks') {
  // \`rounds\`: the list the n-th reading gives (the last one from then on).
  const n = readFileSync(${JSON.stringify(`${ghState}.log`)}, 'utf8').split('\\n').filter((l) => l.includes('"--json"') && l.includes('"checks"')).length;
  const rounds = state.rounds ?? [state.checks ?? []];
  process.stdout.write(JSON.stringify(rounds[Math.min(n, rounds.length) - 1]));
} else {
  process.stderr.write('fake gh: unexpected ' + args.join(' ') + '\\n'); process.exit(2);
}
`,
    );
    chmodSync(gh, 0o755);
  }
  return bin;
}
