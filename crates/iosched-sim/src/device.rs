//! An NVMe (or SATA) SSD as a set of queues and servers.
//!
//! - Submission queues, one per hardware queue. The controller fetches a command as soon as its doorbell rings (the
//!   fetch takes far less than the front-end's per-command time, so NVMe's round-robin arbitration never has a
//!   backlog to order) into one internal command queue, which the front-end works through in fetch order.
//! - Controller front-end cores: each command occupies one for `command_ns` (the device-wide IOPS ceiling), or
//!   `write_command_ns` for a write where that is set.
//! - Flash units (channels x units per channel), each doing one operation at a time: page reads (time by page type
//!   plus jitter), programs of `program_unit_bytes`, garbage-collection copies and erases. Reads go first when a unit
//!   picks its next operation. Where the flash can suspend (`read_suspend_ns` > 0), a read reaching a unit that
//!   programs, copies or erases suspends that operation, which resumes once the unit has no read left.
//! - Channels and the host link (one direction each way) move data; they are FIFO servers.
//! - A write buffer absorbs writes: a write completes once its data is in the buffer. The buffer drains to flash in
//!   program units on idle flash units. When it is full the front-end core holding the write stalls, and every
//!   command behind it waits (head-of-line blocking): this is how reads queue behind writes.
//! - Garbage collection: each unit counts its own free space in program units. Below the low-water mark it reclaims
//!   a victim block by copying its valid program units and erasing it, and paces its host programs behind the
//!   copies in the ratio the victim frees space. The victims' valid fraction follows from the spare area of a
//!   preconditioned drive (see `victim_valid_fraction`); where a unit is in its copy cycle is random, so units do not
//!   program host data in step.
//!
//! Simplifications, each a named assumption: the logical-to-physical mapping is a hash of the page address (uniform
//! over units, page type from the same hash) rather than a mapping table; reads of data still in the write buffer go
//! to flash anyway; a garbage-collection copy takes one array read plus one program (on-die copyback); victims of
//! sequential overwrites are treated like those of random ones.

use std::collections::VecDeque;

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

use crate::config::{Condition, DeviceConfig};
use crate::engine::{Event, EventQueue};
use crate::result::DeviceResult;

/// What the block layer hands the device.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    pub request: u32,
    pub write: bool,
    pub offset_bytes: u64,
    pub bytes: u32,
}

#[derive(Debug, Clone, Copy)]
enum UnitOp {
    Idle,
    Read { request: u32, bytes: u32 },
    HostProgram,
    GcCopy,
    Erase,
}

#[derive(Debug, Clone, Copy)]
struct PageRead {
    request: u32,
    bytes: u32,
    page_type: u8,
}

