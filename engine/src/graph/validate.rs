//! The snapshot rules. Checked in this order, the first failure wins: graph name, node count,
//! node ids, node fields, start node, each edge in order (shape, source, selector, case keys,
//! targets, one edge per node), then reachability from the start node.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    clip, Edge, Graph, GraphError, NodeKind, MAX_ID_LEN, MAX_MAX_STEPS, MAX_NODES, OUTCOME_NAMES,
};
use crate::graph::route::Selector;

/// Checks every rule; see [`Graph::validate`].
pub(super) fn validate(graph: &Graph) -> Result<(), GraphError> {
    if !is_id(&graph.name) {
        return Err(GraphError::InvalidName {
            name: clip(&graph.name),
        });
    }
    if let Some(max_steps) = graph.max_steps.filter(|n| !(1..=MAX_MAX_STEPS).contains(n)) {
        return Err(GraphError::InvalidMaxSteps { max_steps });
    }
    if graph.nodes.len() > MAX_NODES {
        return Err(GraphError::TooManyNodes {
            count: graph.nodes.len(),
        });
    }
    for (id, node) in &graph.nodes {
        if !is_node_id(id) {
            return Err(GraphError::InvalidNodeId { id: clip(id) });
        }
        if node.timeout_ms == Some(0) {
            return Err(GraphError::ZeroTimeout { node: id.clone() });
        }
        if node.timeout_ms.is_some() && node.timeout_at_start {
            return Err(GraphError::TwoTimeouts { node: id.clone() });
        }
        if node.retry.is_some() && node.kind != NodeKind::Action {
            return Err(GraphError::RetryOnNonAction {
                node: id.clone(),
                kind: node.kind,
            });
        }
    }
    for (path, mount) in &graph.mounts {
        let prefix = format!("{path}.");
        if !is_node_id(path) || !graph.nodes.keys().any(|id| id.starts_with(&prefix)) {
            return Err(GraphError::InvalidMount { path: clip(path) });
        }
        if let Some(max_steps) = mount.max_steps.filter(|n| !(1..=MAX_MAX_STEPS).contains(n)) {
            return Err(GraphError::InvalidMountMaxSteps {
                path: path.clone(),
                max_steps,
            });
        }
    }
    if !graph.nodes.contains_key(&graph.start) {
        return Err(GraphError::MissingStart {
            start: clip(&graph.start),
        });
    }

    let mut outgoing: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, edge) in graph.edges.iter().enumerate() {
        check_edge(graph, index, edge)?;
        if let Some(&first) = outgoing.get(edge.from.as_str()) {
            return Err(GraphError::DuplicateOutgoingEdge {
                from: edge.from.clone(),
                first,
                second: index,
            });
        }
        outgoing.insert(&edge.from, index);
    }

    check_reachability(graph)
}

/// Whether `text` matches `[A-Za-z_][A-Za-z0-9_-]*` and is at most [`MAX_ID_LEN`] long.
pub(super) fn is_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_alphabetic() || *first == b'_' => {}
        _ => return false,
    }
    bytes.len() <= MAX_ID_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

/// Whether `text` is a node id: ids joined by `.` (the mount path of a node of an included
/// workflow, such as `review.check`), at most [`MAX_ID_LEN`] long in all.
pub(super) fn is_node_id(text: &str) -> bool {
    text.len() <= MAX_ID_LEN && text.split('.').all(is_id)
}

