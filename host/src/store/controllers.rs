//! Controllers, store side: registered controllers, their resources, the work queue of
//! reconcile passes, and what passes record (effects, child workflow requests, the passes
//! themselves). The rules (names, bounds, the queue after a pass, the backoff) are the
//! engine's `store::controllers`; this file is their SQL.
//!
//! - A write of a resource advances its `resource_version`; a new spec (as canonical JSON)
//!   advances its `generation` too. A write that names an expected `resource_version` that is
//!   not the current one is refused (`ResourceConflict`).
//! - The queue has at most one row per resource. A pass holds it while it runs (its token's
//!   hash, its deadline, the host epoch of its child); every request of the pass's child is
//!   fenced by that claim (`fence_pass`), as a worker's are by its run's.
//! - A pass's result commits in one transaction: the status as a compare-and-swap on the
//!   version the pass read (a lost race requeues; it is not an error), the finalizers, the
//!   deletion when it was asked for and no finalizer is left, the queue row, the pass record.
//!
//! The tables (`schema.sql`):
//!
//! | table | what it keeps |
//! |---|---|
//! | `controllers` | per (`project_dir`, `name`): the file (`source_path`, `source_hash`), `enabled`, `pass_deadline_ms` |
//! | `controller_resources` | per (`project_dir`, `controller`, `resource_key`): `uid` (a row id, never reused), `resource_version` (every write), `generation` (a new spec as canonical JSON), `deletion_requested_at`, `finalizers`, `spec`, `status` (`NULL` before the first pass; 1 MiB each) |
//! | `controller_queue` | one row per queued resource: `due_at`, `reason`, `consecutive_errors`; while a pass runs, its claim: `pass_id`, `token_hash` (never the token), `lease_expires_at` (its deadline), `host_epoch` (whose child), `read_version`, `requeue_requested` (an event during it) |
//! | `controller_effects` | per (`resource_uid`, `effect_key`): kind, generation, request fingerprint, `pending`/`applied`/`rejected`/`indeterminate`, external ref, error |
//! | `controller_workflows` | per (`resource_uid`, `request_key`): child workflow requests, attempts and their run ids (`controller.workflow.ensure`: a detached run of the project per attempt, started in the same transaction; a run's end queues its resource, `finish_run_write_tail`) |
//! | `controller_passes` | the latest 20 passes per resource: generation, outcome, start, duration, requeue reason, message |
//!
//! `diagnose` checks these tables (`controller_pass_without_live_host`,
//! `controller_row_without_resource`, `resource_without_controller`,
//! `resource_version_behind_generation`, `controller_value_invalid`).

use rusqlite::{params, Connection, OptionalExtension as _};
use serde_json::Value;

use super::prelude::*;
use super::{parse_enum, RunStatus, Store, StoreError, StoreResult, WriteTx};
use crate::protocol::canonical::canonical_json;
use piw_engine::store::controllers::*;

fn refused(e: ControllerStoreError) -> StoreError {
    StoreError::Controller(e)
}

/// `value` as canonical JSON, refused over `MAX_RESOURCE_VALUE_BYTES`.
fn bounded_json(value: &Value, what: &'static str) -> StoreResult<String> {
    let json = canonical_json(value);
    if json.len() > MAX_RESOURCE_VALUE_BYTES {
        return Err(refused(ControllerStoreError::TooLarge {
            what,
            bytes: json.len(),
            limit: MAX_RESOURCE_VALUE_BYTES,
        }));
    }
    Ok(json)
}

fn input(check: Result<(), String>) -> StoreResult<()> {
    check.map_err(StoreError::InvalidInput)
}

const CONTROLLER_COLUMNS: &str = "project_dir, name, source_path, source_hash, enabled,
     pass_deadline_ms, registered_at, updated_at";

fn controller_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ControllerRecord> {
    Ok(ControllerRecord {
        project_dir: r.get(0)?,
        name: r.get(1)?,
        source_path: r.get(2)?,
        source_hash: r.get(3)?,
        enabled: r.get::<_, i64>(4)? != 0,
        pass_deadline_ms: r.get(5)?,
        registered_at: r.get(6)?,
        updated_at: r.get(7)?,
    })
}

const RESOURCE_COLUMNS: &str = "uid, project_dir, controller, resource_key, resource_version,
     generation, deletion_requested_at, finalizers, spec, status, created_at, updated_at";

/// A resource row as read, its JSON columns still text.
type RawResource = (ResourceRecord, String, String, Option<String>);

fn resource_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawResource> {
    Ok((
        ResourceRecord {
            uid: r.get(0)?,
            project_dir: r.get(1)?,
            controller: r.get(2)?,
            key: r.get(3)?,
            resource_version: r.get::<_, i64>(4)? as u64,
            generation: r.get::<_, i64>(5)? as u64,
            deletion_requested_at: r.get(6)?,
            finalizers: Vec::new(),
            spec: Value::Null,
            status: None,
            created_at: r.get(10)?,
            updated_at: r.get(11)?,
        },
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
    ))
}

fn parse_resource((mut rec, finalizers, spec, status): RawResource) -> StoreResult<ResourceRecord> {
    rec.finalizers = serde_json::from_str(&finalizers)?;
    rec.spec = serde_json::from_str(&spec)?;
    rec.status = status.as_deref().map(serde_json::from_str).transpose()?;
    Ok(rec)
}

fn read_controller(
    conn: &Connection,
    project_dir: &str,
    name: &str,
) -> StoreResult<Option<ControllerRecord>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {CONTROLLER_COLUMNS} FROM controllers WHERE project_dir = ?1 AND name = ?2"
        ))?
        .query_row(params![project_dir, name], controller_row)
        .optional()?)
}

fn read_resource(
    conn: &Connection,
    project_dir: &str,
    controller: &str,
    key: &str,
) -> StoreResult<Option<ResourceRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {RESOURCE_COLUMNS} FROM controller_resources
         WHERE project_dir = ?1 AND controller = ?2 AND resource_key = ?3"
    ))?
    .query_row(params![project_dir, controller, key], resource_row)
    .optional()?
    .map(parse_resource)
    .transpose()
}

fn read_resource_by_uid(conn: &Connection, uid: &str) -> StoreResult<Option<ResourceRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {RESOURCE_COLUMNS} FROM controller_resources WHERE uid = ?1"
    ))?
    .query_row([uid], resource_row)
    .optional()?
    .map(parse_resource)
    .transpose()
}

const EFFECT_COLUMNS: &str = "resource_uid, effect_key, kind, generation, request_fingerprint,
     state, external_ref, error, started_at, completed_at";

