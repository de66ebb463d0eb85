// Workflow files written for pi-workflows 0.12.1, in the style of its docs and examples, run
// through a real host: what runs unchanged, and each difference node-binding/README.md lists.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';

import { hostBin, sleep, startHost } from './helpers.mjs';

let host;
let project;

/** A credential the user has in the environment the host was started from. */
const TOKEN = 'ghp-compat-token-7f3a9c';

before(async () => {
  host = await startHost({ GH_TOKEN: TOKEN });
  project = join(host.dir, 'project');
  mkdirSync(join(project, '.pi', 'workflows', 'lib'), { recursive: true });
});

after(async () => {
  await host?.stop();
});

/** Writes a file of the project's `.pi/workflows/`. */
function write(rel, text) {
  const file = join(project, '.pi', 'workflows', rel);
  writeFileSync(file, text);
  return file;
}

async function runToEnd(file, input = {}) {
  const c = host.client;
  return c.waitForRun((await c.startRun(file, { input })).run_id, { timeoutMs: 30_000 });
}

/**
 * Starts `file` for the session of `options` and returns the run once it ended, with the data
 * of every progress event it published, in order (subscribed before the start: none missed).
 */
async function runCollectingProgress(c, file, options) {
  const sub = await c.subscribe({ sessionId: options.sessionId });
  const { run_id: runId } = await c.startRun(file, options);
  const progress = [];
  for await (const e of sub) {
    if (e.run_id === runId && e.event_kind === 'progress') progress.push(e.data);
    if (e.run_id === runId && ['completed', 'failed', 'review'].includes(e.status)) break;
  }
  return { runId, run: await c.waitForRun(runId, { timeoutMs: 30_000 }), progress };
}

test('an action and a shell without effect: run as written; a child killed while applying sends the run to review, not to a retry', async () => {
  const calls = join(host.dir, 'calls.log');
  const file = write(
    'effects.workflow.ts',
    `import { action, compute, defineWorkflow, shell } from "@osolmaz/pi-workflows";
import { appendFileSync } from "node:fs";

type Input = { log: string; crash?: "action" | "shell" };

export default defineWorkflow({
  name: "effects",
  startAt: "record",
  nodes: {
    record: action({
      run: ({ input }) => {
        const { log, crash } = input as Input;
        appendFileSync(log, "record\\n");
        if (crash === "action") process.kill(process.pid, "SIGKILL");
        return { recorded: true };
      },
    }),
    announce: shell({
      exec: ({ input }) => {
        const { log, crash } = input as Input;
        return {
          command: "sh",
          args: ["-c", crash === "shell" ? 'echo shell >> "$1"; kill -9 $PPID; sleep 60' : 'echo shell >> "$1"; printf done', "sh", log],
        };
      },
    }),
    finish: compute({ run: ({ outputs }) => ({ record: outputs.record, said: (outputs.announce as { stdout: string }).stdout }) }),
  },
  edges: [
    { from: "record", to: "announce" },
    { from: "announce", to: "finish" },
  ],
});
`,
  );
  const c = host.client;
  const done = await runToEnd(file, { log: calls });
  assert.equal(done.status, 'completed', JSON.stringify(done));
  assert.deepEqual(done.result, { record: { recorded: true }, said: 'done' });
  const settled = (await c.runStatus(done.run_id)).effects;
  // A default effect's type is the node kind's word, so its key says what it was.
  assert.deepEqual(
    settled.map((e) => [e.effect_key, e.state]),
    [
      [`${done.run_id}:action:record:1`, 'applied'],
      [`${done.run_id}:shell:announce:1`, 'applied'],
    ],
  );

  for (const crash of ['action', 'shell']) {
    writeFileSync(calls, '');
    const { run_id: runId } = await c.startRun(file, { input: { log: calls, crash } });
    const stopped = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    assert.equal(stopped.status, 'review', JSON.stringify(stopped));
    const { effects, attempts } = await c.runStatus(runId);
    assert.equal(effects.at(-1).state, 'uncertain', JSON.stringify(effects));
    // Applied once, never again by another child.
    const lines = readFileSync(calls, 'utf8').split('\n').filter(Boolean);
    assert.deepEqual(lines, crash === 'action' ? ['record'] : ['record', 'shell']);
    assert.equal(attempts.filter((a) => a.node_id === (crash === 'action' ? 'record' : 'announce')).length, 1);
    await c.cancelRun(runId);
  }
});

