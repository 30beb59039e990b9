"""The fuzzer: inputs made by mutating the shipped examples (experiments/*.toml and *.fio, traces/), run through
`iosched run` exactly as the command line runs it, and the property every input must keep.

The property: exit 0, or exit 2 with exactly one ``error:`` line (``note:`` lines aside) and nothing else on
stderr; no traceback, no panic; within `CASE_TIMEOUT_S` and `MEMORY_BOUND_BYTES`; nothing written outside the
case's --out (a Python audit hook sees every file the command opens for writing, makes, renames or removes; the
case's folder is scanned too).

Each case runs in a child forked from a fork server (a fresh ``python -m iosched.tests.fuzzing serve`` that
imported iosched and its libraries once, and started no thread): a case costs a fork, not an interpreter start, and
a crash, a hang or a memory blow-up stays in its child (its peak RSS comes from wait4). The cases run under small
limits of the product's own (`FUZZ_LIMITS`, the IOSCHED_MAX_* variables), so a run simulates milliseconds.

Inputs come from a `Chooser`: hypothesis's data (python/iosched/tests/test_fuzz.py, which shrinks a failure to a
minimal reproducer) or a seeded random.Random (scripts/fuzz, the long campaign).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = REPO / "experiments"
TRACES = REPO / "traces"

# The product's own limits (iosched.limits), small: every run simulates at most milliseconds.
FUZZ_LIMITS = {
    "IOSCHED_MAX_SIM_TIME": "30ms",
    "IOSCHED_MAX_RUNS": "4",
    "IOSCHED_MAX_PROCESSES": "48",
    "IOSCHED_MAX_INFLIGHT": "4096",
    "IOSCHED_MAX_SAMPLES": "20000",
    "IOSCHED_MAX_TRACE_BYTES": "2M",
    "IOSCHED_MAX_SPEC_BYTES": "256K",
    "IOSCHED_MAX_BUFFERED_BYTES": "1G",
}
CASE_TIMEOUT_S = 60.0               # a case that takes longer is a hang
MEMORY_BOUND_BYTES = 2 << 30        # iosched.limits.MEMORY_BOUND_BYTES: what a run may take, within the limits


# ---------------------------------------------------------------- choices

class Chooser(Protocol):
    def choice(self, seq: Sequence[Any]) -> Any: ...
    def integer(self, lo: int, hi: int) -> int: ...
    def chance(self, p: float) -> bool: ...


class RandomChooser:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def integer(self, lo, hi):
        return self.r.randint(lo, hi)

    def chance(self, p):
        return self.r.random() < p


class HypothesisChooser:
    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def choice(self, seq):
        return seq[self.data.draw(self.st.integers(0, len(seq) - 1))]

    def integer(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi))

    def chance(self, p):
        # An integer draw shrinks towards "no": a minimal reproducer keeps only the mutations it needs.
        return self.data.draw(self.st.integers(0, 999)) >= 1000 - int(p * 1000)


# ---------------------------------------------------------------- values

BIG_INTS = [0, 1, -1, 2, 7, 255, 256, 4095, 4096, 65535, 65536, 65537, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
            2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**12, 10**20, -(2**63), 10**30]
FLOATS = [0.0, -0.0, 0.5, 1e-9, 1e-300, 1e300, 1.5, -1.5, math.inf, -math.inf, math.nan, 1e20]
STRINGS = ["", " ", "0", "1", "-1", "4k", "1M", "1g", "1t", "99999999999p", "50%", "0%", "101%", "1ns", "1us",
           "5ms", "1s", "5000000000s", "inf", "nan", "1e5", "0x10", "0-3", "0-99999999", "99999999-0", "3,1,2",
           "randread", "randwrite", "rw", "trim", "io_uring", "libaio", "psync", "sync", "split", "shared",
           "../../../escaped", "/tmp/iosched-fuzz-escaped", "a/b", ".", "..", "\x00", "a\x00b", "line\nbreak",
           "é", "\u202e", "\ufeff", "[x]", "global", "x" * 300, "y" * 5000, "none", "kyber", "bfq", "mq-deadline",
           "k2", "cfq", "legacy", "blk-mq", "fresh", "preconditioned", "/dev/nvme0n1", "/dev/nvme1n1", "/dev/sda",
           "/dev/nvme0n1:/dev/nvme0n1", "systor17", "msr", "blkparse", "D", "Q", "259,0", "0,0",
           "systor17-vdi-4lun.csv", "msr-vdi-4disk.csv", "blkparse-vdi-4dev.txt", "/etc/passwd", "trace.csv",
           "nosuchfile.csv", "samsung-980pro-1tb", "sandisk-u100-240gb-sata", "xeon-silver-4210r-10c",
           "i7-3517u-4c", "nosuch-preset", "../presets/devices/samsung-980pro-1tb"]
JOB_OPTIONS = ["rw", "bs", "iodepth", "iodepth_batch_submit", "numjobs", "runtime", "ramp_time", "startdelay",
               "time_based", "rate_iops", "rate", "thinktime", "prioclass", "prio", "cgroup", "cgroup_weight",
               "cpus_allowed", "cpus_allowed_policy", "size", "offset", "filename", "group_reporting", "direct",
               "buffered", "ioengine", "offset_increment", "stonewall", "invalidate", "read_iolog",
               "read_iolog_format", "replay_time_scale", "replay_no_stall", "replay_lun", "replay_blkparse_action",
               "randseed", "registerfiles", "fixedbufs", "random_distribution", "loops",
               "rwmixread", "rwmixwrite", "description", "thread", "verify", "include", "blocksize", "readwrite",
               "iodepth_batch", "unknown_option", "name"]
SPEC_KEYS = ["name", "duration", "ramp", "repeat", "seed", "sample_interval", "jobfile", "host", "devices",
             "scheduler", "job", "sweep", "unknown"]
SWEEP_AXES = ["scheduler.name", "scheduler.read_lat_nsec", "scheduler.nr_requests", "host.cores", "devices.count",
              "duration", "job.{job}.iodepth", "job.{job}.bs", "job.{job}.numjobs", "job.{job}.rw",
              "job.{job}.nosuch", "job.nosuch.iodepth", "nosuch.axis", "job.{job}.runtime"]
TUNABLES = ["read_lat_nsec", "write_lat_nsec", "read_expire", "write_expire", "fifo_batch", "slice_idle",
            "low_latency", "max_inflight", "quantum", "nr_requests", "nosuch_tunable"]
SHORT_TIMES = ["1ms", "2ms", "5ms", "10ms", "20ms", 0.003, 0.01]


def value(ch: Chooser) -> Any:
    """An interesting TOML value (any type)."""
    kind = ch.integer(0, 9)
    if kind <= 2:
        return ch.choice(BIG_INTS)
    if kind == 3:
        return ch.choice(FLOATS)
    if kind <= 6:
        return ch.choice(STRINGS)
    if kind == 7:
        return ch.choice([True, False])
    if kind == 8:
        return [value(ch) for _ in range(ch.integer(0, 3))]
    return {ch.choice(SPEC_KEYS + JOB_OPTIONS): value(ch) for _ in range(ch.integer(0, 2))}


def text_value(ch: Chooser) -> str:
    """An interesting value as a fio job file writes it (text)."""
    v = value(ch)
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


# ---------------------------------------------------------------- TOML out

def _toml_str(s: str) -> str:
    out = []
    for c in s:
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        elif 0xD800 <= ord(c) < 0xE000:
            out.append("\\ufffd")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if abs(v) < 10**40 else str(v)[:40]
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    return _toml_str(str(v))


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_str(k)


def to_toml(spec: dict[str, Any]) -> str:
    lines = []
    for k, v in spec.items():
        if k in ("job", "sweep") and isinstance(v, (list, dict)):
            continue
        lines.append(f"{_toml_key(k)} = {toml_value(v)}")
    job = spec.get("job")
    if isinstance(job, list):
        for t in job:
            if isinstance(t, dict):
                lines += ["", "[[job]]"] + [f"{_toml_key(k)} = {toml_value(v)}" for k, v in t.items()]
            else:
                lines += ["", f"job = {toml_value(job)}"]
                break
    sweep = spec.get("sweep")
    if isinstance(sweep, dict):
        lines += ["", "[sweep]"] + [f"{_toml_key(k)} = {toml_value(v)}" for k, v in sweep.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- cases

@dataclass
class Case:
    """Files to write into the case's input folder (name -> bytes) and the arguments after ``iosched run``."""
    files: dict[str, bytes]
    args: list[str]
    report: bool = False

    def describe(self) -> str:
        return json.dumps({"args": self.args, "report": self.report,
                           "files": {k: v.decode("utf-8", "backslashreplace") for k, v in self.files.items()}},
                          indent=1)


