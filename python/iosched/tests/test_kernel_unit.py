"""The kernel backend's pieces that need no root: parsing what the kernel and fio print, the job files it writes,
restore of a queue snapshot and the recovery records (on ordinary files), compare."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from iosched.backends.kernel import blockdev, cgroups, fiofile, fioresult, sampler, safety, state
from iosched.cli import main
from iosched.errors import SpecError
from iosched.spec import RealSystem, expand_runs, load_experiment

from .test_spec import write


# ---------------------------------------------------------------- what the kernel prints

def test_scheduler_line():
    assert blockdev.parse_scheduler_line("none [mq-deadline] kyber bfq\n") == \
        (["none", "mq-deadline", "kyber", "bfq"], "mq-deadline")
    assert blockdev.parse_scheduler_line("[none] mq-deadline") == (["none", "mq-deadline"], "none")


def test_simulator_only_schedulers_come_from_the_registry(monkeypatch):
    from .conftest import native_or_skip
    native_or_skip()
    only = blockdev.simulator_only()
    assert only == {"k2": "the RTSS'19 K2 scheduler", "kyber-fairness": "seed 001's Kyber-fairness",
                    "noop": "a legacy single-queue scheduler (removed in Linux 5.0)",
                    "deadline": "a legacy single-queue scheduler (removed in Linux 5.0; mq-deadline is its blk-mq "
                                "port)",
                    "cfq": "a legacy single-queue scheduler (removed in Linux 5.0; bfq took its place)"}
    assert blockdev.elsewhere_hint("cfq") == ("; cfq is a legacy single-queue scheduler (removed in Linux 5.0; bfq "
                                             "took its place): run it with --backend sim")
    # A mainline scheduler a host kernel was built without is in the VM lab's kernel (CI's host has no bfq); none is
    # in every kernel, and a name nobody has gets no hint.
    for name in ("mq-deadline", "kyber", "bfq"):
        assert blockdev.elsewhere_hint(name) == (f"; {name} is one of Linux's own schedulers, built out of this "
                                                 "kernel: run it with --backend vm, whose kernel has it")
    assert blockdev.elsewhere_hint("none") == blockdev.elsewhere_hint("fifo") == ""
    # Our modules point to the VM lab, which builds and loads them (one line, no mention of the simulator).
    for name in ("k2", "kyber-fairness"):
        hint = blockdev.elsewhere_hint(name)
        assert "run it with --backend vm" in hint and "--backend sim" not in hint and "\n" not in hint, hint
    assert blockdev.elsewhere_hint("k2") == ("; k2 is the RTSS'19 K2 scheduler, a module of iosched's own (kmod/k2) "
                                            "that this kernel does not have: run it with --backend vm, which builds "
                                            "and loads it in the lab's kernel")
    # Without the native module the kernel backend still refuses, without the simulator's hint.
    monkeypatch.setattr(blockdev, "scheduler_registry", lambda: None)
    assert blockdev.simulator_only() == {} and blockdev.elsewhere_hint("cfq") == ""
    assert "--backend vm" in blockdev.elsewhere_hint("k2"), "the modules' hint needs no native module"


def test_mountinfo_numbers_and_escapes():
    text = ("22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
            "40 22 7:3 / /mnt/my\\040disk rw - xfs /dev/loop3 rw,attr2\n"
            "41 22 0:37 / /data rw - btrfs /dev/sdz1 rw\n")
    ms = safety.parse_mountinfo(text)
    assert [(m.devno, m.mountpoint, m.fstype, m.source) for m in ms] == [
        ((254, 0), "/", "ext4", "/dev/vda"), ((7, 3), "/mnt/my disk", "xfs", "/dev/loop3"),
        ((0, 37), "/data", "btrfs", "/dev/sdz1")]
    assert [m.mountpoint for m in safety.mounts_of({(7, 3)}, ms)] == ["/mnt/my disk"]
    assert safety.mounts_of({(7, 4)}, ms) == []


def test_findings_name_every_problem():
    f = safety.Findings(device=None, mounted=["/dev/loop3 on /mnt (xfs)"], partitions=["loop3p1"],
                        holders=["dm-0"], signature="an xfs filesystem")
    assert f.problems() == ["is mounted (/dev/loop3 on /mnt (xfs))", "has partitions (loop3p1)",
                            "has holders (dm-0)", "carries an xfs filesystem"]
    assert safety.Findings(device=None).problems() == []


def test_a_or_an_before_a_signature():
    assert [f"{safety.article(n)} {n}" for n in ("ext4", "xfs", "f2fs", "btrfs", "dos", "gpt", "LVM2_member",
                                                 "swap", "iso9660", "vfat")] == [
        "an ext4", "an xfs", "an f2fs", "a btrfs", "a dos", "a gpt", "an LVM2_member", "a swap", "an iso9660",
        "a vfat"]


def test_fio_picks_the_first_blkio_or_cgroup2_hierarchy(tmp_path):
    v1_first = ("cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
                "cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0\n"
                f"cgroup2 {tmp_path} cgroup2 rw,relatime 0 0\n")
    h, why = cgroups.fio_hierarchy(cgroups.parse_proc_mounts(v1_first))
    assert (h.version, str(h.mount), why) == (1, "/sys/fs/cgroup/blkio", "")
    # cgroup2 listed first without the io controller (a hybrid layout): fio would use it, so weights cannot work.
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    v2_first = f"cgroup2 {tmp_path} cgroup2 rw 0 0\ncgroup /sys/fs/cgroup/blkio cgroup rw,blkio 0 0\n"
    h, why = cgroups.fio_hierarchy(cgroups.parse_proc_mounts(v2_first))
    assert h is None and "io controller is not available" in why and "blkio is on cgroup v1" in why
    (tmp_path / "cgroup.controllers").write_text("cpu io memory\n")
    h, _ = cgroups.fio_hierarchy(cgroups.parse_proc_mounts(v2_first))
    assert (h.version, h.mount) == (2, tmp_path)
    h, why = cgroups.fio_hierarchy(cgroups.parse_proc_mounts("proc /proc proc rw 0 0\n"))
    assert h is None and "no cgroup hierarchy" in why


def test_cgroup_names_must_be_plain_and_fit_fio():
    h = cgroups.Hierarchy(1, Path("/sys/fs/cgroup/blkio"))
    cgroups.check_names({"vdi_1": (100, "s.toml", 'job "a"')}, h)
    with pytest.raises(Exception, match="letters, digits"):
        cgroups.check_names({"a b": (100, "s.toml", 'job "a"')}, h)
    with pytest.raises(Exception, match="64 bytes"):
        cgroups.check_names({"x" * 40: (100, "s.toml", 'job "a"')}, h)


def test_proc_stat_shares():
    a = sampler.parse_proc_stat("cpu  1 2 3 4\ncpu0 100 0 50 800 50 0 0 0 0 0\ncpu1 0 0 0 1000 0 0 0 0 0 0\n")
    b = sampler.parse_proc_stat("cpu0 160 0 70 900 60 5 5 0 0 0\ncpu1 0 0 0 1100 0 0 0 0 0 0\n")
    s0 = sampler.cpu_shares(a[0], b[0])
    assert s0["busy"] == pytest.approx(90 / 200) and s0["user"] == pytest.approx(0.3)
    assert s0["irq"] == pytest.approx(0.05) and s0["iowait"] == pytest.approx(0.05)
    assert sampler.cpu_shares(a[1], b[1])["busy"] == 0.0


def test_sbitmap_depth_and_busy():
    text = "depth=256\nbusy=32\ncleared=0\nbits_per_word=64\nws={\n\t{.wait=inactive},\n}\nround_robin=0\n"
    sb = sampler.parse_sbitmap(text)
    assert (sb["depth"], sb["busy"]) == (256, 32)


# ---------------------------------------------------------------- fio's output

def _dir(n, mean, sd, bins, runtime=1000):
    return {"total_ios": n, "io_bytes": 4096 * n, "runtime": runtime,
            "clat_ns": {"N": n, "min": min(bins), "max": max(bins), "mean": mean, "stddev": sd,
                        "bins": {str(k): v for k, v in bins.items()}, "percentile": {}}}


def test_percentiles_follow_fios_rule():
    # 100 I/Os: 90 at 10 us, 9 at 20 us, 1 at 1 ms.  fio: first bin whose cumulative count reaches p% of all.
    bins = [(10_000, 90), (20_000, 9), (1_000_000, 1)]
    p = dict((q, v) for q, v in fioresult.percentiles_from_bins(bins, [50.0, 90.0, 95.0, 99.0, 99.5, 99.99]))
    assert p == {50.0: 10_000, 90.0: 10_000, 95.0: 20_000, 99.0: 20_000, 99.5: 1_000_000, 99.99: 1_000_000}
    assert fioresult.percentiles_from_bins([]) == []


def test_processes_merge_by_histogram():
    a = _dir(90, 10_000.0, 0.0, {10_000: 90})
    b = _dir(10, 1_000_000.0, 0.0, {1_000_000: 10})
    m = fioresult.merge_direction([a, b])
    assert (m["ios"], m["bytes"]) == (100, 409_600)
    assert m["clat_mean_ns"] == pytest.approx(109_000.0)
    assert m["clat_stddev_ns"] == pytest.approx((0.9 * 0.1) ** 0.5 * 990_000)   # two point masses
    p = dict(m["percentiles"])
    assert p[50.0] == 10_000 and p[90.0] == 10_000 and p[99.0] == 1_000_000
    assert (m["clat_min_ns"], m["clat_max_ns"]) == (10_000, 1_000_000)


def test_job_results_sum_processes_and_keep_fio_cpu_time():
    empty = {"total_ios": 0, "io_bytes": 0, "runtime": 0, "clat_ns": {"N": 0}}
    doc = {"jobs": [
        {"jobname": "bg", "error": 0, "job_runtime": 1000, "usr_cpu": 10.0, "sys_cpu": 20.0, "ctx": 5,
         "read": empty, "write": _dir(1000, 50_000.0, 1.0, {50_000: 1000}, runtime=1000)},
        {"jobname": "bg", "error": 0, "job_runtime": 1000, "usr_cpu": 30.0, "sys_cpu": 40.0, "ctx": 7,
         "read": empty, "write": _dir(3000, 50_000.0, 1.0, {50_000: 3000}, runtime=1000)},
        # group_reporting: fio adds the processes' run times and averages their CPU shares
        {"jobname": "lapp", "error": 0, "job_runtime": 2000, "usr_cpu": 5.0, "sys_cpu": 5.0, "ctx": 1,
         "read": _dir(10, 80_000.0, 0.0, {80_000: 10}, runtime=1000), "write": empty},
    ]}
    bg, lapp = fioresult.job_results(doc, ["bg", "lapp"])
    assert bg["write"]["ios"] == 4000 and bg["window_ns"] == 1_000_000_000 and bg["fio_entries"] == 2
    assert bg["usr_ns"] == 400_000_000 and bg["sys_ns"] == 600_000_000 and bg["context_switches"] == 12
    assert lapp["usr_ns"] == 100_000_000          # 5% of 2 process-seconds
    with pytest.raises(Exception, match="no job 'x'"):
        fioresult.job_results(doc, ["x"])
    doc["jobs"][0]["error"] = 5
    with pytest.raises(Exception, match="error 5"):
        fioresult.job_results(doc, ["bg"])


def test_iops_logs_sum_processes_per_interval(tmp_path):
    (tmp_path / "j1_iops.3.log").write_text("99, 100, 0, 0, 0\n199, 120, 0, 0, 0\n")
    (tmp_path / "j1_iops.4.log").write_text("101, 50, 0, 0, 0\n200, 60, 1, 0, 0\n")
    rows = fioresult.read_iops_logs(tmp_path, "j1", "bg", 100)
    got = {(r["t_ns"], r["metric"]): r["value"] for r in rows}
    assert got == {(100_000_000, "read_iops"): 150.0, (100_000_000, "write_iops"): 0.0,
                   (200_000_000, "read_iops"): 120.0, (200_000_000, "write_iops"): 60.0}


# ---------------------------------------------------------------- job files

SPEC = """\
name = "jf"
duration = "1500ms"
ramp = "250ms"
seed = 7
devices = [{ preset = "samsung-980pro-1tb", count = 2 }]
[[job]]
name = "lapp"
rw = "randread"
iodepth = 1
prioclass = 1
prio = 2
cpus_allowed = "0"
registerfiles = true
fixedbufs = true
[[job]]
name = "bg"
rw = "randrw"
rwmixread = 30
bs = "64k"
iodepth = 16
numjobs = 2
thinktime = "5us"
rate_iops = 1000
cgroup = "bg"
cgroup_weight = 500
group_reporting = true
filename = "/dev/nvme0n1:/dev/nvme1n1"
size = "256M"
offset = "1M"
percentile_list = "99.99:50"
lat_percentiles = true
randseed = 42
random_distribution = "zipf:1.2:0.25"
[[job]]
name = "after"
rw = "write"
bs = "1M"
ioengine = "libaio"
stonewall = true
startdelay = "10ms"
time_based = false
size = "128M"
loops = 2
end_fsync = true
[[job]]
name = "sync"
rw = "randread"
ioengine = "pvsync2"
bssplit = "4k/25:16k/,8k/100"
write_bw_log = "syncbw"
write_lat_log = true
log_avg_msec = 100
"""


def _runs(tmp_path, text=SPEC, devices=((1 << 30, 512), (1 << 30, 512))):
    spec = write(tmp_path, text)
    return expand_runs(load_experiment(str(spec)), RealSystem(2, list(devices)))


def _options(text):
    jobs, cur = {}, None
    for line in text.splitlines():
        if line.startswith("["):
            cur = jobs.setdefault(line[1:-1], {})
        elif "=" in line and cur is not None:
            k, v = line.split("=", 1)
            cur[k] = v
    return jobs


def test_job_file_carries_the_resolved_jobs(tmp_path):
    (run,) = _runs(tmp_path)
    text, notes = fiofile.job_file(run, ["/dev/loop5", "/dev/loop6"], {"bg": "iosched-1/bg"}, log_interval_ms=100)
    jobs = _options(text)
    assert list(jobs) == ["lapp", "bg", "after", "sync"]
    lapp, bg, after = jobs["lapp"], jobs["bg"], jobs["after"]
    assert lapp == {"filename": "/dev/loop5", "rw": "randread", "bs": "4096", "ioengine": "io_uring", "iodepth": "1",
                    "iodepth_batch_submit": "1", "numjobs": "1", "direct": "1", "offset": "0",
                    "size": str(1 << 30), "time_based": "1", "runtime": "1500ms", "ramp_time": "250ms",
                    "prioclass": "1", "prio": "2", "cpus_allowed": "0", "new_group": "1", "norandommap": "1",
                    "randrepeat": "0", "randseed": "7", "registerfiles": "1", "fixedbufs": "1",
                    "write_iops_log": "logs/j0", "log_avg_msec": "100"}
    # Several devices: fio's filesize gives each file the region (size would be split among them).
    assert bg["filename"] == "/dev/loop5:/dev/loop6" and bg["filesize"] == str(256 << 20) and "size" not in bg
    assert (bg["offset"], bg["rwmixread"], bg["bs"], bg["numjobs"]) == (str(1 << 20), "30", "65536", "2")
    assert (bg["thinktime"], bg["rate_iops"], bg["cgroup"], bg["group_reporting"]) == ("5us", "1000", "iosched-1/bg", "1")
    assert "cgroup_weight" not in bg           # written by iosched: fio's only works with CFQ
    assert bg["percentile_list"] == "50:99.99" and "percentile_list" not in lapp   # fio's json then lists these
    assert bg["lat_percentiles"] == "1" and "lat_percentiles" not in lapp and "clat_percentiles" not in bg
    assert "registerfiles" not in bg and "fixedbufs" not in after       # only where the job sets them
    assert (bg["randseed"], after["randseed"]) == ("42", "7")           # the job's own, else the run's
    assert bg["random_distribution"] == "zipf:1.2:0.25" and "random_distribution" not in lapp
    assert after["loops"] == "2" and "loops" not in bg
    assert after["end_fsync"] == "1" and "end_fsync" not in bg
    assert after["stonewall"] == "1" and after["startdelay"] == "10ms" and "time_based" not in after
    assert after["runtime"] == "1500ms" and after["ioengine"] == "libaio" and "norandommap" not in after
    assert jobs["sync"]["ioengine"] == "pvsync2"        # fio runs the job's engine; the simulator runs psync
    # The job's own logs under logs/ (iosched's IOPS log beside them, as for every job).
    assert (jobs["sync"]["write_bw_log"], jobs["sync"]["write_lat_log"]) == ("logs/syncbw", "logs/sync")
    assert jobs["sync"]["write_iops_log"] == "logs/j3" and "write_bw_log" not in lapp
    assert jobs["sync"]["bssplit"] == "4096/25:16384/75,8192/100" and "bssplit" not in lapp
    assert notes == []
    assert fiofile.writes(run)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_fio_accepts_the_job_file(tmp_path):
    (run,) = _runs(tmp_path)
    text, _ = fiofile.job_file(run, ["/dev/loop5", "/dev/loop6"], {"bg": "iosched-1/bg"}, log_interval_ms=100)
    (tmp_path / "jobs.fio").write_text(text)
    r = subprocess.run(["fio", "--parse-only", str(tmp_path / "jobs.fio")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "pre.fio").write_text(fiofile.precondition_file("/dev/loop5", 64 << 20, 512))
    r = subprocess.run(["fio", "--parse-only", str(tmp_path / "pre.fio")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_the_seed_sets_fios_offsets(tmp_path):
    """Real fio, no I/O (the null engine), its offsets in its own iolog: with the seed options the job file uses, one
    seed replays its offsets and another draws others. Negative control: randseed alone (fio's default randrepeat=1)
    leaves fio 3.33's offsets unchanged by the seed, so repetitions would all draw the same ones."""
    def offsets(options: list[tuple[str, object]], tag: str) -> list[str]:
        log = tmp_path / f"{tag}.iolog"
        lines = ["[j]", "ioengine=null", "size=1g", "rw=randwrite", "bs=4k", "norandommap=1", "number_ios=16",
                 f"filename={tmp_path / 'none'}", f"write_iolog={log}", *(f"{k}={v}" for k, v in options)]
        (tmp_path / f"{tag}.fio").write_text("\n".join(lines) + "\n")
        r = subprocess.run(["fio", str(tmp_path / f"{tag}.fio")], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return [ln.split()[3] for ln in log.read_text().splitlines() if len(ln.split()) == 5]

    one, again, two = (offsets(fiofile.seed_options(s), t) for s, t in ((1, "a"), (1, "b"), (2, "c")))
    assert len(one) == 16 and one == again and one != two
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    if version == "fio-3.33":
        assert offsets([("randseed", 1)], "d") == offsets([("randseed", 2)], "e")


def test_job_file_refusals(tmp_path):
    (run,) = _runs(tmp_path, SPEC.replace('name = "after"', 'name = "a b"'))
    with pytest.raises(Exception, match="job names of letters"):
        fiofile.job_file(run, ["/dev/loop5", "/dev/loop6"], {"bg": "x/bg"})
    (run,) = _runs(tmp_path)
    with pytest.raises(Exception, match="paths of letters"):
        fiofile.job_file(run, ["/dev/loop5", "/tmp/a;b"], {"bg": "x/bg"})


def _sections(text: str) -> list[tuple[str, dict[str, str]]]:
    """A job file's sections in order (section names repeat when a job's clones run as sections of their own)."""
    out: list[tuple[str, dict[str, str]]] = []
    for line in text.splitlines():
        if line.startswith("["):
            out.append((line[1:-1], {}))
        elif "=" in line and out:
            k, v = line.split("=", 1)
            out[-1][1][k] = v
    return out


def test_thread_one_seed_worked_examples():
    # fio seeds job k from randseed x k (mod 2^64); the shared seed is the run's seed << 16.
    # Seed 7, job 1: 7 x 65536 = 458752 itself.
    assert fiofile.thread_one_seed(7, 1) == 458_752
    # Job 3 (odd): 458752 x 3^-1, and 3^-1 mod 2^64 is 0xAAAAAAAAAAAAAAAB (3 x 0xAA..AB = 2^65 + 1).
    three = fiofile.thread_one_seed(7, 3)
    assert three == 458_752 * 0xAAAAAAAAAAAAAAAB % 2**64 and three * 3 % 2**64 == 458_752
    # Job 6 = 2 x 3: (458752 >> 1) x 3^-1 = 229376 x 0xAA..AB; times 6 gives 458752 again.
    six = fiofile.thread_one_seed(7, 6)
    assert six == 229_376 * 0xAAAAAAAAAAAAAAAB % 2**64 and six * 6 % 2**64 == 458_752
    # Negative control: the plain seed times the thread number is not the shared seed.
    assert 7 * 6 % 2**64 != 458_752
    with pytest.raises(ValueError):
        fiofile.thread_one_seed(7, 0)


def test_fio_reads_seeds_of_2_to_the_63_and_more_as_their_twos_complement():
    assert fiofile.seed_options(2**64 - 1) == [("randrepeat", 0), ("randseed", -1)]
    assert fiofile.seed_options(2**63) == [("randrepeat", 0), ("randseed", -2**63)]
    assert fiofile.seed_options(2**63 - 1) == [("randrepeat", 0), ("randseed", 2**63 - 1)]


def test_separate_processes_run_as_sections_of_their_own(tmp_path):
    """Each clone of a separate-processes job is a section of its own: one clone each, started 5 ms after the one
    before, seeded to draw fio's job 1 stream from the shared seed; only the first starts a reporting group."""
    (run,) = _runs(tmp_path, SPEC.replace('randseed = 42', 'randseed = 42\nseparate_processes = true'))
    text, _ = fiofile.job_file(run, ["/dev/loop5", "/dev/loop6"], {"bg": "x/bg"})
    sections = _sections(text)
    assert [name for name, _ in sections] == ["lapp", "bg", "bg", "after", "sync"]
    assert "; bg: its 2 clone(s) as sections of their own (separate processes" in text
    (_, first), (_, second) = sections[1], sections[2]
    # lapp is fio's job 1, bg's clones jobs 2 and 3
    assert (first["randseed"], second["randseed"]) == (str(fiofile.thread_one_seed(42, 2)),
                                                       str(fiofile.thread_one_seed(42, 3)))
    assert first["numjobs"] == second["numjobs"] == "1" and first["randrepeat"] == second["randrepeat"] == "0"
    assert "startdelay" not in first and second["startdelay"] == "5ms"
    assert first["new_group"] == "1" and "new_group" not in second
    assert first["group_reporting"] == second["group_reporting"] == "1"
    assert {k: v for k, v in first.items() if k not in ("randseed", "new_group")} == \
        {k: v for k, v in second.items() if k not in ("randseed", "startdelay")}
    # offset_increment: fio adds it per clone of a section, so each section carries its clone's offset.
    (run,) = _runs(tmp_path, SPEC.replace('randseed = 42', 'randseed = 42\nseparate_processes = true\n'
                                                          'offset_increment = "64M"'))
    spaced = [o for name, o in _sections(fiofile.job_file(run, ["/dev/loop5", "/dev/loop6"], {"bg": "x/bg"})[0])
              if name == "bg"]
    assert [o["offset"] for o in spaced] == [str(1 << 20), str((1 << 20) + (64 << 20))]
    assert not any("offset_increment" in o for o in spaced)
    # The jobs after it keep their own seeds and start their own groups.
    assert sections[3][1]["randseed"] == "7" and sections[3][1]["new_group"] == "1"
    assert fiofile.SEPARATE_PROCESS_GAP_NS == 5_000_000


SPLIT_SPEC = """\
name = "split"
duration = "1s"
seed = 3
[[job]]
name = "a"
rw = "randread"
cpus_allowed = "0-1"
cpus_allowed_policy = "split"
[[job]]
name = "b"
rw = "randread"
cpus_allowed = "0-1"
cpus_allowed_policy = "split"
[[job]]
name = "c"
rw = "randread"
cpus_allowed = "0-1"
cpus_allowed_policy = "split"
numjobs = 2
"""


@pytest.mark.skipif(shutil.which("fio") is None or (os.cpu_count() or 1) < 2, reason="needs fio and 2 CPUs")
def test_split_clones_run_on_the_cpus_the_simulator_gives_them(tmp_path):
    """cpus_allowed_policy=split: the simulator pins clone i of a job to the i-th listed CPU; fio counts from the
    job's first thread number in the file, so job b (fio's job 2) would run on CPU 1. The job file gives each clone
    its CPU; real fio (its exec_prerun reads each job's affinity) runs them there. Negative control: fio's own split
    on the same jobs puts b on CPU 1."""
    from .conftest import native_or_skip
    native_or_skip()
    from iosched import native
    from iosched.simconfig import run_config
    (run,) = _runs(tmp_path, SPLIT_SPEC, devices=((1 << 30, 512),))
    simulated = native.simulate(run_config(run))
    sim_cpus = [p["core_affinity"] for j in simulated["jobs"] for p in j["processes"]]
    assert sim_cpus == [[0], [0], [0], [1]]
    text, _ = fiofile.job_file(run, ["/dev/loop5"])
    sections = _sections(text)
    assert [(name, o["cpus_allowed"]) for name, o in sections] == [("a", "0"), ("b", "0"), ("c", "0"), ("c", "1")]
    assert not any("cpus_allowed_policy" in o for _, o in sections)
    assert "; c: its 2 clone(s) as sections of their own (each on the CPU the simulator gives it)" in text

    def affinities(per_section: list[dict[str, str]], tag: str) -> list[str]:
        lines = []
        for k, options in enumerate(per_section):
            lines += [f"[{tag}{k}]", "ioengine=null", "rw=randread", "size=1g", "number_ios=1",
                      f"filename={tmp_path / 'none'}", "exec_prerun=grep Cpus_allowed_list /proc/self/status",
                      *(f"{key}={v}" for key, v in options.items()), ""]
        (tmp_path / f"{tag}.fio").write_text("\n".join(lines))
        r = subprocess.run(["fio", f"{tag}.fio"], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        return [(tmp_path / f"{tag}{k}.prerun.txt").read_text().split()[-1] for k in range(len(per_section))]

    ours = [{"cpus_allowed": o["cpus_allowed"]} for _, o in sections]
    assert affinities(ours, "ours") == ["0", "0", "0", "1"]
    fios = [{"cpus_allowed": "0-1", "cpus_allowed_policy": "split"}] * 4
    assert affinities(fios, "fio") == ["0", "1", "0", "1"]


def test_separate_processes_beyond_the_seedable_thread_numbers_are_one_line(tmp_path, monkeypatch):
    # 16 jobs of 4,096 clones are fio's jobs 1-65536; a separate-processes job after them cannot be seeded.
    monkeypatch.setenv("IOSCHED_MAX_PROCESSES", "70000")
    many = "".join(f'[[job]]\nname = "b{i}"\nrw = "randread"\nnumjobs = 4096\n' for i in range(16))
    text = ('name = "many"\nduration = "1s"\n' + many +
            '[[job]]\nname = "last"\nrw = "randwrite"\nseparate_processes = true\n')
    (run,) = _runs(tmp_path, text, devices=((1 << 30, 512),))
    with pytest.raises(SpecError, match=r'job "last": separate_processes: the run.s fio jobs up to this one.s clones '
                                        r'number 65537; seeding separate processes takes at most 65535'):
        fiofile.job_file(run, ["/dev/loop5"])


def test_separate_processes_gap_is_the_simulators():
    build = Path(__file__).resolve().parents[3] / "crates/iosched-sim/src/sim/build.rs"
    if not build.exists():
        pytest.skip("no Rust sources beside this installation")
    line = next(ln for ln in build.read_text().splitlines() if ln.startswith("const SEPARATE_PROCESS_GAP_NS"))
    assert int(line.split("=")[1].strip(" ;").replace("_", "")) == fiofile.SEPARATE_PROCESS_GAP_NS


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")
def test_separate_process_sections_draw_one_sequence_in_real_fio(tmp_path):
    """Real fio (null engine, its iolog): a job file's separate-process sections (here fio's jobs 2-5, two of them
    even) all draw the offsets fio's job 1 draws from the shared seed, one past 2^63 (written negative). Negative
    control: the same sections with the plain seed draw four different sequences."""
    seed = (1 << 47) + 7            # shared seed (seed << 16) = 2^63 + 7 x 2^16
    shared = fiofile.seed_options(seed << 16)
    assert shared[1][1] < 0

    def offsets(per_section: list[list[tuple[str, object]]], tag: str) -> list[list[str]]:
        lines = []
        for k, options in enumerate(per_section):
            lines += [f"[s{k}]", "ioengine=null", "size=1g", "rw=randwrite", "bs=4k", "norandommap=1",
                      "number_ios=16", f"filename={tmp_path / 'none'}", f"write_iolog={tmp_path / f'{tag}{k}.iolog'}",
                      *(f"{key}={v}" for key, v in options), ""]
        (tmp_path / f"{tag}.fio").write_text("\n".join(lines))
        r = subprocess.run(["fio", str(tmp_path / f"{tag}.fio")], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return [[ln.split()[3] for ln in (tmp_path / f"{tag}{k}.iolog").read_text().splitlines()
                 if len(ln.split()) == 5] for k in range(len(per_section))]

    (reference,) = offsets([shared], "ref")
    lapp = fiofile.seed_options(seed)
    sections = offsets([lapp] + [fiofile.seed_options(fiofile.thread_one_seed(seed, k)) for k in range(2, 6)], "sep")
    assert len(reference) == 16 and all(s == reference for s in sections[1:]) and sections[0] != reference
    plain = offsets([lapp] + [fiofile.seed_options(seed)] * 4, "plain")
    assert len({tuple(s) for s in plain[1:]}) == 4


def test_times_for_fio():
    assert fiofile.fio_time(2_000_000_000) == "2000ms"
    assert fiofile.fio_time(1_500) == "2us" and fiofile.fio_time(7_000) == "7us"


def test_precondition_is_seed000s_two_phases():
    text = fiofile.precondition_file("/dev/loop5", (64 << 20) + 4096, 512)
    jobs = _options(text)
    assert jobs["sequential-fill"]["rw"] == "write" and jobs["global"]["size"] == str(64 << 20)
    assert jobs["random-writes"]["rw"] == "randwrite" and jobs["random-writes"]["bs"] == "4096"
    assert jobs["random-writes"]["io_size"] == str(128 << 20) and "stonewall" in text


def test_real_devices_size_the_jobs(tmp_path):
    spec = SPEC.replace('size = "256M"', 'size = "2G"')
    with pytest.raises(Exception, match="exceeds the device capacity"):
        _runs(tmp_path, spec)
    with pytest.raises(Exception, match="expected 2, got 1"):
        _runs(tmp_path, SPEC, devices=((1 << 30, 512),))
    with pytest.raises(Exception, match="host has 2 cores"):
        _runs(tmp_path, SPEC.replace('cpus_allowed = "0"', 'cpus_allowed = "0-3"'))


def test_the_specs_filesystem_is_the_kernel_backends_unless_the_flag_disagrees(tmp_path):
    from iosched.backends.kernel.runner import spec_filesystem
    from iosched.spec import load_experiment

    def exp(devices: str):
        return load_experiment(str(write(tmp_path, SPEC.replace('devices = [{ preset = "samsung-980pro-1tb", '
                                                                'count = 2 }]', devices))))
    both = exp('devices = [{ preset = "samsung-980pro-1tb", count = 2, filesystem = "xfs" }]')
    assert spec_filesystem(both, None) == "xfs" and spec_filesystem(both, "xfs") == "xfs"
    with pytest.raises(SpecError, match="--filesystem: ext4, but .* devices say xfs"):
        spec_filesystem(both, "ext4")
    assert spec_filesystem(exp('devices = [{ preset = "samsung-980pro-1tb", count = 2 }]'), "f2fs") == "f2fs"
    mixed = exp('devices = [{ preset = "samsung-980pro-1tb", filesystem = "xfs" }, '
                '{ preset = "samsung-980pro-1tb" }]')
    with pytest.raises(SpecError, match="one file system on every device"):
        spec_filesystem(mixed, None)


# ---------------------------------------------------------------- restore and recovery (on plain files)

def _fake_queue(tmp_path, scheduler="none [mq-deadline] kyber", nr="256", **tunables):
    q = tmp_path / "queue"
    (q / "iosched").mkdir(parents=True)
    (q / "scheduler").write_text(scheduler + "\n")
    (q / "nr_requests").write_text(nr + "\n")
    for k, v in tunables.items():
        (q / "iosched" / k).write_text(v + "\n")
    return q


def test_restore_writes_only_what_differs(tmp_path):
    q = _fake_queue(tmp_path, scheduler="none mq-deadline [kyber]", nr="64", read_expire="100", fifo_batch="16")
    saved = {"scheduler": "mq-deadline", "nr_requests": 256, "iosched": {"read_expire": "500", "fifo_batch": "16"}}
    mtime = (q / "iosched" / "fifo_batch").stat().st_mtime_ns
    assert blockdev.restore_queue(q, saved) == []
    # Plain files stand in for sysfs: a write replaces the text.
    assert (q / "scheduler").read_text() == "mq-deadline"
    assert (q / "nr_requests").read_text() == "256" and (q / "iosched" / "read_expire").read_text() == "500"
    assert (q / "iosched" / "fifo_batch").stat().st_mtime_ns == mtime
    (q / "iosched" / "fifo_batch").unlink()
    assert blockdev.restore_queue(q, saved) == [f"{q}/iosched/fifo_batch is missing after restoring the scheduler"]


def test_restore_leaves_auto_tuned_values_unless_the_run_set_them(tmp_path):
    # BFQ's max_budget reads its auto-tuned budget: writing the old reading back would fix the budget.
    q = _fake_queue(tmp_path, scheduler="none [bfq]", max_budget="20000", slice_idle="0")
    (q / "wbt_lat_usec").write_text("0\n")
    saved = {"scheduler": "bfq", "nr_requests": 256, "wbt_lat_usec": "2000",
             "iosched": {"max_budget": "16384", "slice_idle": "8"}}
    assert blockdev.restore_queue(q, saved) == []
    assert (q / "iosched" / "max_budget").read_text() == "20000\n" and (q / "iosched" / "slice_idle").read_text() == "8"
    assert (q / "wbt_lat_usec").read_text() == "2000"       # BFQ turns writeback throttling off: back on
    assert blockdev.restore_queue(q, saved, touched=["max_budget"]) == []
    assert (q / "iosched" / "max_budget").read_text() == "16384"


def test_journal_undoes_newest_first_and_keeps_a_record(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x")
    b.write_text("y")
    j = state.Journal(tmp_path / "state")
    j.add({"op": "write", "path": str(a), "value": "A"})
    cg = tmp_path / "cg" / "leaf"
    cg.mkdir(parents=True)
    j.add({"op": "cgroup", "path": str(tmp_path / "cg")})
    rec = json.loads(j.path.read_text())
    assert rec["pid"] == os.getpid() and [x["op"] for x in rec["actions"]] == ["write", "cgroup"]
    assert j.undo_all() == []
    assert a.read_text() == "A" and not (tmp_path / "cg").exists() and not j.path.exists()


def test_records_of_dead_processes_are_recovered(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    target = tmp_path / "t"
    target.write_text("changed")
    p = subprocess.Popen(["true"])
    p.wait()
    dead = {"pid": p.pid, "starttime": 1, "started": "then",
            "actions": [{"op": "write", "path": str(target), "value": "original", "id": 1}]}
    (d / f"run-{p.pid}.json").write_text(json.dumps(dead))
    live = {"pid": os.getppid(), "starttime": state.proc_starttime(os.getppid()), "actions": []}
    (d / f"run-{os.getppid()}.json").write_text(json.dumps(live))
    assert state.stale_records(d) == [d / f"run-{p.pid}.json"]
    seen = []
    assert state.recover(d, echo=seen.append) == []
    assert target.read_text() == "original" and not (d / f"run-{p.pid}.json").exists()
    assert "write" not in seen[0] and str(target) in seen[0]
    assert (d / f"run-{os.getppid()}.json").exists()      # its invocation still runs: left alone


def test_a_failed_undo_stays_for_the_next_invocation(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    rec = {"pid": 999_999_999, "starttime": 1,
           "actions": [{"op": "write", "path": str(tmp_path / "no" / "dir"), "value": "1", "id": 1},
                       {"op": "umount", "path": str(tmp_path / "missing"), "id": 2}]}
    (d / "run-999999999.json").write_text(json.dumps(rec))
    assert state.recover(d) == []          # a file that is gone needs no restore; nothing mounted there
    assert not (d / "run-999999999.json").exists()


def test_sessions_of_other_processes_are_not_touched():
    assert state._kill_session(os.getpid(), starttime=-1) in ([], [f"pid {os.getpid()} is another process now: not touched"])
    assert state.session_members(999_999_999) == []


# ---------------------------------------------------------------- the command line

def test_cli_kernel_flags_need_the_kernel_backend(tmp_path):
    spec = write(tmp_path, 'duration = "10ms"\n[[job]]\nname = "a"\n')
    for extra in (["--destructive"], ["--precondition"]):
        res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "o"), *extra])
        assert res.exit_code == 2 and "only with --backend kernel" in res.output
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "o"), "--device", "a", "--device", "b"])
    assert res.exit_code == 2 and "one device preset" in res.output
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "o"), "--backend", "kernel"])
    assert res.exit_code == 2 and "needs the block device(s)" in res.output
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "o"), "--backend", "kernel",
                                    "--device", "/dev/null", "--host", "xeon-silver-4210r-10c"])
    assert res.exit_code == 2 and "--host" in res.output


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the message non-root users get")
def test_cli_kernel_needs_root(tmp_path):
    spec = write(tmp_path, 'duration = "10ms"\n[[job]]\nname = "a"\n')
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "o"), "--backend", "kernel",
                                    "--device", "/dev/loop0"])
    assert res.exit_code == 1 and "needs root" in res.output


