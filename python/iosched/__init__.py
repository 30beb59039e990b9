"""iosched: Linux I/O schedulers on NVMe, simulated (and later measured) from one experiment description."""

from __future__ import annotations

from .version import __version__

__all__ = ["__version__", "load"]


def load(dir, table: str = "results"):
    """A results folder (of `iosched run` or `iosched reproduce`) as a pandas DataFrame: one row per run and job
    (``table="timeseries"``, ``"runs"`` or ``"checks"`` for the others)."""
    from .store import load as _load

    return _load(dir, table)
