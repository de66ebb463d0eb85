// A pure pipeline: compute nodes, each reading the outputs of the nodes before it, and a
// switch on an output. Every node may rerun after a crash, so none touches the outside world.
//
//   piw run start examples/pipeline.workflow.mjs --input '{"text":"..."}' --wait
import { compute, defineWorkflow } from '@osolmaz/pi-workflows';

export default defineWorkflow({
  name: 'pipeline',
  title: ({ input }) => `pipeline: ${String(input?.text ?? '').slice(0, 40)}`,
  startAt: 'tokenize',
  nodes: {
    tokenize: compute({
      run: ({ input }) => ({ words: String(input?.text ?? '').toLowerCase().match(/[a-z']+/g) ?? [] }),
    }),
    count: compute({
      run: ({ outputs }) => {
        const { words } = outputs.tokenize;
        const counts = {};
        for (const w of words) counts[w] = (counts[w] ?? 0) + 1;
        const top = Object.entries(counts)
          .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
          .slice(0, 3);
        return { total: words.length, distinct: Object.keys(counts).length, top };
      },
    }),
    classify: compute({ run: ({ outputs }) => ({ ...outputs.count, size: outputs.count.total >= 20 ? 'long' : 'short' }) }),
    summarizeLong: compute({
      run: ({ outputs: { classify: s } }) => ({ ...s, summary: `a long text: ${s.total} words, ${s.distinct} distinct` }),
    }),
    summarizeShort: compute({ run: ({ outputs: { classify: s } }) => ({ ...s, summary: `a short text: ${s.total} words` }) }),
  },
  edges: [
    { from: 'tokenize', to: 'count' },
    { from: 'count', to: 'classify' },
    { from: 'classify', switch: { on: '$output.size', cases: { long: 'summarizeLong', short: 'summarizeShort' } } },
  ],
});
