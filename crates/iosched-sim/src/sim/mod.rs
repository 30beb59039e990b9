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
//!
//! Where each part lives:
//! - this file: the run's state, the event loop, bio slots, and booking a process's work on a core;
//! - `build.rs`: queues, devices and processes from the config (fork placement, stonewall groups, the flusher);
//! - `process.rs`: a process's parameters, I/O source, loop state and statistics;
//! - `fio.rs`: steps 1 and 4 on fio's side (the submit/reap loop, rate, think time, trace batches, latency);
//! - `block.rs`: steps 2 and 4 in the block layer (hooks, merge, insert, dispatch, timers, request completion);
//! - `tags.rs`: a bio that finds no free request (who waits, wake-ups, retries);
//! - `runqueue.rs`: woken processes waiting for a busy core, run in CFS's order (least virtual runtime first);
//! - `buffered.rs`: buffered I/O through the page cache (calls, readahead, writeback, the flusher);
//! - `report.rs`: samples during the run, the conservation check and the result at its end;
//! - `request_trace.rs`: the run's request trace, when asked for (`SimConfig::request_trace`).

use iosched_policy::Request;

use crate::blk::BlockQueue;
use crate::config::{SchedulerDispatch, SimConfig};
use crate::device::Device;
use crate::engine::{Event, EventQueue};
use crate::host::{CpuAccount, Host};
use crate::pagecache::PageCache;
use crate::result::{Sample, SimResult};

mod balance;
mod block;
mod buffered;
mod build;
mod fio;
mod process;
mod report;
mod request_trace;
mod runqueue;
mod tags;

use process::Process;
use runqueue::{Resume, RunQueue};

const NO_IO: u32 = u32::MAX;

/// What a bio is for: a fio I/O, or page-cache I/O (readahead into, writeback from, pages `first..first + count`
/// of a file).
#[derive(Clone, Copy, PartialEq, Eq)]
enum BioKind {
    Fio,
    Readahead { file: u32, first: u64, count: u64 },
    Writeback { file: u32, first: u64, count: u64 },
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
    /// the call returns for an async one (libaio, io_uring; see `ProcessParams::clat_after_call`).
    issue_ns: u64,
    /// When the submission call that issued this bio started (fio's io_u start time): an async engine's
    /// submission latency (slat) runs from it to `issue_ns`, and its total latency (lat) from it to completion.
    call_ns: u64,
    core: u32,
    hctx: u32,
    dispatch_hctx: u32,
    /// When the request went to the driver (blk_mq_start_request).
    dispatch_ns: u64,
    /// The submitter's hardware-queue run after this bio's insert: when its first dispatch call, booked with the
    /// insert on the submitter's core, ends (0: none booked).
    booked_dispatch_end_ns: u64,
    /// A fio bio whose submitter runs the queue in its own call after the insert, its dispatch calls booked from
    /// then on (`Simulation::start_dispatch_loop`) rather than with the insert.
    runs_queue_at_insert: bool,
    /// io_uring: the io-wq worker (1, 2, ...: its number in the ring, for the request trace) issuing this bio, which
    /// blocks for a request (its NOWAIT attempt failed, or it waited in io-wq for a worker); 0: none. The worker
    /// is counted in `tag_waits` until the bio has its request.
    io_wq_worker: u16,
    /// Next bio merged into the same request (a singly linked chain from the request's head bio).
    next_merged: u32,
    tail: u32,
    request: Option<Request>,
    /// In use (between issue and completion); a second completion of the same bio is a bug caught here.
    live: bool,
    sync: bool,
    kind: BioKind,
}

/// Where and when a piece of a process's work ran (`Simulation::run_process`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuBooking {
    core: u32,
    start_ns: u64,
    end_ns: u64,
}

/// The scheduler's CPU costs on this host and how often its hooks take its lock (from the policy).
#[derive(Default, Clone, Copy)]
struct SchedulerCosts {
    /// Per bio entering the elevator (bio merge attempt and insert; on the legacy layer also the dispatch, which
    /// runs under the same queue-lock acquisition at unplug).
    insert_ns: u64,
    /// Per dispatch call of a hardware-queue run, booked in the context that runs the queue (blk-mq).
    dispatch_ns: u64,
    complete_ns: u64,
    submit_acquisitions: u32,
    dispatch_acquisitions: u32,
    complete_acquisitions: u32,
    /// Per bio entering the elevator, lock calls counted for the lock share only (`LockAcquisitions`).
    submit_unbooked_acquisitions: u32,
    /// Who runs the hardware queue after an insert: the submitter, or a kblockd worker.
    dispatch_context: SchedulerDispatch,
}

impl SchedulerCosts {
    /// Whether the scheduler's hooks take any CPU time (else they are free and immediate).
    fn any(&self) -> bool {
        self.insert_ns + self.dispatch_ns > 0
    }
}

