//! The write buffer: a write completes once its data is in it; it drains to flash in program units on idle units,
//! and when it is full the front-end core holding a write stalls, with every command behind it.

use super::flash::UnitOp;
use super::{book, jitter, transfer_ns, Command, Device, FrontEndCore};
use crate::engine::{Event, EventQueue};

impl Device {
    /// Put a write into the buffer if it fits; then it completes after its data crossed the link.
    ///
    /// Known bug: with a buffer smaller than a program unit plus the largest write, a write can find no room while
    /// less than a program unit is buffered, so no program starts and it waits forever (the run then fails its
    /// conservation check). `validate` only asks for one program unit.
    pub(super) fn accept_write(&mut self, command: Command, events: &mut EventQueue) -> bool {
        let bytes = command.bytes as u64;
        if self.buffer_used_bytes + bytes > self.config.write_buffer_bytes {
            return false;
        }
        self.stats.write_ios += 1;
        self.buffer_used_bytes += bytes;
        self.buffer_pending_bytes += bytes;
        let transferred = book(
            &mut self.link_to_device_free_at_ns,
            events.now_ns,
            transfer_ns(bytes, self.config.link_bytes_per_s),
        );
        let ack = self.config.write_ack_ns + jitter(&mut self.rng, self.config.write_ack_jitter_ns);
        events.schedule(
            transferred + ack,
            Event::DeviceComplete {
                device: self.index,
                request: command.request,
            },
        );
        self.drain_to_idle_units(events);
        true
    }

    pub(super) fn drain_to_idle_units(&mut self, events: &mut EventQueue) {
        // An idle unit has no read, no suspended operation and no reclaiming to do (it starts that itself when
        // its own operation ends), so buffered data is the only work that can wake it.
        while self.buffer_pending_bytes >= self.config.program_unit_bytes as u64 {
            let Some(unit) = self.idle_units.pop() else {
                return;
            };
            self.units[unit as usize].in_idle_list = false;
            if !matches!(self.units[unit as usize].op, UnitOp::Idle) {
                continue; // stale entry: the unit was started by a read since
            }
            self.start_next_op(unit, events);
            if matches!(self.units[unit as usize].op, UnitOp::Idle) {
                return; // nothing it could do (a drive without spare area): others cannot either
            }
        }
    }

    /// Host data may be programmed on unit `u`: buffered data waits and there is free space. A reclaiming unit
    /// paces host programs behind its copies, (1 - u) / u host programs per copy for victims of valid fraction u:
    /// a victim frees (1 - u) of a block for u of it copied, so in the steady state reclaiming keeps up with host
    /// writes without running out of free space (which would stop every unit's host programs at once).
    pub(super) fn host_program_allowed(&self, u: usize) -> bool {
        if self.buffer_pending_bytes < self.config.program_unit_bytes as u64 {
            return false;
        }
        let unit = &self.units[u];
        if unit.gc_active {
            // Space the victim will free once erased: the unit may run ahead into it.
            unit.host_program_credit >= 1.0
        } else {
            unit.free_program_units > 0
        }
    }

    /// Buffer space was freed: stalled writes go in, and the front-end resumes.
    pub(super) fn unstall_front_end(&mut self, events: &mut EventQueue) {
        for core in 0..self.front_end.len() {
            let Some(since) = self.front_end[core].stalled_since_ns else {
                continue;
            };
            let command = self.front_end[core]
                .command
                .expect("stalled core holds its write");
            if !self.accept_write(command, events) {
                continue;
            }
            self.stats.buffer_full_stall_ns += events.now_ns - since;
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
    fn writes_complete_from_the_buffer_until_it_fills_then_at_the_drain_rate() {
        let mut device = Device::new(small_device(Condition::Fresh), 0, 1, 1);
        let mut events = EventQueue::new();
        // 1 MiB buffer = 256 writes of 4 KiB; submit 1024.
        submit_writes(&mut device, &mut events, 1024);
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done.len(), 1024);
        let mut times: Vec<u64> = done.iter().map(|d| d.0).collect();
        times.sort();
        assert!(
            times[200] < 300_000,
            "buffered writes are fast: {}",
            times[200]
        );
        // The rest waits for programs: 4 units x 64 KiB per 0.5 ms = 512 KiB/ms.
        assert!(times[1023] > 1_000_000, "{}", times[1023]);
        assert!(device.stats.buffer_full_stall_ns > 0);
        assert!(device.stats.host_program_units >= 48);
    }

    #[test]
    fn a_read_behind_a_stalled_write_waits_for_buffer_space() {
        let mut device = Device::new(small_device(Condition::Fresh), 0, 2, 1);
        let mut events = EventQueue::new();
        submit_writes(&mut device, &mut events, 512);
        // Let the buffer fill and the front-end stall on a write, then a read arrives on another queue.
        run_until(&mut device, &mut events, |device| {
            device.stats.write_ios >= 256
        });
        let submitted_at = events.now_ns;
        device.submit(
            1,
            Command {
                request: 10_000,
                write: false,
                offset_bytes: 0,
                bytes: 4096,
            },
            &mut events,
        );
        let done = run_until_idle(&mut device, &mut events);
        let read_at = done.iter().find(|d| d.1 == 10_000).unwrap().0;
        // A free drive answers a read in ~68 us; behind the stalled write it waits for a program (0.5 ms).
        assert!(
            read_at - submitted_at > 400_000,
            "head-of-line blocked behind writes: {}",
            read_at - submitted_at
        );
    }
}
