//! The host's memory between turns ([`HostState`]) and the types of its parts, one submodule
//! per deciding module that keeps one ([`children`], [`bridges`], [`channels`], [`presence`],
//! [`retention`]; each re-exports its own). The deciding modules read and change it; it
//! names none of them, so none imports it back from the code that calls it (`dispatch`,
//! `turn`), and no import circle runs through it (`tests/module_circles.rs`).

use std::collections::BTreeMap;

pub mod bridges;
pub mod channels;
pub mod children;
pub mod controllers;
pub mod presence;
pub mod retention;

use crate::ids::IdSource;
use crate::store::Claim;

/// In-memory facts the store thread keeps between batches, and where new ids come from (an
/// input that is not a message). The time is not kept here: `turn` and every other entry
/// point of the engine that decides by it take it as `now`.
#[derive(Debug)]
pub struct HostState {
    /// Where the engine's secrets (children's one-time tokens) get their random bits: the
    /// driver's is OS-seeded, a simulation's seeded (`HostState::new`).
    pub ids: Box<dyn IdSource>,
    /// The owner id of this host's claims (`host-epoch-N`).
    pub owner_id: String,
    /// This host's epoch.
    pub epoch: i64,
    /// Claims this host holds, by run id (one per running run with a child).
    pub claims: BTreeMap<String, Claim>,
    /// Launched children, by run id.
    pub children: BTreeMap<String, children::ChildEntry>,
    /// Parsed graph snapshots of runs with children.
    pub graphs: BTreeMap<String, crate::graph::Graph>,
    /// When each held claim was last renewed (by a write or a heartbeat).
    pub renewed_at: BTreeMap<String, i64>,
    pub child_config: children::ChildConfig,
    /// Whether children may be launched and stopped: true from the host's start until it
    /// stops (then the supervisor stops every child itself).
    pub supervising: bool,
    /// What the supervisor must do (launch, stop), decided and not yet handed to it: the store
    /// thread sends these on (as the turn's `Effect::Child`), so deciding code holds no
    /// channel.
    pub child_commands: Vec<children::SupervisorCmd>,
    /// The socket children connect to.
    pub socket_path: std::path::PathBuf,
    /// This installation's `piw_host::driver::supervision_scope`, computed once: every child's marker
    /// starts with it.
    pub supervision_scope: String,
    /// The largest reply frame connections send (`Limits::max_frame_bytes`): `run.status`
    /// fits its reply under it.
    pub reply_limit: usize,
    pub shutting_down: bool,
    /// Runs whose committed events subscribers were not sent yet, each with its revision
    /// before them, in the order they were written: what the deciding code asks to publish
    /// (the store thread publishes them through its outbox), so it holds no channel.
    pub unpublished: Vec<(String, u64)>,
    /// Runs whose last child was a standby worker that died before its hello, and whose loss
    /// was therefore not counted (`children::on_child_report`); cleared by the next hello.
    pub forgiven_standby_exits: std::collections::BTreeSet<String>,
    /// Own children whose connection the host refused for want of room (the connection cap):
    /// by pid, until the child's exit is handled (`children::child_refused`). Such a child
    /// dies of the host's shortage, not its run's fault, and its exit is no loss.
    pub refused_children: std::collections::BTreeSet<u32>,
    /// The number the next launch gets (unique for this host's life).
    pub next_launch: u64,
    /// Launches whose transaction failed to commit after their child was already handed its
    /// envelope, by launch number, with their run: the child is being stopped, and every
    /// report about it is ignored (its run, generation and child epoch were never committed
    /// and may be issued again). Until it has exited it still holds a child slot, and its run
    /// is not launched again.
    pub abandoned_launches: BTreeMap<u64, String>,
    /// The last activation commit failed after launching children: launch after the commit
    /// until one succeeds, so a commit that keeps failing (a full disk) does not start and
    /// stop children in a loop.
    pub launch_after_commit: bool,
    /// When to try ready runs again after an activation that failed (its commit, or the
    /// activation itself): nothing else may wake the store thread for them.
    pub activation_retry_at: Option<i64>,
    /// The delay before the last such retry (it doubles while activations keep failing).
    pub activation_retry_delay_ms: i64,
    /// What the host keeps of finished runs on its own; `None`: everything.
    pub retention: Option<retention::Retention>,
    /// When the retention pass runs next (`engine::retention`).
    pub retention_due_at: Option<i64>,
    /// This host has pruned once already, and so asked the driver to look for log files of
    /// runs that no longer exist (`turn::Effect::SweepRunLogs`): one sweep per host.
    pub run_logs_swept: bool,
    /// Detached runs' bridges (`crate::bridges`).
    pub bridges: bridges::Bridges,
    /// The sessions that present their runs' interactive steps now (`crate::presence`).
    pub presence: presence::Presence,
    /// Decision channels' adapters (`crate::channels`).
    pub channels: channels::Channels,
    /// Controllers' pass children (`crate::controllers`).
    pub controllers: controllers::Controllers,
}

impl HostState {
    /// A host's memory at its start, drawing new secrets from `ids`; the caller sets what it
    /// knows (owner, epoch, configuration) with struct update syntax.
    pub fn new(ids: Box<dyn IdSource>) -> Self {
        Self {
            ids,
            owner_id: String::new(),
            epoch: 0,
            claims: BTreeMap::new(),
            children: BTreeMap::new(),
            graphs: BTreeMap::new(),
            renewed_at: BTreeMap::new(),
            child_config: Default::default(),
            supervising: false,
            child_commands: Vec::new(),
            socket_path: Default::default(),
            supervision_scope: String::new(),
            reply_limit: 0,
            shutting_down: false,
            unpublished: Vec::new(),
            forgiven_standby_exits: Default::default(),
            refused_children: Default::default(),
            next_launch: 0,
            abandoned_launches: BTreeMap::new(),
            launch_after_commit: false,
            activation_retry_at: None,
            activation_retry_delay_ms: 0,
            retention: None,
            retention_due_at: None,
            run_logs_swept: false,
            bridges: Default::default(),
            presence: Default::default(),
            channels: Default::default(),
            controllers: Default::default(),
        }
    }

    /// Child processes this host runs or is still stopping (abandoned launches included).
    pub fn live_children(&self) -> usize {
        self.children.len()
            + self.abandoned_launches.len()
            + self.bridges.slots_held(&self.children)
    }
}
