//! Request kinds: the `kind` string of the envelope and the typed body it selects.
//!
//! The list of kinds is written once, in the `request_kinds!` invocation below; the macro
//! derives [`RequestKind`], [`RequestBody`] and the conversions between them and the wire, so
//! adding a kind cannot leave one of those out of step.

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::payload::*;

/// Envelope fields a kind requires besides `schema`, `request_id` and `kind`.
///
/// A request that lacks one of them is `malformed`. Fields not required may still be sent; the
/// host uses them where they apply (for example `expected_revision`) and ignores them otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequiredFields {
    /// `run_id` must be present.
    pub run_id: bool,
    /// `node_id` must be present.
    pub node_id: bool,
    /// `attempt_id` must be present.
    pub attempt_id: bool,
    /// `generation` must be present.
    pub generation: bool,
}

impl RequiredFields {
    const NONE: RequiredFields = RequiredFields {
        run_id: false,
        node_id: false,
        attempt_id: false,
        generation: false,
    };
    const RUN: RequiredFields = RequiredFields {
        run_id: true,
        ..RequiredFields::NONE
    };
    const RUN_NODE_ATTEMPT: RequiredFields = RequiredFields {
        run_id: true,
        node_id: true,
        attempt_id: true,
        generation: false,
    };
    const WORKER: RequiredFields = RequiredFields {
        run_id: true,
        generation: true,
        ..RequiredFields::NONE
    };
    const WORKER_NODE: RequiredFields = RequiredFields {
        node_id: true,
        ..RequiredFields::WORKER
    };
    const WORKER_ATTEMPT: RequiredFields = RequiredFields {
        node_id: true,
        attempt_id: true,
        ..RequiredFields::WORKER
    };

    /// The names of the required fields, in envelope order.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.run_id, "run_id"),
            (self.node_id, "node_id"),
            (self.attempt_id, "attempt_id"),
            (self.generation, "generation"),
        ]
        .into_iter()
        .filter_map(|(required, name)| required.then_some(name))
        .collect()
    }
}

/// How the host handles a request kind: the path it takes from the connection to the store.
///
/// Declared once per kind, in the kind table below; the host's connection task and store thread
/// branch on it, so a new kind is a row of the table and a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// Answered by the connection task itself, which may ask the store thread for a read
    /// (`host.status`, `host.stop`, `subscribe`, `unsubscribe`).
    Connection,
    /// Answered from committed state; writes nothing.
    Read,
    /// A client's durable command: committed in the batch transaction together with its
    /// receipt, so a repeated request id replays the first answer.
    Command,
    /// A write in a transaction of its own, without a receipt (`repair`: run again, it repairs
    /// what is left to repair; `run.prune`: run again, it removes what is left to remove).
    Maintenance,
    /// A workflow child's message, on a connection that said `worker.hello` for its run and
    /// generation: a durable command with its receipt, committed in a savepoint of its own.
    Worker,
}

impl RequestClass {
    /// Whether requests of this class are committed in the batch transaction with a stored
    /// receipt (and so need their receipt identity, `CommandMeta`).
    pub fn is_durable_command(self) -> bool {
        matches!(self, RequestClass::Command | RequestClass::Worker)
    }
}

