"""The lab's devices: ``--device KIND[:KEY=VALUE,...]``, one per device of the spec, mapped in order.

KIND is ``nullb`` (the kernel's null_blk, made in the guest through configfs), ``nvme`` (QEMU's emulated NVMe
controller with one namespace over a sparse raw image) or ``virtio`` (virtio-blk over a sparse raw image).  Every
key is the name of what it sets — a null_blk configfs attribute, a QEMU property or a guest driver parameter — and
DEFAULTS below are those of the kernel and QEMU (only the images' size is ours: 1 GiB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import SpecError, show
from ...units import parse_size, parse_time

FLAG = "--device"


def _int(lo: int, hi: int | None = None) -> Callable[[str, str], int]:
    def conv(key: str, text: str) -> int:
        if not re.fullmatch(r"\d+", text):
            raise ValueError(f"expected an integer, got {show(text)}")
        v = int(text)
        if v < lo or (hi is not None and v > hi):
            raise ValueError(f"expected {lo}..{hi}, got {v}" if hi is not None else f"expected >= {lo}, got {v}")
        return v
    return conv


def _choice(*names: str, aliases: dict[str, str] | None = None) -> Callable[[str, str], str]:
    def conv(key: str, text: str) -> str:
        text = (aliases or {}).get(text, text)
        if text not in names:
            raise ValueError(f"expected one of {', '.join(names)}, got {show(text)}")
        return text
    return conv


def _pow2(lo: int, hi: int) -> Callable[[str, str], int]:
    def conv(key: str, text: str) -> int:
        v = parse_size(text, file=FLAG, key=key)
        if v < lo or v > hi or v & (v - 1):
            raise ValueError(f"expected a power of two from {lo} to {hi} bytes, got {text}")
        return v
    return conv


def _bytes_mib(key: str, text: str) -> int:
    """null_blk sizes are MiB in configfs: a size with units (4G, 512M), a whole number of MiB."""
    v = parse_size(text, file=FLAG, key=key)
    if v <= 0 or v % (1 << 20):
        raise ValueError(f"expected a whole number of MiB (e.g. 4G, 512M), got {text}")
    return v


def _bytes(key: str, text: str) -> int:
    v = parse_size(text, file=FLAG, key=key)
    if v <= 0 or v % 4096:
        raise ValueError(f"expected a size that is a multiple of 4 KiB (e.g. 1G), got {text}")
    return v


def _nsec(key: str, text: str) -> int:
    if re.fullmatch(r"\d+", text):
        return int(text)
    return parse_time(text, default_unit="ns", file=FLAG, key=key)


@dataclass(frozen=True)
class Key:
    conv: Callable[[str, str], Any]
    where: str                     # what it sets, for the docs and errors
    default: Any = None            # None: the kernel's / QEMU's default applies (not written)
    shown: str = ""                # that default, as the docs state it


NULLB_IRQMODES = {"none": "0", "softirq": "1", "timer": "2"}
# null_blk's configfs attributes (drivers/block/null_blk/main.c, 6.12).  queue_mode (bio-based null_blk has no
# scheduler), no_sched and the zoned ones are left out: the lab is about the schedulers.
NULLB_KEYS: dict[str, Key] = {
    "size": Key(_bytes_mib, "configfs size (MiB)", 250 << 30),
    "blocksize": Key(_pow2(512, 4096), "configfs blocksize", 512),
    "completion_nsec": Key(_nsec, "configfs completion_nsec (irqmode=2's completion delay)", shown="10000"),
    "irqmode": Key(_choice("0", "1", "2", aliases=NULLB_IRQMODES), "configfs irqmode (0 none, 1 softirq, 2 timer)",
                   shown="1"),
    "hw_queue_depth": Key(_int(1), "configfs hw_queue_depth", shown="64"),
    "submit_queues": Key(_int(1), "configfs submit_queues", shown="1"),
    "poll_queues": Key(_int(0), "configfs poll_queues", shown="1"),
    "memory_backed": Key(_choice("0", "1"), "configfs memory_backed", shown="0"),
    "cache_size": Key(_int(0), "configfs cache_size (MiB)", shown="0"),
    "mbps": Key(_int(0), "configfs mbps (bandwidth cap, MiB/s; 0 none)", shown="0"),
    "blocking": Key(_choice("0", "1"), "configfs blocking", shown="0"),
    "shared_tags": Key(_choice("0", "1"), "configfs shared_tags", shown="0"),
    "max_sectors": Key(_int(1), "configfs max_sectors", shown="0 (the block layer's)"),
    "fua": Key(_choice("0", "1"), "configfs fua", shown="1"),
    "discard": Key(_choice("0", "1"), "configfs discard", shown="0"),
}
CACHE_MODES = ("none", "writeback", "writethrough", "directsync", "unsafe")
IMAGE_KEYS: dict[str, Key] = {
    "size": Key(_bytes, "the image's size (sparse file)", 1 << 30),
    "logical_block_size": Key(_pow2(512, 4096), "QEMU logical_block_size (and physical_block_size)", 512),
    "cache": Key(_choice(*CACHE_MODES), "QEMU -drive cache= (the host side of the image)", "writeback"),
    # A device that queues: QEMU holds the requests above the rate in its own FIFO, as an SSD holds them in its
    # queue (what K2 and Kyber are built against; null_blk's timer mode has no queue, and its mbps cap raised a
    # WARN in 6.12's bandwidth timer in our runs with two vCPUs submitting).
    "iops_total": Key(_int(0), "QEMU -drive throttling.iops-total (requests/s served; the rest wait in QEMU, in "
                      "order; 0 none)", shown="0"),
}
NVME_KEYS: dict[str, Key] = dict(IMAGE_KEYS, **{
    "max_ioqpairs": Key(_int(1, 65535), "QEMU nvme max_ioqpairs (I/O queue pairs offered)", shown="64"),
    # (QEMU 7.2 has no property for the queues' entries: its NVMe offers 2048 per queue),
    "io_queue_depth": Key(_int(2, 4095), "guest nvme driver's io_queue_depth (one value for all nvme devices)",
                          shown="1024"),
})
VIRTIO_KEYS: dict[str, Key] = dict(IMAGE_KEYS, **{
    "num_queues": Key(_int(1, 1024), "QEMU virtio-blk num-queues", shown="one per vCPU"),
    "queue_size": Key(_int(2, 1024), "QEMU virtio-blk queue-size", shown="256"),
})
KINDS: dict[str, dict[str, Key]] = {"nullb": NULLB_KEYS, "nvme": NVME_KEYS, "virtio": VIRTIO_KEYS}
SYNTAX = "KIND[:KEY=VALUE,...] with KIND nullb, nvme or virtio (e.g. nullb:irqmode=2,completion_nsec=1000000)"


@dataclass
class LabDevice:
    index: int                      # its place among --device (the spec's device index)
    kind: str
    given: str                      # as the user wrote it
    params: dict[str, Any] = field(default_factory=dict)     # the keys given, converted

    @property
    def serial(self) -> str:
        return f"iosched-d{self.index}"

    def value(self, key: str) -> Any:
        v = self.params.get(key)
        return KINDS[self.kind][key].default if v is None else v

    @property
    def capacity_bytes(self) -> int:
        return int(self.value("size"))

    @property
    def logical_block_bytes(self) -> int:
        return int(self.value("blocksize" if self.kind == "nullb" else "logical_block_size"))

    @property
    def canonical(self) -> str:
        """Kind and keys in a fixed order, values converted: what the run id is made of."""
        keys = ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))
        return f"{self.kind}:{keys}" if keys else self.kind

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "given": self.given, "params": dict(self.params),
                "capacity_bytes": self.capacity_bytes, "logical_block_bytes": self.logical_block_bytes}


def parse_device(text: str, index: int) -> LabDevice:
    kind, _, rest = text.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        hint = " (the VM backend makes its devices in the guest; a host path is for --backend kernel)" \
            if kind.startswith("/") else ""
        raise SpecError(FLAG, text, f"expected {SYNTAX}{hint}")
    keys = KINDS[kind]
    dev = LabDevice(index, kind, text)
    for item in filter(None, (s.strip() for s in rest.split(","))) if rest.strip() else []:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise SpecError(FLAG, text, f"{show(item)}: expected KEY=VALUE")
        if key not in keys:
            raise SpecError(FLAG, text, f"{kind} has no key {show(key)} (it has: {', '.join(keys)})")
        if key in dev.params:
            raise SpecError(FLAG, text, f"{key} is given twice")
        try:
            dev.params[key] = keys[key].conv(key, value)
        except ValueError as e:
            raise SpecError(FLAG, text, f"{key}: {e}") from None
        except SpecError as e:
            raise SpecError(FLAG, text, f"{key}: {e.message}") from None
    return dev


def parse_devices(given: list[str]) -> list[LabDevice]:
    devs = [parse_device(t, i) for i, t in enumerate(given)]
    depths = {d.params["io_queue_depth"] for d in devs if d.kind == "nvme" and "io_queue_depth" in d.params}
    if len(depths) > 1:
        raise SpecError(FLAG, None, f"io_queue_depth is the guest nvme driver's parameter, one per boot: the nvme "
                        f"devices give {', '.join(str(x) for x in sorted(depths))}")
    return devs


def qemu_args(dev: LabDevice, image: str | None) -> list[str]:
    """The QEMU arguments of one device (none for null_blk: it lives in the guest)."""
    if dev.kind == "nullb":
        return []
    if image is None or "," in image:
        raise ValueError("an image path without commas is needed")
    drive = f"file={image},if=none,id=d{dev.index},format=raw,cache={dev.value('cache')}"
    if dev.params.get("iops_total"):
        drive += f",throttling.iops-total={dev.params['iops_total']}"
    lbs = dev.value("logical_block_size")
    props = [f"serial={dev.serial}", f"drive=d{dev.index}", f"logical_block_size={lbs}", f"physical_block_size={lbs}"]
    if dev.kind == "nvme":
        model = "nvme"
        if "max_ioqpairs" in dev.params:
            props.append(f"max_ioqpairs={dev.params['max_ioqpairs']}")
    else:
        model = "virtio-blk-pci"
        if "num_queues" in dev.params:
            props.append(f"num-queues={dev.params['num_queues']}")
        if "queue_size" in dev.params:
            props.append(f"queue-size={dev.params['queue_size']}")
    return ["-drive", drive, "-device", ",".join([model] + props)]


def nullb_attributes(dev: LabDevice) -> list[tuple[str, str]]:
    """The configfs attributes to write before ``power``, in a fixed order (size in MiB as null_blk keeps it)."""
    out = []
    for key in NULLB_KEYS:
        if key in dev.params:
            v = dev.params[key]
            out.append((key, str(v >> 20) if key == "size" else str(v)))
    if "size" not in dev.params:     # written anyway: the lab's record of the device then matches it
        out.insert(0, ("size", str(NULLB_KEYS["size"].default >> 20)))
    return out


def docs_table() -> str:
    """The device keys as a markdown table (docs/vm-lab.md is checked against it by a test)."""
    lines = ["| kind | key | sets | default |", "|---|---|---|---|"]
    for kind, keys in KINDS.items():
        for k, spec in keys.items():
            d = spec.shown or spec.default
            if k == "size":
                d = f"{spec.default >> 30}G"
            lines.append(f"| {kind} | `{k}` | {spec.where} | {d} |")
    return "\n".join(lines)
