// Protected human decisions: asked of the person in dialogs (TUI: a scrollable `custom()`; RPC:
// the select's title), never a model turn; a dialog closes when the host reports its decision
// answered elsewhere, expired or cancelled, and the person hears why.
import { choiceInputs, textProblem, textRule } from '../lib/decision-answer.js';
import { decisionLines, decisionText } from '../lib/decision-text.js';
import { readRequest } from '../lib/request-contract.js';
import { DecisionComponent } from './decision.js';

/** The session's part that asks the person its protected decisions: `offerDecisions`, `askPerson`, `reportClosed`, `closeDialogs`. */
export const DecisionDialogs = (Base) =>
  class DecisionDialogs extends Base {
    constructor(...args) {
      super(...args);
      /** Open protected-decision dialogs: decision id -> `{ controller, node, runId }`. */
      this.dialogs = new Map();
    }

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

    /** Closing: every open dialog closes. */
    closeDialogs() {
      for (const dialog of this.dialogs.values()) dialog.controller.abort();
      this.dialogs.clear();
    }
  };
