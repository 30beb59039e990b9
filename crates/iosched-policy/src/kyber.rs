//! `kyber`: the Linux Kyber scheduler (the design in the kernel since 4.20), written from the facts of
//! `block/kyber-iosched.c`.
//!
//! # Model
//!
//! Kyber limits the number of requests *in flight on the device* per scheduling domain and adjusts those limits
//! from the latencies it observes. It never reorders requests within a domain.
//!
//! * **Domains.** [`Op::Read`] → READ, [`Op::Write`] (sync and async alike) → WRITE, [`Op::Discard`] → DISCARD,
//!   [`Op::Flush`] → OTHER.
//!
//!   | domain  | maximum = initial depth | batch | latency target                      |
//!   |---------|-------------------------|-------|-------------------------------------|
//!   | READ    | 256                     | 16    | `read_lat_nsec` (default 2 ms)      |
//!   | WRITE   | 128                     | 8     | `write_lat_nsec` (default 10 ms)    |
//!   | DISCARD | 64                      | 1     | 5 s, fixed                          |
//!   | OTHER   | 16                      | 1     | none; OTHER keeps no statistics     |
//!
//! * **Tokens.** One pool per domain for the whole device. A request takes a token when it is dispatched and gives
//!   it back when it completes. The timer changes a pool's depth within `[1, maximum]`.
//! * **Staging.** Each hardware queue has, per CPU mapped to it, a staging queue (the kernel's `kyber_ctx_queue`)
//!   with one list per domain; `insert` appends to the submitting CPU's list (`rq.cpu`). Bio merges look only at
//!   that CPU's list of the bio's domain (the last 8 requests, newest first, as `blk_bio_list_merge` does). The
//!   staging queues are created lazily: a hardware queue grows its vector of per-CPU queues when a request from a
//!   higher CPU number arrives.
//! * **Classes.** A hardware queue keeps its staging and dispatch lists per class. Kyber puts every request in
//!   class 0; `kyber-fairness` (`kyber_fairness.rs`) uses one class per cgroup and runs the dispatch below on the
//!   class it chose. The batch state and token waits belong to the hardware queue, not to a class.
//! * **Dispatch** (per hardware queue, under its lock): while `batching` is below the current domain's batch size,
//!   try that domain; otherwise, or if that fails, reset `batching` and advance `cur_domain` round-robin, trying
//!   each domain once (four tries, so the loop may come back to where it started). Trying a domain: if the hardware
//!   queue's list for it holds a request, take a token and dispatch its head; else, if some staging list of that
//!   domain is non-empty, take a token, then move *all* staging lists of that domain (CPUs in ascending order) to
//!   the tail of the hardware queue's list and dispatch the head. Requests are only moved once a token is in hand,
//!   so requests waiting for a token stay where later bios can still merge into them.
//! * **Token waits** (`kyber_get_domain_token` on an sbitmap queue, `lib/sbitmap.c` of the run's kernel). Each pool
//!   has 8 wait queues (SBQ_WAIT_QUEUES) and a wake batch of depth / 8 within 1..=8 (8 for READ, WRITE and DISCARD
//!   at their full depths, 2 for OTHER). A hardware queue that finds no token puts its one wait entry per domain, if
//!   it is not queued already, at the *head* of the wait queue its own `wait_index` names, and advances that index
//!   (so each hardware queue rotates over the 8 wait queues on its own). A hardware queue that gets a token while
//!   queued takes its entry off. The wait queues and their wake-ups are [`crate::sbitmap::SbqWaits`], as for the
//!   block layer's request tags (whose sleepers are exclusive).
//! * **Completion.** The token goes back to its pool (`sbitmap_queue_clear`). If any hardware queue waits on the
//!   pool, the wake-up follows the kernel version ([`WakeRule`]). Before 6.2 the freed token counts against the
//!   first wait queue with waiters from the pool's `wake_index` on; when that wait queue has counted `wake_batch`
//!   freed tokens its count starts again, `wake_index` moves past it and the whole wait queue is woken: Kyber's
//!   entries are not exclusive, so `wake_up_nr` calls every one of them, newest first. Since 6.2
//!   ([`kernel::SBITMAP_SINGLE_WAKE_COUNT`]) the pool counts freed tokens once while anyone waits, and every
//!   `wake_batch` of them wake every wait queue's entries, from `wake_index` on: the loop over the wait queues
//!   stops only at one whose `wake_up_nr` woke an exclusive waiter, and Kyber's are none (so on Linux 6.3, with its
//!   tokens used up, a batch of 8 freed read tokens wakes every hardware queue waiting for one). Each callback
//!   (`kyber_domain_wake`) takes its entry off and runs its hardware queue; [`Elevator::take_woken_hctxs`] hands
//!   those queues to the caller in that order. Before 6.2 a resize that changes the wake batch sets every wait
//!   queue's count to 1 (`sbitmap_queue_update_wake_batch`). [`AfterCompletion::Restart`]
//!   is returned either way (blk-mq's restart of the completion's own queue, if a run there wanted a driver tag).
//!   For READ, WRITE and DISCARD two samples are recorded: total latency (`now − rq.start_ns`) and I/O latency
//!   (`now − issue_ns`), each into an 8-bucket histogram relative to the domain's target: bucket =
//!   min((lat − 1) / max(target / 4, 1), 7), and 0 for a latency of 0. Buckets 0–3 are at or below the target ("good"), 4–7 above it. Every completion pulls the timer
//!   to fire at most 100 ms later (earlier if it is already due sooner); OTHER completions do not touch it.
//! * **Timer.** For each of READ, WRITE, DISCARD: the I/O-latency P90 bucket, then the total-latency P99 bucket.
//!   A percentile is computed only if the histogram holds samples and either holds at least 500 or the domain's
//!   window deadline (set to 1 s after the first check that found samples) has passed. The result is the smallest
//!   bucket whose cumulative count reaches ceil(N × pct / 100); the histogram is then cleared and the deadline
//!   forgotten. The device is *congested* if any domain's P90 bucket is ≥ 4. For each domain, with its fresh P99
//!   bucket `b` (if any): under congestion, a missing fresh value is replaced by the remembered one, which is then
//!   forgotten (so a remembered P99 is used at most once); without congestion a fresh value is remembered. If a
//!   value results and (congested or `b ≥ 4`), depth = depth × (b + 1) / 4 (integer division), clamped to
//!   `[1, maximum]`.
//!
//!   One consequence of the kernel's design, reproduced here on purpose: the window deadline is kept *per domain*
//!   and shared by the domain's two histograms. When the P90 is computed because the deadline passed (fewer than
//!   500 samples), it clears the deadline, and the P99 check right after it finds no deadline, sets a new one and
//!   declines. So at low but steady rates (fewer than 500 completions of the domain between evaluations) the 1 s
//!   rule releases only the I/O-latency P90; the total-latency P99 keeps accumulating across windows and is
//!   evaluated once it holds 500 samples (or once a timer run finds the I/O-latency histogram empty and the
//!   deadline passed).
//!
//! # Simplifications and deviations
//!
//! * **Latency histograms are device-wide**, not per CPU. The kernel sums (and clears) the per-CPU histograms at
//!   the start of every timer run before looking at them, so the results are the same.
//! * **Tokens are counters**, not sbitmap bits: a token is available while `in use < depth`. After the timer shrinks
//!   a pool below the number in use, the kernel can hand out a freed bit numbered below the new depth while bits
//!   above it are still held; here no token is handed out until the total in use falls below the depth. The
//!   difference is transient and bounded by the requests that were in flight above the new depth.
//! * **Token waits**: the kernel's wake-up callback runs the hardware queue asynchronously (kblockd, on one of the
//!   queue's CPUs), so queues woken together run in parallel and race for the freed tokens; the simulator runs
//!   them one after the other, synchronously, in callback order, before anything else runs a queue on that
//!   completion. The kernel's second attempt right after queueing the wait cannot succeed in this serialized model
//!   and is omitted, as are the atomics' races (`wait_cnt` reset by cmpxchg before 6.2, `wakeup_cnt` since). The
//!   wait queues' own spinlocks are reported ([`Elevator::take_inner_lock_uses`]): one acquisition to add a hardware
//!   queue's entry, one to take it off after a token was found, one per wait queue a wake-up wakes (`wake_up_nr`
//!   holds it while it calls the entries).
//! * **Flush** requests go to OTHER. In the kernel most flush sequences (`RQF_FLUSH_SEQ`) bypass the elevator and
//!   go straight to the hardware queue's dispatch list; the simulator hands them to the scheduler instead.
//! * **Async depth** (`limit_depth`, per the run's kernel version): 75 % (KYBER_ASYNC_PERCENT) of each sbitmap word
//!   of the scheduler tags before 6.17, of the whole tag set since ([`kernel::SBITMAP_WHOLE_SHALLOW_DEPTH`]); also the
//!   tags' min_shallow_depth from 4.18 on. Before [`kernel::KYBER_LIMITS_SYNC_WRITES`] (1db61b0afdd7, mainline after
//!   6.19, in the 6.18.y and 6.19.y stable lines: "6.18" here) it applies only to async requests (`!op_is_sync`), so
//!   direct writes (REQ_SYNC) may take every tag; since, to everything but sync reads (measured on Linux 6.18.44:
//!   three QD-128 direct writers and a QD-1 reader hold 193 of 256 scheduler tags under Kyber, 256 under
//!   mq-deadline). No read is ever limited: the kernel counts every read as sync.
//! * **Insert at head and requeue** are not part of the trait: every insert goes to the tail of its staging list, and
//!   no request comes back after dispatch.
//! * **Merge failures**: `blk_bio_list_merge` stops at the first candidate that is adjacent but cannot merge (for
//!   example because of the size limit); [`mergeable`](crate::mergeable) does not distinguish that case, so the
//!   scan goes on to older requests. Only the sector, operation and size rules of [`mergeable`](crate::mergeable)
//!   are checked.
//! * **Time** is in nanoseconds rather than jiffies: the 100 ms timer and the 1 s window are exact.
//! * No tracepoints (`kyber_adjust`, `kyber_latency`, `kyber_throttled`); [`Kyber::introspect`] reports the depths.
//!
//! # Tunables (sysfs names and units)
//!
//! `read_lat_nsec` (default 2,000,000) and `write_lat_nsec` (default 10,000,000), in nanoseconds, any value ≥ 0.
//! 0 is accepted as in the kernel: the bucket width then becomes 1 ns, so practically every sample is "bad".
//! A new target applies to samples recorded from then on; samples already in the histograms keep their buckets.

