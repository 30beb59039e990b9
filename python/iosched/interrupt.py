"""Stopping on Ctrl-C, SIGTERM and SIGHUP: one mechanism that every backend uses.

What a user sees: within a second of the signal, iosched prints one line that starts with ``interrupted`` and exits
with `EXIT_CODE` (130, as for Ctrl-C in a shell; the same for SIGTERM and SIGHUP). Finished runs stay in OUT (each
run's folder is renamed into place whole), the combined tables and manifest say what finished, and nothing
half-written is left behind: a re-run of the same command resumes.

How (docs/spec.md, "Interrupting a run"):

- `signals()`: the CLI runs every command inside it. SIGINT, SIGTERM and SIGHUP raise `Interrupted` (a
  KeyboardInterrupt, so ``except KeyboardInterrupt`` code unwinds as for Ctrl-C) in the main thread; the first
  signal only: a second one while unwinding is left to the watchdog, so clean-up code is not cut short.
- Native code: the simulator's glue (crates/iosched-py) runs Python's signal handlers every few milliseconds of
  simulation and every few MiB of a trace read, and raises what they raise; a simulation in this process stops at
  once.
- Worker processes ignore the signals (`ignore_in_worker`): the main process stops them (SIGKILL; they only
  simulate and hold nothing), and the kernel kills any it misses when the main process ends (`die_with_parent`).
- `temporary(path)`: a temporary file or folder that goes if the command is interrupted before it is renamed
  into place (store.py registers its temporary run folders and files).
- `critical()`: code that must finish once started (the kernel backend's restore of device settings) holds off
  the watchdog.
- The watchdog: if the process is still there `BUDGET_S` after the signal (stuck in native code that does not
  come back, or in a thread join at exit), it removes the registered temporaries, prints the line if the CLI has
  not, and ends the process with `os._exit(EXIT_CODE)`.

A new backend complies (docs/contributing.md, "Interrupts in a new backend") by running its work in the CLI's
process under `signals()` (nothing to do: the CLI does it); letting `Interrupted` unwind (``try/finally`` for its
own clean-up, no ``except BaseException`` that swallows it); writing through iosched.store, which makes its
temporaries known here (`track`/`untrack`, `temporary`); waiting in short steps (a blocked ``waitpid`` does not run a
handler when the signal went to another thread; native code must call back into Python); stopping its children
itself (``start_new_session=True`` and a kill of the session); wrapping what must not be cut in `critical()`; and
loading what its unwinding needs before the work starts (store.preload).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator

EXIT_CODE = 130
# From the signal to os._exit by the watchdog; a clean unwind is expected well within it.
BUDGET_S = 0.8
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived: unwind (cleaning up on the way) and exit `EXIT_CODE`."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.restored = True      # the kernel backend: set by whoever restored device settings on the way out


_lock = threading.Lock()
_temporaries: dict[str, None] = {}
_critical = 0
_depth = 0                          # signals() nesting
_state = {"signalled": False, "reported": False}
_timer: threading.Timer | None = None


def _handler(signum, frame):
    if _state["signalled"]:
        return                      # unwinding already: the watchdog ends it if it takes too long
    _state["signalled"] = True
    _start_watchdog()
    raise Interrupted(signum)


def _start_watchdog() -> None:
    global _timer
    if _timer is None:
        _timer = threading.Timer(BUDGET_S, _watchdog)
        _timer.daemon = True
        _timer.start()


def _watchdog() -> None:
    while True:
        with _lock:
            if _critical == 0:
                break
        threading.Event().wait(0.05)
    remove_temporaries()
    report()
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - on the way out
        pass
    os._exit(EXIT_CODE)


def report(line: str = "interrupted") -> None:
    """Print the one ``interrupted`` line (once: the CLI or, failing that, the watchdog)."""
    if _state["reported"]:
        return
    _state["reported"] = True
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - a closed stderr
        pass


def exit() -> None:
    """End an interrupted command with `EXIT_CODE`: at once (os._exit, after flushing) when a signal interrupted it,
    since everything is cleaned up by then and the interpreter's own teardown (thread pools, modules) can take
    longer than the second allowed; else through SystemExit (a KeyboardInterrupt raised in a test, say)."""
    if _state["signalled"]:
        remove_temporaries()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream
                pass
        os._exit(EXIT_CODE)
    sys.exit(EXIT_CODE)


@contextlib.contextmanager
def signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` while inside (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _depth
    if _depth == 0:
        _state.update(signalled=False, reported=False)
    old = {s: signal.signal(s, _handler) for s in HANDLED}
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for s, h in old.items():
            signal.signal(s, h)


PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """This process gets SIGKILL from the kernel when its parent ends (Linux's PR_SET_PDEATHSIG; elsewhere nothing).
    With `parent_pid`: a parent that already ended before the call ends this process now."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def ignore_in_worker(parent_pid: int | None = None) -> None:
    """A worker process's initializer: the signals are the main process's business (it stops the workers), and the
    worker ends with it. Without the second part a worker the main process missed (one it had not yet recorded, or
    all of them after the watchdog's exit) lived on blocked writing its result into a pipe nobody read, holding
    the command's stderr open (seen once in the test suite: a hang)."""
    for s in HANDLED:
        signal.signal(s, signal.SIG_IGN)
    die_with_parent(parent_pid)


def track(path: Path) -> None:
    """``path`` (a temporary file or folder being written) goes if the command is interrupted before `untrack`."""
    with _lock:
        _temporaries[str(path)] = None


def untrack(path: Path) -> None:
    """``path`` was renamed into place or removed: no longer a temporary to clean up."""
    with _lock:
        _temporaries.pop(str(path), None)


@contextlib.contextmanager
def temporary(path: Path) -> Iterator[Path]:
    """`track` ``path`` while inside; it is removed if anything (an interruption included) ends the block with an
    exception. The block renames it into place (or removes it) otherwise."""
    track(path)
    try:
        yield path
    except BaseException:
        _remove(str(path))
        raise
    finally:
        untrack(path)


def _remove(key: str) -> None:
    p = Path(key)
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    except OSError:
        pass


def remove_temporaries() -> None:
    with _lock:
        keys = list(_temporaries)
        _temporaries.clear()
    for key in keys:
        _remove(key)


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """Code that must run to its end once started (restoring a device's settings): the watchdog waits for it."""
    global _critical
    with _lock:
        _critical += 1
    try:
        yield
    finally:
        with _lock:
            _critical -= 1
