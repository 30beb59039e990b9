//! The controller's front end: the submission queues, from which a free front-end core fetches the next command by
//! round-robin arbitration, and the front-end cores that take each command for `command_ns` (`write_command_ns` for
//! a write where set) before handing a read to the flash units (once the read buffer has room for its data, where
//! the device limits read data in flight) or a write to the write buffer.
//!
//! Why a read buffer that holds the front end: the ICPE'24 artifact's 980 PRO reads 16, 32 and 64 KiB at 2.08-2.21
//! GB/s from exactly 1 MiB in flight (QD 64, 32, 16) to QD 256, every command waiting alike (64 KiB at QD 256: P50
//! 8.2 ms, P99 8.8 ms), and with 4 KiB and 64 KiB readers on one drive each process gets the same IOPS (Fig. 12a:
//! 114.8 K for the 4 KiB one beside two 64 KiB ones at 114.4 K each). With every piece queued at its flash unit
//! instead, the model's 64 KiB reads rose to 2.5 GB/s with depth and the 4 KiB reader got 368 K there (one unit
//! to wait for, where a 64 KiB read waits for the slowest of sixteen); holding reads at the front end beyond 1 MiB
//! gives 113.5 K.
//!
//! Why reads wait for that room off the front end (`waiting_read_slots`): with one 64 KiB reader of QD 128 over 8
//! drives, the artifact's slowest drive held 64 of its reads, and an L-app's 4 KiB read there waited behind all of
//! them (Fig. 11b, none: L-app P99 2.1 ms, the reader's 2.4 ms). Held at the front end, the reads beyond the buffer
//! stayed in the reader's submission queue, and round robin let the L-app's read, alone on its own queue, pass them
//! (P99 0.6 ms).
//!
//! Why round robin at the front end: it is NVMe's default arbitration, the one every controller supports and the one
//! Linux leaves selected. It was first chosen for the spread of the 980 PRO's latencies at depth (ICPE'24 Fig. 5,
//! 256 QD-1 readers on 10 cores: P50 264 / P90 569 / P99 1,090 µs), which round robin over the cores' queues gave
//! (283 / 590 / 1,090; doorbell order 309 / 418 / 569) until other host costs changed (then 324 / 457 / 614). The
//! spread is not arbitration's: the artifact's SPDK reader, one thread and so one submission queue, spreads the same
//! (QD 256: 268 / 561 / 1,011 µs). Where the preset sets `read_out_ns`, a read passes the front end without
//! occupying it and the drive's read ceiling is the controller's read-out after the flash (`flash.rs`), which takes
//! the channels' reads in rotation: a read waits there as long as its channel's queue is, and the waits spread
//! (Fig. 5's none: 274 / 651 / 1,008 µs).