use std::collections::VecDeque;

use crate::kernel::{self, KernelVersion, SchedTags, WakeRule};
use crate::sbitmap::{SbqWaits, SBQ_WAIT_QUEUES as WAIT_QUEUES};
use crate::{
    merge_into_recent, AfterCompletion, Elevator, InnerLockUse, LockAcquisitions, Locking, Op,
    Request, TunableError,
};

/// Share of the scheduler tags async requests may hold (KYBER_ASYNC_PERCENT).
const KYBER_ASYNC_PERCENT: u32 = 75;

/// Scheduling domains, in the kernel's order (which is also the round-robin order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    Read = 0,
    Write = 1,
    Discard = 2,
    Other = 3,
}

impl Domain {
    pub const ALL: [Domain; NR_DOMAINS] =
        [Domain::Read, Domain::Write, Domain::Discard, Domain::Other];

    pub fn of(op: Op) -> Domain {
        match op {
            Op::Read => Domain::Read,
            Op::Write => Domain::Write,
            Op::Discard => Domain::Discard,
            Op::Flush => Domain::Other,
        }
    }

    /// Lower-case name as the debugfs files use it (`read_tokens`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Domain::Read => "read",
            Domain::Write => "write",
            Domain::Discard => "discard",
            Domain::Other => "other",
        }
    }

    /// Largest (and initial) number of tokens of the domain's pool.
    pub fn max_depth(self) -> u32 {
        MAX_DEPTH[self as usize]
    }

    pub fn batch_size(self) -> u32 {
        BATCH_SIZE[self as usize]
    }
}

const NR_DOMAINS: usize = 4;
/// READ, WRITE and DISCARD keep latency statistics; OTHER does not.
const NR_STAT_DOMAINS: usize = 3;
const MAX_DEPTH: [u32; NR_DOMAINS] = [256, 128, 64, 16];
const BATCH_SIZE: [u32; NR_DOMAINS] = [16, 8, 1, 1];

pub const DEFAULT_READ_LAT_NS: u64 = 2_000_000;
pub const DEFAULT_WRITE_LAT_NS: u64 = 10_000_000;
pub const DISCARD_LAT_NS: u64 = 5_000_000_000;

/// Buckets are target / 2^SHIFT wide: four at or below the target, four above.
const LATENCY_SHIFT: u32 = 2;
const GOOD_BUCKETS: usize = 1 << LATENCY_SHIFT;
const NR_BUCKETS: usize = 2 << LATENCY_SHIFT;

/// Histogram index: latency from request allocation, and latency from issue to the device.
const TOTAL: usize = 0;
const IO: usize = 1;

/// A window is evaluated once it has this many samples ...
const WINDOW_SAMPLES: u32 = 500;
/// ... or this long after its first check.
const WINDOW_NS: u64 = 1_000_000_000;
/// A completion makes the timer fire at most this much later.
const TIMER_DELAY_NS: u64 = 100_000_000;

/// Histogram bucket of one latency sample for a domain with latency target `target_ns`.
fn latency_bucket(latency_ns: u64, target_ns: u64) -> usize {
    if latency_ns == 0 {
        return 0;
    }
    let width = (target_ns >> LATENCY_SHIFT).max(1);
    ((latency_ns - 1) / width).min(NR_BUCKETS as u64 - 1) as usize
}

/// Bucket holding the `percentile`-th percentile of `buckets`: the first whose running count reaches
/// ceil(N × percentile / 100). None for an empty histogram.
fn percentile_bucket(buckets: &[u32; NR_BUCKETS], percentile: u32) -> Option<usize> {
    let samples: u64 = buckets.iter().map(|&n| n as u64).sum();
    if samples == 0 {
        return None;
    }
    let mut needed = (samples * percentile as u64).div_ceil(100);
    for (bucket, &count) in buckets.iter().enumerate().take(NR_BUCKETS - 1) {
        if count as u64 >= needed {
            return Some(bucket);
        }
        needed -= count as u64;
    }
    Some(NR_BUCKETS - 1)
}

/// Requests of one CPU waiting in a hardware queue's staging area, one list per domain.
#[derive(Default)]
struct StagingQueue {
    lists: [VecDeque<Request>; NR_DOMAINS],
}

/// One hardware queue's requests of one class: Kyber has a single class; Kyber-fairness (`kyber_fairness.rs`)
/// keeps one class per cgroup, so its lists are indexed by [cgroup][domain] on every hardware queue.
#[derive(Default)]
struct ClassQueues {
    /// Requests moved out of the staging queues, waiting only for a token.
    rqs: [VecDeque<Request>; NR_DOMAINS],
    /// Indexed by CPU number; grown on demand.
    staging: Vec<StagingQueue>,
    /// Requests in the staging queues per domain (the kernel keeps a bitmap of non-empty ones).
    staged: [usize; NR_DOMAINS],
}

impl ClassQueues {
    fn staging_for(&mut self, cpu: u32) -> &mut StagingQueue {
        let cpu = cpu as usize;
        if self.staging.len() <= cpu {
            self.staging.resize_with(cpu + 1, StagingQueue::default);
        }
        &mut self.staging[cpu]
    }

    /// Move every CPU's staged requests of `domain` to the tail of this queue's list, CPUs in ascending order.
    fn flush_staging(&mut self, domain: usize) {
        for queue in &mut self.staging {
            let list = &mut queue.lists[domain];
            if self.rqs[domain].is_empty() {
                // The usual case (one CPU per hardware queue): trade buffers instead of copying each request
                // (the Kyber bench's dispatch spent ~400 instructions per I/O moving requests here). Same order.
                std::mem::swap(&mut self.rqs[domain], list);
            } else {
                self.rqs[domain].append(list);
            }
        }
        self.staged[domain] = 0;
    }

    fn has_work(&self) -> bool {
        (0..NR_DOMAINS).any(|d| !self.rqs[d].is_empty() || self.staged[d] > 0)
    }
}

/// Kyber's per-hardware-queue state.
#[derive(Default)]
struct HwQueue {
    /// Request lists per class, grown on demand (Kyber uses class 0 only).
    classes: Vec<ClassQueues>,
    cur_domain: usize,
    batching: u32,
    /// Per domain: which of the pool's wait queues this hardware queue's wait entry is on, if it waits for a token
    /// (the kernel's `domain_wait`, one entry per domain).
    wait_queue: [Option<usize>; NR_DOMAINS],
    /// Per domain: the wait queue its next wait goes to (the kernel's `wait_index`, advanced at every wait).
    wait_index: [usize; NR_DOMAINS],
}

impl HwQueue {
    fn class_mut(&mut self, class: usize) -> &mut ClassQueues {
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, ClassQueues::default);
        }
        &mut self.classes[class]
    }
}

/// One domain's tokens and the wait side of its sbitmap queue (lib/sbitmap.c of the run's kernel version).
#[derive(Debug, Clone)]
struct TokenPool {
    depth: u32,
    in_use: u32,
    /// The waiting hardware queues on each wait queue, in the order a wake-up calls them: Kyber's entries are
    /// non-exclusive, which `add_wait_queue` puts at the head, so the newest comes first.
    waits: SbqWaits<u32>,
    /// Freed tokens per wake-up (`wake_batch`).
    wake_batch: u32,
}

impl TokenPool {
    fn new(depth: u32, rule: WakeRule) -> Self {
        let wake_batch = wake_batch(depth);
        Self {
            depth,
            in_use: 0,
            waits: SbqWaits::new(rule, wake_batch, false),
            wake_batch,
        }
    }

    /// sbitmap_queue_wake_up for one freed token of `domain`, by the kernel's [`WakeRule`] ([`SbqWaits::bit_freed`]).
    /// Kyber's entries are not exclusive: a wake-up calls every entry of each wait queue it wakes, so since 6.2
    /// every `wake_batch` freed tokens wake every waiting hardware queue. `ws_active` counts the entries on the
    /// wait queues (a woken entry is taken off by `kyber_domain_wake`).
    ///
    /// The woken hardware queues are appended to `woken` in call order, and each wait queue woken to `locks`
    /// (`wake_up_nr` takes its spinlock while it calls the entries).
    fn token_freed(&mut self, domain: usize, woken: &mut Vec<u32>, locks: &mut Vec<InnerLockUse>) {
        let active = !self.waits.is_empty();
        self.waits.bit_freed(self.wake_batch, active, woken, |ws| {
            locks.push(wait_queue_lock(domain, ws))
        });
    }

    /// sbitmap_queue_resize: a new depth may change the wake batch; before 6.2, if it does, every wait queue's
    /// count is set to 1, so the next freed token wakes (`sbitmap_queue_update_wake_batch`).
    fn resize(&mut self, depth: u32) {
        self.depth = depth;
        let batch = wake_batch(depth);
        if batch != self.wake_batch {
            self.wake_batch = batch;
            self.waits.reset_counts(1);
        }
    }
}

/// The inner lock of wait queue `ws` of `domain`'s token pool (each `sbq_wait_state` has its own spinlock).
fn wait_queue_lock(domain: usize, ws: usize) -> InnerLockUse {
    InnerLockUse {
        lock: (domain * WAIT_QUEUES + ws) as u32,
    }
}

