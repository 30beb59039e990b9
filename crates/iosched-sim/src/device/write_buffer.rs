//! The write buffer: a write completes once its data is in it; it drains to flash in program units on idle units,
//! and when it is full the front-end core holding a write stalls, with every command behind it.

use super::flash::UnitOp;
use super::{book, jitter, transfer_ns, Device, FrontEndCore};
use crate::engine::{Event, EventQueue};

impl Device {
    /// Move as much of the write in `slot` (a front-end core's, or one waiting off the front end) into the buffer
    /// as fits; once all of it is in, it completes after its last byte crossed the link (and the acknowledgement).
    /// Returns whether all of it is in.
    ///
    /// The data goes in piece by piece, as a real controller fetches a write's data (PRP/SGL pages) into whatever
    /// buffer space is free rather than waiting for room for the whole command. This is also what keeps the drive
    /// from deadlocking: with room for a whole write needed, a buffer smaller than one program unit plus the largest
    /// write could hold a write that never fits while less than a program unit is buffered, so no program would
    /// start to free space. Taking pieces, a full buffer always holds at least one program unit (`validate` asks
    /// for `write_buffer_bytes >= program_unit_bytes`), so a program can always start.
    pub(super) fn accept_write(
        &mut self,
        slot: &mut FrontEndCore,
        events: &mut EventQueue,
    ) -> bool {
        let command = slot.command.expect("a write to accept");
        let left = command.bytes as u64 - slot.buffered_bytes as u64;
        let room = self.config.write_buffer_bytes - self.buffer_used_bytes;
        let piece = left.min(room);
        if piece > 0 {
            self.buffer_used_bytes += piece;
            self.buffer_pending_bytes += piece;
            slot.buffered_bytes += piece as u32;
            slot.transferred_at_ns = book(
                &mut self.link_to_device_free_at_ns,
                events.now_ns,
                transfer_ns(piece, self.config.link_bytes_per_s),
            );
            if let Some(fill_bytes_per_s) = self.config.buffer_fill_bytes_per_s {
                // The controller acknowledges from its staging memory, which holds one program unit per flash
                // unit (a named assumption): a write waits for the region's program rate only once more than that
                // is queued for it, so the rate caps throughput without lengthening a lone write.
                let in_region = book(
                    &mut self.buffer_fill_free_at_ns,
                    slot.transferred_at_ns,
                    transfer_ns(piece, fill_bytes_per_s),
                );
                let staging_bytes = self.config.program_unit_bytes as u64 * self.units.len() as u64;
                let staged = in_region.saturating_sub(transfer_ns(staging_bytes, fill_bytes_per_s));
                slot.transferred_at_ns = slot.transferred_at_ns.max(staged);
            }
        }
        if piece < left {
            self.drain_to_idle_units(events);
            return false;
        }
        self.stats.write_ios += 1;
        let ack = self.config.write_ack_ns + jitter(&mut self.rng, self.config.write_ack_jitter_ns);
        events.schedule(
            slot.transferred_at_ns + ack,
            Event::DeviceComplete {
                device: self.index,
                request: command.request,
            },
        );
        self.drain_to_idle_units(events);
        true
    }

    /// Front-end core `core` finished processing a write: it goes into the buffer or off the front end to wait
    /// (`place_write`), else the core stalls holding it. Returns whether the core is free for the next command.
    pub(super) fn take_write(&mut self, core: usize, events: &mut EventQueue) -> bool {
        let slot = std::mem::replace(&mut self.front_end[core], FrontEndCore::IDLE);
        let Some(mut slot) = self.place_write(slot, events) else {
            return true;
        };
        slot.stalled_since_ns = Some(events.now_ns);
        self.front_end[core] = slot;
        false
    }

    /// A write leaving a front-end core goes into the buffer (unless older writes wait: their data goes in first),
    /// or, with no room, off the front end to wait if a waiting slot is free. Returns it if neither: the core that
    /// held it must keep it.
    fn place_write(
        &mut self,
        mut slot: FrontEndCore,
        events: &mut EventQueue,
    ) -> Option<FrontEndCore> {
        if self.waiting_writes.is_empty() && self.accept_write(&mut slot, events) {
            return None;
        }
        if self.waiting_writes.len() < self.config.waiting_write_slots as usize {
            self.waiting_writes.push_back(slot);
            return None;
        }
        Some(slot)
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
        if self.config.gc_step_copies.is_some() {
            // Stop the world: no host program while a step copies; reclaiming units draw on the steps' credit,
            // and one whose victim has nothing left to copy erases it first.
            return self.gc_step_units_copying == 0
                && if unit.gc_active {
                    self.gc_step_credit >= 1.0 && unit.gc_copies_left > 0
                } else {
                    unit.free_program_units > 0
                };
        }
        if unit.gc_active {
            // Space the victim will free once erased: the unit may run ahead into it.
            unit.host_program_credit >= 1.0
        } else {
            unit.free_program_units > 0
        }
    }

