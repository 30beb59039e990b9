"""A resolved run → a fio job file for Debian's fio 3.33.

Every value is written from the resolved JobConfig (bytes, nanoseconds, enums), not copied from the user's text, so
fio reads exactly what the simulator was given.  Paths in the file are the devices' (or the test file's) and
relative log names: fio runs in the run's folder.
"""

from __future__ import annotations

import re

from ...errors import SpecError
from ...fiojob import SEPARATE_PROCESS_GAP_NS, fio_time, random_distribution_option
from ...spec import ResolvedRun

NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+")
PATH_RE = re.compile(r"/[A-Za-z0-9_./+-]+")


def check_job_names(run: ResolvedRun) -> None:
    for j in run.jobs:
        name = j.config["name"]
        if not NAME_RE.fullmatch(name) or name == "global":
            raise SpecError(run.spec_file, f'job "{name}"', "the kernel backend needs job names of letters, digits "
                            "and _ . + - (fio section names), other than global")
        if "trace" in j.config:
            raise SpecError(run.spec_file, f'job "{name}": read_iolog', "trace replay runs in the simulator only: "
                            "fio replays its own iolog format and binary blktrace, not these text traces")


def seed_options(seed: int) -> list[tuple[str, int]]:
    """fio options that make ``seed`` set a job's random offsets. With fio's default randrepeat=1, fio 3.33 (Debian
    bookworm's) seeds the offsets by the job's thread number alone and ignores randseed for them; with randrepeat=0
    and randseed given, every fio version seeds all its generators from randseed (and the thread number). fio 3.33
    reads randseed as a signed 64-bit number and drops a job given 2^63 or more, so such seeds are written as their
    two's complement (the same 64 bits)."""
    seed %= 1 << 64
    return [("randrepeat", 0), ("randseed", seed - (1 << 64) if seed >> 63 else seed)]


# The shared seed of separate processes is the run's seed shifted by this many bits, so that it is divisible by the
# power of two in any thread number below 2^16 (fio allows far fewer jobs).
_SHARED_SEED_SHIFT = 16


def thread_one_seed(seed: int, thread_number: int) -> int:
    """The randseed that makes fio's job number ``thread_number`` (fio numbers a file's jobs and their clones from 1,
    in order) draw what its job number 1 draws from the separate processes' shared seed, ``seed`` << 16 (mod 2^64).
    fio 3.33 seeds job k's generator i with (randseed x c^(4+i)) x k + i, mod 2^64 (init.c setup_random_seeds), so
    job k needs randseed x k = shared seed: with k = 2^a x m (m odd), (shared >> a) x m^-1."""
    if not 1 <= thread_number < 1 << _SHARED_SEED_SHIFT:
        raise ValueError(f"fio thread number {thread_number}")
    shared = (seed << _SHARED_SEED_SHIFT) % (1 << 64)
    a = (thread_number & -thread_number).bit_length() - 1
    return ((shared >> a) * pow(thread_number >> a, -1, 1 << 64)) % (1 << 64)


def _split(c: dict) -> bool:
    """cpus_allowed_policy=split over several CPUs, where fio's choice of a clone's CPU differs from the simulator's."""
    return bool(c["cpus_split"]) and len(c["cpus_allowed"]) > 1


def _per_clone(c: dict) -> str | None:
    """Why a job's clones need sections of their own (`_sections`), or None when one section with numjobs will do."""
    if c.get("separate_processes"):
        return "separate processes, each drawing fio's first job's offsets"
    return "each on the CPU the simulator gives it" if _split(c) else None


