"""Trace replay (read_iolog): options, validation with file:line errors, and replays end to end."""

import json
import textwrap

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from iosched import replay, sample_traces
from iosched.cli import main
from iosched.errors import SpecError
from iosched.fiojob import DeviceInfo, JobContext, RawJob, resolve_job
from iosched.spec import expand_runs, load_experiment

from .conftest import REPO, STEADY_DEVICE, native_or_skip

CAP = 1000204886016
SYSTOR = """\
    Timestamp,Response,IOType,LUN,Offset,Size
    1456095145.000000000,0.000100000,R,0,0,4096
    1456095145.001000000,0.000100000,W,1,1048576,8192
    1456095145.002000000,0.000100000,R,0,4096,4096
    1456095145.003000000,0.000100000,,0,8192,4096
    1456095145.004000000,0.000100000,W,0,12288,16384
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def ctx(runtime=None, time_based=False):
    return JobContext(devices=[DeviceInfo("/dev/nvme0n1", CAP, 512)], cores=10, default_runtime_ns=runtime,
                      default_ramp_ns=0, default_time_based=time_based)


def job(tmp_path, opts, origin="fio"):
    label = "[j]" if origin == "fio" else 'job "j"'
    return resolve_job(RawJob("j", opts, str(tmp_path / "jobs.fio"), label, origin), ctx())


def run_cli(args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res


# ---------------------------------------------------------------- options (no simulator needed)

@pytest.mark.parametrize("opts,msg", [
    ({"read_iolog": "t.csv", "rw": "randread"}, "[j] rw: not used with read_iolog: the trace gives each I/O's"),
    ({"read_iolog": "t.csv", "bs": "4k"}, "[j] bs: not used with read_iolog"),
    ({"replay_no_stall": "1"}, "[j] replay_no_stall: only with read_iolog (a trace to replay)"),
    ({"replay_lun": "1", "rw": "read"}, "[j] replay_lun: only with read_iolog"),
    ({"read_iolog": "missing.csv"}, "[j] read_iolog: no such file: \"missing.csv\" (looked in "),
    ({"read_iolog": "t.csv", "replay_lun": True}, "[j] replay_lun: expected a LUN or disk number, or major,minor"),
    ({"read_iolog": "t.csv", "read_iolog_format": "csv"},
     "[j] read_iolog_format: expected one of systor17, msr, blkparse, got \"csv\""),
    ({"read_iolog": "t.csv", "replay_time_scale": "0"}, "[j] replay_time_scale: expected an integer in 1..4294967295, got 0"),
    ({"read_iolog": "t.csv", "replay_no_stall": "maybe"}, "[j] replay_no_stall: expected 0 or 1"),
    ({"read_iolog": "t.csv", "replay_blkparse_action": "C"},
     "[j] replay_blkparse_action: expected D (issued to the driver) or Q (queued), got \"C\""),
    ({"read_iolog": "t.csv", "time_based": "1"}, "[j] runtime: required: time_based replays the trace again"),
])
def test_option_errors(tmp_path, opts, msg):
    write(tmp_path, "t.csv", SYSTOR)
    with pytest.raises(SpecError) as e:
        job(tmp_path, opts)
    assert msg in str(e.value)


def test_replay_defaults_and_config(tmp_path):
    write(tmp_path, "t.csv", SYSTOR)
    r = job(tmp_path, {"read_iolog": "t.csv", "iodepth": "8", "ioengine": "io_uring", "replay_time_scale": "200",
                       "replay_lun": "0"})
    c = r.config
    assert c["time_based"] is False, "a replay ends with its trace unless time_based"
    assert c["runtime_ns"] == 3600 * 10**9 and any("replays until the trace ends" in n for n in r.notes)
    t = c["trace"]
    assert t["path"] == str((tmp_path / "t.csv").resolve())
    assert (t["lun"], t["time_scale_percent"], t["no_stall"], t["blkparse_action"]) == ("0", 200, False, "D")
    assert len(t["sha256"]) == 64
    assert c["iodepth"] == 8 and c["bs_bytes"] == 512
    toml_job = job(tmp_path, {"read_iolog": "t.csv", "replay_lun": 1, "replay_no_stall": True}, origin="toml")
    assert toml_job.config["time_based"] is False, "also in a TOML spec, where jobs are time_based by default"
    assert toml_job.config["trace"]["lun"] == "1" and toml_job.config["trace"]["no_stall"] is True


def test_synthetic_jobs_have_no_trace_key(tmp_path):
    """Their config (and so their run ids) is what it was before trace replay existed."""
    assert "trace" not in job(tmp_path, {"rw": "randread", "runtime": "1"}).config


def test_trace_paths_are_relative_to_the_naming_file_then_the_working_directory_then_the_samples(tmp_path,
                                                                                          monkeypatch):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "t.csv", SYSTOR)
    r = resolve_job(RawJob("j", {"read_iolog": "t.csv"}, str(tmp_path / "sub" / "spec.toml"), 'job "j"', "toml"),
                    ctx())
    assert r.config["trace"]["path"] == str((tmp_path / "sub" / "t.csv").resolve())
    (tmp_path / "cwd").mkdir()
    write(tmp_path / "cwd", "w.csv", SYSTOR)
    monkeypatch.chdir(tmp_path / "cwd")
    r = resolve_job(RawJob("j", {"read_iolog": "w.csv"}, str(tmp_path / "sub" / "spec.toml"), 'job "j"', "toml"),
                    ctx())
    assert r.config["trace"]["path"] == str((tmp_path / "cwd" / "w.csv").resolve()), "where fio looks"
    sample = job(tmp_path, {"read_iolog": "systor17-vdi-4lun.csv"})
    assert sample.config["trace"]["path"] == str((replay.traces_dir() / "systor17-vdi-4lun.csv").resolve())


# ---------------------------------------------------------------- validation by the simulator's parser

@pytest.mark.parametrize("name,text,where,what", [
    ("s.csv", SYSTOR + "    1456095145.005,0.0001,T,0,0,4096\n", "s.csv: line 7",
     'IOType: expected R, W or blank, got "T"'),
    ("m.csv", "128166372003061629,hm,1,Read,0,4096,1\n128166372003061630,hm,1,Read,0,4096\n", "m.csv: line 2",
     "expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), got 6"),
    ("b.txt", "259,0 0 1 0.000000000 1 D R 8 + 16 [a]\n259,0 0 2 0.00x 1 D R 8 + 16 [a]\n", "b.txt: line 2",
     'time: expected seconds like 1456095145.133076000, got "0.00x"'),
    ("u.txt", "\n# not a trace\n", "u.txt: line 2", "cannot tell the trace format"),
])
def test_bad_traces_name_the_file_and_line(tmp_path, name, text, where, what):
    native_or_skip()
    write(tmp_path, name, text)
    with pytest.raises(SpecError) as e:
        job(tmp_path, {"read_iolog": name})
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / where)), msg
    assert what in msg and msg.endswith(f"(read_iolog of [j] in {tmp_path / 'jobs.fio'})"), msg


def test_lun_selection_is_checked_against_the_trace(tmp_path):
    native_or_skip()
    write(tmp_path, "t.csv", SYSTOR)
    with pytest.raises(SpecError, match=r'\[j\] replay_lun: no reads or writes for "7" in .*t.csv \(it has: 0, 1\)'):
        job(tmp_path, {"read_iolog": "t.csv", "replay_lun": "7"})
    with pytest.raises(SpecError, match=r"\[j\] replay_lun: a systor17 trace numbers its LUNs: expected an integer"):
        job(tmp_path, {"read_iolog": "t.csv", "replay_lun": "259,0"})
    with pytest.raises(SpecError, match=r"\[j\] replay_blkparse_action: only for blkparse traces"):
        job(tmp_path, {"read_iolog": "t.csv", "replay_blkparse_action": "Q"})
    r = job(tmp_path, {"read_iolog": "t.csv"})
    assert r.config["trace"]["format"] == "systor17", "the detected format is written into the config"
    assert any("has LUNs 0, 1: all are replayed" in n for n in r.notes)
    assert (r.trace.records, r.trace.reads, r.trace.writes, r.trace.skipped) == (4, 2, 2, 1)
    lun0 = job(tmp_path, {"read_iolog": "t.csv", "replay_lun": "0"}).trace
    assert (lun0.records, lun0.reads, lun0.writes, lun0.read_bytes, lun0.write_bytes) == (3, 2, 1, 8192, 16384)


# ---------------------------------------------------------------- end to end through the simulator

def rows(out):
    return {r["job"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}


def assert_replayed(row, summary, copies=1):
    assert (row["read_ios"], row["write_ios"]) == (summary.reads * copies, summary.writes * copies)
    window_s = row["window_ns"] / 1e9
    assert row["read_bw_bytes"] * window_s == pytest.approx(summary.read_bytes * copies, rel=1e-9)
    assert row["write_bw_bytes"] * window_s == pytest.approx(summary.write_bytes * copies, rel=1e-9)


def lasts(row, span_ns):
    """The job ran for the (scaled) span of its records, and at most a few milliseconds more to complete them."""
    return span_ns <= row["window_ns"] <= span_ns + 3_000_000


def summary_of(path, lun=None, fmt=None, action="D"):
    return replay.summarize(path, str(path), fmt, lun, action)


def test_a_toml_spec_replays_four_luns_one_per_cgroup(tmp_path):
    """Seed 001's KF4 shape: four LUN traces, one per cgroup with its own weight, without timing, iodepth 32."""
    native_or_skip()
    spec = write(tmp_path, "kf4.toml", """\
        name = "kf4"
        seed = 1
    """ + "".join(f"""
        [[job]]
        name = "lun{n}"
        read_iolog = "systor17-vdi-4lun.csv"
        replay_lun = {n}
        replay_no_stall = 1
        iodepth = 32
        cgroup = "lun{n}"
        cgroup_weight = {w}
    """ for n, w in ((0, 100), (1, 250), (2, 500), (3, 1000))))
    res = run_cli(["run", spec, "--out", tmp_path / "out"])
    assert res.exit_code == 0, res.output
    got = rows(tmp_path / "out")
    sample = replay.traces_dir() / "systor17-vdi-4lun.csv"
    for n in range(4):
        assert_replayed(got[f"lun{n}"], summary_of(sample, str(n)))
    doc = json.loads(next((tmp_path / "out").rglob("spec.json")).read_text())
    jobs = doc["sim_config"]["jobs"]
    assert [(j["cgroup"], j["cgroup_weight"], j["trace"]["lun"]) for j in jobs] == [
        ("lun0", 100, "0"), ("lun1", 250, "1"), ("lun2", 500, "2"), ("lun3", 1000, "3")]


