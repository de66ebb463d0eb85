// The `/workflow` command in Pi's real terminal UI (tmux, a server of the test's own): a complete
// argument offers no completion, so one Enter runs it (Pi's Enter on an argument menu only
// applies the selected item). Skipped without tmux unless PIW_TEST_REQUIRE_TMUX is set.
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';

import { WAIT_MS, piCli, piEnv, pkgDir, sleep } from './harness.mjs';

const haveTmux = spawnSync('tmux', ['-V']).status === 0;
if (!haveTmux && process.env.PIW_TEST_REQUIRE_TMUX) throw new Error('tmux is required (PIW_TEST_REQUIRE_TMUX) but not installed');

let env;
let tmux = null;
beforeEach(async () => {
  env = await piEnv();
});
afterEach(async () => {
  try {
    tmux?.('kill-server');
  } catch {
    // already gone
  }
  tmux = null;
  await env?.close();
});

/** Starts Pi's TUI in a tmux server of the test's own; returns the pane reader and key sender. */
function startTui() {
  const socket = join(env.root, 'tmux.sock');
  tmux = (...args) => execFileSync('tmux', ['-S', socket, ...args], { encoding: 'utf8' });
  const vars = Object.entries({ ...env.env, TERM: 'xterm-256color' }).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  const pi = [process.execPath, piCli, '--session-dir', join(env.root, 's'), '--session-id', 'tui', '--no-skills', '--no-themes',
    '--no-prompt-templates', '--no-context-files', '--offline', '--no-builtin-tools', '--provider', 'mock', '--model', 'mock-model', '-e', pkgDir];
  tmux('new-session', '-d', '-x', '120', '-y', '40', `cd ${JSON.stringify(env.project)} && env -i ${vars.join(' ')} ${pi.map((a) => JSON.stringify(a)).join(' ')}`);
  const pane = () => tmux('capture-pane', '-p');
  /** Waits until the whole pane satisfies `check`. */
  const until = async (check, what) => {
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const text = pane();
      if (check(text)) return text;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; the pane:\n${text}`);
      await sleep(50);
    }
  };
  return { until, type: (text) => tmux('send-keys', '-l', text), key: (k) => tmux('send-keys', k) };
}

test('a complete /workflow argument runs with one Enter', { skip: !haveTmux && 'tmux is not installed' }, async () => {
  const tui = startTui();
  await tui.until((p) => /mock-model/.test(p), 'Pi started');
  tui.type('/workflow lis');
  await tui.until((p) => /→ list/.test(p), 'the completion menu offering list');
  tui.type('t');
  // Complete: the menu closes (it would otherwise take the next Enter).
  await tui.until((p) => /^\/workflow list\s*$/m.test(p) && !/→ list/.test(p), 'the menu closed on the complete argument');
  tui.key('Enter');
  await tui.until((p) => /Workflows:|No workflows in/.test(p), 'the command ran');
});
