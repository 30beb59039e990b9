import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from iosched.cli import main
from iosched.errors import SpecError
from iosched.fiojob import DeviceInfo, RawJob, device_aliases
from iosched.spec import Overrides, device_names, expand_runs, load_experiment

BASE = """\
name = "lapp-vs-writers"
duration = "2s"
ramp = "200ms"
repeat = 2
seed = 7
host = { preset = "xeon-silver-4210r-10c", cores = 10 }
devices = [{ preset = "samsung-980pro-1tb", count = 1 }]
scheduler = { name = "none" }

[[job]]
name = "lapp"
rw = "randread"
bs = "4k"
iodepth = 1
cpus_allowed = "0"

[[job]]
name = "bg"
rw = "randwrite"
iodepth = 32
numjobs = 2
cpus_allowed = "1-4"
"""


def write(tmp_path, text, name="spec.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_resolve_basic(tmp_path):
    runs = expand_runs(load_experiment(str(write(tmp_path, BASE))))
    assert len(runs) == 2
    assert [r.seed for r in runs] == [7, 8] and [r.repetition for r in runs] == [0, 1]
    r = runs[0]
    assert r.experiment == "lapp-vs-writers" and r.scheduler == "none"
    assert r.devices[0]["name"] == "/dev/nvme0n1" and r.host["cores"] == 10
    lapp, bg = (j.config for j in r.jobs)
    assert lapp["time_based"] is True and lapp["runtime_ns"] == 2 * 10**9 and lapp["ramp_ns"] == 200_000_000
    assert bg["numjobs"] == 2 and bg["iodepth"] == 32 and bg["cpus_allowed"] == [1, 2, 3, 4]


def test_the_kernel_version_comes_from_the_host_preset_and_a_spec_may_override_it(tmp_path):
    from iosched.simconfig import run_config
    run = expand_runs(load_experiment(str(write(tmp_path, BASE))))[0]
    assert run.kernel == "6.3" and run_config(run)["host"]["kernel"] == "6.3", "the xeon preset: seed 000 ran 6.3.8"
    text = BASE.replace('cores = 10', 'cores = 10, kernel = "6.18"')
    run = expand_runs(load_experiment(str(write(tmp_path, text))))[0]
    assert run.kernel == "6.18" and run_config(run)["host"]["kernel"] == "6.18"


def test_kernel_versions_from_uname_releases():
    from iosched import kernel_version
    assert kernel_version.from_release("6.3.8-custom") == "6.3.8"
    assert kernel_version.from_release("6.18.44") == "6.18.44"
    assert kernel_version.from_release("6.12.117+deb12-amd64") == "6.12.117"
    assert kernel_version.from_release("6.3-rc1") == "6.3"
    assert kernel_version.from_release("4.19.0-3-MANJARO") == "4.19"
    assert kernel_version.from_release("5.2") == "5.2"
    assert kernel_version.from_release("weird") is None
    assert kernel_version.from_release("6") is None
    # Debian's 6.1 ABI releases hide the stable release, which uname -v names; made-up mismatches keep -r's.
    debian = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-10-20)"
    assert kernel_version.from_uname("6.1.0-57-amd64", debian) == "6.1.192"
    assert kernel_version.from_uname("6.1.0-57-amd64", "#1 SMP PREEMPT_DYNAMIC") == "6.1"
    assert kernel_version.from_uname("6.12.117+deb12-amd64", "Debian 6.12.117-1~deb12u1") == "6.12.117"
    assert kernel_version.from_uname("6.12.117+deb12-amd64", debian) == "6.12.117"
    assert kernel_version.from_uname("6.18.44", "#1 SMP Debian 6.1.192-3") == "6.18.44"
    assert kernel_version.from_uname("weird", debian) is None
    with pytest.raises(SpecError, match="host.kernel"):
        kernel_version.check("6", file="x.toml", key="host.kernel")
    assert kernel_version.check("6.12.117", file="x.toml", key="host.kernel") == "6.12.117"
    with pytest.raises(SpecError, match="MAJOR.MINOR.PATCH"):
        kernel_version.check("6.12.117.1", file="x.toml", key="host.kernel")


