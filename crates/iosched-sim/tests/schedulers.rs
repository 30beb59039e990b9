//! Whole-simulation behaviours of the schedulers, on the real presets: conservation, hook costs, lock contention,
//! Kyber's tokens, Kyber-fairness's shares, K2's bound, the legacy layer.

mod common;

use common::{job, seed000, seed001};
use iosched_sim::config::{IoEngine, Rw, SimConfig};
use iosched_sim::{simulate, SimResult};

fn run(config: &SimConfig) -> SimResult {
    simulate(config, &mut |_| true).expect("simulation runs")
}

fn kiops(result: &SimResult, job: usize, write: bool) -> f64 {
    let j = &result.jobs[job];
    let d = if write { &j.write } else { &j.read };
    d.ios as f64 / (j.window_ns as f64 / 1e9) / 1e3
}
/// Seed 001's setup (4 cgroups x 4 libaio processes at QD 32, weights 100/250/500/1000, 4 KiB random reads):
/// Kyber-fairness gives each cgroup IOPS in proportion to its weight, and the device about what it gives
/// under none, which ignores the weights.
#[test]
fn kyber_fairness_shares_iops_by_cgroup_weight() {
    const WEIGHTS: [u32; 4] = [100, 250, 500, 1000];
    let config = |scheduler: &str| {
        let jobs = WEIGHTS
            .iter()
            .enumerate()
            .map(|(i, &weight)| {
                let mut j = job(&format!("cg{i}"), Rw::Randread, 4096, 32, 4, &[], &[0]);
                j.ioengine = IoEngine::Libaio;
                j.cpus_split = false;
                j.cgroup = format!("cg{i}");
                j.cgroup_weight = weight;
                j.ramp_ns = 200_000_000;
                j.runtime_ns = 400_000_000;
                j
            })
            .collect();
        let mut c = seed001(jobs);
        c.scheduler.name = scheduler.into();
        c
    };
    let fair = run(&config("kyber-fairness"));
    let none = run(&config("none"));
    let iops = |r: &SimResult| (0..4).map(|j| kiops(r, j, false)).collect::<Vec<_>>();
    let (fair_iops, none_iops) = (iops(&fair), iops(&none));
    let total: f64 = fair_iops.iter().sum();
    for (i, &weight) in WEIGHTS.iter().enumerate() {
        let expected = total * weight as f64 / 1850.0;
        assert!(
            (fair_iops[i] / expected - 1.0).abs() < 0.03,
            "cgroup {i}: {fair_iops:?} KIOPS"
        );
        assert!(
            (none_iops[i] / none_iops[0] - 1.0).abs() < 0.03,
            "none ignores weights: {none_iops:?}"
        );
    }
    let none_total: f64 = none_iops.iter().sum();
    assert!(total > 0.85 * none_total, "{total} vs none {none_total}");
    let series = |metric: &str| {
        fair.timeseries
            .iter()
            .filter(|s| s.metric == metric)
            .count()
    };
    assert!(series("cgroup4_budget_sectors") > 0 && series("wr_scale") > 0);
}

/// Four equal processes, each alone on its own core and so on its own hardware queue, ask for 4 x 128 reads while
/// Kyber's read domain has 256 tokens: hardware queues wait for tokens all the time. Freed tokens go to the waiting
/// queues in the order the token pool's wait queues wake them, not by queue number, so each process gets the same
/// share of the device.
#[test]
fn kyber_token_waiters_on_different_hardware_queues_get_equal_service() {
    let jobs = (0..4)
        .map(|i| {
            let mut j = job(&format!("p{i}"), Rw::Randread, 4096, 128, 1, &[4 * i], &[0]);
            j.ramp_ns = 100_000_000;
            j.runtime_ns = 300_000_000;
            j
        })
        .collect();
    let mut config = seed001(jobs);
    config.scheduler.name = "kyber".into();
    let r = run(&config);
    let iops: Vec<f64> = (0..4).map(|j| kiops(&r, j, false)).collect();
    let mean = iops.iter().sum::<f64>() / 4.0;
    let waiting = scheduler_samples(&r, "read_waiting_hctxs").fold(0.0, f64::max);
    assert!(
        waiting >= 2.0,
        "the read tokens are contended: {waiting} hardware queues waiting at most"
    );
    for (i, &p) in iops.iter().enumerate() {
        assert!((p / mean - 1.0).abs() < 0.05, "process {i}: {iops:?} KIOPS");
    }
}

