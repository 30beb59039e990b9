"""Results files from a synthetic SimResult (no simulator needed)."""

import json

import pyarrow.parquet as pq

from iosched.backends.sim import run_id
from iosched.results import fio_json, job_rows, latency_buckets
from iosched.spec import expand_runs, load_experiment
from iosched.store import write_run

from .test_spec import BASE, write

PCTS = [1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99]


def direction(ios, base_ns):
    if not ios:
        return {"ios": 0, "bytes": 0, "clat_min_ns": 0, "clat_max_ns": 0, "clat_mean_ns": 0.0,
                "clat_stddev_ns": 0.0, "percentiles": [], "bins": []}
    return {"ios": ios, "bytes": ios * 4096, "clat_min_ns": base_ns, "clat_max_ns": base_ns * 30,
            "clat_mean_ns": base_ns * 1.5, "clat_stddev_ns": base_ns * 0.3,
            "percentiles": [[p, int(base_ns * (1 + p / 10))] for p in PCTS],
            "bins": [[base_ns, ios - 3], [base_ns * 20, 2], [3_000_000_000, 1]]}


def fake_result(run):
    jobs = []
    for j in run.jobs:
        c = j.config
        rd = direction(1000, 80_000) if "read" in c["rw"] else direction(0, 0)
        wr = direction(500, 20_000) if "write" in c["rw"] else direction(0, 0)
        procs = [{"clone": i, "core_affinity": c["cpus_allowed"], "read": rd, "write": wr, "usr_ns": 1000,
                  "sys_ns": 5000, "context_switches": 3} for i in range(c["numjobs"])]
        jobs.append({"name": c["name"], "window_ns": c["runtime_ns"], "read": rd, "write": wr,
                     "usr_ns": 1000 * c["numjobs"], "sys_ns": 5000 * c["numjobs"],
                     "context_switches": 3 * c["numjobs"], "processes": procs})
    return {"sim_time_ns": 2_200_000_000, "events": 12345, "ios_completed": 4000, "window_start_ns": 200_000_000,
            "window_ns": 2_000_000_000, "jobs": jobs,
            "cores": [{"busy_ns": 100_000_000 * (i + 1), "lock_ns": 1_000_000} for i in range(run.host["cores"])],
            "devices": [], "timeseries": [{"t_ns": 100_000_000, "source": "job", "subject": "lapp",
                                           "metric": "iops", "value": 10.0}]}


def runs(tmp_path):
    return expand_runs(load_experiment(str(write(tmp_path, BASE.replace(
        'numjobs = 2', 'numjobs = 2\ngroup_reporting = true')))))


def test_fio_json_shape(tmp_path):
    r = runs(tmp_path)[0]
    doc = fio_json(r, fake_result(r))
    assert doc["fio version"].startswith("iosched-") and doc["disk_util"] == []
    # What fio counts and the simulator does not is left out, not written as 0 (a wall-clock timestamp, page
    # faults, the batches of submit and reap calls).
    assert not {"timestamp", "timestamp_ms", "time"} & set(doc)
    assert not {"majf", "minf"} & set(doc["jobs"][0])      # page faults: not modelled, left out
    keys = list(doc["jobs"][0])                              # fio's order of the three depth tables
    assert keys.index("iodepth_level") + 1 == keys.index("iodepth_submit") == keys.index("iodepth_complete") - 1
    assert "slat_ns" not in doc["jobs"][0]["read"]     # the fake result has none (a sync engine's)
    assert [j["jobname"] for j in doc["jobs"]] == ["lapp", "bg"]  # bg has group_reporting: one entry
    lapp = doc["jobs"][0]
    assert lapp["read"]["iops"] == 500.0 and lapp["read"]["total_ios"] == 1000
    assert lapp["read"]["clat_ns"]["percentile"]["99.000000"] == int(80_000 * 10.9)
    assert lapp["read"]["clat_ns"]["percentile"]["99.990000"] > 0
    # On fio's grid (stat.h): 80,000 ns has its top bit at 2^16, so 10 error bits; bucket 64 x 11 + (78 & 63) = 718,
    # named by 2^16 + 14.5 x 2^10 = 80,384. Likewise 1.6 ms -> 1,597,440 and 3 s -> 3,003,121,664.
    assert lapp["read"]["clat_ns"]["bins"] == {"80384": 997, "1597440": 2, "3003121664": 1}
    assert "bins" not in lapp["read"]["lat_ns"] and lapp["read"]["lat_ns"]["N"] == 1000
    assert lapp["read"]["bw"] == int(1000 * 4096 / 2 / 1024) and lapp["read"]["runtime"] == 2000
    assert lapp["write"]["total_ios"] == 0 and lapp["trim"]["total_ios"] == 0
    assert lapp["job options"]["rw"] == "randread" and lapp["job options"]["iodepth"] == "1"
    assert sum(lapp["latency_us"].values()) + sum(lapp["latency_ms"].values()) == 100.0
    assert lapp["latency_ms"][">=2000"] == 0.1
    assert lapp["latency_depth"] == 1 and sum(lapp["iodepth_level"].values()) in (0.0, 100.0)


