"""The lab's cache: Debian's packages, and the guest kernel and initramfs built from them.

Layout of the cache folder (``--lab DIR``, else ``$IOSCHED_LAB_DIR``, else ``~/.cache/iosched/lab``)::

    lab.json                 what was chosen and built: kernel (ABI, package version, matching linux-source),
                             every package and version, the build key, file sizes
    debs/*.deb               the packages as apt-get download fetched them (offline rebuilds)
    build/<key>/vmlinuz      the guest kernel
    build/<key>/config       its build configuration
    build/<key>/initramfs.cpio
                             busybox, fio, mke2fs, mkfs.xfs and mkfs.f2fs with their libraries, the needed
                             modules (decompressed), our /init;
                             uncompressed: the guest unpacks it in ~0.5 s instead of ~3.5 s for gzip under TCG
    accel.json               the accelerator probe's answer (kvm or tcg) for this host, qemu and kernel
    tmp/<pid>-*/             one boot's scratch (batch archive, device images); removed after the boot

The build key hashes the package versions, /init, the module list and BUILD_FORMAT: when any changes, the next
``iosched vm prepare`` or ``run --backend vm`` rebuilds from debs/ without the network.  Room is left for the
modules issue: ``linux-source-6.12`` / headers of the recorded version can be fetched into debs/ the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ... import kernel_version
from . import VmError, elf, packages
from .cpio import CpioWriter
from .guest import BASE_MODULES, DEVICE_MODULES, FS_MODULES, INIT

ENV = "IOSCHED_LAB_DIR"
LAB_JSON = "lab.json"
BUILD_FORMAT = 3                     # bump when the build below changes what goes into the image
FIO = "usr/bin/fio"
# The programs the guest runs besides busybox, each with the package it comes from: fio, and the mkfs of each
# file system a spec can name (``filesystem``; the kernel backend's --filesystem makes the same ones).
PROGRAMS = {FIO: "fio", "sbin/mke2fs": "e2fsprogs", "sbin/mkfs.xfs": "xfsprogs", "sbin/mkfs.f2fs": "f2fs-tools"}
# Configuration files the programs read, copied as the package has them (mke2fs's defaults: features, inode size).
CONFIG_FILES = {"etc/mke2fs.conf": "e2fsprogs"}
USERLAND = ("busybox-static", *dict.fromkeys(PROGRAMS.values()))
LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib")
NOT_PREPARED = "the VM lab is not prepared: run `iosched vm prepare`"


def lab_dir(given: str | os.PathLike | None = None) -> Path:
    if given:
        return Path(given).expanduser()
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "iosched" / "lab"


def image_modules() -> list[str]:
    """The kernel modules the image carries (their dependencies follow): the schedulers, the devices' drivers,
    the file systems and their checksums."""
    return sorted(set(BASE_MODULES) | set(DEVICE_MODULES) | {m for ms in FS_MODULES.values() for m in ms})


def norm_module(name: str) -> str:
    return name.replace("-", "_")


def build_key(package_versions: dict[str, str], modules: list[str], init: str = INIT) -> str:
    blob = json.dumps({"format": BUILD_FORMAT, "packages": sorted(package_versions.items()), "init": init,
                       "modules": sorted(modules)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@contextlib.contextmanager
def locked(folder: Path, *, shared: bool = False) -> Iterator[None]:
    """One prepare/build at a time per cache (a run only reads, under a shared lock)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass
class Lab:
    dir: Path
    info: dict

    @property
    def build(self) -> Path:
        return self.dir / "build" / self.info["key"]

    @property
    def kernel(self) -> Path:
        return self.build / "vmlinuz"

    @property
    def initramfs(self) -> Path:
        return self.build / "initramfs.cpio"

    @property
    def release(self) -> str:
        return self.info["kernel"]["release"]

    def kernel_version(self, release: str | None) -> str | None:
        """The Linux version the guest kernel `release` (its ``uname -r``) is, for the simulator: the upstream version
        of the lab's kernel package when `release` is the lab's kernel ("6.1.192-3" -> "6.1.192"), since Debian's
        6.1 ABI names hide the stable release ("6.1.0-57-amd64"), whose backports the simulator models; else what
        `release` says."""
        if release is None or release == self.release:
            return kernel_version.refined(self.release, self.info["kernel"].get("version"))
        return kernel_version.from_release(release)

    def config_hz(self) -> int | None:
        """The guest kernel's timer tick rate (CONFIG_HZ in its build configuration); None if it is not there."""
        path = self.build / "config"
        if not path.is_file():
            return None
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=", 1)[1])
        return None

    def describe(self) -> dict:
        k = self.info["kernel"]
        return {"lab_dir": str(self.dir), "build_key": self.info["key"], "kernel_release": k["release"],
                "kernel_package": f"{k['package']}={k['version']}", "fio": self.info["packages"].get("fio"),
                "busybox": self.info["packages"].get("busybox-static")}


