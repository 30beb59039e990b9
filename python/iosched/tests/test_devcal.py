"""The calibration's pieces without a device: the plan follows the measured queue geometry, the fit recovers a
known device from its own simulated measurements, validate mirrors the kernel's tunables, and the report shows the
comparison."""

import gzip
import json

import pytest

from iosched.devcal import comparison, fit, labhost, measure, plan, validate
from iosched.errors import SpecError
from iosched.spec import Overrides, expand_runs, load_experiment


def test_queue_geometry_reads_hardware_queues_and_driver_tags(tmp_path):
    for q, tags in (("0", 128), ("1", 128)):
        (tmp_path / "mq" / q).mkdir(parents=True)
        (tmp_path / "mq" / q / "nr_tags").write_text(f"{tags}\n")
    assert plan.queue_geometry(tmp_path) == {"max_hw_queues": 2, "queue_depth": 128}
    assert plan.queue_geometry(tmp_path / "nothing") == {}


def test_the_plans_high_queue_depth_fills_the_driver_tags_within_bounds():
    assert plan.max_qd({"max_hw_queues": 1, "queue_depth": 128}) == 128
    assert plan.max_qd({"max_hw_queues": 1, "queue_depth": 32}) == 64
    assert plan.max_qd({"max_hw_queues": 64, "queue_depth": 1023}) == 256
    names = [s.name for s in plan.plan(128)]
    assert names[:5] == ["cal-randread-qd1", "cal-randread-qd4", "cal-randread-qd16", "cal-randread-qd64",
                         "cal-randread-qd128"]
    assert "cal-randwrite-qdmax" in names and len(plan.plan(64)) == 9


@pytest.mark.usefixtures("real_presets")
def test_the_fit_recovers_a_known_device_from_its_own_simulated_measurements():
    host, _ = fit.host_preset_params()
    geometry = {"max_hw_queues": 1, "queue_depth": 128}
    truth = dict(fit.BASE_DEVICE, capacity_bytes=1 << 30, logical_block_bytes=512, **geometry,
                 read_ns_by_page_type=[40_000], command_ns=6_000, write_command_ns=15_000, write_ack_ns=30_000,
                 program_unit_bytes=16384, link_bytes_per_s=2_000_000_000)
    truth["program_ns"] = fit._drain_program_ns(truth, 1.5e9)
    steps = plan.plan(plan.max_qd(geometry))
    measured = {s.name: measure.simulate_step(host, truth, s) for s in steps}
    for jobs in measured.values():     # the measured table's bandwidth figures, as fio reports them
        for m in jobs.values():
            bs = 131072 if m is measured.get("cal-seqread-128k", {}).get("r") or \
                m is measured.get("cal-seqwrite-128k", {}).get("w") else 4096
            m["read_mb_s"], m["write_mb_s"] = m["read_kiops"] * bs / 1e3, m["write_kiops"] * bs / 1e3
            m.setdefault("read_p99_us", 0.0), m.setdefault("read_mean_us", 0.0)
            m.setdefault("write_p99_us", 0.0), m.setdefault("write_mean_us", 0.0)
    params, report = fit.fit(measured, host, 1 << 30, 512, geometry, steps, echo=lambda s: None)
    assert params["max_hw_queues"] == 1 and params["queue_depth"] == 128
    for name in ("command_ns", "write_command_ns"):
        assert params[name] == pytest.approx(truth[name], rel=0.1), name
    assert params["program_unit_bytes"] in (8192, 16384, 32768)
    fitted = [k for k in report if "not fitted" not in k]
    assert all(abs(report[k][1] / report[k][0] - 1) < 0.15 for k in fitted), report


def _runs(tmp_path, extra=""):
    spec = tmp_path / "v.toml"
    spec.write_text('name = "v"\nduration = "0.1s"\nscheduler = { name = "none" }\n' + extra +
                    '[[job]]\nname = "r"\nrw = "randread"\n'
                    '[sweep]\n"scheduler.name" = ["none", "mq-deadline", "kyber"]\n')
    return expand_runs(load_experiment(str(spec), Overrides()))


