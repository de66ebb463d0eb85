//! A connection many callers share at once: requests are pipelined on one socket, replies are
//! matched to their callers by request id, and events are routed to their subscriptions.
//!
//! The Node addon and the C ABI use this face: a JavaScript program may have a hundred calls in
//! flight on one client, and closing the client must fail each of them cleanly instead of
//! leaving a promise that never settles.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::{goodbye, new_request_id, response_to_result, ClientError};
use crate::paths::PiwPaths;
use crate::protocol::{
    encode_frame, payload, Event, FrameDecoder, Limits, Receipt, Request, RequestBody, ServerFrame,
};

/// Events a subscription buffers for a reader that is slow to take them. A subscription whose
/// buffer overflows ends with [`ClientError::SubscriptionOverflow`] rather than growing without
/// bound or silently skipping events.
pub const SUBSCRIPTION_BUFFER: usize = 4096;

type Reply = oneshot::Sender<Result<Receipt, ClientError>>;

struct Pending {
    reply: Reply,
    /// Set for `subscribe` requests: where the subscription's events go once the host has
    /// confirmed it. Registered by the reader before it reads the next frame, so no event of
    /// the new subscription can arrive unrouted.
    events: Option<mpsc::Sender<Result<Event, ClientError>>>,
}

#[derive(Default)]
struct Routes {
    /// `None` once the connection is closed: new calls fail at once.
    pending: Option<HashMap<String, Pending>>,
    subscriptions: HashMap<String, mpsc::Sender<Result<Event, ClientError>>>,
}

struct Shared {
    routes: Mutex<Routes>,
    writer: tokio::sync::Mutex<Option<OwnedWriteHalf>>,
    limits: Limits,
}

impl Shared {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        // A poisoned lock only means another caller panicked while holding it; the maps are
        // still consistent (every update is a single insert or remove).
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails every pending call and ends every subscription with `error()`; later calls fail
    /// with it too.
    fn close_all(&self, error: impl Fn() -> ClientError) {
        let (pending, subscriptions) = {
            let mut routes = self.routes();
            let pending = routes.pending.take().unwrap_or_default();
            (pending, std::mem::take(&mut routes.subscriptions))
        };
        for (_, p) in pending {
            let _ = p.reply.send(Err(error()));
        }
        for (_, s) in subscriptions {
            let _ = s.try_send(Err(error()));
        }
    }
}

/// A client connection that many tasks may use at once (it is `Clone`; clones share the
/// connection). Must be created inside a tokio runtime, which runs its reader task.
#[derive(Clone)]
pub struct PipelinedClient {
    shared: Arc<Shared>,
}

/// Events of one subscription, in the order the host committed them.
pub struct Subscription {
    /// The id the host gave the subscription.
    pub id: String,
    events: mpsc::Receiver<Result<Event, ClientError>>,
    client: PipelinedClient,
}

impl PipelinedClient {
    /// Connects to the host of `paths`.
    pub async fn connect(paths: &PiwPaths) -> Result<Self, ClientError> {
        let stream =
            UnixStream::connect(&paths.socket)
                .await
                .map_err(|source| ClientError::Connect {
                    path: paths.socket.clone(),
                    source,
                })?;
        let (read, write) = stream.into_split();
        let limits = Limits::default();
        let shared = Arc::new(Shared {
            routes: Mutex::new(Routes {
                pending: Some(HashMap::new()),
                subscriptions: HashMap::new(),
            }),
            writer: tokio::sync::Mutex::new(Some(write)),
            limits,
        });
        tokio::spawn(read_loop(read, Arc::clone(&shared)));
        Ok(Self { shared })
    }

    /// Sends `body` with a fresh request id and waits for its receipt.
    pub async fn call(&self, body: RequestBody) -> Result<Receipt, ClientError> {
        self.send(Request::new(new_request_id(), body)).await
    }

    /// Sends a fully built request and waits for its receipt. Other calls may be in flight on
    /// the same connection; each gets its own reply.
    pub async fn send(&self, request: Request) -> Result<Receipt, ClientError> {
        let rx = self.register(&request.request_id, None)?;
        self.write(&request).await?;
        rx.await.unwrap_or(Err(ClientError::ClientClosed))
    }

