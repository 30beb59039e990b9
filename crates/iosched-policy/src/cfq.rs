//! `cfq`: Completely Fair Queueing, the legacy single-queue scheduler (block/cfq-iosched.c of Linux 4.19;
//! Documentation/block/cfq-iosched.txt), restated from the kernel's behaviour. CFQ exists only on the legacy block
//! layer and was removed with it in Linux 5.0.
//!
//! # What is modelled
//!
//! * **Queues.** One sync queue per process; async queues shared per (class, priority level). Class and level come
//!   from the request's ioprio: none → best effort, level 4 (a nice-0 task's `task_nice_ioprio`); idle → level 7.
//! * **Service trees.** Per class (RT, BE) and workload type (ASYNC; SYNC_NOIDLE: sync without idle window; SYNC),
//!   plus one tree for the idle class, each ordered by `rb_key`. A queue added to a tree gets
//!   `rb_key = now + (busy queues − 1) × (prio_slice(sync, 0) − prio_slice(queue)) − slice_resid` (idle class: the
//!   last key + 200 ms; preemption: the first key − 1 s). Busy queues (with requests, or active) stay on their tree.
//! * **Workloads.** The class served is RT if any RT queue is busy, else BE, else idle. Within a class the workload
//!   type whose first queue has the lowest key is chosen when the current type's tree is empty or its slice expired;
//!   the workload slice is `target_latency × queues of that type / max(busy_queues_avg, busy queues of the class)`,
//!   async: also ≤ `target_latency × busy async / busy` and scaled by `slice_async / slice_sync`; sync: at least
//!   `2 × slice_idle`; at least 2 ms. The workload context is saved when a queue expires and restored on the next
//!   selection (`cfq_group_served` / `cfq_choose_cfqg`).
//! * **Time slices.** A queue becomes active with a new slice; the slice starts at its first completion and lasts
//!   `prio_slice = slice[sync] + slice[sync] / 5 × (4 − level)`; with `low_latency`, scaled down when
//!   `slice_sync × busy_queues_avg` exceeds `target_latency` (not below `2 × slice_idle × slice / slice_sync`). A
//!   queue that expires early keeps the rest (`slice_resid`) as an earlier key next time.
//! * **Dispatch** (`cfq_select_queue`, `cfq_may_dispatch`, `cfq_dispatch_request`): keep the active queue while it
//!   has requests and its slice lasts; when it empties, switch to a close cooperator (a sync queue whose next request
//!   lies within 8 MiB of the last position), or wait: for the idle timer, for its requests in flight when it should
//!   idle, or (group idle) when it is the only busy queue and has requests in flight. Per dispatch: the FIFO head
//!   once per slice if it expired (`fifo_expire_sync/async`), else `next_rq`, the best request after the last
//!   position (backward seeks within `back_seek_max` count `back_seek_penalty` × their distance; sync before async).
//!   Limits: async queues wait while sync requests are in flight; a queue may have `quantum / 2` requests in the
//!   driver, up to `quantum` at the start of its slice, unlimited if it is the only busy queue (or the only sync
//!   one); with `low_latency` an async queue's depth is limited to the time since a sync request was last delayed
//!   past `fifo_expire_sync`, in units of `slice_sync`. An async queue expires after `2 × slice_async_rq × (8 −
//!   level)` dispatches when other queues are busy; an idle-class queue after each one.
//! * **Idling.** `cfq_should_idle`: never for the idle class or with `slice_idle` 0; always for queues with an idle
//!   window unless the device is non-rotational with command queueing (`hw_tag`); otherwise only for the last sync
//!   queue of its service tree whose think time is small. On completion of the active queue's last request the idle
//!   timer is armed for `slice_idle` (or `group_idle` when the queue should not idle but is the group's only busy
//!   queue), unless the queue still has requests in flight or its mean think time exceeds what is left of its slice.
//!   A new request of the active queue ends the idling (at once if it is larger than a page or other queues are
//!   busy). The timer expires the queue unless it got a request. `wait_busy`: a slice about to end for the group's
//!   only queue is extended by one idle period.
//! * **Idle window, seeks, think time** per the kernel: a sync queue's idle window is cleared when it is seeky (on
//!   non-rotational devices: more than 4 of the last 32 requests smaller than 32 KiB) and not deep (never had ≥ 4
//!   queued), or when its mean think time (decaying average, samples valid after 80) exceeds `slice_idle`.
//! * **Preemption** (`cfq_should_preempt`) of the active queue by a new request: idle-class active queue; sync
//!   request vs async active queue; active slice used; RT over BE; SYNC_NOIDLE vs an empty SYNC_NOIDLE queue; an
//!   empty active queue that should not idle; a close request while the active queue waits. The preempting queue
//!   goes to the front of its tree.
//! * **hw_tag** detection: after 50 samples with more than 5 requests queued or in the driver, NCQ is assumed if
//!   the peak depth seen was ≥ 5 (until then "unknown" counts as NCQ, as in the kernel).
//! * **Non-rotational devices:** `slice_idle` is set to 0 when the elevator is registered on one
//!   (`cfq_registered_queue`, since Linux 4.8), which with NCQ also means no per-queue idling; `group_idle` stays
//!   8 ms. Every device the simulator models is an SSD, so `by_name("cfq")` builds the non-rotational variant.
//!
//! # Tunables (sysfs names and units)
//!
//! | name | unit | default | accepted |
//! |---|---|---|---|
//! | `quantum` | requests | 8 | ≥ 1 |
//! | `fifo_expire_sync` / `fifo_expire_async` | ms | 125 / 250 | ≥ 1 |
//! | `back_seek_max` | KiB | 16384 | ≥ 0 |
//! | `back_seek_penalty` | factor | 2 | ≥ 1 |
//! | `slice_sync` / `slice_async` | ms | 100 / 40 | ≥ 1 |
//! | `slice_async_rq` | requests | 2 | ≥ 1 |
//! | `slice_idle` | ms | 8 (0 on non-rotational devices) | ≥ 0 |
//! | `group_idle` | ms | 8 | ≥ 0 |
//! | `low_latency` | 0/1 | 1 | 0, 1 |
//! | `target_latency` | ms | 300 | ≥ 1 |
//! | `slice_idle_us`, `group_idle_us`, `slice_sync_us`, `slice_async_us`, `target_latency_us` | µs | as above | as above |
//!
//! # Simplifications (deliberate)
//!
//! * One cgroup: every queue is in the root group (blkio weights, group service trees and vdisktime are not
//!   modelled; with one group they do not change any decision).
//! * No queue merging of cooperating processes (`cfq_setup_merge`/`cfq_merge_cfqqs`); the close-cooperator check
//!   only chooses the next active queue. The nearest queue by next-request position stands in for the kernel's
//!   priority-tree neighbour lookup.
//! * A request is "activated" (counted in the driver, `last_position` moved) when dispatched: the simulator's
//!   legacy layer hands dispatched requests to the driver at once (`elv_dispatch_sort` order is not modelled).
//! * No request-to-request merges, no `REQ_PRIO`/`REQ_NOIDLE` hints, no `may_queue` (ELV_MQUEUE_MUST) exceptions,
//!   no ioprio or cgroup changes of a running process, processes never exit.
//! * Times in nanoseconds with HZ = 1000 where the kernel uses jiffies (`CFQ_MIN_TT` 2 ms, one jiffy 1 ms).
//! * Out-of-range tunables are rejected (the kernel clamps).
//! * The queue lock is the legacy block layer's (see [`crate::LEGACY_QUEUE_LOCK`]).

use crate::id_map::IdMap;
use std::collections::{BTreeSet, VecDeque};

