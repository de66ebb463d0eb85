//! The async client: one pipelined connection to the host, shared by every call of a
//! JavaScript `Client`. Calls are built into the same envelope the host decodes and checked by
//! the same decoder first, so a malformed call fails locally with the code the host would give.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use napi::bindgen_prelude::PromiseRaw;
use napi::{Env, Result};
use napi_derive::napi;
use piw_client::client::{self, PipelinedClient};
use piw_client::paths::PiwPaths;
use piw_client::protocol::{payload, Limits, Receipt, Request, PROTOCOL_SCHEMA};
use serde_json::{json, Map, Value};

use crate::{client_error, js_error};

/// Connects to the host of `options.home` (default: `PIW_HOME`, else `~/.pi/agent/piw`).
///
/// `options`: `{ home?, piwHome?, hostBin?, start?, hostEnv?, readyTimeoutMs? }`. `home` is
/// used as given (made absolute against the working directory). Without it, the installation
/// comes from `piwHome` (the caller's `PIW_HOME`: a worker thread's `process.env` is its own,
/// not the process environment), else the process's `PIW_HOME`, else `HOME`; a relative one is
/// refused with `invalid_home`. With `start` and a `hostBin`, a host is started on demand (as
/// `hostBin host serve`, detached, with `hostEnv` added to its environment) when none answers;
/// racing callers end with exactly one host.
#[napi]
pub async fn connect(options: Value) -> Result<Client> {
    let home = options
        .get("home")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let paths = match home {
        Some(home) => PiwPaths::for_home(home),
        None => {
            let piw_home = options
                .get("piwHome")
                .and_then(Value::as_str)
                .map(OsString::from)
                .or_else(|| std::env::var_os("PIW_HOME"));
            PiwPaths::from_vars(piw_home, std::env::var_os("HOME"))
                .map_err(|e| js_error("invalid_home", e.to_string()))?
        }
    };
    if options.get("start").and_then(Value::as_bool) == Some(true) {
        let bin = options
            .get("hostBin")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| js_error("malformed", "start needs hostBin, the piw binary"))?;
        let env: Vec<(String, String)> = options
            .get("hostEnv")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let timeout = options
            .get("readyTimeoutMs")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(client::DEFAULT_READY_TIMEOUT);
        let p = paths.clone();
        // ensure_host blocks (it polls the socket); keep it off the runtime's async workers.
        tokio::task::spawn_blocking(move || client::ensure_host_with_env(&p, &bin, timeout, &env))
            .await
            .map_err(|e| js_error("host_not_ready", e.to_string()))?
            .map_err(client_error)?;
    }
    let inner = PipelinedClient::connect(&paths)
        .await
        .map_err(client_error)?;
    Ok(Client {
        inner,
        socket: paths.socket.display().to_string(),
    })
}

/// A connection to the host. Many calls may be in flight at once.
#[napi]
pub struct Client {
    inner: PipelinedClient,
    socket: String,
}

