//! Test and bench helpers: configurations built from the real presets in `presets/`.
//!
//! Python is the authority that reads presets for users; this reads the same files with serde's strict field
//! checking, so a preset whose parameters drift from `DeviceConfig`/`HostConfig` fails here too.

#![allow(dead_code)]

use std::path::PathBuf;

use iosched_sim::config::{
    DeviceConfig, HostConfig, IoEngine, JobConfig, RampEnd, Rw, SchedulerConfig, SimConfig,
};

pub fn presets_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../presets")
}

fn params(kind: &str, name: &str) -> toml::Table {
    let path = presets_dir().join(kind).join(format!("{name}.toml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut table: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match table.remove("params") {
        Some(toml::Value::Table(params)) => params,
        _ => panic!("{}: no [params] table", path.display()),
    }
}

pub fn device(name: &str, path: &str) -> DeviceConfig {
    let mut p = params("devices", name);
    p.insert("name".into(), toml::Value::String(path.into()));
    p.try_into()
        .unwrap_or_else(|e| panic!("device preset {name}: {e}"))
}

pub fn host(name: &str) -> HostConfig {
    params("hosts", name)
        .try_into()
        .unwrap_or_else(|e| panic!("host preset {name}: {e}"))
}

/// A time-based io_uring job of `numjobs` processes split over `cores`, on `devices`.
pub fn job(
    name: &str,
    rw: Rw,
    bs_bytes: u64,
    iodepth: u32,
    numjobs: u32,
    cores: &[u32],
    devices: &[u32],
) -> JobConfig {
    JobConfig {
        bs_bytes,
        iodepth,
        numjobs,
        ramp_ns: 10_000_000,
        cpus_allowed: cores.to_vec(),
        cpus_split: true,
        devices: devices.to_vec(),
        ..JobConfig::new(name, rw, 100_000_000)
    }
}

/// Seed 000's machine: the Xeon host with `ssds` Samsung 980 PROs, scheduler `none`.
pub fn seed000(ssds: u32, jobs: Vec<JobConfig>) -> SimConfig {
    SimConfig {
        seed: 1,
        host: host("xeon-silver-4210r-10c"),
        devices: (0..ssds)
            .map(|i| device("samsung-980pro-1tb", &format!("/dev/nvme{i}n1")))
            .collect(),
        scheduler: SchedulerConfig {
            name: "none".into(),
            tunables: Vec::new(),
            nr_requests: None,
            block_layer: None,
        },
        jobs,
        sample_interval_ns: 10_000_000,
        ramp_end: RampEnd::Nominal,
        request_trace: false,
    }
}

/// The bench scenario of the issue: 10 T-4KiB-apps (4 KiB random read, QD 128), one per core, on `ssds` SSDs.
pub fn t4k_scenario(ssds: u32, runtime_ns: u64) -> SimConfig {
    let devices: Vec<u32> = (0..ssds).collect();
    let mut t = job(
        "t4k",
        Rw::Randread,
        4096,
        128,
        10,
        &(0..10).collect::<Vec<_>>(),
        &devices,
    );
    t.runtime_ns = runtime_ns;
    seed000(ssds, vec![t])
}

/// Seed 001's machine: two 8-core E5-2620s with one Intel P4500, scheduler `none`.
pub fn seed001(jobs: Vec<JobConfig>) -> SimConfig {
    SimConfig {
        seed: 1,
        host: host("2x-e5-2620-16c"),
        devices: vec![device("intel-p4500-2tb", "/dev/nvme0n1")],
        scheduler: SchedulerConfig {
            name: "none".into(),
            tunables: Vec::new(),
            nr_requests: None,
            block_layer: None,
        },
        jobs,
        sample_interval_ns: 100_000_000,
        ramp_end: RampEnd::Nominal,
        request_trace: false,
    }
}

/// Seed 004's machine: the i7-3517U host with one SanDisk U100 SATA SSD, `scheduler` on its default block layer.
pub fn seed004(scheduler: &str, jobs: Vec<JobConfig>) -> SimConfig {
    SimConfig {
        seed: 1,
        host: host("i7-3517u-4c"),
        devices: vec![device("sandisk-u100-240gb-sata", "/dev/sda")],
        scheduler: SchedulerConfig {
            name: scheduler.into(),
            tunables: Vec::new(),
            nr_requests: None,
            block_layer: None,
        },
        jobs,
        sample_interval_ns: 10_000_000,
        ramp_end: RampEnd::Nominal,
        request_trace: false,
    }
}

/// IOzone-style: `numjobs` psync processes each doing sequential buffered `rw` of its own `file_bytes` file (64 KiB
/// records), files side by side from 1 GiB.
pub fn iozone_job(name: &str, rw: Rw, numjobs: u32, file_bytes: u64) -> JobConfig {
    let mut j = job(name, rw, 65536, 1, numjobs, &[], &[0]);
    j.ioengine = IoEngine::Psync;
    j.buffered = true;
    j.time_based = false;
    j.ramp_ns = 0;
    j.runtime_ns = 60_000_000_000;
    j.offset_bytes = 1 << 30;
    j.offset_increment_bytes = file_bytes;
    j.size_bytes = file_bytes;
    j.cpus_split = false;
    j
}
