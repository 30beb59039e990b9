//! What one simulated run returns (serialised to JSON for Python).

use serde::{Deserialize, Serialize};

/// fio's default completion-latency percentiles.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DirectionResult {
    pub ios: u64,
    pub bytes: u64,
    /// Completion latency (submission to the process seeing the completion), nanoseconds.
    pub clat_min_ns: u64,
    pub clat_max_ns: u64,
    pub clat_mean_ns: f64,
    pub clat_stddev_ns: f64,
    /// (percentile, latency ns) for fio's default percentile list.
    pub percentiles: Vec<(f64, u64)>,
    /// Histogram as (latency ns, count) for every non-empty bucket (fio json+ "bins").
    pub bins: Vec<(u64, u64)>,
    /// IOPS over each statistics window of the measured time (fio's iops_min/max/mean/stddev/samples).
    #[serde(default)]
    pub iops_samples: SampleSummary,
    /// Bandwidth in KiB/s over each statistics window (fio's bw_min/max/mean/dev/samples).
    #[serde(default)]
    pub bw_kib_samples: SampleSummary,
    /// An async engine's submission latency and total latency (fio's slat and lat, from the submission call's
    /// start); None for a sync engine, whose call is the I/O.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slat: Option<Box<DirectionResult>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat: Option<Box<DirectionResult>>,
}

/// Samples of a rate, one per window, as fio summarises them (stddev with n - 1; 0 for fewer than two).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SampleSummary {
    pub samples: u64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub stddev: f64,
}

/// fio's three I/O-depth tables as counts (its "IO depths", "submit" and "complete" lines), in the result as three
/// arrays of their own.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct DepthTables {
    /// Measured submissions by the depth they brought the process to, in fio's buckets 1, 2, 4, 8, 16, 32, >=64.
    #[serde(default)]
    pub depth_levels: [u64; 7],
    /// Measured submission calls by how many I/Os each submitted, in fio's buckets 0, 4, 8, 16, 32, 64, >=64.
    #[serde(default)]
    pub submit_levels: [u64; 7],
    /// Measured reaps by how many completions each took in, in the same buckets.
    #[serde(default)]
    pub complete_levels: [u64; 7],
}

