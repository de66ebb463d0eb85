// Shared set-up for the node tests: a real `piw` host in a temp PIW_HOME per test file, and
// workflow fixtures written next to it. Nothing touches the real home directory.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client, findHostBin } from '../index.js';

export const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const pkgIndex = join(pkgDir, 'index.js');
export const hostBin = process.env.PIW_HOST_BIN ?? findHostBin();

/** A temp directory (short, so the socket path fits). */
export function tempDir(prefix = 'piw-node-') {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Writes a workflow module that imports the package as `piw`; returns its path. */
export function writeWorkflow(dir, name, body, suffix = '.workflow.mjs') {
  const file = join(dir, `${name}${suffix}`);
  writeFileSync(file, `import * as piw from ${JSON.stringify(pkgIndex)};\n${body}\n`);
  return file;
}

/**
 * Starts a host for a fresh temp PIW_HOME (through `Client.connect`, as a user would) and
 * returns `{ dir, home, client, connect(), stop() }`. `stop()` stops the host, waits for it to
 * exit (SIGKILL after 10 s) and removes the directory.
 */
export async function startHost(hostEnv = {}) {
  const dir = tempDir();
  const home = join(dir, 'home');
  const env = { HOME: dir, PIW_KILL_GRACE_MS: '300', ...hostEnv };
  const connect = () => Client.connect({ home, hostBin, hostEnv: env });
  const client = await connect();
  const { pid } = await client.status();
  const clients = [client];
  return {
    dir,
    home,
    client,
    pid,
    async connect() {
      const c = await connect();
      clients.push(c);
      return c;
    },
    async stop() {
      await client.request('host.stop').catch(() => {});
      for (const c of clients) await c.close().catch(() => {});
      const deadline = Date.now() + 10_000;
      while (alive(pid) && Date.now() < deadline) await sleep(20);
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      await killInstallation(home);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Kills every process of the installation at `home` (hosts, children, grandchildren), found by
 * the `PIW_HOME=<home>` in their environment, which a host passes on to its children. Called
 * when a test file ends, pass or fail, so no spinning child outlives it to slow down or fail
 * the tests after it.
 */
export async function killInstallation(home) {
  const entry = `PIW_HOME=${home}`;
  for (let round = 0; round < 100; round++) {
    const pids = readdirSync('/proc')
      .filter((name) => /^\d+$/.test(name) && Number(name) !== process.pid)
      .filter((name) => {
        try {
          return readFileSync(`/proc/${name}/environ`, 'latin1').split('\0').includes(entry);
        } catch {
          return false; // gone, or not ours
        }
      })
      .map(Number);
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await sleep(20);
  }
}

export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Rejects with the error's code, for `assert.rejects(..., code('not_found'))`. */
export function code(expected) {
  return (err) => {
    if (err?.code !== expected) {
      throw new Error(`expected code ${expected}, got ${err?.code}: ${err?.message}`);
    }
    return true;
  };
}
