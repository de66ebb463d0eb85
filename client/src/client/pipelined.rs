//! A connection many callers share at once: requests are pipelined on one socket, replies are
//! matched to their callers by request id, and events are routed to their subscriptions.
//!
//! The Node addon and the C ABI use this face: a JavaScript program may have a hundred calls in
//! flight on one client, and closing the client must fail each of them at once instead of
//! leaving a promise that never settles, even when the host has stopped reading.
//!
//! Tasks: one writer (owns the write half; frames arrive on a channel, so no caller ever
//! waits on a lock while the socket is full) and one reader (owns the read half). Both stop
//! when the client is closed, when the connection ends, or when the last handle is dropped.
//! A failed write stops only the writer: the reader still delivers the replies and the goodbye
//! the host sent before it closed, and the connection ends when the reader reaches its end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};

use super::{checked_frame, goodbye, new_request_id, response_to_result, ClientError};
use crate::paths::PiwPaths;
use crate::protocol::{
    payload, Event, FrameDecoder, Limits, Receipt, RejectionCode, Request, RequestBody, ServerFrame,
};

/// Events a subscription buffers for a reader that is slow to take them. A subscription whose
/// buffer overflows ends with [`ClientError::SubscriptionOverflow`] rather than growing without
/// bound or silently skipping events.
pub const SUBSCRIPTION_BUFFER: usize = 4096;

type Reply = oneshot::Sender<Result<Receipt, ClientError>>;

/// Why the connection ended, kept so that later calls fail with the real cause.
#[derive(Debug, Clone)]
enum Ended {
    /// The caller closed the client.
    ClosedByCaller,
    /// The host said goodbye with this code.
    Goodbye(RejectionCode, String),
    /// The connection broke or ended without a goodbye.
    Lost(String),
    /// The host sent something this client cannot decode; the connection was given up.
    Protocol(String),
}

impl Ended {
    fn error(&self) -> ClientError {
        match self {
            Ended::ClosedByCaller => ClientError::ClientClosed,
            Ended::Goodbye(code, message) => ClientError::Closed {
                code: *code,
                message: message.clone(),
            },
            Ended::Lost(_) => ClientError::Disconnected,
            Ended::Protocol(detail) => ClientError::Protocol(detail.clone()),
        }
    }
}

/// Where one subscription's events go, and how it ended.
struct SubscriptionRoute {
    events: mpsc::Sender<Event>,
    end: Arc<Mutex<Option<ClientError>>>,
}

struct Pending {
    reply: Reply,
    /// Set for `subscribe` requests: the subscription to register once the host confirms it.
    /// The reader registers it before it reads the next frame, so no event of the new
    /// subscription can arrive unrouted.
    subscription: Option<SubscriptionRoute>,
}

#[derive(Default)]
struct Routes {
    pending: HashMap<String, Pending>,
    subscriptions: HashMap<String, SubscriptionRoute>,
    /// Set once: the connection is over and every new call fails with this.
    ended: Option<Ended>,
    /// A write failed: nothing more is sent and new calls are refused, while the reader still
    /// takes the replies and the goodbye the host sent before it closed.
    write_failed: bool,
}

struct Shared {
    routes: Mutex<Routes>,
    frames: mpsc::UnboundedSender<(String, Vec<u8>)>,
    /// Tells both tasks to stop (the caller closed the client).
    stop: watch::Sender<bool>,
    limits: Limits,
    /// A runtime handle for work started from `Drop` (unsubscribing a dropped subscription).
    runtime: tokio::runtime::Handle,
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        // A poisoned lock only means another caller panicked while holding it; the maps are
        // still consistent (every update is a single insert or remove).
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the connection once: every pending call fails and every subscription ends with
    /// the cause; later calls fail with it too.
    fn end(&self, cause: Ended) {
        let (pending, subscriptions) = {
            let mut routes = self.routes();
            if routes.ended.is_some() {
                return;
            }
            if let Ended::Lost(detail) | Ended::Protocol(detail) = &cause {
                tracing::debug!(%detail, "the connection to the host ended");
            }
            routes.ended = Some(cause.clone());
            (
                std::mem::take(&mut routes.pending),
                std::mem::take(&mut routes.subscriptions),
            )
        };
        // Stop the writer before any caller learns that its call failed, so no caller told
        // `client_closed` finds its request written later.
        let _ = self.stop.send(true);
        for (_, p) in pending {
            let _ = p.reply.send(Err(cause.error()));
        }
        for (_, s) in subscriptions {
            end_subscription(&s, cause.error());
        }
    }
}

