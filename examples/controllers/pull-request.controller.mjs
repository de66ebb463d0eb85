// A controller that sees one pull request through to its merge: it merges the head it was asked
// to merge once the checks on that head pass, and never merges twice.
//
// Spec: { apiUrl, repository: "owner/name", number, expectedHeadSha, pollMs? }
//   apiUrl          the forge's REST API (GitHub's shape: /repos/<owner>/<name>/...)
//   expectedHeadSha the head that was reviewed; another head is reported, never merged
//   pollMs          how long to wait before looking at pending or failing checks again
//
// While it watches, the pull request carries the label `piw-watching`; the finalizer
// `pull-request.label` makes a deletion take the label off before the resource goes.
import { conditionFalse, conditionTrue, conditionUnknown, defineController } from 'piw/controllers';

const LABEL = 'piw-watching';
const FINALIZER = 'pull-request.label';
const DEFAULT_POLL_MS = 30_000;

/** The forge's REST API for one repository. */
function forge(spec, signal) {
  const [owner, name] = String(spec.repository).split('/');
  if (!owner || !name) throw new Error(`spec.repository must be "owner/name", not ${JSON.stringify(spec.repository)}`);
  const base = `${spec.apiUrl.replace(/\/$/, '')}/repos/${encodeURIComponent(owner)}/${encodeURIComponent(name)}`;
  const call = async (method, path, body) => {
    const response = await fetch(`${base}/${path}`, {
      method,
      signal,
      headers: { accept: 'application/vnd.github+json', ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const text = await response.text();
    return { status: response.status, ok: response.ok, body: text ? JSON.parse(text) : null };
  };
  const read = async (path) => {
    const r = await call('GET', path);
    if (!r.ok) throw new Error(`GET ${path}: HTTP ${r.status} ${r.body?.message ?? ''}`.trim());
    return r.body;
  };
  return {
    pull: () => read(`pulls/${spec.number}`),
    checks: (sha) => read(`commits/${encodeURIComponent(sha)}/status`),
    merge: (sha) => call('PUT', `pulls/${spec.number}/merge`, { sha }),
    addLabel: () => call('POST', `issues/${spec.number}/labels`, { labels: [LABEL] }),
    removeLabel: () => call('DELETE', `issues/${spec.number}/labels/${encodeURIComponent(LABEL)}`),
  };
}

const hasLabel = (pull) => (pull.labels ?? []).some((l) => l.name === LABEL);

/** The effect of taking the label off, on a deletion: done once, whatever the passes. */
async function release(ctx, resource, api) {
  const ours = resource.metadata.finalizers.filter((f) => f !== FINALIZER);
  const pull = await api.pull();
  if (hasLabel(pull)) {
    const effect = await ctx.effects.ensure({
      key: `unlabel:${resource.metadata.generation}`,
      kind: 'forge-label',
      request: { repository: resource.spec.repository, number: resource.spec.number, remove: LABEL },
      observe: async () => ((await api.pull()).labels ?? []).some((l) => l.name === LABEL) ? { state: 'not_applied' } : { state: 'applied' },
      apply: async () => {
        const r = await api.removeLabel();
        return r.ok || r.status === 404 ? { state: 'applied' } : { state: 'indeterminate', error: `HTTP ${r.status}` };
      },
    });
    if (effect.state !== 'applied' && effect.state !== 'rejected') {
      return ctx.requeueAfter(resource.spec.pollMs ?? DEFAULT_POLL_MS, { conditions: [conditionUnknown('Released', 'LabelRemovalUncertain', effect.error)] });
    }
  }
  return ctx.settled({ finalizers: ours, conditions: [conditionTrue('Released', 'LabelRemoved')] });
}

export default defineController({
  name: 'pull-request',
  initialStatus: () => ({ phase: 'watching' }),

  async reconcile(ctx, resource) {
    const { spec, metadata } = resource;
    const api = forge(spec, ctx.signal);
    const pollMs = spec.pollMs ?? DEFAULT_POLL_MS;

    if (metadata.deletionTimestamp !== undefined) {
      return metadata.finalizers.includes(FINALIZER) ? release(ctx, resource, api) : ctx.settled();
    }

    const pull = await api.pull();
    const head = pull.head.sha;
    const mergeKey = `merge:${metadata.generation}:${head}`;
    const mergeRequest = { repository: spec.repository, number: spec.number, sha: head };
    const observeMerge = async () => {
      const now = await api.pull();
      if (now.merged) return { state: 'applied', ...(now.merge_commit_sha ? { externalRef: now.merge_commit_sha } : {}) };
      return { state: 'not_applied' };
    };
    if (pull.merged) {
      // A merge this controller asked for and never heard back about: the forge says it is
      // done, so its record says so too (ensure observes a recorded effect before anything).
      const asked = await ctx.effects.get(mergeKey);
      if (asked && asked.state !== 'applied' && asked.state !== 'rejected') {
        await ctx.effects.ensure({ key: mergeKey, kind: 'forge-merge', request: mergeRequest, observe: observeMerge, apply: () => ({ state: 'indeterminate', error: 'not applied again: observe decides' }) });
      }
      return ctx.settled({
        controllerStatus: { phase: 'merged', headSha: head, mergeSha: pull.merge_commit_sha ?? null },
        conditions: [conditionTrue('Merged', 'Merged', `merged as ${pull.merge_commit_sha}`)],
      });
    }
    if (pull.state !== 'open') {
      return ctx.settled({ controllerStatus: { phase: 'closed', headSha: head }, conditions: [conditionFalse('Merged', 'Closed', 'the pull request was closed unmerged')] });
    }

    // What this controller owns on the forge (the label) gets its finalizer first, committed
    // before the label exists, so a deletion can never leave the label behind.
    if (!metadata.finalizers.includes(FINALIZER)) {
      return ctx.requeue({ finalizers: [...metadata.finalizers, FINALIZER] });
    }
    if (!hasLabel(pull)) {
      const effect = await ctx.effects.ensure({
        key: `label:${metadata.generation}`,
        kind: 'forge-label',
        request: { repository: spec.repository, number: spec.number, add: LABEL },
        observe: async () => (hasLabel(await api.pull()) ? { state: 'applied' } : { state: 'not_applied' }),
        apply: async () => {
          const r = await api.addLabel();
          return r.ok ? { state: 'applied' } : { state: 'rejected', error: `HTTP ${r.status} ${r.body?.message ?? ''}`.trim() };
        },
      });
      ctx.log.info('label', { state: effect.state });
      return effect.state === 'indeterminate' ? ctx.requeueAfter(pollMs) : ctx.requeue();
    }

    if (head !== spec.expectedHeadSha) {
      return ctx.settled({
        controllerStatus: { phase: 'head-moved', headSha: head },
        conditions: [
          conditionFalse('HeadCurrent', 'HeadMoved', `the head is ${head}, not the expected ${spec.expectedHeadSha}; set spec.expectedHeadSha to the head to merge`),
          conditionFalse('Merged', 'HeadMoved'),
        ],
      });
    }
    const current = conditionTrue('HeadCurrent', 'AsExpected');

    const checks = await api.checks(head);
    if (checks.state !== 'success') {
      const reason = checks.state === 'pending' ? 'ChecksPending' : 'ChecksFailing';
      return ctx.requeueAfter(pollMs, {
        controllerStatus: { phase: 'waiting', headSha: head },
        conditions: [current, conditionFalse('ChecksPassed', reason, `checks on ${head}: ${checks.state}`), conditionFalse('Merged', reason)],
      });
    }
    const passed = conditionTrue('ChecksPassed', 'ChecksPassed');

    const merge = await ctx.effects.ensure({
      key: mergeKey,
      kind: 'forge-merge',
      request: mergeRequest,
      observe: observeMerge,
      apply: async () => {
        // The forge merges only if the head is still `head` (its own precondition).
        const r = await api.merge(head);
        if (r.ok && r.body?.merged) return { state: 'applied', ...(r.body.sha ? { externalRef: r.body.sha } : {}) };
        if (r.status >= 500) return { state: 'indeterminate', error: `HTTP ${r.status}` };
        return { state: 'rejected', error: r.body?.message ?? `HTTP ${r.status}` };
      },
    });
    if (merge.state === 'rejected') {
      return ctx.settled({ controllerStatus: { phase: 'blocked', headSha: head }, conditions: [current, passed, conditionFalse('Merged', 'MergeRejected', merge.error)] });
    }
    if (merge.state !== 'applied') {
      return ctx.requeueAfter(pollMs, { controllerStatus: { phase: 'merging', headSha: head }, conditions: [current, passed, conditionUnknown('Merged', 'MergeUncertain', merge.error)] });
    }
    // Merged: the next pass reads the forge again and reports it.
    return ctx.requeue({ controllerStatus: { phase: 'merging', headSha: head }, conditions: [current, passed, conditionUnknown('Merged', 'MergeRequested')] });
  },
});
