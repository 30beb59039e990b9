"""The VM backend's pieces that need no VM: the device syntax, the kernel choice, ELF and cpio, the cache key, the
guest's scripts, the result channel and the parsing of what the guest sends back.  Each check has its negative
control (input that must be refused or must not warn)."""

import io
import json
import os
import re
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from iosched import kernel_version
from iosched.backends.kernel import fs as kernel_fs
from iosched.backends.vm import VmError, collect, cpio, devices, elf, guest, kmod, lab, packages, qemu, runner
from iosched.cli import main
from iosched.errors import SpecError
from iosched.spec import RealSystem, expand_runs, load_experiment

from .test_spec import write

REPO = Path(__file__).resolve().parents[3]

TWO_JOBS = """
name = "vmt"
duration = "1s"
ramp = "200ms"
scheduler = { name = "bfq", nr_requests = 64, slice_idle = 0 }
[[job]]
name = "heavy"
rw = "randread"
bs = "4k"
iodepth = 4
cgroup = "heavy"
cgroup_weight = 800
[[job]]
name = "light"
rw = "randread"
bs = "4k"
cgroup = "light"
cgroup_weight = 100
prioclass = 1
"""


def runs_of(tmp_path, text=TWO_JOBS, devs=("nullb:irqmode=2",)):
    exp = load_experiment(str(write(tmp_path, text)))
    lds = devices.parse_devices(list(devs))
    return exp, lds, expand_runs(exp, RealSystem(2, [(d.capacity_bytes, d.logical_block_bytes) for d in lds]))


# ---------------------------------------------------------------- devices

def test_device_syntax():
    d = devices.parse_device("nullb:irqmode=timer,completion_nsec=1ms,hw_queue_depth=4,size=4G", 0)
    assert d.kind == "nullb" and d.params == {"irqmode": "2", "completion_nsec": 1_000_000, "hw_queue_depth": 4,
                                              "size": 4 << 30}
    assert d.capacity_bytes == 4 << 30 and d.logical_block_bytes == 512
    assert d.canonical == "nullb:completion_nsec=1000000,hw_queue_depth=4,irqmode=2,size=4294967296"
    # the order given does not change what the run id is made of
    assert devices.parse_device("nullb:size=4G,hw_queue_depth=4,completion_nsec=1000000,irqmode=2", 0).canonical \
        == d.canonical
    assert devices.nullb_attributes(d) == [("size", "4096"), ("completion_nsec", "1000000"), ("irqmode", "2"),
                                           ("hw_queue_depth", "4")]
    bare = devices.parse_device("nullb", 1)
    assert bare.params == {} and bare.capacity_bytes == 250 << 30      # null_blk's own default
    assert devices.nullb_attributes(bare) == [("size", str(250 * 1024))]
    n = devices.parse_device("nvme:size=1G,logical_block_size=4k,max_ioqpairs=2", 2)
    assert n.logical_block_bytes == 4096 and n.serial == "iosched-d2"
    assert devices.qemu_args(n, "/x/d2.img") == [
        "-drive", "file=/x/d2.img,if=none,id=d2,format=raw,cache=writeback",
        "-device", "nvme,serial=iosched-d2,drive=d2,logical_block_size=4096,physical_block_size=4096,max_ioqpairs=2"]
    v = devices.parse_device("virtio:num_queues=2,queue_size=64,cache=unsafe", 0)
    assert devices.qemu_args(v, "/x/d0.img")[-1] == ("virtio-blk-pci,serial=iosched-d0,drive=d0,"
                                                     "logical_block_size=512,physical_block_size=512,num-queues=2,"
                                                     "queue-size=64")
    t = devices.parse_device("virtio:iops_total=1000", 0)
    assert devices.qemu_args(t, "/x/d0.img")[1] == ("file=/x/d0.img,if=none,id=d0,format=raw,cache=writeback,"
                                                    "throttling.iops-total=1000")
    assert devices.qemu_args(v, "/x/d0.img")[1].count("throttling") == 0     # not given: no throttle
    assert devices.qemu_args(d, None) == []


@pytest.mark.parametrize("text, fragment", [
    ("/dev/loop0", "a host path is for --backend kernel"),
    ("ramdisk", "expected KIND"),
    ("nullb:irqmode=3", "irqmode: expected one of 0, 1, 2"),
    ("nullb:hw_queue_depth=0", "expected >= 1"),
    ("nullb:hw_queue_depth=four", "expected an integer"),
    ("nullb:size=1000k", "whole number of MiB"),
    ("nullb:blocksize=1000", "power of two"),
    ("nullb:queue_mode=0", "nullb has no key \"queue_mode\""),
    ("nullb:irqmode", "expected KEY=VALUE"),
    ("nullb:irqmode=1,irqmode=2", "given twice"),
    ("nvme:cache=fast", "cache: expected one of"),
    ("virtio:size=1", "multiple of 4 KiB"),
])
def test_device_syntax_refusals(text, fragment):
    with pytest.raises(SpecError) as e:
        devices.parse_device(text, 0)
    assert fragment in str(e.value) and str(e.value).startswith("--device")


