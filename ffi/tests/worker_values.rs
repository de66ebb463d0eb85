//! A C child's node output over the value limit: the worker refuses it as `value_too_large`
//! (`PIW_STATUS_INVALID_ARGUMENT`) before sending anything, so the child can fail the node
//! rather than die (which the host would take for a lost child and relaunch).

use std::ffi::{CStr, CString};
use std::os::unix::net::UnixListener;
use std::ptr::{null, null_mut};

use piw::*;
use piw_client::protocol::payload::FEATURE_LARGE_VALUES;
use piw_client::protocol::value::MAX_VALUE_BYTES;
use piw_client::protocol::{
    read_frame, write_frame, Limits, Receipt, Request, RequestBody, ServerFrame,
};
use serde_json::json;

/// A fake host serving one worker connection: it answers the hello as a host that stores
/// large values, acknowledges anything else, and returns the kinds it received once the
/// worker hangs up.
fn fake_host(listener: UnixListener) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let limits = Limits::default();
        let mut kinds = Vec::new();
        while let Ok(Some(body)) = read_frame(&mut stream, &limits) {
            let request = Request::decode(&body, &limits).unwrap();
            kinds.push(request.body.kind().as_str().to_owned());
            let reply = match request.body {
                RequestBody::WorkerHello(_) => json!({
                    "mode": "run",
                    "resume": {"attempt_id": "att-1", "node_id": "a"},
                    "features": [FEATURE_LARGE_VALUES],
                }),
                _ => json!({}),
            };
            let frame = ServerFrame::receipt(request.request_id, Receipt::new(None, reply));
            write_frame(&mut stream, &frame, &limits).unwrap();
        }
        kinds
    })
}

fn last_code() -> String {
    let p = piw_last_error_code();
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

#[test]
fn an_output_over_the_value_limit_is_value_too_large_and_nothing_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("host.sock");
    let host = fake_host(UnixListener::bind(&socket).unwrap());
    let envelope = CString::new(
        json!({"schema": "piw.launch.v1", "run_id": "run-x", "generation": 1,
            "child_token": "secret-token", "mode": "run",
            "source_root": "/nonexistent/w.workflow.json", "source_hash": "00",
            "mounted_sources": {}, "project_dir": "/", "input_hash": "00",
            "socket_path": socket})
        .to_string(),
    )
    .unwrap();
    let mut w = null_mut();
    unsafe {
        assert_eq!(piw_worker_open(envelope.as_ptr(), &mut w), PiwStatus::Ok);
        let mut reply = null_mut();
        assert_eq!(
            piw_worker_hello(w, null(), null(), false, &mut reply),
            PiwStatus::Ok,
            "{}",
            last_code()
        );
        piw_string_free(reply);

        // One byte over the limit once canonical: a string of MAX_VALUE_BYTES - 1 characters
        // and its two quotes.
        let over = usize::try_from(MAX_VALUE_BYTES).unwrap() - 1;
        let outcome = CString::new(format!(
            r#"{{"status":"succeeded","output":"{}"}}"#,
            "a".repeat(over)
        ))
        .unwrap();
        let mut out = null_mut();
        assert_eq!(
            piw_worker_transition(w, outcome.as_ptr(), c"b".as_ptr(), &mut out),
            PiwStatus::InvalidArgument
        );
        assert_eq!(last_code(), "value_too_large");
        assert!(out.is_null());
        assert_eq!(
            piw_worker_complete(w, outcome.as_ptr(), null()),
            PiwStatus::InvalidArgument
        );
        assert_eq!(last_code(), "value_too_large");
        // The run's result too.
        let ok = c"{\"status\":\"succeeded\",\"output\":null}";
        let result = CString::new(format!("\"{}\"", "r".repeat(over))).unwrap();
        assert_eq!(
            piw_worker_complete(w, ok.as_ptr(), result.as_ptr()),
            PiwStatus::InvalidArgument
        );
        assert_eq!(last_code(), "value_too_large");
        assert_eq!(piw_worker_close(w), PiwStatus::Ok);
    }
    assert_eq!(
        host.join().unwrap(),
        ["worker.hello"],
        "only the hello was sent"
    );
}
