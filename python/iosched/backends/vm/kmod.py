"""Our own scheduler modules (``kmod/``: k2 and kyber-fairness, GPL-2.0), built for the lab's kernel and loaded in
the guest on demand.

An elevator needs the kernel's private ``block/*.h`` headers, which Debian's headers packages lack: the build takes
``linux-headers-<abi>-amd64``, ``linux-headers-<abi>-common`` and ``linux-kbuild-<abi>`` (6.1: ``linux-kbuild-6.1``)
of exactly the lab's kernel (``apt-get download`` + ``dpkg-deb -x``, no root), and the ``block/*.h`` files of
``linux-source-<series>`` of the same version (read out of its 153 MB package, which is then dropped).  All of
that is cached, so later builds are offline.  The headers' Makefile includes the common headers by an absolute
``/usr/src/...`` path: it is rewritten to the unpacked copy.

Layout under the lab's folder::

    kmod/debs/*.deb                      the three headers packages of the recorded kernel version
    kmod/kernel-<version>/usr/...        those packages unpacked (Makefile path rewritten)
    kmod/kernel-<version>/block/*.h      the private headers from linux-source-<series> <version>
    kmod/build/<key>/<name>.ko           the modules; build.log; done.json (what was built from what)

The build key hashes our sources, the kernel version, the compiler and whether BTF was generated: a change to any
rebuilds (``iosched vm build-modules``, called by ``iosched vm prepare`` and by ``run --backend vm`` when a spec
names one of the modules).  Needs make and the compiler the kernel was built with (gcc-12 on bookworm); pahole
for BTF (without it the modules are built without BTF, which only BPF tools miss).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...datadir import data_dir
from . import VmError, packages
from .lab import locked

KBUILD_FORMAT = 1                  # bump when the build below changes what it makes
ENV = "IOSCHED_KMOD_DIR"           # another kmod/ source folder (default: the checkout's)
SOURCE_SUFFIXES = (".c", ".h")
SOURCE_NAMES = ("Makefile", "Kbuild")
BUILD_TIMEOUT_S = 600
# The kernel series whose elevator interface kmod/ is written against (its insert_requests takes blk_insert_t
# flags, which 6.1's does not: the build fails there).
KERNEL_API = "6.12"


@dataclass(frozen=True)
class KMod:
    elevator: str                  # the name in /sys/block/<dev>/queue/scheduler and in specs
    folder: str                    # kmod/<folder>
    ko: str                        # the module file
    description: str

    @property
    def module(self) -> str:
        """The loaded module's name (lsmod, rmmod)."""
        return self.ko[:-3].replace("-", "_")


MODULES: dict[str, KMod] = {m.elevator: m for m in (
    KMod("k2", "k2", "k2-iosched.ko", "the RTSS'19 K2 scheduler"),
    KMod("kyber-fairness", "kyber-fairness", "kyber-fairness-iosched.ko", "seed 001's Kyber-fairness"),
)}


def vm_hint(name: str) -> str:
    """For the kernel backend's refusal: where this scheduler runs ("" if it is not one of ours)."""
    m = MODULES.get(name)
    return (f"; {name} is {m.description}, a module of iosched's own (kmod/{m.folder}) that this kernel does not "
            "have: run it with --backend vm, which builds and loads it in the lab's kernel") if m else ""


def source_dir() -> Path:
    return data_dir(ENV, "kmod", "*/Makefile")


def source_files(src: Path) -> list[Path]:
    """The files a build uses: each module folder's C sources, headers and makefiles."""
    out = []
    for m in MODULES.values():
        folder = src / m.folder
        if not folder.is_dir():
            raise VmError(f"the scheduler modules' sources are missing: no {folder} (set ${ENV} to a kmod/ folder)")
        out += sorted(p for p in folder.iterdir()
                      if p.is_file() and (p.suffix in SOURCE_SUFFIXES or p.name in SOURCE_NAMES))
    return out