fn read_effects(
    conn: &Connection,
    uid: &str,
    key: Option<&str>,
) -> StoreResult<Vec<ControllerEffectRecord>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {EFFECT_COLUMNS} FROM controller_effects
         WHERE resource_uid = ?1 AND (?2 IS NULL OR effect_key = ?2) ORDER BY started_at, effect_key"
    ))?;
    let rows = stmt.query_map(params![uid, key], |r| {
        Ok((
            ControllerEffectRecord {
                resource_uid: r.get(0)?,
                key: r.get(1)?,
                kind: r.get(2)?,
                generation: r.get::<_, i64>(3)? as u64,
                request_fingerprint: r.get(4)?,
                state: ControllerEffectState::Pending,
                external_ref: r.get(6)?,
                error: r.get(7)?,
                started_at: r.get(8)?,
                completed_at: r.get(9)?,
            },
            r.get::<_, String>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut rec, state) = row?;
        rec.state = parse_enum(
            &state,
            ControllerEffectState::parse,
            "controller effect state",
        )?;
        out.push(rec);
    }
    Ok(out)
}

fn read_workflows(
    conn: &Connection,
    uid: &str,
    request_key: Option<&str>,
) -> StoreResult<Vec<WorkflowRequestRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT w.request_id, w.resource_uid, w.request_key, w.workflow, w.input_fingerprint,
                w.attempt, w.run_id, w.run_ids, r.status, r.error
         FROM controller_workflows w LEFT JOIN runs r ON r.run_id = w.run_id
         WHERE w.resource_uid = ?1 AND (?2 IS NULL OR w.request_key = ?2)
         ORDER BY w.created_at, w.request_key",
    )?;
    let rows = stmt.query_map(params![uid, request_key], |r| {
        Ok((
            WorkflowRequestRecord {
                request_id: r.get(0)?,
                resource_uid: r.get(1)?,
                request_key: r.get(2)?,
                workflow: r.get(3)?,
                input_fingerprint: r.get(4)?,
                state: WorkflowRequestState::Pending,
                attempt: r.get::<_, i64>(5)? as u32,
                run_id: r.get(6)?,
                run_ids: Vec::new(),
                error: None,
            },
            r.get::<_, String>(7)?,
            r.get::<_, Option<String>>(8)?,
            r.get::<_, Option<String>>(9)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut rec, run_ids, status, error) = row?;
        rec.run_ids = serde_json::from_str(&run_ids)?;
        rec.state = match (&rec.run_id, status) {
            (None, _) => WorkflowRequestState::Pending,
            (Some(_), Some(status)) => {
                let status = parse_enum(&status, RunStatus::parse, "run status")?;
                let state = WorkflowRequestState::of_run_status(status);
                if state == WorkflowRequestState::Failed {
                    rec.error = error;
                }
                state
            }
            // A prune removed the ended run: its outcome is no longer kept.
            (Some(run_id), None) => {
                rec.error = Some(format!(
                    "run {run_id} ended and was pruned; its outcome is no longer kept"
                ));
                WorkflowRequestState::Failed
            }
        };
        out.push(rec);
    }
    Ok(out)
}

fn read_passes(conn: &Connection, uid: &str) -> StoreResult<Vec<PassRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT pass_id, resource_uid, controller, resource_key, generation, outcome, started_at,
                duration_ms, requeue_reason, message
         FROM controller_passes WHERE resource_uid = ?1 ORDER BY started_at, rowid",
    )?;
    let rows = stmt.query_map([uid], |r| {
        Ok((
            PassRecord {
                pass_id: r.get(0)?,
                resource_uid: r.get(1)?,
                controller: r.get(2)?,
                key: r.get(3)?,
                generation: r.get::<_, i64>(4)? as u64,
                outcome: PassOutcome::Settled,
                started_at: r.get(6)?,
                duration_ms: r.get(7)?,
                requeue_reason: r.get(8)?,
                message: r.get(9)?,
            },
            r.get::<_, String>(5)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut rec, outcome) = row?;
        rec.outcome = parse_enum(&outcome, PassOutcome::parse, "pass outcome")?;
        out.push(rec);
    }
    Ok(out)
}

const QUEUE_COLUMNS: &str = "q.resource_uid, r.project_dir, r.controller, r.resource_key, q.due_at,
     q.reason, q.consecutive_errors, q.pass_id, q.host_epoch, q.pass_started_at,
     q.lease_expires_at, q.read_version, q.requeue_requested";

fn queue_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<QueueEntry> {
    let pass_id: Option<String> = r.get(7)?;
    let pass = match pass_id {
        Some(pass_id) => Some(RunningPass {
            pass_id,
            host_epoch: r.get(8)?,
            started_at: r.get::<_, Option<i64>>(9)?.unwrap_or_default(),
            lease_expires_at: r.get(10)?,
            read_version: r.get::<_, i64>(11)? as u64,
            requeue_requested: r.get::<_, i64>(12)? != 0,
        }),
        None => None,
    };
    Ok(QueueEntry {
        resource_uid: r.get(0)?,
        project_dir: r.get(1)?,
        controller: r.get(2)?,
        key: r.get(3)?,
        due_at: r.get(4)?,
        reason: r.get(5)?,
        consecutive_errors: r.get::<_, i64>(6)? as u32,
        pass,
    })
}

fn read_queue_entry(conn: &Connection, uid: &str) -> StoreResult<Option<QueueEntry>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {QUEUE_COLUMNS} FROM controller_queue q
             JOIN controller_resources r ON r.uid = q.resource_uid WHERE q.resource_uid = ?1"
        ))?
        .query_row([uid], queue_row)
        .optional()?)
}

