"""iosched.run(): an experiment from Python, its Results, and the swept variables as columns."""

import json
import shutil
from pathlib import Path

import pytest

import iosched
from iosched.api import IoschedNote
from iosched.errors import SpecError

from .conftest import REPO, native_or_skip

SWEEP = {"name": "api", "duration": "20ms", "job": [{"name": "r", "rw": "randread"}],
         "sweep": {"scheduler.name": ["none", "kyber"], "job.r.iodepth": [1, 8]}}


def test_run_a_dict_spec_and_get_the_swept_variables_as_columns(tmp_path):
    native_or_skip()
    res = iosched.run(SWEEP, out=tmp_path / "out", progress=False)
    assert res.dir == tmp_path / "out" and len(res.run_ids) == 4 and res.report == tmp_path / "out" / "report.html"
    df = res.df
    assert sorted(zip(df["scheduler.name"], df["job.r.iodepth"])) == [("kyber", 1), ("kyber", 8), ("none", 1),
                                                                       ("none", 8)]
    assert (df["scheduler.name"] == df["scheduler"]).all()
    assert [json.loads(p) for p in df["sweep_point"]] == [{"scheduler.name": s, "job.r.iodepth": d}
                                                          for s, d in zip(df["scheduler.name"], df["job.r.iodepth"])]
    deep = df[df["job.r.iodepth"] == 8].set_index("scheduler.name")["read_iops"]
    shallow = df[df["job.r.iodepth"] == 1].set_index("scheduler.name")["read_iops"]
    assert (deep > 3 * shallow.reindex(deep.index)).all()
    # The same columns from load() and from SQL over the folder.
    assert list(iosched.load(res.dir).columns[-2:]) == ["job.r.iodepth", "scheduler.name"]     # in name order
    again = iosched.run(SWEEP, out=tmp_path / "out", progress=False)      # resumes: nothing to simulate again
    assert again.run_ids == res.run_ids and len(again.df) == 4


def test_run_a_spec_file_into_a_temporary_folder_with_notes_as_warnings(tmp_path):
    native_or_skip()
    spec = tmp_path / "s.toml"
    spec.write_text('duration = "5ms"\n[[job]]\nname = "r"\nrw = "randread"\nioengine = "sync"\n')
    with pytest.warns(IoschedNote, match="ioengine=sync is simulated as psync"):
        res = iosched.run(spec, progress=False, scheduler="mq-deadline")
    try:
        assert res.dir.name.startswith("iosched-run-") and res.df["scheduler"].tolist() == ["mq-deadline"]
        assert "scheduler.name" not in res.df.columns        # nothing swept: no sweep columns
    finally:
        shutil.rmtree(res.dir)


def test_bad_input_is_a_spec_error_naming_the_key(tmp_path, monkeypatch):
    with pytest.raises(SpecError, match=r"job\[0\]|unknown|bogus"):
        iosched.run({"duration": "5ms", "job": [{"name": "r", "bogus": 1}]}, out=tmp_path / "o", progress=False)
    with pytest.raises(SpecError, match='backend: expected "sim", "kernel" or "vm"'):
        iosched.run(SWEEP, backend="cloud", out=tmp_path / "o")
    with pytest.raises(SpecError, match='vm: only with backend="vm"'):
        iosched.run(SWEEP, vm={"cpus": 2}, out=tmp_path / "o")
    # The VM backend's input is checked before the lab is looked for or booted.
    with pytest.raises(SpecError, match="the VM backend needs the lab's device"):
        iosched.run(SWEEP, backend="vm", out=tmp_path / "o")
    with pytest.raises(SpecError, match="--vm: cpus=0: cpus: expected 1..64"):
        iosched.run(SWEEP, backend="vm", device="nullb", vm={"cpus": 0}, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()
    # Without out, bad input leaves no empty temporary folder behind.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(SpecError):
        iosched.run({"duration": "5ms", "job": [{"name": "r", "bogus": 1}]}, progress=False)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_docs_notebook_runs(tmp_path, monkeypatch):
    """docs/notebook.ipynb, executed by a real Jupyter kernel (nbclient, ipykernel) from a scratch folder (its
    results folder too: the kernel's TMPDIR)."""
    native_or_skip()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import ipykernel  # noqa: F401 - the kernel nbclient starts ("python3", this interpreter)
    import nbclient
    import nbformat

    nb = nbformat.read(REPO / "docs" / "notebook.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = json.dumps([o for o in outputs])
    assert "Results('qd-sweep': 16 run(s)" in text and "read_iops" in text
    assert [p.name[:12] for p in tmp_path.iterdir() if p.name.startswith("iosched-run-")] == ["iosched-run-"]


def test_a_script_without_a_main_guard_gets_one_clear_line(tmp_path):
    """A script that calls iosched.run(jobs=2) at top level: Python's spawn runs it again in each worker, which
    would call run again. The worker refuses, and the caller gets a SpecError that says what to do."""
    import subprocess
    import sys

    native_or_skip()
    script = tmp_path / "sweep.py"
    script.write_text(f"import iosched\niosched.run({SWEEP!r}, out={str(tmp_path / 'o')!r}, jobs=2, progress=False, "
                      "report=False)\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("iosched.errors.SpecError: jobs: a worker process ended abruptly"), res.stderr
    assert 'if __name__ == "__main__":' in last


def _one_tiny_run(out: str) -> int:
    return len(iosched.run({"duration": "5ms", "job": [{"name": "r", "rw": "randread"}]}, out=out, progress=False,
                           report=False).run_ids)


def test_a_spawned_workers_task_may_call_run(tmp_path):
    """Negative control of the guard above: a task running in a spawned worker (the user's own pool) runs."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    native_or_skip()
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        assert pool.submit(_one_tiny_run, str(tmp_path / "o")).result(timeout=120) == 1
