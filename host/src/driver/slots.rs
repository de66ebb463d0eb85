//! The descriptor budget and the connection cap: every connection and every child holds
//! descriptors, and a host whose descriptors run out can no longer accept, open its database's
//! files or spawn a child. [`budget`] splits the descriptor limit once, at start: a reserve for
//! the host's own files, [`DESCRIPTORS_PER_CHILD`] for each child slot (its pipes, its log, its
//! connections), and the rest for other connections. When descriptors are few the host runs
//! fewer children than `PIW_MAX_CHILDREN` asks for (the host's log and `host.status` say so),
//! so that the children it launches can always connect and a client still gets in.
//!
//! The host keeps at most [`Slots::cap`] connections of clients; at the cap, the connection
//! idle the longest (no request in flight, not a child's, subscribers last) is closed with a
//! goodbye that says why, to make room for the new one. Only when none is idle is the new
//! connection refused. Children's connections are counted apart, in the room their slots
//! reserved ([`Budget::child_connections`]): a burst of clients cannot take it from them, nor
//! they from clients. Before, children counted against the client cap while the host still ran
//! `PIW_MAX_CHILDREN` of them: under a low limit the cap refused children, whose runs counted
//! losses and went to review, and refused fresh clients.
//!
//! A child's connection is known as such from its peer (a process the host started, see
//! [`own_child_pid`]) from the moment it is accepted, not only once its `worker.hello` is
//! served: a child that has just connected looks idle, and closing it would count as a lost
//! child against its run (under load, a burst of connections can arrive before its hello is
//! read). A child refused all the same (it opened more connections than its slot holds) is
//! reported to the store thread, which requeues its run without counting a loss.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One connection's state as the cap sees it, updated by its task.
#[derive(Debug)]
pub struct Slot {
    started: Instant,
    /// Milliseconds since `started` of the last request or reply.
    last_active_ms: AtomicU64,
    busy: AtomicBool,
    /// Accepted from one of the host's own children: never closed for the cap.
    child: bool,
    worker: AtomicBool,
    subscribed: AtomicBool,
    closed: AtomicBool,
    evicted: AtomicBool,
    reason: Mutex<Option<String>>,
    pub(crate) evict: tokio::sync::Notify,
}

impl Slot {
    fn new(started: Instant, child: bool) -> Self {
        Self {
            started,
            last_active_ms: AtomicU64::new(elapsed_ms(started)),
            busy: AtomicBool::new(false),
            child,
            worker: AtomicBool::new(false),
            subscribed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            reason: Mutex::new(None),
            evict: tokio::sync::Notify::new(),
        }
    }

    /// A request arrived (`true`) or its reply left (`false`).
    pub(crate) fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
        self.last_active_ms
            .store(elapsed_ms(self.started), Ordering::Relaxed);
    }

    /// What the connection is: a child's (never closed for the cap) or a subscriber's.
    pub(crate) fn set_role(&self, worker: bool, subscribed: bool) {
        self.worker.store(worker, Ordering::Relaxed);
        self.subscribed.store(subscribed, Ordering::Relaxed);
    }

    /// Why the cap closes this connection.
    pub(crate) fn eviction_reason(&self) -> String {
        self.reason
            .lock()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| "closed to make room for another connection".into())
    }
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Marks its slot closed when the connection's task ends, however it ends.
pub struct SlotGuard(pub Arc<Slot>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Relaxed);
    }
}

/// The host's connections, for the cap.
#[derive(Debug)]
pub struct Slots {
    started: Instant,
    cap: usize,
    /// The most connections of the host's own children.
    child_cap: usize,
    open: Vec<Arc<Slot>>,
}

/// What to do with a connection just accepted.
pub enum Admit {
    /// Serve it (another, idle, connection may have been told to close).
    Serve(Arc<Slot>),
    /// Every slot is busy: refuse it, saying this.
    Refuse(String),
}

impl Slots {
    /// At most `cap` connections of clients and `child_cap` of the host's own children.
    pub fn new(cap: usize, child_cap: usize) -> Self {
        Self {
            started: Instant::now(),
            cap: cap.max(1),
            child_cap: child_cap.max(1),
            open: Vec::new(),
        }
    }

    /// The most connections kept open.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Admits a new connection, closing the longest-idle one first when at the cap. `child`:
    /// the peer is one of the host's own children ([`peer_is_own_child`]).
    pub fn admit(&mut self, child: bool) -> Admit {
        self.open
            .retain(|s| !s.closed.load(Ordering::Relaxed) && !s.evicted.load(Ordering::Relaxed));
        let children = self.open.iter().filter(|s| s.child).count();
        if child {
            if children >= self.child_cap {
                return Admit::Refuse(format!(
                    "the host keeps at most {} connections of its children and they are all open; the child's run is launched again",
                    self.child_cap
                ));
            }
        } else if self.open.len() - children >= self.cap && !self.evict_idle("a new connection") {
            return Admit::Refuse(format!(
                "the host keeps at most {} connections and none is idle; try again later",
                self.cap
            ));
        }
        let slot = Arc::new(Slot::new(self.started, child));
        self.open.push(slot.clone());
        Admit::Serve(slot)
    }

