//! fio-like job generation: what each process issues next (direction, device, offset, size).
//!
//! Random offsets are drawn with replacement (fio's `norandommap`), uniformly or from the job's
//! `random_distribution` (`distribution.rs`); sequential jobs walk their region
//! and wrap at its end. With several devices (fio's colon-separated filename), I/Os go to them round-robin
//! (fio's default `file_service_type=roundrobin`).
//!
//! A job with a trace (fio's `read_iolog`) replays it instead (`TraceReplay`). Each record keeps its direction.
//! Its offset is aligned down to the logical block and wraps into the job's region (modulo its size, so offsets
//! inside it stay as recorded; an I/O that would run past the region's end moves back to end there). Its size is
//! rounded up to whole logical blocks (at most the region). With timing, record k is due at
//! `start + t_k * 100 / replay_time_scale`; the simulator issues it then or when an iodepth slot frees, whichever
//! is later, and never before the record ahead of it. A late replay catches up (the schedule is absolute), where
//! fio delays each I/O relative to the previous one's issue, so a backlog shifts the rest of the trace there.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufReader;

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

use crate::config::{BlockShare, JobConfig, Rw, TraceConfig};
use crate::distribution::BlockSampler;
use crate::trace::{TraceReader, TraceRecord};

pub struct IoPlan {
    pub write: bool,
    /// Index into the job's device list.
    pub device_slot: usize,
    pub offset_bytes: u64,
    pub bytes: u32,
}

pub struct Generator {
    rng: Pcg64,
    /// fio's random_distribution where the job sets one; else random blocks are drawn uniformly.
    sampler: Option<BlockSampler>,
    rw: Rw,
    rwmixread: u32,
    block_bytes: u64,
    region_offset_bytes: u64,
    region_blocks: u64,
    next_sequential_block: Vec<u64>,
    next_device: usize,
    device_count: usize,
    /// fio's bssplit per direction, as (size in blocks of `block_bytes`, cumulative percent).
    split: Option<[Vec<(u64, u32)>; 2]>,
}

/// A stable, independent stream per (seed, job, clone): the same inputs always give the same I/O sequence.
pub fn process_rng(seed: u64, job: u32, clone: u32) -> Pcg64 {
    let stream = ((job as u64) << 32) | clone as u64;
    Pcg64::seed_from_u64(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17))
}

impl Generator {
    pub fn new(job: &JobConfig, mut rng: Pcg64, region_bytes: u64) -> Self {
        let block_bytes = job.bs_bytes.max(1);
        let region_blocks = (region_bytes / block_bytes).max(1);
        let sampler = job
            .random_distribution
            .as_ref()
            .map(|d| BlockSampler::new(d, region_blocks, &mut rng));
        let cumulative = |shares: &Vec<BlockShare>| {
            let mut sum = 0;
            shares
                .iter()
                .map(|s| {
                    sum += s.percent;
                    ((s.bytes / block_bytes).max(1), sum)
                })
                .collect::<Vec<_>>()
        };
        Self {
            rng,
            sampler,
            rw: job.rw,
            rwmixread: job.rwmixread,
            block_bytes,
            region_offset_bytes: job.offset_bytes,
            region_blocks,
            next_sequential_block: vec![0; job.devices.len().max(1)],
            next_device: 0,
            device_count: job.devices.len().max(1),
            split: job
                .bssplit
                .as_ref()
                .map(|[r, w]| [cumulative(r), cumulative(w)]),
        }
    }

    /// How many blocks the next I/O of this direction spans: one, or a draw from the job's bssplit (fio draws a
    /// percentage and takes the first size whose cumulative share reaches it).
    fn blocks(&mut self, write: bool) -> u64 {
        let Some(split) = &self.split else {
            return 1;
        };
        let shares = &split[write as usize];
        let draw = self.rng.random_range(1..=100u32);
        let blocks = shares
            .iter()
            .find(|&&(_, cumulative)| draw <= cumulative)
            .or(shares.last())
            .map_or(1, |&(blocks, _)| blocks);
        blocks.min(self.region_blocks)
    }

    /// Address the region starting at `offset_bytes` instead of the job's offset (fio's `offset_increment`).
    pub fn at_offset(mut self, offset_bytes: u64) -> Self {
        self.region_offset_bytes = offset_bytes;
        self
    }

    pub fn rng(&mut self) -> &mut Pcg64 {
        &mut self.rng
    }

