// The Node worker runtime: what runs inside a run's child for `.workflow.mjs`, `.workflow.js`
// and `.workflow.ts` sources (see docs/WORKFLOW_SERVER.md, "Children and workers").
//
// Order of a child's life: read the launch envelope from stdin; verify the root source and
// every saved mounted source *before importing any workflow code*; import the workflow; compare
// the mounts it resolves with the saved ones; say hello; execute nodes and propose each
// transition; exit when the run parks, finishes, or the host says the run moved on.
import { readFileSync } from 'node:fs';
import module from 'node:module';
import { dirname, relative, resolve as resolvePath, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { native as addon, packageDir } from './native.js';
import { fromNative } from './errors.js';
import { isEffectFailed, isWorkflow } from './authoring.js';

/**
 * The launch envelope: all of stdin, up to its end. Read synchronously: a child (and a standby
 * worker waiting for its run) has nothing else to do meanwhile, and it skips setting up
 * `process.stdin`, which costs milliseconds on every start.
 */
function readStdin() {
  try {
    return readFileSync(0, 'utf8');
  } catch (e) {
    // A non-blocking stdin (not how the host starts workers) cannot be read this way.
    if (e.code !== 'EAGAIN') throw e;
    return readStdinAsync();
  }
}

async function readStdinAsync() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

/** A native worker whose errors are `PiwError`s. */
function wrap(worker) {
  return new Proxy(worker, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== 'function') return value;
      return (...args) => {
        try {
          return value.apply(target, args);
        } catch (e) {
          throw fromNative(e);
        }
      };
    },
  });
}

const message = (e) => (e instanceof Error ? e.message : String(e));

/** Stops the run for review without loading (or after refusing) the workflow's code. */
function stopForReview(w, reason) {
  w.hello(null, {});
  w.fail(reason, true);
}

/**
 * Imports the workflow module; resolves with the workflow and the local files the import
 * loaded besides the root (not this package's own files, not `node_modules`).
 */
async function loadWorkflow(file) {
  const imported = new Set();
  // Sees every module the import resolves, so the files a workflow imports are verified on
  // later activations like declared mounts, before any of their code runs.
  const hooks = module.registerHooks?.({
    resolve(specifier, context, nextResolve) {
      const resolved = nextResolve(specifier, context);
      if (resolved.url.startsWith('file:')) imported.add(resolved.url);
      return resolved;
    },
  });
  let mod;
  try {
    mod = await import(pathToFileURL(file).href);
  } finally {
    hooks?.deregister();
  }
  const workflow = mod.default ?? mod.workflow;
  if (!isWorkflow(workflow)) {
    throw new Error(`${file} must export default defineWorkflow({...})`);
  }
  const root = resolvePath(file);
  const files = [...imported]
    .map((url) => fileURLToPath(url))
    .filter(
      (path) => path !== root && !path.startsWith(packageDir + sep) && !path.includes(`${sep}node_modules${sep}`),
    );
  return { workflow, imports: [...new Set(files)] };
}

/**
 * The mounted sources of this activation: the ones the workflow declares, and every local
 * file its import loaded (named `import:<path relative to the workflow's directory>`).
 */
function resolveMounts(workflow, imports, file) {
  const out = {};
  for (const [name, path] of Object.entries(workflow.mounts)) {
    out[name] = { path, hash: addon.hashFile(path) };
  }
  const base = dirname(resolvePath(file));
  for (const path of imports) {
    out[`import:${relative(base, path)}`] = { path, hash: addon.hashFile(path) };
  }
  return out;
}

/** A node failure: the node's code threw, or gave something that is not JSON. */
class NodeFailure extends Error {}

/**
 * The value as JSON data (what the host stores): `undefined` becomes `null`; a value JSON
 * cannot represent (a BigInt, a cycle) is a failure of the node that produced it.
 */
function toJson(value, what) {
  if (value === undefined) return null;
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new NodeFailure(`${what} is not JSON: ${message(e)}`);
  }
  if (text === undefined) return null;
  const bytes = Buffer.byteLength(text);
  if (bytes > maxValueBytes) {
    throw new NodeFailure(
      `${what} is ${bytes} bytes of JSON; at most ${maxValueBytes} (keep large data in files and pass their paths)`,
    );
  }
  return JSON.parse(text);
}

/**
 * The largest value a node may hand the host: a message's payload is limited to 256 KiB, and
 * this leaves room for the message around one value. The worker library sends a run's last
 * output once even though it is the result too (when the host lists `result_is_output` in its
 * hello), and reports deferred steps on their own when a value would not fit beside them. A
 * host older than that takes the result in full beside the output: half as much then.
 */
