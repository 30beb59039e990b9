"""Hardening (issue 16): nothing written outside --out, Ctrl-C and SIGTERM that stop within a second, limits checked
before any expansion, and one clear line for every input the issue lists (each a regression test)."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from iosched import limits, safepath, store
from iosched.cli import main
from iosched.errors import SpecError

from .conftest import DATA, REPO, child_processes, native_or_skip, process_alive

JOB = '[[job]]\nname = "a"\nrw = "randread"\n'


def write(folder: Path, text: str | bytes, name: str = "spec.toml") -> Path:
    p = folder / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def one_line_error(res, *needles: str) -> str:
    """The property every bad input keeps: exit 2, one line, starting with error:, no traceback."""
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def run_cli(args, **env):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        return CliRunner().invoke(main, [str(a) for a in args])


# ---------------------------------------------------------------- paths: safepath.inside, the one gate

@pytest.mark.parametrize("rel,why", [
    ("../escaped", "no empty, . or .. parts"),
    ("figures/../../escaped", "no empty, . or .. parts"),
    ("/etc/passwd", "an absolute path"),
    ("a\0b", "NUL"),
    ("x" * 256, "longer than 255 bytes"),
    ("a//b", "no empty"),
    ("./a", "no empty, . or .. parts"),
    ("/".join(["d" * 200] * 25), "longer than 4096 bytes"),
])
def test_inside_refuses_paths_that_leave_the_folder(tmp_path, rel, why):
    with pytest.raises(safepath.OutsideOut, match=re.escape(why)):
        safepath.inside(tmp_path, rel)


def test_inside_refuses_symbolic_links_out_of_the_folder(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "figures").symlink_to(elsewhere)
    (out / "report.html").symlink_to(elsewhere / "report.html")
    (out / "inner").symlink_to(out / "runs")       # a link that stays inside is fine
    for rel in ("figures/x.png", "report.html"):
        with pytest.raises(safepath.OutsideOut, match="outside"):
            safepath.inside(out, rel)
    assert safepath.inside(out, "inner/x") == out / "inner" / "x"
    assert safepath.inside(out, "figures-x/seed000-fig01.png") == out / "figures-x" / "seed000-fig01.png"
    with pytest.raises(safepath.OutsideOut):
        store.write_file(out, "figures/x.png", b"x")
    assert list(elsewhere.iterdir()) == []


def test_file_names_are_made_safe_and_stay_apart():
    assert safepath.file_name("seed000-fig01", ".png") == "seed000-fig01.png"      # safe: unchanged
    names = [safepath.file_name(n, ".pdf") for n in ("../../../escaped", "/etc/passwd", "a b", "a_b", ".hidden",
                                                    "x" * 400, "é")]
    assert all("/" not in n and not n.startswith(".") and len(n.encode()) <= 255 for n in names)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("name,why", [
    ("../../../escaped", "without / or \\"), ("/abs/name", "without / or \\"), ("..", "other than . and .."),
    ("a\nb", "control character U+000A"), ("a\0b", "NUL"), ("x" * 201, "at most 200 bytes"), ("", "non-empty"),
])
def test_experiment_names_that_would_be_paths_are_refused(tmp_path, name, why):
    from iosched.spec import experiment_from_data

    with pytest.raises(SpecError, match=re.escape(why)):
        experiment_from_data(str(tmp_path / "s.toml"), {"name": name, "job": [{"name": "a"}]})


def test_the_issues_path_escape_writes_nothing_outside_out(tmp_path):
    """Issue 16: name = "../../../escaped" wrote the report's figures three levels above --out."""
    native_or_skip()
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    spec = write(tmp_path, 'name = "escaped"\nduration = "5ms"\n' + JOB)
    text = spec.read_text().replace('name = "escaped"', 'name = "../../../escaped"')
    spec.write_text(text)
    res = run_cli(["run", spec, "--out", deep / "out"])
    one_line_error(res, 'name: expected an experiment name without / or \\ (it names files in the output folder)')
    # A file whose name is not safe as is (the name comes from it): the figures get a safe name inside OUT.
    odd = write(tmp_path, 'duration = "5ms"\n' + JOB, "my spec (v2).toml")
    res = run_cli(["run", odd, "--out", deep / "out", "--static"])
    assert res.exit_code == 0, res.output
    outside = [p for p in tmp_path.rglob("*") if "latency-cdf" in p.name and deep / "out" not in p.parents]
    assert outside == []
    assert sorted(p.name for p in (deep / "out" / "figures").iterdir())[0].startswith("my_spec__v2_-")


