//! The controller kinds: a client's (registration, resources) and a pass child's (effects, the
//! pass's result), each one store operation. A pass child's requests carry its credentials,
//! which the store checks against the resource's queue row (the pass's claim) in the same
//! transaction as the change.

use serde_json::Value;

use crate::ids::ClaimToken;
use crate::protocol::controllers::reply::*;
use crate::protocol::controllers::{self as wire, PassCredentials};
use crate::store::controllers::*;
use crate::store::{Storage, StoreError, Transaction};

fn fence(pass: &PassCredentials) -> PassFence {
    PassFence {
        resource_uid: pass.resource_uid.clone(),
        pass_id: pass.pass_id.clone(),
        token: ClaimToken::from_secret(pass.token.clone()),
    }
}

/// `controller.register`.
pub(crate) fn register(
    w: &mut dyn Transaction,
    r: &wire::ControllerRegister,
) -> Result<ControllerReply, StoreError> {
    let controller = w.register_controller(&ControllerRegistration {
        project_dir: r.project_dir.clone(),
        name: r.name.clone(),
        source_path: r.source_path.clone(),
        source_hash: r.source_hash.clone(),
        pass_deadline_ms: r.pass_deadline_ms.unwrap_or(DEFAULT_PASS_DEADLINE_MS),
    })?;
    Ok(ControllerReply { controller })
}

/// `controller.enable` (`true`) and `controller.disable`.
pub(crate) fn set_enabled(
    w: &mut dyn Transaction,
    c: &wire::ControllerName,
    enabled: bool,
) -> Result<ControllerReply, StoreError> {
    let controller = w.set_controller_enabled(&c.project_dir, &c.name, enabled)?;
    Ok(ControllerReply { controller })
}

/// `resource.apply`.
pub(crate) fn apply(
    w: &mut dyn Transaction,
    a: &wire::ResourceApply,
) -> Result<ResourceApplied, StoreError> {
    let (outcome, resource) = w.apply_resource(
        &a.project_dir,
        &a.controller,
        &a.key,
        &a.spec,
        a.expected_resource_version,
    )?;
    Ok(ResourceApplied { outcome, resource })
}

fn not_found(r: &wire::ResourceRef) -> StoreError {
    StoreError::Controller(ControllerStoreError::ResourceNotFound {
        project_dir: r.project_dir.clone(),
        controller: r.controller.clone(),
        key: r.key.clone(),
    })
}

/// `resource.get`.
pub(crate) fn get(store: &dyn Storage, r: &wire::ResourceRef) -> Result<ResourceReply, StoreError> {
    let resource = store
        .resource(&r.project_dir, &r.controller, &r.key)?
        .ok_or_else(|| not_found(r))?;
    Ok(ResourceReply {
        queue: store.queue_entry(&resource.uid)?,
        effects: store.controller_effects(&resource.uid)?,
        passes: store.controller_passes(&resource.uid)?,
        resource,
    })
}

/// `resource.list`.
pub(crate) fn list(
    store: &dyn Storage,
    l: &wire::ResourceList,
) -> Result<ResourcesListed, StoreError> {
    let resources = store
        .resources(&l.project_dir, l.controller.as_deref())?
        .into_iter()
        .map(|r| ResourceSummary {
            observed_generation: r
                .status
                .as_ref()
                .and_then(|s| s.get("observedGeneration"))
                .and_then(Value::as_u64),
            uid: r.uid,
            controller: r.controller,
            key: r.key,
            resource_version: r.resource_version,
            generation: r.generation,
            deletion_requested_at: r.deletion_requested_at,
            finalizers: r.finalizers,
            updated_at: r.updated_at,
        })
        .collect();
    Ok(ResourcesListed { resources })
}

/// `resource.delete`.
pub(crate) fn delete(
    w: &mut dyn Transaction,
    r: &wire::ResourceRef,
) -> Result<ResourceDeleted, StoreError> {
    w.delete_resource(
        &r.project_dir,
        &r.controller,
        &r.key,
        r.expected_resource_version,
    )
}

/// `resource.reconcile`.
pub(crate) fn reconcile(
    w: &mut dyn Transaction,
    r: &wire::ResourceRef,
) -> Result<ResourceQueued, StoreError> {
    let queue = w.reconcile_resource(&r.project_dir, &r.controller, &r.key, "asked for")?;
    Ok(ResourceQueued { queue })
}

/// `controller.effect.record`.
pub(crate) fn effect_record(
    w: &mut dyn Transaction,
    e: &wire::ControllerEffectRecord,
) -> Result<EffectRecorded, StoreError> {
    let (record, created) = w.record_controller_effect(
        &fence(&e.pass),
        &NewControllerEffect {
            key: e.key.clone(),
            kind: e.kind.clone(),
            generation: e.generation,
            request_fingerprint: e.request_fingerprint.clone(),
        },
    )?;
    Ok(EffectRecorded { record, created })
}

/// `controller.effect.get`.
pub(crate) fn effect_get(
    w: &mut dyn Transaction,
    e: &wire::ControllerEffectGet,
) -> Result<EffectReply, StoreError> {
    let record = w.controller_effect(&fence(&e.pass), &e.key)?;
    Ok(EffectReply { record })
}

/// `controller.effect.settle`.
pub(crate) fn effect_settle(
    w: &mut dyn Transaction,
    e: &wire::ControllerEffectSettle,
) -> Result<EffectReply, StoreError> {
    let record = w.settle_controller_effect(
        &fence(&e.pass),
        &EffectSettlement {
            key: e.key.clone(),
            state: e.state,
            external_ref: e.external_ref.clone(),
            error: e.error.clone(),
        },
    )?;
    Ok(EffectReply {
        record: Some(record),
    })
}

/// `controller.workflow.ensure`: a new attempt starts the run the connection prepared (the
/// workflow file read and hashed, a detached run of the project).
pub(crate) fn workflow_ensure(
    w: &mut dyn Transaction,
    e: &wire::ControllerWorkflowEnsure,
    start: Option<&crate::handlers::run::PreparedStart>,
) -> Result<WorkflowEnsured, StoreError> {
    let request = w.ensure_workflow_run(
        &fence(&e.pass),
        &WorkflowRequest {
            request_key: e.request_key.clone(),
            workflow: e.workflow.clone(),
            input_fingerprint: e.input_fingerprint.clone(),
        },
        start.map(|s| &s.new_run),
    )?;
    Ok(WorkflowEnsured { request })
}

/// `controller.pass.finish`.
pub(crate) fn pass_finish(
    w: &mut dyn Transaction,
    f: &wire::ControllerPassFinish,
) -> Result<PassFinishedReply, StoreError> {
    w.finish_pass(
        &fence(&f.pass),
        &PassResult {
            kind: f.kind,
            after_ms: f.after_ms,
            message: f.message.clone(),
            status: f.status.clone(),
            finalizers: f.finalizers.clone(),
        },
    )
}
