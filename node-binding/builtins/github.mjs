// The git and GitHub calls a built-in makes to deliver a change, each a function that runs one
// `git` or `gh` command in a repository and returns what it found, typed: the workflow decides,
// these only observe or act. Every call is bounded in time and stopped with the run (`signal`).
// A failure the caller can act on (no pull request, a refused merge) comes back as a value; a
// command that cannot run at all throws with its own words.
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

const CALL_TIMEOUT_MS = 2 * 60_000;
const MAX_BUFFER = 64 * 1024 * 1024;
/** The first line of a comment the workflow posts: how a later visit knows it as its own. */
export const OWN_MARK = '<!-- piw:autoimplement -->';
/** The line an answer to a comment carries: the comment it answers. */
export const answerMark = (key) => `<!-- piw:answered ${key} -->`;
/** The line the final report carries: the run it reports. */
export const reportMark = (runId) => `<!-- piw:report ${runId} -->`;

/** `{ ok, code, stdout, stderr }` of `command args` in `cwd`; `input` goes to its stdin. */
export function exec(command, args, { cwd, signal, input, timeoutMs = CALL_TIMEOUT_MS } = {}) {
  return new Promise((resolve, reject) => {
    const child = execFile(command, args, { cwd, signal, timeout: timeoutMs, maxBuffer: MAX_BUFFER, encoding: 'utf8' }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') {
        // Not an exit status: the command could not run, timed out or was stopped.
        reject(new Error(`${command} ${args.slice(0, 3).join(' ')} did not finish in ${cwd}: ${String(stderr || error.message).trim().slice(0, 500)}`));
        return;
      }
      resolve({ ok: !error, code: error ? error.code : 0, stdout, stderr });
    });
    if (input !== undefined) child.stdin.end(input);
  });
}

/** `git args` in `dir`: its trimmed output, or an error with git's own words. */
export async function git(dir, args, opts = {}) {
  const r = await exec('git', args, { cwd: dir, ...opts });
  if (!r.ok) throw new Error(`git ${args.join(' ')} failed in ${dir}: ${r.stderr.trim().slice(0, 1_000)}`);
  return r.stdout.trim();
}

/** `gh args` in `dir`, its output parsed as JSON, or an error with gh's own words. */
async function ghJson(dir, args, opts = {}) {
  const r = await exec('gh', args, { cwd: dir, ...opts });
  if (!r.ok) throw new Error(`gh ${args.slice(0, 3).join(' ')} failed in ${dir}: ${r.stderr.trim().slice(0, 1_000)}`);
  try {
    return JSON.parse(r.stdout);
  } catch {
    throw new Error(`gh ${args.slice(0, 3).join(' ')} gave no JSON in ${dir}: ${r.stdout.slice(0, 300)}`);
  }
}

/** A command's path on PATH, or null: a tool that is absent is said, not found by a failure. */
export function onPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return null;
}

/** Whether `dir` is the top of a git work tree. */
export async function isWorkTree(dir) {
  const r = await exec('git', ['rev-parse', '--show-toplevel'], { cwd: dir }).catch(() => null);
  return Boolean(r?.ok) && r.stdout.trim() !== '';
}

/** The branch checked out in `dir`, or null when HEAD is detached. */
export async function currentBranch(dir) {
  const r = await exec('git', ['symbolic-ref', '--quiet', '--short', 'HEAD'], { cwd: dir });
  return r.ok ? r.stdout.trim() : null;
}

/** Whether `dir` has a remote named origin. */
export async function hasOrigin(dir) {
  return (await exec('git', ['remote', 'get-url', 'origin'], { cwd: dir })).ok;
}

/**
 * The default branch of `dir`'s origin: its remembered HEAD, else asked of the remote; null
 * when neither says.
 */
export async function defaultBranch(dir, opts) {
  const local = await exec('git', ['symbolic-ref', '--quiet', '--short', 'refs/remotes/origin/HEAD'], { cwd: dir });
  if (local.ok && local.stdout.trim().startsWith('origin/')) return local.stdout.trim().slice('origin/'.length);
  const remote = await exec('git', ['ls-remote', '--symref', 'origin', 'HEAD'], { cwd: dir, ...opts });
  const m = /^ref: refs\/heads\/(\S+)\tHEAD$/m.exec(remote.stdout);
  return m ? m[1] : null;
}

/** The commit `branch` is at on origin, or null when origin has no such branch. */
export async function remoteHead(dir, branch, opts) {
  const out = await git(dir, ['ls-remote', 'origin', `refs/heads/${branch}`], opts);
  return out.split(/\s+/)[0] || null;
}

/** Pushes HEAD to `branch` on origin (never forced): `{ ok, error? }`. */
export async function pushHead(dir, branch, opts) {
  const r = await exec('git', ['push', '--quiet', 'origin', `HEAD:refs/heads/${branch}`], { cwd: dir, ...opts });
  return r.ok ? { ok: true } : { ok: false, error: r.stderr.trim().slice(0, 2_000) };
}

const PR_FIELDS = 'number,url,state,headRefName,baseRefName,headRefOid';

/** The open pull request from `head` into `base`, or null. */
export async function findPullRequest(dir, { head, base }, opts) {
  const list = await ghJson(dir, ['pr', 'list', '--head', head, '--base', base, '--state', 'open', '--json', PR_FIELDS], opts);
  return Array.isArray(list) && list.length ? list[0] : null;
}

