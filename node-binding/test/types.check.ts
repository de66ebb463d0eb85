// Compiled by `tsc --noEmit` in the test command: the declarations in index.d.ts must describe
// how the package is used (this file is type-checked, not run).
import {
  Client,
  PiwError,
  action,
  agent,
  checkpoint,
  compute,
  defineWorkflow,
  onOutcome,
  switchOn,
  to,
  type RejectionCode,
  type RunEvent,
} from '../index.js';

// The codes a caller may match on are in the union (`PiwErrorCode` takes any string too, so
// only an annotation proves it).
export const lagged: RejectionCode = 'subscriber_lagged';

export const wf = defineWorkflow({
  name: 'typed',
  start: 'a',
  nodes: {
    a: compute((input: { n: number }) => ({ n: input.n + 1 }), { timeoutMs: 1000 }),
    b: action({
      effect: { key: (input: { n: number }) => `k${input.n}`, retry: 'read_back' },
      apply: (_input, ctx) => ({ retried: ctx.effect.retry }),
    }),
    c: agent<{ n: number }, { value: number }>({
      request: (input) => ({ ask: input.n }),
      validate: (result) => (result.value === 42 ? undefined : 'must be 42'),
    }),
    d: checkpoint({ request: () => ({ question: 'ok?' }) }),
  },
  edges: [to('a', 'b'), onOutcome('b', { succeeded: 'c', failed: 'd' }), switchOn('c', '$.value', { '42': 'd' })],
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
  const [interaction] = await client.listInteractions('s');
  if (interaction) {
    const { submission_id } = await client.submitInteraction(interaction, { value: 42 });
    const verdict = await client.waitForSubmission(run_id, submission_id);
    if (verdict.state === 'rejected') throw new PiwError();
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
