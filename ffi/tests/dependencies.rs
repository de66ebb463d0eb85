//! The bindings link the client side only: libpiw (`piw-ffi`) and the Node addon (`piw-node`)
//! build on `piw-client`, and their normal dependency graphs hold neither the host (`piw-host`)
//! nor SQLite, nor tokio's process and signal handling (what the host's supervision uses).
//! Asked of `cargo tree`, which resolves each package's features on its own, as a build of that
//! package alone does.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Packages that belong to the host: none may be linked into a binding.
const SERVER_PACKAGES: [&str; 3] = ["piw-host", "rusqlite", "libsqlite3-sys"];

/// tokio features only a server needs (children and their signals).
const SERVER_TOKIO_FEATURES: [&str; 2] = ["process", "signal"];

/// The packages of `package`'s normal dependency graph (itself included), each with the
/// features it is built with, from `cargo tree -e normal`.
fn normal_graph(package: &str) -> BTreeMap<String, Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            package,
            "-e",
            "normal",
        ])
        .args(["--prefix", "none", "--format", "{p}|{f}"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut graph = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let line = line.trim_end_matches(" (*)");
        let (name_version, features) = line.split_once('|').expect("a `{p}|{f}` line");
        let name = name_version.split_whitespace().next().unwrap().to_owned();
        let features = features
            .split(',')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        graph.insert(name, features);
    }
    graph
}

fn assert_client_only(package: &str) {
    let graph = normal_graph(package);
    // The graph was read: the binding and the client it builds on are in it.
    for expected in [package, "piw-client", "piw-engine", "tokio"] {
        assert!(
            graph.contains_key(expected),
            "{expected} missing from {package}'s graph: {:?}",
            graph.keys().collect::<Vec<_>>()
        );
    }
    let server: Vec<&str> = SERVER_PACKAGES
        .into_iter()
        .filter(|p| graph.contains_key(*p))
        .collect();
    assert!(
        server.is_empty(),
        "{package} links the server's {server:?}: depend on piw-client (and piw-engine) only"
    );
    let tokio_server: Vec<&str> = SERVER_TOKIO_FEATURES
        .into_iter()
        .filter(|f| graph["tokio"].iter().any(|g| g == f))
        .collect();
    assert!(
        tokio_server.is_empty(),
        "{package} builds tokio with the server's features {tokio_server:?}"
    );
}

#[test]
fn libpiw_links_no_server() {
    assert_client_only("piw-ffi");
}

#[test]
fn node_addon_links_no_server() {
    assert_client_only("piw-node");
}
