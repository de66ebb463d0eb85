// Types of `piw/controllers` (also `@osolmaz/pi-workflows/controllers` in a workflow or
// controller file): the controller authoring API, the resource model, discovery, and one
// reconcile pass against a `ControllerBackend`.

export type MaybePromise<T> = T | Promise<T>;
export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** What a `ControllerError`'s `code` says went wrong. */
export type ControllerErrorCode =
  | 'invalid_controller'
  | 'invalid_result'
  | 'invalid_resource'
  | 'invalid_json'
  | 'too_large'
  | 'invalid_condition'
  | 'invalid_effect'
  | 'invalid_workflow_request'
  | 'invalid_backend'
  | 'invalid_deadline'
  | 'resource_conflict'
  | 'not_found'
  | 'effect_conflict'
  | 'effect_final'
  | 'workflow_conflict'
  | 'deadline'
  | 'pass_abandoned'
  | 'duplicate_controller'
  | 'load_failed';

/** A controller mistake or refusal; the message says what to do instead. */
export declare class ControllerError extends Error {
  readonly code: ControllerErrorCode;
  /** `loadDiscoveredControllers`: every file that could not be loaded, and why. */
  failures?: { path: string; message: string }[];
}
export declare class ResourceConflictError extends ControllerError {}
export declare class ResourceNotFoundError extends ControllerError {}
export declare class EffectRequestConflictError extends ControllerError {}
export declare class WorkflowRequestConflictError extends ControllerError {}
/** The reason a pass's `signal` aborts at its deadline. */
export declare class PassDeadlineError extends ControllerError {
  readonly deadlineMs: number;
}

// -- conditions -------------------------------------------------------------------------------

export type ControllerConditionStatus = true | false | 'unknown';
export type ControllerConditionInput = { type: string; status: ControllerConditionStatus; reason: string; message?: string };
export type ControllerCondition = ControllerConditionInput & {
  observedGeneration: number;
  /** When `status` last changed (ISO); the same status again keeps it. */
  lastTransitionTime: string;
};
export declare function conditionTrue(type: string, reason: string, message?: string): ControllerConditionInput;
export declare function conditionFalse(type: string, reason: string, message?: string): ControllerConditionInput;
export declare function conditionUnknown(type: string, reason: string, message?: string): ControllerConditionInput;
export declare function mergeConditions(current: ControllerCondition[], updates: ControllerConditionInput[], generation: number, now: string): ControllerCondition[];
export declare function applyStatusPatch<TStatus>(
  current: ControllerResourceStatus<TStatus>,
  patch: ControllerStatusPatch<TStatus> | undefined,
  generation: number,
  now: string,
): ControllerResourceStatus<TStatus>;

// -- resources --------------------------------------------------------------------------------

export type ChildWorkflowState = 'pending' | 'running' | 'waiting' | 'succeeded' | 'failed' | 'interrupted';
export type ChildWorkflowReference = { requestId: string; runId?: string; state: ChildWorkflowState; attempt: number };

export type ControllerResourceStatus<TStatus> = {
  /** The generation whose spec this status describes. */
  observedGeneration: number;
  conditions: ControllerCondition[];
  controllerStatus: TStatus;
  workflowRun?: ChildWorkflowReference;
};

export type ControllerResource<TSpec = unknown, TStatus = unknown> = {
  metadata: {
    /** Stable for the resource's life, never reused. */
    uid: string;
    controller: string;
    key: string;
    /** Changes on every write: the compare-and-swap token of a write. */
    resourceVersion: number;
    /** Changes only when `spec` changes. */
    generation: number;
    deletionTimestamp?: string;
    finalizers: string[];
  };
  spec: TSpec;
  status: ControllerResourceStatus<TStatus>;
};

/** The largest `spec`, and the largest `status`, in bytes of canonical JSON (1 MiB). */
export declare const MAX_RESOURCE_VALUE_BYTES: number;
/** The longest resource, effect or workflow request key. */
export declare const MAX_KEY_LENGTH: number;
/** Throws `ControllerError` (`invalid_json`) naming the part of `value` JSON cannot hold. */
export declare function assertJsonValue(value: unknown, what?: string): asserts value is JsonValue;
/** JSON with sorted keys; refuses functions, cycles, non-finite numbers and class instances. */
export declare function canonicalJson(value: unknown, what?: string): string;
/** Hex SHA-256 of `canonicalJson(value)`. */
export declare function jsonFingerprint(value: unknown, what?: string): string;
export declare function createResource<TSpec, TStatus>(options: { controller: string; key: string; uid: string; spec: TSpec; initialStatus: TStatus }): ControllerResource<TSpec, TStatus>;
export declare function withSpec<R extends ControllerResource>(resource: R, spec: R['spec'], options?: { expectedResourceVersion?: number }): R;
export declare function withDeletionRequested<R extends ControllerResource>(resource: R, now: string): R;
export declare function withStatus<R extends ControllerResource>(
  resource: R,
  write: { expectedResourceVersion: number; status: R['status']; finalizers?: string[] },
): R;
export declare function isDeletable(resource: ControllerResource): boolean;

