"""Seed 004 (Ozen & Yildirim, SAUJS 2019): Noop, Deadline, CFQ and BFQ on a SATA SSD under IOzone.

The paper's setup (§3): an i7-3517U-class laptop (4 logical cores, 4 GB), a SanDisk U100 240 GB SATA SSD with ext4,
Linux 4.19; IOzone throughput mode with 3 processes, 64 KiB records, files of 64 KiB to 500 MB, the write, rewrite,
read and reread tests; throughput averaged over the file sizes. Findings (targets.md "Seed 004"): L1 noop best in
every test; L2 deadline's read lead over CFQ and BFQ, rewrite ~38% faster than write.

How it is simulated (README "Legacy single-queue schedulers (seed 004)"): every run uses the presets i7-3517u-4c and
sandisk-u100-240gb-sata, nothing tuned per experiment. noop, deadline and cfq run on the legacy single-queue block
layer; BFQ on blk-mq, as mainline 4.19 only has BFQ there (the paper's reboots between schedulers fit switching
scsi_mod.use_blk_mq). IOzone's I/O is buffered (no -I in the paper, and its reread explanation is the OS cache):
3 psync processes, each with its own file (a contiguous region, offset_increment = file size), 64 KiB records.
One run per scheduler and size does IOzone's write then rewrite (stonewall: the rewrite starts when all writers are
done, with the dirty data and writeback they left); another does read then reread on a cold cache (the paper
reboots to remove cache effects; `invalidate=1` drops nothing there), the reread without invalidation.
Throughput per test: the three processes' bytes over the time until the last one finished.

`python -m iosched.papers.seed004 [l1 l2]` prints paper vs simulated; `test_seed004_findings.py` asserts the shapes
that hold.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from ..fiojob import DeviceInfo, JobContext, RawJob, resolve_job
from ..presets import load_preset
from .seed000 import Check

HOST, DEVICE = "i7-3517u-4c", "sandisk-u100-240gb-sata"
SCHEDULERS = ("noop", "deadline", "cfq", "bfq")
TESTS = ("write", "rewrite", "read", "reread")
KIB, MIB = 1024, 1024 * 1024
# IOzone's automatic sizes: 64 KiB doubling to 256 MiB, then the paper's 500 MB maximum (IOzone's "m" is MiB).
FILE_SIZES = tuple(64 * KIB << i for i in range(13)) + (500 * MIB,)
PROCESSES = 3
RECORD = 64 * KIB


def _job(name: str, rw: str, file_bytes: int, *, stonewall: bool = False, invalidate: bool = True,
         device: DeviceInfo, cores: int) -> dict[str, Any]:
    options = {"rw": rw, "bs": RECORD, "ioengine": "psync", "direct": 0, "numjobs": PROCESSES, "size": file_bytes,
               "offset": "1g", "offset_increment": file_bytes, "invalidate": int(invalidate),
               "stonewall": int(stonewall), "runtime": "600s"}
    context = JobContext(devices=[device], cores=cores, default_runtime_ns=None, default_ramp_ns=0,
                         default_time_based=False, page_cache=True)
    return resolve_job(RawJob(name, options, file="iosched.papers.seed004", label=f'job "{name}"', origin="fio"),
                       context).config


def iozone_config(scheduler: str, file_bytes: int, pair: str, seed: int = 1) -> dict[str, Any]:
    """The SimConfig of one IOzone pair of tests: "write" (write, rewrite) or "read" (read, reread)."""
    host = dict(load_preset("host", HOST).params)
    device = dict(load_preset("device", DEVICE).params, name="/dev/sda")
    info = DeviceInfo(device["name"], device["capacity_bytes"], device["logical_block_bytes"])
    first, second = ("write", "rewrite") if pair == "write" else ("read", "reread")
    rw = "write" if pair == "write" else "read"
    jobs = [_job(first, rw, file_bytes, device=info, cores=host["cores"]),
            _job(second, rw, file_bytes, stonewall=True, invalidate=False, device=info, cores=host["cores"])]
    return {"seed": seed, "host": host, "devices": [device],
            "scheduler": {"name": scheduler, "tunables": [], "nr_requests": None, "block_layer": None},
            "sample_interval_ns": 100_000_000, "jobs": jobs}


def throughput_mb_s(job: dict[str, Any], write: bool) -> float:
    d = job["write" if write else "read"]
    return d["bytes"] / (job["window_ns"] / 1e9) / 1e6


@lru_cache(maxsize=None)
def measure(scheduler: str, file_bytes: int) -> dict[str, float]:
    """Throughput (MB/s) of the four tests for one scheduler and file size."""
    from .. import _native

    out: dict[str, float] = {}
    for pair in ("write", "read"):
        result = json.loads(_native.simulate(json.dumps(iozone_config(scheduler, file_bytes, pair))))
        for job in result["jobs"]:
            out[job["name"]] = throughput_mb_s(job, pair == "write")
    return out


def averages(sizes: tuple[int, ...] = FILE_SIZES) -> dict[str, dict[str, float]]:
    """Per scheduler and test: the mean throughput over the file sizes (as the paper averages its figures)."""
    return {s: {t: sum(measure(s, size)[t] for size in sizes) / len(sizes) for t in TESTS} for s in SCHEDULERS}


def gain(a: float, b: float) -> float:
    return a / b - 1


def within(sim: float, paper: float) -> bool:
    """A gain "in shape": same sign, between half and twice the paper's."""
    return paper / 2 <= sim <= paper * 2 if paper > 0 else paper * 2 <= sim <= paper / 2


