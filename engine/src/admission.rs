//! Admission: what a connection may do before its request reaches a turn, decided from facts
//! the driver gathers (`piw_host::driver::conn` reads the peer's credentials, keeps the
//! connection's subscriptions and its worker binding, reads files and runs Pi's preflight;
//! it acts on what these functions answer and decides nothing itself).
//!
//! - [`authorize_peer`]: only the host's own user may talk to it;
//! - [`admit_subscription`]: a subscription's filter, and at most [`MAX_SUBSCRIPTIONS`] per
//!   connection; [`SubscriptionFilter::matches`] says which events it receives;
//! - [`worker_may_send`], [`hello_binding`], [`hello_accepted`]: a worker connection speaks
//!   only for the run and generation its accepted `worker.hello` bound it to;
//! - [`runtime_for_start`]: a `run.start` needs a runtime for its file's kind;
//! - [`detached_preflight`], [`detached_verdict`]: what must hold before an explicit detached
//!   start is accepted (bridges on, a Pi model, a Pi, and Pi's own check, which the driver
//!   runs in between).
//!
//! Every refusal is a [`Refusal`], whose code and message are defined once, here
//! ([`Refusal::rejection`]): they are part of the protocol.

use std::path::PathBuf;

use crate::bridges::{needs_a_model, pi_model, BridgeSettings, INPUT_KEY};
use crate::children::MissingRuntime;
use crate::protocol::{payload, Receipt, Rejection, RejectionCode, Request, RequestBody};

/// Subscriptions one connection may hold (each costs memory and a frame per matching event).
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// Why a connection, or one of its requests, is refused before any turn sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The peer runs as another user than the host's.
    ForeignPeer { peer_uid: u32, host_uid: u32 },
    /// The peer's credentials could not be read.
    PeerUnknown,
    /// A `subscribe` named no filter, or `all` together with another.
    SubscriptionFilter,
    /// The connection holds [`MAX_SUBSCRIPTIONS`] already.
    TooManySubscriptions,
    /// A worker request on a connection not bound to its run and generation, or a second
    /// `worker.hello`.
    WorkerNotBound,
    /// No runtime of this host runs the workflow's file.
    NoRuntime {
        workflow_file: String,
        /// Why the runtime for its kind is missing, when the host looked for one and found
        /// none (`MissingRuntime`).
        missing: Option<String>,
        /// The file suffixes this host runs.
        runtimes: Vec<String>,
    },
    /// An explicit detached start that no Pi of this host could serve.
    DetachedUnusable(DetachedRefusal),
}

impl Refusal {
    /// The rejection code a client sees.
    pub fn code(&self) -> RejectionCode {
        match self {
            Refusal::ForeignPeer { .. } | Refusal::PeerUnknown | Refusal::WorkerNotBound => {
                RejectionCode::Unauthorized
            }
            Refusal::SubscriptionFilter | Refusal::TooManySubscriptions => RejectionCode::Malformed,
            Refusal::NoRuntime { .. } => RejectionCode::NotFound,
            Refusal::DetachedUnusable(_) => RejectionCode::PiUnusable,
        }
    }

    /// The message a client sees: what is wrong and what to do instead.
    pub fn message(&self) -> String {
        match self {
            Refusal::ForeignPeer { peer_uid, host_uid } => {
                format!("peer uid {peer_uid} is not the host's user ({host_uid})")
            }
            Refusal::PeerUnknown => "peer credentials are unavailable".to_owned(),
            Refusal::SubscriptionFilter => {
                "subscribe needs run_id or session_id, or all: true alone".to_owned()
            }
            Refusal::TooManySubscriptions => {
                format!("at most {MAX_SUBSCRIPTIONS} subscriptions per connection")
            }
            Refusal::WorkerNotBound => "a worker connection must start with worker.hello and speak only for its own run and generation".to_owned(),
            Refusal::NoRuntime {
                workflow_file,
                missing: Some(reason),
                ..
            } => format!(
                "cannot run {workflow_file}: {reason} (the host looks when it starts: then `piw host stop` and retry)"
            ),
            Refusal::NoRuntime {
                workflow_file,
                missing: None,
                runtimes,
            } => format!(
                "no runtime is configured for {workflow_file} (this host runs: {}; runtimes come from PIW_RUNTIMES, PIW_NODE and PIW_NODE_WORKER when the host starts: set them, then `piw host stop` and retry)",
                if runtimes.is_empty() {
                    "nothing".to_owned()
                } else {
                    runtimes.join(", ")
                }
            ),
            Refusal::DetachedUnusable(why) => format!("cannot start a detached run: {why}"),
        }
    }

