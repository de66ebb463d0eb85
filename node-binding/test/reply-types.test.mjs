// The replies `index.d.ts` declares are the replies a real host sends. The declared return type
// of each `Client` method (and `Subscription.next`) is read with the TypeScript compiler API;
// every reply the calls below get is checked against it, field by field and through nested
// types: a field the host sends that the type does not name, a required field it leaves out, a
// `null` the type does not allow, or a value of another kind (or another literal) fails. Optional
// fields must be seen at least once, unless listed in OPTIONAL_UNSEEN with why.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { pkgDir, startHost, writeWorkflow } from './helpers.mjs';

const ts = createRequire(import.meta.url)('typescript');

/** Optional fields no call below can make the host send, and why. */
const OPTIONAL_UNSEEN = new Map([
  ['Run.result_omitted', 'only when a page of runs would not fit a frame'],
  ['Attempt.output_omitted', 'only when a status would not fit a frame'],
  ['Decision.request_omitted', 'only when a status would not fit a frame'],
  ['Decision.answer_omitted', 'only when a status would not fit a frame'],
  ['Interaction.request_omitted', 'only when a status would not fit a frame'],
  ['Effect.receipt_omitted', 'only when a status would not fit a frame'],
  ['RunUpdate.data_omitted', 'only when a status would not fit a frame'],
  ['WorkflowMessage.content_omitted', 'only when a status would not fit a frame'],
  ['StepService.model', 'only when a bridge serves a detached step: this host has no Pi model (test/pi/detached.test.mjs)'],
  ['StepService.detail', 'only when no Pi can serve a detached step (`no_pi`), which needs a detached model configured'],
]);

// ---------------------------------------------------------------------------------------------
// The declared types

const program = ts.createProgram([join(pkgDir, 'index.d.ts')], { target: ts.ScriptTarget.ES2022, strict: true, noEmit: true, types: [] });
const checker = program.getTypeChecker();
const declared = checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(join(pkgDir, 'index.d.ts'))));
const classType = (name) => checker.getDeclaredTypeOfSymbol(declared.find((s) => s.name === name));

/** What `method` of class `cls` resolves to, as declared. */
function replyType(cls, method) {
  const prop = classType(cls).getProperty(method);
  assert.ok(prop, `index.d.ts declares ${cls}.${method}`);
  const [signature] = checker.getTypeOfSymbol(prop).getCallSignatures();
  const returned = signature.getReturnType();
  // `allRuns` yields its replies one run at a time.
  if (method === 'allRuns') return checker.getTypeArguments(returned)[0];
  return checker.getAwaitedType(returned) ?? returned;
}

const typeName = (t) => t.aliasSymbol?.name ?? t.symbol?.name ?? checker.typeToString(t);
/** Optional fields seen in some reply: `Type.field`. */
const seen = new Set();
/** Optional fields declared by a type some reply was checked against. */
const optional = new Set();