@pytest.mark.usefixtures("real_presets")
def test_validate_gives_the_simulator_the_kernels_tunables_where_they_differ(tmp_path):
    runs = _runs(tmp_path)
    kernel = {"none": {}, "mq-deadline": {"async_depth": 256, "fifo_batch": 16, "not_in_the_model": 3},
              "kyber": {"read_lat_nsec": 2000000, "write_lat_nsec": 10000000}}
    notes = validate.mirror_tunables(runs, kernel)
    by = {r.scheduler: r.tunables for r in runs}
    assert by == {"none": {}, "mq-deadline": {"async_depth": 256}, "kyber": {}}
    assert notes == ["mq-deadline: async_depth=256 (simulator default 0)"]


@pytest.mark.usefixtures("real_presets")
def test_mirror_kernel_sets_the_measured_version_before_the_tunables(tmp_path):
    runs = _runs(tmp_path)
    preset_kernel = runs[0].host["kernel"]
    kernel = {"mq-deadline": {"async_depth": 256}}
    # Negative control: nothing recorded, the preset's kernel stays.
    assert validate.mirror_kernel(runs, None, kernel) == ["mq-deadline: async_depth=256 (simulator default 0)"]
    assert {r.host["kernel"] for r in runs} == {preset_kernel}
    runs = _runs(tmp_path)
    validate.mirror_kernel(runs, "6.12.117", kernel)
    assert {r.host["kernel"] for r in runs} == {"6.12.117"} != {preset_kernel}


def test_kernel_tunables_come_from_the_kernel_runs_records(tmp_path):
    for rid, backend, sched, values in (("a", "kernel", "mq-deadline", {"async_depth": "256", "x": "[none]"}),
                                        ("b", "sim", "kyber", {"read_lat_nsec": "1"})):
        (tmp_path / "runs" / rid).mkdir(parents=True)
        for finished in ("results.parquet", "result.json.gz"):     # what makes a stored run finished
            (tmp_path / "runs" / rid / finished).write_bytes(b"")
        (tmp_path / "runs" / rid / "spec.json").write_text(json.dumps(
            {"backend": backend, "experiment": "v", "scheduler": sched, "queue_during": [{"iosched": values}]}))
    assert validate.kernel_tunables(tmp_path, "v") == {"mq-deadline": {"async_depth": 256}}


def test_validate_simulates_the_kernel_version_the_kernel_runs_recorded(tmp_path):
    assert validate.kernel_of_runs(tmp_path, "v") is None, "negative control: nothing recorded"
    for rid, backend, doc in (("a", "sim", {"kernel": "6.3"}),
                              ("b", "kernel", {"host": {"kernel": "6.18.44-lab"}}),
                              ("c", "kernel", {"kernel": "6.12", "experiment": "other"})):
        (tmp_path / "runs" / rid).mkdir(parents=True)
        for finished in ("results.parquet", "result.json.gz"):
            (tmp_path / "runs" / rid / finished).write_bytes(b"")
        (tmp_path / "runs" / rid / "spec.json").write_text(json.dumps(
            {"backend": backend, "experiment": "v", **doc}))
    assert validate.kernel_of_runs(tmp_path, "v") == "6.18.44", "from the kernel run's uname -r (patch level kept)"
    assert validate.kernel_of_runs(tmp_path, None, backend="vm") is None, "negative control: no lab run"
    (tmp_path / "runs" / "d").mkdir()
    for finished in ("results.parquet", "result.json.gz"):
        (tmp_path / "runs" / "d" / finished).write_bytes(b"")
    (tmp_path / "runs" / "d" / "spec.json").write_text(json.dumps(
        {"backend": "vm", "experiment": "w", "kernel": "6.12", "host": {"kernel": "6.12.117+deb12-amd64"}}))
    assert validate.kernel_of_runs(tmp_path, None, backend="vm") == "6.12.117", "uname -r wins over the old field"
    # Debian's 6.1: uname -r hides the stable release the run recorded (from the lab's kernel package).
    (tmp_path / "runs" / "d" / "spec.json").write_text(json.dumps(
        {"backend": "vm", "experiment": "w", "kernel": "6.1.192", "host": {"kernel": "6.1.0-57-amd64"}}))
    assert validate.kernel_of_runs(tmp_path, None, backend="vm") == "6.1.192", "the recorded stable release wins"


