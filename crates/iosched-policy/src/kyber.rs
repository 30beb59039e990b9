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
//! * **Dispatch** (per hardware queue, under its lock): while `batching` is below the current domain's batch size,
//!   try that domain; otherwise, or if that fails, reset `batching` and advance `cur_domain` round-robin, trying
//!   each domain once (four tries, so the loop may come back to where it started). Trying a domain: if the hardware
//!   queue's list for it holds a request, take a token and dispatch its head; else, if some staging list of that
//!   domain is non-empty, take a token, then move *all* staging lists of that domain (CPUs in ascending order) to
//!   the tail of the hardware queue's list and dispatch the head. Requests are only moved once a token is in hand,
//!   so requests waiting for a token stay where later bios can still merge into them. When no token is left the
//!   hardware queue records that it waits on that domain's pool.
//! * **Completion.** The token goes back to its pool. If any hardware queue was waiting on that pool, the waits
//!   are cleared and [`AfterCompletion::RunAllQueues`] asks the simulator to re-run the hardware queues (the
//!   kernel's wait-queue callback runs each waiting hardware queue). For READ, WRITE and DISCARD two samples are
//!   recorded: total latency (`now − rq.start_ns`) and I/O latency (`now − issue_ns`), each into an 8-bucket
//!   histogram relative to the domain's target: bucket = min((lat − 1) / max(target / 4, 1), 7), and 0 for a
//!   latency of 0. Buckets 0–3 are at or below the target ("good"), 4–7 above it. Every completion pulls the timer
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
//!   declines. So at low rates the 1 s rule releases only the I/O-latency P90; the total-latency P99 becomes
//!   available once its histogram has gathered 500 samples (it keeps accumulating across windows until then).
//!
//! # Simplifications and deviations
//!
//! * **Latency histograms are device-wide**, not per CPU. The kernel sums (and clears) the per-CPU histograms at
//!   the start of every timer run before looking at them, so the results are the same.
//! * **Tokens are counters**, not sbitmap bits: a token is available while `in use < depth`. After the timer shrinks
//!   a pool below the number in use, the kernel can hand out a freed bit numbered below the new depth while bits
//!   above it are still held; here no token is handed out until the total in use falls below the depth. The
//!   difference is transient and bounded by the requests that were in flight above the new depth.
//! * **Token waits**: the kernel puts a waiting hardware queue on one of the pool's sbitmap wait queues, and frees
//!   wake waiters in batches (`wake_batch`, up to 8 frees per wake-up for large pools). Here every freed token of a
//!   pool with waiters wakes all of them at once (the simulator re-runs all hardware queues). A hardware queue that
//!   gets a token while marked waiting drops its wait, as in the kernel. The kernel's second attempt right after
//!   queueing the wait cannot succeed in this serialized model and is omitted.
//! * **Flush** requests go to OTHER. In the kernel most flush sequences (`RQF_FLUSH_SEQ`) bypass the elevator and
//!   go straight to the hardware queue's dispatch list; the simulator hands them to the scheduler instead.
//! * **Async depth is not applied.** Kyber's `limit_depth` lets asynchronous requests use only 75 % of the
//!   scheduler tags (`async_depth`, shown in debugfs); that is a tag-allocation limit the simulator does not yet
//!   enforce, and this policy cannot enforce it from here.
//! * **Insert at head and requeue** are not part of the trait: every insert goes to the tail of its staging list, and
//!   no request comes back after dispatch.
//! * **Merge failures**: `blk_bio_list_merge` stops at the first candidate that is adjacent but cannot merge (for
//!   example because of the size limit); [`mergeable`] does not distinguish that case, so the scan goes on to older
//!   requests. Only the sector, operation and size rules of [`mergeable`] are checked.
//! * **Time** is in nanoseconds rather than jiffies: the 100 ms timer and the 1 s window are exact.
//! * No tracepoints (`kyber_adjust`, `kyber_latency`, `kyber_throttled`); [`Kyber::introspect`] reports the depths.
//!
//! # Tunables (sysfs names and units)
//!
//! `read_lat_nsec` (default 2,000,000) and `write_lat_nsec` (default 10,000,000), in nanoseconds, any value ≥ 0.
//! 0 is accepted as in the kernel: the bucket width then becomes 1 ns, so practically every sample is "bad".
//! A new target applies to samples recorded from then on; samples already in the histograms keep their buckets.

