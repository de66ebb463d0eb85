// The outcomes the client reads from the host, in one table: a run's end (`waitForRun`), the
// verdict on a submission (`waitForSubmission`), and an effect's resolution as a person gives
// it (`resolveEffect`). Each kind's rules are tried in order; the first that holds gives the
// outcome (or the error that says why there will be none). Pure: no call to the host.
import { native as addon } from './native.js';
import { PiwError } from './errors.js';

// The host's own list (core's RunStatus::is_terminal), not a copy of it.
const FINAL = new Set(addon.finalRunStatuses());

/** Whether a run status is final. */
export function isFinal(status) {
  return FINAL.has(status);
}

/**
 * Whether a run's status (`runStatus`'s reply) says it is parked: in review, or waiting on a
 * request (a pending decision or interactive step) or paused. Nothing happens until someone
 * acts. A run asleep on a durable timer is not parked: it goes on by itself.
 */
function isParked({ run, decisions = [], interactions = [] }) {
  if (run.status === 'review') return true;
  if (run.status !== 'waiting') return false;
  return (
    run.paused === true ||
    decisions.some((d) => d.status === 'pending') ||
    interactions.some((i) => i.status === 'pending')
  );
}

/** The submission `submissionId` of a run's status once judged (`accepted` or `rejected`), else undefined. */
function judged({ interactions = [] }, submissionId) {
  const last = interactions.find((i) => i.last_submission?.submission_id === submissionId)?.last_submission;
  return last && last.state !== 'validating' ? last : undefined;
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Per kind: `rules` (in order: `outcome`, `when(subject, ask)`,
 * then `value(subject, ask)` or `error(subject, ask)`), `otherwise` (the error when no rule
 * holds; without it, no outcome yet), and for the waits `changes(event, ask)`: whether an
 * event of the run may change the outcome (a wait reads the run again only after those).
 */
const OUTCOMES = {
  run: {
    rules: [
      { outcome: 'final', when: ({ run }) => isFinal(run.status), value: ({ run }) => run },
      { outcome: 'parked', when: (status, ask) => ask.untilParked === true && isParked(status), value: ({ run }) => run },
    ],
    changes: (event, ask) => isFinal(event.status) || (ask.untilParked === true && (event.status === 'waiting' || event.status === 'review')),
  },
  submission: {
    rules: [
      { outcome: 'judged', when: (status, ask) => judged(status, ask.submissionId) !== undefined, value: (status, ask) => judged(status, ask.submissionId) },
      {
        outcome: 'run_ended',
        when: ({ run }) => isFinal(run.status),
        error: ({ run }, { runId, submissionId }) => new PiwError('invalid_transition', `run ${runId} ended (${run.status}) before judging ${submissionId}`),
      },
      {
        // The host keeps the submission and judges it once a person lets the run go on.
        outcome: 'run_in_review',
        when: ({ run }) => run.status === 'review',
        error: ({ run }, { runId, submissionId }) => {
          const reason = run.review_reason ?? 'no reason given';
          return new PiwError('run_in_review', `run ${runId} stopped for review before judging ${submissionId}: ${reason}`, {
            details: { run_id: runId, submission_id: submissionId, review_reason: reason },
          });
        },
      },
    ],
    changes: (event) =>
      event.event_kind === 'submission_accepted' || event.event_kind === 'submission_rejected' || event.status === 'review' || isFinal(event.status),
  },
  effect: {
    rules: [
      { outcome: 'applied', when: (given) => isObject(given) && 'applied' in given, value: (given) => ({ status: 'applied', receipt: given.applied ?? null }) },
      { outcome: 'failed', when: (given) => isObject(given) && 'failed' in given, value: (given) => ({ status: 'failed', error: String(given.failed ?? '') }) },
    ],
    otherwise: (given) =>
      new PiwError('invalid_input', `an effect's outcome is { applied: receipt } (it happened) or { failed: error } (it did not), not ${JSON.stringify(given) ?? String(given)}`),
  },
};

/**
 * The outcome of `kind` (`run`, `submission`, `effect`) that `subject` shows, asked as `ask`
 * says (`run`: `untilParked`; `submission`: `runId`, `submissionId`): `{ outcome, value }`, or
 * null while there is none yet. Throws the `PiwError` of a rule that says there will be none
 * (a submission's run ended or stopped for review first), or of a subject that fits no rule.
 */
export function readOutcome(kind, subject, ask = {}) {
  const table = OUTCOMES[kind];
  if (!table) throw new PiwError('invalid_input', `no outcome of kind ${kind}; one of: ${Object.keys(OUTCOMES).join(', ')}`);
  for (const rule of table.rules) {
    if (!rule.when(subject, ask)) continue;
    if (rule.error) throw rule.error(subject, ask);
    return { outcome: rule.outcome, value: rule.value(subject, ask) };
  }
  if (table.otherwise) throw table.otherwise(subject, ask);
  return null;
}

/** Whether an event of the run may change the outcome of `kind` a wait reads (`run`, `submission`). */
export function mayChangeOutcome(kind, event, ask = {}) {
  return OUTCOMES[kind].changes(event, ask);
}