impl Shared {
    /// A write to the host failed (typically `EPIPE`: the host answered, said goodbye and
    /// closed). Stops new calls; the calls already submitted stay pending until the reader
    /// reaches the end of what the host sent, so replies and the goodbye still in the socket
    /// are delivered, and the rest fail with the goodbye's code (or as disconnected).
    fn write_failed(&self) {
        self.routes().write_failed = true;
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle is gone: stop the tasks so the socket closes.
        let _ = self.stop.send(true);
    }
}

/// Records why a subscription ended; its reader gets the buffered events, then this error.
fn end_subscription(route: &SubscriptionRoute, error: ClientError) {
    let mut end = route.end.lock().unwrap_or_else(|p| p.into_inner());
    end.get_or_insert(error);
}

/// A client connection that many tasks may use at once (it is `Clone`; clones share the
/// connection). Must be created inside a tokio runtime, which runs its two tasks.
#[derive(Clone)]
pub struct PipelinedClient {
    shared: Arc<Shared>,
}

/// Events of one subscription, in the order the host committed them. Dropping it ends the
/// subscription on the host too.
pub struct Subscription {
    /// The id the host gave the subscription.
    pub id: String,
    events: mpsc::Receiver<Event>,
    end: Arc<Mutex<Option<ClientError>>>,
    client: Weak<Shared>,
    closed: bool,
}

impl PipelinedClient {
    /// Connects to the host of `paths`.
    pub async fn connect(paths: &PiwPaths) -> Result<Self, ClientError> {
        let (read, write) = super::connect_socket(paths).await?.into_split();
        let (frames, frames_rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            routes: Mutex::new(Routes::default()),
            frames,
            stop,
            limits: Limits::default(),
            runtime: tokio::runtime::Handle::current(),
        });
        tokio::spawn(write_loop(
            write,
            frames_rx,
            stop_rx.clone(),
            Arc::downgrade(&shared),
        ));
        tokio::spawn(read_loop(read, stop_rx, Arc::downgrade(&shared)));
        Ok(Self { shared })
    }

    /// Sends `body` with a fresh request id and waits for its receipt.
    pub async fn call(&self, body: RequestBody) -> Result<Receipt, ClientError> {
        self.send(Request::new(new_request_id(), body)).await
    }

    /// Sends a fully built request and waits for its receipt. Other calls may be in flight on
    /// the same connection; each gets its own reply. A request the host would refuse (and close
    /// the connection for) fails alone with [`ClientError::InvalidRequest`] and is not sent.
    pub async fn send(&self, request: Request) -> Result<Receipt, ClientError> {
        self.send_now(request).await
    }

    /// Queues `request` at once and returns a future for its receipt. Unlike [`send`], the
    /// request is on its way before the future is first polled: a caller outside the client's
    /// runtime (Node's main thread) saves a hand-off to a runtime thread before the write.
    ///
    /// [`send`]: PipelinedClient::send
    pub fn send_now(
        &self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Receipt, ClientError>> + Send + 'static {
        let queued = self.submit(&request, None);
        async move {
            match queued {
                Ok(rx) => rx.await.unwrap_or(Err(ClientError::ClientClosed)),
                Err(e) => Err(e),
            }
        }
    }

    /// Subscribes to a run's or a session's events.
    pub async fn subscribe(&self, filter: payload::Subscribe) -> Result<Subscription, ClientError> {
        let request = Request::new(new_request_id(), RequestBody::Subscribe(filter));
        let (tx, events) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let end = Arc::new(Mutex::new(None));
        let route = SubscriptionRoute {
            events: tx,
            end: Arc::clone(&end),
        };
        let receipt = self
            .submit(&request, Some(route))?
            .await
            .unwrap_or(Err(ClientError::ClientClosed))?;
        let id = receipt
            .body
            .get("subscription_id")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| ClientError::Protocol("subscribe receipt without an id".into()))?
            .to_owned();
        Ok(Subscription {
            id,
            events,
            end,
            client: Arc::downgrade(&self.shared),
            closed: false,
        })
    }

    /// Ends subscription `id`: its stream stops after the events already buffered, and the
    /// host stops sending its events. Closing an already closed subscription is fine.
    pub async fn unsubscribe(&self, id: &str) -> Result<(), ClientError> {
        let removed = self.shared.routes().subscriptions.remove(id);
        if removed.is_none() || !self.is_open() {
            return Ok(());
        }
        self.call(RequestBody::Unsubscribe(payload::Unsubscribe {
            subscription_id: id.to_owned(),
        }))
        .await
        .map(|_| ())
    }

    /// Closes the connection: every call in flight fails with [`ClientError::ClientClosed`]
    /// at once (also while the host is not reading), every subscription ends, and later calls
    /// fail. No request starts on its way after `close`; requests the host already received
    /// (written before it) are still committed, and their receipts can be fetched again by
    /// request id.
    pub async fn close(&self) {
        self.shared.end(Ended::ClosedByCaller);
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        let routes = self.shared.routes();
        routes.ended.is_none() && !routes.write_failed
    }

    /// Checks the request (one the host would refuse fails alone, before it could close the
    /// connection under every other call), registers the reply slot and queues the frame for
    /// the writer.
    fn submit(
        &self,
        request: &Request,
        subscription: Option<SubscriptionRoute>,
    ) -> Result<oneshot::Receiver<Result<Receipt, ClientError>>, ClientError> {
        let bytes = checked_frame(request, &self.shared.limits)?;
        let (reply, rx) = oneshot::channel();
        let mut routes = self.shared.routes();
        if let Some(ended) = &routes.ended {
            return Err(ended.error());
        }
        if routes.write_failed {
            return Err(ClientError::Disconnected);
        }
        if routes.pending.contains_key(&request.request_id) {
            return Err(ClientError::Protocol(format!(
                "request id {} is already in flight on this client",
                request.request_id
            )));
        }
        routes.pending.insert(
            request.request_id.clone(),
            Pending {
                reply,
                subscription,
            },
        );
        // Queued under the lock, so frames reach the writer in the order their reply slots
        // were registered.
        if self
            .shared
            .frames
            .send((request.request_id.clone(), bytes))
            .is_err()
        {
            routes.pending.remove(&request.request_id);
            return Err(routes
                .ended
                .as_ref()
                .map_or(ClientError::Disconnected, Ended::error));
        }
        Ok(rx)
    }
}

