//! `piw run wait` (and `piw run start --wait`): until the run ends or stops for review, through
//! a host that went away meanwhile.

use super::status_request;
use crate::*;
use piw_host::store::RunStatus;

pub(crate) fn run(
    paths: &PiwPaths,
    client: BlockingClient,
    run_id: &str,
    timeout: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let deadline = timeout.map(|s| std::time::Instant::now() + Duration::from_secs(s));
    wait_for_run(paths, client, run_id, json, deadline)
}

/// How long `--wait` waits, after the run ended, for its last child to exit: the host's kill
/// grace (2 s) twice, for a child that lingers and is stopped, and margin.
const CHILD_EXIT_WAIT: Duration = Duration::from_secs(10);

/// `status` of the ended `run_id`, read again until its last child has exited (at most
/// [`CHILD_EXIT_WAIT`]); the latest status read when that does not happen in time or a read
/// fails.
fn with_last_child_exited(client: &mut BlockingClient, run_id: &str, status: Receipt) -> Receipt {
    let started = std::time::Instant::now();
    let mut status = status;
    let child_runs = |status: &Receipt| {
        reply::<replies::RunStatusReply>(status)
            .is_ok_and(|s| s.last_child.is_some_and(|child| !child.exited))
    };
    while child_runs(&status) && started.elapsed() < CHILD_EXIT_WAIT {
        std::thread::sleep(Duration::from_millis(25));
        match client.send(status_request(run_id)) {
            Ok(r) => status = r,
            Err(_) => break,
        }
    }
    status
}

pub(crate) fn wait_for_run(
    paths: &PiwPaths,
    mut client: BlockingClient,
    run_id: &str,
    json_out: bool,
    deadline: Option<std::time::Instant>,
) -> Result<(), CliError> {
    subscribe(&mut client, run_id)?;
    let mut announced = std::collections::HashSet::new();
    let mut restarts = 0;
    // The host died under the wait (killed, crashed): runs are durable and a new host recovers
    // them at once, so start one and go on waiting, a few times at most.
    let mut start_again = |e: ClientError| -> Result<BlockingClient, CliError> {
        restarts += 1;
        if restarts > WAIT_HOST_RESTARTS {
            return Err(CliError::Runtime(format!(
                "the host went away again after {WAIT_HOST_RESTARTS} restarts while waiting for run {run_id} ({e}); see {}",
                paths.log.display()
            )));
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(CliError::GaveUpWaiting(format!(
                "gave up waiting for run {run_id} (the host went away: {e})"
            )));
        }
        eprintln!(
            "piw: the host went away ({e}); starting it again to go on waiting for run {run_id}"
        );
        let mut client = connect(paths)?;
        subscribe(&mut client, run_id)?;
        Ok(client)
    };
    loop {
        let r = match client.send(status_request(run_id)) {
            Ok(r) => r,
            Err(e) if host_went_away(&e) => {
                client = start_again(e)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let typed = reply::<replies::RunStatusReply>(&r)?;
        let status = typed.run.status;
        // A run that waits for a person (or is paused) goes on only when someone acts: say so
        // once per thing it waits for, so a long wait never looks like a hang.
        for notice in waiting_notices(&typed) {
            if announced.insert(notice.clone()) {
                eprintln!("piw: {notice}");
            }
        }
        // Terminal, or stopped until a person acts: either way nothing more happens by itself.
        if status.is_terminal() || status == RunStatus::Review {
            // The run ends before its child does: wait (bounded) for that exit, so what is
            // printed has the child's exit and the end of its output.
            let mut r = with_last_child_exited(&mut client, run_id, r);
            if json_out {
                client.resolve_run_status(&mut r.body)?;
            }
            print_reply(&r, json_out, |s: &replies::RunStatusReply| {
                // Only the lines that say something: a completed run has no error, a failed
                // one no result.
                let mut text = format!("run {run_id} {}", status_words(status.as_str()));
                text.push_str(&result_line(s.run.result.as_ref()));
                text.push_str(&why_lines(&s.run));
                text
            })?;
            return if status == RunStatus::Completed {
                Ok(())
            } else if json_out {
                // The status printed says how it ended; stdout stays one JSON document.
                Err(CliError::Reported)
            } else {
                Err(CliError::Runtime(format!(
                    "run {run_id} {}",
                    status_words(status.as_str())
                )))
            };
        }
        match await_news(paths, &mut client, run_id, deadline)? {
            Woke::News => {}
            Woke::GaveUp => {
                return Err(CliError::GaveUpWaiting(format!(
                    "gave up waiting for run {run_id} (the run {})",
                    status_words(status.as_str())
                )))
            }
            // Someone stops the host on purpose: do not start it again behind their back.
            Woke::Failed(ClientError::Closed {
                code: RejectionCode::HostShuttingDown,
                ..
            }) => {
                return Err(CliError::Runtime(format!(
                    "the host is stopping; run {run_id} ({status}) goes on when a host runs again (`piw run status {run_id}`)"
                )));
            }
            Woke::Failed(e) if host_went_away(&e) => client = start_again(e)?,
            Woke::Failed(e) => return Err(e.into()),
        }
    }
}

/// Subscribes `client` to the events of `run_id`: what wakes a wait up.
pub(crate) fn subscribe(client: &mut BlockingClient, run_id: &str) -> Result<Receipt, ClientError> {
    client.call(RequestBody::Subscribe(payload::Subscribe {
        run_id: Some(run_id.to_owned()),
        session_id: None,
        all: None,
    }))
}

/// What [`await_news`] came to.
pub(crate) enum Woke {
    /// Something happened to the run (or may have): read it again.
    News,
    /// The deadline passed first.
    GaveUp,
    /// The connection failed; the caller says what that means for its wait.
    Failed(ClientError),
}

/// Waits, until `deadline` when there is one, for the next event of `run_id`, whose events
/// `client` is subscribed to ([`subscribe`], before the caller read the run: no change can fall
/// between its read and this wait). A subscription the host ended for lagging is made again on
/// a new connection.
pub(crate) fn await_news(
    paths: &PiwPaths,
    client: &mut BlockingClient,
    run_id: &str,
    deadline: Option<std::time::Instant>,
) -> Result<Woke, CliError> {
    if let Some(deadline) = deadline {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(Woke::GaveUp);
        }
        client.set_timeout(Some(left))?;
    }
    match client.next_event() {
        // Any event (or events dropped while a status call was in flight): reread the
        // status once, whatever else was queued meanwhile.
        Ok(_) | Err(ClientError::SubscriptionOverflow) => {
            client.discard_queued_events();
            Ok(Woke::News)
        }
        // The host ended the subscription because it fell too far behind: an ordinary
        // condition under load, so subscribe again on a new connection and reread the
        // status. Any other goodbye (`internal` included) is a real failure.
        Err(ClientError::Closed {
            code: RejectionCode::SubscriberLagged,
            ..
        }) => {
            *client = BlockingClient::connect(paths)?;
            subscribe(client, run_id)?;
            Ok(Woke::News)
        }
        Err(ClientError::TimedOut) if deadline.is_some() => Ok(Woke::GaveUp),
        Err(e) => Ok(Woke::Failed(e)),
    }
}

/// The connection ended without a goodbye: the host process died (or was killed).
pub(crate) fn host_went_away(e: &ClientError) -> bool {
    matches!(e, ClientError::Disconnected | ClientError::Io(_))
}
