//! Fuzzing the frame decoder and the request decoder.
//!
//! A seeded loop feeds well over 100,000 generated frames (valid requests, mutated valid
//! requests, random bodies, random length prefixes, random envelopes) through `FrameDecoder`
//! and `Request::decode`, in random chunkings and under random limits. It asserts that nothing
//! panics, that every outcome is a request or a typed error with an expected code, and that
//! every accepted request re-encodes to itself. Proptest adds shrinking properties for
//! chunking and arbitrary input.

use std::collections::BTreeMap;

use piw_host::protocol::*;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Valid request bodies, one per kind, written as a client in another language would.
const CORPUS: &[&str] = &[
    r#"{"schema":"piw.protocol.v1","request_id":"c1","kind":"host.status"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c2","kind":"host.stop","payload":null}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c3","kind":"run.start","payload":{"workflow_file":"a.workflow.mjs","input":{"n":1,"s":"x","l":[true,null,2.5]},"session_id":"s1","execution_mode":"detached","project_dir":"/p"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c4","kind":"run.status","run_id":"run-1"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c5","kind":"run.list","payload":{"limit":10,"session_id":"s1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c6","kind":"run.pause","run_id":"run-1","expected_revision":3}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c7","kind":"run.resume","run_id":"run-1","idempotency_key":"k7"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c8","kind":"run.cancel","run_id":"run-1","payload":{"reason":"no"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c8v","kind":"value.get","run_id":"run-1","payload":{"sha256":"ab","offset":0,"max_bytes":1024}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w7v","kind":"worker.value_put","run_id":"run-1","generation":2,"payload":{"sha256":"ab","bytes":2,"offset":0,"data":"7b7d"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c8d","kind":"run.detach","run_id":"run-1"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c8p","kind":"run.prune","payload":{"older_than_ms":86400000,"statuses":["completed","failed"],"keep":10,"dry_run":true,"limit":50,"cursor":null}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c8r","kind":"run.retry","run_id":"run-1","payload":{"reason":"fixed","by":"ana"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c8e","kind":"effect.resolve","run_id":"run-1","payload":{"effect_id":"eff-1","result":{"status":"failed","error":"never sent"}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c9","kind":"checkpoint.answer","run_id":"run-1","payload":{"decision_id":"d1","answer":"yes"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c10","kind":"decision.answer","run_id":"run-1","payload":{"decision_id":"d2","answer":{"ok":false}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c11","kind":"interaction.list","payload":{"session_id":"s1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c12","kind":"interaction.submit","run_id":"run-1","node_id":"n1","attempt_id":"a1","payload":{"interaction_id":"i1","result":{"text":"done"}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c12f","kind":"interaction.fail","run_id":"run-1","node_id":"n1","attempt_id":"a1","payload":{"interaction_id":"i1","reason":"no submission after 2 reminders"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c12u","kind":"interaction.update","run_id":"run-1","node_id":"n1","attempt_id":"a1","payload":{"interaction_id":"i1","message":"half done","data":{"files":3}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c13","kind":"message.claim","payload":{"session_id":"s1","limit":5}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c14","kind":"message.ack","payload":{"message_id":"m1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c15","kind":"subscribe","payload":{"run_id":"run-1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c16","kind":"unsubscribe","payload":{"subscription_id":"sub-1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c17","kind":"diagnose"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c18","kind":"repair","run_id":"run-1"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c19","kind":"channel.reload"}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"c20","kind":"interaction.value_put","run_id":"run-1","node_id":"n1","attempt_id":"a1","payload":{"interaction_id":"i1","sha256":"ab","bytes":2,"offset":0,"data":"7b7d"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k1","kind":"controller.register","payload":{"project_dir":"/p","name":"pr","source_path":"/p/.pi/controllers/pr.controller.mjs","source_hash":"ab","pass_deadline_ms":60000}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k2","kind":"controller.enable","payload":{"project_dir":"/p","name":"pr"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k3","kind":"controller.disable","payload":{"project_dir":"/p","name":"pr"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k4","kind":"resource.apply","payload":{"project_dir":"/p","controller":"pr","key":"o/r#1","spec":{"number":1,"expectedHead":"abc"},"expected_resource_version":3}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k5","kind":"resource.get","payload":{"project_dir":"/p","controller":"pr","key":"o/r#1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k6","kind":"resource.list","payload":{"project_dir":"/p","controller":"pr"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k7","kind":"resource.delete","payload":{"project_dir":"/p","controller":"pr","key":"o/r#1","expected_resource_version":4}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k8","kind":"resource.reconcile","payload":{"project_dir":"/p","controller":"pr","key":"o/r#1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k9","kind":"controller.effect.record","payload":{"pass":{"resource_uid":"res-1","pass_id":"pass-1","token":"t"},"key":"merge:1:abc","kind":"merge","generation":1,"request_fingerprint":"ff"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k10","kind":"controller.effect.get","payload":{"pass":{"resource_uid":"res-1","pass_id":"pass-1","token":"t"},"key":"merge:1:abc"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k11","kind":"controller.effect.settle","payload":{"pass":{"resource_uid":"res-1","pass_id":"pass-1","token":"t"},"key":"merge:1:abc","state":"applied","external_ref":"sha"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k12","kind":"controller.workflow.ensure","payload":{"pass":{"resource_uid":"res-1","pass_id":"pass-1","token":"t"},"request_key":"review:1","workflow":"review","workflow_file":"/p/review.workflow.mjs","project_dir":"/p","input":{"n":1},"input_fingerprint":"ee"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"k13","kind":"controller.pass.finish","payload":{"pass":{"resource_uid":"res-1","pass_id":"pass-1","token":"t"},"kind":"requeue","after_ms":30000,"status":{"phase":"waiting"},"finalizers":["piw/label"]}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w1","kind":"worker.hello","run_id":"run-1","generation":2,"payload":{"child_token":"t","pid":99}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w2","kind":"worker.node_started","run_id":"run-1","generation":2,"node_id":"n1","payload":{"deadline_ms":1700000000000}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w3","kind":"worker.transition","run_id":"run-1","generation":2,"node_id":"n1","attempt_id":"a1","payload":{"outcome":{"status":"succeeded","output":{"path":"b"}},"next_node":"n2"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w4","kind":"worker.complete","run_id":"run-1","generation":2,"node_id":"n2","attempt_id":"a2","payload":{"outcome":{"status":"failed","error":"e"},"result":null}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w5","kind":"worker.fail","run_id":"run-1","generation":2,"payload":{"error":"boom"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w6","kind":"worker.progress","run_id":"run-1","generation":2,"payload":{"message":"half","data":{"pct":50}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w7","kind":"worker.wait","run_id":"run-1","generation":2,"node_id":"n3","attempt_id":"a3","payload":{"decision_kind":"checkpoint","request":{"q":"?"}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w7t","kind":"worker.wait_until","run_id":"run-1","generation":2,"node_id":"n3","attempt_id":"a3","payload":{"for_ms":60000,"until_ms":null,"output":{"x":1}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w8","kind":"worker.interaction_request","run_id":"run-1","generation":2,"node_id":"n4","attempt_id":"a4","payload":{"interaction_kind":"agent","request":{"prompt":"p"},"deadline_ms":5}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w9","kind":"worker.notify","run_id":"run-1","generation":2,"node_id":"n5","attempt_id":"a5","payload":{"content":"hi"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w10","kind":"worker.effect_reserve","run_id":"run-1","generation":2,"node_id":"n6","attempt_id":"a6","payload":{"effect_key":"mail","fingerprint":"f","retry_contract":"read_back"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w11","kind":"worker.effect_applying","run_id":"run-1","generation":2,"payload":{"effect_id":"e1"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w12","kind":"worker.effect_settle","run_id":"run-1","generation":2,"payload":{"effect_id":"e1","result":{"status":"applied","receipt":{"id":7}}}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w13","kind":"worker.validation_result","run_id":"run-1","generation":2,"payload":{"submission_id":"sb1","accepted":true,"error":null}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w14","kind":"worker.exit","run_id":"run-1","generation":2,"payload":{"reason":"parked"}}"#,
    r#"{"schema":"piw.protocol.v1","request_id":"w15","kind":"worker.results","run_id":"run-1","generation":2,"payload":{"offset":4}}"#,
];

