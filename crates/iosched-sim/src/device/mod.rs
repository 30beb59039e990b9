//! An NVMe (or SATA) SSD as a set of queues and servers.
//!
//! - Submission queues, one per hardware queue. A free front-end core fetches the next command by NVMe's round-robin
//!   arbitration (one command per queue in turn, a burst of one), so a queue with few commands waits one turn
//!   while one with many waits its length (named assumption: the controller fetches a command only when a
//!   front-end core can take it; it holds no internal queue of fetched commands in doorbell order).
//! - Controller front-end cores: each command occupies one for `command_ns` (the device-wide IOPS ceiling), or
//!   `write_command_ns` for a write where that is set; a read none where the preset sets `read_out_ns`.
//! - Flash units (channels x units per channel), each doing one operation at a time: page reads (time by page type
//!   plus jitter), programs of `program_unit_bytes`, garbage-collection copies and erases. Reads go first when a unit
//!   picks its next operation. Where the flash can suspend (`read_suspend_ns` > 0), a read reaching a unit that
//!   programs, copies or erases suspends that operation, which resumes once the unit has no read left.
//! - Where the preset sets `read_out_ns`, the controller's work on a read comes once its data is off the channel:
//!   one read at a time (the drive's read ceiling), the channels' waiting reads in rotation (`flash.rs`).
//! - Channels and the host link (one direction each way) move data; they are FIFO servers.
//! - A read buffer (`read_buffer_bytes`, optional): a read leaving the front end holds its bytes of it until its
//!   completion is posted; a read that finds no room waits off the front end while one of `waiting_read_slots` is
//!   free, else holds its front-end core, so reads beyond it wait in arrival order whatever their size
//!   (`controller.rs`).
//! - A write buffer absorbs writes: a write completes once its data is in the buffer. Its data goes in piece by
//!   piece as space frees (a controller fetches a write's data pages into free buffer slots), so a full buffer always
//!   holds a program unit to drain and no write is too large for it. The buffer drains to flash in program units on
//!   idle flash units. When it is full, a write waits for space: off the front end while one of the
//!   `waiting_write_slots` is free (the commands behind it go on), else holding its front-end core, and then every
//!   command behind it waits (head-of-line blocking): this is how reads queue behind many writes.
//! - Garbage collection: each unit counts its own free space in program units. Below the low-water mark it reclaims
//!   a victim block by copying its valid program units and erasing it; host programs are allowed in the ratio the
//!   victim frees space. The victims' valid fraction follows from the spare area of a preconditioned drive (see
//!   `victim_valid_fraction`) and the share of host writes that rewrite young data (`young_rewrites.rs`). Paced (the default), each unit interleaves its host programs with its own copies from
//!   a random place in its cycle, so units do not program host data in step. In drive-wide steps
//!   (`gc_step_copies`), every reclaiming unit (or `gc_step_units` of them, in turn) copies that many program units
//!   while no unit programs host data, whenever the steps so far have paid for no more host programs; each drive
//!   starts at a random place in that cycle.
//!
//! Where each part lives: this file holds the device's state, its construction and its interface to the block layer;
//! `controller.rs` the front end, `flash.rs` the flash units (reads, programs, garbage collection), `write_buffer.rs`
//! the write buffer and its drain.
//!
//! Simplifications, each a named assumption: the logical-to-physical mapping is a hash of the page address (uniform
//! over units, page type from the same hash) rather than a mapping table; reads of data still in the write buffer go
//! to flash anyway; a garbage-collection copy takes one array read plus one program (on-die copyback); victims of
//! sequential overwrites are treated like those of random ones.

use std::collections::VecDeque;

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

use crate::config::{Condition, DeviceConfig};
// The hash of a page address that stands in for the FTL's mapping.
use crate::mix;
use crate::occupancy::Occupancy;
use crate::result::DeviceResult;

mod controller;
mod flash;
mod null_blk;
mod write_buffer;
mod young_rewrites;

pub use null_blk::NullBlkConfig;

use controller::FrontEndCore;
use flash::{ReadOut, ReadTracking, Unit};
use young_rewrites::YoungRewrites;

