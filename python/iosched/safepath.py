"""Where iosched may write: every file and folder it makes is proven to be inside the output folder the user named.

`inside(root, rel)` is the one gate (store.py's writers call it, and every other writer goes through those): the
relative path must be plain (no absolute path, no ``..`` or ``.``, no empty part, no NUL, each part at most
`NAME_MAX_BYTES`, the whole at most `PATH_MAX_BYTES`), and the path it resolves to, symbolic links followed, must
lie inside the resolved root: a link inside OUT that points elsewhere is refused, not followed.

Names that users give and that end up in paths are checked where they are read (`check_name`: experiment, job
and cgroup names), and a name that becomes a file name is made safe with `file_name` on top.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from pathlib import Path

from .errors import SpecError, show

NAME_MAX_BYTES = 255        # one path component (Linux NAME_MAX)
PATH_MAX_BYTES = 4096       # a whole path (Linux PATH_MAX)
# A name users give (experiment, job, cgroup): at most this many bytes in UTF-8, so that a file named after it
# (with a suffix such as "-latency-cdf.pdf") still fits in NAME_MAX.
USER_NAME_MAX_BYTES = 200

_SAFE = re.compile(r"[A-Za-z0-9._+-]")


class OutsideOut(SpecError):
    """A path that is not (or would not stay) inside the output folder."""


def _bad_chars(name: str) -> str | None:
    for ch in name:
        if ch == "\0":
            return "a NUL character"
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return f"the control character U+{ord(ch):04X}"
    return None


def check_name(name: object, *, file: str | None, key: str | None, what: str = "a name",
               path_component: bool = False) -> None:
    """A name a user gives: a non-empty string of printable characters, at most `USER_NAME_MAX_BYTES` bytes;
    ``path_component``: also no ``/`` and not ``.`` or ``..`` (it names files)."""
    if not isinstance(name, str) or not name:
        raise SpecError(file, key, f"expected {what} (a non-empty string), got {show(name)}")
    if bad := _bad_chars(name):
        raise SpecError(file, key, f"expected {what} of printable characters, got {show(name)} ({bad})")
    if len(name.encode()) > USER_NAME_MAX_BYTES:
        raise SpecError(file, key, f"expected {what} of at most {USER_NAME_MAX_BYTES} bytes, got "
                                   f"{len(name.encode())} bytes")
    if path_component:
        if "/" in name or "\\" in name:
            raise SpecError(file, key, f"expected {what} without / or \\ (it names files in the output folder), "
                                       f"got {show(name)}")
        if name in (".", ".."):
            raise SpecError(file, key, f"expected {what} other than . and .., got {show(name)}")


def file_name(name: str, suffix: str = "") -> str:
    """``name`` as one safe file name (+ ``suffix``): letters, digits and ``._+-`` kept, anything else ``_``; no
    leading dot; shortened (with a digest of the name, so different names stay different) to fit NAME_MAX. A name
    that is already safe is returned as it is."""
    safe = "".join(ch if _SAFE.fullmatch(ch) else "_" for ch in name)
    if safe.startswith(".") or not safe:
        safe = "_" + safe
    limit = NAME_MAX_BYTES - len(suffix.encode())
    if safe != name or len(safe) > limit:
        # Changed or cut: a digest of the name keeps two names that map to the same characters apart.
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[:limit - 9]}-{digest}"
    return safe + suffix


def is_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file; a path the file system cannot hold (too long, a NUL, a ~user that does not
    exist) is none, not an exception."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError, RuntimeError):
        return False


def _parts(rel: str | os.PathLike[str], root: Path) -> list[str]:
    text = os.fspath(rel)
    where = str(root)
    if not isinstance(text, str):
        raise OutsideOut(where, None, f"expected a relative path, got {show(text)}")
    if "\0" in text:
        raise OutsideOut(where, None, f"a path with a NUL character: {show(text)}")
    if text.startswith("/"):
        raise OutsideOut(where, None, f"an absolute path where a path inside the folder was expected: {show(text)}")
    parts = text.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise OutsideOut(where, None, f"expected a plain relative path (no empty, . or .. parts), got "
                                          f"{show(text)}")
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES:
            raise OutsideOut(where, None, f"a file name longer than {NAME_MAX_BYTES} bytes: {show(part[:40])}...")
    return parts


def inside(root: str | os.PathLike[str], rel: str | os.PathLike[str]) -> Path:
    """``root``/``rel``, proven to stay inside ``root``: ``rel`` is a plain relative path (see the module's doc) and
    what it resolves to (symbolic links followed, as far as the path exists) lies inside the resolved ``root``.
    Raises OutsideOut (a SpecError naming the folder) otherwise; creates nothing."""
    root = Path(root)
    parts = _parts(rel, root)
    path = root.joinpath(*parts)
    if len(os.fsencode(os.path.abspath(path))) > PATH_MAX_BYTES:
        raise OutsideOut(str(root), None, f"a path longer than {PATH_MAX_BYTES} bytes")
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise OutsideOut(str(root), "/".join(parts), f"resolves to {real}, outside {real_root} (a symbolic link "
                                                     "out of the folder?): iosched writes only inside it")
    return path
