#!/usr/bin/env node
// The Node worker runtime's entry point: the host runs `node worker.js <workflow file>` for
// `.workflow.mjs`, `.workflow.js` and `.workflow.ts` sources. The workflow file comes from the
// launch envelope on stdin (the argument is informational).
import { runWorker, warmUp } from './lib/runtime.js';
// Load the whole package now: a standby worker then waits with everything a workflow module
// imports from it already compiled, off the run's critical path.
import './index.js';

// A standby worker (started before its run was known) warms the runtime up while it waits.
const standby = process.env.PIW_STANDBY === '1';
if (standby) {
  delete process.env.PIW_STANDBY;
  await warmUp();
}
const code = await runWorker({ standby });
// Exit now: workflow code may have left timers or handles behind, and the child's job is done.
process.exit(code);
