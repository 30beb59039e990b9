"""The simulator's input, built in one place: SimConfig dicts (crates/iosched-sim/src/config.rs, field for field).

`sim_config` is the one builder; `run_config` gives a user's run (a resolved spec) to it, and the simulations that
run straight from presets (the calibration targets, device calibration, the paper experiments that simulate
directly) resolve their jobs with `fio_jobs`, through the same fio-option interpretation as a user's spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .fiojob import DeviceInfo, JobContext, RawJob, resolve_job
from .presets import load_preset
from .spec import DEFAULT_SAMPLE_INTERVAL_NS, ResolvedRun, device_names


def sim_config(*, seed: int, host: dict[str, Any], devices: list[dict[str, Any]], jobs: list[dict[str, Any]],
               scheduler: str = "none", tunables: Iterable[tuple[str, int]] = (), nr_requests: int | None = None,
               block_layer: str | None = None,
               sample_interval_ns: int = DEFAULT_SAMPLE_INTERVAL_NS, ramp_end: str = "nominal",
               request_trace: bool = False) -> dict[str, Any]:
    """A SimConfig: ``host`` a HostConfig, ``devices`` named DeviceConfigs, ``jobs`` JobConfigs (resolved fio jobs),
    ``tunables`` (sysfs name, integer) in the order given. ``ramp_end``: "nominal" (every job measured from start +
    ramp: these configs are short runs standing in for the papers' and calibration's long ones) or
    "first-completion" (fio's: a spec's default). ``request_trace``: keep the run's request trace (the key only
    when asked for, so an untraced run's config, and its run id, are as they were)."""
    config = {
        "seed": seed,
        "host": host,
        "devices": devices,
        "scheduler": {
            "name": scheduler,
            "tunables": [[k, int(v)] for k, v in tunables],
            "nr_requests": nr_requests,
            "block_layer": block_layer,
        },
        "jobs": jobs,
        "sample_interval_ns": sample_interval_ns,
        "ramp_end": ramp_end,
    }
    if request_trace:
        config["request_trace"] = True
    return config


def run_config(run: ResolvedRun) -> dict[str, Any]:
    """The SimConfig of a resolved run (what `iosched run` and `iosched reproduce` simulate)."""
    return sim_config(seed=run.seed, host=run.host, devices=run.devices, jobs=[j.config for j in run.jobs],
                      scheduler=run.scheduler, tunables=sorted(run.tunables.items()), nr_requests=run.nr_requests,
                      block_layer=run.block_layer, sample_interval_ns=run.sample_interval_ns, ramp_end=run.ramp_end,
                      request_trace=run.request_trace)


# ---------------------------------------------------------------- simulations straight from presets

def preset_params(host: str, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A host preset's HostConfig and a device preset's DeviceConfig, the device named as a spec names its first
    device (/dev/nvme0n1, or /dev/sda for SATA)."""
    host_params = dict(load_preset("host", host).params)
    device_params = dict(load_preset("device", device).params)
    return host_params, named(device_params)


def named(device_params: dict[str, Any]) -> dict[str, Any]:
    """A DeviceConfig with the name a spec gives its only device."""
    return dict(device_params, name=device_names([device_params["interface"]])[0])


def fio_jobs(jobs: Iterable[tuple[str, dict[str, Any]]], host: dict[str, Any], devices: list[dict[str, Any]], *,
             runtime_s: float | None, ramp_s: float, file: str, time_based: bool = True, page_cache: bool = False,
             origin: str = "toml") -> list[dict[str, Any]]:
    """JobConfigs from (name, fio options) pairs, resolved as a spec's jobs are (``file`` names them in errors);
    ``runtime_s``/``ramp_s`` are the defaults of jobs without their own (None: no default runtime)."""
    context = JobContext(
        devices=[DeviceInfo(d["name"], d["capacity_bytes"], d["logical_block_bytes"]) for d in devices],
        cores=host["cores"], default_runtime_ns=None if runtime_s is None else int(runtime_s * 1e9),
        default_ramp_ns=int(ramp_s * 1e9), default_time_based=time_based, page_cache=page_cache)
    return [resolve_job(RawJob(name, dict(options), file=file, label=f'job "{name}"', origin=origin), context).config
            for name, options in jobs]


@dataclass(frozen=True)
class Job:
    """A fio-like job for calibration scenarios: ``numjobs`` processes, pinned one per listed core (fio's
    cpus_allowed_policy=split; no cores: unpinned)."""
    name: str
    rw: str
    iodepth: int
    cores: list[int]
    bs_bytes: int = 4096
    numjobs: int = 1
    ioengine: str = "io_uring"

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"rw": self.rw, "bs": self.bs_bytes, "iodepth": self.iodepth, "numjobs": self.numjobs,
                                "ioengine": self.ioengine}
        if self.cores:
            opts.update(cpus_allowed=",".join(map(str, self.cores)), cpus_allowed_policy="split")
        return opts


def jobs_config(host: dict[str, Any], device: dict[str, Any], jobs: Iterable[Job], runtime_s: float, ramp_s: float, *,
                file: str, seed: int = 1, scheduler: str = "none", tunables: Iterable[tuple[str, int]] = (),
                ssds: int = 1, per_device: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A SimConfig for `Job`s (time-based, with these runtime and ramp) on one device, or on ``ssds`` copies of it
    (NVMe), every job on all of them; ``per_device``: DeviceConfig fields over the copy of that index."""
    devices = [device]
    resolved = fio_jobs(((j.name, j.options()) for j in jobs), host, devices, runtime_s=runtime_s, ramp_s=ramp_s,
                        file=file)
    if ssds > 1:  # the jobs are resolved on the first device (its capacity), then spread over every copy
        devices = [dict(device, name=f"/dev/nvme{i}n1", **(per_device or {}).get(i, {})) for i in range(ssds)]
        for job in resolved:
            job["devices"] = list(range(ssds))
    return sim_config(seed=seed, host=host, devices=devices, jobs=resolved, scheduler=scheduler, tunables=tunables)


def testbed_config(host: str, device: str, jobs: Iterable[Job], runtime_s: float, ramp_s: float, *, file: str,
                   seed: int = 1, scheduler: str = "none", tunables: Iterable[tuple[str, int]] = (),
                   ssds: int = 1, device_options: dict[str, Any] | None = None,
                   per_device: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """`jobs_config` with host and device straight from their presets (``device_options``: DeviceConfig fields
    over the preset's, e.g. a drive state; ``per_device``: over one copy's)."""
    host_params, device_params = preset_params(host, device)
    device_params = dict(device_params, **(device_options or {}))
    return jobs_config(host_params, device_params, jobs, runtime_s, ramp_s, file=file, seed=seed, scheduler=scheduler,
                       tunables=tunables, ssds=ssds, per_device=per_device)
