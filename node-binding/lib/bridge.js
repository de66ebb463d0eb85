// The launcher's side of a detached run's bridge the command line that runs Pi in
// RPC mode with the bridge extension (../extension/bridge.js) for one run, its exit codes, the
// per-run lock the bridge holds, and the preflight a launcher runs before a detached start.
// Which Pi to run is the caller's (`pi`: Pi's CLI script or executable).
import { join } from 'node:path';

import { MIN_PI_VERSION } from '../pi-cli.mjs';
import { PiwError, native } from './errors.js';
import { native as addon, packageDir } from './native.js';

/** The bridge extension's file, for Pi's `-e`. */
export const BRIDGE_EXTENSION = join(packageDir, 'extension', 'bridge.js');

/**
 * How a bridge's Pi exits. `done`: the run has no step for a bridge any more (it ended, is
 * paused, in review, or waits on a checkpoint or a human decision, which a bridge never
 * answers). `busy`: another bridge serves the run (this one did nothing). `unusable`: no
 * such run, not a detached run, or no `PIW_BRIDGE_RUN`. `hostGone`: the piw host did not answer
 * or closed the connection (an orphan of a host that died). Anything else is Pi's own (1: it
 * could not start; 143: SIGTERM).
 */
export const BRIDGE_EXIT = Object.freeze({ done: 0, busy: 3, unusable: 4, hostGone: 5 });

const isScript = (pi) => /\.(c|m)?js$/.test(pi);

/**
 * The command line of the bridge of run `runId`: `{ command, args, env }`, `env` what to add to
 * the launcher's environment. `pi`: Pi's CLI (a `.js` script runs under `node`, default this
 * Node); `provider`, `model`: the model the bridge's Pi uses (neither: Pi's own default, as in
 * a session in the project); `piArgs`: more of Pi's arguments;
 * `home`: the installation (`PIW_HOME`), default the launcher's.
 */
export function bridgeCommand({ pi, runId, provider, model, piArgs = [], node = process.execPath, home } = {}) {
  if (!pi) throw new PiwError('malformed', 'bridgeCommand needs `pi`, the Pi to run');
  if (!runId) throw new PiwError('malformed', 'bridgeCommand needs `runId`');
  const args = [
    ...(isScript(pi) ? [pi] : []),
    '--mode', 'rpc',
    '--no-session',
    // What a session's model sees in the project (context files, skills, prompt templates),
    // without any other extension.
    '--no-extensions', '--no-themes',
    '-e', BRIDGE_EXTENSION,
    ...(provider ? ['--provider', provider] : []),
    ...(model ? ['--model', model] : []),
    ...piArgs,
  ];
  return {
    command: isScript(pi) ? node : pi,
    args,
    env: { PIW_BRIDGE_RUN: runId, ...(home ? { PIW_HOME: home } : {}) },
  };
}

/**
 * Takes the bridge lock of `runId` (`$PIW_HOME/bridges/<run>.lock`) for this process's life;
 * `release()` frees it earlier. Held by another process: `PiwError` `bridge_busy`.
 */
export function lockBridge(runId, home = process.env.PIW_HOME || undefined) {
  return native(() => addon.lockBridge(runId, home));
}

function runPi(pi, node, args, env, cwd) {
  const [command, argv] = isScript(pi) ? [node, [pi, ...args]] : [pi, args];
  return new Promise((resolve) => {
    // `node:child_process` on first use: every workflow worker imports this module through the package.
    process.getBuiltinModule('node:child_process').execFile(command, argv, { env, cwd, timeout: 60_000, maxBuffer: 4 << 20 }, (error, stdout, stderr) => {
      resolve({ code: typeof error?.code === 'number' ? error.code : error ? null : 0, spawnError: typeof error?.code === 'string' ? error : null, stdout, stderr });
    });
  });
}

/** `1.6.0` -> [1, 6, 0]; null when `text` holds no version. */
const versionOf = (text) => /(\d+)\.(\d+)\.(\d+)/.exec(text ?? '')?.slice(1, 4).map(Number) ?? null;
const atLeast = (v, min) => {
  for (let i = 0; i < 3; i++) if (v[i] !== min[i]) return v[i] > min[i];
  return true;
};

/**
 * Checks, before a detached start, that Pi can serve the run's steps: a provider and a model
 * are given, Pi runs and is MIN_PI_VERSION or newer, the provider has credentials (`pi auth
 * check`), and Pi offers that model with them (`pi --list-models`). Resolves with `{ provider, model }`; else a `PiwError`
 * `pi_unusable` that says what is missing and how to fix it. `env`: the environment the bridge
 * will have (credentials come from it and from Pi's agent directory).
 */
export async function preflightBridge({ pi, provider, model, node = process.execPath, env = process.env, cwd } = {}) {
  if (!pi) throw new PiwError('pi_unusable', 'no Pi to run detached steps with');
  if (!provider || !model) {
    throw new PiwError('pi_unusable', `a detached run needs a provider and a model for its Pi (got provider ${provider ?? 'none'}, model ${model ?? 'none'})`);
  }
  const about = await runPi(pi, node, ['--version'], env, cwd);
  if (about.spawnError) throw new PiwError('pi_unusable', `cannot run Pi (${pi}): ${about.spawnError.message}`);
  const version = versionOf(about.stdout);
  if (about.code !== 0 || !version) {
    throw new PiwError('pi_unusable', `Pi (${pi}) does not run: --version exited ${about.code}: ${(about.stderr || about.stdout).trim().slice(-500)}`);
  }
  if (!atLeast(version, versionOf(MIN_PI_VERSION))) {
    throw new PiwError('pi_unusable', `Pi (${pi}) is version ${version.join('.')}; a detached run needs Pi ${MIN_PI_VERSION} or newer`);
  }
  const auth = await runPi(pi, node, ['auth', 'check', '--provider', provider, '--model', model, '--json'], env, cwd);
  if (auth.spawnError) throw new PiwError('pi_unusable', `cannot run Pi (${pi}): ${auth.spawnError.message}`);
  let verdict = null;
  try {
    verdict = JSON.parse(auth.stdout);
  } catch {
    // reported below with Pi's own words
  }
  if (verdict?.status !== 'ready') {
    const why =
      verdict?.reason === 'credentials_not_configured'
        ? `it has no credentials (pi auth login ${provider}, or its API key in the environment)`
        : verdict
          ? `${verdict.status}${verdict.reason ? `: ${verdict.reason}` : ''}`
          : `pi auth check exited ${auth.code}: ${(auth.stderr || auth.stdout).trim().slice(-500)}`;
    throw new PiwError('pi_unusable', `provider ${provider} is not usable for a detached run: ${why}`);
  }
  const listed = await runPi(pi, node, ['--list-models', model], env, cwd);
  const rows = listed.stdout.split('\n').map((line) => line.trim().split(/\s+/));
  if (listed.code !== 0 || !rows.some(([p, m]) => p === provider && m === model)) {
    throw new PiwError('pi_unusable', `Pi offers no model ${model} of provider ${provider} (pi --list-models ${model} lists the models it can use)`);
  }
  return { provider, model };
}
