//! `Client` and `BlockingClient` (one call at a time per connection) against a scripted fake
//! host on a Unix socket: calls that time out or are dropped, partial frames, a host that is
//! gone.
mod common;

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::thread::JoinHandle;
use std::time::Duration;

use piw_client::client::{BlockingClient, Client, ClientError};
use piw_client::paths::PiwPaths;
use piw_client::protocol::{
    encode_frame, payload, read_frame, Limits, Receipt, RejectionCode, Request, RequestBody,
    ServerFrame,
};
use serde_json::json;

/// How long the fake host takes to answer the first request: far longer than the clients wait.
const SLOW_COMMIT: Duration = Duration::from_millis(500);
const CLIENT_TIMEOUT: Duration = Duration::from_millis(100);

fn home() -> (tempfile::TempDir, PiwPaths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = PiwPaths::for_home(dir.path().to_path_buf());
    (dir, paths)
}

fn frame(frame: &ServerFrame) -> Vec<u8> {
    encode_frame(frame, &Limits::default()).unwrap()
}

fn receipt(request_id: &str) -> Vec<u8> {
    frame(&ServerFrame::receipt(
        request_id.to_owned(),
        Receipt::new(None, json!({ "id": request_id })),
    ))
}

fn event(seq: u64) -> ServerFrame {
    common::event_frame("sub-1", seq)
}

/// A fake host serving one connection: it answers every request (the first only after
/// [`SLOW_COMMIT`], like a slow commit) and returns the ids of the requests it received.
fn slow_first_reply_host(paths: &PiwPaths) -> JoinHandle<Vec<String>> {
    let listener = UnixListener::bind(&paths.socket).unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        while let Ok(Some(body)) = read_frame(&mut stream, &Limits::default()) {
            let request = Request::decode(&body, &Limits::default()).unwrap();
            if received.is_empty() {
                std::thread::sleep(SLOW_COMMIT);
            }
            received.push(request.request_id.clone());
            let _ = stream.write_all(&receipt(&request.request_id));
        }
        received
    })
}

fn status(request_id: &str) -> Request {
    Request::new(request_id, RequestBody::HostStatus)
}

#[test]
fn a_blocking_call_that_times_out_breaks_the_connection_instead_of_shifting_later_replies() {
    let (_dir, paths) = home();
    let host = slow_first_reply_host(&paths);
    let mut client = BlockingClient::connect(&paths).unwrap();
    client.set_timeout(Some(CLIENT_TIMEOUT)).unwrap();

    let first = client.send(status("a")).unwrap_err();
    assert!(matches!(first, ClientError::TimedOut), "{first:?}");
    assert_eq!(first.code_str(), "timeout");

    // The late reply of `a` is in the socket now; the next call must not take it for its own.
    std::thread::sleep(SLOW_COMMIT + CLIENT_TIMEOUT);
    let second = client.send(status("b")).unwrap_err();
    assert!(matches!(second, ClientError::Disconnected), "{second:?}");
    assert!(matches!(
        client.next_event(),
        Err(ClientError::Disconnected)
    ));
    drop(client);
    assert_eq!(
        host.join().unwrap(),
        ["a"],
        "nothing is sent on a broken connection"
    );
}

#[tokio::test]
async fn an_async_call_whose_future_is_dropped_breaks_the_connection() {
    let (_dir, paths) = home();
    let host = slow_first_reply_host(&paths);
    let mut client = Client::connect(&paths).await.unwrap();

    let first = tokio::time::timeout(CLIENT_TIMEOUT, client.send(status("a"))).await;
    assert!(first.is_err(), "the call was still waiting: {first:?}");

    tokio::time::sleep(SLOW_COMMIT + CLIENT_TIMEOUT).await;
    let second = client.send(status("b")).await.unwrap_err();
    assert!(matches!(second, ClientError::Disconnected), "{second:?}");
    drop(client);
    assert_eq!(
        tokio::task::spawn_blocking(|| host.join().unwrap())
            .await
            .unwrap(),
        ["a"]
    );
}

