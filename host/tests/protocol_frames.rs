//! Framing, envelope decoding and serde round trips of `piw_host::protocol`.

use std::io::{self, Read};

use piw_host::protocol::controllers::*;
use piw_host::protocol::*;
use serde_json::{json, Value};

fn limits() -> Limits {
    Limits::default()
}

/// A frame around raw body bytes (bypasses `encode_frame`, which only takes valid JSON).
fn raw_frame(body: &[u8]) -> Vec<u8> {
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

fn decode_json(value: Value) -> Result<Request, DecodeError> {
    Request::decode(&serde_json::to_vec(&value).unwrap(), &limits())
}

fn envelope(kind: &str, payload: Value) -> Value {
    json!({"schema": PROTOCOL_SCHEMA, "request_id": "req-1", "kind": kind, "payload": payload})
}

fn assert_malformed(result: Result<Request, DecodeError>, needle: &str) -> DecodeError {
    let err = result.expect_err("should not decode");
    assert_eq!(err.code, RejectionCode::Malformed, "{err}");
    assert!(
        err.message.contains(needle),
        "`{}` lacks `{needle}`",
        err.message
    );
    err
}

fn controller_name() -> ControllerName {
    ControllerName {
        project_dir: "/home/u/project".into(),
        name: "pull-request".into(),
    }
}

fn resource_ref() -> ResourceRef {
    ResourceRef {
        project_dir: "/home/u/project".into(),
        controller: "pull-request".into(),
        key: "acme/widgets#7".into(),
        expected_resource_version: None,
    }
}

fn pass_credentials() -> PassCredentials {
    PassCredentials {
        resource_uid: "res-1".into(),
        pass_id: "pass-1".into(),
        token: "00".repeat(32),
    }
}

/// One request of every kind, with every envelope field the kind requires.
fn sample(kind: RequestKind) -> Request {
    let body = match kind {
        RequestKind::HostStatus => RequestBody::HostStatus,
        RequestKind::HostStop => RequestBody::HostStop,
        RequestKind::ChannelReload => RequestBody::ChannelReload,
        RequestKind::RunStart => RequestBody::RunStart(RunStart {
            workflow_file: "flows/review.workflow.mjs".into(),
            input: json!({"pr": 42, "labels": ["a", "b"]}),
            session_id: Some("session-1".into()),
            execution_mode: Some(ExecutionMode::Interactive),
            project_dir: Some("/home/u/project".into()),
        }),
        RequestKind::RunStatus => RequestBody::RunStatus(Default::default()),
        RequestKind::RunList => RequestBody::RunList(RunList {
            limit: Some(20),
            session_id: None,
            ..Default::default()
        }),
        RequestKind::RunPause => RequestBody::RunPause,
        RequestKind::RunDetach => RequestBody::RunDetach,
        RequestKind::RunResume => RequestBody::RunResume,
        RequestKind::RunCancel => RequestBody::RunCancel(RunCancel {
            reason: Some("user asked".into()),
        }),
        RequestKind::RunRetry => RequestBody::RunRetry(RunRetry {
            reason: Some("fixed the config".into()),
            by: Some("ana".into()),
            accept_source: true,
        }),
        RequestKind::EffectResolve => RequestBody::EffectResolve(EffectResolve {
            effect_id: "eff-1".into(),
            result: EffectResult::Applied {
                receipt: json!({"id": 7}),
            },
            reason: None,
            by: Some("ana".into()),
        }),
        RequestKind::CheckpointAnswer => RequestBody::CheckpointAnswer(DecisionAnswer {
            decision_id: "dec-1".into(),
            answer: json!("yes"),
            channel: None,
        }),
        RequestKind::DecisionAnswer => RequestBody::DecisionAnswer(DecisionAnswer {
            decision_id: "dec-2".into(),
            answer: json!({"approved": false}),
            channel: None,
        }),
        RequestKind::InteractionList => RequestBody::InteractionList(InteractionList {
            session_id: "session-1".into(),
        }),
        RequestKind::InteractionSubmit => RequestBody::InteractionSubmit(InteractionSubmit {
            interaction_id: "int-1".into(),
            result: json!({"summary": "done"}),
            refuse_repeat: false,
        }),
        RequestKind::InteractionFail => RequestBody::InteractionFail(InteractionFail {
            interaction_id: "int-1".into(),
            reason: "no submission after 2 reminders".into(),
        }),
        RequestKind::InteractionUpdate => RequestBody::InteractionUpdate(InteractionUpdate {
            interaction_id: "int-1".into(),
            message: "half done".into(),
            data: json!({"files": 3}),
        }),
        RequestKind::InteractionValuePut => {
            RequestBody::InteractionValuePut(piw_host::protocol::InteractionValuePut {
                interaction_id: "int-1".into(),
                sha256: "ab".repeat(32),
                bytes: 70_000,
                offset: 0,
                data: "00ff".into(),
            })
        }
        RequestKind::MessageClaim => RequestBody::MessageClaim(MessageClaim {
            session_id: "session-1".into(),
            limit: None,
            claimant: Some("pi:session-1".into()),
            after: Some("msg-1".into()),
        }),
        RequestKind::MessageAck => RequestBody::MessageAck(MessageAck {
            message_id: "msg-1".into(),
        }),
        RequestKind::Subscribe => RequestBody::Subscribe(Subscribe {
            run_id: Some("run-1".into()),
            session_id: None,
            all: None,
        }),
        RequestKind::Unsubscribe => RequestBody::Unsubscribe(Unsubscribe {
            subscription_id: "sub-1".into(),
        }),
        RequestKind::Diagnose => RequestBody::Diagnose,
        RequestKind::ValueGet => RequestBody::ValueGet(ValueGet {
            sha256: "ab".repeat(32),
            offset: 0,
            max_bytes: Some(1024),
        }),
        RequestKind::Repair => RequestBody::Repair,
        RequestKind::ControllerRegister => RequestBody::ControllerRegister(ControllerRegister {
            project_dir: "/home/u/project".into(),
            name: "pull-request".into(),
            source_path: "/home/u/project/.pi/controllers/pull-request.controller.ts".into(),
            source_hash: "ab".repeat(32),
            pass_deadline_ms: Some(60_000),
        }),
        RequestKind::ControllerEnable => RequestBody::ControllerEnable(controller_name()),
        RequestKind::ControllerDisable => RequestBody::ControllerDisable(controller_name()),
        RequestKind::ResourceApply => RequestBody::ResourceApply(ResourceApply {
            project_dir: "/home/u/project".into(),
            controller: "pull-request".into(),
            key: "acme/widgets#7".into(),
            spec: json!({"number": 7, "expectedHeadSha": "a1b2c3d"}),
            expected_resource_version: Some(3),
        }),
        RequestKind::ResourceGet => RequestBody::ResourceGet(resource_ref()),
        RequestKind::ResourceList => RequestBody::ResourceList(ResourceList {
            project_dir: "/home/u/project".into(),
            controller: None,
        }),
        RequestKind::ResourceDelete => RequestBody::ResourceDelete(resource_ref()),
        RequestKind::ResourceReconcile => RequestBody::ResourceReconcile(resource_ref()),
        RequestKind::ControllerEffectRecord => {
            RequestBody::ControllerEffectRecord(ControllerEffectRecord {
                pass: pass_credentials(),
                key: "merge:1:a1b2c3d".into(),
                kind: "forge-merge".into(),
                generation: 1,
                request_fingerprint: "cd".repeat(32),
            })
        }
        RequestKind::ControllerEffectGet => RequestBody::ControllerEffectGet(ControllerEffectGet {
            pass: pass_credentials(),
            key: "merge:1:a1b2c3d".into(),
        }),
        RequestKind::ControllerEffectSettle => {
            RequestBody::ControllerEffectSettle(ControllerEffectSettle {
                pass: pass_credentials(),
                key: "merge:1:a1b2c3d".into(),
                state: ControllerEffectState::Applied,
                external_ref: Some("f00".into()),
                error: None,
            })
        }
        RequestKind::ControllerWorkflowEnsure => {
            RequestBody::ControllerWorkflowEnsure(ControllerWorkflowEnsure {
                pass: pass_credentials(),
                request_key: "repair:1:a1b2c3d".into(),
                workflow: "repair".into(),
                workflow_file: "/home/u/project/.pi/workflows/repair.workflow.mjs".into(),
                project_dir: "/home/u/project".into(),
                input: json!({"number": 7}),
                input_fingerprint: "ef".repeat(32),
            })
        }
        RequestKind::ControllerPassFinish => {
            RequestBody::ControllerPassFinish(ControllerPassFinish {
                pass: pass_credentials(),
                kind: PassResultKind::Requeue,
                after_ms: Some(30_000),
                message: None,
                status: Some(json!({"observedGeneration": 1, "conditions": []})),
                finalizers: Some(vec!["pull-request.label".into()]),
            })
        }
        RequestKind::RunPrune => RequestBody::RunPrune(piw_host::protocol::payload::RunPrune {
            older_than_ms: Some(30 * 86_400_000),
            statuses: Some(vec![piw_host::store::RunStatus::Failed]),
            keep: Some(100),
            dry_run: Some(true),
            ..Default::default()
        }),
        RequestKind::WorkerHello => RequestBody::WorkerHello(WorkerHello {
            child_token: "secret-token".into(),
            pid: 4242,
            definition: Some(json!({"name": "g", "start": "a", "nodes": {}, "edges": []})),
            mounted_sources: Some(json!({"lib": "ab12"})),
            start_node: false,
        }),
        RequestKind::WorkerNodeStarted => RequestBody::WorkerNodeStarted(WorkerNodeStarted {
            deadline_ms: Some(1_700_000_000_000),
            timeout_ms: Some(60_000),
        }),
        RequestKind::WorkerTransition => RequestBody::WorkerTransition(WorkerTransition {
            outcome: AttemptOutcome::Succeeded {
                output: json!({"path": "b"}),
            },
            next_node: "node-b".into(),
            earlier: vec![EarlierStep {
                outcome: AttemptOutcome::Failed { error: "x".into() },
                next_node: "node-a".into(),
            }],
            next_timeout_ms: Some(30_000),
        }),
        RequestKind::WorkerComplete => RequestBody::WorkerComplete(WorkerComplete {
            outcome: AttemptOutcome::TimedOut,
            result: json!([1, 2, 3]),
            result_is_output: false,
            earlier: Vec::new(),
            presentation: Some("Summarize it.".into()),
        }),
        RequestKind::WorkerFail => RequestBody::WorkerFail(WorkerFail {
            error: "boom".into(),
            review: true,
        }),
        RequestKind::WorkerProgress => RequestBody::WorkerProgress(WorkerProgress {
            message: "halfway".into(),
            data: json!({"pct": 50}),
        }),
        RequestKind::WorkerWait => RequestBody::WorkerWait(WorkerWait {
            decision_kind: DecisionKind::HumanDecision,
            request: json!({"question": "ship it?"}),
        }),
        RequestKind::WorkerWaitUntil => RequestBody::WorkerWaitUntil(WorkerWaitUntil {
            for_ms: Some(60_000),
            until_ms: None,
            output: json!({"checked": 3}),
        }),
        RequestKind::WorkerInteractionRequest => {
            RequestBody::WorkerInteractionRequest(WorkerInteractionRequest {
                interaction_kind: InteractionKind::AssistantMessage,
                request: json!({"prompt": "write"}),
                deadline_ms: None,
            })
        }
        RequestKind::WorkerNotify => RequestBody::WorkerNotify(WorkerNotify {
            content: json!("hello"),
        }),
        RequestKind::WorkerEffectReserve => RequestBody::WorkerEffectReserve(WorkerEffectReserve {
            effect_key: "send-mail".into(),
            fingerprint: "ab12".into(),
            retry_contract: RetryContract::IdempotencyKey,
        }),
        RequestKind::WorkerEffectApplying => {
            RequestBody::WorkerEffectApplying(WorkerEffectApplying {
                effect_id: "eff-1".into(),
            })
        }
        RequestKind::WorkerEffectSettle => RequestBody::WorkerEffectSettle(WorkerEffectSettle {
            effect_id: "eff-1".into(),
            result: EffectResult::Applied {
                receipt: json!({"id": "m-9"}),
            },
        }),
        RequestKind::WorkerValidationResult => {
            RequestBody::WorkerValidationResult(WorkerValidationResult {
                submission_id: "sub-9".into(),
                accepted: false,
                error: Some("missing summary".into()),
            })
        }
        RequestKind::WorkerExit => RequestBody::WorkerExit(WorkerExit {
            reason: "parked".into(),
        }),
        RequestKind::WorkerResults => RequestBody::WorkerResults(WorkerResults { offset: 3 }),
        RequestKind::WorkerValuePut => RequestBody::WorkerValuePut(WorkerValuePut {
            sha256: "ab".repeat(32),
            bytes: 70_000,
            offset: 0,
            data: "00ff".into(),
        }),
    };
    let required = kind.required_fields();
    let mut request = Request::new(format!("req-{}", kind.as_str()), body);
    if required.run_id {
        request = request.with_run_id("run-1");
    }
    if required.node_id {
        request = request.with_node_id("node-a");
    }
    if required.attempt_id {
        request = request.with_attempt_id("att-1");
    }
    if required.generation {
        request = request.with_generation(7);
    }
    request
}

// ---------------------------------------------------------------------------------------------
// Framing

#[test]
fn documented_hex_example_is_exact() {
    let frame = encode_frame(&Request::new("r1", RequestBody::HostStatus), &limits()).unwrap();
    let body =
        br#"{"schema":"piw.protocol.v1","request_id":"r1","kind":"host.status","payload":null}"#;
    assert_eq!(&frame[..4], &[0x00, 0x00, 0x00, 0x52]);
    assert_eq!(&frame[4..], body);
    assert_eq!(body.len(), 0x52);
}

#[test]
fn one_byte_pushes_reassemble_frames() {
    let requests: Vec<Request> = RequestKind::ALL.iter().map(|&k| sample(k)).collect();
    let mut stream = Vec::new();
    for request in &requests {
        stream.extend(encode_frame(request, &limits()).unwrap());
    }
    let mut decoder = FrameDecoder::new(limits());
    let mut decoded = Vec::new();
    for byte in &stream {
        decoder.push(std::slice::from_ref(byte)).unwrap();
        while let Some(body) = decoder.next_frame().unwrap() {
            decoded.push(Request::decode(&body, &limits()).unwrap());
        }
    }
    assert_eq!(decoded, requests);
    assert!(decoder.is_at_frame_boundary());
    decoder.finish().unwrap();
}

#[test]
fn many_frames_in_one_push() {
    let mut stream = Vec::new();
    for i in 0..500 {
        stream.extend(encode_frame(&json!({"n": i}), &limits()).unwrap());
    }
    let mut decoder = FrameDecoder::new(limits());
    decoder.push(&stream).unwrap();
    for i in 0..500 {
        let body = decoder.next_frame().unwrap().unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({"n": i})
        );
    }
    assert_eq!(decoder.next_frame().unwrap(), None);
    assert_eq!(decoder.buffered_len(), 0);
}

