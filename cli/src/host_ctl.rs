//! `piw host` and `piw diagnose`: starting, stopping and questioning the host, with bounds, so
//! that a host that accepts but never answers cannot hang the command.

use super::*;
use piw_host::driver::{installation_held, lock_holder};
use piw_host::store::prelude::*;
use piw_host::store::Finding;

/// One host-control call, bounded by [`HOST_ANSWER_TIMEOUT`]; a host that does not answer in
/// time is named by the pid in its lock file.
pub(crate) fn host_call(
    paths: &PiwPaths,
    client: &mut BlockingClient,
    body: RequestBody,
) -> Result<Receipt, CliError> {
    client.set_timeout(Some(HOST_ANSWER_TIMEOUT))?;
    client.call(body).map_err(|e| match e {
        ClientError::TimedOut => not_answering(paths),
        other => other.into(),
    })
}

/// A host that accepts connections but did not answer within [`HOST_ANSWER_TIMEOUT`], named
/// by the pid in its lock file.
pub(crate) fn not_answering(paths: &PiwPaths) -> CliError {
    let (host, kill) = match &lock_holder(paths) {
        Some(pid) => (
            format!("the piw host (pid {pid})"),
            format!("; `kill {pid}` asks it to stop"),
        ),
        None => ("the piw host".to_owned(), String::new()),
    };
    CliError::Runtime(format!(
        "{host} did not answer within {} s; it may be stuck (see {}){kill}",
        HOST_ANSWER_TIMEOUT.as_secs(),
        paths.log.display()
    ))
}

