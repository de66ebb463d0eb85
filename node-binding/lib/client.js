// The async client: a thin JavaScript face over the native pipelined client. Every method
// returns a Promise; many calls may be in flight on one client.
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { native as addon, packageDir } from './native.js';
import { installedPlatformPackage, nodeRunsWorkflows } from './platform.js';
import { native, PiwError } from './errors.js';
import { canonicalJson } from './helpers.js';
import { mayChangeOutcome, readOutcome } from './outcomes.js';

export { isFinal } from './outcomes.js';

// Built-ins the package loads on first use, not at import: every worker imports the package,
// and most never hash or make request ids (docs/PERFORMANCE.md, "The Node workloads").
const crypto = () => process.getBuiltinModule('node:crypto');

/**
 * Where the `piw` binary is: `options.hostBin`, `PIW_HOST_BIN`, a checkout's build, the
 * installed platform package's, else `piw` on PATH.
 */
export function findHostBin(hostBin) {
  if (hostBin) return hostBin;
  if (process.env.PIW_HOST_BIN) return process.env.PIW_HOST_BIN;
  for (const profile of ['release', 'debug']) {
    const candidate = join(packageDir, '..', 'target', profile, 'piw');
    if (existsSync(candidate)) return candidate;
  }
  const prebuilt = installedPlatformPackage();
  if (prebuilt && existsSync(join(prebuilt.dir, 'bin', 'piw'))) return join(prebuilt.dir, 'bin', 'piw');
  return 'piw';
}

/**
 * The environment a host started by this package gets: the Node worker runtime, with this Node
 * when it can run workflows (22.19+; else the host looks for one on PATH and says so if none).
 */
export function hostEnvironment() {
  const node = process.env.PIW_NODE || (nodeRunsWorkflows() ? process.execPath : undefined);
  return {
    ...(node ? { PIW_NODE: node } : {}),
    PIW_NODE_WORKER: process.env.PIW_NODE_WORKER || join(packageDir, 'worker.js'),
  };
}

/** A fresh request id, time-ordered like the host's ids. */
function newRequestId() {
  return `req-${Date.now().toString(16).padStart(12, '0')}${crypto().randomBytes(8).toString('hex')}`;
}

/** `err` with the id of the request that failed: resend with it to retry without acting twice. */
function withRequestId(err, requestId) {
  if (err instanceof PiwError && err.requestId === undefined) err.requestId = requestId;
  return err;
}

// Large values, as the host's protocol (engine/src/protocol/value.rs) sizes them: a value
// whose canonical JSON passes INLINE_VALUE_BYTES travels apart, in chunks of at most
// VALUE_PUT_CHUNK_BYTES, and no value may pass MAX_VALUE_BYTES.
export const INLINE_VALUE_BYTES = 64 * 1024;
export const MAX_VALUE_BYTES = 64 * 1024 * 1024;
/**
 * The largest submission this client uploads: the host's value limit. Tests lower it with
 * `PIW_TEST_SUBMISSION_LIMIT` (never raise it) to drive the refusal through Pi without carrying
 * 64 MiB through every later model request of the session, which only a slow machine notices.
 */
const SUBMISSION_LIMIT = Math.min(MAX_VALUE_BYTES, Number(process.env.PIW_TEST_SUBMISSION_LIMIT) || MAX_VALUE_BYTES);
const VALUE_PUT_CHUNK_BYTES = 120 * 1024;
const VALUE_PREVIEW_CHARS = 200;

/** A value as a place holds it inline: itself, or wrapped when its top level reads as a reference. */
function wrapInline(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && '$piw' in value
    ? { $piw: 'literal', value }
    : value;
}

function envelope(opts = {}) {
  return {
    requestId: opts.requestId,
    idempotencyKey: opts.idempotencyKey,
    expectedRevision: opts.expectedRevision,
  };
}

export class Client {
  #native;

  /** Use `Client.connect`. */
  constructor(nativeClient) {
    this.#native = nativeClient;
  }

