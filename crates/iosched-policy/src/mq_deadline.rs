//! `mq-deadline`: the Linux deadline scheduler for blk-mq (block/mq-deadline.c, Documentation/block/deadline-iosched.rst),
//! restated from the kernel's behaviour, not its code.
//!
//! # Model
//!
//! One scheduler instance serves the whole device: every hardware queue dispatches from the same state, so
//! [`Elevator::dispatch`] may return a request inserted on any hardware queue, [`Elevator::has_work`] ignores its
//! argument, and [`Elevator::locking`] is [`Locking::Device`] (the kernel's `dd->lock`).
//!
//! Requests are split into three priority levels by I/O priority class: RT → 0, BE and none → 1, IDLE → 2. Each level
//! keeps, per direction (read, write), a sector-sorted set, a FIFO in insertion order whose entries carry a deadline
//! (insertion time + `read_expire` or `write_expire`), and the start sector of the last request it dispatched in that
//! direction. Each level also counts requests inserted and completed; their difference ("queued" in the kernel's
//! sense) includes requests the device is still working on.
//!
//! Device-wide state: the direction of the last batch (`last_dir`, initially write, as in the kernel), `batching`
//! (requests dispatched in the current batch) and `starved` (read batches started while writes were waiting).
//!
//! Dispatch, per call:
//! 1. Aging: if at least two levels have queued requests (inserted − completed), try level 1 then level 2 with the
//!    selection below, but only accept a request inserted at least `prio_aging_expire` ago.
//! 2. Otherwise levels 0, 1, 2 in turn; stop at the first level that yields a request or that still has queued
//!    requests (including in-flight ones), so a lower level waits until a higher one has drained *and completed*.
//!
//! By kernel version: the levels came in 5.14 ([`kernel::MQ_DEADLINE_PRIO_LEVELS`]; before, every request is at
//! level 1, whatever its class), the hold on in-flight requests and step 1's aging in 5.15
//! ([`kernel::MQ_DEADLINE_PRIO_AGING`]; on 5.14 dispatch takes the first level that yields a request, and there is
//! no `prio_aging_expire` tunable).
//!
//! Selection within a level:
//! - Continue the batch: if the level has a request in `last_dir` at or past its last dispatched position and
//!   `batching < fifo_batch`, take it.
//! - Otherwise pick a direction: if reads are queued and writes too and `starved++ >= writes_starved`, writes;
//!   else reads if any; else writes (either way of reaching writes resets `starved` to 0).
//! - In that direction take the FIFO head if it has expired (now ≥ deadline) or no request lies at or past the last
//!   dispatched position; otherwise the next request in sector order. Set `last_dir`, reset `batching` to 0.
//! - Then (aging pass only) give up if the request is too young; else `batching += 1`, remove the request and record
//!   its start sector as the level's last position in that direction.
//!
//! As in the kernel, the aging pass performs the direction choice before its age test, so a pass that dispatches
//! nothing can still bump `starved`, switch `last_dir` and reset `batching`. This is kept on purpose.
//!
//! Merging ([`Elevator::bio_merge`]): first a back merge into a held request of the bio's level and direction that
//! ends where the bio starts (the kernel's merge hash), then, if `front_merges` is 1, a front merge into one that
//! starts where the bio ends (the kernel's sort-tree lookup); a front merge moves the request in the sorted set.
//! A merge needs the same operation, the same I/O priority (class and level) and the same cgroup, and must stay
//! within `max_sectors`.
//!
//! # Tunables (sysfs names and units)
//!
//! | name | unit | default | accepted |
//! |---|---|---|---|
//! | `read_expire` | ms | 500 | 0 ..= i32::MAX |
//! | `write_expire` | ms | 5000 | 0 ..= i32::MAX |
//! | `writes_starved` | read batches | 2 | 0 ..= i32::MAX |
//! | `front_merges` | 0/1 | 1 | 0, 1 |
//! | `async_depth` | requests | 0 = nr_requests | 0 ..= i32::MAX |
//! | `fifo_batch` | requests | 16 | 0 ..= i32::MAX |
//! | `prio_aging_expire` | ms | 10000 | 0 ..= i32::MAX |
//!
//! # Simplifications and deviations (all deliberate)
//!
//! - **Time** is in nanoseconds with no jiffy rounding; the kernel stores expiry times in jiffies (sysfs ms rounded
//!   up to a tick), so its deadlines are coarser by up to one tick.
//! - **Age test** uses the stored insertion time. The kernel recomputes it as `fifo_time − current expire`, which
//!   differs only if `read_expire`/`write_expire` change while requests are queued.
//! - **No at-head dispatch list.** The trait has no at-head insert and the simulator has no requeues or flush
//!   sequences, so the kernel's device-wide `dispatch` list would always be empty.
//! - **Bio merges only.** Request-to-request merges (the kernel's attempt to join the grown request with its
//!   neighbour after a bio merge, and insert-time merges) are not modelled because the trait cannot retire a request
//!   id. So the rule "a merged request keeps the earlier deadline" never applies here; a bio merge leaves the held
//!   request's deadline and FIFO position unchanged (the bio has no deadline of its own), as in the kernel.
//! - **No `last_merge` cache.** The kernel first tries the most recently merged/inserted request and can front-merge
//!   through it even when `front_merges` is 0; here `front_merges = 0` disables front merges completely.
//! - **Back-merge candidates.** Every held request of the bio's level and direction that ends where the bio starts
//!   is tried, lowest id first; the kernel's merge hash offers only the most recently hashed one.
//! - **Merge limits** are only `max_sectors`; segment counts and other queue limits are ignored.
//! - **Tunable ranges** are enforced by rejecting (`TunableError::OutOfRange`); the kernel clamps silently.
//!   `writes_starved` below 0 is rejected: the kernel accepts it but compares it as a huge unsigned number.
//! - **`async_depth`** (Linux 5.14+, [`kernel::MQ_DEADLINE_ASYNC_DEPTH`]) limits every request but a sync read
//!   (writes, direct ones too) through `limit_depth`, as the kernel of the run's version does (0 reads back for the
//!   version's default): 5.14 to 6.10 pass async_depth (default 3/4 of `nr_requests`) to the sbitmap as a depth *per
//!   word*, so with 256 tags in 64-bit words it limits nothing (192 > 64), and set min_shallow_depth to it (wake
//!   batch 8); 6.11 ([`kernel::MQ_DEADLINE_WORD_DEPTH`]) defaults it to `nr_requests`, scales it to the word and
//!   sets min_shallow_depth 1 (wake batch 1); 6.17+ ([`kernel::SBITMAP_WHOLE_SHALLOW_DEPTH`]) pass it as a share of
//!   the whole tag set. Before 5.14 there is no limit and no `async_depth` tunable.
//! - **Directions:** writes and discards go to the write direction, everything else (reads; flushes, which the
//!   kernel never routes through the elevator) to the read direction, following the kernel's odd/even op rule.
//! - **Zoned devices** (write ordering per zone) are not modelled.
//! - **Restarts:** `dd_finish_request` kicks no queue, so on completion the policy asks only for blk-mq's restart
//!   ([`AfterCompletion::Restart`]: a re-run if a run stopped for want of a driver tag). Any hardware queue can
//!   dispatch any request, and the only time `dispatch` returns nothing while `has_work` is true is when a higher
//!   level still has requests in flight (or another CPU's call took the request): the lower level's requests then
//!   wait for the next queue run, a new insert's or blk-mq's delayed re-run 3 ms after the empty dispatch (the
//!   simulator's block layer books it, `BLK_MQ_BUDGET_DELAY`).
//! - Counters are 64-bit, the kernel's 32-bit (wrapping) ones never wrap in a simulation.