/// What the block layer hands the device.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    pub request: u32,
    pub write: bool,
    pub offset_bytes: u64,
    pub bytes: u32,
}

pub struct Device {
    pub config: DeviceConfig,
    index: u32,
    salt: u64,
    rng: Pcg64,
    /// The host's timer lateness (`HostConfig::timer_lateness`), for null_blk's timer completions.
    timer_lateness: Option<crate::config::TimerLateness>,
    /// When the host handles the late timer interrupt pending now: timers expiring before then are handled by it.
    timer_handled_at_ns: u64,
    /// The uniform draw that made that interrupt late, and per request (by id; NaN: none) the draw of the interrupt
    /// that ends it: the wake-up of its reaper is as late in its own distribution (`take_timer_draw`).
    timer_handled_u: f64,
    /// How many timers that interrupt has handled so far, and how long it takes for each (the host's
    /// `timer_irq_ns` plus the elevator's completion hook): the next one joins it if it expires before the
    /// interrupt is done with those.
    timer_handled_count: u32,
    timer_irq_ns: u64,
    timer_draws: Vec<f64>,
    hw_queues: u32,
    /// Commands waiting in each submission queue, in doorbell order; the front end takes them round-robin.
    submission_queues: Vec<VecDeque<Command>>,
    /// Which submission queues hold commands.
    submission_queues_with_work: Occupancy,
    /// The queue round-robin arbitration looks at first for the next command.
    next_queue: usize,
    front_end: Vec<FrontEndCore>,
    /// Writes waiting for buffer space off the front end (`waiting_write_slots`), oldest first.
    waiting_writes: VecDeque<FrontEndCore>,
    /// Reads waiting for read-buffer room off the front end (`waiting_read_slots`), oldest first.
    waiting_reads: VecDeque<Command>,
    units: Vec<Unit>,
    idle_units: Vec<u32>,
    channel_free_at_ns: Vec<u64>,
    /// Reads whose last piece is off the flash, waiting for the read-out stage (`read_out_ns`), one queue per
    /// channel; the read in the stage, and the channel it takes next.
    read_out_queues: Vec<VecDeque<ReadOut>>,
    /// Which channels' read-out queues hold reads.
    read_out_queues_with_work: Occupancy,
    read_out_busy: Option<ReadOut>,
    read_out_next_channel: usize,
    link_to_host_free_at_ns: u64,
    link_to_device_free_at_ns: u64,
    /// The buffer's fill server (`buffer_fill_bytes_per_s`): when the data booked on it so far is in.
    buffer_fill_free_at_ns: u64,
    reads: Vec<ReadTracking>,
    /// Read data in flight in the controller (`read_buffer_bytes`).
    read_buffer_used_bytes: u64,
    buffer_used_bytes: u64,
    /// Buffered bytes not yet assigned to a program.
    buffer_pending_bytes: u64,
    /// Garbage collection starts on a unit below this many free program units.
    gc_low_units: i64,
    /// The victims' valid fraction now: a single writer's (`victim_valid_fraction`) unless rewrites arrive young,
    /// then what their share gives (`young_rewrites.rs`), refreshed as each victim is taken.
    victim_valid_fraction: f64,
    /// Live data / raw flash (rho) and a single writer's victims' valid fraction at it.
    live_share_of_raw: f64,
    single_writer_valid_fraction: f64,
    /// Host writes' rewrites of young data, measured where garbage collection runs (a preconditioned drive).
    young_rewrites: Option<YoungRewrites>,
    victim_copy_carry: f64,
    host_programs_per_copy: f64,
    /// Garbage collection in drive-wide steps (`gc_step_copies`): units whose step still has copies to do (host
    /// programs wait on every unit while any has), and the host program units the steps so far have paid for.
    gc_step_units_copying: u32,
    gc_step_credit: f64,
    /// With `gc_step_units`: the unit the next step's turn starts from.
    gc_step_next_unit: usize,
    mean_read_ns: u64,
    /// Commands submitted and not yet completed to the host (what a device-wide in-flight bound limits).
    outstanding_commands: u32,
    pub stats: DeviceResult,
}