/// Field names that appear somewhere in the protocol, so random envelopes hit real fields.
const FIELD_NAMES: &[&str] = &[
    "schema",
    "request_id",
    "kind",
    "run_id",
    "node_id",
    "attempt_id",
    "generation",
    "expected_revision",
    "idempotency_key",
    "payload",
    "workflow_file",
    "input",
    "session_id",
    "execution_mode",
    "project_dir",
    "limit",
    "reason",
    "decision_id",
    "answer",
    "interaction_id",
    "result",
    "message_id",
    "subscription_id",
    "child_token",
    "pid",
    "deadline_ms",
    "outcome",
    "next_node",
    "status",
    "output",
    "error",
    "message",
    "data",
    "decision_kind",
    "request",
    "interaction_kind",
    "content",
    "effect_key",
    "fingerprint",
    "retry_contract",
    "effect_id",
    "receipt",
    "submission_id",
    "accepted",
    "type",
    "ok",
];

/// Deterministic SplitMix64, so a failure reproduces exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
    fn string(&mut self, max_chars: usize) -> String {
        let len = self.below(max_chars + 1);
        (0..len)
            .map(|_| match self.below(10) {
                0 => *self.pick(&['é', '→', '\u{0}', '"', '\\', '\n', '😀', '\u{7f}']),
                _ => (b'a' + self.below(26) as u8) as char,
            })
            .collect()
    }
    fn json(&mut self, depth: usize) -> Value {
        match self.below(if depth == 0 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(self.chance(50)),
            2 => match self.below(4) {
                0 => json!(self.next()),
                1 => json!(-(self.below(1_000_000) as i64)),
                2 => json!(self.below(1000) as f64 / 8.0),
                _ => json!(self.below(100)),
            },
            3 | 4 => Value::String(self.string(12)),
            5 => Value::Array((0..self.below(4)).map(|_| self.json(depth - 1)).collect()),
            _ => {
                let mut map = Map::new();
                for _ in 0..self.below(5) {
                    let key = if self.chance(70) {
                        (*self.pick(FIELD_NAMES)).to_owned()
                    } else {
                        self.string(6)
                    };
                    map.insert(key, self.json(depth - 1));
                }
                Value::Object(map)
            }
        }
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// A corpus request with a fresh id and, sometimes, extra optional and unknown fields.
fn valid_body(rng: &mut Rng) -> Vec<u8> {
    let entry: &&str = rng.pick(CORPUS);
    let mut value: Value = serde_json::from_str(entry).expect("corpus is JSON");
    let object = value.as_object_mut().expect("corpus entries are objects");
    let id_chars = 1 + rng.below(128);
    let id: String = (0..id_chars)
        .map(|_| if rng.chance(10) { 'ü' } else { 'r' })
        .collect();
    object.insert("request_id".into(), json!(id));
    if rng.chance(30) {
        object.insert("idempotency_key".into(), json!(format!("k{}", rng.next())));
    }
    if rng.chance(30) {
        object.insert("expected_revision".into(), json!(rng.next()));
    }
    if rng.chance(20) {
        object.insert(format!("x_{}", rng.string(5)), rng.json(3));
    }
    if rng.chance(20) {
        object.insert("run_id".into(), json!(rng.string(20)));
    }
    if rng.chance(50) {
        serde_json::to_vec(&value).expect("encodes")
    } else {
        serde_json::to_vec_pretty(&value).expect("encodes")
    }
}

fn mutate(rng: &mut Rng, mut body: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let len = body.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                body[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                body.insert(i, *rng.pick(b"{}[]\":,0-9.eE\\ nul"));
            }
            2 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(8)).min(len);
                body.drain(start..end);
            }
            3 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(16)).min(len);
                let chunk = body[start..end].to_vec();
                let at = rng.below(len + 1);
                body.splice(at..at, chunk);
            }
            4 if len > 0 => body.truncate(rng.below(len)),
            5 if len > 0 => {
                let i = rng.below(len);
                body[i] = rng.next() as u8;
            }
            6 => {
                // Splice in a piece of another valid request.
                let other = rng.pick(CORPUS).as_bytes();
                let start = rng.below(other.len());
                let end = (start + 1 + rng.below(40)).min(other.len());
                let at = rng.below(len + 1);
                body.splice(at..at, other[start..end].iter().copied());
            }
            _ => {
                // Swap a string value for a number, a typical type confusion.
                if let Some(pos) = body.windows(2).position(|w| w == b":\"") {
                    body.splice(pos + 1..pos + 1, b"12345,\"z\":".iter().copied());
                }
            }
        }
    }
    body
}

