// autoimplement's delivery: once a change is checked and reviewed, it is committed in each
// repository it spans, pushed to a branch of its own, proposed as one pull request per
// repository, its review comments sent back to the implementer and answered, its CI watched,
// merged when the input asks, and reported on once. Every step that reaches GitHub is a
// managed effect that looks before it acts, so the host may run it again after a crash: a
// pull request found open for the branch and base is used, not opened again; a comment that
// already has our answer, or a report already posted, is not posted again; a merge first reads
// the pull request (merged already: done; its head moved: refused) and asks GitHub to merge
// only that head (`--match-head-commit`).
import { execFileSync } from 'node:child_process';
import { isAbsolute, resolve } from 'node:path';

import { action, compute, idempotentEffect, runCommandBatch } from '../../index.js';
import { planSections, record, sectionsText, text, texts } from '../plan.mjs';
import * as gh from '../github.mjs';

/** CI watches run at once unless the input's `concurrency.ciWatch` says otherwise. */
const DEFAULT_CI_WATCH = 4;
/** Rounds of implementation that review comments may ask for before the run ends blocked. */
const MAX_COMMENT_ROUNDS = 3;
const BRANCH_NAME = /^(?!-)(?!.*\.\.)(?!.*\/\/)[A-Za-z0-9._/-]{1,200}(?<![./])$/;
const OUTPUT_TAIL_CHARS = 2_000;

