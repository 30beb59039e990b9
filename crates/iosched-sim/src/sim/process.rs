//! A process: one clone of a fio job, or the writeback flusher. Its parts are kept apart by how they change during
//! a run: its parameters (from its job, fixed), the source of its I/Os, the state of its submit/reap loop, and its
//! statistics.

use std::collections::VecDeque;

use iosched_policy::IoprioClass;

use super::buffered::Buffered;
use super::runqueue::Completion;
use super::tags::TagWait;
use crate::config::{EngineCost, IoEngine, RampEnd};
use crate::host::CpuAccount;
use crate::metrics::{LatencyStats, SampleStats};
use crate::result::DepthTables;
use crate::workload::{Generator, TraceReplay};

/// The job index of the writeback flusher, which belongs to no job.
pub(super) const FLUSHER_JOB: u32 = u32::MAX;

pub(super) struct Process {
    pub(super) params: ProcessParams,
    pub(super) source: IoSource,
    pub(super) state: LoopState,
    pub(super) stats: ProcessStats,
}

/// Locks the kernel takes and releases on an I/O's paths, by fio ioengine (Linux 6.3, direct I/O to an NVMe
/// block device). Only the lock share uses them: each costs the host's `uncontended_lock_ns` inside the path's own
/// CPU time (`HostConfig::uncontended_lock_ns`). The scheduler's locks are the elevator's own
/// (`Elevator::lock_acquisitions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct PathLocks {
    /// Per submission call: io_uring's `ctx->uring_lock` mutex around `io_submit_sqes` in `io_uring_enter`.
    pub(super) submit_call: u32,
    /// Per I/O submitted: the NVMe driver's `nvmeq->sq_lock` around copying the command into the submission queue
    /// (`nvme_sq_copy_cmd`).
    pub(super) submit: u32,
    /// Per I/O completed: io_uring's task work takes `ctx->uring_lock` to flush completions and
    /// `ctx->completion_lock` to post the CQE (`io_cq_lock`); libaio's `aio_complete` takes `ctx->completion_lock`
    /// and `io_getevents` the ring's `ring_lock` mutex (`aio_read_events`).
    pub(super) complete: u32,
    /// When the process sleeps for its completion and is woken: the wait queue's lock to go on it
    /// (`prepare_to_wait_exclusive`) and in the waker's `__wake_up`, and `try_to_wake_up`'s `p->pi_lock` and
    /// run-queue lock. A psync submitter waits on no wait queue (`blk_wake_io_task` wakes it directly).
    pub(super) sleep_wake: u32,
}

impl PathLocks {
    /// A sleep on a wait queue (for a completion, or for a request tag on the sbitmap's): its lock to go on it and
    /// in the waker's `__wake_up`, and `try_to_wake_up`'s `p->pi_lock` and run-queue lock.
    pub(super) const WAIT_QUEUE_SLEEP: u32 = 4;

    pub(super) fn of(engine: IoEngine) -> Self {
        match engine {
            IoEngine::IoUring => Self {
                submit_call: 1,
                submit: 1,
                complete: 2,
                sleep_wake: Self::WAIT_QUEUE_SLEEP,
            },
            IoEngine::Libaio => Self {
                submit_call: 0,
                submit: 1,
                complete: 2,
                sleep_wake: Self::WAIT_QUEUE_SLEEP,
            },
            IoEngine::Psync => Self {
                submit_call: 0,
                submit: 1,
                complete: 0,
                sleep_wake: 2,
            },
        }
    }
}

