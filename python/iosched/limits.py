"""Limits on what one command may ask for: checked before anything is expanded, allocated or simulated, with an
error that names the file, the job and the option, the limit and how to raise it.

Each limit has a default that every shipped experiment and paper reproduction stays well under, and an environment
variable that overrides it (``IOSCHED_MAX_SIM_TIME=48h iosched run ...``): limits are about the machine a command
runs on, not about the experiment, so they are not spec keys, and they never change a result (a run within them is
the same run whatever they are). docs/spec.md ("Limits") lists them; a test keeps that list and `LIMITS` in step.

Memory: within the default limits one simulated run stays under `MEMORY_BOUND_BYTES` of resident memory (measured
for the worst case each limit allows, see docs/spec.md); the fuzzer holds every input to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import SpecError
from .units import parse_size, parse_time

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
S_NS = 1_000_000_000

# Fixed bounds (not limits: the simulator's field types, or what a kernel takes).
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
# io_uring rings hold at most 32768 entries and the kernel's default aio-max-nr is 65536: no fio job goes deeper.
IODEPTH_MAX = 65536
# Tables and arrays in a spec nest at most this deep (a real spec: 3).
NESTING_MAX = 32
# A scheduler's time-series metrics per device when the simulator is not built to say (a spec is then only
# checked, not run); with it, each scheduler's own count is used (spec.timeseries_values).
SCHEDULER_METRICS_MAX = 32

MEMORY_BOUND_BYTES = 2 * GIB


@dataclass(frozen=True)
class Limit:
    env: str                            # the environment variable that overrides it
    default: int
    unit: str                           # "ns", "bytes" or "" (a count)
    what: str                           # in messages: "simulated time per run"
    advice: str                         # how to stay under it, in messages

    def value(self) -> int:
        """The limit now: the environment's value, else the default."""
        text = os.environ.get(self.env)
        if text is None or not text.strip():
            return self.default
        return _parse(self, text)

    def show(self, n: int | None = None) -> str:
        return format_value(self.value() if n is None else n, self.unit)

    def check(self, n: int, *, file: str | None, key: str | None, what: str = "") -> None:
        """Raise a SpecError at (file, key) if ``n`` exceeds the limit; ``what`` says what ``n`` is."""
        limit = self.value()
        if n > limit:
            got = what or format_value(n, self.unit)
            raise SpecError(file, key, f"{got}: more than the limit of {self.show(limit)} {self.what} "
                                       f"({self.env} raises it); {self.advice}")


def _parse(limit: Limit, text: str) -> int:
    try:
        if limit.unit == "ns":
            n = parse_time(text, file=limit.env)
        elif limit.unit == "bytes":
            n = parse_size(text, file=limit.env)
        else:
            n = int(text.strip().replace("_", ""))
    except (SpecError, ValueError):
        kind = {"ns": "a time like 2h", "bytes": "a size like 4G"}.get(limit.unit, "a whole number")
        raise SpecError(limit.env, None, f"expected {kind}, got {text.strip()!r}") from None
    if n < 1:
        raise SpecError(limit.env, None, f"expected a limit >= 1, got {text.strip()!r}")
    return int(n)


def _number(v: float) -> str:
    return f"{v:,.0f}" if v >= 1000 else f"{v:.4g}"


def format_value(n: int, unit: str) -> str:
    if unit == "ns":
        for div, suffix in ((3600 * S_NS, "h"), (60 * S_NS, "min"), (S_NS, "s"), (1_000_000, "ms"), (1000, "us")):
            if n >= div:
                return f"{_number(n / div)} {suffix}"
        return f"{n} ns"
    if unit == "bytes":
        for div, suffix in ((1 << 40, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
            if n >= div:
                return f"{_number(n / div)} {suffix}"
        return f"{n} B"
    return f"{n:,}"


LIMITS: dict[str, Limit] = {
    "sim_time": Limit("IOSCHED_MAX_SIM_TIME", 24 * 3600 * S_NS, "ns", "of simulated time per run",
                      "give a shorter runtime (time options count towards it: startdelay + ramp_time + runtime, "
                      "summed over stonewall groups)"),
    "runs": Limit("IOSCHED_MAX_RUNS", 10_000, "", "runs per command (sweep points x repeat)",
                  "sweep fewer values or repeat less"),
    "processes": Limit("IOSCHED_MAX_PROCESSES", 4096, "", "processes per run (jobs x numjobs)",
                       "use fewer jobs or a smaller numjobs"),
    "inflight": Limit("IOSCHED_MAX_INFLIGHT", 262_144, "", "I/Os in flight per run (iodepth x numjobs, summed)",
                      "use a smaller iodepth or fewer processes"),
    "samples": Limit("IOSCHED_MAX_SAMPLES", 1_000_000, "", "time-series values per run",
                     "use a longer sample_interval (or a shorter run)"),
    "trace_bytes": Limit("IOSCHED_MAX_TRACE_BYTES", 8 * GIB, "bytes", "per trace file",
                         "replay a part of the trace (split the file)"),
    "spec_bytes": Limit("IOSCHED_MAX_SPEC_BYTES", 1 * MIB, "bytes", "per spec or job file",
                        "a spec this large is not a hand-written one: check the file"),
    "buffered_bytes": Limit("IOSCHED_MAX_BUFFERED_BYTES", 64 * GIB, "bytes",
                            "of buffered (direct=0) files per run (the page cache's state per page)",
                            "use smaller sizes for buffered jobs"),
}


def limit(name: str) -> Limit:
    return LIMITS[name]


def read_input(path: Path, display: str, what: str) -> bytes:
    """A spec or job file's bytes (``display``: the file as the user named it), its size checked against the limit
    before it is read."""
    spec_bytes = limit("spec_bytes")
    try:
        size = path.stat().st_size
        spec_bytes.check(size, file=display, key=None, what=f"a {what} file of {format_value(size, 'bytes')}")
        with open(path, "rb") as f:
            data = f.read(spec_bytes.value() + 1)
    except OSError as e:
        raise SpecError(display, None, f"cannot read {what} file: {e.strerror}") from None
    spec_bytes.check(len(data), file=display, key=None, what=f"a {what} file of more than "
                                                             f"{format_value(spec_bytes.value(), 'bytes')}")
    return data


def check_int(value: int, lo: int, hi: int, err: Callable[[str], SpecError], want: str = "an integer") -> int:
    """``value`` within lo..hi (a field type's range), else err(message) with the value as written."""
    if not lo <= value <= hi:
        raise err(f"expected {want} in {lo}..{hi}, got {value}")
    return value


def nesting_depth(value: object, limit: int = NESTING_MAX) -> int:
    """How deep tables and arrays nest in ``value`` (iteratively: a deep document cannot exhaust the stack); stops
    counting once past ``limit``."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((c, depth) for c in children)
    return deepest