use std::collections::VecDeque;

use crate::{apply_merge, mergeable, AfterCompletion, Elevator, Locking, Op, Request, TunableError};

/// Scheduling domains, in the kernel's order (which is also the round-robin order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    Read = 0,
    Write = 1,
    Discard = 2,
    Other = 3,
}

impl Domain {
    pub const ALL: [Domain; NR_DOMAINS] = [Domain::Read, Domain::Write, Domain::Discard, Domain::Other];

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

/// Kyber's per-hardware-queue state.
#[derive(Default)]
struct HwQueue {
    /// Requests moved out of the staging queues, waiting only for a token.
    rqs: [VecDeque<Request>; NR_DOMAINS],
    cur_domain: usize,
    batching: u32,
    /// Indexed by CPU number; grown on demand.
    staging: Vec<StagingQueue>,
    /// Requests in the staging queues per domain (the kernel keeps a bitmap of non-empty ones).
    staged: [usize; NR_DOMAINS],
    /// This hardware queue failed to get a token of the domain and waits for one to be freed.
    waiting: [bool; NR_DOMAINS],
}

impl HwQueue {
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
            self.rqs[domain].append(&mut queue.lists[domain]);
        }
        self.staged[domain] = 0;
    }
}

#[derive(Debug, Clone, Copy)]
struct TokenPool {
    depth: u32,
    in_use: u32,
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
}

impl Kyber {
    pub fn new(nr_hw_queues: u32) -> Self {
        Self {
            hctxs: (0..nr_hw_queues.max(1)).map(|_| HwQueue::default()).collect(),
            tokens: MAX_DEPTH.map(|depth| TokenPool { depth, in_use: 0 }),
            targets: [DEFAULT_READ_LAT_NS, DEFAULT_WRITE_LAT_NS, DISCARD_LAT_NS],
            histograms: [[[0; NR_BUCKETS]; 2]; NR_STAT_DOMAINS],
            window_deadline: [None; NR_STAT_DOMAINS],
            remembered_p99: [None; NR_STAT_DOMAINS],
            timer_at: None,
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
            .is_some_and(|queue| queue.waiting[domain as usize])
    }

    fn hctx_mut(&mut self, hctx: u32) -> &mut HwQueue {
        let index = hctx as usize;
        if self.hctxs.len() <= index {
            self.hctxs.resize_with(index + 1, HwQueue::default);
        }
        &mut self.hctxs[index]
    }

    /// Take a token of `domain` for hardware queue `hctx`, or record that the queue waits for one.
    fn get_token(&mut self, hctx: usize, domain: usize) -> bool {
        let pool = &mut self.tokens[domain];
        let queue = &mut self.hctxs[hctx];
        if pool.in_use < pool.depth {
            pool.in_use += 1;
            queue.waiting[domain] = false;
            true
        } else {
            queue.waiting[domain] = true;
            false
        }
    }

    /// Try to dispatch from the hardware queue's current domain.
    fn dispatch_cur_domain(&mut self, hctx: usize) -> Option<Request> {
        let domain = self.hctxs[hctx].cur_domain;
        let queue = &self.hctxs[hctx];
        let has_flushed = !queue.rqs[domain].is_empty();
        if !has_flushed && queue.staged[domain] == 0 {
            return None;
        }
        if !self.get_token(hctx, domain) {
            return None;
        }
        let queue = &mut self.hctxs[hctx];
        if !has_flushed {
            queue.flush_staging(domain);
        }
        queue.batching += 1;
        queue.rqs[domain].pop_front()
    }

    fn record_sample(&mut self, domain: usize, kind: usize, latency_ns: u64) {
        let bucket = latency_bucket(latency_ns, self.targets[domain]);
        self.histograms[domain][kind][bucket] += 1;
    }

    /// Evaluate one histogram if its window is complete (see the module doc), clearing it.
    fn window_percentile(&mut self, domain: usize, kind: usize, percentile: u32, now_ns: u64) -> Option<usize> {
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
        self.tokens[domain].depth = depth.clamp(1, MAX_DEPTH[domain]);
    }
}

impl Elevator for Kyber {
    fn name(&self) -> &'static str {
        "kyber"
    }

