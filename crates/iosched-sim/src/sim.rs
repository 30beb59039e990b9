//! One simulated run: processes issue I/O on host cores, through blk-mq and an elevator, to SSDs.
//!
//! The life of one I/O:
//! 1. `Issue`: the process books its submission path on its core (engine submit cost per I/O). A batch of
//!    `iodepth_batch_submit` I/Os shares one plug, in which contiguous bios merge.
//! 2. `BlockSubmit` (when the submission path reaches blk-mq): the scheduler's insert and dispatch cost is booked on
//!    the core, under the scheduler's lock if it has one (spinning while another CPU holds it), then `BlockInsert`:
//!    merge into a queued request, or take a request tag (or wait for one), insert into the elevator, run the
//!    hardware queue: dispatch while driver tags last, onto the device's submission queue.
//! 3. The device (`ControllerDone`, `UnitDone`) and `DeviceComplete`.
//! 4. On the submitting core: the scheduler's completion cost; then each bio's completion path (plus the
//!    sleep/wake path when the core had gone idle) where the process runs: a pinned process on its core, an
//!    unpinned one on the core it is still running on, or, asleep, on the core its wake-up picks (`host.rs`);
//!    then the process issues its next I/O there.

use std::collections::VecDeque;

use iosched_policy::{AfterCompletion, BlockLayer, IoprioClass, Op, Request, SECTOR_BYTES};

use crate::blk::BlockQueue;
use crate::config::{EngineCost, IoEngine, Rw, SimConfig};
use crate::device::{Command, Device};
use crate::engine::{Event, EventQueue};
use crate::host::{CpuAccount, ForkPlacement, Host};
use crate::metrics::LatencyStats;
use crate::pagecache::{PageCache, PageCacheLimits, Readahead, PAGE_BYTES};
use crate::result::{CoreResult, JobResult, ProcessResult, Sample, SimResult};
use crate::workload::{process_rng, Generator, TraceReplay};

const NO_IO: u32 = u32::MAX;

/// What a bio is for: a fio I/O, or page-cache I/O (readahead into, writeback from, pages `first..first + count`
/// of a file).
#[derive(Clone, Copy, PartialEq, Eq)]
enum BioKind {
    Fio,
    Readahead { file: u32, first: u64, count: u64 },
    Writeback { file: u32, first: u64, count: u64 },
}

/// A buffered process's state: its file, readahead, and the call in progress.
struct Buffered {
    file: usize,
    write: bool,
    readahead: Readahead,
    /// The read() or write() in progress: first page, pages, bytes, when it started.
    call: Option<(u64, u64, u32, u64)>,
    /// Sleeping: a read waits for its pages, a write for the dirty limit.
    waiting: bool,
}

#[derive(Clone)]
struct IoSlot {
    process: u32,
    write: bool,
    device: u32,
    offset_bytes: u64,
    /// This bio's own size, and (on a request's head bio) the whole request's size after plug merges.
    bytes: u32,
    request_bytes: u32,
    /// Where fio's completion latency (clat) starts: the submission call's start for a sync engine (psync), when
    /// the call returns for an async one (libaio, io_uring; see `Process::clat_after_call`).
    issue_ns: u64,
    core: u32,
    hctx: u32,
    dispatch_hctx: u32,
    dispatch_ns: u64,
    /// Next bio merged into the same request (a singly linked chain from the request's head bio).
    next_merged: u32,
    tail: u32,
    request: Option<Request>,
    /// In use (between issue and completion); a second completion of the same bio is a bug caught here.
    live: bool,
    sync: bool,
    kind: BioKind,
}

/// Who waits for a request (a tag) when a bio finds none: the submitting thread, or io_uring's workers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TagWait {
    /// libaio's io_submit and psync's pwrite ask for no REQ_NOWAIT: the submitter sleeps in its call until the
    /// request is free, so it neither submits nor reaps meanwhile, and has at most one bio waiting. (With a
    /// scheduler, the request is sought once its hooks' CPU time is booked, `BlockInsert`, while the process's loop
    /// goes on from the end of its submission path, `SubmitNext`: it may book one more batch before it sleeps.
    /// Holding the loop back until the hooks end moved BFQ's shares in seed 001's KF1, where requests never run
    /// out, so it is not done.)
    Submitter,
    /// io_uring issues inline with REQ_NOWAIT: a bio that finds no request fails with -EAGAIN and is reissued,
    /// blocking, by one of the ring's io-wq workers, while the submitter goes on. Block-device I/O is bounded work,
    /// and a ring has min(SQ entries, 4 x CPUs) bounded workers (io_uring/io_uring.c `io_init_wq_offload`), so at
    /// most that many of its bios wait for requests; the rest queue for a worker in io-wq, in order.
    IoWqWorkers(u32),
    /// Kernel threads (the writeback flusher), which wait for each bio to be accepted anyway.
    Kernel,
}

struct Process {
    job: u32,
    clone: u32,
    /// None for the writeback flusher (a kernel thread, not a job's process).
    generator: Option<Generator>,
    /// A trace replay (`read_iolog`) instead of the generator.
    trace: Option<Box<TraceReplay>>,
    /// Jobs separated by `stonewall` run in groups, one after the other.
    group: u32,
    buffered: Option<Buffered>,
    allowed_cores: Vec<u32>,
    /// The core it runs on, or last ran on.
    core: u32,
    /// When the work last booked in its own context (submission, reaping, copies) ends: until then it is running
    /// on `core`, and stays there; a process woken later is placed anew (`process_core`).
    busy_until_ns: u64,
    devices: Vec<u32>,
    iodepth: u32,
    batch: u32,
    inflight: u32,
    issued: u64,
    bytes_issued: u64,
    size_limit_bytes: u64,
    time_based: bool,
    start_ns: u64,
    stats_start_ns: u64,
    end_ns: u64,
    rate_period_ns: u64,
    thinktime_ns: u64,
    issue_pending: bool,
    /// In its submission loop: a SubmitNext event is pending. Completions that arrive meanwhile wait in
    /// `unreaped` (posted by the kernel, not yet seen by fio) until the loop ends.
    submitting: bool,
    unreaped: Vec<u32>,
    /// Where its bios wait when the block layer has no request for them (`TagWait`).
    tag_wait: TagWait,
    /// An async engine (libaio, io_uring): fio stamps an I/O's issue time once io_submit / io_uring_enter returns
    /// (fio's `fio_libaio_queued`, `fio_ioring_queued`), so the call's own time (the submission path, the
    /// scheduler hooks, and a libaio submitter's sleep waiting for a request) is submission latency (slat), not
    /// completion latency (clat), which is what fio reports and results hold. psync stamps it before the call.
    clat_after_call: bool,
    /// Whether the submitter can go to sleep on its devices (their requests can run out at the depths of all
    /// processes), which rules out booking submissions ahead (`try_issue`).
    may_sleep_on_tags: bool,
    /// Its bios waiting for a request in the block layer.
    tag_waits: u32,
    /// io_uring: bios that found no request while every io-wq worker was already waiting with one, in order.
    punted: VecDeque<u32>,
    stopped: bool,
    finished_ns: Option<u64>,
    cost: EngineCost,
    ioprio_class: IoprioClass,
    ioprio_level: u8,
    cgroup: u32,
    cgroup_weight: u32,
    read: LatencyStats,
    write: LatencyStats,
    cpu: CpuAccount,
}

impl Process {
    /// Asleep in its submission call, waiting for a request for one of its bios (`TagWait::Submitter`).
    fn asleep_on_tag(&self) -> bool {
        self.tag_wait == TagWait::Submitter && self.tag_waits > 0
    }
}

#[derive(Default, Clone, Copy)]
struct SchedulerCosts {
    insert_dispatch_ns: u64,
    complete_ns: u64,
    /// Lock acquisitions per request on each path (from the policy: how often its kernel hooks take the lock).
    submit_acquisitions: u32,
    complete_acquisitions: u32,
}

