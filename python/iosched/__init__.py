"""iosched: Linux I/O schedulers on NVMe, simulated (and later measured) from one experiment description."""

from __future__ import annotations

from .version import __version__

__all__ = ["__version__", "load", "run", "Results"]


def __getattr__(name: str):
    # iosched.run and iosched.Results without importing the spec machinery on `import iosched`.
    if name in ("run", "Results"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'iosched' has no attribute {name!r}")


def load(dir, table: str = "results"):
    """A results folder (of `iosched run` or `iosched reproduce`) as a pandas DataFrame: one row per run and job
    (``table="timeseries"``, ``"runs"`` or ``"checks"`` for the others)."""
    from .store import load as _load

    return _load(dir, table)