test('TypeScript as pi-workflows users write it: ./x.js imports reach .ts, enum/namespace/parameter properties, a "type": "commonjs" project; every file verified on resume', async () => {
  // What `npm init -y` writes today.
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'project', version: '1.0.0', type: 'commonjs' }));
  write(
    'lib/helper.ts',
    `export enum Verdict { Ship = "ship", Hold = "hold" }
export namespace Score { export const bonus = 2; }
export class Counter {
  constructor(private readonly base: number, public step = 1) {}
  next(): number { return this.base + this.step + Score.bonus; }
}
`,
  );
  write(
    'child.workflow.ts',
    `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";
import { Counter } from "./lib/helper.js";

export default defineWorkflow({
  name: "child",
  startAt: "count",
  nodes: { count: compute({ run: ({ input }) => ({ n: new Counter((input as { base: number }).base).next() }) }) },
  edges: [],
  exits: { done: { from: "count" } },
});
`,
  );
  const file = write(
    'release.workflow.ts',
    `import { checkpoint, compute, defineWorkflow, includeWorkflow } from "@osolmaz/pi-workflows";
import child from "./child.workflow.js";
import { Verdict } from "./lib/helper";

export default defineWorkflow({
  name: "release",
  startAt: "gate",
  includes: { counted: includeWorkflow(child, { input: () => ({ base: 10 }) }) },
  nodes: {
    gate: checkpoint({ summary: "Ship?" }),
    verdict: compute({ run: ({ outputs }) => ({ verdict: outputs.gate === "yes" ? Verdict.Ship : Verdict.Hold }) }),
    report: compute({ run: ({ outputs }) => ({ ...(outputs.verdict as object), counted: outputs.counted }) }),
  },
  edges: [
    { from: "gate", to: "verdict" },
    { from: "verdict", to: "counted" },
    { from: "counted.done", to: "report" },
  ],
});
`,
  );
  const c = host.client;
  const answer = async (runId, value) => {
    const parked = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    assert.equal(parked.status, 'waiting', JSON.stringify(parked));
    const { decisions } = await c.runStatus(runId);
    await c.answerCheckpoint(runId, decisions.find((d) => d.status === 'pending').decision_id, value);
  };
  const { run_id: runId } = await c.startRun(file, { input: {} });
  await answer(runId, 'yes');
  const done = await c.waitForRun(runId, { timeoutMs: 30_000 });
  assert.equal(done.status, 'completed', JSON.stringify(done));
  assert.deepEqual(done.result, { verdict: 'ship', counted: { exit: 'done', output: { n: 13 } } });

  // The helper reached through `./lib/helper.js` is one of the run's sources: changed while the
  // run waits, the resumed run stops for review before any code runs.
  const { run_id: second } = await c.startRun(file, { input: {} });
  await c.waitForRun(second, { untilParked: true, timeoutMs: 30_000 });
  appendFileSync(join(project, '.pi', 'workflows', 'lib', 'helper.ts'), '// changed\n');
  await answer(second, 'no');
  const stopped = await c.waitForRun(second, { untilParked: true, timeoutMs: 30_000 });
  assert.equal(stopped.status, 'review', JSON.stringify(stopped));
  assert.match((await c.runStatus(second)).run.review_reason, /helper\.ts/);
  await c.cancelRun(second);
});

test('an import of a subpath piw lacks, or TypeScript that does not parse, fails the run at once with what to do', async () => {
  const cases = [
    [
      'extension.workflow.ts',
      'export { something as default } from "@osolmaz/pi-workflows/extension";\n',
      /@osolmaz\/pi-workflows\/extension is not available in piw: the reference's Pi extension/,
    ],
    [
      'broken.workflow.ts',
      'const a: number = 1;\nconst b = {\n  x: = 2\n};\nexport default b;\n',
      /broken\.workflow\.ts:3:6: ERR_INVALID_TYPESCRIPT_SYNTAX: Expression expected/,
    ],
  ];
  for (const [name, text, reason] of cases) {
    const run = await runToEnd(write(name, text));
    assert.equal(run.status, 'failed', `${name}: ${JSON.stringify(run)}`);
    assert.match(run.error, reason, name);
  }
});

test('the controllers subpath resolves in a run: its helpers load, under both package names', async () => {
  const file = write(
    'conditions.workflow.ts',
    `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";
import { conditionTrue, jsonFingerprint } from "@osolmaz/pi-workflows/controllers";
import { isControllerDefinition } from "piw/controllers";

export default defineWorkflow({
  name: "conditions",
  startAt: "make",
  nodes: { make: compute({ run: () => ({ ready: conditionTrue("Ready", "Merged"), same: jsonFingerprint({ a: 1, b: 2 }) === jsonFingerprint({ b: 2, a: 1 }), branded: isControllerDefinition({}) }) }) },
  edges: [],
  exits: { done: { from: "make" } },
});
`,
  );
  const run = await runToEnd(file);
  assert.equal(run.status, 'completed', JSON.stringify(run));
  assert.deepEqual(run.result, { ready: { type: 'Ready', status: true, reason: 'Merged' }, same: true, branded: false });
});

test('shell as pi-workflows has it: the shell option, updates.streams, parseLine({ stream, text }, ctx), command/args/cwd in the result', async () => {
  const c = host.client;
  const session = 'session-compat-shell';
  mkdirSync(join(project, 'sub'), { recursive: true });
  const file = write(
    'lines.workflow.ts',
    `import { defineWorkflow, shell } from "@osolmaz/pi-workflows";

export default defineWorkflow({
  name: "lines",
  startAt: "count",
  nodes: {
    count: shell({
      exec: () => ({ command: "printf 'step 1\\\\r\\\\nstep 2\\\\n'; echo 'step 9' >&2; pwd", shell: true, cwd: "sub" }),
      updates: {
        streams: ["stdout"],
        parseLine: ({ stream, text }, { state }) =>
          text.startsWith("step") ? { type: "step", key: state.node, data: { stream, text } } : undefined,
      },
      parse: (result) => ({ command: result.command, args: result.args, cwd: result.cwd, stdout: result.stdout }),
    }),
  },
  edges: [],
});
`,
  );
  const { run, progress: events } = await runCollectingProgress(c, file, { sessionId: session, projectDir: project });
  const progress = events.map((d) => d.data.data);
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const cwd = join(project, 'sub');
  assert.deepEqual(run.result, {
    command: "printf 'step 1\\r\\nstep 2\\n'; echo 'step 9' >&2; pwd",
    args: [],
    cwd,
    stdout: `step 1\r\nstep 2\n${cwd}\n`,
  });
  // stdout only, each line without its \r, in order.
  assert.deepEqual(progress, [
    { stream: 'stdout', text: 'step 1' },
    { stream: 'stdout', text: 'step 2' },
  ]);
});

