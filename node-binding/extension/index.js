// The piw Pi extension: the model's `workflow` tool, the person's `/workflow` command, and the
// link of each Pi session to the piw host (see ./session.js). It imports no workflow module and
// runs no workflow code: runs execute in the host's supervised children.
// No import of typebox, pi-ai or pi-tui: the tool's schema is plain JSON Schema (Pi validates any)
// and the card is ./format.js's CardComponent, which keeps Pi's start fast (docs/PERFORMANCE.md).
import { findHostBin, isFinal } from '../index.js';
import { humanAnswer } from '../lib/decision-answer.js';
import { RESERVED, ResolveError, listWorkflows, resolveWorkflow } from '../lib/workflow-names.js';
import { channelCommand } from './channel.js';
import { CardComponent, MESSAGE, STEP, resultPreview, wakeText } from './format.js';
import { WorkflowSession } from './session.js';
import { STEP_ACTIONS_TEXT, STEP_PARAMETERS, WorkflowError, submit, text, update } from './tool.js';

const ACTIONS = ['list', 'start', 'status', 'pause', 'resume', 'detach', 'cancel', 'answer', 'update', 'submit'];
const SUBCOMMANDS = ['list', 'status', 'pause', 'resume', 'detach', 'cancel', 'answer', 'channel'];
/** How many runs an ambiguous run id prefix lists (as the CLI). */
const CANDIDATES_SHOWN = 10;

