import os
from contextlib import contextmanager
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[3]
# CLI flags for a drive that collects no garbage within a short run (the P4500 preset, fresh), for tests that need
# steady rates: on the default, preconditioned 980 PRO a garbage-collection step stalls writes and the reads behind
# them for ~15 ms, and whether a short run meets one depends on where the drive starts in its step cycle.
STEADY_DEVICE = ("--device", "intel-p4500-2tb")


@pytest.fixture(autouse=True)
def fixture_presets(monkeypatch):
    """Tests use the fixture presets in tests/data/presets unless a test points elsewhere."""
    monkeypatch.setenv("IOSCHED_PRESETS", str(DATA / "presets"))
    from iosched import presets
    presets._cache.clear()
    yield


@contextmanager
def on_real_presets():
    """The shipped presets (not the fixtures) for the duration, for module-scoped fixtures that run paper
    experiments; the preset cache is cleared on the way in and out."""
    from iosched import presets
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
        presets._cache.clear()
        try:
            yield
        finally:
            presets._cache.clear()


@pytest.fixture
def real_presets(monkeypatch):
    """For test modules about the paper findings: the native simulator and the shipped presets
    (`pytestmark = pytest.mark.usefixtures("real_presets")`)."""
    native_or_skip()
    from iosched import presets
    monkeypatch.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
    presets._cache.clear()


def native_or_skip():
    from iosched import native

    if not native.available():
        if os.environ.get("IOSCHED_REQUIRE_NATIVE"):
            raise native.NotBuilt()
        pytest.skip("iosched._native is not built (set IOSCHED_REQUIRE_NATIVE=1 to fail instead)")


def child_processes(pid: int, *, zombies: bool = False) -> list[tuple[int, str, str]]:
    """(pid, command name, command line) of each child of ``pid`` (zombies too with ``zombies``), from /proc: what a
    test that kills a command looks at to see what the command left running or started."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and (zombies or state != "Z"):
                out.append((int(proc.name), (proc / "comm").read_text().strip(),
                            (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
        except (OSError, ValueError):
            continue
    return out


def process_alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="session")
def reproduced_dir(tmp_path_factory):
    """`iosched reproduce seed003-baseline --quick` once per test session, on the real presets."""
    native_or_skip()
    from click.testing import CliRunner

    from iosched import presets
    from iosched.cli import main

    out = tmp_path_factory.mktemp("reproduced") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
        presets._cache.clear()
        res = CliRunner().invoke(main, ["reproduce", "seed003-baseline", "--quick", "--out", str(out)])
        assert res.exit_code == 0, res.output
    presets._cache.clear()
    return out