pub struct Simulation<'c> {
    config: &'c SimConfig,
    events: EventQueue,
    host: Host,
    processes: Vec<Process>,
    queues: Vec<BlockQueue>,
    devices: Vec<Device>,
    slots: Vec<IoSlot>,
    free_slots: Vec<u32>,
    costs: SchedulerCosts,
    /// Processes of each stonewall group not yet finished, and the group running.
    group_remaining: Vec<u32>,
    current_group: u32,
    cache: Option<PageCache>,
    /// The writeback flusher's process index, and whether a step is pending or its last request not yet accepted.
    flusher: Option<u32>,
    flusher_busy: bool,
    /// Readahead and writeback bios not yet completed (the run drains them after the last process finished).
    cache_bios_in_flight: u64,
    stonewalled: bool,
    last_finish_ns: u64,
    active_processes: usize,
    ios_issued: u64,
    ios_completed: u64,
    /// Scratch list of hardware queues the elevator woke (reused between completions).
    woken_hctxs: Vec<u32>,
    /// Scratch: bios whose threads a freed request tag woke.
    woken_bios: Vec<u32>,
    end_ns: u64,
    window_start_ns: u64,
    interval_ios: Vec<[u64; 2]>,
    timeseries: Vec<Sample>,
    /// A trace that turned out unreadable mid-run: the run ends with this error.
    failure: Option<String>,
}

impl<'c> Simulation<'c> {
    pub fn new(config: &'c SimConfig) -> Result<Self, String> {
        config.validate()?;
        let cores = config.host.cores;
        let layer = config.block_layer()?;
        let mut queues = Vec::new();
        let mut devices = Vec::new();
        for (index, device) in config.devices.iter().enumerate() {
            let nr_hw_queues = match layer {
                BlockLayer::Mq => cores.min(device.max_hw_queues),
                BlockLayer::Legacy => 1,
            };
            let mut elevator = iosched_policy::by_name(&config.scheduler.name, nr_hw_queues)?;
            for (name, value) in &config.scheduler.tunables {
                elevator
                    .set_tunable(name, *value)
                    .map_err(|e| format!("scheduler {}: {e}", config.scheduler.name))?;
            }
            let mut queue = match layer {
                BlockLayer::Mq => BlockQueue::new(
                    elevator,
                    nr_hw_queues,
                    device.queue_depth,
                    config.scheduler.nr_requests,
                ),
                BlockLayer::Legacy => {
                    BlockQueue::legacy(elevator, device.queue_depth, config.scheduler.nr_requests)
                }
            };
            if let Some(kib) = device.max_sectors_kb {
                queue.set_max_sectors_kb(kib);
            }
            queue.set_lock_handoff_ns(config.host.lock_handoff_ns);
            queues.push(queue);
            devices.push(Device::new(
                device.clone(),
                index as u32,
                nr_hw_queues,
                config.seed,
            ));
        }
        let costs = config
            .host
            .scheduler_costs
            .get(&config.scheduler.name)
            .map(|c| {
                let acquisitions = queues[0].lock_acquisitions();
                SchedulerCosts {
                    insert_dispatch_ns: c.insert_ns + c.dispatch_ns,
                    complete_ns: c.complete_ns,
                    submit_acquisitions: acquisitions.submit,
                    complete_acquisitions: acquisitions.complete,
                }
            })
            .unwrap_or_default();

        let mut cgroups: Vec<&str> = vec![""];
        let mut processes = Vec::new();
        let mut cache = config.host.page_cache.as_ref().map(|pc| {
            let capacity_pages = pc.capacity_bytes / PAGE_BYTES;
            PageCache::new(PageCacheLimits {
                capacity_pages,
                background_pages: capacity_pages * pc.dirty_background_ratio as u64 / 100,
                dirty_limit_pages: capacity_pages * pc.dirty_ratio as u64 / 100,
            })
        });
        let read_ahead_pages = config
            .host
            .page_cache
            .as_ref()
            .map(|pc| pc.read_ahead_kb as u64 * 1024 / PAGE_BYTES)
            .unwrap_or(1);
        let mut group = 0u32;
        let mut group_remaining = vec![0u32];
        for (job_index, job) in config.jobs.iter().enumerate() {
            if job.stonewall && job_index > 0 && group_remaining[group as usize] > 0 {
                group += 1;
                group_remaining.push(0);
            }
            group_remaining[group as usize] += job.numjobs;
            let cgroup = match cgroups.iter().position(|c| *c == job.cgroup) {
                Some(i) => i,
                None => {
                    cgroups.push(&job.cgroup);
                    cgroups.len() - 1
                }
            } as u32;
            let all_cores: Vec<u32> = (0..cores).collect();
            let allowed = if job.cpus_allowed.is_empty() {
                all_cores
            } else {
                job.cpus_allowed.clone()
            };
            let engine = match job.ioengine {
                IoEngine::IoUring => &config.host.io_uring,
                IoEngine::Libaio => &config.host.libaio,
                IoEngine::Psync => &config.host.psync,
            };
            let region_bytes = job
                .devices
                .iter()
                .map(|&d| config.devices[d as usize].capacity_bytes - job.offset_bytes)
                .min()
                .unwrap_or(0)
                .min(if job.size_bytes > 0 {
                    job.size_bytes
                } else {
                    u64::MAX
                });
            let block_bytes = job
                .devices
                .iter()
                .map(|&d| config.devices[d as usize].logical_block_bytes as u64)
                .max()
                .unwrap_or(512);
            for clone in 0..job.numjobs {
                // fio: every clone of a job replays the whole trace.
                let trace = match &job.trace {
                    Some(t) => Some(Box::new(
                        TraceReplay::open(t, job, region_bytes, block_bytes)
                            .map_err(|e| format!("job {}: read_iolog: {e}", job.name))?,
                    )),
                    None => None,
                };
                let allowed_cores = if job.cpus_split {
                    vec![allowed[clone as usize % allowed.len()]]
                } else {
                    let mut sorted = allowed.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    sorted
                };
                // Unpinned processes get their starting core below, once all processes are known.
                let core = allowed_cores[0];
                let start_ns = job.start_ns;
                let offset = job.offset_bytes + clone as u64 * job.offset_increment_bytes;
                let buffered = match (&mut cache, job.buffered) {
                    (Some(cache), true) => {
                        let file = cache.file(job.devices[0], offset, region_bytes)?;
                        if job.invalidate && group == 0 {
                            cache.invalidate_clean(file);
                        }
                        Some(Buffered {
                            file,
                            write: job.rw == Rw::Write,
                            readahead: Readahead::new(read_ahead_pages),
                            call: None,
                            waiting: false,
                        })
                    }
                    _ => None,
                };
                processes.push(Process {
                    job: job_index as u32,
                    clone,
                    generator: Some(
                        Generator::new(
                            job,
                            process_rng(config.seed, job_index as u32, clone),
                            region_bytes,
                        )
                        .at_offset(offset),
                    ),
                    group,
                    buffered,
                    size_limit_bytes: if trace.is_some() {
                        u64::MAX // the trace, not size, says how much a replay transfers
                    } else {
                        region_bytes
                    },
                    trace,
                    allowed_cores,
                    core,
                    busy_until_ns: 0,
                    devices: job.devices.clone(),
                    iodepth: if job.ioengine == IoEngine::Psync {
                        1
                    } else {
                        job.iodepth
                    },
                    batch: job.iodepth_batch_submit,
                    inflight: 0,
                    issued: 0,
                    bytes_issued: 0,
                    time_based: job.time_based,
                    start_ns,
                    stats_start_ns: start_ns + job.ramp_ns,
                    end_ns: start_ns + job.ramp_ns + job.runtime_ns,
                    rate_period_ns: if job.rate_iops > 0 {
                        1_000_000_000 / job.rate_iops
                    } else {
                        0
                    },
                    thinktime_ns: job.thinktime_ns,
                    issue_pending: false,
                    submitting: false,
                    unreaped: Vec::new(),
                    tag_wait: match job.ioengine {
                        // fio sizes the ring (SQ entries) to iodepth.
                        IoEngine::IoUring => {
                            TagWait::IoWqWorkers(job.iodepth.min(4 * cores).max(1))
                        }
                        IoEngine::Libaio | IoEngine::Psync => TagWait::Submitter,
                    },
                    clat_after_call: job.ioengine != IoEngine::Psync,
                    may_sleep_on_tags: false, // set below, once every process's depth is known
                    tag_waits: 0,
                    punted: VecDeque::new(),
                    stopped: false,
                    finished_ns: None,
                    cost: engine.clone(),
                    ioprio_class: IoprioClass::from_fio(job.prioclass).unwrap_or(IoprioClass::None),
                    ioprio_level: job.prio as u8,
                    cgroup,
                    cgroup_weight: job.cgroup_weight,
                    read: LatencyStats::default(),
                    write: LatencyStats::default(),
                    cpu: CpuAccount::default(),
                });
            }
        }
        // Where the processes fio forks start (Linux spreads them over idle CPUs): per stonewall group, as only one
        // group runs at a time. Pinned processes keep their core and count as placed there.
        for g in 0..group_remaining.len() as u32 {
            let mut fork = ForkPlacement::new(cores);
            let in_group = |p: &&mut Process| p.group == g;
            for p in processes.iter_mut().filter(in_group) {
                if p.allowed_cores.len() == 1 {
                    fork.pin(p.core);
                }
            }
            for p in processes.iter_mut().filter(in_group) {
                if p.allowed_cores.len() > 1 {
                    p.core = fork.place(&p.allowed_cores);
                }
            }
        }
        // Requests can run out on a device when its processes' depths together exceed the fewest an elevator lets a
        // kind of request hold (BFQ's async writes with weight-raised queues: 3/16 of nr_requests), or the driver
        // tags without one. A bound, not the exact limit: it only decides whether submissions may be booked ahead.
        let scarce: Vec<bool> = queues
            .iter()
            .enumerate()
            .map(|(d, queue)| {
                let depth: u64 = processes
                    .iter()
                    .filter(|p| p.devices.contains(&(d as u32)))
                    .map(|p| p.iodepth as u64)
                    .sum();
                let fewest = if queue.has_elevator {
                    (queue.request_tags as u64 * 3 / 16).max(1)
                } else {
                    queue.request_tags as u64
                };
                depth > fewest
            })
            .collect();
        for p in processes.iter_mut() {
            p.may_sleep_on_tags =
                p.tag_wait == TagWait::Submitter && p.devices.iter().any(|&d| scarce[d as usize]);
        }
        // With stonewall groups the run ends by the sum of the groups' longest spans at the latest.
        let end_ns = (0..group_remaining.len() as u32)
            .map(|g| {
                processes
                    .iter()
                    .filter(|p| p.group == g)
                    .map(|p| p.end_ns)
                    .max()
                    .unwrap_or(0)
            })
            .sum::<u64>();
        let window_start_ns = processes
            .iter()
            .filter(|p| p.group == 0)
            .map(|p| p.stats_start_ns)
            .min()
            .unwrap_or(0);
        let stonewalled = group_remaining.len() > 1;
        let user_processes = processes.len();
        // The writeback flusher: a kernel thread on any core, issuing asynchronous writes as the page cache's owner.
        let flusher = if config.jobs.iter().any(|j| j.buffered && j.rw == Rw::Write) {
            processes.push(Process {
                job: u32::MAX,
                clone: 0,
                generator: None,
                trace: None,
                group: u32::MAX,
                buffered: None,
                allowed_cores: (0..cores).collect(),
                core: 0,
                busy_until_ns: 0,
                devices: Vec::new(),
                iodepth: 1,
                batch: 1,
                inflight: 0,
                issued: 0,
                bytes_issued: 0,
                size_limit_bytes: 0,
                time_based: false,
                start_ns: 0,
                stats_start_ns: 0,
                end_ns,
                rate_period_ns: 0,
                thinktime_ns: 0,
                issue_pending: false,
                submitting: false,
                unreaped: Vec::new(),
                tag_wait: TagWait::Kernel,
                clat_after_call: false,
                may_sleep_on_tags: false,
                tag_waits: 0,
                punted: VecDeque::new(),
                stopped: true,
                finished_ns: Some(0),
                cost: config.host.psync.clone(),
                ioprio_class: IoprioClass::None,
                ioprio_level: 4,
                cgroup: 0,
                cgroup_weight: 100,
                read: LatencyStats::default(),
                write: LatencyStats::default(),
                cpu: CpuAccount::default(),
            });
            Some((processes.len() - 1) as u32)
        } else {
            None
        };
        let mut host = Host::new(cores, config.host.context_switch_ns);
        host.set_window(window_start_ns, end_ns);
        Ok(Self {
            config,
            events: EventQueue::new(),
            host,
            active_processes: user_processes,
            processes,
            group_remaining,
            current_group: 0,
            cache,
            flusher,
            flusher_busy: false,
            cache_bios_in_flight: 0,
            stonewalled,
            last_finish_ns: 0,
            queues,
            devices,
            slots: Vec::with_capacity(4096),
            free_slots: Vec::new(),
            costs,
            ios_issued: 0,
            ios_completed: 0,
            woken_hctxs: Vec::new(),
            woken_bios: Vec::new(),
            end_ns,
            window_start_ns,
            interval_ios: vec![[0, 0]; config.jobs.len()],
            timeseries: Vec::new(),
            failure: None,
        })
    }

