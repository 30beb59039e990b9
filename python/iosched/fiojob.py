"""fio jobs: the job-file parser and the interpretation of fio options (shared by job files and TOML [[job]])."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import replay as replay_mod
from . import limits
from .errors import SpecError, show
from .limits import read_input
from .safepath import check_name
from .units import Percent, parse_cpu_list, parse_size, parse_time

RW_VALUES = {"read": "read", "write": "write", "randread": "randread", "randwrite": "randwrite",
             "randrw": "randrw", "readwrite": "readwrite", "rw": "readwrite"}
IOENGINES = ("io_uring", "libaio", "psync")
# fio's other synchronous engines: the same path through the kernel as psync (one I/O per system call, the process
# waits for it); only the call differs (read/write after lseek, readv/writev, preadv/pwritev, preadv2/pwritev2),
# and the simulator runs them as psync. The kernel and VM backends run the engine given.
SYNC_ENGINES = ("sync", "vsync", "pvsync", "pvsync2")

# Options iosched models (canonical name → kind).  Aliases are mapped first.
OPTIONS = {
    "name": "str", "rw": "rw", "iodepth_batch_submit": "batch", "rwmixread": "pct", "rwmixwrite": "pct", "bs": "bs", "iodepth": "depth",
    "numjobs": "pos", "percentile_list": "str", "clat_percentiles": "bool", "lat_percentiles": "bool",
    "runtime": "time_s", "ramp_time": "time_s", "startdelay": "time_s", "time_based": "bool",
    "rate_iops": "nonneg", "rate": "size", "thinktime": "time_us", "prioclass": "prioclass", "prio": "prio", "cgroup": "str",
    "cgroup_weight": "weight", "cpus_allowed": "cpus", "cpus_allowed_policy": "cpupolicy", "size": "size",
    "offset": "size", "filename": "str", "group_reporting": "bool", "direct": "bool", "buffered": "bool",
    "ioengine": "engine", "offset_increment": "size", "stonewall": "bool", "invalidate": "bool",
    "end_fsync": "bool", "fsync_on_close": "bool",
    "read_iolog": "str", "read_iolog_format": "str", "replay_time_scale": "pos",
    "replay_no_stall": "bool", "replay_lun": "lun", "replay_blkparse_action": "str",
    "registerfiles": "bool", "fixedbufs": "bool", "randseed": "seed", "random_distribution": "distribution",
    "loops": "pos", "bssplit": "bssplit", "write_bw_log": "log", "write_iops_log": "log", "write_lat_log": "log", "log_avg_msec": "pos",
}
# iosched's own job option (TOML specs only): each clone runs as a fio process of its own, so all draw the offsets of
# thread 1 (fio seeds a job by its thread number within its process); the simulator's JobConfig.separate_processes.
SEPARATE_PROCESSES = "separate_processes"
# How long after one another such processes begin their I/O: the simulator's SEPARATE_PROCESS_GAP_NS
# (crates/iosched-sim/src/sim/build.rs, where the reasoning is), which the kernel and VM backends give as startdelay.
SEPARATE_PROCESS_GAP_NS = 5_000_000
# fio's log options: the log kind each writes (its files: PREFIX_bw.N.log; lat writes PREFIX_lat and PREFIX_clat).
LOG_OPTIONS = {"write_bw_log": "bw", "write_iops_log": "iops", "write_lat_log": "lat"}
LOG_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# io_uring's engine options that only spare the kernel per-I/O work (a file table lookup, mapping the buffers): the
# xeon-silver-4210r-10c preset's io_uring costs were fitted to seed 000's runs, which set both (icpe24-artifact
# README), and no preset's costs tell the two apart, so the simulator runs the same with or without them; the kernel
# backend passes them to fio. fio knows them only with ioengine=io_uring.
IO_URING_OPTIONS = ("registerfiles", "fixedbufs")
# Options of a trace replay other than read_iolog itself.
REPLAY_OPTIONS = ("read_iolog_format", "replay_time_scale", "replay_no_stall", "replay_lun", "replay_blkparse_action")
ALIASES = {"readwrite": "rw", "blocksize": "bs", "iodepth_batch": "iodepth_batch_submit"}
# Accepted and without effect in the simulator (documented as such). The buffer options set what the written data
# holds, which matters only to a drive that compresses or deduplicates; no modelled drive does. new_group: every job
# is its own reporting group already (group_reporting sums a job's clones, never several jobs). The output options
# (kb_base, unit_base, gtod_reduce, allow_mounted_write) change what fio prints or checks, not the I/O: gtod_reduce
# makes fio skip timing each I/O, and iosched's fio.json still has every latency.
IGNORED = {"description", "thread", "norandommap", "randrepeat", "refill_buffers", "zero_buffers", "scramble_buffers",
           "new_group", "kb_base", "unit_base", "gtod_reduce", "allow_mounted_write"}
# What the simulator does about fio's reap batch options (sim/fio.rs `reap`).
_ONE_EVENT_PER_REAP = ("a process with its queue full takes one event per reap (fio's default "
                       "iodepth_batch_complete_min = max = 1); other reap batch sizes are not modelled")
# Real fio options iosched refuses, each with why (docs/spec.md lists them; a TOML key that is one reads "not
# supported" with the reason rather than "unknown key").
REFUSED = {
    "wait_for": "jobs start together or after a stonewall; waiting for a named job is not modelled",
    "verify": "the simulator models timing, not data: there is nothing to verify",
    "do_verify": "the simulator models timing, not data: there is nothing to verify",
    "verify_fatal": "the simulator models timing, not data: there is nothing to verify",
    "rate_min": "a minimum rate only makes fio give up; not modelled",
    "rate_process": "rate limits are applied at an even pace (fio's default linear); poisson is not modelled",
    "rate_cycle": "rate_min's averaging window; rate_min is not modelled",
    "bsrange": "sizes drawn from a range are not modelled: use bssplit",
    "blocksize_range": "sizes drawn from a range are not modelled: use bssplit",
    "bs_unaligned": "I/O is aligned to the block size (and the device's logical block)",
    "zonemode": "zoned devices are not modelled",
    "zonesize": "zoned devices are not modelled",
    "file_service_type": "a job's I/O goes round-robin over its devices (fio's default); other policies are not "
                         "modelled",
    "iodepth_batch_complete": _ONE_EVENT_PER_REAP,
    "iodepth_batch_complete_min": _ONE_EVENT_PER_REAP,
    "iodepth_batch_complete_max": _ONE_EVENT_PER_REAP,
    "iodepth_low": "the queue is refilled as each I/O completes (fio's default); a low-water mark is not modelled",
    "latency_target": "fio's depth search for a latency target is not modelled",
    "latency_window": "fio's depth search for a latency target is not modelled",
    "number_ios": "a job ends by its runtime or its size (and loops); a count of I/Os is not modelled",
    "io_size": "a job transfers its size (times loops); a separate amount is not modelled",
    "io_limit": "a job transfers its size (times loops); a separate amount is not modelled",
    "fsync": "the simulator has no flush or FUA path (the modelled drives' write caches are not flushed)",
    "fdatasync": "the simulator has no flush or FUA path (the modelled drives' write caches are not flushed)",
    "sync": "O_SYNC writes need a flush or FUA path, which the simulator does not have",
    "write_iolog": "iosched writes fio.json and fio's averaged logs, not an I/O log",
    "replay_redirect": "a trace's I/O goes to the job's devices (filename); redirecting is not needed",
    "replay_align": "trace records are aligned to the logical block",
    "replay_scale": "trace offsets are used as recorded (modulo the region)",
    "replay_skip": "every record of a trace is replayed",
    "read_iolog_chunked": "traces are read as a stream already",
    "merge_blktrace_file": "merging blktrace files is not supported: replay each as its own job",
    "cpumask": "use cpus_allowed",
    "nice": "CFS weights by nice level are not modelled (every process has the same)",
    "include": "job files are read without includes: put the jobs in one file",
    "directory": "jobs run on block devices; files in a file system are not modelled",
    "filesize": "jobs run on block devices; use size (and offset) for the region",
    "nrfiles": "jobs run on block devices; files in a file system are not modelled",
    "openfiles": "jobs run on block devices; files in a file system are not modelled",
    "create_on_open": "jobs run on block devices; files in a file system are not modelled",
    "unlink": "jobs run on block devices; files in a file system are not modelled",
    "hipri": "polled I/O (io_uring IOPOLL) is not modelled",
    "sqthread_poll": "io_uring's submission-queue polling thread is not modelled",
    "thinktime_blocks": "thinktime applies after every I/O; per-block thinking is not modelled",
    "thinktime_spin": "thinktime is a sleep; spinning is not modelled",
    "exitall": "a job that ends does not end the others; not modelled",
    "cpuload": "the cpuio engine is not modelled",
    "cpuchunks": "the cpuio engine is not modelled",
    "trim_percentage": "the simulator issues no trims (discards)",
    "trim_backlog": "the simulator issues no trims (discards)",
    "rw_sequencer": "sequential jobs walk their region in order; skips are not modelled",
    "buffer_compress_percentage": "no modelled drive compresses: what the data holds does not change a run",
    "dedupe_percentage": "no modelled drive deduplicates: what the data holds does not change a run",
    "flow": "flow control between jobs is not modelled",
}


@dataclass
class RawJob:
    """One job as written: options in order, values as strings (job file, None = bare flag) or TOML values."""
    name: str
    options: dict[str, Any]
    file: str
    label: str          # how errors name the job: '[lapp]' (job file) or 'job "lapp"' (TOML)
    origin: str         # "fio" or "toml"


@dataclass
class DeviceInfo:
    name: str
    capacity_bytes: int
    logical_block_bytes: int


@dataclass
class JobContext:
    devices: list[DeviceInfo]
    cores: int
    default_runtime_ns: int | None
    default_ramp_ns: int
    default_time_based: bool
    page_cache: bool = False        # the host preset has a page cache: buffered jobs (direct=0) can run
    # Device names the run does not have, and the device each runs on (device_aliases); empty: such a name is an error.
    device_aliases: dict[str, int] = field(default_factory=dict)


@dataclass
class ResolvedJob:
    config: dict[str, Any]                  # exactly JobConfig (config.rs)
    group_reporting: bool
    options: dict[str, str]                 # fio "job options"
    notes: list[str] = field(default_factory=list)
    trace: replay_mod.TraceSummary | None = None    # what a trace replay issues (None: not a replay, or unchecked)
    percentiles: tuple[float, ...] | None = None    # percentile_list: fio.json's completion-latency percentiles
    clat_percentiles: bool = True                   # fio.json lists clat_ns percentiles and bins (fio's default)
    lat_percentiles: bool = False                   # ... and lat_ns ones (fio's default: not)
    io_uring_options: tuple[str, ...] = ()          # IO_URING_OPTIONS set to 1, for the kernel backend's fio
    logs: dict[str, str] = field(default_factory=dict)   # fio's logs asked for: kind (bw, iops, lat) -> prefix
    log_avg_ms: int | None = None                   # log_avg_msec: the logs' (and statistics') window
    fio_engine: str | None = None                   # the engine fio runs where the simulator runs another (sync)


# ---------------------------------------------------------------- job file parser

_COMMENT_RE = re.compile(r"\s[;#].*$")


def parse_jobfile(path: Path, display: str) -> list[RawJob]:
    """Parse a fio job file: [global] and job sections, key=value or bare keys, ;/# comments."""
    raw = read_input(path, display, "job")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise SpecError(display, f"line {line}", "not UTF-8 text (a fio job file is text)") from None
    global_opts: dict[str, str | None] = {}
    jobs: list[tuple[str, dict[str, str | None], int]] = []
    section: str | None = None
    current: dict[str, str | None] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in ";#":
            continue
        s = _COMMENT_RE.sub("", s).strip()
        if s.startswith("["):
            if not s.endswith("]") or len(s) < 3:
                raise SpecError(display, f"line {lineno}", f"expected a section header like [name], got {show(s)}")
            section = s[1:-1].strip()
            check_name(section, file=display, key=f"line {lineno}", what="a job name (the section's)")
            if section == "global":
                current = global_opts
            else:
                current = dict(global_opts)
                jobs.append((section, current, lineno))
            continue
        if s.startswith("include ") or s == "include":
            raise SpecError(display, f"line {lineno}", "include: not supported by iosched")
        if "=" in s:
            key, value = (p.strip() for p in s.split("=", 1))
        else:
            key, value = s, None
        if not key:
            raise SpecError(display, f"line {lineno}", f"expected key=value, got {show(s)}")
        if current is None:
            raise SpecError(display, f"line {lineno}", f"{key}: option outside of a section")
        current.pop(key, None)      # a later value replaces an earlier one, also in order
        current[key] = value
    if not jobs:
        raise SpecError(display, None, "no job sections (only [global])" if global_opts else "no jobs")
    out = []
    for name, opts, _ in jobs:
        out.append(RawJob(name=name, options=opts, file=display, label=f"[{name}]", origin="fio"))
    return out


