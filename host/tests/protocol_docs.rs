//! Keeps `docs/WORKFLOW_SERVER.md` in step with `piw_host::protocol`: every kind with its
//! required envelope fields and payload, every rejection code, the limits, and the worked
//! examples are checked against the code, and the record and event data tables against what the
//! host sends. The Node package's `RejectionCode` type too.

use piw_host::store::prelude::*;
use std::collections::BTreeMap;

use piw_host::protocol::*;
use serde_json::json;

fn doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/WORKFLOW_SERVER.md");
    std::fs::read_to_string(path).expect("docs/WORKFLOW_SERVER.md exists")
}

/// The rows of the two kind tables: kind → (required fields, payload column).
fn documented_kinds(doc: &str) -> BTreeMap<String, (Vec<String>, String)> {
    let mut kinds = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| kind | requires | payload |` splits into 5 cells with empty ends.
        if cells.len() != 5 {
            continue;
        }
        let Some(kind) = cells[1].strip_prefix('`').and_then(|c| c.strip_suffix('`')) else {
            continue;
        };
        if RequestKind::parse(kind).is_none() {
            continue;
        }
        let required = cells[2]
            .split(',')
            .map(|f| f.trim().trim_matches('`').to_owned())
            .filter(|f| !f.is_empty() && f != "—")
            .collect();
        kinds.insert(kind.to_owned(), (required, cells[3].to_owned()));
    }
    kinds
}

#[test]
fn every_kind_is_documented_with_its_requirements_and_payload() {
    let doc = doc();
    let kinds = documented_kinds(&doc);
    for &kind in RequestKind::ALL {
        let (required, payload) = kinds
            .get(kind.as_str())
            .unwrap_or_else(|| panic!("`{kind}` is missing from the kind tables"));
        let mut expected: Vec<String> = kind
            .required_fields()
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut required = required.clone();
        expected.sort();
        required.sort();
        assert_eq!(required, expected, "required fields of `{kind}`");
        assert_eq!(payload != "none", kind.has_payload(), "payload of `{kind}`");
    }
    assert_eq!(kinds.len(), RequestKind::ALL.len());
}

#[test]
fn every_rejection_code_is_documented() {
    let doc = doc();
    for code in RejectionCode::ALL {
        assert!(
            doc.contains(&format!("| `{code}` |")),
            "`{code}` has no row in the rejection code table"
        );
    }
}

/// The Node package's `RejectionCode` type lists exactly the protocol's codes, so a code
/// added here cannot be missing from what TypeScript callers may match on.
#[test]
fn the_node_types_list_every_rejection_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../node-binding/index.d.ts");
    let types = std::fs::read_to_string(path).expect("node-binding/index.d.ts exists");
    let (_, union) = types
        .split_once("export type RejectionCode =")
        .expect("index.d.ts declares `type RejectionCode`");
    // One `| 'code'` line per member, doc comments between them; the last ends in `;`.
    let mut listed = Vec::new();
    for line in union.lines().map(str::trim) {
        if let Some(member) = line.strip_prefix("| '") {
            let last = member.ends_with(';');
            listed.push(member.trim_end_matches(';').trim_end_matches('\''));
            if last {
                break;
            }
        }
    }
    let expected: Vec<&str> = RejectionCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, expected, "node-binding/index.d.ts RejectionCode");
}

#[test]
fn documented_limits_match_the_defaults() {
    let doc = doc();
    assert_eq!(DEFAULT_MAX_FRAME_BYTES, 1_048_576);
    assert_eq!(DEFAULT_MAX_BUFFERED_BYTES, 4_194_304);
    assert_eq!(DEFAULT_MAX_PAYLOAD_BYTES, 262_144);
    assert_eq!(MAX_VALUE_BYTES, 67_108_864);
    for text in [
        "1,048,576",
        "4,194,304",
        "262,144",
        "67,108,864",
        "1–128 characters",
    ] {
        assert!(doc.contains(text), "{text}");
    }
    assert_eq!(MAX_ID_CHARS, 128);
    assert!(doc.contains(PROTOCOL_SCHEMA));
}

