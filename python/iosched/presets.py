"""Device and host presets: TOML files with [params] (exactly the simulator's config fields) and [provenance]."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import kernel_version, native, nullblk
from .datadir import data_dir
from .errors import SpecError, show

KINDS = ("device", "host")
_DIRS = {"device": "devices", "host": "hosts"}

# Fields of DeviceConfig / HostConfig / EngineCost in crates/iosched-sim/src/config.rs (DeviceConfig.name excluded:
# device names are assigned per run).  Keep in sync: a preset with other fields is rejected here.
DEVICE_FIELDS = (
    "interface", "capacity_bytes", "logical_block_bytes", "max_hw_queues", "queue_depth", "link_bytes_per_s",
    "controller_cores", "command_ns", "read_pipeline_ns", "write_ack_ns", "write_ack_jitter_ns", "channels", "units_per_channel",
    "channel_bytes_per_s", "flash_page_bytes", "read_ns_by_page_type", "read_jitter_ns", "program_unit_bytes",
    "program_ns", "erase_ns", "read_suspend_ns", "read_suspend_limit", "block_program_units", "write_buffer_bytes",
    "overprovision_bytes", "gc_free_units_low", "condition", "trimmed_fraction", "max_sectors_kb", "write_command_ns", "gc_step_copies",
    "gc_step_units",
    "read_out_ns", "waiting_write_slots", "buffer_fill_bytes_per_s", "page_read_extra_ns", "scattered_piece_bytes",
    "read_buffer_bytes", "waiting_read_slots", "slc_static_bytes", "slc_dynamic_bytes", "slc_program_ns",
    "cache_program",
)
DEVICE_OPTIONAL: tuple[str, ...] = ("read_suspend_ns", "read_suspend_limit", "max_sectors_kb", "write_command_ns", "read_out_ns",
                                    "gc_step_copies", "gc_step_units", "waiting_write_slots", "buffer_fill_bytes_per_s",
                                    "page_read_extra_ns",
                                    "scattered_piece_bytes", "read_buffer_bytes", "waiting_read_slots",
                                    "slc_static_bytes", "slc_dynamic_bytes", "slc_program_ns", "cache_program")
ENGINE_FIELDS = ("submit_ns", "complete_ns", "usr_fraction", "sleep_wake_ns")
ENGINES = ("io_uring", "libaio", "psync")
HOST_FIELDS = ("cores", "context_switch_ns", "lock_handoff_ns", "uncontended_lock_ns", "completion_irq_ns",
               "package_idle_wake_ns", "package_idle_ns", "io_page_ns", "core_cache_bytes", "process_cache_bytes",
               "cache_refill_ns", "io_uring", "libaio", "psync", "scheduler_costs", "filesystems", "page_cache",
               "kernel", "scheduler_dispatch", "timer_lateness", "timer_irq_ns", "wake_lateness", "hz")
HOST_OPTIONAL = ("lock_handoff_ns", "uncontended_lock_ns", "completion_irq_ns", "package_idle_wake_ns", "package_idle_ns",
                 "io_page_ns", "core_cache_bytes", "process_cache_bytes", "cache_refill_ns",
                 "scheduler_costs", "filesystems", "page_cache", "scheduler_dispatch", "timer_lateness", "timer_irq_ns",
                 "wake_lateness", "hz")
# HostConfig.timer_lateness and wake_lateness (config.rs TimerLateness): how late the host's timers fire, and how
# late a thread woken on an idle core starts, by quantile and duration.
TIMER_LATENESS_FIELDS = ("quantiles", "durations_ns", "late_ns")
# HostConfig.scheduler_dispatch: who runs the hardware queue after an insert into the elevator (default "inline").
SCHEDULER_DISPATCH = ("inline", "kblockd")
SCHEDULER_COST_FIELDS = ("insert_ns", "dispatch_ns", "complete_ns")
# HostConfig.filesystems (config.rs FileSystemCost): the direct-I/O path each file system adds per I/O, by direction.
# The one list of file systems a spec may name: the spec's `filesystem` takes it, the kernel backend makes each of them
# (backends/kernel/fs.py) and `--filesystem` offers them (cli.py keeps its own copy for start-up time; a test holds
# the three equal).
FILESYSTEMS = ("ext4", "xfs", "f2fs")
FILESYSTEM_COST_FIELDS = ("read_ns", "write_ns")
# PageCacheConfig in config.rs: the page cache buffered jobs (direct=0) need.
PAGE_CACHE_FIELDS = ("capacity_bytes", "copy_bytes_per_s", "dirty_background_ratio", "dirty_ratio", "read_ahead_kb")


def presets_dir() -> Path:
    """The first folder presets are looked up in: $IOSCHED_PRESETS's first, else the shipped presets."""
    return preset_roots()[0]


