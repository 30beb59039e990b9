"""The kernel backend for real, as root, on loop devices this module creates (and removes): a smoke run under each
scheduler, tunables applied and restored, cgroup weights, refusals, restore after SIGINT and after a killed run,
filesystems, preconditioning, compare.

Without root, fio or loop devices these tests skip with the reason; IOSCHED_REQUIRE_KERNEL=1 (set by .ci/run, CI
runs as root) turns those skips into failures.  Runs are short (a few hundred ms each).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from iosched.backends.kernel.blockdev import BlockDevice
from iosched.cli import main

from .test_spec import write

SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (sysfs, cgroups, loop devices)"
    if shutil.which("fio") is None:
        return "fio is not installed (./scripts/setup installs it as root; apt-get install fio)"
    if shutil.which("losetup") is None or not Path("/dev/loop-control").exists():
        return "no loop device support (losetup, /dev/loop-control)"
    return None


@pytest.fixture(scope="module", autouse=True)
def _kernel_or_skip():
    why = _why_not()
    if why:
        if os.environ.get("IOSCHED_REQUIRE_KERNEL"):
            pytest.fail(f"IOSCHED_REQUIRE_KERNEL is set but the kernel tests cannot run: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    """A private state dir (recovery records, lock files, loop records) for this module's runs."""
    d = tmp_path_factory.mktemp("iosched-state")
    old = os.environ.get("IOSCHED_STATE_DIR")
    os.environ["IOSCHED_STATE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("IOSCHED_STATE_DIR", None)
    else:
        os.environ["IOSCHED_STATE_DIR"] = old


def cli(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output + (repr(res.exception) if res.exception else "")
    return res


class Loop:
    def __init__(self, tmp: Path, size: str):
        self.backing = tmp / f"loop-{size}-{time.monotonic_ns()}.img"
        res = cli("device", "create-loop", "--size", size, "--backing", self.backing)
        self.path = res.stdout.strip().splitlines()[-1]
        self.dev = BlockDevice.open(self.path)

    def remove(self):
        subprocess.run(["umount", "-q", self.path], capture_output=True)
        cli("device", "remove-loop", self.path)


@pytest.fixture(scope="module")
def loop(state_dir, tmp_path_factory):
    lo = Loop(tmp_path_factory.mktemp("loops"), "64M")
    yield lo
    lo.remove()


@pytest.fixture(scope="module")
def loop2(state_dir, tmp_path_factory):
    lo = Loop(tmp_path_factory.mktemp("loops"), "64M")
    yield lo
    lo.remove()


@pytest.fixture
def queue_guard(loop):
    """Each test leaves the device's queue as it found it; checked, then put back for the next test."""
    before = loop.dev.snapshot()
    yield before
    after = loop.dev.snapshot()
    from iosched.backends.kernel.blockdev import restore_queue
    restore_queue(loop.dev.queue, before)
    assert after == before, "the run did not restore the queue"


def offered_or_skip(loop, scheduler):
    """A test of one scheduler runs where the host kernel offers it (CI's host kernels have differed: one without
    CONFIG_IOSCHED_BFQ); its refusal elsewhere is test_schedulers_this_kernel_lacks_are_refused's."""
    offered, _ = loop.dev.schedulers()
    if scheduler not in offered:
        pytest.skip(f"this kernel does not offer {scheduler} for {loop.path} (it offers: {', '.join(offered)})")


def kyber_debugfs(loop) -> bool:
    """Whether the kernel shows Kyber's token pools (block-layer debugfs, CONFIG_BLK_DEBUG_FS), probed apart from
    iosched: Kyber set on the loop device and debugfs mounted for the look, both put back."""
    from iosched.backends.kernel.blockdev import restore_queue
    saved = loop.dev.snapshot()
    debugfs = Path("/sys/kernel/debug")
    mounted = os.path.ismount(debugfs)
    try:
        loop.dev.set_scheduler("kyber")
        if not mounted:
            subprocess.run(["mount", "-t", "debugfs", "debugfs", str(debugfs)], check=True)
        return (debugfs / "block" / loop.dev.name / "sched" / "read_tokens").exists()
    finally:
        if not mounted:
            subprocess.run(["umount", str(debugfs)], check=True)
        restore_queue(loop.dev.queue, saved)


def rows(out):
    return pq.read_table(Path(out) / "results.parquet").to_pylist()


def spec(tmp_path, scheduler="none", extra="", jobs=None, duration="300ms", name="spec.toml"):
    jobs = jobs or '[[job]]\nname = "rr"\nrw = "randread"\niodepth = 8\n'
    return write(tmp_path, f'name = "k"\nduration = "{duration}"\nramp = "50ms"\nsample_interval = "50ms"\n'
                           f'scheduler = {{ name = "{scheduler}"{extra} }}\n{jobs}', name)


# ---------------------------------------------------------------- the loop device

def test_loop_device_has_its_data_written_and_direct_io(loop):
    st = loop.backing.stat()
    assert st.st_size == 64 << 20 and st.st_blocks * 512 >= 64 << 20       # no holes: reads reach the file
    info = loop.dev.describe()
    assert info["loop_direct_io"] == "1" and info["loop_backing_file"] == str(loop.backing)
    assert info["capacity_bytes"] == 64 << 20


def test_remove_loop_deletes_only_what_it_created(state_dir, tmp_path):
    lo = Loop(tmp_path, "4M")
    lo.remove()
    assert not lo.backing.exists()
    kept = tmp_path / "mine.img"
    kept.write_bytes(b"\1" * (4 << 20))
    path = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(kept)], capture_output=True,
                          text=True, check=True).stdout.strip()
    res = cli("device", "remove-loop", path)
    assert "stays" in res.output and kept.exists()