#[test]
fn documented_nesting_limit_counts_the_envelope() {
    let nested = |depth: usize| {
        // The envelope is level 1 and the payload object level 2.
        let inner = depth - 2;
        format!(
            r#"{{"schema":"piw.protocol.v1","request_id":"d","kind":"run.start","payload":{{"workflow_file":"w","input":{}1{}}}}}"#,
            "[".repeat(inner),
            "]".repeat(inner)
        )
    };
    assert_eq!(MAX_REQUEST_DEPTH, 64);
    assert!(doc().contains("| nesting of arrays and objects in a request | 64 levels"));
    let accepted = Request::decode(nested(64).as_bytes(), &Limits::default()).expect("64 levels");
    accepted.validate(&Limits::default()).unwrap();
    for depth in [65, 126, 127, 128, 500] {
        let err = Request::decode(nested(depth).as_bytes(), &Limits::default()).unwrap_err();
        assert_eq!(err.code, RejectionCode::Malformed, "{depth}");
    }
    let err = Request::decode(nested(65).as_bytes(), &Limits::default()).unwrap_err();
    assert!(err.message.contains("deeper than 64"), "{err}");
    assert_eq!(err.request_id.as_deref(), Some("d"));

    // A response embedding an accepted request's input a few levels down still parses.
    let ServerFrame::Response(_) = ServerFrame::decode(
        &encode_frame(
            &ServerFrame::receipt(
                "d",
                Receipt::new(
                    Some(1),
                    json!({"run": {"input": accepted.body.payload_json().unwrap()}}),
                ),
            ),
            &Limits::default(),
        )
        .unwrap()[4..],
    )
    .unwrap() else {
        panic!("expected a response")
    };

    // `validate` refuses what `decode` refuses, also for values built in code.
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let request = Request::new(
        "v",
        RequestBody::RunStart(RunStart {
            workflow_file: "w".into(),
            input: deep,
            session_id: None,
            execution_mode: None,
            project_dir: None,
        }),
    );
    assert_eq!(
        request.validate(&Limits::default()).unwrap_err().code,
        RejectionCode::Malformed
    );
}

#[test]
fn documented_example_session_is_exact() {
    let doc = doc();
    let limits = Limits::default();

    let status = r#"{"schema":"piw.protocol.v1","request_id":"a1","kind":"run.status","run_id":"run-1","payload":{}}"#;
    let encoded = encode_frame(
        &Request::new("a1", RequestBody::RunStatus(Default::default())).with_run_id("run-1"),
        &limits,
    )
    .unwrap();
    assert_eq!(&encoded[4..], status.as_bytes());
    assert!(doc.contains(&format!("client → 00 00 00 60  {status}")));
    assert_eq!(encoded[..4], [0, 0, 0, 0x60]);

    let unknown = r#"{"schema":"piw.protocol.v1","request_id":"a2","kind":"run.explode"}"#;
    assert_eq!(unknown.len(), 0x43);
    assert!(doc.contains(&format!("client → 00 00 00 43  {unknown}")));
    let err = Request::decode(unknown.as_bytes(), &limits).unwrap_err();

    let rejection = encode_frame(&err.rejection_frame().unwrap(), &limits).unwrap();
    let goodbye = encode_frame(&err.goodbye_frame(), &limits).unwrap();
    for (frame, prefix) in [(rejection, "a2"), (goodbye, "67")] {
        let line = format!(
            "host   → 00 00 00 {prefix}  {}",
            std::str::from_utf8(&frame[4..]).unwrap()
        );
        assert!(doc.contains(&line), "doc lacks: {line}");
        assert_eq!(
            frame[..4],
            (frame.len() as u32 - 4).to_be_bytes(),
            "prefix of {line}"
        );
    }
}