// -- definitions and results ------------------------------------------------------------------

export type ControllerStatusPatch<TStatus> = {
  controllerStatus?: TStatus;
  conditions?: ControllerConditionInput[];
  /** `null` removes it. */
  workflowRun?: ChildWorkflowReference | null;
  finalizers?: string[];
};

export type ReconcileResult<TStatus> =
  | { kind: 'settled'; status?: ControllerStatusPatch<TStatus> }
  | { kind: 'requeue'; afterMs?: number; status?: ControllerStatusPatch<TStatus> };

export type EffectState = 'pending' | 'applied' | 'rejected' | 'indeterminate';
export type EffectRecord = {
  key: string;
  resourceUid: string;
  generation: number;
  kind: string;
  state: EffectState;
  requestFingerprint: string;
  startedAt: string;
  completedAt?: string;
  externalRef?: string;
  error?: string;
};
export type EffectObservation = { state: 'applied'; externalRef?: string } | { state: 'not_applied' } | { state: 'indeterminate' };
export type EffectApplication = { state: 'applied'; externalRef?: string } | { state: 'rejected'; error: string } | { state: 'indeterminate'; error?: string };
export type EffectDefinition<TRequest> = {
  /** Names one intended effect of this resource; another request under it is refused. */
  key: string;
  kind: string;
  request: TRequest;
  /** Whether an effect recorded by an earlier pass was done; asked before any retry. */
  observe: (signal: AbortSignal) => MaybePromise<EffectObservation>;
  apply: (signal: AbortSignal) => MaybePromise<EffectApplication>;
};
export interface ControllerEffects {
  /** Records the effect, then applies it; a key already applied returns its record, a key recorded before is observed first. One per pass. */
  ensure<TRequest>(definition: EffectDefinition<TRequest>): Promise<EffectRecord>;
  /** The record kept under `key`, or null. */
  get(key: string): Promise<EffectRecord | null>;
}

export type ChildWorkflowRequest = { requestKey: string; workflow: string; input: unknown };
export type ChildWorkflowRecord = ChildWorkflowReference & {
  resourceUid: string;
  requestKey: string;
  inputFingerprint: string;
  workflow: string;
  error?: string;
};
export interface ControllerWorkflows {
  ensure(request: ChildWorkflowRequest): Promise<ChildWorkflowRecord>;
}

export type ControllerLogLevel = 'debug' | 'info' | 'warn' | 'error';
export type ControllerLogEntry = { level: ControllerLogLevel; message: string; fields?: unknown; at: string };
export type ControllerLogger = Record<ControllerLogLevel, (message: string, fields?: JsonValue) => void>;

export type ReconcileContext<TStatus> = {
  /** Aborts at the pass's deadline: pass it to every call that can wait. */
  signal: AbortSignal;
  effects: ControllerEffects;
  workflows: ControllerWorkflows;
  log: ControllerLogger;
  settled(status?: ControllerStatusPatch<TStatus>): ReconcileResult<TStatus>;
  requeue(status?: ControllerStatusPatch<TStatus>): ReconcileResult<TStatus>;
  requeueAfter(afterMs: number, status?: ControllerStatusPatch<TStatus>): ReconcileResult<TStatus>;
  /** Status setters: what they set is written with the pass's result (the result's patch wins). */
  setControllerStatus(value: TStatus): void;
  setCondition(condition: ControllerConditionInput): void;
  setWorkflowRun(run: ChildWorkflowReference | null): void;
  setFinalizers(finalizers: string[]): void;
};

export type ControllerDefinition<TSpec = unknown, TStatus = unknown> = {
  /** Lower-case letters, digits and dashes, starting with a letter. */
  name: string;
  initialStatus: (spec: TSpec) => TStatus;
  reconcile: (context: ReconcileContext<TStatus>, resource: ControllerResource<TSpec, TStatus>) => MaybePromise<ReconcileResult<TStatus>>;
  /** A pass's deadline, in milliseconds (default 60 s). */
  timeoutMs?: number;
};
export type AnyControllerDefinition = ControllerDefinition<any, any>;