    fn locking(&self) -> Locking {
        Locking::PerHctx
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        let domain = Domain::of(bio.op) as usize;
        let queue = self.hctxs.get_mut(bio.hctx as usize)?;
        let list = &mut queue.staging.get_mut(bio.cpu as usize)?.lists[domain];
        for held in list.iter_mut().rev().take(8) {
            if let Some(side) = mergeable(held, bio, max_sectors) {
                apply_merge(held, bio, side);
                return Some(held.id);
            }
        }
        None
    }

    fn insert(&mut self, rq: Request, _now_ns: u64) {
        let domain = Domain::of(rq.op) as usize;
        let queue = self.hctx_mut(rq.hctx);
        queue.staged[domain] += 1;
        queue.staging_for(rq.cpu).lists[domain].push_back(rq);
    }

    fn dispatch(&mut self, hctx: u32, _now_ns: u64) -> Option<Request> {
        let hctx = hctx as usize;
        if hctx >= self.hctxs.len() {
            return None;
        }
        let queue = &self.hctxs[hctx];
        if queue.batching < BATCH_SIZE[queue.cur_domain] {
            if let Some(rq) = self.dispatch_cur_domain(hctx) {
                return Some(rq);
            }
        }
        self.hctxs[hctx].batching = 0;
        for _ in 0..NR_DOMAINS {
            let queue = &mut self.hctxs[hctx];
            queue.cur_domain = (queue.cur_domain + 1) % NR_DOMAINS;
            if let Some(rq) = self.dispatch_cur_domain(hctx) {
                return Some(rq);
            }
        }
        None
    }

    fn has_work(&self, hctx: u32) -> bool {
        self.hctxs.get(hctx as usize).is_some_and(|queue| {
            (0..NR_DOMAINS).any(|d| !queue.rqs[d].is_empty() || queue.staged[d] > 0)
        })
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
        debug_assert!(pool.in_use > 0, "completion of a request that holds no {domain} token");
        pool.in_use = pool.in_use.saturating_sub(1);
        let mut woke = false;
        for queue in &mut self.hctxs {
            woke |= std::mem::take(&mut queue.waiting[domain]);
        }
        if woke {
            AfterCompletion::RunAllQueues
        } else {
            AfterCompletion::RunQueue
        }
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
            ("write_lat_nsec", self.targets[Domain::Write as usize] as i64),
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
            return Err(TunableError::OutOfRange {
                name: name.to_string(),
                value,
                expected: "a latency target in nanoseconds, >= 0".to_string(),
            });
        }
        self.targets[domain as usize] = value as u64;
        Ok(())
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        let mut out = Vec::with_capacity(3 * NR_DOMAINS);
        for domain in Domain::ALL {
            let pool = self.tokens[domain as usize];
            out.push((format!("{}_tokens", domain.name()), pool.depth as f64));
            out.push((format!("{}_tokens_in_use", domain.name()), pool.in_use as f64));
            let waiting = self.hctxs.iter().filter(|q| q.waiting[domain as usize]).count();
            out.push((format!("{}_waiting_hctxs", domain.name()), waiting as f64));
        }
        out
    }
}
