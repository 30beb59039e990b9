"""The null_blk device preset family: ``nullb[:KEY=VALUE,...]`` names a simulated null_blk exactly as the VM
backend's ``--device`` names the lab's (same keys, same parser: ``backends/vm/devices.py``), so one text gives
both backends the same device.  Everything is derived from null_blk's parameters (Linux 6.12.117,
``drivers/block/null_blk/main.c``), nothing fitted:

- ``hw_queue_depth`` tags per hardware queue, ``submit_queues`` hardware queues (capped at the host's CPUs, as
  null_blk caps them at ``nr_cpu_ids``) -> ``queue_depth``, ``max_hw_queues``;
- ``irqmode`` and ``completion_nsec`` -> ``null_blk`` (the simulator's device kind, ``device/null_blk.rs``): with
  irqmode 2 a request completes ``completion_nsec`` after it reached the driver, with no other limit;
- ``blocksize``, ``size`` -> ``logical_block_bytes``, ``capacity_bytes``;
- ``max_sectors`` (0: the block layer's ``BLK_SAFE_MAX_SECTORS``, 255 sectors) -> ``max_sectors_kb``.

So at queue depth D (D <= hw_queue_depth) and irqmode 2 a device-bound job does D / completion_nsec IOPS: QD 8 at
500 us is 16,000 IOPS.  Keys the simulator does not model are refused when they change the timing (``mbps``,
``cache_size``, ``blocking``) and accepted when they do not (``memory_backed``: its data copy is CPU time on the
submitting CPU, left to the host's per-I/O costs; ``poll_queues``, ``fua``, ``discard``, ``shared_tags`` with one
device).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import SpecError

KIND = "nullb"
KERNEL = "Linux 6.12.117 (Debian linux-source-6.12 6.12.117-1~deb12u1), drivers/block/null_blk/main.c"
BLK_SAFE_MAX_SECTORS = 255          # include/linux/blkdev.h: what blk_validate_limits gives max_hw_sectors = 0
# Keys that change when requests complete and that the simulator's null_blk does not model (their default, 0, is
# what it models).
UNMODELLED = {"mbps": "the bandwidth cap (null_blk's throttling timer)", "cache_size": "the write-back cache",
              "blocking": "BLK_MQ_F_BLOCKING (queue_rq from a work queue)"}
# The SSD model's fields, unused by the null_blk kind but required by DeviceConfig: inert values.
_UNUSED_SSD = {
    "link_bytes_per_s": 1 << 40, "controller_cores": 1, "command_ns": 0, "read_pipeline_ns": 0, "write_ack_ns": 0,
    "write_ack_jitter_ns": 0, "channels": 1, "units_per_channel": 1, "channel_bytes_per_s": 1 << 40,
    "flash_page_bytes": 4096, "read_ns_by_page_type": [0], "read_jitter_ns": 0, "program_unit_bytes": 4096,
    "program_ns": 0, "erase_ns": 0, "block_program_units": 1, "write_buffer_bytes": 4096, "overprovision_bytes": 0,
    "gc_free_units_low": 0, "condition": "fresh", "trimmed_fraction": 0.0,
}


def is_nullb(name: object) -> bool:
    return isinstance(name, str) and (name == KIND or name.startswith(KIND + ":"))


def device_params(text: str, *, file: str | None = None, key: str | None = None) -> dict[str, Any]:
    """The simulator's DeviceConfig (without its name) for ``nullb[:KEY=VALUE,...]``; bad input is a SpecError at
    (file, key) with the parser's words."""
    from .backends.vm.devices import parse_device     # the lab's parser: one syntax for both backends

    try:
        dev = parse_device(text, 0)
    except SpecError as e:
        raise SpecError(file, key, f"{text}: {e.message}") from None
    if dev.kind != KIND:
        raise SpecError(file, key, f"{text}: the simulator's device family is {KIND}:..., not {dev.kind}")
    for k, what in UNMODELLED.items():
        if int(dev.value(k) or 0):
            raise SpecError(file, key, f"{text}: {k}={dev.value(k)} ({what}) is not modelled by the simulator's "
                            f"null_blk; leave it at 0")
    irqmode = int(dev.value("irqmode") or 1)
    completion_ns = int(dev.value("completion_nsec") if dev.value("completion_nsec") is not None else 10_000)
    max_sectors = int(dev.value("max_sectors") or BLK_SAFE_MAX_SECTORS)
    return dict(
        _UNUSED_SSD, interface="nvme", capacity_bytes=dev.capacity_bytes,
        logical_block_bytes=dev.logical_block_bytes, max_hw_queues=int(dev.value("submit_queues") or 1),
        queue_depth=int(dev.value("hw_queue_depth") or 64), max_sectors_kb=max_sectors * 512 // 1024,
        null_blk={"irqmode": irqmode, "completion_ns": completion_ns})


def preset_fields(text: str, *, file: str | None = None, key: str | None = None) -> dict[str, Any]:
    """The fields of a presets.Preset for ``nullb[:...]`` (what presets.load_preset returns for such a name)."""
    params = device_params(text, file=file, key=key)
    nb = params["null_blk"]
    derived = f"derived from null_blk's parameters ({KERNEL}), not fitted"
    prov = {k: "unused by the null_blk device kind (the SSD model's field, inert)" for k in _UNUSED_SSD}
    prov.update({
        "interface": "null_blk is blk-mq; named as the spec's first NVMe device (/dev/nvme0n1), as the VM backend "
                     "maps --device to it",
        "capacity_bytes": f"size; {derived}", "logical_block_bytes": f"blocksize; {derived}",
        "max_hw_queues": f"submit_queues (null_blk caps it at nr_cpu_ids; the simulator at the host's cores); "
                         f"{derived}",
        "queue_depth": f"hw_queue_depth (the tag set's depth per hardware queue); {derived}",
        "max_sectors_kb": f"max_sectors, 0 = BLK_SAFE_MAX_SECTORS (255 sectors, 127 KiB); {derived}",
        "null_blk": f"irqmode and completion_nsec: null_queue_rq -> null_handle_cmd -> nullb_complete_cmd ends the "
                    f"request at once (0), by softirq (1) or by an hrtimer of completion_nsec (2); {derived}",
    })
    depth = params["queue_depth"] * params["max_hw_queues"]
    ceiling = f"{depth / nb['completion_ns'] * 1e9:,.0f} IOPS" if nb["irqmode"] == 2 and nb["completion_ns"] else \
        "CPU-bound (no device time)"
    return dict(kind="device", name=text, description=f"null_blk {text} (simulated; {KERNEL})", seeds=[],
                key_figures={"service": f"irqmode={nb['irqmode']}, {nb['completion_ns']} ns per request, "
                                        f"{depth} in flight at most: {ceiling}"},
                params=params, provenance=prov, path=Path(f"<{KIND}>"))
