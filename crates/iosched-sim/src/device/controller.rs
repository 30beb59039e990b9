//! The controller's front end: the submission queues, from which a free front-end core fetches the next command by
//! round-robin arbitration, and the front-end cores that take each command for `command_ns` (`write_command_ns` for
//! a write where set) before handing a read to the flash units or a write to the write buffer.
//!
//! Why round robin at the front end, not doorbell order: with 256 QD-1 readers on 10 cores the 980 PRO is
//! front-end bound (774 K IOPS) and the artifact's read latency spreads P50 264 / P90 569 / P99 1,090 µs (ICPE'24
//! Fig. 5, none); taking commands in doorbell order the model gave 309 / 418 / 569 µs, by round robin over the
//! cores' queues 283 / 590 / 1,090 µs, with nothing else changed: how long a command waits depends on how many
//! share its core's queue. Round robin is NVMe's default arbitration, the one every controller supports and the one
//! Linux leaves selected.

use super::{Command, Device};
use crate::engine::{Event, EventQueue};

/// A front-end core: the command it works on, and since when it holds a write the buffer has no room for. A write
/// waiting for buffer space off the front end (`waiting_write_slots`) keeps the same state.
pub(super) struct FrontEndCore {
    pub(super) command: Option<Command>,
    /// Holding a write that found the buffer full.
    pub(super) stalled_since_ns: Option<u64>,
    /// Bytes of the held write already in the buffer, and when the last of them crossed the link.
    pub(super) buffered_bytes: u32,
    pub(super) transferred_at_ns: u64,
}

impl FrontEndCore {
    pub(super) const IDLE: Self = Self {
        command: None,
        stalled_since_ns: None,
        buffered_bytes: 0,
        transferred_at_ns: 0,
    };
}

impl Device {
    /// The host rang the doorbell of submission queue `queue`: the command waits there for the front end.
    pub fn submit(&mut self, queue: u32, command: Command, events: &mut EventQueue) {
        debug_assert!(queue < self.hw_queues);
        self.outstanding_commands += 1;
        self.stats.max_outstanding_commands = self
            .stats
            .max_outstanding_commands
            .max(self.outstanding_commands as u64);
        if let Some(null_blk) = self.config.null_blk.clone() {
            return self.null_blk_submit(&null_blk, command, events); // no front end: device/null_blk.rs
        }
        self.submission_queues[queue as usize].push_back(command);
        self.feed_front_end(events);
    }

    /// Give idle, non-stalled front-end cores the next commands by round-robin arbitration.
    pub(super) fn feed_front_end(&mut self, events: &mut EventQueue) {
        for core in 0..self.front_end.len() {
            if self.front_end[core].command.is_some() {
                continue;
            }
            let Some(command) = self.arbitrate() else {
                return;
            };
            self.front_end[core].command = Some(command);
            let busy_ns = match (command.write, self.config.write_command_ns) {
                (true, Some(write_ns)) => write_ns,
                _ => self.config.command_ns,
            };
            events.schedule(
                events.now_ns + busy_ns,
                Event::ControllerDone {
                    device: self.index,
                    core: core as u32,
                },
            );
        }
    }

    /// NVMe round-robin arbitration with a burst of one: the oldest command of the first non-empty submission queue
    /// from the arbitration pointer on, which then moves past that queue.
    fn arbitrate(&mut self) -> Option<Command> {
        let queues = self.submission_queues.len();
        let queue = (0..queues)
            .map(|i| (self.next_queue + i) % queues)
            .find(|&q| !self.submission_queues[q].is_empty())?;
        self.next_queue = (queue + 1) % queues;
        self.submission_queues[queue].pop_front()
    }

