"""The VM backend for real: boots of the prepared lab (`iosched vm check`; one batch: a run per scheduler with
weighted cgroups; the RT-vs-BE example as an unprivileged user; NVMe and virtio-blk together; a killed run leaves
no qemu).

Without qemu or a prepared lab (`iosched vm prepare`; the lab is $IOSCHED_LAB_DIR or ~/.cache/iosched/lab) these
tests skip with the reason; IOSCHED_REQUIRE_VM=1 turns the skips into failures.  Runs are short (1-3 s of fio
each) and every test boots at most once: about 100 s under TCG on two cores.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from iosched.backends.vm import VmError, lab, qemu
from iosched.backends.vm.runner import BOOT_ATTEMPTS
from iosched.cli import main

from .conftest import child_processes
from .test_spec import write

REPO = Path(__file__).resolve().parents[3]
SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq")
NULLB = "nullb:irqmode=2,completion_nsec=500000,hw_queue_depth=8"


def _why_not() -> str | None:
    try:
        qemu.find_qemu()
    except VmError as e:
        return str(e)
    folder = lab.lab_dir()
    if not (folder / lab.LAB_JSON).exists():
        return f"the VM lab is not prepared in {folder} (iosched vm prepare; ./scripts/setup does)"
    try:
        lab.load(folder)
    except VmError as e:
        return str(e)
    return None


@pytest.fixture(scope="module", autouse=True)
def _vm_or_skip():
    why = _why_not()
    if why:
        if os.environ.get("IOSCHED_REQUIRE_VM"):
            pytest.fail(f"IOSCHED_REQUIRE_VM is set but the VM tests cannot run: {why}")
        pytest.skip(why)


def cli(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output + (repr(res.exception) if res.exception else "")
    return res


# 3 s measured: with 1.5 s the whole window lay inside BFQ's weight raising of the two new queues (bfq_wr_duration
# is at least 3 s), and the weights showed less and varied more (10 batches under TCG, 2026-11-29: BFQ's heavy/light
# 2.4-8.0 and none's 0.82-1.53, one CI run BFQ 1.13; 7 batches of 3 s: BFQ 4.9-11.2, none 0.83-1.40).
WEIGHTED = """
name = "vm-smoke"
duration = "3s"
ramp = "500ms"
seed = 3
scheduler = { name = "none" }
[[job]]
name = "heavy"
rw = "randread"
bs = "4k"
ioengine = "libaio"
iodepth = 8
cgroup = "heavy"
cgroup_weight = 800
[[job]]
name = "light"
rw = "randread"
bs = "4k"
ioengine = "libaio"
iodepth = 8
cgroup = "light"
cgroup_weight = 100
[sweep]
"scheduler.name" = ["none", "mq-deadline", "kyber", "bfq"]
"""


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """One boot: the four schedulers, two jobs in weighted cgroups."""
    tmp = tmp_path_factory.mktemp("vm-batch")
    spec = write(tmp, WEIGHTED)
    out = tmp / "out"
    res = cli("run", spec, "--backend", "vm", "--device", NULLB, "--out", out, "--no-report")
    return out, res.output


def test_check_probes_and_boots():
    res = cli("vm", "check")
    assert "accelerator: " in res.output and "boot: power-on to init and off again in" in res.output


def _runs(out: Path) -> dict[str, dict]:
    return {s["scheduler"]: s for s in (json.loads(p.read_text()) for p in (out / "runs").glob("*/spec.json"))}


def test_one_run_per_scheduler(batch):
    out, output = batch
    assert output.count("guest up in") == 1                 # one boot for the batch
    runs = _runs(out)
    assert set(runs) == set(SCHEDULERS)
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert len(rows) == 8 and {r["backend"] for r in rows} == {"vm"}
    release = lab.load(lab.lab_dir()).release
    for sched, s in runs.items():
        assert s["backend"] == "vm" and s["vm"]["kernel"] == release and s["vm"]["accel"] in ("kvm", "tcg")
        assert [q["scheduler"] for q in s["queue_during"]] == [sched]
        assert len(s["vm"]["guest_cpu_busy"]) == 2 and all(0 <= b <= 1 for b in s["vm"]["guest_cpu_busy"])
        assert s["devices"][0]["null_blk"]["irqmode"] == "2" and s["devices"][0]["null_blk"]["hw_queue_depth"] == "8"
        assert s["fio"]["version"].startswith("fio-3.33")
    for r in rows:
        assert r["read_ios"] > 0 and r["read_clat_p50_ns"] >= 500_000    # null_blk's timer: no I/O is faster
        assert len(r["core_busy"]) == 2
    ts = pq.read_table(out / "timeseries.parquet").to_pylist()
    assert {t["source"] for t in ts} >= {"guest", "job"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert "vm-smoke@vm" in manifest["experiments"] and manifest["experiments"]["vm-smoke@vm"]["backend"] == "vm"


def test_iosched_run_from_python(tmp_path):
    """iosched.run(backend="vm") with a dict spec: one boot, the spec's scheduler, Results over the lab's runs."""
    import iosched

    spec = {"name": "vm-api", "duration": "1s", "ramp": "200ms", "scheduler": {"name": "mq-deadline"},
            "job": [{"name": "r", "rw": "randread", "ioengine": "libaio", "iodepth": 4}]}
    res = iosched.run(spec, backend="vm", device=NULLB, vm={"cpus": 2}, out=tmp_path / "out", report=False)
    assert res.experiment == "vm-api@vm" and len(res.run_ids) == 1
    df = res.df
    assert df["backend"].tolist() == ["vm"] and df["scheduler"].tolist() == ["mq-deadline"]
    # 4 outstanding on a 0.5 ms null_blk: at most 8,000 IOPS, and by Little's law about 4 in flight (one I/O at a
    # time gives 1).  The rate itself depends on the host's CPU (2,448 IOPS at 1.48 ms = 3.6 in flight, measured
    # with another boot beside it), the number in flight does not.
    iops, clat_s = df["read_iops"].iloc[0], df["read_clat_mean_ns"].iloc[0] / 1e9
    assert iops <= 8_100 and 2.5 < iops * clat_s < 4.5, (iops, clat_s)
    assert not list((tmp_path / "out" / "runs").glob("*/blktrace*"))     # untraced unless asked


def test_a_traced_run_keeps_the_kernels_blk_trace(tmp_path):
    """--vm trace=blk+sched: every request's queueing, dispatch and completion and BFQ's own messages, as the
    guest's kernel logged them during fio, with the CPU scheduler's wake-ups and switches (trace=blk is the same
    script without the sched lines: test_vm_unit)."""
    import gzip

    import iosched

    spec = {"name": "vm-trace", "duration": "1s", "ramp": "200ms", "scheduler": {"name": "bfq"},
            "job": [{"name": "r", "rw": "randread", "ioengine": "libaio", "iodepth": 4}]}
    res = iosched.run(spec, backend="vm", device=NULLB, vm={"trace": "blk+sched"}, out=tmp_path / "out",
                      report=False)
    (run,) = (tmp_path / "out" / "runs").iterdir()
    lines = gzip.decompress((run / "blktrace.txt.gz").read_bytes()).decode().splitlines()
    action = lambda a: sum(1 for ln in lines if f" {a}   R " in ln)  # noqa: E731  (blkparse's column layout)
    ios = res.df["read_ios"].iloc[0]                                    # fio counts the measured window only
    assert action("Q") >= ios and action("D") >= ios and action("C") >= ios, (ios, action("Q"), action("C"))
    assert any(" m " in ln and "bfq" in ln for ln in lines)            # BFQ's messages
    assert any("sched_wakeup: comm=fio" in ln for ln in lines) and any("sched_switch:" in ln for ln in lines)
    from iosched import blktrace
    summary = blktrace.read(run)                                        # iosched trace-summary's reading
    (reader,) = summary.threads.values()
    assert summary.sched_events and len(reader.driver_us) >= ios and reader.cpus
    stats = (run / "blktrace-stats.txt").read_text().split("\n")
    assert all(ln.endswith("overrun: 0") for ln in stats if ln), stats


def test_weighted_cgroups_under_bfq(batch):
    out, _ = batch
    runs = _runs(out)
    rows = {(r["scheduler"], r["job"]): r for r in pq.read_table(out / "results.parquet").to_pylist()}
    for sched, s in runs.items():
        cg = s["cgroups"]
        assert cg["heavy"]["ios"] > 0 and cg["light"]["ios"] > 0           # the jobs were in their cgroups
        assert cg["heavy"]["written"]["io.bfq.weight"].split()[-1] == "800"
    ratio = {s: rows[(s, "heavy")]["read_iops"] / rows[(s, "light")]["read_iops"] for s in SCHEDULERS}
    # full strength only where the lab did not flag host contention (see test_priorities_without_root)
    assert ratio["bfq"] > (1.5 if not runs["bfq"]["warnings"] else 1.1), (ratio, runs["bfq"]["warnings"])
    assert 0.5 < ratio["none"] < 1.5, ratio            # negative control: none ignores the weights


def test_repeat_skips_done_runs(batch, tmp_path):
    """The same command again into the same OUT boots nothing (same run ids)."""
    out, _ = batch
    spec = write(tmp_path, WEIGHTED)
    res = cli("run", spec, "--backend", "vm", "--device", NULLB, "--out", out, "--no-report")
    assert "4 run(s) already in" in res.output and "guest up" not in res.output


def _as_nobody() -> list[str] | None:
    """argv prefix running iosched's Python as uid 65534 (None when we are not root: we are unprivileged)."""
    if os.geteuid() != 0:
        return None
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    for py in (sys.executable, "/usr/bin/python3"):
        if subprocess.run(drop + [py, "-c", "pass"], capture_output=True).returncode == 0:
            return drop + [py]
    pytest.skip("no Python this unprivileged user may run")


