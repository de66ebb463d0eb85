// Types of the `piw` package: the async client, the workflow authoring API and errors.
// The wire shapes are documented in docs/WORKFLOW_SERVER.md; field names of host records are
// snake_case there and here.

// ---------------------------------------------------------------------------------------------
// Errors

/**
 * Every failure of this package. `code` is the protocol's rejection code (`malformed`,
 * `unsupported_protocol`, `payload_too_large`, `unauthorized`, `not_found`,
 * `invalid_transition`, `stale_revision`, `stale_generation`, `stale_attempt`, `claim_lost`,
 * `idempotency_conflict`, `effect_conflict`, `effect_uncertain`, `host_shutting_down`,
 * `subscriber_lagged`, `internal`) or a client-side code.
 */
export declare class PiwError extends Error {
  readonly name: 'PiwError';
  readonly code: PiwErrorCode;
  /**
   * The id of the request that failed (`Client` calls; generated when you gave none). After
   * `disconnected` or `host_shutting_down` the command may have been applied: resend it with
   * `{ requestId }` to get its receipt instead of applying it twice.
   */
  requestId?: string;
  /**
   * What the host said beside its rejection, when it said something (see the rejection codes
   * in docs/WORKFLOW_SERVER.md): for example `{ expected, current }` of a `stale_revision`,
   * or `deadline_at` of a `stale_attempt` answer that came too late.
   */
  details?: Record<string, unknown>;
}

export type RejectionCode =
  | 'malformed'
  | 'unsupported_protocol'
  | 'payload_too_large'
  | 'unauthorized'
  | 'not_found'
  | 'invalid_transition'
  | 'stale_revision'
  | 'stale_generation'
  | 'stale_attempt'
  | 'claim_lost'
  | 'idempotency_conflict'
  | 'effect_conflict'
  | 'effect_uncertain'
  | 'host_shutting_down'
  /**
   * Only when the connection ends: the host fell too far behind sending this connection its
   * events and closed it. Not a failure: connect again, resubscribe and re-read the run's status.
   */
  | 'subscriber_lagged'
  /** A failure in the host, not the caller's fault; as a rejection nothing was committed. */
  | 'internal';

export type ClientErrorCode =
  /** No host answers at the socket (and none was to be started). */
  | 'connect_failed'
  /** `PIW_HOME` (or `HOME`, without it) is relative or unset: no installation to connect to. */
  | 'invalid_home'
  /** The connection ended without a reply (for example the host died). */
  | 'disconnected'
  /** `close()` was called while the call was in flight, or before it. */
  | 'client_closed'
  /** A subscription's reader fell too far behind; re-read the run's status. */
  | 'subscription_overflow'
  /** `Client.connect` could not bring a host up: its program could not be started, it exited before it became ready, or it was not ready in time (the message says which). */
  | 'host_not_ready'
  /** The process at the socket belongs to another user; nothing was sent to it. */
  | 'foreign_host'
  /** A rejection or goodbye code this client does not know (from a newer host); the message is the host's. */
  | 'unknown'
  | 'io'
  | 'protocol'
  /** `waitForRun` / `waitForSubmission` gave up after `timeoutMs`. */
  | 'timeout'
  /** `defineWorkflow` refused the graph. */
  | 'invalid_graph';

export type PiwErrorCode = RejectionCode | ClientErrorCode | (string & {});

// ---------------------------------------------------------------------------------------------
// Client

export interface ConnectOptions {
  /**
   * The installation (default: `PIW_HOME`, else `~/.pi/agent/piw`). A relative `home` is
   * resolved against the working directory; a relative `PIW_HOME` is refused (`invalid_home`).
   */
  home?: string;
  /** Start a host when none answers (default true). */
  start?: boolean;
  /** The `piw` binary that is started (default: `PIW_HOST_BIN`, a checkout's build, else `piw`). */
  hostBin?: string;
  /** Extra environment of a host this client starts (the Node runtime is always added). */
  hostEnv?: Record<string, string>;
  /** How long to wait for a started host (default 10 s). */
  readyTimeoutMs?: number;
}

