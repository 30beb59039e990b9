"""Where the data iosched ships (presets, sample traces) lives."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(env: str | None, name: str, pattern: str) -> Path:
    """$env if set, else the copy shipped in the package (``iosched/<name>``, if it holds files matching
    ``pattern``), else the checkout's ``<name>/`` (an editable install), else the package path."""
    override = os.environ.get(env) if env else None
    if override:
        return Path(override)
    here = Path(__file__).resolve().parent
    shipped = here / name
    if shipped.is_dir() and any(shipped.glob(pattern)):
        return shipped
    checkout = here.parent.parent / name
    if checkout.is_dir():
        return checkout
    return shipped
