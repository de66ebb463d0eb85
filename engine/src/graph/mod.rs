//! The workflow graph snapshot: the data-only definition of a workflow (node ids, kinds,
//! timeouts, retry contracts, edges and switch routes; no functions) that a child sends with its
//! first activation. The host stores it with its [`Graph::digest`] and checks every transition a
//! child proposes against [`Graph::route`], so a buggy child cannot jump the graph.
//!
//! Everything here is pure: no I/O, no clock.
//!
//! # JSON shape
//!
//! ```json
//! {
//!   "name": "pipeline",
//!   "start": "fetch",
//!   "nodes": {
//!     "fetch": {"kind": "compute", "timeout_ms": 5000},
//!     "pay":   {"kind": "action", "retry": "idempotency_key"},
//!     "ask":   {"kind": "agent", "timeout_ms": 600000},
//!     "msg":   {"kind": "assistant_message"},
//!     "ok":    {"kind": "checkpoint"},
//!     "tell":  {"kind": "notify"},
//!     "later": {"kind": "wait"},
//!     "wait":  {"kind": "agent", "timeout_at_start": true},
//!     "fix.run": {"kind": "compute"}
//!   },
//!   "mounts": {"fix": {"max_steps": 20}},
//!   "edges": [
//!     {"from": "fetch", "to": "pay"},
//!     {"from": "pay", "switch": {"on": "$.status", "cases": {"ok": "tell", "retry": "fetch"}, "default": "ask"}},
//!     {"from": "ask", "switch": {"on": "$result.outcome", "cases": {"ok": "ok", "timed_out": "msg"}}}
//!   ]
//! }
//! ```
//!
//! Unknown fields are errors: a snapshot is produced by our own compilers, and a typo must not be
//! silently ignored. [`Graph::parse`] is the only way in from JSON (the `Deserialize`
//! implementation goes through it too), and it always validates (see [`GraphError`] for the
//! rules).
//!
//! # Normal form
//!
//! Parsing normalizes one thing: an `action` node without `retry` gets `retry: "never"`, so a
//! snapshot that spells the default out and one that leaves it implicit have the same digest.
//! A switch without `cases` has an empty `cases` map, which [`Graph::to_value`] writes out.

mod route;
mod validate;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::sha256_hex;
use crate::protocol::canonical_json;
use crate::store::RetryContract;

pub use route::{Outcome, Route, TransitionRefused};

/// The most nodes a graph may have.
pub const MAX_NODES: usize = 1_000;

/// The longest graph name or node id, in bytes (ids are ASCII, so also in characters).
pub const MAX_ID_LEN: usize = 128;

/// The step limit of a run whose workflow sets none (the authoring reference's default).
pub const DEFAULT_MAX_STEPS: u64 = 100;

/// The highest step limit a workflow may set: with it, a runaway loop still ends after a bounded
/// number of attempts and events.
pub const MAX_MAX_STEPS: u64 = 10_000;

/// The one `switch.on` selector that routes on how the node ended rather than on its output.
pub const OUTCOME_SELECTOR: &str = "$result.outcome";

/// The case keys a switch on [`OUTCOME_SELECTOR`] may use: one per [`Outcome`] variant, and
/// `cancelled`, which the authoring reference allows although a cancelled run never routes.
pub const OUTCOME_NAMES: [&str; 4] = ["ok", "failed", "timed_out", "cancelled"];

