// Loads the native addon: `PIW_NODE_ADDON`, else the one a source checkout built here
// (`napi build --platform`), else the prebuilt one of the installed platform package
// (lib/platform.js).
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import { addonFileName, installedPlatformPackage, missingBinaryMessage, packageDir } from './platform.js';

export { packageDir };

/** The addon files `napi build --platform` may have produced in this directory. */
function built() {
  const base = `${process.platform}-${process.arch}`;
  // Not `process.report` to tell glibc from musl: generating a report costs milliseconds on
  // every worker start. Only the ABI that was built exists.
  const platforms = process.platform === 'linux' ? [`${base}-gnu`, `${base}-musl`] : [base];
  return platforms.map((p) => join(packageDir, addonFileName(p)));
}

function addonFile() {
  if (process.env.PIW_NODE_ADDON) return process.env.PIW_NODE_ADDON;
  const local = built().find((f) => existsSync(f));
  if (local) return local;
  const prebuilt = installedPlatformPackage();
  if (prebuilt) {
    const file = join(prebuilt.dir, addonFileName(prebuilt.platform));
    if (existsSync(file)) return file;
  }
  return null;
}

function load() {
  const file = addonFile();
  if (!file || !existsSync(file)) {
    const err = new Error(file ? `the piw native addon ${file} (PIW_NODE_ADDON) does not exist` : missingBinaryMessage('native addon'));
    err.code = 'addon_missing';
    throw err;
  }
  return createRequire(import.meta.url)(file);
}

export const native = load();
