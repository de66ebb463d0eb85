//! A realistic graph snapshot (the issue's `pipeline` example) through every routing branch,
//! and a whole run walked through `check_transition` the way the host will.

use piw_host::graph::{Graph, GraphError, NodeKind, Outcome, Route, TransitionRefused};
use piw_host::store::RetryContract;
use serde_json::{json, Value};

/// The issue's example, verbatim. `ship` has no incoming edge.
fn issue_example() -> Value {
    json!({
        "name": "pipeline",
        "start": "fetch",
        "nodes": {
            "fetch":  {"kind": "compute", "timeout_ms": 5000},
            "pay":    {"kind": "action", "retry": "idempotency_key"},
            "ask":    {"kind": "agent", "timeout_ms": 600000},
            "msg":    {"kind": "assistant_message"},
            "ok":     {"kind": "checkpoint"},
            "ship":   {"kind": "human_decision"},
            "tell":   {"kind": "notify"}
        },
        "edges": [
            {"from": "fetch", "to": "pay"},
            {"from": "pay", "switch": {"on": "$.status", "cases": {"ok": "tell", "retry": "fetch"}, "default": "ask"}},
            {"from": "ask", "switch": {"on": "$result.outcome", "cases": {"ok": "ok", "timed_out": "msg"}}}
        ]
    })
}

/// The example with `ok → ship` added, so every node is reachable.
fn pipeline_value() -> Value {
    let mut value = issue_example();
    value["edges"]
        .as_array_mut()
        .expect("edges")
        .push(json!({"from": "ok", "to": "ship"}));
    value
}

fn pipeline() -> Graph {
    Graph::parse(&pipeline_value()).expect("the pipeline is valid")
}

fn next(id: &str) -> Route {
    Route::Next(id.to_owned())
}

fn fail(error: &str) -> Route {
    Route::Fail {
        error: error.to_owned(),
        timed_out: false,
    }
}

fn timed_out(node: &str) -> Route {
    Route::Fail {
        error: format!("node {node} timed out"),
        timed_out: true,
    }
}

fn succeeded(output: &Value) -> Outcome<'_> {
    Outcome::Succeeded(output)
}

#[test]
fn the_verbatim_example_is_refused_because_ship_is_unreachable() {
    assert_eq!(
        Graph::parse(&issue_example()),
        Err(GraphError::UnreachableNode {
            node: "ship".into()
        })
    );
}

#[test]
fn nodes_keep_their_kinds_timeouts_and_contracts() {
    let g = pipeline();
    let kind = |id: &str| g.node(id).expect("node").kind;
    assert_eq!(kind("fetch"), NodeKind::Compute);
    assert_eq!(kind("pay"), NodeKind::Action);
    assert_eq!(kind("ask"), NodeKind::Agent);
    assert_eq!(kind("msg"), NodeKind::AssistantMessage);
    assert_eq!(kind("ok"), NodeKind::Checkpoint);
    assert_eq!(kind("ship"), NodeKind::HumanDecision);
    assert_eq!(kind("tell"), NodeKind::Notify);
    let interactive: Vec<&str> = g
        .nodes
        .iter()
        .filter(|(_, n)| n.kind.is_interactive())
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(interactive, ["ask", "msg"]);
    assert_eq!(g.node("fetch").and_then(|n| n.timeout_ms), Some(5000));
    assert_eq!(g.node("ask").and_then(|n| n.timeout_ms), Some(600_000));
    assert_eq!(g.node("tell").and_then(|n| n.timeout_ms), None);
    assert_eq!(
        g.node("pay").and_then(|n| n.retry_contract()),
        Some(RetryContract::IdempotencyKey)
    );
    assert_eq!(g.node("fetch").and_then(|n| n.retry_contract()), None);
}

#[test]
fn fetch_is_an_unconditional_edge() {
    let g = pipeline();
    assert!(!g.has_outcome_route("fetch"));
    assert_eq!(g.route("fetch", &succeeded(&json!({}))), Ok(next("pay")));
    assert_eq!(
        g.route("fetch", &Outcome::Failed("upstream 503")),
        Ok(fail("upstream 503"))
    );
    assert_eq!(g.route("fetch", &Outcome::TimedOut), Ok(timed_out("fetch")));
}

