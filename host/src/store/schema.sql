-- piw durable state, schema piw.state.v1.
-- This text is hashed into the DDL digest stored in schema_info; any edit changes the digest and
-- makes existing databases refuse to open (alpha policy: no migrations, explicit backup and reset).

CREATE TABLE schema_info (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    schema_id   TEXT    NOT NULL,
    ddl_digest  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    -- 64 hex digits, random, made with the database: the key `run.list` and `run.prune` sign
    -- their cursors with (`protocol::payload::RunListCursor`), so a cursor outlives a host
    -- restart and no cursor another database or a client made is taken.
    cursor_key  TEXT    NOT NULL CHECK (length(cursor_key) = 64)
);

-- One row per host process that opened the store for writing. The epoch fences children of
-- earlier hosts.
CREATE TABLE host_epochs (
    epoch       INTEGER PRIMARY KEY AUTOINCREMENT,
    pid         INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    stopped_at  INTEGER
);

CREATE TABLE runs (
    run_id             TEXT    PRIMARY KEY,
    workflow_name      TEXT    NOT NULL,
    source_root        TEXT    NOT NULL,
    source_hash        TEXT    NOT NULL,
    mounted_sources    TEXT    NOT NULL,   -- JSON object: mount name -> source hash
    definition         TEXT,               -- JSON graph snapshot, stored at first activation
    definition_digest  TEXT,
    input              TEXT    NOT NULL,   -- JSON
    input_hash         TEXT    NOT NULL,
    origin_session     TEXT,
    execution_mode     TEXT    NOT NULL CHECK (execution_mode IN ('interactive', 'detached')),
    project_dir        TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN
                           ('queued', 'running', 'waiting', 'review',
                            'completed', 'failed', 'cancelled', 'timed_out')),
    paused             INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    current_node       TEXT,
    current_attempt    TEXT,
    revision           INTEGER NOT NULL,
    last_event_id      INTEGER REFERENCES events (event_id),  -- newest event; NULL at revision 0
    result             TEXT,               -- JSON, terminal success only
    error              TEXT,               -- terminal failure or cancellation reason
    review_reason      TEXT,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    -- The rowids of the run's first and latest command receipt: receipts are appended in
    -- time order, so a prune finds a run's receipts in this window (store/prune.rs) without
    -- an index by run, which would cost every command one more page written.
    receipts_from      INTEGER,
    receipts_to        INTEGER
);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_session ON runs (origin_session);
-- Run lists: newest first, each page continuing after the key of the last one's last run.
CREATE INDEX runs_by_start ON runs (created_at DESC, run_id);
-- The live detached runs, read every turn by the bridges (`Store::detached_steps`): partial,
-- so an interactive run's writes never touch it and the read costs nothing without them.
CREATE INDEX runs_detached ON runs (status) WHERE execution_mode = 'detached';

-- Exactly one row per run. The generation survives release so it is never reused.
CREATE TABLE claims (
    run_id        TEXT    PRIMARY KEY REFERENCES runs (run_id),
    generation    INTEGER NOT NULL CHECK (generation >= 0),
    owner_kind    TEXT    CHECK (owner_kind IN ('host', 'control')),
    owner_id      TEXT,
    token_hash    TEXT,                    -- SHA-256 of the claim token; the token is never stored
    heartbeat_at  INTEGER,
    expires_at    INTEGER,
    CHECK ((owner_kind IS NULL) = (token_hash IS NULL)),
    CHECK ((owner_kind IS NULL) = (expires_at IS NULL))
);

CREATE TABLE queue (
    run_id        TEXT    PRIMARY KEY REFERENCES runs (run_id),
    state         TEXT    NOT NULL CHECK (state IN
                      ('ready', 'claimed', 'waiting', 'paused', 'review', 'done')),
    available_at  INTEGER NOT NULL,
    crash_count   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX queue_ready ON queue (state, available_at);

CREATE TABLE attempts (
    attempt_id   TEXT    PRIMARY KEY,
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    node_id      TEXT    NOT NULL,
    ordinal      INTEGER NOT NULL,
    generation   INTEGER NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN
                     ('running', 'waiting', 'succeeded', 'failed', 'timed_out',
                      'interrupted', 'cancelled')),
    deadline_at  INTEGER,
    output       TEXT,
    error        TEXT,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    UNIQUE (run_id, node_id, ordinal)
);
-- Lookups of a run's attempts use the (run_id, node_id, ordinal) index above; no index on
-- status, so closing an attempt writes no index page.

