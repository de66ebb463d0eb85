// piw installed as a user installs it: `scripts/pack debug` writes the two npm tarballs (the
// package and its platform package of prebuilt binaries), `npm install` puts them in a fresh
// project, and everything after runs with a PATH that has no `cargo` and no checkout in it,
// a temp HOME and PIW_HOME: `npx piw run start` of a `.workflow.mjs` and a `.workflow.ts`, the
// installed binary on its own (finding Node and the worker runtime from its installation), a
// Node client of the installed package, and `pi install` of it into Pi. Nothing is downloaded:
// the tarballs are local, the package's own dependencies are packed from the repository's
// node_modules, and npm runs --offline.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';

import { alive, piCli, piEnv, pkgDir, stopHost, until } from './pi/harness.mjs';

const repoRoot = resolve(pkgDir, '..');
/** Bounds a command that only a hang reaches. */
const COMMAND_MS = 120_000;

let root;
let project;
let userEnv;
let userPath;
let piwHome;
/** The two packed tarballs (main, platform) and the main package's dependencies, packed. */
let tarballs;
let dependencyTarballs;
const pis = [];

/** Runs `cmd args` in the user's environment; resolves with `{ code, signal, stdout, stderr }`. */
function run(cmd, args, { env = userEnv, cwd = project, input } = {}) {
  return new Promise((resolveRun, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('error', reject);
    const timer = setTimeout(() => child.kill('SIGKILL'), COMMAND_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolveRun({ code, signal, stdout, stderr, text: `${stdout}${stderr}` });
    });
    // A command that exits before reading its input closes the pipe: not an error here.
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? '');
  });
}

/** Directories of `PATH` that hold an executable `name`. */
function onPath(path, name) {
  return path.split(delimiter).filter((dir) => dir && existsSync(join(dir, name)));
}

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'piw-install-'));
  const tmp = join(root, 'tmp');
  const home = join(root, 'home');
  project = join(root, 'project');
  piwHome = join(root, 'piw-home');
  const bin = join(root, 'bin');
  for (const d of [tmp, home, project, bin]) mkdirSync(d, { recursive: true });

  // Packing builds (a no-op after the workspace build) with the developer's own environment;
  // npm writes no log or cache of it anywhere but the temp dir.
  const npmQuiet = { npm_config_update_notifier: 'false', npm_config_logs_dir: join(root, 'npm-logs'), npm_config_audit: 'false', npm_config_fund: 'false' };
  const packed = execFileSync(join(repoRoot, 'scripts', 'pack'), ['debug', join(root, 'packs')], {
    env: { ...process.env, ...npmQuiet },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 600_000,
  });
  tarballs = packed.trim().split('\n');
  assert.equal(tarballs.length, 2, packed);

  // The user's PATH: this Node (>= 22.19), npm and npx first, then the system's directories
  // without any that holds `cargo` or lies in this checkout.
  symlinkSync(process.execPath, join(bin, 'node'));
  for (const tool of ['npm', 'npx']) {
    const [dir] = onPath(process.env.PATH ?? '', tool);
    assert.ok(dir, `${tool} on PATH`);
    symlinkSync(realpathSync(join(dir, tool)), join(bin, tool));
  }
  const systemDirs = (process.env.PATH ?? '')
    .split(delimiter)
    .filter((dir) => dir && !existsSync(join(dir, 'cargo')) && !resolve(dir).startsWith(repoRoot));
  userPath = [bin, ...systemDirs].join(delimiter);
  assert.deepEqual(onPath(userPath, 'cargo'), []);

  // The package's own runtime dependencies (and theirs) are packed from the repository's
  // node_modules, which `npm ci` filled, and installed from those tarballs with the others:
  // --offline and an empty cache, so nothing at all is fetched.
  dependencyTarballs = packDependencies(pkgDir, join(root, 'deps'), { ...process.env, HOME: home, npm_config_cache: join(root, 'npm-cache'), npm_config_offline: 'true', ...npmQuiet });
  userEnv = {
    PATH: userPath,
    HOME: home,
    TMPDIR: tmp,
    PIW_HOME: piwHome,
    PIW_KILL_GRACE_MS: '300',
    LANG: 'C.UTF-8',
    npm_config_cache: join(root, 'npm-cache'),
    // npx finds `piw` in the project; were it to look further, it would fail, not download.
    npm_config_offline: 'true',
    ...npmQuiet,
  };
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'my-project', version: '1.0.0', private: true }));
  const installed = await run('npm', ['install', ...dependencyTarballs, ...tarballs]);
  assert.equal(installed.code, 0, installed.text);

  writeFileSync(
    join(project, 'hello.workflow.mjs'),
    `import { compute, defineWorkflow } from 'piw';
export default defineWorkflow({
  name: 'hello',
  startAt: 'greet',
  nodes: { greet: compute({ run: ({ input }) => ({ greeting: \`hello \${input.name}\` }) }) },
  edges: [],
});
`,
  );
  writeFileSync(
    join(project, 'double.workflow.ts'),
    `import { compute, defineWorkflow } from 'piw';
interface Input { n: number }
const double = (input: Input): { doubled: number } => ({ doubled: input.n * 2 });
export default defineWorkflow({
  name: 'double',
  startAt: 'double',
  nodes: { double: compute({ run: ({ input }: { input: Input }) => double(input) }) },
  edges: [],
});
`,
  );
});

