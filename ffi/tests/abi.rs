//! The ABI rules, entry point by entry point: NULL, invalid UTF-8, oversized strings and closed
//! handles give error codes (never a crash), failures are readable from the thread and the
//! handle, and a panic inside a call becomes `PIW_STATUS_PANIC`.

mod common;

use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr::{null, null_mut};

use piw::*;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Text that is not UTF-8.
const BAD: &[u8] = b"\xff\xfe{\0";

fn bad() -> *const c_char {
    BAD.as_ptr().cast()
}

/// A JSON string longer than every JSON limit (that of an argument carrying a value too), and
/// a text longer than the text limit.
fn huge_json() -> CString {
    c(&format!(
        "\"{}\"",
        "a".repeat(strings::PIW_MAX_VALUE_JSON_BYTES + 10)
    ))
}

fn huge_text() -> CString {
    c(&"a".repeat(strings::PIW_MAX_TEXT_BYTES + 10))
}

fn last_code() -> String {
    let p = piw_last_error_code();
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

fn last_message() -> String {
    let p = piw_last_error_message();
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

/// Collects every mismatch, so one run lists all entry points that break a rule.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn expect(&mut self, what: &str, want: PiwStatus, got: PiwStatus) {
        if got != want {
            self.0
                .push(format!("{what}: expected {want:?}, got {got:?}"));
        }
    }

    fn done(self) {
        assert!(
            self.0.is_empty(),
            "{} violations:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// A worker handle over an envelope whose socket does not exist: every string check runs
/// before anything is sent.
fn worker() -> *mut PiwWorker {
    let envelope = c(
        r#"{"schema":"piw.launch.v1","run_id":"run-x","generation":1,
        "child_token":"secret-token","mode":"run","source_root":"/nonexistent/w.workflow.json",
        "source_hash":"00","mounted_sources":{},"project_dir":"/","input_hash":"00",
        "socket_path":"/nonexistent/host.sock"}"#,
    );
    let mut w = null_mut();
    assert_eq!(
        unsafe { piw_worker_open(envelope.as_ptr(), &mut w) },
        PiwStatus::Ok
    );
    w
}

/// Runs every worker entry point with `w` and the string arguments from `s` (json, text):
/// returns (name, status) pairs.
unsafe fn worker_calls(
    w: *const PiwWorker,
    json: *const c_char,
    text: *const c_char,
) -> Vec<(&'static str, PiwStatus)> {
    let ok_json = c("{}");
    let outcome = c(r#"{"status":"succeeded","output":null}"#);
    let mut out: *mut c_char = null_mut();
    let mut parked = false;
    let o = &mut out as *mut *mut c_char;
    unsafe {
        vec![
            (
                "piw_worker_compare_mounts",
                piw_worker_compare_mounts(w, json),
            ),
            (
                "piw_worker_hello(definition)",
                piw_worker_hello(w, json, null(), false, o),
            ),
            (
                "piw_worker_hello(mounts)",
                piw_worker_hello(w, null(), json, false, o),
            ),
            (
                "piw_worker_route(from)",
                piw_worker_route(w, text, outcome.as_ptr(), o),
            ),
            (
                "piw_worker_route(outcome)",
                piw_worker_route(w, c"n".as_ptr(), json, o),
            ),
            (
                "piw_worker_node_started",
                piw_worker_node_started(w, text, o),
            ),
            (
                "piw_worker_transition(outcome)",
                piw_worker_transition(w, json, c"n".as_ptr(), o),
            ),
            (
                "piw_worker_transition(next)",
                piw_worker_transition(w, outcome.as_ptr(), text, o),
            ),
            (
                "piw_worker_defer_transition(outcome)",
                piw_worker_defer_transition(w, json, c"n".as_ptr()),
            ),
            (
                "piw_worker_defer_transition(next)",
                piw_worker_defer_transition(w, outcome.as_ptr(), text),
            ),
            (
                "piw_worker_complete(outcome)",
                piw_worker_complete(w, json, null()),
            ),
            (
                "piw_worker_complete(result)",
                piw_worker_complete(w, outcome.as_ptr(), json),
            ),
            ("piw_worker_fail", piw_worker_fail(w, text, false)),
            ("piw_worker_wait(kind)", piw_worker_wait(w, text, null(), o)),
            (
                "piw_worker_wait(request)",
                piw_worker_wait(w, c"checkpoint".as_ptr(), json, o),
            ),
            (
                "piw_worker_wait_until(wake)",
                piw_worker_wait_until(w, json, null(), o),
            ),
            (
                "piw_worker_wait_until(output)",
                piw_worker_wait_until(w, c"{\"for_ms\":1}".as_ptr(), json, o),
            ),
            (
                "piw_worker_request_interaction(kind)",
                piw_worker_request_interaction(w, text, null(), o),
            ),
            (
                "piw_worker_request_interaction(request)",
                piw_worker_request_interaction(w, c"agent".as_ptr(), json, o),
            ),
            ("piw_worker_notify", piw_worker_notify(w, json)),
            (
                "piw_worker_progress(message)",
                piw_worker_progress(w, text, null()),
            ),
            (
                "piw_worker_progress(data)",
                piw_worker_progress(w, c"m".as_ptr(), json),
            ),
            (
                "piw_worker_reserve_effect(key)",
                piw_worker_reserve_effect(w, text, c"f".as_ptr(), c"never".as_ptr(), o),
            ),
            (
                "piw_worker_reserve_effect(fingerprint)",
                piw_worker_reserve_effect(w, c"k".as_ptr(), text, c"never".as_ptr(), o),
            ),
            (
                "piw_worker_reserve_effect(contract)",
                piw_worker_reserve_effect(w, c"k".as_ptr(), c"f".as_ptr(), text, o),
            ),
            (
                "piw_worker_effect_applying",
                piw_worker_effect_applying(w, text),
            ),
            (
                "piw_worker_settle_effect(id)",
                piw_worker_settle_effect(w, text, ok_json.as_ptr()),
            ),
            (
                "piw_worker_settle_effect(result)",
                piw_worker_settle_effect(w, c"e".as_ptr(), json),
            ),
            (
                "piw_worker_validation_result(id)",
                piw_worker_validation_result(w, text, null()),
            ),
            (
                "piw_worker_validation_result(error)",
                piw_worker_validation_result(w, c"s".as_ptr(), text),
            ),
            ("piw_worker_exit", piw_worker_exit(w, text)),
            ("piw_worker_flush", piw_worker_flush(w, &mut parked)),
            ("piw_worker_envelope", piw_worker_envelope(w, o)),
            ("piw_worker_verify_sources", piw_worker_verify_sources(w)),
        ]
    }
}

/// Every string argument of the client and subscription entry points, with `json`/`text`.
unsafe fn client_calls(
    cl: *const PiwClient,
    json: *const c_char,
    text: *const c_char,
) -> Vec<(&'static str, PiwStatus)> {
    let mut out: *mut c_char = null_mut();
    let mut sub: *mut PiwSubscription = null_mut();
    let mut worker: *mut PiwWorker = null_mut();
    let o = &mut out as *mut *mut c_char;
    unsafe {
        vec![
            (
                "piw_client_call(kind)",
                piw_client_call(cl, text, null(), null(), 1000, o),
            ),
            (
                "piw_client_call(envelope)",
                piw_client_call(cl, c"host.status".as_ptr(), json, null(), 1000, o),
            ),
            (
                "piw_client_call(payload)",
                piw_client_call(cl, c"host.status".as_ptr(), null(), json, 1000, o),
            ),
            ("piw_subscribe(filter)", piw_subscribe(cl, json, &mut sub)),
            ("piw_wait_run(run_id)", piw_wait_run(cl, text, 0, 1000, o)),
            (
                "piw_json_pointer(json)",
                piw_json_pointer(json, c"".as_ptr(), o),
            ),
            (
                "piw_json_pointer(pointer)",
                piw_json_pointer(c"{}".as_ptr(), text, o),
            ),
            ("piw_hash_file", piw_hash_file(text, o)),
            ("piw_worker_open", piw_worker_open(json, &mut worker)),
        ]
    }
}

/// Connects to a fresh host of `install`.
fn connect(install: &common::Install) -> *mut PiwClient {
    let options = c(&serde_json::json!({
        "home": install.piw_home(),
        "host_bin": common::built("piw"),
        "host_env": { "PIW_LOG": "warn" },
    })
    .to_string());
    let mut client = null_mut();
    let st = unsafe { piw_connect(options.as_ptr(), &mut client) };
    assert_eq!(st, PiwStatus::Ok, "{}", last_message());
    client
}

#[test]
fn invalid_utf8_and_oversized_strings_are_refused_by_every_entry_point() {
    let install = common::Install::new();
    let client = connect(&install);
    let w = worker();
    let mut checks = Checks::default();
    let (hj, ht) = (huge_json(), huge_text());
    unsafe {
        for (name, st) in client_calls(client, bad(), bad()) {
            checks.expect(
                &format!("{name} with invalid UTF-8"),
                PiwStatus::InvalidUtf8,
                st,
            );
        }
        for (name, st) in client_calls(client, hj.as_ptr(), ht.as_ptr()) {
            checks.expect(&format!("{name} oversized"), PiwStatus::TooLarge, st);
        }
        for (name, st) in worker_calls(w, bad(), bad()) {
            if matches!(
                name,
                "piw_worker_flush" | "piw_worker_envelope" | "piw_worker_verify_sources"
            ) {
                continue; // no string argument
            }
            checks.expect(
                &format!("{name} with invalid UTF-8"),
                PiwStatus::InvalidUtf8,
                st,
            );
        }
        for (name, st) in worker_calls(w, hj.as_ptr(), ht.as_ptr()) {
            if matches!(
                name,
                "piw_worker_flush" | "piw_worker_envelope" | "piw_worker_verify_sources"
            ) {
                continue;
            }
            checks.expect(&format!("{name} oversized"), PiwStatus::TooLarge, st);
        }
        // Connect options too.
        let mut other = null_mut();
        checks.expect(
            "piw_connect invalid UTF-8",
            PiwStatus::InvalidUtf8,
            piw_connect(bad(), &mut other),
        );
        checks.expect(
            "piw_connect oversized",
            PiwStatus::TooLarge,
            piw_connect(hj.as_ptr(), &mut other),
        );
        // The rejection code says why too.
        piw_client_call(client, ht.as_ptr(), null(), null(), 1000, &mut null_mut());
        assert_eq!(piw_last_rejection_code(), PiwRejectionCode::PayloadTooLarge);
        assert_eq!(last_code(), "payload_too_large");
        // The client still works after all of that.
        let mut receipt = null_mut();
        assert_eq!(
            piw_client_call(
                client,
                c"host.status".as_ptr(),
                null(),
                null(),
                30_000,
                &mut receipt
            ),
            PiwStatus::Ok
        );
        piw_string_free(receipt);
        piw_worker_close(w);
        piw_client_close(client);
    }
    checks.done();
}

#[test]
fn null_arguments_are_refused_by_every_entry_point() {
    let install = common::Install::new();
    let client = connect(&install);
    let w = worker();
    let mut checks = Checks::default();
    let mut out: *mut c_char = null_mut();
    let o = &mut out as *mut *mut c_char;
    let no_out: *mut *mut c_char = null_mut();
    let outcome = c(r#"{"status":"succeeded","output":null}"#);
    let oc = outcome.as_ptr();
    let k = c"k".as_ptr();
    let mut sub: *mut PiwSubscription = null_mut();
    let filter = c(r#"{"session_id":"abi"}"#);
    unsafe {
        assert_eq!(
            piw_subscribe(client, filter.as_ptr(), &mut sub),
            PiwStatus::Ok
        );
        let calls: Vec<(&str, PiwStatus)> = vec![
            ("piw_json_pointer(json)", piw_json_pointer(null(), k, o)),
            (
                "piw_json_pointer(pointer)",
                piw_json_pointer(c"{}".as_ptr(), null(), o),
            ),
            (
                "piw_json_pointer(out)",
                piw_json_pointer(c"{}".as_ptr(), c"".as_ptr(), no_out),
            ),
            (
                "piw_json_pointer_json(json)",
                piw_json_pointer_json(null(), k, o),
            ),
            (
                "piw_json_pointer_json(pointer)",
                piw_json_pointer_json(c"{}".as_ptr(), null(), o),
            ),
            (
                "piw_json_pointer_json(out)",
                piw_json_pointer_json(c"{}".as_ptr(), c"".as_ptr(), no_out),
            ),
            ("piw_hash_file(path)", piw_hash_file(null(), o)),
            ("piw_hash_file(out)", piw_hash_file(k, no_out)),
            ("piw_connect(out)", piw_connect(null(), null_mut())),
            (
                "piw_client_call(client)",
                piw_client_call(null(), c"host.status".as_ptr(), null(), null(), 1000, o),
            ),
            (
                "piw_client_call(kind)",
                piw_client_call(client, null(), null(), null(), 1000, o),
            ),
            (
                "piw_client_call(out)",
                piw_client_call(
                    client,
                    c"host.status".as_ptr(),
                    null(),
                    null(),
                    1000,
                    no_out,
                ),
            ),
            ("piw_client_socket(client)", piw_client_socket(null(), o)),
            ("piw_client_socket(out)", piw_client_socket(client, no_out)),
            ("piw_client_close", piw_client_close(null_mut())),
            (
                "piw_wait_run(client)",
                piw_wait_run(null(), c"r".as_ptr(), 0, 0, o),
            ),
            (
                "piw_wait_run(run_id)",
                piw_wait_run(client, null(), 0, 0, o),
            ),
            (
                "piw_wait_run(out)",
                piw_wait_run(client, c"r".as_ptr(), 0, 0, no_out),
            ),
            (
                "piw_client_resolve_value(client)",
                piw_client_resolve_value(null(), c"r".as_ptr(), c"1".as_ptr(), 0, o),
            ),
            (
                "piw_client_resolve_value(run_id)",
                piw_client_resolve_value(client, null(), c"1".as_ptr(), 0, o),
            ),
            (
                "piw_client_resolve_value(out)",
                piw_client_resolve_value(client, c"r".as_ptr(), c"1".as_ptr(), 0, no_out),
            ),
            (
                "piw_subscribe(client)",
                piw_subscribe(null(), filter.as_ptr(), &mut sub.clone()),
            ),
            (
                "piw_subscribe(filter)",
                piw_subscribe(client, null(), &mut sub.clone()),
            ),
            (
                "piw_subscribe(out)",
                piw_subscribe(client, filter.as_ptr(), null_mut()),
            ),
            (
                "piw_subscription_next(sub)",
                piw_subscription_next(null(), 0, o),
            ),
            (
                "piw_subscription_next(out)",
                piw_subscription_next(sub, 0, no_out),
            ),
            (
                "piw_subscription_fd(sub)",
                piw_subscription_fd(null(), &mut 0),
            ),
            (
                "piw_subscription_fd(out)",
                piw_subscription_fd(sub, null_mut::<c_int>()),
            ),
            ("piw_subscription_id(sub)", piw_subscription_id(null(), o)),
            ("piw_subscription_id(out)", piw_subscription_id(sub, no_out)),
            ("piw_subscription_close", piw_subscription_close(null_mut())),
            (
                "piw_worker_open(envelope)",
                piw_worker_open(null(), &mut null_mut()),
            ),
            (
                "piw_worker_open(out)",
                piw_worker_open(c"{}".as_ptr(), null_mut()),
            ),
            (
                "piw_worker_open_stdin(out)",
                piw_worker_open_stdin(null_mut()),
            ),
            ("piw_worker_envelope(out)", piw_worker_envelope(w, no_out)),
            (
                "piw_worker_compare_mounts(json)",
                piw_worker_compare_mounts(w, null()),
            ),
            (
                "piw_worker_hello(out)",
                piw_worker_hello(w, null(), null(), false, no_out),
            ),
            ("piw_worker_route(from)", piw_worker_route(w, null(), oc, o)),
            (
                "piw_worker_route(outcome)",
                piw_worker_route(w, k, null(), o),
            ),
            ("piw_worker_route(out)", piw_worker_route(w, k, oc, no_out)),
            (
                "piw_worker_node_started(node)",
                piw_worker_node_started(w, null(), o),
            ),
            (
                "piw_worker_node_started(out)",
                piw_worker_node_started(w, k, no_out),
            ),
            (
                "piw_worker_transition(outcome)",
                piw_worker_transition(w, null(), k, o),
            ),
            (
                "piw_worker_transition(next)",
                piw_worker_transition(w, oc, null(), o),
            ),
            (
                "piw_worker_transition(out)",
                piw_worker_transition(w, oc, k, no_out),
            ),
            (
                "piw_worker_defer_transition(outcome)",
                piw_worker_defer_transition(w, null(), k),
            ),
            (
                "piw_worker_defer_transition(next)",
                piw_worker_defer_transition(w, oc, null()),
            ),
            ("piw_worker_flush(out)", piw_worker_flush(w, null_mut())),
            (
                "piw_worker_complete(outcome)",
                piw_worker_complete(w, null(), null()),
            ),
            ("piw_worker_fail(error)", piw_worker_fail(w, null(), false)),
            (
                "piw_worker_wait(kind)",
                piw_worker_wait(w, null(), null(), o),
            ),
            (
                "piw_worker_wait(out)",
                piw_worker_wait(w, c"checkpoint".as_ptr(), null(), no_out),
            ),
            (
                "piw_worker_wait_until(wake)",
                piw_worker_wait_until(w, null(), null(), o),
            ),
            (
                "piw_worker_wait_until(out)",
                piw_worker_wait_until(w, c"{\"for_ms\":1}".as_ptr(), null(), no_out),
            ),
            (
                "piw_worker_request_interaction(kind)",
                piw_worker_request_interaction(w, null(), null(), o),
            ),
            (
                "piw_worker_request_interaction(out)",
                piw_worker_request_interaction(w, c"agent".as_ptr(), null(), no_out),
            ),
            ("piw_worker_notify(content)", piw_worker_notify(w, null())),
            (
                "piw_worker_progress(message)",
                piw_worker_progress(w, null(), null()),
            ),
            (
                "piw_worker_reserve_effect(key)",
                piw_worker_reserve_effect(w, null(), k, c"never".as_ptr(), o),
            ),
            (
                "piw_worker_reserve_effect(fingerprint)",
                piw_worker_reserve_effect(w, k, null(), c"never".as_ptr(), o),
            ),
            (
                "piw_worker_reserve_effect(contract)",
                piw_worker_reserve_effect(w, k, k, null(), o),
            ),
            (
                "piw_worker_reserve_effect(out)",
                piw_worker_reserve_effect(w, k, k, c"never".as_ptr(), no_out),
            ),
            (
                "piw_worker_effect_applying(id)",
                piw_worker_effect_applying(w, null()),
            ),
            (
                "piw_worker_settle_effect(id)",
                piw_worker_settle_effect(w, null(), c"{}".as_ptr()),
            ),
            (
                "piw_worker_settle_effect(result)",
                piw_worker_settle_effect(w, k, null()),
            ),
            (
                "piw_worker_validation_result(id)",
                piw_worker_validation_result(w, null(), null()),
            ),
            ("piw_worker_exit(reason)", piw_worker_exit(w, null())),
            ("piw_worker_close", piw_worker_close(null_mut())),
        ];
        // Every handle-taking worker function, with a NULL handle.
        for (name, st) in worker_calls(null(), c"{}".as_ptr(), k) {
            checks.expect(
                &format!("{name} with a NULL worker"),
                PiwStatus::NullArgument,
                st,
            );
        }
        for (name, st) in calls {
            checks.expect(name, PiwStatus::NullArgument, st);
        }
        // The failure names the argument, on the thread.
        piw_worker_node_started(w, null(), o);
        assert_eq!(last_code(), "null_argument");
        assert!(last_message().contains("node_id"), "{}", last_message());
        // ... and on the handle.
        let m = piw_worker_error_message(w);
        assert!(!m.is_null() && CStr::from_ptr(m).to_str().unwrap().contains("node_id"));
        piw_string_free(m);
        // Functions that return a value: NULL handles give NULL / NONE, no crash.
        assert!(piw_client_error_message(null()).is_null());
        assert_eq!(piw_client_error_rejection(null()), PiwRejectionCode::None);
        assert!(piw_subscription_error_message(null()).is_null());
        assert!(piw_worker_error_message(null()).is_null());
        piw_string_free(null_mut());
        piw_subscription_close(sub);
        piw_worker_close(w);
        piw_client_close(client);
    }
    checks.done();
}

#[test]
fn closed_handles_and_handles_of_another_type_are_refused() {
    let install = common::Install::new();
    let client = connect(&install);
    let w = worker();
    let mut sub: *mut PiwSubscription = null_mut();
    let filter = c(r#"{"session_id":"abi"}"#);
    let mut checks = Checks::default();
    let mut out: *mut c_char = null_mut();
    let o = &mut out as *mut *mut c_char;
    unsafe {
        assert_eq!(
            piw_subscribe(client, filter.as_ptr(), &mut sub),
            PiwStatus::Ok
        );
        let mut fd: c_int = -1;
        assert_eq!(piw_subscription_fd(sub, &mut fd), PiwStatus::Ok);
        assert!(fd >= 0);
        // A handle of another type is no handle of this one.
        checks.expect(
            "a worker as a client",
            PiwStatus::Closed,
            piw_client_call(w.cast(), c"host.status".as_ptr(), null(), null(), 1000, o),
        );
        checks.expect(
            "a client as a worker",
            PiwStatus::Closed,
            piw_worker_notify(client.cast(), c"{}".as_ptr()),
        );
        checks.expect(
            "a made-up handle",
            PiwStatus::Closed,
            piw_subscription_next(std::ptr::without_provenance(12345), 0, o),
        );

        checks.expect(
            "piw_subscription_close",
            PiwStatus::Ok,
            piw_subscription_close(sub),
        );
        checks.expect("piw_client_close", PiwStatus::Ok, piw_client_close(client));
        checks.expect("piw_worker_close", PiwStatus::Ok, piw_worker_close(w));

        let closed = [
            (
                "piw_client_call",
                piw_client_call(client, c"host.status".as_ptr(), null(), null(), 1000, o),
            ),
            ("piw_client_socket", piw_client_socket(client, o)),
            ("piw_wait_run", piw_wait_run(client, c"r".as_ptr(), 0, 0, o)),
            (
                "piw_client_resolve_value",
                piw_client_resolve_value(client, c"r".as_ptr(), c"1".as_ptr(), 0, o),
            ),
            (
                "piw_subscribe",
                piw_subscribe(client, filter.as_ptr(), &mut null_mut()),
            ),
            ("piw_client_close again", piw_client_close(client)),
            ("piw_subscription_next", piw_subscription_next(sub, 0, o)),
            ("piw_subscription_fd", piw_subscription_fd(sub, &mut 0)),
            ("piw_subscription_id", piw_subscription_id(sub, o)),
            ("piw_subscription_close again", piw_subscription_close(sub)),
            ("piw_worker_close again", piw_worker_close(w)),
        ];
        for (name, st) in closed {
            checks.expect(name, PiwStatus::Closed, st);
        }
        for (name, st) in worker_calls(w, c"{}".as_ptr(), c"k".as_ptr()) {
            checks.expect(&format!("{name} on a closed worker"), PiwStatus::Closed, st);
        }
        assert_eq!(last_code(), "closed");
        assert!(out.is_null(), "a failed call leaves its out pointer NULL");
        assert!(piw_client_error_message(client).is_null());
        assert!(piw_worker_error_message(w).is_null());
    }
    checks.done();
}

#[test]
fn a_panic_inside_a_call_becomes_an_error_code() {
    // The panic's message goes to stderr through the default hook; the call returns.
    let status = piw_testing_panic();
    assert_eq!(status, PiwStatus::Panic);
    assert_eq!(last_code(), "panic");
    assert!(
        last_message().contains("provoked by piw_testing_panic"),
        "{}",
        last_message()
    );
    // The library still works on this thread afterwards.
    let mut out = null_mut();
    let st = unsafe { piw_json_pointer(c"{\"a\":[1,2]}".as_ptr(), c"/a/1".as_ptr(), &mut out) };
    assert_eq!(st, PiwStatus::Ok);
    assert_eq!(unsafe { CStr::from_ptr(out) }.to_str().unwrap(), "2");
    unsafe { piw_string_free(out) };
}

#[test]
fn a_failed_out_call_leaves_null_and_strings_come_back_owned() {
    let mut out: *mut c_char = std::ptr::dangling_mut::<c_char>();
    let st = unsafe { piw_json_pointer(c"{}".as_ptr(), c"/missing".as_ptr(), &mut out) };
    assert_eq!(st, PiwStatus::InvalidArgument);
    assert!(out.is_null());
    assert_eq!(last_code(), "invalid_argument");
    let st = unsafe { piw_json_pointer(c"{\"s\":\"x\\\"y\"}".as_ptr(), c"/s".as_ptr(), &mut out) };
    assert_eq!(st, PiwStatus::Ok);
    assert_eq!(unsafe { CStr::from_ptr(out) }.to_str().unwrap(), "x\"y");
    unsafe { piw_string_free(out) };
    let st =
        unsafe { piw_json_pointer_json(c"{\"s\":\"x\\\"y\"}".as_ptr(), c"/s".as_ptr(), &mut out) };
    assert_eq!(st, PiwStatus::Ok);
    assert_eq!(
        unsafe { CStr::from_ptr(out) }.to_str().unwrap(),
        r#""x\"y""#
    );
    unsafe { piw_string_free(out) };
}

/// A timer's wake is one of a duration and a time: anything else is refused before a word is
/// sent.
#[test]
fn a_wake_that_is_neither_a_duration_nor_a_time_is_an_invalid_argument() {
    let w = worker();
    let mut out: *mut c_char = null_mut();
    for wake in [
        c"{}",
        c"{\"for_ms\":1,\"until_ms\":2}",
        c"{\"for_ms\":-1}",
        c"{\"in\":1}",
    ] {
        let st = unsafe { piw_worker_wait_until(w, wake.as_ptr(), null(), &mut out) };
        assert_eq!(st, PiwStatus::InvalidArgument, "{wake:?}");
        assert!(out.is_null());
    }
    assert_eq!(unsafe { piw_worker_close(w) }, PiwStatus::Ok);
}

#[test]
fn every_status_has_a_name_and_other_values_are_unknown() {
    let name = |v: c_int| {
        unsafe { CStr::from_ptr(piw_status_name(v)) }
            .to_str()
            .unwrap()
    };
    assert_eq!(name(PiwStatus::Ok as c_int), "ok");
    assert_eq!(name(PiwStatus::Rejected as c_int), "rejected");
    assert_eq!(name(PiwStatus::Panic as c_int), "panic");
    let names: std::collections::HashSet<&str> = (0..20).map(name).collect();
    assert_eq!(names.len(), 20, "every status has its own name");
    assert!(!names.contains("unknown"));
    assert_eq!(name(20), "unknown");
    assert_eq!(name(-1), "unknown");
}
