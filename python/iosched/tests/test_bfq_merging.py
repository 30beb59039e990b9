"""BFQ's stable merging (Linux 5.13+) through the whole simulator: fio's numjobs clones start I/O together and share
one BFQ queue; a job started 250 ms later keeps its own; before 5.13 nothing merges."""

import pytest

from iosched import native
from iosched.simconfig import run_config
from iosched.spec import expand_runs, experiment_from_data

from .conftest import native_or_skip

pytestmark = pytest.mark.usefixtures("real_presets")


def merged_processes(kernel: str, reader_delay: str) -> float:
    """The simulated BFQ's count of processes that joined another's queue, at the end of the run."""
    native_or_skip()
    spec = {"name": "merging", "duration": "100ms", "ramp": "0s", "seed": 1, "sample_interval": "50ms",
            "host": {"preset": "xeon-silver-4210r-10c", "kernel": kernel},
            "devices": [{"preset": "samsung-980pro-1tb"}], "scheduler": {"name": "bfq"},
            "job": [{"name": "w", "rw": "randwrite", "bs": "64k", "iodepth": 8, "numjobs": 4},
                    {"name": "r", "rw": "randread", "bs": "4k", "iodepth": 1, "startdelay": reader_delay}]}
    result = native.simulate(run_config(expand_runs(experiment_from_data("merging", spec))[0]))
    samples = [x for x in result["timeseries"]
               if x["source"] == "scheduler" and x["metric"] == "stably_merged_processes"]
    assert samples, "BFQ reports stably_merged_processes"
    return samples[-1]["value"]


def test_clones_started_together_share_a_queue_and_a_later_reader_keeps_its_own():
    # 6.3: writer 1's queue is the head; writers 2-4 join it; the reader, 250 ms later (> 180 ms), does not.
    assert merged_processes("6.3", "250ms") == 3
    # Started with them, the reader joins too.
    assert merged_processes("6.3", "0s") == 4


def test_nothing_merges_before_5_13():
    assert merged_processes("5.12", "0s") == 0
    assert merged_processes("5.13", "0s") == 4


def _seed000_merged(fig: str, n_background: int, duration_ms: int, lapp_delay: str | None = None) -> list[float]:
    """Each drive's count of processes that joined another's BFQ queue at the end of seed 000's `fig` spec as
    `iosched reproduce` runs it, shortened to `duration_ms` without a ramp; `lapp_delay` replaces the L-app's
    start delay."""
    from iosched.papers.seed000 import INTERFERENCE

    native_or_skip()
    series = next(s for s in INTERFERENCE.series if s.name == fig.replace("fig-", "fig"))

    def job(j: dict) -> dict:
        j = {**j, "runtime": f"{duration_ms}ms"}
        if j["name"] == "l" and lapp_delay is not None:
            j["startdelay"] = lapp_delay
        return j

    spec = {**series.spec, "duration": f"{duration_ms}ms", "ramp": "0s", "sample_interval": "50ms",
            "sweep": {"job.t.numjobs": [n_background], "scheduler.name": ["bfq"]},
            "job": [job(j) for j in series.spec["job"]]}
    result = native.simulate(run_config(expand_runs(experiment_from_data(fig, spec))[0]))
    last = max(x["t_ns"] for x in result["timeseries"])
    return [x["value"] for x in result["timeseries"]
            if x["metric"] == "stably_merged_processes" and x["t_ns"] == last]


def test_every_app_of_seed000_fig11b_shares_one_bfq_queue():
    """In Fig. 11b the artifact's L-app ended in the same second as its background apps (fio_timestamp; every BFQ
    run from N = 2), so it started with them and BFQ merges it with them, as Figs. 11b and 12a show (the L-app waits
    among the readers' sleepers; the foreground gets an equal split). Fig. 11b's spec as `iosched reproduce` runs it,
    with 2 background readers for 100 ms: readers 2 and the L-app join reader 1's queue on every drive, 2 merged
    processes each.
    Negative control: the L-app started 250 ms after them keeps a queue of its own, 1 each."""
    assert _seed000_merged("fig-11b", 2, 100) == [2.0] * 8
    assert _seed000_merged("fig-11b", 2, 100, lapp_delay="250ms") == [1.0] * 8


def test_seed000_fig11d_l_app_starts_late_with_a_queue_of_its_own():
    """In Fig. 11d the artifact's L-app ended ~1 s after its background writers (0.8 s on average over its 24 runs,
    fio_timestamp), so it began its I/O that much later, past BFQ's 180 ms merging window. Fig. 11d's spec as
    `iosched reproduce` runs it (the L-app 1 s late), 2 writers for 1.2 s: writer 2 joins writer 1's queue on every
    drive and the L-app does not, 1 merged process each. Negative control: the L-app with them joins too, 2 each."""
    assert _seed000_merged("fig-11d", 2, 1200) == [1.0] * 8
    assert _seed000_merged("fig-11d", 2, 1200, lapp_delay="0s") == [2.0] * 8