    /// Run to the end. `progress` gets the fraction of simulated time done now and then; returning false aborts.
    pub fn run(mut self, progress: &mut dyn FnMut(f64) -> bool) -> Result<SimResult, String> {
        for p in 0..self.processes.len() {
            if self.processes[p].group != 0 {
                continue; // later stonewall groups, and the flusher
            }
            let start = self.processes[p].start_ns;
            self.processes[p].issue_pending = true;
            self.events
                .schedule(start, Event::Issue { process: p as u32 });
        }
        self.events.schedule(
            self.config.sample_interval_ns.min(self.end_ns.max(1)),
            Event::Sample,
        );
        let mut next_progress_check = 1u64 << 16;
        while self.active_processes > 0 || self.cache_bios_in_flight > 0 {
            let Some((now, event)) = self.events.pop() else {
                break;
            };
            match event {
                Event::Issue { process } => {
                    self.processes[process as usize].issue_pending = false;
                    self.try_issue(process, now);
                }
                Event::SubmitNext { process } => {
                    self.processes[process as usize].submitting = false;
                    self.try_issue(process, now);
                }
                Event::BlockSubmit { io } => self.block_submit(io, now),
                Event::BlockInsert { io } => self.block_insert(io, now),
                Event::TagRetry { io } => self.tag_retry(io, now),
                Event::ControllerDone { device, core } => {
                    self.devices[device as usize].controller_done(core, &mut self.events)
                }
                Event::UnitDone {
                    device,
                    unit,
                    operation,
                } => self.devices[device as usize].unit_done(unit, operation, &mut self.events),
                Event::DeviceComplete { device, request } => {
                    self.complete_request(device, request, now)
                }
                Event::SchedulerTimer { device } => self.scheduler_timer(device, now),
                Event::Sample => self.sample(now),
                Event::CallDone { process } => self.call_done(process, now),
                Event::FlusherStep => self.flusher_step(now),
            }
            if self.events.processed >= next_progress_check {
                next_progress_check += 1 << 16;
                if let Some(failure) = self.failure.take() {
                    return Err(failure);
                }
                if !progress(now as f64 / self.end_ns.max(1) as f64) {
                    return Err("interrupted".into());
                }
            }
        }
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        progress(1.0);
        self.check_conservation()?;
        Ok(self.into_result())
    }

    /// At the end every process has stopped with nothing in flight: every bio issued completed once, and every
    /// tag and slot came back. A violation is a simulator bug, reported as an error rather than a wrong result.
    fn check_conservation(&self) -> Result<(), String> {
        let fail = |what: String| Err(format!("simulator invariant violated: {what}"));
        if self.ios_issued != self.ios_completed {
            return fail(format!(
                "{} bios issued, {} completed",
                self.ios_issued, self.ios_completed
            ));
        }
        if let Some(p) = self.processes.iter().find(|p| {
            p.inflight != 0
                || p.finished_ns.is_none()
                || p.buffered.as_ref().is_some_and(|b| b.call.is_some())
        }) {
            return fail(format!(
                "process {} of job {} did not finish",
                p.clone, p.job
            ));
        }
        if self.free_slots.len() != self.slots.len() || self.slots.iter().any(|s| s.live) {
            return fail("bio slots still in use".into());
        }
        for ((queue, device), model) in self
            .queues
            .iter()
            .zip(&self.config.devices)
            .zip(&self.devices)
        {
            if !queue.all_tags_free(device.queue_depth) {
                let (request_tags, driver_tags) = queue.free_tags();
                return fail(format!(
                    "{}: requests/command slots free {request_tags}/{driver_tags} at the end",
                    device.name
                ));
            }
            if model.outstanding_commands() != 0 {
                return fail(format!(
                    "{}: {} commands still outstanding",
                    device.name,
                    model.outstanding_commands()
                ));
            }
            if queue.has_tag_waiters() {
                return fail(format!("{}: bios still waiting for tags", device.name));
            }
            if (0..queue.nr_hw_queues).any(|h| queue.elevator.has_work(h)) {
                return fail(format!(
                    "{}: the scheduler still holds requests",
                    device.name
                ));
            }
        }
        Ok(())
    }

