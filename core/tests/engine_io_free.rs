//! The host's deciding code names no I/O: no runtime, thread, channel, socket, file, process,
//! environment or clock of its own. It reaches the store through `WriteTx`/`Store`, the time
//! through the store's clock, the supervisor through the orders it leaves in
//! `HostState::child_commands`, and subscribers through the runs it leaves in
//! `HostState::unpublished`. Every file under `core/src/engine/` is read: one that starts doing
//! I/O fails this test (ARCHITECTURE.md, "Engine and driver").

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

#[test]
fn the_deciding_modules_name_no_io() {
    let engine = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut modules = Vec::new();
    rust_files(&engine, &mut modules);
    assert!(modules.len() >= 6, "the engine's files: {modules:?}");
    let mut found = Vec::new();
    for path in &modules {
        let module = path.strip_prefix(&engine).unwrap().display();
        let text = std::fs::read_to_string(path).expect("the module exists");
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

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the engine's directory") {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
