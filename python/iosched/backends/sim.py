"""The simulator backend: a resolved run → SimConfig (iosched.simconfig) → the native simulator → SimResult dict,
and the run id that names a simulated run in a results folder."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Callable

from .. import native
from ..simconfig import run_config
from ..spec import ResolvedRun
from ..version import code_version


def run_id(run: ResolvedRun) -> str:
    """First 16 hex digits of sha256(SimConfig, experiment, repetition, code version). A replayed trace counts by
    its content (sha256), not by where the checkout keeps it, so the same run has the same id everywhere."""
    config = run_config(run)
    config["jobs"] = [dict(job, trace=dict(job["trace"], path=None)) if (job.get("trace") or {}).get("sha256")
                      else job for job in config["jobs"]]
    blob = native.canonical_json([config, run.experiment, run.repetition, code_version()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def simulated_process_seconds(run: ResolvedRun) -> float:
    return sum((j.config["start_ns"] + j.config["ramp_ns"] + j.config["runtime_ns"]) * j.config["numjobs"]
               for j in run.jobs) / 1e9


def simulate_config(cfg: dict[str, Any], progress: Callable[[float], None] | None = None) -> tuple[dict, float]:
    """Run the simulator on a SimConfig dict; returns (SimResult dict, wall seconds)."""
    t0 = time.perf_counter()
    out = native.simulate_json(native.canonical_json(cfg), progress)
    wall = time.perf_counter() - t0
    return json.loads(out), wall
