//! The block layer of one device: blk-mq (hardware queues, request tags, driver tags) or the legacy single-queue
//! `request_queue` (see `sq.rs`), the elevator and its locks.
//!
//! blk-mq tags: without an elevator a request is allocated from the driver tags directly (nr_requests = queue
//! depth); with one, from the scheduler tags (`nr_requests`, default 2 x min(queue depth, 128)) and it takes a
//! driver tag only when dispatched. Legacy: requests come from the queue's request list (`nr_requests` sync and as
//! many async, default 128 each) and the driver takes one of the device's queue-depth slots at dispatch. Either way
//! a bio that finds no free request waits (its thread sleeps) until one is freed.
//!
//! How blk-mq's waiters get requests is not first come, first served (`TagWaits`, after `blk_mq_get_tag` and
//! lib/sbitmap.c, Linux 6.2+): a waiter sleeps on one of 8 wait queues in turn; freed tags are counted while anyone
//! waits, and every `wake_batch` of them wake up to `wake_batch` sleepers, queue by queue from a rotating index. A
//! woken thread retries once it runs (the caller books its wake-up); a tag freed meanwhile goes to whoever asks first,
//! which is often a submitter that never slept. A retry that fails sleeps again on the next wait queue.

use std::collections::VecDeque;

use iosched_policy::{BlockLayer, Elevator, LockAcquisitions, Locking, Op};

use crate::host::SpinLock;
use crate::sq::RequestList;

/// A bio waiting for a request: (arrival order, bio, operation, sync).
type Waiter = (u64, u32, Op, bool);

/// Wait queues per sbitmap queue (SBQ_WAIT_QUEUES).
const WAIT_QUEUES: usize = 8;

/// The wait side of one hardware queue's request tags (an `sbitmap_queue`): its 8 wait queues, the per-hctx index
/// the next sleeper takes (`hctx->wait_index`), the index wake-ups start from (`wake_index`), and the counts that
/// batch wake-ups (`completion_cnt`, `wakeup_cnt`).
#[derive(Default)]
pub struct TagWaits {
    queues: [VecDeque<u32>; WAIT_QUEUES],
    wait_index: usize,
    wake_index: usize,
    /// Sleepers plus woken threads that have not retried yet (`ws_active`: finish_wait drops it after the retry).
    active: u32,
    completion_cnt: u64,
    wakeup_cnt: u64,
}

impl TagWaits {
    /// `bt_wait_ptr` then `sbitmap_prepare_to_wait`: sleep on the next wait queue in turn, at its tail.
    fn sleep(&mut self, io: u32) {
        self.queues[self.wait_index].push_back(io);
        self.wait_index = (self.wait_index + 1) % WAIT_QUEUES;
        self.active += 1;
    }

    /// `sbitmap_queue_wake_up` for one freed tag: counted only while someone waits; each `wake_batch` counted tags
    /// wake up to `wake_batch` sleepers (`__sbitmap_queue_wake_up`: from `wake_index`, advancing it past each queue
    /// it looks at, taking as many from a queue as remain to wake). Woken bios are appended to `woken`.
    fn tag_freed(&mut self, wake_batch: u32, woken: &mut Vec<u32>) {
        if self.active == 0 {
            return;
        }
        self.completion_cnt += 1;
        if self.completion_cnt - self.wakeup_cnt < wake_batch as u64 {
            return;
        }
        self.wakeup_cnt += wake_batch as u64;
        let mut left = wake_batch as usize;
        for _ in 0..WAIT_QUEUES {
            let queue = &mut self.queues[self.wake_index];
            self.wake_index = (self.wake_index + 1) % WAIT_QUEUES;
            let n = left.min(queue.len());
            woken.extend(queue.drain(..n));
            left -= n;
            if left == 0 {
                break;
            }
        }
    }

