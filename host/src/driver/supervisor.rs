//! The supervisor task: owns the child processes. It launches what the store thread asks
//! for, reports starts and exits back, and stops process groups on request. It decides
//! nothing about runs. Its helpers (detached runs' bridges, decision channels' adapters) live
//! through [`super::helper::run_helper`]; their modules keep what is theirs (a bridge's handshake, what each
//! reports).
//!
//! It also keeps the standby pools: for runtimes that start slowly (Node), a few workers are
//! started ahead of time, load their runtime, and wait on stdin. A launch takes one and hands
//! it the run's envelope; the pool refills in the background. A standby worker serves exactly
//! the one run whose envelope it receives, so isolation stays one run per process. The pool's
//! size is `PIW_STANDBY_WORKERS`; a standby worker is started with `PIW_STANDBY=1`. After
//! [`Settings::standby_idle`] without a launch of their runtime the pools are drained, so an
//! idle host keeps no Node process and sets no timer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::fault::FaultPlan;
use super::helper::wait_or_stop;
use super::queues::StoreMsg;
use crate::engine::children::ChildReport;
use crate::store::ChildExitRecord;
use crate::supervise::{self, SpawnSpec, StdinHandoff, Supervised};

/// How long after a launch the pool starts its replacement worker (measured: p99 of W2
/// 16-19 ms without the delay, 10-12 ms with it; docs/PERFORMANCE.md).
const REFILL_DELAY: Duration = Duration::from_millis(25);

/// The same for the first refill of an empty pool (the host's first launch, the first after a
/// drain): that run's own worker is loading from nothing, and workers started beside it took
/// its CPU (docs/PERFORMANCE.md, "The Node workloads"). Not after every launch that found the
/// pool empty: in a burst the refills are the next launches' workers.
const COLD_REFILL_DELAY: Duration = Duration::from_millis(250);

pub use crate::engine::children::{StandbyPool, SupervisorCmd};

type Standby = (Supervised, StdinHandoff);

/// What the supervisor is told at start.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// SIGTERM to SIGKILL grace when the host stops its children.
    pub stop_grace: Duration,
    /// How long standby workers wait for a run before the pools are drained.
    pub standby_idle: Duration,
}

/// The idle workers of every pool and how many are being started.
#[derive(Default)]
struct Pools {
    idle: HashMap<String, VecDeque<Standby>>,
    starting: HashMap<String, usize>,
    /// How many idle workers wait for a run, for `host.status` (`standby_workers`).
    waiting: Arc<AtomicUsize>,
    /// When a pool last changed: a launch took a worker or a started one joined. The drain
    /// counts from here, so a worker that was slow to start still waits the whole idle time.
    last_change: Option<tokio::time::Instant>,
    /// The pools refilled since the host started or the last drain; the first refill of any
    /// other waits [`COLD_REFILL_DELAY`].
    refilled: HashSet<String>,
}

/// When the pools are to be drained: `idle` after their last change, while workers wait and
/// none is still starting (its arrival is a change); never when none waits (an idle host has
/// no timer).
fn drain_at(
    waiting: usize,
    starting: usize,
    last_change: Option<tokio::time::Instant>,
    idle: Duration,
) -> Option<tokio::time::Instant> {
    if waiting == 0 || starting > 0 {
        return None;
    }
    // `Duration::MAX` (`PIW_STANDBY_IDLE_MS=0`): never.
    last_change.and_then(|at| at.checked_add(idle))
}

/// How long after a launch of pool `key` its refill starts; the first since the host started
/// or the pools were drained (`refilled` cleared) waits longest.
fn refill_delay(refilled: &mut HashSet<String>, key: &str) -> Duration {
    if refilled.insert(key.to_owned()) {
        COLD_REFILL_DELAY
    } else {
        REFILL_DELAY
    }
}

impl Pools {
    /// Workers waiting for a run, over every pool.
    fn waiting(&self) -> usize {
        self.idle.values().map(VecDeque::len).sum()
    }

    /// Workers being started, over every pool.
    fn starting(&self) -> usize {
        self.starting.values().sum()
    }

    /// Makes the number of idle workers visible to `host.status`.
    fn publish(&self) {
        self.waiting.store(self.waiting(), Ordering::Relaxed);
    }

