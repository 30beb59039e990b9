//! Whole-simulation properties and behaviours, on the real presets.

mod common;

use common::{job, seed000, t4k_scenario};
use iosched_sim::config::{IoEngine, Rw, SimConfig};
use iosched_sim::{simulate, SimResult};
use proptest::prelude::*;

fn run(config: &SimConfig) -> SimResult {
    simulate(config, &mut |_| true).expect("simulation runs")
}

fn kiops(result: &SimResult, job: usize, write: bool) -> f64 {
    let j = &result.jobs[job];
    let d = if write { &j.write } else { &j.read };
    d.ios as f64 / (j.window_ns as f64 / 1e9) / 1e3
}

fn mb_per_s(result: &SimResult, job: usize, write: bool) -> f64 {
    let j = &result.jobs[job];
    let d = if write { &j.write } else { &j.read };
    d.bytes as f64 / (j.window_ns as f64 / 1e9) / 1e6
}

#[test]
fn same_seed_gives_identical_results_and_another_seed_different_ones() {
    let config = t4k_scenario(2, 20_000_000);
    let a = serde_json::to_string(&run(&config)).unwrap();
    let b = serde_json::to_string(&run(&config)).unwrap();
    assert_eq!(a, b);
    let mut other = config.clone();
    other.seed = 2;
    assert_ne!(a, serde_json::to_string(&run(&other)).unwrap());
}

#[test]
fn a_jobs_randseed_sets_its_offsets() {
    // fio's randseed: the same value replays the same offsets (the run is identical), another value draws others,
    // so the drive's flash units and page types, and with them the latencies, differ. The run's seed stays 1.
    let with_randseed = |randseed: Option<u64>| {
        let mut config = t4k_scenario(1, 20_000_000);
        config.jobs[0].randseed = randseed;
        serde_json::to_string(&run(&config)).unwrap()
    };
    let seven = with_randseed(Some(7));
    assert_eq!(seven, with_randseed(Some(7)));
    assert_ne!(seven, with_randseed(Some(8)));
    // Negative control: without randseed the job draws from the run's seed, 1, not 7.
    assert_ne!(seven, with_randseed(None));
    assert_eq!(with_randseed(None), with_randseed(Some(1)));
}

#[test]
fn clones_run_as_separate_processes_write_in_lockstep() {
    // Four 64 KiB writers on a preconditioned drive. As fio processes of their own each is thread 1 and draws the
    // same offsets in the same order (launched 5 ms apart), so three of every four copies of a page are rewritten
    // while young (within 1.07 GB of the drive's writes; the writers stay far closer) and collection copies less: by the
    // module's first regime at rho 0.91, 0.25 / (1 - 0.8256) = 1.43 copies per host page where one writer's cost
    // is 4.73. The share is a little under 3/4: the pages the first writers write before the last has started, or
    // that the last has not yet reached when the run ends (15 ms of launch gaps in a 1 s run), are rewritten fewer
    // times. Negative control: as clones of one process they draw four streams and rewrite nothing young.
    let writers = |separate: bool| {
        let mut w = common::job("w", Rw::Randwrite, 65536, 32, 4, &[0, 1, 2, 3], &[0]);
        w.separate_processes = separate;
        w.runtime_ns = 1_000_000_000;
        let result = run(&common::seed000(1, vec![w]));
        let device = &result.devices[0];
        (
            device.young_rewrites as f64 / device.logical_pages_written as f64,
            device.gc_program_units as f64 / device.host_program_units as f64,
        )
    };
    let (young, copies) = writers(true);
    assert!(young < 0.75 && young > 0.72, "young share {young}");
    let (young_apart, copies_apart) = writers(false);
    assert!(young_apart < 0.001, "young share {young_apart}");
    assert!(
        copies < 0.5 * copies_apart,
        "copies per host program {copies} vs {copies_apart}"
    );
}

#[test]
fn every_preset_loads_into_the_simulator_config() {
    for kind in ["devices", "hosts"] {
        for entry in std::fs::read_dir(common::presets_dir().join(kind)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            if kind == "devices" {
                common::device(&name, "/dev/x");
            } else {
                common::host(&name);
            }
        }
    }
}