/// Every scheduler, on mixed traffic from several processes and cores over two devices: the run ends with every
/// bio completed once and every tag returned (the simulator's conservation check).
///
/// Not asserted: that every process is served within the run. Faithful policies do not promise it: mq-deadline
/// holds the IDLE class back for up to prio_aging_expire (10 s), and BFQ's B-WF2Q+ serves a weight-10 queue
/// against weight-raised ones only once virtual time passes its finish time (budget / weight), minutes here.
#[test]
fn every_scheduler_conserves_requests() {
    for &name in iosched_sim::SCHEDULERS {
        if !iosched_policy::block_layers(name)
            .unwrap()
            .contains(&iosched_policy::BlockLayer::Mq)
        {
            continue; // legacy-only: NVMe is blk-mq only (see legacy_path_with_each_scheduler_completes_every_io)
        }
        let mut reader = job("r", Rw::Randread, 4096, 1, 2, &[0, 1], &[0]);
        let mut writer = job("w", Rw::Randwrite, 4096, 64, 2, &[2, 3], &[0, 1]);
        let mut mixed = job("m", Rw::Randrw, 65536, 8, 1, &[4], &[1]);
        for j in [&mut reader, &mut writer, &mut mixed] {
            j.runtime_ns = 100_000_000;
        }
        // Best effort, lowest level: served by every policy. (The IDLE class would rightly wait: mq-deadline serves
        // it only when higher levels are empty or after prio_aging_expire, 10 s.)
        writer.prioclass = 2;
        writer.prio = 7;
        let mut config = seed000(2, vec![reader, writer, mixed]);
        config.scheduler.name = name.into();
        let r = simulate(&config, &mut |_| true).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.ios_issued, r.ios_completed, "{name}");
        assert!(r.ios_completed > 1000, "{name}: {} I/Os", r.ios_completed);
    }
}

/// With one process on one core nothing is contended: each I/O costs the engine's submit and complete plus the
/// scheduler's hooks, and nothing else (no lock hand-offs, no sleep/wake on a busy core).
#[test]
fn an_uncontended_scheduler_adds_exactly_its_hook_costs_per_io() {
    use iosched_sim::config::SchedulerCost;
    let mut config = seed000(1, vec![job("r", Rw::Randread, 4096, 128, 1, &[0], &[0])]);
    let engine = config.host.io_uring.clone();
    let hooks = SchedulerCost {
        insert_ns: 300,
        dispatch_ns: 200,
        complete_ns: 100,
    };
    config
        .host
        .scheduler_costs
        .insert("mq-deadline".into(), hooks.clone());
    config.scheduler.name = "mq-deadline".into();
    config.host.uncontended_lock_ns = 0; // lock time here is waiting only (next test: the lock calls)
    let r = run(&config);
    let per_io_ns = (engine.submit_ns + engine.complete_ns + 600) as f64;
    let expected_kiops = 1e6 / per_io_ns;
    let got = kiops(&r, 0, false);
    assert!(
        (got - expected_kiops).abs() / expected_kiops < 0.01,
        "{got:.1} KIOPS, expected {expected_kiops:.1}"
    );
    assert_eq!(r.cores[0].lock_ns, 0, "one core never spins or hands off");
}

