//! The client library shared by the CLI, the Node addon and the C ABI: connect to the host
//! (starting it on demand), send typed requests, receive receipts, typed rejections and
//! subscription events. An async face ([`Client`]) and a blocking face ([`BlockingClient`]).

use std::collections::VecDeque;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

mod pipelined;

pub use pipelined::{PipelinedClient, Subscription, SUBSCRIPTION_BUFFER};

use crate::paths::PiwPaths;
use crate::protocol::{
    encode_frame, DecodeError, Event, FrameDecoder, FrameError, Limits, Receipt, Rejection,
    RejectionCode, Request, RequestBody, Response, ServerFrame,
};

/// A `run.start` payload for `workflow_file` as the caller means it: a relative path is
/// relative to the caller's working directory, which is sent as `project_dir` (the host
/// resolves relative paths against `project_dir`, never against its own directory, and the
/// run's children start there). Set `session_id` and `execution_mode` on the result as needed.
pub fn run_start_here(
    workflow_file: impl AsRef<Path>,
    input: serde_json::Value,
) -> Result<crate::protocol::payload::RunStart, ClientError> {
    let here = std::env::current_dir()?;
    Ok(crate::protocol::payload::RunStart {
        workflow_file: workflow_file.as_ref().display().to_string(),
        input,
        session_id: None,
        execution_mode: None,
        project_dir: Some(here.display().to_string()),
    })
}

/// Default bound on how long `ensure_host` waits for a host to become ready.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No host answers at the socket.
    #[error("cannot connect to the piw host at {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The host refused the request; this attempt committed nothing, except perhaps after
    /// `host_shutting_down` (see [`RejectionCode`]).
    #[error("{}: {}", .0.code, .0.message)]
    Rejected(Rejection),
    /// The request was not sent: the host would refuse it as `malformed` or
    /// `payload_too_large` and close the whole connection. Checked with the host's own rules
    /// ([`Request::validate`]); the connection and the other calls on it are unaffected.
    #[error("the request was not sent: {}", .0.message)]
    InvalidRequest(DecodeError),
    /// The host closed the connection, saying why.
    #[error("the host closed the connection ({code}): {message}")]
    Closed {
        code: RejectionCode,
        message: String,
    },
    /// The connection ended without a reply (the host died or closed it, a write found it
    /// closed), or it can no longer carry a call because an earlier call on it did not run to
    /// completion (it timed out, failed mid-way, or its future was dropped): that call's reply
    /// may still arrive and would be taken for the next one's. Reconnect, and resend a command
    /// that got no receipt with the same request id (the host replays it if it was applied).
    #[error("the connection to the host ended or broke without a reply (reconnect)")]
    Disconnected,
    /// The host did not answer within the [`BlockingClient::set_timeout`] bound. A call that
    /// timed out leaves its connection broken: later calls fail with
    /// [`ClientError::Disconnected`]. A timed-out [`BlockingClient::next_event`] does not.
    #[error("the host did not answer within the timeout")]
    TimedOut,
    #[error("i/o error talking to the host: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The socket answered, but the process listening there belongs to another user. This
    /// user's host never does, so it is someone else's listener at the path (for example in a
    /// shared directory they created first); nothing is sent to it.
    #[error("the process listening at {path} belongs to uid {uid}, not to this user (uid {own}); nothing was sent to it")]
    ForeignHost { path: PathBuf, uid: u32, own: u32 },
    /// `ensure_host` could not bring a host up in time: the host it started was still
    /// running (slow to come up), or another process still held the installation.
    #[error("the piw host did not become ready within {waited:?}: {detail}")]
    HostNotReady { waited: Duration, detail: String },
    /// The host `ensure_host` started exited before it became ready, while no other process
    /// held the installation (a refused database, an unusable `PIW_HOME`, ...): waiting longer
    /// would not help. `log_tail` holds the last lines that host wrote to `log`, which say why.
    #[error("{}", host_exited_message(*.status, .log, .log_tail))]
    HostExited {
        status: std::process::ExitStatus,
        log: PathBuf,
        log_tail: String,
    },
    /// `ensure_host` could not start the host program at all (missing, not executable).
    #[error(
        "cannot start the piw host {bin}: {source} (PIW_HOST_BIN names the piw binary to start)"
    )]
    HostNotStarted {
        bin: PathBuf,
        source: std::io::Error,
    },
    /// `ensure_host` could not open `host.log`, where the host it starts writes its output:
    /// it is a directory, a FIFO, a link, unwritable, on a full disk... No host was started.
    #[error("{}", host_log_message(.path, .source))]
    HostLog {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The caller closed this client while the call was in flight (or before it was made).
    #[error("the client was closed")]
    ClientClosed,
    /// The reader fell more than [`SUBSCRIPTION_BUFFER`] events behind, so that no event is
    /// skipped silently. Re-read the run's status. A [`PipelinedClient`] subscription ends
    /// here; on a [`Client`] or [`BlockingClient`] (whose calls keep the events arriving
    /// meanwhile) the events after the buffered ones were dropped, this error stands once in
    /// their place, and later events arrive again.
    #[error("the subscription fell too far behind; events were dropped")]
    SubscriptionOverflow,
}

