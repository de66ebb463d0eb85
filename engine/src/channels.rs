//! Decision channels: the host's adapter children that take protected human decisions to a
//! person outside Pi (Telegram first). An adapter is a client of the host like any other (it
//! reads runs, and answers a decision with `decision.answer`, carrying its `channel`); the host
//! only keeps one running per configured channel, restarts one that dies with a growing pause,
//! and stops one whose channel was removed or changed. An adapter's death never touches a run.
//!
//! This module decides, without I/O: [`plan`] compares the configured channels with the
//! adapters alive and the restart pauses, and orders launches and stops; [`on_exit`] says when
//! an adapter that exited runs again ([`restart_delay_ms`]). `driver::channel_launch` reads the
//! configuration and runs the processes; the adapters' code is in the npm package
//! (`node-binding/lib/channel-<kind>.js`), run with the host's Node worker runtime.
//!
//! The rules:
//! - one adapter per configured channel, whatever happens to runs; it holds no child slot (it
//!   runs no workflow code and serves no run);
//! - an exit the host did not order is followed by a restart after 1 s, doubling with each
//!   exit in a row up to [`MAX_RESTART_DELAY_MS`]; an adapter that ran for
//!   [`STEADY_AFTER_MS`] counts as healthy again (the next pause is 1 s);
//! - a channel removed or changed (its configuration's digest) stops its adapter; a changed
//!   one starts again at once with the new configuration.

use std::path::PathBuf;

use super::helper_processes::{self, HelperCommand};
pub use crate::state::channels::{AdapterEntry, ChannelSettings, ChannelSpec, Channels, Restart};
use crate::state::children::SupervisorCmd;
use crate::state::HostState;
use crate::store::ChildExitRecord;

/// The first pause before an adapter that exited runs again.
pub const FIRST_RESTART_DELAY_MS: i64 = 1_000;
/// The longest pause.
pub const MAX_RESTART_DELAY_MS: i64 = 60_000;
/// An adapter that ran this long before it exited starts over at the first pause.
pub const STEADY_AFTER_MS: i64 = 60_000;
/// Bytes of an adapter's output kept for its exit's log line.
const TAIL_BYTES: usize = 8 * 1024;

impl ChannelSettings {
    /// The adapter's command for a channel of `kind`: `node <lib>/channel-<kind>.js serve
    /// <name>`.
    fn command(&self, spec: &ChannelSpec) -> Result<(PathBuf, Vec<String>), String> {
        let (node, lib) = self.runtime.as_ref().map_err(Clone::clone)?;
        if !is_known_kind(&spec.kind) {
            return Err(format!("no adapter for channels of kind {}", spec.kind));
        }
        let script = lib.join(format!("channel-{}.js", spec.kind));
        Ok((
            node.clone(),
            vec![
                script.display().to_string(),
                "serve".to_owned(),
                spec.name.clone(),
            ],
        ))
    }
}

/// The kinds of channel piw has an adapter for.
pub const KINDS: [&str; 1] = ["telegram"];

/// Whether piw has an adapter for channels of `kind`.
pub fn is_known_kind(kind: &str) -> bool {
    KINDS.contains(&kind)
}

/// What [`plan`] orders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelOrder {
    Launch(ChannelSpec),
    Stop { name: String },
}

/// The pause before the restart that follows `failures` exits in a row: 1 s, doubling, at
/// most [`MAX_RESTART_DELAY_MS`].
pub fn restart_delay_ms(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST_RESTART_DELAY_MS << doublings).min(MAX_RESTART_DELAY_MS)
}

/// What the host must do about adapters at `now`.
pub fn plan(channels: &Channels, now: i64) -> Vec<ChannelOrder> {
    helper_processes::plan(
        &channels.live,
        |entry| entry.stopping,
        |name, entry| {
            let current = channels.configured.get(name);
            current
                .is_none_or(|c| c.digest != entry.digest)
                .then(|| ChannelOrder::Stop { name: name.into() })
        },
        channels
            .configured
            .iter()
            .map(|(name, spec)| (name.as_str(), spec)),
        |name, spec| {
            let pausing = channels.restarts.get(name).is_some_and(|r| r.at > now);
            (!pausing).then(|| ChannelOrder::Launch(spec.clone()))
        },
    )
}

/// Notes the exit of adapter `launch` of channel `name` at `now`: an exit the host did not
/// order (and not while it stops) sets the pause before its restart.
pub fn on_exit(channels: &mut Channels, name: &str, launch: u64, now: i64, host_stopping: bool) {
    let Some(entry) = channels.live.get(name).filter(|e| e.launch == launch) else {
        return;
    };
    let entry = entry.clone();
    channels.live.remove(name);
    if entry.stopping || host_stopping {
        channels.restarts.remove(name);
        return;
    }
    let ran_ms = now.saturating_sub(entry.launched_at);
    let failures = match channels.restarts.get(name) {
        Some(r) if ran_ms < STEADY_AFTER_MS => r.failures.saturating_add(1),
        _ => 1,
    };
    channels.restarts.insert(
        name.to_owned(),
        Restart {
            failures,
            at: now.saturating_add(restart_delay_ms(failures)),
        },
    );
}

