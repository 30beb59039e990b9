"""The experiment spec (TOML or a plain fio job file), CLI overrides, sweep expansion and run resolution.

Everything a run needs is resolved and validated here, before anything is written or simulated.
"""

from __future__ import annotations

import copy
import itertools
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import kernel_version, limits, native
from . import presets as presets_mod
from .errors import SpecError, show
from .fiojob import (DeviceInfo, JobContext, RawJob, ResolvedJob, alias_notes, device_aliases, parse_jobfile,
                     resolve_job)
from .safepath import check_name, is_file
from .units import parse_time

DEFAULT_HOST = "xeon-silver-4210r-10c"
DEFAULT_DEVICE = "samsung-980pro-1tb"
DEFAULT_SCHEDULER = "none"


def known_schedulers() -> tuple[str, ...] | None:
    """Scheduler names the simulator accepts (from the native module: one list, kept in iosched-policy)."""
    return native.known_schedulers()  # None without the native module: the check happens where it runs


def block_layers(name: str) -> tuple[str, ...] | None:
    """The block layers scheduler ``name`` runs on, its default first (None without the native module)."""
    return native.block_layers(name) if native.available() else None


def scheduler_registry() -> dict[str, dict[str, Any]] | None:
    """The simulator's schedulers by name (see ``native.scheduler_registry``); None without the native module."""
    return native.scheduler_registry()


DEFAULT_SAMPLE_INTERVAL_NS = 100_000_000


# ---------------------------------------------------------------- the TOML schema

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HostSpec(_Strict):
    preset: str = DEFAULT_HOST
    # Per-parameter overrides of the preset ({ context_switch_ns = 2000 }), checked as the preset's own values.
    set: dict[str, Any] | None = None
    cores: int | None = Field(default=None, ge=1)
    # The Linux version to model, "MAJOR.MINOR[.PATCH]"; None: the preset's.
    kernel: str | None = None


class DeviceSpec(_Strict):
    preset: str = DEFAULT_DEVICE
    # Per-parameter overrides of the preset ({ command_ns = 1400 }), checked as the preset's own values.
    set: dict[str, Any] | None = None
    count: int = Field(default=1, ge=1, le=64)
    condition: Literal["fresh", "preconditioned"] | None = None
    trimmed_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    # The drive idled before the run, its static SLC region empty (simulator: the preset's slc_static_bytes of
    # writes need no garbage collection); None: the preset's (not rested).
    rested: bool | None = None
    # The jobs reach the device through a file on this file system (simulator: its direct-I/O path's CPU cost, the
    # host preset's `filesystems`; the kernel backend makes it, as --filesystem does). None: the raw device.
    filesystem: Literal[presets_mod.FILESYSTEMS] | None = None