impl ClientError {
    /// The protocol's rejection code, when the host sent one (or would send one: a request
    /// refused before sending).
    pub fn code(&self) -> Option<RejectionCode> {
        match self {
            ClientError::Rejected(r) => Some(r.code),
            ClientError::InvalidRequest(e) => Some(e.code),
            ClientError::Closed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A stable code for every failure: the host's rejection code when there is one, else a
    /// client-side code (`connect_failed`, `disconnected`, `timeout`, `io`, `protocol`,
    /// `host_not_ready`, `client_closed`, `subscription_overflow`, `foreign_host`). Bindings
    /// expose it as the
    /// error's `code`.
    pub fn code_str(&self) -> &'static str {
        match self {
            ClientError::Rejected(r) => r.code.as_str(),
            ClientError::InvalidRequest(e) => e.code.as_str(),
            ClientError::Closed { code, .. } => code.as_str(),
            ClientError::Connect { .. } => "connect_failed",
            ClientError::Disconnected => "disconnected",
            ClientError::TimedOut => "timeout",
            ClientError::Io(_) => "io",
            ClientError::Protocol(_) => "protocol",
            // One code for both ways a start fails, so callers that check it keep working;
            // the message says which.
            ClientError::HostNotReady { .. }
            | ClientError::HostExited { .. }
            | ClientError::HostNotStarted { .. }
            | ClientError::HostLog { .. } => "host_not_ready",
            ClientError::ForeignHost { .. } => "foreign_host",
            ClientError::ClientClosed => "client_closed",
            ClientError::SubscriptionOverflow => "subscription_overflow",
        }
    }
}

/// The message of [`ClientError::HostLog`]: the file and what is wrong with it.
fn host_log_message(path: &Path, source: &std::io::Error) -> String {
    let cause = match source.raw_os_error() {
        Some(libc::EISDIR) => "it is a directory, not a regular file (remove it)".to_owned(),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("this user may not write it ({source}): fix its permissions or remove it")
        }
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            format!("the disk holding it is full ({source})")
        }
        Some(libc::EROFS) => format!("it is on a read-only file system ({source})"),
        // `open_installation_file`'s refusals (a link, a FIFO, ...) already name the file and
        // what it is.
        _ => source.to_string(),
    };
    format!(
        "cannot start the piw host: its log {} cannot be opened for writing: {cause}",
        path.display()
    )
}

/// The message of [`ClientError::HostExited`].
fn host_exited_message(status: std::process::ExitStatus, log: &Path, log_tail: &str) -> String {
    let head = format!("the piw host exited ({status}) before it became ready");
    if log_tail.is_empty() {
        format!("{head}; it wrote nothing to {}", log.display())
    } else {
        format!("{head}; its last lines in {}:\n{log_tail}", log.display())
    }
}

/// Connects to the host's socket (async faces).
async fn connect_socket(paths: &PiwPaths) -> Result<UnixStream, ClientError> {
    let stream =
        UnixStream::connect(&paths.socket)
            .await
            .map_err(|source| ClientError::Connect {
                path: paths.socket.clone(),
                source,
            })?;
    check_host_peer(&paths.socket, peer_uid(&stream))?;
    Ok(stream)
}

/// The uid of the process at the other end of a Unix stream (`SO_PEERCRED`: the credentials
/// it had when it called `listen` or `connect`).
fn peer_uid(stream: &impl std::os::fd::AsFd) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd as _;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live socket borrowed for the call; `cred` and `len` are valid for
    // writes of the size given, which is what SO_PEERCRED fills.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(cred.uid)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Refuses a listener of another user before anything is sent to it. The host refuses peers
/// of another uid; this is the other direction: requests, answers and child tokens go only to
/// a process of this user.
fn check_host_peer(path: &Path, peer: std::io::Result<u32>) -> Result<(), ClientError> {
    let own = crate::paths::current_uid();
    match peer {
        Ok(uid) if uid == own => Ok(()),
        Ok(uid) => Err(ClientError::ForeignHost {
            path: path.to_owned(),
            uid,
            own,
        }),
        Err(e) => Err(ClientError::Io(e)),
    }
}

fn new_request_id() -> String {
    crate::ids::new_id("req")
}

/// Checks `request` with the host's own rules and encodes it. A request the host would refuse
/// as `malformed` or `payload_too_large` (and close the connection for) fails here, before a
/// byte is sent.
fn checked_frame(request: &Request, limits: &Limits) -> Result<Vec<u8>, ClientError> {
    request
        .validate(limits)
        .map_err(ClientError::InvalidRequest)?;
    encode_frame(request, limits).map_err(|e| {
        let code = match e {
            FrameError::TooLarge { .. } | FrameError::BufferFull { .. } => {
                RejectionCode::PayloadTooLarge
            }
            _ => RejectionCode::Malformed,
        };
        ClientError::InvalidRequest(
            DecodeError::new(code, e.to_string()).with_request_id(Some(request.request_id.clone())),
        )
    })
}

