//! The fully resolved input of one simulated run.
//!
//! Python parses the user's spec (TOML or fio job file), loads presets, validates everything and hands the
//! simulator this structure as JSON. Every value is explicit here: no defaults are applied on the Rust side except
//! where `#[serde(default)]` says so, and unknown fields are rejected, so a mismatch between the two sides fails
//! loudly instead of silently simulating something else. `SimConfig::validate` (`validate.rs`) repeats the
//! structural checks, so that no input can make the simulator panic.

use serde::{Deserialize, Serialize};

mod validate;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Root seed; each process derives its own RNG stream from (seed, job index, clone index).
    pub seed: u64,
    pub host: HostConfig,
    pub devices: Vec<DeviceConfig>,
    pub scheduler: SchedulerConfig,
    pub jobs: Vec<JobConfig>,
    /// Interval of the time-series samples (per-job IOPS, device state, scheduler introspection).
    #[serde(default = "default_sample_interval_ns")]
    pub sample_interval_ns: u64,
    /// Where a job's measured window starts.
    #[serde(default)]
    pub ramp_end: RampEnd,
    /// Record each request's life and each tag sleeper's sleeps and wake-ups (`SimResult::request_trace`), as the
    /// kernel's blk tracer and CPU scheduler events show them in the VM lab (`--vm trace=blk+sched`).
    #[serde(default)]
    pub request_trace: bool,
}

/// Where a job's measured window starts after its `ramp_time`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RampEnd {
    /// As fio: at the first completion the job reaps after `ramp_time` (`ramp_time_over()` in `io_completed()`),
    /// its runtime measured from there. A job starved across its ramp is measured later than the others.
    /// Simplification: CPU time and the cores' busy time are still counted over the run's nominal window.
    #[default]
    FirstCompletion,
    /// Every job at `start + ramp_time`, one common window: a short run standing in for a long one, where fio's
    /// few-ms offsets between jobs would be noise (the paper reproductions; docs/spec.md).
    Nominal,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn default_sample_interval_ns() -> u64 {
    100_000_000
}

