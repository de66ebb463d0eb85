//! The client library shared by the CLI, the Node addon and the C ABI: connect to the host
//! (starting it on demand), send typed requests, receive receipts, typed rejections and
//! subscription events. An async face ([`Client`]) and a blocking face ([`BlockingClient`]).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

mod pipelined;

pub use pipelined::{PipelinedClient, Subscription, SUBSCRIPTION_BUFFER};

use crate::paths::PiwPaths;
use crate::protocol::{
    encode_frame, read_frame, write_frame, Event, FrameDecoder, Limits, Receipt, Rejection,
    RejectionCode, Request, RequestBody, Response, ServerFrame,
};

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
    /// The host refused the request; nothing was committed.
    #[error("{}: {}", .0.code, .0.message)]
    Rejected(Rejection),
    /// The host closed the connection, saying why.
    #[error("the host closed the connection ({code}): {message}")]
    Closed {
        code: RejectionCode,
        message: String,
    },
    /// The connection ended without a reply (for example the host died).
    #[error("the connection to the host ended without a reply")]
    Disconnected,
    #[error("i/o error talking to the host: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// `ensure_host` could not bring a host up in time.
    #[error("the piw host did not become ready within {waited:?}: {detail}")]
    HostNotReady { waited: Duration, detail: String },
    /// The caller closed this client while the call was in flight (or before it was made).
    #[error("the client was closed")]
    ClientClosed,
    /// A subscription's reader fell more than [`SUBSCRIPTION_BUFFER`] events behind; the
    /// subscription ended so that no event is skipped silently. Re-read the run's status.
    #[error("the subscription fell too far behind and was ended")]
    SubscriptionOverflow,
}

