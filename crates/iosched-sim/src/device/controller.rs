//! The controller's front end: submission queues fetched in doorbell order into one command queue, and the
//! front-end cores that take each command for `command_ns` (`write_command_ns` for a write where set) before
//! handing a read to the flash units or a write to the write buffer.

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
    /// The host rang the doorbell of submission queue `queue`; the controller fetches the command at once, so
    /// which queue it came from does not change its place.
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
        self.fetched_commands.push_back(command);
        self.feed_front_end(events);
    }

    /// Give idle, non-stalled front-end cores the next fetched commands, oldest first.
    pub(super) fn feed_front_end(&mut self, events: &mut EventQueue) {
        if self.fetched_commands.is_empty() {
            return;
        }
        for core in 0..self.front_end.len() {
            if self.front_end[core].command.is_some() {
                continue;
            }
            let Some(command) = self.fetched_commands.pop_front() else {
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

    #[test]
    fn the_front_end_takes_commands_in_doorbell_order_whatever_their_queue() {
        let mut device = Device::new(small_device(Condition::Fresh), 0, 2, 1);
        let mut events = EventQueue::new();
        // Three commands on queue 0, then one on queue 1: round-robin fetching would take request 3 second.
        for request in 0..3 {
            device.submit(0, read(request, request as u64 * 16384), &mut events);
        }
        device.submit(1, read(3, 3 * 16384), &mut events);
        let mut started = Vec::new();
        while device.stats.read_ios < 4 {
            if let Some((_, Event::ControllerDone { core, .. })) = events.pop() {
                started.push(device.front_end[core as usize].command.unwrap().request);
                device.controller_done(core, &mut events);
            }
        }
        assert_eq!(started, vec![0, 1, 2, 3]);
    }
}