fn random_envelope(rng: &mut Rng) -> Vec<u8> {
    let mut map = Map::new();
    let schema = match rng.below(10) {
        0 => rng.json(1),
        1 => json!("piw.protocol.v2"),
        _ => json!(PROTOCOL_SCHEMA),
    };
    map.insert("schema".into(), schema);
    let kinds = RequestKind::ALL;
    let kind = if rng.chance(85) {
        json!(rng.pick(kinds).as_str())
    } else {
        rng.json(1)
    };
    map.insert("kind".into(), kind);
    let request_id = if rng.chance(90) {
        json!(rng.string(140))
    } else {
        rng.json(1)
    };
    map.insert("request_id".into(), request_id);
    for field in ["run_id", "node_id", "attempt_id", "idempotency_key"] {
        if rng.chance(50) {
            let value = if rng.chance(80) {
                json!(rng.string(10))
            } else {
                rng.json(1)
            };
            map.insert(field.into(), value);
        }
    }
    for field in ["generation", "expected_revision"] {
        if rng.chance(50) {
            let value = if rng.chance(80) {
                json!(rng.next())
            } else {
                rng.json(1)
            };
            map.insert(field.into(), value);
        }
    }
    map.insert("payload".into(), rng.json(4));
    serde_json::to_vec(&Value::Object(map)).expect("encodes")
}