# ---------------------------------------------------------------- resolving files across unpacked packages

class Tree:
    """Several unpacked packages (one folder each) seen as one root file system."""

    def __init__(self, roots: dict[str, Path]):
        self.roots = roots           # package → its unpacked folder

    def find(self, rel: str, depth: int = 0) -> tuple[str, Path] | None:
        """(package, real file) for a path like usr/lib/x86_64-linux-gnu/libaio.so.1, following symlinks (absolute
        ones inside this root)."""
        if depth > 20:
            return None
        rel = os.path.normpath(rel.lstrip("/"))
        for pkg, root in self.roots.items():
            # a symlink in a parent folder (lib64 → usr/lib64) is resolved by trying the path as given
            p = root / rel
            if os.path.islink(p):
                target = os.readlink(p)
                nxt = target if target.startswith("/") else os.path.join(os.path.dirname(rel), target)
                return self.find(nxt, depth + 1)
            if p.is_file():
                return pkg, p
        return None


def resolve_libraries(tree: Tree, program: str) -> tuple[dict[str, tuple[str, Path]], set[str]]:
    """Every file ``program`` needs to run (its interpreter and shared libraries, recursively): guest path →
    (package, file); and the sonames found nowhere."""
    found = tree.find(program)
    if found is None:
        raise VmError(f"{program} is not in the unpacked packages")
    data = elf.read(found[1])
    out: dict[str, tuple[str, Path]] = {}
    missing: set[str] = set()
    interp = elf.interpreter(data)
    if interp:
        hit = tree.find(interp)
        if hit:
            out[interp.lstrip("/")] = hit
        else:
            missing.add(interp)
    queue = [(program, data)]
    seen_names: set[str] = set()
    while queue:
        path, data = queue.pop()
        needed, runpath = elf.dynamic(data, path)
        origin = os.path.dirname(path)
        dirs = [p.replace("$ORIGIN", "/" + origin).replace("${ORIGIN}", "/" + origin).lstrip("/") for p in runpath]
        for soname in needed:
            if soname in seen_names:
                continue
            seen_names.add(soname)
            for d in dirs + list(LIB_DIRS):
                hit = tree.find(f"{d}/{soname}")
                if hit:
                    out[f"{d}/{soname}"] = hit
                    queue.append((f"{d}/{soname}", elf.read(hit[1])))
                    break
            else:
                missing.add(soname)
    return out, missing


# ---------------------------------------------------------------- prepare

def _echo_none(_: str) -> None:
    pass


def _cached_deb(debs: Path, name: str, version: str) -> Path | None:
    return packages.find_deb(debs, name, version)


def _fetch(debs: Path, names: list[str], versions: dict[str, str], echo, recorded: dict[str, str]) -> dict[str, Path]:
    """name → .deb for ``names``: from debs/ when the wanted version is there, else apt-get download.  Wanted
    version: apt's candidate; offline (apt does not know it), the version lab.json recorded."""
    out, todo = {}, []
    known = packages.candidates(names)
    for n in names:
        v = known.get(n) or recorded.get(n)
        if v is None:
            raise VmError(f"apt does not know the package {n}: run `apt-get update` as root (./scripts/setup does)")
        versions[n] = v
        hit = _cached_deb(debs, n, v)
        if hit:
            out[n] = hit
        else:
            todo.append(n)
    if todo:
        echo(f"downloading {len(todo)} package(s) from Debian's archive: {', '.join(todo[:6])}"
             + (" ..." if len(todo) > 6 else ""))
        packages.download(todo, debs)
        for n in todo:
            hit = _cached_deb(debs, n, versions[n])
            if hit is None:
                raise VmError(f"apt-get download {n} left no {n}_{versions[n]}_*.deb in {debs}")
            out[n] = hit
    return out


