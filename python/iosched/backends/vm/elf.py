"""Just enough of ELF (64-bit little-endian, x86-64) for the lab: the shared libraries a program needs
(DT_NEEDED, DT_RUNPATH) and a kernel module's ``.modinfo`` (its ``depends=``).  Read from the bytes, so the lab
resolves fio's libraries inside the unpacked packages without the host's loader or binutils."""

from __future__ import annotations

import struct
from pathlib import Path

DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 1, 5, 15, 29
PT_LOAD, PT_DYNAMIC = 1, 2


class ElfError(Exception):
    pass


def _check(data: bytes, what: str) -> None:
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{what}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{what}: not a 64-bit little-endian ELF file")


def _sections(data: bytes) -> dict[str, tuple[int, int, int]]:
    """Section name → (type, file offset, size)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0:
        return {}
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    _, _, _, _, str_off, str_size = heads[shstrndx]
    names = data[str_off:str_off + str_size]
    out = {}
    for name_off, sh_type, _, _, off, size in heads:
        end = names.find(b"\0", name_off)
        out[names[name_off:end].decode(errors="replace")] = (sh_type, off, size)
    return out


def _cstr(data: bytes, off: int) -> str:
    end = data.find(b"\0", off)
    return data[off:end if end >= 0 else len(data)].decode(errors="replace")


def dynamic(data: bytes, what: str = "file") -> tuple[list[str], list[str]]:
    """(DT_NEEDED names, DT_RUNPATH/DT_RPATH entries) of an ELF image; empty for a static program."""
    _check(data, what)
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dyn = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dyn = (p_offset, p_filesz)
    if dyn is None:
        return [], []
    entries = []
    for off in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        entries.append((tag, val))
    strtab_vaddr = next((v for t, v in entries if t == DT_STRTAB), None)
    if strtab_vaddr is None:
        raise ElfError(f"{what}: dynamic section without a string table")
    for vaddr, offset, size in loads:     # the string table's address → its place in the file
        if vaddr <= strtab_vaddr < vaddr + size:
            strtab = offset + strtab_vaddr - vaddr
            break
    else:
        raise ElfError(f"{what}: the dynamic string table is outside every loaded segment")
    needed = [_cstr(data, strtab + v) for t, v in entries if t == DT_NEEDED]
    paths = [p for t, v in entries if t in (DT_RUNPATH, DT_RPATH) for p in _cstr(data, strtab + v).split(":") if p]
    return needed, paths


def interpreter(data: bytes) -> str | None:
    """The program interpreter (PT_INTERP), e.g. /lib64/ld-linux-x86-64.so.2."""
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 3:
            return data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
    return None


def modinfo(data: bytes, what: str = "module") -> dict[str, list[str]]:
    """A kernel module's .modinfo strings (key → values: ``parm`` and ``alias`` repeat)."""
    _check(data, what)
    sec = _sections(data).get(".modinfo")
    if sec is None:
        raise ElfError(f"{what}: no .modinfo section (not a kernel module?)")
    _, off, size = sec
    out: dict[str, list[str]] = {}
    for item in data[off:off + size].split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            out.setdefault(key, []).append(value)
    return out


def module_depends(data: bytes, what: str = "module") -> list[str]:
    """The modules this one needs loaded first (modinfo's ``depends=``, comma-separated names)."""
    return [d for v in modinfo(data, what).get("depends", []) for d in v.split(",") if d]


def read(path: Path) -> bytes:
    return Path(path).read_bytes()
