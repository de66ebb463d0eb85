//! Routing: where a run goes after a node ends, and the check of a child's proposal against it.

use std::borrow::Cow;

use serde_json::Value;

use super::{clip, Graph, GraphError, Switch, OUTCOME_SELECTOR};
use crate::protocol::{canonical_json, AttemptOutcome};

/// How a node ended, as the host routes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome<'a> {
    /// The node returned this output.
    Succeeded(&'a Value),
    /// The node failed with this error.
    Failed(&'a str),
    /// The node exceeded its deadline.
    TimedOut,
}

impl Outcome<'_> {
    /// The name a switch on `$result.outcome` matches: `ok`, `failed` or `timed_out` (the
    /// authoring reference's names; `cancelled` is a valid case but never routes, because a
    /// cancelled run ends where it is).
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Succeeded(_) => "ok",
            Outcome::Failed(_) => "failed",
            Outcome::TimedOut => "timed_out",
        }
    }
}

impl<'a> From<&'a AttemptOutcome> for Outcome<'a> {
    /// The routing view of a worker's reported outcome.
    fn from(outcome: &'a AttemptOutcome) -> Self {
        match outcome {
            AttemptOutcome::Succeeded { output } => Outcome::Succeeded(output),
            AttemptOutcome::Failed { error } => Outcome::Failed(error),
            AttemptOutcome::TimedOut => Outcome::TimedOut,
        }
    }
}

/// Where the run goes after a node ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Continue at this node.
    Next(String),
    /// The run completes successfully.
    Complete,
    /// The run fails with this error; `timed_out` when the cause is the node's deadline (the run
    /// then ends `timed_out` rather than `failed`).
    Fail {
        /// Why the run fails: the node's own error, or why no route exists.
        error: String,
        /// Whether the node timed out.
        timed_out: bool,
    },
}

/// A child proposed a transition the graph does not allow. The host fails the run with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused {} from node {from:?}: {}", proposal_text(.proposed), expectation_text(.expected))]
pub struct TransitionRefused {
    /// The node the run is leaving.
    pub from: String,
    /// What the child proposed: `Some(next)` for a transition, `None` for ending the run.
    pub proposed: Option<String>,
    /// What the graph routes instead; `None` when `from` is not a node of the graph.
    pub expected: Option<Route>,
}

fn proposal_text(proposed: &Option<String>) -> String {
    match proposed {
        Some(next) => format!("transition to {next:?}"),
        None => "completion".to_owned(),
    }
}

fn expectation_text(expected: &Option<Route>) -> String {
    match expected {
        None => "it is not a node of the graph".to_owned(),
        Some(Route::Next(next)) => format!("the graph routes this outcome to {next:?}"),
        Some(Route::Complete) => "the graph completes the run here".to_owned(),
        Some(Route::Fail {
            error,
            timed_out: false,
        }) => format!("the graph fails the run here ({})", clip(error)),
        Some(Route::Fail {
            error,
            timed_out: true,
        }) => format!("the graph ends the run timed out here ({})", clip(error)),
    }
}

/// A parsed `switch.on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Selector<'a> {
    /// `$result.outcome`.
    Outcome,
    /// `$.` followed by this path: one or more non-empty dot-separated segments.
    Path(&'a str),
}

impl<'a> Selector<'a> {
    /// Parses a selector; `None` when it is neither form.
    pub(super) fn parse(on: &'a str) -> Option<Selector<'a>> {
        if on == OUTCOME_SELECTOR {
            return Some(Selector::Outcome);
        }
        // `$output.x` is the reference's long spelling of `$.x`.
        let path = on
            .strip_prefix("$.")
            .or_else(|| on.strip_prefix("$output."))?;
        if path.split('.').all(|segment| !segment.is_empty()) {
            Some(Selector::Path(path))
        } else {
            None
        }
    }
}

/// Follows a `$.` path (without the `$.`) into `value`. A segment is a key of an object, or the
/// decimal index (no sign, no leading zero) of an array element; anything else is missing.
fn lookup<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.')
        .try_fold(value, |current, segment| match current {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => array_index(segment).and_then(|index| items.get(index)),
            _ => None,
        })
}