fn response_to_result(response: Response) -> Result<Receipt, ClientError> {
    match response.result {
        Ok(receipt) => Ok(receipt),
        Err(rejection) => Err(ClientError::Rejected(rejection)),
    }
}

/// What an I/O error on an established connection means: a timeout, the host gone, or
/// something else. Neither of the first two is a protocol error.
fn stream_error(e: std::io::Error) -> ClientError {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ClientError::TimedOut,
        ErrorKind::BrokenPipe
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::NotConnected
        | ErrorKind::UnexpectedEof => ClientError::Disconnected,
        _ => ClientError::Io(e),
    }
}

/// The receiving side of a one-call-at-a-time connection ([`Client`], [`BlockingClient`]):
/// bytes received but not yet decoded (kept across a timeout or a dropped read, so the stream
/// never loses its frame boundaries), events that arrived between replies, and whether the
/// connection can still carry a call.
struct Conn {
    decoder: FrameDecoder,
    limits: Limits,
    /// At most [`SUBSCRIPTION_BUFFER`] events, oldest first.
    events: VecDeque<Event>,
    /// Events arrived while `events` was full and were dropped: the next event read after the
    /// queued ones is [`ClientError::SubscriptionOverflow`].
    events_lost: bool,
    /// Set when a call starts and cleared only when its reply arrives; also set when the
    /// stream ended or can no longer be trusted. While it is set every call fails with
    /// [`ClientError::Disconnected`] instead of reading a reply meant for an earlier call.
    broken: bool,
}

impl Conn {
    fn new() -> Self {
        let limits = Limits::default();
        Conn {
            decoder: FrameDecoder::new(limits),
            limits,
            events: VecDeque::new(),
            events_lost: false,
            broken: false,
        }
    }

    /// Marks the start of a call; fails when the connection cannot carry one.
    fn start_call(&mut self) -> Result<(), ClientError> {
        if self.broken {
            return Err(ClientError::Disconnected);
        }
        self.broken = true;
        Ok(())
    }

    /// Records a failure of the stream and returns it. Only a timeout leaves the stream
    /// usable (for events: a call in flight keeps it broken anyway), since no received byte is
    /// lost.
    fn fail(&mut self, error: ClientError) -> ClientError {
        if !matches!(error, ClientError::TimedOut) {
            self.broken = true;
        }
        error
    }

    /// A complete server frame already received, if there is one.
    fn buffered_frame(&mut self) -> Result<Option<ServerFrame>, ClientError> {
        let body = match self.decoder.next_frame() {
            Ok(Some(body)) => body,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.fail(ClientError::Protocol(e.to_string()))),
        };
        match ServerFrame::decode(&body) {
            Ok(frame) => Ok(Some(frame)),
            Err(e) => Err(self.fail(ClientError::Protocol(e.message))),
        }
    }

    /// Takes `bytes` just read (none: the host closed the connection).
    fn received(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        if bytes.is_empty() {
            return Err(self.fail(ClientError::Disconnected));
        }
        self.decoder
            .push(bytes)
            .map_err(|e| self.fail(ClientError::Protocol(e.to_string())))
    }

    /// What one server frame means while waiting for the reply to `request_id`: the reply
    /// (which completes the call), an error, or an event to queue (`None`).
    fn reply_step(
        &mut self,
        frame: ServerFrame,
        request_id: &str,
    ) -> Option<Result<Receipt, ClientError>> {
        match frame {
            ServerFrame::Response(r) if r.request_id == request_id => {
                self.broken = false;
                Some(response_to_result(r))
            }
            ServerFrame::Response(r) => Some(Err(self.fail(ClientError::Protocol(format!(
                "reply for unknown request {}",
                r.request_id
            ))))),
            ServerFrame::Event(e) => {
                self.queue_event(e);
                None
            }
            ServerFrame::Goodbye(g) => Some(Err(self.fail(goodbye(g)))),
        }
    }

    /// What one server frame means while waiting for an event.
    fn event_step(&mut self, frame: ServerFrame) -> Result<Event, ClientError> {
        match frame {
            ServerFrame::Event(e) => Ok(e),
            ServerFrame::Goodbye(g) => Err(self.fail(goodbye(g))),
            ServerFrame::Response(r) => Err(self.fail(ClientError::Protocol(format!(
                "unexpected reply {}",
                r.request_id
            )))),
        }
    }

    /// Keeps an event that arrived while a call waited for its reply. A caller that makes
    /// calls and never reads events must not grow memory without bound: past
    /// [`SUBSCRIPTION_BUFFER`] events, newer ones are dropped (and so is every one after them,
    /// so what is kept has no gap) and the reader learns it from an error in their place.
    fn queue_event(&mut self, event: Event) {
        if self.events_lost || self.events.len() >= SUBSCRIPTION_BUFFER {
            self.events_lost = true;
        } else {
            self.events.push_back(event);
        }
    }

    /// Drops the queued events and the overflow that may follow them; returns how many.
    fn discard_queued_events(&mut self) -> usize {
        let dropped = self.events.len() + usize::from(self.events_lost);
        self.events.clear();
        self.events_lost = false;
        dropped
    }

    /// An event that arrived between replies; once they are taken, the overflow that followed
    /// them (once), or a refusal when the connection is broken.
    fn queued_event(&mut self) -> Option<Result<Event, ClientError>> {
        if let Some(e) = self.events.pop_front() {
            return Some(Ok(e));
        }
        if std::mem::take(&mut self.events_lost) {
            return Some(Err(ClientError::SubscriptionOverflow));
        }
        self.broken.then_some(Err(ClientError::Disconnected))
    }
}