class SchedulerSpec(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: str = DEFAULT_SCHEDULER
    nr_requests: int | None = Field(default=None, ge=1)
    # The block layer: "legacy" (single-queue, Linux <= 4.x) or "blk-mq"; None: the scheduler's own.
    block_layer: Literal["legacy", "blk-mq"] | None = None


TimeValue = str | int | float


class Spec(_Strict):
    name: str | None = None
    duration: TimeValue | None = None
    ramp: TimeValue = 0
    # Where a job's measured window starts: fio's first completion after its ramp, or start + ramp for every job
    # (a short run standing in for a long one; the paper reproductions). The simulator's; real fio does the first.
    ramp_end: Literal["first-completion", "nominal"] = "first-completion"
    # Keep each run's request trace (runs/<id>/blktrace.txt.gz: the kernel's blk tracer's lines and a tag
    # sleeper's wake-ups, as the VM lab's --vm trace=blk+sched records them; `iosched trace-summary` reads both).
    request_trace: bool = False
    repeat: int = Field(default=1, ge=1)
    seed: int = Field(default=1, ge=0, lt=2**64)
    sample_interval: TimeValue | None = None
    jobfile: str | None = None
    host: HostSpec = Field(default_factory=HostSpec)
    devices: list[DeviceSpec] = Field(default_factory=lambda: [DeviceSpec()], min_length=1)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    job: list[dict[str, Any]] = Field(default_factory=list)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _pydantic_error(file: str, e: ValidationError) -> SpecError:
    err = e.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in
                                                 ("str", "int", "float", "function-after[...]")))
    # union members show up in loc ("str", "int", ...): drop them; keep real keys
    key = _loc(loc) or None
    t, inp = err["type"], err.get("input")
    if loc and loc[0] in ("duration", "ramp", "sample_interval") and len(loc) <= 2:
        return SpecError(file, loc[0], f'expected a time like "2s" or a number of seconds, got {show(inp)}')
    if t == "extra_forbidden":
        return SpecError(file, key, "unknown key")
    if t == "missing":
        return SpecError(file, key, "missing required key")
    if t.startswith("int"):
        ctx = err.get("ctx", {})
        rng = f" >= {ctx['ge']}" if "ge" in ctx else f" <= {ctx['le']}" if "le" in ctx else ""
        return SpecError(file, key, f"expected an integer{rng}, got {show(inp)}")
    if t.startswith(("greater", "less")):
        ctx = err.get("ctx", {})
        bound = ", ".join(f"{op} {ctx[k]}" for k, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
                          if k in ctx)
        what = "an integer" if isinstance(inp, int) and not isinstance(inp, bool) else "a value"
        return SpecError(file, key, f"expected {what} {bound}, got {show(inp)}")
    if t == "literal_error":
        return SpecError(file, key, f"expected {err['ctx']['expected']}, got {show(inp)}")
    if t.startswith("string"):
        return SpecError(file, key, f"expected a string, got {show(inp)}")
    if t.startswith("list"):
        return SpecError(file, key, f"expected an array, got {show(inp)}")
    if t == "too_short":
        return SpecError(file, key, f"expected a non-empty array, got {show(inp)}")
    if t.startswith(("dict", "model")):
        return SpecError(file, key, f"expected a table, got {show(inp)}")
    if t.startswith("float"):
        return SpecError(file, key, f"expected a number, got {show(inp)}")
    return SpecError(file, key, f"{err['msg'][0].lower()}{err['msg'][1:]}, got {show(inp)}")


def validate_spec(file: str, data: dict[str, Any]) -> Spec:
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        raise _pydantic_error(file, e) from None


# ---------------------------------------------------------------- loading

@dataclass
class Overrides:
    """CLI flags: each overrides the spec (and drops a sweep axis over the same key)."""
    host: str | None = None
    device: str | None = None
    devices: int | None = None
    scheduler: str | None = None
    sets: list[str] = field(default_factory=list)     # TUNABLE=VALUE
    duration: str | None = None
    seed: int | None = None
    repeat: int | None = None
    filesystem: str | None = None                      # every devices entry's `filesystem`
    request_trace: bool = False                         # --trace: the spec's `request_trace = true`


@dataclass
class Experiment:
    file: str                       # as the user named it
    data: dict[str, Any]            # the raw spec (TOML dict) after CLI overrides
    jobs: list[RawJob]
    kind: str                       # "toml" or "fio"


def is_toml(path: str) -> bool:
    """A TOML spec (``.toml``, in any case); anything else is read as a fio job file."""
    return Path(path).suffix.lower() == ".toml"


def parse_toml(path: str, raw: bytes) -> dict[str, Any]:
    """A TOML document as a dict; every problem (syntax, encoding, too deep) is a SpecError naming the file."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise SpecError(path, f"line {line}", "not UTF-8 text (TOML files are UTF-8)") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(path, None, f"invalid TOML: {e}") from None
    except RecursionError:
        raise SpecError(path, None, f"invalid spec: tables and arrays nested too deeply (at most "
                                    f"{limits.NESTING_MAX} levels)") from None
    except ValueError:    # an integer of more than 4300 digits (Python refuses to read it)
        raise SpecError(path, None, "invalid TOML: an integer of more than 4300 digits") from None
    if limits.nesting_depth(data) > limits.NESTING_MAX:
        raise SpecError(path, None, f"invalid spec: tables and arrays nested too deeply (at most "
                                    f"{limits.NESTING_MAX} levels)")
    return data


def load_experiment(path: str, overrides: Overrides | None = None) -> Experiment:
    """Read a TOML spec or a fio job file and apply CLI overrides; validates the spec's shape."""
    p = Path(path)
    if not is_file(p):
        raise SpecError(path, None, "no such file")
    if is_toml(path):
        data = parse_toml(path, limits.read_input(Path(path), path, "spec"))
        kind = "toml"
    else:
        data = {"name": p.stem, "jobfile": p.name}
        kind = "fio"
    named = kind == "toml" and "name" in data
    data.setdefault("name", p.stem)
    return experiment_from_data(path, data, kind, overrides, named=named)


