//! What wakes the live viewer: keys (read on a thread of their own), the run's events when a
//! host answers (a subscription, so a change shows the moment it commits), and a tick every
//! [`super::POLL`] at which the loop checks SQLite's `data_version` (a change made while no
//! host answers, or on the run list, which has no subscription).
//!
//! The subscriber only ever connects to a host that is already there (`BlockingClient::connect`
//! never starts one) and tries again every [`RESUBSCRIBE`] while none answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use piw_core::client::{BlockingClient, ClientError};
use piw_core::paths::PiwPaths;
use piw_core::protocol::{payload, RequestBody};
use ratatui::crossterm::event::{self, Event};

/// How long the subscriber waits before connecting again when no host answers or it left.
pub const RESUBSCRIBE: Duration = Duration::from_secs(2);

/// Something that should make the viewer look again.
#[derive(Debug)]
pub enum Wake {
    /// A terminal event (a key, a resize).
    Terminal(Event),
    /// The subscribed run changed.
    RunChanged,
    /// Reading the terminal failed: the viewer ends with this error.
    TerminalFailed(std::io::Error),
}

/// Starts the thread that forwards terminal events. It blocks in `event::read`; it ends when
/// the viewer's receiver is gone (after its next event) or with the process.
pub fn forward_terminal(tx: Sender<Wake>) {
    std::thread::spawn(move || loop {
        let wake = match event::read() {
            Ok(ev) => Wake::Terminal(ev),
            Err(e) => Wake::TerminalFailed(e),
        };
        let failed = matches!(wake, Wake::TerminalFailed(_));
        if tx.send(wake).is_err() || failed {
            return;
        }
    });
}

/// A subscription to one run's events, on a thread of its own; dropping it ends the thread
/// (within the one-second read timeout).
pub struct RunSubscription {
    pub run_id: String,
    stop: Arc<AtomicBool>,
}

impl RunSubscription {
    pub fn start(paths: PiwPaths, run_id: String, tx: Sender<Wake>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let id = run_id.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match follow(&paths, &id, &tx, &flag) {
                    // The viewer is gone.
                    Err(Gone) => return,
                    // No host, or it left: look again later (the loop polls meanwhile).
                    Ok(()) => sleep_unless(&flag, RESUBSCRIBE),
                }
            }
        });
        Self { run_id, stop }
    }
}

impl Drop for RunSubscription {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Gone;

/// Follows the run's events until the host goes away (`Ok`) or the viewer does (`Err`).
fn follow(
    paths: &PiwPaths,
    run_id: &str,
    tx: &Sender<Wake>,
    stop: &AtomicBool,
) -> Result<(), Gone> {
    let Ok(mut client) = BlockingClient::connect(paths) else {
        return Ok(());
    };
    if client.set_timeout(Some(Duration::from_secs(5))).is_err()
        || client
            .call(RequestBody::Subscribe(payload::Subscribe {
                run_id: Some(run_id.to_owned()),
                session_id: None,
            }))
            .is_err()
    {
        return Ok(());
    }
    // A short read timeout, so a dropped subscription ends its thread soon.
    if client.set_timeout(Some(Duration::from_secs(1))).is_err() {
        return Ok(());
    }
    // Whatever happened before the subscription answered: look once.
    tx.send(Wake::RunChanged).map_err(|_| Gone)?;
    while !stop.load(Ordering::Relaxed) {
        match client.next_event() {
            Ok(_) => {
                // A burst of events costs one reread.
                client.discard_queued_events();
                tx.send(Wake::RunChanged).map_err(|_| Gone)?;
            }
            Err(ClientError::TimedOut) => {}
            Err(error) => {
                tracing::debug!(%error, "the run's subscription ended");
                return Ok(());
            }
        }
    }
    Err(Gone)
}

fn sleep_unless(stop: &AtomicBool, total: Duration) {
    let step = Duration::from_millis(100);
    let mut slept = Duration::ZERO;
    while slept < total && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        slept += step;
    }
}

/// The next wake-up, or `None` when [`super::POLL`] passed without one.
pub fn next(rx: &Receiver<Wake>, timeout: Duration) -> Option<Wake> {
    rx.recv_timeout(timeout).ok()
}
