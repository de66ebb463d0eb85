//! The time of an interactive step (`agent`, `assistantMessage`) runs only while it is
//! presented: while its holder ([`Holder`]) is there. A step keeps its budget (the node's
//! timeout left when it was asked), the time held so far and since when it is held; its
//! deadline is `held_since + budget - used` while held and none while not. So closing Pi, a
//! bridge that has not started yet or a host that is down uses up none of the step's time.
//! Decisions, checkpoints, timers and the run's own bounds stay on the wall clock.
//!
//! Who holds a step follows from its run: a detached run's bridge, an interactive run's
//! origin session. An interactive run without an origin session has no holder anybody could
//! tell is there: its step is held from the start for good (the wall clock, as before).
//!
//! Holding and releasing are one transaction each and write no event and no revision: they
//! change when a step may expire, not the run's course (an expiry is an event). The open
//! attempt's `deadline_at` mirrors the step's, so every reader of the attempt's deadline (the
//! deadline work while a submission is judged, `run.status`) sees the same one.

use crate::store::Holds;
use rusqlite::params;

use super::{ExecutionMode, StoreResult, WriteTx};
use crate::clock::UnixMillis;
use piw_engine::store::records::Holder;

/// The statuses of a step whose time may still run (waiting for, or judging, a submission).
const OPEN: &str = "i.status IN ('pending', 'validating')";

impl WriteTx<'_> {
    /// Whoever presents the steps of run `run_id` (`None`: an interactive run without an
    /// origin session, which nobody can be seen presenting: its steps are always held).
    pub(crate) fn holder_of(&self, run_id: &str) -> StoreResult<Option<Holder>> {
        let (mode, origin): (String, Option<String>) = self
            .conn()
            .prepare_cached("SELECT execution_mode, origin_session FROM runs WHERE run_id = ?1")?
            .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(if mode == ExecutionMode::Detached.as_str() {
            Some(Holder::Bridge(run_id.to_owned()))
        } else {
            origin.map(Holder::Session)
        })
    }

    /// At a host's start nobody holds anything (sessions connect again, bridges start again):
    /// the open steps an earlier host left held are released. `alive_until` is the last time
    /// that host is known to have been up (its clean stop, else its last commit): the time
    /// after it was the host being down, which counts for no step. Steps without a holder
    /// (see [`WriteTx::holder_of`]) stay held. Returns how many were released.
    pub fn release_all_interactions(&mut self, alive_until: UnixMillis) -> StoreResult<usize> {
        let released: Vec<(String, Option<UnixMillis>)> = self
            .conn()
            .prepare_cached(
                "UPDATE interactions AS i
                 SET used_ms = i.used_ms + max(min(?1, ?2) - i.held_since, 0), held_since = NULL,
                     deadline_at = NULL
                 WHERE i.status IN ('pending', 'validating') AND i.held_since IS NOT NULL
                   AND (i.origin_session IS NOT NULL
                        OR EXISTS (SELECT 1 FROM runs r WHERE r.run_id = i.run_id
                                                         AND r.execution_mode = 'detached'))
                 RETURNING attempt_id, deadline_at",
            )?
            .query_map(params![alive_until, self.now], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        self.mirror_attempt_deadlines(&released)?;
        if !released.is_empty() {
            self.ops.push("release_all_interactions");
        }
        Ok(released.len())
    }

    /// The last time the host before this one is known to have been up, for
    /// [`WriteTx::release_all_interactions`]: its clean stop, else its last commit (the newest
    /// event: events are stored in commit order); never later than now.
    pub fn earlier_host_alive_until(&self) -> StoreResult<Option<UnixMillis>> {
        let stopped: Option<UnixMillis> = self
            .conn()
            .prepare_cached(
                "SELECT stopped_at FROM host_epochs WHERE stopped_at IS NOT NULL
                 ORDER BY epoch DESC LIMIT 1",
            )?
            .query_row([], |r| r.get(0))
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        let last_event: Option<UnixMillis> = self
            .conn()
            .prepare_cached("SELECT at FROM events ORDER BY event_id DESC LIMIT 1")?
            .query_row([], |r| r.get(0))
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        Ok(stopped
            .into_iter()
            .chain(last_event)
            .max()
            .map(|t| t.min(self.now)))
    }

    /// Releases the open steps of run `run_id` whoever held them: the run was detached, so its
    /// session no longer presents them (its bridge holds them from its hello).
    pub(crate) fn release_run_interactions(&mut self, run_id: &str) -> StoreResult<()> {
        let released: Vec<(String, Option<UnixMillis>)> = self
            .conn()
            .prepare_cached(
                "UPDATE interactions AS i
                 SET used_ms = i.used_ms + max(?2 - i.held_since, 0), held_since = NULL,
                     deadline_at = NULL
                 WHERE i.run_id = ?1 AND i.status IN ('pending', 'validating')
                   AND i.held_since IS NOT NULL
                 RETURNING attempt_id, deadline_at",
            )?
            .query_map(params![run_id, self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        self.mirror_attempt_deadlines(&released)
    }

    /// The open attempt of each step takes the step's deadline.
    fn mirror_attempt_deadlines(
        &mut self,
        steps: &[(String, Option<UnixMillis>)],
    ) -> StoreResult<()> {
        for (attempt_id, deadline_at) in steps {
            self.conn()
                .prepare_cached(
                    "UPDATE attempts SET deadline_at = ?2
                     WHERE attempt_id = ?1 AND status IN ('running', 'waiting')",
                )?
                .execute(params![attempt_id, deadline_at])?;
        }
        Ok(())
    }
}

/// The `WHERE` clause (on `interactions AS i`, `?1` the key) of the steps `holder` presents.
fn holder_filter(holder: &Holder) -> (&'static str, &str) {
    match holder {
        Holder::Session(session) => (
            "i.origin_session = ?1 AND EXISTS (SELECT 1 FROM runs r WHERE r.run_id = i.run_id
                                               AND r.execution_mode = 'interactive')",
            session.as_str(),
        ),
        Holder::Bridge(run_id) => (
            "i.run_id = ?1 AND EXISTS (SELECT 1 FROM runs r WHERE r.run_id = i.run_id
                                       AND r.execution_mode = 'detached')",
            run_id.as_str(),
        ),
    }
}

