//! libpiw: the C ABI of piw (`include/piw.h`, generated from this crate by cbindgen).
//!
//! A thin layer over the core's client library (`PipelinedClient`) and worker library
//! (`piw_client::worker`), mirroring the Node addon's surface; it speaks no protocol of its own.
//! The rules every entry point keeps:
//!
//! - **Handles** are opaque numbers looked up in a table ([`handles`]): use after close gives
//!   `PIW_STATUS_CLOSED`, never a dangling pointer.
//! - **Status codes**: every function that can fail returns [`PiwStatus`]; the failure's message,
//!   stable code string, rejection code ([`PiwRejectionCode`], with `UNKNOWN` for codes of a
//!   newer host) and details are kept in a thread-local and on the handle.
//! - **Strings** ([`strings`]): NUL-terminated UTF-8 in, bounded; owned NUL-terminated UTF-8 out,
//!   freed with [`piw_string_free`].
//! - **No panic crosses the boundary**: every entry point runs inside [`error::ffi_call`] (or
//!   [`error::ffi_value`]), which catches unwinding.
//! - **Final run states** are the engine's `RunStatus::is_terminal` ([`piw_run_status_is_final`];
//!   the Node client reads the same list).
//! - [`piw_shutdown`] leaves nothing running.
//!
//! `piw_connect` starts a host on demand; one generic `piw_client_call` sends any request,
//! checked by `Request::decode` first; subscriptions (`client.rs`) are filled by a reader task on
//! the one `piw-io` thread into a bounded queue, polled or waited on through a notify socket;
//! the worker is `worker.rs`. `build.rs` gives the SONAME and the in-place `piw.pc`;
//! `scripts/install-libpiw` installs the library; `ffi/python` is the `piw` wheel. Tests:
//! `ffi/tests/abi.rs` (every entry point × NULL, invalid UTF-8, oversized, closed, a panic),
//! `c_consumers.rs` (the C examples under AddressSanitizer and valgrind).

// Every entry point takes raw pointers from C; the rules for them are the same for all and are
// written once, in the header's preamble ("Conventions"), instead of a `# Safety` per function.
#![allow(clippy::missing_safety_doc)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod client;
pub mod error;
pub mod handles;
pub mod strings;
pub mod worker;

use std::ffi::{c_char, c_int};

use client::{ClientObject, CLIENTS, SUBSCRIPTIONS};
use error::{ffi_call, ffi_value, Error};
pub use error::{PiwRejectionCode, PiwStatus};
use handles::HasErrorSlot;
use strings::{
    give, json, max_json_bytes, opt_json, opt_text, opt_value_json, out_ptr, out_string, text,
    value_json, PIW_MAX_TEXT_BYTES,
};
use worker::{WorkerObject, WORKERS};

/// The major version of the library this header belongs to.
pub const PIW_VERSION_MAJOR: u32 = 0;
/// The minor version of the library this header belongs to.
pub const PIW_VERSION_MINOR: u32 = 1;
/// The patch version of the library this header belongs to.
pub const PIW_VERSION_PATCH: u32 = 0;

/// A connection to the piw host. Opaque.
pub struct PiwClient {
    _private: [u8; 0],
}

/// One subscription's stream of events. Opaque.
pub struct PiwSubscription {
    _private: [u8; 0],
}

/// One run's worker session inside a workflow child. Opaque.
pub struct PiwWorker {
    _private: [u8; 0],
}

fn handle<T>(id: usize) -> *mut T {
    std::ptr::without_provenance_mut(id)
}

// ---------------------------------------------------------------------------------------------
// Version, strings, errors
// ---------------------------------------------------------------------------------------------

/// The library's version, `"MAJOR.MINOR.PATCH"`. A static string: do not free it.
/// Compare with `PIW_VERSION_MAJOR`/`MINOR`/`PATCH` to detect a header/library mismatch.
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn piw_version() -> *const c_char {
    c"0.1.0".as_ptr()
}

/// Frees a string the library returned through a `char **` out parameter. NULL is ignored.
/// Passing any other pointer (one not from piw, or one already freed) is undefined behaviour.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_string_free(s: *mut c_char) {
    ffi_value((), || {
        if !s.is_null() {
            // SAFETY: per the contract, `s` came from `CString::into_raw` in this library.
            drop(unsafe { std::ffi::CString::from_raw(s) });
        }
    })
}

/// The message of the last failure on the calling thread (NULL if none). Owned by the library;
/// valid until the next failing piw call on this thread. Every failing call sets it.
/// Thread safety: per thread.
#[no_mangle]
pub extern "C" fn piw_last_error_message() -> *const c_char {
    ffi_value(std::ptr::null(), error::last_message)
}

/// The stable code string of the last failure on the calling thread (NULL if none): the
/// protocol's rejection code (`"not_found"`, `"stale_revision"`, ...) when there is one, else a
/// library code (`"null_argument"`, `"invalid_utf8"`, `"payload_too_large"`, `"closed"`,
/// `"invalid_argument"`, `"timeout"`, `"disconnected"`, `"connect_failed"`, `"host_not_ready"`,
/// `"source_changed"`, `"stale"`, `"refused"`, `"panic"`, ...). Lifetime as
/// `piw_last_error_message`. Thread safety: per thread.
#[no_mangle]
pub extern "C" fn piw_last_error_code() -> *const c_char {
    ffi_value(std::ptr::null(), error::last_code)
}