/// Per-I/O CPU cost of one fio ioengine on this host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineCost {
    /// CPU time to submit one I/O: the engine's user-space work, the syscall, blk-mq and the NVMe driver.
    pub submit_ns: u64,
    /// CPU time to complete one I/O: the interrupt, blk-mq completion and the engine's reaping.
    pub complete_ns: u64,
    /// Share of the above that fio reports as usr (the rest is sys).
    pub usr_fraction: f64,
    /// Extra CPU time when the process must sleep for its completion and be woken (QD-1 style waits);
    /// zero for engines that poll.
    pub sleep_wake_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub cores: u32,
    /// Cost of switching a core from one process to another.
    pub context_switch_ns: u64,
    pub io_uring: EngineCost,
    pub libaio: EngineCost,
    pub psync: EngineCost,
    /// Time to move a contended spinlock and the data it protects from one core's cache to another's; paid per
    /// lock acquisition that changes cores (see `host::SpinLock`).
    #[serde(default)]
    pub lock_handoff_ns: u64,
    /// CPU time of one uncontended lock acquisition with its release (the lock and unlock calls themselves). It is
    /// part of the cost of the work that takes the lock (the ioengine's paths, the scheduler's hooks), not added to
    /// it: it only says how much of that work a profile attributes to the lock functions (seed 000's Fig. 8 counts
    /// them). How many locks each path takes comes from the kernel's code (`sim::process::PathLocks`,
    /// `Elevator::lock_acquisitions`). 0: not counted.
    #[serde(default)]
    pub uncontended_lock_ns: u64,
    /// CPU time of the interrupt-context part of a completion (interrupt entry and exit, the driver's and blk-mq's
    /// completion, the engine's completion callback, the wake-up of a sleeping process). It is part of the
    /// engine's `complete_ns` and `sleep_wake_ns`, not added: it only says whose virtual runtime it is charged to.
    /// The interrupt runs on top of whatever its core runs then, and CFS charges it to that process (Linux without
    /// CONFIG_IRQ_TIME_ACCOUNTING, as Debian builds it), not to the process it wakes; so the order in which CFS
    /// runs a core's woken processes varies (`Simulation::pick_next`). 0: charged to the woken process.
    #[serde(default)]
    pub completion_irq_ns: u64,
    /// Extra CPU time of a wake-up (a sleeping process woken for its completion) that finds every core of the host
    /// idle for at least `package_idle_ns`: with all cores idle the package lowers its uncore (the shared cache and
    /// memory controller's clock) and the cores' own clocks, and the woken process's first microseconds of work run
    /// slower, on cold shared state. It is charged as work on the waking path (CPU time and latency alike). 0: off.
    #[serde(default)]
    pub package_idle_wake_ns: u64,
    /// How long every core must have been idle for a wake-up to pay `package_idle_wake_ns` (an idle state's target
    /// residency: a shorter idle spell does not enter it).
    #[serde(default)]
    pub package_idle_ns: u64,
    /// CPU time per 4 KiB page of an I/O beyond its first: the block layer's and the driver's work that grows with
    /// the transfer (the bio's segments, mapping them for DMA and back, the NVMe driver's PRP list). Added to a job's
    /// `submit_ns` by its block size (its smallest with a bssplit), the unmapping at completion included; the
    /// writeback flusher's bios pay none. 0: off.
    #[serde(default)]
    pub io_page_ns: u64,
    /// Each core's private cache (its L2) in bytes. A process switched in on a core finds the state its I/O path
    /// touches (`process_cache_bytes`) partly evicted by the other processes switched in there since it last ran:
    /// with F the bytes of all those states and its own, a share `1 - core_cache_bytes / F` of it (none while F
    /// fits), all of it after running on another core; it pays `cache_refill_ns` times that share (`Host::run`).
    /// 0 (any of the three): off.
    #[serde(default)]
    pub core_cache_bytes: u64,
    /// The bytes of a process's own state its I/O path touches between two switches (stacks, its task and ring
    /// structures, fio's per-I/O data): how much of `core_cache_bytes` it occupies.
    #[serde(default)]
    pub process_cache_bytes: u64,
    /// CPU time to bring all of `process_cache_bytes` back into a core's private cache from the shared one.
    #[serde(default)]
    pub cache_refill_ns: u64,
    /// Scheduler CPU costs per request, by scheduler name: every scheduler with an elevator that runs on this host
    /// needs an entry; `none` has no elevator and costs nothing, and has none (see
    /// [`HostConfig::check_scheduler_costs`]).
    #[serde(default)]
    pub scheduler_costs: std::collections::BTreeMap<String, SchedulerCost>,
    /// The direct-I/O path of each file system this host can run jobs on (`DeviceConfig::filesystem`), by the
    /// kernel's name for it ("ext4", "xfs", "f2fs"). A device with a file system this host does not price is an
    /// error, never a silent zero.
    #[serde(default)]
    pub filesystems: std::collections::BTreeMap<String, FileSystemCost>,
    /// The page cache for buffered jobs (`pagecache.rs`); a host without one cannot run them.
    #[serde(default)]
    pub page_cache: Option<PageCacheConfig>,
    /// The Linux version the host runs, "MAJOR.MINOR" (e.g. "6.3"): the block layer and the schedulers follow it
    /// wherever the modelled behaviour differs between versions (`iosched_policy::kernel::CHANGES`). Default: the
    /// newest modelled version.
    #[serde(default = "newest_kernel")]
    pub kernel: String,
    /// Where blk-mq runs a hardware queue after a request is inserted into the elevator: in the submitter's context
    /// or in a kblockd worker (see [`SchedulerDispatch`]).
    #[serde(default)]
    pub scheduler_dispatch: SchedulerDispatch,
    /// How late the host handles a timer's expiry (see [`TimerLateness`]); None: on time.
    #[serde(default)]
    pub timer_lateness: Option<TimerLateness>,
    /// The time a late timer interrupt spends on each null_blk timer completion it handles (the request's end in
    /// interrupt context: its tags' release with their wake-ups, the bio's end), before the elevator's completion
    /// hook. `hrtimer_interrupt` runs the expired timers one after another and looks again before it returns, so a
    /// timer that expires while it runs is handled by the same interrupt: the completions of requests dispatched
    /// together stay together. 0: a late interrupt handles only the timers expired when it starts.
    #[serde(default)]
    pub timer_irq_ns: u64,
    /// How late a thread woken on an idle (halted) core starts to run, beyond its wake-up's CPU work
    /// (`sleep_wake_ns`): a table as [`TimerLateness`]'s, its durations how long the core had been idle (for the
    /// reaper of a late timer's request: that timer's duration, at the timer's own quantile). None: at once.
    /// Measured in the VM lab, where the host wakes the halted vCPU's thread, and applied to a fio thread woken for
    /// its completion or for a freed request tag (docs/simulator.md, host).
    #[serde(default)]
    pub wake_lateness: Option<TimerLateness>,
    /// The kernel's timer tick rate (CONFIG_HZ): timers set in jiffies fire on a tick. Applied to blk-mq's delayed
    /// re-run (`BLK_MQ_BUDGET_DELAY`, 3 ms as `msecs_to_jiffies`), the one jiffy timer of the model whose rounding a
    /// lab run shows; the schedulers keep their own nanosecond times (each policy's module doc says where the kernel
    /// uses jiffies). Default 1000, the rate the policies take elsewhere.
    #[serde(default = "default_hz")]
    pub hz: u32,
}

fn default_hz() -> u32 {
    1000
}

/// How late a host's timers fire, measured: the time from a timer's expiry to its handler's work, by the timer's
/// duration. Under the VM lab's QEMU TCG a null_blk timer of `completion_nsec` ends its request 80-110 us late at
/// the median and 0.7-3.9 ms late at the 99th percentile (its blk trace, D to C: the vCPU thread is woken by the
/// host, and runs when the host gives it a CPU), where a bare-metal host's hrtimers are microseconds late. Without
/// it the simulator's null_blk completes every request exactly `completion_nsec` after it arrived, so jobs that
/// start together stay in phase for the whole run (the lab's drift apart). Applied to null_blk's timer completions
/// (irqmode 2): the one timer of the model whose lateness a lab run measures directly.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimerLateness {
    /// Probabilities of the measured quantiles, ascending in (0, 1).
    pub quantiles: Vec<f64>,
    /// The timer durations measured at, ascending.
    pub durations_ns: Vec<u64>,
    /// `late_ns[d][q]`: how late a timer of `durations_ns[d]` fired at quantile `quantiles[q]` (non-decreasing in q).
    pub late_ns: Vec<Vec<u64>>,
}

