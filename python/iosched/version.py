"""Versions: iosched's own (``__version__``) and the code version stored with every simulated run."""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import native

try:
    from importlib.metadata import PackageNotFoundError, version as _dist_version

    __version__ = _dist_version("iosched")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+source"

_CODE_VERSION: str | None = None


def code_version() -> str:
    """The version of the code that turns a config into results: iosched's version, the digest of the simulator's
    Rust sources (embedded at build time) and of the Python module that derives the result files (results.py).
    Stored results are reused (sweeps resume) only under the same code version."""
    global _CODE_VERSION
    if _CODE_VERSION is None:
        try:
            sim = native.source_digest()[:12]
        except (ImportError, AttributeError):
            sim = "unbuilt"
        derive = hashlib.sha256((Path(__file__).parent / "results.py").read_bytes()).hexdigest()[:8]
        _CODE_VERSION = f"{__version__}+sim.{sim}.py.{derive}"
    return _CODE_VERSION
