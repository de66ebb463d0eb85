//! Payloads of the controller kinds: a client's (`controller.*` registration, `resource.*`)
//! and a pass child's (`controller.effect.*`, `controller.pass.finish`), which carry the
//! pass's credentials: its resource, its pass id and its claim token (fenced by the store as
//! a worker's requests are by its run's claim).

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::store::controllers::{
    ControllerEffectState, PassResultKind, DEFAULT_PASS_DEADLINE_MS,
};

/// Payload of `controller.register`: a definition discovered in a project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRegister {
    /// The project's directory (absolute).
    pub project_dir: String,
    /// The definition's name.
    pub name: String,
    /// The controller file (absolute).
    pub source_path: String,
    /// The SHA-256 (hex) of the file's bytes.
    pub source_hash: String,
    /// How long one pass may run (default 5 minutes).
    pub pass_deadline_ms: Option<i64>,
}

/// Payload of `controller.enable` and `controller.disable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerName {
    /// The project's directory (absolute).
    pub project_dir: String,
    /// The controller's name.
    pub name: String,
}

/// Payload of `resource.apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceApply {
    /// The project's directory (absolute).
    pub project_dir: String,
    /// The controller's name.
    pub controller: String,
    /// The key (of the resource, or of the effect).
    pub key: String,
    /// The whole spec (JSON, at most 1 MiB as canonical JSON).
    pub spec: Value,
    /// Write only over this version (0: only if it does not exist); another is
    /// `resource_conflict`.
    pub expected_resource_version: Option<u64>,
}

/// Payload of `resource.get`, `resource.reconcile` and `resource.delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRef {
    /// The project's directory (absolute).
    pub project_dir: String,
    /// The controller's name.
    pub controller: String,
    /// The key (of the resource, or of the effect).
    pub key: String,
    /// `resource.delete` only: delete only at this version.
    pub expected_resource_version: Option<u64>,
}

/// Payload of `resource.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceList {
    /// The project's directory (absolute).
    pub project_dir: String,
    /// One controller's resources; every controller's when absent.
    pub controller: Option<String>,
}

/// What a pass child presents with each request (from its envelope).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassCredentials {
    /// The resource the pass reconciles.
    pub resource_uid: String,
    /// The pass.
    pub pass_id: String,
    /// The pass's claim token (only its hash is stored).
    pub token: String,
}

impl std::fmt::Debug for PassCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassCredentials")
            .field("resource_uid", &self.resource_uid)
            .field("pass_id", &self.pass_id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Payload of `controller.effect.record`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerEffectRecord {
    /// The pass's credentials.
    pub pass: PassCredentials,
    /// The key (of the resource, or of the effect).
    pub key: String,
    /// The kind.
    pub kind: String,
    /// The resource's generation the pass read.
    pub generation: u64,
    /// Hex SHA-256 of the request's canonical JSON.
    pub request_fingerprint: String,
}

/// Payload of `controller.effect.get`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerEffectGet {
    /// The pass's credentials.
    pub pass: PassCredentials,
    /// The key (of the resource, or of the effect).
    pub key: String,
}

/// Payload of `controller.effect.settle`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerEffectSettle {
    /// The pass's credentials.
    pub pass: PassCredentials,
    /// The key (of the resource, or of the effect).
    pub key: String,
    /// `applied`, `rejected` or `indeterminate`.
    pub state: ControllerEffectState,
    /// External ref.
    pub external_ref: Option<String>,
    /// Error.
    pub error: Option<String>,
}

/// Payload of `controller.workflow.ensure`: a child workflow run of the pass's resource, found
/// by its request key or started (a detached run of the project).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerWorkflowEnsure {
    /// The pass's credentials.
    pub pass: PassCredentials,
    /// The request's stable key (1-512 printable characters).
    pub request_key: String,
    /// The workflow's name, as the controller asked for it.
    pub workflow: String,
    /// The workflow file the name resolved to (absolute; the host reads and hashes it).
    pub workflow_file: String,
    /// The project the run works in (absolute).
    pub project_dir: String,
    /// The run's input.
    pub input: Value,
    /// Hex SHA-256 of the input's canonical JSON.
    pub input_fingerprint: String,
}