def preset_roots() -> list[Path]:
    """Where presets are looked up, in order: the folders in $IOSCHED_PRESETS (separated by the OS's path
    separator, as PATH is), then the copy shipped in the package (or the checkout's presets/). A name is the first
    folder's that has it, so a folder of one's own adds presets and can shadow a shipped one."""
    own = [Path(p) for p in os.environ.get("IOSCHED_PRESETS", "").split(os.pathsep) if p]
    shipped = data_dir(None, "presets", "*/*.toml")
    return own + ([shipped] if shipped not in own else [])


def is_preset_path(name: object) -> bool:
    """A preset given as a file (anywhere a name is accepted): it ends in .toml or has a folder in it."""
    return isinstance(name, str) and (name.endswith(".toml") or "/" in name)


@dataclass
class Preset:
    kind: str
    name: str
    description: str
    seeds: list[str]
    key_figures: dict[str, str]
    params: dict[str, Any]
    provenance: dict[str, str]
    path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def leaves(self) -> list[tuple[str, Any]]:
        return _leaves(self.params)

    def provenance_for(self, key: str) -> str | None:
        """The provenance of parameter ``key``: its own entry or that of the table holding it."""
        return next((self.provenance[p] for p in _prefixes(key) if p in self.provenance), None)


def _leaves(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_leaves(v, key + "."))
        else:
            out.append((key, v))
    return out


def _prefixes(key: str) -> list[str]:
    """``a.b.c`` -> [``a.b.c``, ``a.b``, ``a``]: the entries whose provenance can cover the parameter."""
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _known_schedulers() -> tuple[str, ...] | None:
    return native.known_schedulers()  # None without the native module: the name check is then skipped


def _without_elevator() -> set[str]:
    return {name for name, row in (native.scheduler_registry() or {}).items() if not row["elevator"]}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    return dict(_leaves(d, prefix))


def _check_fields(file: str, where: str, got: dict[str, Any], fields: tuple[str, ...], optional: tuple[str, ...]):
    for k in got:
        if k not in fields:
            raise SpecError(file, f"{where}{k}", f"unknown parameter (expected one of: {', '.join(fields)})")
    for k in fields:
        if k not in got and k not in optional:
            raise SpecError(file, f"{where}{k}", "missing parameter")


