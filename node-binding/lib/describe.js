#!/usr/bin/env node
// The graph snapshot of a JavaScript or TypeScript workflow, for a launcher that is not
// JavaScript (the host, before an explicit detached start):
//   node <package>/lib/describe.js <workflow file> <project dir>
// Exit 0 with the snapshot as JSON on stdout; else exit 2 with why on stderr. It loads the
// workflow's module as a run's child would (its top-level code runs here, in this process).
import { describeWorkflow } from './runtime.js';

const [file, projectDir] = process.argv.slice(2);
try {
  if (projectDir) process.chdir(projectDir);
  const graph = await describeWorkflow(file, projectDir ?? process.cwd());
  process.stdout.write(`${JSON.stringify(graph)}\n`);
  process.exit(0);
} catch (e) {
  process.stderr.write(`${e?.message ?? e}\n`);
  process.exit(2);
}