/** Envelope options of state-changing calls. */
export interface CommandOptions {
  /** Your request id: repeating it returns the stored receipt instead of acting twice. */
  requestId?: string;
  /** Makes the command idempotent across request ids; other content under the same key is `idempotency_conflict`. */
  idempotencyKey?: string;
  /** Refuse (`stale_revision`) unless the run is still at this revision. */
  expectedRevision?: number;
}

export interface StartRunOptions extends CommandOptions {
  /** The run's input (JSON). */
  input?: unknown;
  /** The origin Pi session: interactive steps and workflow messages go there. */
  sessionId?: string;
  executionMode?: 'interactive' | 'detached';
  /** The directory the workflow runs in (default: the current directory). */
  projectDir?: string;
}

export type RunStatusName =
  | 'queued'
  | 'running'
  | 'waiting'
  | 'review'
  | 'completed'
  | 'failed'
  | 'cancelled'
  | 'timed_out';

/** A run as the host records it. */
export interface Run {
  run_id: string;
  workflow_name: string;
  source_root: string;
  source_hash: string;
  definition_digest: string | null;
  input_hash: string;
  origin_session: string | null;
  execution_mode: 'interactive' | 'detached';
  project_dir: string;
  status: RunStatusName;
  paused: boolean;
  current_node: string | null;
  current_attempt: string | null;
  revision: number;
  /** The final output of a completed run. */
  result: unknown;
  /** `listRuns` left this result out to fit its reply (the runs' results add up to more). */
  result_omitted?: true;
  error: string | null;
  /** Why the run stopped for review (for example `source_changed: ...`). */
  review_reason: string | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

export interface Attempt {
  attempt_id: string;
  node_id: string;
  status: 'running' | 'waiting' | 'succeeded' | 'failed' | 'timed_out' | 'interrupted' | 'cancelled';
  error: string | null;
  output?: unknown;
  /** `run.status` left this output out to fit its reply (a run whose outputs add up to more). */
  output_omitted?: true;
  [field: string]: unknown;
}

export interface Decision {
  decision_id: string;
  node_id: string;
  kind: 'checkpoint' | 'human_decision';
  status: 'pending' | 'answered' | 'cancelled';
  request: unknown;
  /** `run.status` left this closed decision's request (or answer) out to fit its reply. */
  request_omitted?: true;
  answer_omitted?: true;
  [field: string]: unknown;
}

export interface Interaction {
  interaction_id: string;
  run_id: string;
  node_id: string;
  attempt_id: string;
  origin_session: string | null;
  kind: 'agent' | 'assistant_message';
  request: unknown;
  /** `run.status` left this closed interaction's request out to fit its reply. */
  request_omitted?: true;
  deadline_at: number | null;
  status: string;
  /** The latest submission: why the last result was rejected, when it was. */
  last_submission: SubmissionVerdict | null;
}

export interface SubmissionVerdict {
  submission_id: string;
  state: 'validating' | 'accepted' | 'rejected';
  error: string | null;
}

export interface Effect {
  effect_id: string;
  run_id: string;
  attempt_id: string;
  effect_key: string;
  fingerprint: string;
  state: 'reserved' | 'applying' | 'applied' | 'failed' | 'uncertain' | 'cancelled';
  retry_contract: 'never' | 'idempotency_key' | 'read_back';
  receipt: unknown;
  /** The receipt was left out of this `run.status` reply to fit it (`receipt` is then null). */
  receipt_omitted?: true;
  error: string | null;
}

export interface RunStatus {
  run: Run;
  claim: unknown;
  attempts: Attempt[];
  decisions: Decision[];
  interactions: Interaction[];
  effects: Effect[];
}

export interface WorkflowMessage {
  message_id: string;
  run_id: string;
  origin_session: string | null;
  /** `notify` (from a notify node) or `terminal` (the run ended). */
  kind: string;
  content: unknown;
  delivered_at: number | null;
}

export interface HostStatus {
  pid: number;
  epoch: number;
  uptime_ms: number;
  socket: string;
  database: string;
  home: string;
  schema_id: string;
  runs: Partial<Record<RunStatusName, number>>;
  active_children: number;
  stopping: boolean;
  /** The workflow file suffixes this host can run. */
  runtimes: string[];
}

/** One committed change of a run, delivered in order without gaps. */
export interface RunEvent {
  subscription_id: string;
  run_id: string;
  /** Increasing, never reused; equal to the run's revision after the change. */
  seq: number;
  event_kind: string;
  /** The run's status when the event was published. */
  status: RunStatusName;
  revision: number;
  at_ms: number;
  data: unknown;
}

export interface Receipt<T = unknown> {
  revision: number | null;
  /** True when this is the stored receipt of an earlier identical request. */
  replayed: boolean;
  body: T;
}

export interface WaitOptions {
  /** Reject with `timeout` after this many milliseconds (default: wait forever). */
  timeoutMs?: number;
}

/**
 * A connection to the piw host. Every method returns a Promise and never blocks the event loop;
 * many calls may be in flight at once. Close it when done.
 */
export declare class Client {
  private constructor();
  /** Connects, starting a host on demand. */
  static connect(options?: ConnectOptions): Promise<Client>;
  readonly isOpen: boolean;

