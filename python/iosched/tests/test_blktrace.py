"""Request traces (iosched.blktrace, `iosched trace-summary`): the lab's blk tracer lines and the simulator's
request_trace written as the same lines, read the same way."""

import gzip

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from iosched import blktrace, native
from iosched.cli import main

from .test_spec import write

# A real-time reader (pid 100, vCPU 0) that sleeps for a tag behind a background thread (pid 200, vCPU 1), in the
# tracer's own line layout: woken at 16.001 ms, running 0.1 ms later, asleep again 3 ms after that (no tag: the
# background took it); woken again at 32.001 ms, running 0.05 ms later, and this time it gets the tag.
_TRACE = """\
# tracer: blk
  fio-200 [001] d..1.  0.999000: 254,0    Q   R 16 + 8 [fio]
  fio-200 [001] d..1.  0.999005: 254,0    G   R 16 + 8 [fio]
  fio-200 [001] d..1.  0.999008: 254,0    D   R 16 + 8 [fio]
  fio-100 [000] d..1.  1.000000: 254,0    Q  RS 8 + 8 [fio]
  fio-100 [000] d..1.  1.000005: 254,0    m   N bfq100S insert_request
  fio-100 [000] d..2.  1.000010: sched_switch: prev_comm=fio prev_pid=100 prev_prio=120 prev_state=D ==> \
next_comm=swapper/0 next_pid=0 next_prio=120
  <idle>-0 [001] d.h1.  1.015008: 254,0    C   R 16 + 8 [0]
  <idle>-0 [001] d.h2.  1.016001: sched_waking: comm=fio pid=100 prio=120 target_cpu=000
  <idle>-0 [000] d..2.  1.016101: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> \
next_comm=fio next_pid=100 next_prio=120
  fio-200 [001] d..1.  1.016200: 254,0    Q   R 24 + 8 [fio]
  fio-200 [001] d..1.  1.016210: 254,0    G   R 24 + 8 [fio]
  fio-200 [001] d..1.  1.016212: 254,0    D   R 24 + 8 [fio]
  fio-100 [000] d..2.  1.019101: sched_switch: prev_comm=fio prev_pid=100 prev_prio=120 prev_state=D ==> \
next_comm=swapper/0 next_pid=0 next_prio=120
  <idle>-0 [001] d.h1.  1.032000: 254,0    C   R 24 + 8 [0]
  <idle>-0 [001] d.h2.  1.032001: sched_waking: comm=fio pid=100 prio=120 target_cpu=000
  <idle>-0 [000] d..2.  1.032051: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> \
next_comm=fio next_pid=100 next_prio=120
  fio-100 [000] d..1.  1.032060: 254,0    G  RS 8 + 8 [fio]
  fio-100 [000] d..1.  1.032070: 254,0    D  RS 8 + 8 [fio]
  <idle>-0 [000] d.h1.  1.048070: 254,0    C  RS 8 + 8 [0]
"""   # a backslash at a line's end joins it with the next, as the tracer writes them: one line per event


