//! I/O scheduler policies behind one trait modelled on the kernel's elevator operations.
//!
//! A policy owns the requests it has been given until it dispatches them. It has no clock, does no I/O and draws no
//! random numbers: the caller passes the time in. The same code is meant to drive the simulator and, later, a
//! userspace io_uring runtime, so nothing here may depend on simulator types.

pub mod bfq;
pub mod cfq;
pub mod id_map;
pub mod k2;
pub mod kernel;
pub mod kyber;
pub mod kyber_fairness;
pub mod legacy_deadline;
pub mod mq_deadline;
pub mod none;
pub mod noop;
mod registry;
pub mod sbitmap;
#[cfg(test)]
pub(crate) mod testkit;

pub use kernel::{KernelVersion, SchedTags};
pub use registry::{block_layers, by_name, scheduler, Kernel, Scheduler, REGISTRY, SCHEDULERS};

/// Sector size the kernel's block layer counts in.
pub const SECTOR_BYTES: u64 = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
    Discard,
    Flush,
}

/// I/O priority class as `ioprio_set(2)` defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoprioClass {
    None = 0,
    RealTime = 1,
    BestEffort = 2,
    Idle = 3,
}

impl IoprioClass {
    pub fn from_fio(prioclass: u32) -> Option<Self> {
        match prioclass {
            0 => Some(Self::None),
            1 => Some(Self::RealTime),
            2 => Some(Self::BestEffort),
            3 => Some(Self::Idle),
            _ => None,
        }
    }
}

/// A block request as a scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Caller's handle; returned unchanged on dispatch.
    pub id: u32,
    pub op: Op,
    pub sector: u64,
    pub nr_sectors: u32,
    /// CPU the request was submitted on, and the hardware queue that CPU maps to.
    pub cpu: u32,
    pub hctx: u32,
    pub ioprio_class: IoprioClass,
    pub ioprio_level: u8,
    /// Submitting process (BFQ keeps one queue per process) and its cgroup (0 = root).
    pub process: u32,
    pub cgroup: u32,
    pub cgroup_weight: u32,
    /// Synchronous (the submitter waits for it): direct reads and writes from fio are.
    pub sync: bool,
    /// When the request was allocated (Kyber's "total latency" starts here).
    pub start_ns: u64,
}

impl Request {
    /// The kernel's `op_is_write`: writes and discards.
    pub fn is_write(&self) -> bool {
        matches!(self.op, Op::Write | Op::Discard)
    }
    /// The kernel's `op_is_sync`: every read, and writes flagged synchronous (O_DIRECT and O_SYNC writes).
    pub fn is_sync(&self) -> bool {
        !self.is_write() || self.sync
    }
    /// `blk_mq_is_sync_read` (`op_is_sync && !op_is_write`): every read, readahead included, since a read is
    /// always sync to the kernel. The elevators never limit these.
    pub fn is_sync_read(&self) -> bool {
        !self.is_write()
    }
    pub fn end_sector(&self) -> u64 {
        self.sector + self.nr_sectors as u64
    }
    pub fn bytes(&self) -> u64 {
        self.nr_sectors as u64 * SECTOR_BYTES
    }
}

/// Which locks protect a policy's state in the kernel: the simulator charges hold time and spinning on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// No lock shared between CPUs (none: per-CPU and per-hctx state only, uncontended by construction).
    None,
    /// One lock per hardware queue (Kyber's hctx lock).
    PerHctx,
    /// One lock for the whole device (mq-deadline's dd->lock, BFQ's bfqd->lock, K2).
    Device,
}

/// Lock acquisitions by path (see [`Elevator::lock_acquisitions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockAcquisitions {
    /// Per bio entering the elevator: the bio merge attempt and the insert.
    pub submit: u32,
    /// Per call of the elevator's dispatch in a hardware-queue run, whether it returns a request or not (with a
    /// `has_work` that takes the lock, if the policy's does).
    pub dispatch: u32,
    /// Per completed request.
    pub complete: u32,
    /// Per bio entering the elevator: acquisitions of other locks than the one the hooks run under (BFQ's io
    /// context look-ups under the queue's `queue_lock`, Kyber's flush of a per-CPU queue), or holdings too short to
    /// book. Counted for the lock share only, as if never contended: not booked on any lock.
    pub submit_unbooked: u32,
}