    /// Closes the connection idle the longest (no request in flight, not a child's;
    /// non-subscribers first) to make room for `for_what`. Whether one was found.
    pub fn evict_idle(&mut self, for_what: &str) -> bool {
        let victim = self
            .open
            .iter()
            .filter(|s| {
                !s.closed.load(Ordering::Relaxed)
                    && !s.evicted.load(Ordering::Relaxed)
                    && !s.busy.load(Ordering::Relaxed)
                    && !s.child
                    && !s.worker.load(Ordering::Relaxed)
            })
            .min_by_key(|s| {
                (
                    s.subscribed.load(Ordering::Relaxed),
                    s.last_active_ms.load(Ordering::Relaxed),
                )
            })
            .cloned();
        let Some(victim) = victim else {
            return false;
        };
        if let Ok(mut reason) = victim.reason.lock() {
            *reason = Some(format!(
                "the host keeps at most {} connections: this one, idle the longest, was closed to make room for {for_what}",
                self.cap
            ));
        }
        victim.evicted.store(true, Ordering::Relaxed);
        victim.evict.notify_one();
        self.open.retain(|s| !Arc::ptr_eq(s, &victim));
        true
    }
}

/// The pid of the process at the other end of `stream` when it is one the host started (its
/// parent is this process): a child connects before its first frame says so.
pub fn own_child_pid(stream: &tokio::net::UnixStream) -> Option<u32> {
    let pid = stream
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|p| u32::try_from(p).ok())?;
    let own = i64::from(std::process::id());
    crate::supervise::read_proc_stat(pid)
        .is_some_and(|s| i64::from(s.ppid) == own)
        .then_some(pid)
}

/// How a host spends its descriptor limit ([`budget`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Children (runs' children and detached runs' bridges) it runs at once: at most
    /// `PIW_MAX_CHILDREN`, fewer when descriptors are few.
    pub child_slots: usize,
    /// The connection cap for clients ([`Slots::cap`]).
    pub connections: usize,
    /// The most connections of its own children, in the room their slots reserved.
    pub child_connections: usize,
}

/// Descriptors the host keeps for itself whatever else it does: the database and its `-wal`
/// and `-shm`, the lock files, the log, the listener, the runtime's own.
pub const HOST_RESERVE: u64 = 64;

/// Descriptors the host holds for one child slot: the child's stdin, stdout and stderr pipes,
/// its output log, the handle the runtime reaps it with, and [`CONNECTIONS_PER_CHILD`].
pub const DESCRIPTORS_PER_CHILD: u64 = 8;

/// Connections one child slot may hold open (a worker's, and one more while a replaced
/// child's closes or a workflow opens a client of its own).
pub const CONNECTIONS_PER_CHILD: usize = 2;

/// The fewest connections clients are kept, however low the limit.
pub const MIN_CONNECTIONS: u64 = 8;

/// The most connections a host keeps, whatever its descriptor limit.
pub const MAX_CONNECTIONS: u64 = 4_096;

