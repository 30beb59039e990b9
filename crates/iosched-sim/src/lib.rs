//! iosched-sim: a deterministic discrete-event model of the Linux block layer (blk-mq) on a multi-core host with
//! NVMe (or SATA) SSDs. Scheduling decisions come from `iosched-policy`; everything else (CPU cost, locks, tags,
//! device queues, flash parallelism, write buffer, garbage collection) is modelled here.

pub mod blk;
pub mod config;
pub mod device;
pub mod distribution;
pub mod engine;
pub mod host;
pub mod metrics;
mod occupancy;
pub mod pagecache;
pub mod result;
pub mod sim;
pub mod sq;
#[cfg(test)]
mod testkit;
pub mod trace;
pub mod workload;

pub use config::SimConfig;
pub use iosched_policy::SCHEDULERS;
pub use result::SimResult;

/// splitmix64's finaliser: a fixed, well-mixed 64-bit hash (the device's stand-in for the FTL's mapping of page
/// addresses; the scatter of fio's popularity ranks over a job's region).
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Run one simulation. `progress` is called with the fraction of simulated time done; returning false aborts.
pub fn simulate(
    config: &SimConfig,
    progress: &mut dyn FnMut(f64) -> bool,
) -> Result<SimResult, String> {
    sim::Simulation::new(config)?.run(progress)
}
