//! `piw run graph`: a run's graph with each node's state (read-only, like `piw view`).

use crate::*;

/// Answered before (and without) a host: read-only, like `piw view`, so it is answered before (and without) a host.
/// With `--json`, `{"run_id", "format", "graph"}` (the graph as text).
pub(crate) fn run(
    paths: &PiwPaths,
    run_id: &str,
    format: view::export::GraphFormat,
    json_out: bool,
) -> Result<(), CliError> {
    let graph = view::graph(paths, run_id, format)?;
    if json_out {
        let format = clap::ValueEnum::to_possible_value(&format)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        print(
            &json!({ "run_id": run_id, "format": format, "graph": graph }),
            true,
            |_| String::new(),
        );
    } else {
        crate::emit(&graph);
    }
    Ok(())
}
