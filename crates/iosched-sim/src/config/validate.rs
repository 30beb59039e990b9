//! Validation of a `SimConfig`, in one place.
//!
//! The Python side validates a spec before it builds this structure, with messages naming the user's file and
//! option; these checks repeat the structural ones so that no input, however it was made, can make the simulator
//! panic or divide by zero. Each error names the device or job and the field.

use iosched_policy::BlockLayer;

use super::{DeviceConfig, Interface, IoEngine, JobConfig, PageCacheConfig, Rw, SimConfig};
use crate::pagecache::PAGE_BYTES;

fn check(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(message())
    }
}

impl SimConfig {
    /// Check everything the simulator relies on, in a fixed order (the first failure is the error): the host, each
    /// device, each job, then the scheduler's block layer (`block_layer`).
    pub fn validate(&self) -> Result<(), String> {
        check(self.host.cores >= 1, || {
            "host.cores: expected at least 1".into()
        })?;
        // Events carry a core and a hardware queue as u16 (engine::Event); Linux's NR_CPUS is at most 8,192.
        check(self.host.cores <= u16::MAX as u32, || {
            format!("host.cores: expected at most {}", u16::MAX)
        })?;
        check(!self.devices.is_empty(), || {
            "devices: expected at least one device".into()
        })?;
        check(!self.jobs.is_empty(), || {
            "jobs: expected at least one job".into()
        })?;
        check(self.sample_interval_ns > 0, || {
            "sample_interval_ns: expected > 0".into()
        })?;
        self.host.kernel_version()?;
        check((1..=10_000).contains(&self.host.hz), || {
            format!(
                "host.hz: expected the kernel's tick rate, 1 to 10000 per second (CONFIG_HZ: 100, 250, 300 or \
                 1000), got {}",
                self.host.hz
            )
        })?;
        if let Some(t) = &self.host.timer_lateness {
            t.validate("timer_lateness")?;
        }
        if let Some(t) = &self.host.wake_lateness {
            t.validate("wake_lateness")?;
        }
        if let Some(pc) = &self.host.page_cache {
            pc.validate()?;
        }
        for device in &self.devices {
            device.validate()?;
        }
        for job in &self.jobs {
            self.validate_job(job)?;
        }
        self.block_layer().map(|_| ())
    }

    fn validate_job(&self, job: &JobConfig) -> Result<(), String> {
        job.validate_fields()?;
        self.validate_job_devices(job)?;
        self.validate_job_cgroup(job)?;
        self.validate_job_regions(job)?;
        if job.buffered {
            check(self.host.page_cache.is_some(), || {
                job.at("buffered I/O (direct=0) needs a host with a page_cache")
            })?;
            job.validate_buffered()?;
        }
        for &core in &job.cpus_allowed {
            check(core < self.host.cores, || {
                job.at(&format!(
                    "cpus_allowed {core}: host has {} cores",
                    self.host.cores
                ))
            })?;
        }
        Ok(())
    }

