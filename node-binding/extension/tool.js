// The `workflow` tool's step actions, shared by the Pi extension (./index.js) and the bridge of
// detached runs (./bridge.js): `update` and `submit` of the step the session (or bridge) presented
// last, bound to it, judged by the workflow's `validate` and answered with its verdict. Both
// work on a WorkflowSession (./session.js) or a subclass: `activeInteraction`,
// `presentedRequest`, `call`, `kick`, `reportVerdictLater`.
import { createHash, randomBytes } from 'node:crypto';

import { validateWorkflowUpdate } from '../index.js';
import { barrier } from './barrier.js';
import { closedWithout } from './step-presentation.js';

/** How long `submit` waits for the workflow's `validate` to judge a submission. */
const VALIDATION_WAIT_MS = Number(process.env.PIW_PI_VALIDATION_WAIT_MS) || 90_000;

/** Errors of a call whose host went away or did not answer: its outcome is the host's to say. */
export const HOST_LOST = new Set(['disconnected', 'timeout', 'io', 'host_shutting_down', 'client_closed', 'connect_failed', 'host_not_ready']);

const randomPart = () => `${process.pid}-${Date.now()}-${Math.random()}`;

/** A tool or command failure the caller can act on (shown as a tool error). */
export class WorkflowError extends Error {}

export const text = (t, details = {}) => ({ content: [{ type: 'text', text: t }], details });

/** The tool's parameters for `update` and `submit` (plain JSON Schema, see ./index.js). */
export const STEP_PARAMETERS = {
  output: { description: 'submit: the step output (JSON)' },
  interactionId: { type: 'string', description: 'submit/update: the interaction id from the step message' },
  message: { type: 'string', description: 'update: what has been done so far (plain text, when there is no structured update)' },
  update: { description: 'update: { type, key, data } (JSON), the current state of one item: replaces the previous one of the same type and key' },
  step: { type: 'string', description: 'update: the step (node) the update is for; checked against the open step' },
  attempt: { type: 'string', description: 'update: the attempt the update is for; checked against the open step' },
};

/** What `update` and `submit` do, for the tool's description. */
export const STEP_ACTIONS_TEXT =
  'update (progress on the current step, the step still open: update = { type, key, data } as workflows publish it, e.g. { type: "progress", key: "overall", data: { schema: "pi-workflows.progress.v1", status: "running", completed, total, unit } }; or a plain message); submit (the output of the current workflow step: output, interactionId from the step message)';

/**
 * The interaction a `submit` or `update` answers: `interactionId`, else the request the model
 * was shown last in this session, never one presented later (a repeated call lands where
 * the first did). `{ interaction, open: true }` when it is the session's active interaction
 * (what is presented, see WorkflowSession.activeInteraction); `{ interaction, open: false }`
 * when it is closed (a `submit` of the result it took gets its original receipt). Refused
 * otherwise, naming the current request only when the model was shown it.
 */
export async function boundInteraction(s, interactionId) {
  const statuses = new Map();
  const active = await s.activeInteraction(statuses);
  const shown = s.presentedRequest({ key: interactionId });
  const id = interactionId ?? shown?.key;
  if (active && active.interaction_id === id) return { interaction: active, open: true };
  const current =
    active && s.presentedRequest({ key: active.interaction_id })
      ? `; this session's current request is interaction ${active.interaction_id} (step ${active.node_id}, attempt ${active.attempt_id})`
      : '';
  if (!shown) {
    throw new WorkflowError(
      interactionId
        ? `interaction ${interactionId} is closed or not this session's current request${current || ': no step of this session waits for a submission'}`
        : 'no workflow step was presented in this session: there is nothing to submit',
    );
  }
  if (shown.kind === 'checkpoint') {
    const which = interactionId ? `${interactionId} is` : 'the request presented last is';
    throw new WorkflowError(`${which} the checkpoint ${shown.node} of run ${shown.runId}: answer it with the action "answer"`);
  }
  const st = statuses.get(shown.runId) ?? (await s.call('run.status', (c) => c.runStatus(shown.runId)));
  const interaction = st.interactions.find((i) => i.interaction_id === id);
  if (!interaction) throw new WorkflowError(`interaction ${id} is not a request of run ${shown.runId}${current}`);
  if (interaction.status === 'pending' || interaction.status === 'validating') {
    const away = s.handedAway(st, id);
    if (away) {
      throw new WorkflowError(`interaction ${id} (step ${interaction.node_id} of run ${shown.runId}) is no longer this session's: ${away}. Do not submit it or work on it further${current}`);
    }
    if (st.run.status === 'review') {
      throw new WorkflowError(
        `interaction ${id} (step ${interaction.node_id}) waits: its run ${shown.runId} stopped for review (${st.run.review_reason ?? 'no reason given'}). ${interaction.status === 'validating' ? 'Its submission is kept and is judged' : 'The step comes back'} when a person lets the run go on (piw run retry). Do not submit it again or work on it further${current}`,
      );
    }
    const why = st.run.paused
      ? `its run ${shown.runId} is paused (/workflow resume ${shown.runId} presents it again)`
      : 'another request of this session goes first';
    throw new WorkflowError(`interaction ${id} (step ${interaction.node_id}) is not this session's current request: ${why}${current}`);
  }
  const why = interaction.status === 'settled' ? 'it was already accepted' : (closedWithout(st, id) ?? interaction.status);
  return { interaction, open: false, current, why };
}