/// Reads of controllers' rows, on a store or inside a write.
macro_rules! controller_reads {
    ($ty:ty, $conn:ident) => {
        impl $ty {
            /// A registered controller.
            pub fn controller(
                &self,
                project_dir: &str,
                name: &str,
            ) -> StoreResult<Option<ControllerRecord>> {
                read_controller(self.$conn(), project_dir, name)
            }

            /// The controllers registered in `project_dir` (every project's: `None`), by name.
            pub fn controllers(&self, project_dir: Option<&str>) -> StoreResult<Vec<ControllerRecord>> {
                let mut stmt = self.$conn().prepare_cached(&format!(
                    "SELECT {CONTROLLER_COLUMNS} FROM controllers
                     WHERE ?1 IS NULL OR project_dir = ?1 ORDER BY project_dir, name"
                ))?;
                let rows = stmt.query_map([project_dir], controller_row)?;
                Ok(rows.collect::<Result<_, _>>()?)
            }

            /// A resource by its controller and key.
            pub fn resource(
                &self,
                project_dir: &str,
                controller: &str,
                key: &str,
            ) -> StoreResult<Option<ResourceRecord>> {
                read_resource(self.$conn(), project_dir, controller, key)
            }

            /// A resource by its uid.
            pub fn resource_by_uid(&self, uid: &str) -> StoreResult<Option<ResourceRecord>> {
                read_resource_by_uid(self.$conn(), uid)
            }

            /// The resources of `project_dir` (of one controller, or all), by controller and key.
            pub fn resources(
                &self,
                project_dir: &str,
                controller: Option<&str>,
            ) -> StoreResult<Vec<ResourceRecord>> {
                let mut stmt = self.$conn().prepare_cached(&format!(
                    "SELECT {RESOURCE_COLUMNS} FROM controller_resources
                     WHERE project_dir = ?1 AND (?2 IS NULL OR controller = ?2)
                     ORDER BY controller, resource_key"
                ))?;
                let rows = stmt.query_map(params![project_dir, controller], resource_row)?;
                let mut out = Vec::new();
                for row in rows {
                    out.push(parse_resource(row?)?);
                }
                Ok(out)
            }

            /// A resource's effects, oldest first.
            pub fn controller_effects(&self, uid: &str) -> StoreResult<Vec<ControllerEffectRecord>> {
                read_effects(self.$conn(), uid, None)
            }

            /// A resource's child workflow requests, oldest first.
            pub fn workflow_requests(&self, uid: &str) -> StoreResult<Vec<WorkflowRequestRecord>> {
                read_workflows(self.$conn(), uid, None)
            }

            /// A resource's pass records kept, oldest first.
            pub fn controller_passes(&self, uid: &str) -> StoreResult<Vec<PassRecord>> {
                read_passes(self.$conn(), uid)
            }

            /// A resource's queue row.
            pub fn queue_entry(&self, uid: &str) -> StoreResult<Option<QueueEntry>> {
                read_queue_entry(self.$conn(), uid)
            }

            /// The queue rows of passes running now.
            pub fn running_passes(&self) -> StoreResult<Vec<QueueEntry>> {
                let mut stmt = self.$conn().prepare_cached(&format!(
                    "SELECT {QUEUE_COLUMNS} FROM controller_queue q
                     JOIN controller_resources r ON r.uid = q.resource_uid
                     WHERE q.pass_id IS NOT NULL ORDER BY q.pass_started_at, q.resource_uid"
                ))?;
                let rows = stmt.query_map([], queue_row)?;
                Ok(rows.collect::<Result<_, _>>()?)
            }

            /// Up to `limit` queue rows due at `now` whose controller is enabled and that no
            /// pass holds, the longest due first: the passes that may start.
            pub fn due_resources(&self, now: i64, limit: usize) -> StoreResult<Vec<QueueEntry>> {
                let mut stmt = self.$conn().prepare_cached(&format!(
                    "SELECT {QUEUE_COLUMNS} FROM controller_queue q
                     JOIN controller_resources r ON r.uid = q.resource_uid
                     JOIN controllers c ON c.project_dir = r.project_dir AND c.name = r.controller
                     WHERE q.pass_id IS NULL AND q.due_at <= ?1 AND c.enabled = 1
                     ORDER BY q.due_at, q.resource_uid LIMIT ?2"
                ))?;
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let rows = stmt.query_map(params![now, limit], queue_row)?;
                Ok(rows.collect::<Result<_, _>>()?)
            }

            /// The earliest due time after `after` of a queued pass of an enabled
            /// controller: when the host must look at the queue again (what is due already
            /// waits for a free slot, whose pass's end wakes the host).
            pub fn next_controller_due_after(&self, after: i64) -> StoreResult<Option<i64>> {
                Ok(self.$conn().prepare_cached(
                    "SELECT min(q.due_at) FROM controller_queue q
                     JOIN controller_resources r ON r.uid = q.resource_uid
                     JOIN controllers c ON c.project_dir = r.project_dir AND c.name = r.controller
                     WHERE q.pass_id IS NULL AND c.enabled = 1 AND q.due_at > ?1",
                )?
                .query_row([after], |r| r.get(0))?)
            }
        }
    };
}

impl Store {
    fn read_conn(&self) -> &Connection {
        &self.conn
    }
}

