// Finding and loading controller definitions: `*.controller.{ts,mts,js,mjs}` in the project's
// `.pi/controllers/`, then the user's `~/.pi/agent/controllers/`; a project file hides a global
// one of the same file name. Files load as workflow files do in a run's child (TypeScript
// compiled, `piw` and `@osolmaz/pi-workflows` resolving to this package).
import { readdir, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

import { registerPackageAliases } from '../aliases.js';
import { isControllerDefinition } from './definition.js';
import { boundedMessage, ControllerError } from './errors.js';

/** Controller file suffixes. */
export const CONTROLLER_SUFFIXES = ['.controller.ts', '.controller.mts', '.controller.js', '.controller.mjs'];

/** The directories searched for controller files, project first: `[{ dir, source }]`. */
export function controllerSearchDirs({ cwd, homeDir = homedir() }) {
  return [
    { dir: join(cwd, '.pi', 'controllers'), source: 'project' },
    { dir: join(homeDir, '.pi', 'agent', 'controllers'), source: 'global' },
  ];
}

/** A controller file's name without its `.controller.*` suffix. */
export function controllerFileStem(filePath) {
  const base = basename(filePath);
  const suffix = CONTROLLER_SUFFIXES.find((s) => base.endsWith(s));
  return suffix ? base.slice(0, -suffix.length) : base;
}

async function isFile(path) {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/**
 * Every controller file visible from `cwd`: `[{ name, path, source }]` (`name` the file's
 * stem). Two files of one stem in one directory (`a.controller.ts` and `a.controller.mjs`) are
 * refused, naming both.
 */
export async function discoverControllers({ cwd, homeDir = homedir() }) {
  const found = new Map();
  for (const { dir, source } of controllerSearchDirs({ cwd, homeDir })) {
    let names;
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    const here = new Map();
    for (const file of names.sort()) {
      if (!CONTROLLER_SUFFIXES.some((s) => file.endsWith(s))) continue;
      const path = join(dir, file);
      if (!(await isFile(path))) continue;
      const name = controllerFileStem(file);
      if (here.has(name)) {
        throw new ControllerError('duplicate_controller', `two controller files named "${name}" in ${dir}: ${here.get(name)} and ${path}; keep one`);
      }
      here.set(name, path);
      if (!found.has(name)) found.set(name, { name, path, source });
    }
  }
  return [...found.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/** The controller a file default-exports (`export default defineController({...})`). */
export async function loadControllerFile(filePath) {
  registerPackageAliases();
  const path = resolve(filePath);
  let mod;
  try {
    mod = await import(pathToFileURL(path).href);
  } catch (e) {
    throw new ControllerError('load_failed', `${path} failed to load: ${boundedMessage(e)}`, { cause: e });
  }
  const definition = mod.default;
  if (!isControllerDefinition(definition)) {
    throw new ControllerError('load_failed', `${path} must export default defineController({ name, initialStatus, reconcile }) (from "piw/controllers")`);
  }
  return definition;
}

/**
 * Every discovered controller, loaded: `[definition]`. Each file that fails to load, and each
 * controller name defined by two files, is reported: one `ControllerError` (`load_failed`, or
 * `duplicate_controller`) listing them all in `failures` (`[{ path, message }]`).
 */
export async function loadDiscoveredControllers({ cwd, homeDir = homedir() }) {
  const failures = [];
  const byName = new Map();
  for (const { path } of await discoverControllers({ cwd, homeDir })) {
    let definition;
    try {
      definition = await loadControllerFile(path);
    } catch (e) {
      failures.push({ path, message: e.message });
      continue;
    }
    const other = byName.get(definition.name);
    if (other) {
      failures.push({ path, message: `controller "${definition.name}" is defined both by ${other.path} and by ${path}; rename one (names must be unique)`, duplicate: true });
      continue;
    }
    byName.set(definition.name, { path, definition });
  }
  if (failures.length) {
    const code = failures.every((f) => f.duplicate) ? 'duplicate_controller' : 'load_failed';
    const e = new ControllerError(code, `controllers could not be loaded:\n${failures.map((f) => `- ${f.message}`).join('\n')}`);
    e.failures = failures.map(({ path, message }) => ({ path, message }));
    throw e;
  }
  return [...byName.values()].map((v) => v.definition);
}
