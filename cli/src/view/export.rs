//! `piw run graph --format dot|mermaid`: the run's graph with each node's state, as text other
//! tools draw. An included workflow is a cluster (dot) or a subgraph (mermaid).

use super::model::{NodeRow, RunModel};

/// The formats `piw run graph` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphFormat {
    Dot,
    Mermaid,
}

pub fn render(model: &RunModel, format: GraphFormat) -> String {
    match format {
        GraphFormat::Dot => dot(model),
        GraphFormat::Mermaid => mermaid(model),
    }
}

/// A node's state word: its newest attempt's status, or `not_visited`.
fn state(node: &NodeRow) -> &str {
    node.activity
        .as_ref()
        .map_or("not_visited", |a| a.last_status.as_str())
}

fn label(node: &NodeRow) -> (String, String) {
    let kind = node.kind.map_or("unknown", |k| k.as_str());
    let detail = match &node.activity {
        Some(a) => format!("{kind} · {} ×{}", a.last_status, a.visits),
        None => format!("{kind} · not visited"),
    };
    (node.node_id.clone(), detail)
}

/// A DOT string literal.
fn dot_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn dot(m: &RunModel) -> String {
    let name = m
        .graph
        .as_ref()
        .map_or(m.run.workflow_name.as_str(), |g| g.name.as_str());
    let mut out = format!("digraph {} {{\n  node [shape=box];\n", dot_str(name));
    let mut mounts: Vec<&str> = m.nodes.iter().filter_map(|n| n.mount.as_deref()).collect();
    mounts.dedup();
    mounts.sort_unstable();
    mounts.dedup();
    let node_stmt = |n: &NodeRow| {
        let (id, detail) = label(n);
        let mut attrs = format!(
            "label={}, state={}",
            dot_str(&format!("{id}\n{detail}")),
            dot_str(state(n))
        );
        if n.is_current {
            attrs.push_str(", current=\"true\", penwidth=3");
        }
        format!("{} [{attrs}];\n", dot_str(&n.node_id))
    };
    for n in m.nodes.iter().filter(|n| n.mount.is_none()) {
        out.push_str("  ");
        out.push_str(&node_stmt(n));
    }
    for mount in mounts {
        out.push_str(&format!(
            "  subgraph {} {{\n    label={};\n",
            dot_str(&format!("cluster_{mount}")),
            dot_str(mount)
        ));
        for n in m.nodes.iter().filter(|n| n.mount.as_deref() == Some(mount)) {
            out.push_str("    ");
            out.push_str(&node_stmt(n));
        }
        out.push_str("  }\n");
    }
    for n in &m.nodes {
        for (case, to) in &n.next {
            out.push_str(&format!("  {} -> {}", dot_str(&n.node_id), dot_str(to)));
            if let Some(case) = case {
                out.push_str(&format!(" [label={}]", dot_str(case)));
            }
            out.push_str(";\n");
        }
    }
    out.push_str("}\n");
    out
}

/// Mermaid label text: quotes and markup characters as entities.
fn mermaid_str(text: &str) -> String {
    text.replace('&', "#amp;")
        .replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
        .replace('|', "#124;")
}

fn mermaid(m: &RunModel) -> String {
    // Node ids may hold dots (included workflows) that mermaid reads as syntax: each node is
    // `n<index>` with its id in the label.
    let index_of = |id: &str| m.nodes.iter().position(|n| n.node_id == id);
    let mut out = String::from("flowchart TD\n");
    let node_stmt = |i: usize, n: &NodeRow| {
        let (id, detail) = label(n);
        format!(
            "n{i}[\"{}<br/>{}\"]:::{}\n",
            mermaid_str(&id),
            mermaid_str(&detail),
            state(n)
        )
    };
    let mut mounts: Vec<&str> = m.nodes.iter().filter_map(|n| n.mount.as_deref()).collect();
    mounts.sort_unstable();
    mounts.dedup();
    for (i, n) in m
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.mount.is_none())
    {
        out.push_str("  ");
        out.push_str(&node_stmt(i, n));
    }
    for (k, mount) in mounts.iter().enumerate() {
        out.push_str(&format!("  subgraph m{k}[\"{}\"]\n", mermaid_str(mount)));
        for (i, n) in m
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.mount.as_deref() == Some(*mount))
        {
            out.push_str("    ");
            out.push_str(&node_stmt(i, n));
        }
        out.push_str("  end\n");
    }
    for (i, n) in m.nodes.iter().enumerate() {
        for (case, to) in &n.next {
            let Some(j) = index_of(to) else { continue };
            match case {
                Some(case) => out.push_str(&format!("  n{i} -->|{}| n{j}\n", mermaid_str(case))),
                None => out.push_str(&format!("  n{i} --> n{j}\n")),
            }
        }
    }
    for state in [
        "ok",
        "failed",
        "running",
        "waiting",
        "timed_out",
        "interrupted",
        "cancelled",
        "not_visited",
    ] {
        let style = match state {
            "ok" => "stroke:#2a2,stroke-width:2px",
            "failed" | "timed_out" => "stroke:#c22,stroke-width:2px",
            "running" => "stroke:#08c,stroke-width:3px",
            "waiting" => "stroke:#c80,stroke-width:3px",
            _ => "stroke:#888",
        };
        out.push_str(&format!("  classDef {state} {style}\n"));
    }
    if let Some(i) = m.nodes.iter().position(|n| n.is_current) {
        out.push_str(&format!("  style n{i} stroke-width:4px\n"));
    }
    out
}
