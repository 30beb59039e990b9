//! The block layer of one device: blk-mq (hardware queues, request tags, driver tags) or the legacy single-queue
//! `request_queue` (see `sq.rs`), the elevator and its locks.
//!
//! blk-mq tags: without an elevator a request is allocated from the driver tags directly (nr_requests = queue
//! depth); with one, from the scheduler tags (`nr_requests`, default 2 x min(queue depth, 128)) and it takes a
//! driver tag only when dispatched. Legacy: requests come from the queue's request list (`nr_requests` sync and as
//! many async, default 128 each) and the driver takes one of the device's queue-depth slots at dispatch. Either way
//! a bio that finds no free request waits (its submitter sleeps) until one is freed.

use std::collections::VecDeque;

use iosched_policy::{BlockLayer, Elevator, LockAcquisitions, Locking, Op};

use crate::host::SpinLock;
use crate::sq::RequestList;

/// A bio waiting for a request: (arrival order, bio, operation, sync).
type Waiter = (u64, u32, Op, bool);

pub struct BlockQueue {
    pub elevator: Box<dyn Elevator>,
    pub has_elevator: bool,
    pub layer: BlockLayer,
    pub nr_hw_queues: u32,
    request_tags_free: Vec<u32>,
    /// Legacy layer only: the request list (blk-mq: None).
    request_list: Option<RequestList>,
    driver_tags_free: Vec<u32>,
    /// Bios waiting for a request, per hardware queue, in two classes that can block apart: blk-mq reads and writes
    /// (index `write as usize`, the elevator's depth limit can hold back writes while reads still get tags); legacy
    /// async and sync (index `sync as usize`, the request list counts them apart).
    pub tag_waiters: Vec<[VecDeque<Waiter>; 2]>,
    tag_waiter_arrivals: u64,
    /// The elevator's device-wide lock, or its per-hardware-queue locks (see `Elevator::locking`).
    /// Scheduler tags per hardware queue (nr_requests), or the driver tags without an elevator.
    pub request_tags: u32,
    pub device_lock: SpinLock,
    pub hctx_locks: Vec<SpinLock>,
    /// Largest request a merge may build, in sectors (max_sectors_kb).
    pub max_sectors: u32,
    /// When a scheduler timer event is already pending.
    pub timer_pending_ns: Option<u64>,
}

impl BlockQueue {
    /// blk-mq with `nr_hw_queues` hardware queues.
    pub fn new(
        elevator: Box<dyn Elevator>,
        nr_hw_queues: u32,
        queue_depth: u32,
        nr_requests: Option<u32>,
    ) -> Self {
        let has_elevator = elevator.name() != "none";
        let request_tags = if has_elevator {
            nr_requests.unwrap_or(2 * queue_depth.min(128))
        } else {
            queue_depth
        };
        Self {
            elevator,
            has_elevator,
            layer: BlockLayer::Mq,
            request_tags,
            nr_hw_queues,
            request_tags_free: vec![request_tags; nr_hw_queues as usize],
            request_list: None,
            driver_tags_free: vec![queue_depth; nr_hw_queues as usize],
            tag_waiters: (0..nr_hw_queues).map(|_| Default::default()).collect(),
            tag_waiter_arrivals: 0,
            device_lock: SpinLock::default(),
            hctx_locks: vec![SpinLock::default(); nr_hw_queues as usize],
            // 128 KiB: the kernel's default max_sectors_kb for many devices, and fio's largest bs in the seeds.
            max_sectors: 256,
            timer_pending_ns: None,
        }
    }

    /// The legacy single-queue `request_queue` (one dispatch queue, the queue lock, a request list of
    /// `nr_requests` sync and async requests, default 128 each), with the device's `queue_depth` command slots.
    pub fn legacy(elevator: Box<dyn Elevator>, queue_depth: u32, nr_requests: Option<u32>) -> Self {
        let list = RequestList::new(nr_requests.unwrap_or(crate::sq::BLKDEV_MAX_RQ));
        let mut queue = Self::new(elevator, 1, queue_depth, Some(list.nr_requests));
        queue.has_elevator = true; // every legacy queue has one: noop is an elevator
        queue.layer = BlockLayer::Legacy;
        queue.request_list = Some(list);
        queue
    }

    /// Largest request a merge may build, from the device's max_sectors_kb.
    pub fn set_max_sectors_kb(&mut self, kib: u32) {
        self.max_sectors = kib.max(1) * 2;
    }