CREATE TABLE decisions (
    decision_id      TEXT    PRIMARY KEY,
    run_id           TEXT    NOT NULL REFERENCES runs (run_id),
    attempt_id       TEXT    NOT NULL REFERENCES attempts (attempt_id),
    node_id          TEXT    NOT NULL,
    kind             TEXT    NOT NULL CHECK (kind IN ('checkpoint', 'human_decision')),
    request          TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'answered', 'cancelled')),
    answer           TEXT,
    answered_by      TEXT    CHECK (answered_by IN ('model', 'person')),
    idempotency_key  TEXT,
    created_at       INTEGER NOT NULL,
    answered_at      INTEGER
);
CREATE INDEX decisions_by_run ON decisions (run_id, status);
-- A resumed attempt looks up what it waited on (`resume_point`).
CREATE INDEX decisions_by_attempt ON decisions (attempt_id);

-- Durable timers: an attempt parked until wake_at (a `wait` node, or a node's code that waits).
-- wake_at is decided once, when the timer is set, and never recomputed; the host fires a
-- pending timer at or after it (at start when it passed while no host ran), and the run's next
-- child continues the attempt with `output`.
CREATE TABLE timers (
    timer_id    TEXT    PRIMARY KEY,
    run_id      TEXT    NOT NULL REFERENCES runs (run_id),
    attempt_id  TEXT    NOT NULL REFERENCES attempts (attempt_id),
    node_id     TEXT    NOT NULL,
    wake_at     INTEGER NOT NULL,
    output      TEXT    NOT NULL,      -- JSON: the node's output when it wakes
    status      TEXT    NOT NULL CHECK (status IN ('pending', 'fired', 'cancelled')),
    created_at  INTEGER NOT NULL,
    fired_at    INTEGER
);
CREATE INDEX timers_due ON timers (status, wake_at);
CREATE INDEX timers_by_attempt ON timers (attempt_id);
CREATE INDEX timers_by_run ON timers (run_id, status);

CREATE TABLE interactions (
    interaction_id  TEXT    PRIMARY KEY,
    run_id          TEXT    NOT NULL REFERENCES runs (run_id),
    attempt_id      TEXT    NOT NULL REFERENCES attempts (attempt_id),
    node_id         TEXT    NOT NULL,
    origin_session  TEXT,
    kind            TEXT    NOT NULL CHECK (kind IN ('agent', 'assistant_message')),
    request         TEXT    NOT NULL,
    -- The step's time runs only while it is presented (held: by its origin session's live
    -- client, or by its detached run's bridge), never while nobody holds it (Pi closed, a
    -- bridge not yet started, the host down). budget_ms: the node's timeout left when it was
    -- asked (NULL: none); used_ms: the time held so far, before held_since; held_since: since
    -- when it is held (NULL: nobody holds it). deadline_at = held_since + budget_ms - used_ms
    -- while held and NULL otherwise (the attempt's deadline_at mirrors it while it is open).
    budget_ms       INTEGER CHECK (budget_ms >= 0),
    used_ms         INTEGER NOT NULL DEFAULT 0 CHECK (used_ms >= 0),
    held_since      INTEGER,
    deadline_at     INTEGER,
    status          TEXT    NOT NULL CHECK (status IN
                        ('pending', 'validating', 'settled', 'expired', 'cancelled')),
    created_at      INTEGER NOT NULL,
    closed_at       INTEGER
);
CREATE INDEX interactions_by_run ON interactions (run_id, status);
CREATE INDEX interactions_by_attempt ON interactions (attempt_id);
CREATE INDEX interactions_by_session ON interactions (origin_session, status);

CREATE TABLE submissions (
    submission_id    TEXT    PRIMARY KEY,
    interaction_id   TEXT    NOT NULL REFERENCES interactions (interaction_id),
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('validating', 'accepted', 'rejected')),
    error            TEXT,
    idempotency_key  TEXT,
    created_at       INTEGER NOT NULL,
    settled_at       INTEGER
);
CREATE INDEX submissions_by_interaction ON submissions (interaction_id, state);

