"""``iosched compare DIR_A DIR_B``: the same spec's results from two result folders (e.g. the simulator's and the
kernel backend's) side by side.

Rows are matched on experiment, sweep point, scheduler, tunables and job; repetitions are averaged (the count is
shown).  Per matched job: IOPS, mean and P99 completion latency per direction that did I/O on either side, and
B / A.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SpecError

KEY = ("experiment", "sweep_point", "scheduler", "tunables", "job")
METRICS = [  # (label, column, unit divisor)
    ("IOPS", "iops", 1.0),
    ("mean clat (us)", "clat_mean_ns", 1000.0),
    ("P99 clat (us)", "clat_p99_ns", 1000.0),
]


def load_rows(directory: str, backend: str | None = None, option: str = "--backend-a") -> list[dict[str, Any]]:
    """The rows of a results folder, of one backend: a folder may hold simulated and kernel runs of the same spec,
    which must not be averaged together."""
    path = Path(directory) / "results.parquet"
    if not path.is_file():
        raise SpecError(directory, None, "no results.parquet here (the --out folder of iosched run)")
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    have = sorted({r["backend"] for r in rows})
    if backend is not None:
        rows = [r for r in rows if r["backend"] == backend]
        if not rows:
            raise SpecError(directory, None, f"no {backend} runs here (it has: {', '.join(have) or 'none'})")
    elif len(have) > 1:
        raise SpecError(directory, None, f"holds runs of several backends ({', '.join(have)}): pick one with "
                                         f"{option} {'|'.join(have)}")
    return rows


@dataclass
class Line:
    experiment: str
    point: str
    scheduler: str
    tunables: str
    job: str
    metric: str
    a: float
    b: float
    n_a: int
    n_b: int

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a else None


def _group(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in KEY), []).append(r)
    return out


def _mean(rows: list[dict[str, Any]], col: str) -> float:
    vals = [float(r[col]) for r in rows if r.get(col) is not None]
    return sum(vals) / len(vals) if vals else 0.0


def backends(rows: list[dict[str, Any]]) -> str:
    return "+".join(sorted({r["backend"] for r in rows})) or "?"


def compare(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> tuple[list[Line], list[tuple], list[tuple]]:
    """Matched lines, and the keys only in A and only in B."""
    ga, gb = _group(rows_a), _group(rows_b)
    lines = []
    for key in sorted(set(ga) & set(gb), key=lambda k: tuple(str(x) for x in k)):
        ra, rb = ga[key], gb[key]
        for d in ("read", "write"):
            if not (_mean(ra, f"{d}_ios") or _mean(rb, f"{d}_ios")):
                continue
            for label, col, div in METRICS:
                lines.append(Line(*key, metric=f"{d} {label}", a=_mean(ra, f"{d}_{col}") / div,
                                  b=_mean(rb, f"{d}_{col}") / div, n_a=len(ra), n_b=len(rb)))
    return lines, sorted(set(ga) - set(gb), key=str), sorted(set(gb) - set(ga), key=str)


def preset_warnings(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> list[str]:
    """When simulated runs are compared with measured ones: each device preset the simulator used that was not
    calibrated from a device the measured runs ran on (`iosched calibrate` writes "calibrated from /dev/X" into the
    preset's description; the null_blk family is its own device's parameters, so its name must match)."""
    from . import presets
    from .errors import SpecError

    rows = rows_a + rows_b
    measured = {d for r in rows if r["backend"] in ("kernel", "vm") for d in str(r["device"] or "").split("+") if d}
    simulated = {d for r in rows if r["backend"] == "sim" for d in str(r["device"] or "").split("+") if d}
    if not measured or not simulated:
        return []
    out = []
    for name in sorted(simulated):
        base = name.split(" (set ")[0]
        if base in measured:
            continue                  # a nullb preset is the lab device's own parameters
        try:
            description = presets.load_preset("device", base).description
        except SpecError:
            description = ""
        if any(f"calibrated from {d.split(' (')[0]} " in description + " " for d in measured):
            continue
        out.append(f"the simulated runs used device preset {name}, which was not calibrated from "
                   f"{', '.join(sorted(measured))} (its description: {description or 'unknown'}): the comparison "
                   f"mixes the device model's error with the scheduler's (iosched calibrate DEVICE fits a preset to "
                   f"it)")
    return out


def _point(p: str) -> str:
    try:
        d = json.loads(p)
    except ValueError:
        return p
    return " ".join(f"{k}={v}" for k, v in d.items()) or "-"


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def table_rows(lines: list[Line]) -> list[list[str]]:
    out = []
    for ln in lines:
        tun = "" if ln.tunables in ("{}", "") else f" {ln.tunables}"
        ratio = f"{ln.ratio:.2f}" if ln.ratio is not None else "-"
        out.append([ln.experiment, _point(ln.point), ln.scheduler + tun, ln.job, ln.metric,
                    _num(ln.a) + (f" (n={ln.n_a})" if ln.n_a > 1 else ""),
                    _num(ln.b) + (f" (n={ln.n_b})" if ln.n_b > 1 else ""), ratio])
    return out


HEADER = ["experiment", "sweep point", "scheduler", "job", "metric", "A", "B", "B/A"]


def render_markdown(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
    return "\n".join(out)


def render_csv(header: list[str], body: list[list[str]]) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(body)
    return buf.getvalue().rstrip("\n")