# ---------------------------------------------------------------- option interpretation

def _err(raw: RawJob, key: str, msg: str) -> SpecError:
    return SpecError(raw.file, f"{raw.label} {key}" if raw.origin == "fio" else f"{raw.label}: {key}", msg)


def _int(raw: RawJob, key: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
    want = "an integer" + (f" in {lo}..{hi}" if lo is not None and hi is not None else
                           f" >= {lo}" if lo is not None else "")
    if isinstance(v, bool) or v is None:
        raise _err(raw, key, f"expected {want}, got {'nothing' if v is None else show(v)}")
    if isinstance(v, int):
        x = v
    elif isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d{1,40}\s*", v):
        x = int(v)
    else:
        raise _err(raw, key, f"expected {want}, got {show(v)}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise _err(raw, key, f"expected {want}, got {x}")
    return x


def _bool(raw: RawJob, key: str, v: Any) -> bool:
    if v is None or v is True:
        return True
    if v is False:
        return False
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("0", "1", "true", "false"):
        return v.strip().lower() in ("1", "true")
    raise _err(raw, key, f"expected 0 or 1 (or true/false), got {show(v)}")


def _str(raw: RawJob, key: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _err(raw, key, f"expected a non-empty string, got {'nothing' if v is None else show(v)}")
    return v


def _strval(v: Any) -> str:
    if v is None or v is True:
        return "1"
    if v is False:
        return "0"
    return str(v)


def _filenames(value: str) -> list[str]:
    """fio's colon-separated filename list (a backslash escapes a colon in a name)."""
    return [part.replace("\\:", ":") for part in re.split(r"(?<!\\):", value)]


def device_aliases(raws: list[RawJob], devices: list[DeviceInfo]) -> dict[str, int]:
    """A job file names the devices of the machine it was written for (filename=/dev/loop0). Names the run does not
    have map to its devices in order of first use, skipping the devices some job names itself, so the same file
    runs in the simulator and on other devices (each job notes where its I/O goes). More such names than devices
    left is an error naming the first that has none."""
    by_name = {d.name: i for i, d in enumerate(devices)}
    named: set[int] = set()
    unknown: dict[str, tuple[RawJob, str, str]] = {}
    for raw in raws:
        for key, v in raw.options.items():
            if ALIASES.get(key, key) != "filename" or not isinstance(v, str):
                continue
            for part in _filenames(v):
                if part in by_name:
                    named.add(by_name[part])
                else:
                    unknown.setdefault(part, (raw, key, v))
    free = [i for i in range(len(devices)) if i not in named]
    aliases: dict[str, int] = {}
    for part, (raw, key, v) in unknown.items():
        if not free:
            have = ", ".join(by_name)
            raise _err(raw, f"{key}={v}", f"no such device {part}, and every device of the run ({have}) is taken: "
                                          "names it does not have map to its devices in order, one each (give more "
                                          "devices: --devices N, or devices in the spec)")
        aliases[part] = free.pop(0)
    return aliases


def alias_notes(raws: list[RawJob], devices: list[DeviceInfo], aliases: dict[str, int]) -> list[str]:
    """One note per name in `aliases` (device_aliases), naming the first job that uses it: a job file with many
    jobs over many devices says where each name runs once, not once per job."""
    notes: list[str] = []
    for raw in raws:
        for key, v in raw.options.items():
            if ALIASES.get(key, key) != "filename" or not isinstance(v, str):
                continue
            for part in _filenames(v):
                if part in aliases and not any(f" filename {part} runs on " in n for n in notes):
                    notes.append(f"{raw.file}: {raw.label}: filename {part} runs on {devices[aliases[part]].name} "
                                 "(a name the run's devices do not have: such names map to them in order)")
    return notes


def resolve_job(raw: RawJob, ctx: JobContext) -> ResolvedJob:
    """Interpret a job's options into a JobConfig dict; every problem is a SpecError naming file, job and option."""
    opts: dict[str, Any] = {}
    display_opts: dict[str, str] = {"name": raw.name}
    for key, v in raw.options.items():
        canon = ALIASES.get(key, key)
        if canon in IGNORED:
            display_opts[key] = _strval(v)
            continue
        if canon == SEPARATE_PROCESSES:
            if raw.origin == "fio":
                raise _err(raw, key, "iosched's own option, not fio's: set it in a TOML spec's [[job]]")
            opts[canon] = (key, v)
            continue  # not in fio.json's job options, which are fio's
        if canon not in OPTIONS:
            if canon in REFUSED:
                raise _err(raw, key, f"fio option not supported by iosched: {REFUSED[canon]}")
            if raw.origin == "fio":
                raise _err(raw, key, "fio option not supported by iosched")
            raise _err(raw, key, "unknown key (not a job option iosched supports)")
        if canon == "name":
            continue  # the name was taken when the job was made
        opts[canon] = (key, v)
        display_opts[key] = _strval(v)

    def get(name: str):
        return opts.get(name, (name, None))

    notes: list[str] = []
    # rw
    rw = "read"
    if "rw" in opts:
        key, v = opts["rw"]
        sv = _str(raw, key, v)
        if ":" in sv:
            raise _err(raw, key, f"{show(sv)}: the :N offset modifier of rw is not supported by iosched")
        if sv in ("trim", "randtrim", "trimwrite", "randtrimwrite"):
            raise _err(raw, key, f"{sv}: the simulator issues no trims (discards): a drive's response to them is not "
                                 "modelled")
        if sv not in RW_VALUES:
            raise _err(raw, key, f"expected one of read, write, randread, randwrite, randrw, readwrite, got {show(sv)}")
        rw = RW_VALUES[sv]
    rwmixread = 50
    if "rwmixwrite" in opts:
        rwmixread = 100 - _int(raw, *opts["rwmixwrite"], 0, 100)
    if "rwmixread" in opts:
        rwmixread = _int(raw, *opts["rwmixread"], 0, 100)
    # bs
    bs = 4096
    if "bs" in opts:
        key, v = opts["bs"]
        if isinstance(v, str) and "," in v:
            raise _err(raw, key, f"{show(v)}: separate read/write block sizes are not supported by iosched")
        bs = parse_size(v, file=raw.file, key=_err(raw, key, "").key)
        if bs < 1:
            raise _err(raw, key, f"expected a block size >= 1, got {show(v)}")
    bssplit = _bssplit(raw, opts) if "bssplit" in opts else None
    if bssplit is not None:
        if "bs" in opts:
            notes.append(f"{raw.file}: {raw.label}: bssplit sets the block sizes, bs is not used (as in fio)")
        # The unit of offsets and sizes: the sizes' greatest common divisor (fio aligns random offsets to the
        # smallest; with sizes that are multiples of it, the two are the same).
        bs = math.gcd(*[b for shares in bssplit for b, _ in shares])
    iodepth = _int(raw, *opts["iodepth"], 1, limits.IODEPTH_MAX) if "iodepth" in opts else 1
    batch = _int(raw, *opts["iodepth_batch_submit"], 0) if "iodepth_batch_submit" in opts else 1
    numjobs = _int(raw, *opts["numjobs"], 1, 4096) if "numjobs" in opts else 1
    # A fio job file runs as fio would run it: fio's default engine is psync. A TOML job's default is io_uring
    # (docs/spec.md), and fio.json's job options then say so, since fio would not.
    engine = "psync" if raw.origin == "fio" else "io_uring"
    fio_engine = None
    if "ioengine" in opts:
        key, v = opts["ioengine"]
        engine = _str(raw, key, v)
        if engine in SYNC_ENGINES:
            notes.append(f"{raw.file}: {raw.label}: ioengine={engine} is simulated as psync (the same synchronous "
                         "path; its own system call is not told apart); the kernel and VM backends run it")
            fio_engine, engine = engine, "psync"
        elif engine not in IOENGINES:
            raise _err(raw, key, f"expected one of {', '.join(IOENGINES + SYNC_ENGINES)}, got {show(engine)}")
    io_uring_options = []
    for name in IO_URING_OPTIONS:
        if name in opts:
            key, v = opts[name]
            if _bool(raw, key, v):
                if engine != "io_uring":
                    raise _err(raw, key, f"an option of fio's io_uring engine, not of ioengine={engine}")
                io_uring_options.append(name)
    if engine == "psync" and iodepth > 1:
        notes.append(f"{raw.file}: {raw.label}: ioengine={fio_engine or engine} is synchronous: iodepth={iodepth} "
                     "behaves as 1")
        iodepth = 1
    batch = min(max(batch, 1), iodepth)  # fio: 0 means 1; never more than iodepth
    buffered = ("direct" in opts and not _bool(raw, *opts["direct"])) or \
        ("buffered" in opts and _bool(raw, *opts["buffered"]))
    if "direct" in opts and "buffered" in opts and _bool(raw, *opts["direct"]) == _bool(raw, *opts["buffered"]):
        raise _err(raw, "direct", "direct and buffered contradict each other")
    buffered_key = "direct=0" if "direct" in opts and not _bool(raw, *opts["direct"]) else "buffered=1"
    if buffered:
        if not ctx.page_cache:
            raise _err(raw, buffered_key, "buffered I/O needs a host preset with a page_cache "
                       "(e.g. i7-3517u-4c); use direct=1")
        if rw not in ("read", "write"):
            raise _err(raw, buffered_key, f"buffered I/O is modelled for rw=read and rw=write only, got rw={rw}")
        if engine != "psync":
            raise _err(raw, buffered_key, f"buffered I/O is modelled with ioengine=psync only, got {engine}")
        if bs % 4096:
            raise _err(raw, "bs", f"buffered I/O needs whole 4 KiB pages, got bs={bs}")
        if "size" not in opts:
            raise _err(raw, "size", "a buffered job needs a size (the size of each process's file)")
    invalidate = _bool(raw, *opts["invalidate"]) if "invalidate" in opts else True
    stonewall = _bool(raw, *opts["stonewall"]) if "stonewall" in opts else False
    # fio fsyncs a write job's file when its writing is done, with either option (one file per process here), and
    # counts the fsync in the job's runtime.
    end_fsync = any(_bool(raw, *opts[k]) for k in ("end_fsync", "fsync_on_close") if k in opts)
    if end_fsync and rw in ("read", "randread"):
        notes.append(f"{raw.file}: {raw.label}: end_fsync has no effect on a job that only reads (as in fio)")
        end_fsync = False
    elif end_fsync and not buffered:
        notes.append(f"{raw.file}: {raw.label}: end_fsync on direct I/O: nothing is dirty, and the drive cache "
                     "flush an fsync sends is not simulated (the kernel backend runs it)")

    def time_opt(name: str, unit: str) -> int | None:
        if name not in opts:
            return None
        key, v = opts[name]
        if v is None:
            raise _err(raw, key, "expected a time, got nothing")
        ns = parse_time(v, default_unit=unit, file=raw.file, key=_err(raw, key, "").key)
        # No time option can be longer than a whole run may be (and the simulator's u64 nanoseconds hold it).
        limits.limit("sim_time").check(ns, file=raw.file, key=_err(raw, key, "").key, what=show(v))
        return ns

    runtime = time_opt("runtime", "s")
    if runtime is not None and runtime <= 0:
        raise _err(raw, opts["runtime"][0], f"expected a time > 0, got {show(opts['runtime'][1])}")
    ramp = time_opt("ramp_time", "s")
    start = time_opt("startdelay", "s") or 0
    thinktime = time_opt("thinktime", "us") or 0
    replaying = "read_iolog" in opts
    # A replay ends with its trace unless time_based asks to replay it again until the runtime ends.
    default_time_based = False if replaying else ctx.default_time_based
    time_based = _bool(raw, *opts["time_based"]) if "time_based" in opts else default_time_based
    rate_iops = 0
    if "rate_iops" in opts:
        key, v = opts["rate_iops"]
        if isinstance(v, str) and "," in v:
            raise _err(raw, key, f"{show(v)}: separate read/write rates are not supported by iosched")
        rate_iops = _int(raw, key, v, 0, limits.U64_MAX)
    if "rate" in opts:
        # fio's rate caps bytes/s per process; with one block size that is a cap of rate / bs I/Os per second.
        key, v = opts["rate"]
        if isinstance(v, str) and "," in v:
            raise _err(raw, key, f"{show(v)}: separate read/write rates are not supported by iosched")
        if "rate_iops" in opts:
            raise _err(raw, key, "give rate or rate_iops, not both")
        if replaying:
            raise _err(raw, key, "a trace replay's records have their own sizes: use replay_time_scale")
        rate_bytes = parse_size(v, file=raw.file, key=_err(raw, key, "").key)
        rate_iops = max(1, -(-rate_bytes // bs)) if rate_bytes else 0
        if rate_iops > limits.U64_MAX:
            raise _err(raw, key, f"expected a rate of at most {limits.U64_MAX} I/Os per second "
                                 f"({limits.U64_MAX} x bs bytes), got {show(v)}")
    prioclass = _int(raw, *opts["prioclass"], 0, 3) if "prioclass" in opts else 0
    prio = _int(raw, *opts["prio"], 0, 7) if "prio" in opts else 0
    cgroup = _str(raw, *opts["cgroup"]) if "cgroup" in opts else ""
    if cgroup:
        check_name(cgroup, file=raw.file, key=_err(raw, opts["cgroup"][0], "").key, what="a cgroup name")
    weight = _int(raw, *opts["cgroup_weight"], 1, 1000) if "cgroup_weight" in opts else 100
    if "cgroup_weight" in opts and not cgroup:
        # fio sets up a cgroup (and its weight) only for a job with `cgroup`; the job runs in the root cgroup.
        notes.append(f"{raw.file}: {raw.label}: cgroup_weight has no effect without cgroup (as in fio)")
        weight = 100
    cpus: list[int] = []
    if "cpus_allowed" in opts:
        key, v = opts["cpus_allowed"]
        try:     # checked against the host's cores before any range is expanded
            cpus = parse_cpu_list(v, file=raw.file, key=_err(raw, key, "").key, cores=ctx.cores)
        except SpecError as e:
            if e.message.startswith("CPU "):
                raise _err(raw, f"cpus_allowed {show(_strval(v))}",
                           f"host has {ctx.cores} cores (0-{ctx.cores - 1})") from None
            raise
    split = False
    if "cpus_allowed_policy" in opts:
        key, v = opts["cpus_allowed_policy"]
        pol = _str(raw, key, v)
        if pol not in ("shared", "split"):
            raise _err(raw, key, f"expected shared or split, got {show(pol)}")
        split = pol == "split"
    group_reporting = _bool(raw, *opts["group_reporting"]) if "group_reporting" in opts else False

    # devices
    by_name = {d.name: i for i, d in enumerate(ctx.devices)}
    if "filename" in opts:
        key, v = opts["filename"]
        fn = _str(raw, key, v)
        idx = []
        for part in _filenames(fn):
            if part in by_name:
                i = by_name[part]
            elif part in ctx.device_aliases:
                i = ctx.device_aliases[part]  # noted once per run (alias_notes), not per job
            else:
                what = "no such device" if part == fn else f"no such device {part}"
                raise _err(raw, f"{key}={fn}", f"{what} (have {', '.join(by_name)})")
            if i not in idx:
                idx.append(i)
    else:
        idx = [0]
    devs = [ctx.devices[i] for i in idx]
    capacity = min(d.capacity_bytes for d in devs)
    lbs = max(d.logical_block_bytes for d in devs)

    def size_opt(name: str) -> int | Percent | None:
        if name not in opts:
            return None
        key, v = opts[name]
        return parse_size(v, file=raw.file, key=_err(raw, key, "").key, allow_percent=True)

    offset = size_opt("offset")
    if isinstance(offset, Percent):
        offset = int(capacity * offset / 100) // lbs * lbs
    offset = offset or 0
    if offset % lbs:
        raise _err(raw, opts["offset"][0], f"expected a multiple of the logical block size {lbs}, got {offset}")
    if offset >= capacity:
        raise _err(raw, opts["offset"][0], f"offset {offset} is beyond the device capacity {capacity}")
    size = size_opt("size")
    size_given = size is not None
    if isinstance(size, Percent):
        size = int(capacity * size / 100) // lbs * lbs
    if size is None:
        size = capacity - offset
    if size <= 0:
        raise _err(raw, opts["size"][0], f"expected a size > 0, got {show(opts['size'][1])}")
    if offset + size > capacity:
        raise _err(raw, opts["size"][0] if size_given else opts["offset"][0],
                   f"offset + size ({offset + size} bytes) exceeds the device capacity ({capacity} bytes)")
    trace_config, summary = _trace(raw, opts, notes) if replaying else (None, None)
    if not replaying and (given := [k for k in REPLAY_OPTIONS if k in opts]):
        raise _err(raw, opts[given[0]][0], "only with read_iolog (a trace to replay)")
    if replaying:
        if bssplit is not None:
            raise _err(raw, opts["bssplit"][0], "not with read_iolog: each record of a trace has its own size")
        rw, bs = "read", lbs  # not used by a replay: each record has its own direction and size
    if bssplit and any(b % lbs for shares in bssplit for b, _ in shares):
        raise _err(raw, opts["bssplit"][0], f"expected block sizes that are multiples of the logical block size "
                                            f"{lbs}, got {show(opts['bssplit'][1])}")
    if bs % lbs:
        raise _err(raw, opts["bs"][0] if "bs" in opts else "bs",
                   f"expected a multiple of the logical block size {lbs}, got {bs}")
    largest = max((b for shares in bssplit for b, _ in shares), default=bs) if bssplit else bs
    if largest > size:
        key = "bssplit" if bssplit else "bs"
        raise _err(raw, opts[key][0] if key in opts else key, f"block size {largest} is larger than size {size}")
    if bs > limits.U32_MAX:
        raise _err(raw, opts["bs"][0] if "bs" in opts else "bs",
                   f"expected a block size below 4 GiB (the simulator's requests), got {show(opts['bs'][1])}")
    increment = size_opt("offset_increment")
    if isinstance(increment, Percent):
        increment = int(capacity * increment / 100) // lbs * lbs
    increment = increment or 0
    if increment > capacity:       # (with numjobs = 1 it is not used; the simulator's u64 must still hold it)
        raise _err(raw, opts["offset_increment"][0], f"expected at most the device capacity ({capacity} bytes), "
                                                     f"got {show(opts['offset_increment'][1])}")
    if increment % lbs or (buffered and increment % 4096):
        raise _err(raw, opts["offset_increment"][0],
                   f"expected a multiple of {4096 if buffered else lbs} bytes, got {increment}")
    if buffered and (offset % 4096 or size % 4096):
        raise _err(raw, "offset" if offset % 4096 else "size",
                   "buffered I/O needs offset and size in whole 4 KiB pages")
    last = offset + (numjobs - 1) * increment + size
    if last > capacity:
        raise _err(raw, opts["offset_increment"][0] if "offset_increment" in opts else "numjobs",
                   f"offset + (numjobs - 1) x offset_increment + size ({last} bytes) exceeds the device capacity "
                   f"({capacity} bytes)")
    if buffered and len(idx) > 1:
        raise _err(raw, "filename", "a buffered job's file is on one device")

    # runtime
    if runtime is None:
        runtime = ctx.default_runtime_ns
    if runtime is None and replaying:
        if time_based:
            raise _err(raw, "runtime", "required: time_based replays the trace again and again until the runtime; "
                       "set runtime= or pass --duration")
        runtime = 3600 * 10**9
        notes.append(f"{raw.file}: {raw.label}: no runtime: replays until the trace ends, capped at 1 h simulated")
    if runtime is None:
        if time_based or not size_given:
            raise _err(raw, "runtime", "required: without runtime fio runs " +
                       ("forever (time_based)" if time_based else "until the whole device is transferred") +
                       "; set runtime= or pass --duration")
        runtime = 3600 * 10**9
        notes.append(f"{raw.file}: {raw.label}: no runtime: runs until size is done, capped at 1 h simulated")
    if ramp is None:
        ramp = ctx.default_ramp_ns

    config = {
        "name": raw.name, "rw": rw, "rwmixread": rwmixread, "bs_bytes": bs, "iodepth": iodepth,
        "iodepth_batch_submit": batch, "numjobs": numjobs, "ioengine": engine, "start_ns": start, "ramp_ns": ramp, "runtime_ns": runtime,
        "time_based": time_based, "rate_iops": rate_iops, "thinktime_ns": thinktime, "prioclass": prioclass,
        "prio": prio, "cgroup": cgroup, "cgroup_weight": weight, "cpus_allowed": cpus, "cpus_split": split,
        "offset_bytes": offset, "size_bytes": size, "devices": idx, "offset_increment_bytes": increment,
        "buffered": buffered, "invalidate": invalidate, "stonewall": stonewall,
    }
    if end_fsync:
        config["end_fsync"] = True
    if SEPARATE_PROCESSES in opts and _bool(raw, *opts[SEPARATE_PROCESSES]):
        config["separate_processes"] = True
    if "random_distribution" in opts:
        distribution = _random_distribution(raw, *opts["random_distribution"])
        if distribution is not None:
            if not rw.startswith("rand"):
                notes.append(f"{raw.file}: {raw.label}: random_distribution has no effect on a sequential job "
                             "(as in fio)")
            config["random_distribution"] = distribution
    if "loops" in opts:
        key, v = opts["loops"]
        loops = _int(raw, key, v, 1, 2**32 - 1)
        if replaying:
            raise _err(raw, key, "not supported with read_iolog by iosched (time_based replays the trace again until "
                                 "the runtime)")
        if time_based and loops > 1:
            notes.append(f"{raw.file}: {raw.label}: loops has no effect on a time_based job: its runtime ends it "
                         "(as in fio)")
        elif loops > 1:
            config["loops"] = loops
    if bssplit is not None:
        config["bssplit"] = [[{"bytes": b, "percent": p} for b, p in shares] for shares in bssplit]
    if "randseed" in opts:
        # fio's randseed: this job's offsets and mix from this seed instead of the run's (fio takes 64 bits).
        config["randseed"] = _int(raw, *opts["randseed"], 0, 2**64 - 1)
    if trace_config is not None:
        config["trace"] = trace_config
    if raw.origin == "toml":
        # fio.json's job options hold what fio would need to run the job as simulated: a TOML job's defaults
        # that are not fio's (io_uring, direct I/O, time-based), and the run's duration and ramp it took.
        implied = {"ioengine": fio_engine or engine, "direct": "0" if buffered else "1"}
        if time_based:
            implied["time_based"] = "1"
        if "runtime" not in opts and runtime < 3600 * 10**9:
            implied["runtime"] = fio_time(runtime)
        if "ramp_time" not in opts and ramp:
            implied["ramp_time"] = fio_time(ramp)
        for k, v in implied.items():
            if k not in opts and k not in display_opts and not (k == "direct" and "buffered" in opts):
                display_opts[k] = v
    lat_percentiles = _bool(raw, *opts["lat_percentiles"]) if "lat_percentiles" in opts else False
    if lat_percentiles:
        config["lat_percentiles"] = True      # the simulator keeps lat's histogram only then
    logs, log_avg_ms = _logs(raw, opts, numjobs, notes)
    if log_avg_ms is not None:
        config["stats_window_ns"] = log_avg_ms * 1_000_000
    return ResolvedJob(config=config, group_reporting=group_reporting, options=display_opts, notes=notes,
                       trace=summary, percentiles=_percentile_list(raw, opts),
                       clat_percentiles=_bool(raw, *opts["clat_percentiles"]) if "clat_percentiles" in opts else True,
                       lat_percentiles=lat_percentiles,
                       io_uring_options=tuple(io_uring_options), fio_engine=fio_engine, logs=logs,
                       log_avg_ms=log_avg_ms)


def fio_time(ns: int) -> str:
    """fio keeps times in microseconds: ms when whole, else us (sub-microsecond parts are rounded up)."""
    if ns % 1_000_000 == 0:
        return f"{ns // 1_000_000}ms"
    return f"{-(-ns // 1000)}us"


def _bssplit(raw: RawJob, opts: dict[str, Any]) -> list[list[tuple[int, int]]]:
    """fio's bssplit, "4k/10:64k/50:32k/40" (one list for both directions) or "READS,WRITES": per direction
    [(bytes, percent)]. Sizes without a percent share what the others leave, as fio splits it; each direction's
    percents add up to 100 (fio refuses more, and so does iosched less)."""
    key, v = opts["bssplit"]
    text = _str(raw, key, v)
    lists = text.split(",")
    if len(lists) > 3 or (len(lists) == 3 and lists[2].strip()):
        raise _err(raw, key, f"{show(text)}: a trim list is not supported (iosched does not issue trims)")
    parsed = []
    for part in lists[:2]:
        shares: list[tuple[int, int | None]] = []
        for entry in part.split(":"):
            size_text, _, pct_text = entry.strip().partition("/")
            if not size_text:
                raise _err(raw, key, f"{show(text)}: expected SIZE/PERCENT entries separated by :")
            size = parse_size(size_text, file=raw.file, key=_err(raw, key, "").key)
            if size < 1 or size > limits.U32_MAX:
                raise _err(raw, key, f"{show(text)}: expected block sizes from 1 byte to below 4 GiB")
            if pct_text.strip() and not pct_text.strip().isdigit():
                raise _err(raw, key, f"{show(text)}: expected a whole percent after /, got {show(pct_text)}")
            shares.append((size, int(pct_text) if pct_text.strip() else None))
        given = sum(p for _, p in shares if p is not None)
        missing = [i for i, (_, p) in enumerate(shares) if p is None]
        if given > 100 or (given < 100 and not missing):
            raise _err(raw, key, f"{show(text)}: the percentages of a list add up to {given}; fio needs 100")
        if missing:
            rest, extra = divmod(100 - given, len(missing))
            shares = [(b, p if p is not None else rest + (1 if missing.index(i) < extra else 0))
                      for i, (b, p) in enumerate(shares)]
        parsed.append([(b, p) for b, p in shares if p])
    if len(parsed) == 1 or not parsed[1]:
        parsed = [parsed[0], parsed[0]]
    return parsed


def _logs(raw: RawJob, opts: dict[str, Any], numjobs: int, notes: list[str]) -> tuple[dict[str, str], int | None]:
    """fio's write_bw_log / write_iops_log / write_lat_log (a file name prefix; bare: the job's name) with
    log_avg_msec. The simulator has each job's rates per sample interval, not each I/O, so it writes fio's averaged
    logs only: log_avg_msec is needed, and the run samples at it."""
    logs = {}
    for option, kind in LOG_OPTIONS.items():
        if option not in opts:
            continue
        key, v = opts[option]
        if v is False:
            continue
        prefix = raw.name if v is None or v is True or v == "" else v
        if not isinstance(prefix, str) or not LOG_PREFIX_RE.match(prefix):
            raise _err(raw, key, f"expected a log file name prefix of letters, digits and ._- (the logs go into the "
                                 f"run's folder, logs/), got {show(prefix)}")
        logs[kind] = prefix
    log_avg_ms = None
    if "log_avg_msec" in opts:
        key, v = opts["log_avg_msec"]
        log_avg_ms = _int(raw, key, v, 1, 3_600_000)
    if logs and log_avg_ms is None:
        option = next(o for o, k in LOG_OPTIONS.items() if k in logs)
        raise _err(raw, option, "the simulator logs averages over log_avg_msec windows, not every I/O: add "
                                "log_avg_msec (e.g. 100)")
    if logs and numjobs > 1:
        notes.append(f"{raw.file}: {raw.label}: numjobs={numjobs}: each log holds the job's {numjobs} processes "
                     "together in the file of the first (the simulator samples a job, not each process)")
    return logs, log_avg_ms


# fio's random_distribution: the value each kind takes without one (fio's defaults), and the kind's parameter name
# in the simulator's RandomDistribution (config.rs).
DISTRIBUTION_DEFAULTS = {"zipf": 1.1, "pareto": 0.2, "normal": 0.0}
DISTRIBUTION_PARAMETER = {"zipf": "theta", "pareto": "h", "normal": "dev_percent"}


def _colon_numbers(text: str) -> list[float] | None:
    """fio's colon-separated numbers (percentile_list, a distribution's values); None if one is not a finite number."""
    try:
        numbers = [float(x) for x in text.split(":")]
    except ValueError:
        return None
    return numbers if all(math.isfinite(x) for x in numbers) else None


def _random_distribution(raw: RawJob, key: str, v: Any) -> dict[str, Any] | None:
    """random_distribution=random | zipf[:theta[:center]] | pareto[:h[:center]] | normal[:dev[:center]], with fio's
    defaults (zipf 1.1, pareto 0.2, normal 0; center: drawn for zipf and pareto, 0.5 for normal) and ranges.
    None: uniform."""
    text = _str(raw, key, v).strip()
    usage = "random, zipf[:theta[:center]], pareto[:h[:center]] or normal[:dev[:center]]"
    if "," in text:
        raise _err(raw, key, f"{show(text)}: separate read/write distributions are not supported by iosched")
    kind, *values = text.split(":")
    if kind in ("zoned", "zoned_abs"):
        raise _err(raw, key, f"{show(text)}: zoned distributions are not supported by iosched (expected {usage})")
    if kind not in ("random", *DISTRIBUTION_DEFAULTS) or len(values) > (0 if kind == "random" else 2):
        raise _err(raw, key, f"expected {usage}, got {show(text)}")
    if kind == "random":
        return None
    numbers = _colon_numbers(":".join(values)) if values else []
    if numbers is None:
        raise _err(raw, key, f"expected {usage} with numbers, got {show(text)}")
    value = numbers[0] if numbers else DISTRIBUTION_DEFAULTS[kind]
    center = numbers[1] if len(numbers) > 1 else (0.5 if kind == "normal" else None)
    if kind == "zipf" and (value < 0 or value == 1):
        raise _err(raw, key, f"{show(text)}: zipf's theta must be >= 0 and not 1")
    if kind == "pareto" and not 0 < value < 1:
        raise _err(raw, key, f"{show(text)}: pareto's h must be between 0 and 1 (exclusive)")
    if kind == "normal" and not 0 <= value < 100:
        raise _err(raw, key, f"{show(text)}: normal's deviation must be >= 0 and < 100 (percent of the region)")
    if center is not None and not 0 <= center <= 1:
        raise _err(raw, key, f"{show(text)}: the center must be within 0..1")
    return {"kind": kind, DISTRIBUTION_PARAMETER[kind]: value, "center": center}


def random_distribution_option(distribution: dict[str, Any]) -> str:
    """fio's random_distribution value for a resolved distribution (the kernel backend's job file)."""
    kind = distribution["kind"]
    text = f"{kind}:{distribution[DISTRIBUTION_PARAMETER[kind]]:g}"
    return text if distribution["center"] is None else f"{text}:{distribution['center']:g}"


PERCENTILES_MAX = 20    # fio's FIO_IO_U_LIST_MAX_LEN


def _percentile_list(raw: RawJob, opts: dict[str, Any]) -> tuple[float, ...] | None:
    """percentile_list=99:99.9:99.99: the percentiles fio.json lists, in ascending order as fio sorts them."""
    if "percentile_list" not in opts:
        return None
    key, v = opts["percentile_list"]
    sv = _str(raw, key, v)
    values = _colon_numbers(sv) or []
    if not values or len(values) > PERCENTILES_MAX or not all(0 < p <= 100 for p in values):
        raise _err(raw, key, f"expected 1-{PERCENTILES_MAX} percentiles in (0, 100] separated by ':' (e.g. "
                             f"99:99.9), got {show(sv)}")
    return tuple(sorted(values))


def _trace(raw: RawJob, opts: dict[str, tuple[str, Any]],
           notes: list[str]) -> tuple[dict[str, Any], replay_mod.TraceSummary | None]:
    """The TraceConfig of a replay job (config.rs), after checking the trace with the simulator's parser."""
    for k in ("rw", "bs", "rwmixread", "rwmixwrite"):
        if k in opts:
            raise _err(raw, opts[k][0], "not used with read_iolog: the trace gives each I/O's direction and size")
    key, v = opts["read_iolog"]
    value = _str(raw, key, v)
    base = Path(raw.file).parent
    path = replay_mod.find_trace(value, base)
    if path is None:
        raise _err(raw, key, f"no such file: {show(value)} (looked in {base.as_posix()}/, the working directory "
                             f"and the sample traces in {replay_mod.traces_dir()}/)")
    fmt = None
    if "read_iolog_format" in opts:
        fkey, fv = opts["read_iolog_format"]
        fmt = _str(raw, fkey, fv)
        if fmt not in replay_mod.FORMATS:
            raise _err(raw, fkey, f"expected one of {', '.join(replay_mod.FORMATS)}, got {show(fmt)}")
    scale = _int(raw, *opts["replay_time_scale"], 1, limits.U32_MAX) if "replay_time_scale" in opts else 100
    no_stall = _bool(raw, *opts["replay_no_stall"]) if "replay_no_stall" in opts else False
    if no_stall and "replay_time_scale" in opts:
        notes.append(f"{raw.file}: {raw.label}: replay_time_scale has no effect with replay_no_stall=1")
    lun = None
    if "replay_lun" in opts:
        lkey, lv = opts["replay_lun"]
        if isinstance(lv, int) and not isinstance(lv, bool) and lv >= 0:
            lun = str(lv)
        elif isinstance(lv, str) and lv.strip():
            lun = lv.strip()
        else:
            raise _err(raw, lkey, "expected a LUN or disk number, or major,minor for a blkparse trace, got "
                                  f"{'nothing' if lv is None else show(lv)}")
    action = "D"
    if "replay_blkparse_action" in opts:
        akey, av = opts["replay_blkparse_action"]
        action = _str(raw, akey, av)
        if action not in replay_mod.BLKPARSE_ACTIONS:
            raise _err(raw, akey, f"expected D (issued to the driver) or Q (queued), got {show(action)}")
    display = path.as_posix()
    try:
        trace_bytes = path.stat().st_size
    except OSError as e:
        raise _err(raw, key, f"cannot read {display}: {e.strerror}") from None
    limits.limit("trace_bytes").check(trace_bytes, file=raw.file, key=_err(raw, key, "").key,
                                      what=f"{display} is {limits.format_value(trace_bytes, 'bytes')}")
    try:
        summary = replay_mod.summarize(path, display, fmt, lun, action)
    except SpecError as e:
        if e.key is None and e.message.startswith("replay_lun: "):
            raise _err(raw, opts["replay_lun"][0], e.message.removeprefix("replay_lun: ")) from None
        raise e.with_context(f"(read_iolog of {raw.label} in {raw.file})") from None
    if summary is not None:
        fmt = summary.format
        if "replay_blkparse_action" in opts and fmt != "blkparse":
            raise _err(raw, opts["replay_blkparse_action"][0], f"only for blkparse traces ({display} is {fmt})")
        luns = ", ".join(summary.luns) + (", ..." if summary.luns_truncated else "")
        if summary.records == 0:
            if lun is not None:
                raise _err(raw, opts["replay_lun"][0], f"no reads or writes for {show(lun)} in {display} "
                                                       f"(it has: {luns or 'none'})")
            raise _err(raw, key, f"{display} holds no reads or writes to replay")
        if lun is None and len(summary.luns) > 1:
            notes.append(f"{raw.file}: {raw.label}: {display} has LUNs {luns}: all are replayed onto the job's "
                         "region (replay_lun picks one)")
    config = {"path": str(path.resolve()), "format": fmt, "lun": lun, "blkparse_action": action,
              "time_scale_percent": scale, "no_stall": no_stall, "sha256": replay_mod.sha256(path)}
    return config, summary