    pub fn next_io(&mut self) -> IoPlan {
        let write = match self.rw {
            Rw::Read | Rw::Randread => false,
            Rw::Write | Rw::Randwrite => true,
            Rw::Randrw | Rw::Readwrite => self.rng.random_range(0..100u32) >= self.rwmixread,
        };
        let device_slot = self.next_device;
        self.next_device = (self.next_device + 1) % self.device_count;
        let blocks = self.blocks(write);
        let block = match self.rw {
            // An I/O longer than one block that would run past the region's end moves back to end there.
            Rw::Randread | Rw::Randwrite | Rw::Randrw => match &self.sampler {
                Some(sampler) => sampler.next_block(&mut self.rng),
                None => self.rng.random_range(0..self.region_blocks),
            }
            .min(self.region_blocks - blocks),
            Rw::Read | Rw::Write | Rw::Readwrite => {
                let cursor = &mut self.next_sequential_block[device_slot];
                if *cursor + blocks > self.region_blocks {
                    *cursor = 0; // the walk wraps where the I/O would not fit
                }
                let block = *cursor;
                *cursor = (*cursor + blocks) % self.region_blocks;
                block
            }
        };
        IoPlan {
            write,
            device_slot,
            offset_bytes: self.region_offset_bytes + block * self.block_bytes,
            bytes: (blocks * self.block_bytes) as u32,
        }
    }
}

/// One process's replay of a trace: a streaming reader and a lookahead of at most one submission batch.
pub struct TraceReplay {
    reader: TraceReader<BufReader<File>>,
    lookahead: VecDeque<TraceRecord>,
    /// The reader has no more records (and the replay does not loop, or a pass found none).
    exhausted: bool,
    /// `time_based`: start again from the first record when the trace ends.
    looping: bool,
    records_this_pass: u64,
    /// Added to record times from the second pass on: whole passes of the trace's span plus one mean gap.
    pass_offset_ns: u64,
    no_stall: bool,
    time_scale_percent: u64,
    start_ns: u64,
    region_offset_bytes: u64,
    region_blocks: u64,
    block_bytes: u64,
    next_device: usize,
    device_count: usize,
}

impl TraceReplay {
    /// `region_bytes`: the job's region on each device; `block_bytes`: the devices' (largest) logical block.
    pub fn open(
        config: &TraceConfig,
        job: &JobConfig,
        region_bytes: u64,
        block_bytes: u64,
    ) -> Result<Self, String> {
        let reader = TraceReader::open(
            &config.path,
            config.format,
            config.lun.as_deref(),
            config.blkparse_action,
        )
        .map_err(|e| e.to_string())?;
        let block_bytes = block_bytes.max(1);
        Ok(Self {
            reader,
            lookahead: VecDeque::new(),
            exhausted: false,
            looping: job.time_based,
            records_this_pass: 0,
            pass_offset_ns: 0,
            no_stall: config.no_stall,
            time_scale_percent: config.time_scale_percent.max(1) as u64,
            start_ns: job.start_ns,
            region_offset_bytes: job.offset_bytes,
            region_blocks: (region_bytes / block_bytes).max(1),
            block_bytes,
            next_device: 0,
            device_count: job.devices.len().max(1),
        })
    }

    /// Read ahead until `n` records wait (or the trace ends); returns how many wait: 0 means the replay is over.
    pub fn ready(&mut self, n: usize) -> Result<usize, String> {
        while self.lookahead.len() < n && !self.exhausted {
            match self.reader.next_record().map_err(|e| e.to_string())? {
                Some(mut record) => {
                    record.time_ns = record.time_ns.saturating_add(self.pass_offset_ns);
                    self.records_this_pass += 1;
                    self.lookahead.push_back(record);
                }
                None if self.looping && self.records_this_pass > 0 => {
                    // The next pass starts one mean inter-arrival gap after the span of this one.
                    let span = self.reader.last_time_ns;
                    let records = self.reader.all_records;
                    let gap = if records > 1 { span / (records - 1) } else { 0 };
                    let pass_ns = (span + gap).max(1);
                    self.pass_offset_ns = self.pass_offset_ns.saturating_add(pass_ns);
                    self.records_this_pass = 0;
                    self.reader.all_records = 0;
                    self.reader.rewind().map_err(|e| e.to_string())?;
                }
                None => self.exhausted = true,
            }
        }
        Ok(self.lookahead.len())
    }

    /// When the next waiting record is due, in simulated time: None without timing (`replay_no_stall`) or when
    /// none waits.
    pub fn next_due_ns(&self) -> Option<u64> {
        if self.no_stall {
            return None;
        }
        let record = self.lookahead.front()?;
        let scaled = record.time_ns as u128 * 100 / self.time_scale_percent as u128;
        Some(
            self.start_ns
                .saturating_add(scaled.min(u64::MAX as u128) as u64),
        )
    }

