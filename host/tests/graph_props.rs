//! Property tests of the graph snapshot: random valid graphs (a chain of nodes, each leaving by
//! a `to` edge or a random switch that may jump back to earlier nodes) and random outputs.
//!
//! - every generated graph parses (the generator and the validator agree);
//! - `route` never panics, answers for every node and outcome, and every `Next` exists;
//! - `check_transition` accepts exactly the routed proposal (none where the graph fails the
//!   run) and refuses every other node;
//! - `parse(to_value(g)) == g`, and the digest is the same whatever the key order of the JSON
//!   text (sorted, reversed) the snapshot arrives in;
//! - parsing a randomly damaged snapshot never panics.

use std::collections::BTreeSet;

use piw_host::graph::{Graph, Outcome, Route};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const OUTCOMES: [&str; 3] = ["ok", "failed", "timed_out"];
const PATHS: [&str; 5] = ["$.status", "$.a.b", "$.items.0", "$.0", "$.items.1.status"];
const CASE_KEYS: [&str; 8] = ["ok", "retry", "1", "true", "null", "x", "1.5e0", "[]"];
const KINDS: [&str; 7] = [
    "compute",
    "action",
    "agent",
    "assistant_message",
    "checkpoint",
    "human_decision",
    "notify",
];
const RETRIES: [&str; 3] = ["never", "idempotency_key", "read_back"];

/// The random choices for one node and the edge leaving it.
#[derive(Debug, Clone)]
struct NodeChoice {
    kind: usize,
    timeout_ms: Option<u64>,
    retry: Option<usize>,
    /// 0: `to` the next node; 1: switch on `$result.outcome`; 2: switch on a path; 3: no edge
    /// (only honoured for the last node).
    edge: u8,
    path: usize,
    /// (case key index, target index before reduction) for path switches.
    cases: Vec<(usize, usize)>,
    /// Target index per outcome for outcome switches.
    outcome_cases: [Option<usize>; 3],
    default: Option<usize>,
    /// Reach the next node through the default (else through a case).
    next_via_default: bool,
    /// Which case carries the next node when not via the default.
    next_case: usize,
}

fn node_choice() -> impl Strategy<Value = NodeChoice> {
    (
        (
            0..KINDS.len(),
            prop::option::of(1u64..1_000_000),
            prop::option::of(0..RETRIES.len()),
            0u8..4,
            0..PATHS.len(),
        ),
        (
            prop::collection::vec((0..CASE_KEYS.len(), any::<usize>()), 0..4),
            [
                prop::option::of(any::<usize>()),
                prop::option::of(any::<usize>()),
                prop::option::of(any::<usize>()),
            ],
            prop::option::of(any::<usize>()),
            any::<bool>(),
            any::<usize>(),
        ),
    )
        .prop_map(
            |(
                (kind, timeout_ms, retry, edge, path),
                (cases, outcome_cases, default, next_via_default, next_case),
            )| NodeChoice {
                kind,
                timeout_ms,
                retry,
                edge,
                path,
                cases,
                outcome_cases,
                default,
                next_via_default,
                next_case,
            },
        )
}

/// Node ids (unique, shuffled so the chain order is not the id order) and one choice per node.
fn graph_spec() -> impl Strategy<Value = (String, Vec<String>, Vec<NodeChoice>)> {
    (
        "[A-Za-z_][A-Za-z0-9_-]{0,20}",
        prop::collection::btree_set("[A-Za-z_][A-Za-z0-9_-]{0,12}", 1..14),
    )
        .prop_flat_map(|(name, ids)| {
            let n = ids.len();
            (
                Just(name),
                Just(ids.into_iter().collect::<Vec<_>>()).prop_shuffle(),
                prop::collection::vec(node_choice(), n),
            )
        })
}