test('runCommandBatch from an action, as the reference example writes it: items in order, one failure and one timeout beside successes', async () => {
  const file = write(
    'batch.workflow.ts',
    `import { action, compute, defineWorkflow, runCommandBatch, type CommandBatchRequest } from "@osolmaz/pi-workflows";

type Input = { cwd: string };
const item = (id: string, script: string, timeoutMs = 10_000) => ({
  id, command: "sh", args: ["-c", script], cwd: "", timeoutMs, maxOutputChars: 4,
});

export default defineWorkflow({
  name: "batch",
  input: (value): Input => value as Input,
  startAt: "prepare",
  nodes: {
    prepare: compute({
      run: ({ input }) =>
        ({
          maxConcurrency: 2,
          items: [
            item("first", "printf first"),
            item("bad", "echo broken >&2; exit 2"),
            item("slow", "exec sleep 60", 200),
            item("fourth", "pwd"),
          ].map((i) => ({ ...i, cwd: (input as Input).cwd })),
        }) satisfies CommandBatchRequest,
    }),
    run: action({
      run: async (context) => {
        const settled: string[] = [];
        const result = await runCommandBatch(context.outputs.prepare as CommandBatchRequest, {
          signal: context.signal,
          onItemSettled: (r) => { settled.push(r.id); throw new Error("ignored"); },
        });
        return { ...result, settled: settled.sort() };
      },
    }),
  },
  edges: [{ from: "prepare", to: "run" }],
});
`,
  );
  const run = await runToEnd(file, { cwd: host.dir });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const { schema, completed, total, settled, items } = run.result;
  assert.deepEqual([schema, completed, total, settled], ['pi-workflows.command-batch-result.v1', 4, 4, ['bad', 'first', 'fourth', 'slow']]);
  assert.deepEqual(
    items.map((i) => [i.id, i.outcome, i.stdout, i.stdoutTruncated, i.exitCode, i.cwd]),
    [
      ['first', 'succeeded', 'firs', true, 0, host.dir],
      ['bad', 'failed', '', false, 2, host.dir],
      ['slow', 'timedOut', '', false, null, host.dir],
      ['fourth', 'succeeded', host.dir.slice(0, 4), true, 0, host.dir],
    ],
  );
  assert.equal(items[1].error, 'sh -c echo broken >&2; exit 2 exited with 2: brok'); // stderr is capped too
  assert.match(items[2].error, /timed out after 200 ms/);

  const { validateCommandBatchRequest } = await import('../index.js');
  assert.throws(() => validateCommandBatchRequest({ items: [{ id: 'a', command: 'x', args: [], cwd: 'rel', timeoutMs: 1, maxOutputChars: 1 }], maxConcurrency: 1 }), /items\[0\]\.cwd must be an absolute path/);
  assert.throws(() => validateCommandBatchRequest({ items: [], maxConcurrency: 9 }), /maxConcurrency must be an integer from 1 through 8/);
});