impl ClientError {
    /// The protocol's rejection code, when the host sent one.
    pub fn code(&self) -> Option<RejectionCode> {
        match self {
            ClientError::Rejected(r) => Some(r.code),
            ClientError::Closed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A stable code for every failure: the host's rejection code when there is one, else a
    /// client-side code (`connect_failed`, `disconnected`, `io`, `protocol`, `host_not_ready`,
    /// `client_closed`, `subscription_overflow`). Bindings expose it as the error's `code`.
    pub fn code_str(&self) -> &'static str {
        match self {
            ClientError::Rejected(r) => r.code.as_str(),
            ClientError::Closed { code, .. } => code.as_str(),
            ClientError::Connect { .. } => "connect_failed",
            ClientError::Disconnected => "disconnected",
            ClientError::Io(_) => "io",
            ClientError::Protocol(_) => "protocol",
            ClientError::HostNotReady { .. } => "host_not_ready",
            ClientError::ClientClosed => "client_closed",
            ClientError::SubscriptionOverflow => "subscription_overflow",
        }
    }
}

/// Connects to the host's socket (async faces).
async fn connect_socket(paths: &PiwPaths) -> Result<UnixStream, ClientError> {
    UnixStream::connect(&paths.socket)
        .await
        .map_err(|source| ClientError::Connect {
            path: paths.socket.clone(),
            source,
        })
}

fn new_request_id() -> String {
    crate::ids::new_id("req")
}

fn response_to_result(response: Response) -> Result<Receipt, ClientError> {
    match response.result {
        Ok(receipt) => Ok(receipt),
        Err(rejection) => Err(ClientError::Rejected(rejection)),
    }
}

/// What one server frame means while waiting for the reply to `request_id`: the reply, an
/// error, or an event to queue (`None`).
fn reply_step(
    frame: ServerFrame,
    request_id: &str,
    events: &mut VecDeque<Event>,
) -> Option<Result<Receipt, ClientError>> {
    match frame {
        ServerFrame::Response(r) if r.request_id == request_id => Some(response_to_result(r)),
        ServerFrame::Response(r) => Some(Err(ClientError::Protocol(format!(
            "reply for unknown request {}",
            r.request_id
        )))),
        ServerFrame::Event(e) => {
            events.push_back(e);
            None
        }
        ServerFrame::Goodbye(g) => Some(Err(goodbye(g))),
    }
}

/// What one server frame means while waiting for an event.
fn event_step(frame: ServerFrame) -> Result<Event, ClientError> {
    match frame {
        ServerFrame::Event(e) => Ok(e),
        ServerFrame::Goodbye(g) => Err(goodbye(g)),
        ServerFrame::Response(r) => Err(ClientError::Protocol(format!(
            "unexpected reply {}",
            r.request_id
        ))),
    }
}

fn goodbye(g: crate::protocol::Goodbye) -> ClientError {
    ClientError::Closed {
        code: g.code,
        message: g.message,
    }
}

/// The async client: one connection, one request at a time, events queued between replies.
pub struct Client {
    stream: UnixStream,
    decoder: FrameDecoder,
    limits: Limits,
    events: VecDeque<Event>,
}

impl Client {
    /// Connects to the host of `paths`.
    pub async fn connect(paths: &PiwPaths) -> Result<Self, ClientError> {
        let stream = connect_socket(paths).await?;
        let limits = Limits::default();
        Ok(Self {
            stream,
            decoder: FrameDecoder::new(limits),
            limits,
            events: VecDeque::new(),
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
    pub async fn send(&mut self, request: Request) -> Result<Receipt, ClientError> {
        let bytes = encode_frame(&request, &self.limits)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if let Err(e) = self.stream.write_all(&bytes).await {
            // The host may have refused the connection before reading: report its goodbye.
            if let Ok(ServerFrame::Goodbye(g)) = self.next_frame().await {
                return Err(goodbye(g));
            }
            return Err(e.into());
        }
        loop {
            let frame = self.next_frame().await?;
            if let Some(result) = reply_step(frame, &request.request_id, &mut self.events) {
                return result;
            }
        }
    }

    /// The next subscription event (waits for one).
    pub async fn next_event(&mut self) -> Result<Event, ClientError> {
        if let Some(e) = self.events.pop_front() {
            return Ok(e);
        }
        event_step(self.next_frame().await?)
    }

    async fn next_frame(&mut self) -> Result<ServerFrame, ClientError> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(body) = self
                .decoder
                .next_frame()
                .map_err(|e| ClientError::Protocol(e.to_string()))?
            {
                return ServerFrame::decode(&body).map_err(|e| ClientError::Protocol(e.message));
            }
            let n = self.stream.read(&mut buf).await?;
            if n == 0 {
                return Err(ClientError::Disconnected);
            }
            self.decoder
                .push(&buf[..n])
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
        }
    }
}

/// The blocking client, for callers without an async runtime (the CLI, the C ABI).
pub struct BlockingClient {
    stream: std::os::unix::net::UnixStream,
    limits: Limits,
    events: VecDeque<Event>,
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
        Ok(Self {
            stream,
            limits: Limits::default(),
            events: VecDeque::new(),
        })
    }

    /// Connects, starting a host first when none answers.
    pub fn connect_or_start(paths: &PiwPaths, host_bin: &Path) -> Result<Self, ClientError> {
        ensure_host(paths, host_bin, DEFAULT_READY_TIMEOUT)?;
        Self::connect(paths)
    }

    /// Bounds how long a call waits for the host.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.stream.set_read_timeout(timeout)?;
        self.stream.set_write_timeout(timeout)?;
        Ok(())
    }

    /// Sends `body` with a fresh request id and waits for its receipt.
    pub fn call(&mut self, body: RequestBody) -> Result<Receipt, ClientError> {
        self.send(Request::new(new_request_id(), body))
    }

    /// Sends a fully built request and waits for its receipt.
    pub fn send(&mut self, request: Request) -> Result<Receipt, ClientError> {
        if let Err(e) = write_frame(&mut self.stream, &request, &self.limits) {
            // The host may have refused the connection before reading: report its goodbye.
            if let Ok(ServerFrame::Goodbye(g)) = self.next_frame() {
                return Err(goodbye(g));
            }
            return Err(ClientError::Protocol(e.to_string()));
        }
        loop {
            let frame = self.next_frame()?;
            if let Some(result) = reply_step(frame, &request.request_id, &mut self.events) {
                return result;
            }
        }
    }

    /// The next subscription event (blocks until one arrives or the timeout passes).
    pub fn next_event(&mut self) -> Result<Event, ClientError> {
        if let Some(e) = self.events.pop_front() {
            return Ok(e);
        }
        event_step(self.next_frame()?)
    }

