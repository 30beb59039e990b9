"""The simulator backend: a resolved run → SimConfig JSON → iosched._native.simulate → SimResult dict."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any, Callable

from .. import __version__
from ..spec import ResolvedRun


def build_config(run: ResolvedRun) -> dict[str, Any]:
    """The SimConfig (crates/iosched-sim/src/config.rs) for a run, field for field."""
    return {
        "seed": run.seed,
        "host": run.host,
        "devices": run.devices,
        "scheduler": {
            "name": run.scheduler,
            "tunables": [[k, v] for k, v in sorted(run.tunables.items())],
            "nr_requests": run.nr_requests,
            "block_layer": run.block_layer,
        },
        "jobs": [j.config for j in run.jobs],
        "sample_interval_ns": run.sample_interval_ns,
    }


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_CODE_VERSION: str | None = None


def code_version() -> str:
    """The version of the code that turns a config into results: iosched's version, the digest of the simulator's
    Rust sources (embedded at build time) and of the Python module that derives the result files. Stored results
    are reused (sweeps resume) only under the same code version."""
    global _CODE_VERSION
    if _CODE_VERSION is None:
        from pathlib import Path

        try:
            from .. import _native
            sim = _native.source_digest()[:12]
        except (ImportError, AttributeError):
            sim = "unbuilt"
        derive = hashlib.sha256((Path(__file__).parent.parent / "results.py").read_bytes()).hexdigest()[:8]
        _CODE_VERSION = f"{__version__}+sim.{sim}.py.{derive}"
    return _CODE_VERSION


def run_id(run: ResolvedRun) -> str:
    """First 16 hex digits of sha256(SimConfig, experiment, repetition, code version). A replayed trace counts by
    its content (sha256), not by where the checkout keeps it, so the same run has the same id everywhere."""
    config = build_config(run)
    config["jobs"] = [dict(job, trace=dict(job["trace"], path=None)) if (job.get("trace") or {}).get("sha256")
                      else job for job in config["jobs"]]
    blob = canonical_json([config, run.experiment, run.repetition, code_version()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def native_available() -> bool:
    try:
        from .. import _native  # noqa: F401
    except ImportError:
        return False
    return True


def native_version() -> str:
    from .. import _native
    return _native.version()


def simulated_process_seconds(run: ResolvedRun) -> float:
    return sum((j.config["start_ns"] + j.config["ramp_ns"] + j.config["runtime_ns"]) * j.config["numjobs"]
               for j in run.jobs) / 1e9


def simulate_config(cfg: dict[str, Any], progress: Callable[[float], None] | None = None) -> tuple[dict, float]:
    """Run the simulator on a SimConfig dict; returns (SimResult dict, wall seconds)."""
    from .. import _native
    t0 = time.perf_counter()
    out = _native.simulate(canonical_json(cfg), progress)
    wall = time.perf_counter() - t0
    return json.loads(out), wall


def simulate(run: ResolvedRun, *, label: str = "", show_progress: bool | None = None) -> tuple[dict, float]:
    """Simulate a run; a rich progress bar on stderr when stderr is a terminal (never otherwise)."""
    cfg = build_config(run)
    if show_progress is None:
        show_progress = sys.stderr.isatty()
    if not show_progress:
        return simulate_config(cfg, None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label or run.experiment, total=1.0)

        def on_progress(fraction: float) -> None:
            bar.update(task, completed=min(max(fraction, 0.0), 1.0))

        return simulate_config(cfg, on_progress)