use crate::{
    apply_merge, front_merge_candidates, hash_back_candidate, mergeable, tunable_in_range,
    tunable_switch, AfterCompletion, Elevator, IoprioClass, LockAcquisitions, Locking, MergeSide,
    Op, Request, TunableError, LEGACY_QUEUE_LOCK,
};

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
const JIFFY_NS: u64 = NS_PER_MS;
const CFQ_IDLE_DELAY_NS: i64 = (NS_PER_S / 5) as i64;
const CFQ_MIN_TT_NS: u64 = 2 * JIFFY_NS;
const CFQ_SLICE_SCALE: u64 = 5;
const CFQ_HW_QUEUE_MIN: u32 = 5;
const CFQQ_SEEK_THR: u64 = 8 * 100;
const CFQQ_CLOSE_THR: u64 = 8 * 1024;
const CFQQ_SECT_THR_NONROT: u32 = 2 * 32;
const IOPRIO_BE_NR: u64 = 8;
const HIST_DIVISOR: u32 = 4;
const PAGE_BYTES: u64 = 4096;

/// Workload classes, in the kernel's numbering.
const BE: usize = 0;
const RT: usize = 1;
const IDLE: usize = 2;
/// Workload types.
const ASYNC: usize = 0;
const SYNC_NOIDLE: usize = 1;
const SYNC: usize = 2;
/// Service trees: BE × 3 types, RT × 3 types, then the idle class's single tree.
const TREES: usize = 7;
const IDLE_TREE: usize = 6;

fn st_index(class: usize, wl_type: usize) -> usize {
    if class == IDLE {
        IDLE_TREE
    } else {
        class * 3 + wl_type
    }
}

fn rq_is_sync(rq: &Request) -> bool {
    rq.op == Op::Read || rq.sync
}

/// (workload class, ioprio level) of a request, as `cfq_init_prio_data` / `cfq_async_queue_prio` derive them.
fn class_and_level(rq: &Request) -> (usize, u8) {
    match rq.ioprio_class {
        IoprioClass::None => (BE, 4),
        IoprioClass::BestEffort => (BE, rq.ioprio_level.min(7)),
        IoprioClass::RealTime => (RT, rq.ioprio_level.min(7)),
        IoprioClass::Idle => (IDLE, 7),
    }
}

/// A decaying think-time average (`struct cfq_ttime`).
#[derive(Debug, Clone, Default)]
struct Ttime {
    last_end_request: u64,
    total: u64,
    mean: u64,
    samples: u64,
}

impl Ttime {
    fn new(now: u64) -> Self {
        Self {
            last_end_request: now,
            ..Default::default()
        }
    }

    fn valid(&self) -> bool {
        self.samples > 80
    }

    fn update(&mut self, now: u64, slice_idle_ns: u64) {
        let elapsed = now
            .saturating_sub(self.last_end_request)
            .min(2 * slice_idle_ns);
        self.samples = (7 * self.samples + 256) / 8;
        self.total = (7 * self.total + 256 * elapsed) / 8;
        self.mean = (self.total + 128) / self.samples;
    }
}

#[derive(Debug)]
struct Queue {
    process: u32,
    sync: bool,
    class: usize,
    level: u8,
    sort: BTreeSet<(u64, u32)>,
    fifo: VecDeque<u32>,
    next_rq: Option<u32>,
    queued: [u32; 2],
    dispatched: u32,
    on_rr: bool,
    wait_request: bool,
    must_dispatch: bool,
    fifo_expire: bool,
    idle_window: bool,
    slice_new: bool,
    deep: bool,
    wait_busy: bool,
    /// Service tree and position in it.
    st: Option<usize>,
    rb_key: i64,
    rb_seq: u64,
    slice_start: u64,
    slice_end: u64,
    allocated_slice: u64,
    slice_resid: i64,
    slice_dispatch: u32,
    seek_history: u32,
    last_request_pos: u64,
    /// The process's think time (`cic->ttime`; sync queues only).
    ttime: Ttime,
}

impl Queue {
    fn wl_type(&self) -> usize {
        if !self.sync {
            ASYNC
        } else if !self.idle_window {
            SYNC_NOIDLE
        } else {
            SYNC
        }
    }

    fn seeky(&self) -> bool {
        self.seek_history.count_ones() > 32 / 8
    }
}

struct Held {
    rq: Request,
    queue: usize,
    fifo_time: u64,
}

#[derive(Default)]
struct Tree {
    set: BTreeSet<(i64, u64, usize)>,
    ttime: Ttime,
}

pub struct Cfq {
    rotational: bool,
    queues: Vec<Queue>,
    sync_of: IdMap<u32, usize>,
    async_of: IdMap<(usize, u8), usize>,
    held: IdMap<u32, Held>,
    in_flight: IdMap<u32, usize>,
    trees: [Tree; TREES],
    tree_seq: u64,
    // The root group.
    group_dispatched: u32,
    group_ttime: Ttime,
    busy_queues_avg: [u32; 2],
    saved_wl: Option<(u64, usize, usize)>,
    // cfq_data.
    serving_class: usize,
    serving_type: usize,
    workload_expires: i64,
    busy_queues: u32,
    busy_sync_queues: u32,
    rq_in_driver: u32,
    rq_in_flight: [u32; 2],
    rq_queued: u32,
    hw_tag: i8,
    hw_tag_est_depth: u32,
    hw_tag_samples: u32,
    idle_timer: Option<u64>,
    active: Option<usize>,
    active_cic: Option<u32>,
    last_position: u64,
    last_delayed_sync: i64,
    last_merge: Option<u32>,
    // Tunables.
    quantum: u32,
    fifo_expire_ns: [u64; 2],
    back_seek_max_kib: u64,
    back_seek_penalty: u64,
    slice_ns: [u64; 2],
    slice_async_rq: u64,
    slice_idle_ns: u64,
    group_idle_ns: u64,
    low_latency: bool,
    target_latency_ns: u64,
}

const TUNABLES: [&str; 17] = [
    "quantum",
    "fifo_expire_sync",
    "fifo_expire_async",
    "back_seek_max",
    "back_seek_penalty",
    "slice_sync",
    "slice_async",
    "slice_async_rq",
    "slice_idle",
    "group_idle",
    "low_latency",
    "target_latency",
    "slice_idle_us",
    "group_idle_us",
    "slice_sync_us",
    "slice_async_us",
    "target_latency_us",
];

impl Cfq {
    /// CFQ as registered on a rotational (true) or non-rotational device: on the latter `slice_idle` starts at 0.
    pub fn new(rotational: bool) -> Self {
        Self {
            rotational,
            queues: Vec::new(),
            sync_of: IdMap::default(),
            async_of: IdMap::default(),
            held: IdMap::default(),
            in_flight: IdMap::default(),
            trees: Default::default(),
            tree_seq: 0,
            group_dispatched: 0,
            group_ttime: Ttime::new(0),
            busy_queues_avg: [0, 0],
            saved_wl: None,
            serving_class: BE,
            serving_type: ASYNC,
            workload_expires: 0,
            busy_queues: 0,
            busy_sync_queues: 0,
            rq_in_driver: 0,
            rq_in_flight: [0, 0],
            rq_queued: 0,
            hw_tag: -1,
            hw_tag_est_depth: 0,
            hw_tag_samples: 0,
            idle_timer: None,
            active: None,
            active_cic: None,
            last_position: 0,
            last_delayed_sync: -(NS_PER_S as i64),
            last_merge: None,
            quantum: 8,
            fifo_expire_ns: [NS_PER_S / 4, NS_PER_S / 8],
            back_seek_max_kib: 16 * 1024,
            back_seek_penalty: 2,
            slice_ns: [NS_PER_S / 25, NS_PER_S / 10],
            slice_async_rq: 2,
            slice_idle_ns: if rotational { NS_PER_S / 125 } else { 0 },
            group_idle_ns: NS_PER_S / 125,
            low_latency: true,
            target_latency_ns: NS_PER_S * 3 / 10,
        }
    }

    // ------------------------------------------------------------ helpers on queues and trees

    fn nonrot_ncq(&self) -> bool {
        !self.rotational && self.hw_tag != 0
    }