/// `piw host stop`: asks the host to stop and returns once its process has ended. A host that
/// is already stopping (a SIGTERM, another `piw host stop`) has removed its socket but still
/// holds the installation lock while it finishes: that one is waited for too, so whatever
/// runs next (`piw state reset --yes`) finds the installation free. Returns whether a host
/// was running.
pub(crate) fn stop_host(paths: &PiwPaths) -> Result<bool, CliError> {
    let started = std::time::Instant::now();
    let wait = Duration::from_millis(STOP_WAIT_MS);
    let mut announced = false;
    // The process that held the installation, last seen.
    let mut holder_pid: Option<u32> = None;
    loop {
        if let Ok(mut client) = BlockingClient::connect(paths) {
            return stop_answering_host(paths, &mut client);
        }
        if !installation_held(paths) {
            // Stopped means the process ended, as for a host that answers: it lets go of the
            // lock a moment before it exits.
            while let Some(pid) = holder_pid {
                if !piw_host::supervise::process_alive(pid) || started.elapsed() >= wait {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            return Ok(announced);
        }
        // Held without a socket: a host that is stopping (or starting: it answers soon), or
        // a short `piw state reset` / `piw diagnose`.
        let holder = lock_holder(paths);
        holder_pid = holder.as_deref().and_then(|p| p.parse().ok());
        if started.elapsed() >= wait {
            return Err(CliError::Runtime(format!(
                "process {} still holds {} after {} s and no host answers; see {}",
                holder.as_deref().unwrap_or("?"),
                paths.lock.display(),
                STOP_WAIT_MS / 1000,
                paths.log.display()
            )));
        }
        if !announced {
            announced = true;
            eprintln!(
                "piw: waiting for process {} (a host that is stopping) to let go of {}",
                holder.as_deref().unwrap_or("?"),
                paths.lock.display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Stops the host `client` is connected to and waits for its process to end.
pub(crate) fn stop_answering_host(
    paths: &PiwPaths,
    client: &mut BlockingClient,
) -> Result<bool, CliError> {
    let status = host_call(paths, client, RequestBody::HostStatus)?;
    let pid = reply::<replies::HostStatusReply>(&status)?.pid;
    match client.call(RequestBody::HostStop) {
        Ok(_) => {}
        // It began to stop between the two calls: wait for it all the same.
        Err(ClientError::Rejected(r)) if r.code == RejectionCode::HostShuttingDown => {}
        Err(ClientError::TimedOut) => return Err(not_answering(paths)),
        Err(e) => return Err(e.into()),
    }
    // The socket goes first; the host then finishes its connections, stops its children and
    // makes its last commits durable. Stopped means the process ended.
    for _ in 0..STOP_WAIT_MS / 25 {
        if !piw_host::supervise::process_alive(pid) {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(CliError::Runtime(format!(
        "the host did not stop within {} s",
        STOP_WAIT_MS / 1000
    )))
}

/// The `diagnose` receipt body. Through the running host when one answers; otherwise straight
/// from the database, read-only, while holding the installation lock (no host starts
/// meanwhile). While another process holds the lock (a host that is starting or stopping, a
/// reset) it waits for that host to answer or the holder to let go. Diagnosing never starts a
/// host: a host's start-up recovery would change the very state being diagnosed, and a host
/// that cannot start is when diagnosis matters most.
pub(crate) fn diagnose(paths: &PiwPaths) -> Result<Vec<Finding>, CliError> {
    let mut findings = diagnose_state(paths)?;
    // A database with another name is read, not refused (the lock keeps other hosts away
    // meanwhile, and a person must be able to look at and back up the runs), but it is what
    // is wrong: no host starts on it.
    if let Some(links) = piw_host::store::files::database_links(&paths.db).filter(|&n| n > 1) {
        let refusal = HostError::DatabaseHasLinks {
            db: paths.db.display().to_string(),
            links,
        };
        findings.insert(
            0,
            file_finding(
                piw_host::store::files::DATABASE_HAS_LINKS,
                refusal.to_string(),
            ),
        );
    }
    Ok(findings)
}

/// A `diagnose` finding about the database's files, not a run's rows.
fn file_finding(code: &'static str, detail: String) -> Finding {
    Finding {
        code: code.into(),
        run_id: String::new(),
        ids: Vec::new(),
        detail,
        repairable: false,
    }
}

/// [`diagnose`]'s findings in the state itself.
fn diagnose_state(paths: &PiwPaths) -> Result<Vec<Finding>, CliError> {
    let started = std::time::Instant::now();
    loop {
        if let Ok(mut client) = BlockingClient::connect(paths) {
            client.set_timeout(Some(HOST_ANSWER_TIMEOUT))?;
            match client.call(RequestBody::Diagnose) {
                Ok(r) => return Ok(reply::<replies::DiagnoseReply>(&r)?.findings),
                // A host that accepts but never answers (stopped, stuck on a disk).
                Err(ClientError::TimedOut) => return Err(not_answering(paths)),
                // The host is stopping (or just died): read the database once it let go.
                Err(
                    ClientError::Closed {
                        code: RejectionCode::HostShuttingDown,
                        ..
                    }
                    | ClientError::Disconnected,
                ) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !paths.db.exists() {
            // Nothing to diagnose, and nothing (not even PIW_HOME) is created to find that out.
            return Ok(Vec::new());
        }
        let _lock = match piw_host::driver::lock_installation_with(
            paths,
            piw_host::driver::Links::Allow,
        ) {
            Ok(lock) => lock,
            // Another process holds the installation: a host that is starting (ask it once it
            // answers) or stopping, or a `piw state reset`. Wait for either, never starting a
            // host ourselves.
            Err(HostError::AlreadyRunning { pid, .. }) => {
                if started.elapsed() >= Duration::from_millis(STOP_WAIT_MS) {
                    return Err(CliError::Runtime(format!(
                        "process {pid} still holds {} after {} s and no host answers (a host that is stopping, or `piw state reset`); try again once it lets go",
                        paths.lock.display(),
                        STOP_WAIT_MS / 1000
                    )));
                }
                std::thread::sleep(Duration::from_millis(25));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let store = match Store::open_read_only(&paths.db, StoreConfig::default()) {
            Ok(store) => store,
            // A link, FIFO or second name beside the database: what is wrong is that file,
            // said by name, not the pages SQLite would misread through it.
            Err(e @ piw_host::store::StoreError::UnsafeFile { .. }) => {
                return Ok(vec![file_finding(
                    piw_host::store::files::DATABASE_FILE_UNSAFE,
                    e.to_string(),
                )])
            }
            Err(e) => return Err(e.into()),
        };
        return Ok(store.diagnose(store.now_ms())?);
    }
}