#[test]
fn documented_fingerprint_example_is_exact() {
    let doc = doc();
    let request = Request::new(
        "x",
        RequestBody::RunCancel(RunCancel {
            reason: Some("stop".into()),
        }),
    )
    .with_run_id("run-1");
    let fingerprint = request.fingerprint().unwrap();
    assert!(doc.contains(&fingerprint));
    let canonical = canonical_json(&json!({
        "attempt_id": null, "kind": "run.cancel", "node_id": null,
        "payload": {"reason": "stop"}, "run_id": "run-1"
    }));
    assert!(doc.contains(&canonical));
}

// ----- records and event data ----------------------------------------------------------------

mod common;

use std::collections::BTreeSet;

use common::*;
use piw_host::engine::dispatch;
use piw_host::store::{
    Answerer, ChildExitRecord, ChildMode, DecisionKind, EffectResult, Fence, Provenance,
    RetryContract, RunStatus, StoreError,
};
use serde_json::Value;

/// The backticked names in `cell`, leaving out what parentheses explain (values, conditions).
fn names_in(cell: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The rows (as cells) of the first table after the line that starts with `marker`.
fn table_after(doc: &str, marker: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = doc.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(marker))
        .unwrap_or_else(|| panic!("the page has no line starting with {marker:?}"));
    lines[start..]
        .iter()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and rule
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .map(|cells| cells[1..cells.len() - 1].to_vec())
        .collect()
}

/// The field names a record table documents: (always present, present only when true).
fn documented_fields(doc: &str, marker: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut always = BTreeSet::new();
    let mut marks = BTreeSet::new();
    for row in table_after(doc, marker) {
        for name in names_in(&row[0]) {
            if name.ends_with("_omitted") {
                marks.insert(name);
            } else {
                always.insert(name);
            }
        }
    }
    (always, marks)
}

fn keys(record: &Value) -> BTreeSet<String> {
    record
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {record}"))
        .keys()
        .cloned()
        .collect()
}

/// A store with a run of every kind the records describe, and their events.
struct Scenario {
    f: Fixture,
    /// Completed, with an effect and a notify message.
    completed: String,
    /// Waiting on an interaction whose submission was rejected, then cancelled.
    interacting: String,
    /// Answered a checkpoint, then failed.
    decided: String,
    /// Lost its child, stopped for review, cancelled under a control claim.
    reviewed: String,
    /// Parked.
    parked: String,
    /// Waited on a durable timer, which fired.
    timed: String,
}

