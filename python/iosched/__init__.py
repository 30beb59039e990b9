"""iosched: Linux I/O schedulers on NVMe, simulated (and later measured) from one experiment description."""

from __future__ import annotations

try:
    from importlib.metadata import PackageNotFoundError, version as _dist_version

    __version__ = _dist_version("iosched")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