    fn alloc_slot(&mut self, slot: IoSlot) -> u32 {
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn nr_hw_queues(&self, device: u32) -> u32 {
        self.queues[device as usize].nr_hw_queues
    }

    /// fio's submit/reap loop: submit one batch at a time (its submission path, then its scheduler hooks, run
    /// before the next batch is submitted: `SubmitNext`) for as long as the depth, rate and time allow; then reap
    /// the completions that arrived meanwhile, and submit again if that freed depth.
    fn try_issue(&mut self, process: u32, now: u64) {
        if self.processes[process as usize].submitting {
            return; // the pending SubmitNext continues the loop
        }
        if self.processes[process as usize].asleep_on_tag() {
            return; // asleep in its submission call: the request it gets wakes it (`tag_granted`)
        }
        if self.processes[process as usize].buffered.is_some() {
            return self.buffered_call(process, now);
        }
        let mut at = now;
        loop {
            if let Some(end) = self.submit_batch(process, at) {
                if self.costs.insert_dispatch_ns == 0
                    && !self.processes[process as usize].may_sleep_on_tags
                {
                    // Nothing is booked between this batch and the next (no scheduler hooks to run on the core),
                    // and no bio of it can put the process to sleep waiting for a request, so the loop can go on
                    // at once; completions meanwhile are booked behind these submissions.
                    at = end;
                    continue;
                }
                let proc = &mut self.processes[process as usize];
                proc.submitting = true;
                self.events.schedule(end, Event::SubmitNext { process });
                return;
            }
            if self.processes[process as usize].unreaped.is_empty() {
                return;
            }
            match self.reap(process, at) {
                Some(end) => at = end,
                None => return,
            }
        }
    }

    /// Reap every completion waiting for the process. Returns when it may submit again, or None if it stopped or
    /// thinks first.
    fn reap(&mut self, process: u32, at: u64) -> Option<u64> {
        let mut unreaped = std::mem::take(&mut self.processes[process as usize].unreaped);
        let mut end = at;
        for &io in &unreaped {
            end = self.reap_bio(io, at, false);
        }
        unreaped.clear();
        self.processes[process as usize].unreaped = unreaped; // keep the allocation
        self.after_reap(process, end)
    }

    /// What the process does after reaping: stop, think, or submit from `end` (returned).
    fn after_reap(&mut self, process: u32, end: u64) -> Option<u64> {
        let proc = &mut self.processes[process as usize];
        if proc.stopped {
            self.stop(process, end);
            None
        } else if proc.thinktime_ns > 0 {
            if !proc.issue_pending {
                proc.issue_pending = true;
                let at = end + proc.thinktime_ns;
                self.events.schedule(at, Event::Issue { process });
            }
            None
        } else {
            Some(end)
        }
    }

    /// Submit one batch (`iodepth_batch_submit` I/Os sharing a plug) if depth, rate and time allow. Returns when
    /// its submission path ends on the core.
    fn submit_batch(&mut self, process: u32, at: u64) -> Option<u64> {
        let p = process as usize;
        let proc = &self.processes[p];
        if proc.stopped || proc.inflight >= proc.iodepth {
            return None;
        }
        if at >= proc.end_ns || (!proc.time_based && proc.bytes_issued >= proc.size_limit_bytes) {
            self.stop(process, at);
            return None;
        }
        let free_slots = proc.iodepth - proc.inflight;
        let mut batch = proc.batch.min(proc.iodepth);
        if free_slots < batch {
            // fio gathers iodepth_batch_submit I/Os before committing them; it waits for more completions.
            return None;
        }
        if proc.rate_period_ns > 0 {
            // fio's linear rate: I/O k is due at start + k * period; a late process catches up at once.
            let due = proc.start_ns + proc.issued * proc.rate_period_ns;
            if due > at {
                let wake = due.min(proc.end_ns);
                if !proc.issue_pending {
                    self.processes[p].issue_pending = true;
                    self.events.schedule(wake, Event::Issue { process });
                }
                return None;
            }
            batch = 1;
        }
        if proc.trace.is_some() {
            batch = self.trace_batch(process, at, batch)?;
        }
        let core = self.process_core(process, at);
        let proc = &mut self.processes[p];
        let submit_ns = proc.cost.submit_ns;
        let (start, end) =
            self.host
                .run(core, process, at, submit_ns * batch as u64, &mut proc.cpu);
        (proc.core, proc.busy_until_ns) = (core, end);
        let clat_after_call = proc.clat_after_call;
        let mut previous = NO_IO;
        for i in 0..batch {
            let proc = &mut self.processes[p];
            let plan = match proc.trace.as_deref_mut() {
                Some(trace) => trace.next_io(),
                None => proc.generator.as_mut().expect("a job's process").next(),
            };
            let device = proc.devices[plan.device_slot];
            proc.inflight += 1;
            proc.issued += 1;
            self.ios_issued += 1;
            proc.bytes_issued += plan.bytes as u64;
            let hctx = core % self.queues[device as usize].nr_hw_queues;
            let slot = IoSlot {
                process,
                write: plan.write,
                device,
                offset_bytes: plan.offset_bytes,
                bytes: plan.bytes,
                request_bytes: plan.bytes,
                // An async engine's call returns no earlier than its submission path's end (`block_submit` and
                // `tag_obtained` move this on past the hooks and any sleep for a request).
                issue_ns: if clat_after_call {
                    end
                } else {
                    start + i as u64 * submit_ns
                },
                core,
                hctx,
                dispatch_hctx: hctx,
                dispatch_ns: 0,
                next_merged: NO_IO,
                tail: NO_IO,
                request: None,
                live: true,
                sync: true,
                kind: BioKind::Fio,
            };
            // The plug: a bio contiguous with the previous one of this batch joins it.
            if previous != NO_IO {
                let head = &self.slots[previous as usize];
                let max_bytes = self.queues[device as usize].max_sectors as u64 * SECTOR_BYTES;
                if head.device == device
                    && head.write == plan.write
                    && head.offset_bytes + head.request_bytes as u64 == plan.offset_bytes
                    && head.request_bytes as u64 + plan.bytes as u64 <= max_bytes
                {
                    let io = self.alloc_slot(slot);
                    self.slots[previous as usize].request_bytes += plan.bytes;
                    self.link(previous, io);
                    continue;
                }
            }
            let io = self.alloc_slot(slot);
            self.events.schedule(end, Event::BlockSubmit { io });
            previous = io;
        }
        Some(end)
    }

    /// The core on which `process` runs work from `at_ns`: a pinned process's core; the core it is running on, if
    /// its work booked so far lasts until then (a running process is not migrated); else, woken from sleep, the
    /// core Linux's wake-up placement would pick (`Host::wake_core`).
    #[inline]
    fn process_core(&self, process: u32, at_ns: u64) -> u32 {
        let proc = &self.processes[process as usize];
        if proc.allowed_cores.len() == 1 {
            proc.allowed_cores[0]
        } else if at_ns <= proc.busy_until_ns {
            proc.core
        } else {
            self.host.wake_core(&proc.allowed_cores, proc.core, at_ns)
        }
    }

    // ------------------------------------------------------------ buffered I/O (pagecache.rs)

    fn copy_ns(&self, bytes: u64) -> u64 {
        let rate = self
            .config
            .host
            .page_cache
            .as_ref()
            .map_or(1, |pc| pc.copy_bytes_per_s);
        (bytes as u128 * 1_000_000_000 / rate as u128) as u64
    }

    /// A buffered process's next read() or write() call (psync: one at a time).
    fn buffered_call(&mut self, process: u32, at: u64) {
        let p = process as usize;
        let proc = &self.processes[p];
        let b = proc.buffered.as_ref().expect("a buffered process");
        if b.call.is_some() || b.waiting || proc.stopped {
            return;
        }
        if at >= proc.end_ns || proc.bytes_issued >= proc.size_limit_bytes {
            return self.stop(process, at);
        }
        let core = self.process_core(process, at);
        let proc = &mut self.processes[p];
        let submit_ns = proc.cost.submit_ns;
        let plan = proc.generator.as_mut().expect("a job's process").next();
        proc.issued += 1;
        proc.bytes_issued += plan.bytes as u64;
        let b = proc.buffered.as_mut().unwrap();
        let cache = self
            .cache
            .as_mut()
            .expect("validated: the host has a page cache");
        let first = (plan.offset_bytes - cache.offset_of(b.file)) / PAGE_BYTES;
        let count = plan.bytes as u64 / PAGE_BYTES;
        let mut work = submit_ns;
        let mut runs = Vec::new();
        if b.write {
            cache.write(b.file, first, count);
            work += self.copy_ns(plan.bytes as u64);
        } else {
            runs = b.readahead.on_read(cache, b.file, first, count);
        }
        // Each readahead request is built and submitted in the reader's context.
        let max_pages = self.queues[0].max_sectors as u64 * SECTOR_BYTES / PAGE_BYTES;
        let requests: u64 = runs.iter().map(|&(_, _, n)| n.div_ceil(max_pages)).sum();
        work += requests * submit_ns;
        let proc = &mut self.processes[p];
        let (start, end) = self.host.run(core, process, at, work, &mut proc.cpu);
        (proc.core, proc.busy_until_ns) = (core, end);
        proc.buffered.as_mut().unwrap().call = Some((first, count, plan.bytes, start));
        for (file, run_first, run_pages) in runs {
            let mut page = run_first;
            while page < run_first + run_pages {
                let n = max_pages.min(run_first + run_pages - page);
                self.submit_cache_bio(
                    process,
                    core,
                    BioKind::Readahead {
                        file: file as u32,
                        first: page,
                        count: n,
                    },
                    end,
                );
                page += n;
            }
        }
        self.events.schedule(end, Event::CallDone { process });
    }

    /// A page-cache bio of `process` reaches the block layer at `at`.
    fn submit_cache_bio(&mut self, process: u32, core: u32, kind: BioKind, at: u64) {
        let (file, first, count, write) = match kind {
            BioKind::Readahead { file, first, count } => (file, first, count, false),
            BioKind::Writeback { file, first, count } => (file, first, count, true),
            BioKind::Fio => unreachable!("fio bios are submitted by submit_batch"),
        };
        let cache = self.cache.as_ref().unwrap();
        let device = cache.device_of(file as usize);
        let offset_bytes = cache.offset_of(file as usize) + first * PAGE_BYTES;
        let hctx = core % self.queues[device as usize].nr_hw_queues;
        let bytes = (count * PAGE_BYTES) as u32;
        let io = self.alloc_slot(IoSlot {
            process,
            write,
            device,
            offset_bytes,
            bytes,
            request_bytes: bytes,
            issue_ns: at,
            core,
            hctx,
            dispatch_hctx: hctx,
            dispatch_ns: 0,
            next_merged: NO_IO,
            tail: NO_IO,
            request: None,
            live: true,
            // Readahead is a read (sync for the elevator); writeback is asynchronous.
            sync: !write,
            kind,
        });
        self.ios_issued += 1;
        self.cache_bios_in_flight += 1;
        self.events.schedule(at, Event::BlockSubmit { io });
    }

    /// A buffered call's CPU work is done: a write may be throttled, a read may wait for its pages.
    fn call_done(&mut self, process: u32, now: u64) {
        let p = process as usize;
        let b = self.processes[p].buffered.as_ref().unwrap();
        let (file, write) = (b.file, b.write);
        let (first, count, _, _) = b.call.expect("a call in progress");
        let cache = self.cache.as_ref().unwrap();
        if write {
            let over_limit = cache.over_dirty_limit();
            self.kick_flusher(now);
            if over_limit {
                self.processes[p].buffered.as_mut().unwrap().waiting = true; // balance_dirty_pages
                return;
            }
            return self.finish_call(process, now);
        }
        if cache.readable(file, first, count) {
            let bytes = count * PAGE_BYTES;
            let work = self.copy_ns(bytes);
            let core = self.process_core(process, now);
            let proc = &mut self.processes[p];
            let (_, end) = self.host.run(core, process, now, work, &mut proc.cpu);
            (proc.core, proc.busy_until_ns) = (core, end);
            return self.finish_call(process, end);
        }
        self.processes[p].buffered.as_mut().unwrap().waiting = true;
    }

    /// The call returns at `end`: its latency is recorded and the process makes its next call.
    fn finish_call(&mut self, process: u32, end: u64) {
        let proc = &mut self.processes[process as usize];
        let b = proc.buffered.as_mut().unwrap();
        let (_, _, bytes, start) = b.call.take().expect("a call in progress");
        b.waiting = false;
        let write = b.write;
        if end >= proc.stats_start_ns && end <= proc.end_ns {
            let stats = if write {
                &mut proc.write
            } else {
                &mut proc.read
            };
            stats.record(end - start, bytes as u64);
            self.interval_ios[proc.job as usize][write as usize] += 1;
        }
        self.buffered_call(process, end);
    }

    /// A readahead or writeback bio completed at `now` (on its submitting core).
    fn complete_cache_bio(&mut self, io: u32, now: u64) {
        let slot = &mut self.slots[io as usize];
        assert!(slot.live, "bio {io} completed twice");
        slot.live = false;
        let (kind, core, process) = (slot.kind, slot.core, slot.process);
        self.free_slots.push(io);
        self.ios_completed += 1;
        self.cache_bios_in_flight -= 1;
        let complete_ns = self.processes[process as usize].cost.complete_ns;
        let proc = &mut self.processes[process as usize];
        let (_, end) = self
            .host
            .run(core, process, now, complete_ns, &mut proc.cpu);
        let cache = self.cache.as_mut().unwrap();
        match kind {
            BioKind::Readahead { file, first, count } => {
                cache.end_read(file as usize, first, count);
                // Wake readers of this file whose pages are all there now; they copy them out.
                for p in 0..self.processes.len() {
                    let Some(b) = &self.processes[p].buffered else {
                        continue;
                    };
                    let Some((f, c, _, _)) = b.call else { continue };
                    if b.write
                        || !b.waiting
                        || b.file != file as usize
                        || !self.cache.as_ref().unwrap().readable(b.file, f, c)
                    {
                        continue;
                    }
                    let work = self.processes[p].cost.sleep_wake_ns + self.copy_ns(c * PAGE_BYTES);
                    let pcore = self.process_core(p as u32, end);
                    let proc = &mut self.processes[p];
                    let (_, done) = self.host.run(pcore, p as u32, end, work, &mut proc.cpu);
                    (proc.core, proc.busy_until_ns) = (pcore, done);
                    self.finish_call(p as u32, done);
                }
            }
            BioKind::Writeback { file, first, count } => {
                cache.end_writeback(file as usize, first, count);
                if !cache.over_dirty_limit() {
                    for p in 0..self.processes.len() {
                        let waiting_writer = self.processes[p]
                            .buffered
                            .as_ref()
                            .is_some_and(|b| b.write && b.waiting);
                        if waiting_writer {
                            let work = self.processes[p].cost.sleep_wake_ns;
                            let pcore = self.process_core(p as u32, end);
                            let proc = &mut self.processes[p];
                            let (_, done) =
                                self.host.run(pcore, p as u32, end, work, &mut proc.cpu);
                            (proc.core, proc.busy_until_ns) = (pcore, done);
                            self.finish_call(p as u32, done);
                        }
                    }
                }
                self.kick_flusher(end);
            }
            BioKind::Fio => unreachable!(),
        }
    }

    /// Whether the flusher should write now: while the run lasts, something is dirty, and the background
    /// threshold is passed or a writer is throttled.
    fn flusher_should_write(&self) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        if self.active_processes == 0 || !cache.has_dirty() {
            return false;
        }
        cache.over_background()
            || self
                .processes
                .iter()
                .any(|p| p.buffered.as_ref().is_some_and(|b| b.write && b.waiting))
    }