    /// Buffer space was freed: waiting writes go in, oldest first, then those stalling front-end cores (which
    /// move off their core to wait where a slot has freed); the front-end resumes.
    pub(super) fn unstall_front_end(&mut self, events: &mut EventQueue) {
        while let Some(mut slot) = self.waiting_writes.pop_front() {
            if !self.accept_write(&mut slot, events) {
                self.waiting_writes.push_front(slot);
                break;
            }
        }
        for core in 0..self.front_end.len() {
            let Some(since) = self.front_end[core].stalled_since_ns else {
                continue;
            };
            if self.front_end[core]
                .command
                .is_some_and(|command| !command.write)
            {
                continue; // a read waiting for the read buffer
            }
            let slot = std::mem::replace(&mut self.front_end[core], FrontEndCore::IDLE);
            match self.place_write(slot, events) {
                Some(slot) => self.front_end[core] = slot,
                None => self.stats.buffer_full_stall_ns += events.now_ns - since,
            }
        }
        self.feed_front_end(events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Condition;
    use crate::device::test_support::*;
    use crate::device::Command;
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

    /// An SLC cache takes data at its program rate, not the link's: eight 64 KiB writes, a 4 GB/s link, a 1 GB/s
    /// fill rate, staging for 4 units x 64 KiB = 256 KiB (262,144 ns of filling). Write k crosses the link at
    /// 17,384 + 16,384 (k - 1) ns (front end 1 us, then 16,384 ns each), enters the region at 17,384 + 65,536 k,
    /// and is acknowledged (5 us) once no more than the staging is queued ahead of it: at the later of its link
    /// time and 65,536 k - 244,760. Writes 1-5 go at the link's pace (the 5th: 82,920 either way), 6-8 at the
    /// fill rate, 65,536 ns apart. Negative control, no fill rate: the link's pace throughout.
    #[test]
    fn the_buffer_fills_at_its_own_rate_where_set() {
        let completions = |fill: Option<u64>| {
            let mut config = small_device(Condition::Fresh);
            config.buffer_fill_bytes_per_s = fill;
            completion_times(config, 8, 65536)
        };
        let link_paced: Vec<u64> = (0..8).map(|k| 17_384 + 16_384 * k + 5_000).collect();
        assert_eq!(completions(None), link_paced);
        let mut fill_paced = link_paced[..5].to_vec();
        fill_paced.extend([153_456, 218_992, 284_528]);
        assert_eq!(completions(Some(1_000_000_000)), fill_paced);
    }

    /// A read submitted behind `writes` 4 KiB writes once the 1 MiB buffer holds 256 of them, on the writes' submission
    /// queue; its latency.
    fn read_behind_writes(waiting_write_slots: u32, writes: u32) -> u64 {
        read_beside_writes(waiting_write_slots, writes, 0)
    }

    /// As `read_behind_writes`, the read on submission queue `queue` (the writes are on queue 0).
    fn read_beside_writes(waiting_write_slots: u32, writes: u32, queue: u32) -> u64 {
        let mut config = small_device(Condition::Fresh);
        config.waiting_write_slots = waiting_write_slots;
        let mut device = Device::new(config, 0, 2, 1);
        let mut events = EventQueue::new();
        submit_writes(&mut device, &mut events, writes);
        run_until(&mut device, &mut events, |device| {
            device.stats.write_ios >= 256
        });
        let submitted_at = events.now_ns;
        device.submit(queue, read(100_000, 0), &mut events);
        let done = run_until_idle(&mut device, &mut events);
        done.iter().find(|d| d.1 == 100_000).unwrap().0 - submitted_at
    }

    /// 512 writes: 256 fill the 1 MiB buffer and 256 wait. With no waiting slots the first of them holds the front
    /// end, and the read waits until all 256 are in: 1 MiB freed at 4 units x 64 KiB per 0.566 ms (65.5 us on the
    /// channel, 0.5 ms program) = 4 rounds, over 2 ms (2.69 ms here). With 256 slots they wait off the front end
    /// and the read waits at most for the program on its unit, 0.566 ms, plus its own ~70 us (0.42 ms here).
    #[test]
    fn writes_waiting_in_slots_do_not_hold_up_a_read() {
        let blocked = read_behind_writes(0, 512);
        let through = read_behind_writes(256, 512);
        assert!(blocked > 2_000_000, "{blocked}");
        assert!(through < 566_000 + 70_000, "{through}");
    }

    /// With 128 slots the 129th waiting write holds the front end again: a read on the writes' submission queue waits
    /// until 129 x 4 KiB are in, 516 KiB, more than the two rounds of programs that free 512 KiB (2 x 0.566 = 1.13
    /// ms; 1.56 ms here). A read on another queue waits only for the write that holds the front end: round-robin
    /// arbitration takes it next, ahead of the writes still queued (0.42 ms here, as with free slots).
    #[test]
    fn one_write_more_than_the_slots_holds_the_front_end() {
        let blocked = read_behind_writes(128, 512);
        assert!(blocked > 1_130_000, "{blocked}");
        // Negative control: 128 waiting writes exactly, the read goes through.
        let through = read_behind_writes(128, 256 + 128);
        assert!(through < 566_000 + 70_000, "{through}");
        let beside = read_beside_writes(128, 512, 1);
        assert!(beside < 566_000 + 70_000, "{beside}");
    }

    /// Worked example of the drain that once deadlocked: a 64 KiB buffer (one program unit) and two 48 KiB writes.
    /// Needing room for a whole write, the second would wait for ever with 48 KiB buffered (less than a program
    /// unit, so no program starts). Taking pieces:
    /// - write 1: front end 1 us, then 48 KiB over the 4 GB/s link (12,288 ns), then the 5 us acknowledgement:
    ///   1,000 + 12,288 + 5,000 = 18,288 ns;
    /// - write 2: front end done at 2,000 ns; 16 KiB fit (link busy until 13,288, +4,096 = 17,384), which makes a
    ///   program unit: the program takes 64 KiB over the 1 GB/s channel (65,536 ns) and 0.5 ms, ending at
    ///   2,000 + 65,536 + 500,000 = 567,536 ns; then the other 32 KiB go in (8,192 ns of link) and are acknowledged:
    ///   567,536 + 8,192 + 5,000 = 580,728 ns.
    #[test]
    fn a_buffer_of_one_program_unit_takes_writes_larger_than_its_free_room_in_pieces() {
        let mut config = small_device(Condition::Fresh);
        config.write_buffer_bytes = 65536;
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        submit_writes_of(&mut device, &mut events, 2, 49152);
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done, vec![(18_288, 0), (580_728, 1)]);
        assert_eq!(device.stats.write_ios, 2);
        assert_eq!(device.stats.host_program_units, 1);
        assert_eq!(
            device.buffer_used_bytes(),
            32768,
            "the rest waits for more data"
        );
        assert_eq!(device.stats.buffer_full_stall_ns, 567_536 - 2_000);
    }

    /// A write larger than the whole buffer goes in as programs free space: 160 KiB through a 64 KiB buffer.
    /// Front end done at 1,000 ns; 64 KiB in, a program ends at 1,000 + 65,536 + 500,000 = 566,536; 64 KiB more,
    /// a second program ends at 566,536 + 565,536 = 1,132,072; the last 32 KiB cross the link (8,192 ns) and are
    /// acknowledged (5 us): 1,145,264 ns.
    #[test]
    fn a_write_larger_than_the_buffer_completes() {
        let mut config = small_device(Condition::Fresh);
        config.write_buffer_bytes = 65536;
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        let command = Command {
            request: 0,
            write: true,
            offset_bytes: 0,
            bytes: 163_840,
        };
        device.submit(0, command, &mut events);
        assert_eq!(
            run_until_idle(&mut device, &mut events),
            vec![(1_145_264, 0)]
        );
        assert_eq!(device.stats.host_program_units, 2);
    }

    /// Completion times of `count` writes of `bytes` each, all submitted at time 0 on one queue, and the device
    /// after them (its counters).
    fn run_writes(
        config: crate::config::DeviceConfig,
        count: u32,
        bytes: u32,
    ) -> (Vec<u64>, Device) {
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        submit_writes_of(&mut device, &mut events, count, bytes);
        let mut times: Vec<u64> = run_until_idle(&mut device, &mut events)
            .iter()
            .map(|d| d.0)
            .collect();
        times.sort();
        (times, device)
    }

    fn completion_times(config: crate::config::DeviceConfig, count: u32, bytes: u32) -> Vec<u64> {
        run_writes(config, count, bytes).0
    }

    /// Sustained write rate in bytes per second between the completions of the middle and the last write.
    fn sustained_bytes_per_s(times: &[u64], bytes: u32) -> f64 {
        let (from, to) = (times.len() / 2, times.len() - 1);
        (to - from) as f64 * bytes as f64 * 1e9 / (times[to] - times[from]) as f64
    }

    /// Worked example: which of the two write paths binds, by request size. The small device's buffer drains into
    /// 4 units in parallel, each taking a 64 KiB program unit over its channel (65,536 ns at 1 GB/s) and programming
    /// it for 0.5 ms: 4 x 65,536 B / 565,536 ns = 463.5 MB/s of flash program bandwidth. A write command occupies
    /// the front end for 20 us (the controller's per-command write path): 50,000 commands/s.
    /// - 4 KiB writes: 50 K/s x 4 KiB = 205 MB/s < 463.5 MB/s, so the buffer never fills and the per-command path
    ///   binds: write i completes at 20,000 (i + 1) + 1,024 (4 KiB over the 4 GB/s link) + 5,000 (ack) ns.
    /// - 64 KiB writes: 50 K/s x 64 KiB = 3.3 GB/s > 463.5 MB/s, so once the 1 MiB buffer is full the flash binds:
    ///   one write per 65,536 B / 463.5 MB/s = 141.4 us.
    #[test]
    fn small_writes_are_bound_by_the_command_path_large_ones_by_program_bandwidth() {
        let mut config = small_device(Condition::Fresh);
        config.write_command_ns = Some(20_000);
        let small = completion_times(config.clone(), 100, 4096);
        for (i, at) in small.iter().enumerate() {
            assert_eq!(*at, 20_000 * (i as u64 + 1) + 1_024 + 5_000);
        }
        let large = sustained_bytes_per_s(&completion_times(config, 400, 65536), 65536);
        let flash = 4.0 * 65536.0 * 1e9 / 565_536.0;
        assert!(
            (large / flash - 1.0).abs() < 0.03,
            "{large:.0} B/s against {flash:.0}"
        );
    }

    /// Worked example: a rested drive's empty static SLC region takes writes without garbage collection. Small
    /// device, preconditioned with nothing freed (45.5 MB/s sustained, above), given a 16 MiB static region: rested,
    /// 16 MiB / 64 KiB / 4 units = 64 more free program units per unit (68 in all, the threshold being 4), so the
    /// first 256 writes of 64 KiB program 64 units on each unit with no copy and drain at the fresh 463.5 MB/s;
    /// the 400 writes after them meet garbage collection. Not rested (the negative control), garbage collection
    /// starts with the first program and the same 256 writes drain at the preconditioned rate.
    #[test]
    fn a_rested_drive_writes_its_static_slc_region_without_garbage_collection() {
        let run = |rested: bool, count: u32| {
            let mut config = small_device(Condition::Preconditioned);
            config.slc_static_bytes = Some(16 << 20);
            config.rested = rested;
            let (times, device) = run_writes(config, count, 65536);
            (times, device.stats.gc_program_units)
        };
        let (times, copies) = run(true, 256);
        assert_eq!(copies, 0, "the region needs no copy");
        let region = sustained_bytes_per_s(&times, 65536) / 1e6;
        assert!(
            (region / 463.5 - 1.0).abs() < 0.03,
            "rested {region:.1} MB/s"
        );
        let (_, copies) = run(true, 656);
        assert!(copies > 0, "past the region garbage collection starts");
        let (times, copies) = run(false, 256);
        assert!(copies > 0, "not rested: garbage collection from the start");
        let full = sustained_bytes_per_s(&times, 65536) / 1e6;
        assert!(full < 463.5 / 3.0, "not rested {full:.1} MB/s");
    }

    /// Worked example: a fresh drive whose data fits its SLC cache programs in SLC. Small device (1 GiB, 4 units,
    /// 16 KiB pages, 1 GB/s channels), given a 16 MiB static and a 256 MiB dynamic SLC region and 100 us per SLC
    /// page program. With 75% of the space never written its data is 256 MiB <= 272 MiB of cache: SLC mode, so each
    /// unit takes a 16 KiB page over its channel (16,384 ns) and programs it for 100 us: 4 x 16,384 B / 116,384 ns =
    /// 563.1 MB/s, and reads take the fastest page read (40 us of 40 and 60). With half the space written (512 MiB
    /// of data, the negative control) the drive programs TLC units of 64 KiB in 0.5 ms: 463.5 MB/s (above); so does
    /// a preconditioned drive, whatever it holds.
    #[test]
    fn a_fresh_drive_whose_data_fits_its_slc_cache_programs_in_slc() {
        let config = |condition: Condition, trimmed_fraction: f64| {
            let mut config = small_device(condition);
            config.slc_static_bytes = Some(16 << 20);
            config.slc_dynamic_bytes = Some(256 << 20);
            config.slc_program_ns = Some(100_000);
            config.trimmed_fraction = trimmed_fraction;
            config
        };
        let rate = |config: crate::config::DeviceConfig| {
            sustained_bytes_per_s(&completion_times(config, 400, 65536), 65536) / 1e6
        };
        let slc = config(Condition::Fresh, 0.75);
        assert!(super::super::slc_mode(&slc));
        assert_eq!(
            super::super::in_slc_mode(slc.clone()).read_ns_by_page_type,
            vec![40_000]
        );
        let fast = rate(slc);
        assert!((fast / 563.1 - 1.0).abs() < 0.03, "SLC mode {fast:.1} MB/s");
        let written = config(Condition::Fresh, 0.5);
        assert!(
            !super::super::slc_mode(&written),
            "512 MiB of data does not fit 272 MiB"
        );
        let tlc = rate(written);
        assert!((tlc / 463.5 - 1.0).abs() < 0.03, "TLC {tlc:.1} MB/s");
        assert!(!super::super::slc_mode(&config(
            Condition::Preconditioned,
            0.75
        )));
    }

    /// Worked example: the drive state sets the drain rate through garbage collection. Small device: 1 GiB of user
    /// space, 64 MiB over-provisioned, 16 program units per block, 4 units; a host program takes 565.5 us (above),
    /// a copy 50 (mean read) + 2 x 65.5 (its 64 KiB to the controller and back over the 1 GB/s channel) + 500 =
    /// 681 us, an erase 2 ms.
    /// - fresh: no garbage collection within the run, 463.5 MB/s (above);
    /// - preconditioned, 25% of the space freed: live 768 MiB of 1,088 raw, rho = 0.7059, victims' valid fraction
    ///   u = exp(-(1 - u) / rho) = 0.4762 (`victim_valid_fraction`), so per 16-unit block 7.62 copies and 8.38 host
    ///   programs: 8.38 x 565.5 + 7.62 x 681 + 2,000 = 11,928 us per unit for 8.38 x 64 KiB, x 4 units = 184 MB/s;
    /// - preconditioned, nothing freed: rho = 1,024 / 1,088 = 0.9412, u = 0.8847: 14.16 copies and 1.84 host
    ///   programs, 1.84 x 565.5 + 14.16 x 681 + 2,000 = 12,683 us per unit for 1.84 x 64 KiB, x 4 units = 38.1 MB/s.
    #[test]
    fn the_drive_state_sets_the_sustained_write_rate() {
        let rate = |condition: Condition, trimmed_fraction: f64| {
            let mut config = small_device(condition);
            config.trimmed_fraction = trimmed_fraction;
            sustained_bytes_per_s(&completion_times(config, 3000, 65536), 65536) / 1e6
        };
        let fresh = rate(Condition::Fresh, 0.0);
        let freed = rate(Condition::Preconditioned, 0.25);
        let full = rate(Condition::Preconditioned, 0.0);
        assert!((fresh / 463.5 - 1.0).abs() < 0.03, "fresh {fresh:.1} MB/s");
        assert!(
            (freed / 184.0 - 1.0).abs() < 0.05,
            "25% freed {freed:.1} MB/s"
        );
        assert!(
            (full / 38.1 - 1.0).abs() < 0.05,
            "nothing freed {full:.1} MB/s"
        );
    }
}