def experiment_from_data(path: str, data: dict[str, Any], kind: str = "toml",
                         overrides: Overrides | None = None, *, named: bool | None = None) -> Experiment:
    """An experiment from an already-parsed spec (a TOML-shaped dict); ``path`` names it in errors, and a
    ``jobfile`` is relative to its folder. Used by load_experiment and by the paper experiments' registry."""
    p = Path(path)
    if limits.nesting_depth(data) > limits.NESTING_MAX:
        raise SpecError(path, None, f"invalid spec: tables and arrays nested too deeply (at most "
                                    f"{limits.NESTING_MAX} levels)")
    data = copy.deepcopy(data)
    if named is None:     # whether the spec names itself (else the name comes from the file's)
        named = "name" in data
    data.setdefault("name", p.stem)
    _apply_overrides(data, overrides or Overrides(), file=path)
    spec = validate_spec(path, data)
    # The experiment's name names files in OUT (the report's figures): printable, no path separators.
    check_name(spec.name, file=path, key="name" if named else None, path_component=True,
               what="an experiment name" if named else "a file name usable as the experiment's name (or set name)")
    jobs: list[RawJob] = []
    if spec.jobfile is not None:
        jf = p.parent / spec.jobfile
        display = path if kind == "fio" else str(Path(path).parent / spec.jobfile)
        if kind == "toml" and not is_file(jf):
            raise SpecError(path, "jobfile", f"no such file: {display}")
        jobs.extend(parse_jobfile(jf, display))
    processes = limits.limit("processes")
    processes.check(len(spec.job), file=path, key="job", what=f"{len(spec.job):,} [[job]] tables")
    for i, t in enumerate(spec.job):
        name = t.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(path, f"job[{i}].name", "missing" if name is None else f"expected a string, got {show(name)}")
        check_name(name, file=path, key=f"job[{i}].name", what="a job name")
        jobs.append(RawJob(name=name, options={k: v for k, v in t.items() if k != "name"}, file=path,
                           label=f'job "{name}"', origin="toml"))
    if not jobs:
        raise SpecError(path, "job", "no jobs (give [[job]] tables or a jobfile)")
    processes.check(len(jobs), file=path, key="job", what=f"{len(jobs):,} jobs")
    seen: set[str] = set()
    for j in jobs:
        if j.name in seen:
            raise SpecError(j.file, j.label, "duplicate job name")
        seen.add(j.name)
    for key, values in spec.sweep.items():
        _check_sweep_axis(path, key, values, jobs)
    return Experiment(file=path, data=data, jobs=jobs, kind=kind)


def _parse_set(item: str) -> tuple[str, int]:
    if "=" not in item:
        raise SpecError("--set", None, f"expected TUNABLE=VALUE, got {show(item)}")
    k, v = (s.strip() for s in item.split("=", 1))
    try:
        if len(v) > 40:
            raise ValueError(v)
        return k, int(v, 0)
    except ValueError:
        raise SpecError("--set", f"{k}={v}", "expected an integer value") from None


def _overrides_label(overrides: dict[str, Any]) -> str:
    """How a run records a preset with per-key overrides: "NAME (set command_ns=1400)"."""
    return " (set " + ", ".join(f"{k}={v}" for k, v in overrides.items()) + ")"


def _cli_preset(name: str) -> str:
    """A preset file given on the command line is relative to the working directory, not to the spec."""
    return str(Path(name).resolve()) if presets_mod.is_preset_path(name) else name


def check_filesystem_flag(given: str, named: Iterable[Any], file: str) -> None:
    """--filesystem GIVEN against the file systems the spec's devices name (None: raw): on either backend the flag
    may only agree with them."""
    other = sorted({str(n) for n in named if n is not None} - {given})
    if other:
        raise SpecError("--filesystem", None, f"{given}, but {file}'s devices say {', '.join(other)}")


