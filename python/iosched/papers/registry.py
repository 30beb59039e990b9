"""The paper experiments' registry: each figure or table of a seed paper as a small declarative object.

A `PaperExperiment` names the paper (seed) and the figures/tables it reproduces, gives one or more `Series`
(each a normal experiment spec, the same TOML-shaped dict `iosched run` reads, with its sweep axes and
repetitions), the paper's numbers (`Number`, each with its figure/table reference), and three functions of the
stored results: `checks` (paper vs iosched rows with holds/NO), `figures` and `tables` (in the paper's form), and
optionally `points` (papers.scoring: every plotted point of the paper's own data, scored by its ratio).
Seed modules declare experiments and `register()` them; `iosched reproduce` runs them, `iosched report` draws
them. Adding an experiment is declaring one (see docs/contributing.md, "Declaring an experiment").
"""

from __future__ import annotations

import copy
import importlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import SpecError

def seed_modules() -> list[str]:
    """The modules that register experiments: every iosched.papers.seedNNN module (imported on first use of the
    registry), so a new seed module needs no list to be edited."""
    import pkgutil

    from . import __path__ as papers_path

    return sorted(f"iosched.papers.{m.name}" for m in pkgutil.iter_modules(papers_path)
                  if m.name.startswith("seed") and m.name[4:].isdigit())


@dataclass(frozen=True)
class Check:
    """One paper-vs-iosched row. ``paper_value``/``sim_value`` (same unit) give the ratio column when both are
    numbers; ``holds`` is the finding's shape by the criterion the check states."""
    finding: str
    what: str
    paper: str
    simulated: str
    holds: bool
    paper_value: float | None = None
    sim_value: float | None = None
    ref: str = ""
    clauses: tuple["Check", ...] = ()   # a finding's clauses when the row holds only if all do (one_row)
    statement: str = ""                  # the finding in the paper's words (one_row), without its clauses

    @property
    def ratio(self) -> float | None:
        if self.paper_value is None or self.sim_value is None or self.paper_value == 0:
            return None
        r = self.sim_value / self.paper_value
        return r if math.isfinite(r) else None


def as_check(obj: Any, ref: str = "") -> Check:
    """Any object with finding/what/paper/simulated/holds (a seed module's own Check class too) as a Check."""
    if isinstance(obj, Check):
        return obj if obj.ref or not ref else Check(**{**obj.__dict__, "ref": ref})
    return Check(obj.finding, obj.what, str(obj.paper), str(obj.simulated), bool(obj.holds),
                 getattr(obj, "paper_value", None), getattr(obj, "sim_value", None), getattr(obj, "ref", "") or ref)


# Rows shown beside a paper's findings but never counted among them: the calibration inputs a preset was fitted to,
# and checks of the model beyond what the paper measured (their finding label starts with BEYOND).
CALIBRATION = "calibration"
BEYOND = "beyond the paper"


def counted(check: Any) -> bool:
    """Whether a row counts in "checks that hold": a finding of the paper (or its plotted points' share)."""
    return check.finding != CALIBRATION and not check.finding.startswith(BEYOND)


def one_row(finding: str, statement: str, clauses: Iterable[Any], ref: str = "") -> Check:
    """A finding whose check has several clauses as its one row (a finding is never split over rows): it holds when
    every clause holds. The clauses are numbered in the `what`, paper and iosched columns, a failing clause's
    simulated value is marked ✗, and the ratio column shows the clause farthest from its paper number (in log
    terms), since any one of them outside its band fails the row."""
    cs = [as_check(c, ref) for c in clauses]
    if not cs:
        raise ValueError(f"{finding}: no clauses")
    if len(cs) == 1:
        c = cs[0]
        return Check(finding, f"{statement}: {c.what}", c.paper, c.simulated, c.holds, c.paper_value, c.sim_value,
                     c.ref or ref, (c,), statement)
    num = lambda i: f"({i + 1})"  # noqa: E731
    what = f"{statement}: " + "; ".join(f"{num(i)} {c.what}" for i, c in enumerate(cs))
    paper = "; ".join(f"{num(i)} {c.paper}" for i, c in enumerate(cs))
    simulated = "; ".join(f"{num(i)} {c.simulated}" + ("" if c.holds else " ✗") for i, c in enumerate(cs))
    rated = [c for c in cs if c.ratio is not None and c.ratio > 0]
    far = max(rated, key=lambda c: abs(math.log(c.ratio)), default=None)
    refs = list(dict.fromkeys(c.ref for c in cs if c.ref))
    return Check(finding, what, paper, simulated, all(c.holds for c in cs),
                 far.paper_value if far else None, far.sim_value if far else None, ", ".join(refs) or ref, tuple(cs),
                 statement)


