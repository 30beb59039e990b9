"""Request traces in the kernel's blk tracer's text, from a lab run (``--vm trace=blk`` or ``blk+sched``) or a
simulated one (``request_trace``: the simulator writes the same lines): ``runs/<id>/blktrace.txt.gz``, summed
up per submitting thread (``iosched trace-summary``): how long its requests waited for a tag (Q -> G), in the
scheduler (G -> D) and in the driver (D -> C), and how many requests its device had allocated (G, not yet C)
when it asked for one (Q); with the CPU scheduler's events, how its sleeps for a tag ended
(woken and given a tag, or woken and asleep again), and how long a woken thread, once switched in, takes to do
anything the trace shows (a lab guest's vCPU that stops meanwhile shows as a long gap).  The questions
validation.md and kmod.md asked of traces by hand, asked the same way of both sides.  BFQ's own messages (`` m ``
lines: the kernel's ``bfq_log``, the simulator's scheduler notes in the same forms) are counted per queue
(``bfq_counts``): how often each went busy and into service, why it was expired, its dispatches while
weight-raised, and what depth allocations got."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

# `fio-254 [001] d..1. 5.348132: 254,0  Q  R 133580792 + 8 [fio]`: the blk tracer's lines (BFQ's messages, " m ",
# carry no sector and are skipped)
_BLK = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<t>\d+\.\d+):\s+(?P<dev>\d+,\d+)\s+"
                  r"(?P<act>[A-Z])\s+(?P<rwbs>[A-Z]+)\s+(?P<sector>\d+)\s+\+\s+\d+")
_SCHED = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<t>\d+\.\d+):\s+"
                    r"(?P<event>sched_waking|sched_switch):\s+(?P<rest>.*)$")
_PID = re.compile(r"\bpid=(\d+)")
_SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)")


@dataclass
class Thread:
    """One submitting thread's requests and, with sched events, its sleeps for a tag."""
    pid: int
    comm: str = ""
    cpus: set[int] = field(default_factory=set)
    tag_wait_us: list[float] = field(default_factory=list)
    sched_us: list[float] = field(default_factory=list)
    driver_us: list[float] = field(default_factory=list)
    # at each of its bios (Q): the requests allocated on its device then (G seen, C not yet), its own included
    allocated_at_ask: list[int] = field(default_factory=list)
    writes: int = 0
    woken_got_tag: int = 0          # switched in during a tag wait, and the tag came before it slept again
    # switched in during a tag wait, and asleep again without one: from switch-in to that sleep
    woken_slept_again_us: list[float] = field(default_factory=list)
    wake_to_run_us: list[float] = field(default_factory=list)          # sched_waking to its switch-in
    # after every wake-up: from its switch-in to its next traced event (a request event it issues, its next switch
    # out, a thread it wakes); wake-ups that ended a tag wait, and the others (a wait for completions, say)
    tag_wait_switch_in_to_next_us: list[float] = field(default_factory=list)
    other_switch_in_to_next_us: list[float] = field(default_factory=list)

    @property
    def woken_slept_again(self) -> int:
        return len(self.woken_slept_again_us)


@dataclass
class Summary:
    threads: dict[int, Thread]
    sched_events: bool
    bfq: "BfqCounts"          # BFQ's messages (`` m `` lines), counted in the same pass


