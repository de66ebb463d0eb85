//! Which installation a command may use, and run ids as people type them.
//!
//! Only the commands that start something create an installation: `piw host start`, `piw host
//! serve`, `piw run start` and `piw state restore`. Every other command needs one that exists
//! (its state database): on a mistyped `PIW_HOME` it says so and creates nothing, rather than
//! starting a host for an empty installation and reporting that it has no runs.
//!
//! A run id may be given whole, by any unique prefix (`piw run status run-01a2`), by its short
//! id (`piw run status c4230d`: [`short_ids`]) or as `last` (the newest run of this directory):
//! it is looked up in the state database, read-only, so it works the same with or without a
//! host.

use super::*;
use piw_host::store::prelude::*;
use piw_host::store::RunSummary;

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

/// The word that names the newest run started in the current directory (or a directory above
/// it): no run id is `last`, as every one begins `run-`, and no short id, as it is not hex.
pub(crate) const LAST: &str = "last";

/// The fewest characters a short id has. A short id is the end of the run id, which is 16
/// random hex digits (its beginning is the time, which runs of one day share), so 6 of them
/// (24 bits) tell apart any two runs but for one pair in 16 million: an installation of a
/// thousand runs gives a new run a short id that an old one already has about once in 16,000
/// starts, and only then does either's short id grow a character. So the short id shown today
/// still names its run tomorrow, and it is short enough to read off and type; a fixed length
/// could not stay unique, and the shortest unique ending with no floor would be 3 or 4
/// characters that the next run would likely make ambiguous.
pub(crate) const SHORT_ID_MIN: usize = 6;

/// The short id of each of `ids`: its shortest ending of at least [`SHORT_ID_MIN`] characters
/// that no other run of the installation has (the whole id when even that is shared). Read
/// from the database read-only; the ids themselves when it cannot be read.
pub(crate) fn short_ids(paths: &PiwPaths, ids: &[&str]) -> Vec<String> {
    match Store::open_read_only(&paths.db, StoreConfig::default())
        .and_then(|store| short_ids_in(&store, ids))
    {
        Ok(short) => short,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read run ids; showing them whole");
            ids.iter().map(|id| (*id).to_owned()).collect()
        }
    }
}

/// [`short_ids`] from an open store.
pub(crate) fn short_ids_in(
    store: &Store,
    ids: &[&str],
) -> piw_host::store::StoreResult<Vec<String>> {
    let others = store.run_ids_ending_like(ids, SHORT_ID_MIN)?;
    Ok(ids
        .iter()
        .map(|id| shortest_unique_ending(id, &others))
        .collect())
}

/// The decision of [`short_ids`]: `id`'s shortest ending of at least [`SHORT_ID_MIN`]
/// characters that ends none of `others` (`id` itself among them is ignored), made only of
/// hex digits (so it reads back as a short id); else the whole id.
fn shortest_unique_ending(id: &str, others: &[String]) -> String {
    let shared = others
        .iter()
        .filter(|other| other.as_str() != id)
        .map(|other| {
            id.bytes()
                .rev()
                .zip(other.bytes().rev())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    let len = (shared + 1).max(SHORT_ID_MIN);
    let ending = &id[id.len().saturating_sub(len)..];
    if len < id.len() && piw_host::store::is_short_id(ending) {
        ending.to_owned()
    } else {
        id.to_owned()
    }
}

/// The run `given` names: `last`, the newest run of the current directory; else the run with
/// that id, else the one run whose id begins with it, or, for a short id, ends with it. An
/// ambiguous one is a usage error that lists the runs it could mean; one that matches nothing
/// is passed on as it is, so the host reports it as any unknown run.
pub(crate) fn resolve_run_id(paths: &PiwPaths, given: &str) -> Result<String, CliError> {
    let store = match Store::open_read_only(&paths.db, StoreConfig::default()) {
        Ok(store) => store,
        // A database this build cannot read: the host (or the viewer) says why.
        Err(e) if given != LAST => {
            tracing::debug!(error = %e, "cannot read run ids; using the run id as given");
            return Ok(given.to_owned());
        }
        Err(e) => return Err(e.into()),
    };
    if given == LAST {
        let here = std::env::current_dir()?;
        return store
            .newest_run_in(&here.display().to_string())?
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "`last` names the newest run started in this directory or one above it, and no run was started in {}: give a run id (`piw runs` lists them)",
                    here.display()
                ))
            });
    }
    let candidates = store.runs_named_by(given, CANDIDATES_SHOWN + 1)?;
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
    let how = if piw_host::store::is_short_id(given) {
        "ends"
    } else {
        "begins"
    };
    let mut message = format!("run id {given:?} is ambiguous: it {how}");
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
            status: piw_host::store::RunStatus::Queued,
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

    #[test]
    fn a_short_id_is_the_shortest_unique_ending_of_at_least_six_characters() {
        let id = "run-01a251f8cfebf1bb6b58c4230d21";
        let others = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        // Alone, or among runs that share less than six characters of its ending: six.
        assert_eq!(shortest_unique_ending(id, &others(&[id])), "230d21");
        assert_eq!(
            shortest_unique_ending(id, &others(&[id, "run-01a251f8cfeb00000000003d0d21"])),
            "230d21"
        );
        // A run that shares its last six: one character more than they share.
        assert_eq!(
            shortest_unique_ending(id, &others(&[id, "run-01a251f8cfeb0000000004230d21"])),
            "c4230d21"
        );
        // As long as it takes, time digits included; the whole id when no hex ending will do.
        assert_eq!(
            shortest_unique_ending(id, &others(&["run-11a251f8cfebf1bb6b58c4230d21"])),
            "01a251f8cfebf1bb6b58c4230d21"
        );
        assert_eq!(
            shortest_unique_ending(id, &others(&["x-run-01a251f8cfebf1bb6b58c4230d21"])),
            id
        );
    }
}
