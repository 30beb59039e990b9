//! `deadline`: the legacy single-queue deadline elevator (block/deadline-iosched.c of Linux 4.19,
//! Documentation/block/deadline-iosched.txt), restated from the kernel's behaviour. It exists only on the legacy
//! block layer; blk-mq's adaptation is `mq-deadline` (`mq_deadline.rs`), which adds priority levels, aging and
//! `async_depth`.
//!
//! # Model
//!
//! Per direction (read; write): a sector-sorted set, a FIFO in insertion order whose entries carry a deadline
//! (insertion time + `read_expire` / `write_expire`), and `next_rq[dir]`, the request after the last dispatched one
//! in sector order (at most one direction has one). Device-wide: `batching` (requests dispatched in the current
//! batch) and `starved` (read batches started while writes waited).
//!
//! Dispatch (`deadline_dispatch_requests`):
//! 1. Continue the batch: if `next_rq` (write's if set, else read's) exists and `batching < fifo_batch`, take it.
//! 2. Otherwise choose a direction: if reads are queued, writes too and `starved++ >= writes_starved`, writes; else
//!    reads if any; else writes (reaching writes resets `starved`).
//! 3. In that direction take the FIFO head if it expired (now ≥ deadline) or there is no `next_rq` for it; else
//!    `next_rq`. Reset `batching`.
//! 4. `batching += 1`; the request leaves; `next_rq` of both directions is cleared and the direction's becomes the
//!    request that follows it in sector order (no wrap-around).
//!
//! Merging: the elevator core's `last_merge` (back or front) and request hash (back merge into a request of the
//! same direction ending where the bio starts), then `deadline_merge`: a front merge into a request of the bio's
//! direction starting where the bio ends, if `front_merges` is 1. A front merge moves the request in the sorted set.
//!
//! # Tunables (sysfs names and units)
//!
//! | name | unit | default | accepted |
//! |---|---|---|---|
//! | `read_expire` | ms | 500 (HZ / 2) | 0 ..= i32::MAX |
//! | `write_expire` | ms | 5000 (5 * HZ) | 0 ..= i32::MAX |
//! | `writes_starved` | read batches | 2 | 0 ..= i32::MAX |
//! | `front_merges` | 0/1 | 1 | 0, 1 |
//! | `fifo_batch` | requests | 16 | 0 ..= i32::MAX |
//!
//! # Simplifications (deliberate)
//!
//! - Times in nanoseconds, no jiffy rounding of the deadlines.
//! - No request-to-request merges (`deadline_merged_requests`, which would give the merged request the earlier
//!   deadline): the trait cannot retire a request id.
//! - Out-of-range tunables are rejected (the kernel clamps); a negative `writes_starved` is rejected.
//! - The queue lock is the legacy block layer's (see [`crate::LEGACY_QUEUE_LOCK`]).

use crate::id_map::IdMap;
use std::collections::{BTreeMap, BTreeSet};

use crate::{
    apply_merge, front_merge_candidates, hash_back_candidate, mergeable, tunable_in_range,
    tunable_switch, AfterCompletion, Elevator, LockAcquisitions, Locking, MergeSide, Op, Request,
    TunableError, LEGACY_QUEUE_LOCK,
};

const NS_PER_MS: u64 = 1_000_000;
const TUNABLES: [&str; 5] = [
    "read_expire",
    "write_expire",
    "writes_starved",
    "front_merges",
    "fifo_batch",
];
const READ: usize = 0;
const WRITE: usize = 1;

fn dir_of(op: Op) -> usize {
    match op {
        Op::Write | Op::Discard => WRITE,
        Op::Read | Op::Flush => READ,
    }
}

struct Held {
    rq: Request,
    dir: usize,
    seq: u64,
    deadline_ns: u64,
}

#[derive(Default)]
struct Direction {
    /// (start sector, id): the sort order.
    sorted: BTreeSet<(u64, u32)>,
    /// insertion sequence → id: the FIFO.
    fifo: BTreeMap<u64, u32>,
}