after(async () => {
  for (const pi of pis) pi.kill();
  if (piwHome) await stopHost(piwHome);
  if (root) rmSync(root, { recursive: true, force: true });
});

const platformDir = () => join(project, 'node_modules', 'piw-linux-x64-gnu');

/** The executable of the host serving `home`. */
async function hostExe(home, env = userEnv) {
  const status = await run(join(platformDir(), 'bin', 'piw'), ['host', 'status', '--json'], { env: { ...env, PIW_HOME: home } });
  assert.equal(status.code, 0, status.text);
  return realpathSync(`/proc/${JSON.parse(status.stdout).pid}/exe`);
}

/**
 * Packs `dir`'s runtime dependencies, and theirs, from `dir/node_modules` (as `npm ci`
 * installed them) into `out`, running npm in `env`; returns the tarballs' paths.
 */
function packDependencies(dir, out, env) {
  mkdirSync(out, { recursive: true });
  const seen = new Set();
  const pending = Object.keys(JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).dependencies ?? {});
  const tarballs = [];
  while (pending.length) {
    const name = pending.pop();
    if (seen.has(name)) continue;
    seen.add(name);
    const installed = join(dir, 'node_modules', name);
    assert.ok(existsSync(installed), `${name} is installed in ${dir}/node_modules (npm ci)`);
    const file = execFileSync('npm', ['pack', installed, '--ignore-scripts', '--pack-destination', out], { encoding: 'utf8', env })
      .trim()
      .split('\n')
      .pop();
    tarballs.push(join(out, file));
    pending.push(...Object.keys(JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')).dependencies ?? {}));
  }
  return tarballs;
}

test('the packages hold the prebuilt binaries, stripped', () => {
  const dir = platformDir();
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  assert.deepEqual([pkg.os, pkg.cpu, pkg.libc], [['linux'], ['x64'], ['glibc']]);
  const main = JSON.parse(readFileSync(join(project, 'node_modules', 'piw', 'package.json'), 'utf8'));
  assert.deepEqual(main.optionalDependencies, { 'piw-linux-x64-gnu': main.version });
  assert.equal(pkg.version, main.version);
  assert.deepEqual(readdirSync(join(dir, 'bin')).sort(), ['piw', 'piw-json-worker']);
  for (const file of ['bin/piw', 'bin/piw-json-worker', 'piw.linux-x64-gnu.node']) {
    const sections = execFileSync('readelf', ['-S', '-W', join(dir, file)], { encoding: 'utf8' });
    assert.doesNotMatch(sections, /\.debug_info|\.symtab/, `${file} carries debug info or symbols`);
  }
  // The main package carries no binary of its own.
  assert.deepEqual(readdirSync(join(project, 'node_modules', 'piw')).filter((f) => f.endsWith('.node')), []);
});

test('`npx piw run start --wait` runs a .workflow.mjs and a .workflow.ts with no cargo and no checkout', async () => {
  const mjs = await run('npx', ['piw', 'run', 'start', 'hello.workflow.mjs', '--input', '{"name":"world"}', '--wait', '--json']);
  assert.equal(mjs.code, 0, mjs.text);
  const first = JSON.parse(mjs.stdout);
  assert.equal(first.run.status, 'completed', mjs.text);
  assert.deepEqual(first.run.result, { greeting: 'hello world' });

  const ts = await run('npx', ['piw', 'run', 'start', 'double.workflow.ts', '--input', '{"n":21}', '--wait', '--json']);
  assert.equal(ts.code, 0, ts.text);
  assert.deepEqual(JSON.parse(ts.stdout).run.result, { doubled: 42 });

  // The host is the installed binary, not a build of this checkout.
  assert.equal(await hostExe(piwHome), realpathSync(join(platformDir(), 'bin', 'piw')));
  // Exit codes pass through the launcher: a usage error is 2.
  const usage = await run('npx', ['piw', 'run', 'start']);
  assert.equal(usage.code, 2, usage.text);
  const stopped = await run('npx', ['piw', 'host', 'stop']);
  assert.equal(stopped.code, 0, stopped.text);
});

/** The fenced blocks of `lang` in README.md's section `heading`, in order. */
function readmeBlocks(heading, lang) {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  const start = readme.indexOf(`\n${heading}\n`);
  assert.ok(start >= 0, `README.md has a section ${heading}`);
  const next = readme.indexOf('\n## ', start + heading.length + 2);
  const section = readme.slice(start, next < 0 ? undefined : next);
  return [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].filter((m) => m[1] === lang).map((m) => m[2]);
}

test("the README's quickstart runs as written: its workflow file, then its commands", async () => {
  const [workflow] = readmeBlocks('## Quickstart', 'js');
  const dir = join(project, '.pi', 'workflows');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'hello.workflow.mjs'), workflow);
  const commands = readmeBlocks('## Quickstart', 'sh')
    .flatMap((block) => block.split('\n'))
    .filter((line) => line.startsWith('npx piw '));
  assert.ok(commands.length >= 2, `the quickstart's commands: ${commands.join(' | ')}`);
  for (const line of commands) {
    const [command, comment = ''] = line.split(/\s+#\s+/);
    const done = await run('sh', ['-c', command]);
    assert.equal(done.code, 0, `${command}: ${done.text}`);
    const printed = /^prints (.*)$/.exec(comment.trim());
    if (printed) assert.ok(done.stdout.includes(printed[1]), `${command} prints ${printed[1]}: ${done.text}`);
  }
  const stopped = await run('npx', ['piw', 'host', 'stop']);
  assert.equal(stopped.code, 0, stopped.text);
});