    /// Busy queues of the (only) group: those on a service tree.
    fn nr_cfqq(&self) -> usize {
        self.trees.iter().map(|t| t.set.len()).sum()
    }

    fn busy_in_class(&self, class: usize) -> usize {
        if class == IDLE {
            self.trees[IDLE_TREE].set.len()
        } else {
            (0..3)
                .map(|t| self.trees[st_index(class, t)].set.len())
                .sum()
        }
    }

    fn busy_async(&self) -> usize {
        self.trees[st_index(RT, ASYNC)].set.len() + self.trees[st_index(BE, ASYNC)].set.len()
    }

    fn first_in(&self, st: usize) -> Option<usize> {
        self.trees[st].set.iter().next().map(|&(_, _, q)| q)
    }

    fn queue_for(&mut self, rq: &Request, now: u64) -> usize {
        let sync = rq_is_sync(rq);
        let (class, level) = class_and_level(rq);
        let existing = if sync {
            self.sync_of.get(&rq.process).copied()
        } else {
            self.async_of.get(&(class, level)).copied()
        };
        if let Some(q) = existing {
            return q;
        }
        let q = self.queues.len();
        self.queues.push(Queue {
            process: rq.process,
            sync,
            class,
            level,
            sort: BTreeSet::new(),
            fifo: VecDeque::new(),
            next_rq: None,
            queued: [0, 0],
            dispatched: 0,
            on_rr: false,
            wait_request: false,
            must_dispatch: false,
            fifo_expire: false,
            idle_window: sync && class != IDLE,
            slice_new: false,
            deep: false,
            wait_busy: false,
            st: None,
            rb_key: 0,
            rb_seq: 0,
            slice_start: 0,
            slice_end: 0,
            allocated_slice: 0,
            slice_resid: 0,
            slice_dispatch: 0,
            seek_history: 0,
            last_request_pos: 0,
            ttime: Ttime::new(now),
        });
        if sync {
            self.sync_of.insert(rq.process, q);
        } else {
            self.async_of.insert((class, level), q);
        }
        q
    }

    fn prio_slice(&self, sync: bool, level: u8) -> i64 {
        let base = self.slice_ns[sync as usize] as i64;
        base + base / CFQ_SLICE_SCALE as i64 * (4 - level as i64)
    }

    fn avg_queues(&mut self, rt: bool) -> u32 {
        let busy = self.busy_in_class(if rt { RT } else { BE }) as u32;
        let avg = &mut self.busy_queues_avg[rt as usize];
        let (min_q, max_q) = ((*avg).min(busy), (*avg).max(busy));
        *avg = ((HIST_DIVISOR - 1) * max_q + min_q + HIST_DIVISOR / 2) / HIST_DIVISOR;
        *avg
    }

    fn scaled_slice(&mut self, q: usize) -> u64 {
        let (sync, level, rt) = {
            let q = &self.queues[q];
            (q.sync, q.level, q.class == RT)
        };
        let mut slice = self.prio_slice(sync, level).max(1) as u64;
        if self.low_latency {
            let iq = self.avg_queues(rt) as u64;
            let sync_slice = self.slice_ns[1];
            let expect_latency = sync_slice * iq;
            let group_slice = self.target_latency_ns;
            if expect_latency > group_slice {
                let base_low_slice = 2 * self.slice_idle_ns;
                let low_slice = (base_low_slice * slice / sync_slice).min(slice);
                slice = (slice * group_slice / expect_latency).max(low_slice);
            }
        }
        slice
    }

    fn slice_used(&self, q: usize, now: u64) -> bool {
        let q = &self.queues[q];
        !q.slice_new && now >= q.slice_end
    }

    fn thinktime_big(&self, ttime: &Ttime, group_idle: bool) -> bool {
        if !ttime.valid() {
            return false;
        }
        let slice = if group_idle {
            self.group_idle_ns
        } else {
            self.slice_idle_ns
        };
        ttime.mean > slice
    }

    fn service_tree_add(&mut self, q: usize, add_front: bool, now: u64) {
        let st = st_index(self.queues[q].class, self.queues[q].wl_type());
        let key = if self.queues[q].class == IDLE {
            let last = self.trees[st]
                .set
                .iter()
                .next_back()
                .filter(|&&(_, _, other)| other != q)
                .map(|&(k, _, _)| k)
                .unwrap_or(now as i64);
            CFQ_IDLE_DELAY_NS + last
        } else if !add_front {
            let offset = (self.nr_cfqq() as i64 - 1)
                * (self.prio_slice(true, 0)
                    - self.prio_slice(self.queues[q].sync, self.queues[q].level));
            let key = offset + now as i64 - self.queues[q].slice_resid;
            self.queues[q].slice_resid = 0;
            key
        } else {
            let first = self.trees[st]
                .set
                .iter()
                .next()
                .map(|&(k, _, _)| k)
                .unwrap_or(now as i64);
            first - NS_PER_S as i64
        };
        if let Some(old) = self.queues[q].st {
            if key == self.queues[q].rb_key && old == st {
                return;
            }
            let (k, s) = (self.queues[q].rb_key, self.queues[q].rb_seq);
            self.trees[old].set.remove(&(k, s, q));
        }
        self.tree_seq += 1;
        let seq = self.tree_seq;
        self.trees[st].set.insert((key, seq, q));
        let qq = &mut self.queues[q];
        qq.st = Some(st);
        qq.rb_key = key;
        qq.rb_seq = seq;
    }

    fn add_rr(&mut self, q: usize, now: u64) {
        self.queues[q].on_rr = true;
        self.busy_queues += 1;
        if self.queues[q].sync {
            self.busy_sync_queues += 1;
        }
        self.service_tree_add(q, false, now);
    }

    fn del_rr(&mut self, q: usize) {
        let qq = &mut self.queues[q];
        qq.on_rr = false;
        if let Some(st) = qq.st.take() {
            self.trees[st].set.remove(&(qq.rb_key, qq.rb_seq, q));
        }
        if self.nr_cfqq() == 0 {
            self.saved_wl = None;
        }
        self.busy_queues -= 1;
        if self.queues[q].sync {
            self.busy_sync_queues -= 1;
        }
    }

    fn resort(&mut self, q: usize, now: u64) {
        if self.queues[q].on_rr {
            self.service_tree_add(q, false, now);
        }
    }

    // ------------------------------------------------------------ request choice

    /// `cfq_choose_req`: which of two requests to serve next from `last`.
    fn choose_req(&self, a: Option<u32>, b: Option<u32>, last: u64) -> Option<u32> {
        let (a, b) = match (a, b) {
            (None, b) => return b,
            (a, None) => return a,
            (Some(a), Some(b)) if a == b => return Some(b),
            (Some(a), Some(b)) => (a, b),
        };
        let (ra, rb) = (&self.held[&a].rq, &self.held[&b].rq);
        if rq_is_sync(ra) != rq_is_sync(rb) {
            return Some(if rq_is_sync(ra) { a } else { b });
        }
        let back_max = self.back_seek_max_kib * 2;
        let dist = |s: u64| -> Option<u64> {
            if s >= last {
                Some(s - last)
            } else if s + back_max >= last {
                Some((last - s) * self.back_seek_penalty)
            } else {
                None // wraps: behind the head beyond back_seek_max
            }
        };
        let (s1, s2) = (ra.sector, rb.sector);
        Some(match (dist(s1), dist(s2)) {
            (Some(d1), Some(d2)) => {
                if d1 < d2 || (d1 == d2 && s1 >= s2) {
                    a
                } else {
                    b
                }
            }
            (Some(_), None) => a,
            (None, Some(_)) => b,
            (None, None) => {
                if s1 <= s2 {
                    a
                } else {
                    b
                }
            }
        })
    }