/// Builds the snapshot JSON: node `i` reaches node `i + 1`; other targets are nodes `0..=i+1`.
fn build(name: &str, ids: &[String], choices: &[NodeChoice]) -> Value {
    let n = ids.len();
    let mut nodes = Map::new();
    let mut edges = Vec::new();
    for (i, choice) in choices.iter().enumerate() {
        let kind = KINDS[choice.kind];
        let mut node = json!({"kind": kind});
        if let Some(t) = choice.timeout_ms {
            node["timeout_ms"] = json!(t);
        }
        if let (Some(r), "action") = (choice.retry, kind) {
            node["retry"] = json!(RETRIES[r]);
        }
        nodes.insert(ids[i].clone(), node);

        let last = i + 1 == n;
        let reach = (i + 2).min(n); // targets are 0..reach
        let target = |raw: usize| ids[raw % reach].clone();
        let next = (!last).then(|| ids[i + 1].clone());
        let edge = match (choice.edge, last) {
            (3, true) => None,
            (0, false) | (3, false) => Some(json!({"from": ids[i], "to": next})),
            (0, true) => Some(json!({"from": ids[i], "to": target(choice.next_case)})),
            (1, _) => {
                let mut cases = Map::new();
                for (k, raw) in choice.outcome_cases.iter().enumerate() {
                    if let Some(raw) = raw {
                        cases.insert(OUTCOMES[k].into(), json!(target(*raw)));
                    }
                }
                let mut default = choice.default.map(target);
                if let Some(next) = next {
                    if choice.next_via_default {
                        default = Some(next);
                    } else {
                        cases.insert(OUTCOMES[choice.next_case % 3].into(), json!(next));
                    }
                } else if cases.is_empty() && default.is_none() {
                    default = Some(target(choice.next_case));
                }
                Some(switch(&ids[i], "$result.outcome", cases, default))
            }
            _ => {
                let mut cases = Map::new();
                for (key, raw) in &choice.cases {
                    cases.insert(CASE_KEYS[*key].into(), json!(target(*raw)));
                }
                let mut default = choice.default.map(target);
                if let Some(next) = next {
                    if choice.next_via_default {
                        default = Some(next);
                    } else {
                        let key = CASE_KEYS[choice.next_case % CASE_KEYS.len()];
                        cases.insert(key.into(), json!(next));
                    }
                } else if cases.is_empty() && default.is_none() {
                    default = Some(target(choice.next_case));
                }
                Some(switch(&ids[i], PATHS[choice.path], cases, default))
            }
        };
        edges.extend(edge);
    }
    json!({"name": name, "start": ids[0], "nodes": nodes, "edges": edges})
}

fn switch(from: &str, on: &str, cases: Map<String, Value>, default: Option<String>) -> Value {
    let mut switch = json!({"on": on, "cases": cases});
    if let Some(default) = default {
        switch["default"] = json!(default);
    }
    json!({"from": from, "switch": switch})
}

/// Random node outputs whose keys often hit the generated paths.
fn output() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..4).prop_map(Value::from),
        Just(json!(1.5)),
        prop::sample::select(vec!["ok", "retry", "x", "1", "true", "null"]).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["status", "a", "b", "items", "0", "1"]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// JSON text with every object's members in sorted or reverse-sorted key order.
fn text(value: &Value, reverse: bool) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            if reverse {
                keys.reverse();
            }
            let members: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}: {}",
                        serde_json::to_string(k).expect("key"),
                        text(&map[k], reverse)
                    )
                })
                .collect();
            format!("{{ {} }}", members.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| text(v, reverse)).collect();
            format!("[{}]", items.join(", "))
        }
        other => serde_json::to_string(other).expect("scalar"),
    }
}

