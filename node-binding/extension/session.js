// One Pi session's link to the piw host: its connection and subscription, the delivery of its
// workflow messages, the presentation of its one active interactive request (with reminders),
// its protected decisions as dialogs, and its widget. Runs live in the host: nothing here
// cancels, fails or parks a run when Pi goes away.
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { Client, isFinal } from '../index.js';
import {
  MESSAGE,
  STEP,
  checkpointMessage,
  messageParts,
  parkedCheckpointText,
  presentationOf,
  readRequest,
  reviewCardText,
  stepMessage,
  widgetOf,
} from './format.js';
import { DecisionComponent, decisionLines, decisionText } from './decision.js';

/** How long a call to the host may take before a tool call fails (a hung host). */
export const CALL_TIMEOUT_MS = Number(process.env.PIW_PI_CALL_TIMEOUT_MS) || 10_000;
/** How long `submit` waits for the workflow's `validate` to judge a submission. */
export const VALIDATION_WAIT_MS = Number(process.env.PIW_PI_VALIDATION_WAIT_MS) || 90_000;
/** How long closing the session may wait for the host: a host that does not answer must not keep Pi from quitting. */
export const CLOSE_TIMEOUT_MS = Number(process.env.PIW_PI_CLOSE_TIMEOUT_MS) || 2_000;
/** Reminders after the model's turn settled without a submission. */
export const MAX_REMINDERS = 2;
/**
 * Waits between attempts to follow a host again after the session's subscription ended (a host
 * that stopped, restarted or died): quick at first, then every 30 s, for about five minutes.
 * While the session has live runs these attempts start a host (its runs progress only in
 * one); otherwise they only connect to one that runs, and after the last one the next call to
 * the host starts one.
 */
export const RECONNECT_DELAYS_MS = [500, 1_000, 2_000, 4_000, 8_000, 15_000, ...Array(9).fill(30_000)];
/** The most unfinished runs of the session a refresh follows (each costs a `run.status` call). */
const UNFINISHED_RUNS = 1_000;
/** Workflow messages taken from the host per claim. */
const CLAIM_LIMIT = 20;
const KEY = 'piw';

/**
 * A test's barrier (test-only, like PIW_PI_FAULT): with PIW_PI_BARRIER_DIR set, while
 * `<dir>/<point>.hold` exists the session waits at `point`. `<point>.reached` says it got there,
 * `<point>.passed` that it goes on (written just before the code after the point runs, which
 * runs on without yielding to anything but what it awaits).
 */
export async function barrier(point) {
  const dir = process.env.PIW_PI_BARRIER_DIR;
  if (!dir || !existsSync(join(dir, `${point}.hold`))) return;
  writeFileSync(join(dir, `${point}.reached`), '');
  while (existsSync(join(dir, `${point}.hold`))) await new Promise((r) => setTimeout(r, 20));
  writeFileSync(join(dir, `${point}.passed`), '');
}

export class HostCallError extends Error {
  constructor(message, code) {
    super(message);
    this.name = 'HostCallError';
    this.code = code;
  }
}

function bounded(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new HostCallError(`the piw host did not answer ${what} within ${Math.round(ms / 1000)} s`, 'timeout')),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * The text each choice of a human decision collects: choice id -> `{ label, placeholder,
 * minLength, maxLength, required, perChoice }`, or null for a choice that takes no text. Read
 * from each choice's `input` when the request carries them; a request with only the
 * decision-wide `textInput` does not say which choice it belongs to, so every choice offers it,
 * optional (`perChoice` false: whether it is needed, and its length, are the host's to check).
 */
export function choiceInputs(request) {
  const raw = request && typeof request === 'object' && Array.isArray(request.choices) ? request.choices : [];
  // A choice's own input: `input` (as `choice({ input })` names it), or `textInput`.
  const own = (c) => (c && typeof c === 'object' ? c.input ?? c.textInput ?? null : null);
  const perChoice = raw.some((c) => own(c) && typeof own(c) === 'object');
  const shared = request?.textInput && typeof request.textInput === 'object' ? request.textInput : null;
  const count = (v) => (Number.isInteger(v) && v >= 0 ? v : null);
  const inputs = new Map();
  for (const c of raw) {
    if (!c || typeof c.id !== 'string') continue;
    const i = perChoice ? own(c) : shared;
    if (!i || typeof i !== 'object') {
      inputs.set(c.id, null);
      continue;
    }
    const minLength = count(i.minLength);
    inputs.set(c.id, {
      label: [i.label, i.prompt, i.name].find((v) => typeof v === 'string' && v.trim() !== '') ?? 'Text',
      placeholder: typeof i.placeholder === 'string' ? i.placeholder : '',
      minLength,
      maxLength: count(i.maxLength),
      // The shared input's `required` is its own choice's rule, not known here: the host checks it.
      required: perChoice ? (minLength ?? 0) > 0 : false,
      perChoice,
    });
  }
  return inputs;
}

/** The length rule of a text input, for the person (`""` when it has none). */
export function textRule(input) {
  const { minLength: min, maxLength: max } = input;
  if (min !== null && max !== null) return `${min} to ${max} characters`;
  if (min !== null && min > 0) return `at least ${min} characters`;
  if (max !== null) return `at most ${max} characters`;
  return input.required ? 'required' : '';
}

/** Why `text` does not fit `input` (null when it does). Lengths count as the workflow counts them (UTF-16 units). */
export function textProblem(text, input) {
  if (input.minLength !== null && text.length < input.minLength) return `${input.label}: at least ${input.minLength} characters, got ${text.length}`;
  if (input.maxLength !== null && text.length > input.maxLength) return `${input.label}: at most ${input.maxLength} characters, got ${text.length}`;
  if (input.required && text.trim() === '') return `${input.label}: an answer is required`;
  return null;
}

/**
 * The answer `/workflow answer` gives a human decision, or why it does not fit the decision
 * (`{ problem }`): `raw` is `{"choice": id, "text": ...}` as JSON, or a choice's id or label
 * followed by its text (`reject too vague`).
 */
export function humanAnswer(request, raw) {
  const { choices } = readRequest(request);
  const inputs = choiceInputs(request);
  if (choices.length === 0) return { answer: { choice: null, text: raw } };
  const listing = choices
    .map((c) => {
      const input = inputs.get(c.id);
      const name = c.label === c.id ? c.id : `${c.id} ("${c.label}")`;
      if (!input) return name;
      const rule = textRule(input);
      return `${name} <${input.label}${rule ? `, ${rule}` : ''}>`;
    })
    .join(', ');
  let parsed;
  try {
    parsed = JSON.parse(raw);
  } catch {
    parsed = raw;
  }
  let picked;
  let text;
  if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
    picked = choices.find((c) => c.id === parsed.choice);
    text = typeof parsed.text === 'string' ? parsed.text : null;
  } else {
    const given = String(parsed);
    const lower = given.toLowerCase();
    let best = null;
    for (const c of choices) {
      for (const name of [c.id, c.label]) {
        const n = name.toLowerCase();
        const fits = lower === n || lower.startsWith(`${n} `);
        if (fits && (!best || n.length > best.length)) best = { c, length: n.length };
      }
    }
    picked = best?.c;
    text = best ? given.slice(best.length).trim() : null;
  }
  if (!picked) return { problem: `that answer names none of the choices; answer with one of: ${listing}` };
  const input = inputs.get(picked.id);
  if (!input) {
    if (text) return { problem: `${picked.label} takes no text; answer with one of: ${listing}` };
    return { answer: { choice: picked.id, text: null } };
  }
  const problem = textProblem(text ?? '', input);
  if (problem) return { problem: `${picked.label} needs its text (${problem}); answer with one of: ${listing}` };
  return { answer: { choice: picked.id, text: input.perChoice ? (text ?? '') : text || null } };
}

