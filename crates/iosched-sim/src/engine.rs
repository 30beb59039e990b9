//! Discrete-event engine: integer nanoseconds, ties broken by insertion sequence so runs are deterministic.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::occupancy::Occupancy;

/// Everything that can happen. Payloads are indices into the simulation's tables; at most 12 bytes, so an event
/// takes 16 (`Entry`). Cores and hardware queues fit a `u16` (`host.cores` is at most 65,535).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    /// A process may issue I/O (start, after thinktime, or when its rate limit allows).
    Issue { process: u32 },
    /// A process finished submitting a batch and goes on with its submission loop.
    SubmitNext { process: u32 },
    /// A submitted bio reaches the block layer (the submitting CPU finished the submission path).
    BlockSubmit { io: u32 },
    /// The scheduler's lock was taken and its insert work is done: the bio enters the elevator.
    BlockInsert { io: u32 },
    /// The dispatch call that took request `io` (headed by that bio) from the elevator released the scheduler's
    /// lock: the request goes to the driver (with scheduler costs; without them it goes at once).
    Dispatched { device: u32, io: u32 },
    /// A dispatch call of a queue run (a submitter's, or a kblockd worker's: `process` = KWORKER) holds the
    /// scheduler's lock: the elevator is asked now, so another CPU's call may have taken the request its run saw
    /// (`Simulation::dispatch_call`).
    DispatchCall {
        device: u32,
        hctx: u16,
        process: u32,
        core: u16,
    },
    /// A thread asleep waiting for a request for bio `io` was woken and now runs: it asks again (blk-mq).
    TagRetry { io: u32 },
    /// A controller core finished fetching and processing a command.
    ControllerDone { device: u32, core: u32 },
    /// The controller's read-out stage finished a read (`DeviceConfig::read_out_ns`).
    ReadOutDone { device: u32 },
    /// A flash unit finished its current operation.
    /// `operation` numbers the unit's operations, so the end of one that was suspended since is recognised.
    UnitDone {
        device: u32,
        unit: u32,
        operation: u32,
    },
    /// The device posted the completion of a request.
    DeviceComplete { device: u32, request: u32 },
    /// A scheduler timer fired.
    SchedulerTimer { device: u32 },
    /// blk-mq's delayed re-run of a hardware queue is due (`Simulation::delayed_run`).
    DelayedRun { device: u32, hctx: u32 },
    /// Take a time-series sample.
    Sample,
    /// A buffered read() or write() finished its CPU work (buffered jobs).
    CallDone { process: u32 },
    /// The writeback flusher may submit its next request.
    FlusherStep,
    /// A process in fsync may submit its next writeback request (`Simulation::fsync_step`).
    FsyncStep { process: u32 },
    /// A core reaches the processes woken on it that wait in its CFS run queue: the one with the least virtual
    /// runtime runs (`Simulation::pick_next`).
    PickNext { core: u32 },
    /// The cores' scheduler tick: each core whose load balancing is due balances (`Simulation::balance_tick`).
    BalanceTick,
}

/// A pending event, ordered by (time, sequence), reversed so a max-heap pops the earliest. 32 bytes: the time and
/// the sequence as two `u64`s rather than one packed `u128` key (whose 16-byte alignment padded an entry to 48), and
/// `Event` within 16 bytes (`DispatchCall`'s queue and core are `u16`). Pushes into the calendar's buckets are where
/// the engine waits on memory (the 8-SSD bench: `CalendarQueue::push` 17% of its cycles under `perf`), so a third
/// less memory per pending event is time saved on every event.
#[derive(Clone, Copy)]
struct Entry {
    at_ns: u64,
    sequence: u64,
    event: Event,
}

