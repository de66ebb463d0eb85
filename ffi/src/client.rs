//! The client surface: connect, one generic call (kind + JSON payload → receipt JSON), and
//! subscriptions read by polling with a timeout or through a file descriptor that is readable
//! while events wait.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int};
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use piw_client::client::{self, PipelinedClient, SUBSCRIPTION_BUFFER};
use piw_client::engine::store::RunStatus;
use piw_client::paths::PiwPaths;
use piw_client::protocol::{payload, Limits, Request, PROTOCOL_SCHEMA};
use serde_json::{json, Map, Value};

use crate::error::{Error, ErrorSlot, PiwStatus};
use crate::handles::{HasErrorSlot, Table};

/// The tokio runtime every client of the process shares: one background thread (`piw-io`)
/// that reads and writes the sockets. Built at the first connect; stopped by [`shutdown`]
/// (`piw_shutdown`), after which the next connect builds it again.
static RUNTIME: Mutex<Option<tokio::runtime::Runtime>> = Mutex::new(None);

fn runtime() -> Result<tokio::runtime::Handle, Error> {
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = slot.as_ref() {
        return Ok(rt.handle().clone());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("piw-io")
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                PiwStatus::Io,
                "io",
                format!("cannot start the I/O thread: {e}"),
            )
        })?;
    let handle = rt.handle().clone();
    *slot = Some(rt);
    Ok(handle)
}

/// Closes every client and subscription handle and stops the `piw-io` thread, waiting up to
/// `grace` for its tasks to end. Called on a caller's thread, never on `piw-io` itself.
pub fn shutdown(grace: Duration) {
    for sub in SUBSCRIPTIONS.drain() {
        sub.close();
    }
    for client in CLIENTS.drain() {
        client.close();
    }
    let rt = RUNTIME.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(rt) = rt {
        rt.shutdown_timeout(grace);
    }
    client::stop_reaping();
}

/// The `piw` binary to start when neither the `host_bin` option nor `PIW_HOST_BIN` names one:
/// beside this library (a cargo build directory: `target/release/piw`), then in `../bin/`
/// (an install under a prefix: `lib/libpiw.so`, `bin/piw`), else `piw` on `PATH`.
fn default_host_bin() -> String {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr reads the address of a function of this library and fills `info`; the
    // file name it points to lives as long as the library is loaded.
    let found =
        unsafe { libc::dladdr(crate::piw_connect as *const libc::c_void, info.as_mut_ptr()) };
    // SAFETY: zeroed, and filled by dladdr when it returned non-zero.
    let info = unsafe { info.assume_init() };
    if found != 0 && !info.dli_fname.is_null() {
        // SAFETY: a NUL-terminated path owned by the dynamic loader.
        let lib = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        let lib = std::path::Path::new(std::ffi::OsStr::from_bytes(lib.to_bytes()));
        if let Some(dir) = lib.parent() {
            for candidate in [dir.join("piw"), dir.join("../bin/piw")] {
                if candidate.is_file() {
                    return candidate.display().to_string();
                }
            }
        }
    }
    "piw".to_owned()
}

/// A timeout argument: negative waits without bound.
pub fn timeout_of(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

pub struct ClientObject {
    client: PipelinedClient,
    socket: String,
    error: ErrorSlot,
}

impl HasErrorSlot for ClientObject {
    fn error_slot(&self) -> &ErrorSlot {
        &self.error
    }
}

pub static CLIENTS: Table<ClientObject> = Table::new("client");

/// Connects as `options` say (see `piw_connect` in lib.rs).
pub fn connect(options: &Value) -> Result<ClientObject, Error> {
    if !options.is_null() && !options.is_object() {
        return Err(Error::invalid("options must be a JSON object"));
    }
    let text = |k: &str| -> Result<Option<String>, Error> {
        match options.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(Error::invalid(format!(
                "option {k} must be a non-empty string, got {other}"
            ))),
        }
    };
    let paths = match text("home")? {
        Some(home) => {
            let home = PathBuf::from(home);
            let home = if home.is_absolute() {
                home
            } else {
                std::env::current_dir()
                    .map_err(|e| Error::new(PiwStatus::Io, "io", e.to_string()))?
                    .join(home)
            };
            PiwPaths::for_home(home)
        }
        None => PiwPaths::from_vars(std::env::var_os("PIW_HOME"), std::env::var_os("HOME"))
            .map_err(|e| Error::new(PiwStatus::InvalidArgument, "invalid_home", e.to_string()))?,
    };
    let start = match options.get("start") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(Error::invalid(format!(
                "option start must be a boolean, got {other}"
            )))
        }
    };
    if start {
        let bin = text("host_bin")?
            .or_else(|| std::env::var("PIW_HOST_BIN").ok().filter(|b| !b.is_empty()))
            .unwrap_or_else(default_host_bin);
        let env: Vec<(String, String)> = match options.get("host_env") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(Error::invalid(format!(
                        "host_env.{k} must be a string, got {other}"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "option host_env must be an object, got {other}"
                )))
            }
        };
        let ready = match options.get("ready_timeout_ms") {
            None | Some(Value::Null) => client::DEFAULT_READY_TIMEOUT,
            Some(v) => Duration::from_millis(v.as_u64().ok_or_else(|| {
                Error::invalid(format!(
                    "option ready_timeout_ms must be a whole number, got {v}"
                ))
            })?),
        };
        client::ensure_host_with_env(&paths, std::path::Path::new(&bin), ready, &env)?;
    }
    let rt = runtime()?;
    let client = rt.block_on(PipelinedClient::connect(&paths))?;
    Ok(ClientObject {
        client,
        socket: paths.socket.display().to_string(),
        error: ErrorSlot::default(),
    })
}

