// One Pi session's link to the piw host: its connection and subscription, the delivery of its
// workflow messages, the presentation of its one active interactive request (with reminders),
// its protected decisions as dialogs, and its widget. Runs live in the host: nothing here
// cancels, fails or parks a run when Pi goes away.
import { Client, isFinal } from '../index.js';
import {
  MESSAGE,
  STEP,
  checkpointMessage,
  messageText,
  presentationOf,
  readRequest,
  stepMessage,
  widgetOf,
} from './format.js';

/** How long a call to the host may take before a tool call fails (a hung host). */
export const CALL_TIMEOUT_MS = Number(process.env.PIW_PI_CALL_TIMEOUT_MS) || 10_000;
/** How long `submit` waits for the workflow's `validate` to judge a submission. */
export const VALIDATION_WAIT_MS = Number(process.env.PIW_PI_VALIDATION_WAIT_MS) || 90_000;
/** Reminders after the model's turn settled without a submission. */
export const MAX_REMINDERS = 2;
const KEY = 'piw';

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
    // Sent in this process but maybe not yet in the branch (a steer waits for the turn).
    this.sentSteps = new Map();
    this.sentMessages = new Set();
    /** Connections given up, with why (for the calls still waiting on them). */
    this.dropped = new WeakMap();
    this.pendingSettle = Promise.resolve();
  }

  // ---------------------------------------------------------------------------------------
  // Connection

  /** The connected client (started on demand), subscribed to this session's events. */
  async connection() {
    if (this.closed) throw new HostCallError('the workflow session is closed', 'client_closed');
    if (this.client?.isOpen) return this.client;
    if (!this.connecting) {
      this.connecting = (async () => {
        const client = await Client.connect();
        if (this.closed) {
          await client.close().catch(() => {});
          throw new HostCallError('the workflow session is closed', 'client_closed');
        }
        const sub = await client.subscribe({ sessionId: this.sessionId });
        this.client = client;
        this.subscription = sub;
        this.follow(sub, client);
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

  /** Follows the session's events until the subscription ends; each one schedules a refresh. */
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
      // The connection ended (a host that stopped or died): the next call reconnects.
    }
    if (this.client === client) this.dropClient('the piw host closed the connection');
  }

  /** Idempotent: ends the subscription, closes the dialogs and the connection. */
  async close() {
    if (this.closed) return;
    this.closed = true;
    for (const dialog of this.dialogs.values()) dialog.controller.abort();
    this.dialogs.clear();
    const client = this.client;
    this.client = null;
    await this.subscription?.close().catch(() => {});
    await client?.close().catch(() => {});
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

  /** Step presentations in this session: key -> how many times (first + reminders). */
  presentedSteps() {
    const seen = new Map();
    for (const e of this.entries()) {
      if (e.type === 'custom_message' && e.customType === STEP && e.details?.key) {
        seen.set(e.details.key, (seen.get(e.details.key) ?? 0) + 1);
      }
    }
    for (const [key, count] of this.sentSteps) seen.set(key, Math.max(count, seen.get(key) ?? 0));
    return seen;
  }

  deliveredMessages() {
    const ids = new Set(this.sentMessages);
    for (const e of this.entries()) {
      if (e.type === 'custom_message' && e.customType === MESSAGE && e.details?.messageId) ids.add(e.details.messageId);
    }
    return ids;
  }

  // ---------------------------------------------------------------------------------------
  // Refresh: messages, the active request, decisions, widget

  /** Schedules a refresh (coalesced; never awaited by a Pi event handler). */
  kick() {
    if (this.closed) return;
    if (this.refreshing) {
      this.refreshAgain = true;
      return;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        try {
          await this.refresh();
        } catch (e) {
          if (!this.closed) console.error(`piw: refresh failed: ${e?.message ?? e}`);
        }
      } while (this.refreshAgain && !this.closed);
    })().finally(() => {
      this.refreshing = null;
    });
  }

  async refresh() {
    await this.deliverMessages();
    const runs = await this.call('run.list', (c) => c.listRuns({ sessionId: this.sessionId, limit: 50 }));
    const statuses = new Map();
    for (const run of runs) {
      if (!isFinal(run.status)) statuses.set(run.run_id, await this.call('run.status', (c) => c.runStatus(run.run_id)));
    }
    await this.presentActive(statuses);
    this.offerDecisions(statuses);
    await this.updateWidget(runs, statuses);
  }

  async deliverMessages() {
    for (;;) {
      const messages = await this.call('message.claim', (c) => c.claimMessages(this.sessionId, { limit: 20, claimant: `pi:${this.sessionId}` }));
      if (messages.length === 0) return;
      const delivered = this.deliveredMessages();
      for (const m of messages) {
        if (m.origin_session !== this.sessionId) continue;
        if (!delivered.has(m.message_id)) this.deliver(m);
        // Fault injection for the tests (as the host's PIW_FAULT): die between adding a
        // message to the session and acknowledging it.
        if (process.env.PIW_PI_FAULT === 'kill_before_ack') process.kill(process.pid, 'SIGKILL');
        await this.call('message.ack', (c) => c.ackMessage(m.message_id));
      }
    }
  }

  deliver(m) {
    const text = messageText(m);
    const presentation = presentationOf(m);
    const details = { messageId: m.message_id, runId: m.run_id, kind: m.kind, content: m.content };
    this.sentMessages.add(m.message_id);
    if (presentation) {
      this.pi.sendMessage(
        { customType: MESSAGE, content: `${text}\n\n${presentation}`, display: true, details },
        { triggerTurn: true, deliverAs: this.ctx.isIdle() ? 'followUp' : 'steer' },
      );
    } else {
      this.pi.sendMessage({ customType: MESSAGE, content: text, display: true, details }, { triggerTurn: false });
    }
    if (m.kind === 'terminal') {
      const status = m.content?.status;
      const level = status === 'completed' ? 'info' : status === 'cancelled' ? 'warning' : 'error';
      this.ctx.ui.notify(`workflow ${m.content?.workflow ?? ''} ${status ?? 'ended'} (run ${m.run_id})`, level);
      this.progress.delete(m.run_id);
    }
  }

  /** The session's one active request: the first pending interaction, else the first pending checkpoint. */
  async presentActive(statuses) {
    const interactions = await this.call('interaction.list', (c) => c.listInteractions(this.sessionId));
    const pausedRuns = new Set([...statuses.values()].filter((s) => s.run.paused).map((s) => s.run.run_id));
    let next = null;
    const first = interactions.find((i) => i.origin_session === this.sessionId);
    if (first) {
      next = { type: 'interaction', id: first.interaction_id, runId: first.run_id, kind: first.kind, item: first };
    } else {
      for (const s of statuses.values()) {
        const d = s.decisions.find((x) => x.status === 'pending' && x.kind === 'checkpoint');
        if (d) {
          next = { type: 'checkpoint', id: d.decision_id, runId: s.run.run_id, kind: 'checkpoint', item: d, run: s.run };
          break;
        }
      }
    }
    this.active = next;
    if (!next || pausedRuns.has(next.runId)) return;
    if (next.type === 'interaction' && next.item.status !== 'pending') return;
    if ((this.presentedSteps().get(next.id) ?? 0) > 0) return;
    const workflow = statuses.get(next.runId)?.run.workflow_name;
    const content = next.type === 'interaction' ? stepMessage(next.item, workflow) : checkpointMessage(next.item, next.run);
    this.sendStep(next, content, 0);
  }

  sendStep(active, content, reminder) {
    const details = {
      key: active.id,
      runId: active.runId,
      kind: active.kind,
      node: active.item.node_id,
      attemptId: active.item.attempt_id ?? null,
      reminder,
    };
    this.sentSteps.set(active.id, Math.max(reminder + 1, (this.sentSteps.get(active.id) ?? 0) + 1));
    this.pi.sendMessage(
      { customType: STEP, content, display: true, details },
      { triggerTurn: true, deliverAs: this.ctx.isIdle() ? 'followUp' : 'steer' },
    );
  }

  /**
   * The model's turn settled. Aborted (Escape) while a request is active: pause its run. Else a
   * presented request that is still pending gets a reminder, at most MAX_REMINDERS.
   */
  onSettled(aborted) {
    this.pendingSettle = this.pendingSettle.then(() => this.settled(aborted)).catch((e) => {
      if (!this.closed) console.error(`piw: after the turn: ${e?.message ?? e}`);
    });
  }

  async settled(aborted) {
    if (this.closed) return;
    const active = this.active;
    if (!active || (this.presentedSteps().get(active.id) ?? 0) === 0) return;
    const status = await this.call('run.status', (c) => c.runStatus(active.runId));
    if (status.run.paused || isFinal(status.run.status)) return;
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
      this.kick();
      return;
    }
    if (active.type === 'interaction' && active.kind === 'assistant_message') {
      const text = this.lastAssistantText();
      if (text !== null) {
        await this.call('interaction.submit', (c) => c.submitInteraction(active.item, text));
        return;
      }
    }
    const shown = this.presentedSteps().get(active.id) ?? 0;
    if (shown <= MAX_REMINDERS) {
      const content =
        active.type === 'interaction'
          ? stepMessage(active.item, status.run.workflow_name, shown)
          : checkpointMessage(active.item, status.run);
      this.sendStep(active, content, shown);
    } else if (active.type === 'interaction') {
      const reason = `no submission after ${MAX_REMINDERS} reminders`;
      const { routed_to: next } = await this.call('interaction.fail', (c) => c.failInteraction(active.item, reason));
      this.ctx.ui.notify(
        `workflow step ${active.item.node_id} (run ${active.runId}) failed: ${reason}${next ? `; the run goes on at ${next}` : ''}`,
        'error',
      );
      this.kick();
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

  /** Re-presents the active request after a resume (the model continues the same request). */
  async resumed(runId) {
    const statuses = new Map([[runId, await this.call('run.status', (c) => c.runStatus(runId))]]);
    await this.presentActive(statuses);
    const active = this.active;
    if (active && active.runId === runId) {
      const s = statuses.get(runId);
      const content =
        active.type === 'interaction' ? stepMessage(active.item, s.run.workflow_name) : checkpointMessage(active.item, s.run);
      this.sendStep(active, `The workflow was resumed.\n\n${content}`, 0);
    }
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
        dialog.controller.abort();
        this.dialogs.delete(id);
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
          if (!this.closed && !controller.signal.aborted) this.ctx.ui.notify(`workflow decision: ${e?.message ?? e}`, 'error');
        })
        .finally(() => {
          if (this.dialogs.get(id) === dialog) this.dialogs.delete(id);
        });
    }
  }

  /** Tells the person why a decision's dialog closed (answered elsewhere, expired, cancelled). */
  async reportClosed(id, dialog, statuses) {
    const find = (st) => st?.decisions.find((x) => x.decision_id === id);
    // A run that ended since is not among the live runs' statuses: ask for it.
    const decision = find(statuses.get(dialog.runId)) ?? find(await this.call('run.status', (c) => c.runStatus(dialog.runId)));
    this.ctx.ui.notify(`workflow decision ${dialog.node} (run ${dialog.runId}) was closed: ${decision?.status ?? 'gone'}`, 'info');
  }

  async askPerson(decision, run, signal) {
    const req = readRequest(decision.request);
    const title = [
      `Workflow ${req.workflow ?? run.workflow_name}: ${req.question ?? 'a decision'}`,
      req.details,
      req.raw !== null ? JSON.stringify(req.raw) : null,
    ]
      .filter(Boolean)
      .join('\n');
    let choice = null;
    if (req.choices.length > 0) {
      const labels = req.choices.map((c) => (c.description ? `${c.label} — ${c.description}` : c.label));
      const picked = await this.ctx.ui.select(title, labels, { signal });
      if (picked === undefined) return; // dismissed or closed: offered again at the next start
      choice = req.choices[labels.indexOf(picked)]?.id ?? null;
    }
    let text = null;
    if (req.textInput || req.choices.length === 0) {
      const label = req.textInput?.label ?? title;
      const entered = await this.ctx.ui.input(label, req.textInput?.placeholder ?? '', { signal });
      if (entered === undefined) return;
      text = entered;
      if (req.textInput?.required && text.trim() === '') return;
    }
    if (signal.aborted) return;
    // Answered here: its dialog is done (the refresh this answer causes must not report it closed).
    if (this.dialogs.get(decision.decision_id)?.controller.signal === signal) this.dialogs.delete(decision.decision_id);
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