def _check_types(file: str, kind: str, params: dict[str, Any]) -> None:
    def need_int(key: str, v: Any, lo: int = 0) -> None:
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise SpecError(file, f"params.{key}", f"expected an integer >= {lo}, got {v!r}")

    def need_float(key: str, v: Any, lo: float = 0.0, hi: float = 1.0) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise SpecError(file, f"params.{key}", f"expected a number in [{lo}, {hi}], got {v!r}")

    if kind == "device":
        for k, v in params.items():
            if k == "interface":
                if v not in ("nvme", "sata"):
                    raise SpecError(file, "params.interface", f'expected "nvme" or "sata", got {v!r}')
            elif k == "condition":
                if v not in ("fresh", "preconditioned"):
                    raise SpecError(file, "params.condition", f'expected "fresh" or "preconditioned", got {v!r}')
            elif k == "cache_program":
                if not isinstance(v, bool):
                    raise SpecError(file, f"params.{k}", f"expected true or false, got {v!r}")
            elif k == "trimmed_fraction":
                need_float(k, v)
            elif k == "read_ns_by_page_type":
                if not isinstance(v, list) or not v:
                    raise SpecError(file, f"params.{k}", f"expected a non-empty list of integers, got {v!r}")
                for x in v:
                    need_int(k, x)
            else:
                # Optional features that are off when left out, never 0 (the simulator refuses 0 too).
                need_int(k, v, 1 if k in ("gc_step_copies", "gc_step_units", "buffer_fill_bytes_per_s",
                                          "read_buffer_bytes", "read_suspend_limit", "slc_static_bytes") else 0)
    else:
        for k, v in params.items():
            if k in ENGINES:
                if not isinstance(v, dict):
                    raise SpecError(file, f"params.{k}", "expected a table of engine costs")
                _check_fields(file, f"params.{k}.", v, ENGINE_FIELDS, ())
                for ek, ev in v.items():
                    if ek == "usr_fraction":
                        need_float(f"{k}.{ek}", ev)
                    else:
                        need_int(f"{k}.{ek}", ev)
            elif k == "page_cache":
                if not isinstance(v, dict):
                    raise SpecError(file, f"params.{k}", "expected a table")
                _check_fields(file, f"params.{k}.", v, PAGE_CACHE_FIELDS, ())
                for ck in PAGE_CACHE_FIELDS:
                    need_int(f"{k}.{ck}", v[ck])
                for ck in ("dirty_background_ratio", "dirty_ratio"):
                    if v[ck] > 100:
                        raise SpecError(file, f"params.{k}.{ck}", f"expected a percentage 0..100, got {v[ck]!r}")
            elif k == "kernel":
                kernel_version.check(v, file=file, key="params.kernel")
            elif k in ("timer_lateness", "wake_lateness"):
                _check_timer_lateness(file, v, f"params.{k}")
            elif k == "scheduler_dispatch":
                if v not in SCHEDULER_DISPATCH:
                    raise SpecError(file, f"params.{k}", f'expected "inline" or "kblockd", got {v!r}')
            elif k == "filesystems":
                if not isinstance(v, dict):
                    raise SpecError(file, f"params.{k}", "expected a table of tables, one per file system")
                for name, c in v.items():
                    if name not in FILESYSTEMS:
                        raise SpecError(file, f"params.{k}.{name}",
                                        f"unknown file system (expected one of: {', '.join(FILESYSTEMS)})")
                    if not isinstance(c, dict):
                        raise SpecError(file, f"params.{k}.{name}", "expected a table")
                    _check_fields(file, f"params.{k}.{name}.", c, FILESYSTEM_COST_FIELDS, ())
                    for ck in FILESYSTEM_COST_FIELDS:
                        need_int(f"{k}.{name}.{ck}", c[ck])
            elif k == "scheduler_costs":
                if not isinstance(v, dict):
                    raise SpecError(file, f"params.{k}", "expected a table of tables, one per scheduler")
                known, without_elevator = _known_schedulers(), _without_elevator()
                for name, c in v.items():
                    if known is not None and name not in known:
                        raise SpecError(file, f"params.{k}.{name}",
                                        f"unknown scheduler (expected one of: {', '.join(known)})")
                    if name in without_elevator:
                        raise SpecError(file, f"params.{k}.{name}", f"{name} has no elevator and runs no scheduler "
                                        "hooks, so it costs nothing: remove the entry")
                    if not isinstance(c, dict):
                        raise SpecError(file, f"params.{k}.{name}", "expected a table")
                    _check_fields(file, f"params.{k}.{name}.", c, SCHEDULER_COST_FIELDS, ())
                    for ck in SCHEDULER_COST_FIELDS:
                        need_int(f"{k}.{name}.{ck}", c[ck])
            else:
                need_int(k, v)
        if params.get("cores", 0) < 1:
            raise SpecError(file, "params.cores", f"expected an integer >= 1, got {params.get('cores')!r}")
        if "hz" in params and not 1 <= params["hz"] <= 10_000:
            raise SpecError(file, "params.hz", f"expected the kernel's tick rate, 1 to 10000 per second "
                                               f"(CONFIG_HZ: 100, 250, 300 or 1000), got {params['hz']!r}")