# ---------------------------------------------------------------- compare

def _row(backend, job, read_iops, p99, scheduler="none", rep=0, write_ios=0):
    return {"backend": backend, "experiment": "e", "sweep_point": "{}", "scheduler": scheduler, "tunables": "{}",
            "job": job, "repetition": rep, "read_ios": 100, "read_iops": read_iops, "read_clat_mean_ns": p99 / 2,
            "read_clat_p99_ns": p99, "write_ios": write_ios, "write_iops": 0.0, "write_clat_mean_ns": 0.0,
            "write_clat_p99_ns": 0}


def test_compare_matches_jobs_and_averages_repetitions():
    from iosched import compare

    a = [_row("sim", "lapp", 100.0, 10_000), _row("sim", "bg", 50.0, 20_000), _row("sim", "x", 1.0, 1, "bfq")]
    b = [_row("kernel", "lapp", 80.0, 12_000, rep=0), _row("kernel", "lapp", 120.0, 16_000, rep=1),
         _row("kernel", "bg", 25.0, 40_000)]
    lines, only_a, only_b = compare.compare(a, b)
    got = {(ln.job, ln.metric): (ln.a, ln.b, ln.n_b) for ln in lines}
    assert got[("lapp", "read IOPS")] == (100.0, 100.0, 2)
    assert got[("lapp", "read P99 clat (us)")] == (10.0, 14.0, 2)
    assert got[("bg", "read IOPS")][:2] == (50.0, 25.0)
    assert not any(m.startswith("write") for _, m in got)        # no writes on either side
    assert [k[4] for k in only_a] == ["x"] and only_b == []
    body = compare.table_rows(lines)
    assert body[0][:5] == ["e", "-", "none", "bg", "read IOPS"] and body[0][7] == "0.50"
    md = compare.render_markdown(compare.HEADER, body)
    assert md.splitlines()[0].startswith("| experiment |") and len(md.splitlines()) == 2 + len(body)


