// `lib/` is what the worker runtime, the decision channels and the CLI's helpers load; the Pi
// extension (`extension/`) is built on it, never the other way round: a file of `lib/` that
// imports one of `extension/` would load the extension's modules into every worker. Each file's
// imports (static, dynamic, `export ... from`, `require`) are read with the TypeScript
// compiler's own scanner, not a regular expression.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import test from 'node:test';

import { pkgDir } from './helpers.mjs';

const ts = createRequire(import.meta.url)('typescript');
const libDir = join(pkgDir, 'lib');
const extensionDir = join(pkgDir, 'extension');

/** The source files under `dir`, recursively. */
function sources(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return /\.(m|c)?[jt]s$/.test(e.name) ? [path] : [];
  });
}

/** Every module specifier `file` imports, as the TypeScript scanner reads them. */
function importsOf(file) {
  const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  return info.importedFiles.map((f) => f.fileName);
}

/** Whether specifier `spec`, imported by `file`, names a module under `extension/`. */
function reachesExtension(file, spec) {
  let target;
  if (spec.startsWith('.') || spec.startsWith('/')) target = resolve(dirname(file), spec);
  else if (spec.startsWith('file:')) target = new URL(spec).pathname;
  else if (spec === 'piw' || spec.startsWith('piw/')) target = join(pkgDir, spec.slice('piw'.length));
  else return false;
  const rel = relative(extensionDir, target);
  return rel === '' || (!rel.startsWith('..') && !rel.startsWith('/'));
}

test('the scanner sees every form of import', () => {
  const probe = join(libDir, 'probe.js');
  const source = [
    "import { a } from '../extension/format.js';",
    "export { b } from '../extension/width.js';",
    "export * from '../extension/tool.js';",
    "import '../extension/barrier.js';",
    "const c = await import('../extension/session.js');",
    "const d = require('../extension/decision.js');",
    "import { e } from './errors.js';",
  ].join('\n');
  const specs = ts.preProcessFile(source, true, true).importedFiles.map((f) => f.fileName);
  assert.deepEqual(
    specs.filter((s) => reachesExtension(probe, s)),
    ['../extension/format.js', '../extension/width.js', '../extension/tool.js', '../extension/barrier.js', '../extension/session.js', '../extension/decision.js'],
  );
  assert.equal(reachesExtension(probe, './errors.js'), false);
  assert.equal(reachesExtension(probe, 'node:fs'), false);
  assert.equal(reachesExtension(probe, 'piw/extension/index.js'), true);
  assert.equal(reachesExtension(probe, '../extensions.js'), false);
});

test('no file of lib/ imports from extension/', () => {
  const files = sources(libDir);
  assert.ok(files.length > 10, `lib/ has its files (${files.length} found)`);
  const offending = files.flatMap((file) =>
    importsOf(file)
      .filter((spec) => reachesExtension(file, spec))
      .map((spec) => `${relative(pkgDir, file)} imports ${spec}`),
  );
  assert.deepEqual(offending, [], 'lib/ is shared with the worker runtime: move what both need into lib/');
});
