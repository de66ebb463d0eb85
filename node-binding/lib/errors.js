// Errors of the piw package: every failure is a `PiwError` whose `code` is the protocol's
// rejection code (`not_found`, `stale_revision`, ...) or a client-side code (`client_closed`,
// `disconnected`, `connect_failed`, `invalid_home`, `host_not_ready`, `invalid_graph`, ...).

export class PiwError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = 'PiwError';
    this.code = code;
    if (options?.details !== undefined) this.details = options.details;
  }
}

/** The reason a node's `signal` aborts at its deadline (the reference's class of the name). */
export class TimeoutError extends Error {
  constructor(timeoutMs) {
    super(`the node timed out after ${timeoutMs} ms`);
    this.name = 'TimeoutError';
    this.timeoutMs = timeoutMs;
  }
}

/** The reason a node's `signal` aborts when the run is stopped (cancelled or paused). */
export class CancelledError extends Error {
  constructor(message = 'the run was stopped') {
    super(message);
    this.name = 'CancelledError';
  }
}

/** Separates a rejection's details (JSON) from its message in the addon's error text. */
const DETAILS_SEPARATOR = '\x1e';

const CODED = /^\[([a-z_]+)\] ([\s\S]*)$/;

/** Turns an error from the native addon (`[code] message`) into a `PiwError`. */
export function fromNative(err) {
  if (err instanceof PiwError) return err;
  // Napi refuses an argument it cannot convert (a value nested deeper than JSON allows here,
  // or a cycle, which nests without end) before anything is sent: what the host calls a
  // malformed request.
  if (err?.code === 'InvalidArg') return new PiwError('malformed', err.message, { cause: err });
  const m = typeof err?.message === 'string' ? CODED.exec(err.message) : null;
  if (!m) return err;
  const at = m[2].indexOf(DETAILS_SEPARATOR);
  if (at < 0) return new PiwError(m[1], m[2], { cause: err });
  let details;
  try {
    details = JSON.parse(m[2].slice(at + 1));
  } catch {
    return new PiwError(m[1], m[2], { cause: err });
  }
  return new PiwError(m[1], m[2].slice(0, at), { cause: err, details });
}

/** Runs `fn` (sync or async), rethrowing native errors as `PiwError`s. */
export function native(fn) {
  try {
    const r = fn();
    if (r && typeof r.then === 'function') {
      return r.then(undefined, (e) => {
        throw fromNative(e);
      });
    }
    return r;
  } catch (e) {
    throw fromNative(e);
  }
}