fn array_index(segment: &str) -> Option<usize> {
    let canonical = segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    if canonical {
        segment.parse().ok()
    } else {
        None
    }
}

/// The text a path switch compares with its case keys: a string as itself, anything else as its
/// canonical JSON (`true`, `3`, `null`, `1.5e0`, `{"a":1}`).
fn case_key(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(text) => Cow::Borrowed(text),
        other => Cow::Owned(canonical_json(other)),
    }
}

/// The route when nothing leaves the node for this outcome, or when it failed or timed out and
/// no outcome route catches that: success completes, failure fails, a timeout times out.
fn fall_through(from: &str, outcome: &Outcome<'_>) -> Route {
    match outcome {
        Outcome::Succeeded(_) => Route::Complete,
        Outcome::Failed(error) => Route::Fail {
            error: (*error).to_owned(),
            timed_out: false,
        },
        Outcome::TimedOut => Route::Fail {
            error: format!("node {from} timed out"),
            timed_out: true,
        },
    }
}

impl Graph {
    /// Where the run goes after node `from` ended with `outcome`. The only error is
    /// [`GraphError::UnknownNode`] (and [`GraphError::InvalidSwitchOn`] for a graph that was
    /// never validated).
    ///
    /// - No outgoing edge: success completes the run; failure fails it with the node's error; a
    ///   timeout fails it with `timed_out: true`.
    /// - A `to` edge: success continues there; failure and timeout as above.
    /// - A switch on `$result.outcome`: the case named `ok`, `failed` or `timed_out`, else the
    ///   default. With neither, failure and timeout as above, and success fails the run with
    ///   `no route for outcome ok from node X`.
    /// - A switch on `$.path` (or `$output.path`) routes successes only: the value at the path (a string as itself,
    ///   anything else as canonical JSON; a missing value matches no case) picks a case, else the
    ///   default, else the run fails with `no case of switch on $.path matches value V from node
    ///   X`. Failure and timeout as above.
    pub fn route(&self, from: &str, outcome: &Outcome<'_>) -> Result<Route, GraphError> {
        if !self.nodes.contains_key(from) {
            return Err(GraphError::UnknownNode { node: clip(from) });
        }
        let Some(edge) = self.outgoing(from) else {
            return Ok(fall_through(from, outcome));
        };
        if let Some(to) = &edge.to {
            return Ok(match outcome {
                Outcome::Succeeded(_) => Route::Next(to.clone()),
                _ => fall_through(from, outcome),
            });
        }
        let Some(switch) = &edge.switch else {
            return Ok(fall_through(from, outcome));
        };
        match Selector::parse(&switch.on) {
            None => Err(GraphError::InvalidSwitchOn {
                edge: self.edges.iter().position(|e| e.from == from).unwrap_or(0),
                from: clip(from),
                on: clip(&switch.on),
            }),
            Some(Selector::Outcome) => Ok(match pick(switch, outcome.name()) {
                Some(next) => Route::Next(next),
                None => match outcome {
                    Outcome::Succeeded(_) => Route::Fail {
                        error: format!("no route for outcome ok from node {from}"),
                        timed_out: false,
                    },
                    _ => fall_through(from, outcome),
                },
            }),
            Some(Selector::Path(path)) => {
                let Outcome::Succeeded(output) = outcome else {
                    return Ok(fall_through(from, outcome));
                };
                let value = lookup(output, path);
                let picked = match value {
                    Some(value) => pick(switch, &case_key(value)),
                    None => switch.default.clone(),
                };
                Ok(match picked {
                    Some(next) => Route::Next(next),
                    None => {
                        let shown = match value {
                            Some(value) => clip(&canonical_json(value)),
                            None => "(missing)".to_owned(),
                        };
                        Route::Fail {
                            error: format!(
                                "no case of switch on {} matches value {shown} from node {from}",
                                switch.on
                            ),
                            timed_out: false,
                        }
                    }
                })
            }
        }
    }