/// The details of the last failure on the calling thread as JSON text (for example
/// `{"expected":3,"current":4}` of a `stale_revision`), or NULL when it has none. Lifetime as
/// `piw_last_error_message`. Thread safety: per thread.
#[no_mangle]
pub extern "C" fn piw_last_error_details() -> *const c_char {
    ffi_value(std::ptr::null(), error::last_details)
}

/// The rejection code of the last failure on the calling thread (`PIW_REJECTION_CODE_NONE` if
/// it had none). Thread safety: per thread.
#[no_mangle]
pub extern "C" fn piw_last_rejection_code() -> PiwRejectionCode {
    ffi_value(PiwRejectionCode::None, error::last_rejection)
}

/// A short name for a status (`"ok"`, `"rejected"`, ...; `"unknown"` for a value that is no
/// status). Static: do not free. Takes an `int` so that any value a caller holds is safe to
/// pass. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn piw_status_name(status: c_int) -> *const c_char {
    const NAMES: [(PiwStatus, &std::ffi::CStr); 20] = [
        (PiwStatus::Ok, c"ok"),
        (PiwStatus::NullArgument, c"null_argument"),
        (PiwStatus::InvalidUtf8, c"invalid_utf8"),
        (PiwStatus::TooLarge, c"too_large"),
        (PiwStatus::Closed, c"closed"),
        (PiwStatus::InvalidArgument, c"invalid_argument"),
        (PiwStatus::Rejected, c"rejected"),
        (PiwStatus::Timeout, c"timeout"),
        (PiwStatus::Disconnected, c"disconnected"),
        (PiwStatus::ConnectFailed, c"connect_failed"),
        (PiwStatus::HostNotReady, c"host_not_ready"),
        (PiwStatus::Io, c"io"),
        (PiwStatus::Protocol, c"protocol"),
        (PiwStatus::SourceChanged, c"source_changed"),
        (PiwStatus::Stale, c"stale"),
        (PiwStatus::Refused, c"refused"),
        (PiwStatus::End, c"end"),
        (PiwStatus::Overflow, c"overflow"),
        (PiwStatus::Misuse, c"misuse"),
        (PiwStatus::Panic, c"panic"),
    ];
    NAMES
        .iter()
        .find(|(s, _)| *s as c_int == status)
        .map_or(c"unknown", |(_, name)| name)
        .as_ptr()
}

/// Looks up `pointer` (RFC 6901, e.g. `"/body/run_id"`; `""` is the whole document) in the JSON
/// text `json_text` and returns the value found in `*out`: a JSON string as its contents
/// (unquoted, unescaped), any other value as JSON text. A convenience so small C programs need
/// no JSON parser for the replies they read. `*out` is owned by the caller (`piw_string_free`).
/// Errors: NULL / invalid UTF-8 / oversized arguments; `PIW_STATUS_INVALID_ARGUMENT` when the
/// text is not JSON or nothing is at the pointer. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_json_pointer(
    json_text: *const c_char,
    pointer: *const c_char,
    out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        let out = unsafe { out_string(out, "out") }?;
        let doc = unsafe { json(json_text, "json_text") }?;
        let pointer = unsafe { text(pointer, "pointer", PIW_MAX_TEXT_BYTES) }?;
        let found = doc
            .pointer(pointer)
            .ok_or_else(|| Error::invalid(format!("nothing at {pointer:?}")))?;
        match found {
            serde_json::Value::String(s) => give(out, s),
            other => give(out, &other.to_string()),
        }
        Ok(())
    })
}

/// `piw_json_pointer`, but the value found is always JSON text (a string stays quoted and
/// escaped), for building JSON from parts of a reply. Same errors, ownership and threads.
#[no_mangle]
pub unsafe extern "C" fn piw_json_pointer_json(
    json_text: *const c_char,
    pointer: *const c_char,
    out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        let out = unsafe { out_string(out, "out") }?;
        let doc = unsafe { json(json_text, "json_text") }?;
        let pointer = unsafe { text(pointer, "pointer", PIW_MAX_TEXT_BYTES) }?;
        let found = doc
            .pointer(pointer)
            .ok_or_else(|| Error::invalid(format!("nothing at {pointer:?}")))?;
        give(out, &found.to_string());
        Ok(())
    })
}