use crate::id_map::{DenseMap, IdMap};
use std::collections::{BTreeSet, VecDeque};

use crate::kernel::{self, KernelVersion, SchedTags};
use crate::{
    apply_merge, mergeable, tunable_in_range, tunable_switch, AfterCompletion, Elevator,
    IoprioClass, LockAcquisitions, Locking, MergeSide, Op, Request, TunableError,
};

const NS_PER_MS: u64 = 1_000_000;
const LEVELS: usize = 3;
const LEVEL_NAMES: [&str; LEVELS] = ["rt", "be", "idle"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Read = 0,
    Write = 1,
}

fn dir_of(op: Op) -> Dir {
    match op {
        Op::Write | Op::Discard => Dir::Write,
        Op::Read | Op::Flush => Dir::Read,
    }
}

fn level_of(class: IoprioClass) -> usize {
    match class {
        IoprioClass::RealTime => 0,
        IoprioClass::BestEffort | IoprioClass::None => 1,
        IoprioClass::Idle => 2,
    }
}

/// A request the scheduler holds, with its bookkeeping.
struct Held {
    rq: Request,
    level: usize,
    dir: Dir,
    /// Insertion order: the FIFO key.
    seq: u64,
    insert_ns: u64,
    deadline_ns: u64,
    /// The next held request of this level and direction that ends at the same sector (ascending ids): the merge
    /// hash's chain.
    next_same_end: Option<u32>,
}

/// One direction of one priority level.
#[derive(Default)]
struct DirQueue {
    /// (start sector, id): the sort order.
    sorted: BTreeSet<(u64, u32)>,
    /// End sector → the lowest id of the held requests ending there, chained on in ascending ids
    /// (`Held::next_same_end`): back-merge candidates (the kernel's merge hash; a hash, as there, not a sorted set).
    by_end: IdMap<u64, u32>,
    /// (insertion sequence, id) in insertion order: the FIFO (a list, as the kernel's). A request dispatched from
    /// the middle stays until it reaches the front (`fifo_live` counts the others); the front is always held.
    fifo: VecDeque<(u64, u32)>,
    fifo_live: usize,
    /// Start sector of the last request dispatched from here.
    latest_pos: u64,
}

#[derive(Default)]
struct Level {
    dirs: [DirQueue; 2],
    inserted: u64,
    completed: u64,
}

impl Level {
    /// Inserted and not yet completed: held here or in flight.
    fn queued(&self) -> u64 {
        self.inserted - self.completed
    }
}

pub struct MqDeadline {
    held: DenseMap<Held>,
    /// Dispatched, not yet completed: id → level it was counted in.
    in_flight: DenseMap<usize>,
    levels: [Level; LEVELS],
    last_dir: Dir,
    batching: u32,
    starved: u32,
    next_seq: u64,
    // Tunables, in sysfs units.
    read_expire_ms: i64,
    write_expire_ms: i64,
    writes_starved: u32,
    front_merges: bool,
    async_depth: i64,
    fifo_batch: u32,
    prio_aging_expire_ms: i64,
    kernel: KernelVersion,
}

impl Default for MqDeadline {
    fn default() -> Self {
        Self::new()
    }
}

impl MqDeadline {
    pub fn new() -> Self {
        Self {
            held: DenseMap::default(),
            in_flight: DenseMap::default(),
            levels: Default::default(),
            last_dir: Dir::Write,
            batching: 0,
            starved: 0,
            next_seq: 0,
            read_expire_ms: 500,
            write_expire_ms: 5000,
            writes_starved: 2,
            front_merges: true,
            async_depth: 0,
            fifo_batch: 16,
            prio_aging_expire_ms: 10_000,
            kernel: KernelVersion::NEWEST,
        }
    }

    /// async_depth in requests: the user's, or the version's default (`dd_depth_updated`).
    fn effective_async_depth(&self, nr_requests: u32) -> u32 {
        match self.async_depth {
            0 if self.kernel.has(&kernel::MQ_DEADLINE_WORD_DEPTH) => nr_requests,
            0 => (3 * nr_requests / 4).max(1),
            depth => depth.min(u32::MAX as i64) as u32,
        }
    }

    fn expire_ns(&self, dir: Dir) -> u64 {
        let ms = match dir {
            Dir::Read => self.read_expire_ms,
            Dir::Write => self.write_expire_ms,
        };
        ms as u64 * NS_PER_MS
    }

    fn queue(&self, level: usize, dir: Dir) -> &DirQueue {
        &self.levels[level].dirs[dir as usize]
    }