    /// The refusal as the protocol carries it.
    pub fn rejection(&self) -> Rejection {
        Rejection::new(self.code(), self.message())
    }
}

impl From<Refusal> for Rejection {
    fn from(refusal: Refusal) -> Self {
        refusal.rejection()
    }
}

/// Whether a peer may talk to this host: only the host's own user. `peer_uid`: the uid of the
/// socket's peer, `None` when its credentials could not be read.
pub fn authorize_peer(peer_uid: Option<u32>, host_uid: u32) -> Result<(), Refusal> {
    match peer_uid {
        Some(uid) if uid == host_uid => Ok(()),
        Some(peer_uid) => Err(Refusal::ForeignPeer { peer_uid, host_uid }),
        None => Err(Refusal::PeerUnknown),
    }
}

/// Which events a subscription receives: every filter it set must match; one that set
/// neither is `all`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionFilter {
    pub run_id: Option<String>,
    pub session_id: Option<String>,
}

impl SubscriptionFilter {
    /// Whether an event of run `run_id`, started from session `origin_session`, matches.
    pub fn matches(&self, run_id: &str, origin_session: Option<&str>) -> bool {
        let run_matches = self.run_id.as_deref().is_none_or(|run| run == run_id);
        let session_matches = self
            .session_id
            .as_deref()
            .is_none_or(|session| origin_session == Some(session));
        run_matches && session_matches
    }

    /// Whether the store must first say the run exists (a run filter names one; a session
    /// needs no record before its first run).
    pub fn names_a_run(&self) -> bool {
        self.run_id.is_some()
    }
}

/// A `subscribe` on a connection that holds `held` subscriptions: its filter (a run, a
/// session, both, or `all: true` alone), unless it names none or the connection is full.
pub fn admit_subscription(
    subscribe: &payload::Subscribe,
    held: usize,
) -> Result<SubscriptionFilter, Refusal> {
    let all = subscribe.all == Some(true);
    let filtered = subscribe.run_id.is_some() || subscribe.session_id.is_some();
    if all == filtered {
        return Err(Refusal::SubscriptionFilter);
    }
    if held >= MAX_SUBSCRIPTIONS {
        return Err(Refusal::TooManySubscriptions);
    }
    Ok(SubscriptionFilter {
        run_id: subscribe.run_id.clone(),
        session_id: subscribe.session_id.clone(),
    })
}

/// The run and generation a worker connection speaks for, after its `worker.hello`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerBinding {
    pub run_id: String,
    pub generation: u64,
}

/// Whether a worker request may go on a connection bound to `bound` (`None`: not bound): a
/// `worker.hello` only on a connection that has not said one, any other worker request only
/// for the run and generation the connection is bound to.
pub fn worker_may_send(request: &Request, bound: Option<&WorkerBinding>) -> Result<(), Refusal> {
    let allowed = match (&request.body, bound) {
        (RequestBody::WorkerHello(_), None) => true,
        (RequestBody::WorkerHello(_), Some(_)) => false,
        (_, Some(bound)) => {
            request.run_id.as_deref() == Some(bound.run_id.as_str())
                && request.generation == Some(bound.generation)
        }
        (_, None) => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(Refusal::WorkerNotBound)
    }
}

/// The binding a request asks for: a `worker.hello`'s run and generation (a hello without
/// them binds nothing).
pub fn hello_binding(request: &Request) -> Option<WorkerBinding> {
    if !matches!(request.body, RequestBody::WorkerHello(_)) {
        return None;
    }
    Some(WorkerBinding {
        run_id: request.run_id.clone()?,
        generation: request.generation?,
    })
}

/// Whether the host's `answer` to a hello grants the binding it asked for: it accepted the
/// hello without telling the child to stop.
pub fn hello_accepted(answer: &Result<Receipt, Rejection>) -> bool {
    answer
        .as_ref()
        .is_ok_and(|receipt| receipt.body.get("stop").is_none())
}