/// The SHA-256 (lowercase hex) of the file at `path`: the hash the host records for a run's
/// sources. `*out` is owned by the caller. Errors: `PIW_STATUS_IO` when the file cannot be read.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_hash_file(path: *const c_char, out: *mut *mut c_char) -> PiwStatus {
    ffi_call(|| {
        let out = unsafe { out_string(out, "out") }?;
        let path = unsafe { text(path, "path", PIW_MAX_TEXT_BYTES) }?;
        let hash = piw_client::worker::hash_file(std::path::Path::new(path))
            .map_err(|e| Error::new(PiwStatus::Io, "io", format!("{path}: {e}")))?;
        give(out, &hash);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

/// Connects to the host of an installation, starting one on demand, and stores a new client
/// handle in `*out` (close it with `piw_client_close`).
///
/// `options_json` (NULL for all defaults) is a JSON object:
/// - `home`: the installation directory (made absolute against the working directory).
///   Default: `$PIW_HOME`, else `~/.pi/agent/piw`; a relative `PIW_HOME` is refused
///   (`invalid_home`).
/// - `start` (default `true`): when no host answers, start `host_bin host serve` detached and
///   wait until it is ready; racing callers end with exactly one host.
/// - `host_bin`: the `piw` binary to start. Default: `$PIW_HOST_BIN`, else the `piw` beside
///   this library (a cargo build directory), else `../bin/piw` from it (an installed prefix),
///   else `piw` on `PATH`.
/// - `host_env`: `{ "NAME": "value" }` added to a started host's environment (e.g.
///   `PIW_RUNTIMES`). A host that already runs is used as it is.
/// - `ready_timeout_ms` (default 10000): how long to wait for a started host.
///
/// The library starts one background thread (`piw-io`) at the first connect; it reads and
/// writes every client's socket and lives as long as the process. Do not `fork` a process that
/// holds clients and use them in the child.
///
/// Errors: `PIW_STATUS_INVALID_ARGUMENT` (bad options), `PIW_STATUS_HOST_NOT_READY` (the host
/// could not be started in time; the message has its log's last lines),
/// `PIW_STATUS_CONNECT_FAILED`. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_connect(
    options_json: *const c_char,
    out: *mut *mut PiwClient,
) -> PiwStatus {
    ffi_call(|| {
        let out = unsafe { out_ptr(out, "out") }?;
        let options = unsafe { opt_json(options_json, "options_json") }?;
        let client = client::connect(&options)?;
        *out = handle(CLIENTS.insert(client));
        Ok(())
    })
}

/// Sends one request and waits for its receipt.
///
/// In: `kind` is a request kind of the protocol (`"run.start"`, `"run.status"`, `"run.list"`,
/// `"run.pause"`, `"run.resume"`, `"run.detach"`, `"run.cancel"`, `"checkpoint.answer"`, `"decision.answer"`,
/// `"interaction.list"`, `"interaction.submit"`, `"message.claim"`, `"message.ack"`,
/// `"host.status"`, ...; docs/WORKFLOW_SERVER.md lists them and their payloads).
/// `envelope_json` (NULL for none) is a JSON object of the envelope fields, with their wire
/// names: `request_id` (a fresh one when absent; reuse it to resend a command safely),
/// `run_id`, `node_id`, `attempt_id`, `expected_revision`, `idempotency_key`.
/// `payload_json` (NULL for `null`) is the kind's payload. The request is checked with the
/// host's own decoder before it is sent: one the host would refuse fails here with the code the
/// host would give (`PIW_STATUS_REJECTED`, `PIW_STATUS_TOO_LARGE`) and the connection is
/// unaffected.
///
/// Out: `*receipt_out` is the receipt as JSON, `{"revision": n|null, "replayed": bool, "body":
/// {...}}` (`body` is the kind's reply: `run.start` gives `{"run_id": ...}`). Owned by the
/// caller.
///
/// Lists page: `run.list` gives a page of runs with `more` and `next_cursor`; send the same
/// payload with `"cursor"` set to that `next_cursor` for the next page, until `more` is false
/// (every run then came exactly once, whatever started or ended meanwhile).
///
/// `timeout_ms`: how long to wait for the receipt; negative waits without bound. On
/// `PIW_STATUS_TIMEOUT` the host may still apply the command: send it again with the same
/// `request_id` to learn its outcome (the host replays the receipt, `replayed: true`).
///
/// Errors: `PIW_STATUS_REJECTED` with `piw_last_rejection_code()` / `piw_last_error_message()`
/// / `piw_last_error_details()`: this attempt committed nothing (after `host_shutting_down` it
/// may have: send it again with the same `request_id` once the host runs, which replays a
/// committed command's receipt). `PIW_STATUS_DISCONNECTED`: the
/// connection ended; reconnect. `PIW_STATUS_CLOSED`: the client was closed.
/// Thread safety: any thread; calls on one client from several threads run concurrently on its
/// one connection (replies are matched by request id).
#[no_mangle]
pub unsafe extern "C" fn piw_client_call(
    client: *const PiwClient,
    kind: *const c_char,
    envelope_json: *const c_char,
    payload_json: *const c_char,
    timeout_ms: i64,
    receipt_out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        CLIENTS.with(client, |c: &ClientObject| {
            let out = unsafe { out_string(receipt_out, "receipt_out") }?;
            let kind = unsafe { text(kind, "kind", PIW_MAX_TEXT_BYTES) }?;
            let envelope = unsafe { opt_json(envelope_json, "envelope_json") }?;
            let payload = unsafe { opt_json(payload_json, "payload_json") }?;
            let receipt = c.call(kind, &envelope, payload, client::timeout_of(timeout_ms))?;
            give(out, &receipt.to_string());
            Ok(())
        })
    })
}

/// Flag of `piw_wait_run`: return also when the run is parked, not only when it is final:
/// it waits on a request (a pending checkpoint, decision or interaction: `run.status` lists it),
/// waits paused, or is in review. A run asleep on a durable timer (`waiting` with `wake_at`
/// set: a `wait` node) is not parked: it goes on by itself, so the wait goes on too.
pub const PIW_WAIT_UNTIL_PARKED: u32 = 1;

/// Whether `status` (a run's `status`, as in `run.status` and every event) is final: 1 for
/// `completed`, `failed`, `cancelled` and `timed_out`, 0 for any other status, NULL or text
/// this library does not know. The one list of final states; use it rather than a copy.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_run_status_is_final(status: *const c_char) -> c_int {
    ffi_value(0, || {
        // SAFETY: NULL or a NUL-terminated string, per the conventions; read bounded.
        let Ok(status) = (unsafe { text(status, "status", PIW_MAX_TEXT_BYTES) }) else {
            return 0;
        };
        c_int::from(
            piw_client::engine::store::RunStatus::parse(status).is_some_and(|s| s.is_terminal()),
        )
    })
}

