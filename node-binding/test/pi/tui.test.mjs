// The extension in Pi's interactive TUI, in a real terminal (tmux): the cards and their expand
// key, a protected decision's dialog with its whole presentation, paged, and a complete `/workflow`
// argument that runs with one Enter. Every wait is for the whole screen the test then relies on
// (frames are drawn in pieces), bounded by WAIT_MS.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { WAIT_MS, alive, piCli, piEnv, pkgDir, sleep } from './harness.mjs';

const hasTmux = (() => {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
if (!hasTmux && process.env.PIW_TEST_REQUIRE_TMUX) throw new Error('tmux is required (PIW_TEST_REQUIRE_TMUX) but not installed');
const skip = hasTmux ? false : 'tmux is not installed, so Pi is not run in a real terminal';

const quote = (s) => `'${String(s).replaceAll("'", "'\\''")}'`;

/** Pi's interactive mode in a tmux server of the test's own (`-L`), on the environment's mock model. */
class Terminal {
  constructor(env, { columns = 100, rows = 40, sessionId = 'tui-a' } = {}) {
    this.socket = `piw-pi-tui-${process.pid}-${Math.random().toString(16).slice(2)}`;
    const vars = { ...env.env, TERM: 'xterm-256color' };
    const pi = [
      process.execPath, piCli,
      '--session-dir', join(env.root, 's'),
      '--session-id', sessionId,
      '--no-skills', '--no-themes', '--no-prompt-templates', '--no-context-files', '--offline',
      '--no-builtin-tools',
      '--provider', 'mock', '--model', 'mock-model',
      '-e', pkgDir,
    ];
    // `exec`: the pane's process becomes Pi (`close` waits for it). `env -i`: Pi sees the test's
    // environment only (the temp HOME), not the tmux server's.
    const command = `exec env -i ${Object.entries(vars).map(([k, v]) => `${k}=${quote(v)}`).join(' ')} ${pi.map(quote).join(' ')}`;
    this.tmux('new-session', '-d', '-x', String(columns), '-y', String(rows), '-c', env.project, command);
    this.piPid = Number(this.tmux('list-panes', '-F', '#{pane_pid}').trim());
  }

  tmux(...args) {
    return execFileSync('tmux', ['-L', this.socket, '-f', '/dev/null', ...args]).toString('utf8');
  }

  screen() {
    return this.tmux('capture-pane', '-p');
  }

  /** Types `text` literally, then sends the named keys (tmux names: Enter, Down, S-Down, C-o). */
  type(text, ...keys) {
    if (text) this.tmux('send-keys', '-l', text);
    for (const key of keys) this.tmux('send-keys', key);
  }

  /**
   * Waits until the whole screen satisfies `ok`; fails with the last screen after WAIT_MS.
   * `meanwhile(screen)` is called with each screen that does not.
   */
  async waitFor(what, ok, meanwhile = () => {}) {
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const screen = this.screen();
      if (ok(screen)) return screen;
      if (Date.now() > deadline) throw new Error(`never ${what}; the last screen:\n${screen}`);
      meanwhile(screen);
      await sleep(50);
    }
  }

  /**
   * Submits `line` in Pi's editor and waits for `ok` (see `waitFor`). Pi takes no submission
   * until its start is complete: it keeps the line in the editor and says "Startup is still in
   * progress", and Enter is pressed again, until the line leaves the editor.
   */
  async submit(line, what, ok) {
    this.type(line, 'Enter');
    return this.waitFor(what, ok, (screen) => {
      if (screen.includes('Startup is still in progress') && rowsOf(screen).includes(line)) this.type('', 'Enter');
    });
  }

  /**
   * Ends the tmux server and waits until Pi has exited: Pi writes Node's compile cache into the
   * test's directory as it exits, so removing the directory before that races its writes.
   */
  async close() {
    try {
      this.tmux('kill-server');
    } catch {
      // already gone
    }
    const deadline = Date.now() + 10_000;
    while (alive(this.piPid) && Date.now() < deadline) await sleep(20);
    if (alive(this.piPid)) process.kill(this.piPid, 'SIGKILL');
    while (alive(this.piPid)) await sleep(20);
  }
}

/** The screen's rows, trailing spaces off. */
const rowsOf = (screen) => screen.split('\n').map((r) => r.trimEnd());

let env;
let term;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  await term?.close();
  term = null;
  await env?.close();
});