    /// Subscribes to a run's or a session's events.
    pub async fn subscribe(&self, filter: payload::Subscribe) -> Result<Subscription, ClientError> {
        let request = Request::new(new_request_id(), RequestBody::Subscribe(filter));
        let (tx, events) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let rx = self.register(&request.request_id, Some(tx))?;
        self.write(&request).await?;
        let receipt = rx.await.unwrap_or(Err(ClientError::ClientClosed))?;
        let id = receipt
            .body
            .get("subscription_id")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| ClientError::Protocol("subscribe receipt without an id".into()))?
            .to_owned();
        Ok(Subscription {
            id,
            events,
            client: self.clone(),
        })
    }

    /// Closes the connection: every call in flight fails with [`ClientError::ClientClosed`],
    /// every subscription ends, and later calls fail at once. Commands the host already
    /// received are still committed (their receipts can be fetched again by request id).
    pub async fn close(&self) {
        self.shared.close_all(|| ClientError::ClientClosed);
        if let Some(mut w) = self.shared.writer.lock().await.take() {
            let _ = w.shutdown().await;
        }
    }

    /// Ends subscription `id`: its stream stops here (a waiting `next` gets `None`) and the
    /// host stops sending its events. Closing an already closed subscription is fine.
    pub async fn unsubscribe(&self, id: &str) -> Result<(), ClientError> {
        if self.shared.routes().subscriptions.remove(id).is_none() || !self.is_open() {
            return Ok(());
        }
        self.call(RequestBody::Unsubscribe(payload::Unsubscribe {
            subscription_id: id.to_owned(),
        }))
        .await
        .map(|_| ())
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        self.shared.routes().pending.is_some()
    }

    fn register(
        &self,
        request_id: &str,
        events: Option<mpsc::Sender<Result<Event, ClientError>>>,
    ) -> Result<oneshot::Receiver<Result<Receipt, ClientError>>, ClientError> {
        let (reply, rx) = oneshot::channel();
        let mut routes = self.shared.routes();
        let pending = routes.pending.as_mut().ok_or(ClientError::ClientClosed)?;
        if pending.contains_key(request_id) {
            return Err(ClientError::Protocol(format!(
                "request id {request_id} is already in flight on this client"
            )));
        }
        pending.insert(request_id.to_owned(), Pending { reply, events });
        Ok(rx)
    }

    async fn write(&self, request: &Request) -> Result<(), ClientError> {
        let result = match encode_frame(request, &self.shared.limits) {
            Err(e) => Err(ClientError::Protocol(e.to_string())),
            Ok(bytes) => match self.shared.writer.lock().await.as_mut() {
                None => Err(ClientError::ClientClosed),
                Some(w) => w.write_all(&bytes).await.map_err(ClientError::from),
            },
        };
        if let Err(e) = result {
            // The request never reached the host in full: forget it, so its reply slot does
            // not linger. (If the connection died, the reader fails the others.)
            self.shared
                .routes()
                .pending
                .as_mut()
                .and_then(|p| p.remove(&request.request_id));
            return Err(e);
        }
        Ok(())
    }
}

impl Subscription {
    /// The next event, or `None` after the subscription was closed. Fails when the
    /// connection ended or the buffer overflowed.
    pub async fn next(&mut self) -> Option<Result<Event, ClientError>> {
        self.events.recv().await
    }

    /// Ends the subscription on the host; events already buffered are still returned by
    /// [`Subscription::next`], then `None`.
    pub async fn close(&mut self) -> Result<(), ClientError> {
        self.client.unsubscribe(&self.id).await
    }
}

async fn read_loop(mut read: OwnedReadHalf, shared: Arc<Shared>) {
    let mut decoder = FrameDecoder::new(shared.limits);
    let mut buf = vec![0u8; 64 * 1024];
    let end = loop {
        match decoder.next_frame() {
            Err(e) => break ClientError::Protocol(e.to_string()),
            Ok(Some(body)) => match ServerFrame::decode(&body) {
                Err(e) => break ClientError::Protocol(e.message),
                Ok(ServerFrame::Goodbye(g)) => break goodbye(g),
                Ok(frame) => route(&shared, frame),
            },
            Ok(None) => match read.read(&mut buf).await {
                Ok(0) => break ClientError::Disconnected,
                Err(e) => break ClientError::Io(e),
                Ok(n) => {
                    if let Err(e) = decoder.push(&buf[..n]) {
                        break ClientError::Protocol(e.to_string());
                    }
                }
            },
        }
    };
    // Every caller still waiting learns why the connection ended.
    let (code, message) = match &end {
        ClientError::Closed { code, message } => (Some(*code), message.clone()),
        other => (None, other.to_string()),
    };
    shared.close_all(|| match code {
        Some(code) => ClientError::Closed {
            code,
            message: message.clone(),
        },
        None => ClientError::Disconnected,
    });
}

fn route(shared: &Shared, frame: ServerFrame) {
    match frame {
        ServerFrame::Response(response) => {
            let mut routes = shared.routes();
            let Some(pending) = routes
                .pending
                .as_mut()
                .and_then(|p| p.remove(&response.request_id))
            else {
                tracing::debug!(request_id = %response.request_id, "reply for no pending call");
                return;
            };
            let result = response_to_result(response);
            if let (Ok(receipt), Some(events)) = (&result, pending.events) {
                if let Some(id) = receipt
                    .body
                    .get("subscription_id")
                    .and_then(serde_json::Value::as_str)
                {
                    routes.subscriptions.insert(id.to_owned(), events);
                }
            }
            drop(routes);
            let _ = pending.reply.send(result);
        }
        ServerFrame::Event(event) => {
            let mut routes = shared.routes();
            let id = event.subscription_id.clone();
            let Some(tx) = routes.subscriptions.get(&id) else {
                return;
            };
            match tx.try_send(Ok(event)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Tell the reader why its stream ended: it missed events, so it must
                    // re-read the run's status rather than trust a gap-free stream.
                    if let Some(tx) = routes.subscriptions.remove(&id) {
                        tokio::spawn(async move {
                            let _ = tx.send(Err(ClientError::SubscriptionOverflow)).await;
                        });
                    }
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    routes.subscriptions.remove(&id);
                }
            }
        }
        // Handled by the read loop.
        ServerFrame::Goodbye(_) => {}
    }
}
