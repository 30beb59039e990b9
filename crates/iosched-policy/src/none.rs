//! `none`: blk-mq without an elevator. Requests are issued in arrival order per hardware queue; nothing is shared
//! between hardware queues, so there is no lock to contend on.
//!
//! In the kernel a request normally goes straight to the driver; it only waits (on the hctx dispatch list) when the
//! driver is out of tags, and only then can a later bio merge into it (against the software queue). The FIFO per
//! hardware queue here plays both roles.

use std::collections::VecDeque;

use crate::{merge_into_recent, AfterCompletion, Elevator, Locking, Request};

pub struct NoneScheduler {
    queues: Vec<VecDeque<Request>>,
}

impl NoneScheduler {
    pub fn new(nr_hw_queues: u32) -> Self {
        Self {
            queues: (0..nr_hw_queues.max(1)).map(|_| VecDeque::new()).collect(),
        }
    }
}

impl Elevator for NoneScheduler {
    fn name(&self) -> &'static str {
        "none"
    }

    fn locking(&self) -> Locking {
        Locking::None
    }

    fn is_elevator(&self) -> bool {
        false
    }

    fn bio_merge(&mut self, bio: &Request, max_sectors: u32) -> Option<u32> {
        // Like blk_mq_attempt_bio_merge: only the most recently queued requests of this CPU's queue are tried.
        merge_into_recent(&mut self.queues[bio.hctx as usize], bio, max_sectors)
    }

    fn insert(&mut self, rq: Request, _now_ns: u64) {
        self.queues[rq.hctx as usize].push_back(rq);
    }

    fn dispatch(&mut self, hctx: u32, _now_ns: u64) -> Option<Request> {
        self.queues[hctx as usize].pop_front()
    }

    fn has_work(&self, hctx: u32) -> bool {
        !self.queues[hctx as usize].is_empty()
    }

    fn completed(&mut self, _rq: &Request, _issue_ns: u64, _now_ns: u64) -> AfterCompletion {
        AfterCompletion::RunQueue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, check_conservation, Traffic};
    use crate::Op;

    fn rq(id: u32, hctx: u32, sector: u64, nr_sectors: u32) -> Request {
        Request {
            cpu: hctx,
            hctx,
            ..testkit::rq(id, Op::Read, sector, nr_sectors)
        }
    }

    #[test]
    fn dispatches_in_arrival_order_per_hardware_queue() {
        let mut none = NoneScheduler::new(2);
        none.insert(rq(1, 0, 100, 8), 0);
        none.insert(rq(2, 1, 0, 8), 0);
        none.insert(rq(3, 0, 0, 8), 0);
        assert_eq!(none.dispatch(0, 0).map(|r| r.id), Some(1));
        assert_eq!(none.dispatch(0, 0).map(|r| r.id), Some(3));
        assert!(!none.has_work(0));
        assert_eq!(none.dispatch(1, 0).map(|r| r.id), Some(2));
    }

    #[test]
    fn merges_contiguous_bios_into_a_waiting_request_up_to_the_limit() {
        let mut none = NoneScheduler::new(1);
        none.insert(rq(1, 0, 0, 8), 0);
        assert_eq!(none.bio_merge(&rq(2, 0, 8, 8), 16), Some(1), "back merge");
        assert_eq!(
            none.bio_merge(&rq(3, 0, 16, 8), 16),
            None,
            "would exceed max_sectors"
        );
        assert_eq!(
            none.bio_merge(&rq(4, 0, 64, 8), 256),
            None,
            "not contiguous"
        );
        let merged = none.dispatch(0, 0).unwrap();
        assert_eq!((merged.sector, merged.nr_sectors), (0, 16));
    }

    #[test]
    fn random_operations_never_lose_or_duplicate_a_request_nor_move_it_to_another_hardware_queue() {
        let traffic = Traffic {
            nr_hw_queues: 3,
            nr_cpus: 6,
            own_hctx_only: true,
            work_conserving: true,
            ..Traffic::default()
        };
        check_conservation(&traffic, |_| (NoneScheduler::new(3), ()));
    }

    #[test]
    fn has_no_elevator() {
        assert!(!NoneScheduler::new(1).is_elevator());
    }

    #[test]
    fn has_no_tunables() {
        let mut none = NoneScheduler::new(1);
        assert!(none.tunables().is_empty());
        assert!(none.set_tunable("fifo_batch", 1).is_err());
    }
}
