//! `PipelinedClient` against a scripted fake host on a Unix socket: replies out of order,
//! a host that stops reading, goodbyes, dropped clients and subscriptions, overflow.
mod common;

use std::time::Duration;

use piw_client::client::{ClientError, PipelinedClient, Subscription, SUBSCRIPTION_BUFFER};
use piw_client::paths::PiwPaths;
use piw_client::protocol::{
    encode_frame, payload, FrameDecoder, Limits, Receipt, RejectionCode, Request, RequestBody,
    ServerFrame,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

struct FakeHost {
    _dir: tempfile::TempDir,
    paths: PiwPaths,
    listener: UnixListener,
}

impl FakeHost {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().to_path_buf());
        let listener = UnixListener::bind(&paths.socket).unwrap();
        Self {
            _dir: dir,
            paths,
            listener,
        }
    }

    async fn accept(&self) -> Peer {
        let (stream, _) = self.listener.accept().await.unwrap();
        Peer {
            stream,
            decoder: FrameDecoder::new(Limits::default()),
        }
    }
}

struct Peer {
    stream: UnixStream,
    decoder: FrameDecoder,
}

impl Peer {
    /// The next request, or `None` at end of stream.
    async fn request(&mut self) -> Option<Request> {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(body) = self.decoder.next_frame().unwrap() {
                return Some(Request::decode(&body, &Limits::default()).unwrap());
            }
            let n = self.stream.read(&mut buf).await.unwrap();
            if n == 0 {
                return None;
            }
            self.decoder.push(&buf[..n]).unwrap();
        }
    }

    async fn send(&mut self, frame: &ServerFrame) {
        let bytes = encode_frame(frame, &Limits::default()).unwrap();
        self.stream.write_all(&bytes).await.unwrap();
    }

    async fn reply(&mut self, request: &Request, body: serde_json::Value) {
        self.send(&ServerFrame::receipt(
            request.request_id.clone(),
            Receipt::new(None, body),
        ))
        .await;
    }
}

/// A `host.status` call running in its own task.
fn status_in_flight(
    client: &PipelinedClient,
) -> tokio::task::JoinHandle<Result<Receipt, ClientError>> {
    let c = client.clone();
    tokio::spawn(async move { c.call(RequestBody::HostStatus).await })
}

fn event(subscription: &str, seq: u64) -> ServerFrame {
    common::event_frame(subscription, seq)
}

/// A client subscribed to `run-1` as `sub-1` on a fake host.
async fn subscribed() -> (FakeHost, PipelinedClient, Peer, Subscription) {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let subscribe = {
        let c = client.clone();
        tokio::spawn(async move {
            c.subscribe(payload::Subscribe {
                run_id: Some("run-1".into()),
                session_id: None,
                all: None,
            })
            .await
        })
    };
    let r = peer.request().await.unwrap();
    peer.reply(&r, json!({ "subscription_id": "sub-1" })).await;
    let sub = subscribe.await.unwrap().unwrap();
    (host, client, peer, sub)
}

/// The result of a call that must settle without waiting for the host.
async fn at_once<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .expect("the call settles without a reply from the host")
}

#[tokio::test]
async fn replies_out_of_order_reach_their_callers() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move {
                c.send(Request::new(format!("r{i}"), RequestBody::HostStatus))
                    .await
            })
        })
        .collect();
    let mut requests = Vec::new();
    for _ in 0..3 {
        requests.push(peer.request().await.unwrap());
    }
    // Answer in reverse order, each with its own id in the body.
    for r in requests.iter().rev() {
        peer.reply(r, json!({ "id": r.request_id })).await;
    }
    for (i, call) in calls.into_iter().enumerate() {
        let receipt = call.await.unwrap().unwrap();
        assert_eq!(receipt.body["id"], json!(format!("r{i}")));
    }
}