/// sbq_calc_wake_batch for a domain's token pool: depth / SBQ_WAIT_QUEUES within 1..=SBQ_WAKE_BATCH (Kyber sets no
/// shallow depth on these pools, so the whole depth counts).
fn wake_batch(depth: u32) -> u32 {
    crate::sbq_wake_batch(depth)
}

pub struct Kyber {
    hctxs: Vec<HwQueue>,
    tokens: [TokenPool; NR_DOMAINS],
    /// Latency targets of READ, WRITE, DISCARD in nanoseconds.
    targets: [u64; NR_STAT_DOMAINS],
    /// Per statistics domain: total- and I/O-latency histograms gathered since each was last evaluated.
    histograms: [[[u32; NR_BUCKETS]; 2]; NR_STAT_DOMAINS],
    /// Per statistics domain: the window's deadline, set by the first check that found samples.
    window_deadline: [Option<u64>; NR_STAT_DOMAINS],
    /// Per statistics domain: the last total-latency P99 bucket seen without congestion.
    remembered_p99: [Option<usize>; NR_STAT_DOMAINS],
    timer_at: Option<u64>,
    /// Hardware queues woken by freed tokens and not yet handed to the caller, in wake order.
    woken: Vec<u32>,
    kernel: KernelVersion,
    /// Wait-queue spinlocks taken since the caller last asked, in order.
    inner_lock_uses: Vec<InnerLockUse>,
}

impl Kyber {
    pub fn new(nr_hw_queues: u32) -> Self {
        Self {
            hctxs: (0..nr_hw_queues.max(1))
                .map(|_| HwQueue::default())
                .collect(),
            tokens: MAX_DEPTH
                .map(|depth| TokenPool::new(depth, WakeRule::of(KernelVersion::NEWEST))),
            targets: [DEFAULT_READ_LAT_NS, DEFAULT_WRITE_LAT_NS, DISCARD_LAT_NS],
            histograms: [[[0; NR_BUCKETS]; 2]; NR_STAT_DOMAINS],
            window_deadline: [None; NR_STAT_DOMAINS],
            remembered_p99: [None; NR_STAT_DOMAINS],
            timer_at: None,
            woken: Vec::new(),
            kernel: KernelVersion::NEWEST,
            inner_lock_uses: Vec::new(),
        }
    }

    /// kqd->async_depth: 75 % of a word of the scheduler tags, or of the whole set since 6.17.
    fn async_depth(&self, tags: SchedTags) -> u32 {
        if self.kernel.has(&kernel::SBITMAP_WHOLE_SHALLOW_DEPTH) {
            tags.nr_requests * KYBER_ASYNC_PERCENT / 100
        } else {
            tags.bits_per_word() * KYBER_ASYNC_PERCENT / 100
        }
    }

    /// Current size of the domain's token pool (debugfs `{domain}_tokens`).
    pub fn depth(&self, domain: Domain) -> u32 {
        self.tokens[domain as usize].depth
    }

    /// Tokens of the domain held by dispatched, not yet completed requests.
    pub fn tokens_in_use(&self, domain: Domain) -> u32 {
        self.tokens[domain as usize].in_use
    }

    /// The domain hardware queue `hctx` is batching from, and how many it has dispatched in this batch.
    pub fn batch_state(&self, hctx: u32) -> (Domain, u32) {
        let queue = &self.hctxs[hctx as usize];
        (Domain::ALL[queue.cur_domain], queue.batching)
    }

    /// Whether hardware queue `hctx` waits for a token of `domain` (debugfs `{domain}_waiting`).
    pub fn waiting(&self, hctx: u32, domain: Domain) -> bool {
        self.hctxs
            .get(hctx as usize)
            .is_some_and(|queue| queue.wait_queue[domain as usize].is_some())
    }

    /// How many hardware queues wait on each of `domain`'s wait queues.
    pub fn wait_queue_lengths(&self, domain: Domain) -> [usize; WAIT_QUEUES] {
        self.tokens[domain as usize]
            .waits
            .queues()
            .each_ref()
            .map(VecDeque::len)
    }

    fn hctx_mut(&mut self, hctx: u32) -> &mut HwQueue {
        let index = hctx as usize;
        if self.hctxs.len() <= index {
            self.hctxs.resize_with(index + 1, HwQueue::default);
        }
        &mut self.hctxs[index]
    }

    /// Take a token of `domain` for hardware queue `hctx` (kyber_get_domain_token). Without one, the queue's wait
    /// entry goes to the head of the pool's wait queue its `wait_index` names, unless it is on one already; with
    /// one, an entry still queued is taken off.
    /// Adding the entry (`add_wait_queue`) and taking it off (`list_del_init`) each take that wait queue's spinlock
    /// (recorded for [`Elevator::take_inner_lock_uses`]).
    fn get_token(&mut self, hctx: usize, domain: usize) -> bool {
        let pool = &mut self.tokens[domain];
        let queue = &mut self.hctxs[hctx];
        if pool.in_use < pool.depth {
            pool.in_use += 1;
            if let Some(ws) = queue.wait_queue[domain].take() {
                pool.waits.queue_mut(ws).retain(|&h| h as usize != hctx);
                self.inner_lock_uses.push(wait_queue_lock(domain, ws));
            }
            true
        } else {
            if queue.wait_queue[domain].is_none() {
                let ws = queue.wait_index[domain];
                queue.wait_index[domain] = (ws + 1) % WAIT_QUEUES;
                queue.wait_queue[domain] = Some(ws);
                pool.waits.queue_mut(ws).push_front(hctx as u32);
                self.inner_lock_uses.push(wait_queue_lock(domain, ws));
            }
            false
        }
    }

    /// Try to dispatch a request of `class` from the hardware queue's current domain.
    fn dispatch_cur_domain(&mut self, hctx: usize, class: usize) -> Option<Request> {
        let domain = self.hctxs[hctx].cur_domain;
        let queues = self.hctxs[hctx].classes.get(class)?;
        let has_flushed = !queues.rqs[domain].is_empty();
        if !has_flushed && queues.staged[domain] == 0 {
            return None;
        }
        if !self.get_token(hctx, domain) {
            return None;
        }
        let queue = &mut self.hctxs[hctx];
        queue.batching += 1;
        let queues = &mut queue.classes[class];
        if !has_flushed {
            queues.flush_staging(domain);
        }
        queues.rqs[domain].pop_front()
    }

    /// Kyber's dispatch on hardware queue `hctx`, restricted to the requests of `class`: continue the current
    /// domain's batch, else start a batch in the next domain round-robin (see the module doc). The batch state
    /// (`cur_domain`, `batching`) belongs to the hardware queue, whichever class is served.
    pub(crate) fn dispatch_class(&mut self, hctx: u32, class: usize) -> Option<Request> {
        let hctx = hctx as usize;
        if hctx >= self.hctxs.len() {
            return None;
        }
        let queue = &self.hctxs[hctx];
        if queue.batching < BATCH_SIZE[queue.cur_domain] {
            if let Some(rq) = self.dispatch_cur_domain(hctx, class) {
                return Some(rq);
            }
        }
        self.hctxs[hctx].batching = 0;
        for _ in 0..NR_DOMAINS {
            let queue = &mut self.hctxs[hctx];
            queue.cur_domain = (queue.cur_domain + 1) % NR_DOMAINS;
            if let Some(rq) = self.dispatch_cur_domain(hctx, class) {
                return Some(rq);
            }
        }
        None
    }

    /// Append `rq` to its CPU's staging list of its domain, in `class`.
    pub(crate) fn insert_class(&mut self, rq: Request, class: usize) {
        let domain = Domain::of(rq.op) as usize;
        let queues = self.hctx_mut(rq.hctx).class_mut(class);
        queues.staged[domain] += 1;
        queues.staging_for(rq.cpu).lists[domain].push_back(rq);
    }

    /// Merge `bio` into a request of `class` staged by the bio's CPU (see the module doc).
    pub(crate) fn bio_merge_class(
        &mut self,
        bio: &Request,
        class: usize,
        max_sectors: u32,
    ) -> Option<u32> {
        let domain = Domain::of(bio.op) as usize;
        let queues = self
            .hctxs
            .get_mut(bio.hctx as usize)?
            .classes
            .get_mut(class)?;
        let list = &mut queues.staging.get_mut(bio.cpu as usize)?.lists[domain];
        merge_into_recent(list, bio, max_sectors)
    }

    /// Whether hardware queue `hctx` holds requests of `class`.
    pub(crate) fn class_has_work(&self, hctx: u32, class: usize) -> bool {
        self.hctxs
            .get(hctx as usize)
            .and_then(|queue| queue.classes.get(class))
            .is_some_and(ClassQueues::has_work)
    }

    /// Mean total latency of `domain`'s samples gathered since its total-latency histogram was last evaluated,
    /// each sample counted at its bucket's upper bound ((b + 1) / 4 of the current target; the last, open bucket
    /// at twice the target). None without samples. Kyber-fairness derives its write cost from it.
    pub(crate) fn mean_total_latency_ns(&self, domain: Domain) -> Option<u64> {
        let domain = domain as usize;
        if domain >= NR_STAT_DOMAINS {
            return None;
        }
        let buckets = &self.histograms[domain][TOTAL];
        let samples: u64 = buckets.iter().map(|&n| n as u64).sum();
        if samples == 0 {
            return None;
        }
        let width = (self.targets[domain] >> LATENCY_SHIFT) as u128;
        let sum: u128 = buckets
            .iter()
            .enumerate()
            .map(|(bucket, &n)| n as u128 * (bucket as u128 + 1) * width)
            .sum();
        Some((sum / samples as u128) as u64)
    }

