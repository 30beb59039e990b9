"""End to end through the native simulator (skipped only if it is not built and IOSCHED_REQUIRE_NATIVE is unset)."""

import json
import shutil

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from iosched.cli import main

from .conftest import native_or_skip
from .test_spec import write

SPEC = """\
name = "e2e"
duration = "50ms"
ramp = "10ms"
seed = 3
devices = [{ preset = "samsung-980pro-1tb", count = 2 }]
[[job]]
name = "lapp"
rw = "randread"
iodepth = 1
cpus_allowed = "0"
[[job]]
name = "bg"
rw = "randrw"
iodepth = 16
numjobs = 2
cpus_allowed = "1-2"
filename = "/dev/nvme0n1:/dev/nvme1n1"
"""


@pytest.fixture(autouse=True)
def _needs_native():
    native_or_skip()


def run(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return res


def test_run_writes_results(tmp_path):
    spec = write(tmp_path, SPEC)
    out = tmp_path / "out"
    res = run(["run", str(spec), "--out", str(out)])
    assert "lapp: (groupid=0, jobs=1)" in res.output and "read: IOPS=" in res.output
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["job"] for r in rows] == ["lapp", "bg"]
    lapp = rows[0]
    assert lapp["read_ios"] > 0 and lapp["read_iops"] > 0 and lapp["read_clat_p99_ns"] >= lapp["read_clat_p50_ns"] > 0
    assert lapp["devices"] == 2 and len(lapp["core_busy"]) == 10 and lapp["sim_events"] > 0
    assert rows[1]["write_ios"] > 0 and rows[1]["numjobs"] == 2
    rid = lapp["run_id"]
    doc = json.loads((out / "runs" / rid / "fio.json").read_text())
    assert [j["jobname"] for j in doc["jobs"]] == ["lapp", "bg", "bg"]
    keys = list(doc["jobs"][0]["read"]["clat_ns"]["percentile"])
    assert keys == sorted(keys, key=float) and keys[:3] == ["1.000000", "5.000000", "10.000000"]  # fio's order
    r = doc["jobs"][0]["read"]
    assert r["iops"] > 0 and r["clat_ns"]["percentile"]["99.000000"] > 0 and r["clat_ns"]["bins"]
    assert sum(r["clat_ns"]["bins"].values()) == r["total_ios"]
    assert (out / "timeseries.parquet").exists() and (out / "runs" / rid / "spec.json").exists()


def test_deterministic_bytes(tmp_path):
    spec = write(tmp_path, SPEC)
    outs = [tmp_path / n for n in ("a", "b", "c")]
    run(["run", str(spec), "--out", str(outs[0])])
    run(["run", str(spec), "--out", str(outs[1])])
    run(["run", str(spec), "--out", str(outs[2]), "--seed", "4"])
    a, b, c = (sorted(p.rglob("*.*")) for p in outs)
    assert [p.relative_to(outs[0]) for p in a] == [p.relative_to(outs[1]) for p in b]
    for pa_, pb in zip(a, b):
        assert pa_.read_bytes() == pb.read_bytes(), pa_
    fio = lambda o: next(o.rglob("fio.json")).read_bytes()  # noqa: E731
    assert fio(outs[0]) != fio(outs[2])
    assert (outs[0] / "results.parquet").read_bytes() != (outs[2] / "results.parquet").read_bytes()


def test_sweep_and_repeat_into_one_dir(tmp_path):
    spec = write(tmp_path, SPEC.replace('seed = 3', 'seed = 3\nrepeat = 2') + '[sweep]\n"job.bg.iodepth" = [4, 8]\n')
    out = tmp_path / "out"
    run(["run", str(spec), "--out", str(out)])
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert len(rows) == 8 and len({r["run_id"] for r in rows}) == 4
    assert {json.loads(r["sweep_point"])["job.bg.iodepth"] for r in rows} == {4, 8}
    assert {r["seed"] for r in rows} == {3, 4}
    run(["run", str(spec), "--out", str(out)])          # rerun: rows replaced, not duplicated
    assert len(pq.read_table(out / "results.parquet")) == 8