CREATE TABLE effects (
    effect_id       TEXT    PRIMARY KEY,
    run_id          TEXT    NOT NULL REFERENCES runs (run_id),
    attempt_id      TEXT    NOT NULL REFERENCES attempts (attempt_id),
    effect_key      TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN
                        ('reserved', 'applying', 'applied', 'failed', 'uncertain', 'cancelled')),
    retry_contract  TEXT    NOT NULL CHECK (retry_contract IN
                        ('never', 'idempotency_key', 'read_back')),
    receipt         TEXT,
    error           TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (run_id, effect_key)
);

CREATE TABLE command_receipts (
    request_id       TEXT    PRIMARY KEY,
    idempotency_key  TEXT    UNIQUE,
    fingerprint      TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    run_id           TEXT,
    response         TEXT    NOT NULL,
    created_at       INTEGER NOT NULL
);

CREATE TABLE children (
    child_epoch         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id              TEXT    NOT NULL REFERENCES runs (run_id),
    generation          INTEGER NOT NULL,
    host_epoch          INTEGER NOT NULL REFERENCES host_epochs (epoch),
    mode                TEXT    NOT NULL CHECK (mode IN ('run', 'validate')),
    pid                 INTEGER,
    process_start_time  INTEGER,           -- from /proc, so a reused pid is never killed
    spawned_at          INTEGER NOT NULL,
    handshake_at        INTEGER,
    exited_at           INTEGER,
    exit_code           INTEGER,
    signal              INTEGER,
    reason              TEXT,
    stdout_tail         BLOB,
    stderr_tail         BLOB
);
CREATE INDEX children_live ON children (exited_at, host_epoch);

