"""The measurement plan: the steps `iosched calibrate` measures (and `iosched validate` measures again), each a
small fio spec run with the `none` scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..simconfig import Job

ENGINE = "libaio"


@dataclass(frozen=True)
class Step:
    name: str          # experiment name of the kernel run, and the key of its measurement
    jobs: tuple[Job, ...]
    what: str          # for progress lines and provenance strings


def _job(name: str, rw: str, qd: int, bs: int = 4096, numjobs: int = 1) -> Job:
    return Job(name, rw, qd, [], bs_bytes=bs, numjobs=numjobs, ioengine=ENGINE)


READ_QDS = (1, 4, 16, 64)


def max_qd(geometry: dict[str, int]) -> int:
    """The 'high QD' of the plan: enough to fill every driver tag of the device (so the write ceiling is measured
    with the queue full, as several writers would keep it), at least 64 and at most 256."""
    tags = geometry.get("max_hw_queues", 1) * geometry.get("queue_depth", 64)
    return max(64, min(256, tags))


def plan(high_qd: int = 64) -> tuple[Step, ...]:
    read_qds = READ_QDS + ((high_qd,) if high_qd > READ_QDS[-1] else ())
    return (
        *(Step(f"cal-randread-qd{qd}", (_job("r", "randread", qd),), f"4 KiB random read, QD {qd}") for qd in read_qds),
        Step("cal-randwrite-qd1", (_job("w", "randwrite", 1),), "4 KiB random write, QD 1"),
        Step("cal-randwrite-qdmax", (_job("w", "randwrite", high_qd),), f"4 KiB random write, QD {high_qd}"),
        Step("cal-seqread-128k", (_job("r", "read", 32, bs=131072),), "128 KiB sequential read, QD 32"),
        Step("cal-seqwrite-128k", (_job("w", "write", 32, bs=131072),), "128 KiB sequential write, QD 32"),
        Step("cal-mixed", (_job("r", "randread", 1), _job("w", "randwrite", 32)),
             "mixed: 4 KiB random read QD 1 + 4 KiB random write QD 32"),
    )


def queue_geometry(sysfs: Path) -> dict[str, int]:
    """The block layer's view of the device: hardware queues and driver tags per queue (what the model's
    max_hw_queues and queue_depth are), from /sys/block/X/mq/*/nr_tags."""
    queues = sorted((sysfs / "mq").glob("*")) if (sysfs / "mq").is_dir() else []
    tags = [int((q / "nr_tags").read_text()) for q in queues if (q / "nr_tags").is_file()]
    if not tags:
        return {}
    return {"max_hw_queues": len(tags), "queue_depth": min(tags)}


PLAN = plan()


def spec_toml(step: Step, duration_s: float, ramp_s: float) -> str:
    lines = [f'name = "{step.name}"', f'duration = "{duration_s}s"', f'ramp = "{ramp_s}s"', "repeat = 1", "seed = 1",
             'scheduler = { name = "none" }', ""]
    for j in step.jobs:
        lines += ["[[job]]", f'name = "{j.name}"', f'rw = "{j.rw}"', f"bs = {j.bs_bytes}", f"iodepth = {j.iodepth}",
                  f'ioengine = "{j.ioengine}"', f"numjobs = {j.numjobs}", ""]
    return "\n".join(lines)


def drift_steps(geometry: dict[str, int]) -> tuple[Step, ...]:
    """The calibration steps `validate` measures again: the read and write ceilings at the plan's high QD, the two
    figures that set a loaded device's pace (command_ns and write_command_ns are fitted to them)."""
    qd = max_qd(geometry)
    return tuple(s for s in plan(qd) if s.name in (f"cal-randread-qd{qd}", "cal-randwrite-qdmax"))