use super::{next_round_robin, Command, Device};
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
        if command.write {
            if let Some(rewrites) = &mut self.young_rewrites {
                rewrites.record(command.offset_bytes, command.bytes);
                (self.stats.logical_pages_written, self.stats.young_rewrites) = rewrites.counts();
            }
        }
        self.submission_queues[queue as usize].push_back(command);
        self.submission_queues_with_work.set(queue as usize);
        self.feed_front_end(events);
    }

    /// The host has just made a write of `bytes` at `offset_bytes` that will reach this device after its
    /// submission path: warm the cache for the record `submit` keeps of it (a hint; nothing it counts changes).
    pub fn prefetch_write(&self, offset_bytes: u64, bytes: u32) {
        if let Some(rewrites) = &self.young_rewrites {
            rewrites.prefetch(offset_bytes, bytes);
        }
    }

    /// Give idle, non-stalled front-end cores the next commands by round-robin arbitration.
    pub(super) fn feed_front_end(&mut self, events: &mut EventQueue) {
        let mut core = 0;
        while core < self.front_end.len() {
            if self.front_end[core].command.is_some() {
                core += 1;
                continue;
            }
            let Some(command) = self.arbitrate() else {
                return;
            };
            self.front_end[core].command = Some(command);
            if !command.write && self.config.read_out_ns.is_some() {
                // Its work comes after the flash (the read-out stage), so it passes the front end in no time: handed
                // on here rather than by a `ControllerDone` at the same instant, one event fewer per read (none's
                // 5 -> 4). Only the order among same-instant events changes; on 99 sampled runs the jobs' IOPS and
                // P50/P99/P99.9 moved less than a different seed moves them (p90 of |change| <= 0.9% against
                // 2.4-7.5%). A read that finds no room stays on this core, stalled, as before.
                if !self.hand_on_read(core, command, events) {
                    core += 1;
                }
                continue;
            }
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
            core += 1;
        }
    }

    /// NVMe round-robin arbitration with a burst of one: the oldest command of the first non-empty submission queue
    /// from the arbitration pointer on, which then moves past that queue.
    fn arbitrate(&mut self) -> Option<Command> {
        let queue = self
            .submission_queues_with_work
            .first_from(self.next_queue)?;
        self.next_queue = next_round_robin(queue, self.submission_queues.len());
        let command = self.submission_queues[queue].pop_front();
        if self.submission_queues[queue].is_empty() {
            self.submission_queues_with_work.clear(queue);
        }
        command
    }

    /// A front-end core finished processing its command.
    pub fn controller_done(&mut self, core: u32, events: &mut EventQueue) {
        let command = self.front_end[core as usize]
            .command
            .expect("controller core without a command");
        let freed = if command.write {
            let taken = self.take_write(core as usize, events);
            if taken {
                self.front_end[core as usize] = FrontEndCore::IDLE;
            }
            taken
        } else {
            self.hand_on_read(core as usize, command, events)
        };
        if freed {
            self.feed_front_end(events);
        }
    }

    /// A read leaves front-end core `core` for the flash (or the reads waiting for read-buffer room); false when
    /// it must stay (no room and no waiting slot).
    fn hand_on_read(&mut self, core: usize, command: Command, events: &mut EventQueue) -> bool {
        if self.waiting_reads.is_empty() && self.take_read_buffer(command.bytes) {
            self.start_read(command, events);
        } else if self.waiting_reads.len() < self.config.waiting_read_slots as usize {
            self.waiting_reads.push_back(command);
        } else {
            self.front_end[core].stalled_since_ns = Some(events.now_ns);
            return false;
        }
        self.front_end[core] = FrontEndCore::IDLE;
        true
    }

    /// Room in the read buffer for a read of `bytes`, taken if there is. An empty buffer takes any read, so one
    /// larger than the buffer cannot wait forever.
    fn take_read_buffer(&mut self, bytes: u32) -> bool {
        let Some(capacity) = self.config.read_buffer_bytes else {
            return true;
        };
        if self.read_buffer_used_bytes > 0 && self.read_buffer_used_bytes + bytes as u64 > capacity
        {
            return false;
        }
        self.read_buffer_used_bytes += bytes as u64;
        true
    }

    /// The completion of command `request` was posted to the host: a read's data has left the read buffer, so
    /// a front-end core holding a read that found no room may hand it on, and the front end goes on.
    pub fn completion_posted(&mut self, request: u32, events: &mut EventQueue) {
        let Some(tracking) = self.reads.get_mut(request as usize) else {
            return;
        };
        if tracking.buffer_bytes == 0 {
            return;
        }
        self.read_buffer_used_bytes -= tracking.buffer_bytes as u64;
        tracking.buffer_bytes = 0;
        // The reads waiting off the front end first, oldest first: they came before any a front-end core holds.
        while let Some(&command) = self.waiting_reads.front() {
            if !self.take_read_buffer(command.bytes) {
                break;
            }
            self.waiting_reads.pop_front();
            self.start_read(command, events);
        }
        for core in 0..self.front_end.len() {
            let (Some(since), Some(command)) = (
                self.front_end[core].stalled_since_ns,
                self.front_end[core].command,
            ) else {
                continue;
            };
            if command.write {
                continue;
            }
            if self.waiting_reads.is_empty() && self.take_read_buffer(command.bytes) {
                self.start_read(command, events);
            } else if self.waiting_reads.len() < self.config.waiting_read_slots as usize {
                self.waiting_reads.push_back(command); // a slot freed: it waits there, the core goes on
            } else {
                continue;
            }
            // The front end held it until now (the time a read stall counts; waits off the front end do not).
            self.stats.read_buffer_full_stall_ns += events.now_ns - since;
            self.front_end[core] = FrontEndCore::IDLE;
        }
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

    /// When each of `commands` (submitted in order on one queue) completes on a one-unit, one-channel drive with
    /// 40 us array reads of whole pages, given a read buffer of `read_buffer_bytes`. Each completion is posted to
    /// the device as the block layer does, which frees its read-buffer space.
    fn completions_with_read_buffer(
        read_buffer_bytes: Option<u64>,
        commands: &[Command],
    ) -> Vec<(u64, u32)> {
        completions_with_waiting_reads(read_buffer_bytes, 0, commands)
    }

    /// As `completions_with_read_buffer`, with `waiting_read_slots` reads allowed to wait off the front end.
    fn completions_with_waiting_reads(
        read_buffer_bytes: Option<u64>,
        waiting_read_slots: u32,
        commands: &[Command],
    ) -> Vec<(u64, u32)> {
        let mut config = small_device(Condition::Fresh);
        config.channels = 1;
        config.units_per_channel = 1;
        config.read_ns_by_page_type = vec![40_000];
        config.read_buffer_bytes = read_buffer_bytes;
        config.waiting_read_slots = waiting_read_slots;
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        for &command in commands {
            device.submit(0, command, &mut events);
        }
        let mut completed = Vec::new();
        while let Some((at, event)) = events.pop() {
            match event {
                Event::ControllerDone { core, .. } => device.controller_done(core, &mut events),
                Event::UnitDone {
                    unit, operation, ..
                } => device.unit_done(unit, operation, &mut events),
                Event::DeviceComplete { request, .. } => {
                    completed.push((at, request));
                    device.completion_posted(request, &mut events);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        completed
    }

    #[test]
    fn a_read_that_finds_the_read_buffer_full_waits_for_the_reads_before_it() {
        // A 16 KiB read (request 0), then a 4 KiB one (request 1), with room for 16 KiB of read data.
        let big = Command {
            request: 0,
            write: false,
            offset_bytes: 0,
            bytes: 16384,
        };
        let commands = [big, read(1, 1 << 20)];
        // Request 0: 1 us command + 40 us array + 16384 B at 1 GB/s (channel) + at 4 GB/s (link) + 2 us.
        let first = 1_000 + 40_000 + 16_384 + 4_096 + 2_000;
        let with_buffer = completions_with_read_buffer(Some(16384), &commands);
        assert_eq!(with_buffer[0], (first, 0));
        // Request 1 left the front end at 2 us but holds it until request 0's completion frees the buffer at
        // 63.48 us; then its own 40 us array read, 4096 B at 1 GB/s and at 4 GB/s, 2 us.
        assert_eq!(with_buffer[1], (first + 40_000 + 4_096 + 1_024 + 2_000, 1));
        // Negative control, no read buffer: request 1 reaches the unit at 2 us and is read right after request 0
        // (41-81 us), then crosses the channel, the link and the pipeline, 22.48 us before the time above.
        let unlimited = completions_with_read_buffer(None, &commands);
        assert_eq!(unlimited[0], (first, 0));
        assert_eq!(
            unlimited[1],
            (1_000 + 2 * 40_000 + 4_096 + 1_024 + 2_000, 1)
        );
    }

    #[test]
    fn a_read_larger_than_the_read_buffer_goes_alone() {
        // A 64 KiB read with room for 16 KiB: it is taken when nothing else is in flight (else it would wait
        // forever), and the 4 KiB read behind it waits for its completion.
        let huge = Command {
            request: 0,
            write: false,
            offset_bytes: 0,
            bytes: 65536,
        };
        let completed = completions_with_read_buffer(Some(16384), &[huge, read(1, 1 << 20)]);
        assert_eq!(completed.len(), 2);
        assert_eq!(completed[0].1, 0);
        // Request 1 starts its 40 us array read when request 0 completes.
        assert_eq!(
            completed[1].0,
            completed[0].0 + 40_000 + 4_096 + 1_024 + 2_000
        );
    }

    #[test]
    fn reads_waiting_off_the_front_end_let_the_commands_behind_them_go_on() {
        // Room for 16 KiB of read data, one queue, a 1 us front end: a 16 KiB read (0), a 4 KiB read (1) that finds
        // no room, then a 4 KiB write (2). Read 0 completes at 63.48 us as above.
        let big = Command {
            request: 0,
            write: false,
            offset_bytes: 0,
            bytes: 16384,
        };
        let write = Command {
            request: 2,
            write: true,
            offset_bytes: 2 << 20,
            bytes: 4096,
        };
        let commands = [big, read(1, 1 << 20), write];
        let first = 1_000 + 40_000 + 16_384 + 4_096 + 2_000;
        let at = |completed: &[(u64, u32)], request: u32| {
            completed.iter().find(|c| c.1 == request).unwrap().0
        };
        // No slot: read 1 holds the front end until 63.48 us, and the write is taken only then: 1 us of front
        // end, its 4096 B over the 4 GB/s link (1.024 us) into the buffer, the 5 us acknowledgement.
        let held = completions_with_waiting_reads(Some(16384), 0, &commands);
        assert_eq!(at(&held, 2), first + 1_000 + 1_024 + 5_000);
        // One slot: read 1 waits there from 2 us, the front end takes the write at 2 us, done at 3 us, in the
        // buffer at 4.024 us, acknowledged at 9.024 us, long before read 0. Read 1 still goes next once read 0's
        // data has left (the same time as when it held the front end).
        let waiting = completions_with_waiting_reads(Some(16384), 1, &commands);
        assert_eq!(at(&waiting, 2), 3_000 + 1_024 + 5_000);
        assert_eq!(at(&waiting, 0), first);
        assert_eq!(at(&waiting, 1), at(&held, 1));
    }

    #[test]
    fn a_read_arriving_while_others_wait_for_room_queues_behind_them() {
        // Room for 20 KiB, two slots: a 16 KiB read (0) in flight, a 16 KiB read (1) waiting for room, then a 4 KiB
        // read (2). 4 KiB are free, so read 2 would fit, but it came after read 1: arrival order, whatever the size.
        // Both start when read 0's completion frees the buffer at 63.48 us; on the one unit read 1's 40 us array
        // read goes first, then read 2's: read 2 completes 80 us after read 0 and more.
        let sized = |request: u32, bytes: u32| Command {
            request,
            write: false,
            offset_bytes: request as u64 * (1 << 20),
            bytes,
        };
        let completed = completions_with_waiting_reads(
            Some(20480),
            2,
            &[sized(0, 16384), sized(1, 16384), sized(2, 4096)],
        );
        let order: Vec<u32> = completed.iter().map(|c| c.1).collect();
        assert_eq!(order, vec![0, 1, 2]);
        assert!(completed[2].0 >= completed[0].0 + 80_000, "{completed:?}");
        // Negative control, no read waiting before it: the 4 KiB read fits beside read 0 and is read on the unit
        // right after it (41-81 us), done within 40 us of read 0's completion.
        let alone =
            completions_with_waiting_reads(Some(20480), 2, &[sized(0, 16384), sized(2, 4096)]);
        assert!(alone[1].0 < alone[0].0 + 40_000, "{alone:?}");
    }
}