impl Subscription {
    /// The next event, or `None` after the subscription was closed. Fails when the
    /// connection ended or the buffer overflowed (after the events buffered before that).
    pub async fn next(&mut self) -> Option<Result<Event, ClientError>> {
        match self.events.recv().await {
            Some(event) => Some(Ok(event)),
            None => self
                .end
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .map(Err),
        }
    }

    /// Ends the subscription on the host; events already buffered are still returned by
    /// [`Subscription::next`], then `None`.
    pub async fn close(&mut self) -> Result<(), ClientError> {
        self.closed = true;
        match self.client.upgrade() {
            Some(shared) => PipelinedClient { shared }.unsubscribe(&self.id).await,
            None => Ok(()),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // Dropped without `close`: stop routing now, and end it on the host too, or the
        // connection's subscription slots run out.
        if let Some(shared) = self.client.upgrade() {
            if shared.routes().subscriptions.remove(&self.id).is_some() {
                send_unsubscribe(&shared, std::mem::take(&mut self.id));
            }
        }
    }
}

/// Asks the host, in the background, to stop sending a subscription's events (its route is
/// already gone here).
fn send_unsubscribe(shared: &Arc<Shared>, subscription_id: String) {
    if shared.routes().ended.is_some() {
        return;
    }
    let client = PipelinedClient {
        shared: Arc::clone(shared),
    };
    shared.runtime.spawn(async move {
        let _ = client
            .call(RequestBody::Unsubscribe(payload::Unsubscribe {
                subscription_id,
            }))
            .await;
    });
}

async fn write_loop(
    mut write: OwnedWriteHalf,
    mut frames: mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    mut stop: watch::Receiver<bool>,
    shared: Weak<Shared>,
) {
    loop {
        // `biased`, stop first: once the client is closed no frame starts on its way, so a
        // call failed with `client_closed` is never written afterwards.
        let frame = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => None,
            frame = frames.recv() => frame,
        };
        let Some((request_id, bytes)) = frame else {
            break;
        };
        let written = tokio::select! {
            biased;
            // A host that stopped reading cannot hold a close hostage.
            _ = stop.wait_for(|stopped| *stopped) => break,
            written = write.write_all(&bytes) => written,
        };
        if let Err(e) = written {
            // Not the end of the connection yet: the host may have answered and said goodbye
            // before it closed, and the reader delivers that first (then fails what is left).
            if let Some(shared) = shared.upgrade() {
                tracing::debug!(%request_id, error = %e, "writing to the host failed");
                shared.write_failed();
            }
            break;
        }
    }
    drop(frames);
    // The host sees the end of the requests: one that still runs answers what it read and
    // closes, so the reader reaches the end too.
    let _ = write.shutdown().await;
}