test('installed globally from its tarballs: `piw` and its man pages on the prefix; one uninstall of both leaves nothing', async () => {
  const prefix = join(root, 'global');
  const env = { ...userEnv, npm_config_prefix: prefix, PATH: [join(prefix, 'bin'), userPath].join(delimiter) };
  const installed = await run('npm', ['install', '-g', ...dependencyTarballs, ...tarballs], { env });
  assert.equal(installed.code, 0, installed.text);
  const version = await run('piw', ['--version'], { env });
  assert.equal(version.code, 0, version.text);
  const pages = readdirSync(join(prefix, 'share', 'man', 'man1'));
  for (const page of ['piw.1', 'piw-run-start.1', 'piw-view.1']) assert.ok(pages.includes(page), `${page} in ${pages.join(' ')}`);
  const page = readFileSync(join(prefix, 'share', 'man', 'man1', 'piw-run-start.1'), 'utf8');
  assert.match(page, /^\.TH/m, 'a roff page');

  const removed = await run('npm', ['uninstall', '-g', 'piw', 'piw-linux-x64-gnu'], { env });
  assert.equal(removed.code, 0, removed.text);
  const left = readdirSync(join(prefix, 'lib', 'node_modules')).filter((p) => p.startsWith('piw'));
  assert.deepEqual(left, [], 'no piw package is left');
  assert.equal(existsSync(join(prefix, 'bin', 'piw')), false, 'no piw on the prefix');
  assert.deepEqual(readdirSync(join(prefix, 'share', 'man', 'man1')).filter((p) => p.startsWith('piw')), [], 'no man page left');
});

