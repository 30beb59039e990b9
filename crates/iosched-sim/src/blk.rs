//! blk-mq for one device: hardware queues, request tags, driver tags, the elevator and its locks.
//!
//! Tags: without an elevator a request is allocated from the driver tags directly (nr_requests = queue depth);
//! with one, from the scheduler tags (`nr_requests`, default 2 x min(queue depth, 128)) and it takes a driver tag
//! only when dispatched. A bio that finds no free request tag waits (its submitter sleeps) until one is freed.

use std::collections::VecDeque;

use iosched_policy::{Elevator, Locking};

use crate::host::SpinLock;

pub struct BlockQueue {
    pub elevator: Box<dyn Elevator>,
    pub has_elevator: bool,
    pub nr_hw_queues: u32,
    request_tags_free: Vec<u32>,
    driver_tags_free: Vec<u32>,
    pub tag_waiters: Vec<VecDeque<u32>>,
    /// The elevator's device-wide lock, or its per-hardware-queue locks (see `Elevator::locking`).
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
            nr_hw_queues,
            request_tags_free: vec![request_tags; nr_hw_queues as usize],
            driver_tags_free: vec![queue_depth; nr_hw_queues as usize],
            tag_waiters: (0..nr_hw_queues).map(|_| VecDeque::new()).collect(),
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

    #[inline]
    pub fn try_take_request_tag(&mut self, hctx: u32) -> bool {
        let free = &mut self.request_tags_free[hctx as usize];
        if *free == 0 {
            return false;
        }
        *free -= 1;
        true
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
            assert!(queue.try_take_request_tag(0));
        }
        assert!(
            !queue.try_take_request_tag(0),
            "queue depth 3 per hardware queue"
        );
        assert!(queue.try_take_request_tag(1));
        assert!(
            queue.can_dispatch(0) && queue.try_take_driver_tag(0),
            "the request already holds its tag"
        );
        queue.release_tags(0, 0);
        assert!(queue.try_take_request_tag(0));
        assert!(queue.lock_for(0).is_none(), "none has no shared lock");
    }
}