# ---------------------------------------------------------------- runs

def test_iosched_run_from_python_on_the_kernel_with_fios_own_logs(loop, queue_guard, tmp_path):
    """iosched.run(backend="kernel") measures on the device; a job's write_bw_log and write_iops_log reach real fio
    (its logs land under the run's logs/, named as fio names them), and iosched's time series comes from the job's
    own IOPS log."""
    import iosched

    jobs = ('[[job]]\nname = "rr"\nrw = "randread"\niodepth = 8\nwrite_bw_log = "mybw"\n'
            'write_iops_log = "myiops"\nlog_avg_msec = 50\n')
    res = iosched.run(spec(tmp_path, jobs=jobs), backend="kernel", device=loop.path, out=tmp_path / "out",
                      progress=False)
    (rid,) = res.run_ids
    df = res.df
    assert df["backend"].tolist() == ["kernel"] and df["read_iops"].iloc[0] > 0
    logs = sorted(p.name for p in (tmp_path / "out" / "runs" / rid / "logs").iterdir())
    assert "mybw_bw.1.log" in logs and "myiops_iops.1.log" in logs and not any(n.startswith("j0_") for n in logs)
    assert (res.timeseries.query("source == 'job' and metric == 'read_iops'")["value"] > 0).any()
    # Exported for fio-plot: fio's own json+ and fio's own logs, under bench-fio's names.
    cli("export", tmp_path / "out", "--bench-fio", tmp_path / "bf")
    (folder,) = (tmp_path / "bf" / "k").iterdir()
    names = sorted(p.name for p in (folder / "4k").iterdir())
    assert "randread-8-1.json" in names and "randread-iodepth-8-numjobs-1_bw.1.log" in names
    assert "randread-iodepth-8-numjobs-1_iops.1.log" in names
    doc = json.loads((folder / "4k" / "randread-8-1.json").read_text())
    assert doc["fio version"].startswith("fio-")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_smoke_each_scheduler(loop, queue_guard, tmp_path, scheduler):
    offered_or_skip(loop, scheduler)
    tokens = scheduler == "kyber" and kyber_debugfs(loop)
    out = tmp_path / "out"
    res = cli("run", spec(tmp_path, scheduler), "--backend", "kernel", "--device", loop.path, "--out", out)
    assert "backend=kernel" in res.output and "read: IOPS=" in res.output
    (row,) = rows(out)
    assert (row["backend"], row["scheduler"], row["job"], row["device"]) == ("kernel", scheduler, "rr", loop.path)
    assert row["read_ios"] > 100 and row["read_iops"] > 0 and row["write_ios"] == 0
    assert row["read_clat_p99_ns"] >= row["read_clat_p50_ns"] > 0 and row["lock_share"] is None
    assert len(row["core_busy"]) == os.cpu_count() and row["usr_cpu"] + row["sys_cpu"] > 0
    rdir = out / "runs" / row["run_id"]
    doc = json.loads((rdir / "fio.json").read_text())
    assert doc["fio version"].startswith("fio-") and doc["jobs"][0]["read"]["clat_ns"]["bins"]
    assert f"filename={loop.path}" in (rdir / "jobs.fio").read_text()
    meta = json.loads((rdir / "spec.json").read_text())
    assert meta["backend"] == "kernel" and meta["queue_during"][0]["scheduler"] == scheduler
    assert meta["readonly"] and "--readonly" in meta["fio"]["argv"]
    ts = pq.read_table(out / "timeseries.parquet").to_pylist()
    assert {r["subject"] for r in ts if r["source"] == "host"} == {f"cpu{i}" for i in range(os.cpu_count())}
    assert any(r["source"] == "job" and r["metric"] == "read_iops" and r["value"] > 0 for r in ts)
    kyber = {r["metric"]: r["value"] for r in ts if r["source"] == "scheduler"}
    if tokens:
        assert kyber["read_tokens"] == 256 and kyber["write_tokens"] == 128 and "read_tokens_in_use" in kyber
    else:
        assert kyber == {}
    # Without the kernel's files a Kyber run goes on and says what it could not sample; with them it says nothing.
    missing = "Kyber's domain token depths are not sampled" in res.output
    assert missing == (scheduler == "kyber" and not tokens)
    assert missing == any("token depths are not sampled" in n for n in meta["notes"])