    /// `cfq_find_next_rq`: the best neighbour of `last` (the next one wrapping to the first).
    fn find_next_rq(&self, q: usize, last: u32) -> Option<u32> {
        use std::ops::Bound::{Excluded, Unbounded};
        let sector = self.held[&last].rq.sector;
        let sort = &self.queues[q].sort;
        let prev = sort.range(..(sector, last)).next_back().map(|&(_, id)| id);
        let next = sort
            .range((Excluded((sector, last)), Unbounded))
            .next()
            .map(|&(_, id)| id)
            .or_else(|| {
                sort.iter()
                    .next()
                    .map(|&(_, id)| id)
                    .filter(|&id| id != last)
            });
        self.choose_req(next, prev, sector)
    }

    fn add_rq_rb(&mut self, id: u32, now: u64) {
        let (q, sector, sync) = {
            let h = &self.held[&id];
            (h.queue, h.rq.sector, rq_is_sync(&h.rq))
        };
        self.queues[q].queued[sync as usize] += 1;
        self.queues[q].sort.insert((sector, id));
        if !self.queues[q].on_rr {
            self.add_rr(q, now);
        }
        self.queues[q].next_rq =
            self.choose_req(self.queues[q].next_rq, Some(id), self.last_position);
    }

    fn remove_request(&mut self, id: u32) -> Held {
        let q = self.held[&id].queue;
        if self.queues[q].next_rq == Some(id) {
            self.queues[q].next_rq = self.find_next_rq(q, id);
        }
        let held = self.held.remove(&id).expect("removing a held request");
        let qq = &mut self.queues[q];
        qq.fifo.retain(|&f| f != id);
        qq.sort.remove(&(held.rq.sector, id));
        qq.queued[rq_is_sync(&held.rq) as usize] -= 1;
        self.rq_queued -= 1;
        if self.last_merge == Some(id) {
            self.last_merge = None;
        }
        held
    }

    // ------------------------------------------------------------ idling and slices

    fn should_idle(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        let Some(st) = qq.st else {
            return false;
        };
        if self.slice_idle_ns == 0 || qq.class == IDLE {
            return false;
        }
        if qq.idle_window && !self.nonrot_ncq() {
            return true;
        }
        self.trees[st].set.len() == 1
            && qq.sync
            && !self.thinktime_big(&self.trees[st].ttime, false)
    }

    fn close_cooperator(&self, cur: usize) -> Option<usize> {
        let c = &self.queues[cur];
        if c.class == IDLE || !c.sync || c.seeky() || self.nr_cfqq() == 1 {
            return None;
        }
        let pos = self.last_position;
        let (best, dist) = self
            .queues
            .iter()
            .enumerate()
            .filter(|(i, o)| *i != cur && o.on_rr && o.class != IDLE && o.level == c.level)
            .filter_map(|(i, o)| {
                o.next_rq
                    .map(|id| (i, self.held[&id].rq.sector.abs_diff(pos)))
            })
            .min_by_key(|&(i, d)| (d, i))?;
        let b = &self.queues[best];
        (dist <= CFQQ_CLOSE_THR && b.sync && !b.seeky() && (b.class == RT) == (c.class == RT))
            .then_some(best)
    }

    fn arm_slice_timer(&mut self, now: u64) {
        let Some(q) = self.active else { return };
        if self.nonrot_ncq() && self.group_idle_ns == 0 {
            return;
        }
        let mut group_idle = 0;
        if !self.should_idle(q) {
            group_idle = self.group_idle_ns;
            if group_idle == 0 {
                return;
            }
        }
        let qq = &self.queues[q];
        if qq.dispatched > 0 || self.active_cic.is_none() {
            return;
        }
        if qq.ttime.valid() && qq.slice_end.wrapping_sub(now) < qq.ttime.mean {
            return;
        }
        if group_idle > 0 && (self.nr_cfqq() > 1 || self.thinktime_big(&self.group_ttime, true)) {
            return;
        }
        self.queues[q].wait_request = true;
        let sl = if group_idle > 0 {
            group_idle
        } else {
            self.slice_idle_ns
        };
        self.idle_timer = Some(now + sl);
    }

    fn should_wait_busy(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        if !qq.sort.is_empty() || self.nr_cfqq() > 1 || self.thinktime_big(&self.group_ttime, true)
        {
            return false;
        }
        if self.slice_used(q, now) {
            return true;
        }
        let left = qq.slice_end.wrapping_sub(now);
        (self.active_cic.is_some() && qq.ttime.valid() && left < qq.ttime.mean) || left <= JIFFY_NS
    }

    fn set_prio_slice(&mut self, q: usize, now: u64) {
        let slice = self.scaled_slice(q);
        let qq = &mut self.queues[q];
        qq.slice_start = now;
        qq.slice_end = now + slice;
        qq.allocated_slice = slice;
    }

    fn slice_expired(&mut self, timed_out: bool, now: u64) {
        let Some(q) = self.active else { return };
        if self.queues[q].wait_request {
            self.idle_timer = None;
        }
        self.queues[q].wait_request = false;
        self.queues[q].wait_busy = false;
        if timed_out {
            self.queues[q].slice_resid = if self.queues[q].slice_new {
                self.scaled_slice(q) as i64
            } else {
                self.queues[q].slice_end as i64 - now as i64
            };
        }
        // cfq_group_served: remember the workload for the next selection.
        self.saved_wl = (self.workload_expires > now as i64).then(|| {
            (
                (self.workload_expires - now as i64) as u64,
                self.serving_type,
                self.serving_class,
            )
        });
        if self.queues[q].on_rr && self.queues[q].sort.is_empty() {
            self.del_rr(q);
        }
        self.resort(q, now);
        self.active = None;
        self.active_cic = None;
    }

    fn choose_wl_type(&self, class: usize) -> usize {
        let mut best = SYNC_NOIDLE;
        let mut lowest: Option<i64> = None;
        for t in 0..=SYNC {
            if let Some(&(key, _, _)) = self.trees[st_index(class, t)].set.iter().next() {
                if lowest.is_none_or(|l| key < l) {
                    lowest = Some(key);
                    best = t;
                }
            }
        }
        best
    }

    fn choose_wl_class_and_type(&mut self, now: u64) {
        let original = self.serving_class;
        let now_i = now as i64;
        self.serving_class = if self.busy_in_class(RT) > 0 {
            RT
        } else if self.busy_in_class(BE) > 0 {
            BE
        } else {
            self.serving_class = IDLE;
            self.workload_expires = now_i + JIFFY_NS as i64;
            return;
        };
        if original == self.serving_class {
            let count = self.trees[st_index(self.serving_class, self.serving_type)]
                .set
                .len();
            if count > 0 && now_i <= self.workload_expires {
                return;
            }
        }
        self.serving_type = self.choose_wl_type(self.serving_class);
        let count = self.trees[st_index(self.serving_class, self.serving_type)]
            .set
            .len() as u64;
        let group_slice = self.target_latency_ns;
        let divisor = (self.busy_queues_avg[self.serving_class] as u64)
            .max(self.busy_in_class(self.serving_class) as u64)
            .max(1);
        let mut slice = group_slice * count / divisor;
        if self.serving_type == ASYNC {
            let tmp = self.target_latency_ns * self.busy_async() as u64
                / (self.busy_queues as u64).max(1);
            slice = slice.min(tmp);
            slice = slice * self.slice_ns[0] / self.slice_ns[1];
        } else {
            slice = slice.max(2 * self.slice_idle_ns);
        }
        slice = slice.max(CFQ_MIN_TT_NS);
        self.workload_expires = now_i + slice as i64;
    }

    fn choose_group(&mut self, now: u64) {
        match self.saved_wl {
            Some((slice, wl_type, class)) => {
                self.workload_expires = now as i64 + slice as i64;
                self.serving_type = wl_type;
                self.serving_class = class;
            }
            None => self.workload_expires = now as i64 - 1,
        }
        self.choose_wl_class_and_type(now);
    }

