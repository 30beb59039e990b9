//! Before the first event: a run's block queues and devices from the config, its processes from the jobs (fio's
//! clones, their stonewall groups, where Linux places them at fork), and the writeback flusher.

use iosched_policy::{BlockLayer, IoprioClass};
use rand::SeedableRng;

use super::buffered::Buffered;
use super::process::{IoSource, PathLocks, ProcessParams};
use super::tags::TagWait;
use super::{FairScheduler, Process, RunQueue, SchedulerCosts, Simulation};
use crate::blk::BlockQueue;
use crate::config::{IoEngine, JobConfig, Rw, SimConfig};
use crate::device::Device;
use crate::engine::EventQueue;
use crate::host::{CpuAccount, ForkPlacement, Host};
use crate::pagecache::{PageCache, PageCacheLimits, Readahead, PAGE_BYTES};
use crate::workload::{process_rng, Generator, TraceReplay};

/// How long after one another separate fio processes launched together begin their I/O (a job's
/// `separate_processes`): named assumption, of the order measured on the development machine (4-8 fio processes
/// started by a shell loop began their I/O 43-159 ms after the first, fio 3.33, io_uring with registered files and
/// buffers, 2 cores) and kept below BFQ's 180 ms burst interval for 32 processes, so processes that start together
/// still do for BFQ's stable merging. It decides whether readers of one sequence meet at the drive: the 64 KiB
/// readers of seed 000's Figs. 11b and 12a keep ~16 reads per drive in flight, ~4 ms of their I/O, and started in
/// the same instant they read every page together and queued on its plane (N = 8 under none: 120 K reads/s against
/// 212 K for independent readers; the artifact's reach the same rate at every N). Writers stay within the drive's
/// young window (`device/young_rewrites.rs`) either way.
const SEPARATE_PROCESS_GAP_NS: u64 = 5_000_000;

impl<'c> Simulation<'c> {
    /// Build a run from `config`: an error (never a panic) if the config is invalid (`SimConfig::validate`), a
    /// tunable is unknown to the scheduler, a trace cannot be read or buffered jobs' files overlap.
    pub fn new(config: &'c SimConfig) -> Result<Self, String> {
        config.validate()?;
        let cores = config.host.cores;
        let layer = config.block_layer()?;
        // After the block-layer check, whose error says more about an impossible scheduler than a missing cost.
        config.host.check_scheduler_costs(&config.scheduler.name)?;
        let (queues, devices) = block_queues_and_devices(config, layer)?;
        let costs = scheduler_costs(config, &queues[0]);
        let mut cache = page_cache(config);
        let (mut processes, group_remaining) = job_processes(config, &mut cache)?;
        let groups = group_remaining.len() as u32;
        place_at_fork(&mut processes, groups, cores);
        mark_may_sleep_on_tags(&mut processes, &queues);
        // With stonewall groups the run ends by the sum of the groups' longest spans at the latest.
        let end_ns = (0..groups)
            .map(|g| {
                processes
                    .iter()
                    .filter(|p| p.params.group == g)
                    .map(|p| p.state.end_ns)
                    .max()
                    .unwrap_or(0)
            })
            .sum::<u64>();
        let window_start_ns = processes
            .iter()
            .filter(|p| p.params.group == 0)
            .map(|p| p.state.stats_start_ns)
            .min()
            .unwrap_or(0);
        let user_processes = processes.len();
        // The writeback flusher: a kernel thread on any core, issuing asynchronous writes as the page cache's owner.
        let flusher = if config.jobs.iter().any(|j| j.buffered && j.rw == Rw::Write) {
            processes.push(Process::flusher(cores, config.host.psync.clone(), end_ns));
            Some((processes.len() - 1) as u32)
        } else {
            None
        };
        let mut host = Host::new(cores, config.host.context_switch_ns);
        host.package_idle_wake_ns = config.host.package_idle_wake_ns;
        host.package_idle_ns = config.host.package_idle_ns;
        let footprint = crate::host::CacheFootprint {
            core_cache_bytes: config.host.core_cache_bytes,
            process_cache_bytes: config.host.process_cache_bytes,
            refill_ns: config.host.cache_refill_ns,
        };
        host.price_switch_ins(footprint, processes.len());
        host.set_window(window_start_ns, end_ns);
        let queues_runs: Vec<Vec<u32>> = queues
            .iter()
            .map(|q| vec![0; q.nr_hw_queues as usize])
            .collect();
        let kblockd_pending_until_ns = queues_runs.iter().map(|q| vec![0; q.len()]).collect();
        let mut shared_core = vec![0u32; cores as usize];
        for p in processes.iter().filter(|p| p.is_job_process()) {
            for &core in &p.params.allowed_cores {
                shared_core[core as usize] += 1;
            }
        }
        let shared_core = shared_core.into_iter().map(|n| n > 1).collect();
        // Load balancing moves only processes with more than one core to go to.
        let movable = processes
            .iter()
            .any(|p| p.is_job_process() && p.params.allowed_cores.len() > 1);
        Ok(Self {
            config,
            events: EventQueue::new(),
            host,
            active_processes: user_processes,
            processes,
            stonewalled: groups > 1,
            group_remaining,
            cache,
            flusher,
            flusher_busy: false,
            cache_bios_in_flight: 0,
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
            irq_package_idle_extra_ns: None,
            kworker_cpu: CpuAccount::default(),
            kblockd_runs: queues_runs,
            kblockd_pending_until_ns,
            inner_lock_uses: Vec::new(),
            end_ns,
            window_start_ns,
            timeseries: Vec::new(),
            failure: None,
            request_trace: config.request_trace.then(Vec::new),
            request_trace_truncated: false,
            request_trace_oldest: 0,
            min_vruntime_ns: vec![0; cores as usize],
            run_queues: (0..cores).map(|_| RunQueue::default()).collect(),
            run_queue_seq: 0,
            core_runner: vec![(u32::MAX, 0); cores as usize],
            slice_start_ns: vec![0; cores as usize],
            shared_core,
            fair_scheduler: FairScheduler::for_host(cores, config.host.kernel_version()?),
            balancer: super::balance::Balancer::new(cores, movable),
            // A stream of its own: drawn from only on a host with timer lateness, so no other run changes.
            timer_rng: rand_pcg::Pcg64::seed_from_u64(crate::mix(config.seed ^ 0x71AE_0000_0000)),
            completion_timer_draw: None,
            // The same for wake-up lateness.
            wake_rng: rand_pcg::Pcg64::seed_from_u64(crate::mix(config.seed ^ 0x3A4E_0000_0000)),
        })
    }
}