fn scenario() -> Scenario {
    let mut f = Fixture::new();

    let (completed, act, a) = f.running();
    let claim = act.claim.clone();
    f.store
        .write(|w| w.record_definition(&claim, &json!({"name": "demo"})))
        .unwrap();
    let b = f
        .store
        .write(|w| w.transition(&claim, &step(&a, "b")))
        .unwrap()
        .next_attempt_id;
    f.store
        .write(|w| w.notify(&claim, &json!({"text": "hi"})))
        .unwrap();
    f.store
        .write(|w| w.progress(&claim, "half way", &json!({"n": 1})))
        .unwrap();
    f.store
        .write(|w| {
            w.progress(
                &claim,
                "progress:rows",
                &json!({"type": "progress", "key": "rows", "data": {"completed": 1}}),
            )
        })
        .unwrap();
    let effect = f.reserve_and_apply(&claim, &b, "send", RetryContract::Never);
    f.store
        .write(|w| {
            w.settle_effect(
                &claim,
                &effect,
                &EffectResult::Applied {
                    receipt: json!({"id": 7}),
                },
            )
        })
        .unwrap();
    f.store
        .write(|w| w.pause(&completed, Fence::Claim(&claim)))
        .unwrap();
    f.store
        .write(|w| w.resume(&completed, Fence::Claim(&claim)))
        .unwrap();
    f.store.write(|w| w.detach(&completed)).unwrap();
    f.store
        .write(|w| w.complete(&claim, &b, &json!({"done": true}), &json!({"done": true})))
        .unwrap();
    let generation = claim.generation;
    f.store
        .write(|w| {
            let epoch = w.begin_host_epoch(4000)?;
            let child = w.record_child_launch(&completed, generation, epoch, ChildMode::Run)?;
            w.record_child_process(child, 4242, 1)?;
            w.record_child_exit(
                child,
                &ChildExitRecord {
                    exit_code: Some(0),
                    reason: "exited with status 0".into(),
                    stderr_tail: b"bye\n".to_vec(),
                    ..Default::default()
                },
            )
        })
        .unwrap();

    let (interacting, attempt, interaction) = f.waiting();
    let submission = f
        .store
        .write(|w| w.submit(&interaction, &attempt, &json!({"answer": 1}), None))
        .unwrap();
    let judge = f.activate(&interacting);
    f.store
        .write(|w| w.settle(&judge.claim, &submission, Err("not good enough".into())))
        .unwrap();
    f.store
        .write(|w| w.cancel(&interacting, Fence::Unclaimed, "enough"))
        .unwrap();

    let (decided, act, a) = f.running();
    let decision = f
        .store
        .write(|w| w.wait_for_decision(&act.claim, &a, DecisionKind::Checkpoint, &json!({"q": 1})))
        .unwrap();
    f.store
        .write(|w| w.answer_decision(&decision, &json!("yes"), Answerer::Model))
        .unwrap();
    let act = f.activate(&decided);
    f.store
        .write(|w| {
            w.fail(
                &act.claim,
                None,
                &piw_host::store::AttemptOutcome::Failed {
                    error: "boom".into(),
                },
                "node a failed: boom",
            )
        })
        .unwrap();

    let (reviewed, act, _a) = f.running();
    f.store
        .write(|w| w.child_lost(&act.claim, "exit status 1"))
        .unwrap();
    let act = f.activate(&reviewed);
    f.store
        .write(|w| w.send_to_review(&act.claim, "source changed"))
        .unwrap();
    let person = Provenance {
        by: "ana",
        reason: "put the source back",
    };
    f.store
        .write(|w| w.retry_from_review(&reviewed, person))
        .unwrap();
    let act = f.activate(&reviewed);
    let a = f
        .store
        .write(|w| w.node_started(&act.claim, "a", None))
        .unwrap();
    let effect = f.reserve_and_apply(&act.claim, &a, "charge", RetryContract::Never);
    f.clock.advance(LEASE_MS + 1);
    f.store.write(|w| w.recover_expired()).unwrap();
    f.store
        .write(|w| {
            w.resolve_effect(
                &reviewed,
                &effect,
                &EffectResult::Failed {
                    error: "never charged".into(),
                },
                person,
            )
        })
        .unwrap();
    let control = f
        .store
        .write(|w| w.control_claim(&reviewed, "operator"))
        .unwrap();
    f.store
        .write(|w| w.cancel(&reviewed, Fence::Claim(&control), "given up"))
        .unwrap();

    // Waited on a durable timer, which fired.
    let (timed, act, a) = f.running();
    f.store
        .write(|w| {
            w.wait_until(
                &act.claim,
                &a,
                piw_host::store::Wake::After(1_000),
                &json!({"x": 1}),
            )
        })
        .unwrap();
    f.clock.advance(1_000);
    f.store.write(|w| w.fire_due_timers()).unwrap();

    let (parked, act, _a) = f.running();
    f.store.write(|w| w.park(&act.claim, None)).unwrap();

    Scenario {
        f,
        completed,
        interacting,
        decided,
        reviewed,
        parked,
        timed,
    }
}

/// `run.status`'s body as the host builds it.
fn run_status(s: &Scenario, run_id: &str) -> Value {
    let request =
        Request::new("st", RequestBody::RunStatus(Default::default())).with_run_id(run_id);
    dispatch::apply_read(
        &s.f.store,
        &piw_host::engine::state::HostState {
            reply_limit: DEFAULT_MAX_FRAME_BYTES,
            ..piw_host::engine::state::HostState::new(Box::new(piw_host::ids::OsIds))
        },
        s.f.store.now_ms(),
        &request,
    )
    .unwrap()
    .body
}

