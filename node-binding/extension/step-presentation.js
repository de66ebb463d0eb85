// Presenting the session's one active request to its model: the active interaction, else the
// first pending checkpoint of a run that is not paused; presented once (deduplicated against
// the session's branch and outbox), again after a resume or a review, and a turn a previous Pi
// did not finish given again once. Also why a request no longer takes a submission.
import { isFinal } from '../index.js';
import { barrier } from './barrier.js';
import { STEP, checkpointMessage, stepMessage } from './format.js';

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

/** The session's part that presents its one active request: `activeInteraction`, `presentActive`, `sendStep`, `handedAway`, `closedReason`. */
export const StepPresentation = (Base) =>
  class StepPresentation extends Base {
    constructor(...args) {
      super(...args);
      /** The request presented to the model: `{ type: 'interaction'|'checkpoint', id, runId, kind }`. */
      this.active = null;
      /** Requests presented by this process: key -> `{ type, runId, node }`. */
      this.presentedHere = new Map();
      /**
       * Steps presented before this process started, looked at once: a turn the previous Pi did
       * not finish (it died or quit mid-turn) is given again, once.
       */
      this.recovered = new Set();
      /** A run just resumed: its active request is presented again, once, by the next refresh. */
      this.resumedRun = null;
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

    /** A run was resumed: the next refresh presents its active request again (the model continues the same request), once. */
    resumed(runId) {
      this.resumedRun = runId;
      this.kick();
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
  };