/// Per device: its block queue (blk-mq's hardware queues, one per core up to the device's, or the legacy layer's
/// single request list) with its own instance of the scheduler, and its model.
fn block_queues_and_devices(
    config: &SimConfig,
    layer: BlockLayer,
) -> Result<(Vec<BlockQueue>, Vec<Device>), String> {
    let mut queues = Vec::new();
    let mut devices = Vec::new();
    for (index, device) in config.devices.iter().enumerate() {
        let nr_hw_queues = match layer {
            BlockLayer::Mq => config.host.cores.min(device.max_hw_queues),
            BlockLayer::Legacy => 1,
        };
        let kernel = config.host.kernel_version()?;
        let mut elevator = iosched_policy::by_name(&config.scheduler.name, nr_hw_queues)?;
        elevator.set_kernel_version(kernel);
        if config.request_trace {
            // The run's notes in all, shared by the devices (each keeps its share from its first decision).
            elevator.record_notes(crate::result::SCHED_NOTES_MAX / config.devices.len().max(1));
        }
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
                kernel,
            ),
            BlockLayer::Legacy => BlockQueue::legacy(
                elevator,
                device.queue_depth,
                config.scheduler.nr_requests,
                kernel,
            ),
        };
        if let Some(kib) = device.max_sectors_kb {
            queue.set_max_sectors_kb(kib);
        }
        queue.set_lock_handoff_ns(config.host.lock_handoff_ns);
        queues.push(queue);
        let mut dev = Device::new(device.clone(), index as u32, nr_hw_queues, config.seed);
        // The interrupt's work per timer completion: the host's, then the elevator's completion hook, which runs
        // in it (only where the host preset measured its own part).
        let timer_irq_ns = match config.host.timer_irq_ns {
            0 => 0,
            own => {
                own + config
                    .host
                    .scheduler_costs
                    .get(&config.scheduler.name)
                    .map_or(0, |c| c.complete_ns)
            }
        };
        dev.set_timer_lateness(config.host.timer_lateness.clone(), timer_irq_ns);
        devices.push(dev);
    }
    Ok((queues, devices))
}