  /** Any request kind of the protocol, with the full receipt. */
  request<T = unknown>(kind: string, envelope?: CommandOptions & { runId?: string; nodeId?: string; attemptId?: string }, payload?: unknown): Promise<Receipt<T>>;

  status(): Promise<HostStatus>;
  listRuns(options?: { sessionId?: string; limit?: number }): Promise<Run[]>;
  startRun(workflowFile: string, options?: StartRunOptions): Promise<{ run_id: string; status: RunStatusName }>;
  runStatus(runId: string): Promise<RunStatus>;
  pauseRun(runId: string, options?: CommandOptions): Promise<{ run_id: string; paused: true }>;
  resumeRun(runId: string, options?: CommandOptions): Promise<{ run_id: string; paused: false }>;
  cancelRun(runId: string, options?: CommandOptions & { reason?: string }): Promise<{ run_id: string; status: 'cancelled'; summary: unknown }>;
  /** Answers an ordinary checkpoint (the model-facing path). */
  answerCheckpoint(runId: string, decisionId: string, answer: unknown, options?: CommandOptions): Promise<{ decision_id: string; answered_by: 'model' }>;
  /** Answers a protected human decision; only a person in the origin session may. */
  answerHumanDecision(runId: string, decisionId: string, answer: unknown, options?: CommandOptions): Promise<{ decision_id: string; answered_by: 'person' }>;
  /** Pending interactive requests of a Pi session. */
  listInteractions(sessionId: string): Promise<Interaction[]>;
  /**
   * Gives up on a pending interactive request (for example after the model's reminders): its
   * attempt fails with `reason` and the run routes `$result.outcome = failed`, or fails.
   */
  failInteraction(
    interaction: Pick<Interaction, 'interaction_id' | 'run_id' | 'node_id' | 'attempt_id'>,
    reason: string,
    options?: CommandOptions,
  ): Promise<{ interaction_id: string; routed_to: string | null }>;
  /** A durable progress update for a pending interactive request (a `progress` event); the request stays pending. */
  updateInteraction(
    interaction: Pick<Interaction, 'interaction_id' | 'run_id' | 'node_id' | 'attempt_id'>,
    message: string,
    data?: unknown,
    options?: CommandOptions,
  ): Promise<{ interaction_id: string }>;
  /** Submits a result; the workflow's `validate` judges it in a supervised child before it counts. */
  submitInteraction(
    interaction: Pick<Interaction, 'interaction_id' | 'run_id' | 'node_id' | 'attempt_id'>,
    result: unknown,
    options?: CommandOptions,
  ): Promise<{ interaction_id: string; submission_id: string; state: 'validating' }>;
  claimMessages(sessionId: string, options?: CommandOptions & {
    limit?: number;
    /** A stable name of this client: messages it already holds are claimed again at once (after a restart). */
    claimant?: string;
  }): Promise<WorkflowMessage[]>;
  ackMessage(messageId: string, options?: CommandOptions): Promise<{ message_id: string; delivered_at: number }>;
  /** Contradictory durable state, if any (empty when healthy). */
  diagnose(): Promise<unknown[]>;
  /** Events of a run or of a session. */
  subscribe(filter: { runId: string } | { sessionId: string }): Promise<Subscription>;
  /**
   * The run once it is final (or, with `untilParked`, also waiting or in review). A burst of
   * events this wait falls behind on (`subscription_overflow`) does not end it: it subscribes
   * again and re-reads the run. The same holds for `waitForSubmission`.
   */
  waitForRun(runId: string, options?: WaitOptions & { untilParked?: boolean }): Promise<Run>;
  /** The verdict on a submission once the workflow's `validate` judged it. */
  waitForSubmission(runId: string, submissionId: string, options?: WaitOptions): Promise<SubmissionVerdict>;
  /** Closes the connection; calls in flight reject with `client_closed`. */
  close(): Promise<void>;
}

export declare class Subscription implements AsyncIterable<RunEvent> {
  private constructor();
  readonly id: string;
  /**
   * The next event, or `null` once closed. Rejects with `subscription_overflow` when this
   * reader fell behind, and when the connection ends with the host's goodbye code (for example
   * `subscriber_lagged`) or `disconnected`.
   */
  next(): Promise<RunEvent | null>;
  close(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<RunEvent>;
}

/** Makes sure a host serves the installation (starting one on demand) and returns its status. */
export declare function ensureHost(options?: Omit<ConnectOptions, 'start'>): Promise<HostStatus>;
export declare function isFinal(status: RunStatusName): boolean;
export declare function findHostBin(hostBin?: string): string;
export declare function hostEnvironment(): Record<string, string>;

// ---------------------------------------------------------------------------------------------
// Authoring

/** What node code gets besides its input. */
export interface NodeContext {
  runId: string;
  nodeId: string;
  /**
   * The node's attempt. `undefined` for a compute node without a timeout that runs right after
   * another such node: the runtime reports those steps together, and the host opens their
   * attempts when it hears of them.
   */
  attemptId: string | undefined;
  /** The run's input (a node's own input is the previous node's output). */
  runInput: unknown;
  projectDir: string;
  /** Publishes informational progress. */
  progress(message: string, data?: unknown): void;
}

export interface ActionContext extends NodeContext {
  /** The managed effect: `retry` is true when an earlier application was interrupted. */
  effect: { id: string; key: string; retry: boolean };
}

export interface NodeOptions {
  /** The node's deadline; the host records `timed_out` and stops the child when it passes. */
  timeoutMs?: number;
}

declare const nodeBrand: unique symbol;
export interface WorkflowNode {
  readonly [nodeBrand]: true;
  readonly kind: 'compute' | 'action' | 'agent' | 'assistant_message' | 'checkpoint' | 'human_decision' | 'notify';
}

type Awaitable<T> = T | Promise<T>;

/** A pure step; may rerun after a crash. Its return value is its output. */
export declare function compute<I = any, O = unknown>(run: (input: I, ctx: NodeContext) => Awaitable<O>, options?: NodeOptions): WorkflowNode;
export declare function compute<I = any, O = unknown>(spec: { run: (input: I, ctx: NodeContext) => Awaitable<O> } & NodeOptions): WorkflowNode;

/** A side effect performed only through a managed effect. */
export declare function action<I = any, R = unknown>(
  spec: {
    effect: {
      /** The effect's key within the run: a key applies at most once. */
      key: (input: I, ctx: NodeContext) => string;
      /** What the effect does; a different fingerprint under the same key is refused. */
      fingerprint?: (input: I, ctx: NodeContext) => string;
      /** `never` (default): an interrupted application becomes `uncertain` and the run stops for review. */
      retry?: 'never' | 'idempotency_key' | 'read_back';
    };
    /**
     * Performs the effect; its return value is the receipt and the node's output. Throw
     * `EffectFailed` when it certainly did not happen; any other exception means "in doubt".
     */
    apply: (input: I, ctx: ActionContext) => Awaitable<R>;
  } & NodeOptions,
): WorkflowNode;

export interface InteractiveSpec<I = any, R = any> extends NodeOptions {
  /** The request shown in the origin session (default `{ input }`). */
  request?: (input: I, ctx: NodeContext) => Awaitable<unknown>;
  /**
   * Judges a submitted result before it counts: return (or throw) an error text to reject it,
   * `undefined` to accept it. The accepted result is the node's output.
   */
  validate?: (result: R, input: I) => Awaitable<string | undefined | null | boolean | void>;
}

/** An agent step answered by the model in the origin Pi session. */
export declare function agent<I = any, R = any>(spec?: InteractiveSpec<I, R>): WorkflowNode;
/** An assistant-message step answered with one message. */
export declare function assistantMessage<I = any, R = any>(spec?: InteractiveSpec<I, R>): WorkflowNode;

export interface DecisionSpec<I = any> extends NodeOptions {
  request?: (input: I, ctx: NodeContext) => Awaitable<unknown>;
}
/** An ordinary checkpoint; output `{ answer }`. */
export declare function checkpoint<I = any>(spec?: DecisionSpec<I>): WorkflowNode;
/** A protected human decision; output `{ answer }`. */
export declare function humanDecision<I = any>(spec?: DecisionSpec<I>): WorkflowNode;
/** A workflow message for the origin session; the node's output is its input. */
export declare function notify<I = any>(content: unknown | ((input: I, ctx: NodeContext) => Awaitable<unknown>), options?: NodeOptions): WorkflowNode;

export type Edge =
  | { from: string; to: string }
  | { from: string; switch: { on: string; cases: Record<string, string>; default?: string } };

export declare function to(from: string, next: string): Edge;
/** Routes a success on the value at `$.path` of the output. */
export declare function switchOn(from: string, on: string, cases: Record<string, string>, dflt?: string): Edge;
/** Routes on how the node ended: `succeeded`, `failed` or `timed_out`. */
export declare function onOutcome(from: string, cases: Partial<Record<'succeeded' | 'failed' | 'timed_out', string>>, dflt?: string): Edge;

export interface WorkflowDefinition {
  name: string;
  start: string;
  nodes: Record<string, WorkflowNode>;
  edges?: Edge[];
  /** Other source files the workflow includes, verified before a resumed run loads code. */
  mounts?: Record<string, string>;
  /** Base for relative mount paths; pass `import.meta.url`. */
  baseUrl?: string;
}

/** A validated workflow: the data-only graph snapshot plus the node code. */
export interface Workflow {
  readonly name: string;
  /** The snapshot the host stores and checks every transition against. */
  readonly graph: unknown;
  /** Its canonical SHA-256 digest. */
  readonly digest: string;
  readonly nodes: Readonly<Record<string, WorkflowNode>>;
  readonly mounts: Readonly<Record<string, string>>;
}

/** Defines a workflow; throws `PiwError` (`invalid_graph`) for an invalid graph. Export it as default. */
export declare function defineWorkflow(definition: WorkflowDefinition): Workflow;
export declare function isWorkflow(value: unknown): value is Workflow;

/**
 * Throw from an action's `apply` when the effect certainly did not happen: it is settled
 * `failed` and the node fails (route it with `onOutcome`). Any other exception leaves the
 * effect in doubt: under `never` it becomes `uncertain` and the run stops for review; under
 * `idempotency_key` or `read_back` the next child retries it with `ctx.effect.retry` set.
 */
export declare class EffectFailed extends Error {
  readonly name: 'EffectFailed';
}