def one_row_each(rows: Iterable[Any], statements: dict[str, str]) -> list[Check]:
    """`rows` with every finding's rows gathered into its one row (`one_row`, with the finding's statement), in the
    order the findings first appear; a finding with a single row keeps it as it is."""
    groups: dict[str, list[Check]] = {}
    for r in rows:
        c = as_check(r)
        groups.setdefault(c.finding, []).append(c)
    return [g[0] if len(g) == 1 else one_row(f, statements[f], g) for f, g in groups.items()]


@dataclass(frozen=True)
class Number:
    """A number transcribed from the paper, with where it stands there."""
    ref: str            # "Fig. 7", "Table 2", "§4.2"
    what: str
    value: float | str
    unit: str = ""


@dataclass(frozen=True)
class QuickSplit:
    """For `--quick`, more overrides for the sweep points whose ``axis`` takes one of ``values`` (e.g. a shorter ramp
    for the schedulers that need none): the series then runs as two specs, under the same series name."""
    axis: str
    values: tuple[Any, ...]
    overrides: dict[str, Any]


@dataclass(frozen=True)
class Series:
    """One spec of an experiment. ``quick`` overrides keys for `--quick` (on top of the experiment's):
    top-level keys ("duration", "ramp", "repeat", ...) or "job.NAME.OPTION"; ``quick_split`` adds overrides for
    some sweep points only."""
    name: str
    spec: dict[str, Any]
    quick: dict[str, Any] = field(default_factory=dict)
    quick_split: QuickSplit | None = None


@dataclass(frozen=True)
class PaperExperiment:
    name: str                     # what users type: `iosched reproduce NAME`
    seed: str                     # "000" (the file in ../shared/seeds/)
    title: str
    refs: tuple[str, ...]         # the paper's figures and tables it reproduces
    series: tuple[Series, ...]
    checks: Callable[["Results"], list]
    paper: tuple[Number, ...] = ()
    figures: Callable[["Results"], list] = lambda res: []
    tables: Callable[["Results"], list] = lambda res: []
    quick: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    notes: tuple[str, ...] = ()   # what is left out or not modelled, and why
    # A papers.scoring.PointScoring: every plotted point of the paper's own data compared with the simulated one
    # (None: the experiment is scored by its checks only).
    points: Any = None

    def specs(self, quick: bool) -> list[tuple[str, dict[str, Any]]]:
        """(series name, spec dict) for each series, with the --quick overrides applied when asked."""
        out = []
        for s in self.series:
            spec = copy.deepcopy(s.spec)
            spec["name"] = self.name
            if quick:
                spec = apply_overrides(spec, {**self.quick, **s.quick}, where=f"{self.name}/{s.name}")
                if s.quick_split is not None:
                    out.extend((s.name, part) for part in _split(spec, s.quick_split, f"{self.name}/{s.name}"))
                    continue
            out.append((s.name, spec))
        return out

    def runs(self, quick: bool) -> list[tuple[str, Any]]:
        """(series name, ResolvedRun) for every run: each series' sweep points x repetitions."""
        from ..spec import expand_runs, experiment_from_data

        out = []
        for series, spec in self.specs(quick):
            exp = experiment_from_data(f"{self.name}/{series}", spec)
            out.extend((series, r) for r in expand_runs(exp))
        return out


def _split(spec: dict[str, Any], split: QuickSplit, where: str) -> list[dict[str, Any]]:
    """The spec as two: the sweep points whose ``split.axis`` is not among ``split.values``, unchanged, and those
    whose it is, with ``split.overrides`` (a part with no points is left out)."""
    values = spec.get("sweep", {}).get(split.axis)
    if values is None:
        raise SpecError(where, f"quick_split.{split.axis}", "not a sweep axis of the series")
    parts = []
    for keep, extra in ((lambda v: v not in split.values, {}), (lambda v: v in split.values, split.overrides)):
        part = apply_overrides(spec, extra, where)
        part["sweep"] = {**part["sweep"], split.axis: [v for v in values if keep(v)]}
        if part["sweep"][split.axis]:
            parts.append(part)
    return parts


def spec_with_point(specs: list[tuple[str, dict[str, Any]]], series: str, point: dict[str, Any]) -> dict[str, Any]:
    """The spec of ``series`` whose sweep has ``point`` (a series split for `--quick` has two specs)."""
    for name, spec in specs:
        sweep = spec.get("sweep", {})
        if name == series and all(v in sweep.get(k, [v]) for k, v in point.items()):
            return spec
    raise KeyError(f"no spec of series {series!r} sweeps {point}")


def apply_overrides(spec: dict[str, Any], overrides: dict[str, Any], where: str = "") -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for key, value in overrides.items():
        parts = key.split(".")
        if parts[0] == "job" and len(parts) == 3:
            jobs = [j for j in spec.get("job", []) if j.get("name") == parts[1]]
            if not jobs:
                raise SpecError(where, f"quick.{key}", f'no job named "{parts[1]}"')
            for j in jobs:
                j[parts[2]] = value
        elif len(parts) == 1:
            spec[key] = value
        else:
            raise SpecError(where, f"quick.{key}", "expected a top-level key or job.NAME.OPTION")
    return spec