def test_group_reporting_per_job(loop, queue_guard, tmp_path):
    jobs = ('[[job]]\nname = "lapp"\nrw = "randread"\nprioclass = 1\nprio = 0\ncpus_allowed = "0"\n'
            '[[job]]\nname = "grouped"\nrw = "randread"\niodepth = 4\nnumjobs = 3\ngroup_reporting = true\n'
            'prio = 7\n'
            '[[job]]\nname = "solo"\nrw = "randread"\nnumjobs = 2\nprioclass = 3\n')
    out = tmp_path / "out"
    cli("run", spec(tmp_path, jobs=jobs), "--backend", "kernel", "--device", loop.path, "--out", out)
    r = {x["job"]: x for x in rows(out)}
    assert all(r[j]["read_ios"] > 0 for j in ("lapp", "grouped", "solo"))
    assert (r["grouped"]["numjobs"], r["solo"]["numjobs"]) == (3, 2)
    doc = json.loads((out / "runs" / r["lapp"]["run_id"] / "fio.json").read_text())
    assert [j["jobname"] for j in doc["jobs"] if "jobname" in j] == ["lapp", "grouped", "solo", "solo"]
    solo = [j["read"]["total_ios"] for j in doc["jobs"] if j.get("jobname") == "solo"]
    assert r["solo"]["read_ios"] == sum(solo)
    # I/O priorities and pinning went to fio as its own options (real-time, best-effort 7, idle).
    opts = {j["jobname"]: j["job options"] for j in doc["jobs"] if "jobname" in j}
    assert (opts["lapp"]["prioclass"], opts["lapp"]["prio"], opts["lapp"]["cpus_allowed"]) == ("1", "0", "0")
    assert (opts["grouped"]["prioclass"], opts["grouped"]["prio"]) == ("2", "7")
    assert opts["solo"]["prioclass"] == "3"


def test_tunables_applied_then_restored(loop, tmp_path):
    from iosched.backends.kernel.blockdev import restore_queue
    original = loop.dev.snapshot()
    try:
        # The device starts in a non-default state; the run gets a fresh mq-deadline with the spec's values only.
        loop.dev.set_scheduler("mq-deadline")
        (loop.dev.queue / "iosched" / "writes_starved").write_text("7")
        (loop.dev.queue / "nr_requests").write_text("100")
        before = loop.dev.snapshot()
        out = tmp_path / "out"
        res = cli("run", spec(tmp_path, "mq-deadline", ", read_expire = 120, fifo_batch = 4, write_expire = 1001, "
                                                       "nr_requests = 64"),
                  "--backend", "kernel", "--device", loop.path, "--out", out)
        meta = json.loads((out / "runs" / rows(out)[0]["run_id"] / "spec.json").read_text())
        during = meta["queue_during"][0]
        assert during["iosched"]["read_expire"] == "120" and during["iosched"]["fifo_batch"] == "4"
        assert during["nr_requests"] == 64 and during["iosched"]["writes_starved"] == "2"     # the kernel's default
        # mq-deadline keeps its expiries in jiffies: a value between two ticks is rounded, and the run says so.
        if during["iosched"]["write_expire"] != "1001":
            assert "write_expire: the kernel made 1001 into" in res.output
            assert any("write_expire" in n for n in meta["notes"])
        assert loop.dev.snapshot() == before
        # Another scheduler: restoring switches back and rewrites the earlier instance's values.
        cli("run", spec(tmp_path, "kyber", ", read_lat_nsec = 500000"), "--backend", "kernel", "--device", loop.path,
            "--out", out)
        assert loop.dev.snapshot() == before and rows(out)[-1]["tunables"] == '{"read_lat_nsec": 500000}'
    finally:
        restore_queue(loop.dev.queue, original)


