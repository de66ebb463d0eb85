//! `piw runs prune`: asks the host to remove finished runs, a batch per request, until none
//! that the selectors match is left (the host serves other clients between batches).

use crate::*;

/// Sends `run.prune` until the host says nothing more matches. A dry run collects the whole
/// list page by page and changes nothing.
pub(crate) fn run(paths: &PiwPaths, args: PruneArgs, json: bool) -> Result<(), CliError> {
    let PruneArgs {
        older_than: older_than_ms,
        status: statuses,
        keep,
        dry_run,
        json: _,
    } = args;
    let mut client = connect(paths)?;
    let request = |cursor| {
        RequestBody::RunPrune(payload::RunPrune {
            older_than_ms,
            statuses: (!statuses.is_empty()).then(|| statuses.clone()),
            keep,
            dry_run: Some(dry_run),
            limit: None,
            cursor,
        })
    };
    let mut run_ids: Vec<String> = Vec::new();
    let mut cursor = None;
    let mut count = None;
    loop {
        let r = client.call(request(cursor.take()))?;
        let (got, more_match) = if dry_run {
            let page: replies::PruneListed = reply(&r)?;
            count = count.or(Some(page.count));
            cursor = page.next_cursor;
            (page.run_ids, page.more)
        } else {
            let batch: replies::Pruned = reply(&r)?;
            (batch.removed, batch.more)
        };
        let progressed = !got.is_empty();
        run_ids.extend(got);
        // A batch that removed nothing while more match: those left are runs whose child is
        // still exiting; a later prune takes them.
        let more = more_match && progressed;
        if !more || (dry_run && cursor.is_none()) {
            break;
        }
    }
    let body = if dry_run {
        json!({ "dry_run": true, "count": count.unwrap_or(run_ids.len() as u64),
                "run_ids": run_ids })
    } else {
        json!({ "dry_run": false, "removed": run_ids.len(), "run_ids": run_ids })
    };
    print(&body, json, |b| {
        if dry_run {
            format!("would remove {} finished run(s)", b["count"])
        } else {
            format!("removed {} finished run(s)", b["removed"])
        }
    });
    Ok(())
}
