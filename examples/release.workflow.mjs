// Composition: the `approval` workflow is mounted as `approve`. Its nodes run as
// `approve.<node>` (the ids the host stores, and the node path of effect keys); an edge to
// `approve` enters it, and `approve.<exit>` is where it leaves. `includedResult` reads which exit
// it took. A changed approval.workflow.mjs stops a resumed run before any code runs.
import { compute, defineWorkflow, includedResult, includeWorkflow } from '@osolmaz/pi-workflows';
import approval from './approval.workflow.mjs';

export default defineWorkflow({
  name: 'release',
  startAt: 'prepare',
  includes: {
    approve: includeWorkflow(approval, { input: ({ outputs }) => ({ plan: `release ${outputs.prepare.version}` }) }),
  },
  nodes: {
    prepare: compute({ run: ({ input }) => ({ version: input?.version ?? '0.0.1' }) }),
    decided: compute({
      run: ({ outputs }) => {
        const { exit, output } = includedResult(approval, outputs.approve);
        return { version: outputs.prepare.version, exit, output };
      },
    }),
  },
  edges: [
    { from: 'prepare', to: 'approve' },
    { from: 'approve.approved', to: 'decided' },
    { from: 'approve.stopped', to: 'decided' },
    { from: 'approve.replanned', to: 'decided' },
  ],
});
