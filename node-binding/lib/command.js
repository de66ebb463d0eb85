// Commands a workflow runs (a `shell` node, `runCommandBatch`): each in its own process group,
// so its timeout, or this child being stopped, kills everything it started; stdout and stderr
// captured up to a cap; complete lines handed on in order.
import { isAbsolute } from 'node:path';

/** The reference's default cap on each of stdout and stderr, in characters. */
export const DEFAULT_MAX_OUTPUT_CHARS = 1_000_000;
/** The longest line a line handler sees; the rest of a longer line is dropped. */
const MAX_LINE_CHARS = 64 * 1024;
/** The longest delay `setTimeout` honours (2^31 - 1 ms, about 24.8 days). */
export const MAX_TIMER_MS = 2_147_483_647;
/** Between SIGTERM and SIGKILL of a command's group at its timeout. */
const KILL_GRACE_MS = 1000;
/** The process groups of running commands: killed at once when this child is stopped. */
export const commandGroups = new Set();

export function killGroup(pid, signal) {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

const monotonicMs = () => Number(process.hrtime.bigint()) / 1e6;
const message = (e) => (e instanceof Error ? e.message : String(e));

/** Captures one stream: capped text, and whole lines for a line handler. */
class Capture {
  constructor(max, onLine) {
    this.max = max;
    this.text = '';
    this.truncated = false;
    this.partial = '';
    this.onLine = onLine;
  }

  push(s) {
    const room = this.max - this.text.length;
    if (s.length > room) this.truncated = true;
    if (room > 0) this.text += s.slice(0, room);
    if (!this.onLine) return;
    const lines = (this.partial + s).split('\n');
    this.partial = lines.pop().slice(0, MAX_LINE_CHARS);
    for (const line of lines) this.onLine(line.slice(0, MAX_LINE_CHARS));
  }

  end() {
    if (this.onLine && this.partial !== '') this.onLine(this.partial);
    this.partial = '';
  }
}

/** A command that did not end well: `kind` is `timeout`, `stopped`, `exit` or `start`. */
export class CommandError extends Error {
  constructor(text, kind, result) {
    super(text);
    this.kind = kind;
    this.result = result;
  }
}

/**
 * Checks what a command is to run with, before anything starts; returns the normalised spec.
 * `what` names the spec in errors (`''` for a shell node's `exec` value).
 */
export function checkCommand(spec, what = '') {
  const at = (field) => `${what}${field}`;
  if (!spec || typeof spec !== 'object' || typeof spec.command !== 'string' || spec.command === '') {
    throw new Error(what ? `${what} needs a command` : 'exec must return { command, args?, ... }');
  }
  if (spec.args !== undefined && (!Array.isArray(spec.args))) throw new Error(`${at('args')} must be an array`);
  if (spec.shell !== undefined && typeof spec.shell !== 'boolean' && typeof spec.shell !== 'string') {
    throw new Error(`${at('shell')} must be a boolean or the path of a shell`);
  }
  if (spec.cwd !== undefined && typeof spec.cwd !== 'string') throw new Error(`${at('cwd')} must be a string`);
  const max = spec.maxOutputChars ?? DEFAULT_MAX_OUTPUT_CHARS;
  if (!(Number.isInteger(max) && max > 0)) throw new Error(`${at('maxOutputChars')} must be a positive integer`);
  // A timer cannot wait longer than MAX_TIMER_MS: Node would fire a longer one at once.
  if (
    spec.timeoutMs !== undefined &&
    !(typeof spec.timeoutMs === 'number' && spec.timeoutMs > 0 && spec.timeoutMs <= MAX_TIMER_MS)
  ) {
    throw new Error(`${at('timeoutMs')} must be a positive number of milliseconds, at most ${MAX_TIMER_MS}`);
  }
  return { ...spec, args: (spec.args ?? []).map(String), maxOutputChars: max };
}

/** How a command is shown in errors. */
export const shown = (spec) => `${spec.command}${spec.args.length ? ` ${spec.args.join(' ')}` : ''}`;

/**
 * Runs a checked command (`checkCommand`) in `cwd`. `onLine(stream, text)` gets each complete
 * line of the streams it is given for; `stopRef.stop` is set to a function that stops the
 * command. Resolves with `{ command, args, cwd, stdout, stderr, exitCode, signal, durationMs,
 * stdoutTruncated, stderrTruncated }`; rejects with a `CommandError` carrying that result when
 * the command cannot start, times out, is stopped (`signal`), or exits non-zero without
 * `allowNonZeroExit`.
 */
export async function runCommand(spec, { cwd, env, signal, onLine = null, stopRef = {} }) {
  const started = monotonicMs();
  const out = new Capture(spec.maxOutputChars, onLine ? (line) => onLine('stdout', line) : null);
  const err = new Capture(spec.maxOutputChars, onLine ? (line) => onLine('stderr', line) : null);
  const result = (exitCode, sig) => ({
    command: spec.command,
    args: spec.args,
    cwd,
    stdout: out.text,
    stderr: err.text,
    exitCode,
    signal: sig,
    durationMs: Math.round(monotonicMs() - started),
    stdoutTruncated: out.truncated,
    stderrTruncated: err.truncated,
  });
  if (signal?.aborted) throw new CommandError(`${shown(spec)} was stopped before it started`, 'stopped', result(null, null));
  // `node:child_process` on first use: every worker imports this module, few run commands.
  const child = process.getBuiltinModule('node:child_process').spawn(spec.command, spec.args, {
    cwd,
    env: { ...env, ...(spec.env ?? {}) },
    shell: spec.shell ?? false,
    detached: true,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stoppedBy = null;
  const timers = [];
  const stop = (why) => {
    if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    stoppedBy ??= why;
    killGroup(child.pid, 'SIGTERM');
    timers.push(setTimeout(() => killGroup(child.pid, 'SIGKILL'), KILL_GRACE_MS));
  };
  stopRef.stop = () => stop('line');
  if (child.pid !== undefined) commandGroups.add(child.pid);
  const onAbort = () => stop('stopped');
  signal?.addEventListener('abort', onAbort, { once: true });
  if (spec.timeoutMs !== undefined) timers.push(setTimeout(() => stop('timeout'), spec.timeoutMs));
  // Decoded as UTF-8 across chunk boundaries.
  child.stdout.setEncoding('utf8').on('data', (c) => out.push(c));
  child.stderr.setEncoding('utf8').on('data', (c) => err.push(c));
  child.stdin.on('error', () => {}); // a command that does not read its input
  child.stdin.end(spec.stdin === undefined ? undefined : String(spec.stdin));
  let exitCode;
  let sig;
  try {
    [exitCode, sig] = await new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code, s) => resolve([code, s]));
    });
  } catch (e) {
    throw new CommandError(`${shown(spec)} could not start: ${message(e)}`, 'start', result(null, null));
  } finally {
    signal?.removeEventListener('abort', onAbort);
    for (const t of timers) clearTimeout(t);
    // Whatever the command left behind in its group goes with it.
    if (child.pid !== undefined) {
      killGroup(child.pid, 'SIGKILL');
      commandGroups.delete(child.pid);
    }
  }
  out.end();
  err.end();
  const done = result(exitCode, sig);
  if (stoppedBy === 'timeout') throw new CommandError(`${shown(spec)} timed out after ${spec.timeoutMs} ms`, 'timeout', done);
  if (stoppedBy === 'stopped') throw new CommandError(`${shown(spec)} was stopped`, 'stopped', done);
  if (stoppedBy === 'line') throw new CommandError(`${shown(spec)} was stopped`, 'line', done);
  if (exitCode !== 0 && !spec.allowNonZeroExit) {
    const tail = done.stderr.trim().split('\n').slice(-1)[0] ?? '';
    throw new CommandError(`${shown(spec)} exited with ${exitCode ?? sig}${tail ? `: ${tail}` : ''}`, 'exit', done);
  }
  return done;
}

