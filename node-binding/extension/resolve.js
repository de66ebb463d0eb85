// Where workflows are found: by name (the file stem) in the project's `.pi/workflows/`, then in
// the user's `~/.pi/agent/workflows/` (the project wins a collision), or by a direct path.
// `piw run start <name>` (host/src/main.rs) resolves names by the same rules.
import { readdir, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';

/** Workflow file suffixes, in the order a name is tried. */
export const SUFFIXES = ['.workflow.ts', '.workflow.mts', '.workflow.js', '.workflow.mjs', '.workflow.json'];

/** Words of the `/workflow` command and the tool's actions: never workflow names. */
export const RESERVED = new Set([
  'list',
  'start',
  'status',
  'pause',
  'resume',
  'cancel',
  'answer',
  'update',
  'submit',
  'help',
]);

export class ResolveError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ResolveError';
  }
}

/** The two directories searched, project first. */
export function workflowDirs(cwd, home = homedir()) {
  return [
    { scope: 'project', dir: join(cwd, '.pi', 'workflows') },
    { scope: 'global', dir: join(home, '.pi', 'agent', 'workflows') },
  ];
}

function stemOf(file) {
  const suffix = SUFFIXES.find((s) => file.endsWith(s));
  return suffix ? file.slice(0, -suffix.length) : null;
}

/** Whether a reference names a file (a path) rather than a discovered workflow name. */
export function looksLikePath(ref) {
  return ref.includes('/') || ref.startsWith('.') || SUFFIXES.some((s) => ref.endsWith(s));
}

async function isFile(path) {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/**
 * Every workflow visible from `cwd`: `[{ name, path, scope }]`, sorted by name; a project file
 * hides a global one of the same name.
 */
export async function listWorkflows(cwd, home = homedir()) {
  const found = new Map();
  for (const { scope, dir } of workflowDirs(cwd, home)) {
    let names;
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    for (const file of names.sort()) {
      const name = stemOf(file);
      if (name === null || found.has(name)) continue;
      const path = join(dir, file);
      if (await isFile(path)) found.set(name, { name, path, scope });
    }
  }
  return [...found.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * Resolves a name or a path to `{ name, path, scope }`. A reserved word, an unknown name or a
 * missing file is a `ResolveError` whose message says what to do instead.
 */
export async function resolveWorkflow(ref, cwd, home = homedir()) {
  const wanted = String(ref ?? '').trim();
  if (wanted === '') throw new ResolveError('name a workflow (or a path to one)');
  if (looksLikePath(wanted)) {
    const path = isAbsolute(wanted) ? wanted : resolve(cwd, wanted);
    if (!(await isFile(path))) throw new ResolveError(`no workflow file at ${path}`);
    return { name: stemOf(path.split('/').pop()) ?? path, path, scope: 'path' };
  }
  if (RESERVED.has(wanted)) {
    throw new ResolveError(
      `"${wanted}" is a /workflow subcommand, not a workflow name; rename the workflow file or start it by path (./${wanted}.workflow.mjs)`,
    );
  }
  for (const { scope, dir } of workflowDirs(cwd, home)) {
    for (const suffix of SUFFIXES) {
      const path = join(dir, wanted + suffix);
      if (await isFile(path)) return { name: wanted, path, scope };
    }
  }
  const dirs = workflowDirs(cwd, home)
    .map((d) => d.dir)
    .join(' or ');
  throw new ResolveError(`no workflow named "${wanted}" in ${dirs} (suffixes ${SUFFIXES.join(', ')})`);
}
