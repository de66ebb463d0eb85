//! Which installation a command may use, and run ids as people type them.
//!
//! Only the commands that start something create an installation: `piw host start`, `piw host
//! serve`, `piw run start` and `piw state restore`. Every other command needs one that exists
//! (its state database): on a mistyped `PIW_HOME` it says so and creates nothing, rather than
//! starting a host for an empty installation and reporting that it has no runs.
//!
//! A run id may be given by any unique prefix (`piw run status 7f3a`): it is looked up in the
//! state database, read-only, so it works the same with or without a host.

use super::*;
use piw_core::store::RunSummary;

/// How many runs an ambiguous prefix lists.
const CANDIDATES_SHOWN: u32 = 10;

/// Whether `cmd` works only on an installation that exists. The commands that may create one
/// (and those that need none: `host stop`, `state`, `completions`, `man`) do not.
pub(crate) fn needs_installation(cmd: &Cmd) -> bool {
    match cmd {
        Cmd::Host(HostCmd::Start | HostCmd::Serve | HostCmd::Stop) => false,
        Cmd::Host(HostCmd::Status { .. }) => true,
        Cmd::Run(RunCmd::Start(_)) => false,
        Cmd::Run(_) => true,
        Cmd::State(_) => false,
        Cmd::Runs(_) | Cmd::Diagnose { .. } | Cmd::Repair { .. } | Cmd::View(_) => true,
        Cmd::Logs(_) => true,
        Cmd::Channel(_) => true,
        Cmd::Completions(_) | Cmd::Man(_) => false,
    }
}

/// Refuses an installation without a state database: nothing has run there (a mistyped
/// `PIW_HOME`?), so there is nothing to read, and nothing is created to find that out.
pub(crate) fn require_installation(paths: &PiwPaths) -> Result<(), CliError> {
    if paths.db.exists() {
        return Ok(());
    }
    Err(CliError::NoInstallation(format!(
        "there is no piw installation at {} (no piw state database at {}); check PIW_HOME: `piw run start` or `piw host start` creates one",
        paths.home.display(),
        paths.db.display()
    )))
}

/// The run `given` names: the run with that id, else the one run whose id begins with it. An
/// ambiguous prefix is a usage error that lists the runs it could mean; a prefix that matches
/// nothing is passed on as it is, so the host reports it as any unknown run.
pub(crate) fn resolve_run_id(paths: &PiwPaths, given: &str) -> Result<String, CliError> {
    let store = match Store::open_read_only(&paths.db, StoreConfig::default()) {
        Ok(store) => store,
        // A database this build cannot read: the host (or the viewer) says why.
        Err(e) => {
            tracing::debug!(error = %e, "cannot read run ids; using the run id as given");
            return Ok(given.to_owned());
        }
    };
    let candidates = store.runs_with_id_prefix(given, CANDIDATES_SHOWN + 1)?;
    match pick(given, &candidates) {
        Picked::One(run_id) => Ok(run_id),
        Picked::Unknown => Ok(given.to_owned()),
        // Among more runs than were listed, the exact id may be one left out.
        Picked::Ambiguous if store.run_state(given).is_ok() => Ok(given.to_owned()),
        Picked::Ambiguous => Err(ambiguous(given, &candidates)),
    }
}

enum Picked {
    One(String),
    Unknown,
    Ambiguous,
}

/// The decision: the exact id wins, a single match is it, several are ambiguous.
fn pick(given: &str, candidates: &[RunSummary]) -> Picked {
    if candidates.iter().any(|r| r.run_id == given) {
        return Picked::One(given.to_owned());
    }
    match candidates {
        [] => Picked::Unknown,
        [one] => Picked::One(one.run_id.clone()),
        _ => Picked::Ambiguous,
    }
}

fn ambiguous(given: &str, candidates: &[RunSummary]) -> CliError {
    let now = human::now_ms();
    let shown = &candidates[..candidates.len().min(CANDIDATES_SHOWN as usize)];
    let mut message = format!("run id {given:?} is ambiguous: it begins");
    if candidates.len() > shown.len() {
        message.push_str(&format!(" more than {CANDIDATES_SHOWN} runs, the newest"));
    } else {
        message.push_str(&format!(" {} runs", candidates.len()));
    }
    for r in shown {
        message.push_str(&format!(
            "\n  {}  {}  {}  started {}",
            r.run_id,
            r.status,
            r.workflow_name,
            human::ago(u64::try_from(r.created_at).unwrap_or(0), now)
        ));
    }
    message.push_str("\ngive more of the id");
    CliError::Ambiguous {
        message,
        candidates: shown.iter().map(|r| json!(r.run_id)).collect(),
    }
}

/// The run id a run command names, to be resolved before it is sent.
pub(crate) fn run_id_of(cmd: &mut RunCmd) -> Option<&mut String> {
    match cmd {
        RunCmd::Start(_) => None,
        RunCmd::Graph { run_id, .. }
        | RunCmd::Status { run_id, .. }
        | RunCmd::Value { run_id, .. }
        | RunCmd::Pause { run_id, .. }
        | RunCmd::Detach { run_id, .. }
        | RunCmd::Resume { run_id, .. }
        | RunCmd::Cancel { run_id, .. }
        | RunCmd::Answer(AnswerArgs { run_id, .. })
        | RunCmd::Decide(DecideArgs { run_id, .. })
        | RunCmd::Submit(SubmitArgs { run_id, .. })
        | RunCmd::Wait { run_id, .. }
        | RunCmd::Retry(RetryArgs { run_id, .. })
        | RunCmd::ResolveEffect(ResolveEffectArgs { run_id, .. }) => Some(run_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(run_id: &str) -> RunSummary {
        RunSummary {
            run_id: run_id.into(),
            workflow_name: "w".into(),
            origin_session: None,
            status: piw_core::store::RunStatus::Queued,
            paused: false,
            current_node: None,
            revision: 1,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn the_exact_id_wins_one_match_is_it_and_several_are_ambiguous() {
        let (ab, abc) = (summary("run-ab"), summary("run-abc"));
        assert!(
            matches!(pick("run-ab", &[abc.clone(), ab.clone()]), Picked::One(id) if id == "run-ab")
        );
        assert!(
            matches!(pick("run-abc", std::slice::from_ref(&abc)), Picked::One(id) if id == "run-abc")
        );
        assert!(matches!(pick("run-a", &[abc, ab]), Picked::Ambiguous));
        assert!(matches!(pick("run-z", &[]), Picked::Unknown));
    }
}