#[test]
fn pay_switches_on_the_output_status() {
    let g = pipeline();
    assert!(!g.has_outcome_route("pay"));
    let cases = [
        (json!({"status": "ok", "amount": 12}), "tell"),
        (json!({"status": "retry"}), "fetch"),
        (json!({"status": "declined"}), "ask"),
        (json!({"status": 7}), "ask"),
        (json!({"status": null}), "ask"),
        (json!({"state": "ok"}), "ask"),
        (json!("ok"), "ask"),
        (json!(null), "ask"),
    ];
    for (output, expected) in cases {
        assert_eq!(
            g.route("pay", &succeeded(&output)),
            Ok(next(expected)),
            "{output}"
        );
    }
    // A path switch does not route failures or timeouts, default or not.
    assert_eq!(
        g.route("pay", &Outcome::Failed("card declined")),
        Ok(fail("card declined"))
    );
    assert_eq!(g.route("pay", &Outcome::TimedOut), Ok(timed_out("pay")));
}

#[test]
fn ask_switches_on_the_outcome() {
    let g = pipeline();
    assert!(g.has_outcome_route("ask"));
    assert_eq!(g.route("ask", &succeeded(&json!("done"))), Ok(next("ok")));
    assert_eq!(g.route("ask", &Outcome::TimedOut), Ok(next("msg")));
    // No `failed` case and no default: the failure ends the run.
    assert_eq!(
        g.route("ask", &Outcome::Failed("model refused")),
        Ok(fail("model refused"))
    );
}

#[test]
fn ok_continues_and_the_leaves_complete() {
    let g = pipeline();
    assert_eq!(g.route("ok", &succeeded(&json!(true))), Ok(next("ship")));
    for leaf in ["ship", "tell", "msg"] {
        assert!(!g.has_outcome_route(leaf));
        assert_eq!(
            g.route(leaf, &succeeded(&json!({}))),
            Ok(Route::Complete),
            "{leaf}"
        );
        assert_eq!(g.route(leaf, &Outcome::Failed("x")), Ok(fail("x")));
        assert_eq!(g.route(leaf, &Outcome::TimedOut), Ok(timed_out(leaf)));
    }
}

#[test]
fn unmatched_switches_fail_with_a_reason() {
    // Without its default, `pay` cannot route an unknown status.
    let mut value = pipeline_value();
    value["edges"][1]["switch"]
        .as_object_mut()
        .expect("switch")
        .remove("default");
    value["edges"]
        .as_array_mut()
        .expect("edges")
        .push(json!({"from": "tell", "to": "ask"}));
    let g = Graph::parse(&value).expect("valid");
    assert_eq!(
        g.route("pay", &succeeded(&json!({"status": "declined"}))),
        Ok(fail(
            "no case of switch on $.status matches value \"declined\" from node pay"
        ))
    );
    assert_eq!(
        g.route("pay", &succeeded(&json!({}))),
        Ok(fail(
            "no case of switch on $.status matches value (missing) from node pay"
        ))
    );
    // Without its `ok` case, `ask` cannot route a success.
    let mut value = pipeline_value();
    value["edges"][2]["switch"]["cases"] = json!({"timed_out": "msg", "failed": "ok"});
    let g = Graph::parse(&value).expect("valid");
    assert_eq!(
        g.route("ask", &succeeded(&json!({}))),
        Ok(fail("no route for outcome ok from node ask"))
    );
    assert_eq!(g.route("ask", &Outcome::Failed("x")), Ok(next("ok")));
}