def test_io_queue_depth_is_one_per_boot():
    devices.parse_devices(["nvme:io_queue_depth=64", "nvme:io_queue_depth=64"])
    with pytest.raises(SpecError, match="one per boot"):
        devices.parse_devices(["nvme:io_queue_depth=64", "nvme:io_queue_depth=32"])


def test_docs_list_every_device_key():
    doc = (REPO / "docs" / "vm-lab.md").read_text()
    for line in devices.docs_table().splitlines()[2:]:
        assert line in doc, f"docs/vm-lab.md lacks the row {line}"


# ---------------------------------------------------------------- packages and the kernel choice

def test_kernel_choice():
    images = {"6.12.117+deb12": "6.12.117-1~deb12u1", "6.12.115+deb12": "6.12.115-2~deb12u1",
              "6.12.120+deb12": "6.12.120-1~deb12u1"}
    sources = {"6.12.117-1~deb12u1", "6.12.115-2~deb12u1"}
    c = packages.choose_kernel("6.12.117+deb12", images, sources)
    assert (c.abi, c.version, c.source_available, c.note) == ("6.12.117+deb12", "6.12.117-1~deb12u1", True, "")
    assert c.package == "linux-image-6.12.117+deb12-amd64-unsigned" and c.release == "6.12.117+deb12-amd64"
    # the pin gone: the newest with its linux-source, not the newest alone (6.12.120 has no source)
    c = packages.choose_kernel("6.12.99+deb12", images, sources)
    assert c.abi == "6.12.117+deb12" and "no longer in the archive" in c.note
    c = packages.choose_kernel("6.12.99+deb12", images, set())
    assert c.abi == "6.12.120+deb12" and not c.source_available and "linux-source-6.12" in c.note
    assert packages.choose_kernel("6.12.99+deb12", {"6.12.9+deb12": "a", "6.12.10+deb12": "b"}, set()).abi == \
        "6.12.10+deb12"       # numeric order, not text order
    with pytest.raises(VmError, match="apt-get update"):
        packages.choose_kernel("6.12.117+deb12", {}, set())
    # a kernel the user named is taken or refused, never replaced by another
    with pytest.raises(VmError, match=r"--kernel 6\.12\.99\+deb12: apt's lists have no "
                       r"linux-image-6\.12\.99\+deb12-amd64-unsigned; the newest 6\.12 builds they have: "
                       r"6\.12\.120\+deb12, 6\.12\.117\+deb12, 6\.12\.115\+deb12"):
        packages.choose_kernel("6.12.99+deb12", images, sources, asked=True)
    assert packages.choose_kernel("6.12.115+deb12", images, sources, asked=True).abi == "6.12.115+deb12"


def test_kernel_series():
    """bookworm's own 6.1 beside the 6.12 backport: ABIs, image and headers packages, and the error for others."""
    s61, s612 = packages.series_of("6.1.0-57"), packages.series_of("6.12.117+deb12")
    assert (s61.name, s61.source_package, s61.kbuild_package("6.1.0-57")) == ("6.1", "linux-source-6.1",
                                                                            "linux-kbuild-6.1")
    assert s612.kbuild_package("6.12.117+deb12") == "linux-kbuild-6.12.117+deb12"
    assert s61.abi_of("linux-image-6.1.0-57-amd64-unsigned") == "6.1.0-57"
    assert s61.abi_of("linux-image-6.12.117+deb12-amd64-unsigned") is None       # 6.12 is not 6.1's
    assert s612.abi_of("linux-image-6.12.117+deb12-amd64-unsigned") == "6.12.117+deb12"
    assert s612.abi_of("linux-image-6.12.117+deb12-cloud-amd64-unsigned") is None
    c = packages.choose_kernel("6.1.0-57", {"6.1.0-57": "6.1.192-3", "6.1.0-9": "6.1.27-1"}, {"6.1.192-3"},
                               asked=True)
    assert (c.release, c.package, c.source_available) == ("6.1.0-57-amd64", "linux-image-6.1.0-57-amd64-unsigned",
                                                          True)
    assert kmod.header_packages("6.1.0-57") == ["linux-headers-6.1.0-57-amd64", "linux-headers-6.1.0-57-common",
                                                "linux-kbuild-6.1"]
    for bad in ("6.1.192", "5.10.0-30", "6.12.117"):
        with pytest.raises(VmError, match=f"--kernel {re.escape(bad)}: not a Debian kernel ABI the lab knows; "
                                          r"it takes one like 6\.12\.117\+deb12 \(6\.12\) or 6\.1\.0-57 \(6\.1\)"):
            packages.series_of(bad)


def test_the_labs_kernel_is_recorded_as_its_stable_release(tmp_path):
    """Debian's 6.1 ABI names hide the stable release the simulator needs for its backports (uname -r says
    6.1.0-57-amd64 of a 6.1.192 build): a run on the lab's own kernel records the package's upstream version. The
    negative controls: the release alone would give 6.1, and another kernel's release is taken as it says."""
    built = lab.Lab(tmp_path, {"key": "k", "kernel": {"release": "6.1.0-57-amd64", "version": "6.1.192-3"}})
    assert built.kernel_version("6.1.0-57-amd64") == built.kernel_version(None) == "6.1.192"
    assert kernel_version.from_release("6.1.0-57-amd64") == "6.1"
    assert built.kernel_version("6.12.117+deb12-amd64") == "6.12.117"
    b612 = lab.Lab(tmp_path, {"key": "k", "kernel": {"release": "6.12.117+deb12-amd64",
                                                    "version": "6.12.117-1~deb12u1"}})
    assert b612.kernel_version("6.12.117+deb12-amd64") == "6.12.117"