def _apply_overrides(data: dict[str, Any], o: Overrides, file: str = "") -> None:
    sweep = data.get("sweep") if isinstance(data.get("sweep"), dict) else {}

    def drop(axis: str) -> None:
        sweep.pop(axis, None)

    if o.request_trace:
        data["request_trace"] = True
    if o.host is not None:
        data["host"] = {"preset": _cli_preset(o.host)}
        drop("host.cores")
    if o.device is not None or o.devices is not None:
        devs = data.get("devices")
        if not isinstance(devs, list) or not devs:
            devs = [{}]
        first = dict(devs[0]) if isinstance(devs[0], dict) else {}
        if o.device is not None:
            first["preset"] = _cli_preset(o.device)
            first.pop("set", None)        # the spec's overrides were of its own preset
        if o.devices is not None:
            first["count"] = o.devices
            drop("devices.count")
        data["devices"] = [first] + list(devs[1:])
    if o.filesystem is not None:
        devs = data.get("devices")
        if not isinstance(devs, list) or not devs:
            devs = [{}]
        check_filesystem_flag(o.filesystem, (d.get("filesystem") for d in devs if isinstance(d, dict)), file)
        data["devices"] = [dict(d, filesystem=o.filesystem) if isinstance(d, dict) else d for d in devs]
    sched = data.get("scheduler")
    if not isinstance(sched, dict):
        sched = {} if sched is None else sched
    if isinstance(sched, dict):
        if o.scheduler is not None:
            sched["name"] = o.scheduler
            drop("scheduler.name")
        for item in o.sets:
            k, v = _parse_set(item)
            sched[k] = v
            drop(f"scheduler.{k}")
        if sched or "scheduler" in data:
            data["scheduler"] = sched
    if o.duration is not None:
        parse_time(o.duration, file="--duration")
        data["duration"] = o.duration
        drop("duration")
    if o.seed is not None:
        data["seed"] = o.seed
    if o.repeat is not None:
        data["repeat"] = o.repeat


SWEEP_AXES = ("scheduler.name", "scheduler.<tunable>", "host.cores", "devices.count", "job.<name>.<option>",
              "duration")


def _check_sweep_axis(file: str, key: str, values: list[Any], jobs: list[RawJob]) -> None:
    where = f'sweep."{key}"'
    if not values:
        raise SpecError(file, where, "expected a non-empty array of values")
    parts = key.split(".")
    if key in ("host.cores", "devices.count", "duration", "scheduler.name"):
        return
    if parts[0] == "scheduler" and len(parts) == 2 and parts[1]:
        return
    if parts[0] == "job" and len(parts) == 3 and parts[2]:
        if parts[1] not in {j.name for j in jobs}:
            raise SpecError(file, where, f'no job named "{parts[1]}" (have {", ".join(j.name for j in jobs)})')
        return
    raise SpecError(file, where, f"unknown sweep axis (expected one of: {', '.join(SWEEP_AXES)})")


def _apply_point(data: dict[str, Any], jobs: list[RawJob], point: dict[str, Any]) -> tuple[dict, list[RawJob]]:
    data = copy.deepcopy(data)
    jobs = [RawJob(j.name, dict(j.options), j.file, j.label, j.origin) for j in jobs]
    for key, value in point.items():
        parts = key.split(".")
        if key == "duration":
            data["duration"] = value
        elif key == "host.cores":
            data.setdefault("host", {})["cores"] = value
        elif key == "devices.count":
            devs = data.setdefault("devices", [{}])
            devs[0] = dict(devs[0], count=value)
        elif parts[0] == "scheduler":
            data.setdefault("scheduler", {})[parts[1]] = value
        elif parts[0] == "job":
            for j in jobs:
                if j.name == parts[1]:
                    j.options.pop(parts[2], None)
                    j.options[parts[2]] = value
    return data, jobs


# ---------------------------------------------------------------- resolution

@dataclass
class ResolvedRun:
    experiment: str
    spec_file: str
    sweep_point: dict[str, Any]
    repetition: int
    seed: int
    host_preset: str
    device_presets: list[str]
    scheduler: str
    tunables: dict[str, int]
    nr_requests: int | None
    host: dict[str, Any]               # HostConfig
    devices: list[dict[str, Any]]      # DeviceConfig, named
    jobs: list[ResolvedJob]
    sample_interval_ns: int
    notes: list[str] = field(default_factory=list)
    block_layer: str | None = None     # as the spec set it (None: the scheduler's own)
    ramp_end: str = "first-completion"  # the simulator's measured windows (Spec.ramp_end)
    request_trace: bool = False        # Spec.request_trace

    @property
    def kernel(self) -> str | None:
        """The Linux version the run models ("MAJOR.MINOR[.PATCH]": the host preset's, or the spec's host.kernel)."""
        return self.host.get("kernel")


