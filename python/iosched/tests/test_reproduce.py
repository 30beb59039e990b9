"""`iosched reproduce` end to end on the real presets: seed 003's baseline table in --quick mode."""

import json

import pytest
from click.testing import CliRunner

from iosched import load, store
from iosched.cli import main

from .conftest import REPO


@pytest.fixture(autouse=True)
def real_presets(monkeypatch):
    from iosched import presets

    monkeypatch.setenv("IOSCHED_PRESETS", str(REPO / "presets"))
    presets._cache.clear()


def test_list_shows_every_experiment():
    res = CliRunner().invoke(main, ["reproduce", "--list"])
    assert res.exit_code == 0, res.output
    for name in ("seed000-fig1", "seed000-latency", "seed000-throughput", "seed000-interference", "seed000-kyber",
                 "seed003-baseline", "seed003-kyber"):
        assert name in res.output


def test_unknown_experiment_is_one_line():
    res = CliRunner().invoke(main, ["reproduce", "seed000-nope", "--quick"])
    assert res.exit_code == 2 and res.output.startswith("error: no paper experiment 'seed000-nope'")


def test_reproduce_quick_writes_results_checks_and_report(reproduced_dir):
    out = reproduced_dir
    man = store.read_manifest(out)["experiments"]["seed003-baseline"]
    assert man["mode"] == "quick" and len(man["runs"]) == 8
    assert all(store.is_done(out, r["id"]) for r in man["runs"])
    checks = load(out, "checks")
    assert len(checks) == 9 and set(checks["experiment"]) == {"seed003-baseline"}  # 8 calibration rows + points
    r1 = checks[checks["what"] == "W1: W KIOPS"].iloc[0]
    assert r1["paper_value"] == 62.3 and r1["ratio"] == pytest.approx(r1["iosched_value"] / 62.3)
    html = (out / "report.html").read_text()
    assert "baseline table" in html and "R256-W256" in html
    assert {p.suffix for p in (out / "figures").iterdir()} == {".png", ".svg", ".pdf"}
    df = load(out)
    assert len(df) == 12  # 4 single-job rows + 4 two-job rows
    assert set(df["experiment"]) == {"seed003-baseline"}


def test_reproduce_again_resumes_without_simulating(reproduced_dir, monkeypatch):
    import iosched.sweep as sweep

    before = (reproduced_dir / "results.parquet").read_bytes()
    monkeypatch.setattr(sweep, "simulate_task", lambda *a: pytest.fail("nothing should be simulated"))
    res = CliRunner().invoke(main, ["reproduce", "seed003-baseline", "--quick", "--out", str(reproduced_dir),
                                    "--no-static"])
    assert res.exit_code == 0, res.output
    # one counted row (the points); the calibration rows are shown and not counted
    assert "seed003-baseline (baseline table):" in res.output
    assert " of 1 hold; calibration inputs (not counted): " in res.output
    assert (reproduced_dir / "results.parquet").read_bytes() == before


def test_query_over_reproduced_runs(reproduced_dir):
    res = CliRunner().invoke(main, ["query", str(reproduced_dir),
                                    "SELECT r.series, round(sum(read_iops)) AS iops FROM results JOIN runs r "
                                    "USING (run_id) WHERE r.series = 'R1' GROUP BY r.series", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows[0]["series"] == "R1" and 10_000 < rows[0]["iops"] < 20_000