impl Entry {
    #[inline]
    fn key(&self) -> (u64, u64) {
        (self.at_ns, self.sequence)
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// Bucket width (2^8 ns) and ring size (2^14 buckets, about 4 ms) of the calendar queue. Narrow buckets keep the
/// sort of each new current bucket short (the 8-SSD bench has ~18 events per microsecond); the occupancy bitmap lets
/// the queue jump over empty ones, so a sparse run (one reader at QD 1) does not walk them one by one.
const BUCKET_SHIFT: u32 = 8;
const RING_BUCKETS: usize = 1 << 14;

/// No entry: the end of a bucket's list, or of the free list.
const NIL: u32 = u32::MAX;

/// A calendar queue: events within the ring's horizon go to 256-ns buckets (O(1) push); the current bucket is kept
/// sorted by key and popped from its end; events beyond the horizon wait in a binary heap and join their bucket
/// when it becomes current. Pops come out in exactly (time, sequence) order, as from one heap, but most events never
/// pay a heap's log(n): with thousands pending this doubles the simulator's speed (measured with `iosched bench`).
///
/// The ring's buckets are linked lists through one slab of entries, not a `Vec` each: a push then writes into the
/// slot its entry's predecessor freed last (in cache) and one word of a 64 KiB array of list heads, where a `Vec` per
/// bucket touched that bucket's header and its own buffer somewhere in megabytes of bucket capacity, two cache misses
/// per push (`perf` on the 8-SSD bench: `push` 17% of the cycles, nearly all on those two loads). A bucket's list
/// holds its entries newest first; the sort on becoming current puts them in key order either way (keys are unique).
struct CalendarQueue {
    /// Per ring slot, the slab index of its list's first entry (NIL: empty).
    heads: Vec<u32>,
    /// One bit per ring slot: set while its list is not empty.
    occupied: Occupancy,
    /// Entries in the ring, and free slots (their `next` links the free list).
    slab: Vec<Entry>,
    next: Vec<u32>,
    free: u32,
    /// Entries of the current bucket, sorted by descending key (the next event is last).
    current: Vec<Entry>,
    /// Start time of the current bucket (a multiple of the bucket width).
    current_start_ns: u64,
    in_ring: usize,
    overflow: BinaryHeap<Entry>,
}

impl CalendarQueue {
    /// How many buckets on from ring slot `from` the next occupied one is (1 to RING_BUCKETS - 1; some slot other
    /// than `from` is occupied).
    #[inline]
    fn buckets_to_next_occupied(&self, from: usize) -> u64 {
        let start = (from + 1) & (RING_BUCKETS - 1);
        let slot = self
            .occupied
            .first_from(start)
            .expect("an occupied ring slot");
        ((slot + RING_BUCKETS - from) & (RING_BUCKETS - 1)) as u64
    }

    fn new() -> Self {
        Self {
            heads: vec![NIL; RING_BUCKETS],
            occupied: Occupancy::new(RING_BUCKETS),
            slab: Vec::new(),
            next: Vec::new(),
            free: NIL,
            current: Vec::with_capacity(64),
            current_start_ns: 0,
            in_ring: 0,
            overflow: BinaryHeap::new(),
        }
    }

    fn len(&self) -> usize {
        self.current.len() + self.in_ring + self.overflow.len()
    }

    #[inline]
    fn push(&mut self, entry: Entry) {
        let at = entry.at_ns;
        let width = 1u64 << BUCKET_SHIFT;
        if at < self.current_start_ns + width {
            // Keys only grow within a run, so a new entry for the current bucket usually goes near the front.
            let position = self.current.partition_point(|e| e.key() > entry.key());
            self.current.insert(position, entry);
        } else if at < self.current_start_ns + RING_BUCKETS as u64 * width {
            let slot = ((at >> BUCKET_SHIFT) as usize) & (RING_BUCKETS - 1);
            let index = if self.free != NIL {
                let index = self.free;
                self.free = self.next[index as usize];
                self.slab[index as usize] = entry;
                index
            } else {
                self.slab.push(entry);
                self.next.push(NIL);
                (self.slab.len() - 1) as u32
            };
            self.next[index as usize] = self.heads[slot];
            self.heads[slot] = index;
            self.occupied.set(slot);
            self.in_ring += 1;
        } else {
            self.overflow.push(entry);
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<Entry> {
        loop {
            if let Some(entry) = self.current.pop() {
                return Some(entry);
            }
            // The next bucket with events: the ring's next occupied one, or the far events' first if earlier (the
            // ring's buckets before that one are empty, so it is its own).
            let far_start_ns = self
                .overflow
                .peek()
                .map(|e| (e.at_ns >> BUCKET_SHIFT) << BUCKET_SHIFT);
            let ring_start_ns = (self.in_ring > 0).then(|| {
                let from = ((self.current_start_ns >> BUCKET_SHIFT) as usize) & (RING_BUCKETS - 1);
                self.current_start_ns + (self.buckets_to_next_occupied(from) << BUCKET_SHIFT)
            });
            self.current_start_ns = match (ring_start_ns, far_start_ns) {
                (Some(ring), Some(far)) => ring.min(far),
                (Some(ring), None) => ring,
                (None, far) => far?,
            };
            let slot = ((self.current_start_ns >> BUCKET_SHIFT) as usize) & (RING_BUCKETS - 1);
            self.occupied.clear(slot);
            let mut index = std::mem::replace(&mut self.heads[slot], NIL);
            while index != NIL {
                self.current.push(self.slab[index as usize]);
                let following = self.next[index as usize];
                self.next[index as usize] = self.free;
                self.free = index;
                self.in_ring -= 1;
                index = following;
            }
            let end = self.current_start_ns + (1 << BUCKET_SHIFT);
            while self.overflow.peek().is_some_and(|e| e.at_ns < end) {
                let entry = self.overflow.pop().expect("peeked");
                self.current.push(entry);
            }
            self.current
                .sort_unstable_by_key(|e| std::cmp::Reverse(e.key()));
        }
    }
}

pub struct EventQueue {
    queue: CalendarQueue,
    sequence: u64,
    pub now_ns: u64,
    pub processed: u64,
}

impl EventQueue {
    pub fn new() -> Self {
        Self {
            queue: CalendarQueue::new(),
            sequence: 0,
            now_ns: 0,
            processed: 0,
        }
    }

    /// Schedule `event` at `at_ns` (never in the past).
    #[inline]
    pub fn schedule(&mut self, at_ns: u64, event: Event) {
        debug_assert!(
            at_ns >= self.now_ns,
            "event {event:?} scheduled in the past"
        );
        self.sequence += 1;
        self.queue.push(Entry {
            at_ns: at_ns.max(self.now_ns),
            sequence: self.sequence,
            event,
        });
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let Entry { at_ns, event, .. } = self.queue.pop()?;
        self.now_ns = at_ns;
        self.processed += 1;
        Some((at_ns, event))
    }

    pub fn is_empty(&self) -> bool {
        self.queue.len() == 0
    }
}

impl Default for EventQueue {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_and_breaks_ties_by_insertion() {
        let mut queue = EventQueue::new();
        queue.schedule(20, Event::Sample);
        queue.schedule(10, Event::Issue { process: 2 });
        queue.schedule(10, Event::Issue { process: 1 });
        assert_eq!(queue.pop(), Some((10, Event::Issue { process: 2 })));
        assert_eq!(queue.pop(), Some((10, Event::Issue { process: 1 })));
        assert_eq!(queue.pop(), Some((20, Event::Sample)));
        assert_eq!(queue.now_ns, 20);
        assert!(queue.pop().is_none());
    }

    /// Interleaved pushes and pops, near and far (beyond the ring), against a plain binary heap of the same keys.
    #[test]
    fn pops_exactly_like_a_binary_heap_under_interleaved_pushes() {
        let mut queue = EventQueue::new();
        let mut reference: BinaryHeap<Entry> = BinaryHeap::new();
        let mut sequence = 0u64;
        let mut x = 99u64;
        let mut rand = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let mut popped = 0;
        for step in 0..200_000u32 {
            if rand() % 3 != 0 || reference.is_empty() {
                let delay = match rand() % 10 {
                    0 => rand() % 50_000_000, // far beyond the ring
                    1 => 0,                   // now: into the current bucket
                    _ => rand() % 300_000,
                };
                let at = queue.now_ns + delay;
                queue.schedule(at, Event::Issue { process: step });
                sequence += 1;
                reference.push(Entry {
                    at_ns: at,
                    sequence,
                    event: Event::Issue { process: step },
                });
            } else {
                let expected = reference.pop().unwrap();
                let got = queue.pop().unwrap();
                assert_eq!(
                    (got.0, got.1),
                    (expected.at_ns, expected.event),
                    "pop {popped}"
                );
                popped += 1;
            }
        }
        while let Some(expected) = reference.pop() {
            assert_eq!(queue.pop().map(|g| g.1), Some(expected.event));
        }
        assert!(queue.pop().is_none() && queue.is_empty());
    }

    /// The memory per pending event the note on `Entry` counts on; a new `Event` variant with more than 12 bytes of
    /// payload breaks it.
    #[test]
    fn a_pending_event_takes_32_bytes() {
        assert_eq!(std::mem::size_of::<Event>(), 16);
        assert_eq!(std::mem::size_of::<Entry>(), 32);
    }

    #[test]
    fn many_events_come_out_sorted_by_time_then_insertion() {
        let mut queue = EventQueue::new();
        let mut expected = Vec::new();
        let mut x = 12345u64;
        for i in 0..5000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (x >> 40) % 1000;
            queue.schedule(at, Event::Issue { process: i });
            expected.push((at, i));
        }
        expected.sort(); // stable on (time, insertion index)
        let popped: Vec<(u64, u32)> = std::iter::from_fn(|| queue.pop())
            .map(|(at, e)| match e {
                Event::Issue { process } => (at, process),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(popped, expected);
    }
}