@dataclass
class RealSystem:
    """The machine a non-simulated backend runs on: its CPUs, and per spec device (in order) the real capacity and
    logical block size of what stands for it (a block device, or a file on a fresh filesystem)."""
    cores: int
    devices: list[tuple[int, int]]      # (capacity_bytes, logical_block_bytes)
    flag: str = "--device"              # how errors name the option that gave the devices


def device_names(interfaces: list[str]) -> list[str]:
    """/dev/nvme0n1, /dev/nvme1n1, … for NVMe; /dev/sda, /dev/sdb, … for SATA, in order."""
    out, n_nvme, n_sata = [], 0, 0
    for itf in interfaces:
        if itf == "sata":
            i, name = n_sata, ""
            while True:
                name = chr(ord("a") + i % 26) + name
                i = i // 26 - 1
                if i < 0:
                    break
            out.append(f"/dev/sd{name}")
            n_sata += 1
        else:
            out.append(f"/dev/nvme{n_nvme}n1")
            n_nvme += 1
    return out


def resolve(exp: Experiment, data: dict[str, Any], jobs: list[RawJob], point: dict[str, Any],
            repetition: int, real: RealSystem | None = None) -> ResolvedRun:
    file = exp.file
    spec = validate_spec(file, data)
    base = Path(file).parent          # preset files named in a spec are relative to its folder
    host_p = presets_mod.load_preset("host", spec.host.preset, file=file, key="host.preset", base=base)
    host = copy.deepcopy(host_p.params)
    host_name = host_p.name
    if spec.host.set:
        host = presets_mod.apply_overrides("host", host, copy.deepcopy(spec.host.set), file=file, key="host.set")
        host_name += _overrides_label(spec.host.set)
    host.setdefault("scheduler_costs", {})
    if spec.host.cores is not None:
        if spec.host.cores > host["cores"]:
            raise SpecError(file, "host.cores", f"expected at most {host['cores']} "
                            f"(the {host_name} preset's cores), got {spec.host.cores}")
        host["cores"] = spec.host.cores
    if spec.host.kernel is not None:
        host["kernel"] = kernel_version.check(spec.host.kernel, file=file, key="host.kernel")
    devices: list[dict[str, Any]] = []
    device_presets: list[str] = []
    for i, d in enumerate(spec.devices):
        dp = presets_mod.load_preset("device", d.preset, file=file, key=f"devices[{i}].preset", base=base)
        params, dp_name = dp.params, dp.name
        if d.set:
            params = presets_mod.apply_overrides("device", params, d.set, file=file, key=f"devices[{i}].set")
            dp_name += _overrides_label(d.set)
        for _ in range(d.count):
            cfg = copy.deepcopy(params)
            if d.condition is not None:
                cfg["condition"] = d.condition
            if d.trimmed_fraction is not None:
                cfg["trimmed_fraction"] = float(d.trimmed_fraction)
            cfg["trimmed_fraction"] = float(cfg["trimmed_fraction"])
            if d.rested:
                if not cfg.get("slc_static_bytes"):
                    raise SpecError(file, f"devices[{i}].rested", f"the device preset {d.preset} has no static SLC "
                                    f"region to start empty ({dp.path}: add slc_static_bytes)")
                cfg["rested"] = True
            if d.filesystem is not None:
                if real is None and d.filesystem not in host.get("filesystems", {}):
                    raise SpecError(file, f"devices[{i}].filesystem", f"the host preset {host_name} prices no "
                                    f"{d.filesystem} direct-I/O path ({host_p.path}: add [params.filesystems."
                                    f"{d.filesystem}] with read_ns and write_ns)")
                cfg["filesystem"] = d.filesystem
            devices.append(cfg)
            device_presets.append(dp_name)
    for cfg, name in zip(devices, device_names([d["interface"] for d in devices])):
        cfg["name"] = name
    if real is not None:
        # Jobs are sized and checked against the real devices and CPUs; the presets stay for the record.
        if len(real.devices) != len(devices):
            names = ", ".join(d["name"] for d in devices)
            raise SpecError(real.flag, None, f"{file} has {len(devices)} device(s) ({names}), mapped in order to the "
                            f"{real.flag} given; expected {len(devices)}, got {len(real.devices)}")
        for cfg, (capacity, lbs) in zip(devices, real.devices):
            cfg["capacity_bytes"], cfg["logical_block_bytes"] = capacity, lbs
        host["cores"] = real.cores
    sched = spec.scheduler
    known = known_schedulers()
    if known is not None and sched.name not in known:
        raise SpecError(file, "scheduler.name", f"unknown scheduler {show(sched.name)} "
                        f"(the simulator knows: {', '.join(known)})")
    layers = block_layers(sched.name) if known is not None else None
    if layers is not None:
        layer = sched.block_layer or layers[0]
        if layer not in layers:
            other = "none, mq-deadline, kyber or bfq" if layer == "blk-mq" else "noop, deadline, cfq or bfq"
            raise SpecError(file, "scheduler.block_layer", f"{sched.name} does not exist on the {layer} block layer "
                            f"(it runs on: {', '.join(layers)}); on {layer} use {other}")
        if layer == "legacy":
            nvme = [d["name"] for d in devices if d["interface"] == "nvme"]
            if nvme:
                raise SpecError(file, "scheduler.name", f"{sched.name} runs on the legacy block layer, which needs a "
                                f"SATA device: {nvme[0]} is NVMe, and the Linux NVMe driver is blk-mq only")
    registry = scheduler_registry() if real is None else None  # a real kernel's scheduler needs no modelled cost
    if registry is not None and registry[sched.name]["elevator"] and sched.name not in host["scheduler_costs"]:
        raise SpecError(file, "scheduler.name", f"the host preset {host_p.name} has no scheduler_costs entry for "
                        f"{sched.name} ({host_p.path}): add [params.scheduler_costs.{sched.name}] (insert_ns, "
                        "dispatch_ns, complete_ns) with its provenance, or use another host preset")
    tunables: dict[str, int] = {}
    for k, v in (sched.model_extra or {}).items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(file, f"scheduler.{k}", f"expected an integer (tunables take sysfs integers), got {show(v)}")
        limits.check_int(v, limits.I64_MIN, limits.I64_MAX, lambda m: SpecError(file, f"scheduler.{k}", m))
        tunables[k] = v
    if sched.nr_requests is not None:
        limits.check_int(sched.nr_requests, 1, limits.U32_MAX, lambda m: SpecError(file, "scheduler.nr_requests", m))
    if known is not None and tunables and real is None:
        # The simulator's scheduler takes the tunables (names and values), in the order a run sets them: checked
        # here, so the error names the key (the kernel backend has the kernel's own tunables, checked there).
        refused = native.tunable_error(sched.name, sorted(tunables.items()))
        if refused is not None:
            raise SpecError(file, f"scheduler.{refused[0]}", f"{refused[1]} ({sched.name})")
    duration = parse_time(spec.duration, file=file, key="duration") if spec.duration is not None else None
    if duration is not None and duration <= 0:
        raise SpecError(file, "duration", f"expected a time > 0, got {show(spec.duration)}")
    sim_time = limits.limit("sim_time")
    if duration is not None:
        sim_time.check(duration, file=file, key="duration", what=show(spec.duration))
    ramp = parse_time(spec.ramp, file=file, key="ramp")
    sim_time.check(ramp, file=file, key="ramp", what=show(spec.ramp))
    sample = (parse_time(spec.sample_interval, file=file, key="sample_interval")
              if spec.sample_interval is not None else DEFAULT_SAMPLE_INTERVAL_NS)
    if sample <= 0:
        raise SpecError(file, "sample_interval", f"expected a time > 0, got {show(spec.sample_interval)}")
    if sample > limits.U64_MAX:        # the simulator's nanoseconds (longer than a run is harmless: one sample)
        raise SpecError(file, "sample_interval", f"expected a time below 2^64 ns (584 years), got "
                                                 f"{show(spec.sample_interval)}")
    infos = [DeviceInfo(d["name"], d["capacity_bytes"], d["logical_block_bytes"]) for d in devices]
    rjobs: list[ResolvedJob] = []
    aliases = device_aliases(jobs, infos)
    notes: list[str] = alias_notes(jobs, infos, aliases)
    for j in jobs:
        ctx = JobContext(devices=infos, cores=host["cores"], default_runtime_ns=duration, default_ramp_ns=ramp,
                         default_time_based=(j.origin == "toml"), page_cache="page_cache" in host or real is not None,
                         device_aliases=aliases)
        rj = resolve_job(j, ctx)
        rjobs.append(rj)
        notes.extend(rj.notes)
    _check_cgroup_weights(jobs, rjobs)
    sample = _log_sample_interval(file, jobs, rjobs, sample, spec.sample_interval)
    if spec.sample_interval is None and not any(rj.logs for rj in rjobs):
        sample = _default_sample_interval(rjobs, len(devices), sched.name, sample, notes, file)
    _check_run_limits(file, rjobs, len(devices), sched.name, sample, spec.sample_interval)
    return ResolvedRun(
        experiment=spec.name or Path(file).stem, spec_file=file, sweep_point=dict(point), repetition=repetition,
        seed=spec.seed + repetition, host_preset=host_name, device_presets=device_presets, scheduler=sched.name,
        tunables=dict(sorted(tunables.items())), nr_requests=sched.nr_requests, host=host, devices=devices,
        jobs=rjobs, sample_interval_ns=sample, notes=notes, block_layer=sched.block_layer,
        ramp_end=spec.ramp_end, request_trace=spec.request_trace)


