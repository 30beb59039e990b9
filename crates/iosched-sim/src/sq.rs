//! The legacy single-queue block layer (Linux <= 4.x `request_queue` with a `request_fn` driver; removed in 5.0),
//! as the simulator models it. `blk.rs` holds the shared parts; this module holds what is legacy-only and says
//! what is modelled.
//!
//! # Model (Linux 4.19: block/blk-core.c, block/elevator.c, drivers/scsi/scsi_lib.c)
//!
//! * **One elevator, one dispatch queue.** Every request goes through the elevator (`noop` is one too). The SCSI
//!   `request_fn` pulls requests from the elevator while the device has a free command slot (`sdev->queue_depth`,
//!   the device preset's `queue_depth`, 32 NCQ tags on the SATA preset): here `dispatch` is called while a slot is
//!   free and the request goes to the device at once.
//! * **The queue lock.** One spinlock (`q->queue_lock`) covers merging, request allocation, insertion, dispatch and
//!   completion for every elevator, including BFQ on this layer: the policy's own locking does not apply.
//!   Acquisitions per request: [`QUEUE_LOCK_ACQUISITIONS`].
//! * **The request list.** `nr_requests` (default `BLKDEV_MAX_RQ` = 128) sync and as many async requests may be
//!   allocated (`rl->count[is_sync]`); a bio that finds its half full waits (`get_request` sleeps) until a request
//!   of its kind is freed, oldest waiter first.
//! * **Plugging.** A task's plug collects the requests of one submission batch; contiguous bios merge there
//!   (`blk_attempt_plug_merge`) up to `max_sectors_kb`, and the batch reaches the elevator together. The kernel
//!   flushes a plug at `BLK_MAX_REQUEST_COUNT` (16) requests or after a request of `BLK_PLUG_FLUSH_SIZE` (128 KiB);
//!   in the simulator every bio of a batch reaches the elevator on its own event anyway, so those limits do not
//!   change what the elevator sees and are not modelled separately.
//!
//! # Not modelled
//!
//! * The request list's batching allowance (a task that fills the list may allocate up to `BLK_BATCH_REQ` = 32
//!   more, at most 50% over `nr_requests`) and the congestion thresholds (7/8 on, 13/16 off) that writeback uses to
//!   back off: the list has a hard limit.
//! * Request-to-request merges, requeues, flush/FUA sequences, `elv_dispatch_sort`'s ordering of the dispatch list
//!   (requests go to the device as they leave the elevator), writeback throttling (`blk-wbt` on the legacy path needs
//!   `CONFIG_BLK_WBT_SQ`, off by default, and CFQ/BFQ disable it).

use iosched_policy::LockAcquisitions;

/// `BLKDEV_MAX_RQ`: the default `nr_requests` of a legacy queue (include/linux/blkdev.h).
pub const BLKDEV_MAX_RQ: u32 = 128;

/// The queue lock per request on the legacy layer (see [`iosched_policy::LEGACY_QUEUE_LOCK`] for where).
pub const QUEUE_LOCK_ACQUISITIONS: LockAcquisitions = iosched_policy::LEGACY_QUEUE_LOCK;

/// `struct request_list`: requests allocated, sync and async apart, each limited to `nr_requests`.
#[derive(Debug, Clone)]
pub struct RequestList {
    pub nr_requests: u32,
    count: [u32; 2],
}

impl RequestList {
    pub fn new(nr_requests: u32) -> Self {
        Self {
            nr_requests: nr_requests.max(1),
            count: [0, 0],
        }
    }

    /// Allocate a request of this kind if its half of the list has room.
    pub fn try_alloc(&mut self, sync: bool) -> bool {
        let c = &mut self.count[sync as usize];
        if *c >= self.nr_requests {
            return false;
        }
        *c += 1;
        true
    }

    pub fn free(&mut self, sync: bool) {
        let c = &mut self.count[sync as usize];
        assert!(*c > 0, "freeing a request that was not allocated");
        *c -= 1;
    }

    pub fn allocated(&self) -> u32 {
        self.count[0] + self.count[1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_and_async_halves_fill_apart() {
        let mut list = RequestList::new(2);
        assert!(list.try_alloc(true) && list.try_alloc(true));
        assert!(!list.try_alloc(true));
        assert!(list.try_alloc(false) && list.try_alloc(false) && !list.try_alloc(false));
        assert_eq!(list.allocated(), 4);
        list.free(true);
        assert!(list.try_alloc(true) && !list.try_alloc(false));
    }
}