  /**
   * Connects to the host of `options.home` (default `PIW_HOME`, which must be an absolute path,
   * else `~/.pi/agent/piw`), starting one on demand unless `options.start === false`.
   */
  static async connect(options = {}) {
    const start = options.start !== false;
    const nativeClient = await native(() =>
      addon.connect({
        // An explicit `home` is this program's own choice, resolved here. `PIW_HOME` goes to
        // the addon as it is: a relative one is refused there (`invalid_home`), since every
        // working directory would turn it into another installation.
        home: options.home ? resolve(options.home) : undefined,
        piwHome: process.env.PIW_HOME,
        start,
        hostBin: start ? findHostBin(options.hostBin) : undefined,
        hostEnv: { ...hostEnvironment(), ...(options.hostEnv ?? {}) },
        readyTimeoutMs: options.readyTimeoutMs,
      }),
    );
    return new Client(nativeClient);
  }

  /** Whether the connection is open. */
  get isOpen() {
    return this.#native.isOpen;
  }

  /**
   * Sends any request kind; resolves with the full receipt `{ revision, replayed, body }`.
   * Every failure carries the request's id (`err.requestId`, generated when `env.requestId`
   * is not given): after `disconnected` or `host_shutting_down` the command may or may not
   * have been applied, and resending it with that id returns its receipt instead of applying
   * it twice.
   */
  request(kind, env = {}, payload = null) {
    const requestId = env.requestId ?? newRequestId();
    let pending;
    try {
      pending = native(() => this.#native.request(kind, { ...env, requestId }, payload));
    } catch (e) {
      return Promise.reject(withRequestId(e, requestId));
    }
    return pending.then(undefined, (e) => {
      throw withRequestId(e, requestId);
    });
  }

  async #body(kind, env, payload) {
    return (await this.request(kind, env, payload)).body;
  }

  /**
   * The value a stored reference names (`{ $piw: 'value', sha256, bytes, preview }`, what the
   * host keeps in place of a value over 64 KiB), read a frame at a time with `value.get` and
   * checked against its hash. Rejects with `not_found` unless run `runId` holds it.
   */
  async readValue(runId, reference) {
    const pieces = [];
    let offset = 0;
    while (offset < reference.bytes) {
      const piece = await this.#body('value.get', { runId }, { sha256: reference.sha256, offset });
      const data = Buffer.from(piece.data, 'hex');
      if (piece.offset !== offset || data.length === 0) {
        throw new PiwError('protocol', `value.get of ${reference.sha256} at ${offset} answered at ${piece.offset}`);
      }
      pieces.push(data);
      offset += data.length;
    }
    const bytes = Buffer.concat(pieces);
    const sha256 = crypto().createHash('sha256').update(bytes).digest('hex');
    if (sha256 !== reference.sha256) {
      throw new PiwError('protocol', `value ${reference.sha256} read back hashing to ${sha256}`);
    }
    return JSON.parse(bytes.toString('utf8'));
  }

  /**
   * A stored place (an output, result, receipt, request, message) as the workflow gave it: a
   * reference read back, a wrapped literal (a value of the workflow's own whose top level has
   * a `$piw` key) unwrapped, anything else as it is.
   */
  async resolveValue(runId, stored) {
    if (stored === null || typeof stored !== 'object' || Array.isArray(stored) || !('$piw' in stored)) return stored;
    if (stored.$piw === 'literal') return stored.value;
    if (stored.$piw === 'value') return this.readValue(runId, stored);
    throw new PiwError('protocol', `a stored value is tagged ${JSON.stringify(stored.$piw)}`);
  }