test('the main package installed without its platform package says to install the platform tarball with it', async () => {
  const alone = join(root, 'alone');
  mkdirSync(alone);
  writeFileSync(join(alone, 'package.json'), JSON.stringify({ name: 'alone', version: '1.0.0', private: true }));
  const installed = await run('npm', ['install', ...dependencyTarballs, tarballs[0]], { cwd: alone });
  assert.equal(installed.code, 0, installed.text);
  const started = await run('npx', ['piw', 'runs'], { cwd: alone });
  assert.notEqual(started.code, 0, started.text);
  assert.match(started.text, /piw-linux-x64-gnu \(an optional dependency of piw\) is not installed/);
  assert.match(started.text, /install piw-linux-x64-gnu-[0-9.]+\.tgz with piw-[0-9.]+\.tgz/);
});

test('on a platform without prebuilt binaries, the package and its launcher say which platforms have them', async () => {
  const pretend = "Object.defineProperty(process, 'arch', { value: 'riscv64' });";
  const loaded = await run('node', ['--input-type=module', '-e', `${pretend} try { await import('piw'); } catch (e) { console.log(e.code, e.message); }`]);
  assert.equal(loaded.code, 0, loaded.text);
  assert.match(loaded.stdout, /^addon_missing piw has no prebuilt native addon for linux-riscv64-(gnu|musl): the npm package ships binaries for linux-x64-gnu \(Linux on x86-64 with glibc\) only/);
  assert.doesNotMatch(loaded.stdout, /npm run build/);
  const launcher = join(project, 'node_modules', 'piw', 'bin', 'piw.js');
  const launched = await run('node', ['--input-type=module', '-e', `${pretend} await import(${JSON.stringify(launcher)});`]);
  assert.equal(launched.code, 1, launched.text);
  assert.match(launched.stderr, /^piw: piw has no prebuilt piw binary for linux-riscv64-(gnu|musl): the npm package ships binaries for linux-x64-gnu/);
});

test('the launcher passes signals both ways: SIGTERM reaches the host, a host killed by a signal ends the launcher by the same signal', async () => {
  const launcher = join(project, 'node_modules', 'piw', 'bin', 'piw.js');
  const home = join(root, 'serve-home');
  const env = { ...userEnv, PIW_HOME: home };
  const serve = () => {
    const child = spawn('node', [launcher, 'host', 'serve'], { cwd: project, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c) => (stderr += c));
    const exited = new Promise((r) => child.on('exit', (code, signal) => r({ code, signal, stderr })));
    return { child, exited };
  };
  const hostPid = () =>
    until(async () => {
      const status = await run(join(platformDir(), 'bin', 'piw'), ['host', 'status', '--json'], { env });
      return status.code === 0 && JSON.parse(status.stdout).pid;
    }, 'the served host');
  const first = serve();
  try {
    const pid = await hostPid();
    first.child.kill('SIGTERM');
    const end = await first.exited;
    assert.deepEqual([end.code, end.signal], [0, null], end.stderr);
    await until(() => !alive(pid), 'the host gone');

    const second = serve();
    try {
      process.kill(await hostPid(), 'SIGKILL');
      const killed = await second.exited;
      assert.deepEqual([killed.code, killed.signal], [null, 'SIGKILL'], killed.stderr);
    } finally {
      second.child.kill('SIGKILL');
    }
  } finally {
    first.child.kill('SIGKILL');
    await stopHost(home);
  }
});

