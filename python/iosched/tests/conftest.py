import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def fixture_presets(monkeypatch):
    """Tests use the fixture presets in tests/data/presets unless a test points elsewhere."""
    monkeypatch.setenv("IOSCHED_PRESETS", str(DATA / "presets"))
    from iosched import presets
    presets._cache.clear()
    yield


def native_or_skip():
    try:
        from iosched import _native  # noqa: F401
    except ImportError:
        if os.environ.get("IOSCHED_REQUIRE_NATIVE"):
            raise
        pytest.skip("iosched._native is not built (set IOSCHED_REQUIRE_NATIVE=1 to fail instead)")