/** The refusal of an output for a closed interaction: why it closed (accepted, timed out, cancelled, its run ended). */
function closedError(bound) {
  const { interaction: i, current, why } = bound;
  return new WorkflowError(
    `interaction ${i.interaction_id} (step ${i.node_id} of run ${i.run_id}) is closed: ${why}; this output was not submitted${current}`,
  );
}

/**
 * A progress note, or a workflow update `{ type, key, data }` checked as `publishUpdate`
 * checks it and kept as the run's latest for its `(type, key)`; answered with a receipt. The
 * tool call id makes a re-delivered call a repeat (the host answers the first one again).
 */
export async function update(s, params, toolCallId) {
  let checked = null;
  if (params.update !== undefined) {
    try {
      checked = validateWorkflowUpdate(params.update);
    } catch (e) {
      throw new WorkflowError(`update refused: ${e.message}`);
    }
  } else if (!params.message) {
    throw new WorkflowError('update needs `update` ({ type, key, data }) or `message`');
  }
  const bound = await boundInteraction(s, params.interactionId);
  if (!bound.open) throw closedError(bound);
  const current = bound.interaction;
  if (params.step !== undefined && params.step !== current.node_id) {
    throw new WorkflowError(`update is for step ${params.step}, but the open step is ${current.node_id} (run ${current.run_id})`);
  }
  if (params.attempt !== undefined && params.attempt !== current.attempt_id) {
    throw new WorkflowError(`update is for attempt ${params.attempt}, but the open step's attempt is ${current.attempt_id}`);
  }
  const message = checked ? `${checked.type}:${checked.key}` : params.message;
  const options = toolCallId ? { idempotencyKey: `update-${toolCallId}` } : {};
  const body = await s.call('interaction.update', (c) => c.updateInteraction(current, message, checked, options));
  const receipt = checked
    ? {
        updateId: `upd_${createHash('sha256').update(`${current.interaction_id}\0${toolCallId ?? randomPart()}`).digest('hex').slice(0, 26)}`,
        seq: body?.seq ?? null,
        at: new Date().toISOString(),
        type: checked.type,
        key: checked.key,
      }
    : null;
  return text(`${checked ? `update ${message} kept` : 'progress noted'} for step ${current.node_id}; the step is still open: submit its output when done`, {
    runId: current.run_id,
    interactionId: current.interaction_id,
    ...(receipt ? { receipt } : {}),
  });
}

