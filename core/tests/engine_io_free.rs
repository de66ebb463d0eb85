//! The host's deciding code names no I/O: no runtime, thread, channel, socket, file, process,
//! environment or clock of its own. It reaches the store through `WriteTx`/`Store`, the time
//! through the store's clock, the supervisor through the orders it leaves in
//! `HostState::child_commands`, and subscribers through the runs it leaves in
//! `HostState::unpublished`. A file listed here that starts doing I/O fails this test; the
//! list grows as modules move to the engine (ARCHITECTURE.md, "Engine and driver").

/// Names of I/O a deciding module may not use.
const IO_NAMES: &[&str] = &[
    "tokio",
    "std::thread",
    "std::net",
    "std::fs",
    "std::io",
    "std::process",
    "std::env",
    "mpsc",
    "UnixStream",
    "SystemClock",
    "SystemTime",
    "Instant::now",
    "libc::",
    // The driver's handles: replies and events leave through the outbox, orders through the
    // supervisor's channel, both held by the store thread.
    "Outbox",
    "broadcast",
    "oneshot",
    "SupervisorTx",
];

/// The deciding modules, by path under `core/src`.
const DECIDING: &[&str] = &[
    "host/children/commands.rs",
    "host/children/mod.rs",
    "host/children/messages.rs",
    "host/children/watch.rs",
    "host/dispatch.rs",
    "host/timers.rs",
];

#[test]
fn the_deciding_modules_name_no_io() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for module in DECIDING {
        let text = std::fs::read_to_string(src.join(module)).expect("the module exists");
        for (n, line) in text.lines().enumerate() {
            for name in IO_NAMES {
                if line.contains(name) {
                    found.push(format!("{module}:{}: {name}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "I/O in deciding code:\n{}",
        found.join("\n")
    );
}
