//! Status codes, rejection codes and where a failure's details are kept: in a thread-local
//! (every failure) and in the handle the call was made on (failures of handle calls).

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::sync::Mutex;

use piw_client::client::ClientError;
use piw_client::protocol::{Rejection, RejectionCode};
use piw_client::worker::WorkerError;

/// What every piw function returns. `PIW_STATUS_OK` (0) is success; every other value is a
/// failure whose message, stable code string and rejection code are readable with
/// `piw_last_error_message`, `piw_last_error_code` and `piw_last_rejection_code` on the same
/// thread (and, for a call on a handle, from the handle).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PiwStatus {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// A string argument is not valid UTF-8.
    InvalidUtf8 = 2,
    /// A string argument is longer than its limit (`piw_last_rejection_code` says
    /// `PIW_REJECTION_CODE_PAYLOAD_TOO_LARGE`).
    TooLarge = 3,
    /// The handle was closed (or never was a handle of this type).
    Closed = 4,
    /// An argument is well formed but not acceptable: JSON that does not parse or has the wrong
    /// shape, an unknown kind or enum word.
    InvalidArgument = 5,
    /// The host refused the request, or the library refused to send one the host would refuse:
    /// `piw_last_rejection_code` gives the protocol's rejection code. Nothing was committed.
    Rejected = 6,
    /// The timeout passed. A call that timed out may still be applied by the host: send it
    /// again with the same `request_id` (the host replays its receipt).
    Timeout = 7,
    /// The connection ended (the host stopped, closed it with a goodbye, or it broke).
    /// Reconnect. A goodbye's code is `piw_last_rejection_code`.
    Disconnected = 8,
    /// No host answers at the socket (or the listener belongs to another user).
    ConnectFailed = 9,
    /// The host could not be started on demand, or did not become ready in time.
    HostNotReady = 10,
    /// An I/O error (reading stdin, a file, the socket).
    Io = 11,
    /// The host's reply could not be understood.
    Protocol = 12,
    /// Worker: a source differs from the one the run was started with. Fail the run for
    /// review (`piw_worker_fail` with `review`) or exit.
    SourceChanged = 13,
    /// Worker: the run moved on without this child (new generation, lost claim, host stopping,
    /// or the run parked). Stop quietly: write nothing, report nothing, exit 0.
    Stale = 14,
    /// Worker: the host refused a proposal that disagrees with the run's graph and failed the
    /// run. Exit.
    Refused = 15,
    /// A subscription has ended (closed by the caller or its client): no more events. Not a
    /// failure of the call; nothing is recorded as the last error.
    End = 16,
    /// The subscription fell too far behind and events were dropped: reread the run's status.
    Overflow = 17,
    /// A function was called out of order (a worker call before `piw_worker_hello`).
    Misuse = 18,
    /// A bug inside the library was caught before it crossed into the caller (a Rust panic).
    /// The handle involved should be closed.
    Panic = 19,
}

/// The protocol's rejection codes (`docs/WORKFLOW_SERVER.md`). `PIW_REJECTION_CODE_NONE` when a
/// failure carries no code; `PIW_REJECTION_CODE_UNKNOWN` for a code this library does not know
/// (a newer host): the failure's message still arrives. Values never change meaning.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PiwRejectionCode {
    /// The failure carries no rejection code.
    None = 0,
    Malformed = 1,
    UnsupportedProtocol = 2,
    PayloadTooLarge = 3,
    Unauthorized = 4,
    NotFound = 5,
    InvalidTransition = 6,
    StaleRevision = 7,
    StaleGeneration = 8,
    StaleAttempt = 9,
    ClaimLost = 10,
    IdempotencyConflict = 11,
    EffectConflict = 12,
    EffectUncertain = 13,
    HostShuttingDown = 14,
    SubscriberLagged = 15,
    Internal = 16,
    PiUnusable = 17,
    /// A code this library does not know.
    Unknown = 255,
}