controller_reads!(Store, read_conn);
controller_reads!(WriteTx<'_>, conn);

impl WriteTx<'_> {
    fn require_controller(&self, project_dir: &str, name: &str) -> StoreResult<ControllerRecord> {
        read_controller(self.conn(), project_dir, name)?.ok_or_else(|| {
            refused(ControllerStoreError::ControllerNotFound {
                project_dir: project_dir.to_owned(),
                name: name.to_owned(),
            })
        })
    }

    fn require_resource(
        &self,
        project_dir: &str,
        controller: &str,
        key: &str,
    ) -> StoreResult<ResourceRecord> {
        read_resource(self.conn(), project_dir, controller, key)?.ok_or_else(|| {
            refused(ControllerStoreError::ResourceNotFound {
                project_dir: project_dir.to_owned(),
                controller: controller.to_owned(),
                key: key.to_owned(),
            })
        })
    }

    /// 64 random bits from the store's id source: the jitter of a backoff.
    fn jitter_bits(&self) -> u64 {
        let mut bytes = [0u8; 8];
        let mut ids = self.config.ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.fill(&mut bytes);
        u64::from_le_bytes(bytes)
    }

    /// Registers a controller (a definition discovered in its project), or records its file
    /// again (a new path or hash, a new deadline). Whether it is enabled is kept.
    pub fn register_controller(
        &mut self,
        reg: &ControllerRegistration,
    ) -> StoreResult<ControllerRecord> {
        self.ops.push("controller_register");
        input(check_controller_name(&reg.name))?;
        if reg.pass_deadline_ms <= 0 {
            return Err(StoreError::InvalidInput(format!(
                "a pass deadline must be a positive number of milliseconds, not {}",
                reg.pass_deadline_ms
            )));
        }
        for (what, path) in [
            ("project_dir", &reg.project_dir),
            ("source_path", &reg.source_path),
        ] {
            if !path.starts_with('/') {
                return Err(StoreError::InvalidInput(format!(
                    "a controller's {what} must be an absolute path, not {path:?}"
                )));
            }
        }
        self.conn()
            .prepare_cached(
                "INSERT INTO controllers (project_dir, name, source_path, source_hash, enabled,
                                          pass_deadline_ms, registered_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?6)
                 ON CONFLICT (project_dir, name) DO UPDATE SET
                     source_path = excluded.source_path, source_hash = excluded.source_hash,
                     pass_deadline_ms = excluded.pass_deadline_ms, updated_at = excluded.updated_at",
            )?
            .execute(params![
                reg.project_dir,
                reg.name,
                reg.source_path,
                reg.source_hash,
                reg.pass_deadline_ms,
                self.now
            ])?;
        self.require_controller(&reg.project_dir, &reg.name)
    }

    /// Starts (`true`) or stops a controller's passes. A stopped controller's queue stays; its
    /// running passes are the caller's to stop.
    pub fn set_controller_enabled(
        &mut self,
        project_dir: &str,
        name: &str,
        enabled: bool,
    ) -> StoreResult<ControllerRecord> {
        self.ops.push("controller_enable");
        self.require_controller(project_dir, name)?;
        self.conn()
            .prepare_cached(
                "UPDATE controllers SET enabled = ?3, updated_at = ?4
                 WHERE project_dir = ?1 AND name = ?2",
            )?
            .execute(params![project_dir, name, enabled as i64, self.now])?;
        self.require_controller(project_dir, name)
    }

    /// Stores `spec` under `key`: a new resource (version 1, generation 1, no status yet), or a
    /// new spec for an existing one (both numbers advance; an equal spec changes nothing).
    /// With `expected_version`, a resource at another version is refused
    /// (`ResourceConflict`; a resource that does not exist is at version 0). A change queues
    /// a pass.
    pub fn apply_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        spec: &Value,
        expected_version: Option<u64>,
    ) -> StoreResult<(ApplyOutcome, ResourceRecord)> {
        self.ops.push("resource_apply");
        self.require_controller(project_dir, controller)?;
        input(check_key(key, "resource key"))?;
        let spec_json = bounded_json(spec, "spec")?;
        let current = read_resource(self.conn(), project_dir, controller, key)?;
        let actual = current.as_ref().map_or(0, |r| r.resource_version);
        if let Some(expected) = expected_version.filter(|e| *e != actual) {
            return Err(refused(ControllerStoreError::ResourceConflict {
                controller: controller.to_owned(),
                key: key.to_owned(),
                expected,
                actual,
            }));
        }
        let outcome = match current {
            None => {
                let uid = self.new_id("res");
                self.conn()
                    .prepare_cached(
                        "INSERT INTO controller_resources
                             (uid, project_dir, controller, resource_key, resource_version,
                              generation, finalizers, spec, status, created_at, updated_at)
                         VALUES (?1, ?2, ?3, ?4, 1, 1, '[]', ?5, NULL, ?6, ?6)",
                    )?
                    .execute(params![
                        uid,
                        project_dir,
                        controller,
                        key,
                        spec_json,
                        self.now
                    ])?;
                self.enqueue(&uid, "created")?;
                ApplyOutcome::Created
            }
            Some(r) if canonical_json(&r.spec) == spec_json => ApplyOutcome::Unchanged,
            Some(r) if r.deletion_requested_at.is_some() => {
                return Err(refused(ControllerStoreError::BeingDeleted {
                    controller: controller.to_owned(),
                    key: key.to_owned(),
                }))
            }
            Some(r) => {
                self.conn()
                    .prepare_cached(
                        "UPDATE controller_resources SET spec = ?2,
                             resource_version = resource_version + 1,
                             generation = generation + 1, updated_at = ?3
                         WHERE uid = ?1",
                    )?
                    .execute(params![r.uid, spec_json, self.now])?;
                self.enqueue(&r.uid, "spec changed")?;
                ApplyOutcome::Updated
            }
        };
        Ok((
            outcome,
            self.require_resource(project_dir, controller, key)?,
        ))
    }

    /// Asks for a resource's deletion: without finalizers it goes now, with its records;
    /// otherwise its deletion time is set (once), its version advances and a pass is queued,
    /// and it goes when a settled pass leaves no finalizer.
    pub fn delete_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<DeleteOutcome> {
        self.ops.push("resource_delete");
        let r = self.require_resource(project_dir, controller, key)?;
        if let Some(expected) = expected_version.filter(|e| *e != r.resource_version) {
            return Err(refused(ControllerStoreError::ResourceConflict {
                controller: controller.to_owned(),
                key: key.to_owned(),
                expected,
                actual: r.resource_version,
            }));
        }
        if r.finalizers.is_empty() {
            self.remove_resource(&r.uid)?;
            return Ok(DeleteOutcome::Deleted { uid: r.uid });
        }
        if r.deletion_requested_at.is_none() {
            self.conn()
                .prepare_cached(
                    "UPDATE controller_resources SET deletion_requested_at = ?2,
                         resource_version = resource_version + 1, updated_at = ?2
                     WHERE uid = ?1",
                )?
                .execute(params![r.uid, self.now])?;
        }
        self.enqueue(&r.uid, "deletion requested")?;
        Ok(DeleteOutcome::Pending {
            resource: Box::new(self.require_resource(project_dir, controller, key)?),
        })
    }

    /// Removes a resource and every row of it (queue, effects, workflow requests, passes).
    fn remove_resource(&mut self, uid: &str) -> StoreResult<()> {
        for sql in [
            "DELETE FROM controller_queue WHERE resource_uid = ?1",
            "DELETE FROM controller_effects WHERE resource_uid = ?1",
            "DELETE FROM controller_workflows WHERE resource_uid = ?1",
            "DELETE FROM controller_passes WHERE resource_uid = ?1",
            "DELETE FROM controller_resources WHERE uid = ?1",
        ] {
            self.conn().prepare_cached(sql)?.execute([uid])?;
        }
        Ok(())
    }

    /// Queues a pass of a resource now (`resource.reconcile`, or any event).
    pub fn reconcile_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        reason: &str,
    ) -> StoreResult<QueueEntry> {
        self.ops.push("resource_reconcile");
        let r = self.require_resource(project_dir, controller, key)?;
        self.enqueue(&r.uid, reason)?;
        read_queue_entry(self.conn(), &r.uid)?
            .ok_or_else(|| StoreError::CorruptRow(format!("queue row of {} vanished", r.uid)))
    }

    /// The one enqueue: a resource without a row gets one due now; a queued one becomes due
    /// now (never later than it was); one a pass holds is marked to pass again after it.
    fn enqueue(&mut self, uid: &str, reason: &str) -> StoreResult<()> {
        let reason = bounded_message(reason);
        self.conn()
            .prepare_cached(
                "INSERT INTO controller_queue (resource_uid, due_at, reason)
                 VALUES (?1, ?2, ?3)
                 ON CONFLICT (resource_uid) DO UPDATE SET
                     due_at = CASE WHEN pass_id IS NULL THEN min(due_at, excluded.due_at)
                                   ELSE due_at END,
                     reason = CASE WHEN pass_id IS NULL THEN excluded.reason ELSE reason END,
                     requeue_requested = CASE WHEN pass_id IS NULL THEN 0 ELSE 1 END",
            )?
            .execute(params![uid, self.now, reason])?;
        Ok(())
    }

    /// Queues every resource whose current child workflow run is one of `run_ids` (runs
    /// that just ended, or changed state): their controllers look again. Returns the uids.
    pub fn wake_resources_of_runs(&mut self, run_ids: &[String]) -> StoreResult<Vec<String>> {
        let mut woken = Vec::new();
        for run_id in run_ids {
            let uids: Vec<String> = self
                .conn()
                .prepare_cached(
                    "SELECT resource_uid, request_key FROM controller_workflows WHERE run_id = ?1",
                )?
                .query_map([run_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            for uid in uids {
                self.enqueue(&uid, &format!("child workflow run {run_id} changed"))?;
                woken.push(uid);
            }
        }
        if !woken.is_empty() {
            self.ops.push("resource_wake");
        }
        Ok(woken)
    }

    /// Claims a due resource's queue row for a pass whose child `host_epoch` launches:
    /// a fresh token (its hash stored), the deadline from the controller's registration, the
    /// resource as read now. Refused (`NotReady`) while another pass holds it, before it is
    /// due, or while its controller is disabled.
    pub fn claim_pass(&mut self, resource_uid: &str, host_epoch: i64) -> StoreResult<PassLaunch> {
        self.ops.push("pass_claim");
        let not_ready = |reason| {
            refused(ControllerStoreError::NotReady {
                resource_uid: resource_uid.to_owned(),
                reason,
            })
        };
        let entry =
            read_queue_entry(self.conn(), resource_uid)?.ok_or(not_ready("it is not queued"))?;
        if entry.pass.is_some() {
            return Err(not_ready("another pass holds it"));
        }
        if entry.due_at > self.now {
            return Err(not_ready("it is not due yet"));
        }
        let resource = read_resource_by_uid(self.conn(), resource_uid)?
            .ok_or(not_ready("the resource is gone"))?;
        let controller = self.require_controller(&resource.project_dir, &resource.controller)?;
        if !controller.enabled {
            return Err(not_ready("its controller is disabled"));
        }
        let pass_id = self.new_id("pass");
        let token = self.new_claim_token();
        let deadline_at = self.now.saturating_add(controller.pass_deadline_ms);
        self.conn()
            .prepare_cached(
                "UPDATE controller_queue SET pass_id = ?2, token_hash = ?3, lease_expires_at = ?4,
                     host_epoch = ?5, pass_started_at = ?6, read_version = ?7,
                     requeue_requested = 0
                 WHERE resource_uid = ?1",
            )?
            .execute(params![
                resource_uid,
                pass_id,
                token.hash(),
                deadline_at,
                host_epoch,
                self.now,
                resource.resource_version as i64
            ])?;
        Ok(PassLaunch {
            pass_id,
            token,
            controller,
            resource,
            deadline_at,
        })
    }

    /// The pass's claim, checked: the queue row names this pass and token and its deadline
    /// has not passed. Returns the row. Writes nothing.
    fn fence_pass(&self, fence: &PassFence) -> StoreResult<(QueueEntry, RunningPass)> {
        let lost = |reason| {
            refused(ControllerStoreError::PassLost {
                resource_uid: fence.resource_uid.clone(),
                pass_id: fence.pass_id.clone(),
                reason,
            })
        };
        let row: Option<(Option<String>, Option<String>)> = self
            .conn()
            .prepare_cached(
                "SELECT pass_id, token_hash FROM controller_queue WHERE resource_uid = ?1",
            )?
            .query_row([&fence.resource_uid], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((pass_id, token_hash)) = row else {
            return Err(lost("the resource has no queue row"));
        };
        if pass_id.as_deref() != Some(fence.pass_id.as_str()) {
            return Err(lost("another pass, or none, holds the resource"));
        }
        if token_hash.as_deref() != Some(fence.token.hash().as_str()) {
            return Err(lost("the token does not match"));
        }
        let entry = read_queue_entry(self.conn(), &fence.resource_uid)?
            .ok_or(lost("the resource is gone"))?;
        let pass = entry
            .pass
            .clone()
            .ok_or(lost("no pass holds the resource"))?;
        if pass.lease_expires_at <= self.now {
            return Err(lost("its deadline passed"));
        }
        Ok((entry, pass))
    }

    /// Records an effect as `pending` before it is attempted, or returns the record kept
    /// under its key (`false`: not created now). The same key with another fingerprint,
    /// kind or generation is refused (`EffectConflict`).
    pub fn record_controller_effect(
        &mut self,
        fence: &PassFence,
        effect: &NewControllerEffect,
    ) -> StoreResult<(ControllerEffectRecord, bool)> {
        self.ops.push("controller_effect_record");
        self.fence_pass(fence)?;
        input(check_key(&effect.key, "effect key"))?;
        input(check_effect_kind(&effect.kind))?;
        let uid = &fence.resource_uid;
        if let Some(existing) = read_effects(self.conn(), uid, Some(&effect.key))?.pop() {
            let conflict = if existing.request_fingerprint != effect.request_fingerprint {
                Some("request")
            } else if existing.kind != effect.kind {
                Some("kind")
            } else if existing.generation != effect.generation {
                Some("generation")
            } else {
                None
            };
            if let Some(what) = conflict {
                return Err(refused(ControllerStoreError::EffectConflict {
                    key: effect.key.clone(),
                    what,
                }));
            }
            return Ok((existing, false));
        }
        self.conn()
            .prepare_cached(
                "INSERT INTO controller_effects (resource_uid, effect_key, kind, generation,
                     request_fingerprint, state, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)",
            )?
            .execute(params![
                uid,
                effect.key,
                effect.kind,
                effect.generation as i64,
                effect.request_fingerprint,
                self.now
            ])?;
        let record = read_effects(self.conn(), uid, Some(&effect.key))?
            .pop()
            .ok_or_else(|| StoreError::CorruptRow(format!("effect {} vanished", effect.key)))?;
        Ok((record, true))
    }

    /// The effect kept under `key` for the pass's resource, if any.
    pub fn controller_effect(
        &mut self,
        fence: &PassFence,
        key: &str,
    ) -> StoreResult<Option<ControllerEffectRecord>> {
        self.fence_pass(fence)?;
        Ok(read_effects(self.conn(), &fence.resource_uid, Some(key))?.pop())
    }

    /// Records what became of an effect. Settling a final effect in its own state returns it
    /// unchanged; moving it to another is refused (`EffectFinal`).
    pub fn settle_controller_effect(
        &mut self,
        fence: &PassFence,
        settlement: &EffectSettlement,
    ) -> StoreResult<ControllerEffectRecord> {
        self.ops.push("controller_effect_settle");
        self.fence_pass(fence)?;
        if settlement.state == ControllerEffectState::Pending {
            return Err(StoreError::InvalidInput(
                "an effect settles as applied, rejected or indeterminate, not pending".into(),
            ));
        }
        let uid = &fence.resource_uid;
        let Some(record) = read_effects(self.conn(), uid, Some(&settlement.key))?.pop() else {
            return Err(refused(ControllerStoreError::EffectNotRecorded {
                key: settlement.key.clone(),
            }));
        };
        if record.state.is_final() {
            if record.state == settlement.state {
                return Ok(record);
            }
            return Err(refused(ControllerStoreError::EffectFinal {
                key: settlement.key.clone(),
                state: record.state.as_str(),
                requested: settlement.state.as_str(),
            }));
        }
        let completed_at = settlement.state.is_final().then_some(self.now);
        self.conn()
            .prepare_cached(
                "UPDATE controller_effects SET state = ?3,
                     external_ref = coalesce(?4, external_ref), error = ?5, completed_at = ?6
                 WHERE resource_uid = ?1 AND effect_key = ?2",
            )?
            .execute(params![
                uid,
                settlement.key,
                settlement.state.as_str(),
                settlement.external_ref,
                settlement.error.as_deref().map(bounded_message),
                completed_at
            ])?;
        read_effects(self.conn(), uid, Some(&settlement.key))?
            .pop()
            .ok_or_else(|| StoreError::CorruptRow(format!("effect {} vanished", settlement.key)))
    }

    /// Finds the child workflow request kept under its key, or records it; a new request, or
    /// one whose run was interrupted, gets a new attempt whose run `start` makes in this
    /// transaction (given the request id, the stable idempotency key of its runs, and the
    /// attempt number; it returns the run id). The same key with another workflow or input
    /// is refused (`WorkflowConflict`).
    pub fn ensure_workflow_request(
        &mut self,
        fence: &PassFence,
        request: &WorkflowRequest,
        start: &mut dyn FnMut(&mut WriteTx<'_>, &str, u32) -> StoreResult<String>,
    ) -> StoreResult<WorkflowRequestRecord> {
        self.ops.push("controller_workflow_ensure");
        self.fence_pass(fence)?;
        input(check_key(&request.request_key, "workflow request key"))?;
        input(check_key(&request.workflow, "workflow name"))?;
        let uid = fence.resource_uid.clone();
        let existing = read_workflows(self.conn(), &uid, Some(&request.request_key))?.pop();
        let (request_id, attempt, mut run_ids) = match existing {
            Some(w) => {
                let conflict = if w.workflow != request.workflow {
                    Some("workflow")
                } else if w.input_fingerprint != request.input_fingerprint {
                    Some("input")
                } else {
                    None
                };
                if let Some(what) = conflict {
                    return Err(refused(ControllerStoreError::WorkflowConflict {
                        key: request.request_key.clone(),
                        what,
                    }));
                }
                if w.state != WorkflowRequestState::Interrupted && w.run_id.is_some() {
                    return Ok(w);
                }
                (w.request_id, w.attempt, w.run_ids)
            }
            None => {
                let request_id = self.new_id("wfr");
                self.conn()
                    .prepare_cached(
                        "INSERT INTO controller_workflows (resource_uid, request_key, request_id,
                             workflow, input_fingerprint, attempt, run_id, run_ids, created_at,
                             updated_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, 0, NULL, '[]', ?6, ?6)",
                    )?
                    .execute(params![
                        uid,
                        request.request_key,
                        request_id,
                        request.workflow,
                        request.input_fingerprint,
                        self.now
                    ])?;
                (request_id, 0, Vec::new())
            }
        };
        let attempt = attempt + 1;
        let run_id = start(self, &request_id, attempt)?;
        run_ids.push(run_id.clone());
        self.conn()
            .prepare_cached(
                "UPDATE controller_workflows SET attempt = ?3, run_id = ?4, run_ids = ?5,
                     updated_at = ?6
                 WHERE resource_uid = ?1 AND request_key = ?2",
            )?
            .execute(params![
                uid,
                request.request_key,
                attempt as i64,
                run_id,
                serde_json::to_string(&run_ids)?,
                self.now
            ])?;
        read_workflows(self.conn(), &uid, Some(&request.request_key))?
            .pop()
            .ok_or_else(|| {
                StoreError::CorruptRow(format!("workflow request {request_id} vanished"))
            })
    }

    /// Commits a pass's result in one transaction: the status and finalizers written over the
    /// version the pass read (another version: a conflict, another pass at once; nothing of
    /// the pass written), the resource removed when its deletion was asked for and a settled
    /// pass left no finalizer, the queue row (`queue_after_pass`), the pass record.
    pub fn finish_pass(
        &mut self,
        fence: &PassFence,
        result: &PassResult,
    ) -> StoreResult<PassFinished> {
        self.ops.push("pass_finish");
        let (entry, pass) = self.fence_pass(fence)?;
        let uid = fence.resource_uid.clone();
        let resource = read_resource_by_uid(self.conn(), &uid)?
            .ok_or_else(|| StoreError::CorruptRow(format!("resource {uid} vanished")))?;
        let mut outcome = match result.kind {
            PassResultKind::Settled => PassOutcome::Settled,
            PassResultKind::Requeue => PassOutcome::Requeue,
            PassResultKind::Error => PassOutcome::Error,
            PassResultKind::Deadline => PassOutcome::Deadline,
        };
        let mut deleted = false;
        if matches!(outcome, PassOutcome::Settled | PassOutcome::Requeue) {
            if let Some(after) = result.after_ms.filter(|ms| *ms <= 0) {
                return Err(StoreError::InvalidInput(format!(
                    "a requeue's after_ms must be a positive number of milliseconds, not {after}"
                )));
            }
            let Some(status) = &result.status else {
                return Err(StoreError::InvalidInput(
                    "a settled or requeued pass carries its status".into(),
                ));
            };
            let status_json = bounded_json(status, "status")?;
            if let Some(f) = &result.finalizers {
                input(check_finalizers(f))?;
            }
            if resource.resource_version != pass.read_version {
                outcome = PassOutcome::Conflict;
            } else {
                let finalizers = result.finalizers.as_ref().unwrap_or(&resource.finalizers);
                let same_status = resource.status.as_ref().map(canonical_json).as_deref()
                    == Some(status_json.as_str());
                if !same_status || *finalizers != resource.finalizers {
                    self.conn()
                        .prepare_cached(
                            "UPDATE controller_resources SET status = ?2, finalizers = ?3,
                                 resource_version = resource_version + 1, updated_at = ?4
                             WHERE uid = ?1",
                        )?
                        .execute(params![
                            uid,
                            status_json,
                            serde_json::to_string(finalizers)?,
                            self.now
                        ])?;
                }
                deleted = outcome == PassOutcome::Settled
                    && resource.deletion_requested_at.is_some()
                    && finalizers.is_empty();
            }
        }
        let message = match outcome {
            PassOutcome::Error => Some(bounded_message(
                result.message.as_deref().unwrap_or("the pass failed"),
            )),
            _ => None,
        };
        if deleted {
            self.remove_resource(&uid)?;
            return Ok(PassFinished {
                outcome,
                resource: None,
                next_due_at: None,
            });
        }
        let next = queue_after_pass(
            outcome,
            result.after_ms,
            self.now,
            entry.consecutive_errors,
            pass.requeue_requested,
            self.jitter_bits(),
        );
        self.close_pass(&entry, &pass, &resource, outcome, &next, message)?;
        Ok(PassFinished {
            outcome,
            resource: read_resource_by_uid(self.conn(), &uid)?,
            next_due_at: next.due_at,
        })
    }

    /// Ends a pass whose child reported no result: past its deadline (killed), its child
    /// failed, or the host stopped under it (`Interrupted`: no error counted). Does nothing
    /// (`None`) when `pass_id` no longer holds the resource.
    pub fn end_pass(
        &mut self,
        resource_uid: &str,
        pass_id: &str,
        end: &PassEnd,
    ) -> StoreResult<Option<PassFinished>> {
        self.ops.push("pass_end");
        let Some(entry) = read_queue_entry(self.conn(), resource_uid)? else {
            return Ok(None);
        };
        let Some(pass) = entry.pass.clone().filter(|p| p.pass_id == pass_id) else {
            return Ok(None);
        };
        let resource = read_resource_by_uid(self.conn(), resource_uid)?
            .ok_or_else(|| StoreError::CorruptRow(format!("resource {resource_uid} vanished")))?;
        let (outcome, message) = match end {
            PassEnd::Deadline => (
                PassOutcome::Deadline,
                Some(format!(
                    "the pass ran past its deadline ({} ms) and was killed",
                    pass.lease_expires_at - pass.started_at
                )),
            ),
            PassEnd::ChildFailed { message } => {
                (PassOutcome::Error, Some(bounded_message(message)))
            }
            PassEnd::Interrupted => (PassOutcome::Interrupted, None),
        };
        let next = queue_after_pass(
            outcome,
            None,
            self.now,
            entry.consecutive_errors,
            pass.requeue_requested,
            self.jitter_bits(),
        );
        self.close_pass(&entry, &pass, &resource, outcome, &next, message)?;
        Ok(Some(PassFinished {
            outcome,
            resource: Some(resource),
            next_due_at: next.due_at,
        }))
    }

    /// Every pass a host of an epoch before `current_epoch` launched (its child died with
    /// it): released and due now, recorded `interrupted`, no error counted. Returns the uids.
    pub fn requeue_passes_of_dead_hosts(&mut self, current_epoch: i64) -> StoreResult<Vec<String>> {
        let stale: Vec<(String, String)> = self
            .conn()
            .prepare_cached(
                "SELECT resource_uid, pass_id FROM controller_queue
                 WHERE pass_id IS NOT NULL AND host_epoch != ?1",
            )?
            .query_map([current_epoch], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for (uid, pass_id) in stale {
            if self
                .end_pass(&uid, &pass_id, &PassEnd::Interrupted)?
                .is_some()
            {
                out.push(uid);
            }
        }
        if !out.is_empty() {
            self.ops.push("pass_requeue_after_restart");
        }
        Ok(out)
    }

    /// The common end of a pass: the queue row as `next` says, the pass record (the oldest
    /// beyond `PASSES_KEPT_PER_RESOURCE` dropped).
    fn close_pass(
        &mut self,
        entry: &QueueEntry,
        pass: &RunningPass,
        resource: &ResourceRecord,
        outcome: PassOutcome,
        next: &QueueAfter,
        message: Option<String>,
    ) -> StoreResult<()> {
        let uid = &entry.resource_uid;
        match next.due_at {
            None => {
                self.conn()
                    .prepare_cached("DELETE FROM controller_queue WHERE resource_uid = ?1")?
                    .execute([uid])?;
            }
            Some(due_at) => {
                self.conn()
                    .prepare_cached(
                        "UPDATE controller_queue SET due_at = ?2, reason = ?3,
                             consecutive_errors = ?4, pass_id = NULL, token_hash = NULL,
                             lease_expires_at = NULL, host_epoch = NULL, pass_started_at = NULL,
                             read_version = NULL, requeue_requested = 0
                         WHERE resource_uid = ?1",
                    )?
                    .execute(params![
                        uid,
                        due_at,
                        next.reason,
                        next.consecutive_errors as i64
                    ])?;
            }
        }
        self.conn()
            .prepare_cached(
                "INSERT INTO controller_passes (pass_id, resource_uid, project_dir, controller,
                     resource_key, generation, outcome, started_at, duration_ms, requeue_reason,
                     message)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                pass.pass_id,
                uid,
                resource.project_dir,
                resource.controller,
                resource.key,
                resource.generation as i64,
                outcome.as_str(),
                pass.started_at,
                (self.now - pass.started_at).max(0),
                next.due_at.map(|_| next.reason.clone()),
                message
            ])?;
        self.conn()
            .prepare_cached(
                "DELETE FROM controller_passes WHERE resource_uid = ?1 AND pass_id NOT IN
                     (SELECT pass_id FROM controller_passes WHERE resource_uid = ?1
                      ORDER BY started_at DESC, rowid DESC LIMIT ?2)",
            )?
            .execute(params![uid, PASSES_KEPT_PER_RESOURCE])?;
        Ok(())
    }
}

