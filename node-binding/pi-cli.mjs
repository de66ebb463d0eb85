// Finding and checking the Pi command line, for workflow code that starts Pi processes of its
// own (the sanity-check built-in's reviewers; detached Pi children will use it too). Pi is run
// as a separate process, never imported: a Pi that hangs or crashes is killed with its process
// group and cannot take the run's child with it, and piw never loads a second copy of Pi's
// packages.
//
//   findPi({ env?, timeoutMs? }) -> Promise<Pi>
//     Pi = { command, prefix, version, source, describe }: run it as `command ...prefix ...args`.
//     Looks at, in order: `PIW_PI` (an executable, or a `.js`/`.mjs` file run with this Node),
//     the Pi of the installed package (`@earendil-works/pi-coding-agent` as this package
//     resolves it, run with this Node), `pi` on PATH. Only the first one present is tried.
//     Rejects with a PiUnavailableError that says what was tried and how to fix it when
//     nothing is found, it does not start, or its version is below MIN_PI_VERSION.
//   checkPiModel(pi, { provider, model, env?, cwd?, timeoutMs? }) -> Promise<void>
//     Rejects with a PiUnavailableError unless Pi lists `provider/model` and has credentials
//     for the provider (`pi --list-models`, `pi auth check`).
//   piCommand(pi, args) -> { command, args }: the command that runs Pi with `args`.
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const MIN_PI_VERSION = '1.6.0';
const PI_PACKAGE = '@earendil-works/pi-coding-agent';
/** Pi's own requirement: older Node fails inside Pi with messages that do not say why. */
const MIN_NODE = [22, 19, 0];
const DEFAULT_TIMEOUT_MS = 60_000;

/** Pi cannot be used: `message` says why and what to do. */
export class PiUnavailableError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PiUnavailableError';
    this.code = 'pi_unavailable';
  }
}

const versionOf = (text) => {
  const m = /(\d+)\.(\d+)\.(\d+)/.exec(text);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : null;
};
const atLeast = (v, min) => {
  for (let i = 0; i < 3; i++) if (v[i] !== min[i]) return v[i] > min[i];
  return true;
};
const isExecutable = (file) => {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};
const lastLine = (text) => text.trim().split('\n').slice(-1)[0] ?? '';

/** The command that runs Pi with `args`. */
export function piCommand(pi, args) {
  return { command: pi.command, args: [...pi.prefix, ...args] };
}

/** A `.js` file runs under this Node, which must be new enough for Pi. */
function scriptRunner(file, source) {
  const node = versionOf(process.versions.node);
  if (!atLeast(node, MIN_NODE)) {
    throw new PiUnavailableError(`Pi (${source}: ${file}) needs Node >= ${MIN_NODE.join('.')}; piw's workflow runtime runs Node ${process.versions.node}`);
  }
  return { command: process.execPath, prefix: [file] };
}

/** The Pi command line of the package Pi, as this package resolves it; null when absent. */
function packagePi() {
  let entry;
  try {
    entry = fileURLToPath(import.meta.resolve(PI_PACKAGE));
  } catch {
    return null;
  }
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (!existsSync(manifest)) continue;
    let pkg;
    try {
      pkg = JSON.parse(readFileSync(manifest, 'utf8'));
    } catch {
      return null;
    }
    if (pkg.name !== PI_PACKAGE) continue;
    const bin = typeof pkg.bin === 'string' ? pkg.bin : pkg.bin?.pi;
    return bin ? join(dir, bin) : null;
  }
  return null;
}

function onPath(name, env) {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, name);
    if (isExecutable(file)) return file;
  }
  return null;
}