def test_compare_warns_when_the_simulated_device_was_not_calibrated_from_the_measured_one(tmp_path, monkeypatch):
    """A shipped preset (a datasheet drive) against a loop device: a warning; a preset `iosched calibrate` fitted to
    that very device, or the lab's null_blk preset of the same parameters: none (the negative controls)."""
    from iosched import compare, presets

    from .conftest import DATA

    def rows(sim_device, measured_device):
        return ([dict(_row("sim", "j", 1.0, 1), device=sim_device)],
                [dict(_row("kernel", "j", 1.0, 1), device=measured_device)])

    (warning,) = compare.preset_warnings(*rows("samsung-980pro-1tb", "/dev/loop0"))
    assert "device preset samsung-980pro-1tb, which was not calibrated from /dev/loop0" in warning
    mine = tmp_path / "devices"
    mine.mkdir()
    text = (DATA / "presets" / "devices" / "samsung-980pro-1tb.toml").read_text()
    old = next(line for line in text.splitlines() if line.startswith("description = "))
    (mine / "loop0-fit.toml").write_text(text.replace('name = "samsung-980pro-1tb"', 'name = "loop0-fit"').replace(
        old, 'description = "calibrated from /dev/loop0 on host (2026-11-29)"'))
    monkeypatch.setenv("IOSCHED_PRESETS", str(tmp_path))
    presets._cache.clear()
    assert compare.preset_warnings(*rows("loop0-fit", "/dev/loop0")) == []
    assert compare.preset_warnings(*rows("loop0-fit", "/dev/loop1")) != []
    assert compare.preset_warnings(*rows("nullb:irqmode=2", "nullb:irqmode=2")) == []
    assert compare.preset_warnings(*rows("samsung-980pro-1tb", "x")[:1], []) == []     # nothing measured


