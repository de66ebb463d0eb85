// The workflow authoring API: the one pi-workflows 0.12.1 documents (`defineWorkflow`,
// `startAt`, node constructors taking one options object, the node context `{ input, outputs,
// results, state, signal }`, outcome `ok`), on piw's engine. A definition compiles to the
// core's data-only graph snapshot (node ids, kinds, timeouts, retry contracts, edges, step
// limit; no functions), validated by the same code the host uses; the functions stay with the
// workflow module and run in its child.
import { native as addon } from './native.js';
import { native, PiwError } from './errors.js';

const WORKFLOW = Symbol.for('piw.workflow');
const ASSISTANT_MESSAGE = Symbol.for('piw.assistant_message');
const EFFECT = Symbol.for('piw.effect');
const CHOICES = Symbol.for('piw.human_choices');

/** The reference's default deadline of a node: 15 minutes (here: agent steps and actions). */
export const DEFAULT_AGENT_TIMEOUT_MS = 15 * 60 * 1000;
const DEFAULT_ACTION_TIMEOUT_MS = DEFAULT_AGENT_TIMEOUT_MS;
const ID = /^[A-Za-z_][A-Za-z0-9_-]*$/;

const shape = (message) => new PiwError('invalid_graph', message);

function fn(value, what) {
  if (typeof value !== 'function') throw shape(`${what} must be a function`);
  return value;
}

function optionalFn(value, what) {
  return value === undefined ? undefined : fn(value, what);
}

/** A string option, or a function of the node context returning one. */
function textOrFn(value, what, optional = false) {
  if (value === undefined && optional) return undefined;
  if (typeof value === 'string') return () => value;
  if (typeof value === 'function') return value;
  throw shape(`${what} must be a string or a function of the node context`);
}

/** A workflow's `presentationPrompt`: a string, a function (called when the run completes) or none. */
function presentationPromptOf(value) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string' || typeof value === 'function') return value;
  throw shape('presentationPrompt must be a string or a function of { state, finalOutput, signal }');
}

/** A workflow's `detached` (`{ provider?, model?, piArgs? }`) as the snapshot's `detached`. */
function detachedOf(value) {
  if (value === undefined) return undefined;
  const o = options(value, 'detached');
  const out = {};
  for (const k of ['provider', 'model']) {
    if (o[k] === undefined) continue;
    if (typeof o[k] !== 'string' || o[k] === '') throw shape(`detached.${k} must be a non-empty string`);
    out[k] = o[k];
  }
  if (o.piArgs !== undefined) {
    if (!Array.isArray(o.piArgs) || !o.piArgs.every((a) => typeof a === 'string')) throw shape('detached.piArgs must be an array of strings');
    out.pi_args = o.piArgs;
  }
  return out;
}

function options(value, what) {
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    throw shape(`${what} needs an options object`);
  }
  return value;
}

/**
 * `timeoutMs`: a positive number, `null` (no deadline), a function of the node context
 * returning either, or, for the default, nothing. A number or `null` goes into the graph
 * snapshot; a function is called by the child when each attempt of the node starts, and the
 * deadline it gives travels with the message that opens the attempt: the host saves it with the
 * attempt and enforces it like a fixed one (a resumed run keeps the saved deadline; the
 * function is not called again for that attempt).
 */
function timeout(value, what, dflt) {
  if (value === undefined) return dflt ?? null;
  if (value === null) return null;
  if (typeof value === 'function') return value;
  if (typeof value === 'number' && Number.isFinite(value) && value > 0) return Math.ceil(value);
  throw shape(`${what} timeoutMs must be a positive number, null or a function of the node context, got ${String(value)}`);
}

function node(kind, fields, timeoutMs) {
  const atStart = typeof timeoutMs === 'function' ? timeoutMs : null;
  return Object.freeze({ [WORKFLOW]: 'node', kind, timeoutMs: atStart ? null : timeoutMs, timeoutAtStart: atStart, ...fields });
}

/** A pure step: `run(ctx)` returns its output. May run again after a crash. */
export function compute(spec) {
  const o = options(spec, 'compute()');
  return node('compute', { run: fn(o.run, 'compute run') }, timeout(o.timeoutMs, 'compute'));
}

const WAIT_THEN = Symbol.for('piw.wait_then');
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)$/;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration: milliseconds (a non-negative number) or text such as `'90s'`, `'5m'`, `'2h'`, `'1d'`. */
function durationMs(value, what) {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return Math.ceil(value);
  const m = typeof value === 'string' ? DURATION.exec(value.trim()) : null;
  if (m) return Math.ceil(Number(m[1]) * UNIT_MS[m[2]]);
  throw shape(`${what} must be milliseconds or a duration such as '90s', '5m', '2h', '1d', got ${JSON.stringify(value)}`);
}