def test_bad_tunables_fail_before_any_run(loop, queue_guard, tmp_path):
    out = tmp_path / "out"
    res = cli("run", spec(tmp_path, "kyber", ", no_such = 1"), "--backend", "kernel", "--device", loop.path,
              "--out", out, code=2)
    assert "scheduler.no_such" in res.output and "read_lat_nsec" in res.output
    assert not (out / "results.parquet").exists()
    offered_or_skip(loop, "bfq")
    res = cli("run", spec(tmp_path, "bfq", ", slice_idle = -5"), "--backend", "kernel", "--device", loop.path,
              "--out", out, code=2)
    assert "scheduler.slice_idle: the kernel refused -5" in res.output
    assert not (out / "results.parquet").exists()


@pytest.mark.parametrize("scheduler,what,where", [("k2", "the RTSS'19 K2 scheduler", "--backend vm"),
                                                  ("kyber-fairness", "seed 001's Kyber-fairness", "--backend vm"),
                                                  ("cfq", "a legacy single-queue scheduler (removed in Linux 5.0",
                                                   "--backend sim"),
                                                  ("bfq", "one of Linux's own schedulers", "--backend vm")])
def test_schedulers_this_kernel_lacks_are_refused(loop, tmp_path, scheduler, what, where):
    """k2 and kyber-fairness (our modules) point to the VM lab, the other simulator-only ones to the simulator, and
    a mainline scheduler built out of the host's kernel (bfq, on CI's) to the VM lab."""
    if scheduler in loop.dev.schedulers()[0]:
        pytest.skip(f"this kernel offers {scheduler}: nothing to refuse")
    res = cli("run", spec(tmp_path, scheduler), "--backend", "kernel", "--device", loop.path, "--out", tmp_path / "o",
              code=2)
    assert f'scheduler.name: "{scheduler}" is not offered by this kernel for {loop.path}' in res.output
    assert what in res.output and f"run it with {where}" in res.output


CGROUP_JOBS = """\
[[job]]
name = "light"
rw = "randread"
iodepth = 16
cgroup = "light"
cgroup_weight = 100
[[job]]
name = "heavy"
rw = "randread"
iodepth = 16
cgroup = "heavy"
cgroup_weight = 800
"""


def test_cgroup_weights_share_bfq(loop, queue_guard, tmp_path):
    offered_or_skip(loop, "bfq")
    out = tmp_path / "out"
    cli("run", spec(tmp_path, "bfq", jobs=CGROUP_JOBS, duration="1s"), "--backend", "kernel", "--device", loop.path,
        "--out", out)
    r = {x["job"]: x for x in rows(out)}
    meta = json.loads((out / "runs" / r["light"]["run_id"] / "spec.json").read_text())
    written = meta["cgroups"]["written"]
    assert {f for w in written.values() for f in w} & {"blkio.bfq.weight", "io.bfq.weight"}
    for name, weight in (("light", "100"), ("heavy", "800")):      # v2 files read "default 800"
        assert written[name] and all(v.split()[-1] == weight for v in written[name].values())
    assert not Path(meta["cgroups"]["parent"]).exists()            # removed after the run
    ratio = r["heavy"]["read_iops"] / r["light"]["read_iops"]
    assert ratio > 2.0, f"BFQ gave weight 800 vs 100 only {ratio:.2f}x"


# ---------------------------------------------------------------- refusals

WRITER = '[[job]]\nname = "w"\nrw = "randwrite"\niodepth = 4\n'