    /// Lock acquisitions per request on the submission and completion paths: the elevator's own under blk-mq,
    /// the queue lock's under the legacy layer (whatever the elevator).
    pub fn lock_acquisitions(&self) -> LockAcquisitions {
        match self.layer {
            BlockLayer::Mq => self.elevator.lock_acquisitions(),
            BlockLayer::Legacy => crate::sq::QUEUE_LOCK_ACQUISITIONS,
        }
    }

    /// Cost of moving the scheduler's lock between cores (the host's `lock_handoff_ns`).
    pub fn set_lock_handoff_ns(&mut self, handoff_ns: u64) {
        self.device_lock.handoff_ns = handoff_ns;
        for lock in &mut self.hctx_locks {
            lock.handoff_ns = handoff_ns;
        }
    }

    /// A request tag on `hctx` for a request of this kind, within the elevator's depth limit for it.
    #[inline]
    pub fn try_take_request_tag(&mut self, hctx: u32, op: Op, sync: bool) -> bool {
        if let Some(list) = &mut self.request_list {
            return list.try_alloc(sync);
        }
        let free = self.request_tags_free[hctx as usize];
        if free == 0 {
            return false;
        }
        if self.has_elevator {
            let in_use = self.request_tags - free;
            if in_use >= self.elevator.limit_depth(op, sync, self.request_tags) {
                return false;
            }
        }
        self.request_tags_free[hctx as usize] = free - 1;
        true
    }

    /// Park bio `io` until a request of its kind is free on `hctx`.
    pub fn wait_for_tag(&mut self, hctx: u32, op: Op, sync: bool, io: u32) {
        self.tag_waiter_arrivals += 1;
        let class = match self.layer {
            BlockLayer::Mq => op == Op::Write,
            BlockLayer::Legacy => sync,
        };
        self.tag_waiters[hctx as usize][class as usize].push_back((
            self.tag_waiter_arrivals,
            io,
            op,
            sync,
        ));
    }

    /// The longest-waiting bio on `hctx` that can now take a request (taking it), if any.
    pub fn next_tag_waiter(&mut self, hctx: u32) -> Option<u32> {
        let mut order = [0usize, 1];
        let heads = &self.tag_waiters[hctx as usize];
        if let (Some(a), Some(b)) = (heads[0].front(), heads[1].front()) {
            if b.0 < a.0 {
                order = [1, 0];
            }
        }
        for class in order {
            let Some(&(_, io, op, sync)) = self.tag_waiters[hctx as usize][class].front() else {
                continue;
            };
            if self.try_take_request_tag(hctx, op, sync) {
                self.tag_waiters[hctx as usize][class].pop_front();
                return Some(io);
            }
        }
        None
    }

    pub fn has_tag_waiters(&self) -> bool {
        self.tag_waiters.iter().flatten().any(|w| !w.is_empty())
    }

    /// A driver tag for dispatching on `hctx` (with no elevator, the request already holds one).
    #[inline]
    pub fn try_take_driver_tag(&mut self, hctx: u32) -> bool {
        if !self.has_elevator {
            return true;
        }
        let free = &mut self.driver_tags_free[hctx as usize];
        if *free == 0 {
            return false;
        }
        *free -= 1;
        true
    }

    #[inline]
    pub fn can_dispatch(&self, hctx: u32) -> bool {
        !self.has_elevator || self.driver_tags_free[hctx as usize] > 0
    }

    /// Give back the tags of a finished request allocated on `alloc_hctx` and dispatched on `dispatch_hctx`
    /// (`sync`: the request list it came from, legacy layer).
    #[inline]
    pub fn release_tags(&mut self, alloc_hctx: u32, dispatch_hctx: u32, sync: bool) {
        if let Some(list) = &mut self.request_list {
            list.free(sync);
            self.driver_tags_free[dispatch_hctx as usize] += 1;
            return;
        }
        self.request_tags_free[alloc_hctx as usize] += 1;
        if self.has_elevator {
            self.driver_tags_free[dispatch_hctx as usize] += 1;
        }
    }

    /// The lock a scheduler operation on `hctx` takes, if any.
    #[inline]
    pub fn lock_for(&mut self, hctx: u32) -> Option<&mut SpinLock> {
        if self.layer == BlockLayer::Legacy {
            return Some(&mut self.device_lock); // the queue lock
        }
        match self.elevator.locking() {
            Locking::None => None,
            Locking::PerHctx => Some(&mut self.hctx_locks[hctx as usize]),
            Locking::Device => Some(&mut self.device_lock),
        }
    }