#[tokio::test]
async fn close_fails_calls_in_flight_at_once_even_when_the_host_stopped_reading() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let _peer = host.accept().await; // accepts, never reads
                                     // Enough bytes to fill the socket buffers, so the writer is stuck mid-write.
    let big = "x".repeat(200_000);
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let c = client.clone();
            let big = big.clone();
            tokio::spawn(async move {
                c.send(
                    Request::new(
                        format!("big{i}"),
                        RequestBody::RunCancel(payload::RunCancel { reason: Some(big) }),
                    )
                    .with_run_id("run-1"),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(Duration::from_secs(2), client.close())
        .await
        .expect("close returns although the host does not read");
    for call in calls {
        let result = tokio::time::timeout(Duration::from_secs(2), call)
            .await
            .expect("a call in flight settles after close")
            .unwrap();
        assert!(
            matches!(result, Err(ClientError::ClientClosed)),
            "{result:?}"
        );
    }
    assert!(matches!(
        client.call(RequestBody::HostStatus).await,
        Err(ClientError::ClientClosed)
    ));
}

#[tokio::test]
async fn a_call_that_close_failed_is_never_written_afterwards() {
    // Repeated: without a stop-first writer the writer picked the queued frame or the stop at
    // random.
    for trial in 0..20 {
        let host = FakeHost::new();
        let client = PipelinedClient::connect(&host.paths).await.unwrap();
        let mut peer = host.accept().await;
        // Queued at once; the writer task has not run yet.
        let call = client.send_now(Request::new(format!("t{trial}"), RequestBody::HostStatus));
        client.close().await;
        assert!(matches!(call.await, Err(ClientError::ClientClosed)));
        let received = tokio::time::timeout(Duration::from_secs(2), peer.request())
            .await
            .expect("the client closes its end");
        assert_eq!(
            received, None,
            "trial {trial}: the host got a request close failed"
        );
    }
}

#[tokio::test]
async fn after_a_goodbye_calls_fail_with_the_hosts_reason_not_client_closed() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let pending = status_in_flight(&client);
    peer.request().await.unwrap();
    peer.send(&ServerFrame::goodbye(
        RejectionCode::HostShuttingDown,
        "host is stopping",
    ))
    .await;
    drop(peer);
    let err = pending.await.unwrap().unwrap_err();
    assert_eq!(err.code(), Some(RejectionCode::HostShuttingDown), "{err}");
    let later = client.call(RequestBody::HostStatus).await.unwrap_err();
    assert_eq!(
        later.code(),
        Some(RejectionCode::HostShuttingDown),
        "{later}"
    );
    assert!(!client.is_open());
}

#[tokio::test]
async fn a_connection_that_breaks_fails_calls_as_disconnected() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let pending = status_in_flight(&client);
    peer.request().await.unwrap();
    drop(peer);
    assert!(matches!(
        pending.await.unwrap(),
        Err(ClientError::Disconnected)
    ));
    assert!(matches!(
        client.call(RequestBody::HostStatus).await,
        Err(ClientError::Disconnected)
    ));
}

#[tokio::test]
async fn a_failed_write_still_delivers_the_replies_and_the_goodbye_the_host_sent_before_closing() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let answered = client.send_now(Request::new("a", RequestBody::HostStatus));
    let a = peer.request().await.unwrap();
    // The host answers `a`, says goodbye and closes, before the client reads any of it.
    peer.reply(&a, json!({ "id": "a" })).await;
    peer.send(&ServerFrame::goodbye(
        RejectionCode::HostShuttingDown,
        "host is stopping",
    ))
    .await;
    drop(peer);
    // Queued now, so the writer runs before the reader learns of the input: its write of `b`
    // fails (EPIPE) with the reply and the goodbye unread in the socket.
    let unanswered = client.send_now(Request::new("b", RequestBody::HostStatus));
    assert_eq!(
        at_once(answered).await.unwrap().body,
        json!({ "id": "a" }),
        "the receipt the host sent is delivered"
    );
    let b = at_once(unanswered).await.unwrap_err();
    assert_eq!(b.code(), Some(RejectionCode::HostShuttingDown), "{b:?}");
    let later = client.call(RequestBody::HostStatus).await.unwrap_err();
    assert_eq!(
        later.code(),
        Some(RejectionCode::HostShuttingDown),
        "{later:?}"
    );
    assert!(!client.is_open());
}

