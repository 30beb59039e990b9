//! `bfq`: Budget Fair Queueing, modelled on the Linux scheduler (block/bfq-iosched.c, block/bfq-wf2q.c).
//!
//! # What is modelled
//!
//! * **Queues.** One sync queue per (process, cgroup); async queues shared per (cgroup, ioprio class, level).
//!   **Stable merging** (5.13+, [`kernel::BFQ_STABLE_MERGE`]): a process whose first sync request reaches the
//!   device within 180 ms of the creation of its group's last created queue, with the same ioprio, joins that
//!   queue instead of getting its own (one queue, one weight, one share of the tags for all of them); the queue to
//!   join moves on to the next new queue created more than 600 ms after it. Processes that start I/O together,
//!   such as fio's numjobs clones, therefore share one queue; merged processes are never split again.
//!   Queue weight = (8 − level) × 10 (level clamped to 0..=7; class `None`, a process that set no priority, is best
//!   effort at level 4 as a nice-0 task is: weight 40, the one weight-raising requires; IDLE is level 7). Classes
//!   are served strictly RT > BE > IDLE, except that a waiting IDLE entity is served once every 200 ms.
//! * **B-WF2Q+.** Every group has one service tree per class with a virtual time V and a weight sum W. Δ(s, w) =
//!   s·2^22 / w. A newly busy entity gets S = V (S = max(V, F) if it was still on the idle tree), F = S + Δ(budget,
//!   w). The next entity is the one with the smallest F among those with S ≤ V; if none is eligible, V jumps to the
//!   smallest S. Every dispatched request advances V of each tree on its path by Δ(charge, W). An expired entity
//!   that still has work is requeued with S = S + Δ(service, w); one that has none keeps being counted in W (the
//!   "idle tree") until V passes its finish time. Async requests of non-raised queues are charged 3× their sectors
//!   in a symmetric scenario.
//! * **Groups.** Requests with `cgroup != 0` belong to a group that is an entity of the root group's BE tree,
//!   weighted by `cgroup_weight` (1..=1000). Only one level below the root is modelled (the simulator's cgroups are
//!   flat). Queues of cgroup 0 compete directly with the group entities in the root trees, as in the kernel.
//! * **Budgets** (sectors). `max_budget` 0 = automatic: 16384 until estimated from the peak rate × `timeout_sync`;
//!   min = max/32; a new queue starts at 2/3 of the max. Expiry reasons: budget exhausted, budget timeout
//!   (`timeout_sync`, × the raising coefficient for interactive queues), too idle (idle timer fired), no more
//!   requests, preempted. Feedback for sync non-raised queues: too idle → ×2 if requests still in flight, else −4·min
//!   (or min); timeout ×2; exhausted ×4 (both capped at the device max); no more requests → max(service, min);
//!   preemption leaves the budget alone. Async queues get the max, raised queues 2·min. Slow (seeky, or < max/2
//!   sectors in > 20 ms) and timed-out queues with ≥ 1/3 of the budget left are charged by time
//!   (max_budget × elapsed / timeout). A queue that expired without waiting and gets a request within
//!   3 × slice_idle keeps its unused budget and its place in virtual time (`non_blocking_wait_rq`).
//! * **Idling.** When the in-service sync queue empties it is kept (dispatch returns None or an injected request)
//!   if idling is needed: strict_guarantees, or a weight-raised queue while non-raised queues are busy (or ≥ 4 more
//!   requests of others in the driver), or an asymmetric scenario (different weights among the non-raised queues
//!   with pending I/O unless this queue has the smallest: raised queues stay out of the kernel's weights tree;
//!   several classes busy; several groups with pending I/O), or it is the only
//!   busy queue. Once its last request completes, the idle timer is armed for slice_idle (≥ 20 ms for raised queues,
//!   ≤ 2 ms for seeky queues in symmetric scenarios). A new request of the queue ends idling; the timer expiry
//!   expires the queue (too idle, or budget timeout). strict_guarantees: always idle, at most one request in the
//!   driver.
//! * **Injection** while idling: first the async queue of the same group and priority, then the first busy queue (in
//!   activation order) whose next request fits its budget, only while fewer than `inject_limit` requests are in the
//!   driver and (for ≥ 32 KiB requests) the driver is empty.
//! * **Weight raising** (low_latency): a sync queue with the default weight (40) that becomes busy with nothing in
//!   the driver more than 2 s after its last budget timeout or, later, after it last became idle (an expiry with
//!   nothing queued or the completion of its last request, as the kernel overloads `budget_timeout`;
//!   `bfq_bfqq_idle_for_long_time`; a queue never in service or idle counts as idle for long) and is not in a
//!   large burst (≥ 8 queues created within 180 ms of each other, with no busy queue at the start) is raised ×30 for
//!   clamp(2.5 s × 33000/peak rate, 3 s, 25 s) or until it received 120000 sectors; a queue that becomes busy
//!   again after `soft_rt_next_start` (its past rate below 7000 sectors/s, and not sooner than slice_idle + 4 ms
//!   after going idle) is raised ×3000 for 300 ms (then back to interactive raising if that period is still
//!   running). Raised queues may preempt the in-service queue. From 4.16 ([`kernel::BFQ_SOFTRT_PAST_IO`])
//!   `soft_rt_next_start` starts at the queue's creation and never moves back; from 5.12
//!   ([`kernel::BFQ_SOFTRT_AFTER_INTERACTIVE`]) it is computed for interactive queues too and reset to now when
//!   interactive raising ends, so a queue that stops being greedy turns soft real-time at once.
//! * **Request choice** within a queue: on the first dispatch of each service slot, the FIFO head if its deadline
//!   (fifo_expire_sync/async) passed; otherwise the request nearest after the device's last position, a backward
//!   seek within back_seek_max counting back_seek_penalty × its distance; "wrapped" requests last.
//!
//! # Simplifications (all deliberate; the simulator is the judge of whether they matter)
//!
//! * The device is assumed non-rotational with internal queueing (NVMe/SATA SSD), so BFQ's "idling boosts
//!   throughput" branch is always false; idling happens only for service guarantees.
//! * One level of groups; no per-group statistics, no group weight-raising. A group entity's budget is that of the
//!   queue that activated it (or of its first busy queue on requeue); it only affects the group's provisional
//!   finish time, while service is always charged exactly.
//! * Weight changes (raising starting/ending, ioprio or cgroup weight changes) take effect on the tree weight sum
//!   immediately rather than at the next (re)activation. A process's ioprio change is picked up only while its
//!   queue is not busy.
//! * The injection limit by version: before 5.2 a fixed one request in the driver (not read in those kernels); 5.2
//!   and 5.3 ([`kernel::BFQ_INJECT_LIMIT_BY_THINK_TIME`]) 0 for a queue with a short think time and 1 otherwise,
//!   never adapted (their baseline is never taken); from 5.4 ([`kernel::BFQ_ADAPTIVE_INJECTION`]) adapted from
//!   measured service times as 6.3 does, with two simplifications: a request is measured when its queue (not its
//!   process) has no other request allocated, and the limit's ceiling is the most requests ever seen in the driver
//!   (the kernel restarts that maximum once, when it detects the drive's queueing). No
//!   waker/wakee detection, no actuator awareness. Of queue merging only stable merging is modelled, in its
//!   non-rotational form (merged at once; the kernel delays it on rotational drives without queueing); no merging
//!   of cooperating (close-sector) queues, which the kernel skips on non-rotational drives with queueing since
//!   5.1, and no check that the queue to join still has a live process.
//! * The FIFO check follows the kernel's "once per service slot" rule but is done at dispatch, not when `next_rq` is
//!   recomputed; the next request is chosen among all queued requests of the queue against the device's last
//!   position (the kernel keeps a cached `next_rq` chosen among the two neighbours). A request arriving at a busy
//!   queue not in service that becomes its next resets the queue's budget to max(max_budget, its charge, service)
//!   (`bfq_updated_next_req`; "becomes its next": nearer than all the others here, nearer than the cached next in
//!   the kernel); the kernel also does so when the next request leaves (injection) or merges, the model does not.
//!   The group's budget follows when the queue is its group's only active child; the group's finish time follows
//!   only a smaller budget (`bfq_update_parent_budget` reports only a decrease upwards), so a group keeps the
//!   finish time of the budget its queue had when the group became active. Kernels older than the patch "block, bfq:
//!   always update the budget of an entity when needed" (August 2018, the 4.19-4.20 merge windows) did not even
//!   give a group its first queue's budget; the model gives every version the later behaviour (no seed runs BFQ
//!   with cgroups on an older kernel).
//! * Peak rate (`bfq_update_peak_rate`, `bfq_update_rate_reset`): dispatched sectors over observation intervals
//!   that close after 1 s, at a dispatch after 100 ms with nothing in the driver, or at a completion more than
//!   2 ms after the previous one that implies under 1/1024 sector per µs; an interval of ≥ 32 dispatches and
//!   ≥ 300 ms (extended to the last completion) updates the estimate through a low-pass filter (1/10 to 1/2 of
//!   the new rate, by how sequential and long it was) only if its rate is higher or ≥ 3/4 of its dispatches
//!   were sequential, so random workloads never lower it. It starts at 2/3 of the reference rate and feeds the
//!   automatic max_budget and the interactive raising duration. The rate is kept in floating point (the kernel:
//!   sectors per µs << 16). No rotational/queueing detection.
//! * Budget timeouts are checked lazily at dispatch, insert and completion, as in the kernel (no timer); the only
//!   timer is the idle slice. Time-based charging uses `timeout_sync` (the kernel uses the compile-time default).
//! * Jiffies are replaced by nanoseconds; "4 jiffies" in the soft real-time rule are taken as 4 ms (HZ = 1000).
//! * **Tag limits** (`limit_depth`, per the run's kernel version; the block layer applies the depth to the scheduler
//!   tags' sbitmap as that version does, per word before 6.17). None before 4.16 ([`kernel::BFQ_LIMIT_DEPTH`]).
//!   Then async requests get 1/2 and sync writes 3/4 of each word (3/16 and 6/16 while a weight-raised queue is
//!   busy); sync reads are not limited. From 5.18 ([`kernel::BFQ_REQUEST_OVER_LIMIT`], `bfqq_request_over_limit`)
//!   the requesting process's queue (and its group), if it is on a service tree or in service, may hold at most
//!   its weight's share of that limit (`limit × weight / W`, rounded, W the weight sum of its tree, higher classes
//!   counted 8× per class as the kernel does); a queue holding that many (allocated = inserted and not completed)
//!   allocates with shallow depth 1, so every such queue shares bit 0 of each word. That is what holds writers back
//!   behind a weight-raised reader: its raised weight (×30, soft real-time ×3000) makes W so large that every
//!   writer's share rounds to 0. From 6.17 ([`kernel::SBITMAP_WHOLE_SHALLOW_DEPTH`]) the fractions are of
//!   `nr_requests`. The tags' min_shallow_depth: the smallest word depth (4.18 to 5.17), 1 since 5.18.
//! * Queue runs after a completion: all hardware queues when nothing is left in the driver and requests are queued
//!   (`bfq_schedule_dispatch` at the end of `bfq_completed_request`, skipped while it idles), and also when the
//!   completion expired the in-service queue or none is in service with requests queued (the model's addition: a
//!   run the kernel leaves to the next insert or completion); otherwise only blk-mq's restart.
//! * Tunables are validated rather than clamped: out-of-range values are rejected (the kernel clamps).
//!   `max_budget` reads back the effective value, like sysfs (0 selects automatic tuning).

use crate::id_map::{DenseMap, IdMap};
use std::collections::BTreeMap;

use crate::kernel::{self, KernelVersion, SchedTags};
use crate::{
    apply_merge, mergeable, tunable_in_range, AfterCompletion, Elevator, IoprioClass,
    LockAcquisitions, Locking, NoteKind, Request, SchedNote, TunableError,
};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const WFQ_SERVICE_SHIFT: u32 = 22;
const DEFAULT_MAX_BUDGET: u64 = 16 * 1024;
const STATS_MIN_BUDGETS: u32 = 194;
const ASYNC_CHARGE_FACTOR: u64 = 3;
const CLASS_IDLE_TIMEOUT_NS: u64 = 200 * MS;
const MIN_TT_NS: u64 = 2 * MS;
const SEEK_THR_SECTORS: u64 = 8 * 100;
const SECT_THR_NONROT: u32 = 2 * 32;

const WR_COEFF: u32 = 30;
const SOFTRT_WEIGHT_FACTOR: u32 = 100;
const WR_RT_MAX_TIME_NS: u64 = 300 * MS;
const WR_MIN_IDLE_TIME_NS: u64 = 2000 * MS;
const WR_MAX_SOFTRT_RATE: u64 = 7000; // sectors per second
const MAX_SERVICE_FROM_WR: u64 = 120_000;
const BURST_INTERVAL_NS: u64 = 180 * MS;
/// bfq_activation_stable_merging: how long a queue stays the one new queues are merged into.
const STABLE_MERGE_WINDOW_NS: u64 = 600 * MS;
const LARGE_BURST_THRESH: u32 = 8;
const DEFAULT_WEIGHT: u32 = 40;
/// Reference rate (33000 in the kernel's sectors/µs << 16) and interactive raising duration of a non-rotational
/// device.
const REF_RATE_SECT_PER_NS: f64 = 33000.0 / 65536.0 / 1000.0;
const REF_WR_DURATION_NS: f64 = 2500.0 * MS as f64;
const RATE_MIN_SAMPLES: u32 = 32;
const RATE_MIN_INTERVAL_NS: u64 = 300 * MS;
const RATE_REF_INTERVAL_NS: u64 = 1000 * MS;
/// Rates above 20 sectors per µs are discarded as measurement errors.
const MAX_RATE_SECT_PER_NS: f64 = 20.0 / 1000.0;
const INJECT_LIMIT: u32 = 1;

const CLASS_RT: usize = 0;
const CLASS_BE: usize = 1;
const CLASS_IDLE: usize = 2;

/// BFQ_RQ_SEEKY on a non-rotational device: farther than 800 sectors from `last_pos` and smaller than 32 KiB.
/// `get_sdist` gives no distance from position 0 (nothing recorded yet), so a queue's first request is not seeky;
/// the kernel starts every queue's seek history at 1 for it instead ("almost certainly seeky").
fn rq_seeky(last_pos: u64, rq: &Request) -> bool {
    let dist = if last_pos == 0 {
        0
    } else {
        rq.sector.abs_diff(last_pos)
    };
    dist > SEEK_THR_SECTORS && rq.nr_sectors < SECT_THR_NONROT
}

fn delta(service: u64, weight: u64) -> u64 {
    (((service as u128) << WFQ_SERVICE_SHIFT) / weight.max(1) as u128) as u64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not in any tree and not counted in the weight sum.
    Off,
    /// Backlogged, waiting in its tree.
    Active,
    /// Done, but still counted in the weight sum until V passes its finish time.
    Idle,
    /// Being served (out of the active set, counted in the weight sum).
    InService,
}

#[derive(Debug, Clone)]
struct Entity {
    start: u64,
    finish: u64,
    budget: u64,
    service: u64,
    weight: u32,
    state: State,
    /// Requests of this queue (or of this group's queues) inserted and not yet completed (`entity->allocated`).
    allocated: u32,
}