#[test]
fn a_whole_run_walks_through_check_transition() {
    let g = pipeline();
    // fetch → pay (retry) → fetch → pay (declined) → ask (timed out) → msg → complete.
    let (retry, declined, sorry) = (
        json!({"status": "retry"}),
        json!({"status": "declined"}),
        json!("sorry"),
    );
    let steps: [(&str, Outcome<'_>, Option<&str>); 6] = [
        ("fetch", succeeded(&Value::Null), Some("pay")),
        ("pay", succeeded(&retry), Some("fetch")),
        ("fetch", succeeded(&Value::Null), Some("pay")),
        ("pay", succeeded(&declined), Some("ask")),
        ("ask", Outcome::TimedOut, Some("msg")),
        ("msg", succeeded(&sorry), None),
    ];
    let mut current = g.start.clone();
    for (from, outcome, proposal) in steps {
        assert_eq!(current, from);
        let route = g
            .check_transition(from, &outcome, proposal)
            .unwrap_or_else(|refused| panic!("{refused}"));
        match route {
            Route::Next(next) => current = next,
            Route::Complete => {
                assert_eq!(proposal, None);
                current = String::new();
            }
            Route::Fail { error, .. } => panic!("unexpected failure: {error}"),
        }
    }
    assert!(current.is_empty(), "the run completed");
}

#[test]
fn a_child_cannot_jump_the_graph() {
    let g = pipeline();
    let ok = json!({"status": "ok"});
    // Skipping from fetch straight to tell.
    assert_eq!(
        g.check_transition("fetch", &succeeded(&ok), Some("tell")),
        Err(TransitionRefused {
            from: "fetch".into(),
            proposed: Some("tell".into()),
            expected: Some(next("pay")),
        })
    );
    // Routing pay's ok to ask instead of tell.
    let refused = g
        .check_transition("pay", &succeeded(&ok), Some("ask"))
        .expect_err("refused");
    assert_eq!(
        refused.to_string(),
        "refused transition to \"ask\" from node \"pay\": the graph routes this outcome to \"tell\""
    );
    // Completing early.
    let refused = g
        .check_transition("ok", &succeeded(&ok), None)
        .expect_err("refused");
    assert_eq!(refused.expected, Some(next("ship")));
    // Continuing after the last node.
    let refused = g
        .check_transition("ship", &succeeded(&ok), Some("fetch"))
        .expect_err("refused");
    assert_eq!(refused.expected, Some(Route::Complete));
    // Carrying on after a failure the graph does not route.
    let refused = g
        .check_transition("ask", &Outcome::Failed("model refused"), Some("ok"))
        .expect_err("refused");
    assert_eq!(refused.expected, Some(fail("model refused")));
    // Proposing a node that does not exist, or leaving one that does not.
    assert!(g
        .check_transition("fetch", &succeeded(&ok), Some("nowhere"))
        .is_err());
    let refused = g
        .check_transition("nowhere", &succeeded(&ok), Some("fetch"))
        .expect_err("refused");
    assert_eq!(refused.expected, None);
    // Completing after a failure or timeout the graph does not route is refused too; the
    // refusal carries the failure.
    let refused = g
        .check_transition("ask", &Outcome::Failed("model refused"), None)
        .expect_err("refused");
    assert_eq!(refused.expected, Some(fail("model refused")));
    let refused = g
        .check_transition("fetch", &Outcome::TimedOut, None)
        .expect_err("refused");
    assert_eq!(refused.expected, Some(timed_out("fetch")));
}

#[test]
fn the_digest_ignores_key_order_and_whitespace() {
    let g = pipeline();
    let reordered = r#"
        { "edges": [
            {"to": "pay", "from": "fetch"},
            {"switch": {"default": "ask", "cases": {"retry": "fetch", "ok": "tell"}, "on": "$.status"}, "from": "pay"},
            {"switch": {"cases": {"timed_out": "msg", "ok": "ok"}, "on": "$result.outcome"}, "from": "ask"},
            {"to": "ship", "from": "ok"}
          ],
          "nodes": {
            "tell": {"kind": "notify"}, "ship": {"kind": "human_decision"}, "ok": {"kind": "checkpoint"},
            "msg": {"kind": "assistant_message"}, "ask": {"timeout_ms": 600000, "kind": "agent"},
            "pay": {"retry": "idempotency_key", "kind": "action"}, "fetch": {"timeout_ms": 5000, "kind": "compute"}
          },
          "start": "fetch", "name": "pipeline" }"#;
    let other = Graph::parse(&serde_json::from_str(reordered).expect("json")).expect("valid");
    assert_eq!(other, g);
    assert_eq!(other.digest(), g.digest());
    assert_eq!(Graph::parse(&g.to_value()).expect("round trip"), g);
}
