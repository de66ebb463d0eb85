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
  /** A detached start that no Pi the host can run could serve; the message says what is missing. */
  | 'pi_unusable'
  /** A failure in the host, not the caller's fault; as a rejection this attempt committed nothing (a resend with the same request id gets an earlier attempt's receipt). */
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
  /** `submitInteraction`: the result's canonical JSON passes `MAX_VALUE_BYTES` (64 MiB); nothing was sent (`details`: `bytes`, `limit`). */
  | 'value_too_large'
  /**
   * `waitForSubmission`: the run stopped for review before the submission was judged
   * (`details`: `run_id`, `submission_id`, `review_reason`). The submission is kept and judged
   * once a person lets the run go on (`piw run retry`).
   */
  | 'run_in_review'
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
  /** The run's input (JSON; default `{}`). */
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
  /** When the durable timer the run waits on fires (Unix ms); `null` when it waits on none. */
  wake_at: number | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

export interface ListRunsOptions {
  sessionId?: string;
  /** Runs per page (default 100, at most 10000). */
  limit?: number;
  unfinished?: boolean;
  /** Only runs in one of these statuses. */
  statuses?: RunStatusName[];
  /** Where to continue: a page's `nextCursor` (opaque). */
  cursor?: string | null;
  /** Only runs whose id begins with this text, or, for lower-case hex digits (a short id), ends with it (resolving a shortened run id). */
  runIdPrefix?: string;
}

export interface PruneRunsOptions {
  /** Only runs that finished at least this long ago (milliseconds). */
  olderThanMs?: number;
  /** Only runs in one of these finished statuses (default: every one). */
  statuses?: Array<'completed' | 'failed' | 'cancelled' | 'timed_out'>;
  /** The newest this many finished runs (of those statuses) stay. */
  keep?: number;
  /** Change nothing; say what would go. */
  dryRun?: boolean;
}

/** What `pruneRuns` removed, or with `dryRun` would remove, oldest first. */
export interface PruneResult {
  dryRun: boolean;
  count: number;
  runIds: string[];
}

/** A page of `listRunsPage`. */
export interface RunsPage {
  runs: Run[];
  /** Whether runs follow this page. */
  more: boolean;
  /** Pass as `cursor` for the runs after this page; `null` when none follow. */
  nextCursor: string | null;
}

export interface Attempt {
  attempt_id: string;
  node_id: string;
  /** `ok` as the authoring API says it (the `$result.outcome` word). */
  status: 'running' | 'waiting' | 'ok' | 'failed' | 'timed_out' | 'interrupted' | 'cancelled';
  /** 1 for a node's first attempt, 2 for its second … */
  ordinal: number;
  /** The claim generation it ran under. */
  generation: number;
  /** When the node times out; `null` without a timeout (an attempt waiting on an interactive request has the request's). */
  deadline_at: number | null;
  error: string | null;
  /** An `ok` attempt's output; `null` otherwise. */
  output: unknown;
  /** `run.status` left this output out to fit its reply (a run whose outputs add up to more). */
  output_omitted?: true;
  /** When it opened, and when it ended (`null` while it runs or waits), in Unix ms. */
  started_at: number;
  finished_at: number | null;
  [field: string]: unknown;
}