-- A run's notify and terminal messages: content Pi must add to the origin session, or, for a
-- run without one (NULL origin_session, which no session's claim matches), kept for status.
CREATE TABLE workflow_messages (
    message_id        TEXT    PRIMARY KEY,
    run_id            TEXT    NOT NULL REFERENCES runs (run_id),
    origin_session    TEXT,
    kind              TEXT    NOT NULL CHECK (kind IN ('notify', 'terminal')),
    content           TEXT    NOT NULL,
    created_at        INTEGER NOT NULL,
    claimed_by        TEXT,
    claim_expires_at  INTEGER,
    delivered_at      INTEGER
);
CREATE INDEX workflow_messages_pending ON workflow_messages (origin_session, delivered_at);

-- Immutable, in commit order: the events of one commit share the table's last page, however
-- many runs it touches (clustered by run, each run's event landed on a page of its own). A
-- run's events form a chain: runs.last_event_id names the newest, each names the one before
-- it, and seq equals the run's revision after the write that appended it.
CREATE TABLE events (
    event_id       INTEGER PRIMARY KEY,
    run_id         TEXT    NOT NULL REFERENCES runs (run_id),
    seq            INTEGER NOT NULL,
    prev_event_id  INTEGER REFERENCES events (event_id),
    kind           TEXT    NOT NULL,
    at             INTEGER NOT NULL,
    data           TEXT    NOT NULL
);

-- What a viewer reads: one cheap row per run, kept in step with runs by every write.
CREATE TABLE run_views (
    run_id          TEXT    PRIMARY KEY REFERENCES runs (run_id),
    workflow_name   TEXT    NOT NULL,
    origin_session  TEXT,
    status          TEXT    NOT NULL,
    paused          INTEGER NOT NULL,
    current_node    TEXT,
    revision        INTEGER NOT NULL,
    last_event      TEXT    NOT NULL,
    updated_at      INTEGER NOT NULL
);

-- The latest workflow update of a run per (type, key): a progress whose data is an update
-- `{ type, key, data }` replaces its row in the same write, whether or not its event was kept
-- (see event_budgets). `samples` holds the last (at, completed) pairs of a counted progress
-- track's current estimation epoch, for an ETA.
CREATE TABLE run_updates (
    run_id      TEXT    NOT NULL REFERENCES runs (run_id),
    type        TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    node_id     TEXT,
    attempt_id  TEXT,
    data        TEXT    NOT NULL,   -- JSON object
    seq         INTEGER NOT NULL,   -- the run's revision after the update
    at          INTEGER NOT NULL,
    samples     TEXT    NOT NULL,   -- JSON array of [at, completed]
    ordinal     INTEGER NOT NULL,   -- the run's progress and notify count then: their order
    PRIMARY KEY (run_id, type, key)
) WITHOUT ROWID;

-- What a run's progress and notify events used: per run (attempt_id '') and per attempt,
-- the events and bytes kept; per run, the rate bucket and the events dropped over a bound
-- (`unreported`: since the last event kept, which then says how many).
CREATE TABLE event_budgets (
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    attempt_id   TEXT    NOT NULL,
    events       INTEGER NOT NULL,
    bytes        INTEGER NOT NULL,
    tokens       INTEGER NOT NULL,  -- thousandths of an event
    refilled_at  INTEGER NOT NULL,
    dropped      INTEGER NOT NULL,
    unreported   INTEGER NOT NULL,
    PRIMARY KEY (run_id, attempt_id)
) WITHOUT ROWID;

-- Retention (store/prune.rs). A prune deletes by run from every table keyed by one; these are
-- the tables that had no index by run. Receipts name their run (also the one a `run.start`
-- made) and are found through the run's window (`runs.receipts_from`, `receipts_to`); those
-- naming none go once they are older than every run left. The file is created with
-- auto_vacuum = INCREMENTAL (schema.rs), so the pages a prune frees go back.
CREATE INDEX children_by_run ON children (run_id);
-- The receipts of the progress-like kinds, which a chatty run sends without end: only the
-- latest few per run and kind are kept (store/receipts.rs, `RECEIPTS_KEPT_PER_RUN_AND_KIND`),
-- and this index finds the one to drop. Partial: every other kind's receipt costs no second
-- B-tree (docs/PERFORMANCE.md, "The engine crate").
CREATE INDEX command_receipts_windowed ON command_receipts (run_id, kind)
    WHERE kind IN ('worker.progress', 'worker.notify', 'interaction.update');
CREATE INDEX workflow_messages_by_run ON workflow_messages (run_id);

-- Large values (node outputs, receipts, requests, messages over what a frame carries), stored
-- once per installation by the SHA-256 of their canonical JSON and referred to from a run's
-- rows by a typed reference (`protocol::value`). A value arrives in chunks, in order:
-- `received` counts the bytes stored so far and the value is complete when it reaches `bytes`
-- (the hash is checked then). It is kept while a run links to it (`run_values`).
CREATE TABLE value_blobs (
    sha256      TEXT    PRIMARY KEY,
    bytes       INTEGER NOT NULL CHECK (bytes >= 0),
    received    INTEGER NOT NULL CHECK (received >= 0 AND received <= bytes),
    created_at  INTEGER NOT NULL
);
CREATE TABLE value_chunks (
    sha256  TEXT    NOT NULL REFERENCES value_blobs (sha256),
    offset  INTEGER NOT NULL,
    data    BLOB    NOT NULL,
    UNIQUE (sha256, offset)
);
-- The runs a value belongs to: the one that uploaded it and each that uploaded it again.
CREATE TABLE run_values (
    run_id  TEXT NOT NULL REFERENCES runs (run_id),
    sha256  TEXT NOT NULL REFERENCES value_blobs (sha256),
    PRIMARY KEY (run_id, sha256)
) WITHOUT ROWID;
CREATE INDEX run_values_by_value ON run_values (sha256);

-- Controllers (store/controllers.rs): definitions a client registered per project, the
-- resources they drive toward their spec, the work queue of reconcile passes, and what passes
-- recorded. The host runs no controller code: each pass runs in a supervised child.
CREATE TABLE controllers (
    project_dir       TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    source_path       TEXT    NOT NULL,
    source_hash       TEXT    NOT NULL,
    enabled           INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    pass_deadline_ms  INTEGER NOT NULL CHECK (pass_deadline_ms > 0),
    registered_at     INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (project_dir, name)
) WITHOUT ROWID;

-- One requested outcome: spec (its callers') and status (its controller's; NULL until the
-- first pass), both canonical JSON of at most 1 MiB. resource_version grows with every write;
-- generation only when the spec changes. uid is a row id (time and random bits): a resource
-- made again under the same key gets a new one.
CREATE TABLE controller_resources (
    uid                    TEXT    PRIMARY KEY,
    project_dir            TEXT    NOT NULL,
    controller             TEXT    NOT NULL,
    resource_key           TEXT    NOT NULL,
    resource_version       INTEGER NOT NULL CHECK (resource_version >= 1),
    generation             INTEGER NOT NULL CHECK (generation >= 1),
    deletion_requested_at  INTEGER,
    finalizers             TEXT    NOT NULL,   -- JSON array of names
    spec                   TEXT    NOT NULL,
    status                 TEXT,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    UNIQUE (project_dir, controller, resource_key),
    FOREIGN KEY (project_dir, controller) REFERENCES controllers (project_dir, name)
);

-- The work queue: at most one row per resource (an event for a queued resource moves its row,
-- never adds one). A pass holds the row while it runs: its claim token's hash (the token is
-- never stored), its claim's end (the pass's deadline), the host epoch that launched its
-- child, the resource_version it read. requeue_requested: an event arrived while it ran.
CREATE TABLE controller_queue (
    resource_uid        TEXT    PRIMARY KEY REFERENCES controller_resources (uid),
    due_at              INTEGER NOT NULL,
    reason              TEXT    NOT NULL,
    consecutive_errors  INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_errors >= 0),
    pass_id             TEXT,
    token_hash          TEXT,
    lease_expires_at    INTEGER,
    host_epoch          INTEGER REFERENCES host_epochs (epoch),
    pass_started_at     INTEGER,
    read_version        INTEGER,
    requeue_requested   INTEGER NOT NULL DEFAULT 0 CHECK (requeue_requested IN (0, 1)),
    CHECK ((pass_id IS NULL) = (token_hash IS NULL)),
    CHECK ((pass_id IS NULL) = (lease_expires_at IS NULL)),
    CHECK ((pass_id IS NULL) = (host_epoch IS NULL)),
    CHECK ((pass_id IS NULL) = (read_version IS NULL))
);
CREATE INDEX controller_queue_due ON controller_queue (due_at) WHERE pass_id IS NULL;

