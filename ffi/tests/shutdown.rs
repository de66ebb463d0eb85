//! `piw_shutdown` (in a test binary of its own: it closes every handle of the process).
//! Afterwards the handles are closed, the `piw-io` thread is gone, and the library connects
//! again.

mod common;

use std::ffi::CString;
use std::ptr::{null, null_mut};

use piw::*;

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

fn connect(install: &common::Install) -> *mut PiwClient {
    let options = CString::new(
        serde_json::json!({ "home": install.piw_home(), "host_bin": common::built("piw") })
            .to_string(),
    )
    .unwrap();
    let mut client = null_mut();
    assert_eq!(
        unsafe { piw_connect(options.as_ptr(), &mut client) },
        PiwStatus::Ok
    );
    client
}

#[test]
fn shutdown_closes_every_handle_and_stops_the_io_thread() {
    let install = common::Install::new();
    let client = connect(&install);
    let mut sub = null_mut();
    assert_eq!(
        unsafe { piw_subscribe(client, c"{\"session_id\":\"s\"}".as_ptr(), &mut sub) },
        PiwStatus::Ok
    );
    assert!(thread_names().iter().any(|n| n == "piw-io"));

    assert_eq!(piw_shutdown(), PiwStatus::Ok);
    assert!(
        !thread_names().iter().any(|n| n == "piw-io"),
        "{:?}",
        thread_names()
    );
    let mut out = null_mut();
    assert_eq!(
        unsafe {
            piw_client_call(
                client,
                c"host.status".as_ptr(),
                null(),
                null(),
                1000,
                &mut out,
            )
        },
        PiwStatus::Closed
    );
    assert_eq!(
        unsafe { piw_subscription_next(sub, 0, &mut out) },
        PiwStatus::Closed
    );
    assert_eq!(unsafe { piw_client_close(client) }, PiwStatus::Closed);
    // Nothing open: a second shutdown is fine.
    assert_eq!(piw_shutdown(), PiwStatus::Ok);

    // The library is usable again.
    let again = connect(&install);
    assert_eq!(
        unsafe {
            piw_client_call(
                again,
                c"host.status".as_ptr(),
                null(),
                null(),
                30_000,
                &mut out,
            )
        },
        PiwStatus::Ok
    );
    unsafe { piw_string_free(out) };
    assert_eq!(unsafe { piw_client_close(again) }, PiwStatus::Ok);
    assert_eq!(piw_shutdown(), PiwStatus::Ok);
}