export interface Decision {
  decision_id: string;
  run_id: string;
  /** The attempt that asked it. */
  attempt_id: string;
  node_id: string;
  kind: 'checkpoint' | 'human_decision';
  status: 'pending' | 'answered' | 'cancelled';
  request: unknown;
  /** `run.status` left this closed decision's request (or answer) out to fit its reply. */
  request_omitted?: true;
  /** The answer; `null` until answered. */
  answer: unknown;
  answer_omitted?: true;
  /** `model` (`answerCheckpoint`) or `person` (`answerHumanDecision`: a dialog, the CLI, a channel); `null` until answered. */
  answered_by: 'model' | 'person' | null;
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

export interface ChildProcess {
  child_epoch: number;
  run_id: string;
  generation: number;
  host_epoch: number;
  mode: 'run' | 'validate';
  pid: number | null;
  exit_code: number | null;
  signal: number | null;
  /** How it ended, in words; `null` while it runs. */
  reason: string | null;
  /** The last 64 KiB it wrote to stdout (hex runs of 32+ digits masked as `<hex>`). */
  stdout_tail: string;
  /** The last 64 KiB it wrote to stderr (masked the same way). */
  stderr_tail: string;
  handshake: boolean;
  exited: boolean;
}

export interface RunStatusOptions {
  /** At most this many attempts, newest first (default 100, at most 1000). */
  attemptsLimit?: number;
  /** Only attempts older than this one: the last `attempt_id` of a previous reply. */
  attemptsBefore?: string;
  /** Keep values stored apart (over 64 KiB) as their references instead of reading them back. */
  references?: boolean;
}

/** What the host keeps in place of a value over 64 KiB, stored apart (`readValue` reads it). */
export interface ValueReference {
  $piw: 'value';
  /** SHA-256 of the value's canonical JSON. */
  sha256: string;
  /** The canonical JSON's length in bytes (at most 64 MiB). */
  bytes: number;
  /** The start of the canonical JSON, at most 200 characters. */
  preview: string;
}

/** Who holds a run and under which generation (never a token or its hash). */
export interface RunClaim {
  /** One more at every activation. */
  generation: number;
  /** `host` (a child runs it) or `control` (an operator's cancel); `null` when nobody holds the run. */
  owner_kind: 'host' | 'control' | null;
  owner_id: string | null;
  heartbeat_at: number | null;
  expires_at: number | null;
}

export interface RunStatus {
  run: Run;
  claim: RunClaim;
  /** The newest attempts first, at most the `attemptsLimit` asked for (default 100). */
  attempts: Attempt[];
  /** How many attempts the run has in all. */
  attempt_count: number;
  /** The run's newest child process (`null` before its first): how it ended, what it wrote. */
  last_child: ChildProcess | null;
  decisions: Decision[];
  interactions: Interaction[];
  effects: Effect[];
  /** The latest update per `(type, key)`, in the order they arrived. */
  updates: RunUpdate[];
  /** Progress and notify events dropped over the run's event budget. */
  events_dropped: number;
  /** The run's newest 20 workflow messages, oldest of them first (a run without a session keeps its messages only here). */
  messages: WorkflowMessage[];
  /** How many workflow messages the run has in all. */
  message_count: number;
  /** Who serves the run's pending interactive step now (absent without one, or while paused). */
  step_service?: StepService;
}

/** `RunStatus.step_service`: who serves a run's pending interactive step, as the host sees it. */
export interface StepService {
  interaction_id: string;
  served_by: 'session' | 'bridge' | 'bridge_starting' | 'nobody';
  /** Why nobody serves it. */
  why?: 'session_closed' | 'no_model' | 'bridges_off' | 'no_pi';
  /** `provider/model`, when a bridge serves it or will. */
  model?: string;
  /** More about `why` (for `no_pi`). */
  detail?: string;
}

/** The run's latest update for one `(type, key)` (`RunStatus.updates`). */
export interface RunUpdate {
  type: string;
  key: string;
  node_id: string | null;
  attempt_id: string | null;
  data: Record<string, unknown> | null;
  /** `data` was left out so that the status fits a frame. */
  data_omitted?: true;
  seq: number;
  /** Unix ms, when the host received it. */
  at: number;
  /** A counted progress track's `[at, completed]` of its current estimation epoch, oldest first (at most nine). */
  samples: Array<[number, number]>;
}

export interface WorkflowMessage {
  message_id: string;
  run_id: string;
  origin_session: string | null;
  /** `notify` (from a notify node) or `terminal` (the run ended). */
  kind: string;
  content: unknown;
  /** `content` was left out so that the status fits a frame. */
  content_omitted?: true;
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
  /** The most children it runs at once: `PIW_MAX_CHILDREN`, or fewer under a low open-file limit. */
  child_slots: number;
  /** The most client connections it keeps open (its children's are counted apart). */
  max_connections: number;
  /** Pre-started workers waiting for a run (`PIW_STANDBY_WORKERS`). */
  standby_workers: number;
  stopping: boolean;
  /** The workflow file suffixes this host can run. */
  runtimes: string[];
  /** Log lines that could not be written. */
  log_writes_lost: number;
  /** Each decision channel configured (never a credential). */
  channels: ChannelStatus[];
}

/** A decision channel as `HostStatus.channels` reports it. */
export interface ChannelStatus {
  name: string;
  kind: string;
  state: 'running' | 'restarting' | 'stopped';
  /** When a channel that exited starts again; `null` while it runs, or when it will not. */
  restart_in_ms: number | null;
  exits_in_a_row: number;
  /** How many times this host started it. */
  launches: number;
}

/** What a cancellation closed, all in its one commit. */
export interface CancelSummary {
  attempts_closed: number;
  decisions_cancelled: number;
  interactions_cancelled: number;
  submissions_rejected: number;
  effects_cancelled: number;
  effects_uncertain: number;
}

/** One committed change of a run, delivered in order without gaps. */
export interface RunEvent {
  /** The protocol's schema (`piw.protocol.v1`). */
  schema: string;
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
/** A value (a submission's result) whose canonical JSON passes this (64 KiB) travels apart, uploaded in chunks. */
export declare const INLINE_VALUE_BYTES: number;
/** The largest value, its canonical JSON in bytes (64 MiB): a node output, a submission's result. */
export declare const MAX_VALUE_BYTES: number;

export declare class Client {
  private constructor();
  /** Connects, starting a host on demand. */
  static connect(options?: ConnectOptions): Promise<Client>;
  readonly isOpen: boolean;

  /** Any request kind of the protocol, with the full receipt. */
  request<T = unknown>(kind: string, envelope?: CommandOptions & { runId?: string; nodeId?: string; attemptId?: string }, payload?: unknown): Promise<Receipt<T>>;