    /// First request of `level`/`dir` starting at or after the last dispatched position.
    fn next_in_sort(&self, level: usize, dir: Dir) -> Option<u32> {
        let q = self.queue(level, dir);
        q.sorted
            .range((q.latest_pos, 0)..)
            .next()
            .map(|&(_, id)| id)
    }

    #[cfg(test)]
    fn by_end_is_empty(&self) -> bool {
        self.levels
            .iter()
            .all(|l| l.dirs.iter().all(|d| d.by_end.is_empty()))
    }

    fn fifo_head(&self, level: usize, dir: Dir) -> Option<u32> {
        self.queue(level, dir).fifo.front().map(|&(_, id)| id)
    }

    /// Chain `id` (held, ending at `end`) into its queue's merge hash, keeping each chain in ascending ids.
    fn hash_add(&mut self, level: usize, dir: Dir, id: u32, end: u64) {
        let head = self.levels[level].dirs[dir as usize]
            .by_end
            .get(&end)
            .copied();
        match head {
            Some(first) if first < id => {
                let mut at = first;
                while let Some(next) = self.held[&at].next_same_end.filter(|&n| n < id) {
                    at = next;
                }
                let after = self.held[&at].next_same_end;
                self.held.get_mut(&id).expect("held").next_same_end = after;
                self.held.get_mut(&at).expect("held").next_same_end = Some(id);
            }
            _ => {
                self.held.get_mut(&id).expect("held").next_same_end = head;
                self.levels[level].dirs[dir as usize].by_end.insert(end, id);
            }
        }
    }

    /// Unchain `id` (held, ending at `end`) from its queue's merge hash.
    fn hash_remove(&mut self, level: usize, dir: Dir, id: u32, end: u64) {
        let after = self.held.get_mut(&id).expect("held").next_same_end.take();
        let q = &mut self.levels[level].dirs[dir as usize];
        let first = q.by_end[&end];
        if first == id {
            match after {
                Some(next) => q.by_end.insert(end, next),
                None => q.by_end.remove(&end),
            };
            return;
        }
        let mut at = first;
        while self.held[&at].next_same_end != Some(id) {
            at = self.held[&at]
                .next_same_end
                .expect("id is on its end sector's chain");
        }
        self.held.get_mut(&at).expect("held").next_same_end = after;
    }

    fn fifo_expired(&self, level: usize, dir: Dir, now_ns: u64) -> bool {
        self.fifo_head(level, dir)
            .is_some_and(|id| now_ns >= self.held[&id].deadline_ns)
    }

    /// Choose a request from one level. `latest_start_ns`: only requests inserted at or before it may go.
    fn dispatch_level(
        &mut self,
        level: usize,
        latest_start_ns: i128,
        now_ns: u64,
    ) -> Option<Request> {
        let continued = self
            .next_in_sort(level, self.last_dir)
            .filter(|_| self.batching < self.fifo_batch);
        let (id, dir) = match continued {
            Some(id) => (id, self.last_dir),
            None => {
                let reads = !self.queue(level, Dir::Read).fifo.is_empty();
                let writes = !self.queue(level, Dir::Write).fifo.is_empty();
                let dir = if reads {
                    let writes_starve = writes && {
                        let before = self.starved;
                        self.starved = self.starved.wrapping_add(1);
                        before >= self.writes_starved
                    };
                    if writes_starve {
                        self.starved = 0;
                        Dir::Write
                    } else {
                        Dir::Read
                    }
                } else if writes {
                    self.starved = 0;
                    Dir::Write
                } else {
                    return None;
                };
                let next = self.next_in_sort(level, dir);
                let id = if self.fifo_expired(level, dir, now_ns) || next.is_none() {
                    self.fifo_head(level, dir)
                } else {
                    next
                }?;
                self.last_dir = dir;
                self.batching = 0;
                (id, dir)
            }
        };
        if self.held[&id].insert_ns as i128 > latest_start_ns {
            return None;
        }
        self.batching += 1;
        let held = self.remove(id);
        self.levels[level].dirs[dir as usize].latest_pos = held.rq.sector;
        self.in_flight.insert(id, level);
        Some(held.rq)
    }

    fn remove(&mut self, id: u32) -> Held {
        let (level, dir, end) = {
            let held = &self.held[&id];
            (held.level, held.dir, held.rq.end_sector())
        };
        self.hash_remove(level, dir, id, end);
        let held = self.held.remove(&id).expect("dispatching a held request");
        let q = &mut self.levels[level].dirs[dir as usize];
        q.sorted.remove(&(held.rq.sector, id));
        q.fifo_live -= 1;
        // Drop the requests at the front that have left (an id may be held again later: its sequence tells).
        while let Some(&(seq, front)) = q.fifo.front() {
            if self.held.get(&front).is_some_and(|h| h.seq == seq) {
                break;
            }
            q.fifo.pop_front();
        }
        held
    }

    /// The kernel's `blk_rq_merge_ok` conditions we model (besides contiguity and size, checked by [`mergeable`]).
    fn compatible(held: &Request, bio: &Request) -> bool {
        held.op == bio.op
            && held.ioprio_class == bio.ioprio_class
            && held.ioprio_level == bio.ioprio_level
            && held.cgroup == bio.cgroup
    }
}

