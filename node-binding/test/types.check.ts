// Compiled by `tsc --noEmit` in the test command: the declarations in index.d.ts must describe
// how the package is used (this file is type-checked, not run).
import {
  BRIDGE_EXIT,
  Client,
  PiwError,
  bridgeCommand,
  lockBridge,
  preflightBridge,
  action,
  agent,
  assistantMessage,
  checkpoint,
  choice,
  compute,
  decision,
  decisionEdge,
  defineHumanChoices,
  defineWorkflow,
  humanDecision,
  humanDecisionEdge,
  idempotentEffect,
  manualEffect,
  notify,
  shell,
  textInput,
  wait,
  waitThen,
  includeWorkflow,
  includedResult,
  type PruneResult,
  type RejectionCode,
  type Run,
  type ValueReference,
  type RunEvent,
} from '../index.js';
import { autodocWorkflow, autoplanWorkflow, planApprovalWorkflow } from '../builtins/index.js';
import { autoimplementWorkflow } from '../builtins/index.js';
import { sanityCheckWorkflow } from '../builtins/index.js';

// The codes a caller may match on are in the union (`PiwErrorCode` takes any string too, so
// only an annotation proves it).
export const lagged: RejectionCode = 'subscriber_lagged';

const choices = defineHumanChoices({
  go: choice({ label: 'Go' }),
  redo: choice({ label: 'Redo', input: textInput({ name: 'why', prompt: 'Why?' }) }),
});
const verdicts = ['y', 'n'] as const;

export const wf = defineWorkflow<{ n: number }>({
  name: 'typed',
  title: ({ input }) => `typed ${input.n}`,
  startAt: 'a',
  maxSteps: 10,
  input: (raw) => ({ n: Number((raw as { n?: unknown }).n) }),
  nodes: {
    a: compute<{ n: number }>({ run: ({ input }) => ({ n: input.n + 1 }), timeoutMs: 1000 }),
    b: action({
      effect: idempotentEffect('thing.do'),
      run: async ({ effect, publishUpdate }) => {
        await publishUpdate({ type: 'progress', key: 'all', data: { schema: 'pi-workflows.progress.v1', status: 'running', completed: 1, total: 2, unit: 'steps' } });
        return { retried: effect.retry };
      },
    }),
    c: agent<{ n: number }, { value: number }>({
      prompt: ({ input }) => `give ${input.n}`,
      expectedOutput: '{ "value": number }',
      validate: (output) => {
        if (output.value !== 42) throw new Error('must be 42');
        return { value: 42 };
      },
      timeoutMs: null,
      statusDetail: 'asking',
    }),
    d: checkpoint({ summary: 'ok?', run: ({ outputs }) => outputs.c }),
    e: decision({ choices: verdicts, question: 'same?' }),
    f: humanDecision({ choices, audience: 'operator', onTimeout: { afterMs: 1000, response: { choice: 'go' } } }),
    g: agent({ prompt: 'explain', expectedOutput: assistantMessage({ maxChars: 100 }) }),
    h: notify({ kind: 'final', message: ({ results }) => String(results.g?.outcome) }),
    i: action({ effect: manualEffect('x.y'), run: () => 1 }),
    // No effect: a manual one, as pi-workflows files are written.
    k: action({ run: async ({ publishUpdate }) => (await publishUpdate({ type: 'log', key: 'k', data: { n: 1 } })).seq }),
    l: shell({ exec: () => ({ command: 'true' }) }),
    j: shell({
      effect: idempotentEffect('git.status'),
      exec: () => ({ command: 'git', args: ['status', '--porcelain'], timeoutMs: 10_000, allowNonZeroExit: false }),
      parse: (result) => ({ dirty: result.stdout.trim().length > 0 }),
      updates: { streams: ['stdout'], parseLine: ({ stream, text }, { state }) => (text ? { type: 'log', key: `${stream}:${state.node}`, data: { text } } : null) },
    }),
  },
  edges: [
    { from: 'a', to: 'b' },
    { from: 'b', switch: { on: '$result.outcome', cases: { ok: 'c', failed: 'd' } } },
    { from: 'c', switch: { on: '$output.value', cases: { '42': 'd' } } },
    { from: 'd', to: 'e' },
    decisionEdge({ from: 'e', choices: verdicts, cases: { y: 'f', n: 'g' } }),
    humanDecisionEdge({ from: 'f', choices, cases: { go: 'h', redo: 'i' } }),
    { from: 'i', to: 'j' },
    { from: 'j', to: 'k' },
    { from: 'k', to: 'l' },
  ],
});