def test_fio_json_clones_without_group_reporting(tmp_path):
    r = expand_runs(load_experiment(str(write(tmp_path, BASE))))[0]
    doc = fio_json(r, fake_result(r))
    assert [j["jobname"] for j in doc["jobs"]] == ["lapp", "bg", "bg"]


def test_latency_buckets():
    ns, us, ms = latency_buckets([{"bins": [[3, 1], [999, 1], [1500, 1], [1_000_000, 1], [5_000_000, 1],
                                            [10_000_000_000, 1]]}])
    assert ns["4"] == ns["1000"] == us["2"] == ms["2"] == ms["10"] == ms[">=2000"] == 100 / 6


def test_rows_and_write_merge(tmp_path):
    rs = runs(tmp_path)
    out = tmp_path / "out"
    for r in rs:
        write_run(out, r, run_id(r), fake_result(r))
    t = pq.read_table(out / "results.parquet").to_pylist()
    assert len(t) == 4 and {row["run_id"] for row in t} == {run_id(r) for r in rs}
    row = t[0]
    assert row["backend"] == "sim" and row["job"] == "lapp" and row["read_iops"] == 500.0
    assert row["read_clat_p99_ns"] == int(80_000 * 10.9) and row["write_ios"] == 0
    assert len(row["core_busy"]) == 10 and abs(row["core_busy"][0] - 0.05) < 1e-12
    assert row["lock_share"] == 10_000_000 / sum(100_000_000 * (i + 1) for i in range(10))
    assert json.loads(row["sweep_point"]) == {} and row["devices"] == 1 and row["device"] == "samsung-980pro-1tb"
    before = (out / "results.parquet").read_bytes()
    write_run(out, rs[1], run_id(rs[1]), fake_result(rs[1]))   # same run again: replaced, not duplicated
    assert (out / "results.parquet").read_bytes() == before
    assert len(pq.read_table(out / "timeseries.parquet")) == 2
    rid = run_id(rs[0])
    spec = json.loads((out / "runs" / rid / "spec.json").read_text())
    assert spec["run_id"] == rid and spec["sim_config"]["seed"] == rs[0].seed
    assert not list(out.rglob("*.tmp"))


def test_rows_columns(tmp_path):
    r = runs(tmp_path)[0]
    cols = set(job_rows(r, "x", fake_result(r))[0])
    for d in ("read", "write"):
        for m in ("ios", "iops", "bw_bytes", "clat_mean_ns", "clat_p50_ns", "clat_p90_ns", "clat_p99_ns",
                  "clat_p99_9_ns", "clat_p99_99_ns"):
            assert f"{d}_{m}" in cols
    assert {"usr_cpu", "sys_cpu", "core_busy", "lock_share", "sim_events", "window_ns", "numjobs"} <= cols
    assert "wall_s" not in cols