def _sections(c: dict, options: list[tuple[str, object]], seed: int,
              first_thread: int) -> list[list[tuple[str, object]]]:
    """A job's fio sections: one, or one per clone where fio would not run the clones as the simulator does.
    - ``separate_processes``: each clone draws job 1's offsets from the shared seed (`thread_one_seed`) and starts
      SEPARATE_PROCESS_GAP_NS after the one before, as the simulator starts them.
    - ``cpus_allowed_policy=split`` over several CPUs: the simulator pins clone i to the i-th CPU of the list
      (wrapping); fio counts from the job's first thread number in the whole file (backend.c, fio_cpus_split with
      thread_number - 1), so a job after others may start elsewhere in the list. Each section gets its clone's CPU.
    The sections are fio's jobs first_thread, first_thread + 1, ... as numjobs clones would be, so a clone that is
    not a separate process keeps the seed and random stream it has as a clone. All are in the first one's reporting
    group (no new_group after it), only the first waits at a stonewall (the others would wait for their siblings),
    and each starts at its clone's offset (fio adds offset_increment per clone within a section, 0 in a section of
    one)."""
    if _per_clone(c) is None:
        return [options]
    separate, split = bool(c.get("separate_processes")), _split(c)
    sections = []
    for k in range(c["numjobs"]):
        start_ns = c["start_ns"] + (k * SEPARATE_PROCESS_GAP_NS if separate else 0)
        dropped = {"startdelay", "randrepeat", "randseed", "offset_increment", "cpus_allowed_policy",
                   *(("new_group", "stonewall") if k else ())}
        offset = c["offset_bytes"] + k * c["offset_increment_bytes"]
        replaced = {"numjobs": 1, "offset": offset}
        if split:
            replaced["cpus_allowed"] = c["cpus_allowed"][k % len(c["cpus_allowed"])]
        section = [(key, replaced.get(key, v)) for key, v in options if key not in dropped]
        if start_ns:
            section.append(("startdelay", fio_time(start_ns)))
        section += seed_options(thread_one_seed(seed, first_thread + k) if separate else seed)
        sections.append(section)
    return sections


def writes(run: ResolvedRun) -> bool:
    return any(j.config["rw"] not in ("read", "randread") for j in run.jobs)


def iops_log_prefix(job, index: int) -> str:
    """The prefix of the IOPS log fio writes for job ``index`` under logs/: the job's write_iops_log, else j<index>."""
    return job.logs.get("iops", f"j{index}")


