//! Controllers' part of the store as the engine calls it: [`ControllerStorage`] (reads) and
//! [`ControllerTransaction`] (changes, inside a write transaction), supertraits of
//! [`super::Storage`] and [`super::Transaction`]. `piw_host::store::controllers` implements
//! them; each method is the `Store` or `WriteTx` method of its name.

use serde_json::Value;

use super::controllers::*;
use super::StoreResult;
use crate::time::UnixMillis;

/// Reads of controllers' rows.
pub trait ControllerStorage {
    /// A registered controller.
    fn controller(&self, project_dir: &str, name: &str) -> StoreResult<Option<ControllerRecord>>;
    /// A resource by its controller and key.
    fn resource(
        &self,
        project_dir: &str,
        controller: &str,
        key: &str,
    ) -> StoreResult<Option<ResourceRecord>>;
    /// The resources of a project (of one controller, or all), by controller and key.
    fn resources(
        &self,
        project_dir: &str,
        controller: Option<&str>,
    ) -> StoreResult<Vec<ResourceRecord>>;
    /// A resource's queue row.
    fn queue_entry(&self, uid: &str) -> StoreResult<Option<QueueEntry>>;
    /// A resource's effects, oldest first.
    fn controller_effects(&self, uid: &str) -> StoreResult<Vec<ControllerEffectRecord>>;
    /// A resource's pass records kept, oldest first.
    fn controller_passes(&self, uid: &str) -> StoreResult<Vec<PassRecord>>;
    /// The queue rows of passes running now.
    fn running_passes(&self) -> StoreResult<Vec<QueueEntry>>;
    /// Up to `limit` rows due at `now`, of enabled controllers, no pass holding them.
    fn due_resources(&self, now: UnixMillis, limit: usize) -> StoreResult<Vec<QueueEntry>>;
    /// The earliest due time after `after` of a queued pass of an enabled controller.
    fn next_controller_due_after(&self, after: UnixMillis) -> StoreResult<Option<UnixMillis>>;
}

/// Changes of controllers' rows, each atomic inside the transaction.
pub trait ControllerTransaction {
    fn register_controller(
        &mut self,
        reg: &ControllerRegistration,
    ) -> StoreResult<ControllerRecord>;
    fn set_controller_enabled(
        &mut self,
        project_dir: &str,
        name: &str,
        enabled: bool,
    ) -> StoreResult<ControllerRecord>;
    fn apply_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        spec: &Value,
        expected_version: Option<u64>,
    ) -> StoreResult<(ApplyOutcome, ResourceRecord)>;
    fn delete_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        expected_version: Option<u64>,
    ) -> StoreResult<DeleteOutcome>;
    fn reconcile_resource(
        &mut self,
        project_dir: &str,
        controller: &str,
        key: &str,
        reason: &str,
    ) -> StoreResult<QueueEntry>;
    fn claim_pass(&mut self, resource_uid: &str, host_epoch: i64) -> StoreResult<PassLaunch>;
    fn record_controller_effect(
        &mut self,
        fence: &PassFence,
        effect: &NewControllerEffect,
    ) -> StoreResult<(ControllerEffectRecord, bool)>;
    fn controller_effect(
        &mut self,
        fence: &PassFence,
        key: &str,
    ) -> StoreResult<Option<ControllerEffectRecord>>;
    fn settle_controller_effect(
        &mut self,
        fence: &PassFence,
        settlement: &EffectSettlement,
    ) -> StoreResult<ControllerEffectRecord>;
    /// `ensure_workflow_request`, whose new attempt (if one is needed) starts `new_run`;
    /// without one (its file could not be read), a new attempt is refused.
    fn ensure_workflow_run(
        &mut self,
        fence: &PassFence,
        request: &WorkflowRequest,
        new_run: Option<&super::NewRun>,
    ) -> StoreResult<WorkflowRequestRecord>;
    fn finish_pass(&mut self, fence: &PassFence, result: &PassResult) -> StoreResult<PassFinished>;
    fn end_pass(
        &mut self,
        resource_uid: &str,
        pass_id: &str,
        end: &PassEnd,
    ) -> StoreResult<Option<PassFinished>>;
    fn requeue_passes_of_dead_hosts(&mut self, current_epoch: i64) -> StoreResult<Vec<String>>;
    fn wake_resources_of_runs(&mut self, run_ids: &[String]) -> StoreResult<Vec<String>>;
}