def test_a_fio_job_file_replays_msr_and_blkparse_with_timing(tmp_path):
    native_or_skip()
    jobs = write(tmp_path, "replay.fio", """\
        [global]
        iodepth=16
        ioengine=libaio

        [disk1]
        read_iolog=msr-vdi-4disk.csv
        replay_lun=1
        numjobs=2
        group_reporting

        [dev3]
        read_iolog=blkparse-vdi-4dev.txt
        replay_lun=259,3
        replay_blkparse_action=Q
        replay_time_scale=200
    """)
    res = run_cli(["run", jobs, "--out", tmp_path / "out", *STEADY_DEVICE])
    assert res.exit_code == 0, res.output
    got = rows(tmp_path / "out")
    msr = summary_of(replay.traces_dir() / "msr-vdi-4disk.csv", "1")
    dev3 = summary_of(replay.traces_dir() / "blkparse-vdi-4dev.txt", "259,3", action="Q")
    assert_replayed(got["disk1"], msr, copies=2)  # fio: each clone replays the whole trace
    assert_replayed(got["dev3"], dev3)
    # With timing the replay lasts the trace's span (LUN 3: 62.8 ms), halved by replay_time_scale=200, plus the
    # last I/O's latency.
    assert lasts(got["dev3"], (dev3.last_ns - dev3.first_ns) / 2)
    assert lasts(got["disk1"], msr.last_ns - msr.first_ns)