/** Why `value` does not fit type `t` (at `path`), appended to `problems`. */
function check(value, t, path, problems) {
  // `unknown`, or a type parameter (`request<T>`'s body): the reply's own.
  if (t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown | ts.TypeFlags.TypeParameter)) return;
  if (t.isUnion()) {
    const fits = t.types.filter((m) => fitsKind(value, m));
    if (fits.length === 0) return problems.push(`${path}: ${JSON.stringify(value)?.slice(0, 80)} is none of ${checker.typeToString(t)}`);
    // One member of the value's kind (objects: the first whose fields fit best).
    const scored = fits.map((m) => {
      const p = [];
      check(value, m, path, p);
      return { m, p };
    });
    scored.sort((a, b) => a.p.length - b.p.length);
    if (scored[0].p.length > 0) problems.push(...scored[0].p);
    return;
  }
  if (!fitsKind(value, t)) return problems.push(`${path}: ${JSON.stringify(value)?.slice(0, 80)} is not ${checker.typeToString(t)}`);
  if (value === null || typeof value !== 'object') return;
  if (checker.isTupleType(t)) {
    const elems = checker.getTypeArguments(t);
    if (value.length !== elems.length) problems.push(`${path}: ${value.length} elements, declared ${elems.length}`);
    value.forEach((v, i) => elems[i] && check(v, elems[i], `${path}[${i}]`, problems));
    return;
  }
  if (checker.isArrayType(t)) {
    const [elem] = checker.getTypeArguments(t);
    value.forEach((v, i) => check(v, elem, `${path}[${i}]`, problems));
    return;
  }
  const props = checker.getPropertiesOfType(t);
  const index = checker.getIndexInfosOfType(t).find((i) => i.keyType.flags & ts.TypeFlags.String);
  // A map (`Record<string, unknown>`): any key, each value of the index type.
  if (props.length === 0 && index) {
    for (const [k, v] of Object.entries(value)) check(v, index.type, `${path}.${k}`, problems);
    return;
  }
  const owner = typeName(t);
  // A mapped type (`Partial<Record<RunStatusName, number>>`): its keys are the data's, each optional by design.
  const mapped = (t.objectFlags & ts.ObjectFlags.Mapped) !== 0;
  for (const p of props) {
    const isOptional = (p.flags & ts.SymbolFlags.Optional) !== 0;
    if (isOptional && !mapped) optional.add(`${owner}.${p.name}`);
    if (!Object.hasOwn(value, p.name)) {
      if (!isOptional) problems.push(`${path}: the host sent no ${p.name} (${owner} declares it required)`);
      continue;
    }
    if (isOptional) seen.add(`${owner}.${p.name}`);
    check(value[p.name], checker.getTypeOfSymbol(p), `${path}.${p.name}`, problems);
  }
  const names = new Set(props.map((p) => p.name));
  for (const k of Object.keys(value)) {
    if (!names.has(k)) problems.push(`${path}: the host sent ${k}, which ${owner} does not name${index ? ' (only its index signature covers it)' : ''}`);
  }
}

/** Whether `value` is of the kind of `t` (not a union): null, a literal, a primitive, an array, an object. */
function fitsKind(value, t) {
  const f = t.flags;
  if (f & (ts.TypeFlags.Any | ts.TypeFlags.Unknown | ts.TypeFlags.TypeParameter)) return true;
  if (f & ts.TypeFlags.Null) return value === null;
  if (f & ts.TypeFlags.Undefined) return value === undefined;
  if (value === null || value === undefined) return false;
  if (f & ts.TypeFlags.StringLiteral) return value === t.value;
  if (f & ts.TypeFlags.NumberLiteral) return value === t.value;
  if (f & ts.TypeFlags.BooleanLiteral) return value === (checker.typeToString(t) === 'true');
  if (f & ts.TypeFlags.String) return typeof value === 'string';
  if (f & ts.TypeFlags.Number) return typeof value === 'number';
  if (f & ts.TypeFlags.Boolean) return typeof value === 'boolean';
  if (checker.isArrayType(t) || checker.isTupleType(t)) return Array.isArray(value);
  if (f & ts.TypeFlags.Object) return typeof value === 'object' && !Array.isArray(value);
  return false;
}

/** Every reply a call got: `[what, cls, method, value]`. */
const replies = [];

/** `client` with every reply of its methods kept for the check. */
function recording(client) {
  return new Proxy(client, {
    get(target, name) {
      const v = Reflect.get(target, name, target);
      if (typeof v !== 'function' || name === 'constructor' || typeof name !== 'string') return v;
      return (...args) => {
        const r = v.apply(target, args);
        if (name === 'allRuns') {
          return (async function* () {
            for await (const run of r) {
              replies.push([`allRuns()`, 'Client', 'allRuns', run]);
              yield run;
            }
          })();
        }
        if (name === 'subscribe') return r.then((sub) => (replies.push(['subscribe', 'Client', 'subscribe', sub]), recordingSubscription(sub)));
        return r?.then ? r.then((value) => (replies.push([`${name}(${JSON.stringify(args[0])?.slice(0, 40) ?? ''})`, 'Client', name, value]), value)) : r;
      };
    },
  });
}

function recordingSubscription(sub) {
  return {
    next: () => sub.next().then((e) => (e && replies.push(['Subscription.next', 'Subscription', 'next', e]), e)),
    close: () => sub.close(),
  };
}

// ---------------------------------------------------------------------------------------------
// The host, and calls that make it send every reply

let host;
before(async () => {
  host = await startHost();
});
after(async () => {
  await host?.stop();
});

