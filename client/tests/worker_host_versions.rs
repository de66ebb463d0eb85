//! The worker library against a scripted fake host: what it sends depends on what the host
//! said it understands (`features` in the hello reply), so a worker newer than its host (a
//! package upgraded under a running host) never relies on a field that host would drop.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::thread::JoinHandle;

use piw_client::protocol::payload::{AttemptOutcome, HOST_FEATURES};
use piw_client::protocol::{
    encode_frame, read_frame, Limits, Receipt, Request, RequestBody, ServerFrame,
};
use piw_client::worker::{LaunchEnvelope, Worker};
use serde_json::{json, Value};

/// A fake host for one worker connection: answers the hello with `features` (none when
/// `None`, like a host older than the list), every other request with an empty receipt, and
/// returns the `worker.complete` payload it received.
fn fake_host(listener: UnixListener, features: Option<Value>) -> JoinHandle<Option<Value>> {
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut complete = None;
        while let Ok(Some(body)) = read_frame(&mut stream, &Limits::default()) {
            let request = Request::decode(&body, &Limits::default()).unwrap();
            let mut reply = json!({});
            match &request.body {
                RequestBody::WorkerHello(_) => {
                    reply = json!({ "mode": "run", "resume": { "resume": "fresh",
                        "node_id": "a", "attempt_id": "att-1" } });
                    if let Some(features) = &features {
                        reply["features"] = features.clone();
                    }
                }
                RequestBody::WorkerComplete(c) => complete = Some(serde_json::to_value(c).unwrap()),
                _ => {}
            }
            let frame = ServerFrame::receipt(request.request_id.clone(), Receipt::new(None, reply));
            stream
                .write_all(&encode_frame(&frame, &Limits::default()).unwrap())
                .unwrap();
        }
        complete
    })
}

/// Says hello to a fake host with `features` and completes with a result equal to the output;
/// returns the `worker.complete` payload the host received.
fn complete_against(features: Option<Value>) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("host.sock");
    let host = fake_host(UnixListener::bind(&socket).unwrap(), features);
    let env = LaunchEnvelope {
        schema: piw_client::worker::LAUNCH_SCHEMA.into(),
        run_id: "run-1".into(),
        generation: 1,
        child_token: "secret".into(),
        mode: "run".into(),
        source_root: "/nowhere".into(),
        source_hash: String::new(),
        mounted_sources: Default::default(),
        project_dir: "/".into(),
        input_hash: String::new(),
        socket_path: socket,
    };
    let mut worker = Worker::connect(env).unwrap();
    worker.hello_and_start(None, &Default::default()).unwrap();
    let output = json!({ "text": "the same value" });
    worker
        .complete(
            AttemptOutcome::Succeeded {
                output: output.clone(),
            },
            output,
        )
        .unwrap();
    drop(worker);
    host.join()
        .unwrap()
        .expect("the host received worker.complete")
}

#[test]
fn a_host_that_lists_the_feature_gets_the_result_once() {
    let sent = complete_against(Some(json!(HOST_FEATURES)));
    assert_eq!(sent["result_is_output"], json!(true), "{sent}");
    assert_eq!(sent["result"], Value::Null, "{sent}");
}

#[test]
fn a_host_that_does_not_list_it_gets_the_result_in_full() {
    for features in [None, Some(json!([])), Some(json!(["something_else"]))] {
        let sent = complete_against(features.clone());
        assert!(
            sent.get("result_is_output").is_none(),
            "{features:?}: {sent}"
        );
        assert_eq!(
            sent["result"],
            json!({ "text": "the same value" }),
            "{sent}"
        );
    }
}
