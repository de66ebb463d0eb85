// How a workflow file reaches this package: `import ... from "piw"` and `from
// "@osolmaz/pi-workflows"` resolve to it with no install step (a file under `.pi/workflows/`
// has no `node_modules`, and pi-workflows files import the reference's name), and their
// `/builtins` subpath to the built-in workflows, their `/controllers` subpath to the controller
// API; the reference's subpaths piw lacks fail with what they are.
import { existsSync, readFileSync } from 'node:fs';
import module from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { BUILTINS_DIR } from './workflow-names.js';
import { packageDir } from './native.js';
import { registerTypeScript } from './typescript.js';

/** The module specifiers that name this package in a workflow file, with no install step. */
const PACKAGE_NAMES = new Set(['piw', '@osolmaz/pi-workflows']);
/** What the reference's subpaths are, and why an import of one cannot load here. */
const MISSING_SUBPATHS = {
  extension: 'the reference\'s Pi extension; piw\'s is this package itself (`pi install` it), with no API for workflow files',
};
let aliases = null;

/** The error of an import of `@osolmaz/pi-workflows/<subpath>` (or `piw/<subpath>`). */
function missingSubpath(specifier) {
  const subpath = specifier.slice(specifier.indexOf('/', specifier.startsWith('@') ? specifier.indexOf('/') + 1 : 0) + 1);
  const what = MISSING_SUBPATHS[subpath] ?? 'not part of piw';
  const e = new Error(`${specifier} is not available in piw: ${what}. Import from "@osolmaz/pi-workflows" (or "piw") instead.`);
  e.code = 'ERR_PACKAGE_PATH_NOT_EXPORTED';
  return e;
}

/** A relative import of one of pi-workflows' built-ins from its own source tree. */
const REFERENCE_BUILTIN = /^\.{1,2}\/(?:.*\/)?src\/builtins\/([a-z][a-z0-9-]*)\.workflow(?:\.[cm]?[jt]s)?$/;

/**
 * The error of an import of `<...>/src/builtins/<id>.workflow.js` that names nothing: a file
 * copied out of pi-workflows' repository (its examples import its own source tree). It gives
 * the one line that imports piw's built-in instead, keeping the file's own name for it.
 */
function referenceBuiltin(specifier, id, parentURL, cause) {
  const exported = `${id.replace(/-([a-z0-9])/g, (_, c) => c.toUpperCase())}Workflow`;
  if (!existsSync(join(BUILTINS_DIR, `${id}.workflow.mjs`))) {
    const e = new Error(`Cannot find module ${JSON.stringify(specifier)}: it is in pi-workflows' own source tree, which piw does not have, and piw has no built-in "${id}"`);
    e.code = 'ERR_MODULE_NOT_FOUND';
    e.cause = cause;
    return e;
  }
  let local = null;
  try {
    const source = readFileSync(fileURLToPath(parentURL), 'utf8');
    const quoted = specifier.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    local = new RegExp(`import\\s+([A-Za-z_$][\\w$]*)\\s+from\\s*["']${quoted}["']`).exec(source)?.[1] ?? null;
  } catch {
    // the importer is not a file: the line without its local name
  }
  const binding = local && local !== exported ? `{ ${exported} as ${local} }` : `{ ${exported} }`;
  const e = new Error(
    `Cannot find module ${JSON.stringify(specifier)}: it is in pi-workflows' own source tree, which piw does not have. ` +
      `Import piw's built-in instead: import ${binding} from "@osolmaz/pi-workflows/builtins";`,
  );
  e.code = 'ERR_MODULE_NOT_FOUND';
  return e;
}

/**
 * Makes `import ... from "piw"` and `from "@osolmaz/pi-workflows"` resolve to this package in
 * this process: a user's file under `.pi/workflows/` has no `node_modules`, and pi-workflows
 * files import the reference's package name. Registered once, for the process's whole life (a
 * workflow may import lazily), with the TypeScript hooks.
 */
export function registerPackageAliases() {
  if (aliases || !module.registerHooks) return;
  registerTypeScript();
  const index = pathToFileURL(join(packageDir, 'index.js')).href;
  const builtins = pathToFileURL(join(BUILTINS_DIR, 'index.js')).href;
  const controllers = pathToFileURL(join(packageDir, 'lib', 'controllers', 'index.js')).href;
  aliases = module.registerHooks({
    resolve(specifier, context, nextResolve) {
      if (PACKAGE_NAMES.has(specifier)) return { url: index, shortCircuit: true };
      if (specifier === 'piw/builtins' || specifier === '@osolmaz/pi-workflows/builtins') {
        return { url: builtins, shortCircuit: true };
      }
      if (specifier === 'piw/controllers' || specifier === '@osolmaz/pi-workflows/controllers') {
        return { url: controllers, shortCircuit: true };
      }
      if (/^(?:@osolmaz\/pi-workflows|piw)\//.test(specifier) && specifier !== 'piw/worker') {
        throw missingSubpath(specifier);
      }
      try {
        return nextResolve(specifier, context);
      } catch (e) {
        const builtin = e?.code === 'ERR_MODULE_NOT_FOUND' ? REFERENCE_BUILTIN.exec(specifier) : null;
        if (!builtin || !context.parentURL) throw e;
        throw referenceBuiltin(specifier, builtin[1], context.parentURL, e);
      }
    },
  });
}