test('the types the checker reads are the declared ones (a wrong reply fails)', () => {
  const problems = [];
  check({ submission_id: 's', state: 'accepted', error: null }, replyType('Client', 'waitForSubmission'), 'ok', problems);
  assert.deepEqual(problems, []);
  check({ submission_id: 's', state: 'done', extra: 1 }, replyType('Client', 'waitForSubmission'), 'bad', problems);
  assert.deepEqual(problems, [
    'bad.state: "done" is none of "validating" | "accepted" | "rejected"',
    'bad: the host sent no error (SubmissionVerdict declares it required)',
    'bad: the host sent extra, which SubmissionVerdict does not name',
  ]);
  const nested = [];
  check([{ run_id: 1 }], replyType('Client', 'listRuns'), 'runs', nested);
  assert.ok(nested.includes('runs[0].run_id: 1 is not string'), nested.join('\n'));
  assert.ok(nested.some((p) => /the host sent no workflow_name \(Run declares it required\)/.test(p)), nested.join('\n'));
});

test('every reply of the client has the fields index.d.ts declares, no more, no fewer', async () => {
  const c = recording(host.client);
  const session = 'session-types';
  const steps = writeWorkflow(
    host.dir,
    'steps',
    `export default piw.defineWorkflow({
      name: 'steps', startAt: 'gate',
      nodes: {
        gate: piw.checkpoint({ summary: 'go on?' }),
        decide: piw.humanDecision({
          choices: piw.defineHumanChoices({ ship: piw.choice({ label: 'Ship it' }), hold: piw.choice({ label: 'Hold' }) }),
          request: () => ({ title: 'ship it?' }),
        }),
        tell: piw.notify({ kind: 'progress', message: ({ outputs }) => 'decided ' + outputs.decide.choice }),
        done: piw.compute({ run: ({ outputs }) => ({ finished: true, last: outputs.decide }) }),
      },
      edges: [{ from: 'gate', to: 'decide' }, { from: 'decide', to: 'tell' }, { from: 'tell', to: 'done' }],
    });`,
  );
  const ask = writeWorkflow(
    host.dir,
    'ask',
    `export default piw.defineWorkflow({
      name: 'ask', startAt: 'ask',
      nodes: {
        ask: piw.agent({
          prompt: 'say 42',
          expectedOutput: '{ "value": 42 }',
          validate: (result) => { if (result?.value !== 42) throw new Error('value must be 42'); return result; },
        }),
        done: piw.compute({ run: ({ outputs }) => ({ accepted: outputs.ask }) }),
      },
      edges: [{ from: 'ask', switch: { on: '$result.outcome', cases: { ok: 'done', failed: 'done' } } }],
    });`,
  );
  const marker = join(host.dir, 'fixed');
  const flaky = writeWorkflow(
    host.dir,
    'flaky',
    `import { existsSync } from 'node:fs';
    export default piw.defineWorkflow({
      name: 'flaky', startAt: 'work', edges: [],
      nodes: { work: piw.compute({ run: () => { if (!existsSync(${JSON.stringify(marker)})) process.exit(1); return { ok: true }; } }) },
    });`,
  );
  const doubt = writeWorkflow(
    host.dir,
    'doubt',
    `export default piw.defineWorkflow({
      name: 'doubt', startAt: 'act', edges: [],
      nodes: { act: piw.action({ effect: piw.manualEffect('card.charge'), run: () => { process.kill(process.pid, 'SIGKILL'); } }) },
    });`,
  );

  await c.status();
  await c.request('host.status');

  // A checkpoint, a protected decision, a notify: decisions, messages, events.
  const sub = await c.subscribe({ sessionId: session });
  const { run_id: stepsRun } = await c.startRun(steps, { sessionId: session, input: { n: 1 } });
  await c.waitForRun(stepsRun, { untilParked: true, timeoutMs: 30_000 });
  const gate = (await c.runStatus(stepsRun)).decisions.find((d) => d.status === 'pending');
  await c.answerCheckpoint(stepsRun, gate.decision_id, 'yes');
  let decide;
  for (;;) {
    decide = (await c.runStatus(stepsRun)).decisions.find((d) => d.kind === 'human_decision' && d.status === 'pending');
    if (decide) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  await c.answerHumanDecision(stepsRun, decide.decision_id, { choice: 'ship', text: null });
  await c.waitForRun(stepsRun, { timeoutMs: 30_000 });
  await c.runStatus(stepsRun);
  for (let i = 0; i < 3; i++) await sub.next();
  await sub.close();
  const messages = await c.claimMessages(session, { claimant: 'types' });
  assert.ok(messages.length >= 2, JSON.stringify(messages));
  await c.ackMessage(messages[0].message_id);

  // An interactive step: an update, a rejected and an accepted submission; one given up.
  const { run_id: askRun } = await c.startRun(ask, { sessionId: session });
  await c.waitForRun(askRun, { untilParked: true, timeoutMs: 30_000 });
  const [interaction] = await c.listInteractions(session);
  await c.updateInteraction(interaction, 'halfway', { type: 'progress', key: 'overall', data: { schema: 'pi-workflows.progress.v1', status: 'running', completed: 1, total: 2 } });
  const wrong = await c.submitInteraction(interaction, { value: 7 });
  await c.waitForSubmission(askRun, wrong.submission_id, { timeoutMs: 30_000 });
  await c.runStatus(askRun);
  await c.listInteractions(session);
  const right = await c.submitInteraction(interaction, { value: 42 });
  await c.waitForSubmission(askRun, right.submission_id, { timeoutMs: 30_000 });
  await c.waitForRun(askRun, { timeoutMs: 30_000 });
  const { run_id: givenUp } = await c.startRun(ask, { sessionId: `${session}-2` });
  await c.waitForRun(givenUp, { untilParked: true, timeoutMs: 30_000 });
  const [open] = await c.listInteractions(`${session}-2`);
  await c.failInteraction(open, 'no submission after 2 reminders');
  await c.waitForRun(givenUp, { timeoutMs: 30_000 });

  // Pause, resume, cancel.
  const { run_id: toCancel } = await c.startRun(steps, { sessionId: session });
  await c.pauseRun(toCancel);
  await c.resumeRun(toCancel);
  await c.cancelRun(toCancel, { reason: 'test' });

  // A run whose children keep dying stops for review, and is retried once fixed.
  const { run_id: flakyRun } = await c.startRun(flaky);
  await c.waitForRun(flakyRun, { untilParked: true, timeoutMs: 60_000 });
  await c.runStatus(flakyRun);
  writeFileSync(marker, '');
  await c.retryRun(flakyRun, { reason: 'fixed', by: 'test' });
  await c.waitForRun(flakyRun, { timeoutMs: 60_000 });

  // An effect left uncertain, resolved by a person.
  const { run_id: doubtRun } = await c.startRun(doubt);
  await c.waitForRun(doubtRun, { untilParked: true, timeoutMs: 60_000 });
  const { effects } = await c.runStatus(doubtRun);
  await c.resolveEffect(doubtRun, effects[0].effect_id, { failed: 'declined' }, { reason: 'checked', by: 'test' });
  await c.runStatus(doubtRun);

  await c.listRuns({ sessionId: session });
  await c.listRunsPage({ limit: 2 });
  for await (const _run of c.allRuns({ limit: 2 })) {
    // each one recorded
  }
  await c.pruneRuns({ dryRun: true });

  const found = [];
  for (const [what, cls, method, value] of replies) {
    if (method === 'subscribe') continue;
    check(value, replyType(cls, method), what, found);
  }
  // Each difference once, whichever run or element showed it.
  const problems = [...new Set(found.map((p) => p.replace(/\(.*?\)(?=[.:\[])/, '()').replace(/\[\d+\]/g, '[]')))];
  assert.deepEqual(problems, [], `replies that differ from index.d.ts:\n${problems.join('\n')}`);
  const unseen = [...optional].filter((f) => !seen.has(f) && !OPTIONAL_UNSEEN.has(f));
  assert.deepEqual(unseen, [], 'optional fields no reply carried (send them, or say in OPTIONAL_UNSEEN why they cannot be)');
  const methods = new Set(replies.map(([, , m]) => m));
  for (const m of ['status', 'request', 'startRun', 'runStatus', 'waitForRun', 'answerCheckpoint', 'answerHumanDecision', 'claimMessages', 'ackMessage', 'listInteractions', 'updateInteraction', 'submitInteraction', 'waitForSubmission', 'failInteraction', 'pauseRun', 'resumeRun', 'cancelRun', 'retryRun', 'resolveEffect', 'listRuns', 'listRunsPage', 'allRuns', 'pruneRuns', 'next']) {
    assert.ok(methods.has(m), `a reply of ${m} was checked`);
  }
});