test('checkpoint() without summary; humanDecision with function audience and onTimeout, request revision and expiresAt, decided when the attempt opens', async () => {
  const { Client } = await import('../index.js');
  const { hostBin, killInstallation, tempDir } = await import('./helpers.mjs');
  const dir = tempDir();
  const home = join(dir, 'home');
  // Deadlines pass when this test moves the host's test clock, never by themselves.
  const clock = join(dir, 'clock');
  let offset = 0;
  const advance = (ms) => {
    offset += ms;
    writeFileSync(`${clock}.tmp`, String(offset));
    renameSync(`${clock}.tmp`, clock);
  };
  const file = join(dir, 'gate.workflow.ts');
  writeFileSync(
    file,
    `import { checkpoint, choice, compute, defineHumanChoices, defineWorkflow, humanDecision, humanDecisionEdge } from "@osolmaz/pi-workflows";

type Input = { team: string; waitMs?: number; expires?: boolean; topic?: string };
const choices = defineHumanChoices({ continue: choice({ label: "Continue" }), stop: choice({ label: "Stop" }) });

export default defineWorkflow({
  name: "gate",
  // As the reference's examples do: no title without a topic.
  title: ({ input }) => ((input as Input).topic ? \`gate: \${(input as Input).topic}\` : undefined),
  startAt: "confirm",
  nodes: {
    confirm: checkpoint(),
    approve: humanDecision({
      choices,
      audience: ({ input }) => \`team-\${(input as Input).team}\`,
      onTimeout: ({ input }) => {
        const { waitMs } = input as Input;
        return waitMs ? { afterMs: waitMs, response: { choice: "stop" } } : undefined;
      },
      request: ({ input, outputs }) => ({
        title: "Approve",
        subject: { confirmed: outputs.confirm },
        presentation: { summary: "Go on?" },
        revision: 2,
        ...((input as Input).expires ? { expiresAt: new Date(Date.now() + 60_000).toISOString() } : {}),
      }),
    }),
    went: compute({ run: ({ outputs }) => outputs.approve }),
    stopped: compute({ run: ({ outputs }) => outputs.approve }),
  },
  edges: [
    { from: "confirm", to: "approve" },
    humanDecisionEdge({ from: "approve", choices, cases: { continue: "went", stop: "stopped" } }),
  ],
});
`,
  );
  const c = await Client.connect({ home, hostBin, hostEnv: { HOME: dir, PIW_KILL_GRACE_MS: '300', PIW_TEST_CLOCK: clock } });
  const pending = async (runId) => {
    const parked = await c.waitForRun(runId, { untilParked: true, timeoutMs: 30_000 });
    assert.equal(parked.status, 'waiting', JSON.stringify(parked));
    return (await c.runStatus(runId)).decisions.find((d) => d.status === 'pending');
  };
  try {
    const timed = (await c.startRun(file, { input: { team: 'ops', waitMs: 600_000 } })).run_id;
    const confirm = await pending(timed);
    assert.equal(confirm.request.summary, 'confirm waits for an answer');
    assert.equal(confirm.request.title, null);
    await c.answerCheckpoint(timed, confirm.decision_id, 'yes');
    // Wait until the checkpoint is behind: the decision is the one pending now.
    let approve;
    for (let i = 0; i < 1500 && approve?.node_id !== 'approve'; i++) {
      approve = await pending(timed);
      if (approve?.node_id !== 'approve') await sleep(20);
    }
    assert.equal(approve.request.audience, 'team-ops');
    assert.deepEqual(approve.request.extra.onTimeout, { afterMs: 600_000, response: { choice: 'stop' } });
    assert.equal(approve.request.extra.revision, 2);
    assert.deepEqual(approve.request.extra.subject, { confirmed: 'yes' });
    advance(600_001);
    await c.runStatus(timed); // wakes a host asleep until the old deadline
    const done = await c.waitForRun(timed, { timeoutMs: 30_000 });
    assert.equal(done.status, 'completed', done.error);
    assert.deepEqual(done.result, { choice: 'stop', provenance: 'timeout' });

    // onTimeout returning undefined: no deadline; a person answers.
    const open = (await c.startRun(file, { input: { team: 'dev', topic: 'release' } })).run_id;
    const titled = await pending(open);
    assert.equal(titled.request.title, 'gate: release');
    await c.answerCheckpoint(open, titled.decision_id, 'ok');
    let second;
    for (let i = 0; i < 1500 && second?.node_id !== 'approve'; i++) {
      second = await pending(open);
      if (second?.node_id !== 'approve') await sleep(20);
    }
    assert.equal(second.request.audience, 'team-dev');
    assert.equal(second.request.extra.onTimeout, undefined);
    await c.answerHumanDecision(open, second.decision_id, { choice: 'continue' });
    const answered = await c.waitForRun(open, { timeoutMs: 30_000 });
    assert.deepEqual(answered.result, { choice: 'continue', provenance: 'human' });

    // expiresAt: nobody answered in time, so the node ends timed_out (no route: the run too).
    const expiring = (await c.startRun(file, { input: { team: 'dev', expires: true } })).run_id;
    await c.answerCheckpoint(expiring, (await pending(expiring)).decision_id, 'ok');
    let third;
    for (let i = 0; i < 1500 && third?.node_id !== 'approve'; i++) {
      third = await pending(expiring);
      if (third?.node_id !== 'approve') await sleep(20);
    }
    assert.match(third.request.extra.expiresAt, /^\d{4}-\d\d-\d\dT/);
    advance(120_000);
    await c.runStatus(expiring);
    const expired = await c.waitForRun(expiring, { timeoutMs: 30_000 });
    assert.equal(expired.status, 'timed_out', JSON.stringify(expired));
  } finally {
    await c.request('host.stop').catch(() => {});
    await c.close().catch(() => {});
    await killInstallation(home);
  }
});

test('a workflow sees the environment the host was started with (a GH_TOKEN), not the host\'s own settings, and no value reaches the database', async () => {
  const file = write(
    'env.workflow.ts',
    `import { compute, defineWorkflow, shell } from "@osolmaz/pi-workflows";

export default defineWorkflow({
  name: "env",
  startAt: "node",
  nodes: {
    node: compute({ run: () => ({ token: process.env.GH_TOKEN?.length ?? null, grace: process.env.PIW_KILL_GRACE_MS ?? null }) }),
    command: shell({ exec: () => ({ command: "sh", args: ["-c", 'printf %s "$GH_TOKEN" | wc -c'] }) }),
    both: compute({ run: ({ outputs }) => ({ sameToken: (outputs.node as { token: number }).token, grace: (outputs.node as { grace: string | null }).grace, command: Number((outputs.command as { stdout: string }).stdout) }) }),
  },
  edges: [
    { from: "node", to: "command" },
    { from: "command", to: "both" },
  ],
});
`,
  );
  const run = await runToEnd(file);
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result, { sameToken: TOKEN.length, grace: null, command: TOKEN.length });
  // The outputs hold its length, not the token, and the host stores no environment.
  const stored = readdirSync(host.home, { recursive: true })
    .map((name) => join(host.home, name))
    .filter((path) => statSync(path).isFile())
    .filter((path) => readFileSync(path).includes(TOKEN));
  assert.deepEqual(stored, []);
});

