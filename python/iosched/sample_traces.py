"""Synthetic sample traces for replay, in the three formats iosched reads, shaped after seed 001's Table 4.

Seed 001 (Kyber-fairness, KF4) replays four SYSTOR '17 LUN traces, one per cgroup; its Table 4 gives each LUN's
total and average request size, the bandwidth the trace requires and its read:write ratio. The real traces are
not redistributable here, so these samples are synthetic: every number Table 4 gives is matched, everything it
does not give is a named assumption below. They are deterministic: this module writes the same bytes every time
(Python's Mersenne Twister, whose `random()` is the same on every platform, and only exactly rounded float
operations).

    python -m iosched.sample_traces [DIR]          # (re)write the samples (default: where iosched finds them)
    python -m iosched.sample_traces --check [DIR]  # verify that DIR holds exactly what this module writes

Matched to Table 4 (its "GB", "KB" and "MB/s" read as GiB, KiB and MiB/s: an assumption, the paper does not say):
- the average request size: sizes are drawn, then nudged by 4 KiB steps until the total is exactly
  round(average x requests / 4 KiB) blocks;
- the read:write ratio, by request count: round(n x r / (r + 1)) reads, in random order;
- the required bandwidth: the records span total bytes / bandwidth, so replaying them as recorded
  (replay_time_scale=100) asks for exactly that bandwidth.
- The number of requests is the paper's total / average, divided by SCALE (64), so each file stays small.

Named assumptions (Table 4 does not give them):
- sizes are powers of two from 4 KiB to 256 KiB, with geometric weights chosen so the mean is the LUN's average;
- offsets are uniform over a 64 GiB LUN, 4 KiB aligned (no sequential runs);
- arrivals are a renewal process with gaps uniform in [0, 2 x mean), times rounded to 1 us (the SYSTOR '17 README
  says its timestamps are accurate to the microsecond);
- the recorded response times (SYSTOR Response, MSR ResponseTime) are 100 us + 1 ns per byte: replay never uses
  them, they only make the lines complete;
- blkparse: each I/O is a Q event at its time and a D event 2 us later, on device 259,<LUN>, with blkparse's
  per-CPU summary at the end.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from . import store
from .replay import traces_dir

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
BLOCK = 4 * KIB
SCALE = 64
SEED = 1701                       # any fixed seed: the files are what they are
LUN_BYTES = 64 * GIB
SIZES_BLOCKS = (1, 2, 4, 8, 16, 32, 64)          # 4 KiB .. 256 KiB
SYSTOR_EPOCH_S = 1_456_095_145                   # 2016-02-21, when the SYSTOR '17 traces were recorded
FILETIME_UNIX_OFFSET_S = 11_644_473_600          # 1601-01-01 to 1970-01-01
DISPATCH_DELAY_NS = 2_000


@dataclass(frozen=True)
class LunSpec:
    """One row of seed 001's Table 4."""
    lun: int
    total_bytes: int
    average_bytes: float
    bandwidth_bytes_per_s: float
    reads_per_write: float


TABLE4 = (
    LunSpec(0, round(1.12 * GIB), 31.1 * KIB, 462.45 * MIB, 3.44),
    LunSpec(1, 505 * MIB, 24.8 * KIB, 540.66 * MIB, 3.19),
    LunSpec(2, round(2.88 * GIB), 50.4 * KIB, 364.98 * MIB, 2.78),
    LunSpec(3, round(1.87 * GIB), 63.7 * KIB, 476.54 * MIB, 1.60),
)

FILES = {"systor17": "systor17-vdi-4lun.csv", "msr": "msr-vdi-4disk.csv", "blkparse": "blkparse-vdi-4dev.txt"}


@dataclass(frozen=True)
class Io:
    time_ns: int
    lun: int
    write: bool
    offset: int
    size: int


def _weights(mean_blocks: float) -> list[float]:
    """Geometric weights q^k over SIZES_BLOCKS whose mean is `mean_blocks` (bisection on q)."""
    lo, hi = 1e-6, 1e6
    w: list[float] = []
    for _ in range(200):
        q = math.sqrt(lo * hi)       # sqrt and products are exactly rounded (IEEE 754): the same everywhere
        w = [1.0]
        for _ in SIZES_BLOCKS[1:]:
            w.append(w[-1] * q)
        mean = sum(wi * s for wi, s in zip(w, SIZES_BLOCKS)) / sum(w)
        lo, hi = (q, hi) if mean < mean_blocks else (lo, q)
    total = sum(w)
    return [wi / total for wi in w]


def _pick(rnd: random.Random, weights: list[float]) -> int:
    u, acc = rnd.random(), 0.0
    for i, w in enumerate(weights):
        acc += w
        if u < acc:
            return i
    return len(weights) - 1