def test_depends_and_deb_names(tmp_path):
    assert packages.parse_depends("libaio1 (>= 0.3.93), libc6 (>= 2.34), python3:any, a | b (>= 1), <debconf-2.0>") \
        == ["libaio1", "libc6", "python3", "a", "<debconf-2.0>"]
    (tmp_path / "busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb").write_bytes(b"")
    (tmp_path / "media-types_10.0.0_all.deb").write_bytes(b"")
    assert packages.find_deb(tmp_path, "busybox-static", "1:1.35.0-4+deb12u1+b1").name.startswith("busybox-static")
    assert packages.find_deb(tmp_path, "media-types", "10.0.0") is not None
    assert packages.find_deb(tmp_path, "busybox-static", "1:1.35.0-5") is None


# ---------------------------------------------------------------- ELF, cpio, the cache

def test_elf_needed_matches_ldd():
    exe = Path("/usr/bin/python3").resolve() if Path("/usr/bin/python3").exists() else Path(shutil.which("ls"))
    needed, _ = elf.dynamic(exe.read_bytes(), str(exe))
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert needed and all(n in ldd for n in needed)
    assert elf.interpreter(exe.read_bytes()) == "/lib64/ld-linux-x86-64.so.2"
    with pytest.raises(elf.ElfError):
        elf.dynamic(b"#!/bin/sh\n" + b"\0" * 64)


def _fake_module(modinfo: bytes) -> bytes:
    """A minimal ELF64 relocatable with a .modinfo section (what elf.modinfo reads)."""
    shstr = b"\0.modinfo\0.shstrtab\0"
    body_off = 64
    mod_off, str_off = body_off, body_off + len(modinfo)
    sh_off = str_off + len(shstr)
    sh_off += -sh_off % 8
    head = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    head += struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, sh_off, 0, 64, 0, 0, 64, 3, 2)
    data = bytearray(head + modinfo + shstr)
    data += b"\0" * (sh_off - len(data))
    data += b"\0" * 64                                                      # the null section
    data += struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, mod_off, len(modinfo), 0, 0, 1, 0)
    data += struct.pack("<IIQQQQIIQQ", 10, 3, 0, 0, str_off, len(shstr), 0, 0, 1, 0)
    return bytes(data)


def test_module_depends():
    ko = _fake_module(b"license=GPL\0depends=nvme-core,crc32c\0parm=io_queue_depth:int\0name=nvme\0")
    assert elf.module_depends(ko) == ["nvme-core", "crc32c"]
    assert elf.modinfo(ko)["name"] == ["nvme"]
    assert elf.module_depends(_fake_module(b"depends=\0name=configfs\0")) == []


def test_cpio_round_trip_and_alignment():
    buf = io.BytesIO()
    w = cpio.CpioWriter(buf)
    w.directory("bin")
    w.file("bin/x", b"abc", 0o755)
    w.symlink("bin/sh", "busybox")
    w.char_device("dev/console", 5, 1)
    w.parents("a/b/c.txt")
    w.file("a/b/c.txt", b"12345")
    with pytest.raises(ValueError, match="twice"):
        w.file("bin/x", b"again")
    w.close()
    data = buf.getvalue()
    assert len(data) % 4 == 0
    entries = {n: (m, b) for n, m, b in cpio.read_names(data)}
    assert entries["bin/x"] == (0o100755, b"abc") and entries["bin/sh"][1] == b"busybox"
    assert entries["dev/console"][0] & 0o170000 == 0o020000 and {"a", "a/b"} <= set(entries)
    # the kernel's own reader agrees where cpio is installed (GNU cpio lists newc archives)
    if shutil.which("cpio"):
        listed = subprocess.run(["cpio", "-t", "--quiet"], input=data, capture_output=True).stdout.decode().split()
        assert "bin/x" in listed and "a/b/c.txt" in listed


def test_build_key():
    pk = {"fio": "3.33-3", "busybox-static": "1:1.35"}
    k = lab.build_key(pk, ["bfq", "null_blk"])
    assert k == lab.build_key(dict(reversed(list(pk.items()))), ["null_blk", "bfq"])   # order-free
    assert k != lab.build_key(dict(pk, fio="3.34-1"), ["bfq", "null_blk"])             # a new package version
    assert k != lab.build_key(pk, ["bfq", "null_blk"], init=guest.INIT + "# changed\n")  # our init script
    assert k != lab.build_key(pk, ["bfq"])