/// Payload of `controller.pass.finish`: what the pass came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerPassFinish {
    /// The pass's credentials.
    pub pass: PassCredentials,
    /// `settled`, `requeue`, `error` or `deadline`.
    pub kind: PassResultKind,
    /// With `requeue`: the next pass after this many milliseconds.
    pub after_ms: Option<i64>,
    /// With `error`: why.
    pub message: Option<String>,
    /// With `settled` and `requeue`: the whole status.
    pub status: Option<Value>,
    /// The resource's finalizers, when the pass set them.
    pub finalizers: Option<Vec<String>>,
}

/// Replies of the controller kinds (each a JSON object).
pub mod reply {
    use serde::Serialize;

    use crate::store::controllers::{
        ApplyOutcome, ControllerEffectRecord, ControllerRecord, DeleteOutcome, PassFinished,
        PassRecord, QueueEntry, ResourceRecord,
    };
    use crate::time::UnixMillis;

    /// `controller.register`, `controller.enable`, `controller.disable`.
    #[derive(Debug, Serialize)]
    pub struct ControllerReply {
        /// The controller's name.
        pub controller: ControllerRecord,
    }

    /// `resource.apply`: what it did (`created`, `updated`, `unchanged`) and the resource.
    #[derive(Debug, Serialize)]
    pub struct ResourceApplied {
        /// What it did.
        pub outcome: ApplyOutcome,
        /// The resource.
        pub resource: ResourceRecord,
    }

    /// `resource.get`: the resource, its queue row, its effects and its latest passes.
    #[derive(Debug, Serialize)]
    pub struct ResourceReply {
        /// The resource.
        pub resource: ResourceRecord,
        /// The resource's queue row, if it is queued.
        pub queue: Option<QueueEntry>,
        /// Its effects, oldest first.
        pub effects: Vec<ControllerEffectRecord>,
        /// Its latest passes, oldest first.
        pub passes: Vec<PassRecord>,
    }

    /// One resource in `resource.list`: without its spec and status (each up to 1 MiB; read
    /// one with `resource.get`).
    #[derive(Debug, Serialize)]
    pub struct ResourceSummary {
        /// The resource's uid.
        pub uid: String,
        /// The controller's name.
        pub controller: String,
        /// The key (of the resource, or of the effect).
        pub key: String,
        /// Its version (changes with every write).
        pub resource_version: u64,
        /// The resource's generation the pass read.
        pub generation: u64,
        /// The generation the latest status was written for (`status.observedGeneration`).
        pub observed_generation: Option<u64>,
        /// When its deletion was asked for.
        pub deletion_requested_at: Option<UnixMillis>,
        /// Its finalizers.
        pub finalizers: Vec<String>,
        /// Its last write.
        pub updated_at: UnixMillis,
    }

    /// `resource.list`.
    #[derive(Debug, Serialize)]
    pub struct ResourcesListed {
        /// The resources, by controller and key.
        pub resources: Vec<ResourceSummary>,
    }

    /// `resource.delete`: `{ "state": "deleted", "uid" }` or `{ "state": "pending", "resource" }`.
    pub type ResourceDeleted = DeleteOutcome;

    /// `resource.reconcile`: the resource's queue row.
    #[derive(Debug, Serialize)]
    pub struct ResourceQueued {
        /// The resource's queue row, if it is queued.
        pub queue: QueueEntry,
    }

    /// `controller.effect.record`: the record, and whether this request made it.
    #[derive(Debug, Serialize)]
    pub struct EffectRecorded {
        /// The effect's record.
        pub record: ControllerEffectRecord,
        /// Whether this request recorded it.
        pub created: bool,
    }

    /// `controller.effect.get`, `controller.effect.settle`.
    #[derive(Debug, Serialize)]
    pub struct EffectReply {
        /// The effect's record.
        pub record: Option<ControllerEffectRecord>,
    }

    /// `controller.pass.finish`.
    pub type PassFinishedReply = PassFinished;

    /// `controller.workflow.ensure`: the request, its current attempt's run and state.
    #[derive(Debug, Serialize)]
    pub struct WorkflowEnsured {
        /// The request.
        pub request: crate::store::controllers::WorkflowRequestRecord,
    }
}
