//! The engine names no I/O: no runtime, thread, channel, socket, file, process, environment,
//! clock or randomness of its own, and no map that iterates in an order the OS seeds. Its crate
//! depends on none (checked here against `Cargo.toml`, so a new dependency is a decision, not an
//! accident); it reaches the store through the interface it owns (`store::port`), the time
//! through the `now` each turn (and every other entry point that decides by it) is handed,
//! new ids through the `IdSource` it is handed (so a seed replays a simulation bit for bit),
//! the supervisor through the orders it leaves in `HostState::child_commands`, and
//! subscribers through the runs it leaves in `HostState::unpublished`. Every file of the crate
//! is read as Rust (with `syn`: every path, `use` tree and macro body, so no spelling hides a
//! name) but `protocol/frame.rs`, whose blocking helpers take any `Read`/`Write`
//! (ARCHITECTURE.md, "Engine and driver").

/// Paths a deciding module may not name, as their first segments (`std::fs` also catches
/// `std::fs::read`, `use std::{fs, ...}` and `::std::fs`).
const IO_PATHS: &[&str] = &[
    "tokio",
    "libc",
    "std::thread",
    "std::net",
    "std::fs",
    "std::io",
    "std::process",
    "std::env",
    "std::os",
    "std::time::SystemTime",
    "std::time::Instant",
    "std::time::UNIX_EPOCH",
    "std::sync::mpsc",
    "core::time::Instant",
    // Randomness and clocks of other crates: the driver hands both in.
    "rand",
    "getrandom",
    "chrono",
    "time",
    // Maps whose iteration order is seeded by the OS per process: the order of decisions
    // taken over them would differ between two runs of one seed.
    "std::collections::HashMap",
    "std::collections::HashSet",
    "std::collections::hash_map",
    "std::collections::hash_set",
    "std::hash::RandomState",
];

/// Names a deciding module may not use anywhere in a path, however it reached them: clocks,
/// channels, sockets, and the driver's handles (replies and events leave through the outbox,
/// orders through the supervisor's channel, both held by the store thread).
const IO_NAMES: &[&str] = &[
    "SystemTime",
    "Instant",
    "UNIX_EPOCH",
    "SystemClock",
    "FakeClock",
    "OffsetFileClock",
    "OsIds",
    "thread_rng",
    "OsRng",
    "ThreadRng",
    "RandomState",
    "HashMap",
    "HashSet",
    "UnixStream",
    "mpsc",
    "oneshot",
    "broadcast",
    "Outbox",
    "SupervisorTx",
];

/// Names that are not I/O where they appear: the protocol's `Read`/`Write` helpers' trait
/// bounds, the byte counter canonical JSON writes into (an `io::Write` that only counts), and
/// the type of the file error the store reports.
const ALLOWED: &[(&str, &str)] = &[
    ("protocol/mod.rs", "std::io"),
    ("protocol/canonical.rs", "std::io"),
    ("store/error.rs", "std::io"),
];

/// Every path `source` names, as `a::b::c`: each `use` tree expanded (a group,
/// a rename and a glob give the paths they bring in), every path in code, and the paths inside
/// macro bodies (read from their tokens, since syn does not parse them).
fn named_paths(source: &str) -> Result<Vec<String>, syn::Error> {
    use syn::visit::Visit;

    struct Paths(Vec<String>);
    impl Paths {
        fn add(&mut self, path: String) {
            self.0.push(path);
        }
        fn use_tree(&mut self, prefix: &str, tree: &syn::UseTree) {
            let join = |name: &str| {
                if prefix.is_empty() {
                    name.to_owned()
                } else {
                    format!("{prefix}::{name}")
                }
            };
            match tree {
                syn::UseTree::Path(p) => self.use_tree(&join(&p.ident.to_string()), &p.tree),
                syn::UseTree::Name(n) => self.add(join(&n.ident.to_string())),
                syn::UseTree::Rename(r) => self.add(join(&r.ident.to_string())),
                syn::UseTree::Glob(_) => self.add(join("*")),
                syn::UseTree::Group(g) => {
                    for t in &g.items {
                        self.use_tree(prefix, t);
                    }
                }
            }
        }
        /// `a :: b :: c` sequences in a macro's tokens.
        fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
            let mut path: Vec<String> = Vec::new();
            let mut colons = 0;
            let flush = |this: &mut Paths, path: &mut Vec<String>| {
                if !path.is_empty() {
                    this.add(path.join("::"));
                    path.clear();
                }
            };
            for tt in tokens {
                match tt {
                    proc_macro2::TokenTree::Ident(ident) => {
                        if colons != 2 {
                            flush(self, &mut path);
                        }
                        path.push(ident.to_string());
                        colons = 0;
                    }
                    proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' => colons += 1,
                    proc_macro2::TokenTree::Group(g) => {
                        flush(self, &mut path);
                        colons = 0;
                        self.tokens(g.stream());
                    }
                    _ => {
                        flush(self, &mut path);
                        colons = 0;
                    }
                }
            }
            flush(self, &mut path);
        }
    }
    impl<'ast> Visit<'ast> for Paths {
        fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
            self.use_tree("", &item.tree);
        }
        fn visit_path(&mut self, path: &'ast syn::Path) {
            let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.add(names.join("::"));
            syn::visit::visit_path(self, path);
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            self.tokens(mac.tokens.clone());
            syn::visit::visit_macro(self, mac);
        }
    }
    let file = syn::parse_file(source)?;
    let mut paths = Paths(Vec::new());
    paths.visit_file(&file);
    Ok(paths.0)
}

