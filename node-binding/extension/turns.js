// The model's turns on the active request: what each turn carried (Pi's message_end), its
// settle (Escape pauses the run, a request Pi dropped is presented again), a reminder after a
// turn that carried the step without its submission (at most MAX_REMINDERS, then the attempt
// fails), a turn stopped when the workflow closed its request, and a verdict told later.
import { isFinal } from '../index.js';
import { MESSAGE, STEP, checkpointMessage, stepMessage } from './format.js';
import { closedWithout } from './step-presentation.js';

/** Reminders after the model's turn settled without a submission. */
export const MAX_REMINDERS = 2;

/** The session's part that follows the model's turns: `onMessageEnd`, `onSettled`, `settled`, `afterTurn`, `stopClosedTurn`, `reportVerdictLater`. */
export const Turns = (Base) =>
  class Turns extends Base {
    constructor(...args) {
      super(...args);
      /** agent_settled events seen, and those not handled yet: `{ aborted, carried }`. */
      this.settles = 0;
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
      /**
       * Requests whose turn was stopped because the workflow closed them (cancelled, timed out,
       * their run ended); while such a stop waits for its settle, nothing new is presented.
       */
      this.stoppedTurns = new Set();
      this.stoppingTurn = false;
      /** Whether the last settled turn was aborted (Escape): what was dropped then comes back without a turn. */
      this.lastSettleAborted = false;
      /** Interaction id -> why its last submission was refused before the host took it (`value_too_large`, a rejection). */
      this.submitRefusals = new Map();
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

    /** Keeps why a submission for `interactionId` was refused before the host took it. */
    noteSubmitRefusal(interactionId, why) {
      this.submitRefusals.set(interactionId, why);
      if (this.submitRefusals.size > 64) this.submitRefusals.delete(this.submitRefusals.keys().next().value);
    }

    /**
     * The verdict on a submission whose tool call the person stopped (Escape) before the
     * validation judged it: told to the person, and to the model as a card that starts no turn.
     */
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
  };
