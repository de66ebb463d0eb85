// `piw/controllers` (and `@osolmaz/pi-workflows/controllers`): the controller authoring API,
// the resource model, discovery, and one reconcile pass against a backend. See controllers.d.ts.
export {
  assertValidControllerDefinition,
  createResultHelpers,
  defineController,
  isControllerDefinition,
  requeue,
  requeueAfter,
  settled,
} from './definition.js';
export { applyStatusPatch, conditionFalse, conditionTrue, conditionUnknown, mergeConditions } from './conditions.js';
export {
  ControllerError,
  EffectRequestConflictError,
  ResourceConflictError,
  ResourceNotFoundError,
  WorkflowRequestConflictError,
} from './errors.js';
export {
  MAX_KEY_LENGTH,
  MAX_RESOURCE_VALUE_BYTES,
  assertJsonValue,
  canonicalJson,
  createResource,
  isDeletable,
  jsonFingerprint,
  withDeletionRequested,
  withSpec,
  withStatus,
} from './resource.js';
export { CONTROLLER_SUFFIXES, controllerFileStem, controllerSearchDirs, discoverControllers, loadControllerFile, loadDiscoveredControllers } from './discover.js';
export { DEFAULT_PASS_DEADLINE_MS, PassDeadlineError, runReconcilePass } from './pass.js';
export { MemoryBackend } from './memory-backend.js';