fn pathological_body(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => {
            let depth = 100 + rng.below(2000);
            let mut body = "[".repeat(depth);
            body.push_str(&"]".repeat(depth));
            body.into_bytes()
        }
        1 => {
            let depth = 50 + rng.below(300);
            let mut body = String::from(
                r#"{"schema":"piw.protocol.v1","request_id":"deep","kind":"run.start","payload":{"workflow_file":"w","input":"#,
            );
            body.push_str(&"{\"a\":".repeat(depth));
            body.push('1');
            body.push_str(&"}".repeat(depth));
            body.push_str("}}");
            body.into_bytes()
        }
        2 => {
            // Many repeated keys.
            let mut body = String::from(r#"{"schema":"piw.protocol.v1","request_id":"dups""#);
            for _ in 0..rng.below(50) {
                body.push_str(r#","run_id":"x""#);
            }
            body.push('}');
            body.into_bytes()
        }
        _ => format!("\"{}\"", "\\u0000".repeat(rng.below(3000))).into_bytes(),
    }
}

#[derive(Default)]
struct Tally {
    /// Generated frames, including those after a connection-ending error that never reach
    /// the decoder.
    generated: usize,
    decoded: usize,
    accepted: usize,
    decode_errors: BTreeMap<&'static str, usize>,
    frame_errors: BTreeMap<&'static str, usize>,
}

fn check_body(body: &[u8], limits: &Limits, tally: &mut Tally) {
    tally.decoded += 1;
    // The client-side decoder must survive anything too.
    let _ = ServerFrame::decode(body);
    match Request::decode(body, limits) {
        Ok(request) => {
            tally.accepted += 1;
            let unbounded = Limits {
                max_payload_bytes: usize::MAX,
                max_frame_bytes: usize::MAX,
                max_buffered_bytes: usize::MAX,
            };
            request
                .validate(&unbounded)
                .expect("an accepted request is valid");
            let fingerprint = request.fingerprint().expect("fingerprint");
            assert_eq!(fingerprint.len(), 64);
            let reencoded = encode_frame(&request, &unbounded).expect("re-encodes");
            let again = Request::decode(&reencoded[4..], &unbounded).expect("re-decodes");
            assert_eq!(again, request);
            assert_eq!(again.fingerprint().expect("fingerprint"), fingerprint);
        }
        Err(err) => {
            assert!(
                matches!(
                    err.code,
                    RejectionCode::Malformed
                        | RejectionCode::UnsupportedProtocol
                        | RejectionCode::PayloadTooLarge
                ),
                "unexpected code {err}"
            );
            assert!(err.message.len() <= 512);
            if let Some(id) = &err.request_id {
                let chars = id.chars().count();
                assert!((1..=128).contains(&chars));
                let rejection = err.rejection_frame().expect("id known");
                encode_frame(&rejection, &Limits::default()).expect("rejection encodes");
            }
            encode_frame(&err.goodbye_frame(), &Limits::default()).expect("goodbye encodes");
            *tally.decode_errors.entry(err.code.as_str()).or_default() += 1;
        }
    }
}

fn frame_error_name(err: &FrameError) -> &'static str {
    match err {
        FrameError::TooLarge { .. } => "too_large",
        FrameError::BufferFull { .. } => "buffer_full",
        FrameError::Empty => "empty",
        FrameError::Truncated => "truncated",
        FrameError::Encode(_) => "encode",
        FrameError::Io(_) => "io",
    }
}

