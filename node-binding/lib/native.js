// Loads the native addon (`piw.<platform>.node`, built by `napi build --platform`).
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));

function platformFile() {
  const abi = process.report?.getReport?.().header?.glibcVersionRuntime ? 'gnu' : 'musl';
  return `piw.${process.platform}-${process.arch}${process.platform === 'linux' ? `-${abi}` : ''}.node`;
}

function load() {
  const file = process.env.PIW_NODE_ADDON || join(packageDir, platformFile());
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