@pytest.fixture
def world_tmp():
    """A folder an unprivileged user can reach (pytest's own tmp_path is under a root-only folder)."""
    d = Path(tempfile.mkdtemp(prefix="iosched-vm-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_priorities_without_root(world_tmp):
    """The shipped example (2 s runs), run by an unprivileged user with a lab of its own: under mq-deadline and
    bfq the real-time reader gets most of the device, under none the shares follow the depths (6:2); nothing is
    written outside the lab and OUT."""
    home = world_tmp / "home"
    mine = home / "lab"
    (mine / "build").mkdir(parents=True)
    src = lab.load(lab.lab_dir())
    shutil.copy(src.dir / lab.LAB_JSON, mine / lab.LAB_JSON)
    shutil.copytree(src.build, mine / "build" / src.build.name)
    if (src.dir / "accel.json").exists():
        shutil.copy(src.dir / "accel.json", mine / "accel.json")
    out = home / "out"
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; from iosched.cli import main; "
            "sys.argv = ['iosched'] + sys.argv[3:]; main()")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    args = ["run", str(REPO / "experiments" / "vm-null-blk-priorities.toml"), "--backend", "vm",
            "--device", "nullb:irqmode=2,completion_nsec=1000000,hw_queue_depth=4", "--duration", "2s",
            "--out", str(out), "--no-report"]
    prefix = _as_nobody()
    if prefix:
        subprocess.run(["chown", "-R", "65534:65534", str(home)], check=True)
        cmd = prefix + ["-c", code, site, str(REPO / "python")] + args
    else:
        cmd = [sys.executable, "-c", code, site, str(REPO / "python")] + args
    env = dict(os.environ, HOME=str(home), IOSCHED_LAB_DIR=str(mine), XDG_CACHE_HOME=str(home / ".cache"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    iops = {(r["scheduler"], r["job"]): r["read_iops"] for r in pq.read_table(out / "results.parquet").to_pylist()}
    ratio = {s: iops[(s, "rt")] / max(iops[(s, "be")], 1.0) for s in ("none", "mq-deadline", "bfq")}
    warned = {s["scheduler"]: s["warnings"] for s in _runs(out).values()}
    # mq-deadline dispatches no best-effort request while a real-time one is outstanding: the best-effort reader
    # gets the device only when the real-time one stalls with nothing outstanding, which a host short of CPU
    # causes (its vCPU stands still while the other completes its requests).  Full strength is asserted only for
    # runs the lab did not flag; flagged ones must still favour the real-time reader.
    assert ratio["mq-deadline"] > (1.5 if warned["mq-deadline"] else 10), (iops, warned)
    assert ratio["bfq"] > (1.5 if warned["bfq"] else 2), (iops, warned)
    assert ratio["none"] < 6, iops                    # negative control: none knows no priorities
    if prefix:
        assert all(p.stat().st_uid == 65534 for p in out.rglob("*"))
    assert sorted(os.listdir(home)) == ["lab", "out"]
    assert sorted(os.listdir(mine)) == sorted(["build", "lab.json", "accel.json", ".lock", "tmp"]) \
        or sorted(os.listdir(mine)) == sorted(["build", "lab.json", ".lock", "tmp"])
    assert os.listdir(mine / "tmp") == []


TWO_DEVICES = """
name = "vm-nvme-virtio"
duration = "1s"
ramp = "200ms"
devices = [{ count = 2 }]
scheduler = { name = "mq-deadline" }
[[job]]
name = "a"
filename = "/dev/nvme0n1"
rw = "randwrite"
bs = "4k"
iodepth = 4
size = "64M"
[[job]]
name = "b"
filename = "/dev/nvme1n1"
rw = "randread"
bs = "4k"
iodepth = 4
size = "64M"
"""


def test_nvme_and_virtio(tmp_path):
    spec = write(tmp_path, TWO_DEVICES)
    out = tmp_path / "out"
    cli("run", spec, "--backend", "vm", "--device", "nvme:size=256M,max_ioqpairs=2",
        "--device", "virtio:size=256M,num_queues=1", "--out", out, "--no-report")
    (s,) = _runs(out).values()
    assert [d["guest_device"] for d in s["devices"]] == ["/dev/nvme0n1", "/dev/vda"]
    assert s["devices"][0]["hw_queues"] == 2 and s["devices"][1]["hw_queues"] == 1
    assert s["devices"][0]["capacity_bytes"] == 256 << 20
    rows = {r["job"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
    assert rows["a"]["write_ios"] > 0 and rows["b"]["read_ios"] > 0
    assert not any((lab.lab_dir() / "tmp").glob("*/d*.img"))          # the images went with the boot


FS_JOBS = """
name = "vm-fs"
duration = "1s"
ramp = "200ms"
scheduler = { name = "mq-deadline" }
[[job]]
name = "w"
rw = "randwrite"
bs = "4k"
iodepth = 4
[[job]]
name = "r"
rw = "randread"
bs = "4k"
iodepth = 4
"""


# One of each kind of device, so each file system is made once (a boot each, ~15 s under TCG); f2fs is one the host
# kernel lacks.
@pytest.mark.parametrize("fs,device", [("ext4", "nullb:memory_backed=1,size=512M"), ("xfs", "virtio:size=512M"),
                                       ("f2fs", "nvme:size=512M")])
def test_a_file_system_in_the_lab(tmp_path, fs, device):
    out = tmp_path / "out"
    cli("run", write(tmp_path, FS_JOBS), "--backend", "vm", "--device", device, "--filesystem", fs, "--out", out,
        "--no-report")
    (s,) = _runs(out).values()
    made = s["devices"][0]["filesystem"]
    # the jobs address the whole device, so the file takes FILE_SHARE of it: 0.75 x 512 MiB = 384 MiB
    assert made["filesystem"] == fs and made["file_bytes"] == 384 << 20 and made["free_bytes"] > made["file_bytes"]
    assert s["devices"][0]["target"] == made["file"] == "/mnt/iosched/d0/iosched.data"
    assert all(j["config"]["size_bytes"] == 384 << 20 for j in s["jobs"])
    (run_dir,) = (out / "runs").iterdir()
    assert "filename=/mnt/iosched/d0/iosched.data" in (run_dir / "jobs.fio").read_text()
    rows = {r["job"]: r for r in pq.read_table(out / "results.parquet").to_pylist()}
    assert rows["w"]["write_ios"] > 0 and rows["r"]["read_ios"] > 0


def _qemu_children(pid: int) -> list[int]:
    # Zombies count: a qemu that started and already died (a second boot) must still be seen.
    return [child for child, name, _ in child_processes(pid, zombies=True) if "qemu" in name]


def _runs_qemu(pid: int) -> bool:
    """Whether process `pid` is a qemu still there: one that exits between the look and the read is gone (reading
    /proc/PID/comm of a process that has just been reaped raises, which is the very outcome the callers wait for)."""
    try:
        return "qemu" in Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return False


def _vm_run_with_qemu(tmp_path, stderr) -> tuple[subprocess.Popen, list[int]]:
    """`iosched run` of WEIGHTED on the VM backend, started and waited for until its qemu has run for a second:
    (the process, qemu's pids)."""
    spec = write(tmp_path, WEIGHTED)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "iosched"), "run", str(spec), "--backend", "vm", "--device",
                             NULLB, "--out", str(tmp_path / "out"), "--no-report"],
                            stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    deadline = time.monotonic() + 60
    kids: list[int] = []
    # A qemu seen once may be the short-lived accelerator probe: wait for one still running a second later.
    while not kids and time.monotonic() < deadline and proc.poll() is None:
        seen = set(_qemu_children(proc.pid))
        time.sleep(1.0 if seen else 0.2)
        kids = sorted(seen & set(_qemu_children(proc.pid)))
    if not kids:
        proc.kill()
    assert kids, "qemu never started"
    return proc, kids


def test_killed_run_leaves_no_qemu(tmp_path):
    proc, kids = _vm_run_with_qemu(tmp_path, subprocess.DEVNULL)
    try:
        proc.send_signal(signal.SIGKILL)          # no clean-up code runs: the kernel's PDEATHSIG must do it
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_runs_qemu(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_runs_qemu(k) for k in kids)
    finally:
        if proc.poll() is None:
            proc.kill()


def _next_qemu(proc: subprocess.Popen, gone: set[int]) -> list[int]:
    """The pids of the next qemu of `proc` that is not in `gone` and still runs 0.5 s after it was seen (not the
    short-lived accelerator probe), or [] once `proc` has ended or a minute has passed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        seen = set(_qemu_children(proc.pid)) - gone
        time.sleep(0.5 if seen else 0.1)
        kids = sorted(seen & set(_qemu_children(proc.pid)))
        if kids:
            return kids
    return []


def test_a_guest_that_dies_is_one_error_line(tmp_path):
    """qemu killed under a booting guest (as a guest kernel panic with panic=-1 ends it), and again under each boot
    after it: a note per boot that it boots once more, then after the last of runner.BOOT_ATTEMPTS boots one error
    line naming where it stopped; the console (empty: the lab boots quiet, loglevel 4) is kept only when it has
    something."""
    proc, kids = _vm_run_with_qemu(tmp_path, subprocess.PIPE)
    try:
        gone = set(kids)
        for k in kids:
            os.kill(k, signal.SIGKILL)
        for boot in range(2, BOOT_ATTEMPTS + 1):
            later = _next_qemu(proc, gone)
            assert later, f"no boot {boot}: {proc.communicate(timeout=60)[1]}"
            gone |= set(later)
            for k in later:
                os.kill(k, signal.SIGKILL)
        err = proc.communicate(timeout=60)[1]
        assert proc.returncode == 1, err
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1 and "the guest stopped before finishing" in lines[0], err
        assert sum("booting once more" in ln for ln in err.splitlines()) == BOOT_ATTEMPTS - 1, err
        assert "Traceback" not in err
        assert not (tmp_path / "out" / "vm-console.log").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_guest_that_dies_while_booting_is_booted_once_more(tmp_path):
    """The first boot's qemu killed while the guest boots: the batch boots again and its runs finish. (A later boot
    that panics on its own, a TCG flake, is retried too and adds its own note: at least one, not exactly one.)"""
    proc, kids = _vm_run_with_qemu(tmp_path, subprocess.PIPE)
    try:
        for k in kids:
            os.kill(k, signal.SIGKILL)
        err = proc.communicate(timeout=600)[1]
        assert proc.returncode == 0, err
        assert sum("panics while it boots" in ln for ln in err.splitlines()) >= 1, err
        assert len(_runs(tmp_path / "out")) == 4
    finally:
        if proc.poll() is None:
            proc.kill()


def _console_of(pid: int) -> Path:
    """The serial console file of a running qemu (its ``-serial file:PATH``)."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(argv[argv.index(b"-serial") + 1].decode()[len("file:"):])


@pytest.mark.parametrize("panic", ["kernel", "ours", None])
def test_a_guest_that_dies_in_a_run(tmp_path, panic):
    """qemu killed in the middle of the batch, after its first run was written. With the console of a guest kernel's
    panic (the lines the lab's kernel writes before panic=-1 ends qemu, appended here) the unfinished runs get one
    more boot and all four are written, the panic kept in OUT/vm-console.log and named in a warning. Negative
    controls: a panic whose report runs through one of our modules' code ("[k2_iosched]"), and no panic at all, are
    one error line each, with no second boot."""
    proc, kids = _vm_run_with_qemu(tmp_path, subprocess.PIPE)
    out = tmp_path / "out"
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob("runs/*/spec.json")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        if not list(out.glob("runs/*/spec.json")):
            # Say why: seen once (2026-12-07) in a full suite, and passing when run again.
            why = (f"iosched exited {proc.returncode}: {proc.communicate(timeout=60)[1][-3000:]}"
                   if proc.poll() is not None else "iosched still running after 300 s")
            pytest.fail(f"no run was written; {why}")
        # The qemu running the batch now: the first one seen may have died while booting and been replaced (the
        # runner's boot retry after a TCG flake, seen once in CI).
        kids = sorted(_qemu_children(proc.pid))
        assert kids, "no qemu runs the batch"
        if panic:
            with open(_console_of(kids[0]), "a") as f:
                if panic == "ours":
                    f.write("[   42.000000]  k2_dispatch_request+0x2a/0x90 [k2_iosched]\n")
                f.write("[   42.000001] Kernel panic - not syncing: Fatal exception in interrupt\n")
        for k in kids:
            os.kill(k, signal.SIGKILL)
        # Every qemu started after the kill: a boot for the unfinished runs. (A retry before it, after a TCG guest
        # panicked on its own, is the runner doing its job and is not counted; its stderr would say "booting once
        # more" too, so the check watches qemu, not the text.)
        booted_after: set[int] = set()
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            booted_after |= set(_qemu_children(proc.pid)) - set(kids)
            time.sleep(0.05)
        err = proc.communicate(timeout=60)[1]
        assert "Traceback" not in err
        if panic == "kernel":
            assert proc.returncode == 0, err
            assert any("booting once more for the" in ln for ln in err.splitlines()), err
            assert booted_after, err                          # the second boot, seen as a qemu
            assert len(_runs(out)) == 4
            warnings = [ln for ln in err.splitlines() if ln.startswith("warning:") and "panicked" in ln]
            assert any(str(out / "vm-console.log") in w for w in warnings), err
            assert "Kernel panic" in (out / "vm-console.log").read_text()
        else:
            assert proc.returncode == 1, err
            lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
            assert len(lines) == 1 and "the guest stopped before finishing" in lines[0], err
            assert ("its kernel panicked" in lines[0]) == (panic == "ours"), err
            assert not booted_after, err                      # no second boot for the unfinished runs
            assert 1 <= len(_runs(out)) < 4
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_vm_run_within_a_second(tmp_path, sig):
    """iosched.interrupt for the VM backend: the signal arrives while the guest runs fio; iosched stops qemu, keeps
    nothing half-written and exits 130 with one 'interrupted' line, within a second."""
    out = tmp_path / "out"
    proc, kids = _vm_run_with_qemu(tmp_path, subprocess.PIPE)
    try:
        t0 = time.monotonic()
        proc.send_signal(sig)
        err = proc.communicate(timeout=30)[1]
        exit_s = time.monotonic() - t0
        print(f"{signal.Signals(sig).name}: exit {proc.returncode} {exit_s:.3f} s after the signal")
        assert proc.returncode == 130, err
        assert exit_s < 1.0, f"exited {exit_s:.2f} s after the signal"
        assert len([ln for ln in err.splitlines() if ln.startswith("interrupted")]) == 1, err
        assert "Traceback" not in err
        assert not any(_runs_qemu(k) for k in kids), "qemu left running"
        if (out / "runs").is_dir():
            assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")], "temporary folders left"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_stuck_run_reports_what_it_waits_on(tmp_path, monkeypatch):
    """Thirty-two fio threads, one read each in flight, on a device that serves one read a second: past the run's
    time the guest sends what it waits on, and the host raises one error naming the blocked tasks (fio threads in
    D state) and keeps the report (their kernel stacks, the queues, the kernel log under OUT/vm-stall/); no qemu is
    left.  The negative control of the stall report is every run of the other tests, which finish and send none."""
    import iosched
    from iosched.backends.vm import runner

    # The guest reports STALL_REPORT_S (30 s) before the deadline, 1 s x 3 + 37 s: 10 s into the run, when the
    # device has served about ten reads and the other threads wait (32 s to serve them all).  Started beside two
    # other boots, fewer than 8 of 16 threads were blocked 5 s in (fio was still starting them).
    monkeypatch.setattr(runner, "RUN_SLACK_S", 37.0)
    spec = {"name": "vm-stall", "duration": "1s", "scheduler": {"name": "none"},
            "job": [{"name": "r", "rw": "randread", "ioengine": "psync", "numjobs": 32}]}
    out = tmp_path / "out"
    with pytest.raises(VmError, match=r"did not finish in time \(during run .*\); \d+ blocked task\(s\): \d+ fio in .*"
                                      r"qemu ran .* CPU-s") as e:
        iosched.run(spec, backend="vm", device="virtio:size=1G,iops_total=1", vm={"cpus": 2}, out=out,
                    report=False)
    assert "its report: " in str(e.value)
    blocked = (out / "vm-stall" / "blocked.txt").read_text()
    assert blocked.count("== ") >= 4 and "fio" in blocked and "[<" in blocked, blocked    # kernel stacks
    assert (out / "vm-stall" / "dmesg.txt").exists() and (out / "vm-stall" / "hctx.txt").exists()
    assert not _qemu_children(os.getpid())
