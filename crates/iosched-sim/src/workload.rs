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

    /// Address the region starting at `offset_bytes` instead of the job's offset (fio's `offset_increment`).
    pub fn at_offset(mut self, offset_bytes: u64) -> Self {
        self.region_offset_bytes = offset_bytes;
        self
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IoEngine;

    fn job(rw: Rw, devices: Vec<u32>) -> JobConfig {
        JobConfig {
            name: "j".into(),
            rw,
            rwmixread: 70,
            bs_bytes: 4096,
            iodepth: 1,
            iodepth_batch_submit: 1,
            numjobs: 1,
            ioengine: IoEngine::IoUring,
            start_ns: 0,
            ramp_ns: 0,
            runtime_ns: 1,
            time_based: true,
            rate_iops: 0,
            thinktime_ns: 0,
            prioclass: 0,
            prio: 4,
            cgroup: String::new(),
            cgroup_weight: 100,
            cpus_allowed: Vec::new(),
            cpus_split: false,
            offset_bytes: 1 << 20,
            size_bytes: 0,
            devices,
            offset_increment_bytes: 0,
            buffered: false,
            invalidate: true,
            stonewall: false,
        }
    }

    #[test]
    fn random_offsets_stay_block_aligned_inside_the_region() {
        let mut g = Generator::new(&job(Rw::Randread, vec![0]), process_rng(1, 0, 0), 64 * 4096);
        for _ in 0..1000 {
            let io = g.next();
            assert!(!io.write);
            assert!(io.offset_bytes >= 1 << 20 && io.offset_bytes < (1 << 20) + 64 * 4096);
            assert_eq!(io.offset_bytes % 4096, 0);
        }
    }

    #[test]
    fn sequential_walks_and_wraps_per_device_round_robin() {
        let mut g = Generator::new(&job(Rw::Write, vec![0, 1]), process_rng(1, 0, 0), 2 * 4096);
        let got: Vec<(usize, u64)> = (0..6)
            .map(|_| g.next())
            .map(|io| (io.device_slot, io.offset_bytes - (1 << 20)))
            .collect();
        assert_eq!(
            got,
            vec![(0, 0), (1, 0), (0, 4096), (1, 4096), (0, 0), (1, 0)]
        );
    }

    #[test]
    fn rwmixread_sets_the_share_of_reads() {
        let mut g = Generator::new(&job(Rw::Randrw, vec![0]), process_rng(1, 0, 0), 1 << 30);
        let reads = (0..10_000).filter(|_| !g.next().write).count();
        assert!((6_800..7_200).contains(&reads), "{reads}");
    }

    #[test]
    fn streams_differ_between_processes_and_repeat_for_the_same_one() {
        let offsets = |clone: u32| {
            let mut g = Generator::new(
                &job(Rw::Randread, vec![0]),
                process_rng(7, 0, clone),
                1 << 30,
            );
            (0..8).map(|_| g.next().offset_bytes).collect::<Vec<_>>()
        };
        assert_eq!(offsets(0), offsets(0));
        assert_ne!(offsets(0), offsets(1));
    }
}