/// The legacy request_queue's `queue_lock` per request, as every legacy elevator runs under it (Linux 4.19
/// block/blk-core.c, drivers/scsi/scsi_lib.c): submission takes it in `blk_queue_bio` for the merge attempt and
/// request allocation, and again when the plug is flushed to insert the request and run the queue
/// (`scsi_request_fn` dispatches under it); completion takes it in `scsi_end_request` → `blk_finish_request` and
/// again in `scsi_run_queue`.
pub const LEGACY_QUEUE_LOCK: LockAcquisitions = LockAcquisitions {
    submit: 2,
    dispatch: 0, // dispatch is part of the unplug's acquisition (the second on submission)
    complete: 2,
    submit_unbooked: 0,
};

/// One acquisition of one of the policy's inner locks (see [`Elevator::inner_locks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerLockUse {
    pub lock: u32,
}

/// What the caller should do after a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterCompletion {
    /// Re-run the hardware queue the request completed on: the policy kicks it (BFQ's and CFQ's dispatch
    /// scheduling, approximated as a run of that queue after every completion).
    RunQueue,
    /// Nothing of the policy's own (mq-deadline, Kyber: a freed Kyber token wakes its waiters separately, through
    /// `take_woken_hctxs`): blk-mq re-runs the hardware queue only if a run stopped there for want of a driver tag
    /// since (`blk_mq_sched_restart`, `BLK_MQ_S_SCHED_RESTART`).
    Restart,
    /// Re-run every hardware queue of the device (e.g. a device-wide bound was released).
    RunAllQueues,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunableError {
    Unknown {
        name: String,
        known: Vec<&'static str>,
    },
    OutOfRange {
        name: String,
        value: i64,
        expected: String,
    },
}

impl std::fmt::Display for TunableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TunableError::Unknown { name, known } if known.is_empty() => {
                write!(
                    f,
                    "unknown tunable {name:?}: this scheduler has no tunables"
                )
            }
            TunableError::Unknown { name, known } => {
                write!(
                    f,
                    "unknown tunable {name:?}: expected one of {}",
                    known.join(", ")
                )
            }
            TunableError::OutOfRange {
                name,
                value,
                expected,
            } => {
                write!(f, "tunable {name}={value}: expected {expected}")
            }
        }
    }
}

impl TunableError {
    /// `name=value` was rejected; `expected` is what the message says the tunable accepts.
    pub fn out_of_range(name: &str, value: i64, expected: impl Into<String>) -> Self {
        TunableError::OutOfRange {
            name: name.to_string(),
            value,
            expected: expected.into(),
        }
    }
}

/// `value` if it lies in `min..=max`, else [`TunableError::OutOfRange`] expecting "`min..=max`" followed by `unit`
/// (e.g. `" milliseconds"`, or `""`).
pub(crate) fn tunable_in_range(
    name: &str,
    value: i64,
    min: i64,
    max: i64,
    unit: &str,
) -> Result<i64, TunableError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(TunableError::out_of_range(
            name,
            value,
            format!("{min}..={max}{unit}"),
        ))
    }
}

/// A 0/1 switch: `value == 1`, or [`TunableError::OutOfRange`] expecting "0 or 1".
pub(crate) fn tunable_switch(name: &str, value: i64) -> Result<bool, TunableError> {
    match value {
        0 | 1 => Ok(value == 1),
        _ => Err(TunableError::out_of_range(name, value, "0 or 1")),
    }
}