#[test]
fn one_core_is_cpu_bound_and_latency_grows_with_queue_depth() {
    let mut p99 = Vec::new();
    for qd in [1, 32, 256] {
        let r = run(&seed000(
            1,
            vec![job("r", Rw::Randread, 4096, qd, 1, &[0], &[0])],
        ));
        let busy = r.cores[0].busy_ns as f64 / r.window_ns as f64;
        p99.push((
            qd,
            kiops(&r, 0, false),
            busy,
            r.jobs[0].read.percentiles[12].1,
        ));
    }
    assert!(p99[0].2 < 0.3, "QD1 leaves the core mostly idle: {p99:?}");
    assert!(p99[2].2 > 0.99, "QD256 saturates it: {p99:?}");
    assert!(
        p99[0].3 < p99[1].3 && p99[1].3 < p99[2].3,
        "P99 grows with depth: {p99:?}"
    );
    assert!(
        (p99[2].1 - p99[1].1).abs() / p99[2].1 < 0.05,
        "IOPS flat once CPU-bound: {p99:?}"
    );
}

#[test]
fn processes_sharing_a_core_pay_context_switches() {
    let one_deep = run(&seed000(
        1,
        vec![job("r", Rw::Randread, 4096, 64, 1, &[0], &[0])],
    ));
    let mut shared = job("r", Rw::Randread, 4096, 1, 32, &[0], &[0]);
    shared.cpus_split = false;
    let many = run(&seed000(1, vec![shared]));
    // The QD-64 reader, CPU-bound, sleeps only after its runtime, while its last I/Os complete.
    assert!(one_deep.jobs[0].context_switches <= 64);
    assert!(many.jobs[0].context_switches > 10_000);
    let busy = |r: &SimResult| r.cores[0].busy_ns as f64 / r.window_ns as f64;
    assert!(
        busy(&one_deep) > 0.99 && busy(&many) > 0.99,
        "both saturate the core"
    );
    // Same core, same device: 32 QD-1 processes get fewer IOPS than one QD-64 process (intra vs inter-process).
    assert!(kiops(&many, 0, false) < 0.8 * kiops(&one_deep, 0, false));
}

#[test]
fn unpinned_processes_spread_over_allowed_cores() {
    let mut j = job("r", Rw::Randread, 4096, 64, 4, &[0, 1, 2, 3], &[0]);
    j.cpus_split = false;
    let r = run(&seed000(1, vec![j]));
    for core in 0..4 {
        assert!(
            r.cores[core].busy_ns > r.window_ns / 4,
            "core {core} used: {:?}",
            r.cores
        );
    }
    assert_eq!(r.cores[4].busy_ns, 0);
}

#[test]
fn a_running_process_is_not_migrated_so_one_process_never_uses_two_cores_at_once() {
    // One unpinned process at QD 128 is CPU-bound: the completions it reaps keep its core busy, it never sleeps,
    // and nothing wakes it elsewhere. It uses one of its four cores, fully, and no other.
    let mut j = job("r", Rw::Randread, 4096, 128, 1, &[0, 1, 2, 3], &[0]);
    j.cpus_split = false;
    let r = run(&seed000(1, vec![j]));
    let busy: Vec<f64> = r
        .cores
        .iter()
        .map(|c| c.busy_ns as f64 / r.window_ns as f64)
        .collect();
    assert!(busy[0] > 0.99, "{busy:?}");
    assert!(busy[1..].iter().all(|&b| b == 0.0), "{busy:?}");
}

