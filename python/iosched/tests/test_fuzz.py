"""The fuzzer in the suite (iosched.tests.fuzzing): hypothesis mutates the shipped specs, fio job files and traces,
and every input must give exit 0, or exit 2 with one error line, within the time and memory bound, writing nothing
outside --out. IOSCHED_FUZZ_EXAMPLES sets the number of cases (default 2,000: about two minutes), IOSCHED_FUZZ_SEED
the seed (default 0: the same cases each run; scripts/fuzz runs long campaigns with new ones).

The reproducers that earlier campaigns found (tests/data/fuzz/*.json) run first, each through the same property;
the harness itself is checked with negative controls (made-up outcomes that must fail the property).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iosched.tests import fuzzing as fz
from iosched.tests.conftest import DATA, REPO, native_or_skip

EXAMPLES = int(os.environ.get("IOSCHED_FUZZ_EXAMPLES", "2000"))
SEED = int(os.environ.get("IOSCHED_FUZZ_SEED", "0"))
REPRODUCERS = sorted((DATA / "fuzz").glob("*.json"))


@pytest.fixture(scope="module")
def server():
    native_or_skip()
    s = fz.ForkServer(env={"IOSCHED_PRESETS": str(REPO / "presets")})
    yield s
    s.close()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "work" / "case"


def _case(path: Path) -> fz.Case:
    doc = json.loads(path.read_text())
    return fz.Case({k: v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v["bytes"])
                    for k, v in doc["files"].items()}, doc["args"], doc.get("report", False))


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_reproducers_found_by_fuzzing(server, work, path):
    doc = json.loads(path.read_text())
    o = fz.run_case(server, _case(path), work)
    assert not o.problems, (o.problems, o.stderr)
    assert o.exit == doc["exit"], o.stderr
    if "error" in doc:
        assert doc["error"] in o.stderr, o.stderr


def test_the_fuzzed_inputs_keep_the_property(server, work):
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    seen: dict[str, int] = {}

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(st.data())
    def check(data):
        case = fz.make_case(fz.HypothesisChooser(data), report_chance=0.005)
        o = fz.run_case(server, case, work)
        seen[o.kind] = seen.get(o.kind, 0) + 1
        assert not o.problems, f"{o.problems}\n--- stderr:\n{o.stderr[-2000:]}\n--- case:\n{case.describe()[:4000]}"

    check()
    # The cases must reach both ends: runs that finish and inputs that are refused.
    assert seen.get("ok", 0) >= EXAMPLES // 50 and seen.get("error", 0) >= EXAMPLES // 4, seen


# ---------------------------------------------------------------- the property's negative controls

def _outcome(**kw):
    base = dict(exit=2, seconds=0.1, max_rss_bytes=100 << 20, timed_out=False, stderr="error: x.toml: bad\n",
                stdout="")
    return fz.Outcome(**{**base, **kw})


@pytest.mark.parametrize("outcome,problem", [
    (_outcome(stderr="Traceback (most recent call last):\n  File x\nValueError: y\n", exit=1), "traceback"),
    (_outcome(exit=1, stderr="error: internal error: the simulator panicked (x)\n"), "panic"),
    (_outcome(timed_out=True), "hang"),
    (_outcome(exit=-9, stderr=""), "crash"),
    (_outcome(exit=1, stderr="error: x\n"), "exit"),
    (_outcome(stderr="error: a\nerror: b\n"), "message"),
    (_outcome(stderr="Usage: iosched run\nError: bad\n"), "message"),
    (_outcome(stderr="error: x.toml: simulator rejected the config: simulator config: invalid value\n"),
     "internal-terms"),
    (_outcome(max_rss_bytes=fz.MEMORY_BOUND_BYTES + 1), "memory"),
    (_outcome(outside=["/tmp/escaped-latency-cdf.png"]), "outside"),
])
def test_the_property_catches_what_it_must(outcome, problem):
    problems = fz.check(outcome, fz.CASE_TIMEOUT_S, fz.MEMORY_BOUND_BYTES)
    assert problems and problems[0].startswith(problem + ":"), problems
    assert fz.check(_outcome(), fz.CASE_TIMEOUT_S, fz.MEMORY_BOUND_BYTES) == []
    assert fz.check(_outcome(exit=0, stderr="note: x\n"), fz.CASE_TIMEOUT_S, fz.MEMORY_BOUND_BYTES) == []


def test_the_audit_hook_sees_writes_outside_out(tmp_path):
    """The hook each case runs under: a write, a folder, a rename or a removal outside the allowed folder is noted;
    inside it, or a read, is not."""
    import os

    out, found = tmp_path / "out", []
    out.mkdir()
    hook = fz._audit([os.path.realpath(out)], found)
    hook("open", (str(out / "figures" / "x.png"), "wb", os.O_WRONLY))
    hook("open", (str(tmp_path / "spec.toml"), "r", os.O_RDONLY))
    assert found == []
    hook("open", (str(out / ".." / "escaped-latency-cdf.png"), "wb", os.O_WRONLY | os.O_CREAT))
    hook("os.mkdir", (str(tmp_path / "made"), 0o777, None))
    hook("os.replace", (str(out / "a"), "/tmp/iosched-fuzz-escaped"))
    hook("shutil.rmtree", (str(tmp_path),))
    assert [Path(p).name for p in found] == ["escaped-latency-cdf.png", "made", "iosched-fuzz-escaped",
                                            tmp_path.name]


def test_a_case_reports_what_it_wrote(server, work):
    case = fz.Case({"spec.toml": b'name = "x"\nduration = "1ms"\n[[job]]\nname = "a"\n'}, ["spec.toml"])
    o = fz.run_case(server, case, work)
    assert o.exit == 0 and not o.problems, o.stderr
    assert (work / "outside").is_file() and (work / "out" / "results.parquet").is_file()
