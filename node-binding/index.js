// piw: run durable AI-agent workflows outside Pi. See index.d.ts for the documented API.
export { Client, Subscription, ensureHost, findHostBin, hostEnvironment, isFinal } from './lib/client.js';
export {
  EffectFailed,
  defineWorkflow,
  isWorkflow,
  compute,
  action,
  agent,
  assistantMessage,
  checkpoint,
  humanDecision,
  notify,
  to,
  switchOn,
  onOutcome,
} from './lib/authoring.js';
export { PiwError } from './lib/errors.js';
