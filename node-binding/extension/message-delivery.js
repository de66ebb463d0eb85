// Delivering the session's workflow messages (notices, a run's end with its presentation turn):
// claimed from the host as `pi:<session>`, added to the session once (deduplicated against its
// branch and outbox), and acknowledged only once the session's branch holds them and Pi keeps
// the session; nothing is added once Pi quits.
import { barrier } from './barrier.js';
import { MESSAGE, messageParts, presentationOf } from './format.js';

/** Workflow messages taken from the host per claim. */
const CLAIM_LIMIT = 20;

/** The session's part that delivers its workflow messages: `deliverMessages`, `deliver`. */
export const MessageDelivery = (Base) =>
  class MessageDelivery extends Base {
    constructor(...args) {
      super(...args);
      /** Messages delivered by this process: id -> the copies the branch holds once this one is in. */
      this.deliveredHere = new Map();
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
      if (m.kind === 'terminal') this.notifyRunEnd(m);
    }
  };