    fn record_sample(&mut self, domain: usize, kind: usize, latency_ns: u64) {
        let bucket = latency_bucket(latency_ns, self.targets[domain]);
        self.histograms[domain][kind][bucket] += 1;
    }

    /// Evaluate one histogram if its window is complete (see the module doc), clearing it.
    fn window_percentile(
        &mut self,
        domain: usize,
        kind: usize,
        percentile: u32,
        now_ns: u64,
    ) -> Option<usize> {
        let histogram = &mut self.histograms[domain][kind];
        let samples: u32 = histogram.iter().sum();
        if samples == 0 {
            return None;
        }
        let deadline = *self.window_deadline[domain].get_or_insert(now_ns + WINDOW_NS);
        if samples < WINDOW_SAMPLES && now_ns < deadline {
            return None;
        }
        self.window_deadline[domain] = None;
        let bucket = percentile_bucket(histogram, percentile);
        *histogram = [0; NR_BUCKETS];
        bucket
    }

    fn resize(&mut self, domain: usize, depth: u32) {
        self.tokens[domain].resize(depth.clamp(1, MAX_DEPTH[domain]));
    }
}

impl Elevator for Kyber {
    fn name(&self) -> &'static str {
        "kyber"
    }

    fn locking(&self) -> Locking {
        Locking::PerHctx
    }

    /// kyber_bio_merge and kyber_insert_requests take the submitting CPU's kcq lock, kyber_dispatch_request the
    /// hctx lock; completion releases the domain token and records latency without a lock. The simulator books
    /// those on the hctx lock, which with one hardware queue per CPU is the same contention. A dispatch that finds
    /// the domain's list empty flushes the busy kcqs into it (kyber_flush_busy_kcqs), taking each one's lock: once
    /// per request when each is dispatched as it arrives (fewer when requests wait for tokens and flush together),
    /// counted for the lock share only (a per-CPU lock, rarely contended).
    fn lock_acquisitions(&self) -> LockAcquisitions {
        LockAcquisitions {
            submit: 2,
            dispatch: 1,
            complete: 0,
            submit_unbooked: 1,
        }
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        self.bio_merge_class(bio, 0, max_sectors)
    }

    fn insert(&mut self, rq: Request, _now_ns: u64) {
        self.insert_class(rq, 0);
    }

    fn dispatch(&mut self, hctx: u32, _now_ns: u64) -> Option<Request> {
        self.dispatch_class(hctx, 0)
    }

    fn set_kernel_version(&mut self, kernel: KernelVersion) {
        self.kernel = kernel;
        for pool in &mut self.tokens {
            pool.waits.set_rule(WakeRule::of(kernel));
        }
    }

    /// kyber_limit_depth: async requests (since 1db61b0afdd7 everything but sync reads) get the async depth.
    fn limit_depth(&self, rq: &Request, tags: SchedTags) -> Option<u32> {
        let limited = if self.kernel.has(&kernel::KYBER_LIMITS_SYNC_WRITES) {
            !rq.is_sync_read()
        } else {
            !rq.is_sync()
        };
        limited.then(|| self.async_depth(tags))
    }

    /// kyber_depth_updated sets the tags' min_shallow_depth to the async depth (debugfs `sched_tags` on Linux 6.18:
    /// min_shallow_depth=192, wake_batch=8 for 256 requests); there is no such call before 4.18.
    fn min_shallow_depth(&self, tags: SchedTags) -> Option<u32> {
        self.kernel
            .has(&kernel::SBITMAP_MIN_SHALLOW_DEPTH)
            .then(|| self.async_depth(tags))
    }

    fn has_work(&self, hctx: u32) -> bool {
        self.hctxs
            .get(hctx as usize)
            .is_some_and(|queue| queue.classes.iter().any(ClassQueues::has_work))
    }

    fn completed(&mut self, rq: &Request, issue_ns: u64, now_ns: u64) -> AfterCompletion {
        let domain = Domain::of(rq.op) as usize;
        if domain < NR_STAT_DOMAINS {
            self.record_sample(domain, TOTAL, now_ns.saturating_sub(rq.start_ns));
            self.record_sample(domain, IO, now_ns.saturating_sub(issue_ns));
            let due = now_ns + TIMER_DELAY_NS;
            self.timer_at = Some(self.timer_at.map_or(due, |at| at.min(due)));
        }

        let pool = &mut self.tokens[domain];
        debug_assert!(
            pool.in_use > 0,
            "completion of a request that holds no {domain} token"
        );
        pool.in_use = pool.in_use.saturating_sub(1);
        let first_woken = self.woken.len();
        pool.token_freed(domain, &mut self.woken, &mut self.inner_lock_uses);
        // kyber_domain_wake takes each woken queue's entry off its wait queue and runs the queue.
        for &hctx in &self.woken[first_woken..] {
            self.hctxs[hctx as usize].wait_queue[domain] = None;
        }
        AfterCompletion::Restart // the freed token wakes its waiters (take_woken_hctxs)
    }

    fn take_woken_hctxs(&mut self, into: &mut Vec<u32>) {
        into.append(&mut self.woken);
    }

    /// The spinlocks of the token pools' wait queues: one per `sbq_wait_state`, 8 per domain.
    fn inner_locks(&self) -> u32 {
        (NR_DOMAINS * WAIT_QUEUES) as u32
    }

    fn take_inner_lock_uses(&mut self, into: &mut Vec<InnerLockUse>) {
        into.append(&mut self.inner_lock_uses);
    }

    fn next_timer_ns(&self) -> Option<u64> {
        self.timer_at
    }

    fn timer(&mut self, now_ns: u64) {
        self.timer_at = None;

        let mut congested = false;
        for domain in 0..NR_STAT_DOMAINS {
            if self
                .window_percentile(domain, IO, 90, now_ns)
                .is_some_and(|p90| p90 >= GOOD_BUCKETS)
            {
                congested = true;
            }
        }

        for domain in 0..NR_STAT_DOMAINS {
            let fresh = self.window_percentile(domain, TOTAL, 99, now_ns);
            let p99 = if congested {
                // A remembered value stands in for a missing fresh one once; congestion forgets it either way.
                let remembered = self.remembered_p99[domain].take();
                fresh.or(remembered)
            } else {
                if fresh.is_some() {
                    self.remembered_p99[domain] = fresh;
                }
                fresh
            };
            let Some(p99) = p99 else { continue };
            if congested || p99 >= GOOD_BUCKETS {
                let depth = (self.tokens[domain].depth * (p99 as u32 + 1)) >> LATENCY_SHIFT;
                self.resize(domain, depth);
            }
        }
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        vec![
            ("read_lat_nsec", self.targets[Domain::Read as usize] as i64),
            (
                "write_lat_nsec",
                self.targets[Domain::Write as usize] as i64,
            ),
        ]
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        let domain = match name {
            "read_lat_nsec" => Domain::Read,
            "write_lat_nsec" => Domain::Write,
            _ => {
                return Err(TunableError::Unknown {
                    name: name.to_string(),
                    known: vec!["read_lat_nsec", "write_lat_nsec"],
                })
            }
        };
        if value < 0 {
            return Err(TunableError::out_of_range(
                name,
                value,
                "a latency target in nanoseconds, >= 0",
            ));
        }
        self.targets[domain as usize] = value as u64;
        Ok(())
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        let mut out = Vec::with_capacity(3 * NR_DOMAINS);
        for domain in Domain::ALL {
            let pool = &self.tokens[domain as usize];
            out.push((format!("{}_tokens", domain.name()), pool.depth as f64));
            out.push((
                format!("{}_tokens_in_use", domain.name()),
                pool.in_use as f64,
            ));
            let waiting = self
                .hctxs
                .iter()
                .filter(|q| q.wait_queue[domain as usize].is_some())
                .count();
            out.push((format!("{}_waiting_hctxs", domain.name()), waiting as f64));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, check_conservation, Event, Flow, Hook, Lcg, Traffic};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn rq(id: u32, op: Op, cpu: u32, hctx: u32, sector: u64, nr_sectors: u32) -> Request {
        Request {
            cpu,
            hctx,
            sync: op == Op::Read,
            ..testkit::rq(id, op, sector, nr_sectors)
        }
    }

    /// Pushes requests through one hardware queue, one at a time, with chosen latencies.
    struct Driver {
        kyber: Kyber,
        next_id: u32,
    }

    impl Driver {
        fn new() -> Self {
            Self {
                kyber: Kyber::new(1),
                next_id: 0,
            }
        }

        /// `n` requests of `op`, each allocated `total_ns` and issued `io_ns` before `now`, all completing at `now`.
        fn complete(&mut self, op: Op, n: u32, total_ns: u64, io_ns: u64, now: u64) {
            for _ in 0..n {
                let id = self.next_id;
                self.next_id += 1;
                let mut request = rq(id, op, 0, 0, id as u64 * 1000, 8);
                request.start_ns = now - total_ns;
                self.kyber.insert(request, now - total_ns);
                let issued = self
                    .kyber
                    .dispatch(0, now - io_ns)
                    .expect("a token is free");
                assert_eq!(issued.id, id);
                self.kyber.completed(&issued, now - io_ns, now);
            }
        }

        fn depths(&self) -> (u32, u32) {
            (
                self.kyber.depth(Domain::Read),
                self.kyber.depth(Domain::Write),
            )
        }
    }

    #[test]
    fn buckets_are_quarters_of_the_target() {
        // Read target 2 ms: buckets are 0.5 ms wide, the upper bound belongs to the bucket.
        assert_eq!(latency_bucket(0, 2 * MS), 0);
        assert_eq!(latency_bucket(500_000, 2 * MS), 0);
        assert_eq!(latency_bucket(500_001, 2 * MS), 1);
        assert_eq!(
            latency_bucket(2 * MS, 2 * MS),
            3,
            "exactly on target is still good"
        );
        assert_eq!(latency_bucket(2 * MS + 1, 2 * MS), 4, "first bad bucket");
        assert_eq!(latency_bucket(3 * MS, 2 * MS), 5);
        assert_eq!(
            latency_bucket(60 * S, 2 * MS),
            7,
            "everything beyond 1.75x lands in the last bucket"
        );
        // A target of 0 (or below 4 ns) makes the buckets 1 ns wide.
        assert_eq!(latency_bucket(1, 0), 0);
        assert_eq!(latency_bucket(5, 0), 4);
        assert_eq!(latency_bucket(1_000, 3), 7);
    }

    #[test]
    fn percentile_is_the_first_bucket_reaching_the_rank() {
        // 100 samples: 89 good ones in bucket 0, 11 in bucket 5. P90 needs 90 samples: bucket 0 has only 89.
        let mut h = [0; NR_BUCKETS];
        h[0] = 89;
        h[5] = 11;
        assert_eq!(percentile_bucket(&h, 90), Some(5));
        // 90 + 10: exactly 90 of 100 in bucket 0 reach the rank.
        h[0] = 90;
        h[5] = 10;
        assert_eq!(percentile_bucket(&h, 90), Some(0));
        // 90 + 11: the rank is ceil(90.9) = 91, so bucket 0 no longer suffices.
        h[5] = 11;
        assert_eq!(percentile_bucket(&h, 90), Some(5));
        // Rounding up: 7 samples, P99 needs ceil(6.93) = 7, i.e. the largest sample.
        let mut h = [0; NR_BUCKETS];
        h[1] = 6;
        h[2] = 1;
        assert_eq!(percentile_bucket(&h, 99), Some(2));
        assert_eq!(percentile_bucket(&[0; NR_BUCKETS], 99), None);
    }

    #[test]
    fn write_depth_shrinks_while_reads_are_congested_and_grows_back_when_writes_wait_too_long() {
        let mut d = Driver::new();
        assert_eq!(d.depths(), (256, 128));

        // Reads take 3 ms on the device (target 2 ms: bucket 5, so the read I/O P90 says "congested").
        // Writes are fine at 5 ms of their 10 ms target (bucket 1), so under congestion they are throttled
        // to (1 + 1) / 4 of their depth. Reads, with P99 bucket 5, would grow by 6/4 but are at their maximum.
        d.complete(Op::Read, 500, 3 * MS, 3 * MS, S);
        d.complete(Op::Write, 500, 5 * MS, 5 * MS, S);
        d.kyber.timer(S);
        assert_eq!(d.depths(), (256, 64));
        d.complete(Op::Read, 500, 3 * MS, 3 * MS, 2 * S);
        d.complete(Op::Write, 500, 5 * MS, 5 * MS, 2 * S);
        d.kyber.timer(2 * S);
        assert_eq!(d.depths(), (256, 32));

        // Reads recover (1 ms, bucket 1): no congestion. Good write latency alone leaves the depth alone.
        d.complete(Op::Read, 500, MS, MS, 3 * S);
        d.complete(Op::Write, 500, 5 * MS, 5 * MS, 3 * S);
        d.kyber.timer(3 * S);
        assert_eq!(d.depths(), (256, 32));

        // Throttled writes now wait in the scheduler: 18 ms in total (bucket 7) though the device takes 5 ms.
        // A bad P99 grows the depth by (7 + 1) / 4 = 2x per window, up to the maximum of 128.
        for (window, expected) in [(4, 64), (5, 128), (6, 128)] {
            d.complete(Op::Read, 500, MS, MS, window * S);
            d.complete(Op::Write, 500, 18 * MS, 5 * MS, window * S);
            d.kyber.timer(window * S);
            assert_eq!(d.depths(), (256, expected), "window {window}");
        }
    }

    #[test]
    fn depth_never_drops_below_one() {
        let mut d = Driver::new();
        // Writes so good they land in bucket 0 shrink to a quarter per congested window: 128, 32, 8, 2, 1, 1.
        for (window, expected) in [(1, 32), (2, 8), (3, 2), (4, 1), (5, 1)] {
            d.complete(Op::Read, 500, 3 * MS, 3 * MS, window * S);
            d.complete(Op::Write, 500, MS, MS, window * S);
            d.kyber.timer(window * S);
            assert_eq!(d.kyber.depth(Domain::Write), expected, "window {window}");
        }
        // With one token, writes still flow one at a time.
        d.complete(Op::Write, 3, MS, MS, 6 * S);
    }

    #[test]
    fn a_remembered_p99_is_used_once_when_congestion_comes_without_fresh_samples() {
        let mut d = Driver::new();
        // Window 1: only writes, good (bucket 1), no congestion: nothing changes, their P99 is remembered.
        d.complete(Op::Write, 500, 5 * MS, 5 * MS, S);
        d.kyber.timer(S);
        assert_eq!(d.depths(), (256, 128));
        // Window 2: only reads, congested. Writes have no fresh P99, so the remembered bucket 1 halves them.
        d.complete(Op::Read, 500, 3 * MS, 3 * MS, 2 * S);
        d.kyber.timer(2 * S);
        assert_eq!(d.depths(), (256, 64));
        // Window 3: congested again, still no write samples: the remembered value is gone.
        d.complete(Op::Read, 500, 3 * MS, 3 * MS, 3 * S);
        d.kyber.timer(3 * S);
        assert_eq!(d.depths(), (256, 64));
    }

    #[test]
    fn a_window_closes_at_500_samples() {
        let mut d = Driver::new();
        // Writes at 12 ms on the device (bucket 4) signal congestion; reads at 1 ms (bucket 1) would be halved.
        d.complete(Op::Read, 499, MS, MS, S);
        d.complete(Op::Write, 499, 12 * MS, 12 * MS, S);
        d.kyber.timer(S);
        assert_eq!(
            d.depths(),
            (256, 128),
            "499 samples and no second elapsed: no percentiles yet"
        );
        d.complete(Op::Read, 1, MS, MS, S + 50 * MS);
        d.complete(Op::Write, 1, 12 * MS, 12 * MS, S + 50 * MS);
        d.kyber.timer(S + 50 * MS);
        assert_eq!(
            d.depths(),
            (128, 128),
            "the 500th sample closes both windows"
        );
        let empty = [[0; NR_BUCKETS]; 2];
        assert_eq!(
            d.kyber.histograms[Domain::Read as usize],
            empty,
            "evaluated histograms are cleared"
        );
        assert_eq!(d.kyber.window_deadline, [None; NR_STAT_DOMAINS]);
    }

    #[test]
    fn a_small_window_closes_one_second_after_its_first_check() {
        let (read, write) = (Domain::Read as usize, Domain::Write as usize);
        let mut d = Driver::new();
        // Remember a good read P99 (bucket 1) without congestion.
        d.complete(Op::Read, 500, MS, MS, S);
        d.kyber.timer(S);

        // A few congested writes (12 ms, bucket 4). The first check at 2 s opens the window until 3 s.
        d.complete(Op::Write, 10, 12 * MS, 12 * MS, 2 * S);
        d.kyber.timer(2 * S);
        assert_eq!(d.kyber.window_deadline[write], Some(3 * S));
        d.kyber.timer(3 * S - 1);
        assert_eq!(d.depths(), (256, 128), "not yet");
        d.kyber.timer(3 * S);
        assert_eq!(
            d.depths(),
            (128, 128),
            "write P90 shows congestion; reads use their remembered P99"
        );

        // The deadline is per domain, shared by both histograms: the P90 evaluation cleared it, so the P99 check
        // right after it opened a new window and declined. The total-latency samples stay and accumulate.
        assert_eq!(d.kyber.window_deadline[write], Some(4 * S));
        let count = |d: &Driver, kind: usize| d.kyber.histograms[write][kind].iter().sum::<u32>();
        assert_eq!((count(&d, IO), count(&d, TOTAL)), (0, 10));
        d.complete(Op::Write, 10, 12 * MS, 12 * MS, 4 * S);
        d.kyber.timer(4 * S);
        assert_eq!(
            (count(&d, IO), count(&d, TOTAL)),
            (0, 20),
            "same again one second later"
        );
        // Only 500 accumulated samples release the total-latency P99.
        d.complete(Op::Write, 480, 12 * MS, 12 * MS, 4 * S + 10 * MS);
        d.kyber.timer(4 * S + 10 * MS);
        assert_eq!((count(&d, IO), count(&d, TOTAL)), (480, 0));
        assert_eq!(
            d.kyber.remembered_p99[read], None,
            "congestion at 3 s forgot the read P99"
        );
    }

    #[test]
    fn completions_pull_the_timer_to_at_most_100_ms_ahead() {
        let mut d = Driver::new();
        assert_eq!(d.kyber.next_timer_ns(), None);
        d.complete(Op::Read, 1, MS, MS, S);
        assert_eq!(d.kyber.next_timer_ns(), Some(S + 100 * MS));
        d.complete(Op::Write, 1, MS, MS, S + 60 * MS);
        assert_eq!(
            d.kyber.next_timer_ns(),
            Some(S + 100 * MS),
            "an earlier expiry is kept"
        );
        d.kyber.timer(S + 100 * MS);
        assert_eq!(
            d.kyber.next_timer_ns(),
            None,
            "the timer does not re-arm itself"
        );
        d.complete(Op::Flush, 1, MS, MS, 2 * S);
        assert_eq!(d.kyber.next_timer_ns(), None, "OTHER keeps no statistics");
        d.complete(Op::Discard, 1, MS, MS, 2 * S);
        assert_eq!(d.kyber.next_timer_ns(), Some(2 * S + 100 * MS));
    }

    #[test]
    fn domains_take_turns_in_batches() {
        let mut k = Kyber::new(1);
        let mut id = 0;
        for (op, n) in [(Op::Read, 20), (Op::Write, 10), (Op::Discard, 2)] {
            for _ in 0..n {
                k.insert(rq(id, op, 0, 0, id as u64 * 1000, 8), 0);
                id += 1;
            }
        }
        let mut order = Vec::new();
        while let Some(r) = k.dispatch(0, 0) {
            match order.last_mut() {
                Some((op, n)) if *op == r.op => *n += 1,
                _ => order.push((r.op, 1)),
            }
        }
        // 16 reads, 8 writes, 1 discard (OTHER is empty, so back to READ), the last 4 reads end their batch early,
        // the last 2 writes, the last discard.
        assert_eq!(
            order,
            [
                (Op::Read, 16),
                (Op::Write, 8),
                (Op::Discard, 1),
                (Op::Read, 4),
                (Op::Write, 2),
                (Op::Discard, 1)
            ]
        );
        assert!(!k.has_work(0));
        // The failed call went once around all four domains and came back to DISCARD.
        assert_eq!(k.batch_state(0), (Domain::Discard, 0));
    }

    #[test]
    fn requests_keep_their_order_within_a_domain_across_cpus() {
        let mut k = Kyber::new(1);
        // CPU 1 submits first, but staging lists are flushed CPU by CPU in ascending order.
        k.insert(rq(1, Op::Read, 1, 0, 100, 8), 0);
        k.insert(rq(2, Op::Read, 0, 0, 200, 8), 0);
        k.insert(rq(3, Op::Read, 1, 0, 300, 8), 0);
        let ids: Vec<u32> = std::iter::from_fn(|| k.dispatch(0, 0))
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [2, 1, 3]);
    }

    /// Fill OTHER's 16 tokens from hardware queue 0 and return the held requests.
    fn hold_all_other_tokens(k: &mut Kyber) -> Vec<Request> {
        (0..16)
            .map(|id| {
                k.insert(rq(id, Op::Flush, 0, 0, 0, 0), 0);
                k.dispatch(0, 0).unwrap()
            })
            .collect()
    }

    /// The two wake-up tests' start, on `kernel`: OTHER's 16 tokens all held, queue 1 waits on wait queue 0, takes
    /// the first freed token (counted, not yet a wake-up) when it runs for another reason and leaves its wait
    /// queue; then its second wait goes to wait queue 1 and queue 2's first to wait queue 0. Returns the 15
    /// tokens still held.
    fn queues_1_and_2_waiting_on_wait_queues_1_and_0(
        kernel: KernelVersion,
    ) -> (Kyber, Vec<Request>) {
        let mut k = Kyber::new(3);
        k.set_kernel_version(kernel);
        let mut held = hold_all_other_tokens(&mut k);
        k.insert(rq(16, Op::Flush, 1, 1, 0, 0), 0);
        assert_eq!(k.dispatch(1, 0), None);
        assert_eq!(
            k.wait_queue_lengths(Domain::Other),
            [1, 0, 0, 0, 0, 0, 0, 0]
        );
        k.completed(&held.pop().unwrap(), 0, MS);
        assert!(woken(&mut k).is_empty());
        assert_eq!(k.dispatch(1, MS).map(|r| r.id), Some(16));
        assert!(!k.waiting(1, Domain::Other));
        assert_eq!(k.wait_queue_lengths(Domain::Other), [0; 8]);
        k.insert(rq(17, Op::Flush, 1, 1, 0, 0), MS);
        k.insert(rq(18, Op::Flush, 2, 2, 0, 0), MS);
        assert_eq!(k.dispatch(1, MS), None);
        assert_eq!(k.dispatch(2, MS), None);
        assert_eq!(
            k.wait_queue_lengths(Domain::Other),
            [1, 1, 0, 0, 0, 0, 0, 0]
        );
        (k, held)
    }

    fn woken(k: &mut Kyber) -> Vec<u32> {
        let mut woken = Vec::new();
        k.take_woken_hctxs(&mut woken);
        woken
    }

    #[test]
    fn without_a_token_a_queue_waits_and_every_wake_batch_freed_tokens_wake_one_wait_queue_newest_first(
    ) {
        // OTHER has 16 tokens for the whole device: its pool wakes a wait queue every 16 / 8 = 2 freed tokens
        // (Linux 5.2's wake-ups; since 6.2 a batch wakes every wait queue's entries, here the same one).
        let mut k = Kyber::new(3);
        k.set_kernel_version(KernelVersion::new(5, 2));
        let mut held = hold_all_other_tokens(&mut k);
        k.insert(rq(16, Op::Flush, 1, 1, 0, 0), 0);
        k.insert(rq(17, Op::Flush, 2, 2, 0, 0), 0);
        assert_eq!(k.dispatch(1, 0), None);
        assert_eq!(k.dispatch(2, 0), None);
        // Each queue's first wait goes to wait queue 0.
        assert!(k.waiting(1, Domain::Other) && k.waiting(2, Domain::Other));
        assert_eq!(
            k.wait_queue_lengths(Domain::Other),
            [2, 0, 0, 0, 0, 0, 0, 0]
        );

        // The first freed token only counts; the completion restarts its own queue, as without waiters.
        assert_eq!(
            k.completed(&held.pop().unwrap(), 0, MS),
            AfterCompletion::Restart
        );
        assert!(woken(&mut k).is_empty());
        assert!(k.waiting(1, Domain::Other) && k.waiting(2, Domain::Other));

        // The second wakes the whole wait queue, the newest entry first, and takes the entries off it.
        k.completed(&held.pop().unwrap(), 0, 2 * MS);
        assert_eq!(woken(&mut k), [2, 1]);
        assert!(!k.waiting(1, Domain::Other) && !k.waiting(2, Domain::Other));
        assert_eq!(k.dispatch(2, 2 * MS).map(|r| r.id), Some(17));
        assert_eq!(k.dispatch(1, 2 * MS).map(|r| r.id), Some(16));
        assert_eq!(k.tokens_in_use(Domain::Other), 16);
    }

    /// Linux 5.2's wake-ups (before 6.2 each wait queue counts its own freed tokens).
    #[test]
    fn a_queue_that_gets_a_token_leaves_its_wait_queue_and_its_next_wait_goes_to_the_next_one() {
        let (mut k, mut held) =
            queues_1_and_2_waiting_on_wait_queues_1_and_0(KernelVersion::new(5, 2));
        // Wait queue 0 had one freed token counted already: the next one wakes it, and the wake-ups move on to
        // wait queue 1, which takes two more.
        k.completed(&held.pop().unwrap(), 0, 2 * MS);
        assert_eq!(woken(&mut k), [2]);
        k.completed(&held.pop().unwrap(), 0, 3 * MS);
        assert!(woken(&mut k).is_empty());
        k.completed(&held.pop().unwrap(), 0, 4 * MS);
        assert_eq!(woken(&mut k), [1]);
        assert_eq!(k.wait_queue_lengths(Domain::Other), [0; 8]);
    }

    /// Since 6.2 the freed tokens are counted once per pool, and a wake-up calls every wait queue's entries:
    /// `wake_up_nr` returns the exclusive waiters it woke, and Kyber's entries are not exclusive, so no wait queue
    /// stops it. OTHER's 16 tokens all held, wake batch 2: queue 1 waits on wait queue 0 (lock 24), then, after
    /// taking a token and waiting again, on wait queue 1 (lock 25); queue 2 waits on wait queue 0. The first freed
    /// token is taken by queue 1 (counted: 1 of 2); the next freed one completes the batch and wakes wait queue 0
    /// (queue 2) and wait queue 1 (queue 1) at once, taking both their locks. Linux 5.2 woke only wait queue 0
    /// then, whose own count had reached 2, and queue 1 two tokens later (the previous test).
    #[test]
    fn since_6_2_every_wake_batch_freed_tokens_wake_every_waiting_queue() {
        let (mut k, mut held) =
            queues_1_and_2_waiting_on_wait_queues_1_and_0(KernelVersion::new(6, 3));
        k.take_inner_lock_uses(&mut Vec::new());
        k.completed(&held.pop().unwrap(), 0, 2 * MS);
        assert_eq!(woken(&mut k), [2, 1]);
        assert_eq!(inner_locks_taken(&mut k), [24, 25]);
        assert_eq!(k.wait_queue_lengths(Domain::Other), [0; 8]);
        // The woken queues run in call order: 2 takes the freed token, 1 finds none and waits on its next wait
        // queue (2, lock 26); the count goes on from the batch: two more freed tokens wake it.
        assert_eq!(k.dispatch(2, 2 * MS).map(|r| r.id), Some(18));
        assert_eq!(k.dispatch(1, 2 * MS), None);
        assert_eq!(inner_locks_taken(&mut k), [26]);
        k.completed(&held.pop().unwrap(), 0, 3 * MS);
        assert!(woken(&mut k).is_empty(), "1 of 2 counted");
        k.completed(&held.pop().unwrap(), 0, 4 * MS);
        assert_eq!(woken(&mut k), [1]);
    }

    fn inner_locks_taken(k: &mut Kyber) -> Vec<u32> {
        let mut uses = Vec::new();
        k.take_inner_lock_uses(&mut uses);
        uses.into_iter().map(|u| u.lock).collect()
    }

    /// Root cause 5 of issue 17: the token pools' wait-queue spinlocks. Worked example on OTHER (domain 3: its
    /// wait queue w is inner lock 3 x 8 + w = 24 + w), 16 tokens, wake batch 16 / 8 = 2. With all 16 held,
    /// queues 1 and 2 find no token: each adds its entry to wait queue 0 (lock 24, once each). A queue already
    /// waiting that fails again takes no lock. The first freed token only counts; the second wakes wait queue 0
    /// (lock 24, once: `wake_up_nr` holds it while it calls both entries, which take themselves off). Queues 1 and
    /// 2 then take the two freed tokens with no entry left to remove: no lock. Queue 2's next request finds none
    /// and adds its entry anew, on its next wait queue (1: lock 25).
    #[test]
    fn wait_queue_locks_are_taken_to_add_an_entry_and_to_wake_a_wait_queue() {
        let mut k = Kyber::new(3);
        let mut held = hold_all_other_tokens(&mut k);
        assert!(inner_locks_taken(&mut k).is_empty(), "tokens were free");
        k.insert(rq(16, Op::Flush, 1, 1, 0, 0), 0);
        k.insert(rq(17, Op::Flush, 2, 2, 0, 0), 0);
        k.insert(rq(18, Op::Flush, 2, 2, 0, 0), 0);
        assert_eq!(k.dispatch(1, 0), None);
        assert_eq!(k.dispatch(2, 0), None);
        assert_eq!(k.dispatch(2, 0), None);
        assert_eq!(inner_locks_taken(&mut k), [24, 24]);
        k.completed(&held.pop().unwrap(), 0, MS);
        assert!(
            inner_locks_taken(&mut k).is_empty(),
            "a freed token that only counts"
        );
        k.completed(&held.pop().unwrap(), 0, 2 * MS);
        assert_eq!(woken(&mut k), [2, 1]);
        assert_eq!(inner_locks_taken(&mut k), [24]);
        assert!(k.dispatch(1, 2 * MS).is_some());
        assert!(k.dispatch(2, 2 * MS).is_some());
        assert_eq!(k.dispatch(2, 2 * MS), None);
        assert_eq!(inner_locks_taken(&mut k), [25]);
        assert_eq!(k.inner_locks(), 32);
    }

    #[test]
    fn the_wake_batch_is_an_eighth_of_the_depth_within_1_to_8_and_a_new_batch_wakes_at_the_next_free(
    ) {
        assert_eq!(
            [1, 7, 8, 16, 63, 64, 256].map(wake_batch),
            [1, 1, 1, 2, 7, 8, 8]
        );
        // Linux 5.2's wake-ups (per wait queue counts).
        let mut pool = TokenPool::new(256, WakeRule::PerQueueCount { exclusive: true });
        pool.waits.queue_mut(3).push_front(5);
        let (mut woken, mut locks) = (Vec::new(), Vec::new());
        pool.token_freed(0, &mut woken, &mut locks);
        assert_eq!(
            (woken.len(), pool.waits.wait_cnt(3), pool.waits.wake_index()),
            (0, 7, 3)
        );
        // Same batch: the counts stay.
        pool.resize(128);
        assert_eq!(pool.waits.wait_cnt(3), 7);
        // A smaller batch sets every count to 1.
        pool.resize(16);
        assert_eq!(pool.wake_batch, 2);
        assert!((0..WAIT_QUEUES).all(|ws| pool.waits.wait_cnt(ws) == 1));
        pool.token_freed(0, &mut woken, &mut locks);
        assert_eq!(
            (woken, pool.waits.wait_cnt(3), pool.waits.wake_index()),
            (vec![5], 2, 4)
        );
    }

    #[test]
    fn a_waiting_request_stays_in_its_staging_list_where_bios_can_still_merge() {
        let mut k = Kyber::new(1);
        // Use up DISCARD's 64 tokens.
        let mut held = Vec::new();
        for id in 0..64 {
            k.insert(rq(id, Op::Discard, 0, 0, id as u64 * 1000, 8), 0);
        }
        while let Some(r) = k.dispatch(0, 0) {
            held.push(r);
        }
        assert_eq!(held.len(), 64);
        k.insert(rq(64, Op::Discard, 0, 0, 100_000, 8), 0);
        assert_eq!(k.dispatch(0, 0), None);
        assert_eq!(
            k.bio_merge(&rq(65, Op::Discard, 0, 0, 100_008, 8), 256),
            Some(64)
        );
        assert_eq!(k.completed(&held[0], 0, MS), AfterCompletion::Restart);
        let merged = k.dispatch(0, MS).unwrap();
        assert_eq!(
            (merged.id, merged.sector, merged.nr_sectors),
            (64, 100_000, 16)
        );
    }

    #[test]
    fn bios_merge_only_into_the_submitting_cpus_staging_list() {
        let mut k = Kyber::new(1);
        k.insert(rq(1, Op::Read, 0, 0, 0, 8), 0);
        assert_eq!(
            k.bio_merge(&rq(2, Op::Read, 1, 0, 8, 8), 256),
            None,
            "another CPU of the same queue"
        );
        assert_eq!(
            k.bio_merge(&rq(3, Op::Write, 0, 0, 8, 8), 256),
            None,
            "another domain"
        );
        assert_eq!(
            k.bio_merge(&rq(4, Op::Read, 0, 0, 8, 8), 256),
            Some(1),
            "back merge"
        );
        assert_eq!(
            k.bio_merge(&rq(5, Op::Read, 0, 0, 0, 8), 32),
            None,
            "front side is taken by request 1"
        );
        assert_eq!(
            k.bio_merge(&rq(6, Op::Read, 0, 0, 16, 8), 16),
            None,
            "would exceed max_sectors"
        );

        // Dispatch moves all of the domain's staged requests to the hardware queue's list: no merging there.
        k.insert(rq(7, Op::Read, 0, 0, 1000, 8), 0);
        assert_eq!(
            k.dispatch(0, 0).map(|r| (r.id, r.nr_sectors)),
            Some((1, 16))
        );
        assert_eq!(k.bio_merge(&rq(8, Op::Read, 0, 0, 1008, 8), 256), None);
        assert_eq!(k.dispatch(0, 0).map(|r| (r.id, r.nr_sectors)), Some((7, 8)));
    }

    #[test]
    fn latency_targets_are_tunable_in_nanoseconds() {
        let mut k = Kyber::new(1);
        assert_eq!(
            k.tunables(),
            [("read_lat_nsec", 2_000_000), ("write_lat_nsec", 10_000_000)]
        );
        k.set_tunable("read_lat_nsec", 0).unwrap();
        k.set_tunable("write_lat_nsec", 50_000_000).unwrap();
        assert_eq!(
            k.tunables(),
            [("read_lat_nsec", 0), ("write_lat_nsec", 50_000_000)]
        );
        assert!(matches!(
            k.set_tunable("write_lat_nsec", -1),
            Err(TunableError::OutOfRange { value: -1, .. })
        ));
        assert!(matches!(
            k.set_tunable("fifo_batch", 8),
            Err(TunableError::Unknown { .. })
        ));
        assert_eq!(
            k.tunables()[1],
            ("write_lat_nsec", 50_000_000),
            "a rejected value changes nothing"
        );
    }

    #[test]
    fn a_longer_write_target_turns_congestion_into_calm() {
        // Writes at 12 ms on the device: congested under the default 10 ms target, fine under 20 ms.
        for (target, expected_read_depth) in [(10 * MS, 128), (20 * MS, 256)] {
            let mut d = Driver::new();
            d.kyber
                .set_tunable("write_lat_nsec", target as i64)
                .unwrap();
            d.complete(Op::Read, 500, MS, MS, S);
            d.complete(Op::Write, 500, 12 * MS, 12 * MS, S);
            d.kyber.timer(S);
            assert_eq!(
                d.kyber.depth(Domain::Read),
                expected_read_depth,
                "write target {target}"
            );
        }
    }

    #[test]
    fn introspection_shows_depths_and_tokens_in_use() {
        let mut k = Kyber::new(1);
        k.insert(rq(1, Op::Write, 0, 0, 0, 8), 0);
        k.dispatch(0, 0).unwrap();
        let state: std::collections::HashMap<String, f64> = k.introspect().into_iter().collect();
        assert_eq!(state["read_tokens"], 256.0);
        assert_eq!(state["write_tokens"], 128.0);
        assert_eq!(state["discard_tokens"], 64.0);
        assert_eq!(state["other_tokens"], 16.0);
        assert_eq!(state["write_tokens_in_use"], 1.0);
        assert_eq!(state["read_tokens_in_use"], 0.0);
        assert_eq!(state["other_waiting_hctxs"], 0.0);
    }

    /// Kyber's own checks under the conservation harness: every request in flight holds one token of its domain and
    /// nothing else does, depths stay within their domain's range, and a hardware queue that keeps work it did not
    /// dispatch waits for a token (or no completion would restart it). Counts how often the timer moved depths.
    #[derive(Default)]
    struct Tokens {
        depths: [u32; NR_DOMAINS],
        shrinks: u32,
        grows: u32,
    }

    impl Hook<Kyber> for Tokens {
        fn before_step(&mut self, k: &mut Kyber, flow: &Flow, rng: &mut Lcg) {
            if flow.step.is_multiple_of(3_000) {
                // Change the targets now and then, so that depths shrink as well as grow.
                let targets = [0, 1_000_000, 1_000_000_000, 1_000_000_000];
                for name in ["read_lat_nsec", "write_lat_nsec"] {
                    k.set_tunable(name, rng.pick(&targets)).unwrap();
                }
            }
        }

        fn check(&mut self, k: &Kyber, flow: &Flow, event: Event) {
            let seed = flow.seed;
            match event {
                Event::Dispatched(hctx, None) if k.has_work(hctx) => assert!(
                    Domain::ALL.iter().any(|&d| k.waiting(hctx, d)),
                    "seed {seed}: lost wake-up"
                ),
                Event::TimerDue => self.depths = Domain::ALL.map(|d| k.depth(d)),
                Event::TimerFired => {
                    for (domain, before) in Domain::ALL.into_iter().zip(self.depths) {
                        self.shrinks += (k.depth(domain) < before) as u32;
                        self.grows += (k.depth(domain) > before) as u32;
                    }
                }
                Event::Completed(r, after) => {
                    assert_eq!(after, AfterCompletion::Restart, "seed {seed}");
                    // The request's token is back at once.
                    assert_tokens(k, flow, Domain::of(r.op));
                }
                Event::Step | Event::Drained => {
                    for domain in Domain::ALL {
                        assert_tokens(k, flow, domain);
                        assert!((1..=domain.max_depth()).contains(&k.depth(domain)));
                    }
                }
                _ => {}
            }
        }
    }

    /// Every request of `domain` in flight holds one of its tokens, and nothing else does.
    fn assert_tokens(k: &Kyber, flow: &Flow, domain: Domain) {
        let holding = flow
            .in_flight
            .iter()
            .filter(|(r, _)| Domain::of(r.op) == domain)
            .count();
        assert_eq!(
            k.tokens_in_use(domain) as usize,
            holding,
            "seed {}: {domain:?} tokens",
            flow.seed
        );
    }

    #[test]
    fn random_traffic_never_loses_or_duplicates_requests_and_tokens_match_requests_in_flight() {
        const NR_HCTX: u32 = 2;
        let traffic = Traffic {
            seeds: 0..16,
            steps: 60_000,
            nr_hw_queues: NR_HCTX,
            nr_cpus: 6,
            ops: testkit::EVERY_OP,
            bio_sectors: &[8, 16, 24, 32],
            span_sectors: 1 << 24,
            max_sectors: 256,
            driver_depth: usize::MAX,
            max_gap_ns: 400_000,
            own_hctx_only: true,
            ..Traffic::default()
        };
        let runs = check_conservation(&traffic, |_| (Kyber::new(NR_HCTX), Tokens::default()));
        let shrinks: u32 = runs.iter().map(|t| t.shrinks).sum();
        let grows: u32 = runs.iter().map(|t| t.grows).sum();
        assert!(
            shrinks > 10 && grows > 10,
            "the workload should move the depths: {shrinks} shrinks, {grows} grows"
        );
    }

    /// Closed-loop processes, one per hardware queue, on a device that serves every dispatched request at once for
    /// a random time. Hardware queues run only as the simulator runs them: after an insert on it; after a
    /// completion, first the queues the freed token woke, in wake order, then the queue the request completed
    /// on; and all of them after a timer. So a lost wake-up strands requests.
    struct ClosedLoop {
        k: Kyber,
        rng: Lcg,
        now: u64,
        next_id: u32,
        /// (completion time, id) of requests at the device.
        in_service: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>>,
        requests: std::collections::HashMap<u32, (Request, u64)>,
        /// Requests of each hardware queue's process not yet completed, and how many it may have.
        outstanding: Vec<u32>,
        depth: Vec<u32>,
        /// Requests completed per hardware queue.
        served: Vec<u64>,
        /// Per hardware queue: the operations its process submits, picked at random.
        ops: Vec<Vec<Op>>,
        submitting: bool,
        /// Service time at the device: `service_ns` plus up to as much again, at random.
        service_ns: u64,
        /// Wake-ups of hardware queues so far.
        wakes: usize,
    }

    impl ClosedLoop {
        fn new(seed: u64, depth: &[u32], ops: &[&[Op]]) -> Self {
            Self {
                k: Kyber::new(depth.len() as u32),
                rng: Lcg(seed),
                now: 0,
                next_id: 0,
                in_service: Default::default(),
                requests: Default::default(),
                outstanding: vec![0; depth.len()],
                depth: depth.to_vec(),
                served: vec![0; depth.len()],
                ops: ops.iter().map(|o| o.to_vec()).collect(),
                submitting: true,
                service_ns: 50_000,
                wakes: 0,
            }
        }

        fn run(&mut self, hctx: u32) {
            while let Some(r) = self.k.dispatch(hctx, self.now) {
                let done = self.now + self.service_ns + self.rng.below(self.service_ns);
                self.in_service.push(std::cmp::Reverse((done, r.id)));
                self.requests.insert(r.id, (r, self.now));
            }
        }

        fn submit(&mut self, hctx: usize) {
            while self.submitting && self.outstanding[hctx] < self.depth[hctx] {
                self.outstanding[hctx] += 1;
                let ops = &self.ops[hctx];
                let op = ops[self.rng.below(ops.len() as u64) as usize];
                let sectors = if op == Op::Flush { 0 } else { 8 };
                let mut r = rq(
                    self.next_id,
                    op,
                    hctx as u32,
                    hctx as u32,
                    self.next_id as u64 * 64,
                    sectors,
                );
                r.start_ns = self.now;
                self.next_id += 1;
                self.k.insert(r, self.now);
                self.run(hctx as u32);
            }
        }

        /// Advance to `until` (or until the device is idle).
        fn run_until(&mut self, until: u64, timer: bool) {
            for hctx in 0..self.depth.len() {
                self.submit(hctx);
            }
            while let Some(&std::cmp::Reverse((done, id))) = self.in_service.peek() {
                if done > until {
                    break;
                }
                if timer && self.k.next_timer_ns().is_some_and(|at| at <= done) {
                    self.now = self.k.next_timer_ns().unwrap().max(self.now);
                    self.k.timer(self.now);
                    for hctx in 0..self.depth.len() as u32 {
                        self.run(hctx);
                    }
                    continue;
                }
                self.in_service.pop();
                self.now = done;
                let (r, issued) = self.requests.remove(&id).unwrap();
                let after = self.k.completed(&r, issued, self.now);
                assert_eq!(after, AfterCompletion::Restart);
                let mut woken = Vec::new();
                self.k.take_woken_hctxs(&mut woken);
                self.wakes += woken.len();
                for hctx in woken {
                    self.run(hctx);
                }
                self.run(r.hctx);
                self.served[r.hctx as usize] += 1;
                self.outstanding[r.hctx as usize] -= 1;
                self.submit(r.hctx as usize);
            }
        }
    }

    #[test]
    fn equal_processes_on_different_queues_get_equal_shares_of_scarce_tokens() {
        // Four processes at depth 128 ask for 512 reads at a time; READ has 256 tokens.
        let reads: &[Op] = &[Op::Read];
        let mut run = ClosedLoop::new(7, &[128; 4], &[reads; 4]);
        run.run_until(20 * MS, false);
        assert!(
            (0..4).any(|h| run.k.waiting(h, Domain::Read)),
            "the tokens are contended"
        );
        run.served = vec![0; 4];
        run.run_until(120 * MS, false);
        let mean = run.served.iter().sum::<u64>() as f64 / 4.0;
        for (hctx, &n) in run.served.iter().enumerate() {
            assert!(
                (n as f64 / mean - 1.0).abs() < 0.05,
                "queue {hctx}: {:?} requests served",
                run.served
            );
        }
    }

    #[test]
    fn run_as_the_simulator_runs_queues_every_request_completes_whatever_the_depths_and_wake_batches(
    ) {
        for seed in 0..6 {
            // Uneven processes and mixed domains; latency targets of 0 (every sample bad: congestion, the other
            // domain shrinks) or 1 s (every sample good) move the depths, and so the wake batches, both ways. Queue 3
            // mixes in flushes (OTHER: 16 tokens, wake batch 2).
            let depths = [64, 200, 8, 40, 1];
            let rw: &[Op] = &[Op::Read, Op::Read, Op::Write];
            let mut run = ClosedLoop::new(
                seed,
                &depths,
                &[rw, rw, &[Op::Read], &[Op::Flush, Op::Read], rw],
            );
            run.service_ns = 400_000;
            for step in 0..8u64 {
                for name in ["read_lat_nsec", "write_lat_nsec"] {
                    run.k
                        .set_tunable(name, [0, 1_000_000_000][run.rng.below(2) as usize])
                        .unwrap();
                }
                run.run_until((step + 1) * 120 * MS, true);
            }
            run.submitting = false;
            run.run_until(u64::MAX, false);
            assert!(run.wakes > 0, "seed {seed}: tokens ran out");
            assert!(run.in_service.is_empty());
            let stranded: Vec<u32> = (0..depths.len() as u32)
                .filter(|&h| run.k.has_work(h))
                .collect();
            assert!(
                stranded.is_empty(),
                "seed {seed}: queues {stranded:?} kept requests with nothing in flight"
            );
            assert_eq!(
                run.served.iter().sum::<u64>(),
                run.next_id as u64,
                "seed {seed}"
            );
            assert!(Domain::ALL.iter().all(|&d| run.k.tokens_in_use(d) == 0));
        }
    }

    fn request(op: Op, sync: bool) -> Request {
        Request {
            sync,
            ..crate::testkit::rq(0, op, 0, 8)
        }
    }

    #[test]
    fn which_requests_are_depth_limited_and_how_deep_follows_the_version() {
        let tags = SchedTags::new(256);
        let at = |version: &str| {
            let mut kyber = Kyber::new(1);
            kyber.set_kernel_version(KernelVersion::parse(version).unwrap());
            kyber
        };
        // 6.18 (stable, with 1db61b0afdd7): everything but sync reads, 75 % of the whole set.
        let k = at("6.18");
        assert_eq!(k.limit_depth(&request(Op::Read, true), tags), None);
        assert_eq!(
            k.limit_depth(&request(Op::Write, true), tags),
            Some(192),
            "direct writes too"
        );
        assert_eq!(k.limit_depth(&request(Op::Write, false), tags), Some(192));
        assert_eq!(
            k.limit_depth(&request(Op::Read, false), tags),
            None,
            "a read is always sync"
        );
        assert_eq!(k.min_shallow_depth(tags), Some(192));
        // 6.3: only async writes, 75 % of a 64-bit word.
        let k = at("6.3");
        assert_eq!(
            k.limit_depth(&request(Op::Write, true), tags),
            None,
            "direct writes take every tag"
        );
        assert_eq!(
            k.limit_depth(&request(Op::Write, false), tags),
            Some(48),
            "48 of each word of 64"
        );
        assert_eq!(k.min_shallow_depth(tags), Some(48));
        // 4.15: no min_shallow_depth yet.
        assert_eq!(at("4.15").min_shallow_depth(tags), None);
    }
}