struct Unit {
    op: UnitOp,
    reads: VecDeque<PageRead>,
    /// Garbage collection of one victim block in progress on this unit: copies still to do, then an erase.
    gc_copies_left: u32,
    /// All the copies of the victim being reclaimed: its erase frees the block less these.
    gc_victim_copies: u32,
    gc_active: bool,
    /// While reclaiming, host programs are paced behind copies: each copy earns `host_programs_per_copy` of
    /// a host program, each host program spends one.
    host_program_credit: f64,
    /// Free program units on this unit's blocks: each unit (plane) manages its own space, so one running out
    /// stops only its own host programs.
    free_program_units: i64,
    in_idle_list: bool,
    /// Numbers this unit's operations (see `Event::UnitDone`); `done_at_ns` is when the current one ends.
    operation: u32,
    done_at_ns: u64,
    /// A program, copy or erase suspended for reads, with the time it still needs.
    suspended: Option<(UnitOp, u64)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct ReadTracking {
    pages_left: u32,
    done_at_ns: u64,
}

struct FrontEndCore {
    command: Option<Command>,
    /// Holding a write that found the buffer full.
    stalled_since_ns: Option<u64>,
}

pub struct Device {
    pub config: DeviceConfig,
    index: u32,
    salt: u64,
    rng: Pcg64,
    hw_queues: u32,
    /// Commands fetched from the submission queues, in fetch (= doorbell) order.
    fetched_commands: VecDeque<Command>,
    front_end: Vec<FrontEndCore>,
    units: Vec<Unit>,
    idle_units: Vec<u32>,
    channel_free_at_ns: Vec<u64>,
    link_to_host_free_at_ns: u64,
    link_to_device_free_at_ns: u64,
    reads: Vec<ReadTracking>,
    buffer_used_bytes: u64,
    /// Buffered bytes not yet assigned to a program.
    buffer_pending_bytes: u64,
    /// Garbage collection starts on a unit below this many free program units.
    gc_low_units: i64,
    victim_valid_fraction: f64,
    victim_copy_carry: f64,
    host_programs_per_copy: f64,
    mean_read_ns: u64,
    /// Commands submitted and not yet completed to the host (what a device-wide in-flight bound limits).
    outstanding_commands: u32,
    pub stats: DeviceResult,
}

/// splitmix64: a fixed, well-mixed hash of a page address (the stand-in for the FTL's mapping).
#[inline]
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Book `duration_ns` on a FIFO server (a channel, a link direction) free from `*free_at_ns`, for work ready at
/// `ready_ns`. Returns when it ends. Callers book in event order, so the FIFO order is the arrival order.
#[inline]
fn book(free_at_ns: &mut u64, ready_ns: u64, duration_ns: u64) -> u64 {
    *free_at_ns = ready_ns.max(*free_at_ns) + duration_ns;
    *free_at_ns
}

/// Uniform extra time in [0, max_ns].
#[inline]
fn jitter(rng: &mut Pcg64, max_ns: u64) -> u64 {
    if max_ns > 0 {
        rng.random_range(0..=max_ns)
    } else {
        0
    }
}

#[inline]
fn transfer_ns(bytes: u64, bytes_per_s: u64) -> u64 {
    (bytes * 1_000_000_000).div_ceil(bytes_per_s)
}

/// Valid fraction of garbage-collection victims in the steady state of uniform random overwrites with greedy victim
/// choice: write amplification WA = (1 + r) / (2 r) for spare factor r = spare / live data, so the victims' valid
/// fraction is 1 - 1/WA = (1 - r) / (1 + r). (A standard first-order approximation of greedy GC; it ignores
/// hot/cold separation.)
pub fn victim_valid_fraction(config: &DeviceConfig) -> f64 {
    if config.condition == Condition::Fresh {
        return 0.0;
    }
    let raw = (config.capacity_bytes + config.overprovision_bytes) as f64;
    let live = config.capacity_bytes as f64 * (1.0 - config.trimmed_fraction.clamp(0.0, 1.0));
    if live <= 0.0 {
        return 0.0;
    }
    let spare_factor = (raw - live) / live;
    ((1.0 - spare_factor) / (1.0 + spare_factor)).clamp(0.0, 1.0)
}

impl Device {
    pub fn new(config: DeviceConfig, index: u32, hw_queues: u32, seed: u64) -> Self {
        let nr_units = config.channels * config.units_per_channel;
        let gc_low_units = config.gc_free_units_low as i64;
        let free_program_units_per_unit = match config.condition {
            // A preconditioned drive sits at its garbage-collection threshold: the spare area is spread over
            // blocks as invalid pages, not as free blocks.
            Condition::Preconditioned => gc_low_units,
            Condition::Fresh => {
                ((config.capacity_bytes + config.overprovision_bytes)
                    / config.program_unit_bytes as u64
                    / nr_units.max(1) as u64) as i64
            }
        };
        let mean_read_ns = config.read_ns_by_page_type.iter().sum::<u64>()
            / config.read_ns_by_page_type.len().max(1) as u64;
        let victim_valid_fraction = victim_valid_fraction(&config);
        let stats = DeviceResult {
            name: config.name.clone(),
            ..Default::default()
        };
        Self {
            index,
            salt: mix(0xD1CE ^ index as u64),
            rng: Pcg64::seed_from_u64(mix(seed ^ 0x5EED_0000_0000 ^ index as u64)),
            hw_queues: hw_queues.max(1),
            fetched_commands: VecDeque::new(),
            front_end: (0..config.controller_cores.max(1))
                .map(|_| FrontEndCore {
                    command: None,
                    stalled_since_ns: None,
                })
                .collect(),
            units: (0..nr_units)
                .map(|_| Unit {
                    op: UnitOp::Idle,
                    reads: VecDeque::new(),
                    gc_copies_left: 0,
                    gc_victim_copies: 0,
                    gc_active: false,
                    host_program_credit: 0.0,
                    free_program_units: free_program_units_per_unit,
                    in_idle_list: true,
                    operation: 0,
                    done_at_ns: 0,
                    suspended: None,
                })
                .collect(),
            idle_units: (0..nr_units).rev().collect(),
            channel_free_at_ns: vec![0; config.channels as usize],
            link_to_host_free_at_ns: 0,
            link_to_device_free_at_ns: 0,
            reads: Vec::new(),
            buffer_used_bytes: 0,
            buffer_pending_bytes: 0,
            gc_low_units,
            victim_valid_fraction,
            victim_copy_carry: 0.0,
            host_programs_per_copy: if victim_valid_fraction > 0.0 {
                (1.0 - victim_valid_fraction) / victim_valid_fraction
            } else {
                f64::INFINITY
            },
            mean_read_ns,
            outstanding_commands: 0,
            stats,
            config,
        }
    }