/// A validated workflow graph snapshot.
///
/// Obtain one with [`Graph::parse`] (or `serde` deserialization, which calls it). The fields are
/// public for reading; a graph assembled by hand is not checked until [`Graph::validate`] is
/// called, and the routing functions never panic on an invalid one, but their answers are only
/// meaningful for a valid graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawGraph")]
pub struct Graph {
    /// The workflow's name (an id: `[A-Za-z_][A-Za-z0-9_-]*`, at most [`MAX_ID_LEN`]).
    pub name: String,
    /// The id of the node a run starts at.
    pub start: String,
    /// Every node, by id.
    pub nodes: BTreeMap<String, Node>,
    /// The edges; at most one leaves each node. A node without one ends the run.
    pub edges: Vec<Edge>,
    /// The most node attempts a run may start (1..=[`MAX_MAX_STEPS`]); the host fails the run
    /// when it would start one more. `None` means [`DEFAULT_MAX_STEPS`] (see
    /// [`Graph::step_limit`]), and leaves the digest of a snapshot without the field unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    /// The workflow's presentation instructions: when a run with an origin session ends, its
    /// terminal message carries them (as `presentation`) so that the client presents the result
    /// with a model turn. `None` leaves the digest of a snapshot without the field unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presentation_prompt: Option<String>,
    /// The included workflows, by mount path (`repair`, `repair.fix`): each bounds one
    /// invocation (the attempts from entering the mount until leaving it) by its own step
    /// limit, as the authoring reference's per-mount `maxSteps` does. Empty for a workflow
    /// without includes, which leaves its digest unchanged.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mounts: BTreeMap<String, Mount>,
    /// The Pi model that serves the workflow's interactive steps when a run is detached
    /// (`defineWorkflow({ detached })`): it wins over the run's input and the host's settings
    /// (`engine::bridges::pi_model`). `None` leaves the digest of a snapshot without it unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached: Option<DetachedPi>,
}

/// Which Pi model serves a detached run's steps; each field unset is taken from the next place
/// that sets it (the run's input, the host's settings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetachedPi {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// More of Pi's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pi_args: Option<Vec<String>>,
}

/// An included workflow's place in the flattened graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// The most attempts one invocation of the mount may start (1..=[`MAX_MAX_STEPS`]);
    /// `None` means [`DEFAULT_MAX_STEPS`], the included workflow's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
}

impl Mount {
    /// The most attempts one invocation may start.
    pub fn step_limit(&self) -> u64 {
        self.max_steps.unwrap_or(DEFAULT_MAX_STEPS)
    }
}

/// The wire form before validation; `Graph`'s `Deserialize` goes through it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGraph {
    name: String,
    start: String,
    nodes: BTreeMap<String, Node>,
    edges: Vec<Edge>,
    #[serde(default)]
    max_steps: Option<u64>,
    #[serde(default)]
    mounts: BTreeMap<String, Mount>,
    presentation_prompt: Option<String>,
    #[serde(default)]
    detached: Option<DetachedPi>,
}

impl TryFrom<RawGraph> for Graph {
    type Error = GraphError;

    fn try_from(raw: RawGraph) -> Result<Self, Self::Error> {
        let mut graph = Graph {
            name: raw.name,
            start: raw.start,
            nodes: raw.nodes,
            edges: raw.edges,
            max_steps: raw.max_steps,
            mounts: raw.mounts,
            presentation_prompt: raw.presentation_prompt,
            detached: raw.detached,
        };
        graph.normalize();
        graph.validate()?;
        Ok(graph)
    }
}

/// One node of the graph: what it is and the limits the host enforces on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// What the node does.
    pub kind: NodeKind,
    /// The node's deadline in milliseconds (at least 1), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The node's deadline is decided by the workflow's code when each attempt starts (the
    /// authoring reference's `timeoutMs` function): the child reports it with the message that
    /// opens the attempt, and the host saves and enforces it like a fixed one. Never together
    /// with `timeout_ms`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timeout_at_start: bool,
    /// When the node's managed effects may be retried; only `action` nodes may have one, and a
    /// parsed `action` node always has one (`never` when the snapshot left it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryContract>,
}

impl Node {
    /// The retry contract the host applies: the node's own for an `action` node (`never` when
    /// unset), `None` for every other kind.
    pub fn retry_contract(&self) -> Option<RetryContract> {
        match self.kind {
            NodeKind::Action => Some(self.retry.unwrap_or(RetryContract::Never)),
            _ => None,
        }
    }
}

/// What a node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// Pure computation; may rerun after a crash.
    Compute,
    /// Side effects, only through managed effects.
    Action,
    /// An interactive agent step, answered in the origin Pi session.
    Agent,
    /// An interactive assistant message, answered in the origin Pi session.
    AssistantMessage,
    /// An ordinary checkpoint, answered through the model-facing tool.
    Checkpoint,
    /// A protected decision, answered by a person in the origin session.
    HumanDecision,
    /// Creates a workflow message in the same transaction as the node result.
    Notify,
    /// Parks the run until a time (`worker.wait_until`): the host holds the timer, no child
    /// runs meanwhile, and the node then succeeds with the output its child gave.
    Wait,
}

