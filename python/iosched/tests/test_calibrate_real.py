"""`iosched calibrate` and `iosched validate` for real, as root, on a loop device this module creates (and removes):
a tiny plan (fractions of a second per step), then the written preset loads, its fitted parameters carry
provenance naming the measurements, and validate prints a row per scheduler.

Skips without root, fio or loop devices; IOSCHED_REQUIRE_KERNEL=1 turns the skip into a failure.
"""

import json
import os

import pytest

from iosched.devcal import plan
from iosched.presets import load_preset, load_preset_file

# The kernel tests' module-wide gate (skip without root/fio/loop devices, fail under IOSCHED_REQUIRE_KERNEL).
from .test_kernel_real import Loop, _kernel_or_skip, cli  # noqa: F401


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    d = tmp_path_factory.mktemp("calib")
    old = os.environ.get("IOSCHED_STATE_DIR")
    os.environ["IOSCHED_STATE_DIR"] = str(d / "state")
    (d / "state").mkdir()
    lp = Loop(d, "256M")
    yield lp, d
    lp.remove()
    if old is None:
        os.environ.pop("IOSCHED_STATE_DIR", None)
    else:
        os.environ["IOSCHED_STATE_DIR"] = old


def test_calibrate_then_validate(loop):
    lp, d = loop
    out = d / "presets" / "devices" / "loop-test.toml"
    res = cli("calibrate", lp.path, "--out", out, "--host", "loop-host", "--duration", "0.3", "--ramp", "0.1")
    geometry = plan.queue_geometry(lp.dev.sysfs)
    steps = len(plan.plan(plan.max_qd(geometry)))
    assert f"[{steps}/{steps}]" in res.output and "wrote device preset" in res.output
    preset = load_preset_file(out, "device")
    assert preset.params["capacity_bytes"] == lp.dev.capacity_bytes
    assert {k: preset.params[k] for k in geometry} == geometry      # the loop driver's queues and tags
    for fitted in ("read_ns_by_page_type", "command_ns", "write_command_ns", "write_ack_ns", "program_ns",
                   "program_unit_bytes", "link_bytes_per_s"):
        assert preset.provenance[fitted].startswith("fit: "), fitted
    host = load_preset_file(d / "presets" / "hosts" / "loop-host.toml", "host")
    assert host.params["cores"] == os.cpu_count()
    assert host.provenance["libaio"].startswith("fit: ")
    # The file systems' paths keep the base's shares of the engine path: scaled by libaio's fitted factor, as
    # io_uring's costs are (copied unscaled, a 1 us path would carry the Xeon's 0.77 us for ext4).
    base = load_preset("host", "xeon-silver-4210r-10c").params
    factor = host.params["io_uring"]["submit_ns"] / base["io_uring"]["submit_ns"]
    for fs, path in base["filesystems"].items():
        for key, ns in path.items():
            assert host.params["filesystems"][fs][key] == pytest.approx(ns * factor, rel=0.02, abs=2), (fs, key)
    assert "scaled by the factor fitted for libaio" in host.provenance["filesystems"]

    spec = d / "v.toml"
    spec.write_text('name = "v"\nduration = "0.3s"\nramp = "0.1s"\nscheduler = { name = "none" }\n'
                    '[[job]]\nname = "lapp"\nrw = "randread"\nbs = "4k"\niodepth = 1\n'
                    '[[job]]\nname = "w"\nrw = "randwrite"\nbs = "4k"\niodepth = 16\n'
                    '[sweep]\n"scheduler.name" = ["none", "mq-deadline"]\n')
    res = cli("validate", spec, "--device", lp.path, "--preset", out, "--host", d / "presets" / "hosts" / "loop-host.toml",
              "--duration", "0.3s", "--out", d / "val")
    rows = json.loads((d / "val" / "validation.json").read_text())
    drift = json.loads((d / "val" / "drift.json").read_text())
    assert [(r["when"], r["step"]) for r in drift] == [(w, s.name) for w in ("before", "after")
                                                       for s in plan.drift_steps(geometry)]
    assert all(r["kernel_kiops"] > 0 and r["sim_kiops"] > 0 for r in drift)
    assert "Device drift" in (d / "val" / "validation.md").read_text()
    assert [r["scheduler"] for r in rows] == ["mq-deadline", "none"]
    assert all(r["kernel_iops"] > 0 and r["sim_iops"] > 0 and r["iops_ratio"] > 0 for r in rows)
    assert "ranking by lapp's P99" in res.output
    # The kernel's mq-deadline shows its async_depth as a number, the simulator's default reads 0.
    assert "simulator uses the kernel's tunables: mq-deadline: async_depth=" in res.output
    assert "Validation: simulator vs kernel" in (d / "val" / "report.html").read_text()