/// The lock calls nobody waits on are part of each path's cost, not added to it. One pinned QD-128 reader on one
/// core under none never sleeps (the core is the bottleneck), so each I/O makes io_uring's 2 submission-path
/// acquisitions (uring_lock, the NVMe sq_lock) and 2 completion-path ones (uring_lock, completion_lock): at 10 ns
/// each, 4 x 10 = 40 ns of lock time per I/O, and the same IOPS as with the calls not counted (the negative
/// control: 0 ns per call, no lock time at all). Under mq-deadline the bio merge and the insert take dd->lock, and
/// so does every dispatch call: at least 2 + 2 + 2 + 1 = 7 calls, 70 ns per I/O (less a trace at the window's edges).
/// Kyber's kcq lock is taken once more, to flush the request to the hardware queue's list: at least 8 calls. Linux
/// 6.3's BFQ takes bfqd->lock in bio merge and insert and the queue_lock to look up the io context twice (request
/// preparation, bio merge), and from 5.18 a third look-up and bfqd->lock again in bfq_limit_depth; bfqd->lock once
/// more per dispatch call and on completion: at least 4 + 2 + 4 + 1 + 1 = 12 calls, 120 ns per I/O; with 5.2's BFQ
/// 2 fewer (at least 10).
#[test]
fn uncontended_lock_calls_count_as_lock_time_inside_the_paths_cost() {
    let reader = || vec![job("r", Rw::Randread, 4096, 128, 1, &[0], &[0])];
    let per_io_lock_ns_on = |kernel: &str, scheduler: &str, uncontended_lock_ns: u64| {
        let mut config = seed000(1, reader());
        config.host.kernel = kernel.into();
        config.scheduler.name = scheduler.into();
        config.host.uncontended_lock_ns = uncontended_lock_ns;
        let r = run(&config);
        let ios = r.jobs[0].read.ios as f64;
        (r.cores[0].lock_ns as f64 / ios, kiops(&r, 0, false))
    };
    let per_io_lock_ns = |scheduler: &str, ns: u64| per_io_lock_ns_on("6.3", scheduler, ns);
    let (none_lock, none_kiops) = per_io_lock_ns("none", 10);
    let (uncounted_lock, uncounted_kiops) = per_io_lock_ns("none", 0);
    assert!((none_lock - 40.0).abs() < 0.5, "{none_lock:.2} ns per I/O");
    assert_eq!(uncounted_lock, 0.0);
    assert_eq!(
        none_kiops, uncounted_kiops,
        "counting the calls adds no time"
    );
    let (deadline_lock, _) = per_io_lock_ns("mq-deadline", 10);
    assert!(
        (69.5..80.0).contains(&deadline_lock),
        "{deadline_lock:.2} ns per I/O"
    );
    let (kyber_lock, _) = per_io_lock_ns("kyber", 10);
    assert!(
        (79.5..90.0).contains(&kyber_lock),
        "{kyber_lock:.2} ns per I/O"
    );
    let (bfq_lock, _) = per_io_lock_ns("bfq", 10);
    assert!(
        (119.5..130.0).contains(&bfq_lock),
        "{bfq_lock:.2} ns per I/O"
    );
    let (bfq_5_2_lock, _) = per_io_lock_ns_on("5.2", "bfq", 10);
    assert!(
        (99.5..110.0).contains(&bfq_5_2_lock),
        "{bfq_5_2_lock:.2} ns per I/O"
    );
}