/** A time: a `Date`, Unix milliseconds, or text `Date.parse` reads (ISO 8601). */
function timeMs(value, what) {
  const ms = value instanceof Date ? value.getTime() : typeof value === 'string' ? Date.parse(value) : value;
  if (typeof ms === 'number' && Number.isFinite(ms)) return Math.max(0, Math.ceil(ms));
  throw shape(`${what} must be a Date, Unix milliseconds or an ISO time, got ${JSON.stringify(value)}`);
}

/** `{ forMs }` or `{ untilMs }` from a resolved `{ for }` / `{ until }` (exactly one). */
export function wakeOf(spec, what) {
  const hasFor = spec.for !== undefined;
  if (hasFor === (spec.until !== undefined)) throw shape(`${what} needs exactly one of for and until`);
  return hasFor ? { forMs: durationMs(spec.for, `${what} for`) } : { untilMs: timeMs(spec.until, `${what} until`) };
}

/**
 * A durable wait: the run parks until a time, and the host holds the timer (no process runs
 * and no child slot is held meanwhile; it survives host restarts). `{ for }` a duration
 * (milliseconds or `'90s'`, `'5m'`, `'2h'`, `'1d'`) or `{ until }` a time (a `Date`, Unix
 * milliseconds or ISO text); either may be a function of the node context, called once when
 * the node runs: the wake time is decided then and stored, never recomputed after a crash, a
 * restart or a resume. When it comes the node succeeds with `output` (a value or a function
 * of the context, called when the node runs; default `null`) and the run goes on.
 */
export function wait(spec) {
  const o = options(spec, 'wait()');
  if ((o.for === undefined) === (o.until === undefined)) throw shape('wait() needs exactly one of for and until');
  const given = (v) => (typeof v === 'function' ? v : () => v);
  if (typeof o.for !== 'function' && o.for !== undefined) durationMs(o.for, 'wait() for');
  if (typeof o.until !== 'function' && o.until !== undefined) timeMs(o.until, 'wait() until');
  return node(
    'wait',
    {
      wakeFor: o.for === undefined ? undefined : given(o.for),
      wakeUntil: o.until === undefined ? undefined : given(o.until),
      output: given(o.output ?? null),
    },
    null,
  );
}

/**
 * What a compute node returns to wait before the run goes on: `return waitThen({ for: '5m',
 * output })` (or `{ until }`, as for `wait()`). The run parks on a durable timer the host
 * holds; when it fires, the node succeeds with `output` without running again.
 */
export function waitThen(spec) {
  const o = options(spec, 'waitThen()');
  return Object.freeze({ [WAIT_THEN]: true, ...wakeOf(o, 'waitThen()'), output: o.output ?? null });
}

/** Whether a node's result is a `waitThen(...)`. */
export function isWaitThen(value) {
  return Boolean(value && typeof value === 'object' && value[WAIT_THEN] === true);
}

/**
 * Queues a plain-text message for the session that started the run:
 * `{ kind: 'progress' | 'final', message: string | (ctx) => string }`. Output: `{ kind, message }`.
 */
export function notify(spec) {
  const o = options(spec, 'notify()');
  const kind = o.kind ?? 'progress';
  if (kind !== 'progress' && kind !== 'final') throw shape(`notify kind must be progress or final, got ${kind}`);
  return node('notify', { notifyKind: kind, message: textOrFn(o.message, 'notify message') }, null);
}

/**
 * The `expectedOutput` of an agent answered with one normal visible response; its text is the
 * node's output. `maxChars` (no default) is asked of the model.
 */
export function assistantMessage(spec = {}) {
  const maxChars = spec?.maxChars;
  if (maxChars !== undefined && !(Number.isInteger(maxChars) && maxChars > 0)) {
    throw shape(`assistantMessage maxChars must be a positive integer, got ${maxChars}`);
  }
  return Object.freeze({ [ASSISTANT_MESSAGE]: true, maxChars: maxChars ?? null });
}

/**
 * A step answered by the model in the origin Pi session: `{ prompt, expectedOutput?,
 * validate?(output, ctx), timeoutMs?, statusDetail? }`. A string submission is parsed as JSON
 * when it is JSON (also inside a ```json fence); `validate` throws to reject it or returns the
 * normalised output. With `expectedOutput: assistantMessage()` the node's output is the
 * response's text, and `validate` is not allowed (the response is already visible).
 */
export function agent(spec) {
  const o = options(spec, 'agent()');
  const prompt = textOrFn(o.prompt, 'agent prompt');
  const message = Boolean(o.expectedOutput?.[ASSISTANT_MESSAGE]);
  if (message && o.validate !== undefined) {
    throw shape('agent validate cannot be combined with expectedOutput: assistantMessage()');
  }
  if (!message && o.expectedOutput !== undefined && typeof o.expectedOutput !== 'string') {
    throw shape('agent expectedOutput must be a string or assistantMessage()');
  }
  if (o.statusDetail !== undefined && typeof o.statusDetail !== 'string') {
    throw shape('agent statusDetail must be a string');
  }
  return node(
    message ? 'assistant_message' : 'agent',
    {
      prompt,
      expectedOutput: message ? null : (o.expectedOutput ?? null),
      maxChars: message ? o.expectedOutput.maxChars : null,
      validate: optionalFn(o.validate, 'agent validate'),
      statusDetail: o.statusDetail ?? null,
    },
    timeout(o.timeoutMs, 'agent', DEFAULT_AGENT_TIMEOUT_MS),
  );
}

