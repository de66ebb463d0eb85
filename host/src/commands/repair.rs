//! `piw repair`: the host repairs what has exact durable evidence.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let r = connect(paths)?.call(RequestBody::Repair)?;
    print(&r.body, json, |b| {
        format!(
            "repaired {} finding(s); {} left for review",
            b["report"]["repaired"].as_array().map_or(0, |a| a.len()),
            b["report"]["left_for_review"]
                .as_array()
                .map_or(0, |a| a.len())
        )
    });
    Ok(())
}