/// Many cores on one device-wide lock: spinning and hand-offs cap the device below what the cores could do,
/// and the lock's share of CPU is large; per-hardware-queue locks (Kyber) do not contend with pinned processes,
/// but Kyber's device-wide token wait queues do (queues that found no token add themselves, completions wake them).
#[test]
fn a_device_wide_lock_caps_throughput_under_contention() {
    let mut results = Vec::new();
    for scheduler in ["none", "kyber", "mq-deadline", "bfq"] {
        let mut config = seed000(
            1,
            vec![job(
                "t",
                Rw::Randread,
                4096,
                128,
                10,
                &(0..10).collect::<Vec<_>>(),
                &[0],
            )],
        );
        config.scheduler.name = scheduler.into();
        config.host.uncontended_lock_ns = 0; // contention only
        let r = run(&config);
        let busy: u64 = r.cores.iter().map(|c| c.busy_ns).sum();
        let lock: u64 = r.cores.iter().map(|c| c.lock_ns).sum();
        let total: f64 = (0..r.jobs.len()).map(|j| kiops(&r, j, false)).sum();
        results.push((scheduler, total, lock as f64 / busy as f64));
    }
    let [none, kyber, deadline, bfq] = [results[0], results[1], results[2], results[3]];
    assert!(none.2 == 0.0, "{results:?}");
    assert!(
        kyber.2 > 0.0 && kyber.2 < deadline.2 / 2.0,
        "Kyber spins only on its wait queues: {results:?}"
    );
    assert!(
        (kyber.1 - none.1).abs() / none.1 < 0.02,
        "Kyber keeps up with none on one SSD: {results:?}"
    );
    assert!(
        deadline.1 < 0.9 * none.1 && bfq.1 < 0.8 * deadline.1,
        "{results:?}"
    );
    assert!(
        deadline.2 > 0.5 && bfq.2 > 0.5,
        "most CPU goes to the lock: {results:?}"
    );
}

/// Seed 002's machine: the i5-4590 host with one Samsung 970 EVO, and the paper's load: three background
/// processes (4 KiB random `rw`, QD 32 each, cores 1-3) and the real-time task (one synchronous 4 KiB random read,
/// then 2 ms of think time, RT class level `rt_level`, core 0).
fn seed002(scheduler: &str, tunables: &[(&str, i64)], rw: Rw, rt_level: u32) -> SimConfig {
    let mut background = job("bg", rw, 4096, 32, 3, &[1, 2, 3], &[0]);
    background.ioengine = IoEngine::Libaio;
    background.rwmixread = 50;
    let mut rt = job("rt", Rw::Randread, 4096, 1, 1, &[0], &[0]);
    rt.ioengine = IoEngine::Psync;
    rt.thinktime_ns = 2_000_000;
    rt.prioclass = 1;
    rt.prio = rt_level;
    let mut config = seed000(1, vec![background, rt]);
    config.host = common::host("i5-4590-4c");
    config.devices = vec![common::device("samsung-970evo-250gb", "/dev/nvme0n1")];
    config.scheduler.name = scheduler.into();
    config.scheduler.tunables = tunables.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    config
}

fn scheduler_samples<'r>(r: &'r SimResult, metric: &'r str) -> impl Iterator<Item = f64> + 'r {
    r.timeseries
        .iter()
        .filter(move |s| s.source == "scheduler" && s.metric == metric)
        .map(|s| s.value)
}

/// K2's bound holds at the device: it never holds more commands than `max_inflight` (and under this load it
/// holds exactly that many at times), for reads and for mixed traffic; every I/O completes once; without K2 the
/// same load keeps far more commands at the device.
#[test]
fn k2_never_lets_the_device_hold_more_than_its_bound() {
    for rw in [Rw::Randread, Rw::Randrw] {
        for bound in [1i64, 8, 32] {
            let r = run(&seed002("k2", &[("max_inflight", bound)], rw, 0));
            let held = r.devices[0].max_outstanding_commands;
            assert_eq!(
                held, bound as u64,
                "{rw:?} k2-{bound}: the device held {held}"
            );
            assert_eq!(r.ios_issued, r.ios_completed);
            assert!(
                r.jobs[1].read.ios > 30,
                "the RT task is served: {}",
                r.jobs[1].read.ios
            );
            assert!(scheduler_samples(&r, "inflight").all(|v| v <= bound as f64));
            assert_eq!(
                scheduler_samples(&r, "inflight_peak").last(),
                Some(bound as f64)
            );
        }
        let none = run(&seed002("none", &[], rw, 0));
        assert!(
            none.devices[0].max_outstanding_commands > 64,
            "{rw:?}: none keeps ~96 at the device"
        );
    }
}

// ---------------------------------------------------------------- legacy block layer and buffered I/O (seed 004)