    /// The next waiting record as an I/O of this job (`ready` must have said one waits).
    pub fn next_io(&mut self) -> IoPlan {
        let record = self
            .lookahead
            .pop_front()
            .expect("TraceReplay::next_io called without a ready record");
        let device_slot = self.next_device;
        self.next_device = (self.next_device + 1) % self.device_count;
        let (block, blocks) = self.place(record.offset_bytes, record.bytes);
        IoPlan {
            write: record.write,
            device_slot,
            offset_bytes: self.region_offset_bytes + block * self.block_bytes,
            bytes: (blocks * self.block_bytes) as u32,
        }
    }

    /// First block (within the region) and length in blocks of a record: the length rounded up to whole blocks
    /// (at most the region); the offset aligned down, taken modulo the region, and moved back if the I/O would
    /// run past the region's end.
    fn place(&self, offset_bytes: u64, bytes: u64) -> (u64, u64) {
        let most = self.region_blocks.min(u32::MAX as u64 / self.block_bytes);
        let blocks = bytes.div_ceil(self.block_bytes).clamp(1, most);
        let first = (offset_bytes / self.block_bytes) % self.region_blocks;
        (first.min(self.region_blocks - blocks), blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rw: Rw, devices: Vec<u32>) -> JobConfig {
        JobConfig {
            rwmixread: 70,
            offset_bytes: 1 << 20,
            devices,
            ..JobConfig::new("j", rw, 1)
        }
    }

    #[test]
    fn bssplit_draws_each_size_by_its_share_and_keeps_every_io_in_the_region() {
        // bssplit=4k/25:16k/75 for reads over a 64 KiB region (16 blocks of 4 KiB): of 4,000 reads about 1,000
        // are 4 KiB and 3,000 are 16 KiB (binomial sd ~27), each aligned to 4 KiB and ending by 64 KiB.
        let mut j = job(Rw::Randread, vec![0]);
        j.offset_bytes = 0;
        let share = |bytes, percent| BlockShare { bytes, percent };
        j.bssplit = Some([
            vec![share(4096, 25), share(16384, 75)],
            vec![share(4096, 100)],
        ]);
        let mut g = Generator::new(&j, process_rng(1, 0, 0), 65536);
        let plans: Vec<IoPlan> = (0..4000).map(|_| g.next_io()).collect();
        let small = plans.iter().filter(|p| p.bytes == 4096).count();
        assert!(
            (900..=1100).contains(&small),
            "{small} of 4,000 reads of 4 KiB"
        );
        assert!(plans.iter().all(|p| p.bytes == 4096 || p.bytes == 16384));
        assert!(plans
            .iter()
            .all(|p| p.offset_bytes % 4096 == 0 && p.offset_bytes + p.bytes as u64 <= 65536));
        // A sequential walk advances by each I/O's own size, and wraps where the next would not fit: with 16 KiB
        // always, 0, 16, 32, 48 KiB, then 0 again.
        let mut seq = job(Rw::Read, vec![0]);
        seq.offset_bytes = 0;
        seq.bssplit = Some([vec![share(16384, 100)], vec![share(16384, 100)]]);
        let mut g = Generator::new(&seq, process_rng(1, 0, 0), 65536);
        let offsets: Vec<u64> = (0..5).map(|_| g.next_io().offset_bytes / 1024).collect();
        assert_eq!(offsets, [0, 16, 32, 48, 0]);
    }

    #[test]
    fn random_offsets_stay_block_aligned_inside_the_region() {
        let mut g = Generator::new(&job(Rw::Randread, vec![0]), process_rng(1, 0, 0), 64 * 4096);
        for _ in 0..1000 {
            let io = g.next_io();
            assert!(!io.write);
            assert!(io.offset_bytes >= 1 << 20 && io.offset_bytes < (1 << 20) + 64 * 4096);
            assert_eq!(io.offset_bytes % 4096, 0);
        }
    }

    #[test]
    fn sequential_walks_and_wraps_per_device_round_robin() {
        let mut g = Generator::new(&job(Rw::Write, vec![0, 1]), process_rng(1, 0, 0), 2 * 4096);
        let got: Vec<(usize, u64)> = (0..6)
            .map(|_| g.next_io())
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
        let reads = (0..10_000).filter(|_| !g.next_io().write).count();
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
            (0..8).map(|_| g.next_io().offset_bytes).collect::<Vec<_>>()
        };
        assert_eq!(offsets(0), offsets(0));
        assert_ne!(offsets(0), offsets(1));
    }

