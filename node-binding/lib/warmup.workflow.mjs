// Loaded by a standby worker while it waits for its run (see `warmUp` in runtime.js): the
// runtime's own code paths run once, so the run's first import, graph compile and routing do
// not pay for cold code. Not a user workflow; nothing runs its nodes.
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