def test_sim_config_shape(tmp_path):
    from iosched.backends.sim import run_id
    from iosched.simconfig import run_config
    runs = expand_runs(load_experiment(str(write(tmp_path, BASE))))
    cfg = run_config(runs[0])
    assert set(cfg) == {"seed", "host", "devices", "scheduler", "jobs", "sample_interval_ns", "ramp_end"}
    assert cfg["ramp_end"] == "first-completion"             # fio's, unless the spec says "nominal"
    assert set(cfg["scheduler"]) == {"name", "tunables", "nr_requests", "block_layer"}
    assert set(cfg["jobs"][0]) == {
        "name", "rw", "rwmixread", "bs_bytes", "iodepth", "iodepth_batch_submit", "numjobs", "ioengine", "start_ns", "ramp_ns",
        "runtime_ns", "time_based", "rate_iops", "thinktime_ns", "prioclass", "prio", "cgroup", "cgroup_weight",
        "cpus_allowed", "cpus_split", "offset_bytes", "size_bytes", "devices", "offset_increment_bytes", "buffered",
        "invalidate", "stonewall"}
    assert "name" in cfg["devices"][0] and "io_uring" in cfg["host"]
    assert len(run_id(runs[0])) == 16 and run_id(runs[0]) != run_id(runs[1])


def test_sweep_expansion(tmp_path):
    text = BASE.replace("repeat = 2", "repeat = 1").replace('name = "none"', 'name = "kyber"') + textwrap.dedent("""\
        [sweep]
        "job.bg.numjobs" = [1, 2, 4]
        "devices.count" = [1, 2]
        "scheduler.read_lat_nsec" = [1000, 2000]
        """)
    runs = expand_runs(load_experiment(str(write(tmp_path, text))))
    assert len(runs) == 12
    assert runs[0].sweep_point == {"job.bg.numjobs": 1, "devices.count": 1, "scheduler.read_lat_nsec": 1000}
    assert runs[-1].sweep_point == {"job.bg.numjobs": 4, "devices.count": 2, "scheduler.read_lat_nsec": 2000}
    assert runs[-1].jobs[1].config["numjobs"] == 4
    assert [d["name"] for d in runs[-1].devices] == ["/dev/nvme0n1", "/dev/nvme1n1"]
    assert runs[-1].tunables == {"read_lat_nsec": 2000}


def test_sweep_times_repeat(tmp_path):
    text = BASE + '[sweep]\nduration = ["1s", "500ms"]\n'
    runs = expand_runs(load_experiment(str(write(tmp_path, text))))
    assert [(r.sweep_point["duration"], r.repetition, r.seed) for r in runs] == \
        [("1s", 0, 7), ("1s", 1, 8), ("500ms", 0, 7), ("500ms", 1, 8)]
    assert runs[2].jobs[0].config["runtime_ns"] == 500_000_000


def test_cli_overrides(tmp_path):
    text = BASE.replace('name = "none"', 'name = "kyber"') + '[sweep]\n"devices.count" = [1, 2]\n'
    ov = Overrides(devices=3, duration="100ms", seed=42, sets=["nr_requests=64", "read_lat_nsec=5"])
    runs = expand_runs(load_experiment(str(write(tmp_path, text)), ov))
    assert len(runs) == 2  # the devices.count axis is dropped by --devices
    assert len(runs[0].devices) == 3 and runs[0].seed == 42 and runs[0].nr_requests == 64
    assert runs[0].tunables == {"read_lat_nsec": 5} and runs[0].jobs[0].config["runtime_ns"] == 100_000_000
    # A tunable the scheduler does not have is an error naming it, before anything runs.
    with pytest.raises(SpecError, match=r"scheduler.foo: unknown tunable \"foo\": expected one of read_lat_nsec"):
        expand_runs(load_experiment(str(write(tmp_path, text)), Overrides(sets=["foo=5"])))