def _examples(suffix: str) -> list[Path]:
    return sorted(EXPERIMENTS.glob(f"*{suffix}"))


def _load_toml(path: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(path.read_text())


def _shorten(spec: dict[str, Any], ch: Chooser) -> None:
    """Most cases simulate only milliseconds (under the fuzz limits, longer ones are refused: also tested)."""
    if ch.chance(0.9):
        spec["duration"] = ch.choice(SHORT_TIMES)
        spec.pop("ramp", None)
        if ch.chance(0.3):
            spec["ramp"] = ch.choice(["0", "1ms", 0])
        for job in spec.get("job", []) if isinstance(spec.get("job"), list) else []:
            if isinstance(job, dict):
                for k in ("runtime", "ramp_time"):
                    if k in job:
                        job[k] = ch.choice(SHORT_TIMES)
                if "numjobs" in job and ch.chance(0.7):
                    job["numjobs"] = ch.integer(1, 4)
    if ch.chance(0.6) and isinstance(spec.get("sweep"), dict):
        spec.pop("sweep")
    if "repeat" in spec and ch.chance(0.8):
        spec["repeat"] = 1


def mutate_spec(spec: dict[str, Any], ch: Chooser) -> None:
    """Structural mutations of a spec (as parsed): values replaced, keys dropped or added, jobs and axes."""
    jobs = spec.get("job") if isinstance(spec.get("job"), list) else []
    for _ in range(ch.integer(0, 4)):
        what = ch.integer(0, 11)
        if what <= 2 and jobs:
            job = ch.choice(jobs)
            if isinstance(job, dict):
                job[ch.choice(JOB_OPTIONS)] = value(ch)
        elif what == 3 and jobs:
            job = ch.choice(jobs)
            if isinstance(job, dict) and job:
                job.pop(ch.choice(list(job)))
        elif what == 4:
            spec[ch.choice(SPEC_KEYS)] = value(ch)
        elif what == 5 and spec:
            spec.pop(ch.choice(list(spec)))
        elif what == 6 and jobs:
            copy = dict(ch.choice(jobs)) if isinstance(ch.choice(jobs), dict) else {}
            copy["name"] = ch.choice(["copy", jobs[0].get("name", "x") if isinstance(jobs[0], dict) else "x",
                                      ch.choice(STRINGS)])
            jobs.append(copy)
        elif what == 7:
            job = ch.choice(jobs) if jobs else {}
            name = job.get("name", "x") if isinstance(job, dict) else "x"
            axis = ch.choice(SWEEP_AXES).format(job=name if isinstance(name, str) else "x")
            spec.setdefault("sweep", {}) if isinstance(spec.get("sweep", {}), dict) else None
            if isinstance(spec.get("sweep"), dict):
                spec["sweep"][axis] = [value(ch) for _ in range(ch.integer(0, 3))]
        elif what == 8:
            sched = spec.get("scheduler") if isinstance(spec.get("scheduler"), dict) else {}
            sched[ch.choice(["name", "nr_requests", "block_layer"] + TUNABLES)] = value(ch)
            spec["scheduler"] = sched
        elif what == 9:
            dev = {"preset": ch.choice(["samsung-980pro-1tb", "intel-p4500-2tb", "sandisk-u100-240gb-sata",
                                        "samsung-970evo-250gb", ch.choice(STRINGS)])}
            if ch.chance(0.5):
                dev[ch.choice(["count", "condition", "trimmed_fraction", "preset", "nosuch"])] = value(ch)
            spec["devices"] = [dev] + ([dict(dev)] if ch.chance(0.2) else [])
        elif what == 10:
            host = {"preset": ch.choice(["xeon-silver-4210r-10c", "i7-3517u-4c", "2x-e5-2620-16c",
                                         ch.choice(STRINGS)])}
            if ch.chance(0.5):
                host[ch.choice(["cores", "nosuch"])] = value(ch)
            spec["host"] = host
        elif what == 11:
            spec[ch.choice(["name", "sample_interval", "seed", "repeat"])] = value(ch)


def mutate_bytes(data: bytes, ch: Chooser) -> bytes:
    """Byte-level damage: flips, inserted bytes (NUL, invalid UTF-8, brackets, quotes), cuts, repeated lines."""
    b = bytearray(data)
    for _ in range(ch.integer(1, 3)):
        what = ch.integer(0, 5)
        pos = ch.integer(0, max(0, len(b) - 1)) if b else 0
        if what == 0 and b:
            b[pos] ^= 1 << ch.integer(0, 7)
        elif what == 1:
            b[pos:pos] = ch.choice([b"\x00", b"\xff\xfe", b"\xc3", b"[", b"]", b'"', b"=", b"\n", b"[[job]]\n",
                                    b"[" * 64, b"{", b"#", b"\\", b"9" * 50, b"\r"])
        elif what == 2 and b:
            del b[pos:pos + ch.integer(1, 40)]
        elif what == 3:
            del b[pos:]
        elif what == 4 and b:
            lines = bytes(b).split(b"\n")
            i = ch.integer(0, len(lines) - 1)
            lines.insert(i, lines[i])
            b = bytearray(b"\n".join(lines))
        elif what == 5:
            b[pos:pos] = ("a = " + "[" * ch.choice([40, 400, 3000]) + "]" * 5 + "\n").encode()
    return bytes(b)


def toml_case(ch: Chooser) -> Case:
    src = ch.choice(_examples(".toml"))
    spec = _load_toml(src)
    _shorten(spec, ch)
    mutate_spec(spec, ch)
    text = to_toml(spec).encode()
    if ch.chance(0.15):
        text = mutate_bytes(text, ch)
    name = ch.choice(["spec.toml"] * 6 + ["SPEC.TOML", "spec.Toml", "spec"])
    files = {name: text}
    if isinstance(spec.get("jobfile"), str) and ch.chance(0.7):
        files.setdefault("jobs.fio", fio_text(ch))
    return Case(files, [name])


def _fio_sections(text: str) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            sections.append((s[1:-1], []))
        elif s and not s.startswith((";", "#")) and sections:
            sections[-1][1].append(s)
    return sections


def fio_text(ch: Chooser) -> bytes:
    src = ch.choice(_examples(".fio"))
    sections = _fio_sections(src.read_text())
    for name, lines in sections:
        for i, ln in enumerate(lines):
            if ln.startswith(("runtime=", "ramp_time=")) and ch.chance(0.9):
                lines[i] = ln.split("=")[0] + "=" + ch.choice(["0.002", "0.005", "10ms", "1ms"])
            if ln.startswith("numjobs=") and ch.chance(0.7):
                lines[i] = f"numjobs={ch.integer(1, 4)}"
    for _ in range(ch.integer(0, 4)):
        what = ch.integer(0, 4)
        name, lines = ch.choice(sections)
        if what <= 1:
            key = ch.choice(JOB_OPTIONS)
            lines[:] = [ln for ln in lines if not ln.startswith(key + "=") and ln != key]
            lines.append(key if ch.chance(0.1) else f"{key}={text_value(ch)}")
        elif what == 2 and lines:
            lines.pop(ch.integer(0, len(lines) - 1))
        elif what == 3:
            sections.append((ch.choice(["copy", "global", name, ch.choice(STRINGS)[:40]]), list(lines)))
        elif what == 4:
            sections.insert(0, ("", [f"{ch.choice(JOB_OPTIONS)}={text_value(ch)}"]) if ch.chance(0.3) else
                            ("global", []))
    out = []
    for name, lines in sections:
        if name:
            out.append(f"[{name}]")
        out += [ln.replace("\n", " ") for ln in lines]
        out.append("")
    data = "\n".join(out).encode("utf-8", "surrogatepass")
    if ch.chance(0.15):
        data = mutate_bytes(data, ch)
    return data


def fio_case(ch: Chooser) -> Case:
    name = ch.choice(["jobs.fio"] * 6 + ["jobs.FIO", "jobs.txt", "jobs"])
    args = [name]
    if ch.chance(0.2):
        args += ["--duration", ch.choice(["5ms", "1ms", "0", "-1", "inf", "1e400", "5000000000s", "x"])]
    return Case({name: fio_text(ch)}, args)


def trace_text(ch: Chooser) -> tuple[str, bytes]:
    src = ch.choice(sorted(p for p in TRACES.iterdir() if p.suffix in (".csv", ".txt")))
    lines = src.read_text().splitlines()[: ch.integer(0, 60)]
    for _ in range(ch.integer(0, 5)):
        if not lines:
            break
        i = ch.integer(0, len(lines) - 1)
        what = ch.integer(0, 4)
        sep = "," if src.suffix == ".csv" else " "
        fields = lines[i].split(sep)
        if what <= 2 and fields:
            fields[ch.integer(0, len(fields) - 1)] = text_value(ch) if ch.chance(0.5) else \
                ch.choice(["-1", "18446744073709551616", "1e400", "", "W", "R", "Read", "99999999999999999999",
                           "0.5", "nan", "+ 8", "Q", "D", "259:0"])
            lines[i] = sep.join(fields)
        elif what == 3:
            lines[i] = lines[i][: ch.integer(0, len(lines[i]))]
        else:
            lines.insert(i, lines[i])
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    if ch.chance(0.15):
        data = mutate_bytes(data, ch)
    return "trace" + src.suffix, data


def trace_case(ch: Chooser) -> Case:
    trace_name, trace = trace_text(ch)
    job = {"name": "replay", "read_iolog": ch.choice([trace_name] * 5 + [ch.choice(STRINGS)]),
           "replay_no_stall": ch.choice([0, 1]), "iodepth": ch.integer(1, 32)}
    for _ in range(ch.integer(0, 3)):
        job[ch.choice(["read_iolog_format", "replay_time_scale", "replay_lun", "replay_blkparse_action",
                       "time_based", "runtime", "numjobs", "bs", "rw"])] = value(ch)
    spec = {"duration": ch.choice(SHORT_TIMES), "job": [job]}
    if ch.chance(0.3):
        mutate_spec(spec, ch)
    return Case({"spec.toml": to_toml(spec).encode(), trace_name: trace}, ["spec.toml"])


def flags(ch: Chooser) -> list[str]:
    """Command-line overrides, now and then."""
    out: list[str] = []
    for _ in range(ch.integer(0, 2) if ch.chance(0.25) else 0):
        flag = ch.choice(["--duration", "--seed", "--devices", "--scheduler", "--set", "--host", "--device",
                          "--jobs"])
        v = {"--seed": ch.choice(["0", "1", "-1", "18446744073709551616"]),
             "--devices": ch.choice(["1", "2", "0", "-3", "65"]),
             "--jobs": ch.choice(["1", "2", "0"]),
             "--set": ch.choice(["read_lat_nsec=1000", "nr_requests=0", "x=1", "=", "read_lat_nsec=" + "9" * 50,
                                 "fifo_batch=99999999999999999999"])}.get(flag, text_value(ch))
        if flag == "--duration":
            v = str(ch.choice(SHORT_TIMES + ["inf", "nan", "0", "-1", "99999999h"]))
        out += [flag, v]
    return out


def make_case(ch: Chooser, report_chance: float = 0.02) -> Case:
    kind = ch.integer(0, 9)
    case = toml_case(ch) if kind <= 5 else fio_case(ch) if kind <= 7 else trace_case(ch)
    case.args += flags(ch)
    case.report = ch.chance(report_chance)
    return case


# ---------------------------------------------------------------- the fork server

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _audit(allowed: list[str], found: list[str]):
    """An audit hook that notes every path written, made, renamed or removed outside ``allowed`` folders."""
    busy = [False]

    def note(path: object) -> None:
        if isinstance(path, int) or path is None:
            return
        try:
            p = os.path.realpath(os.fsdecode(path))
        except Exception:  # noqa: BLE001
            p = repr(path)
        if p == os.devnull or any(p == a or p.startswith(a + os.sep) for a in allowed):
            return
        found.append(p)

    def hook(event: str, args: tuple) -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            if event == "open":
                path, mode, flags = (list(args) + [None, None, None])[:3]
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                    (isinstance(flags, int) and flags & _WRITE_FLAGS)
                if writing:
                    note(path)
            elif event in ("os.mkdir", "os.remove", "os.rmdir", "os.truncate", "os.chmod", "shutil.rmtree",
                           "os.utime", "os.chown"):
                note(args[0] if args else None)
            elif event in ("os.rename", "os.replace", "os.symlink", "os.link", "shutil.copyfile", "shutil.move",
                           "shutil.copytree"):
                for a in args[:2]:
                    note(a)
        finally:
            busy[0] = False
    return hook


def _child(root: Path, args: list[str], env: dict[str, str], report: bool) -> None:
    """In the forked child: run ``iosched run`` on the case as the command line does, then _exit."""
    code = 1
    try:
        out_fd = os.open(root / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err_fd = os.open(root / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        bad_fd = os.open(root / "outside", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        sys.stdout = open(1, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
        sys.stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace")
        os.chdir(root / "in")
        os.environ.update(env)
        sys.dont_write_bytecode = True
        found: list[str] = []
        allowed = [os.path.realpath(root / "out"), os.path.realpath(os.environ.get("MPLCONFIGDIR", root / "out"))]
        sys.addaudithook(_audit(allowed, found))
        from iosched.cli import main

        argv = ["run", *args, "--out", str(root / "out")] + ([] if report else ["--no-report"])
        try:
            main.main(args=argv, prog_name="iosched", standalone_mode=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - what a user would see: a traceback
            import traceback

            traceback.print_exc()
            code = 1
        os.write(bad_fd, "\n".join(found).encode("utf-8", "backslashreplace"))
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(code)


def _run_one(req: dict[str, Any]) -> dict[str, Any]:
    root = Path(req["root"])
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(root, req["args"], req["env"], req["report"])
    deadline = t0 + req["timeout"]
    timed_out = False
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() > deadline:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.002)
    return {"seconds": time.monotonic() - t0, "timed_out": timed_out,
            "exit": os.waitstatus_to_exitcode(status), "max_rss_bytes": usage.ru_maxrss * 1024}


def serve() -> None:
    """The fork server: read one JSON request per line on stdin, answer one JSON line per case on stdout."""
    os.environ.setdefault("MPLCONFIGDIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "iosched-fuzz-mpl"))
    # Everything a case needs, imported once (no threads are started: forking stays safe).
    import iosched.cli  # noqa: F401
    import iosched.report.build  # noqa: F401
    import iosched.report.html  # noqa: F401
    import iosched.running  # noqa: F401
    import iosched.store  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from iosched import native

    native.available()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        print(json.dumps(_run_one(json.loads(line))), flush=True)


class ForkServer:
    """A fork server in a fresh interpreter (not forked from pytest, whose threads would make forking unsafe)."""

    def __init__(self, env: dict[str, str] | None = None):
        full = dict(os.environ, **(env or {}))
        full.pop("IOSCHED_REQUIRE_NATIVE", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "iosched.tests.fuzzing", "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=full)
        assert json.loads(self.proc.stdout.readline())["ready"]

    def run(self, root: Path, args: list[str], env: dict[str, str], report: bool, timeout: float) -> dict[str, Any]:
        req = {"root": str(root), "args": args, "env": env, "report": report, "timeout": timeout}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()


# ---------------------------------------------------------------- one case and the property

@dataclass
class Outcome:
    exit: int
    seconds: float
    max_rss_bytes: int
    timed_out: bool
    stderr: str
    stdout: str
    outside: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    kind: str = ""      # "ok", "error", or the first problem's class

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def run_case(server: ForkServer, case: Case, root: Path, *, timeout_s: float = CASE_TIMEOUT_S,
             memory_bound: int = MEMORY_BOUND_BYTES) -> Outcome:
    """Run one case in ``root`` (emptied first) and check the property; ``problems`` lists what broke it."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "in").mkdir(parents=True)
    for name, data in case.files.items():
        (root / "in" / name).write_bytes(data)
    before = _snapshot(root / "in")
    parent_before = set(os.listdir(root.parent))
    r = server.run(root, case.args, FUZZ_LIMITS, case.report, timeout_s)
    read = lambda n: (root / n).read_text(errors="backslashreplace") if (root / n).exists() else ""  # noqa: E731
    o = Outcome(r["exit"], r["seconds"], r["max_rss_bytes"], r["timed_out"], read("stderr"), read("stdout"))
    o.outside = [p for p in read("outside").splitlines() if p]
    extra = sorted(set(os.listdir(root)) - {"in", "out", "stdout", "stderr", "outside"})
    o.outside += [str(root / e) for e in extra]
    o.outside += [str(root.parent / e) for e in sorted(set(os.listdir(root.parent)) - parent_before)]
    if _snapshot(root / "in") != before:
        o.outside.append(f"{root / 'in'} changed")
    o.problems = check(o, timeout_s, memory_bound)
    o.kind = o.problems[0].split(":")[0] if o.problems else ("ok" if o.exit == 0 else "error")
    return o


def check(o: Outcome, timeout_s: float, memory_bound: int) -> list[str]:
    problems = []
    err_lines = [ln for ln in o.stderr.splitlines() if ln.strip()]
    if o.timed_out:
        problems.append(f"hang: still running after {timeout_s:g} s")
    elif "Traceback (most recent call last)" in o.stderr:
        problems.append("traceback: " + (err_lines[-1] if err_lines else ""))
    elif "panicked" in o.stderr or "internal error" in o.stderr:
        problems.append("panic: " + next((ln for ln in err_lines if "panic" in ln), ""))
    elif o.exit < 0:
        problems.append(f"crash: killed by signal {-o.exit} ({o.stderr[-200:]!r})")
    elif o.exit not in (0, 2):
        problems.append(f"exit: {o.exit}: {err_lines[-1] if err_lines else ''}")
    elif o.exit == 2:
        errors = [ln for ln in err_lines if ln.startswith("error: ")]
        others = [ln for ln in err_lines if not ln.startswith(("error: ", "note: "))]
        if len(errors) != 1 or others:
            problems.append(f"message: expected one error line, got {len(errors)} error and {len(others)} other "
                            f"line(s): {err_lines[:3]}")
        elif "simulator rejected the config" in errors[0] or "simulator config:" in errors[0]:
            problems.append(f"internal-terms: {errors[0]}")
    if o.max_rss_bytes > memory_bound:
        problems.append(f"memory: peak RSS {o.max_rss_bytes >> 20} MiB over {memory_bound >> 20} MiB")
    if o.outside:
        problems.append(f"outside: wrote {o.outside[:3]}")
    return problems


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        sys.exit("usage: python -m iosched.tests.fuzzing serve")