test('the default deadline of each node kind: 15 minutes for agent, action and shell; none for the others', async () => {
  const piw = await import('../index.js');
  const choices = piw.defineHumanChoices({ go: piw.choice({ label: 'Go' }) });
  const wf = piw.defineWorkflow({
    name: 'defaults',
    startAt: 'a',
    nodes: {
      a: piw.agent({ prompt: 'p' }),
      b: piw.action({ run: () => 1 }),
      c: piw.shell({ exec: () => ({ command: 'true' }) }),
      d: piw.compute({ run: () => 1 }),
      e: piw.checkpoint(),
      f: piw.notify({ message: 'm' }),
      g: piw.humanDecision({ choices }),
      h: piw.action({ run: () => 1, timeoutMs: null }),
    },
    edges: ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((from, i) => ({ from, to: 'bcdefgh'[i] })),
  });
  const deadlines = Object.fromEntries(Object.entries(wf.graph.nodes).map(([id, n]) => [id, n.timeout_ms ?? null]));
  assert.deepEqual(deadlines, { a: 900_000, b: 900_000, c: 900_000, d: null, e: null, f: null, g: null, h: null });
});

test('publishUpdate as pi-workflows has it: checked, answered with a receipt; the JSON and digest helpers workflows import', async () => {
  const c = host.client;
  const session = 'session-compat-updates';
  const file = write(
    'updates.workflow.ts',
    `import { action, canonicalJson, defineWorkflow, digest, extractJsonValue, parseJsonValue } from "@osolmaz/pi-workflows";

export default defineWorkflow({
  name: "updates",
  startAt: "work",
  nodes: {
    work: action({
      run: async ({ publishUpdate }) => {
        const first = await publishUpdate({
          type: "progress",
          key: "overall",
          data: { schema: "pi-workflows.progress.v1", status: "running", completed: 1, total: 4, unit: "files" },
        });
        const second = await publishUpdate({ type: "note", key: "log", data: { text: "half" } });
        const refused: string[] = [];
        for (const bad of [
          { type: "progress", key: "overall", data: { status: "running" } },
          { type: "note", data: { text: "no key" } },
          { type: "Note", key: "x", data: {} },
          { type: "note", key: "x", data: "text" },
          { type: "progress", key: "p", data: { schema: "pi-workflows.progress.v1", status: "running", completed: 3 } },
        ]) {
          try {
            await publishUpdate(bad as never);
          } catch (e) {
            refused.push((e as Error).message);
          }
        }
        return {
          receipts: [first, second].map((r) => ({ type: r.type, key: r.key, seq: typeof r.seq, id: r.updateId.startsWith("upd_"), at: !Number.isNaN(Date.parse(r.at)) })),
          ordered: (second.seq as number) > (first.seq as number),
          refused,
          parsed: [extractJsonValue('Here: {"a": [1, "}"]} done'), parseJsonValue('\`\`\`json\\n{"b": 2}\\n\`\`\`', { mode: "fenced" })],
          canonical: canonicalJson({ b: 1, a: { d: 2, c: 3 } }),
          digest: digest({ b: 1, a: 2 }) === digest({ a: 2, b: 1 }),
        };
      },
    }),
  },
  edges: [],
});
`,
  );
  const { run, progress } = await runCollectingProgress(c, file, { sessionId: session });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  assert.deepEqual(run.result.receipts, [
    { type: 'progress', key: 'overall', seq: 'number', id: true, at: true },
    { type: 'note', key: 'log', seq: 'number', id: true, at: true },
  ]);
  assert.equal(run.result.ordered, true);
  assert.deepEqual(run.result.refused, [
    'progress.schema must be "pi-workflows.progress.v1"',
    'update.key must match ^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$, got null',
    'update.type must match ^[a-z][a-z0-9.-]{0,63}$, got "Note"',
    'update.data must be a JSON object',
    'progress.unit must be 1 to 32 printable characters (it is required with counts)',
  ]);
  assert.deepEqual(run.result.parsed, [{ a: [1, '}'] }, { b: 2 }]);
  assert.equal(run.result.canonical, '{"a":{"c":3,"d":2},"b":1}');
  assert.equal(run.result.digest, true);
  // What the host kept and sent: only the two valid updates, in order.
  assert.deepEqual(
    progress.map((p) => p.message),
    ['progress:overall', 'note:log'],
  );
});

test('routes on $output.<field> and $result.output.<field> (the node output), $result.outcome; another $result field is refused with the way out', async () => {
  const file = write(
    'routes.workflow.ts',
    `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";

export default defineWorkflow({
  name: "routes",
  startAt: "classify",
  nodes: {
    classify: compute({ run: ({ input }) => ({ size: (input as { n: number }).n > 10 ? "big" : "small" }) }),
    check: compute({ run: ({ outputs }) => ({ verdict: (outputs.classify as { size: string }).size === "big" ? "split" : "keep" }) }),
    split: compute({ run: () => "split" }),
    keep: compute({ run: () => "keep" }),
    small: compute({ run: () => "small" }),
  },
  edges: [
    { from: "classify", switch: { on: "$output.size", cases: { big: "check", small: "small" } } },
    { from: "check", switch: { on: "$result.output.verdict", cases: { split: "split", keep: "keep" } } },
  ],
});
`,
  );
  assert.equal((await runToEnd(file, { n: 20 })).result, 'split');
  assert.equal((await runToEnd(file, { n: 1 })).result, 'small');
  const { compute, defineWorkflow } = await import('../index.js');
  assert.throws(
    () =>
      defineWorkflow({
        name: 'bad',
        startAt: 'a',
        nodes: { a: compute({ run: () => 1 }), b: compute({ run: () => 1 }) },
        edges: [{ from: 'a', switch: { on: '$result.error', cases: { x: 'b' } } }],
      }),
    /switches on "\$result\.error": expected "\$result\.outcome" or a path like/,
  );
});

