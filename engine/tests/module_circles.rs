//! The engine's top-level modules import each other without circles: a module's code may name
//! its own submodules and the modules below it, never one that names it back. The host's
//! memory (`state`, with its parts' types) is a module of its own for this, `dispatch` is only
//! the tables that pick a request kind's handler, which only `turn` calls, and the store's
//! vocabulary names nothing of the protocol (ARCHITECTURE.md, "Engine and driver").
//!
//! Every file is read as Rust (with `syn`): every `use` tree, every path in code and the paths
//! in macro bodies that start with `crate::`, `super::` or `self::`, resolved against the module
//! the file (or an inline `mod` in it) is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module -> the top-level modules its files name (itself excluded).
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the directory reads") {
        let path = entry.expect("the entry reads").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file is, as its path from the crate root (`handlers/run.rs` is
/// `[handlers, run]`; a `mod.rs` is its directory; `lib.rs` is the root, `[]`).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The absolute module paths (from the crate root) that `source`, the file of module
/// `module`, names through `crate::`, `super::` or `self::`.
fn named_modules(module: &[String], source: &str) -> Vec<Vec<String>> {
    use syn::visit::Visit;

    struct Names {
        /// The module the code being read is in (inline `mod`s push onto the file's).
        module: Vec<String>,
        found: Vec<Vec<String>>,
    }
    impl Names {
        fn add(&mut self, segments: &[String]) {
            let mut base = match segments.first().map(String::as_str) {
                Some("crate") => Vec::new(),
                Some("super") | Some("self") => self.module.clone(),
                _ => return,
            };
            let mut rest = segments;
            if rest[0] == "crate" || rest[0] == "self" {
                rest = &rest[1..];
            }
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            self.found.push(base);
        }
        fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
            match tree {
                syn::UseTree::Path(p) => {
                    prefix.push(p.ident.to_string());
                    self.use_tree(prefix, &p.tree);
                    prefix.pop();
                }
                syn::UseTree::Name(n) => {
                    prefix.push(n.ident.to_string());
                    self.add(&prefix.clone());
                    prefix.pop();
                }
                syn::UseTree::Rename(r) => {
                    prefix.push(r.ident.to_string());
                    self.add(&prefix.clone());
                    prefix.pop();
                }
                syn::UseTree::Glob(_) => self.add(&prefix.clone()),
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
            for tt in tokens {
                match tt {
                    proc_macro2::TokenTree::Ident(ident) => {
                        if colons != 2 && !path.is_empty() {
                            self.add(&std::mem::take(&mut path));
                        }
                        path.push(ident.to_string());
                        colons = 0;
                    }
                    proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' => colons += 1,
                    other => {
                        if !path.is_empty() {
                            self.add(&std::mem::take(&mut path));
                        }
                        colons = 0;
                        if let proc_macro2::TokenTree::Group(g) = other {
                            self.tokens(g.stream());
                        }
                    }
                }
            }
            if !path.is_empty() {
                self.add(&path);
            }
        }
    }
    impl<'ast> Visit<'ast> for Names {
        fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
            self.module.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.module.pop();
        }
        fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
            self.use_tree(&mut Vec::new(), &item.tree);
        }
        fn visit_path(&mut self, path: &'ast syn::Path) {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.add(&segments);
            syn::visit::visit_path(self, path);
        }
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            self.tokens(mac.tokens.clone());
            syn::visit::visit_macro(self, mac);
        }
    }
    let file = syn::parse_file(source).expect("the engine's files parse");
    let mut names = Names {
        module: module.to_vec(),
        found: Vec::new(),
    };
    names.visit_file(&file);
    names.found
}