  /** `status` (a `run.status` body) with every place resolved (`resolveValue`). */
  async #resolveStatus(runId, status) {
    // A value several places hold (an action's output is its receipt) is read once.
    const read = new Map();
    const resolveIn = async (items, field) => {
      for (const item of items ?? []) {
        const stored = item[field];
        if (stored?.$piw === 'value' && typeof stored.sha256 === 'string') {
          if (!read.has(stored.sha256)) read.set(stored.sha256, await this.resolveValue(runId, stored));
          item[field] = structuredClone(read.get(stored.sha256));
        } else if (stored !== undefined) {
          item[field] = await this.resolveValue(runId, stored);
        }
      }
    };
    await resolveIn([status.run], 'result');
    await resolveIn(status.attempts, 'output');
    await resolveIn(status.effects, 'receipt');
    await resolveIn(status.decisions, 'request');
    await resolveIn(status.interactions, 'request');
    return status;
  }

  /** Host identity and run counts. */
  status() {
    return this.#body('host.status');
  }

  /**
   * Runs, newest first: one page (`limit`, default 100; fewer when their records do not fit
   * one reply). `cursor`: the `nextCursor` of an earlier `listRunsPage`, for the runs after it.
   * `runIdPrefix`: only runs whose id begins with it, or, for lower-case hex digits (a short id,
   * as `piw runs` shows it), ends with it (a shortened run id names the one it finds).
   */
  async listRuns(options = {}) {
    return (await this.listRunsPage(options)).runs;
  }

  /**
   * One page of `listRuns` with where the next starts: `{ runs, more, nextCursor }`. A list is
   * a summary: a result stored apart (over 64 KiB) stays its reference
   * (`{ $piw: 'value', sha256, bytes, preview }`; `runStatus` or `readValue` reads it). Pass
   * `nextCursor` back as `cursor` (with the same filters) until `more` is false: every run that
   * existed when the paging began comes exactly once, whatever starts or ends meanwhile.
   */
  async listRunsPage(options = {}) {
    const body = await this.#body('run.list', {}, {
      limit: options.limit ?? null,
      session_id: options.sessionId ?? null,
      unfinished: options.unfinished ?? null,
      statuses: options.statuses ?? null,
      cursor: options.cursor ?? null,
      ...(options.runIdPrefix != null ? { run_id_prefix: options.runIdPrefix } : {}),
    });
    for (const run of body.runs) {
      // A literal needs no read: unwrapped here as everywhere.
      if (run.result?.$piw === 'literal') run.result = run.result.value;
    }
    return { runs: body.runs, more: body.more === true, nextCursor: body.next_cursor ?? null };
  }

  /**
   * Every run (of the filters), newest first, a page at a time: `for await (const run of
   * client.allRuns({ unfinished: true })) ...`. `limit` is the size of each page asked for.
   */
  async *allRuns(options = {}) {
    let cursor = options.cursor ?? null;
    for (;;) {
      const page = await this.listRunsPage({ ...options, cursor });
      yield* page.runs;
      if (!page.more || page.nextCursor === null) return;
      cursor = page.nextCursor;
    }
  }

  /**
   * Starts a run of `workflowFile`; resolves with `{ run_id, status }`. A host without a
   * runtime for the file's suffix refuses it (`not_found`, naming what it runs, or what it
   * lacks: Node 22.19+ or this package's worker runtime, which a host finds from its own
   * installation when no client configured it).
   */
  startRun(workflowFile, options = {}) {
    return this.#body('run.start', envelope(options), {
      workflow_file: resolve(options.projectDir ?? process.cwd(), workflowFile),
      input: options.input ?? {},
      session_id: options.sessionId ?? null,
      execution_mode: options.executionMode ?? null,
      project_dir: options.projectDir ? resolve(options.projectDir) : process.cwd(),
    });
  }

  /**
   * A run with its claim, decisions, interactions, effects and attempts: the newest
   * `attemptsLimit` (default 100, at most 1000) attempts, newest first, with `attempt_count`
   * (all of the run's); `attemptsBefore` (the last `attempt_id` of a previous reply) asks for
   * older ones. Values over 64 KiB (outputs, the result, receipts, requests) are stored apart
   * and read back here; `references: true` leaves them as their references
   * (`{ $piw: 'value', sha256, bytes, preview }`, for `readValue`).
   */
  async runStatus(runId, options = {}) {
    const status = await this.#body('run.status', { runId }, {
      attempts_limit: options.attemptsLimit ?? null,
      attempts_before: options.attemptsBefore ?? null,
    });
    // Values over 64 KiB are stored apart: read back unless the caller keeps references.
    return options.references ? status : this.#resolveStatus(runId, status);
  }

  /**
   * Detaches a run: from now on a Pi the host starts answers its `agent` and
   * `assistantMessage` steps, not its session (which still gets its messages), so it carries on
   * once that Pi is closed. Resolves with `{ run_id, execution_mode: 'detached', changed }`
   * (`changed` false when it already was detached); a run that ended is refused.
   */
  detachRun(runId, options = {}) {
    return this.#body('run.detach', { ...envelope(options), runId });
  }

  /** Pauses a run at its next durable boundary. */
  pauseRun(runId, options = {}) {
    return this.#body('run.pause', { ...envelope(options), runId });
  }

  /** Resumes a paused run. */
  resumeRun(runId, options = {}) {
    return this.#body('run.resume', { ...envelope(options), runId });
  }

  /** Cancels a run (its child's whole process group is stopped). */
  cancelRun(runId, options = {}) {
    return this.#body('run.cancel', { ...envelope(options), runId }, { reason: options.reason ?? null });
  }

  /**
   * A run in review: runs its current node again (a person's way out, once the cause is
   * fixed). `by` and `reason` are kept in the run's `retried` event. Refused while an effect
   * is uncertain (`resolveEffect` first). `acceptSource: true`: a run stopped because a source
   * changed goes on with its workflow file as it is now (refused for any other review).
   */
  retryRun(runId, options = {}) {
    return this.#body('run.retry', { ...envelope(options), runId }, {
      reason: options.reason ?? null,
      by: options.by ?? null,
      ...(options.acceptSource ? { accept_source: true } : {}),
    });
  }

  /**
   * A run in review: records what became of an uncertain effect, `{ applied: receipt }` or
   * `{ failed: error }`; once none is uncertain, the run continues (its node runs again and
   * finds the recorded receipt).
   */
  async resolveEffect(runId, effectId, outcome, options = {}) {
    const { value: result } = readOutcome('effect', outcome);
    return this.#body('effect.resolve', { ...envelope(options), runId }, {
      effect_id: effectId,
      result,
      reason: options.reason ?? null,
      by: options.by ?? null,
    });
  }

  /** Answers an ordinary checkpoint (the model-facing path). */
  answerCheckpoint(runId, decisionId, answer, options = {}) {
    return this.#body('checkpoint.answer', { ...envelope(options), runId }, {
      decision_id: decisionId,
      answer: answer ?? null,
    });
  }

  /** A person's answer (`answered_by: person`): to a protected human decision, or to a checkpoint. */
  answerHumanDecision(runId, decisionId, answer, options = {}) {
    return this.#body('decision.answer', { ...envelope(options), runId }, {
      decision_id: decisionId,
      answer: answer ?? null,
    });
  }

  /** Pending interactive requests of a Pi session. */
  async listInteractions(sessionId) {
    const { interactions } = await this.#body('interaction.list', {}, { session_id: sessionId });
    for (const i of interactions) i.request = await this.resolveValue(i.run_id, i.request);
    return interactions;
  }

  /**
   * Submits a result for an interactive request; it is validated by the workflow in a
   * supervised child before it counts (watch the run, or the interaction's state).
   */
  async submitInteraction(interaction, result, options = {}) {
    const at = {
      runId: interaction.run_id ?? interaction.runId,
      nodeId: interaction.node_id ?? interaction.nodeId,
      attemptId: interaction.attempt_id ?? interaction.attemptId,
    };
    const interactionId = interaction.interaction_id ?? interaction.interactionId;
    const sent = await this.#submittable(at, interactionId, result ?? null);
    return this.#body('interaction.submit', { ...envelope(options), ...at }, { interaction_id: interactionId, result: sent });
  }

  /**
   * A submission's `result` as it is sent: itself when its canonical JSON fits
   * INLINE_VALUE_BYTES (wrapped when its top level would read as a reference), else uploaded
   * for the request (`interaction.value_put`, in order, from where the host's copy ends) and
   * replaced by its reference. Over MAX_VALUE_BYTES (SUBMISSION_LIMIT): `value_too_large` before anything is sent.
   */
  async #submittable(at, interactionId, result) {
    const text = canonicalJson(result);
    const bytes = Buffer.byteLength(text, 'utf8');
    if (bytes <= INLINE_VALUE_BYTES) return wrapInline(result);
    if (bytes > SUBMISSION_LIMIT) {
      throw new PiwError(
        'value_too_large',
        `the submission is ${bytes} bytes of JSON, over the limit of ${SUBMISSION_LIMIT} bytes (${+(SUBMISSION_LIMIT / 1048576).toFixed(2)} MiB) a value may have; nothing was submitted`,
        { details: { bytes, limit: SUBMISSION_LIMIT } },
      );
    }
    const data = Buffer.from(text, 'utf8');
    const sha256 = crypto().createHash('sha256').update(data).digest('hex');
    let offset = 0;
    let end = 0; // the first chunk is empty: it asks where to go on from
    for (;;) {
      const r = await this.#body('interaction.value_put', at, {
        interaction_id: interactionId,
        sha256,
        bytes,
        offset,
        data: data.subarray(offset, end).toString('hex'),
      });
      if (r.complete === true) break;
      const received = r.received;
      if (!Number.isSafeInteger(received) || received >= bytes || (received <= offset && end !== offset)) {
        throw new PiwError('protocol', `interaction.value_put answered ${JSON.stringify(r)}`);
      }
      offset = received;
      end = Math.min(offset + VALUE_PUT_CHUNK_BYTES, bytes);
    }
    return { $piw: 'value', sha256, bytes, preview: Array.from(text.slice(0, 2 * VALUE_PREVIEW_CHARS)).slice(0, VALUE_PREVIEW_CHARS).join('') };
  }

  /**
   * Gives up on a pending interactive request: its attempt fails with `reason` and the run
   * routes `$result.outcome = failed` (or fails without such a route). Resolves with
   * `{ interaction_id, routed_to }`.
   */
  failInteraction(interaction, reason, options = {}) {
    return this.#body(
      'interaction.fail',
      {
        ...envelope(options),
        runId: interaction.run_id ?? interaction.runId,
        nodeId: interaction.node_id ?? interaction.nodeId,
        attemptId: interaction.attempt_id ?? interaction.attemptId,
      },
      { interaction_id: interaction.interaction_id ?? interaction.interactionId, reason },
    );
  }

  /** A durable progress update for a pending interactive request (kept as a `progress` event). */
  updateInteraction(interaction, message, data = null, options = {}) {
    return this.#body(
      'interaction.update',
      {
        ...envelope(options),
        runId: interaction.run_id ?? interaction.runId,
        nodeId: interaction.node_id ?? interaction.nodeId,
        attemptId: interaction.attempt_id ?? interaction.attemptId,
      },
      { interaction_id: interaction.interaction_id ?? interaction.interactionId, message, data },
    );
  }

  /** Claims undelivered workflow messages of a Pi session. */
  async claimMessages(sessionId, options = {}) {
    const { messages } = await this.#body('message.claim', envelope(options), {
      session_id: sessionId,
      limit: options.limit ?? null,
      claimant: options.claimant ?? null,
      ...(options.after ? { after: options.after } : {}),
    });
    for (const m of messages) m.content = await this.resolveValue(m.run_id, m.content);
    return messages;
  }

  /** Acknowledges delivery of a claimed message. */
  ackMessage(messageId, options = {}) {
    return this.#body('message.ack', envelope(options), { message_id: messageId });
  }

  /**
   * Removes finished runs with everything that belongs to them (never a run still going). A
   * run goes when every option given holds: `olderThanMs` (finished at least that long ago),
   * `statuses` (finished ones), `keep` (the newest N finished runs stay). The host removes a
   * batch per request; this asks until none is left. `dryRun: true` changes nothing.
   * Resolves with `{ dryRun, count, runIds }`: what went (or would go), oldest first.
   */
  async pruneRuns(options = {}) {
    const dryRun = options.dryRun === true;
    const runIds = [];
    let cursor = null;
    let count = null;
    for (;;) {
      const body = await this.#body('run.prune', {}, {
        older_than_ms: options.olderThanMs ?? null,
        statuses: options.statuses ?? null,
        keep: options.keep ?? null,
        dry_run: dryRun,
        limit: null,
        cursor,
      });
      const page = dryRun ? body.run_ids : body.removed;
      count ??= dryRun ? body.count : null;
      runIds.push(...page);
      cursor = body.next_cursor ?? null;
      // A batch that removed nothing while more match: those left are runs whose child is
      // still exiting; a later prune takes them.
      if (body.more !== true || page.length === 0 || (dryRun && cursor === null)) break;
    }
    return { dryRun, count: count ?? runIds.length, runIds };
  }

  /** Lists contradictory durable state (read-only). */
  async diagnose() {
    return (await this.#body('diagnose')).findings;
  }

  /**
   * Subscribes to a run's (`{ runId }`) or a session's (`{ sessionId }`) events. The result is
   * an async iterable of events; `close()` ends it.
   */
  async subscribe(filter) {
    const sub = await native(() => this.#native.subscribe(filter));
    return new Subscription(sub);
  }

  /**
   * Resolves with the run (as in `runStatus(runId).run`) once it is final, or, with
   * `options.untilParked`, also once it waits on a request (a pending decision, checkpoint or
   * interactive step: someone must answer it), waits paused, or stops for review. A run asleep on
   * a durable timer (`wake_at` set: a `wait` node, `waitThen`) is not parked: it goes on by
   * itself, so the wait goes on too. Rejects with `timeout` after `options.timeoutMs`.
   */
  waitForRun(runId, options = {}) {
    const ask = { untilParked: options.untilParked === true };
    return this.#waitFor(
      runId,
      async () => {
        // References kept until the run is there: only its result is read back, once.
        const ended = readOutcome('run', await this.runStatus(runId, { references: true }), ask);
        if (!ended) return undefined;
        const run = ended.value;
        run.result = await this.resolveValue(runId, run.result);
        return run;
      },
      // Every event that may leave the run parked or final; `check` reads what it waits on.
      (event) => mayChangeOutcome('run', event, ask),
      options,
    );
  }

  /**
   * Resolves with `{ submission_id, state, error }` once the workflow's `validate` judged the
   * submission (`state` `accepted` or `rejected`, with the error). Rejects with `timeout` after
   * `options.timeoutMs`; at once with `run_in_review` when the run stopped for review before
   * judging it (`details`: `run_id`, `submission_id`, `review_reason`; the host keeps the
   * submission and judges it once a person lets the run go on: `piw run retry`).
   */
  waitForSubmission(runId, submissionId, options = {}) {
    const ask = { runId, submissionId };
    return this.#waitFor(
      runId,
      async () => readOutcome('submission', await this.runStatus(runId, { references: true }), ask)?.value,
      (event) => mayChangeOutcome('submission', event, ask),
      options,
    );
  }

  /**
   * Evaluates `check` once, then again after each event of the run for which `relevant` holds,
   * until it returns a value (events carry the run's status, so most need no read).
   */
  async #waitFor(runId, check, relevant, options) {
    let sub = null;
    let done = false;
    let timer;
    const timeout = new Promise((_, reject) => {
      if (options.timeoutMs)
        timer = setTimeout(
          () => reject(new PiwError('timeout', `run ${runId}: still waiting after ${options.timeoutMs} ms`)),
          options.timeoutMs,
        );
    });
    try {
      const watch = (async () => {
        for (;;) {
          // Subscribed first, then read: no event can fall between the read and the wait.
          sub = await this.subscribe({ runId });
          if (done) {
            // The wait already ended (a timeout) while this subscription was being made.
            await sub.close().catch(() => {});
            return undefined;
          }
          let found = await check();
          if (found !== undefined) return found;
          try {
            for await (const event of sub) {
              if (!relevant(event)) continue;
              found = await check();
              if (found !== undefined) return found;
            }
          } catch (e) {
            // This reader fell behind and events were dropped (the subscription ends there):
            // subscribe again and re-read, so nothing that happened meanwhile is missed.
            if (e?.code === 'subscription_overflow' && !done) continue;
            throw e;
          }
          throw new PiwError('disconnected', `the subscription to run ${runId} ended`);
        }
      })();
      // After a timeout, closing the subscription ends `watch` with an error nobody awaits.
      watch.catch(() => {});
      return await Promise.race([watch, timeout]);
    } finally {
      done = true;
      clearTimeout(timer);
      await sub?.close().catch(() => {});
    }
  }

  /** Closes the connection: calls in flight reject with `client_closed`. */
  close() {
    return native(() => this.#native.close());
  }
}

/**
 * Makes sure a host serves `options.home` (starting one when none answers; racing callers end
 * with exactly one host) and resolves with its status.
 */
export async function ensureHost(options = {}) {
  const client = await Client.connect({ ...options, start: true });
  try {
    return await client.status();
  } finally {
    await client.close();
  }
}

/** A stream of events; iterate it with `for await`. */
export class Subscription {
  #native;

  constructor(nativeSub) {
    this.#native = nativeSub;
  }

  get id() {
    return this.#native.id;
  }

  /** The next event, or `null` once closed. */
  next() {
    return native(() => this.#native.next());
  }

  close() {
    return native(() => this.#native.close());
  }

  /** Iterates the events; leaving the loop (`break`, `return`, a throw) closes the subscription. */
  async *[Symbol.asyncIterator]() {
    try {
      for (;;) {
        const event = await this.next();
        if (event === null) return;
        yield event;
      }
    } finally {
      await this.close().catch(() => {});
    }
  }
}