/// `diagnose`'s checks of the controllers' tables: (code, SQL returning (run id: empty, the
/// ids involved, what is wrong)). None is repairable: the queue can be rebuilt by a
/// `resource.reconcile` of each resource, which a person decides.
pub(super) const DIAGNOSE_CHECKS: &[(&str, &str)] = &[
    (
        "controller_pass_without_live_host",
        "SELECT '', q.resource_uid || ',' || q.pass_id,
                'a pass holds the queue row of resource ' || q.resource_uid
                || ' but the host that launched its child (epoch ' || q.host_epoch
                || ') has stopped'
         FROM controller_queue q LEFT JOIN host_epochs h ON h.epoch = q.host_epoch
         WHERE q.pass_id IS NOT NULL
           AND (h.epoch IS NULL OR h.stopped_at IS NOT NULL
                OR h.epoch != (SELECT max(epoch) FROM host_epochs))",
    ),
    (
        "controller_row_without_resource",
        "SELECT '', group_concat(id), count(*) || ' ' || what || ' of resource ' || uid
                || ', which does not exist'
         FROM (SELECT resource_uid AS uid, effect_key AS id, 'effect(s)' AS what
               FROM controller_effects
               UNION ALL SELECT resource_uid, request_key, 'workflow request(s)'
               FROM controller_workflows
               UNION ALL SELECT resource_uid, resource_uid, 'queue row(s)' FROM controller_queue
               UNION ALL SELECT resource_uid, pass_id, 'pass record(s)' FROM controller_passes) o
         WHERE NOT EXISTS (SELECT 1 FROM controller_resources r WHERE r.uid = o.uid)
         GROUP BY uid, what",
    ),
    (
        "resource_without_controller",
        "SELECT '', r.uid, 'resource ' || r.controller || '/' || r.resource_key
                || ' names a controller not registered in ' || r.project_dir
         FROM controller_resources r LEFT JOIN controllers c
              ON c.project_dir = r.project_dir AND c.name = r.controller
         WHERE c.name IS NULL",
    ),
    (
        "resource_version_behind_generation",
        "SELECT '', uid, 'resource ' || controller || '/' || resource_key || ' is at version '
                || resource_version || ' but generation ' || generation
                || ': every new spec advances both'
         FROM controller_resources WHERE resource_version < generation",
    ),
    (
        "controller_value_invalid",
        "SELECT '', uid, 'resource ' || controller || '/' || resource_key
                || ' holds a spec, status or finalizers that are not JSON of their shape'
         FROM controller_resources
         WHERE NOT json_valid(spec) OR (status IS NOT NULL AND NOT json_valid(status))
            OR NOT json_valid(finalizers) OR json_type(finalizers) != 'array'",
    ),
];