impl Elevator for MqDeadline {
    fn name(&self) -> &'static str {
        "mq-deadline"
    }

    fn locking(&self) -> Locking {
        Locking::Device
    }

    /// dd_bio_merge and dd_insert_requests take dd->lock on submission, dd_dispatch_request on every call (dd_has_work
    /// does not); dd_finish_request only updates atomic counters (Linux 6.3, non-zoned devices).
    fn lock_acquisitions(&self) -> LockAcquisitions {
        LockAcquisitions {
            submit: 2,
            dispatch: 1,
            complete: 0,
            submit_unbooked: 0,
        }
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        if bio.op == Op::Flush {
            return None;
        }
        let (level, dir) = (level_of(bio.ioprio_class), dir_of(bio.op));
        let q = self.queue(level, dir);
        let ok = |id: u32, side: MergeSide| {
            let held = &self.held[&id].rq;
            Self::compatible(held, bio) && mergeable(held, bio, max_sectors) == Some(side)
        };
        let chain = std::iter::successors(q.by_end.get(&bio.sector).copied(), |id| {
            self.held[id].next_same_end
        });
        let back = chain.into_iter().find(|&id| ok(id, MergeSide::Back));
        if let Some(id) = back {
            self.hash_remove(level, dir, id, bio.sector);
            let held = &mut self.held.get_mut(&id).unwrap().rq;
            apply_merge(held, bio, MergeSide::Back);
            let end = held.end_sector();
            self.hash_add(level, dir, id, end);
            return Some(id);
        }
        if !self.front_merges {
            return None;
        }
        let end = bio.end_sector();
        let front = q
            .sorted
            .range((end, 0)..=(end, u32::MAX))
            .map(|&(_, id)| id)
            .find(|&id| ok(id, MergeSide::Front));
        if let Some(id) = front {
            let held = &mut self.held.get_mut(&id).unwrap().rq;
            let q = &mut self.levels[level].dirs[dir as usize];
            q.sorted.remove(&(held.sector, id));
            apply_merge(held, bio, MergeSide::Front);
            q.sorted.insert((held.sector, id));
            return Some(id);
        }
        None
    }

    fn insert(&mut self, rq: Request, now_ns: u64) {
        let level = if self.kernel.has(&kernel::MQ_DEADLINE_PRIO_LEVELS) {
            level_of(rq.ioprio_class)
        } else {
            level_of(IoprioClass::BestEffort) // before 5.14: priorities ignored, one level
        };
        let (dir, id) = (dir_of(rq.op), rq.id);
        debug_assert!(
            !self.held.contains_key(&id) && !self.in_flight.contains_key(&id),
            "request {id} inserted twice"
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        let deadline_ns = now_ns + self.expire_ns(dir);
        let lvl = &mut self.levels[level];
        lvl.inserted += 1;
        let q = &mut lvl.dirs[dir as usize];
        q.sorted.insert((rq.sector, id));
        q.fifo.push_back((seq, id));
        q.fifo_live += 1;
        let end = rq.end_sector();
        self.held.insert(
            id,
            Held {
                rq,
                level,
                dir,
                seq,
                insert_ns: now_ns,
                deadline_ns,
                next_same_end: None,
            },
        );
        self.hash_add(level, dir, id, end);
    }

    fn dispatch(&mut self, _hctx: u32, now_ns: u64) -> Option<Request> {
        let aging = self.kernel.has(&kernel::MQ_DEADLINE_PRIO_AGING);
        let busy_levels = self.levels.iter().filter(|l| l.queued() > 0).count();
        if aging && busy_levels >= 2 {
            let latest_start =
                now_ns as i128 - (self.prio_aging_expire_ms as u64 * NS_PER_MS) as i128;
            for level in 1..LEVELS {
                if let Some(rq) = self.dispatch_level(level, latest_start, now_ns) {
                    return Some(rq);
                }
            }
        }
        for level in 0..LEVELS {
            let rq = self.dispatch_level(level, now_ns as i128, now_ns);
            // 5.15+: a level with requests in flight holds the lower ones (`dd_queued`); on 5.14 a level that
            // gave nothing lets the next one go.
            if rq.is_some() || (aging && self.levels[level].queued() > 0) {
                return rq;
            }
        }
        None
    }

    fn set_kernel_version(&mut self, kernel: KernelVersion) {
        self.kernel = kernel;
    }

    /// dd_limit_depth: every request except a sync read gets async_depth as its shallow depth, in the units of the
    /// version (see the module doc); none before 5.14.
    fn limit_depth(&self, rq: &Request, tags: SchedTags) -> Option<u32> {
        if !self.kernel.has(&kernel::MQ_DEADLINE_ASYNC_DEPTH) || rq.is_sync_read() {
            return None;
        }
        let depth = self.effective_async_depth(tags.nr_requests);
        if self.kernel.has(&kernel::SBITMAP_WHOLE_SHALLOW_DEPTH)
            || !self.kernel.has(&kernel::MQ_DEADLINE_WORD_DEPTH)
        {
            return Some(depth);
        }
        // dd_to_word_depth: scaled from the tag set to one word, rounded up.
        let nr = tags.nr_requests.max(1) as u64;
        Some((((depth as u64) << tags.shift).div_ceil(nr)).min(u32::MAX as u64) as u32)
    }

    /// dd_depth_updated: async_depth on 5.14 to 6.10 (so freed tags wake sleepers up to 8 at a time); 1 since 6.11
    /// (one at a time; debugfs `sched_tags` on Linux 6.18: wake_batch=1).
    fn min_shallow_depth(&self, tags: SchedTags) -> Option<u32> {
        if !self.kernel.has(&kernel::MQ_DEADLINE_ASYNC_DEPTH) {
            None
        } else if self.kernel.has(&kernel::MQ_DEADLINE_WORD_DEPTH) {
            Some(1)
        } else {
            Some(self.effective_async_depth(tags.nr_requests))
        }
    }

    fn has_work(&self, _hctx: u32) -> bool {
        !self.held.is_empty()
    }

    fn completed(&mut self, rq: &Request, _issue_ns: u64, _now_ns: u64) -> AfterCompletion {
        let level = self
            .in_flight
            .remove(&rq.id)
            .unwrap_or_else(|| panic!("request {} completed but was not dispatched", rq.id));
        self.levels[level].completed += 1;
        // dd_finish_request kicks nothing (6.3, 6.12): blk-mq's restart re-runs a queue if a run wanted a driver
        // tag. A lower level's requests held back while this level had some in flight wait for the next run.
        AfterCompletion::Restart
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        let mut all = vec![
            ("read_expire", self.read_expire_ms),
            ("write_expire", self.write_expire_ms),
            ("writes_starved", self.writes_starved as i64),
            ("front_merges", self.front_merges as i64),
            ("async_depth", self.async_depth),
            ("fifo_batch", self.fifo_batch as i64),
            ("prio_aging_expire", self.prio_aging_expire_ms),
        ];
        if !self.kernel.has(&kernel::MQ_DEADLINE_ASYNC_DEPTH) {
            all.retain(|&(name, _)| name != "async_depth");
        }
        if !self.kernel.has(&kernel::MQ_DEADLINE_PRIO_AGING) {
            all.retain(|&(name, _)| name != "prio_aging_expire");
        }
        all
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        match name {
            "read_expire" => tunable_in_range(name, value, 0, i32::MAX as i64, " milliseconds")
                .map(|v| self.read_expire_ms = v),
            "write_expire" => tunable_in_range(name, value, 0, i32::MAX as i64, " milliseconds")
                .map(|v| self.write_expire_ms = v),
            "prio_aging_expire" if self.kernel.has(&kernel::MQ_DEADLINE_PRIO_AGING) => {
                tunable_in_range(name, value, 0, i32::MAX as i64, " milliseconds")
                    .map(|v| self.prio_aging_expire_ms = v)
            }
            "writes_starved" => tunable_in_range(name, value, 0, i32::MAX as i64, "")
                .map(|v| self.writes_starved = v as u32),
            "fifo_batch" => tunable_in_range(name, value, 0, i32::MAX as i64, "")
                .map(|v| self.fifo_batch = v as u32),
            "async_depth" if self.kernel.has(&kernel::MQ_DEADLINE_ASYNC_DEPTH) => {
                tunable_in_range(name, value, 0, i32::MAX as i64, "").map(|v| self.async_depth = v)
            }
            "front_merges" => tunable_switch(name, value).map(|v| self.front_merges = v),
            _ => Err(TunableError::Unknown {
                name: name.to_string(),
                known: self.tunables().into_iter().map(|(n, _)| n).collect(),
            }),
        }
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (level, name) in LEVEL_NAMES.iter().enumerate() {
            let lvl = &self.levels[level];
            out.push((format!("{name}_reads_queued"), lvl.dirs[0].fifo_live as f64));
            out.push((
                format!("{name}_writes_queued"),
                lvl.dirs[1].fifo_live as f64,
            ));
            let held = (lvl.dirs[0].fifo_live + lvl.dirs[1].fifo_live) as u64;
            out.push((format!("{name}_in_flight"), (lvl.queued() - held) as f64));
        }
        out.push(("starved".to_string(), self.starved as f64));
        out.push(("batching".to_string(), self.batching as f64));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, check_conservation, Event, Flow, Hook, Lcg, Traffic};

    const MS: u64 = NS_PER_MS;

    fn rq(id: u32, op: Op, sector: u64, class: IoprioClass) -> Request {
        Request {
            ioprio_class: class,
            ..testkit::rq(id, op, sector, 8)
        }
    }

    fn read(id: u32, sector: u64) -> Request {
        rq(id, Op::Read, sector, IoprioClass::None)
    }

    fn write(id: u32, sector: u64) -> Request {
        rq(id, Op::Write, sector, IoprioClass::None)
    }

    fn with(tunables: &[(&str, i64)]) -> MqDeadline {
        let mut dd = MqDeadline::new();
        for &(name, value) in tunables {
            dd.set_tunable(name, value).unwrap();
        }
        dd
    }

    /// Dispatch `n` times at `now` (hctx is irrelevant: one shared instance), returning the ids.
    fn take(dd: &mut MqDeadline, n: usize, now: u64) -> Vec<u32> {
        (0..n)
            .filter_map(|i| dd.dispatch(i as u32 % 2, now).map(|r| r.id))
            .collect()
    }

    fn stat(dd: &MqDeadline, name: &str) -> f64 {
        dd.introspect()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
    }

    #[test]
    fn serves_reads_in_sector_order_within_a_batch() {
        let mut dd = MqDeadline::new();
        dd.insert(read(1, 300), 0);
        dd.insert(read(2, 100), 0);
        dd.insert(read(3, 200), 0);
        assert_eq!(
            take(&mut dd, 1, 0),
            [2],
            "lowest sector first, not arrival order"
        );
        // Arrives behind the scan position: the batch goes on upwards and only then wraps to the FIFO head.
        dd.insert(read(4, 50), 0);
        assert_eq!(take(&mut dd, 3, 0), [3, 1, 4]);
        assert_eq!(
            stat(&dd, "batching"),
            1.0,
            "sector 50 started a new batch from the FIFO"
        );
        assert!(!dd.has_work(0));
        assert_eq!(dd.dispatch(0, 0), None);
    }

    #[test]
    fn after_writes_starved_read_batches_a_write_batch_is_served() {
        // fifo_batch 2, writes_starved 2 (default).
        let mut dd = with(&[("fifo_batch", 2)]);
        for i in 0..7 {
            dd.insert(read(i, i as u64 * 8), 0);
        }
        assert_eq!(
            take(&mut dd, 1, 0),
            [0],
            "a read batch starts before any write waits"
        );
        dd.insert(write(100, 1000), 0);
        assert_eq!(take(&mut dd, 1, 0), [1], "batch continues: reads 0, 1");
        // Batch boundary with a write waiting: starved 0 -> 1, reads again.
        assert_eq!(take(&mut dd, 2, 0), [2, 3]);
        assert_eq!(stat(&dd, "starved"), 1.0);
        // starved 1 -> 2, reads again.
        assert_eq!(take(&mut dd, 2, 0), [4, 5]);
        assert_eq!(stat(&dd, "starved"), 2.0);
        // starved 2 >= writes_starved: the write gets its batch, starved resets.
        assert_eq!(take(&mut dd, 1, 0), [100]);
        assert_eq!(stat(&dd, "starved"), 0.0);
        assert_eq!(take(&mut dd, 2, 0), [6]);
    }

    #[test]
    fn writes_alone_are_served_and_reads_win_by_default() {
        let mut dd = with(&[("fifo_batch", 1)]);
        dd.insert(write(1, 0), 0);
        dd.insert(read(2, 0), 0);
        dd.insert(write(3, 8), 0);
        // last_dir starts as write (as in the kernel), so a fresh scheduler continues a "write batch" first.
        assert_eq!(take(&mut dd, 1, 0), [1]);
        // batch over: reads pending, writes pending, starved 0 < 2 -> read.
        assert_eq!(take(&mut dd, 2, 0), [2, 3]);
    }

    #[test]
    fn an_expired_request_is_served_first_even_out_of_sector_order() {
        let setup = || {
            let mut dd = with(&[("fifo_batch", 1)]);
            dd.insert(read(1, 1000), 0); // deadline 500 ms
            dd.insert(read(2, 10), 100 * MS);
            dd.insert(read(3, 20), 100 * MS);
            assert_eq!(
                take(&mut dd, 1, 100 * MS),
                [2],
                "nothing expired: sector order"
            );
            dd
        };
        let mut early = setup();
        assert_eq!(
            take(&mut early, 2, 400 * MS),
            [3, 1],
            "not expired at 400 ms"
        );

        let mut late = setup();
        assert_eq!(
            take(&mut late, 1, 500 * MS),
            [1],
            "expired at 500 ms: FIFO head"
        );
        // The scan position is now sector 1000; nothing lies past it, so the FIFO head again.
        assert_eq!(take(&mut late, 1, 500 * MS), [3]);
    }

    #[test]
    fn an_expired_request_waits_for_the_current_batch_to_end() {
        let mut dd = with(&[("fifo_batch", 3)]);
        dd.insert(read(1, 1000), 0);
        dd.insert(read(2, 10), 0);
        dd.insert(read(3, 20), 0);
        dd.insert(read(4, 30), 0);
        dd.insert(read(5, 40), 0);
        assert_eq!(take(&mut dd, 1, 0), [2]);
        // Everything has expired, but the batch (3 requests) continues in sector order first.
        assert_eq!(take(&mut dd, 2, 600 * MS), [3, 4]);
        assert_eq!(
            take(&mut dd, 1, 600 * MS),
            [1],
            "new batch: the expired FIFO head"
        );
    }

    #[test]
    fn higher_level_first_and_a_lower_level_waits_for_in_flight_requests() {
        let mut dd = MqDeadline::new();
        dd.insert(rq(1, Op::Read, 0, IoprioClass::BestEffort), 0);
        dd.insert(rq(2, Op::Read, 500, IoprioClass::Idle), 0);
        dd.insert(rq(3, Op::Read, 100, IoprioClass::RealTime), 0);
        let rt = dd.dispatch(0, 0).unwrap();
        assert_eq!(rt.id, 3, "RT before BE despite the sector order");
        assert!(dd.has_work(0));
        assert_eq!(
            dd.dispatch(0, MS),
            None,
            "BE waits while the RT request is in flight"
        );
        assert_eq!(stat(&dd, "rt_in_flight"), 1.0);
        // The BE request was held back, but dd_finish_request kicks no queue: the next run dispatches it (blk-mq's
        // delayed re-run, 3 ms after the empty dispatch above).
        assert_eq!(dd.completed(&rt, 0, 2 * MS), AfterCompletion::Restart);
        let be = dd.dispatch(1, 2 * MS).unwrap();
        assert_eq!(be.id, 1);
        assert_eq!(
            dd.dispatch(0, 2 * MS),
            None,
            "IDLE waits for BE to complete"
        );
        assert_eq!(dd.completed(&be, 0, 3 * MS), AfterCompletion::Restart);
        let idle = dd.dispatch(1, 3 * MS).unwrap();
        assert_eq!(idle.id, 2);
        assert_eq!(dd.completed(&idle, 0, 4 * MS), AfterCompletion::Restart);
    }

    /// The same three reads on three kernels: a best-effort one at sector 0, a real-time one at sector 100 (both at
    /// time 0), then, with the real-time one in flight, a second real-time one at sector 200.
    /// - 6.3 (5.15+): RT 3 first; with it in flight the BE request is held (`dd_queued`): nothing; then RT 4.
    /// - 5.14: levels but no hold: RT 3, then BE 1 (no RT request queued, one in flight does not count).
    /// - 4.15: no levels: one sector-sorted read queue, so BE 1 (sector 0) then RT 3 (sector 100): priorities
    ///   ignored. No `prio_aging_expire` tunable before 5.15.
    #[test]
    fn priority_levels_arrive_in_5_14_and_the_hold_on_in_flight_requests_in_5_15() {
        let on = |version| {
            let mut dd = MqDeadline::new();
            dd.set_kernel_version(KernelVersion::parse(version).unwrap());
            dd.insert(rq(1, Op::Read, 0, IoprioClass::BestEffort), 0);
            dd.insert(rq(3, Op::Read, 100, IoprioClass::RealTime), 0);
            dd
        };
        let mut dd = on("6.3");
        assert_eq!(dd.dispatch(0, 0).map(|r| r.id), Some(3));
        assert_eq!(
            dd.dispatch(0, MS).map(|r| r.id),
            None,
            "BE held while RT 3 is in flight"
        );
        dd.insert(rq(4, Op::Read, 200, IoprioClass::RealTime), MS);
        assert_eq!(dd.dispatch(0, MS).map(|r| r.id), Some(4));

        let mut dd = on("5.14");
        assert_eq!(take(&mut dd, 2, 0), vec![3, 1]);

        let mut dd = on("4.15");
        assert_eq!(take(&mut dd, 2, 0), vec![1, 3]);
        assert!(dd.set_tunable("prio_aging_expire", 5_000).is_err());
        assert!(on("5.15").set_tunable("prio_aging_expire", 5_000).is_ok());
    }

    #[test]
    fn aging_serves_an_old_be_request_despite_rt_work() {
        let mut dd = MqDeadline::new();
        dd.insert(rq(1, Op::Read, 0, IoprioClass::BestEffort), 0);
        let mut next_id = 10;
        let mut serve_rt = |dd: &mut MqDeadline, now: u64| {
            dd.insert(rq(next_id, Op::Read, 100, IoprioClass::RealTime), now);
            next_id += 1;
            let got = dd.dispatch(0, now).unwrap();
            dd.completed(&got, now, now);
            got.id
        };
        // Up to just before 10 s, RT work keeps the BE request waiting.
        for now in [MS, 5_000 * MS, 10_000 * MS - 1] {
            assert_ne!(serve_rt(&mut dd, now), 1);
        }
        assert_eq!(stat(&dd, "be_reads_queued"), 1.0);
        // At 10 s the BE request has aged: it goes even though an RT request is queued.
        dd.insert(rq(99, Op::Read, 100, IoprioClass::RealTime), 10_000 * MS);
        assert_eq!(take(&mut dd, 1, 10_000 * MS), [1]);
        assert_eq!(take(&mut dd, 1, 10_000 * MS), [99]);
    }

    #[test]
    fn aging_needs_two_busy_levels() {
        let mut dd = with(&[("prio_aging_expire", 0)]);
        dd.insert(rq(1, Op::Read, 0, IoprioClass::Idle), 0);
        // Only one level busy: no aging pass, plain dispatch.
        assert_eq!(take(&mut dd, 1, 0), [1]);
    }

    #[test]
    fn back_and_front_merges() {
        let mut dd = MqDeadline::new();
        dd.insert(read(1, 0), 0);
        dd.insert(read(2, 100), 0);
        assert_eq!(
            dd.bio_merge(&read(10, 8), 256),
            Some(1),
            "back merge: 0..8 + 8..16"
        );
        assert_eq!(
            dd.bio_merge(&read(11, 92), 256),
            Some(2),
            "front merge: 92..100 + 100..108"
        );
        assert_eq!(
            dd.bio_merge(&write(12, 16), 256),
            None,
            "a write never joins a read"
        );
        assert_eq!(
            dd.bio_merge(&rq(13, Op::Read, 16, IoprioClass::RealTime), 256),
            None,
            "different I/O priority"
        );
        assert_eq!(
            dd.bio_merge(&read(14, 16), 16),
            None,
            "would exceed max_sectors"
        );
        let mut other_level = read(16, 16);
        other_level.ioprio_level = 0;
        assert_eq!(
            dd.bio_merge(&other_level, 256),
            None,
            "same class, other priority level"
        );
        let mut other_cgroup = read(17, 16);
        other_cgroup.cgroup = 1;
        assert_eq!(dd.bio_merge(&other_cgroup, 256), None, "other cgroup");
        assert_eq!(dd.held[&1].deadline_ns, 500 * MS);
        assert_eq!(dd.bio_merge(&read(15, 16), 256), Some(1));
        assert_eq!(
            dd.held[&1].deadline_ns,
            500 * MS,
            "a merge keeps the request's deadline"
        );
        let first = dd.dispatch(0, 0).unwrap();
        assert_eq!((first.id, first.sector, first.nr_sectors), (1, 0, 24));
        let second = dd.dispatch(0, 0).unwrap();
        assert_eq!((second.id, second.sector, second.nr_sectors), (2, 92, 16));
    }

    #[test]
    fn back_merges_look_through_every_request_ending_at_the_bio_lowest_id_first() {
        // Four held reads of 100..108 in cgroups 1, 2, 0 and 3 (ids 7, 4, 9, 2): all end at 108, so the merge hash
        // chains them as 2, 4, 7, 9, and a bio starting at 108 joins the lowest id whose cgroup matches.
        let mut dd = MqDeadline::new();
        for (id, cgroup) in [(7, 1), (4, 2), (9, 0), (2, 3)] {
            dd.insert(
                Request {
                    cgroup,
                    ..read(id, 100)
                },
                0,
            );
        }
        assert_eq!(
            dd.bio_merge(&read(20, 108), 256),
            Some(9),
            "cgroup 0: the chain's tail"
        );
        assert_eq!(
            dd.bio_merge(
                &Request {
                    cgroup: 3,
                    ..read(21, 108)
                },
                256
            ),
            Some(2),
            "its head"
        );
        // 9 and 2 now end at 116 (chain 2, 9 there); 4 and 7 still end at 108.
        assert_eq!(
            dd.bio_merge(
                &Request {
                    cgroup: 1,
                    ..read(22, 108)
                },
                256
            ),
            Some(7)
        );
        assert_eq!(
            dd.bio_merge(
                &Request {
                    cgroup: 2,
                    ..read(23, 108)
                },
                256
            ),
            Some(4)
        );
        assert_eq!(
            dd.bio_merge(&read(24, 116), 256),
            Some(9),
            "9 ends at 116 too: 100..124 now"
        );
        assert_eq!(
            dd.bio_merge(
                &Request {
                    cgroup: 3,
                    ..read(25, 124)
                },
                256
            ),
            None,
            "2 ends at 116"
        );
        // All four are 100..116 or longer; sector order, ties by id: 2, 4, 7, 9.
        let out: Vec<(u32, u32)> = (0..4)
            .map(|_| dd.dispatch(0, 0).unwrap())
            .map(|r| (r.id, r.nr_sectors))
            .collect();
        assert_eq!(out, [(2, 16), (4, 16), (7, 16), (9, 24)]);
        assert!(dd.by_end_is_empty(), "every chain left with its requests");
        // Three compatible reads of 200..208 inserted as ids 8, 3, 12: the lowest id takes the bio (inserted
        // order would give 8, the kernel's newest-first hash chain 12).
        for id in [8, 3, 12] {
            dd.insert(read(id, 200), 0);
        }
        assert_eq!(dd.bio_merge(&read(30, 208), 256), Some(3));
    }

    #[test]
    fn the_fifo_skips_requests_that_left_it_even_when_their_id_returns() {
        // fifo_batch 1: every dispatch starts a batch and serves the FIFO's head once it is past its deadline
        // (500 ms). Reads 1, 2, 3 at sectors 300, 100, 200: the sorted scan takes 2 from the FIFO's middle; 2
        // completes and its id comes back at sector 50. At 600 ms all are expired: the FIFO serves 1, then 3
        // (the old entry of id 2 is not the new request 2), then 2.
        let mut dd = with(&[("fifo_batch", 1)]);
        for (id, sector) in [(1, 300), (2, 100), (3, 200)] {
            dd.insert(read(id, sector), 0);
        }
        let two = dd.dispatch(0, 0).unwrap();
        assert_eq!(two.id, 2);
        assert_eq!(stat(&dd, "be_reads_queued"), 2.0);
        dd.completed(&two, 0, 0);
        dd.insert(read(2, 50), 100 * MS);
        assert_eq!(stat(&dd, "be_reads_queued"), 3.0);
        assert_eq!(take(&mut dd, 3, 600 * MS), [1, 3, 2]);
        assert_eq!(stat(&dd, "be_reads_queued"), 0.0);
    }

    #[test]
    fn a_front_merge_moves_the_request_in_sector_order() {
        let mut dd = with(&[("fifo_batch", 4)]);
        dd.insert(read(1, 100), 0);
        dd.insert(read(2, 60), 0);
        assert_eq!(take(&mut dd, 1, 0), [2], "scan position now 60");
        dd.insert(read(3, 80), 0);
        // Grow request 1 (100..108) downwards three times, to 76..108: it now sorts before request 3 (80..88).
        for (bio, sector) in [(10, 92), (11, 84), (12, 76)] {
            assert_eq!(dd.bio_merge(&read(bio, sector), 256), Some(1));
        }
        assert_eq!((dd.held[&1].rq.sector, dd.held[&1].rq.nr_sectors), (76, 32));
        assert_eq!(
            take(&mut dd, 2, 0),
            [1, 3],
            "76 before 80 after the front merges"
        );
    }

    #[test]
    fn front_merges_zero_disables_only_front_merges() {
        let mut dd = with(&[("front_merges", 0)]);
        dd.insert(read(1, 100), 0);
        assert_eq!(
            dd.bio_merge(&read(10, 92), 256),
            None,
            "front merge disabled"
        );
        assert_eq!(
            dd.bio_merge(&read(11, 108), 256),
            Some(1),
            "back merge still on"
        );
        dd.set_tunable("front_merges", 1).unwrap();
        assert_eq!(dd.bio_merge(&read(12, 92), 256), Some(1));
    }

    #[test]
    fn tunables_have_sysfs_names_units_and_ranges() {
        let mut dd = MqDeadline::new();
        assert_eq!(
            dd.tunables(),
            vec![
                ("read_expire", 500),
                ("write_expire", 5000),
                ("writes_starved", 2),
                ("front_merges", 1),
                ("async_depth", 0),
                ("fifo_batch", 16),
                ("prio_aging_expire", 10_000),
            ]
        );
        // Milliseconds: read_expire 20 means a read inserted at 0 expires at 20 ms.
        dd.set_tunable("read_expire", 20).unwrap();
        dd.set_tunable("write_expire", 30).unwrap();
        dd.insert(read(1, 0), 0);
        dd.insert(write(2, 0), 0);
        assert_eq!(dd.held[&1].deadline_ns, 20 * MS);
        assert_eq!(dd.held[&2].deadline_ns, 30 * MS);
        dd.set_tunable("async_depth", 64).unwrap();
        assert!(dd.tunables().contains(&("async_depth", 64)));

        for (name, bad) in [
            ("read_expire", -1),
            ("write_expire", i32::MAX as i64 + 1),
            ("prio_aging_expire", -5),
            ("fifo_batch", -1),
            ("writes_starved", -1),
            ("async_depth", -1),
            ("front_merges", 2),
        ] {
            let err = dd.set_tunable(name, bad).unwrap_err();
            assert!(
                matches!(&err, TunableError::OutOfRange { name: n, value, .. } if n == name && *value == bad),
                "{name}={bad}: {err}"
            );
        }
        assert_eq!(
            dd.set_tunable("front_merges", 2).unwrap_err().to_string(),
            "tunable front_merges=2: expected 0 or 1"
        );
        let unknown = dd.set_tunable("slice_idle", 0).unwrap_err();
        assert!(matches!(unknown, TunableError::Unknown { ref known, .. } if known.len() == 7));
        assert_eq!(
            dd.tunables()[0],
            ("read_expire", 20),
            "a rejected value changes nothing"
        );
    }

    #[test]
    fn by_name_builds_it() {
        let dd = crate::by_name("mq-deadline", 4).unwrap();
        assert_eq!(dd.name(), "mq-deadline");
        assert_eq!(dd.locking(), Locking::Device);
        assert!(crate::SCHEDULERS.contains(&"mq-deadline"));
    }

    /// mq-deadline's own counters agree with the harness: requests queued (inserted, not dispatched) and in flight,
    /// summed over the priority levels; and it ends with every level empty.
    struct Counts;

    impl Hook<MqDeadline> for Counts {
        fn check(&mut self, dd: &MqDeadline, flow: &Flow, event: Event) {
            let sum = |suffixes: &[&str]| -> usize {
                LEVEL_NAMES
                    .iter()
                    .flat_map(|l| suffixes.iter().map(move |s| format!("{l}_{s}")))
                    .map(|n| stat(dd, &n) as usize)
                    .sum()
            };
            match event {
                Event::Step => {
                    assert_eq!(sum(&["reads_queued", "writes_queued"]), flow.held());
                    assert_eq!(sum(&["in_flight"]), flow.in_flight.len());
                }
                Event::Drained => assert!(dd.levels.iter().all(|l| l.queued() == 0)),
                _ => {}
            }
        }
    }

    #[test]
    fn random_operations_never_lose_or_duplicate_a_request() {
        let traffic = Traffic {
            seeds: 1..41,
            nr_hw_queues: 4,
            nr_cpus: 4,
            driver_depth: usize::MAX,
            max_gap_ns: 3 * MS,
            work_conserving: true,
            ..Traffic::default()
        };
        check_conservation(&traffic, |seed| {
            let mut dd = MqDeadline::new();
            if seed % 3 == 0 {
                // Small values make expiry, aging, starvation and batch ends frequent.
                let mut rng = Lcg(seed);
                dd.set_tunable("fifo_batch", rng.below(4) as i64).unwrap();
                dd.set_tunable("writes_starved", rng.below(3) as i64)
                    .unwrap();
                dd.set_tunable("read_expire", rng.below(5) as i64).unwrap();
                dd.set_tunable("prio_aging_expire", rng.below(20) as i64)
                    .unwrap();
                dd.set_tunable("front_merges", (seed % 2) as i64).unwrap();
            }
            (dd, Counts)
        });
    }
}
