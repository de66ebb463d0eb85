// `/workflow channel [list|add|test|remove] ...`: decision channels from Pi, as `piw channel`
// does them from a shell (the same command runs: one implementation of where a channel's
// files live and how the host is told). A bot token is never typed into the command line:
// `add` takes `--token-file FILE`, or asks for the token in a dialog and hands it to `piw` on
// its standard input, so it reaches neither the session nor a process list.
import { execFile } from 'node:child_process';

import { WorkflowError } from './tool.js';

const VERBS = ['list', 'add', 'test', 'remove'];
/** How long `piw channel` may take (`test` waits for Telegram's answer). */
const CHANNEL_COMMAND_MS = 60_000;

/** Runs `piw channel <args>` with `stdin`; resolves with its output, rejects with its error. */
function runPiw(piw, args, stdin) {
  return new Promise((resolve, reject) => {
    const child = execFile(piw, ['channel', ...args], { timeout: CHANNEL_COMMAND_MS, maxBuffer: 1 << 20 }, (error, stdout, stderr) => {
      const said = `${stdout}${stderr}`.trim();
      if (error) reject(new WorkflowError(said || `piw channel ${args[0]} failed: ${error.message}`));
      else resolve(said);
    });
    child.stdin.end(stdin ?? '');
  });
}

/**
 * The `/workflow channel` words `args` (after `channel`): what to tell the person. `piw`: the
 * `piw` binary; `ui`: Pi's `ctx.ui`, for the token dialog.
 */
export async function channelCommand(args, { piw, ui }) {
  const [verb = 'list', ...rest] = args;
  if (!VERBS.includes(verb)) {
    throw new WorkflowError(`/workflow channel ${VERBS.join('|')}: "${verb}" is none of them`);
  }
  if (rest.includes('--token')) {
    throw new WorkflowError('a bot token is never typed into a command: give --token-file FILE, or leave it out and Pi asks for it');
  }
  if (verb === 'add' && !rest.includes('--token-file')) {
    const token = (await ui.input('Telegram bot token (from BotFather; kept only in a file only you can read)', ''))?.trim();
    if (!token) return 'no token given: nothing was added';
    return runPiw(piw, [verb, ...rest, '--token', '-'], `${token}\n`);
  }
  return runPiw(piw, [verb, ...rest]);
}