def test_trace_summary_of_a_tag_sleep(tmp_path):
    run = tmp_path / "out" / "runs" / "r0"
    run.mkdir(parents=True)
    (run / "blktrace.txt.gz").write_bytes(gzip.compress(_TRACE.encode()))
    s = blktrace.read(run)
    assert s.sched_events and sorted(s.threads) == [100, 200]
    rt = s.threads[100]
    # tag wait: Q at 1.000000 s, G at 1.032060 s = 32.06 ms; in the scheduler G -> D 10 us; in the driver 16 ms
    assert rt.tag_wait_us == pytest.approx([32_060]) and rt.sched_us == pytest.approx([10])
    assert rt.driver_us == pytest.approx([16_000])
    # two wake-ups in the wait: the first ran 100 us after its waking and slept again 3,000 us later; the second
    # ran 50 us after its waking and got the tag. BFQ's message line is not a request.
    assert (rt.woken_got_tag, rt.woken_slept_again) == (1, 1)
    assert rt.woken_slept_again_us == pytest.approx([3_000]) and rt.wake_to_run_us == pytest.approx([100, 50])
    bg = s.threads[200]
    assert bg.tag_wait_us == pytest.approx([5, 10]) and (bg.woken_got_tag, bg.woken_slept_again) == (0, 0)
    assert bg.driver_us == pytest.approx([16_000, 15_788])
    # allocated when each asked (Q): fio-200's first request held its tag from 0.999005 to its completion at
    # 1.015008, so fio-100 asked beside 1; fio-200 asked at 0.999000 (before its own G) and at 1.016200 (after
    # that C, before anyone's G) beside none
    assert rt.allocated_at_ask == [1] and bg.allocated_at_ask == [0, 0]
    rows = blktrace.table(s)
    assert rows[2].startswith("| fio 100 (R) | 0 | 1 | 32.06 / 32.06 / 32.06 (32.06) |")
    assert "| 1 / 1 (1: 100%) |" in rows[2] and "| 0 / 0 (0: 100%) |" in rows[3]
    # one ask in 300 at the most (16 allocated: a full 16-tag device) is under 1%; no ask, no figure
    assert blktrace._allocated([16] + [8] * 299) == "8 / 8 (16: <1%)" and blktrace._allocated([]) == "-"
    assert "| 1 / 1 | 3.00 / 3.00 |" in rows[2]
    # after each wake-up, switch-in to its next traced event: the first did nothing the trace shows for 3,000 us
    # (its sleep again), the second got its tag 9 us in: one of two over 0.5 ms, P90 3 ms; both ended a tag wait,
    # none another sleep. fio-200 was never woken.
    assert rt.tag_wait_switch_in_to_next_us == pytest.approx([3_000, 9]) and rt.other_switch_in_to_next_us == []
    assert bg.tag_wait_switch_in_to_next_us == bg.other_switch_in_to_next_us == []
    assert rows[2].endswith("| 3.00 (50%) / - |") and rows[3].endswith("| - / - |")
    out = CliRunner().invoke(main, ["trace-summary", str(tmp_path / "out")])
    assert out.exit_code == 0 and "| fio 100 (R) |" in out.output
    # without sched events: the request columns only
    blk_only = "\n".join(ln for ln in _TRACE.splitlines() if "sched_" not in ln)
    (run / "blktrace.txt.gz").write_bytes(gzip.compress(blk_only.encode()))
    s = blktrace.read(run)
    assert not s.sched_events and s.threads[100].woken_got_tag == 0 and "asleep again" not in blktrace.table(s)[0]
    # negative controls: an untraced run's folder and a results folder without traces are refused in one line
    bare = tmp_path / "bare"
    (bare / "runs" / "r0").mkdir(parents=True)
    for path in (bare, bare / "runs" / "r0"):
        out = CliRunner().invoke(main, ["trace-summary", str(path)])
        assert out.exit_code == 2 and out.output.count("\n") == 1 and "--trace" in out.output, out.output
    (run / "blktrace.txt.gz").write_bytes(b"not gzip")
    out = CliRunner().invoke(main, ["trace-summary", str(run)])
    assert out.exit_code == 2 and "not a readable trace" in out.output


def test_a_wake_up_from_another_sleep_counts_apart():
    """A reader that reaps in io_getevents (asleep in state S, not waiting for a tag) is woken at 2.000 ms and
    switched in at 2.100 ms; its next event, the next Q, comes at 3.100 ms: 1,000 us, over 0.5 ms, counted with the
    other sleeps, none with the tag waits."""
    trace = """\
# tracer: blk
  fio-300 [000] d..1.  0.001000: 254,0    Q   R 8 + 8 [fio]
  fio-300 [000] d..1.  0.001005: 254,0    G   R 8 + 8 [fio]
  fio-300 [000] d..2.  0.001010: sched_switch: prev_comm=fio prev_pid=300 prev_prio=120 prev_state=S ==> \
next_comm=swapper/0 next_pid=0 next_prio=120
  <idle>-0 [000] d.h1.  0.002000: 254,0    C   R 8 + 8 [0]
  <idle>-0 [000] d.h2.  0.002000: sched_waking: comm=fio pid=300 prio=120 target_cpu=000
  <idle>-0 [000] d..2.  0.002100: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> \
next_comm=fio next_pid=300 next_prio=120
  fio-300 [000] d..1.  0.003100: 254,0    Q   R 16 + 8 [fio]
  fio-300 [000] d..1.  0.003105: 254,0    G   R 16 + 8 [fio]
"""   # a backslash at a line's end joins it with the next, as in _TRACE
    s = _read_text(trace)
    th = s.threads[300]
    assert th.other_switch_in_to_next_us == pytest.approx([1_000]) and th.tag_wait_switch_in_to_next_us == []
    assert blktrace.table(s)[2].endswith("| - / 1.00 (100%) |")


