//! `piw runs`: runs, newest first, a page of the host's at a time.

use crate::*;
use piw_host::store::RunRecord;

pub(crate) fn run(paths: &PiwPaths, args: RunsArgs, json: bool) -> Result<(), CliError> {
    let RunsArgs {
        action: _,
        json: _,
        session,
        unfinished,
        status,
        limit,
        all,
        cursor,
    } = args;
    // The host answers a page at a time (as many runs as fit a reply): ask for pages
    // until `limit` runs are here, or every run with `--all`.
    let wanted = if all { u64::MAX } else { u64::from(limit) };
    let mut client = connect(paths)?;
    let mut runs: Vec<RunRecord> = Vec::new();
    let mut cursor = cursor;
    let mut more;
    loop {
        let page_limit = u32::try_from(wanted - runs.len() as u64)
            .unwrap_or(u32::MAX)
            .min(payload::MAX_LIST_RUNS);
        let r = client.call(RequestBody::RunList(payload::RunList {
            limit: Some(page_limit),
            session_id: session.clone(),
            unfinished: unfinished.then_some(true),
            statuses: (!status.is_empty()).then(|| status.clone()),
            cursor: cursor.take(),
            run_id_prefix: None,
        }))?;
        let page: replies::RunListReply = reply(&r)?;
        runs.extend(page.runs);
        more = page.more;
        cursor = page.next_cursor;
        if !more || cursor.is_none() || runs.len() as u64 >= wanted {
            break;
        }
    }
    let next_cursor = cursor.filter(|_| more).map(|c| c.encode());
    if !json && more {
        if let Some(next) = &next_cursor {
            eprintln!(
                "piw: more runs follow: `piw runs --all` lists every one, `--limit N` more, \
                 `--cursor {next}` the ones after these"
            );
        }
    }
    let ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    let short_ids = short_ids(paths, &ids);
    let mut body = json!({ "runs": runs, "more": next_cursor.is_some(),
                           "next_cursor": next_cursor });
    // The times as UTC text beside their Unix milliseconds: absolute, for scripts; and each
    // run's short id, which every command takes for it.
    for (run, short_id) in body["runs"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .zip(&short_ids)
    {
        run["short_id"] = json!(short_id);
        for (ms, text) in [
            ("created_at", "started"),
            ("finished_at", "ended"),
            ("wake_at", "wakes"),
        ] {
            run[text] = run[ms].as_u64().map(human::utc).into();
        }
    }
    let now = human::now_ms();
    print(&body, json, |_| {
        let ago = |ms: Option<i64>| {
            ms.and_then(|ms| u64::try_from(ms).ok())
                .map_or("-".into(), |ms| human::ago(ms, now))
        };
        let rows: Vec<Vec<String>> = runs
            .iter()
            .zip(&short_ids)
            .map(|(run, short_id)| {
                let node = run.current_node.as_deref().unwrap_or("-");
                vec![
                    short_id.clone(),
                    run.status.as_str().to_owned(),
                    run.execution_mode.to_string(),
                    ago(Some(run.created_at)),
                    ago(run.finished_at),
                    run.workflow_name.clone(),
                    match human::coming(run.wake_at, now) {
                        Some(wakes) => format!("{node} · wakes {wakes}"),
                        None => node.to_owned(),
                    },
                ]
            })
            .collect();
        // On a narrow terminal the node gives way first, then the workflow's name.
        crate::table::render(
            &[
                "RUN", "STATUS", "MODE", "STARTED", "ENDED", "WORKFLOW", "NODE",
            ],
            &rows,
            &[6, 5],
            crate::table::terminal_width(),
        )
    });
    Ok(())
}