/// One simulated connection: a stream of generated frames pushed in random chunks.
fn run_connection(rng: &mut Rng, tally: &mut Tally) {
    let limits = if rng.chance(85) {
        Limits::default()
    } else {
        let max_frame_bytes = 16 + rng.below(2048);
        Limits {
            max_frame_bytes,
            max_buffered_bytes: max_frame_bytes / 2 + rng.below(max_frame_bytes * 3),
            max_payload_bytes: rng.below(512),
        }
    };

    let mut stream = Vec::new();
    for _ in 0..1 + rng.below(8) {
        tally.generated += 1;
        let item = match rng.below(100) {
            0..=29 => frame(&valid_body(rng)),
            30..=64 => {
                let body = valid_body(rng);
                frame(&mutate(rng, body))
            }
            65..=74 => {
                let len = rng.below(300);
                frame(&rng.bytes(len))
            }
            75..=81 => {
                // Random length prefix followed by random bytes: usually truncated or huge.
                let mut item = match rng.below(3) {
                    0 => (rng.next() as u32).to_be_bytes().to_vec(),
                    1 => (rng.below(64) as u32).to_be_bytes().to_vec(),
                    _ => 0u32.to_be_bytes().to_vec(),
                };
                let len = rng.below(80);
                item.extend(rng.bytes(len));
                item
            }
            82..=96 => frame(&random_envelope(rng)),
            _ => frame(&pathological_body(rng)),
        };
        stream.extend(item);
    }

    let mut decoder = FrameDecoder::new(limits);
    let mut offset = 0;
    while offset < stream.len() {
        let max_chunk = if rng.chance(50) { 16 } else { stream.len() };
        let chunk = 1 + rng.below(max_chunk);
        let end = (offset + chunk).min(stream.len());
        if let Err(err) = decoder.push(&stream[offset..end]) {
            assert!(matches!(err, FrameError::BufferFull { .. }), "{err:?}");
            *tally
                .frame_errors
                .entry(frame_error_name(&err))
                .or_default() += 1;
            return; // The host closes the connection.
        }
        assert!(decoder.buffered_len() <= limits.max_buffered_bytes);
        offset = end;
        loop {
            match decoder.next_frame() {
                Ok(Some(body)) => {
                    assert!(!body.is_empty() && body.len() <= limits.max_frame_bytes);
                    check_body(&body, &limits, tally);
                }
                Ok(None) => break,
                Err(err) => {
                    assert!(
                        matches!(err, FrameError::TooLarge { .. } | FrameError::Empty),
                        "{err:?}"
                    );
                    *tally
                        .frame_errors
                        .entry(frame_error_name(&err))
                        .or_default() += 1;
                    return;
                }
            }
        }
    }
    if let Err(err) = decoder.finish() {
        assert!(matches!(err, FrameError::Truncated), "{err:?}");
        *tally
            .frame_errors
            .entry(frame_error_name(&err))
            .or_default() += 1;
    }
}

