"""fio's and fio-plot's own tools reading iosched's output: fio.json's window statistics, fio's log files, and a
4-scheduler x 4-depth sweep exported in bench-fio's layout for fio-plot (-L, -l, -H, -g, -C) and fio's
fio_jsonplus_clat2csv (--validate)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from iosched.cli import main

from .conftest import STEADY_DEVICE, native_or_skip


def _run(tmp_path, text, name="jobs.fio", *flags):
    spec = tmp_path / name
    spec.write_text(text)
    out = tmp_path / f"out-{name}"
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(out), "--no-report", *flags])
    assert res.exit_code == 0, res.output
    (run,) = [p for p in (out / "runs").iterdir()]
    return run


def test_fio_json_has_fios_window_statistics_and_the_logs_fios_format(tmp_path):
    """2 s measured after a 300 ms ramp, fio's 500 ms windows: 3 IOPS and bandwidth samples per direction, as
    fio 3.33 counts them for the same job (the last, partial window dropped); with log_avg_msec = 200 the
    windows are 200 ms (9 samples) and the logs hold one line per 200 ms and direction from the job's start,
    ramp included, in fio's "time, value, direction, 0, 0" form. A job without log options writes no logs.
    On a drive that collects no garbage in the run (the P4500 preset, fresh), so the rates are steady and a window's
    mean is the run's: on the default, preconditioned 980 PRO garbage collection's steps move a 200 ms window's read
    rate several-fold."""
    native_or_skip()
    run = _run(tmp_path, "[j]\nrw=randrw\nioengine=io_uring\niodepth=4\nruntime=2\nramp_time=0.3\ntime_based\n",
               "jobs.fio", *STEADY_DEVICE)
    job = json.loads((run / "fio.json").read_text())["jobs"][0]
    r = job["read"]
    # fio's "IO depths": a QD-4 job's submissions almost all bring it to 4 (fio prints "4=100.0%").
    assert job["iodepth_level"]["4"] > 99 and job["latency_depth"] == 4
    assert job["iodepth_submit"]["4"] == 100.0      # fio's default batch: one I/O per submit call (1-4)
    assert job["iodepth_complete"]["4"] == 100.0    # 4 in flight: no reap takes in more than 4 completions
    # An async engine's slat is the submission call; its lat runs from the call's start, so lat = slat + clat.
    assert r["slat_ns"]["N"] == r["clat_ns"]["N"] == r["lat_ns"]["N"] > 0 and r["slat_ns"]["mean"] > 0
    assert abs(r["lat_ns"]["mean"] - r["slat_ns"]["mean"] - r["clat_ns"]["mean"]) < 1e-6 * r["lat_ns"]["mean"]
    sync = json.loads((_run(tmp_path, "[j]\nrw=randread\nruntime=0.1\n", "sync.fio") / "fio.json").read_text())
    r_sync = sync["jobs"][0]["read"]          # psync (fio's default engine): no slat, lat is clat
    assert "slat_ns" not in r_sync and r_sync["lat_ns"]["mean"] == r_sync["clat_ns"]["mean"]
    assert (r["iops_samples"], r["bw_samples"]) == (3, 3) and not (run / "logs").exists()
    assert r["iops_min"] <= r["iops_mean"] <= r["iops_max"] and r["iops_stddev"] > 0
    assert abs(r["iops_mean"] / r["iops"] - 1) < 0.05 and abs(r["bw_agg"] - 100) < 5
    assert abs(r["bw_mean"] / (4 * r["iops_mean"]) - 1) < 1e-9          # 4 KiB reads: KiB/s = 4 x IOPS
    run = _run(tmp_path, "[j]\nrw=randrw\nioengine=io_uring\niodepth=4\nruntime=2\nramp_time=0.3\ntime_based\n"
                         "write_bw_log=pfx\n"
                         "write_iops_log=pfx\nwrite_lat_log\nlog_avg_msec=200\n", "logs.fio", *STEADY_DEVICE)
    doc = json.loads((run / "fio.json").read_text())["jobs"][0]
    assert doc["read"]["iops_samples"] == 9 and doc["job options"]["log_avg_msec"] == "200"
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["j_clat.1.log", "j_lat.1.log", "pfx_bw.1.log",
                                                                 "pfx_iops.1.log"]
    lines = [ln.split(", ") for ln in (run / "logs" / "pfx_iops.1.log").read_text().splitlines()]
    assert [ln[0] for ln in lines[:4]] == ["200", "200", "400", "400"] and len(lines) == 2 * 11
    assert {ln[2] for ln in lines} == {"0", "1"} and all(ln[3:] == ["0", "0"] for ln in lines)
    measured = [int(v) for t, v, d, *_ in lines if d == "0" and 300 < int(t) <= 2300]
    assert abs(sum(measured) / len(measured) / doc["read"]["iops"] - 1) < 0.05
    bw = [ln.split(", ") for ln in (run / "logs" / "pfx_bw.1.log").read_text().splitlines()]
    assert all(abs(int(b[1]) - 4 * int(i[1])) <= 2 for b, i in zip(bw, lines))    # KiB/s of 4 KiB I/Os
    lat = [int(ln.split(", ")[1]) for ln in (run / "logs" / "j_clat.1.log").read_text().splitlines()]
    assert min(lat) > 10_000      # ns, as fio logs latency


def _tool(name):
    path = shutil.which(name)
    if path is None:
        if os.environ.get("IOSCHED_REQUIRE_KERNEL"):
            pytest.fail(f"{name} is missing (Debian's fio package)")
        pytest.skip(f"{name} is not installed (Debian's fio package)")
    return path


def test_fio_plot_and_fio_read_a_sweep_exported_in_bench_fios_layout(tmp_path):
    native_or_skip()
    import fio_plot  # noqa: F401 - run below as `python -m fio_plot`, as its own command does

    spec = tmp_path / "qd.toml"
    spec.write_text('name = "qd"\nduration = "400ms"\nramp = "100ms"\n[[job]]\nname = "r"\nrw = "randread"\n'
                    '[sweep]\n"scheduler.name" = ["none", "mq-deadline", "kyber", "bfq"]\n'
                    '"job.r.iodepth" = [1, 4, 16, 64]\n')
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "res"), "--no-report", "-j", "2"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["export", str(tmp_path / "res"), "--bench-fio", str(tmp_path / "bf")])
    assert res.exit_code == 0 and "wrote 16 run(s)" in res.output, res.output
    folders = [tmp_path / "bf" / "qd" / s / "4k" for s in ("none", "mq-deadline", "kyber", "bfq")]
    assert sorted(p.name for p in folders[0].glob("*.json")) == ["randread-1-1.json", "randread-16-1.json",
                                                                 "randread-4-1.json", "randread-64-1.json"]
    assert (folders[0] / "randread-iodepth-16-numjobs-1_iops.1.log").is_file()

    def plot(*args):
        out = tmp_path / "plot.png"
        out.unlink(missing_ok=True)
        p = subprocess.run([sys.executable, "-m", "fio_plot", "-T", "iosched", "-r", "randread", "-o", str(out),
                            *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert p.returncode == 0 and out.stat().st_size > 10_000, p.stdout + p.stderr

    depths = ["-d", "1", "4", "16", "64", "-n", "1"]
    plot("-i", str(folders[0]), "-L", "-t", "iops", *depths)
    plot("-i", str(folders[0]), "-l", *depths)
    plot("-i", str(folders[0]), "-H", "-d", "16", "-n", "1")
    plot("-i", str(folders[0]), "-g", "-t", "iops", "lat", *depths)
    plot("-i", *map(str, folders), "-C", "-d", "16", "-n", "1")
    # Negative control: without iodepth and numjobs in the jobs' options (a TOML job that leaves them at their
    # defaults, as fio.json records it) fio-plot finds nothing to draw; the export fills them in.
    bare = tmp_path / "bare"
    shutil.copytree(folders[0], bare)
    for f in bare.glob("*.json"):
        doc = json.loads(f.read_text())
        for job in doc["jobs"]:
            job["job options"].pop("iodepth", None)
            job["job options"].pop("numjobs", None)
        f.write_text(json.dumps(doc))
    p = subprocess.run([sys.executable, "-m", "fio_plot", "-T", "x", "-r", "randread", "-o", str(tmp_path / "b.png"),
                        "-i", str(bare), "-L", "-t", "iops", *depths], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and not (tmp_path / "b.png").exists()
    # fio's own converter, then its validation of what it wrote against the json+ bins.
    tool = _tool("fio_jsonplus_clat2csv")
    src = folders[3] / "randread-64-1.json"
    for flags in ([], ["--validate"]):
        p = subprocess.run([tool, *flags, str(src), str(tmp_path / "clat")], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    assert "validated" in p.stdout


def test_bins_are_on_fios_own_bucket_grid(tmp_path):
    """Real fio's json+ bins (a short read job on a file) are each a fixed point of iosched's grid: the value fio
    names a bucket by maps to that bucket and back; and a value between two of them moves to one (the negative
    control: the simulator's own 1% buckets are not on fio's grid)."""
    from iosched.results import fio_bins, plat_index, plat_value

    fio = _tool("fio")
    target = tmp_path / "f"
    target.write_bytes(b"\0" * (8 << 20))
    p = subprocess.run([fio, "--name=j", f"--filename={target}", "--rw=randread", "--size=8M", "--runtime=300ms",
                        "--time_based", "--output-format=json+", f"--output={tmp_path / 'o.json'}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    keys = [int(k) for k in json.loads((tmp_path / "o.json").read_text())["jobs"][0]["read"]["clat_ns"]["bins"]]
    assert len(keys) > 5 and all(plat_value(plat_index(k)) == k for k in keys)
    assert plat_value(plat_index(80_000)) == 80_384 and "80000" not in fio_bins([[80_000, 1]])