/** Defines a controller; throws `ControllerError` (`invalid_controller`) naming what is wrong. Export it as default. */
export declare function defineController<TSpec, TStatus>(definition: ControllerDefinition<TSpec, TStatus>): ControllerDefinition<TSpec, TStatus>;
export declare function isControllerDefinition(value: unknown): value is AnyControllerDefinition;
export declare function assertValidControllerDefinition(definition: unknown): void;
export declare function settled<TStatus>(status?: ControllerStatusPatch<TStatus>): ReconcileResult<TStatus>;
export declare function requeue<TStatus>(status?: ControllerStatusPatch<TStatus>): ReconcileResult<TStatus>;
export declare function requeueAfter<TStatus>(afterMs: number, status?: ControllerStatusPatch<TStatus>): ReconcileResult<TStatus>;
export declare function createResultHelpers<TStatus>(): Pick<ReconcileContext<TStatus>, 'settled' | 'requeue' | 'requeueAfter'>;

// -- discovery --------------------------------------------------------------------------------

export type DiscoveredController = { name: string; path: string; source: 'project' | 'global' };
export declare const CONTROLLER_SUFFIXES: readonly string[];
export declare function controllerSearchDirs(options: { cwd: string; homeDir?: string }): { dir: string; source: 'project' | 'global' }[];
export declare function controllerFileStem(filePath: string): string;
export declare function discoverControllers(options: { cwd: string; homeDir?: string }): Promise<DiscoveredController[]>;
export declare function loadControllerFile(filePath: string): Promise<AnyControllerDefinition>;
/** Every discovered controller; rejects with one `ControllerError` listing every file that failed and every name defined twice. */
export declare function loadDiscoveredControllers(options: { cwd: string; homeDir?: string }): Promise<AnyControllerDefinition[]>;

// -- one pass ---------------------------------------------------------------------------------

/** Everything durable a pass does; served by the host to the pass's child. Every call is idempotent by its key. */
export interface ControllerBackend {
  recordEffect(request: { resourceUid: string; key: string; kind: string; generation: number; requestFingerprint: string }): Promise<{ record: EffectRecord; created: boolean }>;
  effect(request: { resourceUid: string; key: string }): Promise<EffectRecord | null>;
  settleEffect(request: { resourceUid: string; key: string; state: 'applied' | 'rejected' | 'indeterminate'; externalRef?: string; error?: string }): Promise<EffectRecord>;
  ensureWorkflowRun(request: { resourceUid: string; requestKey: string; workflow: string; input: JsonValue; inputFingerprint: string }): Promise<ChildWorkflowRecord>;
}

export type ReconcilePassOutcome<TStatus = unknown> = (
  | { kind: 'settled'; status: ControllerResourceStatus<TStatus>; finalizers?: string[] }
  | { kind: 'requeue'; afterMs?: number; status: ControllerResourceStatus<TStatus>; finalizers?: string[] }
  | { kind: 'error'; message: string; code?: string; status: null }
  | { kind: 'deadline'; deadlineMs: number; status: null }
) & { effects: EffectRecord[]; logs: ControllerLogEntry[] };

export declare const DEFAULT_PASS_DEADLINE_MS: number;
/** Calls `definition.reconcile` once, bounded by `deadlineMs`; commits nothing (the outcome's status is for the host to write). */
export declare function runReconcilePass<TSpec, TStatus>(options: {
  definition: ControllerDefinition<TSpec, TStatus>;
  resource: ControllerResource<TSpec, TStatus>;
  backend: ControllerBackend;
  deadlineMs?: number;
  now?: () => Date;
  onLog?: (entry: ControllerLogEntry) => void;
}): Promise<ReconcilePassOutcome<TStatus>>;

/** A `ControllerBackend` in memory, with the host's side (storing and committing) for tests. */
export declare class MemoryBackend implements ControllerBackend {
  constructor(options?: { now?: () => Date });
  recordEffect: ControllerBackend['recordEffect'];
  effect: ControllerBackend['effect'];
  settleEffect: ControllerBackend['settleEffect'];
  ensureWorkflowRun: ControllerBackend['ensureWorkflowRun'];
  /** Every child run started: `{ requestId, runId, attempt, workflow, input }`. */
  readonly startedRuns: { requestId: string; runId: string; attempt: number; workflow: string; input: JsonValue }[];
  putResource<TSpec, TStatus>(definition: ControllerDefinition<TSpec, TStatus>, key: string, spec: TSpec): ControllerResource<TSpec, TStatus>;
  getResource(controller: string, key: string): ControllerResource | null;
  requestDeletion(controller: string, key: string): ControllerResource;
  /** Writes a pass's outcome with compare-and-swap on the version read; null when the resource was removed. */
  commit<R extends ControllerResource>(read: R, outcome: ReconcilePassOutcome): R | null;
  effects(resourceUid: string): EffectRecord[];
  setWorkflowState(requestId: string, update: { state: ChildWorkflowState; error?: string }): ChildWorkflowRecord;
}