def test_jobfile_in_spec(tmp_path):
    write(tmp_path, "[global]\nbs=8k\n[a]\nrw=randread\n[b]\nrw=write\nruntime=1\n", "jobs.fio")
    text = 'name = "x"\nduration = "2s"\njobfile = "jobs.fio"\n[[job]]\nname = "c"\n'
    runs = expand_runs(load_experiment(str(write(tmp_path, text))))
    a, b, c = (j.config for j in runs[0].jobs)
    assert a["bs_bytes"] == 8192 and a["time_based"] is False and a["runtime_ns"] == 2 * 10**9
    assert b["runtime_ns"] == 10**9 and c["time_based"] is True


def test_device_names():
    assert device_names(["nvme", "sata", "nvme", "sata"]) == ["/dev/nvme0n1", "/dev/sda", "/dev/nvme1n1", "/dev/sdb"]


# ------------------------------------------------------------------ CLI errors: one line, exit 2, OUT untouched

def run_cli(args):
    return CliRunner().invoke(main, args)


def assert_one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in res.output
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("mutate,needles", [
    (lambda t: t.replace('seed = 7', 'seed = 7\nsed = 1'), ["spec.toml: sed: unknown key"]),
    (lambda t: t.replace('count = 1 }', 'count = 1, colour = "red" }'), ["devices[0].colour: unknown key"]),
    (lambda t: t.replace('cores = 10', 'cores = 10, turbo = true'), ["host.turbo: unknown key"]),
    (lambda t: t.replace("iodepth = 32", "iodepth = 0"),
     ['spec.toml: job "bg": iodepth: expected an integer in 1..65536, got 0']),
    (lambda t: t.replace("iodepth = 32", "iodpth = 3"), ['job "bg": iodpth: unknown key']),
    (lambda t: t.replace('cpus_allowed = "0"', 'cpus_allowed = "12"'),
     ['spec.toml: job "lapp": cpus_allowed "12": host has 10 cores (0-9)']),
    (lambda t: t.replace('bs = "4k"', 'bs = "4q"'), ['job "lapp": bs: expected a size', '"4q"']),
    (lambda t: t.replace('duration = "2s"', 'duration = "2 fortnights"'), ["spec.toml: duration: expected a time"]),
    (lambda t: t.replace('cores = 10', 'cores = 12'), ["host.cores: expected at most 10"]),
    (lambda t: t.replace('cores = 10', 'kernel = "6.3-rc1"'),
     ['spec.toml: host.kernel: expected a kernel version "MAJOR.MINOR" or "MAJOR.MINOR.PATCH" such as "6.3" or '
      '"6.12.117", got "6.3-rc1"']),
    (lambda t: t.replace('cores = 10', 'kernel = 6.3'), ["host.kernel: expected a string"]),
    (lambda t: t.replace('preset = "samsung-980pro-1tb"', 'preset = "nope"'),
     ['devices[0].preset: unknown device preset "nope"']),
    (lambda t: t.replace('name = "none"', 'name = "bfq-mq"'), ['scheduler.name: unknown scheduler "bfq-mq"']),
    (lambda t: t.replace('name = "none"', 'name = "cfq"'),
     ["scheduler.name: cfq runs on the legacy block layer, which needs a SATA device: /dev/nvme0n1 is NVMe"]),
    (lambda t: t.replace('name = "none"', 'name = "none", block_layer = "legacy"'),
     ["scheduler.block_layer: none does not exist on the legacy block layer"]),
    (lambda t: t.replace('name = "none"', 'name = "none", read_lat_nsec = "x"'), ["scheduler.read_lat_nsec"]),
    (lambda t: t.replace("repeat = 2", "repeat = 0"), ["spec.toml: repeat: expected an integer >= 1, got 0"]),
    (lambda t: t.replace("repeat = 2", 'repeat = "2"'), ["spec.toml: repeat: expected an integer"]),
    (lambda t: t + '[sweep]\n"job.nobody.numjobs" = [1]\n', ['sweep."job.nobody.numjobs": no job named']),
    (lambda t: t + '[sweep]\n"host.turbo" = [1]\n', ['sweep."host.turbo": unknown sweep axis']),
    (lambda t: t + '[sweep]\n"job.bg.iodepth" = [4, 0]\n', ['iodepth: expected an integer in 1..65536, got 0',
                                                          'sweep point job.bg.iodepth=0']),
    (lambda t: t.replace("[[job]]\nname = \"bg\"", "[[job]]\nname = \"lapp\""), ["duplicate job name"]),
    (lambda t: t + "\nthis is not toml", ["spec.toml: invalid TOML"]),
    (lambda t: t.replace('iodepth = 1\n', 'iodepth = 1\ncgroup = "a"\ncgroup_weight = 500\n')
     .replace("iodepth = 32", 'iodepth = 32\ncgroup = "a"'),
     ['spec.toml: job "bg": cgroup_weight: cgroup "a" already has weight 500 (from job "lapp"); '
      'expected the same weight, got 100']),
    (lambda t: t.replace("iodepth = 32", "wait_for = \"lapp\""), ['job "bg": wait_for: fio option not supported']),
    (lambda t: t.replace("iodepth = 32", "direct = 0"), ['job "bg": direct=0: buffered I/O needs a host preset']),
])
def test_cli_spec_errors(tmp_path, mutate, needles):
    spec = write(tmp_path, mutate(BASE))
    out = tmp_path / "out"
    res = run_cli(["run", str(spec), "--out", str(out)])
    assert_one_line_error(res, *needles)
    assert not out.exists()