async fn read_loop(mut read: OwnedReadHalf, mut stop: watch::Receiver<bool>, shared: Weak<Shared>) {
    let limits = match shared.upgrade() {
        Some(s) => s.limits,
        None => return,
    };
    let mut decoder = FrameDecoder::new(limits);
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        match decoder.next_frame() {
            Err(e) => break Ended::Protocol(e.to_string()),
            Ok(Some(body)) => match ServerFrame::decode(&body) {
                Err(e) => break Ended::Protocol(e.message),
                Ok(ServerFrame::Goodbye(g)) => {
                    let ClientError::Closed { code, message } = goodbye(g) else {
                        break Ended::Lost("goodbye".into());
                    };
                    break Ended::Goodbye(code, message);
                }
                Ok(frame) => match shared.upgrade() {
                    Some(shared) => route(&shared, frame),
                    None => return,
                },
            },
            Ok(None) => {
                let read = tokio::select! {
                    read = read.read(&mut buf) => read,
                    _ = stop.wait_for(|stopped| *stopped) => return,
                };
                match read {
                    Ok(0) => break Ended::Lost("the host closed the connection".into()),
                    Err(e) => break Ended::Lost(e.to_string()),
                    Ok(n) => {
                        if let Err(e) = decoder.push(&buf[..n]) {
                            break Ended::Protocol(e.to_string());
                        }
                    }
                }
            }
        }
    };
    // Every caller still waiting learns why the connection ended.
    if let Some(shared) = shared.upgrade() {
        shared.end(end);
    }
}

fn route(shared: &Arc<Shared>, frame: ServerFrame) {
    match frame {
        ServerFrame::Response(response) => {
            let mut routes = shared.routes();
            let Some(pending) = routes.pending.remove(&response.request_id) else {
                tracing::debug!(request_id = %response.request_id, "reply for no pending call");
                return;
            };
            let result = response_to_result(response);
            if let (Ok(receipt), Some(subscription)) = (&result, pending.subscription) {
                if let Some(id) = receipt
                    .body
                    .get("subscription_id")
                    .and_then(serde_json::Value::as_str)
                {
                    routes.subscriptions.insert(id.to_owned(), subscription);
                }
            }
            drop(routes);
            let _ = pending.reply.send(result);
        }
        ServerFrame::Event(event) => {
            let mut routes = shared.routes();
            let id = event.subscription_id.clone();
            let Some(sub) = routes.subscriptions.get(&id) else {
                return;
            };
            match sub.events.try_send(event) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // The reader missed events: end the stream with an error (after what it
                    // buffered) so it re-reads the run's status rather than trusting a
                    // gap-free stream, and stop the host sending more.
                    if let Some(sub) = routes.subscriptions.remove(&id) {
                        end_subscription(&sub, ClientError::SubscriptionOverflow);
                        drop(routes);
                        send_unsubscribe(shared, id);
                    }
                }
                // Nobody reads it any more (a dropped stream, a cancelled `subscribe`).
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    routes.subscriptions.remove(&id);
                    drop(routes);
                    send_unsubscribe(shared, id);
                }
            }
        }
        // Handled by the read loop.
        ServerFrame::Goodbye(_) => {}
    }
}
