// Following the session's runs: the subscription's events (each schedules a refresh; progress
// messages feed the widget), following the host again once the subscription ended (a host that
// stopped, restarted or died), and the widget and footer that show a live run, or that the
// host is gone.
import { isFinal } from '../index.js';
import { widgetOf } from './format.js';

/**
 * Waits between attempts to follow a host again after the session's subscription ended (a host
 * that stopped, restarted or died): quick at first, then every 30 s, for about five minutes.
 * While the session has live runs these attempts start a host (its runs progress only in
 * one); otherwise they only connect to one that runs, and after the last one the next call to
 * the host starts one.
 */
export const RECONNECT_DELAYS_MS = [500, 1_000, 2_000, 4_000, 8_000, 15_000, ...Array(9).fill(30_000)];

/** The key of the session's widget and footer status. */
const KEY = 'piw';

/** The session's part that follows its runs and the host: `connected`, `follow`, `scheduleReconnect`, `updateWidget`. */
export const RunFollowing = (Base) =>
  class RunFollowing extends Base {
    constructor(...args) {
      super(...args);
      /** Run id -> its latest progress message (for the widget). */
      this.progress = new Map();
      /** The run the widget shows (the one with the latest event), while it has not ended. */
      this.widgetRun = null;
      /** The session's runs that had not ended at the last refresh (ids). */
      this.liveRuns = [];
      this.connectedBefore = false;
      this.reconnectTimer = null;
      this.reconnectAttempt = 0;
    }

    /**
     * A new connection: its subscription is followed. One made after an earlier one ended
     * schedules a refresh: what happened meanwhile (results, steps) is delivered.
     */
    connected(sub, client) {
      this.reconnectAttempt = 0;
      this.follow(sub, client);
      if (this.connectedBefore) this.kick();
      this.connectedBefore = true;
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

    /** Closing: no more attempts to follow the host. */
    stopReconnecting() {
      clearTimeout(this.reconnectTimer);
      this.reconnectTimer = null;
    }

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
  };
