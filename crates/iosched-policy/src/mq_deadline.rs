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
//! - **Merge limits** are only `max_sectors`; segment counts and other queue limits are ignored.
//! - **Tunable ranges** are enforced by rejecting (`TunableError::OutOfRange`); the kernel clamps silently.
//!   `writes_starved` below 0 is rejected: the kernel accepts it but compares it as a huge unsigned number.
//! - **`async_depth`** is accepted and reported only. 0 stands for the kernel's default, `nr_requests` (which means
//!   no limit), because the policy does not know `nr_requests`. The simulator has no `limit_depth` hook and does not
//!   read this tunable, so it has no effect on a run. In the kernel it caps the scheduler tags of every request
//!   except synchronous reads, i.e. writes (direct ones too) and asynchronous reads. fio direct reads are sync and
//!   would never be limited; fio writes would be if it were set below `nr_requests`.
//! - **Directions:** writes and discards go to the write direction, everything else (reads; flushes, which the
//!   kernel never routes through the elevator) to the read direction, following the kernel's odd/even op rule.
//! - **Zoned devices** (write ordering per zone) are not modelled.
//! - **Restarts:** on completion the policy asks for [`AfterCompletion::RunQueue`]. Any hardware queue can dispatch
//!   any request, and the only time `dispatch` returns nothing while `has_work` is true is when a higher level still
//!   has requests in flight, whose completion re-runs a queue. The kernel's 3 ms delayed re-run of all queues after an
//!   empty dispatch is therefore not needed and not modelled.
//! - Counters are 64-bit, the kernel's 32-bit (wrapping) ones never wrap in a simulation.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    apply_merge, mergeable, AfterCompletion, Elevator, IoprioClass, Locking, MergeSide, Op,
    Request, TunableError,
};

const NS_PER_MS: u64 = 1_000_000;
const LEVELS: usize = 3;
const LEVEL_NAMES: [&str; LEVELS] = ["rt", "be", "idle"];
const TUNABLES: [&str; 7] = [
    "read_expire",
    "write_expire",
    "writes_starved",
    "front_merges",
    "async_depth",
    "fifo_batch",
    "prio_aging_expire",
];

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
}

/// One direction of one priority level.
#[derive(Default)]
struct DirQueue {
    /// (start sector, id): the sort order.
    sorted: BTreeSet<(u64, u32)>,
    /// (end sector, id): finds back-merge candidates (the kernel's merge hash).
    by_end: BTreeSet<(u64, u32)>,
    /// Insertion sequence → id: the FIFO.
    fifo: BTreeMap<u64, u32>,
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
    held: HashMap<u32, Held>,
    /// Dispatched, not yet completed: id → level it was counted in.
    in_flight: HashMap<u32, usize>,
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
}

impl Default for MqDeadline {
    fn default() -> Self {
        Self::new()
    }
}

