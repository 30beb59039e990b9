"""Seed 000's checks and point scoring against the ICPE'24 artifact's own data: the artifact's numbers, fed to every
check, pass it; made-up numbers (each a plausible wrong result, such as the model gives today) fail it. Every
experiment measures a value for every plotted point it declares, from its declared runs."""

import copy

import pytest

from iosched.papers import registry, scoring
from iosched.papers import seed000 as s
from iosched.papers.scoring import CALIBRATION, CONSTRUCTION, FINDING, NOT_SIMULATED, Key
from iosched.simconfig import Job

from .conftest import native_or_skip
from .test_registry import FakeResults

CHECKS = (s.fig1_checks_from, s.latency_checks_from, s.throughput_checks_from, s.interference_checks_from,
          s.kyber_checks_from)


@pytest.fixture(autouse=True)
def real_presets(monkeypatch):
    from iosched import presets

    from .conftest import REPO
    monkeypatch.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
    presets._cache.clear()


def all_checks(values):
    return [c for f in CHECKS for c in f(values)]


def test_the_artifacts_own_numbers_pass_every_check():
    rows = all_checks(s.reference_values())
    assert len(rows) == 15
    assert all(c.holds for c in rows), [(c.finding, c.what, c.simulated) for c in rows if not c.holds]
    # one row per finding: F2, F5, F6 and F7 gather their clauses in one row (registry.one_row)
    finding = [c.finding for c in rows]
    assert len(set(finding)) == len(finding), finding
    assert {c.finding: len(c.clauses) for c in rows if c.clauses} == {"F2": 2, "F5": 2, "F6": 2, "F7": 3}


def test_the_artifacts_own_numbers_score_every_counted_point_within_the_band():
    for e in registry.experiments():
        if e.seed != "000":
            continue
        scored = e.points.score_values(s.reference_values())
        assert scored and all(p.holds for p in scored if p.counted), e.name
        assert scoring.shares(scored)[scoring.ALL].fraction == 1.0


def scaled(values, factor, figures=None):
    return {k: v * factor if figures is None or k.figure in figures else v for k, v in values.items()}


def put(values, changes):
    out = dict(values)
    for k, v in changes.items():
        out[Key(*k)] = v
    return out


def copy_series(values, figure, source, targets, quantity=None):
    """Every point of ``source`` in ``figure`` copied onto the ``targets`` series (schedulers alike)."""
    out = dict(values)
    for k, v in values.items():
        if k.figure == figure and k.series == source and (quantity is None or k.quantity == quantity):
            for t in targets:
                out[Key(figure, t, k.at, k.quantity)] = v
    return out