/// Waits until run `run_id` is final (`piw_run_status_is_final`), or, with
/// `PIW_WAIT_UNTIL_PARKED` in `flags`, also until it is parked (it waits on a pending request,
/// waits paused or is in review; not while it sleeps on a durable timer), and stores its
/// record in `*run_out` (the `run` object of `run.status`: `status`, `result`, `error`,
/// `revision`, ...; owned by the caller). Already there: returns at once.
///
/// `timeout_ms`: negative waits without bound; `PIW_STATUS_TIMEOUT` when it passed (the run
/// goes on). Errors: `PIW_STATUS_REJECTED` (`not_found`: no such run), as `piw_client_call`
/// otherwise. Thread safety: any thread; it uses a subscription of its own.
#[no_mangle]
pub unsafe extern "C" fn piw_wait_run(
    client: *const PiwClient,
    run_id: *const c_char,
    flags: u32,
    timeout_ms: i64,
    run_out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        CLIENTS.with(client, |c| {
            let out = unsafe { out_string(run_out, "run_out") }?;
            let run_id = unsafe { text(run_id, "run_id", PIW_MAX_TEXT_BYTES) }?;
            if flags & !PIW_WAIT_UNTIL_PARKED != 0 {
                return Err(Error::invalid(format!("unknown flags {flags:#x}")));
            }
            let until_parked = flags & PIW_WAIT_UNTIL_PARKED != 0;
            let run = c.wait_run(run_id, until_parked, client::timeout_of(timeout_ms))?;
            give(out, &run.to_string());
            Ok(())
        })
    })
}

/// A stored place of run `run_id` as the workflow gave it, in `*value_out` (JSON, owned by the
/// caller). `stored_json` is what a reply holds in a place that may hold a value stored apart:
/// an attempt's `output`, a run's `result`, an effect's `receipt`, a request, a message's
/// `content`. A reference (`{"$piw": "value", "sha256", "bytes", "preview"}`: a value over
/// 64 KiB) is read back a frame at a time with `value.get` and checked against its hash; a
/// wrapped literal (`{"$piw": "literal", "value": v}`) gives `v`; anything else is itself.
///
/// `timeout_ms` bounds each `value.get`, as in `piw_client_call`. Errors: `PIW_STATUS_REJECTED`
/// (`not_found`: the run does not hold the value), `PIW_STATUS_PROTOCOL` (a malformed `$piw`
/// object, or bytes that do not match the hash), as `piw_client_call` otherwise.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_client_resolve_value(
    client: *const PiwClient,
    run_id: *const c_char,
    stored_json: *const c_char,
    timeout_ms: i64,
    value_out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        CLIENTS.with(client, |c| {
            let out = unsafe { out_string(value_out, "value_out") }?;
            let run_id = unsafe { text(run_id, "run_id", PIW_MAX_TEXT_BYTES) }?;
            let stored = unsafe { opt_json(stored_json, "stored_json") }?;
            let value = c.resolve_value(run_id, stored, client::timeout_of(timeout_ms))?;
            give(out, &value.to_string());
            Ok(())
        })
    })
}

/// Closes every client and subscription handle still open (as `piw_client_close` and
/// `piw_subscription_close` would; their handles then fail with `PIW_STATUS_CLOSED`) and stops
/// the library's `piw-io` thread, so a program can end with nothing of the library left
/// running (valgrind then reports nothing still reachable from it). Worker handles are not
/// touched. The library stays usable: the next `piw_connect` starts the thread again.
/// Call it from a thread of your own, with no other call of the library in flight.
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn piw_shutdown() -> PiwStatus {
    ffi_call(|| {
        client::shutdown(std::time::Duration::from_secs(5));
        Ok(())
    })
}

/// The socket path the client is connected to, in `*out` (owned by the caller).
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_client_socket(
    client: *const PiwClient,
    out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        CLIENTS.with(client, |c| {
            let out = unsafe { out_string(out, "out") }?;
            give(out, c.socket());
            Ok(())
        })
    })
}

/// Closes the connection and the handle: calls in flight on other threads fail with
/// `PIW_STATUS_CLOSED`, the client's subscriptions end (their handles still need
/// `piw_subscription_close`), and any later call with this handle fails with
/// `PIW_STATUS_CLOSED`. Requests the host already received are still committed.
/// Errors: `PIW_STATUS_CLOSED` when already closed. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_client_close(client: *mut PiwClient) -> PiwStatus {
    ffi_call(|| {
        CLIENTS.remove(client)?.close();
        Ok(())
    })
}

/// An owned copy of the message of the last failed call on this client (from any thread), or
/// NULL when none failed or the handle is closed. Free it with `piw_string_free`.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_client_error_message(client: *const PiwClient) -> *mut c_char {
    ffi_value(std::ptr::null_mut(), || {
        CLIENTS.get(client).map_or(std::ptr::null_mut(), |c| {
            client::error_message_of(c.error_slot())
        })
    })
}

/// The rejection code of the last failed call on this client (`PIW_REJECTION_CODE_NONE` when
/// none, or when it had none, or the handle is closed). Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_client_error_rejection(client: *const PiwClient) -> PiwRejectionCode {
    ffi_value(PiwRejectionCode::None, || {
        CLIENTS
            .get(client)
            .ok()
            .and_then(|c| c.error_slot().get())
            .map_or(PiwRejectionCode::None, |e| e.rejection)
    })
}