/// Defines `RequestKind` and `RequestBody` from one list of
/// `Variant = "wire.kind" [=> PayloadType], required_fields, class;`.
macro_rules! request_kinds {
    (
        $(
            $(#[$attr:meta])*
            $variant:ident = $wire:literal $(=> $payload:ty)?, $required:ident, $class:ident;
        )*
    ) => {
        /// The `kind` of a request: which operation it asks for.
        ///
        /// Kinds starting with `worker.` are sent by a workflow child; the others by clients
        /// (the Pi extension, the CLI, tests).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum RequestKind {
            $( $(#[$attr])* $variant, )*
        }

        impl RequestKind {
            /// Every kind, client kinds first, in the order of the protocol documentation.
            pub const ALL: &'static [RequestKind] = &[ $( RequestKind::$variant, )* ];

            /// The wire string, e.g. `"run.start"`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( RequestKind::$variant => $wire, )*
                }
            }

            /// The kind whose wire string is `s`, if any.
            pub fn parse(s: &str) -> Option<RequestKind> {
                match s {
                    $( $wire => Some(RequestKind::$variant), )*
                    _ => None,
                }
            }

            /// The envelope fields this kind requires.
            pub fn required_fields(self) -> RequiredFields {
                match self {
                    $( RequestKind::$variant => RequiredFields::$required, )*
                }
            }

            /// How the host handles this kind.
            pub fn class(self) -> RequestClass {
                match self {
                    $( RequestKind::$variant => RequestClass::$class, )*
                }
            }

            /// Whether the kind carries a payload. Kinds without one ignore the `payload` field.
            pub fn has_payload(self) -> bool {
                match self {
                    $( RequestKind::$variant => request_kinds!(@has_payload $($payload)?), )*
                }
            }

            /// Decodes the payload of this kind. `null` counts as an empty object, so kinds
            /// whose fields are all optional accept a missing payload.
            pub(crate) fn decode_body(self, payload: Value) -> Result<RequestBody, serde_json::Error> {
                let payload = match payload {
                    Value::Null => Value::Object(serde_json::Map::new()),
                    other => other,
                };
                Ok(match self {
                    $( RequestKind::$variant => request_kinds!(@decode $variant, payload $(, $payload)?), )*
                })
            }
        }

        /// The typed body of a request: its kind together with its decoded payload.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum RequestBody {
            $( $(#[$attr])* $variant $( ($payload) )?, )*
        }

        impl RequestBody {
            /// The kind of this body.
            pub fn kind(&self) -> RequestKind {
                match self {
                    $( RequestBody::$variant { .. } => RequestKind::$variant, )*
                }
            }

            /// Writes the payload as the envelope's `payload` value (`null` for kinds without
            /// one).
            pub(crate) fn serialize_payload<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( RequestBody::$variant $( (request_kinds!(@bind inner $payload)) )? =>
                        request_kinds!(@serialize serializer, inner $(, $payload)?), )*
                }
            }
        }
    };

    (@has_payload $payload:ty) => { true };
    (@has_payload) => { false };
    (@decode $variant:ident, $value:ident, $payload:ty) => {
        RequestBody::$variant(serde_json::from_value::<$payload>($value)?)
    };
    (@decode $variant:ident, $value:ident) => {{
        // Kinds without a payload ignore whatever was sent, for forward compatibility.
        drop($value);
        RequestBody::$variant
    }};
    (@bind $name:ident $payload:ty) => { $name };
    (@serialize $serializer:ident, $inner:ident, $payload:ty) => { $inner.serialize($serializer) };
    (@serialize $serializer:ident, $inner:ident) => { $serializer.serialize_unit() };
}