def test_time_scale_and_no_stall(tmp_path):
    native_or_skip()
    sample = replay.traces_dir() / "systor17-vdi-4lun.csv"
    span = summary_of(sample, "2").last_ns
    windows = {}
    for label, extra in (("100", ""), ("50", "replay_time_scale = 50"), ("nostall", "replay_no_stall = true")):
        spec = write(tmp_path, f"{label}.toml", f"""\
            [[job]]
            name = "lun2"
            read_iolog = "{sample}"
            replay_lun = 2
            iodepth = 32
            {extra}
        """)
        res = run_cli(["run", spec, "--out", tmp_path / label, *STEADY_DEVICE])
        assert res.exit_code == 0, res.output
        windows[label] = rows(tmp_path / label)["lun2"]["window_ns"]
    assert span <= windows["100"] <= span + 3_000_000
    assert 2 * span <= windows["50"] <= 2 * span + 3_000_000
    assert windows["nostall"] < 0.5 * span, "without timing the replay runs as fast as the depth allows"


@pytest.mark.parametrize("iodepth", [1, 4])
def test_no_stall_keeps_at_most_iodepth_outstanding(tmp_path, iodepth):
    """Little's law: the mean number in flight is the sum of latencies over the elapsed time."""
    native_or_skip()
    spec = write(tmp_path, "q.toml", f"""\
        [[job]]
        name = "r"
        read_iolog = "msr-vdi-4disk.csv"
        replay_no_stall = 1
        iodepth = {iodepth}
    """)
    res = run_cli(["run", spec, "--out", tmp_path / "out"])
    assert res.exit_code == 0, res.output
    row = rows(tmp_path / "out")["r"]
    in_flight = (row["read_clat_mean_ns"] * row["read_ios"] + row["write_clat_mean_ns"] * row["write_ios"]) \
        / row["window_ns"]
    assert 0.9 * iodepth < in_flight <= iodepth


