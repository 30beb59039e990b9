"""The VM backend: the real Linux schedulers of a pinned Debian kernel, in a QEMU guest, on null_blk and QEMU's
emulated NVMe / virtio-blk, with no root and no spare device.  Same spec, same results schema as the kernel
backend (``backend = "vm"``); the fio job files and fio's result parsing are the kernel backend's.

Modules: ``packages`` (Debian's packages through apt's clients; the kernel pin), ``elf`` (shared libraries and
module dependencies read from the files), ``cpio`` (the initramfs format), ``lab`` (the cache: prepare, build,
load, clean), ``devices`` (``--device nullb:...`` specs → QEMU arguments and guest setup), ``guest`` (the init
script and each batch's shell scripts), ``qemu`` (the command line, the accelerator probe, the process and the
result channel), ``collect`` (a run's files from the guest → result rows), ``runner`` (one invocation).
"""

from __future__ import annotations


class VmError(Exception):
    """The lab cannot do what was asked (not prepared, qemu missing, the guest failed, ...).  Bad user input stays
    a SpecError; this is rendered as one line with exit code 1."""