  status(): Promise<HostStatus>;
  /**
   * One page of runs, newest first (`limit`, default 100, at most 10000; fewer when their
   * records do not fit one reply). `unfinished: true`: only runs not in a terminal status
   * (however many ended since). `cursor`: the `nextCursor` of an earlier page.
   */
  listRuns(options?: ListRunsOptions): Promise<Run[]>;
  /** `listRuns` with whether runs follow and the cursor of the next page. */
  listRunsPage(options?: ListRunsOptions): Promise<RunsPage>;
  /** Every run of the filters, newest first, fetched a page at a time; each exactly once. */
  allRuns(options?: Omit<ListRunsOptions, 'cursor'> & { cursor?: string | null }): AsyncIterableIterator<Run>;
  startRun(workflowFile: string, options?: StartRunOptions): Promise<{ run_id: string; status: RunStatusName }>;
  runStatus(runId: string, options?: RunStatusOptions): Promise<RunStatus>;
  /** The value a reference names, which run `runId` holds, read back and checked against its hash. */
  readValue(runId: string, reference: ValueReference): Promise<unknown>;
  /** A stored place as the workflow gave it: a reference read back, a literal unwrapped, else itself. */
  resolveValue(runId: string, stored: unknown): Promise<unknown>;
  pauseRun(runId: string, options?: CommandOptions): Promise<{ run_id: string; paused: true }>;
  /** Its steps go to a Pi the host starts from now on, not to its session. */
  detachRun(runId: string, options?: CommandOptions): Promise<{ run_id: string; execution_mode: 'detached'; changed: boolean }>;
  resumeRun(runId: string, options?: CommandOptions): Promise<{ run_id: string; paused: false }>;
  cancelRun(runId: string, options?: CommandOptions & { reason?: string }): Promise<{ run_id: string; status: 'cancelled'; summary: CancelSummary }>;
  /**
   * A run in review: runs its current node again (`queued`), or, when that node's attempt waits
   * for an answer nobody gave yet, waits for it again (`waiting`). Refused while an effect is uncertain.
   * `acceptSource`: a run stopped because a source changed (`review_reason` starting with
   * `source_changed`) goes on with its workflow file as it is now; the `retried` event keeps the
   * old and new hash. Refused (`invalid_transition`) for a run in review for another reason.
   */
  retryRun(
    runId: string,
    options?: CommandOptions & { reason?: string; by?: string; acceptSource?: boolean },
  ): Promise<{ run_id: string; status: 'queued' | 'waiting' }>;
  /** A run in review: records what became of an uncertain effect; the run continues once none is. */
  resolveEffect(
    runId: string,
    effectId: string,
    outcome: { applied: unknown } | { failed: string },
    options?: CommandOptions & { reason?: string; by?: string },
  ): Promise<{ run_id: string; effect_id: string; state: 'applied' | 'failed'; status: RunStatusName }>;
  /** Answers an ordinary checkpoint (the model-facing path). */
  answerCheckpoint(runId: string, decisionId: string, answer: unknown, options?: CommandOptions): Promise<{ decision_id: string; answered_by: 'model' }>;
  /** A person's answer: to a protected human decision (only a person may answer one) or to a checkpoint. */
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
  ): Promise<{
    interaction_id: string;
    /** The run's revision after the update. */
    seq: number;
    /** `false`: its event was over the run's event budget (the update is still the latest for its `(type, key)`). */
    event_kept: boolean;
  }>;
  /**
   * Submits a result; the workflow's `validate` judges it in a supervised child before it counts.
   * Sent again for a request that already took an equal result (being judged or accepted):
   * that submission's receipt, `repeated: true`; another result for a closed request is refused.
   * A result whose canonical JSON passes `INLINE_VALUE_BYTES` (64 KiB) is uploaded first
   * (`interaction.value_put`, bound to this request, in chunks) and submitted as its reference:
   * up to `MAX_VALUE_BYTES` (64 MiB), as large as a node output; the workflow's `validate` sees
   * the whole value. A larger one rejects at once with `PiwError` code `value_too_large`
   * (`details: { bytes, limit }`), nothing sent.
   */
  submitInteraction(
    interaction: Pick<Interaction, 'interaction_id' | 'run_id' | 'node_id' | 'attempt_id'>,
    result: unknown,
    options?: CommandOptions,
  ): Promise<{ interaction_id: string; submission_id: string; state: 'validating' | 'accepted'; repeated: boolean }>;
  claimMessages(sessionId: string, options?: CommandOptions & {
    limit?: number;
    /** A stable name of this client: messages it already holds are claimed again at once (after a restart). */
    claimant?: string;
    /** Only messages after this one (claim order): the next page while the ones before are held, not acknowledged. */
    after?: string;
  }): Promise<WorkflowMessage[]>;
  ackMessage(messageId: string, options?: CommandOptions): Promise<{ message_id: string; delivered_at: number }>;
  /**
   * Removes finished runs with everything that belongs to them (never a run still going);
   * a run goes when every option given holds. `dryRun` changes nothing.
   */
  pruneRuns(options?: PruneRunsOptions): Promise<PruneResult>;
  /** Contradictory durable state, if any (empty when healthy). */
  diagnose(): Promise<unknown[]>;
  /** Events of a run, of a session, or of every run (`{ all: true }`: a decision channel's adapter). */
  subscribe(filter: { runId: string } | { sessionId: string } | { all: true }): Promise<Subscription>;
  /**
   * The run once it is final (or, with `untilParked`, also once it waits on a request: a
   * pending decision or interactive step; waits paused; or is in review; a run asleep on a
   * durable timer, `wake_at` set, is not parked: the wait goes on). A burst of
   * events this wait falls behind on (`subscription_overflow`) does not end it: it subscribes
   * again and re-reads the run. The same holds for `waitForSubmission`.
   */
  waitForRun(runId: string, options?: WaitOptions & { untilParked?: boolean }): Promise<Run>;
  /**
   * The verdict on a submission once the workflow's `validate` judged it. Rejects at once with
   * `run_in_review` when the run stopped for review first (`details.review_reason` says why).
   */
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
// Authoring: the API of pi-workflows 0.12.1 (see node-binding/README.md for what differs).

type Awaitable<T> = T | Promise<T>;

/** How a node ended, as `results` holds it and `$result.outcome` routes on. */
export type NodeOutcome = 'ok' | 'failed' | 'timed_out' | 'cancelled';

/** The result record of a finished node. */
export interface WorkflowNodeResult {
  outcome: NodeOutcome;
  /** The output, when the outcome is `ok`. */
  output?: unknown;
  /** Why it failed. */
  error?: string;
}

/** Facts about the run and the running node (read-only). */
export interface WorkflowRunState {
  runId: string;
  workflow: string;
  /** The run's resolved title, or null. */
  title: string | null;
  /** The running node's id. */
  node: string;
  /**
   * The node's attempt; null for a compute node without a timeout that runs right after another
   * such node (the runtime reports those steps together).
   */
  attemptId: string | null;
  /** How many times this node has been entered in this run, this time included. */
  visit: number;
  projectDir: string;
}

/** What every node callback receives. */
export interface WorkflowNodeContext<I = unknown> {
  /** The run's input (after the workflow's `input` normaliser). */
  input: I;
  /** The output of every node that finished `ok` (latest wins; a later failure removes it). */
  outputs: Record<string, unknown>;
  /** The latest result of every finished node, failures included. */
  results: Record<string, WorkflowNodeResult>;
  state: WorkflowRunState;
  /** Aborted when the node's deadline passes or the run is stopped. */
  signal: AbortSignal;
}

/**
 * A durable, non-completing update from an action: `type` matches `[a-z][a-z0-9.-]{0,63}`, `key`
 * `[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}`, `data` is a JSON object of at most 64 KiB (a `progress`
 * update's follows `pi-workflows.progress.v1`, see `validateProgressData`).
 */
export interface WorkflowUpdate {
  type: string;
  key: string;
  data: Record<string, unknown>;
}

/** What `publishUpdate` answers: `seq` is the run's revision after the update was kept. */
export interface WorkflowUpdateReceipt {
  updateId: string;
  seq: number | null;
  at: string;
  type: string;
  key: string;
}

/** The data of a `progress` update. */
export interface WorkflowProgressData {
  schema: 'pi-workflows.progress.v1';
  status: 'pending' | 'running' | 'waiting' | 'blocked' | 'completed' | 'failed' | 'cancelled' | 'unknown';
  label?: string;
  phase?: string;
  completed?: number;
  total?: number;
  /** Required with `completed` or `total`: 1 to 32 printable characters. */
  unit?: string;
  sourceUpdatedAt?: string;
  sourceEstimatedFinishAt?: string;
}

export declare const MAX_UPDATE_DATA_BYTES: number;
/** Checks an update as `publishUpdate` does; returns `{ type, key, data }` or throws the first problem. */
export declare function validateWorkflowUpdate(update: unknown): WorkflowUpdate;
/** Checks the data of a `progress` update; returns it or throws the first problem. */
export declare function validateProgressData(data: unknown): WorkflowProgressData;

export type ProgressConfidence = 'low' | 'medium' | 'high';
/** One progress track's estimate; rates in units per millisecond. */
export interface ProgressEstimate {
  key: string;
  data: WorkflowProgressData;
  sampleCount: number;
  delta?: number;
  rateLow?: number;
  rateMedian?: number;
  rateHigh?: number;
  remainingLowMs?: number;
  remainingMedianMs?: number;
  remainingHighMs?: number;
  confidence?: ProgressConfidence;
  sourceEstimatedFinishAt?: string;
  unavailableReason?: string;
  elapsedMs?: number;
}
/** A sample of a track: `at` an ISO time or Unix milliseconds. */
export interface ProgressSample {
  at: string | number;
  data: WorkflowProgressData;
}
export interface ProgressUpdateRecord {
  type: string;
  key: string;
  at: string | number;
  data: Record<string, unknown>;
}
export interface ProgressTrackState {
  key: string;
  samples: ProgressSample[];
  estimate: ProgressEstimate;
}
/** The estimate of a track from its samples, oldest first (its current epoch's last eight intervals). */
export declare function estimateProgress(key: string, samples: ProgressSample[], now?: Date): ProgressEstimate;
/** `Worker A  420/1,000 rows  ETA 18m–20m`. */
export declare function formatProgressLine(estimate: ProgressEstimate, now?: Date): string;
export declare function formatProgressReport(estimates: ProgressEstimate[], nextCheckMinutes?: number, now?: Date, maxChars?: number): string;
/** `45s`, `18m`, `2.5h`, `1.5d`. */
export declare function formatRemaining(ms: number): string;
export declare function prioritizeProgressEstimates(estimates: ProgressEstimate[]): ProgressEstimate[];
export declare function progressTracksFromRecords(records: ProgressUpdateRecord[], now?: Date): ProgressTrackState[];
export declare function appendProgressHistory<T extends ProgressUpdateRecord>(history: T[], additions: T[], maxPerTrack?: number, maxRecords?: number): T[];
/** The tracks of `run.status` → `updates` (piw's projection, with its samples). */
export declare function progressTracksFromStatus(updates: unknown[] | undefined, now?: Date): ProgressTrackState[];

/**
 * A JSON value out of model text: `strict` the whole text, `fenced` or the first ``` fence,
 * `compat` (default) or the first object or array in prose that parses. Throws when none.
 */
export declare function parseJsonValue(text: string, options?: { mode?: 'strict' | 'fenced' | 'compat' }): unknown;
export declare function parseStrictJsonValue(text: string): unknown;
export declare function extractJsonValue(text: string): unknown;
/** JSON text with every object's keys sorted (as the reference sorts them). */
export declare function canonicalJson(value: unknown): string;
/** `sha256:<hex>` of `canonicalJson(value)`. */
export declare function digest(value: unknown): string;

/** A workflow file found by name: `ref` is its path, `source` where it was found. */
export interface DiscoveredWorkflow {
  name: string;
  ref: string;
  source: 'project' | 'global' | 'path';
}
export interface WorkflowSearchPaths {
  cwd: string;
  /** Default: the user's home directory. */
  homeDir?: string;
}
/** `.pi/workflows/` of the project, then `~/.pi/agent/workflows/`. */
export declare function workflowSearchDirs(paths: WorkflowSearchPaths): { dir: string; source: 'project' | 'global' }[];
/** A file's name without its `.workflow.*` suffix. */
export declare function workflowFileStem(filePath: string): string;
/** Every workflow visible from `cwd` (a project file hides a global one of the same name). */
export declare function discoverWorkflows(paths: WorkflowSearchPaths): Promise<DiscoveredWorkflow[]>;
/** The file a name or a path (relative to `cwd`) refers to. */
export declare function resolveWorkflowRef(ref: string, paths: WorkflowSearchPaths): Promise<DiscoveredWorkflow>;
/** The workflow a file default-exports (TypeScript compiled as in a run's child). */
export declare function loadWorkflowFile(filePath: string): Promise<Workflow>;

/** The reason a node's `signal` aborts at its deadline. */
export declare class TimeoutError extends Error {
  constructor(timeoutMs: number);
  readonly timeoutMs: number;
}
/** The reason a node's `signal` aborts when the run is stopped (cancelled or paused). */
export declare class CancelledError extends Error {
  constructor(message?: string);
}

export interface WorkflowActionContext<I = unknown> extends WorkflowNodeContext<I> {
  publishUpdate(update: WorkflowUpdate): Promise<WorkflowUpdateReceipt>;
  /** The managed effect; `retry` is true when an earlier application was interrupted. */
  effect: { id: string; type: string; key: string; retry: boolean };
}

declare const nodeBrand: unique symbol;
export interface WorkflowNode {
  readonly [nodeBrand]: true;
  readonly kind: 'compute' | 'action' | 'agent' | 'assistant_message' | 'checkpoint' | 'human_decision' | 'notify' | 'wait';
}

type Text<I> = string | ((ctx: WorkflowNodeContext<I>) => Awaitable<string>);

/**
 * A node's deadline in milliseconds, `null` for none, or a function of the node context that
 * returns either: called when each attempt starts (at most 30 s), its deadline saved with the
 * attempt and enforced by the host.
 */
export type TimeoutMs<I = any> = number | null | ((ctx: WorkflowNodeContext<I>) => Awaitable<number | null>);

/** A pure step; may run again after a crash. Its return value is its output. */
export declare function compute<I = any, O = unknown>(spec: {
  run: (ctx: WorkflowNodeContext<I>) => Awaitable<O>;
  /** A deadline the host enforces (the node ends `timed_out`). */
  timeoutMs?: TimeoutMs<I>;
}): WorkflowNode;

/** Queues a plain-text message for the session that started the run; output `{ kind, message }`. */
export declare function notify<I = any>(spec: { kind?: 'progress' | 'final'; message: Text<I> }): WorkflowNode;
/** A duration: milliseconds or text such as `'90s'`, `'5m'`, `'2h'`, `'1d'`. */
export type Duration = number | string;
/** A time: a `Date`, Unix milliseconds or ISO 8601 text. */
export type WakeTime = Date | number | string;
/**
 * A durable wait: the run parks until a time on a timer the host holds (no process, no child
 * slot), decided once when the node runs; then the node succeeds with `output`.
 */
export declare function wait<I = any>(
  spec:
    | { for: Duration | ((ctx: WorkflowNodeContext<I>) => Duration | Promise<Duration>); until?: never; output?: any }
    | { until: WakeTime | ((ctx: WorkflowNodeContext<I>) => WakeTime | Promise<WakeTime>); for?: never; output?: any },
): WorkflowNode;
/** Returned by a compute node's `run`: park on a durable timer, then succeed with `output`. */
export declare function waitThen(
  spec: { for: Duration; until?: never; output?: any } | { until: WakeTime; for?: never; output?: any },
): unknown;

declare const assistantBrand: unique symbol;
export interface AssistantMessageOutput {
  readonly [assistantBrand]: true;
  readonly maxChars: number | null;
}
/** `expectedOutput` of an agent answered with one visible message: its text is the output. */
export declare function assistantMessage(options?: { maxChars?: number }): AssistantMessageOutput;

export interface AgentSpec<I = any, O = any> {
  prompt: Text<I>;
  /** What to submit (a description of the JSON), or `assistantMessage()`. */
  expectedOutput?: string | AssistantMessageOutput;
  /** Throws to reject a submission (parsed tolerantly from a string); returns the normalised output. */
  validate?: (output: any, ctx: WorkflowNodeContext<I>) => Awaitable<O | void>;
  /** Default 15 minutes; `null`: no deadline. */
  timeoutMs?: TimeoutMs<I>;
  /** Shown with the step in the Pi extension. */
  statusDetail?: string;
}
/** A step answered by the model in the origin Pi session. */
export declare function agent<I = any, O = any>(spec: AgentSpec<I, O>): WorkflowNode;

/** An agent step that picks one of `choices`; submitted as `{ [field]: choice }` (field `route`). */
export declare function decision<I = any, C extends string = string>(
  spec: Omit<AgentSpec<I>, 'prompt' | 'expectedOutput'> & {
    choices: readonly C[];
    question: Text<I>;
    field?: string;
  },
): WorkflowNode;
/** The switch edge of a `decision`: one target for every choice. */
export declare function decisionEdge<C extends string>(spec: {
  from: string;
  choices: readonly C[];
  cases: Record<C, string>;
  field?: string;
}): Edge;

/** An ordinary checkpoint; its output is the answer (any JSON). */
export declare function checkpoint<I = any>(spec?: {
  /** Default: `<node> waits for an answer`. */
  summary?: Text<I>;
  /** A value shown with the request (under `extra.output`). */
  run?: (ctx: WorkflowNodeContext<I>) => Awaitable<unknown>;
}): WorkflowNode;

export interface TextInput {
  readonly kind: 'text';
  readonly name: string;
  readonly prompt: string;
  readonly placeholder?: string;
  readonly minLength?: number;
  readonly maxLength?: number;
}
export declare function textInput(spec: {
  name: string;
  prompt: string;
  placeholder?: string;
  minLength?: number;
  maxLength?: number;
}): TextInput;

export interface HumanChoice {
  readonly label: string;
  readonly description?: string;
  readonly input?: TextInput;
}
export declare function choice(spec: { label: string; description?: string; input?: TextInput }): HumanChoice;

declare const choicesBrand: unique symbol;
export type HumanChoices<K extends string = string> = { readonly [choicesBrand]: true } & Readonly<Record<K, HumanChoice>>;
export declare function defineHumanChoices<K extends string>(choices: Record<K, HumanChoice>): HumanChoices<K>;

/** A decision only a person may answer; output `{ choice, provenance }` or `{ choice, input: { [name]: text }, provenance }`. */
export interface HumanDecisionTimeout<K extends string = string> {
  afterMs: number;
  response: { choice: K; text?: string };
}
/**
 * `audience` and `onTimeout` may be functions of the node context: they are called (with
 * `request`) when the attempt opens, and the request, deadline and response are saved with it.
 */
export declare function humanDecision<I = any, K extends string = string>(spec: {
  choices: HumanChoices<K>;
  audience?: string | ((ctx: WorkflowNodeContext<I>) => Awaitable<string>);
  request?: (ctx: WorkflowNodeContext<I>) => Awaitable<{
    title?: string;
    subject?: unknown;
    presentation?: { summary?: string; [key: string]: unknown };
    /** A positive integer, kept with the request (`extra.revision`). */
    revision?: number;
    /** An ISO date: the decision's deadline (the node ends `timed_out`); not with `onTimeout`. */
    expiresAt?: string;
  }>;
  /** The host answers with `response` (provenance `timeout`) when nobody did within `afterMs`. */
  onTimeout?: HumanDecisionTimeout<K> | ((ctx: WorkflowNodeContext<I>) => Awaitable<HumanDecisionTimeout<K> | undefined>);
}): WorkflowNode;
/** The switch edge of a `humanDecision`: one target for every choice. */
export declare function humanDecisionEdge<K extends string>(spec: {
  from: string;
  choices: HumanChoices<K>;
  cases: Record<K, string>;
}): Edge;

declare const effectBrand: unique symbol;
export interface EffectPolicy {
  readonly [effectBrand]: true;
  readonly type: string;
}
/** An effect another attempt may safely repeat (idempotency key or read-back check). */
export declare function idempotentEffect(type: string): EffectPolicy;
/** An effect nobody can check after a crash: it becomes uncertain and the run stops for review. */
export declare function manualEffect(type: string): EffectPolicy;

/** What a shell action runs. */
export interface ShellCommand {
  command: string;
  args?: string[];
  /** Default: the run's project directory (a relative `cwd` is resolved against it). */
  cwd?: string;
  /** Added to the child's environment. */
  env?: Record<string, string>;
  stdin?: string;
  /** Run through a shell (`true`: `/bin/sh`, or the path of one), as `child_process.spawn` does. */
  shell?: boolean | string;
  /** The command's own deadline: its whole process group is killed and the node fails. */
  timeoutMs?: number;
  /** A non-zero exit does not fail the node. */
  allowNonZeroExit?: boolean;
  /** Cap on each of stdout and stderr (default 1,000,000 characters). */
  maxOutputChars?: number;
}

export interface ShellActionResult {
  command: string;
  args: string[];
  /** Where the command ran: `cwd` resolved against the run's project directory. */
  cwd: string;
  stdout: string;
  stderr: string;
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
  /** Whether stdout or stderr was cut at `maxOutputChars`. */
  truncated: boolean;
}

export interface ShellSpec<I = any, O = ShellActionResult> {
  /** Default `manualEffect('shell')`: never retried automatically; a crash mid-command stops the run for review. */
  effect?: EffectPolicy;
  exec: (ctx: WorkflowNodeContext<I>) => Awaitable<ShellCommand>;
  parse?: (result: ShellActionResult, ctx: WorkflowNodeContext<I>) => Awaitable<O>;
  /** Turns each complete output line (at most 64 KiB) into updates, published in order. */
  updates?: {
    /** The streams whose lines are parsed (default both). */
    streams?: Array<'stdout' | 'stderr'>;
    parseLine: (
      line: { stream: 'stdout' | 'stderr'; text: string },
      ctx: WorkflowActionContext<I>,
    ) => Awaitable<WorkflowUpdate | WorkflowUpdate[] | null | undefined>;
  };
  timeoutMs?: TimeoutMs<I>;
}

/** A managed side effect; `run`'s return value is the receipt and the node's output. */
export declare function action<I = any, R = unknown>(spec: {
  /** Default `manualEffect('action')`: never retried automatically; a crash mid-effect stops the run for review. */
  effect?: EffectPolicy;
  run: (ctx: WorkflowActionContext<I>) => Awaitable<R>;
  timeoutMs?: TimeoutMs<I>;
}): WorkflowNode;
/** The shell form of `action`. */
export declare function action<I = any, O = ShellActionResult>(spec: ShellSpec<I, O>): WorkflowNode;
/** A command the workflow owns, run as a managed effect in its own process group. */
export declare function shell<I = any, O = ShellActionResult>(spec: ShellSpec<I, O>): WorkflowNode;

/** One command of a batch: every field is required; `cwd` is absolute. */
export interface CommandBatchItem {
  /** `[A-Za-z0-9][A-Za-z0-9._:-]{0,63}`, unique in the batch. */
  id: string;
  command: string;
  args: string[];
  cwd: string;
  /** 1 through 3,600,000. */
  timeoutMs: number;
  /** 1 through 1,000,000. */
  maxOutputChars: number;
}
export interface CommandBatchRequest {
  /** At most 64. */
  items: CommandBatchItem[];
  /** 1 through 8. */
  maxConcurrency: number;
}
export type CommandBatchItemOutcome = 'succeeded' | 'failed' | 'timedOut' | 'cancelled';
export interface CommandBatchItemResult extends Omit<ShellActionResult, 'truncated'> {
  id: string;
  outcome: CommandBatchItemOutcome;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** Why the item did not succeed (at most 2,000 characters). */
  error?: string;
}
export interface CommandBatchResult {
  schema: 'pi-workflows.command-batch-result.v1';
  /** In request order. */
  items: CommandBatchItemResult[];
  completed: number;
  total: number;
}
export interface RunCommandBatchOptions {
  /** Stops every running command (each group is killed); items not started end `cancelled`. */
  signal?: AbortSignal;
  /** Told of each item as it ends; what it throws is ignored. */
  onItemSettled?: (result: CommandBatchItemResult, completed: number, total: number) => Awaitable<void>;
}
export declare const COMMAND_BATCH_RESULT_SCHEMA: 'pi-workflows.command-batch-result.v1';
export declare const MAX_COMMAND_BATCH_ITEMS: number;
export declare const MAX_COMMAND_BATCH_CONCURRENCY: number;
export declare const MAX_COMMAND_BATCH_TIMEOUT_MS: number;
export declare const MAX_COMMAND_BATCH_OUTPUT_CHARS: number;
/** Checks a batch request whole (throws the first problem) and returns it normalised. */
export declare function validateCommandBatchRequest(value: unknown): CommandBatchRequest;
/**
 * Runs the commands of a batch, at most `maxConcurrency` at once, each in its own process group
 * (killed at its timeout, on `signal`, and when the run is stopped); one item's failure does not
 * stop the others. Call it from an `action` (a manual effect unless declared otherwise).
 */
export declare function runCommandBatch(request: CommandBatchRequest, options?: RunCommandBatchOptions): Promise<CommandBatchResult>;

export type Edge =
  | { from: string; to: string }
  | {
      from: string;
      /** `on`: `$.path`, `$output.path` or `$result.outcome` (cases `ok`, `failed`, `timed_out`, `cancelled`). */
      switch: { on: string; cases: Record<string, string>; default?: string };
    };

declare const includeBrand: unique symbol;
export interface IncludedWorkflow {
  readonly [includeBrand]: true;
  /** The workflow imported directly, when it was. */
  readonly workflow?: Workflow;
  /** The name or path, for an include resolved when the run loads. */
  readonly reference?: string;
}
/**
 * Mounts a workflow under a name of `includes`: imported directly, or by a discovered name
 * (the project's `.pi/workflows/`, then `~/.pi/agent/workflows/`) or a path relative to the
 * including file, resolved when the run loads, before its first node. Its nodes become
 * `<mount>.<node>`; an edge to the mount enters it, `<mount>.<exit>` leaves it. Without
 * `input`, the included workflow gets the parent's input.
 */
export declare function includeWorkflow<I = any>(
  workflow: Workflow | string,
  options?: {
    input?: (ctx: WorkflowNodeContext<I>) => Awaitable<unknown>;
    /** For a name or path: the workflow it must match (contractId, exit names, input or not). */
    contract?: Workflow;
  },
): IncludedWorkflow;
/** The reference's dynamic form: `includeWorkflow({ workflow: "repair", input, contract? })`. */
export declare function includeWorkflow<I = any>(options: {
  workflow: Workflow | string;
  input?: (ctx: WorkflowNodeContext<I>) => Awaitable<unknown>;
  contract?: Workflow;
}): IncludedWorkflow;
/** A named set of workflows, checked (each made by `defineWorkflow`, names unique) and frozen. */
export declare function defineWorkflowRegistry<R extends Record<string, Workflow>>(registry: R): Readonly<R>;
/** The output of a mount: which exit the included workflow left through, and its output. */
export interface IncludedResult<O = unknown> {
  exit: string;
  output: O;
}
/** Checks that `value` is a result of `workflow` (its exit is one of the workflow's exits). */
export declare function includedResult<O = unknown>(workflow: Workflow, value: unknown): IncludedResult<O>;

export interface WorkflowDefinition<I = any> {
  /** An id: `[A-Za-z_][A-Za-z0-9_-]*`. */
  name: string;
  /** The run's title, resolved from `{ input, workflowName }`. */
  title?: string | ((args: { input: I; workflowName: string }) => Awaitable<string | undefined>);
  /** A string; a function is accepted but not called (see "What differs" in the README). */
  presentationPrompt?: string | ((ctx: { state: unknown; finalOutput: unknown; signal: AbortSignal }) => Awaitable<string | undefined>);
  /**
   * The Pi model that serves this workflow's `agent` and `assistantMessage` steps when a run is
   * detached (the host's Pi children); wins over the run's input (`piw_detached`) and the
   * host's `PIW_DETACHED_PROVIDER` / `_MODEL` / `_PI_ARGS`, field by field.
   */
  detached?: { provider?: string; model?: string; piArgs?: string[] };
  startAt: string;
  nodes: Record<string, WorkflowNode>;
  edges: Edge[];
  /** Included workflows by mount name. */
  includes?: Record<string, IncludedWorkflow>;
  /** Named successful ends, for when another workflow includes this one. */
  exits?: Record<string, { from: string; validate?: (output: any) => Awaitable<unknown> }>;
  /** The most node attempts a run may start (default 100); the host fails the run beyond. */
  maxSteps?: number;
  /** Normalises and validates the run's input; throw to fail the run. */
  input?: (raw: unknown) => Awaitable<I>;
  /** `import.meta.url`, for provenance. */
  source?: string;
  contractId?: string;
}

/** A validated workflow: the data-only graph snapshot plus the node code. */
export interface Workflow {
  readonly name: string;
  /** The snapshot the host stores and checks every transition against. */
  readonly graph: unknown;
  /** Its canonical SHA-256 digest. */
  readonly digest: string;
  /** Every node by id, included workflows' under their mount paths. */
  readonly nodes: Readonly<Record<string, WorkflowNode>>;
  readonly exits: Readonly<Record<string, { from: string }>>;
}

/** Defines a workflow; throws `PiwError` (`invalid_graph`) naming what is wrong. Export it as default. */
export declare function defineWorkflow<I = any>(definition: WorkflowDefinition<I>): Workflow;
export declare function isWorkflow(value: unknown): value is Workflow;
/** The reference's name for `isWorkflow`. */
export declare const isWorkflowDefinition: typeof isWorkflow;

// ---------------------------------------------------------------------------------------------
// The bridge of detached runs (Pi in RPC mode serving one run's interactive steps)

/** How a bridge's Pi exits: `done` the run has no step for it, `busy` another bridge serves it, `unusable` no such detached run, `hostGone` the host went away. */
export declare const BRIDGE_EXIT: Readonly<{ done: 0; busy: 3; unusable: 4; hostGone: 5 }>;
/** The bridge extension's file, for Pi's `-e`. */
export declare const BRIDGE_EXTENSION: string;
/** The command line of run `runId`'s bridge; `env` is what to add to the launcher's environment. */
export declare function bridgeCommand(options: {
  pi: string;
  runId: string;
  provider?: string;
  model?: string;
  piArgs?: string[];
  node?: string;
  home?: string;
}): { command: string; args: string[]; env: Record<string, string> };
/** A held bridge lock. */
export interface BridgeLock {
  release(): void;
}
/** Takes run `runId`'s bridge lock; `PiwError` `bridge_busy` when another process holds it. */
export declare function lockBridge(runId: string, home?: string): BridgeLock;
/** Checks that Pi can serve a detached run with this provider and model; `PiwError` `pi_unusable` says why not. */
export declare function preflightBridge(options: {
  pi: string;
  provider?: string;
  model?: string;
  node?: string;
  env?: Record<string, string | undefined>;
  cwd?: string;
}): Promise<{ provider: string; model: string }>;
