// Where workflows are found: by name (the file stem) in the project's `.pi/workflows/`, then in
// the user's `~/.pi/agent/workflows/`, then among this package's built-ins (`builtins/`): the
// first wins a collision, so a project or global file overrides a built-in of the same name.
// `builtin:<id>` names the built-in itself; anything else with a `/` (or a workflow suffix) is
// a path. `piw run start <name>` (cli/src/resolve.rs) resolves names by the same rules.
import { isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// Loaded on first use, not at import: every worker imports this module and few look names up.
const homedir = () => process.getBuiltinModule('node:os').homedir();
const readdir = (dir) => process.getBuiltinModule('node:fs/promises').readdir(dir);
const stat = (path) => process.getBuiltinModule('node:fs/promises').stat(path);

/** The package's built-in workflows: `<id>.workflow.mjs` files, shipped with the package. */
export const BUILTINS_DIR = fileURLToPath(new URL('../builtins/', import.meta.url)).replace(/\/$/, '');
/** The prefix of a reference to a built-in, whatever files of its name exist. */
export const BUILTIN_PREFIX = 'builtin:';

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
  'detach',
  'answer',
  'channel',
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
  if (ref.startsWith(BUILTIN_PREFIX)) return false;
  return ref.includes('/') || ref.startsWith('.') || SUFFIXES.some((s) => ref.endsWith(s));
}

/** The built-in workflows: `[{ name, path, scope: 'builtin' }]`, sorted by name. */
export async function listBuiltins(dir = BUILTINS_DIR) {
  let names;
  try {
    names = await readdir(dir);
  } catch {
    return [];
  }
  const out = [];
  for (const file of names.sort()) {
    if (!file.endsWith('.workflow.mjs')) continue;
    const path = join(dir, file);
    if (await isFile(path)) out.push({ name: file.slice(0, -'.workflow.mjs'.length), path, scope: 'builtin' });
  }
  return out;
}

/** The built-in `id`, or a `ResolveError` naming the ones there are. */
async function builtin(id, dir = BUILTINS_DIR) {
  const all = await listBuiltins(dir);
  const found = all.find((b) => b.name === id);
  if (found) return found;
  throw new ResolveError(`no built-in workflow "${id}"; the built-ins are ${all.map((b) => b.name).join(', ') || '(none)'}`);
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
 * hides a global one of the same name, and either hides a built-in.
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
  for (const b of await listBuiltins()) if (!found.has(b.name)) found.set(b.name, b);
  return [...found.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * Resolves a name or a path to `{ name, path, scope }`. A reserved word, an unknown name or a
 * missing file is a `ResolveError` whose message says what to do instead.
 */
export async function resolveWorkflow(ref, cwd, home = homedir()) {
  const wanted = String(ref ?? '').trim();
  if (wanted === '') throw new ResolveError('name a workflow (or a path to one)');
  if (wanted.startsWith(BUILTIN_PREFIX)) return builtin(wanted.slice(BUILTIN_PREFIX.length).trim());
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
  const shipped = (await listBuiltins()).find((b) => b.name === wanted);
  if (shipped) return shipped;
  const dirs = workflowDirs(cwd, home)
    .map((d) => d.dir)
    .join(' or ');
  throw new ResolveError(`no workflow named "${wanted}" in ${dirs} (suffixes ${SUFFIXES.join(', ')}) nor among the built-ins`);
}