def test_reuse_without_earlier_measurements_says_what_is_missing(tmp_path):
    with pytest.raises(SpecError, match="no earlier measurements"):
        measure.reuse_measurements(tmp_path)


def test_the_report_shows_the_validation_table(tmp_path):
    from iosched.report.build import validation_section

    rows = [{"scheduler": s, "job": "lapp", "kernel_iops": 100.0, "sim_iops": i, "iops_ratio": i / 100,
             "kernel_p99_us": 10.0 * k, "sim_p99_us": 10.0 * m, "p99_ratio": m / k, "kernel_rank": k, "sim_rank": m}
            for s, i, k, m in (("kyber", 90.0, 1, 2), ("none", 140.0, 2, 1))]
    (tmp_path / "validation.json").write_text(json.dumps(rows))
    sec = validation_section(tmp_path)
    assert [r[0] for r in sec.tables[0].rows] == ["kyber", "none"]
    assert sec.notes == ("IOPS within ±25%: 1 of 2 schedulers", "ranking by lapp's P99: DISAGREES")


@pytest.mark.usefixtures("real_presets")
def test_the_drift_check_flags_a_device_that_moved_since_calibration():
    host, _ = fit.host_preset_params()
    geometry = {"max_hw_queues": 1, "queue_depth": 128}
    device = dict(fit.BASE_DEVICE, capacity_bytes=1 << 30, logical_block_bytes=512, **geometry,
                  write_command_ns=15_000)
    steps = plan.drift_steps(geometry)
    assert [s.name for s in steps] == ["cal-randread-qd128", "cal-randwrite-qdmax"]
    as_calibrated = {s.name: measure.simulate_step(host, device, s) for s in steps}
    rows = comparison.drift_rows("before", as_calibrated, as_calibrated, steps)
    assert [r["drifted"] for r in rows] == [False, False]
    assert all(r["ratio"] == pytest.approx(1.0) for r in rows)
    faster_writes = json.loads(json.dumps(as_calibrated))
    faster_writes["cal-randwrite-qdmax"]["w"]["write_kiops"] *= 1.3
    rows = comparison.drift_rows("after", faster_writes, as_calibrated, steps)
    assert [r["drifted"] for r in rows] == [False, True]
    assert rows[1]["ratio"] == pytest.approx(1 / 1.3)
    assert "(drifted: beyond ±10%)" in comparison.format_drift(rows).splitlines()[3]


def test_the_report_shows_the_drift_check_beside_the_validation(tmp_path):
    from iosched.report.build import validation_section

    rows = [{"scheduler": "none", "job": "lapp", "kernel_iops": 100.0, "sim_iops": 100.0, "iops_ratio": 1.0,
             "kernel_p99_us": 10.0, "sim_p99_us": 10.0, "p99_ratio": 1.0, "kernel_rank": 1, "sim_rank": 1}]
    drift = [{"when": w, "step": "cal-randwrite-qdmax", "what": "4 KiB random write, QD 128", "kernel_kiops": k,
              "sim_kiops": 75.0, "ratio": 75.0 / k, "drifted": abs(75.0 / k - 1) > 0.1} for w, k in
             (("before", 76.0), ("after", 100.0))]
    (tmp_path / "validation.json").write_text(json.dumps(rows))
    (tmp_path / "drift.json").write_text(json.dumps(drift))
    sec = validation_section(tmp_path)
    assert [t.id for t in sec.tables] == ["validation", "drift"]
    assert [r[-1] for r in sec.tables[1].rows] == ["0.99", "0.75 (drifted)"]
    assert sec.notes[-1] == "the device drifted since calibration: 1 of 2 ceilings beyond ±10%"