impl DepthTables {
    /// Add another process's counts (a job's tables are its processes' summed).
    pub fn add(&mut self, other: &Self) {
        let pairs = [
            (&mut self.depth_levels, &other.depth_levels),
            (&mut self.submit_levels, &other.submit_levels),
            (&mut self.complete_levels, &other.complete_levels),
        ];
        for (sum, counts) in pairs {
            for (s, n) in sum.iter_mut().zip(counts) {
                *s += n;
            }
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessResult {
    #[serde(flatten)]
    pub depth_tables: DepthTables,
    pub clone: u32,
    pub core_affinity: Vec<u32>,
    pub read: DirectionResult,
    pub write: DirectionResult,
    pub usr_ns: u64,
    pub sys_ns: u64,
    pub context_switches: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct JobResult {
    pub name: String,
    /// The measured window (after ramp) in nanoseconds; IOPS = ios / (window_ns / 1e9).
    pub window_ns: u64,
    /// All clones merged (fio's group_reporting).
    pub read: DirectionResult,
    pub write: DirectionResult,
    pub usr_ns: u64,
    pub sys_ns: u64,
    pub context_switches: u64,
    /// The processes' depth tables summed.
    #[serde(flatten)]
    pub depth_tables: DepthTables,
    pub processes: Vec<ProcessResult>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CoreResult {
    /// Time the core spent running anything (I/O paths, scheduler work, spinning on locks) inside the window.
    pub busy_ns: u64,
    /// Part of busy_ns spent spinning on or holding a contended lock.
    pub lock_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceResult {
    pub name: String,
    pub read_ios: u64,
    pub write_ios: u64,
    /// Program units written by the host and by garbage collection (write amplification = total / host).
    pub host_program_units: u64,
    pub gc_program_units: u64,
    pub erases: u64,
    /// Time the front-end stalled because the write buffer was full.
    pub buffer_full_stall_ns: u64,
    /// Time a front-end core held a read that found the read buffer full (`read_buffer_bytes`).
    #[serde(default)]
    pub read_buffer_full_stall_ns: u64,
    /// Programs, copies and erases suspended for a read.
    #[serde(default)]
    pub suspensions: u64,
    /// The most commands the device held at once (submitted, completion not yet taken by the host).
    #[serde(default)]
    pub max_outstanding_commands: u64,
    /// Drive-wide garbage-collection steps (`gc_step_copies`), during which no host data was programmed.
    #[serde(default)]
    pub gc_steps: u64,
    /// 4 KiB logical pages the host wrote where garbage collection runs, and the rewrites among them whose previous
    /// copy was still young (`device/young_rewrites.rs`): writers in lockstep make them, and collection cheaper.
    #[serde(default)]
    pub logical_pages_written: u64,
    #[serde(default)]
    pub young_rewrites: u64,
}

/// One time-series sample: a named metric at the end of an interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    pub t_ns: u64,
    /// e.g. "job", "device", "scheduler"
    pub source: String,
    /// job name, device name, or scheduler instance
    pub subject: String,
    pub metric: String,
    pub value: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SimResult {
    /// Simulated time at the end of the run.
    pub sim_time_ns: u64,
    pub events: u64,
    /// Bios issued by all processes, and bios completed (equal at the end of every run: the simulator checks).
    pub ios_issued: u64,
    pub ios_completed: u64,
    /// Start and length of the window in which core and lock statistics were counted (the longest job window).
    pub window_start_ns: u64,
    pub window_ns: u64,
    pub jobs: Vec<JobResult>,
    pub cores: Vec<CoreResult>,
    pub devices: Vec<DeviceResult>,
    pub timeseries: Vec<Sample>,
    /// The run's request trace when the config asked for it (`SimConfig::request_trace`), in time order: the last
    /// `REQUEST_TRACE_EVENTS_MAX` events at most (then `request_trace_truncated`), as the kernel tracer's ring keeps
    /// the end of a run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_trace: Vec<RequestTraceEvent>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub request_trace_truncated: bool,
    /// With the request trace: the scheduler's notes of its decisions (`iosched_policy::SchedNote`), every
    /// device's, in time order; at most `SCHED_NOTES_MAX` in all (each device its equal share).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sched_notes: Vec<SchedNoteEvent>,
}

/// The most scheduler notes a traced run keeps (about 40 bytes each, 60 in the result's JSON), shared equally by
/// its devices.
pub const SCHED_NOTES_MAX: usize = 500_000;

/// One scheduler note of a traced run, as the result carries it: `kind` says which and what `a`, `b`, `c` are
/// (iosched_policy::NoteKind): 'B' busy, 'I' idle, 'S' in service (a: budget), 'E' expired (a: reason, b:
/// dispatched), 'R' dispatch while raised (a: coefficient), 'O' over the limit (a: allocated, b: limit), 'L' an
/// allocation's depth (a: busy raised queues, b: sync, c: depth). `process`: the queue's process (a sync queue),
/// `shared`: the queue serves several processes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct SchedNoteEvent {
    #[serde(rename = "t")]
    pub t_ns: u64,
    #[serde(rename = "d")]
    pub device: u32,
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub process: Option<u32>,
    #[serde(rename = "s", default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    #[serde(rename = "k")]
    pub kind: char,
    #[serde(default)]
    pub a: u64,
    #[serde(default)]
    pub b: u64,
    #[serde(default)]
    pub c: u64,
}

impl SchedNoteEvent {
    pub fn new(device: u32, note: &iosched_policy::SchedNote) -> Self {
        use iosched_policy::NoteKind::*;
        let (kind, a, b, c) = match note.kind {
            Busy => ('B', 0, 0, 0),
            Idle => ('I', 0, 0, 0),
            InService { budget } => ('S', budget, 0, 0),
            Expired { reason, dispatched } => ('E', reason as u64, dispatched as u64, 0),
            RaisedDispatch { coeff } => ('R', coeff as u64, 0, 0),
            OverLimit { allocated, limit } => ('O', allocated as u64, limit as u64, 0),
            Depth {
                wr_busy,
                sync,
                depth,
            } => ('L', wr_busy as u64, sync as u64, depth as u64),
        };
        Self {
            t_ns: note.t_ns,
            device,
            process: note.process,
            shared: note.shared,
            kind,
            a,
            b,
            c,
        }
    }
}

/// The most trace events a run keeps (about 60 bytes each in the result's JSON, a few hundred as Python reads
/// them): over a minute of a lab-sized run (1,000 IOPS, ~6 events per request) whole, the last part of a long or
/// fast one (its measured window, after the ramp, as a lab trace whose ring overran keeps its end).
pub const REQUEST_TRACE_EVENTS_MAX: usize = 500_000;

/// One event of a run's request trace: what the kernel's blk tracer logs of a request (Q, M, G, D, C, with the
/// request's first sector and its length; E: a REQ_NOWAIT bio that found no request ended with -EAGAIN, which the
/// tracer logs as a C with that error), and the CPU scheduler's events of a thread that sleeps for a request tag
/// (S: it went to sleep; W: it was woken; R: it runs again), in the simulator's terms: `process` is the index of
/// the process that issued the bio (its job's clones in order, the flusher last), `thread` 0 for the process's own
/// thread or the number of its io_uring ring's io-wq worker issuing the bio again (its Q, sleeps and G), `core`
/// where it happened.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct RequestTraceEvent {
    #[serde(rename = "t")]
    pub t_ns: u64,
    #[serde(rename = "a")]
    pub action: char,
    #[serde(rename = "p")]
    pub process: u32,
    #[serde(rename = "k", default, skip_serializing_if = "is_zero")]
    pub thread: u16,
    #[serde(rename = "c")]
    pub core: u32,
    #[serde(rename = "d")]
    pub device: u32,
    #[serde(rename = "w")]
    pub write: bool,
    #[serde(rename = "s")]
    pub sector: u64,
    #[serde(rename = "n")]
    pub sectors: u32,
}

fn is_zero(value: &u16) -> bool {
    *value == 0
}