def _fake_hierarchy(tmp_path, version, weight_files, root_subtree="cpu"):
    """A cgroup mount as plain files: what the kernel would create on mkdir is made beforehand."""
    root = tmp_path / f"cg{version}"
    parent = root / f"iosched-{os.getpid()}"
    for leaf in ("vdi", "bg"):
        (parent / leaf).mkdir(parents=True)
        for f in weight_files:
            (parent / leaf / f).write_text("default 100\n" if version == 2 else "100\n")
    if version == 2:
        (root / "cgroup.subtree_control").write_text(root_subtree + "\n")
        (parent / "cgroup.subtree_control").write_text("\n")
    return cgroups.Hierarchy(version, root), parent


def test_cgroups_v2_enable_io_and_write_both_weights(tmp_path):
    h, parent = _fake_hierarchy(tmp_path, 2, ["io.bfq.weight", "io.weight"])
    j = state.Journal(tmp_path / "state")
    rc = cgroups.create(h, {"vdi": 500, "bg": 100}, j, need_weights=True)
    assert (h.mount / "cgroup.subtree_control").read_text() == "+io"          # enabled on the way ...
    assert j.actions[0] == {"op": "write", "path": str(h.mount / "cgroup.subtree_control"), "value": "-io", "id": 1}
    assert (parent / "cgroup.subtree_control").read_text() == "+io"
    assert rc.written == {"vdi": {"io.bfq.weight": "500", "io.weight": "500"},
                          "bg": {"io.bfq.weight": "100", "io.weight": "100"}}
    assert rc.fio_name("vdi") == f"iosched-{os.getpid()}/vdi"
    assert [a["op"] for a in j.actions] == ["write", "cgroup"]                  # ... and undone after