fn check_routes(g: &Graph, outcome: &Outcome<'_>) -> Result<(), TestCaseError> {
    for from in g.nodes.keys() {
        let route = g
            .route(from, outcome)
            .map_err(|e| TestCaseError::fail(format!("route({from}) errored: {e}")))?;
        let proposal = match &route {
            Route::Next(next) => {
                prop_assert!(g.nodes.contains_key(next), "{next} is not a node");
                Some(next.as_str())
            }
            Route::Complete => {
                prop_assert!(matches!(outcome, Outcome::Succeeded(_)));
                None
            }
            Route::Fail { timed_out, error } => {
                prop_assert_eq!(*timed_out, matches!(outcome, Outcome::TimedOut));
                prop_assert!(!error.is_empty());
                None
            }
        };
        // A timeout is only ever routed by a switch on $result.outcome.
        if matches!(outcome, Outcome::TimedOut) && matches!(route, Route::Next(_)) {
            prop_assert!(g.has_outcome_route(from));
        }
        // The routed proposal is accepted when the graph continues or completes; where it
        // fails the run, every proposal (even completion) is refused and carries the failure.
        let accepted = g.check_transition(from, outcome, proposal);
        if matches!(route, Route::Fail { .. }) {
            prop_assert_eq!(accepted.map_err(|r| r.expected), Err(Some(route.clone())));
        } else {
            prop_assert_eq!(accepted, Ok(route.clone()));
        }
        for other in g.nodes.keys() {
            if Some(other.as_str()) != proposal {
                prop_assert!(g.check_transition(from, outcome, Some(other)).is_err());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn generated_graphs_parse_route_and_round_trip(
        (name, ids, choices) in graph_spec(),
        outputs in prop::collection::vec(output(), 1..5),
        error in "[ -~]{1,20}",
    ) {
        let value = build(&name, &ids, &choices);
        let g = Graph::parse(&value)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{value:#}")))?;

        // Routing.
        for out in &outputs {
            check_routes(&g, &Outcome::Succeeded(out))?;
        }
        check_routes(&g, &Outcome::Failed(&error))?;
        check_routes(&g, &Outcome::TimedOut)?;

        // Round trip.
        let again = Graph::parse(&g.to_value()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&again, &g);
        prop_assert_eq!(again.to_value(), g.to_value());

        // Digest under key order.
        let digest = g.digest();
        prop_assert_eq!(digest.len(), 64);
        for reverse in [false, true] {
            let text = text(&value, reverse);
            let reparsed: Value = serde_json::from_str(&text).expect("valid json text");
            let other = Graph::parse(&reparsed).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&other, &g);
            prop_assert_eq!(other.digest(), digest.clone());
        }
    }

    #[test]
    fn damaged_snapshots_never_panic(
        (name, ids, choices) in graph_spec(),
        damage in prop::collection::vec((0u8..8, any::<usize>(), "[a-z$._0-9]{0,6}"), 1..4),
    ) {
        let mut value = build(&name, &ids, &choices);
        for (what, pick, text) in damage {
            let edges_len = value["edges"].as_array().map_or(0, Vec::len);
            let node = ids[pick % ids.len()].clone();
            match what {
                0 => value["start"] = json!(text),
                1 => value["nodes"][&node]["timeout_ms"] = json!(pick % 3),
                2 => value["nodes"][&node]["retry"] = json!("never"),
                3 if edges_len > 0 => value["edges"][pick % edges_len]["to"] = json!(text),
                4 if edges_len > 0 => {
                    value["edges"].as_array_mut().expect("edges").remove(pick % edges_len);
                }
                5 if edges_len > 0 => {
                    let copy = value["edges"][pick % edges_len].clone();
                    value["edges"].as_array_mut().expect("edges").push(copy);
                }
                6 if edges_len > 0 => {
                    value["edges"][pick % edges_len]["switch"] = json!({"on": text, "cases": {}});
                }
                7 => value["nodes"][&node]["extra"] = json!(text),
                _ => value["name"] = json!(text),
            }
        }
        // Either refused with a message, or a graph that routes without panicking.
        match Graph::parse(&value) {
            Err(e) => prop_assert!(!e.to_string().is_empty()),
            Ok(g) => {
                let ids: BTreeSet<&String> = g.nodes.keys().collect();
                for from in &ids {
                    for outcome in [Outcome::Succeeded(&Value::Null), Outcome::Failed("e"), Outcome::TimedOut] {
                        if let Ok(Route::Next(next)) = g.route(from, &outcome) {
                            prop_assert!(ids.contains(&next));
                        }
                    }
                }
            }
        }
    }
}
