// A consequential effect nobody can check afterwards: `manualEffect`. If the child dies while
// it runs, the host marks the effect uncertain and stops the run for review; it never retries
// it on its own. The action publishes durable progress updates while it works, and a failure
// routes to a notification instead of failing the run.
import { action, compute, defineWorkflow, manualEffect, notify } from '@osolmaz/pi-workflows';

export default defineWorkflow({
  name: 'deploy',
  startAt: 'plan',
  nodes: {
    plan: compute({ run: ({ input }) => ({ targets: input?.targets ?? ['a', 'b', 'c'] }) }),
    deploy: action({
      effect: manualEffect('preview.deploy'),
      timeoutMs: 60_000,
      run: async ({ outputs, publishUpdate, signal }) => {
        const { targets } = outputs.plan;
        for (const [i, target] of targets.entries()) {
          if (signal.aborted) throw new Error('stopped');
          if (target === 'broken') throw new Error(`target ${target} refused the deploy`);
          await publishUpdate({
            type: 'progress',
            key: 'overall',
            data: { schema: 'pi-workflows.progress.v1', status: 'running', completed: i + 1, total: targets.length, unit: 'targets' },
          });
        }
        return { deployed: targets };
      },
    }),
    report: notify({ kind: 'final', message: ({ outputs }) => `Deployed ${outputs.deploy.deployed.join(', ')}` }),
    refused: notify({ kind: 'final', message: ({ results }) => `Deploy failed: ${results.deploy.error}` }),
  },
  edges: [
    { from: 'plan', to: 'deploy' },
    { from: 'deploy', switch: { on: '$result.outcome', cases: { ok: 'report', failed: 'refused' } } },
  ],
});