    fn set_active(&mut self, q: Option<usize>) -> Option<usize> {
        let q = q.or_else(|| {
            if self.rq_queued == 0 {
                return None;
            }
            self.first_in(st_index(self.serving_class, self.serving_type))
        });
        if let Some(q) = q {
            let qq = &mut self.queues[q];
            qq.slice_start = 0;
            qq.allocated_slice = 0;
            qq.slice_end = 0;
            qq.slice_dispatch = 0;
            qq.wait_request = false;
            qq.must_dispatch = false;
            qq.fifo_expire = false;
            qq.slice_new = true;
            self.idle_timer = None;
        }
        self.active = q;
        q
    }

    /// `cfq_select_queue`.
    fn select_queue(&mut self, now: u64) -> Option<usize> {
        let mut new_cfqq = None;
        'expire: {
            let Some(q) = self.active else {
                break 'expire;
            };
            if self.rq_queued == 0 {
                return None;
            }
            'check_group_idle: {
                if self.queues[q].wait_busy && !self.queues[q].sort.is_empty() {
                    self.slice_expired(false, now);
                    break 'expire;
                }
                if self.slice_used(q, now) && !self.queues[q].must_dispatch {
                    let qq = &self.queues[q];
                    if self.nr_cfqq() == 1
                        && qq.sort.is_empty()
                        && qq.dispatched > 0
                        && self.should_idle(q)
                    {
                        return None;
                    }
                    break 'check_group_idle;
                }
                if !self.queues[q].sort.is_empty() {
                    return Some(q);
                }
                if let Some(c) = self.close_cooperator(q) {
                    new_cfqq = Some(c);
                    self.slice_expired(false, now);
                    break 'expire;
                }
                if self.idle_timer.is_some() {
                    return None;
                }
                let qq = &mut self.queues[q];
                if qq.seeky()
                    && qq.idle_window
                    && (qq.slice_new
                        || qq.slice_end.wrapping_sub(now) > now.wrapping_sub(qq.slice_start))
                {
                    qq.deep = false;
                    qq.idle_window = false;
                }
                if self.queues[q].dispatched > 0 && self.should_idle(q) {
                    return None;
                }
            }
            if self.group_idle_ns > 0
                && self.nr_cfqq() == 1
                && self.group_dispatched > 0
                && !self.thinktime_big(&self.group_ttime, true)
            {
                return None;
            }
            self.slice_expired(false, now);
        }
        if new_cfqq.is_none() {
            if self.busy_queues == 0 {
                return None;
            }
            self.choose_group(now);
        }
        self.set_active(new_cfqq)
    }

    fn slice_used_soon(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        qq.slice_new || now + self.slice_idle_ns * qq.dispatched as u64 > qq.slice_end
    }

    fn may_dispatch(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        if qq.must_dispatch {
            return true;
        }
        if self.should_idle(q) && self.rq_in_flight[0] > 0 {
            return false;
        }
        if self.rq_in_flight[1] > 0 && !qq.sync {
            return false;
        }
        let mut max_dispatch: u64 = if qq.class == IDLE {
            1
        } else {
            (self.quantum as u64 / 2).max(1)
        };
        if qq.dispatched as u64 >= max_dispatch {
            if qq.class == IDLE {
                return false;
            }
            let promote_sync = qq.sync && self.busy_sync_queues == 1;
            if self.busy_queues > 1 && self.slice_used_soon(q, now) && !promote_sync {
                return false;
            }
            max_dispatch = if self.busy_queues == 1 || promote_sync {
                u64::MAX
            } else {
                self.quantum as u64
            };
        }
        if !qq.sync && self.low_latency {
            let last_sync = (now as i64 - self.last_delayed_sync).max(0) as u64;
            let mut depth = last_sync / self.slice_ns[1];
            if depth == 0 && qq.dispatched == 0 {
                depth = 1;
            }
            max_dispatch = max_dispatch.min(depth);
        }
        (qq.dispatched as u64) < max_dispatch
    }

    fn should_preempt(&self, new_q: usize, rq: &Request, now: u64) -> bool {
        let Some(cur) = self.active else { return false };
        let (n, c) = (&self.queues[new_q], &self.queues[cur]);
        if n.class == IDLE {
            return false;
        }
        if c.class == IDLE {
            return true;
        }
        if c.class == RT && n.class != RT {
            return false;
        }
        if rq_is_sync(rq) && !c.sync && !c.must_dispatch {
            return true;
        }
        if self.slice_used(cur, now) {
            return true;
        }
        if n.class == RT && c.class != RT {
            return true;
        }
        if self.serving_type == SYNC_NOIDLE && n.wl_type() == SYNC_NOIDLE && c.sort.is_empty() {
            return true;
        }
        if c.sort.is_empty() && !self.should_idle(cur) {
            return true;
        }
        if self.active_cic.is_none() || !c.wait_request {
            return false;
        }
        rq.sector.abs_diff(self.last_position) <= CFQQ_CLOSE_THR
    }

    fn preempt(&mut self, q: usize, now: u64) {
        let old_type = self.active.map(|a| self.queues[a].wl_type());
        self.slice_expired(true, now);
        if old_type != Some(self.queues[q].wl_type()) {
            self.saved_wl = None;
        }
        self.service_tree_add(q, true, now);
        self.queues[q].slice_end = 0;
        self.queues[q].slice_new = true;
    }

    fn update_hw_tag(&mut self) {
        if self.rq_in_driver > self.hw_tag_est_depth {
            self.hw_tag_est_depth = self.rq_in_driver;
        }
        if self.hw_tag == 1 {
            return;
        }
        if self.rq_queued <= CFQ_HW_QUEUE_MIN && self.rq_in_driver <= CFQ_HW_QUEUE_MIN {
            return;
        }
        if let Some(q) = self.active {
            let qq = &self.queues[q];
            if qq.idle_window
                && qq.dispatched + qq.queued[0] + qq.queued[1] < CFQ_HW_QUEUE_MIN
                && self.rq_in_driver < CFQ_HW_QUEUE_MIN
            {
                return;
            }
        }
        self.hw_tag_samples += 1;
        if self.hw_tag_samples <= 50 {
            return;
        }
        self.hw_tag = (self.hw_tag_est_depth >= CFQ_HW_QUEUE_MIN) as i8;
    }

    /// Merge `bio` into held request `id` on one of `sides`, if CFQ allows it (same queue, no sync bio into an async
    /// request). A front merge repositions the request (`cfq_reposition_rq_rb`).
    fn try_merge(
        &mut self,
        id: u32,
        bio_queue: Option<usize>,
        bio: &Request,
        max_sectors: u32,
        sides: &[MergeSide],
    ) -> bool {
        let Some(h) = self.held.get(&id) else {
            return false;
        };
        if Some(h.queue) != bio_queue || (rq_is_sync(bio) && !rq_is_sync(&h.rq)) {
            return false;
        }
        let Some(side) = mergeable(&h.rq, bio, max_sectors).filter(|s| sides.contains(s)) else {
            return false;
        };
        let q = h.queue;
        let old_sector = h.rq.sector;
        apply_merge(&mut self.held.get_mut(&id).unwrap().rq, bio, side);
        if side == MergeSide::Front {
            let qq = &mut self.queues[q];
            qq.sort.remove(&(old_sector, id));
            qq.sort.insert((bio.sector, id));
            let next = self.choose_req(self.queues[q].next_rq, Some(id), self.last_position);
            self.queues[q].next_rq = next;
        }
        self.last_merge = Some(id);
        true
    }
}