    fn kick_flusher(&mut self, at: u64) {
        if self.flusher.is_some() && !self.flusher_busy && self.flusher_should_write() {
            self.flusher_busy = true;
            self.events.schedule(at, Event::FlusherStep);
        }
    }

    /// The flusher submits its next request; it goes on once the block layer has accepted it.
    fn flusher_step(&mut self, now: u64) {
        let Some(flusher) = self.flusher else { return };
        if !self.flusher_should_write() {
            self.flusher_busy = false;
            return;
        }
        let max_pages = self.queues[0].max_sectors as u64 * SECTOR_BYTES / PAGE_BYTES;
        let Some((file, first, count)) = self.cache.as_mut().unwrap().next_writeback(max_pages)
        else {
            self.flusher_busy = false;
            return;
        };
        let core = self.process_core(flusher, now);
        let proc = &mut self.processes[flusher as usize];
        let submit_ns = proc.cost.submit_ns;
        let (_, end) = self.host.run(core, flusher, now, submit_ns, &mut proc.cpu);
        (proc.core, proc.busy_until_ns) = (core, end);
        self.submit_cache_bio(
            flusher,
            core,
            BioKind::Writeback {
                file: file as u32,
                first,
                count,
            },
            end,
        );
    }

    /// Bio `io` got into the elevator (inserted or merged): a flusher waiting on it goes on.
    fn accepted(&mut self, io: u32, now: u64) {
        if matches!(self.slots[io as usize].kind, BioKind::Writeback { .. }) {
            self.events.schedule(now, Event::FlusherStep);
        }
    }

