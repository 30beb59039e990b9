"""Debian's packages for the lab, through apt's ordinary clients (``apt-cache``, ``apt-get download``,
``dpkg-deb``): no root, nothing installed on the host.

The guest kernel is pinned (``KERNEL_PIN``); when the archive no longer has it, the newest 6.12 build whose
``linux-source-6.12`` of the same version is also there is taken instead (the modules issue builds elevators
against that source, so the two must stay in step), and the choice is recorded in the lab's ``lab.json``.
``iosched vm prepare --kernel ABI`` takes another build of a series the lab knows (``SERIES``): a 6.12 one, or
bookworm's own 6.1 (per-word tag depths, as the 6.3 kernel of seed 000's artifact had); an ABI the archive does
not have is an error then, not a substitution.
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
FLAVOUR = "amd64"


@dataclass(frozen=True)
class Series:
    """A Debian kernel series the lab can boot: how its ABIs are spelt and what its packages are called."""
    name: str             # 6.12
    abi_pattern: str      # a regex for the ABI (6.12.117+deb12)
    example: str
    kbuild_shared: bool   # one linux-kbuild-<series> for every ABI (6.1) or one per ABI (the 6.12 backport)

    @property
    def source_package(self) -> str:
        return f"linux-source-{self.name}"

    def kbuild_package(self, abi: str) -> str:
        return f"linux-kbuild-{self.name if self.kbuild_shared else abi}"

    def abi_of(self, package_name: str) -> str | None:
        m = re.fullmatch(rf"linux-image-({self.abi_pattern})-{FLAVOUR}-unsigned", package_name)
        return m.group(1) if m else None


SERIES = (Series("6.12", r"6\.12\.\d+\+deb\d+", "6.12.117+deb12", kbuild_shared=False),
          Series("6.1", r"6\.1\.0-\d+", "6.1.0-57", kbuild_shared=True))


def series_of(abi: str) -> Series:
    """The series an ABI belongs to; a VmError naming the forms the lab knows for any other."""
    for s in SERIES:
        if re.fullmatch(s.abi_pattern, abi):
            return s
    forms = " or ".join(f"{s.example} ({s.name})" for s in SERIES)
    raise VmError(f"--kernel {abi}: not a Debian kernel ABI the lab knows; it takes one like {forms}")


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


def choose_kernel(pin: str, images: dict[str, str], sources: set[str], *, asked: bool = False) -> KernelChoice:
    """``images``: ABI → package version of the linux-image-*-unsigned builds of the pin's series the archive has;
    ``sources``: the versions of that series' linux-source it has.  The pinned ABI when there, else the newest with
    a matching source, else the newest at all (noted).  An ABI the user ``asked`` for is taken or refused: a
    different kernel than the one named would make every result say something else."""
    series = series_of(pin)
    if pin in images:
        return KernelChoice(pin, images[pin], images[pin] in sources)
    if not images:
        raise VmError(f"the package lists have no linux-image-{series.name}*-{FLAVOUR}-unsigned (Debian "
                      f"bookworm's archives have them): run `apt-get update` as root (./scripts/setup does), "
                      f"then `iosched vm prepare`")
    if asked:
        newest = sorted(images, key=_version_key, reverse=True)[:3]
        raise VmError(f"--kernel {pin}: apt's lists have no {image_package(pin)}; the newest {series.name} builds "
                      f"they have: {', '.join(newest)}")
    paired = [a for a in images if images[a] in sources]
    pick = max(paired or images, key=_version_key)
    why = f"the pinned kernel {pin} is no longer in the archive; took {pick}"
    if not paired:
        why += f" (no {series.source_package} of the same version is there either)"
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


def archive_kernels(series: Series = SERIES[0]) -> tuple[dict[str, str], set[str]]:
    """(ABI → version of each linux-image-<ABI>-amd64-unsigned of ``series``, versions of its linux-source) per
    apt's package lists (no network)."""
    names = _run(["apt-cache", "pkgnames", f"linux-image-{series.name}."], what="listing kernels").split()
    found = {abi: n for n in names if (abi := series.abi_of(n))}
    versions = candidates(list(found.values()))
    images = {abi: versions[n] for abi, n in found.items() if n in versions}
    return images, set(madison(series.source_package))


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