impl From<RejectionCode> for PiwRejectionCode {
    fn from(code: RejectionCode) -> Self {
        use PiwRejectionCode as P;
        match code {
            RejectionCode::Malformed => P::Malformed,
            RejectionCode::UnsupportedProtocol => P::UnsupportedProtocol,
            RejectionCode::PayloadTooLarge => P::PayloadTooLarge,
            RejectionCode::Unauthorized => P::Unauthorized,
            RejectionCode::NotFound => P::NotFound,
            RejectionCode::InvalidTransition => P::InvalidTransition,
            RejectionCode::StaleRevision => P::StaleRevision,
            RejectionCode::StaleGeneration => P::StaleGeneration,
            RejectionCode::StaleAttempt => P::StaleAttempt,
            RejectionCode::ClaimLost => P::ClaimLost,
            RejectionCode::IdempotencyConflict => P::IdempotencyConflict,
            RejectionCode::EffectConflict => P::EffectConflict,
            RejectionCode::EffectUncertain => P::EffectUncertain,
            RejectionCode::HostShuttingDown => P::HostShuttingDown,
            RejectionCode::SubscriberLagged => P::SubscriberLagged,
            RejectionCode::PiUnusable => P::PiUnusable,
            RejectionCode::Internal => P::Internal,
            RejectionCode::Unknown => P::Unknown,
        }
    }
}

/// One failure, as the C side sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    pub status: PiwStatus,
    /// A stable code string: the protocol's rejection code when there is one, else a library
    /// code (`null_argument`, `timeout`, `disconnected`, ...).
    pub code: &'static str,
    pub rejection: PiwRejectionCode,
    pub message: String,
    /// A rejection's `details` as JSON text, when it has any.
    pub details: Option<String>,
}

impl Error {
    pub fn new(status: PiwStatus, code: &'static str, message: impl Into<String>) -> Self {
        Error {
            status,
            code,
            rejection: PiwRejectionCode::None,
            message: message.into(),
            details: None,
        }
    }

    pub fn null(what: &str) -> Self {
        Error::new(
            PiwStatus::NullArgument,
            "null_argument",
            format!("{what} is NULL"),
        )
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(PiwStatus::InvalidArgument, "invalid_argument", message)
    }

    pub fn closed(what: &str) -> Self {
        Error::new(
            PiwStatus::Closed,
            "closed",
            format!("the {what} handle is closed (or is not a {what} handle)"),
        )
    }

    pub fn misuse(message: impl Into<String>) -> Self {
        Error::new(PiwStatus::Misuse, "misuse", message)
    }

    fn rejection(status: PiwStatus, r: &Rejection) -> Self {
        Error {
            status,
            code: r.code.as_str(),
            rejection: r.code.into(),
            message: r.message.clone(),
            details: (!r.details.is_null()).then(|| r.details.to_string()),
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        let code = e.code_str();
        let status = match &e {
            ClientError::Rejected(r) => return Error::rejection(PiwStatus::Rejected, r),
            ClientError::InvalidRequest(d) => {
                let mut err = Error::new(PiwStatus::Rejected, code, d.message.clone());
                if d.code == RejectionCode::PayloadTooLarge {
                    err.status = PiwStatus::TooLarge;
                }
                err.rejection = d.code.into();
                return err;
            }
            ClientError::Closed { code: c, message } => {
                let mut err = Error::new(PiwStatus::Disconnected, code, message.clone());
                err.rejection = (*c).into();
                return err;
            }
            ClientError::Connect { .. } | ClientError::ForeignHost { .. } => {
                PiwStatus::ConnectFailed
            }
            ClientError::Disconnected => PiwStatus::Disconnected,
            ClientError::TimedOut => PiwStatus::Timeout,
            ClientError::Io(_) => PiwStatus::Io,
            ClientError::Protocol(_) => PiwStatus::Protocol,
            ClientError::HostNotReady { .. }
            | ClientError::HostExited { .. }
            | ClientError::HostNotStarted { .. }
            | ClientError::HostLog { .. } => PiwStatus::HostNotReady,
            ClientError::ClientClosed => PiwStatus::Closed,
            ClientError::SubscriptionOverflow => PiwStatus::Overflow,
        };
        Error::new(status, code, e.to_string())
    }
}

impl From<WorkerError> for Error {
    fn from(e: WorkerError) -> Self {
        if e.is_stale() {
            let mut err = match e {
                WorkerError::Client(c) => Error::from(c),
                other => Error::new(PiwStatus::Stale, "stale", other.to_string()),
            };
            err.status = PiwStatus::Stale;
            return err;
        }
        match e {
            WorkerError::Client(c) => Error::from(c),
            WorkerError::Envelope(_) => {
                Error::new(PiwStatus::InvalidArgument, "malformed", e.to_string())
            }
            WorkerError::SourceChanged(_) => {
                Error::new(PiwStatus::SourceChanged, "source_changed", e.to_string())
            }
            WorkerError::Reply(_) => Error::new(PiwStatus::Protocol, "protocol", e.to_string()),
            WorkerError::Refused(_) => Error::new(PiwStatus::Refused, "refused", e.to_string()),
            WorkerError::Parked => Error::new(PiwStatus::Stale, "stale", e.to_string()),
            WorkerError::ValueTooLarge { .. } => {
                Error::new(PiwStatus::InvalidArgument, "value_too_large", e.to_string())
            }
            WorkerError::ValueUnreadable(_) => {
                Error::new(PiwStatus::Protocol, "value_unreadable", e.to_string())
            }
        }
    }
}

/// A failure kept as C strings, so accessors can hand out pointers into it.
struct StoredError {
    code: CString,
    rejection: PiwRejectionCode,
    message: CString,
    details: Option<CString>,
}

/// A C string of `text`; an interior NUL (never in our JSON or messages, but possible in text
/// a host sent) is replaced so the text is not cut silently.
pub fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "\u{fffd}")).unwrap_or_default()
}