def _default_sample_interval(rjobs: list[ResolvedJob], n_devices: int, scheduler: str, sample_ns: int,
                             notes: list[str], file: str) -> int:
    """The default interval, or, for a run that would record more time-series values than the limit at it (a long
    run, a trace replay whose length is bounded only by the limit on simulated time), the shortest multiple of it
    that stays within the limit, with a note; an interval the spec sets is never changed (the limit then refuses)."""
    configs = [j.config for j in rjobs]
    cap = limits.limit("samples").value()
    values = timeseries_values(configs, n_devices, scheduler, sample_ns)
    if values <= cap:
        return sample_ns
    factor = -(-values // cap)
    while timeseries_values(configs, n_devices, scheduler, sample_ns * factor) > cap:
        factor += 1
    longer = sample_ns * factor
    notes.append(f"{file}: sample_interval: {longer // 1_000_000} ms instead of the default "
                 f"{sample_ns // 1_000_000} ms: the run may last {limits.format_value(simulated_ns(configs), 'ns')} "
                 f"simulated, and the default would record up to {values:,} time-series values (the limit is "
                 f"{cap:,}; set sample_interval to choose)")
    return longer


def _log_sample_interval(file: str, raws: list[RawJob], rjobs: list[ResolvedJob], sample_ns: int,
                         sample_given: Any) -> int:
    """A run whose jobs write fio's logs samples at their log_avg_msec (the logs are the run's samples), which
    every such job must share; a sample_interval the spec sets must be it."""
    logging = [(raw, rj) for raw, rj in zip(raws, rjobs) if rj.logs]
    if not logging:
        return sample_ns
    windows = {rj.log_avg_ms for _, rj in logging}
    if len(windows) > 1:
        raw = logging[-1][0]
        raise SpecError(raw.file, f"{raw.label} log_avg_msec", "every job that writes logs needs the same "
                                  f"log_avg_msec (the run samples at it), got {', '.join(map(str, sorted(windows)))}")
    log_ns = windows.pop() * 1_000_000
    if sample_given is not None and sample_ns != log_ns:
        raise SpecError(file, "sample_interval", f"the jobs' logs average over log_avg_msec = {log_ns // 1_000_000}"
                                                 f" ms, and the run samples at it: leave sample_interval out, or "
                                                 f"make it {log_ns // 1_000_000}ms")
    return log_ns


def simulated_ns(configs: list[dict[str, Any]]) -> int:
    """How long a run lasts in simulated time at most: its jobs' startdelay + ramp + runtime, the longest of each
    stonewall group, summed over the groups (as the simulator ends a run)."""
    total, longest = 0, 0
    for i, c in enumerate(configs):
        if c["stonewall"] and i > 0:
            total, longest = total + longest, 0
        longest = max(longest, c["start_ns"] + c["ramp_ns"] + c["runtime_ns"])
    return total + longest


def timeseries_values(configs: list[dict[str, Any]], n_devices: int, scheduler: str, sample_ns: int) -> int:
    """At most how many time-series values a run records: per sample, six per job (IOPS, bytes per second and
    mean completion latency per direction) and, per device, four plus the scheduler's metrics (two more per cgroup:
    the most any scheduler adds)."""
    metrics = native.scheduler_metrics(scheduler) if native.available() else None
    metrics = limits.SCHEDULER_METRICS_MAX if metrics is None else metrics
    cgroups = len({c["cgroup"] for c in configs})
    samples = simulated_ns(configs) // sample_ns + 1
    return samples * (6 * len(configs) + n_devices * (4 + metrics + 2 * cgroups))


def _check_run_limits(file: str, rjobs: list[ResolvedJob], n_devices: int, scheduler: str, sample_ns: int,
                      sample_given: Any) -> None:
    """A run's size against the limits (iosched.limits), before anything is built for it."""
    configs = [j.config for j in rjobs]
    processes = sum(c["numjobs"] for c in configs)
    limits.limit("processes").check(processes, file=file, key="numjobs",
                                    what=f"{len(configs)} job(s) with {processes:,} processes in all")
    inflight = sum(c["numjobs"] * c["iodepth"] for c in configs)
    limits.limit("inflight").check(inflight, file=file, key="iodepth",
                                   what=f"iodepth x numjobs summed over the jobs is {inflight:,}")
    end_ns = simulated_ns(configs)
    limits.limit("sim_time").check(end_ns, file=file, key="runtime",
                                   what=f"the run lasts {limits.format_value(end_ns, 'ns')} simulated (startdelay + "
                                        "ramp_time + runtime)")
    values = timeseries_values(configs, n_devices, scheduler, sample_ns)
    interval = show(sample_given) if sample_given is not None else "100ms (the default)"
    limits.limit("samples").check(values, file=file, key="sample_interval",
                                  what=f"a sample every {interval} over {limits.format_value(end_ns, 'ns')} "
                                       f"simulated records {values:,} time-series values")
    buffered = sum(c["size_bytes"] * (c["numjobs"] if c["offset_increment_bytes"] else 1)
                   for c in configs if c["buffered"])
    limits.limit("buffered_bytes").check(buffered, file=file, key="size",
                                         what=f"buffered jobs' files of {limits.format_value(buffered, 'bytes')}")


def _check_cgroup_weights(jobs: list[RawJob], resolved: list[ResolvedJob]) -> None:
    """A cgroup has one weight: jobs naming the same cgroup must agree on cgroup_weight."""
    first: dict[str, tuple[int, RawJob]] = {}
    for raw, rj in zip(jobs, resolved):
        name, weight = rj.config["cgroup"], rj.config["cgroup_weight"]
        if not name:
            continue
        weight0, raw0 = first.setdefault(name, (weight, raw))
        if weight != weight0:
            key = f"{raw.label} cgroup_weight" if raw.origin == "fio" else f"{raw.label}: cgroup_weight"
            raise SpecError(raw.file, key, f"cgroup {show(name)} already has weight {weight0} (from {raw0.label}); "
                                           f"expected the same weight, got {weight}")


def expand_runs(exp: Experiment, real: RealSystem | None = None) -> list[ResolvedRun]:
    """Every run of the experiment: the cartesian product of the sweep axes × repeat (repetition r: seed + r).
    ``real``: jobs sized for the real machine and devices (kernel backend) instead of the presets."""
    spec = validate_spec(exp.file, exp.data)
    axes = list(spec.sweep.items())
    # How many runs, before any is made: an 8-million-point sweep is an error at once, not minutes of work.
    n_runs = spec.repeat
    for _, vals in axes:
        n_runs *= len(vals)
    shape = " x ".join([str(len(v)) for _, v in axes] + ([f"repeat {spec.repeat}"] if spec.repeat > 1 else []))
    limits.limit("runs").check(n_runs, file=exp.file, key="sweep" if axes else "repeat",
                               what=f"{n_runs:,} runs ({shape or 'one run'})")
    if spec.seed + spec.repeat - 1 > limits.U64_MAX:      # repetition r runs with seed + r (the simulator's u64)
        raise SpecError(exp.file, "seed", f"expected seed + repeat - 1 below 2^64 (repetition r runs with seed + r), "
                                          f"got seed {spec.seed} with repeat {spec.repeat}")
    runs: list[ResolvedRun] = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        point = {k: v for (k, _), v in zip(axes, combo)}
        data, jobs = _apply_point(exp.data, exp.jobs, point)
        for r in range(spec.repeat):
            try:
                runs.append(resolve(exp, data, jobs, point, r, real))
            except SpecError as e:
                if not point:
                    raise
                where = ", ".join(f"{k}={show(v)}" for k, v in point.items())
                raise e.with_context(f"(in sweep point {where})") from None
    seen_notes: set[str] = set()
    for run in runs:
        run.notes = [n for n in run.notes if not (n in seen_notes or seen_notes.add(n))]
    return runs
