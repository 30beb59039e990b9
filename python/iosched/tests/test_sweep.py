"""Sweeps: parallel on local cores or a Dask cluster with the same bytes as one process, resumable, and Ctrl-C
keeps every finished run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from iosched import store
from iosched.cli import main

from .conftest import DATA, native_or_skip
from .test_spec import write

SPEC = """\
name = "sweep"
duration = "{duration}"
ramp = "10ms"
seed = 2
repeat = 2
[[job]]
name = "r"
rw = "randread"
iodepth = 16
numjobs = 2
cpus_allowed = "0-1"
cpus_allowed_policy = "split"
[sweep]
"scheduler.name" = ["none", "kyber", "mq-deadline"]
"job.r.iodepth" = {depths}
"""


@pytest.fixture(autouse=True)
def _needs_native():
    native_or_skip()


def spec(tmp_path, duration="30ms", depths="[1, 8]"):
    return write(tmp_path, SPEC.format(duration=duration, depths=depths))


def run(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return res


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_parallel_runs_give_the_same_bytes_as_one_process(tmp_path):
    s = spec(tmp_path)
    run(["run", str(s), "--out", str(tmp_path / "one"), "--jobs", "1", "--no-report"])
    run(["run", str(s), "--out", str(tmp_path / "two"), "--jobs", "2", "--no-report"])
    a, b = files(tmp_path / "one"), files(tmp_path / "two")
    assert len([k for k in a if k.endswith("result.json.gz")]) == 12
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)


def test_rerun_resumes_and_skips_finished_runs(tmp_path):
    s, out = spec(tmp_path), tmp_path / "out"
    first = run(["run", str(s), "--out", str(out), "--no-report"])
    assert "wrote 12 run(s)" in first.output
    before = (out / "results.parquet").read_bytes()
    victim = sorted(p for p in (out / "runs").iterdir())[5]
    import shutil
    shutil.rmtree(victim)
    again = run(["run", str(s), "--out", str(out), "--no-report"])
    assert "11 run(s) already in" in again.output and "wrote 1 run(s)" in again.output
    assert (out / "results.parquet").read_bytes() == before


def test_run_ids_change_with_the_code_version(tmp_path, monkeypatch):
    from iosched import version
    from iosched.backends import sim
    from iosched.spec import expand_runs, load_experiment

    r = expand_runs(load_experiment(str(spec(tmp_path))))[0]
    rid = sim.run_id(r)
    monkeypatch.setattr(version, "_CODE_VERSION", version.code_version() + "-changed")
    assert sim.run_id(r) != rid


def test_a_worker_with_another_code_version_refuses(tmp_path):
    from iosched.sweep import CodeVersionMismatch, simulate_task

    with pytest.raises(CodeVersionMismatch, match="install the same iosched build on every worker"):
        simulate_task("{}", "0.0.0+other")


def test_ctrl_c_keeps_finished_runs_and_a_rerun_completes_the_sweep(tmp_path):
    """Interrupt a parallel sweep (SIGINT to the iosched process), then resume it."""
    s, out = spec(tmp_path, duration="400ms", depths="[1, 2, 4, 8]"), tmp_path / "out"
    env = dict(os.environ, IOSCHED_PRESETS=str(DATA / "presets"))
    cmd = [sys.executable, "-m", "iosched.cli", "run", str(s), "--out", str(out), "--jobs", "2", "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # progress lines: "[k/24] sweep <run id> ..."
        line = proc.stderr.readline()
        if not line:
            break
        if line.startswith("["):
            seen.append(line)
        if len(seen) >= 3:
            break
    assert len(seen) >= 3, "the sweep did not make progress"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    done = store.finished_runs(out)
    assert 3 <= len(done) < 24, "interrupted too late to test anything"
    assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")], "half-written run folders left"
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert {r["run_id"] for r in rows} == set(done)  # the combined table holds exactly the finished runs
    resumed = run(["run", str(s), "--out", str(out), "--jobs", "2", "--no-report"])
    assert f"{len(done)} run(s) already in" in resumed.output and f"wrote {24 - len(done)} run(s)" in resumed.output
    fresh = tmp_path / "fresh"
    run(["run", str(s), "--out", str(fresh), "--jobs", "2", "--no-report"])
    assert (out / "results.parquet").read_bytes() == (fresh / "results.parquet").read_bytes()


def test_dask_local_cluster_runs_the_same_sweep(tmp_path):
    distributed = pytest.importorskip("distributed")
    s = spec(tmp_path)
    run(["run", str(s), "--out", str(tmp_path / "local"), "--no-report"])
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        res = run(["run", str(s), "--out", str(tmp_path / "dask"), "--cluster", lc.scheduler_address,
                   "--no-report"])
    assert "wrote 12 run(s)" in res.output
    a, b = files(tmp_path / "local"), files(tmp_path / "dask")
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)


def test_slurm_option_goes_through_dask_jobqueue(tmp_path, monkeypatch):
    """`--cluster slurm:N` builds dask-jobqueue's SLURMCluster (from the Dask config) and scales it to N jobs; here
    a LocalCluster stands in for SLURM, which this machine does not have."""
    distributed = pytest.importorskip("distributed")
    jq = pytest.importorskip("dask_jobqueue")
    scaled = []

    class FakeSLURM(distributed.LocalCluster):
        def __init__(self):
            super().__init__(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)

        def scale(self, n=None, jobs=0, **kw):
            scaled.append(jobs)

    monkeypatch.setattr(jq, "SLURMCluster", FakeSLURM)
    res = run(["run", str(spec(tmp_path)), "--out", str(tmp_path / "o"), "--cluster", "slurm:3", "--no-report"])
    assert scaled[0] == 3 and "wrote 12 run(s)" in res.output  # (closing scales it to 0)
    bad = CliRunner().invoke(main, ["run", str(spec(tmp_path)), "--out", str(tmp_path / "p"), "--cluster", "foo"])
    assert bad.exit_code == 2 and "expected tcp://HOST:PORT, slurm or slurm:N" in bad.output