test('a node signal aborts with the reference\'s TimeoutError at its deadline and CancelledError when the run is stopped', async () => {
  const seen = join(host.dir, 'abort-reasons');
  const started = join(host.dir, 'abort-started');
  const file = write(
    'aborts.workflow.ts',
    `import { appendFileSync, writeFileSync } from "node:fs";
import { CancelledError, compute, defineWorkflow, TimeoutError } from "@osolmaz/pi-workflows";

const waitForAbort = (signal: AbortSignal, mark: string) =>
  new Promise(() => {
    signal.addEventListener("abort", () => {
      const r = signal.reason;
      const kind = r instanceof TimeoutError ? \`timeout \${r.timeoutMs}\` : r instanceof CancelledError ? "cancelled" : String(r);
      appendFileSync(${JSON.stringify(seen)}, \`\${mark}: \${kind}\\n\`);
    });
    writeFileSync(${JSON.stringify(started)}, mark);
  });

export default defineWorkflow({
  name: "aborts",
  startAt: "wait",
  nodes: {
    wait: compute({ timeoutMs: ({ input }) => ((input as { short?: boolean }).short ? 300 : null), run: ({ input, signal }) => waitForAbort(signal, (input as { short?: boolean }).short ? "short" : "long") }),
  },
  edges: [],
});
`,
  );
  const c = host.client;
  const lines = () => (existsSync(seen) ? readFileSync(seen, 'utf8').split('\n').filter(Boolean) : []);
  const waitFor = async (what, cond) => {
    for (let i = 0; i < 1500 && !cond(); i++) await sleep(20);
    assert.ok(cond(), what);
  };
  // The node never ends by itself: it times out at its 300 ms deadline, whatever the machine's speed.
  const short = await runToEnd(file, { short: true });
  assert.equal(short.status, 'timed_out', JSON.stringify(short));
  await waitFor('the timeout reason', () => lines().includes('short: timeout 300'));
  const { run_id: runId } = await c.startRun(file, { input: {} });
  await waitFor('the long node started', () => existsSync(started) && readFileSync(started, 'utf8') === 'long');
  await c.cancelRun(runId);
  await waitFor('the cancel reason', () => lines().includes('long: cancelled'));
});

test('includeWorkflow by path with a contract: a matching workflow runs, a mismatching one fails the run naming the difference; defineWorkflowRegistry', async () => {
  write(
    'repair.workflow.ts',
    `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";
export default defineWorkflow({
  name: "repair",
  contractId: "repair.v1",
  startAt: "fix",
  nodes: { fix: compute({ run: () => ({ fixed: true }) }) },
  edges: [],
  exits: { fixed: { from: "fix" } },
});
`,
  );
  const parent = (contractId) =>
    write(
      `parent-${contractId.replace('.', '-')}.workflow.ts`,
      `import { compute, defineWorkflow, includeWorkflow } from "@osolmaz/pi-workflows";
const contract = defineWorkflow({
  name: "repair-contract",
  contractId: "${contractId}",
  startAt: "fix",
  nodes: { fix: compute({ run: () => null }) },
  edges: [],
  exits: { fixed: { from: "fix" } },
});
export default defineWorkflow({
  name: "parent",
  startAt: "repair",
  includes: { repair: includeWorkflow({ workflow: "./repair.workflow.ts", contract }) },
  nodes: { done: compute({ run: ({ outputs }) => outputs.repair }) },
  edges: [{ from: "repair.fixed", to: "done" }],
});
`,
    );
  const ok = await runToEnd(parent('repair.v1'));
  assert.equal(ok.status, 'completed', ok.error);
  assert.deepEqual(ok.result, { exit: 'fixed', output: { fixed: true } });
  const bad = await runToEnd(parent('repair.v2'));
  assert.equal(bad.status, 'failed');
  assert.match(bad.error, /includes\.repair \(.*repair\.workflow\.ts\): contract mismatch: expected repair\.v2, got repair\.v1/);

  const { compute, defineWorkflow, defineWorkflowRegistry } = await import('../index.js');
  const one = (name) => defineWorkflow({ name, startAt: 'a', nodes: { a: compute({ run: () => 1 }) }, edges: [] });
  const registry = defineWorkflowRegistry({ a: one('a'), b: one('b') });
  assert.ok(Object.isFrozen(registry));
  assert.throws(() => defineWorkflowRegistry({ a: one('same'), b: one('same') }), /two workflows named same/);
  assert.throws(() => one('x') && defineWorkflow({ name: 'c', contractId: 'bad id', startAt: 'a', nodes: { a: compute({ run: () => 1 }) }, edges: [] }), /contractId must match/);
});