    /// The job's devices exist, one I/O of `bs` fits their blocks and capacity, and they all carry the same file
    /// system, one this host prices (a job pays one path per I/O).
    fn validate_job_devices(&self, job: &JobConfig) -> Result<(), String> {
        let mut filesystems = job
            .devices
            .iter()
            .filter_map(|&d| self.devices.get(d as usize))
            .map(|d| d.filesystem.as_deref());
        if let Some(first) = filesystems.next() {
            check(filesystems.all(|fs| fs == first), || {
                job.at("its devices must all carry the same filesystem (or none)")
            })?;
            if let Some(fs) = first {
                check(self.host.filesystems.contains_key(fs), || {
                    job.at(&format!(
                        "filesystem {fs}: the host prices no such direct-I/O path (host.filesystems has {})",
                        self.host
                            .filesystems
                            .keys()
                            .map(String::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            }
        }
        for &d in &job.devices {
            let device = self
                .devices
                .get(d as usize)
                .ok_or_else(|| job.at(&format!("no device with index {d}")))?;
            check(
                job.bs_bytes > 0
                    && job
                        .bs_bytes
                        .is_multiple_of(device.logical_block_bytes as u64),
                || {
                    job.at(&format!(
                        "bs must be a multiple of {}'s {} B blocks",
                        device.name, device.logical_block_bytes
                    ))
                },
            )?;
            check(job.bs_bytes <= u32::MAX as u64, || job.at("bs too large"))?;
            check(
                job.offset_bytes + job.bs_bytes <= device.capacity_bytes,
                || job.at(&format!("offset + bs beyond the end of {}", device.name)),
            )?;
        }
        Ok(())
    }

    /// One weight per cgroup: the elevators weigh a cgroup, not a job.
    fn validate_job_cgroup(&self, job: &JobConfig) -> Result<(), String> {
        check((1..=1000).contains(&job.cgroup_weight), || {
            job.at("cgroup_weight must be within 1..1000")
        })?;
        if let Some(other) = self
            .jobs
            .iter()
            .find(|o| o.cgroup == job.cgroup && o.cgroup_weight != job.cgroup_weight)
        {
            return Err(job.at(&format!(
                "cgroup_weight {} differs from job {}'s {} for the same cgroup {:?}",
                job.cgroup_weight, other.name, other.cgroup_weight, job.cgroup
            )));
        }
        Ok(())
    }

    /// Every clone's region (offset + clone x offset_increment, size or at least one bs long) is on each device.
    /// Runs after `validate_job_devices`, which checked that the device indices exist.
    fn validate_job_regions(&self, job: &JobConfig) -> Result<(), String> {
        let last_clone_offset =
            job.offset_bytes + (job.numjobs as u64 - 1) * job.offset_increment_bytes;
        for &d in &job.devices {
            let capacity = self.devices[d as usize].capacity_bytes;
            check(
                last_clone_offset + job.size_bytes.max(job.bs_bytes) <= capacity,
                || {
                    job.at("offset + (numjobs - 1) x offset_increment + size beyond the end of the device")
                },
            )?;
        }
        Ok(())
    }

    /// The block layer of this run: the spec's `block_layer`, or the scheduler's own; an impossible combination (a
    /// legacy-only scheduler on blk-mq, a blk-mq-only one on the legacy layer, the legacy layer on an NVMe device)
    /// is an error that says why.
    pub fn block_layer(&self) -> Result<BlockLayer, String> {
        let name = &self.scheduler.name;
        let layers = iosched_policy::block_layers(name).ok_or_else(|| {
            format!(
                "unknown scheduler {name:?}: expected one of {}",
                iosched_policy::SCHEDULERS.join(", ")
            )
        })?;
        let layer = match self.scheduler.block_layer.as_deref() {
            None => layers[0],
            Some("legacy") => BlockLayer::Legacy,
            Some("blk-mq") => BlockLayer::Mq,
            Some(other) => {
                return Err(format!(
                    "scheduler.block_layer: expected \"legacy\" or \"blk-mq\", got {other:?}"
                ))
            }
        };
        if !layers.contains(&layer) {
            let hint = match layer {
                BlockLayer::Mq => "; on blk-mq use none, mq-deadline, kyber or bfq",
                BlockLayer::Legacy => "; on the legacy layer use noop, deadline, cfq or bfq",
            };
            return Err(format!(
                "scheduler {name} does not exist on the {} block layer (it runs on: {}){hint}",
                layer.name(),
                layers
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if layer == BlockLayer::Legacy {
            if let Some(d) = self.devices.iter().find(|d| d.interface == Interface::Nvme) {
                return Err(format!(
                    "device {}: the legacy block layer (scheduler {name}) needs a SATA/SCSI device; the Linux NVMe \
                     driver has been blk-mq only since 3.19",
                    d.name
                ));
            }
        }
        Ok(layer)
    }
}

impl PageCacheConfig {
    fn validate(&self) -> Result<(), String> {
        check(
            self.capacity_bytes >= PAGE_BYTES
                && self.copy_bytes_per_s > 0
                && self.dirty_background_ratio <= 100
                && self.dirty_ratio <= 100
                && self.read_ahead_kb >= 4,
            || {
                "host.page_cache: expected capacity >= 4 KiB, copy rate > 0, ratios 0..100, read_ahead_kb >= 4"
                    .into()
            },
        )
    }
}

impl DeviceConfig {
    fn validate(&self) -> Result<(), String> {
        let at = |key: &str| format!("device {}: {key}", self.name);
        check(self.max_hw_queues >= 1 && self.queue_depth >= 1, || {
            at("max_hw_queues and queue_depth must be >= 1")
        })?;
        check(
            self.link_bytes_per_s > 0 && self.channel_bytes_per_s > 0,
            || at("bandwidths must be > 0"),
        )?;
        check(self.channels >= 1 && self.units_per_channel >= 1, || {
            at("channels and units_per_channel must be >= 1")
        })?;
        check(!self.read_ns_by_page_type.is_empty(), || {
            at("read_ns_by_page_type must not be empty")
        })?;
        check(
            self.flash_page_bytes > 0 && self.program_unit_bytes > 0,
            || at("page and program unit sizes must be > 0"),
        )?;
        check(self.block_program_units >= 1, || {
            at("block_program_units must be >= 1")
        })?;
        check(
            self.write_buffer_bytes >= self.program_unit_bytes as u64,
            || at("write_buffer_bytes must hold at least one program unit"),
        )?;
        check(self.buffer_fill_bytes_per_s != Some(0), || {
            at("buffer_fill_bytes_per_s must be > 0 (leave it out to fill at the link's rate)")
        })?;
        check(
            self.scattered_piece_bytes
                .is_none_or(|piece| piece >= 512 && piece.is_power_of_two()),
            || {
                at("scattered_piece_bytes must be a power of two >= 512 (leave it out for sequentially written data)")
            },
        )?;
        check(self.read_buffer_bytes != Some(0), || {
            at("read_buffer_bytes must be > 0 (leave it out for no limit on read data in flight)")
        })?;
        check(self.gc_step_copies != Some(0), || {
            at("gc_step_copies must be >= 1 (leave it out for paced garbage collection)")
        })?;
        check(self.gc_step_units != Some(0), || {
            at("gc_step_units must be >= 1 (leave it out for every reclaiming unit)")
        })?;
        check(
            self.gc_step_units.is_none() || self.gc_step_copies.is_some(),
            || {
                at("gc_step_units needs gc_step_copies (it limits the units of a garbage-collection step)")
            },
        )?;
        check(self.read_suspend_limit != Some(0), || {
            at("read_suspend_limit must be >= 1 (leave it out for no bound; read_suspend_ns = 0 for no suspend)")
        })?;
        check(!self.rested || self.slc_static_bytes.is_some(), || {
            at("rested needs slc_static_bytes (the static SLC region a rested drive starts with empty)")
        })?;
        check(self.slc_static_bytes != Some(0), || {
            at("slc_static_bytes must be >= 1 (leave it out for a drive without a static SLC region)")
        })?;
        check(self.slc_program_ns != Some(0), || {
            at("slc_program_ns must be >= 1 (leave it out for a drive that never programs in SLC mode)")
        })?;
        check(
            self.slc_program_ns.is_none()
                || self.slc_static_bytes.is_some()
                || self.slc_dynamic_bytes.is_some(),
            || {
                at("slc_program_ns needs an SLC cache to program: slc_static_bytes or slc_dynamic_bytes")
            },
        )?;
        check((0.0..=1.0).contains(&self.trimmed_fraction), || {
            at("trimmed_fraction must be within 0..1")
        })?;
        check(self.logical_block_bytes >= 512, || {
            at("logical_block_bytes must be >= 512")
        })?;
        self.null_blk
            .as_ref()
            .map_or(Ok(()), |n| n.validate().map_err(|e| at(&e)))
    }
}

impl JobConfig {
    /// An error about this job's `key`.
    fn at(&self, key: &str) -> String {
        format!("job {}: {key}", self.name)
    }

    /// The checks that need nothing but the job.
    fn validate_fields(&self) -> Result<(), String> {
        check(self.iodepth >= 1, || self.at("iodepth must be >= 1"))?;
        check(self.numjobs >= 1, || self.at("numjobs must be >= 1"))?;
        check(self.iodepth_batch_submit >= 1, || {
            self.at("iodepth_batch_submit must be >= 1")
        })?;
        check(self.rwmixread <= 100, || {
            self.at("rwmixread must be within 0..100")
        })?;
        check(self.runtime_ns > 0, || self.at("runtime must be > 0"))?;
        check(!self.devices.is_empty(), || {
            self.at("needs at least one device")
        })?;
        if let Some(trace) = &self.trace {
            check(trace.time_scale_percent >= 1, || {
                self.at("replay_time_scale must be >= 1")
            })?;
        }
        if let Some(split) = &self.bssplit {
            for shares in split {
                check(
                    !shares.is_empty() && shares.iter().map(|s| s.percent).sum::<u32>() == 100,
                    || self.at("bssplit's shares of a direction must add up to 100"),
                )?;
                check(
                    shares.iter().all(|s| {
                        s.bytes > 0
                            && self.bs_bytes > 0
                            && s.bytes.is_multiple_of(self.bs_bytes)
                            && s.bytes <= u32::MAX as u64
                    }),
                    || self.at("bssplit's sizes must be multiples of bs below 4 GiB"),
                )?;
            }
        }
        check(self.prioclass <= 3 && self.prio <= 7, || {
            self.at("prioclass must be 0..3 and prio 0..7")
        })
    }

    /// What the buffered-I/O model covers (`pagecache.rs`).
    fn validate_buffered(&self) -> Result<(), String> {
        check(matches!(self.rw, Rw::Read | Rw::Write), || {
            self.at("buffered I/O is modelled for sequential rw=read and rw=write only")
        })?;
        check(self.ioengine == IoEngine::Psync, || {
            self.at("buffered I/O is modelled for ioengine=psync only")
        })?;
        check(self.devices.len() == 1, || {
            self.at("a buffered job's file is on one device")
        })?;
        check(
            self.bs_bytes.is_multiple_of(PAGE_BYTES)
                && self.offset_bytes.is_multiple_of(PAGE_BYTES)
                && self.offset_increment_bytes.is_multiple_of(PAGE_BYTES)
                && self.size_bytes > 0,
            || {
                self.at(
                    "buffered I/O needs bs, offset and offset_increment in whole 4 KiB pages and a size",
                )
            },
        )?;
        // Each call reads or writes bs within the process's file (fiojob.py refuses bs > size for every job).
        check(self.bs_bytes <= self.size_bytes, || {
            self.at(&format!(
                "bs {} is larger than size {}: a buffered job's calls stay within its file",
                self.bs_bytes, self.size_bytes
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BlkparseAction, BlockShare, TraceConfig};
    use crate::testkit::{buffered_job, config, job};

    fn error_of(change: impl FnOnce(&mut SimConfig)) -> String {
        let mut c = config("none", vec![job("a", Rw::Randread, 4, 2)]);
        change(&mut c);
        c.validate().expect_err("an invalid config")
    }

    #[test]
    fn a_valid_config_passes_and_runs_on_its_schedulers_own_layer() {
        let c = config("none", vec![job("a", Rw::Randread, 4, 2)]);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.block_layer(), Ok(BlockLayer::Mq));
        let mut sata = config("bfq", vec![buffered_job("b", Rw::Write, 2, 1 << 20)]);
        sata.devices[0].interface = Interface::Sata;
        assert_eq!(sata.validate(), Ok(()));
        sata.scheduler.block_layer = Some("legacy".into());
        assert_eq!(sata.block_layer(), Ok(BlockLayer::Legacy));
    }

    type Change = fn(&mut SimConfig);

    /// The host's and each device's fields.
    #[test]
    fn host_and_device_checks_name_what_is_wrong() {
        let cases: &[(Change, &str)] = &[
            (|c| c.host.cores = 0, "host.cores: expected at least 1"),
            (|c| c.host.cores = 65_536, "host.cores: expected at most 65535"),
            (|c| c.devices.clear(), "devices: expected at least one device"),
            (|c| c.jobs.clear(), "jobs: expected at least one job"),
            (|c| c.sample_interval_ns = 0, "sample_interval_ns: expected > 0"),
            (
                |c| c.host.page_cache.as_mut().unwrap().dirty_ratio = 101,
                "host.page_cache: expected capacity >= 4 KiB, copy rate > 0, ratios 0..100, read_ahead_kb >= 4",
            ),
            (
                |c| c.devices[0].queue_depth = 0,
                "device /dev/nvme0n1: max_hw_queues and queue_depth must be >= 1",
            ),
            (
                |c| c.devices[0].channel_bytes_per_s = 0,
                "device /dev/nvme0n1: bandwidths must be > 0",
            ),
            (
                |c| c.devices[0].units_per_channel = 0,
                "device /dev/nvme0n1: channels and units_per_channel must be >= 1",
            ),
            (
                |c| c.devices[0].read_ns_by_page_type.clear(),
                "device /dev/nvme0n1: read_ns_by_page_type must not be empty",
            ),
            (
                |c| c.devices[0].flash_page_bytes = 0,
                "device /dev/nvme0n1: page and program unit sizes must be > 0",
            ),
            (
                |c| c.devices[0].block_program_units = 0,
                "device /dev/nvme0n1: block_program_units must be >= 1",
            ),
            (
                |c| c.devices[0].write_buffer_bytes = 4096,
                "device /dev/nvme0n1: write_buffer_bytes must hold at least one program unit",
            ),
            (
                |c| c.devices[0].trimmed_fraction = 1.5,
                "device /dev/nvme0n1: trimmed_fraction must be within 0..1",
            ),
            (
                |c| c.devices[0].rested = true,
                "device /dev/nvme0n1: rested needs slc_static_bytes (the static SLC region a rested drive starts with empty)",
            ),
            (
                |c| c.devices[0].slc_static_bytes = Some(0),
                "device /dev/nvme0n1: slc_static_bytes must be >= 1 (leave it out for a drive without a static SLC region)",
            ),
            (
                |c| c.devices[0].slc_program_ns = Some(0),
                "device /dev/nvme0n1: slc_program_ns must be >= 1 (leave it out for a drive that never programs in SLC mode)",
            ),
            (
                |c| c.devices[0].slc_program_ns = Some(200_000),
                "device /dev/nvme0n1: slc_program_ns needs an SLC cache to program: slc_static_bytes or slc_dynamic_bytes",
            ),
            (
                |c| c.devices[0].logical_block_bytes = 256,
                "device /dev/nvme0n1: logical_block_bytes must be >= 512",
            ),
            (
                |c| {
                    c.devices[0].gc_step_copies = Some(8);
                    c.devices[0].gc_step_units = Some(0);
                },
                "device /dev/nvme0n1: gc_step_units must be >= 1 (leave it out for every reclaiming unit)",
            ),
            (
                |c| c.devices[0].gc_step_units = Some(4),
                "device /dev/nvme0n1: gc_step_units needs gc_step_copies (it limits the units of a garbage-collection step)",
            ),
        ];
        for (change, want) in cases {
            assert_eq!(&error_of(*change), *want);
        }
    }

    /// Each job's fields, devices, cgroup, regions and cores.
    #[test]
    fn job_checks_name_the_job_and_its_option() {
        let cases: &[(Change, &str)] = &[
            (|c| c.jobs[0].iodepth = 0, "job a: iodepth must be >= 1"),
            (|c| c.jobs[0].numjobs = 0, "job a: numjobs must be >= 1"),
            (
                |c| c.jobs[0].iodepth_batch_submit = 0,
                "job a: iodepth_batch_submit must be >= 1",
            ),
            (|c| c.jobs[0].rwmixread = 101, "job a: rwmixread must be within 0..100"),
            (|c| c.jobs[0].runtime_ns = 0, "job a: runtime must be > 0"),
            (|c| c.jobs[0].devices.clear(), "job a: needs at least one device"),
            (
                |c| {
                    c.jobs[0].trace = Some(TraceConfig {
                        path: "t.csv".into(),
                        format: None,
                        lun: None,
                        blkparse_action: BlkparseAction::D,
                        time_scale_percent: 0,
                        no_stall: false,
                        sha256: String::new(),
                    })
                },
                "job a: replay_time_scale must be >= 1",
            ),
            (|c| c.jobs[0].prio = 8, "job a: prioclass must be 0..3 and prio 0..7"),
            (
                |c| {
                    let share = |bytes, percent| BlockShare { bytes, percent };
                    c.jobs[0].bssplit = Some([vec![share(4096, 50)], vec![share(4096, 100)]]);
                },
                "job a: bssplit's shares of a direction must add up to 100",
            ),
            (
                |c| {
                    let share = |bytes, percent| BlockShare { bytes, percent };
                    c.jobs[0].bssplit = Some([vec![share(6144, 100)], vec![share(4096, 100)]]);
                },
                "job a: bssplit's sizes must be multiples of bs below 4 GiB",
            ),
            (|c| c.jobs[0].devices = vec![3], "job a: no device with index 3"),
            (
                |c| c.jobs[0].bs_bytes = 1000,
                "job a: bs must be a multiple of /dev/nvme0n1's 512 B blocks",
            ),
            (|c| c.jobs[0].bs_bytes = 1 << 33, "job a: bs too large"),
            (
                |c| c.jobs[0].offset_bytes = (1 << 30) - 512,
                "job a: offset + bs beyond the end of /dev/nvme0n1",
            ),
            (|c| c.jobs[0].cgroup_weight = 0, "job a: cgroup_weight must be within 1..1000"),
            (
                |c| {
                    let mut b = c.jobs[0].clone();
                    b.name = "b".into();
                    b.cgroup_weight = 200;
                    c.jobs.push(b);
                },
                "job a: cgroup_weight 100 differs from job b's 200 for the same cgroup \"\"",
            ),
            (
                |c| c.jobs[0].offset_increment_bytes = 1 << 30,
                "job a: offset + (numjobs - 1) x offset_increment + size beyond the end of the device",
            ),
            (|c| c.jobs[0].cpus_allowed = vec![2], "job a: cpus_allowed 2: host has 2 cores"),
        ];
        for (change, want) in cases {
            assert_eq!(&error_of(*change), *want);
        }
    }

    /// What buffered I/O (direct=0) needs.
    #[test]
    fn buffered_job_checks_say_what_the_model_covers() {
        let cases: &[(Change, &str)] = &[
            (
                |c| {
                    c.jobs[0] = buffered_job("a", Rw::Read, 1, 1 << 20);
                    c.host.page_cache = None;
                },
                "job a: buffered I/O (direct=0) needs a host with a page_cache",
            ),
            (
                |c| c.jobs[0] = buffered_job("a", Rw::Randread, 1, 1 << 20),
                "job a: buffered I/O is modelled for sequential rw=read and rw=write only",
            ),
            (
                |c| {
                    c.jobs[0] = buffered_job("a", Rw::Read, 1, 1 << 20);
                    c.jobs[0].ioengine = IoEngine::Libaio;
                },
                "job a: buffered I/O is modelled for ioengine=psync only",
            ),
            (
                |c| {
                    c.devices.push(c.devices[0].clone());
                    c.jobs[0] = buffered_job("a", Rw::Read, 1, 1 << 20);
                    c.jobs[0].devices = vec![0, 1];
                },
                "job a: a buffered job's file is on one device",
            ),
            (
                |c| {
                    c.jobs[0] = buffered_job("a", Rw::Read, 1, 1 << 20);
                    c.jobs[0].offset_bytes = 512;
                },
                "job a: buffered I/O needs bs, offset and offset_increment in whole 4 KiB pages and a size",
            ),
            (
                |c| c.jobs[0] = buffered_job("a", Rw::Read, 1, 8192),
                "job a: bs 65536 is larger than size 8192: a buffered job's calls stay within its file",
            ),
        ];
        for (change, want) in cases {
            assert_eq!(&error_of(*change), *want);
        }
    }

    #[test]
    fn the_first_failing_check_is_the_error() {
        let e = error_of(|c| {
            c.jobs[0].iodepth = 0;
            c.jobs[0].cpus_allowed = vec![9];
            c.scheduler.name = "nope".into();
        });
        assert_eq!(e, "job a: iodepth must be >= 1");
    }

    #[test]
    fn impossible_scheduler_and_layer_combinations_say_why() {
        let e = error_of(|c| c.scheduler.name = "bfq-mq".into());
        assert!(
            e.starts_with("unknown scheduler \"bfq-mq\": expected one of none, "),
            "{e}"
        );
        let e = error_of(|c| c.scheduler.block_layer = Some("sq".into()));
        assert_eq!(
            e,
            "scheduler.block_layer: expected \"legacy\" or \"blk-mq\", got \"sq\""
        );
        let e = error_of(|c| c.scheduler.name = "cfq".into());
        assert!(
            e.starts_with(
                "device /dev/nvme0n1: the legacy block layer (scheduler cfq) needs a SATA/SCSI"
            ),
            "{e}"
        );
        let e = error_of(|c| {
            c.devices[0].interface = Interface::Sata;
            c.scheduler.name = "kyber".into();
            c.scheduler.block_layer = Some("legacy".into());
        });
        assert_eq!(
            e,
            "scheduler kyber does not exist on the legacy block layer (it runs on: blk-mq); on the legacy layer \
             use noop, deadline, cfq or bfq"
        );
    }
}

/// Whatever the Python side sends, the simulator returns a result or an error: `validate` keeps out what would
/// make it panic, divide by zero or loop forever.
#[cfg(test)]
mod never_panics {
    use super::*;
    use crate::testkit::{config, job};
    use proptest::prelude::*;

    /// One of `values`: the last (one the simulator must refuse) once in 24 draws, else any other.
    fn pick<T: Copy + std::fmt::Debug + 'static>(values: &'static [T]) -> impl Strategy<Value = T> {
        let valid = values.len() as u32 - 1;
        (0..24 * valid).prop_map(move |r| values[if r == 0 { valid } else { r % valid } as usize])
    }

    fn engine(i: usize) -> IoEngine {
        [IoEngine::IoUring, IoEngine::Libaio, IoEngine::Psync][i]
    }

    fn rw(i: usize) -> Rw {
        [
            Rw::Read,
            Rw::Write,
            Rw::Randread,
            Rw::Randwrite,
            Rw::Randrw,
            Rw::Readwrite,
        ][i]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Each value is mostly one the simulator accepts, sometimes one it must refuse (the last of each list), so
        /// that both valid configs in unusual combinations and invalid ones are tried.
        #[test]
        fn any_config_gives_a_result_or_an_error(
            cores in pick(&[1, 2, 3, 0]), queue_depth in pick(&[1, 2, 64, 0]), hw_queues in pick(&[1, 4, 0]),
            units in pick(&[1, 2, 0]), block in pick(&[512, 512, 4096, 256]), program_unit in pick(&[4096, 65536, 0]),
            // Buffers down to one program unit, smaller than one plus the largest request (128 KiB): they once
            // deadlocked (a write that never fit while too little was buffered to program); writes now go in by pieces.
            buffer in pick(&[1 << 20, 65536, 4096, 2048]),
            scheduler in prop::sample::select(iosched_policy::SCHEDULERS.to_vec()),
            legacy in prop::bool::weighted(0.3), sata in any::<bool>(),
            iodepth in pick(&[1, 4, 32, 0]), numjobs in pick(&[1, 2, 0]), batch in pick(&[1, 4, 0]),
            rw_index in 0usize..6, engine_index in 0usize..3,
            bs in pick(&[4096, 4096, 65536, 512, 1000]),
            offset in pick(&[0, 1 << 20, (1 << 30) - (4 << 20), 1 << 30]),
            size in pick(&[0, 8192, 1 << 20, 1 << 31]),
            buffered in prop::bool::weighted(0.25), stonewall in any::<bool>(), time_based in any::<bool>(),
            rate_iops in prop::sample::select(vec![0, 1, 50_000]),
            cpus in prop::collection::vec(0u32..4, 0..3),
            runtime_ns in pick(&[200_000, 1_000_000, 0]),
        ) {
            let mut j = job("a", rw(rw_index), iodepth, numjobs);
            (j.iodepth_batch_submit, j.ioengine, j.bs_bytes) = (batch, engine(engine_index), bs);
            (j.offset_bytes, j.size_bytes, j.offset_increment_bytes) = (offset, size, size);
            (j.buffered, j.time_based, j.rate_iops, j.cpus_allowed) = (buffered, time_based, rate_iops, cpus);
            (j.ramp_ns, j.runtime_ns) = (0, runtime_ns);
            let mut second = job("b", Rw::Randwrite, 2, 1);
            (second.stonewall, second.runtime_ns, second.ramp_ns) = (stonewall, 100_000, 0);
            let mut c = config(scheduler, vec![j, second]);
            c.host.cores = cores;
            c.scheduler.block_layer = legacy.then(|| "legacy".into());
            let d = &mut c.devices[0];
            (d.queue_depth, d.max_hw_queues, d.units_per_channel) = (queue_depth, hw_queues, units);
            (d.logical_block_bytes, d.program_unit_bytes, d.write_buffer_bytes) = (block, program_unit, buffer);
            if sata {
                d.interface = Interface::Sata;
            }
            let outcome = crate::simulate(&c, &mut |_| true);
            // An error for an invalid config (validate's), and only then.
            prop_assert_eq!(outcome.err(), c.validate().err());
        }
    }
}
