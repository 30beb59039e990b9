"""The one door to the simulator's native module, ``iosched._native`` (built by maturin from crates/iosched-py).

Every other module goes through here: this module is the only one that imports ``_native``, and it does so on
first use, so everything else imports (and checks specs, reads results) without a built simulator. A call that needs
the simulator when it is not built raises `NotBuilt`, whose message says how to build it.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any, Callable

NOT_BUILT = "the simulator (iosched._native) is not built: run `maturin develop --release`"


class SimulatorPanic(Exception):
    """The simulator panicked (a bug: every input should give a clear error instead); the native module raises its
    own SimulatorPanic, turned into this one by the calls below."""


class NotBuilt(ImportError):
    """The native module is missing (a source tree without ``./scripts/setup`` or ``maturin develop``)."""

    def __init__(self) -> None:
        super().__init__(NOT_BUILT)


def _module() -> ModuleType:
    try:
        from . import _native
    except ImportError as e:
        raise NotBuilt() from e
    return _native


def available() -> bool:
    """Whether the simulator is built (the CLI checks this first and says how to build it)."""
    try:
        _module()
    except NotBuilt:
        return False
    return True


def simulate_json(config_json: str, progress: Callable[[float], None] | None = None) -> str:
    """One simulation: a serialised SimConfig in, a serialised SimResult out. ``progress``, if given, is called with
    the fraction of simulated time done. Raises ValueError when the simulator rejects the config, and whatever a
    signal handler or ``progress`` raises (iosched.interrupt: the simulation stops at once)."""
    m = _module()
    try:
        return m.simulate(config_json, progress)
    except m.SimulatorPanic as e:
        raise SimulatorPanic(str(e)) from None


def canonical_json(obj: Any) -> str:
    """The one serialisation of a config: sorted keys, no spaces (what run ids hash and workers receive)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def simulate(config: dict[str, Any], progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One simulation of a SimConfig dict (see iosched.simconfig); returns the SimResult dict."""
    return json.loads(simulate_json(canonical_json(config), progress))


def version() -> str:
    return _module().version()


def source_digest() -> str:
    """The digest of the simulator's Rust sources, embedded at build time (part of the code version)."""
    return _module().source_digest()


def schedulers() -> tuple[str, ...]:
    """Every scheduler name the simulator accepts (one list, kept in iosched-policy)."""
    return tuple(_module().schedulers())


def known_schedulers() -> tuple[str, ...] | None:
    """`schedulers()`, or None without the simulator: name checks are then skipped (nothing can run without it;
    the check happens where the simulator is called)."""
    return schedulers() if available() else None


def scheduler_registry() -> dict[str, dict[str, Any]] | None:
    """The simulator's schedulers by name (iosched-policy's registry), each a dict of ``block_layers`` (default
    first), ``kernel`` ("mainline" or "simulator-only"), ``description`` and ``elevator`` (False for ``none``, which
    has no scheduler costs); None without the native module."""
    if not available():
        return None
    return {row["name"]: row for row in _module().scheduler_registry()}


def block_layers(name: str) -> tuple[str, ...] | None:
    """The block layers scheduler ``name`` runs on, its default first; None for an unknown name."""
    layers = _module().block_layers(name)
    return tuple(layers) if layers is not None else None


def scheduler_tunables(name: str) -> list[tuple[str, int]] | None:
    """A scheduler's tunables (sysfs name, default value) as the simulator has them; None for an unknown name."""
    return _module().scheduler_tunables(name)


def tunable_error(name: str, tunables: list[tuple[str, int]]) -> tuple[str, str] | None:
    """The first of ``tunables`` (set in order, as a run does) that scheduler ``name`` refuses, and why."""
    return _module().tunable_error(name, tunables)


def scheduler_metrics(name: str) -> int | None:
    """How many time-series metrics scheduler ``name`` reports per device and sample (None for an unknown name)."""
    return _module().scheduler_metrics(name)


def kernel_changes() -> list[dict[str, Any]]:
    """Every kernel change the simulator models, oldest first: since, commit, title, behaviour, backports."""
    return list(_module().kernel_changes())


def trace_summary(*args: Any) -> str:
    """The simulator's trace parser over a whole trace (see iosched.replay.summarize): JSON, a summary or an error.
    Interruptible as `simulate_json` is."""
    m = _module()
    try:
        return m.trace_summary(*args)
    except m.SimulatorPanic as e:
        raise SimulatorPanic(str(e)) from None