impl ClientObject {
    pub fn socket(&self) -> &str {
        &self.socket
    }

    /// One request: `kind`, the envelope fields (wire names), the payload; the receipt as
    /// `{revision, replayed, body}`.
    pub fn call(
        &self,
        kind: &str,
        envelope: &Value,
        payload: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        let request = build_request(kind, envelope, payload)?;
        let rt = runtime()?;
        let receipt = self.client.send_now(request);
        let receipt = match timeout {
            None => rt.block_on(receipt),
            Some(t) => rt
                .block_on(async { tokio::time::timeout(t, receipt).await })
                .map_err(|_| Error::from(client::ClientError::TimedOut))?,
        }?;
        Ok(
            json!({ "revision": receipt.revision, "replayed": receipt.replayed, "body": receipt.body }),
        )
    }

    /// A stored place of run `run_id` as the workflow gave it: a reference read back with
    /// `value.get` (each call bounded by `timeout`), a literal unwrapped, anything else itself.
    pub fn resolve_value(
        &self,
        run_id: &str,
        stored: Value,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        use piw_client::protocol::value::{read_slot, Slot, ValueReader};
        let protocol = |message: String| Error::new(PiwStatus::Protocol, "protocol", message);
        let reference = match read_slot(&stored) {
            Ok(Slot::Inline(value)) => return Ok(value.clone()),
            Ok(Slot::Reference(r)) => r,
            Err(e) => return Err(protocol(e.to_string())),
        };
        let mut reader = ValueReader::new(reference);
        while let Some(offset) = reader.next_offset() {
            let receipt = self.call(
                "value.get",
                &json!({ "run_id": run_id }),
                json!({ "sha256": reader.reference().sha256, "offset": offset }),
                timeout,
            )?;
            reader.accept(&receipt["body"]).map_err(protocol)?;
        }
        reader.finish().map_err(protocol)
    }

    /// Waits until run `run_id` is final ([`RunStatus::is_terminal`], the one list of final
    /// states), or with `until_parked` also parked ([`is_parked`]), and returns its record (the
    /// `run` of `run.status`). Reads the status, then again after each event that may leave the
    /// run there, on a subscription of its own opened first (so no change falls between the
    /// read and the wait).
    pub fn wait_run(
        &self,
        run_id: &str,
        until_parked: bool,
        timeout: Option<Duration>,
    ) -> Result<Value, Error> {
        // Every status the run may stop at; `run.status` then says whether it did.
        let may_stop = move |status: &str| {
            RunStatus::parse(status).is_some_and(|s| {
                s.is_terminal()
                    || (until_parked && matches!(s, RunStatus::Waiting | RunStatus::Review))
            })
        };
        let stops = move |body: &Value| {
            let status = body["run"]["status"].as_str().and_then(RunStatus::parse);
            status.is_some_and(|s| s.is_terminal()) || (until_parked && is_parked(body))
        };
        let status_request =
            || build_request("run.status", &json!({ "run_id": run_id }), Value::Null);
        let wait = async {
            let mut sub = self
                .client
                .subscribe(payload::Subscribe {
                    run_id: Some(run_id.to_owned()),
                    session_id: None,
                    all: None,
                })
                .await?;
            let found = loop {
                let receipt = self.client.send(status_request()?).await?;
                if stops(&receipt.body) {
                    break receipt.body.get("run").cloned().unwrap_or(Value::Null);
                }
                loop {
                    match sub.next().await {
                        Some(Ok(event)) if may_stop(&event.status) => break,
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(Error::from(e)),
                        None => return Err(Error::from(client::ClientError::Disconnected)),
                    }
                }
            };
            // The host forgets a subscription whose connection ends; a failed unsubscribe
            // loses nothing.
            let _ = sub.close().await;
            Ok(found)
        };
        let rt = runtime()?;
        match timeout {
            None => rt.block_on(wait),
            // The run did not get there in time: the host answered all along, so say so and
            // not that the host did not answer.
            Some(t) => rt
                .block_on(async { tokio::time::timeout(t, wait).await })
                .map_err(|_| {
                    let state = if until_parked {
                        "a final state, a request to answer, a pause or review"
                    } else {
                        "a final state"
                    };
                    Error::new(
                        PiwStatus::Timeout,
                        "timeout",
                        format!(
                            "run {run_id} did not reach {state} within the timeout ({} ms); the run goes on",
                            t.as_millis()
                        ),
                    )
                })?,
        }
    }

