//! piw-tests: the home of cross-crate integration suites and shared fixtures. The end-to-end
//! suites that need the `piw` binaries live beside them in `cli/tests/` (Cargo exposes a
//! package's binaries only to its own tests); what they share with the soak lives here.

use std::path::Path;
use std::time::Duration;

/// The live processes (other than this one) of the installation at `home`: its hosts, their
/// children and the children's descendants, found by the `PIW_HOME=<home>` in their
/// environment (a host passes it on to its children, and they to theirs).
pub fn installation_processes(home: &Path) -> Vec<u32> {
    let entry = format!("PIW_HOME={}", home.display()).into_bytes();
    piw_host::supervise::processes_with_env(|kv| kv == entry.as_slice())
        .unwrap_or_default()
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// Kills every process of the installation at `home` ([`installation_processes`]), stopped
/// ones too. A harness calls it when a test or soak ends, pass or fail, so a failure leaves no
/// spinning child behind to slow down or fail what runs after it. Repeats until none is left:
/// a host that dies last may have started one.
pub fn kill_installation(home: &Path) {
    for _ in 0..100 {
        let pids = installation_processes(home);
        if pids.is_empty() {
            return;
        }
        for pid in pids.into_iter().filter_map(|p| i32::try_from(p).ok()) {
            // SAFETY: plain system calls on a pid just read from /proc that carries this
            // harness's own installation in its environment.
            unsafe {
                libc::kill(pid, libc::SIGCONT);
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// In a `run.status` reply `s`, the pending entry of `list` (`decisions`, `interactions`) for
/// `node`.
pub fn pending<'a>(
    s: &'a serde_json::Value,
    list: &str,
    node: &str,
) -> Option<&'a serde_json::Value> {
    s[list]
        .as_array()?
        .iter()
        .find(|x| x["node_id"] == node && x["status"] == "pending")
}

/// Whether a `run.status` reply shows a run that ended (or stopped for review).
pub fn is_final(s: &serde_json::Value) -> bool {
    matches!(
        s["run"]["status"].as_str(),
        Some("completed" | "failed" | "cancelled" | "timed_out" | "review")
    )
}
