//! One supervised helper process's life (a detached run's bridge, a decision channel's
//! adapter), and how the supervisor waits for any child while it may be asked to stop it. The
//! helpers' modules (`bridge_launch`, `channel_launch`) run their processes through
//! [`run_helper`]; the supervisor ([`super::supervisor`]) starts their watches.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::store::ChildExitRecord;
use crate::supervise::{self, SpawnSpec, Supervised};

/// How a helper process's stdin is kept.
pub(super) enum HelperStdin {
    /// Closed empty at once (a decision channel's adapter).
    Closed,
    /// Open and empty for its life (a bridge: Pi in RPC mode exits at its end).
    OpenForLife,
}

/// One supervised helper process's life (a detached run's bridge, a decision channel's
/// adapter): spawned, `alongside` called with its pid (its process group) and the future it
/// returns run until it completes or the helper exits, a stop on request (SIGTERM to the
/// group, SIGKILL after the grace). Its exit, or why it could not be started: what a caller
/// reports either way is its own.
pub(super) async fn run_helper<F: Future<Output = ()>>(
    spec: SpawnSpec,
    stdin: HelperStdin,
    stop: mpsc::UnboundedReceiver<Duration>,
    alongside: impl FnOnce(u32) -> F,
) -> Result<ChildExitRecord, supervise::SuperviseError> {
    let (mut child, open_stdin) = match stdin {
        HelperStdin::Closed => (supervise::spawn(spec).await?, None),
        HelperStdin::OpenForLife => {
            let (child, handoff) = supervise::spawn_standby(spec).await?;
            (child, Some(handoff))
        }
    };
    let alongside = alongside(child.pid());
    let exit = wait_or_stop(&mut child, stop, alongside).await;
    drop(open_stdin);
    Ok(exit)
}

/// Waits for `child` to exit, stopping its group when `stop` asks (SIGTERM now, SIGKILL after
/// the grace it sends), while `alongside` runs until it completes. Its exit as stored: how
/// it ended and whether the host stopped it.
pub(super) async fn wait_or_stop(
    child: &mut Supervised,
    mut stop: mpsc::UnboundedReceiver<Duration>,
    alongside: impl Future<Output = ()>,
) -> ChildExitRecord {
    let killer = child.killer();
    let mut reason = "exited";
    let mut alongside = std::pin::pin!(alongside);
    let mut alongside_done = false;
    let exit = loop {
        tokio::select! {
            exit = child.wait() => break exit,
            grace = stop.recv() => match grace {
                Some(grace) => {
                    reason = "stopped by the host";
                    // The exit arrives above.
                    killer.terminate(grace);
                }
                // Nobody can ask us to stop any more; just wait.
                None => break child.wait().await,
            },
            () = &mut alongside, if !alongside_done => alongside_done = true,
        }
    };
    ChildExitRecord {
        exit_code: exit.code,
        signal: exit.signal,
        reason: match (exit.code, exit.signal) {
            (Some(c), _) => format!("{reason} with code {c}"),
            (None, Some(s)) => format!("{reason} by signal {s}"),
            _ => reason.to_owned(),
        },
        stdout_tail: exit.stdout_tail,
        stderr_tail: exit.stderr_tail,
    }
}