// ---------------------------------------------------------------------------------------------
// Subscriptions
// ---------------------------------------------------------------------------------------------

/// Subscribes to the events of a run (`{"run_id": "..."}`) or of a Pi session
/// (`{"session_id": "..."}`) and stores a new subscription handle in `*out` (close it with
/// `piw_subscription_close`).
///
/// Events arrive in the order the host committed them. The library's `piw-io` thread receives
/// them and queues them (up to 4096; a caller that falls further behind gets
/// `PIW_STATUS_OVERFLOW` once the client's own buffer of as many is full too: reread the run's
/// status);
/// the caller takes them with `piw_subscription_next` (a blocking poll with a timeout) and may
/// wait on `piw_subscription_fd` in its own event loop. No callback ever runs on a library
/// thread. Errors: as `piw_client_call`. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_subscribe(
    client: *const PiwClient,
    filter_json: *const c_char,
    out: *mut *mut PiwSubscription,
) -> PiwStatus {
    ffi_call(|| {
        CLIENTS.with(client, |c| {
            let out = unsafe { out_ptr(out, "out") }?;
            let filter = unsafe { json(filter_json, "filter_json") }?;
            let sub = c.subscribe(&filter)?;
            *out = handle(SUBSCRIPTIONS.insert(sub));
            Ok(())
        })
    })
}

/// Takes the next event: `PIW_STATUS_OK` with `*event_out` set to the event's JSON
/// (`{"schema", "subscription_id", "run_id", "seq", "event_kind", "status", "revision", "at_ms",
/// "data"}`: see
/// docs/WORKFLOW_SERVER.md; owned by the caller). Waits up to `timeout_ms` for one (0: do not
/// wait; negative: without bound); `PIW_STATUS_TIMEOUT` when none came.
/// `PIW_STATUS_END` (not a failure; the last error is untouched) once the subscription was
/// closed and every queued event taken. A subscription that failed returns its error on every
/// later call: `PIW_STATUS_DISCONNECTED` (the host closed the connection: a goodbye's code such
/// as `PIW_REJECTION_CODE_SUBSCRIBER_LAGGED` is the rejection code; `PIW_STATUS_CLOSED` when its
/// client was closed) or `PIW_STATUS_OVERFLOW`.
/// Thread safety: any thread; concurrent callers each take different events.
#[no_mangle]
pub unsafe extern "C" fn piw_subscription_next(
    subscription: *const PiwSubscription,
    timeout_ms: i64,
    event_out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        SUBSCRIPTIONS.with(subscription, |s| {
            let out = unsafe { out_string(event_out, "event_out") }?;
            let event = s.next(client::timeout_of(timeout_ms))?;
            give(out, &event);
            Ok(())
        })
    })
}

/// Stores in `*fd_out` a file descriptor that is readable exactly while
/// `piw_subscription_next` would return without waiting (an event is queued, or the
/// subscription ended or failed). For `poll`/`epoll`/`select` or an event loop; level
/// triggered. Owned by the subscription: do not read, write or close it; it stays valid until
/// `piw_subscription_close`. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_subscription_fd(
    subscription: *const PiwSubscription,
    fd_out: *mut c_int,
) -> PiwStatus {
    ffi_call(|| {
        SUBSCRIPTIONS.with(subscription, |s| {
            if fd_out.is_null() {
                return Err(Error::null("fd_out"));
            }
            // SAFETY: non-null and valid for a write, per the conventions.
            unsafe { *fd_out = s.fd() };
            Ok(())
        })
    })
}

/// The host's id of the subscription, in `*out` (owned by the caller). Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_subscription_id(
    subscription: *const PiwSubscription,
    out: *mut *mut c_char,
) -> PiwStatus {
    ffi_call(|| {
        SUBSCRIPTIONS.with(subscription, |s| {
            let out = unsafe { out_string(out, "out") }?;
            give(out, s.id());
            Ok(())
        })
    })
}

/// Ends the subscription (the host stops sending its events), closes its file descriptor and
/// the handle; a `piw_subscription_next` waiting on another thread returns `PIW_STATUS_END` or
/// `PIW_STATUS_CLOSED`, and later calls with the handle fail with `PIW_STATUS_CLOSED`.
/// Errors: `PIW_STATUS_CLOSED` when already closed. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_subscription_close(subscription: *mut PiwSubscription) -> PiwStatus {
    ffi_call(|| {
        SUBSCRIPTIONS.remove(subscription)?.close();
        Ok(())
    })
}

/// An owned copy of the message of the last failed call on this subscription, or NULL.
/// Free it with `piw_string_free`. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_subscription_error_message(
    subscription: *const PiwSubscription,
) -> *mut c_char {
    ffi_value(std::ptr::null_mut(), || {
        SUBSCRIPTIONS
            .get(subscription)
            .map_or(std::ptr::null_mut(), |s| {
                client::error_message_of(s.error_slot())
            })
    })
}