/// Whether this host can run `workflow_file`: one of `runtimes` (the suffixes of the runtimes
/// it has) ends its name. A refusal says why the runtime for its kind is missing when the host
/// looked for it (`missing`), and what the host runs otherwise.
pub fn runtime_for_start(
    workflow_file: &str,
    runtimes: &[String],
    missing: &[MissingRuntime],
) -> Result<(), Refusal> {
    if runtimes
        .iter()
        .any(|suffix| workflow_file.ends_with(suffix.as_str()))
    {
        return Ok(());
    }
    Err(Refusal::NoRuntime {
        workflow_file: workflow_file.to_owned(),
        missing: MissingRuntime::reason_for(missing, workflow_file).map(str::to_owned),
        runtimes: runtimes.to_vec(),
    })
}

/// Why an explicit detached start is refused (`pi_unusable`); its text is the message's tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetachedRefusal {
    /// `PIW_DETACHED_BRIDGES=off`.
    BridgesOff,
    /// Nothing names a provider and a model, and Pi's settings have no default.
    NoModel,
    /// No Pi to run: why (as the host's settings found it).
    NoPi(String),
    /// No Node worker runtime to run Pi's preflight with.
    NoNodeToCheck,
    /// The preflight could not be started.
    PreflightNotRun { node: PathBuf, error: String },
    /// Pi's preflight said no (`why`: what it wrote to stderr, empty when nothing).
    PiCannotServe {
        pi: String,
        provider: String,
        model: String,
        why: String,
    },
}

impl std::fmt::Display for DetachedRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DetachedRefusal::BridgesOff => {
                f.write_str("this host runs no detached steps (PIW_DETACHED_BRIDGES=off)")
            }
            DetachedRefusal::NoModel => write!(
                f,
                "no Pi provider and model to serve its steps, and Pi has no default model (defaultProvider and defaultModel in its settings.json): set them in Pi, or start the host with PIW_DETACHED_PROVIDER and PIW_DETACHED_MODEL, or give them in the run's input as {{\"{INPUT_KEY}\": {{\"provider\": ..., \"model\": ...}}}}"
            ),
            DetachedRefusal::NoPi(why) => f.write_str(why),
            DetachedRefusal::NoNodeToCheck => {
                f.write_str("the host has no Node worker runtime to check Pi with")
            }
            DetachedRefusal::PreflightNotRun { node, error } => write!(
                f,
                "cannot run the Pi preflight ({}): {error}",
                node.display()
            ),
            DetachedRefusal::PiCannotServe {
                pi,
                provider,
                model,
                why,
            } => write!(
                f,
                "Pi ({pi}) cannot serve a detached run with provider {provider} and model {model}: {}",
                if why.is_empty() {
                    "its preflight failed"
                } else {
                    why
                }
            ),
        }
    }
}

/// Pi's own check of a provider and a model (`lib/bridge-preflight.js`), for the driver to
/// run: `node script pi provider model`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiPreflight {
    pub node: PathBuf,
    pub script: PathBuf,
    /// Pi as the script's first argument: its CLI script, or its program.
    pub pi: String,
    /// Where Pi was found, for messages.
    pub pi_describe: String,
    pub provider: String,
    pub model: String,
}

impl PiPreflight {
    /// The script's arguments after the script itself.
    pub fn args(&self) -> [&str; 3] {
        [&self.pi, &self.provider, &self.model]
    }
}

/// What must happen before an explicit detached start is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetachedPreflight {
    /// Nothing: the workflow has no step a model answers.
    NotNeeded,
    /// Pi's check, whose outcome [`detached_verdict`] judges.
    AskPi(PiPreflight),
}