/// One edge on its own: shape, source, selector, case keys, targets.
fn check_edge(graph: &Graph, index: usize, edge: &Edge) -> Result<(), GraphError> {
    let from = || clip(&edge.from);
    if !graph.nodes.contains_key(&edge.from) {
        return Err(GraphError::EdgeFromUnknownNode {
            edge: index,
            from: from(),
        });
    }
    let target_exists = |target: &String| -> Result<(), GraphError> {
        if graph.nodes.contains_key(target) {
            Ok(())
        } else {
            Err(GraphError::UnknownTarget {
                edge: index,
                from: from(),
                target: clip(target),
            })
        }
    };
    match (&edge.to, &edge.switch) {
        (None, None) => Err(GraphError::EdgeWithoutTarget {
            edge: index,
            from: from(),
        }),
        (Some(_), Some(_)) => Err(GraphError::EdgeWithTwoTargets {
            edge: index,
            from: from(),
        }),
        (Some(to), None) => target_exists(to),
        (None, Some(switch)) => {
            match Selector::parse(&switch.on) {
                None => {
                    return Err(GraphError::InvalidSwitchOn {
                        edge: index,
                        from: from(),
                        on: clip(&switch.on),
                    })
                }
                Some(Selector::Outcome) => {
                    if let Some(case) = switch
                        .cases
                        .keys()
                        .find(|case| !OUTCOME_NAMES.contains(&case.as_str()))
                    {
                        return Err(GraphError::InvalidOutcomeCase {
                            edge: index,
                            from: from(),
                            case: clip(case),
                        });
                    }
                }
                Some(Selector::Path(_)) => {}
            }
            if switch.cases.is_empty() && switch.default.is_none() {
                return Err(GraphError::EmptySwitch {
                    edge: index,
                    from: from(),
                });
            }
            switch
                .cases
                .values()
                .chain(switch.default.as_ref())
                .try_for_each(target_exists)
        }
    }
}