// ---------------------------------------------------------------------------------------------
// Worker: a workflow child
// ---------------------------------------------------------------------------------------------
//
// A child is started by the host with the workflow file as its last argument and its launch
// envelope (JSON) on stdin. The order of calls: `piw_worker_open_stdin` (or `piw_worker_open`),
// `piw_worker_verify_sources` BEFORE loading any workflow code, `piw_worker_hello`, then per
// node `piw_worker_node_started` (unless the hello opened it) and `piw_worker_transition` /
// `piw_worker_complete` / `piw_worker_fail` / `piw_worker_wait` / ..., and exit. On
// `PIW_STATUS_STALE` the run moved on without this child: exit 0 quietly, report nothing.
// Every worker function is thread safe but serialized on its handle (a child normally uses
// one thread); each blocks until the host answers.

fn on_worker(w: *const PiwWorker, f: impl FnOnce(&WorkerObject) -> Result<(), Error>) -> PiwStatus {
    ffi_call(|| WORKERS.with(w, f))
}

/// Reads a launch envelope (`envelope_json`, the JSON text the host wrote to the child's
/// stdin) and stores a new worker handle in `*out` (close it with `piw_worker_close`). Nothing
/// is sent yet. Errors: `PIW_STATUS_INVALID_ARGUMENT` for an envelope that is not one.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_open(
    envelope_json: *const c_char,
    out: *mut *mut PiwWorker,
) -> PiwStatus {
    ffi_call(|| {
        let out = unsafe { out_ptr(out, "out") }?;
        let text = unsafe { text(envelope_json, "envelope_json", max_json_bytes()) }?;
        *out = handle(WORKERS.insert(WorkerObject::open(text.as_bytes())?));
        Ok(())
    })
}

/// `piw_worker_open` with the envelope read from standard input (to its end).
/// Errors: `PIW_STATUS_IO`, `PIW_STATUS_INVALID_ARGUMENT`, `PIW_STATUS_TOO_LARGE`.
/// Thread safety: any thread (it consumes stdin).
#[no_mangle]
pub unsafe extern "C" fn piw_worker_open_stdin(out: *mut *mut PiwWorker) -> PiwStatus {
    ffi_call(|| {
        let out = unsafe { out_ptr(out, "out") }?;
        let mut text = Vec::new();
        let limit = max_json_bytes() as u64;
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::io::stdin().lock(), limit + 1),
            &mut text,
        )
        .map_err(|e| {
            Error::new(
                PiwStatus::Io,
                "io",
                format!("cannot read the envelope from stdin: {e}"),
            )
        })?;
        if text.len() as u64 > limit {
            return Err(Error::new(
                PiwStatus::TooLarge,
                "payload_too_large",
                "the envelope on stdin is too large",
            ));
        }
        *out = handle(WORKERS.insert(WorkerObject::open(&text)?));
        Ok(())
    })
}

/// The envelope without its secret, as JSON: `{"run_id", "generation", "mode" ("run" or
/// "validate"), "source_root" (the workflow file), "source_hash", "mounted_sources",
/// "project_dir", "input_hash"}`. `*out` is owned by the caller. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_envelope(
    worker: *const PiwWorker,
    out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(out, "out") }?;
        give(out, &w.envelope()?);
        Ok(())
    })
}

/// Checks the workflow file and every saved mounted source against the hashes recorded when
/// the run started. Call before loading any workflow code. Errors: `PIW_STATUS_SOURCE_CHANGED`
/// (stop the run for review: `piw_worker_hello` with a NULL definition, then
/// `piw_worker_fail(w, message, true)`). Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_verify_sources(worker: *const PiwWorker) -> PiwStatus {
    on_worker(worker, |w| w.verify_sources())
}

/// Compares the mounts the loaded workflow resolved (`{"name": {"path", "hash"}}`) with the ones
/// saved at the run's first activation. Errors: `PIW_STATUS_SOURCE_CHANGED`.
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_compare_mounts(
    worker: *const PiwWorker,
    resolved_json: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        w.compare_mounts(unsafe { json(resolved_json, "resolved_json") }?)
    })
}

/// Connects to the host and says hello with the envelope's one-time token.
/// `definition_json`: the workflow's data-only graph snapshot (`{"name", "start", "nodes",
/// "edges"}`), or NULL when the child only reports a changed source. `mounts_json`: the
/// resolved mounted sources, or NULL for none. With `start_node`, a fresh run's first attempt
/// opens in the same transaction (then `resume.attempt_id` is set: skip
/// `piw_worker_node_started` for it). `*reply_out` (owned by the caller) is the host's reply:
/// `{"stop", "mode", "resume": {"kind", "node_id", "attempt_id", ...}, "input", "node_input",
/// "results", "definition", "answer", "submission", "timer", "features", "report_each_step"}`
/// (`timer`: `{timer_id, wake_at, output}` on a `timer_fired` resume); a
/// non-null `stop` means exit at once. Errors: `PIW_STATUS_REJECTED` (`unauthorized`: a wrong
/// or used token), `PIW_STATUS_STALE`, `PIW_STATUS_MISUSE` (hello twice).
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_hello(
    worker: *const PiwWorker,
    definition_json: *const c_char,
    mounts_json: *const c_char,
    start_node: bool,
    reply_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(reply_out, "reply_out") }?;
        let definition = unsafe { opt_json(definition_json, "definition_json") }?;
        let mounts = unsafe { opt_json(mounts_json, "mounts_json") }?;
        give(out, &w.hello(definition, mounts, start_node)?);
        Ok(())
    })
}