#[test]
fn an_event_wait_that_times_out_mid_frame_keeps_the_stream_on_its_frame_boundaries() {
    let (_dir, paths) = home();
    let listener = UnixListener::bind(&paths.socket).unwrap();
    let (half_sent_tx, half_sent) = std::sync::mpsc::channel();
    let (go_on_tx, go_on) = std::sync::mpsc::channel::<()>();
    let host = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let bytes = frame(&event(1));
        let (head, tail) = bytes.split_at(bytes.len() / 2);
        stream.write_all(head).unwrap();
        half_sent_tx.send(()).unwrap();
        go_on.recv().unwrap();
        stream.write_all(tail).unwrap();
        // The connection still carries calls.
        let body = read_frame(&mut stream, &Limits::default())
            .unwrap()
            .unwrap();
        let request = Request::decode(&body, &Limits::default()).unwrap();
        stream.write_all(&receipt(&request.request_id)).unwrap();
    });
    let mut client = BlockingClient::connect(&paths).unwrap();
    client.set_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    half_sent.recv().unwrap();

    let waited = client.next_event().unwrap_err();
    assert!(matches!(waited, ClientError::TimedOut), "{waited:?}");
    go_on_tx.send(()).unwrap();
    client.set_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(client.next_event().unwrap().seq, 1);
    assert_eq!(client.send(status("a")).unwrap().body, json!({ "id": "a" }));
    host.join().unwrap();
}

#[test]
fn a_write_to_a_host_that_closed_the_connection_is_disconnected_not_a_protocol_error() {
    let (_dir, paths) = home();
    let listener = UnixListener::bind(&paths.socket).unwrap();
    let mut client = BlockingClient::connect(&paths).unwrap();
    let (peer, _) = listener.accept().unwrap();
    drop(peer);
    let err = client.send(status("a")).unwrap_err();
    assert!(matches!(err, ClientError::Disconnected), "{err:?}");
    assert_eq!(err.code_str(), "disconnected");
}

#[test]
fn a_reply_ends_the_call_so_the_next_call_on_the_connection_works() {
    let (_dir, paths) = home();
    let host = slow_first_reply_host(&paths);
    let mut client = BlockingClient::connect(&paths).unwrap();
    client.set_timeout(Some(SLOW_COMMIT * 10)).unwrap();
    for id in ["a", "b", "c"] {
        assert_eq!(client.send(status(id)).unwrap().body, json!({ "id": id }));
    }
    drop(client);
    assert_eq!(host.join().unwrap(), ["a", "b", "c"]);
}

/// A `run.cancel` whose payload is over the limit: the host would close the connection.
fn too_large(request_id: &str) -> Request {
    Request::new(
        request_id,
        RequestBody::RunCancel(payload::RunCancel {
            reason: Some("x".repeat(Limits::default().max_payload_bytes + 1)),
        }),
    )
    .with_run_id("run-1")
}

#[test]
fn a_blocking_request_the_host_would_refuse_fails_locally_and_the_connection_goes_on() {
    let (_dir, paths) = home();
    let host = slow_first_reply_host(&paths);
    let mut client = BlockingClient::connect(&paths).unwrap();
    client.set_timeout(Some(SLOW_COMMIT * 10)).unwrap();
    let err = client.send(too_large("big")).unwrap_err();
    assert!(matches!(&err, ClientError::InvalidRequest(_)), "{err:?}");
    assert_eq!(err.code(), Some(RejectionCode::PayloadTooLarge));
    assert_eq!(err.code_str(), "payload_too_large");
    assert_eq!(client.send(status("a")).unwrap().body, json!({ "id": "a" }));
    drop(client);
    assert_eq!(
        host.join().unwrap(),
        ["a"],
        "the refused request was never sent"
    );
}

#[tokio::test]
async fn an_async_request_the_host_would_refuse_fails_locally_and_the_connection_goes_on() {
    let (_dir, paths) = home();
    let host = slow_first_reply_host(&paths);
    let mut client = Client::connect(&paths).await.unwrap();
    let err = client.send(too_large("big")).await.unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::PayloadTooLarge), "{err:?}");
    assert_eq!(
        client.send(status("a")).await.unwrap().body,
        json!({ "id": "a" })
    );
    drop(client);
    let received = tokio::task::spawn_blocking(|| host.join().unwrap())
        .await
        .unwrap();
    assert_eq!(received, ["a"], "the refused request was never sent");
}

/// A fake host that answers every request after `before_reply` events, numbered on across
/// requests; after the last request it sends `after_last` more events.
fn eventful_host(
    paths: &PiwPaths,
    before_reply: u64,
    requests: usize,
    after_last: u64,
) -> JoinHandle<()> {
    let listener = UnixListener::bind(&paths.socket).unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut seq = 0;
        for served in 1..=requests {
            let Ok(Some(body)) = read_frame(&mut stream, &Limits::default()) else {
                return;
            };
            let request = Request::decode(&body, &Limits::default()).unwrap();
            let mut out = Vec::new();
            for _ in 0..before_reply {
                seq += 1;
                out.extend(frame(&event(seq)));
            }
            out.extend(receipt(&request.request_id));
            if served == requests {
                for _ in 0..after_last {
                    seq += 1;
                    out.extend(frame(&event(seq)));
                }
            }
            stream.write_all(&out).unwrap();
        }
        // Held open until the client is done.
        let _ = read_frame(&mut stream, &Limits::default());
    })
}

