// An action with a managed effect: it appends one line to a file exactly once, even when its
// child is killed in the middle and the run resumes in a new child.
//
// The effect is reserved before the file is touched. Its contract is `read_back`: if a child
// dies after appending but before the receipt was stored, the next child is allowed to try
// again *and told so* (`ctx.effect.retry`), and it first reads the file back to see whether
// the line is already there. Under the default contract, `never`, the run would instead stop
// for review with the effect `uncertain`.
//
// Input: { "file": "/path/to/log", "line": "text" }. `crashAfterAppendOnce` (a marker path) makes
// the first child SIGKILL itself right after appending: the demonstration and its test.
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { defineWorkflow, action, compute, to } from '../node-binding/index.js';

const tagged = (ctx, line) => `${line} [run ${ctx.runId}]`;

export default defineWorkflow({
  name: 'append_once',
  start: 'append',
  nodes: {
    append: action({
      effect: { key: (input) => `append:${input.file}`, retry: 'read_back' },
      apply: (input, ctx) => {
        const line = tagged(ctx, input.line);
        const present = () =>
          existsSync(input.file) && readFileSync(input.file, 'utf8').split('\n').includes(line);
        if (ctx.effect.retry && present()) return { appended: false, line };
        appendFileSync(input.file, `${line}\n`);
        const marker = input.crashAfterAppendOnce;
        if (marker && !existsSync(marker)) {
          writeFileSync(marker, 'crashed');
          process.kill(process.pid, 'SIGKILL');
        }
        return { appended: true, line };
      },
    }),
    report: compute((receipt, ctx) => ({
      ...receipt,
      lines: readFileSync(ctx.runInput.file, 'utf8').split('\n').filter(Boolean).length,
    })),
  },
  edges: [to('append', 'report')],
});
