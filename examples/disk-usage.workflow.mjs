// A shell action: a command the workflow owns, run as a managed effect with a timeout, capped
// output and one progress update per directory it reports. `parse` turns its output into data.
//
//   piw run start examples/disk-usage.workflow.mjs --input '{"dir": "."}' --wait
import { compute, defineWorkflow, idempotentEffect, shell } from '@osolmaz/pi-workflows';

export default defineWorkflow({
  name: 'disk_usage',
  startAt: 'measure',
  nodes: {
    measure: shell({
      effect: idempotentEffect('fs.du'),
      exec: ({ input }) => ({
        command: 'du',
        args: ['-k', '-d', '1', input?.dir ?? '.'],
        timeoutMs: 30_000,
        maxOutputChars: 200_000,
      }),
      updates: {
        parseLine: ({ text }) => ({ type: 'measured', key: 'du', data: { path: text.split('\t')[1] } }),
      },
      parse: (result) =>
        result.stdout
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((line) => {
            const [kib, path] = line.split('\t');
            return { path, kib: Number(kib) };
          }),
    }),
    biggest: compute({
      run: ({ outputs }) => [...outputs.measure].sort((a, b) => b.kib - a.kib).slice(0, 3),
    }),
  },
  edges: [{ from: 'measure', to: 'biggest' }],
});