#[test]
fn events_queued_during_calls_are_bounded_and_an_overflow_takes_the_place_of_the_dropped_ones() {
    use piw_client::client::SUBSCRIPTION_BUFFER;
    let (_dir, paths) = home();
    let per_call = 1000u64;
    let calls = SUBSCRIPTION_BUFFER / per_call as usize + 2;
    let host = eventful_host(&paths, per_call, calls, 3);
    let mut client = BlockingClient::connect(&paths).unwrap();
    client.set_timeout(Some(Duration::from_secs(10))).unwrap();
    // Calls that never read events: the host sends far more than the buffer holds.
    for i in 0..calls {
        client.send(status(&format!("c{i}"))).unwrap();
    }
    // The oldest events, in order and without a gap, then the overflow once.
    for seq in 1..=SUBSCRIPTION_BUFFER as u64 {
        let e = client.next_event().unwrap();
        assert_eq!(e.seq, seq);
    }
    let overflow = client.next_event().unwrap_err();
    assert!(
        matches!(overflow, ClientError::SubscriptionOverflow),
        "{overflow:?}"
    );
    // Events read after that arrive again (the last call's reply came before them).
    let total = per_call * calls as u64;
    for seq in total + 1..=total + 3 {
        assert_eq!(client.next_event().unwrap().seq, seq);
    }
    drop(client);
    host.join().unwrap();
}

/// A newer host may answer with a rejection code this build does not know: the client still
/// gets the rejection, with its message and details, as `RejectionCode::Unknown`, and the
/// connection goes on (the same for a goodbye, which ends it).
#[test]
fn a_rejection_code_from_a_newer_host_arrives_as_unknown_with_its_message() {
    use piw_client::protocol::Rejection;
    // A frame of this build with its code respelled as one no code of this build has.
    let respelled = |f: &ServerFrame, new_code: &str| {
        let body = serde_json::to_string(f).unwrap();
        assert!(body.contains("\"internal\""), "{body}");
        let body = body.replace("\"internal\"", &format!("\"{new_code}\""));
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body.as_bytes());
        out
    };
    let (_dir, paths) = home();
    let listener = UnixListener::bind(&paths.socket).unwrap();
    let host = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let body = read_frame(&mut stream, &Limits::default())
            .unwrap()
            .unwrap();
        let first = Request::decode(&body, &Limits::default()).unwrap();
        let mut rejection = Rejection::new(RejectionCode::Internal, "too many runs today");
        rejection.details = json!({"limit": 3});
        let reply = ServerFrame::rejection(first.request_id, rejection);
        stream
            .write_all(&respelled(&reply, "quota_exceeded"))
            .unwrap();
        let body = read_frame(&mut stream, &Limits::default())
            .unwrap()
            .unwrap();
        let second = Request::decode(&body, &Limits::default()).unwrap();
        stream.write_all(&receipt(&second.request_id)).unwrap();
        let goodbye = ServerFrame::goodbye(RejectionCode::Internal, "moved to another host");
        stream
            .write_all(&respelled(&goodbye, "rebalanced"))
            .unwrap();
        // Held open until the client read the goodbye.
        let _ = read_frame(&mut stream, &Limits::default());
    });
    let mut client = BlockingClient::connect(&paths).unwrap();
    let err = client.call(RequestBody::HostStatus).unwrap_err();
    let ClientError::Rejected(rejection) = &err else {
        panic!("expected a rejection, got {err:?}");
    };
    assert_eq!(rejection.code, RejectionCode::Unknown);
    assert_eq!(rejection.message, "too many runs today");
    assert_eq!(rejection.details, json!({"limit": 3}));
    assert_eq!(err.code_str(), "unknown");
    client
        .call(RequestBody::HostStatus)
        .expect("the connection goes on");
    let err = client.call(RequestBody::HostStatus).unwrap_err();
    assert!(
        matches!(&err, ClientError::Closed { code: RejectionCode::Unknown, message } if message == "moved to another host"),
        "{err:?}"
    );
    drop(client);
    host.join().unwrap();
}