/// An adapter's process reported by the supervisor.
#[derive(Debug)]
pub enum ChannelReport {
    /// It exited, or never started (`exit.reason` says).
    Exited {
        name: String,
        launch: u64,
        exit: ChildExitRecord,
    },
}

/// Handles adapter reports.
pub fn on_reports(state: &mut HostState, now: i64, reports: Vec<ChannelReport>) {
    for report in reports {
        let ChannelReport::Exited { name, launch, exit } = report;
        let ordered = state
            .channels
            .live
            .get(&name)
            .is_some_and(|e| e.launch == launch && e.stopping);
        on_exit(&mut state.channels, &name, launch, now, state.shutting_down);
        let last = String::from_utf8_lossy(&exit.stderr_tail);
        let last = last
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        if ordered || state.shutting_down {
            tracing::info!(channel = %name, launch, reason = %exit.reason, "channel adapter stopped");
        } else {
            let restart_in = state.channels.restarts.get(&name).map(|r| r.at - now);
            tracing::warn!(channel = %name, launch, reason = %exit.reason, stderr = %last, ?restart_in, "channel adapter exited");
        }
    }
}

/// Replaces the configured channels (the host's start, `channel.reload`).
pub fn configure(state: &mut HostState, specs: Vec<ChannelSpec>) {
    state.channels.configured = specs.into_iter().map(|s| (s.name.clone(), s)).collect();
    let configured = &state.channels.configured;
    state
        .channels
        .restarts
        .retain(|name, _| configured.contains_key(name));
}

/// Launches and stops adapters as [`plan`] says. Runs on the store thread after each turn.
pub fn reconcile(state: &mut HostState, now: i64) {
    if state.shutting_down || !state.supervising {
        return;
    }
    let Some(settings) = state.child_config.channels.clone() else {
        return;
    };
    for order in plan(&state.channels, now) {
        match order {
            ChannelOrder::Stop { name } => {
                if let Some(entry) = state.channels.live.get_mut(&name) {
                    tracing::info!(channel = %name, "stopping the channel adapter");
                    entry.stopping = true;
                    state.child_commands.push(SupervisorCmd::StopChannel {
                        launch: entry.launch,
                        grace: state.child_config.kill_grace,
                    });
                }
            }
            ChannelOrder::Launch(spec) => launch(state, &settings, &spec, now),
        }
    }
}

fn launch(state: &mut HostState, settings: &ChannelSettings, spec: &ChannelSpec, now: i64) {
    let (program, args) = match settings.command(spec) {
        Ok(c) => c,
        Err(why) => {
            // Said once per pause: tried again like an adapter that exited.
            tracing::error!(channel = %spec.name, %why, "cannot run the channel adapter");
            let failures = state
                .channels
                .restarts
                .get(&spec.name)
                .map_or(1, |r| r.failures.saturating_add(1));
            state.channels.restarts.insert(
                spec.name.clone(),
                Restart {
                    failures,
                    at: now.saturating_add(restart_delay_ms(failures)),
                },
            );
            return;
        }
    };
    let launch = state.next_launch;
    state.next_launch += 1;
    *state
        .channels
        .launches
        .entry(spec.name.clone())
        .or_default() += 1;
    let command = HelperCommand {
        program,
        args,
        env: settings.env.clone(),
        cwd: settings.home.clone(),
    };
    let log = settings.logs.as_ref();
    let log = log.map(|dir| dir.join(format!("{}.log", spec.name)));
    let spawn = helper_processes::spawn_spec(state, command, None, TAIL_BYTES, log);
    tracing::info!(channel = %spec.name, kind = %spec.kind, launch, "launching the channel adapter");
    state.channels.live.insert(
        spec.name.clone(),
        AdapterEntry {
            launch,
            digest: spec.digest.clone(),
            launched_at: now,
            stopping: false,
        },
    );
    state.child_commands.push(SupervisorCmd::LaunchChannel {
        name: spec.name.clone(),
        launch,
        spec: spawn,
    });
}

/// When an adapter's restart pause ends next.
pub fn next_deadline(state: &HostState) -> Option<i64> {
    state.child_config.channels.as_ref()?;
    let channels = &state.channels;
    channels
        .restarts
        .iter()
        .filter(|(name, _)| {
            channels.configured.contains_key(*name) && !channels.live.contains_key(*name)
        })
        .map(|(_, r)| r.at)
        .min()
}

