// A protected human decision's answer as the extension builds it, without Pi or a host: the
// dialog asks for text only for a choice that collects text and asks again until the text fits
// its length rule; `/workflow answer` refuses an answer that names no choice or breaks the rule.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { humanAnswer } from '../../lib/decision-answer.js';
import { WorkflowSession } from '../../extension/session.js';

/** The request a human decision with Approve (no text) and Reject (a reason of 5 to 40 characters) carries. */
const request = {
  workflow: 'reason',
  node: 'ask',
  kind: 'human_decision',
  question: 'Ship it?',
  choices: [
    { id: 'approve', label: 'Approve' },
    { id: 'reject', label: 'Reject', input: { name: 'why', label: 'Why reject?', minLength: 5, maxLength: 40 } },
  ],
  textInput: { label: 'Why reject?', required: true },
};

/** A session whose dialogs answer from `answers` (in order) and whose host calls are recorded. */
function fakeSession(answers) {
  const asked = [];
  const notes = [];
  const sent = [];
  const ui = {
    async select(title, options) {
      asked.push({ method: 'select', title, options });
      return answers.shift();
    },
    async input(title) {
      asked.push({ method: 'input', title });
      return answers.shift();
    },
    notify(message, level) {
      notes.push({ message, level });
    },
    setWidget() {},
    setStatus() {},
  };
  const ctx = { cwd: '/', ui, isIdle: () => true, sessionManager: { getSessionId: () => 's', getBranch: () => [] } };
  const session = new WorkflowSession({ sendMessage() {} }, ctx);
  session.call = async (_what, fn) =>
    fn({
      async answerHumanDecision(runId, decisionId, answer) {
        sent.push(answer);
        return { decision_id: decisionId, answered_by: 'person' };
      },
    });
  return { session, asked, notes, sent };
}

const decision = { decision_id: 'd1', node_id: 'ask', kind: 'human_decision', status: 'pending', request };
const run = { run_id: 'run-0123456789abcdef', workflow_name: 'reason' };

test('the dialog asks no text for a choice without a text input', async () => {
  const { session, asked, sent } = fakeSession(['Approve']);
  await session.askPerson(decision, run, new AbortController().signal);
  assert.deepEqual(asked.map((a) => a.method), ['select']);
  assert.deepEqual(sent, [{ choice: 'approve', text: null }]);
});

test('the dialog asks again, with the rule, until the reason fits; a too-short one is never sent', async () => {
  const { session, asked, notes, sent } = fakeSession(['Reject', 'no', 'not tested yet']);
  await session.askPerson(decision, run, new AbortController().signal);
  assert.deepEqual(asked.map((a) => a.method), ['select', 'input', 'input']);
  assert.match(asked[1].title, /Why reject\? \(5 to 40 characters\)/);
  assert.match(asked[2].title, /at least 5 characters, got 2/);
  assert.ok(notes.some((n) => /at least 5 characters/.test(n.message)));
  assert.deepEqual(sent, [{ choice: 'reject', text: 'not tested yet' }]);
});

test('/workflow answer: a choice by id or label with its text; refused when it names no choice or breaks the rule', () => {
  assert.deepEqual(humanAnswer(request, 'approve').answer, { choice: 'approve', text: null });
  assert.deepEqual(humanAnswer(request, 'Reject too vague for now').answer, { choice: 'reject', text: 'too vague for now' });
  assert.deepEqual(humanAnswer(request, '{"choice":"reject","text":"needs tests"}').answer, { choice: 'reject', text: 'needs tests' });
  const none = humanAnswer(request, 'maybe later');
  assert.equal(none.answer, undefined);
  assert.match(none.problem, /names none of the choices; answer with one of: approve \("Approve"\), reject \("Reject"\) <Why reject\?, 5 to 40 characters>/);
  assert.match(humanAnswer(request, 'reject no').problem, /at least 5 characters, got 2/);
  assert.match(humanAnswer(request, 'reject ' + 'x'.repeat(41)).problem, /at most 40 characters/);
  assert.match(humanAnswer(request, '{"choice":null}').problem, /names none of the choices/);
  assert.match(humanAnswer(request, 'approve but why').problem, /Approve takes no text/);
});

test('a request with only the decision-wide text input (no per-choice inputs): text is offered for every choice, never forced', () => {
  const shared = { ...request, choices: request.choices.map(({ id, label }) => ({ id, label })) };
  assert.deepEqual(humanAnswer(shared, 'approve').answer, { choice: 'approve', text: null });
  assert.deepEqual(humanAnswer(shared, 'reject too vague').answer, { choice: 'reject', text: 'too vague' });
  assert.match(humanAnswer(shared, 'maybe').problem, /names none of the choices/);
});

test('a decision whose answer is on its way is not offered again by a refresh, nor reported closed once taken', async () => {
  const { session, asked, notes, sent } = fakeSession(['Approve']);
  // The host takes the answer only when the test says so.
  let take;
  const taken = new Promise((r) => (take = r));
  session.call = async (_what, fn) =>
    fn({
      async answerHumanDecision(runId, decisionId, answer) {
        sent.push(answer);
        await taken;
        return { decision_id: decisionId, answered_by: 'person' };
      },
    });
  const pending = new Map([[run.run_id, { run, decisions: [decision] }]]);
  session.offerDecisions(pending);
  while (sent.length === 0) await new Promise((r) => setImmediate(r));
  // A refresh while the answer travels: the decision is still pending at the host.
  session.offerDecisions(pending);
  assert.deepEqual(asked.map((a) => a.method), ['select'], 'offered once');
  take();
  while (!notes.some((n) => /decision recorded/.test(n.message))) await new Promise((r) => setImmediate(r));
  // A refresh whose statuses were read before the host took the answer still sees it pending.
  session.offerDecisions(pending);
  assert.deepEqual(asked.map((a) => a.method), ['select'], 'not offered again from a stale status');
  // The refresh after the answer sees it answered: the person's own answer, nothing to report.
  session.offerDecisions(new Map([[run.run_id, { run, decisions: [{ ...decision, status: 'answered' }] }]]));
  assert.equal(session.dialogs.size, 0, 'its dialog is gone once the answer is seen');
  assert.deepEqual(asked.map((a) => a.method), ['select']);
  assert.deepEqual(sent, [{ choice: 'approve', text: null }]);
  assert.equal(notes.filter((n) => /was closed/.test(n.message)).length, 0, JSON.stringify(notes));
});

test('a refresh that sees the answer taken while it still travels closes the dialog quietly', async () => {
  const { session, asked, notes } = fakeSession(['Approve']);
  let take;
  const taken = new Promise((r) => (take = r));
  let calls = 0;
  session.call = async (_what, fn) =>
    fn({
      async answerHumanDecision(runId, decisionId) {
        calls += 1;
        await taken;
        return { decision_id: decisionId, answered_by: 'person' };
      },
    });
  session.offerDecisions(new Map([[run.run_id, { run, decisions: [decision] }]]));
  while (calls === 0) await new Promise((r) => setImmediate(r));
  // The host committed the answer; its reply has not arrived yet.
  session.offerDecisions(new Map([[run.run_id, { run, decisions: [{ ...decision, status: 'answered' }] }]]));
  take();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(asked.map((a) => a.method), ['select']);
  assert.equal(notes.filter((n) => /was closed/.test(n.message)).length, 0, JSON.stringify(notes));
});