impl NodeKind {
    /// Every kind, in declaration order.
    pub const ALL: [NodeKind; 8] = [
        NodeKind::Compute,
        NodeKind::Action,
        NodeKind::Agent,
        NodeKind::AssistantMessage,
        NodeKind::Checkpoint,
        NodeKind::HumanDecision,
        NodeKind::Notify,
        NodeKind::Wait,
    ];

    /// The snake_case name used in the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Compute => "compute",
            NodeKind::Action => "action",
            NodeKind::Agent => "agent",
            NodeKind::AssistantMessage => "assistant_message",
            NodeKind::Checkpoint => "checkpoint",
            NodeKind::HumanDecision => "human_decision",
            NodeKind::Notify => "notify",
            NodeKind::Wait => "wait",
        }
    }

    /// Whether the node is answered interactively in the origin Pi session (`agent`,
    /// `assistant_message`).
    pub fn is_interactive(self) -> bool {
        matches!(self, NodeKind::Agent | NodeKind::AssistantMessage)
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The edge leaving one node: either an unconditional `to` or a `switch` (exactly one of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    /// The node the edge leaves.
    pub from: String,
    /// The next node after a success, for an unconditional edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The routing table, for a conditional edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<Switch>,
}

/// A conditional route: a selector, a table from case keys to node ids, and an optional default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// What is compared: exactly [`OUTCOME_SELECTOR`], or a path into the node's output such as
    /// `$.status` or `$.items.0.state` (dot-separated object keys or array indices).
    pub on: String,
    /// Case key → next node id.
    #[serde(default)]
    pub cases: BTreeMap<String, String>,
    /// The next node when no case matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// Why a graph snapshot was refused, or why a route could not be computed. Ids and values from
/// the snapshot are quoted in messages, cut to 200 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The JSON does not have the snapshot's shape (missing or unknown field, wrong type,
    /// unknown node kind or retry contract).
    #[error("malformed graph snapshot: {message}")]
    Malformed {
        /// The deserializer's description of the problem.
        message: String,
    },
    /// The graph name is not an id (`[A-Za-z_][A-Za-z0-9_-]*`, at most 128 characters).
    #[error(
        "invalid graph name {name:?}: expected [A-Za-z_][A-Za-z0-9_-]* of at most 128 characters"
    )]
    InvalidName {
        /// The offending name.
        name: String,
    },
    /// A node id is not ids joined by `.` (each `[A-Za-z_][A-Za-z0-9_-]*`; at most 128
    /// characters in all).
    #[error("invalid node id {id:?}: expected [A-Za-z_][A-Za-z0-9_-]*, or such ids joined by '.' (a mount path), of at most 128 characters")]
    InvalidNodeId {
        /// The offending id.
        id: String,
    },
    /// More than [`MAX_NODES`] nodes.
    #[error("graph has {count} nodes; at most 1000 are allowed")]
    TooManyNodes {
        /// How many nodes the snapshot has.
        count: usize,
    },
    /// The start node is not a node of the graph.
    #[error("start node {start:?} is not a node of the graph")]
    MissingStart {
        /// The `start` field.
        start: String,
    },
    /// `max_steps` is 0 or above [`MAX_MAX_STEPS`].
    #[error("max_steps {max_steps} is out of range: expected 1 to 10000")]
    InvalidMaxSteps {
        /// The offending limit.
        max_steps: u64,
    },
    /// A node has both `timeout_ms` and `timeout_at_start`.
    #[error("node {node:?} has both timeout_ms and timeout_at_start; a deadline is fixed or decided at the start, not both")]
    TwoTimeouts {
        /// The node id.
        node: String,
    },
    /// A mount path is not ids joined by `.`, or no node lives under it.
    #[error("mount {path:?} is not a mount path with nodes under it (ids joined by '.', each node of the included workflow named <mount>.<node>)")]
    InvalidMount {
        /// The offending path.
        path: String,
    },
    /// A mount's `max_steps` is 0 or above [`MAX_MAX_STEPS`].
    #[error("mount {path:?} has max_steps {max_steps}, out of range: expected 1 to 10000")]
    InvalidMountMaxSteps {
        /// The mount path.
        path: String,
        /// The offending limit.
        max_steps: u64,
    },
    /// A node has `timeout_ms: 0`.
    #[error("node {node:?} has timeout_ms 0; a timeout must be at least 1 ms")]
    ZeroTimeout {
        /// The node id.
        node: String,
    },
    /// A node other than an `action` node has a `retry` contract.
    #[error("node {node:?} is a {kind} node; only action nodes may have a retry contract")]
    RetryOnNonAction {
        /// The node id.
        node: String,
        /// The node's kind.
        kind: NodeKind,
    },
    /// An edge leaves a node that does not exist.
    #[error("edge {edge} leaves {from:?}, which is not a node of the graph")]
    EdgeFromUnknownNode {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
    },
    /// An edge has neither `to` nor `switch`.
    #[error("edge {edge} from {from:?} has neither `to` nor `switch`")]
    EdgeWithoutTarget {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
    },
    /// An edge has both `to` and `switch`.
    #[error("edge {edge} from {from:?} has both `to` and `switch`; exactly one is allowed")]
    EdgeWithTwoTargets {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
    },
    /// An edge's `to`, a switch case or a switch default names a node that does not exist.
    #[error("edge {edge} from {from:?} leads to {target:?}, which is not a node of the graph")]
    UnknownTarget {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
        /// The missing node id.
        target: String,
    },
    /// Two edges leave the same node.
    #[error(
        "node {from:?} has two outgoing edges (edges {first} and {second}); at most one is allowed"
    )]
    DuplicateOutgoingEdge {
        /// The node both edges leave.
        from: String,
        /// The index of the first edge.
        first: usize,
        /// The index of the second edge.
        second: usize,
    },
    /// A switch's `on` is neither `$result.outcome` nor a valid `$.path`.
    #[error("edge {edge} from {from:?} switches on {on:?}: expected \"$result.outcome\" or a path like \"$.a.b.0\" with non-empty segments")]
    InvalidSwitchOn {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
        /// The offending selector.
        on: String,
    },
    /// A switch on `$result.outcome` has a case other than `ok`, `failed`, `timed_out`,
    /// `cancelled`.
    #[error("edge {edge} from {from:?} switches on $result.outcome with case {case:?}: expected ok, failed, timed_out or cancelled")]
    InvalidOutcomeCase {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
        /// The offending case key.
        case: String,
    },
    /// A switch has no cases and no default, so it could never route anywhere.
    #[error("edge {edge} from {from:?} has a switch with no cases and no default")]
    EmptySwitch {
        /// The edge's index in `edges`.
        edge: usize,
        /// Its `from` field.
        from: String,
    },
    /// A node cannot be reached from the start node (the first such node in id order).
    #[error("node {node:?} cannot be reached from the start node")]
    UnreachableNode {
        /// The node id.
        node: String,
    },
    /// Routing was asked about a node that is not in the graph.
    #[error("node {node:?} is not a node of the graph")]
    UnknownNode {
        /// The node id.
        node: String,
    },
}