REF = s.reference_values()
QD = [1, 2, 4, 8, 16, 32, 64, 128, 256]
NEGATIVE = {
    # the model's knee today: one core saturated from QD 32
    "O-1": put(REF, {("fig-1a", "bs=4k", f"qd={qd}", "read_kiops"): 372.0 for qd in (32, 64, 128, 256)}),
    "F1": scaled(REF, 0.7, {"fig-1c"}),
    "F6 knee": put(REF, {("fig-4a", "none", "16", "cpu_cores"): 1.0}),
    "F6 bfq": put(REF, {("fig-2", "bfq", "256", "read_clat_p99"): 850.0}),
    "F7 knee": put(REF, {("fig-4b", "none", str(n), "cpu_cores"): 0.9 for n in (16, 32, 64, 128, 256)}),
    # the model today: 901 / 815 µs
    "F7 inter/intra": put(REF, {("fig-3", "kyber", "256", "read_clat_p99"): 1100.0}),
    "F7 10 cores": put(REF, {("fig-5b", "none", "256", "cpu_cores"): 10.0}),
    "F8": put(REF, {("fig-6b", sc, "256", "p99_over_none_at_1"): 12.0 for sc in s.SCHEDULERS}),
    "F2 values": put(REF, {("fig-7a", "bfq", str(n), "read_kiops"): 236.0 for n in s.APPS}),
    "F2 order": put(REF, {("fig-7a", "kyber", str(n), "read_kiops"): 600.0 for n in s.APPS}),
    "F3": put(REF, {(f, "kyber", n, "lock_cycles_pct"): 0.0 for f in ("fig-8a", "fig-8b") for n in ("10", "15")}),
    "F4": put(REF, {("fig-9b", "kyber", str(k), "cpu_cores"): 9.99 for k in s.F4_SSDS}),
    # the model today: BFQ 591, MQ-Deadline 2,788 KIOPS
    "F5 values": put(REF, {("fig-10", "bfq", "10", "read_miops"): 0.591,
                           ("fig-10", "mq-deadline", "10", "read_miops"): 2.788}),
    "F5 order": put(REF, {("fig-10", "bfq", "10", "read_miops"): 2.0}),
    # the model today: BFQ and MQ-Deadline no better than none with 64 KiB writers
    "F10": copy_series(REF, "fig-11d", "none", ["bfq"]),
    "F11": put(REF, {("fig-12a", sc, str(n), "fg_read_kiops"): 300.0 for sc in s.SCHEDULERS for n in s.BG_N}),
    # the model today: every scheduler lets the reader fall against writers
    "F12": copy_series(REF, "fig-12b", "none", ["kyber", "bfq"]),
    "F13": put(REF, {("table-2", f"ID{i}", at, "write_tokens"): 128.0
                     for i, at in ((0, "2ms,10ms"), (1, "0,10ms"), (5, "0,1s"))}),
    "F14": {k: (2.8 if k.quantity == "lapp_read_clat_p99" and k.figure == "table-3" else v) for k, v in REF.items()},
    # the model today: the writer at the drive's drain rate (69-70 K) everywhere
    "F15": {k: (70.0 if k.figure == "table-4" else v) for k, v in REF.items()},
}
WHICH = {"O-1": ("O-1", "knee"), "F1": ("F1", "10 processes"), "F6 knee": ("F6", "saturates"),
         "F6 bfq": ("F6", "QD 256"), "F7 knee": ("F7", "saturates"), "F7 inter/intra": ("F7", "inter-process"),
         "F7 10 cores": ("F7", "10 cores"), "F8": ("F8", ""), "F2 values": ("F2", "relative"),
         "F2 order": ("F2", "order"), "F3": ("F3", ""), "F4": ("F4", ""), "F5 values": ("F5", "KIOPS within"),
         "F5 order": ("F5", "order"), "F10": ("F10", ""), "F11": ("F11", ""), "F12": ("F12", ""),
         "F13": ("F13", ""), "F14": ("F14", ""), "F15": ("F15", "")}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_made_up_numbers_fail_the_check_they_contradict(case):
    finding, words = WHICH[case]
    rows = [c for c in all_checks(NEGATIVE[case]) if c.finding == finding and words in c.what]
    assert len(rows) == 1, (case, [c.what for c in all_checks(NEGATIVE[case]) if c.finding == finding])
    assert not rows[0].holds, (case, rows[0].simulated)
    # In a row of several clauses, the clause the numbers contradict is the one that fails.
    clause = [k for k in rows[0].clauses if words in k.what] if len(rows[0].clauses) > 1 else [rows[0]]
    assert len(clause) == 1 and not clause[0].holds, (case, [(k.what, k.holds) for k in rows[0].clauses])


def test_made_up_numbers_25_percent_off_fail_every_counted_point():
    for e in registry.experiments():
        if e.seed != "000":
            continue
        scored = e.points.score_values(scaled(REF, 0.79))
        assert not any(p.holds for p in scored if p.counted), e.name
        assert all(p.holds for p in e.points.score_values(scaled(REF, 0.81)) if p.counted), e.name