    /// The thread asleep waiting for a request for bio `io` (the submitter, an io-wq worker or the flusher) is
    /// woken: its wake-up is booked on the process's core, and then it asks again (`TagRetry`).
    fn wake_tag_sleeper(&mut self, io: u32, now: u64) {
        let end = self.book_wake_up(self.slots[io as usize].process, now);
        self.events.schedule(end, Event::TagRetry { io });
    }

    /// Book a sleeping thread's wake-up on `process`'s core from `now`; returns when it runs.
    fn book_wake_up(&mut self, process: u32, now: u64) -> u64 {
        let core = self.process_core(process, now);
        let proc = &mut self.processes[process as usize];
        let (_, end) = self
            .host
            .run(core, process, now, proc.cost.sleep_wake_ns, &mut proc.cpu);
        (proc.core, proc.busy_until_ns) = (core, end);
        end
    }

    /// A woken tag sleeper asks for a request for bio `io` again (blk-mq): it goes back to sleep, or its bio
    /// enters the elevator and its thread goes on.
    fn tag_retry(&mut self, io: u32, now: u64) {
        let (device, hctx, write, sync) = {
            let s = &self.slots[io as usize];
            (s.device, s.hctx, s.write, s.sync)
        };
        let op = if write { Op::Write } else { Op::Read };
        if !self.queues[device as usize].retry_tag(hctx, op, sync, io) {
            return; // asleep again, on the next wait queue
        }
        let rq = self.make_request(io, now);
        self.queues[device as usize].elevator.insert(rq, now);
        self.accepted(io, now);
        self.tag_obtained(io, now);
        self.run_hw_queue(device, hctx, now);
        self.arm_timer(device, now);
    }

    /// io_uring: bio `io` got a request without blocking; if it was a punted bio its io-wq worker is free again,
    /// so while any of the ring's workers is free the next punted bio is issued.
    fn next_punted_bio(&mut self, io: u32, now: u64) {
        let slot = &self.slots[io as usize];
        if slot.kind != BioKind::Fio {
            return;
        }
        let proc = &mut self.processes[slot.process as usize];
        if let TagWait::IoWqWorkers(workers) = proc.tag_wait {
            if proc.tag_waits < workers {
                if let Some(next) = proc.punted.pop_front() {
                    self.events.schedule(now, Event::BlockInsert { io: next });
                }
            }
        }
    }

    /// Legacy layer: bio `io` was handed the request it waited for, and the thread that waited wakes (a job's; the
    /// flusher's wake-up is not booked here).
    fn tag_granted(&mut self, io: u32, now: u64) {
        if self.slots[io as usize].kind != BioKind::Fio {
            return;
        }
        let end = self.book_wake_up(self.slots[io as usize].process, now);
        self.tag_obtained(io, end);
    }

    /// Bio `io` got the request its (now running) thread waited for: the submitter goes on with its loop, or the
    /// io-wq worker takes the next punted bio.
    fn tag_obtained(&mut self, io: u32, now: u64) {
        let slot = &self.slots[io as usize];
        if slot.kind != BioKind::Fio {
            return;
        }
        let process = slot.process;
        let proc = &mut self.processes[process as usize];
        proc.tag_waits -= 1;
        if proc.tag_wait == TagWait::Submitter && proc.clat_after_call {
            // libaio: io_submit returns only now, so the sleep was submission latency (see `clat_after_call`).
            self.slots[io as usize].issue_ns = now;
        }
        match proc.tag_wait {
            TagWait::Submitter if !proc.submitting => {
                proc.submitting = true;
                self.events.schedule(now, Event::SubmitNext { process });
            }
            TagWait::IoWqWorkers(_) => {
                if let Some(next) = proc.punted.pop_front() {
                    self.events.schedule(now, Event::BlockInsert { io: next });
                }
            }
            _ => {}
        }
    }

    /// How many trace records the process submits now (at most `batch`): None if it waits for the next record's
    /// time (an Issue event is then pending) or the replay is over (the process stops).
    fn trace_batch(&mut self, process: u32, at: u64, batch: u32) -> Option<u32> {
        let proc = &mut self.processes[process as usize];
        let trace = proc.trace.as_deref_mut().expect("a trace process");
        let ready = match trace.ready(batch as usize) {
            Ok(ready) => ready,
            Err(e) => {
                let job = &self.config.jobs[proc.job as usize].name;
                self.failure
                    .get_or_insert_with(|| format!("job {job}: read_iolog: {e}"));
                0
            }
        };
        if ready == 0 {
            self.stop(process, at);
            return None;
        }
        match trace.next_due_ns() {
            None => Some(ready as u32), // replay_no_stall: as fast as the depth allows
            Some(due) if due > at => {
                if !proc.issue_pending {
                    proc.issue_pending = true;
                    let wake = due.min(proc.end_ns);
                    self.events.schedule(wake, Event::Issue { process });
                }
                None
            }
            Some(_) => Some(1), // with timing, one record at a time, each at its time
        }
    }

    /// Append bio `io` to the chain of the request headed by `head`.
    fn link(&mut self, head: u32, io: u32) {
        let tail = self.slots[head as usize].tail;
        if tail == NO_IO {
            self.slots[head as usize].next_merged = io;
        } else {
            self.slots[tail as usize].next_merged = io;
        }
        self.slots[head as usize].tail = io;
    }

    fn stop(&mut self, process: u32, at: u64) {
        let proc = &mut self.processes[process as usize];
        if !proc.stopped {
            proc.stopped = true;
        }
        if proc.inflight == 0 && proc.finished_ns.is_none() {
            proc.finished_ns = Some(at);
            self.active_processes -= 1;
            self.last_finish_ns = self.last_finish_ns.max(at);
            let group = proc.group as usize;
            self.group_remaining[group] -= 1;
            if self.group_remaining[group] == 0 && group + 1 < self.group_remaining.len() {
                self.start_group(group as u32 + 1, at);
            }
        }
    }

    /// fio's stonewall: the next group of jobs starts when the previous one has finished.
    fn start_group(&mut self, group: u32, at: u64) {
        self.current_group = group;
        for p in 0..self.processes.len() {
            if self.processes[p].group != group {
                continue;
            }
            let job = &self.config.jobs[self.processes[p].job as usize];
            let (start, ramp, runtime, invalidate) = (
                at + job.start_ns,
                job.ramp_ns,
                job.runtime_ns,
                job.invalidate,
            );
            let proc = &mut self.processes[p];
            proc.start_ns = start;
            proc.stats_start_ns = start + ramp;
            proc.end_ns = start + ramp + runtime;
            proc.issue_pending = true;
            if let (Some(b), Some(cache)) = (&proc.buffered, &mut self.cache) {
                if invalidate {
                    cache.invalidate_clean(b.file);
                }
            }
            self.events
                .schedule(start, Event::Issue { process: p as u32 });
        }
    }