/**
 * An agent step that picks one of `choices`: `{ choices, question, field = 'route', ...agent
 * options }`. The model submits `{ [field]: choice, ... }`; anything else is rejected.
 */
export function decision(spec) {
  const o = options(spec, 'decision()');
  const choices = choiceList(o.choices, 'decision');
  const field = o.field ?? 'route';
  const question = textOrFn(o.question, 'decision question');
  const listed = choices.map((c) => JSON.stringify(c)).join(' | ');
  const own = optionalFn(o.validate, 'decision validate');
  return agent({
    ...o,
    prompt: async (ctx) => `${await question(ctx)}\n\nAnswer with one of: ${listed} (field "${field}").`,
    expectedOutput: `{ "${field}": ${listed} }`,
    validate: async (output, ctx) => {
      if (!output || typeof output !== 'object' || !choices.includes(output[field])) {
        throw new Error(`"${field}" must be one of ${listed}`);
      }
      return own ? await own(output, ctx) : output;
    },
  });
}

function choiceList(choices, what) {
  if (!Array.isArray(choices) || choices.length === 0 || !choices.every((c) => typeof c === 'string')) {
    throw shape(`${what} choices must be a non-empty array of strings`);
  }
  return [...choices];
}

/** The switch edge of a `decision`: one target for every choice (a missing one is an error). */
export function decisionEdge(spec) {
  const o = options(spec, 'decisionEdge()');
  const choices = choiceList(o.choices, 'decisionEdge');
  return exhaustiveSwitch('decisionEdge', o.from, `$.${o.field ?? 'route'}`, choices, o.cases);
}

function exhaustiveSwitch(what, from, on, keys, cases) {
  if (typeof from !== 'string') throw shape(`${what} from must be a node id`);
  const given = cases && typeof cases === 'object' ? cases : {};
  const missing = keys.filter((k) => typeof given[k] !== 'string');
  if (missing.length) throw shape(`${what} from ${from} has no case for ${missing.join(', ')}`);
  const extra = Object.keys(given).filter((k) => !keys.includes(k));
  if (extra.length) throw shape(`${what} from ${from} has cases that are not choices: ${extra.join(', ')}`);
  return { from, switch: { on, cases: { ...given } } };
}

/**
 * An ordinary checkpoint (`{ summary?, run? }`, or no options): answered with any JSON, the
 * node's output. Without `summary`, the request says which node waits.
 */
export function checkpoint(spec = {}) {
  const o = options(spec, 'checkpoint()');
  const summary = o.summary === undefined ? ({ state }) => `${state.node} waits for an answer` : textOrFn(o.summary, 'checkpoint summary');
  return node('checkpoint', { summary, run: optionalFn(o.run, 'checkpoint run') }, null);
}

/** One choice of a human decision: `{ label, description?, input?: textInput(...) }`. */
export function choice(spec) {
  const o = options(spec, 'choice()');
  if (typeof o.label !== 'string' || o.label === '') throw shape('choice label must be a non-empty string');
  if (o.description !== undefined && typeof o.description !== 'string') {
    throw shape('choice description must be a string');
  }
  if (o.input !== undefined && o.input?.kind !== 'text') throw shape('choice input must be made with textInput()');
  return Object.freeze({ label: o.label, description: o.description, input: o.input });
}

/** The text a choice collects: `{ name, prompt, placeholder?, minLength?, maxLength? }`. */
export function textInput(spec) {
  const o = options(spec, 'textInput()');
  if (typeof o.name !== 'string' || !ID.test(o.name)) throw shape('textInput name must be an identifier');
  if (typeof o.prompt !== 'string') throw shape('textInput prompt must be a string');
  for (const k of ['minLength', 'maxLength']) {
    if (o[k] !== undefined && !(Number.isInteger(o[k]) && o[k] >= 0)) {
      throw shape(`textInput ${k} must be a non-negative integer`);
    }
  }
  return Object.freeze({
    kind: 'text',
    name: o.name,
    prompt: o.prompt,
    placeholder: o.placeholder,
    minLength: o.minLength,
    maxLength: o.maxLength,
  });
}

/** The choices of a human decision, by id: `defineHumanChoices({ continue: choice(...), ... })`. */
export function defineHumanChoices(choices) {
  const o = options(choices, 'defineHumanChoices()');
  const ids = Object.keys(o);
  if (ids.length === 0) throw shape('defineHumanChoices needs at least one choice');
  for (const id of ids) {
    if (!ID.test(id)) throw shape(`choice id ${JSON.stringify(id)} must match [A-Za-z_][A-Za-z0-9_-]*`);
    if (!o[id] || typeof o[id].label !== 'string') throw shape(`choice ${id} must be made with choice()`);
  }
  return Object.freeze({ [CHOICES]: true, ...o });
}

