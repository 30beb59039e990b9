"""The paper experiments' registry: every registered experiment expands into valid runs, in both modes."""

import pytest

from iosched.backends.sim import run_id, simulated_process_seconds
from iosched.errors import SpecError
from iosched.papers import registry
from iosched.papers.registry import Check, apply_overrides, as_check


@pytest.fixture(autouse=True)
def real_presets(monkeypatch):
    from iosched import presets

    from .conftest import REPO
    monkeypatch.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
    presets._cache.clear()


def test_every_experiment_expands_into_distinct_valid_runs():
    exps = registry.experiments()
    assert len({e.name for e in exps}) == len(exps)
    for e in exps:
        assert e.refs and e.title and e.seed.isdigit() and e.checks is not None
        assert all(n.ref and n.what for n in e.paper), e.name
        quick, full = e.runs(quick=True), e.runs(quick=False)
        assert quick and len(full) >= len(quick)
        assert all(r.repetition == 0 for _, r in quick)
        for series in e.series:  # runs shared between series (the same config) are simulated once
            ids = [run_id(r) for s, r in full if s == series.name]
            assert len(set(ids)) == len(ids), f"{e.name}/{series.name}: two runs with the same id"
        assert sum(simulated_process_seconds(r) for _, r in quick) < sum(simulated_process_seconds(r) for _, r in full)
        assert {s.name for s in e.series} == {s for s, _ in full}


def test_seed_000_and_003_figures_and_tables_are_covered():
    refs = {r for e in registry.experiments() if e.seed == "000" for r in e.refs}
    assert {f"Fig. {i}" for i in range(1, 13)} | {"Table 2", "Table 3", "Table 4"} <= refs
    refs3 = {r for e in registry.experiments() if e.seed == "003" for r in e.refs}
    assert refs3 == {"baseline table", "configuration plots"}


def test_select_by_name_seed_and_all():
    assert [e.name for e in registry.select(["seed003-baseline"])] == ["seed003-baseline"]
    assert {e.seed for e in registry.select(["seed000"])} == {"000"}
    assert len(registry.select(["all", "seed000-kyber"])) == len(registry.experiments())
    with pytest.raises(SpecError, match="no paper experiment 'nope'"):
        registry.select(["nope"])
    with pytest.raises(SpecError, match="no paper experiments for seed042"):
        registry.select(["seed042"])


def test_quick_overrides():
    spec = {"duration": "1s", "job": [{"name": "a", "iodepth": 1}, {"name": "b", "iodepth": 2}]}
    out = apply_overrides(spec, {"duration": "200ms", "job.b.iodepth": 8})
    assert out == {"duration": "200ms", "job": [{"name": "a", "iodepth": 1}, {"name": "b", "iodepth": 8}]}
    assert spec["duration"] == "1s"  # not modified in place
    with pytest.raises(SpecError, match='no job named "c"'):
        apply_overrides(spec, {"job.c.iodepth": 1}, "x")
    with pytest.raises(SpecError, match="top-level key or job.NAME.OPTION"):
        apply_overrides(spec, {"host.cores": 1}, "x")


def test_checks_from_other_modules_and_ratios():
    class Other:  # a seed module's own Check-shaped class
        finding, what, paper, simulated, holds = "K1", "x", "1", "2", True
    c = as_check(Other(), "Table II")
    assert (c.finding, c.ref, c.holds, c.ratio) == ("K1", "Table II", True, None)
    assert Check("F", "w", "2", "3", True, 2.0, 3.0).ratio == 1.5
    assert Check("F", "w", "0", "3", True, 0.0, 3.0).ratio is None


def test_registering_twice_is_an_error():
    e = registry.experiments()[0]
    registry.register(e)  # the same object again: fine
    registry.register(registry.PaperExperiment(**{**e.__dict__}))  # the same declaration re-imported: fine
    assert registry.get(e.name) is e
    other = registry.PaperExperiment(**{**e.__dict__, "title": "something else"})
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(other)
    modules = registry.seed_modules()
    assert modules == sorted(modules) and {"iosched.papers.seed000", "iosched.papers.seed003"} <= set(modules)
