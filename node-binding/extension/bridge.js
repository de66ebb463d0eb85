// The bridge of a detached run a Pi extension that serves one run's interactive
// steps without a person's session. Pi runs it as
//   pi --mode rpc --no-session --no-extensions ... -e <package>/extension/bridge.js
// with PIW_BRIDGE_RUN=<run id> (and PIW_HOME) in its environment (../lib/bridge.js
// `bridgeCommand`). It presents each agent / assistantMessage step to the model as a session
// does (./session.js: the step message, reminders, the attempt's failure when the model stops
// without submitting, a turn stopped when its step closes), offers the `workflow` tool with
// only `update` and `submit` (./tool.js), and makes Pi exit (../lib/bridge.js `BRIDGE_EXIT`)
// once the run has no step for it. A person's session never presents a detached run's steps
// (the host lists them for no session); two bridges never serve one run (`lockBridge`).
import { isFinal } from '../index.js';
import { BRIDGE_EXIT, lockBridge } from '../lib/bridge.js';
import { WorkflowSession } from './session.js';
import { HOST_LOST, STEP_ACTIONS_TEXT, STEP_PARAMETERS, WorkflowError, submit, update } from './tool.js';

const ACTIONS = ['update', 'submit'];

const open = (i) => i.status === 'pending' || i.status === 'validating';

/**
 * Why run `status` has no step for a bridge any more (null while it has one, or may get one:
 * it runs, is queued, or its step waits for a submission or its validation).
 */
export function noStepFor(status) {
  const { run, interactions, decisions } = status;
  if (isFinal(run.status)) return `the run ended: ${run.status}`;
  if (run.paused) return 'the run is paused';
  if (run.status === 'review') return `the run stopped for review${run.review_reason ? `: ${run.review_reason}` : ''}`;
  if (interactions.some(open)) return null;
  const d = decisions.find((x) => x.status === 'pending');
  if (d) return `the run waits on ${d.kind === 'human_decision' ? 'a human decision' : 'a checkpoint'} (${d.node_id}), which a bridge never answers`;
  return null;
}

/**
 * One run's link to the host, as a session's but bound to the run: its events, its open
 * interaction (from `run.status`: the host lists a detached run's requests for no session),
 * no workflow messages (they are its origin session's, or kept for `piw run status`), no
 * checkpoints or decisions, no widget. It never starts a host.
 */
class BridgeSession extends WorkflowSession {
  constructor(pi, ctx, runId, finish) {
    super(pi, ctx);
    this.runId = runId;
    this.finish = finish;
    this.startsHost = false;
    this.liveRuns = [runId];
  }

  subscriptionFilter() {
    return { runId: this.runId };
  }

  hostGone() {
    // Closing (Pi stopping) ends the subscription too: not the host's doing.
    if (this.closed) return;
    this.finish(BRIDGE_EXIT.hostGone, 'the piw host closed the connection');
  }

  async activeInteraction(statuses = new Map()) {
    if (!statuses.has(this.runId)) statuses.set(this.runId, await this.call('run.status', (c) => c.runStatus(this.runId)));
    const status = statuses.get(this.runId);
    if (status.run.paused) return null;
    return status.interactions.find(open) ?? null;
  }

  pendingCheckpoint() {
    return null;
  }

  /** The bridge is the one a detached run's steps are handed to. */
  handedAway() {
    return null;
  }

  /** An aborted turn (a step closed under it, or Pi stopping) pauses nothing: nobody is there to resume it. */
  async settled(turn) {
    if (turn.aborted) return;
    await super.settled(turn);
  }

  async refresh() {
    let status;
    try {
      status = await this.call('run.status', (c) => c.runStatus(this.runId));
    } catch (e) {
      if (e?.code === 'not_found') return this.finish(BRIDGE_EXIT.unusable, `no run ${this.runId}`);
      if (HOST_LOST.has(e?.code)) return this.finish(BRIDGE_EXIT.hostGone, e.message);
      throw e;
    }
    if (status.run.execution_mode !== 'detached') {
      return this.finish(BRIDGE_EXIT.unusable, `run ${this.runId} is not detached: its origin session answers its steps`);
    }
    const statuses = new Map([[this.runId, status]]);
    await this.stopClosedTurn(statuses);
    await this.presentActive(statuses);
    const why = noStepFor(status);
    if (why) this.finish(BRIDGE_EXIT.done, why);
  }
}

export default function piwBridge(pi) {
  /** @type {BridgeSession | null} */
  let session = null;
  let lock = null;
  let finished = false;

  /**
   * Ends the bridge: Pi shuts down once its turn (if one runs) settled, and exits with `code`;
   * why is on stderr (the launcher keeps its tail).
   */
  const finisher = (ctx, runId) => (code, why) => {
    if (finished) return;
    finished = true;
    process.stderr.write(`piw bridge: run ${runId ?? '?'}: ${why}\n`);
    // Pi's shutdown ends in process.exit(0); the code is set as the process exits.
    process.once('exit', () => {
      process.exitCode = code;
    });
    ctx.shutdown();
  };

  pi.on('session_start', async (_event, ctx) => {
    await session?.close();
    session = null;
    const runId = process.env.PIW_BRIDGE_RUN;
    const finish = finisher(ctx, runId);
    if (!runId) return finish(BRIDGE_EXIT.unusable, 'PIW_BRIDGE_RUN (the run to serve) is not set');
    try {
      lock ??= lockBridge(runId);
    } catch (e) {
      return finish(e?.code === 'bridge_busy' ? BRIDGE_EXIT.busy : BRIDGE_EXIT.unusable, e?.message ?? String(e));
    }
    session = new BridgeSession(pi, ctx, runId, finish);
    session.kick();
  });

  pi.on('session_shutdown', async () => {
    const s = session;
    session = null;
    await s?.close();
    lock?.release();
    lock = null;
  });

  pi.on('agent_settled', async (event) => {
    session?.onSettled(Boolean(event.aborted));
  });

  pi.on('message_end', (event) => {
    session?.onMessageEnd(event.message);
  });

  pi.registerTool({
    name: 'workflow',
    label: 'Workflow',
    description: `Answer the current step of a piw workflow run. Actions: ${STEP_ACTIONS_TEXT}.`,
    promptSnippet: 'Submit the output of the current workflow step',
    promptGuidelines: [
      'When a workflow step message arrives, do the step and finish it with the workflow tool action "submit" exactly as the message says.',
    ],
    parameters: {
      type: 'object',
      properties: {
        action: { type: 'string', enum: ACTIONS, description: 'what to do' },
        ...STEP_PARAMETERS,
      },
      required: ['action'],
    },
    async execute(toolCallId, params, signal) {
      if (!session) throw new WorkflowError('the bridge is not serving a run');
      if (params.action === 'update') return update(session, params, toolCallId);
      if (params.action === 'submit') return submit(session, params, signal);
      throw new WorkflowError(`unknown action ${params.action}; a workflow step takes only ${ACTIONS.join(' and ')}`);
    },
  });
}