#[test]
fn oversize_length_is_detected_from_the_prefix_alone() {
    let limits = Limits {
        max_frame_bytes: 1000,
        ..Limits::default()
    };
    let mut decoder = FrameDecoder::new(limits);
    decoder.push(&1001u32.to_be_bytes()[..3]).unwrap();
    assert_eq!(
        decoder.next_frame().unwrap(),
        None,
        "3 bytes are not a prefix yet"
    );
    decoder.push(&1001u32.to_be_bytes()[3..]).unwrap();
    match decoder.next_frame() {
        Err(FrameError::TooLarge {
            len: 1001,
            limit: 1000,
        }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // The error is sticky: the offending prefix stays at the head of the buffer.
    assert!(matches!(
        decoder.next_frame(),
        Err(FrameError::TooLarge { .. })
    ));
    assert_eq!(
        FrameError::TooLarge { len: 1, limit: 0 }.rejection_code(),
        RejectionCode::PayloadTooLarge
    );

    // The largest prefix value is refused the same way under the default limits.
    let mut decoder = FrameDecoder::new(Limits::default());
    decoder.push(&u32::MAX.to_be_bytes()).unwrap();
    assert!(matches!(
        decoder.next_frame(),
        Err(FrameError::TooLarge { len, limit: DEFAULT_MAX_FRAME_BYTES }) if len == u32::MAX as usize
    ));
}

#[test]
fn frame_of_exactly_the_limit_is_accepted() {
    let limits = Limits {
        max_frame_bytes: 10,
        max_buffered_bytes: 14,
        ..Limits::default()
    };
    let body = b"\"12345678\"";
    assert_eq!(body.len(), 10);
    let mut decoder = FrameDecoder::new(limits);
    decoder.push(&raw_frame(body)).unwrap();
    assert_eq!(decoder.next_frame().unwrap().unwrap(), body);
    assert_eq!(encode_frame(&"12345678", &limits).unwrap(), raw_frame(body));
}

#[test]
fn zero_length_frame_is_an_error() {
    let mut decoder = FrameDecoder::new(limits());
    decoder.push(&[0, 0, 0, 0]).unwrap();
    assert!(matches!(decoder.next_frame(), Err(FrameError::Empty)));
    assert_eq!(FrameError::Empty.rejection_code(), RejectionCode::Malformed);
    assert!(matches!(
        read_frame(&mut &[0u8, 0, 0, 0][..], &limits()),
        Err(FrameError::Empty)
    ));
}

#[test]
fn buffer_overflow_rejects_the_whole_push() {
    let limits = Limits {
        max_frame_bytes: 16,
        max_buffered_bytes: 20,
        max_payload_bytes: 16,
    };
    let mut decoder = FrameDecoder::new(limits);
    decoder.push(&[0, 0, 0, 16]).unwrap();
    decoder.push(&[b' '; 10]).unwrap();
    assert_eq!(decoder.buffered_len(), 14);
    match decoder.push(&[b' '; 7]) {
        Err(FrameError::BufferFull { limit: 20 }) => {}
        other => panic!("expected BufferFull, got {other:?}"),
    }
    assert_eq!(decoder.buffered_len(), 14, "a refused push keeps nothing");
    decoder.push(&[b' '; 6]).unwrap();
    assert_eq!(decoder.next_frame().unwrap().unwrap(), vec![b' '; 16]);
    assert_eq!(
        FrameError::BufferFull { limit: 1 }.rejection_code(),
        RejectionCode::PayloadTooLarge
    );
}

#[test]
fn decoder_reports_truncation_at_end_of_stream() {
    let frame = encode_frame(&json!({"a": 1}), &limits()).unwrap();
    for cut in 1..frame.len() {
        let mut decoder = FrameDecoder::new(limits());
        decoder.push(&frame[..cut]).unwrap();
        assert_eq!(decoder.next_frame().unwrap(), None);
        assert!(
            matches!(decoder.finish(), Err(FrameError::Truncated)),
            "cut {cut}"
        );
    }
}

#[test]
fn read_frame_distinguishes_clean_eof_from_truncation() {
    let frame = encode_frame(&json!([1, 2, 3]), &limits()).unwrap();
    let mut two = frame.clone();
    two.extend(&frame);
    let mut reader = &two[..];
    assert_eq!(
        read_frame(&mut reader, &limits()).unwrap().unwrap(),
        b"[1,2,3]"
    );
    assert_eq!(
        read_frame(&mut reader, &limits()).unwrap().unwrap(),
        b"[1,2,3]"
    );
    assert_eq!(read_frame(&mut reader, &limits()).unwrap(), None);

    for cut in 1..frame.len() {
        let result = read_frame(&mut &frame[..cut], &limits());
        assert!(
            matches!(result, Err(FrameError::Truncated)),
            "cut {cut}: {result:?}"
        );
    }
    assert_eq!(
        FrameError::Truncated.rejection_code(),
        RejectionCode::Malformed
    );
}

/// A reader that hands out one byte per call, interrupts every other call, and fails the test
/// if it is asked for bytes beyond `allowed`.
struct StingyReader {
    data: Vec<u8>,
    pos: usize,
    allowed: usize,
    calls: usize,
}

impl Read for StingyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(2) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "signal"));
        }
        assert!(self.pos < self.allowed, "read past {} bytes", self.allowed);
        match self.data.get(self.pos) {
            Some(&byte) if !buf.is_empty() => {
                buf[0] = byte;
                self.pos += 1;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[test]
fn read_frame_retries_interrupts_and_stops_at_an_oversize_prefix() {
    let frame = encode_frame(&json!({"k": "v"}), &limits()).unwrap();
    let mut reader = StingyReader {
        allowed: frame.len() + 1,
        data: frame,
        pos: 0,
        calls: 0,
    };
    assert_eq!(
        read_frame(&mut reader, &limits()).unwrap().unwrap(),
        br#"{"k":"v"}"#
    );
    assert_eq!(read_frame(&mut reader, &limits()).unwrap(), None);

    let mut data = 2_000_000u32.to_be_bytes().to_vec();
    data.extend(vec![b'x'; 64]);
    let mut reader = StingyReader {
        data,
        pos: 0,
        allowed: 4,
        calls: 0,
    };
    assert!(matches!(
        read_frame(&mut reader, &limits()),
        Err(FrameError::TooLarge { len: 2_000_000, .. })
    ));
}

#[test]
fn read_frame_surfaces_io_errors() {
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset"))
        }
    }
    let err = read_frame(&mut Broken, &limits()).unwrap_err();
    assert!(matches!(&err, FrameError::Io(e) if e.kind() == io::ErrorKind::ConnectionReset));
    assert_eq!(err.rejection_code(), RejectionCode::Internal);
}

