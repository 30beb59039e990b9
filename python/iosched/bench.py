"""`iosched bench`: simulator speed on two fixed scenarios."""

from __future__ import annotations

from typing import Any, Callable

from . import spec as spec_mod
from .fiojob import RawJob


def scenario(name: str, ssds: int, duration_ns: int) -> spec_mod.ResolvedRun:
    """10 processes, one per core, 4 KiB randread QD128 io_uring; each on all `ssds` devices."""
    files = ":".join(spec_mod.device_names(["nvme"] * ssds))
    data = {"name": f"bench-{name}", "duration": f"{duration_ns}ns", "seed": 1,
            "host": {"preset": "xeon-silver-4210r-10c"},
            "devices": [{"preset": "samsung-980pro-1tb", "count": ssds}], "scheduler": {"name": "none"}}
    jobs = [RawJob(name=f"p{i}", options={"rw": "randread", "bs": "4k", "iodepth": 128, "ioengine": "io_uring",
                                          "cpus_allowed": str(i), "filename": files},
                   file="bench", label=f'job "p{i}"', origin="toml") for i in range(10)]
    exp = spec_mod.Experiment(file="bench", data=data, jobs=jobs, kind="toml")
    return spec_mod.resolve(exp, data, jobs, {}, 0)


def run_bench(quick: bool = False, echo: Callable[[str], None] | None = print) -> list[dict[str, Any]]:
    from .backends.sim import simulate_config
    from .simconfig import run_config

    duration = 200_000_000 if quick else 1_000_000_000
    out = []
    for name, ssds, desc in (("A", 1, "10 procs x QD128 4k randread, 1 SSD"),
                             ("B", 8, "10 procs x QD128 4k randread, 8 SSDs")):
        run = scenario(name, ssds, duration)
        result, wall = simulate_config(run_config(run))
        ios = result["ios_completed"]
        sim_s = result["sim_time_ns"] / 1e9
        row = {"scenario": name, "description": desc, "simulated_s": sim_s, "ios": ios, "wall_s": wall,
               "ios_per_wall_s": ios / wall if wall > 0 else 0.0,
               "sim_over_wall": sim_s / wall if wall > 0 else 0.0, "events": result["events"]}
        out.append(row)
        if echo:
            echo(f"{name}: {desc}: {ios} I/Os simulated in {wall:.2f} s wall = {row['ios_per_wall_s'] / 1e6:.2f} M "
                 f"I/Os per wall s; simulated/wall time = {row['sim_over_wall']:.3f}")
    return out