    pub fn subscribe(&self, filter: &Value) -> Result<SubscriptionObject, Error> {
        let text = |k: &str| -> Result<Option<String>, Error> {
            match filter.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(Error::invalid(format!("{k} must be a string, got {other}"))),
            }
        };
        if !filter.is_object() {
            return Err(Error::invalid(
                "the filter must be a JSON object: {\"run_id\": ...} or {\"session_id\": ...}",
            ));
        }
        let rt = runtime()?;
        let sub = rt.block_on(self.client.subscribe(payload::Subscribe {
            run_id: text("run_id")?,
            session_id: text("session_id")?,
            all: None,
        }))?;
        SubscriptionObject::start(&rt, self.client.clone(), sub)
    }

    pub fn close(&self) {
        if let Ok(rt) = runtime() {
            rt.block_on(self.client.close());
        }
    }
}

/// Whether `run.status`'s reply `body` says the run is parked: in review, or waiting on a
/// request (a pending decision, checkpoint or interaction: someone must answer it) or paused.
/// Nothing happens until someone acts. A run asleep on a durable timer (`waiting` with
/// `wake_at` set, nothing pending) is not parked: it goes on by itself. The Node client's
/// `isParked` reads the same fields.
fn is_parked(body: &Value) -> bool {
    let run = &body["run"];
    match run["status"].as_str().and_then(RunStatus::parse) {
        Some(RunStatus::Review) => true,
        Some(RunStatus::Waiting) => {
            let pending = |records: &str| {
                body[records]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["status"] == "pending")
            };
            run["paused"] == true || pending("decisions") || pending("interactions")
        }
        _ => false,
    }
}

/// The request the host would decode from these parts, checked with its own decoder, so a
/// malformed call fails here with the code the host would give (as the Node addon does).
fn build_request(kind: &str, envelope: &Value, payload: Value) -> Result<Request, Error> {
    let envelope = match envelope {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        _ => return Err(Error::invalid("the envelope must be a JSON object or NULL")),
    };
    let mut wire = Map::new();
    wire.insert("schema".into(), json!(PROTOCOL_SCHEMA));
    let request_id = envelope
        .get("request_id")
        .cloned()
        .unwrap_or_else(|| json!(piw_client::ids::new_id("req")));
    wire.insert("request_id".into(), request_id);
    wire.insert("kind".into(), json!(kind));
    for (field, value) in envelope {
        match field.as_str() {
            "request_id" => {}
            "run_id" | "node_id" | "attempt_id" | "expected_revision" | "idempotency_key" => {
                if !value.is_null() {
                    wire.insert(field, value);
                }
            }
            other => {
                return Err(Error::invalid(format!(
                    "unknown envelope field {other:?} (request_id, run_id, node_id, attempt_id, expected_revision, idempotency_key)"
                )))
            }
        }
    }
    wire.insert("payload".into(), payload);
    let bytes =
        serde_json::to_vec(&Value::Object(wire)).map_err(|e| Error::invalid(e.to_string()))?;
    Request::decode(&bytes, &Limits::default())
        .map_err(|e| Error::from(client::ClientError::InvalidRequest(e)))
}

/// What a subscription's reader task hands the caller's thread.
struct Queue {
    events: VecDeque<String>,
    /// Why it ended: `None` while it runs; `Some(None)` closed; `Some(Some(e))` failed.
    end: Option<Option<Error>>,
    /// Whether the notify socket holds a byte (it does exactly while something waits).
    signalled: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
    /// The reader task waits here for room when the caller falls behind.
    room: tokio::sync::Notify,
    /// Written (one byte) when the queue stops being empty; the caller polls the other end.
    notify_tx: UnixStream,
    notify_rx: UnixStream,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the fd readable, if it is not yet. Called with the queue locked.
    fn signal(&self, q: &mut Queue) {
        if !q.signalled {
            // Non-blocking, and at most one byte is ever in the socket: it cannot fill up.
            let _ = (&self.notify_tx).write(&[1]);
            q.signalled = true;
        }
        self.changed.notify_all();
    }