/// Where `outcome_json` (`{"status": "succeeded", "output": ...}`, `{"status": "failed",
/// "error": "..."}` or `{"status": "timed_out"}`) of node `from` leads in the run's stored graph,
/// by the host's own routing rules: `{"next": "node"}`, `{"complete": true}` or `{"fail":
/// "error", "timed_out": bool}`, in `*out` (owned by the caller). Needs a hello whose reply
/// carried the definition (`PIW_STATUS_MISUSE` otherwise). Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_route(
    worker: *const PiwWorker,
    from: *const c_char,
    outcome_json: *const c_char,
    out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(out, "out") }?;
        let from = unsafe { text(from, "from", PIW_MAX_TEXT_BYTES) }?;
        let outcome = unsafe { json(outcome_json, "outcome_json") }?;
        give(out, &w.route(from, &outcome)?);
        Ok(())
    })
}

/// Node `node_id` begins: the host opens an attempt, whose id is stored in `*attempt_out`
/// (owned by the caller). Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_node_started(
    worker: *const PiwWorker,
    node_id: *const c_char,
    attempt_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(attempt_out, "attempt_out") }?;
        let node = unsafe { text(node_id, "node_id", PIW_MAX_TEXT_BYTES) }?;
        give(out, &w.node_started(node)?);
        Ok(())
    })
}

/// The current attempt ended with `outcome_json` (as in `piw_worker_route`); proposes
/// `next_node`, which must be where the graph routes that outcome (the host checks it and fails
/// the run otherwise: `PIW_STATUS_REFUSED`). `*reply_out` (owned by the caller) is
/// `{"attempt_id": "...", "parked": bool}`: the next node's attempt; when `parked` the run was
/// paused at this boundary and the child must exit. The output may be up to 64 MiB of JSON
/// once canonical (`outcome_json` up to `PIW_MAX_VALUE_JSON_BYTES`; a large one is uploaded
/// in chunks first); a larger one is `PIW_STATUS_INVALID_ARGUMENT` with code
/// `value_too_large` and nothing is sent: fail the node instead. Thread safety: serialized
/// per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_transition(
    worker: *const PiwWorker,
    outcome_json: *const c_char,
    next_node: *const c_char,
    reply_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(reply_out, "reply_out") }?;
        let outcome = unsafe { value_json(outcome_json, "outcome_json") }?;
        let next = unsafe { text(next_node, "next_node", PIW_MAX_TEXT_BYTES) }?;
        give(out, &w.transition(outcome, next)?);
        Ok(())
    })
}

/// Records a step without telling the host yet: `next_node` must be a compute node without a
/// timeout. The next transition or completion carries it; other node operations report it
/// first. Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_defer_transition(
    worker: *const PiwWorker,
    outcome_json: *const c_char,
    next_node: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let outcome = unsafe { json(outcome_json, "outcome_json") }?;
        let next = unsafe { text(next_node, "next_node", PIW_MAX_TEXT_BYTES) }?;
        w.defer_transition(outcome, next)
    })
}

/// Reports the deferred steps now; `*parked_out` says whether the run parked (exit then).
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_flush(
    worker: *const PiwWorker,
    parked_out: *mut bool,
) -> PiwStatus {
    on_worker(worker, |w| {
        if parked_out.is_null() {
            return Err(Error::null("parked_out"));
        }
        let parked = w.flush()?;
        // SAFETY: non-null and valid for a write, per the conventions.
        unsafe { *parked_out = parked };
        Ok(())
    })
}

/// The current attempt ended with `outcome_json` and the run finishes with `result_json`
/// (NULL for `null`). The output and the result may each be up to 64 MiB of JSON once
/// canonical (each argument up to `PIW_MAX_VALUE_JSON_BYTES`); a larger one is
/// `PIW_STATUS_INVALID_ARGUMENT` with code `value_too_large` and nothing is sent. Thread
/// safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_complete(
    worker: *const PiwWorker,
    outcome_json: *const c_char,
    result_json: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let outcome = unsafe { value_json(outcome_json, "outcome_json") }?;
        let result = unsafe { opt_value_json(result_json, "result_json") }?;
        w.complete(outcome, result)
    })
}

/// The run cannot continue: it fails with `error`, or stops for a person's review when
/// `review`. Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_fail(
    worker: *const PiwWorker,
    error: *const c_char,
    review: bool,
) -> PiwStatus {
    on_worker(worker, |w| {
        w.fail(unsafe { text(error, "error", PIW_MAX_TEXT_BYTES) }?, review)
    })
}

/// Parks the run on a checkpoint (`kind` `"checkpoint"`) or a protected human decision
/// (`"human_decision"`) described by `request_json`; the decision's id is stored in `*id_out`
/// (owned by the caller). Exit afterwards: a new child resumes the run with the answer.
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_wait(
    worker: *const PiwWorker,
    kind: *const c_char,
    request_json: *const c_char,
    id_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(id_out, "id_out") }?;
        let kind = unsafe { text(kind, "kind", PIW_MAX_TEXT_BYTES) }?;
        let request = unsafe { opt_json(request_json, "request_json") }?;
        give(out, &w.wait(kind, request)?);
        Ok(())
    })
}

/// Parks the run on a durable timer the host holds: `wake_json` is `{"for_ms": n}` (after n
/// ms of the host's clock) or `{"until_ms": t}` (at Unix ms t); when it fires, a new child
/// resumes the attempt (`timer_fired`) and it succeeds with `output_json` (NULL: `null`). The
/// timer's id is stored in `*id_out` (owned by the caller). Exit afterwards.
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_wait_until(
    worker: *const PiwWorker,
    wake_json: *const c_char,
    output_json: *const c_char,
    id_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(id_out, "id_out") }?;
        let wake = unsafe { json(wake_json, "wake_json") }?;
        let output = unsafe { opt_json(output_json, "output_json") }?;
        give(out, &w.wait_until(wake, output)?);
        Ok(())
    })
}