/// The scheduler's CPU costs on this host, with how often its hooks take its lock (from `queue`'s elevator; every
/// device runs the same scheduler). A scheduler without an entry in the host's `scheduler_costs` costs nothing.
/// blk-mq books the insert on the submission path and each dispatch call where the queue runs; the legacy layer
/// dispatches under the queue lock it takes at unplug, so its dispatch is booked with the insert.
fn scheduler_costs(config: &SimConfig, queue: &BlockQueue) -> SchedulerCosts {
    config
        .host
        .scheduler_costs
        .get(&config.scheduler.name)
        .map(|c| {
            let acquisitions = queue.lock_acquisitions();
            let (insert_ns, dispatch_ns) = match queue.layer {
                BlockLayer::Mq => (c.insert_ns, c.dispatch_ns),
                BlockLayer::Legacy => (c.insert_ns + c.dispatch_ns, 0),
            };
            SchedulerCosts {
                insert_ns,
                dispatch_ns,
                complete_ns: c.complete_ns,
                submit_acquisitions: acquisitions.submit,
                dispatch_acquisitions: acquisitions.dispatch,
                complete_acquisitions: acquisitions.complete,
                submit_unbooked_acquisitions: acquisitions.submit_unbooked,
                dispatch_context: config.host.scheduler_dispatch,
            }
        })
        .unwrap_or_default() // only `none`, which has no hooks (`check_scheduler_costs`)
}

fn page_cache(config: &SimConfig) -> Option<PageCache> {
    config.host.page_cache.as_ref().map(|pc| {
        let capacity_pages = pc.capacity_bytes / PAGE_BYTES;
        PageCache::new(PageCacheLimits {
            capacity_pages,
            background_pages: capacity_pages * pc.dirty_background_ratio as u64 / 100,
            dirty_limit_pages: capacity_pages * pc.dirty_ratio as u64 / 100,
        })
    })
}

/// Every job's processes (`numjobs` clones each, in job order), and how many processes each stonewall group has:
/// a `stonewall` job starts a new group unless nothing came before it.
fn job_processes(
    config: &SimConfig,
    cache: &mut Option<PageCache>,
) -> Result<(Vec<Process>, Vec<u32>), String> {
    let read_ahead_pages = config
        .host
        .page_cache
        .as_ref()
        .map(|pc| pc.read_ahead_kb as u64 * 1024 / PAGE_BYTES)
        .unwrap_or(1);
    let mut cgroups: Vec<&str> = vec![""];
    let mut processes = Vec::new();
    let mut group = 0u32;
    let mut group_remaining = vec![0u32];
    for (index, job) in config.jobs.iter().enumerate() {
        if job.stonewall && index > 0 && group_remaining[group as usize] > 0 {
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
        let layout = JobLayout::new(config, index as u32, job, group, cgroup);
        for clone in 0..job.numjobs {
            processes.push(layout.process(config, clone, cache, read_ahead_pages)?);
        }
    }
    Ok((processes, group_remaining))
}

/// What the processes (clones) of one job share.
struct JobLayout<'j> {
    index: u32,
    job: &'j JobConfig,
    group: u32,
    cgroup: u32,
    /// The job's cpus_allowed, or every core.
    allowed: Vec<u32>,
    /// The job's region: the smallest its devices leave after its offset, and at most its size.
    region_bytes: u64,
    /// The largest logical block of its devices.
    block_bytes: u64,
}

