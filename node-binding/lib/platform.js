// The prebuilt binaries of this machine's platform: the npm package `piw-<platform>` that
// `piw` names in its `optionalDependencies` (npm installs the one whose `os`, `cpu` and `libc`
// match) holds the addon, the `piw` host binary and `piw-json-worker`. No addon is loaded here:
// the `piw` launcher uses this too.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = dirname(dirname(fileURLToPath(import.meta.url)));

/** The platforms with prebuilt binaries: `<os>-<cpu>[-<libc>]` -> what a person calls it. */
export const SUPPORTED = { 'linux-x64-gnu': 'Linux on x86-64 with glibc' };

/** Whether this Node can run workflows (the worker runtime needs 22.19: it strips TypeScript types). */
export function nodeRunsWorkflows() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  return major > 22 || (major === 22 && minor >= 19);
}

/** The platform packages that could serve this machine (before telling glibc from musl). */
function candidatePlatforms() {
  const base = `${process.platform}-${process.arch}`;
  return process.platform === 'linux' ? [`${base}-gnu`, `${base}-musl`] : [base];
}

/** The addon's file name for a platform, as `napi build --platform` names it. */
export function addonFileName(platform) {
  return `piw.${platform}.node`;
}

/**
 * The installed platform package: `{ platform, dir }`, or null. Resolved from this package, so
 * a hoisted (`node_modules/piw-<platform>`) and a nested (`piw/node_modules/...`) install both
 * count.
 */
export function installedPlatformPackage() {
  const require = createRequire(import.meta.url);
  for (const platform of candidatePlatforms()) {
    if (!SUPPORTED[platform]) continue;
    try {
      return { platform, dir: dirname(require.resolve(`piw-${platform}/package.json`)) };
    } catch {
      // not installed
    }
  }
  return null;
}

/** This machine as `<os>-<cpu>[-<libc>]`: only for messages (telling musl costs a file read). */
export function currentPlatform() {
  if (process.platform !== 'linux') return `${process.platform}-${process.arch}`;
  let musl = false;
  try {
    musl = readFileSync('/usr/bin/ldd', 'latin1').includes('musl');
  } catch {
    musl = !process.report?.getReport?.().header?.glibcVersionRuntime;
  }
  return `${process.platform}-${process.arch}-${musl ? 'musl' : 'gnu'}`;
}

/** Why there is no prebuilt `what` here, and what to do: the supported platforms, or a reinstall. */
export function missingBinaryMessage(what) {
  const platform = currentPlatform();
  const supported = Object.entries(SUPPORTED)
    .map(([key, name]) => `${key} (${name})`)
    .join(', ');
  const checkout = existsSync(join(packageDir, '..', 'Cargo.toml'))
    ? ` In a source checkout of piw, \`scripts/node-setup\` and \`cargo build\` build it.`
    : '';
  if (!SUPPORTED[platform]) {
    return `piw has no prebuilt ${what} for ${platform}: the npm package ships binaries for ${supported} only.${checkout}`;
  }
  // Installed from the registry, npm picks the platform package itself unless optional
  // dependencies were left out; installed from tarballs, npm cannot fetch it: both cases.
  const version = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')).version;
  return (
    `the prebuilt ${what} of piw for ${platform} is missing: its package piw-${platform} (an optional dependency of piw) is not installed. ` +
    `Installed from the npm registry: reinstall piw without --omit=optional / --no-optional. ` +
    `Installed from tarballs: install piw-${platform}-${version}.tgz with piw-${version}.tgz, in one npm install.${checkout}`
  );
}