/// lib/sbitmap.c `sbq_calc_wake_batch` for an sbitmap queue no shallow depth limits (Kyber's token pools): an eighth
/// (the number of wait queues) of the depth, 1 to 8 (SBQ_WAKE_BATCH), on every modelled version. The scheduler tags'
/// batch depends on the version and the elevator: [`kernel::sbq_calc_wake_batch`].
pub fn sbq_wake_batch(depth: u32) -> u32 {
    (depth / 8).clamp(1, 8)
}

/// The elevator interface. Calls mirror the kernel's `elevator_mq_ops`.
pub trait Elevator: Send {
    fn name(&self) -> &'static str;
    fn locking(&self) -> Locking;

    /// Whether the queue has an elevator attached (the kernel's `q->elevator`). Only `none` has not: its requests
    /// take driver tags directly (no scheduler tags, no `nr_requests`) and no scheduler hooks run, so a host's
    /// `scheduler_costs` need no entry for it.
    fn is_elevator(&self) -> bool {
        true
    }

    /// How many times the kernel's hooks take the lock of [`Elevator::locking`]: per bio on the submission path
    /// (bio merge attempt, insert), per dispatch call of a hardware-queue run (in whatever context runs the queue)
    /// and per request on the completion path. Under contention each acquisition is a separate hand-off of the lock
    /// and the data it protects between cores.
    fn lock_acquisitions(&self) -> LockAcquisitions {
        LockAcquisitions::default()
    }

    /// Try to merge a new bio into a request the policy holds (back or front merge of contiguous sectors, same
    /// operation, within `max_sectors`). On success the held request grows and its id is returned.
    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32>;

    fn insert(&mut self, rq: Request, now_ns: u64);

    /// Pick the next request for hardware queue `hctx`, or None.
    fn dispatch(&mut self, hctx: u32, now_ns: u64) -> Option<Request>;

    fn has_work(&self, hctx: u32) -> bool;

    /// Follow Linux `kernel` wherever the policy's behaviour differs between the modelled versions (see
    /// [`kernel::CHANGES`]); called right after construction, before any tunable is set. A policy built without it
    /// follows [`KernelVersion::NEWEST`].
    fn set_kernel_version(&mut self, _kernel: KernelVersion) {}

    /// The kernel's `limit_depth` hook for the request `rq` is about to be allocated as: the `shallow_depth` it
    /// gives the scheduler-tag allocation, in the kernel's units for the version (a depth per sbitmap word of
    /// `tags` before 6.17, a share of the whole set since: the block layer applies it as that version's sbitmap
    /// does), or None when it sets none. The allocation keeps this depth through every retry after sleeping, as
    /// `blk_mq_get_tag` does.
    fn limit_depth(&self, _rq: &Request, _tags: SchedTags) -> Option<u32> {
        None
    }

    /// The `min_shallow_depth` the elevator sets on its scheduler tags (`sbitmap_queue_min_shallow_depth`), which
    /// the tags' wake batch follows ([`kernel::sbq_calc_wake_batch`]); None: it sets none.
    fn min_shallow_depth(&self, _tags: SchedTags) -> Option<u32> {
        None
    }

    /// A dispatched request finished. `issue_ns` is when it went to the device.
    fn completed(&mut self, rq: &Request, issue_ns: u64, now_ns: u64) -> AfterCompletion;

    /// Hardware queues that waited for a resource of the policy (Kyber: a domain token) and were woken since the
    /// last call, appended to `into` in the order the kernel's wake-up callbacks run them. The caller runs each, as
    /// the callback does (`blk_mq_run_hw_queue`). A completion can wake some; call this after [`Elevator::completed`].
    fn take_woken_hctxs(&mut self, _into: &mut Vec<u32>) {}

    /// How many locks of its own the policy's hooks take besides the lock of [`Elevator::locking`], device-wide
    /// (Kyber: the spinlocks of its token pools' wait queues). Numbered from 0.
    fn inner_locks(&self) -> u32 {
        0
    }

    /// The inner locks the hooks took since the last call, in order, appended to `into`. The caller books each
    /// on the core that ran the hook (call this after [`Elevator::dispatch`] and [`Elevator::completed`]).
    fn take_inner_lock_uses(&mut self, _into: &mut Vec<InnerLockUse>) {}