impl piw_engine::store::ControllerStorage for Store {
    fn controller(&self, project_dir: &str, name: &str) -> StoreResult<Option<ControllerRecord>> {
        Store::controller(self, project_dir, name)
    }
    fn resource(
        &self,
        project_dir: &str,
        controller: &str,
        key: &str,
    ) -> StoreResult<Option<ResourceRecord>> {
        Store::resource(self, project_dir, controller, key)
    }
    fn resources(
        &self,
        project_dir: &str,
        controller: Option<&str>,
    ) -> StoreResult<Vec<ResourceRecord>> {
        Store::resources(self, project_dir, controller)
    }
    fn queue_entry(&self, uid: &str) -> StoreResult<Option<QueueEntry>> {
        Store::queue_entry(self, uid)
    }
    fn controller_effects(&self, uid: &str) -> StoreResult<Vec<ControllerEffectRecord>> {
        Store::controller_effects(self, uid)
    }
    fn controller_passes(&self, uid: &str) -> StoreResult<Vec<PassRecord>> {
        Store::controller_passes(self, uid)
    }
    fn running_passes(&self) -> StoreResult<Vec<QueueEntry>> {
        Store::running_passes(self)
    }
    fn due_resources(&self, now: i64, limit: usize) -> StoreResult<Vec<QueueEntry>> {
        Store::due_resources(self, now, limit)
    }
    fn next_controller_due_after(&self, after: i64) -> StoreResult<Option<i64>> {
        Store::next_controller_due_after(self, after)
    }
}