fn goodbye(g: crate::protocol::Goodbye) -> ClientError {
    ClientError::Closed {
        code: g.code,
        message: g.message,
    }
}

/// The async client: one connection, one request at a time, events queued between replies.
///
/// A call whose future is dropped before it returns (a `select!`, a timeout around it) leaves
/// the connection broken: its reply may still arrive, so every later call fails with
/// [`ClientError::Disconnected`]; reconnect. [`Client::next_event`] may be dropped safely.
pub struct Client {
    stream: UnixStream,
    conn: Conn,
}

impl Client {
    /// Connects to the host of `paths`.
    pub async fn connect(paths: &PiwPaths) -> Result<Self, ClientError> {
        let stream = connect_socket(paths).await?;
        Ok(Self {
            stream,
            conn: Conn::new(),
        })
    }

    /// Connects, starting a host first when none answers (see [`ensure_host`]).
    pub async fn connect_or_start(paths: &PiwPaths, host_bin: &Path) -> Result<Self, ClientError> {
        let paths_owned = paths.clone();
        let bin = host_bin.to_path_buf();
        tokio::task::spawn_blocking(move || ensure_host(&paths_owned, &bin, DEFAULT_READY_TIMEOUT))
            .await
            .map_err(|e| ClientError::Protocol(format!("ensure_host task failed: {e}")))??;
        Self::connect(paths).await
    }

    /// Sends `body` with a fresh request id and waits for its receipt.
    pub async fn call(&mut self, body: RequestBody) -> Result<Receipt, ClientError> {
        self.send(Request::new(new_request_id(), body)).await
    }

    /// Sends a fully built request (own request id, run id, revision, idempotency key ...).
    /// One the host would refuse fails with [`ClientError::InvalidRequest`] and is not sent.
    pub async fn send(&mut self, request: Request) -> Result<Receipt, ClientError> {
        let bytes = checked_frame(&request, &self.conn.limits)?;
        // From here until its reply arrives the call is unfinished: dropped or failed, it
        // leaves the connection broken.
        self.conn.start_call()?;
        if let Err(e) = self.stream.write_all(&bytes).await {
            let error = self.conn.fail(stream_error(e));
            if matches!(error, ClientError::Disconnected) {
                if let Some(bye) = self.goodbye_before_close().await {
                    return Err(bye);
                }
            }
            return Err(error);
        }
        loop {
            let frame = self.next_frame().await?;
            if let Some(result) = self.conn.reply_step(frame, &request.request_id) {
                return result;
            }
        }
    }

    /// The next subscription event (waits for one).
    pub async fn next_event(&mut self) -> Result<Event, ClientError> {
        if let Some(queued) = self.conn.queued_event() {
            return queued;
        }
        let frame = self.next_frame().await?;
        self.conn.event_step(frame)
    }

    /// Drops the events that arrived during calls (and the overflow that may follow them);
    /// returns how many there were. See [`BlockingClient::discard_queued_events`].
    pub fn discard_queued_events(&mut self) -> usize {
        self.conn.discard_queued_events()
    }

    /// After a write found the host gone: the goodbye it sent first, if any (the host may
    /// refuse a connection before it reads anything).
    async fn goodbye_before_close(&mut self) -> Option<ClientError> {
        loop {
            match self.next_frame().await {
                Ok(ServerFrame::Goodbye(g)) => return Some(self.conn.fail(goodbye(g))),
                Ok(ServerFrame::Event(e)) => self.conn.queue_event(e),
                Ok(ServerFrame::Response(_)) | Err(_) => return None,
            }
        }
    }

    async fn next_frame(&mut self) -> Result<ServerFrame, ClientError> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(frame) = self.conn.buffered_frame()? {
                return Ok(frame);
            }
            // Cancel-safe: a read that is dropped has taken no bytes.
            match self.stream.read(&mut buf).await {
                Ok(n) => self.conn.received(&buf[..n])?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.conn.fail(stream_error(e))),
            }
        }
    }
}

/// The blocking client, for callers without an async runtime (the CLI, the C ABI).
pub struct BlockingClient {
    stream: std::os::unix::net::UnixStream,
    conn: Conn,
}

impl BlockingClient {
    /// Connects to the host of `paths`.
    pub fn connect(paths: &PiwPaths) -> Result<Self, ClientError> {
        let stream = std::os::unix::net::UnixStream::connect(&paths.socket).map_err(|source| {
            ClientError::Connect {
                path: paths.socket.clone(),
                source,
            }
        })?;
        check_host_peer(&paths.socket, peer_uid(&stream))?;
        Ok(Self {
            stream,
            conn: Conn::new(),
        })
    }

