// Workflow files written for pi-workflows 0.12.1, in the style of its docs and examples, run
// through a real host: what runs unchanged, and each difference node-binding/README.md lists.
import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { startHost } from './helpers.mjs';

let host;
let project;

before(async () => {
  host = await startHost();
  project = join(host.dir, 'project');
  mkdirSync(join(project, '.pi', 'workflows', 'lib'), { recursive: true });
});

after(async () => {
  await host?.stop();
});

/** Writes a file of the project (its `.pi/workflows/` unless the path says otherwise). */
function write(rel, text) {
  const file = join(project, rel.includes('/') ? rel : join('.pi', 'workflows', rel));
  writeFileSync(file, text);
  return file;
}

async function runToEnd(file, input = {}) {
  const c = host.client;
  return c.waitForRun((await c.startRun(file, { input })).run_id, { timeoutMs: 30_000 });
}

test('an action and a shell without effect: run as written; a child killed while applying sends the run to review, not to a retry', async () => {
  const calls = join(host.dir, 'calls.log');
  const file = write(
    'effects.workflow.ts',
    `import { action, compute, defineWorkflow, shell } from "@osolmaz/pi-workflows";
import { appendFileSync } from "node:fs";

type Input = { log: string; crash?: "action" | "shell" };

export default defineWorkflow({
  name: "effects",
  startAt: "record",
  nodes: {
    record: action({
      run: ({ input }) => {
        const { log, crash } = input as Input;
        appendFileSync(log, "record\\n");
        if (crash === "action") process.kill(process.pid, "SIGKILL");
        return { recorded: true };
      },
    }),
    announce: shell({
      exec: ({ input }) => {
        const { log, crash } = input as Input;
        return {
          command: "sh",
          args: ["-c", crash === "shell" ? 'echo shell >> "$1"; kill -9 $PPID; sleep 60' : 'echo shell >> "$1"; printf done', "sh", log],
        };
      },
    }),
    finish: compute({ run: ({ outputs }) => ({ record: outputs.record, said: (outputs.announce as { stdout: string }).stdout }) }),
  },
  edges: [
    { from: "record", to: "announce" },
    { from: "announce", to: "finish" },
  ],
});
`,
  );
  const c = host.client;
  const done = await runToEnd(file, { log: calls });
  assert.equal(done.status, 'completed', JSON.stringify(done));
  assert.deepEqual(done.result, { record: { recorded: true }, said: 'done' });
  const settled = (await c.runStatus(done.run_id)).effects;
  // A default effect's type is the node kind's word, so its key says what it was.
  assert.deepEqual(
    settled.map((e) => [e.effect_key, e.state]),
    [
      [`${done.run_id}:action:record:1`, 'applied'],
      [`${done.run_id}:shell:announce:1`, 'applied'],
    ],
  );

  for (const crash of ['action', 'shell']) {
    writeFileSync(calls, '');
    const { run_id: runId } = await c.startRun(file, { input: { log: calls, crash } });
    const stopped = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    assert.equal(stopped.status, 'review', JSON.stringify(stopped));
    const { effects, attempts } = await c.runStatus(runId);
    assert.equal(effects.at(-1).state, 'uncertain', JSON.stringify(effects));
    // Applied once, never again by another child.
    const lines = readFileSync(calls, 'utf8').split('\n').filter(Boolean);
    assert.deepEqual(lines, crash === 'action' ? ['record'] : ['record', 'shell']);
    assert.equal(attempts.filter((a) => a.node_id === (crash === 'action' ? 'record' : 'announce')).length, 1);
    await c.cancelRun(runId);
  }
});