/// The first half of an explicit detached start's check, from the host's bridge `settings`
/// (`None`: `PIW_DETACHED_BRIDGES=off`), the workflow's snapshot when known before the run
/// (`definition`: its steps, its own model) and the run's `input` (its `piw_detached`). A
/// workflow without a step a model answers needs nothing; otherwise the host must run
/// bridges, something must name a Pi model (or Pi have a default), there must be a Pi, and a
/// Node to check it with.
pub fn detached_preflight(
    settings: Option<&BridgeSettings>,
    definition: Option<&serde_json::Value>,
    input: &serde_json::Value,
) -> Result<DetachedPreflight, Refusal> {
    let refuse = |why| Err(Refusal::DetachedUnusable(why));
    if definition.is_some_and(|d| !needs_a_model(d)) {
        return Ok(DetachedPreflight::NotNeeded);
    }
    let Some(settings) = settings else {
        return refuse(DetachedRefusal::BridgesOff);
    };
    let Some(model) = pi_model(definition, input, settings) else {
        return refuse(DetachedRefusal::NoModel);
    };
    let pi = match &settings.pi {
        Ok(pi) => pi,
        Err(why) => return refuse(DetachedRefusal::NoPi(why.clone())),
    };
    let Some((node, script)) = &settings.preflight else {
        return refuse(DetachedRefusal::NoNodeToCheck);
    };
    Ok(DetachedPreflight::AskPi(PiPreflight {
        node: node.clone(),
        script: script.clone(),
        pi: pi
            .prefix
            .first()
            .map_or_else(|| pi.program.display().to_string(), Clone::clone),
        pi_describe: pi.describe.clone(),
        provider: model.provider,
        model: model.model,
    }))
}

/// How Pi's preflight ended, as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PiPreflightOutcome {
    /// It exited with success.
    Passed,
    /// It could not be started (`error`: the OS's word).
    NotRun { error: String },
    /// It exited otherwise, having written `stderr`.
    Failed { stderr: String },
}