    /// A waiting worker of `key` that is still alive. The reaper may not have reported a
    /// worker that died a moment ago, so `/proc` is asked too (a zombie counts as dead).
    fn take(&mut self, key: &str) -> Option<Standby> {
        let idle = self.idle.get_mut(key)?;
        while let Some((mut child, handoff)) = idle.pop_front() {
            let alive = child.try_exit().is_none()
                && supervise::read_proc_stat(child.pid()).is_some_and(|s| !s.is_dead());
            if alive {
                return Some((child, handoff));
            }
        }
        None
    }

    /// Starts workers until `pool` has its size (idle plus starting).
    fn refill(
        &mut self,
        delay: Duration,
        pool: &StandbyPool,
        ready: &mpsc::UnboundedSender<(String, StandbyResult)>,
    ) {
        let idle = self.idle.get(&pool.key).map_or(0, VecDeque::len);
        let starting = self.starting.entry(pool.key.clone()).or_insert(0);
        for _ in (idle + *starting)..pool.size {
            *starting += 1;
            let (key, template, ready) = (pool.key.clone(), pool.template.clone(), ready.clone());
            tokio::spawn(async move {
                // Not at once: the run that just took a worker is at its busiest now (hello,
                // first commits), and forking the host competes with it for the CPU.
                tokio::time::sleep(delay).await;
                let _ = ready.send((key, supervise::spawn_standby(template).await));
            });
        }
    }

    /// Stops every idle worker: its stdin closes (it exits on its own) and its group gets
    /// SIGTERM, then SIGKILL after the grace, in case it is still loading. The handles are kept
    /// until the supervisor returns, so the grace applies.
    fn clear(&mut self, grace: Duration) -> Vec<Supervised> {
        let mut stopping = Vec::new();
        for (child, handoff) in self.idle.drain().flat_map(|(_, q)| q) {
            drop(handoff);
            child.terminate(grace);
            stopping.push(child);
        }
        stopping
    }
}

type StandbyResult = Result<Standby, supervise::SuperviseError>;