#[test]
fn seeded_fuzz_of_100k_frames() {
    let mut rng = Rng(0x5EED_F00D_B1F5_u64);
    let mut tally = Tally::default();
    // A frame counts as fed once it produced an outcome: a decoded body or a frame error.
    let fed = |tally: &Tally| tally.decoded + tally.frame_errors.values().sum::<usize>();
    while fed(&tally) < 110_000 {
        run_connection(&mut rng, &mut tally);
    }
    eprintln!(
        "generated {} frames, fed {}, decoded {}, accepted {}, decode errors {:?}, frame errors {:?}",
        tally.generated,
        fed(&tally),
        tally.decoded,
        tally.accepted,
        tally.decode_errors,
        tally.frame_errors
    );
    assert!(fed(&tally) >= 100_000);
    // Every path was exercised, not just the easy ones.
    assert!(tally.accepted > 10_000, "accepted {}", tally.accepted);
    for code in ["malformed", "unsupported_protocol", "payload_too_large"] {
        assert!(
            tally.decode_errors.get(code).copied().unwrap_or(0) > 50,
            "{code}"
        );
    }
    for error in ["too_large", "buffer_full", "empty", "truncated"] {
        assert!(
            tally.frame_errors.get(error).copied().unwrap_or(0) > 50,
            "{error}"
        );
    }
}

#[test]
fn every_corpus_entry_is_valid() {
    for body in CORPUS {
        let request = Request::decode(body.as_bytes(), &Limits::default())
            .unwrap_or_else(|err| panic!("{body}: {err}"));
        assert!(body.contains(&format!("\"kind\":\"{}\"", request.kind())));
    }
    let kinds: std::collections::BTreeSet<&str> = CORPUS
        .iter()
        .map(|body| {
            Request::decode(body.as_bytes(), &Limits::default())
                .unwrap()
                .kind()
                .as_str()
        })
        .collect();
    assert_eq!(kinds.len(), RequestKind::ALL.len(), "one entry per kind");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// However a stream of valid frames is chunked, the same bodies come out.
    #[test]
    fn chunking_never_changes_the_frames(
        picks in proptest::collection::vec(0..CORPUS.len(), 1..20),
        cuts in proptest::collection::vec(1usize..64, 1..200),
    ) {
        let mut stream = Vec::new();
        for &i in &picks {
            stream.extend(frame(CORPUS[i].as_bytes()));
        }
        let mut decoder = FrameDecoder::new(Limits::default());
        let mut bodies = Vec::new();
        let mut offset = 0;
        let mut cut = cuts.iter().cycle();
        while offset < stream.len() {
            let end = (offset + cut.next().copied().unwrap_or(1)).min(stream.len());
            decoder.push(&stream[offset..end]).unwrap();
            offset = end;
            while let Some(body) = decoder.next_frame().unwrap() {
                bodies.push(body);
            }
        }
        prop_assert!(decoder.finish().is_ok());
        let expected: Vec<Vec<u8>> = picks.iter().map(|&i| CORPUS[i].as_bytes().to_vec()).collect();
        prop_assert_eq!(bodies, expected);
    }

    /// Arbitrary bytes never panic the decoders and never exceed the buffer bound.
    #[test]
    fn arbitrary_bytes_are_handled(
        data in proptest::collection::vec(any::<u8>(), 0..2048),
        max_frame in 1usize..512,
        max_buffered in 1usize..1024,
    ) {
        let limits = Limits { max_frame_bytes: max_frame, max_buffered_bytes: max_buffered, max_payload_bytes: 64 };
        let mut decoder = FrameDecoder::new(limits);
        for chunk in data.chunks(7) {
            if decoder.push(chunk).is_err() {
                break;
            }
            prop_assert!(decoder.buffered_len() <= max_buffered);
            match decoder.next_frame() {
                Ok(Some(body)) => {
                    let _ = Request::decode(&body, &limits);
                }
                Ok(None) => {}
                Err(_) => break,
            }
        }
        let _ = Request::decode(&data, &limits);
        let _ = ServerFrame::decode(&data);
        let _ = read_frame(&mut &data[..], &limits);
    }
}