    /// A front-end core finished processing its command.
    pub fn controller_done(&mut self, core: u32, events: &mut EventQueue) {
        let command = self.front_end[core as usize]
            .command
            .expect("controller core without a command");
        if command.write {
            if !self.take_write(core as usize, events) {
                return;
            }
        } else {
            self.start_read(command, events);
        }
        self.front_end[core as usize] = FrontEndCore::IDLE;
        self.feed_front_end(events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Condition;
    use crate::device::test_support::*;
    use crate::testkit::small_device;

    #[test]
    fn write_commands_take_their_own_front_end_time_where_set() {
        // 10 writes into an empty buffer: the front end is the only queue, so the last write's data reaches the
        // buffer after 10 command times, then its acknowledgement follows.
        let last_completion = |write_command_ns: Option<u64>| {
            let mut config = small_device(Condition::Fresh);
            config.command_ns = 2_000; // longer than a 4 KiB link transfer, so the link never queues
            config.write_command_ns = write_command_ns;
            let mut device = Device::new(config, 0, 1, 1);
            let mut events = EventQueue::new();
            submit_writes(&mut device, &mut events, 10);
            run_until_idle(&mut device, &mut events)
                .iter()
                .map(|d| d.0)
                .max()
                .unwrap()
        };
        // 4096 B at 4 GB/s over the link, then the 5 us acknowledgement.
        assert_eq!(last_completion(None), 10 * 2_000 + 1_024 + 5_000);
        assert_eq!(last_completion(Some(7_000)), 10 * 7_000 + 1_024 + 5_000);
    }

    /// The order the front end starts commands in, and when each read completes.
    fn started_and_completed(
        device: &mut Device,
        events: &mut EventQueue,
    ) -> (Vec<u32>, Vec<(u64, u32)>) {
        let mut started = Vec::new();
        let mut completed = Vec::new();
        while let Some((at, event)) = events.pop() {
            match event {
                Event::ControllerDone { core, .. } => {
                    started.push(device.front_end[core as usize].command.unwrap().request);
                    device.controller_done(core, events);
                }
                Event::UnitDone {
                    unit, operation, ..
                } => device.unit_done(unit, operation, events),
                Event::DeviceComplete { request, .. } => completed.push((at, request)),
                other => panic!("unexpected {other:?}"),
            }
        }
        (started, completed)
    }

    #[test]
    fn the_front_end_takes_the_submission_queues_in_turn() {
        // Three reads on queue 0, then one on queue 1, one front-end core. Request 0 starts at once (the core is
        // idle); when it is done the arbitration pointer has passed queue 0, so queue 1's request 3 goes next,
        // then queue 0's 1 and 2. In doorbell order it would have gone last.
        let mut device = Device::new(small_device(Condition::Fresh), 0, 2, 1);
        let mut events = EventQueue::new();
        for request in 0..3 {
            device.submit(0, read(request, request as u64 * 16384), &mut events);
        }
        device.submit(1, read(3, 3 * 16384), &mut events);
        let (started, _) = started_and_completed(&mut device, &mut events);
        assert_eq!(started, vec![0, 3, 1, 2]);
    }

    #[test]
    fn a_short_queue_waits_one_turn_a_long_one_its_length() {
        // Ten reads on queue 0 and one on queue 1, all at t = 0, front end 1 us per command: queue 1's read leaves
        // the front end after 2 us (one turn behind request 0), the last of queue 0 after 11 us. Each then costs
        // the same flash read, transfer and completion, so queue 1's read completes 9 us before queue 0's last.
        let mut device = Device::new(small_device(Condition::Fresh), 0, 2, 1);
        let mut events = EventQueue::new();
        for request in 0..10 {
            device.submit(0, read(request, request as u64 * (1 << 20)), &mut events);
        }
        device.submit(1, read(10, 10 * (1 << 20)), &mut events);
        let (started, completed) = started_and_completed(&mut device, &mut events);
        assert_eq!(
            started[1], 10,
            "queue 1's read is the second command the front end takes"
        );
        let at = |request: u32| completed.iter().find(|c| c.1 == request).unwrap().0;
        assert!(
            at(10) < at(9),
            "queue 1's read completes before queue 0's last"
        );
        // Negative control: one submission queue (SATA, or all on one core) is served in doorbell order.
        let mut device = Device::new(small_device(Condition::Fresh), 0, 1, 1);
        let mut events = EventQueue::new();
        for request in 0..11 {
            device.submit(0, read(request, request as u64 * (1 << 20)), &mut events);
        }
        let (started, _) = started_and_completed(&mut device, &mut events);
        assert_eq!(started, (0..11).collect::<Vec<_>>());
    }
}