def _check_timer_lateness(file: str, v: Any, key: str) -> None:
    """The table's shape: ascending quantiles in (0, 1), ascending durations, a non-decreasing row per duration."""
    if not isinstance(v, dict):
        raise SpecError(file, key, "expected a table with quantiles, durations_ns and late_ns")
    _check_fields(file, f"{key}.", v, TIMER_LATENESS_FIELDS, ())
    qs, ds, rows = v["quantiles"], v["durations_ns"], v["late_ns"]

    def numbers(x: Any, kind: type | tuple[type, ...]) -> bool:
        return isinstance(x, list) and bool(x) and all(isinstance(e, kind) and not isinstance(e, bool) for e in x)

    def ascending(x: list, strict: bool = True) -> bool:
        return all(a < b if strict else a <= b for a, b in zip(x, x[1:]))

    if not (numbers(qs, (int, float)) and all(0 < q < 1 for q in qs) and ascending(qs)):
        raise SpecError(file, f"{key}.quantiles", f"expected ascending probabilities in (0, 1), got {qs!r}")
    if not (numbers(ds, int) and ds[0] > 0 and ascending(ds)):
        raise SpecError(file, f"{key}.durations_ns", f"expected ascending durations in ns, got {ds!r}")
    if not (isinstance(rows, list) and len(rows) == len(ds)
            and all(numbers(r, int) and len(r) == len(qs) and r[0] >= 0 and ascending(r, strict=False) for r in rows)):
        raise SpecError(file, f"{key}.late_ns", f"expected {len(ds)} rows (one per duration) of {len(qs)} "
                        "non-decreasing lateness values in ns (one per quantile)")