    /// When the policy next wants `timer` called, if ever.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    fn timer(&mut self, _now_ns: u64) {}

    /// Current tunables by sysfs name and unit; by default there are none.
    fn tunables(&self) -> Vec<(&'static str, i64)> {
        Vec::new()
    }
    /// Set a tunable by sysfs name; by default every name is unknown ("this scheduler has no tunables").
    fn set_tunable(&mut self, name: &str, _value: i64) -> Result<(), TunableError> {
        Err(TunableError::Unknown {
            name: name.to_string(),
            known: Vec::new(),
        })
    }

    /// Internal state worth recording over time (e.g. Kyber's domain depths), by name.
    fn introspect(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    /// Keep the last `limit` [`SchedNote`]s of the decisions from now on (0: none, the default), for a traced
    /// run. Recording only: no decision may depend on it.
    fn record_notes(&mut self, _limit: usize) {}

    /// The notes kept so far, in the order they were made (which is time order); the policy keeps none after.
    fn take_notes(&mut self) -> Vec<SchedNote> {
        Vec::new()
    }
}

/// One decision of a policy about one of its queues, for a traced run: the events the kernel's BFQ logs through
/// the blk tracer (`bfq_log_bfqq`), so that a simulated run and a traced lab run can be counted alike (`iosched
/// trace-summary`). `process`: the queue's process (a sync queue's), `shared`: the queue serves several
/// processes (BFQ's stable merging), both as the kernel names a queue in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedNote {
    pub t_ns: u64,
    pub process: Option<u32>,
    pub shared: bool,
    pub kind: NoteKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// The queue got a request while it had none queued (bfq_add_bfqq_busy).
    Busy,
    /// It has none queued any more and left the busy set (bfq_del_bfqq_busy).
    Idle,
    /// It was put in service with this budget (sectors).
    InService { budget: u64 },
    /// It was expired: `reason` in the kernel's `enum bfqq_expiration` numbering (0 too idle, 1 budget timeout,
    /// 2 budget exhausted, 3 no more requests, 4 preempted), with `dispatched` of its requests in the driver.
    Expired { reason: u8, dispatched: u32 },
    /// A request of it went to the driver while it was in service and weight-raised by `coeff` (30: interactive,
    /// 3000: soft real-time), as the kernel logs its raising period on each such dispatch.
    RaisedDispatch { coeff: u32 },
    /// An allocation for it was over its share of the scheduler tags (bfqq_request_over_limit).
    OverLimit { allocated: u32, limit: u32 },
    /// The shallow depth an allocation got (bfq_limit_depth; 0: none, a sync read), with the number of busy
    /// weight-raised queues then.
    Depth {
        wr_busy: u32,
        sync: bool,
        depth: u32,
    },
}

/// Which block layer a scheduler runs on in Linux: the legacy single-queue `request_queue` (Linux <= 4.x, removed in
/// 5.0) or blk-mq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockLayer {
    Legacy,
    Mq,
}

impl BlockLayer {
    pub fn name(self) -> &'static str {
        match self {
            BlockLayer::Legacy => "legacy",
            BlockLayer::Mq => "blk-mq",
        }
    }
}