def source_digest(src: Path) -> str:
    h = hashlib.sha256()
    for p in source_files(src):
        h.update(str(p.relative_to(src)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def header_packages(abi: str) -> list[str]:
    return [f"linux-headers-{abi}-{packages.FLAVOUR}", f"linux-headers-{abi}-common",
            packages.series_of(abi).kbuild_package(abi)]


def kernel_dir(lab_dir: Path, version: str) -> Path:
    return lab_dir / "kmod" / f"kernel-{version}"


# ---------------------------------------------------------------- the headers

def _headers_ready(root: Path) -> bool:
    return (root / "done.json").is_file()


def _fetch_exact(dest: Path, name: str, version: str, echo) -> Path:
    """name at exactly version: from dest when there, else apt-get download name=version."""
    hit = packages.find_deb(dest, name, version)
    if hit:
        return hit
    echo(f"downloading {name} {version} from Debian's archive")
    try:
        packages.download([f"{name}={version}"], dest)
    except VmError as e:
        raise VmError(f"{name} {version} (the lab kernel's version) could not be fetched: {e}; if the archive "
                      "dropped it, `iosched vm prepare` picks a newer kernel with a matching linux-source"
                      ) from None
    hit = packages.find_deb(dest, name, version)
    if hit is None:
        raise VmError(f"apt-get download {name}={version} left no .deb in {dest}")
    return hit


def extract_block_headers(deb: Path, dest: Path) -> list[str]:
    """The private ``block/*.h`` headers out of a linux-source package (a .deb holding a .tar.xz of the tree):
    streamed, stopping once the tree has moved past block/ (its entries are in path order)."""
    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
            for member in outer:
                if not re.fullmatch(r"(\./)?usr/src/linux-source-[\d.]+\.tar\.xz", member.name):
                    continue
                inner_file = outer.extractfile(member)
                with tarfile.open(fileobj=inner_file, mode="r|xz") as inner:
                    for m in inner:
                        parts = m.name.split("/")
                        in_block = len(parts) >= 2 and parts[1] == "block"
                        if names and not in_block:
                            break
                        if in_block and len(parts) == 3 and parts[2].endswith(".h") and m.isfile():
                            src = inner.extractfile(m)
                            (dest / parts[2]).write_bytes(src.read() if src else b"")
                            names.append(parts[2])
                break
    finally:
        proc.kill()
        proc.wait()
    if "elevator.h" not in names:
        raise VmError(f"{deb.name} holds no block/elevator.h: not a kernel source package?")
    return sorted(names)


def prepare_headers(lab_dir: Path, info: dict, echo: Callable[[str], None]) -> Path:
    """The unpacked headers and the private block headers of the lab's kernel (cached; fetched once)."""
    k = info["kernel"]
    version, abi = k["version"], k["abi"]
    source_package = packages.series_of(abi).source_package
    root = kernel_dir(lab_dir, version)
    if _headers_ready(root):
        return root
    t0 = time.monotonic()
    debs = lab_dir / "kmod" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=lab_dir / "kmod", prefix=f".kernel-{os.getpid()}-"))
    try:
        got = [_fetch_exact(debs, name, version, echo) for name in header_packages(abi)]
        for deb in got:
            packages.extract(deb, tmp)
        headers = tmp / "usr" / "src" / f"linux-headers-{abi}-{packages.FLAVOUR}"
        makefile = headers / "Makefile"
        if not makefile.is_file():
            raise VmError(f"{got[0].name} has no {makefile.relative_to(tmp)}")
        # `include /usr/src/linux-headers-...-common/Makefile`: the unpacked copy's, at its final place.
        makefile.write_text(re.sub(r"(?<![\w/])/usr/src/", f"{root}/usr/src/", makefile.read_text()))
        with tempfile.TemporaryDirectory(dir=lab_dir / "kmod", prefix=".source-") as sdir:
            src_deb = _fetch_exact(Path(sdir), source_package, version, echo)
            echo(f"extracting block/*.h from {src_deb.name} ...")
            names = extract_block_headers(src_deb, tmp / "block")
        (tmp / "done.json").write_text(json.dumps({
            "version": version, "abi": abi, "packages": {d.name.split("_")[0]: version for d in got},
            "source_package": f"{source_package}={version}", "block_headers": names,
            "seconds": round(time.monotonic() - t0, 1)}, indent=1) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.rename(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    echo(f"kernel headers for {abi} ready in {root} ({time.monotonic() - t0:.1f} s)")
    return root


# ---------------------------------------------------------------- the build

def compiler(root: Path, abi: str) -> str:
    """The compiler the kernel was built with, as its headers name it (x86_64-linux-gnu-gcc-12)."""
    config = root / "usr" / "src" / f"linux-headers-{abi}-{packages.FLAVOUR}" / ".config"
    m = re.search(r'^CONFIG_CC_VERSION_TEXT="(\S+)', config.read_text(errors="replace"), re.M) \
        if config.is_file() else None
    return m.group(1) if m else "gcc"


def tools(root: Path, abi: str) -> dict[str, str | None]:
    cc = compiler(root, abi)
    found = {"make": shutil.which("make"), "cc": shutil.which(cc), "pahole": shutil.which("pahole")}
    if not found["make"] or not found["cc"]:
        missing = [n for n, k in (("make", "make"), (cc, "cc")) if not found[k]]
        pkg = re.sub(r"^x86_64-linux-gnu-", "", cc)
        raise VmError(f"building the scheduler modules needs {' and '.join(missing)} (the lab kernel was built with "
                      f"{cc}): apt-get install make {pkg} (./scripts/setup does, as root)")
    return found


def _tool_version(exe: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        return (r.stdout.splitlines() or [""])[0].strip()
    return ""


def build_key(digest: str, version: str, cc_version: str, btf: bool) -> str:
    blob = json.dumps({"format": KBUILD_FORMAT, "sources": digest, "kernel": version, "cc": cc_version,
                       "btf": btf}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Built:
    dir: Path                      # kmod/build/<key>
    info: dict                     # done.json

    def ko(self, elevator: str) -> Path:
        return self.dir / MODULES[elevator].ko

    def describe(self) -> dict:
        return {"build_key": self.dir.name, "sources": self.info["sources"], "kernel": self.info["kernel"],
                "btf": self.info["btf"], "sha256": self.info["sha256"]}


def ensure_built(lab_dir: Path, info: dict, *, echo: Callable[[str], None] = lambda s: None,
                 force: bool = False) -> Built:
    """The modules for the lab's kernel: the cached build when our sources, the kernel and the compiler are the
    same, else built now (the headers fetched first if they are not cached)."""
    src = source_dir()
    digest = source_digest(src)
    version, abi = info["kernel"]["version"], info["kernel"]["abi"]
    series = packages.series_of(abi)
    if series.name != KERNEL_API:
        raise VmError(f"our scheduler modules (kmod/) are written for Linux {KERNEL_API}'s elevator interface, and "
                      f"the lab's kernel is {series.name} ({abi}): there it runs the kernel's own schedulers only")
    kdir = lab_dir / "kmod"
    with locked(kdir):
        root = prepare_headers(lab_dir, info, echo)
        found = tools(root, abi)
        btf = found["pahole"] is not None
        cc_version = _tool_version(found["cc"])
        key = build_key(digest, version, cc_version, btf)
        out = kdir / "build" / key
        if not force and (out / "done.json").is_file():
            return Built(out, json.loads((out / "done.json").read_text()))
        built = _build(src, root, abi, out, found, btf, echo)
        built.info.update(sources=digest, kernel=version, cc=cc_version)
        (out / "done.json").write_text(json.dumps(built.info, indent=1) + "\n")
        for d in (kdir / "build").glob("*"):
            if d.name != key and not d.name.startswith("."):
                shutil.rmtree(d, ignore_errors=True)
        return built


def _build(src: Path, root: Path, abi: str, out: Path, found: dict, btf: bool, echo) -> Built:
    """make -C <headers> M=<copy of kmod/X> modules, for each module, in a scratch copy (our source folder stays
    clean); the .ko files and the log into out."""
    t0 = time.monotonic()
    headers = root / "usr" / "src" / f"linux-headers-{abi}-{packages.FLAVOUR}"
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=out.parent.parent, prefix=".build-"))
    log: list[str] = []
    warnings: list[str] = []
    try:
        tmp_out = scratch / "out"
        tmp_out.mkdir()
        for m in MODULES.values():
            work = scratch / m.folder
            shutil.copytree(src / m.folder, work)
            cmd = [found["make"], "-C", str(headers), f"M={work}", f"IOSCHED_BLOCK_H={root / 'block'}", "modules"]
            if not btf:
                cmd.insert(-1, "CONFIG_DEBUG_INFO_BTF_MODULES=")
            echo(f"building {m.ko} for {abi} ...")
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                   env=dict(os.environ, LC_ALL="C"))
            except subprocess.TimeoutExpired:
                raise VmError(f"building kmod/{m.folder} took over {BUILD_TIMEOUT_S} s") from None
            text = (r.stdout + r.stderr).replace(str(scratch), "<build>")
            log += [f"$ {' '.join(cmd)}".replace(str(scratch), "<build>"), text]
            warnings += [ln.strip() for ln in text.splitlines() if re.search(r"\bwarning:", ln)]
            if r.returncode != 0 or not (work / m.ko).is_file():
                errors = [ln.strip() for ln in text.splitlines() if re.search(r"\berror\b|Error \d", ln)]
                (out.parent / "last-failure.log").write_text("\n".join(log) + "\n")
                raise VmError(f"building kmod/{m.folder} failed: {' | '.join(errors[:3]) or text.strip()[-300:]} "
                              f"(log: {out.parent / 'last-failure.log'})")
            shutil.copyfile(work / m.ko, tmp_out / m.ko)
        (tmp_out / "build.log").write_text("\n".join(log) + "\n")
        info = {"format": KBUILD_FORMAT, "btf": btf, "warnings": warnings, "modules": sorted(MODULES),
                "sha256": {m.ko: hashlib.sha256((tmp_out / m.ko).read_bytes()).hexdigest()
                           for m in MODULES.values()},
                "seconds": round(time.monotonic() - t0, 1)}
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp_out, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    notes = [] if btf else [" without BTF (pahole is missing: ./scripts/setup installs it)"]
    echo(f"built {', '.join(m.ko for m in MODULES.values())} in {time.monotonic() - t0:.1f} s{''.join(notes)}"
         + (f"; {len(warnings)} compiler warning(s): {warnings[0]}" if warnings else ""))
    return Built(out, info)
