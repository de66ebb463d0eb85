//! `piw repair`: the host repairs what has exact durable evidence.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let r = connect(paths)?.call(RequestBody::Repair)?;
    let report = reply::<replies::RepairReply>(&r)?.report;
    print(&r.body, json, |_| {
        format!(
            "repaired {} finding(s); {} left for review",
            report.repaired.len(),
            report.left_for_review.len()
        )
    });
    Ok(())
}