def read(path: Path) -> Summary:
    """``path``: a run's folder or its blktrace.txt.gz."""
    f = path / "blktrace.txt.gz" if path.is_dir() else path
    opener = gzip.open if f.suffix == ".gz" else open
    threads: dict[int, Thread] = {}
    pending: dict[tuple[str, str], list[float | int]] = {}   # (dev, sector) -> [pid, Q, G, D]
    in_tag_wait: dict[int, int] = {}     # pid -> requests between their Q and G
    allocated: dict[str, int] = {}       # device -> requests allocated and not completed
    running_since: dict[int, float] = {}  # pid -> its switch-in while it waited for a tag
    waking_at: dict[int, float] = {}
    switched_in_at: dict[int, tuple[float, bool]] = {}   # pid -> its switch-in after a wake-up, in a tag wait
    sched = False
    bfq = BfqCounts()
    with opener(f, "rt") as lines:
        for line in lines:
            if " m " in line and _count_bfq_message(bfq, line):     # BFQ's message: no request, no CPU event
                continue
            m = _BLK.match(line)
            if m:
                t = float(m["t"]) * 1e6
                _next_event(threads, switched_in_at, int(m["pid"]), t)
                key = (m["dev"], m["sector"])
                act = m["act"]
                if act == "Q":
                    old = pending.get(key)
                    if old is not None and old[2] < 0:     # an earlier bio at that sector never got a request
                        in_tag_wait[int(old[0])] -= 1
                    pid = int(m["pid"])
                    th = threads.setdefault(pid, Thread(pid, m["comm"].strip()))
                    th.cpus.add(int(m["cpu"]))
                    th.writes += "W" in m["rwbs"]
                    th.allocated_at_ask.append(allocated.get(m["dev"], 0))
                    pending[key] = [pid, t, -1.0, -1.0]
                    in_tag_wait[pid] = in_tag_wait.get(pid, 0) + 1
                elif key in pending:
                    p = pending[key]
                    pid = int(p[0])
                    th = threads[pid]
                    if act in "MF" and p[2] < 0:      # merged into a queued request: no tag of its own
                        del pending[key]
                        in_tag_wait[pid] -= 1
                    elif act == "G" and p[2] < 0:
                        p[2] = t
                        allocated[m["dev"]] = allocated.get(m["dev"], 0) + 1
                        th.tag_wait_us.append(t - p[1])
                        in_tag_wait[pid] -= 1
                        if pid in running_since:
                            th.woken_got_tag += 1
                            del running_since[pid]
                    elif act == "D" and p[2] >= 0 and p[3] < 0:
                        p[3] = t
                        th.sched_us.append(t - p[2])
                    elif act == "C" and p[3] >= 0:
                        th.driver_us.append(t - p[3])
                        allocated[m["dev"]] -= 1
                        del pending[key]
                continue
            m = _SCHED.match(line)
            if not m:
                continue
            sched = True
            t = float(m["t"]) * 1e6
            _next_event(threads, switched_in_at, int(m["pid"]), t)
            if m["event"] == "sched_waking":
                pm = _PID.search(m["rest"])
                if pm:
                    waking_at[int(pm.group(1))] = t
                continue
            sm = _SWITCH.search(m["rest"])
            if not sm:
                continue
            prev, state, nxt = int(sm.group(1)), sm.group(2), int(sm.group(3))
            woke_at = waking_at.pop(nxt, None)      # a wake-up counts for the first switch-in after it only
            tag_wait = nxt in threads and in_tag_wait.get(nxt, 0) > 0
            if woke_at is not None and nxt in threads:
                switched_in_at[nxt] = (t, tag_wait)
            if tag_wait:
                running_since[nxt] = t
                if woke_at is not None:
                    threads[nxt].wake_to_run_us.append(t - woke_at)
            if prev in running_since and state.startswith("D"):
                threads[prev].woken_slept_again_us.append(t - running_since.pop(prev))
    bfq.queues = {k: v for k, v in bfq.queues.items() if v.busy or v.in_service or any(v.expired) or v.raised}
    return Summary({p: th for p, th in threads.items() if th.tag_wait_us}, sched, bfq)


def _next_event(threads: dict[int, Thread], switched_in_at: dict[int, tuple[float, bool]], pid: int,
                t: float) -> None:
    """A traced line by thread ``pid`` at ``t``: its first since a switch-in after a wake-up ends that gap."""
    since = switched_in_at.pop(pid, None)
    if since is not None:
        th = threads[pid]
        (th.tag_wait_switch_in_to_next_us if since[1] else th.other_switch_in_to_next_us).append(t - since[0])


