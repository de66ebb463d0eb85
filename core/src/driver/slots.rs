//! The connection cap: every connection holds a descriptor, and a host whose descriptors run
//! out can no longer accept, open its database's files or spawn a child. The host keeps at
//! most [`Slots::cap`] connections; at the cap, the connection idle the longest (no request
//! in flight, not a child's, subscribers last) is closed with a goodbye that says why, to make
//! room for the new one. Only when none is idle is the new connection refused.
//!
//! A child's connection is known as such from its peer (a process the host started, see
//! [`peer_is_own_child`]) from the moment it is accepted, not only once its `worker.hello` is
//! served: a child that has just connected looks idle, and closing it would count as a lost
//! child against its run (under load, a burst of connections can arrive before its hello is
//! read). Children are bounded by `PIW_MAX_CHILDREN`, not by the cap.

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
    pub fn new(cap: usize) -> Self {
        Self {
            started: Instant::now(),
            cap: cap.max(1),
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
        if self.open.len() >= self.cap && !self.evict_idle("a new connection") {
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

/// Whether the process at the other end of `stream` is one the host started (its parent is
/// this process): a child connects before its first frame says so.
pub fn peer_is_own_child(stream: &tokio::net::UnixStream) -> bool {
    let Some(pid) = stream
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|p| u32::try_from(p).ok())
    else {
        return false;
    };
    let own = i64::from(std::process::id());
    crate::supervise::read_proc_stat(pid).is_some_and(|s| i64::from(s.ppid) == own)
}

/// The connection cap for a descriptor limit of `nofile`: what is left after a reserve for
/// the database's files, the host's own and each child's pipes and connection, at most
/// [`MAX_CONNECTIONS`].
pub fn cap_for(nofile: u64, max_children: usize) -> usize {
    let children = u64::try_from(max_children).unwrap_or(u64::MAX);
    let reserve = 64u64.saturating_add(children.saturating_mul(8));
    usize::try_from(nofile.saturating_sub(reserve).clamp(8, MAX_CONNECTIONS)).unwrap_or(8)
}

/// The most connections a host keeps, whatever its descriptor limit.
pub const MAX_CONNECTIONS: u64 = 4_096;

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
        let mut slots = Slots::new(3);
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
        let mut slots = Slots::new(2);
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
    fn all_busy_refuses_the_new_connection() {
        let mut slots = Slots::new(1);
        let Admit::Serve(only) = slots.admit(false) else {
            panic!()
        };
        only.set_busy(true);
        assert!(matches!(slots.admit(false), Admit::Refuse(_)));
        drop(SlotGuard(only));
        assert!(matches!(slots.admit(false), Admit::Serve(_)));
    }

    #[test]
    fn the_cap_leaves_a_reserve_for_the_database_and_children() {
        assert_eq!(cap_for(1_024, 16), 1_024 - 64 - 128);
        assert_eq!(cap_for(100, 16), 8);
        assert_eq!(cap_for(1 << 20, 16), 4_096);
    }
}
