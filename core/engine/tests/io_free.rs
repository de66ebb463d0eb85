//! The engine names no I/O: no runtime, thread, channel, socket, file, process, environment or
//! clock of its own. Its crate depends on none (checked here against `Cargo.toml`, so a new
//! dependency is a decision, not an accident); it reaches the store through the interface it
//! owns (`store::port`), the time through that store's clock, the supervisor through the orders
//! it leaves in `HostState::child_commands`, and subscribers through the runs it leaves in
//! `HostState::unpublished`. Every file of the crate is read but `protocol/frame.rs`, whose
//! blocking helpers take any `Read`/`Write` (ARCHITECTURE.md, "Engine and driver").

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

/// Names that are not I/O where they appear: the protocol's doc of its `Read`/`Write` helpers,
/// the byte counter canonical JSON writes into (an `io::Write` that only counts), and the type
/// of the file error the store reports.
const ALLOWED: &[(&str, &str)] = &[
    ("protocol/mod.rs", "std::io"),
    ("protocol/canonical.rs", "std::io"),
    ("store/error.rs", "std::io"),
];

#[test]
fn the_deciding_modules_name_no_io() {
    let engine = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = Vec::new();
    rust_files(&engine, &mut modules);
    modules.retain(|m| !m.ends_with("protocol/frame.rs"));
    assert!(modules.len() >= 30, "the engine's files: {modules:?}");
    let mut found = Vec::new();
    for path in &modules {
        let module = path.strip_prefix(&engine).unwrap().display();
        let text = std::fs::read_to_string(path).expect("the module exists");
        for (n, line) in text.lines().enumerate() {
            for name in IO_NAMES {
                if line.contains(name) && !ALLOWED.contains(&(module.to_string().as_str(), *name)) {
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

/// What the crate may depend on, and why (`Cargo.toml` says it too). `rusqlite` is optional:
/// the `rusqlite` feature adds only `From<rusqlite::Error> for StoreError`, in one file.
const DEPENDENCIES: &[&str] = &[
    "hex",
    "rand",
    "rusqlite",
    "serde",
    "serde_json",
    "sha2",
    "thiserror",
    "tracing",
];

#[test]
fn the_crate_depends_on_no_runtime_database_or_os_binding() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("the manifest");
    let deps: Vec<&str> = manifest
        .split("\n[")
        .find(|section| section.starts_with("dependencies]"))
        .expect("a [dependencies] section")
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| !name.starts_with('#'))
        .collect();
    assert_eq!(deps, DEPENDENCIES, "the engine's dependencies changed");
    assert!(
        manifest.contains("rusqlite = { version") && manifest.contains("optional = true"),
        "rusqlite stays optional"
    );
    let engine = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&engine, &mut files);
    let naming_sqlite: Vec<_> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .expect("readable")
                .contains("rusqlite::")
        })
        .map(|f| f.strip_prefix(&engine).unwrap().display().to_string())
        .collect();
    assert_eq!(
        naming_sqlite,
        ["store/error.rs"],
        "only the error conversion names rusqlite"
    );
}