# A lab-sized simulated run: two readers sharing a 4-tag null_blk (no elevator), each with 4 outstanding, so they
# sleep for tags; 50 ms.
_SPEC = """
name = "traced"
duration = "50ms"
devices = [{ preset = "nullb:irqmode=2,completion_nsec=1ms,hw_queue_depth=4" }]
host = { preset = "lab-tcg-2vcpu" }
[[job]]
name = "a"
rw = "randread"
ioengine = "libaio"
iodepth = 4
cpus_allowed = "0"
[[job]]
name = "b reader"
rw = "randread"
ioengine = "libaio"
iodepth = 4
cpus_allowed = "1"
"""


@pytest.mark.skipif(not native.available(), reason="native simulator not built")
def test_a_simulated_run_keeps_its_request_trace_and_the_summary_reads_it(tmp_path):
    spec = write(tmp_path, _SPEC, "traced.toml")
    for out, flags in (("plain", []), ("traced", ["--trace"])):
        r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / out), "--no-report", *flags])
        assert r.exit_code == 0, r.output
    (plain,) = (tmp_path / "plain" / "runs").iterdir()
    (traced,) = (tmp_path / "traced" / "runs").iterdir()
    assert not (plain / "blktrace.txt.gz").exists() and plain.name != traced.name   # a traced run is its own
    # recording changes nothing the run measured
    cols = ["job", "read_ios", "read_iops", "read_clat_p99_ns", "read_clat_mean_ns"]
    assert pq.read_table(plain / "results.parquet", columns=cols).to_pylist() == \
        pq.read_table(traced / "results.parquet", columns=cols).to_pylist()
    assert b"request_trace" not in gzip.decompress((traced / "result.json.gz").read_bytes())
    lines = gzip.decompress((traced / "blktrace.txt.gz").read_bytes()).decode().splitlines()
    assert (traced / "blktrace.txt.gz").read_bytes()[4:8] == bytes(4)            # no timestamp: same bytes each time
    s = blktrace.read(traced)
    assert s.sched_events and {th.comm for th in s.threads.values()} == {"a", "b_reader"}
    rows = {r["job"]: r for r in pq.read_table(traced / "results.parquet").to_pylist()}
    for th in s.threads.values():
        job = "a" if th.comm == "a" else "b reader"
        # every request it completed in the measured window went Q, G, D, C (there was no ramp)
        assert len(th.driver_us) >= rows[job]["read_ios"], (th.comm, len(th.driver_us), rows[job]["read_ios"])
        # a 1 ms device: the driver time is the timer's 1 ms plus the lab host's lateness
        assert min(th.driver_us) >= 1_000 and th.cpus == ({0} if th.comm == "a" else {1})
        assert th.woken_got_tag + th.woken_slept_again > 0 and max(th.tag_wait_us) > 100    # they slept for tags
        # the simulator's woken thread acts as it is switched in (a lab vCPU can stop there); its trace has a
        # thread's sleeps for requests only, so no other wake-ups
        gaps = th.tag_wait_switch_in_to_next_us
        assert gaps and max(gaps) == 0 and th.other_switch_in_to_next_us == []
    assert sum(" Q " in ln for ln in lines) == sum(len(th.tag_wait_us) for th in s.threads.values()) + \
        sum(" M " in ln for ln in lines)
    out = CliRunner().invoke(main, ["trace-summary", str(tmp_path / "traced")])
    assert out.exit_code == 0 and "| a 1000 (R) | 0 |" in out.output and "| b_reader 1001 (R) | 1 |" in out.output
    # negative control: the untraced folder has nothing to sum up
    out = CliRunner().invoke(main, ["trace-summary", str(tmp_path / "plain")])
    assert out.exit_code == 2 and "no traced run" in out.output


