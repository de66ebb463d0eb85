//! A child flooding stdout and stderr: the supervisor drains both continuously into bounded
//! tails. Alone in its own test binary so the RSS measurement sees only this test.

use std::time::{Duration, Instant};

use piw_host::supervise::{self, SpawnSpec, DEFAULT_TAIL_BYTES};

const FLOOD: u64 = 100_000_000;

/// A line of /proc/self/status in bytes (the kernel reports kB).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_both_pipes_is_drained_into_bounded_tails() {
    // Warm up: the runtime, the reaper thread and the allocator touch their memory once.
    let mut warm = supervise::spawn(
        SpawnSpec::new("/bin/sh", std::env::temp_dir())
            .arg("-c")
            .arg("echo warm"),
    )
    .await
    .expect("spawn");
    assert!(warm.wait().await.success());
    drop(warm);

    let rss_before = status_bytes("VmRSS:");
    let script = format!("head -c {FLOOD} /dev/zero & head -c {FLOOD} /dev/zero >&2; wait");
    let started = Instant::now();
    let mut child = supervise::spawn(
        SpawnSpec::new("/bin/sh", std::env::temp_dir())
            .arg("-c")
            .arg(script),
    )
    .await
    .expect("spawn");
    let exit = tokio::time::timeout(Duration::from_secs(25), child.wait())
        .await
        .expect("exit reported");
    let took = started.elapsed();
    // The high-water mark covers every moment of the flood, not just the end.
    let peak = status_bytes("VmHWM:");

    assert!(exit.success(), "{exit:?}");
    assert!(exit.drain_complete);
    assert_eq!(exit.stdout_total, FLOOD);
    assert_eq!(exit.stderr_total, FLOOD);
    assert_eq!(exit.stdout_tail.len(), DEFAULT_TAIL_BYTES);
    assert_eq!(exit.stderr_tail.len(), DEFAULT_TAIL_BYTES);
    assert!(exit.stdout_tail.iter().all(|&b| b == 0));
    let growth = peak.saturating_sub(rss_before);
    eprintln!(
        "flood of 2 x {FLOOD} bytes drained in {took:?}; RSS before {} KiB, peak {} KiB",
        rss_before / 1024,
        peak / 1024
    );
    assert!(
        growth < 32 << 20,
        "RSS grew by {} KiB during the flood",
        growth / 1024
    );
}
