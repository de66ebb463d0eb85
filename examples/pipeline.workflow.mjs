// A pure pipeline: four compute nodes and a switch on the output. Every node may rerun after a
// crash, so none of them touches the outside world.
//
//   piw run start examples/pipeline.workflow.mjs --input '{"text":"..."}' --wait
import { defineWorkflow, compute, to, switchOn } from '../node-binding/index.js';

export default defineWorkflow({
  name: 'pipeline',
  start: 'tokenize',
  nodes: {
    tokenize: compute((input) => ({
      words: String(input?.text ?? '').toLowerCase().match(/[a-z']+/g) ?? [],
    })),
    count: compute(({ words }) => {
      const counts = {};
      for (const w of words) counts[w] = (counts[w] ?? 0) + 1;
      const top = Object.entries(counts)
        .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
        .slice(0, 3);
      return { total: words.length, distinct: Object.keys(counts).length, top };
    }),
    classify: compute((stats) => ({ ...stats, size: stats.total >= 20 ? 'long' : 'short' })),
    summarizeLong: compute((s) => ({ ...s, summary: `a long text: ${s.total} words, ${s.distinct} distinct` })),
    summarizeShort: compute((s) => ({ ...s, summary: `a short text: ${s.total} words` })),
  },
  edges: [
    to('tokenize', 'count'),
    to('count', 'classify'),
    switchOn('classify', '$.size', { long: 'summarizeLong' }, 'summarizeShort'),
  ],
});