/// What a process is, from its job (or, for the flusher, from the kernel): fixed once the run is built.
pub(super) struct ProcessParams {
    /// Index of its job in the config (`FLUSHER_JOB` for the flusher), and which of the job's clones it is.
    pub(super) job: u32,
    pub(super) clone: u32,
    /// Jobs separated by `stonewall` run in groups, one after the other.
    pub(super) group: u32,
    /// Sorted, without duplicates; one core: pinned.
    pub(super) allowed_cores: Vec<u32>,
    pub(super) devices: Vec<u32>,
    pub(super) iodepth: u32,
    /// I/Os per submission call (`iodepth_batch_submit`).
    pub(super) batch: u32,
    /// Without `time_based`, the process stops after issuing this much.
    pub(super) size_limit_bytes: u64,
    pub(super) time_based: bool,
    /// fio's `rate_iops` as the time between I/Os (0: unlimited), and its `thinktime`.
    pub(super) rate_period_ns: u64,
    pub(super) thinktime_ns: u64,
    /// Where its bios wait when the block layer has no request for them (`TagWait`).
    pub(super) tag_wait: TagWait,
    /// An async engine (libaio, io_uring): fio stamps an I/O's issue time once io_submit / io_uring_enter returns
    /// (fio's `fio_libaio_queued`, `fio_ioring_queued`), so the call's own time (the submission path, the
    /// scheduler hooks, and a libaio submitter's sleep waiting for a request) is submission latency (slat), not
    /// completion latency (clat), which is what fio reports and results hold. psync stamps it before the call.
    pub(super) clat_after_call: bool,
    /// io_uring: the completions' task work runs at every submission call, after its submission (fio 3.35 sets
    /// `IORING_SETUP_DEFER_TASKRUN` and submits with `IORING_ENTER_GETEVENTS`, so `io_uring_enter` runs the
    /// deferred work, `io_run_local_work_locked`, before it returns): what completed meanwhile is posted then, not
    /// left for fio's next reap (`Simulation::run_task_work`).
    pub(super) task_work_at_submit: bool,
    /// Whether the submitter can go to sleep on its devices (their requests can run out at the depths of all
    /// processes), which rules out booking submissions ahead (`try_issue`). Set once every process is known.
    pub(super) may_sleep_on_tags: bool,
    /// CPU cost of its ioengine's paths, and the locks they take.
    pub(super) cost: EngineCost,
    pub(super) locks: PathLocks,
    pub(super) ioprio_class: IoprioClass,
    pub(super) ioprio_level: u8,
    /// Index of its cgroup (0: the root group) and the cgroup's weight.
    pub(super) cgroup: u32,
    pub(super) cgroup_weight: u32,
}

/// Where a process's I/Os come from: fio's generator, a trace replay, and for a buffered job its file in the page
/// cache. All None for the flusher, which writes back what the page cache hands it.
#[derive(Default)]
pub(super) struct IoSource {
    pub(super) generator: Option<Generator>,
    /// A trace replay (`read_iolog`) instead of the generator.
    pub(super) trace: Option<Box<TraceReplay>>,
    pub(super) buffered: Option<Buffered>,
}

/// The state of a process's submit/reap loop: where it runs, what it has in flight, what it waits for.
pub(super) struct LoopState {
    /// The core it runs on, or last ran on.
    pub(super) core: u32,
    /// When the work last booked in its own context (submission, reaping, copies) ends: until then it is running
    /// on `core`, and stays there; a process woken later is placed anew (`process_core`).
    pub(super) busy_until_ns: u64,
    /// CFS's virtual runtime: the CPU time booked in its own context (all fio processes have nice 0, weight
    /// 1024), relative to the `min_vruntime` of the core it last ran on (`Simulation::run_process_on`).
    pub(super) vruntime_ns: u64,
    /// Until when it runs ahead of its core's booked work, having preempted it on waking: its own work that
    /// follows on directly (the submission after the reap) runs ahead too.
    pub(super) preempting_until_ns: u64,
    pub(super) inflight: u32,
    pub(super) issued: u64,
    pub(super) bytes_issued: u64,
    /// When it starts issuing, when its statistics start (after the ramp), and when it stops: set again when its
    /// stonewall group starts.
    pub(super) start_ns: u64,
    pub(super) stats_start_ns: u64,
    pub(super) end_ns: u64,
    /// Where fio's ramp is. fio ends it as it accounts a completion (`ramp_time_over()` in `io_completed()`): the
    /// first one reaped at or after `ramp_time` resets the statistics and starts the runtime there. A process
    /// starved across the ramp (a best-effort reader behind real-time ones under mq-deadline) is so measured
    /// later, after its starvation; fio reports per job, so two jobs' windows need not coincide. `stats_start_ns`
    /// and `end_ns` are the earliest until then.
    pub(super) ramp: Ramp,
    /// An Issue event is pending for it.
    pub(super) issue_pending: bool,
    /// In its submission loop: a SubmitNext event is pending. Completions that arrive meanwhile wait in
    /// `unreaped` (posted by the kernel, not yet seen by fio) until the loop ends.
    pub(super) submitting: bool,
    /// Queue runs of its submission call still dispatching (`Simulation::dispatch_call`): the call returns when
    /// the last ends, and the SubmitNext that came meanwhile (`submit_after_dispatch`) goes on then.
    pub(super) dispatch_loops: u32,
    pub(super) submit_after_dispatch: bool,
    pub(super) unreaped: Vec<u32>,
    /// Completions whose work the process has done (`Simulation::reap`) but which fio has not taken from the
    /// ring yet: it takes one per turn of its loop (`Simulation::consume`); they still hold its depth and their
    /// clat runs on.
    pub(super) consumable: VecDeque<Completion>,
    /// Woken, waiting in its core's run queue (`Simulation::queue_woken`): completions meanwhile wait in
    /// `unreaped`, and its loop goes on when the core picks it.
    pub(super) queued: bool,
    /// CFS's need_resched: its slice is over while others wait for its core, or a process woken there preempts it
    /// (`preempt_on_wakeup`). At its next step (a new completion, or its submission call returning) it goes back
    /// to the run queue, runnable.
    pub(super) resched: bool,
    /// Its bios waiting for a request in the block layer.
    pub(super) tag_waits: u32,
    /// io_uring: bios that found no request while every io-wq worker was already waiting with one, in order.
    pub(super) punted: VecDeque<u32>,
    /// io_uring: its ring's io-wq workers without a bio (their numbers, the last freed on top, as io-wq's free
    /// list hands out the worker that just finished), and how many it has started.
    pub(super) io_wq_free: Vec<u16>,
    pub(super) io_wq_started: u16,
    pub(super) stopped: bool,
    pub(super) finished_ns: Option<u64>,
}