/// The record tables of the page list exactly the fields the host sends in `run.status`,
/// `run.list` and `interaction.list` (a `…_omitted` mark only appears when true).
#[test]
fn the_documented_records_are_the_ones_the_host_sends() {
    let doc = doc();
    let s = scenario();
    let statuses: Vec<Value> = [
        &s.completed,
        &s.interacting,
        &s.decided,
        &s.reviewed,
        &s.parked,
    ]
    .iter()
    .map(|r| run_status(&s, r))
    .collect();
    let first = |list: &str| -> Value {
        statuses
            .iter()
            .find_map(|b| b[list].as_array().and_then(|a| a.first()).cloned())
            .unwrap_or_else(|| panic!("the scenario has no {list}"))
    };
    let list = dispatch::apply_read(
        &s.f.store,
        &piw_host::engine::state::HostState {
            reply_limit: DEFAULT_MAX_FRAME_BYTES,
            ..piw_host::engine::state::HostState::new(Box::new(piw_host::ids::OsIds))
        },
        s.f.store.now_ms(),
        &Request::new("ls", RequestBody::RunList(payload::RunList::default())),
    )
    .unwrap()
    .body;
    // The list's own fields are named in its row of the receipt bodies.
    let row = table_after(&doc, "### Receipt bodies")
        .into_iter()
        .find(|r| r[0] == "`run.list`")
        .expect("run.list row");
    for field in keys(&list) {
        assert!(
            row[1].contains(&format!("`{field}`")),
            "run.list lacks {field}"
        );
    }
    // So are `run.status`'s, in its row.
    let row = table_after(&doc, "### Receipt bodies")
        .into_iter()
        .find(|r| r[0] == "`run.status`")
        .expect("run.status row");
    for field in keys(&statuses[0]) {
        assert!(
            row[1].contains(&format!("`{field}`")),
            "run.status lacks {field}"
        );
    }
    let cases = [
        ("The run record (", statuses[0]["run"].clone()),
        ("The run record (", list["runs"][0].clone()),
        ("The claim record (", statuses[0]["claim"].clone()),
        ("An attempt (", first("attempts")),
        ("A decision (", first("decisions")),
        ("An interaction (", first("interactions")),
        ("An effect (", first("effects")),
        ("The last child (", statuses[0]["last_child"].clone()),
        ("An update (", first("updates")),
        ("A workflow message (", first("messages")),
    ];
    for (marker, record) in cases {
        let (always, marks) = documented_fields(&doc, marker);
        let sent = keys(&record);
        let unmarked: BTreeSet<String> = sent.difference(&marks).cloned().collect();
        assert_eq!(
            unmarked, always,
            "{marker}: the page's fields vs the host's {record:#}"
        );
    }
    let submission = first("interactions")["last_submission"].clone();
    assert_eq!(
        keys(&submission),
        ["error", "state", "submission_id"]
            .map(str::to_owned)
            .into_iter()
            .collect::<BTreeSet<_>>()
    );
    let row = table_after(&doc, "An interaction (")
        .into_iter()
        .find(|r| r[0] == "`last_submission`")
        .expect("last_submission row");
    for field in keys(&submission) {
        assert!(
            row[2].contains(&format!("`{field}`")),
            "last_submission lacks {field}"
        );
    }
    // The terminal run is not paused, as the run record says.
    assert_eq!(statuses[0]["run"]["paused"], json!(false));
}