def load_preset_file(path: Path, kind: str | None = None) -> Preset:
    """Load and validate one preset file; every problem is a SpecError naming the file and key."""
    file = str(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise SpecError(file, None, f"cannot read preset: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(file, None, f"invalid TOML: {e}") from None
    allowed = {"kind", "name", "description", "seeds", "key_figures", "params", "provenance"}
    for k in data:
        if k not in allowed:
            raise SpecError(file, k, f"unknown key (expected one of: {', '.join(sorted(allowed))})")
    for k in ("kind", "name", "description", "params", "provenance"):
        if k not in data:
            raise SpecError(file, k, "missing key")
    if data["kind"] not in KINDS:
        raise SpecError(file, "kind", f'expected "device" or "host", got {data["kind"]!r}')
    if kind is not None and data["kind"] != kind:
        raise SpecError(file, "kind", f'expected "{kind}" for a file in {_DIRS[kind]}/, got {data["kind"]!r}')
    if data["name"] != path.stem:
        raise SpecError(file, "name", f'expected "{path.stem}" (the file name), got {data["name"]!r}')
    params, prov = data["params"], data["provenance"]
    if not isinstance(params, dict) or not isinstance(prov, dict):
        raise SpecError(file, "params" if not isinstance(params, dict) else "provenance", "expected a table")
    if data["kind"] == "device":
        _check_fields(file, "params.", params, DEVICE_FIELDS, DEVICE_OPTIONAL)
    else:
        _check_fields(file, "params.", params, HOST_FIELDS, HOST_OPTIONAL)
    _check_types(file, data["kind"], params)
    flat_prov = _flatten(prov)
    leaves = [k for k, _ in _leaves(params)]
    for k in leaves:
        # A provenance entry covers a parameter or a whole table of them (e.g. one scheduler's costs).
        covering = [p for p in _prefixes(k) if p in flat_prov]
        v = flat_prov[covering[0]] if covering else None
        if not isinstance(v, str) or not v.strip():
            raise SpecError(file, f"provenance.{covering[0] if covering else k}",
                            "missing provenance for this parameter" if v is None else "expected a non-empty string")
    covered = {p for k in leaves for p in _prefixes(k)}
    for k in flat_prov:
        if k not in covered:
            raise SpecError(file, f"provenance.{k}", "provenance for a parameter that is not in [params]")
    seeds = data.get("seeds", [])
    if not isinstance(seeds, list) or not all(isinstance(s, str) for s in seeds):
        raise SpecError(file, "seeds", "expected a list of strings")
    kf = data.get("key_figures", {})
    if not isinstance(kf, dict) or not all(isinstance(v, str) for v in kf.values()):
        raise SpecError(file, "key_figures", "expected a table of strings")
    return Preset(kind=data["kind"], name=data["name"], description=str(data["description"]), seeds=seeds,
                  key_figures=kf, params=params, provenance=flat_prov, path=path)


def preset_names(kind: str, root: Path | None = None) -> list[str]:
    """The names of ``kind`` in ``root``, or in every folder presets are looked up in."""
    names: set[str] = set()
    for r in [root] if root is not None else preset_roots():
        d = r / _DIRS[kind]
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def _find(kind: str, name: str, roots: list[Path]) -> Path | None:
    for r in roots:
        path = r / _DIRS[kind] / f"{name}.toml"
        try:
            if path.is_file():
                return path
        except (OSError, ValueError):      # a name the file system cannot hold
            return None
    return None


def list_presets(root: Path | None = None) -> list[Preset]:
    """Every preset in ``root``, or every one that a name finds (the first folder's where several have it)."""
    roots = [root] if root is not None else preset_roots()
    out = []
    for kind in KINDS:
        for name in preset_names(kind, root):
            out.append(load_preset_file(_find(kind, name, roots), kind))
    return out


_cache: dict[tuple[str, str, str], Preset] = {}


def load_preset(kind: str, name: object, *, file: str | None = None, key: str | None = None,
                base: Path | None = None) -> Preset:
    """The preset ``name`` of ``kind``: a name looked up in the preset folders (preset_roots), or a preset file
    (is_preset_path; relative to ``base``, e.g. the spec's folder, else to the working directory); an unknown name
    or a file that is not a ``kind`` preset is a SpecError at (file, key)."""
    if kind == "device" and nullblk.is_nullb(name):     # the null_blk family: made from its parameters
        return Preset(**nullblk.preset_fields(name, file=file, key=key))
    if is_preset_path(name):
        path = Path(name) if base is None else base / name
        try:
            found = path.is_file()
        except (OSError, ValueError):
            found = False
        if not found:
            raise SpecError(file, key, f"no such preset file {show(name)}"
                                       + (f" (relative to {base})" if base is not None and not Path(name).is_absolute()
                                          else ""))
        return load_preset_file(path, kind)
    roots = preset_roots()
    if (not isinstance(name, str) or not name or name.startswith(".") or "\0" in name
            or len(name.encode("utf-8", "surrogatepass")) > 200):
        raise SpecError(file, key, f"expected a {kind} preset name or file, got {show(name)}")
    path = _find(kind, name, roots)
    if path is None:
        have = preset_names(kind)
        where = ", ".join(str(r) for r in roots)
        raise SpecError(file, key, f'unknown {kind} preset {show(name)} (have: {", ".join(have) or f"none in {where}"})')
    ck = (str(path), kind, name)
    if ck not in _cache:
        _cache[ck] = load_preset_file(path, kind)
    return _cache[ck]


def find_preset(name: str) -> Preset:
    """A preset of either kind by name or file (for ``iosched presets NAME``)."""
    if is_preset_path(name):
        for kind in KINDS:
            try:
                return load_preset(kind, name)
            except SpecError as e:
                if e.key != "kind":
                    raise
        raise SpecError(name, "kind", 'expected "device" or "host"')
    for kind in KINDS:
        if _find(kind, name, preset_roots()) is not None:
            return load_preset(kind, name)
    have = [p for k in KINDS for p in preset_names(k)]
    raise SpecError(None, None, f'unknown preset {show(name)} (have: {", ".join(have) or "none"})')


def apply_overrides(kind: str, params: dict[str, Any], overrides: dict[str, Any], *, file: str | None,
                    key: str) -> dict[str, Any]:
    """``params`` with the spec's per-key overrides (``set = { command_ns = 1400 }``), each checked as a preset's
    own value would be; an unknown key or a bad value is a SpecError at ``key``.KEY."""
    fields, optional = (DEVICE_FIELDS, DEVICE_OPTIONAL) if kind == "device" else (HOST_FIELDS, HOST_OPTIONAL)
    if not isinstance(overrides, dict):
        raise SpecError(file, key, f"expected a table of {kind} parameters, got {show(overrides)}")
    out = dict(params)
    for k, v in overrides.items():
        if k not in fields or (kind == "device" and k == "interface"):
            allowed = [f for f in fields if not (kind == "device" and f == "interface")]
            raise SpecError(file, f"{key}.{k}", f"unknown {kind} parameter (expected one of: {', '.join(allowed)})")
        out[k] = v
    try:
        _check_types(file or "", kind, {k: out[k] for k in overrides} if kind == "device" else out)
    except SpecError as e:
        raise SpecError(file, f"{key}.{(e.key or '').removeprefix('params.')}", e.message) from None
    return out