    fn trace_file(name: &str, text: &str) -> String {
        let path =
            std::env::temp_dir().join(format!("iosched-workload-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn trace_job(devices: Vec<u32>) -> JobConfig {
        JobConfig {
            time_based: false,
            ..job(Rw::Read, devices)
        }
    }

    fn replay(
        path: &str,
        job: &JobConfig,
        scale: u32,
        no_stall: bool,
        region_bytes: u64,
    ) -> TraceReplay {
        let config = TraceConfig {
            path: path.into(),
            format: None,
            lun: None,
            blkparse_action: Default::default(),
            time_scale_percent: scale,
            no_stall,
            sha256: String::new(),
        };
        TraceReplay::open(&config, job, region_bytes, 512).unwrap()
    }

    /// (due time, write, offset in the region, bytes) of every record, reading one at a time.
    fn drain(r: &mut TraceReplay, limit: usize) -> Vec<(Option<u64>, bool, u64, u32)> {
        let mut out = Vec::new();
        while out.len() < limit && r.ready(1).unwrap() == 1 {
            let due = r.next_due_ns();
            let io = r.next_io();
            out.push((due, io.write, io.offset_bytes - (1 << 20), io.bytes));
        }
        out
    }

    const SYSTOR: &str = "Timestamp,Response,IOType,LUN,Offset,Size\n\
        100.000,0.001,R,0,0,4096\n\
        100.001,0.001,W,0,10000,1000\n\
        100.004,0.001,R,0,65536,4096\n";

    #[test]
    fn replay_keeps_directions_aligns_sizes_and_wraps_offsets_into_the_region() {
        let path = trace_file("wrap.csv", SYSTOR);
        let mut j = trace_job(vec![0]);
        j.start_ns = 5_000;
        // A 32 KiB region: 65536 wraps to 0; 10000 B aligns down to 9728 and 1000 B rounds up to 1024.
        let got = drain(&mut replay(&path, &j, 100, false, 32 * 1024), 10);
        assert_eq!(
            got,
            vec![
                (Some(5_000), false, 0, 4096),
                (Some(1_005_000), true, 9728, 1024),
                (Some(4_005_000), false, 0, 4096),
            ]
        );
        // An I/O longer than what is left of the region moves back so that it fits.
        let r = replay(&path, &j, 100, false, 32 * 1024);
        assert_eq!(r.place(31 * 1024, 4096), (56, 8));
        assert_eq!(r.place(0, 1 << 20), (0, 64), "at most the region");
    }

    #[test]
    fn time_scale_is_a_percentage_of_the_recorded_rate_and_no_stall_ignores_time() {
        let path = trace_file("scale.csv", SYSTOR);
        let j = trace_job(vec![0]);
        let due = |scale, no_stall| {
            drain(&mut replay(&path, &j, scale, no_stall, 1 << 30), 10)
                .iter()
                .map(|x| x.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            due(100, false),
            vec![Some(0), Some(1_000_000), Some(4_000_000)]
        );
        assert_eq!(
            due(200, false),
            vec![Some(0), Some(500_000), Some(2_000_000)]
        );
        assert_eq!(
            due(50, false),
            vec![Some(0), Some(2_000_000), Some(8_000_000)]
        );
        assert_eq!(due(100, true), vec![None, None, None]);
    }

    #[test]
    fn a_time_based_replay_loops_one_span_plus_a_mean_gap_later() {
        let path = trace_file("loop.csv", SYSTOR);
        let mut j = trace_job(vec![0, 1]);
        let once = drain(&mut replay(&path, &j, 100, false, 1 << 30), 100);
        assert_eq!(
            once.len(),
            3,
            "without time_based the replay ends with the trace"
        );
        j.time_based = true;
        let got = drain(&mut replay(&path, &j, 100, false, 1 << 30), 7);
        let due: Vec<u64> = got.iter().map(|x| x.0.unwrap()).collect();
        // span 4 ms over 3 records: mean gap 2 ms, so each pass starts 6 ms after the previous one.
        assert_eq!(
            due,
            vec![0, 1_000_000, 4_000_000, 6_000_000, 7_000_000, 10_000_000, 12_000_000]
        );
        let mut r = replay(&path, &j, 100, false, 1 << 30);
        let slots: Vec<usize> = (0..4)
            .map(|_| {
                r.ready(1).unwrap();
                r.next_io().device_slot
            })
            .collect();
        assert_eq!(
            slots,
            vec![0, 1, 0, 1],
            "devices round-robin as for generated I/O"
        );
    }

    #[test]
    fn a_replay_that_selects_nothing_ends_instead_of_looping() {
        let path = trace_file("none.csv", SYSTOR);
        let mut j = trace_job(vec![0]);
        j.time_based = true;
        let config = TraceConfig {
            path: path.clone(),
            format: None,
            lun: Some("3".into()),
            blkparse_action: Default::default(),
            time_scale_percent: 100,
            no_stall: true,
            sha256: String::new(),
        };
        let mut r = TraceReplay::open(&config, &j, 1 << 30, 512).unwrap();
        assert_eq!(r.ready(4).unwrap(), 0);
    }
}