#[test]
fn unpinned_processes_of_several_jobs_start_one_per_core_and_keep_their_idle_core() {
    // Seed 001's 16-core host, 4 jobs x 4 unpinned QD-1 processes, the jobs starting 20 µs apart (each finds the
    // others' cores idle, their processes asleep waiting for I/O): forked one per core, and each, woken by its
    // completion while its core is idle, stays there: every core busy, no core ever switches process (each
    // core's busy time is one process's CPU time, and each process's context switches are its sleeps, one per
    // I/O, never more).
    let jobs = (0..4)
        .map(|i| {
            let mut j = job(&format!("j{i}"), Rw::Randread, 4096, 1, 4, &[], &[0]);
            j.cpus_split = false;
            j.start_ns = i * 20_000;
            j
        })
        .collect();
    let r = run(&common::seed001(jobs));
    assert_eq!(r.cores.len(), 16);
    for (core, c) in r.cores.iter().enumerate() {
        assert!(c.busy_ns > 0, "core {core} idle: {:?}", r.cores);
    }
    let mut core_busy: Vec<u64> = r.cores.iter().map(|c| c.busy_ns).collect();
    let mut process_cpu: Vec<u64> = Vec::new();
    for j in &r.jobs {
        for p in &j.processes {
            assert!(p.read.ios > 0);
            // Switches over the whole run, the ramp's included (fio's ctx), I/Os over the window.
            let per_io = p.context_switches as f64 / p.read.ios as f64;
            assert!(
                (0.9..=1.2).contains(&per_io),
                "job {} clone {}: {per_io}",
                j.name,
                p.clone
            );
            process_cpu.push(p.usr_ns + p.sys_ns);
        }
    }
    core_busy.sort_unstable();
    process_cpu.sort_unstable();
    assert_eq!(core_busy, process_cpu);
}

#[test]
fn reads_suffer_behind_writes_once_the_write_buffer_is_full() {
    let reader = |ramp_ns: u64| {
        let mut r = job("r", Rw::Randread, 4096, 1, 1, &[0], &[0]);
        let mut w = job("w", Rw::Randwrite, 4096, 256, 1, &[1], &[0]);
        r.ramp_ns = ramp_ns;
        w.ramp_ns = ramp_ns;
        r.runtime_ns = 300_000_000;
        w.runtime_ns = 300_000_000;
        run(&seed000(1, vec![r, w]))
    };
    let alone = run(&seed000(
        1,
        vec![job("r", Rw::Randread, 4096, 1, 1, &[0], &[0])],
    ));
    let steady = reader(1_500_000_000);
    let p99 = |r: &SimResult| r.jobs[0].read.percentiles[12].1;
    assert!(
        p99(&steady) > 20 * p99(&alone),
        "read P99 {} vs alone {}",
        p99(&steady),
        p99(&alone)
    );
    assert!(steady.devices[0].buffer_full_stall_ns > 0 && steady.devices[0].gc_program_units > 0);
}

#[test]
fn rate_iops_and_thinktime_pace_a_process() {
    let mut paced = job("p", Rw::Randread, 4096, 1, 1, &[0], &[0]);
    paced.rate_iops = 500;
    paced.ramp_ns = 0;
    let r = run(&seed000(1, vec![paced.clone()]));
    assert!(
        (kiops(&r, 0, false) - 0.5).abs() < 0.02,
        "{}",
        kiops(&r, 0, false)
    );
    paced.rate_iops = 0;
    paced.thinktime_ns = 2_000_000; // one synchronous request every ~2 ms (seed 002's real-time task)
    let r = run(&seed000(1, vec![paced]));
    let expected = 1e6 / (2_000.0 + 66.0) / 1e3;
    assert!(
        (kiops(&r, 0, false) - expected).abs() / expected < 0.03,
        "{}",
        kiops(&r, 0, false)
    );
}

#[test]
fn a_sized_job_stops_after_its_bytes() {
    let mut sized = job("s", Rw::Read, 131072, 4, 1, &[0], &[0]);
    sized.time_based = false;
    sized.ramp_ns = 0;
    sized.size_bytes = 64 << 20;
    let r = run(&seed000(1, vec![sized]));
    assert_eq!(r.jobs[0].read.bytes, 64 << 20);
    assert!(
        r.jobs[0].window_ns < 100_000_000,
        "finished early: {}",
        r.jobs[0].window_ns
    );
}

#[test]
fn plugged_batches_merge_contiguous_sequential_bios() {
    let mut seq = job("s", Rw::Write, 4096, 32, 1, &[0], &[0]);
    seq.iodepth_batch_submit = 8;
    let r = run(&seed000(1, vec![seq]));
    // Eight 4 KiB bios per plug become one 32 KiB command.
    let (bios, commands) = (r.ios_issued, r.devices[0].write_ios);
    assert!(
        bios > 7 * commands,
        "bios {bios} vs device commands {commands}"
    );
    let mut random = job("r", Rw::Randwrite, 4096, 32, 1, &[0], &[0]);
    random.iodepth_batch_submit = 8;
    let r = run(&seed000(1, vec![random]));
    assert!(
        r.ios_issued < r.devices[0].write_ios + 64,
        "random bios do not merge"
    );
}

