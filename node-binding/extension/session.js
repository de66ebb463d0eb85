// One Pi session's link to the piw host, composed of one part per concern: the connection and
// its bounded calls (./host-connection.js), following the session's runs and the host
// (./run-following.js), what the session already holds (./session-branch.js), its one active
// request (./step-presentation.js) and the model's turns on it (./turns.js), its workflow
// messages (./message-delivery.js), protected decisions as dialogs (./decision-dialogs.js), and
// review, parked-checkpoint and run-end cards (./run-cards.js). Each part is a mixin over the
// session (they call one another through `this`); this file holds what ties them together: the
// one refresh loop and closing. Runs live in the host: nothing here cancels, fails or parks a
// run when Pi goes away. The bridge of detached runs subclasses it (./bridge.js).
import { isFinal } from '../index.js';
import { barrier } from './barrier.js';
import { DecisionDialogs } from './decision-dialogs.js';
import { HostConnection } from './host-connection.js';
import { MessageDelivery } from './message-delivery.js';
import { RunCards } from './run-cards.js';
import { RunFollowing } from './run-following.js';
import { SessionBranch } from './session-branch.js';
import { StepPresentation } from './step-presentation.js';
import { Turns } from './turns.js';

/** The most unfinished runs of the session a refresh follows (each costs a `run.status` call). */
const UNFINISHED_RUNS = 1_000;

/** What every part reads: the extension API, the session's context and id, and whether it closed. */
class SessionCore {
  /** @param pi the ExtensionAPI; @param ctx the session_start context */
  constructor(pi, ctx) {
    this.pi = pi;
    this.ctx = ctx;
    this.sessionId = ctx.sessionManager.getSessionId();
    this.cwd = ctx.cwd;
    this.closed = false;
  }
}

/** The parts, each over the ones before it. */
const PARTS = [HostConnection, RunFollowing, SessionBranch, StepPresentation, Turns, MessageDelivery, DecisionDialogs, RunCards];

export class WorkflowSession extends PARTS.reduce((base, part) => part(base), SessionCore) {
  constructor(pi, ctx) {
    super(pi, ctx);
    this.refreshing = null;
    this.refreshAgain = false;
    /** The last refresh failure reported to the person (reported once, until a refresh succeeds). */
    this.refreshFailure = null;
  }

  /** The events this link follows: its session's. */
  subscriptionFilter() {
    return { sessionId: this.sessionId };
  }

  /**
   * Idempotent: closes the dialogs and the connection (which ends the subscription), bounded
   * by CLOSE_TIMEOUT_MS: Pi's quit never waits longer on a host that does not answer.
   */
  async close() {
    if (this.closed) return;
    this.closed = true;
    await barrier('closing');
    this.stopReconnecting();
    this.closeDialogs();
    await this.closeConnection();
  }

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
}