def prepare(folder: Path, *, pin: str = packages.KERNEL_PIN, echo: Callable[[str], None] = _echo_none,
            force: bool = False, asked: bool = False) -> Lab:
    """Fetch what is missing and build what is stale; returns the ready lab.  ``asked``: the user named ``pin``
    (--kernel), so it is taken or refused, never replaced."""
    series = packages.series_of(pin)
    with locked(folder):
        t0 = time.monotonic()
        old = _read_info(folder)
        recorded = dict(old.get("packages", {})) if old else {}
        images, sources = packages.archive_kernels(series)
        if not images and old and (not asked or old["kernel"]["abi"] == pin):
            # no package lists for the series (offline machine): keep what was chosen
            k = old["kernel"]
            choice = packages.KernelChoice(k["abi"], k["version"], k.get("source_available", False),
                                           note=f"apt's lists have no {series.name} kernel now: kept the recorded one")
        else:
            choice = packages.choose_kernel(pin, images, sources, asked=asked)
        if choice.note:
            echo(f"note: {choice.note}")
        debs = folder / "debs"
        if old and not force and _current(folder, old, choice):
            echo(f"lab up to date in {folder} (apt offers the versions it was built from)")
            return Lab(folder, old)
        versions: dict[str, str] = {}
        recorded[choice.package] = choice.version
        got = _fetch(debs, [choice.package, *USERLAND], versions, echo, recorded)
        libs = _fetch_libraries(folder, debs, got, versions, echo, recorded)
        info = {"format": BUILD_FORMAT, "kernel": {
            "abi": choice.abi, "release": choice.release, "package": choice.package, "version": choice.version,
            "pinned": pin, "source_package": packages.series_of(choice.abi).source_package,
            "source_version": choice.version,
            "source_available": choice.source_available, "note": choice.note},
            "packages": dict(sorted(versions.items())), "debs": {n: p.name for n, p in sorted(got.items())},
            "libraries": libs}
        modules = image_modules()
        info["key"] = build_key(info["packages"], modules)
        lab = Lab(folder, info)
        if force or not _built(lab):
            echo(f"building the guest: kernel {choice.release}, fio {versions['fio']}, busybox "
                 f"{versions['busybox-static']} ...")
            _build(lab, modules, echo)
        _write_info(folder, info)
        _drop_stale(folder, info)
        echo(f"lab ready in {folder} ({time.monotonic() - t0:.1f} s)")
        return lab


def _current(folder: Path, info: dict, choice: packages.KernelChoice) -> bool:
    """The recorded build is what prepare would make now: same kernel, every package at apt's version (or apt
    does not know it: offline), every .deb there, the build key ours and the build complete."""
    if info.get("kernel", {}).get("abi") != choice.abi or info.get("kernel", {}).get("version") != choice.version:
        return False
    pk = info.get("packages", {})
    now = packages.candidates(list(pk))
    if any(now.get(n, v) != v for n, v in pk.items()):
        return False
    if any(not (folder / "debs" / f).is_file() for f in info.get("debs", {}).values()):
        return False
    modules = image_modules()
    return info.get("key") == build_key(pk, modules) and _built(Lab(folder, info))


def resolve_programs(tree: Tree) -> tuple[dict[str, tuple[str, Path]], set[str]]:
    """Every file the guest's programs (PROGRAMS) need to run, as resolve_libraries gives it for one."""
    needed: dict[str, tuple[str, Path]] = {}
    missing: set[str] = set()
    for program in PROGRAMS:
        n, m = resolve_libraries(tree, program)
        needed.update(n)
        missing |= m
    return needed, missing