request_kinds! {
    /// Host health and identity. Client.
    HostStatus = "host.status", NONE, Connection;
    /// Ask the host to stop after in-flight commands. Client.
    HostStop = "host.stop", NONE, Connection;
    /// Read the decision channels' configuration again (`$PIW_HOME/channels`). Client.
    ChannelReload = "channel.reload", NONE, Connection;
    /// Start a new run. Client.
    RunStart = "run.start" => RunStart, NONE, Command;
    /// Status of one run. Client.
    RunStatus = "run.status" => RunStatusQuery, RUN, Read;
    /// List runs. Client.
    RunList = "run.list" => RunList, NONE, Read;
    /// Pause a run at its next durable boundary. Client.
    RunPause = "run.pause", RUN, Command;
    /// Resume a paused run. Client.
    RunResume = "run.resume", RUN, Command;
    /// Cancel a run. Client.
    RunCancel = "run.cancel" => RunCancel, RUN, Command;
    /// Detach an interactive run: its steps go to host-launched Pi bridges from now on. Client.
    RunDetach = "run.detach", RUN, Command;
    /// Run the current node of a run in review again (a person's way out). Client.
    RunRetry = "run.retry" => RunRetry, RUN, Command;
    /// Record what became of an uncertain effect of a run in review. Client.
    EffectResolve = "effect.resolve" => EffectResolve, RUN, Command;
    /// Answer an ordinary checkpoint (the model-facing path). Client.
    CheckpointAnswer = "checkpoint.answer" => DecisionAnswer, RUN, Command;
    /// Answer a protected human decision (a person in the origin session). Client.
    DecisionAnswer = "decision.answer" => DecisionAnswer, RUN, Command;
    /// List pending interactive requests of a Pi session. Client.
    InteractionList = "interaction.list" => InteractionList, NONE, Read;
    /// Submit a provisional result for an interactive request. Client.
    InteractionSubmit = "interaction.submit" => InteractionSubmit, RUN_NODE_ATTEMPT, Command;
    /// Fail the attempt of a pending interactive request the session gave up on. Client.
    InteractionFail = "interaction.fail" => InteractionFail, RUN_NODE_ATTEMPT, Command;
    /// A progress update from the agent working on a pending interactive request. Client.
    InteractionUpdate = "interaction.update" => InteractionUpdate, RUN_NODE_ATTEMPT, Command;
    /// A chunk of a large value a submission to a pending interactive request will refer to. Client.
    InteractionValuePut = "interaction.value_put" => InteractionValuePut, RUN_NODE_ATTEMPT, Command;
    /// Claim undelivered workflow messages of a Pi session. Client.
    MessageClaim = "message.claim" => MessageClaim, NONE, Command;
    /// Acknowledge delivery of a claimed workflow message. Client.
    MessageAck = "message.ack" => MessageAck, NONE, Command;
    /// Receive events of a run or a session on this connection. Client.
    Subscribe = "subscribe" => Subscribe, NONE, Connection;
    /// End a subscription. Client.
    Unsubscribe = "unsubscribe" => Unsubscribe, NONE, Connection;
    /// A piece of a large value a run holds. Client (and worker).
    ValueGet = "value.get" => ValueGet, RUN, Read;
    /// List contradictory durable state (read-only). Client.
    Diagnose = "diagnose", NONE, Read;
    /// Repair states that have exact durable evidence. Client.
    Repair = "repair", NONE, Maintenance;
    /// Remove finished runs with everything that belongs to them, a batch at a time. Client.
    RunPrune = "run.prune" => RunPrune, NONE, Maintenance;
    /// Register a controller discovered in a project (its file, its pass deadline). Client.
    ControllerRegister = "controller.register" => ControllerRegister, NONE, Command;
    /// Start a registered controller's passes. Client.
    ControllerEnable = "controller.enable" => ControllerName, NONE, Command;
    /// Stop a controller's passes (a running one is stopped; its resources stay queued). Client.
    ControllerDisable = "controller.disable" => ControllerName, NONE, Command;
    /// Create a resource or give it a new spec. Client.
    ResourceApply = "resource.apply" => ResourceApply, NONE, Command;
    /// One resource. Client.
    ResourceGet = "resource.get" => ResourceRef, NONE, Read;
    /// The resources of a project (of one controller). Client.
    ResourceList = "resource.list" => ResourceList, NONE, Read;
    /// Ask for a resource's deletion (it goes once its finalizers are empty). Client.
    ResourceDelete = "resource.delete" => ResourceRef, NONE, Command;
    /// Queue a pass of a resource now. Client.
    ResourceReconcile = "resource.reconcile" => ResourceRef, NONE, Command;
    /// Record an effect before attempting it. A controller's pass child.
    ControllerEffectRecord = "controller.effect.record" => ControllerEffectRecord, NONE, Command;
    /// The effect kept under a key. A controller's pass child.
    ControllerEffectGet = "controller.effect.get" => ControllerEffectGet, NONE, Command;
    /// Record what became of an effect. A controller's pass child.
    ControllerEffectSettle = "controller.effect.settle" => ControllerEffectSettle, NONE, Command;
    /// Find or start a child workflow run by its request key. A controller's pass child.
    ControllerWorkflowEnsure = "controller.workflow.ensure" => ControllerWorkflowEnsure, NONE, Command;
    /// Commit what a pass came to (status, finalizers, the next pass). A controller's pass child.
    ControllerPassFinish = "controller.pass.finish" => ControllerPassFinish, NONE, Command;
    /// Authenticate a worker connection; the first message a worker sends. Worker.
    WorkerHello = "worker.hello" => WorkerHello, WORKER, Worker;
    /// A node attempt begins. Worker.
    WorkerNodeStarted = "worker.node_started" => WorkerNodeStarted, WORKER_NODE, Worker;
    /// The current attempt ended; propose the next node. Worker.
    WorkerTransition = "worker.transition" => WorkerTransition, WORKER_ATTEMPT, Worker;
    /// The current attempt ended and the run finished. Worker.
    WorkerComplete = "worker.complete" => WorkerComplete, WORKER_ATTEMPT, Worker;
    /// The run cannot continue. Worker.
    WorkerFail = "worker.fail" => WorkerFail, WORKER, Worker;
    /// Informational progress. Worker.
    WorkerProgress = "worker.progress" => WorkerProgress, WORKER, Worker;
    /// Park until a checkpoint or human decision is answered. Worker.
    WorkerWait = "worker.wait" => WorkerWait, WORKER_ATTEMPT, Worker;
    /// Park until a time (a durable timer the host holds). Worker.
    WorkerWaitUntil = "worker.wait_until" => WorkerWaitUntil, WORKER_ATTEMPT, Worker;
    /// Park until the origin session answers an interactive step. Worker.
    WorkerInteractionRequest = "worker.interaction_request" => WorkerInteractionRequest, WORKER_ATTEMPT, Worker;
    /// Record a notify node's message for the origin session. Worker.
    WorkerNotify = "worker.notify" => WorkerNotify, WORKER_ATTEMPT, Worker;
    /// Reserve a managed effect. Worker.
    WorkerEffectReserve = "worker.effect_reserve" => WorkerEffectReserve, WORKER_ATTEMPT, Worker;
    /// A reserved effect is about to be performed. Worker.
    WorkerEffectApplying = "worker.effect_applying" => WorkerEffectApplying, WORKER, Worker;
    /// A performed effect ended. Worker.
    WorkerEffectSettle = "worker.effect_settle" => WorkerEffectSettle, WORKER, Worker;
    /// The verdict of a validate-mode child on a submission. Worker.
    WorkerValidationResult = "worker.validation_result" => WorkerValidationResult, WORKER, Worker;
    /// A chunk of a large value, before the message that refers to it. Worker.
    WorkerValuePut = "worker.value_put" => WorkerValuePut, WORKER, Worker;
    /// The worker is about to exit. Worker.
    WorkerExit = "worker.exit" => WorkerExit, WORKER, Worker;
    /// The next page of the node results a hello reply left out to fit its frame. Worker.
    WorkerResults = "worker.results" => WorkerResults, WORKER, Worker;
}