def test_fio_jobfile_direct(tmp_path):
    jf = write(tmp_path, "[global]\nioengine=libaio\ndirect=1\ngroup_reporting\n[w]\nrw=randwrite\nnumjobs=2\n"
                         "iodepth=8\nbs=16k\n", "jobs.fio")
    out = tmp_path / "out"
    run(["run", str(jf), "--duration", "30ms", "--out", str(out)])
    doc = json.loads(next(out.rglob("fio.json")).read_text())
    assert [j["jobname"] for j in doc["jobs"]] == ["w"] and doc["jobs"][0]["write"]["iops"] > 0
    assert doc["jobs"][0]["job options"]["ioengine"] == "libaio"


def test_bench_quick_json():
    import iosched.bench as b
    res = CliRunner().invoke(main, ["bench", "--quick", "--json", "--no-cli"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    rows = out["scenarios"]
    assert [(o["scheduler"], o["ssds"]) for o in rows] == [(s, n) for s in b.SCHEDULERS for n in b.SSDS]
    assert all(o["ios"] > 0 and o["events_per_io"] > 1 and o["instructions_per_io"] is None for o in rows)
    assert out["cli"] is None
    assert b.scenario("B", 8, 1).jobs[0].config["devices"] == list(range(8))
    assert "| none | 8 |" in b.markdown_table(out)
    # The writers' scenario: 16 processes writing the same offsets on 8 drives, as in the Fig. 11c runs it stands
    # for (the drives' write path and their record of young rewrites, which the readers never reach).
    w = out["writers"]
    assert (w["processes"], w["ssds"]) == (b.WRITERS, 8) and w["ios"] > 0 and w["events_per_io"] > 1
    assert "Writers (16 processes" in b.markdown_table(out)
    config = b.writers_scenario("W", 1).jobs[0].config
    assert config["separate_processes"] and config["numjobs"] == 16 and config["rw"] == "randwrite"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind (callgrind) is not installed")
def test_bench_counts_instructions_per_io_with_callgrind():
    """Two run lengths under callgrind, the difference per I/O: a few thousand instructions (the whole event loop
    per I/O; nowhere near the millions a count including Python's start-up would give)."""
    import iosched.bench as b
    assert 500 < b.instructions_per_io(1, "none") < 50_000


def test_bench_times_the_cli():
    import iosched.bench as b
    costs = b.cli_costs(5_000_000)
    assert 0 < costs["startup_s"] < costs["run_wall_s"] and costs["run_duration_s"] == 0.005


def test_simulator_rejection_is_one_line(tmp_path):
    spec = write(tmp_path, SPEC)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["run", str(spec), "--set", "no_such_tunable=5", "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no_such_tunable" in lines[0]
    assert not out.exists()


def test_cgroup_weights_reach_the_scheduler_from_a_fio_job_file(tmp_path):
    """fio's cgroup and cgroup_weight options, through the job file, the spec and the simulator to Kyber-fairness:
    two cgroups of two processes each, weights 100 and 300, get IOPS 1:3."""
    jobs = write(tmp_path, "[global]\nrw=randread\niodepth=32\nnumjobs=2\nruntime=400ms\nramp_time=200ms\n"
                           "time_based\ngroup_reporting\n[light]\ncgroup=light\ncgroup_weight=100\n"
                           "[heavy]\ncgroup=heavy\ncgroup_weight=300\n", "weights.fio")
    out = tmp_path / "out"
    run(["run", str(jobs), "--out", str(out), "--scheduler", "kyber-fairness"])
    rows = {r["job"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
    ratio = rows["heavy"]["read_iops"] / rows["light"]["read_iops"]
    assert ratio == pytest.approx(3.0, rel=0.05)
    series = pq.read_table(out / "timeseries.parquet").to_pylist()
    assert {"cgroup1_budget_sectors", "cgroup2_budget_sectors", "wr_scale"} <= {s["metric"] for s in series}


def test_a_sweep_of_more_than_twelve_runs_keeps_every_run_in_the_latency_figure(tmp_path):
    """16 runs (four schedulers x four depths): each job's CDFs are split over panels of at most 12 runs, 12 + 4,
    where the report used to draw the first 12 and drop the rest (every bfq run, by the sweep's order)."""
    from iosched.report.build import CDF_RUNS_PER_PANEL, build

    spec = write(tmp_path, 'name = "many"\nduration = "20ms"\nramp = "0ms"\n'
                           '[[job]]\nname = "r"\nrw = "randread"\niodepth = 1\n'
                           '[sweep]\n"scheduler.name" = ["none", "mq-deadline", "kyber", "bfq"]\n'
                           '"job.r.iodepth" = [1, 2, 4, 8]\n')
    out = tmp_path / "out"
    run(["run", str(spec), "--out", str(out), "--no-report"])
    (sec,) = [s for s in build(out, static=False).sections if s.kind == "spec"]
    fig = sec.figures[0]        # the CDFs; the sweep's other figures follow (test_report)
    assert fig.id == "many-latency-cdf"
    assert [p.title for p in fig.panels] == ["r read: completion latency (runs 1-12 of 16)",
                                             "r read: completion latency (runs 13-16 of 16)"]
    assert [len(p.traces) for p in fig.panels] == [CDF_RUNS_PER_PANEL, 4]
    labels = [t.name for p in fig.panels for t in p.traces]
    assert len(set(labels)) == 16 and sum("bfq" in x for x in labels) == 4


def test_the_report_shows_the_command_as_code(tmp_path):
    """The spec section names the command in backticks, as the docs do: the page shows it as <code>, escaped, with no
    literal backtick left."""
    spec = write(tmp_path, 'name = "cmd"\nduration = "20ms"\nramp = "0ms"\n[[job]]\nname = "r"\nrw = "randread"\n')
    out = tmp_path / "out"
    run(["run", str(spec), "--out", str(out)])
    page = (out / "report.html").read_text()
    assert f'<p class="meta"><code>iosched run {spec}</code></p>' in page
    assert "`iosched run" not in page


def fio_jobs_of_one_run(tmp_path, jobs_toml: str) -> list[dict]:
    """Simulate 20 ms of these [[job]] tables (one run, no report); the jobs of its fio.json."""
    spec = write(tmp_path, 'name = "fio-json"\nduration = "20ms"\nramp = "0ms"\n' + jobs_toml)
    out = tmp_path / "out"
    run(["run", str(spec), "--out", str(out), "--no-report"])
    (rid,) = [p.name for p in (out / "runs").iterdir()]
    return json.loads((out / "runs" / rid / "fio.json").read_text())["jobs"]


def test_percentile_list_reaches_fio_json(tmp_path):
    """A job with percentile_list=99.9:50 gets exactly those percentiles in fio.json, ascending, as fio writes them;
    a job without keeps fio's default list."""
    a, b = fio_jobs_of_one_run(tmp_path, '[[job]]\nname = "a"\nrw = "randread"\npercentile_list = "99.9:50"\n'
                                         '[[job]]\nname = "b"\nrw = "randread"\n')
    assert list(a["read"]["clat_ns"]["percentile"]) == ["50.000000", "99.900000"]
    assert a["read"]["clat_ns"]["percentile"]["50.000000"] <= a["read"]["clat_ns"]["percentile"]["99.900000"]
    assert list(b["read"]["clat_ns"]["percentile"])[:3] == ["1.000000", "5.000000", "10.000000"]


def test_clat_and_lat_percentiles_choose_what_fio_json_lists(tmp_path):
    """As fio 3.33 writes json+ (checked against `fio --output-format=json+`): by default clat_ns has percentiles and
    bins and lat_ns neither; lat_percentiles=1 adds them to lat_ns (io_uring's lat adds the submission call to each
    I/O's clat, so every percentile is at least clat's); clat_percentiles=0 leaves clat_ns with its five
    statistics."""
    jobs = fio_jobs_of_one_run(tmp_path, '[[job]]\nname = "d"\nrw = "randread"\n'
                                         '[[job]]\nname = "l"\nrw = "randread"\nlat_percentiles = 1\n'
                                         '[[job]]\nname = "n"\nrw = "randread"\nclat_percentiles = 0\n')
    d, lp, n = (j["read"] for j in jobs)
    five = {"min", "max", "mean", "stddev", "N"}
    assert set(d["clat_ns"]) == five | {"percentile", "bins"} and set(d["lat_ns"]) == five
    assert set(lp["lat_ns"]) == five | {"percentile", "bins"}
    lat, clat = lp["lat_ns"]["percentile"], lp["clat_ns"]["percentile"]
    assert list(lat) == list(clat) and all(lat[k] >= clat[k] for k in lat)
    assert abs(lp["lat_ns"]["mean"] - lp["clat_ns"]["mean"] - lp["slat_ns"]["mean"]) < 1e-6 * lp["lat_ns"]["mean"]
    assert set(n["clat_ns"]) == five and set(n["lat_ns"]) == five and n["total_ios"] > 0
