// Finding and loading workflow files, as pi-workflows exports it (`discoverWorkflows`,
// `loadWorkflowFile`, ...), on the rules `piw run start <name>` and the Pi extension use.
import { basename, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

import { isWorkflow } from './authoring.js';
import { registerPackageAliases } from './aliases.js';
import { listWorkflows, resolveWorkflow, SUFFIXES, workflowDirs } from './workflow-names.js';

// `node:os` on first use: every worker imports the package, and few look for workflow files.
const homedir = () => process.getBuiltinModule('node:os').homedir();

/** The directories searched for workflow files, project first: `[{ dir, source }]`. */
export function workflowSearchDirs({ cwd, homeDir = homedir() }) {
  return workflowDirs(cwd, homeDir).map(({ scope, dir }) => ({ dir, source: scope }));
}

/** A workflow file's name without its `.workflow.*` suffix (the workflow's command name). */
export function workflowFileStem(filePath) {
  const base = basename(filePath);
  const suffix = SUFFIXES.find((s) => base.endsWith(s));
  return suffix ? base.slice(0, -suffix.length) : base;
}

/**
 * Every workflow visible from `cwd`: `[{ name, ref, source }]` (`ref` its file, `source`
 * `project` or `global`), a project file hiding a global one of the same name. piw has no
 * built-in workflows to add.
 */
export async function discoverWorkflows({ cwd, homeDir = homedir() }) {
  return (await listWorkflows(cwd, homeDir)).map(({ name, path, scope }) => ({ name, ref: path, source: scope }));
}

/**
 * The file a name or path refers to (`{ name, ref, source }`), found as `discoverWorkflows`
 * finds it; a path is taken relative to `cwd`.
 */
export async function resolveWorkflowRef(ref, { cwd, homeDir = homedir() }) {
  const { name, path, scope } = await resolveWorkflow(ref, cwd, homeDir);
  return { name, ref: path, source: scope };
}

/**
 * The workflow a file default-exports, loaded as in a run's child (TypeScript compiled, `piw`
 * and `@osolmaz/pi-workflows` resolving to this package). Node keeps
 * a module it loaded: a file changed since this process loaded it loads as it was.
 */
export async function loadWorkflowFile(filePath) {
  registerPackageAliases();
  const path = resolve(filePath);
  const mod = await import(pathToFileURL(path).href);
  const workflow = mod.default ?? mod.workflow;
  if (!isWorkflow(workflow)) throw new Error(`${path} must export default defineWorkflow({...})`);
  return workflow;
}