def test_jobs_replay_different_files_and_a_changed_trace_is_a_new_run(tmp_path):
    native_or_skip()
    write(tmp_path, "a.csv", SYSTOR)
    write(tmp_path, "b.csv", SYSTOR.replace(",R,0,", ",W,0,"))
    spec = write(tmp_path, "two.toml", """\
        [[job]]
        name = "a"
        read_iolog = "a.csv"
        cgroup = "ca"
        [[job]]
        name = "b"
        read_iolog = "b.csv"
        cgroup = "cb"
        cgroup_weight = 400
    """)
    runs = expand_runs(load_experiment(str(spec)))
    from iosched.backends.sim import run_id
    before = run_id(runs[0])
    res = run_cli(["run", spec, "--out", tmp_path / "out"])
    assert res.exit_code == 0, res.output
    got = rows(tmp_path / "out")
    assert (got["a"]["read_ios"], got["a"]["write_ios"]) == (2, 2)
    assert (got["b"]["read_ios"], got["b"]["write_ios"]) == (0, 4)
    write(tmp_path, "b.csv", SYSTOR)
    assert run_id(expand_runs(load_experiment(str(spec)))[0]) != before


# ---------------------------------------------------------------- the shipped samples

def test_the_samples_are_what_the_generator_writes():
    assert sample_traces.main(["--check", str(replay.traces_dir())]) == 0
    assert (replay.traces_dir() / "README.md").is_file()
    for path in replay.sample_traces():
        assert 20 * 1024 < path.stat().st_size < 400 * 1024, path


@pytest.mark.parametrize("fmt", list(sample_traces.FILES))
def test_the_samples_match_seed001_table4(fmt):
    """Average size, read:write ratio (by count) and bandwidth as recorded, per LUN, read back by the replay."""
    native_or_skip()
    path = replay.traces_dir() / sample_traces.FILES[fmt]
    for spec in sample_traces.TABLE4:
        s = summary_of(path, f"259,{spec.lun}" if fmt == "blkparse" else str(spec.lun))
        total = s.read_bytes + s.write_bytes
        assert s.format == fmt
        assert total / s.records == pytest.approx(spec.average_bytes, rel=0.002)
        assert s.reads / s.writes == pytest.approx(spec.reads_per_write, rel=0.01)
        assert total / ((s.last_ns - s.first_ns) / 1e9) == pytest.approx(spec.bandwidth_bytes_per_s, rel=0.001)
        assert s.records == round(spec.total_bytes / spec.average_bytes / sample_traces.SCALE)