const choiceIds = (choices) => Object.keys(choices);

/**
 * Checks a person's (or the timeout's) response against the choices and returns the node's
 * output: `{ choice }`, or `{ choice, input: { [name]: text } }` for a choice with text input.
 */
export function humanResponse(choices, response) {
  const id = response?.choice;
  if (typeof id !== 'string' || !Object.hasOwn(choices, id)) {
    throw new Error(`choice must be one of ${choiceIds(choices).join(', ')}, got ${JSON.stringify(id ?? null)}`);
  }
  const input = choices[id].input;
  if (!input) return { choice: id };
  const text = response.text ?? response.input?.[input.name] ?? null;
  if (typeof text !== 'string') throw new Error(`choice ${id} needs the text "${input.prompt}"`);
  if (input.minLength !== undefined && text.length < input.minLength) {
    throw new Error(`${input.name} must have at least ${input.minLength} characters`);
  }
  if (input.maxLength !== undefined && text.length > input.maxLength) {
    throw new Error(`${input.name} must have at most ${input.maxLength} characters`);
  }
  return { choice: id, input: { [input.name]: text } };
}

/**
 * Checks an `onTimeout` policy (`{ afterMs, response }`) against the choices; returns it
 * normalised, or throws an `Error` saying what is wrong.
 */
export function checkOnTimeout(choices, value) {
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error('onTimeout must be { afterMs, response }');
  if (!(typeof value.afterMs === 'number' && Number.isFinite(value.afterMs) && value.afterMs > 0)) {
    throw new Error('onTimeout.afterMs must be a positive number');
  }
  try {
    humanResponse(choices, value.response);
  } catch (e) {
    throw new Error(`onTimeout.response: ${e.message}`);
  }
  return { afterMs: Math.ceil(value.afterMs), response: value.response };
}

/**
 * A decision only a person may answer: `{ choices: defineHumanChoices(...), audience?,
 * request?(ctx) => { title?, subject?, presentation?, revision?, expiresAt? }, onTimeout?: {
 * afterMs, response } }`. `audience` may be a function of the node context and `onTimeout` one
 * returning the policy or `undefined`: both are called when the attempt opens, and the request,
 * the deadline and the response are saved with it. Output: `{ choice, provenance }` or `{
 * choice, input, provenance }` (see `humanResponse`), `provenance` being `human`, or `timeout`
 * when nobody answered before `afterMs`.
 */
export function humanDecision(spec) {
  const o = options(spec, 'humanDecision()');
  if (!o.choices?.[CHOICES]) throw shape('humanDecision choices must be made with defineHumanChoices()');
  if (o.audience !== undefined && typeof o.audience !== 'string' && typeof o.audience !== 'function') {
    throw shape('humanDecision audience must be a string or a function of the node context');
  }
  let onTimeout = null;
  if (typeof o.onTimeout === 'function') {
    onTimeout = o.onTimeout;
  } else if (o.onTimeout !== undefined) {
    try {
      onTimeout = checkOnTimeout(o.choices, o.onTimeout);
    } catch (e) {
      throw shape(`humanDecision ${e.message}`);
    }
  }
  const request = optionalFn(o.request, 'humanDecision request');
  // The request (and with it the deadline: `onTimeout`'s, or the request's `expiresAt`) is
  // decided when the attempt opens whenever code decides it; a fixed `onTimeout` alone is a
  // fixed deadline in the graph. The host expires the decision at the deadline (also when it
  // passed while the host was down) and answers with the saved `onTimeout.response`.
  const decidedAtStart = typeof onTimeout === 'function' || request !== undefined;
  return node(
    'human_decision',
    { choices: o.choices, audience: o.audience ?? null, request, onTimeout },
    decidedAtStart ? DECIDED_WITH_REQUEST : onTimeout ? onTimeout.afterMs : null,
  );
}

/**
 * The `timeoutMs` of a human decision whose request decides its deadline: the runtime builds
 * the request when the attempt opens and takes the deadline from it.
 */
export const DECIDED_WITH_REQUEST = Object.freeze(() => {
  throw new Error('a human decision decides its deadline with its request');
});

/** The switch edge of a `humanDecision`: one target for every choice. */
export function humanDecisionEdge(spec) {
  const o = options(spec, 'humanDecisionEdge()');
  if (!o.choices?.[CHOICES]) throw shape('humanDecisionEdge choices must be made with defineHumanChoices()');
  return exhaustiveSwitch('humanDecisionEdge', o.from, '$.choice', choiceIds(o.choices), o.cases);
}

function effect(type, retry) {
  if (typeof type !== 'string' || type === '') throw shape('an effect type must be a non-empty string');
  return Object.freeze({ [EFFECT]: true, type, retry });
}