def test_mounted_device_is_refused(loop2, tmp_path):
    subprocess.run(["mkfs.ext4", "-q", "-F", loop2.path], check=True, capture_output=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", loop2.path, str(mnt)], check=True)
    try:
        for flags in ([], ["--destructive"]):
            res = cli("run", spec(tmp_path, jobs=WRITER), "--backend", "kernel", "--device", loop2.path,
                      "--out", tmp_path / "o", *flags, code=2)
            assert "is mounted" in res.output and str(mnt) in res.output and "refused" in res.output
        # Reading it is harmless: allowed, with a note, and fio runs --readonly.
        res = cli("run", spec(tmp_path), "--backend", "kernel", "--device", loop2.path, "--out", tmp_path / "o")
        assert "only reads" in res.output
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    # Unmounted, its filesystem still needs --destructive for writes.
    res = cli("run", spec(tmp_path, jobs=WRITER), "--backend", "kernel", "--device", loop2.path,
              "--out", tmp_path / "o", code=2)
    assert "carries an ext4 filesystem" in res.output and "--destructive" in res.output
    res = cli("run", spec(tmp_path, jobs=WRITER), "--backend", "kernel", "--device", loop2.path,
              "--out", tmp_path / "o", "--destructive")
    assert "overwriting it" in res.output and rows(tmp_path / "o")[-1]["write_ios"] > 0


def test_the_root_device_is_refused_for_writes(tmp_path):
    root = next(m for m in Path("/proc/self/mounts").read_text().splitlines() if m.split()[1] == "/").split()[0]
    if not root.startswith("/dev/"):
        pytest.skip(f"the root filesystem is not on a block device ({root})")
    from iosched.backends.kernel.safety import root_devnos, parse_mountinfo
    devs = root_devnos(parse_mountinfo(Path("/proc/self/mountinfo").read_text()))
    disk = next((f"/dev/{p.name}" for p in Path("/sys/block").iterdir()
                 if (p / "dev").read_text().strip() in {f"{a}:{b}" for a, b in devs}), None)
    assert disk, "no whole disk under /"
    res = cli("run", spec(tmp_path, jobs=WRITER), "--backend", "kernel", "--device", disk, "--out", tmp_path / "o",
              "--destructive", code=2)
    assert "root filesystem" in res.output and "refused" in res.output


def test_devices_are_mapped_in_order(loop, loop2, queue_guard, tmp_path):
    two = write(tmp_path, 'name = "two"\nduration = "200ms"\ndevices = [{ preset = "samsung-980pro-1tb", count = 2 }]\n'
                          '[[job]]\nname = "a"\nrw = "randread"\nfilename = "/dev/nvme1n1"\n'
                          f'[[job]]\nname = "b"\nrw = "randread"\nfilename = "/dev/nvme0n1:{loop2.path}"\n')
    res = cli("run", two, "--backend", "kernel", "--device", loop.path, "--out", tmp_path / "o", code=2)
    assert "expected 2, got 1" in res.output
    cli("run", two, "--backend", "kernel", "--device", loop.path, "--device", loop2.path, "--out", tmp_path / "o")
    text = next((tmp_path / "o" / "runs").iterdir()).joinpath("jobs.fio").read_text()
    assert f"[a]\nfilename={loop2.path}\n" in text and f"[b]\nfilename={loop.path}:{loop2.path}\n" in text


# ---------------------------------------------------------------- restore after signals and killed runs

def _start(tmp_path, loop, state_dir, duration="30s"):
    p = spec(tmp_path, "kyber", ", read_lat_nsec = 750000", jobs=CGROUP_JOBS.replace("800", "300"),
             duration=duration)
    env = dict(os.environ, IOSCHED_STATE_DIR=str(state_dir))
    proc = subprocess.Popen([sys.executable, "-m", "iosched.cli", "run", str(p), "--backend", "kernel", "--device",
                             loop.path, "--out", str(tmp_path / "o")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    record = state_dir / f"run-{proc.pid}.json"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:       # until fio runs: its session is in the recovery record
        if record.exists():
            try:
                rec = json.loads(record.read_text())
            except ValueError:
                rec = {}
            sessions = [a for a in rec.get("actions", []) if a["op"] == "session"]
            if sessions:
                time.sleep(0.5)               # fio is doing I/O
                return proc, rec, sessions[0]["sid"]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("fio did not start")


def _fio_alive(sid):
    from iosched.backends.kernel.state import session_members
    return bool(session_members(sid))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_restore_after_a_signal(loop, queue_guard, state_dir, tmp_path, sig):
    before = loop.dev.snapshot()
    proc, rec, sid = _start(tmp_path, loop, state_dir)
    assert loop.dev.scheduler() == "kyber"
    assert (loop.dev.queue / "iosched" / "read_lat_nsec").read_text().strip() == "750000"
    cg = next(a["path"] for a in rec["actions"] if a["op"] == "cgroup")
    assert Path(cg, "light").is_dir()
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    exit_s = time.monotonic() - t0
    print(f"{signal.Signals(sig).name}: exit 130 {exit_s:.3f} s after the signal")
    assert proc.returncode == 130, err        # iosched.interrupt: 130 for SIGINT, SIGTERM and SIGHUP alike
    assert exit_s < 1.0, f"exited {exit_s:.2f} s after the signal"
    lines = [ln for ln in err.splitlines() if ln.startswith("interrupted")]
    assert len(lines) == 1 and "restored" in lines[0], err
    # The run's temporary folder (fio's output so far) goes with the interruption.
    assert not [p for p in (tmp_path / "o" / "runs").iterdir() if p.name.startswith(".")]
    assert loop.dev.snapshot() == before and not Path(cg).exists() and not _fio_alive(sid)
    assert not (state_dir / f"run-{proc.pid}.json").exists()


def test_a_killed_run_is_restored_by_the_next_invocation(loop, queue_guard, state_dir, tmp_path):
    before = loop.dev.snapshot()
    proc, rec, sid = _start(tmp_path, loop, state_dir)
    proc.kill()                      # SIGKILL: no chance to restore
    proc.communicate()
    cg = next(a["path"] for a in rec["actions"] if a["op"] == "cgroup")
    assert loop.dev.scheduler() == "kyber" and Path(cg).exists() and _fio_alive(sid)
    # The next kernel-backend invocation restores first (here one that then fails on its own spec).
    bad = write(tmp_path, '[[job]]\nname = "x"\nrw = "randread"\nduration = 1\n', "bad.toml")
    res = cli("run", bad, "--backend", "kernel", "--device", loop.path, "--out", tmp_path / "o2", code=2)
    assert f"recovering what iosched pid {proc.pid}" in res.output
    assert loop.dev.snapshot() == before and not Path(cg).exists() and not _fio_alive(sid)
    assert not (state_dir / f"run-{proc.pid}.json").exists()
    assert cli("device", "recover").output.strip() == "nothing to recover"


# ---------------------------------------------------------------- filesystems, preconditioning, compare

@pytest.fixture(scope="module")
def loop_fs(state_dir, tmp_path_factory):
    lo = Loop(tmp_path_factory.mktemp("loops"), "320M")       # mkfs.xfs wants at least 300 MB
    yield lo
    lo.remove()


@pytest.mark.parametrize("fs", ["ext4", "xfs", "f2fs"])
def test_filesystem_runs_on_a_file(loop_fs, tmp_path, fs):
    from iosched.backends.kernel.fs import unavailable
    if why := unavailable(fs):
        pytest.skip(why)
    out = tmp_path / "out"
    res = cli("run", spec(tmp_path, "mq-deadline", jobs=WRITER + 'size = "16M"\n'), "--backend", "kernel",
              "--device", loop_fs.path, "--out", out, "--filesystem", fs, "--destructive")
    assert "iosched.data" in res.output
    (row,) = rows(out)
    assert row["device"] == f"{loop_fs.path} ({fs})" and row["write_ios"] > 0
    meta = json.loads((out / "runs" / row["run_id"] / "spec.json").read_text())
    fsd = meta["devices"][0]["filesystem"]
    assert fsd["filesystem"] == fs and fsd["file_bytes"] == 16 << 20         # what the job addresses
    assert not Path(fsd["mountpoint"]).exists()                          # unmounted and removed
    assert f"TYPE=\"{fs}\"" in subprocess.run(["blkid", "-p", loop_fs.path], capture_output=True, text=True).stdout


def test_precondition_writes_the_device_twice_over(loop2, queue_guard, tmp_path):
    out = tmp_path / "out"
    cli("run", spec(tmp_path, duration="100ms"), "--backend", "kernel", "--device", loop2.path, "--out", out,
        "--precondition", "--destructive")
    doc = json.loads((out / "precondition" / loop2.dev.name / "fio.json").read_text())
    written = {j["jobname"]: j["write"]["io_bytes"] for j in doc["jobs"]}
    assert written == {"sequential-fill": 64 << 20, "random-writes": 128 << 20}


def test_compare_sim_and_kernel(loop, queue_guard, tmp_path):
    from .conftest import native_or_skip
    native_or_skip()
    p = spec(tmp_path, "mq-deadline", jobs='[[job]]\nname = "rr"\nrw = "randread"\niodepth = 4\nsize = "32M"\n')
    cli("run", p, "--out", tmp_path / "sim")
    cli("run", p, "--backend", "kernel", "--device", loop.path, "--out", tmp_path / "kernel")
    res = cli("compare", tmp_path / "sim", tmp_path / "kernel", "--format", "markdown")
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "| experiment | sweep point | scheduler | job | metric | A (sim) | B (kernel) | B/A |"
    assert [ln.split(" | ")[4] for ln in lines[2:]] == ["read IOPS", "read mean clat (us)", "read P99 clat (us)"]
    # The simulator ran the spec's datasheet drive, not a preset calibrated from this loop device: said on stderr.
    assert f"was not calibrated from {loop.path}" in res.stderr


def test_kernel_runs_share_the_results_folder_with_simulated_runs(loop, queue_guard, tmp_path):
    """A kernel run is stored as a simulated one (runs/<id>/ complete, manifest, combined tables): a simulated run
    of the same spec into the same folder keeps it, a re-run skips it, and report, query, load and compare read it."""
    from iosched import store
    from iosched.report.build import build

    from .conftest import native_or_skip
    native_or_skip()
    out = tmp_path / "out"
    p = spec(tmp_path, "mq-deadline", jobs='[[job]]\nname = "rr"\nrw = "randread"\niodepth = 4\nsize = "32M"\n')
    res = cli("run", p, "--backend", "kernel", "--device", loop.path, "--out", out)
    assert f"report: {out}/report.html" in res.output
    (krid,) = [r["run_id"] for r in rows(out)]
    assert store.is_done(out, krid) and store.load_result(out, krid)["backend"] == "kernel"
    assert not [d for d in (out / "runs").iterdir() if d.name.startswith(".")]   # no temporary folder left
    assert {"fio.json", "jobs.fio", "fio.log", "spec.json", "result.json.gz", "results.parquet",
            "timeseries.parquet"} <= {f.name for f in (out / "runs" / krid).iterdir()}

    res = cli("run", p, "--backend", "kernel", "--device", loop.path, "--out", out)   # resumes: nothing to do
    assert "1 run(s) already in" in res.output and "wrote 0 run(s)" in res.output

    cli("run", p, "--out", out)                                                      # simulated, same folder
    by_backend = {r["backend"]: r for r in rows(out)}
    assert set(by_backend) == {"sim", "kernel"} and by_backend["kernel"]["run_id"] == krid
    assert set(store.read_manifest(out)["experiments"]) == {"k", "k@kernel"}

    df = store.load(out)
    assert sorted(df.backend) == ["kernel", "sim"]
    q = store.query(out, "SELECT experiment, count(*) AS n FROM runs GROUP BY 1 ORDER BY 1")
    assert q.to_dict("records") == [{"experiment": "k", "n": 1}, {"experiment": "k@kernel", "n": 1}]
    assert store.query(out, f"SELECT count(*) AS n FROM timeseries WHERE run_id = '{krid}'").n[0] > 0

    rep = build(out, static=False)
    sec = {s.name: s for s in rep.sections}
    assert sec["k@kernel"].runs[0]["done"] and sec["k@kernel"].runs[0]["devices"] == [loop.path]
    (table,) = sec["k@kernel"].tables
    assert table.rows[0][3] == "mq-deadline" and table.rows[0][-1] == "not measured"
    assert sec["k@kernel"].figures and sec["k"].figures
    html = (out / "report.html").read_text()
    assert "k@kernel" in html and "--backend kernel" in html

    res = cli("report", out)
    assert "report:" in res.output
    # compare never averages the two backends of one folder together: it asks which one
    res = cli("compare", out, out, code=2)
    assert "several backends (kernel, sim): pick one with --backend-a kernel|sim" in res.output
    res = cli("compare", out, out, "--backend-a", "sim", "--backend-b", "kernel", "--format", "markdown")
    lines = res.output.strip().splitlines()
    assert "| A (sim) | B (kernel) |" in lines[0] and lines[2].split(" | ")[4] == "read IOPS"
