"""QEMU: the command line, the guest process (never outliving iosched), the result channel and the accelerator
probe.

The guest runs in its own process group; iosched kills the group on exit, on error and on SIGINT/SIGTERM/SIGHUP,
and the kernel kills qemu if iosched itself is killed (PR_SET_PDEATHSIG).  The console (kernel messages) goes to
a file; results come over a virtio-serial port written to another file, which the host reads as it grows.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ... import interrupt
from . import VmError
from .guest import MARK, PORT_NAME

QEMU = "qemu-system-x86_64"
KVM_PROBE_TIMEOUT_S = 20.0          # a guest that works under KVM is at init in ~2 s; a broken one hangs or aborts
BOOT_TIMEOUT_S = {"kvm": 60.0, "tcg": 180.0}
CMDLINE = "console=ttyS0 panic=-1 quiet loglevel=4"


def find_qemu() -> str:
    exe = os.environ.get("IOSCHED_QEMU") or shutil.which(QEMU)
    if not exe or not os.access(exe, os.X_OK):
        raise VmError(f"{QEMU} is not installed: apt-get install qemu-system-x86 (./scripts/setup does, as root)")
    return exe


def qemu_version(exe: str) -> str:
    r = subprocess.run([exe, "--version"], capture_output=True, text=True)
    m = re.search(r"version (\S+)", r.stdout)
    return m.group(1) if m else r.stdout.strip()[:40]


@dataclass
class Boot:
    """One guest boot's settings."""
    kernel: Path
    initrd: Path
    accel: str                         # kvm or tcg
    cpus: int
    memory_mib: int
    results: Path                      # the virtio-serial port's file
    console: Path                      # the serial console's file
    devices: list[str] = field(default_factory=list)      # extra QEMU arguments (the block devices)
    shell: bool = False                # console on stdio, a shell in the guest
    idle_poll: bool = False            # the guest's kernel polls when idle (idle=poll) rather than halting

    def cmdline(self) -> str:
        return CMDLINE + (" idle=poll" if self.idle_poll else "") + (" iosched.shell" if self.shell else "")

    def argv(self, exe: str) -> list[str]:
        cpu = "host" if self.accel == "kvm" else "max"
        for p in (self.results, self.console):
            if "," in str(p):
                raise VmError(f"{p}: QEMU cannot take a path with a comma; use another lab folder")
        args = [exe, "-accel", self.accel, "-cpu", cpu, "-smp", str(self.cpus), "-m", f"{self.memory_mib}M",
                "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
                "-kernel", str(self.kernel), "-initrd", str(self.initrd),
                "-append", self.cmdline(),
                "-device", "virtio-serial-pci",
                "-chardev", f"file,id=results,path={self.results}",
                "-device", f"virtserialport,chardev=results,name={PORT_NAME}"]
        args += ["-serial", "mon:stdio"] if self.shell else ["-serial", f"file:{self.console}"]
        return args + self.devices


