"""Running many runs: in this process, on the local cores, or on a Dask cluster, through one executor seam.

A run is identified by its run id (the full simulator config, experiment, repetition and code version), so a
run whose folder already exists in DIR is skipped: re-running a command resumes it. Workers only simulate
(config JSON in, result JSON out); this process writes each run's folder as soon as its result arrives, so
workers need no shared file system and Ctrl-C loses only runs still in flight.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures import Executor as FuturesExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import interrupt, native, store
from .backends.sim import run_id
from .errors import SpecError
from .simconfig import run_config
from .spec import ResolvedRun
from .version import code_version


@dataclass
class Task:
    run: ResolvedRun
    rid: str
    label: str = ""


def tasks_for(runs: list[ResolvedRun], label: str = "") -> list[Task]:
    return [Task(r, run_id(r), label or r.experiment) for r in runs]


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)        # simulated now
    skipped: list[str] = field(default_factory=list)     # already in DIR
    interrupted: bool = False
    wall_s: float = 0.0


# ---------------------------------------------------------------- worker side

class CodeVersionMismatch(RuntimeError):
    pass


def simulate_task(config_json: str, expected_code_version: str,
                  progress: Callable[[float], None] | None = None) -> tuple[str, float]:
    """Run one simulation (in a worker). Refuses to run under another code version than the submitter's:
    the result would be stored under a run id that does not describe it. ``progress`` (in this process only) is
    called with the fraction of simulated time done."""
    here = code_version()
    if here != expected_code_version:
        raise CodeVersionMismatch(f"worker has iosched {here}, the sweep needs {expected_code_version}: install "
                                  "the same iosched build on every worker (see docs/spec.md, 'Sweeps on a cluster')")
    t0 = time.perf_counter()
    out = native.simulate_json(config_json, progress)
    return out, time.perf_counter() - t0


def _worker_init(parent_pid: int) -> None:
    # Ctrl-C, SIGTERM and SIGHUP are the submitting process's business (iosched.interrupt): it cancels the sweep
    # and kills the workers; the kernel kills them if it ends first.
    interrupt.ignore_in_worker(parent_pid)


# ---------------------------------------------------------------- executors

class _InProcess(FuturesExecutor):
    """Runs each task when its result is asked for: one core, no pool to start, Ctrl-C reaches the simulator."""

    def submit(self, fn, /, *args, **kwargs):
        f: Future = Future()
        f._iosched_call = (fn, args, kwargs)  # type: ignore[attr-defined]
        return f


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class Executor:
    """Where a sweep's runs execute: a concurrent.futures executor (``pool``) in this process, over local processes
    or on a Dask cluster, and how to close it."""
    pool: FuturesExecutor
    close: Callable[[], None]
    kind: str           # "in-process", "local", "dask"
    workers: int


# How long to wait for a Dask scheduler before saying it cannot be reached.
CONNECT_TIMEOUT_S = 5.0


def _connect(address: str, client_type):
    """A Dask client of the scheduler at ``address``; an address that does not answer is a one-line error within
    seconds (a plain TCP connection is tried first: Dask itself waits 30 s and then raises a long traceback)."""
    scheme, _, rest = address.partition("://")
    if scheme in ("tcp", "tls"):
        host, sep, port = rest.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SpecError("--cluster", address, "expected tcp://HOST:PORT (a Dask scheduler's address)")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            raise SpecError("--cluster", address, f"cannot reach a Dask scheduler there ({why}; waited at most "
                                                  f"{CONNECT_TIMEOUT_S:g} s)") from None
    try:
        return client_type(address, timeout=f"{CONNECT_TIMEOUT_S}s")
    except Exception as e:  # noqa: BLE001 - whatever answers there (or not), it is no Dask scheduler we can use
        what = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise SpecError("--cluster", address, f"cannot connect to a Dask scheduler there ({what})") from None


def make_executor(jobs: int | None, cluster: str | None, n_tasks: int) -> Executor:
    """The executor seam: ``cluster`` None → local processes (``jobs`` of them, default all cores; 1 → this
    process); ``tcp://HOST:PORT`` → a running Dask scheduler; ``slurm`` or ``slurm:N`` → dask-jobqueue's
    SLURMCluster from the Dask configuration (jobqueue.slurm in ~/.config/dask/jobqueue.yaml), scaled to N jobs."""
    if cluster:
        try:
            from distributed import Client
        except ImportError:
            raise SpecError("--cluster", None, "needs Dask: pip install 'iosched[cluster]'") from None
        if cluster.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
            client = _connect(cluster, Client)
            closers = [client.close]
        elif cluster == "slurm" or cluster.startswith("slurm:"):
            try:
                from dask_jobqueue import SLURMCluster
            except ImportError:
                raise SpecError("--cluster", None, "slurm needs dask-jobqueue: pip install 'iosched[cluster]'") from None
            n = cluster.partition(":")[2]
            if n and not n.isdigit():
                raise SpecError("--cluster", cluster, "expected slurm or slurm:N (N jobs)")
            sc = SLURMCluster()
            sc.scale(jobs=int(n) if n else 1)
            client = Client(sc)
            closers = [client.close, sc.close]
        else:
            raise SpecError("--cluster", cluster, "expected tcp://HOST:PORT, slurm or slurm:N")
        workers = max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info().get("workers", {}).values()))

        def close() -> None:
            for c in closers:
                try:
                    c()
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass
        return Executor(client.get_executor(pure=False), close, "dask", workers)
    n = min(jobs or default_jobs(), max(1, n_tasks))
    if n <= 1:
        return Executor(_InProcess(), lambda: None, "in-process", 1)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ex = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                             initargs=(os.getpid(),))

    def close_pool() -> None:
        ex.shutdown(wait=True, cancel_futures=True)
    return Executor(ex, close_pool, "local", n)


def _stop(executor: Executor, futures: list[Future]) -> None:
    """Ctrl-C: cancel what has not started and stop the workers (runs in flight are lost, nothing else). The
    workers ignore the signals, so they are killed (they only simulate: nothing of theirs needs cleaning up)."""
    for f in futures:
        f.cancel()
    ex = executor.pool
    if executor.kind == "local":
        kill = getattr(ex, "kill_workers", None)  # Python >= 3.14
        if kill is not None:
            kill()
        else:
            for p in list((getattr(ex, "_processes", None) or {}).values()):
                try:
                    p.kill()
                except Exception:  # noqa: BLE001
                    pass
            ex.shutdown(wait=False, cancel_futures=True)
    elif executor.kind == "dask":
        ex.shutdown(wait=False)


# ---------------------------------------------------------------- progress

class _Progress:
    """Runs done and ETA: a rich bar on a terminal, one line per finished run otherwise."""

    def __init__(self, total_runs: int, title: str, enabled: bool | str | None, echo: Callable[[str], None]):
        self.total, self.done = total_runs, 0
        self.t0 = time.monotonic()
        self.echo = echo
        self.bar = None
        self.tqdm = None
        if enabled == "tqdm":         # iosched.run in a notebook: tqdm.auto draws a widget there, text elsewhere
            from tqdm.auto import tqdm

            self.tqdm = tqdm(total=total_runs, desc=title, unit="run")
            return
        tty = sys.stderr.isatty() if enabled is None else bool(enabled)
        if tty and total_runs:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("runs"), TimeElapsedColumn(), TextColumn("ETA"),
                                TimeRemainingColumn(elapsed_when_finished=True), console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task(title, total=total_runs)

    def partial(self, fraction: float) -> None:
        """The run in progress (in this process): its fraction of simulated time done."""
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done + min(max(fraction, 0.0), 1.0))

    def eta_s(self) -> float | None:
        if not self.done:
            return None
        return (time.monotonic() - self.t0) / self.done * (self.total - self.done)

    def advance(self, task: Task, wall_s: float) -> None:
        self.done += 1
        if self.tqdm is not None:
            self.tqdm.update(1)
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            return
        eta = self.eta_s()
        point = " ".join(f"{k}={v}" for k, v in task.run.sweep_point.items())
        rep = f" rep={task.run.repetition}" if task.run.repetition else ""
        eta_txt = f", ETA {_fmt_s(eta)}" if eta is not None and self.done < self.total else ""
        self.echo(f"[{self.done}/{self.total}] {task.label} {task.rid}{rep}{' [' + point + ']' if point else ''}: "
                  f"{wall_s:.1f} s{eta_txt}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if self.tqdm is not None:
            self.tqdm.close()
            self.tqdm = None


def _echo_line(line: str) -> None:
    # One write with its newline: print() writes the text and the newline separately, and a signal between the two
    # put the "interrupted" line on the end of a progress line (seen once in CI: "ETA 1sinterrupted").
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


# ---------------------------------------------------------------- the sweep

def execute(out: Path, tasks: list[Task], *, jobs: int | None = None, cluster: str | None = None,
            progress: bool | str | None = None, title: str = "runs", echo: Callable[[str], None] | None = None,
            on_result: Callable[[Task, dict[str, Any], float], None] | None = None) -> Outcome:
    """Simulate every task whose run is not yet in ``out`` and write each as soon as it finishes.

    Raises KeyboardInterrupt after stopping the workers when interrupted (every finished run is on disk)."""
    echo = echo or _echo_line
    out = Path(out)
    store.cleanup_tmp(out)
    outcome = Outcome()
    unique: dict[str, Task] = {}
    for t in tasks:
        unique.setdefault(t.rid, t)
    outcome.skipped = [t.rid for t in unique.values() if store.is_done(out, t.rid)]
    todo = [t for t in unique.values() if not store.is_done(out, t.rid)]
    if not todo:
        return outcome
    # In run-id order, which is random with respect to cost: the mean time of the runs done so far is then a fair
    # estimate for the rest (the ETA), whatever the experiments' mix of short and long runs.
    todo.sort(key=lambda t: t.rid)
    preloading = store.preload_in_background()
    t0 = time.monotonic()
    executor = make_executor(jobs, cluster, len(todo))
    bar = _Progress(len(todo), title, progress, echo)
    cv = code_version()
    futures: dict[Future, Task] = {}
    try:
        for t in todo:
            futures[executor.pool.submit(simulate_task, native.canonical_json(run_config(t.run)), cv)] = t
        pending = set(futures)
        while pending:
            if executor.kind == "in-process":
                f = next(iter(f for f in futures if f in pending))
                fn, args, kwargs = f._iosched_call  # type: ignore[attr-defined]
                try:
                    f.set_result(fn(*args, progress=bar.partial, **kwargs))
                except ValueError as e:
                    f.set_exception(e)
                finished = {f}
            else:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                pending.discard(f)
                t = futures[f]
                try:
                    result_json, wall = f.result()
                except ValueError as e:  # the simulator refused the config
                    raise SpecError(t.run.spec_file, None, f"simulator rejected the config: {e}") from None
                result = json.loads(result_json)
                preloading.join()
                store.write_run_dir(out, t.run, t.rid, result)
                outcome.done.append(t.rid)
                bar.advance(t, wall)
                if on_result is not None:
                    on_result(t, result, wall)
    except KeyboardInterrupt:
        outcome.interrupted = True
        bar.close()
        _stop(executor, list(futures))
        raise
    except BaseException:
        bar.close()
        _stop(executor, list(futures))
        # An error (not an interruption, which must end within its second): the pool is shut down for good, so
        # multiprocessing's resource tracker has no leaked semaphores to warn about after the error line.
        try:
            executor.close()
        except Exception:  # noqa: BLE001 - the error on its way out matters, not this
            pass
        from concurrent.futures.process import BrokenProcessPool

        if isinstance(sys.exc_info()[1], BrokenProcessPool):
            raise SpecError(None, "jobs", f"a worker process ended abruptly ({len(outcome.done)} run(s) written "
                            "before it): killed or out of memory, or, from a Python script that calls iosched.run "
                            "with jobs > 1, the script ran again in the worker (Python starts workers by running "
                            'the main script: put the call under `if __name__ == "__main__":`)') from None
        raise
    finally:
        outcome.wall_s = time.monotonic() - t0
    bar.close()
    executor.close()
    return outcome