# BFQ's messages: `fio-413 [001] d..1. 14.330996: 259,0   1,0  m   N bfq413S add_request 1` (a queue: a process's
# sync queue "<pid>S", async "<pid>A" or "A", a merged one "SHARED-S") or `... m   N bfq [bfq_limit_depth] ...`.
_MSG = re.compile(r":\s+(?P<dev>\d+,\d+)\s+\d+,\d+\s+m\s+N\s+bfq(?P<queue>\S*)\s+(?P<msg>.*)$")
_EXPIRE = re.compile(r"^expire \((\d+),")
_RAISED = re.compile(r"^raising period.*coeff (\d+)")
_OVER = re.compile(r"^too many requests: allocated (\d+) limit (\d+)")
_DEPTH = re.compile(r"^\[bfq_limit_depth\] wr_busy (\d+) sync (\d+) depth (\d+)")
EXPIRY_REASONS = ("too idle", "budget timeout", "budget exhausted", "no more requests", "preempted")


@dataclass
class BfqQueue:
    """One BFQ queue's counts in a trace (all devices together)."""
    busy: int = 0              # idle -> busy ("add to busy")
    in_service: int = 0
    expired: list[int] = field(default_factory=lambda: [0] * len(EXPIRY_REASONS))
    raised: dict[int, int] = field(default_factory=dict)    # coefficient -> dispatches while raised by it


@dataclass
class BfqCounts:
    """BFQ's messages in a trace: per queue (its name in the messages), and the allocations' depths."""
    queues: dict[str, BfqQueue] = field(default_factory=dict)
    allocations: int = 0
    with_raised_busy: int = 0                                # allocations while a raised queue was busy
    depths: dict[int, int] = field(default_factory=dict)     # the depth an allocation got -> how many
    over_limit: int = 0
    limits: dict[int, int] = field(default_factory=dict)     # an over-limit allocation's limit -> how many

    @property
    def messages(self) -> bool:
        return bool(self.queues or self.allocations or self.over_limit)


def bfq_counts(path: Path) -> BfqCounts:
    """BFQ's messages in a trace (``path``: a run's folder or its blktrace.txt.gz), counted; none: an empty count."""
    return read(path).bfq


def _count_bfq_message(c: BfqCounts, line: str) -> bool:
    """Count ``line`` into ``c`` if it is one of BFQ's messages that ``bfq_table`` shows; whether it is BFQ's."""
    m = _MSG.search(line)
    if not m:
        return False
    msg, queue = m["msg"], m["queue"]
    if d := _DEPTH.match(msg):
        c.allocations += 1
        c.with_raised_busy += int(d.group(1)) > 0
        depth = int(d.group(3))
        c.depths[depth] = c.depths.get(depth, 0) + 1
    elif o := _OVER.match(msg):
        c.over_limit += 1
        limit = int(o.group(2))
        c.limits[limit] = c.limits.get(limit, 0) + 1
    elif queue:
        q = c.queues.setdefault(queue, BfqQueue())
        if msg.startswith("add to busy"):
            q.busy += 1
        elif msg.startswith("set_in_service_queue"):
            q.in_service += 1
        elif e := _EXPIRE.match(msg):
            reason = int(e.group(1))
            if 0 <= reason < len(EXPIRY_REASONS):
                q.expired[reason] += 1
        elif r := _RAISED.match(msg):
            coeff = int(r.group(1))
            q.raised[coeff] = q.raised.get(coeff, 0) + 1
    return True


def _top(counts: dict[int, int], total: int, n: int = 3) -> str:
    """The `n` most frequent values with their shares of `total`."""
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{v}: {k / total:.0%}" for v, k in top) if total else "-"