/// The owner of a kblockd worker's CPU time (`Host` tells processes apart by number to charge context switches;
/// kworkers are not fio's processes and their time is in no job's CPU usage).
const KWORKER: u32 = u32::MAX - 1;

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
    /// Processes of each stonewall group not yet finished.
    group_remaining: Vec<u32>,
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
    /// While a completion's interrupt is handled: what a wake-up on its path pays for the package's idleness, as
    /// found when the interrupt arrived (before its own work was booked; `Host::package_idle_extra_ns`).
    irq_package_idle_extra_ns: Option<u64>,
    /// CPU time of kblockd workers (on the cores' busy time, in no job's).
    kworker_cpu: CpuAccount,
    /// Per device and hardware queue: kblockd runs so far, for the CPU the next one runs on.
    kblockd_runs: Vec<Vec<u32>>,
    /// Per device and hardware queue: until when the last woken kblockd worker's run is still queued (it starts
    /// at its switch-in); a queue run asked for before then is that same work item (`wake_kworker`).
    kblockd_pending_until_ns: Vec<Vec<u64>>,
    /// Draws how late the host's jiffy timers fire (`HostConfig::timer_lateness`), for blk-mq's delayed re-run.
    timer_rng: rand_pcg::Pcg64,
    /// While a request completes: the draw and duration of the late timer that ended it (`Device::take_timer_draw`).
    completion_timer_draw: Option<(f64, u64)>,
    /// Draws how late a thread woken on an idle core starts (`HostConfig::wake_lateness`).
    wake_rng: rand_pcg::Pcg64,
    /// Scratch: the elevator's inner-lock acquisitions to book.
    inner_lock_uses: Vec<iosched_policy::InnerLockUse>,
    end_ns: u64,
    window_start_ns: u64,
    timeseries: Vec<Sample>,
    /// A trace that turned out unreadable mid-run: the run ends with this error.
    failure: Option<String>,
    /// The run's request trace (`request_trace.rs`), when the config asks for it; whether it hit its size limit.
    request_trace: Option<Vec<crate::result::RequestTraceEvent>>,
    request_trace_truncated: bool,
    /// Once the trace is full, where its oldest event is (the next to give way).
    request_trace_oldest: usize,
    /// Per core: CFS's min_vruntime (see `run_process_on`).
    min_vruntime_ns: Vec<u64>,
    /// Per core: processes woken while it was busy, waiting to run (CFS kernels only: `pick_next`).
    run_queues: Vec<RunQueue>,
    /// Ties in virtual runtime go in wake-up order.
    run_queue_seq: u64,
    /// Per core: the process whose own work it booked last, and until when (who an interrupt interrupts).
    core_runner: Vec<(u32, u64)>,
    /// Per core: when its runner switched in: the start of its slice (`runqueue.rs`).
    slice_start_ns: Vec<u64>,
    /// Per core: more than one fio process may run there (`waits_in_run_queue`).
    shared_core: Vec<bool>,
    /// How the kernel shares a busy core among the processes woken there (CFS before 6.6, EEVDF since):
    /// `runqueue.rs`.
    fair_scheduler: FairScheduler,
    /// Periodic load balancing between the cores' run queues (`balance.rs`).
    balancer: balance::Balancer,
}

/// The fair scheduling class of the host's kernel (kernel/sched/fair.c), its tunables all scaled by
/// 1 + ilog2(min(CPUs, 8)) (SCHED_TUNABLESCALING_LOG).
///
/// CFS (before 6.6; Linux 6.3 `place_entity` with GENTLE_FAIR_SLEEPERS, `wakeup_preempt_entity`, `sched_slice`):
/// sched_latency 6 ms shared by a core's runnable processes, at least min_granularity 0.75 ms each; a woken process
/// is placed at most half the latency behind min_vruntime and preempts when it lags the runner by more than the
/// wakeup_granularity, 1 ms.
///
/// EEVDF (6.6+, `place_entity`, `pick_eevdf`, `update_deadline`, `check_preempt_wakeup_fair` as of 6.12): every
/// process asks for the same slice, sysctl_sched_base_slice 0.75 ms (1.5 ms on 2 CPUs), not shared out. A process
/// that ran briefly and slept comes back with about no lag, at the core's average, so the runner, also picked at
/// about no lag, is still eligible and keeps its core for its slice (RUN_TO_PARITY) or until it sleeps: a woken
/// process waits for that. Processes woken together (one interrupt's completions) are enqueued before the core
/// picks, and it picks the one with the earliest deadline, about the least virtual runtime: so a process woken
/// onto an idle core goes through the run queue too (`waits_in_run_queue`), picked once the events of that instant
/// are in. Simplifications: no lag is kept (a woken process is placed no further behind than min_vruntime, which
/// stands for the average), so a runner is never preempted on a wake-up; no delayed dequeue (6.12), no custom
/// slices. Measured where it shows, in the VM lab (Linux 6.12.117; docs/validation.md): on one vCPU, three libaio
/// readers and a psync reader on 16 tags, a thread woken for a tag waited a median 0.64-0.82 ms to run, behind a
/// reader taking every freed tag in its submission call, and then mostly found none left; two libaio writers
/// sharing a vCPU and 16 tags split them evenly (both woken by one interrupt's completions, the one that had run
/// less going first), where booking the first woken at once went winner-take-all (434 against 3,197 requests).
#[derive(Debug, Clone, Copy)]
struct FairScheduler {
    eevdf: bool,
    sleeper_credit_ns: u64,
    wakeup_granularity_ns: u64,
    /// CFS: sysctl_sched_min_granularity (0.75 ms, scaled): the least slice a process gets (`slice_ns`).
    /// EEVDF: sysctl_sched_base_slice (0.75 ms, scaled): every slice.
    min_granularity_ns: u64,
    /// CFS: sysctl_sched_latency (6 ms, scaled): the period in which every runnable process of a core runs once.
    latency_ns: u64,
}

impl FairScheduler {
    fn for_host(cores: u32, kernel: iosched_policy::KernelVersion) -> Self {
        let factor = 1 + cores.clamp(1, 8).ilog2() as u64;
        Self {
            eevdf: kernel.has(&iosched_policy::kernel::EEVDF),
            sleeper_credit_ns: 6_000_000 * factor / 2,
            wakeup_granularity_ns: 1_000_000 * factor,
            min_granularity_ns: 750_000 * factor,
            latency_ns: 6_000_000 * factor,
        }
    }

    /// The slice of one of `nr_running` runnable processes of equal weight on a core. CFS's `sched_slice`: the
    /// period (`__sched_period`: the latency, or the minimum granularity per process beyond sched_nr_latency = 8)
    /// shared equally. EEVDF's: the base slice, whoever else waits.
    fn slice_ns(&self, nr_running: u64) -> u64 {
        if self.eevdf {
            return self.min_granularity_ns;
        }
        let nr_running = nr_running.max(1);
        let period = if nr_running > 8 {
            nr_running * self.min_granularity_ns
        } else {
            self.latency_ns
        };
        period / nr_running
    }

    /// Whether a woken process whose virtual runtime lags the runner's by `lag_ns` preempts it. CFS: beyond the
    /// wake-up granularity. EEVDF: never; the runner keeps its core for its slice (RUN_TO_PARITY), or until it
    /// sleeps.
    fn wakeup_preempts(&self, lag_ns: u64) -> bool {
        !self.eevdf && lag_ns > self.wakeup_granularity_ns
    }