impl Graph {
    /// Parses a snapshot from JSON, normalizes it (see the module documentation) and validates
    /// it. Every way a snapshot can be wrong is a distinct [`GraphError`] variant.
    pub fn parse(value: &Value) -> Result<Graph, GraphError> {
        let raw = RawGraph::deserialize(value).map_err(|e| GraphError::Malformed {
            message: clip(&e.to_string()),
        })?;
        Graph::try_from(raw)
    }

    /// The JSON form: the snapshot's shape with absent optional fields left out. Parsing it
    /// gives back an equal graph.
    pub fn to_value(&self) -> Value {
        let mut nodes = Map::new();
        for (id, node) in &self.nodes {
            let mut obj = Map::new();
            obj.insert("kind".into(), Value::String(node.kind.as_str().into()));
            if let Some(timeout) = node.timeout_ms {
                obj.insert("timeout_ms".into(), Value::from(timeout));
            }
            if node.timeout_at_start {
                obj.insert("timeout_at_start".into(), Value::Bool(true));
            }
            if let Some(retry) = node.retry {
                obj.insert("retry".into(), Value::String(retry.as_str().into()));
            }
            nodes.insert(id.clone(), Value::Object(obj));
        }
        let edges = self
            .edges
            .iter()
            .map(|edge| {
                let mut obj = Map::new();
                obj.insert("from".into(), Value::String(edge.from.clone()));
                if let Some(to) = &edge.to {
                    obj.insert("to".into(), Value::String(to.clone()));
                }
                if let Some(switch) = &edge.switch {
                    let mut sw = Map::new();
                    sw.insert("on".into(), Value::String(switch.on.clone()));
                    let cases = switch
                        .cases
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect();
                    sw.insert("cases".into(), Value::Object(cases));
                    if let Some(default) = &switch.default {
                        sw.insert("default".into(), Value::String(default.clone()));
                    }
                    obj.insert("switch".into(), Value::Object(sw));
                }
                Value::Object(obj)
            })
            .collect();
        let mut graph = Map::new();
        graph.insert("name".into(), Value::String(self.name.clone()));
        graph.insert("start".into(), Value::String(self.start.clone()));
        graph.insert("nodes".into(), Value::Object(nodes));
        graph.insert("edges".into(), Value::Array(edges));
        if let Some(max_steps) = self.max_steps {
            graph.insert("max_steps".into(), Value::from(max_steps));
        }
        if !self.mounts.is_empty() {
            let mounts = self
                .mounts
                .iter()
                .map(|(path, mount)| {
                    let mut obj = Map::new();
                    if let Some(max_steps) = mount.max_steps {
                        obj.insert("max_steps".into(), Value::from(max_steps));
                    }
                    (path.clone(), Value::Object(obj))
                })
                .collect();
            graph.insert("mounts".into(), Value::Object(mounts));
        }
        if let Some(prompt) = &self.presentation_prompt {
            graph.insert("presentation_prompt".into(), Value::String(prompt.clone()));
        }
        if let Some(detached) = &self.detached {
            graph.insert(
                "detached".into(),
                serde_json::to_value(detached).unwrap_or(Value::Null),
            );
        }
        Value::Object(graph)
    }