/// Every node must be reachable from the start node along `to`, case and default targets.
fn check_reachability(graph: &Graph) -> Result<(), GraphError> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&str> = vec![graph.start.as_str()];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for edge in graph.edges.iter().filter(|edge| edge.from == id) {
            let switch_targets = edge
                .switch
                .iter()
                .flat_map(|s| s.cases.values().chain(s.default.as_ref()));
            for target in edge.to.iter().chain(switch_targets) {
                if !seen.contains(target.as_str()) {
                    stack.push(target);
                }
            }
        }
    }
    match graph.nodes.keys().find(|id| !seen.contains(id.as_str())) {
        Some(node) => Err(GraphError::UnreachableNode { node: node.clone() }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A valid two-node graph to break one rule at a time.
    fn base() -> Value {
        json!({
            "name": "g",
            "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "b"}]
        })
    }

    fn parse_err(value: Value) -> GraphError {
        Graph::parse(&value).expect_err("should be refused")
    }

    #[test]
    fn base_is_valid() {
        Graph::parse(&base()).expect("valid");
    }

    #[test]
    fn ids() {
        for good in ["a", "_", "A_b-9", "x-", &"a".repeat(MAX_ID_LEN)] {
            assert!(is_id(good), "{good}");
        }
        for bad in [
            "",
            "9a",
            "-a",
            "a.b",
            "a b",
            "é",
            "a$",
            &"a".repeat(MAX_ID_LEN + 1),
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }

    #[test]
    fn node_ids_may_carry_a_mount_path() {
        for good in ["a", "review.check", "a.b.c-1", "_._"] {
            assert!(is_node_id(good), "{good}");
        }
        for bad in ["", "a.", ".a", "a..b", "a.9b", "a b.c", &"a.".repeat(65)] {
            assert!(!is_node_id(bad), "{bad}");
        }
    }

    #[test]
    fn malformed_shapes() {
        let cases = [
            // unknown fields at every level
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": [], "extra": 1}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "compute", "timeout": 5}}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": [{"from": "a", "too": "a"}]}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "compute"}}, "edges": [{"from": "a", "switch": {"on": "$.x", "case": {}}}]}),
            // missing fields, wrong types, unknown enum values
            json!({"name": "g", "nodes": {"a": {"kind": "compute"}}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": {"a": {}}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "lambda"}}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "action", "retry": "always"}}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "compute", "timeout_ms": -1}}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": {"a": {"kind": "compute", "timeout_ms": 1.5}}, "edges": []}),
            json!({"name": 7, "start": "a", "nodes": {}, "edges": []}),
            json!({"name": "g", "start": "a", "nodes": [], "edges": []}),
            json!(null),
        ];
        for value in cases {
            match Graph::parse(&value) {
                Err(GraphError::Malformed { message }) => assert!(!message.is_empty()),
                other => panic!("{value}: {other:?}"),
            }
        }
    }

    #[test]
    fn invalid_name() {
        let mut v = base();
        v["name"] = json!("my graph");
        assert_eq!(
            parse_err(v),
            GraphError::InvalidName {
                name: "my graph".into()
            }
        );
        let mut v = base();
        v["name"] = json!("x".repeat(129));
        assert!(matches!(parse_err(v), GraphError::InvalidName { .. }));
    }

    #[test]
    fn invalid_node_id() {
        let v = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "1b": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "1b"}]
        });
        assert_eq!(parse_err(v), GraphError::InvalidNodeId { id: "1b".into() });
        let long = "n".repeat(129);
        let v = json!({"name": "g", "start": long, "nodes": {long.clone(): {"kind": "compute"}}, "edges": []});
        assert_eq!(parse_err(v), GraphError::InvalidNodeId { id: long });
    }

    #[test]
    fn invalid_ids_are_clipped_in_errors() {
        let huge = format!("1{}", "x".repeat(10_000));
        let v = json!({"name": "g", "start": huge, "nodes": {huge.clone(): {"kind": "compute"}}, "edges": []});
        let err = parse_err(v);
        assert!(err.to_string().len() < 500, "{err}");
    }

    #[test]
    fn too_many_nodes() {
        let mut nodes = serde_json::Map::new();
        let mut edges = Vec::new();
        for i in 0..=MAX_NODES {
            nodes.insert(format!("n{i}"), json!({"kind": "compute"}));
            if i > 0 {
                edges.push(json!({"from": format!("n{}", i - 1), "to": format!("n{i}")}));
            }
        }
        let v = json!({"name": "g", "start": "n0", "nodes": nodes, "edges": edges});
        assert_eq!(
            parse_err(v.clone()),
            GraphError::TooManyNodes {
                count: MAX_NODES + 1
            }
        );
        // Exactly the limit is fine.
        let mut v = v;
        v["nodes"]
            .as_object_mut()
            .expect("object")
            .remove(&format!("n{MAX_NODES}"));
        v["edges"].as_array_mut().expect("array").pop();
        Graph::parse(&v).expect("1000 nodes are allowed");
    }

    #[test]
    fn missing_start() {
        let mut v = base();
        v["start"] = json!("zzz");
        assert_eq!(
            parse_err(v),
            GraphError::MissingStart {
                start: "zzz".into()
            }
        );
        let v = json!({"name": "g", "start": "a", "nodes": {}, "edges": []});
        assert_eq!(parse_err(v), GraphError::MissingStart { start: "a".into() });
    }

    #[test]
    fn zero_timeout() {
        let mut v = base();
        v["nodes"]["b"]["timeout_ms"] = json!(0);
        assert_eq!(parse_err(v), GraphError::ZeroTimeout { node: "b".into() });
        let mut v = base();
        v["nodes"]["b"]["timeout_ms"] = json!(1);
        Graph::parse(&v).expect("1 ms is allowed");
        let mut v = base();
        v["nodes"]["b"]["timeout_ms"] = json!(u64::MAX);
        Graph::parse(&v).expect("u64::MAX is allowed");
    }

    #[test]
    fn a_deadline_is_fixed_or_decided_at_the_start_not_both() {
        let mut v = base();
        v["nodes"]["b"]["timeout_at_start"] = json!(true);
        let g = Graph::parse(&v).expect("a deadline decided at the start");
        assert!(g.node("b").is_some_and(|n| n.timeout_at_start));
        assert_eq!(Graph::parse(&g.to_value()).expect("round trip"), g);
        v["nodes"]["b"]["timeout_ms"] = json!(5);
        assert_eq!(parse_err(v), GraphError::TwoTimeouts { node: "b".into() });
    }

    #[test]
    fn mounts_name_a_path_with_nodes_and_a_step_limit_in_range() {
        let with_mount = |path: &str, mount: Value| {
            json!({
                "name": "g", "start": "a",
                "nodes": {"a": {"kind": "compute"}, "m.x": {"kind": "compute"}, "m.n.y": {"kind": "compute"}},
                "edges": [{"from": "a", "to": "m.x"}, {"from": "m.x", "to": "m.n.y"}],
                "mounts": {path: mount}
            })
        };
        let g = Graph::parse(&with_mount("m", json!({"max_steps": 3}))).expect("valid mount");
        assert_eq!(g.mounts["m"].step_limit(), 3);
        assert_eq!(Graph::parse(&g.to_value()).expect("round trip"), g);
        let g = Graph::parse(&with_mount("m.n", json!({}))).expect("nested mount, default limit");
        assert_eq!(
            g.mounts["m.n"].step_limit(),
            super::super::DEFAULT_MAX_STEPS
        );
        let paths: Vec<_> = g.mounts_of("m.n.y").map(|(p, _)| p).collect();
        assert_eq!(paths, ["m.n"]);
        assert_eq!(g.mounts_of("m.x").count(), 0);
        assert_eq!(g.mounts_of("m.nope").count(), 0);
        for path in ["q", "m.n.y.z", "a", "1m"] {
            assert_eq!(
                parse_err(with_mount(path, json!({}))),
                GraphError::InvalidMount { path: path.into() }
            );
        }
        for max_steps in [0, MAX_MAX_STEPS + 1] {
            assert_eq!(
                parse_err(with_mount("m", json!({ "max_steps": max_steps }))),
                GraphError::InvalidMountMaxSteps {
                    path: "m".into(),
                    max_steps
                }
            );
        }
    }

    #[test]
    fn retry_on_non_action() {
        for kind in NodeKind::ALL {
            let mut v = base();
            v["nodes"]["b"] = json!({"kind": kind.as_str(), "retry": "read_back"});
            if kind == NodeKind::Action {
                Graph::parse(&v).expect("action may have retry");
            } else {
                assert_eq!(
                    parse_err(v),
                    GraphError::RetryOnNonAction {
                        node: "b".into(),
                        kind
                    }
                );
            }
        }
    }

    #[test]
    fn edge_from_unknown_node() {
        let mut v = base();
        v["edges"] = json!([{"from": "a", "to": "b"}, {"from": "c", "to": "a"}]);
        assert_eq!(
            parse_err(v),
            GraphError::EdgeFromUnknownNode {
                edge: 1,
                from: "c".into()
            }
        );
    }

    #[test]
    fn edge_without_target() {
        let mut v = base();
        v["edges"] = json!([{"from": "a"}]);
        assert_eq!(
            parse_err(v),
            GraphError::EdgeWithoutTarget {
                edge: 0,
                from: "a".into()
            }
        );
    }

    #[test]
    fn edge_with_two_targets() {
        let mut v = base();
        v["edges"] = json!([{"from": "a", "to": "b", "switch": {"on": "$.x", "default": "b"}}]);
        assert_eq!(
            parse_err(v),
            GraphError::EdgeWithTwoTargets {
                edge: 0,
                from: "a".into()
            }
        );
    }

    #[test]
    fn unknown_targets() {
        let bad_edges = [
            json!({"from": "a", "to": "c"}),
            json!({"from": "a", "switch": {"on": "$.x", "cases": {"1": "b", "2": "c"}}}),
            json!({"from": "a", "switch": {"on": "$.x", "cases": {"1": "b"}, "default": "c"}}),
            json!({"from": "a", "switch": {"on": "$result.outcome", "cases": {"failed": "c", "ok": "b"}}}),
        ];
        for edge in bad_edges {
            let mut v = base();
            v["edges"] = json!([edge]);
            assert_eq!(
                parse_err(v),
                GraphError::UnknownTarget {
                    edge: 0,
                    from: "a".into(),
                    target: "c".into()
                },
                "{edge}"
            );
        }
    }

    #[test]
    fn duplicate_outgoing_edge() {
        let mut v = base();
        v["edges"] = json!([
            {"from": "a", "to": "b"},
            {"from": "b", "to": "a"},
            {"from": "a", "switch": {"on": "$.x", "default": "b"}}
        ]);
        assert_eq!(
            parse_err(v),
            GraphError::DuplicateOutgoingEdge {
                from: "a".into(),
                first: 0,
                second: 2
            }
        );
    }

    #[test]
    fn invalid_switch_on() {
        for on in [
            "",
            "$",
            "$.",
            "$..a",
            "$.a.",
            "$.a..b",
            ".a",
            "a",
            "$a",
            "$result",
            "$result.",
            "$result.outcome.x",
            "$result.status",
            "$RESULT.outcome",
            " $.a",
        ] {
            let mut v = base();
            v["edges"] = json!([{"from": "a", "switch": {"on": on, "default": "b"}}]);
            assert_eq!(
                parse_err(v),
                GraphError::InvalidSwitchOn {
                    edge: 0,
                    from: "a".into(),
                    on: on.into()
                },
                "{on:?}"
            );
        }
        for on in ["$.a", "$.a.b.0.c", "$.0", "$.with space", "$.ü"] {
            let mut v = base();
            v["edges"] = json!([{"from": "a", "switch": {"on": on, "default": "b"}}]);
            Graph::parse(&v).unwrap_or_else(|e| panic!("{on:?}: {e}"));
        }
    }

    #[test]
    fn invalid_outcome_case() {
        let mut v = base();
        v["edges"] = json!([{"from": "a", "switch": {
            "on": "$result.outcome",
            "cases": {"ok": "b", "succeeded": "b"}
        }}]);
        assert_eq!(
            parse_err(v),
            GraphError::InvalidOutcomeCase {
                edge: 0,
                from: "a".into(),
                case: "succeeded".into()
            }
        );
        let mut v = base();
        v["edges"] = json!([{"from": "a", "switch": {
            "on": "$result.outcome",
            "cases": {"ok": "b", "failed": "a", "timed_out": "b", "cancelled": "b"}
        }}]);
        Graph::parse(&v).expect("all four outcomes are allowed");
        // Path switches take any case key.
        let mut v = base();
        v["edges"] =
            json!([{"from": "a", "switch": {"on": "$.s", "cases": {"cancelled": "b", "": "b"}}}]);
        Graph::parse(&v).expect("any key on a path switch");
    }

    #[test]
    fn empty_switch() {
        for on in ["$.x", "$result.outcome"] {
            let mut v = base();
            v["edges"] =
                json!([{"from": "a", "switch": {"on": on, "cases": {}}}, {"from": "b", "to": "a"}]);
            assert_eq!(
                parse_err(v),
                GraphError::EmptySwitch {
                    edge: 0,
                    from: "a".into()
                }
            );
        }
    }

    #[test]
    fn unreachable_node() {
        let v = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}, "c": {"kind": "compute"}, "d": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "b"}, {"from": "d", "to": "c"}]
        });
        assert_eq!(
            parse_err(v),
            GraphError::UnreachableNode { node: "c".into() }
        );
        // A node only reachable through a switch default or a failure case counts as reachable.
        let v = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}, "c": {"kind": "compute"}},
            "edges": [
                {"from": "a", "switch": {"on": "$.x", "cases": {"1": "a"}, "default": "b"}},
                {"from": "b", "switch": {"on": "$result.outcome", "cases": {"failed": "c"}}}
            ]
        });
        Graph::parse(&v).expect("reachable through default and failure case");
        // Cycles are fine.
        let v = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]
        });
        Graph::parse(&v).expect("cycle");
    }

    #[test]
    fn first_failure_in_documented_order() {
        // Bad name and a missing start: the name is reported.
        let v = json!({"name": "", "start": "x", "nodes": {"a": {"kind": "compute"}}, "edges": []});
        assert!(matches!(parse_err(v), GraphError::InvalidName { .. }));
        // Bad edge and an unreachable node: the edge is reported.
        let v = json!({
            "name": "g", "start": "a",
            "nodes": {"a": {"kind": "compute"}, "b": {"kind": "compute"}},
            "edges": [{"from": "a", "to": "q"}]
        });
        assert!(matches!(parse_err(v), GraphError::UnknownTarget { .. }));
    }

    #[test]
    fn messages_name_the_culprit() {
        let mut v = base();
        v["edges"] = json!([{"from": "a", "to": "ghost"}]);
        let text = parse_err(v).to_string();
        assert!(
            text.contains("edge 0") && text.contains("\"a\"") && text.contains("\"ghost\""),
            "{text}"
        );
        let mut v = base();
        v["nodes"]["b"]["retry"] = json!("never");
        let text = parse_err(v).to_string();
        assert!(text.contains("\"b\"") && text.contains("compute"), "{text}");
    }
}