/// Every event the scenario's writes produced has a row in the event data table, listing
/// exactly its `data` fields (a field the table gives a condition for may be absent).
#[test]
fn the_documented_event_data_is_what_the_host_sends() {
    let doc = doc();
    let s = scenario();
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in table_after(&doc, "### Event data") {
        let fields: BTreeSet<String> = names_in(&row[1]).into_iter().collect();
        for kind in names_in(&row[0]) {
            documented.insert(kind, fields.clone());
        }
    }
    // Fields the table names with a condition: absent when it does not hold.
    let conditional = [
        "retry",
        "interaction",
        "dropped",
        "accepted_source",
        "channel",
    ];
    let mut seen = BTreeSet::new();
    for run in [
        &s.completed,
        &s.interacting,
        &s.decided,
        &s.reviewed,
        &s.parked,
        &s.timed,
    ] {
        for event in s.f.store.events(run, 0).unwrap() {
            let fields = documented.get(&event.kind).unwrap_or_else(|| {
                panic!("event `{}` has no row in the event data table", event.kind)
            });
            let sent = keys(&event.data);
            assert!(
                sent.is_subset(fields),
                "`{}` sends {sent:?}, the page says {fields:?}",
                event.kind
            );
            let missing: Vec<_> = fields
                .difference(&sent)
                .filter(|f| !conditional.contains(&f.as_str()))
                .collect();
            assert!(
                missing.is_empty(),
                "`{}` lacks {missing:?}: {}",
                event.kind,
                event.data
            );
            seen.insert(event.kind.clone());
        }
    }
    // The scenario reaches most kinds; those it does not are listed here on purpose.
    let unexercised: BTreeSet<&str> = [
        "interaction_expired",
        "interaction_failed",
        "decision_expired",
        "submission_accepted",
        "timed_out",
        "recovered",
        "repaired",
    ]
    .into();
    for kind in documented.keys() {
        assert!(
            seen.contains(kind) || unexercised.contains(kind.as_str()),
            "`{kind}` is documented but the scenario never produced it"
        );
    }
}

/// An `invalid_transition` rejection names the refused operation and the run's status.
#[test]
fn an_invalid_transition_names_the_operation_and_the_status() {
    let mut s = scenario();
    let completed = s.completed.clone();
    let err =
        s.f.store
            .write(|w| w.pause(&completed, Fence::Unclaimed))
            .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidTransition { .. }),
        "{err:?}"
    );
    let rejection = dispatch::rejection_for(&err);
    assert_eq!(rejection.code, RejectionCode::InvalidTransition);
    assert_eq!(
        rejection.details,
        json!({"op": "pause", "status": RunStatus::Completed.as_str()})
    );
}

/// The page says when a rejection precedes the goodbye: a JSON object with a usable
/// `request_id`, whichever later check failed; for a repeated key, the last `request_id`.
#[test]
fn the_rejection_before_the_goodbye_carries_the_documented_request_id() {
    let decode = |text: &str| Request::decode(text.as_bytes(), &Limits::default()).unwrap_err();
    let repeated = decode(
        r#"{"schema":"piw.protocol.v1","request_id":"first","request_id":"last","kind":"host.status"}"#,
    );
    assert_eq!(repeated.code, RejectionCode::Malformed);
    assert_eq!(repeated.request_id.as_deref(), Some("last"));
    let schema = decode(r#"{"schema":"piw.protocol.v0","request_id":"s","kind":"host.status"}"#);
    assert_eq!(schema.code, RejectionCode::UnsupportedProtocol);
    assert_eq!(schema.request_id.as_deref(), Some("s"));
    let kind = decode(r#"{"schema":"piw.protocol.v1","request_id":"k","kind":"run.explode"}"#);
    assert_eq!(kind.request_id.as_deref(), Some("k"));
    for unusable in [
        r#"{"schema":"piw.protocol.v1","request_id":"","kind":"run.explode"}"#,
        r#"{"schema":"piw.protocol.v1","request_id":7,"kind":"run.explode"}"#,
        r#"{"schema":"piw.protocol.v1","request_id":"x","kind":"run.explode""#,
        r#"["piw.protocol.v1"]"#,
    ] {
        assert_eq!(decode(unusable).request_id, None, "{unusable}");
    }
}