def test_the_simulators_events_read_as_the_tracers_lines():
    """sim_lines lays each event out as the lab's tracer does: read() takes them back (a worked example of one
    sleep: Q at 1 us, S, W at 10 us, R at 20 us, G at 25 us, D at 30 us, C at 1,030 us)."""
    ev = lambda t, a, s=8: {"t": t, "a": a, "p": 0, "c": 1, "d": 0, "w": False, "s": s, "n": 8}  # noqa: E731
    events = [ev(1_000, "Q"), ev(2_000, "S"), ev(10_000, "W"), ev(20_000, "R"), ev(25_000, "G"), ev(30_000, "D"),
              ev(1_030_000, "C")]
    _, s = _read_sim(events, [{"name": "rt-1", "numjobs": 1}])
    (th,) = s.threads.values()
    assert (th.pid, th.comm, th.cpus) == (1000, "rt-1", {1})      # a job name with "-digits" keeps its pid apart
    assert th.tag_wait_us == pytest.approx([24]) and th.sched_us == pytest.approx([5])
    assert th.driver_us == pytest.approx([1_000]) and th.wake_to_run_us == pytest.approx([10])
    assert (th.woken_got_tag, th.woken_slept_again) == (1, 0)
    assert th.tag_wait_switch_in_to_next_us == pytest.approx([5])          # R at 20 us, its G at 25 us
    assert blktrace.process_names([{"name": "a b", "numjobs": 2}, {"name": "x" * 20, "numjobs": 1}]) == \
        ["a_b", "a_b", "x" * 15]