/**
 * Why a request the model was working on is closed without its submission, or null while it
 * is open or once it was answered: its run ended, or the request timed out or was cancelled.
 */
export function closedWithout(status, id) {
  const { run } = status;
  const interaction = status.interactions.find((i) => i.interaction_id === id);
  const decision = status.decisions.find((d) => d.decision_id === id);
  const state = interaction?.status ?? decision?.status ?? null;
  if (state === 'settled' || state === 'answered') return null;
  if (isFinal(run.status)) return `the run ended: ${run.status}`;
  if (state === 'expired') return 'it timed out';
  if (state === 'cancelled') return interaction ? 'it was cancelled' : 'it was closed (cancelled, or its deadline passed)';
  return null;
}

export class WorkflowSession {
  /** @param pi the ExtensionAPI; @param ctx the session_start context */
  constructor(pi, ctx) {
    this.pi = pi;
    this.ctx = ctx;
    this.sessionId = ctx.sessionManager.getSessionId();
    this.cwd = ctx.cwd;
    this.closed = false;
    this.client = null;
    this.connecting = null;
    this.subscription = null;
    this.refreshing = null;
    this.refreshAgain = false;
    /** The request presented to the model: `{ type: 'interaction'|'checkpoint', id, runId, kind }`. */
    this.active = null;
    /** Open protected-decision dialogs: decision id -> `{ controller, node, runId }`. */
    this.dialogs = new Map();
    this.progress = new Map();
    this.widgetRun = null;
    /**
     * Sent to Pi in this process but not yet seen in the session's branch (a steer or follow-up
     * waits in Pi's memory for the turn): `message:<id>` -> `{ type: 'message', id, count,
     * settles }`, `step:<key>` -> `{ type: 'step', id, count, reminder, settles }` (`count`: the
     * copies the branch holds once this one is in; `reminder`: the step's reminders so far).
     * `settles`: how many turns had settled when it was sent; one that is still not in the
     * branch after a later settle was dropped by Pi (its queue cleared, or Pi quitting mid-turn)
     * and is sent again.
     */
    this.outbox = new Map();
    /** agent_settled events seen, and those not handled yet: `{ aborted, carried }`. */
    this.settles = 0;
    /** Interaction id -> why its last submission was refused before the host took it (`value_too_large`, a rejection). */
    this.submitRefusals = new Map();
    this.settleQueue = [];
    /**
     * What the turn now running carries: `step:<key>` and `message:<id>` (a message that asks
     * for a turn) whose message_end came since the last settle. At the settle they are that
     * turn's: a reminder follows only a turn that carried its step, and a presentation is
     * acknowledged once the turn that carried it settled (`presentedTurns`).
     */
    this.carrying = new Set();
    /** Messages asking for a turn whose turn settled in this process (acknowledged then). */
    this.presentedTurns = new Set();
    /** Messages delivered by this process: id -> the copies the branch holds once this one is in. */
    this.deliveredHere = new Map();
    /** Requests presented by this process: key -> `{ type, runId, node }`. */
    this.presentedHere = new Map();
    /**
     * Requests whose turn was stopped because the workflow closed them (cancelled, timed out,
     * their run ended); while such a stop waits for its settle, nothing new is presented.
     */
    this.stoppedTurns = new Set();
    this.stoppingTurn = false;
    /**
     * Steps presented before this process started, looked at once: a turn the previous Pi did
     * not finish (it died or quit mid-turn) is given again, once.
     */
    this.recovered = new Set();
    /** Whether the last settled turn was aborted (Escape): what was dropped then comes back without a turn. */
    this.lastSettleAborted = false;
    /** Messages Pi dropped once in this process, and those whose end was already notified. */
    this.droppedMessages = new Set();
    this.notified = new Set();
    /** Checkpoints of detached runs whose card this process sent or found in the branch (decision ids). */
    this.announced = new Set();
    /** A run just resumed: its active request is presented again, once, by the next refresh. */
    this.resumedRun = null;
    /** Connections given up, with why (for the calls still waiting on them). */
    this.dropped = new WeakMap();
    this.connectedBefore = false;
    /** The session's runs that had not ended at the last refresh (ids). */
    this.liveRuns = [];
    this.reconnectTimer = null;
    this.reconnectAttempt = 0;
    /** Review cards sent by this process (their `reviewKey`s), until the branch holds them. */
    this.reviewCards = new Set();
    /** Runs of the session seen in review, and those that went on since (presented again, once). */
    this.reviewRuns = new Set();
    this.wentOn = new Set();
    /** The last refresh failure reported to the person (reported once, until a refresh succeeds). */
    this.refreshFailure = null;
    /** Whether a call may start a host when none answers (a bridge never does: see ./bridge.js). */
    this.startsHost = true;
  }

  /** The events this link follows: its session's. */
  subscriptionFilter() {
    return { sessionId: this.sessionId };
  }

  // ---------------------------------------------------------------------------------------
  // Connection

  /**
   * The connected client, subscribed to this session's events. `start: false` (the reconnect
   * attempts) only connects to a host that runs; otherwise a host is started on demand. A
   * connection made after an earlier one ended schedules a refresh: what happened meanwhile
   * (results, steps) is delivered.
   */
  async connection({ start = this.startsHost } = {}) {
    if (this.closed) throw new HostCallError('the workflow session is closed', 'client_closed');
    if (this.client?.isOpen) return this.client;
    if (!this.connecting) {
      this.connecting = (async () => {
        const client = await Client.connect({ start });
        const closedMeanwhile = () => {
          if (!this.closed) return false;
          client.close().catch(() => {});
          return true;
        };
        if (closedMeanwhile()) throw new HostCallError('the workflow session is closed', 'client_closed');
        let sub;
        try {
          sub = await client.subscribe(this.subscriptionFilter());
        } catch (e) {
          client.close().catch(() => {});
          throw e;
        }
        // Closed during the subscribe round trip: close() saw no client to close.
        if (closedMeanwhile()) throw new HostCallError('the workflow session is closed', 'client_closed');
        this.client = client;
        this.subscription = sub;
        this.reconnectAttempt = 0;
        this.follow(sub, client);
        if (this.connectedBefore) this.kick();
        this.connectedBefore = true;
        return client;
      })().finally(() => {
        this.connecting = null;
      });
    }
    return bounded(this.connecting, CALL_TIMEOUT_MS, 'the connection');
  }