impl RequestKind {
    /// Whether this kind is sent by a workflow child rather than a client.
    pub fn is_worker(self) -> bool {
        self.class() == RequestClass::Worker
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RequestBody {
    /// The wire string of this body's kind, e.g. `"run.start"`.
    pub fn kind_str(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The payload as a JSON value, exactly as it is sent: every field of the payload struct
    /// present, absent optional fields as `null`; `null` for kinds without a payload.
    pub fn payload_json(&self) -> Result<Value, serde_json::Error> {
        self.serialize_payload(serde_json::value::Serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_are_unique_and_parse_back() {
        let mut seen = std::collections::BTreeSet::new();
        for &kind in RequestKind::ALL {
            assert!(seen.insert(kind.as_str()), "duplicate {kind}");
            assert_eq!(RequestKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(RequestKind::ALL.len(), 57);
        assert_eq!(RequestKind::parse("run.explode"), None);
    }

    #[test]
    fn worker_kinds_and_only_they_require_a_generation() {
        for &kind in RequestKind::ALL {
            assert_eq!(
                kind.is_worker(),
                kind.required_fields().generation,
                "{kind}"
            );
        }
    }

    /// The worker class is exactly the `worker.` namespace, and `repair`, which writes, is
    /// no read.
    #[test]
    fn classes_follow_the_namespaces_and_writes_are_not_reads() {
        for &kind in RequestKind::ALL {
            assert_eq!(
                kind.class() == RequestClass::Worker,
                kind.as_str().starts_with("worker."),
                "{kind}"
            );
        }
        assert_eq!(RequestKind::Repair.class(), RequestClass::Maintenance);
        assert_eq!(RequestKind::RunPrune.class(), RequestClass::Maintenance);
        assert_eq!(RequestKind::Diagnose.class(), RequestClass::Read);
        assert!(RequestKind::RunStart.class().is_durable_command());
        assert!(!RequestKind::RunStatus.class().is_durable_command());
    }
}