    /// Checks a child's proposal after node `from` ended with `outcome`: `Some(next)` to continue
    /// at `next`, `None` to complete the run.
    ///
    /// The proposal is accepted only when it is exactly what [`Graph::route`] says: `Some(next)`
    /// for `Route::Next(next)`, `None` for `Route::Complete`. So `Ok` always carries the route
    /// the child proposed, and a caller may act on the proposal. Where the graph fails the run
    /// (`Route::Fail`), every proposal is refused, and the refusal's `expected` carries the
    /// failure (with `timed_out`); a host that wants to end such a run with the node's own error
    /// rather than the refusal calls [`Graph::route`] instead.
    pub fn check_transition(
        &self,
        from: &str,
        outcome: &Outcome<'_>,
        proposed_next: Option<&str>,
    ) -> Result<Route, TransitionRefused> {
        let refuse = |expected: Option<Route>| TransitionRefused {
            from: clip(from),
            proposed: proposed_next.map(clip),
            expected,
        };
        let route = self.route(from, outcome).map_err(|_| refuse(None))?;
        let agrees = match (&route, proposed_next) {
            (Route::Next(next), Some(proposed)) => next == proposed,
            (Route::Complete, None) => true,
            _ => false,
        };
        if agrees {
            Ok(route)
        } else {
            Err(refuse(Some(route)))
        }
    }
}