impl StoredError {
    fn new(e: &Error) -> Self {
        StoredError {
            code: c_string(e.code),
            rejection: e.rejection,
            message: c_string(&e.message),
            details: e.details.as_deref().map(c_string),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<StoredError>> = const { RefCell::new(None) };
}

/// Records `e` as this thread's last failure.
pub fn set_last_error(e: &Error) {
    let stored = StoredError::new(e);
    // A thread being torn down has no thread-local left: then there is nobody to read it.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = Some(stored));
}

fn with_last<R>(f: impl FnOnce(&StoredError) -> R) -> Option<R> {
    LAST_ERROR
        .try_with(|last| last.borrow().as_ref().map(f))
        .ok()
        .flatten()
}

pub fn last_message() -> *const c_char {
    with_last(|e| e.message.as_ptr()).unwrap_or(std::ptr::null())
}

pub fn last_code() -> *const c_char {
    with_last(|e| e.code.as_ptr()).unwrap_or(std::ptr::null())
}

pub fn last_details() -> *const c_char {
    with_last(|e| e.details.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()))
        .unwrap_or(std::ptr::null())
}

pub fn last_rejection() -> PiwRejectionCode {
    with_last(|e| e.rejection).unwrap_or(PiwRejectionCode::None)
}

/// The last failure of calls on one handle (any thread).
#[derive(Default)]
pub struct ErrorSlot(Mutex<Option<Error>>);

impl ErrorSlot {
    pub fn set(&self, e: &Error) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
    }

    pub fn get(&self) -> Option<Error> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Runs `f`, turning a panic into a `PIW_STATUS_PANIC` error.
pub fn catch<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(Error::new(
            PiwStatus::Panic,
            "panic",
            format!("internal error in libpiw (caught, not propagated): {what}"),
        ))
    })
}

/// Runs one entry point: a panic becomes `PIW_STATUS_PANIC`, an error is recorded as the
/// thread's last failure, and the status is returned. Every `extern "C"` function that can
/// fail goes through here.
pub fn ffi_call(f: impl FnOnce() -> Result<(), Error>) -> PiwStatus {
    let error = match catch(f) {
        Ok(()) => return PiwStatus::Ok,
        Err(e) if e.status == PiwStatus::End => return PiwStatus::End,
        Err(e) => e,
    };
    tracing::debug!(code = error.code, "piw call failed");
    set_last_error(&error);
    error.status
}

/// [`ffi_call`] for functions that return a value instead of a status: a panic gives
/// `fallback`.
pub fn ffi_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}