impl<'j> JobLayout<'j> {
    fn new(config: &SimConfig, index: u32, job: &'j JobConfig, group: u32, cgroup: u32) -> Self {
        let allowed = if job.cpus_allowed.is_empty() {
            (0..config.host.cores).collect()
        } else {
            job.cpus_allowed.clone()
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
        Self {
            index,
            job,
            group,
            cgroup,
            allowed,
            region_bytes,
            block_bytes,
        }
    }

    /// Clone `clone` of the job: its I/O source (generator, trace replay, buffered file) and its parameters.
    fn process(
        &self,
        config: &SimConfig,
        clone: u32,
        cache: &mut Option<PageCache>,
        read_ahead_pages: u64,
    ) -> Result<Process, String> {
        let job = self.job;
        // fio: every clone of a job replays the whole trace.
        let trace = match &job.trace {
            Some(t) => Some(Box::new(
                TraceReplay::open(t, job, self.region_bytes, self.block_bytes)
                    .map_err(|e| format!("job {}: read_iolog: {e}", job.name))?,
            )),
            None => None,
        };
        let allowed_cores = if job.cpus_split {
            vec![self.allowed[clone as usize % self.allowed.len()]]
        } else {
            let mut sorted = self.allowed.clone();
            sorted.sort_unstable();
            sorted.dedup();
            sorted
        };
        // Unpinned processes get their starting core at fork (`place_at_fork`), once all processes are known.
        let core = allowed_cores[0];
        let offset = job.offset_bytes + clone as u64 * job.offset_increment_bytes;
        let buffered = match (cache.as_mut(), job.buffered) {
            (Some(cache), true) => {
                let file = cache.file(job.devices[0], offset, self.region_bytes)?;
                if job.invalidate && self.group == 0 {
                    cache.invalidate_clean(file);
                }
                Some(Buffered {
                    file,
                    write: job.rw == Rw::Write,
                    readahead: Readahead::new(read_ahead_pages),
                    call: None,
                    waiting: false,
                    end_fsync: job.end_fsync && job.rw == Rw::Write,
                    fsync: None,
                })
            }
            _ => None,
        };
        // fio's seeds follow the job's thread number within its process: a clone run as a process of its own is
        // thread 1 there, which draws what the first job (clone 0) of a process draws. Such processes, launched
        // together, begin their I/O one after another (`SEPARATE_PROCESS_GAP_NS`).
        let (thread_job, thread_clone, launch_ns) = if job.separate_processes {
            (0, 0, clone as u64 * SEPARATE_PROCESS_GAP_NS)
        } else {
            (self.index, clone, 0)
        };
        let rng = process_rng(
            job.randseed.unwrap_or(config.seed),
            thread_job,
            thread_clone,
        );
        let generator = Generator::new(job, rng, self.region_bytes).at_offset(offset);
        let params = self.params(config, clone, allowed_cores, trace.is_some());
        let source = IoSource {
            generator: Some(generator),
            trace,
            buffered,
        };
        let start_ns = job.start_ns + launch_ns;
        let stats_start_ns = start_ns + job.ramp_ns;
        let end_ns = stats_start_ns + job.runtime_ns;
        Ok(Process::new(
            params,
            source,
            core,
            start_ns,
            stats_start_ns,
            end_ns,
            config.ramp_end,
        ))
    }

    fn params(
        &self,
        config: &SimConfig,
        clone: u32,
        allowed_cores: Vec<u32>,
        replay: bool,
    ) -> ProcessParams {
        let job = self.job;
        let mut cost = match job.ioengine {
            IoEngine::IoUring => &config.host.io_uring,
            IoEngine::Libaio => &config.host.libaio,
            IoEngine::Psync => &config.host.psync,
        }
        .clone();
        cost.submit_ns += extra_pages(job.bs_bytes) * config.host.io_page_ns;
        cost.submit_ns += filesystem_ns(config, job);
        cost.complete_ns += filesystem_completion_ns(config, job);
        ProcessParams {
            job: self.index,
            clone,
            group: self.group,
            allowed_cores,
            devices: job.devices.clone(),
            iodepth: if job.ioengine == IoEngine::Psync {
                1
            } else {
                job.iodepth
            },
            batch: job.iodepth_batch_submit,
            size_limit_bytes: if replay {
                u64::MAX // the trace, not size, says how much a replay transfers
            } else {
                self.region_bytes
                    .saturating_mul(job.loops.unwrap_or(1).max(1) as u64)
            },
            time_based: job.time_based,
            // 0: unlimited.
            rate_period_ns: 1_000_000_000u64.checked_div(job.rate_iops).unwrap_or(0),
            thinktime_ns: job.thinktime_ns,
            tag_wait: match job.ioengine {
                // fio sizes the ring (SQ entries) to iodepth.
                IoEngine::IoUring => {
                    TagWait::IoWqWorkers(job.iodepth.min(4 * config.host.cores).max(1))
                }
                IoEngine::Libaio | IoEngine::Psync => TagWait::Submitter,
            },
            clat_after_call: job.ioengine != IoEngine::Psync,
            task_work_at_submit: job.ioengine == IoEngine::IoUring,
            may_sleep_on_tags: false, // set once every process's depth is known (`mark_may_sleep_on_tags`)
            cost,
            locks: PathLocks::of(job.ioengine),
            ioprio_class: IoprioClass::from_fio(job.prioclass).unwrap_or(IoprioClass::None),
            ioprio_level: job.prio as u8,
            cgroup: self.cgroup,
            cgroup_weight: job.cgroup_weight,
        }
    }
}

/// Where the processes fio forks start (Linux spreads them over idle CPUs): per stonewall group, as only one group
/// runs at a time. Pinned processes keep their core and count as placed there.
fn place_at_fork(processes: &mut [Process], groups: u32, cores: u32) {
    for g in 0..groups {
        let mut fork = ForkPlacement::new(cores);
        let in_group = |p: &&mut Process| p.params.group == g;
        for p in processes.iter_mut().filter(in_group) {
            if p.params.allowed_cores.len() == 1 {
                fork.pin(p.state.core);
            }
        }
        for p in processes.iter_mut().filter(in_group) {
            if p.params.allowed_cores.len() > 1 {
                p.state.core = fork.place(&p.params.allowed_cores);
            }
        }
    }
}

/// Requests can run out on a device when its processes' depths together exceed the fewest an elevator lets a kind
/// of request hold (BFQ's async writes with weight-raised queues: 3/16 of nr_requests), or the driver tags without
/// one. A bound, not the exact limit: it only decides whether submissions may be booked ahead.
fn mark_may_sleep_on_tags(processes: &mut [Process], queues: &[BlockQueue]) {
    let scarce: Vec<bool> = queues
        .iter()
        .enumerate()
        .map(|(d, queue)| {
            let depth: u64 = processes
                .iter()
                .filter(|p| p.params.devices.contains(&(d as u32)))
                .map(|p| p.params.iodepth as u64)
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
        p.params.may_sleep_on_tags = p.params.tag_wait == TagWait::Submitter
            && p.params.devices.iter().any(|&d| scarce[d as usize]);
    }
}

/// The file system the job's files are on (its devices all carry the same one: validation), if any.
fn job_filesystem<'c>(config: &'c SimConfig, job: &JobConfig) -> Option<&'c str> {
    let first = *job.devices.first()?;
    config.devices[first as usize].filesystem.as_deref()
}

