"""The validation matrix (iosched.devcal.matrix): its parser, and the table's checks against made-up results that
must pass and fail them (the negative controls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iosched.devcal import matrix as mx
from iosched.errors import SpecError

SHIPPED = Path(__file__).resolve().parents[3] / "experiments" / "validation" / "matrix.toml"


def test_the_shipped_matrix_parses():
    m = mx.load_matrix(SHIPPED)
    assert m.device.startswith("nullb:irqmode=2") and m.host == "lab-tcg-2vcpu"
    assert m.schedulers == ["none", "mq-deadline", "kyber", "bfq"]
    assert [w.name for w in m.workloads] == ["qd1-reader-vs-writers", "bfq-cgroup-weights", "rt-vs-be",
                                             "kyber-read-target", "seq-vs-random"]
    kyber = m.workloads[3]
    assert kyber.sets("kyber") == ["read_lat_nsec=20000000"] and kyber.sets("bfq") == []
    # The workloads ranked by a share are measured without a ramp (matrix.toml says why); the others take the
    # matrix's.
    assert [w.name for w in m.workloads if w.ramp == "0s"] == [w.name for w in m.workloads if w.rank_by == "share"] \
        == ["bfq-cgroup-weights", "rt-vs-be"]
    assert kyber.ramp is None and m.ramp == "1s"
    ramps = {(w.name, e.data["ramp"]) for w, e in mx.experiments(m, simulator=True)}
    assert ("rt-vs-be", "0s") in ramps and ("kyber-read-target", "1s") in ramps


def _write(tmp: Path, text: str) -> Path:
    (tmp / "w.toml").write_text('name = "w"\n[[job]]\nname = "a"\nrw = "randread"\n')
    p = tmp / "m.toml"
    p.write_text(text)
    return p


GOOD = '''device = "nullb:irqmode=2"
host = "lab-tcg-2vcpu"
schedulers = ["none", "bfq"]
[[workload]]
name = "w"
spec = "w.toml"
job = "a"
'''


@pytest.mark.parametrize("change, key, words", [
    (("device = \"nullb:irqmode=2\"", "device = \"/dev/sda\""), "device", "expected a null_blk device"),
    (('schedulers = ["none", "bfq"]', 'schedulers = ["none"]'), "schedulers", "at least two distinct"),
    (('spec = "w.toml"', 'spec = "nope.toml"'), "workload[0].spec", "no such spec file"),
    (('job = "a"', 'job = "a"\nrank_by = "p50"'), "workload[0].rank_by", "expected one of p99, iops, share"),
    (('job = "a"', 'job = "a"\ntunables = { kyber = { read_lat_nsec = 1 } }'), "workload[0].tunables.kyber",
     "not among the matrix's schedulers"),
    (('job = "a"', 'job = "a"\nweight = 1'), "workload[0].weight", "unknown key"),
    (('job = "a"', 'job = "a"\nramp = "soon"'), "workload[0].ramp", "expected a time like 2s"),
    (('host = "lab-tcg-2vcpu"', 'host = "lab-tcg-2vcpu"\nrepeat = 0'), "repeat", "expected an integer >= 1"),
])
def test_bad_matrices_are_one_line_naming_file_and_key(tmp_path, change, key, words):
    assert mx.load_matrix(_write(tmp_path, GOOD)).workloads[0].rank_by == "p99"
    with pytest.raises(SpecError) as e:
        mx.load_matrix(_write(tmp_path, GOOD.replace(*change)))
    assert e.value.file.endswith("m.toml") and e.value.key == key and words in e.value.message


def _values(iops: float, p99: float, metric: float) -> dict[str, float]:
    return {"iops": iops, "p99_us": p99, "metric": metric, "job_iops": iops, "share": 0.5, "repetitions": 1}


KERNEL = {"none": _values(4000, 9000, 9000), "mq-deadline": _values(3900, 4000, 4000),
          "kyber": _values(3950, 3000, 3000), "bfq": _values(3800, 6000, 6000)}
W = mx.Workload("qd1", Path("x.toml"), "reader", "p99")


def _sim(scale_iops=1.0, scale_p99=1.0, **override: float) -> dict[str, dict[str, float]]:
    out = {s: _values(v["iops"] * scale_iops, v["p99_us"] * scale_p99, v["metric"] * scale_p99)
           for s, v in KERNEL.items()}
    for s, p99 in override.items():
        out[s.replace("_", "-")] = _values(KERNEL[s.replace("_", "-")]["iops"], p99, p99)
    return out


def test_results_within_the_targets_pass():
    rows = mx.compare_workload(W, KERNEL, _sim(1.10, 0.80))
    assert all(r["iops_ok"] and r["p99_ok"] and r["ranking_ok"] for r in rows)
    assert mx.summary(rows)["passed"]
    assert [r["kernel_rank"] for r in rows] == [4, 2, 1, 3] == [r["sim_rank"] for r in rows]
    table = mx.format_matrix(rows)
    assert "all targets met" in table and "agrees (6 of 6 pairs" in table


def test_negative_control_iops_off_by_more_than_15_percent_fails():
    rows = mx.compare_workload(W, KERNEL, _sim(1.16))
    assert not any(r["iops_ok"] for r in rows) and not mx.summary(rows)["passed"]
    assert "targets missed" in mx.format_matrix(rows) and "1.16 ✗" in mx.format_matrix(rows)


def test_negative_control_p99_off_by_more_than_30_percent_fails():
    rows = mx.compare_workload(W, KERNEL, _sim(1.0, 1.31))
    assert not any(r["p99_ok"] for r in rows) and not mx.summary(rows)["passed"]
    rows = mx.compare_workload(W, KERNEL, _sim(1.0, 0.69))
    assert not any(r["p99_ok"] for r in rows)


def test_negative_control_a_swapped_ranking_fails():
    # kyber and mq-deadline swapped (the kernel separates them by 25%): P99s within ±30%, the order is not.
    rows = mx.compare_workload(W, KERNEL, _sim(kyber=3800, mq_deadline=3100))
    assert all(r["p99_ok"] for r in rows)
    assert not rows[0]["ranking_ok"] and (rows[0]["rank_pairs_agree"], rows[0]["rank_pairs_counted"]) == (5, 6)
    assert not mx.summary(rows)["passed"] and "DISAGREES" in mx.format_matrix(rows)


def test_pairs_the_kernel_cannot_separate_are_not_ranked():
    kernel = dict(KERNEL, kyber=_values(3950, 3800, 3800))      # 5% from mq-deadline's 4000: a tie
    rows = mx.compare_workload(W, kernel, _sim(kyber=4100))     # the simulator orders them the other way
    assert rows[0]["ranking_ok"] and rows[0]["rank_pairs_counted"] == 5


def test_higher_first_metrics_rank_the_other_way():
    w = mx.Workload("rt", Path("x.toml"), "rt", "share")
    kernel = {"none": _values(4000, 2000, 0.75), "bfq": _values(4000, 2000, 0.99)}
    assert mx.compare_workload(w, kernel, kernel)[1]["kernel_rank"] == 1
    swapped = {"none": _values(4000, 2000, 0.99), "bfq": _values(4000, 2000, 0.75)}
    assert not mx.compare_workload(w, kernel, swapped)[0]["ranking_ok"]


def test_backend_values_sum_jobs_and_take_the_chosen_jobs_p99():
    def row(job, sched, rid, iops, p99):
        return {"experiment": "e", "scheduler": sched, "run_id": rid, "job": job, "read_iops": iops,
                "write_iops": 0, "read_clat_p99_ns": p99, "write_clat_p99_ns": None}
    rows = [row("reader", "none", "1", 100, 5e6), row("writer.0", "none", "1", 900, 9e6),
            row("reader", "none", "2", 300, 7e6), row("writer.0", "none", "2", 700, 9e6)]
    v = mx.backend_values(rows, W, "e")["none"]
    assert (v["iops"], v["job_iops"], v["p99_us"], v["metric"], v["repetitions"]) == (1000, 200, 6000, 6000, 2)
    assert v["share"] == pytest.approx(0.2)