/** Where Pi is, before it is run: `{ command, prefix, source, describe }`. */
function locate(env) {
  if (env.PIW_PI) {
    const file = env.PIW_PI;
    const describe = `PIW_PI=${file}`;
    if (!existsSync(file)) throw new PiUnavailableError(`Pi not found: ${describe} does not exist`);
    if (/\.(c|m)?js$/.test(file)) return { ...scriptRunner(file, 'PIW_PI'), source: 'PIW_PI', describe };
    if (!isExecutable(file)) throw new PiUnavailableError(`Pi not usable: ${describe} is not executable`);
    return { command: file, prefix: [], source: 'PIW_PI', describe };
  }
  const bundled = packagePi();
  if (bundled) return { ...scriptRunner(bundled, 'package'), source: 'package', describe: `${PI_PACKAGE} at ${bundled}` };
  const found = onPath('pi', env);
  if (found) return { command: found, prefix: [], source: 'PATH', describe: `pi on PATH (${found})` };
  throw new PiUnavailableError(
    `Pi not found: PIW_PI is not set, ${PI_PACKAGE} is not installed beside piw, and there is no pi on PATH; install Pi ${MIN_PI_VERSION} or newer, or set PIW_PI to its command`,
  );
}

/** Runs Pi to completion (bounded), in its own process group; `{ code, stdout, stderr }`. */
function runPi(pi, args, { env, cwd, timeoutMs }) {
  const { command, args: argv } = piCommand(pi, args);
  return new Promise((resolve, reject) => {
    // `node:child_process` on first use: every workflow worker imports this module through the package.
    const child = process.getBuiltinModule('node:child_process').spawn(command, argv, { env, cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c) => (stdout = (stdout + c).slice(-200_000)));
    child.stderr.setEncoding('utf8').on('data', (c) => (stderr = (stderr + c).slice(-20_000)));
    const kill = () => {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      kill();
      reject(new PiUnavailableError(`Pi (${pi.describe}) did not answer \`${args.join(' ')}\` within ${timeoutMs} ms`));
    }, timeoutMs);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new PiUnavailableError(`Pi (${pi.describe}) could not start: ${e.message}`));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      kill();
      resolve({ code: code ?? signal, stdout, stderr });
    });
  });
}

/** Finds Pi and checks that it runs and is new enough (see the top of this file). */
export async function findPi({ env = process.env, timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
  const pi = locate(env);
  const { code, stdout, stderr } = await runPi(pi, ['--version'], { env, timeoutMs });
  const version = versionOf(stdout);
  if (code !== 0 || !version) {
    throw new PiUnavailableError(`Pi (${pi.describe}) does not run: \`--version\` exited with ${code}${lastLine(stderr) ? `: ${lastLine(stderr)}` : ''}`);
  }
  if (!atLeast(version, versionOf(MIN_PI_VERSION))) {
    throw new PiUnavailableError(`Pi (${pi.describe}) is version ${version.join('.')}; piw needs ${MIN_PI_VERSION} or newer`);
  }
  return { ...pi, version: version.join('.') };
}

/** Checks that Pi can use `provider/model`: listed, and the provider's credentials ready. */
export async function checkPiModel(pi, { provider, model, env = process.env, cwd, timeoutMs = DEFAULT_TIMEOUT_MS }) {
  const name = `${provider}/${model}`;
  const listed = await runPi(pi, ['--offline', '--list-models'], { env, cwd, timeoutMs });
  if (listed.code !== 0) {
    throw new PiUnavailableError(`Pi (${pi.describe}) could not list its models: exited with ${listed.code}${lastLine(listed.stderr) ? `: ${lastLine(listed.stderr)}` : ''}`);
  }
  const rows = listed.stdout
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((cols) => cols.length >= 2);
  if (!rows.some(([p, m]) => p === provider && m === model)) {
    const known = rows.map(([p, m]) => `${p}/${m}`);
    throw new PiUnavailableError(
      `Pi has no model ${name}${known.length ? ` (it lists ${known.slice(0, 12).join(', ')}${known.length > 12 ? ', …' : ''})` : ' (it lists no models: configure a provider)'}`,
    );
  }
  const auth = await runPi(pi, ['auth', 'check', '--provider', provider, '--model', model, '--json'], { env, cwd, timeoutMs });
  let status;
  try {
    status = JSON.parse(auth.stdout.trim().split('\n').pop());
  } catch {
    status = { status: 'unknown', reason: lastLine(auth.stderr) || `exited with ${auth.code}` };
  }
  if (status.status !== 'ready') {
    throw new PiUnavailableError(`Pi cannot use ${name}: its credentials are ${status.status}${status.reason ? ` (${status.reason})` : ''}; run \`pi auth login ${provider}\``);
  }
}
