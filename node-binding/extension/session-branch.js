// What the session already holds: its branch's entries of this extension (steps and workflow
// messages, how many copies, whether their turn ended) and what this process sent that is on
// its way there (the outbox). Every presentation and delivery is deduplicated against both,
// across Pi restarts; what Pi dropped from its queue is found here and sent again.
import { existsSync } from 'node:fs';

import { MESSAGE, STEP } from './format.js';

/** The session's part that knows what its branch holds: `branchIndex`, `presentedSteps`, `remindersOf`, `pruneOutbox`, `sessionKept`. */
export const SessionBranch = (Base) =>
  class SessionBranch extends Base {
    constructor(...args) {
      super(...args);
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
      /** Messages Pi dropped once in this process. */
      this.droppedMessages = new Set();
    }

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
  };