def test_a_job_file_written_for_other_devices_runs_on_the_runs_devices(tmp_path):
    """filename=/dev/loop0 and /dev/loop1 in a job file: with two devices each job runs on one of them, in order, and
    a note says where; fio.json keeps the job's own filename. (With one device the second name has none: the error
    in test_cli_jobfile_errors is the negative control.)"""
    jf = write(tmp_path, "[lapp]\nrw=randread\nfilename=/dev/loop0\nruntime=20ms\n"
                         "[bg]\nrw=randwrite\nfilename=/dev/loop1\nruntime=20ms\n", "jobs.fio")
    res = run_cli(["run", str(jf), "--devices", "2", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert f"note: {jf}: [lapp]: filename /dev/loop0 runs on /dev/nvme0n1" in res.output
    assert f"note: {jf}: [bg]: filename /dev/loop1 runs on /dev/nvme1n1" in res.output
    (doc,) = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*/fio.json")]
    assert [j["job options"]["filename"] for j in doc["jobs"]] == ["/dev/loop0", "/dev/loop1"]
    # Each name is noted once per run, not once per job that uses it.
    jf = write(tmp_path, "".join(f"[j{i}]\nrw=randread\nfilename=/dev/loop0:/dev/loop1\nruntime=20ms\n"
                                 for i in range(3)), "many.fio")
    res = run_cli(["run", str(jf), "--devices", "2", "--out", str(tmp_path / "out2")])
    assert res.exit_code == 0, res.output
    assert [line for line in res.output.splitlines() if " runs on " in line] == [
        f"note: {jf}: [j0]: filename /dev/loop{i} runs on /dev/nvme{i}n1 (a name the run's devices do not have: "
        "such names map to them in order)" for i in (0, 1)]


def test_device_names_the_run_does_not_have_skip_the_devices_jobs_name():
    """An unknown name takes the first device no job names itself; the same name always the same device."""
    devices = [DeviceInfo(f"/dev/nvme{i}n1", 1 << 30, 512) for i in range(3)]
    raws = [RawJob("a", {"filename": "/dev/loop0:/dev/nvme0n1"}, "f", "[a]", "fio"),
            RawJob("b", {"filename": "/dev/sdb"}, "f", "[b]", "fio"),
            RawJob("c", {"filename": "/dev/loop0"}, "f", "[c]", "fio")]
    assert device_aliases(raws, devices) == {"/dev/loop0": 1, "/dev/sdb": 2}
    assert device_aliases(raws[2:], devices) == {"/dev/loop0": 0}
    with pytest.raises(SpecError, match=r"^f: \[b\] filename=/dev/sdb: no such device /dev/sdb, and every device"):
        device_aliases(raws, devices[:2])


def test_cli_jobfile_errors(tmp_path):
    out = tmp_path / "out"
    jf = write(tmp_path, "[bg]\nrw=randwrite\nwait_for=x\nruntime=1\n", "jobs.fio")
    assert_one_line_error(run_cli(["run", str(jf), "--out", str(out)]),
                          f"error: {jf}: [bg] wait_for: fio option not supported by iosched")
    # Two device names the run does not have, one device: the second has none to map to.
    jf = write(tmp_path, "[lapp]\nrw=randread\nfilename=/dev/loop0\nruntime=1\n"
                         "[bg]\nrw=randwrite\nfilename=/dev/loop1\nruntime=1\n", "jobs.fio")
    assert_one_line_error(run_cli(["run", str(jf), "--out", str(out)]),
                          "[bg] filename=/dev/loop1: no such device /dev/loop1, and every device of the run "
                          "(/dev/nvme0n1) is taken")
    jf = write(tmp_path, "[lapp]\nrw=randread\n", "jobs.fio")
    assert_one_line_error(run_cli(["run", str(jf), "--out", str(out)]), "[lapp] runtime: required")
    jf = write(tmp_path, "[lapp]\nrw=randread\nruntime=1\n", "jobs.fio")
    assert_one_line_error(run_cli(["run", str(jf), "--out", str(out), "--set", "read_lat_nsec=abc"]),
                          "error: --set: read_lat_nsec=abc: expected an integer")
    assert_one_line_error(run_cli(["run", str(jf), "--out", str(out), "--duration", "soon"]),
                          "error: --duration: expected a time")
    assert_one_line_error(run_cli(["run", str(jf), "--out", str(out), "--host", "nope"]),
                          'host.preset: unknown host preset "nope"')
    assert_one_line_error(run_cli(["run", str(tmp_path / "missing.toml"), "--out", str(out)]), "no such file")
    assert not out.exists()


def test_load_errors_are_spec_errors(tmp_path):
    with pytest.raises(SpecError):
        load_experiment(str(write(tmp_path, 'name = "x"\n')))  # no jobs


def test_a_device_with_a_file_system_costs_its_path_and_one_the_host_does_not_price_is_refused(tmp_path, monkeypatch):
    """A file system's direct-I/O path is priced by the host preset (``filesystems``): a device naming one the
    preset lacks is an error naming both, never a free path; one it prices reaches the simulator's device config."""
    from iosched import presets

    from .conftest import DATA
    xfs = BASE.replace('count = 1 }', 'count = 1, filesystem = "xfs" }')
    (run,) = expand_runs(load_experiment(str(write(tmp_path, xfs.replace("repeat = 2", "repeat = 1")))))
    assert run.devices[0]["filesystem"] == "xfs"
    root = tmp_path / "presets"
    shutil.copytree(DATA / "presets", root)
    host = root / "hosts" / "xeon-silver-4210r-10c.toml"
    host.write_text(host.read_text().replace("[params.filesystems.xfs]\nread_ns = 800\nwrite_ns = 600\n", ""))
    monkeypatch.setenv("IOSCHED_PRESETS", str(root))
    presets._cache.clear()
    spec = write(tmp_path, xfs)
    with pytest.raises(SpecError) as e:
        expand_runs(load_experiment(str(spec)))
    assert str(e.value).startswith(f"{spec}: devices[0].filesystem: the host preset xeon-silver-4210r-10c prices no "
                                   f"xfs direct-I/O path ({host}: add [params.filesystems.xfs]")
    bad = write(tmp_path, BASE.replace('count = 1 }', 'count = 1, filesystem = "btrfs" }'))
    with pytest.raises(SpecError, match="devices.0.filesystem|devices\\[0\\].filesystem"):
        expand_runs(load_experiment(str(bad)))


def test_the_filesystem_flag_puts_every_device_of_a_simulated_run_on_that_file_system(tmp_path):
    """`iosched run SPEC --filesystem ext4` (the simulator): every devices entry gets `filesystem = "ext4"`, as the
    kernel backend's flag makes the file system on each device; without the flag the spec's raw device stays raw
    (the negative control), and a flag that contradicts the spec's own file system is an error, as on the kernel."""
    two = BASE.replace("repeat = 2", "repeat = 1").replace(
        'devices = [{ preset = "samsung-980pro-1tb", count = 1 }]',
        'devices = [{ preset = "samsung-980pro-1tb", count = 1 }, { preset = "samsung-980pro-1tb", filesystem = "ext4" }]')
    assert two != BASE.replace("repeat = 2", "repeat = 1")
    spec = str(write(tmp_path, two))
    (raw,) = expand_runs(load_experiment(spec))
    assert [d.get("filesystem") for d in raw.devices] == [None, "ext4"]
    (run,) = expand_runs(load_experiment(spec, Overrides(filesystem="ext4")))
    assert [d.get("filesystem") for d in run.devices] == ["ext4", "ext4"]
    with pytest.raises(SpecError, match=re.escape(f"--filesystem: xfs, but {spec}'s devices say ext4")):
        load_experiment(spec, Overrides(filesystem="xfs"))
    res = CliRunner().invoke(main, ["run", spec, "--filesystem", "ext4", "--duration", "5ms", "--no-report",
                                    "--out", str(tmp_path / "o"), "-j", "1"])
    assert res.exit_code == 0, res.output
    (recorded,) = [json.loads(p.read_text()) for p in (tmp_path / "o" / "runs").glob("*/spec.json")]
    assert [d.get("filesystem") for d in recorded["sim_config"]["devices"]] == ["ext4", "ext4"]


def test_a_rested_drive_needs_a_static_slc_region_to_start_empty(tmp_path):
    """`rested = true` reaches the simulator's device config on a preset with a static SLC region (the 980 PRO's
    6 GB); on one without (the P4500, no TurboWrite) it is an error naming the option and the preset file."""
    from .conftest import on_real_presets
    rested = BASE.replace("count = 1 }", "count = 1, rested = true }").replace("repeat = 2", "repeat = 1")
    with on_real_presets():
        (run,) = expand_runs(load_experiment(str(write(tmp_path, rested))))
        assert run.devices[0]["rested"] is True and run.devices[0]["slc_static_bytes"] == 6_000_000_000
        (run,) = expand_runs(load_experiment(str(write(tmp_path, BASE.replace("repeat = 2", "repeat = 1")))))
        assert not run.devices[0].get("rested")
        spec = write(tmp_path, rested.replace('"samsung-980pro-1tb"', '"intel-p4500-2tb"'))
        with pytest.raises(SpecError) as e:
            expand_runs(load_experiment(str(spec)))
    assert str(e.value).startswith(f"{spec}: devices[0].rested: the device preset intel-p4500-2tb has no static SLC "
                                   "region to start empty (")
    assert str(e.value).endswith("intel-p4500-2tb.toml: add slc_static_bytes)")


def test_a_host_preset_without_the_schedulers_costs_is_refused_naming_both(tmp_path, monkeypatch):
    """A simulated run prices the scheduler's hooks from the host preset: a missing entry is an error naming the
    preset and the scheduler, never a silent zero; `none` (no elevator, no hooks) needs none."""
    from iosched import presets

    from .conftest import DATA, native_or_skip
    native_or_skip()
    root = tmp_path / "presets"
    shutil.copytree(DATA / "presets", root)
    host = root / "hosts" / "xeon-silver-4210r-10c.toml"
    text = host.read_text()
    host.write_text(text.replace("[params.scheduler_costs.kyber]\ninsert_ns = 200\ndispatch_ns = 200\n"
                                 "complete_ns = 50\n", "").replace('"scheduler_costs.kyber" = "fixture"\n', ""))
    assert host.read_text() != text
    monkeypatch.setenv("IOSCHED_PRESETS", str(root))
    presets._cache.clear()
    for ok in ("none", "mq-deadline"):  # positive controls: no elevator; an entry
        expand_runs(load_experiment(str(write(tmp_path, BASE.replace('"none"', f'"{ok}"')))))
    spec = write(tmp_path, BASE.replace('"none"', '"kyber"'))
    with pytest.raises(SpecError) as e:
        expand_runs(load_experiment(str(spec)))
    assert str(e.value).startswith(f"{spec}: scheduler.name: the host preset xeon-silver-4210r-10c has no "
                                   f"scheduler_costs entry for kyber ({host}): add [params.scheduler_costs.kyber]")



def test_the_kernel_versions_table_in_the_docs_lists_every_modelled_change():
    """docs/simulator.md's table and the simulator's kernel::CHANGES, row by row (since, commit, backports); a
    table with a row missing or a version changed must fail the comparison."""
    from iosched import native
    from .conftest import REPO, native_or_skip

    native_or_skip()

    def table_rows(text: str) -> list[tuple[str, str, str]]:
        section = text.split("## Kernel versions", 1)[1].split("\n## ", 1)[0]
        rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
        return [(r[0].strip(), r[1].strip().strip("`"), r[4].strip()) for r in rows[1:]]

    def changes_rows() -> list[tuple[str, str, str]]:
        return [(c["since"], c["commit"] or "(not pinned)", ", ".join(c["backports"]) or "–")
                for c in native.kernel_changes()]

    doc = (REPO / "docs" / "simulator.md").read_text()
    assert table_rows(doc) == changes_rows()
    assert ("6.17", "42e6c6ce03fd", "6.12.117") in changes_rows(), "the backport the VM lab's kernel carries"
    # Negative controls: a table without its last row, or with a version moved, no longer matches.
    last = doc.split("## Kernel versions", 1)[1].split("\n## ", 1)[0].rstrip().splitlines()[-1]
    assert table_rows(doc.replace(last + "\n", "", 1)) != changes_rows()
    assert table_rows(doc.replace("| 5.13 |", "| 5.12 |", 1)) != changes_rows()


SEED003_FS = Path(__file__).resolve().parents[3] / "experiments" / "validation" / "seed003-fs"


def test_the_seed003_fs_validation_specs_run_one_workload_under_kyber_and_none_on_each_target():
    """experiments/validation/seed003-fs/: R1-W256 under Kyber's four corner targets and under none (docs/papers.md,
    the kernel-backend validation of seed003-fs), on the raw device and, with --filesystem, on ext4 and xfs. Both
    specs resolve and describe one workload: a changed job in one of them would compare different workloads."""
    runs = {p.stem: p for p in sorted(SEED003_FS.glob("*.toml"))}
    assert sorted(runs) == ["kyber", "none"]
    corners = [{"read_lat_nsec": r, "write_lat_nsec": w} for r in (50_000, 100_000_000) for w in (20_000, 100_000_000)]
    jobs = {}
    for fs in (None, "ext4", "xfs"):
        for scheduler, path in runs.items():
            rs = expand_runs(load_experiment(str(path), Overrides(filesystem=fs)))
            assert [r.scheduler for r in rs] == [scheduler] * len(rs)
            assert [r.tunables for r in rs] == (corners if scheduler == "kyber" else [{}])
            assert [r.devices[0].get("filesystem") for r in rs] == [fs] * len(rs)
            jobs[scheduler, fs] = [j.config for j in rs[0].jobs]
    reader, writer = jobs["none", None]
    assert (reader["iodepth"], writer["iodepth"]) == (1, 256)
    assert all(j == jobs["none", None] for j in jobs.values())


VALIDATION = Path(__file__).resolve().parents[3] / "experiments" / "validation"


def test_the_lab_file_system_specs_resolve_for_the_simulator_on_the_labs_host_and_device():
    """fs-dio-cost (2 directions x 5 repetitions), fs-lab (3 repetitions) and fs-lab-kyber (4 corners x 2): each
    resolves on the lab's host preset and null_blk with every file system, which that host now prices (a host without
    an f2fs path is refused: the negative control)."""
    device = "nullb:memory_backed=1,size=1G,irqmode=2,completion_nsec=500000,hw_queue_depth=128"
    counts = {"fs-dio-cost": 10, "fs-lab": 3, "fs-lab-kyber": 8}
    for name, n in counts.items():
        for fs in (None, "ext4", "xfs", "f2fs"):
            rs = expand_runs(load_experiment(str(VALIDATION / f"{name}.toml"),
                                             Overrides(host="lab-tcg-2vcpu", device=device, filesystem=fs)))
            assert len(rs) == n and all(r.devices[0].get("filesystem") == fs for r in rs), (name, fs)
    with pytest.raises(SpecError, match="prices no f2fs direct-I/O path"):
        expand_runs(load_experiment(str(VALIDATION / "fs-lab.toml"),
                                    Overrides(host="i5-4590-4c", device=device, filesystem="f2fs")))