export async function submit(s, params, signal) {
  // A test point: the model's call has arrived and is not yet bound to a step.
  await barrier('submit');
  const bound = await boundInteraction(s, params.interactionId);
  const current = bound.interaction;
  // One request id for the submission and its resend: the host answers a resend of a
  // request it took with the same receipt, so the output is taken at most once.
  const requestId = `req-${Date.now().toString(16).padStart(12, '0')}${randomBytes(8).toString('hex')}`;
  const send = () => s.call('interaction.submit', (c) => c.submitInteraction(current, params.output ?? null, { requestId }));
  let submitted;
  try {
    try {
      submitted = await send();
    } catch (e) {
      if (!HOST_LOST.has(e?.code)) throw e;
      // The host went away (or hung) while the output was on its way: whether it was taken
      // is the host's to say. Sent again once (the next call starts a host when none runs).
      try {
        submitted = await send();
      } catch (again) {
        if (!HOST_LOST.has(again?.code)) throw again;
        throw new WorkflowError(
          `the piw host went away while this output for step ${current.node_id} was being submitted (${again.message}), so whether it was taken is not known. Submit the same output again once the host is back (it is never taken twice), or check with the action "status"; do not submit a different one.`,
        );
      }
    }
  } catch (e) {
    if (e?.code === 'value_too_large') {
      // Refused before anything was sent: the model must make the output smaller. Kept, so a
      // step that ends without a submission names this cause.
      const why = `this output is too large to submit: ${e.message}. Submit a smaller output (the limit is ${e.details?.limit ?? 67108864} bytes of JSON)`;
      s.noteSubmitRefusal?.(current.interaction_id, why);
      throw new WorkflowError(why);
    }
    if (e?.code && !HOST_LOST.has(e.code)) s.noteSubmitRefusal?.(current.interaction_id, `${e.code}: ${e.message}`);
    if (e?.code === 'stale_attempt') {
      throw new WorkflowError(`attempt ${current.attempt_id} is no longer current: ${e.message}`);
    }
    if (e?.code === 'invalid_transition' && current.status === 'validating') {
      throw new WorkflowError(`the last submission for ${current.node_id} is still being validated; wait for its verdict`);
    }
    if (e?.code === 'invalid_transition' && !bound.open) throw closedError(bound);
    throw e;
  }
  s.submitRefusals?.delete(current.interaction_id);
  if (submitted.repeated && submitted.state === 'accepted') {
    s.kick();
    return text(
      `already accepted: step ${current.node_id} of run ${current.run_id} took this output before (submission ${submitted.submission_id}); nothing was submitted again. Do not submit it again: a next step arrives as its own message.`,
      { runId: current.run_id, interactionId: current.interaction_id, submissionId: submitted.submission_id, repeated: true },
    );
  }
  const verdictCall = s.call(
    'the validation',
    (c) => c.waitForSubmission(current.run_id, submitted.submission_id),
    VALIDATION_WAIT_MS,
  );
  // The turn stopped (Escape): the submission stands (the host keeps it and validates it
  // once); the model hears that its outcome is unknown, the session hears the verdict later.
  const stopped = await untilAborted(signal, verdictCall);
  // Stopped because the run stopped for review (the session stops a turn on a run in review):
  // the model hears that, as when the wait itself ended on it.
  const review = stopped ? await inReview(s, current.run_id, submitted.submission_id) : null;
  if (review) return reviewResult(s, current, submitted, review);
  if (stopped) {
    s.reportVerdictLater(current, submitted.submission_id, verdictCall);
    return text(
      `submitted the output for step ${current.node_id} of run ${current.run_id}; the turn was stopped before the workflow's validation judged it, so its outcome is not known yet: it will be reported in this session. Do not submit it again.`,
      { runId: current.run_id, interactionId: current.interaction_id, submissionId: submitted.submission_id, verdict: 'unknown' },
    );
  }
  let verdict;
  try {
    verdict = await verdictCall;
  } catch (e) {
    if (e?.code !== 'run_in_review') throw e;
    // The run stopped for review while the output was being judged (its workflow file
    // changed, say): the host keeps the submission and judges it when a person continues.
    return reviewResult(s, current, submitted, e.details?.review_reason ?? e.message);
  }
  s.kick();
  if (verdict.state === 'rejected') {
    // Detached while it was being judged: the bridge takes the step over from here.
    const status = await s.call('run.status', (c) => c.runStatus(current.run_id));
    const away = s.handedAway(status, current.interaction_id);
    if (away) {
      throw new WorkflowError(
        `the workflow rejected this output for step ${current.node_id}: ${verdict.error}. The step is no longer this session's (${away}): do not submit it again.`,
      );
    }
    throw new WorkflowError(
      `the workflow rejected this output for step ${current.node_id}: ${verdict.error}. Fix it and submit again (interactionId ${current.interaction_id}).`,
    );
  }
  return text(`accepted: step ${current.node_id} of run ${current.run_id} is done`, {
    runId: current.run_id,
    interactionId: current.interaction_id,
    submissionId: submitted.submission_id,
  });
}

/**
 * The review reason when run `runId` is in review with submission `submissionId` not judged
 * yet, else null (also when the host cannot say).
 */
async function inReview(s, runId, submissionId) {
  try {
    const st = await s.call('run.status', (c) => c.runStatus(runId));
    const last = st.interactions.find((i) => i.last_submission?.submission_id === submissionId)?.last_submission;
    if (st.run.status !== 'review' || (last && last.state !== 'validating')) return null;
    return st.run.review_reason ?? 'no reason given';
  } catch {
    return null;
  }
}

/** What `submit` answers when the run stopped for review before judging the submission. */
function reviewResult(s, current, submitted, reason) {
  s.kick();
  return text(
    `submitted the output for step ${current.node_id} of run ${current.run_id}, but the run stopped for review before the workflow judged it: ${reason}. The submission is kept: it is judged when a person lets the run go on (piw run retry). Do not submit it again, and stop working on this step.`,
    {
      runId: current.run_id,
      interactionId: current.interaction_id,
      submissionId: submitted.submission_id,
      verdict: 'review',
      reviewReason: reason,
    },
  );
}

/** Resolves true when `signal` aborts before `promise` settles, false once it settles (either way). */
function untilAborted(signal, promise) {
  const settled = promise.then(
    () => false,
    () => false,
  );
  if (!signal) return settled;
  if (signal.aborted) return Promise.resolve(true);
  let onAbort;
  const aborted = new Promise((r) => {
    onAbort = () => r(true);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  return Promise.race([settled, aborted]).finally(() => signal.removeEventListener('abort', onAbort));
}