def lun_ios(spec: LunSpec, rnd: random.Random) -> list[Io]:
    n = round(spec.total_bytes / spec.average_bytes / SCALE)
    reads = round(n * spec.reads_per_write / (spec.reads_per_write + 1))
    writes = [False] * reads + [True] * (n - reads)
    rnd.shuffle(writes)
    weights = _weights(spec.average_bytes / BLOCK)
    blocks = [SIZES_BLOCKS[_pick(rnd, weights)] for _ in range(n)]
    target = round(spec.average_bytes * n / BLOCK)
    while (diff := target - sum(blocks)) != 0:
        i = int(rnd.random() * n)
        if diff > 0 and blocks[i] < SIZES_BLOCKS[-1]:
            blocks[i] += 1
        elif diff < 0 and blocks[i] > 1:
            blocks[i] -= 1
    total = target * BLOCK
    span_ns = round(total / spec.bandwidth_bytes_per_s * 1e9)
    gaps = [rnd.random() for _ in range(n - 1)]
    scale = span_ns / sum(gaps)
    times, t = [0], 0.0
    for g in gaps:
        t += g * scale
        times.append(round(t / 1000) * 1000)
    times[-1] = round(span_ns / 1000) * 1000
    lun_blocks = LUN_BYTES // BLOCK
    out = []
    for i in range(n):
        start = int(rnd.random() * (lun_blocks - blocks[i] + 1))
        out.append(Io(times[i], spec.lun, writes[i], start * BLOCK, blocks[i] * BLOCK))
    return out


def sample_ios() -> list[Io]:
    rnd = random.Random(SEED)
    ios = [io for spec in TABLE4 for io in lun_ios(spec, rnd)]
    return sorted(ios, key=lambda io: (io.time_ns, io.lun))


def _response_ns(io: Io) -> int:
    return 100_000 + io.size


def systor17(ios: list[Io]) -> str:
    lines = ["Timestamp,Response,IOType,LUN,Offset,Size"]
    for io in ios:
        t = SYSTOR_EPOCH_S * 10**9 + io.time_ns
        r = _response_ns(io)
        lines.append(f"{t // 10**9}.{t % 10**9:09d},{r // 10**9}.{r % 10**9:09d},{'W' if io.write else 'R'},"
                     f"{io.lun},{io.offset},{io.size}")
    return "\n".join(lines) + "\n"


def msr(ios: list[Io]) -> str:
    lines = []
    base_ticks = (SYSTOR_EPOCH_S + FILETIME_UNIX_OFFSET_S) * 10**7
    for io in ios:
        lines.append(f"{base_ticks + io.time_ns // 100},vdi,{io.lun},{'Write' if io.write else 'Read'},"
                     f"{io.offset},{io.size},{_response_ns(io) // 100}")
    return "\n".join(lines) + "\n"


def blkparse(ios: list[Io]) -> str:
    events = []
    for io in ios:
        for action, delay in (("Q", 0), ("D", DISPATCH_DELAY_NS)):
            events.append((io.time_ns + delay, io.lun, action, io))
    events.sort(key=lambda e: (e[0], e[1], e[2] == "D"))
    seq: dict[int, int] = {}
    lines = []
    for t, lun, action, io in events:
        cpu = lun  # one submitting CPU per LUN's process
        seq[cpu] = seq.get(cpu, 0) + 1
        lines.append(f"259,{lun:<2} {cpu:2d} {seq[cpu]:8d} {t // 10**9:5d}.{t % 10**9:09d} {4000 + lun:5d}  "
                     f"{action} {'W' if io.write else 'R':>3} {io.offset // 512} + {io.size // 512} [vdi-lun{lun}]")
    for lun in sorted({io.lun for io in ios}):
        mine = [io for io in ios if io.lun == lun]
        r = [io for io in mine if not io.write]
        w = [io for io in mine if io.write]
        rk, wk = sum(io.size for io in r) // KIB, sum(io.size for io in w) // KIB
        for head in (f"CPU{lun} (259,{lun}):", f"Total (259,{lun}):"):
            lines += [head,
                      f" Reads Queued:    {len(r):8d}, {rk:8d}KiB\t Writes Queued:    {len(w):8d}, {wk:8d}KiB",
                      f" Read Dispatches: {len(r):8d}, {rk:8d}KiB\t Write Dispatches: {len(w):8d}, {wk:8d}KiB"]
    lines.append(f"Events (259,*): {len(events)} entries")
    return "\n".join(lines) + "\n"


def render() -> dict[str, str]:
    """File name -> content of every sample trace."""
    ios = sample_ios()
    return {FILES["systor17"]: systor17(ios), FILES["msr"]: msr(ios), FILES["blkparse"]: blkparse(ios)}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    out = Path(args[0]) if args else traces_dir()
    files = render()
    if check:
        bad = [name for name, text in files.items()
               if not (out / name).is_file() or (out / name).read_text() != text]
        for name in bad:
            print(f"{out / name}: differs from what iosched.sample_traces writes", file=sys.stderr)
        return 1 if bad else 0
    for name, text in files.items():
        store.write_text(out, name, text)
        print(f"wrote {out / name} ({len(text.encode()) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
