"""The results folder: one folder per finished run, written at once, plus derived combined tables and a manifest.

Layout of DIR:
- runs/<run_id>/: spec.json (the resolved run, with the exact simulator config; for the kernel backend what was
  measured on: host, devices, queue settings, fio), fio.json (fio's json+ shape; the kernel backend's is fio's own
  output), result.json.gz (the simulator's raw result; for the kernel backend the same shape built from fio's
  json+; its timeseries in a second gzip member: result_gz), results.parquet (one row per job),
  timeseries.parquet; a kernel run also keeps jobs.fio, fio.log and fio's logs/. The folder is built under a
  temporary name and renamed into place, so a run is either complete or absent: a sweep that is interrupted loses
  nothing finished, and re-running it skips every run whose folder exists.
- results.parquet, timeseries.parquet: every run's rows together (rebuilt after each command).
- manifest.json: which runs make up each experiment (its series, sweep points and repetitions), so reports and
  queries use exactly the runs of the last command per experiment.

Every byte is a function of the runs alone (no wall-clock times), so the same simulated runs give identical files
(a measured run's files hold what was measured, wall times included).

Every file and folder iosched writes is made here, at a path `safepath.inside` has proven to lie inside the output
folder (`write_file`, `make_folder`, the run folders and tables below): no name from a spec, and no symbolic link
inside OUT, can make it write elsewhere. Temporary files and folders are known to iosched.interrupt, which removes
them when a command is interrupted.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import shutil
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

from . import interrupt
from .results import fio_json, fio_logs, job_rows, run_spec, schema, timeseries_schema
from .safepath import inside
from .spec import ResolvedRun

RUNS = "runs"
MANIFEST = "manifest.json"
FORMAT = 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give: mkstemp's files are 0600


# ---------------------------------------------------------------- atomic files

def make_folder(root: Path, rel: str) -> Path:
    """The folder ``root``/``rel`` (and its parents), proven inside ``root`` (safepath.inside)."""
    path = inside(root, rel)
    Path(root).mkdir(parents=True, exist_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    inside(root, rel)                  # again: a link made meanwhile would show now
    return path


def _atomic(root: Path, rel: str, write: Callable[[str], None]) -> Path:
    """``write(tmp)`` fills a temporary file beside ``root``/``rel`` (proven inside ``root``), which then replaces
    it in one rename: readers see the old file or the new one, never a part; on any failure (an interruption
    included) the temporary file goes."""
    path = inside(root, rel)
    parent = make_folder(root, rel.rpartition("/")[0]) if "/" in rel else Path(root)
    Path(root).mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=parent)
    os.close(fd)
    with interrupt.temporary(Path(tmp)):
        write(tmp)
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    return path


def write_file(root: Path, rel: str, data: bytes) -> Path:
    """Write ``data`` to ``root``/``rel`` at once (atomic_write), proven inside ``root``: the one way iosched writes
    a file of its own."""
    return _atomic(Path(root), rel, lambda tmp: Path(tmp).write_bytes(data))


def write_text(root: Path, rel: str, text: str) -> Path:
    return write_file(root, rel, text.encode())


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def _write_table(path: Path, rows: list[dict[str, Any]], schema) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _write_timeseries(path: Path, rid: str, samples: list[dict[str, Any]]) -> None:
    """timeseries.parquet from the samples, column by column (a run may have a million samples: no second list of
    dicts beside the first)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"run_id": [rid] * len(samples), "t_ns": [s["t_ns"] for s in samples],
               "source": [s["source"] for s in samples], "subject": [s["subject"] for s in samples],
               "metric": [s["metric"] for s in samples], "value": [float(s["value"]) for s in samples]}
    pq.write_table(pa.Table.from_pydict(columns, schema=timeseries_schema()), path)


def _atomic_table(root: Path, rel: str, table) -> None:
    import pyarrow.parquet as pq

    _atomic(root, rel, lambda tmp: pq.write_table(table, tmp))


# ---------------------------------------------------------------- one run

def run_dir(out: Path, rid: str) -> Path:
    return inside(out, f"{RUNS}/{rid}")