impl Holds for WriteTx<'_> {
    fn hold_interactions(&mut self, holder: &Holder) -> StoreResult<usize> {
        let (filter, key) = holder_filter(holder);
        let sql = format!(
            "UPDATE interactions AS i SET held_since = ?2,
                    deadline_at = CASE WHEN i.budget_ms IS NULL THEN NULL
                                       ELSE ?2 + max(i.budget_ms - i.used_ms, 0) END
             WHERE {filter} AND {OPEN} AND i.held_since IS NULL
             RETURNING attempt_id, deadline_at"
        );
        let held: Vec<(String, Option<UnixMillis>)> = self
            .conn()
            .prepare_cached(&sql)?
            .query_map(params![key, self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        self.mirror_attempt_deadlines(&held)?;
        // A fault point only where something changed (`PIW_FAULT`, the crash matrix).
        if !held.is_empty() {
            self.ops.push("hold_interactions");
        }
        Ok(held.len())
    }

    fn release_interactions(&mut self, holder: &Holder) -> StoreResult<usize> {
        let (filter, key) = holder_filter(holder);
        let sql = format!(
            "UPDATE interactions AS i
             SET used_ms = i.used_ms + max(?2 - i.held_since, 0), held_since = NULL,
                 deadline_at = NULL
             WHERE {filter} AND {OPEN} AND i.held_since IS NOT NULL
             RETURNING attempt_id, deadline_at"
        );
        let released: Vec<(String, Option<UnixMillis>)> = self
            .conn()
            .prepare_cached(&sql)?
            .query_map(params![key, self.now], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        self.mirror_attempt_deadlines(&released)?;
        if !released.is_empty() {
            self.ops.push("release_interactions");
        }
        Ok(released.len())
    }
}