export const child = defineWorkflow({
  name: 'child',
  startAt: 'x',
  nodes: { x: compute({ run: () => 1 }) },
  edges: [],
  exits: { done: { from: 'x', validate: (o) => o } },
});
export const composed = defineWorkflow({
  name: 'composed',
  startAt: 'first',
  includes: { sub: includeWorkflow(child, { input: ({ outputs }) => outputs.first }) },
  nodes: {
    first: compute({ run: () => ({ n: 1 }) }),
    last: compute({ run: ({ outputs }) => includedResult<number>(child, outputs.sub).output + 1 }),
  },
  edges: [
    { from: 'first', to: 'sub' },
    { from: 'sub.done', to: 'last' },
  ],
});
export const byReference = defineWorkflow({
  name: 'by-reference',
  startAt: 'first',
  includes: {
    named: includeWorkflow('repair', { input: ({ input }) => input }),
    path: includeWorkflow({ workflow: './repair.workflow.ts', input: () => ({}) }),
  },
  nodes: {
    first: compute({
      run: () => 1,
      timeoutMs: ({ outputs }) => (outputs.first === undefined ? 60_000 : null),
    }),
  },
  edges: [{ from: 'first', to: 'named' }, { from: 'named.done', to: 'path' }],
});

export async function use(): Promise<number> {
  const client = await Client.connect({ home: '/tmp/x', start: false });
  const { run_id } = await client.startRun('x.workflow.mjs', { input: { n: 1 }, sessionId: 's' });
  const sub = await client.subscribe({ runId: run_id });
  for await (const event of sub) {
    const e: RunEvent = event;
    if (e.status === 'completed') break;
  }
  const run = await client.waitForRun(run_id, { timeoutMs: 1000, untilParked: true });
  const page = await client.listRunsPage({ unfinished: true, statuses: ['waiting'], limit: 50 });
  const next: Run[] = page.more && page.nextCursor !== null ? await client.listRuns({ cursor: page.nextCursor }) : [];
  const byPrefix: Run[] = await client.listRuns({ runIdPrefix: 'run-01', sessionId: 's' });
  const pruned: PruneResult = await client.pruneRuns({ olderThanMs: 86_400_000, statuses: ['failed'], keep: 10, dryRun: true });
  const prunedIds: string[] = pruned.runIds;
  for await (const each of client.allRuns({ sessionId: 's' })) {
    if (each.run_id === next[0]?.run_id) break;
  }
  const [interaction] = await client.listInteractions('s');
  if (interaction) {
    const { submission_id } = await client.submitInteraction(interaction, { value: 42 });
    const verdict = await client.waitForSubmission(run_id, submission_id);
    if (verdict.state === 'rejected') throw new PiwError();
  }
  const kept = await client.runStatus(run_id, { references: true });
  const stored = kept.run.result as ValueReference | null;
  if (stored?.$piw === 'value' && stored.bytes > 0) {
    const whole: unknown = await client.readValue(run_id, stored);
    const resolved: unknown = await client.resolveValue(run_id, stored);
    console.log(whole, resolved);
  }
  try {
    await client.runStatus('nope');
  } catch (e) {
    if (e instanceof PiwError && e.code === 'not_found') return 0;
    if (e instanceof PiwError && e.code === 'disconnected' && e.requestId !== undefined) {
      await client.pauseRun(run_id, { requestId: e.requestId });
    }
  }
  await client.close();
  return run.revision;
}

// The built-ins are workflows: included like any other.
defineWorkflow({
  name: 'with-builtins',
  startAt: 'plan',
  includes: {
    plan: includeWorkflow(autoplanWorkflow),
    doc: includeWorkflow(autodocWorkflow),
    approve: includeWorkflow(planApprovalWorkflow),
  },
  nodes: {},
  edges: [],
});

// autoimplement after an approved plan, as a user composes them.
defineWorkflow({
  name: 'plan-then-implement',
  startAt: 'implement',
  includes: { implement: includeWorkflow(autoimplementWorkflow, { input: () => ({ task: 't', plan: 'p' }) }) },
  nodes: {},
  edges: [],
});

// The bridge of a detached run, as the host's launcher uses it.
const bridge = bridgeCommand({ pi: '/usr/bin/pi', runId: 'run-1', provider: 'mock', model: 'mock-model' });
const bridgeArgs: string[] = bridge.args;
const bridgeDone: 0 = BRIDGE_EXIT.done;
const bridgeReady: Promise<{ provider: string; model: string }> = preflightBridge({ pi: bridge.command, provider: 'p', model: 'm' });
lockBridge('run-1').release();
void bridgeArgs;
void bridgeDone;
void bridgeReady;
// sanity-check, re-exported as pi-workflows' example does, or included.
export const sanityCheck = sanityCheckWorkflow;
defineWorkflow({ name: 'with-sanity-check', startAt: 'check', includes: { check: includeWorkflow(sanityCheckWorkflow) }, nodes: {}, edges: [] });

// Durable waits: a wait node and waitThen from a compute node's code.
{
  const nap = wait({ for: '5m', output: { checked: true } });
  const until = wait<{ at: string }>({ until: ({ input }) => input.at });
  const poll = compute({ run: () => waitThen({ until: new Date(), output: 1 }) });
  void [nap, until, poll];
  const wakesAt = (run: Run): number | null => run.wake_at;
  void wakesAt;
}
