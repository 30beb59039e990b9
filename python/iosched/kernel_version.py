"""The Linux version a run models or ran on, as "MAJOR.MINOR" (the simulator's ``host.kernel``: see
docs/simulator.md#kernel-versions for what it selects)."""

from __future__ import annotations

import os
import re

from .errors import SpecError, show

_VERSION = re.compile(r"(\d{1,3})\.(\d{1,3})")
_RELEASE = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\D|$)")


def check(value: object, *, file: str | None, key: str) -> str:
    """``value`` if it is a "MAJOR.MINOR" string, else a SpecError naming ``file`` and ``key``."""
    if not isinstance(value, str) or not _VERSION.fullmatch(value) or int(value.split(".")[0]) < 2:
        raise SpecError(file, key, f'expected a kernel version "MAJOR.MINOR" such as "6.3", got {show(value)}')
    return value


def from_release(release: str) -> str | None:
    """MAJOR.MINOR of a ``uname -r`` release ("6.3.8-custom" → "6.3"); None if it does not start with one."""
    m = _RELEASE.match(release)
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def running() -> tuple[str, str | None]:
    """This machine's kernel: (``uname -r``, its MAJOR.MINOR or None)."""
    release = os.uname().release
    return release, from_release(release)