def test_a_link_out_of_out_is_refused_not_followed(tmp_path):
    native_or_skip()
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "figures").symlink_to(elsewhere)
    res = run_cli(["run", write(tmp_path, 'name = "x"\nduration = "5ms"\n' + JOB), "--out", out, "--static"])
    assert res.exit_code == 2 and "outside" in res.output.splitlines()[-1], res.output
    assert list(elsewhere.iterdir()) == []


WRITERS = re.compile(r"\.write_(bytes|text)\(|\.mkdir\(|open\([^)]*['\"][wax]b?['\"]|savefig\(|\.to_parquet\(|"
                     r"write_table\(|os\.(rename|replace|symlink)\(|shutil\.(copy|copytree|move)\(")
# Writes that do not go to a folder a user named: the kernel backend's state under /run/iosched, sysfs and
# cgroup files, loop devices' backing files, fio's log (in the run's folder, made by store), a matplotlib buffer,
# and store.py itself (the one gate).
ALLOWED_WRITERS = {
    "store.py": "the gate itself",
    "backends/kernel/state.py": "the recovery records in the state dir (/run/iosched)",
    "backends/kernel/loop.py": "loop devices' records in the state dir",
    "backends/kernel/fs.py": "a mount point in the state dir",
    "backends/kernel/cgroups.py": "cgroups: folders under the cgroup mount, made from safepath.inside",
    "backends/kernel/bench.py": "the overhead benchmark's own temporary folder and sysfs",
    "backends/kernel/runner.py": "fio.log, opened in the run's folder (store.new_run_dir)",
    "report/figures.py": "savefig into a memory buffer; the bytes go through store.write_file",
    "reproduce.py": "--out itself",
    "bench.py": "the spec of the CLI's timed run, in its own temporary folder (tempfile.TemporaryDirectory)",
    "devcal/presetfiles.py": "a temporary presets tree (tempfile.mkdtemp) for the presets a command is given",
    "report/build.py": "checks.parquet into a memory buffer; the bytes go through store.write_file",
    "backends/vm/collect.py": "a run's files from the guest, each path from safepath.inside(the run's folder)",
    "backends/vm/lab.py": "the lab's cache folder (~/.cache/iosched/lab or IOSCHED_LAB_DIR)",
    "backends/vm/packages.py": "Debian packages unpacked in the lab's cache folder",
    "backends/vm/kmod.py": "the modules' headers and builds in the lab's cache folder",
    "backends/vm/qemu.py": "qemu's log and the accelerator probe's record in the lab's cache folder",
    "backends/vm/runner.py": "a batch's scratch folder and disk images in the lab's cache folder",
    "cli_vm.py": "iosched vm check and shell: scratch folders and images in the lab's cache folder",
}


