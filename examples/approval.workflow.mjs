// A protected human decision: only a person answers it (the model-facing tool cannot). Every
// choice is routed (`humanDecisionEdge` refuses a missing one); `replan` collects text. The
// outcome is announced to the session with `notify`.
//
// Answer from code: client.answerHumanDecision(runId, decisionId, { choice: 'replan', text: 'smaller steps' })
import {
  choice,
  compute,
  defineHumanChoices,
  defineWorkflow,
  humanDecision,
  humanDecisionEdge,
  notify,
  textInput,
} from '@osolmaz/pi-workflows';

const choices = defineHumanChoices({
  continue: choice({ label: 'Yes, continue' }),
  stop: choice({ label: 'No, stop', description: 'Ends the run without changes' }),
  replan: choice({
    label: 'Replan',
    input: textInput({ name: 'instructions', prompt: 'What should change?', minLength: 1, maxLength: 4000 }),
  }),
});

export default defineWorkflow({
  name: 'approval',
  title: ({ input }) => `approve: ${input?.plan ?? 'a plan'}`,
  startAt: 'approve',
  maxSteps: 20,
  nodes: {
    approve: humanDecision({
      audience: 'operator',
      choices,
      request: ({ input }) => ({
        title: `Approve the plan "${input?.plan ?? 'a plan'}"?`,
        subject: input,
        presentation: { summary: 'Review the plan before it is carried out.' },
      }),
    }),
    proceed: notify({ kind: 'final', message: ({ input }) => `Approved: ${input?.plan}` }),
    stopped: notify({ kind: 'final', message: 'Stopped by the operator.' }),
    replanned: compute({ run: ({ outputs }) => ({ replan: outputs.approve.input.instructions }) }),
  },
  edges: [humanDecisionEdge({ from: 'approve', choices, cases: { continue: 'proceed', stop: 'stopped', replan: 'replanned' } })],
  // Where it ends when another workflow includes it (see release.workflow.mjs).
  exits: { approved: { from: 'proceed' }, stopped: { from: 'stopped' }, replanned: { from: 'replanned' } },
});
