//! `cargo bench -p iosched-sim`: simulator speed on the two scenarios (10 cores, T-4KiB-apps, none) with 1
//! and 8 SSDs, and memory against run length. Prints simulated I/Os per wall second and simulated/wall time.
//! Target (issue 2): the 8-SSD scenario at >= 3 M simulated I/Os per wall second on one core.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.to_string())
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    // `cargo test` runs benches once in test mode: keep that instant.
    let quick = std::env::args().any(|a| a == "--test");
    let runtime_ns = if quick { 5_000_000 } else { 1_000_000_000 };
    for ssds in [1, 8] {
        let config = common::t4k_scenario(ssds, runtime_ns);
        let mut best = f64::MAX;
        let mut result = None;
        for _ in 0..if quick { 1 } else { 3 } {
            let started = Instant::now();
            result = Some(iosched_sim::simulate(&config, &mut |_| true).expect("runs"));
            best = best.min(started.elapsed().as_secs_f64());
        }
        let result = result.unwrap();
        println!(
            "t4k {ssds} SSD(s): {} I/Os simulated in {:.3} s wall (best of runs): {:.2} M I/Os per wall second, \
             simulated/wall time {:.2}",
            result.ios_completed,
            best,
            result.ios_completed as f64 / best / 1e6,
            result.sim_time_ns as f64 / 1e9 / best
        );
    }
    if !quick {
        // Memory must not grow with run length: same scenario, 0.5 s then 4 s simulated.
        for runtime_ns in [500_000_000u64, 4_000_000_000] {
            let config = common::t4k_scenario(8, runtime_ns);
            let result = iosched_sim::simulate(&config, &mut |_| true).expect("runs");
            println!(
                "memory: {:.1} s simulated ({} I/Os): peak RSS so far {} KiB",
                runtime_ns as f64 / 1e9,
                result.ios_completed,
                peak_rss_kib()
            );
        }
    }
}
