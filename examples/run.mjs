// Runs one workflow end to end through the Node client and prints its result:
//   node examples/run.mjs <workflow file> [input JSON]
// The host is started on demand for PIW_HOME (an absolute path; default ~/.pi/agent/piw).
import { Client } from '../node-binding/index.js';

const [file, inputText] = process.argv.slice(2);
if (!file) {
  console.error('usage: node examples/run.mjs <workflow file> [input JSON]');
  process.exit(2);
}
let client;
try {
  client = await Client.connect();
} catch (err) {
  // A host that cannot start says why (for example a database of another piw build, with
  // what to do about it): show that, not a stack trace.
  console.error(`piw: ${err.message} [${err.code ?? 'error'}]`);
  process.exit(1);
}
try {
  const { run_id: runId } = await client.startRun(file, { input: inputText ? JSON.parse(inputText) : null });
  const run = await client.waitForRun(runId, { timeoutMs: 60_000 });
  console.log(JSON.stringify({ run_id: runId, status: run.status, result: run.result ?? null, error: run.error ?? null }, null, 2));
  process.exitCode = run.status === 'completed' ? 0 : 1;
} finally {
  await client.close();
}
