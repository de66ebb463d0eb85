// TypeScript, loaded as it is (Node strips the types): a model `decision` routed with
// `decisionEdge`, then an explanation in the model's own words (`assistantMessage()`).
import { agent, assistantMessage, compute, decision, decisionEdge, defineWorkflow } from '@osolmaz/pi-workflows';

type Input = { report: string };
const severities = ['urgent', 'later'] as const;

export default defineWorkflow({
  name: 'triage',
  startAt: 'classify',
  input: (raw: unknown): Input => {
    const report = (raw as { report?: unknown } | null)?.report;
    if (typeof report !== 'string' || report === '') throw new Error('input.report must be a non-empty string');
    return { report };
  },
  nodes: {
    classify: decision({
      choices: [...severities],
      question: ({ input }) => `How urgent is this bug report? ${(input as Input).report}`,
    }),
    explain: agent({
      prompt: ({ input }) => `Explain in two sentences why this needs attention now: ${(input as Input).report}`,
      expectedOutput: assistantMessage({ maxChars: 600 }),
    }),
    queue: compute({ run: ({ input }) => ({ queued: (input as Input).report }) }),
    done: compute({ run: ({ outputs }) => ({ urgent: true, explanation: outputs.explain }) }),
  },
  edges: [
    decisionEdge({ from: 'classify', choices: [...severities], cases: { urgent: 'explain', later: 'queue' } }),
    { from: 'explain', to: 'done' },
  ],
});
