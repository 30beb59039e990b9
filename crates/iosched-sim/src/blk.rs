//! The block layer of one device: blk-mq (hardware queues, request tags, driver tags) or the legacy single-queue
//! `request_queue` (see `sq.rs`), the elevator and its locks.
//!
//! blk-mq tags: without an elevator a request is allocated from the driver tags directly (nr_requests = queue
//! depth); with one, from the scheduler tags (`nr_requests`, default 2 x min(queue depth, 128)) and it takes a
//! driver tag only when dispatched. Legacy: requests come from the queue's request list (`nr_requests` sync and as
//! many async, default 128 each) and the driver takes one of the device's queue-depth slots at dispatch. Either way
//! a bio that finds no free request waits (its thread sleeps) until one is freed.
//!
//! blk-mq's request tags are a lib/sbitmap.c bitmap per hardware queue (`Sbitmap`), modelled bit for bit as the
//! run's kernel version keeps it: words of 2^shift bits (`sbitmap_calculate_shift`), a per-CPU allocation hint (set
//! to the tag a CPU last freed), and the elevator's shallow depth (`Elevator::limit_depth`) applied per word before
//! Linux 6.17 and as a share of the whole set since (`iosched_policy::kernel::SBITMAP_WHOLE_SHALLOW_DEPTH`). So
//! requests the elevator limits can only use the low bits of each word, which sync reads (never limited) also take
//! first: the limit is on bits, not on a count of tags in use.
//!
//! How blk-mq's waiters get requests is not first come, first served (`TagWaits`, after `blk_mq_get_tag` and
//! lib/sbitmap.c of the run's version): a waiter sleeps on one of 8 wait queues in turn and keeps the shallow depth
//! it asked with; freed tags wake sleepers in batches of `wake_batch` (`kernel::sbq_calc_wake_batch`), by the
//! version's rule ([`WakeRule`]). A woken thread retries once it runs (the caller books its wake-up); a tag freed
//! meanwhile goes to whoever asks first, which is often a submitter that never slept. A retry that fails sleeps
//! again on the next wait queue.

use iosched_policy::id_map::DenseMap;
use std::collections::VecDeque;

use iosched_policy::kernel::{self, KernelVersion, SchedTags, WakeRule};
use iosched_policy::sbitmap::{SbqWaits, SBQ_WAIT_QUEUES};
use iosched_policy::{BlockLayer, Elevator, LockAcquisitions, Locking, Request};

use crate::host::{SpinLock, HANDOFF_CACHE_LINES, WAIT_QUEUE_HANDOFF_LINES};
use crate::sq::RequestList;

/// A bio waiting for a request: (arrival order, bio, operation, sync).
type Waiter = (u64, u32, iosched_policy::Op, bool);

/// One hardware queue's request tags: lib/sbitmap.c's `struct sbitmap` with its per-CPU allocation hints.
struct Sbitmap {
    depth: u32,
    shift: u32,
    words: Vec<u64>,
    /// Per word, bits freed but not yet given back to `words` (`sbitmap_word::cleared`, Linux 5.0+: see `clear`).
    cleared: Vec<u64>,
    /// `alloc_hint` per CPU (index: CPU), set lazily to a pseudo-random bit as `init_alloc_hint` does.
    hints: Vec<Option<u32>>,
    /// Which hardware queue: seeds the initial hints.
    hctx: u32,
    kernel: KernelVersion,
}

impl Sbitmap {
    fn new(depth: u32, hctx: u32, kernel: KernelVersion) -> Self {
        let shift = kernel::sbitmap_shift(depth);
        let map_nr = depth.div_ceil(1 << shift).max(1) as usize;
        Self {
            depth,
            shift,
            words: vec![0; map_nr],
            cleared: vec![0; map_nr],
            hints: Vec::new(),
            hctx,
            kernel,
        }
    }

    /// Bits in word `index` (`__map_depth`: the last word may be partial).
    fn map_depth(&self, index: usize) -> u32 {
        if index == self.words.len() - 1 {
            self.depth - ((index as u32) << self.shift)
        } else {
            1 << self.shift
        }
    }

    /// The bits of word `index` an allocation with this shallow depth may take (the low ones).
    fn word_limit(&self, index: usize, shallow: Option<u32>) -> u32 {
        let bits = self.map_depth(index);
        let Some(shallow) = shallow else {
            return bits;
        };
        if !self.kernel.has(&kernel::SBITMAP_WHOLE_SHALLOW_DEPTH) {
            return bits.min(shallow);
        }
        // __map_depth_with_shallow: each word its share of the whole-set depth, remainders to the first words.
        if shallow >= self.depth {
            return bits;
        }
        let share = bits as u64 * shallow as u64;
        let (words, left) = (share / self.depth as u64, share % self.depth as u64);
        (words + (left >= (index as u64 + 1) * bits as u64) as u64) as u32
    }