def _timer_run(results, rid, completion_nsec, clat_ns, irqmode="2"):
    """A made-up lab-host-timers run folder: its null_blk as the lab records it and fio's clat percentiles."""
    folder = results / "runs" / rid
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(
        {"devices": [{"null_blk": {"irqmode": irqmode, "completion_nsec": str(completion_nsec)}}]}))
    keys = ("1.000000", "10.000000", "50.000000", "90.000000", "99.000000", "99.900000")
    (folder / "fio.json").write_text(json.dumps(
        {"jobs": [{"read": {"clat_ns": {"percentile": dict(zip(keys, clat_ns))}}}]}))
    return {"experiment": labhost.TIMERS_EXPERIMENT, "run_id": rid, "backend": "vm"}


def test_timer_lateness_is_the_labs_clat_less_the_simulators(tmp_path):
    """Two 1 ms runs whose clats are the simulator's plus 0 / 50 / 100 / 300 / 2,000 / 5,000 us (one of them 20 us
    later at every quantile: their median is taken), a 2 ms run, and an irqmode=0 run that is not a timer run: the
    table gives each duration's lateness; a lab quantile below the simulator's clat (an early timer) counts 0, and the
    row stays non-decreasing. The table is one the preset loader accepts."""
    from iosched import presets
    from iosched.devcal.presetfiles import write_preset

    host = dict(presets.load_preset("host", "lab-tcg-2vcpu").params)
    host.pop("timer_lateness")
    host.pop("wake_lateness")
    base_1ms = labhost._sim_qd1_clat_ns(host, 1_000_000)
    assert 1_000_000 < base_1ms < 1_200_000                 # the timer and the modelled CPU path
    extra = [0, 50_000, 100_000, 300_000, 2_000_000, 5_000_000]
    rows = [_timer_run(tmp_path, "a", 1_000_000, [base_1ms + e for e in extra]),
            _timer_run(tmp_path, "b", 1_000_000, [base_1ms + e + 40_000 for e in extra]),
            _timer_run(tmp_path, "c", 2_000_000, [1_900_000, 2_300_000, 2_300_000, 2_400_000, 2_500_000, 2_600_000]),
            _timer_run(tmp_path, "d", 4_000_000, [1, 2, 3, 4, 5, 6], irqmode="0")]
    table, prov, figures = labhost.timer_lateness(tmp_path, rows, host)
    assert table["durations_ns"] == [1_000_000, 2_000_000] and table["quantiles"][-1] == 0.999
    assert table["late_ns"][0] == [e + 20_000 for e in extra]
    base_2ms = labhost._sim_qd1_clat_ns(host, 2_000_000)
    assert table["late_ns"][1][0] == 0                                      # 1.9 ms: earlier than the timer
    assert table["late_ns"][1][1] == table["late_ns"][1][2] == round(2_300_000 - base_2ms)
    assert figures["timer_1000000ns"]["runs"] == 2 and "P99.9" in prov
    out = tmp_path / "lab.toml"
    own_prov = {k: v for k, v in presets.load_preset("host", "lab-tcg-2vcpu").provenance.items()
                if k != "wake_lateness"}
    write_preset(out, "host", "made up", {}, dict(host, timer_lateness=table), dict(own_prov, timer_lateness=prov))
    assert presets.load_preset_file(out, "host").params["timer_lateness"] == table
    assert labhost.timer_lateness(tmp_path, rows[3:], host) is None         # no timer run: nothing to write


