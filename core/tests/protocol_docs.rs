//! Keeps `docs/WORKFLOW_SERVER.md` in step with `piw_core::protocol`: every kind with its
//! required envelope fields and payload, every rejection code, the limits, and the worked
//! examples are checked against the code. The Node package's `RejectionCode` type too.

use std::collections::BTreeMap;

use piw_core::protocol::*;
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
    for text in ["1,048,576", "4,194,304", "262,144", "1–128 characters"] {
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

    let status = r#"{"schema":"piw.protocol.v1","request_id":"a1","kind":"run.status","run_id":"run-1","payload":null}"#;
    let encoded = encode_frame(
        &Request::new("a1", RequestBody::RunStatus).with_run_id("run-1"),
        &limits,
    )
    .unwrap();
    assert_eq!(&encoded[4..], status.as_bytes());
    assert!(doc.contains(&format!("client → 00 00 00 62  {status}")));
    assert_eq!(encoded[..4], [0, 0, 0, 0x62]);

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