def test_calibration_inputs_construction_and_spdk_are_classified_exactly():
    plotted = [p for p in s.reference() if p.is_plotted]
    roles = {p.key: s.classify(p)[0] for p in plotted}
    calib = sorted((k.figure, k.series, k.at, k.quantity) for k, r in roles.items() if r == CALIBRATION)
    assert calib == [("fig-1a", "bs=4k", "qd=1", "read_lat_mean"), ("fig-1a", "bs=4k", "qd=64", "read_lat_mean"),
                     ("fig-1a", "bs=64k", "qd=16", "read_lat_mean"), ("fig-1a", "bs=8k", "qd=1", "read_lat_mean"),
                     ("fig-1b", "1p", "qd=1", "read_lat_mean"), ("fig-1b", "4p", "qd=64", "read_lat_mean"),
                     ("fig-2", "none", "1", "read_clat_p99"), ("fig-3", "none", "1", "read_clat_p99"),
                     # 256 QD-1 processes on one core: the host's cache refill is fitted to that run's CPU per I/O
                     ("fig-3", "none", "256", "read_clat_p99"),
                     # one QD-1 process's CPU under none: the host's added input (Fig. 1a's cpu.csv) in other runs
                     ("fig-4a", "none", "1", "cpu_cores"), ("fig-4b", "none", "1", "cpu_cores"),
                     ("fig-5b", "none", "1", "cpu_cores"), ("fig-6b", "none", "256", "p99_over_none_at_1"),
                     # one QD-128 process's IOPS under each scheduler: its hooks' cost (the added inputs, Fig. 8a's
                     # runs) in other runs
                     ("fig-7a", "bfq", "1", "read_kiops"), ("fig-7a", "kyber", "1", "read_kiops"),
                     ("fig-7a", "mq-deadline", "1", "read_kiops"),
                     # the lock share with no contention: the host's uncontended lock call (its added input)
                     ("fig-8a", "none", "1", "lock_cycles_pct")]
    construction = sorted(k.figure for k, r in roles.items() if r == CONSTRUCTION)
    assert construction == ["fig-6a", "fig-6b", "fig-6c"]
    spdk = [k for k, r in roles.items() if r == NOT_SIMULATED]
    assert len(spdk) == 85 and all("spdk" in k.series.lower() for k in spdk)
    assert sum(r == FINDING for r in roles.values()) == 1080 - 17 - 3 - 85


def fake_result(run):
    """A plausible simulator result for any declared run (every job reads and writes; Kyber's tokens sampled)."""
    def side(ios):
        return {"ios": ios, "bytes": ios * 4096, "clat_mean_ns": 1e5, "percentiles": [[99.0, 200_000]],
                "bins": [[100_000, ios]]}
    jobs = [{"name": j.config["name"], "window_ns": 10**9, "read": side(1000), "write": side(500),
             "usr_ns": 10**8, "sys_ns": 2 * 10**8, "processes": []} for j in run.jobs]
    return {"jobs": jobs, "window_ns": 10**9, "window_start_ns": 0,
            "cores": [{"busy_ns": 5 * 10**8, "lock_ns": 10**8}] * 10,
            "timeseries": [{"source": "scheduler", "subject": "/dev/nvme0n1", "metric": m, "value": 64.0, "t_ns": 5}
                           for m in ("read_tokens", "write_tokens")]}


@pytest.mark.parametrize("name", ["seed000-fig1", "seed000-latency", "seed000-throughput", "seed000-interference",
                                  "seed000-kyber"])
def test_every_plotted_point_is_measured_from_the_declared_runs(tmp_path, name):
    exp = registry.get(name)
    res = FakeResults(tmp_path, exp, fake_result)
    scored = exp.points.score(res)
    assert scored and not [p.point.label for p in scored if p.missing]
    assert exp.checks(res) and exp.figures(res) is not None and exp.tables(res) is not None


def test_seed000_covers_every_plotted_panel_of_the_artifact():
    panels = {p.figure for p in s.reference() if p.is_plotted}
    declared = [f for e in registry.experiments() if e.seed == "000" for f in e.points.figures]
    assert sorted(declared) == sorted(panels)