test('discoverWorkflows, resolveWorkflowRef, workflowSearchDirs, workflowFileStem and loadWorkflowFile, as pi-workflows exports them', async () => {
  const piw = await import('../index.js');
  const home = join(host.dir, 'discover-home');
  mkdirSync(join(home, '.pi', 'agent', 'workflows'), { recursive: true });
  writeFileSync(join(home, '.pi', 'agent', 'workflows', 'global-only.workflow.mjs'), 'export default 1;\n');
  writeFileSync(join(home, '.pi', 'agent', 'workflows', 'disc-shared.workflow.mjs'), 'export default 1;\n');
  write('disc-shared.workflow.ts', 'export default 2;\n');
  write(
    'disc-load.workflow.ts',
    'import { compute, defineWorkflow } from "@osolmaz/pi-workflows";\nenum K { A = 1 }\nexport default defineWorkflow({ name: "disc-load", startAt: "a", nodes: { a: compute({ run: () => K.A }) }, edges: [] });\n',
  );
  const paths = { cwd: project, homeDir: home };
  assert.deepEqual(piw.workflowSearchDirs(paths), [
    { dir: join(project, '.pi', 'workflows'), source: 'project' },
    { dir: join(home, '.pi', 'agent', 'workflows'), source: 'global' },
  ]);
  const found = await piw.discoverWorkflows(paths);
  assert.deepEqual(found.find((w) => w.name === 'global-only'), { name: 'global-only', ref: join(home, '.pi', 'agent', 'workflows', 'global-only.workflow.mjs'), source: 'global' });
  // The project's file hides the global one of the same name.
  assert.deepEqual(found.find((w) => w.name === 'disc-shared'), { name: 'disc-shared', ref: join(project, '.pi', 'workflows', 'disc-shared.workflow.ts'), source: 'project' });
  assert.equal(piw.workflowFileStem('/x/release.workflow.ts'), 'release');
  const ref = await piw.resolveWorkflowRef('disc-load', paths);
  assert.equal(ref.source, 'project');
  // Loaded in this test's own process: TypeScript and the package name work here too.
  const loaded = await piw.loadWorkflowFile(ref.ref);
  assert.equal(piw.isWorkflowDefinition(loaded), true);
  assert.equal(loaded.name, 'disc-load');
  await assert.rejects(piw.loadWorkflowFile(join(home, '.pi', 'agent', 'workflows', 'global-only.workflow.mjs')), /must export default defineWorkflow/);
});

test("an included workflow's callbacks see its input as its own input normaliser returns it, as pi-workflows has it", async () => {
  write(
    'doubler.workflow.ts',
    `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";

export default defineWorkflow({
  name: "doubler",
  input: (raw) => ({ n: Number((raw as { n: string }).n) * 2, mode: (raw as { mode?: string }).mode ?? "default" }),
  startAt: "read",
  nodes: { read: compute({ run: ({ input }) => input }) },
  edges: [],
  exits: { done: { from: "read" } },
});
`,
  );
  const file = write(
    'outer.workflow.ts',
    `import { compute, defineWorkflow, includeWorkflow } from "@osolmaz/pi-workflows";

export default defineWorkflow({
  name: "outer",
  startAt: "inner",
  includes: {
    inner: includeWorkflow("./doubler.workflow.ts", { input: ({ input }) => ({ n: (input as { text: string }).text }) }),
    plain: includeWorkflow("./doubler.workflow.ts"),
  },
  nodes: { both: compute({ run: ({ outputs }) => ({ mapped: outputs.inner.output, given: outputs.plain.output }) }) },
  edges: [
    { from: "inner.done", to: "plain" },
    { from: "plain.done", to: "both" },
  ],
});
`,
  );
  const run = await runToEnd(file, { text: '21', n: '5' });
  assert.equal(run.status, 'completed', JSON.stringify(run));
  assert.deepEqual(run.result, { mapped: { n: 42, mode: 'default' }, given: { n: 10, mode: 'default' } });
});

test('workflow updates: the latest per (type, key) in status, events bounded (the excess counted, not stored); the progress helpers workflows import', async () => {
  const c = host.client;
  const session = 'session-compat-bounded';
  const file = write(
    'chatty.workflow.ts',
    `import { action, defineWorkflow, estimateProgress, formatProgressLine, formatRemaining } from "@osolmaz/pi-workflows";

const rows = (completed: number) => ({ schema: "pi-workflows.progress.v1" as const, label: "Rows", status: "running" as const, completed, total: 3000, unit: "rows" });

export default defineWorkflow({
  name: "chatty",
  startAt: "work",
  nodes: {
    work: action({
      run: async ({ publishUpdate }) => {
        const started = Date.now();
        let last;
        for (let i = 1; i <= 3000; i++) last = await publishUpdate({ type: "progress", key: "rows", data: rows(i) });
        await publishUpdate({ type: "note", key: "log", data: { text: "done" } });
        const t = Date.parse("2026-08-16T10:00:00Z");
        const estimate = estimateProgress("rows", [0, 1, 2].map((m) => ({ at: new Date(t + m * 60_000).toISOString(), data: rows(100 + m * 100) })), new Date(t + 120_000));
        return {
          seconds: Math.ceil((Date.now() - started) / 1000),
          lastSeq: last!.seq,
          line: formatProgressLine(estimate, new Date(t + 120_000)),
          confidence: estimate.confidence,
          remaining: [formatRemaining(45_000), formatRemaining(18 * 60_000), formatRemaining(2.5 * 3_600_000), formatRemaining(36 * 3_600_000)],
        };
      },
    }),
  },
  edges: [],
});
`,
  );
  const { runId, run, progress } = await runCollectingProgress(c, file, { sessionId: session });
  assert.equal(run.status, 'completed', run.error ?? run.review_reason);
  const status = await c.runStatus(runId);
  // The latest of each key, in the order they arrived; a counted track keeps its samples.
  assert.deepEqual(
    status.updates.map((u) => [u.type, u.key, u.data.completed ?? u.data.text, u.node_id]),
    [
      ['progress', 'rows', 3000, 'work'],
      ['note', 'log', 'done', 'work'],
    ],
  );
  assert.equal(status.updates[0].samples.length, 9);
  assert.deepEqual(status.updates[0].samples.at(-1).slice(1), [3000]);
  // Every update is either an event or counted as dropped; far fewer are stored than were
  // published (a burst of 100, then 20 a second), and the events say what was dropped.
  assert.equal(progress.length + status.events_dropped, 3001);
  assert.ok(progress.length <= 100 + 20 * (run.result.seconds + 1), `${progress.length} events in ${run.result.seconds} s`);
  assert.ok(status.events_dropped > 0);
  const reported = progress.reduce((n, p) => n + (p.dropped ?? 0), 0);
  assert.ok(reported <= status.events_dropped);
  assert.equal(typeof run.result.lastSeq, 'number');
  // The helpers: 100 rows a minute, 300 of 3,000 done.
  assert.equal(run.result.line, 'Rows  300/3,000 rows  ETA 27m');
  assert.equal(run.result.confidence, 'medium');
  assert.deepEqual(run.result.remaining, ['45s', '18m', '2.5h', '1.5d']);
});

