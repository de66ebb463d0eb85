// Compiled by `tsc --noEmit` (tsconfig.json): controllers.d.ts must describe how
// `piw/controllers` is used (this file is type-checked, not run).
import {
  conditionFalse,
  conditionTrue,
  conditionUnknown,
  defineController,
  MemoryBackend,
  requeueAfter,
  runReconcilePass,
  settled,
  type ControllerResource,
  type EffectRecord,
} from 'piw/controllers';

type Spec = { number: number; expectedHeadSha: string };
type Status = { phase: 'watching' | 'merged' };

const controller = defineController<Spec, Status>({
  name: 'pull-request',
  initialStatus: () => ({ phase: 'watching' }),
  async reconcile(ctx, resource) {
    const n: number = resource.spec.number;
    ctx.log.info('looking', { n });
    ctx.setCondition(conditionUnknown('Ready', 'Looking'));
    const run = await ctx.workflows.ensure({ requestKey: `review:${resource.metadata.generation}`, workflow: 'review', input: { n } });
    if (run.state !== 'succeeded') return ctx.requeueAfter(1000, { workflowRun: { requestId: run.requestId, state: run.state, attempt: run.attempt } });
    const effect: EffectRecord = await ctx.effects.ensure({
      key: `merge:${resource.spec.expectedHeadSha}`,
      kind: 'merge',
      request: { n },
      observe: () => ({ state: 'not_applied' }),
      apply: async (signal) => (signal.aborted ? { state: 'indeterminate' } : { state: 'applied', externalRef: 'x' }),
    });
    if (effect.state === 'rejected') return ctx.settled({ conditions: [conditionFalse('Ready', 'Rejected', effect.error)] });
    return ctx.settled({ controllerStatus: { phase: 'merged' }, conditions: [conditionTrue('Ready', 'Merged')] });
  },
});
// @ts-expect-error a controller status the definition's type does not allow
defineController<Spec, Status>({ name: 'x', initialStatus: () => ({ phase: 'other' }), reconcile: () => settled() });
requeueAfter(5);

const backend = new MemoryBackend();
const resource: ControllerResource<Spec, Status> = backend.putResource(controller, 'k', { number: 1, expectedHeadSha: 'abc' });
const outcome = await runReconcilePass({ definition: controller, resource, backend, deadlineMs: 1000 });
if (outcome.kind === 'requeue') {
  const after: number | undefined = outcome.afterMs;
  const phase: 'watching' | 'merged' = outcome.status.controllerStatus.phase;
  void after;
  void phase;
} else if (outcome.kind === 'error') {
  const message: string = outcome.message;
  void message;
}
export {};