pub struct Deadline {
    held: IdMap<u32, Held>,
    dirs: [Direction; 2],
    next_rq: [Option<u32>; 2],
    batching: u32,
    starved: u32,
    next_seq: u64,
    last_merge: Option<u32>,
    read_expire_ms: i64,
    write_expire_ms: i64,
    writes_starved: u32,
    front_merges: bool,
    fifo_batch: u32,
}

impl Default for Deadline {
    fn default() -> Self {
        Self::new()
    }
}

impl Deadline {
    pub fn new() -> Self {
        Self {
            held: IdMap::default(),
            dirs: Default::default(),
            next_rq: [None, None],
            batching: 0,
            starved: 0,
            next_seq: 0,
            last_merge: None,
            read_expire_ms: 500,
            write_expire_ms: 5000,
            writes_starved: 2,
            front_merges: true,
            fifo_batch: 16,
        }
    }

    fn fifo_head(&self, dir: usize) -> Option<u32> {
        self.dirs[dir].fifo.values().next().copied()
    }

    /// The request after `(sector, id)` in sector order (deadline_latter_request).
    fn latter(&self, dir: usize, sector: u64, id: u32) -> Option<u32> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.dirs[dir]
            .sorted
            .range((Excluded((sector, id)), Unbounded))
            .next()
            .map(|&(_, id)| id)
    }

    fn move_request(&mut self, id: u32) -> Request {
        let held = self.held.remove(&id).expect("dispatching a held request");
        let d = &mut self.dirs[held.dir];
        d.sorted.remove(&(held.rq.sector, id));
        d.fifo.remove(&held.seq);
        self.next_rq = [None, None];
        self.next_rq[held.dir] = self.latter(held.dir, held.rq.sector, id);
        if self.last_merge == Some(id) {
            self.last_merge = None;
        }
        held.rq
    }

    fn try_merge(&mut self, id: u32, bio: &Request, max_sectors: u32, sides: &[MergeSide]) -> bool {
        let Some(held) = self.held.get_mut(&id) else {
            return false;
        };
        let Some(side) = mergeable(&held.rq, bio, max_sectors).filter(|s| sides.contains(s)) else {
            return false;
        };
        let d = &mut self.dirs[held.dir];
        d.sorted.remove(&(held.rq.sector, id));
        apply_merge(&mut held.rq, bio, side);
        d.sorted.insert((held.rq.sector, id));
        self.last_merge = Some(id);
        true
    }
}

