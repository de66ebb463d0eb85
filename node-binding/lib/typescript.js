// TypeScript in a run's child, as pi-workflows users write it: a relative import of
// `./helper.js` reaches `./helper.ts`; `enum`, `namespace`, parameter properties and other
// syntax that type stripping refuses compile; a `.ts` file with `import`/`export` loads as a
// module also in a project whose package.json says "type": "commonjs".
//
// The compiler is amaro (the npm package the Node.js project maintains, the one Node's own
// type stripping is built on), pinned in package-lock.json. Each file is first stripped, which
// keeps every line and column where they were (so an error names the place in the file); only
// a file stripping refuses is transformed, with an inline source map. amaro is loaded on the
// first TypeScript file a child meets; a standby worker loads it while it waits.
import { readFileSync } from 'node:fs';
import module, { createRequire } from 'node:module';
import { sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
let amaro = null;
let hooks = null;

/** The compiler, loaded once (about 40 ms cold). */
function compiler() {
  amaro ??= require('amaro');
  return amaro;
}

/** A TypeScript file amaro cannot compile: where, and why, in Node's words for a load failure. */
export class TypeScriptSyntaxError extends SyntaxError {
  constructor(path, e) {
    const where = e?.startLine === undefined ? path : `${path}:${e.startLine}:${(e.startColumn ?? 0) + 1}`;
    super(`${e?.message ?? String(e)}`);
    this.code = e?.code === 'UnsupportedSyntax' ? 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX' : 'ERR_INVALID_TYPESCRIPT_SYNTAX';
    /** `path:line:column`, for the run's error. */
    this.location = where;
  }
}

/** JavaScript for a TypeScript source: stripped when that is enough, else transformed. */
export function compileTypeScript(source, path) {
  const tsc = compiler();
  try {
    return tsc.transformSync(source, { mode: 'strip-only', filename: path }).code;
  } catch (e) {
    if (e?.code !== 'UnsupportedSyntax') throw new TypeScriptSyntaxError(path, e);
  }
  let out;
  try {
    out = tsc.transformSync(source, { mode: 'transform', sourceMap: true, filename: path });
  } catch (e) {
    throw new TypeScriptSyntaxError(path, e);
  }
  // Stack traces then point into the TypeScript file, not the generated code.
  process.setSourceMapsEnabled(true);
  const map = Buffer.from(typeof out.map === 'string' ? out.map : JSON.stringify(out.map)).toString('base64');
  return `${out.code}\n//# sourceMappingURL=data:application/json;base64,${map}\n`;
}

/** `import`/`export` statements or `import.meta`: a module, whatever package.json says. */
const MODULE_SYNTAX = /^[ \t]*(?:import[ \t]*(?:[\w*{$]|["'])|export[ \t\n]*[\w*{$])|\bimport\.meta\b/m;

/** How Node should evaluate a compiled `.ts` file. */
function formatOf(url, ext, code) {
  if (ext === 'mts') return 'module';
  if (ext === 'cts') return 'commonjs';
  if (MODULE_SYNTAX.test(code)) return 'module';
  // No module syntax: what the nearest package.json says (CommonJS without one), as for `.js`.
  try {
    const pkg = module.findPackageJSON?.(url);
    if (pkg && JSON.parse(readFileSync(pkg, 'utf8')).type === 'module') return 'module';
  } catch {
    // an unreadable package.json: CommonJS, Node's default
  }
  return 'commonjs';
}

const TS_FILE = /\.(ts|mts|cts)$/;
const RELATIVE = /^(?:\.{1,2}\/|\/|file:)/;

/** The TypeScript files a path-like specifier that does not exist may mean, in order. */
function alternatives(specifier) {
  const js = /\.(js|mjs|cjs)$/.exec(specifier);
  if (js) {
    const base = specifier.slice(0, -js[0].length);
    return [`${base}.${{ js: 'ts', mjs: 'mts', cjs: 'cts' }[js[1]]}`];
  }
  if (/\.[A-Za-z0-9]+$/.test(specifier.split('/').pop())) return [];
  return [`${specifier}.ts`, `${specifier}.mts`, `${specifier}.js`, `${specifier}.mjs`, `${specifier}/index.ts`, `${specifier}/index.js`];
}

const inNodeModules = (url) => typeof url === 'string' && url.includes(`${sep}node_modules${sep}`);

/**
 * Registers the resolve and load hooks for the child's whole life (once). Files under
 * `node_modules` are left to Node, as it leaves them.
 */
export function registerTypeScript() {
  if (hooks || !module.registerHooks) return;
  hooks = module.registerHooks({
    resolve(specifier, context, nextResolve) {
      try {
        return nextResolve(specifier, context);
      } catch (e) {
        if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !RELATIVE.test(specifier) || inNodeModules(context.parentURL)) throw e;
        for (const candidate of alternatives(specifier)) {
          try {
            return nextResolve(candidate, context);
          } catch (again) {
            if (again?.code !== 'ERR_MODULE_NOT_FOUND') throw again;
          }
        }
        throw e;
      }
    },
    load(url, context, nextLoad) {
      const ext = TS_FILE.exec(url.split(/[?#]/)[0])?.[1];
      if (!ext || !url.startsWith('file:')) return nextLoad(url, context);
      const path = fileURLToPath(url);
      if (path.includes(`${sep}node_modules${sep}`)) return nextLoad(url, context);
      const code = compileTypeScript(readFileSync(path, 'utf8'), path);
      return { format: formatOf(url, ext, code), source: code, shortCircuit: true };
    },
  });
}

/** Loads and runs the compiler once (a standby worker does, so its run does not wait for it). */
export function warmTypeScript() {
  compileTypeScript('enum Warm { A }\nexport const warm: number = Warm.A;\n', 'warmup.ts');
  compileTypeScript('export const warm: number = 1;\n', 'warmup.ts');
}
