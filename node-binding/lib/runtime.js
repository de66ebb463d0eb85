// The Node worker runtime: what runs inside a run's child for `.workflow.mjs`, `.workflow.js`
// and `.workflow.ts` sources (see docs/WORKFLOW_SERVER.md, "Children and workers").
//
// Order of a child's life: read the launch envelope from stdin; verify the root source and
// every saved mounted source *before importing any workflow code*; import the workflow; compare
// the mounts it resolves with the saved ones; say hello; execute nodes and propose each
// transition; exit when the run parks, finishes, or the host says the run moved on.
import { readFile, readFileSync, realpathSync } from 'node:fs';
import module from 'node:module';
import { dirname, join, relative, resolve as resolvePath, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { native as addon, packageDir } from './native.js';
import { CancelledError, fromNative, TimeoutError } from './errors.js';
import { checkOnTimeout, DECIDED_WITH_REQUEST, humanResponse, isWaitThen, isWorkflow, resolveIncludes, wakeOf } from './authoring.js';
import { BUILTINS_DIR, looksLikePath, resolveWorkflow as resolveReference } from './workflow-names.js';
import { registerPackageAliases } from './aliases.js';
import { warmTypeScript } from './typescript.js';
import { validateWorkflowUpdate } from './updates.js';
import { checkCommand, commandGroups, killGroup, MAX_TIMER_MS, runCommand } from './command.js';

/**
 * The launch envelope: all of stdin, up to its end. Read synchronously: a child started for its
 * run has nothing else to do meanwhile, and it skips setting up `process.stdin`, which costs
 * milliseconds on every start.
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

/**
 * How long a standby worker waits for its run before it loads the TypeScript compiler. Loading
 * it takes ~70 ms of CPU (amaro is 3.7 MB of JavaScript and WebAssembly): done at once, every
 * worker the pool starts while runs are busy took that from them, and a run that arrived
 * during the load waited for its end. A worker that has waited this long is on a quiet host.
 */
export const TYPESCRIPT_WARM_DELAY_MS = 500;

/**
 * All of `fd` up to its end, read without blocking the thread; `onIdle` runs once if the end has
 * not come within `idleMs`. A standby worker reads its launch envelope so, and loads the
 * TypeScript compiler when idle (see {@link TYPESCRIPT_WARM_DELAY_MS}).
 */
export function readWhileIdle(fd, idleMs, onIdle) {
  return new Promise((resolve, reject) => {
    const idle = setTimeout(onIdle, idleMs);
    readFile(fd, 'utf8', (e, text) => {
      clearTimeout(idle);
      if (!e) resolve(text);
      else if (e.code === 'EAGAIN' && fd === 0) readStdinAsync().then(resolve, reject);
      else reject(e);
    });
  });
}

/** The TypeScript compiler, loaded ahead of a run; a failure only costs speed. */
function warmTypeScriptQuietly() {
  try {
    warmTypeScript();
  } catch {
    // the first TypeScript file loads it again, and says what is wrong
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
/** Text on one line (the host quotes a child's last stderr line). */
const oneLine = (text) => text.replace(/\s*\n\s*/g, ' ');

/** Stops the run for review without loading (or after refusing) the workflow's code. */
function stopForReview(w, reason) {
  w.hello(null, {});
  w.fail(reason, true);
}

/** Fails the run at once: its workflow cannot load, and loading again would fail the same way. */
function failToLoad(w, reason) {
  w.hello(null, {});
  w.fail(reason, false);
}

/**
 * Whether a file a workflow's import loaded is part of the workflow's source (recorded with its
 * hash, verified on resume): the project's files and the package's built-in workflows (a
 * changed built-in is a changed source, like a changed file), not the package's own code nor
 * `node_modules`.
 */
function isWorkflowSource(path) {
  if (path.startsWith(BUILTINS_DIR + sep)) return true;
  return !path.startsWith(packageDir + sep) && !path.includes(`${sep}node_modules${sep}`);
}

/** A load failure with the file, line and column it happened at (when Node tells). */
class LoadError extends Error {}

/**
 * Where a syntax error is. Node puts `path:line` (and a caret line) at the top of the stack for
 * TypeScript it cannot strip, but not for a JavaScript module's syntax error: for that, `node
 * --check` on each candidate file finds it (a subprocess, only when loading already failed).
 */
function locate(e, candidates) {
  if (typeof e?.location === 'string') return e.location;
  // `path:line`, the source (with a line of context for TypeScript), then a caret line.
  const top = /^(\/[^\n]*?):(\d+)\n(?:[^\n]*\n){1,3}?([ \t]*)\^/.exec(String(e?.stack ?? ''));
  if (top) return `${top[1]}:${top[2]}:${top[3].length + 1}`;
  if (!(e instanceof SyntaxError)) return null;
  for (const file of candidates) {
    if (!/\.(m?js)$/.test(file)) continue;
    const check = process.getBuiltinModule('node:child_process').spawnSync(process.execPath, ['--check', file], { encoding: 'utf8', timeout: 30_000 });
    const m = /^(\/[^\n]*?):(\d+)\n[^\n]*\n([ \t]*)\^/.exec(check.stderr ?? '');
    if (check.status !== 0 && m) return `${m[1]}:${m[2]}:${m[3].length + 1}`;
  }
  return null;
}

/**
 * Imports the workflow module; resolves with the workflow and the local files the import
 * loaded besides the root (not this package's own files, not `node_modules`).
 */
async function loadWorkflow(file, projectDir, saved = new Set()) {
  registerPackageAliases();
  const imported = new Set();
  /** importing file URL -> the file URLs it imports: finds an import cycle when one fails. */
  const edges = new Map();
  // Sees every module the import resolves, so the files a workflow imports are verified on
  // later activations like the root, before any of their code runs.
  const hooks = module.registerHooks?.({
    resolve(specifier, context, nextResolve) {
      const resolved = nextResolve(specifier, context);
      if (resolved.url.startsWith('file:')) {
        imported.add(resolved.url);
        if (context.parentURL) edges.set(context.parentURL, [...(edges.get(context.parentURL) ?? []), resolved.url]);
      }
      return resolved;
    },
  });
  const root = resolvePath(file);
  const local = () =>
    [...imported]
      .map((url) => fileURLToPath(url))
      .filter((path) => path !== root && isWorkflowSource(path));
  let workflow;
  try {
    let mod;
    try {
      mod = await import(pathToFileURL(file).href);
    } catch (e) {
      const cycle = e instanceof ReferenceError ? importCycle(edges, pathToFileURL(root).href) : null;
      if (cycle) {
        throw new LoadError(
          `workflow source cycle: ${cycle.join(' -> ')}; a workflow cannot include itself, directly or through others (${message(e)})`,
        );
      }
      const where = locate(e, [root, ...local().reverse()]);
      throw new LoadError(`cannot load ${where ?? root}: ${e?.code ? `${e.code}: ` : ''}${message(e)}`);
    }
    workflow = mod.default ?? mod.workflow;
    if (!isWorkflow(workflow)) {
      throw new LoadError(`${root} must export default defineWorkflow({...})`);
    }
    if (workflow.pending) {
      // Includes by name or path: resolved now, with the hook still seeing every file loaded,
      // so each is recorded with its hash and verified on resume like a direct import.
      try {
        workflow = await resolveIncludes(workflow, root, (reference, from) =>
          loadReference(reference, from, projectDir, saved),
        );
      } catch (e) {
        if (e instanceof LoadError || e.code === 'source_changed') throw e;
        throw new LoadError(`cannot load ${root}: ${message(e)}`);
      }
    }
  } finally {
    hooks?.deregister();
  }
  return { workflow, imports: [...new Set(local())] };
}

/**
 * Loads the workflow an `includeWorkflow` reference names: a path relative to the including
 * file, or a discovered name (the project's `.pi/workflows/`, then `~/.pi/agent/workflows/`,
 * as for `piw run start <name>`).
 */
async function loadReference(reference, from, projectDir, saved) {
  let found;
  try {
    found = await resolveReference(reference, looksLikePath(reference) ? dirname(from) : projectDir);
  } catch (e) {
    throw new LoadError(`cannot include ${JSON.stringify(reference)} (from ${from}): ${message(e)}`);
  }
  // A resumed run loads only the files it recorded (their hashes were verified before any
  // code loaded): a name that now resolves elsewhere (say a new project file hiding the global
  // one) is a changed source, refused before that file's code runs.
  // Compared as the import hook records files: by their real path (a project reached through
  // a symlink is the same file).
  if (saved.size > 0 && !saved.has(realpathSync(found.path))) {
    const e = new Error(
      `source_changed: includeWorkflow(${JSON.stringify(reference)}) now resolves to ${found.path}, not a file this run recorded`,
    );
    e.code = 'source_changed';
    throw e;
  }
  if (found.path.endsWith('.json')) {
    throw new LoadError(`cannot include ${found.path}: a JSON workflow cannot be included; include a .workflow.{ts,mts,js,mjs} file`);
  }
  let mod;
  try {
    mod = await import(pathToFileURL(found.path).href);
  } catch (e) {
    const where = locate(e, [found.path]);
    throw new LoadError(`cannot load ${where ?? found.path} (included as ${JSON.stringify(reference)}): ${e?.code ? `${e.code}: ` : ''}${message(e)}`);
  }
  return { file: found.path, workflow: mod.default ?? mod.workflow };
}

/**
 * A cycle of imports among the workflow's own files that starts at the root, as file paths
 * (`[a, b, a]`), or null. Two workflow modules importing each other to include each other
 * fail to load with a ReferenceError (one reads the other's export before it exists); this
 * names the cycle instead.
 */
function importCycle(edges, rootUrl) {
  const own = (url) => url.startsWith('file:') && isWorkflowSource(fileURLToPath(url));
  const path = [];
  const onPath = new Set();
  const done = new Set();
  const visit = (url) => {
    if (onPath.has(url)) return [...path.slice(path.indexOf(url)), url];
    if (done.has(url) || !own(url)) return null;
    path.push(url);
    onPath.add(url);
    for (const next of edges.get(url) ?? []) {
      const found = visit(next);
      if (found) return found;
    }
    path.pop();
    onPath.delete(url);
    done.add(url);
    return null;
  };
  return visit(rootUrl)?.map((url) => fileURLToPath(url)) ?? null;
}

/** The local files the workflow's import loaded (named `import:<path relative to it>`). */
function resolveMounts(imports, file) {
  const out = {};
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
 * The largest value a node may hand the host. A host that stores large values (it lists
 * `large_values` in its hello) takes up to 64 MiB of JSON a value: the worker library uploads
 * a value over 64 KiB in chunks and sends a reference, and reads references back before the
 * workflow's code sees them. An older host takes what fits a message's 256 KiB payload: the
 * worker library sends a run's last output once even though it is the result too (when the
 * host lists `result_is_output`), and reports deferred steps on their own when a value would
 * not fit beside them; a host older still takes the result in full beside the output: half as
 * much then.
 */
const MAX_LARGE_VALUE_BYTES = 64 * 1024 * 1024;
const MAX_VALUE_BYTES = 240 * 1024;
const MAX_VALUE_BYTES_OLDER_HOST = 120 * 1024;
/** This child's limit (one run per process), set from the host's hello. */
let maxValueBytes = MAX_VALUE_BYTES_OLDER_HOST;

/**
 * Runs node code; any exception becomes a `NodeFailure` naming the node: `node b failed: boom`
 * from the node's `run`, `node b failed in its prompt: boom` from another callback.
 */
async function nodeCode(ctx, what, f) {
  try {
    return await f();
  } catch (e) {
    if (e instanceof NodeFailure) throw e;
    throw new NodeFailure(failedIn(ctx.state.node, what, e));
  }
}

/** The error of a node whose callback `what` threw `e`. */
function failedIn(node, what, e) {
  return `node ${node} failed${what === 'run' ? '' : ` in ${what}`}: ${message(e)}`;
}

/**
 * A submission as data: a string that holds JSON (alone, inside a ```json fence, or as the one
 * object or array in some prose) is parsed; anything else stays as it is.
 */
export function tolerantJson(value) {
  if (typeof value !== 'string') return value;
  const text = value.trim();
  const fenced = /^```[A-Za-z]*\s*\n([\s\S]*?)\n?```$/.exec(text);
  const body = fenced ? fenced[1].trim() : text;
  try {
    return JSON.parse(body);
  } catch {
    // not JSON as a whole: look for one embedded object or array
  }
  const first = body.search(/[[{]/);
  const last = Math.max(body.lastIndexOf('}'), body.lastIndexOf(']'));
  if (first >= 0 && last > first) {
    try {
      return JSON.parse(body.slice(first, last + 1));
    } catch {
      // prose after all
    }
  }
  return value;
}

/**
 * Judges a submission for an agent node: resolves with `{ output }` (the normalised output:
 * what `validate` returned, else the parsed submission) or `{ error }`.
 */
async function judge(impl, payload, ctx) {
  if (impl.kind === 'assistant_message') {
    return typeof payload === 'string' && payload.trim() !== ''
      ? { output: payload }
      : { error: 'the response must be a non-empty message' };
  }
  const parsed = tolerantJson(payload);
  if (!impl.validate) return { output: parsed };
  try {
    // An exception `validate` leaves uncaught (a promise nobody awaits) rejects the
    // submission with its message, like one it throws, instead of ending the child.
    const normalised = await guardUncaught(
      () => impl.validate(parsed, ctx),
      (e) => e,
    );
    return { output: normalised === undefined ? parsed : normalised };
  } catch (e) {
    return { error: message(e) };
  }
}

/** What every interactive request carries (see "The request contract" in the README). */
function requestBase(run, ctx, kind) {
  return { workflow: run.workflow.name, title: run.title, node: ctx.state.node, kind };
}

/** The `human_decision` request: question, details, choices, text input, audience, extra. */
async function humanRequest(run, impl, ctx) {
  const asked = impl.request ? ((await nodeCode(ctx, 'its request', () => impl.request(ctx))) ?? {}) : {};
  const audience =
    typeof impl.audience === 'function'
      ? await nodeCode(ctx, 'its audience', async () => {
          const value = await impl.audience(ctx);
          if (typeof value !== 'string' || value === '') throw new Error(`audience must return a non-empty string, got ${JSON.stringify(value ?? null)}`);
          return value;
        })
      : impl.audience;
  const onTimeout =
    typeof impl.onTimeout === 'function'
      ? await nodeCode(ctx, 'its onTimeout', async () => {
          const value = await impl.onTimeout(ctx);
          return value === undefined || value === null ? null : checkOnTimeout(impl.choices, value);
        })
      : impl.onTimeout;
  const { revision, expiresAt } = asked;
  if (revision !== undefined && !(Number.isSafeInteger(revision) && revision > 0)) {
    throw new NodeFailure(`node ${ctx.state.node} failed in its request: revision must be a positive integer, got ${JSON.stringify(revision)}`);
  }
  let expiresInMs = null;
  if (expiresAt !== undefined) {
    const at = typeof expiresAt === 'string' ? Date.parse(expiresAt) : Number.NaN;
    if (Number.isNaN(at)) {
      throw new NodeFailure(`node ${ctx.state.node} failed in its request: expiresAt must be an ISO date, got ${JSON.stringify(expiresAt)}`);
    }
    if (onTimeout) {
      throw new NodeFailure(`node ${ctx.state.node} failed in its request: a request with onTimeout cannot also have expiresAt`);
    }
    expiresInMs = Math.max(1, at - Date.now());
  }
  const presentation = asked.presentation ?? null;
  const question = String(asked.title ?? presentation?.summary ?? `Decide ${ctx.state.node}`);
  const details = asked.title !== undefined && presentation?.summary ? String(presentation.summary) : null;
  // A choice's text rule goes with it: the host checks an answer against it when it is
  // given, so a mistyped answer is refused while the run still waits.
  const choices = Object.entries(impl.choices).map(([id, c]) => ({
    id,
    label: c.label,
    ...(c.description === undefined ? {} : { description: c.description }),
    ...(c.input
      ? {
          input: {
            name: c.input.name,
            prompt: c.input.prompt,
            ...(c.input.placeholder === undefined ? {} : { placeholder: c.input.placeholder }),
            ...(c.input.minLength === undefined ? {} : { minLength: c.input.minLength }),
            ...(c.input.maxLength === undefined ? {} : { maxLength: c.input.maxLength }),
          },
        }
      : {}),
  }));
  const withText = Object.values(impl.choices).find((c) => c.input);
  const textInput = withText
    ? {
        label: withText.input.prompt,
        ...(withText.input.placeholder === undefined ? {} : { placeholder: withText.input.placeholder }),
        required: (withText.input.minLength ?? 1) > 0,
      }
    : null;
  const extra = {};
  if (asked.subject !== undefined) extra.subject = asked.subject;
  if (presentation) extra.presentation = presentation;
  // The host answers with `extra.onTimeout.response` when the deadline passes unanswered.
  if (onTimeout) extra.onTimeout = onTimeout;
  if (revision !== undefined) extra.revision = revision;
  if (expiresAt !== undefined) extra.expiresAt = expiresAt;
  const request = {
    ...requestBase(run, ctx, 'human_decision'),
    question,
    details,
    choices,
    textInput,
    audience,
    ...(Object.keys(extra).length ? { extra } : {}),
  };
  return { request, deadlineMs: onTimeout?.afterMs ?? expiresInMs };
}

/**
 * Runs a shell action's command (see `runCommand`): complete lines of `updates.streams` go to
 * `updates.parseLine` in order. Resolves with `parse`'s value, else the result; rejects when the
 * command cannot start, times out, is stopped, a line fails to parse, or (without
 * `allowNonZeroExit`) it exits non-zero.
 */
async function runShell(impl, ctx, publishUpdate, effect) {
  // Every value `exec` returns is checked before the command starts: a bad one starts nothing.
  const spec = checkCommand(await impl.exec(ctx));
  const cwd = resolvePath(ctx.state.projectDir, spec.cwd ?? '.');
  // Updates are published in line order. A failing parseLine (or update) fails the node with
  // its error: the command is stopped and no later line is parsed. The chain always has a
  // handler, so the failure is never an unhandled rejection, which would end this child.
  let updates = Promise.resolve();
  let lineError = null;
  const stopRef = {};
  const lineContext = { ...ctx, publishUpdate, effect };
  const onLine = impl.parseLine
    ? (stream, line) => {
        if (!impl.streams.includes(stream)) return;
        updates = updates
          .then(async () => {
            if (lineError) return;
            const text = line.endsWith('\r') ? line.slice(0, -1) : line;
            const parsed = await impl.parseLine({ stream, text }, lineContext);
            for (const u of Array.isArray(parsed) ? parsed : parsed ? [parsed] : []) await publishUpdate(u);
          })
          .catch((e) => {
            lineError ??= e;
            stopRef.stop?.();
          });
      }
    : null;
  let result;
  try {
    result = await runCommand(spec, { cwd, env: process.env, signal: ctx.signal, onLine, stopRef });
  } catch (e) {
    await updates;
    if (lineError) throw new Error(`updates.parseLine failed: ${message(lineError)}`);
    throw e;
  }
  await updates;
  if (lineError) throw new Error(`updates.parseLine failed: ${message(lineError)}`);
  const { stdoutTruncated, stderrTruncated, ...shown } = result;
  const output = { ...shown, truncated: stdoutTruncated || stderrTruncated };
  return impl.parse ? impl.parse(output, ctx) : output;
}

/** Executes one node; resolves with `{ outcome }` or `{ parked: true }`. */
async function execute(w, run, impl, ctx) {
  try {
    return await executeNode(w, run, impl, ctx);
  } catch (e) {
    if (e instanceof NodeFailure) return { outcome: { status: 'failed', error: e.message } };
    throw e;
  }
}

async function executeNode(w, run, impl, ctx) {
  const ok = (output, what = 'the output') => ({ outcome: { status: 'succeeded', output: toJson(output, what) } });
  switch (impl.kind) {
    case 'compute': {
      const value = await nodeCode(ctx, 'run', () => impl.run(ctx));
      if (!isWaitThen(value)) return ok(value);
      parkOnTimer(w, value, value.output);
      return { parked: true };
    }
    case 'wait': {
      // Decided once, here: the host stores the wake time and the output with the timer.
      const spec = impl.wakeFor
        ? { for: await nodeCode(ctx, 'for', () => impl.wakeFor(ctx)) }
        : { until: await nodeCode(ctx, 'until', () => impl.wakeUntil(ctx)) };
      let wake;
      try {
        wake = wakeOf(spec, `wait node ${ctx.state.node}`);
      } catch (e) {
        return { outcome: { status: 'failed', error: e.message } };
      }
      parkOnTimer(w, wake, await nodeCode(ctx, 'output', () => impl.output(ctx)));
      return { parked: true };
    }
    case 'action': {
      // The reference's effect identity: run, effect type, node path and visit. Workflow code
      // does not supply it, so two actions can never share a receipt by accident.
      const key = `${ctx.state.runId}:${impl.effect.type}:${ctx.state.node}:${ctx.state.visit}`;
      const r = w.reserveEffect(key, key, impl.retry);
      if (r.reservation === 'already_applied') return { outcome: { status: 'succeeded', output: r.receipt } };
      if (r.reservation === 'already_failed') return { outcome: { status: 'failed', error: r.error } };
      w.effectApplying(r.effect_id);
      // Checked as the reference checks it, kept by the host as a progress event of the run,
      // and answered with a receipt whose `seq` is the run's revision after that commit.
      const publishUpdate = async (update) => {
        const checked = validateWorkflowUpdate(update);
        const seq = w.progress(`${checked.type}:${checked.key}`, toJson(checked, 'the update'));
        return { updateId: `upd_${process.getBuiltinModule('node:crypto').randomUUID()}`, seq: seq ?? null, at: new Date().toISOString(), type: checked.type, key: checked.key };
      };
      let receipt;
      try {
        // `effect.retry` tells `run` that an earlier application was interrupted (only under
        // idempotentEffect): it must check before acting again.
        const effect = { id: r.effect_id, type: impl.effect.type, key, retry: r.retry };
        const value = impl.exec ? await runShell(impl, ctx, publishUpdate, effect) : await impl.run({ ...ctx, publishUpdate, effect });
        receipt = toJson(value, 'the effect receipt');
      } catch (e) {
        // An error `run` reports settles the effect failed (the reference's "rejected"); only a
        // child that dies in the middle leaves it in doubt.
        const error = `node ${ctx.state.node} failed: ${message(e)}`;
        w.settleEffect(r.effect_id, { status: 'failed', error });
        return { outcome: { status: 'failed', error } };
      }
      w.settleEffect(r.effect_id, { status: 'applied', receipt });
      return { outcome: { status: 'succeeded', output: receipt } };
    }
    case 'agent':
    case 'assistant_message': {
      const prompt = String(await nodeCode(ctx, 'its prompt', () => impl.prompt(ctx)));
      const request =
        impl.kind === 'agent'
          ? { ...requestBase(run, ctx, 'agent'), prompt, expectedOutput: impl.expectedOutput, statusDetail: impl.statusDetail }
          : { ...requestBase(run, ctx, 'assistant_message'), prompt, maxChars: impl.maxChars };
      w.requestInteraction(impl.kind, toJson(request, 'the request'));
      return { parked: true };
    }
    case 'checkpoint': {
      const summary = String(await nodeCode(ctx, 'its summary', () => impl.summary(ctx)));
      const request = { ...requestBase(run, ctx, 'checkpoint'), summary, prompt: null };
      if (impl.run) request.extra = { output: await nodeCode(ctx, 'run', () => impl.run(ctx)) };
      w.wait('checkpoint', toJson(request, 'the request'));
      return { parked: true };
    }
    case 'human_decision': {
      // Built when the attempt opened (`decideTimeout`), when its request decided the deadline.
      const request = run.takePrepared(ctx.state.node) ?? (await humanRequest(run, impl, ctx)).request;
      w.wait('human_decision', toJson(request, 'the request'));
      return { parked: true };
    }
    case 'notify': {
      const text = String(await nodeCode(ctx, 'its message', () => impl.message(ctx)));
      const content = { kind: impl.notifyKind, message: text };
      w.notify(toJson(content, 'the message'));
      return ok(content);
    }
    default:
      return { outcome: { status: 'failed', error: `unknown node kind ${impl.kind}` } };
  }
}

/** Parks the run on the host's durable timer: `wake` is `{ forMs }` or `{ untilMs }`. */
function parkOnTimer(w, wake, output) {
  w.waitUntil(wake.forMs ?? null, wake.untilMs ?? null, toJson(output, 'the output after the wait'));
}

/**
 * An included workflow's exit `validate` applied to the output of the node it leaves from (the
 * normalised value is that node's output, so a resumed child reads it back as it was).
 */
async function exitValidated(exit, outcome, node) {
  if (!exit?.validate || outcome.status !== 'succeeded') return outcome;
  try {
    return { status: 'succeeded', output: toJson(await exit.validate(outcome.output), 'the exit output') };
  } catch (e) {
    return { status: 'failed', error: `node ${node} failed: exit ${exit.exit} of ${exit.path}: ${message(e)}` };
  }
}

/** The output of a decision node from its stored answer (a checkpoint's is the answer). */
function answered(impl, answer) {
  if (impl?.kind !== 'human_decision') return { status: 'succeeded', output: answer ?? null };
  try {
    // The host answers with the saved `onTimeout` response at the deadline, marked as such.
    const provenance = answer?.provenance === 'timeout' ? 'timeout' : 'human';
    return { status: 'succeeded', output: { ...humanResponse(impl.choices, answer), provenance } };
  } catch (e) {
    return { status: 'failed', error: `the answer to ${impl.kind} does not fit its choices: ${message(e)}` };
  }
}

/**
 * The run as node code sees it: outputs and results of every node so far (from the host's
 * hello, then kept here), the input, title, and visit counts.
 */
class RunContext {
  constructor(env, workflow, hello, input) {
    this.env = env;
    this.workflow = workflow;
    this.input = input;
    this.title = null;
    this.results = {};
    /** Node ids (and mount paths) in the order their latest result came. */
    this.order = [];
    this.visits = {};
    for (const r of hello.results ?? []) {
      this.visits[r.node] = r.visits ?? 1;
      this.record(r.node, r.outcome === 'ok' ? { status: 'succeeded', output: r.output } : { status: r.outcome, error: r.error });
    }
  }

  /**
   * Records how a node ended: the latest result wins, and a failure removes an earlier output.
   * A node an included workflow leaves from also gives its mount its result: `{ exit, output }`.
   */
  record(node, outcome) {
    this.results[node] =
      outcome.status === 'succeeded'
        ? { outcome: 'ok', output: outcome.output }
        : { outcome: outcome.status, ...(outcome.error === undefined ? {} : { error: outcome.error }) };
    const at = this.order.indexOf(node);
    if (at >= 0) this.order.splice(at, 1);
    this.order.push(node);
    const exit = this.workflow.exitNodes[node];
    if (exit && outcome.status === 'succeeded') {
      this.record(exit.path, { status: 'succeeded', output: { exit: exit.exit, output: outcome.output } });
    }
  }

  /** A request built when its attempt opened, for the node to wait with. */
  prepare(node, request) {
    this.prepared = { node, request };
  }

  takePrepared(node) {
    const prepared = this.prepared?.node === node ? this.prepared.request : null;
    this.prepared = null;
    return prepared;
  }

  finished(node, outcome) {
    this.visits[node] = (this.visits[node] ?? 0) + 1;
    this.record(node, outcome);
  }

  /**
   * `outputs` and `results` as the nodes of mount `path` see them ('' for the workflow itself):
   * the results of its own nodes (and the mounts inside it) since it was last entered, by their
   * local ids. Re-entering a mount starts with an empty view.
   */
  view(path) {
    const prefix = path === '' ? '' : `${path}.`;
    let start = 0;
    if (prefix) {
      for (let i = this.order.length - 1; i >= 0; i--) {
        if (!this.order[i].startsWith(prefix)) {
          start = i + 1;
          break;
        }
      }
    }
    const outputs = {};
    const results = {};
    for (const id of this.order.slice(start)) {
      if (!id.startsWith(prefix)) continue;
      const local = id.slice(prefix.length);
      if (local.includes('.')) continue;
      results[local] = this.results[id];
      if (this.results[id].outcome === 'ok') outputs[local] = this.results[id].output;
    }
    return { outputs: Object.freeze(outputs), results: Object.freeze(results) };
  }

  /** The context of one node callback: `{ input, outputs, results, state, signal }`. */
  async forNode(node, attemptId, signal) {
    const state = Object.freeze({
      runId: this.env.runId,
      workflow: this.workflow.name,
      title: this.title,
      node,
      attemptId: attemptId ?? null,
      visit: (this.visits[node] ?? 0) + 1,
      projectDir: this.env.projectDir,
    });
    // An included workflow's input comes from its parent's context, at every level, through
    // the included workflow's own `input` normaliser when it has one (as for a run's input).
    let input = this.input;
    let parent = '';
    for (const { path, include } of this.workflow.scopes[node] ?? []) {
      if (include.input) {
        const outer = { input, ...this.view(parent), state, signal };
        input = await nodeCode({ state }, `the input of mount ${path}`, () => include.input(outer));
      }
      const normalise = include.workflow?.input;
      if (normalise) {
        const given = input;
        input = await nodeCode({ state }, `the input of the workflow included as ${path}`, () => normalise(given));
      }
      parent = path;
    }
    return { input, ...this.view(parent), state, signal };
  }
}

/** How long a `presentationPrompt` function may take (the reference's bound). */
const PRESENTATION_BOUND_MS = 30_000;

/**
 * The presentation instructions of a run about to complete with `finalOutput`, from a
 * `presentationPrompt` function called with `{ state, finalOutput, signal }` (copies: it cannot
 * change the run): its text, or null for none (it returned `undefined` or an empty string, threw,
 * or took longer than 30 s, when its signal aborts; the run completes all the same and the
 * problem goes to the child's stderr). A string `presentationPrompt` travels in the snapshot.
 */
async function presentationOf(run, finalOutput) {
  const prompt = run.workflow.presentationPrompt;
  if (typeof prompt !== 'function') return null;
  const controller = new AbortController();
  let timer;
  try {
    const state = structuredClone({
      runId: run.env.runId,
      workflow: run.workflow.name,
      title: run.title,
      status: 'completed',
      input: run.input,
      ...run.view(''),
      finalOutput,
    });
    const bound = new Promise((_, reject) => {
      timer = setTimeout(() => {
        controller.abort(new Error('presentationPrompt took too long'));
        reject(new Error(`did not return within ${PRESENTATION_BOUND_MS / 1000} s`));
      }, PRESENTATION_BOUND_MS);
    });
    const text = await Promise.race([
      Promise.resolve().then(() => prompt({ state, finalOutput: state.finalOutput, signal: controller.signal })),
      bound,
    ]);
    if (text === undefined || text === null) return null;
    if (typeof text !== 'string') throw new Error(`must return a string or undefined, got ${typeof text}`);
    return text.trim() === '' ? null : text;
  } catch (e) {
    process.stderr.write(`piw: presentationPrompt failed; the run is not presented: ${message(e)}\n`);
    return null;
  } finally {
    clearTimeout(timer);
  }
}

/** How long a `timeoutMs` function may take (the reference's bound). */
const TIMEOUT_FN_BOUND_MS = 30_000;

/**
 * The deadline of the attempt of `nodeId` about to open, for a node whose `timeoutMs` is a
 * function: `{ ms }` (a number, or `null` for none), or `{ ms: null, error }` when the
 * function threw, returned something else, or took longer than 30 s (the node then fails).
 * Other nodes: `{ ms: undefined }` (the graph fixes their deadline).
 */
async function decideTimeout(run, impl, nodeId) {
  if (!impl?.timeoutAtStart) return { ms: undefined };
  const controller = new AbortController();
  let timer;
  const withRequest = impl.timeoutAtStart === DECIDED_WITH_REQUEST;
  try {
    const ctx = await run.forNode(nodeId, null, controller.signal);
    const bound = new Promise((_, reject) => {
      timer = setTimeout(() => {
        controller.abort(new Error(withRequest ? 'the request took too long' : 'timeoutMs took too long'));
        reject(new Error(`did not return within ${TIMEOUT_FN_BOUND_MS / 1000} s`));
      }, TIMEOUT_FN_BOUND_MS);
    });
    if (withRequest) {
      // A human decision: its request, built now, gives the deadline, and is the one it waits with.
      const { request, deadlineMs } = await Promise.race([humanRequest(run, impl, ctx), bound]);
      run.prepare(nodeId, toJson(request, 'the request'));
      return { ms: deadlineMs };
    }
    const value = await Promise.race([Promise.resolve().then(() => impl.timeoutAtStart(ctx)), bound]);
    if (value === null) return { ms: null };
    if (typeof value === 'number' && Number.isFinite(value) && value > 0) return { ms: Math.ceil(value) };
    throw new Error(`must return a positive number of milliseconds or null, got ${String(value)}`);
  } catch (e) {
    const what = withRequest ? 'its request' : 'its timeoutMs';
    return { ms: null, error: e instanceof NodeFailure ? e.message : failedIn(nodeId, what, e) };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The abort signal of the running node: aborted when the node's deadline passes (the host
 * enforces it too) or when the host stops this child (SIGTERM on cancel or pause).
 */
let current = null;
/**
 * When this child last asked the host for something that may open an attempt: the host's
 * deadline for that attempt is at least this plus its timeout.
 */
let attemptOpenedAt = 0;
/** The earliest the host may end the running node at its deadline (monotonic ms), or null. */
let deadlineAt = null;
/** The running node's timeout, for the `TimeoutError` its signal aborts with. */
let deadlineMs = null;

function nodeSignal(timeoutMs) {
  current = new AbortController();
  const controller = current;
  deadlineAt = timeoutMs === undefined ? null : attemptOpenedAt + timeoutMs;
  deadlineMs = timeoutMs ?? null;
  // A deadline longer than a timer can wait is left to the host, which enforces every
  // deadline anyway (Node would fire a longer timer at once).
  const timer =
    timeoutMs === undefined || timeoutMs > MAX_TIMER_MS
      ? null
      : setTimeout(() => controller.abort(new TimeoutError(timeoutMs)), timeoutMs);
  // The child stays alive while node code runs: code that only waits for its signal (its
  // deadline, or the run being stopped) would otherwise leave Node nothing to wait for, and the
  // child would exit (code 13, an unsettled await) as if it had crashed.
  const alive = setInterval(() => {}, MAX_TIMER_MS);
  return {
    signal: controller.signal,
    done: () => {
      if (timer) clearTimeout(timer);
      clearInterval(alive);
    },
  };
}
/**
 * While a node's code runs, an exception it throws where nobody catches it (in a timer, an
 * event handler, a promise nobody awaits) fails that node, named, like one it throws from its
 * callback; it does not kill the child (which, three times over, would send the run to review
 * with nothing but a stack trace on stderr). Not for an action, whose effect may be half done:
 * its child dies as before and the effect is settled by the effect's own recovery rules.
 */
let nodeCrashed = null;
function onUncaught(e) {
  if (nodeCrashed) {
    const fail = nodeCrashed;
    nodeCrashed = null;
    fail(e);
    return;
  }
  // The stack for whoever reads the log, then the message alone: the host quotes the last
  // line of stderr as the reason the child ended (in a review reason, say).
  if (e instanceof Error && e.stack) process.stderr.write(`${e.stack}\n`);
  process.stderr.write(`piw worker: uncaught exception: ${oneLine(message(e))}\n`);
  process.exit(1);
}

/**
 * Runs `f` (node code) so that an uncaught exception meanwhile rejects with `toError(e)`
 * instead of ending the child.
 */
function guardUncaught(f, toError) {
  const crashed = new Promise((_, reject) => {
    nodeCrashed = (e) => reject(toError(e));
  });
  // `f` called inside a promise, so that a synchronous throw also clears the guard.
  return Promise.race([Promise.resolve().then(f), crashed]).finally(() => {
    nodeCrashed = null;
  });
}

let stopping = false;
function onTerminate() {
  if (stopping) return;
  stopping = true;
  process.once('SIGTERM', () => {}); // keep handling it while we wind down
  // Commands run in their own process groups: take them down now, whatever they ignore.
  for (const pid of commandGroups) killGroup(pid, 'SIGKILL');
  // Stopped once the node's deadline has passed: the host ended the node at it.
  const timedOut = deadlineAt !== null && monotonicMs() >= deadlineAt;
  current?.abort(timedOut ? new TimeoutError(deadlineMs) : new CancelledError());
  // Let cooperative node code see the abort, then go: the host waits only a grace period.
  setTimeout(() => process.exit(143), 50).unref();
}

async function drive(w) {
  const env = w.envelope;
  if (env.mode !== 'run' && env.mode !== 'validate') throw new Error(`unknown mode ${env.mode}`);
  // From the start: workflow code loads below, and whatever it leaves uncaught then ends the
  // child with its message as the last line on stderr (see `onUncaught`).
  if (!process.listeners('uncaughtException').includes(onUncaught)) {
    process.on('uncaughtException', onUncaught);
    process.on('unhandledRejection', onUncaught);
  }
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
    const saved = new Set(Object.values(env.mountedSources ?? {}).map((m) => m.path));
    const loaded = await loadWorkflow(env.sourceRoot, env.projectDir, saved);
    workflow = loaded.workflow;
    mounts = resolveMounts(loaded.imports, env.sourceRoot);
    w.compareMounts(mounts);
  } catch (e) {
    // A changed source stops for review (the run may go on once it is put back). A workflow
    // that does not load (syntax, missing package, invalid graph, not a workflow) fails the run
    // at once: it would fail the same way in every new child.
    if (e.code === 'source_changed') stopForReview(w, e.message);
    else failToLoad(w, e instanceof LoadError ? e.message : `cannot load the workflow: ${message(e)}`);
    return;
  }
  attemptOpenedAt = monotonicMs();
  const hello = w.hello(workflow.graph, mounts, true);
  const resume = hello.resume;
  if (hello.stop !== null && hello.stop !== undefined) return;
  const features = hello.features ?? [];
  maxValueBytes = features.includes('large_values')
    ? MAX_LARGE_VALUE_BYTES
    : features.includes('result_is_output')
      ? MAX_VALUE_BYTES
      : MAX_VALUE_BYTES_OLDER_HOST;
  let runInput = hello.input;
  if (workflow.input) {
    // The input normaliser runs in every child of the run: the same input gives the same value.
    try {
      runInput = await workflow.input(hello.input);
    } catch (e) {
      w.fail(`invalid input: ${message(e)}`, false);
      return;
    }
  }
  const run = new RunContext(env, workflow, hello, runInput);
  if (workflow.title) {
    try {
      // A title function may give nothing (the reference's examples return `undefined` when
      // the input has no topic): then the run has no title, not the word "undefined".
      const title = await workflow.title({ input: runInput, workflowName: workflow.name });
      run.title = title === undefined || title === null ? null : String(title);
    } catch {
      run.title = null; // a title is for display: a failing one does not fail the run
    }
  }
  process.on('SIGTERM', onTerminate);
  let nodeId;
  let carried = null;
  /** The deadline decided for the current attempt (see `decideTimeout`). */
  let decided = { ms: undefined };
  const impls = workflow.nodes;
  switch (resume.resume) {
    case 'continue':
      nodeId = resume.node_id;
      carried = answered(impls[nodeId], hello.answer);
      break;
    case 'accepted': {
      // A submission this run accepted before its child went away: its normalised payload is
      // the node's output, exactly as after a fresh acceptance.
      nodeId = resume.node_id;
      if (!hello.submission) throw new Error('protocol: an accepted resume without a submission');
      const verdict = await judge(impls[nodeId], hello.submission.payload ?? null, await run.forNode(nodeId, resume.attempt_id, new AbortController().signal));
      carried = { status: 'succeeded', output: verdict.output ?? tolerantJson(hello.submission.payload ?? null) };
      break;
    }
    case 'interaction_expired': {
      nodeId = resume.node_id;
      // Nobody answered before the saved deadline. A human decision with `onTimeout` takes its
      // response then, with `timeout` provenance (validated when the workflow was defined).
      const impl = impls[nodeId];
      carried =
        impl?.kind === 'human_decision' && impl.onTimeout && typeof impl.onTimeout !== 'function'
          ? { status: 'succeeded', output: { ...humanResponse(impl.choices, impl.onTimeout.response), provenance: 'timeout' } }
          : { status: 'timed_out' };
      break;
    }
    case 'timer_fired':
      // The wait's output was decided when it set the timer: no node code runs again.
      nodeId = resume.node_id;
      if (!hello.timer) throw new Error('protocol: a timer_fired resume without a timer');
      carried = { status: 'succeeded', output: hello.timer.output ?? null };
      break;
    case 'validate': {
      nodeId = resume.node_id;
      if (!hello.submission) throw new Error('protocol: a validate resume without a submission');
      const { submission_id: submissionId, payload } = hello.submission;
      const ctx = await run.forNode(nodeId, resume.attempt_id, new AbortController().signal);
      const verdict = await judge(impls[nodeId] ?? {}, payload, ctx);
      let output = null;
      let error = verdict.error ?? null;
      if (error === null) {
        try {
          output = toJson(verdict.output, 'the validated output');
        } catch (e) {
          error = e.message;
        }
      }
      w.validationResult(submissionId, error);
      if (error !== null) return;
      carried = { status: 'succeeded', output };
      break;
    }
    default:
      nodeId = resume.node_id ?? workflow.graph.start;
      // The host opens the first attempt with the hello when it can (not when the node's
      // deadline is decided by its `timeoutMs` function: that decision opens the attempt).
      if (resume.attempt_id === undefined) {
        decided = await decideTimeout(run, impls[nodeId], nodeId);
        attemptOpenedAt = monotonicMs();
        resume.attempt_id = w.nodeStarted(nodeId, decided.ms ?? null);
      }
  }
  let attemptId = resume.attempt_id;
  // Consecutive pure steps are reported together (one commit for many nodes). A step is
  // deferred only when it leaves a compute node without a timeout that ran in this child and
  // enters another one, within DEFER_WINDOW_MS of the last report to the host, and while the
  // batch stays under MAX_DEFERRED steps and MAX_DEFERRED_BYTES. A timer reports the batch if
  // a slow asynchronous node keeps it waiting. If this child dies with steps deferred, those
  // pure nodes rerun from the last committed boundary: at most a window's worth of work.
  const nodesOf = workflow.graph.nodes;
  const pure = (id) =>
    nodesOf[id]?.kind === 'compute' && nodesOf[id]?.timeout_ms === undefined && !nodesOf[id]?.timeout_at_start;
  const batch = new DeferredBatch(w);
  let last = null;
  for (;;) {
    let outcome = carried;
    carried = null;
    const ranHere = outcome === null;
    if (ranHere) {
      const deadlineMs = decided.ms === undefined ? nodesOf[nodeId]?.timeout_ms : (decided.ms ?? undefined);
      const { signal, done } = nodeSignal(deadlineMs);
      let step;
      try {
        if (decided.error) throw new NodeFailure(decided.error);
        const impl = impls[nodeId];
        const exec = async () => execute(w, run, impl, await run.forNode(nodeId, attemptId, signal));
        step =
          impl?.kind === 'action'
            ? await exec()
            : await guardUncaught(exec, (e) => new NodeFailure(failedIn(nodeId, 'run', e)));
      } catch (e) {
        if (!(e instanceof NodeFailure)) throw e;
        // An included input or the `timeoutMs` function failed.
        step = { outcome: { status: 'failed', error: e.message } };
      }
      done();
      if (batch.settle()) return; // the run parked while the node ran
      if (step.parked) return;
      outcome = await exitValidated(workflow.exitNodes[nodeId], outcome ?? step.outcome, nodeId);
    }
    run.finished(nodeId, outcome);
    if (outcome.status === 'succeeded') last = outcome.output;
    const route = w.route(nodeId, outcome);
    if (route.next !== undefined) {
      if (ranHere && pure(nodeId) && pure(route.next) && batch.hasRoom()) {
        batch.defer(outcome, route.next);
        nodeId = route.next;
        attemptId = undefined;
        decided = { ms: undefined };
        continue;
      }
      batch.cancelTimer();
      decided = await decideTimeout(run, impls[route.next], route.next);
      attemptOpenedAt = monotonicMs();
      const reply = w.transition(outcome, route.next, decided.ms ?? null);
      batch.reported();
      if (reply.parked) return;
      nodeId = route.next;
      attemptId = reply.attemptId;
    } else if (route.complete) {
      batch.cancelTimer();
      w.complete(outcome, last, await presentationOf(run, last));
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
/**
 * The graph snapshot of the workflow in `file` (loaded as a child loads it, in `projectDir`):
 * what the host reads before an explicit detached start, when the workflow's own `detached`
 * model and whether any step needs a model are known only to its module (`describe.js`).
 */
export async function describeWorkflow(file, projectDir) {
  const { workflow } = await loadWorkflow(file, projectDir);
  return workflow.graph;
}

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

/**
 * Runs one child's life; resolves with the process exit code. `standby`: the worker was started
 * before its run was known (it may warm the TypeScript compiler up while it waits).
 */
export async function runWorker({ standby = false } = {}) {
  let w;
  try {
    w = wrap(new addon.Worker(await (standby ? readWhileIdle(0, TYPESCRIPT_WARM_DELAY_MS, warmTypeScriptQuietly) : readStdin())));
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
    if (e.code === 'refused') {
      // The host ended the run instead of taking the step (its graph or step limit): done.
      process.stderr.write(`piw worker: ${message(e)}\n`);
      return 0;
    }
    process.stderr.write(`piw worker: ${e.code ?? 'error'}: ${oneLine(message(e))}\n`);
    return 1;
  }
}
