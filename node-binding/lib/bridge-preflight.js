#!/usr/bin/env node
// The bridge preflight as a command, for a launcher that is not JavaScript (the host):
//   node <package>/lib/bridge-preflight.js <pi> <provider> <model>
// Exit 0 (stdout: `ready <provider> <model>`) when Pi can serve a detached run with them, else
// exit 2 with why on stderr (`preflightBridge` in ./bridge.js). Runs in this environment.
import { preflightBridge } from './bridge.js';

const [pi, provider, model] = process.argv.slice(2);
try {
  await preflightBridge({ pi, provider, model });
  process.stdout.write(`ready ${provider} ${model}\n`);
} catch (e) {
  process.stderr.write(`${e?.message ?? e}\n`);
  process.exitCode = e?.code === 'pi_unusable' ? 2 : 1;
}