def _fetch_libraries(folder: Path, debs: Path, got: dict[str, Path], versions: dict[str, str], echo,
                     recorded: dict[str, str]) -> list[str]:
    """The programs' shared libraries: unpack their packages, find what they need (DT_NEEDED, recursively), fetch
    the Pre-Depends and Depends of the packages that provided something until nothing is missing (Debian's shlibs
    dependencies name exactly the packages of the libraries linked against)."""
    with tempfile.TemporaryDirectory(dir=folder, prefix=".unpack-") as tmp:
        roots: dict[str, Path] = {}

        def unpack(n: str) -> None:
            if n not in roots:
                roots[n] = Path(tmp) / n
                packages.extract(got[n], roots[n])

        for n in dict.fromkeys(PROGRAMS.values()):
            unpack(n)
        # The providers found last time first: an up-to-date cache then resolves without fetching anything.
        before = [n for n in recorded if n not in USERLAND and not n.startswith("linux-image-")]
        for n, p in _fetch(debs, before, versions, echo, recorded).items():
            got[n] = p
            unpack(n)
        for _ in range(12):
            needed, missing = resolve_programs(Tree(roots))
            providers = {pkg for pkg, _ in needed.values()} | set(PROGRAMS.values())
            if not missing:
                # Only the packages that provide a file are kept in the record.
                for n in list(got):
                    if n not in providers and n not in USERLAND and not n.startswith("linux-image-"):
                        got.pop(n)
                        versions.pop(n, None)
                return sorted(needed)
            want = []
            for pkg in sorted(providers):
                # (e2fsprogs names its libraries in Pre-Depends)
                for dep in packages.parse_depends(packages.field(got[pkg], "Pre-Depends") + ", "
                                                  + packages.field(got[pkg], "Depends")):
                    if dep not in roots and dep not in want and not dep.startswith("<"):
                        want.append(dep)
            if not want:
                raise VmError(f"the guest's programs need {', '.join(sorted(missing))}, which none of their "
                              "packages' dependencies provide")
            for n, p in _fetch(debs, want, versions, echo, recorded).items():
                got[n] = p
                unpack(n)
        raise VmError(f"could not resolve the guest's programs' libraries ({', '.join(sorted(missing))} missing)")


def _built(lab: Lab) -> bool:
    return lab.kernel.is_file() and lab.initramfs.is_file() and (lab.build / "done").is_file()


def _build(lab: Lab, modules: list[str], echo) -> None:
    """vmlinuz, config and initramfs.cpio into build/<key>/ (written beside, then renamed)."""
    folder, info = lab.dir, lab.info
    debs = folder / "debs"
    out = folder / "build" / info["key"]
    tmp_out = folder / "build" / f".{info['key']}-{os.getpid()}"
    shutil.rmtree(tmp_out, ignore_errors=True)
    tmp_out.mkdir(parents=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=folder, prefix=".unpack-") as tmp:
        roots = {}
        for n, fname in info["debs"].items():
            roots[n] = Path(tmp) / n
            packages.extract(debs / fname, roots[n])
        release = info["kernel"]["release"]
        kroot = roots[info["kernel"]["package"]]
        vmlinuz = kroot / "boot" / f"vmlinuz-{release}"
        if not vmlinuz.is_file():
            raise VmError(f"{info['kernel']['package']} has no boot/vmlinuz-{release}")
        shutil.copyfile(vmlinuz, tmp_out / "vmlinuz")
        shutil.copyfile(kroot / "boot" / f"config-{release}", tmp_out / "config")
        mods = _modules(kroot / "lib" / "modules" / release, modules)
        tree = Tree({n: r for n, r in roots.items() if not n.startswith("linux-image-")})
        needed, missing = resolve_programs(tree)
        if missing:
            raise VmError(f"the guest's programs' libraries are incomplete in {debs} ({', '.join(sorted(missing))}): "
                          "run `iosched vm prepare`")
        busybox = tree.find("bin/busybox")
        if busybox is None:
            raise VmError("busybox-static has no bin/busybox")
        raw = tmp_out / "initramfs.cpio"
        with open(raw, "wb") as f:
            w = CpioWriter(f)
            for d in ("bin", "dev", "etc", "lib", "lib/modules", "lib/modules/iosched", "proc", "sys", "tmp",
                      "usr", "usr/bin", "work", "batch"):
                w.directory(d)
            w.char_device("dev/console", 5, 1)
            w.char_device("dev/null", 1, 3, perm=0o666)
            w.file("bin/busybox", busybox[1].read_bytes(), 0o755)
            w.symlink("bin/sh", "busybox")
            w.file("init", INIT.encode(), 0o755)
            w.file("etc/iosched-lab.json", json.dumps({"release": release, "key": info["key"],
                                                       "packages": info["packages"]}, indent=1).encode())
            for name, (data, deps) in sorted(mods.items()):
                w.file(f"lib/modules/iosched/{name}.ko", data)
                w.file(f"lib/modules/iosched/{name}.deps", (" ".join(deps) + "\n").encode())
            for path in list(PROGRAMS) + list(CONFIG_FILES):
                hit = tree.find(path)
                if hit is None:
                    raise VmError(f"{PROGRAMS.get(path) or CONFIG_FILES[path]} has no {path}")
                w.parents(path)
                w.file(path, hit[1].read_bytes(), 0o755 if path in PROGRAMS else 0o644)
            for path, (_, real) in sorted(needed.items()):
                w.parents(path)
                w.file(path, real.read_bytes(), 0o755)
            w.close()
        raw_bytes = raw.stat().st_size
    (tmp_out / "done").write_text(json.dumps({"initramfs_bytes": raw_bytes,
                                              "modules": sorted(mods),
                                              "build_s": round(time.monotonic() - t0, 1)}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp_out, out)
    echo(f"built {out} (initramfs {raw_bytes >> 20} MiB; {time.monotonic() - t0:.1f} s)")


def _modules(moddir: Path, wanted: list[str]) -> dict[str, tuple[bytes, list[str]]]:
    """Each wanted module and what it depends on (recursively): name → (decompressed .ko, its depends).  Built-in
    modules (modules.builtin) need no file."""
    files = {}
    for p in moddir.rglob("*.ko*"):
        files[norm_module(p.name.split(".ko")[0])] = p
    builtin = set()
    bfile = moddir / "modules.builtin"
    if bfile.exists():
        builtin = {norm_module(Path(ln.strip()).name.split(".ko")[0]) for ln in bfile.read_text().splitlines()}
    out: dict[str, tuple[bytes, list[str]]] = {}
    todo = [norm_module(m) for m in wanted]
    while todo:
        name = todo.pop()
        if name in out or name in builtin:
            continue
        p = files.get(name)
        if p is None:
            raise VmError(f"the kernel package has no module {name}")
        data = p.read_bytes()
        if p.name.endswith(".xz"):
            data = lzma.decompress(data)
        elif p.name.endswith(".zst"):
            raise VmError(f"{p.name}: zstd-compressed modules are not supported")
        deps = [norm_module(d) for d in elf.module_depends(data, p.name)]
        deps = [d for d in deps if d not in builtin]
        out[name] = (data, deps)
        todo += deps
    return out


def _read_info(folder: Path) -> dict | None:
    p = folder / LAB_JSON
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except ValueError:
        return None


def _write_info(folder: Path, info: dict) -> None:
    tmp = folder / f".{LAB_JSON}.{os.getpid()}"
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp, folder / LAB_JSON)


