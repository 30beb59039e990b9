"""Debian's packages for the lab, through apt's ordinary clients (``apt-cache``, ``apt-get download``,
``dpkg-deb``): no root, nothing installed on the host.

The guest kernel is pinned (``KERNEL_PIN``); when the archive no longer has it, the newest 6.12 build whose
``linux-source-6.12`` of the same version is also there is taken instead (the modules issue builds elevators
against that source, so the two must stay in step), and the choice is recorded in the lab's ``lab.json``.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from . import VmError

# Debian bookworm's security archive, 6.12 backport; its modules (kyber, bfq, null_blk, nvme) are in the image
# package as .ko.xz.
KERNEL_PIN = "6.12.117+deb12"
KERNEL_SERIES = "6.12"
FLAVOUR = "amd64"
SOURCE_PACKAGE = f"linux-source-{KERNEL_SERIES}"
ABI_RE = re.compile(rf"linux-image-({re.escape(KERNEL_SERIES)}\.\d+\+deb\d+)-{FLAVOUR}-unsigned")


def image_package(abi: str) -> str:
    return f"linux-image-{abi}-{FLAVOUR}-unsigned"


def kernel_release(abi: str) -> str:
    """What ``uname -r`` says in the guest: 6.12.117+deb12-amd64."""
    return f"{abi}-{FLAVOUR}"


@dataclass(frozen=True)
class KernelChoice:
    abi: str                 # 6.12.117+deb12
    version: str             # the package version, 6.12.117-1~deb12u1 (linux-source-6.12 has the same)
    source_available: bool   # linux-source-6.12 of that version is in the archive
    note: str = ""

    @property
    def package(self) -> str:
        return image_package(self.abi)

    @property
    def release(self) -> str:
        return kernel_release(self.abi)


def _version_key(abi: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", abi))


def choose_kernel(pin: str, images: dict[str, str], sources: set[str]) -> KernelChoice:
    """``images``: ABI → package version of the linux-image-*-unsigned builds the archive has; ``sources``: the
    versions of linux-source-6.12 it has.  The pinned ABI when there, else the newest with a matching source,
    else the newest at all (noted)."""
    if pin in images:
        return KernelChoice(pin, images[pin], images[pin] in sources)
    if not images:
        raise VmError(f"the package lists have no linux-image-{KERNEL_SERIES}.*-{FLAVOUR}-unsigned (Debian "
                      f"bookworm's security archive has them): run `apt-get update` as root (./scripts/setup does), "
                      f"then `iosched vm prepare`")
    paired = [a for a in images if images[a] in sources]
    pick = max(paired or images, key=_version_key)
    why = f"the pinned kernel {pin} is no longer in the archive; took {pick}"
    if not paired:
        why += f" (no {SOURCE_PACKAGE} of the same version is there either)"
    return KernelChoice(pick, images[pick], images[pick] in sources, note=why)


def _run(cmd: list[str], *, cwd: Path | None = None, what: str) -> str:
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError:
        raise VmError(f"{cmd[0]} not found: the lab is built from Debian's packages with apt's tools "
                      f"(apt-get, apt-cache, dpkg-deb)") from None
    if r.returncode != 0:
        err = " | ".join(ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("W:"))
        raise VmError(f"{what}: {' '.join(cmd[:3])} ... failed: {err or f'exit {r.returncode}'}")
    return r.stdout


def archive_kernels() -> tuple[dict[str, str], set[str]]:
    """(ABI → version of each linux-image-6.12.*-amd64-unsigned, versions of linux-source-6.12) per apt's
    package lists (no network)."""
    names = _run(["apt-cache", "pkgnames", f"linux-image-{KERNEL_SERIES}."], what="listing kernels").split()
    found = {m.group(1): n for n in names if (m := ABI_RE.fullmatch(n))}
    versions = candidates(list(found.values()))
    images = {abi: versions[n] for abi, n in found.items() if n in versions}
    return images, set(madison(SOURCE_PACKAGE))


def madison(name: str) -> list[str]:
    out = subprocess.run(["apt-cache", "madison", name], capture_output=True, text=True).stdout
    return [parts[1].strip() for ln in out.splitlines() if len(parts := ln.split("|")) >= 2]


def candidates(names: list[str]) -> dict[str, str]:
    """name → the version ``apt-get download NAME`` would fetch, for the names apt knows (one apt-cache call)."""
    if not names:
        return {}
    r = subprocess.run(["apt-cache", "show", "--no-all-versions", *names], capture_output=True, text=True)
    out, pkg = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("Package: "):
            pkg = line.split(None, 1)[1].strip()
        elif line.startswith("Version: ") and pkg and pkg not in out:
            out[pkg] = line.split(None, 1)[1].strip()
    return out


def find_deb(folder: Path, name: str, version: str) -> Path | None:
    """The file ``apt-get download`` wrote for name at version (name_version_arch.deb, ':' written %3a)."""
    quoted = urllib.parse.quote(version, safe="+~.-").replace("%3A", "%3a")
    for arch in (FLAVOUR, "all"):
        p = folder / f"{name}_{quoted}_{arch}.deb"
        if p.exists():
            return p
    return None


def download(names: list[str], dest: Path) -> None:
    """``apt-get download`` into ``dest`` (no root needed; apt's lists must know the packages)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = ["apt-get", "download", "-q"]
    if os.geteuid() == 0:     # root: apt would try to drop to _apt, who cannot write a private cache
        cmd += ["-o", "APT::Sandbox::User=root"]
    _run(cmd + names, cwd=dest, what=f"downloading {', '.join(names)}")


def field(deb: Path, name: str) -> str:
    return _run(["dpkg-deb", "-f", str(deb), name], what=f"reading {deb.name}").strip()


def extract(deb: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(dest)], what=f"unpacking {deb.name}")


def parse_depends(text: str) -> list[str]:
    """A Depends field → package names (the first of each ``a | b``, without versions or ``:any``)."""
    out = []
    for item in text.split(","):
        first = item.split("|")[0].strip()
        name = re.split(r"[\s(:]", first, maxsplit=1)[0]
        if name:
            out.append(name)
    return out
