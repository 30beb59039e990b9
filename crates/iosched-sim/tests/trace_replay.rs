//! Trace replay through the whole simulator: what completes is what the trace holds, timing follows the
//! timestamps, iodepth bounds what is outstanding, and bad traces are errors.

mod common;

use common::{job, seed000};
use iosched_sim::config::{JobConfig, Rw, SimConfig, TraceConfig};
use iosched_sim::trace::summarize;
use iosched_sim::{simulate, SimResult};

/// A trace file in a temporary folder of its own; dropping it removes the file and the folder. (One folder shared
/// by the tests, which run as threads of one process, raced: a test removing it as it emptied could do so between
/// another's create_dir_all and its write.)
struct TraceFile(String);

impl std::ops::Deref for TraceFile {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        let path = std::path::Path::new(&self.0);
        let _ = std::fs::remove_file(path);
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn write_trace(name: &str, text: &str) -> TraceFile {
    let folder = format!("iosched-trace-replay-{}-{name}", std::process::id());
    let dir = std::env::temp_dir().join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    TraceFile(path.to_string_lossy().into_owned())
}

/// A SYSTOR '17 trace: `n` records `gap_ns` apart on `luns` LUNs in turn; every 4th a write; sizes 4-32 KiB.
fn systor(n: u64, gap_ns: u64, luns: u64) -> String {
    let mut text = String::from("Timestamp,Response,IOType,LUN,Offset,Size\n");
    for i in 0..n {
        let t = 1_456_095_145_000_000_000 + i * gap_ns;
        let io = if i % 4 == 0 { "W" } else { "R" };
        let size = 4096 * (1 + i % 8);
        text += &format!(
            "{}.{:09},0.000100000,{io},{},{},{size}\n",
            t / 1_000_000_000,
            t % 1_000_000_000,
            i % luns,
            (i * 7919 % 100_000) * 65536
        );
    }
    text
}

fn trace_job(name: &str, path: &str, iodepth: u32, no_stall: bool, scale: u32) -> JobConfig {
    JobConfig {
        ramp_ns: 0,
        runtime_ns: 10_000_000_000, // a cap: the trace ends first
        time_based: false,
        trace: Some(TraceConfig {
            path: path.into(),
            format: None,
            lun: None,
            blkparse_action: Default::default(),
            time_scale_percent: scale,
            no_stall,
            sha256: String::new(),
        }),
        ..job(name, Rw::Read, 4096, iodepth, 1, &[0], &[0])
    }
}

fn run(config: &SimConfig) -> SimResult {
    simulate(config, &mut |_| true).expect("simulation runs")
}

/// Average I/Os in flight over the job's window (Little's law): the sum of latencies over the elapsed time.
fn mean_in_flight(r: &SimResult, job: usize) -> f64 {
    let j = &r.jobs[job];
    let busy = j.read.clat_mean_ns * j.read.ios as f64 + j.write.clat_mean_ns * j.write.ios as f64;
    busy / j.window_ns as f64
}

fn assert_matches_trace(r: &SimResult, job: usize, path: &str, lun: Option<&str>, copies: u64) {
    let s = summarize(path, None, lun, Default::default()).unwrap();
    let j = &r.jobs[job];
    assert_eq!(
        (j.read.ios, j.write.ios, j.read.bytes, j.write.bytes),
        (
            s.reads * copies,
            s.writes * copies,
            s.read_bytes * copies,
            s.write_bytes * copies
        ),
        "job {} vs {path} (lun {lun:?})",
        j.name
    );
}

#[test]
fn a_no_stall_replay_completes_every_record_and_keeps_iodepth_full_but_not_over() {
    let path = write_trace("nostall.csv", &systor(3000, 1_000_000, 1));
    for qd in [1, 16] {
        let r = run(&seed000(1, vec![trace_job("t", &path, qd, true, 100)]));
        assert_matches_trace(&r, 0, &path, None, 1);
        let in_flight = mean_in_flight(&r, 0);
        assert!(
            in_flight <= qd as f64,
            "QD {qd}: {in_flight:.2} in flight on average"
        );
        assert!(
            in_flight > 0.9 * qd as f64,
            "QD {qd}: as fast as the depth allows, got {in_flight:.2}"
        );
        let window = r.jobs[0].window_ns;
        assert!(
            window < 1_000_000_000,
            "QD {qd}: no timing, faster than the 3 s recorded: {window} ns"
        );
    }
}

#[test]
fn timing_follows_the_scaled_timestamps() {
    // 200 records 500 us apart: the last one is due 99.5 ms after the first.
    let path = write_trace("timed.csv", &systor(200, 500_000, 1));
    let window_ms = |scale, no_stall| {
        let r = run(&seed000(
            1,
            vec![trace_job("t", &path, 32, no_stall, scale)],
        ));
        assert_matches_trace(&r, 0, &path, None, 1);
        r.jobs[0].window_ns as f64 / 1e6
    };
    let as_recorded = window_ms(100, false);
    assert!((99.5..100.5).contains(&as_recorded), "{as_recorded} ms");
    let twice_as_fast = window_ms(200, false);
    assert!(
        (49.75..50.75).contains(&twice_as_fast),
        "{twice_as_fast} ms"
    );
    let half_speed = window_ms(50, false);
    assert!(
        (199.0..200.0 + 1.0).contains(&half_speed),
        "{half_speed} ms"
    );
    let no_stall = window_ms(100, true);
    assert!(no_stall < 10.0, "{no_stall} ms");
}

#[test]
fn records_due_at_once_wait_for_free_slots_exactly_as_without_timing() {
    // Every record at the same time: with timing each is issued when a slot frees, which is no-stall replay.
    let path = write_trace("burst.csv", &systor(500, 0, 1));
    let timed = run(&seed000(1, vec![trace_job("t", &path, 4, false, 100)]));
    let no_stall = run(&seed000(1, vec![trace_job("t", &path, 4, true, 100)]));
    assert_eq!(
        serde_json::to_string(&timed.jobs).unwrap(),
        serde_json::to_string(&no_stall.jobs).unwrap()
    );
    assert!(mean_in_flight(&timed, 0) <= 4.0);
}

#[test]
fn jobs_replay_their_own_lun_or_file_in_their_own_cgroup() {
    let shared = write_trace("luns.csv", &systor(1200, 10_000, 3));
    let own = write_trace("own.csv", &systor(333, 10_000, 1));
    let mut jobs = Vec::new();
    for (i, lun) in ["0", "2"].iter().enumerate() {
        let mut j = trace_job(&format!("lun{lun}"), &shared, 8, true, 100);
        j.trace.as_mut().unwrap().lun = Some(lun.to_string());
        j.cgroup = format!("cg{lun}");
        j.cgroup_weight = 100 * (i as u32 + 1);
        j.cpus_allowed = vec![i as u32];
        jobs.push(j);
    }
    let mut j = trace_job("own", &own, 8, true, 100);
    j.cgroup = "cg-own".into();
    j.cpus_allowed = vec![2];
    j.numjobs = 2; // fio: every clone replays the whole trace
    jobs.push(j);
    let r = run(&seed000(1, jobs));
    assert_matches_trace(&r, 0, &shared, Some("0"), 1);
    assert_matches_trace(&r, 1, &shared, Some("2"), 1);
    assert_matches_trace(&r, 2, &own, None, 2);
    assert_eq!(r.jobs[0].read.ios + r.jobs[0].write.ios, 400);
}

#[test]
fn a_time_based_replay_loops_until_the_runtime() {
    // 100 records 100 us apart: one pass every 10 ms (9.9 ms span + one 100 us gap).
    let path = write_trace("loop.csv", &systor(100, 100_000, 1));
    let mut j = trace_job("t", &path, 8, false, 100);
    j.time_based = true;
    j.runtime_ns = 50_000_000;
    let r = run(&seed000(1, vec![j]));
    let ios = r.jobs[0].read.ios + r.jobs[0].write.ios;
    assert!(
        (495..=500).contains(&ios),
        "five passes in 50 ms, got {ios} I/Os"
    );
    assert!(r.jobs[0].window_ns >= 49_000_000, "{}", r.jobs[0].window_ns);
}

#[test]
fn blkparse_and_msr_replay_the_same_records_as_systor17() {
    // The same three I/Os in each format.
    let systor = write_trace(
        "same.csv",
        "1.000000000,0.0001,R,0,4096,8192\n1.000100000,0.0001,W,0,1048576,4096\n1.000300000,0.0001,R,0,0,512\n",
    );
    let msr = write_trace(
        "same-msr.csv",
        "10000000,h,0,Read,4096,8192,1\n10001000,h,0,Write,1048576,4096,1\n10003000,h,0,Read,0,512,1\n",
    );
    let blkparse = write_trace(
        "same.blktrace.txt",
        "259,0 0 1 0.000000000 1 D R 8 + 16 [a]\n259,0 0 2 0.000100000 1 D WS 2048 + 8 [a]\n\
         259,0 0 3 0.000300000 1 D RA 0 + 1 [a]\nCPU0 (259,0):\n Reads Queued: 2\n",
    );
    let results: Vec<String> = [systor, msr, blkparse]
        .iter()
        .map(|p| {
            let r = run(&seed000(1, vec![trace_job("t", p, 4, false, 100)]));
            assert_eq!((r.jobs[0].read.ios, r.jobs[0].write.bytes), (2, 4096));
            serde_json::to_string(&r.jobs).unwrap()
        })
        .collect();
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
}

#[test]
fn bad_traces_are_errors_naming_the_file_and_line_not_panics() {
    let missing = run_err(trace_job("t", "/nonexistent/trace.csv", 4, true, 100));
    assert!(
        missing.starts_with("job t: read_iolog: /nonexistent/trace.csv: cannot open"),
        "{missing}"
    );
    let mut text = systor(2000, 1000, 1);
    text = text.replacen(",R,0,", ",Q,0,", 1); // the first read, on line 3
    let bad = write_trace("bad.csv", &text);
    let e = run_err(trace_job("t", &bad, 4, true, 100));
    assert!(
        e.contains("bad.csv: line 3: IOType: expected R, W or blank, got \"Q\""),
        "{e}"
    );
    let mut late = systor(3000, 1000, 1);
    late += "1456095146.0,0.0001,R,0,0\n";
    let late = write_trace("late.csv", &late);
    let e = run_err(trace_job("t", &late, 4, true, 100));
    assert!(
        e.contains("late.csv: line 3002: expected 6 comma-separated fields"),
        "{e}"
    );
    let mut j = trace_job("t", &bad, 4, true, 100);
    j.trace.as_mut().unwrap().lun = Some("259,0".into());
    assert!(run_err(j).contains("replay_lun: a systor17 trace numbers its LUNs"));
    let zero_scale = run_err(trace_job("t", &bad, 4, false, 0));
    assert_eq!(zero_scale, "job t: replay_time_scale must be >= 1");
}

fn run_err(j: JobConfig) -> String {
    match simulate(&seed000(1, vec![j]), &mut |_| true) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}
