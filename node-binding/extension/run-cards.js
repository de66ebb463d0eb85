// Cards that start no turn: a run of the session stopped for review (why, and the way out; its
// request presented again once a person lets it go on), a detached run parked at an ordinary
// checkpoint (where and how a person answers it), and the notice of a run's end. Each once,
// also across Pi restarts (found in the session's branch).
import { isFinal } from '../index.js';
import { MESSAGE, parkedCheckpointText, reviewCardText } from './format.js';

/** The session's part that sends its cards: `reportReviews`, `announceParkedCheckpoints`, `notifyRunEnd`. */
export const RunCards = (Base) =>
  class RunCards extends Base {
    constructor(...args) {
      super(...args);
      /** Review cards sent by this process (their `reviewKey`s), until the branch holds them. */
      this.reviewCards = new Set();
      /** Runs of the session seen in review, and those that went on since (presented again, once). */
      this.reviewRuns = new Set();
      this.wentOn = new Set();
      /** Checkpoints of detached runs whose card this process sent or found in the branch (decision ids). */
      this.announced = new Set();
      /** Runs' ends already notified (message ids). */
      this.notified = new Set();
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

    /** A run's end reached the session: the person is told once (its card is the message itself). */
    notifyRunEnd(m) {
      if (this.notified.has(m.message_id)) return;
      this.notified.add(m.message_id);
      const status = m.content?.status;
      const level = status === 'completed' ? 'info' : status === 'cancelled' ? 'warning' : 'error';
      this.ctx.ui.notify(`workflow ${m.content?.workflow ?? ''} ${status ?? 'ended'} (run ${m.run_id})`, level);
      this.progress.delete(m.run_id);
    }
  };