/**
 * An effect another attempt may safely repeat (a stable external idempotency key, or a
 * read-back check): after a child dies mid-effect, the host lets the next child apply it
 * again, and `ctx.effect.retry` says so.
 */
export function idempotentEffect(type) {
  return effect(type, 'idempotency_key');
}

/**
 * An effect nobody can prove applied or not after a crash: the host marks it uncertain and
 * stops the run for review; it is never retried automatically.
 */
export function manualEffect(type) {
  return effect(type, 'never');
}

/**
 * A managed side effect: `{ effect?: idempotentEffect(type) | manualEffect(type), run(ctx),
 * timeoutMs? }`; no `effect` is `manualEffect('action')` (`manualEffect('shell')` for a command). The host reserves the effect (keyed by run, effect type, node path and visit)
 * before `run` starts; `run`'s return value is the receipt and the node's output. `run` gets
 * `ctx.publishUpdate(update)` for durable progress updates. An exception from `run` settles the
 * effect failed and fails the node; a crash in the middle leaves it in doubt (see the effect).
 */
export function action(spec) {
  const o = options(spec, 'action()');
  // Without a declared effect, the action is a manual one: piw cannot know whether applying it
  // twice is safe, so a crash in the middle stops the run for review instead of retrying it.
  const declared = o.effect ?? manualEffect(o.exec === undefined ? 'action' : 'shell');
  if (!declared?.[EFFECT]) {
    throw shape('action effect must be idempotentEffect(type) or manualEffect(type) (or left out: a manual effect)');
  }
  if ((o.run === undefined) === (o.exec === undefined)) throw shape('action needs exactly one of run and exec');
  const shellFields =
    o.exec === undefined
      ? {}
      : {
          exec: fn(o.exec, 'shell exec'),
          parse: optionalFn(o.parse, 'shell parse'),
          parseLine: optionalFn(o.updates?.parseLine, 'shell updates.parseLine'),
          streams: streams(o.updates?.streams),
        };
  return node(
    'action',
    { effect: declared, retry: declared.retry, run: optionalFn(o.run, 'action run'), ...shellFields },
    timeout(o.timeoutMs, 'action', DEFAULT_ACTION_TIMEOUT_MS),
  );
}

/** The output streams `updates.parseLine` reads: `['stdout', 'stderr']` unless given. */
function streams(value) {
  if (value === undefined) return ['stdout', 'stderr'];
  if (!Array.isArray(value) || value.length === 0 || !value.every((v) => v === 'stdout' || v === 'stderr')) {
    throw shape('shell updates.streams must be a non-empty array of "stdout" and "stderr"');
  }
  return [...new Set(value)];
}

/**
 * A command the workflow owns, run as a managed effect: `{ effect?, exec(ctx) => { command,
 * args?, cwd?, env?, stdin?, shell?, timeoutMs?, allowNonZeroExit?, maxOutputChars? },
 * parse?(result, ctx), updates?: { streams?, parseLine({ stream, text }, ctx) }, timeoutMs? }`.
 * The output is `parse`'s value, else the result `{ command, args, cwd, stdout, stderr,
 * exitCode, signal, durationMs, truncated }`; a non-zero exit
 * fails the node unless `allowNonZeroExit`. The command runs in its own process group, killed
 * whole at its timeout and when the run is stopped.
 */
export function shell(spec) {
  const o = options(spec, 'shell()');
  if (o.exec === undefined) throw shape('shell needs exec');
  return action(o);
}

const INCLUDE = Symbol.for('piw.include');

/**
 * Mounts another workflow under a name of `includes`: `includeWorkflow(child, { input?: (ctx)
 * => childInput })`, `child` being a workflow made by `defineWorkflow` and imported directly, or
 * a reference resolved before the run's first node: a discovered name (`"repair"`: the
 * project's `.pi/workflows/`, then `~/.pi/agent/workflows/`, then the built-ins), a built-in
 * (`"builtin:autoplan"`) or a path (`"./repair.workflow.ts"`, relative to the including file). The reference's form `includeWorkflow({ workflow, input })`
 * works too. Its nodes become `<mount>.<node>`; an edge to the mount enters it at its
 * `startAt`, and `<mount>.<exit>` is where it leaves through one of its `exits`. Without
 * `input`, the child gets the parent's input.
 */
export function includeWorkflow(workflow, spec = {}) {
  if (workflow && typeof workflow === 'object' && !isWorkflow(workflow) && Object.hasOwn(workflow, 'workflow')) {
    return includeWorkflow(workflow.workflow, workflow);
  }
  const input = optionalFn(spec?.input, 'includeWorkflow input');
  const contract = spec?.contract;
  if (contract !== undefined && !isWorkflow(contract)) throw shape('includeWorkflow contract must be a workflow made by defineWorkflow');
  if (typeof workflow === 'string') {
    if (workflow.trim() === '') throw shape('includeWorkflow needs a workflow, a name or a path');
    return Object.freeze({ [INCLUDE]: true, reference: workflow.trim(), input, contract });
  }
  if (!isWorkflow(workflow)) {
    throw shape('includeWorkflow needs a workflow made by defineWorkflow, a discovered name or a path');
  }
  return Object.freeze({ [INCLUDE]: true, workflow, input });
}

