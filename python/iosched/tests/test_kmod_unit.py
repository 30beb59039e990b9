"""Our scheduler modules' Python side, without a VM: the module registry and the kernel backend's refusal, the
build's inputs (sources digest, key, headers extraction and Makefile rewriting, missing tools), what the guest runs
to load and unload them, what it sends back (debugfs counters, disk stats, kernel log problems), and the real-VM
tests' criteria (kmod_checks) against made-up results that must fail them."""

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from iosched.backends.vm import VmError, collect, guest, kmod, packages, runner
from iosched.errors import SpecError

from . import kmod_checks as checks
from .test_vm_unit import TWO_JOBS, _sh_syntax, _tar, runs_of

REPO = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- the registry and the sources

def test_modules_and_their_files():
    assert set(kmod.MODULES) == {"k2", "kyber-fairness"}
    src = kmod.source_dir()
    assert src == REPO / "kmod"
    for m in kmod.MODULES.values():
        c = src / m.folder / m.ko.replace(".ko", ".c")
        text = c.read_text()
        assert text.startswith("// SPDX-License-Identifier: GPL-2.0\n"), c
        assert f'.elevator_name = "{m.elevator}"' in text and 'MODULE_LICENSE("GPL")' in text
        assert f"obj-m := {m.ko.replace('.ko', '.o')}" in (src / m.folder / "Makefile").read_text()
        assert (src / m.folder / "Makefile").read_text().startswith("# SPDX-License-Identifier: GPL-2.0\n")
    assert kmod.MODULES["kyber-fairness"].module == "kyber_fairness_iosched"
    assert "GNU GENERAL PUBLIC LICENSE" in (src / "LICENSE").read_text()
    assert "Apache-2.0" in (src / "README.md").read_text()


def test_sources_digest_follows_the_sources(tmp_path):
    for m in kmod.MODULES.values():
        (tmp_path / m.folder).mkdir()
        (tmp_path / m.folder / "Makefile").write_text("obj-m := x.o\n")
        (tmp_path / m.folder / "x.c").write_text("int x;\n")
    d0 = kmod.source_digest(tmp_path)
    (tmp_path / "k2" / "x.o").write_bytes(b"object")            # build output is not a source
    (tmp_path / "k2" / "notes.txt").write_text("hello")
    assert kmod.source_digest(tmp_path) == d0
    (tmp_path / "k2" / "x.c").write_text("int y;\n")
    assert kmod.source_digest(tmp_path) != d0
    (tmp_path / "kyber-fairness" / "Makefile").unlink()
    (tmp_path / "kyber-fairness" / "x.c").unlink()
    (tmp_path / "kyber-fairness").rmdir()
    with pytest.raises(VmError, match="sources are missing"):
        kmod.source_digest(tmp_path)


def test_build_key():
    k = kmod.build_key("abc", "6.12.117-1~deb12u1", "gcc-12 12.2.0", True)
    assert k == kmod.build_key("abc", "6.12.117-1~deb12u1", "gcc-12 12.2.0", True)
    for other in (kmod.build_key("abd", "6.12.117-1~deb12u1", "gcc-12 12.2.0", True),
                  kmod.build_key("abc", "6.12.115-2~deb12u1", "gcc-12 12.2.0", True),
                  kmod.build_key("abc", "6.12.117-1~deb12u1", "gcc-12 12.3.0", True),
                  kmod.build_key("abc", "6.12.117-1~deb12u1", "gcc-12 12.2.0", False)):
        assert other != k


def test_vm_hint():
    assert kmod.vm_hint("mq-deadline") == "" and kmod.vm_hint("cfq") == ""
    assert kmod.vm_hint("kyber-fairness").startswith("; kyber-fairness is seed 001's Kyber-fairness, a module of "
                                                      "iosched's own (kmod/kyber-fairness)")


# ---------------------------------------------------------------- the headers

def _deb(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    """A minimal .deb (dpkg-deb --build) holding ``files``."""
    root = tmp_path / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
                                             "Maintainer: t <t@t>\nDescription: test\n")
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    out = tmp_path / f"{name}.deb"
    subprocess.run(["dpkg-deb", "--build", "-Zgzip", str(root), str(out)], check=True, capture_output=True)
    return out