/// fio's ramp of one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ramp {
    /// In the ramp (ramp_time not over at its last completion).
    Pending,
    /// It ended at a completion of the batch fio is reaping: fio is in its TD_RAMP state and accounts none of the
    /// batch's completions; its loop going on makes it TD_RUNNING.
    Ending,
    /// Measured (or no ramp).
    Over,
}

impl Ramp {
    /// At a process's start: in its ramp if it has one and its window starts as fio's does.
    pub(super) fn starting(has_ramp: bool, ramp_end: RampEnd) -> Self {
        if has_ramp && ramp_end == RampEnd::FirstCompletion {
            Ramp::Pending
        } else {
            Ramp::Over
        }
    }

    /// fio's loop goes on after reaping: a ramp that ended in that batch is over (TD_RAMP -> TD_RUNNING).
    pub(super) fn loop_goes_on(&mut self) {
        if *self == Ramp::Ending {
            *self = Ramp::Over;
        }
    }
}

/// What fio reports for a process: latency by direction, and CPU time.
#[derive(Default)]
pub(super) struct ProcessStats {
    pub(super) read: LatencyStats,
    pub(super) write: LatencyStats,
    /// Per direction, an async engine's submission latency and total latency (fio's slat and lat).
    pub(super) slat: [LatencyStats; 2],
    pub(super) lat: [LatencyStats; 2],
    pub(super) cpu: CpuAccount,
    /// Per direction, every completion since the last time-series sample, ramp included (fio's logs have it).
    pub(super) interval: [Counts; 2],
    /// Per direction, the measured completions of the statistics window in progress, which started then.
    pub(super) window: [Counts; 2],
    pub(super) window_start_ns: Option<u64>,
    /// Per direction, one IOPS and one KiB/s sample per closed statistics window (fio's iops_* and bw_*).
    pub(super) iops_samples: [SampleStats; 2],
    pub(super) bw_kib_samples: [SampleStats; 2],
    /// fio's io_u_map (each measured submission counted at the depth it brought the process to, buckets 1, 2-3,
    /// 4-7, 8-15, 16-31, 32-63, 64 and more), io_u_submit (each measured submission call by how many I/Os it
    /// submitted, buckets 0, 1-4, 5-8, 9-16, 17-32, 33-64, more) and io_u_complete (each measured reap by how many
    /// completions it took in, the same buckets: one completion reaped as it arrives when the process waited for
    /// it, or the batch that arrived while it was busy submitting or waited in its core's run queue, together).
    pub(super) depth_tables: DepthTables,
}

/// fio's bucket (io_u_submit / io_u_complete) for the number of I/Os one call handled.
pub(super) fn batch_level(n: u32) -> usize {
    match n {
        0 => 0,
        1..=4 => 1,
        5..=8 => 2,
        9..=16 => 3,
        17..=32 => 4,
        33..=64 => 5,
        _ => 6,
    }
}

/// fio's bucket (io_u_mark_depth) for a queue depth: 1, 2-3, 4-7, 8-15, 16-31, 32-63, >= 64.
pub(super) fn depth_level(depth: u32) -> usize {
    match depth {
        0..=1 => 0,
        2..=3 => 1,
        4..=7 => 2,
        8..=15 => 3,
        16..=31 => 4,
        32..=63 => 5,
        _ => 6,
    }
}

/// Completions counted over an interval: how many, their bytes and their summed completion latency.
#[derive(Default, Clone, Copy, Debug, PartialEq)]
pub(super) struct Counts {
    pub(super) ios: u64,
    pub(super) bytes: u64,
    pub(super) clat_ns: u64,
}

impl Counts {
    pub(super) fn add(&mut self, clat_ns: u64, bytes: u32) {
        self.ios += 1;
        self.bytes += bytes as u64;
        self.clat_ns += clat_ns;
    }
}