/// Runs until the command channel closes, then stops every child it still has.
/// `standby_waiting` is kept at the number of standby workers waiting for a run.
pub async fn run(
    mut commands: mpsc::UnboundedReceiver<SupervisorCmd>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
    settings: Settings,
    standby_waiting: Arc<AtomicUsize>,
) {
    let stop_grace = settings.stop_grace;
    let mut stops: HashMap<(String, u64), mpsc::UnboundedSender<Duration>> = HashMap::new();
    // Detached runs' bridges, by launch number.
    let mut bridge_stops: HashMap<u64, mpsc::UnboundedSender<Duration>> = HashMap::new();
    // Decision channels' adapters, by launch number.
    let mut channel_stops: HashMap<u64, mpsc::UnboundedSender<Duration>> = HashMap::new();
    let mut pass_stops: HashMap<u64, mpsc::UnboundedSender<Duration>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut pools = Pools {
        waiting: standby_waiting,
        ..Pools::default()
    };
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<(String, StandbyResult)>();
    loop {
        let drain = drain_at(
            pools.waiting(),
            pools.starting(),
            pools.last_change,
            settings.standby_idle,
        );
        let cmd = tokio::select! {
            cmd = commands.recv() => match cmd {
                Some(cmd) => cmd,
                None => break,
            },
            () = sleep_until_some(drain) => {
                let stopping = pools.clear(stop_grace);
                pools.refilled.clear();
                pools.publish();
                tracing::info!(workers = stopping.len(), "standby pools drained after an idle time");
                for mut child in stopping {
                    tasks.spawn(async move {
                        let _ = tokio::time::timeout(stop_grace * 2, child.wait()).await;
                    });
                }
                continue;
            }
            Some((key, started)) = ready_rx.recv() => {
                if let Some(n) = pools.starting.get_mut(&key) {
                    *n = n.saturating_sub(1);
                }
                pools.last_change = Some(tokio::time::Instant::now());
                match started {
                    Ok(standby) => {
                        pools.idle.entry(key).or_default().push_back(standby);
                        pools.publish();
                    }
                    // Not retried here: the next launch of this runtime starts cold and asks
                    // for a refill again, so a broken runtime cannot make us spin.
                    Err(e) => tracing::warn!(pool = %key, error = %e, "cannot start a standby worker"),
                }
                continue;
            }
        };
        stops.retain(|_, tx| !tx.is_closed());
        bridge_stops.retain(|_, tx| !tx.is_closed());
        channel_stops.retain(|_, tx| !tx.is_closed());
        pass_stops.retain(|_, tx| !tx.is_closed());
        match cmd {
            SupervisorCmd::Launch {
                run_id,
                generation,
                child_epoch,
                launch,
                spec,
                standby,
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                stops.insert((run_id.clone(), generation), tx);
                let mut source = ChildSource::Spawn(spec);
                if let Some(pool) = &standby {
                    pools.last_change = Some(tokio::time::Instant::now());
                    if let (Some((child, handoff)), ChildSource::Spawn(spec)) =
                        (pools.take(&pool.key), &source)
                    {
                        // Its output goes to the run's log from here, with what it wrote
                        // while it waited.
                        if let Some(log) = &spec.output_log {
                            if let Err(e) = child.log_output_to(log) {
                                tracing::warn!(%run_id, path = %log.path.display(), error = %e, "cannot open the child's output log");
                            }
                        }
                        if handoff.hand_over(spec.stdin_payload.clone()) {
                            tracing::debug!(%run_id, pid = child.pid(), "took a standby worker");
                            source = ChildSource::Standby(child);
                        }
                    }
                    let delay = refill_delay(&mut pools.refilled, &pool.key);
                    pools.refill(delay, pool, &ready_tx);
                    pools.publish();
                }
                tasks.spawn(watch_child(
                    Launched {
                        run_id,
                        generation,
                        child_epoch,
                        launch,
                    },
                    source,
                    rx,
                    reports.clone(),
                ));
            }
            SupervisorCmd::Stop {
                run_id,
                generation,
                grace,
            } => {
                if let Some(tx) = stops.get(&(run_id, generation)) {
                    let _ = tx.send(grace);
                }
            }
            // Thousands of directories take a second or more: on a blocking thread, waited
            // for at the stop like the children.
            SupervisorCmd::RemoveLogs { dirs } => {
                tasks.spawn_blocking(move || remove_log_dirs(&dirs));
            }
            SupervisorCmd::LaunchBridge {
                run_id,
                launch,
                spec,
                lock_file,
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                bridge_stops.insert(launch, tx);
                tasks.spawn(super::bridge_launch::watch_bridge(
                    run_id,
                    launch,
                    spec,
                    lock_file,
                    rx,
                    reports.clone(),
                ));
            }
            SupervisorCmd::StopBridge { launch, grace } => {
                if let Some(tx) = bridge_stops.get(&launch) {
                    let _ = tx.send(grace);
                }
            }
            SupervisorCmd::LaunchChannel { name, launch, spec } => {
                let (tx, rx) = mpsc::unbounded_channel();
                channel_stops.insert(launch, tx);
                tasks.spawn(super::channel_launch::watch_channel(
                    name,
                    launch,
                    spec,
                    rx,
                    reports.clone(),
                ));
            }
            SupervisorCmd::StopChannel { launch, grace } => {
                if let Some(tx) = channel_stops.get(&launch) {
                    let _ = tx.send(grace);
                }
            }
            SupervisorCmd::LaunchPass {
                resource_uid,
                launch,
                spec,
            } => {
                let (tx, rx) = mpsc::unbounded_channel();
                pass_stops.insert(launch, tx);
                tasks.spawn(super::pass_launch::watch_pass(
                    resource_uid,
                    launch,
                    spec,
                    rx,
                    reports.clone(),
                ));
            }
            SupervisorCmd::StopPass { launch, grace } => {
                if let Some(tx) = pass_stops.get(&launch) {
                    let _ = tx.send(grace);
                }
            }
        }
    }
    // The host is stopping: stop the standby workers and every child's group, then wait for
    // the children's exits to be reported.
    let mut standby = pools.clear(stop_grace);
    pools.publish();
    for tx in stops
        .values()
        .chain(bridge_stops.values())
        .chain(channel_stops.values())
        .chain(pass_stops.values())
    {
        let _ = tx.send(stop_grace);
    }
    while tasks.join_next().await.is_some() {}
    for child in &mut standby {
        let _ = tokio::time::timeout(stop_grace, child.wait()).await;
    }
}

