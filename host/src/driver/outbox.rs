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

use tokio::sync::broadcast;

use super::fault::FaultPlan;
use super::queues::{Published, ReplyTx, RunEvent};
use crate::protocol::{Receipt, Rejection};
use crate::store::WalSync;

/// One thing the store thread reveals.
pub enum Outbound {
    /// A committed run event, for subscribers.
    Event(RunEvent),
    /// A reply to a request.
    Reply(ReplyTx, Result<Receipt, Rejection>),
}

impl Outbound {
    fn deliver(self, events: &broadcast::Sender<Published>) {
        match self {
            // No subscriber is not an error.
            Outbound::Event(event) => {
                let _ = events.send(Published::new(event));
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

/// Makes every commit so far durable (`WalSync::sync`; a fake in the unit tests).
type SyncFn = Box<dyn FnMut() -> crate::store::StoreResult<()> + Send>;

/// Shared between the store thread and the syncer.
struct Progress {
    /// Commits known durable.
    synced: AtomicU64,
    /// Releases handed to the syncer and not yet delivered.
    in_flight: AtomicUsize,
    /// Used by the syncer, or by the store thread while nothing is in flight.
    sync: Mutex<SyncFn>,
}

impl Progress {
    /// Nothing waits at the syncer (so nothing queued earlier can be overtaken) and the first
    /// `commits` commits are durable: what needs them may leave from any thread now.
    fn clear_for(&self, commits: u64) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0 && self.synced.load(Ordering::SeqCst) >= commits
    }

    /// Makes the first `commits` commits durable, or ends the process.
    fn sync(&self, commits: u64) {
        if commits <= self.synced.load(Ordering::SeqCst) {
            return;
        }
        let synced = match self.sync.lock() {
            Ok(mut sync) => sync(),
            Err(_) => Err(crate::store::StoreError::InvalidInput(
                "the WAL handle was poisoned by a panic".into(),
            )),
        };
        if let Err(e) = synced {
            // The disk may have dropped commits that later batches built on; nothing may be
            // acknowledged any more. A new host recovers from what is on disk (and stops the
            // children this one leaves behind, as after any crash).
            stop_host(&format!("cannot sync the WAL: {e}"));
        }
        self.synced.fetch_max(commits, Ordering::SeqCst);
    }
}

/// The store thread's side of the outbox.
pub struct Outbox {
    events: broadcast::Sender<Published>,
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
    /// An [`Outbox::immediate`] to a channel nobody listens to: right for a store that syncs at
    /// each commit (the default), as in tests that drive the store thread's functions
    /// directly. A host that defers the WAL sync must use [`Outbox::deferred`].
    fn default() -> Self {
        Self::immediate(broadcast::channel(1).0)
    }
}

impl Outbox {
    /// An outbox that delivers at every flush: for a store that syncs at each commit.
    pub fn immediate(events: broadcast::Sender<Published>) -> Self {
        Self {
            events,
            queued: Vec::new(),
            syncer: None,
        }
    }

    /// An outbox that delivers once `wal` has synced the commits a flush names, from a syncer
    /// thread it starts.
    pub fn deferred(
        events: broadcast::Sender<Published>,
        mut wal: WalSync,
        fault: FaultPlan,
    ) -> std::io::Result<Self> {
        let synced = wal.synced_commits();
        let sync = move || {
            if fault.fail_sync() {
                // Long enough for anything sent too early to reach its client before the
                // host exits, so the fault test sees a leak.
                std::thread::sleep(std::time::Duration::from_millis(200));
                return Err(crate::store::StoreError::InjectedFault("fail_sync".into()));
            }
            wal.sync()
        };
        Self::with_sync(events, Box::new(sync), synced)
    }

    fn with_sync(
        events: broadcast::Sender<Published>,
        sync: SyncFn,
        synced: u64,
    ) -> std::io::Result<Self> {
        let progress = Arc::new(Progress {
            synced: AtomicU64::new(synced),
            in_flight: AtomicUsize::new(0),
            sync: Mutex::new(sync),
        });
        let (releases, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("piw-sync".into()).spawn({
            let progress = progress.clone();
            let events = events.clone();
            move || {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_syncer(rx, &progress, &events)
                }));
                if ran.is_err() {
                    // Releases waiting here would never be sent: no reply would ever leave.
                    stop_host("the syncer thread panicked");
                }
            }
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
        // Deliver here if nothing can be overtaken and the commits are durable, or can be made
        // so without holding up other work.
        if progress.clear_for(commits) {
            deliver(items, &self.events);
            return;
        }
        if idle && progress.in_flight.load(Ordering::SeqCst) == 0 {
            progress.sync(commits);
            deliver(items, &self.events);
            return;
        }
        progress.in_flight.fetch_add(1, Ordering::SeqCst);
        if syncer.releases.send(Release { commits, items }).is_err() {
            // The syncer is gone (a failed fsync or a panic, and the process is exiting):
            // nothing would ever be sent again.
            stop_host("the syncer thread is gone");
        }
    }

    /// Delivers what is queued now if that needs no fsync and overtakes nothing; otherwise
    /// keeps it queued for the next [`Outbox::flush`] (one fsync then covers both).
    pub fn flush_if_synced(&mut self, commits: u64) {
        if self
            .syncer
            .as_ref()
            .is_none_or(|s| s.progress.clear_for(commits))
        {
            self.flush(commits, false);
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

/// Ends the process without another word to any client: what is unsynced may be lost.
fn stop_host(why: &str) -> ! {
    tracing::error!(
        "{why}; the host stops without acknowledging unsynced commits (its children are stopped by the next host's startup)"
    );
    std::process::exit(1);
}

fn deliver(items: Vec<Outbound>, events: &broadcast::Sender<Published>) {
    for item in items {
        item.deliver(events);
    }
}

/// The syncer thread: waits for releases, fsyncs the WAL once for all that are waiting (a
/// group fsync), then delivers them in order.
fn run_syncer(
    releases: Receiver<Release>,
    progress: &Progress,
    events: &broadcast::Sender<Published>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::oneshot;
    use tokio::sync::oneshot::error::TryRecvError;

    /// A fake WAL sync that counts its calls, finishes only when the test says so, and
    /// notes whether any event had already left when it was called.
    struct FakeDisk {
        go: std::sync::mpsc::Sender<()>,
        calls: Arc<AtomicUsize>,
        leaked: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Drop for FakeDisk {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                assert!(
                    !self.leaked.load(Ordering::SeqCst),
                    "an event left before the sync that covers it began"
                );
            }
        }
    }

    fn outbox() -> (Outbox, FakeDisk, broadcast::Receiver<Published>) {
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let calls = Arc::new(AtomicUsize::new(0));
        let leaked = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (events, rx) = broadcast::channel(16);
        let mut watch = events.subscribe();
        let (counted, seen) = (calls.clone(), leaked.clone());
        let sync: SyncFn = Box::new(move || {
            // Every event in these tests is flushed for a commit not yet synced.
            if watch.try_recv().is_ok() {
                seen.store(true, Ordering::SeqCst);
            }
            wait.recv_timeout(Duration::from_secs(5))
                .expect("a sync waited for a go that never came");
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let outbox = Outbox::with_sync(events, sync, 0).unwrap();
        (outbox, FakeDisk { go, calls, leaked }, rx)
    }

    fn event(seq: u64) -> RunEvent {
        RunEvent {
            run_id: "r".into(),
            origin_session: None,
            seq,
            kind: "paused".into(),
            status: "waiting".into(),
            revision: seq,
            at_ms: 0,
            data: serde_json::json!({}),
        }
    }

    fn reply(outbox: &mut Outbox) -> oneshot::Receiver<Result<Receipt, Rejection>> {
        let (tx, rx) = oneshot::channel();
        outbox.reply(tx, Ok(Receipt::new(Some(1), serde_json::json!({}))));
        rx
    }

    /// Waits for a reply the syncer thread sends.
    fn arrives(mut rx: oneshot::Receiver<Result<Receipt, Rejection>>) {
        for _ in 0..500 {
            match rx.try_recv() {
                Ok(_) => return,
                Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(2)),
                Err(TryRecvError::Closed) => panic!("the reply was dropped"),
            }
        }
        panic!("the reply never arrived");
    }

    #[test]
    fn nothing_leaves_before_the_sync_that_covers_it() {
        let (mut outbox, disk, mut events) = outbox();
        outbox.event(event(1));
        let mut rx = reply(&mut outbox);
        // Not idle: the syncer thread syncs, and it is held up.
        outbox.flush(1, false);
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        assert!(events.try_recv().is_err(), "an event left before its fsync");
        disk.go.send(()).unwrap();
        arrives(rx);
        assert_eq!(events.try_recv().unwrap().seq, 1, "the event went first");
        assert_eq!(disk.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_flush_that_needs_no_sync_does_not_overtake_one_that_does() {
        let (mut outbox, disk, mut events) = outbox();
        outbox.event(event(1));
        outbox.flush(1, false);
        // Commit 0 is durable, but the release before it is still waiting.
        outbox.event(event(2));
        let mut second = reply(&mut outbox);
        outbox.flush(0, true);
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(second.try_recv(), Err(TryRecvError::Empty)));
        assert!(events.try_recv().is_err());
        disk.go.send(()).unwrap();
        arrives(second);
        assert_eq!(events.try_recv().unwrap().seq, 1);
        assert_eq!(events.try_recv().unwrap().seq, 2);
    }

    #[test]
    fn an_idle_store_thread_syncs_itself_before_it_delivers_and_only_once() {
        let (mut outbox, disk, _events) = outbox();
        disk.go.send(()).unwrap();
        outbox.event(event(1));
        let mut rx = reply(&mut outbox);
        outbox.flush(1, true);
        // Delivered by this thread, after its own sync.
        assert!(rx.try_recv().is_ok());
        assert_eq!(disk.calls.load(Ordering::SeqCst), 1);
        // Already durable: no second sync.
        let mut rx = reply(&mut outbox);
        outbox.flush(1, true);
        assert!(rx.try_recv().is_ok());
        assert_eq!(disk.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn reads_that_would_need_a_sync_wait_for_the_next_flush() {
        let (mut outbox, disk, _events) = outbox();
        let mut read = reply(&mut outbox);
        outbox.flush_if_synced(1);
        assert!(matches!(read.try_recv(), Err(TryRecvError::Empty)));
        assert_eq!(disk.calls.load(Ordering::SeqCst), 0);
        disk.go.send(()).unwrap();
        let mut write = reply(&mut outbox);
        outbox.flush(2, true);
        assert!(read.try_recv().is_ok() && write.try_recv().is_ok());
        assert_eq!(disk.calls.load(Ordering::SeqCst), 1, "one fsync for both");
        // Synced and nothing in flight: a read leaves at once.
        let mut read = reply(&mut outbox);
        outbox.flush_if_synced(2);
        assert!(read.try_recv().is_ok());
    }

    #[test]
    fn closing_syncs_the_last_commit_and_delivers_everything() {
        let (mut outbox, disk, _events) = outbox();
        disk.go.send(()).unwrap();
        let mut rx = reply(&mut outbox);
        outbox.close(3);
        assert!(rx.try_recv().is_ok());
        assert_eq!(disk.calls.load(Ordering::SeqCst), 1);
    }
}