    pub fn buffer_used_bytes(&self) -> u64 {
        self.buffer_used_bytes
    }

    /// Free program units over all flash units.
    pub fn free_program_units(&self) -> i64 {
        self.units.iter().map(|unit| unit.free_program_units).sum()
    }

    /// The host rang the doorbell of submission queue `queue`; the controller fetches the command at once, so
    /// which queue it came from does not change its place.
    pub fn submit(&mut self, queue: u32, command: Command, events: &mut EventQueue) {
        debug_assert!(queue < self.hw_queues);
        self.outstanding_commands += 1;
        self.stats.max_outstanding_commands = self
            .stats
            .max_outstanding_commands
            .max(self.outstanding_commands as u64);
        self.fetched_commands.push_back(command);
        self.feed_front_end(events);
    }

    /// The host has taken a command's completion (the block layer's completion path ran).
    pub fn command_completed(&mut self) {
        debug_assert!(self.outstanding_commands > 0);
        self.outstanding_commands -= 1;
    }

    /// Commands submitted and not yet completed.
    pub fn outstanding_commands(&self) -> u32 {
        self.outstanding_commands
    }

    /// Give idle, non-stalled front-end cores the next fetched commands, oldest first.
    fn feed_front_end(&mut self, events: &mut EventQueue) {
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
            if !self.accept_write(command, events) {
                self.front_end[core as usize].stalled_since_ns = Some(events.now_ns);
                return;
            }
        } else {
            self.start_read(command, events);
        }
        self.front_end[core as usize].command = None;
        self.feed_front_end(events);
    }

    fn start_read(&mut self, command: Command, events: &mut EventQueue) {
        self.stats.read_ios += 1;
        let page = self.config.flash_page_bytes as u64;
        let first_page = command.offset_bytes / page;
        let end = command.offset_bytes + command.bytes as u64;
        let last_page = (end - 1) / page;
        let request = command.request as usize;
        if self.reads.len() <= request {
            self.reads.resize(request + 1, ReadTracking::default());
        }
        self.reads[request] = ReadTracking {
            pages_left: (last_page - first_page + 1) as u32,
            done_at_ns: 0,
        };
        let nr_units = self.units.len() as u64;
        let page_types = self.config.read_ns_by_page_type.len().max(1) as u64;
        for page_index in first_page..=last_page {
            let from = command.offset_bytes.max(page_index * page);
            let to = end.min((page_index + 1) * page);
            let hash = mix(page_index ^ self.salt);
            let unit = (hash % nr_units) as u32;
            let page_type = ((hash >> 32) % page_types) as u8;
            self.units[unit as usize].reads.push_back(PageRead {
                request: command.request,
                bytes: (to - from) as u32,
                page_type,
            });
            match self.units[unit as usize].op {
                UnitOp::Idle => self.start_next_op(unit, events),
                UnitOp::HostProgram | UnitOp::GcCopy | UnitOp::Erase
                    if self.config.read_suspend_ns > 0 =>
                {
                    self.suspend_for_reads(unit, events)
                }
                _ => {}
            }
        }
    }