/**
 * The result of an included workflow, as its mount's output holds it: `{ exit, output }`, with
 * `exit` one of the child's exits.
 */
export function includedResult(workflow, value) {
  if (!isWorkflow(workflow)) throw new TypeError('includedResult needs the included workflow');
  const exits = workflow.exits ?? workflow.definition?.exits ?? {};
  if (!value || typeof value !== 'object' || !Object.hasOwn(exits, value.exit)) {
    throw new TypeError(`not a result of ${workflow.name}: ${JSON.stringify(value)}`);
  }
  return value;
}

/** Rewrites one edge target: a mount name enters the mount at its start node. */
function target(id, entries) {
  return Object.hasOwn(entries, id) ? entries[id] : id;
}

/** Rewrites an edge's source: `<mount>.<exit>` leaves from the exit's node. */
function source(id, leaves) {
  return Object.hasOwn(leaves, id) ? leaves[id] : id;
}

/**
 * The route's path as the graph reads it: the reference's `$result.output.<path>` is the node's
 * output, which the graph names `$output.<path>`.
 */
function routePath(on) {
  return typeof on === 'string' && on.startsWith('$result.output.') ? `$output.${on.slice('$result.output.'.length)}` : on;
}

function rewriteEdge(edge, from, to) {
  if (edge.to !== undefined) return { from: from(edge.from), to: to(edge.to) };
  const sw = edge.switch;
  return {
    from: from(edge.from),
    switch: {
      on: routePath(sw.on),
      cases: Object.fromEntries(Object.entries(sw.cases ?? {}).map(([k, v]) => [k, to(v)])),
      ...(sw.default === undefined ? {} : { default: to(sw.default) }),
    },
  };
}

function checkEdge(edge, index) {
  if (!edge || typeof edge !== 'object') throw shape(`edge ${index} must be an object`);
  if (typeof edge.from !== 'string') throw shape(`edge ${index} needs from (a node id)`);
  if ((edge.to === undefined) === (edge.switch === undefined)) {
    throw shape(`edge ${index} from ${edge.from} needs exactly one of to and switch`);
  }
  return edge;
}

/**
 * Defines a workflow: `{ name, title?, presentationPrompt?, startAt, nodes, edges, includes?,
 * exits?, maxSteps?, input?, source?, contractId?, detached? }` (`detached`: `{ provider?, model?,
 * piArgs? }`, the Pi model that serves its steps when a run is detached). Shape errors are thrown at once; graph errors (unknown
 * targets, two outgoing edges, unreachable nodes) too, each naming the node, before any run.
 */
