"""Block traces for replay (fio's read_iolog): where they are found, and their validation.

Parsing happens in the simulator (Rust): it streams a trace a line at a time while replaying it, so memory stays
constant and large traces are fast. The same parser checks a whole trace before a run (`native.trace_summary`),
so a bad line is reported with the file, the line and what was expected before anything is simulated or written,
and the summary (records, mix, bytes, LUNs) lets the spec say which LUNs exist.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import native
from .datadir import data_dir
from .errors import SpecError
from .safepath import is_file

FORMATS = ("systor17", "msr", "blkparse")
BLKPARSE_ACTIONS = ("D", "Q")


def traces_dir() -> Path:
    """The sample traces: $IOSCHED_TRACES, else the copy shipped in the package, else the checkout's traces/."""
    return data_dir("IOSCHED_TRACES", "traces", "*.csv")


def sample_traces() -> list[Path]:
    """The shipped sample traces (see traces/README.md)."""
    return sorted(p for p in traces_dir().glob("*") if p.is_file() and p.suffix in (".csv", ".txt"))


def find_trace(value: str, base: Path) -> Path | None:
    """A read_iolog value as a file: absolute; else relative to the file that names it, to the working directory
    (where fio looks), or a shipped sample, in that order."""
    try:
        p = Path(value).expanduser()
    except RuntimeError:          # ~user of a user that does not exist
        return None
    if p.is_absolute():
        return p if is_file(p) else None
    for candidate in (base / p, p, traces_dir() / p):
        if is_file(candidate):
            return candidate
    return None


@dataclass(frozen=True)
class TraceSummary:
    """What a replay of one trace (with its format, LUN and action) issues."""
    format: str
    records: int
    reads: int
    writes: int
    read_bytes: int
    write_bytes: int
    max_bytes: int
    skipped: int
    first_ns: int
    last_ns: int
    span_ns: int
    luns: tuple[str, ...]
    luns_truncated: bool


def summarize(path: Path, display: str, fmt: str | None, lun: str | None, action: str) -> TraceSummary | None:
    """Validate a trace with the simulator's parser. None if the simulator is not built (it checks when it runs).

    Bad input raises SpecError(display, "line N", what was expected).
    """
    if not native.available():
        return None
    st = path.stat()
    out = _summary(str(path.resolve()), st.st_size, st.st_mtime_ns, fmt, lun, action, native.trace_summary)
    if "error" in out:
        err = out["error"]
        raise SpecError(display, f"line {err['line']}" if err["line"] is not None else None, err["message"])
    s = out["summary"]
    return TraceSummary(**{**s, "luns": tuple(s["luns"])})


@lru_cache(maxsize=64)
def _summary(path: str, size: int, mtime_ns: int, fmt: str | None, lun: str | None, action: str, parse) -> dict:
    # Keyed on size and mtime too: a trace rewritten between runs is read again.
    return json.loads(parse(path, fmt, lun, action))


@lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256(path: Path) -> str:
    """The content hash a run's config carries, so a changed trace gives a new run id."""
    st = path.stat()
    return _sha256(str(path.resolve()), st.st_size, st.st_mtime_ns)