/// The CPU time the job's file system adds to each of its I/Os (`HostConfig::filesystems`); a mixed job pays the
/// read and write paths in its read share (validation has checked its devices agree and the host prices it).
fn filesystem_ns(config: &SimConfig, job: &JobConfig) -> u64 {
    let Some(fs) = job_filesystem(config, job) else {
        return 0;
    };
    let cost = &config.host.filesystems[fs];
    let read = read_percent(job);
    (cost.read_ns * read + cost.write_ns * (100 - read)) / 100
}

/// The share of the job's I/Os that are reads, in percent: 100 or 0 for a job that only reads or writes, else
/// `rwmixread`.
fn read_percent(job: &JobConfig) -> u64 {
    match (job.rw.does(false), job.rw.does(true)) {
        (true, false) => 100,
        (false, true) => 0,
        _ => job.rwmixread as u64,
    }
}

/// The CPU time an asynchronous direct write on a file adds to its completion where the kernel's file system completes
/// it in a workqueue (iomap's `s_dio_done_wq`; `kernel::EXT4_IOMAP_DIO`, `kernel::F2FS_IOMAP_DIO`, xfs always): the
/// interrupt wakes a kernel thread on the completing core, which takes the core from the process and gives it back,
/// two context switches (`context_switch_ns`), before the completion reaches the engine. A mixed job pays it in its
/// write share; a psync write's interrupt wakes its waiting process instead, and a buffered job's writes reach the
/// device through the page cache. Simplifications: every completion wakes the thread (the kernel's runs once for the
/// completions queued meanwhile), a process asleep for its completion pays both switches too (the thread then runs
/// on an idle core), and the time counts as the process's CPU, where the kernel gives it to the thread.
fn filesystem_completion_ns(config: &SimConfig, job: &JobConfig) -> u64 {
    let Some(fs) = job_filesystem(config, job) else {
        return 0;
    };
    let Ok(kernel) = config.host.kernel_version() else {
        return 0; // validation reports an unparsable version
    };
    let in_workqueue = match fs {
        "xfs" => true,
        "ext4" => kernel.has(&iosched_policy::kernel::EXT4_IOMAP_DIO),
        "f2fs" => kernel.has(&iosched_policy::kernel::F2FS_IOMAP_DIO),
        _ => false,
    };
    if !in_workqueue || job.buffered || job.ioengine == IoEngine::Psync {
        return 0;
    }
    2 * config.host.context_switch_ns * (100 - read_percent(job)) / 100
}