    /// CPU `cpu`'s allocation hint, drawn once as the kernel draws it (get_random_u32_below(depth)); here a fixed
    /// hash of the hardware queue and the CPU, so runs stay reproducible.
    fn hint(&mut self, cpu: u32) -> u32 {
        let cpu = cpu as usize;
        if self.hints.len() <= cpu {
            self.hints.resize(cpu + 1, None);
        }
        let depth = self.depth.max(1) as u64;
        let hctx = self.hctx as u64;
        *self.hints[cpu].get_or_insert_with(|| (crate::mix(hctx << 32 | cpu as u64) % depth) as u32)
    }

    /// The first free bit of word `index` below `limit`, from `start` on and then (wrapping) from 0.
    fn find_in_word(&self, index: usize, limit: u32, start: u32) -> Option<u32> {
        let free = !self.words[index]
            & if limit >= 64 {
                u64::MAX
            } else {
                (1u64 << limit) - 1
            };
        if free == 0 {
            return None;
        }
        let from = if start >= 64 {
            0
        } else {
            free & (u64::MAX << start)
        };
        Some(if from != 0 { from } else { free }.trailing_zeros())
    }

    /// `sbitmap_get` (no shallow depth) or `sbitmap_get_shallow`, for CPU `cpu`: the tag taken, if any.
    fn get(&mut self, cpu: u32, shallow: Option<u32>) -> Option<u32> {
        let hint = self.hint(cpu);
        let mask = (1u32 << self.shift) - 1;
        let mut index = (hint >> self.shift) as usize;
        // An unlimited search starts at bit 0 of the hint's word since 5.0, at the hint's bit before.
        let mut start =
            if shallow.is_none() && self.kernel.has(&kernel::SBITMAP_GET_FROM_WORD_START) {
                0
            } else {
                hint & mask
            };
        let mut found = None;
        for _ in 0..self.words.len() {
            let limit = self.word_limit(index, shallow);
            if limit > 0 {
                let mut bit = self.find_in_word(index, limit, start);
                // sbitmap_find_bit_in_word: nothing free in range, so the bits freed since go back and it looks
                // again.
                if bit.is_none() && self.cleared[index] != 0 {
                    self.words[index] &= !std::mem::take(&mut self.cleared[index]);
                    bit = self.find_in_word(index, limit, start);
                }
                if let Some(bit) = bit {
                    self.words[index] |= 1 << bit;
                    found = Some(((index as u32) << self.shift) + bit);
                    break;
                }
            }
            start = 0;
            index = (index + 1) % self.words.len();
        }
        // update_alloc_hint_after_get: only a hint that was used moves on; a full map resets it.
        let slot = &mut self.hints[cpu as usize];
        match found {
            None => *slot = Some(0),
            Some(nr) if nr == hint => {
                let next = nr + 1;
                *slot = Some(if next >= self.depth.saturating_sub(1) {
                    0
                } else {
                    next
                });
            }
            Some(_) => {}
        }
        found
    }

    /// `sbitmap_queue_clear`: the bit is free again, and the CPU that allocated it will look there first. Since
    /// Linux 5.0 (`SBITMAP_DEFERRED_CLEAR`) it only goes into the word's `cleared` mask, and allocations see it once
    /// one finds no free bit in its range of the word (`get`). Simplification: NVMe's batched completions
    /// (`sbitmap_queue_clear_batch`, only for requests without an elevator) clear at once in the kernel; here they
    /// are deferred too, which changes which tag a later request gets but never whether it gets one, since without
    /// an elevator no allocation is limited to part of a word.
    fn clear(&mut self, tag: u32, cpu: u32) {
        let index = (tag >> self.shift) as usize;
        let bit = 1u64 << (tag & ((1 << self.shift) - 1));
        if self.kernel.has(&kernel::SBITMAP_DEFERRED_CLEAR) {
            self.cleared[index] |= bit;
        } else {
            self.words[index] &= !bit;
        }
        let _ = self.hint(cpu);
        if tag < self.depth {
            self.hints[cpu as usize] = Some(tag);
        }
    }

    fn in_use(&self) -> u32 {
        let taken = self.words.iter().zip(&self.cleared).map(|(w, c)| w & !c);
        taken.map(|w| w.count_ones()).sum()
    }
}

