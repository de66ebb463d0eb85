// How a workflow file reaches this package: `import ... from "piw"` and `from
// "@osolmaz/pi-workflows"` resolve to it with no install step (a file under `.pi/workflows/`
// has no `node_modules`, and pi-workflows files import the reference's name), and their
// `/builtins` subpath to the built-in workflows; the reference's subpaths piw lacks fail with
// what they are.
import module from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { BUILTINS_DIR } from '../extension/resolve.js';
import { packageDir } from './native.js';
import { registerTypeScript } from './typescript.js';

/** The module specifiers that name this package in a workflow file, with no install step. */
const PACKAGE_NAMES = new Set(['piw', '@osolmaz/pi-workflows']);
/** What the reference's subpaths are, and why an import of one cannot load here. */
const MISSING_SUBPATHS = {
  controllers: 'the reference\'s controllers; piw has none',
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
  aliases = module.registerHooks({
    resolve(specifier, context, nextResolve) {
      if (PACKAGE_NAMES.has(specifier)) return { url: index, shortCircuit: true };
      if (specifier === 'piw/builtins' || specifier === '@osolmaz/pi-workflows/builtins') {
        return { url: builtins, shortCircuit: true };
      }
      if (/^(?:@osolmaz\/pi-workflows|piw)\//.test(specifier) && specifier !== 'piw/worker') {
        throw missingSubpath(specifier);
      }
      return nextResolve(specifier, context);
    },
  });
}