/** Whether two JSON values are equal (an object's key order does not matter). */
function sameJson(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]));
}
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

  /**
   * The run `given` names, as the CLI resolves it (`cli/src/run_ids.rs`): the run with that
   * id, else the one run whose id begins with it. Several: the candidates are listed; none: no
   * run has it. The host looks it up (`run.list`'s `run_id_prefix`), among every run.
   */
  async function resolveRunId(s, given) {
    const runs = await s.call('run.list', (c) => c.listRuns({ runIdPrefix: given, limit: CANDIDATES_SHOWN + 1 }));
    if (runs.some((r) => r.run_id === given) || runs.length === 1) return runs.length === 1 ? runs[0].run_id : given;
    if (runs.length === 0) {
      throw new WorkflowError(`no run has the id ${given} (nor an id beginning with it); /workflow list shows this session's runs`);
    }
    if (runs.length > CANDIDATES_SHOWN) {
      // Among more runs than were listed, the exact id may be one left out.
      const exact = await s.call('run.status', (c) => c.runStatus(given, { attemptsLimit: 1 })).catch((e) => {
        if (e?.code === 'not_found') return null;
        throw e;
      });
      if (exact) return given;
    }
    const shown = runs.slice(0, CANDIDATES_SHOWN);
    const more = runs.length > shown.length ? `more than ${CANDIDATES_SHOWN} runs, the newest` : `${runs.length} runs`;
    throw new WorkflowError(
      [`run id ${given} is ambiguous: it begins ${more}`, ...shown.map((r) => `  ${r.run_id}  ${r.paused ? 'paused' : r.status}  ${r.workflow_name}`), 'give more of the id'].join('\n'),
    );
  }

  /** The run `runId` names (a run id or a unique prefix of one), else this session's active (newest unfinished) run. */
  async function runOf(s, runId) {
    if (runId) return resolveRunId(s, runId);
    const runs = await s.call('run.list', (c) => c.listRuns({ sessionId: s.sessionId, unfinished: true, limit: 1 }));
    const live = runs.find((r) => !isFinal(r.status));
    if (!live) throw new WorkflowError('this session has no active workflow run; pass a runId');
    return live.run_id;
  }

  /**
   * Refuses to act on a run this Pi session did not start (another session's, or one started
   * outside Pi): its origin session decides. A person at a shell may act on any run with `piw
   * run <verb>`: the person's command says so, the model's tool does not (the model is not to
   * go around the rule). Resolves with the run's status.
   */
  async function ownRun(s, runId, verb, byPerson) {
    const st = await s.call('run.status', (c) => c.runStatus(runId));
    const origin = st.run.origin_session;
    if (origin !== s.sessionId) {
      const whose = origin ? `Pi session ${origin}` : 'no Pi session (it was started outside Pi)';
      const shell = byPerson ? ` (from a shell, piw run ${verb === 'answer' ? 'answer|decide' : verb} ${runId} … acts on any run)` : '';
      throw new WorkflowError(`run ${runId} belongs to ${whose}: only the session that started it can ${verb} it from Pi${shell}`);
    }
    return st;
  }

  /** What `detach` tells the person (or the model). */
  function detachedText(r) {
    return r.changed
      ? `detached run ${r.run_id}: a Pi the host starts answers its steps from now on; it carries on when this Pi is closed, and its messages still come here while it is open`
      : `run ${r.run_id} was already detached`;
  }

  /** `runOf`, refused unless the run is this session's (see `ownRun`): `{ runId, status }`. */
  async function ownRunOf(s, runId, verb, byPerson = false) {
    const id = await runOf(s, runId);
    return { runId: id, status: await ownRun(s, id, verb, byPerson) };
  }

  /** Starts workflow `ref`; `detached`: its steps go to Pi children of the host, not this session. */
  async function start(s, ref, input, detached = false) {
    let found;
    try {
      found = await resolveWorkflow(ref, s.cwd);
    } catch (e) {
      if (e instanceof ResolveError) throw new WorkflowError(e.message);
      throw e;
    }
    const { run_id, status } = await s.call('run.start', (c) =>
      // No input is an empty object, as pi-workflows passes it (workflows read `input.task`).
      c.startRun(found.path, { input: input ?? {}, sessionId: s.sessionId, projectDir: s.cwd, ...(detached ? { executionMode: 'detached' } : {}) }),
    );
    s.widgetRun = run_id;
    s.kick();
    return { run_id, status, workflow: found.name, path: found.path };
  }

  async function statusText(s, runId) {
    // Values stored apart (over 64 KiB) stay references: shown as a preview, never read whole.
    const st = await s.call('run.status', (c) => c.runStatus(runId, { references: true }));
    const { run } = st;
    const lines = [`run ${run.run_id}: ${run.workflow_name} ${run.paused ? 'paused' : run.status}${run.current_node ? ` at ${run.current_node}` : ''}`];
    if (run.error) lines.push(`error: ${run.error}`);
    if (run.review_reason) lines.push(`review: ${run.review_reason}`);
    if (typeof run.wake_at === 'number') lines.push(`${wakeText(run.wake_at)} (${new Date(run.wake_at).toISOString()}): a durable wait, no process runs until then`);
    if (run.status === 'completed') lines.push(`result: ${resultPreview(run.result, run.run_id)}`);
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
      : ['No workflows in .pi/workflows/, ~/.pi/agent/workflows/ or the built-ins'];
    if (runs.length) lines.push('Runs of this session:', ...runs.map((r) => `  ${r.run_id} ${r.workflow_name} ${r.paused ? 'paused' : r.status}`));
    return { text: lines.join('\n'), workflows: files, runs };
  }

  /**
   * What the model hears about a protected human decision it tried to answer: a person decides
   * it, and how a person does; nothing the model could do instead.
   */
  function protectedDecision(d, runId) {
    return new WorkflowError(
      `decision ${d.node_id} (${d.decision_id}) of run ${runId} is a protected human decision: a person must decide it, in the Pi session that started the run (its dialog, or /workflow answer ${runId} <answer>) or from a shell (piw run decide ${runId} …); the workflow tool cannot answer it. Do not try to answer it another way: tell the user it waits for their decision.`,
    );
  }

  async function pendingDecision(st, kindWanted) {
    const runId = st.run.run_id;
    const d = st.decisions.find((x) => x.status === 'pending');
    if (!d) throw new WorkflowError(`run ${runId} has no pending checkpoint or decision`);
    if (kindWanted === 'checkpoint' && d.kind === 'human_decision') throw protectedDecision(d, runId);
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
      `Start, follow and answer piw workflows. Actions: list; start (workflow = a name, builtin:<id> or a path; input = JSON); status, pause, resume, cancel (runId, default: this session\'s active run); detach (runId: a Pi the host starts answers the run\'s steps from now on, so it carries on once this Pi is closed; only when the user asks); answer (an ordinary checkpoint: runId, answer); ${STEP_ACTIONS_TEXT}.`,
    promptSnippet: 'Start, follow and answer durable piw workflows',
    promptGuidelines: [
      'When a workflow step message arrives, do the step and finish it with the workflow tool action "submit" exactly as the message says.',
    ],
    parameters: {
      type: 'object',
      properties: {
        action: { type: 'string', enum: ACTIONS, description: 'what to do' },
        workflow: { type: 'string', description: 'start: a workflow name, builtin:<id> (autoplan, autodoc, plan-approval, plan-change, autoimplement, sanity-check, monitor) or a path to a workflow file' },
        input: { description: 'start: the run input (JSON)' },
        detached: { type: 'boolean', description: "start: run its agent steps in Pi children of the piw host instead of this session (it still reports here); refused if the host cannot run Pi" },
        runId: { type: 'string', description: "status/pause/resume/detach/cancel/answer: the run, its id or a unique prefix of it (default: this session's active run)" },
        answer: { description: 'answer: the checkpoint answer (JSON)' },
        ...STEP_PARAMETERS,
      },
      required: ['action'],
    },
    async execute(toolCallId, params, signal) {
      const s = need();
      switch (params.action) {
        case 'list': {
          const l = await listText(s);
          s.kick();
          return text(l.text, { workflows: l.workflows, runs: l.runs });
        }
        case 'start': {
          if (!params.workflow) throw new WorkflowError('start needs `workflow` (a name or a path)');
          const r = await start(s, params.workflow, params.input, params.detached === true);
          return text(`started ${r.workflow}: run ${r.run_id} (${r.status})`, r);
        }
        case 'status': {
          const st = await statusText(s, await runOf(s, params.runId));
          s.kick();
          // The run's record without its input and result (the text previews the result): a
          // tool result's details are kept in the session file.
          const { input: _input, result: _result, ...run } = st.status.run;
          return text(st.text, { run });
        }
        case 'pause': {
          const { runId } = await ownRunOf(s, params.runId, 'pause');
          await s.call('run.pause', (c) => c.pauseRun(runId));
          s.kick();
          return text(`paused run ${runId}`, { runId });
        }
        case 'detach': {
          const { runId } = await ownRunOf(s, params.runId, 'detach');
          const r = await s.call('run.detach', (c) => c.detachRun(runId));
          s.kick();
          return text(detachedText(r), r);
        }
        case 'resume': {
          const { runId } = await ownRunOf(s, params.runId, 'resume');
          await resume(s, runId);
          return text(`resumed run ${runId}`, { runId });
        }
        case 'cancel': {
          const { runId } = await ownRunOf(s, params.runId, 'cancel');
          const r = await s.call('run.cancel', (c) => c.cancelRun(runId, { reason: 'cancelled from Pi' }));
          s.kick();
          return text(`cancelled run ${runId}`, r);
        }
        case 'answer': {
          // Bound to the checkpoint the model was shown last (of the run named), as `submit`
          // is: a repeated call never answers a checkpoint presented later, nor another run's.
          const named = params.runId ? await resolveRunId(s, params.runId) : undefined;
          const shown = s.presentedRequest({ runId: named, kind: 'checkpoint' });
          const { runId, status } = await ownRunOf(s, named ?? shown?.runId, 'answer');
          const answer = params.answer ?? null;
          const presented = shown && status.decisions.find((x) => x.decision_id === shown.key);
          if (presented && presented.status !== 'pending') {
            if (presented.status === 'answered' && !presented.answer_omitted && sameJson(presented.answer, answer)) {
              s.kick();
              return text(
                `already answered: checkpoint ${presented.node_id} of run ${runId} took this answer before; nothing was sent again. A next checkpoint arrives as its own message.`,
                { runId, decisionId: presented.decision_id, repeated: true },
              );
            }
            // What the run waits for now is a person's decision: said so, not that the
            // checkpoint answered before is closed.
            const protectedNow = status.decisions.find((x) => x.status === 'pending' && x.kind === 'human_decision');
            if (protectedNow) throw protectedDecision(protectedNow, runId);
            throw new WorkflowError(
              `checkpoint ${presented.node_id} of run ${runId} (decision ${presented.decision_id}) is closed (${presented.status}); this answer was not sent`,
            );
          }
          const d = presented ?? (await pendingDecision(status, 'checkpoint'));
          await s.call('checkpoint.answer', (c) => c.answerCheckpoint(runId, d.decision_id, answer));
          s.kick();
          return text(`answered checkpoint ${d.node_id} of run ${runId}`, { runId, decisionId: d.decision_id });
        }
        case 'update':
          return update(s, params, toolCallId);
        case 'submit':
          return submit(s, params, signal);
        default:
          throw new WorkflowError(`unknown action ${params.action}; one of ${ACTIONS.join(', ')}`);
      }
    },
  });


  // ---------------------------------------------------------------------------------------
  // The person's command

  pi.registerCommand('workflow', {
    description: 'Workflows: /workflow [name|path] [--detached] [task | --input-json JSON] | status|pause|resume|detach|cancel [runId] | answer [runId] <answer> | channel list|add|test|remove',
    async getArgumentCompletions(prefix) {
      const words = prefix.split(/\s+/);
      // Nothing to offer once the argument is complete: Pi's Enter on an argument menu only
      // applies the selected item, so a menu left open would take a second Enter to run.
      const offer = (items) => (items.length && !items.some((i) => i.value === prefix) ? items : null);
      try {
        if (words.length <= 1) {
          const names = session ? (await listWorkflows(session.cwd)).map((w) => w.name) : [];
          const items = [...SUBCOMMANDS, ...names].filter((w) => w.startsWith(words[0] ?? ''));
          return offer(items.map((w) => ({ value: w, label: w })));
        }
        if (['status', 'pause', 'resume', 'detach', 'cancel', 'answer'].includes(words[0]) && words.length === 2 && session) {
          const runs = await session.call('run.list', (c) => c.listRuns({ sessionId: session.sessionId, limit: 20 }));
          const items = runs.filter((r) => r.run_id.startsWith(words[1])).map((r) => ({
            value: `${words[0]} ${r.run_id}`,
            label: `${r.run_id} ${r.workflow_name} ${r.status}`,
          }));
          return offer(items);
        }
      } catch {
        // No completions while the host is unreachable.
      }
      return null;
    },
    async handler(args, ctx) {
      // Print and JSON modes (`pi -p "/workflow ..."`) have no UI to notify: the outcome is
      // printed on stderr (Pi keeps stdout for the model's answer, or its event stream).
      const say = (t, level = 'info') => (ctx.hasUI ? ctx.ui.notify(t, level) : process.stderr.write(`${t}\n`));
      try {
        await command(need(), String(args ?? '').trim(), say);
      } catch (e) {
        say(`workflow: ${e?.message ?? e}`, 'error');
      }
    },
  });

  async function command(s, args, say) {
    const [word = '', ...rest] = args.split(/\s+/).filter(Boolean);
    let tail = args.slice(args.indexOf(word) + word.length).trim();
    // The run: its id or a unique prefix of it (resolved by `runOf`). `answer`'s first word is
    // its run only when it begins with `run-` (as the host's ids do): else it is the answer.
    const runIdArg = () => (word === 'answer' ? (rest[0]?.startsWith('run-') ? rest[0] : undefined) : rest[0]);
    switch (word) {
      case 'channel':
        // The installation (and its host, told of changes) exists once the session reached it.
        await s.call('host.status', (c) => c.status());
        say(await channelCommand(rest, { piw: findHostBin(), ui: s.ctx.ui }));
        return;
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
        const { runId } = await ownRunOf(s, runIdArg(), 'pause', true);
        await s.call('run.pause', (c) => c.pauseRun(runId));
        s.kick();
        say(`paused run ${runId}`);
        return;
      }
      case 'detach': {
        const { runId } = await ownRunOf(s, runIdArg(), 'detach', true);
        say(detachedText(await s.call('run.detach', (c) => c.detachRun(runId))));
        s.kick();
        return;
      }
      case 'resume': {
        const { runId } = await ownRunOf(s, runIdArg(), 'resume', true);
        await resume(s, runId);
        say(`resumed run ${runId}`);
        return;
      }
      case 'cancel': {
        const { runId } = await ownRunOf(s, runIdArg(), 'cancel', true);
        await s.call('run.cancel', (c) => c.cancelRun(runId, { reason: 'cancelled by the person from Pi' }));
        s.kick();
        say(`cancelled run ${runId}`);
        return;
      }
      case 'answer': {
        const given = runIdArg();
        const raw = given ? tail.slice(tail.indexOf(given) + given.length).trim() : tail;
        if (raw === '') throw new WorkflowError('answer needs the answer: /workflow answer [runId] <json|text>');
        const { runId, status } = await ownRunOf(s, given, 'answer', true);
        const d = await pendingDecision(status, 'any');
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
          // The person's answer (answered_by: person), as the CLI's.
          await s.call('decision.answer', (c) => c.answerHumanDecision(runId, d.decision_id, value));
        }
        s.kick();
        say(`answered ${d.node_id} of run ${runId}`);
        return;
      }
      default: {
        if (RESERVED.has(word)) throw new WorkflowError(`"${word}" is not a /workflow subcommand here; try /workflow ${SUBCOMMANDS.join('|')}`);
        let input;
        // `/workflow <name> --detached ...`: its steps go to Pi children of the host.
        const flag = /^--detached(?:\s+|$)/.exec(tail);
        const detached = flag !== null;
        if (flag) tail = tail.slice(flag[0].length);
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
        const r = await start(s, word, input, detached);
        say(`started ${r.workflow}: run ${r.run_id}${detached ? ' (detached: Pi children of the host answer its steps)' : ''}`);
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Compact cards

  const card = (message, options, theme) => new CardComponent(message, options, theme);
  pi.registerMessageRenderer(STEP, card);
  pi.registerMessageRenderer(MESSAGE, card);
}