class Guest:
    """A running qemu: started in its own process group, killed with it on stop() (and by the kernel if iosched
    dies first)."""

    def __init__(self, boot: Boot, exe: str, stderr_path: Path):
        self.boot = boot
        self.argv = boot.argv(exe)
        self.stderr_path = stderr_path
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    def start(self) -> "Guest":
        self.boot.results.write_bytes(b"")
        with open(self.stderr_path, "wb") as err:
            io = {} if self.boot.shell else {"stdin": subprocess.DEVNULL, "stdout": err}
            self.proc = subprocess.Popen(self.argv, stderr=err, start_new_session=not self.boot.shell,
                                         preexec_fn=interrupt.die_with_parent, **io)
        self.started = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 3.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if self.boot.shell:
                        self.proc.send_signal(sig)
                    else:
                        os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        else:
            self.proc.wait()

    def cpu_ns(self) -> dict[str, tuple[int, int]]:
        """Per qemu thread: (ns on a host CPU, ns runnable but waiting for one), from /proc/PID/task/*/schedstat.
        The waiting is the emulated machine's stolen time, which a TCG guest cannot see itself."""
        out = {}
        if self.proc is None:
            return out
        for t in Path(f"/proc/{self.proc.pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                f = t.read_text().split()
                out[t.parent.name] = (int(f[0]), int(f[1]))
        return out


    def stderr_tail(self, n: int = 4) -> str:
        with contextlib.suppress(OSError):
            lines = [ln for ln in self.stderr_path.read_text(errors="replace").splitlines() if ln.strip()]
            return " | ".join(lines[:2] + (["..."] if len(lines) > 2 + n else []) + lines[2:][-n:])
        return ""

    def console_text(self) -> str:
        """The serial console so far ("" when it cannot be read)."""
        with contextlib.suppress(OSError):
            return self.boot.console.read_text(errors="replace")
        return ""

    def console_tail(self, n: int = 6) -> str:
        text = self.console_text()
        lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", text).splitlines() if ln.strip()]
        return " | ".join(lines[-n:])


def cpu_delta(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """(run, wait) ns between two cpu_ns() samples: threads in both, and threads started since (threads that
    ended in between are lost: qemu's short-lived I/O workers)."""
    run = wait = 0
    for tid, (r1, w1) in b.items():
        r0, w0 = a.get(tid, (0, 0))
        run += max(0, r1 - r0)
        wait += max(0, w1 - w0)
    return run, wait


@contextlib.contextmanager
def running(boot: Boot, exe: str, stderr_path: Path) -> Iterator[Guest]:
    g = Guest(boot, exe, stderr_path).start()
    try:
        yield g
    finally:
        g.stop()


# ---------------------------------------------------------------- the result channel

@dataclass
class Frame:
    words: list[str]                    # @@iosched WORD ARGS... split on spaces (the message rest kept whole)
    text: str                           # the line after the marker
    data: bytes | None = None           # a tar frame's bytes


class Channel:
    """Frames from the growing results file: lines ``@@iosched ...`` and ``@@iosched tar TAG N`` + N bytes.
    Anything else (a stray shell message) is kept in ``other``."""

    def __init__(self, path: Path):
        self.path = path
        self.pos = 0
        self.buf = b""
        self.other: list[str] = []

    def poll(self) -> list[Frame]:
        with contextlib.suppress(FileNotFoundError):
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
                self.pos += len(chunk)
                self.buf += chunk
        return self._frames()

    def _frames(self) -> list[Frame]:
        out = []
        mark = MARK.encode() + b" "
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                return out
            line = self.buf[:nl].decode(errors="replace").rstrip("\r")
            if not line.startswith(MARK + " "):
                if line.strip():
                    self.other.append(line)
                self.buf = self.buf[nl + 1:]
                continue
            text = line[len(mark):]
            words = text.split()
            if words and words[0] == "tar":
                if len(words) != 3 or not words[2].isdigit():
                    raise VmError(f"garbled frame from the guest: {line!r}")
                n = int(words[2])
                if len(self.buf) < nl + 1 + n:
                    return out            # wait for the rest
                out.append(Frame(words, text, self.buf[nl + 1:nl + 1 + n]))
                self.buf = self.buf[nl + 1 + n:]
            else:
                out.append(Frame(words, text))
                self.buf = self.buf[nl + 1:]


# ---------------------------------------------------------------- the accelerator

def kvm_usable() -> str | None:
    """Why KVM cannot even be tried (None: try it)."""
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "/dev/kvm is not accessible to this user (group kvm)"
    return None


def boot_ready(boot: Boot, exe: str, scratch: Path, timeout_s: float) -> tuple[bool, float, str]:
    """Boot with no batch: (reached init and powered off, seconds, why not)."""
    t0 = time.monotonic()
    ch = Channel(boot.results)
    with running(boot, exe, scratch / f"qemu-{boot.accel}.err") as g:
        while time.monotonic() - t0 < timeout_s:
            for fr in ch.poll():
                if fr.words[:1] == ["ready"]:
                    g.proc.wait(timeout=30)
                    return True, time.monotonic() - t0, ""
            if not g.alive():
                return False, time.monotonic() - t0, f"qemu exited {g.proc.returncode}: {g.stderr_tail(1)}"
            err = g.stderr_tail(1)
            if "KVM" in err or "error" in err.lower():
                return False, time.monotonic() - t0, err
            time.sleep(0.05)
        return False, time.monotonic() - t0, f"no answer in {timeout_s:.0f} s ({g.console_tail(2) or 'no console output'})"


def accel_key(lab_key: str, exe: str) -> str:
    return json.dumps([lab_key, qemu_version(exe), os.uname().release, kvm_usable()], sort_keys=True)


def choose_accel(want: str, lab, exe: str, scratch: Path, echo, *, reprobe: bool = False) -> tuple[str, str]:
    """(kvm|tcg, how it was chosen).  ``want``: auto, kvm or tcg.  auto probes KVM once per host, qemu and lab
    build (the answer is kept in the lab's accel.json) and falls back to TCG."""
    if want == "tcg":
        return "tcg", "asked for"
    why = kvm_usable()
    if why and want == "kvm":
        raise VmError(f"--vm accel=kvm: {why}")
    if why:
        return "tcg", why
    cache = lab.dir / "accel.json"
    key = accel_key(lab.info["key"], exe)
    if not reprobe and want == "auto":
        with contextlib.suppress(OSError, ValueError):
            saved = json.loads(cache.read_text())
            if saved.get("key") == key:
                return saved["accel"], saved["why"]
    echo(f"probing KVM (up to {KVM_PROBE_TIMEOUT_S:.0f} s) ...")
    boot = Boot(lab.kernel, lab.initramfs, "kvm", 1, 512, scratch / "probe.results", scratch / "probe.console")
    ok, secs, why = boot_ready(boot, exe, scratch, KVM_PROBE_TIMEOUT_S)
    accel, how = ("kvm", f"KVM boots the guest ({secs:.1f} s)") if ok else \
        ("tcg", f"KVM cannot run the guest ({why[:200]}): software emulation (TCG)")
    if want == "kvm" and not ok:
        raise VmError(f"--vm accel=kvm: {how}")
    with contextlib.suppress(OSError):
        cache.write_text(json.dumps({"key": key, "accel": accel, "why": how}) + "\n")
    return accel, how