    fn make_request(&self, io: u32, now: u64) -> Request {
        let slot = &self.slots[io as usize];
        let proc = &self.processes[slot.process as usize];
        Request {
            id: io,
            op: if slot.write { Op::Write } else { Op::Read },
            sector: slot.offset_bytes / SECTOR_BYTES,
            nr_sectors: (slot.request_bytes as u64 / SECTOR_BYTES) as u32,
            cpu: slot.core,
            hctx: slot.hctx,
            ioprio_class: proc.ioprio_class,
            ioprio_level: proc.ioprio_level,
            process: slot.process,
            cgroup: proc.cgroup,
            cgroup_weight: proc.cgroup_weight,
            sync: slot.sync,
            start_ns: now,
        }
    }

    /// The submission path reached blk-mq: book the scheduler's insert and dispatch work, under its lock.
    fn block_submit(&mut self, io: u32, now: u64) {
        let cost = self.costs.insert_dispatch_ns;
        if cost == 0 {
            return self.block_insert(io, now);
        }
        let (core, process, device, hctx) = {
            let s = &self.slots[io as usize];
            (s.core, s.process, s.device, s.hctx)
        };
        let acquisitions = self.costs.submit_acquisitions;
        let ready = self.run_scheduler_work(core, process, device, hctx, now, cost, acquisitions);
        // In the submitter's context (submit_bio): it is running on this core until then.
        let proc = &mut self.processes[process as usize];
        proc.busy_until_ns = proc.busy_until_ns.max(ready);
        if proc.clat_after_call {
            self.slots[io as usize].issue_ns = ready; // the hooks run inside the call
        }
        self.events.schedule(ready, Event::BlockInsert { io });
    }

    /// Book `cost_ns` of scheduler work on `core`, under the scheduler's lock if its hooks take one on this path
    /// (`acquisitions` > 0). Returns when done.
    #[allow(clippy::too_many_arguments)]
    fn run_scheduler_work(
        &mut self,
        core: u32,
        process: u32,
        device: u32,
        hctx: u32,
        now: u64,
        cost_ns: u64,
        acquisitions: u32,
    ) -> u64 {
        let account = &mut self.processes[process as usize].cpu;
        let (start, _) = self.host.run(core, process, now, 0, account);
        match self.queues[device as usize].lock_for(hctx) {
            Some(lock) if acquisitions > 0 => {
                let booking = lock.acquire(core, start, cost_ns, acquisitions);
                self.host.extend_for_lock(
                    core,
                    booking.spin_ns + booking.handoff_ns,
                    cost_ns,
                    account,
                )
            }
            _ => self.host.run(core, process, start, cost_ns, account).1,
        }
    }

    fn block_insert(&mut self, io: u32, now: u64) {
        let rq = self.make_request(io, now);
        let (device, hctx) = (self.slots[io as usize].device, rq.hctx);
        let queue = &mut self.queues[device as usize];
        if let Some(into) = queue.elevator.bio_merge(&rq, queue.max_sectors) {
            // The elevator grew its request; this bio (and any plug-merged chain behind it) rides along.
            let chain_tail = self.slots[io as usize].tail;
            self.link(into, io);
            if chain_tail != NO_IO {
                self.slots[into as usize].tail = chain_tail;
            }
            self.accepted(io, now);
            return;
        }
        if !queue.try_take_request_tag(hctx, rq.op, rq.sync) {
            let slot = &self.slots[io as usize];
            if slot.kind == BioKind::Fio {
                let proc = &mut self.processes[slot.process as usize];
                if let TagWait::IoWqWorkers(workers) = proc.tag_wait {
                    if proc.tag_waits >= workers {
                        proc.punted.push_back(io); // every worker is already waiting
                        return;
                    }
                }
                proc.tag_waits += 1;
            }
            queue.wait_for_tag(hctx, rq.op, rq.sync, io);
            return;
        }
        queue.elevator.insert(rq, now);
        self.next_punted_bio(io, now);
        self.accepted(io, now);
        self.run_hw_queue(device, hctx, now);
        self.arm_timer(device, now);
    }

    /// Dispatch from the elevator to the device while driver tags last.
    fn run_hw_queue(&mut self, device: u32, hctx: u32, now: u64) {
        loop {
            let queue = &mut self.queues[device as usize];
            if !queue.can_dispatch(hctx) || !queue.elevator.has_work(hctx) {
                return;
            }
            let Some(rq) = queue.elevator.dispatch(hctx, now) else {
                return;
            };
            // Never fails: can_dispatch checked it. So a dispatched request is never handed back (no requeue).
            let tagged = queue.try_take_driver_tag(hctx);
            debug_assert!(tagged, "dispatch without a driver tag");
            let command = Command {
                request: rq.id,
                write: rq.op == Op::Write,
                offset_bytes: rq.sector * SECTOR_BYTES,
                bytes: (rq.nr_sectors as u64 * SECTOR_BYTES) as u32,
            };
            let slot = &mut self.slots[rq.id as usize];
            slot.dispatch_hctx = hctx;
            slot.dispatch_ns = now;
            slot.request = Some(rq);
            self.devices[device as usize].submit(hctx, command, &mut self.events);
        }
    }

    /// Run the hardware queues the elevator woke, in its wake order.
    fn run_woken_hw_queues(&mut self, device: u32, now: u64) {
        let mut woken = std::mem::take(&mut self.woken_hctxs);
        self.queues[device as usize]
            .elevator
            .take_woken_hctxs(&mut woken);
        for &hctx in &woken {
            self.run_hw_queue(device, hctx, now);
        }
        woken.clear();
        self.woken_hctxs = woken;
    }

    fn run_all_hw_queues(&mut self, device: u32, now: u64) {
        for hctx in 0..self.nr_hw_queues(device) {
            self.run_hw_queue(device, hctx, now);
        }
    }

    fn arm_timer(&mut self, device: u32, now: u64) {
        let queue = &mut self.queues[device as usize];
        if let Some(at) = queue.elevator.next_timer_ns() {
            let at = at.max(now);
            if queue.timer_pending_ns.is_none_or(|pending| at < pending) {
                queue.timer_pending_ns = Some(at);
                self.events.schedule(at, Event::SchedulerTimer { device });
            }
        }
    }

    fn scheduler_timer(&mut self, device: u32, now: u64) {
        let queue = &mut self.queues[device as usize];
        if queue.timer_pending_ns != Some(now) {
            return; // superseded by an earlier timer
        }
        queue.timer_pending_ns = None;
        if queue.elevator.next_timer_ns().is_some_and(|at| at <= now) {
            queue.elevator.timer(now);
            self.run_all_hw_queues(device, now);
        }
        self.arm_timer(device, now);
    }