    /// The snapshot's identity: SHA-256 (lower-case hex) of the canonical JSON of
    /// [`Graph::to_value`]. Key order and whitespace in the original input never change it;
    /// edge order does (edges are a list).
    pub fn digest(&self) -> String {
        sha256_hex(canonical_json(&self.to_value()).as_bytes())
    }

    /// The most node attempts a run of this graph may start: `max_steps`, else
    /// [`DEFAULT_MAX_STEPS`].
    pub fn step_limit(&self) -> u64 {
        self.max_steps.unwrap_or(DEFAULT_MAX_STEPS)
    }

    /// The mounts a node lives in, outermost first: `(path, mount)` for every mount path
    /// that `node` extends (`repair` and `repair.fix` for `repair.fix.run`).
    pub fn mounts_of<'a>(&'a self, node: &'a str) -> impl Iterator<Item = (&'a str, &'a Mount)> {
        self.mounts.iter().filter_map(move |(path, mount)| {
            node.strip_prefix(path.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
                .then_some((path.as_str(), mount))
        })
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.get(id)
    }

    /// The edge leaving `from`, if any (the first one, in an unvalidated graph).
    pub fn outgoing(&self, from: &str) -> Option<&Edge> {
        self.edges.iter().find(|edge| edge.from == from)
    }

    /// Whether the edge leaving `from` is a switch on `$result.outcome`. The host asks this to
    /// decide between routing a node's timeout and ending the run `timed_out`.
    pub fn has_outcome_route(&self, from: &str) -> bool {
        self.outgoing(from)
            .and_then(|edge| edge.switch.as_ref())
            .is_some_and(|switch| switch.on == OUTCOME_SELECTOR)
    }

    /// Checks every rule of a snapshot (see [`GraphError`]); [`Graph::parse`] calls it. Useful
    /// for a graph assembled in code.
    pub fn validate(&self) -> Result<(), GraphError> {
        validate::validate(self)
    }

    /// Fills in the defaults that have a normal form: `retry: never` on action nodes.
    fn normalize(&mut self) {
        for node in self.nodes.values_mut() {
            if node.kind == NodeKind::Action && node.retry.is_none() {
                node.retry = Some(RetryContract::Never);
            }
        }
    }
}