impl Elevator for Cfq {
    fn name(&self) -> &'static str {
        "cfq"
    }

    fn locking(&self) -> Locking {
        Locking::Device
    }

    fn lock_acquisitions(&self) -> LockAcquisitions {
        LEGACY_QUEUE_LOCK
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        if bio.op == Op::Flush {
            return None;
        }
        let bio_queue = if rq_is_sync(bio) {
            self.sync_of.get(&bio.process).copied()
        } else {
            self.async_of.get(&class_and_level(bio)).copied()
        };
        if let Some(id) = self.last_merge {
            if self.try_merge(
                id,
                bio_queue,
                bio,
                max_sectors,
                &[MergeSide::Back, MergeSide::Front],
            ) {
                return Some(id);
            }
        }
        let q = bio_queue?;
        let back = hash_back_candidate(&self.queues[q].sort, bio, |id| {
            self.held[&id].rq.end_sector()
        });
        if let Some(id) = back {
            if self.try_merge(id, bio_queue, bio, max_sectors, &[MergeSide::Back]) {
                return Some(id);
            }
        }
        front_merge_candidates(&self.queues[q].sort, bio)
            .into_iter()
            .find(|&id| self.try_merge(id, bio_queue, bio, max_sectors, &[MergeSide::Front]))
    }

    fn insert(&mut self, rq: Request, now_ns: u64) {
        let now = now_ns;
        let q = self.queue_for(&rq, now);
        let id = rq.id;
        let sync = rq_is_sync(&rq);
        let (bytes, sector, end) = (rq.bytes(), rq.sector, rq.end_sector());
        let nr_sectors = rq.nr_sectors;
        let fifo_time = now + self.fifo_expire_ns[sync as usize];
        let rq_for_preempt = rq.clone();
        self.held.insert(
            id,
            Held {
                rq,
                queue: q,
                fifo_time,
            },
        );
        self.queues[q].fifo.push_back(id);
        self.add_rq_rb(id, now);
        if self.last_merge.is_none() {
            self.last_merge = Some(id);
        }
        // cfq_rq_enqueued.
        self.rq_queued += 1;
        if self.queues[q].sync {
            let slice_idle = self.slice_idle_ns;
            self.queues[q].ttime.update(now, slice_idle);
            if let Some(st) = self.queues[q].st {
                self.trees[st].ttime.update(now, slice_idle);
            }
        }
        let group_idle = self.group_idle_ns;
        self.group_ttime.update(now, group_idle);
        // cfq_update_io_seektime.
        let rotational = self.rotational;
        let qq = &mut self.queues[q];
        let sdist = if qq.last_request_pos > 0 {
            qq.last_request_pos.abs_diff(sector)
        } else {
            0
        };
        qq.seek_history <<= 1;
        qq.seek_history |= if rotational {
            (sdist > CFQQ_SEEK_THR) as u32
        } else {
            (nr_sectors < CFQQ_SECT_THR_NONROT) as u32
        };
        // cfq_update_idle_window.
        if qq.sync && qq.class != IDLE {
            if qq.queued[0] + qq.queued[1] >= 4 {
                qq.deep = true;
            }
            let seeky = qq.seeky();
            if self.slice_idle_ns == 0 || (!qq.deep && seeky) {
                qq.idle_window = false;
            } else if qq.ttime.valid() {
                qq.idle_window = qq.ttime.mean <= self.slice_idle_ns;
            }
        }
        qq.last_request_pos = end;
        if self.active == Some(q) {
            if self.queues[q].wait_request {
                if bytes > PAGE_BYTES || self.busy_queues > 1 {
                    self.idle_timer = None;
                    self.queues[q].wait_request = false;
                } else {
                    self.queues[q].must_dispatch = true;
                }
            }
        } else if self.should_preempt(q, &rq_for_preempt, now) {
            self.preempt(q, now);
        }
    }

    fn dispatch(&mut self, _hctx: u32, now_ns: u64) -> Option<Request> {
        let now = now_ns;
        if self.busy_queues == 0 {
            return None;
        }
        let q = self.select_queue(now)?;
        if self.queues[q].sort.is_empty() {
            return None;
        }
        // cfq_check_fifo: once per slice.
        let mut fifo_rq = None;
        if !self.queues[q].fifo_expire {
            self.queues[q].fifo_expire = true;
            if let Some(&head) = self.queues[q].fifo.front() {
                if now >= self.held[&head].fifo_time {
                    fifo_rq = Some(head);
                    self.queues[q].must_dispatch = true;
                }
            }
        }
        if !self.may_dispatch(q, now) {
            return None;
        }
        let id = fifo_rq.or(self.queues[q].next_rq)?;
        // cfq_dispatch_insert, then activation by the driver.
        self.queues[q].next_rq = self.find_next_rq(q, id);
        let held = self.remove_request(id);
        let qq = &mut self.queues[q];
        qq.dispatched += 1;
        self.group_dispatched += 1;
        self.rq_in_flight[qq.sync as usize] += 1;
        self.rq_in_driver += 1;
        self.last_position = held.rq.end_sector();
        self.in_flight.insert(id, q);
        if self.active_cic.is_none() {
            self.active_cic = Some(held.rq.process);
        }
        let qq = &mut self.queues[q];
        qq.slice_dispatch += 1;
        qq.must_dispatch = false;
        let maxrq = 2 * self.slice_async_rq * (IOPRIO_BE_NR - qq.level as u64);
        if self.busy_queues > 1
            && ((!qq.sync && qq.slice_dispatch as u64 >= maxrq) || qq.class == IDLE)
        {
            qq.slice_end = now + 1;
            self.slice_expired(false, now);
        }
        Some(held.rq)
    }

    fn has_work(&self, _hctx: u32) -> bool {
        self.rq_queued > 0
    }

    fn completed(&mut self, rq: &Request, _issue_ns: u64, now_ns: u64) -> AfterCompletion {
        let now = now_ns;
        let q = self
            .in_flight
            .remove(&rq.id)
            .unwrap_or_else(|| panic!("request {} completed but was not dispatched", rq.id));
        self.update_hw_tag();
        self.rq_in_driver -= 1;
        self.queues[q].dispatched -= 1;
        self.group_dispatched -= 1;
        self.rq_in_flight[self.queues[q].sync as usize] -= 1;
        if rq_is_sync(rq) {
            self.queues[q].ttime.last_end_request = now;
            let st = self.queues[q]
                .st
                .unwrap_or_else(|| st_index(self.queues[q].class, self.queues[q].wl_type()));
            self.trees[st].ttime.last_end_request = now;
            if rq.start_ns + self.fifo_expire_ns[1] <= now {
                self.last_delayed_sync = now as i64;
            }
        }
        self.group_ttime.last_end_request = now;
        if self.active == Some(q) {
            let empty = self.queues[q].sort.is_empty();
            if self.queues[q].slice_new {
                self.set_prio_slice(q, now);
                self.queues[q].slice_new = false;
            }
            if self.should_wait_busy(q, now) {
                let extend = if self.slice_idle_ns > 0 {
                    self.slice_idle_ns
                } else {
                    self.group_idle_ns
                };
                self.queues[q].slice_end = now + extend;
                self.queues[q].wait_busy = true;
            }
            if self.slice_used(q, now) || self.queues[q].class == IDLE {
                self.slice_expired(true, now);
            } else if rq_is_sync(rq) && empty && self.close_cooperator(q).is_none() {
                self.arm_slice_timer(now);
            }
        }
        AfterCompletion::RunQueue
    }

    fn next_timer_ns(&self) -> Option<u64> {
        self.idle_timer
    }

    /// `cfq_idle_slice_timer`.
    fn timer(&mut self, now_ns: u64) {
        let now = now_ns;
        if self.idle_timer.is_none_or(|t| t > now) {
            return;
        }
        self.idle_timer = None;
        let mut timed_out = true;
        if let Some(q) = self.active {
            timed_out = false;
            if self.queues[q].must_dispatch {
                return;
            }
            if !self.slice_used(q, now) {
                if self.busy_queues == 0 || !self.queues[q].sort.is_empty() {
                    return;
                }
                self.queues[q].deep = false;
            }
        }
        self.slice_expired(timed_out, now);
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        let ms = |ns: u64| (ns / NS_PER_MS) as i64;
        let us = |ns: u64| (ns / NS_PER_US) as i64;
        vec![
            ("quantum", self.quantum as i64),
            ("fifo_expire_sync", ms(self.fifo_expire_ns[1])),
            ("fifo_expire_async", ms(self.fifo_expire_ns[0])),
            ("back_seek_max", self.back_seek_max_kib as i64),
            ("back_seek_penalty", self.back_seek_penalty as i64),
            ("slice_sync", ms(self.slice_ns[1])),
            ("slice_async", ms(self.slice_ns[0])),
            ("slice_async_rq", self.slice_async_rq as i64),
            ("slice_idle", ms(self.slice_idle_ns)),
            ("group_idle", ms(self.group_idle_ns)),
            ("low_latency", self.low_latency as i64),
            ("target_latency", ms(self.target_latency_ns)),
            ("slice_idle_us", us(self.slice_idle_ns)),
            ("group_idle_us", us(self.group_idle_ns)),
            ("slice_sync_us", us(self.slice_ns[1])),
            ("slice_async_us", us(self.slice_ns[0])),
            ("target_latency_us", us(self.target_latency_ns)),
        ]
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        let range = |min: i64, unit: &str| {
            tunable_in_range(name, value, min, u32::MAX as i64, unit).map(|v| v as u64)
        };
        match name {
            "quantum" => self.quantum = range(1, "")? as u32,
            "fifo_expire_sync" => self.fifo_expire_ns[1] = range(1, " milliseconds")? * NS_PER_MS,
            "fifo_expire_async" => self.fifo_expire_ns[0] = range(1, " milliseconds")? * NS_PER_MS,
            "back_seek_max" => self.back_seek_max_kib = range(0, " KiB")?,
            "back_seek_penalty" => self.back_seek_penalty = range(1, "")?,
            "slice_sync" => self.slice_ns[1] = range(1, " milliseconds")? * NS_PER_MS,
            "slice_async" => self.slice_ns[0] = range(1, " milliseconds")? * NS_PER_MS,
            "slice_async_rq" => self.slice_async_rq = range(1, "")?,
            "slice_idle" => self.slice_idle_ns = range(0, " milliseconds")? * NS_PER_MS,
            "group_idle" => self.group_idle_ns = range(0, " milliseconds")? * NS_PER_MS,
            "target_latency" => self.target_latency_ns = range(1, " milliseconds")? * NS_PER_MS,
            "slice_idle_us" => self.slice_idle_ns = range(0, " microseconds")? * NS_PER_US,
            "group_idle_us" => self.group_idle_ns = range(0, " microseconds")? * NS_PER_US,
            "slice_sync_us" => self.slice_ns[1] = range(1, " microseconds")? * NS_PER_US,
            "slice_async_us" => self.slice_ns[0] = range(1, " microseconds")? * NS_PER_US,
            "target_latency_us" => self.target_latency_ns = range(1, " microseconds")? * NS_PER_US,
            "low_latency" => self.low_latency = tunable_switch(name, value)?,
            _ => {
                return Err(TunableError::Unknown {
                    name: name.to_string(),
                    known: TUNABLES.to_vec(),
                })
            }
        }
        Ok(())
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        vec![
            ("busy_queues".into(), self.busy_queues as f64),
            ("rq_queued".into(), self.rq_queued as f64),
            ("rq_in_driver".into(), self.rq_in_driver as f64),
            (
                "active_process".into(),
                self.active
                    .map(|q| self.queues[q].process as f64)
                    .unwrap_or(-1.0),
            ),
            ("serving_type".into(), self.serving_type as f64),
            ("hw_tag".into(), self.hw_tag as f64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{check_conservation, rq, Traffic};
    use std::collections::HashMap;

    const MS: u64 = NS_PER_MS;

    fn req(id: u32, process: u32, op: Op, sector: u64, sectors: u32, now: u64) -> Request {
        let mut r = rq(id, op, sector, sectors);
        r.process = process;
        r.start_ns = now;
        r
    }

    /// Dispatch everything allowed now; returns the ids.
    fn dispatch_all(cfq: &mut Cfq, now: u64) -> Vec<Request> {
        std::iter::from_fn(|| cfq.dispatch(0, now)).collect()
    }

    #[test]
    fn each_process_gets_its_time_slice_in_turn() {
        let mut cfq = Cfq::new(false);
        // Two sequential readers with plenty queued: 40 x 128 KiB each.
        for i in 0..40u32 {
            cfq.insert(req(i, 1, Op::Read, 1_000_000 + 256 * i as u64, 256, 0), 0);
            cfq.insert(
                req(100 + i, 2, Op::Read, 9_000_000 + 256 * i as u64, 256, 0),
                0,
            );
        }
        // Serve one request at a time, each taking 1 ms, and record who was served when.
        let mut now = 0;
        let mut served = Vec::new();
        while cfq.has_work(0) {
            let r = cfq.dispatch(0, now).expect("work is dispatched");
            now += MS;
            cfq.completed(&r, now - MS, now);
            served.push((r.process, now));
        }
        // Process 1 was first on the tree: its slice starts at its first completion (1 ms) and lasts slice_sync
        // (100 ms; 2 x 100 ms fits target_latency 300 ms, so no scaling): it is served for 40 ms until it runs dry.
        let switches: Vec<usize> = served
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0].0 != w[1].0)
            .map(|(i, _)| i + 1)
            .collect();
        assert_eq!(served[0].0, 1);
        assert_eq!(
            switches,
            vec![40],
            "one switch, when process 1 has nothing left: {served:?}"
        );

        // With 150 requests each, the 100 ms slice ends first and the processes alternate.
        let mut cfq = Cfq::new(false);
        for i in 0..150u32 {
            cfq.insert(req(i, 1, Op::Read, 1_000_000 + 256 * i as u64, 256, 0), 0);
            cfq.insert(
                req(1000 + i, 2, Op::Read, 9_000_000 + 256 * i as u64, 256, 0),
                0,
            );
        }
        let mut now = 0;
        let mut runs: Vec<(u32, u32)> = Vec::new();
        while cfq.has_work(0) {
            let r = cfq.dispatch(0, now).expect("work is dispatched");
            now += MS;
            cfq.completed(&r, now - MS, now);
            match runs.last_mut() {
                Some((p, n)) if *p == r.process => *n += 1,
                _ => runs.push((r.process, 1)),
            }
        }
        assert_eq!(
            runs[0],
            (1, 101),
            "first slice: the request that starts it, then 100 ms: {runs:?}"
        );
        assert_eq!(runs[1].0, 2);
        assert_eq!(runs[1].1, 101, "{runs:?}");
    }

    #[test]
    fn idles_for_a_sync_process_with_short_think_time_on_a_rotational_disk() {
        let mut cfq = Cfq::new(true);
        assert_eq!(cfq.tunables()[8], ("slice_idle", 8));
        // Process 1 reads one request at a time with 1 ms of think time; process 2 has a backlog.
        for i in 0..20u32 {
            cfq.insert(req(100 + i, 2, Op::Read, 9_000_000 + 8 * i as u64, 8, 0), 0);
        }
        cfq.insert(req(0, 1, Op::Read, 1_000, 8, 0), 0);
        // Process 2 was first: let it have its slice; process 1's turn comes; follow process 1.
        let mut now = 0;
        let mut served_p1 = 0;
        let next_p1 = 1u32;
        let mut idled = false;
        for _ in 0..400 {
            match cfq.dispatch(0, now) {
                Some(r) => {
                    now += MS;
                    cfq.completed(&r, now - MS, now);
                    if r.process == 1 {
                        served_p1 += 1;
                        // The reader thinks 1 ms, then issues the next sequential read.
                        assert!(
                            cfq.next_timer_ns().is_some(),
                            "the idle timer is armed after its read"
                        );
                        idled = true;
                        now += MS;
                        cfq.timer(now);
                        cfq.insert(
                            req(next_p1, 1, Op::Read, 1_000 + 8 * next_p1 as u64, 8, now),
                            now,
                        );
                        let r = cfq.dispatch(0, now).unwrap();
                        assert_eq!(
                            r.process, 1,
                            "still process 1's slice: the queue waited for it"
                        );
                        now += MS;
                        cfq.completed(&r, now - MS, now);
                        served_p1 += 1;
                        break;
                    }
                }
                None => {
                    now += MS;
                    cfq.timer(now);
                }
            }
        }
        assert!(idled && served_p1 == 2);

        // On an SSD (non-rotational, NCQ assumed) slice_idle is 0: no idling, process 2 goes on at once.
        let mut cfq = Cfq::new(false);
        assert_eq!(cfq.tunables()[8], ("slice_idle", 0));
        cfq.insert(req(0, 1, Op::Read, 1_000, 8, 0), 0);
        cfq.insert(req(1, 2, Op::Read, 9_000_000, 8, 0), 0);
        cfq.insert(req(2, 2, Op::Read, 9_000_008, 8, 0), 0);
        let r = cfq.dispatch(0, 0).unwrap();
        assert_eq!(r.process, 1);
        cfq.completed(&r, 0, MS);
        assert_eq!(
            cfq.next_timer_ns(),
            None,
            "no idle timer on an SSD with two busy queues"
        );
        assert_eq!(cfq.dispatch(0, MS).map(|r| r.process), Some(2));
    }

    #[test]
    fn a_sync_request_preempts_the_async_queue_and_async_waits_for_sync_in_flight() {
        let mut cfq = Cfq::new(false);
        for i in 0..10u32 {
            let mut w = req(i, 9, Op::Write, 5_000_000 + 256 * i as u64, 256, 0);
            w.sync = false;
            cfq.insert(w, 0);
        }
        let first = cfq.dispatch(0, 0).unwrap();
        assert!(!first.sync);
        cfq.insert(req(100, 1, Op::Read, 1_000, 8, 0), 0);
        let r = cfq.dispatch(0, 0).unwrap();
        assert_eq!(r.id, 100, "the read preempts the writeback queue");
        assert!(
            cfq.dispatch(0, 0).is_none(),
            "async waits while the sync read is in flight"
        );
        cfq.completed(&r, 0, MS);
        assert!(cfq.dispatch(0, MS).is_some_and(|w| !w.sync));
        cfq.completed(&first, 0, MS);
    }

    #[test]
    fn an_expired_fifo_request_is_served_first_once_per_slice() {
        let mut cfq = Cfq::new(false);
        cfq.insert(req(1, 1, Op::Read, 5_000, 8, 0), 0);
        cfq.insert(req(2, 1, Op::Read, 100, 8, 0), 0);
        // Both from the same process; next_rq is the one after last_position 0: sector 100.
        let r = cfq.dispatch(0, 0).unwrap();
        assert_eq!(r.id, 2);
        cfq.completed(&r, 0, MS);
        let mut cfq = Cfq::new(false);
        cfq.insert(req(1, 1, Op::Read, 5_000, 8, 0), 0);
        cfq.insert(req(2, 1, Op::Read, 100, 8, 0), 0);
        // At 200 ms request 1 has waited past fifo_expire_sync (125 ms): it goes first.
        assert_eq!(cfq.dispatch(0, 200 * MS).map(|r| r.id), Some(1));
    }

    #[test]
    fn backward_seeks_within_back_seek_max_cost_the_penalty() {
        let mut cfq = Cfq::new(false);
        cfq.last_position = 10_000;
        cfq.insert(req(1, 1, Op::Read, 10_000 + 1_000, 8, 0), 0); // 1000 sectors ahead
        cfq.insert(req(2, 1, Op::Read, 10_000 - 400, 8, 0), 0); // 400 behind: costs 800
        assert_eq!(dispatch_all(&mut cfq, 0)[0].id, 2);
        let mut cfq = Cfq::new(false);
        cfq.last_position = 10_000;
        cfq.set_tunable("back_seek_penalty", 3).unwrap();
        cfq.insert(req(1, 1, Op::Read, 10_000 + 1_000, 8, 0), 0);
        cfq.insert(req(2, 1, Op::Read, 10_000 - 400, 8, 0), 0); // now costs 1200
        assert_eq!(dispatch_all(&mut cfq, 0)[0].id, 1);
    }

    #[test]
    fn quantum_limits_a_queue_while_others_wait() {
        let mut cfq = Cfq::new(false);
        for i in 0..20u32 {
            cfq.insert(req(i, 1, Op::Read, 1_000 + 8 * i as u64, 8, 0), 0);
            cfq.insert(req(100 + i, 2, Op::Read, 9_000_000 + 8 * i as u64, 8, 0), 0);
        }
        // At the start of a slice (slice_new) the queue may only have quantum / 2 = 4 in the driver.
        let got = dispatch_all(&mut cfq, 0);
        assert_eq!(
            got.len(),
            4,
            "{:?}",
            got.iter().map(|r| r.id).collect::<Vec<_>>()
        );
        assert!(got.iter().all(|r| r.process == 1));
    }

    #[test]
    fn merges_stay_within_a_process_queue() {
        let mut cfq = Cfq::new(false);
        cfq.insert(req(1, 1, Op::Read, 1_000, 8, 0), 0);
        assert_eq!(
            cfq.bio_merge(&req(2, 1, Op::Read, 1_008, 8, 0), 256),
            Some(1)
        );
        assert_eq!(
            cfq.bio_merge(&req(3, 2, Op::Read, 1_016, 8, 0), 256),
            None,
            "another process's bio"
        );
        assert_eq!(
            cfq.bio_merge(&req(4, 1, Op::Read, 992, 8, 0), 256),
            Some(1),
            "front merge"
        );
        let r = cfq.dispatch(0, 0).unwrap();
        assert_eq!((r.sector, r.nr_sectors), (992, 24));
    }

    #[test]
    fn tunables_read_back_and_are_validated() {
        let mut cfq = Cfq::new(true);
        let t: HashMap<_, _> = cfq.tunables().into_iter().collect();
        assert_eq!(t["quantum"], 8);
        assert_eq!(t["fifo_expire_sync"], 125);
        assert_eq!(t["fifo_expire_async"], 250);
        assert_eq!(t["back_seek_max"], 16384);
        assert_eq!(t["back_seek_penalty"], 2);
        assert_eq!(t["slice_sync"], 100);
        assert_eq!(t["slice_async"], 40);
        assert_eq!(t["slice_async_rq"], 2);
        assert_eq!(t["slice_idle"], 8);
        assert_eq!(t["group_idle"], 8);
        assert_eq!(t["low_latency"], 1);
        assert_eq!(t["target_latency"], 300);
        assert_eq!(t["slice_idle_us"], 8000);
        cfq.set_tunable("slice_idle_us", 2500).unwrap();
        assert_eq!(cfq.tunables()[8], ("slice_idle", 2));
        assert!(matches!(
            cfq.set_tunable("quantum", 0),
            Err(TunableError::OutOfRange { .. })
        ));
        assert!(matches!(
            cfq.set_tunable("low_latency", 2),
            Err(TunableError::OutOfRange { .. })
        ));
        assert!(matches!(
            cfq.set_tunable("fifo_batch", 1),
            Err(TunableError::Unknown { .. })
        ));
    }

    #[test]
    fn random_operations_never_lose_or_duplicate_a_request() {
        check_conservation(&Traffic::default(), |seed| {
            let mut cfq = Cfq::new(seed % 2 == 0);
            if seed % 3 == 0 {
                cfq.set_tunable("slice_sync", 1 + (seed % 7) as i64)
                    .unwrap();
                cfq.set_tunable("quantum", 1 + (seed % 4) as i64).unwrap();
            }
            (cfq, ())
        });
    }
}