/// The wait side of one hardware queue's request tags (an `sbitmap_queue`, [`SbqWaits`]) and the per-hctx index
/// the next sleeper takes (`hctx->wait_index`).
pub struct TagWaits {
    waits: SbqWaits<u32>,
    wait_index: usize,
    /// Sleepers plus woken threads that have not retried yet (`ws_active`: finish_wait drops it after the retry).
    active: u32,
}

impl TagWaits {
    fn new(rule: WakeRule, wake_batch: u32) -> Self {
        // blk_mq_get_tag sleeps with sbitmap_prepare_to_wait: exclusive since 4.19.
        let exclusive = match rule {
            WakeRule::PerQueueCount { exclusive } => exclusive,
            _ => true,
        };
        Self {
            waits: SbqWaits::new(rule, wake_batch, exclusive),
            wait_index: 0,
            active: 0,
        }
    }

    /// `bt_wait_ptr` then `sbitmap_prepare_to_wait`: sleep on the next wait queue in turn, at its tail.
    fn sleep(&mut self, io: u32) {
        self.waits.queue_mut(self.wait_index).push_back(io);
        self.wait_index = (self.wait_index + 1) % SBQ_WAIT_QUEUES;
        self.active += 1;
    }

    /// The wake-up for one freed tag (`sbq_wake_up` before 6.2, `sbitmap_queue_wake_up` since); woken bios are
    /// appended to `woken`.
    fn tag_freed(&mut self, wake_batch: u32, woken: &mut Vec<u32>) {
        let active = self.active > 0;
        self.waits.bit_freed(wake_batch, active, woken, |_| {});
    }

    fn sleeping(&self) -> usize {
        self.waits.waiting()
    }
}

/// What a sleeping allocation asked with: its CPU and the shallow depth `limit_depth` gave it (kept through every
/// retry, as blk_mq_get_tag keeps `data->shallow_depth`).
#[derive(Clone, Copy)]
struct TagAsk {
    cpu: u32,
    shallow: Option<u32>,
}