export function defineWorkflow(def) {
  const o = options(def, 'defineWorkflow()');
  if (typeof o.name !== 'string' || !ID.test(o.name)) {
    throw shape(`workflow name must match [A-Za-z_][A-Za-z0-9_-]*, got ${JSON.stringify(o.name)}`);
  }
  if (typeof o.startAt !== 'string') throw shape('defineWorkflow needs startAt (the first node id)');
  if (!o.nodes || typeof o.nodes !== 'object' || Object.keys(o.nodes).length === 0) {
    throw shape('defineWorkflow needs at least one node');
  }
  if (!Array.isArray(o.edges)) throw shape('defineWorkflow needs edges (an array, may be empty)');
  for (const k of ['source', 'contractId']) {
    if (o[k] !== undefined && typeof o[k] !== 'string') throw shape(`${k} must be a string`);
  }
  if (o.contractId !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(o.contractId)) {
    throw shape(`contractId must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}, got ${JSON.stringify(o.contractId)}`);
  }
  const detached = detachedOf(o.detached);
  const maxSteps = o.maxSteps;
  if (maxSteps !== undefined && !(Number.isInteger(maxSteps) && maxSteps > 0)) {
    throw shape(`maxSteps must be a positive integer, got ${maxSteps}`);
  }
  for (const [mount, inc] of Object.entries(o.includes ?? {})) {
    if (!inc?.[INCLUDE]) throw shape(`includes.${mount} must be made with includeWorkflow()`);
  }
  const unresolved = Object.values(o.includes ?? {}).some((inc) => inc.reference !== undefined || inc.workflow.pending);
  if (unresolved) {
    // An include by name or path (here or in a workflow it includes) is resolved, and the graph
    // compiled, when the run loads the workflow (`resolveIncludes`), before its first node.
    return Object.freeze({
      [WORKFLOW]: 'workflow',
      pending: true,
      name: o.name,
      source: o.source ?? null,
      definition: Object.freeze({ ...o }),
    });
  }
  // Flattened: the workflow's own nodes, then every included workflow's under its mount path.
  const impls = {};
  /** Flat node id -> the mounts it is inside, outermost first: `[{ path, include }]`. */
  const scopes = {};
  /** Flat node id -> `{ path, exit }` for the node an included workflow leaves from. */
  const exitNodes = {};
  for (const [id, n] of Object.entries(o.nodes)) {
    if (!ID.test(id)) throw shape(`node id ${JSON.stringify(id)} must match [A-Za-z_][A-Za-z0-9_-]*`);
    if (!n || n[WORKFLOW] !== 'node') {
      throw shape(`node ${id} must be made with compute(), agent(), action(), checkpoint(), ...`);
    }
    impls[id] = n;
    scopes[id] = [];
  }
  const entries = {};
  const leaves = {};
  const mountedEdges = [];
  /** Mount path -> `{ max_steps? }`: each included workflow's own limit bounds one invocation. */
  const mounts = {};
  for (const [mount, inc] of Object.entries(o.includes ?? {})) {
    if (!ID.test(mount)) throw shape(`mount name ${JSON.stringify(mount)} must match [A-Za-z_][A-Za-z0-9_-]*`);
    if (Object.hasOwn(o.nodes, mount)) throw shape(`mount ${mount} has the name of a node`);
    const child = inc.workflow;
    const at = (id) => `${mount}.${id}`;
    for (const [id, n] of Object.entries(child.nodes)) {
      impls[at(id)] = n;
      scopes[at(id)] = [{ path: mount, include: inc }, ...child.scopes[id].map((sc) => ({ ...sc, path: at(sc.path) }))];
      if (child.exitNodes[id]) exitNodes[at(id)] = { ...child.exitNodes[id], path: at(child.exitNodes[id].path) };
    }
    for (const [exit, spec] of Object.entries(child.exits)) {
      exitNodes[at(spec.from)] = { path: mount, exit, validate: spec.validate };
      leaves[`${mount}.${exit}`] = at(spec.from);
    }
    entries[mount] = at(child.graph.start);
    mounts[mount] = child.graph.max_steps === undefined ? {} : { max_steps: child.graph.max_steps };
    for (const [path, spec] of Object.entries(child.graph.mounts ?? {})) mounts[at(path)] = spec;
    mountedEdges.push(...child.graph.edges.map((e) => rewriteEdge(e, at, at)));
  }
  const exits = {};
  for (const [name, spec] of Object.entries(o.exits ?? {})) {
    if (!ID.test(name)) throw shape(`exit name ${JSON.stringify(name)} must match [A-Za-z_][A-Za-z0-9_-]*`);
    if (!spec || typeof spec.from !== 'string' || !Object.hasOwn(impls, spec.from)) {
      throw shape(`exit ${name} needs from: one of the workflow's nodes`);
    }
    exits[name] = Object.freeze({ from: spec.from, validate: optionalFn(spec.validate, `exit ${name} validate`) });
  }
  const nodes = {};
  for (const [id, n] of Object.entries(impls)) {
    nodes[id] = {
      kind: n.kind,
      ...(n.timeoutMs === null ? {} : { timeout_ms: n.timeoutMs }),
      ...(n.timeoutAtStart ? { timeout_at_start: true } : {}),
      ...(n.kind === 'action' ? { retry: n.retry } : {}),
    };
  }
  // An edge from `<mount>.<name>` where `name` is no exit of the included workflow (an exit
  // renamed in a newer version, say) is refused naming the exits it has.
  for (const [index, e] of o.edges.entries()) {
    if (typeof e?.from !== 'string' || !e.from.includes('.')) continue;
    const mount = e.from.split('.')[0];
    if (Object.hasOwn(o.includes ?? {}, mount) && !Object.hasOwn(leaves, e.from) && !Object.hasOwn(impls, e.from)) {
      const names = Object.keys(o.includes[mount].workflow.exits);
      throw shape(`edge ${index} from ${e.from}: ${o.includes[mount].workflow.name} (mount ${mount}) has no exit ${JSON.stringify(e.from.slice(mount.length + 1))}; its exits are ${names.map((n) => `${mount}.${n}`).join(', ')}`);
    }
  }
  const edges = [
    ...o.edges.map(checkEdge).map((e) => rewriteEdge(e, (id) => source(id, leaves), (id) => target(id, entries))),
    ...mountedEdges,
  ];
  const snapshot = {
    name: o.name,
    start: target(o.startAt, entries),
    nodes,
    edges,
    ...(maxSteps === undefined ? {} : { max_steps: maxSteps }),
    ...(Object.keys(mounts).length ? { mounts } : {}),
    ...(detached ? { detached } : {}),
    // Carried by the snapshot to the run's terminal message (the client presents the result with it).
    ...(typeof o.presentationPrompt === 'string' && o.presentationPrompt.trim() !== '' ? { presentation_prompt: o.presentationPrompt } : {}),
  };
  const { snapshot: graph, digest } = native(() => addon.compileGraph(snapshot));
  return Object.freeze({
    [WORKFLOW]: 'workflow',
    name: o.name,
    title: o.title === undefined ? null : textOrFn(o.title, 'title'),
    presentationPrompt: presentationPromptOf(o.presentationPrompt),
    input: optionalFn(o.input, 'input'),
    source: o.source ?? null,
    contractId: o.contractId ?? null,
    graph,
    digest,
    nodes: Object.freeze(impls),
    scopes: Object.freeze(scopes),
    exitNodes: Object.freeze(exitNodes),
    exits: Object.freeze(exits),
  });
}

