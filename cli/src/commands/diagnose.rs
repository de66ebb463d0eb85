//! `piw diagnose`: contradictions in the durable state (read-only; never starts a host), exit 3
//! when there are any.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let findings = diagnose(paths)?;
    print(&json!({ "findings": findings }), json, |_| {
        if findings.is_empty() {
            return "no contradictions".into();
        }
        findings
            .iter()
            .map(|f| {
                let ids = if f.ids.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", f.ids.join(", "))
                };
                // A finding about the whole file names no run.
                let run = if f.run_id.is_empty() {
                    String::new()
                } else {
                    format!(" run {}", f.run_id)
                };
                format!("{}{run} {}{ids}", f.code, f.detail)
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    if !findings.is_empty() {
        Err(CliError::Findings)
    } else {
        Ok(())
    }
}