pub struct BlockQueue {
    pub elevator: Box<dyn Elevator>,
    pub has_elevator: bool,
    pub layer: BlockLayer,
    pub nr_hw_queues: u32,
    pub kernel: KernelVersion,
    /// blk-mq: each hardware queue's request tags (scheduler tags with an elevator, the driver tags without).
    request_tags_map: Vec<Sbitmap>,
    /// blk-mq: the tag each allocated request holds, by request id.
    tag_of: DenseMap<u32>,
    /// blk-mq: what each bio waiting for a tag asked with, by bio.
    asks: DenseMap<TagAsk>,
    /// Legacy layer only: the request list (blk-mq: None).
    request_list: Option<RequestList>,
    driver_tags_free: Vec<u32>,
    /// Per hardware queue: a run stopped with work left for want of a driver tag (`BLK_MQ_S_SCHED_RESTART`), so
    /// the next request freed there re-runs it (`blk_mq_sched_restart`).
    pub restart_marked: Vec<bool>,
    /// Per hardware queue: when blk-mq's delayed re-run of it is due (`hctx->run_work` armed with a delay by
    /// `blk_mq_delay_run_hw_queues`), or 0 if none is pending.
    pub delayed_run_at_ns: Vec<u64>,
    /// Legacy layer: bios waiting for a request, in two classes that block apart (async and sync, index
    /// `sync as usize`: the request list counts them apart), each served first come, first served as
    /// `get_request`'s exclusive waits on `rl->wait[sync]` are.
    pub tag_waiters: Vec<[VecDeque<Waiter>; 2]>,
    tag_waiter_arrivals: u64,
    /// blk-mq: the sleepers on each hardware queue's request tags.
    pub tag_waits: Vec<TagWaits>,
    /// Freed tags per wake-up of blk-mq tag sleepers (`wake_batch`: the version's formula, from the elevator's
    /// smallest shallow depth).
    pub wake_batch: u32,
    /// Scheduler tags per hardware queue (nr_requests), or the driver tags without an elevator.
    pub request_tags: u32,
    /// The elevator's device-wide lock, or its per-hardware-queue locks (see `Elevator::locking`).
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
    /// blk-mq with `nr_hw_queues` hardware queues, on Linux `kernel` (the elevator must already follow it).
    pub fn new(
        elevator: Box<dyn Elevator>,
        nr_hw_queues: u32,
        queue_depth: u32,
        nr_requests: Option<u32>,
        kernel: KernelVersion,
    ) -> Self {
        let has_elevator = elevator.is_elevator();
        let inner_locks = vec![SpinLock::default(); elevator.inner_locks() as usize];
        let request_tags = if has_elevator {
            nr_requests.unwrap_or(2 * queue_depth.min(128))
        } else {
            queue_depth
        };
        let tags = SchedTags::new(request_tags);
        let min_shallow = if has_elevator {
            elevator.min_shallow_depth(tags)
        } else {
            None
        };
        let wake_batch = kernel::sbq_calc_wake_batch(kernel, request_tags, tags.shift, min_shallow);
        let rule = WakeRule::of(kernel);
        Self {
            elevator,
            has_elevator,
            layer: BlockLayer::Mq,
            request_tags,
            nr_hw_queues,
            kernel,
            request_tags_map: (0..nr_hw_queues)
                .map(|h| Sbitmap::new(request_tags, h, kernel))
                .collect(),
            tag_of: DenseMap::default(),
            asks: DenseMap::default(),
            request_list: None,
            driver_tags_free: vec![queue_depth; nr_hw_queues as usize],
            restart_marked: vec![false; nr_hw_queues as usize],
            delayed_run_at_ns: vec![0; nr_hw_queues as usize],
            tag_waiters: (0..nr_hw_queues).map(|_| Default::default()).collect(),
            tag_waiter_arrivals: 0,
            tag_waits: (0..nr_hw_queues)
                .map(|_| TagWaits::new(rule, wake_batch))
                .collect(),
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
    pub fn legacy(
        elevator: Box<dyn Elevator>,
        queue_depth: u32,
        nr_requests: Option<u32>,
        kernel: KernelVersion,
    ) -> Self {
        let list = RequestList::new(nr_requests.unwrap_or(crate::sq::BLKDEV_MAX_RQ));
        let mut queue = Self::new(elevator, 1, queue_depth, Some(list.nr_requests), kernel);
        queue.has_elevator = true; // every legacy queue has one: noop is an elevator
        queue.layer = BlockLayer::Legacy;
        queue.request_list = Some(list);
        queue
    }

    /// The scheduler tags as `limit_depth` sees them.
    pub fn sched_tags(&self) -> SchedTags {
        SchedTags::new(self.request_tags)
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

    /// Cost of moving the scheduler's lock between cores (the host's `lock_handoff_ns`, priced for
    /// `HANDOFF_CACHE_LINES`); an inner (wait-queue) lock moves `WAIT_QUEUE_HANDOFF_LINES` of those lines.
    pub fn set_lock_handoff_ns(&mut self, handoff_ns: u64) {
        self.device_lock.handoff_ns = handoff_ns;
        for lock in self.hctx_locks.iter_mut() {
            lock.handoff_ns = handoff_ns;
        }
        for lock in self.inner_locks.iter_mut() {
            lock.handoff_ns = handoff_ns * WAIT_QUEUE_HANDOFF_LINES / HANDOFF_CACHE_LINES;
        }
    }

    /// A request tag for `rq` (on `rq.hctx`, from CPU `rq.cpu`), within the shallow depth the elevator's
    /// `limit_depth` gives it now.
    #[inline]
    pub fn try_take_request_tag(&mut self, rq: &Request) -> bool {
        if let Some(list) = &mut self.request_list {
            return list.try_alloc(rq.sync);
        }
        let shallow = self.shallow_depth(rq);
        self.take_tag(rq.id, rq.hctx, rq.cpu, shallow)
    }

    fn shallow_depth(&self, rq: &Request) -> Option<u32> {
        if self.has_elevator {
            self.elevator.limit_depth(rq, self.sched_tags())
        } else {
            None
        }
    }

    fn take_tag(&mut self, id: u32, hctx: u32, cpu: u32, shallow: Option<u32>) -> bool {
        match self.request_tags_map[hctx as usize].get(cpu, shallow) {
            Some(tag) => {
                self.tag_of.insert(id, tag);
                true
            }
            None => false,
        }
    }

    /// Park the bio of `rq` (bio `io`) until a request of its kind is free: blk-mq, asleep on the tags' next wait
    /// queue with the shallow depth it asked with (`tag_freed` wakes it, to retry); legacy, in its class's line
    /// (`next_tag_waiter` hands it a request).
    pub fn wait_for_tag(&mut self, rq: &Request, io: u32) {
        if self.layer == BlockLayer::Mq {
            let ask = TagAsk {
                cpu: rq.cpu,
                shallow: self.shallow_depth(rq),
            };
            self.asks.insert(io, ask);
            self.tag_waits[rq.hctx as usize].sleep(io);
            return;
        }
        self.tag_waiter_arrivals += 1;
        self.tag_waiters[rq.hctx as usize][rq.sync as usize].push_back((
            self.tag_waiter_arrivals,
            io,
            rq.op,
            rq.sync,
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

    /// blk-mq: the woken thread of bio `io`, asleep on `slept_on`'s tags, asks for a request again, on `hctx` from
    /// `cpu`, with the shallow depth it first asked with: true if it got one (as request `io`); false if it went
    /// back to sleep (on `hctx`'s next wait queue). blk_mq_get_tag maps the thread's context again after each sleep,
    /// so a thread that woke on another CPU asks that CPU's hardware queue; leaving `slept_on`, it counts one freed
    /// tag there for the threads still asleep on it (`sbitmap_queue_wake_up(bt_prev, 1)`, "so other allocations
    /// on previous queue won't be starved"): bios that wakes are appended to `woken`.
    pub fn retry_tag(
        &mut self,
        slept_on: u32,
        hctx: u32,
        cpu: u32,
        io: u32,
        woken: &mut Vec<u32>,
    ) -> bool {
        self.tag_waits[slept_on as usize].active -= 1; // sbitmap_finish_wait
        let mut ask = *self.asks.get(&io).expect("a sleeping bio's ask");
        if hctx != slept_on {
            ask.cpu = cpu;
            self.asks.insert(io, ask);
            self.tag_freed(slept_on, woken);
        }
        if self.take_tag(io, hctx, ask.cpu, ask.shallow) {
            self.asks.remove(&io);
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
            let Some(&(_, io, _, sync)) = self.tag_waiters[hctx as usize][class].front() else {
                continue;
            };
            let list = self
                .request_list
                .as_mut()
                .expect("legacy waiters need the request list");
            if list.try_alloc(sync) {
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

    /// Requests allocated now (request tags in use, every hardware queue; legacy: from the request list).
    pub fn requests_allocated(&self) -> u32 {
        match &self.request_list {
            Some(list) => list.allocated(),
            None => self.request_tags_map.iter().map(Sbitmap::in_use).sum(),
        }
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

    /// Give back the tags of finished request `rq` (allocated on `rq.hctx` by `rq.cpu`) dispatched on
    /// `dispatch_hctx`.
    #[inline]
    pub fn release_tags(&mut self, rq: &Request, dispatch_hctx: u32) {
        if let Some(list) = &mut self.request_list {
            list.free(rq.op == iosched_policy::Op::Read || rq.sync);
            self.driver_tags_free[dispatch_hctx as usize] += 1;
            return;
        }
        let tag = self
            .tag_of
            .remove(&rq.id)
            .expect("a finished request holds a tag");
        self.request_tags_map[rq.hctx as usize].clear(tag, rq.cpu);
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
            None => self.request_tags * self.nr_hw_queues - self.requests_allocated(),
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
    use iosched_policy::{IoprioClass, Op};

    fn v(version: &str) -> KernelVersion {
        KernelVersion::parse(version).unwrap()
    }

    /// A request `id` of process `process` on hardware queue 0 from CPU 0.
    fn rq(id: u32, op: Op, sync: bool, process: u32) -> Request {
        Request {
            id,
            op,
            sector: id as u64 * 128,
            nr_sectors: 128,
            cpu: 0,
            hctx: 0,
            ioprio_class: IoprioClass::None,
            ioprio_level: 4,
            process,
            cgroup: 0,
            cgroup_weight: 100,
            sync,
            start_ns: 0,
        }
    }

    fn queue(scheduler: &str, nr_requests: Option<u32>, kernel: &str) -> BlockQueue {
        let mut elevator = iosched_policy::by_name(scheduler, 1).unwrap();
        elevator.set_kernel_version(v(kernel));
        BlockQueue::new(elevator, 1, 1023, nr_requests, v(kernel))
    }

    /// A hand-off prices 6 cache lines (`lock_handoff_ns` = 600 ns: 100 ns a line). Kyber's hardware-queue lock
    /// moves all 6; a token wait queue's lock moves its head's line and the entry linked under it: 2 x 100 = 200 ns.
    #[test]
    fn a_wait_queue_lock_hands_off_its_two_lines_only() {
        let mut q = queue("kyber", Some(256), "6.3");
        q.set_lock_handoff_ns(600);
        assert_eq!(q.hctx_locks[0].handoff_ns, 600);
        assert!(!q.inner_locks.is_empty());
        assert!(q.inner_locks.iter().all(|l| l.handoff_ns == 200));
    }

    #[test]
    fn without_an_elevator_requests_hold_driver_tags() {
        let mut queue = BlockQueue::new(
            iosched_policy::by_name("none", 2).unwrap(),
            2,
            3,
            None,
            v("6.3"),
        );
        assert!(!queue.has_elevator);
        assert_eq!(queue.free_tags(), (6, 6));
        for id in 0..3 {
            assert!(queue.try_take_request_tag(&rq(id, Op::Read, true, 0)));
        }
        assert!(
            !queue.try_take_request_tag(&rq(3, Op::Read, true, 0)),
            "queue depth 3 per hardware queue"
        );
        assert!(queue.try_take_request_tag(&Request {
            hctx: 1,
            ..rq(4, Op::Read, true, 0)
        }));
        assert!(
            queue.can_dispatch(0) && queue.try_take_driver_tag(0),
            "the request already holds its tag"
        );
        queue.release_tags(&rq(0, Op::Read, true, 0), 0);
        assert!(queue.try_take_request_tag(&rq(5, Op::Read, true, 0)));
        assert!(queue.lock_for(0).is_none(), "none has no shared lock");
    }

    /// Linux 6.3's mq-deadline passes async_depth (3/4 of nr_requests = 192) to the sbitmap as a depth per 64-bit
    /// word: more than a word holds, so writes take all 256 scheduler tags (as the seed-000 artifact's disk stats
    /// show: 256 requests in flight per drive with 16 writers). 6.11's dd_to_word_depth scales it: a set
    /// async_depth of 64 leaves writes 16 bits of each word.
    #[test]
    fn mq_deadlines_async_depth_limits_nothing_on_6_3_and_per_word_share_on_6_11() {
        let mut q = queue("mq-deadline", Some(256), "6.3");
        assert_eq!(
            q.wake_batch, 8,
            "min_shallow_depth 192: every 64-bit word counts whole"
        );
        for id in 0..256 {
            assert!(
                q.try_take_request_tag(&rq(id, Op::Write, true, 1)),
                "write {id}"
            );
        }
        assert!(
            !q.try_take_request_tag(&rq(256, Op::Read, true, 2)),
            "no tag left even for a sync read"
        );

        let mut q = queue("mq-deadline", Some(256), "6.11");
        q.elevator.set_tunable("async_depth", 64).unwrap();
        assert_eq!(q.wake_batch, 1);
        let taken = (0..256)
            .filter(|&id| q.try_take_request_tag(&rq(id, Op::Write, true, 1)))
            .count();
        assert_eq!(taken, 64, "16 bits of each of the 4 words");
        assert!(
            q.try_take_request_tag(&rq(300, Op::Read, true, 2)),
            "sync reads take the rest"
        );
        assert_eq!(q.requests_allocated(), 65);
    }

    /// A shallow depth of 1 (BFQ's for a queue over its share) on 6.3 means bit 0 of each word: 4 tags of 256 for
    /// every such allocation on the hardware queue together, fewer when sync reads hold some of those bits. 6.18
    /// spreads a whole-set depth over the words instead.
    #[test]
    fn a_shallow_depth_is_per_word_before_6_17_and_a_share_of_the_set_since() {
        let mut sb = Sbitmap::new(256, 0, v("6.3"));
        assert_eq!((sb.shift, sb.words.len()), (6, 4));
        let taken: Vec<u32> = (0..10).filter_map(|_| sb.get(0, Some(1))).collect();
        assert_eq!(taken.len(), 4);
        assert!(
            taken.iter().all(|t| t % 64 == 0),
            "bit 0 of each word: {taken:?}"
        );
        // Bit 64 freed, and given back to its word (as by an allocation that found the word full: see
        // `a_freed_bit_stays_taken_until_an_allocation_finds_its_word_full_since_5_0`).
        sb.clear(64, 0);
        sb.words[1] &= !std::mem::take(&mut sb.cleared[1]);
        assert_eq!(
            sb.get(0, None),
            Some(64),
            "an unlimited allocation takes the lowest free bit of its hint's word"
        );
        assert_eq!(
            sb.get(0, Some(1)),
            None,
            "the read holds the bit the limited ones could use"
        );

        let mut sb = Sbitmap::new(256, 0, v("6.18"));
        let taken: Vec<u32> = (0..10).filter_map(|_| sb.get(0, Some(8))).collect();
        assert_eq!(taken.len(), 8, "8 of the whole set, 2 per word");
        assert!(taken.iter().all(|t| t % 64 < 2), "{taken:?}");
        // A depth that does not divide: 6 over 4 words of 64 gives the first two words 2 bits, the others 1.
        let sb = Sbitmap::new(256, 0, v("6.18"));
        assert_eq!(
            (0..4)
                .map(|i| sb.word_limit(i, Some(6)))
                .collect::<Vec<_>>(),
            [2, 2, 1, 1]
        );
        assert_eq!(Sbitmap::new(256, 0, v("6.3")).word_limit(0, Some(48)), 48);
    }

    /// Worked example of the deferred clear (5.0+), 6.3, 256 tags in 4 words of 64: four depth-1 allocations hold
    /// bit 0 of each word (0, 64, 128, 192). CPU 0 frees 64: on 6.3 the bit goes into word 1's `cleared` mask and
    /// CPU 0's hint becomes 64. CPU 0's next unlimited allocation searches word 1 from bit 0, finds bit 0 still set in
    /// the word and bit 1 free: it takes 65. A depth-1 allocation then finds nothing free in bit 0 of word 1, moves
    /// the cleared bits back and takes 64. On 4.19 (negative control) 64 is free at once, the unlimited allocation,
    /// starting at its hint's bit, takes it, and the depth-1 one gets nothing.
    #[test]
    fn a_freed_bit_stays_taken_until_an_allocation_finds_its_word_full_since_5_0() {
        for (kernel, unlimited, limited) in [("6.3", 65, Some(64)), ("4.19", 64, None)] {
            let mut sb = Sbitmap::new(256, 0, v(kernel));
            let mut taken: Vec<u32> = (0..4).filter_map(|_| sb.get(0, Some(1))).collect();
            taken.sort_unstable();
            assert_eq!(taken, [0, 64, 128, 192], "{kernel}");
            sb.clear(64, 0);
            assert_eq!(sb.hints[0], Some(64));
            assert_eq!(sb.in_use(), 3, "{kernel}: freed, if not yet given back");
            assert_eq!(sb.get(0, None), Some(unlimited), "{kernel}");
            assert_eq!(sb.get(0, Some(1)), limited, "{kernel}");
        }
    }

    #[test]
    fn a_freed_tag_is_where_its_cpu_looks_first() {
        let mut sb = Sbitmap::new(64, 0, v("6.3"));
        assert_eq!(sb.shift, 4);
        let tags: Vec<u32> = (0..64).map(|_| sb.get(3, None).unwrap()).collect();
        assert_eq!(sb.get(3, None), None, "full");
        sb.clear(tags[40], 3);
        assert_eq!(sb.hints[3], Some(tags[40]));
        sb.clear(tags[41], 3);
        assert_eq!(
            sb.get(3, Some(16)),
            Some(tags[41]),
            "a shallow search starts at the hint's bit"
        );
        assert_eq!(sb.in_use(), 63);
    }

    /// 16 tags (wake batch 2), five sleepers on wait queues 0-4: how freed tags wake them, by version.
    fn sleepers(kernel: &str) -> (BlockQueue, Vec<u32>) {
        let mut q = BlockQueue::new(
            iosched_policy::by_name("none", 1).unwrap(),
            1,
            16,
            None,
            v(kernel),
        );
        for id in 0..16 {
            assert!(q.try_take_request_tag(&rq(id, Op::Write, true, 1)));
        }
        for io in 100..105 {
            q.wait_for_tag(&rq(io, Op::Write, true, 1), io);
        }
        (q, Vec::new())
    }

    #[test]
    fn freed_tags_wake_sleepers_in_batches_and_a_running_submitter_can_take_them_first() {
        let (mut q, mut woken) = sleepers("6.18");
        assert_eq!(q.wake_batch, 2, "16 tags / 8 wait queues");
        q.release_tags(&rq(0, Op::Write, true, 1), 0);
        q.tag_freed(0, &mut woken);
        assert!(woken.is_empty(), "one freed tag is half a batch");
        q.release_tags(&rq(1, Op::Write, true, 1), 0);
        q.tag_freed(0, &mut woken);
        assert_eq!(
            woken,
            [100, 101],
            "6.5+: one batch across wait queues 0 and 1"
        );
        assert!(
            q.try_take_request_tag(&rq(200, Op::Write, true, 2)),
            "a submitter that never slept takes a freed tag before the woken threads run"
        );
        assert!(q.retry_tag(0, 0, 0, 100, &mut Vec::new()));
        assert!(
            !q.retry_tag(0, 0, 0, 101, &mut Vec::new()),
            "none left: back to sleep, on the next wait queue (5)"
        );
        assert_eq!(q.sleeping_on_tags(0), 4);
        woken.clear();
        for id in 2..6 {
            q.release_tags(&rq(id, Op::Write, true, 1), 0);
            q.tag_freed(0, &mut woken);
        }
        assert_eq!(
            woken,
            [102, 103, 104, 101],
            "wake-ups go on from wait queue 2; the loser is last"
        );
    }

    #[test]
    fn a_thread_that_wakes_on_another_cpu_asks_there_and_wakes_one_more_sleeper_of_its_old_queue() {
        // Two hardware queues of 4 tags (wake batch 1); queue 0 full, bios 100 and 101 asleep on it. A freed tag
        // of queue 0 wakes 100. Its thread runs on CPU 1 now, so it asks queue 1 (blk_mq_get_tag maps its context
        // again) and gets a tag there; leaving queue 0 it counts one freed tag for those still asleep there, which
        // wakes 101, who then takes the tag 100 left behind.
        let setup = || {
            let mut q = BlockQueue::new(
                iosched_policy::by_name("none", 2).unwrap(),
                2,
                4,
                None,
                v("6.3"),
            );
            for id in 0..4 {
                assert!(q.try_take_request_tag(&rq(id, Op::Read, true, 1)));
            }
            for io in [100, 101] {
                q.wait_for_tag(&rq(io, Op::Read, true, 1), io);
            }
            let mut woken = Vec::new();
            q.release_tags(&rq(0, Op::Read, true, 1), 0);
            q.tag_freed(0, &mut woken);
            assert_eq!(woken, [100]);
            q
        };
        let mut q = setup();
        let mut woken = Vec::new();
        assert!(q.retry_tag(0, 1, 1, 100, &mut woken), "queue 1 has tags");
        assert_eq!(woken, [101], "the compensating wake-up on queue 0");
        assert!(q.retry_tag(0, 0, 0, 101, &mut Vec::new()));
        // Negative control: woken on its old CPU, 100 takes queue 0's freed tag and 101 sleeps on.
        let mut q = setup();
        let mut woken = Vec::new();
        assert!(q.retry_tag(0, 0, 0, 100, &mut woken));
        assert!(woken.is_empty() && q.sleeping_on_tags(0) == 1);
    }

    #[test]
    fn linux_6_3_wakes_one_wait_queue_per_batch() {
        let (mut q, mut woken) = sleepers("6.3");
        for id in 0..4 {
            q.release_tags(&rq(id, Op::Write, true, 1), 0);
            q.tag_freed(0, &mut woken);
        }
        assert_eq!(
            woken,
            [100, 101],
            "two batches, one sleeper each: a wait queue holds one"
        );
    }

    #[test]
    fn before_6_2_each_wait_queue_counts_its_own_batch() {
        // 5.2: the count goes to the first wait queue with sleepers; when it has counted 2, up to 2 of its sleepers
        // wake and the next wait queue counts.
        let (mut q, mut woken) = sleepers("5.2");
        for id in 0..4 {
            q.release_tags(&rq(id, Op::Write, true, 1), 0);
            q.tag_freed(0, &mut woken);
        }
        assert_eq!(woken, [100, 101]);
        // 4.15 sleeps non-exclusively: a wake-up wakes the whole wait queue.
        let (mut q, mut woken) = sleepers("4.15");
        for io in 105..107 {
            q.wait_for_tag(&rq(io, Op::Write, true, 1), io); // wait queues 5 and 6
        }
        for io in 107..110 {
            q.wait_for_tag(&rq(io, Op::Write, true, 1), io); // 7, then 0 and 1 again
        }
        for id in 0..2 {
            q.release_tags(&rq(id, Op::Write, true, 1), 0);
            q.tag_freed(0, &mut woken);
        }
        assert_eq!(woken, [100, 108], "wait queue 0 woken whole");
    }

    #[test]
    fn legacy_queue_counts_sync_and_async_requests_apart_under_the_queue_lock() {
        let mut queue = BlockQueue::legacy(
            iosched_policy::by_name("noop", 1).unwrap(),
            2,
            Some(3),
            v("4.19"),
        );
        assert_eq!(queue.layer, BlockLayer::Legacy);
        assert_eq!(
            queue.free_tags(),
            (6, 2),
            "3 sync + 3 async requests, 2 command slots"
        );
        for id in 0..3 {
            assert!(queue.try_take_request_tag(&rq(id, Op::Write, false, 1)));
        }
        assert!(
            !queue.try_take_request_tag(&rq(3, Op::Write, false, 1)),
            "async list full"
        );
        assert!(
            queue.try_take_request_tag(&rq(4, Op::Read, true, 1)),
            "sync requests still available"
        );
        queue.wait_for_tag(&rq(7, Op::Write, false, 1), 7);
        assert_eq!(queue.next_tag_waiter(0), None);
        queue.release_tags(&rq(4, Op::Read, true, 1), 0);
        assert_eq!(
            queue.next_tag_waiter(0),
            None,
            "a freed sync request does not admit an async bio"
        );
        queue.release_tags(&rq(0, Op::Write, false, 1), 0);
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