    /// Suspend the unit's program, copy or erase and start its first queued read after the suspend latency.
    fn suspend_for_reads(&mut self, unit: u32, events: &mut EventQueue) {
        let now = events.now_ns;
        let u = unit as usize;
        let remaining_ns = self.units[u].done_at_ns.saturating_sub(now);
        self.units[u].suspended = Some((self.units[u].op, remaining_ns));
        self.stats.suspensions += 1;
        let read = self.units[u]
            .reads
            .pop_front()
            .expect("suspending for a queued read");
        let array = self.config.read_ns_by_page_type[read.page_type as usize]
            + jitter(&mut self.rng, self.config.read_jitter_ns);
        self.run_op(
            unit,
            UnitOp::Read {
                request: read.request,
                bytes: read.bytes,
            },
            now + self.config.read_suspend_ns + array,
            events,
        );
    }

    fn run_op(&mut self, unit: u32, op: UnitOp, done_at_ns: u64, events: &mut EventQueue) {
        let unit_state = &mut self.units[unit as usize];
        unit_state.op = op;
        unit_state.operation = unit_state.operation.wrapping_add(1);
        unit_state.done_at_ns = done_at_ns;
        events.schedule(
            done_at_ns,
            Event::UnitDone {
                device: self.index,
                unit,
                operation: unit_state.operation,
            },
        );
    }