def test_lab_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(lab.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert lab.lab_dir() == tmp_path / "iosched" / "lab"
    monkeypatch.setenv(lab.ENV, str(tmp_path / "env"))
    assert lab.lab_dir() == tmp_path / "env" and lab.lab_dir(tmp_path / "flag") == tmp_path / "flag"


def test_library_resolution_against_ldd(tmp_path):
    """The resolver over the host's own root finds what ldd finds; a root without libc misses it."""
    exe = "usr/bin/python3.11" if Path("/usr/bin/python3.11").exists() else None
    if exe is None:
        pytest.skip("no /usr/bin/python3.11 to resolve")
    found, missing = lab.resolve_libraries(lab.Tree({"host": Path("/")}), exe)
    assert not missing
    ldd = subprocess.run(["ldd", "/" + exe], capture_output=True, text=True).stdout
    for path in found:
        assert os.path.basename(path) in ldd
    fake = tmp_path / "root"
    (fake / "usr/bin").mkdir(parents=True)
    shutil.copy("/" + exe, fake / exe)
    (fake / "lib64").mkdir()
    os.symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", fake / "lib64/ld-linux-x86-64.so.2")
    _, missing = lab.resolve_libraries(lab.Tree({"fake": fake}), exe)
    assert "libc.so.6" in missing and "/lib64/ld-linux-x86-64.so.2" in missing


def test_the_guest_kernels_tick_rate_comes_from_its_build_configuration(tmp_path):
    """CONFIG_HZ of the built guest kernel (the lab host preset's `hz`); None before a build or without the line."""
    built = lab.Lab(tmp_path, {"key": "k"})
    assert built.config_hz() is None
    (tmp_path / "build" / "k").mkdir(parents=True)
    (built.build / "config").write_text("CONFIG_HZ_250=y\n# CONFIG_HZ_1000 is not set\nCONFIG_HZ=250\n")
    assert built.config_hz() == 250
    (built.build / "config").write_text("CONFIG_HZ_250=y\n")
    assert built.config_hz() is None


def test_the_lab_host_preset_reads_the_tick_rate_of_the_recorded_build(monkeypatch, tmp_path):
    """`iosched vm host-preset` takes `hz` from the build lab.json records, without loading (rebuilding) the lab;
    no lab, or an unreadable lab.json, gives None (the preset then leaves `hz` out)."""
    from iosched.devcal.labhost import lab_kernel_hz

    monkeypatch.setenv(lab.ENV, str(tmp_path))
    assert lab_kernel_hz() is None
    (tmp_path / lab.LAB_JSON).write_text("{not json")
    assert lab_kernel_hz() is None
    (tmp_path / lab.LAB_JSON).write_text(json.dumps({"key": "k"}))
    (tmp_path / "build" / "k").mkdir(parents=True)
    (tmp_path / "build" / "k" / "config").write_text("CONFIG_HZ=300\n")
    assert lab_kernel_hz() == 300


def test_load_unprepared_lab(tmp_path):
    with pytest.raises(VmError, match="run `iosched vm prepare`"):
        lab.load(tmp_path / "nothing")


# ---------------------------------------------------------------- the guest's scripts

def _sh_syntax(text: str, tmp_path: Path) -> None:
    p = tmp_path / "s.sh"
    p.write_text(text)
    r = subprocess.run(["sh", "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_scripts(tmp_path):
    exp, lds, runs = runs_of(tmp_path, devs=("nullb:irqmode=2,hw_queue_depth=4",))
    text, notes, groups = runner.job_file(runs[0], 1, 100)
    assert groups == {"heavy": 800, "light": 100}
    assert "[global]\nclocksource=clock_gettime\n" in text and "filename=/dev/iosched/d0" in text
    assert "cgroup=" not in text
    assert 'exec_prerun=sh -c "echo $PPID > /sys/fs/cgroup/iosched/heavy/cgroup.procs"' in text
    assert "prioclass=1" in text
    br = guest.BatchRun(0, runs[0], text, groups)
    rs = guest.run_script(br, 1, 0.1, 60)
    assert "queue 0 - bfq 64 slice_idle=0" in rs and "io.bfq.weight io.kyber_fairness.weight io.weight" in rs
    assert "fio --output-format=json+" in rs and "send r0 /work/runs/0" in rs
    # the stall watch: started as the run begins, stopped before its folder is sent (else it would interleave)
    assert rs.index("( sleep 60; stalled 0 ) & WATCH=$!") < rs.index("fio --output") < rs.index("kill $WATCH") \
        < rs.index("send r0")
    assert runner.run_deadline_s(runs[0], "tcg") - runner.STALL_REPORT_S > runner.expected_s(runs[0]) * 3
    main_sh = guest.main_script(lds, [br], 0.1)
    assert "load null_blk nr_devices=0" in main_sh and "/sys/kernel/config/nullb/nullb0/hw_queue_depth 4" in main_sh
    assert "+io" in main_sh and main_sh.rstrip().endswith("say end")
    assert "tracing" not in rs
    # --vm trace=blk: the tracer is on around fio only, and its output lands in the run's folder before it is sent
    traced = guest.run_script(br, 1, 0.1, 60, trace_buffer_kib=4096)
    assert "echo 4096 > /sys/kernel/tracing/buffer_size_kb" in traced
    assert traced.index("echo blk > /sys/kernel/tracing/current_tracer") < traced.index("fio --output") \
        < traced.rindex("echo 0 > /sys/kernel/tracing/tracing_on") < traced.index("blktrace.txt.gz") \
        < traced.index("send r0")
    assert "events/sched" not in traced
    # trace=blk+sched: the CPU scheduler's events join the blk tracer's in the same ring, around fio only
    both = guest.run_script(br, 1, 0.1, 60, trace_buffer_kib=4096, sched_events=True)
    for e in guest.SCHED_EVENTS:
        assert both.index(f"echo 1 > /sys/kernel/tracing/events/sched/{e}/enable") < both.index("fio --output") \
            < both.index(f"echo 0 > /sys/kernel/tracing/events/sched/{e}/enable") < both.index("blktrace.txt.gz")
    for script in (guest.INIT, guest.LIB, main_sh, rs, traced, both):
        _sh_syntax(script, tmp_path)
    # no cgroups: no io controller needed, no cgroup lines
    _, lds2, runs2 = runs_of(tmp_path, TWO_JOBS.replace('cgroup = "heavy"', "").replace('cgroup = "light"', "")
                             .replace("cgroup_weight = 800", "").replace("cgroup_weight = 100", ""),
                             devs=("nvme:size=1G,io_queue_depth=64",))
    t2, _, g2 = runner.job_file(runs2[0], 1, 100)
    assert g2 == {} and "exec_prerun" not in t2
    m2 = guest.main_script(lds2, [guest.BatchRun(0, runs2[0], t2, g2)], 0.1)
    assert "subtree_control" not in m2 and "load nvme io_queue_depth=64" in m2 and "iosched-d0" in m2


def test_checks_before_boot(tmp_path):
    exp, _, runs = runs_of(tmp_path)
    runner.check_runs(exp, runs, 2)
    exp, _, runs = runs_of(tmp_path, TWO_JOBS.replace('name = "bfq"', 'name = "kyber-fairness"'))
    runner.check_runs(exp, runs, 2)          # our module: the lab builds and loads it
    with pytest.raises(SpecError, match="cfq is a legacy single-queue scheduler.*run it with --backend sim"):
        runner._check_scheduler("cfq", "x.toml", "scheduler.name")
    exp, _, runs = runs_of(tmp_path, TWO_JOBS.replace('cgroup = "heavy"', 'cgroup = "a/b"'))
    with pytest.raises(SpecError, match="cgroup names"):
        runner.check_runs(exp, runs, 2)
    # The simulator's common window has no fio equivalent; fio's own ("first-completion") passes.
    exp, _, runs = runs_of(tmp_path, 'ramp_end = "nominal"\n' + TWO_JOBS)
    with pytest.raises(SpecError, match='"nominal" is the simulator\'s') as e:
        runner.check_runs(exp, runs, 2)
    assert e.value.key == "ramp_end"
    exp, _, runs = runs_of(tmp_path, 'ramp_end = "first-completion"\n' + TWO_JOBS)
    runner.check_runs(exp, runs, 2)


def test_run_id(tmp_path):
    _, lds, runs = runs_of(tmp_path)
    opts = runner.Options(devices=["nullb:irqmode=2"], out=tmp_path)
    rid = runner.run_id(runs[0], lds, opts, "tcg", "6.12.117+deb12-amd64")
    assert rid == runner.run_id(runs[0], lds, opts, "tcg", "6.12.117+deb12-amd64")
    assert rid != runner.run_id(runs[0], lds, opts, "kvm", "6.12.117+deb12-amd64")
    assert rid != runner.run_id(runs[0], devices.parse_devices(["nullb:irqmode=1"]), opts, "tcg",
                                "6.12.117+deb12-amd64")
    assert rid != runner.run_id(runs[0], lds, runner.Options(devices=[], out=tmp_path, cpus=1), "tcg",
                                "6.12.117+deb12-amd64")
    # a traced run is a measurement of its own (the tracer costs guest CPU); untraced ids stay as they were
    traced = {runner.run_id(runs[0], lds, runner.Options(devices=[], out=tmp_path, trace=t), "tcg",
                            "6.12.117+deb12-amd64") for t in ("blk", "blk+sched")}
    assert rid not in traced and len(traced) == 2
    # so is one whose idle vCPUs poll; the default (halt) keeps the ids as they were
    assert rid != runner.run_id(runs[0], lds, runner.Options(devices=[], out=tmp_path, idle="poll"), "tcg",
                                "6.12.117+deb12-amd64")
    assert rid == runner.run_id(runs[0], lds, runner.Options(devices=[], out=tmp_path, idle="halt"), "tcg",
                                "6.12.117+deb12-amd64")


def test_a_request_trace_in_the_lab_is_the_blk_tracer_with_sched_events():
    from iosched.cli_vm import lab_trace
    assert lab_trace({"request_trace": True}, "off", []) == "blk+sched"            # the spec's key, or --trace
    assert lab_trace({"request_trace": True}, "blk", ["trace=blk"]) == "blk"      # --vm trace=... says otherwise
    assert lab_trace({"request_trace": True}, "off", ["trace=off"]) == "off"
    assert lab_trace({}, "off", []) == "off" and lab_trace({}, "blk", ["trace=blk"]) == "blk"


def test_vm_options():
    o = runner.parse_vm_options(["cpus=1", "memory=1G", "accel=tcg"], runner.Options(devices=[], out=Path(".")))
    assert (o.cpus, o.memory_mib, o.accel, o.trace) == (1, 1024, "tcg", "off")
    o = runner.parse_vm_options(["trace=blk"], o)
    assert o.trace == "blk" and runner.trace_buffer_kib(o) == 64 << 10     # 1 GiB / 8: capped at 64 MiB
    assert runner.parse_vm_options(["trace=blk+sched"], o).trace == "blk+sched"
    assert runner.trace_buffer_kib(runner.Options(devices=[], out=Path("."), cpus=4, memory_mib=512)) == 16 << 10
    o = runner.parse_vm_options(["idle=poll"], o)
    assert o.idle == "poll" and runner.parse_vm_options(["idle=halt"], o).idle == "halt"
    # the guest's command line: idle=poll only when asked for
    boot = qemu.Boot(Path("k"), Path("i"), "tcg", 2, 2048, Path("r"), Path("c"))
    assert "idle=" not in " ".join(boot.argv("qemu"))
    boot.idle_poll = True
    argv = boot.argv("qemu")
    assert argv[argv.index("-append") + 1].endswith(" idle=poll")
    for bad in ("cpus=0", "memory=64M", "accel=hvf", "gpus=1", "cpus", "trace=ftrace", "trace=sched", "idle=mwait",
                "idle="):
        with pytest.raises(SpecError):
            runner.parse_vm_options([bad], runner.Options(devices=[], out=Path(".")))


# ---------------------------------------------------------------- the channel and what comes back

def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_channel_frames(tmp_path):
    p = tmp_path / "results"
    payload = _tar({"./a.txt": b"hello"})
    stream = (b"@@iosched begin\nsh: stray message\n@@iosched tar r0 " + str(len(payload)).encode() + b"\n"
              + payload + b"@@iosched error scheduler.fifo_batch cannot write 0\n@@iosched end\n")
    ch = qemu.Channel(p)
    p.write_bytes(b"")
    got = []
    for i in range(0, len(stream), 700):       # the guest's writes arrive in pieces
        with open(p, "ab") as f:
            f.write(stream[i:i + 700])
        got += ch.poll()
    assert [f.words[0] for f in got] == ["begin", "tar", "error", "end"]
    assert got[1].data == payload and got[2].words[1] == "scheduler.fifo_batch"
    assert ch.other == ["sh: stray message"]
    d = tmp_path / "unpacked"
    assert collect.unpack(got[1].data, d) == ["a.txt"] and (d / "a.txt").read_bytes() == b"hello"
    assert collect.unpack(_tar({"../evil": b"x", "/abs": b"y"}), tmp_path / "u2") == []
    p.write_bytes(b"@@iosched tar r0 many\n")
    with pytest.raises(VmError, match="garbled"):
        qemu.Channel(p).poll()


STAT = """@ 100.00
cpu0 100 0 100 800 0 0 0 0 0 0
cpu1 100 0 100 800 0 0 0 0 0 0
@ 101.00
cpu0 150 0 150 800 0 0 0 0 0 0
cpu1 110 0 110 880 0 0 0 0 0 0
@ 102.00
cpu0 245 0 150 805 0 0 0 0 0 0
cpu1 120 0 120 960 0 0 0 0 0 0
"""


def test_guest_cpu_and_warnings():
    samples = collect.parse_stat_log(STAT + "@ 103.0\ncpu0 1")      # a cut-off last sample is dropped
    assert [t for t, _ in samples] == [100.0, 101.0, 102.0]
    busy, rows = collect.guest_cpu(samples, 100.0, 1_000_000_000)    # the window after a 1 s ramp
    assert busy == [pytest.approx(95 / 100), pytest.approx(20 / 100)]
    assert {r["subject"] for r in rows} == {"cpu0", "cpu1"} and {r["source"] for r in rows} == {"guest"}
    assert collect.saturation_warning(busy, "tcg").startswith("guest CPU saturated")
    assert collect.saturation_warning([0.89, 0.2], "tcg") is None                    # negative control
    assert "contention" in collect.contention_warning(8 * 10**9, 2 * 10**9)
    assert collect.contention_warning(10 * 10**9, 10**9 // 2) is None                # 5% waiting: none
    assert collect.contention_warning(0, 0) is None


def test_queue_and_cgroup_parsing():
    snap = collect.queue_snapshot("scheduler=none [mq-deadline] kyber bfq\nnr_requests=128\nwbt_lat_usec=0\n"
                                  "iosched.fifo_batch=16\niosched.read_expire=500\n")
    assert snap["scheduler"] == "mq-deadline" and snap["nr_requests"] == 128 and snap["iosched"]["fifo_batch"] == "16"
    assert collect.setting_notes(snap, "mq-deadline", 128, {"fifo_batch": 16}, "/dev/nullb0") == []
    notes = collect.setting_notes(snap, "mq-deadline", 256, {"read_expire": 499}, "/dev/nullb0")
    assert len(notes) == 2 and "own units" in notes[1]
    with pytest.raises(VmError, match="asked for bfq"):
        collect.setting_notes(snap, "bfq", None, {}, "/dev/nullb0")
    assert collect.io_stat_ios("254:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n"
                               "259:0 rbytes=0 wbytes=0 rios=0 wios=3 dbytes=0 dios=0\n") == 6
    assert collect.io_stat_ios("") == 0


def test_fio_failure_is_one_line(tmp_path):
    (tmp_path / "fio.rc").write_text("1\n")
    (tmp_path / "fio.log").write_text("fio: pid=77, err=22/file:ioengines.c:335, func=td_io_init, error=Invalid "
                                      "argument\n")
    with pytest.raises(VmError, match="fio exited 1 in the guest: fio: pid=77"):
        collect.read_fio(tmp_path)
    (tmp_path / "fio.rc").write_text("0\n")
    (tmp_path / "fio.json").write_text("note: a warning\n{\"jobs\": []}")
    assert collect.read_fio(tmp_path) == {"jobs": []}


def test_guest_errors_name_the_key(tmp_path):
    exp, lds, _ = runs_of(tmp_path)
    state = {"current": None, "begun": 1.0}
    e = runner._guest_error(["error", "scheduler.fifo_batch", "x"], "error scheduler.fifo_batch cannot write 0",
                            lds, runner.Outcome(), state, exp)
    assert isinstance(e, SpecError) and e.key == "scheduler.fifo_batch"
    e = runner._guest_error(["error", "0", "x"], "error 0 no nvme disk appeared", lds, runner.Outcome(), state, exp)
    assert isinstance(e, SpecError) and e.file == "--device" and "no nvme disk" in str(e)
    e = runner._guest_error(["error", "-", "x"], "error - cannot load null_blk", lds, runner.Outcome(), state, exp)
    assert isinstance(e, VmError) and "between runs" in str(e)


# ---------------------------------------------------------------- the command line

def test_cli_refusals(tmp_path, monkeypatch):
    spec = write(tmp_path, TWO_JOBS)
    monkeypatch.setenv(lab.ENV, str(tmp_path / "no-lab"))
    r = CliRunner().invoke(main, ["run", str(spec), "--backend", "vm", "--out", str(tmp_path / "o")])
    assert r.exit_code != 0
    monkeypatch.setenv("IOSCHED_QEMU", str(tmp_path / "no-qemu"))
    r = CliRunner().invoke(main, ["run", str(spec), "--backend", "vm", "--device", "nullb", "--out",
                                  str(tmp_path / "o")])
    assert r.exit_code == 1 and "qemu-system-x86" in r.output and "Traceback" not in r.output
    monkeypatch.delenv("IOSCHED_QEMU")
    if qemu.shutil.which(qemu.QEMU):
        r = CliRunner().invoke(main, ["run", str(spec), "--backend", "vm", "--device", "nullb", "--out",
                                      str(tmp_path / "o")])
        assert r.exit_code == 1 and "run `iosched vm prepare`" in r.output
    for args, fragment in ((["--lab", str(tmp_path)], "only with --backend vm"),
                           (["--backend", "vm", "--jobs", "2"], "not with --backend vm"),
                           (["--backend", "vm", "--vm", "gpus=2"], "expected KEY=VALUE")):
        r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "o"), *args])
        assert r.exit_code == 2 and fragment in r.output, r.output
    assert not (tmp_path / "o").exists()


def test_cli_devices_lists_keys():
    r = CliRunner().invoke(main, ["vm", "devices"])
    assert r.exit_code == 0 and "completion_nsec" in r.output and "max_ioqpairs" in r.output


def test_a_failed_boots_console_is_kept_whole_in_out(tmp_path):
    """A guest kernel's panic (what reaches the quiet console) is longer than an error line's tail: the whole
    console goes to OUT/vm-console.log, and the error's closing words name it; an empty console keeps nothing."""
    from types import SimpleNamespace

    from iosched.backends.vm.runner import _kept_console
    console = tmp_path / "console.log"
    console.write_text("".join(f"[   12.{i:06d}] Call Trace: frame {i}\n" for i in range(40)) +
                       "Kernel panic - not syncing: Fatal exception in interrupt\n")
    guest = SimpleNamespace(boot=SimpleNamespace(console=console))
    out = tmp_path / "out"
    assert _kept_console(guest, out) == f" (the whole console: {out / 'vm-console.log'})"
    assert (out / "vm-console.log").read_text() == console.read_text()
    console.write_text("")
    (out / "vm-console.log").unlink()
    assert _kept_console(guest, out) == "" and not (out / "vm-console.log").exists()


# ---------------------------------------------------------------- a file system on the lab's devices

ONE_WRITER = """
name = "vmfs"
duration = "1s"
scheduler = { name = "none" }
[[job]]
name = "w"
rw = "randwrite"
bs = "4k"
iodepth = 8
"""


def test_a_file_system_in_the_lab_is_made_in_order_and_the_jobs_address_its_test_file(tmp_path):
    _, lds, runs = runs_of(tmp_path, ONE_WRITER, devs=("nvme:size=1G",))
    text, _, _ = runner.job_file(runs[0], 1, 100, "f2fs")
    assert "filename=/mnt/iosched/d0/iosched.data" in text and "/dev/iosched" not in text
    raw, _, _ = runner.job_file(runs[0], 1, 100)
    assert "filename=/dev/iosched/d0" in raw
    br = guest.BatchRun(0, runs[0], text, {})
    main_sh = guest.main_script(lds, [br], 0.1, filesystem="f2fs", file_bytes={0: 800 << 20})
    # the checksum module before the file system's, mkfs before mount, the room checked before the file is written
    order = ["load $m", "/sbin/mkfs.f2fs -f -q -t 0 /dev/$name", "mount -t f2fs /dev/$name /mnt/iosched/d0",
             "-ge 800 ]", "--size=838860800 --direct=1", "> /work/devices/d0.fs", "send setup"]
    at = [main_sh.index(s) for s in order]
    assert at == sorted(at), order
    assert "for m in crc32_generic f2fs; do" in main_sh
    _sh_syntax(main_sh, tmp_path)
    assert "mkfs" not in guest.main_script(lds, [br], 0.1)       # the raw device: nothing made
    # ext4 without its lazy inode-table zeroing (no ext4lazyinit writes during the runs); xfs and f2fs without
    # discard, as the kernel backend makes them
    assert "lazy_itable_init=0" in guest.MKFS["ext4"] and "nodiscard" in guest.MKFS["ext4"]
    assert "-K" in guest.MKFS["xfs"].split() and "-t 0" in guest.MKFS["f2fs"]
    assert set(guest.MKFS) == set(guest.FS_MODULES) == set(kernel_fs.FILESYSTEMS)
    # every module the scripts load is in the image
    assert {m for ms in guest.FS_MODULES.values() for m in ms} <= set(lab.image_modules())


def test_the_test_files_size_and_the_devices_a_file_system_refuses(tmp_path):
    _, lds, runs = runs_of(tmp_path, ONE_WRITER, devs=("nvme:size=1G",))
    opts = runner.Options(devices=["nvme:size=1G"], out=tmp_path, filesystem="xfs")
    # jobs that address the whole device get FILE_SHARE of it: 0.75 x 1,024 MiB = 768 MiB
    assert runner.sizes_of_test_files(lds, runs, opts) == {0: 768 << 20}
    _, _, small = runs_of(tmp_path, ONE_WRITER + 'size = "300M"\n', devs=("nvme:size=1G",))
    assert runner.sizes_of_test_files(lds, small, opts) == {0: 300 << 20}
    # null_blk keeps a file system only in memory, and that memory is the guest's
    ok = devices.parse_devices(["nullb:memory_backed=1,size=512M"])
    assert runner.sizes_of_test_files(ok, runs, opts) == {0: 384 << 20}
    for dev, fragment in (("nullb", "needs memory_backed=1"),
                          ("nullb:memory_backed=1", "at most half of it \\(1024M\\)"),
                          ("nullb:memory_backed=1,size=4G", "at most half")):
        with pytest.raises(SpecError, match=fragment):
            runner.sizes_of_test_files(devices.parse_devices([dev]), runs, opts)


def test_a_file_system_is_one_per_boot_and_names_its_runs(tmp_path):
    exp, lds, runs = runs_of(tmp_path, ONE_WRITER, devs=("nvme:size=1G",))
    assert runner.batch_filesystem([exp], None) is None
    assert runner.batch_filesystem([exp], "ext4") == "ext4"
    named = load_experiment(str(write(tmp_path, ONE_WRITER.replace(
        'name = "vmfs"', 'name = "vmfs"\ndevices = [{ preset = "samsung-980pro-1tb", filesystem = "xfs" }]'),
        name="named.toml")))
    assert runner.batch_filesystem([named], None) == "xfs"
    with pytest.raises(SpecError, match="--filesystem"):
        runner.batch_filesystem([named], "ext4")
    with pytest.raises(SpecError, match="one file system on every device"):
        runner.batch_filesystem([named, exp], None)
    raw = runner.run_id(runs[0], lds, runner.Options(devices=[], out=tmp_path), "tcg", "r")
    ids = {runner.run_id(runs[0], lds, runner.Options(devices=[], out=tmp_path, filesystem=fs), "tcg", "r")
           for fs in ("ext4", "xfs", "f2fs")}
    assert raw not in ids and len(ids) == 3


def test_a_lab_prepared_before_the_mkfs_programs_asks_for_prepare(tmp_path):
    """A cache whose lab.json predates the file systems (no e2fsprogs, xfsprogs, f2fs-tools among its packages) is
    not rebuilt from its own debs/ (they lack the programs): one line saying to prepare again. With them recorded,
    the same cache gets past that check (and stops at its missing .deb files instead)."""
    info = {"format": 2, "key": "old", "kernel": {"release": "6.12.117+deb12-amd64"},
            "packages": {"fio": "3.33-3", "busybox-static": "1"}, "debs": {"fio": "fio_3.33-3_amd64.deb",
                                                                        "busybox-static": "busybox.deb"}}
    (tmp_path / lab.LAB_JSON).write_text(json.dumps(info))
    with pytest.raises(VmError, match="run `iosched vm prepare`.* again: the guest now takes e2fsprogs, xfsprogs, "
                                      "f2fs-tools"):
        lab.load(tmp_path)
    for n in ("e2fsprogs", "xfsprogs", "f2fs-tools"):
        info["packages"][n], info["debs"][n] = "1", f"{n}.deb"
    (tmp_path / lab.LAB_JSON).write_text(json.dumps(info))
    with pytest.raises(VmError, match="packages are missing"):
        lab.load(tmp_path)