impl MqDeadline {
    pub fn new() -> Self {
        Self {
            held: HashMap::new(),
            in_flight: HashMap::new(),
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

    fn fifo_head(&self, level: usize, dir: Dir) -> Option<u32> {
        self.queue(level, dir).fifo.values().next().copied()
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
        let held = self.held.remove(&id).expect("dispatching a held request");
        let q = &mut self.levels[held.level].dirs[held.dir as usize];
        q.sorted.remove(&(held.rq.sector, id));
        q.by_end.remove(&(held.rq.end_sector(), id));
        q.fifo.remove(&held.seq);
        held
    }

    /// The kernel's `blk_rq_merge_ok` conditions we model (besides contiguity and size, checked by [`mergeable`]).
    fn compatible(held: &Request, bio: &Request) -> bool {
        held.op == bio.op
            && held.ioprio_class == bio.ioprio_class
            && held.ioprio_level == bio.ioprio_level
            && held.cgroup == bio.cgroup
    }

    fn set_ms(slot: &mut i64, name: &str, value: i64) -> Result<(), TunableError> {
        if !(0..=i32::MAX as i64).contains(&value) {
            return Err(TunableError::OutOfRange {
                name: name.to_string(),
                value,
                expected: format!("0..={} milliseconds", i32::MAX),
            });
        }
        *slot = value;
        Ok(())
    }

    fn count(name: &str, value: i64) -> Result<u32, TunableError> {
        if !(0..=i32::MAX as i64).contains(&value) {
            return Err(TunableError::OutOfRange {
                name: name.to_string(),
                value,
                expected: format!("0..={}", i32::MAX),
            });
        }
        Ok(value as u32)
    }
}

impl Elevator for MqDeadline {
    fn name(&self) -> &'static str {
        "mq-deadline"
    }

    fn locking(&self) -> Locking {
        Locking::Device
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
        let back = q
            .by_end
            .range((bio.sector, 0)..=(bio.sector, u32::MAX))
            .map(|&(_, id)| id)
            .find(|&id| ok(id, MergeSide::Back));
        if let Some(id) = back {
            let held = &mut self.held.get_mut(&id).unwrap().rq;
            let q = &mut self.levels[level].dirs[dir as usize];
            q.by_end.remove(&(held.end_sector(), id));
            apply_merge(held, bio, MergeSide::Back);
            q.by_end.insert((held.end_sector(), id));
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
        let (level, dir, id) = (level_of(rq.ioprio_class), dir_of(rq.op), rq.id);
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
        q.by_end.insert((rq.end_sector(), id));
        q.fifo.insert(seq, id);
        self.held.insert(
            id,
            Held {
                rq,
                level,
                dir,
                seq,
                insert_ns: now_ns,
                deadline_ns,
            },
        );
    }

    fn dispatch(&mut self, _hctx: u32, now_ns: u64) -> Option<Request> {
        let busy_levels = self.levels.iter().filter(|l| l.queued() > 0).count();
        if busy_levels >= 2 {
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
            if rq.is_some() || self.levels[level].queued() > 0 {
                return rq;
            }
        }
        None
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
        AfterCompletion::RunQueue
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        vec![
            ("read_expire", self.read_expire_ms),
            ("write_expire", self.write_expire_ms),
            ("writes_starved", self.writes_starved as i64),
            ("front_merges", self.front_merges as i64),
            ("async_depth", self.async_depth),
            ("fifo_batch", self.fifo_batch as i64),
            ("prio_aging_expire", self.prio_aging_expire_ms),
        ]
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        match name {
            "read_expire" => Self::set_ms(&mut self.read_expire_ms, name, value),
            "write_expire" => Self::set_ms(&mut self.write_expire_ms, name, value),
            "prio_aging_expire" => Self::set_ms(&mut self.prio_aging_expire_ms, name, value),
            "writes_starved" => Self::count(name, value).map(|v| self.writes_starved = v),
            "fifo_batch" => Self::count(name, value).map(|v| self.fifo_batch = v),
            "async_depth" => Self::count(name, value).map(|v| self.async_depth = v as i64),
            "front_merges" => match value {
                0 | 1 => {
                    self.front_merges = value == 1;
                    Ok(())
                }
                _ => Err(TunableError::OutOfRange {
                    name: name.to_string(),
                    value,
                    expected: "0 or 1".to_string(),
                }),
            },
            _ => Err(TunableError::Unknown {
                name: name.to_string(),
                known: TUNABLES.to_vec(),
            }),
        }
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (level, name) in LEVEL_NAMES.iter().enumerate() {
            let lvl = &self.levels[level];
            out.push((
                format!("{name}_reads_queued"),
                lvl.dirs[0].fifo.len() as f64,
            ));
            out.push((
                format!("{name}_writes_queued"),
                lvl.dirs[1].fifo.len() as f64,
            ));
            let held = (lvl.dirs[0].fifo.len() + lvl.dirs[1].fifo.len()) as u64;
            out.push((format!("{name}_in_flight"), (lvl.queued() - held) as f64));
        }
        out.push(("starved".to_string(), self.starved as f64));
        out.push(("batching".to_string(), self.batching as f64));
        out
    }
}