/// The second half of the check: whether Pi's answer to `check` accepts the start.
pub fn detached_verdict(check: &PiPreflight, outcome: PiPreflightOutcome) -> Result<(), Refusal> {
    let why = match outcome {
        PiPreflightOutcome::Passed => return Ok(()),
        PiPreflightOutcome::NotRun { error } => DetachedRefusal::PreflightNotRun {
            node: check.node.clone(),
            error,
        },
        PiPreflightOutcome::Failed { stderr } => DetachedRefusal::PiCannotServe {
            pi: check.pi_describe.clone(),
            provider: check.provider.clone(),
            model: check.model.clone(),
            why: stderr.trim().to_owned(),
        },
    };
    Err(Refusal::DetachedUnusable(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridges::{PiCommand, PiDefault};
    use serde_json::json;

    #[test]
    fn only_the_hosts_own_user_may_connect() {
        assert_eq!(authorize_peer(Some(1000), 1000), Ok(()));
        let foreign = authorize_peer(Some(1001), 1000).unwrap_err();
        assert_eq!(
            foreign,
            Refusal::ForeignPeer {
                peer_uid: 1001,
                host_uid: 1000
            }
        );
        assert_eq!(foreign.code(), RejectionCode::Unauthorized);
        assert_eq!(
            foreign.message(),
            "peer uid 1001 is not the host's user (1000)"
        );
        let unknown = authorize_peer(None, 1000).unwrap_err();
        assert_eq!(unknown.code(), RejectionCode::Unauthorized);
        assert_eq!(unknown.message(), "peer credentials are unavailable");
    }

    fn subscribe(
        run: Option<&str>,
        session: Option<&str>,
        all: Option<bool>,
    ) -> payload::Subscribe {
        payload::Subscribe {
            run_id: run.map(Into::into),
            session_id: session.map(Into::into),
            all,
        }
    }

    #[test]
    fn a_subscription_names_a_filter_or_all_alone() {
        for (run, session, all) in [
            (None, None, None),
            (None, None, Some(false)),
            (Some("run-1"), None, Some(true)),
            (None, Some("s1"), Some(true)),
        ] {
            let refusal = admit_subscription(&subscribe(run, session, all), 0).unwrap_err();
            assert_eq!(
                refusal,
                Refusal::SubscriptionFilter,
                "{run:?} {session:?} {all:?}"
            );
            assert_eq!(refusal.code(), RejectionCode::Malformed);
            assert_eq!(
                refusal.message(),
                "subscribe needs run_id or session_id, or all: true alone"
            );
        }
        let both = admit_subscription(&subscribe(Some("run-1"), Some("s1"), None), 0).unwrap();
        assert_eq!(
            both,
            SubscriptionFilter {
                run_id: Some("run-1".into()),
                session_id: Some("s1".into())
            }
        );
        assert!(both.names_a_run());
        let all = admit_subscription(&subscribe(None, None, Some(true)), 0).unwrap();
        assert_eq!(all, SubscriptionFilter::default());
        assert!(!all.names_a_run());
    }

    #[test]
    fn a_connection_holds_at_most_max_subscriptions() {
        let s = subscribe(None, Some("s1"), None);
        assert!(admit_subscription(&s, MAX_SUBSCRIPTIONS - 1).is_ok());
        let refusal = admit_subscription(&s, MAX_SUBSCRIPTIONS).unwrap_err();
        assert_eq!(refusal, Refusal::TooManySubscriptions);
        assert_eq!(refusal.code(), RejectionCode::Malformed);
        assert_eq!(
            refusal.message(),
            format!("at most {MAX_SUBSCRIPTIONS} subscriptions per connection")
        );
        // A malformed filter is named as such even on a full connection.
        assert_eq!(
            admit_subscription(&subscribe(None, None, None), MAX_SUBSCRIPTIONS),
            Err(Refusal::SubscriptionFilter)
        );
    }

    #[test]
    fn a_filter_takes_the_events_matching_every_part_it_set() {
        let by_both = SubscriptionFilter {
            run_id: Some("run-a".into()),
            session_id: Some("s1".into()),
        };
        assert!(by_both.matches("run-a", Some("s1")));
        assert!(!by_both.matches("run-a", Some("s2")));
        assert!(!by_both.matches("run-a", None));
        assert!(!by_both.matches("run-b", Some("s1")));
        assert!(SubscriptionFilter::default().matches("run-b", None));
    }

    fn worker_request(body: RequestBody, run: &str, generation: u64) -> Request {
        let mut request = Request::new("w-1", body).with_run_id(run);
        request.generation = Some(generation);
        request
    }

    fn hello(run: &str, generation: u64) -> Request {
        worker_request(
            RequestBody::WorkerHello(payload::WorkerHello {
                child_token: "secret".into(),
                pid: 42,
                definition: None,
                mounted_sources: None,
                start_node: false,
            }),
            run,
            generation,
        )
    }

    fn node_started(run: &str, generation: u64) -> Request {
        worker_request(
            RequestBody::WorkerNodeStarted(payload::WorkerNodeStarted::default()),
            run,
            generation,
        )
    }

    #[test]
    fn a_worker_speaks_only_for_the_run_and_generation_its_hello_bound() {
        let bound = WorkerBinding {
            run_id: "run-1".into(),
            generation: 2,
        };
        assert_eq!(worker_may_send(&hello("run-1", 2), None), Ok(()));
        assert_eq!(
            worker_may_send(&node_started("run-1", 2), Some(&bound)),
            Ok(())
        );
        for (request, bound) in [
            // A second hello, even for the same run.
            (hello("run-1", 2), Some(&bound)),
            // Anything but a hello before the hello.
            (node_started("run-1", 2), None),
            // Another run, another generation.
            (node_started("run-2", 2), Some(&bound)),
            (node_started("run-1", 3), Some(&bound)),
        ] {
            let refusal = worker_may_send(&request, bound).unwrap_err();
            assert_eq!(refusal, Refusal::WorkerNotBound, "{request:?} {bound:?}");
            assert_eq!(refusal.code(), RejectionCode::Unauthorized);
            assert_eq!(refusal.message(), "a worker connection must start with worker.hello and speak only for its own run and generation");
        }
    }

    #[test]
    fn an_accepted_hello_binds_its_connection_unless_told_to_stop() {
        assert_eq!(
            hello_binding(&hello("run-1", 2)),
            Some(WorkerBinding {
                run_id: "run-1".into(),
                generation: 2
            })
        );
        assert_eq!(hello_binding(&node_started("run-1", 2)), None);
        let mut anonymous = hello("run-1", 2);
        anonymous.generation = None;
        assert_eq!(hello_binding(&anonymous), None);
        assert!(hello_accepted(&Ok(Receipt::new(
            Some(1),
            json!({"resume": {}})
        ))));
        assert!(!hello_accepted(&Ok(Receipt::new(
            Some(1),
            json!({"stop": "cancelled"})
        ))));
        assert!(!hello_accepted(&Err(Rejection::new(
            RejectionCode::Unauthorized,
            "bad token"
        ))));
    }

    #[test]
    fn a_start_needs_a_runtime_for_its_files_kind() {
        let runtimes = vec![".workflow.json".to_owned(), ".workflow.mjs".to_owned()];
        assert_eq!(
            runtime_for_start("/w/a.workflow.mjs", &runtimes, &[]),
            Ok(())
        );
        let refusal = runtime_for_start("/w/a.workflow.ts", &runtimes, &[]).unwrap_err();
        assert_eq!(refusal.code(), RejectionCode::NotFound);
        assert_eq!(
            refusal.message(),
            "no runtime is configured for /w/a.workflow.ts (this host runs: .workflow.json, .workflow.mjs; runtimes come from PIW_RUNTIMES, PIW_NODE and PIW_NODE_WORKER when the host starts: set them, then `piw host stop` and retry)"
        );
        let none = runtime_for_start("/w/a.workflow.ts", &[], &[]).unwrap_err();
        assert!(
            none.message().contains("(this host runs: nothing;"),
            "{}",
            none.message()
        );
        // The host looked for the runtime of that kind and found none: the refusal says why.
        let missing = [MissingRuntime {
            suffixes: vec![".workflow.mjs".into(), ".workflow.ts".into()],
            reason: "Node 22.19 or newer is needed".into(),
        }];
        let refusal = runtime_for_start("/w/a.workflow.ts", &runtimes[..1], &missing).unwrap_err();
        assert_eq!(refusal.code(), RejectionCode::NotFound);
        assert_eq!(
            refusal.message(),
            "cannot run /w/a.workflow.ts: Node 22.19 or newer is needed (the host looks when it starts: then `piw host stop` and retry)"
        );
    }

    fn settings() -> BridgeSettings {
        BridgeSettings {
            pi: Ok(PiCommand {
                program: "/n/bin/node".into(),
                prefix: vec!["/pkg/pi/cli.js".into()],
                describe: "PIW_PI=/pkg/pi/cli.js".into(),
            }),
            extension: "/pkg/piw/extension/bridge.js".into(),
            preflight: Some((
                "/n/bin/node".into(),
                "/pkg/piw/lib/bridge-preflight.js".into(),
            )),
            provider: Some("mock".into()),
            model: Some("mock-model".into()),
            pi_args: Vec::new(),
            pi_default: None,
            home: "/h".into(),
            handshake_timeout: std::time::Duration::from_secs(60),
        }
    }

    fn graph(kind: &str) -> serde_json::Value {
        json!({"name": "w", "start": "a", "nodes": {"a": {"kind": kind}}, "edges": []})
    }

    fn refused(result: Result<DetachedPreflight, Refusal>) -> DetachedRefusal {
        match result {
            Err(Refusal::DetachedUnusable(why)) => why,
            other => panic!("expected a detached refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_detached_start_without_a_step_for_a_model_needs_nothing() {
        let input = json!({});
        assert_eq!(
            detached_preflight(None, Some(&graph("compute")), &input),
            Ok(DetachedPreflight::NotNeeded),
            "nothing to serve: no Pi, no model, not even bridges needed"
        );
        assert_eq!(
            refused(detached_preflight(None, Some(&graph("agent")), &input)),
            DetachedRefusal::BridgesOff
        );
        // Without the workflow's graph, the start is checked as one that needs a model.
        assert_eq!(
            refused(detached_preflight(None, None, &input)),
            DetachedRefusal::BridgesOff
        );
    }

    #[test]
    fn a_detached_start_asks_pi_about_the_model_it_would_use() {
        let input = json!({"task": "x"});
        let Ok(DetachedPreflight::AskPi(check)) =
            detached_preflight(Some(&settings()), None, &input)
        else {
            panic!("expected Pi's check");
        };
        assert_eq!(
            check,
            PiPreflight {
                node: "/n/bin/node".into(),
                script: "/pkg/piw/lib/bridge-preflight.js".into(),
                pi: "/pkg/pi/cli.js".into(),
                pi_describe: "PIW_PI=/pkg/pi/cli.js".into(),
                provider: "mock".into(),
                model: "mock-model".into(),
            }
        );
        assert_eq!(check.args(), ["/pkg/pi/cli.js", "mock", "mock-model"]);
        // The run's input names its own model; a Pi that is a program is passed as itself.
        let mut s = settings();
        s.pi = Ok(PiCommand {
            program: "/usr/bin/pi".into(),
            prefix: Vec::new(),
            describe: "pi on PATH (/usr/bin/pi)".into(),
        });
        let input = json!({INPUT_KEY: {"provider": "anthropic", "model": "m-2"}});
        let Ok(DetachedPreflight::AskPi(check)) = detached_preflight(Some(&s), None, &input) else {
            panic!("expected Pi's check");
        };
        assert_eq!(check.args(), ["/usr/bin/pi", "anthropic", "m-2"]);
    }

    #[test]
    fn a_detached_start_needs_a_model_a_pi_and_a_node_to_check_it() {
        let input = json!({"task": "x"});
        let mut s = settings();
        s.provider = None;
        let why = refused(detached_preflight(Some(&s), None, &input));
        assert_eq!(why, DetachedRefusal::NoModel);
        let message = Refusal::DetachedUnusable(why).message();
        assert!(
            message.starts_with("cannot start a detached run: no Pi provider and model"),
            "{message}"
        );
        assert!(message.contains("Pi has no default model"), "{message}");
        assert!(message.contains("PIW_DETACHED_PROVIDER"), "{message}");
        assert!(message.contains(&format!("\"{INPUT_KEY}\"")), "{message}");
        // Pi's own default model is enough.
        s.pi_default = Some(PiDefault {
            provider: "anthropic".into(),
            model: "m-1".into(),
        });
        assert!(matches!(
            detached_preflight(Some(&s), None, &input),
            Ok(DetachedPreflight::AskPi(_))
        ));

        let mut s = settings();
        s.pi = Err("there is no pi on PATH".into());
        assert_eq!(
            refused(detached_preflight(Some(&s), None, &input)),
            DetachedRefusal::NoPi("there is no pi on PATH".into())
        );
        let mut s = settings();
        s.preflight = None;
        let why = refused(detached_preflight(Some(&s), None, &input));
        assert_eq!(why, DetachedRefusal::NoNodeToCheck);
        let refusal = Refusal::DetachedUnusable(why);
        assert_eq!(refusal.code(), RejectionCode::PiUnusable);
        assert_eq!(
            refusal.message(),
            "cannot start a detached run: the host has no Node worker runtime to check Pi with"
        );
        assert_eq!(
            Refusal::DetachedUnusable(DetachedRefusal::BridgesOff).message(),
            "cannot start a detached run: this host runs no detached steps (PIW_DETACHED_BRIDGES=off)"
        );
    }

    #[test]
    fn pis_answer_decides_a_detached_start() {
        let Ok(DetachedPreflight::AskPi(check)) =
            detached_preflight(Some(&settings()), None, &json!({}))
        else {
            panic!("expected Pi's check");
        };
        assert_eq!(detached_verdict(&check, PiPreflightOutcome::Passed), Ok(()));
        let refusal = detached_verdict(
            &check,
            PiPreflightOutcome::Failed {
                stderr: "  Pi offers no model mock-model of provider mock\n".into(),
            },
        )
        .unwrap_err();
        assert_eq!(refusal.code(), RejectionCode::PiUnusable);
        assert_eq!(
            refusal.message(),
            "cannot start a detached run: Pi (PIW_PI=/pkg/pi/cli.js) cannot serve a detached run with provider mock and model mock-model: Pi offers no model mock-model of provider mock"
        );
        let silent = detached_verdict(
            &check,
            PiPreflightOutcome::Failed {
                stderr: " \n".into(),
            },
        )
        .unwrap_err();
        assert!(
            silent.message().ends_with(": its preflight failed"),
            "{}",
            silent.message()
        );
        let not_run = detached_verdict(
            &check,
            PiPreflightOutcome::NotRun {
                error: "No such file or directory".into(),
            },
        )
        .unwrap_err();
        assert_eq!(not_run.code(), RejectionCode::PiUnusable);
        assert_eq!(
            not_run.message(),
            "cannot start a detached run: cannot run the Pi preflight (/n/bin/node): No such file or directory"
        );
    }
}
