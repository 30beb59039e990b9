"""fio's units: sizes (kb_base=1024), percentages of the device, and times with per-option default units."""

from __future__ import annotations

import math
import re

from .errors import SpecError, show

_SIZE_MULT = {
    "": 1,
    "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
    "p": 1 << 50, "pb": 1 << 50, "pib": 1 << 50,
}

_TIME_NS = {
    "ns": 1, "nsec": 1,
    "us": 1_000, "usec": 1_000,
    "ms": 1_000_000, "msec": 1_000_000,
    "s": 1_000_000_000, "sec": 1_000_000_000,
    "m": 60_000_000_000, "min": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
}

_NUM = r"(\d+(?:\.\d*)?|\.\d+)"
# A number written with more digits than this is no size or time (and Python refuses to read > 4300 digits).
_DIGITS_MAX = 40
_SIZE_RE = re.compile(r"\s*" + _NUM + r"\s*([a-zA-Z]*)\s*")
_PCT_RE = re.compile(r"\s*" + _NUM + r"\s*%\s*")
_TIME_RE = re.compile(r"\s*" + _NUM + r"\s*([a-zA-Z]*)\s*")


class Percent(float):
    """A size given as a percentage of the device (fio's ``size=50%``)."""


def parse_size(value: object, *, file: str | None = None, key: str | None = None,
               allow_percent: bool = False) -> int | Percent:
    """Bytes from an int or a fio size string (``4k``, ``4KiB``, ``1g``, ``512``; base 1024)."""
    expected = "expected a size like 4k, 1M or 512" + (" or a percentage like 50%" if allow_percent else "")
    if isinstance(value, bool):
        raise SpecError(file, key, f"{expected}, got {show(value)}")
    if isinstance(value, int):
        if value < 0:
            raise SpecError(file, key, f"{expected}, got {value}")
        return value
    if not isinstance(value, str):
        raise SpecError(file, key, f"{expected}, got {show(value)}")
    if allow_percent:
        m = _PCT_RE.fullmatch(value)
        if m:
            pct = float(m.group(1))
            if not 0 < pct <= 100:
                raise SpecError(file, key, f"expected a percentage in (0, 100], got {show(value)}")
            return Percent(pct)
    m = _SIZE_RE.fullmatch(value)
    if not m or m.group(2).lower() not in _SIZE_MULT or len(m.group(1)) > _DIGITS_MAX:
        raise SpecError(file, key, f"{expected}, got {show(value)}")
    n = float(m.group(1)) * _SIZE_MULT[m.group(2).lower()] if "." in m.group(1) else \
        int(m.group(1)) * _SIZE_MULT[m.group(2).lower()]
    if n != int(n):
        raise SpecError(file, key, f"{expected} (a whole number of bytes), got {show(value)}")
    return int(n)


def parse_time(value: object, *, default_unit: str = "s", file: str | None = None,
               key: str | None = None) -> int:
    """Nanoseconds from a number (in ``default_unit``) or a string with an optional suffix (ns, us, ms, s, m, h)."""
    expected = f"expected a time like 2s, 200ms or a number of {_UNIT_NAMES[default_unit]}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(file, key, f"{expected}, got {show(value)}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(file, key, f"{expected} (a finite one), got {show(value)}")
        if value < 0:
            raise SpecError(file, key, f"{expected}, got {show(value)}")
        if isinstance(value, int):
            return value * _TIME_NS[default_unit]
        ns = value * _TIME_NS[default_unit]
        if not math.isfinite(ns):
            raise SpecError(file, key, f"{expected} (a finite one), got {show(value)}")
        return int(round(ns))
    m = _TIME_RE.fullmatch(value)
    unit = m.group(2).lower() if m else None
    if not m or (unit and unit not in _TIME_NS) or len(m.group(1)) > _DIGITS_MAX:
        raise SpecError(file, key, f"{expected}, got {show(value)}")
    mult = _TIME_NS[unit or default_unit]
    num = m.group(1)
    return int(num) * mult if "." not in num else int(round(float(num) * mult))


_UNIT_NAMES = {"s": "seconds", "us": "microseconds", "ms": "milliseconds", "ns": "nanoseconds"}


def _format_scaled(n: float, base: int, prefixes: tuple[str, ...]) -> str:
    for prefix in prefixes:
        if abs(n) < base or prefix == prefixes[-1]:
            return f"{n:.0f}B" if prefix == "" else f"{n:.1f}{prefix}B"
        n /= base
    raise AssertionError("unreachable")  # pragma: no cover


def format_bytes_iec(n: float) -> str:
    """fio-style binary size: 56.6MiB."""
    return _format_scaled(n, 1024, ("", "Ki", "Mi", "Gi", "Ti", "Pi"))


def format_bytes_si(n: float) -> str:
    """fio-style decimal size: 59.4MB."""
    return _format_scaled(n, 1000, ("", "k", "M", "G", "T", "P"))


def format_count(n: float) -> str:
    """fio-style IOPS: 14.5k, 1234, 1.20M."""
    if n < 1000:
        return f"{n:.0f}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def parse_cpu_list(value: object, *, file: str | None = None, key: str | None = None,
                   cores: int | None = None) -> list[int]:
    """fio's cpus_allowed syntax: ``0-3,6`` → [0, 1, 2, 3, 6] (sorted, unique). With ``cores`` (the host's), every
    CPU must be below it, checked before any range is expanded (so "0-99999999" is an error, not 4 GiB)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise SpecError(file, key, f'expected a CPU list like "0-3,6", got {show(value)}')
    cpus: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise SpecError(file, key, f'expected a CPU list like "0-3,6", got {show(value)}')
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise SpecError(file, key, f'expected a CPU list like "0-3,6" (ranges low-high), got {show(value)}')
        if cores is not None and hi >= cores:
            raise SpecError(file, key, f"CPU {hi} in {show(value)}: the host has {cores} cores (0-{cores - 1})")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)