# ---------------------------------------------------------------- the registry

_REGISTRY: dict[str, PaperExperiment] = {}
_loaded = False


def register(*experiments: PaperExperiment) -> None:
    for e in experiments:
        old = _REGISTRY.get(e.name)
        if old is not None:
            if (old.seed, old.title, old.refs) != (e.seed, e.title, e.refs):
                raise ValueError(f"paper experiment {e.name!r} registered twice")
            continue  # the same declaration again (its module imported twice, e.g. run as a script): keep the first
        if not e.refs or not e.series:
            raise ValueError(f"paper experiment {e.name!r}: needs refs and at least one series")
        _REGISTRY[e.name] = e


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for m in seed_modules():
            importlib.import_module(m)


def experiments() -> list[PaperExperiment]:
    """Every registered experiment, by seed then name."""
    _load()
    return sorted(_REGISTRY.values(), key=lambda e: (e.seed, e.name))


def get(name: str) -> PaperExperiment:
    _load()
    if name not in _REGISTRY:
        raise SpecError(None, None, f"no paper experiment {name!r} (iosched reproduce --list shows them)")
    return _REGISTRY[name]


def select(names: Iterable[str]) -> list[PaperExperiment]:
    """Experiments by name; "all" is every one, "seed000" every one of that seed."""
    _load()
    out: list[PaperExperiment] = []
    for n in names:
        if n == "all":
            chosen = experiments()
        elif n.startswith("seed") and n[4:].isdigit() and n not in _REGISTRY:
            chosen = [e for e in experiments() if e.seed == n[4:]]
            if not chosen:
                raise SpecError(None, None, f"no paper experiments for {n} (iosched reproduce --list shows them)")
        else:
            chosen = [get(n)]
        out.extend(e for e in chosen if e not in out)
    return out


# ---------------------------------------------------------------- results of one experiment

class MissingRuns(Exception):
    """Some runs a check or figure needs are not in the results folder (an interrupted sweep)."""


@dataclass(frozen=True)
class RunRef:
    id: str
    series: str
    point: dict[str, Any]
    repetition: int
    seed: int


def _norm(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


class Results:
    """The stored runs of one experiment, as the last `iosched reproduce` of it recorded them."""

    def __init__(self, out: Path, name: str, entry: dict[str, Any]):
        from .. import store

        self.out = Path(out)
        self.name = name
        self.entry = entry
        self.mode = entry.get("mode", "")
        self.runs = [RunRef(r["id"], r.get("series", ""), r.get("point", {}), r.get("repetition", 0),
                            r.get("seed", 0)) for r in entry.get("runs", [])]
        self._done = {r.id for r in self.runs if store.is_done(self.out, r.id)}
        self._cache: dict[str, dict] = {}
        self._memo: dict[str, Any] = {}

    def memo(self, name: str, fn: Callable[["Results"], Any]) -> Any:
        """``fn(self)``, computed once per Results (checks and point scoring read the same measurements)."""
        if name not in self._memo:
            self._memo[name] = fn(self)
        return self._memo[name]

    @property
    def complete(self) -> bool:
        return all(r.id in self._done for r in self.runs)

    @property
    def missing(self) -> int:
        return sum(r.id not in self._done for r in self.runs)

    def where(self, series: str, point: dict[str, Any] | None = None) -> list[RunRef]:
        """Runs of ``series`` whose sweep point has these values (a subset of the axes)."""
        want = {k: _norm(v) for k, v in (point or {}).items()}
        return [r for r in self.runs if r.series == series
                and all(_norm(r.point.get(k)) == v for k, v in want.items())]

    def result(self, rid: str) -> dict[str, Any]:
        from .. import store

        if rid not in self._cache:
            if rid not in self._done:
                raise MissingRuns(rid)
            self._cache[rid] = store.load_result(self.out, rid, lazy=True)
        return self._cache[rid]

    def results(self, series: str, point: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        refs = self.where(series, point)
        if not refs:
            raise KeyError(f"{self.name}: no runs in series {series!r} at {point}")
        return [self.result(r.id) for r in refs]

    def mean(self, series: str, point: dict[str, Any] | None, fn: Callable[[dict], float]) -> float:
        """The mean of ``fn(result)`` over the repetitions at a sweep point."""
        vals = [fn(r) for r in self.results(series, point)]
        return sum(vals) / len(vals)

    def values(self, series: str, key: str) -> list[Any]:
        """The values a sweep axis takes in a series, in sweep order."""
        seen: dict[str, Any] = {}
        for r in self.runs:
            if r.series == series and key in r.point:
                seen.setdefault(_norm(r.point[key]), r.point[key])
        return list(seen.values())

    @property
    def repetitions(self) -> int:
        return 1 + max((r.repetition for r in self.runs), default=0)
