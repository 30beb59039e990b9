"""`iosched calibrate`: measure a block device with the kernel backend (scheduler none), fit a device preset (and,
if asked, this machine's host preset) to it, and write fit.md beside the measurements."""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Callable

from .. import store
from ..errors import SpecError, show
from ..safepath import check_name, inside
from ..backends.kernel.blockdev import BlockDevice
from . import fit as fitting
from .measure import measure_kernel, reuse_measurements
from .plan import max_qd, plan, queue_geometry
from .presetfiles import write_preset


def host_preset_path(device_preset: Path, host: str) -> Path:
    """Where --host NAME goes: presets/hosts/NAME.toml beside a presets/devices/ folder, else next to the device
    preset; NAME is a preset name (it names the file), proven to stay in that folder."""
    check_name(host, file="--host", key=None, what="a host preset name", path_component=True)
    if host.startswith("."):
        raise SpecError("--host", None, f"expected a host preset name not starting with a dot, got {show(host)}")
    if device_preset.parent.name == "devices":
        return inside(device_preset.parent.parent, f"hosts/{host}.toml")
    return inside(device_preset.parent, f"{host}.toml")


def calibrate(device_path: str, out: Path, *, host: str | None, duration_s: float, ramp_s: float, work: Path,
              reuse: bool, echo: Callable[[str], None]) -> None:
    """Measure ``device_path`` (or, with ``reuse``, take the measurements already in ``work``), fit, and write the
    device preset ``out`` (and the host preset ``host``); raises KernelError or state.Interrupted from the kernel
    backend."""
    dev = BlockDevice.open(device_path, flag="/dev/X")
    geometry = queue_geometry(dev.sysfs)
    steps = plan(max_qd(geometry))
    if reuse:
        measured = reuse_measurements(work, steps)
    else:
        measured = measure_kernel(device_path, work, duration_s, ramp_s, steps, echo=echo)
    when = datetime.date.today().isoformat()
    echo("fitting the host's per-I/O CPU costs and the device model (simulating each measurement with candidate "
         "parameters)")
    base_host, host_prov = fitting.host_preset_params()
    host_params = fitting.fit_host(measured, base_host, fitting.initial_device(
        measured, dev.capacity_bytes, dev.logical_block_bytes, geometry), steps)
    host_prov = fitting.host_provenance(host_prov, measured, device_path, when)
    if host:
        host_path = host_preset_path(out, host)
        write_preset(host_path, "host", f"this machine ({os.cpu_count()} cores), written by iosched calibrate",
                     {}, host_params, host_prov)
        echo(f"wrote host preset {host_path}")
    params, report = fitting.fit(measured, host_params, dev.capacity_bytes, dev.logical_block_bytes, geometry, steps,
                                 echo=echo)
    peak_qd = params.pop("_peak_qd")
    prov = fitting.provenance(measured, peak_qd, device_path, when, geometry)
    r1 = measured["cal-randread-qd1"]["r"]
    figures = {
        "QD1 4 KiB randread": f"mean {r1['read_mean_us']:.1f} us, P99 {r1['read_p99_us']:.1f} us (measured)",
        "peak 4 KiB randread": f"{measured[f'cal-randread-qd{peak_qd}']['r']['read_kiops']:.1f} KIOPS at QD {peak_qd}",
        f"QD{max_qd(geometry)} 4 KiB randwrite": f"{measured['cal-randwrite-qdmax']['w']['write_kiops']:.1f} "
                                                "KIOPS (measured)",
        "calibration host": (f"{host} (fitted by the same calibration)" if host else
                             "this machine's per-I/O CPU costs, fitted but not written (no --host)"),
    }
    write_preset(out, "device", f"calibrated from {device_path} on {os.uname().nodename} ({when})", figures, params,
                 prov)
    lines = ["| measurement | kernel | sim (calibrated) | sim/kernel |", "|---|---|---|---|"]
    for k, (kv, sv) in report.items():
        lines.append(f"| {k} | {kv:,.2f} | {sv:,.2f} | {sv / kv if kv else float('nan'):.2f} |")
    table = "\n".join(lines)
    store.write_text(work, "fit.md", table + "\n")
    echo(table)
    echo(f"wrote device preset {out} (kernel runs and fit.md in {work})")
