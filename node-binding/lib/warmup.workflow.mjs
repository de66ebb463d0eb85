// Loaded and driven by a standby worker while it waits for its run (see `warmUp` in
// runtime.js): the runtime's own code paths run once, against a stand-in for the host, so the
// run's first import, graph compile, nodes and routing do not pay for cold code. Not a user
// workflow: no host ever sees it.
import { compute, defineWorkflow } from '../index.js';

export default defineWorkflow({
  name: 'warmup',
  startAt: 'a',
  nodes: {
    a: compute({ run: () => ({ ok: true }) }),
    b: compute({ run: ({ outputs }) => outputs.a }),
    c: compute({ run: ({ outputs }) => outputs.b }),
  },
  edges: [
    { from: 'a', to: 'b' },
    { from: 'b', switch: { on: '$result.outcome', cases: { ok: 'c', failed: 'c' } } },
  ],
});
