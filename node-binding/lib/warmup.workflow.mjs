// Loaded and driven by a standby worker while it waits for its run (see `warmUp` in
// runtime.js): the runtime's own code paths run once, against a stand-in for the host, so the
// run's first import, graph compile, nodes and routing do not pay for cold code. Not a user
// workflow: no host ever sees it.
import { compute, defineWorkflow, onOutcome, to } from '../index.js';

export default defineWorkflow({
  name: 'warmup',
  start: 'a',
  nodes: {
    a: compute(() => ({ ok: true })),
    b: compute((input) => input),
    c: compute((input) => input),
  },
  edges: [to('a', 'b'), onOutcome('b', { succeeded: 'c', failed: 'c' })],
});