/** Opens a pull request; its URL. */
export async function createPullRequest(dir, { head, base, title, body }, opts) {
  const r = await exec('gh', ['pr', 'create', '--head', head, '--base', base, '--title', title, '--body-file', '-'], { cwd: dir, input: body, ...opts });
  if (!r.ok) throw new Error(`gh pr create failed in ${dir}: ${r.stderr.trim().slice(0, 1_000)}`);
  const url = r.stdout.trim().split('\n').pop();
  if (!/^https?:\/\//.test(url ?? '')) throw new Error(`gh pr create gave no pull request URL in ${dir}: ${r.stdout.slice(0, 300)}`);
  return url;
}

/** `gh pr view pr --json fields` of the pull request. */
export function viewPullRequest(dir, pr, fields, opts) {
  return ghJson(dir, ['pr', 'view', pr, '--json', fields.join(',')], opts);
}

/**
 * Every comment on the pull request a person may expect an answer to: `{ key, kind, id,
 * author, body, url, path?, line? }`, `kind` `inline` (on a line of the diff), `comment` (on
 * the conversation) or `review` (a review's summary, when it has one).
 */
export async function pullRequestComments(dir, pr, number, opts) {
  const view = await viewPullRequest(dir, pr, ['comments', 'reviews'], opts);
  const inline = await ghJson(dir, ['api', `repos/{owner}/{repo}/pulls/${number}/comments`, '--paginate'], opts);
  const login = (a) => a?.login ?? 'someone';
  return [
    ...(inline ?? []).map((c) => ({ key: `inline:${c.id}`, kind: 'inline', id: c.id, author: login(c.user), body: c.body ?? '', url: c.html_url ?? null, path: c.path ?? null, line: c.line ?? null })),
    ...(view.comments ?? []).map((c) => ({ key: `comment:${c.id}`, kind: 'comment', id: c.id, author: login(c.author), body: c.body ?? '', url: c.url ?? null })),
    ...(view.reviews ?? []).filter((r) => (r.body ?? '').trim() !== '').map((r) => ({ key: `review:${r.id}`, kind: 'review', id: r.id, author: login(r.author), body: r.body, url: null })),
  ];
}

/** Comments a person left that no comment of ours answers yet. */
export function unanswered(comments) {
  const ours = comments.filter((c) => c.body.includes(OWN_MARK));
  return comments.filter((c) => !c.body.includes(OWN_MARK) && !ours.some((o) => o.body.includes(answerMark(c.key))));
}

/** Answers `comment`: in its thread when it is on a line, else on the conversation; the answer's URL. */
export async function answerComment(dir, pr, number, comment, body, opts) {
  if (comment.kind === 'inline') {
    const r = await ghJson(dir, ['api', '--method', 'POST', `repos/{owner}/{repo}/pulls/${number}/comments/${comment.id}/replies`, '-f', `body=${body}`], opts);
    return r.html_url ?? null;
  }
  return commentOn(dir, pr, body, opts);
}

/** Comments on the pull request's conversation; the comment's URL. */
export async function commentOn(dir, pr, body, opts) {
  const r = await exec('gh', ['pr', 'comment', pr, '--body-file', '-'], { cwd: dir, input: body, ...opts });
  if (!r.ok) throw new Error(`gh pr comment failed in ${dir}: ${r.stderr.trim().slice(0, 1_000)}`);
  return r.stdout.trim().split('\n').pop() || null;
}

/**
 * The pull request's checks, `{ checks: [{ name, state, bucket, link }] }`, or `{ none:
 * reason }` when it has none (gh exits non-zero with failed or pending checks: its list still says).
 */
export async function pullRequestChecks(dir, pr, opts) {
  const r = await exec('gh', ['pr', 'checks', pr, '--json', 'name,state,bucket,link'], { cwd: dir, ...opts });
  try {
    const checks = JSON.parse(r.stdout);
    if (Array.isArray(checks)) return { checks };
  } catch {
    // said below
  }
  const why = r.stderr.trim();
  if (/no checks reported/i.test(why)) return { none: why.slice(0, 300) };
  throw new Error(`gh pr checks gave no readable list for ${pr}: ${why.slice(0, 500)}`);
}

/** The way the repository lets pull requests be merged: squash, else a merge commit, else rebase. */
export async function mergeMethod(dir, opts) {
  const repo = await ghJson(dir, ['repo', 'view', '--json', 'squashMergeAllowed,mergeCommitAllowed,rebaseMergeAllowed'], opts);
  if (repo.squashMergeAllowed) return 'squash';
  if (repo.mergeCommitAllowed) return 'merge';
  if (repo.rebaseMergeAllowed) return 'rebase';
  throw new Error(`the repository of ${dir} allows no merge method`);
}

/**
 * Merges the pull request only while its head is `sha` (GitHub refuses it once the head moved):
 * `{ ok, error? }`.
 */
export async function mergePullRequest(dir, pr, { sha, method }, opts) {
  const r = await exec('gh', ['pr', 'merge', pr, `--${method}`, '--match-head-commit', sha], { cwd: dir, ...opts });
  return r.ok ? { ok: true } : { ok: false, error: r.stderr.trim().slice(0, 2_000) };
}