const MAX_VALUE_BYTES = 240 * 1024;
const MAX_VALUE_BYTES_OLDER_HOST = 120 * 1024;
/** This child's limit (one run per process), set from the host's hello. */
let maxValueBytes = MAX_VALUE_BYTES_OLDER_HOST;

/** Runs node code; any exception becomes a `NodeFailure`. */
async function nodeCode(what, f) {
  try {
    return await f();
  } catch (e) {
    throw e instanceof NodeFailure ? e : new NodeFailure(`${what}: ${message(e)}`);
  }
}

/** Executes one node; resolves with `{ outcome }` or `{ parked: true }`. */
async function execute(w, impl, input, ctx) {
  try {
    return await executeNode(w, impl, input, ctx);
  } catch (e) {
    if (e instanceof NodeFailure) return { outcome: { status: 'failed', error: e.message } };
    throw e;
  }
}

async function executeNode(w, impl, input, ctx) {
  switch (impl.kind) {
    case 'compute': {
      const output = await nodeCode('run', () => impl.run(input, ctx));
      return { outcome: { status: 'succeeded', output: toJson(output, 'the output') } };
    }
    case 'action': {
      const key = String(await nodeCode('effect.key', () => impl.effectKey(input, ctx)));
      const fingerprint = String(
        impl.fingerprint ? await nodeCode('effect.fingerprint', () => impl.fingerprint(input, ctx)) : key,
      );
      const r = w.reserveEffect(key, fingerprint, impl.retry);
      if (r.reservation === 'already_applied') {
        return { outcome: { status: 'succeeded', output: r.receipt } };
      }
      if (r.reservation === 'already_failed') {
        return { outcome: { status: 'failed', error: r.error } };
      }
      w.effectApplying(r.effect_id);
      let receipt;
      try {
        // `retry` tells `apply` that an earlier application was interrupted (allowed only
        // under `idempotency_key` or `read_back`): it must check before acting again.
        const effect = { id: r.effect_id, key, retry: r.retry };
        receipt = await impl.apply(input, { ...ctx, effect });
      } catch (e) {
        if (isEffectFailed(e)) {
          // The workflow says the effect certainly did not happen.
          w.settleEffect(r.effect_id, { status: 'failed', error: message(e) });
          return { outcome: { status: 'failed', error: message(e) } };
        }
        // Whether the effect happened is unknown: leave it applying and let this child die.
        // The host then makes it `uncertain` (stopping the run for review) under `never`, or
        // retries it under `idempotency_key` / `read_back`.
        throw new Error(`effect ${key} ended in doubt: ${message(e)}`, { cause: e });
      }
      let stored;
      try {
        stored = toJson(receipt, 'the effect receipt');
      } catch (e) {
        // It happened, but its proof cannot be stored: the same doubt as above.
        throw new Error(`effect ${key}: ${e.message}`, { cause: e });
      }
      w.settleEffect(r.effect_id, { status: 'applied', receipt: stored });
      return { outcome: { status: 'succeeded', output: stored } };
    }
    case 'agent':
    case 'assistant_message': {
      const request = impl.request ? await nodeCode('request', () => impl.request(input, ctx)) : { input };
      w.requestInteraction(impl.kind, toJson(request, 'the request'));
      return { parked: true };
    }
    case 'checkpoint':
    case 'human_decision': {
      const request = impl.request ? await nodeCode('request', () => impl.request(input, ctx)) : { input };
      w.wait(impl.kind, toJson(request, 'the request'));
      return { parked: true };
    }
    case 'notify': {
      const content = await nodeCode('content', () => impl.content(input, ctx));
      w.notify(toJson(content, 'the message'));
      return { outcome: { status: 'succeeded', output: toJson(input, 'the input') } };
    }
    default:
      return { outcome: { status: 'failed', error: `unknown node kind ${impl.kind}` } };
  }
}

/** Judges a submission; resolves with an error text, or `null` to accept it. */
async function judge(impl, payload, input) {
  if (!impl.validate) return null;
  try {
    const verdict = await impl.validate(payload, input);
    if (verdict === undefined || verdict === null || verdict === true) return null;
    return verdict === false ? 'rejected by validate' : String(verdict);
  } catch (e) {
    return message(e);
  }
}