def _traced_timer_run(results, rid, late_us, wake_us):
    """A made-up lab-host-timers run of 1 ms timers traced with sched events: a QD-1 reader (pid 300, vCPU 0) whose
    k-th request is D'd 5 us after its Q, C'd 1 ms + late_us[k] later, and the reader, woken 10 us after the C, is
    switched in wake_us[k] after it; an unrelated thread's wake-up between (not the reader's) changes nothing."""
    row = _timer_run(results, rid, 1_000_000, [1_100_000] * 6)
    lines, t = ["# tracer: blk"], 1_000_000
    for k, (late, wake) in enumerate(zip(late_us, wake_us)):
        d, c = t + 5, t + 5 + 1_000 + late
        sector = 8 * (k + 1)
        lines += [f"  fio-300 [000] d..1.  {t / 1e6:.6f}: 254,0    Q   R {sector} + 8 [fio]",
                  f"  fio-300 [000] d..1.  {(t + 2) / 1e6:.6f}: 254,0    G   R {sector} + 8 [fio]",
                  f"  fio-300 [000] d..1.  {d / 1e6:.6f}: 254,0    D   R {sector} + 8 [fio]",
                  f"  fio-300 [000] d..2.  {(d + 1) / 1e6:.6f}: sched_switch: prev_comm=fio prev_pid=300 "
                  "prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
                  f"  <idle>-0 [000] d.h1.  {c / 1e6:.6f}: 254,0    C   R {sector} + 8 [0]",
                  f"  <idle>-0 [000] d.h2.  {(c + 1) / 1e6:.6f}: sched_waking: comm=rcu pid=18 prio=120 target_cpu=000",
                  f"  <idle>-0 [000] d.h2.  {(c + 10) / 1e6:.6f}: sched_waking: comm=fio pid=300 prio=120 "
                  "target_cpu=000",
                  f"  <idle>-0 [000] d..2.  {(c + wake) / 1e6:.6f}: sched_switch: prev_comm=swapper/0 prev_pid=0 "
                  "prev_prio=120 prev_state=R ==> next_comm=fio next_pid=300 next_prio=120"]
        t = c + wake + 30
    (results / "runs" / rid / "blktrace.txt.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    return row


def test_traced_timer_runs_give_the_timers_and_the_wake_ups_lateness_apart(tmp_path):
    """Two traced 1 ms runs of 50 requests each, pooled: timers late 1..100 us (request k of the pool: k + 1 us) and
    the reader switched in 20..218 us after each C (20 + 2 k us). Nearest rank over 100 values: P1 is the 2nd (2 us,
    20 + 2 = 22 us), P10 the 11th (11, 40), P50 the 51st (51, 120), P90 the 91st (91, 200), P99 and P99.9 the last
    (100, 218). The wake-up's table is those less libaio.sleep_wake_ns (the wake-up's CPU work the simulator books
    itself), floored at 0. The check beside them: the simulator's QD-1 clat with both. Negative controls: a run
    without a trace beside traced ones is refused in one line; untraced runs alone keep the old derivation (no
    wake-up table)."""
    from iosched import presets

    host = {k: v for k, v in presets.load_preset("host", "lab-tcg-2vcpu").params.items()
            if k not in ("timer_lateness", "wake_lateness")}
    late, wake = list(range(1, 101)), [20 + 2 * k for k in range(100)]
    rows = [_traced_timer_run(tmp_path, "a", late[:50], wake[:50]),
            _traced_timer_run(tmp_path, "b", late[50:], wake[50:])]
    table, prov, figures = labhost.timer_lateness(tmp_path, rows, host)
    assert table["durations_ns"] == [1_000_000]
    assert table["late_ns"] == [[2_000, 11_000, 51_000, 91_000, 100_000, 100_000]]
    sw = host["libaio"]["sleep_wake_ns"]
    assert figures["wake_lateness"]["late_ns"] == [[max(0, us * 1_000 - sw) for us in (22, 40, 120, 200, 218, 218)]]
    assert "D to C" in prov and "sched_switch" in figures["wake_provenance"]
    check = figures["timer_1000000ns"]
    assert check["requests"] == 100 and len(check["sim_clat_ns"]) == 6 and check["sim_clat_ns"][2] > 1_000_000
    params, provs = dict(host, timer_lateness=table), {}
    labhost._take_wake_lateness(params, provs, figures)
    assert params["wake_lateness"]["late_ns"][0][2] == 120_000 - sw and "wake_provenance" not in figures
    rows.append(_timer_run(tmp_path, "c", 1_000_000, [1_100_000] * 6))       # untraced
    with pytest.raises(SpecError, match="without a trace with sched events beside traced ones"):
        labhost.timer_lateness(tmp_path, rows, host)
    _, _, old = labhost.timer_lateness(tmp_path, rows[2:], host)
    assert "wake_lateness" not in old
    (tmp_path / "runs" / "a" / "blktrace.txt.gz").write_bytes(b"not gzip")      # a broken trace: one line
    with pytest.raises(SpecError, match=r"runs/a/blktrace.txt.gz: not a readable trace"):
        labhost.timer_lateness(tmp_path, rows[:2], host)


def test_the_simulator_reproduces_the_lab_hosts_cpu_calibration_input():
    """The lab host's libaio costs were measured as fio's CPU per I/O at QD 1 on a null_blk of irqmode=0 (the request
    ends inside queue_rq, before io_submit returns: the process never sleeps for it). The simulator on the same
    setup gives back submit_ns + complete_ns per I/O exactly (37,047 + 37,047 ns); it gave 121,902, a sleep and
    wake-up per I/O more, while it took a completion that came as the submission ended for one it slept for."""
    from iosched import native, presets
    from iosched.nullblk import device_params
    from iosched.simconfig import Job, jobs_config

    host = presets.load_preset("host", "lab-tcg-2vcpu").params
    device = dict(device_params("nullb:irqmode=0"), name="/dev/nvme0n1")
    config = jobs_config(host, device, [Job("cal", "randread", 1, [0], ioengine="libaio")], 0.2, 0.0,
                         file="test_devcal")
    job = native.simulate(config)["jobs"][0]
    ns_per_io = (job["usr_ns"] + job["sys_ns"]) / job["read"]["ios"]
    assert ns_per_io == pytest.approx(host["libaio"]["submit_ns"] + host["libaio"]["complete_ns"], rel=0.001)


def _fs_run(results, rid, fs, rw, ns_per_io):
    """A made-up fs-dio-cost run: its device as the lab records it (a file system or the raw device) and a result row
    whose fio CPU gives ``ns_per_io``: 1 s window, 100,000 I/Os, usr + sys = ns_per_io / 100 percent."""
    folder = results / "runs" / rid
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(
        {"devices": [{"filesystem": {"filesystem": fs}} if fs else {"kind": "nullb"}]}))
    ios = {"read_ios": 100_000 if rw == "read" else 0, "write_ios": 100_000 if rw == "write" else 0}
    return {"experiment": labhost.FS_EXPERIMENT, "run_id": rid, "backend": "vm", "window_ns": 1_000_000_000,
            "usr_cpu": ns_per_io / 100 * 0.4, "sys_cpu": ns_per_io / 100 * 0.6, **ios}