def test_fio_own_clat2csv_reads_a_job_with_one_direction(tmp_path):
    """fio's `fio_jsonplus_clat2csv` (Debian's fio package, which ./scripts/setup installs) converts our fio.json of
    a read-only job: as in fio's own json+, the unused directions carry only min/max/mean/stddev/N; with an empty
    "bins" the tool failed (IndexError)."""
    import os
    import shutil
    import subprocess

    import pytest

    tool = shutil.which("fio_jsonplus_clat2csv")
    if tool is None:
        if os.environ.get("IOSCHED_REQUIRE_KERNEL"):
            pytest.fail("fio_jsonplus_clat2csv is missing (Debian's fio package)")
        pytest.skip("fio_jsonplus_clat2csv is not installed (Debian's fio package)")
    r = runs(tmp_path)[0]
    doc = fio_json(r, fake_result(r))
    write_ = doc["jobs"][0]["write"]
    assert write_["clat_ns"] == {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}
    assert "percentile" not in write_["lat_ns"]
    src = tmp_path / "fio.json"
    src.write_text(json.dumps(doc))
    res = subprocess.run([tool, str(src), str(tmp_path / "clat")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = (tmp_path / "clat_job0").read_text().splitlines()
    assert rows[0].startswith("nsec, read_slat_ns_count") and rows[1].startswith("80384, , , , 997, 997, 0.997")


def test_a_stored_results_timeseries_is_read_only_when_asked_for(tmp_path):
    """result.json.gz holds every key but the timeseries in its first gzip member and the timeseries in a second:
    any gzip reader sees the whole result, and a check that reads no time series parses the first member alone.
    A file of the old single-member kind still loads whole; a second member that is not the timeseries fails."""
    import gzip

    import pytest

    from iosched import store

    result = {"cores": [{"busy_ns": 5}], "jobs": [{"name": "timeseries"}], "sim_time_ns": 7,
              "timeseries": [{"metric": "read_iops", "t_ns": 1, "value": 2.0}], "window_ns": 3}
    folder = store.run_dir(tmp_path, "r1")
    folder.mkdir(parents=True)
    (folder / "result.json.gz").write_bytes(store.result_gz(result))
    assert json.loads(gzip.decompress((folder / "result.json.gz").read_bytes())) == result
    assert store.load_result(tmp_path, "r1") == result
    lazy = store.load_result(tmp_path, "r1", lazy=True)
    assert dict.__contains__(lazy, "window_ns") and not dict.__contains__(lazy, "timeseries")   # not parsed yet
    assert "timeseries" in lazy and lazy.get("timeseries") == result["timeseries"] == lazy["timeseries"]
    assert lazy == result and lazy.get("missing", 1) == 1
    with pytest.raises(KeyError):
        lazy["missing"]
    (folder / "result.json.gz").write_bytes(gzip.compress(json.dumps(result).encode()))   # written before the split
    assert store.load_result(tmp_path, "r1", lazy=True) == result
    bad = gzip.compress(json.dumps({"cores": 1})[:-1].encode()) + gzip.compress(b',"other":[1]}')
    (folder / "result.json.gz").write_bytes(bad)
    with pytest.raises(ValueError):
        store.load_result(tmp_path, "r1", lazy=True)["timeseries"]


def test_a_percentile_of_a_direction_with_no_completions_is_nan_not_zero():
    """A QD-1 reader starved behind others for a whole short window completes nothing: its P99 is unknown (NaN,
    which the point scoring counts as a miss), not 0 µs and not an error. The same job with one completion has it."""
    import math

    from iosched.results import METRICS

    def job(percentiles):
        return {"window_ns": 200_000_000, "read": {"ios": len(percentiles) and 1, "percentiles": percentiles}}
    assert math.isnan(METRICS["read_p99_us"](job([])))
    assert METRICS["read_p99_us"](job([[50.0, 120_000], [99.0, 300_000]])) == 300.0
