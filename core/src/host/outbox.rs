//! Everything the store thread reveals (replies and run events) leaves through the outbox, and
//! only once the commits it may reflect are on disk.
//!
//! The host commits with the WAL fsync deferred (`Store::defer_wal_sync`): a commit returns
//! once its frames are written, and the [`Outbox`] hands what the store thread queued since its
//! last flush to the **syncer thread**, which fsyncs the WAL and only then sends the replies and
//! publishes the events. The store thread meanwhile builds the next batch, so one batch is
//! processed while the one before it reaches the disk, and a client still never sees a commit
//! that a power cut could take back: "acknowledged only after commit" holds with the commit's
//! fsync included.
//!
//! Order is kept: items leave in the order they were queued, across flushes. While nothing
//! waits at the syncer, the store thread delivers a flush itself: at once when its commits are
//! already synced (reads of an idle host), or after fsyncing the WAL itself when it has no
//! other work queued (one client at a time pays no thread hop).
//!
//! A failed fsync means the disk may have dropped commits that later batches built on; the
//! host then exits (code 1) without sending anything those commits touched. Clients see their
//! connection close and retry with the same request ids once a host is back, which returns
//! whatever did reach the disk, exactly once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::{broadcast, oneshot};

use super::fault::FaultPlan;
use super::store_thread::RunEvent;
use crate::protocol::{Receipt, Rejection};
use crate::store::WalSync;

/// A reply to one request.
pub type ReplyTx = oneshot::Sender<Result<Receipt, Rejection>>;

/// One thing the store thread reveals.
pub enum Outbound {
    /// A committed run event, for subscribers.
    Event(RunEvent),
    /// A reply to a request.
    Reply(ReplyTx, Result<Receipt, Rejection>),
}

impl Outbound {
    fn deliver(self, events: &broadcast::Sender<RunEvent>) {
        match self {
            // No subscriber is not an error.
            Outbound::Event(event) => {
                let _ = events.send(event);
            }
            // The client may have gone away.
            Outbound::Reply(tx, result) => {
                let _ = tx.send(result);
            }
        }
    }
}

/// What the store thread hands the syncer: items to send once `commits` are durable.
struct Release {
    commits: u64,
    items: Vec<Outbound>,
}

/// Shared between the store thread and the syncer.
struct Progress {
    /// Commits known durable.
    synced: AtomicU64,
    /// Releases handed to the syncer and not yet delivered.
    in_flight: AtomicUsize,
    /// Used by the syncer, or by the store thread while nothing is in flight.
    wal: Mutex<WalSync>,
    fault: FaultPlan,
}

impl Progress {
    /// Makes the first `commits` commits durable, or ends the process.
    fn sync(&self, commits: u64) {
        if commits <= self.synced.load(Ordering::SeqCst) {
            return;
        }
        let synced = if self.fault.fail_sync() {
            Err(crate::store::StoreError::InjectedFault("fail_sync".into()))
        } else {
            match self.wal.lock() {
                Ok(mut wal) => wal.sync(),
                Err(_) => Err(crate::store::StoreError::InvalidInput(
                    "the WAL handle was poisoned by a panic".into(),
                )),
            }
        };
        if let Err(e) = synced {
            // The disk may have dropped commits that later batches built on; nothing may be
            // acknowledged any more. A new host recovers from what is on disk.
            tracing::error!(error = %e, "cannot sync the WAL; the host stops without acknowledging unsynced commits");
            std::process::exit(1);
        }
        self.synced.fetch_max(commits, Ordering::SeqCst);
    }
}

/// The store thread's side of the outbox.
pub struct Outbox {
    events: broadcast::Sender<RunEvent>,
    queued: Vec<Outbound>,
    syncer: Option<Syncer>,
}

struct Syncer {
    releases: Sender<Release>,
    progress: Arc<Progress>,
    thread: JoinHandle<()>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("queued", &self.queued.len())
            .field("deferred", &self.syncer.is_some())
            .finish()
    }
}

impl Default for Outbox {
    /// Delivers at every flush, to a channel nobody listens to (tests that drive the store
    /// thread's functions directly).
    fn default() -> Self {
        Self::immediate(broadcast::channel(1).0)
    }
}