/** `git -C dir rev-parse --show-toplevel` said synchronously: input checks run before any node. */
function workTreeTop(dir) {
  try {
    return execFileSync('git', ['rev-parse', '--show-toplevel'], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

/** An absolute path to the top of a git work tree, or an error saying what to give instead. */
function repositoryPath(value, what) {
  const p = text(value, what, 1_000);
  if (!isAbsolute(p)) throw new Error(`${what} must be an absolute path to a git work tree, got ${JSON.stringify(p)}`);
  const top = workTreeTop(p);
  if (top === null) throw new Error(`${what} ${JSON.stringify(p)} is not a git work tree: give the absolute path of the repository's checkout`);
  return resolve(top);
}

/** `{ repository?, baseBranch?, merge }` of autoimplement's input. */
export function readDeliveryInput(input) {
  if (input.merge !== undefined && typeof input.merge !== 'boolean') {
    throw new Error('autoimplement input merge must be true (merge each pull request once its CI is green) or false (leave it ready), got ' + JSON.stringify(input.merge));
  }
  let baseBranch;
  if (input.baseBranch !== undefined) {
    baseBranch = text(input.baseBranch, 'autoimplement input baseBranch', 200);
    if (!BRANCH_NAME.test(baseBranch)) throw new Error(`autoimplement input baseBranch ${JSON.stringify(baseBranch)} is not a branch name (leave it out to use the repository's default branch)`);
  }
  return {
    ...(input.repository === undefined ? {} : { repository: repositoryPath(input.repository, 'autoimplement input repository') }),
    ...(baseBranch === undefined ? {} : { baseBranch }),
    merge: input.merge === true,
  };
}

/** Where the work happens: the input's repository, else the project. */
export const workDir = ({ input, state }) => input.repository ?? state.projectDir;

/** How many repositories' CI are watched at once. */
export function ciWatchOf(input) {
  const c = input.concurrency;
  return c !== null && typeof c === 'object' && Number.isSafeInteger(c.ciWatch) ? c.ciWatch : DEFAULT_CI_WATCH;
}

/** The comments the last reading found that the implementer has not answered yet, each with its `ref`. */
export function pendingComments({ outputs }) {
  const seen = outputs.inspectComments;
  if (seen?.route !== 'comments') return [];
  return outputs.answerComments?.forInspection === seen.round ? [] : seen.comments;
}

/**
 * What delivery adds to the implementer's answer: the other repositories it changed, and an
 * answer to each pending review comment.
 */
export function checkDeliveryAnswer(answer, ctx) {
  const primary = workDir(ctx);
  const repositories = [...new Set(texts(answer.repositories, 'repositories', { max: 16, chars: 1_000 }).map((r, i) => repositoryPath(r, `repositories[${i}]`)))].filter(
    (r) => r !== primary,
  );
  const pending = pendingComments(ctx);
  if (answer.replies !== undefined && !Array.isArray(answer.replies)) throw new Error('replies must be an array of { id, reply }');
  const replies = (answer.replies ?? []).map((r, i) => {
    const reply = record(r, `replies[${i}]`);
    const id = text(reply.id, `replies[${i}].id`, 20);
    if (!pending.some((c) => c.ref === id)) throw new Error(`replies[${i}].id ${JSON.stringify(id)} names no review comment waiting for an answer`);
    return { id, reply: text(reply.reply, `replies[${i}].reply`, 4_000) };
  });
  const missing = pending.filter((c) => !replies.some((r) => r.id === c.ref)).map((c) => c.ref);
  if (missing.length) throw new Error(`answer each review comment in replies: ${missing.join(', ')} (what you changed for it, or why you did not)`);
  return { ...(repositories.length ? { repositories } : {}), ...(replies.length ? { replies } : {}) };
}

/** The lines of the implementer's prompt about where to work and what it must say. */
export function deliveryPromptLines(ctx) {
  const lines = [];
  if (ctx.input.repository) lines.push(`Work in the repository ${ctx.input.repository}.`);
  lines.push('If the change needs other repositories too, change them as well and name each one (its absolute path) in "repositories": each gets its own pull request.');
  return lines;
}

const currentCi = ({ outputs }) => {
  const ci = outputs.watchCi;
  const published = outputs.publish?.repositories ?? [];
  // A reading of CI from before the last push is no longer the pull request's.
  return ci?.targets?.every((t) => published.some((p) => p.pr === t.pr && p.headRevision === t.headRevision)) ? ci : null;
};

/** The delivery's open work for the implementer: CI that failed, review comments to answer. */
export function deliveryWork(ctx) {
  const lines = [];
  const ci = currentCi(ctx);
  if (ci?.route === 'failed') {
    lines.push("The pull request's CI failed:");
    for (const t of ci.targets.filter((x) => x.route === 'failed')) {
      lines.push(`- ${t.pr}: ${t.failed.map((c) => `${c.name}${c.link ? ` (${c.link})` : ''}`).join(', ')}`);
    }
  }
  const comments = pendingComments(ctx);
  if (comments.length) {
    lines.push('Review comments on the pull request (change what they rightly ask for; answer every one in "replies" by its id, saying what you changed or why not):');
    for (const c of comments) {
      lines.push(`- ${c.ref} by ${c.author} on ${c.pr}${c.path ? ` at ${c.path}${c.line ? `:${c.line}` : ''}` : ''}: ${c.body.slice(0, 2_000)}`);
    }
  }
  return lines;
}

/** The repositories this change spans: where the work is, and every one the implementer named. */
function repositoriesOf(ctx) {
  const { outputs } = ctx;
  const all = [workDir(ctx), ...(outputs.commit?.repositories ?? []).map((r) => r.repository), ...(outputs.implement?.repositories ?? [])];
  return [...new Set(all)];
}

/** The branch a run delivers on when the work sits on the base branch (or on no branch). */
const taskBranch = (runId) => `piw/autoimplement-${runId.replace(/[^A-Za-z0-9]/g, '').slice(-12)}`;

/** The repository's base branch: the input's, else its origin's default branch. */
async function baseOf(ctx, dir) {
  if (ctx.input.baseBranch) return ctx.input.baseBranch;
  const found = await gh.defaultBranch(dir, { signal: ctx.signal });
  if (!found) throw new Error(`the default branch of ${dir}'s origin is unknown: give baseBranch in the input`);
  return found;
}

/** Whether `dir`'s HEAD has commits `origin/base` lacks (no such ref: assumed so). */
async function aheadOf(dir, base) {
  const r = await gh.exec('git', ['rev-list', '--count', `refs/remotes/origin/${base}..HEAD`], { cwd: dir });
  return !r.ok || Number(r.stdout.trim()) > 0;
}

/** Why nothing is delivered beyond a commit, or null when it is. */
async function notDelivered(ctx, dirs) {
  if (!ctx.input.push) return 'push: false in the input';
  if (!gh.onPath('gh')) return 'gh (the GitHub CLI) is not installed';
  for (const dir of dirs) if (!(await gh.hasOrigin(dir))) return `${dir} has no remote named origin to push to`;
  return null;
}

/** The text of a pull request a person reads first: what it is for, the plan, the change and how it was checked. */
async function pullRequestBody(ctx, repo) {
  const { input, outputs, state } = ctx;
  const stat = (await gh.exec('git', ['diff', '--stat', `refs/remotes/origin/${repo.baseBranch}...HEAD`], { cwd: repo.repository })).stdout.trim();
  const checks = (outputs.verify?.items ?? []).map((i) => `- \`${i.id}\`: ${i.outcome}`).join('\n');
  const plan = sectionsText(ctx.plan ? planSections(ctx.plan) : [], 3);
  return [
    gh.OWN_MARK,
    `## Why\n\n${input.task}`,
    plan ? `## The plan it carries out\n\n${plan.slice(0, 20_000)}` : null,
    `## What changed\n\n${outputs.implement.summary}${stat ? `\n\n\`\`\`\n${stat.slice(0, 8_000)}\n\`\`\`` : ''}`,
    `## How it was checked\n\n${checks || 'No checks were run.'}\n\nReviewed ${outputs.review?.round ?? 0} time(s); no P0 or P1 finding is open.`,
    `Proposed by piw's autoimplement workflow (run ${state.runId}).`,
  ]
    .filter(Boolean)
    .join('\n\n');
}

const pullRequestTitle = (ctx) => {
  const plan = ctx.plan;
  const line = (typeof plan?.summary === 'string' ? plan.summary : ctx.input.task).split('\n')[0];
  return line.length > 72 ? `${line.slice(0, 71)}…` : line;
};

/** Publishes one progress track's state; a run stopped meanwhile is not an error. */
async function progress(ctx, label, completed, total, status) {
  if (ctx.signal.aborted) return;
  await ctx.publishUpdate({ type: 'progress', key: 'ci', data: { schema: 'pi-workflows.progress.v1', status, label, completed, total, unit: 'pull requests' } });
}

const tail = (s) => (s.length > OUTPUT_TAIL_CHARS ? `…${s.slice(-OUTPUT_TAIL_CHARS)}` : s);
const short = (sha) => sha.slice(0, 12);

/** The first published pull request's fields lead the result, as the reference's single-PR form does. */
function deliveryOf(repositories, reason) {
  const first = repositories[0];
  return { status: 'completed', merged: first.merged, pr: first.pr, reportComment: first.reportComment, reason, repositories };
}

/**
 * The delivery nodes. `planOf` and `digestOf` give the plan being carried out and its digest;
 * the graph enters at `commit` and leaves to `rework` (more work), `finalize` or `blocked`
 * (through `deliveryStop`, which says why).
 */
export function deliveryNodes({ planOf, digestOf }) {
  const withPlan = (ctx) => ({ ...ctx, plan: planOf(ctx) });
  return {
    // Idempotent by its trailer: a retry after a crash finds its own commit and makes no other.
    commit: action({
      effect: idempotentEffect('git_commit'),
      timeoutMs: 5 * 60_000,
      run: async (ctx) => {
        const { input, outputs, state } = ctx;
        if (!input.commit) return { route: 'skip', committed: false, reason: 'commit: false in the input', repositories: [] };
        const dirs = repositoriesOf(ctx);
        const skip = await notDelivered(ctx, dirs);
        const trailer = `Piw-Run: ${state.runId}/${state.visit}`;
        const [subject, ...body] = outputs.implement.summary.split('\n');
        const message = [subject.slice(0, 72), body.join('\n').trim(), `Plan: ${digestOf(ctx)}\n${trailer}`].filter(Boolean).join('\n\n');
        const repositories = [];
        for (const dir of dirs) {
          const base = skip ? null : await baseOf(ctx, dir);
          let branch = await gh.currentBranch(dir);
          // A pull request needs a branch of its own: work on the base (or on no branch) moves to one.
          if (base && (branch === null || branch === base)) {
            branch = taskBranch(state.runId);
            await gh.git(dir, ['switch', '-q', '-c', branch]);
          }
          const entry = { repository: dir, branch, baseBranch: base };
          if ((await gh.git(dir, ['log', '-1', '--format=%B'])).includes(trailer)) {
            repositories.push({ ...entry, committed: true, retried: true, sha: await gh.git(dir, ['rev-parse', 'HEAD']) });
            continue;
          }
          await gh.git(dir, ['add', '--all']);
          if ((await gh.git(dir, ['diff', '--cached', '--name-only'])) === '') {
            repositories.push({ ...entry, committed: false, reason: 'nothing to commit', sha: await gh.git(dir, ['rev-parse', 'HEAD']) });
            continue;
          }
          await gh.git(dir, ['commit', '-q', '-m', message]);
          repositories.push({ ...entry, committed: true, sha: await gh.git(dir, ['rev-parse', 'HEAD']) });
        }
        const [first] = repositories;
        const top = { committed: first.committed, sha: first.sha, ...(first.reason ? { reason: first.reason } : {}), ...(first.retried ? { retried: true } : {}), repositories };
        if (skip) return { route: 'skip', ...top, skipped: skip };
        const deliverable = [];
        for (const r of repositories) if (await aheadOf(r.repository, r.baseBranch)) deliverable.push(r);
        if (!deliverable.length) return { route: 'skip', ...top, skipped: `nothing to deliver: no commit ahead of ${first.baseBranch}` };
        return { route: 'push', ...top };
      },
    }),
    // Looks at the branch on origin first: a head already there is not pushed again, and a
    // push is never forced, so repeating it after a crash changes nothing.
    push: action({
      effect: idempotentEffect('git_push'),
      timeoutMs: 10 * 60_000,
      run: async (ctx) => {
        const pushed = [];
        for (const r of ctx.outputs.commit.repositories) {
          if (!(await aheadOf(r.repository, r.baseBranch))) continue;
          const there = await gh.remoteHead(r.repository, r.branch, { signal: ctx.signal });
          if (there === r.sha) {
            pushed.push({ ...r, pushed: false, already: true });
            continue;
          }
          const done = await gh.pushHead(r.repository, r.branch, { signal: ctx.signal });
          if (!done.ok) return { route: 'failed', reason: `the push of ${r.branch} in ${r.repository} failed: ${done.error}`, evidence: { ...r, origin: there } };
          pushed.push({ ...r, pushed: true });
        }
        return { route: 'publish', repositories: pushed };
      },
    }),
    // Looks for the open pull request of the branch and base first: one found is used, so a
    // retry after a crash never opens a second.
    publish: action({
      effect: idempotentEffect('github_pr'),
      timeoutMs: 5 * 60_000,
      run: async (ctx) => {
        const opts = { signal: ctx.signal };
        const repositories = [];
        for (const r of ctx.outputs.push.repositories) {
          const where = { head: r.branch, base: r.baseBranch };
          let pr = await gh.findPullRequest(r.repository, where, opts);
          const created = !pr;
          if (created) {
            const url = await gh.createPullRequest(r.repository, { ...where, title: pullRequestTitle(withPlan(ctx)), body: await pullRequestBody(withPlan(ctx), r) }, opts);
            pr = await gh.viewPullRequest(r.repository, url, ['number', 'url', 'state', 'headRefName', 'baseRefName', 'headRefOid'], opts);
          }
          repositories.push({ repository: r.repository, branch: r.branch, baseBranch: r.baseBranch, headRevision: r.sha, pr: pr.url, number: pr.number, created });
        }
        return { repositories, ...(ctx.effect.retry ? { retried: true } : {}) };
      },
    }),
    // Posts the implementer's answers to the comments it was given; a comment that already has
    // our answer (a retry after a crash) is not answered again.
    answerComments: action({
      effect: idempotentEffect('github_answer'),
      timeoutMs: 5 * 60_000,
      run: async (ctx) => {
        const { outputs } = ctx;
        const pending = pendingComments(ctx);
        if (!pending.length) return { forInspection: outputs.answerComments?.forInspection ?? null, answered: [] };
        const opts = { signal: ctx.signal };
        const answered = [];
        for (const p of outputs.publish.repositories) {
          const mine = pending.filter((c) => c.pr === p.pr);
          if (!mine.length) continue;
          const there = await gh.pullRequestComments(p.repository, p.pr, p.number, opts);
          for (const c of mine) {
            const mark = gh.answerMark(c.key);
            const existing = there.find((t) => t.body.includes(gh.OWN_MARK) && t.body.includes(mark));
            if (existing) {
              answered.push({ comment: c.ref, pr: p.pr, url: existing.url, already: true });
              continue;
            }
            const reply = outputs.implement.replies.find((r) => r.id === c.ref).reply;
            const body = `${gh.OWN_MARK}\n${mark}\n${reply}\n\n(As of ${short(p.headRevision)}.)`;
            answered.push({ comment: c.ref, pr: p.pr, url: await gh.answerComment(p.repository, p.pr, p.number, c, body, opts) });
          }
        }
        return { forInspection: outputs.inspectComments.round, answered };
      },
    }),
    // Reading the pull requests' comments changes nothing.
    inspectComments: action({
      effect: idempotentEffect('github_read'),
      timeoutMs: 5 * 60_000,
      run: async (ctx) => {
        const { outputs, state } = ctx;
        const comments = [];
        for (const p of outputs.publish.repositories) {
          for (const c of gh.unanswered(await gh.pullRequestComments(p.repository, p.pr, p.number, { signal: ctx.signal }))) {
            comments.push({ ref: `c${comments.length + 1}`, repository: p.repository, pr: p.pr, ...c, body: c.body.slice(0, 4_000) });
          }
        }
        const rounds = (outputs.inspectComments?.commentRounds ?? 0) + (comments.length ? 1 : 0);
        const route = !comments.length ? 'ci' : rounds > MAX_COMMENT_ROUNDS ? 'exhausted' : 'rework';
        return { round: state.visit, route: comments.length ? 'comments' : 'none', next: route, commentRounds: rounds, comments };
      },
    }),
    // Waiting for and reading the checks changes nothing.
    watchCi: action({
      effect: idempotentEffect('ci_watch'),
      timeoutMs: ({ input }) => input.ciTimeoutMs + 5 * 60_000,
      run: async (ctx) => {
        const { input, outputs } = ctx;
        const published = outputs.publish.repositories;
        const label = published.length === 1 ? `CI of ${published[0].pr}` : `CI of ${published.length} pull requests`;
        await progress(ctx, label, 0, published.length, 'running');
        const watched = await runCommandBatch(
          {
            items: published.map((p, i) => ({
              id: `pr-${i + 1}`,
              command: 'gh',
              args: ['pr', 'checks', p.pr, '--watch', '--interval', '10'],
              cwd: p.repository,
              timeoutMs: input.ciTimeoutMs,
              maxOutputChars: 100_000,
            })),
            maxConcurrency: Math.min(ciWatchOf(input), published.length),
          },
          { signal: ctx.signal, onItemSettled: (_i, done, total) => progress(ctx, label, done, total, done === total ? 'completed' : 'running') },
        );
        const targets = [];
        for (const [i, p] of published.entries()) {
          const base = { repository: p.repository, pr: p.pr, headRevision: p.headRevision };
          const item = watched.items[i];
          if (item.outcome === 'timedOut') {
            targets.push({ ...base, route: 'pending', reason: `CI still running after ${Math.round(input.ciTimeoutMs / 60_000)} minutes` });
            continue;
          }
          const read = await gh.pullRequestChecks(p.repository, p.pr, { signal: ctx.signal });
          if (read.none) {
            targets.push({ ...base, route: 'green', reason: `no CI checks are reported for ${p.pr}`, checks: [] });
            continue;
          }
          const checks = read.checks.map((c) => ({ name: c.name, bucket: c.bucket }));
          const failed = read.checks.filter((c) => c.bucket === 'fail' || c.bucket === 'cancel').map((c) => ({ name: c.name, link: c.link ?? null }));
          if (failed.length) targets.push({ ...base, route: 'failed', reason: `${failed.map((c) => c.name).join(', ')} failed`, checks, failed, output: tail(item.stdout) });
          else if (read.checks.some((c) => c.bucket === 'pending')) targets.push({ ...base, route: 'pending', reason: 'CI checks are still pending', checks });
          else targets.push({ ...base, route: 'green', reason: 'every check passed', checks });
        }
        const route = ['failed', 'pending'].find((r) => targets.some((t) => t.route === r)) ?? 'green';
        return {
          route,
          reason: targets.map((t) => (targets.length > 1 ? `${t.pr}: ${t.reason}` : t.reason)).join('; '),
          relatedFailures: targets.flatMap((t) => (t.failed ?? []).map((c) => `${t.pr}: ${c.name}`)),
          unrelatedFailures: [],
          targets,
        };
      },
    }),
    // Merges one pull request at a time, each only at the head that was checked. It reads the
    // pull request first: merged already (a retry after a crash) is done, a head that moved is
    // refused; and GitHub itself refuses the merge if the head moves meanwhile.
    merge: action({
      effect: idempotentEffect('github_merge'),
      timeoutMs: 10 * 60_000,
      run: async (ctx) => {
        const { input, outputs } = ctx;
        const published = outputs.publish.repositories;
        if (!input.merge) {
          return { route: 'report', repositories: published.map((p) => ({ repository: p.repository, pr: p.pr, merged: false, reason: 'left ready: the input did not ask to merge (merge: true)' })) };
        }
        const opts = { signal: ctx.signal };
        const repositories = [];
        for (const p of published) {
          const seen = await gh.viewPullRequest(p.repository, p.pr, ['state', 'mergeCommit', 'headRefOid'], opts);
          const evidence = { repository: p.repository, pr: p.pr, expected: p.headRevision, found: seen.headRefOid, state: seen.state };
          if (seen.headRefOid !== p.headRevision) {
            return { route: 'blocked', reason: `the head of ${p.pr} moved from ${short(p.headRevision)} to ${short(seen.headRefOid)} after its CI was watched: not merged`, evidence, repositories };
          }
          if (seen.state === 'MERGED') {
            repositories.push({ repository: p.repository, pr: p.pr, merged: true, mergeCommit: seen.mergeCommit?.oid ?? null, reason: `merged at ${short(p.headRevision)}`, already: true });
            continue;
          }
          if (seen.state !== 'OPEN') return { route: 'blocked', reason: `${p.pr} is ${seen.state.toLowerCase()}: not merged`, evidence, repositories };
          const method = await gh.mergeMethod(p.repository, opts);
          const done = await gh.mergePullRequest(p.repository, p.pr, { sha: p.headRevision, method }, opts);
          const after = await gh.viewPullRequest(p.repository, p.pr, ['state', 'mergeCommit', 'headRefOid'], opts);
          if (after.state !== 'MERGED') {
            const moved = after.headRefOid !== p.headRevision;
            return {
              route: 'blocked',
              reason: moved
                ? `the head of ${p.pr} moved from ${short(p.headRevision)} to ${short(after.headRefOid)} while merging: GitHub refused the merge`
                : `the merge of ${p.pr} failed: ${done.error ?? `it is ${after.state.toLowerCase()}`}`,
              evidence: { ...evidence, found: after.headRefOid, state: after.state, error: done.error ?? null },
              repositories,
            };
          }
          repositories.push({ repository: p.repository, pr: p.pr, merged: true, mergeCommit: after.mergeCommit?.oid ?? null, reason: `merged at ${short(p.headRevision)} (${method})` });
        }
        return { route: 'report', repositories, ...(ctx.effect.retry ? { retried: true } : {}) };
      },
    }),
    // Posts the final report on each pull request once: one already there for this run is used.
    report: action({
      effect: idempotentEffect('github_report'),
      timeoutMs: 5 * 60_000,
      run: async (ctx) => {
        const { outputs, state } = ctx;
        const opts = { signal: ctx.signal };
        const mark = gh.reportMark(state.runId);
        const repositories = [];
        for (const [i, p] of outputs.publish.repositories.entries()) {
          const merged = outputs.merge.repositories[i];
          const there = (await gh.viewPullRequest(p.repository, p.pr, ['comments'], opts)).comments ?? [];
          const existing = there.find((c) => (c.body ?? '').includes(mark));
          const body = [
            gh.OWN_MARK,
            mark,
            `**autoimplement: ${merged.merged ? 'merged' : 'ready'}**`,
            outputs.implement.summary,
            `Checks: ${(outputs.verify?.items ?? []).map((c) => `\`${c.id}\` ${c.outcome}`).join(', ') || 'none'}.`,
            `Review: ${outputs.review?.round ?? 0} round(s), no P0 or P1 finding open. CI at ${short(p.headRevision)}: ${outputs.watchCi.targets[i].reason}.`,
            merged.reason,
          ].join('\n\n');
          const url = existing ? existing.url : await gh.commentOn(p.repository, p.pr, body, opts);
          repositories.push({ repository: p.repository, pr: p.pr, merged: merged.merged, reportComment: url, reason: merged.reason });
        }
        const n = repositories.length;
        const reason = ctx.input.merge ? `merged ${n} pull request${n > 1 ? 's' : ''} after CI passed` : `${n} pull request${n > 1 ? 's' : ''} ready: merge was not asked for`;
        return deliveryOf(repositories, reason);
      },
    }),
    // Why delivery stopped, for the blocked result.
    deliveryStop: compute({
      run: ({ outputs, results }) => {
        const failed = ['push', 'publish', 'answerComments', 'inspectComments', 'watchCi', 'merge', 'report'].find((n) => results[n] && results[n].outcome !== 'ok');
        if (failed) return { stage: 'delivery', reason: `${failed} failed: ${results[failed].error ?? results[failed].outcome}`, evidence: results[failed].error ?? null };
        if (outputs.push?.route === 'failed') return { stage: 'delivery', reason: outputs.push.reason, evidence: outputs.push.evidence };
        if (outputs.merge?.route === 'blocked') return { stage: 'merge', reason: outputs.merge.reason, evidence: outputs.merge.evidence };
        if (outputs.inspectComments?.next === 'exhausted') {
          return { stage: 'comments', reason: `review comments still unanswered after ${MAX_COMMENT_ROUNDS} rounds`, evidence: outputs.inspectComments.comments };
        }
        return { stage: 'ci', reason: outputs.watchCi.reason, evidence: outputs.watchCi };
      },
    }),
  };
}

const outcome = (from, ok, timedOut = 'deliveryStop') => ({ from, switch: { on: '$result.outcome', cases: { ok, failed: 'deliveryStop', timed_out: timedOut } } });

/** The delivery's edges, from `commit` to `finalize`, `rework`, `timedOut` or `blocked`. */
export const deliveryEdges = [
  { from: 'commit', switch: { on: '$.route', cases: { skip: 'finalize', push: 'push' } } },
  outcome('push', 'afterPush'),
  { from: 'afterPush', switch: { on: '$.route', cases: { publish: 'publish', failed: 'deliveryStop' } } },
  outcome('publish', 'answerComments'),
  outcome('answerComments', 'inspectComments'),
  outcome('inspectComments', 'afterComments'),
  { from: 'afterComments', switch: { on: '$.next', cases: { ci: 'watchCi', rework: 'rework', exhausted: 'deliveryStop' } } },
  outcome('watchCi', 'afterCi', 'timedOut'),
  { from: 'afterCi', switch: { on: '$.route', cases: { green: 'merge', failed: 'rework', pending: 'deliveryStop' } } },
  outcome('merge', 'afterMerge'),
  { from: 'afterMerge', switch: { on: '$.route', cases: { report: 'report', blocked: 'deliveryStop' } } },
  outcome('report', 'finalize'),
  { from: 'deliveryStop', to: 'blocked' },
];

/** The routing nodes between delivery's effects: each passes its effect's route on. */
export const deliveryRoutes = {
  afterPush: compute({ run: ({ outputs }) => ({ route: outputs.push.route }) }),
  afterComments: compute({ run: ({ outputs }) => ({ next: outputs.inspectComments.next }) }),
  afterCi: compute({ run: ({ outputs }) => ({ route: outputs.watchCi.route }) }),
  afterMerge: compute({ run: ({ outputs }) => ({ route: outputs.merge.route }) }),
};

/** The completed result's `commit`, `ci` and `delivery`. */
export function deliveryResult({ outputs }) {
  const commit = outputs.commit;
  const commitOut = { committed: commit.committed, sha: commit.sha, ...(commit.reason ? { reason: commit.reason } : {}), repositories: commit.repositories };
  if (commit.route === 'skip') {
    const reason = commit.committed === false && commit.reason === 'commit: false in the input' ? `no CI followed: the change was not committed (${commit.reason})` : `no CI followed: ${commit.skipped}`;
    return {
      commit: commitOut,
      ci: { route: 'skipped', reason },
      delivery: { status: 'skipped', merged: false, pr: null, reportComment: null, reason, repositories: [] },
    };
  }
  const { targets, ...ci } = outputs.watchCi;
  const one = targets.length === 1 ? { pr: targets[0].pr, checks: targets[0].checks } : { targets };
  return { commit: commitOut, ci: { ...ci, ...one }, delivery: outputs.report };
}