def _read_text(text: str) -> blktrace.Summary:
    """A trace's text as read() takes it from a run's blktrace.txt.gz."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "blktrace.txt.gz"
        f.write_bytes(gzip.compress(text.encode()))
        return blktrace.read(f)


def _read_sim(events, jobs):
    text = "\n".join(blktrace.sim_lines(events, blktrace.process_names(jobs), False))
    return text, _read_text(text)


def test_an_io_wq_workers_issue_reads_as_the_kernels_iou_wrk_thread():
    """A bio of an io_uring job whose NOWAIT attempt found no request (Q at 1 us, E: the tracer's C with -EAGAIN)
    and its io-wq worker 3 issuing it again (Q at 40 us, asleep, woken, G at 90 us; D at 95 us, C at 1,095 us):
    the worker is its own thread, iou-wrk-1000 with tid 100003, whose tag wait is 50 us; the job's own thread
    waited for none. Negative control: the same events without the worker's number are the job's own thread's,
    whose wait counts from its second Q."""
    ev = lambda t, a, k=0: {"t": t, "a": a, "p": 0, "k": k, "c": 0, "d": 0, "w": True, "s": 8, "n": 128}  # noqa
    events = [ev(1_000, "Q"), ev(1_000, "E"), ev(40_000, "Q", 3), ev(41_000, "S", 3), ev(80_000, "W", 3),
              ev(85_000, "R", 3), ev(90_000, "G", 3), ev(95_000, "D"), ev(1_095_000, "C")]
    text, s = _read_sim(events, [{"name": "t", "numjobs": 1}])
    assert "C   W 8 + 128 [65525]" in text and "iou-wrk-1000-100003" in text
    (th,) = s.threads.values()
    assert (th.pid, th.comm) == (100003, "iou-wrk-1000")
    assert th.tag_wait_us == pytest.approx([50]) and th.driver_us == pytest.approx([1_000])
    assert (th.woken_got_tag, th.woken_slept_again) == (1, 0)
    _, own = _read_sim([{**e, "k": 0} for e in events], [{"name": "t", "numjobs": 1}])
    (th,) = own.threads.values()
    assert (th.pid, th.comm, th.tag_wait_us) == (1000, "t", pytest.approx([50]))


def test_a_request_trace_is_asked_for_where_one_can_be_kept(tmp_path):
    spec = write(tmp_path, _SPEC, "traced.toml")
    # the kernel backend keeps none: refused in one line, before any device is touched
    r = CliRunner().invoke(main, ["run", str(spec), "--backend", "kernel", "--device", "/dev/null", "--trace",
                                  "--out", str(tmp_path / "k")])
    assert r.exit_code == 2 and "--trace" in r.output and "not with --backend kernel" in r.output, r.output
    assert not (tmp_path / "k").exists()
    # the spec's own key: a boolean
    bad = write(tmp_path, 'request_trace = "yes"\n' + _SPEC, "bad.toml")
    r = CliRunner().invoke(main, ["run", str(bad), "--out", str(tmp_path / "b"), "--no-report"])
    assert r.exit_code == 2 and "request_trace" in r.output and r.output.count("\n") == 1, r.output
    keyed = write(tmp_path, "request_trace = true\n" + _SPEC, "keyed.toml")
    r = CliRunner().invoke(main, ["run", str(keyed), "--backend", "kernel", "--device", "/dev/null",
                                  "--out", str(tmp_path / "k2")])
    assert r.exit_code == 2 and "keyed.toml: request_trace: the kernel backend keeps no" in r.output, r.output
    assert not (tmp_path / "k2").exists()


# BFQ's messages as the lab's 6.12 kernel logged them (lines from a traced run of
# experiments/validation/bfq-writers-apart.toml, three queues): queue 262 goes busy, is put in service with a
# budget, is preempted (reason 4) with 2 requests in the driver; 274 is dispatched from twice while raised as soft
# real-time (coefficient 3000); a shared queue's allocation is over its limit of 0 and gets depth 1, another
# allocation gets 192 while no raised queue is busy.
_BFQ_KERNEL = """\
# tracer: blk
     fio-262 [000] d..1.  9.000001: 253,0   1,0  m   N bfq262S add to busy
     fio-262 [000] d..1.  9.000002: 253,0   1,0  m   N bfq262S set_in_service_queue, cur-budget = 8672
     fio-262 [000] d..1.  9.000003: 253,0   1,0  m   N bfq262S expire (4, slow 0, num_disp 2, short_ttime 0)
     fio-274 [001] d..1.  9.000004: 253,0   1,0  m   N bfq274S raising period dur 0/300 msec, old coeff 3000, w 120000(40)
     fio-274 [001] d..1.  9.000005: 253,0   1,0  m   N bfq274S raising period dur 1/300 msec, old coeff 3000, w 120000(40)
     fio-411 [001] d..1.  9.000006: 253,0   1,0  m   N bfqSHARED-S too many requests: allocated 2 limit 0 level 0
     fio-411 [001] d..1.  9.000007: 253,0   1,0  m   N bfq [bfq_limit_depth] wr_busy 1 sync 1 depth 1
     fio-262 [000] d..1.  9.000008: 253,0   1,0  m   N bfq [bfq_limit_depth] wr_busy 0 sync 1 depth 192
     fio-262 [000] d..1.  9.000009: 253,0   1,0  m   N bfq262S put_queue: 00000000bb5f32be 6
     fio-262 [000] d..1.  9.000010: 253,0    Q  WS 12612096 + 128 [fio]
"""


def _counts_of(tmp_path, text):
    f = tmp_path / "blktrace.txt.gz"
    f.write_bytes(gzip.compress(text.encode()))
    return blktrace.bfq_counts(f)


def test_bfqs_messages_are_counted_per_queue(tmp_path):
    c = _counts_of(tmp_path, _BFQ_KERNEL)
    assert set(c.queues) == {"262S", "274S"}         # a queue named only in put_queue / too many requests: none
    q = c.queues["262S"]
    assert (q.busy, q.in_service, q.expired) == (1, 1, [0, 0, 0, 0, 1])
    assert c.queues["274S"].raised == {3000: 2}
    assert (c.allocations, c.with_raised_busy, c.depths) == (2, 1, {1: 1, 192: 1})
    assert (c.over_limit, c.limits) == (1, {0: 1})
    rows = blktrace.bfq_table(c)
    assert rows[2].startswith("| 262S | 1 | 1 | 0 | 0 | 0 | 0 | 1 | 0 / 0 |")
    assert "allocations: 2, 50% while a raised queue was busy" in rows[-1]
    # negative controls: a trace of requests only has no BFQ counts; a message that is not BFQ's is not one
    assert not _counts_of(tmp_path, _TRACE.replace("bfq100S insert_request", "mq-deadline insert")).messages
    assert not _counts_of(tmp_path, "# tracer: blk\n  fio-1 [000] d..1. 1.0: 253,0  1,0  m   N kyber x\n").messages


def test_the_simulators_notes_read_as_bfqs_messages(tmp_path):
    """The simulator's notes (SimResult.sched_notes) written by sim_lines among the requests' lines: bfq_counts
    gives what the same kernel messages give (the worked example above, as notes), and read() still sees the
    request alone."""
    note = lambda t, k, p=0, a=0, b=0, c=0, s=False: {"t": t, "d": 0, "p": p, "s": s, "k": k, "a": a, "b": b,  # noqa: E731
                                                      "c": c}
    notes = [note(1_000, "B"), note(2_000, "S", a=8672), note(3_000, "E", a=4, b=2),
             note(4_000, "R", p=1, a=3000), note(5_000, "R", p=1, a=3000),
             note(6_000, "O", p=2, a=2, b=0, s=True), note(7_000, "L", p=None, a=1, b=1, c=1),
             note(8_000, "L", p=None, a=0, b=1, c=192), note(9_000, "I")]
    ev = lambda t, a: {"t": t, "a": a, "p": 0, "c": 0, "d": 0, "w": True, "s": 64, "n": 128}  # noqa: E731
    events = [ev(1_000, "Q"), ev(3_000, "G"), ev(7_000, "D"), ev(50_000, "C")]
    names = blktrace.process_names([{"name": "w", "numjobs": 3}])
    text = "\n".join(blktrace.sim_lines(events, names, False, notes))
    assert text.count(" m   N bfq") == len(notes)
    c = _counts_of(tmp_path, text)
    assert set(c.queues) == {"1000S", "1001S"}
    assert (c.queues["1000S"].busy, c.queues["1000S"].in_service, c.queues["1000S"].expired) == \
        (1, 1, [0, 0, 0, 0, 1])
    assert c.queues["1001S"].raised == {3000: 2}
    assert (c.allocations, c.with_raised_busy, c.depths, c.over_limit, c.limits) == (2, 1, {1: 1, 192: 1}, 1, {0: 1})
    (th,) = blktrace.read(tmp_path / "blktrace.txt.gz").threads.values()
    assert th.tag_wait_us == pytest.approx([2]) and th.sched_us == pytest.approx([4])     # us, between the notes


@pytest.mark.skipif(not native.available(), reason="native simulator not built")
def test_a_traced_bfq_run_shows_its_queues_in_the_summary(tmp_path):
    """The same two readers under BFQ, the second started 200 ms later (past stable merging's 180 ms: a queue of
    its own): the run's trace carries BFQ's notes and trace-summary counts both queues; under none there are no
    notes (negative control)."""
    spec = _SPEC.replace('duration = "50ms"', 'duration = "250ms"') + 'startdelay = "200ms"\n'
    for sched in ("bfq", "none"):
        f = write(tmp_path, spec.replace('name = "traced"', f'name = "traced"\nscheduler = {{ name = "{sched}" }}'),
                  f"{sched}.toml")
        r = CliRunner().invoke(main, ["run", str(f), "--out", str(tmp_path / sched), "--no-report", "--trace"])
        assert r.exit_code == 0, r.output
    out = CliRunner().invoke(main, ["trace-summary", str(tmp_path / "bfq")])
    assert out.exit_code == 0 and "| BFQ queue |" in out.output and "| 1000S |" in out.output \
        and "| 1001S |" in out.output and "allocations:" in out.output, out.output
    out = CliRunner().invoke(main, ["trace-summary", str(tmp_path / "none")])
    assert out.exit_code == 0 and "BFQ queue" not in out.output