impl Outbox {
    /// An outbox that delivers at every flush: for a store that syncs at each commit.
    pub fn immediate(events: broadcast::Sender<RunEvent>) -> Self {
        Self {
            events,
            queued: Vec::new(),
            syncer: None,
        }
    }

    /// An outbox that delivers once `wal` has synced the commits a flush names, from a syncer
    /// thread it starts. `synced` is the count of commits already durable.
    pub fn deferred(
        events: broadcast::Sender<RunEvent>,
        wal: WalSync,
        synced: u64,
        fault: FaultPlan,
    ) -> std::io::Result<Self> {
        let progress = Arc::new(Progress {
            synced: AtomicU64::new(synced),
            in_flight: AtomicUsize::new(0),
            wal: Mutex::new(wal),
            fault,
        });
        let (releases, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("piw-sync".into()).spawn({
            let progress = progress.clone();
            let events = events.clone();
            move || run_syncer(rx, &progress, &events)
        })?;
        Ok(Self {
            events,
            queued: Vec::new(),
            syncer: Some(Syncer {
                releases,
                progress,
                thread,
            }),
        })
    }

    /// Whether anybody listens for run events (publishing reads the store).
    pub fn has_subscribers(&self) -> bool {
        self.events.receiver_count() > 0
    }

    /// Queues a run event.
    pub fn event(&mut self, event: RunEvent) {
        self.queued.push(Outbound::Event(event));
    }

    /// Queues a reply.
    pub fn reply(&mut self, tx: ReplyTx, result: Result<Receipt, Rejection>) {
        self.queued.push(Outbound::Reply(tx, result));
    }

    /// Sends what is queued once the store's first `commits` commits are durable. `idle`: the
    /// store thread has nothing else to do, so it may wait for the disk itself.
    pub fn flush(&mut self, commits: u64, idle: bool) {
        if self.queued.is_empty() {
            return;
        }
        let items = std::mem::take(&mut self.queued);
        let Some(syncer) = &self.syncer else {
            deliver(items, &self.events);
            return;
        };
        let progress = &syncer.progress;
        // Nothing waits at the syncer, so nothing queued earlier can be overtaken: deliver
        // here if the commits are durable, or can be made so without holding up other work.
        if progress.in_flight.load(Ordering::SeqCst) == 0 {
            if progress.synced.load(Ordering::SeqCst) >= commits {
                deliver(items, &self.events);
                return;
            }
            if idle {
                progress.sync(commits);
                deliver(items, &self.events);
                return;
            }
        }
        progress.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Err(mpsc::SendError(release)) = syncer.releases.send(Release { commits, items }) {
            // The syncer is gone only after a failed fsync, and then the process is exiting:
            // these commits may be lost, so nothing about them is said.
            drop(release);
        }
    }

    /// Makes the first `commits` commits durable and delivers everything queued, then stops
    /// the syncer. For the host's last commit before it exits.
    pub fn close(mut self, commits: u64) {
        if let Some(syncer) = self.syncer.take() {
            let items = std::mem::take(&mut self.queued);
            syncer.progress.in_flight.fetch_add(1, Ordering::SeqCst);
            let _ = syncer.releases.send(Release { commits, items });
            drop(syncer.releases);
            if syncer.thread.join().is_err() {
                tracing::error!("the syncer thread ended abnormally");
            }
        } else {
            deliver(std::mem::take(&mut self.queued), &self.events);
        }
    }
}

fn deliver(items: Vec<Outbound>, events: &broadcast::Sender<RunEvent>) {
    for item in items {
        item.deliver(events);
    }
}

/// The syncer thread: waits for releases, fsyncs the WAL once for all that are waiting (a
/// group fsync), then delivers them in order.
fn run_syncer(
    releases: Receiver<Release>,
    progress: &Progress,
    events: &broadcast::Sender<RunEvent>,
) {
    while let Ok(first) = releases.recv() {
        let mut waiting = vec![first];
        waiting.extend(releases.try_iter());
        let target = waiting.iter().map(|r| r.commits).max().unwrap_or(0);
        progress.sync(target);
        let released = waiting.len();
        for release in waiting {
            deliver(release.items, events);
        }
        progress.in_flight.fetch_sub(released, Ordering::SeqCst);
    }
}