def is_done(out: Path, rid: str) -> bool:
    d = run_dir(out, rid)
    return (d / "results.parquet").is_file() and (d / "result.json.gz").is_file()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_tmp(out: Path) -> None:
    """Remove run folders left half-written by a process that no longer exists (killed mid-write)."""
    runs = Path(out) / RUNS
    if not runs.is_dir():
        return
    for d in runs.iterdir():
        if d.name.startswith((".tmp-", ".old-")):
            try:
                pid = int(d.name.rsplit("-", 1)[1])
            except ValueError:
                pid = -1
            if pid != os.getpid() and not _pid_alive(pid):
                shutil.rmtree(d, ignore_errors=True)


def new_run_dir(out: Path, rid: str) -> Path:
    """An empty temporary folder for one run (runs/.tmp-<rid>-<pid>/), renamed into place by place_run_dir.
    Removed by cleanup_tmp once this process is gone, if it never got there."""
    make_folder(out, RUNS)
    tmp = _tmp_run_dir(out, rid)
    if tmp.exists():
        shutil.rmtree(tmp)
    interrupt.track(tmp)
    tmp.mkdir()
    return tmp


def _tmp_run_dir(out: Path, rid: str) -> Path:
    return inside(out, f"{RUNS}/.tmp-{rid}-{os.getpid()}")


def discard_run_dir(out: Path, rid: str) -> None:
    """Remove this process's temporary folder of run ``rid`` (an interrupted run: nothing of it is kept)."""
    tmp = _tmp_run_dir(out, rid)
    shutil.rmtree(tmp, ignore_errors=True)
    interrupt.untrack(tmp)