/// The case `key`, else the default.
fn pick(switch: &Switch, key: &str) -> Option<String> {
    switch.cases.get(key).or(switch.default.as_ref()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Edge, Node, NodeKind};
    use serde_json::json;

    fn graph(edges: Value) -> Graph {
        Graph::parse(&json!({
            "name": "g", "start": "a",
            "nodes": {
                "a": {"kind": "compute"}, "b": {"kind": "compute"},
                "c": {"kind": "compute"}, "d": {"kind": "compute"}
            },
            "edges": edges
        }))
        .expect("valid")
    }

    /// `a` switches on `on` with these cases/default; b, c, d hang off `a` so all are reachable
    /// whatever the switch (b → c → d).
    fn switch_graph(on: &str, cases: Value, default: Option<&str>) -> Graph {
        let mut switch = json!({"on": on, "cases": cases});
        if let Some(default) = default {
            switch["default"] = json!(default);
        }
        let mut g = graph(json!([
            {"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "d"}
        ]));
        g.edges[0] = Edge {
            from: "a".into(),
            to: None,
            switch: Some(serde_json::from_value(switch).expect("switch")),
        };
        g.validate().expect("still valid");
        g
    }

    fn next(id: &str) -> Route {
        Route::Next(id.into())
    }

    fn fail(error: &str) -> Route {
        Route::Fail {
            error: error.into(),
            timed_out: false,
        }
    }

    fn timed_out(node: &str) -> Route {
        Route::Fail {
            error: format!("node {node} timed out"),
            timed_out: true,
        }
    }

    const OK: Outcome<'static> = Outcome::Succeeded(&Value::Null);

    #[test]
    fn outcome_names() {
        assert_eq!(OK.name(), "ok");
        assert_eq!(Outcome::Failed("x").name(), "failed");
        assert_eq!(Outcome::TimedOut.name(), "timed_out");
    }

    #[test]
    fn from_attempt_outcome() {
        let succeeded = AttemptOutcome::Succeeded {
            output: json!({"a": 1}),
        };
        assert_eq!(
            Outcome::from(&succeeded),
            Outcome::Succeeded(&json!({"a": 1}))
        );
        let failed = AttemptOutcome::Failed {
            error: "boom".into(),
        };
        assert_eq!(Outcome::from(&failed), Outcome::Failed("boom"));
        assert_eq!(Outcome::from(&AttemptOutcome::TimedOut), Outcome::TimedOut);
    }

    #[test]
    fn unknown_node() {
        let g = graph(
            json!([{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "d"}]),
        );
        assert_eq!(
            g.route("zz", &OK),
            Err(GraphError::UnknownNode { node: "zz".into() })
        );
    }

    #[test]
    fn no_outgoing_edge() {
        let g = graph(
            json!([{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "d"}]),
        );
        assert_eq!(g.route("d", &OK), Ok(Route::Complete));
        assert_eq!(g.route("d", &Outcome::Failed("boom")), Ok(fail("boom")));
        assert_eq!(g.route("d", &Outcome::TimedOut), Ok(timed_out("d")));
    }

    #[test]
    fn to_edge() {
        let g = graph(
            json!([{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "d"}]),
        );
        assert_eq!(g.route("a", &OK), Ok(next("b")));
        assert_eq!(g.route("a", &Outcome::Failed("boom")), Ok(fail("boom")));
        assert_eq!(g.route("a", &Outcome::TimedOut), Ok(timed_out("a")));
    }

    #[test]
    fn outcome_switch_cases() {
        let g = switch_graph(
            "$result.outcome",
            json!({"ok": "b", "failed": "c", "timed_out": "d"}),
            None,
        );
        assert!(g.has_outcome_route("a"));
        assert_eq!(g.route("a", &OK), Ok(next("b")));
        assert_eq!(g.route("a", &Outcome::Failed("boom")), Ok(next("c")));
        assert_eq!(g.route("a", &Outcome::TimedOut), Ok(next("d")));
    }

    #[test]
    fn outcome_switch_default() {
        let g = switch_graph("$result.outcome", json!({"failed": "c"}), Some("b"));
        assert_eq!(g.route("a", &OK), Ok(next("b")));
        assert_eq!(g.route("a", &Outcome::Failed("boom")), Ok(next("c")));
        assert_eq!(g.route("a", &Outcome::TimedOut), Ok(next("b")));
    }

    #[test]
    fn outcome_switch_without_match() {
        let g = switch_graph("$result.outcome", json!({"failed": "b"}), None);
        assert_eq!(
            g.route("a", &OK),
            Ok(fail("no route for outcome ok from node a"))
        );
        assert_eq!(g.route("a", &Outcome::TimedOut), Ok(timed_out("a")));
        let g = switch_graph("$result.outcome", json!({"ok": "b"}), None);
        assert_eq!(g.route("a", &Outcome::Failed("boom")), Ok(fail("boom")));
    }

    #[test]
    fn path_switch_matches_strings_and_json_text() {
        let g = switch_graph(
            "$.r",
            json!({"ok": "b", "true": "c", "3": "d", "null": "b", "1.5e0": "c", "[1,2]": "d", "{\"a\":1,\"b\":2}": "b"}),
            None,
        );
        let cases = [
            (json!({"r": "ok"}), "b"),
            (json!({"r": true}), "c"),
            (json!({"r": "true"}), "c"),
            (json!({"r": 3}), "d"),
            (json!({"r": "3"}), "d"),
            (json!({"r": null}), "b"),
            (json!({"r": 1.5}), "c"),
            (json!({"r": [1, 2]}), "d"),
            (json!({"r": {"b": 2, "a": 1}}), "b"),
        ];
        for (output, expected) in cases {
            assert_eq!(
                g.route("a", &Outcome::Succeeded(&output)),
                Ok(next(expected)),
                "{output}"
            );
        }
    }

    #[test]
    fn path_switch_follows_nested_keys_and_indices() {
        let g = switch_graph("$.a.b.0.c", json!({"hit": "b"}), Some("c"));
        let hit = json!({"a": {"b": [{"c": "hit"}, {"c": "other"}]}});
        assert_eq!(g.route("a", &Outcome::Succeeded(&hit)), Ok(next("b")));
        // A numeric segment on an object is a key.
        let object_key = json!({"a": {"b": {"0": {"c": "hit"}}}});
        assert_eq!(
            g.route("a", &Outcome::Succeeded(&object_key)),
            Ok(next("b"))
        );
        // Missing at any step goes to the default.
        for missing in [
            json!({}),
            json!({"a": 1}),
            json!({"a": {"b": []}}),
            json!({"a": {"b": [{"d": "hit"}]}}),
            json!("hit"),
            json!(null),
        ] {
            assert_eq!(
                g.route("a", &Outcome::Succeeded(&missing)),
                Ok(next("c")),
                "{missing}"
            );
        }
    }

    #[test]
    fn array_indices_are_canonical_decimals() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        for bad in ["", "01", "+1", "-1", "1a", " 1", "99999999999999999999999"] {
            assert_eq!(array_index(bad), None, "{bad:?}");
        }
        let list = json!(["x", "y"]);
        assert_eq!(lookup(&list, "1"), Some(&json!("y")));
        assert_eq!(lookup(&list, "01"), None);
        assert_eq!(lookup(&list, "2"), None);
    }

    #[test]
    fn path_switch_without_match() {
        let g = switch_graph("$.status", json!({"ok": "b"}), None);
        let output = json!({"status": "nope"});
        assert_eq!(
            g.route("a", &Outcome::Succeeded(&output)),
            Ok(fail(
                "no case of switch on $.status matches value \"nope\" from node a"
            ))
        );
        let output = json!({"status": 7});
        assert_eq!(
            g.route("a", &Outcome::Succeeded(&output)),
            Ok(fail(
                "no case of switch on $.status matches value 7 from node a"
            ))
        );
        let output = json!({});
        assert_eq!(
            g.route("a", &Outcome::Succeeded(&output)),
            Ok(fail(
                "no case of switch on $.status matches value (missing) from node a"
            ))
        );
    }

    #[test]
    fn path_switch_value_in_the_error_is_clipped() {
        let g = switch_graph("$.status", json!({"ok": "b"}), None);
        let output = json!({"status": "x".repeat(100_000)});
        let Ok(Route::Fail { error, .. }) = g.route("a", &Outcome::Succeeded(&output)) else {
            panic!("expected a failure");
        };
        assert!(error.len() < 400, "{}", error.len());
    }

    #[test]
    fn path_switch_default() {
        let g = switch_graph("$.status", json!({"ok": "b"}), Some("c"));
        let output = json!({"status": "nope"});
        assert_eq!(g.route("a", &Outcome::Succeeded(&output)), Ok(next("c")));
        let output = json!({"status": "ok"});
        assert_eq!(g.route("a", &Outcome::Succeeded(&output)), Ok(next("b")));
    }

    #[test]
    fn path_switch_routes_successes_only() {
        // Even a case literally named like an outcome, and a default, do not catch failures.
        let g = switch_graph(
            "$.status",
            json!({"failed": "b", "timed_out": "b"}),
            Some("c"),
        );
        assert!(!g.has_outcome_route("a"));
        assert_eq!(g.route("a", &Outcome::Failed("boom")), Ok(fail("boom")));
        assert_eq!(g.route("a", &Outcome::TimedOut), Ok(timed_out("a")));
    }

    #[test]
    fn unvalidated_graphs_do_not_panic() {
        let node = Node {
            kind: NodeKind::Compute,
            timeout_ms: None,
            timeout_at_start: false,
            retry: None,
        };
        let mut g = graph(
            json!([{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "d"}]),
        );
        g.nodes.insert("e".into(), node);
        g.edges.push(Edge {
            from: "d".into(),
            to: None,
            switch: Some(Switch {
                on: "bogus".into(),
                cases: Default::default(),
                default: None,
            }),
        });
        g.edges.push(Edge {
            from: "e".into(),
            to: None,
            switch: None,
        });
        assert!(matches!(
            g.route("d", &OK),
            Err(GraphError::InvalidSwitchOn { edge: 3, .. })
        ));
        assert_eq!(g.route("e", &OK), Ok(Route::Complete));
        assert!(g.validate().is_err());
    }

    #[test]
    fn check_transition_accepts_agreement() {
        let g = switch_graph("$result.outcome", json!({"failed": "c"}), Some("b"));
        assert_eq!(g.check_transition("a", &OK, Some("b")), Ok(next("b")));
        assert_eq!(
            g.check_transition("a", &Outcome::Failed("x"), Some("c")),
            Ok(next("c"))
        );
        assert_eq!(g.check_transition("d", &OK, None), Ok(Route::Complete));
    }

    #[test]
    fn check_transition_refuses_completion_where_the_graph_fails() {
        let g = switch_graph("$result.outcome", json!({"failed": "c"}), Some("b"));
        // A failure or timeout nothing routes: even "complete" is refused, carrying the failure.
        let refused = g
            .check_transition("d", &Outcome::Failed("boom"), None)
            .expect_err("refused");
        assert_eq!(refused.expected, Some(fail("boom")));
        assert_eq!(
            refused.to_string(),
            "refused completion from node \"d\": the graph fails the run here (boom)"
        );
        let refused = g
            .check_transition("b", &Outcome::TimedOut, None)
            .expect_err("refused");
        assert_eq!(refused.expected, Some(timed_out("b")));
        assert_eq!(
            refused.to_string(),
            "refused completion from node \"b\": the graph ends the run timed out here (node b timed out)"
        );
    }

    #[test]
    fn check_transition_refuses_disagreement() {
        let g = switch_graph("$.s", json!({"x": "c", "to_b": "b"}), None);
        let out = json!({"s": "x"});
        let ok = Outcome::Succeeded(&out);
        // Wrong next node.
        let refused = g
            .check_transition("a", &ok, Some("d"))
            .expect_err("refused");
        assert_eq!(
            refused,
            TransitionRefused {
                from: "a".into(),
                proposed: Some("d".into()),
                expected: Some(next("c")),
            }
        );
        assert_eq!(
            refused.to_string(),
            "refused transition to \"d\" from node \"a\": the graph routes this outcome to \"c\""
        );
        // Completion where the graph continues.
        let refused = g.check_transition("a", &ok, None).expect_err("refused");
        assert_eq!(
            refused.to_string(),
            "refused completion from node \"a\": the graph routes this outcome to \"c\""
        );
        // A transition where the graph completes.
        let refused = g
            .check_transition("d", &OK, Some("a"))
            .expect_err("refused");
        assert_eq!(refused.expected, Some(Route::Complete));
        assert!(
            refused.to_string().contains("completes the run"),
            "{refused}"
        );
        // A transition after a failure the graph does not route.
        let refused = g
            .check_transition("b", &Outcome::Failed("boom"), Some("c"))
            .expect_err("refused");
        assert_eq!(refused.expected, Some(fail("boom")));
        assert!(
            refused.to_string().contains("fails the run here (boom)"),
            "{refused}"
        );
        let refused = g
            .check_transition("b", &Outcome::TimedOut, Some("c"))
            .expect_err("refused");
        assert!(refused.to_string().contains("timed out"), "{refused}");
        // Completion claimed after a success the graph cannot route.
        let other = json!({"s": "y"});
        let refused = g
            .check_transition("a", &Outcome::Succeeded(&other), None)
            .expect_err("refused");
        assert!(matches!(refused.expected, Some(Route::Fail { .. })));
        // Unknown source node.
        let refused = g
            .check_transition("zz", &OK, Some("a"))
            .expect_err("refused");
        assert_eq!(refused.expected, None);
        assert_eq!(
            refused.to_string(),
            "refused transition to \"a\" from node \"zz\": it is not a node of the graph"
        );
        // A proposal naming a node that does not exist.
        let refused = g
            .check_transition("b", &OK, Some("ghost"))
            .expect_err("refused");
        assert_eq!(refused.expected, Some(next("c")));
    }

    #[test]
    fn refusal_clips_huge_proposals() {
        let g = switch_graph("$.s", json!({"x": "c", "to_b": "b"}), None);
        let huge = "n".repeat(50_000);
        let refused = g
            .check_transition("b", &OK, Some(&huge))
            .expect_err("refused");
        assert!(refused.to_string().len() < 600);
    }
}