    /// Connects, starting a host first when none answers.
    pub fn connect_or_start(paths: &PiwPaths, host_bin: &Path) -> Result<Self, ClientError> {
        ensure_host(paths, host_bin, DEFAULT_READY_TIMEOUT)?;
        Self::connect(paths)
    }

    /// Bounds how long a call waits for the host (each read and write). A call that passes it
    /// fails with [`ClientError::TimedOut`] and leaves the connection broken: its reply may
    /// still arrive, so later calls fail with [`ClientError::Disconnected`]; reconnect and
    /// resend the command with the same request id. A [`BlockingClient::next_event`] that
    /// passes it fails with [`ClientError::TimedOut`] and may be called again.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.stream.set_read_timeout(timeout)?;
        self.stream.set_write_timeout(timeout)?;
        Ok(())
    }

    /// The value `reference` names, which run `run_id` holds: read a frame at a time
    /// (`value.get`) and checked against its hash.
    pub fn read_value(
        &mut self,
        run_id: &str,
        reference: &crate::protocol::ValueRef,
    ) -> Result<Value, ClientError> {
        let mut reader = crate::protocol::value::ValueReader::new(reference.clone());
        while let Some(offset) = reader.next_offset() {
            let get = RequestBody::ValueGet(crate::protocol::payload::ValueGet {
                sha256: reference.sha256.clone(),
                offset,
                max_bytes: None,
            });
            let r = self.send(Request::new(new_request_id(), get).with_run_id(run_id))?;
            reader.accept(&r.body).map_err(ClientError::Protocol)?;
        }
        reader.finish().map_err(ClientError::Protocol)
    }

    /// A stored place of run `run_id` (an output, result, receipt, request, message) as the
    /// workflow gave it: a reference read back ([`BlockingClient::read_value`]), a wrapped
    /// literal unwrapped, anything else as it is.
    pub fn resolve_value(&mut self, run_id: &str, stored: Value) -> Result<Value, ClientError> {
        use crate::protocol::value::{read_slot, Slot};
        match read_slot(&stored) {
            Ok(Slot::Inline(inner)) if std::ptr::eq(inner, &stored) => Ok(stored),
            Ok(Slot::Inline(inner)) => Ok(inner.clone()),
            Ok(Slot::Reference(r)) => self.read_value(run_id, &r),
            Err(e) => Err(ClientError::Protocol(e.to_string())),
        }
    }

    /// A `run.status` reply's body with every place resolved ([`BlockingClient::resolve_value`]):
    /// the run's result, the attempts' outputs, the effects' receipts, the requests.
    pub fn resolve_run_status(&mut self, status: &mut Value) -> Result<(), ClientError> {
        let run_id = status["run"]["run_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // A value several places hold (an action's output is its receipt) is read once.
        let mut read = std::collections::BTreeMap::new();
        for (list, field) in [
            ("attempts", "output"),
            ("effects", "receipt"),
            ("decisions", "request"),
            ("interactions", "request"),
        ] {
            let Some(Value::Array(items)) = status.get_mut(list) else {
                continue;
            };
            for place in items.iter_mut().filter_map(|i| i.get_mut(field)) {
                *place = self.resolve_value_once(&run_id, place.take(), &mut read)?;
            }
        }
        if let Some(result) = status.get_mut("run").and_then(|r| r.get_mut("result")) {
            *result = self.resolve_value_once(&run_id, result.take(), &mut read)?;
        }
        Ok(())
    }

    /// [`BlockingClient::resolve_value`], reading each value once: `read` holds those read.
    fn resolve_value_once(
        &mut self,
        run_id: &str,
        stored: Value,
        read: &mut std::collections::BTreeMap<String, Value>,
    ) -> Result<Value, ClientError> {
        use crate::protocol::value::{read_slot, Slot};
        let Ok(Slot::Reference(r)) = read_slot(&stored) else {
            return self.resolve_value(run_id, stored);
        };
        if let Some(value) = read.get(&r.sha256) {
            return Ok(value.clone());
        }
        let value = self.read_value(run_id, &r)?;
        read.insert(r.sha256, value.clone());
        Ok(value)
    }

    /// Sends `body` with a fresh request id and waits for its receipt.
    pub fn call(&mut self, body: RequestBody) -> Result<Receipt, ClientError> {
        self.send(Request::new(new_request_id(), body))
    }

    /// Sends a fully built request and waits for its receipt. One the host would refuse
    /// fails with [`ClientError::InvalidRequest`] and is not sent.
    pub fn send(&mut self, request: Request) -> Result<Receipt, ClientError> {
        let bytes = checked_frame(&request, &self.conn.limits)?;
        // From here until its reply arrives the call is unfinished: failed or timed out, it
        // leaves the connection broken.
        self.conn.start_call()?;
        if let Err(e) = self.stream.write_all(&bytes) {
            let error = self.conn.fail(stream_error(e));
            if matches!(error, ClientError::Disconnected) {
                if let Some(bye) = self.goodbye_before_close() {
                    return Err(bye);
                }
            }
            return Err(error);
        }
        loop {
            let frame = self.next_frame()?;
            if let Some(result) = self.conn.reply_step(frame, &request.request_id) {
                return result;
            }
        }
    }

    /// The next subscription event (blocks until one arrives or the timeout passes).
    pub fn next_event(&mut self) -> Result<Event, ClientError> {
        if let Some(queued) = self.conn.queued_event() {
            return queued;
        }
        let frame = self.next_frame()?;
        self.conn.event_step(frame)
    }

    /// Drops the events that arrived during calls (and the overflow that may follow them);
    /// returns how many there were. For a caller that rereads the run on any event, so that a
    /// burst costs it one read, not one per event.
    pub fn discard_queued_events(&mut self) -> usize {
        self.conn.discard_queued_events()
    }

    /// After a write found the host gone: the goodbye it sent first, if any (the host may
    /// refuse a connection before it reads anything).
    fn goodbye_before_close(&mut self) -> Option<ClientError> {
        loop {
            match self.next_frame() {
                Ok(ServerFrame::Goodbye(g)) => return Some(self.conn.fail(goodbye(g))),
                Ok(ServerFrame::Event(e)) => self.conn.queue_event(e),
                Ok(ServerFrame::Response(_)) | Err(_) => return None,
            }
        }
    }

    fn next_frame(&mut self) -> Result<ServerFrame, ClientError> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(frame) = self.conn.buffered_frame()? {
                return Ok(frame);
            }
            // A read that times out has taken no bytes: the decoder keeps any partial frame.
            match self.stream.read(&mut buf) {
                Ok(n) => self.conn.received(&buf[..n])?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.conn.fail(stream_error(e))),
            }
        }
    }
}

