//! Discrete-event engine: integer nanoseconds, ties broken by insertion sequence so runs are deterministic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Everything that can happen. Payloads are indices into the simulation's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    /// A process may issue I/O (start, after thinktime, or when its rate limit allows).
    Issue { process: u32 },
    /// A submitted bio reaches the block layer (the submitting CPU finished the submission path).
    BlockSubmit { io: u32 },
    /// The scheduler's lock was taken and its insert work is done: the bio enters the elevator.
    BlockInsert { io: u32 },
    /// A controller core finished fetching and processing a command.
    ControllerDone { device: u32, core: u32 },
    /// A flash unit finished its current operation.
    UnitDone { device: u32, unit: u32 },
    /// The device posted the completion of a request.
    DeviceComplete { device: u32, request: u32 },
    /// A scheduler timer fired.
    SchedulerTimer { device: u32 },
    /// Take a time-series sample.
    Sample,
}

pub struct EventQueue {
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    sequence: u64,
    pub now_ns: u64,
    pub processed: u64,
}

impl EventQueue {
    pub fn new() -> Self {
        Self { heap: BinaryHeap::with_capacity(4096), sequence: 0, now_ns: 0, processed: 0 }
    }

    /// Schedule `event` at `at_ns` (never in the past).
    #[inline]
    pub fn schedule(&mut self, at_ns: u64, event: Event) {
        debug_assert!(at_ns >= self.now_ns, "event {event:?} scheduled in the past");
        self.sequence += 1;
        self.heap.push(Reverse((at_ns.max(self.now_ns), self.sequence, event)));
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        let Reverse((at_ns, _, event)) = self.heap.pop()?;
        self.now_ns = at_ns;
        self.processed += 1;
        Some((at_ns, event))
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
}