  /** Runs `fn(client)` against the host, bounded; a broken connection is dropped (the next call reconnects). */
  async call(what, fn, ms = CALL_TIMEOUT_MS) {
    const client = await this.connection();
    try {
      return await bounded(fn(client), ms, what);
    } catch (e) {
      if (e?.code === 'client_closed' && !this.closed && this.dropped.get(client)) {
        // Another call dropped this connection: say why, not just that it closed.
        throw new HostCallError(`${what} failed: ${this.dropped.get(client)}`, 'disconnected');
      }
      if (['timeout', 'disconnected', 'io', 'host_shutting_down'].includes(e?.code) && this.client === client) {
        this.dropClient(e.message);
      }
      throw e;
    }
  }

  dropClient(reason = 'the connection to the piw host ended') {
    const client = this.client;
    if (client) this.dropped.set(client, reason);
    this.client = null;
    this.subscription?.close().catch(() => {});
    this.subscription = null;
    client?.close().catch(() => {});
  }

  /**
   * Follows the session's events until the subscription ends; each one schedules a refresh.
   * Then follows the host again (a host that restarted), see `scheduleReconnect`.
   */
  async follow(sub, client) {
    try {
      for await (const event of sub) {
        if (event.event_kind === 'progress') {
          const text = typeof event.data?.message === 'string' ? event.data.message : null;
          if (text) this.progress.set(event.run_id, text);
        }
        this.widgetRun = event.run_id;
        this.kick();
      }
    } catch {
      // The connection ended (a host that stopped or died).
    }
    if (this.client === client) this.dropClient('the piw host closed the connection');
    this.hostGone();
  }

  /** The subscription ended (a host that stopped, restarted or died): followed again. */
  hostGone() {
    this.showHostGone('starting it again');
    this.scheduleReconnect();
  }

  /** The widget says that the session's live runs do not progress while no host runs. */
  showHostGone(what) {
    if (this.closed || this.liveRuns.length === 0) return;
    const n = this.liveRuns.length;
    this.ctx.ui.setWidget(KEY, [`piw: the host is not running: ${n === 1 ? `run ${this.liveRuns[0]} does` : `${n} runs of this session do`} not progress (${what})`]);
    this.ctx.ui.setStatus(KEY, 'wf: no host');
  }

  /**
   * Tries to follow a running host again after RECONNECT_DELAYS_MS[attempt], quietly: a host
   * that is gone for good costs a few failed connects and no message. A call to the host made
   * meanwhile (the person's command, the model's tool) connects by itself, starting a host.
   */
  scheduleReconnect() {
    if (this.closed || this.reconnectTimer || this.reconnectAttempt >= RECONNECT_DELAYS_MS.length) return;
    const delay = RECONNECT_DELAYS_MS[this.reconnectAttempt];
    this.reconnectAttempt += 1;
    this.reconnectTimer = setTimeout(async () => {
      this.reconnectTimer = null;
      if (this.closed || this.client?.isOpen) return;
      try {
        await this.connection({ start: this.liveRuns.length > 0 });
      } catch {
        if (this.reconnectAttempt >= RECONNECT_DELAYS_MS.length) this.showHostGone('/workflow status tries again');
        this.scheduleReconnect();
      }
    }, delay);
    // Never keeps Pi's process alive.
    this.reconnectTimer.unref?.();
  }

  /**
   * Idempotent: closes the dialogs and the connection (which ends the subscription), bounded
   * by CLOSE_TIMEOUT_MS: Pi's quit never waits longer on a host that does not answer.
   */
  async close() {
    if (this.closed) return;
    this.closed = true;
    await barrier('closing');
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    for (const dialog of this.dialogs.values()) dialog.controller.abort();
    this.dialogs.clear();
    const client = this.client;
    const subscription = this.subscription;
    this.client = null;
    this.subscription = null;
    const closing = (async () => {
      await subscription?.close().catch(() => {});
      await client?.close().catch(() => {});
    })();
    await bounded(closing, CLOSE_TIMEOUT_MS, 'the unsubscribe').catch(() => {
      // Not answering: the connection is dropped without waiting (the host ends the subscription with it).
      client?.close().catch(() => {});
    });
  }

  // ---------------------------------------------------------------------------------------
  // What the session already holds (deduplication across restarts)

  entries() {
    try {
      return this.ctx.sessionManager.getBranch();
    } catch {
      return [];
    }
  }

  /**
   * This extension's entries in the session's branch: `step:<key>` / `message:<id>` ->
   * `{ count, reminder, turn, completed, displayed }`: how many copies, the most reminders one
   * carries, whether the last copy asked for a turn, whether a turn was completed after it (an
   * assistant reply that ended, not one cut short: Pi died or quit mid-turn), and whether one
   * is shown (a card).
   */
  branchIndex() {
    const index = new Map();
    const entries = this.entries();
    // Where the last copy of each is, and the last assistant reply that ended.
    const lastAt = new Map();
    let lastCompleted = -1;
    entries.forEach((e, at) => {
      if (e.type === 'custom_message' && (e.customType === STEP || e.customType === MESSAGE)) {
        const id = e.customType === STEP ? e.details?.key : e.details?.messageId;
        if (!id) return;
        const key = `${e.customType === STEP ? 'step' : 'message'}:${id}`;
        const seen = index.get(key) ?? { count: 0, reminder: 0, turn: false, completed: false, displayed: false };
        seen.count += 1;
        seen.displayed ||= e.display !== false;
        seen.reminder = Math.max(seen.reminder, Number(e.details.reminder) || 0);
        seen.turn = e.customType === STEP || e.details.turn === true;
        index.set(key, seen);
        lastAt.set(key, at);
      } else if (e.type === 'message' && e.message?.role === 'assistant' && ['stop', 'length'].includes(e.message.stopReason)) {
        lastCompleted = at;
      }
    });
    for (const [key, seen] of index) seen.completed = lastCompleted > lastAt.get(key);
    return index;
  }

  /** Step presentations in the branch or on their way to it: key -> how many times. */
  presentedSteps() {
    const seen = new Map();
    for (const [key, v] of this.branchIndex()) if (key.startsWith('step:')) seen.set(key.slice(5), v.count);
    for (const sent of this.outbox.values()) {
      if (sent.type === 'step') seen.set(sent.id, Math.max(sent.count, seen.get(sent.id) ?? 0));
    }
    return seen;
  }

  /** The reminders a step has had (in the branch or on their way to it). */
  remindersOf(key) {
    let most = this.branchIndex().get(`step:${key}`)?.reminder ?? 0;
    const sent = this.outbox.get(`step:${key}`);
    if (sent) most = Math.max(most, sent.reminder);
    return most;
  }

  /**
   * Forgets what reached the branch since it was sent, and what Pi dropped: not in the branch
   * although a turn settled since and Pi is idle (a message sent while Pi emitted the settle
   * starts a run of its own, so Pi is not idle then). Returns the dropped ones.
   */
  pruneOutbox() {
    const idle = this.ctx.isIdle();
    const branch = this.branchIndex();
    const dropped = [];
    for (const [key, sent] of this.outbox) {
      const inBranch = (branch.get(key)?.count ?? 0) >= sent.count;
      if (inBranch) {
        this.outbox.delete(key);
      } else if (idle && sent.settles < this.settles) {
        this.outbox.delete(key);
        if (sent.type === 'message') this.droppedMessages.add(sent.id);
        dropped.push(sent);
      }
    }
    return dropped;
  }