/// Makes sure a host serves `paths`: returns at once when one answers; otherwise starts
/// `host_bin host serve` as a detached process (own session, output to `host.log`) and waits
/// until the socket answers or `timeout` passes. Racing callers are safe: the installation
/// lock lets exactly one host run; the losers exit and everyone connects to the winner.
///
/// A host started while another process still holds the installation (a host that is
/// stopping, a `piw state reset`) exits at once; this call then waits for that process to let
/// go (or for its host to answer) and starts the host once more, within `timeout`. A host that
/// exits while nobody else holds the installation (a refused database, say) fails the call at
/// once (after one more start, in case it was refused by a holder that let go before its exit
/// was seen) with [`ClientError::HostExited`]: its exit status and the end of its log. Only a host
/// still starting (or another holder that has not let go) when `timeout` passes is
/// [`ClientError::HostNotReady`].
pub fn ensure_host(
    paths: &PiwPaths,
    host_bin: &Path,
    timeout: Duration,
) -> Result<(), ClientError> {
    ensure_host_with_env(paths, host_bin, timeout, &[])
}

/// [`ensure_host`], giving a host that has to be started these extra environment variables
/// (the Node addon uses it to register its worker runtime). A host that already answers is
/// used as it is.
pub fn ensure_host_with_env(
    paths: &PiwPaths,
    host_bin: &Path,
    timeout: Duration,
    env: &[(String, String)],
) -> Result<(), ClientError> {
    if probe(paths) {
        return Ok(());
    }
    paths.ensure_dirs()?;
    let started = Instant::now();
    // Where this call's hosts began writing to host.log: an error shows only their lines.
    let mut log_from = log_len(&paths.log);
    // The host this call started, while it runs.
    let mut child = Some(start_host(paths, host_bin, env)?);
    // How the last host this call started ended, and whether another process held the
    // installation after that (then it is started again once that process is gone).
    let mut exited: Option<(std::process::ExitStatus, bool)> = None;
    // Whether a host that exited while nobody was seen to hold the installation was started
    // once more (see below).
    let mut started_again = false;
    let mut delay = Duration::from_millis(2);
    loop {
        if probe(paths) {
            // The host (or a loser that exits because another host won the race) is our
            // child: reap it whenever it exits, so a long-lived caller such as Pi keeps no
            // zombie behind after `piw host stop`.
            if let Some(child) = child {
                reap_in_background(child);
            }
            return Ok(());
        }
        // Looked at before the deadline, so that a host that has exited by then is reported
        // as exited, not as slow.
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            child = None;
            exited = Some((status, false));
        }
        if let Some((status, held)) = exited {
            match (crate::lock::installation_held(paths), held) {
                // Another process holds the installation: a host that is starting (it will
                // answer) or stopping, or a reset. Wait for it to answer or to let go.
                (true, _) => exited = Some((status, true)),
                (false, true) => {
                    exited = None;
                    log_from = log_len(&paths.log);
                    child = Some(start_host(paths, host_bin, env)?);
                }
                (false, false) => {
                    // Nobody held the installation: the host failed by itself. A last look,
                    // after a moment: a host that won a race may have just come up.
                    std::thread::sleep(Duration::from_millis(20));
                    if probe(paths) {
                        return Ok(());
                    }
                    if crate::lock::installation_held(paths) {
                        continue;
                    }
                    // A holder (a host that was stopping) may have refused this host and let
                    // go before its exit was seen here: start it once more. A host that fails
                    // by itself fails the same way again, and that exit is the one reported.
                    if !started_again {
                        started_again = true;
                        exited = None;
                        log_from = log_len(&paths.log);
                        child = Some(start_host(paths, host_bin, env)?);
                        continue;
                    }
                    return Err(ClientError::HostExited {
                        status,
                        log: paths.log.clone(),
                        log_tail: log_tail(&paths.log, log_from),
                    });
                }
            }
        }
        if started.elapsed() >= timeout {
            // A host that is slow to come up may still serve later: it is left running, and
            // reaped whenever it exits.
            let detail = match child {
                Some(child) => {
                    reap_in_background(child);
                    format!("it is still starting; see {}", paths.log.display())
                }
                // The host this call started exited because another process held the
                // installation, and that process has not let go.
                None => format!(
                    "another process still holds {} (a host that is stopping, or \
                     `piw state reset`); see {}",
                    paths.lock.display(),
                    paths.log.display()
                ),
            };
            return Err(ClientError::HostNotReady {
                waited: started.elapsed(),
                detail,
            });
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// The threads that wait for hosts this process started (see [`reap_in_background`]), each
/// with the write end of the pipe that stops it.
static REAPERS: std::sync::Mutex<Vec<Reaper>> = std::sync::Mutex::new(Vec::new());

struct Reaper {
    thread: std::thread::JoinHandle<()>,
    stop: std::io::PipeWriter,
}

/// Waits for `child` on a thread of its own, so a long-lived caller keeps no zombie. The
/// thread sleeps in poll(2) on the child's pidfd and on a pipe, so [`stop_reaping`] can end it
/// while the host still runs. Where pidfds are missing (Linux before 5.3, valgrind) it looks
/// at the child once a second instead.
fn reap_in_background(mut child: std::process::Child) {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    let mut reapers = REAPERS.lock().unwrap_or_else(|p| p.into_inner());
    reapers.retain(|r| !r.thread.is_finished());
    let Ok((stop_rx, stop)) = std::io::pipe() else {
        let _ = std::thread::Builder::new()
            .name("piw-host-reaper".into())
            .spawn(move || child.wait());
        return;
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    // SAFETY: a descriptor pidfd_open just returned, owned by nothing else.
    let pidfd = (raw >= 0)
        .then(|| i32::try_from(raw).ok())
        .flatten()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    let spawned = std::thread::Builder::new()
        .name("piw-host-reaper".into())
        .spawn(move || loop {
            let mut fds = [
                libc::pollfd {
                    fd: stop_rx.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: pidfd.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = if pidfd.is_some() { -1 } else { 1000 };
            // SAFETY: two pollfd entries that live across the call (a negative fd is ignored).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
            if fds[0].revents != 0 {
                return; // stop_reaping closed the pipe
            }
            if !matches!(child.try_wait(), Ok(None)) {
                return; // reaped (or it cannot be waited for)
            }
        });
    if let Ok(thread) = spawned {
        reapers.push(Reaper { thread, stop });
    }
}

/// Ends every thread that waits for a host this process started, leaving the hosts running
/// (one that exits later is reaped when this process ends). For a library that must leave
/// nothing running when its caller shuts it down (libpiw's `piw_shutdown`).
pub fn stop_reaping() {
    let reapers = std::mem::take(&mut *REAPERS.lock().unwrap_or_else(|p| p.into_inner()));
    for Reaper { thread, stop } in reapers {
        drop(stop);
        let _ = thread.join();
    }
}

/// Starts `host_bin host serve` detached: its own session (it outlives the caller's terminal
/// and process group), its output appended to `host.log`.
fn start_host(
    paths: &PiwPaths,
    host_bin: &Path,
    env: &[(String, String)],
) -> Result<std::process::Child, ClientError> {
    // The owner's only, like the state it logs about.
    // Never appended through a link planted at its name, nor a FIFO that would block.
    use std::os::unix::fs::OpenOptionsExt as _;
    // Said as what is wrong with host.log, not as a failure to talk to the host.
    let log_error = |source| ClientError::HostLog {
        path: paths.log.clone(),
        source,
    };
    let log = crate::paths::open_installation_file(
        &paths.log,
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600),
    )
    .map_err(log_error)?;
    let stdout = log.try_clone().map_err(log_error)?;
    let mut cmd = Command::new(host_bin);
    cmd.args(["host", "serve"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PIW_HOME", &paths.home)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|source| ClientError::HostNotStarted {
        bin: host_bin.to_owned(),
        source,
    })
}

/// The length of `path` now (0 when it does not exist yet).
fn log_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The last lines (at most 10, about 2 KiB) of what `path` got after its first `from` bytes,
/// for an error message; all of it when the file is shorter than that (it was replaced).
fn log_tail(path: &Path, from: u64) -> String {
    const MAX: usize = 2048;
    let Ok(text) = std::fs::read(path) else {
        return String::new();
    };
    let from = usize::try_from(from)
        .ok()
        .filter(|&f| f <= text.len())
        .unwrap_or(0);
    let text = &text[from..];
    let cut = text.len().saturating_sub(MAX);
    let mut tail = &text[cut..];
    if cut > 0 && text[cut - 1] != b'\n' {
        // Cut mid-line (perhaps mid-character): start at the next whole line, if the window
        // holds one (otherwise the cut line is all there is to show).
        if let Some(next) = tail.iter().position(|&b| b == b'\n') {
            if next + 1 < tail.len() {
                tail = &tail[next + 1..];
            }
        }
    }
    let tail = String::from_utf8_lossy(tail);
    let lines: Vec<&str> = tail.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Whether a host that is not stopping answers a status request at the socket. A stopping
/// host still answers `host.status` (saying `stopping`), but refuses everything else and is
/// about to remove its socket: it is waited for like any other holder of the installation.
fn probe(paths: &PiwPaths) -> bool {
    let Ok(mut c) = BlockingClient::connect(paths) else {
        return false;
    };
    if c.set_timeout(Some(Duration::from_secs(2))).is_err() {
        return false;
    }
    c.call(RequestBody::HostStatus)
        .is_ok_and(|status| status.body.get("stopping") != Some(&serde_json::Value::Bool(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_another_user_is_refused_before_anything_is_sent() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let own = crate::paths::current_uid();
        // The real credentials of a socket of this process are this user's.
        assert_eq!(peer_uid(&a).unwrap(), own);
        let path = Path::new("/tmp/piw-1000/x.sock");
        assert!(check_host_peer(path, Ok(own)).is_ok());
        let e = check_host_peer(path, Ok(own + 1)).unwrap_err();
        assert!(
            matches!(&e, ClientError::ForeignHost { uid, .. } if *uid == own + 1),
            "{e}"
        );
        assert_eq!(e.code_str(), "foreign_host");
        assert!(e.to_string().contains("nothing was sent"), "{e}");
        let e = check_host_peer(path, Err(std::io::Error::other("no creds"))).unwrap_err();
        assert!(matches!(e, ClientError::Io(_)), "{e}");
    }

    /// A stand-in host at `paths` that answers every `host.status` with `stopping`.
    fn fake_host(paths: &PiwPaths, stopping: bool) -> std::thread::JoinHandle<()> {
        paths.ensure_dirs().unwrap();
        let listener = std::os::unix::net::UnixListener::bind(&paths.socket).unwrap();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let limits = Limits::default();
            while let Ok(Some(body)) = crate::protocol::read_frame(&mut stream, &limits) {
                let request = Request::decode(&body, &limits).unwrap();
                let reply = ServerFrame::receipt(
                    request.request_id,
                    Receipt::new(None, serde_json::json!({ "stopping": stopping })),
                );
                crate::protocol::write_frame(&mut stream, &reply, &limits).unwrap();
            }
        })
    }

    #[test]
    fn a_host_that_is_stopping_is_not_taken_for_a_ready_one() {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().join("running"));
        let host = fake_host(&paths, false);
        assert!(probe(&paths), "a running host answers");
        host.join().unwrap();
        // A host that has begun to stop still answers host.status (with `stopping: true`), but
        // it serves nothing else and its socket is about to go: `ensure_host` must wait for the
        // next host instead of returning to a caller whose next connect fails.
        let paths = PiwPaths::for_home(dir.path().join("stopping"));
        let host = fake_host(&paths, true);
        assert!(!probe(&paths), "a stopping host is not ready");
        host.join().unwrap();
    }

    #[test]
    fn log_tail_shows_whole_lines_written_after_from() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("host.log");
        std::fs::write(&log, "an earlier host\n").unwrap();
        let from = log_len(&log);
        // Many lines, the first cut by the 2 KiB window (with a multibyte character at it).
        let mut ours = String::new();
        for i in 0..40 {
            ours.push_str(&format!(
                "line {i:02} ééééééééééééééééééééééééééééééééééééééé\n"
            ));
        }
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut f, ours.as_bytes()).unwrap();
        let tail = log_tail(&log, from);
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), 10, "{tail}");
        assert!(lines[0].starts_with("line 30 "), "{tail}");
        assert!(lines[9].starts_with("line 39 "), "{tail}");
        assert!(!tail.contains('\u{fffd}'), "no cut character: {tail}");
        // Only what came after `from`; everything when the file is shorter (replaced).
        std::fs::write(&log, "a new file\n").unwrap();
        assert_eq!(log_tail(&log, from), "a new file");
        assert_eq!(log_tail(&dir.path().join("missing"), 0), "");
    }

    #[test]
    fn a_log_tail_cut_mid_line_starts_at_the_next_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("host.log");
        // One long line longer than the window, then two short ones.
        let text = format!("{}\nsecond\nthird\n", "é".repeat(1500));
        std::fs::write(&log, &text).unwrap();
        assert_eq!(log_tail(&log, 0), "second\nthird");
        // A window inside one long line: the cut line is all there is.
        std::fs::write(&log, format!("{}\n", "x".repeat(5000))).unwrap();
        assert_eq!(log_tail(&log, 0), "x".repeat(2047));
    }
}