test('a presentationPrompt function is called when the run completes, with { state, finalOutput, signal }; its text goes with the terminal message; undefined or a throw gives none', async () => {
  const c = host.client;
  const presented = async (name, prompt) => {
    const session = `session-compat-present-${name}`;
    const file = write(
      `${name}.workflow.mjs`,
      `import { compute, defineWorkflow } from "@osolmaz/pi-workflows";
export default defineWorkflow({
  name: "${name}",
  startAt: "answer",
  presentationPrompt: ${prompt},
  nodes: { answer: compute({ run: ({ input }) => ({ verdict: "ship", topic: input.topic }) }) },
  edges: [],
});
`,
    );
    const run = await c.waitForRun((await c.startRun(file, { input: { topic: 'tests' }, sessionId: session })).run_id, { timeoutMs: 30_000 });
    assert.equal(run.status, 'completed', run.error);
    const messages = await c.claimMessages(session);
    const terminal = messages.find((m) => m.kind === 'terminal');
    assert.ok(terminal, JSON.stringify(messages));
    return terminal.content.presentation;
  };
  assert.equal(
    await presented(
      'presentfn',
      '({ state, finalOutput, signal }) => `Explain ${finalOutput.verdict} for ${state.input.topic} (${state.status}, ${Object.keys(state.outputs)}, ${signal instanceof AbortSignal})`',
    ),
    'Explain ship for tests (completed, answer, true)',
  );
  assert.equal(await presented('presentnone', '() => undefined'), undefined);
  assert.equal(await presented('presentthrow', '() => { throw new Error("no words"); }'), undefined);
  assert.equal(await presented('presentstring', '"Summarize the result."'), 'Summarize the result.');
  const { compute, defineWorkflow } = await import('../index.js');
  assert.throws(
    () => defineWorkflow({ name: 'bad', startAt: 'a', presentationPrompt: 42, nodes: { a: compute({ run: () => 1 }) }, edges: [] }),
    /presentationPrompt must be a string or a function/,
  );
});

test('`piw run start <name>` without --input, and the Node client without `input`, give the workflow {}, as a start from Pi does: a file that reads input.text unguarded runs', async () => {
  write(
    'greet.workflow.ts',
    `import { compute, defineWorkflow, shell } from "@osolmaz/pi-workflows";

type GreetInput = {
  name?: string;
};

/** A shell step and no agent: run from the command line, with no input. */
export default defineWorkflow({
  name: "greet",
  startAt: "say",
  nodes: {
    say: shell({
      exec: ({ input }) => ({ command: "printf", args: ["hello %s", (input as GreetInput).name ?? "world"], timeoutMs: 10_000 }),
      parse: (result) => ({ stdout: result.stdout }),
    }),
    finish: compute({ run: ({ input, outputs }) => ({ said: (outputs.say as { stdout: string }).stdout, input }) }),
  },
  edges: [{ from: "say", to: "finish" }],
});
`,
  );
  // A run that did not complete exits non-zero: its JSON is on stdout all the same.
  const { stdout } = await promisify(execFile)(hostBin, ['run', 'start', 'greet', '--wait', '--json'], {
    cwd: project,
    env: { PATH: process.env.PATH, HOME: host.dir, PIW_HOME: host.home },
  }).catch((e) => e);
  const { run } = JSON.parse(stdout);
  assert.equal(run.status, 'completed', run.error);
  assert.deepEqual(run.result, { said: 'hello world', input: {} });
  // The Node client without `input` gives the same.
  const c = host.client;
  const fromClient = await c.waitForRun((await c.startRun(join(project, '.pi', 'workflows', 'greet.workflow.ts'))).run_id, { timeoutMs: 20_000 });
  assert.equal(fromClient.status, 'completed', fromClient.error);
  assert.deepEqual(fromClient.result, { said: 'hello world', input: {} });
});
