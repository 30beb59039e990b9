//! fio-like job generation: what each process issues next (direction, device, offset, size).
//!
//! Random offsets are drawn uniformly with replacement (fio's `norandommap`); sequential jobs walk their region
//! and wrap at its end. With several devices (fio's colon-separated filename), I/Os go to them round-robin
//! (fio's default `file_service_type=roundrobin`).

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

use crate::config::{JobConfig, Rw};

pub struct IoPlan {
    pub write: bool,
    /// Index into the job's device list.
    pub device_slot: usize,
    pub offset_bytes: u64,
    pub bytes: u32,
}

pub struct Generator {
    rng: Pcg64,
    rw: Rw,
    rwmixread: u32,
    block_bytes: u64,
    region_offset_bytes: u64,
    region_blocks: u64,
    next_sequential_block: Vec<u64>,
    next_device: usize,
    device_count: usize,
}

/// A stable, independent stream per (seed, job, clone): the same inputs always give the same I/O sequence.
pub fn process_rng(seed: u64, job: u32, clone: u32) -> Pcg64 {
    let stream = ((job as u64) << 32) | clone as u64;
    Pcg64::seed_from_u64(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17))
}

impl Generator {
    pub fn new(job: &JobConfig, rng: Pcg64, region_bytes: u64) -> Self {
        let block_bytes = job.bs_bytes.max(1);
        Self {
            rng,
            rw: job.rw,
            rwmixread: job.rwmixread,
            block_bytes,
            region_offset_bytes: job.offset_bytes,
            region_blocks: (region_bytes / block_bytes).max(1),
            next_sequential_block: vec![0; job.devices.len().max(1)],
            next_device: 0,
            device_count: job.devices.len().max(1),
        }
    }

    pub fn rng(&mut self) -> &mut Pcg64 {
        &mut self.rng
    }

    pub fn next(&mut self) -> IoPlan {
        let write = match self.rw {
            Rw::Read | Rw::Randread => false,
            Rw::Write | Rw::Randwrite => true,
            Rw::Randrw | Rw::Readwrite => self.rng.random_range(0..100u32) >= self.rwmixread,
        };
        let device_slot = self.next_device;
        self.next_device = (self.next_device + 1) % self.device_count;
        let block = match self.rw {
            Rw::Randread | Rw::Randwrite | Rw::Randrw => {
                self.rng.random_range(0..self.region_blocks)
            }
            Rw::Read | Rw::Write | Rw::Readwrite => {
                let cursor = &mut self.next_sequential_block[device_slot];
                let block = *cursor;
                *cursor = (*cursor + 1) % self.region_blocks;
                block
            }
        };
        IoPlan {
            write,
            device_slot,
            offset_bytes: self.region_offset_bytes + block * self.block_bytes,
            bytes: self.block_bytes as u32,
        }
    }
}
