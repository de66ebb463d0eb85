//! `piw run <command>`: each resolves its run id (a prefix a person typed) and, but for the
//! read-only `run graph`, talks to the host, started on demand.

use crate::*;

mod answer;
mod cancel;
mod decide;
mod detach;
mod graph;
mod pause;
mod resolve_effect;
mod resume;
mod retry;
mod start;
mod status;
mod submit;
mod value;
mod wait;

/// `piw run <command>`; `json` is `--json` (which `run graph` has no field for).
pub(crate) fn run(paths: &PiwPaths, mut cmd: RunCmd, json: bool) -> Result<(), CliError> {
    if let Some(run_id) = run_id_of(&mut cmd) {
        *run_id = resolve_run_id(paths, run_id)?;
    }
    if let RunCmd::Graph { run_id, format } = &cmd {
        return graph::run(paths, run_id, *format, json);
    }
    let mut client = connect(paths)?;
    match cmd {
        RunCmd::Graph { run_id, format } => graph::run(paths, &run_id, format, json),
        RunCmd::Start(args) => start::run(paths, client, args),
        RunCmd::Value { run_id, sha256, .. } => value::run(&mut client, &run_id, &sha256),
        RunCmd::Status { run_id, json } => status::run(&mut client, &run_id, json),
        RunCmd::Pause { run_id, json } => pause::run(&mut client, &run_id, json),
        RunCmd::Detach { run_id, json } => detach::run(&mut client, &run_id, json),
        RunCmd::Resume { run_id, json } => resume::run(&mut client, &run_id, json),
        RunCmd::Cancel { run_id, json } => cancel::run(&mut client, &run_id, json),
        RunCmd::Answer(args) => answer::run(&mut client, args),
        RunCmd::Decide(args) => decide::run(&mut client, args),
        RunCmd::Submit(args) => submit::run(paths, client, args),
        RunCmd::Wait {
            run_id,
            timeout,
            json,
        } => wait::run(paths, client, &run_id, timeout, json),
        RunCmd::Retry(args) => retry::run(&mut client, args),
        RunCmd::ResolveEffect(args) => resolve_effect::run(&mut client, args),
    }
}

/// Who a person's command on a run is from: the login name, kept in the run's events.
pub(crate) fn login_name() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

/// `run.status` of `run_id`, its first page of attempts: what every command that reads a run
/// asks.
pub(crate) fn status_request(run_id: &str) -> Request {
    run_request(run_id, RequestBody::RunStatus(Default::default()))
}