#[test]
fn legacy_path_with_each_scheduler_completes_every_io() {
    for (scheduler, layer) in [
        ("noop", None),
        ("deadline", None),
        ("cfq", None),
        ("bfq", Some("legacy")),
        ("bfq", None),
    ] {
        let mut readers = job("r", Rw::Randread, 4096, 8, 2, &[0, 1], &[0]);
        readers.ioengine = IoEngine::Libaio;
        let mut writer = job("w", Rw::Randwrite, 4096, 16, 1, &[2], &[0]);
        writer.ioengine = IoEngine::Libaio;
        let mut seq = job("s", Rw::Read, 131072, 4, 1, &[3], &[0]);
        seq.iodepth_batch_submit = 4;
        let mut config = common::seed004(scheduler, vec![readers, writer, seq]);
        config.scheduler.block_layer = layer.map(String::from);
        let r = run(&config);
        assert_eq!(r.ios_issued, r.ios_completed, "{scheduler}");
        let got: Vec<f64> = [(0, false), (1, true), (2, false)]
            .iter()
            .map(|&(j, w)| kiops(&r, j, w))
            .collect();
        // Progress, not equal IOPS: BFQ shares bandwidth in sectors, so the 128 KiB reader gets fewer I/Os.
        assert!(
            got.iter().all(|&k| k > 0.2),
            "{scheduler} {layer:?}: every job made progress: {got:?}"
        );
    }
}

/// The RT task's requests reach K2 in the list of their level (fio's prioclass=1, prio=N), the background's in the
/// best-effort list; a lower bound shortens the real-time task's wait behind background reads.
#[test]
fn k2_serves_the_real_time_task_from_its_level() {
    let r = run(&seed002("k2", &[("max_inflight", 8)], Rw::Randread, 3));
    let last = |metric: &str| scheduler_samples(&r, metric).last().unwrap();
    let rt_ios = r.jobs[1].read.ios;
    assert!(
        last("dispatched_rt3") >= rt_ios as f64,
        "{} RT dispatches for {rt_ios} RT reads",
        last("dispatched_rt3")
    );
    for other in ["dispatched_rt0", "dispatched_rt4", "dispatched_rt7"] {
        assert_eq!(last(other), 0.0, "{other}");
    }
    assert!(last("dispatched_be") > 1000.0);
    let p999 = |r: &SimResult| r.jobs[1].read.percentiles[14].1;
    let none = run(&seed002("none", &[], Rw::Randread, 3));
    assert!(
        p999(&r) < p999(&none),
        "k2-8 {} ns vs none {} ns",
        p999(&r),
        p999(&none)
    );
}

#[test]
fn impossible_scheduler_and_block_layer_combinations_are_errors() {
    let err = |config: &SimConfig| simulate(config, &mut |_| true).expect_err("an error");
    let mut nvme = seed000(1, vec![job("r", Rw::Randread, 4096, 1, 1, &[0], &[0])]);
    nvme.scheduler.name = "cfq".into();
    assert!(err(&nvme).contains("blk-mq only"), "{}", err(&nvme));
    let mut sata = common::seed004("cfq", vec![job("r", Rw::Randread, 4096, 1, 1, &[0], &[0])]);
    sata.scheduler.block_layer = Some("blk-mq".into());
    assert!(
        err(&sata).contains("does not exist on the blk-mq"),
        "{}",
        err(&sata)
    );
    sata.scheduler.name = "mq-deadline".into();
    sata.scheduler.block_layer = Some("legacy".into());
    assert!(
        err(&sata).contains("does not exist on the legacy"),
        "{}",
        err(&sata)
    );
    sata.scheduler.block_layer = Some("sq".into());
    assert!(
        err(&sata).contains("expected \"legacy\" or \"blk-mq\""),
        "{}",
        err(&sata)
    );
    let mut no_cache =
        common::seed004("noop", vec![common::iozone_job("w", Rw::Write, 1, 1 << 20)]);
    no_cache.host.page_cache = None;
    assert!(err(&no_cache).contains("page_cache"), "{}", err(&no_cache));
}
