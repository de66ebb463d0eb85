// An agent step whose submissions are validated by the workflow itself (in a supervised child,
// before they count), then an ordinary checkpoint, then a pure step that uses both answers.
//
// The Pi extension presents the agent step in the origin session; from code, list the session's
// interactions and submit a result:
//   client.submitInteraction(interaction, { title: 'Fix the flaky test', priority: 2 })
import { defineWorkflow, compute, agent, checkpoint, to, onOutcome } from '../node-binding/index.js';

export default defineWorkflow({
  name: 'review',
  start: 'draft',
  nodes: {
    draft: agent({
      timeoutMs: 10 * 60 * 1000,
      request: (input) => ({
        instructions: `Propose a task title for: ${input?.topic ?? 'the project'}`,
        contract: '{ "title": string (3..80 chars), "priority": 1 | 2 | 3 }',
      }),
      validate: (result) => {
        if (typeof result?.title !== 'string' || result.title.length < 3 || result.title.length > 80) {
          return 'title must be a string of 3 to 80 characters';
        }
        if (![1, 2, 3].includes(result.priority)) return 'priority must be 1, 2 or 3';
        return undefined;
      },
    }),
    confirm: checkpoint({
      request: (draft) => ({ question: `Create "${draft.title}" with priority ${draft.priority}?` }),
    }),
    record: compute(({ answer }, ctx) => ({ created: answer === 'yes', run: ctx.runId })),
    expired: compute(() => ({ created: false, reason: 'nobody answered in time' })),
  },
  edges: [
    onOutcome('draft', { succeeded: 'confirm', timed_out: 'expired' }),
    to('confirm', 'record'),
  ],
});