test('the installed `piw` binary, started without the launcher, finds Node and the worker runtime itself', async () => {
  const piw = join(platformDir(), 'bin', 'piw');
  const home = join(root, 'bare-home');
  const env = { ...userEnv, PIW_HOME: home };
  try {
    const started = await run(piw, ['run', 'start', 'hello.workflow.mjs', '--input', '{"name":"cli"}', '--wait', '--json'], { env });
    assert.equal(started.code, 0, started.text);
    assert.deepEqual(JSON.parse(started.stdout).run.result, { greeting: 'hello cli' });

    // A Node client of the installed package reuses the host the CLI started.
    writeFileSync(
      join(project, 'client.mjs'),
      `import { Client } from 'piw';
const client = await Client.connect({ start: false });
const { run_id } = await client.startRun('double.workflow.ts', { input: { n: 5 } });
const run = await client.waitForRun(run_id, { timeoutMs: 60000 });
console.log(JSON.stringify(run.result));
await client.close();
`,
    );
    const client = await run('node', ['client.mjs'], { env });
    assert.equal(client.code, 0, client.text);
    assert.equal(client.stdout.trim(), '{"doubled":10}');
  } finally {
    await stopHost(home);
  }

  // With no Node new enough, a JavaScript workflow is refused with what is missing.
  const oldNode = join(root, 'old-node');
  mkdirSync(oldNode, { recursive: true });
  writeFileSync(join(oldNode, 'node'), '#!/bin/sh\necho v20.11.1\n');
  chmodSync(join(oldNode, 'node'), 0o755);
  const oldHome = join(root, 'old-home');
  try {
    const refused = await run(piw, ['run', 'start', 'hello.workflow.mjs'], {
      env: { ...userEnv, PIW_HOME: oldHome, PATH: [oldNode, ...systemPathWithoutNode()].join(delimiter) },
    });
    assert.equal(refused.code, 1, refused.text);
    assert.match(refused.text, /need Node\.js 22\.19 or newer/);
    assert.match(refused.text, /old-node\/node\) is 20\.11/);
    assert.match(refused.text, /PIW_NODE/);
  } finally {
    await stopHost(oldHome);
  }
});

/** The user's PATH without this test's Node directory (for the host's own `node` lookup). */
function systemPathWithoutNode() {
  return userPath.split(delimiter).filter((dir) => dir !== join(root, 'bin'));
}

test('`pi install` of the installed package: Pi lists it, loads the extension and runs a workflow with the prebuilt host', async () => {
  const env = await piEnv();
  try {
    const installedPiw = join(project, 'node_modules', 'piw');
    // Pi, like the user, has no checkout's host: the extension finds the platform package's.
    const piProcessEnv = { ...env.env, PATH: userPath };
    delete piProcessEnv.PIW_HOST_BIN;
    const installed = await run(process.execPath, [piCli, 'install', installedPiw], { env: piProcessEnv, cwd: env.project });
    assert.equal(installed.code, 0, installed.text);
    const listed = await run(process.execPath, [piCli, 'list'], { env: piProcessEnv, cwd: env.project });
    assert.equal(listed.code, 0, listed.text);
    assert.ok(listed.text.includes(installedPiw), listed.text);

    writeFileSync(join(env.project, '.pi', 'workflows', 'greet.workflow.mjs'), readFileSync(join(project, 'hello.workflow.mjs')));
    const pi = await env.startPi({ sessionId: 'installed', extension: false, extraEnv: { PIW_HOST_BIN: undefined, PATH: piProcessEnv.PATH } });
    pis.push(pi);
    const commands = await pi.send({ type: 'get_commands' });
    assert.ok(commands.data.commands.some((c) => c.name === 'workflow'), JSON.stringify(commands.data));
    const from = pi.mark();
    await pi.prompt('/workflow list');
    const list = await pi.waitNotify(/Workflows:/, from);
    assert.match(list.message, /greet \(project: /);
    await pi.prompt('/workflow greet --input-json {"name":"pi"}');
    const end = await until(() => pi.customMessages('piw-message', from).find((m) => m.details?.kind === 'terminal'), 'the result card');
    assert.match(end.content, /completed/);
    assert.match(end.content, /hello pi/);
    assert.equal(await hostExe(env.piwHome), realpathSync(join(platformDir(), 'bin', 'piw')));
    await pi.quit();
  } finally {
    await env.close();
  }
});