def place_run_dir(out: Path, rid: str, tmp: Path, spec: dict[str, Any], result: dict[str, Any],
                  rows: list[dict[str, Any]], timeseries: list[dict[str, Any]]) -> None:
    """Add the files every run has to ``tmp`` (spec.json, result.json.gz: the backend's raw result in the
    simulator's SimResult shape, results.parquet, timeseries.parquet), then rename it to runs/<rid>/ (replacing
    an earlier folder of the same run).  What else is in ``tmp`` (fio.json, a real run's job file and logs)
    stays as it is."""
    (tmp / "spec.json").write_bytes(json_bytes(spec))
    (tmp / "result.json.gz").write_bytes(result_gz(result))
    _write_timeseries(tmp / "timeseries.parquet", rid, timeseries)
    _write_table(tmp / "results.parquet", rows, schema())
    final = run_dir(out, rid)
    if final.exists():  # a replaced run (or a leftover without all files): swap, then drop the old one
        old = inside(out, f"{RUNS}/.old-{rid}-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    interrupt.untrack(tmp)


def write_run_dir(out: Path, run: ResolvedRun, rid: str, result: dict[str, Any]) -> None:
    """Write one finished simulated run's folder: built under a temporary name, then renamed into place."""
    tmp = new_run_dir(out, rid)
    trace = result.pop("request_trace", None)            # its own file, not the result's JSON
    truncated = result.pop("request_trace_truncated", False)
    notes = result.pop("sched_notes", None)
    try:
        if trace is not None:
            from .blktrace import process_names, sim_lines

            names = process_names([j.config for j in run.jobs])
            with open(tmp / "blktrace.txt.gz", "wb") as raw, \
                    gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:    # same bytes each time
                lines = sim_lines(trace, names, truncated, notes)
                while chunk := list(itertools.islice(lines, 10_000)):
                    gz.write(("\n".join(chunk) + "\n").encode())
        # In fio's own order (percentiles 1, 5, 10, ...: tools that list them read them in file order), not sorted
        # as text; fio_json builds every object in a fixed order, so the bytes stay reproducible.
        (tmp / "fio.json").write_bytes((json.dumps(fio_json(run, result), indent=2) + "\n").encode())
        for name, text in fio_logs(run, result).items():     # names checked when the job was resolved
            write_text(tmp, name, text)
        place_run_dir(out, rid, tmp, run_spec(run, rid), result, job_rows(run, rid, result),
                      result.get("timeseries", []))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        interrupt.untrack(tmp)
        raise


def write_run(out: Path, run: ResolvedRun, rid: str, result: dict[str, Any]) -> None:
    """Write (or replace) one simulated run under ``out``: its folder runs/<rid>/ at once, then the combined
    results.parquet and timeseries.parquet (rows of the same run id replaced, the others kept)."""
    write_run_dir(out, run, rid, result)
    consolidate(out, [rid])


def write_measured_run(out: Path, rid: str, work: Path, spec: dict[str, Any], result: dict[str, Any],
                       rows: list[dict[str, Any]], timeseries: list[dict[str, Any]]) -> None:
    """Write (or replace) a run another backend measured, in the same layout as a simulated run: ``work`` is the
    temporary run folder (new_run_dir) that already holds fio.json as fio wrote it; ``result`` is the
    measurement in the simulator's SimResult shape, ``rows`` in iosched.results' schema.  The folder is completed
    and renamed to runs/<rid>/ at once, then the combined tables are rebuilt."""
    place_run_dir(out, rid, work, spec, result, rows, timeseries)
    consolidate(out, [rid])


# result.json.gz is one JSON object in two gzip members: every key but "timeseries", then the timeseries (most of
# the bytes: 120 of 136 KB in a seed-000 run). Any gzip reader joins the members into the whole object; a check that
# needs no time series reads the first member alone (parsing the whole took 43 of a full report's 79 s).
_TIMESERIES = b',"timeseries":'


def result_gz(result: dict[str, Any]) -> bytes:
    """A result as stored: compact JSON, keys sorted, the timeseries last in its own gzip member (byte-for-byte a
    function of the result)."""
    dump = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")).encode()  # noqa: E731
    if "timeseries" not in result or len(result) < 2:
        return gzip.compress(dump(result), compresslevel=6, mtime=0)
    head = dump({k: v for k, v in result.items() if k != "timeseries"})
    return (gzip.compress(head[:-1], compresslevel=6, mtime=0)
            + gzip.compress(_TIMESERIES + dump(result["timeseries"]) + b"}", compresslevel=6, mtime=0))


class _LazyTimeseries(dict):
    """A stored result whose "timeseries" is parsed when first read (``r["timeseries"]``, ``r.get("timeseries")``,
    ``"timeseries" in r``). Iterating, comparing or dumping it sees only what has been read: give those a
    load_result(..., lazy=False)."""

    def __init__(self, head: dict[str, Any], rest: bytes):
        super().__init__(head)
        self._rest: bytes | None = rest

    def _load(self) -> None:
        if self._rest is not None:
            tail = gzip.decompress(self._rest)
            if not (tail.startswith(_TIMESERIES) and tail.endswith(b"}")):
                raise ValueError("result.json.gz: its second part is not the timeseries")
            dict.__setitem__(self, "timeseries", json.loads(tail[len(_TIMESERIES):-1]))
            self._rest = None

    def __missing__(self, key: str) -> Any:
        if key == "timeseries" and self._rest is not None:
            self._load()
            return dict.__getitem__(self, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key == "timeseries":
            self._load()
        return dict.get(self, key, default)

    def __contains__(self, key: object) -> bool:
        return (key == "timeseries" and self._rest is not None) or dict.__contains__(self, key)


def load_result(out: Path, rid: str, lazy: bool = False) -> dict[str, Any]:
    """The simulator's raw result (SimResult) of a stored run; ``lazy``: its timeseries is parsed only when read
    (what checks want: few of them read it)."""
    data = (run_dir(out, rid) / "result.json.gz").read_bytes()
    if lazy:
        first = zlib.decompressobj(wbits=31)       # one gzip member
        head = first.decompress(data) + first.flush()
        if first.unused_data and not head.endswith(b"}"):
            return _LazyTimeseries(json.loads(head + b"}"), first.unused_data)
    return json.loads(gzip.decompress(data))


def load_run_spec(out: Path, rid: str) -> dict[str, Any]:
    return json.loads((run_dir(out, rid) / "spec.json").read_text())


def finished_runs(out: Path) -> list[str]:
    runs = Path(out) / RUNS
    if not runs.is_dir():
        return []
    return sorted(d.name for d in runs.iterdir() if not d.name.startswith(".") and is_done(out, d.name))


# ---------------------------------------------------------------- combined tables

def preload() -> None:
    """Import what writing runs and tables needs (pyarrow: half a second) before a command's work starts, so that
    an interrupted command records what finished within its second (iosched.interrupt)."""
    import pandas  # noqa: F401 - pyarrow imports it to build a table's schema
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from .results import schema

    schema().empty_table()


def preload_in_background() -> threading.Thread:
    """`preload` in a thread, started before the first simulation, which runs without the GIL: the half second of
    imports then overlaps it (on 2 cores, a 1 s `iosched run` saves most of that). Join the thread before writing
    results. An interruption meanwhile waits for the imports at its first use of them (Python's import lock), as it
    waited for `preload` before; an import that fails in the thread fails again, with its error, where it is used."""
    def load() -> None:
        with contextlib.suppress(Exception):
            preload()

    thread = threading.Thread(target=load, name="iosched-preload", daemon=True)
    thread.start()
    return thread


def consolidate(out: Path, rids: Iterable[str]) -> None:
    """Rebuild DIR/results.parquet and DIR/timeseries.parquet: the rows already there whose run is not in
    ``rids`` keep their place, then the rows of ``rids`` (finished ones) in the given order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = Path(out)
    order = [r for r in dict.fromkeys(rids) if is_done(out, r)]
    for name, table_schema in (("results.parquet", schema()), ("timeseries.parquet", timeseries_schema())):
        path = inside(out, name)
        parts = []
        if path.exists():
            old = pq.read_table(path)
            if order:
                old = old.filter(pc.invert(pc.is_in(old["run_id"], value_set=pa.array(order, pa.string()))))
            if set(table_schema.names) <= set(old.column_names):
                parts.append(old.select(table_schema.names).cast(table_schema))
        for r in order:
            parts.append(pq.read_table(run_dir(out, r) / name).select(table_schema.names).cast(table_schema))
        table = pa.concat_tables(parts) if parts else table_schema.empty_table()
        _atomic_table(out, name, table)


# ---------------------------------------------------------------- manifest

def read_manifest(out: Path) -> dict[str, Any]:
    path = Path(out) / MANIFEST
    if not path.exists():
        return {"format": FORMAT, "experiments": {}}
    return json.loads(path.read_text())


def update_manifest(out: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Record (or replace) experiments' entries: {name: {"kind", "mode", "runs": [...], ...}}."""
    m = read_manifest(out)
    m["format"] = FORMAT
    m.setdefault("experiments", {}).update(entries)
    m["experiments"] = dict(sorted(m["experiments"].items()))
    write_file(out, MANIFEST, json_bytes(m))


def record(out: Path, entries: dict[str, dict[str, Any]], rids: Iterable[str]) -> None:
    """What a command ran: the experiments' manifest entries, then the combined tables with the runs ``rids``
    (called also after an interruption, so the folder says what the command was and holds what finished)."""
    update_manifest(out, entries)
    consolidate(out, rids)


def record_spec(out: Path, experiment: str, spec_file: str, spec: dict[str, Any],
                runs: Iterable[tuple[str, ResolvedRun]], *, mode: str = "", **extra: Any) -> None:
    """`record` for one spec experiment (`iosched run`, `iosched validate`): its entry names the spec file, holds
    the spec as run and each run's id, sweep point, repetition and seed; ``extra`` adds keys (the kernel backend's
    devices and filesystem)."""
    runs = list(runs)
    entry = {"kind": "spec", **extra, "spec_file": spec_file, "spec": spec, "mode": mode,
             "runs": [{"id": rid, "point": r.sweep_point, "repetition": r.repetition, "seed": r.seed}
                      for rid, r in runs]}
    record(out, {experiment: entry}, [rid for rid, _ in runs])


# ---------------------------------------------------------------- reading for users

def _run_glob(out: Path, name: str) -> str:
    return str(Path(out) / RUNS / "*" / name)


def _manifest_runs(out: Path) -> list[dict[str, Any]]:
    rows = []
    for exp, entry in read_manifest(out).get("experiments", {}).items():
        for r in entry.get("runs", []):
            rows.append({"experiment": exp, "run_id": r["id"], "series": r.get("series", ""),
                         "point": json.dumps(r.get("point", {}), sort_keys=True),
                         "repetition": r.get("repetition", 0), "mode": entry.get("mode", "")})
    return rows


def connect(out: Path):
    """A DuckDB connection with views over DIR: ``results`` (one row per run and job), ``timeseries``,
    ``runs`` (the manifest: experiment, run_id, series, point, repetition, mode) and ``checks``
    (paper vs iosched rows of the last report, when there is one)."""
    import duckdb

    out = Path(out)
    if not out.is_dir():
        raise FileNotFoundError(f"{out}: no such results folder")
    con = duckdb.connect()
    has_runs = bool(finished_runs(out))
    for view, name in (("results", "results.parquet"), ("timeseries", "timeseries.parquet")):
        source = f"_{view}_stored" if view == "results" else view
        if has_runs:
            glob = _run_glob(out, name).replace("'", "''")
            con.execute(f"CREATE VIEW {source} AS SELECT * FROM read_parquet('{glob}')")
        elif (out / name).exists():
            con.execute(f"CREATE VIEW {source} AS SELECT * FROM read_parquet('{str(out / name)}')")
    import pandas as pd

    if con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = '_results_stored'").fetchone()[0]:
        _results_with_sweep_columns(con, pd)

    man = pd.DataFrame(_manifest_runs(out), columns=["experiment", "run_id", "series", "point", "repetition", "mode"])
    con.register("_manifest", man)
    con.execute("CREATE VIEW runs AS SELECT * FROM _manifest")
    checks = out / "checks.parquet"
    if checks.exists():
        con.execute(f"CREATE VIEW checks AS SELECT * FROM read_parquet('{str(checks)}')")
    return con


def _results_with_sweep_columns(con, pd) -> None:
    """The ``results`` view: the stored rows, then one column per swept variable (in name order), named as its
    sweep axis (``job.bg.iodepth``, ``scheduler.name``), holding the run's value of it (NULL for a run that did not
    sweep it); the rows keep their stored order."""
    points = con.execute("SELECT DISTINCT run_id, sweep_point FROM _results_stored").fetchall()
    parsed = {rid: json.loads(sp) if sp else {} for rid, sp in points}
    keys = sorted({k for p in parsed.values() for k in p})
    stored = [c for (c,) in con.execute("SELECT column_name FROM (DESCRIBE _results_stored)").fetchall()]
    keys = [k for k in keys if k not in stored]
    if not keys:
        con.execute("CREATE VIEW results AS SELECT * FROM _results_stored")
        return

    def cell(values: list[Any]) -> list[Any]:
        # One type per column (a number, a string, a flag); anything else (a table, mixed kinds) as its JSON text.
        kinds = {type(v) for v in values if v is not None}
        if len(kinds) <= 1 and kinds <= {int, float, str, bool} or kinds == {int, float}:
            return values
        return [None if v is None else json.dumps(v, sort_keys=True) for v in values]

    rids = list(parsed)
    con.register("_sweep", pd.DataFrame({"_sweep_run_id": rids,
                                         **{k: cell([parsed[r].get(k) for r in rids]) for k in keys}}))
    cols = ", ".join('s."' + k.replace('"', '""') + '"' for k in keys)
    con.execute("CREATE VIEW results AS SELECT r.* EXCLUDE (_row), " + cols + " FROM "
                "(SELECT *, row_number() OVER () AS _row FROM _results_stored) r "
                "LEFT JOIN _sweep s ON r.run_id = s._sweep_run_id ORDER BY r._row")


def query(out: Path, sql: str):
    """Run SQL over DIR's views (see connect) and return a pandas DataFrame."""
    con = connect(out)
    try:
        return con.execute(sql).fetchdf()
    finally:
        con.close()


def load(out: str | os.PathLike, table: str = "results"):
    """DIR's results as a pandas DataFrame: one row per (run, job) with the columns docs/results-folder.md lists; with
    ``table="timeseries"`` the time series, ``"runs"`` the manifest, ``"checks"`` the paper-vs-iosched rows."""
    return query(Path(out), f"SELECT * FROM {table}")