    fn complete_request(&mut self, device: u32, request: u32, now: u64) {
        let slot = &mut self.slots[request as usize];
        let rq = slot
            .request
            .take()
            .expect("a completed request was dispatched");
        let (dispatch_hctx, dispatch_ns, core, process) = (
            slot.dispatch_hctx,
            slot.dispatch_ns,
            slot.core,
            slot.process,
        );
        self.devices[device as usize].command_completed();
        let queue = &mut self.queues[device as usize];
        queue.release_tags(rq.hctx, dispatch_hctx, rq.op == Op::Read || rq.sync);
        let after = queue.elevator.completed(&rq, dispatch_ns, now);
        // Whether the process had gone to sleep is decided when the interrupt arrives, before any work is booked.
        let mut sleeping = self.host.idle_at(core, now);
        let mut path_start = now;
        if self.costs.complete_ns > 0 {
            path_start = self.run_scheduler_work(
                core,
                process,
                device,
                rq.hctx,
                now,
                self.costs.complete_ns,
                self.costs.complete_acquisitions,
            );
        }
        // A freed request tag: under blk-mq it may wake sleepers, who ask again once they run (`tag_retry`); the
        // legacy request list hands it to the bio that waited longest.
        let mut inserted = false;
        if self.queues[device as usize].layer == BlockLayer::Mq {
            let mut woken = std::mem::take(&mut self.woken_bios);
            self.queues[device as usize].tag_freed(rq.hctx, &mut woken);
            for &io in &woken {
                self.wake_tag_sleeper(io, now);
            }
            woken.clear();
            self.woken_bios = woken;
        }
        while let Some(waiting) = self.queues[device as usize].next_tag_waiter(rq.hctx) {
            let waiting_rq = self.make_request(waiting, now);
            self.queues[device as usize]
                .elevator
                .insert(waiting_rq, now);
            self.accepted(waiting, now);
            self.tag_granted(waiting, now);
            inserted = true;
        }
        // Queues the freed resource woke run first: the wake-up happens as the completion releases it (Kyber's
        // token, freed in the completion's finish_request), before anything else on this path runs a queue.
        self.run_woken_hw_queues(device, now);
        match after {
            AfterCompletion::RunAllQueues => self.run_all_hw_queues(device, now),
            AfterCompletion::RunQueue => {
                self.run_hw_queue(device, dispatch_hctx, now);
                if inserted && rq.hctx != dispatch_hctx {
                    self.run_hw_queue(device, rq.hctx, now);
                }
            }
        }
        self.arm_timer(device, now);
        let mut bio = request;
        while bio != NO_IO {
            let next = self.slots[bio as usize].next_merged;
            let bio_core = self.slots[bio as usize].core;
            let bio_sleeping = if bio_core == core {
                sleeping
            } else {
                self.host.idle_at(bio_core, path_start) // a bio merged in from another core's process
            };
            if self.slots[bio as usize].kind == BioKind::Fio {
                self.complete_bio(bio, path_start, bio_sleeping);
            } else {
                self.complete_cache_bio(bio, path_start);
            }
            if bio_core == core {
                sleeping = false; // its first bio's completion woke the process
            }
            bio = next;
        }
    }

    /// The completion path of one bio on its submitting core, then the process's next I/O.
    /// The kernel finished bio `io` at `now`: fio reaps it at once if it is waiting for completions, or after
    /// its current submission loop.
    fn complete_bio(&mut self, io: u32, now: u64, sleeping: bool) {
        let process = self.slots[io as usize].process;
        let proc = &self.processes[process as usize];
        if proc.submitting || proc.asleep_on_tag() {
            self.processes[process as usize].unreaped.push(io);
            return;
        }
        let end = self.reap_bio(io, now, sleeping);
        if let Some(at) = self.after_reap(process, end) {
            self.try_issue(process, at);
        }
    }

    /// fio reaps bio `io` on its core (the engine's completion path, plus the wake-up if it slept): its latency
    /// ends here. Returns when the work ends.
    fn reap_bio(&mut self, io: u32, now: u64, sleeping: bool) -> u64 {
        let (process, slot_core, issue_ns, write, bytes) = {
            let s = &self.slots[io as usize];
            (s.process, s.core, s.issue_ns, s.write, s.bytes)
        };
        let slot = &mut self.slots[io as usize];
        assert!(slot.live, "bio {io} completed twice");
        slot.live = false;
        self.free_slots.push(io);
        let proc = &self.processes[process as usize];
        // A pinned process reaps on its core (the bio's). An unpinned one reaps on the core it is still running on,
        // or, asleep, where its wake-up places it, paying the sleep/wake path if that core was idle (as pinned
        // processes do on theirs).
        let (core, sleeping) = if proc.allowed_cores.len() == 1 {
            (slot_core, sleeping)
        } else if now < proc.busy_until_ns {
            (proc.core, false)
        } else {
            let core = self.host.wake_core(&proc.allowed_cores, proc.core, now);
            (core, self.host.idle_at(core, now))
        };
        let proc = &mut self.processes[process as usize];
        let work = proc.cost.complete_ns + if sleeping { proc.cost.sleep_wake_ns } else { 0 };
        let (_, end) = self.host.run(core, process, now, work, &mut proc.cpu);
        (proc.core, proc.busy_until_ns) = (core, end);
        if end >= proc.stats_start_ns && end <= proc.end_ns {
            let stats = if write {
                &mut proc.write
            } else {
                &mut proc.read
            };
            stats.record(end - issue_ns, bytes as u64);
            self.interval_ios[proc.job as usize][write as usize] += 1;
        }
        proc.inflight -= 1;
        self.ios_completed += 1;
        end
    }

    fn sample(&mut self, now: u64) {
        let seconds = self.config.sample_interval_ns as f64 / 1e9;
        for (job, counts) in self.interval_ios.iter_mut().enumerate() {
            let name = &self.config.jobs[job].name;
            for (direction, metric) in [(0, "read_iops"), (1, "write_iops")] {
                self.timeseries.push(Sample {
                    t_ns: now,
                    source: "job".into(),
                    subject: name.clone(),
                    metric: metric.into(),
                    value: counts[direction] as f64 / seconds,
                });
            }
            *counts = [0, 0];
        }
        for (device, queue) in self.devices.iter().zip(&self.queues) {
            let subject = &device.config.name;
            let mut push = |source: &str, metric: String, value: f64| {
                self.timeseries.push(Sample {
                    t_ns: now,
                    source: source.into(),
                    subject: subject.clone(),
                    metric,
                    value,
                })
            };
            push(
                "device",
                "write_buffer_bytes".into(),
                device.buffer_used_bytes() as f64,
            );
            push(
                "device",
                "free_program_units".into(),
                device.free_program_units() as f64,
            );
            for (metric, value) in queue.elevator.introspect() {
                push("scheduler", metric, value);
            }
        }
        let next = now + self.config.sample_interval_ns;
        if next <= self.end_ns {
            self.events.schedule(next, Event::Sample);
        }
    }

    fn into_result(self) -> SimResult {
        let mut jobs: Vec<JobResult> = self
            .config
            .jobs
            .iter()
            .map(|job| JobResult {
                name: job.name.clone(),
                ..Default::default()
            })
            .collect();
        let mut merged: Vec<(LatencyStats, LatencyStats)> = vec![Default::default(); jobs.len()];
        for proc in self.processes.iter().filter(|p| p.generator.is_some()) {
            let job = &mut jobs[proc.job as usize];
            let end = proc.finished_ns.unwrap_or(proc.end_ns).min(proc.end_ns);
            job.window_ns = job.window_ns.max(end.saturating_sub(proc.stats_start_ns));
            let usr_ns = (proc.cpu.cpu_ns as f64 * proc.cost.usr_fraction).round() as u64;
            let sys_ns = proc.cpu.cpu_ns - usr_ns;
            job.usr_ns += usr_ns;
            job.sys_ns += sys_ns;
            job.context_switches += proc.cpu.context_switches;
            job.processes.push(ProcessResult {
                clone: proc.clone,
                core_affinity: proc.allowed_cores.clone(),
                read: proc.read.result(),
                write: proc.write.result(),
                usr_ns,
                sys_ns,
                context_switches: proc.cpu.context_switches,
            });
            merged[proc.job as usize].0.merge(&proc.read);
            merged[proc.job as usize].1.merge(&proc.write);
        }
        for (job, (read, write)) in jobs.iter_mut().zip(&merged) {
            job.read = read.result();
            job.write = write.result();
        }
        // The run's window ends at the runtime, or earlier when every process finished before it (a trace
        // replay or a sized job that ended): core shares are over the time the jobs ran.
        let last_finish_ns = self
            .processes
            .iter()
            .filter_map(|p| p.finished_ns)
            .max()
            .unwrap_or(self.end_ns);
        let window_end_ns = self.end_ns.min(last_finish_ns);
        let cores = self
            .host
            .cores
            .iter()
            .map(|c| CoreResult {
                busy_ns: c.busy_ns,
                lock_ns: c.lock_ns,
            })
            .collect();
        SimResult {
            sim_time_ns: self.events.now_ns,
            events: self.events.processed,
            ios_issued: self.ios_issued,
            ios_completed: self.ios_completed,
            window_start_ns: self.window_start_ns,
            window_ns: if self.stonewalled {
                self.last_finish_ns.saturating_sub(self.window_start_ns)
            } else {
                window_end_ns.saturating_sub(self.window_start_ns)
            },
            jobs,
            cores,
            devices: self.devices.iter().map(|d| d.stats.clone()).collect(),
            timeseries: self.timeseries,
        }
    }
}