def test_setups_follow_the_artifact():
    """Devices, pinning and processes per figure as the artifact's fio jobs recorded them."""
    def spec(name, series):
        return dict(registry.get(name).specs(False))[series]
    one = lambda sp, job: next(j for j in sp["job"] if j["name"] == job)  # noqa: E731
    assert one(spec("seed000-fig1", "a"), "r")["cpus_allowed"] == "2"
    assert "cpus_allowed" not in one(spec("seed000-fig1", "b"), "r")
    drives = lambda sp: sum(d["count"] for d in sp["devices"])  # noqa: E731
    assert drives(spec("seed000-fig1", "c")) == 8
    assert one(spec("seed000-latency", "inter1"), "l")["cpus_allowed"] == "1"
    assert "cpus_allowed_policy" not in one(spec("seed000-latency", "inter1"), "l")   # all N share CPU 1
    assert "cpus_allowed" not in one(spec("seed000-latency", "inter10"), "l")
    for series in ("8ssd", "ssds8"):
        sp = spec("seed000-throughput", series)
        assert drives(sp) == 8 and one(sp, "t")["filename"].count(":") == 7
    inter = spec("seed000-interference", "fig11d")
    assert inter["sweep"]["job.t.numjobs"] == [1, 2, 4, 8, 16, 32] and one(inter, "t")["bs"] == "64k"
    assert one(inter, "t")["group_reporting"] == 0 and "cpus_allowed" not in one(inter, "t")
    # The L-app began its I/O ~1 s after the background apps in Figs. 11a, 11c and 11d, with them in 11b, 12a and 12b
    # (fio_timestamp); the background apps run that much longer.
    assert (one(inter, "l")["startdelay"], one(inter, "t")["runtime"], inter["duration"]) == ("1s", "21000ms", "20s")
    for series in ("fig11b", "fig12a", "fig12b"):
        assert all("startdelay" not in j and "runtime" not in j for j in spec("seed000-interference", series)["job"])
    k = spec("seed000-kyber", "grid")
    assert (one(k, "l")["cpus_allowed"], one(k, "w")["cpus_allowed"], one(k, "l")["iodepth"]) == ("1", "2", 1)
    runs = registry.get("seed000-throughput").runs(False)
    assert all(r.jobs[0].config["ioengine"] == "io_uring" for _, r in runs)
    assert copy.deepcopy(s.KYBER_FULL) == {"duration": "10s", "ramp": "26s"}


def test_the_why_notes_follow_the_measured_values():
    """Each experiment's notes on its misses are computed from the values (so they stay true as the model moves)."""
    half = scaled(REF, 0.5)
    for e in registry.experiments():
        if e.seed != "000":
            continue
        notes = e.points.why(half) if callable(e.points.why) else e.points.why
        assert notes and all(isinstance(t, str) and t for t in notes.values()), e.name
        assert set(notes) <= set(e.points.figures), e.name
    assert "0.50x" in s.throughput_why(half)["fig-9a"]


def test_write_depth_prints_the_artifacts_writers_beside_the_model():
    # One row per run; the artifact's column is its own data: Fig. 11d none with 32 writers is 10.23 GB/s over 8
    # drives (1.28 GB/s per drive; seed 000's drive state was fitted to it until 2026-12-05), with 1 writer 2.22 GB/s
    # (0.28 per drive), and Table 4's writer 129.4 KIOPS.
    from .conftest import native_or_skip
    native_or_skip()
    rows = s.write_depth(runtime_s=0.02).splitlines()[2:]
    assert len(rows) == len(s.WRITE_DEPTH_RUNS)
    cells = {(r.split("|")[1].strip(), r.split("|")[3].strip()): r.split("|")[6].strip() for r in rows}
    assert cells["fig-11d", "32"] == "1.28 GB/s"
    assert cells["fig-11d", "1"] == "0.28 GB/s"
    assert cells["table-4", "1"] == "129 KIOPS"


def test_the_testbeds_fifth_drive_is_the_slower_reader():
    """D5 (the fifth of the artifact's drives) reads 64 KiB at 1.92 / 2.12 = 0.907 of the others' rate: the measured
    ratio of seed000.SLOW_DRIVE_READ_SCALE, on the model's drive with one 64 KiB reader of QD 64 on one core. The
    drives before it and every testbed of up to 4 drives are the preset's."""
    assert s.testbed_devices(3) == [{"preset": s.DEVICE, **s.DRIVE_STATE, "count": 3}]
    eight = s.testbed_devices(8)
    assert [d["count"] for d in eight] == [4, 1, 3] and [("set" in d) for d in eight] == [False, True, False]
    assert [d["count"] for d in s.testbed_devices(5)] == [4, 1]
    from iosched import native
    from iosched.simconfig import testbed_config

    def gb_s(options):
        cfg = testbed_config(s.HOST, s.DEVICE, [Job("r", s.R, 64, [2], bs_bytes=65536)], 0.1, 0.02, file="test",
                             device_options={**s.DRIVE_STATE, **options})
        job = native.simulate(cfg)["jobs"][0]
        return job["read"]["bytes"] / job["window_ns"]
    native_or_skip()
    ratio = gb_s(s.slow_drive_set()) / gb_s({})
    assert abs(ratio - 1.923 / 2.120) < 0.02, ratio