def _writers(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("tests/"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if WRITERS.search(code) and "store." not in code:
                found.setdefault(rel, []).append(f"{i}: {line.strip()}")
    return found


def test_every_writer_goes_through_store(tmp_path):
    found = _writers(REPO / "python" / "iosched")
    unknown = {k: v for k, v in found.items() if k not in ALLOWED_WRITERS}
    assert unknown == {}, "write through iosched.store (or list the file, with why, in ALLOWED_WRITERS)"
    # Negative control: a module that writes a figure by itself is found.
    pkg = tmp_path / "pkg"
    (pkg / "report").mkdir(parents=True)
    (pkg / "report" / "rogue.py").write_text('def f(out, name):\n    (out / f"{name}.png").write_bytes(b"x")\n')
    assert list(_writers(pkg)) == ["report/rogue.py"]


# ---------------------------------------------------------------- Ctrl-C and SIGTERM: 130 within a second

LONG = 'name = "long"\nduration = "600s"\n[[job]]\nname = "a"\nrw = "randread"\niodepth = 32\n'
SWEEP = ('name = "sweep"\nduration = "{d}"\n[[job]]\nname = "a"\nrw = "randread"\niodepth = 32\n'
         '[sweep]\n"job.a.iodepth" = [1, 2, 4, 8, 16, 32]\n')


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interrupt(cmd: list[str], sig: int, ready) -> tuple[subprocess.CompletedProcess, float]:
    """Start iosched, wait until ``ready(proc, stderr_lines)``, send ``sig``; (result, seconds from the signal to
    the exit)."""
    env = dict(os.environ, IOSCHED_PRESETS=str(DATA / "presets"))
    proc = subprocess.Popen([sys.executable, "-m", "iosched.cli", *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not ready(proc, lines):
        assert proc.poll() is None, (proc.returncode, lines, proc.stdout.read())
        assert time.monotonic() < deadline, "never got going"
        time.sleep(0.05)
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    exit_s = time.monotonic() - t0
    reader.join(timeout=10)
    out = proc.stdout.read()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(lines)), exit_s


def _simulating(proc, lines) -> bool:
    return _cpu_s(proc.pid) > 2.5          # imports done, in the simulator


def _after_first_run(proc, lines) -> bool:
    return any(ln.startswith("[1/") for ln in lines)


def _check_interrupted(res, exit_s: float, out: Path) -> None:
    assert res.returncode == 130, res.stderr[-3000:]
    assert exit_s < 1.0, f"exited {exit_s:.2f} s after the signal"
    after = res.stderr.splitlines()
    assert [ln for ln in after if ln.startswith("interrupted")] == ["interrupted"], res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "SystemError" not in res.stderr
    if (out / "runs").is_dir():
        assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")], "temporary folders left"
    if out.is_dir():
        assert not list(out.glob(".*")), "temporary files left"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_single_run_in_this_process_stops_at_once(tmp_path, sig):
    """Issue 16: Ctrl-C in an in-process simulation exited 1 with thousands of lines of SystemError after 13-20 s."""
    native_or_skip()
    out = tmp_path / "out"
    res, exit_s = _interrupt(["run", str(write(tmp_path, LONG)), "--out", str(out)], sig, _simulating)
    _check_interrupted(res, exit_s, out)
    assert store.finished_runs(out) == []


@pytest.mark.parametrize("sig,jobs", [(signal.SIGINT, "1"), (signal.SIGTERM, "1"), (signal.SIGINT, "2"),
                                      (signal.SIGTERM, "2")])
def test_a_sweep_stops_at_once_and_keeps_finished_runs(tmp_path, sig, jobs):
    native_or_skip()
    out = tmp_path / "out"
    spec = write(tmp_path, SWEEP.format(d="4s"))
    res, exit_s = _interrupt(["run", str(spec), "--out", str(out), "--jobs", jobs, "--no-report"], sig,
                             _after_first_run)
    _check_interrupted(res, exit_s, out)
    done = store.finished_runs(out)
    assert 1 <= len(done) < 6
    import pyarrow.parquet as pq

    assert {r["run_id"] for r in pq.read_table(out / "results.parquet").to_pylist()} == set(done)


def test_a_killed_sweep_leaves_no_worker(tmp_path):
    """SIGKILL to `iosched run --jobs 2` (no clean-up code of ours runs): the kernel ends its two simulation workers
    with it (each sets PR_SET_PDEATHSIG at start, interrupt.die_with_parent). Before, a worker the main process had
    not killed lived on: seen once in this suite, blocked writing its result into a pipe nobody read and holding the
    command's stderr open, so the test that had interrupted it waited forever. Negative control, run by hand: with
    the prctl call removed both workers outlive the command and this fails."""
    native_or_skip()
    spec = write(tmp_path, SWEEP.format(d="4s"))
    env = dict(os.environ, IOSCHED_PRESETS=str(DATA / "presets"))
    proc = subprocess.Popen([sys.executable, "-m", "iosched.cli", "run", str(spec), "--out", str(tmp_path / "out"),
                             "--jobs", "2", "--no-report"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = [pid for pid, _, cmd in child_processes(proc.pid) if "spawn_main" in cmd]
            time.sleep(0.1)
        assert len(workers) == 2, "the sweep never started its two workers"
        time.sleep(1.0)                         # past their start-up: they simulate now
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while any(process_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [w for w in workers if process_alive(w)], "workers outlived the killed command"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:
            if process_alive(w):
                os.kill(w, signal.SIGKILL)


def test_a_progress_line_and_its_newline_are_one_write(monkeypatch):
    """CI once printed "[2/6] ...: 0.1 s, ETA 1sinterrupted": print() wrote the line and its newline in two calls and
    the signal landed between them. Python runs a signal handler between calls, never inside one write."""
    from iosched import sweep

    writes: list[str] = []

    class Stderr:
        def write(self, s: str) -> int:
            writes.append(s)
            return len(s)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stderr", Stderr())
    sweep._echo_line("[2/6] sweep 0b1570c33be50534: 0.1 s, ETA 1s")
    assert writes == ["[2/6] sweep 0b1570c33be50534: 0.1 s, ETA 1s\n"]


def test_a_progress_callback_that_raises_stops_the_simulation():
    """The glue's bug: an exception raised by the progress callback was restored and the simulation went on."""
    native_or_skip()
    from iosched import native
    from iosched.simconfig import Job, testbed_config

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
        from iosched import presets
        presets._cache.clear()
        cfg = testbed_config("xeon-silver-4210r-10c", "samsung-980pro-1tb", [Job("a", "randread", 32, [])],
                             60.0, 0.0, file="x")
        presets._cache.clear()
    calls = []

    class Stop(Exception):
        pass

    def progress(fraction):
        calls.append(fraction)
        raise Stop("enough")

    t0 = time.monotonic()
    with pytest.raises(Stop, match="enough"):
        native.simulate(cfg, progress)
    assert len(calls) == 1 and time.monotonic() - t0 < 5


def test_the_watchdog_ends_a_process_stuck_after_the_signal(tmp_path):
    """A command stuck where Python cannot unwind (here: a sleep in a C call, signals handled but ignored) still
    exits 130 within the budget, with the one line, and its registered temporaries removed."""
    tmp = tmp_path / "tmp-folder"
    code = f"""
import time, pathlib
from iosched import interrupt
p = pathlib.Path({str(tmp)!r}); p.mkdir()
interrupt.track(p)
with interrupt.signals():
    ready = False
    while True:
        try:                  # "ready" inside the try: the signal may arrive as print returns
            if not ready:
                ready = True
                print("ready", flush=True)
            time.sleep(10)
        except KeyboardInterrupt:
            pass          # swallowed: only the watchdog can end this
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and err.strip() == "interrupted", err
    assert time.monotonic() - t0 < 1.0 and not tmp.exists()


# ---------------------------------------------------------------- limits: before any expansion, with the option

ISSUE_INPUTS = [
    # (spec text, expected in the one error line) -- issue 16's list, at the default limits
    ('duration = "20ms"\n[[job]]\nname = "a"\niodepth = 1000000000000\n',
     'job "a": iodepth: expected an integer in 1..65536, got 1000000000000'),
    ('duration = "20ms"\n[[job]]\nname = "a"\nrate_iops = 100000000000000000000\n',
     'job "a": rate_iops: expected an integer in 0..18446744073709551615, got 100000000000000000000'),
    ('duration = inf\n' + JOB, "duration: expected a time like 2s, 200ms or a number of seconds (a finite one), "
                               "got inf"),
    ('duration = "20ms"\n' + JOB + 'thinktime = nan\n', 'job "a": thinktime: expected a time'),
    ('duration = 1e300\n' + JOB, "duration: expected a time"),
    ('duration = "20ms"\n' + JOB + 'cpus_allowed = "0-99999999"\n',
     'job "a": cpus_allowed "0-99999999": host has 10 cores (0-9)'),
    ('duration = "20ms"\nsample_interval = "1ns"\n' + JOB, "sample_interval: a sample every \"1ns\""),
    ('duration = "20ms"\n' + JOB + 'startdelay = "100000000h"\n', 'job "a": startdelay: "100000000h": more than the '
                                                                  'limit of 24 h of simulated time per run'),
    ('duration = "5000000000s"\n' + JOB, 'duration: "5000000000s": more than the limit of 24 h'),
    ('duration = "20ms"\n' + JOB + 'runtime = "5000000000s"\n', 'job "a": runtime: "5000000000s"'),
    ('duration = "20ms"\nrepeat = 100000\n' + JOB, "repeat: 100,000 runs (repeat 100000): more than the limit"),
    ('duration = "20ms"\n' + JOB + '[sweep]\n"job.a.iodepth" = [' + ", ".join(["1"] * 200) + ']\n'
     '"job.a.thinktime" = [' + ", ".join(["1"] * 200) + ']\n"job.a.bs" = [' + ", ".join(["4096"] * 200) + ']\n',
     "sweep: 8,000,000 runs (200 x 200 x 200): more than the limit of 10,000 runs"),
    ('duration = "20ms"\n' + "".join(f'[[job]]\nname = "j{i}"\nnumjobs = 4096\n' for i in range(1000)),
     "numjobs: 1000 job(s) with 4,096,000 processes in all: more than the limit of 4,096 processes"),
    ('a = ' + "[" * 2000 + "]" * 2000 + "\n", "nested too deeply"),
    ('a = ' + "9" * 5000 + "\n", "invalid TOML: an integer of more than 4300 digits"),
    ('duration = "20ms"\n[[job]]\nname = "a"\niodepth = 100000000000000000000\n',
     'iodepth: expected an integer in 1..65536, got 100000000000000000000'),
    ('duration = "20ms"\nscheduler = { name = "kyber", read_lat_nsec = -5 }\n' + JOB,
     "scheduler.read_lat_nsec: tunable read_lat_nsec=-5: expected a latency target in nanoseconds, >= 0 (kyber)"),
    ('duration = "20ms"\nscheduler = { name = "none", x = 99999999999999999999 }\n' + JOB,
     "scheduler.x: expected an integer in -9223372036854775808..9223372036854775807"),
    ('duration = "20ms"\n[[job]]\nname = "a\\nb"\n', "job[0].name: expected a job name of printable characters, "
                                                      'got "a\\nb" (the control character U+000A)'),
    ('duration = "20ms"\nhost = { preset = "' + "y" * 300 + '" }\n' + JOB, "host.preset: expected a host preset"),
    ('duration = "20ms"\nseed = 18446744073709551615\nrepeat = 2\n' + JOB,
     "seed: expected seed + repeat - 1 below 2^64"),
]


@pytest.mark.parametrize("text,needle", ISSUE_INPUTS, ids=range(len(ISSUE_INPUTS)))
def test_the_issues_inputs_get_one_clear_line_at_once(tmp_path, text, needle):
    native_or_skip()
    t0 = time.monotonic()
    res = run_cli(["run", write(tmp_path, text), "--out", tmp_path / "out"],
                  IOSCHED_MAX_SPEC_BYTES="64M")        # the 1000-job spec is over the default 1 MiB
    line = one_line_error(res, needle)
    assert "simulator rejected" not in line and "floating point" not in line
    assert time.monotonic() - t0 < 10, "checked before any work"
    assert not (tmp_path / "out").exists()


def test_cpus_allowed_is_checked_before_it_is_expanded(tmp_path):
    """Issue 16: "0-99999999" was expanded first (4 GiB in 11 s)."""
    native_or_skip()
    spec = write(tmp_path, 'duration = "20ms"\n' + JOB + 'cpus_allowed = "0-9999999999"\n')
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    one_line_error(run_cli(["run", spec, "--out", tmp_path / "o"]), "host has 10 cores")
    assert time.monotonic() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000      # KiB


def test_non_utf8_specs_and_job_files(tmp_path):
    one_line_error(run_cli(["run", write(tmp_path, b'duration = "1s"\nname = "\xff"\n'), "--out", tmp_path / "o"]),
                   "spec.toml: line 2: not UTF-8 text")
    one_line_error(run_cli(["run", write(tmp_path, b"[a]\nrw=read\n\xfe\n", "j.fio"), "--out", tmp_path / "o"]),
                   "j.fio: line 3: not UTF-8 text")


def test_an_upper_case_toml_suffix_is_a_toml_spec(tmp_path):
    native_or_skip()
    res = run_cli(["run", write(tmp_path, 'name = "up"\nduration = "5ms"\n' + JOB, "spec.TOML"), "--out",
                   tmp_path / "o", "--no-report"])
    assert res.exit_code == 0, res.output
    assert "up" in store.read_manifest(tmp_path / "o")["experiments"]


def test_an_unreachable_cluster_is_a_clear_error_at_once(tmp_path):
    pytest.importorskip("distributed")
    native_or_skip()
    spec = write(tmp_path, 'duration = "5ms"\n' + JOB)
    t0 = time.monotonic()
    one_line_error(run_cli(["run", spec, "--out", tmp_path / "o", "--cluster", "tcp://127.0.0.1:1"]),
                   "--cluster: tcp://127.0.0.1:1: cannot reach a Dask scheduler there")
    assert time.monotonic() - t0 < 10
    one_line_error(run_cli(["run", spec, "--out", tmp_path / "o", "--cluster", "tcp://nowhere"]),
                   "expected tcp://HOST:PORT")


def test_command_line_mistakes_are_one_line_too():
    one_line_error(CliRunner().invoke(main, ["run", "x.toml", "--out", "o", "--jobs", "0"]),
                   "--jobs", "run --help`)")
    one_line_error(CliRunner().invoke(main, ["nosuch"]), "No such command 'nosuch'")


def test_limits_can_be_raised_and_say_how(tmp_path):
    native_or_skip()
    spec = write(tmp_path, 'duration = "20ms"\nrepeat = 3\n' + JOB)
    one_line_error(run_cli(["run", spec, "--out", tmp_path / "o"], IOSCHED_MAX_RUNS="2"),
                   "repeat: 3 runs (repeat 3): more than the limit of 2 runs per command", "IOSCHED_MAX_RUNS raises it")
    res = run_cli(["run", spec, "--out", tmp_path / "o", "--no-report"], IOSCHED_MAX_RUNS="3")
    assert res.exit_code == 0, res.output
    one_line_error(run_cli(["run", spec, "--out", tmp_path / "o"], IOSCHED_MAX_RUNS="many"),
                   "IOSCHED_MAX_RUNS: expected a whole number, got 'many'")
    one_line_error(run_cli(["run", spec, "--out", tmp_path / "o"], IOSCHED_MAX_SIM_TIME="1ms"),
                   "duration: \"20ms\": more than the limit of 1 ms")


def test_every_limit_is_documented():
    doc = (REPO / "docs" / "spec.md").read_text()
    section = doc[doc.index("## Limits"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    for lim in limits.LIMITS.values():
        row = next((ln for ln in section.splitlines() if f"`{lim.env}`" in ln), None)
        assert row is not None, f"{lim.env} is not in docs/spec.md's Limits"
        assert lim.show(lim.default) in row, (lim.env, lim.show(lim.default), row)
    # Negative control: a made-up limit is not there.
    assert "`IOSCHED_MAX_MADE_UP`" not in section


def test_time_series_estimate_bounds_every_scheduler(tmp_path):
    """The samples limit counts a run's time-series values before it runs: the estimate must never be below what
    a scheduler really records (two cgroups here: kyber-fairness adds metrics per cgroup)."""
    native_or_skip()
    from iosched import native
    from iosched.spec import expand_runs, load_experiment, timeseries_values
    from iosched.simconfig import run_config

    for name in native.schedulers():
        layer = native.block_layers(name)[0]
        if layer != "blk-mq":
            continue          # the fixture presets have an NVMe device only; the legacy ones count alike
        text = (f'duration = "30ms"\nsample_interval = "5ms"\nscheduler = {{ name = "{name}" }}\n'
                '[[job]]\nname = "a"\nrw = "randread"\ncgroup = "g1"\n[[job]]\nname = "b"\nrw = "randwrite"\n'
                'cgroup = "g2"\n')
        (run,) = expand_runs(load_experiment(str(write(tmp_path, text))))
        estimate = timeseries_values([j.config for j in run.jobs], len(run.devices), name, run.sample_interval_ns)
        actual = len(native.simulate(run_config(run))["timeseries"])
        assert actual <= estimate, (name, actual, estimate)
    # Negative control: with the scheduler's metrics left out the estimate is too low for kyber.
    assert native.scheduler_metrics("kyber") > 0


def test_a_panic_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    from iosched import native

    def boom(*a, **k):
        raise native.SimulatorPanic("index out of bounds")

    monkeypatch.setattr(native, "simulate_json", boom)
    native_or_skip()
    res = CliRunner().invoke(main, ["run", str(write(tmp_path, 'duration = "5ms"\n' + JOB)), "--out",
                                    str(tmp_path / "o")])
    assert res.exit_code == 1 and res.output.strip().splitlines()[-1] == (
        "error: internal error: the simulator panicked (index out of bounds); please report it with the spec")


def test_calibrates_host_name_cannot_leave_the_presets_folder(tmp_path):
    """`iosched calibrate --host NAME` writes presets/hosts/NAME.toml: NAME is a preset name, refused before
    anything is measured when it would be a path."""
    native_or_skip()
    out = tmp_path / "presets" / "devices" / "x.toml"
    for name in ("../../../escaped", "/tmp/escaped", ".hidden", "a\nb"):
        one_line_error(CliRunner().invoke(main, ["calibrate", "/dev/null", "--out", str(out), "--host", name]),
                       "--host: expected a host preset name")
    assert list(tmp_path.rglob("*")) == []