#[test]
fn colon_separated_devices_share_one_process_round_robin() {
    let r = run(&seed000(
        2,
        vec![job("t", Rw::Randread, 4096, 128, 1, &[0], &[0, 1])],
    ));
    let (a, b) = (r.devices[0].read_ios, r.devices[1].read_ios);
    assert!(a.abs_diff(b) <= 130, "{a} vs {b}");
}

#[test]
fn engines_differ_in_cpu_cost() {
    let with = |engine: IoEngine| {
        let mut j = job("r", Rw::Randread, 4096, 64, 1, &[0], &[0]);
        j.ioengine = engine;
        kiops(&run(&seed000(1, vec![j])), 0, false)
    };
    let (uring, aio, psync) = (
        with(IoEngine::IoUring),
        with(IoEngine::Libaio),
        with(IoEngine::Psync),
    );
    assert!(uring > aio, "{uring} {aio}");
    assert!(
        psync < 20.0,
        "psync is synchronous: depth 1 ({psync} KIOPS)"
    );
}

/// fio's completion latency (clat) starts when the submission call returns for an async engine (libaio, io_uring)
/// and before it for psync, so at QD 1 on an idle device psync's clat carries the submission path that libaio's
/// leaves out (as slat). Same CPU costs for both engines here, so only that differs.
#[test]
fn clat_starts_after_an_async_engines_submit_call_and_before_a_sync_one() {
    const SUBMIT_NS: u64 = 40_000;
    let clat_mean_ns = |engine: IoEngine| {
        let mut r = job("r", Rw::Randread, 4096, 1, 1, &[0], &[0]);
        r.ioengine = engine;
        let mut config = seed000(1, vec![r]);
        for cost in [&mut config.host.libaio, &mut config.host.psync] {
            cost.submit_ns = SUBMIT_NS;
            cost.complete_ns = 1_000;
        }
        config.host.psync.sleep_wake_ns = config.host.libaio.sleep_wake_ns;
        run(&config).jobs[0].read.clat_mean_ns
    };
    let (aio, psync) = (
        clat_mean_ns(IoEngine::Libaio),
        clat_mean_ns(IoEngine::Psync),
    );
    let gap = psync - aio;
    assert!(
        (gap - SUBMIT_NS as f64).abs() < 0.05 * SUBMIT_NS as f64,
        "psync {psync:.0} ns, libaio {aio:.0} ns: expected them {SUBMIT_NS} ns (the submit call) apart"
    );
}

#[test]
fn bad_configs_are_errors_not_panics() {
    let mut config = seed000(1, vec![job("r", Rw::Randread, 4096, 0, 1, &[0], &[0])]);
    assert!(simulate(&config, &mut |_| true)
        .unwrap_err()
        .contains("iodepth"));
    config.jobs[0].iodepth = 1;
    config.jobs[0].cpus_allowed = vec![12];
    assert!(simulate(&config, &mut |_| true)
        .unwrap_err()
        .contains("cpus_allowed"));
    config.jobs[0].cpus_allowed = vec![0];
    config.jobs[0].devices = vec![3];
    assert!(simulate(&config, &mut |_| true)
        .unwrap_err()
        .contains("device"));
    config.jobs[0].devices = vec![0];
    config.scheduler.name = "cfq2".into();
    assert!(simulate(&config, &mut |_| true)
        .unwrap_err()
        .contains("unknown scheduler"));
    config.scheduler.name = "none".into();
    config.scheduler.tunables = vec![("read_expire".into(), 1)];
    assert!(simulate(&config, &mut |_| true)
        .unwrap_err()
        .contains("read_expire"));
    config.scheduler.tunables.clear();
    config.jobs[0].cgroup_weight = 1001;
    assert!(simulate(&config, &mut |_| true)
        .unwrap_err()
        .contains("cgroup_weight must be within 1..1000"));
    config.jobs[0].cgroup = "a".into();
    config.jobs[0].cgroup_weight = 100;
    let mut other = config.jobs[0].clone();
    other.name = "r2".into();
    other.cgroup_weight = 200;
    config.jobs.push(other);
    assert_eq!(
        simulate(&config, &mut |_| true).unwrap_err(),
        "job r: cgroup_weight 100 differs from job r2's 200 for the same cgroup \"a\""
    );
}

