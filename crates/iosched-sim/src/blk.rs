//! blk-mq for one device: hardware queues, request tags, driver tags, the elevator and its locks.
//!
//! Tags: without an elevator a request is allocated from the driver tags directly (nr_requests = queue depth);
//! with one, from the scheduler tags (`nr_requests`, default 2 x min(queue depth, 128)) and it takes a driver tag
//! only when dispatched. A bio that finds no free request tag waits (its submitter sleeps) until one is freed.

use std::collections::VecDeque;

use iosched_policy::{Elevator, Locking, Op};

use crate::host::SpinLock;

pub struct BlockQueue {
    pub elevator: Box<dyn Elevator>,
    pub has_elevator: bool,
    pub nr_hw_queues: u32,
    request_tags_free: Vec<u32>,
    driver_tags_free: Vec<u32>,
    /// Bios waiting for a request tag, per hardware queue: reads and writes apart (index `write as usize`), since
    /// the elevator's depth limit can hold back writes while reads still get tags. Each entry is (arrival, bio).
    pub tag_waiters: Vec<[VecDeque<(u64, u32)>; 2]>,
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
            request_tags,
            nr_hw_queues,
            request_tags_free: vec![request_tags; nr_hw_queues as usize],
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

    /// Park bio `io` until a request tag of its kind is free on `hctx`.
    pub fn wait_for_tag(&mut self, hctx: u32, write: bool, io: u32) {
        self.tag_waiter_arrivals += 1;
        self.tag_waiters[hctx as usize][write as usize].push_back((self.tag_waiter_arrivals, io));
    }

    /// The longest-waiting bio on `hctx` that can now take a request tag (taking it), if any. Fio's direct I/O is
    /// synchronous, so every waiter is a sync request.
    pub fn next_tag_waiter(&mut self, hctx: u32) -> Option<u32> {
        let mut order = [0usize, 1];
        let heads = &self.tag_waiters[hctx as usize];
        if let (Some(read), Some(write)) = (heads[0].front(), heads[1].front()) {
            if write.0 < read.0 {
                order = [1, 0];
            }
        }
        for kind in order {
            if self.tag_waiters[hctx as usize][kind].is_empty() {
                continue;
            }
            let op = if kind == 1 { Op::Write } else { Op::Read };
            if self.try_take_request_tag(hctx, op, true) {
                return self.tag_waiters[hctx as usize][kind]
                    .pop_front()
                    .map(|(_, io)| io);
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

    /// Give back the tags of a finished request allocated on `alloc_hctx` and dispatched on `dispatch_hctx`.
    #[inline]
    pub fn release_tags(&mut self, alloc_hctx: u32, dispatch_hctx: u32) {
        self.request_tags_free[alloc_hctx as usize] += 1;
        if self.has_elevator {
            self.driver_tags_free[dispatch_hctx as usize] += 1;
        }
    }

    /// The lock a scheduler operation on `hctx` takes, if any.
    #[inline]
    pub fn lock_for(&mut self, hctx: u32) -> Option<&mut SpinLock> {
        match self.elevator.locking() {
            Locking::None => None,
            Locking::PerHctx => Some(&mut self.hctx_locks[hctx as usize]),
            Locking::Device => Some(&mut self.device_lock),
        }
    }

    /// Tags currently free, for leak checks: (request tags, driver tags) summed over hardware queues.
    pub fn free_tags(&self) -> (u32, u32) {
        (
            self.request_tags_free.iter().sum(),
            self.driver_tags_free.iter().sum(),
        )
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
        queue.release_tags(0, 0);
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
        queue.wait_for_tag(0, true, 100);
        queue.wait_for_tag(0, false, 101);
        assert_eq!(
            queue.next_tag_waiter(0),
            Some(101),
            "the read behind the throttled write gets a tag first"
        );
        assert_eq!(queue.next_tag_waiter(0), None, "the write still may not");
        queue.release_tags(0, 0);
        queue.release_tags(0, 0);
        assert_eq!(queue.next_tag_waiter(0), Some(100));
        assert!(!queue.has_tag_waiters());
    }
}