/// The import graph of the modules directly under `parent` (the crate's top-level modules for
/// `[]`) in the crate whose sources are `src`: each node is one of them with its own
/// submodules; what they name of `parent` itself (its `mod.rs`) is no edge, since a module
/// and its own submodules may name each other.
fn import_graph(src: &Path, parent: &[&str]) -> Graph {
    let depth = parent.len();
    let under = |module: &[String]| {
        module.len() > depth && module[..depth].iter().zip(parent).all(|(a, b)| a == b)
    };
    let mut files = Vec::new();
    rust_files(&src.join(parent.join("/")), &mut files);
    let modules: Vec<(PathBuf, Vec<String>)> = files
        .into_iter()
        .map(|file| {
            let module = module_of(file.strip_prefix(src).expect("under src"));
            (file, module)
        })
        .filter(|(_, module)| under(module))
        .collect();
    let nodes: BTreeSet<String> = modules.iter().map(|(_, m)| m[depth].clone()).collect();
    let mut graph = Graph::new();
    for (file, module) in &modules {
        let own = &module[depth];
        let source = std::fs::read_to_string(file).expect("the file reads");
        let edges = graph.entry(own.clone()).or_default();
        for named in named_modules(module, &source) {
            if under(&named) && named[depth] != *own && nodes.contains(&named[depth]) {
                edges.insert(named[depth].clone());
            }
        }
    }
    graph
}

/// The engine's sources.
fn engine_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The import graph of the engine's top-level modules.
fn engine_graph() -> Graph {
    import_graph(&engine_src(), &[])
}

/// The circles of `graph`: its strongly connected sets of more than one module.
fn circles(graph: &Graph) -> Vec<BTreeSet<String>> {
    let reachable = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(module) = todo.pop() {
            for next in graph.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reachable(m))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (module, from_it) in &reach {
        if found.iter().any(|c| c.contains(*module)) || !from_it.contains(*module) {
            continue;
        }
        let circle: BTreeSet<String> = from_it
            .iter()
            .filter(|other| reach.get(other).is_some_and(|r| r.contains(*module)))
            .cloned()
            .collect();
        found.push(circle);
    }
    found
}

/// The modules of a circle each name, inside it: what to untangle.
fn describe(graph: &Graph, circle: &BTreeSet<String>) -> String {
    circle
        .iter()
        .map(|m| {
            let inside: Vec<&String> = graph[m].iter().filter(|n| circle.contains(*n)).collect();
            format!("  {m} -> {inside:?}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_graph_sees_the_engines_imports() {
    // The reader must see what is there, or the test below would pass on an empty graph.
    let graph = engine_graph();
    assert!(graph.len() >= 15, "top-level modules: {graph:?}");
    assert!(
        graph["turn"].contains("dispatch"),
        "turn -> {:?}",
        graph["turn"]
    );
    assert!(
        graph["dispatch"].contains("handlers"),
        "dispatch -> {:?}",
        graph["dispatch"]
    );
    let in_macro = named_modules(&["a".to_owned()], "fn f() { m!(super::b::c); }");
    assert_eq!(in_macro, vec![vec!["b".to_owned(), "c".to_owned()]]);
    let nested = named_modules(
        &["a".to_owned(), "b".to_owned()],
        "mod tests { use super::super::c::D; use crate::e::{f, g::H}; }",
    );
    assert_eq!(
        nested[0],
        vec!["a".to_owned(), "c".to_owned(), "D".to_owned()]
    );
    assert_eq!(
        nested[2],
        vec!["e".to_owned(), "g".to_owned(), "H".to_owned()]
    );
}

/// Fails with the circles of `graph`, each module with what it names inside its circle.
fn assert_no_circle(what: &str, graph: &Graph) {
    let found = circles(graph);
    let report: Vec<String> = found.iter().map(|c| describe(graph, c)).collect();
    assert!(
        found.is_empty(),
        "{what} import each other in a circle:\n{}",
        report.join("\n\n")
    );
}

#[test]
fn the_engines_modules_import_each_other_without_circles() {
    assert_no_circle("the engine's top-level modules", &engine_graph());
}

#[test]
fn the_protocols_files_import_each_other_without_circles() {
    let graph = import_graph(&engine_src(), &["protocol"]);
    assert!(graph.len() >= 9, "the protocol's files: {graph:?}");
    assert_no_circle("the protocol's files", &graph);
}

/// The host's driver is in `piw-host`, whose sources sit beside this crate's
/// (`host/src/driver`): its tasks name what they send each other from `driver::queues`, and a
/// helper process's life from `driver::helper`, none from another task's module.
#[test]
fn the_drivers_files_import_each_other_without_circles() {
    let core_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src");
    let graph = import_graph(&core_src, &["driver"]);
    assert!(graph.len() >= 12, "the driver's files: {graph:?}");
    assert!(graph["store_thread"].contains("outbox"), "{graph:?}");
    assert_no_circle("the driver's files", &graph);
}