/** The `schema` of a `runCommandBatch` result (the reference's name for it). */
export const COMMAND_BATCH_RESULT_SCHEMA = 'pi-workflows.command-batch-result.v1';
export const MAX_COMMAND_BATCH_ITEMS = 64;
export const MAX_COMMAND_BATCH_CONCURRENCY = 8;
export const MAX_COMMAND_BATCH_TIMEOUT_MS = 60 * 60_000;
export const MAX_COMMAND_BATCH_OUTPUT_CHARS = 1_000_000;
const BATCH_ITEM_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;
const BATCH_ITEM_FIELDS = new Set(['id', 'command', 'args', 'cwd', 'timeoutMs', 'maxOutputChars']);
const MAX_ITEM_ERROR_CHARS = 2000;

function boundedInteger(value, label, max) {
  if (!Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new Error(`${label} must be an integer from 1 through ${max}`);
  }
  return value;
}

function record(value, label) {
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${label} must be an object`);
  return value;
}

/**
 * A command batch request checked whole before anything runs: `{ items: [{ id, command, args,
 * cwd (absolute), timeoutMs, maxOutputChars }], maxConcurrency }`, within the limits above,
 * with unique ids and no other fields. Throws the first problem.
 */
export function validateCommandBatchRequest(value) {
  const request = record(value, 'command batch request');
  const extra = Object.keys(request).find((k) => k !== 'items' && k !== 'maxConcurrency');
  if (extra) throw new Error(`command batch request.${extra} is not supported`);
  if (!Array.isArray(request.items)) throw new Error('command batch items must be an array');
  if (request.items.length > MAX_COMMAND_BATCH_ITEMS) {
    throw new Error(`command batch items must contain at most ${MAX_COMMAND_BATCH_ITEMS} entries`);
  }
  const seen = new Set();
  const items = request.items.map((raw, i) => {
    const label = `command batch items[${i}]`;
    const item = record(raw, label);
    const unknown = Object.keys(item).find((k) => !BATCH_ITEM_FIELDS.has(k));
    if (unknown) throw new Error(`${label}.${unknown} is not supported`);
    if (typeof item.id !== 'string' || !BATCH_ITEM_ID.test(item.id)) {
      throw new Error(`${label}.id must match ${BATCH_ITEM_ID.source}`);
    }
    if (seen.has(item.id)) throw new Error(`command batch item id is duplicated: ${item.id}`);
    seen.add(item.id);
    if (typeof item.command !== 'string' || item.command.trim() === '') {
      throw new Error(`${label}.command must be a non-empty string`);
    }
    if (!Array.isArray(item.args) || !item.args.every((a) => typeof a === 'string')) {
      throw new Error(`${label}.args must be an array of strings`);
    }
    if (typeof item.cwd !== 'string' || !isAbsolute(item.cwd)) throw new Error(`${label}.cwd must be an absolute path`);
    return {
      id: item.id,
      command: item.command,
      args: [...item.args],
      cwd: item.cwd,
      timeoutMs: boundedInteger(item.timeoutMs, `${label}.timeoutMs`, MAX_COMMAND_BATCH_TIMEOUT_MS),
      maxOutputChars: boundedInteger(item.maxOutputChars, `${label}.maxOutputChars`, MAX_COMMAND_BATCH_OUTPUT_CHARS),
    };
  });
  const maxConcurrency = boundedInteger(request.maxConcurrency, 'command batch maxConcurrency', MAX_COMMAND_BATCH_CONCURRENCY);
  return { items, maxConcurrency };
}

/**
 * Runs a validated batch of commands, at most `maxConcurrency` at once, each as a `shell` node
 * runs one (its own process group, killed at its timeout and when the run is stopped). One
 * item's failure does not stop the others; `signal` stops them all (items not started yet end
 * `cancelled`). Resolves with `{ schema, items, completed, total }`, items in request order,
 * each the command's result with `id`, `outcome` (`succeeded`, `failed`, `timedOut`,
 * `cancelled`), `stdoutTruncated`, `stderrTruncated` and `error` when it did not succeed.
 * `onItemSettled(item, completed, total)` is told of each item as it ends; what it throws is
 * ignored.
 */
export async function runCommandBatch(request, options = {}) {
  const { items, maxConcurrency } = validateCommandBatchRequest(request);
  const { signal, onItemSettled } = options;
  const results = new Array(items.length);
  let next = 0;
  let completed = 0;
  const runOne = async (item) => {
    const spec = checkCommand({ command: item.command, args: item.args, timeoutMs: item.timeoutMs, maxOutputChars: item.maxOutputChars });
    try {
      const r = await runCommand(spec, { cwd: item.cwd, env: process.env, signal });
      return { id: item.id, outcome: 'succeeded', ...r };
    } catch (e) {
      const outcome = e.kind === 'timeout' ? 'timedOut' : e.kind === 'stopped' ? 'cancelled' : 'failed';
      const text = message(e);
      return {
        id: item.id,
        outcome,
        ...(e.result ?? notStarted(item)),
        error: text.length > MAX_ITEM_ERROR_CHARS ? `${text.slice(0, MAX_ITEM_ERROR_CHARS)}…` : text,
      };
    }
  };
  const lane = async () => {
    while (!signal?.aborted && next < items.length) {
      const index = next++;
      results[index] = await runOne(items[index]);
      completed += 1;
      try {
        await onItemSettled?.(results[index], completed, items.length);
      } catch {
        // An observer cannot change the batch.
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(maxConcurrency, items.length) }, lane));
  for (let i = 0; i < items.length; i++) {
    results[i] ??= { id: items[i].id, outcome: 'cancelled', ...notStarted(items[i]), error: 'the command was not started' };
  }
  return { schema: COMMAND_BATCH_RESULT_SCHEMA, items: results, completed, total: items.length };
}

function notStarted(item) {
  return {
    command: item.command,
    args: [...item.args],
    cwd: item.cwd,
    stdout: '',
    stderr: '',
    exitCode: null,
    signal: null,
    durationMs: 0,
    stdoutTruncated: false,
    stderrTruncated: false,
  };
}
