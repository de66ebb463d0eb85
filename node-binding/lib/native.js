// Loads the native addon (`piw.<platform>.node`, built by `napi build --platform`).
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));

/** The addon files `napi build --platform` may have produced for this platform. */
function candidates() {
  const base = `piw.${process.platform}-${process.arch}`;
  // Not `process.report` to tell glibc from musl: generating a report costs milliseconds on
  // every worker start. Only the ABI that was built exists.
  const names = process.platform === 'linux' ? [`${base}-gnu.node`, `${base}-musl.node`] : [`${base}.node`];
  return names.map((name) => join(packageDir, name));
}

function load() {
  const file = process.env.PIW_NODE_ADDON || candidates().find((f) => existsSync(f)) || candidates()[0];
  if (!existsSync(file)) {
    const err = new Error(
      `the piw native addon is not built (${file} is missing): run \`npm run build\` in ${packageDir}`,
    );
    err.code = 'addon_missing';
    throw err;
  }
  return createRequire(import.meta.url)(file);
}

export const native = load();