def test_a_file_systems_cost_is_its_median_cpu_per_io_less_the_raw_devices(tmp_path):
    """Raw reads 12,000 / 12,600 / 13,000 ns (median 12,600), raw writes 17,000 / 17,400 (median 17,200); f2fs reads
    20,000 / 20,400 / 30,000 (median 20,400: +7,800) and writes 29,800 / 30,000 / 31,000 (median 30,000: +12,800);
    xfs reads 12,000 (below the raw median: floored at 0, the file system adds nothing measurable) and writes 20,200
    (+3,000). An unrelated experiment's run is not read."""
    runs = [("r1", None, "read", 12_000), ("r2", None, "read", 12_600), ("r3", None, "read", 13_000),
            ("w1", None, "write", 17_000), ("w2", None, "write", 17_400),
            ("fr1", "f2fs", "read", 20_000), ("fr2", "f2fs", "read", 20_400), ("fr3", "f2fs", "read", 30_000),
            ("fw1", "f2fs", "write", 29_800), ("fw2", "f2fs", "write", 30_000), ("fw3", "f2fs", "write", 31_000),
            ("xr", "xfs", "read", 12_000), ("xw", "xfs", "write", 20_200)]
    rows = [_fs_run(tmp_path, *r) for r in runs] + [dict(_fs_run(tmp_path, "other", None, "read", 1), experiment="x")]
    table, prov, figures = labhost.filesystem_costs(tmp_path, rows)
    assert table == {"f2fs": {"read_ns": 7_800, "write_ns": 12_800}, "xfs": {"read_ns": 0, "write_ns": 3_000}}
    assert figures["f2fs_write"] == {"ns_per_io": [29_800, 30_000, 31_000], "raw_median_ns": 17_200,
                                     "extra_ns": 12_800}
    assert "f2fs" in prov["filesystems.f2fs"] and "+74%" in prov["filesystems.f2fs"]
    assert labhost.filesystem_costs(tmp_path, rows[-1:]) is None            # no fs-dio-cost run: nothing to write
    # Without the raw device's runs there is nothing to subtract: refused, not guessed
    with pytest.raises(SpecError, match="none with writes on the raw device"):
        labhost.filesystem_costs(tmp_path, [r for r in rows if r["run_id"] != "w1" and r["run_id"] != "w2"])
    # a file system measured for reads only is refused too
    with pytest.raises(SpecError, match="xfs has no write runs"):
        labhost.filesystem_costs(tmp_path, [r for r in rows if r["run_id"] != "xw"])