    /// Tags currently free, for leak checks: (request tags, driver tags) summed over hardware queues. Legacy:
    /// requests not allocated from the list (both halves), and free command slots.
    pub fn free_tags(&self) -> (u32, u32) {
        let requests = match &self.request_list {
            Some(list) => 2 * list.nr_requests - list.allocated(),
            None => self.request_tags_free.iter().sum(),
        };
        (requests, self.driver_tags_free.iter().sum())
    }

    /// Every request and command slot back, for the end-of-run check.
    pub fn all_tags_free(&self, queue_depth: u32) -> bool {
        let (requests, driver) = self.free_tags();
        let expected_requests = match &self.request_list {
            Some(list) => 2 * list.nr_requests,
            None => self.request_tags * self.nr_hw_queues,
        };
        requests == expected_requests && driver == queue_depth * self.nr_hw_queues
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_elevator_requests_hold_driver_tags() {
        let mut queue = BlockQueue::new(iosched_policy::by_name("none", 2).unwrap(), 2, 3, None);
        assert!(!queue.has_elevator);
        assert_eq!(queue.free_tags(), (6, 6));
        for _ in 0..3 {
            assert!(queue.try_take_request_tag(0, Op::Read, true));
        }
        assert!(
            !queue.try_take_request_tag(0, Op::Read, true),
            "queue depth 3 per hardware queue"
        );
        assert!(queue.try_take_request_tag(1, Op::Read, true));
        assert!(
            queue.can_dispatch(0) && queue.try_take_driver_tag(0),
            "the request already holds its tag"
        );
        queue.release_tags(0, 0, true);
        assert!(queue.try_take_request_tag(0, Op::Read, true));
        assert!(queue.lock_for(0).is_none(), "none has no shared lock");
    }

    #[test]
    fn mq_deadline_keeps_a_quarter_of_its_tags_for_sync_reads() {
        let mut queue = BlockQueue::new(
            iosched_policy::by_name("mq-deadline", 1).unwrap(),
            1,
            64,
            Some(8),
        );
        for _ in 0..6 {
            assert!(queue.try_take_request_tag(0, Op::Write, true));
        }
        assert!(
            !queue.try_take_request_tag(0, Op::Write, true),
            "async_depth defaults to 3/4 of nr_requests = 6"
        );
        queue.wait_for_tag(0, Op::Write, true, 100);
        queue.wait_for_tag(0, Op::Read, true, 101);
        assert_eq!(
            queue.next_tag_waiter(0),
            Some(101),
            "the read behind the throttled write gets a tag first"
        );
        assert_eq!(queue.next_tag_waiter(0), None, "the write still may not");
        queue.release_tags(0, 0, true);
        queue.release_tags(0, 0, true);
        assert_eq!(queue.next_tag_waiter(0), Some(100));
        assert!(!queue.has_tag_waiters());
    }

    #[test]
    fn legacy_queue_counts_sync_and_async_requests_apart_under_the_queue_lock() {
        let mut queue = BlockQueue::legacy(iosched_policy::by_name("noop", 1).unwrap(), 2, Some(3));
        assert_eq!(queue.layer, BlockLayer::Legacy);
        assert_eq!(
            queue.free_tags(),
            (6, 2),
            "3 sync + 3 async requests, 2 command slots"
        );
        for _ in 0..3 {
            assert!(queue.try_take_request_tag(0, Op::Write, false));
        }
        assert!(
            !queue.try_take_request_tag(0, Op::Write, false),
            "async list full"
        );
        assert!(
            queue.try_take_request_tag(0, Op::Read, true),
            "sync requests still available"
        );
        queue.wait_for_tag(0, Op::Write, false, 7);
        assert_eq!(queue.next_tag_waiter(0), None);
        queue.release_tags(0, 0, true);
        assert_eq!(
            queue.next_tag_waiter(0),
            None,
            "a freed sync request does not admit an async bio"
        );
        queue.release_tags(0, 0, false);
        assert_eq!(queue.next_tag_waiter(0), Some(7));
        assert!(
            queue.lock_for(0).is_some(),
            "noop runs under the queue lock"
        );
        assert_eq!(
            queue.lock_acquisitions(),
            crate::sq::QUEUE_LOCK_ACQUISITIONS
        );
    }
}
