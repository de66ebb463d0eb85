#!/usr/bin/env node
// `piw` from the npm package (`npx piw ...`, or on PATH after `npm install -g piw`): runs the
// platform package's `piw` binary with this package's Node worker runtime configured, so a
// host it starts runs JavaScript and TypeScript workflows. Exit code and signals pass through.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';

import { installedPlatformPackage, missingBinaryMessage, nodeRunsWorkflows, packageDir } from '../lib/platform.js';

function hostBinary() {
  const prebuilt = installedPlatformPackage();
  if (prebuilt && existsSync(join(prebuilt.dir, 'bin', 'piw'))) return join(prebuilt.dir, 'bin', 'piw');
  // A source checkout's own build (this file in <checkout>/node-binding/bin).
  for (const profile of ['release', 'debug']) {
    const candidate = join(packageDir, '..', 'target', profile, 'piw');
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

const bin = hostBinary();
if (!bin) {
  process.stderr.write(`piw: ${missingBinaryMessage('piw binary')}\n`);
  process.exit(1);
}

const env = { ...process.env };
env.PIW_NODE_WORKER ||= join(packageDir, 'worker.js');
// This Node runs workflows only if it is new enough; otherwise the host looks for one on PATH
// and, finding none, says what is missing.
if (nodeRunsWorkflows()) env.PIW_NODE ||= process.execPath;

const child = spawn(bin, process.argv.slice(2), { stdio: 'inherit', env });
const forwarded = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];
const forward = (signal) => child.kill(signal);
for (const signal of forwarded) process.on(signal, forward);
child.on('error', (e) => {
  process.stderr.write(`piw: cannot run ${bin}: ${e.message}\n`);
  process.exit(1);
});
child.on('exit', (code, signal) => {
  if (signal) {
    // End the way the binary ended: the same signal, with its default action.
    for (const s of forwarded) process.off(s, forward);
    process.kill(process.pid, signal);
    // A signal Node ignores (SIGPIPE) lands here: the shell's convention instead.
    process.exit(128 + (constants.signals[signal] ?? 0));
  }
  process.exit(code ?? 1);
});