#[test]
fn progress_is_reported_and_can_abort() {
    let config = t4k_scenario(1, 50_000_000);
    let mut seen = Vec::new();
    run_with(&config, &mut |f| {
        seen.push(f);
        true
    });
    assert!(seen.len() > 2 && *seen.last().unwrap() == 1.0);
    assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(
        simulate(&config, &mut |_| false).unwrap_err(),
        "interrupted"
    );
}

fn run_with(config: &SimConfig, progress: &mut dyn FnMut(f64) -> bool) -> SimResult {
    simulate(config, progress).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever the mix, every bio issued completes exactly once (the simulator's own invariants panic otherwise),
    /// the device sees each command once, and nothing is left holding a tag at the end.
    #[test]
    fn every_io_completes_exactly_once(
        iodepth in 1u32..64, numjobs in 1u32..4, rw in 0usize..6, bs_kib in prop::sample::select(vec![4u64, 16, 64, 128]),
        batch in 1u32..8, ssds in 1u32..3, seed in 0u64..1000,
    ) {
        let rws = [Rw::Read, Rw::Write, Rw::Randread, Rw::Randwrite, Rw::Randrw, Rw::Readwrite];
        let devices: Vec<u32> = (0..ssds).collect();
        let mut j = job("p", rws[rw], bs_kib * 1024, iodepth, numjobs, &[0, 1], &devices);
        j.iodepth_batch_submit = batch;
        j.runtime_ns = 20_000_000;
        j.ramp_ns = 0;
        let mut config = seed000(ssds, vec![j]);
        config.seed = seed;
        // The simulator checks at the end that no bio, request tag, driver tag or slot is left over.
        let r = run(&config);
        prop_assert!(r.ios_issued > 0);
        prop_assert_eq!(r.ios_issued, r.ios_completed);
        let commands: u64 = r.devices.iter().map(|d| d.read_ios + d.write_ios).sum();
        prop_assert!(commands <= r.ios_completed, "merges only ever reduce commands");
        let counted = r.jobs[0].read.ios + r.jobs[0].write.ios;
        prop_assert!(counted <= r.ios_completed);
    }
}

#[test]
fn reread_of_a_file_that_fits_the_page_cache_does_not_touch_the_device() {
    const FILE: u64 = 8 << 20;
    for scheduler in ["noop", "cfq"] {
        let read = common::iozone_job("read", Rw::Read, 3, FILE);
        let read_only = run(&common::seed004(scheduler, vec![read.clone()]));
        let mut reread = common::iozone_job("reread", Rw::Read, 3, FILE);
        reread.stonewall = true;
        reread.invalidate = false;
        let both = run(&common::seed004(scheduler, vec![read, reread]));
        assert_eq!(both.jobs[0].read.bytes, 3 * FILE);
        assert_eq!(
            both.jobs[1].read.bytes,
            3 * FILE,
            "the reread read every file"
        );
        assert!(
            read_only.devices[0].read_ios > 0,
            "the first read comes from the device"
        );
        assert_eq!(
            both.devices[0].read_ios, read_only.devices[0].read_ios,
            "{scheduler}: the reread added no device reads"
        );
        assert!(
            mb_per_s(&both, 1, false) > 5.0 * mb_per_s(&both, 0, false),
            "{scheduler}: reread at memory speed: {} vs {} MB/s",
            mb_per_s(&both, 1, false),
            mb_per_s(&both, 0, false)
        );
    }
}

#[test]
fn buffered_writes_stay_in_the_cache_below_the_background_threshold_and_are_throttled_past_the_limit(
) {
    // 3 x 8 MiB: far below the 307 MiB background threshold of a 3 GiB cache: nothing reaches the device.
    let small = run(&common::seed004(
        "noop",
        vec![common::iozone_job("w", Rw::Write, 3, 8 << 20)],
    ));
    assert_eq!(small.devices[0].write_ios, 0);
    assert_eq!(small.jobs[0].write.bytes, 3 * (8 << 20));
    // With a 256 MiB cache (background 25 MiB, limit 51 MiB), 3 x 64 MiB must be written back while the writers
    // wait for it: the writers end up at about the device's write rate.
    let mut config = common::seed004("cfq", vec![common::iozone_job("w", Rw::Write, 3, 64 << 20)]);
    config.host.page_cache.as_mut().unwrap().capacity_bytes = 256 << 20;
    let big = run(&config);
    let written = big.devices[0].write_ios;
    assert!(written > 0, "writeback reached the device");
    let rate = mb_per_s(&big, 0, true);
    assert!(
        rate < 2_000.0,
        "throttled to writeback speed, not memory speed: {rate} MB/s"
    );
    assert!(rate > 100.0, "{rate} MB/s");
}

#[test]
fn stonewall_runs_jobs_one_after_the_other() {
    let first = common::iozone_job("a", Rw::Write, 1, 4 << 20);
    let mut second = common::iozone_job("b", Rw::Write, 1, 4 << 20);
    second.stonewall = true;
    let r = run(&common::seed004("noop", vec![first, second]));
    assert!(r.jobs[0].window_ns > 0 && r.jobs[1].window_ns > 0);
    assert!(
        r.window_ns >= r.jobs[0].window_ns + r.jobs[1].window_ns,
        "the run lasts both jobs back to back: {} vs {} + {}",
        r.window_ns,
        r.jobs[0].window_ns,
        r.jobs[1].window_ns
    );
}

/// A QD-1 reader beside 3 QD-64 random readers on a device with 32 command slots (scheduler none: the driver tags
/// are the requests). Who waits for a request decides how many bios queue ahead of the QD-1 read: a libaio process
/// sleeps in io_submit on its first bio that finds none, so at most one waits per process; io_uring reissues such
/// bios from io-wq workers, min(iodepth, 4 x CPUs) of them per ring, and goes on submitting. (Sleepers are not
/// served in order, see blk.rs, so the io_uring figure is a floor, not an exact count.)
#[test]
fn who_waits_for_a_request_decides_how_many_bios_queue_ahead_of_a_read() {
    const SLOTS: u32 = 32;
    const HOGS: u32 = 3;
    const DEPTH: u32 = 64;
    let measure = |engine: IoEngine| {
        let mut r = job("r", Rw::Randread, 4096, 1, 1, &[0], &[0]);
        let mut hogs = job("hogs", Rw::Randread, 4096, DEPTH, HOGS, &[1, 2, 3], &[0]);
        r.ioengine = engine;
        hogs.ioengine = engine;
        let mut config = seed000(1, vec![r, hogs]);
        config.devices[0].queue_depth = SLOTS;
        config.devices[0].max_hw_queues = 1; // one set of tags for all cores
        let result = run(&config);
        let iops = (kiops(&result, 0, false) + kiops(&result, 1, false)) * 1e3;
        // Bios ahead of a read, by Little's law: the read's latency times the device's rate.
        result.jobs[0].read.clat_mean_ns / 1e9 * iops
    };
    let libaio = measure(IoEngine::Libaio);
    assert!(
        libaio <= (SLOTS + HOGS + 2) as f64,
        "libaio: {libaio:.1} bios ahead of a read, expected at most the {SLOTS} slots + one per process"
    );
    // Seed 000's host has 10 CPUs: 40 workers per ring, fewer than the 64 - 32 / 3 bios each ring has beyond its
    // share of the slots, so 3 x 40 sleep waiting for requests and the rest wait for a worker. A punted read sleeps
    // among the workers; first come, first served it would find 32 + 120 bios ahead, and the wake-ups' disorder
    // only adds to that on average (a read that loses a race sleeps again).
    let io_uring = measure(IoEngine::IoUring);
    let workers = 3 * 40;
    assert!(
        io_uring > (SLOTS + workers) as f64 * 0.9,
        "io_uring: {io_uring:.1} bios ahead of a read, expected at least about the {SLOTS} slots + {workers} workers'"
    );
}