/// Splits a descriptor limit of `nofile`: [`HOST_RESERVE`], then [`MIN_CONNECTIONS`] for
/// clients, then as many child slots as the rest holds (at least one, at most
/// `max_children`; the `standby` workers waiting for a run hold a slot's descriptors each),
/// then the remainder for clients too, at most [`MAX_CONNECTIONS`]. `max_connections`
/// (`PIW_MAX_CONNECTIONS`) replaces the computed client cap.
pub fn budget(
    nofile: u64,
    max_children: usize,
    standby: usize,
    max_connections: Option<usize>,
) -> Budget {
    let wanted = u64::try_from(max_children.max(1)).unwrap_or(u64::MAX);
    let standby = u64::try_from(standby).unwrap_or(u64::MAX);
    let per_slot = |n: u64| n.saturating_mul(DESCRIPTORS_PER_CHILD);
    let for_children = nofile
        .saturating_sub(HOST_RESERVE)
        .saturating_sub(MIN_CONNECTIONS)
        .saturating_sub(per_slot(standby));
    let slots = (for_children / DESCRIPTORS_PER_CHILD).clamp(1, wanted);
    let left = nofile
        .saturating_sub(HOST_RESERVE)
        .saturating_sub(per_slot(slots.saturating_add(standby)));
    let connections = max_connections.unwrap_or_else(|| {
        usize::try_from(left.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)).unwrap_or(8)
    });
    let child_slots = usize::try_from(slots).unwrap_or(1);
    Budget {
        child_slots,
        connections,
        child_connections: child_slots.saturating_mul(CONNECTIONS_PER_CHILD),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(slots: &mut Slots) -> Arc<Slot> {
        match slots.admit(false) {
            Admit::Serve(slot) => slot,
            Admit::Refuse(why) => panic!("refused: {why}"),
        }
    }

    fn evicted(slot: &Slot) -> bool {
        slot.evicted.load(Ordering::Relaxed)
    }

    #[test]
    fn the_longest_idle_non_worker_goes_first_and_subscribers_last() {
        let mut slots = Slots::new(3, 4);
        let worker = served(&mut slots);
        worker.set_role(true, false);
        let subscriber = served(&mut slots);
        subscriber.set_role(false, true);
        let idle = served(&mut slots);
        let newer = served(&mut slots);
        assert!(evicted(&idle), "the plain idle connection made room");
        assert!(idle.eviction_reason().contains("at most 3 connections"));
        let newest = served(&mut slots);
        assert!(evicted(&newer), "a plain one goes before a subscriber");
        newest.set_busy(true);
        let _last = served(&mut slots);
        assert!(
            evicted(&subscriber),
            "then the subscriber, never a busy one"
        );
        assert!(!evicted(&worker) && !evicted(&newest));
    }

    #[test]
    fn a_childs_connection_is_kept_before_its_hello() {
        let mut slots = Slots::new(1, 2);
        let Admit::Serve(child) = slots.admit(true) else {
            panic!()
        };
        let plain = served(&mut slots);
        let _newer = served(&mut slots);
        assert!(evicted(&plain), "the plain idle connection made room");
        let _newest = served(&mut slots);
        assert!(
            !evicted(&child),
            "a child's connection is never closed for the cap"
        );
    }

    #[test]
    fn children_and_clients_each_keep_their_own_room() {
        let mut slots = Slots::new(1, 2);
        let busy = served(&mut slots);
        busy.set_busy(true);
        let children: Vec<_> = (0..2)
            .map(|_| match slots.admit(true) {
                Admit::Serve(slot) => slot,
                Admit::Refuse(why) => panic!("a child refused: {why}"),
            })
            .collect();
        assert!(
            matches!(slots.admit(true), Admit::Refuse(why) if why.contains("connections of its children")),
            "a third child connection is past its room"
        );
        drop(SlotGuard(children[0].clone()));
        assert!(matches!(slots.admit(true), Admit::Serve(_)));
    }

    #[test]
    fn all_busy_refuses_the_new_connection() {
        let mut slots = Slots::new(1, 1);
        let Admit::Serve(only) = slots.admit(false) else {
            panic!()
        };
        only.set_busy(true);
        assert!(matches!(slots.admit(false), Admit::Refuse(_)));
        drop(SlotGuard(only));
        assert!(matches!(slots.admit(false), Admit::Serve(_)));
    }

    #[test]
    fn the_budget_gives_children_what_it_can_and_clients_the_rest() {
        let b = |nofile, children, standby| budget(nofile, children, standby, None);
        // Plenty: every child slot asked for, the rest for clients.
        assert_eq!(
            b(1_024, 16, 0),
            Budget {
                child_slots: 16,
                connections: 1_024 - 64 - 128,
                child_connections: 32
            }
        );
        assert_eq!(b(1 << 20, 16, 2).connections, 4_096);
        // `ulimit -n 200`: 16 slots still fit beside 8 connections.
        assert_eq!(b(200, 16, 0).child_slots, 16);
        assert_eq!(b(200, 16, 0).connections, 8);
        // Fewer slots than asked for when descriptors are few; clients keep their 8.
        assert_eq!(b(256, 24, 0).child_slots, (256 - 64 - 8) / 8);
        assert_eq!(b(256, 24, 0).connections, 8);
        assert_eq!(b(160, 16, 2).child_slots, (160 - 64 - 8 - 16) / 8);
        // However few, one child runs and clients keep their 8.
        assert_eq!(b(64, 16, 0).child_slots, 1);
        assert_eq!(b(64, 16, 0).connections, 8);
        // Every slot's descriptors, the host's and the clients' fit the limit when it allows.
        for nofile in [100u64, 150, 200, 256, 512, 1_024] {
            let got = b(nofile, 16, 2);
            let used = HOST_RESERVE
                + DESCRIPTORS_PER_CHILD * (got.child_slots as u64 + 2)
                + got.connections as u64;
            assert!(
                used <= nofile.max(HOST_RESERVE + 3 * DESCRIPTORS_PER_CHILD + MIN_CONNECTIONS),
                "{nofile}: {got:?}"
            );
        }
        assert_eq!(budget(200, 16, 0, Some(3)).connections, 3);
    }
}
