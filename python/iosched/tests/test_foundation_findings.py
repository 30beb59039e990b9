"""The shapes issue 2 says must emerge from the model under `none`, without further fitting."""

import pytest

from iosched.papers import foundation as f


pytestmark = pytest.mark.usefixtures("real_presets")


def row(label):
    return next(r for r in f.ROWS if r.label == label)


def test_a_qd1_reader_behind_256_writers_waits_milliseconds():
    result = f.run(row("R1+W256"))
    assert f.metric(result, "r", "read_p99_us") > 5_000  # paper: 15,218 us
    assert f.metric(result, "r", "read_kiops") < 2.0  # paper: 0.3 KIOPS (17.0 alone)


def test_reads_collapse_when_256_readers_meet_256_writers():
    alone = f.run(row("F6 none QD256"))
    mixed = f.run(row("R256+W256"))
    # paper: 364.3 -> 83.2 KIOPS; both directions' P99 ~15 ms
    assert f.metric(mixed, "r", "read_kiops") < 0.4 * f.metric(alone, "r", "read_kiops")
    assert f.metric(mixed, "r", "read_p99_us") > 5_000


def test_eight_ssds_make_ten_cores_the_bottleneck():
    result = f.run(row("F1: 10 apps, 8 SSDs"))
    assert f.cores_busy(result) > 9.9  # all cores busy (O-3)
    assert f.metric(result, "t", "read_kiops") == pytest.approx(3420, rel=0.15)  # paper ~3.4 MIOPS


def test_none_p99_grows_with_queue_depth_once_the_core_saturates():
    p99 = {r.label: f.metric(f.run(r), "r", "read_p99_us") for r in f.ROWS if r.label.startswith("F6")}
    assert p99["F6 none QD1"] == pytest.approx(78, rel=0.1)
    assert p99["F6 none QD256"] == pytest.approx(807, rel=0.25)  # paper: none 807 us
    ordered = [p99[f"F6 none QD{qd}"] for qd in (1, 8, 32, 64, 128, 256)]
    assert ordered == sorted(ordered)