def test_cgroups_v1_write_bfq_weight_or_fail_clearly(tmp_path):
    h, parent = _fake_hierarchy(tmp_path, 1, ["blkio.bfq.weight"])
    rc = cgroups.create(h, {"vdi": 1000, "bg": 100}, state.Journal(tmp_path / "s1"), need_weights=True)
    assert rc.written == {"vdi": {"blkio.bfq.weight": "1000"}, "bg": {"blkio.bfq.weight": "100"}}
    h, _ = _fake_hierarchy(tmp_path / "x", 1, [])
    with pytest.raises(Exception, match="has no blkio.bfq.weight"):
        cgroups.create(h, {"vdi": 1000, "bg": 100}, state.Journal(tmp_path / "s2"), need_weights=True)
    rc = cgroups.create(h, {"vdi": 100, "bg": 100}, state.Journal(tmp_path / "s3"), need_weights=False)
    assert rc.written == {"vdi": {}, "bg": {}}          # placement only: no weights asked for


def test_the_simulators_nominal_ramp_end_is_refused_before_anything_runs(tmp_path):
    from iosched.backends.kernel import runner
    base = 'name = "r"\n[[job]]\nname = "a"\nrw = "randread"\n'
    exp = load_experiment(str(write(tmp_path, 'ramp_end = "nominal"\n' + base)))
    with pytest.raises(SpecError, match="real fio ends each job's ramp at its first completion") as e:
        runner._check_schedulers(exp, [])
    assert e.value.key == "ramp_end"
    runner._check_schedulers(load_experiment(str(write(tmp_path, 'ramp_end = "first-completion"\n' + base))), [])


def test_the_file_systems_a_spec_names_are_the_ones_the_kernel_backend_makes_and_the_flag_offers():
    from iosched.backends.kernel import fs
    from iosched.presets import FILESYSTEMS

    flag = next(p for p in main.commands["run"].params if p.name == "filesystem")
    assert tuple(flag.type.choices) == FILESYSTEMS
    assert tuple(fs.FILESYSTEMS) == FILESYSTEMS
