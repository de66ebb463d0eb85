// A workflow written for pi-workflows 0.12.1, as its docs write one (TypeScript importing
// "@osolmaz/pi-workflows", a helper imported as ./lib/x.js with an enum, an agent step, a shell
// step and an action without `effect`), started from real Pi with the mock model, unchanged.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { piEnv, until } from './harness.mjs';

let env;
before(async () => {
  env = await piEnv();
});
after(async () => {
  await env?.close();
});

test('a pi-workflows TypeScript workflow runs from Pi unchanged', async () => {
  const dir = join(env.project, '.pi', 'workflows');
  mkdirSync(join(dir, 'lib'), { recursive: true });
  writeFileSync(join(env.project, 'package.json'), JSON.stringify({ name: 'proj', version: '1.0.0', type: 'commonjs' }));
  writeFileSync(join(dir, 'lib', 'labels.ts'), 'export enum Label { Ready = "READY-TO-SHIP" }\n');
  writeFileSync(
    join(dir, 'release.workflow.ts'),
    `import { action, agent, compute, defineWorkflow, shell } from "@osolmaz/pi-workflows";
import { Label } from "./lib/labels.js";

type Input = { task?: string };

export default defineWorkflow({
  name: "release",
  title: ({ input }) => ((input as Input).task ? \`release: \${(input as Input).task}\` : undefined),
  startAt: "draft",
  nodes: {
    draft: agent({
      prompt: ({ input }) => \`Propose a release title for \${(input as Input).task ?? "this"}\`,
      expectedOutput: '{ "title": "text" }',
    }),
    count: shell({
      exec: () => ({ command: "printf '%s' \\"$0\\"", shell: true }),
      parse: (result) => ({ ran: result.exitCode === 0 }),
    }),
    record: action({
      run: async ({ outputs, publishUpdate }) => {
        await publishUpdate({ type: "note", key: "release", data: { title: (outputs.draft as { title: string }).title } });
        return { recorded: true };
      },
    }),
    finish: compute({ run: ({ outputs }) => ({ label: Label.Ready, title: (outputs.draft as { title: string }).title, shell: outputs.count }) }),
  },
  edges: [
    { from: "draft", to: "count" },
    { from: "count", to: "record" },
    { from: "record", to: "finish" },
  ],
});
`,
  );
  env.model.script = ({ last, lastText }) => {
    if (last.role === 'user' && /start release/.test(lastText)) {
      return { tool: { name: 'workflow', arguments: { action: 'start', workflow: 'release', input: { task: 'v2' } } } };
    }
    const step = /"interactionId":"([^"]+)"/.exec(lastText);
    if (step) {
      return { tool: { name: 'workflow', arguments: { action: 'submit', interactionId: step[1], output: { title: 'Version two' } } } };
    }
    return { text: 'done' };
  };
  const pi = await env.startPi();
  const from = pi.mark();
  await pi.prompt('please start release');
  const steps = await until(() => pi.customMessages('piw-step', from).length > 0 && pi.customMessages('piw-step', from), 'the step message');
  assert.match(steps[0].content, /Propose a release title for v2/);
  const end = await until(() => pi.customMessages('piw-message', from).find((m) => m.details?.kind === 'terminal'), 'the result card');
  assert.match(end.content, /completed/);
  assert.match(end.content, /READY-TO-SHIP/);
  assert.match(end.content, /Version two/);
  await pi.quit();
});