async function drive(w) {
  const env = w.envelope;
  if (env.mode !== 'run' && env.mode !== 'validate') throw new Error(`unknown mode ${env.mode}`);
  try {
    w.verifySources();
  } catch (e) {
    if (e.code !== 'source_changed') throw e;
    stopForReview(w, e.message);
    return;
  }
  let workflow;
  let mounts;
  try {
    const loaded = await loadWorkflow(env.sourceRoot);
    workflow = loaded.workflow;
    mounts = resolveMounts(workflow, loaded.imports, env.sourceRoot);
    w.compareMounts(mounts);
  } catch (e) {
    // A changed mount, or a module that does not load: stop for review (the run may be
    // resumed once the source is fixed or restored); nothing is lost.
    const reason = e.code === 'source_changed' ? e.message : `cannot load the workflow: ${message(e)}`;
    stopForReview(w, reason);
    return;
  }
  const hello = w.hello(workflow.graph, mounts, true);
  const resume = hello.resume;
  if (hello.stop !== null && hello.stop !== undefined) return;
  maxValueBytes = (hello.features ?? []).includes('result_is_output')
    ? MAX_VALUE_BYTES
    : MAX_VALUE_BYTES_OLDER_HOST;
  let nodeId;
  let input = hello.nodeInput;
  let carried = null;
  switch (resume.resume) {
    case 'continue':
      nodeId = resume.node_id;
      carried = { status: 'succeeded', output: { answer: hello.answer ?? null } };
      break;
    case 'accepted':
      // A submission this run accepted before its child went away: its payload is the
      // node's output, exactly as after a fresh acceptance.
      nodeId = resume.node_id;
      if (!hello.submission) throw new Error('protocol: an accepted resume without a submission');
      carried = { status: 'succeeded', output: hello.submission.payload ?? null };
      break;
    case 'interaction_expired':
      nodeId = resume.node_id;
      carried = { status: 'timed_out' };
      break;
    case 'validate': {
      nodeId = resume.node_id;
      if (!hello.submission) throw new Error('protocol: a validate resume without a submission');
      const { submission_id: submissionId, payload } = hello.submission;
      const error = await judge(workflow.nodes[nodeId] ?? {}, payload, input);
      w.validationResult(submissionId, error);
      if (error !== null) return;
      carried = { status: 'succeeded', output: payload ?? null };
      break;
    }
    default:
      nodeId = resume.node_id ?? workflow.graph.start;
      // The host opens the first attempt with the hello when it can.
      if (resume.attempt_id === undefined) resume.attempt_id = w.nodeStarted(nodeId);
  }
  let attemptId = resume.attempt_id;
  // Consecutive pure steps are reported together (one commit for many nodes). A step is
  // deferred only when it leaves a compute node without a timeout that ran in this child and
  // enters another one, within DEFER_WINDOW_MS of the last report to the host, and while the
  // batch stays under MAX_DEFERRED steps and MAX_DEFERRED_BYTES. A timer reports the batch if
  // a slow asynchronous node keeps it waiting. If this child dies with steps deferred, those
  // pure nodes rerun from the last committed boundary: at most a window's worth of work.
  const nodesOf = workflow.graph.nodes;
  const pure = (id) => nodesOf[id]?.kind === 'compute' && nodesOf[id]?.timeout_ms === undefined;
  const batch = new DeferredBatch(w);
  for (;;) {
    let outcome = carried;
    carried = null;
    const ranHere = outcome === null;
    if (ranHere) {
      const impl = workflow.nodes[nodeId];
      const ctx = {
        runId: env.runId,
        nodeId,
        attemptId,
        runInput: hello.input,
        projectDir: env.projectDir,
        progress: (text, data) => w.progress(String(text), toJson(data, 'progress data')),
      };
      const step = await execute(w, impl, input, ctx);
      if (batch.settle()) return; // the run parked while the node ran
      if (step.parked) return;
      outcome = step.outcome;
    }
    if (outcome.status === 'succeeded') input = outcome.output;
    const route = w.route(nodeId, outcome);
    if (route.next !== undefined) {
      if (ranHere && pure(nodeId) && pure(route.next) && batch.hasRoom()) {
        batch.defer(outcome, route.next);
        nodeId = route.next;
        attemptId = undefined;
        continue;
      }
      batch.cancelTimer();
      const reply = w.transition(outcome, route.next);
      batch.reported();
      if (reply.parked) return;
      nodeId = route.next;
      attemptId = reply.attemptId;
    } else if (route.complete) {
      batch.cancelTimer();
      w.complete(outcome, input ?? null);
      return;
    } else {
      batch.cancelTimer();
      w.fail(route.fail, false);
      return;
    }
  }
}

/** At most this many steps are reported together. */
const MAX_DEFERRED = 64;
/** Deferred steps stay well inside the host's 256 KiB payload limit. */
const MAX_DEFERRED_BYTES = 64 * 1024;
/** Steps are deferred only within this long of the last report to the host. */
const DEFER_WINDOW_MS = 20;

/**
 * Milliseconds on the monotonic clock. Not `performance.now()`: the global `performance` is
 * loaded lazily on first use, which cost a run's first node about a millisecond.
 */