impl Entity {
    fn new(weight: u32) -> Self {
        Self {
            start: 0,
            finish: 0,
            budget: 0,
            service: 0,
            weight,
            state: State::Off,
            allocated: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntityId {
    Queue(usize),
    Group(usize),
}

#[derive(Debug, Default, Clone)]
struct Tree {
    vtime: u64,
    wsum: u64,
    active: Vec<EntityId>,
    idle: Vec<EntityId>,
}

struct Group {
    cgroup: u32,
    ent: Entity,
    trees: [Tree; 3],
    in_service: Option<EntityId>,
    idle_class_last_service: u64,
    pending_queues: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum QueueKey {
    Sync {
        process: u32,
        cgroup: u32,
    },
    Async {
        cgroup: u32,
        class: usize,
        level: u8,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    TooIdle,
    BudgetTimeout,
    BudgetExhausted,
    NoMoreRequests,
    Preempted,
}

struct Queued {
    rq: Request,
    deadline_ns: u64,
}

struct Queue {
    sync: bool,
    class: usize,
    level: u8,
    orig_weight: u32,
    group: usize,
    ent: Entity,
    /// Queued requests in arrival (FIFO) order.
    rqs: Vec<Queued>,
    busy: bool,
    dispatched: u32,
    max_budget: u64,
    /// When the current (or last) service slot's budget times out, or, as the kernel overloads the field, when the
    /// queue last became idle (no request queued, none in the driver: at an expiry or at the completion of its last
    /// request); None until then (the kernel's `bfq_smallest_from_now()`: long past).
    budget_timeout_at: Option<u64>,
    wait_request: bool,
    fifo_checked: bool,
    non_blocking_wait_rq: bool,
    just_created: bool,
    last_end_request: u64,
    ttime_samples: u64,
    ttime_total: u64,
    ttime_mean: u64,
    seek_history: u32,
    last_request_pos: u64,
    wr_coeff: u32,
    wr_cur_max_time: u64,
    last_wr_start_finish: u64,
    wr_start_at_switch_to_srt: Option<u64>,
    service_from_wr: u64,
    soft_rt_next_start: Option<u64>,
    last_idle_bklogged: u64,
    service_from_backlogged: u64,
    softrt_update: bool,
    in_large_burst: bool,
    /// Busy or with requests in the driver (the kernel's groups-with-pending-requests count).
    pending: bool,
    /// The weight this queue is counted with in the weights tree (`queue_weights_tree`), if it is.
    counted_weight: Option<u32>,
    /// Processes whose sync I/O this queue serves (more than 1 once stably merged).
    processes: u32,
    /// The process that created it (a sync queue's), for the trace's notes.
    owner: Option<u32>,
    /// Adaptive injection (5.2+): requests other queues may have in the driver while this one is in service and
    /// waits, the baseline total service time of its request with nothing injected (0: not measured), and when
    /// the limit was last lowered or reset (None: never).
    inject_limit: u32,
    last_serv_time_ns: u64,
    decrease_time_ns: Option<u64>,
    /// The think-time class last seen on insertion (the kernel's has_short_ttime flag; sync queues start short).
    short_ttime: bool,
}

impl Queue {
    fn budget_left(&self) -> u64 {
        self.ent.budget.saturating_sub(self.ent.service)
    }
    fn seeky(&self) -> bool {
        self.seek_history.count_ones() > 19
    }
    fn totally_seeky(&self) -> bool {
        self.seek_history == u32::MAX
    }
}

/// Tunables by sysfs name.
#[derive(Debug, Clone)]
struct Tunables {
    fifo_expire_sync_ns: u64,
    fifo_expire_async_ns: u64,
    back_seek_max_kib: u64,
    back_seek_penalty: u64,
    slice_idle_ns: u64,
    user_max_budget: u64,
    timeout_ns: u64,
    strict_guarantees: bool,
    low_latency: bool,
}

impl Default for Tunables {
    fn default() -> Self {
        Self {
            fifo_expire_sync_ns: 125 * MS,
            fifo_expire_async_ns: 250 * MS,
            back_seek_max_kib: 16 * 1024,
            back_seek_penalty: 2,
            slice_idle_ns: 8 * MS,
            user_max_budget: 0,
            timeout_ns: 125 * MS,
            strict_guarantees: false,
            low_latency: true,
        }
    }
}

const TUNABLE_NAMES: &[&str] = &[
    "fifo_expire_sync",
    "fifo_expire_async",
    "back_seek_max",
    "back_seek_penalty",
    "slice_idle",
    "slice_idle_us",
    "max_budget",
    "timeout_sync",
    "strict_guarantees",
    "low_latency",
];

pub struct Bfq {
    t: Tunables,
    queues: Vec<Queue>,
    queue_index: IdMap<QueueKey, usize>,
    groups: Vec<Group>,
    group_index: IdMap<u32, usize>,
    /// Busy queues in activation order (the kernel's active list, used for injection).
    busy_list: Vec<usize>,
    busy_per_class: [u32; 3],
    in_service: Option<usize>,
    in_driver: DenseMap<usize>,
    tot_in_driver: u32,
    /// The most requests seen in the driver (the kernel's max_rq_in_driver), the injection limit's ceiling.
    max_in_driver: u32,
    /// Adaptive injection's measurement (5.2+): the in-service queue's request whose total service time is being
    /// measured (dispatched, or to be: `wait_dispatch`), since when, and whether I/O was injected meanwhile.
    waited_rq: Option<u32>,
    wait_dispatch: bool,
    last_empty_occupied_ns: u64,
    rqs_injected: bool,
    queued: usize,
    idle_timer_at: Option<u64>,
    last_idling_start: u64,
    last_budget_start: u64,
    last_position: u64,
    budgets_assigned: u32,
    max_budget: u64,
    /// Weights of queues with pending I/O (queued or in flight) → how many.
    pending_weights: BTreeMap<u32, u32>,
    groups_with_pending: u32,
    // Peak rate estimation.
    peak_rate: f64,
    /// The observation interval (bfq_update_peak_rate): its first dispatch, its dispatched sectors, samples and
    /// sequential samples (0 samples: none open), the largest request of its last 32 dispatches, and its length
    /// at its last sample.
    rate_first_dispatch_ns: u64,
    rate_sectors: u64,
    rate_samples: u32,
    rate_seq_samples: u32,
    rate_max_rq_sectors: u32,
    rate_delta_from_first_ns: u64,
    last_dispatch_ns: u64,
    last_completion_ns: u64,
    // Burst detection.
    burst_size: u32,
    large_burst: bool,
    last_ins_in_burst: Option<u64>,
    burst_list: Vec<usize>,
    burst_parent: usize,
    kernel: KernelVersion,
    /// Allocations `limit_depth` found over their queue's share (given depth 1), for introspection.
    over_limit: std::cell::Cell<u64>,
    /// A traced run's notes of the decisions (`Elevator::record_notes`; at most `notes_limit`, none when 0) and the
    /// time of the latest call, which stamps them.
    notes: std::cell::RefCell<Vec<SchedNote>>,
    notes_limit: usize,
    /// Once `notes_limit` notes are kept, where the oldest is (the next to give way: the run's last notes stay).
    notes_oldest: std::cell::Cell<usize>,
    clock_ns: std::cell::Cell<u64>,
    /// Stable merging (5.13+): per group, the queue new sync queues may be merged into and when it was created
    /// (the kernel's `last_bfqq_created`).
    last_created: IdMap<usize, (usize, u64)>,
    /// Processes whose queue was merged into another's, for introspection.
    stably_merged: u64,
}

impl Default for Bfq {
    fn default() -> Self {
        Self::new()
    }
}

impl Bfq {
    pub fn new() -> Self {
        let root = Group {
            cgroup: 0,
            ent: Entity::new(100),
            trees: Default::default(),
            in_service: None,
            idle_class_last_service: 0,
            pending_queues: 0,
        };
        Self {
            t: Tunables::default(),
            queues: Vec::new(),
            queue_index: IdMap::default(),
            groups: vec![root],
            group_index: IdMap::from_iter([(0, 0)]),
            busy_list: Vec::new(),
            busy_per_class: [0; 3],
            in_service: None,
            in_driver: DenseMap::default(),
            tot_in_driver: 0,
            max_in_driver: 0,
            waited_rq: None,
            wait_dispatch: false,
            last_empty_occupied_ns: 0,
            rqs_injected: false,
            queued: 0,
            idle_timer_at: None,
            last_idling_start: 0,
            last_budget_start: 0,
            last_position: 0,
            budgets_assigned: 0,
            max_budget: DEFAULT_MAX_BUDGET,
            pending_weights: BTreeMap::new(),
            groups_with_pending: 0,
            peak_rate: REF_RATE_SECT_PER_NS * 2.0 / 3.0,
            rate_first_dispatch_ns: 0,
            rate_sectors: 0,
            rate_samples: 0,
            rate_seq_samples: 0,
            rate_max_rq_sectors: 0,
            rate_delta_from_first_ns: 0,
            last_dispatch_ns: 0,
            last_completion_ns: 0,
            burst_size: 0,
            large_burst: false,
            last_ins_in_burst: None,
            burst_list: Vec::new(),
            burst_parent: 0,
            kernel: KernelVersion::NEWEST,
            over_limit: std::cell::Cell::new(0),
            notes: std::cell::RefCell::new(Vec::new()),
            notes_limit: 0,
            notes_oldest: std::cell::Cell::new(0),
            clock_ns: std::cell::Cell::new(0),
            last_created: IdMap::default(),
            stably_merged: 0,
        }
    }

    /// `entity->allocated` of queue `q` and of its group goes up (insert) or down (completion).
    fn count_allocated(&mut self, q: usize, up: bool) {
        let g = self.queues[q].group;
        let step = |n: &mut u32| *n = if up { *n + 1 } else { *n - 1 };
        step(&mut self.queues[q].ent.allocated);
        if g != 0 {
            step(&mut self.groups[g].ent.allocated);
        }
    }

    /// Keep a note of a decision about queue `q` (None: about no queue) in a traced run, stamped with the time of
    /// the latest call.
    #[inline]
    fn note(&self, q: Option<usize>, kind: NoteKind) {
        if self.notes_limit != 0 {
            self.push_note(q, kind);
        }
    }

    #[cold]
    #[inline(never)]
    fn push_note(&self, q: Option<usize>, kind: NoteKind) {
        let (process, shared) = q.map_or((None, false), |q| {
            let qq = &self.queues[q];
            (qq.owner, qq.processes > 1)
        });
        let note = SchedNote {
            t_ns: self.clock_ns.get(),
            process,
            shared,
            kind,
        };
        let mut notes = self.notes.borrow_mut();
        if notes.len() < self.notes_limit {
            notes.push(note);
        } else {
            let oldest = self.notes_oldest.get();
            notes[oldest] = note;
            self.notes_oldest.set((oldest + 1) % self.notes_limit);
        }
    }

    /// bfqq_request_over_limit (5.18+): whether the queue `rq` would join, or its group, holds at least its weight's
    /// share of `limit` requests. Only a queue that exists and is on a service tree or in service (as is every
    /// entity above it) can be over; each level scales the limit by weight / weight sum of its tree (for the queue:
    /// the trees of its class and the higher ones, each higher class counted 8× more, IOPRIO_BE_NR).
    fn request_over_limit(&self, rq: &Request, limit: u32) -> bool {
        let Some(&q) = self.queue_index.get(&Self::key_of(rq)) else {
            return false; // no queue yet: the kernel's bic has none either
        };
        let qq = &self.queues[q];
        let g = qq.group;
        if qq.ent.state == State::Off || (g != 0 && self.groups[g].ent.state == State::Off) {
            return false;
        }
        let round = |x: u64, d: u64| (x + d / 2) / d; // DIV_ROUND_CLOSEST
        let mut limit = limit as u64;
        if g != 0 {
            let group = &self.groups[g].ent;
            let wsum = self.groups[0].trees[CLASS_BE].wsum;
            if wsum > 0 {
                limit = round(limit * group.weight as u64, wsum);
                if group.allocated as u64 >= limit {
                    self.note(
                        Some(q),
                        NoteKind::OverLimit {
                            allocated: group.allocated,
                            limit: limit as u32,
                        },
                    );
                    return true;
                }
            }
        }
        let wsum = (0..=qq.class).fold(0u64, |w, c| w * 8 + self.groups[g].trees[c].wsum);
        if wsum == 0 {
            return false;
        }
        limit = round(limit * qq.ent.weight as u64, wsum);
        let over = qq.ent.allocated as u64 >= limit;
        if over {
            self.note(
                Some(q),
                NoteKind::OverLimit {
                    allocated: qq.ent.allocated,
                    limit: limit as u32,
                },
            );
        }
        over
    }

    // ---------------------------------------------------------------- budgets and parameters

    /// The max budget as the kernel's bfq_max_budget(): the default until enough budgets were assigned.
    fn stats_max_budget(&self) -> u64 {
        if self.budgets_assigned < STATS_MIN_BUDGETS {
            DEFAULT_MAX_BUDGET
        } else {
            self.max_budget
        }
    }

    fn min_budget(&self) -> u64 {
        (self.stats_max_budget() / 32).max(1)
    }

    fn calc_max_budget(&self) -> u64 {
        ((self.peak_rate * self.t.timeout_ns as f64) as u64).max(32)
    }

    fn wr_duration(&self) -> u64 {
        let d = REF_RATE_SECT_PER_NS * REF_WR_DURATION_NS / self.peak_rate.max(1e-12);
        (d as u64).clamp(3000 * MS, 25000 * MS)
    }

    fn charge(&self, q: usize, rq: &Request) -> u64 {
        let qq = &self.queues[q];
        let sectors = rq.nr_sectors as u64;
        if qq.sync || qq.wr_coeff > 1 || self.asymmetric_scenario(q) {
            sectors
        } else {
            sectors * ASYNC_CHARGE_FACTOR
        }
    }

    // ---------------------------------------------------------------- queues and groups

    fn group_for(&mut self, cgroup: u32, weight: u32) -> usize {
        let weight = weight.clamp(1, 1000);
        if let Some(&g) = self.group_index.get(&cgroup) {
            if g != 0 && self.groups[g].ent.weight != weight {
                self.set_weight(EntityId::Group(g), weight);
            }
            return g;
        }
        let g = self.groups.len();
        self.groups.push(Group {
            cgroup,
            ent: Entity::new(weight),
            trees: Default::default(),
            in_service: None,
            idle_class_last_service: 0,
            pending_queues: 0,
        });
        self.group_index.insert(cgroup, g);
        g
    }

    /// bfq_set_next_ioprio_data: a process that set no I/O priority (class NONE, fio's default) is best effort at
    /// the level its nice value gives (`task_nice_ioprio`: 4 for nice 0, and the simulator has no nice), whatever
    /// level the request carries; the IDLE class is always level 7.
    fn class_and_level(rq: &Request) -> (usize, u8) {
        match rq.ioprio_class {
            IoprioClass::RealTime => (CLASS_RT, rq.ioprio_level.min(7)),
            IoprioClass::BestEffort => (CLASS_BE, rq.ioprio_level.min(7)),
            IoprioClass::None => (CLASS_BE, 4),
            IoprioClass::Idle => (CLASS_IDLE, 7),
        }
    }

    fn key_of(rq: &Request) -> QueueKey {
        if rq.sync {
            QueueKey::Sync {
                process: rq.process,
                cgroup: rq.cgroup,
            }
        } else {
            let (class, level) = Self::class_and_level(rq);
            QueueKey::Async {
                cgroup: rq.cgroup,
                class,
                level,
            }
        }
    }

    fn queue_for(&mut self, rq: &Request, now: u64) -> usize {
        let key = Self::key_of(rq);
        let (class, level) = Self::class_and_level(rq);
        let g = self.group_for(rq.cgroup, rq.cgroup_weight);
        if let Some(&q) = self.queue_index.get(&key) {
            let qq = &self.queues[q];
            if qq.processes > 1 && (qq.class != class || qq.level != level) {
                // A process of a shared queue changed its ioprio: it leaves for a queue of its own (the kernel
                // drops the bic's sync queue on an ioprio change and creates a new one).
                self.queues[q].processes -= 1;
                self.queue_index.remove(&key);
                return self.queue_for(rq, now);
            }
            if !qq.busy && (qq.class != class || qq.level != level) {
                // ioprio change: applied while the queue is not busy. Leave the old class's idle tree first.
                let e = EntityId::Queue(q);
                if self.ent(e).state == State::Idle {
                    let w = self.ent(e).weight as u64;
                    let tree = self.tree_mut(e);
                    tree.idle.retain(|&x| x != e);
                    tree.wsum -= w;
                    self.ent_mut(e).state = State::Off;
                }
                let qq = &mut self.queues[q];
                qq.class = class;
                qq.level = level;
                qq.orig_weight = (8 - level as u32) * 10;
                self.apply_queue_weight(q);
            }
            return q;
        }
        if rq.sync && self.kernel.has(&kernel::BFQ_STABLE_MERGE) {
            // bfq_do_or_sched_stable_merge: a new sync queue created within the burst interval of the group's
            // last created queue, with the same ioprio, is merged into it at once (the device is non-rotational
            // with queueing: no delayed merge); the last created queue moves on only after 600 ms (or on a
            // different ioprio).
            match self.last_created.get(&g) {
                Some(&(head, created))
                    if now <= created + STABLE_MERGE_WINDOW_NS
                        && self.queues[head].class == class
                        && self.queues[head].level == level =>
                {
                    if now <= created + BURST_INTERVAL_NS {
                        self.queues[head].processes += 1;
                        self.stably_merged += 1;
                        self.queue_index.insert(key, head);
                        return head;
                    }
                }
                _ => {
                    self.last_created.insert(g, (self.queues.len(), now));
                }
            }
        }
        let orig_weight = (8 - level as u32) * 10;
        let soft_rt_from_creation = self.kernel.has(&kernel::BFQ_SOFTRT_PAST_IO);
        let q = self.queues.len();
        let max_budget = 2 * self.stats_max_budget() / 3;
        self.queues.push(Queue {
            sync: rq.sync,
            class,
            level,
            orig_weight,
            group: g,
            ent: Entity::new(orig_weight),
            rqs: Vec::new(),
            busy: false,
            dispatched: 0,
            max_budget,
            budget_timeout_at: None,
            wait_request: false,
            fifo_checked: false,
            non_blocking_wait_rq: false,
            just_created: true,
            last_end_request: 0,
            ttime_samples: 0,
            ttime_total: 0,
            ttime_mean: 0,
            seek_history: 1, // bfq_init_bfqq: "first request is almost certainly seeky"
            last_request_pos: 0,
            wr_coeff: 1,
            wr_cur_max_time: 0,
            last_wr_start_finish: now,
            wr_start_at_switch_to_srt: None,
            service_from_wr: 0,
            soft_rt_next_start: soft_rt_from_creation.then_some(now),
            last_idle_bklogged: 0,
            service_from_backlogged: 0,
            softrt_update: false,
            in_large_burst: false,
            pending: false,
            counted_weight: None,
            owner: rq.sync.then_some(rq.process),
            processes: 1,
            inject_limit: 0,
            last_serv_time_ns: 0,
            decrease_time_ns: None,
            short_ttime: rq.sync && class != CLASS_IDLE,
        });
        self.queue_index.insert(key, q);
        q
    }

    fn ent(&self, e: EntityId) -> &Entity {
        match e {
            EntityId::Queue(q) => &self.queues[q].ent,
            EntityId::Group(g) => &self.groups[g].ent,
        }
    }

    fn ent_mut(&mut self, e: EntityId) -> &mut Entity {
        match e {
            EntityId::Queue(q) => &mut self.queues[q].ent,
            EntityId::Group(g) => &mut self.groups[g].ent,
        }
    }

    /// (group holding the entity's tree, class of the tree).
    fn tree_of(&self, e: EntityId) -> (usize, usize) {
        match e {
            EntityId::Queue(q) => (self.queues[q].group, self.queues[q].class),
            EntityId::Group(_) => (0, CLASS_BE),
        }
    }

    fn tree_mut(&mut self, e: EntityId) -> &mut Tree {
        let (g, c) = self.tree_of(e);
        &mut self.groups[g].trees[c]
    }

    /// Keep the bookkeeping behind `asymmetric_scenario` in step with a queue's pending state and weight. A queue
    /// with pending I/O (busy, or requests in the driver) counts in its group's pending queues whatever its weight;
    /// in the weights tree only while it is not weight-raised: the kernel adds a queue there only with wr_coeff 1
    /// (`bfq_add_bfqq_busy`, and `__bfq_entity_update_weight_prio` when the weight changes), so raised weights never
    /// make the queues' weights "varied".
    fn refresh_pending(&mut self, q: usize) {
        let qq = &self.queues[q];
        let pending = qq.busy || qq.dispatched > 0;
        let want = (pending && qq.wr_coeff == 1).then_some(qq.ent.weight);
        let (had, was_pending, g) = (qq.counted_weight, qq.pending, qq.group);
        if want != had {
            if let Some(w) = had {
                let n = self.pending_weights.get_mut(&w).expect("counted weight");
                *n -= 1;
                if *n == 0 {
                    self.pending_weights.remove(&w);
                }
            }
            if let Some(w) = want {
                *self.pending_weights.entry(w).or_insert(0) += 1;
            }
            self.queues[q].counted_weight = want;
        }
        if pending != was_pending {
            let group = &mut self.groups[g];
            if pending {
                if group.pending_queues == 0 {
                    self.groups_with_pending += 1;
                }
                group.pending_queues += 1;
            } else {
                group.pending_queues -= 1;
                if group.pending_queues == 0 {
                    self.groups_with_pending -= 1;
                }
            }
            self.queues[q].pending = pending;
        }
    }

    fn set_weight(&mut self, e: EntityId, w: u32) {
        let old = self.ent(e).weight;
        if old == w {
            return;
        }
        if self.ent(e).state != State::Off {
            let tree = self.tree_mut(e);
            tree.wsum = tree.wsum - old as u64 + w as u64;
        }
        self.ent_mut(e).weight = w;
    }

    fn apply_queue_weight(&mut self, q: usize) {
        let w = self.queues[q].orig_weight * self.queues[q].wr_coeff;
        self.set_weight(EntityId::Queue(q), w);
        self.refresh_pending(q);
    }

    // ---------------------------------------------------------------- B-WF2Q+

    fn forget_idle(&mut self, g: usize, c: usize) {
        let tree = &self.groups[g].trees[c];
        if tree.idle.is_empty() {
            return;
        }
        let vtime = tree.vtime;
        let idle = std::mem::take(&mut self.groups[g].trees[c].idle);
        let mut keep = Vec::with_capacity(idle.len());
        for e in idle {
            if self.ent(e).finish > vtime {
                keep.push(e);
            } else {
                let w = self.ent(e).weight as u64;
                self.ent_mut(e).state = State::Off;
                self.groups[g].trees[c].wsum -= w;
            }
        }
        self.groups[g].trees[c].idle = keep;
    }

    /// Insert an entity that was off or on the idle tree into its active tree.
    fn activate(&mut self, e: EntityId, non_blocking: bool) {
        let (g, c) = self.tree_of(e);
        let vtime = self.groups[g].trees[c].vtime;
        let ent = self.ent(e).clone();
        let (mut min_vstart, mut backshifted) = (vtime, false);
        if non_blocking && vtime > ent.finish {
            min_vstart = ent.finish;
            backshifted = true;
        }
        let start = match ent.state {
            State::Idle => {
                self.groups[g].trees[c].idle.retain(|&x| x != e);
                min_vstart.max(ent.finish)
            }
            State::Off => {
                self.groups[g].trees[c].wsum += ent.weight as u64;
                min_vstart
            }
            State::Active | State::InService => return,
        };
        let mut finish = start + delta(ent.budget, ent.weight as u64);
        let mut start = start;
        if backshifted && vtime > finish {
            // bfq_update_fin_time_enqueue pushes a backshifted queue up to V, a raised one only 1/wr_coeff of the
            // way (so that its backshifted finish stays below those of queues not raised).
            let wr_coeff = match e {
                EntityId::Queue(q) => self.queues[q].wr_coeff as u64,
                EntityId::Group(_) => 1,
            };
            let d = (vtime - finish) / wr_coeff;
            start += d;
            finish += d;
        }
        let ent = self.ent_mut(e);
        ent.start = start;
        ent.finish = finish;
        ent.state = State::Active;
        self.groups[g].trees[c].active.push(e);
    }

    /// Put the in-service entity back into its active tree after its slot, charged with the service it received.
    fn requeue_in_service(&mut self, e: EntityId) {
        let ent = self.ent_mut(e);
        ent.start += delta(ent.service, ent.weight as u64);
        ent.finish = ent.start + delta(ent.budget, ent.weight as u64);
        ent.state = State::Active;
        self.tree_mut(e).active.push(e);
    }

    /// Take an entity out of the active set (or out of service). `into_idle`: keep it counted until V passes F.
    fn deactivate(&mut self, e: EntityId, into_idle: bool) {
        let (g, c) = self.tree_of(e);
        let was = self.ent(e).state;
        match was {
            State::Off | State::Idle => return,
            State::Active => self.groups[g].trees[c].active.retain(|&x| x != e),
            State::InService => {}
        }
        let ent = self.ent_mut(e);
        // __bfq_deactivate_entity charges only the entity in service with what it received; one that waited in
        // its tree (a queue emptied by injection, a group whose last queue left) keeps the finish time of its
        // activation, S + budget / weight, and so its place when it comes back before V passes it.
        if was == State::InService {
            ent.finish = ent.start + delta(ent.service, ent.weight as u64);
        }
        let (finish, weight) = (ent.finish, ent.weight as u64);
        let tree = &mut self.groups[g].trees[c];
        if into_idle && finish > tree.vtime {
            tree.idle.push(e);
            self.ent_mut(e).state = State::Idle;
        } else {
            tree.wsum -= weight;
            self.ent_mut(e).state = State::Off;
        }
    }

    fn group_has_backlog(&self, g: usize) -> bool {
        self.groups[g].trees.iter().any(|t| !t.active.is_empty())
            || self.groups[g].in_service.is_some()
    }

    /// The next entity of group `g` per B-WF2Q+, or None. May move V forward (the jump to the smallest start).
    fn lookup_next(&mut self, g: usize, now: u64) -> Option<EntityId> {
        let idle_first = !self.groups[g].trees[CLASS_IDLE].active.is_empty()
            && now >= self.groups[g].idle_class_last_service + CLASS_IDLE_TIMEOUT_NS;
        let order: [usize; 3] = if idle_first {
            [CLASS_IDLE, CLASS_RT, CLASS_BE]
        } else {
            [CLASS_RT, CLASS_BE, CLASS_IDLE]
        };
        for c in order {
            if self.groups[g].trees[c].active.is_empty() {
                continue;
            }
            let min_start = self.groups[g].trees[c]
                .active
                .iter()
                .map(|&e| self.ent(e).start)
                .min()
                .unwrap();
            if min_start > self.groups[g].trees[c].vtime {
                self.groups[g].trees[c].vtime = min_start;
                self.forget_idle(g, c);
            }
            let vtime = self.groups[g].trees[c].vtime;
            let mut best: Option<(u64, EntityId)> = None;
            for &e in &self.groups[g].trees[c].active {
                let ent = self.ent(e);
                if ent.start <= vtime && best.is_none_or(|(f, _)| ent.finish < f) {
                    best = Some((ent.finish, e));
                }
            }
            if c == CLASS_IDLE {
                self.groups[g].idle_class_last_service = now;
            }
            return best.map(|(_, e)| e);
        }
        None
    }

    /// Walk down from the root choosing entities; the leaf is the next queue to serve.
    fn get_next_queue(&mut self, now: u64) -> Option<usize> {
        if self.busy_list.is_empty() {
            return None;
        }
        let mut g = 0;
        loop {
            let e = self.lookup_next(g, now)?;
            self.tree_mut(e).active.retain(|&x| x != e);
            let ent = self.ent_mut(e);
            ent.state = State::InService;
            ent.service = 0;
            self.groups[g].in_service = Some(e);
            match e {
                EntityId::Group(h) => g = h,
                EntityId::Queue(q) => return Some(q),
            }
        }
    }

    /// Charge `served` sectors to a queue and every tree on its path.
    fn served(&mut self, q: usize, served: u64) {
        let qq = &mut self.queues[q];
        if qq.wr_coeff > 1 {
            qq.service_from_wr += served;
        }
        qq.service_from_backlogged += served;
        let mut e = EntityId::Queue(q);
        loop {
            self.ent_mut(e).service += served;
            let (g, c) = self.tree_of(e);
            let tree = &mut self.groups[g].trees[c];
            tree.vtime += delta(served, tree.wsum);
            self.forget_idle(g, c);
            if g == 0 {
                break;
            }
            e = EntityId::Group(g);
        }
    }

    /// A busy queue becomes active in its tree, and its group in the root tree if needed.
    fn add_busy(&mut self, q: usize) {
        self.note(Some(q), NoteKind::Busy);
        let non_blocking = self.queues[q].non_blocking_wait_rq;
        self.activate(EntityId::Queue(q), non_blocking);
        self.queues[q].non_blocking_wait_rq = false;
        let qq = &mut self.queues[q];
        qq.busy = true;
        let (g, class, budget) = (qq.group, qq.class, qq.ent.budget);
        self.busy_per_class[class] += 1;
        self.busy_list.push(q);
        if g != 0 && matches!(self.groups[g].ent.state, State::Off | State::Idle) {
            self.groups[g].ent.budget = budget;
            self.activate(EntityId::Group(g), false);
        }
        self.refresh_pending(q);
    }

    fn del_busy(&mut self, q: usize, into_idle: bool) {
        self.note(Some(q), NoteKind::Idle);
        self.deactivate(EntityId::Queue(q), into_idle);
        let qq = &mut self.queues[q];
        qq.busy = false;
        let (g, class) = (qq.group, qq.class);
        self.busy_per_class[class] -= 1;
        self.busy_list.retain(|&x| x != q);
        if g != 0 && self.groups[g].ent.state == State::Active && !self.group_has_backlog(g) {
            self.deactivate(EntityId::Group(g), into_idle);
        }
        self.refresh_pending(q);
    }

    // ---------------------------------------------------------------- idling decisions

    fn asymmetric_scenario(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        let smallest = qq.counted_weight.is_some()
            && self.pending_weights.keys().next() == qq.counted_weight.as_ref();
        let varied_weights = !smallest && self.pending_weights.len() > 1;
        let classes_busy = self.busy_per_class.iter().filter(|&&n| n > 0).count();
        varied_weights || classes_busy > 1 || self.groups_with_pending > 1
    }

    fn wr_busy_queues(&self) -> usize {
        self.busy_list
            .iter()
            .filter(|&&q| self.queues[q].wr_coeff > 1)
            .count()
    }

    fn idling_needed_for_service_guarantees(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        let busy = self.busy_list.len();
        (qq.wr_coeff > 1
            && (self.wr_busy_queues() < busy || self.tot_in_driver >= qq.dispatched + 4))
            || self.asymmetric_scenario(q)
            || busy == 1
    }

    fn better_to_idle(&self, q: usize) -> bool {
        if self.t.strict_guarantees {
            return true;
        }
        let qq = &self.queues[q];
        if self.t.slice_idle_ns == 0 || !qq.sync || qq.class == CLASS_IDLE {
            return false;
        }
        // On a non-rotational device with internal queueing idling never "boosts throughput".
        self.idling_needed_for_service_guarantees(q)
    }

    fn must_idle(&self, q: usize) -> bool {
        self.queues[q].rqs.is_empty() && self.better_to_idle(q)
    }

    fn has_short_ttime(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        !(qq.sync
            && self.t.slice_idle_ns > 0
            && qq.ttime_samples > 80
            && qq.ttime_mean > self.t.slice_idle_ns / 2)
    }

    fn budget_timed_out(&self, q: usize, now: u64) -> bool {
        self.queues[q].budget_timeout_at.is_none_or(|t| now > t)
    }

    /// Whether `span` has passed since the queue's last budget timeout or, later, since it last became idle (a
    /// queue never in service or idle: yes), as `bfq_bfqq_idle_for_long_time` reads the overloaded field.
    fn long_past_budget_timeout(&self, q: usize, now: u64, span: u64) -> bool {
        self.queues[q]
            .budget_timeout_at
            .is_none_or(|t| now > t + span)
    }

    fn may_expire_for_budget_timeout(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        (!qq.wait_request || qq.budget_left() >= qq.ent.budget / 3) && self.budget_timed_out(q, now)
    }

    fn arm_slice_timer(&mut self, q: usize, now: u64) {
        let qq = &self.queues[q];
        let mut sl = self.t.slice_idle_ns;
        if qq.seeky() && qq.wr_coeff == 1 && !self.asymmetric_scenario(q) {
            sl = sl.min(MIN_TT_NS);
        } else if qq.wr_coeff > 1 {
            sl = sl.max(20 * MS);
        }
        self.last_idling_start = now;
        self.queues[q].wait_request = true;
        self.idle_timer_at = Some(now + sl);
    }

    // ---------------------------------------------------------------- service slots

    fn set_in_service(&mut self, q: usize, now: u64) {
        self.budgets_assigned = (self.budgets_assigned * 7 + 256) / 8;
        let qq = &mut self.queues[q];
        qq.fifo_checked = false;
        qq.wait_request = false;
        let coeff = if qq.wr_coeff > 1 && qq.wr_cur_max_time != WR_RT_MAX_TIME_NS {
            qq.wr_coeff as u64
        } else {
            1
        };
        qq.budget_timeout_at = Some(now + self.t.timeout_ns * coeff);
        self.last_budget_start = now;
        self.in_service = Some(q);
        let budget = self.queues[q].ent.budget;
        self.note(Some(q), NoteKind::InService { budget });
    }

    fn is_slow(&self, q: usize, compensate: bool, now: u64) -> (bool, u64) {
        let qq = &self.queues[q];
        let mut slow = qq.seeky();
        if !qq.sync {
            return (false, 0);
        }
        let end = if compensate {
            self.last_idling_start
        } else {
            now
        };
        let elapsed = end.saturating_sub(self.last_budget_start);
        if elapsed < MS {
            return (slow, MIN_TT_NS);
        }
        if elapsed > 20 * MS {
            slow = qq.ent.service < self.max_budget / 2;
        }
        (slow, elapsed / MS * MS)
    }

    fn charge_time(&mut self, q: usize, elapsed_ns: u64) {
        let timeout = self.t.timeout_ns.max(1);
        let bounded = elapsed_ns.min(timeout);
        let for_time = (self.max_budget as u128 * bounded as u128 / timeout as u128) as u64;
        let ent = &mut self.queues[q].ent;
        let total = for_time.max(ent.service);
        if total > ent.budget {
            ent.budget = total;
        }
        let extra = total - ent.service;
        if extra > 0 {
            self.served(q, extra);
        }
    }

    fn recalc_budget(&mut self, q: usize, reason: Expiry, now: u64) {
        let min_budget = self.min_budget();
        let device_max = self.max_budget;
        let qq = &self.queues[q];
        let mut budget = if qq.wr_coeff == 1 {
            qq.max_budget
        } else {
            2 * min_budget
        };
        if qq.sync && qq.wr_coeff == 1 {
            budget = match reason {
                Expiry::TooIdle => {
                    if qq.dispatched > 0 {
                        (budget * 2).min(device_max)
                    } else if budget > 5 * min_budget {
                        budget - 4 * min_budget
                    } else {
                        min_budget
                    }
                }
                Expiry::BudgetTimeout => (budget * 2).min(device_max),
                Expiry::BudgetExhausted => (budget * 4).min(device_max),
                Expiry::NoMoreRequests => qq.ent.service.max(min_budget),
                Expiry::Preempted => return,
            };
        } else if !qq.sync {
            budget = device_max;
        }
        let mut new_max = budget;
        if self.budgets_assigned >= STATS_MIN_BUDGETS && self.t.user_max_budget == 0 {
            new_max = new_max.min(device_max);
        }
        self.queues[q].max_budget = new_max;
        if let Some(i) = self.peek_rq(q, now) {
            let charge = self.charge(q, &self.queues[q].rqs[i].rq);
            self.queues[q].ent.budget = new_max.max(charge);
        }
    }

    /// End the in-service queue's slot.
    fn expire(&mut self, q: usize, compensate: bool, reason: Expiry, now: u64) {
        // The kernel's enum bfqq_expiration numbering, as its log prints it.
        let code = match reason {
            Expiry::TooIdle => 0,
            Expiry::BudgetTimeout => 1,
            Expiry::BudgetExhausted => 2,
            Expiry::NoMoreRequests => 3,
            Expiry::Preempted => 4,
        };
        let dispatched = self.queues[q].dispatched;
        self.note(
            Some(q),
            NoteKind::Expired {
                reason: code,
                dispatched,
            },
        );
        debug_assert_eq!(self.in_service, Some(q));
        let (slow, elapsed) = self.is_slow(q, compensate, now);
        {
            let qq = &self.queues[q];
            if qq.wr_coeff == 1
                && (slow
                    || (reason == Expiry::BudgetTimeout && qq.budget_left() >= qq.ent.budget / 3))
            {
                self.charge_time(q, elapsed);
            }
        }
        if self.t.low_latency && self.queues[q].wr_coeff == 1 {
            self.queues[q].last_wr_start_finish = now;
        }
        let interactive = self.queues[q].wr_coeff == WR_COEFF;
        if self.t.low_latency
            && self.queues[q].rqs.is_empty()
            && (!interactive || self.kernel.has(&kernel::BFQ_SOFTRT_AFTER_INTERACTIVE))
        {
            if self.queues[q].dispatched == 0 {
                self.queues[q].soft_rt_next_start = Some(self.softrt_next_start(q, now));
            } else {
                self.queues[q].softrt_update = true;
            }
        }
        self.recalc_budget(q, reason, now);

        // Requeue or deactivate the queue, then its group.
        let g = self.queues[q].group;
        let keep = !self.queues[q].rqs.is_empty()
            || (reason == Expiry::Preempted && self.idling_needed_for_service_guarantees(q));
        self.groups[g].in_service = None;
        if keep {
            self.requeue_in_service(EntityId::Queue(q));
        } else {
            if self.queues[q].dispatched == 0 {
                // __bfq_bfqq_expire: the time the queue became idle, for "idle for long".
                self.queues[q].budget_timeout_at = Some(now);
            }
            self.del_busy(q, true);
        }
        if g != 0 {
            self.groups[0].in_service = None;
            let ge = EntityId::Group(g);
            if self.group_has_backlog(g) {
                let next_budget = self.groups[g]
                    .trees
                    .iter()
                    .flat_map(|t| t.active.first())
                    .next()
                    .map(|&e| self.ent(e).budget)
                    .unwrap_or(self.groups[g].ent.budget);
                self.groups[g].ent.budget = next_budget;
                self.requeue_in_service(ge);
            } else {
                self.deactivate(ge, true);
            }
        }
        self.in_service = None;
        self.queues[q].wait_request = false;
        self.idle_timer_at = None;
        if !self.queues[q].busy
            && reason != Expiry::BudgetTimeout
            && reason != Expiry::BudgetExhausted
        {
            self.queues[q].non_blocking_wait_rq = true;
        }
    }

    fn softrt_next_start(&self, q: usize, now: u64) -> u64 {
        let qq = &self.queues[q];
        let by_rate =
            qq.last_idle_bklogged + qq.service_from_backlogged * 1_000_000_000 / WR_MAX_SOFTRT_RATE;
        let soonest = now + self.t.slice_idle_ns + 4 * MS;
        let computed = by_rate.max(soonest);
        if self.kernel.has(&kernel::BFQ_SOFTRT_PAST_IO) {
            computed.max(qq.soft_rt_next_start.unwrap_or(0))
        } else {
            computed
        }
    }

    fn end_wr(&mut self, q: usize, now: u64) {
        let forget_bandwidth = self.kernel.has(&kernel::BFQ_SOFTRT_AFTER_INTERACTIVE);
        let qq = &mut self.queues[q];
        if forget_bandwidth && qq.wr_cur_max_time != WR_RT_MAX_TIME_NS {
            // Interactive raising ends: the bandwidth it consumed is forgotten (5.12+).
            qq.soft_rt_next_start = Some(now);
        }
        qq.wr_coeff = 1;
        qq.wr_cur_max_time = 0;
        qq.last_wr_start_finish = now;
        self.apply_queue_weight(q);
    }

    fn update_wr_data(&mut self, q: usize, now: u64) {
        if self.queues[q].wr_coeff == 1 {
            return;
        }
        let wr_duration = self.wr_duration();
        let qq = &self.queues[q];
        if qq.in_large_burst {
            self.end_wr(q, now);
        } else if now > qq.last_wr_start_finish + qq.wr_cur_max_time {
            let soft_rt = qq.wr_cur_max_time == WR_RT_MAX_TIME_NS;
            match qq.wr_start_at_switch_to_srt {
                Some(at) if soft_rt && now <= at + wr_duration => {
                    // Back to the interactive raising period the soft real-time one interrupted.
                    let qq = &mut self.queues[q];
                    qq.wr_coeff = WR_COEFF;
                    qq.wr_cur_max_time = wr_duration;
                    qq.last_wr_start_finish = at;
                    self.apply_queue_weight(q);
                }
                _ => self.end_wr(q, now),
            }
        }
        let qq = &self.queues[q];
        if qq.wr_coeff > 1
            && qq.wr_cur_max_time != WR_RT_MAX_TIME_NS
            && qq.service_from_wr > MAX_SERVICE_FROM_WR
        {
            self.end_wr(q, now);
        }
    }

    // ---------------------------------------------------------------- request choice

    /// Index of the request the queue would dispatch next.
    fn peek_rq(&self, q: usize, now: u64) -> Option<usize> {
        let qq = &self.queues[q];
        let head = qq.rqs.first()?;
        if !qq.fifo_checked && now >= head.deadline_ns && self.in_service == Some(q) {
            return Some(0);
        }
        let last = self.last_position;
        let back_max = self.t.back_seek_max_kib * 2;
        let penalty = self.t.back_seek_penalty;
        // Smaller key wins: forward or short backward seeks by (weighted) distance, higher sector on ties; then
        // wrapped requests, lowest sector first.
        let key = |r: &Request| -> (u8, u64, u64) {
            let s = r.sector;
            if s >= last {
                (0, s - last, u64::MAX - s)
            } else if s + back_max >= last {
                (0, (last - s).saturating_mul(penalty), u64::MAX - s)
            } else {
                (1, s, 0)
            }
        };
        qq.rqs
            .iter()
            .enumerate()
            .min_by_key(|(i, x)| (key(&x.rq), *i))
            .map(|(i, _)| i)
    }

    // ---------------------------------------------------------------- arrival side

    /// bfq_updated_next_req, on the arrival of a request that becomes the next of a busy queue not in service (in
    /// the kernel's bfq_add_request, bfq_choose_req between the cached next request and the new one; here the new one
    /// against the best of the others, as `peek_rq` chooses): the queue's budget becomes max(max_budget, the next
    /// request's charge, service), and its finish time follows the new budget; its group's budget too if the queue
    /// is the group's only active child, the group's finish time only if that budget shrank. That is how a
    /// weight-raised queue not yet served gets its max_budget (2/3 of the device's, initially) in place of the
    /// 2 x min_budget raising gave it, as the lab's 6.12 shows (docs/kmod.md).
    /// Not done on removals and merges (the kernel calls it there too).
    fn updated_next_req(&mut self, q: usize, now: u64) {
        let qq = &self.queues[q];
        let newest = qq.rqs.len() - 1;
        let new_budget = qq
            .max_budget
            .max(self.charge(q, &qq.rqs[newest].rq))
            .max(qq.ent.service);
        if new_budget == qq.ent.budget
            || qq.ent.state != State::Active
            || self.peek_rq(q, now) != Some(newest)
        {
            return;
        }
        let ent = &mut self.queues[q].ent;
        ent.budget = new_budget;
        ent.finish = ent.start + delta(new_budget, ent.weight as u64);
        let g = self.queues[q].group;
        let only_child = self.groups[g]
            .trees
            .iter()
            .map(|t| t.active.len())
            .sum::<usize>()
            == 1;
        if g != 0 && only_child && self.groups[g].ent.state == State::Active {
            // bfq_update_parent_budget: the group takes its next queue's budget, but only a smaller one reports a
            // change upwards and repositions the group (S + budget / w); a larger one leaves the group's finish time
            // where its activation put it. The lab's traced 6.12 serves the four groups of the Fig. 4 spec in the
            // order only that gives (docs/kmod.md).
            let ge = &mut self.groups[g].ent;
            let shrinks = new_budget < ge.budget;
            ge.budget = new_budget;
            if shrinks {
                ge.finish = ge.start + delta(new_budget, ge.weight as u64);
            }
        }
    }

    fn update_ttime_and_seek(&mut self, q: usize, rq: &Request, now: u64) {
        let slice_idle = self.t.slice_idle_ns;
        let qq = &mut self.queues[q];
        if qq.sync && !qq.busy && qq.dispatched == 0 && !qq.just_created {
            let elapsed = now.saturating_sub(qq.last_end_request).min(2 * slice_idle);
            qq.ttime_samples = (7 * qq.ttime_samples + 256) / 8;
            qq.ttime_total = (7 * qq.ttime_total + 256 * elapsed) / 8;
            qq.ttime_mean = (qq.ttime_total + 128) / qq.ttime_samples.max(1);
        }
        qq.seek_history = (qq.seek_history << 1) | rq_seeky(qq.last_request_pos, rq) as u32;
        qq.last_request_pos = rq.end_sector();
    }

    fn handle_burst(&mut self, q: usize, now: u64) {
        if self.queues[q].in_large_burst {
            return;
        }
        let g = self.queues[q].group;
        if self
            .last_ins_in_burst
            .is_none_or(|t| now > t + BURST_INTERVAL_NS)
            || g != self.burst_parent
        {
            self.large_burst = false;
            self.burst_list.clear();
            self.burst_list.push(q);
            self.burst_size = 1;
            self.burst_parent = g;
        } else if self.large_burst {
            self.queues[q].in_large_burst = true;
        } else {
            self.burst_size += 1;
            if self.burst_size >= LARGE_BURST_THRESH {
                self.large_burst = true;
                for &b in &self.burst_list {
                    self.queues[b].in_large_burst = true;
                }
                self.queues[q].in_large_burst = true;
                self.burst_list.clear();
            } else {
                self.burst_list.push(q);
            }
        }
        self.last_ins_in_burst = Some(now);
    }

    /// A queue with no requests gets one: weight raising decisions, budget, activation, maybe preemption.
    fn idle_busy_switch(&mut self, q: usize, now: u64) {
        let idle_for_long = self.queues[q].dispatched == 0
            && self.long_past_budget_timeout(q, now, WR_MIN_IDLE_TIME_NS);
        let idle_for_very_long = self.long_past_budget_timeout(q, now, 10_000 * MS);
        let qq = &self.queues[q];
        let arrived_in_time = now <= qq.last_end_request + 3 * self.t.slice_idle_ns;
        let in_burst = qq.in_large_burst;
        let default_weight = qq.orig_weight == DEFAULT_WEIGHT;
        let soft_rt = !qq.totally_seeky()
            && !in_burst
            && qq.soft_rt_next_start.is_some_and(|t| now > t)
            && qq.dispatched == 0
            && default_weight;
        let interactive = !in_burst && idle_for_long && default_weight;
        let wr_or_deserves =
            self.t.low_latency && (qq.wr_coeff > 1 || (qq.sync && (interactive || soft_rt)));
        let old_wr_coeff = qq.wr_coeff;

        // Budget for the activation (non_blocking_wait_rq: continue the previous slot's leftover).
        let wants_to_preempt = {
            let left = qq.budget_left();
            let max_budget = qq.max_budget;
            if qq.non_blocking_wait_rq && arrived_in_time && left > 0 {
                let qq = &mut self.queues[q];
                qq.ent.budget = left.min(max_budget);
                qq.ent.service = 0;
                true
            } else {
                let charge = self.charge(q, &self.queues[q].rqs[0].rq);
                let qq = &mut self.queues[q];
                qq.ent.service = 0;
                qq.ent.budget = max_budget.max(charge);
                qq.non_blocking_wait_rq = false;
                false
            }
        };

        let qq = &mut self.queues[q];
        if !qq.just_created && idle_for_long && idle_for_very_long {
            qq.in_large_burst = false;
        }
        qq.just_created = false;

        if self.t.low_latency {
            let wr_duration = self.wr_duration();
            let two_min = 2 * self.min_budget();
            let qq = &mut self.queues[q];
            if old_wr_coeff == 1 && wr_or_deserves {
                if interactive {
                    qq.service_from_wr = 0;
                    qq.wr_coeff = WR_COEFF;
                    qq.wr_cur_max_time = wr_duration;
                } else {
                    qq.wr_start_at_switch_to_srt = None;
                    qq.wr_coeff = WR_COEFF * SOFTRT_WEIGHT_FACTOR;
                    qq.wr_cur_max_time = WR_RT_MAX_TIME_NS;
                }
                qq.last_wr_start_finish = now;
                qq.ent.budget = qq.ent.budget.min(two_min);
            } else if old_wr_coeff > 1 {
                if interactive {
                    qq.wr_coeff = WR_COEFF;
                    qq.wr_cur_max_time = wr_duration;
                } else if in_burst {
                    qq.wr_coeff = 1;
                } else if soft_rt {
                    if qq.wr_cur_max_time != WR_RT_MAX_TIME_NS {
                        qq.wr_start_at_switch_to_srt = Some(qq.last_wr_start_finish);
                        qq.wr_cur_max_time = WR_RT_MAX_TIME_NS;
                        qq.wr_coeff = WR_COEFF * SOFTRT_WEIGHT_FACTOR;
                    }
                    qq.last_wr_start_finish = now;
                }
            }
            self.apply_queue_weight(q);
        }

        let qq = &mut self.queues[q];
        qq.last_idle_bklogged = now;
        qq.service_from_backlogged = 0;
        qq.softrt_update = false;
        self.add_busy(q);

        if let Some(inq) = self.in_service {
            if inq != q
                && ((wants_to_preempt && self.queues[q].wr_coeff >= self.queues[inq].wr_coeff)
                    || self.higher_class_or_weight(q, inq)
                    || !self.better_to_idle(inq))
                && !self.groups[0].trees.iter().all(|t| t.active.is_empty())
            {
                self.expire(inq, false, Expiry::Preempted, now);
            }
        }
    }

    fn higher_class_or_weight(&self, q: usize, inq: usize) -> bool {
        let (a, b) = (&self.queues[q], &self.queues[inq]);
        if a.class < b.class {
            return true;
        }
        let weight_at_root = |x: &Queue| {
            if x.group == 0 {
                x.ent.weight
            } else {
                self.groups[x.group].ent.weight
            }
        };
        if a.group == b.group {
            a.ent.weight > b.ent.weight
        } else {
            weight_at_root(a) > weight_at_root(b)
        }
    }

    // ---------------------------------------------------------------- dispatch side

    /// The kernel's bfq_select_queue: the queue to dispatch from (the in-service one or one to inject from).
    fn select_queue(&mut self, now: u64) -> Option<usize> {
        let mut guard = 2 * self.busy_list.len() + 8;
        let mut current = self.in_service;
        if let Some(q) = current {
            if self.may_expire_for_budget_timeout(q, now) && !self.must_idle(q) {
                self.expire(q, false, Expiry::BudgetTimeout, now);
                current = None;
            }
        }
        loop {
            guard -= 1;
            if guard == 0 {
                return None;
            }
            let q = match current {
                Some(q) => q,
                None => {
                    let q = self.get_next_queue(now)?;
                    self.set_in_service(q, now);
                    q
                }
            };
            if let Some(i) = self.peek_rq(q, now) {
                let charge = self.charge(q, &self.queues[q].rqs[i].rq);
                if charge > self.queues[q].budget_left() {
                    self.expire(q, false, Expiry::BudgetExhausted, now);
                    current = None;
                    continue;
                }
                if self.queues[q].wait_request {
                    self.queues[q].wait_request = false;
                    self.idle_timer_at = None;
                }
                return Some(q);
            }
            let qq = &self.queues[q];
            if qq.wait_request || (qq.dispatched > 0 && self.better_to_idle(q)) {
                return self.choose_injection(q, now);
            }
            self.expire(q, false, Expiry::NoMoreRequests, now);
            current = None;
        }
    }

    fn fits_budget(&self, c: usize, now: u64) -> Option<&Request> {
        let i = self.peek_rq(c, now)?;
        let rq = &self.queues[c].rqs[i].rq;
        (self.charge(c, rq) <= self.queues[c].budget_left()).then_some(rq)
    }

    fn choose_injection(&mut self, inq: usize, now: u64) -> Option<usize> {
        let per_queue_limit = self.kernel.has(&kernel::BFQ_INJECT_LIMIT_BY_THINK_TIME);
        let adaptive = self.kernel.has(&kernel::BFQ_ADAPTIVE_INJECTION);
        if !per_queue_limit && self.tot_in_driver >= INJECT_LIMIT {
            return None;
        }
        let iq = &self.queues[inq];
        // The async queue of the same group and priority (the kernel's bic->bfqq[0]).
        let async_key = QueueKey::Async {
            cgroup: self.groups[iq.group].cgroup,
            class: iq.class,
            level: iq.level,
        };
        if let Some(&a) = self.queue_index.get(&async_key) {
            if a != inq && self.queues[a].busy && self.fits_budget(a, now).is_some() {
                return Some(a);
            }
        }
        let always = iq.wr_coeff == 1 || !self.has_short_ttime(inq);
        if !(always || self.wr_busy_queues() > 1) {
            return None;
        }
        // bfq_choose_bfqq_for_injection: with no baseline yet and idling for a slice_idle already, one request.
        let mut limit = iq.inject_limit;
        let waited_long = limit == 0
            && iq.last_serv_time_ns == 0
            && iq.wait_request
            && now >= self.last_idling_start + self.t.slice_idle_ns;
        if waited_long {
            limit = 1;
        }
        if per_queue_limit && self.tot_in_driver >= limit {
            return None;
        }
        let small_limit = iq.inject_limit; // 5.2-5.3: small requests against the queue's own limit
        let mut chosen = None;
        for &c in &self.busy_list {
            if c == inq || !(always || self.queues[c].wr_coeff > 1) {
                continue;
            }
            if let Some(rq) = self.fits_budget(c, now) {
                if rq.nr_sectors >= SECT_THR_NONROT && self.tot_in_driver >= 1 {
                    continue;
                }
                if per_queue_limit
                    && !adaptive
                    && rq.nr_sectors < SECT_THR_NONROT
                    && self.tot_in_driver >= small_limit
                {
                    continue;
                }
                chosen = Some(c);
                break;
            }
        }
        if chosen.is_some() {
            self.rqs_injected = true;
        }
        chosen
    }

    /// bfq_reset_inject_limit: forget the baseline; a queue with a short think time starts by injecting nothing.
    fn reset_inject_limit(&mut self, q: usize, now: u64) {
        let short = self.has_short_ttime(q);
        let qq = &mut self.queues[q];
        qq.last_serv_time_ns = 0;
        qq.inject_limit = if short { 0 } else { 1 };
        qq.decrease_time_ns = Some(now);
        self.waited_rq = None;
    }

    /// bfq_add_request's part of adaptive injection (5.2+), for a request of a sync queue with no other request
    /// allocated (the kernel asks that of the process, `bic->requests`): reset the limit every second, and start
    /// measuring this request's total service time when the queue is in service and either the driver is empty
    /// (a baseline) or injected requests are in it (the effect of the current limit), at most every 10 ms after a
    /// decrease.
    fn start_service_time_sample(&mut self, q: usize, now: u64) {
        if !self.kernel.has(&kernel::BFQ_INJECT_LIMIT_BY_THINK_TIME) {
            return;
        }
        let adaptive = self.kernel.has(&kernel::BFQ_ADAPTIVE_INJECTION);
        let qq = &self.queues[q];
        if !qq.sync || qq.class == CLASS_IDLE {
            return;
        }
        if adaptive && self.t.slice_idle_ns > 0 {
            // bfq_update_has_short_ttime: a change of think-time class resets a limit that has no baseline yet.
            let short = self.has_short_ttime(q);
            let qq = &mut self.queues[q];
            let changed = short != qq.short_ttime;
            qq.short_ttime = short;
            if changed
                && qq.last_serv_time_ns == 0
                && (qq.decrease_time_ns.is_none_or(|t| now >= t + 100 * MS) || !short)
            {
                self.reset_inject_limit(q, now);
            }
        }
        let qq = &self.queues[q];
        // 5.4+ asks that the process have no other request (bic->requests, here the queue's allocated); 5.2-5.3 that
        // the queue had none queued.
        let alone = if adaptive {
            qq.ent.allocated <= 1
        } else {
            qq.rqs.len() <= 1
        };
        if !alone {
            return;
        }
        if qq.decrease_time_ns.is_none_or(|t| now >= t + 1000 * MS) {
            self.reset_inject_limit(q, now);
        }
        if !adaptive {
            return; // 5.2-5.3 sample too, but their baseline is never taken (BFQ_INJECT_LIMIT_BY_THINK_TIME)
        }
        let qq = &self.queues[q];
        let occasion = self.tot_in_driver == 0
            || (qq.last_serv_time_ns > 0 && self.rqs_injected && self.tot_in_driver > 0);
        if self.in_service == Some(q)
            && occasion
            && qq.decrease_time_ns.is_none_or(|t| now >= t + 10 * MS)
        {
            self.last_empty_occupied_ns = now;
            self.wait_dispatch = true;
            if self.tot_in_driver == 0 {
                self.rqs_injected = false;
            }
        }
    }

    /// bfq_update_inject_limit: the measured request of queue `q` completed (still counted in the driver). Injection
    /// that kept its total service time under 1.5x the baseline raises the limit by one (up to the most requests
    /// seen in the driver), injection that did not lowers it; a first or lower measurement becomes the baseline.
    fn update_inject_limit(&mut self, q: usize, now: u64) {
        let tot_time = now.saturating_sub(self.last_empty_occupied_ns);
        let (in_driver, max_in_driver, injected) =
            (self.tot_in_driver, self.max_in_driver, self.rqs_injected);
        let qq = &mut self.queues[q];
        let old_limit = qq.inject_limit;
        if qq.last_serv_time_ns > 0 && injected {
            let threshold = qq.last_serv_time_ns * 3 / 2;
            if tot_time >= threshold && old_limit > 0 {
                qq.inject_limit -= 1;
                qq.decrease_time_ns = Some(now);
            } else if tot_time < threshold && old_limit <= max_in_driver {
                qq.inject_limit += 1;
            }
        }
        if (qq.last_serv_time_ns == 0 && in_driver == 1) || tot_time < qq.last_serv_time_ns {
            if qq.last_serv_time_ns == 0 {
                qq.inject_limit = old_limit.max(1);
            }
            qq.last_serv_time_ns = tot_time;
        } else if !injected && in_driver == 1 {
            qq.last_serv_time_ns = tot_time;
        }
        self.waited_rq = None;
        self.rqs_injected = false;
    }

    /// bfq_update_peak_rate, at each dispatch (before the request counts as in the driver). An observation
    /// interval closes after 1 s, or at a dispatch after 100 ms with nothing in the driver, or at a late
    /// completion (`completion_closes_rate_interval`); it counts a dispatch as sequential when the driver holds
    /// requests (or the last completion was under 2 ms ago) and the request is not seeky from the device's last
    /// position (over 800 sectors away and under 32 KiB, non-rotational). Times are subtracted saturating: the
    /// kernel's clock only moves forward, a caller's (a unit test's) need not.
    fn update_peak_rate(&mut self, rq: &Request, now: u64) {
        if self.rate_samples == 0 {
            self.reset_rate_computation(Some(rq), now);
        } else {
            let idle_long =
                now.saturating_sub(self.last_dispatch_ns) > 100 * MS && self.tot_in_driver == 0;
            if !idle_long {
                self.rate_samples += 1;
                if (self.tot_in_driver > 0
                    || now.saturating_sub(self.last_completion_ns) < MIN_TT_NS)
                    && !rq_seeky(self.last_position, rq)
                {
                    self.rate_seq_samples += 1;
                }
                self.rate_sectors += rq.nr_sectors as u64;
                self.rate_max_rq_sectors = if !self.rate_samples.is_multiple_of(32) {
                    self.rate_max_rq_sectors.max(rq.nr_sectors)
                } else {
                    rq.nr_sectors
                };
                self.rate_delta_from_first_ns = now.saturating_sub(self.rate_first_dispatch_ns);
            }
            if idle_long || self.rate_delta_from_first_ns >= RATE_REF_INTERVAL_NS {
                self.update_rate_reset(Some(rq), now);
            }
        }
        self.last_dispatch_ns = now;
    }

    /// bfq_update_rate_reset: close the observation interval, updating the peak rate from it only if it is long
    /// enough (32 samples, 300 ms) and its rate is higher than the estimate or its dispatches at least 3/4
    /// sequential: a random workload never lowers the estimate. The filter weighs the new rate by how
    /// sequential and how long (up to 1 s) the interval was: from 1/10 to 1/2.
    fn update_rate_reset(&mut self, rq: Option<&Request>, now: u64) {
        if self.rate_samples >= RATE_MIN_SAMPLES
            && self.rate_delta_from_first_ns >= RATE_MIN_INTERVAL_NS
        {
            // Extended to the last completion; the kernel subtracts as u64, so a last completion before the
            // interval's first dispatch gives a huge interval and a rate of 0, as here.
            let delta = self.rate_delta_from_first_ns.max(
                self.last_completion_ns
                    .wrapping_sub(self.rate_first_dispatch_ns),
            );
            self.rate_delta_from_first_ns = delta;
            let rate = self.rate_sectors as f64 / delta.max(1) as f64;
            let sequential = self.rate_seq_samples >= (3 * self.rate_samples) >> 2;
            if (sequential || rate > self.peak_rate) && rate <= MAX_RATE_SECT_PER_NS {
                let weight = (9 * self.rate_seq_samples / self.rate_samples) as u64;
                let weight = (weight * delta / RATE_REF_INTERVAL_NS).min(8);
                let divisor = (10 - weight) as f64;
                // At least 1 in the kernel's unit (sectors per µs << 16).
                self.peak_rate = (self.peak_rate * (divisor - 1.0) / divisor + rate / divisor)
                    .max(1.0 / 65536.0 / 1000.0);
                if self.t.user_max_budget == 0 {
                    self.max_budget = self.calc_max_budget();
                }
            }
        }
        self.reset_rate_computation(rq, now);
    }

    /// bfq_reset_rate_computation: open a new interval at this dispatch, or (at a completion) at the next one.
    fn reset_rate_computation(&mut self, rq: Option<&Request>, now: u64) {
        match rq {
            Some(rq) => {
                self.rate_first_dispatch_ns = now;
                self.rate_samples = 1;
                self.rate_seq_samples = 0;
                self.rate_sectors = rq.nr_sectors as u64;
                self.rate_max_rq_sectors = rq.nr_sectors;
            }
            None => self.rate_samples = 0,
        }
    }

    /// bfq_completed_request's check: a completion more than 2 ms after the previous one, at which the largest
    /// recent request would have been served at under 1/1024 sector per µs, closes the interval (the device was
    /// idle or very slow). On a device whose requests complete together every few milliseconds (a null_blk with
    /// a long `completion_nsec`) every gap between cohorts does, so the estimate stays at its initial value.
    fn completion_closes_rate_interval(&mut self, now: u64) {
        let delta_us = now.saturating_sub(self.last_completion_ns) / US;
        if delta_us > MIN_TT_NS / US
            && ((self.rate_max_rq_sectors as u64) << 16) / delta_us < 1 << 6
        {
            self.update_rate_reset(None, now);
        }
        self.last_completion_ns = now;
    }

    fn dispatch_from(&mut self, q: usize, now: u64) -> Request {
        let i = self.peek_rq(q, now).expect("selected queue has a request");
        let in_service = self.in_service == Some(q);
        if in_service {
            self.queues[q].fifo_checked = true;
        }
        let charge = self.charge(q, &self.queues[q].rqs[i].rq);
        let rq = self.queues[q].rqs.remove(i).rq;
        self.queued -= 1;
        if in_service && self.wait_dispatch {
            self.wait_dispatch = false;
            self.waited_rq = Some(rq.id);
        }
        self.served(q, charge);
        self.queues[q].dispatched += 1;
        self.update_peak_rate(&rq, now);
        self.tot_in_driver += 1;
        self.in_driver.insert(rq.id, q);
        self.last_position = rq.end_sector();
        if self.queues[q].rqs.is_empty() && self.queues[q].busy && !in_service {
            self.del_busy(q, false);
        }
        self.refresh_pending(q);
        if in_service {
            let coeff = self.queues[q].wr_coeff;
            if coeff > 1 {
                self.note(Some(q), NoteKind::RaisedDispatch { coeff });
            }
            self.update_wr_data(q, now);
            if self.busy_list.len() > 1 && self.queues[q].class == CLASS_IDLE {
                self.expire(q, false, Expiry::BudgetExhausted, now);
            }
        }
        rq
    }

    fn end_all_wr(&mut self, now: u64) {
        for q in 0..self.queues.len() {
            if self.queues[q].wr_coeff > 1 {
                self.end_wr(q, now);
            }
        }
    }
}

impl Elevator for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    fn locking(&self) -> Locking {
        Locking::Device
    }

    /// On submission bfq_bio_merge and bfq_insert_requests take bfqd->lock, and the request's io context is looked
    /// up twice under the queue's `queue_lock` (bfq_prepare_request's ioc_find_get_icq, before 5.16
    /// blk_mq_sched_assign_ioc; bfq_bio_merge's bfq_bic_lookup). From 5.18 bfq_limit_depth looks it up a third time
    /// and bfqq_request_over_limit takes bfqd->lock (when the queue is on a service tree or in service, as under
    /// load; counted always). bfq_dispatch_request takes bfqd->lock on every call (also one that finds nothing to
    /// dispatch); bfq_finish_requeue_request takes it again on completion. The `queue_lock` look-ups and
    /// bfqq_request_over_limit's holding (a walk up the queue's parents) are counted for the lock share only, not
    /// booked on a lock: a simplification that leaves out their contention (under it, a hand-off of bfqd->lock
    /// more per request).
    /// Yu Kuai's series "block, bfq: don't grab queue_lock from io path" (posted July 2025) drops the `queue_lock`
    /// lookups in a release after 6.17 not read here; they are counted for every version.
    fn lock_acquisitions(&self) -> LockAcquisitions {
        let over_limit = u32::from(self.kernel.has(&kernel::BFQ_REQUEST_OVER_LIMIT));
        LockAcquisitions {
            submit: 2,
            dispatch: 1,
            complete: 1,
            submit_unbooked: 2 + 2 * over_limit,
        }
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        let &q = self.queue_index.get(&Self::key_of(bio))?;
        for held in self.queues[q].rqs.iter_mut().rev() {
            if let Some(side) = mergeable(&held.rq, bio, max_sectors) {
                apply_merge(&mut held.rq, bio, side);
                return Some(held.rq.id);
            }
        }
        None
    }

    fn insert(&mut self, rq: Request, now_ns: u64) {
        self.clock_ns.set(now_ns);
        let q = self.queue_for(&rq, now_ns);
        self.count_allocated(q, true);
        self.update_ttime_and_seek(q, &rq, now_ns);
        if self.queues[q].just_created && (self.burst_size > 0 || self.busy_list.is_empty()) {
            self.handle_burst(q, now_ns);
        }
        let expire = if rq.sync {
            self.t.fifo_expire_sync_ns
        } else {
            self.t.fifo_expire_async_ns
        };
        self.queues[q].rqs.push(Queued {
            rq,
            deadline_ns: now_ns + expire,
        });
        self.queued += 1;
        self.start_service_time_sample(q, now_ns);
        if !self.queues[q].busy {
            self.idle_busy_switch(q, now_ns);
        } else if self.in_service != Some(q) {
            self.updated_next_req(q, now_ns);
        } else if self.queues[q].wait_request {
            self.queues[q].wait_request = false;
            self.idle_timer_at = None;
            if self.budget_timed_out(q, now_ns) {
                self.expire(q, false, Expiry::BudgetTimeout, now_ns);
            }
        }
        self.refresh_pending(q);
    }

    fn dispatch(&mut self, _hctx: u32, now_ns: u64) -> Option<Request> {
        self.clock_ns.set(now_ns);
        if self.busy_list.is_empty() {
            return None;
        }
        if self.t.strict_guarantees && self.tot_in_driver > 0 {
            return None;
        }
        let q = self.select_queue(now_ns)?;
        Some(self.dispatch_from(q, now_ns))
    }

    fn set_kernel_version(&mut self, kernel: KernelVersion) {
        self.kernel = kernel;
    }

    /// bfq_limit_depth with bfq_update_depths' (6.17+: bfq_depth_updated's) depths, as the module doc says.
    fn limit_depth(&self, rq: &Request, tags: SchedTags) -> Option<u32> {
        if !self.kernel.has(&kernel::BFQ_LIMIT_DEPTH) {
            return None;
        }
        let whole = self.kernel.has(&kernel::SBITMAP_WHOLE_SHALLOW_DEPTH);
        let base = if whole {
            tags.nr_requests
        } else {
            tags.bits_per_word()
        };
        if self.notes_limit != 0 {
            self.clock_ns.set(self.clock_ns.get().max(rq.start_ns));
        }
        let wr_busy = self.wr_busy_queues();
        // What the kernel logs as the allocation's depth: the one given, 1 when over the limit, and for a sync read
        // 0 (per-word depths) or nr_requests (whole-set depths).
        let logged = |d: Option<u32>| {
            self.note(
                None,
                NoteKind::Depth {
                    wr_busy: wr_busy as u32,
                    sync: rq.is_sync(),
                    depth: d.unwrap_or(if whole { tags.nr_requests } else { 0 }),
                },
            )
        };
        let depth = (!rq.is_sync_read()).then(|| {
            let d = match (wr_busy > 0, rq.is_sync()) {
                (false, false) => base >> 1,
                (false, true) => (base * 3) >> 2,
                (true, false) => (base * 3) >> 4,
                (true, true) => (base * 6) >> 4,
            };
            d.max(1)
        });
        if self.kernel.has(&kernel::BFQ_REQUEST_OVER_LIMIT) {
            let limit = match depth {
                None => tags.nr_requests,
                Some(d) if whole => d,
                Some(d) => (tags.nr_requests * d) >> tags.shift,
            };
            if self.request_over_limit(rq, limit) {
                self.over_limit.set(self.over_limit.get() + 1);
                logged(Some(1));
                return Some(1);
            }
        }
        logged(depth);
        if whole {
            depth.filter(|&d| d < tags.nr_requests)
        } else {
            depth
        }
    }

    /// bfq_depth_updated: the smallest word depth (3/16 of a word) from 4.18, 1 since 5.18 (debugfs `sched_tags`
    /// on Linux 6.18: min_shallow_depth=1, wake_batch=1).
    fn min_shallow_depth(&self, tags: SchedTags) -> Option<u32> {
        if !self.kernel.has(&kernel::BFQ_LIMIT_DEPTH) {
            None
        } else if self.kernel.has(&kernel::BFQ_REQUEST_OVER_LIMIT) {
            Some(1)
        } else if self.kernel.has(&kernel::SBITMAP_MIN_SHALLOW_DEPTH) {
            Some(((tags.bits_per_word() * 3) >> 4).max(1))
        } else {
            None
        }
    }

    fn has_work(&self, _hctx: u32) -> bool {
        self.queued > 0
    }

    fn completed(&mut self, rq: &Request, _issue_ns: u64, now_ns: u64) -> AfterCompletion {
        self.clock_ns.set(now_ns);
        let Some(q) = self.in_driver.remove(&rq.id) else {
            return AfterCompletion::RunQueue;
        };
        if self.waited_rq == Some(rq.id) && self.kernel.has(&kernel::BFQ_ADAPTIVE_INJECTION) {
            self.update_inject_limit(q, now_ns);
        }
        self.max_in_driver = self.max_in_driver.max(self.tot_in_driver);
        self.count_allocated(q, false);
        self.tot_in_driver -= 1;
        self.completion_closes_rate_interval(now_ns);
        let qq = &mut self.queues[q];
        qq.dispatched -= 1;
        qq.last_end_request = now_ns;
        if qq.dispatched == 0 && !qq.busy {
            // bfq_completed_request: the last request of a queue with none queued (one served by injection, or
            // expired before it completed) completes: the time it became idle, for "idle for long".
            qq.budget_timeout_at = Some(now_ns);
        }
        if qq.softrt_update && qq.dispatched == 0 && qq.rqs.is_empty() && qq.wr_coeff != WR_COEFF {
            let next = self.softrt_next_start(q, now_ns);
            self.queues[q].soft_rt_next_start = Some(next);
        }
        self.refresh_pending(q);
        let mut run_all = false;
        let mut idles = false;
        if self.in_service == Some(q) {
            if self.must_idle(q) {
                idles = true; // the kernel returns here, before bfq_schedule_dispatch
                if self.queues[q].dispatched == 0 {
                    self.arm_slice_timer(q, now_ns);
                }
            } else if self.may_expire_for_budget_timeout(q, now_ns) {
                self.expire(q, false, Expiry::BudgetTimeout, now_ns);
                run_all = true;
            } else if self.queues[q].rqs.is_empty()
                && (self.queues[q].dispatched == 0 || !self.better_to_idle(q))
            {
                self.expire(q, false, Expiry::NoMoreRequests, now_ns);
                run_all = true;
            }
        }
        if self.in_service.is_none() && self.queued > 0 {
            run_all = true;
        }
        // bfq_schedule_dispatch at the end of bfq_completed_request: with nothing left in the driver and requests
        // queued, every hardware queue is run. Otherwise only blk-mq's restart (a run that wanted a driver tag).
        if !idles && self.tot_in_driver == 0 && self.queued > 0 {
            run_all = true;
        }
        if run_all {
            AfterCompletion::RunAllQueues
        } else {
            AfterCompletion::Restart
        }
    }

    fn next_timer_ns(&self) -> Option<u64> {
        self.idle_timer_at
    }

    fn timer(&mut self, now_ns: u64) {
        self.clock_ns.set(now_ns);
        let Some(at) = self.idle_timer_at else {
            return;
        };
        if at > now_ns {
            return;
        }
        self.idle_timer_at = None;
        let Some(q) = self.in_service else {
            return;
        };
        if !self.queues[q].wait_request {
            return;
        }
        self.queues[q].wait_request = false;
        let reason = if self.budget_timed_out(q, now_ns) {
            Expiry::BudgetTimeout
        } else if self.queues[q].rqs.is_empty() {
            Expiry::TooIdle
        } else {
            return;
        };
        self.expire(q, true, reason, now_ns);
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        let t = &self.t;
        vec![
            ("fifo_expire_sync", (t.fifo_expire_sync_ns / MS) as i64),
            ("fifo_expire_async", (t.fifo_expire_async_ns / MS) as i64),
            ("back_seek_max", t.back_seek_max_kib as i64),
            ("back_seek_penalty", t.back_seek_penalty as i64),
            ("slice_idle", (t.slice_idle_ns / MS) as i64),
            ("slice_idle_us", (t.slice_idle_ns / US) as i64),
            // As the kernel shows it: the user's value, 0 while the budget is automatic (Linux 6.18 reads 0).
            ("max_budget", t.user_max_budget as i64),
            ("timeout_sync", (t.timeout_ns / MS) as i64),
            ("strict_guarantees", t.strict_guarantees as i64),
            ("low_latency", t.low_latency as i64),
        ]
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        let (lo, hi): (i64, i64) = match name {
            "fifo_expire_sync" | "fifo_expire_async" | "back_seek_penalty" | "timeout_sync" => {
                (1, i32::MAX as i64)
            }
            "back_seek_max" | "slice_idle" | "slice_idle_us" | "max_budget" => (0, i32::MAX as i64),
            "strict_guarantees" | "low_latency" => (0, 1),
            _ => {
                return Err(TunableError::Unknown {
                    name: name.to_string(),
                    known: TUNABLE_NAMES.to_vec(),
                })
            }
        };
        let v = tunable_in_range(name, value, lo, hi, "")? as u64;
        match name {
            "fifo_expire_sync" => self.t.fifo_expire_sync_ns = v * MS,
            "fifo_expire_async" => self.t.fifo_expire_async_ns = v * MS,
            "back_seek_max" => self.t.back_seek_max_kib = v,
            "back_seek_penalty" => self.t.back_seek_penalty = v,
            "slice_idle" => self.t.slice_idle_ns = v * MS,
            "slice_idle_us" => self.t.slice_idle_ns = v * US,
            "max_budget" => {
                self.t.user_max_budget = v;
                self.max_budget = if v == 0 { self.calc_max_budget() } else { v };
            }
            "timeout_sync" => {
                self.t.timeout_ns = v * MS;
                if self.t.user_max_budget == 0 {
                    self.max_budget = self.calc_max_budget();
                }
            }
            "strict_guarantees" => {
                if v == 1 && !self.t.strict_guarantees && self.t.slice_idle_ns < 8 * MS {
                    self.t.slice_idle_ns = 8 * MS;
                }
                self.t.strict_guarantees = v == 1;
            }
            "low_latency" => {
                if v == 0 && self.t.low_latency {
                    let now = self.last_dispatch_ns;
                    self.end_all_wr(now);
                }
                self.t.low_latency = v == 1;
            }
            _ => unreachable!(),
        }
        Ok(())
    }

    fn record_notes(&mut self, limit: usize) {
        self.notes_limit = limit;
    }

    fn take_notes(&mut self) -> Vec<SchedNote> {
        let mut notes = std::mem::take(self.notes.get_mut());
        notes.rotate_left(self.notes_oldest.replace(0));
        notes
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        let in_service_budget = self
            .in_service
            .map(|q| self.queues[q].ent.budget)
            .unwrap_or(0);
        vec![
            ("busy_queues".to_string(), self.busy_list.len() as f64),
            (
                "inject_limit".to_string(),
                self.in_service
                    .map_or(0.0, |q| self.queues[q].inject_limit as f64),
            ),
            ("in_service_budget".to_string(), in_service_budget as f64),
            (
                "vtime".to_string(),
                self.groups[0].trees[CLASS_BE].vtime as f64,
            ),
            ("wr_queues".to_string(), self.wr_busy_queues() as f64),
            (
                "queues_on_trees".to_string(),
                self.queues
                    .iter()
                    .filter(|q| q.ent.state != State::Off)
                    .count() as f64,
            ),
            (
                "be_weight_sum".to_string(),
                self.groups[0].trees[CLASS_BE].wsum as f64,
            ),
            (
                "max_weight".to_string(),
                self.queues.iter().map(|q| q.ent.weight).max().unwrap_or(0) as f64,
            ),
            (
                "over_limit_allocations".to_string(),
                self.over_limit.get() as f64,
            ),
            (
                "stably_merged_processes".to_string(),
                self.stably_merged as f64,
            ),
            ("max_budget".to_string(), self.max_budget as f64),
            (
                "idling".to_string(),
                self.idle_timer_at.is_some() as u8 as f64,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, check_conservation, Event, Flow, Hook, Lcg, Traffic};
    use crate::Op;
    use std::collections::HashMap;

    fn rq(id: u32, process: u32, sector: u64, nr_sectors: u32) -> Request {
        Request {
            ioprio_class: IoprioClass::BestEffort,
            process,
            ..testkit::rq(id, Op::Read, sector, nr_sectors)
        }
    }

    /// A process that keeps `depth` sequential requests outstanding (queued or in flight).
    #[derive(Clone)]
    struct Proc {
        template: Request,
        depth: usize,
        next_sector: u64,
        outstanding: usize,
        dispatched_sectors: u64,
        active_from_ns: u64,
    }

    /// A device with `slots` parallel slots and a fixed service time per request.
    struct Harness {
        bfq: Bfq,
        now: u64,
        slots: usize,
        service_ns: u64,
        inflight: Vec<(u64, Request)>,
        procs: Vec<Proc>,
        next_id: u32,
        /// (process index, insert time, dispatch time) of every dispatched request.
        log: Vec<(usize, u64, u64)>,
        inserted_at: HashMap<u32, (usize, u64)>,
    }

    impl Harness {
        fn new(bfq: Bfq, slots: usize, service_ns: u64) -> Self {
            Self {
                bfq,
                now: 0,
                slots,
                service_ns,
                inflight: Vec::new(),
                procs: Vec::new(),
                next_id: 0,
                log: Vec::new(),
                inserted_at: HashMap::new(),
            }
        }

        fn add_proc(&mut self, template: Request, depth: usize, active_from_ns: u64) -> usize {
            self.procs.push(Proc {
                next_sector: template.process as u64 * (1 << 32),
                template,
                depth,
                outstanding: 0,
                dispatched_sectors: 0,
                active_from_ns,
            });
            self.procs.len() - 1
        }

        fn refill(&mut self) {
            for p in 0..self.procs.len() {
                while self.procs[p].active_from_ns <= self.now
                    && self.procs[p].outstanding < self.procs[p].depth
                {
                    let pr = &mut self.procs[p];
                    let mut r = pr.template.clone();
                    r.id = self.next_id;
                    r.sector = pr.next_sector;
                    pr.next_sector += r.nr_sectors as u64;
                    pr.outstanding += 1;
                    self.inserted_at.insert(r.id, (p, self.now));
                    self.next_id += 1;
                    self.bfq.insert(r, self.now);
                }
            }
        }

        fn run_until(&mut self, end_ns: u64) {
            while self.now < end_ns {
                self.refill();
                while self.inflight.len() < self.slots {
                    let Some(r) = self.bfq.dispatch(0, self.now) else {
                        break;
                    };
                    let (p, at) = self.inserted_at[&r.id];
                    self.procs[p].dispatched_sectors += r.nr_sectors as u64;
                    self.log.push((p, at, self.now));
                    self.inflight.push((self.now + self.service_ns, r));
                }
                let next_completion = self.inflight.iter().map(|(t, _)| *t).min();
                let next_timer = self.bfq.next_timer_ns();
                let next_arrival = self
                    .procs
                    .iter()
                    .map(|p| p.active_from_ns)
                    .filter(|&t| t > self.now)
                    .min();
                let Some(next) = [next_completion, next_timer, next_arrival]
                    .into_iter()
                    .flatten()
                    .min()
                else {
                    self.now = end_ns;
                    break;
                };
                self.now = next.max(self.now);
                if next_timer.is_some_and(|t| t <= self.now) {
                    self.bfq.timer(self.now);
                }
                while let Some(i) = self.inflight.iter().position(|(t, _)| *t <= self.now) {
                    let (_, r) = self.inflight.swap_remove(i);
                    let (p, _) = self.inserted_at[&r.id];
                    self.procs[p].outstanding -= 1;
                    self.bfq.completed(&r, 0, self.now);
                }
            }
        }

        fn shares(&self) -> Vec<f64> {
            let total: u64 = self.procs.iter().map(|p| p.dispatched_sectors).sum();
            self.procs
                .iter()
                .map(|p| p.dispatched_sectors as f64 / total as f64)
                .collect()
        }
    }

    fn assert_shares(got: &[f64], weights: &[f64], tolerance: f64) {
        let sum: f64 = weights.iter().sum();
        for (i, (g, w)) in got.iter().zip(weights).enumerate() {
            let want = w / sum;
            assert!(
                (g - want).abs() <= tolerance * want,
                "process {i}: share {g:.4}, want {want:.4} (±{:.0}%); all shares {got:?}",
                tolerance * 100.0
            );
        }
    }

    /// One process keeps `slots` 4 KiB reads in flight (and as many queued) on a device that serves each in
    /// `service_ns`, until the first dispatch at or after `end_ns`; `sector` places the n-th request.
    fn stream(
        bfq: &mut Bfq,
        slots: usize,
        service_ns: u64,
        end_ns: u64,
        sector: impl Fn(u64) -> u64,
    ) {
        let (mut now, mut id, mut queued) = (0u64, 0u32, 0usize);
        let mut inflight: Vec<(u64, Request)> = Vec::new();
        loop {
            while queued + inflight.len() < 2 * slots {
                bfq.insert(rq(id, 0, sector(id as u64), 8), now);
                id += 1;
                queued += 1;
            }
            while inflight.len() < slots {
                let Some(r) = bfq.dispatch(0, now) else { break };
                queued -= 1;
                inflight.push((now + service_ns, r));
                if now >= end_ns {
                    return;
                }
            }
            let next = inflight
                .iter()
                .map(|(t, _)| *t)
                .chain(bfq.next_timer_ns())
                .min()
                .unwrap();
            now = next;
            if bfq.next_timer_ns().is_some_and(|t| t <= now) {
                bfq.timer(now);
            }
            while let Some(i) = inflight.iter().position(|(t, _)| *t <= now) {
                let (_, r) = inflight.swap_remove(i);
                bfq.completed(&r, 0, now);
            }
        }
    }

    /// BFQ_RQ_SEEKY measures a request's distance from the queue's last one with `get_sdist`, which gives 0 while
    /// nothing is recorded (position 0): a new queue's first request is never seeky, and its history starts at 1
    /// instead. So after k random 4 KiB reads (each far from the last) the history holds 1 + (k − 1) = k ones, and
    /// the queue turns seeky (more than 19 of 32) at its 20th read, not its 19th. Negative control: measuring the
    /// first read from sector 0 (1,000,000 sectors away) would give 1 + 19 = 20 ones after 19 reads.
    /// Notes are kept only when asked, and only the last `limit`: three processes' first reads, 200 ms apart (past
    /// stable merging's 180 ms, so three queues), each make their new queue busy, a note each (nothing is
    /// dispatched). With a limit of 2 the first process's note gives way; the two kept come in time order, and
    /// taking them leaves none. Negative control: a policy never asked keeps nothing.
    #[test]
    fn notes_keep_the_last_ones_asked_for_in_time_order() {
        let mut quiet = Bfq::new();
        quiet.insert(rq(0, 0, 8, 8), 0);
        assert!(quiet.take_notes().is_empty());
        let mut bfq = Bfq::new();
        bfq.record_notes(2);
        for p in 0..3u32 {
            bfq.insert(rq(p, p, 1_000_000 * (p as u64 + 1), 8), p as u64 * 200 * MS);
        }
        let notes = bfq.take_notes();
        let busy = |p: u32, t: u64| SchedNote {
            t_ns: t,
            process: Some(p),
            shared: false,
            kind: NoteKind::Busy,
        };
        assert_eq!(notes, vec![busy(1, 200 * MS), busy(2, 400 * MS)]);
        assert!(bfq.take_notes().is_empty());
    }

    #[test]
    fn a_queues_first_request_is_not_seeky_so_it_turns_seeky_at_its_twentieth_random_read() {
        let mut bfq = Bfq::new();
        let read = |k: u32| rq(k, 0, 1_000_000 * (k as u64 + 1), 8);
        bfq.insert(read(0), 0);
        assert_eq!(
            queue_of(&bfq, 0).seek_history,
            0b10,
            "the first read: 0 shifted in after the initial 1"
        );
        for k in 1..19 {
            bfq.insert(read(k), k as u64 * MS);
        }
        assert_eq!(queue_of(&bfq, 0).seek_history.count_ones(), 19);
        assert!(!queue_of(&bfq, 0).seeky());
        bfq.insert(read(19), 19 * MS);
        assert!(queue_of(&bfq, 0).seeky());
    }

    /// A queue that comes back with `non_blocking_wait_rq` keeps its old place: it starts at its previous finish F
    /// when V has passed it (backshifted). If even its new finish stays below V, `bfq_update_fin_time_enqueue`
    /// pushes both timestamps up by (V − finish), divided by wr_coeff for a raised queue. In units of 2^22:
    /// F = 10, V = 41, and a budget worth 1 (40 sectors at weight 40, or 1,200 at the raised 40 × 30 = 1,200):
    /// - not raised: start 10, finish 11, pushed by 41 − 11 = 30: start 40, finish 41 (= V);
    /// - raised: the same 10 and 11, pushed by 30 / 30 = 1: start 11, finish 12, well ahead of the others.
    #[test]
    fn a_backshifted_raised_queue_is_pushed_up_only_by_one_wr_coeffth_of_its_lag() {
        const U: u64 = 1 << WFQ_SERVICE_SHIFT;
        fn reactivated(wr_coeff: u32) -> (u64, u64) {
            let mut bfq = Bfq::new();
            own_queues(&mut bfq, &[0]);
            let q = queue_index_of(&bfq, 0);
            bfq.queues[q].wr_coeff = wr_coeff;
            bfq.apply_queue_weight(q);
            let ent = &mut bfq.queues[q].ent;
            assert_eq!(ent.weight, 40 * wr_coeff);
            ent.budget = 40 * wr_coeff as u64;
            ent.finish = 10 * U;
            bfq.groups[0].trees[CLASS_BE].vtime = 41 * U;
            bfq.activate(EntityId::Queue(q), true);
            let ent = &bfq.queues[q].ent;
            (ent.start / U, ent.finish / U)
        }
        assert_eq!(reactivated(1), (40, 41));
        assert_eq!(reactivated(30), (11, 12));
    }

    /// A queue emptied while it waits in its tree (its last request injected into another queue's slot) leaves
    /// with the finish time of its activation; only the queue in service is charged its service on the way out.
    /// In units of 2^22, weight 40: activated at V = S = 10 with a budget of 400 sectors, F = 10 + 400 / 40 = 20.
    /// Its one request (40 sectors) is dispatched by injection: V = 10 + 40 / 40 = 11 (the tree's only weight)
    /// and its service 40. Deactivated at V = 11 < F = 20 it waits on the idle tree, still in the weight sum; back
    /// at V = 11 it starts at F = 20. Negative control: charged like the queue in service, F = 10 + 40 / 40 = 11
    /// is not above V, so it would be forgotten (weight sum 0) and start again at V = 11.
    #[test]
    fn a_queue_emptied_while_waiting_keeps_its_finish_time_and_its_place() {
        const U: u64 = 1 << WFQ_SERVICE_SHIFT;
        let mut bfq = Bfq::new();
        bfq.set_tunable("low_latency", 0).unwrap();
        own_queues(&mut bfq, &[0]);
        let q = queue_index_of(&bfq, 0);
        bfq.groups[0].trees[CLASS_BE].vtime = 10 * U;
        bfq.queues[q].ent.budget = 400;
        let e = EntityId::Queue(q);
        bfq.activate(e, false);
        assert_eq!(
            (bfq.queues[q].ent.start, bfq.queues[q].ent.finish),
            (10 * U, 20 * U)
        );
        bfq.served(q, 40);
        assert_eq!(
            (
                bfq.groups[0].trees[CLASS_BE].vtime,
                bfq.queues[q].ent.service
            ),
            (11 * U, 40)
        );
        bfq.deactivate(e, true);
        assert_eq!(bfq.queues[q].ent.state, State::Idle);
        assert_eq!(
            (bfq.queues[q].ent.finish, bfq.groups[0].trees[CLASS_BE].wsum),
            (20 * U, 40)
        );
        bfq.activate(e, false);
        assert_eq!(bfq.queues[q].ent.start, 20 * U);
    }

    /// The initial estimate, 2/3 of the reference rate 33000 (sectors per µs << 16): 22000 / 65536 = 0.3357
    /// sectors per µs, so max_budget stays at its default 16384 until an interval updates it, and interactive
    /// raising lasts 2.5 s × 33000 / 22000 = 3.75 s (the lab's 6.12 logged "raising period dur .../3748 msec").
    #[test]
    fn the_peak_rate_falls_only_for_a_sequential_stream() {
        // 4 reads of 8 sectors every 1 ms: 0.032 sectors per µs, a tenth of the initial estimate. The interval
        // closes at the first dispatch at 1,000 ms: 4 + 4 × 999 + 1 = 4,001 samples, 32,008 sectors in 1 s.
        let run = |sector: &dyn Fn(u64) -> u64| {
            let mut bfq = Bfq::new();
            stream(&mut bfq, 4, MS, 1_000 * MS, sector);
            (bfq.max_budget, bfq.wr_duration())
        };
        // Sequential: every dispatch but the first follows the last one with requests in the driver or a
        // completion under 2 ms ago, 4,000 of 4,001 (>= 3/4): the filter's weight is 9 × 4,000 / 4,001 = 8 (an
        // integer), × 1 s / 1 s, capped at 8, so divisor 2: (0.33569 + 0.032008) / 2 = 0.18385 sectors per µs,
        // and max_budget = 0.18385 × 125,000 µs = 22,981 sectors; raising 2.5 s × 0.50354 / 0.18385 = 6.847 s.
        let (budget, wr) = run(&|n| n * 8);
        assert_eq!(budget, 22_981);
        assert_eq!(wr / MS, 6_847);
        // Random (each read > 800 sectors from the last, under 32 KiB: seeky): no sequential sample, and 0.032 is
        // below the estimate, so the interval is dropped.
        let (budget, wr) = run(&|n| (n * 7_919 * 1_024) % (1 << 30));
        assert_eq!((budget, wr / MS), (16_384, 3_750));
    }

    #[test]
    fn completions_16_ms_apart_keep_the_initial_peak_rate() {
        // The lab's null_blk (16 in flight, 16 ms each): every completion cohort comes 16,000 µs after the last;
        // the largest request, 8 sectors, in 16,000 µs is (8 << 16) / 16,000 = 32 < 64 (1/1024 sector per µs),
        // so each cohort closes the interval after 16 samples, short of 32: no update for 3 s, even though the
        // stream is sequential. The lab's trace shows it: "reset_rate_computation at end, sample 0/0 tot_sects
        // 128" after every cohort, and raising periods of 3,748 ms.
        let mut bfq = Bfq::new();
        stream(&mut bfq, 16, 16 * MS, 3_000 * MS, |n| n * 8);
        assert_eq!((bfq.max_budget, bfq.wr_duration() / MS), (16_384, 3_750));
        // The same 16 in flight served in 1 ms complete 1,000 µs apart: 16,001 samples and 128,008 sectors by
        // 1,000 ms, (0.33569 + 0.128008) / 2 = 0.23185 sectors per µs, max_budget 28,981.
        let mut bfq = Bfq::new();
        stream(&mut bfq, 16, MS, 1_000 * MS, |n| n * 8);
        assert_eq!(bfq.max_budget, 28_981);
    }

    #[test]
    fn four_backlogged_processes_share_by_ioprio_weight() {
        // BE levels 0, 4, 6, 7 give weights 80, 40, 20, 10. Raising is off: it would only favour the level-4
        // (default-weight) queue for its first seconds.
        let mut bfq = Bfq::new();
        bfq.set_tunable("low_latency", 0).unwrap();
        bfq.set_tunable("max_budget", 2048).unwrap();
        let mut h = Harness::new(bfq, 4, 100 * US);
        for (p, level) in [0u8, 4, 6, 7].into_iter().enumerate() {
            let mut t = rq(0, p as u32, 0, 8);
            t.ioprio_level = level;
            h.add_proc(t, 32, 0);
        }
        h.run_until(5_000 * MS);
        assert_shares(&h.shares(), &[80.0, 40.0, 20.0, 10.0], 0.03);
    }

    #[test]
    fn four_cgroups_share_by_cgroup_weight() {
        let mut bfq = Bfq::new();
        bfq.set_tunable("max_budget", 2048).unwrap();
        let mut h = Harness::new(bfq, 4, 100 * US);
        for (p, weight) in [1000u32, 500, 250, 100].into_iter().enumerate() {
            let mut t = rq(0, p as u32, 0, 8);
            t.cgroup = p as u32 + 1;
            t.cgroup_weight = weight;
            h.add_proc(t, 32, 0);
        }
        h.run_until(5_000 * MS);
        assert_shares(&h.shares(), &[1000.0, 500.0, 250.0, 100.0], 0.03);
    }

    /// Give each process its own queue, as if each had started I/O more than 600 ms after the one before: on 5.13+
    /// processes that start together share one (stable merging), and these tests are about separate processes.
    fn own_queues(bfq: &mut Bfq, processes: &[u32]) {
        for (i, &p) in processes.iter().enumerate() {
            bfq.queue_for(&rq(0, p, 0, 8), i as u64 * 700 * MS);
        }
    }

    /// The index of `process`'s sync queue in the root group.
    fn queue_index_of(bfq: &Bfq, process: u32) -> usize {
        bfq.queue_index[&QueueKey::Sync { process, cgroup: 0 }]
    }

    fn queue_of(bfq: &Bfq, process: u32) -> &Queue {
        &bfq.queues[queue_index_of(bfq, process)]
    }

    fn intro(bfq: &Bfq, name: &str) -> f64 {
        bfq.introspect()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
    }

    #[test]
    fn a_new_queue_after_two_seconds_is_weight_raised_and_served_at_once() {
        // Two processes keep the device busy; a third turns up at 3 s with one small read.
        fn newcomer(low_latency: bool) -> (u64, u32, u32) {
            let mut bfq = Bfq::new();
            bfq.set_tunable("low_latency", low_latency as i64).unwrap();
            own_queues(&mut bfq, &[0, 1]);
            let mut h = Harness::new(bfq, 4, 100 * US);
            h.add_proc(rq(0, 0, 0, 8), 32, 0);
            h.add_proc(rq(0, 1, 0, 8), 32, 0);
            let p = h.add_proc(rq(0, 2, 0, 8), 1, 3_000 * MS);
            h.run_until(3_000 * MS + 50 * US);
            let coeff = queue_of(&h.bfq, 2).wr_coeff;
            h.run_until(3_500 * MS);
            let (_, at, dispatched) = *h.log.iter().find(|(q, _, _)| *q == p).unwrap();
            (dispatched - at, coeff, queue_of(&h.bfq, 0).wr_coeff)
        }
        let (raised_wait, coeff, old_coeff) = newcomer(true);
        assert_eq!(coeff, 30, "interactive raising ×30");
        assert_eq!(
            old_coeff, 1,
            "the backlogged queues' own raising ended (120000 sectors of service)"
        );
        assert!(
            raised_wait <= 100 * US,
            "served as soon as a slot frees: waited {raised_wait} ns"
        );
        let (plain_wait, coeff, _) = newcomer(false);
        assert_eq!(coeff, 1);
        assert!(
            plain_wait > 10 * raised_wait.max(100 * US),
            "without raising it waits its turn: {plain_wait} ns"
        );
    }

    /// bfq_updated_next_req. A queue weight-raised when it became busy has the 2 x min_budget raising gives,
    /// 2 x 16384 / 32 = 1024 sectors, while it waits for service; a later request that becomes its next (nearer the
    /// head, sector 8 after the first queue's read) gives it its max_budget, 2/3 of the default 16384 = 10922
    /// sectors, and the finish time S + 10922 / 1200 (weight 40 x 30). A request farther than its best changes
    /// nothing. The lab's 6.12 shows the same: "set_in_service_queue, cur-budget = 10922" for a raised queue's first
    /// slot (docs/kmod.md). The second reader comes 700 ms after the first, past stable merging's 600 ms.
    #[test]
    fn a_waiting_queue_takes_its_max_budget_when_a_new_request_becomes_its_next() {
        let mut bfq = Bfq::new();
        bfq.insert(rq(1, 0, 0, 8), 0);
        assert_eq!(bfq.dispatch(0, 0).map(|r| r.id), Some(1));
        bfq.insert(rq(2, 1, 2_000_000, 8), 700 * MS);
        let b = queue_index_of(&bfq, 1);
        assert_ne!(bfq.in_service, Some(b));
        assert_eq!(
            (bfq.queues[b].wr_coeff, bfq.queues[b].ent.budget),
            (30, 1024)
        );
        bfq.insert(rq(3, 1, 3_000_000, 8), 701 * MS);
        assert_eq!(
            bfq.queues[b].ent.budget, 1024,
            "not its next: nothing changes"
        );
        bfq.insert(rq(4, 1, 1_000, 8), 702 * MS);
        let ent = &bfq.queues[b].ent;
        assert_eq!(ent.budget, 10922);
        assert_eq!(ent.finish - ent.start, delta(10922, 1200));
    }

    /// The same in a group (`bfq_update_parent_budget`): the group takes the queue's new budget, but only a smaller
    /// one would reposition it, so its finish time keeps the budget its queue had when the group became active.
    /// Reader 0 in cgroup 1 is served at 0; reader 1 in cgroup 2 (weight 500) turns up at 700 ms, raised, with 1024
    /// sectors: its group gets F = S + 1024 / 500. The nearer request gives the queue 10922 sectors (F = S + 10922
    /// / 1200) and the group the same budget, while the group's F stays S + 1024 / 500 = S + 2.048 x 2^22 (moving
    /// it to S + 10922 / 500, 21.844 x 2^22, is what the model did before: the negative control). This is why the
    /// lab's 6.12 serves the four groups of the Fig. 4 spec (weights 100 / 250 / 500 / 1000) in turn: every group
    /// enters with 1024 sectors, so a small finish time, and each one's first long slot comes after a few of the
    /// first-served group's short ones (docs/kmod.md).
    #[test]
    fn a_group_keeps_its_finish_time_when_its_waiting_queue_gets_a_larger_budget() {
        let in_cgroup = |id, process, sector, cgroup, weight| {
            let mut r = rq(id, process, sector, 8);
            (r.cgroup, r.cgroup_weight) = (cgroup, weight);
            r
        };
        let mut bfq = Bfq::new();
        bfq.insert(in_cgroup(1, 0, 0, 1, 100), 0);
        assert_eq!(bfq.dispatch(0, 0).map(|r| r.id), Some(1));
        bfq.insert(in_cgroup(2, 1, 2_000_000, 2, 500), 700 * MS);
        let q = bfq.queue_index[&QueueKey::Sync {
            process: 1,
            cgroup: 2,
        }];
        let g = bfq.group_index[&2];
        let group_span = |bfq: &Bfq| bfq.groups[g].ent.finish - bfq.groups[g].ent.start;
        assert_eq!(
            (bfq.queues[q].ent.budget, bfq.groups[g].ent.budget),
            (1024, 1024)
        );
        assert_eq!(group_span(&bfq), delta(1024, 500));
        bfq.insert(in_cgroup(3, 1, 1_000, 2, 500), 702 * MS);
        let queue = &bfq.queues[q].ent;
        assert_eq!(
            (queue.budget, queue.finish - queue.start),
            (10922, delta(10922, 1200))
        );
        assert_eq!(bfq.groups[g].ent.budget, 10922);
        assert_eq!(
            group_span(&bfq),
            delta(1024, 500),
            "not S + delta(10922, 500)"
        );
    }

    /// The weights tree behind "varied weights" holds only queues that are not weight-raised (`bfq_add_bfqq_busy`
    /// adds a queue with wr_coeff 1 only). A raised reader (40 × 30 = 1200) beside a writer of weight 40 leaves
    /// {40} in the tree: symmetric for both (counting the reader would give {40, 1200}, asymmetric for the
    /// reader). The reader comes 3 s after the writer: within 180 ms it would have joined the writer's queue
    /// (stable merging). A third queue at level 0 (weight (8 − 0) × 10 = 80, not raised: not the default weight)
    /// makes it {40, 80}: asymmetric for that queue, whose weight is not the smallest, not for the writer's.
    #[test]
    fn raised_queues_stay_out_of_the_weights_tree() {
        let mut bfq = Bfq::new();
        bfq.set_tunable("low_latency", 0).unwrap();
        bfq.insert(rq(1, 1, 0, 8), 0);
        bfq.set_tunable("low_latency", 1).unwrap();
        bfq.insert(rq(2, 0, 1_000_000, 8), 3_000 * MS);
        let (reader, writer) = (queue_index_of(&bfq, 0), queue_index_of(&bfq, 1));
        assert_eq!(
            (bfq.queues[reader].wr_coeff, bfq.queues[writer].wr_coeff),
            (30, 1)
        );
        assert_eq!(bfq.pending_weights, BTreeMap::from([(40, 1)]));
        assert!(!bfq.asymmetric_scenario(reader) && !bfq.asymmetric_scenario(writer));
        let mut heavy = rq(3, 2, 2_000_000, 8);
        heavy.ioprio_level = 0;
        bfq.insert(heavy, 3_000 * MS);
        let heavy = queue_index_of(&bfq, 2);
        assert_eq!(bfq.pending_weights, BTreeMap::from([(40, 1), (80, 1)]));
        assert!(bfq.asymmetric_scenario(heavy) && !bfq.asymmetric_scenario(writer));
    }

    /// "Idle for long" (interactive raising) reads `budget_timeout`, which the kernel also sets to the time the
    /// queue became idle (`__bfq_bfqq_expire` with nothing queued and nothing in the driver). A queue set in service
    /// at 0 (not raised: low_latency off then) gets budget_timeout = 0 + timeout_sync = 125 ms; its read completes at
    /// 1 ms and the idle slice expires it at 1 + 8 = 9 ms, empty: budget_timeout = 9 ms. With low_latency on, a read
    /// at 2.005 s is within 2 s of that (2.005 < 2.009): not interactive, so it is raised only as soft real-time
    /// (×3000: one small read, well under 7000 sectors/s). At 2.05 s it is interactive (2.05 > 2.009), which takes
    /// precedence (×30). Counted from the budget timeout alone (125 ms + 2 s = 2.125 s), 2.05 s would still be soft
    /// real-time: the negative control.
    #[test]
    fn idle_for_long_counts_from_when_the_queue_became_idle() {
        let coeff_of_read_at = |at_ns: u64| {
            let mut bfq = Bfq::new();
            bfq.set_tunable("low_latency", 0).unwrap();
            bfq.insert(rq(1, 0, 0, 8), 0);
            let r = bfq.dispatch(0, 0).unwrap();
            assert_eq!(queue_of(&bfq, 0).budget_timeout_at, Some(125 * MS));
            bfq.completed(&r, 0, MS);
            assert_eq!(
                bfq.next_timer_ns(),
                Some(9 * MS),
                "the only busy queue idles slice_idle"
            );
            bfq.timer(9 * MS);
            assert_eq!(queue_of(&bfq, 0).budget_timeout_at, Some(9 * MS));
            bfq.set_tunable("low_latency", 1).unwrap();
            bfq.insert(rq(2, 0, 1024, 8), at_ns);
            queue_of(&bfq, 0).wr_coeff
        };
        assert_eq!(
            coeff_of_read_at(2_005 * MS),
            3000,
            "2.005 s: within 2 s of going idle"
        );
        assert_eq!(coeff_of_read_at(2_050 * MS), 30, "2.05 s: interactive");
    }

    /// The same overload at a completion (`bfq_completed_request`): a queue that left service while its request was
    /// still in the driver becomes idle when that request completes. An async write (no idling for async queues) is
    /// dispatched at 0; the next dispatch finds its queue empty and expires it with the write in flight, so
    /// budget_timeout stays at 0 + 125 ms; the write completes at 300 ms: budget_timeout = 300 ms.
    #[test]
    fn a_queue_becomes_idle_when_its_last_request_completes() {
        let mut bfq = Bfq::new();
        let mut w = rq(1, 0, 0, 8);
        w.op = Op::Write;
        w.sync = false;
        let key = Bfq::key_of(&w);
        bfq.insert(w, 0);
        let budget_timeout = |bfq: &Bfq| bfq.queues[bfq.queue_index[&key]].budget_timeout_at;
        let r = bfq.dispatch(0, 0).unwrap();
        assert!(bfq.dispatch(0, 0).is_none());
        assert_eq!(bfq.in_service, None, "expired with its write in flight");
        assert_eq!(budget_timeout(&bfq), Some(125 * MS));
        bfq.completed(&r, 0, 300 * MS);
        assert_eq!(budget_timeout(&bfq), Some(300 * MS));
    }

    #[test]
    fn only_queues_with_the_default_weight_count_as_interactive() {
        let mut bfq = Bfq::new();
        let mut r = rq(1, 0, 0, 8);
        r.ioprio_level = 0;
        bfq.insert(r, 0);
        bfq.insert(rq(2, 1, 0, 8), 0);
        assert_eq!(queue_of(&bfq, 0).wr_coeff, 1);
        assert_eq!(queue_of(&bfq, 1).wr_coeff, 30);
        assert_eq!(intro(&bfq, "wr_queues"), 1.0);
    }

    /// Soft real-time detection of an interactive queue, by kernel version. A new queue (created at 0, so
    /// interactively raised ×30) gets a 1024-sector request served from 0 to 1 ms, then idles alone until the raised
    /// queue's 20 ms slice timer expires it at 21 ms. Its rate so far: 1024 sectors since it became busy at 0, so
    /// soft_rt_next_start = 0 + 1024 / 7000 s = 146.3 ms (later than 21 + 8 + 4 = 33 ms). Its next request at 50 ms:
    /// - 6.3 computes that value for interactive queues too (5.12+): 50 ms < 146.3 ms, not soft real-time, it stays
    ///   interactive (×30);
    /// - 5.2 leaves an interactive queue's value alone; it is still the creation time (4.16+: 0), so at 50 ms the
    ///   greedy queue passes for soft real-time and is raised ×3000 (the spurious switch 5.12 removed).
    ///
    /// When interactive raising ends, 6.3 forgets the bandwidth (soft_rt_next_start = now); 5.2 keeps it.
    #[test]
    fn an_interactive_queue_turns_soft_real_time_by_its_measured_rate_from_5_12() {
        let first_at = |version: &str| {
            let mut bfq = at(version);
            bfq.insert(rq(1, 0, 0, 1024), 0);
            assert_eq!(
                queue_of(&bfq, 0).wr_coeff,
                30,
                "{version}: new queue, interactive"
            );
            let r = bfq.dispatch(0, 0).unwrap();
            bfq.completed(&r, 0, MS);
            assert_eq!(
                bfq.next_timer_ns(),
                Some(21 * MS),
                "{version}: raised queues idle 20 ms"
            );
            bfq.timer(21 * MS);
            bfq
        };
        let mut v63 = first_at("6.3");
        assert_eq!(
            queue_of(&v63, 0).soft_rt_next_start,
            Some(1024 * 1_000_000_000 / 7000)
        );
        v63.insert(rq(2, 0, 1024, 8), 50 * MS);
        assert_eq!(
            queue_of(&v63, 0).wr_coeff,
            30,
            "6.3: too greedy for soft real-time"
        );

        let mut v52 = first_at("5.2");
        assert_eq!(
            queue_of(&v52, 0).soft_rt_next_start,
            Some(0),
            "5.2: the creation time"
        );
        v52.insert(rq(2, 0, 1024, 8), 50 * MS);
        assert_eq!(
            queue_of(&v52, 0).wr_coeff,
            30 * 100,
            "5.2: passes for soft real-time"
        );

        // The end of interactive raising (both queues still ×30 / ×3000 at 60 ms; end it by hand).
        let q = v63.queue_index[&QueueKey::Sync {
            process: 0,
            cgroup: 0,
        }];
        v63.end_wr(q, 60 * MS);
        assert_eq!(
            queue_of(&v63, 0).soft_rt_next_start,
            Some(60 * MS),
            "6.3: forgotten"
        );
        let mut v52 = at("5.2");
        v52.insert(rq(1, 0, 0, 8), 0);
        v52.queues[0].soft_rt_next_start = Some(500 * MS);
        v52.end_wr(0, 60 * MS);
        assert_eq!(
            queue_of(&v52, 0).soft_rt_next_start,
            Some(500 * MS),
            "5.2: kept"
        );
        // 4.15 predates both: a new queue is never soft real-time until its value is computed.
        let mut v415 = at("4.15");
        v415.insert(rq(1, 0, 0, 8), 0);
        assert_eq!(queue_of(&v415, 0).soft_rt_next_start, None);
    }

    /// bfq_set_next_ioprio_data: class NONE (fio's default, no ioprio set) is best effort at the nice-0 level 4
    /// whatever level the request carries, so it has the default weight 40 and is weight-raised as interactive;
    /// IDLE is level 7 (weight 10); BE and RT keep their level.
    #[test]
    fn a_process_without_an_ioprio_is_best_effort_level_4_and_idle_is_level_7() {
        let mut bfq = Bfq::new();
        for (process, class, level) in [
            (0, IoprioClass::None, 0),
            (1, IoprioClass::Idle, 2),
            (2, IoprioClass::BestEffort, 0),
            (3, IoprioClass::RealTime, 3),
        ] {
            let mut r = rq(process, process, 0, 8);
            (r.ioprio_class, r.ioprio_level) = (class, level);
            bfq.insert(r, 0);
        }
        let got: Vec<_> = (0..4)
            .map(|p| {
                let q = queue_of(&bfq, p);
                (q.class, q.level, q.orig_weight, q.wr_coeff)
            })
            .collect();
        assert_eq!(
            got,
            [
                (CLASS_BE, 4, 40, 30),
                (CLASS_IDLE, 7, 10, 1),
                (CLASS_BE, 0, 80, 1),
                (CLASS_RT, 3, 50, 1)
            ]
        );
    }

    #[test]
    fn the_sole_sync_queue_idles_until_its_next_request_or_the_slice_timer() {
        let mut bfq = Bfq::new();
        bfq.set_tunable("low_latency", 0).unwrap(); // raised queues idle at least 20 ms
        bfq.insert(rq(1, 7, 0, 8), 0);
        let first = bfq.dispatch(0, 0).unwrap();
        assert!(
            bfq.dispatch(0, 10 * US).is_none(),
            "empty, request in flight: keep the queue"
        );
        bfq.completed(&first, 0, 100 * US);
        assert_eq!(
            bfq.next_timer_ns(),
            Some(100 * US + 8 * MS),
            "slice_idle armed at the last completion"
        );
        assert!(bfq.dispatch(0, MS).is_none(), "idling");
        assert_eq!(intro(&bfq, "busy_queues"), 1.0);

        bfq.insert(rq(2, 7, 8, 8), 2 * MS);
        assert_eq!(
            bfq.next_timer_ns(),
            None,
            "the queue's next request ends idling"
        );
        let second = bfq.dispatch(0, 2 * MS).unwrap();
        assert_eq!(second.id, 2);
        bfq.completed(&second, 0, 2 * MS + 100 * US);
        let at = bfq.next_timer_ns().unwrap();
        assert!(bfq.dispatch(0, at - 1).is_none());
        bfq.timer(at);
        assert_eq!(
            intro(&bfq, "busy_queues"),
            0.0,
            "timer fired: expired as too idle"
        );
        assert!(!bfq.has_work(0));
    }

    /// Injection on 5.2 and 5.3: the limit is 0 for a queue with a short think time and never adapts. A heavier
    /// reader A (weight 80, new, so short think time) is idled for after its request completes at 100 µs; a light
    /// queue's 4 KiB requests wait. 5.1 (the simulator's fixed limit of one) injects one into the empty driver; 5.2
    /// injects nothing, also after A has idled a slice_idle (8 ms): the one-request allowance then is for large
    /// requests only, and a 64 KiB one goes in at 8.1 ms.
    #[test]
    fn on_5_2_a_short_think_time_queue_gets_nothing_injected_but_a_late_large_request() {
        let run = |version: &str, light_sectors: u32| {
            let mut bfq = at(version);
            bfq.set_tunable("low_latency", 0).unwrap();
            let mut a = rq(1, 0, 0, 8);
            a.ioprio_level = 0;
            bfq.insert(a, 0);
            for i in 0..4 {
                let mut b = rq(10 + i, 1, 1_000_000 + 1024 * i as u64, light_sectors);
                b.ioprio_level = 7;
                bfq.insert(b, 0);
            }
            let first = bfq.dispatch(0, 0).unwrap();
            assert_eq!(first.process, 0);
            bfq.completed(&first, 0, 100 * US);
            let soon = bfq.dispatch(0, 100 * US).map(|r| r.process);
            let late = bfq.dispatch(0, 8 * MS + 100 * US).map(|r| r.process);
            (soon, late)
        };
        assert_eq!(
            run("5.1", 8),
            (Some(1), None),
            "5.1: one at once, the driver then busy"
        );
        assert_eq!(
            run("5.2", 8),
            (None, None),
            "5.2: limit 0 for small requests"
        );
        assert_eq!(
            run("5.2", 128),
            (None, Some(1)),
            "5.2: a large one after a slice_idle"
        );
    }

    /// Adaptive injection (Linux 5.4+), step by step. A heavier reader A (weight 80, one 4 KiB request every 2 ms,
    /// served in 100 µs) is idled for; a light queue B (weight 10) has 4 KiB requests waiting.
    /// - From A's creation at 0 its limit is 0 (short think time) and nothing is measured for 10 ms: no injection.
    /// - At 10 ms the driver is empty: A6's total service time, 100 µs, becomes the baseline and the limit 1.
    /// - B1 is injected into the empty driver at 10.1 ms and is still in it when A7 arrives at 12 ms: A7 is measured
    ///   with injection, 100 µs < 1.5 x 100 µs, so the limit rises to 2 (the most seen in the driver was 1 ≥ 1).
    /// - A8 measured with B2, B3 in the driver takes 200 µs ≥ 150 µs: the limit falls back to 1 (a decrease).
    /// - One second after that decrease, A's next request resets the limit to 0 and forgets the baseline.
    #[test]
    fn the_injection_limit_follows_the_measured_service_time_from_5_4() {
        let mut bfq = at("6.3");
        bfq.set_tunable("low_latency", 0).unwrap();
        let a_rq = |id: u32, at_ms: u64| {
            let mut r = rq(id, 0, at_ms * 8, 8);
            r.ioprio_level = 0;
            r
        };
        bfq.insert(a_rq(1, 0), 0);
        for i in 0..10 {
            let mut b = rq(100 + i, 1, 1_000_000 + 8 * i as u64, 8);
            b.ioprio_level = 7;
            bfq.insert(b, 0);
        }
        let a = || 0usize; // A was created first
                           // A's requests every 2 ms up to 8 ms, each served in 100 µs: nothing is injected meanwhile.
        for k in 0..5u64 {
            let t = k * 2 * MS;
            if k > 0 {
                bfq.insert(a_rq(1 + k as u32, k), t);
            }
            let r = bfq.dispatch(0, t).unwrap();
            assert_eq!(r.process, 0);
            bfq.completed(&r, 0, t + 100 * US);
            assert!(
                bfq.dispatch(0, t + 100 * US).is_none(),
                "limit 0: nothing injected"
            );
        }
        assert_eq!(bfq.queues[a()].inject_limit, 0);
        // 10 ms: the baseline.
        bfq.insert(a_rq(6, 5), 10 * MS);
        let a6 = bfq.dispatch(0, 10 * MS).unwrap();
        bfq.completed(&a6, 0, 10 * MS + 100 * US);
        assert_eq!(bfq.queues[a()].last_serv_time_ns, 100 * US);
        assert_eq!(bfq.queues[a()].inject_limit, 1);
        let b1 = bfq.dispatch(0, 10 * MS + 100 * US).unwrap();
        assert_eq!(b1.process, 1, "injected into the empty driver");
        assert!(
            bfq.dispatch(0, 10 * MS + 100 * US).is_none(),
            "limit 1 reached"
        );
        // 12 ms: measured with B1 in the driver, as fast as the baseline.
        bfq.insert(a_rq(7, 6), 12 * MS);
        let a7 = bfq.dispatch(0, 12 * MS).unwrap();
        assert_eq!(a7.process, 0);
        bfq.completed(&a7, 0, 12 * MS + 100 * US);
        assert_eq!(bfq.queues[a()].inject_limit, 2);
        let b2 = bfq.dispatch(0, 12 * MS + 100 * US).unwrap();
        assert_eq!(b2.process, 1, "a second injected request beside B1");
        bfq.completed(&b1, 0, 12 * MS + 150 * US);
        let b3 = bfq.dispatch(0, 12 * MS + 150 * US).unwrap();
        assert_eq!(b3.process, 1);
        // 14 ms: measured with B2 and B3 in the driver, twice as slow.
        bfq.insert(a_rq(8, 7), 14 * MS);
        let a8 = bfq.dispatch(0, 14 * MS).unwrap();
        bfq.completed(&a8, 0, 14 * MS + 200 * US);
        assert_eq!(bfq.queues[a()].inject_limit, 1, "slowed down: one less");
        assert_eq!(bfq.queues[a()].decrease_time_ns, Some(14 * MS + 200 * US));
        for r in [b2, b3] {
            bfq.completed(&r, 0, 14 * MS + 300 * US);
        }
        // A second after the decrease: reset.
        bfq.insert(a_rq(9, 8), 1014 * MS + 200 * US);
        assert_eq!(
            (
                bfq.queues[a()].inject_limit,
                bfq.queues[a()].last_serv_time_ns
            ),
            (0, 0)
        );
    }

    #[test]
    fn while_idling_for_a_heavier_queue_other_requests_are_injected_one_at_a_time() {
        // Before 5.2 the injection limit is the simulator's fixed one request in the driver.
        let mut bfq = at("5.1");
        bfq.set_tunable("low_latency", 0).unwrap();
        let mut heavy = rq(1, 0, 0, 8);
        heavy.ioprio_level = 0; // weight 80
        bfq.insert(heavy.clone(), 0);
        for i in 0..5 {
            let mut light = rq(10 + i, 1, 1_000_000 + 8 * i as u64, 8);
            light.ioprio_level = 7; // weight 10
            bfq.insert(light, 0);
        }
        let a = bfq.dispatch(0, 0).unwrap();
        assert_eq!(a.id, 1, "smallest finish time first");
        assert!(
            bfq.dispatch(0, 0).is_none(),
            "asymmetric weights: idle for the heavy queue"
        );
        bfq.completed(&a, 0, 100 * US);
        assert!(bfq.next_timer_ns().is_some());
        let injected = bfq.dispatch(0, 100 * US).unwrap();
        assert_eq!(
            injected.process, 1,
            "injected from the light queue while the driver is empty"
        );
        assert!(
            bfq.dispatch(0, 100 * US).is_none(),
            "injection limit: one request in the driver"
        );
        bfq.completed(&injected, 0, 200 * US);

        heavy.id = 2;
        heavy.sector = 8;
        bfq.insert(heavy, 300 * US);
        assert_eq!(
            bfq.dispatch(0, 300 * US).unwrap().id,
            2,
            "the in-service queue's own request"
        );
        let b = bfq.in_driver.keys().collect::<Vec<_>>();
        let done = Request {
            id: b[0],
            ..rq(b[0], 0, 8, 8)
        };
        bfq.completed(&done, 0, 400 * US);
        let at = bfq.next_timer_ns().unwrap();
        bfq.timer(at);
        let burst: Vec<u32> = std::iter::from_fn(|| bfq.dispatch(0, at))
            .map(|r| r.id)
            .collect();
        assert_eq!(
            burst.len(),
            4,
            "heavy queue expired: the light queue is served freely"
        );
    }

    #[test]
    fn budget_feedback_by_expiry_reason() {
        fn sync_queue(low_latency: bool) -> Bfq {
            let mut bfq = Bfq::new();
            bfq.set_tunable("low_latency", low_latency as i64).unwrap();
            bfq
        }
        // A new queue starts at 2/3 of the default max budget (16384).
        let mut bfq = sync_queue(false);
        for i in 0..1400 {
            bfq.insert(rq(i, 0, 8 * i as u64, 8), 0);
        }
        let mut dispatched = Vec::new();
        for _ in 0..1365 {
            let r = bfq.dispatch(0, 0).unwrap();
            bfq.completed(&r, 0, 0);
            dispatched.push(r.id);
        }
        assert_eq!(intro(&bfq, "in_service_budget"), 10922.0);
        assert_eq!(queue_of(&bfq, 0).ent.service, 10920);
        // The next 8 sectors do not fit in the 2 left: exhausted, ×4 capped at the device max.
        bfq.dispatch(0, 0).unwrap();
        assert_eq!(queue_of(&bfq, 0).max_budget, 16384);
        assert_eq!(intro(&bfq, "in_service_budget"), 16384.0);

        // Too idle (the idle timer fired with nothing in flight): budget − 4 × min budget (512).
        let mut bfq = sync_queue(false);
        for i in 0..10 {
            bfq.insert(rq(i, 0, 8 * i as u64, 8), 0);
        }
        let all: Vec<Request> = std::iter::from_fn(|| bfq.dispatch(0, 0)).collect();
        assert_eq!(all.len(), 10);
        for r in &all {
            bfq.completed(r, 0, MS);
        }
        bfq.timer(bfq.next_timer_ns().unwrap());
        assert_eq!(queue_of(&bfq, 0).max_budget, 10922 - 4 * 512);

        // No more requests and no idling (slice_idle 0): max(service, min budget).
        let mut bfq = sync_queue(false);
        bfq.set_tunable("slice_idle", 0).unwrap();
        for i in 0..10 {
            bfq.insert(rq(i, 0, 8 * i as u64, 8), 0);
        }
        let all: Vec<Request> = std::iter::from_fn(|| bfq.dispatch(0, 0)).collect();
        for r in &all {
            bfq.completed(r, 0, MS);
        }
        assert_eq!(intro(&bfq, "busy_queues"), 0.0);
        assert_eq!(queue_of(&bfq, 0).max_budget, 512);

        // Budget timeout (125 ms) with requests left: ×2 (no cap hit with a 100000-sector max).
        let mut bfq = sync_queue(false);
        bfq.set_tunable("max_budget", 100_000).unwrap();
        for i in 0..20 {
            bfq.insert(rq(i, 0, 8 * i as u64, 8), 0);
        }
        for _ in 0..10 {
            let r = bfq.dispatch(0, 0).unwrap();
            bfq.completed(&r, 0, MS);
        }
        bfq.dispatch(0, 130 * MS).unwrap();
        assert_eq!(queue_of(&bfq, 0).max_budget, 2 * 10922);
        assert_eq!(intro(&bfq, "in_service_budget"), (2 * 10922) as f64);

        // A weight-raised queue gets 2 × min budget.
        let mut bfq = sync_queue(true);
        bfq.insert(rq(1, 0, 0, 8), 0);
        bfq.dispatch(0, 0).unwrap();
        assert_eq!(intro(&bfq, "in_service_budget"), 1024.0);
    }

    #[test]
    fn an_expired_fifo_head_goes_first_once_per_slot() {
        let setup = || {
            let mut bfq = Bfq::new();
            bfq.insert(rq(1, 0, 10_000_000, 8), 0);
            bfq.insert(rq(2, 0, 0, 8), 0);
            bfq.insert(rq(3, 0, 8, 8), 0);
            bfq
        };
        let ids = |bfq: &mut Bfq, now: u64| -> Vec<u32> {
            std::iter::from_fn(|| bfq.dispatch(0, now))
                .map(|r| r.id)
                .collect()
        };
        assert_eq!(
            ids(&mut setup(), 0),
            vec![2, 3, 1],
            "sector order from position 0"
        );
        assert_eq!(ids(&mut setup(), 126 * MS), vec![1, 2, 3], "FIFO head expired after 125 ms: served first, then sector order (wrapped: lowest first)");
        let mut bfq = Bfq::new();
        bfq.set_tunable("fifo_expire_sync", 500).unwrap();
        for (id, sector) in [(1, 10_000_000), (2, 0), (3, 8)] {
            bfq.insert(rq(id, 0, sector, 8), 0);
        }
        assert_eq!(
            ids(&mut bfq, 126 * MS),
            vec![2, 3, 1],
            "fifo_expire_sync = 500 ms: not expired yet"
        );
    }

    #[test]
    fn backward_seeks_cost_back_seek_penalty_and_are_limited_by_back_seek_max() {
        // Position the head at sector 1000, then offer one request behind and one ahead.
        fn choice(behind: u64, ahead: u64, back_seek_max: i64) -> u64 {
            let mut bfq = Bfq::new();
            bfq.set_tunable("back_seek_max", back_seek_max).unwrap();
            bfq.insert(rq(1, 0, 992, 8), 0);
            let r = bfq.dispatch(0, 0).unwrap();
            bfq.insert(rq(2, 0, behind, 8), 0);
            bfq.insert(rq(3, 0, ahead, 8), 0);
            bfq.completed(&r, 0, 0);
            bfq.dispatch(0, 0).unwrap().sector
        }
        assert_eq!(
            choice(900, 1150, 16384),
            1150,
            "100 back ×2 = 200 > 150 ahead"
        );
        assert_eq!(
            choice(950, 1150, 16384),
            950,
            "50 back ×2 = 100 < 150 ahead"
        );
        assert_eq!(choice(950, 1150, 0), 1150, "no backward seeks allowed");
    }

    #[test]
    fn tunables_by_sysfs_name_and_unit_with_validation() {
        let mut bfq = Bfq::new();
        let get = |bfq: &Bfq, n: &str| bfq.tunables().into_iter().find(|(k, _)| *k == n).unwrap().1;
        assert_eq!(
            bfq.tunables(),
            vec![
                ("fifo_expire_sync", 125),
                ("fifo_expire_async", 250),
                ("back_seek_max", 16384),
                ("back_seek_penalty", 2),
                ("slice_idle", 8),
                ("slice_idle_us", 8000),
                ("max_budget", 0),
                ("timeout_sync", 125),
                ("strict_guarantees", 0),
                ("low_latency", 1),
            ]
        );
        bfq.set_tunable("slice_idle_us", 2500).unwrap();
        assert_eq!(
            (get(&bfq, "slice_idle"), get(&bfq, "slice_idle_us")),
            (2, 2500)
        );
        bfq.set_tunable("strict_guarantees", 1).unwrap();
        assert_eq!(
            get(&bfq, "slice_idle"),
            8,
            "strict guarantees raise slice_idle to 8 ms"
        );
        bfq.set_tunable("max_budget", 4096).unwrap();
        assert_eq!(get(&bfq, "max_budget"), 4096);
        bfq.set_tunable("max_budget", 0).unwrap();
        assert_eq!(
            get(&bfq, "max_budget"),
            0,
            "0 selects automatic tuning, and reads back 0 as in the kernel"
        );
        assert!(bfq.max_budget > 0, "the automatic budget itself");
        for (name, bad) in [
            ("fifo_expire_sync", 0),
            ("fifo_expire_async", -1),
            ("back_seek_penalty", 0),
            ("timeout_sync", 0),
            ("slice_idle", -5),
            ("max_budget", 1 << 40),
            ("low_latency", 2),
            ("strict_guarantees", -1),
        ] {
            assert!(
                matches!(
                    bfq.set_tunable(name, bad),
                    Err(TunableError::OutOfRange { .. })
                ),
                "{name}={bad} accepted"
            );
        }
        match bfq.set_tunable("quantum", 1) {
            Err(TunableError::Unknown { known, .. }) => assert_eq!(known.len(), 10),
            other => panic!("{other:?}"),
        }
        assert_eq!(bfq.name(), "bfq");
        assert_eq!(bfq.locking(), Locking::Device);
    }

    #[test]
    fn strict_guarantees_keep_one_request_in_the_driver() {
        let mut bfq = Bfq::new();
        bfq.set_tunable("strict_guarantees", 1).unwrap();
        for i in 0..4 {
            bfq.insert(rq(i, i % 2, 8 * i as u64, 8), 0);
        }
        let r = bfq.dispatch(0, 0).unwrap();
        assert!(bfq.dispatch(0, 0).is_none());
        bfq.completed(&r, 0, 100 * US);
        assert!(bfq.dispatch(0, 100 * US).is_some());
    }

    #[test]
    fn merges_only_into_the_submitting_queue() {
        let mut bfq = Bfq::new();
        bfq.insert(rq(1, 0, 0, 8), 0);
        assert_eq!(
            bfq.bio_merge(&rq(2, 1, 8, 8), 256),
            None,
            "another process's queue"
        );
        assert_eq!(bfq.bio_merge(&rq(3, 0, 8, 8), 256), Some(1));
        let r = bfq.dispatch(0, 0).unwrap();
        assert_eq!((r.sector, r.nr_sectors), (0, 16));
    }

    /// Every tree's weight sum is the weight of the entities it holds (active, idle or in service), and every
    /// busy queue is in a tree or in service.
    fn check_invariants(bfq: &Bfq) {
        let mut sums = vec![[0u64; 3]; bfq.groups.len()];
        let all = (0..bfq.queues.len())
            .map(EntityId::Queue)
            .chain((1..bfq.groups.len()).map(EntityId::Group));
        for e in all {
            if bfq.ent(e).state != State::Off {
                let (g, c) = bfq.tree_of(e);
                sums[g][c] += bfq.ent(e).weight as u64;
            }
        }
        for (g, grp) in bfq.groups.iter().enumerate() {
            for (c, tree) in grp.trees.iter().enumerate() {
                assert_eq!(tree.wsum, sums[g][c], "group {g} class {c}");
            }
        }
        for &q in &bfq.busy_list {
            assert!(matches!(
                bfq.queues[q].ent.state,
                State::Active | State::InService
            ));
        }
        let queued: usize = bfq.queues.iter().map(|q| q.rqs.len()).sum();
        assert_eq!(queued, bfq.queued);
        assert!(
            bfq.queues.iter().all(|q| q.rqs.is_empty() || q.busy),
            "a queue with requests is busy"
        );
    }

    /// BFQ's own checks under the conservation harness: the tree invariants after every step (see
    /// [`check_invariants`]), tunables changed now and then, and once drained nothing left in the driver, no busy
    /// queue and every tree's weight sum made of idle entities only.
    struct Trees;

    impl Hook<Bfq> for Trees {
        fn before_step(&mut self, bfq: &mut Bfq, _flow: &Flow, g: &mut Lcg) {
            if g.below(25) != 0 {
                return;
            }
            let (name, value) = [
                ("strict_guarantees", g.below(2) as i64),
                ("low_latency", g.below(2) as i64),
                ("slice_idle", g.pick(&[0, 8])),
                ("max_budget", g.pick(&[0, 64, 4096])),
                ("timeout_sync", g.pick(&[5, 125])),
            ][g.below(5) as usize];
            bfq.set_tunable(name, value).unwrap();
        }

        fn check(&mut self, bfq: &Bfq, flow: &Flow, event: Event) {
            match event {
                Event::Step => check_invariants(bfq),
                Event::Drained => {
                    let seed = flow.seed;
                    assert!(bfq.in_driver.is_empty() && bfq.tot_in_driver == 0);
                    assert_eq!(intro(bfq, "busy_queues"), 0.0, "seed {seed}");
                    for grp in &bfq.groups {
                        for t in &grp.trees {
                            assert!(t.active.is_empty());
                            let counted: u64 =
                                t.idle.iter().map(|&e| bfq.ent(e).weight as u64).sum();
                            assert_eq!(
                                t.wsum, counted,
                                "weight sum = idle-tree weights once nothing is busy"
                            );
                        }
                    }
                }
                _ => {}
            }
        }
    }

    #[test]
    fn random_operations_never_lose_or_duplicate_a_request() {
        // Six processes in three cgroups; sync reads, sync and async writes of any size, anywhere on a 512 GiB disk.
        let traffic = Traffic {
            seeds: 0..40,
            nr_hw_queues: 4,
            nr_cpus: 4,
            nr_processes: 6,
            cgroup_weights: &[100, 700, 30],
            ops: &[Op::Read, Op::Read, Op::Read, Op::Write],
            bio_sectors: &[1, 3, 8, 16, 24, 40, 64],
            span_sectors: 1 << 30,
            max_sectors: 128,
            driver_depth: usize::MAX,
            max_gap_ns: 300 * US,
            jump_to_timers: true,
            ..Traffic::default()
        };
        check_conservation(&traffic, |_| (Bfq::new(), Trees));
    }

    fn at(version: &str) -> Bfq {
        let mut bfq = Bfq::new();
        bfq.set_kernel_version(KernelVersion::parse(version).unwrap());
        bfq
    }

    fn write(id: u32, process: u32, sync: bool) -> Request {
        Request {
            op: Op::Write,
            sync,
            ..rq(id, process, id as u64 * 1024, 128)
        }
    }

    #[test]
    fn tag_limits_spare_sync_reads_and_hold_back_async_and_writes_per_word_or_per_set_by_version() {
        let tags = SchedTags::new(256);
        let read = rq(0, 1, 0, 8);
        // 6.3: depths per 64-bit word of the sbitmap.
        let bfq = at("6.3");
        assert_eq!(bfq.limit_depth(&read, tags), None);
        assert_eq!(
            bfq.limit_depth(&write(1, 1, true), tags),
            Some(48),
            "sync writes: 3/4 of a word"
        );
        assert_eq!(
            bfq.limit_depth(&write(2, 1, false), tags),
            Some(32),
            "async: 1/2 of a word"
        );
        assert_eq!(bfq.min_shallow_depth(tags), Some(1));
        // 6.18: the same fractions of the whole set.
        let bfq = at("6.18");
        assert_eq!(bfq.limit_depth(&write(1, 1, true), tags), Some(192));
        assert_eq!(bfq.limit_depth(&write(2, 1, false), tags), Some(128));
        // 5.2: per word, min_shallow_depth the smallest word depth; 4.15: no limit at all.
        assert_eq!(at("5.2").min_shallow_depth(tags), Some(12));
        assert_eq!(at("4.15").limit_depth(&write(1, 1, true), tags), None);
        assert_eq!(at("4.15").min_shallow_depth(tags), None);
    }

    /// Worked example of `bfqq_request_over_limit` (Linux 6.3): two sync writers and a reader, weight 40 each, all on
    /// the BE tree (W = 120). A writer's share of the sync-write limit (256 × 48 >> 6 = 192) is 192 × 40 / 120 = 64;
    /// at 64 requests allocated it gets shallow depth 1. A busy weight-raised reader (×30: W = 1280) halves the word
    /// depth (24: limit 96) and cuts the share to 96 × 40 / 1280 = 3.
    #[test]
    fn a_queue_holding_its_weights_share_of_the_tags_allocates_with_depth_1() {
        let tags = SchedTags::new(256);
        let mut bfq = at("6.3");
        bfq.t.low_latency = false;
        let mut id = 0;
        let mut insert = |bfq: &mut Bfq, r: Request| {
            bfq.insert(Request { id, ..r }, 0);
            id += 1;
        };
        assert_eq!(
            bfq.limit_depth(&write(0, 1, true), tags),
            Some(48),
            "no queue yet: no share to exceed"
        );
        own_queues(&mut bfq, &[1, 2, 3]);
        for _ in 0..63 {
            insert(&mut bfq, write(0, 1, true));
        }
        insert(&mut bfq, write(0, 2, true));
        insert(&mut bfq, rq(0, 3, 0, 8));
        assert_eq!(bfq.groups[0].trees[CLASS_BE].wsum, 120);
        assert_eq!(
            bfq.limit_depth(&write(0, 1, true), tags),
            Some(48),
            "63 < 64"
        );
        insert(&mut bfq, write(0, 1, true));
        assert_eq!(
            bfq.limit_depth(&write(0, 1, true), tags),
            Some(1),
            "64 allocated: over its share"
        );
        assert_eq!(
            bfq.limit_depth(&write(0, 2, true), tags),
            Some(48),
            "the other writer holds 1"
        );
        assert_eq!(
            bfq.limit_depth(&rq(0, 1, 0, 8), tags),
            None,
            "its reads share its queue, but 64 < 256 × 40 / 120"
        );
        // Raise the reader's weight 30×: W = 40 + 40 + 1200.
        let reader = queue_index_of(&bfq, 3);
        bfq.queues[reader].wr_coeff = WR_COEFF;
        bfq.apply_queue_weight(reader);
        assert_eq!(
            bfq.limit_depth(&write(0, 2, true), tags),
            Some(24),
            "1 < 3: the raised word depth"
        );
        for _ in 0..2 {
            insert(&mut bfq, write(0, 2, true));
        }
        assert_eq!(
            bfq.limit_depth(&write(0, 2, true), tags),
            Some(1),
            "3 allocated: over"
        );
        // 5.2 has no per-queue share: the word depth whatever a queue holds.
        let mut old = at("5.2");
        old.t.low_latency = false;
        for i in 0..100 {
            old.insert(
                Request {
                    id: i,
                    ..write(0, 1, true)
                },
                0,
            );
        }
        assert_eq!(old.limit_depth(&write(0, 1, true), tags), Some(48));
    }

    /// Stable merging (5.13+, bfq_do_or_sched_stable_merge): the VM lab's Linux 6.12 logs `bfqSHARED-S` queues for
    /// 32 fio writers started together on one null_blk. Processes whose first request reaches the device within
    /// 180 ms of the group's last created queue join it; after 600 ms a new queue becomes the one to join.
    #[test]
    fn processes_that_start_io_within_180_ms_of_a_new_queue_share_it() {
        let mut bfq = at("6.3");
        let key = |process| QueueKey::Sync { process, cgroup: 0 };
        let at_ms =
            |bfq: &mut Bfq, process: u32, ms: u64| bfq.queue_for(&rq(0, process, 0, 8), ms * MS);
        let head = at_ms(&mut bfq, 1, 0);
        assert_eq!(
            at_ms(&mut bfq, 2, 100),
            head,
            "100 ms ≤ 180 ms after the head: merged"
        );
        assert_eq!(at_ms(&mut bfq, 3, 180), head, "180 ms: still merged");
        let lone = at_ms(&mut bfq, 4, 181);
        assert_ne!(lone, head, "181 ms: a queue of its own, and the head stays");
        assert_eq!(at_ms(&mut bfq, 5, 500), lone + 1, "500 ms: own queue too");
        let second = at_ms(&mut bfq, 6, 601);
        assert_eq!(
            at_ms(&mut bfq, 7, 700),
            second,
            "601 ms after the head: a new head, joined 99 ms later"
        );
        assert_eq!(bfq.queues[head].processes, 3);
        assert_eq!(
            intro(&bfq, "stably_merged_processes"),
            3.0,
            "processes 2, 3 and 7"
        );
        // Another ioprio level or another cgroup never joins.
        let level5 = Request {
            ioprio_class: IoprioClass::BestEffort,
            ioprio_level: 5,
            ..rq(0, 8, 0, 8)
        };
        assert_ne!(bfq.queue_for(&level5, 710 * MS), second);
        let other_group = Request {
            cgroup: 9,
            cgroup_weight: 100,
            ..rq(0, 9, 0, 8)
        };
        assert_ne!(bfq.queue_for(&other_group, 711 * MS), second);
        // Before 5.13 every process has its own queue.
        let mut old = at("5.12");
        let a = old.queue_for(&rq(0, 1, 0, 8), 0);
        assert_ne!(old.queue_for(&rq(0, 2, 0, 8), MS), a);
        assert_eq!(bfq.queue_index[&key(2)], head);
    }

    /// Merged writers hold one weight's share of the tags, not one each. Four writers with 32 requests each and a
    /// reader with one, all on the trees, at 6.3 (192 tags for sync writes = 3/4 of 256):
    /// - started together (the reader 300 ms later, on its own queue): one writers' queue of weight 40 with 128
    ///   allocated; W = 40 + 40 = 80, its share
    ///   192 × 40 / 80 = 96 ≤ 128 → over: depth 1;
    /// - started apart: W = 5 × 40 = 200, each writer's share round(192 × 40 / 200) = 38 > 32 → not over: depth 48.
    #[test]
    fn writers_that_started_together_share_one_weights_tags() {
        let tags = SchedTags::new(256);
        let fill = |bfq: &mut Bfq| {
            let mut id = 0;
            for process in 1..=4 {
                for _ in 0..32 {
                    bfq.insert(
                        Request {
                            id,
                            ..write(0, process, true)
                        },
                        MS,
                    );
                    id += 1;
                }
            }
            bfq.insert(
                Request {
                    id,
                    ..rq(0, 5, 0, 8)
                },
                300 * MS,
            );
        };
        let mut together = at("6.3");
        together.t.low_latency = false;
        fill(&mut together);
        assert_eq!(together.groups[0].trees[CLASS_BE].wsum, 80);
        assert_eq!(together.limit_depth(&write(0, 1, true), tags), Some(1));
        let mut apart = at("6.3");
        apart.t.low_latency = false;
        own_queues(&mut apart, &[1, 2, 3, 4, 5]);
        fill(&mut apart);
        assert_eq!(apart.groups[0].trees[CLASS_BE].wsum, 200);
        assert_eq!(apart.limit_depth(&write(0, 1, true), tags), Some(48));
    }

    /// Why the per-queue tag share never bites on writers with queues of their own when every request is
    /// dispatched the instant it is inserted (the simulator's BlockInsert: tag, insert and hardware-queue run at one
    /// time; seed 000's F10 with 32 writers on 8 SSDs, before stable merging was modelled: 51,729 of 51,730
    /// allocations on one drive found the writer's queue off every tree; merged into one queue, the writers keep it
    /// busy). A writer's queue served alone advances V by its own service over its own weight, so when the next
    /// writer preempts it its finish F = S + service / weight equals V and B-WF2Q+ forgets it
    /// (__bfq_deactivate_entity keeps only F > V on the idle tree). Three writers queued together share W = 120:
    /// after two of them are served V has moved 2/3 as far as the first one's F, which stays on the idle tree, where
    /// bfqq_request_over_limit counts it.
    #[test]
    fn a_writer_stays_on_a_service_tree_only_when_its_busy_time_overlaps_another_writers() {
        let mut bfq = at("6.3");
        bfq.t.low_latency = false;
        let state = |bfq: &Bfq, process: u32| queue_of(bfq, process).ent.state;
        own_queues(&mut bfq, &[1, 2]);
        // Alone: insert, dispatch at once; the next writer's request preempts the empty in-service queue.
        bfq.insert(write(0, 1, true), 0);
        assert_eq!(bfq.dispatch(0, 0).map(|r| r.process), Some(1));
        bfq.insert(write(1, 2, true), 1_000);
        assert_eq!(bfq.dispatch(0, 1_000).map(|r| r.process), Some(2));
        assert_eq!(state(&bfq, 1), State::Off, "F = V: forgotten");
        // Together: writers 3, 4 and 5 are all queued when the first of them is served.
        let mut bfq = at("6.3");
        bfq.t.low_latency = false;
        own_queues(&mut bfq, &[3, 4, 5]);
        for (id, process) in [(2, 3), (3, 4), (4, 5)] {
            bfq.insert(write(id, process, true), 0);
        }
        let first = bfq.dispatch(0, 0).unwrap().process;
        let second = bfq.dispatch(0, 0).unwrap().process;
        assert_ne!(first, second);
        assert_eq!(
            state(&bfq, first),
            State::Idle,
            "F = S + s/40 > V = S + 2s/120"
        );
    }

    #[test]
    fn a_queue_off_every_service_tree_is_never_over_its_share() {
        let tags = SchedTags::new(256);
        let mut bfq = at("6.3");
        bfq.t.low_latency = false;
        for i in 0..200 {
            bfq.insert(
                Request {
                    id: i,
                    ..write(0, 1, true)
                },
                0,
            );
        }
        assert_eq!(
            bfq.limit_depth(&write(0, 1, true), tags),
            Some(1),
            "busy, 200 ≥ 192 × 40 / 40"
        );
        // Dispatch everything: the queue empties, expires and leaves the trees (nothing else keeps V from F).
        let mut now = 0;
        while bfq.dispatch(0, now).is_some() {
            now += 1;
        }
        let q = queue_index_of(&bfq, 1);
        if bfq.queues[q].ent.state == State::Off {
            assert_eq!(
                bfq.queues[q].ent.allocated, 200,
                "still allocated: the requests are in the device"
            );
            assert_eq!(
                bfq.limit_depth(&write(0, 1, true), tags),
                Some(48),
                "off the trees: not checked"
            );
        } else {
            assert_eq!(
                bfq.limit_depth(&write(0, 1, true), tags),
                Some(1),
                "still on a tree: over"
            );
        }
    }
}
