// A forge on 127.0.0.1 for the controller tests: pull requests (head, state, labels, merged),
// commit statuses by sha, and merges that check the expected head, in GitHub's REST shape. It
// counts merges (of each pull request) and logs every request; `onMerge` runs after a merge is done and before its
// answer is sent (a test kills the caller there).
import { createServer } from 'node:http';
import { createHash } from 'node:crypto';

export async function startFakeForge({ repository = 'acme/widgets' } = {}) {
  const pulls = new Map();
  const checks = new Map();
  const log = [];
  let merges = 0;
  let onMerge = null;
  const prefix = `/repos/${repository}/`;

  const json = (res, status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const pullView = (n, p) => ({
    number: n,
    state: p.state,
    merged: p.merged,
    merge_commit_sha: p.mergeSha,
    head: { sha: p.head },
    labels: p.labels.map((name) => ({ name })),
  });

  const server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    log.push({ method: req.method, path: req.url });
    if (!req.url.startsWith(prefix)) return json(res, 404, { message: 'Not Found' });
    const path = req.url.slice(prefix.length).split('/').map(decodeURIComponent);
    const pull = pulls.get(Number(path[1]));
    if (req.method === 'GET' && path[0] === 'pulls' && path.length === 2) {
      return pull ? json(res, 200, pullView(Number(path[1]), pull)) : json(res, 404, { message: 'Not Found' });
    }
    if (req.method === 'GET' && path[0] === 'commits' && path[2] === 'status') {
      return json(res, 200, { state: checks.get(path[1]) ?? 'pending' });
    }
    if (req.method === 'PUT' && path[0] === 'pulls' && path[2] === 'merge') {
      if (!pull) return json(res, 404, { message: 'Not Found' });
      const { sha } = JSON.parse(body || '{}');
      if (pull.merged) return json(res, 405, { message: 'Pull Request is already merged' });
      if (sha !== pull.head) return json(res, 409, { message: 'Head branch was modified. Review and try the merge again.' });
      if (checks.get(pull.head) !== 'success') return json(res, 405, { message: 'Required status check is failing' });
      merges += 1;
      pull.merges += 1;
      pull.merged = true;
      pull.state = 'closed';
      pull.mergeSha = createHash('sha1').update(`merge of ${pull.head}`).digest('hex');
      if (onMerge) await onMerge();
      return json(res, 200, { merged: true, sha: pull.mergeSha, message: 'Pull Request successfully merged' });
    }
    if (req.method === 'POST' && path[0] === 'issues' && path[2] === 'labels') {
      if (!pull) return json(res, 404, { message: 'Not Found' });
      for (const name of JSON.parse(body || '{}').labels ?? []) if (!pull.labels.includes(name)) pull.labels.push(name);
      return json(res, 200, pull.labels.map((name) => ({ name })));
    }
    if (req.method === 'DELETE' && path[0] === 'issues' && path[2] === 'labels') {
      if (!pull || !pull.labels.includes(path[3])) return json(res, 404, { message: 'Label does not exist' });
      pull.labels = pull.labels.filter((l) => l !== path[3]);
      return json(res, 200, pull.labels.map((name) => ({ name })));
    }
    return json(res, 404, { message: 'Not Found' });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const sockets = new Set();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });

  return {
    url: `http://127.0.0.1:${server.address().port}`,
    repository,
    log,
    /** Merges done, of every pull request. */
    get merges() {
      return merges;
    },
    /** Merges done of pull request `number` (one more than one is a bug of the caller). */
    mergesOf(number) {
      return pulls.get(number).merges;
    },
    openPull(number, head) {
      pulls.set(number, { head, state: 'open', merged: false, mergeSha: null, labels: [], merges: 0 });
    },
    pull(number) {
      return structuredClone(pulls.get(number));
    },
    /** A push: the pull request's head becomes `sha`. */
    push(number, sha) {
      pulls.get(number).head = sha;
    },
    setChecks(sha, state) {
      checks.set(sha, state);
    },
    /** `fn` runs after each merge and before its answer is sent; null for none. */
    set onMerge(fn) {
      onMerge = fn;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