impl TimerLateness {
    /// How late a timer of `duration_ns` fires for the uniform draw `u` in [0, 1): the inverse of the measured
    /// distribution, linear between quantiles (flat below the first and above the last: the table's range bounds
    /// it), and linear in the duration between the two measured durations around it (the nearest outside them).
    pub fn late_ns(&self, duration_ns: u64, u: f64) -> u64 {
        let row =
            |d: usize| piecewise_linear(&self.quantiles, u, |q| q, |q| self.late_ns[d][q] as f64);
        piecewise_linear(&self.durations_ns, duration_ns, |d| d as f64, row).round() as u64
    }

    /// Its shape, checked before a run; `name` is the host field it is (`timer_lateness`, `wake_lateness`).
    pub fn validate(&self, name: &str) -> Result<(), String> {
        let ascending = |v: &[f64]| v.windows(2).all(|w| w[0] < w[1]);
        if self.quantiles.is_empty()
            || !ascending(&self.quantiles)
            || self.quantiles[0] <= 0.0
            || *self.quantiles.last().unwrap() >= 1.0
        {
            return Err(format!(
                "host.{name}.quantiles: expected ascending probabilities in (0, 1)"
            ));
        }
        if self.durations_ns.is_empty() || self.durations_ns.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "host.{name}.durations_ns: expected ascending durations"
            ));
        }
        if self.late_ns.len() != self.durations_ns.len()
            || self
                .late_ns
                .iter()
                .any(|r| r.len() != self.quantiles.len() || r.windows(2).any(|w| w[0] > w[1]))
        {
            return Err(format!(
                "host.{name}.late_ns: expected {} rows (one per duration) of {} non-decreasing values (one per \
                 quantile)",
                self.durations_ns.len(),
                self.quantiles.len()
            ));
        }
        Ok(())
    }
}

/// The value at `x` of the curve through (`xs[k]`, `y(k)`), `xs` ascending: linear between points, flat beyond the
/// first and the last (`as_f64` gives the positions as numbers).
fn piecewise_linear<X: Copy + PartialOrd>(
    xs: &[X],
    x: X,
    as_f64: impl Fn(X) -> f64,
    y: impl Fn(usize) -> f64,
) -> f64 {
    let k = xs.partition_point(|&p| p <= x);
    if k == 0 {
        return y(0);
    }
    if k == xs.len() {
        return y(k - 1);
    }
    let (x0, x1) = (as_f64(xs[k - 1]), as_f64(xs[k]));
    y(k - 1) + (as_f64(x) - x0) / (x1 - x0) * (y(k) - y(k - 1))
}

fn newest_kernel() -> String {
    iosched_policy::KernelVersion::NEWEST.to_string()
}

/// The context of the hardware-queue run that follows an insert into the elevator (blk-mq, with an elevator).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerDispatch {
    /// The submitter inserts and dispatches on its own core, in its own context: what a request flushed from the
    /// submitter's plug gets (`blk_mq_flush_plug_list` runs the queue synchronously), and what seed 000's patched
    /// block/fops.c with `force_sync_submission=2` gives every direct I/O. The scheduler's CPU time is the
    /// submitter's.
    #[default]
    Inline,
    /// Stock Linux 6.3 for a request inserted outside a plug (an io_uring or libaio direct I/O of one bio): the
    /// submitter inserts, and the run of the hardware queue is deferred to a kblockd worker on the hardware queue's
    /// CPU (`blk_mq_run_hw_queue(hctx, true)` → `kblockd_mod_delayed_work_on`): a switch to the kworker on that
    /// core, and the dispatch work is the kworker's, not the submitter's.
    Kblockd,
}

/// The host's page cache: its size, how fast data is copied in and out, and the kernel's writeback thresholds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageCacheConfig {
    /// Memory the page cache may use.
    pub capacity_bytes: u64,
    /// Rate at which read() and write() copy data between the page cache and the caller's buffer.
    pub copy_bytes_per_s: u64,
    /// vm.dirty_background_ratio and vm.dirty_ratio, percent of `capacity_bytes`.
    pub dirty_background_ratio: u32,
    pub dirty_ratio: u32,
    /// Largest readahead window (the queue's read_ahead_kb).
    pub read_ahead_kb: u32,
}

/// CPU time a scheduler's hooks add per request, uncontended. It runs under the scheduler's lock when the policy's
/// hooks take one on that path (`Elevator::lock_acquisitions`); otherwise it is plain CPU work.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerCost {
    pub insert_ns: u64,
    pub dispatch_ns: u64,
    pub complete_ns: u64,
}

/// The CPU time a file system's direct-I/O path adds to one I/O on a file over the raw block device's path, by
/// direction: mapping the file offset to its blocks (the extent lookup), the inode lock and the checks before the
/// bio is built. It runs in the submitting process, so it is added to the engine's `submit_ns` of every job on a
/// device with that file system. The file is preallocated and written, so an overwrite allocates nothing.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSystemCost {
    pub read_ns: u64,
    pub write_ns: u64,
}

impl HostConfig {
    /// When a timer set at `now_ns` to expire `msecs` milliseconds later fires: the kernel rounds the delay up to
    /// whole jiffies (`msecs_to_jiffies`) and counts from the current jiffy, so the timer fires on the tick that
    /// makes `jiffies` reach its expiry. Ticks fall at k / hz seconds of simulated time (a named simplification: the
    /// tick's phase against the run's start is unknown).
    pub fn jiffy_timer_due_ns(&self, now_ns: u64, msecs: u64) -> u64 {
        let delay = (u128::from(msecs) * u128::from(self.hz)).div_ceil(1000);
        self.jiffies_later_ns(now_ns, delay)
    }

