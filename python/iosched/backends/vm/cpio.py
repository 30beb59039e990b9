"""The initramfs format: a cpio archive in the "newc" layout, written here (no cpio tool, no root: device nodes are
just header fields).  Deterministic: every entry owned by root with mtime 0, inode numbers in order, so the same
inputs give the same bytes.  The kernel unpacks several archives laid end to end (a compressed one, then an
uncompressed one), which is how a batch is added to the cached base image."""

from __future__ import annotations

import stat
from typing import BinaryIO

S_IFCHR = stat.S_IFCHR


class CpioWriter:
    def __init__(self, out: BinaryIO):
        self.out = out
        self.ino = 1
        self.seen: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", *, rdev: tuple[int, int] = (0, 0)) -> None:
        name = name.strip("/")
        if name in self.seen:
            raise ValueError(f"{name} is in the archive twice")
        self.seen.add(name)
        raw = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data), 0, 0, rdev[0], rdev[1],
                  len(raw), 0]
        self.ino += 1
        self.out.write(b"070701" + "".join(f"{v:08X}" for v in fields).encode() + raw)
        self._pad(110 + len(raw))
        self.out.write(data)
        self._pad(len(data))

    def _pad(self, n: int) -> None:
        self.out.write(b"\0" * (-n % 4))

    def directory(self, name: str, perm: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | perm)

    def file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def char_device(self, name: str, major: int, minor: int, perm: int = 0o600) -> None:
        self._entry(name, S_IFCHR | perm, rdev=(major, minor))

    def parents(self, name: str) -> None:
        """Every missing parent directory of ``name``."""
        parts = name.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.seen:
                self.directory(d)

    def close(self) -> None:
        self._entry("TRAILER!!!", 0)


def read_names(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, mode, data) of every entry of an uncompressed newc archive (for tests and `iosched vm check`)."""
    out, pos = [], 0
    while pos + 110 <= len(data):
        if data[pos:pos + 6] != b"070701":
            raise ValueError(f"not a newc cpio header at byte {pos}")
        f = [int(data[pos + 6 + 8 * i:pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = f[1], f[6], f[11]
        name = data[pos + 110:pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos:pos + size]
        pos += size
        pos += -pos % 4
        if name == "TRAILER!!!":
            break
        out.append((name, mode, body))
    return out