    fn sleeping(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}

pub struct BlockQueue {
    pub elevator: Box<dyn Elevator>,
    pub has_elevator: bool,
    pub layer: BlockLayer,
    pub nr_hw_queues: u32,
    request_tags_free: Vec<u32>,
    /// Legacy layer only: the request list (blk-mq: None).
    request_list: Option<RequestList>,
    driver_tags_free: Vec<u32>,
    /// Legacy layer: bios waiting for a request, in two classes that block apart (async and sync, index
    /// `sync as usize`: the request list counts them apart), each served first come, first served as
    /// `get_request`'s exclusive waits on `rl->wait[sync]` are.
    pub tag_waiters: Vec<[VecDeque<Waiter>; 2]>,
    tag_waiter_arrivals: u64,
    /// blk-mq: the sleepers on each hardware queue's request tags.
    pub tag_waits: Vec<TagWaits>,
    /// Freed tags per wake-up of blk-mq tag sleepers (`wake_batch`, from the elevator's smallest shallow depth).
    pub wake_batch: u32,
    /// The elevator's device-wide lock, or its per-hardware-queue locks (see `Elevator::locking`).
    /// Scheduler tags per hardware queue (nr_requests), or the driver tags without an elevator.
    pub request_tags: u32,
    pub device_lock: SpinLock,
    pub hctx_locks: Vec<SpinLock>,
    /// The elevator's inner locks (`Elevator::inner_locks`: Kyber's token wait queues), device-wide.
    pub inner_locks: Vec<SpinLock>,
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
        let has_elevator = elevator.is_elevator();
        let inner_locks = vec![SpinLock::default(); elevator.inner_locks() as usize];
        let request_tags = if has_elevator {
            nr_requests.unwrap_or(2 * queue_depth.min(128))
        } else {
            queue_depth
        };
        let wake_batch = if has_elevator {
            elevator.tag_wake_batch(request_tags)
        } else {
            iosched_policy::sbq_wake_batch(queue_depth, u32::MAX)
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
            tag_waits: (0..nr_hw_queues).map(|_| TagWaits::default()).collect(),
            wake_batch,
            device_lock: SpinLock::default(),
            hctx_locks: vec![SpinLock::default(); nr_hw_queues as usize],
            inner_locks,
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
        for lock in self.hctx_locks.iter_mut().chain(&mut self.inner_locks) {
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

    /// Park bio `io` until a request of its kind is free on `hctx`: blk-mq, asleep on the tags' next wait queue
    /// (`tag_freed` wakes it, to retry); legacy, in its class's line (`next_tag_waiter` hands it a request).
    pub fn wait_for_tag(&mut self, hctx: u32, op: Op, sync: bool, io: u32) {
        if self.layer == BlockLayer::Mq {
            self.tag_waits[hctx as usize].sleep(io);
            return;
        }
        self.tag_waiter_arrivals += 1;
        self.tag_waiters[hctx as usize][sync as usize].push_back((
            self.tag_waiter_arrivals,
            io,
            op,
            sync,
        ));
    }

    /// blk-mq: a request tag of `hctx` was freed; bios whose threads this wakes are appended to `woken`. Each must
    /// then `retry_tag` once its thread runs.
    pub fn tag_freed(&mut self, hctx: u32, woken: &mut Vec<u32>) {
        if self.layer == BlockLayer::Mq {
            let batch = self.wake_batch;
            self.tag_waits[hctx as usize].tag_freed(batch, woken);
        }
    }

    /// blk-mq: the woken thread of bio `io` asks for a request again: true if it got one; false if it went back to
    /// sleep (on the next wait queue).
    pub fn retry_tag(&mut self, hctx: u32, op: Op, sync: bool, io: u32) -> bool {
        let waits = &mut self.tag_waits[hctx as usize];
        waits.active -= 1; // sbitmap_finish_wait
        if self.try_take_request_tag(hctx, op, sync) {
            return true;
        }
        self.tag_waits[hctx as usize].sleep(io);
        false
    }

    /// Legacy layer: the longest-waiting bio on `hctx` that can now take a request (taking it), if any.
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

    /// Bios waiting for a request, asleep or woken and not yet retried.
    pub fn has_tag_waiters(&self) -> bool {
        self.tag_waiters.iter().flatten().any(|w| !w.is_empty())
            || self.tag_waits.iter().any(|w| w.active > 0)
    }

    /// blk-mq: bios asleep on `hctx`'s request tags (not counting woken ones that have not retried yet).
    pub fn sleeping_on_tags(&self, hctx: u32) -> usize {
        self.tag_waits[hctx as usize].sleeping()
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
        assert!(
            queue.try_take_request_tag(0, Op::Read, true),
            "a sync read still gets one of the other two"
        );
        assert_eq!(
            queue.wake_batch, 1,
            "an eighth of the shallow depth 6, at least 1"
        );
        let mut woken = Vec::new();
        queue.release_tags(0, 0, true);
        queue.tag_freed(0, &mut woken);
        assert_eq!(woken, [100]);
        assert!(
            !queue.retry_tag(0, Op::Write, true, 100),
            "6 tags still in use (5 writes and the read): the write sleeps again"
        );
        woken.clear();
        queue.release_tags(0, 0, true);
        queue.tag_freed(0, &mut woken);
        assert_eq!(woken, [100]);
        assert!(queue.retry_tag(0, Op::Write, true, 100));
        assert!(!queue.has_tag_waiters());
    }

    #[test]
    fn freed_tags_wake_sleepers_in_batches_queue_by_queue_and_a_running_submitter_can_take_them_first(
    ) {
        let mut queue = BlockQueue::new(iosched_policy::by_name("none", 1).unwrap(), 1, 16, None);
        assert_eq!(queue.wake_batch, 2, "16 tags / 8 wait queues");
        for _ in 0..16 {
            assert!(queue.try_take_request_tag(0, Op::Write, true));
        }
        for io in 10..15 {
            queue.wait_for_tag(0, Op::Write, true, io); // sleepers on wait queues 0, 1, 2, 3, 4
        }
        let mut woken = Vec::new();
        queue.release_tags(0, 0, true);
        queue.tag_freed(0, &mut woken);
        assert!(woken.is_empty(), "one freed tag is half a batch");
        queue.release_tags(0, 0, true);
        queue.tag_freed(0, &mut woken);
        assert_eq!(
            woken,
            [10, 11],
            "two sleepers, from the first two wait queues"
        );
        assert!(
            queue.try_take_request_tag(0, Op::Write, true),
            "a submitter that never slept takes a freed tag before the woken threads run"
        );
        assert!(queue.retry_tag(0, Op::Write, true, 10));
        assert!(
            !queue.retry_tag(0, Op::Write, true, 11),
            "none left: back to sleep, on the next wait queue (5)"
        );
        assert_eq!(queue.sleeping_on_tags(0), 4);
        woken.clear();
        for _ in 0..4 {
            queue.release_tags(0, 0, true);
            queue.tag_freed(0, &mut woken);
        }
        assert_eq!(
            woken,
            [12, 13, 14, 11],
            "wake-ups go on from wait queue 2; the sleeper that lost its race is last"
        );
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