  // ---------------------------------------------------------------------------------------
  // Refresh: messages, the active request, decisions, widget

  /**
   * Schedules a refresh (coalesced; never awaited by a Pi event handler). Refreshes and the
   * handling of settled turns run one at a time, in this one loop, so that they never present
   * the same request twice.
   */
  kick() {
    if (this.closed) return;
    if (this.refreshing) {
      this.refreshAgain = true;
      return;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        while (this.settleQueue.length > 0 && !this.closed) {
          const turn = this.settleQueue.shift();
          try {
            await this.settled(turn);
          } catch (e) {
            this.reportFailure('after the turn', e);
          }
        }
        try {
          await this.refresh();
          this.refreshFailure = null;
        } catch (e) {
          this.reportFailure('refresh failed', e);
        }
      } while ((this.refreshAgain || this.settleQueue.length > 0) && !this.closed);
    })().finally(() => {
      this.refreshing = null;
    });
  }

  /** Tells the person once (not at every refresh) that the host cannot be reached, until a refresh succeeds. */
  reportFailure(what, e) {
    if (this.closed) return;
    const message = `piw: ${what}: ${e?.message ?? e}`;
    if (this.refreshFailure === message) return;
    this.refreshFailure = message;
    try {
      this.ctx.ui.notify(message, 'warning');
    } catch {
      // no UI (print mode)
    }
  }

  async refresh() {
    await this.deliverMessages();
    // Every run of the session that has not ended, however many have ended since it started.
    const runs = await this.call('run.list', (c) => c.listRuns({ sessionId: this.sessionId, unfinished: true, limit: UNFINISHED_RUNS }));
    this.liveRuns = runs.filter((r) => !isFinal(r.status)).map((r) => r.run_id);
    const statuses = new Map();
    for (const run of runs) {
      if (!isFinal(run.status)) statuses.set(run.run_id, await this.call('run.status', (c) => c.runStatus(run.run_id)));
    }
    this.reportReviews(statuses);
    await this.stopClosedTurn(statuses);
    await this.presentActive(statuses);
    this.offerDecisions(statuses);
    this.announceParkedCheckpoints(statuses);
    await this.updateWidget(runs, statuses);
  }

  /**
   * A detached run of this session waiting on an ordinary checkpoint: its model is not asked
   * (`pendingCheckpoint`), so the session gets one card that says the run is parked there and
   * how a person answers it. Once per checkpoint: not again in this process, nor after a
   * restart (the card's entry in the session's branch, by decision id).
   */
  announceParkedCheckpoints(statuses) {
    let inBranch = null;
    for (const { run, decisions } of statuses.values()) {
      if (run.execution_mode !== 'detached' || run.paused || isFinal(run.status)) continue;
      for (const d of decisions) {
        if (d.kind !== 'checkpoint' || d.status !== 'pending' || this.announced.has(d.decision_id) || this.closed) continue;
        inBranch ??= new Set(
          this.entries()
            .filter((e) => e.type === 'custom_message' && e.customType === MESSAGE && e.details?.kind === 'checkpoint')
            .map((e) => e.details.decisionId),
        );
        this.announced.add(d.decision_id);
        if (inBranch.has(d.decision_id)) continue;
        this.pi.sendMessage(
          {
            customType: MESSAGE,
            content: parkedCheckpointText(d, run),
            display: true,
            details: { kind: 'checkpoint', runId: run.run_id, decisionId: d.decision_id, node: d.node_id },
          },
          { triggerTurn: false },
        );
      }
    }
  }

  /**
   * Adds the session's workflow messages to it and acknowledges each once it is in the
   * session's branch, never before: a steer waiting in Pi's memory for the turn is lost when
   * the queue is cleared or Pi quits, and the host then gives the message again (to this
   * claimant at once): at the next refresh of this process (after the turn settled) or at
   * the next start. The branch's message ids keep a message from being added twice.
   */
  async deliverMessages() {
    // While Pi keeps no session file, nothing can be acknowledged, and a claim gives the held
    // messages first: the next page is asked for after the last message seen.
    let after;
    const seen = new Set();
    for (;;) {
      const messages = await this.call('message.claim', (c) =>
        c.claimMessages(this.sessionId, { limit: CLAIM_LIMIT, claimant: `pi:${this.sessionId}`, ...(after ? { after } : {}) }),
      );
      await barrier('claimed');
      // Pi is quitting (its session is closing): nothing more is added to the session; what was
      // claimed and not acknowledged comes back at the next start.
      if (messages.length === 0 || this.closed) return;
      this.pruneOutbox();
      let acked = 0;
      for (const m of messages) {
        if (m.origin_session !== this.sessionId) continue;
        const id = m.message_id;
        const key = `message:${id}`;
        // On its way: acknowledged once it is in the branch.
        if (this.outbox.has(key)) continue;
        let copy = this.branchIndex().get(key);
        // The copies the branch holds once the one this process sent is in.
        const ours = this.deliveredHere.get(id);
        if (!copy || (ours !== undefined && copy.count < ours)) {
          // Not in the session, or the copy this process sent again was dropped by Pi.
          this.deliver(m, { interrupted: copy !== undefined });
          // Added at once while Pi is idle; a turn's message waits for it (its message_end
          // or the turn's settle schedules the refresh that acknowledges it).
          copy = this.branchIndex().get(key);
          if (!copy || copy.count < this.deliveredHere.get(id)) continue;
        } else if (copy.turn && ours === undefined && !copy.completed) {
          // Added with its turn by a Pi that did not finish that turn (it died or quit
          // mid-turn): given again, once, with its turn.
          this.deliver(m, { interrupted: true });
          continue;
        }
        // Its turn runs in this process: acknowledged once the turn settled.
        if (copy.turn && this.deliveredHere.has(id) && !this.presentedTurns.has(id)) continue;
        // In the session, but not yet where the person will see it again: Pi keeps no session
        // file until the session has a message of the person's or the model's. Acknowledged at
        // a later refresh once it has one (the host gives it again at the next start if Pi
        // quits before: the branch then lacks it, and it is added once).
        if (!this.sessionKept()) continue;
        this.outbox.delete(key);
        // Fault injection for the tests (as the host's PIW_FAULT): die between adding a
        // message to the session and acknowledging it.
        if (process.env.PIW_PI_FAULT === 'kill_before_ack') process.kill(process.pid, 'SIGKILL');
        await this.call('message.ack', (c) => c.ackMessage(m.message_id));
        acked += 1;
      }
      // Claims give back what this claimant holds first: claim again only when all were
      // acknowledged. A claim may hold fewer than CLAIM_LIMIT though more wait (only what fits a
      // frame is claimed), so claim again until one comes back empty. In a session Pi has not
      // kept yet, every message is in the branch and none acknowledged: the next page.
      if (!this.sessionKept() && !this.closed) {
        // A host that does not page (`after` unknown to it) gives the same ones again.
        if (messages.some((m) => seen.has(m.message_id))) return;
        for (const m of messages) seen.add(m.message_id);
        after = messages[messages.length - 1].message_id;
        continue;
      }
      if (acked < messages.length) return;
    }
  }

  /**
   * Whether what is in this session's branch is kept where the person will see it again: the
   * session file exists (Pi 1.6 writes it once the session has a user or assistant message,
   * with every entry before that). A session Pi never keeps (`--no-session`) has no file to
   * wait for: what is in it is all there will be.
   */
  sessionKept() {
    const file = this.ctx.sessionManager.getSessionFile?.();
    return !file || existsSync(file);
  }

  /**
   * Adds a workflow message to the session: one with presentation instructions with a turn
   * (`details.turn`), acknowledged once that turn settled. `interrupted`: the turn a previous
   * Pi gave it did not end.
   */
  deliver(m, { interrupted = false } = {}) {
    if (this.closed) return;
    const { text, parts } = messageParts(m);
    const presentation = presentationOf(m);
    // A message Pi dropped when the person stopped the turn (Escape) comes back without starting one.
    const turn = Boolean(presentation) && !(this.lastSettleAborted && this.droppedMessages.has(m.message_id));
    const again = turn && interrupted ? 'Pi stopped before the turn that presents this ended; present it now.\n\n' : '';
    // Ids and kinds: the message's content is kept once, in its text. A run's end adds what its
    // card's head says and where in the text its error, result and reason are.
    const details = { messageId: m.message_id, runId: m.run_id, kind: m.kind, turn };
    if (parts) {
      const c = m.content;
      details.workflow = typeof c.workflow === 'string' ? c.workflow : null;
      details.status = typeof c.status === 'string' ? c.status : null;
      details.stored = c.result?.$piw === 'value';
      details.parts = Object.fromEntries(Object.entries(parts).map(([name, [from, to]]) => [name, [from + again.length, to + again.length]]));
    }
    const key = `message:${m.message_id}`;
    const inBranch = this.branchIndex().get(key);
    const count = (inBranch?.count ?? 0) + 1;
    this.outbox.set(key, { type: 'message', id: m.message_id, count, settles: this.settles });
    this.deliveredHere.set(m.message_id, count);
    // A card the session already shows (given again because the turn that presents it did not
    // end, or Pi dropped the copy sent again) is not shown a second time: the copy goes to the
    // model (Pi keeps hidden custom messages in its context), not onto the screen.
    const display = !inBranch?.displayed;
    if (turn) {
      this.pi.sendMessage(
        { customType: MESSAGE, content: `${again}${text}\n\n${presentation}`, display, details },
        { triggerTurn: true, deliverAs: this.ctx.isIdle() ? 'followUp' : 'steer' },
      );
    } else {
      this.pi.sendMessage(
        { customType: MESSAGE, content: presentation ? `${text}\n\n${presentation}` : text, display, details },
        { triggerTurn: false },
      );
    }
    if (m.kind === 'terminal' && !this.notified.has(m.message_id)) {
      this.notified.add(m.message_id);
      const status = m.content?.status;
      const level = status === 'completed' ? 'info' : status === 'cancelled' ? 'warning' : 'error';
      this.ctx.ui.notify(`workflow ${m.content?.workflow ?? ''} ${status ?? 'ended'} (run ${m.run_id})`, level);
      this.progress.delete(m.run_id);
    }
  }

  /**
   * A Pi `message_end`: one of ours reached the session (Pi stores it right after the
   * handlers); a step, or a message that asked for a turn, is carried by the turn now running.
   */
  onMessageEnd(message) {
    if (message?.role !== 'custom' || this.closed) return;
    const details = message.details ?? {};
    if (message.customType === STEP && details.key) this.carrying.add(`step:${details.key}`);
    if (message.customType === MESSAGE && details.messageId) {
      if (details.turn) this.carrying.add(`message:${details.messageId}`);
      this.kick();
    }
  }

  /**
   * The session's active interaction: its first pending (or validating) interaction of a run
   * that is not paused, or null. What `presentActive` presents and what the tool's `submit`
   * and `update` answer: one notion of "current", so a paused run's request never holds
   * another run's back. `statuses` (run id -> run.status) is filled in for the runs it reads.
   */
  async activeInteraction(statuses = new Map()) {
    const interactions = await this.call('interaction.list', (c) => c.listInteractions(this.sessionId));
    for (const i of interactions) {
      if (i.origin_session !== this.sessionId) continue;
      // A run older than the listed ones still has its requests presented.
      if (!statuses.has(i.run_id)) statuses.set(i.run_id, await this.call('run.status', (c) => c.runStatus(i.run_id)));
      if (!statuses.get(i.run_id).run.paused) return i;
    }
    return null;
  }

  /**
   * The request the model was shown last (the newest step message in the session's branch),
   * or the newest presentation matching `which` (`key`, `runId`, `kind`: each only when
   * given): `{ key, runId, kind, node, attemptId }`, or null. A message on its way to Pi is
   * not counted: the model has not seen it (a steer waits for the running tool calls to end).
   */
  presentedRequest(which = {}) {
    const entries = this.entries();
    for (let i = entries.length - 1; i >= 0; i--) {
      const e = entries[i];
      if (e.type !== 'custom_message' || e.customType !== STEP || !e.details?.key) continue;
      const d = e.details;
      if (['key', 'runId', 'kind'].every((f) => which[f] == null || which[f] === d[f])) return { ...d };
    }
    return null;
  }

  /**
   * The first pending checkpoint of a run that is not paused, as the request to present, or
   * null. A detached run's checkpoints are not the model's to answer (its bridge offers no
   * `answer`): a person answers them (`/workflow answer`, `piw run answer`).
   */
  pendingCheckpoint(statuses) {
    for (const s of statuses.values()) {
      if (s.run.paused || s.run.execution_mode === 'detached') continue;
      const d = s.decisions.find((x) => x.status === 'pending' && x.kind === 'checkpoint');
      if (d) return { type: 'checkpoint', id: d.decision_id, runId: s.run.run_id, kind: 'checkpoint', item: d, run: s.run };
    }
    return null;
  }

  /** The session's one active request: the active interaction, else the first pending checkpoint of a run that is not paused. */
  async presentActive(statuses) {
    const interaction = await this.activeInteraction(statuses);
    let next = interaction
      ? { type: 'interaction', id: interaction.interaction_id, runId: interaction.run_id, kind: interaction.kind, item: interaction }
      : null;
    if (!next) next = this.pendingCheckpoint(statuses);
    if (next) await barrier(`present-${next.item.node_id}`);
    this.active = next;
    // A turn being stopped: what comes next is presented after its settle, with a turn of its own.
    if (this.stoppingTurn) return;
    const resumed = this.resumedRun;
    if (resumed && statuses.has(resumed) && !statuses.get(resumed).run.paused) this.resumedRun = null;
    if (!next) return;
    if (next.type === 'interaction' && next.item.status !== 'pending') return;
    // Resumed, or gone on after its review: the model continues the same request.
    const again = resumed === next.runId || this.wentOn.has(next.runId);
    const run = statuses.get(next.runId)?.run;
    const content = next.type === 'interaction' ? stepMessage(next.item, run?.workflow_name) : checkpointMessage(next.item, next.run);
    if (again || (this.presentedSteps().get(next.id) ?? 0) === 0) {
      // After a resume the model continues the same request: presented again, once.
      this.sendStep(next, again ? `${this.resumedText(next)}\n\n${content}` : content, this.remindersOf(next.id));
      return;
    }
    if (this.presentedHere.has(next.id) || this.recovered.has(next.id)) return;
    // Presented by an earlier Pi on this session: looked at once. A turn that carried it and
    // ended without its submission gets what its settle would have given; a turn Pi did not
    // finish (it died or quit mid-turn) is given again, once, without using up a reminder.
    this.recovered.add(next.id);
    const seen = this.branchIndex().get(`step:${next.id}`);
    if (!seen || !run) return;
    if (seen.completed) {
      await this.afterTurn(next, statuses.get(next.runId));
    } else {
      this.sendStep(next, `Pi stopped before the turn that carried this workflow step ended; the step is still waiting.\n\n${content}`, seen.reminder);
    }
  }

  /** What a request presented again after a resume, or after its run's review, says first. */
  resumedText(next) {
    if (!this.wentOn.delete(next.runId)) return 'The workflow was resumed.';
    const last = next.type === 'interaction' ? next.item.last_submission : null;
    const rejected = last?.state === 'rejected' ? ` The submission kept during the review was rejected: ${last.error}. Fix it and submit again.` : '';
    return `The workflow run went on after its review.${rejected}`;
  }

  /**
   * Why the interaction `id` of run `status`, still open, is no longer this session's to
   * answer: its run was detached, so the Pi the host starts (its bridge) answers it. Null when
   * it is still this session's (or closed: `closedWithout` says why). A bridge overrides it.
   */
  handedAway(status, id) {
    if (status.run.execution_mode !== 'detached' || isFinal(status.run.status)) return null;
    const open = status.interactions.some((i) => i.interaction_id === id && (i.status === 'pending' || i.status === 'validating'));
    return open ? 'the run was detached: the Pi the host starts answers its steps now' : null;
  }

  /**
   * One card, starting no turn, for each stop for review of a run of the session: why, and what
   * a person does (`reviewCardText`). A run seen in review that went on has its request
   * presented again, once (as after a resume), with the verdict on a kept submission that was
   * rejected meanwhile. A stop for review is known by its run and the claim
   * generation of the child that stopped it (each retry activates a new one), so a Pi restart
   * finds the card in the branch and shows it no second time, and a run that stops again after
   * a retry gets a card again.
   */
  reportReviews(statuses) {
    // Ended (no longer listed): nothing of theirs is presented again.
    for (const id of this.wentOn) if (!statuses.has(id)) this.wentOn.delete(id);
    let branch = null;
    for (const status of statuses.values()) {
      if (status.run.status !== 'review' && this.reviewRuns.delete(status.run.run_id)) {
        // A person let it go on: its request is presented again, once, saying so.
        this.wentOn.add(status.run.run_id);
      }
      if (status.run.status !== 'review' || this.closed) continue;
      this.reviewRuns.add(status.run.run_id);
      const reviewKey = `${status.run.run_id}:${status.claim?.generation ?? 0}`;
      if (this.reviewCards.has(reviewKey)) continue;
      branch ??= new Set(
        this.entries()
          .filter((e) => e.type === 'custom_message' && e.customType === MESSAGE && e.details?.kind === 'review')
          .map((e) => e.details.reviewKey),
      );
      if (branch.has(reviewKey)) continue;
      this.reviewCards.add(reviewKey);
      const reason = status.run.review_reason ?? null;
      this.pi.sendMessage(
        {
          customType: MESSAGE,
          content: reviewCardText(status),
          display: true,
          details: { kind: 'review', runId: status.run.run_id, reviewKey, reason },
        },
        { triggerTurn: false },
      );
      try {
        this.ctx.ui.notify(`workflow ${status.run.workflow_name} stopped for review (run ${status.run.run_id}): ${reason ?? 'no reason given'}`, 'warning');
      } catch {
        // no UI (print mode)
      }
    }
  }

  /**
   * Turns follow the run: when the request the running turn carries is closed without its
   * submission (cancelled, timed out, its run ended), handed to a bridge (its run was
   * detached) or its run stopped for review, the turn is stopped and the session told
   * why, in one message that starts no turn (for a review, its review card). Its aborted settle pauses nothing: the request is
   * no longer pending.
   */
  async stopClosedTurn(statuses) {
    if (this.ctx.isIdle()) return;
    for (const key of this.carrying) {
      if (!key.startsWith('step:')) continue;
      const id = key.slice('step:'.length);
      const presented = this.presentedHere.get(id);
      if (!presented || this.stoppedTurns.has(id)) continue;
      const status = statuses.get(presented.runId) ?? (await this.call('run.status', (c) => c.runStatus(presented.runId)));
      // A run stopped for review: its review card (`reportReviews`) is the one message.
      const review = status.run.status === 'review' ? `its run stopped for review (${status.run.review_reason ?? 'no reason given'})` : null;
      const why = closedWithout(status, id) ?? this.handedAway(status, id) ?? review;
      if (!why || this.closed || this.ctx.isIdle()) continue;
      this.stoppedTurns.add(id);
      this.stoppingTurn = true;
      const what = presented.type === 'checkpoint' ? 'checkpoint' : 'step';
      // A run that ended says so in its own card (its terminal message): that is the one message.
      if (!isFinal(status.run.status) && !review) this.pi.sendMessage(
        {
          customType: MESSAGE,
          content: `Stop working on workflow ${what} ${presented.node} (run ${presented.runId}): ${why}. Do not submit it.`,
          display: true,
          details: { kind: 'turn_stopped', runId: presented.runId, key: id, reason: why },
        },
        { triggerTurn: false },
      );
      this.ctx.abort();
      return;
    }
  }

  /**
   * Why the interaction `id` presented in this session no longer takes a submission ("it timed
   * out", "it was cancelled", "the run ended: cancelled", "it was already accepted"), or null
   * when that is not known (not one of this session's, or still open).
   */
  async closedReason(id) {
    let runId = this.presentedHere.get(id)?.runId;
    if (!runId) {
      for (const e of this.entries()) if (e.type === 'custom_message' && e.customType === STEP && e.details?.key === id) runId = e.details.runId;
    }
    if (!runId) return null;
    const status = await this.call('run.status', (c) => c.runStatus(runId));
    if (status.interactions.some((i) => i.interaction_id === id && i.status === 'settled')) return 'it was already accepted';
    return closedWithout(status, id);
  }

  /** Presents a request to the model with a turn; `reminder`: the reminders it has had, this one included. */
  sendStep(active, content, reminder) {
    if (this.closed) return;
    const details = {
      key: active.id,
      runId: active.runId,
      kind: active.kind,
      node: active.item.node_id,
      attemptId: active.item.attempt_id ?? null,
      reminder,
    };
    const count = (this.presentedSteps().get(active.id) ?? 0) + 1;
    this.outbox.set(`step:${active.id}`, { type: 'step', id: active.id, count, reminder, settles: this.settles });
    this.presentedHere.set(active.id, { type: active.type, runId: active.runId, node: active.item.node_id });
    // Presented again (its run went on after a review): its turn may be stopped again.
    this.stoppedTurns.delete(active.id);
    this.pi.sendMessage(
      { customType: STEP, content, display: true, details },
      { triggerTurn: true, deliverAs: this.ctx.isIdle() ? 'followUp' : 'steer' },
    );
  }

  /** The model's turn settled (Pi's agent_settled): handled in the refresh loop, then a refresh. */
  onSettled(aborted) {
    if (this.closed) return;
    // Known at once: what Pi dropped in this turn comes back without a turn after Escape.
    this.lastSettleAborted = aborted;
    const carried = this.carrying;
    this.carrying = new Set();
    this.stoppingTurn = false;
    // Counted once Pi has finished emitting the settle: a message sent while it emitted it
    // starts a run of its own by then (Pi is not idle), so it is not taken for dropped. Pi
    // quitting aborts the turn and closes the session before then (session_shutdown follows the
    // abort at once): that settle is not an Escape, and what waited in Pi's queue is not taken
    // for dropped here; it comes back, with its turn, at the next start.
    setImmediate(() => {
      if (this.closed) return;
      this.settles += 1;
      for (const key of carried) if (key.startsWith('message:')) this.presentedTurns.add(key.slice('message:'.length));
      this.settleQueue.push({ aborted, carried });
      this.kick();
    });
  }

  /**
   * After a settled turn, for the active request only when the turn carried it (or, ending,
   * dropped it from Pi's queue): the previous request's turn is never counted against the
   * next. Aborted (Escape): its run pauses. Dropped: presented again. Else the turn ended
   * without its submission (`afterTurn`).
   */
  async settled({ aborted, carried }) {
    if (this.closed) return;
    const dropped = new Map(this.pruneOutbox().filter((d) => d.type === 'step').map((d) => [d.id, d]));
    const active = this.active;
    if (!active) return;
    const wasCarried = carried.has(`step:${active.id}`);
    const wasDropped = dropped.get(active.id);
    if (!wasCarried && !wasDropped) return;
    const status = await this.call('run.status', (c) => c.runStatus(active.runId));
    // Stopped for review: its card says what a person does; nothing to pause or remind.
    if (status.run.paused || isFinal(status.run.status) || status.run.status === 'review') return;
    // Detached meanwhile: its bridge answers the request; this session neither pauses the run
    // nor reminds its model.
    if (active.type === 'interaction' && this.handedAway(status, active.id)) return;
    const stillPending =
      active.type === 'interaction'
        ? status.interactions.some((i) => i.interaction_id === active.id && i.status === 'pending')
        : status.decisions.some((d) => d.decision_id === active.id && d.status === 'pending');
    if (!stillPending) return;
    if (aborted) {
      await this.call('run.pause', (c) => c.pauseRun(active.runId));
      this.ctx.ui.notify(
        `workflow paused at ${active.item.node_id} (run ${active.runId}); /workflow resume continues the same request`,
        'warning',
      );
      return;
    }
    if (!wasCarried) {
      const content =
        active.type === 'interaction'
          ? stepMessage(active.item, status.run.workflow_name, wasDropped.reminder)
          : checkpointMessage(active.item, status.run);
      this.sendStep(active, content, wasDropped.reminder);
      return;
    }
    await this.afterTurn(active, status);
  }

  /**
   * A turn carried the active request and ended without its submission: an `assistantMessage`
   * step takes the visible reply; else a reminder, at most MAX_REMINDERS, then the attempt fails
   * (saying why the last submission was rejected, when there was one). `status`: its run's.
   */
  async afterTurn(active, status) {
    const { run } = status;
    if (active.type === 'interaction' && active.kind === 'assistant_message') {
      const text = this.lastAssistantText();
      if (text !== null) {
        await this.call('interaction.submit', (c) => c.submitInteraction(active.item, text));
        return;
      }
    }
    const reminder = this.remindersOf(active.id) + 1;
    if (reminder <= MAX_REMINDERS) {
      const content =
        active.type === 'interaction'
          ? stepMessage(active.item, run.workflow_name, reminder)
          : checkpointMessage(active.item, run, reminder);
      this.sendStep(active, content, reminder);
    } else if (active.type === 'interaction') {
      const last = status.interactions.find((i) => i.interaction_id === active.id)?.last_submission;
      const refused = this.submitRefusals.get(active.id);
      // A refusal is kept only until the host takes a submission: one kept is the latest.
      const reason =
        refused !== undefined
          ? `no ${last ? 'accepted ' : ''}submission after ${MAX_REMINDERS} reminders; the last was refused: ${refused}`
          : last?.state === 'rejected'
            ? `no accepted submission after ${MAX_REMINDERS} reminders; the last was rejected: ${last.error}`
            : `no submission after ${MAX_REMINDERS} reminders`;
      const { routed_to: next } = await this.call('interaction.fail', (c) => c.failInteraction(active.item, reason));
      this.ctx.ui.notify(
        `workflow step ${active.item.node_id} (run ${active.runId}) failed: ${reason}${next ? `; the run goes on at ${next}` : ''}`,
        'error',
      );
    }
  }

  lastAssistantText() {
    const entries = this.entries();
    for (let i = entries.length - 1; i >= 0; i--) {
      const e = entries[i];
      if (e.type === 'custom_message' && e.customType === STEP) return null;
      if (e.type === 'message' && e.message?.role === 'assistant') {
        const text = (e.message.content ?? [])
          .filter((b) => b.type === 'text')
          .map((b) => b.text)
          .join('');
        if (text.trim() !== '') return text;
      }
    }
    return null;
  }

  /**
   * The verdict on a submission whose tool call the person stopped (Escape) before the
   * validation judged it: told to the person, and to the model as a card that starts no turn.
   */
  /** Keeps why a submission for `interactionId` was refused before the host took it. */
  noteSubmitRefusal(interactionId, why) {
    this.submitRefusals.set(interactionId, why);
    if (this.submitRefusals.size > 64) this.submitRefusals.delete(this.submitRefusals.keys().next().value);
  }

  reportVerdictLater(interaction, submissionId, verdictCall) {
    const where = `step ${interaction.node_id} (run ${interaction.run_id})`;
    verdictCall.then(
      async (verdict) => {
        if (this.closed) return;
        const accepted = verdict.state === 'accepted';
        // Rejected after its run was detached: the bridge answers the step from here.
        const away = accepted
          ? null
          : await this.call('run.status', (c) => c.runStatus(interaction.run_id)).then(
              (status) => this.handedAway(status, interaction.interaction_id),
              () => null,
            );
        if (this.closed) return;
        const content = accepted
          ? `The workflow accepted the submission for ${where}.`
          : away
            ? `The workflow rejected the submission for ${where}: ${verdict.error}. The step is no longer this session's (${away}): do not submit it again.`
            : `The workflow rejected the submission for ${where}: ${verdict.error}. Fix it and submit again (interactionId ${interaction.interaction_id}).`;
        const details = { kind: 'verdict', runId: interaction.run_id, interactionId: interaction.interaction_id, submissionId, state: verdict.state };
        this.pi.sendMessage({ customType: MESSAGE, content, display: true, details }, { triggerTurn: false });
        this.ctx.ui.notify(`workflow ${where}: submission ${verdict.state}${accepted ? '' : `: ${verdict.error}`}`, accepted ? 'info' : 'warning');
        this.kick();
      },
      (e) => {
        // Stopped for review: the session's review card says so (the submission is kept).
        if (e?.code === 'run_in_review') return;
        if (!this.closed) this.ctx.ui.notify(`workflow ${where}: the verdict on its submission is not known (${e?.message ?? e}); /workflow status shows it`, 'warning');
      },
    );
  }

  /** A run was resumed: the next refresh presents its active request again (the model continues the same request), once. */
  resumed(runId) {
    this.resumedRun = runId;
    this.kick();
  }

  // ---------------------------------------------------------------------------------------
  // Protected human decisions: dialogs, never a model turn

  offerDecisions(statuses) {
    const pending = new Map();
    for (const s of statuses.values()) {
      for (const d of s.decisions) {
        if (d.kind === 'human_decision' && d.status === 'pending') pending.set(d.decision_id, { d, run: s.run });
      }
    }
    // A dialog whose decision was answered elsewhere, expired (or had its onTimeout response
    // applied) or was cancelled closes now: each of those is an event of the session's
    // subscription, which schedules this refresh.
    for (const [id, dialog] of this.dialogs) {
      if (!pending.has(id)) {
        this.dialogs.delete(id);
        // Answered here: the answer this refresh sees is the person's own, nothing to report.
        if (dialog.answered) continue;
        dialog.controller.abort();
        this.reportClosed(id, dialog, statuses).catch(() => {});
      }
    }
    for (const [id, { d, run }] of pending) {
      if (this.dialogs.has(id) || this.closed) continue;
      const controller = new AbortController();
      const dialog = { controller, node: d.node_id, runId: run.run_id };
      this.dialogs.set(id, dialog);
      this.askPerson(d, run, controller.signal)
        .catch((e) => {
          dialog.answered = false;
          if (this.closed || controller.signal.aborted) return;
          this.ctx.ui.notify(`workflow decision: ${e?.message ?? e}`, 'error');
          // Still pending (the host refused the answer, or did not take it): offered again.
          this.kick();
        })
        .finally(() => {
          // A dialog dismissed unanswered (or whose answer failed) is offered again at the next
          // refresh. An answered one stays until a refresh sees the decision answered: a refresh
          // whose statuses were read before the answer was taken still sees it pending, and
          // must not offer it again.
          if (this.dialogs.get(id) === dialog && !dialog.answered) this.dialogs.delete(id);
        });
    }
  }

  /**
   * Tells the person why a decision's dialog closed: answered (elsewhere, or by the workflow's
   * onTimeout response at its deadline: `provenance: "timeout"`), cancelled, or gone.
   */
  async reportClosed(id, dialog, statuses) {
    const find = (st) => st?.decisions.find((x) => x.decision_id === id);
    // A run that ended since is not among the live runs' statuses: ask for it.
    const decision = find(statuses.get(dialog.runId)) ?? find(await this.call('run.status', (c) => c.runStatus(dialog.runId)));
    let why = decision?.status ?? 'gone';
    if (decision?.status === 'answered' && decision.answer?.provenance === 'timeout') {
      const picked = readRequest(decision.request).choices.find((c) => c.id === decision.answer.choice);
      why = `nobody answered in time, so the workflow's onTimeout response was applied (${picked?.label ?? decision.answer.choice})`;
    } else if (decision?.status === 'answered') {
      why = `answered${decision.answered_by ? ` by the ${decision.answered_by}` : ''}`;
    }
    this.ctx.ui.notify(`workflow decision ${dialog.node} (run ${dialog.runId}) was closed: ${why}`, 'info');
  }

  /**
   * Asks the person a human decision: its request (title, summary, the presentation's blocks)
   * and choices in a scrollable dialog in the TUI, or as the select's title in RPC mode (where
   * `custom()` has no component); then the picked choice's text, if it takes one.
   */
  async askPerson(decision, run, signal) {
    const req = readRequest(decision.request);
    const lines = decisionLines(decision.request, run.workflow_name);
    let choice = null;
    // The text the picked choice collects (none for a choice without a text input).
    let input = null;
    if (req.choices.length > 0) {
      const labels = req.choices.map((c) => (c.description ? `${c.label} — ${c.description}` : c.label));
      let index;
      if (this.ctx.mode === 'tui') {
        index = await this.ctx.ui.custom(
          (tui, theme, keybindings, done) => {
            const close = () => done(undefined);
            signal.addEventListener('abort', close, { once: true });
            if (signal.aborted) queueMicrotask(close);
            return new DecisionComponent({
              lines,
              labels,
              tui,
              theme,
              keybindings,
              done: (value) => {
                signal.removeEventListener('abort', close);
                done(value);
              },
            });
          },
          { blocked: { kind: 'question', message: lines[0].text } },
        );
      } else {
        const picked = await this.ctx.ui.select(decisionText(decision.request, run.workflow_name), labels, { signal });
        index = picked === undefined ? undefined : labels.indexOf(picked);
      }
      if (index === undefined || signal.aborted) return; // dismissed or closed: offered again at the next refresh
      choice = req.choices[index]?.id ?? null;
      input = choice === null ? null : choiceInputs(decision.request).get(choice) ?? null;
    } else {
      input = { label: decisionText(decision.request, run.workflow_name), placeholder: '', minLength: null, maxLength: null, required: false, perChoice: false };
    }
    let text = null;
    if (input) {
      // Asked again, with the rule, until the text fits: an answer the workflow refuses is never sent.
      let problem = null;
      for (;;) {
        const rule = textRule(input);
        const label = [input.label, rule ? `(${rule})` : null, problem].filter(Boolean).join(' ');
        const entered = await this.ctx.ui.input(label, input.placeholder, { signal });
        if (entered === undefined) return;
        problem = textProblem(entered, input);
        if (problem === null) {
          text = entered;
          break;
        }
        if (signal.aborted) return;
        this.ctx.ui.notify(`workflow decision: ${problem}`, 'warning');
      }
    }
    if (signal.aborted) return;
    // The dialog stays in `dialogs` once answered here (see offerDecisions): a refresh while the
    // answer travels, or one that read the statuses before it was taken, must neither offer the
    // decision again nor report it closed once it sees it answered.
    const dialog = this.dialogs.get(decision.decision_id);
    if (dialog?.controller.signal === signal) dialog.answered = true;
    await this.call('decision.answer', (c) =>
      c.answerHumanDecision(run.run_id, decision.decision_id, { choice, text }),
    );
    this.ctx.ui.notify(`decision recorded for ${req.node ?? decision.node_id} (run ${run.run_id})`, 'info');
  }

  // ---------------------------------------------------------------------------------------
  // Widget and footer

  async updateWidget(runs, statuses) {
    const live = runs.filter((r) => !isFinal(r.status));
    const pick = live.find((r) => r.run_id === this.widgetRun) ?? live[0];
    if (!pick) {
      this.ctx.ui.setWidget(KEY, undefined);
      this.ctx.ui.setStatus(KEY, undefined);
      return;
    }
    const status = statuses.get(pick.run_id);
    if (!status) return;
    const { lines, status: footer } = widgetOf(status, this.progress.get(pick.run_id) ?? null);
    this.ctx.ui.setWidget(KEY, lines);
    this.ctx.ui.setStatus(KEY, footer);
  }
}