#[test]
fn write_frame_then_read_frame_round_trips() {
    let mut wire = Vec::new();
    let request = sample(RequestKind::RunStart);
    write_frame(&mut wire, &request, &limits()).unwrap();
    write_frame(
        &mut wire,
        &ServerFrame::goodbye(RejectionCode::Internal, "bye"),
        &limits(),
    )
    .unwrap();
    let mut reader = &wire[..];
    let body = read_frame(&mut reader, &limits()).unwrap().unwrap();
    assert_eq!(Request::decode(&body, &limits()).unwrap(), request);
    let body = read_frame(&mut reader, &limits()).unwrap().unwrap();
    assert_eq!(
        ServerFrame::decode(&body).unwrap(),
        ServerFrame::goodbye(RejectionCode::Internal, "bye")
    );
    assert_eq!(read_frame(&mut reader, &limits()).unwrap(), None);
}

#[test]
fn encode_frame_refuses_oversize_and_unencodable_values() {
    let small = Limits {
        max_frame_bytes: 8,
        ..Limits::default()
    };
    match encode_frame(&"0123456789", &small) {
        Err(FrameError::TooLarge { len: 12, limit: 8 }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let mut map = std::collections::BTreeMap::new();
    map.insert((1, 2), 3);
    let err = encode_frame(&map, &limits()).unwrap_err();
    assert!(matches!(err, FrameError::Encode(_)), "{err:?}");
    assert!(matches!(
        write_frame(&mut Vec::new(), &"0123456789", &small),
        Err(FrameError::TooLarge { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Envelope decoding errors

#[test]
fn invalid_utf8_is_malformed() {
    let err = Request::decode(b"{\"schema\":\"\xff\"}", &limits()).unwrap_err();
    assert_eq!(err.code, RejectionCode::Malformed);
    assert!(err.message.contains("UTF-8"), "{err}");
    assert_eq!(err.request_id, None);
}

#[test]
fn invalid_json_is_malformed() {
    for body in [
        &b"{"[..],
        b"{\"schema\": }",
        b"not json",
        b"{} trailing",
        b"[1,2",
    ] {
        let err = Request::decode(body, &limits()).unwrap_err();
        assert_eq!(err.code, RejectionCode::Malformed);
        assert!(err.message.contains("not valid JSON"), "{err}");
    }
}

#[test]
fn non_object_envelope_is_malformed() {
    for body in [
        &b"[]"[..],
        b"42",
        b"\"run.start\"",
        b"null",
        // The envelope's fields in order, as an array: not an object either.
        br#"["piw.protocol.v1","r1","host.status",null,null,null,null,null,null,null]"#,
    ] {
        let err = Request::decode(body, &limits()).unwrap_err();
        assert_eq!(err.code, RejectionCode::Malformed, "{err}");
        assert!(err.message.contains("JSON object"), "{err}");
    }
}

#[test]
fn wrong_schema_is_unsupported_protocol_and_keeps_the_request_id() {
    let mut value = envelope("host.status", Value::Null);
    value["schema"] = json!("piw.protocol.v2");
    let err = decode_json(value).unwrap_err();
    assert_eq!(err.code, RejectionCode::UnsupportedProtocol);
    assert!(err.message.contains("piw.protocol.v2"), "{err}");
    assert_eq!(err.request_id.as_deref(), Some("req-1"));

    let frame = err.rejection_frame().unwrap();
    let ServerFrame::Response(response) = frame else {
        panic!("expected a response")
    };
    assert_eq!(response.request_id, "req-1");
    assert_eq!(
        response.result.unwrap_err().code,
        RejectionCode::UnsupportedProtocol
    );
    assert_eq!(
        err.goodbye_frame(),
        ServerFrame::goodbye(RejectionCode::UnsupportedProtocol, err.message.clone())
    );
}

#[test]
fn missing_or_mistyped_schema_is_malformed() {
    let mut value = envelope("host.status", Value::Null);
    value.as_object_mut().unwrap().remove("schema");
    let err = assert_malformed(decode_json(value), "missing field `schema`");
    assert_eq!(err.request_id.as_deref(), Some("req-1"));

    let mut value = envelope("host.status", Value::Null);
    value["schema"] = json!(1);
    assert_malformed(decode_json(value), "field `schema` must be a string");
}

#[test]
fn unknown_kind_is_malformed_with_a_clear_message() {
    let err = assert_malformed(
        decode_json(envelope("run.explode", json!({}))),
        "unknown kind `run.explode`",
    );
    assert_eq!(err.request_id.as_deref(), Some("req-1"));
    assert!(err.rejection_frame().is_some());
}

#[test]
fn missing_envelope_fields_are_malformed() {
    for field in ["request_id", "kind"] {
        let mut value = envelope("host.status", Value::Null);
        value.as_object_mut().unwrap().remove(field);
        assert_malformed(decode_json(value), &format!("missing field `{field}`"));
    }
    // Required by the kind.
    assert_malformed(
        decode_json(envelope("run.status", Value::Null)),
        "missing field `run_id` (required for `run.status`)",
    );
    let mut worker = envelope("worker.exit", json!({"reason": "done"}));
    worker["run_id"] = json!("run-1");
    assert_malformed(
        decode_json(worker),
        "missing field `generation` (required for `worker.exit`)",
    );
    let mut submit = envelope(
        "interaction.submit",
        json!({"interaction_id": "i", "result": 1}),
    );
    submit["run_id"] = json!("run-1");
    submit["node_id"] = json!("n");
    assert_malformed(decode_json(submit), "missing field `attempt_id`");
}

#[test]
fn missing_payload_fields_are_malformed() {
    let err = assert_malformed(
        decode_json(envelope("run.start", json!({"input": 1}))),
        "missing field `workflow_file`",
    );
    assert!(err.message.contains("`run.start`"), "{err}");
    assert_eq!(err.request_id.as_deref(), Some("req-1"));
    assert_malformed(
        decode_json(envelope("run.start", Value::Null)),
        "missing field `workflow_file`",
    );
    let mut answer = envelope("checkpoint.answer", json!({"decision_id": "d"}));
    answer["run_id"] = json!("run-1");
    assert_malformed(decode_json(answer), "missing field `answer`");
    let mut transition = envelope(
        "worker.transition",
        json!({"next_node": "b", "outcome": {"status": "exploded"}}),
    );
    for (field, value) in [
        ("run_id", json!("r")),
        ("node_id", json!("a")),
        ("attempt_id", json!("t")),
        ("generation", json!(1)),
    ] {
        transition[field] = value;
    }
    assert_malformed(decode_json(transition), "unknown variant `exploded`");
}

#[test]
fn mistyped_and_out_of_bounds_fields_are_malformed() {
    let mut value = envelope("host.status", Value::Null);
    value["generation"] = json!(-1);
    assert_malformed(decode_json(value), "field `generation` must be an unsigned");
    let mut value = envelope("host.status", Value::Null);
    value["expected_revision"] = json!(1.5);
    assert_malformed(decode_json(value), "field `expected_revision` must be");
    let mut value = envelope("host.status", Value::Null);
    value["run_id"] = json!(7);
    assert_malformed(decode_json(value), "field `run_id` must be a string");

    let mut value = envelope("host.status", Value::Null);
    value["request_id"] = json!("");
    let err = assert_malformed(decode_json(value), "field `request_id` must be 1 to 128");
    assert_eq!(err.request_id, None);
    let mut value = envelope("host.status", Value::Null);
    value["request_id"] = json!("é".repeat(128));
    decode_json(value).expect("128 code points is within bounds");
    let mut value = envelope("host.status", Value::Null);
    value["request_id"] = json!("x".repeat(129));
    assert_malformed(decode_json(value), "`request_id`");
    let mut value = envelope("host.status", Value::Null);
    value["idempotency_key"] = json!("k".repeat(129));
    let err = assert_malformed(
        decode_json(value),
        "field `idempotency_key` must be 1 to 128",
    );
    assert_eq!(err.request_id.as_deref(), Some("req-1"));

    assert_malformed(
        decode_json(envelope("run.list", json!({"limit": 5_000_000_000u64}))),
        "invalid payload for `run.list`",
    );
}

#[test]
fn oversized_payload_is_payload_too_large() {
    let limits = Limits {
        max_payload_bytes: 100,
        ..Limits::default()
    };
    // Canonical payload `{"reason":"…"}` is 13 bytes plus the reason.
    let fits = envelope("run.cancel", json!({"reason": "r".repeat(87)}));
    let mut fits_with_run = fits.clone();
    fits_with_run["run_id"] = json!("run-1");
    Request::decode(&serde_json::to_vec(&fits_with_run).unwrap(), &limits).unwrap();

    let mut over = envelope("run.cancel", json!({"reason": "r".repeat(88)}));
    over["run_id"] = json!("run-1");
    let err = Request::decode(&serde_json::to_vec(&over).unwrap(), &limits).unwrap_err();
    assert_eq!(err.code, RejectionCode::PayloadTooLarge);
    assert!(err.message.contains("101 bytes"), "{err}");
    assert_eq!(err.request_id.as_deref(), Some("req-1"));

    // Kinds without a payload still bound whatever is sent in `payload`.
    let junk = envelope("host.status", json!("x".repeat(200)));
    let err = Request::decode(&serde_json::to_vec(&junk).unwrap(), &limits).unwrap_err();
    assert_eq!(err.code, RejectionCode::PayloadTooLarge);
}

#[test]
fn repeated_keys_are_malformed_at_any_depth() {
    let body = br#"{"schema":"piw.protocol.v1","request_id":"dup-1","kind":"host.status","kind":"host.stop"}"#;
    let err = Request::decode(body, &limits()).unwrap_err();
    assert_eq!(err.code, RejectionCode::Malformed);
    assert!(err.message.contains("duplicate field `kind`"), "{err}");
    assert_eq!(err.request_id.as_deref(), Some("dup-1"), "id salvaged");

    let body = br#"{"schema":"piw.protocol.v1","request_id":"dup-2","kind":"run.start","payload":{"workflow_file":"a","input":{"x":1,"x":2}}}"#;
    let err = Request::decode(body, &limits()).unwrap_err();
    assert_eq!(err.code, RejectionCode::Malformed);
    assert!(err.message.contains("duplicate key `x`"), "{err}");

    // Unknown envelope fields are ignored, but not exempt: a repeated key is malformed there
    // too, at the top and inside (two readers of the frame must never disagree about it).
    let body = br#"{"schema":"piw.protocol.v1","request_id":"dup-3","kind":"host.status","extra":1,"extra":2}"#;
    let err = Request::decode(body, &limits()).unwrap_err();
    assert_eq!(err.code, RejectionCode::Malformed);
    assert!(err.message.contains("duplicate field `extra`"), "{err}");
    assert_eq!(err.request_id.as_deref(), Some("dup-3"), "id salvaged");
    let body = br#"{"schema":"piw.protocol.v1","request_id":"dup-4","kind":"host.status","extra":{"y":[{"z":1,"z":2}]}}"#;
    let err = Request::decode(body, &limits()).unwrap_err();
    assert_eq!(err.code, RejectionCode::Malformed);
    assert!(err.message.contains("duplicate key `z`"), "{err}");
    // A known field that repeats, even after a `null`, is malformed as before.
    let body = br#"{"schema":"piw.protocol.v1","request_id":"dup-5","kind":"run.status","run_id":null,"run_id":"r"}"#;
    let err = Request::decode(body, &limits()).unwrap_err();
    assert!(err.message.contains("duplicate field `run_id`"), "{err}");
    // Unknown fields without repeats are still ignored, and `null` still means absent.
    let body = br#"{"schema":"piw.protocol.v1","request_id":"ok-1","kind":"run.list","extra":{"a":{"b":1}},"run_id":null,"idempotency_key":null,"payload":null}"#;
    let request = Request::decode(body, &limits()).unwrap();
    assert_eq!(request.run_id, None);
    assert_eq!(request.idempotency_key, None);
}

#[test]
fn subscribe_needs_a_filter() {
    assert_malformed(
        decode_json(envelope("subscribe", json!({}))),
        "needs `run_id` or `session_id`",
    );
    assert_malformed(
        decode_json(envelope("subscribe", Value::Null)),
        "needs `run_id` or `session_id`",
    );
    let request = decode_json(envelope("subscribe", json!({"session_id": "s"}))).unwrap();
    assert!(matches!(
        request.body,
        RequestBody::Subscribe(Subscribe {
            session_id: Some(_),
            ..
        })
    ));
    let invalid = Request::new("r", RequestBody::Subscribe(Subscribe::default()));
    assert_eq!(
        invalid.validate(&limits()).unwrap_err().code,
        RejectionCode::Malformed
    );
}

#[test]
fn unknown_fields_are_ignored_and_null_means_absent() {
    let value = json!({
        "schema": PROTOCOL_SCHEMA,
        "request_id": "fwd-1",
        "kind": "run.start",
        "future_envelope_field": {"anything": [1, 2]},
        "run_id": null,
        "generation": null,
        "payload": {
            "workflow_file": "w.mjs",
            "session_id": null,
            "future_payload_field": true
        }
    });
    let request = decode_json(value).unwrap();
    assert_eq!(request.run_id, None);
    assert_eq!(request.generation, None);
    assert_eq!(
        request.body,
        RequestBody::RunStart(RunStart {
            workflow_file: "w.mjs".into(),
            input: json!({}),
            session_id: None,
            execution_mode: None,
            project_dir: None,
        })
    );

    // Kinds without a payload ignore it; kinds whose fields are all optional accept null.
    let request = decode_json(envelope("diagnose", json!({"verbose": true}))).unwrap();
    assert_eq!(request.body, RequestBody::Diagnose);
    let mut list = envelope("run.list", Value::Null);
    list.as_object_mut().unwrap().remove("payload");
    assert_eq!(
        decode_json(list).unwrap().body,
        RequestBody::RunList(RunList::default())
    );
}

#[test]
fn decode_error_messages_are_bounded() {
    let mut value = envelope(&"k".repeat(10_000), Value::Null);
    value["request_id"] = json!("r");
    let err = decode_json(value).unwrap_err();
    assert!(err.message.len() <= 512, "{}", err.message.len());
    let body = format!(
        r#"{{"schema":"piw.protocol.v1","request_id":"r","kind":"host.status","generation":"{}"}}"#,
        "9".repeat(5000)
    );
    let err = Request::decode(body.as_bytes(), &limits()).unwrap_err();
    assert!(err.message.len() <= 512);
}

// ---------------------------------------------------------------------------------------------
// Round trips and fingerprints

#[test]
fn every_request_kind_round_trips() {
    assert_eq!(RequestKind::ALL.len(), 57);
    for &kind in RequestKind::ALL {
        let request = sample(kind)
            .with_expected_revision(3)
            .with_idempotency_key(format!("key-{kind}"));
        assert_eq!(request.kind(), kind);
        assert_eq!(request.body.kind_str(), kind.as_str());
        assert_eq!(request.is_worker(), kind.as_str().starts_with("worker."));
        request.validate(&limits()).unwrap();

        let frame = encode_frame(&request, &limits()).unwrap();
        let wire: Value = serde_json::from_slice(&frame[4..]).unwrap();
        assert_eq!(wire["schema"], PROTOCOL_SCHEMA);
        assert_eq!(wire["kind"], kind.as_str());
        assert_eq!(wire["payload"], request.body.payload_json().unwrap());
        assert_eq!(kind.has_payload(), !wire["payload"].is_null(), "{kind}");

        let decoded = Request::decode(&frame[4..], &limits()).unwrap();
        assert_eq!(decoded, request, "{kind}");
        assert_eq!(
            decoded.fingerprint().unwrap(),
            request.fingerprint().unwrap()
        );
    }
}

#[test]
fn every_kind_without_its_required_fields_is_refused_by_validate() {
    for &kind in RequestKind::ALL {
        let full = sample(kind);
        for field in kind.required_fields().names() {
            let mut partial = full.clone();
            match field {
                "run_id" => partial.run_id = None,
                "node_id" => partial.node_id = None,
                "attempt_id" => partial.attempt_id = None,
                "generation" => partial.generation = None,
                other => panic!("unexpected field {other}"),
            }
            let err = partial.validate(&limits()).unwrap_err();
            assert!(err.message.contains(field), "{kind}: {err}");
            let body = serde_json::to_vec(&partial).unwrap();
            assert_eq!(Request::decode(&body, &limits()).unwrap_err(), err);
        }
    }
}

#[test]
fn fingerprint_matches_its_documented_definition() {
    let request = Request::new(
        "r-1",
        RequestBody::RunCancel(RunCancel {
            reason: Some("stop".into()),
        }),
    )
    .with_run_id("run-1");
    // sha256 of {"attempt_id":null,"kind":"run.cancel","node_id":null,"payload":{"reason":"stop"},"run_id":"run-1"}
    assert_eq!(
        request.fingerprint().unwrap(),
        "24528be4d20bd9a86028c8662905c704f34a906366f5811fa9f4d9a92858c302"
    );
    assert_eq!(
        canonical_json(&json!({
            "attempt_id": null, "kind": "run.cancel", "node_id": null,
            "payload": {"reason": "stop"}, "run_id": "run-1"
        })),
        r#"{"attempt_id":null,"kind":"run.cancel","node_id":null,"payload":{"reason":"stop"},"run_id":"run-1"}"#
    );

    // Not part of the fingerprint: request id, generation, revision, idempotency key, spelling.
    let respelled = br#"{ "payload": {"reason": "stop", "extra": 1}, "kind": "run.cancel",
        "run_id": "run-1", "request_id": "other", "generation": 9, "expected_revision": 4,
        "idempotency_key": "k", "schema": "piw.protocol.v1" }"#;
    let decoded = Request::decode(respelled, &limits()).unwrap();
    assert_eq!(
        decoded.fingerprint().unwrap(),
        request.fingerprint().unwrap()
    );

    // Part of it: payload, ids, kind.
    let other_reason = Request::new(
        "r-1",
        RequestBody::RunCancel(RunCancel {
            reason: Some("halt".into()),
        }),
    )
    .with_run_id("run-1");
    assert_ne!(
        other_reason.fingerprint().unwrap(),
        request.fingerprint().unwrap()
    );
    let other_run = request.clone().with_run_id("run-2");
    assert_ne!(
        other_run.fingerprint().unwrap(),
        request.fingerprint().unwrap()
    );
    let pause = Request::new("r-1", RequestBody::RunPause).with_run_id("run-1");
    assert_ne!(pause.fingerprint().unwrap(), request.fingerprint().unwrap());

    // Absent optional payload fields and explicit nulls mean the same request.
    let implicit = Request::decode(
        br#"{"schema":"piw.protocol.v1","request_id":"a","kind":"run.cancel","run_id":"run-1"}"#,
        &limits(),
    )
    .unwrap();
    let explicit = Request::decode(
        br#"{"schema":"piw.protocol.v1","request_id":"b","kind":"run.cancel","run_id":"run-1","payload":{"reason":null}}"#,
        &limits(),
    )
    .unwrap();
    assert_eq!(
        implicit.fingerprint().unwrap(),
        explicit.fingerprint().unwrap()
    );
}

#[test]
fn worker_hello_debug_redacts_the_token() {
    let request = sample(RequestKind::WorkerHello);
    let debug = format!("{request:?}");
    assert!(!debug.contains("secret-token"), "{debug}");
    assert!(debug.contains("<redacted>"));
}

#[test]
fn attempt_outcome_and_effect_result_wire_forms() {
    assert_eq!(
        serde_json::to_value(AttemptOutcome::Succeeded { output: json!(1) }).unwrap(),
        json!({"status": "succeeded", "output": 1})
    );
    assert_eq!(
        serde_json::to_value(AttemptOutcome::Failed { error: "e".into() }).unwrap(),
        json!({"status": "failed", "error": "e"})
    );
    assert_eq!(
        serde_json::to_value(AttemptOutcome::TimedOut).unwrap(),
        json!({"status": "timed_out"})
    );
    assert_eq!(
        serde_json::from_value::<AttemptOutcome>(json!({"status": "succeeded"})).unwrap(),
        AttemptOutcome::Succeeded {
            output: Value::Null
        }
    );
    assert_eq!(
        serde_json::to_value(EffectResult::Failed { error: "no".into() }).unwrap(),
        json!({"status": "failed", "error": "no"})
    );
    assert_eq!(
        serde_json::to_value(EffectResult::Applied {
            receipt: json!({"id": 1})
        })
        .unwrap(),
        json!({"status": "applied", "receipt": {"id": 1}})
    );
    for (value, wire) in [
        (serde_json::to_value(RetryContract::Never).unwrap(), "never"),
        (
            serde_json::to_value(RetryContract::IdempotencyKey).unwrap(),
            "idempotency_key",
        ),
        (
            serde_json::to_value(RetryContract::ReadBack).unwrap(),
            "read_back",
        ),
        (
            serde_json::to_value(DecisionKind::Checkpoint).unwrap(),
            "checkpoint",
        ),
        (
            serde_json::to_value(DecisionKind::HumanDecision).unwrap(),
            "human_decision",
        ),
        (
            serde_json::to_value(InteractionKind::Agent).unwrap(),
            "agent",
        ),
        (
            serde_json::to_value(InteractionKind::AssistantMessage).unwrap(),
            "assistant_message",
        ),
        (
            serde_json::to_value(ExecutionMode::Interactive).unwrap(),
            "interactive",
        ),
        (
            serde_json::to_value(ExecutionMode::Detached).unwrap(),
            "detached",
        ),
    ] {
        assert_eq!(value, json!(wire));
    }
}

// ---------------------------------------------------------------------------------------------
// Server frames

fn server_frames() -> Vec<ServerFrame> {
    vec![
        ServerFrame::receipt("r-1", Receipt::new(Some(4), json!({"run_id": "run-1"}))),
        ServerFrame::receipt("r-2", Receipt::new(None, Value::Null).replayed()),
        ServerFrame::rejection(
            "r-3",
            Rejection::new(RejectionCode::StaleRevision, "run moved on")
                .with_details(json!({"current_revision": 9})),
        ),
        ServerFrame::rejection(
            "r-4",
            Rejection::new(RejectionCode::NotFound, "no such run"),
        ),
        ServerFrame::Event(Event {
            schema: ProtocolSchema,
            subscription_id: "sub-1".into(),
            run_id: "run-1".into(),
            seq: 17,
            event_kind: "node.transitioned".into(),
            status: "running".into(),
            revision: 18,
            at_ms: 1_700_000_000_123,
            data: json!({"from": "a", "to": "b"}),
        }),
        ServerFrame::goodbye(RejectionCode::HostShuttingDown, "host is stopping"),
    ]
}

#[test]
fn every_server_frame_round_trips() {
    for frame in server_frames() {
        let bytes = encode_frame(&frame, &limits()).unwrap();
        assert_eq!(ServerFrame::decode(&bytes[4..]).unwrap(), frame);
        let via_serde: ServerFrame = serde_json::from_slice(&bytes[4..]).unwrap();
        assert_eq!(via_serde, frame);
    }
}

#[test]
fn server_frame_wire_shapes() {
    let frames = server_frames();
    let wire: Vec<Value> = frames
        .iter()
        .map(|f| serde_json::to_value(f).unwrap())
        .collect();
    assert_eq!(
        wire[0],
        json!({"type": "response", "schema": PROTOCOL_SCHEMA, "request_id": "r-1", "ok": true,
               "receipt": {"revision": 4, "replayed": false, "body": {"run_id": "run-1"}}})
    );
    assert_eq!(wire[1]["receipt"]["replayed"], json!(true));
    assert_eq!(wire[1]["receipt"]["revision"], Value::Null);
    assert_eq!(
        wire[2],
        json!({"type": "response", "schema": PROTOCOL_SCHEMA, "request_id": "r-3", "ok": false,
               "rejection": {"code": "stale_revision", "message": "run moved on",
                             "details": {"current_revision": 9}}})
    );
    assert_eq!(
        wire[4],
        json!({"type": "event", "schema": PROTOCOL_SCHEMA, "subscription_id": "sub-1",
               "run_id": "run-1", "seq": 17, "event_kind": "node.transitioned",
               "status": "running", "revision": 18, "at_ms": 1_700_000_000_123u64,
               "data": {"from": "a", "to": "b"}})
    );
    assert_eq!(
        wire[5],
        json!({"type": "goodbye", "schema": PROTOCOL_SCHEMA, "code": "host_shutting_down",
               "message": "host is stopping"})
    );
    let ServerFrame::Response(response) = &frames[0] else {
        panic!()
    };
    assert!(response.is_ok());
}

#[test]
fn server_frame_decode_errors_are_typed() {
    let err = ServerFrame::decode(
        br#"{"type":"goodbye","schema":"piw.protocol.v9","code":"internal","message":""}"#,
    )
    .unwrap_err();
    assert_eq!(err.code, RejectionCode::UnsupportedProtocol);

    for body in [
        &br#"{"type":"response","schema":"piw.protocol.v1","request_id":"r","ok":true}"#[..],
        br#"{"type":"response","schema":"piw.protocol.v1","request_id":"r","ok":false}"#,
        br#"{"type":"teapot","schema":"piw.protocol.v1"}"#,
        br#"{"type":"goodbye","message":""}"#,
        br#"{"type":"goodbye","schema":"piw.protocol.v1","code":"internal","message":"","message":""}"#,
        b"\xfe",
        b"{",
        b"[]",
    ] {
        let err = ServerFrame::decode(body).unwrap_err();
        assert_eq!(err.code, RejectionCode::Malformed, "{err}");
    }

    // A code a newer host may send decodes as `unknown`; the frame is not malformed.
    let frame = ServerFrame::decode(
        br#"{"type":"goodbye","schema":"piw.protocol.v1","code":"nope","message":"m"}"#,
    )
    .unwrap();
    assert_eq!(frame, ServerFrame::goodbye(RejectionCode::Unknown, "m"));

    // Unknown fields and defaults.
    let frame = ServerFrame::decode(
        br#"{"type":"response","schema":"piw.protocol.v1","request_id":"r","ok":true,"receipt":{},"later":1}"#,
    )
    .unwrap();
    assert_eq!(frame, ServerFrame::receipt("r", Receipt::default()));
}

#[test]
fn rejection_codes_have_stable_strings() {
    let expected = [
        "malformed",
        "unsupported_protocol",
        "payload_too_large",
        "unauthorized",
        "not_found",
        "invalid_transition",
        "stale_revision",
        "stale_generation",
        "stale_attempt",
        "claim_lost",
        "idempotency_conflict",
        "effect_conflict",
        "effect_uncertain",
        "host_shutting_down",
        "subscriber_lagged",
        "pi_unusable",
        "internal",
    ];
    let actual: Vec<&str> = RejectionCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(actual, expected);
    for code in RejectionCode::ALL {
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        assert_eq!(format!("{code}"), code.as_str());
    }
    assert!(RejectionCode::StaleRevision.retry_may_help());
    assert!(!RejectionCode::Malformed.retry_may_help());
}