#[tokio::test]
async fn a_host_frame_the_client_cannot_decode_fails_calls_as_protocol_errors() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let pending = status_in_flight(&client);
    peer.request().await.unwrap();
    // A frame holding `{}`: valid JSON, but no server frame.
    peer.stream
        .write_all(&[0, 0, 0, 2, b'{', b'}'])
        .await
        .unwrap();
    let err = pending.await.unwrap().unwrap_err();
    assert!(matches!(&err, ClientError::Protocol(_)), "{err:?}");
    assert_eq!(err.code_str(), "protocol");
    assert!(!client.is_open());
}

#[tokio::test]
async fn dropping_the_last_handle_closes_the_socket() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    drop(client);
    let end = tokio::time::timeout(Duration::from_secs(2), peer.request())
        .await
        .expect("the fake host sees the connection end");
    assert!(end.is_none());
}

#[tokio::test]
async fn a_dropped_subscription_is_ended_on_the_host() {
    let (_host, _client, mut peer, sub) = subscribed().await;
    drop(sub);
    let unsubscribe = tokio::time::timeout(Duration::from_secs(2), peer.request())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        unsubscribe.body,
        RequestBody::Unsubscribe(payload::Unsubscribe {
            subscription_id: "sub-1".into()
        })
    );
}

#[tokio::test]
async fn an_overflowing_subscription_yields_its_buffer_then_an_error_and_is_ended() {
    let (_host, client, mut peer, mut sub) = subscribed().await;
    let sent = SUBSCRIPTION_BUFFER as u64 + 10;
    for seq in 1..=sent {
        peer.send(&event("sub-1", seq)).await;
    }
    // The client ends the subscription on the host.
    let unsubscribe = tokio::time::timeout(Duration::from_secs(5), peer.request())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(unsubscribe.body.kind_str(), "unsubscribe");
    peer.reply(&unsubscribe, json!({})).await;
    let mut delivered = 0;
    let end = loop {
        match sub.next().await {
            Some(Ok(e)) => {
                delivered += 1;
                assert_eq!(e.seq, delivered, "in order, without gaps");
            }
            other => break other,
        }
    };
    assert_eq!(delivered, SUBSCRIPTION_BUFFER as u64);
    assert!(
        matches!(end, Some(Err(ClientError::SubscriptionOverflow))),
        "{end:?}"
    );
    // The connection itself is still fine.
    let status = status_in_flight(&client);
    let r = peer.request().await.unwrap();
    peer.reply(&r, json!({"ok": 1})).await;
    assert_eq!(status.await.unwrap().unwrap().body, json!({"ok": 1}));
}

#[tokio::test]
async fn a_request_the_host_would_refuse_fails_alone_and_is_never_sent() {
    let host = FakeHost::new();
    let client = PipelinedClient::connect(&host.paths).await.unwrap();
    let mut peer = host.accept().await;
    let other = status_in_flight(&client);
    let first = peer.request().await.unwrap();

    // Over the payload limit: the host would answer payload_too_large and close the connection.
    let too_large = at_once(
        client.send(
            Request::new(
                "too-large",
                RequestBody::RunCancel(payload::RunCancel {
                    reason: Some("x".repeat(Limits::default().max_payload_bytes + 1)),
                }),
            )
            .with_run_id("run-1"),
        ),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&too_large, ClientError::InvalidRequest(_)),
        "{too_large:?}"
    );
    assert_eq!(too_large.code(), Some(RejectionCode::PayloadTooLarge));
    // Without the run id `run.cancel` requires: malformed.
    let malformed = at_once(client.send(Request::new(
        "no-run",
        RequestBody::RunCancel(payload::RunCancel { reason: None }),
    )))
    .await
    .unwrap_err();
    assert_eq!(
        malformed.code(),
        Some(RejectionCode::Malformed),
        "{malformed}"
    );

    // The call in flight gets its reply, and the next request the host sees is a good one.
    peer.reply(&first, json!({ "ok": 1 })).await;
    assert_eq!(other.await.unwrap().unwrap().body, json!({ "ok": 1 }));
    let next = status_in_flight(&client);
    let r = peer.request().await.unwrap();
    assert_eq!(r.body, RequestBody::HostStatus, "nothing else was sent");
    peer.reply(&r, json!({ "ok": 2 })).await;
    assert_eq!(next.await.unwrap().unwrap().body, json!({ "ok": 2 }));
    assert!(client.is_open());
}
