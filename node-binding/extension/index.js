// The piw Pi extension: the model's `workflow` tool, the person's `/workflow` command, and the
// link of each Pi session to the piw host (see ./session.js). It imports no workflow module and
// runs no workflow code: runs execute in the host's supervised children.
// No import of typebox, pi-ai or pi-tui: the tool's schema is plain JSON Schema (Pi validates any)
// and the card is ./format.js's CardComponent, which keeps Pi's start fast (docs/PERFORMANCE.md).
import { isFinal } from '../index.js';
import { CardComponent, MESSAGE, STEP } from './format.js';
import { RESERVED, ResolveError, listWorkflows, resolveWorkflow } from './resolve.js';
import { VALIDATION_WAIT_MS, WorkflowSession, humanAnswer } from './session.js';

const ACTIONS = ['list', 'start', 'status', 'pause', 'resume', 'cancel', 'answer', 'update', 'submit'];
const SUBCOMMANDS = ['list', 'status', 'pause', 'resume', 'cancel', 'answer'];

/** A tool or command failure the caller can act on (shown as a tool error). */
class WorkflowError extends Error {}

const text = (t, details = {}) => ({ content: [{ type: 'text', text: t }], details });
const pretty = (v) => JSON.stringify(v, null, 2);

export default function piwExtension(pi) {
  /** @type {WorkflowSession | null} */
  let session = null;

  const need = () => {
    if (!session) throw new WorkflowError('no Pi session is active yet');
    return session;
  };

  pi.on('session_start', async (_event, ctx) => {
    await session?.close();
    session = new WorkflowSession(pi, ctx);
    // Never block Pi's start on the host: connect, deliver and present in the background.
    session.kick();
  });

  pi.on('session_shutdown', async () => {
    const s = session;
    session = null;
    await s?.close();
  });

  pi.on('agent_settled', async (event) => {
    session?.onSettled(Boolean(event.aborted));
  });

  // A workflow message is acknowledged to the host only once it is in the session: its
  // message_end says it is about to be (Pi stores it right after this event's handlers).
  // Returns nothing: a value would replace the message.
  pi.on('message_end', (event) => {
    session?.onMessageEnd(event.message);
  });

  // ---------------------------------------------------------------------------------------
  // Shared operations of the tool and the command

  /** A run id given, else this session's active (newest unfinished) run. */
  async function runOf(s, runId) {
    if (runId) return runId;
    const runs = await s.call('run.list', (c) => c.listRuns({ sessionId: s.sessionId, unfinished: true, limit: 1 }));
    const live = runs.find((r) => !isFinal(r.status));
    if (!live) throw new WorkflowError('this session has no active workflow run; pass a runId');
    return live.run_id;
  }

  async function start(s, ref, input) {
    let found;
    try {
      found = await resolveWorkflow(ref, s.cwd);
    } catch (e) {
      if (e instanceof ResolveError) throw new WorkflowError(e.message);
      throw e;
    }
    const { run_id, status } = await s.call('run.start', (c) =>
      c.startRun(found.path, { input: input ?? null, sessionId: s.sessionId, projectDir: s.cwd }),
    );
    s.widgetRun = run_id;
    s.kick();
    return { run_id, status, workflow: found.name, path: found.path };
  }

  async function statusText(s, runId) {
    const st = await s.call('run.status', (c) => c.runStatus(runId));
    const { run } = st;
    const lines = [`run ${run.run_id}: ${run.workflow_name} ${run.paused ? 'paused' : run.status}${run.current_node ? ` at ${run.current_node}` : ''}`];
    if (run.error) lines.push(`error: ${run.error}`);
    if (run.review_reason) lines.push(`review: ${run.review_reason}`);
    if (run.status === 'completed') lines.push(`result: ${JSON.stringify(run.result)}`);
    for (const i of st.interactions.filter((x) => x.status === 'pending' || x.status === 'validating')) {
      lines.push(`waiting for ${i.kind} ${i.node_id} (interaction ${i.interaction_id}, attempt ${i.attempt_id})`);
    }
    for (const d of st.decisions.filter((x) => x.status === 'pending')) {
      lines.push(`waiting for ${d.kind} ${d.node_id} (decision ${d.decision_id})`);
    }
    return { text: lines.join('\n'), status: st };
  }

  async function listText(s) {
    const files = await listWorkflows(s.cwd);
    const runs = await s.call('run.list', (c) => c.listRuns({ sessionId: s.sessionId, limit: 20 }));
    const lines = files.length
      ? ['Workflows:', ...files.map((f) => `  ${f.name} (${f.scope}: ${f.path})`)]
      : ['No workflows in .pi/workflows/ or ~/.pi/agent/workflows/'];
    if (runs.length) lines.push('Runs of this session:', ...runs.map((r) => `  ${r.run_id} ${r.workflow_name} ${r.paused ? 'paused' : r.status}`));
    return { text: lines.join('\n'), workflows: files, runs };
  }

  async function pendingDecision(s, runId, kindWanted) {
    const st = await s.call('run.status', (c) => c.runStatus(runId));
    const d = st.decisions.find((x) => x.status === 'pending');
    if (!d) throw new WorkflowError(`run ${runId} has no pending checkpoint or decision`);
    if (kindWanted === 'checkpoint' && d.kind === 'human_decision') {
      throw new WorkflowError(
        `decision ${d.decision_id} of run ${runId} is a protected human decision: a person must decide it in the Pi session that started the run (its dialog, or /workflow answer ${runId} <answer>); the workflow tool cannot answer it`,
      );
    }
    return d;
  }

  async function resume(s, runId) {
    const r = await s.call('run.resume', (c) => c.resumeRun(runId));
    s.resumed(runId);
    return r;
  }

  // ---------------------------------------------------------------------------------------
  // The model's tool

  pi.registerTool({
    name: 'workflow',
    label: 'Workflow',
    description:
      'Start, follow and answer piw workflows. Actions: list; start (workflow = name or path, input = JSON); status, pause, resume, cancel (runId, default: this session\'s active run); answer (an ordinary checkpoint: runId, answer); update (a progress note on the current step: message); submit (the output of the current workflow step: output, interactionId from the step message).',
    promptSnippet: 'Start, follow and answer durable piw workflows',
    promptGuidelines: [
      'When a workflow step message arrives, do the step and finish it with the workflow tool action "submit" exactly as the message says.',
    ],
    parameters: {
      type: 'object',
      properties: {
        action: { type: 'string', enum: ACTIONS, description: 'what to do' },
        workflow: { type: 'string', description: 'start: a workflow name or a path to a workflow file' },
        input: { description: 'start: the run input (JSON)' },
        runId: { type: 'string', description: "status/pause/resume/cancel/answer: the run (default: this session's active run)" },
        answer: { description: 'answer: the checkpoint answer (JSON)' },
        output: { description: 'submit: the step output (JSON)' },
        interactionId: { type: 'string', description: 'submit/update: the interaction id from the step message' },
        message: { type: 'string', description: 'update: what has been done so far' },
      },
      required: ['action'],
    },
    async execute(_toolCallId, params, signal) {
      const s = need();
      switch (params.action) {
        case 'list': {
          const l = await listText(s);
          s.kick();
          return text(l.text, { workflows: l.workflows, runs: l.runs });
        }
        case 'start': {
          if (!params.workflow) throw new WorkflowError('start needs `workflow` (a name or a path)');
          const r = await start(s, params.workflow, params.input);
          return text(`started ${r.workflow}: run ${r.run_id} (${r.status})`, r);
        }
        case 'status': {
          const st = await statusText(s, await runOf(s, params.runId));
          s.kick();
          return text(st.text, { run: st.status.run });
        }
        case 'pause': {
          const runId = await runOf(s, params.runId);
          await s.call('run.pause', (c) => c.pauseRun(runId));
          s.kick();
          return text(`paused run ${runId}`, { runId });
        }
        case 'resume': {
          const runId = await runOf(s, params.runId);
          await resume(s, runId);
          return text(`resumed run ${runId}`, { runId });
        }
        case 'cancel': {
          const runId = await runOf(s, params.runId);
          const r = await s.call('run.cancel', (c) => c.cancelRun(runId, { reason: 'cancelled from Pi' }));
          s.kick();
          return text(`cancelled run ${runId}`, r);
        }
        case 'answer': {
          const runId = await runOf(s, params.runId);
          const d = await pendingDecision(s, runId, 'checkpoint');
          await s.call('checkpoint.answer', (c) => c.answerCheckpoint(runId, d.decision_id, params.answer ?? null));
          s.kick();
          return text(`answered checkpoint ${d.node_id} of run ${runId}`, { runId, decisionId: d.decision_id });
        }
        case 'update':
          return update(s, params);
        case 'submit':
          return submit(s, params, signal);
        default:
          throw new WorkflowError(`unknown action ${params.action}; one of ${ACTIONS.join(', ')}`);
      }
    },
  });

  /** This session's current interactive request; `interactionId`, when given, must be it. */
  async function currentRequest(s, interactionId) {
    const pending = await s.call('interaction.list', (c) => c.listInteractions(s.sessionId));
    const current = pending.find((i) => i.origin_session === s.sessionId);
    // A late submission hears why its step is closed (timed out, cancelled, its run ended).
    const closed = interactionId && interactionId !== current?.interaction_id ? await s.closedReason(interactionId) : null;
    if (!current) {
      throw new WorkflowError(`${closed ? `interaction ${interactionId} is closed: ${closed}; ` : ''}no workflow step of this session is waiting for a submission`);
    }
    if (interactionId && interactionId !== current.interaction_id) {
      throw new WorkflowError(
        `interaction ${interactionId} is ${closed ? `closed: ${closed}` : "closed or not this session's current request"}; the current one is interaction ${current.interaction_id} (step ${current.node_id}, attempt ${current.attempt_id})`,
      );
    }
    return current;
  }

  async function update(s, params) {
    if (!params.message) throw new WorkflowError('update needs `message`');
    const current = await currentRequest(s, params.interactionId);
    await s.call('interaction.update', (c) => c.updateInteraction(current, params.message));
    return text(`progress noted for step ${current.node_id}; the step is still open: submit its output when done`, {
      runId: current.run_id,
      interactionId: current.interaction_id,
    });
  }

  async function submit(s, params, signal) {
    const current = await currentRequest(s, params.interactionId);
    if (current.status === 'validating') {
      throw new WorkflowError(`the last submission for ${current.node_id} is still being validated; wait for its verdict`);
    }
    let submitted;
    try {
      submitted = await s.call('interaction.submit', (c) => c.submitInteraction(current, params.output ?? null));
    } catch (e) {
      if (e?.code === 'stale_attempt') {
        throw new WorkflowError(`attempt ${current.attempt_id} is no longer current: ${e.message}`);
      }
      throw e;
    }
    const verdictCall = s.call(
      'the validation',
      (c) => c.waitForSubmission(current.run_id, submitted.submission_id),
      VALIDATION_WAIT_MS,
    );
    // The turn stopped (Escape): the submission stands (the host keeps it and validates it
    // once); the model hears that its outcome is unknown, the session hears the verdict later.
    const stopped = await untilAborted(signal, verdictCall);
    if (stopped) {
      s.reportVerdictLater(current, submitted.submission_id, verdictCall);
      return text(
        `submitted the output for step ${current.node_id} of run ${current.run_id}; the turn was stopped before the workflow's validation judged it, so its outcome is not known yet: it will be reported in this session. Do not submit it again.`,
        { runId: current.run_id, interactionId: current.interaction_id, submissionId: submitted.submission_id, verdict: 'unknown' },
      );
    }
    const verdict = await verdictCall;
    s.kick();
    if (verdict.state === 'rejected') {
      throw new WorkflowError(
        `the workflow rejected this output for step ${current.node_id}: ${verdict.error}. Fix it and submit again (interactionId ${current.interaction_id}).`,
      );
    }
    return text(`accepted: step ${current.node_id} of run ${current.run_id} is done`, {
      runId: current.run_id,
      interactionId: current.interaction_id,
      submissionId: submitted.submission_id,
    });
  }

  /** Resolves true when `signal` aborts before `promise` settles, false once it settles (either way). */
  function untilAborted(signal, promise) {
    const settled = promise.then(
      () => false,
      () => false,
    );
    if (!signal) return settled;
    if (signal.aborted) return Promise.resolve(true);
    let onAbort;
    const aborted = new Promise((r) => {
      onAbort = () => r(true);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    return Promise.race([settled, aborted]).finally(() => signal.removeEventListener('abort', onAbort));
  }

  // ---------------------------------------------------------------------------------------
  // The person's command

  pi.registerCommand('workflow', {
    description: 'Workflows: /workflow [name|path] [task | --input-json JSON] | status|pause|resume|cancel [runId] | answer [runId] <answer>',
    async getArgumentCompletions(prefix) {
      const words = prefix.split(/\s+/);
      try {
        if (words.length <= 1) {
          const names = session ? (await listWorkflows(session.cwd)).map((w) => w.name) : [];
          const items = [...SUBCOMMANDS, ...names].filter((w) => w.startsWith(words[0] ?? ''));
          return items.length ? items.map((w) => ({ value: w, label: w })) : null;
        }
        if (['status', 'pause', 'resume', 'cancel', 'answer'].includes(words[0]) && words.length === 2 && session) {
          const runs = await session.call('run.list', (c) => c.listRuns({ sessionId: session.sessionId, limit: 20 }));
          const items = runs.filter((r) => r.run_id.startsWith(words[1])).map((r) => ({
            value: `${words[0]} ${r.run_id}`,
            label: `${r.run_id} ${r.workflow_name} ${r.status}`,
          }));
          return items.length ? items : null;
        }
      } catch {
        // No completions while the host is unreachable.
      }
      return null;
    },
    async handler(args, ctx) {
      const say = (t, level = 'info') => ctx.ui.notify(t, level);
      try {
        await command(need(), String(args ?? '').trim(), say);
      } catch (e) {
        say(`workflow: ${e?.message ?? e}`, 'error');
      }
    },
  });

  async function command(s, args, say) {
    const [word = '', ...rest] = args.split(/\s+/).filter(Boolean);
    const tail = args.slice(args.indexOf(word) + word.length).trim();
    // A run id as the host makes them (`run-` and a lowercase hex id), not any word starting with "run".
    const runIdArg = () => (rest[0] && /^run-[0-9a-f]{8,}$/.test(rest[0]) ? rest[0] : undefined);
    switch (word) {
      // Both also refresh the session: what it missed (a host that restarted) is delivered.
      case '':
      case 'list':
        say((await listText(s)).text);
        s.kick();
        return;
      case 'status':
        say((await statusText(s, await runOf(s, runIdArg()))).text);
        s.kick();
        return;
      case 'pause': {
        const runId = await runOf(s, runIdArg());
        await s.call('run.pause', (c) => c.pauseRun(runId));
        s.kick();
        say(`paused run ${runId}`);
        return;
      }
      case 'resume': {
        const runId = await runOf(s, runIdArg());
        await resume(s, runId);
        say(`resumed run ${runId}`);
        return;
      }
      case 'cancel': {
        const runId = await runOf(s, runIdArg());
        await s.call('run.cancel', (c) => c.cancelRun(runId, { reason: 'cancelled by the person from Pi' }));
        s.kick();
        say(`cancelled run ${runId}`);
        return;
      }
      case 'answer': {
        const given = runIdArg();
        const runId = await runOf(s, given);
        const raw = given ? tail.slice(tail.indexOf(given) + given.length).trim() : tail;
        if (raw === '') throw new WorkflowError('answer needs the answer: /workflow answer [runId] <json|text>');
        const d = await pendingDecision(s, runId, 'any');
        if (d.kind === 'human_decision') {
          // Refused here when it fits none of the choices or breaks its text's length rule.
          const { answer, problem } = humanAnswer(d.request, raw);
          if (problem) throw new WorkflowError(`decision ${d.node_id} of run ${runId}: ${problem}`);
          await s.call('decision.answer', (c) => c.answerHumanDecision(runId, d.decision_id, answer));
        } else {
          let value;
          try {
            value = JSON.parse(raw);
          } catch {
            value = raw;
          }
          await s.call('checkpoint.answer', (c) => c.answerCheckpoint(runId, d.decision_id, value));
        }
        s.kick();
        say(`answered ${d.node_id} of run ${runId}`);
        return;
      }
      default: {
        if (RESERVED.has(word)) throw new WorkflowError(`"${word}" is not a /workflow subcommand here; try /workflow ${SUBCOMMANDS.join('|')}`);
        let input;
        const m = /^--input-json\s+([\s\S]+)$/.exec(tail);
        if (m) {
          try {
            input = JSON.parse(m[1]);
          } catch (e) {
            throw new WorkflowError(`--input-json is not JSON: ${e.message}`);
          }
        } else if (tail !== '') {
          input = { task: tail };
        }
        const r = await start(s, word, input);
        say(`started ${r.workflow}: run ${r.run_id}`);
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Compact cards

  const card = (message, _options, theme) => new CardComponent(message, theme);
  pi.registerMessageRenderer(STEP, card);
  pi.registerMessageRenderer(MESSAGE, card);
}
