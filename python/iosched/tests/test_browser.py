"""report.html in a real browser (Debian's chromium driven by playwright): it loads offline with no console
errors and every figure draws.

Skipped when chromium or playwright is missing, unless IOSCHED_REQUIRE_BROWSER is set (CI sets it: there the
test must run). ./scripts/setup installs both.
"""

import os
import shutil
from pathlib import Path

import pytest

from iosched.report.build import build

from . import toy

CHROMIUM = os.environ.get("IOSCHED_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


@pytest.fixture(scope="module")
def browser():
    required = bool(os.environ.get("IOSCHED_REQUIRE_BROWSER"))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            raise
        pytest.skip("playwright is not installed (pip install playwright; IOSCHED_REQUIRE_BROWSER=1 fails instead)")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        if required:
            pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (./scripts/setup does, as root)")
        pytest.skip(f"{CHROMIUM} not found (IOSCHED_REQUIRE_BROWSER=1 fails instead)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def open_report(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:"))
            else None)
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, errors, requests


DRAWN = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(div => ({
    id: div.id,
    svg: div.querySelectorAll('.main-svg').length,
    lines: div.querySelectorAll('.scatterlayer .trace path.js-line').length,
    points: div.querySelectorAll('.scatterlayer .trace .point').length,
    bars: div.querySelectorAll('.barlayer .trace .point').length,
    heat: div.querySelectorAll('.heatmaplayer image, .heatmaplayer .hm').length,
    width: div.getBoundingClientRect().width,
}))"""


def test_report_loads_offline_without_errors_and_every_figure_draws(browser, tmp_path):
    out = tmp_path / "res"
    with toy.registered():
        toy.make_results(out)
        build(out, static=False)
    page, errors, requests = open_report(browser, out / "report.html")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2", timeout=30_000)
    figs = {f["id"]: f for f in page.evaluate(DRAWN)}
    assert set(figs) == {"fig-toy-fig1", "fig-toy-fig2"}
    assert all(f["svg"] > 0 and f["width"] > 300 for f in figs.values())
    assert figs["fig-toy-fig1"]["lines"] >= 4  # two KIOPS lines and two CDFs
    assert figs["fig-toy-fig2"]["heat"] >= 1 and figs["fig-toy-fig2"]["bars"] >= 2
    assert page.locator("text=Paper vs iosched").count() == 1
    assert not errors, errors
    assert not requests, f"the page fetched from the network: {requests}"
    page.close()


def test_a_reproduced_report_draws_every_figure(browser, reproduced_dir):
    """The report of a real `iosched reproduce` run (seed 003's baseline; see test_reproduce.py)."""
    page, errors, requests = open_report(browser, reproduced_dir / "report.html")
    n = page.evaluate("document.querySelectorAll('.figure').length")
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n}", timeout=30_000)
    figs = page.evaluate(DRAWN)
    assert len(figs) == n >= 1
    assert all(f["svg"] > 0 and (f["lines"] + f["bars"] + f["heat"]) > 0 for f in figs), figs
    assert not errors and not requests, (errors, requests)
    page.close()


def test_the_fidelity_picture_draws_with_its_band(browser, tmp_path):
    out = tmp_path / "res"
    with toy.registered(toy.scored_toy()):
        toy.make_results(out)
        build(out, static=False)
    page, errors, requests = open_report(browser, out / "report.html")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3", timeout=30_000)
    figs = {f["id"]: f for f in page.evaluate(DRAWN)}
    fid = figs["fig-fidelity-seed999"]
    assert fid["svg"] > 0 and fid["lines"] >= 3 and fid["points"] >= 6   # band edges, diagonal; one dot per point
    assert page.locator("text=every plotted point against the paper's own data").count() == 1
    assert not errors and not requests, (errors, requests)
    page.close()


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A 4-scheduler x 4-depth sweep of one reader, as a user would run it (`iosched run`)."""
    from click.testing import CliRunner

    from iosched.cli import main

    from .conftest import native_or_skip

    native_or_skip()
    tmp = tmp_path_factory.mktemp("sweep")
    spec = tmp / "qd.toml"
    spec.write_text('name = "qd"\nduration = "300ms"\nramp = "100ms"\n[[job]]\nname = "r"\nrw = "randread"\n'
                    '[sweep]\n"scheduler.name" = ["none", "mq-deadline", "kyber", "bfq"]\n'
                    '"job.r.iodepth" = [1, 4, 16, 64]\n')
    res = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp / "res"), "-j", "2"])
    assert res.exit_code == 0, res.output
    return tmp / "res"


@pytest.mark.parametrize("width", [800, 1400])
def test_a_sweeps_report_draws_every_plot_and_fits_the_window(browser, sweep_dir, width, tmp_path):
    """Every figure of a sweep's report draws (metric vs depth per scheduler, bars per scheduler, the heat maps,
    the tails, IOPS and latency over time, each scheduler's state over time), nothing overflows the window at
    either width (a wide table scrolls inside it), and a screenshot of each width is kept beside the results."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto((sweep_dir / "report.html").resolve().as_uri(), wait_until="load")
    n = page.evaluate("document.querySelectorAll('.figure').length")
    page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n}", timeout=60_000)
    figs = {f["id"]: f for f in page.evaluate(DRAWN)}
    assert {"fig-qd-latency-cdf", "fig-qd-vs-job.r.iodepth", "fig-qd-by-scheduler", "fig-qd-heatmap", "fig-qd-tail",
            "fig-qd-over-time-jobs", "fig-qd-over-time-kyber", "fig-qd-over-time-bfq"} <= set(figs)
    assert all(f["svg"] > 0 and (f["lines"] + f["bars"] + f["heat"]) > 0 for f in figs.values()), figs
    assert figs["fig-qd-by-scheduler"]["bars"] >= 4 and figs["fig-qd-heatmap"]["heat"] >= 2
    assert figs["fig-qd-vs-job.r.iodepth"]["lines"] >= 4 * 4     # 4 schedulers x (IOPS, P99, P99.9, cores busy)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not errors, errors
    page.screenshot(path=str(sweep_dir / f"screenshot-{width}.png"), full_page=True)
    assert (sweep_dir / f"screenshot-{width}.png").stat().st_size > 50_000
    page.close()
