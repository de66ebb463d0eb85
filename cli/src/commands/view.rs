//! `piw view`: the live viewer, or one frame with `--once`. Read-only: it never starts a host.

use crate::*;

pub(crate) fn run(paths: &PiwPaths, args: ViewArgs, json: bool) -> Result<(), CliError> {
    let ViewArgs {
        run_id,
        once,
        status,
        session,
    } = args;
    let filter = piw_host::store::RunFilter { status, session };
    let run_id = run_id
        .map(|given| resolve_run_id(paths, &given))
        .transpose()?;
    if once {
        let frame = view::once(paths, filter, run_id.as_deref(), view::ONCE_SIZE)?;
        if json {
            print(&json!({ "frame": frame }), true, |_| String::new());
        } else {
            emit(&frame);
        }
    } else if json {
        return Err(CliError::Usage(
            "the live viewer draws a terminal; `piw view --once --json` prints one frame as JSON"
                .into(),
        ));
    } else {
        view::interactive(paths, filter, run_id.as_deref())?;
    }
    Ok(())
}
