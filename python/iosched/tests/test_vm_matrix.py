"""`iosched validate --matrix FILE --backend vm` for real: one workload of the shipped matrix (RT vs BE) under none
and mq-deadline, in the lab and in the simulator (~1-2 min under TCG).  Skipped without the lab;
IOSCHED_REQUIRE_VM=1 turns the skip into a failure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .test_vm_real import _vm_or_skip, cli  # noqa: F401  (the module-wide skip, or failure under IOSCHED_REQUIRE_VM)

VALIDATION = Path(__file__).resolve().parents[3] / "experiments" / "validation"


def test_one_matrix_row_in_the_lab_and_the_simulator(tmp_path, monkeypatch):
    monkeypatch.setenv("IOSCHED_PRESETS", str(VALIDATION.parents[1] / "presets"))     # the lab's host preset
    shutil.copy(VALIDATION / "rt-vs-be.toml", tmp_path / "rt-vs-be.toml")
    # The matrix ramps 500 ms; its rt-vs-be workload takes none, as in the shipped matrix.toml (which says why).
    (tmp_path / "m.toml").write_text(
        'device = "nullb:irqmode=2,completion_nsec=4ms,hw_queue_depth=4"\nhost = "lab-tcg-2vcpu"\n'
        'schedulers = ["none", "mq-deadline"]\nduration = "2s"\nramp = "500ms"\n'
        '[[workload]]\nname = "rt-vs-be"\nspec = "rt-vs-be.toml"\njob = "rt"\nrank_by = "share"\nramp = "0s"\n')
    out = tmp_path / "out"
    res = cli("validate", "--matrix", tmp_path / "m.toml", "--backend", "vm", "--out", out)
    assert "| rt-vs-be (rt share) | none |" in res.output and (out / "matrix.md").is_file()
    rows = {r["scheduler"]: r for r in json.loads((out / "matrix.json").read_text())}
    assert set(rows) == {"none", "mq-deadline"}
    for r in rows.values():
        # 4 tags of 4 ms, both jobs measured over the same 2 s: at most 1,000 IOPS on both sides.
        assert 0 < r["kernel_iops"] <= 1_050 and 0 < r["sim_iops"] <= 1_050, r
    # The direction on both backends: mq-deadline serves the real-time reader first (the best-effort one waits
    # while any real-time request is queued or in flight), none by the depths (6 : 2).
    assert rows["mq-deadline"]["kernel_metric"] > 0.9 > rows["none"]["kernel_metric"]
    assert rows["mq-deadline"]["sim_metric"] > 0.9 > rows["none"]["sim_metric"]
    assert rows["none"]["kernel_rank"] == rows["none"]["sim_rank"] == 2