def _drop_stale(folder: Path, info: dict) -> None:
    """Older builds, and packages lab.json no longer names (a newer version replaced them)."""
    for d in (folder / "build").glob("*"):
        if d.name != info["key"] and not d.name.startswith("."):
            shutil.rmtree(d, ignore_errors=True)
    keep = set(info["debs"].values())
    for p in (folder / "debs").glob("*.deb"):
        if p.name not in keep:
            p.unlink()


def load(folder: Path, echo: Callable[[str], None] = _echo_none) -> Lab:
    """The prepared lab, rebuilt first (from debs/, offline) when our side of the build changed."""
    info = _read_info(folder)
    if info is None:
        raise VmError(f"{NOT_PREPARED} (no {folder / LAB_JSON})")
    modules = image_modules()
    key = build_key(info["packages"], modules)
    lab = Lab(folder, info)
    if info.get("key") == key and _built(lab):
        return lab
    with locked(folder):
        info = _read_info(folder) or info
        info["key"] = build_key(info["packages"], modules)
        lab = Lab(folder, info)
        if _built(lab):
            return lab
        missing = [f for f in info.get("debs", {}).values() if not (folder / "debs" / f).is_file()]
        new = [n for n in USERLAND if n not in info.get("debs", {})]
        if new:
            raise VmError(f"{NOT_PREPARED} again: the guest now takes {', '.join(new)} from Debian's archive too")
        if missing or not info.get("debs"):
            raise VmError(f"{NOT_PREPARED} (the lab's packages are missing from {folder / 'debs'})")
        echo("note: the lab's image is out of date (iosched changed its guest side): rebuilding from the cached "
             "packages")
        _build(lab, modules, echo)
        _write_info(folder, info)
        _drop_stale(folder, info)
        return lab


def sizes(folder: Path) -> dict[str, int]:
    """Bytes used per part of the cache."""
    out = {}
    for part in ("debs", "build", "tmp"):
        p = folder / part
        out[part] = sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink()) \
            if p.exists() else 0
    return out


def clean(folder: Path, *, everything: bool) -> list[str]:
    """Remove boots' scratch left by killed runs (and with ``everything`` the whole cache)."""
    removed = []
    if everything:
        if folder.exists():
            with locked(folder):
                for p in folder.iterdir():
                    if p.name != ".lock":
                        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                        removed.append(str(p))
        return removed
    for p in (folder / "tmp").glob("*"):
        pid = p.name.split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    return removed