def _source_tarball(members: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tf:
        for name in members:
            data = f"/* {name} */\n".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_block_headers_extraction(tmp_path):
    tree = ["linux-source-6.12/Makefile", "linux-source-6.12/arch/x86/a.h", "linux-source-6.12/block/blk.h",
            "linux-source-6.12/block/elevator.h", "linux-source-6.12/block/mq-deadline.c",
            "linux-source-6.12/block/partitions/check.h", "linux-source-6.12/certs/c.h",
            "linux-source-6.12/drivers/block/z.h"]
    deb = _deb(tmp_path, "linux-source-6.12", {"usr/src/linux-source-6.12.tar.xz": _source_tarball(tree)})
    names = kmod.extract_block_headers(deb, tmp_path / "out")
    assert names == ["blk.h", "elevator.h"]                         # block/*.h only: no .c, no subfolder
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["blk.h", "elevator.h"]
    assert (tmp_path / "out" / "elevator.h").read_text() == "/* linux-source-6.12/block/elevator.h */\n"
    # Negative control: a package without the kernel's block/elevator.h is refused.
    other = _deb(tmp_path, "not-a-kernel", {"usr/src/linux-source-6.12.tar.xz": _source_tarball(tree[:3])})
    with pytest.raises(VmError, match="no block/elevator.h"):
        kmod.extract_block_headers(other, tmp_path / "out2")


def test_headers_unpacked_elsewhere_with_the_makefile_rewritten(tmp_path, monkeypatch):
    """The three headers packages unpacked into the lab (no root, no /usr/src), the amd64 Makefile's absolute
    include pointing into the copy, the private headers beside them, and all of it cached."""
    abi, version = "6.12.117+deb12", "6.12.117-1~deb12u1"
    h = f"usr/src/linux-headers-{abi}-amd64"
    pkgs = {f"linux-headers-{abi}-amd64": {f"{h}/Makefile": f"include /usr/src/linux-headers-{abi}-common/Makefile\n"
                                                           .encode(),
                                           f"{h}/.config": b'CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-12 (D)"\n'},
            f"linux-headers-{abi}-common": {f"usr/src/linux-headers-{abi}-common/Makefile": b"# common\n"},
            f"linux-kbuild-{abi}": {f"usr/lib/linux-kbuild-{abi}/scripts/x": b"x"},
            "linux-source-6.12": {"usr/src/linux-source-6.12.tar.xz":
                                  _source_tarball(["linux-source-6.12/block/elevator.h"])}}
    made = {n: _deb(tmp_path, n, files) for n, files in pkgs.items()}
    fetched = []

    def download(names, dest):
        for spec in names:
            name, _, ver = spec.partition("=")
            assert ver == version, "exactly the lab kernel's version"
            fetched.append(name)
            arch = "all" if name == "linux-source-6.12" else "amd64"
            quoted = ver.replace(":", "%3a")
            (Path(dest) / f"{name}_{quoted}_{arch}.deb").write_bytes(made[name].read_bytes())

    monkeypatch.setattr(packages, "download", download)
    lab_dir = tmp_path / "lab"
    info = {"kernel": {"abi": abi, "version": version}}
    root = kmod.prepare_headers(lab_dir, info, echo=lambda s: None)
    assert root == lab_dir / "kmod" / f"kernel-{version}"
    assert (root / h / "Makefile").read_text() == f"include {root}/usr/src/linux-headers-{abi}-common/Makefile\n"
    assert (root / "block" / "elevator.h").is_file() and (root / f"usr/lib/linux-kbuild-{abi}/scripts/x").is_file()
    assert kmod.compiler(root, abi) == "x86_64-linux-gnu-gcc-12"
    assert sorted(fetched) == sorted(pkgs)
    # The source package (153 MB) is not kept; the headers packages are (offline rebuilds).
    assert sorted(p.name.split("_")[0] for p in (lab_dir / "kmod" / "debs").iterdir()) == sorted(pkgs)[:3]
    assert not any(p.name.startswith(".") for p in (lab_dir / "kmod").iterdir())
    done = json.loads((root / "done.json").read_text())
    assert done["block_headers"] == ["elevator.h"] and done["source_package"] == f"linux-source-6.12={version}"
    fetched.clear()
    assert kmod.prepare_headers(lab_dir, info, echo=lambda s: None) == root and fetched == []   # cached: offline


def test_missing_compiler_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr(kmod.shutil, "which", lambda name: None if "gcc" in name else f"/usr/bin/{name}")
    with pytest.raises(VmError) as e:
        kmod.tools(tmp_path, "6.12.117+deb12")
    assert "apt-get install make gcc" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setattr(kmod.shutil, "which", lambda name: None if name == "pahole" else f"/usr/bin/{name}")
    assert kmod.tools(tmp_path, "6.12.117+deb12")["pahole"] is None        # no pahole: built without BTF


# ---------------------------------------------------------------- what the guest runs

def test_scripts_load_and_unload_the_modules(tmp_path):
    exp, lds, runs = runs_of(tmp_path)
    mods = [(m.ko, m.module) for m in kmod.MODULES.values()]
    text, _, groups = runner.job_file(runs[0], 1, 100)
    br = guest.BatchRun(0, runs[0], text, groups)
    main = guest.main_script(lds, [br], 0.1, mods)
    _sh_syntax(main, tmp_path)
    load = main.index("insmod /batch/kmod/k2-iosched.ko")
    assert load < main.index("insmod /batch/kmod/kyber-fairness-iosched.ko") < main.index("load null_blk")
    assert main.index("rmmod k2_iosched") > main.index(". /batch/runs/0/run.sh") and "send unload" in main
    assert main.index("/queue/scheduler\nrmmod") > 0                 # queues back to none before rmmod
    rs = guest.run_script(br, 1, 0.1, 60)
    _sh_syntax(rs, tmp_path)
    assert rs.index("diskstat-d0.before") < rs.index("fio --output") < rs.index("diskstat-d0.after")
    assert rs.index("sched_state 0 sched-d0") < rs.index("send r0")
    assert "io.kyber_fairness.weight" in rs
    # Negative control: a batch without our modules neither loads nor unloads anything.
    plain = guest.main_script(lds, [br], 0.1)
    assert "insmod" not in plain and "rmmod" not in plain and "send unload" not in plain


def test_runs_of_our_modules_are_accepted_and_identified_by_their_sources(tmp_path):
    exp, lds, runs = runs_of(tmp_path, TWO_JOBS.replace('name = "bfq", nr_requests = 64, slice_idle = 0',
                                                        'name = "k2", max_inflight = 8'))
    runner.check_runs(exp, runs, 2)
    opts = runner.Options(devices=["nullb"], out=tmp_path)
    a = runner.run_id(runs[0], lds, opts, "tcg", "r", "src1")
    assert a != runner.run_id(runs[0], lds, opts, "tcg", "r", "src2"), "changed module sources measure again"
    exp2, lds2, runs2 = runs_of(tmp_path)                       # bfq: the kernel's own, no module sources
    assert runner.run_id(runs2[0], lds2, opts, "tcg", "r", "src1") == runner.run_id(runs2[0], lds2, opts, "tcg", "r")
    with pytest.raises(SpecError, match="builds and loads k2, kyber-fairness"):
        runner._check_scheduler("k3", "x.toml", "scheduler.name")


# ---------------------------------------------------------------- what the guest sends back

WARN_LOG = """[    5.80] k2_iosched: loading out-of-tree module taints kernel.
[    5.81] k2_iosched: module verification failed: signature and/or required key missing - tainting kernel
[    0.38] NMI watchdog: Perf NMI watchdog permanently disabled
[   40.10] ------------[ cut here ]------------
[   40.10] WARNING: CPU: 1 PID: 93 at /build/k2/k2-iosched.c:120 k2_exit_sched+0x55/0x60 [k2_iosched]
[   40.11] Call Trace:
[   41.00] BUG: kernel NULL pointer dereference, address: 0000000000000008
[   41.01] Oops: 0000 [#1] PREEMPT SMP NOPTI
"""


def test_kernel_problems():
    found = collect.kernel_problems(WARN_LOG)
    assert len(found) == 4 and found[0].startswith("[   40.10] WARNING: CPU: 1")
    # Negative control: loading an unsigned out-of-tree module and the boot's watchdog note are not problems.
    assert collect.kernel_problems("\n".join(WARN_LOG.splitlines()[:3])) == []


def test_sched_state_and_diskstats(tmp_path):
    d = tmp_path / "sched-d0"
    d.mkdir()
    (d / "counters").write_text("max_inflight=8\ninflight=0\ninflight_peak=8\ninserted=12\n")
    (d / "groups").write_text("slot=0 cgroup=/ weight=100 active=0\nslot=2 cgroup=/iosched/w1000 weight=1000 "
                              "active=1\n")
    (d / "read_tokens").write_text("depth=256\nbusy=0\n")
    st = collect.read_sched_state(d)
    assert st["counters"] == {"max_inflight": 8, "inflight": 0, "inflight_peak": 8, "inserted": 12}
    assert st["groups"][1] == {"slot": 2, "cgroup": "/iosched/w1000", "weight": 1000, "active": 1}
    assert st["read_tokens"] == "depth=256\nbusy=0"
    assert collect.read_sched_state(tmp_path / "none") == {}
    before = "3 0 24 8 0 0 0 0 0 16 8 0 0 0 0 0 0"
    after = "7976 0 63808 86301 5 0 40 2 3 3100 86301 0 0 0 0 1 0"
    delta = collect.diskstat_delta(before, after)
    assert delta["read_ios"] == 7973 and delta["write_ios"] == 5 and delta["in_flight"] == 3
    assert collect.diskstat_delta(before, "") is None and collect.diskstat_delta("1 2", "1 2 3") is None


def test_unload_report(tmp_path):
    outcome = runner.Outcome(modules={"loaded": ["k2_iosched", "kyber_fairness_iosched"], "build": {}})
    said = []
    ok = _tar({"rmmod": b"k2_iosched=0 \nkyber_fairness_iosched=0 \n", "proc_modules": b"null_blk 1 0 - Live\n",
               "tainted": b"12288\n", "kernel.log": WARN_LOG.splitlines()[0].encode() + b"\n"})
    runner._unloaded(ok, tmp_path / "a", outcome, said.append)
    assert outcome.modules["unload"] == {"k2_iosched": {"status": 0, "output": ""},
                                         "kyber_fairness_iosched": {"status": 0, "output": ""}}
    assert outcome.modules["kernel_problems"] == [] and outcome.warnings == [] and "kernel log clean" in said[-1]
    # Negative controls: a module that stays loaded, and a warning in the log.
    bad = _tar({"rmmod": b"k2_iosched=1 rmmod: can't unload module 'k2_iosched': Resource temporarily unavailable\n",
                "proc_modules": b"k2_iosched 16384 1 - Live\n", "tainted": b"12800\n",
                "kernel.log": WARN_LOG.encode()})
    outcome = runner.Outcome(modules={"loaded": ["k2_iosched"], "build": {}})
    runner._unloaded(bad, tmp_path / "b", outcome, said.append)
    assert outcome.modules["still_loaded"] == ["k2_iosched"] and len(outcome.modules["kernel_problems"]) == 4
    assert any("did not unload" in w for w in outcome.warnings)
    assert any("reported 4 problem line(s)" in w for w in outcome.warnings)


# ---------------------------------------------------------------- the real-VM tests' criteria

def test_conservation_check():
    good = {"inserted": 500, "dispatched": 500, "completed": 500, "requeued": 0, "inflight": 0, "queued": 0}
    assert checks.conservation(good, 500, 500) == []
    assert checks.conservation(dict(good, completed=499), 500, 500)            # one lost
    assert checks.conservation(dict(good, dispatched=501, completed=501), 501, 501)   # dispatched twice
    assert checks.conservation(dict(good, requeued=2), 500, 500)
    assert checks.conservation(good, 502, 500)                                  # the device saw more
    assert checks.conservation(good, 500, 498)                                  # fio saw fewer
    assert checks.conservation({"inserted": 0, "dispatched": 0, "completed": 0}, 0, 0)


def test_bound_check():
    assert checks.bound_held({"max_inflight": 8, "inflight_peak": 8}, 8) == []
    assert checks.bound_held({"max_inflight": 8, "inflight_peak": 9}, 8)       # over the bound
    assert checks.bound_held({"max_inflight": 8, "inflight_peak": 5}, 8)       # never reached: no test
    assert checks.bound_held({"max_inflight": 32, "inflight_peak": 8}, 8)      # another bound


def test_rt_gain_check():
    assert checks.rt_gain(40e6, 180e6) == []
    assert checks.rt_gain(100e6, 180e6) and checks.rt_gain(0, 180e6)


def test_device_paced_check():
    assert checks.device_paced({"k2-8": 937.0, "k2-none": 1003.0}) == []
    # A CPU-bound guest's background (made up) fails, and names the run.
    assert checks.device_paced({"k2-8": 937.0, "k2-none": 410.0}) == [
        "k2-none: background 410 IOPS, not above 850: the guest, not the device, set the pace"]


def test_fairness_check():
    weights = {"w100": 100, "w250": 250, "w500": 500, "w1000": 1000}
    by_weight = {"w100": 49, "w250": 116, "w500": 234, "w1000": 430}
    assert checks.shares_by_weight(by_weight, weights, 864) == []
    equal = {n: 216 for n in weights}                                           # none: shares by depth
    assert any("fairness index" in p for p in checks.shares_by_weight(equal, weights, 864))
    assert any("of none's" in p for p in checks.shares_by_weight({n: v / 2 for n, v in by_weight.items()}, weights,
                                                                 864))
    assert checks.shares_by_weight(dict(by_weight, w100=0), weights, 864)


def test_build_modules_command(tmp_path):
    from click.testing import CliRunner
    from iosched.cli import main

    res = CliRunner().invoke(main, ["vm", "build-modules", "--lab", str(tmp_path / "nolab")])
    assert res.exit_code == 1 and "the VM lab is not prepared: run `iosched vm prepare`" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert "--no-modules" in CliRunner().invoke(main, ["vm", "prepare", "--help"]).output


def test_a_build_error_is_one_line_with_the_log(tmp_path):
    """With the lab's cached kernel headers (skipped without them): a C error fails the build with the compiler's
    words and the log's path, and leaves no scratch folder behind."""
    from iosched.backends.vm import lab

    folder = lab.lab_dir()
    roots = sorted((folder / "kmod").glob("kernel-*/done.json"))
    if not roots:
        pytest.skip(f"no cached kernel headers in {folder / 'kmod'} (iosched vm build-modules)")
    root = roots[-1].parent
    abi = json.loads(roots[-1].read_text())["abi"]
    src = tmp_path / "kmod"
    for m in kmod.MODULES.values():
        (src / m.folder).mkdir(parents=True)
        for p in (kmod.source_dir() / m.folder).iterdir():
            if p.is_file():
                (src / m.folder / p.name).write_bytes(p.read_bytes())
    c = src / "k2" / "k2-iosched.c"
    c.write_text(c.read_text().replace("static int k2_init_sched(", "static int k2_init_sched(broken "))
    out = tmp_path / "kmodcache" / "build" / "key"
    with pytest.raises(VmError) as e:
        kmod._build(src, root, abi, out, kmod.tools(root, abi), False, lambda s: None)
    msg = str(e.value)
    assert msg.startswith("building kmod/k2 failed: ") and "error" in msg and "\n" not in msg
    assert (tmp_path / "kmodcache" / "build" / "last-failure.log").is_file()
    assert not out.exists() and not list((tmp_path / "kmodcache").glob(".build-*"))