#[napi]
impl Client {
    /// Sends one request and resolves with its receipt `{ revision, replayed, body }`.
    ///
    /// `envelope`: `{ requestId?, runId?, nodeId?, attemptId?, expectedRevision?,
    /// idempotencyKey? }`; a fresh request id is used when none is given. Rejects with the
    /// host's rejection code, or a client-side code (`client_closed`, `disconnected`, ...).
    #[napi(ts_return_type = "Promise<unknown>")]
    pub fn request<'env>(
        &self,
        env: &'env Env,
        kind: String,
        envelope: Value,
        payload: Value,
    ) -> Result<PromiseRaw<'env, Value>> {
        // A bad request rejects the promise like every other failure (it does not throw).
        let request = match build_request(&kind, &envelope, payload) {
            Ok(r) => r,
            Err(e) => return env.spawn_future(async move { Err::<Value, _>(e) }),
        };
        // Queued here, on the JavaScript thread: the frame goes out without first waiting for
        // a runtime thread to start this call (measured: a run's start reaches the host
        // sooner after the client was idle).
        let receipt = self.inner.send_now(request);
        env.spawn_future(async move { Ok(receipt_json(receipt.await.map_err(client_error)?)) })
    }

    /// Subscribes to events of a run (`{ runId }`), of a session (`{ sessionId }`), or of
    /// every run (`{ all: true }`).
    #[napi]
    pub async fn subscribe(&self, filter: Value) -> Result<Subscription> {
        let text = |k: &str| filter.get(k).and_then(Value::as_str).map(str::to_owned);
        let sub = self
            .inner
            .subscribe(payload::Subscribe {
                run_id: text("runId"),
                session_id: text("sessionId"),
                all: filter.get("all").and_then(Value::as_bool),
            })
            .await
            .map_err(client_error)?;
        Ok(Subscription {
            id: sub.id.clone(),
            client: self.inner.clone(),
            events: tokio::sync::Mutex::new(sub),
        })
    }

    /// Closes the connection. Calls in flight reject with `client_closed`; later calls too.
    #[napi]
    pub async fn close(&self) {
        self.inner.close().await;
    }

    /// Whether the connection is still open.
    #[napi(getter)]
    pub fn is_open(&self) -> bool {
        self.inner.is_open()
    }

    /// The socket this client is connected to.
    #[napi(getter)]
    pub fn socket(&self) -> String {
        self.socket.clone()
    }
}

/// A stream of one subscription's events.
#[napi]
pub struct Subscription {
    id: String,
    client: PipelinedClient,
    events: tokio::sync::Mutex<client::Subscription>,
}

#[napi]
impl Subscription {
    /// The host's id for this subscription.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// The next event, or `null` once the subscription is closed. Rejects when the connection
    /// ended (with the host's goodbye code, e.g. `subscriber_lagged`, or `disconnected`) or the
    /// reader fell too far behind (`subscription_overflow`).
    #[napi]
    pub async fn next(&self) -> Result<Option<Value>> {
        let mut events = self.events.lock().await;
        match events.next().await {
            None => Ok(None),
            Some(Ok(event)) => serde_json::to_value(event)
                .map(Some)
                .map_err(|e| js_error("protocol", e.to_string())),
            Some(Err(e)) => Err(client_error(e)),
        }
    }

    /// Ends the subscription; a pending `next()` resolves with `null`.
    #[napi]
    pub async fn close(&self) -> Result<()> {
        self.client
            .unsubscribe(&self.id)
            .await
            .map_err(client_error)
    }
}

fn build_request(kind: &str, envelope: &Value, payload: Value) -> Result<Request> {
    let mut wire = Map::new();
    wire.insert("schema".into(), json!(PROTOCOL_SCHEMA));
    let request_id = envelope
        .get("requestId")
        .cloned()
        .unwrap_or_else(|| json!(piw_client::ids::new_id("req")));
    wire.insert("request_id".into(), request_id);
    wire.insert("kind".into(), json!(kind));
    for (js, field) in [
        ("runId", "run_id"),
        ("nodeId", "node_id"),
        ("attemptId", "attempt_id"),
        ("expectedRevision", "expected_revision"),
        ("idempotencyKey", "idempotency_key"),
    ] {
        if let Some(v) = envelope.get(js).filter(|v| !v.is_null()) {
            wire.insert(field.into(), v.clone());
        }
    }
    wire.insert("payload".into(), payload);
    let bytes = serde_json::to_vec(&Value::Object(wire))
        .map_err(|e| js_error("malformed", e.to_string()))?;
    Request::decode(&bytes, &Limits::default()).map_err(|e| js_error(e.code.as_str(), e.message))
}

fn receipt_json(r: Receipt) -> Value {
    json!({ "revision": r.revision, "replayed": r.replayed, "body": r.body })
}