impl piw_engine::store::ControllerTransaction for WriteTx<'_> {
    fn register_controller(
        &mut self,
        reg: &ControllerRegistration,
    ) -> StoreResult<ControllerRecord> {
        WriteTx::register_controller(self, reg)
    }
    fn set_controller_enabled(
        &mut self,
        project_dir: &str,
        name: &str,
        enabled: bool,
    ) -> StoreResult<ControllerRecord> {
        WriteTx::set_controller_enabled(self, project_dir, name, enabled)
    }
    fn apply_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        spec: &Value,
        expected_version: Option<u64>,
    ) -> StoreResult<(ApplyOutcome, ResourceRecord)> {
        WriteTx::apply_resource(self, project_dir, controller, key, spec, expected_version)
    }
    fn delete_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<DeleteOutcome> {
        WriteTx::delete_resource(self, project_dir, controller, key, expected_version)
    }
    fn reconcile_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        reason: &str,
    ) -> StoreResult<QueueEntry> {
        WriteTx::reconcile_resource(self, project_dir, controller, key, reason)
    }
    fn claim_pass(&mut self, resource_uid: &str, host_epoch: i64) -> StoreResult<PassLaunch> {
        WriteTx::claim_pass(self, resource_uid, host_epoch)
    }
    fn record_controller_effect(
        &mut self,
        fence: &PassFence,
        effect: &NewControllerEffect,
    ) -> StoreResult<(ControllerEffectRecord, bool)> {
        WriteTx::record_controller_effect(self, fence, effect)
    }
    fn controller_effect(
        &mut self,
        fence: &PassFence,
        key: &str,
    ) -> StoreResult<Option<ControllerEffectRecord>> {
        WriteTx::controller_effect(self, fence, key)
    }
    fn settle_controller_effect(
        &mut self,
        fence: &PassFence,
        settlement: &EffectSettlement,
    ) -> StoreResult<ControllerEffectRecord> {
        WriteTx::settle_controller_effect(self, fence, settlement)
    }
    fn finish_pass(&mut self, fence: &PassFence, result: &PassResult) -> StoreResult<PassFinished> {
        WriteTx::finish_pass(self, fence, result)
    }
    fn ensure_workflow_run(
        &mut self,
        fence: &PassFence,
        request: &WorkflowRequest,
        new_run: Option<&super::NewRun>,
    ) -> StoreResult<WorkflowRequestRecord> {
        WriteTx::ensure_workflow_request(self, fence, request, &mut |w, _, _| match new_run {
            Some(run) => w.start_run(run),
            None => Err(StoreError::InvalidInput(
                "the workflow file was not read; a new run cannot start".into(),
            )),
        })
    }
    fn end_pass(
        &mut self,
        resource_uid: &str,
        pass_id: &str,
        end: &PassEnd,
    ) -> StoreResult<Option<PassFinished>> {
        WriteTx::end_pass(self, resource_uid, pass_id, end)
    }
    fn requeue_passes_of_dead_hosts(&mut self, current_epoch: i64) -> StoreResult<Vec<String>> {
        WriteTx::requeue_passes_of_dead_hosts(self, current_epoch)
    }
    fn wake_resources_of_runs(&mut self, run_ids: &[String]) -> StoreResult<Vec<String>> {
        WriteTx::wake_resources_of_runs(self, run_ids)
    }
}