    /// The next tick after `now_ns` (the start of the next jiffy).
    pub fn next_tick_ns(&self, now_ns: u64) -> u64 {
        self.jiffies_later_ns(now_ns, 1)
    }

    /// The tick `delay` jiffies after the current jiffy's.
    fn jiffies_later_ns(&self, now_ns: u64, delay: u128) -> u64 {
        let hz = u128::from(self.hz);
        let jiffies = u128::from(now_ns) * hz / 1_000_000_000;
        ((jiffies + delay) * 1_000_000_000).div_ceil(hz) as u64
    }

    /// `kernel` as a version; an unparsable one is an error naming the field.
    pub fn kernel_version(&self) -> Result<iosched_policy::KernelVersion, String> {
        iosched_policy::KernelVersion::parse(&self.kernel).map_err(|e| format!("host.kernel: {e}"))
    }

    /// Whether this host prices `scheduler`'s hooks: a scheduler with an elevator needs a `scheduler_costs` entry (a
    /// missing one is an error, never a silent zero). `none` has no elevator and runs no scheduler hooks, so it
    /// costs nothing by definition; an entry for it, or for a scheduler that does not exist, is refused. An unknown
    /// `scheduler` is left to the check that names the known ones.
    pub fn check_scheduler_costs(&self, scheduler: &str) -> Result<(), String> {
        for name in self.scheduler_costs.keys() {
            match iosched_policy::scheduler(name) {
                None => {
                    return Err(format!(
                        "host.scheduler_costs.{name}: unknown scheduler (expected one of {})",
                        iosched_policy::SCHEDULERS.join(", ")
                    ))
                }
                Some(s) if !s.is_elevator() => {
                    return Err(format!(
                        "host.scheduler_costs.{name}: {name} has no elevator and runs no scheduler hooks, so it \
                         costs nothing: remove the entry"
                    ))
                }
                Some(_) => {}
            }
        }
        let needs_entry = iosched_policy::scheduler(scheduler).is_some_and(|s| s.is_elevator());
        if needs_entry && !self.scheduler_costs.contains_key(scheduler) {
            return Err(format!(
                "host.scheduler_costs: no entry for scheduler {scheduler} (the CPU time of its insert, dispatch and \
                 completion hooks per request); the host preset must give one"
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interface {
    Nvme,
    Sata,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Condition {
    /// Every block erased: writes never trigger garbage collection within a run.
    Fresh,
    /// Filled sequentially then overwritten randomly (seed 000 §2.1): garbage collection runs from the start.
    Preconditioned,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Device path as jobs name it (`/dev/nvme0n1`, `/dev/sda`).
    pub name: String,
    pub interface: Interface,
    pub capacity_bytes: u64,
    pub logical_block_bytes: u32,
    /// Hardware submission queues (NVMe: one per core, capped by this; SATA: 1).
    pub max_hw_queues: u32,
    /// Commands per hardware queue the driver may have outstanding (driver tags).
    pub queue_depth: u32,
    /// Host link bandwidth (PCIe or SATA), bytes per second, shared by all transfers.
    pub link_bytes_per_s: u64,
    /// Controller front-end cores and the time one command occupies one of them.
    pub controller_cores: u32,
    pub command_ns: u64,
    /// Front-end time of a write command, where it differs from a read's (firmware write paths that update the
    /// mapping, or a virtual disk's per-request cost); None: `command_ns` for every command.
    #[serde(default)]
    pub write_command_ns: Option<u64>,
    /// The controller's work on each read command once its data is off the flash channels (the ECC decode and the
    /// set-up of its transfer to the host), one read at a time; the commands whose last piece was read on a channel
    /// wait in that channel's queue, and the stage takes the channels in rotation. Where set, reads pass the front
    /// end without occupying it (`command_ns` is then a write's), so the drive's read ceiling is this stage and a
    /// read waits as long as its channel's queue is, not in one queue before the flash with every other read.
    /// None: a read's work is `command_ns` at the front end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_out_ns: Option<u64>,
    /// Latency added after the flash read (ECC decode, completion posting), not occupying any resource.
    pub read_pipeline_ns: u64,
    /// Latency of acknowledging a write once its data sits in the write buffer.
    pub write_ack_ns: u64,
    /// Uniform random extra write acknowledgement time in [0, write_ack_jitter_ns] (firmware mapping updates).
    pub write_ack_jitter_ns: u64,
    pub channels: u32,
    pub units_per_channel: u32,
    /// Channel (flash bus) bandwidth, bytes per second.
    pub channel_bytes_per_s: u64,
    pub flash_page_bytes: u32,
    /// Array read time per page type (e.g. TLC lower/middle/upper): a page's type follows from its address.
    pub read_ns_by_page_type: Vec<u64>,
    /// Uniform random extra read time in [0, read_jitter_ns] (temperature, retention, read retries).
    pub read_jitter_ns: u64,
    /// Extra array time of a normal page read over the fast partial-page read (`read_ns_by_page_type`) that
    /// commands of at most 4 KiB get; a longer command reads each of its pages this much slower. 0: one read mode.
    #[serde(default)]
    pub page_read_extra_ns: u64,
    /// Data last written by random writes of this size (a preconditioning pass of 4 KiB random writes): each such
    /// piece sits on a page of its own at a random unit, so a read costs one flash read per piece it touches.
    /// None: logically contiguous data fills whole flash pages (a sequential fill).
    #[serde(default)]
    pub scattered_piece_bytes: Option<u32>,
    /// Bytes one program operation writes on one unit, and how long it takes.
    pub program_unit_bytes: u32,
    pub program_ns: u64,
    pub erase_ns: u64,
    /// Program/erase suspend: a read reaching a unit that is programming, copying or erasing suspends that
    /// operation and starts after this long; the operation resumes, this long again, once no read is left
    /// queued on the unit. 0: the flash cannot suspend, reads wait for the running operation to finish.
    #[serde(default)]
    pub read_suspend_ns: u64,
    /// How many times reads may suspend one program, copy or erase (`read_suspend_ns` > 0): flash parts bound the
    /// suspensions of an operation so that it finishes under a stream of reads. None: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_suspend_limit: Option<u32>,
    /// Cache programming: while host writes are backed up (the buffer is full or writes wait for room) and a unit
    /// programs host data, the next program unit's data (when the buffer holds it and the unit may program it) crosses
    /// the channel into the die's cache register, and the die starts that program as soon as the current one ends,
    /// before any read queued meanwhile. A read reaching a unit that programs with its cache register loaded waits for
    /// both programs. False: each program's data crosses after the previous program, and queued reads go first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache_program: bool,
    /// Program units per erase block on one unit.
    pub block_program_units: u32,
    pub write_buffer_bytes: u64,
    /// The rate at which write data enters the buffer (an SLC cache's program bandwidth, TurboWrite's burst write
    /// rate), a FIFO server after the link; None: as fast as the link brings it.
    #[serde(default)]
    pub buffer_fill_bytes_per_s: Option<u64>,
    /// Writes that found the buffer full and wait in the controller for space without holding a front-end core
    /// (oldest first); one more stalls its core, and every command behind it waits. 0: the first such write stalls.
    #[serde(default)]
    pub waiting_write_slots: u32,
    /// Read data the controller holds in flight: a read command leaving the front end takes its bytes of this
    /// buffer until its data has crossed to the host; one that finds too little room waits off the front end while
    /// one of `waiting_read_slots` is free, else holds its front-end core, and every command behind it waits.
    /// None: no limit.
    #[serde(default)]
    pub read_buffer_bytes: Option<u64>,
    /// Reads that found the read buffer full and wait in the controller for room without holding a front-end core,
    /// in arrival order (a read arriving while any wait queues behind them); one more stalls its core. 0: the first
    /// such read stalls.
    #[serde(default)]
    pub waiting_read_slots: u32,
    /// Raw flash bytes beyond the user capacity.
    pub overprovision_bytes: u64,
    /// Garbage collection starts when free space falls below this many program units per flash unit.
    pub gc_free_units_low: u32,
    /// Garbage collection in drive-wide steps: when the host programs the reclaiming has paid for are used up,
    /// every reclaiming unit copies up to this many program units while no unit programs host data (the FTL
    /// reclaims a superblock across all dies at once). None: each unit paces its host programs behind its own
    /// copies, at a random place in its cycle, so the drive frees buffer space steadily.
    #[serde(default)]
    pub gc_step_copies: Option<u32>,
    /// With steps: how many reclaiming units copy in one step, taking turns over the units; None: every reclaiming
    /// unit. The units that do not copy stay free for reads, so a drive can hold its writes in a step while most of
    /// its flash is idle: a model of an FTL that relocates a victim's data through a few dies at a time while the
    /// host's data waits (no preset sets it; docs/papers.md says what it did to the 980 PRO's findings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gc_step_units: Option<u32>,
    pub condition: Condition,
    /// Fraction of the logical space that holds no data: trimmed after conditioning (raises a preconditioned
    /// drive's effective spare area), or never written on a fresh one (whether its data fits the SLC cache).
    pub trimmed_fraction: f64,
    /// The part of the drive's SLC write cache that stays SLC however full the drive is (Samsung's "default"
    /// TurboWrite region), in bytes of host data. A `rested` drive starts with it empty, and it counts toward a
    /// fresh drive's SLC cache (`slc_dynamic_bytes`); None: no such region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slc_static_bytes: Option<u64>,
    /// The SLC cache's part beyond the static region while the drive has free space (Samsung's "intelligent"
    /// TurboWrite region), in bytes of host data. With `slc_program_ns`: a fresh drive whose data (the capacity
    /// less `trimmed_fraction`) fits both regions runs in SLC mode (`device::slc_mode`). None: no such region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slc_dynamic_bytes: Option<u64>,
    /// One SLC program of a flash page (`flash_page_bytes`) on one unit: how a drive in SLC mode programs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slc_program_ns: Option<u64>,
    /// The drive idled before the run long enough to move its static SLC region's data to TLC: a preconditioned
    /// drive then takes its first `slc_static_bytes` of writes without garbage collection. False: the region is
    /// full (a drive written without pause), the state every other run starts from. No effect on a fresh drive.
    #[serde(default)]
    pub rested: bool,
    /// Largest request the block layer builds by merging (`max_sectors_kb`); None: 128 KiB.
    #[serde(default)]
    pub max_sectors_kb: Option<u32>,
    /// The file system the jobs reach this device through (the host's `filesystems` prices its direct-I/O path):
    /// each job addresses one preallocated file, laid out contiguously (one extent), whose blocks are the job's
    /// region (`offset_bytes`, `size_bytes`). Only the CPU cost of the path is modelled: journal and metadata
    /// writes, f2fs's out-of-place updates and cleaning are not (an overwrite of allocated blocks needs none of
    /// them in ext4 and xfs, nor in f2fs's default adaptive mode). None: the raw block device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<String>,
    /// The kernel's null_blk instead of the SSD model (`device/null_blk.rs`): the SSD fields above are then unused
    /// but for the block layer's (capacity, block size, hardware queues, tags, max_sectors_kb).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub null_blk: Option<crate::device::NullBlkConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    pub name: String,
    /// Tunables by sysfs name and unit (values as integers, as sysfs takes them).
    #[serde(default)]
    pub tunables: Vec<(String, i64)>,
    /// blk-mq scheduler tags per hardware queue, or the legacy request list's sync and async limit
    /// (`nr_requests`); None: the kernel's default.
    #[serde(default)]
    pub nr_requests: Option<u32>,
    /// "legacy" (the single-queue request_queue of Linux <= 4.x) or "blk-mq"; None: the scheduler's own layer
    /// (`iosched_policy::block_layers`, the first entry).
    #[serde(default)]
    pub block_layer: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
    Randrw,
    /// fio's `readwrite` / `rw`: sequential mixed.
    Readwrite,
}

/// One entry of fio's bssplit: a block size and its share of a direction's I/Os.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockShare {
    pub bytes: u64,
    pub percent: u32,
}

impl Rw {
    /// Whether a job of this kind issues writes (`true`) or reads (`false`).
    pub fn does(self, write: bool) -> bool {
        match self {
            Rw::Read | Rw::Randread => !write,
            Rw::Write | Rw::Randwrite => write,
            Rw::Randrw | Rw::Readwrite => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoEngine {
    #[serde(rename = "io_uring")]
    IoUring,
    Libaio,
    Psync,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub name: String,
    pub rw: Rw,
    /// Percentage of reads for mixed workloads.
    pub rwmixread: u32,
    pub bs_bytes: u64,
    pub iodepth: u32,
    /// I/Os submitted per system call (fio's iodepth_batch_submit); they share one plug, where contiguous ones merge.
    #[serde(default = "one")]
    pub iodepth_batch_submit: u32,
    pub numjobs: u32,
    pub ioengine: IoEngine,
    /// The job issues I/O from `start_ns` (its `startdelay`) until `start_ns + ramp_ns + runtime_ns`; statistics
    /// count only after the ramp.
    #[serde(default)]
    pub start_ns: u64,
    pub ramp_ns: u64,
    pub runtime_ns: u64,
    /// Without time_based, a process also stops after transferring `size_bytes` (fio's io_size).
    pub time_based: bool,
    /// Rate limit per process, I/Os per second (0: unlimited).
    pub rate_iops: u64,
    /// Pause after each I/O completes before the next is issued.
    pub thinktime_ns: u64,
    /// I/O priority class (0 none, 1 RT, 2 BE, 3 IDLE) and level 0..7.
    pub prioclass: u32,
    pub prio: u32,
    /// cgroup name (empty: the root group) and its weight.
    pub cgroup: String,
    pub cgroup_weight: u32,
    /// Allowed cores; empty means all cores.
    pub cpus_allowed: Vec<u32>,
    /// fio's cpus_allowed_policy: false = shared (each process may use any allowed core),
    /// true = split (process i gets the i-th allowed core).
    pub cpus_split: bool,
    /// Region of each device the job addresses.
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// Indices into `devices`; several = fio's colon list, I/Os spread across them.
    pub devices: Vec<u32>,
    /// fio's offset_increment: clone i addresses the region starting at offset + i × this.
    #[serde(default)]
    pub offset_increment_bytes: u64,
    /// fio's direct=0: buffered I/O through the host's page cache (sequential read or write, psync).
    #[serde(default)]
    pub buffered: bool,
    /// fio's invalidate: a buffered job drops the clean cached pages of its file when it starts.
    #[serde(default = "yes")]
    pub invalidate: bool,
    /// fio's stonewall: the job starts only once every earlier job has finished.
    #[serde(default)]
    pub stonewall: bool,
    /// fio's end_fsync (or fsync_on_close): a buffered writer fsyncs its file when its writing is done, and the
    /// job ends when the fsync returns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub end_fsync: bool,
    /// fio's loops: without `time_based`, a process transfers its `size_bytes` this many times (a sequential job
    /// walks its region again from the start). None: once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loops: Option<u32>,
    /// fio's random_distribution: which blocks of the region random I/O addresses. None: every block alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_distribution: Option<RandomDistribution>,
    /// fio's bssplit: per direction (reads, writes), block sizes with their shares of the I/Os in percent (summing
    /// to 100); `bs_bytes` is then the smallest, the unit random offsets are aligned to (fio's blockalign). None:
    /// every I/O is `bs_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bssplit: Option<[Vec<BlockShare>; 2]>,
    /// fio's lat_percentiles: keep a histogram of the total latency (lat) for its percentiles and bins; without
    /// it lat is five statistics, as fio reports it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lat_percentiles: bool,
    /// fio's statistics window for its IOPS and bandwidth samples (iops_avg_time and bw_avg_time, 500 ms by
    /// default; log_avg_msec where the job writes logs). None: fio's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_window_ns: Option<u64>,
    /// fio's randseed: seeds this job's random offsets and read/write mix in place of the run's seed (each clone
    /// still draws its own stream, as fio's default randrepeat gives each its own seed). None: the run's seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randseed: Option<u64>,
    /// iosched's own: each clone runs as a fio process of its own, as when one job file is started numjobs times.
    /// fio numbers each process's jobs from 1 and seeds a job's random generators from its number (and randseed),
    /// so every such clone draws the offsets of the first job of a process with that seed, in the same order: what
    /// seed 000's apps, separate fio processes, did (Figs. 11 and 12). Clone k starts k x 5 ms late, as separately
    /// launched processes begin their I/O one after another (`sim/build.rs`). False: all jobs share one fio process.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub separate_processes: bool,
    /// Replay this block trace instead of generating I/O (fio's `read_iolog`). `rw`, `rwmixread` and `bs` are then
    /// not used: each record gives its direction, offset and size. `time_based` replays the trace again from the
    /// start until the runtime ends; without it the job ends at the trace's end (or its runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceConfig>,
}

impl JobConfig {
    /// A job with fio's defaults for everything but its name, direction and runtime: 4 KiB, QD 1, one process,
    /// io_uring, 50% reads when mixed, no ramp, priority BE 4 in the root cgroup, any core, the whole of device 0
    /// from offset 0, direct and repeatable (the run's seed). Time-based: fio's runtime caps a job, and the
    /// simulator needs one.
    pub fn new(name: &str, rw: Rw, runtime_ns: u64) -> Self {
        Self {
            name: name.into(),
            rw,
            rwmixread: 50,
            bs_bytes: 4096,
            iodepth: 1,
            iodepth_batch_submit: 1,
            numjobs: 1,
            ioengine: IoEngine::IoUring,
            start_ns: 0,
            ramp_ns: 0,
            runtime_ns,
            time_based: true,
            rate_iops: 0,
            thinktime_ns: 0,
            prioclass: 0,
            prio: 4,
            cgroup: String::new(),
            cgroup_weight: 100,
            cpus_allowed: Vec::new(),
            cpus_split: false,
            offset_bytes: 0,
            size_bytes: 0,
            devices: vec![0],
            offset_increment_bytes: 0,
            buffered: false,
            invalidate: true,
            stonewall: false,
            end_fsync: false,
            randseed: None,
            separate_processes: false,
            stats_window_ns: None,
            bssplit: None,
            lat_percentiles: false,
            loops: None,
            random_distribution: None,
            trace: None,
        }
    }
}

/// fio's random_distribution (`distribution.rs` draws from it). Each skewed kind ranks the region's blocks by
/// popularity and scatters the ranks over the region by a hash, as fio does, so the hot blocks are spread out;
/// `center` (0..1) rotates where the scattered ranks start (None: a place drawn from the job's seed).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum RandomDistribution {
    /// Rank r is drawn with probability proportional to r^-theta (theta > 0, not 1).
    Zipf {
        theta: f64,
        #[serde(default)]
        center: Option<f64>,
    },
    /// The fraction h (0 < h < 1) of the hottest blocks takes 1 - h of the I/O (h = 0.2: 80/20).
    Pareto {
        h: f64,
        #[serde(default)]
        center: Option<f64>,
    },
    /// Ranks from a normal distribution whose standard deviation is `dev_percent` of the region.
    Normal {
        dev_percent: f64,
        #[serde(default)]
        center: Option<f64>,
    },
}

/// The public block-trace formats the replay reads (see `trace.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// SNIA SYSTOR '17 CSV: `Timestamp,Response,IOType,LUN,Offset,Size` (seconds, R/W, bytes).
    Systor17,
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` (FILETIME ticks, Read/Write, bytes).
    Msr,
    /// blkparse's default text output: `maj,min cpu seq secs.nsecs pid action rwbs sector + blocks [process]`.
    Blkparse,
}

/// Which blkparse events are replayed: D (issued to the driver: what the device saw, after merging) or Q (queued:
/// what the application submitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum BlkparseAction {
    #[default]
    D,
    Q,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    /// The trace file (Python resolves it to an absolute path).
    pub path: String,
    /// None: detected from the file's first line.
    #[serde(default)]
    pub format: Option<TraceFormat>,
    /// Replay only this LUN (systor17), disk number (msr) or device `major,minor` (blkparse); None: every record.
    #[serde(default)]
    pub lun: Option<String>,
    #[serde(default)]
    pub blkparse_action: BlkparseAction,
    /// fio's `replay_time_scale`: percent of the recorded rate (100: as recorded, 200: twice as fast).
    pub time_scale_percent: u32,
    /// fio's `replay_no_stall`: ignore the timestamps and issue as fast as `iodepth` allows.
    pub no_stall: bool,
    /// sha256 of the file as Python validated it: names the trace's content in run ids and spec.json (not checked
    /// here).
    #[serde(default)]
    pub sha256: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::lateness;

    /// A host with scheduler costs for `priced`.
    fn host(priced: &[&str]) -> HostConfig {
        let engine = serde_json::json!({"submit_ns": 1, "complete_ns": 1, "usr_fraction": 0.5, "sleep_wake_ns": 0});
        let cost = serde_json::json!({"insert_ns": 1, "dispatch_ns": 1, "complete_ns": 1});
        let costs: serde_json::Map<String, serde_json::Value> = priced
            .iter()
            .map(|name| (name.to_string(), cost.clone()))
            .collect();
        serde_json::from_value(serde_json::json!({
            "cores": 1, "context_switch_ns": 0, "io_uring": engine, "libaio": engine, "psync": engine,
            "scheduler_costs": costs,
        }))
        .unwrap()
    }

    /// blk-mq's 3 ms delayed re-run armed at 10.4 ms. HZ = 1000: jiffies = 10, msecs_to_jiffies(3) = 3, expiry 13:
    /// it fires at 13 ms, 2.6 ms later (not the exact 13.4 ms). HZ = 250: jiffies = 2 (10.4 / 4), msecs_to_jiffies(3)
    /// = ceil(3 / 4) = 1, expiry 3: the next tick at 12 ms, 1.6 ms later. HZ = 300: jiffies = 3 (10.4 / 3.333),
    /// one jiffy (ceil(0.9)), expiry 4: 13.333 ms, rounded up to the next nanosecond.
    #[test]
    fn a_jiffy_timer_fires_on_the_tick_its_rounded_delay_reaches() {
        let mut host = crate::testkit::host(1);
        let armed_ns = 10_400_000;
        for (hz, due_ns) in [(1000, 13_000_000), (250, 12_000_000), (300, 13_333_334)] {
            host.hz = hz;
            assert_eq!(host.jiffy_timer_due_ns(armed_ns, 3), due_ns, "HZ = {hz}");
        }
        host.hz = 1000;
        assert_eq!(
            host.jiffy_timer_due_ns(13_000_000, 3),
            16_000_000,
            "on a tick: three whole jiffies"
        );
    }

    #[test]
    fn timer_lateness_inverts_the_measured_distribution() {
        let t = lateness();
        // At a measured duration, a measured quantile gives its value.
        assert_eq!(t.late_ns(1_000_000, 0.5), 200_000);
        // Between quantiles, linear: u = 0.7 is halfway from P50 to P90: 200 + (1,000 - 200) / 2 = 600 us.
        assert_eq!(t.late_ns(1_000_000, 0.7), 600_000);
        // Below the first and above the last quantile, flat: the table bounds what it gives.
        assert_eq!(t.late_ns(1_000_000, 0.01), 100_000);
        assert_eq!(t.late_ns(1_000_000, 0.999), 1_000_000);
        // Between durations, linear: 2 ms is halfway, so at P50 (200 + 600) / 2 = 400 us.
        assert_eq!(t.late_ns(2_000_000, 0.5), 400_000);
        // Outside them, the nearest: a 500 us timer as a 1 ms one, a 16 ms timer as a 3 ms one.
        assert_eq!(t.late_ns(500_000, 0.5), 200_000);
        assert_eq!(t.late_ns(16_000_000, 0.9), 3_000_000);
    }

    #[test]
    fn a_timer_lateness_table_of_the_wrong_shape_is_refused() {
        assert_eq!(lateness().validate("timer_lateness"), Ok(()));
        let mut t = lateness();
        t.quantiles = vec![0.5, 0.1, 0.9];
        assert!(t
            .validate("timer_lateness")
            .unwrap_err()
            .contains("quantiles"));
        let mut t = lateness();
        t.quantiles[2] = 1.0;
        assert!(t
            .validate("timer_lateness")
            .unwrap_err()
            .contains("quantiles"));
        let mut t = lateness();
        t.durations_ns = vec![3_000_000, 1_000_000];
        assert!(t
            .validate("timer_lateness")
            .unwrap_err()
            .contains("durations_ns"));
        let mut t = lateness();
        t.late_ns[1] = vec![300_000, 200_000, 3_000_000]; // decreasing
        assert!(t
            .validate("timer_lateness")
            .unwrap_err()
            .contains("non-decreasing"));
        let mut t = lateness();
        t.late_ns.pop();
        assert!(t.validate("timer_lateness").unwrap_err().contains("2 rows"));
        // The message names the host field the table is.
        assert!(t
            .validate("wake_lateness")
            .unwrap_err()
            .starts_with("host.wake_lateness.late_ns: "));
    }

    #[test]
    fn a_scheduler_with_an_elevator_needs_its_costs() {
        let host = host(&["mq-deadline", "bfq"]);
        assert_eq!(host.check_scheduler_costs("mq-deadline"), Ok(()));
        assert_eq!(host.check_scheduler_costs("bfq"), Ok(()));
        let err = host.check_scheduler_costs("kyber").unwrap_err();
        assert!(
            err.starts_with("host.scheduler_costs: no entry for scheduler kyber "),
            "{err}"
        );
    }

    #[test]
    fn none_costs_nothing_and_may_not_be_priced() {
        assert_eq!(host(&[]).check_scheduler_costs("none"), Ok(()));
        let err = host(&["none"]).check_scheduler_costs("none").unwrap_err();
        assert!(
            err.starts_with("host.scheduler_costs.none: none has no elevator"),
            "{err}"
        );
    }

    #[test]
    fn costs_of_an_unknown_scheduler_are_refused() {
        let err = host(&["cfs"]).check_scheduler_costs("none").unwrap_err();
        assert!(
            err.starts_with("host.scheduler_costs.cfs: unknown scheduler (expected one of none, "),
            "{err}"
        );
        assert_eq!(
            host(&[]).check_scheduler_costs("cfs"),
            Ok(()),
            "an unknown scheduler is reported where the known ones are named"
        );
    }
}