const monotonicMs = () => Number(process.hrtime.bigint()) / 1e6;

/** The steps a worker has taken but not reported yet, and the timer that reports them. */
class DeferredBatch {
  constructor(w) {
    this.w = w;
    this.lastReport = monotonicMs();
    this.timer = null;
    this.error = null;
    this.parked = false;
  }

  hasRoom() {
    return (
      this.w.deferredSteps < MAX_DEFERRED &&
      this.w.deferredBytes < MAX_DEFERRED_BYTES &&
      monotonicMs() - this.lastReport < DEFER_WINDOW_MS
    );
  }

  defer(outcome, next) {
    this.w.deferTransition(outcome, next);
    if (this.timer === null) {
      const left = Math.max(0, DEFER_WINDOW_MS - (monotonicMs() - this.lastReport));
      this.timer = setTimeout(() => this.flushNow(), left);
    }
  }

  /** Runs only while node code awaits: reports the batch, opening the running node's attempt. */
  flushNow() {
    this.timer = null;
    if (this.w.deferredSteps === 0) return;
    try {
      this.parked = this.w.flush();
      this.lastReport = monotonicMs();
    } catch (e) {
      this.error = e;
    }
  }

  /** After node code returned: rethrows a failed timed report; true when the run parked. */
  settle() {
    if (this.error) {
      const e = this.error;
      this.error = null;
      throw e;
    }
    return this.parked;
  }

  cancelTimer() {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  reported() {
    this.lastReport = monotonicMs();
  }
}

/**
 * Runs the runtime's own code paths once, with no workflow code: a standby worker does this
 * while it waits for its run, so the run does not pay for cold code (V8 compiles functions on
 * their first call; the first import through the resolve hook, graph compile, envelope
 * parsing and hashing are slower too). It drives the package's own warm-up workflow against
 * a stand-in for the host that records nothing. Best effort: a failure only costs speed.
 * Resolves with whether the rehearsal ran to its end.
 */
export async function warmUp() {
  try {
    const file = fileURLToPath(new URL('./warmup.workflow.mjs', import.meta.url));
    const envelope = {
      schema: 'piw.launch.v1',
      run_id: 'warmup',
      generation: 1,
      child_token: 'warmup',
      mode: 'run',
      source_root: file,
      source_hash: addon.hashFile(file),
      mounted_sources: {},
      project_dir: packageDir,
      input_hash: '',
      socket_path: '/nonexistent',
    };
    const parsed = new addon.Worker(JSON.stringify(envelope));
    parsed.verifySources();
    const host = new Rehearsal(parsed.envelope);
    await drive(wrap(host));
    return host.completed;
  } catch {
    return false; // only speed is at stake
  }
}

/** A stand-in for the native worker that talks to no host (see `warmUp`). */
class Rehearsal {
  constructor(envelope) {
    this.envelope = envelope;
    this.graph = null;
    this.deferredSteps = 0;
    this.deferredBytes = 0;
    this.completed = false;
  }

  verifySources() {}

  compareMounts() {}

  hello(graph) {
    this.graph = graph;
    return {
      stop: null,
      mode: 'run',
      resume: { resume: 'fresh', node_id: graph.start, attempt_id: 'warmup' },
      input: null,
      nodeInput: null,
    };
  }

  route(from, outcome) {
    return addon.routeGraph(this.graph, from, outcome);
  }

  deferTransition(outcome) {
    this.deferredSteps += 1;
    this.deferredBytes += JSON.stringify(outcome).length;
  }

  flush() {
    this.deferredSteps = 0;
    this.deferredBytes = 0;
    return false;
  }

  transition() {
    this.flush();
    return { attemptId: 'warmup', parked: false };
  }

  complete() {
    this.flush();
    this.completed = true;
  }

  fail() {}
}

/** Runs one child's life; resolves with the process exit code. */
export async function runWorker() {
  let w;
  try {
    w = wrap(new addon.Worker(await readStdin()));
    // A standby worker was started before its run was known: take on the run's place now.
    const { projectDir, runId } = w.envelope;
    process.chdir(projectDir);
    process.env.PIW_RUN_ID = runId;
  } catch (e) {
    process.stderr.write(`piw worker: ${message(fromNative(e))}\n`);
    return 1;
  }
  try {
    await drive(w);
    return 0;
  } catch (e) {
    if (e.code === 'stale') {
      // The run moved on without this child: stop quietly, report nothing.
      process.stderr.write(`piw worker: the run moved on (${e.message}); stopping\n`);
      return 0;
    }
    process.stderr.write(`piw worker: ${e.code ?? 'error'}: ${message(e)}\n`);
    return 1;
  }
}