/**
 * The workflow with every include by name or path resolved, at every level, and its graph
 * compiled: `workflow` itself when it has none. `load(reference, fromFile)` resolves one
 * reference made in the file `fromFile` and resolves with `{ file, workflow }`. A workflow that
 * includes itself, directly or through others, is refused with the whole chain of mounts.
 * `file` is where `workflow` was loaded from (for references relative to it and the chain).
 */
export async function resolveIncludes(workflow, file, load) {
  const where = (wf, f) => f ?? wf.source ?? wf.name;
  async function resolve(wf, wfFile, chain) {
    if (!wf.pending) return wf;
    const includes = {};
    for (const [mount, inc] of Object.entries(wf.definition.includes ?? {})) {
      let child = inc.workflow;
      let childFile = child ? sourceFile(child.source) : null;
      if (inc.reference !== undefined) {
        ({ workflow: child, file: childFile } = await load(inc.reference, wfFile));
        if (!isWorkflow(child)) throw shape(`includes.${mount}: ${childFile} must export default defineWorkflow({...})`);
        if (inc.contract) checkContract(mount, inc.contract, child, childFile);
      }
      const link = { mount, file: childFile, workflow: child };
      const seen = chain.findIndex((c) => c.workflow === child || (childFile !== null && c.file === childFile));
      if (seen >= 0) {
        const path = [...chain.slice(seen), link];
        const steps = path.map((c, i) => (i === 0 ? where(c.workflow, c.file) : `(includes.${c.mount}) ${where(c.workflow, c.file)}`));
        throw shape(`workflow source cycle: ${steps.join(' -> ')}; a workflow cannot include itself, directly or through others`);
      }
      includes[mount] = includeWorkflow(await resolve(child, childFile ?? wfFile, [...chain, link]), { input: inc.input });
    }
    return defineWorkflow({ ...wf.definition, includes });
  }
  return resolve(workflow, file, [{ mount: null, file, workflow }]);
}

/** What a workflow promises an includer: its contract id, exit names and whether it takes input. */
function contractOf(wf) {
  const def = wf.pending ? wf.definition : wf;
  return {
    contractId: (wf.pending ? def.contractId : wf.contractId) ?? null,
    exits: Object.keys(def.exits ?? {}).sort(),
    input: Boolean(def.input),
  };
}

/**
 * A workflow an include resolved by name or path against the contract the includer gave (a
 * workflow, `includeWorkflow(ref, { contract })`): the same `contractId` when the contract has
 * one, the same exit names, and both taking input or neither.
 */
function checkContract(mount, contract, child, file) {
  const want = contractOf(contract);
  const got = contractOf(child);
  const where = `includes.${mount} (${file})`;
  if (want.contractId !== null && want.contractId !== got.contractId) {
    throw shape(`${where}: contract mismatch: expected ${want.contractId}, got ${got.contractId ?? 'none'}`);
  }
  if (want.exits.join(',') !== got.exits.join(',')) {
    throw shape(`${where}: exit contract mismatch: expected ${want.exits.join(', ') || 'none'}, got ${got.exits.join(', ') || 'none'}`);
  }
  if (want.input !== got.input) {
    throw shape(`${where}: input contract mismatch: the contract ${want.input ? 'takes' : 'takes no'} input, the workflow ${got.input ? 'does' : 'does not'}`);
  }
}

/**
 * A named set of workflows (`{ key: defineWorkflow(...) }`), checked: every entry made by
 * `defineWorkflow`, no two with the same name. Returns it frozen.
 */
export function defineWorkflowRegistry(registry) {
  const o = options(registry, 'defineWorkflowRegistry()');
  const names = new Set();
  for (const [key, wf] of Object.entries(o)) {
    if (!isWorkflow(wf)) throw shape(`workflow registry entry ${key} must be made with defineWorkflow`);
    if (names.has(wf.name)) throw shape(`workflow registry has two workflows named ${wf.name}`);
    names.add(wf.name);
  }
  return Object.freeze({ ...o });
}

function sourceFile(source) {
  if (typeof source !== 'string') return null;
  if (!source.startsWith('file:')) return source;
  try {
    return decodeURIComponent(new URL(source).pathname);
  } catch {
    return null;
  }
}

/** Whether `value` was made by `defineWorkflow`. */
export function isWorkflow(value) {
  return Boolean(value) && value[WORKFLOW] === 'workflow';
}