def test_the_three_sample_formats_hold_the_same_ios():
    native_or_skip()
    d = replay.traces_dir()
    for lun in range(4):
        a = summary_of(d / sample_traces.FILES["systor17"], str(lun))
        b = summary_of(d / sample_traces.FILES["msr"], str(lun))
        c = summary_of(d / sample_traces.FILES["blkparse"], f"259,{lun}", action="Q")
        key = lambda s: (s.reads, s.writes, s.read_bytes, s.write_bytes, s.first_ns, s.last_ns)  # noqa: E731
        assert key(a) == key(b) == key(c)


def test_the_example_replays_four_luns_competing_for_the_whole_run(tmp_path, monkeypatch):
    """experiments/trace-replay-4lun.toml on seed 001's presets (shortened): every cgroup keeps replaying, looping
    its LUN, until the runtime; each keeps its LUN's read:write mix."""
    native_or_skip()
    monkeypatch.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
    from iosched import presets
    presets._cache.clear()
    res = run_cli(["run", REPO / "experiments" / "trace-replay-4lun.toml", "--duration", "60ms",
                   "--out", tmp_path / "out"])
    assert res.exit_code == 0, res.output
    got = rows(tmp_path / "out")
    for spec in sample_traces.TABLE4:
        row = got[f"lun{spec.lun}"]
        assert row["window_ns"] >= 60_000_000, "no cgroup ran out of trace before the end"
        assert row["read_ios"] / row["write_ios"] == pytest.approx(spec.reads_per_write, rel=0.15)


def test_the_trace_command_checks_and_summarises(tmp_path):
    native_or_skip()
    res = run_cli(["trace", "systor17-vdi-4lun.csv", "--lun", "3"])
    assert res.exit_code == 0, res.output
    assert "systor17, LUNs 0, 1, 2, 3; LUN 3:" in res.output and "481 I/Os: 296 reads" in res.output
    assert "R:W 1.600" in res.output and "bandwidth as recorded 476.54 MiB/s" in res.output
    bad = write(tmp_path, "bad.csv", SYSTOR + "    1456095145.005,0.0001,T,0,0,4096\n")
    res = run_cli(["trace", bad])
    assert res.exit_code == 2 and f"error: {bad}: line 7: IOType: expected R, W or blank" in res.output
    listing = run_cli(["trace"])
    assert all(name in listing.output for name in sample_traces.FILES.values())


def test_a_replay_gives_the_same_bytes_every_time(tmp_path):
    native_or_skip()
    spec = write(tmp_path, "d.toml", """\
        seed = 3
        [[job]]
        name = "a"
        read_iolog = "blkparse-vdi-4dev.txt"
        replay_lun = "259,1"
        iodepth = 8
    """)
    for out in ("x", "y"):
        res = run_cli(["run", spec, "--out", tmp_path / out])
        assert res.exit_code == 0, res.output
    x, y = (sorted(p for p in (tmp_path / o).rglob("*") if p.is_file()) for o in ("x", "y"))
    assert [p.relative_to(tmp_path / "x") for p in x] == [p.relative_to(tmp_path / "y") for p in y]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(x, y))


def test_the_run_id_names_the_trace_by_its_content_not_its_path(tmp_path):
    """The same trace in two checkouts is the same run (results resume and are shared); another trace is not."""
    from iosched.backends.sim import run_id
    from iosched.spec import Overrides

    def run_of(folder, text):
        folder.mkdir()
        write(folder, "t.csv", text)
        spec = write(folder, "spec.toml", """\
            name = "replay"
            [[job]]
            name = "r"
            read_iolog = "t.csv"
            replay_no_stall = 1
        """)
        (run,) = expand_runs(load_experiment(str(spec), Overrides()))
        return run

    a, b = run_of(tmp_path / "a", SYSTOR), run_of(tmp_path / "b", SYSTOR)
    assert a.jobs[0].config["trace"]["path"] != b.jobs[0].config["trace"]["path"]
    assert run_id(a) == run_id(b)
    assert a.jobs[0].config["trace"]["path"], "the config the simulator gets keeps the path"
    other = run_of(tmp_path / "c", SYSTOR.replace("4096\n", "8192\n", 1))
    assert run_id(other) != run_id(a)