/// Back or front merge test shared by policies: same op, contiguous, within the size limit.
pub fn mergeable(held: &Request, bio: &Request, max_sectors: u32) -> Option<MergeSide> {
    if held.op != bio.op || held.op == Op::Flush || held.nr_sectors + bio.nr_sectors > max_sectors {
        return None;
    }
    if held.end_sector() == bio.sector {
        Some(MergeSide::Back)
    } else if bio.end_sector() == held.sector {
        Some(MergeSide::Front)
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeSide {
    Back,
    Front,
}

/// How many of a software queue's newest requests a bio may merge into (the kernel's blk_bio_list_merge tries 8).
pub const RECENT_MERGE_CANDIDATES: usize = 8;

/// Merge `bio` into one of the newest requests of `queue` (newest first), as blk_bio_list_merge does for a
/// per-CPU software queue. Returns the id of the request that grew.
pub fn merge_into_recent(
    queue: &mut std::collections::VecDeque<Request>,
    bio: &Request,
    max_sectors: u32,
) -> Option<u32> {
    for held in queue.iter_mut().rev().take(RECENT_MERGE_CANDIDATES) {
        if let Some(side) = mergeable(held, bio, max_sectors) {
            apply_merge(held, bio, side);
            return Some(held.id);
        }
    }
    None
}

/// Apply a merge decided by [`mergeable`].
pub fn apply_merge(held: &mut Request, bio: &Request, side: MergeSide) {
    if side == MergeSide::Front {
        held.sector = bio.sector;
    }
    held.nr_sectors += bio.nr_sectors;
}

/// The request hash of an elevator that keeps its held requests in a sector-sorted set of `(start sector, id)`:
/// the request nearest below `bio` that ends where `bio` starts (a back-merge candidate). `end_sector` gives a held
/// request's end.
pub(crate) fn hash_back_candidate(
    sorted: &std::collections::BTreeSet<(u64, u32)>,
    bio: &Request,
    end_sector: impl Fn(u32) -> u64,
) -> Option<u32> {
    sorted
        .range(..(bio.sector, 0))
        .rev()
        .map(|&(_, id)| id)
        .find(|&id| end_sector(id) == bio.sector)
}

/// The held requests in a sector-sorted set of `(start sector, id)` that start where `bio` ends (front-merge
/// candidates, as `deadline_merge` and `cfq_merge` look them up), in id order.
pub(crate) fn front_merge_candidates(
    sorted: &std::collections::BTreeSet<(u64, u32)>,
    bio: &Request,
) -> Vec<u32> {
    let end = bio.end_sector();
    sorted
        .range((end, 0)..=(end, u32::MAX))
        .map(|&(_, id)| id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_wake_batches_follow_each_elevators_smallest_shallow_depth_and_the_version() {
        let tags = SchedTags::new(256);
        let batch = |name: &str, version: &str| {
            let kernel = KernelVersion::parse(version).unwrap();
            let mut e = by_name(name, 1).unwrap();
            e.set_kernel_version(kernel);
            kernel::sbq_calc_wake_batch(kernel, 256, tags.shift, e.min_shallow_depth(tags))
        };
        // debugfs sched_tags on Linux 6.18 with nr_requests 256: kyber wake_batch=8, mq-deadline and bfq 1.
        assert_eq!(batch("kyber", "6.18"), 8);
        assert_eq!(batch("bfq", "6.18"), 1);
        assert_eq!(batch("mq-deadline", "6.18"), 1);
        assert_eq!(
            batch("none", "6.18"),
            8,
            "no shallow depth: 256 / 8, at most 8"
        );
        // Linux 6.3: mq-deadline's min_shallow_depth is async_depth (192, more than a 64-bit word): 8.
        assert_eq!(batch("mq-deadline", "6.3"), 8);
        assert_eq!(batch("bfq", "6.3"), 1, "BFQ sets 1 since 5.18");
        assert_eq!(
            batch("bfq", "5.2"),
            6,
            "BFQ's smallest word depth, 12 of 64: 48 / 8"
        );
        assert_eq!(batch("mq-deadline", "5.2"), 8, "no async_depth before 5.14");
        assert_eq!(sbq_wake_batch(16), 2);
        assert_eq!(sbq_wake_batch(4), 1);
    }

    #[test]
    fn reads_are_always_sync_and_writes_only_when_flagged() {
        let rq = |op, sync| Request {
            sync,
            ..crate::testkit::rq(0, op, 0, 8)
        };
        assert!(
            rq(Op::Read, false).is_sync_read(),
            "readahead is a sync read to the kernel"
        );
        assert!(rq(Op::Write, true).is_sync() && !rq(Op::Write, true).is_sync_read());
        assert!(!rq(Op::Write, false).is_sync());
        assert!(rq(Op::Discard, true).is_write());
    }
}
