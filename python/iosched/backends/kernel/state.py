"""The undo log of one invocation, kept on disk as a recovery record, and the restore of everything in it.

Before the backend changes anything (a queue's scheduler, tunables or nr_requests; a cgroup; a mount; a running
fio) it appends how to undo it to ``<state dir>/run-<pid>.json`` (written to a temporary name and renamed, so a
record is always whole).  Undoing removes the entry; the file goes when it is empty.  A record whose process is
gone was left by a killed run: the next invocation (``iosched run --backend kernel``, any ``iosched device``
command) restores it first.  The state dir is ``/run/iosched`` (a tmpfs: a reboot resets sysfs and cgroups too),
or ``$IOSCHED_STATE_DIR``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from ... import interrupt
from . import KernelError
from .blockdev import restore_queue

DEFAULT_STATE_DIR = "/run/iosched"


def state_dir() -> Path:
    return Path(os.environ.get("IOSCHED_STATE_DIR") or DEFAULT_STATE_DIR)


def proc_starttime(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot): with the pid, it names one process for good."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[19])


def alive(pid: int, starttime: int | None) -> bool:
    """Process ``pid`` started at ``starttime`` still runs (a zombie does not: it only waits to be reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = text[text.rindex(")") + 2:].split()
    return fields[0] not in ("Z", "X") and int(fields[19]) == starttime


def _proc_session(pid: int) -> int | None:
    """The session of a live process (None for a zombie: it does no I/O and goes when reaped)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[3])


def session_members(sid: int) -> list[int]:
    """Processes in session ``sid``.  A session id stays reserved while any member lives, so these are the
    processes the session's leader (a fio we started with setsid) and its children left behind."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and _proc_session(int(d.name)) == sid:
            out.append(int(d.name))
    return out


def _atomic_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Journal:
    """The undo log of this invocation."""

    def __init__(self, directory: Path | None = None):
        self.dir = directory or state_dir()
        self.path = self.dir / f"run-{os.getpid()}.json"
        self.actions: list[dict[str, Any]] = []
        self._next = 0
        self.header = {"pid": os.getpid(), "starttime": proc_starttime(os.getpid()), "argv": sys.argv,
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}

    def _save(self) -> None:
        if not self.actions:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        _atomic_json(self.path, dict(self.header, actions=self.actions))

    def add(self, action: dict[str, Any]) -> int:
        self._next += 1
        self.actions.append(dict(action, id=self._next))
        self._save()
        return self._next

    def undo(self, action_id: int) -> list[str]:
        """Undo one entry now; it stays in the record if that fails."""
        for a in self.actions:
            if a["id"] == action_id:
                problems = undo(a)
                if not problems:
                    self.actions.remove(a)
                    self._save()
                return problems
        return []

    def forget(self, action_id: int) -> None:
        self.actions = [a for a in self.actions if a["id"] != action_id]
        self._save()

    def undo_all(self) -> list[str]:
        """Undo everything, newest first; what cannot be undone stays in the record for the next invocation."""
        problems: list[str] = []
        for a in list(reversed(self.actions)):
            p = undo(a)
            if p:
                problems += p
            else:
                self.actions.remove(a)
        self._save()
        return problems


# ---------------------------------------------------------------- undo operations

def _kill_session(sid: int, starttime: int | None, grace_s: float = 10.0) -> list[str]:
    members = session_members(sid)
    if not members:
        return []
    leader_start = proc_starttime(sid)
    if leader_start is not None and starttime is not None and leader_start != starttime:
        return [f"pid {sid} is another process now: not touched"]
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            for pid in members:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)             # reaps it if it is our child
            members = session_members(sid)
            if not members:
                return []
            time.sleep(0.05)
    return [f"fio session {sid} still has processes {members}"]


def _rmdir_cgroup(path: Path) -> list[str]:
    if not path.exists():
        return []
    for child in sorted((p for p in path.iterdir() if p.is_dir()), reverse=True):
        if problems := _rmdir_cgroup(child):
            return problems
    last: OSError | None = None
    for _ in range(50):      # a cgroup whose last task just exited can be busy for a moment
        try:
            os.rmdir(path)
            return []
        except FileNotFoundError:
            return []
        except OSError as e:
            last = e
            time.sleep(0.02)
    procs = ""
    with contextlib.suppress(OSError):
        procs = " (processes: " + " ".join((path / "cgroup.procs").read_text().split()) + ")"
    return [f"cannot remove cgroup {path}: {last.strerror if last else '?'}{procs}"]