/// Cuts user-supplied text for an error message to 200 characters.
fn clip(text: &str) -> String {
    const LIMIT: usize = 200;
    match text.char_indices().nth(LIMIT) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "name": "pipeline",
            "start": "fetch",
            "nodes": {
                "fetch": {"kind": "compute", "timeout_ms": 5000},
                "pay": {"kind": "action", "retry": "idempotency_key"},
                "ask": {"kind": "agent", "timeout_ms": 600000},
                "msg": {"kind": "assistant_message"},
                "ok": {"kind": "checkpoint"},
                "ship": {"kind": "human_decision"},
                "tell": {"kind": "notify"}
            },
            "edges": [
                {"from": "fetch", "to": "pay"},
                {"from": "pay", "switch": {"on": "$.status", "cases": {"ok": "tell", "retry": "fetch"}, "default": "ask"}},
                {"from": "ask", "switch": {"on": "$result.outcome", "cases": {"ok": "ok", "timed_out": "msg"}}},
                {"from": "ok", "to": "ship"}
            ]
        })
    }

    #[test]
    fn parses_the_sample_and_round_trips() {
        let graph = Graph::parse(&sample()).expect("valid");
        assert_eq!(graph.name, "pipeline");
        assert_eq!(graph.nodes.len(), 7);
        assert_eq!(
            graph.node("pay").and_then(|n| n.retry),
            Some(RetryContract::IdempotencyKey)
        );
        assert_eq!(graph.node("fetch").and_then(|n| n.timeout_ms), Some(5000));
        assert!(graph.node("nope").is_none());
        let again = Graph::parse(&graph.to_value()).expect("round trip");
        assert_eq!(again, graph);
        assert_eq!(again.digest(), graph.digest());
    }

    #[test]
    fn serde_agrees_with_to_value_and_deserialize_validates() {
        let graph = Graph::parse(&sample()).expect("valid");
        assert_eq!(
            serde_json::to_value(&graph).expect("serialize"),
            graph.to_value()
        );
        let via_serde: Graph = serde_json::from_value(sample()).expect("deserialize");
        assert_eq!(via_serde, graph);
        let mut bad = sample();
        bad["start"] = json!("nowhere");
        let err = serde_json::from_value::<Graph>(bad).expect_err("invalid");
        assert!(err.to_string().contains("start node"), "{err}");
    }

    #[test]
    fn action_nodes_default_to_never_and_the_digest_ignores_the_spelling() {
        let implicit = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "action"}}, "edges": []
        });
        let explicit = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "action", "retry": "never"}}, "edges": []
        });
        let a = Graph::parse(&implicit).expect("valid");
        let b = Graph::parse(&explicit).expect("valid");
        assert_eq!(
            a.node("a").and_then(|n| n.retry),
            Some(RetryContract::Never)
        );
        assert_eq!(a, b);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn retry_contract_applies_to_action_nodes_only() {
        let action = Node {
            kind: NodeKind::Action,
            timeout_ms: None,
            timeout_at_start: false,
            retry: None,
        };
        assert_eq!(action.retry_contract(), Some(RetryContract::Never));
        let read_back = Node {
            retry: Some(RetryContract::ReadBack),
            ..action
        };
        assert_eq!(read_back.retry_contract(), Some(RetryContract::ReadBack));
        let compute = Node {
            kind: NodeKind::Compute,
            ..action
        };
        assert_eq!(compute.retry_contract(), None);
    }

    #[test]
    fn digest_is_sha256_of_canonical_json() {
        let graph = Graph::parse(&sample()).expect("valid");
        let digest = graph.digest();
        assert_eq!(digest.len(), 64);
        assert_eq!(
            digest,
            sha256_hex(canonical_json(&graph.to_value()).as_bytes())
        );
        // A different graph has a different digest.
        let mut other = sample();
        other["nodes"]["fetch"]["timeout_ms"] = json!(5001);
        assert_ne!(Graph::parse(&other).expect("valid").digest(), digest);
    }

    #[test]
    fn digest_ignores_key_order_of_the_input_text() {
        let forward = r#"{"name":"g","start":"a","nodes":{"a":{"kind":"compute","timeout_ms":3},"b":{"kind":"notify"}},"edges":[{"from":"a","switch":{"on":"$.x","cases":{"1":"b","2":"a"},"default":"b"}}]}"#;
        let reversed = r#"{"edges":[{"switch":{"default":"b","cases":{"2":"a","1":"b"},"on":"$.x"},"from":"a"}],"nodes":{"b":{"kind":"notify"},"a":{"timeout_ms":3,"kind":"compute"}},"start":"a","name":"g"}"#;
        let a = Graph::parse(&serde_json::from_str(forward).expect("json")).expect("valid");
        let b = Graph::parse(&serde_json::from_str(reversed).expect("json")).expect("valid");
        assert_eq!(a, b);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn a_detached_pi_model_round_trips_and_only_a_set_one_changes_the_digest() {
        let without = Graph::parse(&sample()).expect("valid");
        assert!(without.to_value().get("detached").is_none());
        let mut v = sample();
        v["detached"] = json!({"provider": "p", "model": "m", "pi_args": ["--x"]});
        let with = Graph::parse(&v).expect("valid");
        assert_eq!(with.to_value()["detached"], v["detached"]);
        assert_ne!(with.digest(), without.digest());
        v["detached"] = json!({"provider": "p", "nope": 1});
        assert!(Graph::parse(&v).is_err(), "unknown fields are refused");
    }

    #[test]
    fn presentation_prompt_round_trips_and_only_a_set_one_changes_the_digest() {
        let without = Graph::parse(&sample()).expect("valid");
        assert_eq!(without.presentation_prompt, None);
        assert!(without.to_value().get("presentation_prompt").is_none());
        let mut v = sample();
        v["presentation_prompt"] = json!("Summarize the result for the user.");
        let with = Graph::parse(&v).expect("valid");
        assert_eq!(
            with.to_value()["presentation_prompt"],
            json!("Summarize the result for the user.")
        );
        assert_eq!(Graph::parse(&with.to_value()).expect("round trip"), with);
        assert_ne!(with.digest(), without.digest());
    }

    #[test]
    fn max_steps_defaults_to_100_is_checked_and_only_a_set_limit_changes_the_digest() {
        let without = Graph::parse(&sample()).expect("valid");
        assert_eq!(without.max_steps, None);
        assert_eq!(without.step_limit(), DEFAULT_MAX_STEPS);
        assert!(without.to_value().get("max_steps").is_none());
        let mut v = sample();
        v["max_steps"] = json!(7);
        let with = Graph::parse(&v).expect("valid");
        assert_eq!(with.step_limit(), 7);
        assert_eq!(Graph::parse(&with.to_value()).expect("round trip"), with);
        assert_ne!(with.digest(), without.digest());
        for bad in [0, MAX_MAX_STEPS + 1] {
            v["max_steps"] = json!(bad);
            assert_eq!(
                Graph::parse(&v),
                Err(GraphError::InvalidMaxSteps { max_steps: bad })
            );
        }
    }

    #[test]
    fn switch_cases_default_to_empty() {
        let graph = Graph::parse(&json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
            "edges": [{"from": "a", "switch": {"on": "$result.outcome", "default": "b"}}]
        }))
        .expect("valid");
        assert_eq!(graph.to_value()["edges"][0]["switch"]["cases"], json!({}));
    }

    #[test]
    fn node_kinds_round_trip_and_interactivity() {
        for kind in NodeKind::ALL {
            let value = serde_json::to_value(kind).expect("serialize");
            assert_eq!(value, json!(kind.as_str()));
            assert_eq!(kind.to_string(), kind.as_str());
            let back: NodeKind = serde_json::from_value(value).expect("deserialize");
            assert_eq!(back, kind);
            assert_eq!(
                kind.is_interactive(),
                matches!(kind, NodeKind::Agent | NodeKind::AssistantMessage)
            );
        }
    }

    #[test]
    fn has_outcome_route_only_for_outcome_switches() {
        let graph = Graph::parse(&sample()).expect("valid");
        assert!(graph.has_outcome_route("ask"));
        assert!(!graph.has_outcome_route("pay")); // switch on $.status
        assert!(!graph.has_outcome_route("fetch")); // `to` edge
        assert!(!graph.has_outcome_route("tell")); // no edge
        assert!(!graph.has_outcome_route("nope")); // no node
    }

    #[test]
    fn clip_cuts_long_text_on_a_char_boundary() {
        assert_eq!(clip("short"), "short");
        let long = "é".repeat(300);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), 201);
        assert!(clipped.ends_with('…'));
    }
}