impl Elevator for Deadline {
    fn name(&self) -> &'static str {
        "deadline"
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
        if let Some(id) = self.last_merge {
            if self.try_merge(id, bio, max_sectors, &[MergeSide::Back, MergeSide::Front]) {
                return Some(id);
            }
        }
        let dir = dir_of(bio.op);
        // The request hash: a held request of this direction that ends where the bio starts.
        let back = hash_back_candidate(&self.dirs[dir].sorted, bio, |id| {
            self.held[&id].rq.end_sector()
        });
        if let Some(id) = back {
            if self.try_merge(id, bio, max_sectors, &[MergeSide::Back]) {
                return Some(id);
            }
        }
        if self.front_merges {
            for id in front_merge_candidates(&self.dirs[dir].sorted, bio) {
                if self.try_merge(id, bio, max_sectors, &[MergeSide::Front]) {
                    return Some(id);
                }
            }
        }
        None
    }

    fn insert(&mut self, rq: Request, now_ns: u64) {
        let (dir, id) = (dir_of(rq.op), rq.id);
        let seq = self.next_seq;
        self.next_seq += 1;
        let expire_ms = if dir == READ {
            self.read_expire_ms
        } else {
            self.write_expire_ms
        };
        self.dirs[dir].sorted.insert((rq.sector, id));
        self.dirs[dir].fifo.insert(seq, id);
        if self.last_merge.is_none() {
            self.last_merge = Some(id);
        }
        self.held.insert(
            id,
            Held {
                rq,
                dir,
                seq,
                deadline_ns: now_ns + expire_ms as u64 * NS_PER_MS,
            },
        );
    }

    fn dispatch(&mut self, _hctx: u32, now_ns: u64) -> Option<Request> {
        let continued = self.next_rq[WRITE].or(self.next_rq[READ]);
        if let Some(id) = continued.filter(|_| self.batching < self.fifo_batch) {
            self.batching += 1;
            return Some(self.move_request(id));
        }
        let reads = !self.dirs[READ].fifo.is_empty();
        let writes = !self.dirs[WRITE].fifo.is_empty();
        let dir = if reads {
            let starve_writes = writes && {
                let before = self.starved;
                self.starved += 1;
                before >= self.writes_starved
            };
            if starve_writes {
                self.starved = 0;
                WRITE
            } else {
                READ
            }
        } else if writes {
            self.starved = 0;
            WRITE
        } else {
            return None;
        };
        let head = self.fifo_head(dir)?;
        let expired = now_ns >= self.held[&head].deadline_ns;
        let id = match self.next_rq[dir] {
            Some(next) if !expired => next,
            _ => head,
        };
        self.batching = 1;
        Some(self.move_request(id))
    }

    fn has_work(&self, _hctx: u32) -> bool {
        !self.held.is_empty()
    }

    fn completed(&mut self, _rq: &Request, _issue_ns: u64, _now_ns: u64) -> AfterCompletion {
        AfterCompletion::RunQueue
    }

    fn tunables(&self) -> Vec<(&'static str, i64)> {
        vec![
            ("read_expire", self.read_expire_ms),
            ("write_expire", self.write_expire_ms),
            ("writes_starved", self.writes_starved as i64),
            ("front_merges", self.front_merges as i64),
            ("fifo_batch", self.fifo_batch as i64),
        ]
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), TunableError> {
        match name {
            "read_expire" => tunable_in_range(name, value, 0, i32::MAX as i64, " milliseconds")
                .map(|v| self.read_expire_ms = v),
            "write_expire" => tunable_in_range(name, value, 0, i32::MAX as i64, " milliseconds")
                .map(|v| self.write_expire_ms = v),
            "writes_starved" => tunable_in_range(name, value, 0, i32::MAX as i64, "")
                .map(|v| self.writes_starved = v as u32),
            "fifo_batch" => tunable_in_range(name, value, 0, i32::MAX as i64, "")
                .map(|v| self.fifo_batch = v as u32),
            "front_merges" => tunable_switch(name, value).map(|v| self.front_merges = v),
            _ => Err(TunableError::Unknown {
                name: name.to_string(),
                known: TUNABLES.to_vec(),
            }),
        }
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        vec![
            ("reads_queued".into(), self.dirs[READ].fifo.len() as f64),
            ("writes_queued".into(), self.dirs[WRITE].fifo.len() as f64),
            ("starved".into(), self.starved as f64),
            ("batching".into(), self.batching as f64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{check_conservation, rq, Traffic};

    const MS: u64 = NS_PER_MS;

    fn drain(dd: &mut Deadline, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| dd.dispatch(0, now).map(|r| r.id)).collect()
    }

    #[test]
    fn a_write_is_served_after_writes_starved_read_batches() {
        let mut dd = Deadline::new();
        dd.set_tunable("fifo_batch", 2).unwrap();
        // Six reads in sector order and one write, all fresh.
        for i in 0..6 {
            dd.insert(rq(i, Op::Read, 1000 + 8 * i as u64, 8), 0);
        }
        dd.insert(rq(100, Op::Write, 0, 8), 0);
        // Batches of two: reads (starved 0 -> 1), reads (1 -> 2), then starved 2 >= writes_starved 2: the write.
        assert_eq!(drain(&mut dd, 0), vec![0, 1, 2, 3, 100, 4, 5]);
    }

    #[test]
    fn an_expired_fifo_head_goes_before_the_sorted_order() {
        let mut dd = Deadline::new();
        dd.set_tunable("fifo_batch", 1).unwrap();
        dd.insert(rq(10, Op::Read, 8, 8), 0);
        dd.insert(rq(13, Op::Read, 0, 8), 50 * MS); // deadline 550 ms, behind the head's position
        dd.insert(rq(11, Op::Read, 100, 8), 100 * MS);
        dd.insert(rq(12, Op::Read, 200, 8), 100 * MS);
        assert_eq!(
            dd.dispatch(0, 100 * MS).map(|r| r.id),
            Some(10),
            "FIFO head: no next_rq yet"
        );
        assert_eq!(
            dd.dispatch(0, 100 * MS).map(|r| r.id),
            Some(11),
            "new batch, nothing expired: next in sector order after 8"
        );
        assert_eq!(
            dd.dispatch(0, 600 * MS).map(|r| r.id),
            Some(13),
            "request 13 expired at 550 ms: the FIFO head goes before next_rq (12)"
        );
        assert_eq!(dd.dispatch(0, 600 * MS).map(|r| r.id), Some(12));
    }

    #[test]
    fn batches_follow_sector_order_up_to_fifo_batch() {
        let mut dd = Deadline::new();
        for (id, sector) in [(1, 300), (2, 100), (3, 200), (4, 50)] {
            dd.insert(rq(id, Op::Read, sector, 8), 0);
        }
        // First the FIFO head (no next_rq yet), then upwards from 300: nothing; a new batch starts at the head.
        assert_eq!(drain(&mut dd, 0), vec![1, 2, 3, 4]);
        let mut dd = Deadline::new();
        for (id, sector) in [(1, 100), (2, 300), (3, 200), (4, 50)] {
            dd.insert(rq(id, Op::Read, sector, 8), 0);
        }
        assert_eq!(
            drain(&mut dd, 0),
            vec![1, 3, 2, 4],
            "100, then 200 and 300 in order, then wrap to the head"
        );
    }

    #[test]
    fn front_merges_follow_the_tunable_and_move_the_request() {
        let mut dd = Deadline::new();
        dd.insert(rq(1, Op::Write, 100, 8), 0);
        dd.insert(rq(2, Op::Write, 200, 8), 0);
        assert_eq!(
            dd.bio_merge(&rq(3, Op::Write, 192, 8), 256),
            Some(2),
            "front merge"
        );
        assert_eq!(
            dd.bio_merge(&rq(4, Op::Write, 108, 8), 256),
            Some(1),
            "back merge"
        );
        dd.set_tunable("front_merges", 0).unwrap();
        dd.last_merge = None;
        assert_eq!(dd.bio_merge(&rq(5, Op::Write, 184, 8), 256), None);
        let got: Vec<(u64, u32)> = std::iter::from_fn(|| dd.dispatch(0, 0))
            .map(|r| (r.sector, r.nr_sectors))
            .collect();
        assert_eq!(got, vec![(100, 16), (192, 16)]);
    }

    #[test]
    fn tunables_read_back_and_are_validated() {
        let mut dd = Deadline::new();
        assert_eq!(
            dd.tunables(),
            vec![
                ("read_expire", 500),
                ("write_expire", 5000),
                ("writes_starved", 2),
                ("front_merges", 1),
                ("fifo_batch", 16)
            ]
        );
        assert!(dd.set_tunable("read_expire", 250).is_ok());
        assert!(matches!(
            dd.set_tunable("front_merges", 2),
            Err(TunableError::OutOfRange { .. })
        ));
        assert!(matches!(
            dd.set_tunable("writes_starved", -1),
            Err(TunableError::OutOfRange { .. })
        ));
        assert!(matches!(
            dd.set_tunable("async_depth", 1),
            Err(TunableError::Unknown { .. })
        ));
    }

    #[test]
    fn random_operations_never_lose_or_duplicate_a_request() {
        let traffic = Traffic {
            work_conserving: true,
            ..Traffic::default()
        };
        check_conservation(&traffic, |seed| {
            let mut dd = Deadline::new();
            if seed % 2 == 0 {
                dd.set_tunable("fifo_batch", (seed % 4) as i64).unwrap();
                dd.set_tunable("writes_starved", (seed % 3) as i64).unwrap();
                dd.set_tunable("read_expire", (seed % 5) as i64).unwrap();
            }
            (dd, ())
        });
    }
}
