//! `noop`: the legacy single-queue no-op elevator (block/noop-iosched.c, Linux <= 4.x), restated from the kernel's
//! behaviour. It exists only on the legacy block layer; blk-mq's equivalent is `none`.
//!
//! # Model
//!
//! One FIFO of requests. `insert` appends (noop_add_request), `dispatch` moves the head to the driver
//! (noop_dispatch). Merging is the elevator core's (block/elevator.c `elv_merge`), not noop's own: first the
//! queue's `last_merge` request (the one most recently merged into or inserted while none was remembered) is tried
//! for a back or front merge, then any held request that ends where the bio starts (the request hash) takes a back
//! merge. noop has no `elevator_merge_fn`, so there are no other front merges.
//!
//! # Simplifications
//!
//! - Request-to-request merges (`attempt_back_merge` after a bio merge, `noop_merged_requests`) are not modelled:
//!   the trait cannot retire a request id.
//! - Merge compatibility is the operation and `max_sectors`; segment limits are ignored.
//! - The queue lock belongs to the legacy block layer (`Locking::Device`, see [`crate::LEGACY_QUEUE_LOCK`]).

use std::collections::VecDeque;

use crate::{
    apply_merge, mergeable, AfterCompletion, Elevator, LockAcquisitions, Locking, MergeSide, Op,
    Request, LEGACY_QUEUE_LOCK,
};

#[derive(Default)]
pub struct Noop {
    queue: VecDeque<Request>,
    last_merge: Option<u32>,
}

impl Noop {
    pub fn new() -> Self {
        Self::default()
    }
}

/// The elevator core's bio merge for a FIFO of held requests: `last_merge` (back or front), then the hash (back).
/// Returns the id of the request that grew.
pub(crate) fn elv_merge_fifo<'a>(
    held: impl Iterator<Item = &'a mut Request>,
    last_merge: &mut Option<u32>,
    bio: &Request,
    max_sectors: u32,
) -> Option<u32> {
    let mut back = None;
    for rq in held {
        if Some(rq.id) == *last_merge {
            if let Some(side) = mergeable(rq, bio, max_sectors) {
                apply_merge(rq, bio, side);
                return Some(rq.id);
            }
        }
        if back.is_none() && mergeable(rq, bio, max_sectors) == Some(MergeSide::Back) {
            back = Some(rq);
        }
    }
    let rq = back?;
    apply_merge(rq, bio, MergeSide::Back);
    *last_merge = Some(rq.id);
    Some(rq.id)
}

impl Elevator for Noop {
    fn name(&self) -> &'static str {
        "noop"
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
        elv_merge_fifo(
            self.queue.iter_mut(),
            &mut self.last_merge,
            bio,
            max_sectors,
        )
    }

    fn insert(&mut self, rq: Request, _now_ns: u64) {
        if self.last_merge.is_none() {
            self.last_merge = Some(rq.id);
        }
        self.queue.push_back(rq);
    }

    fn dispatch(&mut self, _hctx: u32, _now_ns: u64) -> Option<Request> {
        let rq = self.queue.pop_front()?;
        if self.last_merge == Some(rq.id) {
            self.last_merge = None;
        }
        Some(rq)
    }

    fn has_work(&self, _hctx: u32) -> bool {
        !self.queue.is_empty()
    }

    fn completed(&mut self, _rq: &Request, _issue_ns: u64, _now_ns: u64) -> AfterCompletion {
        AfterCompletion::RunQueue
    }

    fn introspect(&self) -> Vec<(String, f64)> {
        vec![("queued".to_string(), self.queue.len() as f64)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{check_conservation, rq, Traffic};

    #[test]
    fn dispatches_in_arrival_order_whatever_the_sectors() {
        let mut noop = Noop::new();
        for (id, sector) in [(1, 800), (2, 0), (3, 400)] {
            noop.insert(rq(id, Op::Read, sector, 8), 0);
        }
        let order: Vec<u32> = std::iter::from_fn(|| noop.dispatch(0, 0).map(|r| r.id)).collect();
        assert_eq!(order, vec![1, 2, 3]);
        assert!(!noop.has_work(0));
    }

    #[test]
    fn back_merges_into_any_held_request_front_merges_only_into_last_merge() {
        let mut noop = Noop::new();
        noop.insert(rq(1, Op::Write, 100, 8), 0); // last_merge = 1
        noop.insert(rq(2, Op::Write, 500, 8), 0);
        assert_eq!(
            noop.bio_merge(&rq(3, Op::Write, 508, 8), 256),
            Some(2),
            "back merge through the hash"
        );
        assert_eq!(
            noop.bio_merge(&rq(4, Op::Write, 492, 8), 256),
            Some(2),
            "front merge: request 2 is now last_merge"
        );
        assert_eq!(
            noop.bio_merge(&rq(5, Op::Write, 92, 8), 256),
            None,
            "no front merge into a request that is not last_merge"
        );
        assert_eq!(
            noop.bio_merge(&rq(6, Op::Read, 108, 8), 256),
            None,
            "a read does not merge into a write"
        );
        let first = noop.dispatch(0, 0).unwrap();
        let second = noop.dispatch(0, 0).unwrap();
        assert_eq!((first.id, first.sector, first.nr_sectors), (1, 100, 8));
        assert_eq!((second.id, second.sector, second.nr_sectors), (2, 492, 24));
    }

    #[test]
    fn merges_stop_at_max_sectors() {
        let mut noop = Noop::new();
        noop.insert(rq(1, Op::Read, 0, 16), 0);
        assert_eq!(noop.bio_merge(&rq(2, Op::Read, 16, 8), 16), None);
        assert_eq!(noop.bio_merge(&rq(2, Op::Read, 16, 8), 24), Some(1));
    }

    #[test]
    fn has_no_tunables() {
        let mut noop = Noop::new();
        assert!(noop.tunables().is_empty());
        assert!(noop.set_tunable("fifo_batch", 1).is_err());
    }

    #[test]
    fn random_operations_never_lose_or_duplicate_a_request() {
        let traffic = Traffic {
            work_conserving: true,
            ..Traffic::default()
        };
        check_conservation(&traffic, |_| (Noop::new(), ()));
    }
}
