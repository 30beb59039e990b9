"""The kernel backend: the real Linux schedulers on real block devices, driven through fio, sysfs, cgroups and
debugfs, with the simulator's results schema.

Modules: ``blockdev`` (a device's sysfs queue: scheduler, tunables, nr_requests), ``safety`` (refusals before
anything is written), ``state`` (the undo log kept as a recovery record, restore on exit, error and signals),
``cgroups`` (a cgroup per weighted job, v1 blkio or v2 io), ``fiofile`` (spec → fio job file), ``fioresult``
(fio json+ → result rows), ``sampler`` (Kyber domain depths from debugfs, per-core CPU from /proc/stat),
``loop`` (test devices over files), ``fs`` (fresh filesystems, preconditioning), ``runner`` (one invocation).

Every external program is run with an argument list, never through a shell.
"""

from __future__ import annotations


class KernelError(Exception):
    """The machine cannot do what was asked (not root, fio missing, a sysfs write refused, fio failed, ...).
    Bad user input stays a SpecError; this is rendered as one line with exit code 1."""