test('in the TUI a decision shows its whole presentation, paged with Shift+Down, above its choices', { skip }, async () => {
  env.addWorkflow('plan.workflow.mjs', 'plan');
  term = new Terminal(env, { columns: 100, rows: 30 });
  await term.waitFor('Pi drawn (its editor and footer)', (s) => /mock-model/.test(s) && /─{20}/.test(s));
  const first = await term.submit('/workflow plan', 'the dialog: title, summary, the first rows, the choices and the keys', (s) => {
    const r = rowsOf(s);
    return (
      r.includes(' Workflow plan: Approve the migration plan') &&
      r.includes(' Move the store to the new schema in thirty steps.') &&
      r.includes(' Changes') &&
      r.includes(' • Step 1 of the plan.') &&
      r.some((x) => /^ ── rows 1–\d+ of \d+ · Shift\+↓ more ──$/.test(x)) &&
      r.includes(' > Approve') &&
      r.includes('   Reject') &&
      r.includes(' ↑↓ choose · Enter reads on (decides at the end) · Esc later')
    );
  });
  assert.ok(!first.includes('END-OF-PLAN'), 'the end of the plan is further down');
  const total = Number(/rows 1–\d+ of (\d+)/.exec(first)[1]);
  // Paged to the end: the rest of the bullets, the fields, the preformatted block as written.
  for (let i = 0; i < 3; i++) term.type('', 'S-Down');
  const end = await term.waitFor('the end of the presentation', (s) => {
    const r = rowsOf(s);
    return (
      r.includes(' • Step 30 of the plan.') &&
      r.includes(' Facts') &&
      r.includes(' Tables: 12') &&
      r.includes(' Downtime: none') &&
      r.includes(' piw migrate --dry-run') &&
      r.includes('   then: piw migrate') &&
      r.includes(' END-OF-PLAN') &&
      r.some((x) => new RegExp(`^ ── rows \\d+–${total} of ${total} · Shift\\+↑ back ──$`).test(x)) &&
      r.includes(' > Approve') &&
      r.includes(' ↑↓ choose · Enter decide · Shift+↑↓ scroll · Esc later')
    );
  });
  assert.ok(end);
  const client = await env.client();
  const [{ run_id: runId }] = await client.listRuns({ sessionId: 'tui-a' });
  term.type('', 'Down', 'Enter');
  const run = await client.waitForRun(runId, { timeoutMs: WAIT_MS });
  assert.deepEqual(run.result, { approved: false });
  await term.waitFor('the run ended, its card on screen', (s) => rowsOf(s).some((r) => /^ workflow plan completed · run run-/.test(r)));
});

test("in the TUI Pi's expand key opens a step card to the whole step contract and a result card to the whole result", { skip }, async () => {
  env.addWorkflow('agent.workflow.mjs', 'titles');
  // Submits when the step is the newest message, once.
  env.model.script = ({ last, lastText }) => {
    const id = last.role === 'user' ? /"interactionId":"([^"]+)"/.exec(lastText)?.[1] : null;
    return id ? { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: id, output: { title: 'Faster starts' } } } } : { text: 'submitted' };
  };
  term = new Terminal(env, { columns: 140, rows: 50 });
  await term.waitFor('Pi drawn (its editor and footer)', (s) => /mock-model/.test(s) && /─{20}/.test(s));
  const collapsed = await term.submit('/workflow titles the release', 'the step card and the result card, collapsed', (s) => {
    const r = rowsOf(s);
    return (
      r.some((x) => /^ workflow step draft · run run-/.test(x)) &&
      r.some((x) => /^ workflow titles completed · run run-/.test(x)) &&
      r.includes(' result: {"title":"Faster starts"}') &&
      r.filter((x) => x === ' … ctrl+o to expand').length >= 2
    );
  });
  assert.ok(!collapsed.includes('{"action":"submit"'), 'collapsed, the step card is short');
  term.type('', 'C-o');
  await term.waitFor('both cards expanded', (s) => {
    const r = rowsOf(s);
    return (
      r.includes(' Propose a title for the release') &&
      r.includes(' Expected output: {"title": string}') &&
      r.includes(' Submit it with the workflow tool, exactly:') &&
      r.some((x) => /^ \{"action":"submit","interactionId":"[^"]+","output":"<your JSON output>"\}$/.test(x)) &&
      r.includes(' result:') &&
      r.includes('   "title": "Faster starts"')
    );
  });
});

test('a complete /workflow argument runs with one Enter', { skip }, async () => {
  term = new Terminal(env, { columns: 120, rows: 40, sessionId: 'tui-enter' });
  await term.waitFor('Pi drawn (its editor and footer)', (s) => /mock-model/.test(s) && /─{20}/.test(s));
  // Offered only once the extension has loaded: Pi draws its editor before its start is
  // complete, so another of its commands is run first (`submit` waits out the start).
  await term.submit('/workflow status', 'the status command answered', (s) => /workflow: /.test(s));
  term.type('/workflow lis');
  await term.waitFor('the completion menu offering list', (s) => /→ list/.test(s));
  term.type('t');
  // Complete: the menu closes (it would otherwise take the next Enter).
  await term.waitFor('the menu closed on the complete argument', (s) => /^\/workflow list\s*$/m.test(s) && !/→ list/.test(s));
  term.type('', 'Enter');
  await term.waitFor('the command ran', (s) => /Workflows:|No workflows in/.test(s));
});
