//! The wait side of an sbitmap queue (lib/sbitmap.c's `sbq_wait_state`s and `sbitmap_queue_wake_up`): who is woken
//! when bits are freed, by the run's kernel version ([`WakeRule`]). One type for both of its users in the model:
//! blk-mq's request tags, where threads sleep for a tag (exclusive waiters since 4.19, `blk_mq_get_tag`), and
//! Kyber's domain tokens, where hardware queues wait with a callback (non-exclusive entries, `add_wait_queue`).
//! The wake rules differ only in how many of a wait queue's entries a wake-up takes: every non-exclusive one, and
//! up to the batch's count of exclusive ones.

use std::collections::VecDeque;

use crate::kernel::WakeRule;

/// Wait queues per sbitmap queue (SBQ_WAIT_QUEUES).
pub const SBQ_WAIT_QUEUES: usize = 8;

/// The 8 wait queues of one sbitmap queue, where wake-ups start (`wake_index`) and the counts that batch them
/// (per wait queue `wait_cnt` before 6.2; `completion_cnt` and `wakeup_cnt` for the whole bitmap since).
/// Where a waiter goes (which wait queue, head or tail) is its user's: callers push onto [`SbqWaits::queue_mut`].
#[derive(Debug, Clone)]
pub struct SbqWaits<T> {
    queues: [VecDeque<T>; SBQ_WAIT_QUEUES],
    /// Before 6.2, per wait queue: freed bits still to count before it is woken.
    wait_cnt: [u32; SBQ_WAIT_QUEUES],
    wake_index: usize,
    /// Since 6.2: bits freed while anyone waited, and those the wake-ups so far stood for (a batch each).
    completion_cnt: u64,
    wakeup_cnt: u64,
    rule: WakeRule,
    /// The waiters are exclusive (`prepare_to_wait_exclusive`): a wake-up takes at most its batch of them.
    exclusive: bool,
}

impl<T> SbqWaits<T> {
    pub fn new(rule: WakeRule, wake_batch: u32, exclusive: bool) -> Self {
        Self {
            queues: Default::default(),
            wait_cnt: [wake_batch; SBQ_WAIT_QUEUES],
            wake_index: 0,
            completion_cnt: 0,
            wakeup_cnt: 0,
            rule,
            exclusive,
        }
    }

    /// The kernel version's rule, for a bitmap made before the run's version was known; the counts stay.
    pub fn set_rule(&mut self, rule: WakeRule) {
        self.rule = rule;
    }

    pub fn queue_mut(&mut self, ws: usize) -> &mut VecDeque<T> {
        &mut self.queues[ws]
    }

    pub fn queues(&self) -> &[VecDeque<T>; SBQ_WAIT_QUEUES] {
        &self.queues
    }

    /// Before 6.2, wait queue `ws`'s count of freed bits still to come before it is woken.
    pub fn wait_cnt(&self, ws: usize) -> u32 {
        self.wait_cnt[ws]
    }

    /// The wait queue the next wake-up starts from.
    pub fn wake_index(&self) -> usize {
        self.wake_index
    }

