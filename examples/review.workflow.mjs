// An agent step whose submissions the workflow validates itself (in a supervised child, before
// they count), then an ordinary checkpoint, then a pure step that uses both answers. A draft
// nobody submits in time (ten minutes, or the input's `minutes`: a `timeoutMs` function decides
// the deadline when the step starts, and the host keeps it) routes to `expired` instead of
// failing the run.
//
// The Pi extension presents the agent step in the origin session; from code, list the session's
// interactions and submit a result (a string holding JSON is parsed too):
//   client.submitInteraction(interaction, { title: 'Fix the flaky test', priority: 2 })
import { agent, checkpoint, compute, defineWorkflow } from '@osolmaz/pi-workflows';

export default defineWorkflow({
  name: 'review',
  startAt: 'draft',
  nodes: {
    draft: agent({
      timeoutMs: ({ input }) => (input?.minutes ?? 10) * 60 * 1000,
      prompt: ({ input }) => `Propose a task title for: ${input?.topic ?? 'the project'}`,
      expectedOutput: '{ "title": string (3..80 chars), "priority": 1 | 2 | 3 }',
      statusDetail: 'drafting a task',
      validate: (output) => {
        const title = typeof output?.title === 'string' ? output.title.trim() : '';
        if (title.length < 3 || title.length > 80) throw new Error('title must be a string of 3 to 80 characters');
        if (![1, 2, 3].includes(output.priority)) throw new Error('priority must be 1, 2 or 3');
        return { title, priority: output.priority };
      },
    }),
    confirm: checkpoint({
      summary: ({ outputs }) => `Create "${outputs.draft.title}" with priority ${outputs.draft.priority}?`,
    }),
    record: compute({
      run: ({ outputs, state }) => ({ created: outputs.confirm === 'yes', title: outputs.draft.title, run: state.runId }),
    }),
    expired: compute({ run: () => ({ created: false, reason: 'nobody answered in time' }) }),
  },
  edges: [
    { from: 'draft', switch: { on: '$result.outcome', cases: { ok: 'confirm', timed_out: 'expired' } } },
    { from: 'confirm', to: 'record' },
  ],
});