/// The state of each configured channel, for `host.status`: `running`, `starting in N ms`
/// (after exits), with how many times this host started it.
pub fn status(state: &HostState, now: i64) -> Vec<serde_json::Value> {
    let channels = &state.channels;
    channels
        .configured
        .values()
        .map(|spec| {
            let running = channels.live.get(&spec.name).is_some_and(|e| !e.stopping);
            let restart = channels.restarts.get(&spec.name);
            serde_json::json!({
                "name": spec.name,
                "kind": spec.kind,
                "state": if running { "running" } else if restart.is_some() { "restarting" } else { "stopped" },
                "restart_in_ms": restart.filter(|_| !running).map(|r| (r.at - now).max(0)),
                "exits_in_a_row": restart.map_or(0, |r| r.failures),
                "launches": channels.launches.get(&spec.name).copied().unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, digest: &str) -> ChannelSpec {
        ChannelSpec {
            name: name.into(),
            kind: "telegram".into(),
            digest: digest.into(),
        }
    }

    fn configured(specs: &[ChannelSpec]) -> Channels {
        Channels {
            configured: specs.iter().map(|s| (s.name.clone(), s.clone())).collect(),
            ..Channels::default()
        }
    }

    fn entry(launch: u64, digest: &str, at: i64) -> AdapterEntry {
        AdapterEntry {
            launch,
            digest: digest.into(),
            launched_at: at,
            stopping: false,
        }
    }

    #[test]
    fn each_configured_channel_gets_one_adapter() {
        let mut c = configured(&[spec("a", "1"), spec("b", "1")]);
        assert_eq!(
            plan(&c, 0),
            [
                ChannelOrder::Launch(spec("a", "1")),
                ChannelOrder::Launch(spec("b", "1"))
            ]
        );
        c.live.insert("a".into(), entry(1, "1", 0));
        c.live.insert("b".into(), entry(2, "1", 0));
        assert!(plan(&c, 10).is_empty());
    }

    #[test]
    fn a_removed_or_changed_channel_stops_its_adapter() {
        let mut c = configured(&[spec("a", "2")]);
        c.live.insert("a".into(), entry(1, "1", 0));
        c.live.insert("gone".into(), entry(2, "1", 0));
        assert_eq!(
            plan(&c, 0),
            [
                ChannelOrder::Stop { name: "a".into() },
                ChannelOrder::Stop {
                    name: "gone".into()
                }
            ]
        );
        // An ordered stop is no failure: the changed channel starts again at once.
        if let Some(e) = c.live.get_mut("a") {
            e.stopping = true;
        }
        on_exit(&mut c, "a", 1, 50, false);
        assert!(c.restarts.is_empty());
        assert!(plan(&c, 50).contains(&ChannelOrder::Launch(spec("a", "2"))));
    }

    #[test]
    fn an_adapter_that_dies_restarts_after_a_doubling_pause() {
        let mut c = configured(&[spec("a", "1")]);
        c.live.insert("a".into(), entry(1, "1", 0));
        on_exit(&mut c, "a", 1, 100, false);
        assert_eq!(
            c.restarts["a"],
            Restart {
                failures: 1,
                at: 1_100
            }
        );
        assert!(plan(&c, 1_099).is_empty(), "not before its pause");
        assert_eq!(plan(&c, 1_100), [ChannelOrder::Launch(spec("a", "1"))]);
        c.live.insert("a".into(), entry(2, "1", 1_100));
        on_exit(&mut c, "a", 2, 1_200, false);
        assert_eq!(
            c.restarts["a"],
            Restart {
                failures: 2,
                at: 3_200
            }
        );
        // A report about another launch changes nothing.
        on_exit(&mut c, "a", 1, 5_000, false);
        assert_eq!(c.restarts["a"].failures, 2);
        // One that ran steadily starts over at the first pause.
        c.live.insert("a".into(), entry(3, "1", 10_000));
        on_exit(&mut c, "a", 3, 10_000 + STEADY_AFTER_MS, false);
        assert_eq!(c.restarts["a"].failures, 1);
        assert_eq!(restart_delay_ms(1), 1_000);
        assert_eq!(restart_delay_ms(3), 4_000);
        assert_eq!(restart_delay_ms(40), MAX_RESTART_DELAY_MS);
    }

    #[test]
    fn exits_while_the_host_stops_are_no_failure() {
        let mut c = configured(&[spec("a", "1")]);
        c.live.insert("a".into(), entry(1, "1", 0));
        on_exit(&mut c, "a", 1, 100, true);
        assert!(c.restarts.is_empty());
    }

    #[test]
    fn the_command_runs_the_kinds_adapter_with_the_hosts_node() {
        let s = ChannelSettings {
            runtime: Ok(("/n/node".into(), "/pkg/lib".into())),
            home: "/h".into(),
            env: Vec::new(),
            logs: None,
        };
        let (program, args) = s.command(&spec("me", "1")).expect("a command");
        assert_eq!(program, PathBuf::from("/n/node"));
        assert_eq!(args, ["/pkg/lib/channel-telegram.js", "serve", "me"]);
        let mut other = spec("x", "1");
        other.kind = "carrier-pigeon".into();
        assert!(s.command(&other).is_err());
    }
}
