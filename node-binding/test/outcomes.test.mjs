// The outcomes the client reads (lib/outcomes.js): a run's end, a submission's verdict, an
// effect's resolution, each from its rules in order. The waits and resolveEffect against a real
// host are in client.test.mjs.
import assert from 'node:assert/strict';
import test from 'node:test';

import { PiwError } from '../index.js';
import { isFinal, mayChangeOutcome, readOutcome } from '../lib/outcomes.js';

const status = (run, more = {}) => ({ run: { run_id: 'run-1', paused: false, review_reason: null, ...run }, decisions: [], interactions: [], ...more });

test("a run's end: final; with untilParked also parked, never asleep on a timer", () => {
  for (const s of ['completed', 'failed', 'cancelled', 'timed_out']) {
    assert.equal(isFinal(s), true, s);
    assert.deepEqual(readOutcome('run', status({ status: s })), { outcome: 'final', value: status({ status: s }).run });
  }
  const pending = status({ status: 'waiting' }, { decisions: [{ status: 'pending' }] });
  assert.equal(readOutcome('run', pending), null);
  assert.equal(readOutcome('run', pending, { untilParked: true }).outcome, 'parked');
  assert.equal(readOutcome('run', status({ status: 'review' }), { untilParked: true }).outcome, 'parked');
  assert.equal(readOutcome('run', status({ status: 'waiting', paused: true }), { untilParked: true }).outcome, 'parked');
  assert.equal(readOutcome('run', status({ status: 'waiting', wake_at: 1 }), { untilParked: true }), null);
  assert.equal(readOutcome('run', status({ status: 'running' }), { untilParked: true }), null);
  assert.equal(mayChangeOutcome('run', { status: 'waiting' }), false);
  assert.equal(mayChangeOutcome('run', { status: 'waiting' }, { untilParked: true }), true);
  assert.equal(mayChangeOutcome('run', { status: 'completed' }), true);
});

test("a submission's verdict: judged; else why it never will be here", () => {
  const ask = { runId: 'run-1', submissionId: 'sub-1' };
  const judging = (state, run = { status: 'waiting' }) =>
    status(run, { interactions: [{ last_submission: { submission_id: 'sub-1', state, error: state === 'rejected' ? 'bad' : null } }] });
  assert.equal(readOutcome('submission', judging('validating'), ask), null);
  assert.deepEqual(readOutcome('submission', judging('rejected'), ask), { outcome: 'judged', value: { submission_id: 'sub-1', state: 'rejected', error: 'bad' } });
  // Judged wins over the run having gone on since.
  assert.equal(readOutcome('submission', judging('accepted', { status: 'completed' }), ask).value.state, 'accepted');
  assert.throws(() => readOutcome('submission', judging('validating', { status: 'cancelled' }), ask), (e) => {
    assert.ok(e instanceof PiwError);
    assert.equal(e.code, 'invalid_transition');
    assert.equal(e.message, 'run run-1 ended (cancelled) before judging sub-1');
    return true;
  });
  assert.throws(() => readOutcome('submission', judging('validating', { status: 'review', review_reason: 'source_changed: x' }), ask), (e) => {
    assert.equal(e.code, 'run_in_review');
    assert.deepEqual(e.details, { run_id: 'run-1', submission_id: 'sub-1', review_reason: 'source_changed: x' });
    return true;
  });
  assert.equal(mayChangeOutcome('submission', { event_kind: 'submission_rejected', status: 'waiting' }), true);
  assert.equal(mayChangeOutcome('submission', { event_kind: 'progress', status: 'running' }), false);
});

test("an effect's resolution: applied or failed, anything else refused saying what to give", () => {
  assert.deepEqual(readOutcome('effect', { applied: { id: 7 } }), { outcome: 'applied', value: { status: 'applied', receipt: { id: 7 } } });
  assert.deepEqual(readOutcome('effect', { applied: undefined }), { outcome: 'applied', value: { status: 'applied', receipt: null } });
  assert.deepEqual(readOutcome('effect', { failed: 'declined' }), { outcome: 'failed', value: { status: 'failed', error: 'declined' } });
  for (const bad of [null, {}, 'applied', [{ applied: 1 }], { apply: 1 }]) {
    assert.throws(() => readOutcome('effect', bad), (e) => {
      assert.equal(e.code, 'invalid_input');
      assert.match(e.message, /an effect's outcome is \{ applied: receipt \} \(it happened\) or \{ failed: error \} \(it did not\), not /);
      return true;
    });
  }
  assert.throws(() => readOutcome('verdict', {}), /no outcome of kind verdict; one of: run, submission, effect/);
});