/// Book `duration_ns` on a FIFO server (a channel, a link direction) free from `*free_at_ns`, for work ready at
/// `ready_ns`. Returns when it ends. Callers book in event order, so the FIFO order is the arrival order.
#[inline]
fn book(free_at_ns: &mut u64, ready_ns: u64, duration_ns: u64) -> u64 {
    *free_at_ns = ready_ns.max(*free_at_ns) + duration_ns;
    *free_at_ns
}

/// The queue after `i` of `len`, wrapping to 0.
#[inline]
fn next_round_robin(i: usize, len: usize) -> usize {
    if i + 1 == len {
        0
    } else {
        i + 1
    }
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
/// choice: for blocks of many pages greedy converges to FIFO cleaning (Van Houdt, "A mean field model for a class of
/// garbage collection algorithms in flash-based solid state drives", SIGMETRICS 2013), whose victims' valid fraction
/// u is the smaller root of u = exp(-(1 - u) / rho), rho = live data / raw flash: a page written when its block was
/// filled outlives the (1 - u) x raw pages of host writes until that block is cleaned with probability
/// exp(-(1 - u) / rho). Write amplification 1 / (1 - u). `scripts/greedy-gc` simulates greedy page by page: with
/// blocks of 768 pages it gives 0.388 at rho 0.637 (here 0.375, with a 1.3% smaller spare area in that simulation
/// from its free pool: 0.386), with 64-page blocks 0.814 / 0.365 / 0.148 at rho 0.91 / 0.637 / 0.455 (here 0.826 /
/// 0.375 / 0.157). The first-order formula used before, WA = (1 + r) / 2r with spare factor r = 1 / rho - 1, agreed
/// only for small spare areas (0.820 at 0.91) and gave no copies at all from r = 1 (0 at 0.455). It ignores hot/cold
/// separation in the FTL.
pub fn victim_valid_fraction(config: &DeviceConfig) -> f64 {
    match live_share_of_raw(config) {
        Some(rho) => fifo_victim_valid_fraction(rho),
        None => 0.0,
    }
}

/// Live data / raw flash (rho) of a preconditioned drive; None where nothing is collected (fresh, or no live data).
fn live_share_of_raw(config: &DeviceConfig) -> Option<f64> {
    if config.condition == Condition::Fresh {
        return None;
    }
    let raw = (config.capacity_bytes + config.overprovision_bytes) as f64;
    let live = config.capacity_bytes as f64 * (1.0 - config.trimmed_fraction.clamp(0.0, 1.0));
    (live > 0.0 && raw > 0.0).then_some(live / raw)
}

/// The smaller root of u = exp(-(1 - u) / rho) for 0 < rho (1 from rho = 1: no spare area, nothing is ever freed).
/// Newton's method from u = 0: f(u) = u - exp(-(1 - u) / rho) is concave and increasing up to that root, so the
/// iterates rise to it without overshooting.
pub(crate) fn fifo_victim_valid_fraction(rho: f64) -> f64 {
    if rho >= 1.0 {
        return 1.0;
    }
    let mut u = 0.0f64;
    for _ in 0..100 {
        let e = (-(1.0 - u) / rho).exp();
        let step = (u - e) / (1.0 - e / rho);
        u -= step;
        if step.abs() < 1e-12 {
            break;
        }
    }
    u.clamp(0.0, 1.0)
}

/// Whether the drive runs in SLC mode: fresh (secure-erased), with an SLC program time, and its data (the capacity
/// less the never-written `trimmed_fraction`) fits its SLC cache, static and dynamic regions together. TurboWrite
/// then writes every host page in SLC, and overwrites of data in the cache stay there (the firmware reclaims SLC
/// blocks whose data was rewritten; it folds to TLC only when free space runs short).
///
/// Simplifications: the whole run is in SLC mode (the cache does not fill up: the data fits, and runs rewrite it);
/// an SLC program takes one page per unit (`flash_page_bytes` in `slc_program_ns`) where TLC takes
/// `program_unit_bytes` in `program_ns`; an SLC read takes the fastest TLC page read (`read_ns_by_page_type`'s
/// least: one sensing, as the TLC page that needs the fewest), as no datasheet gives the SLC read time.
pub fn slc_mode(config: &DeviceConfig) -> bool {
    let cache_bytes = config.slc_static_bytes.unwrap_or(0) + config.slc_dynamic_bytes.unwrap_or(0);
    let data_bytes = config.capacity_bytes as f64 * (1.0 - config.trimmed_fraction.clamp(0.0, 1.0));
    config.condition == Condition::Fresh
        && config.slc_program_ns.is_some()
        && cache_bytes > 0
        && data_bytes <= cache_bytes as f64
}

/// The flash as a drive in SLC mode programs and reads it (`slc_mode`); `config` unchanged otherwise.
fn in_slc_mode(mut config: DeviceConfig) -> DeviceConfig {
    if let (true, Some(program_ns)) = (slc_mode(&config), config.slc_program_ns) {
        config.program_unit_bytes = config.flash_page_bytes;
        config.program_ns = program_ns;
        let fastest = config.read_ns_by_page_type.iter().copied().min();
        config.read_ns_by_page_type = fastest.into_iter().collect();
    }
    config
}

/// Free program units per flash unit that a rested drive's empty static SLC region adds (`rested`).
///
/// Simplifications: the region's data is spread over every unit as free space in which host programs need no
/// garbage collection, and it programs at the TLC time (`program_ns`; real SLC programs are several times faster
/// and the drive later folds them into TLC, in idle time). Once the region is used up the drive writes as a
/// preconditioned one does; the region is not refilled or folded during the run.
fn rested_region_units(config: &DeviceConfig, nr_units: u32) -> i64 {
    match config.slc_static_bytes {
        Some(bytes) if config.rested => {
            (bytes / config.program_unit_bytes as u64 / nr_units.max(1) as u64) as i64
        }
        _ => 0,
    }
}

impl Device {
    pub fn new(config: DeviceConfig, index: u32, hw_queues: u32, seed: u64) -> Self {
        let config = in_slc_mode(config);
        let nr_units = config.channels * config.units_per_channel;
        let gc_low_units = config.gc_free_units_low as i64;
        let free_program_units_per_unit = match config.condition {
            // A preconditioned drive sits at its garbage-collection threshold: the spare area is spread over
            // blocks as invalid pages, not as free blocks. A rested one also has its static SLC region empty.
            Condition::Preconditioned => gc_low_units + rested_region_units(&config, nr_units),
            Condition::Fresh => {
                ((config.capacity_bytes + config.overprovision_bytes)
                    / config.program_unit_bytes as u64
                    / nr_units.max(1) as u64) as i64
            }
        };
        let mean_read_ns = config.read_ns_by_page_type.iter().sum::<u64>()
            / config.read_ns_by_page_type.len().max(1) as u64;
        let victim_valid_fraction = victim_valid_fraction(&config);
        let live_share_of_raw = live_share_of_raw(&config).unwrap_or(0.0);
        // A rewrite within the last 1/1024 of the raw flash's worth of host writes finds its old copy young
        // (`young_rewrites.rs`).
        let young_rewrites =
            (victim_valid_fraction > 0.0 && victim_valid_fraction < 1.0).then(|| {
                YoungRewrites::new(
                    (config.capacity_bytes + config.overprovision_bytes)
                        / young_rewrites::YOUNG_WINDOW_SHARE_OF_RAW
                        / young_rewrites::LOGICAL_PAGE_BYTES,
                )
            });
        let host_programs_per_copy = if victim_valid_fraction > 0.0 {
            (1.0 - victim_valid_fraction) / victim_valid_fraction
        } else {
            f64::INFINITY
        };
        let mut rng = Pcg64::seed_from_u64(mix(seed ^ 0x5EED_0000_0000 ^ index as u64));
        // Where a drive is in its cycle of garbage-collection steps is random: drives of one run (and the artifact's
        // eight, whose write latencies differ fourfold) do not reclaim in lockstep.
        let gc_step_credit = match config.gc_step_copies {
            Some(step) if host_programs_per_copy.is_finite() => {
                rng.random_range(0.0..1.0) * (nr_units * step) as f64 * host_programs_per_copy
            }
            _ => 0.0,
        };
        let stats = DeviceResult {
            name: config.name.clone(),
            ..Default::default()
        };
        Self {
            index,
            salt: mix(0xD1CE ^ index as u64),
            rng,
            timer_lateness: None,
            timer_handled_at_ns: 0,
            timer_handled_u: 0.0,
            timer_handled_count: 0,
            timer_irq_ns: 0,
            timer_draws: Vec::new(),
            hw_queues: hw_queues.max(1),
            submission_queues: (0..hw_queues.max(1)).map(|_| VecDeque::new()).collect(),
            submission_queues_with_work: Occupancy::new(hw_queues.max(1) as usize),
            next_queue: 0,
            front_end: (0..config.controller_cores.max(1))
                .map(|_| FrontEndCore::IDLE)
                .collect(),
            waiting_writes: VecDeque::new(),
            waiting_reads: VecDeque::new(),
            units: (0..nr_units)
                .map(|_| Unit::new(free_program_units_per_unit))
                .collect(),
            idle_units: (0..nr_units).rev().collect(),
            channel_free_at_ns: vec![0; config.channels as usize],
            read_out_queues: vec![VecDeque::new(); config.channels as usize],
            read_out_queues_with_work: Occupancy::new(config.channels as usize),
            read_out_busy: None,
            read_out_next_channel: 0,
            link_to_host_free_at_ns: 0,
            link_to_device_free_at_ns: 0,
            buffer_fill_free_at_ns: 0,
            reads: Vec::new(),
            read_buffer_used_bytes: 0,
            buffer_used_bytes: 0,
            buffer_pending_bytes: 0,
            gc_low_units,
            victim_valid_fraction,
            live_share_of_raw,
            single_writer_valid_fraction: victim_valid_fraction,
            young_rewrites,
            victim_copy_carry: 0.0,
            host_programs_per_copy,
            gc_step_units_copying: 0,
            gc_step_next_unit: 0,
            gc_step_credit,
            mean_read_ns,
            outstanding_commands: 0,
            stats,
            config,
        }
    }

    /// The host's timers fire this late: null_blk's timer completions (irqmode 2) end that much later.
    pub fn set_timer_lateness(
        &mut self,
        lateness: Option<crate::config::TimerLateness>,
        irq_ns: u64,
    ) {
        self.timer_lateness = lateness;
        self.timer_irq_ns = irq_ns;
    }

    /// The uniform draw of the late timer interrupt that ended `request` (None if no late timer did), once.
    pub fn take_timer_draw(&mut self, request: u32) -> Option<f64> {
        let u = self.timer_draws.get_mut(request as usize)?;
        let taken = std::mem::replace(u, f64::NAN);
        (!taken.is_nan()).then_some(taken)
    }

    /// Garbage collection's cost as the rewrites so far give it (`young_rewrites.rs`): the victims' valid fraction
    /// u = c / (1 + c) for c copies per host page, so a victim's copies pay for (1 - u) / u host programs each.
    pub(super) fn refresh_gc_cost(&mut self) {
        let Some(rewrites) = &self.young_rewrites else {
            return;
        };
        let copies = young_rewrites::copies_per_host_page(
            self.live_share_of_raw,
            self.single_writer_valid_fraction,
            rewrites.long_lived_fraction(),
        );
        if copies.is_finite() && copies > 0.0 {
            self.victim_valid_fraction = copies / (1.0 + copies);
            self.host_programs_per_copy = 1.0 / copies;
        }
    }

    pub fn buffer_used_bytes(&self) -> u64 {
        self.buffer_used_bytes
    }

    /// Free program units over all flash units.
    pub fn free_program_units(&self) -> i64 {
        self.units.iter().map(|unit| unit.free_program_units).sum()
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
}

/// Helpers for the tests of this module's files.
#[cfg(test)]
mod test_support {
    use super::*;
    use crate::engine::{Event, EventQueue};

    /// `count` 4 KiB writes to consecutive offsets on submission queue 0, request ids 0..count.
    pub(super) fn submit_writes(device: &mut Device, events: &mut EventQueue, count: u32) {
        submit_writes_of(device, events, count, 4096);
    }

    /// `count` writes of `bytes` each to consecutive offsets on submission queue 0, request ids 0..count.
    pub(super) fn submit_writes_of(
        device: &mut Device,
        events: &mut EventQueue,
        count: u32,
        bytes: u32,
    ) {
        for i in 0..count {
            let command = Command {
                request: i,
                write: true,
                offset_bytes: i as u64 * bytes as u64,
                bytes,
            };
            device.submit(0, command, events);
        }
    }

    pub(super) fn run_until_idle(device: &mut Device, events: &mut EventQueue) -> Vec<(u64, u32)> {
        let mut completions = Vec::new();
        while let Some((at, event)) = events.pop() {
            match event {
                Event::ControllerDone { core, .. } => device.controller_done(core, events),
                Event::ReadOutDone { .. } => device.read_out_done(events),
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
    pub(super) fn run_until(
        device: &mut Device,
        events: &mut EventQueue,
        done: impl Fn(&Device) -> bool,
    ) {
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

    /// A 4 KiB read.
    pub(super) fn read(request: u32, offset_bytes: u64) -> Command {
        Command {
            request,
            write: false,
            offset_bytes,
            bytes: 4096,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::engine::EventQueue;
    use crate::testkit::small_device;

    #[test]
    fn a_command_is_outstanding_until_the_host_has_taken_its_completion() {
        let mut device = Device::new(small_device(Condition::Fresh), 0, 1, 1);
        let mut events = EventQueue::new();
        device.submit(0, read(1, 0), &mut events);
        device.submit(0, read(2, 16384), &mut events);
        let done = run_until_idle(&mut device, &mut events);
        assert_eq!(done.len(), 2);
        // Posted, but the block layer's completion path has not run yet.
        assert_eq!(device.outstanding_commands(), 2);
        device.command_completed();
        assert_eq!(device.outstanding_commands(), 1);
        assert_eq!(device.stats.max_outstanding_commands, 2);
    }

    #[test]
    fn devices_of_one_run_map_pages_and_draw_jitter_independently() {
        let a = Device::new(small_device(Condition::Fresh), 0, 1, 7);
        let b = Device::new(small_device(Condition::Fresh), 1, 1, 7);
        assert_ne!(a.salt, b.salt);
        let again = Device::new(small_device(Condition::Fresh), 1, 1, 7);
        assert_eq!(b.salt, again.salt, "the same index, the same mapping");
        assert_eq!(
            a.free_program_units(),
            (((1 << 30) + (1 << 26)) / 65536) as i64
        );
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

    /// Worked examples of u = exp(-(1 - u) / rho), each checked by putting u back in: rho 0.91 (the 980 PRO with
    /// nothing freed) 0.8256, exp(-0.1744 / 0.91) = exp(-0.19165) = 0.8256; rho 0.455 (the 970 EVO half trimmed)
    /// 0.1567, exp(-0.8433 / 0.455) = exp(-1.8534) = 0.1567, where the old first-order formula gave 0; rho 0.2
    /// 0.0070. The other root, u = 1, is never the answer below rho = 1 (the negative control: a solver that found
    /// it would give 1 everywhere), and at rho = 1 nothing is freed.
    #[test]
    fn the_victims_valid_fraction_is_the_fifo_fixed_point() {
        for (rho, u) in [(0.91, 0.8256), (0.455, 0.1567), (0.2, 0.0070)] {
            let got = fifo_victim_valid_fraction(rho);
            assert!((got - u).abs() < 1e-4, "rho {rho}: {got}");
            assert!((got - (-(1.0 - got) / rho).exp()).abs() < 1e-9);
        }
        assert_eq!(fifo_victim_valid_fraction(1.0), 1.0);
    }
}
