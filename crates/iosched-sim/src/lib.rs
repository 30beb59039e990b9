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

/// Run one simulation. `progress` is called with the fraction of simulated time done; returning false aborts.
pub fn simulate(
    config: &SimConfig,
    progress: &mut dyn FnMut(f64) -> bool,
) -> Result<SimResult, String> {
    sim::Simulation::new(config)?.run(progress)
}