    fn next_frame(&mut self) -> Result<ServerFrame, ClientError> {
        match read_frame(&mut self.stream, &self.limits) {
            Ok(Some(body)) => {
                ServerFrame::decode(&body).map_err(|e| ClientError::Protocol(e.message))
            }
            Ok(None) => Err(ClientError::Disconnected),
            Err(e) => Err(ClientError::Protocol(e.to_string())),
        }
    }
}

/// Makes sure a host serves `paths`: returns at once when one answers; otherwise starts
/// `host_bin host serve` as a detached process (own session, output to `host.log`) and waits
/// until the socket answers or `timeout` passes. Racing callers are safe: the installation
/// lock lets exactly one host run; the losers exit and everyone connects to the winner.
///
/// A host started while another process still holds the installation (a host that is
/// stopping, a `piw state reset`) exits at once; it is started again, with a back-off, until
/// the holder is gone or `timeout` passes. A host that exits while nobody else holds the
/// installation (a refused database, say) fails the call at once, with the end of its log.
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
    let mut child = start_host(paths, host_bin, env)?;
    let mut delay = Duration::from_millis(2);
    let mut restart_delay = Duration::from_millis(50);
    loop {
        if probe(paths) {
            // The host (or a loser that exits because another host won the race) is our
            // child: reap it whenever it exits, so a long-lived caller such as Pi keeps no
            // zombie behind after `piw host stop`.
            let _ = std::thread::Builder::new()
                .name("piw-host-reaper".into())
                .spawn(move || child.wait());
            return Ok(());
        }
        if started.elapsed() >= timeout {
            let _ = child.try_wait();
            return Err(ClientError::HostNotReady {
                waited: started.elapsed(),
                detail: format!("see {}", paths.log.display()),
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            // The host we started is gone and nobody answers yet.
            match installation_holder(paths) {
                Some(pid) if pid != child.id() && crate::supervise::process_alive(pid) => {
                    // Another process holds the installation: a host that is still stopping
                    // (or starting: it will answer), or a reset. Try again once it may be gone.
                    std::thread::sleep(restart_delay);
                    restart_delay = (restart_delay * 2).min(Duration::from_millis(500));
                    if !probe(paths) {
                        child = start_host(paths, host_bin, env)?;
                    }
                    continue;
                }
                _ => {
                    // A last look: a host that won a race may have just come up.
                    if probe(paths) {
                        return Ok(());
                    }
                    return Err(ClientError::HostNotReady {
                        waited: started.elapsed(),
                        detail: format!(
                            "the host exited ({status}) without serving; the end of {}:\n{}",
                            paths.log.display(),
                            log_tail(&paths.log)
                        ),
                    });
                }
            }
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// Starts `host_bin host serve` detached: its own session (it outlives the caller's terminal
/// and process group), its output appended to `host.log`.
fn start_host(
    paths: &PiwPaths,
    host_bin: &Path,
    env: &[(String, String)],
) -> Result<std::process::Child, ClientError> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&paths.log)?;
    let mut cmd = Command::new(host_bin);
    cmd.args(["host", "serve"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PIW_HOME", &paths.home)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
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
    cmd.spawn().map_err(|e| ClientError::HostNotReady {
        waited: Duration::ZERO,
        detail: format!("cannot start {}: {e}", host_bin.display()),
    })
}

/// The pid the installation lock file names: the process that holds the installation, or
/// held it last (the file keeps the pid of a holder that has exited).
fn installation_holder(paths: &PiwPaths) -> Option<u32> {
    std::fs::read_to_string(&paths.lock)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The last lines of the host's log (at most about 2 KiB), for an error message.
fn log_tail(path: &Path) -> String {
    const MAX: usize = 2048;
    let Ok(text) = std::fs::read(path) else {
        return String::new();
    };
    let tail = &text[text.len().saturating_sub(MAX)..];
    let tail = String::from_utf8_lossy(tail);
    let lines: Vec<&str> = tail.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Whether a host answers a status request at the socket.
fn probe(paths: &PiwPaths) -> bool {
    let Ok(mut c) = BlockingClient::connect(paths) else {
        return false;
    };
    if c.set_timeout(Some(Duration::from_secs(2))).is_err() {
        return false;
    }
    c.call(RequestBody::HostStatus).is_ok()
}