def bfq_table(c: BfqCounts) -> list[str]:
    """Markdown: one row per queue (busiest first), then one line on the allocations."""
    head = ["BFQ queue", "went busy", "in service"] + [f"expired: {r}" for r in EXPIRY_REASONS] + \
           ["dispatches while raised (x30 / x3000)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, q in sorted(c.queues.items(), key=lambda kv: -kv[1].busy):
        rows.append("| " + " | ".join([name, str(q.busy), str(q.in_service), *map(str, q.expired),
                                       f"{q.raised.get(30, 0)} / {q.raised.get(3000, 0)}"]) + " |")
    if c.allocations:
        rows.append("")
        rows.append(f"allocations: {c.allocations}, {c.with_raised_busy / c.allocations:.0%} while a raised queue "
                    f"was busy; depth given (value: share): {_top(c.depths, c.allocations)}; over their queue's "
                    f"share: {c.over_limit} ({c.over_limit / c.allocations:.0%}), limits {_top(c.limits, c.over_limit)}")
    return rows


def _ms(values: list[float], quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), top: bool = True) -> str:
    """Quantiles of microsecond values in ms, " / "-separated, and the largest in brackets (``top``)."""
    if not values:
        return "-"
    v = sorted(values)
    text = " / ".join(f"{v[min(len(v) - 1, int(f * len(v)))] / 1e3:.2f}" for f in quantiles)
    return text + f" ({v[-1] / 1e3:.2f})" if top else text


def _allocated(counts: list[int]) -> str:
    """Requests allocated when a thread asked: P10 / P50 (the most), and how often it found that many."""
    if not counts:
        return "-"
    v = sorted(counts)
    top = v[-1]
    at_top = 100 * v.count(top) / len(v)
    share = "<1" if at_top < 0.5 else f"{at_top:.0f}"
    return f"{v[len(v) // 10]} / {v[len(v) // 2]} ({top}: {share}%)"


# A woken thread's first event this long after its switch-in is not its own work (a tag retry, a reap and the next
# submission take tens of microseconds even under TCG): its vCPU stopped meanwhile (docs/validation.md).
GAP_MS = 0.5


def _gap(values: list[float]) -> str:
    """P90 of the gaps in ms, and the share of them over GAP_MS."""
    if not values:
        return "-"
    over = 100 * sum(v > GAP_MS * 1e3 for v in values) / len(values)
    return f"{_ms(values, (0.9,), top=False)} ({over:.0f}%)"