-- External effects a pass recorded before attempting them, one per (resource, key).
CREATE TABLE controller_effects (
    resource_uid         TEXT    NOT NULL REFERENCES controller_resources (uid),
    effect_key           TEXT    NOT NULL,
    kind                 TEXT    NOT NULL,
    generation           INTEGER NOT NULL,
    request_fingerprint  TEXT    NOT NULL,
    state                TEXT    NOT NULL CHECK (state IN
                             ('pending', 'applied', 'rejected', 'indeterminate')),
    external_ref         TEXT,
    error                TEXT,
    started_at           INTEGER NOT NULL,
    completed_at         INTEGER,
    PRIMARY KEY (resource_uid, effect_key)
) WITHOUT ROWID;

-- Child workflow requests, one per (resource, request key); each attempt is a run of its own
-- (run_ids: every attempt's, oldest first; run_id: the current one's). The request's state is
-- its current run's status.
CREATE TABLE controller_workflows (
    resource_uid       TEXT    NOT NULL REFERENCES controller_resources (uid),
    request_key        TEXT    NOT NULL,
    request_id         TEXT    NOT NULL UNIQUE,
    workflow           TEXT    NOT NULL,
    input_fingerprint  TEXT    NOT NULL,
    attempt            INTEGER NOT NULL CHECK (attempt >= 0),
    run_id             TEXT,               -- no reference: a prune may remove an ended run
    run_ids            TEXT    NOT NULL,   -- JSON array
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (resource_uid, request_key)
);
CREATE INDEX controller_workflows_by_run ON controller_workflows (run_id);

-- What each pass came to, the latest few per resource (store/controllers.rs keeps them).
CREATE TABLE controller_passes (
    pass_id         TEXT    PRIMARY KEY,
    resource_uid    TEXT    NOT NULL,
    project_dir     TEXT    NOT NULL,
    controller      TEXT    NOT NULL,
    resource_key    TEXT    NOT NULL,
    generation      INTEGER NOT NULL,
    outcome         TEXT    NOT NULL CHECK (outcome IN
                        ('settled', 'requeue', 'error', 'deadline', 'conflict', 'interrupted')),
    started_at      INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL CHECK (duration_ms >= 0),
    requeue_reason  TEXT,
    message         TEXT
);
CREATE INDEX controller_passes_by_resource ON controller_passes (resource_uid, started_at);