/// Waits until `at`; forever when there is no `at`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where a run's child comes from.
enum ChildSource {
    /// Start it now.
    Spawn(SpawnSpec),
    /// A standby worker that already has the run's envelope.
    Standby(Supervised),
}

/// Which launch a watched child belongs to.
struct Launched {
    run_id: String,
    generation: u64,
    child_epoch: i64,
    launch: u64,
}

async fn watch_child(
    launched: Launched,
    source: ChildSource,
    stop: mpsc::UnboundedReceiver<Duration>,
    reports: std::sync::mpsc::Sender<StoreMsg>,
) {
    let Launched {
        run_id,
        generation,
        child_epoch,
        launch,
    } = launched;
    let standby = matches!(source, ChildSource::Standby(_));
    let spawned = match source {
        ChildSource::Spawn(spec) => match FaultPlan::from_env().spawn_failure() {
            Some(source) => Err(supervise::SuperviseError::Spawn {
                program: spec.program.clone(),
                source,
            }),
            None => supervise::spawn(spec).await,
        },
        ChildSource::Standby(child) => Ok(child),
    };
    let (exit, host_ran_out_of) = match spawned {
        Ok(mut child) => {
            let _ = reports.send(StoreMsg::Child(ChildReport::Started {
                run_id: run_id.clone(),
                generation,
                child_epoch,
                launch,
                pid: child.pid(),
                start_time: child.start_time(),
                standby,
            }));
            tracing::debug!(%run_id, generation, pid = child.pid(), program = %child.program().display(), "child started");
            let exit = wait_or_stop(&mut child, stop, std::future::pending()).await;
            (exit, None)
        }
        Err(e) => {
            let host_ran_out_of = e.exhausted_resource();
            tracing::error!(%run_id, error = %e, ?host_ran_out_of, "cannot launch the child");
            let exit = ChildExitRecord {
                reason: match host_ran_out_of {
                    Some(resource) => format!("launch failed: the host ran out of {resource}: {e}"),
                    None => format!("launch failed: {e}"),
                },
                ..Default::default()
            };
            (exit, host_ran_out_of)
        }
    };
    let _ = reports.send(StoreMsg::Child(ChildReport::Exited {
        run_id,
        generation,
        child_epoch,
        launch,
        exit,
        host_ran_out_of,
    }));
}

/// Removes each directory and what is in it; one that is gone already is no failure, and a
/// failure costs only space (logged).
fn remove_log_dirs(dirs: &[std::path::PathBuf]) {
    for dir in dirs {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a pruned run's logs");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pools_drain_only_when_workers_wait_and_none_is_starting() {
        let at = tokio::time::Instant::now();
        let idle = Duration::from_secs(600);
        assert_eq!(drain_at(2, 0, Some(at), idle), Some(at + idle));
        assert_eq!(drain_at(0, 0, Some(at), idle), None, "no worker: no timer");
        assert_eq!(
            drain_at(1, 1, Some(at), idle),
            None,
            "a start still to come"
        );
        assert_eq!(drain_at(2, 0, None, idle), None);
        assert_eq!(
            drain_at(2, 0, Some(at), Duration::MAX),
            None,
            "PIW_STANDBY_IDLE_MS=0"
        );
    }

    #[test]
    fn an_empty_pool_refills_later_than_a_used_one() {
        let mut refilled = HashSet::new();
        assert_eq!(
            refill_delay(&mut refilled, "node a"),
            COLD_REFILL_DELAY,
            "first launch"
        );
        assert_eq!(refill_delay(&mut refilled, "node a"), REFILL_DELAY);
        assert_eq!(
            refill_delay(&mut refilled, "node b"),
            COLD_REFILL_DELAY,
            "another pool"
        );
        refilled.clear(); // a drain
        assert_eq!(
            refill_delay(&mut refilled, "node a"),
            COLD_REFILL_DELAY,
            "after a drain"
        );
    }
}