/// What of `source` names I/O: `(the I/O it names, the path)`; `allowed` are the
/// [`IO_PATHS`] this file may name.
fn io_in(source: &str, allowed: &[&str]) -> Result<Vec<(String, String)>, syn::Error> {
    let mut found = Vec::new();
    for path in named_paths(source)? {
        let segments: Vec<&str> = path.split("::").collect();
        let io_path = IO_PATHS.iter().find(|io| {
            let io: Vec<&str> = io.split("::").collect();
            segments.len() >= io.len() && segments[..io.len()] == io[..]
        });
        let io = match io_path {
            Some(io) if allowed.contains(io) => None,
            Some(io) => Some((*io).to_owned()),
            None => IO_NAMES
                .iter()
                .find(|name| segments.contains(name))
                .map(|name| (*name).to_owned()),
        };
        if let Some(io) = io {
            found.push((io, path));
        }
    }
    Ok(found)
}

#[test]
fn the_deciding_modules_name_no_io() {
    let engine = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = Vec::new();
    rust_files(&engine, &mut modules);
    modules.retain(|m| !m.ends_with("protocol/frame.rs"));
    assert!(modules.len() >= 30, "the engine's files: {modules:?}");
    let mut found = Vec::new();
    for path in &modules {
        let module = path.strip_prefix(&engine).unwrap().display().to_string();
        let text = std::fs::read_to_string(path).expect("the module exists");
        let allowed: Vec<&str> = ALLOWED
            .iter()
            .filter(|(file, _)| *file == module)
            .map(|(_, io)| *io)
            .collect();
        let io = io_in(&text, &allowed).unwrap_or_else(|e| panic!("{module}: {e}"));
        for (io, named) in io {
            found.push(format!("{module}: {io}: {named}"));
        }
    }
    assert!(
        found.is_empty(),
        "I/O in deciding code:\n{}",
        found.join("\n")
    );
}

/// The check reads Rust, not text: a `use` group, a leading `::`, a rename, a path in a macro
/// and a name brought in by an earlier `use` are all seen; comments, strings and look-alike
/// names are not I/O.
#[test]
fn no_spelling_hides_io_from_the_check() {
    let io = |source: &str| -> Vec<String> {
        io_in(source, &[])
            .expect("parses")
            .into_iter()
            .map(|(io, _)| io)
            .collect()
    };
    assert_eq!(io("use std::{fs, process};"), ["std::fs", "std::process"]);
    assert_eq!(
        io("use std::{collections::BTreeMap, io::{self, Read}};"),
        ["std::io", "std::io"]
    );
    assert_eq!(
        io("fn f() { let _ = ::std::fs::read(\"x\"); }"),
        ["std::fs"]
    );
    assert_eq!(io("use std::env as environment;"), ["std::env"]);
    assert_eq!(io("use std::thread::*;"), ["std::thread"]);
    assert_eq!(
        io("use std::time::Instant; fn f() { let _ = Instant::now(); }"),
        ["std::time::Instant", "Instant"]
    );
    assert_eq!(
        io("fn f() { tracing::info!(\"{:?}\", std::env::var(\"HOME\")); }"),
        ["std::env"]
    );
    assert_eq!(io("fn f(tx: tokio::sync::mpsc::Sender<u8>) {}"), ["tokio"]);
    assert!(
        io("// std::fs in a comment\n/// and `std::process` in a doc\nuse std::collections::BTreeMap;\nuse std::time::Duration;\nconst S: &str = \"std::net\";\nfn instantly() {}").is_empty(),
        "comments, strings and look-alike names are not I/O"
    );
    assert_eq!(io("fn f() -> u64 { rand::random() }"), ["rand"]);
    assert_eq!(io("use rand::RngExt as _;"), ["rand"]);
    assert_eq!(
        io("fn f() { let _ = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH); }"),
        ["std::time::SystemTime", "std::time::UNIX_EPOCH"]
    );
    assert_eq!(
        io("fn f() { let _ = time::OffsetDateTime::now_utc(); }"),
        ["time"]
    );
    assert_eq!(io("fn f() { let _ = chrono::Utc::now(); }"), ["chrono"]);
    assert_eq!(
        io("use std::collections::{BTreeMap, HashMap};"),
        ["std::collections::HashMap"]
    );
    assert_eq!(io("fn f(m: &HashSet<u8>) {}"), ["HashSet"]);
    assert!(
        io("use std::collections::BTreeSet; use crate::time::UnixMillis; fn f(now: UnixMillis) {}")
            .is_empty(),
        "ordered maps and the time the engine is handed are not I/O"
    );
    assert!(io_in("use std::io::Write;", &["std::io"])
        .unwrap()
        .is_empty());
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