def _umount(path: str, remove_dir: bool) -> list[str]:
    p = Path(path)
    if os.path.ismount(p):
        r = subprocess.run(["umount", "--", path], capture_output=True, text=True)
        if r.returncode != 0:
            return [f"cannot unmount {path}: {r.stderr.strip()}"]
    if remove_dir:
        with contextlib.suppress(FileNotFoundError):
            try:
                p.rmdir()
            except OSError as e:
                return [f"cannot remove mount point {path}: {e.strerror}"]
    return []


def undo(a: dict[str, Any]) -> list[str]:
    op = a["op"]
    try:
        if op == "queue":
            return [f"{a['device']}: {p}" for p in restore_queue(Path(a["queue"]), a["saved"], a.get("touched", ()))]
        if op == "session":
            return _kill_session(a["sid"], a.get("starttime"))
        if op == "cgroup":
            return _rmdir_cgroup(Path(a["path"]))
        if op == "write":
            from .blockdev import write_attr
            try:
                write_attr(Path(a["path"]), a["value"])
            except FileNotFoundError:
                return []
            except OSError as e:
                return [f"cannot write {a['value']!r} to {a['path']}: {e.strerror}"]
            return []
        if op == "umount":
            return _umount(a["path"], a.get("rmdir", False))
        if op == "file":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(a["path"])
            return []
    except OSError as e:
        return [f"{op}: {e}"]
    return [f"unknown undo operation {op!r}"]


# ---------------------------------------------------------------- records left by killed runs

def stale_records(directory: Path | None = None) -> list[Path]:
    d = directory or state_dir()
    if not d.exists():
        return []
    out = []
    for p in sorted(d.glob("run-*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            out.append(p)
            continue
        pid = rec.get("pid")
        if pid == os.getpid():
            continue
        if isinstance(pid, int) and alive(pid, rec.get("starttime")):
            continue            # its invocation still runs
        out.append(p)
    return out


def recover(directory: Path | None = None, echo=None) -> list[str]:
    """Restore what killed runs left behind; returns the problems (records that stay)."""
    problems: list[str] = []
    for p in stale_records(directory):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            problems.append(f"{p}: unreadable recovery record ({e}); remove it by hand after checking")
            continue
        actions = rec.get("actions", [])
        if echo:
            echo(f"recovering what iosched pid {rec.get('pid')} (started {rec.get('started')}) left behind: "
                 + ", ".join(describe(a) for a in reversed(actions)))
        left = []
        for a in reversed(actions):
            pr = undo(a)
            if pr:
                problems += pr
                left.append(a)
        if left:
            _atomic_json(p, dict(rec, actions=list(reversed(left))))
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    return problems


def describe(a: dict[str, Any]) -> str:
    op = a["op"]
    if op == "queue":
        s = a["saved"]
        return f"{a['device']} scheduler {s.get('scheduler')} (nr_requests {s.get('nr_requests')}, " \
               f"{len(s.get('iosched') or {})} tunables)"
    if op == "session":
        return f"fio (session {a['sid']})"
    if op == "cgroup":
        return f"cgroup {a['path']}"
    if op == "write":
        return f"{a['path']} = {a['value']!r}"
    if op == "umount":
        return f"mount {a['path']}"
    if op == "file":
        return f"file {a['path']}"
    return op


# ---------------------------------------------------------------- device locks and signals

@contextlib.contextmanager
def device_lock(devno: tuple[int, int], path: str, directory: Path | None = None) -> Iterator[None]:
    """One kernel-backend invocation per device at a time."""
    d = directory or state_dir()
    d.mkdir(parents=True, exist_ok=True)
    f = open(d / f"dev-{devno[0]}-{devno[1]}.lock", "a+")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise KernelError(f"{path} is in use by another iosched run (pid {f.read().strip() or '?'})") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        f.close()


# SIGINT, SIGTERM or SIGHUP: the CLI's handlers (iosched.interrupt) raise Interrupted; the backend unwinds, restoring
# everything on the way, and the CLI exits 130.
Interrupted = interrupt.Interrupted
HANDLED = interrupt.HANDLED


def signals_raise():
    """The signals raise Interrupted (as under the CLI, which already does this; for callers outside it)."""
    return interrupt.signals()


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Restoring must not be cut short: signals wait until it is done (then the first one takes effect), and the
    interrupt watchdog waits for it too."""
    with interrupt.critical():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