/// The 4 KiB pages of an I/O of `bytes` beyond its first (`HostConfig::io_page_ns`).
fn extra_pages(bytes: u64) -> u64 {
    bytes
        .div_ceil(crate::pagecache::PAGE_BYTES)
        .saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{buffered_job, config, job};

    /// A 64 KiB I/O is 16 pages, 15 beyond the first: at 90 ns per page its submission path costs 1,350 ns more
    /// than a 4 KiB one's (whose cost is the engine's alone), and 1 KiB rounds up to one page, costing nothing more.
    #[test]
    fn an_io_costs_its_pages_beyond_the_first() {
        let mut big = job("b", Rw::Randread, 8, 1);
        big.bs_bytes = 65536;
        let mut small = job("s", Rw::Randread, 8, 1);
        small.bs_bytes = 1024;
        let mut c = config("none", vec![big, small, job("f", Rw::Randread, 8, 1)]);
        c.host.io_page_ns = 90;
        let base = c.host.io_uring.submit_ns;
        let sim = Simulation::new(&c).unwrap();
        let submit = |i: usize| sim.processes[i].params.cost.submit_ns;
        assert_eq!(submit(0), base + 15 * 90);
        assert_eq!((submit(1), submit(2)), (base, base));
        c.host.io_page_ns = 0;
        let off = Simulation::new(&c).unwrap();
        assert_eq!(off.processes[0].params.cost.submit_ns, base, "0: off");
    }

    /// A file on ext4 priced at 1,000 ns per read and 1,600 ns per write: the reader's submission costs the
    /// engine's + 1,000, the writer's + 1,600, a 70/30 mix + 0.7 x 1,000 + 0.3 x 1,600 = 1,180; on the raw device
    /// (no filesystem) nothing more.
    #[test]
    fn a_file_systems_direct_io_path_adds_to_each_submission() {
        let mut mixed = job("m", Rw::Randrw, 8, 1);
        mixed.rwmixread = 70;
        let mut c = config(
            "none",
            vec![
                job("r", Rw::Randread, 8, 1),
                job("w", Rw::Randwrite, 8, 1),
                mixed,
            ],
        );
        let base = c.host.io_uring.submit_ns;
        let raw = Simulation::new(&c).unwrap();
        assert!((0..3).all(|i| raw.processes[i].params.cost.submit_ns == base));
        c.host.filesystems.insert(
            "ext4".into(),
            crate::config::FileSystemCost {
                read_ns: 1000,
                write_ns: 1600,
            },
        );
        c.devices[0].filesystem = Some("ext4".into());
        let sim = Simulation::new(&c).unwrap();
        let submit = |i: usize| sim.processes[i].params.cost.submit_ns - base;
        assert_eq!((submit(0), submit(1), submit(2)), (1000, 1600, 1180));
    }

    /// An io_uring write on a file completes through the file system's workqueue: with `context_switch_ns` 1,500
    /// the writer's completion costs 2 x 1,500 = 3,000 ns more, a 70/30 read/write mix 0.3 x 3,000 = 900, a reader
    /// (completed in the interrupt) and a psync writer (woken from the interrupt) nothing. On ext4 this began with
    /// Linux 5.5 (4.19: nothing), on f2fs with 5.17 (5.5: nothing), on xfs before every modelled version.
    #[test]
    fn an_async_direct_write_on_a_file_completes_through_a_workqueue() {
        let mut mixed = job("m", Rw::Randrw, 8, 1);
        mixed.rwmixread = 70;
        let mut psync = job("p", Rw::Randwrite, 8, 1);
        psync.ioengine = IoEngine::Psync;
        let mut libaio = job("l", Rw::Randwrite, 8, 1);
        libaio.ioengine = IoEngine::Libaio;
        let jobs = vec![
            job("r", Rw::Randread, 8, 1),
            job("w", Rw::Randwrite, 8, 1),
            mixed,
            psync,
            libaio,
        ];
        let mut c = config("none", jobs);
        c.host.context_switch_ns = 1500;
        for fs in ["ext4", "xfs", "f2fs"] {
            c.host.filesystems.insert(
                fs.into(),
                crate::config::FileSystemCost {
                    read_ns: 0,
                    write_ns: 0,
                },
            );
        }
        let added = |c: &SimConfig, fs: Option<&str>, kernel: &str| -> Vec<u64> {
            let mut c = c.clone();
            c.devices[0].filesystem = fs.map(String::from);
            c.host.kernel = kernel.into();
            let sim = Simulation::new(&c).unwrap();
            let engine = [
                &c.host.io_uring,
                &c.host.io_uring,
                &c.host.io_uring,
                &c.host.psync,
                &c.host.libaio,
            ];
            (0..5)
                .map(|i| sim.processes[i].params.cost.complete_ns - engine[i].complete_ns)
                .collect()
        };
        assert_eq!(added(&c, Some("ext4"), "6.3"), [0, 3000, 900, 0, 3000]);
        assert_eq!(added(&c, Some("ext4"), "4.19"), [0; 5], "ext4 before iomap");
        assert_eq!(added(&c, Some("f2fs"), "6.3"), [0, 3000, 900, 0, 3000]);
        assert_eq!(added(&c, Some("f2fs"), "5.5"), [0; 5], "f2fs before iomap");
        assert_eq!(added(&c, Some("xfs"), "4.15"), [0, 3000, 900, 0, 3000]);
        assert_eq!(added(&c, None, "6.3"), [0; 5], "the raw device");
    }

    /// A device whose file system the host does not price is refused by name, never run at zero cost.
    #[test]
    fn an_unpriced_file_system_is_an_error() {
        let mut c = config("none", vec![job("r", Rw::Randread, 8, 1)]);
        c.devices[0].filesystem = Some("f2fs".into());
        let err = c.validate().unwrap_err();
        assert!(
            err.contains("filesystem f2fs") && err.contains("host.filesystems"),
            "{err}"
        );
    }

    #[test]
    fn an_engines_depth_clat_start_and_tag_wait_follow_fio_and_the_kernel() {
        let mut psync = job("p", Rw::Randread, 8, 1);
        psync.ioengine = IoEngine::Psync;
        let mut libaio = job("l", Rw::Randread, 8, 1);
        libaio.ioengine = IoEngine::Libaio;
        let ring = job("u", Rw::Randread, 64, 1);
        let c = config("none", vec![psync, libaio, ring]);
        let sim = Simulation::new(&c).unwrap();
        let [p, l, u] = [0, 1, 2].map(|i| &sim.processes[i].params);
        assert_eq!(
            (p.iodepth, p.clat_after_call),
            (1, false),
            "psync: one I/O per call"
        );
        assert_eq!((l.iodepth, l.clat_after_call), (8, true));
        assert!(p.tag_wait == TagWait::Submitter && l.tag_wait == TagWait::Submitter);
        // A ring of 64 entries on 2 cores: min(64, 4 x 2) io-wq workers.
        assert!(u.tag_wait == TagWait::IoWqWorkers(8));
        assert!(sim.flusher.is_none());
    }

    #[test]
    fn stonewall_groups_run_one_after_the_other_and_the_run_spans_them_all() {
        let first = job("a", Rw::Randread, 1, 2);
        let mut second = job("b", Rw::Randwrite, 1, 3);
        second.stonewall = true;
        second.runtime_ns = 2_000_000;
        let c = config("none", vec![first, second]);
        let sim = Simulation::new(&c).unwrap();
        let groups: Vec<u32> = sim.processes.iter().map(|p| p.params.group).collect();
        assert_eq!(groups, vec![0, 0, 1, 1, 1]);
        assert_eq!(sim.group_remaining, vec![2, 3]);
        assert!(sim.stonewalled);
        // 1 ms ramp + 5 ms, then 1 ms ramp + 2 ms; statistics from the first group's ramp on.
        assert_eq!((sim.end_ns, sim.window_start_ns), (9_000_000, 1_000_000));
        // Each group is forked onto the idle cores anew.
        let cores: Vec<u32> = sim.processes.iter().map(|p| p.state.core).collect();
        assert_eq!(cores, vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn a_stonewall_on_the_first_job_starts_no_empty_group() {
        let mut first = job("a", Rw::Randread, 1, 1);
        first.stonewall = true;
        let sim_config = config("none", vec![first]);
        let sim = Simulation::new(&sim_config).unwrap();
        assert_eq!(sim.group_remaining, vec![1]);
        assert!(!sim.stonewalled);
    }

    #[test]
    fn submitters_may_sleep_on_tags_only_where_their_depths_can_exhaust_the_requests() {
        let depth_config = |iodepth: u32, engine: IoEngine| {
            let mut j = job("a", Rw::Randread, iodepth, 1);
            j.ioengine = engine;
            config("mq-deadline", vec![j])
        };
        let may_sleep = |c: &SimConfig| {
            Simulation::new(c).unwrap().processes[0]
                .params
                .may_sleep_on_tags
        };
        // mq-deadline's requests: 2 x min(queue depth 64, 128) = 128; the fewest a kind may hold: 3/16 of them = 24.
        assert!(!may_sleep(&depth_config(24, IoEngine::Libaio)));
        assert!(may_sleep(&depth_config(25, IoEngine::Libaio)));
        assert!(
            !may_sleep(&depth_config(25, IoEngine::IoUring)),
            "io_uring's submitter never sleeps"
        );
    }

    #[test]
    fn buffered_writers_bring_the_flusher_and_clones_get_their_own_files() {
        let c = config("none", vec![buffered_job("w", Rw::Write, 2, 1 << 20)]);
        let sim = Simulation::new(&c).unwrap();
        assert_eq!(sim.flusher, Some(2));
        assert_eq!(
            sim.active_processes, 2,
            "the flusher does not keep the run going"
        );
        let files: Vec<usize> = sim.processes[..2]
            .iter()
            .map(|p| p.source.buffered.as_ref().unwrap().file)
            .collect();
        assert_eq!(files, vec![0, 1]);
        let readers = config("none", vec![buffered_job("r", Rw::Read, 1, 1 << 20)]);
        assert!(Simulation::new(&readers).unwrap().flusher.is_none());
    }

    #[test]
    fn errors_found_while_building_name_their_source() {
        let mut c = config("mq-deadline", vec![job("a", Rw::Randread, 1, 1)]);
        c.scheduler.tunables = vec![("no_such_tunable".into(), 1)];
        let e = Simulation::new(&c).err().unwrap();
        assert!(e.starts_with("scheduler mq-deadline: "), "{e}");
        let mut overlapping = buffered_job("w", Rw::Write, 2, 1 << 20);
        overlapping.offset_increment_bytes = 1 << 19;
        let e = Simulation::new(&config("none", vec![overlapping]))
            .err()
            .unwrap();
        assert!(e.starts_with("buffered jobs' files overlap"), "{e}");
    }

    #[test]
    fn a_schedulers_costs_come_from_its_host_entry_and_a_missing_entry_is_refused() {
        let mut c = config("mq-deadline", vec![job("a", Rw::Randread, 1, 1)]);
        let sim = Simulation::new(&c).unwrap();
        assert!(!sim.costs.any(), "the test host's entries are zeros");
        assert_eq!(sim.costs.complete_ns, 0);
        c.host.scheduler_costs.remove("mq-deadline");
        let e = Simulation::new(&c).err().unwrap();
        assert!(e.contains("mq-deadline"), "{e}");
        c.host.scheduler_costs.insert(
            "mq-deadline".into(),
            crate::config::SchedulerCost {
                insert_ns: 300,
                dispatch_ns: 200,
                complete_ns: 100,
            },
        );
        let sim = Simulation::new(&c).unwrap();
        assert_eq!(
            (
                sim.costs.insert_ns,
                sim.costs.dispatch_ns,
                sim.costs.complete_ns
            ),
            (300, 200, 100)
        );
        assert!(
            sim.costs.submit_acquisitions > 0 && sim.costs.dispatch_acquisitions > 0,
            "mq-deadline's hooks take its lock"
        );
        // The legacy layer dispatches under the queue lock taken at unplug: with the insert.
        c.devices[0].interface = crate::config::Interface::Sata;
        c.scheduler.block_layer = Some("legacy".into());
        c.scheduler.name = "deadline".into();
        c.host.scheduler_costs.insert(
            "deadline".into(),
            crate::config::SchedulerCost {
                insert_ns: 300,
                dispatch_ns: 200,
                complete_ns: 100,
            },
        );
        let sim = Simulation::new(&c).unwrap();
        assert_eq!((sim.costs.insert_ns, sim.costs.dispatch_ns), (500, 0));
    }
}