    /// Where a process woken on a core whose min_vruntime is `min_ns` is placed, from its own `vruntime_ns`.
    /// CFS: at most the sleeper credit behind. EEVDF: no further behind than min_vruntime.
    fn placed_vruntime_ns(&self, vruntime_ns: u64, min_ns: u64) -> u64 {
        let credit_ns = if self.eevdf {
            0
        } else {
            self.sleeper_credit_ns
        };
        vruntime_ns.max(min_ns.saturating_sub(credit_ns))
    }
}

impl Simulation<'_> {
    /// Run to the end. `progress` gets the fraction of simulated time done now and then; returning false aborts.
    /// Never inlined: `iosched bench` counts the instructions of this function under callgrind by its name.
    #[inline(never)]
    pub fn run(mut self, progress: &mut dyn FnMut(f64) -> bool) -> Result<SimResult, String> {
        self.schedule_start();
        let mut next_progress_check = 1u64 << 16;
        while self.active_processes > 0 || self.cache_bios_in_flight > 0 {
            let Some((now, event)) = self.events.pop() else {
                break;
            };
            self.handle(now, event);
            if self.events.processed >= next_progress_check {
                next_progress_check += 1 << 16;
                if let Some(failure) = self.failure.take() {
                    return Err(failure);
                }
                // A job whose ramp ended late runs past the nominal end.
                if !progress((now as f64 / self.end_ns.max(1) as f64).min(1.0)) {
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

    /// The first events: the first stonewall group's processes start, and the first sample.
    fn schedule_start(&mut self) {
        for p in 0..self.processes.len() {
            if self.processes[p].params.group != 0 {
                continue; // later stonewall groups, and the flusher
            }
            let start = self.processes[p].state.start_ns;
            self.processes[p].state.issue_pending = true;
            self.events
                .schedule(start, Event::Issue { process: p as u32 });
        }
        self.events.schedule(
            self.config.sample_interval_ns.min(self.end_ns.max(1)),
            Event::Sample,
        );
        self.schedule_first_balance_tick();
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

    /// Handle one event, at `now`.
    fn handle(&mut self, now: u64, event: Event) {
        match event {
            Event::Issue { process } => {
                self.processes[process as usize].state.issue_pending = false;
                if let Some(core) = self.issues_from_run_queue(process, now) {
                    self.queue_woken(core, process, Resume::Issue);
                    self.preempt_on_wakeup(core, process);
                } else {
                    self.try_issue(process, now);
                }
            }
            Event::SubmitNext { process } => {
                let state = &mut self.processes[process as usize].state;
                if state.dispatch_loops > 0 {
                    // Its submission call returns once its queue runs end (`dispatch_loop_ended`).
                    state.submit_after_dispatch = true;
                } else {
                    self.submission_call_returned(process, now);
                }
            }
            Event::BlockSubmit { io } => self.block_submit(io, now),
            Event::BlockInsert { io } => self.block_insert(io, now),
            Event::Dispatched { device, io } => self.send_to_driver(device, io, now),
            Event::DispatchCall {
                device,
                hctx,
                process,
                core,
            } => self.dispatch_call(device, hctx.into(), process, core.into(), now),
            Event::TagRetry { io } => self.tag_retry(io, now),
            Event::ControllerDone { device, core } => {
                self.devices[device as usize].controller_done(core, &mut self.events)
            }
            Event::ReadOutDone { device } => {
                self.devices[device as usize].read_out_done(&mut self.events)
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
            Event::DelayedRun { device, hctx } => self.delayed_run(device, hctx, now),
            Event::Sample => self.sample(now),
            Event::CallDone { process } => self.call_done(process, now),
            Event::FlusherStep => self.flusher_step(now),
            Event::FsyncStep { process } => self.fsync_step(process, now),
            Event::PickNext { core } => self.pick_next(core, now),
            Event::BalanceTick => self.balance_tick(now),
        }
    }

    /// The core on which `process` runs work from `at_ns`, and the time from which it can: a pinned process's
    /// core; the core it is running on, if its work booked so far lasts until then (a running process is not
    /// migrated), unless other processes' work is queued there behind its own and another allowed core is idle
    /// when its own ends (`idle_pull`); else, woken from sleep, the core Linux's wake-up placement would pick
    /// (`woken_core`).
    #[inline]
    fn process_core(&self, process: u32, at_ns: u64) -> (u32, u64) {
        let proc = &self.processes[process as usize];
        if proc.params.allowed_cores.len() == 1 {
            (proc.params.allowed_cores[0], at_ns)
        } else if at_ns <= proc.state.busy_until_ns {
            self.idle_pull(process, at_ns)
                .unwrap_or((proc.state.core, at_ns))
        } else {
            (self.woken_core(process, at_ns), at_ns)
        }
    }

    /// Linux's idle balancing (kernel/sched/fair.c `newidle_balance`): a core going idle pulls a task that waits
    /// on a busy one. An unpinned process whose core has other processes' work queued behind its own would wait
    /// there; if an allowed core is idle when its own work ends, it moves there and goes on from then. Without it
    /// processes that never sleep (their completions keep arriving) stayed crowded on a few cores while others
    /// idled: 7 QD-128 readers under Kyber on 3 of 10 cores, CPU-bound at 583 K (seed 000 Fig. 7a).
    fn idle_pull(&self, process: u32, at_ns: u64) -> Option<(u32, u64)> {
        let proc = &self.processes[process as usize];
        let (core, own_end) = (proc.state.core, proc.state.busy_until_ns);
        if self.host.idle_at(core, own_end) || self.host.booked_last_by(core, process) {
            // Nothing queued behind it, or the backlog ends with its own work (a completion's path booked on its
            // core): it runs on. Counting that as others' moved a process whose completions keep arriving one core
            // on at every step, its work then on two cores at once (BFQ's one reader: 1.17 cores of CPU).
            return None;
        }
        // Only a process whose running work is about to end: booking the move further ahead would keep the idle
        // core from work that becomes runnable before then (bookings are made in event order, not run order).
        if own_end > at_ns + self.host.context_switch_ns {
            return None;
        }
        let other = self
            .host
            .wake_core(&proc.params.allowed_cores, core, own_end);
        self.core_idle(other, own_end).then_some((other, own_end))
    }

    /// Add `ran_ns` to `process`'s virtual runtime on `core`, moving it there first (a migration keeps its lag
    /// behind min_vruntime, as `migrate_task_rq_fair` does), and move the core's min_vruntime on. Simplification:
    /// min_vruntime follows the processes the core ran (CFS takes the least runnable one; with the model's
    /// processes of equal cost per I/O they differ by a few pieces of work).
    pub(super) fn account_vruntime(&mut self, process: u32, core: u32, ran_ns: u64) {
        self.move_vruntime(process, core);
        let proc = &mut self.processes[process as usize].state;
        let before = proc.vruntime_ns;
        proc.vruntime_ns += ran_ns;
        // The least of the running process and those waiting in the run queue (`update_min_vruntime`).
        let least = self.run_queues[core as usize]
            .least_vruntime_ns()
            .map_or(before, |queued| queued.min(before));
        let min = &mut self.min_vruntime_ns[core as usize];
        *min = (*min).max(least);
    }

    /// Put `process` on `core`, keeping its lag behind min_vruntime across a migration (`migrate_task_rq_fair`).
    pub(super) fn move_vruntime(&mut self, process: u32, core: u32) {
        let proc = &mut self.processes[process as usize].state;
        if proc.core != core {
            proc.vruntime_ns = (proc.vruntime_ns + self.min_vruntime_ns[core as usize])
                .saturating_sub(self.min_vruntime_ns[proc.core as usize]);
            proc.core = core;
        }
    }

    /// The wake-up of `process` on `core` at `at_ns`: place it (`FairScheduler::placed_vruntime_ns`) and say
    /// whether it preempts the work running there: on CFS, the core is busy and the woken process lags
    /// min_vruntime by more than the wake-up granularity. A process that mostly sleeps (a QD-1 reader beside
    /// CPU-bound ones) does; processes with the same work per I/O do not preempt each other. On EEVDF nobody does
    /// (`FairScheduler::wakeup_preempts`).
    fn wakeup_preempts(&mut self, process: u32, core: u32, at_ns: u64) -> bool {
        let fair = self.fair_scheduler;
        self.move_vruntime(process, core);
        let min = self.min_vruntime_ns[core as usize];
        let proc = &mut self.processes[process as usize].state;
        proc.vruntime_ns = fair.placed_vruntime_ns(proc.vruntime_ns, min);
        let vruntime_ns = proc.vruntime_ns;
        // `wakeup_preempt_entity` compares with the running process (curr), whose virtual runtime may be well
        // ahead of min_vruntime, which the woken process itself holds down on a core it keeps coming back to.
        let (runner, until_ns) = self.core_runner[core as usize];
        let curr_ns =
            if runner != process && (runner as usize) < self.processes.len() && until_ns > at_ns {
                self.processes[runner as usize].state.vruntime_ns.max(min)
            } else {
                min
            };
        !self.host.idle_at(core, at_ns) && fair.wakeup_preempts(curr_ns.saturating_sub(vruntime_ns))
    }

    /// The extra work of a wake-up at `at_ns` into an idle package: as the interrupt in progress found the package,
    /// or, outside a completion's interrupt, as it is at `at_ns`.
    fn package_idle_wake_extra_ns(&self, at_ns: u64) -> u64 {
        self.irq_package_idle_extra_ns
            .unwrap_or_else(|| self.host.package_idle_extra_ns(at_ns))
    }

    /// How late a thread woken at `at_ns` on `core` starts to run (`HostConfig::wake_lateness`): a draw for how long
    /// the core has been idle, none on a busy core (its run queue decides when the thread runs) or on a host
    /// without it. The lab's guest: the host wakes the halted vCPU's thread, and runs it when it gives it a CPU.
    /// `timer`: for the wake-up of a late timer's request's reaper, that timer's draw and duration: the same quantile
    /// (in the lab's traces a request's timer and its reader's wake-up are both beyond their P90 3-4 times as often
    /// as independent draws would be, and the P90 of their sum is the sum of their P90s), at the duration the table
    /// was measured by (the timer's; the core's idle time includes the timer's lateness). Else drawn, at the core's
    /// idle time.
    fn wake_late_ns(&mut self, core: u32, at_ns: u64, timer: Option<(f64, u64)>) -> u64 {
        let Some(lateness) = &self.config.host.wake_lateness else {
            return 0;
        };
        if !self.core_idle(core, at_ns) {
            return 0;
        }
        let (u, duration_ns) = timer.unwrap_or_else(|| {
            let idle_ns = at_ns - self.host.cores[core as usize].free_at_ns.min(at_ns);
            (
                rand::RngExt::random_range(&mut self.wake_rng, 0.0..1.0),
                idle_ns,
            )
        });
        lateness.late_ns(duration_ns, u)
    }

    /// Whether `process` is asleep at `at_ns`, waiting for a completion: the work booked for it has ended (it
    /// blocked in io_uring_enter, io_getevents or its read/write call). Its wake-up then costs the sleep/wake path
    /// whether its core went idle or ran other processes meanwhile: try_to_wake_up and the switch back in are paid
    /// either way (Linux 6.3 kernel/sched/core.c), the context switch itself is counted apart. Seed 000's Fig. 3
    /// measures it: N QD-1 processes on one core reach 162 K at N = 16, 6.2 us per I/O, the one-process path plus a
    /// context switch and a sleep/wake; without the sleep/wake the model gave 238 K.
    fn asleep_at(&self, process: u32, at_ns: u64) -> bool {
        match self.processes.get(process as usize) {
            Some(proc) => at_ns >= proc.state.busy_until_ns,
            None => true, // a kblockd worker (KWORKER): woken from its wait
        }
    }

    /// Book `work_ns` of `process`'s own work (its submission path, reaping, copies, a wake-up), runnable from
    /// `at_ns`, on the core it runs on then (`process_core`): it is running there until the work ends.
    fn run_process(&mut self, process: u32, at_ns: u64, work_ns: u64) -> CpuBooking {
        let proc = &self.processes[process as usize].state;
        if at_ns <= proc.preempting_until_ns && at_ns >= proc.busy_until_ns {
            // It preempted its core on waking and goes on running there (its next submission).
            return self.run_ahead(proc.core, process, at_ns, work_ns, false);
        }
        let (core, from_ns) = self.process_core(process, at_ns);
        self.run_process_on(core, process, from_ns, work_ns)
    }

    /// Book `process`'s work on `core` at once, ahead of the work booked there (`Host::run_preempting`): on
    /// waking (`switch_in`, a wake-up preemption), or going on from such work.
    fn run_ahead(
        &mut self,
        core: u32,
        process: u32,
        at_ns: u64,
        work_ns: u64,
        switch_in: bool,
    ) -> CpuBooking {
        let proc = &mut self.processes[process as usize];
        let (start_ns, end_ns) = self.host.run_preempting(
            core,
            process,
            at_ns,
            work_ns,
            switch_in,
            &mut proc.stats.cpu,
        );
        self.account_vruntime(process, core, end_ns - start_ns);
        self.set_runner(core, process, start_ns, end_ns);
        let proc = &mut self.processes[process as usize];
        (proc.state.core, proc.state.busy_until_ns) = (core, end_ns);
        proc.state.preempting_until_ns = end_ns;
        CpuBooking {
            core,
            start_ns,
            end_ns,
        }
    }

    /// Count `acquisitions` uncontended lock acquisitions made inside `work_ns` of work that started on `core` at
    /// `start_ns` as lock time (`HostConfig::uncontended_lock_ns`), never more than the work itself. No time is
    /// added: the work's cost already includes its lock calls.
    fn count_lock_calls(&mut self, core: u32, start_ns: u64, acquisitions: u64, work_ns: u64) {
        let lock_ns = (acquisitions * self.config.host.uncontended_lock_ns).min(work_ns);
        if lock_ns > 0 {
            self.host.count_lock_calls(core, start_ns, lock_ns);
        }
    }

    /// `run_process` on a core the caller chose.
    fn run_process_on(&mut self, core: u32, process: u32, at_ns: u64, work_ns: u64) -> CpuBooking {
        // Linux counts a process's sleep as its own voluntary switch (`nvcsw`, in fio's `ctx`), to whichever task
        // ran next, the idle one included; `Host::run` counts one only where another process ran on the core. (Its
        // first work, before which nothing was booked, follows no sleep.)
        let busy_until_ns = self.processes[process as usize].state.busy_until_ns;
        let slept = busy_until_ns > 0
            && at_ns > busy_until_ns
            && !self.host.counts_switch_in(core, process);
        let proc = &mut self.processes[process as usize];
        let (start_ns, end_ns) = self
            .host
            .run(core, process, at_ns, work_ns, &mut proc.stats.cpu);
        if slept {
            proc.stats.cpu.context_switches += 1;
        }
        self.account_vruntime(process, core, end_ns - start_ns);
        self.set_runner(core, process, start_ns, end_ns);
        let proc = &mut self.processes[process as usize];
        (proc.state.core, proc.state.busy_until_ns) = (core, end_ns);
        CpuBooking {
            core,
            start_ns,
            end_ns,
        }
    }

    /// `process`'s own work on `core` runs from `start_ns` to `end_ns`: it is the core's runner, on a new slice if
    /// it switched in (another process ran last). Simplification: a process that slept and comes back to a core
    /// nobody else ran on keeps its slice's start (CFS starts a slice at every pick).
    fn set_runner(&mut self, core: u32, process: u32, start_ns: u64, end_ns: u64) {
        let (runner, _) = self.core_runner[core as usize];
        if runner != process {
            self.slice_start_ns[core as usize] = start_ns;
        }
        self.core_runner[core as usize] = (process, end_ns);
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
}

#[cfg(test)]
impl Simulation<'_> {
    /// Handle the next event; returns its time, or None when no event is left.
    fn step(&mut self) -> Option<u64> {
        let (now, event) = self.events.pop()?;
        self.handle(now, event);
        Some(now)
    }

    /// Start the run and handle its events until `done` holds (or none is left).
    fn start_and_run_until(&mut self, done: impl Fn(&Self) -> bool) {
        self.schedule_start();
        self.run_until(done);
    }

    /// Go on handling a started run's events until `done` holds (or none is left); starting it again would
    /// schedule its processes' first issue in the past.
    fn run_until(&mut self, done: impl Fn(&Self) -> bool) {
        while !done(self) && self.step().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rw;
    use crate::testkit::{config, job};

    #[test]
    fn a_process_keeps_its_core_while_it_runs_and_is_placed_anew_once_woken() {
        let c = config("none", vec![job("a", Rw::Randread, 1, 2)]);
        let mut sim = Simulation::new(&c).unwrap();
        // Forked onto one core each.
        assert_eq!(
            (sim.processes[0].state.core, sim.processes[1].state.core),
            (0, 1)
        );
        let booked = sim.run_process(0, 1_000, 5_000);
        assert_eq!(
            booked,
            CpuBooking {
                core: 0,
                start_ns: 1_000,
                end_ns: 6_000
            }
        );
        assert_eq!(sim.processes[0].state.busy_until_ns, 6_000);
        // Still running at 6 us: it stays, even though core 1 is idle.
        sim.run_process(1, 0, 7_000);
        assert_eq!(sim.process_core(0, 6_000), (0, 6_000));
        // Asleep later, with its core busy (process 1's work, after a context switch, until 21 us): woken onto
        // the idle core 1.
        sim.run_process_on(0, 1, 7_000, 13_000);
        assert_eq!(sim.process_core(0, 10_000), (1, 10_000));
        // Its own core, idle again, is its first choice.
        assert_eq!(sim.process_core(0, 21_000), (0, 21_000));
    }

    #[test]
    fn a_running_process_with_others_queued_behind_it_moves_to_a_core_idle_when_its_work_ends() {
        let c = config("none", vec![job("a", Rw::Randread, 1, 2)]);
        let mut sim = Simulation::new(&c).unwrap();
        // Process 0 runs on core 0 until 5 us; process 1's work is queued behind it there (5-16 us, with the
        // context switch). Core 1 is idle.
        sim.run_process_on(0, 0, 0, 5_000);
        sim.run_process_on(0, 1, 1_000, 10_000);
        // Process 0's next work, due at 4.5 us while it still runs, would wait on core 0 until 16 us: core 1 pulls
        // it, from 5 us, when its running work ends (never two cores at once).
        assert_eq!(sim.process_core(0, 4_500), (1, 5_000));
        // Due at 3 us, more than a context switch (1 us) before its work ends: not booked that far ahead.
        assert_eq!(sim.process_core(0, 3_000), (0, 3_000));
        let booked = sim.run_process(0, 4_500, 2_000);
        assert_eq!((booked.core, booked.start_ns), (1, 5_000));
        // Negative control: with core 1 busy beyond 5 us too, it stays and waits on its own core.
        let mut sim = Simulation::new(&c).unwrap();
        sim.run_process_on(0, 0, 0, 5_000);
        sim.run_process_on(0, 1, 1_000, 10_000);
        sim.host.run(1, 9, 0, 20_000, &mut Default::default());
        assert_eq!(sim.process_core(0, 4_500), (0, 4_500));
    }

    #[test]
    fn a_woken_sleeper_lagging_a_busy_core_preempts_it_on_linux_6_3_and_not_on_eevdf() {
        // Test host: 2 cores, so CFS's scaling is 1 + ilog2(2) = 2: sleeper credit 6 ms x 2 / 2 = 6 ms, wake-up
        // granularity 1 ms x 2 = 2 ms; 1 us per context switch.
        let mut c = config("none", vec![job("a", Rw::Randread, 1, 2)]);
        c.host.kernel = "6.3".into();
        let mut sim = Simulation::new(&c).unwrap();
        // Process 1 (forked onto core 1) runs 10 ms, then 1 ms more, on core 0: min_vruntime there reaches 10 ms.
        sim.run_process_on(0, 1, 0, 10_000_000);
        sim.run_process_on(0, 1, 10_000_000, 1_000_000);
        assert_eq!(sim.min_vruntime_ns[0], 10_000_000);
        // Process 0 has not run: woken at 10.5 ms while core 0 is busy to 11 ms, it is placed 6 ms behind (4 ms)
        // and lags by 6 ms > 2 ms: it preempts.
        assert!(sim.wakeup_preempts(0, 0, 10_500_000));
        assert_eq!(sim.processes[0].state.vruntime_ns, 4_000_000);
        // Its work runs at once with a switch in and back (2 x 1 us); core 0's backlog ends that much later.
        let reap = sim.run_ahead(0, 0, 10_500_000, 5_000, true);
        assert_eq!((reap.start_ns, reap.end_ns), (10_500_000, 10_507_000));
        assert_eq!(sim.host.cores[0].free_at_ns, 11_000_000 + 7_000);
        // Its next submission follows on at once too, with no further switch; the backlog moves on by 2 us.
        let submit = sim.run_process(0, 10_507_000, 2_000);
        assert_eq!((submit.core, submit.start_ns), (0, 10_507_000));
        assert_eq!(sim.host.cores[0].free_at_ns, 11_000_000 + 9_000);
        // Process 1 itself, woken, does not lag: no preemption. Nor does anyone on an idle core.
        assert!(!sim.wakeup_preempts(1, 0, 10_500_000));
        assert!(!sim.wakeup_preempts(0, 0, 20_000_000));
        // Negative control: Linux 6.12 (EEVDF) is not modelled so: no preemption.
        let mut c = config("none", vec![job("a", Rw::Randread, 1, 2)]);
        c.host.kernel = "6.12".into();
        let mut sim = Simulation::new(&c).unwrap();
        sim.run_process_on(0, 1, 0, 10_000_000);
        sim.run_process_on(0, 1, 10_000_000, 1_000_000);
        assert!(!sim.wakeup_preempts(0, 0, 10_500_000));
    }

    /// CPU time per I/O of `processes` QD-1 readers pinned to core 0 of the test host, on a drive fast enough
    /// (64 flash units, 1 us per command) that the core is the bottleneck.
    fn cpu_ns_per_io_of_qd1_processes_on_one_core(processes: u32) -> f64 {
        cpu_ns_per_io_of_qd1_processes("none", processes, 0)
    }

    /// As `cpu_ns_per_io_of_qd1_processes_on_one_core`, on a host whose wake-ups into a package idle for 20 us cost
    /// `package_idle_wake_ns` more.
    fn cpu_ns_per_io_of_qd1_processes(
        scheduler: &str,
        processes: u32,
        package_idle_wake_ns: u64,
    ) -> f64 {
        let mut readers = job("a", Rw::Randread, 1, processes);
        readers.cpus_allowed = vec![0];
        readers.runtime_ns = 50_000_000;
        let mut c = config(scheduler, vec![readers]);
        c.devices[0].units_per_channel = 32;
        c.host.package_idle_wake_ns = package_idle_wake_ns;
        c.host.package_idle_ns = 20_000;
        if let Some(cost) = c.host.scheduler_costs.get_mut(scheduler) {
            // A completion hook booked in the interrupt before the wake-up (the Xeon's mq-deadline costs).
            *cost = crate::config::SchedulerCost {
                insert_ns: 200,
                dispatch_ns: 200,
                complete_ns: 50,
            };
        }
        let mut sim = Simulation::new(&c).unwrap();
        sim.start_and_run_until(|sim| sim.active_processes == 0);
        // CPU time and I/Os, both inside the measurement window (50 ms).
        let ios: u64 = sim
            .processes
            .iter()
            .map(|p| p.stats.read.result().ios)
            .sum();
        sim.host.cores[0].busy_ns as f64 / ios as f64
    }

    #[test]
    fn a_process_asleep_for_its_completion_pays_the_wake_up_even_when_its_core_is_busy() {
        // 32 QD-1 processes share core 0 (io_uring: 2 us submit, 1.5 us complete, 3 us sleep/wake; 1 us context
        // switch). Each I/O puts its process to sleep and the core switches to another: 2 + 1.5 + 3 + 1 = 7.5 us
        // per I/O, though the core never goes idle. (Charging the wake-up only to an idle core, as the model did
        // before, gives 2 + 1.5 + 1 = 4.5 us.) Within 2%: the window cuts the 32 I/Os in flight at its edges.
        let per_io = cpu_ns_per_io_of_qd1_processes_on_one_core(32);
        assert!((per_io - 7_500.0).abs() < 150.0, "{per_io}");
        // One process alone sleeps on an idle core: 2 + 1.5 + 3 = 6.5 us, no context switch; it does not
        // saturate the core (it waits ~50 us for the flash each time), so this counts CPU per I/O, not time.
        let alone = cpu_ns_per_io_of_qd1_processes_on_one_core(1);
        assert!((alone - 6_500.0).abs() < 130.0, "{alone}");
    }

    #[test]
    fn every_sleep_for_a_completion_is_one_context_switch_of_the_process_as_fio_counts_it() {
        // fio's `ctx` is the job thread's voluntary and involuntary switches (getrusage). A QD-1 reader sleeps in
        // io_uring_enter for each completion: one voluntary switch per I/O, to the idle task when it is alone on its
        // core (the ICPE'24 artifact's Fig. 5, one QD-1 process: 2.17 M switches for 2.17 M reads over its 150 s).
        // Alone on core 0 the reader switches once per completion it slept for: every one, as the drive takes ~50 us
        // and nothing else runs there.
        let switches_per_io = |processes: u32, iodepth: u32, submit_ns: u64| {
            let mut readers = job("a", Rw::Randread, iodepth, processes);
            readers.cpus_allowed = vec![0];
            readers.ramp_ns = 0; // the switches are counted over the whole run, the I/Os over the window
            readers.runtime_ns = 20_000_000;
            let mut c = config("none", vec![readers]);
            c.host.io_uring.submit_ns = submit_ns;
            let r = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
            let ios: u64 = r.jobs.iter().map(|j| j.read.ios).sum();
            let switches: u64 = r.jobs.iter().map(|j| j.context_switches).sum();
            switches as f64 / ios as f64
        };
        let alone = switches_per_io(1, 1, 2_000);
        assert!((0.95..=1.05).contains(&alone), "{alone}");
        // Two on one core: each I/O still puts its process to sleep once; the other one runs meanwhile, so the
        // switch is counted where it switches back in, once, not twice.
        let shared = switches_per_io(2, 1, 2_000);
        assert!((0.95..=1.05).contains(&shared), "{shared}");
        // A QD-32 reader sleeps too, wherever the drive is slower than its core: the test SSD completes one read
        // every ~13 us (~77 K/s) and the reader's path takes 6.5 us of it (2 + 1.5 + 3 to wake), so it waits for most
        // completions.
        let drive_bound = switches_per_io(1, 32, 2_000);
        assert!(drive_bound > 0.5, "{drive_bound}");
        // Negative control: at 40 us per submission the same reader is bound by its core (41.5 us per I/O against
        // the drive's 13), always has a completion to reap when its work ends, and never sleeps: no switch.
        let core_bound = switches_per_io(1, 32, 40_000);
        assert!(core_bound < 0.01, "{core_bound}");
    }

    #[test]
    fn a_wake_up_into_an_idle_package_costs_its_extra_only_when_no_core_kept_the_package_busy() {
        // One QD-1 reader alone: each I/O leaves every core idle for the ~50 us of its flash read, more than the
        // 20 us the package needs, so each wake-up pays the 2,570 ns: 6,500 + 2,570 = 9,070 ns per I/O (within 2%).
        let alone = cpu_ns_per_io_of_qd1_processes("none", 1, 2_570);
        assert!((alone - 9_070.0).abs() < 180.0, "{alone}");
        // With an elevator the completion hook runs in the interrupt first; the package was idle when the
        // interrupt came, so the wake-up pays all the same.
        let mq_deadline = cpu_ns_per_io_of_qd1_processes("mq-deadline", 1, 2_570)
            - cpu_ns_per_io_of_qd1_processes("mq-deadline", 1, 0);
        assert!((mq_deadline - 2_570.0).abs() < 60.0, "{mq_deadline}");
        // Negative control: 32 of them keep core 0 busy, so no wake-up finds the package idle: 7.5 us per I/O, as
        // without the extra.
        let busy = cpu_ns_per_io_of_qd1_processes("none", 32, 2_570);
        assert!((busy - 7_500.0).abs() < 150.0, "{busy}");
    }

    #[test]
    fn a_pinned_process_runs_on_its_core_even_when_it_is_busy() {
        let mut pinned = job("a", Rw::Randread, 1, 1);
        pinned.cpus_allowed = vec![1];
        let c = config("none", vec![pinned]);
        let mut sim = Simulation::new(&c).unwrap();
        sim.host.run(1, 7, 0, 50_000, &mut Default::default());
        assert_eq!(sim.process_core(0, 10_000), (1, 10_000));
        let booked = sim.run_process(0, 10_000, 1_000);
        // Behind the other work, plus a context switch.
        assert_eq!(booked.start_ns, 50_000);
        assert_eq!(booked.end_ns, 50_000 + 1_000 + c.host.context_switch_ns);
    }

    #[test]
    fn only_work_inside_the_measurement_window_counts_as_cpu_time() {
        let c = config("none", vec![job("a", Rw::Randread, 1, 1)]);
        let mut sim = Simulation::new(&c).unwrap();
        // The window starts after the 1 ms ramp.
        sim.run_process(0, 990_000, 20_000);
        assert_eq!(sim.processes[0].stats.cpu.cpu_ns, 10_000);
    }

    #[test]
    fn merged_bios_chain_from_the_request_head_in_order() {
        let c = config("none", vec![job("a", Rw::Write, 4, 1)]);
        let mut sim = Simulation::new(&c).unwrap();
        let slot = |n: u32| IoSlot {
            process: 0,
            write: true,
            device: 0,
            offset_bytes: n as u64 * 4096,
            bytes: 4096,
            request_bytes: 4096,
            issue_ns: 0,
            call_ns: 0,
            core: 0,
            hctx: 0,
            dispatch_hctx: 0,
            dispatch_ns: 0,
            booked_dispatch_end_ns: 0,
            runs_queue_at_insert: false,
            io_wq_worker: 0,
            next_merged: NO_IO,
            tail: NO_IO,
            request: None,
            live: true,
            sync: true,
            kind: BioKind::Fio,
        };
        let ios: Vec<u32> = (0..3).map(|n| sim.alloc_slot(slot(n))).collect();
        sim.link(ios[0], ios[1]);
        sim.link(ios[0], ios[2]);
        let mut chain = vec![ios[0]];
        while let Some(&last) = chain.last() {
            match sim.slots[last as usize].next_merged {
                NO_IO => break,
                next => chain.push(next),
            }
        }
        assert_eq!(chain, ios);
        assert_eq!(sim.slots[ios[0] as usize].tail, ios[2]);
        // A freed slot is reused before the table grows.
        sim.free_slots.push(ios[1]);
        assert_eq!(sim.alloc_slot(slot(9)), ios[1]);
    }

    #[test]
    fn a_run_ends_when_its_processes_have_and_reports_each_of_them() {
        let c = config("mq-deadline", vec![job("a", Rw::Randread, 8, 2)]);
        let result = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
        assert_eq!(result.ios_issued, result.ios_completed);
        assert!(result.ios_completed > 100, "{}", result.ios_completed);
        assert_eq!(result.jobs[0].processes.len(), 2);
        let mut aborted = Simulation::new(&c).unwrap();
        aborted.start_and_run_until(|sim| sim.ios_completed >= 10);
        assert!(aborted.ios_completed >= 10 && aborted.active_processes == 2);
    }

    #[test]
    fn a_thread_woken_on_an_idle_core_starts_as_late_as_the_host_measured() {
        let mut c = config("none", vec![job("a", Rw::Randread, 1, 1)]);
        // Wake-up lateness: 100 / 200 / 1,000 us at P10 / P50 / P90 after 1 ms, 300 / 600 / 3,000 us after 3 ms.
        c.host.wake_lateness = Some(crate::testkit::lateness());
        let mut sim = Simulation::new(&c).unwrap();
        // Core 0's booked work ended at 1 ms: at 3 ms it has been idle for 2 ms.
        sim.host.cores[0].free_at_ns = 1_000_000;
        // After a 1 ms timer late at its median: the median of the 1 ms row, whatever the idle time (200 us); at
        // P70, halfway from P50 to P90: 200 + (1,000 - 200) / 2 = 600 us.
        assert_eq!(
            sim.wake_late_ns(0, 3_000_000, Some((0.5, 1_000_000))),
            200_000
        );
        assert_eq!(
            sim.wake_late_ns(0, 3_000_000, Some((0.7, 1_000_000))),
            600_000
        );
        // Any other wake-up draws, at the idle time: 2 ms lies halfway between the rows (200 / 400 / 2,000 us), and
        // the table is flat beyond P10 and P90.
        let drawn: Vec<u64> = (0..50)
            .map(|_| sim.wake_late_ns(0, 3_000_000, None))
            .collect();
        assert!(
            drawn.iter().all(|d| (200_000..=2_000_000).contains(d)),
            "{drawn:?}"
        );
        assert!(drawn.iter().any(|&d| d != drawn[0]), "drawn, not fixed");
        // A busy core: its run queue decides when the thread runs; no lateness.
        sim.host.cores[0].free_at_ns = 3_500_000;
        assert_eq!(sim.wake_late_ns(0, 3_000_000, Some((0.5, 1_000_000))), 0);
        // A host without it (every preset but the lab's): none.
        let c = config("none", vec![job("a", Rw::Randread, 1, 1)]);
        let mut sim = Simulation::new(&c).unwrap();
        assert_eq!(sim.wake_late_ns(0, 3_000_000, Some((0.5, 1_000_000))), 0);
    }

    #[test]
    fn a_qd1_reader_on_a_late_timer_is_reaped_later_by_the_wake_up_lateness_at_the_timers_quantile()
    {
        // A QD-1 reader on a null_blk of 1 ms timers, the host's timers late by 100 / 200 / 1,000 us at P10 / P50 /
        // P90. With the wake-up lateness above, each read's reaper starts late by the 1 ms row at the timer's own
        // quantile: at P10 and below 100 + 100 us, at P50 200 + 200, at P90 and above 1,000 + 1,000. So every
        // read's clat grows by its timer's lateness again: the spread of clat doubles (100-1,000 us of lateness
        // become 200-2,000), and the mean by the mean lateness.
        let run = |wake: bool| {
            let mut c = config("none", vec![job("a", Rw::Randread, 1, 1)]);
            c.devices[0].null_blk = Some(crate::device::NullBlkConfig {
                irqmode: 2,
                completion_ns: 1_000_000,
            });
            c.devices[0].queue_depth = 16;
            c.jobs[0].ioengine = crate::config::IoEngine::Libaio;
            c.jobs[0].cpus_allowed = vec![0];
            c.jobs[0].runtime_ns = 400_000_000;
            c.host.timer_lateness = Some(crate::testkit::lateness());
            c.host.wake_lateness = wake.then(crate::testkit::lateness);
            let r = Simulation::new(&c).unwrap().run(&mut |_| true).unwrap();
            let read = r.jobs[0].read.clone();
            let p50 = read.percentiles.iter().find(|(p, _)| *p == 50.0).unwrap().1 as f64;
            (
                read.clat_min_ns as f64,
                read.clat_max_ns as f64,
                read.clat_mean_ns,
                p50,
            )
        };
        let (min0, max0, mean0, p50_0) = run(false);
        let (min1, max1, mean1, p50_1) = run(true);
        // The median read: 1,004.5 + 200 us without; with, its reaper late by the same quantile, 1,004.5 + 400 us
        // (independent draws would give ~1,800 us: the sum of two draws of this skewed table has a median of ~800).
        assert!((p50_0 / 1_204_500.0 - 1.0).abs() < 0.03, "{p50_0}");
        assert!((p50_1 / 1_404_500.0 - 1.0).abs() < 0.03, "{p50_1}");
        // Without: clat spans the 900 us of lateness (100 to 1,000 us) above the fixed path (1,004.5 us: the timer
        // and the CPU path); with: 1,800 us, from 100 us more (the timer's P10 again).
        assert_eq!((min0, max0), (1_104_500.0, 2_004_500.0));
        assert_eq!((min1, max1), (1_204_500.0, 3_004_500.0));
        // The mean: 383 us of lateness drawn on average without (1,387.8 - 1,004.5), about that again with
        // (1,771.9 - 1,387.8 = 384 us; the table's own mean is 410 us).
        let drawn = mean0 - (min0 - 100_000.0);
        assert!(
            ((mean1 - mean0) / drawn - 1.0).abs() < 0.05,
            "{mean0} {mean1}"
        );
    }
}