    /// Put a write into the buffer if it fits; then it completes after its data crossed the link.
    fn accept_write(&mut self, command: Command, events: &mut EventQueue) -> bool {
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

    fn drain_to_idle_units(&mut self, events: &mut EventQueue) {
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
    fn host_program_allowed(&self, u: usize) -> bool {
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

    fn gc_needed(&self, u: usize) -> bool {
        self.victim_valid_fraction < 1.0 && self.units[u].free_program_units < self.gc_low_units
    }

    /// Choose and start what an idle unit does next: reads first, then a suspended operation, then its garbage
    /// collection, then buffer drain.
    fn start_next_op(&mut self, unit: u32, events: &mut EventQueue) {
        let now = events.now_ns;
        let u = unit as usize;
        let config = &self.config;
        let (op, done_at) = if let Some(read) = self.units[u].reads.pop_front() {
            let array = config.read_ns_by_page_type[read.page_type as usize]
                + jitter(&mut self.rng, config.read_jitter_ns);
            (
                UnitOp::Read {
                    request: read.request,
                    bytes: read.bytes,
                },
                now + array,
            )
        } else if let Some((op, remaining_ns)) = self.units[u].suspended.take() {
            (op, now + config.read_suspend_ns + remaining_ns)
        } else if !self.units[u].gc_active && self.gc_needed(u) {
            // Start reclaiming a victim block on this unit.
            let exact = self.victim_valid_fraction * config.block_program_units as f64
                + self.victim_copy_carry;
            let copies = exact.floor() as u32;
            self.victim_copy_carry = exact - copies as f64;
            // The unit's place in its copy/host-program cycle starts anywhere: a victim's valid pages are spread
            // through it. Starting every unit at the same place would make all units program host data in step
            // and free the buffer in bursts milliseconds apart.
            let phase = self.rng.random_range(0.0..1.0);
            let unit_state = &mut self.units[u];
            unit_state.gc_active = true;
            unit_state.gc_copies_left = copies;
            unit_state.gc_victim_copies = copies;
            unit_state.host_program_credit = phase;
            return self.start_next_op(unit, events);
        } else if self.host_program_allowed(u) {
            if self.units[u].gc_active {
                self.units[u].host_program_credit -= 1.0;
            }
            self.buffer_pending_bytes -= config.program_unit_bytes as u64;
            self.units[u].free_program_units -= 1;
            let channel = u / config.units_per_channel as usize;
            let data_in = book(
                &mut self.channel_free_at_ns[channel],
                now,
                transfer_ns(config.program_unit_bytes as u64, config.channel_bytes_per_s),
            );
            (UnitOp::HostProgram, data_in + config.program_ns)
        } else if self.units[u].gc_active && self.units[u].gc_copies_left > 0 {
            // Copies go to blocks reserved for garbage collection, which the victim's erase gives back.
            self.units[u].host_program_credit += self.host_programs_per_copy;
            self.units[u].gc_copies_left -= 1;
            (UnitOp::GcCopy, now + self.mean_read_ns + config.program_ns)
        } else if self.units[u].gc_active && self.units[u].gc_copies_left == 0 {
            (UnitOp::Erase, now + config.erase_ns)
        } else {
            self.units[u].op = UnitOp::Idle;
            if !self.units[u].in_idle_list {
                self.units[u].in_idle_list = true;
                self.idle_units.push(unit);
            }
            return;
        };
        self.run_op(unit, op, done_at, events);
    }

    /// A flash unit finished operation number `operation` (unless that one was suspended: then it ends later).
    pub fn unit_done(&mut self, unit: u32, operation: u32, events: &mut EventQueue) {
        let now = events.now_ns;
        let u = unit as usize;
        if operation != self.units[u].operation {
            return;
        }
        match self.units[u].op {
            UnitOp::Read { request, bytes } => {
                let channel = u / self.config.units_per_channel as usize;
                let off_channel = book(
                    &mut self.channel_free_at_ns[channel],
                    now,
                    transfer_ns(bytes as u64, self.config.channel_bytes_per_s),
                );
                let at_host = book(
                    &mut self.link_to_host_free_at_ns,
                    off_channel,
                    transfer_ns(bytes as u64, self.config.link_bytes_per_s),
                );
                let done = at_host + self.config.read_pipeline_ns;
                let tracking = &mut self.reads[request as usize];
                tracking.pages_left -= 1;
                tracking.done_at_ns = tracking.done_at_ns.max(done);
                if tracking.pages_left == 0 {
                    events.schedule(
                        tracking.done_at_ns,
                        Event::DeviceComplete {
                            device: self.index,
                            request,
                        },
                    );
                }
            }
            UnitOp::HostProgram => {
                self.stats.host_program_units += 1;
                self.buffer_used_bytes -= self.config.program_unit_bytes as u64;
                self.unstall_front_end(events);
            }
            UnitOp::GcCopy => self.stats.gc_program_units += 1,
            UnitOp::Erase => {
                self.stats.erases += 1;
                let unit_state = &mut self.units[u];
                unit_state.gc_active = false;
                unit_state.free_program_units +=
                    self.config.block_program_units as i64 - unit_state.gc_victim_copies as i64;
            }
            UnitOp::Idle => unreachable!("an idle unit cannot finish an operation"),
        }
        self.units[u].op = UnitOp::Idle;
        self.start_next_op(unit, events);
        // Freed space or finished garbage collection may let other idle units work.
        self.drain_to_idle_units(events);
    }

    /// Buffer space was freed: stalled writes go in, and the front-end resumes.
    fn unstall_front_end(&mut self, events: &mut EventQueue) {
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
            self.front_end[core] = FrontEndCore {
                command: None,
                stalled_since_ns: None,
            };
        }
        self.feed_front_end(events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Interface;

    pub fn small_device(condition: Condition) -> DeviceConfig {
        DeviceConfig {
            name: "/dev/nvme0n1".into(),
            interface: Interface::Nvme,
            capacity_bytes: 1 << 30,
            logical_block_bytes: 512,
            max_hw_queues: 4,
            queue_depth: 64,
            link_bytes_per_s: 4_000_000_000,
            controller_cores: 1,
            command_ns: 1_000,
            write_command_ns: None,
            read_pipeline_ns: 2_000,
            write_ack_ns: 5_000,
            write_ack_jitter_ns: 0,
            channels: 2,
            units_per_channel: 2,
            channel_bytes_per_s: 1_000_000_000,
            flash_page_bytes: 16384,
            read_ns_by_page_type: vec![40_000, 60_000],
            read_jitter_ns: 0,
            program_unit_bytes: 65536,
            program_ns: 500_000,
            erase_ns: 2_000_000,
            read_suspend_ns: 0,
            block_program_units: 16,
            write_buffer_bytes: 1 << 20,
            overprovision_bytes: 1 << 26,
            gc_free_units_low: 4,
            condition,
            trimmed_fraction: 0.0,
            max_sectors_kb: None,
        }
    }

    /// `count` 4 KiB writes to consecutive offsets on submission queue 0, request ids 0..count.
    fn submit_writes(device: &mut Device, events: &mut EventQueue, count: u32) {
        for i in 0..count {
            let command = Command {
                request: i,
                write: true,
                offset_bytes: i as u64 * 4096,
                bytes: 4096,
            };
            device.submit(0, command, events);
        }
    }

    fn run_until_idle(device: &mut Device, events: &mut EventQueue) -> Vec<(u64, u32)> {
        let mut completions = Vec::new();
        while let Some((at, event)) = events.pop() {
            match event {
                Event::ControllerDone { core, .. } => device.controller_done(core, events),
                Event::UnitDone {
                    unit, operation, ..
                } => device.unit_done(unit, operation, events),
                Event::DeviceComplete { request, .. } => completions.push((at, request)),
                other => panic!("unexpected {other:?}"),
            }
        }
        completions
    }

    /// Run the device's own events (completions are dropped) until `done` holds.
    fn run_until(device: &mut Device, events: &mut EventQueue, done: impl Fn(&Device) -> bool) {
        while !done(device) {
            match events
                .pop()
                .expect("the device stopped before the condition held")
                .1
            {
                Event::ControllerDone { core, .. } => device.controller_done(core, events),
                Event::UnitDone {
                    unit, operation, ..
                } => device.unit_done(unit, operation, events),
                _ => {}
            }
        }
    }

    #[test]
    fn a_lone_read_takes_command_array_transfer_and_pipeline_time() {
        let mut device = Device::new(small_device(Condition::Fresh), 0, 1, 1);
        let mut events = EventQueue::new();
        device.submit(
            0,
            Command {
                request: 7,
                write: false,
                offset_bytes: 0,
                bytes: 4096,
            },
            &mut events,
        );
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done.len(), 1);
        let (at, request) = done[0];
        assert_eq!(request, 7);
        // 1 us command + 40 or 60 us array + 4096 B at 1 GB/s + at 4 GB/s + 2 us pipeline
        assert!(
            at == 1_000 + 40_000 + 4_096 + 1_024 + 2_000
                || at == 1_000 + 60_000 + 4_096 + 1_024 + 2_000,
            "{at}"
        );
    }

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
    fn reads_queue_on_busy_units_so_latency_grows_with_depth() {
        let mut device = Device::new(small_device(Condition::Fresh), 0, 1, 1);
        let mut events = EventQueue::new();
        for i in 0..64 {
            device.submit(
                0,
                Command {
                    request: i,
                    write: false,
                    offset_bytes: i as u64 * 16384,
                    bytes: 4096,
                },
                &mut events,
            );
        }
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done.len(), 64);
        let last = done.iter().map(|d| d.0).max().unwrap();
        // 4 units, 64 reads of >= 40 us each: at least 16 rounds deep on some unit.
        assert!(last > 16 * 40_000 / 2, "{last}");
    }

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

    #[test]
    fn garbage_collection_copies_and_erases_on_a_preconditioned_drive() {
        let config = small_device(Condition::Preconditioned);
        let valid = victim_valid_fraction(&config);
        // spare factor 1/16 -> valid fraction (1 - 1/16)/(1 + 1/16) = 0.882
        assert!((valid - 0.882).abs() < 0.001, "{valid}");
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        submit_writes(&mut device, &mut events, 2048);
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done.len(), 2048);
        assert!(device.stats.erases > 0 && device.stats.gc_program_units > 0);
        let amplification = (device.stats.host_program_units + device.stats.gc_program_units)
            as f64
            / device.stats.host_program_units as f64;
        assert!(amplification > 3.0, "write amplification {amplification}");
    }

    #[test]
    fn trimming_raises_spare_area_and_lowers_victim_valid_fraction() {
        let mut config = small_device(Condition::Preconditioned);
        let full = victim_valid_fraction(&config);
        config.trimmed_fraction = 0.5;
        assert!(victim_valid_fraction(&config) < full / 2.0);
        config.condition = Condition::Fresh;
        assert_eq!(victim_valid_fraction(&config), 0.0);
    }
    fn read(request: u32, offset_bytes: u64) -> Command {
        Command {
            request,
            write: false,
            offset_bytes,
            bytes: 4096,
        }
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

    /// One 4 KiB write (starts a 0.5 ms program once 64 KiB are buffered: 16 writes), then a read of a page on
    /// the unit that programs; returns the read's latency.
    fn read_during_a_program(read_suspend_ns: u64) -> u64 {
        let mut config = small_device(Condition::Fresh);
        config.read_suspend_ns = read_suspend_ns;
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        submit_writes(&mut device, &mut events, 16);
        run_until(&mut device, &mut events, |device| {
            device
                .units
                .iter()
                .any(|unit| matches!(unit.op, UnitOp::HostProgram))
        });
        let programming = device
            .units
            .iter()
            .position(|unit| matches!(unit.op, UnitOp::HostProgram))
            .unwrap() as u64;
        // A page that the address hash puts on the programming unit.
        let page = (0..)
            .find(|&page: &u64| mix(page ^ device.salt) % 4 == programming)
            .unwrap();
        let submitted_at = events.now_ns;
        device.submit(0, read(10_000, page * 16384), &mut events);
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(
            device.stats.host_program_units, 1,
            "the program still completes"
        );
        done.iter().find(|d| d.1 == 10_000).unwrap().0 - submitted_at
    }

    #[test]
    fn a_read_suspends_a_program_on_its_unit_when_the_flash_can() {
        let waited = read_during_a_program(0);
        let suspended = read_during_a_program(30_000);
        // Without suspend the read waits out the 0.5 ms program; with it, 30 us plus its own 48-68 us.
        assert!(waited > 300_000, "{waited}");
        assert!((78_000..=98_200).contains(&suspended), "{suspended}");
    }

    #[test]
    fn reclaiming_units_free_buffer_space_steadily_not_in_bursts() {
        let mut config = small_device(Condition::Preconditioned);
        config.channels = 4;
        config.units_per_channel = 4;
        let mut device = Device::new(config, 0, 1, 1);
        let mut events = EventQueue::new();
        submit_writes(&mut device, &mut events, 20_000);
        let mut program_ends = Vec::new();
        while let Some((at, event)) = events.pop() {
            match event {
                Event::ControllerDone { core, .. } => device.controller_done(core, &mut events),
                Event::UnitDone {
                    unit, operation, ..
                } => {
                    let before = device.stats.host_program_units;
                    device.unit_done(unit, operation, &mut events);
                    if device.stats.host_program_units > before {
                        program_ends.push(at);
                    }
                }
                _ => {}
            }
        }
        assert!(device.stats.erases > 50, "in the reclaiming steady state");
        let steady = &program_ends[program_ends.len() / 2..];
        let mean_gap = (steady[steady.len() - 1] - steady[0]) / (steady.len() as u64 - 1);
        let max_gap = steady.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        // 16 units in step would leave gaps of a whole copy/program cycle (~16 mean gaps) between bursts.
        assert!(
            max_gap < 8 * mean_gap,
            "max gap {max_gap} ns, mean {mean_gap} ns"
        );
    }
}