/// Parks the run on an interactive step (`kind` `"agent"` or `"assistant_message"`) that the
/// origin session answers; the interaction's id is stored in `*id_out` (owned by the caller).
/// Exit afterwards. Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_request_interaction(
    worker: *const PiwWorker,
    kind: *const c_char,
    request_json: *const c_char,
    id_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(id_out, "id_out") }?;
        let kind = unsafe { text(kind, "kind", PIW_MAX_TEXT_BYTES) }?;
        let request = unsafe { opt_json(request_json, "request_json") }?;
        give(out, &w.request_interaction(kind, request)?);
        Ok(())
    })
}

/// Records a workflow message (`content_json`) for the run's origin session.
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_notify(
    worker: *const PiwWorker,
    content_json: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        w.notify(unsafe { json(content_json, "content_json") }?)
    })
}

/// Publishes informational progress (`message`, and `data_json` or NULL) as a `progress` event.
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_progress(
    worker: *const PiwWorker,
    message: *const c_char,
    data_json: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let message = unsafe { text(message, "message", PIW_MAX_TEXT_BYTES) }?;
        w.progress(message, unsafe { opt_json(data_json, "data_json") }?)
    })
}

/// Reserves a managed effect `key` with the request's `fingerprint` and a retry `contract`
/// (`"never"`, `"idempotency_key"` or `"read_back"`). `*reply_out` (owned by the caller) is
/// `{"reservation": "reserved", "effect_id"}` (perform it: `piw_worker_effect_applying`, then
/// `piw_worker_settle_effect`), `{"reservation": "already_applied", "receipt"}` or
/// `{"reservation": "already_failed", "error"}` (do not perform it again).
/// Errors: `PIW_STATUS_REJECTED` with `effect_conflict` (another fingerprint under that key).
/// Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_reserve_effect(
    worker: *const PiwWorker,
    key: *const c_char,
    fingerprint: *const c_char,
    contract: *const c_char,
    reply_out: *mut *mut c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let out = unsafe { out_string(reply_out, "reply_out") }?;
        let key = unsafe { text(key, "key", PIW_MAX_TEXT_BYTES) }?;
        let fingerprint = unsafe { text(fingerprint, "fingerprint", PIW_MAX_TEXT_BYTES) }?;
        let contract = unsafe { text(contract, "contract", PIW_MAX_TEXT_BYTES) }?;
        give(out, &w.reserve_effect(key, fingerprint, contract)?);
        Ok(())
    })
}

/// The reserved effect `effect_id` is about to be performed (from now on an interruption makes
/// it uncertain under the `never` contract). Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_effect_applying(
    worker: *const PiwWorker,
    effect_id: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        w.effect_applying(unsafe { text(effect_id, "effect_id", PIW_MAX_TEXT_BYTES) }?)
    })
}

/// The effect ended: `result_json` is `{"status": "applied", "receipt": ...}` or `{"status":
/// "failed", "error": "..."}`. Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_settle_effect(
    worker: *const PiwWorker,
    effect_id: *const c_char,
    result_json: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let id = unsafe { text(effect_id, "effect_id", PIW_MAX_TEXT_BYTES) }?;
        w.settle_effect(id, unsafe { json(result_json, "result_json") }?)
    })
}

/// A validate-mode child's verdict on submission `submission_id`: `error` NULL accepts it,
/// otherwise the text says why it is rejected. Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_validation_result(
    worker: *const PiwWorker,
    submission_id: *const c_char,
    error: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        let id = unsafe { text(submission_id, "submission_id", PIW_MAX_TEXT_BYTES) }?;
        w.validation_result(id, unsafe { opt_text(error, "error", PIW_MAX_TEXT_BYTES) }?)
    })
}

/// Tells the host the child is about to exit, and why. Thread safety: serialized per handle.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_exit(
    worker: *const PiwWorker,
    reason: *const c_char,
) -> PiwStatus {
    on_worker(worker, |w| {
        w.exit(unsafe { text(reason, "reason", PIW_MAX_TEXT_BYTES) }?)
    })
}

/// Closes the worker's connection and the handle; later calls with it fail with
/// `PIW_STATUS_CLOSED`. Errors: `PIW_STATUS_CLOSED` when already closed.
/// Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_close(worker: *mut PiwWorker) -> PiwStatus {
    ffi_call(|| WORKERS.remove(worker).map(drop))
}

/// An owned copy of the message of the last failed call on this worker, or NULL.
/// Free it with `piw_string_free`. Thread safety: any thread.
#[no_mangle]
pub unsafe extern "C" fn piw_worker_error_message(worker: *const PiwWorker) -> *mut c_char {
    ffi_value(std::ptr::null_mut(), || {
        WORKERS.get(worker).map_or(std::ptr::null_mut(), |w| {
            client::error_message_of(w.error_slot())
        })
    })
}

/// Testing only, not in the header: panics inside an entry point, so the tests can show the
/// panic comes back as `PIW_STATUS_PANIC` instead of unwinding into C.
#[doc(hidden)]
#[no_mangle]
pub extern "C" fn piw_testing_panic() -> PiwStatus {
    ffi_call(|| -> Result<(), Error> { panic!("provoked by piw_testing_panic") })
}