def test_the_lab_hosts_file_system_costs_are_updated_alone(tmp_path):
    """--filesystems-only: the preset keeps every other value and provenance; its filesystems are the runs', pooled
    over the folders given (the raw device's runs in one, ext4's in another)."""
    from iosched import presets
    from iosched.devcal.presetfiles import write_preset

    base = presets.load_preset("host", "lab-tcg-2vcpu")
    out = tmp_path / "lab-tcg-2vcpu.toml"
    write_preset(out, "host", base.description, base.key_figures,
                 {k: v for k, v in base.params.items() if k != "filesystems"},
                 {k: v for k, v in base.provenance.items() if not k.startswith("filesystems.")})
    import pyarrow as pa
    import pyarrow.parquet as pq
    raw, ext4 = tmp_path / "raw", tmp_path / "ext4"
    for folder, rows in ((raw, [_fs_run(raw, "r", None, "read", 12_000), _fs_run(raw, "w", None, "write", 17_000)]),
                         (ext4, [_fs_run(ext4, "er", "ext4", "read", 20_000),
                                 _fs_run(ext4, "ew", "ext4", "write", 20_000)])):
        pq.write_table(pa.Table.from_pylist(rows), folder / "results.parquet")
    with pytest.raises(SpecError, match="none with reads on the raw device"):
        labhost.update_filesystems(ext4, out)                   # ext4's folder alone: nothing to subtract
    labhost.update_filesystems([raw, ext4], out)
    after = presets.load_preset_file(out, "host")
    assert after.params["filesystems"] == {"ext4": {"read_ns": 8_000, "write_ns": 3_000}}
    assert {k: v for k, v in after.params.items() if k != "filesystems"} == \
        {k: v for k, v in base.params.items() if k != "filesystems"}
    assert "fs-dio-cost" in after.provenance["filesystems.ext4"]


def test_rewriting_the_lab_host_keeps_its_timer_interrupt_time(tmp_path):
    """The lab-host runs do not measure `timer_irq_ns`: a preset rewritten over the shipped one keeps its value and
    provenance; over no preset (or one without it) nothing is made up."""
    from iosched import presets

    shipped = presets.load_preset("host", "lab-tcg-2vcpu")
    old = tmp_path / "lab-tcg-2vcpu.toml"
    old.write_text((presets.preset_roots()[-1] / "hosts" / "lab-tcg-2vcpu.toml").read_text())
    params, prov = {"cores": 2}, {}
    labhost._keep_timer_irq(old, params, prov)
    assert params["timer_irq_ns"] == shipped.params["timer_irq_ns"] == 9_000
    assert prov["timer_irq_ns"] == shipped.provenance["timer_irq_ns"]
    params, prov = {"cores": 2}, {}
    labhost._keep_timer_irq(tmp_path / "absent.toml", params, prov)
    old.write_text(old.read_text().replace("timer_irq_ns = 9000\n", ""))
    labhost._keep_timer_irq(old, params, prov)
    assert "timer_irq_ns" not in params and "timer_irq_ns" not in prov