    /// Entries on all wait queues.
    pub fn waiting(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    /// Before 6.2, set every wait queue's count to `n` (`sbitmap_queue_update_wake_batch` sets 1 when a resize
    /// changes the batch, so the next freed bit wakes); since 6.2 there are no such counts.
    pub fn reset_counts(&mut self, n: u32) {
        if let WakeRule::PerQueueCount { .. } = self.rule {
            self.wait_cnt = [n; SBQ_WAIT_QUEUES];
        }
    }

    /// `sbitmap_queue_wake_up` for one freed bit with batches of `wake_batch`. `active`: someone is counted as
    /// waiting (`ws_active`; for blk-mq's tags also a woken thread that has not retried yet). The woken entries are
    /// appended to `woken`, in the order the wake-ups call them; `on_wake` gets each wait queue a wake-up took
    /// entries from (its lock was taken).
    /// - Before 6.2: the bit counts against the first wait queue with waiters from `wake_index` on; the one whose
    ///   count runs out is woken (all of it, or up to `wake_batch` exclusive waiters) and `wake_index` moves past it.
    /// - Since 6.2: while anyone waits, every `wake_batch` freed bits go through the wait queues from `wake_index`,
    ///   advancing it past each: `wake_up_nr` calls every non-exclusive entry of one and counts only the exclusive
    ///   waiters it woke, and the loop stops once one was woken (6.2-6.4) or `wake_batch` were (6.5+). With only
    ///   non-exclusive entries waiting it visits all 8 and `wake_index` ends where it began.
    pub fn bit_freed(
        &mut self,
        wake_batch: u32,
        active: bool,
        woken: &mut Vec<T>,
        mut on_wake: impl FnMut(usize),
    ) {
        if let WakeRule::PerQueueCount { .. } = self.rule {
            let Some(ws) = (0..SBQ_WAIT_QUEUES)
                .map(|i| (self.wake_index + i) % SBQ_WAIT_QUEUES)
                .find(|&ws| !self.queues[ws].is_empty())
            else {
                return;
            };
            self.wake_index = ws;
            self.wait_cnt[ws] = self.wait_cnt[ws].saturating_sub(1);
            if self.wait_cnt[ws] > 0 {
                return;
            }
            self.wait_cnt[ws] = wake_batch;
            self.wake_index = (ws + 1) % SBQ_WAIT_QUEUES;
            let queue = &mut self.queues[ws];
            let n = if self.exclusive {
                (wake_batch as usize).min(queue.len())
            } else {
                queue.len()
            };
            woken.extend(queue.drain(..n));
            on_wake(ws);
            return;
        }
        if !active {
            return;
        }
        self.completion_cnt += 1;
        if self.completion_cnt - self.wakeup_cnt < wake_batch as u64 {
            return;
        }
        self.wakeup_cnt += wake_batch as u64;
        let mut left = wake_batch as usize;
        for _ in 0..SBQ_WAIT_QUEUES {
            let ws = self.wake_index;
            self.wake_index = (ws + 1) % SBQ_WAIT_QUEUES;
            let queue = &mut self.queues[ws];
            if queue.is_empty() {
                continue;
            }
            if !self.exclusive {
                woken.extend(queue.drain(..));
                on_wake(ws);
                continue;
            }
            let n = left.min(queue.len());
            woken.extend(queue.drain(..n));
            on_wake(ws);
            left -= n;
            if left == 0 || self.rule == WakeRule::OneQueuePerBatch {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked example, 6.2-6.4 with exclusive waiters (blk-mq's tags), batch 2: sleepers 10, 11, 12 on wait queue
    /// 0 and 20 on wait queue 1. The first freed bit is counted (1 of 2), the second makes a batch: from
    /// wake_index 0, queue 0 gives up to 2 exclusive waiters (10, 11) and the loop stops there, wake_index now 1.
    /// The next batch starts at queue 1: 20, one short of 2, so it goes on to queue 2..7 (empty) and 0, where 12 is
    /// woken too under 6.5+'s rule, but not under 6.2-6.4's, which stops at the first queue that woke anyone.
    #[test]
    fn a_batch_of_freed_bits_wakes_exclusive_waiters_from_wake_index_on() {
        for (rule, second) in [
            (WakeRule::OneQueuePerBatch, vec![20]),
            (WakeRule::AcrossQueues, vec![20, 12]),
        ] {
            let mut waits = SbqWaits::new(rule, 2, true);
            waits.queue_mut(0).extend([10, 11, 12]);
            waits.queue_mut(1).push_back(20);
            let mut woken = Vec::new();
            waits.bit_freed(2, true, &mut woken, |_| {});
            assert!(woken.is_empty(), "1 of 2 counted");
            waits.bit_freed(2, true, &mut woken, |_| {});
            assert_eq!(woken, [10, 11], "the batch: up to 2 from queue 0");
            woken.clear();
            waits.bit_freed(2, true, &mut woken, |_| {});
            waits.bit_freed(2, true, &mut woken, |_| {});
            assert_eq!(woken, second, "{rule:?}");
        }
    }

    /// Non-exclusive entries (Kyber's hardware queues), 6.2+, batch 2: a batch wakes every entry of every wait
    /// queue, calling each queue once (3 then 5), and wake_index comes back to where it was, so the next batch
    /// starts from the same queue. Negative control: the same entries as exclusive waiters are woken 2 at a time.
    #[test]
    fn non_exclusive_entries_are_all_woken_by_each_batch() {
        let mut waits = SbqWaits::new(WakeRule::OneQueuePerBatch, 2, false);
        waits.queue_mut(3).extend([1, 2]);
        waits.queue_mut(5).push_back(3);
        let (mut woken, mut called) = (Vec::new(), Vec::new());
        waits.bit_freed(2, true, &mut woken, |ws| called.push(ws));
        waits.bit_freed(2, true, &mut woken, |ws| called.push(ws));
        assert_eq!((woken, called), (vec![1, 2, 3], vec![3, 5]));
        assert_eq!(waits.wake_index, 0, "all 8 visited");

        let mut exclusive = SbqWaits::new(WakeRule::OneQueuePerBatch, 2, true);
        exclusive.queue_mut(3).extend([1, 2]);
        exclusive.queue_mut(5).push_back(3);
        let mut woken = Vec::new();
        exclusive.bit_freed(2, true, &mut woken, |_| {});
        exclusive.bit_freed(2, true, &mut woken, |_| {});
        assert_eq!(
            woken,
            [1, 2],
            "exclusive: the batch's 2, then the loop stops"
        );
    }

    /// Before 6.2 (4.19's exclusive waiters), batch 2: each freed bit counts against the first wait queue with
    /// waiters (queue 4: 2 -> 1 -> 0), which is then woken for up to 2 (7, 8) and its count set back to 2;
    /// wake_index moves past it to 5, and the next bits count against the first queue with waiters from 5 on,
    /// wrapping round to 4 again (9 after two more). Freed bits with nobody waiting are not counted at all.
    #[test]
    fn before_6_2_each_wait_queue_counts_its_own_freed_bits() {
        let mut waits = SbqWaits::new(WakeRule::PerQueueCount { exclusive: true }, 2, true);
        let mut woken = Vec::new();
        waits.bit_freed(2, false, &mut woken, |_| {});
        assert_eq!(waits.wait_cnt[0], 2, "nobody waits: not counted");
        waits.queue_mut(4).extend([7, 8, 9]);
        waits.bit_freed(2, true, &mut woken, |_| {});
        assert!(woken.is_empty());
        waits.bit_freed(2, true, &mut woken, |_| {});
        assert_eq!(woken, [7, 8]);
        assert_eq!((waits.wake_index, waits.wait_cnt[4]), (5, 2));
        waits.bit_freed(2, true, &mut woken, |_| {});
        waits.bit_freed(2, true, &mut woken, |_| {});
        assert_eq!(woken, [7, 8, 9], "wrapped round to queue 4");
    }
}
