// An action with a managed effect: it appends one line to a file exactly once, even when its
// child is killed in the middle and the run resumes in a new child.
//
// The host reserves the effect (keyed by run, effect type, node and visit) before the file is
// touched. It is an `idempotentEffect`: if a child dies after appending but before the receipt
// was stored, the next child may apply it again *and is told so* (`ctx.effect.retry`), so it
// first reads the file back. With `manualEffect` the run would instead stop for review with
// the effect `uncertain`.
//
// Input: { "file": "/path/to/log", "line": "text" }. `crashAfterAppendOnce` (a marker path) makes
// the first child SIGKILL itself right after appending: the demonstration and its test.
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { action, compute, defineWorkflow, idempotentEffect } from '@osolmaz/pi-workflows';

export default defineWorkflow({
  name: 'append_once',
  startAt: 'append',
  nodes: {
    append: action({
      effect: idempotentEffect('log.append'),
      run: ({ input, state, effect }) => {
        const line = `${input.line} [run ${state.runId}]`;
        const present = () =>
          existsSync(input.file) && readFileSync(input.file, 'utf8').split('\n').includes(line);
        if (effect.retry && present()) return { appended: false, line };
        appendFileSync(input.file, `${line}\n`);
        const marker = input.crashAfterAppendOnce;
        if (marker && !existsSync(marker)) {
          writeFileSync(marker, 'crashed');
          process.kill(process.pid, 'SIGKILL');
        }
        return { appended: true, line };
      },
    }),
    report: compute({
      run: ({ input, outputs }) => ({
        ...outputs.append,
        lines: readFileSync(input.file, 'utf8').split('\n').filter(Boolean).length,
      }),
    }),
  },
  edges: [{ from: 'append', to: 'report' }],
});
