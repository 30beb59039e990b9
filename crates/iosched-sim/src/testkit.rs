//! Small configurations for unit tests: one 2-core host, one small NVMe SSD, jobs of a few milliseconds. (The
//! integration tests in `tests/` use the real presets.)

use crate::config::{
    Condition, DeviceConfig, EngineCost, HostConfig, Interface, IoEngine, JobConfig,
    PageCacheConfig, Rw, SchedulerConfig, SchedulerCost, SchedulerDispatch, SimConfig,
};

/// A 1 GiB NVMe SSD of 2 channels x 2 units, with a 1 MiB write buffer and 1 us per command.
pub fn small_device(condition: Condition) -> DeviceConfig {
    DeviceConfig {
        name: "/dev/nvme0n1".into(),
        interface: Interface::Nvme,
        capacity_bytes: 1 << 30,
        logical_block_bytes: 512,
        max_hw_queues: 4,
        queue_depth: 64,
        link_bytes_per_s: 4_000_000_000,
        controller_cores: 1,
        command_ns: 1_000,
        write_command_ns: None,
        read_out_ns: None,
        read_pipeline_ns: 2_000,
        write_ack_ns: 5_000,
        write_ack_jitter_ns: 0,
        channels: 2,
        units_per_channel: 2,
        channel_bytes_per_s: 1_000_000_000,
        flash_page_bytes: 16384,
        read_ns_by_page_type: vec![40_000, 60_000],
        read_jitter_ns: 0,
        page_read_extra_ns: 0,
        scattered_piece_bytes: None,
        program_unit_bytes: 65536,
        program_ns: 500_000,
        erase_ns: 2_000_000,
        read_suspend_ns: 0,
        read_suspend_limit: None,
        cache_program: false,
        block_program_units: 16,
        write_buffer_bytes: 1 << 20,
        waiting_write_slots: 0,
        read_buffer_bytes: None,
        waiting_read_slots: 0,
        buffer_fill_bytes_per_s: None,
        overprovision_bytes: 1 << 26,
        gc_free_units_low: 4,
        gc_step_copies: None,
        gc_step_units: None,
        condition,
        trimmed_fraction: 0.0,
        slc_static_bytes: None,
        slc_dynamic_bytes: None,
        slc_program_ns: None,
        rested: false,
        max_sectors_kb: None,
        filesystem: None,
        null_blk: None,
    }
}

fn engine(submit_ns: u64, complete_ns: u64) -> EngineCost {
    EngineCost {
        submit_ns,
        complete_ns,
        usr_fraction: 0.25,
        sleep_wake_ns: 3_000,
    }
}

/// A host of `cores` cores with a 64 MiB page cache and zero scheduler costs (an explicit entry for every scheduler
/// with an elevator, as `HostConfig::check_scheduler_costs` asks).
pub fn host(cores: u32) -> HostConfig {
    HostConfig {
        cores,
        context_switch_ns: 1_000,
        io_uring: engine(2_000, 1_500),
        libaio: engine(2_500, 1_500),
        psync: engine(3_000, 2_000),
        lock_handoff_ns: 0,
        uncontended_lock_ns: 0,
        completion_irq_ns: 0,
        package_idle_wake_ns: 0,
        package_idle_ns: 0,
        io_page_ns: 0,
        core_cache_bytes: 0,
        process_cache_bytes: 0,
        cache_refill_ns: 0,
        scheduler_costs: iosched_policy::REGISTRY
            .iter()
            .filter(|s| s.is_elevator())
            .map(|s| (s.name.to_string(), SchedulerCost::default()))
            .collect(),
        filesystems: Default::default(),
        page_cache: Some(PageCacheConfig {
            capacity_bytes: 64 << 20,
            copy_bytes_per_s: 4_000_000_000,
            dirty_background_ratio: 10,
            dirty_ratio: 20,
            read_ahead_kb: 128,
        }),
        kernel: iosched_policy::KernelVersion::NEWEST.to_string(),
        scheduler_dispatch: SchedulerDispatch::Inline,
        timer_lateness: None,
        timer_irq_ns: 0,
        wake_lateness: None,
        hz: 1000,
    }
}

/// A time-based 4 KiB io_uring job on device 0: 1 ms of ramp, then 5 ms measured, on any core.
pub fn job(name: &str, rw: Rw, iodepth: u32, numjobs: u32) -> JobConfig {
    JobConfig {
        iodepth,
        numjobs,
        ramp_ns: 1_000_000,
        ..JobConfig::new(name, rw, 5_000_000)
    }
}

/// A buffered (direct=0) psync job of `numjobs` processes, each on its own `file_bytes` file.
pub fn buffered_job(name: &str, rw: Rw, numjobs: u32, file_bytes: u64) -> JobConfig {
    let mut j = job(name, rw, 1, numjobs);
    j.ioengine = IoEngine::Psync;
    j.buffered = true;
    j.bs_bytes = 65536;
    j.time_based = false;
    j.ramp_ns = 0;
    j.runtime_ns = 1_000_000_000;
    j.offset_increment_bytes = file_bytes;
    j.size_bytes = file_bytes;
    j
}

/// `jobs` on a 2-core host with one small fresh SSD, scheduler `scheduler`.
pub fn config(scheduler: &str, jobs: Vec<JobConfig>) -> SimConfig {
    SimConfig {
        seed: 1,
        host: host(2),
        devices: vec![small_device(Condition::Fresh)],
        scheduler: SchedulerConfig {
            name: scheduler.into(),
            tunables: Vec::new(),
            nr_requests: None,
            block_layer: None,
        },
        jobs,
        sample_interval_ns: 1_000_000,
        ramp_end: Default::default(),
        request_trace: false,
    }
}

/// A lateness table (`HostConfig::timer_lateness`, `wake_lateness`): two durations, three quantiles: after 1 ms
/// 100 / 200 / 1,000 us late at P10 / P50 / P90, after 3 ms 300 / 600 / 3,000 us.
pub fn lateness() -> crate::config::TimerLateness {
    crate::config::TimerLateness {
        quantiles: vec![0.1, 0.5, 0.9],
        durations_ns: vec![1_000_000, 3_000_000],
        late_ns: vec![
            vec![100_000, 200_000, 1_000_000],
            vec![300_000, 600_000, 3_000_000],
        ],
    }
}