    /// Makes the fd unreadable again once nothing waits. Called with the queue locked.
    fn unsignal(&self, q: &mut Queue) {
        if q.signalled && q.events.is_empty() && q.end.is_none() {
            let mut byte = [0u8; 8];
            let _ = (&self.notify_rx).read(&mut byte);
            q.signalled = false;
        }
    }
}

pub struct SubscriptionObject {
    id: String,
    client: PipelinedClient,
    shared: Arc<Shared>,
    task: tokio::task::AbortHandle,
    error: ErrorSlot,
}

impl HasErrorSlot for SubscriptionObject {
    fn error_slot(&self) -> &ErrorSlot {
        &self.error
    }
}

pub static SUBSCRIPTIONS: Table<SubscriptionObject> = Table::new("subscription");

impl SubscriptionObject {
    fn start(
        rt: &tokio::runtime::Handle,
        client: PipelinedClient,
        mut sub: client::Subscription,
    ) -> Result<Self, Error> {
        let io = |e: std::io::Error| {
            Error::new(
                PiwStatus::Io,
                "io",
                format!("cannot make the notify socket: {e}"),
            )
        };
        let (notify_tx, notify_rx) = UnixStream::pair().map_err(io)?;
        notify_tx.set_nonblocking(true).map_err(io)?;
        notify_rx.set_nonblocking(true).map_err(io)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                events: VecDeque::new(),
                end: None,
                signalled: false,
            }),
            changed: Condvar::new(),
            room: tokio::sync::Notify::new(),
            notify_tx,
            notify_rx,
        });
        let id = sub.id.clone();
        let reader = Arc::clone(&shared);
        let task = rt.spawn(async move {
            loop {
                // Take no more from the connection than the caller has room for: past that, the
                // client's own bound applies (the subscription ends with an overflow).
                loop {
                    let room = reader.room.notified();
                    if reader.lock().events.len() < SUBSCRIPTION_BUFFER {
                        break;
                    }
                    room.await;
                }
                let next = sub.next().await;
                let mut q = reader.lock();
                match next {
                    Some(Ok(event)) => match serde_json::to_string(&event) {
                        Ok(text) => q.events.push_back(text),
                        Err(e) => {
                            q.end = Some(Some(Error::new(
                                PiwStatus::Protocol,
                                "protocol",
                                e.to_string(),
                            )))
                        }
                    },
                    Some(Err(e)) => q.end = Some(Some(Error::from(e))),
                    None => q.end = Some(None),
                }
                let ended = q.end.is_some();
                reader.signal(&mut q);
                if ended {
                    return;
                }
            }
        });
        Ok(SubscriptionObject {
            id,
            client,
            shared,
            task: task.abort_handle(),
            error: ErrorSlot::default(),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn fd(&self) -> c_int {
        self.shared.notify_rx.as_raw_fd()
    }

    /// The next event's JSON; `PIW_STATUS_END` once the subscription ended, its error when it
    /// failed, `PIW_STATUS_TIMEOUT` when none came in time.
    pub fn next(&self, timeout: Option<Duration>) -> Result<String, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.shared.lock();
        loop {
            if let Some(event) = q.events.pop_front() {
                self.shared.unsignal(&mut q);
                drop(q);
                self.shared.room.notify_one();
                return Ok(event);
            }
            match &q.end {
                Some(None) => {
                    return Err(Error::new(
                        PiwStatus::End,
                        "end",
                        "the subscription has ended",
                    ))
                }
                Some(Some(e)) => return Err(e.clone()),
                None => {}
            }
            q = match deadline {
                None => self
                    .shared
                    .changed
                    .wait(q)
                    .unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::from(client::ClientError::TimedOut));
                    }
                    self.shared
                        .changed
                        .wait_timeout(q, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }

    pub fn close(&self) {
        if let Ok(rt) = runtime() {
            // The host stops sending; a closed connection has nothing to stop.
            let _ = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), self.client.unsubscribe(&self.id))
                    .await
            });
        }
        self.task.abort();
        let mut q = self.shared.lock();
        if q.end.is_none() {
            q.end = Some(None);
        }
        self.shared.signal(&mut q);
    }
}

/// Gives the caller an owned copy of a handle's last error message (NULL when none).
pub fn error_message_of(slot: &ErrorSlot) -> *mut c_char {
    slot.get().map_or(std::ptr::null_mut(), |e| {
        crate::error::c_string(&e.message).into_raw()
    })
}
