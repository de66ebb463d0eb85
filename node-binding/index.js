// piw: run durable AI-agent workflows outside Pi. See index.d.ts for the documented API.
export { Client, INLINE_VALUE_BYTES, MAX_VALUE_BYTES, Subscription, ensureHost, findHostBin, hostEnvironment, isFinal } from './lib/client.js';
export {
  defineWorkflow,
  defineWorkflowRegistry,
  isWorkflow,
  isWorkflow as isWorkflowDefinition,
  compute,
  notify,
  wait,
  waitThen,
  agent,
  assistantMessage,
  decision,
  decisionEdge,
  checkpoint,
  humanDecision,
  humanDecisionEdge,
  defineHumanChoices,
  choice,
  textInput,
  includeWorkflow,
  includedResult,
  action,
  shell,
  idempotentEffect,
  manualEffect,
} from './lib/authoring.js';
export {
  COMMAND_BATCH_RESULT_SCHEMA,
  MAX_COMMAND_BATCH_CONCURRENCY,
  MAX_COMMAND_BATCH_ITEMS,
  MAX_COMMAND_BATCH_OUTPUT_CHARS,
  MAX_COMMAND_BATCH_TIMEOUT_MS,
  runCommandBatch,
  validateCommandBatchRequest,
} from './lib/command.js';
export { canonicalJson, digest, extractJsonValue, parseJsonValue, parseStrictJsonValue } from './lib/helpers.js';
export { MAX_UPDATE_DATA_BYTES, validateProgressData, validateWorkflowUpdate } from './lib/updates.js';
export {
  appendProgressHistory,
  estimateProgress,
  formatProgressLine,
  formatProgressReport,
  formatRemaining,
  prioritizeProgressEstimates,
  progressTracksFromRecords,
  progressTracksFromStatus,
} from './lib/progress.js';
export { CancelledError, PiwError, TimeoutError } from './lib/errors.js';
export { BRIDGE_EXIT, BRIDGE_EXTENSION, bridgeCommand, lockBridge, preflightBridge } from './lib/bridge.js';
export { discoverWorkflows, loadWorkflowFile, resolveWorkflowRef, workflowFileStem, workflowSearchDirs } from './lib/discover.js';
