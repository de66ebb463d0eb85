// Benchmarks of the Pi extension against real Pi in RPC mode (prints figures; asserts nothing).
//
//   PIW_HOST_BIN=$PWD/target/release/piw node node-binding/bench/pi.mjs   (Node 22; after the build)
//
// - Pi start to its first RPC answer without an extension, with an empty one and with piw's,
//   alternating in one run (target: the extension adds at most 50 ms);
// - the `workflow` tool's `status` round trip inside Pi (Pi's own `durationMs` of the tool
//   execution; target p50 <= 5 ms);
// - a run reaching an agent step (the host's `interaction_requested` event time) to the step
//   message arriving in the session (Pi's `message_end` on stdout; target p50 <= 50 ms).
// Same set-up as the e2e tests (test/pi/harness.mjs): temp HOME, a mock model on 127.0.0.1.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { piEnv } from '../test/pi/harness.mjs';

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.9))];
const fmt = (ms) => `${ms.toFixed(1)} ms`;
const STARTS = Number(process.env.BENCH_STARTS) || 7;
const CALLS = Number(process.env.BENCH_CALLS) || 40;
const STEPS = Number(process.env.BENCH_STEPS) || 15;

const env = await piEnv();
try {
  env.addWorkflow('agent.workflow.mjs', 'titles');

  // 1. Start to first answer: without an extension, with an empty one (what Pi pays to load any
  // extension: its jiti loader), with piw's.
  const empty = join(env.root, 'empty-extension.js');
  writeFileSync(empty, 'export default function (pi) {}\n');
  const kinds = { without: false, empty, piw: true };
  const times = { without: [], empty: [], piw: [] };
  for (let i = 0; i < STARTS; i++) {
    const order = Object.keys(kinds);
    for (const kind of i % 2 ? order.reverse() : order) {
      const t0 = performance.now();
      const pi = await env.startPi({ sessionId: `start-${i}-${kind}`, extension: kinds[kind] });
      times[kind].push(performance.now() - t0);
      await pi.quit();
    }
  }
  const floor = median(times.without);
  const ratio = (ms) => (ms / floor).toFixed(2);
  console.log(
    `pi start → first RPC answer (n=${STARTS} each, p50): without ${fmt(floor)}; an empty extension ${fmt(median(times.empty))} (×${ratio(median(times.empty))}); the piw extension ${fmt(median(times.piw))} (×${ratio(median(times.piw))}); added by piw ${fmt(median(times.piw) - floor)}, over the empty extension ${fmt(median(times.piw) - median(times.empty))}`,
  );

  // 2. `workflow status` round trips inside Pi.
  const client = await env.client();
  const { run_id } = await client.startRun(join(env.project, '.pi/workflows/titles.workflow.mjs'), { input: { task: 'bench' }, sessionId: 'bench-status' });
  let calls = 0;
  env.model.script = () => (calls++ < CALLS ? { tool: { name: 'workflow', arguments: { action: 'status', runId: run_id } } } : { text: 'done' });
  const pi = await env.startPi({ sessionId: 'bench-status' });
  // Let the step presentation (a turn of its own) go by first.
  await pi.waitSettled();
  calls = 0;
  const from = pi.mark();
  await pi.prompt('status, many times');
  await pi.waitSettled(from);
  const durations = pi.events
    .slice(from)
    .filter((e) => e.type === 'tool_execution_end' && e.toolName === 'workflow' && !e.isError)
    .map((e) => e.durationMs);
  console.log(`workflow status tool round trip (n=${durations.length}): p50 ${fmt(median(durations))}, p90 ${fmt(p90(durations))}`);
  await client.cancelRun(run_id);
  await pi.quit();

  // 3. Agent step reached → step message in the session.
  env.model.script = () => ({ text: 'ok' });
  const session = await env.startPi({ sessionId: 'bench-steps' });
  const sub = await client.subscribe({ sessionId: 'bench-steps' });
  const requestedAt = new Map();
  (async () => {
    for await (const e of sub) if (e.event_kind === 'interaction_requested') requestedAt.set(e.run_id, e.at_ms);
  })();
  const arrivedAt = new Map();
  session.child.stdout.on('data', () => {
    const now = Date.now();
    for (const e of session.events) {
      if (e.type === 'message_end' && e.message?.customType === 'piw-step' && !arrivedAt.has(e.message.details.runId)) {
        arrivedAt.set(e.message.details.runId, now);
      }
    }
  });
  const latencies = [];
  for (let i = 0; i < STEPS; i++) {
    const mark = session.mark();
    const r = await client.startRun(join(env.project, '.pi/workflows/titles.workflow.mjs'), { input: { task: `s${i}` }, sessionId: 'bench-steps' });
    await session.waitEvent((e) => e.type === 'message_end' && e.message?.customType === 'piw-step' && e.message.details.runId === r.run_id, 'the step', mark);
    await session.waitSettled(mark);
    if (requestedAt.has(r.run_id) && arrivedAt.has(r.run_id)) latencies.push(arrivedAt.get(r.run_id) - requestedAt.get(r.run_id));
    await client.cancelRun(r.run_id);
  }
  await sub.close();
  console.log(`agent step reached → step message in the session (n=${latencies.length}): p50 ${fmt(median(latencies))}, p90 ${fmt(p90(latencies))}`);
  await session.quit();
} finally {
  await env.close();
}