def _shown(avg: dict[str, dict[str, float]], test: str) -> str:
    return " / ".join(f"{avg[s][test]:,.0f}" for s in SCHEDULERS)


# ---------------------------------------------------------------- L1: noop best in every test

L1_ROWS = (("write", "cfq", 0.10), ("rewrite", "cfq", 0.04), ("read", "deadline", 0.071), ("reread", "deadline", 0.102))


def l1(sizes: tuple[int, ...] = FILE_SIZES) -> list[Check]:
    avg = averages(sizes)
    out = []
    for test, rival, paper in L1_ROWS:
        others = {s: avg[s][test] for s in SCHEDULERS if s != "noop"}
        best_other = max(others, key=others.get)
        g = gain(avg["noop"][test], avg[rival][test])
        order = avg["noop"][test] > others[best_other] and best_other == rival
        out.append(Check("L1", f"{test}: noop over {rival} (closest); mean MB/s " + " / ".join(SCHEDULERS),
                         f"{paper:+.1%}, noop best", f"{g:+.2%} (order {'yes' if order else 'no'}); "
                         f"{_shown(avg, test)}", order and within(g, paper)))
    return out


# ---------------------------------------------------------------- L2: deadline's read lead; rewrite vs write

def l2(sizes: tuple[int, ...] = FILE_SIZES) -> list[Check]:
    avg = averages(sizes)
    out = []
    for test, rival, paper in (("read", "cfq", 0.029), ("read", "bfq", 0.067),
                               ("reread", "cfq", 0.015), ("reread", "bfq", 0.079)):
        g = gain(avg["deadline"][test], avg[rival][test])
        order = avg["deadline"][test] > avg[rival][test]
        out.append(Check("L2", f"{test}: deadline over {rival}", f"{paper:+.1%}",
                         f"{g:+.2%} (order {'yes' if order else 'no'})", within(g, paper)))
    ratios = [gain(avg[s]["rewrite"], avg[s]["write"]) for s in SCHEDULERS]
    mean = sum(ratios) / len(ratios)
    out.append(Check("L2", "rewrite over write, mean of schedulers (" + " / ".join(SCHEDULERS) + ")", "+38%",
                     f"{mean:+.1%} (" + " / ".join(f"{r:+.1%}" for r in ratios) + ")", 0.19 <= mean <= 0.57))
    return out


def per_size_table(tests: tuple[str, ...] = TESTS) -> list[str]:
    """Throughput (MB/s) per file size, scheduler and test: the data behind the averages."""
    lines = ["| file size | test | " + " | ".join(SCHEDULERS) + " |", "|---|---|" + "---|" * len(SCHEDULERS)]
    for size in FILE_SIZES:
        label = f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"
        for t in tests:
            lines.append(f"| {label} | {t} | " + " | ".join(f"{measure(s, size)[t]:,.0f}" for s in SCHEDULERS) + " |")
    return lines


def text(sizes: tuple[int, ...] = FILE_SIZES) -> list[Check]:
    """§3.4 and §4's statements about the tests themselves."""
    avg = averages(sizes)
    reread = min(avg[s]["reread"] / avg[s]["read"] for s in SCHEDULERS)
    above = all(min(avg[s]["read"], avg[s]["reread"]) > max(avg[s]["write"], avg[s]["rewrite"]) for s in SCHEDULERS)
    shown = "; ".join(f"{s} {avg[s]['read']:,.0f}/{avg[s]['reread']:,.0f} vs {avg[s]['write']:,.0f}/"
                      f"{avg[s]['rewrite']:,.0f}" for s in SCHEDULERS[:1])
    return [Check("§3.4", "reread faster than read: the data is cached (smallest ratio over schedulers)", "higher",
                  f"x{reread:.0f}", reread > 2),
            Check("§4", "read and reread faster than write and rewrite, every scheduler (MB/s, noop shown)", "yes",
                  shown, above)]


FINDINGS: dict[str, Callable[[], list[Check]]] = {"l1": l1, "l2": l2, "text": text}


def main(argv: list[str] | None = None) -> None:
    argv = list(argv or [])
    sizes = "--sizes" in argv
    names = [a for a in argv if a != "--sizes"] or list(FINDINGS)
    print("| finding | what | paper | iosched | holds? |")
    print("|---|---|---|---|---|")
    for name in names:
        for c in FINDINGS[name]():
            print(f"| {c.finding} | {c.what} | {c.paper} | {c.simulated} | {'yes' if c.holds else 'NO'} |", flush=True)
    if sizes:
        print()
        print("\n".join(per_size_table()))


if __name__ == "__main__":
    main(sys.argv[1:])