def table(s: Summary) -> list[str]:
    """Markdown rows, one per submitting thread (pid order, which is fio's job order): its name and pid, R or W
    (what most of its requests were), the CPUs it submitted from.  "allocated when it asked": on a device whose
    tags the trace fills, the most is its tag count, and the share at it how often the thread found none free."""
    head = ["thread", "CPUs", "requests", "tag wait ms P50 / P90 / P99 (max)", "scheduler ms", "driver ms",
            "allocated when it asked P10 / P50 (most: share)"]
    if s.sched_events:
        head += ["woken in a tag wait: got it / asleep again", "asleep again after ms P50 / P90",
                 "waking to running ms P50 / P90",
                 f"woken: running to its next event ms P90 (over {GAP_MS} ms), tag wait / other"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pid in sorted(s.threads):
        th = s.threads[pid]
        kind = "W" if th.writes * 2 > len(th.tag_wait_us) else "R"
        cells = [f"{th.comm} {pid} ({kind})", ",".join(map(str, sorted(th.cpus))), str(len(th.tag_wait_us)),
                 _ms(th.tag_wait_us), _ms(th.sched_us), _ms(th.driver_us), _allocated(th.allocated_at_ask)]
        if s.sched_events:
            cells += [f"{th.woken_got_tag} / {th.woken_slept_again}",
                      _ms(th.woken_slept_again_us, (0.5, 0.9), top=False),
                      _ms(th.wake_to_run_us, (0.5, 0.9), top=False),
                      f"{_gap(th.tag_wait_switch_in_to_next_us)} / {_gap(th.other_switch_in_to_next_us)}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


# ---------------------------------------------------------------- the simulator's trace as the tracer's lines

def _note_message(n: dict[str, Any]) -> str:
    """A scheduler note (SimResult.sched_notes: kind k with a, b, c) as BFQ's message of the same event, in the
    form the kernel's log writes it so that ``bfq_counts`` reads both (fields the simulator does not keep are left
    out)."""
    k, a, b, c = n["k"], n.get("a", 0), n.get("b", 0), n.get("c", 0)
    if k == "L":
        return f"[bfq_limit_depth] wr_busy {a} sync {b} depth {c}"
    return {"B": "add to busy", "I": "del from busy", "S": f"set_in_service_queue, cur-budget = {a}",
            "E": f"expire ({a}, num_disp {b})", "R": f"raising period, coeff {a}",
            "O": f"too many requests: allocated {a} limit {b}"}.get(k, f"note {k}")


def _note_lines(notes: list[dict[str, Any]], processes: list[str]) -> Iterator[tuple[int, str]]:
    for n in notes:
        p = n.get("p")
        if n["k"] == "L":
            queue = " "
        elif n.get("s"):
            queue = "SHARED-S "
        else:
            queue = f"{1000 + p}S " if p is not None else "A "
        comm = processes[p] if p is not None and p < len(processes) else "kworker"
        pid = 1000 + p if p is not None else 0
        head = f"{comm:>16}-{pid:<7} [000] d..1. {n['t'] / 1e9:>12.6f}:"
        yield n["t"], f"{head} 259,{n['d']}   1,0  m   N bfq{queue}{_note_message(n)}"


def sim_lines(events: list[dict[str, Any]], processes: list[str], truncated: bool,
              notes: list[dict[str, Any]] | None = None) -> Iterator[str]:
    """The lines of a simulated run's request trace (SimResult.request_trace, in time order), laid out as the VM
    lab's blk tracer with sched events writes them, so ``read`` takes both.  ``processes``: each process's name
    (its job's, by index; pids are 1000 + index); an io-wq worker of its io_uring ring (event field ``k``, its
    number) is the kernel's ``iou-wrk-PID`` thread, tid 100000 + 1000 x index + number.  A REQ_NOWAIT bio that
    found no request (E) is a completion with -EAGAIN (65525, as the tracer prints it).  A thread's sleep for a
    tag (S) is a switch to the idle task in state D, its wake-up (W) a sched_waking, its running again (R) a switch
    to it.  ``notes``: the scheduler's notes (SimResult.sched_notes, in time order), as BFQ's message lines
    (`` m ``), merged in by time."""
    yield "# tracer: blk (iosched simulator: request_trace)"
    if truncated:
        yield f"# truncated: the last {len(events)} events only" + \
            (" (the scheduler's notes: their last 500,000)" if notes else "")
    pending = _note_lines(notes or [], processes)
    note = next(pending, None)
    for e in events:
        while note is not None and note[0] <= e["t"]:
            yield note[1]
            note = next(pending, None)
        p, worker = e["p"], e.get("k", 0)
        comm = processes[p] if p < len(processes) else "flush"    # the writeback flusher comes last
        pid, cpu, t = 1000 + p, e["c"], f"{e['t'] / 1e9:.6f}"
        if worker:
            comm, pid = f"iou-wrk-{pid}", 100000 + 1000 * p + worker
        head = f"{comm:>16}-{pid:<7} [{cpu:03d}] d..1. {t:>12}:"
        act = e["a"]
        if act == "S":
            yield (f"{head} sched_switch: prev_comm={comm} prev_pid={pid} prev_prio=120 prev_state=D ==> "
                   f"next_comm=swapper/{cpu} next_pid=0 next_prio=120")
        elif act == "W":
            yield f"{head} sched_waking: comm={comm} pid={pid} prio=120 target_cpu={cpu:03d}"
        elif act == "R":
            yield (f"{head} sched_switch: prev_comm=swapper/{cpu} prev_pid=0 prev_prio=120 prev_state=R ==> "
                   f"next_comm={comm} next_pid={pid} next_prio=120")
        else:
            rwbs = "W" if e["w"] else "R"
            end = f"[{comm}]"
            if act == "E":
                act, end = "C", "[65525]"
            yield f"{head} 259,{e['d']} {act:>4} {rwbs:>3} {e['s']} + {e['n']} {end}"
    while note is not None:
        yield note[1]
        note = next(pending, None)


def process_names(jobs: list[dict[str, Any]]) -> list[str]:
    """The simulator's processes in order (each job's clones), by job name as the kernel keeps a comm: at most 15
    characters, no spaces."""
    names = []
    for j in jobs:
        comm = "".join(c if c.isprintable() and not c.isspace() else "_" for c in str(j["name"]))[:15] or "fio"
        names += [comm] * int(j.get("numjobs", 1))
    return names
