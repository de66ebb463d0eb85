// A reconcile pass in a child process, as the host will run one: the definition loaded from its
// file, every backend call sent to the parent over IPC and answered there. A test kills this
// process part-way through a pass.
import { loadControllerFile, runReconcilePass } from '../lib/controllers/index.js';

let next = 0;
const waiting = new Map();
process.on('message', (m) => {
  if (m.type !== 'reply') return;
  const { resolve, reject } = waiting.get(m.id);
  waiting.delete(m.id);
  if (m.error) reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
  else resolve(m.value);
});
const call = (method) => (req) =>
  new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    process.send({ type: 'call', id, method, req });
  });
const backend = Object.fromEntries(['recordEffect', 'effect', 'settleEffect', 'ensureWorkflowRun'].map((m) => [m, call(m)]));

process.once('message', async ({ type, file, resource, deadlineMs }) => {
  if (type !== 'pass') return;
  const definition = await loadControllerFile(file);
  const outcome = await runReconcilePass({ definition, resource, backend, deadlineMs });
  process.send({ type: 'outcome', outcome });
  process.disconnect();
});
