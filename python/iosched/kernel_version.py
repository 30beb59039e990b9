"""The Linux version a run models or ran on, as "MAJOR.MINOR" or "MAJOR.MINOR.PATCH" (the simulator's
``host.kernel``: see docs/simulator.md#kernel-versions for what it selects; a stable release may carry backports)."""

from __future__ import annotations

import os
import re

from .errors import SpecError, show

_VERSION = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?")
_RELEASE = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?(?:\D|$)")


def check(value: object, *, file: str | None, key: str) -> str:
    """``value`` if it is a "MAJOR.MINOR" or "MAJOR.MINOR.PATCH" string, else a SpecError naming ``file`` and
    ``key``."""
    if not isinstance(value, str) or not _VERSION.fullmatch(value) or int(value.split(".")[0]) < 2:
        raise SpecError(file, key, 'expected a kernel version "MAJOR.MINOR" or "MAJOR.MINOR.PATCH" such as "6.3" or '
                                   f'"6.12.117", got {show(value)}')
    return value


def from_release(release: str) -> str | None:
    """MAJOR.MINOR[.PATCH] of a ``uname -r`` release ("6.3.8-custom" → "6.3.8", "6.12.117+deb12-amd64" →
    "6.12.117", "6.3-rc1" → "6.3"); None if it does not start with one. A stable release keeps its patch level: it
    may carry backports the simulator models."""
    m = _RELEASE.match(release)
    if not m:
        return None
    version = f"{int(m.group(1))}.{int(m.group(2))}"
    return f"{version}.{int(m.group(3))}" if m.group(3) and int(m.group(3)) else version


# A Debian kernel names its stable release in ``uname -v`` ("#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-...)").
_DEBIAN_BUILD = re.compile(r"\bDebian (\d{1,3}\.\d{1,3}\.\d{1,3})-")


def refined(release: str, upstream: str | None) -> str | None:
    """`from_release` of ``release``, or ``upstream``'s version (a Debian package's, "6.1.192-3") where it is of the
    same line and more exact: Debian's 6.1 kernels say 6.1.0-57-amd64 of a 6.1.192 build, and the simulator models
    some of its backports."""
    ours = from_release(release)
    named = from_release(upstream or "")
    if ours is None or named is None or named.split(".")[:2] != ours.split(".")[:2]:
        return ours
    return named if len(named.split(".")) > len(ours.split(".")) else ours


def from_uname(release: str, version: str = "") -> str | None:
    """`from_release` of ``uname -r``, refined by the stable release ``uname -v`` names ("... Debian 6.1.192-3 ...")
    where the release hides it."""
    m = _DEBIAN_BUILD.search(version)
    return refined(release, m.group(1) if m else None)


def running() -> tuple[str, str | None]:
    """This machine's kernel: (``uname -r``, its MAJOR.MINOR[.PATCH] or None, the stable release where ``uname -v``
    names one that ``uname -r`` hides)."""
    u = os.uname()
    return u.release, from_uname(u.release, u.version)