impl Process {
    /// A process that has issued nothing yet, starting on `core`, issuing from `start_ns` until `end_ns` with
    /// statistics from `stats_start_ns`.
    pub(super) fn new(
        params: ProcessParams,
        source: IoSource,
        core: u32,
        start_ns: u64,
        stats_start_ns: u64,
        end_ns: u64,
        ramp_end: RampEnd,
    ) -> Self {
        Self {
            params,
            source,
            state: LoopState {
                core,
                busy_until_ns: 0,
                vruntime_ns: 0,
                preempting_until_ns: 0,
                inflight: 0,
                issued: 0,
                bytes_issued: 0,
                start_ns,
                stats_start_ns,
                end_ns,
                ramp: Ramp::starting(stats_start_ns > start_ns, ramp_end),
                issue_pending: false,
                submitting: false,
                dispatch_loops: 0,
                submit_after_dispatch: false,
                unreaped: Vec::new(),
                consumable: VecDeque::new(),
                queued: false,
                resched: false,
                tag_waits: 0,
                punted: VecDeque::new(),
                io_wq_free: Vec::new(),
                io_wq_started: 0,
                stopped: false,
                finished_ns: None,
            },
            stats: ProcessStats::default(),
        }
    }

    /// The writeback flusher: a kernel thread on any of `cores` cores, issuing asynchronous writes one at a time
    /// as the page cache's owner, with psync's path costs (`cost`), until the run ends at `end_ns`. It is not one
    /// of the processes whose end ends the run, so it counts as finished from the start.
    pub(super) fn flusher(cores: u32, cost: EngineCost, end_ns: u64) -> Self {
        let params = ProcessParams {
            job: FLUSHER_JOB,
            clone: 0,
            group: u32::MAX,
            allowed_cores: (0..cores).collect(),
            devices: Vec::new(),
            iodepth: 1,
            batch: 1,
            size_limit_bytes: 0,
            time_based: false,
            rate_period_ns: 0,
            thinktime_ns: 0,
            tag_wait: TagWait::Kernel,
            clat_after_call: false,
            task_work_at_submit: false,
            may_sleep_on_tags: false,
            cost,
            // The flusher's writes take the driver's submission-queue lock; it never sleeps for one.
            locks: PathLocks {
                submit: 1,
                ..PathLocks::default()
            },
            ioprio_class: IoprioClass::None,
            ioprio_level: 4,
            cgroup: 0,
            cgroup_weight: 100,
        };
        let mut flusher = Self::new(
            params,
            IoSource::default(),
            0,
            0,
            0,
            end_ns,
            RampEnd::default(),
        );
        flusher.state.stopped = true;
        flusher.state.finished_ns = Some(0);
        flusher
    }

    /// One of a job's processes (not the flusher).
    pub(super) fn is_job_process(&self) -> bool {
        self.params.job != FLUSHER_JOB
    }

    /// Asleep in its submission call, waiting for a request for one of its bios (`TagWait::Submitter`).
    pub(super) fn asleep_on_tag(&self) -> bool {
        self.params.tag_wait == TagWait::Submitter && self.state.tag_waits > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::host;

    #[test]
    fn submissions_fall_in_fios_depth_buckets() {
        // fio's io_u_mark_depth: 1 | 2-3 | 4-7 | 8-15 | 16-31 | 32-63 | 64 and more.
        let buckets: Vec<usize> = [1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 128]
            .iter()
            .map(|&d| depth_level(d))
            .collect();
        assert_eq!(buckets, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]);
        // io_u_submit: 0 | 1-4 | 5-8 | 9-16 | 17-32 | 33-64 | more.
        let batches: Vec<usize> = [0, 1, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65]
            .iter()
            .map(|&n| batch_level(n))
            .collect();
        assert_eq!(batches, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]);
    }

    #[test]
    fn the_flusher_is_made_like_any_process_but_belongs_to_no_job_and_starts_finished() {
        let flusher = Process::flusher(4, host(4).psync, 9_000);
        assert!(!flusher.is_job_process());
        assert_eq!(flusher.params.allowed_cores, vec![0, 1, 2, 3]);
        assert!(flusher.params.tag_wait == TagWait::Kernel);
        assert!(flusher.state.stopped && flusher.state.finished_ns == Some(0));
        assert_eq!((flusher.state.end_ns, flusher.state.inflight), (9_000, 0));
        assert!(flusher.source.generator.is_none() && flusher.source.buffered.is_none());
    }

    #[test]
    fn only_a_submitter_with_a_bio_waiting_for_a_request_sleeps_in_its_call() {
        let mut p = Process::flusher(1, host(1).psync, 0);
        p.state.tag_waits = 1;
        assert!(!p.asleep_on_tag(), "a kernel thread");
        p.params.tag_wait = TagWait::IoWqWorkers(4);
        assert!(
            !p.asleep_on_tag(),
            "io_uring's workers wait, not the submitter"
        );
        p.params.tag_wait = TagWait::Submitter;
        assert!(p.asleep_on_tag());
        p.state.tag_waits = 0;
        assert!(!p.asleep_on_tag());
    }
}