def job_file(run: ResolvedRun, targets: list[str], cgroup_names: dict[str, str] | None = None, *,
             log_interval_ms: int | None = None) -> tuple[str, list[str]]:
    """The job file text and notes.  ``targets[i]``: what stands for the spec's device i (a device node or a
    file); ``cgroup_names``: spec cgroup → the path fio joins under its cgroup mount."""
    check_job_names(run)
    for t in targets:
        if not PATH_RE.fullmatch(t):
            raise SpecError("--device", t, "paths of letters, digits and _ . / + - only")
    notes: list[str] = []
    lines = [f"; generated by iosched for run {run.experiment!s:.60} (repetition {run.repetition})",
             f"; devices: " + ", ".join(f"{d['name']} -> {t}" for d, t in zip(run.devices, targets)), ""]
    thread = 1   # fio's number of the next job (clones included), from 1 in file order
    for i, j in enumerate(run.jobs):
        c = j.config
        o: list[tuple[str, object]] = []
        files = [targets[d] for d in c["devices"]]
        o.append(("filename", ":".join(f.replace(":", "\\:") for f in files)))
        o.append(("rw", c["rw"]))
        if c["rw"] in ("randrw", "readwrite"):
            o.append(("rwmixread", c["rwmixread"]))
        if "bssplit" in c:    # fio takes it over bs
            o.append(("bssplit", ",".join(":".join(f"{s['bytes']}/{s['percent']}" for s in shares)
                                          for shares in c["bssplit"])))
        o += [("bs", c["bs_bytes"]), ("ioengine", j.fio_engine or c["ioengine"]), ("iodepth", c["iodepth"]),
              ("iodepth_batch_submit", c["iodepth_batch_submit"]), ("numjobs", c["numjobs"]),
              ("direct", 0 if c["buffered"] else 1)]
        if c["buffered"]:
            o.append(("invalidate", 1 if c["invalidate"] else 0))
        o.append(("offset", c["offset_bytes"]))
        # fio splits `size` among a job's files; `filesize` gives each file (device) the region, as iosched does.
        o.append(("size" if len(files) == 1 else "filesize", c["size_bytes"]))
        if c["offset_increment_bytes"]:
            o.append(("offset_increment", c["offset_increment_bytes"]))
        if c["time_based"]:
            o.append(("time_based", 1))
        o.append(("runtime", fio_time(c["runtime_ns"])))
        for key, ns in (("ramp_time", c["ramp_ns"]), ("startdelay", c["start_ns"]), ("thinktime", c["thinktime_ns"])):
            if ns:
                if ns % 1000:
                    notes.append(f"job {c['name']}: {key} rounded up to whole microseconds for fio")
                o.append((key, fio_time(ns)))
        if c["rate_iops"]:
            o.append(("rate_iops", c["rate_iops"]))
        if c["prioclass"] or c["prio"]:
            # fio sets ioprio (class, level) from both; a level alone means best-effort, as Linux reads it.
            o.append(("prioclass", c["prioclass"] or 2))
            o.append(("prio", c["prio"]))
        if c["cgroup"]:
            if not cgroup_names or c["cgroup"] not in cgroup_names:
                raise AssertionError(f"cgroup {c['cgroup']} was not created")
            o.append(("cgroup", cgroup_names[c["cgroup"]]))
        if c["cpus_allowed"]:
            o.append(("cpus_allowed", ",".join(str(x) for x in c["cpus_allowed"])))
            if c["cpus_split"]:
                o.append(("cpus_allowed_policy", "split"))
        # Each job its own reporting group: fio applies group_reporting per group, and without new_group every
        # job up to a stonewall is one group (a job with group_reporting beside one without loses its report).
        o.append(("new_group", 1))
        if j.group_reporting:
            o.append(("group_reporting", 1))
        if c["stonewall"]:
            o.append(("stonewall", 1))
        if c.get("end_fsync"):
            o.append(("end_fsync", 1))
        if c["rw"].startswith("rand") or c["rw"] == "randrw":
            # The simulator draws random offsets without fio's random map (norandommap).
            o.append(("norandommap", 1))
        if c.get("loops"):
            o.append(("loops", c["loops"]))
        if c.get("random_distribution"):
            o.append(("random_distribution", random_distribution_option(c["random_distribution"])))
        seed = c.get("randseed", run.seed)
        o += seed_options(seed)
        if j.percentiles:
            o.append(("percentile_list", ":".join(f"{p:g}" for p in j.percentiles)))
        if not j.clat_percentiles:
            o.append(("clat_percentiles", 0))
        if j.lat_percentiles:
            o.append(("lat_percentiles", 1))
        o += [(name, 1) for name in j.io_uring_options]
        if log_interval_ms:
            # iosched's time series comes from the IOPS log: the job's own when it asks for one (the run then
            # samples at its log_avg_msec), else one of iosched's.
            o += [("write_iops_log", f"logs/{iops_log_prefix(j, i)}"), ("log_avg_msec", log_interval_ms)]
        for kind in ("bw", "lat"):
            if kind in j.logs:
                o.append((f"write_{kind}_log", f"logs/{j.logs[kind]}"))
        if c.get("separate_processes") and thread + c["numjobs"] > 1 << _SHARED_SEED_SHIFT:
            raise SpecError(run.spec_file, f'job "{c["name"]}": separate_processes', f"the run's fio jobs up to this "
                            f"one's clones number {thread + c['numjobs'] - 1}; seeding separate processes takes at "
                            f"most {(1 << _SHARED_SEED_SHIFT) - 1}")
        why = _per_clone(c)
        if why:
            lines.append(f"; {c['name']}: its {c['numjobs']} clone(s) as sections of their own ({why})")
        for section in _sections(c, o, seed, thread):
            lines.append(f"[{c['name']}]")
            lines += [f"{k}={v}" for k, v in section]
            lines.append("")
        thread += c["numjobs"]
    return "\n".join(lines), notes


def precondition_file(target: str, capacity_bytes: int, lbs: int, *, random_factor: int = 2) -> str:
    """Seed 000 §2.1: write the whole device sequentially, then random 4 KiB writes of ``random_factor`` times
    its capacity (the paper: 2 TiB on 1 TB drives).  Scaled to the device, so a loop device takes seconds."""
    if not PATH_RE.fullmatch(target):
        raise SpecError("--device", target, "paths of letters, digits and _ . / + - only")
    size = capacity_bytes // (1 << 20) * (1 << 20)
    bs = max(4096, lbs)
    return "\n".join([
        "; generated by iosched: seed 000 §2.1 preconditioning (sequential fill, then random writes)",
        "[global]", f"filename={target}", "ioengine=libaio", "direct=1", "iodepth=32", f"size={size}", "",
        "[sequential-fill]", "rw=write", "bs=1048576", "",
        "[random-writes]", "stonewall", "rw=randwrite", f"bs={bs}", "norandommap=1", "randrepeat=0",
        f"io_size={size * random_factor}", "",
    ])
