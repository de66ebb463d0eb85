//! `piw run start`: a run of a workflow found by name, `builtin:` id or path; with `--wait`,
//! until it ends.

use crate::*;

pub(crate) fn run(
    paths: &PiwPaths,
    mut client: BlockingClient,
    args: StartArgs,
) -> Result<(), CliError> {
    let StartArgs {
        workflow,
        input,
        session,
        detached,
        wait,
        timeout,
        idempotency_key,
        json,
    } = args;
    // A name is found like the Pi extension finds it (the project's .pi/workflows,
    // then ~/.pi/agent/workflows); the caller's directory goes with the file, so the
    // host resolves a relative path against it and the run works there.
    let cwd = std::env::current_dir()?;
    let user_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let builtins = resolve::builtins_dir();
    let file = resolve::resolve_workflow(&workflow, &cwd, &user_home, builtins.as_deref())?;
    let mut start = piw_host::client::run_start_here(&file, input)?;
    start.session_id = session;
    if detached {
        start.execution_mode = Some(piw_host::store::ExecutionMode::Detached);
    }
    let mut request = Request::new(piw_host::ids::new_id("cli"), RequestBody::RunStart(start));
    if let Some(key) = idempotency_key {
        request = request.with_idempotency_key(key);
    }
    let r = client.send(request)?;
    let run_id = reply::<replies::RunQueued>(&r)?.run_id;
    // The short id, which every command takes for the run, beside the id.
    let short_id = short_ids(paths, &[run_id.as_str()]).remove(0);
    if wait {
        // The run id first (on stderr, so `--json` output stays one document): a wait
        // may be long, for example on a step that needs an answer.
        eprintln!(
            "piw: started run {run_id} (short id {short_id}); waiting for it to finish (interrupting the wait leaves the run going)"
        );
        return super::wait::run(paths, client, &run_id, timeout, json);
    }
    let mut body = r.body;
    body["short_id"] = json!(short_id);
    print_receipt(&body, json)
}
