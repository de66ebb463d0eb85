//! `piw diagnose`: contradictions in the durable state (read-only; never starts a host), exit 3
//! when there are any.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, json: bool) -> Result<(), CliError> {
    let body = diagnose(paths)?;
    let found = body["findings"].as_array().is_some_and(|f| !f.is_empty());
    print(&body, json, |b| {
        let findings = b["findings"].as_array().cloned().unwrap_or_default();
        if findings.is_empty() {
            return "no contradictions".into();
        }
        findings
            .iter()
            .map(|f| {
                let ids = f["ids"]
                    .as_array()
                    .filter(|ids| !ids.is_empty())
                    .map(|ids| {
                        let ids: Vec<String> = ids.iter().map(str_of).collect();
                        format!(" ({})", ids.join(", "))
                    })
                    .unwrap_or_default();
                // A finding about the whole file names no run.
                let run = match f["run_id"].as_str() {
                    Some("") => String::new(),
                    _ => format!(" run {}", str_of(&f["run_id"])),
                };
                format!("{}{run} {}{ids}", str_of(&f["code"]), str_of(&f["detail"]),)
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    if found {
        Err(CliError::Findings)
    } else {
        Ok(())
    }
}
