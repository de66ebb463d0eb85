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

use piw_host::client::{BlockingClient, ClientError};
use piw_host::paths::PiwPaths;
use piw_host::protocol::{payload, RequestBody, ValueRef};
use ratatui::crossterm::event::{self, Event};

use super::value::{ValueSource, ValueText};

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
    /// A value stored apart was read (or could not be).
    ValueFetched {
        sha256: String,
        result: Result<ValueText, String>,
    },
}

/// Reads value `reference` of run `run_id` whole on a thread of its own (with its own
/// read-only store) and wakes the viewer with it, laid out.
pub fn fetch_value(
    paths: PiwPaths,
    source: Arc<dyn ValueSource>,
    run_id: String,
    reference: ValueRef,
    tx: Sender<Wake>,
) {
    std::thread::spawn(move || {
        let result = super::open_store(&paths)
            .map_err(|e| e.to_string())
            .and_then(|store| super::fetch_text(source.as_ref(), &store, &run_id, &reference));
        // The viewer may be gone: nobody to tell.
        let _ = tx.send(Wake::ValueFetched {
            sha256: reference.sha256,
            result,
        });
    });
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
                all: None,
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

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::net::UnixListener;

    use piw_host::protocol::{
        encode_frame, read_frame, Event, Limits, ProtocolSchema, Receipt, Request, ServerFrame,
    };
    use serde_json::json;

    use super::*;

    /// Bound on a wait for a wake-up: only a hang reaches it.
    const HANG: Duration = Duration::from_secs(30);

    fn frame(frame: &ServerFrame) -> Vec<u8> {
        encode_frame(frame, &Limits::default()).unwrap()
    }

    /// The subscriber connects to a host that answers (a fake one here, bound as the
    /// subscription starts), subscribes to the run and asks nothing else, wakes the viewer
    /// once to look, then on each event; dropped, it hangs up.
    #[test]
    fn the_subscriber_follows_the_run_once_a_host_answers() {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().to_path_buf());
        let (tx, rx) = std::sync::mpsc::channel();
        let subscription = RunSubscription::start(paths.clone(), "run-1".into(), tx);

        let listener = UnixListener::bind(&paths.socket).unwrap();
        let host = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let body = read_frame(&mut stream, &Limits::default())
                .unwrap()
                .unwrap();
            let request = Request::decode(&body, &Limits::default()).unwrap();
            stream
                .write_all(&frame(&ServerFrame::receipt(
                    request.request_id.clone(),
                    Receipt::new(None, json!(null)),
                )))
                .unwrap();
            stream
                .write_all(&frame(&ServerFrame::Event(Event {
                    schema: ProtocolSchema,
                    subscription_id: request.request_id.clone(),
                    run_id: "run-1".into(),
                    seq: 7,
                    event_kind: "transitioned".into(),
                    status: "running".into(),
                    revision: 7,
                    at_ms: 0,
                    data: json!(null),
                })))
                .unwrap();
            // Nothing more is asked: the next read ends when the subscriber hangs up.
            let next = read_frame(&mut stream, &Limits::default());
            (request, next.map(|f| f.is_some()).unwrap_or(false))
        });

        for _ in 0..2 {
            match rx.recv_timeout(HANG) {
                Ok(Wake::RunChanged) => {}
                other => panic!("expected a wake-up for the run, got {other:?}"),
            }
        }
        drop(subscription);
        let (request, asked_more) = host.join().unwrap();
        match request.body {
            RequestBody::Subscribe(s) => {
                assert_eq!(s.run_id.as_deref(), Some("run-1"));
                assert_eq!(s.session_id, None);
            }
            other => panic!("the subscriber asked {}", other.kind_str()),
        }
        assert!(!asked_more, "the subscriber sent more than its subscribe");
    }
}
