"""Preset files: writing a fitted preset, and presets given as files (a temporary presets tree)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import presets, store
from ..errors import SpecError

def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_preset(path: Path, kind: str, description: str, key_figures: dict[str, str], params: dict,
                 prov: dict[str, str]) -> None:
    lines = ["# Written by iosched calibrate; the method is in docs/calibration.md.",
             f'kind = "{kind}"', f'name = "{path.stem}"', f"description = {_toml_value(description)}", "seeds = []",
             "", "[key_figures]"]
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in key_figures.items()]
    tables = {k: v for k, v in params.items() if isinstance(v, dict)}
    lines += ["", "[params]"] + [f"{k} = {_toml_value(v)}" for k, v in params.items() if not isinstance(v, dict)]
    for name, table in tables.items():
        for sub, inner in ((name, table),) if not any(isinstance(x, dict) for x in table.values()) else \
                [(f'{name}.{json.dumps(k)}', x) for k, x in table.items()]:
            lines += ["", f"[params.{sub}]"] + [f"{k} = {_toml_value(v)}" for k, v in inner.items()]
    lines += ["", "[provenance]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in prov.items()]
    store.write_text(path.parent, path.name, "\n".join(lines) + "\n")       # the preset file the user named


# ---------------------------------------------------------------------------------------------------------------
# Presets given as a name or as a path: a temporary presets tree holding the shipped ones plus the given files.

class PresetTree:
    def __init__(self, device: str, host: str | None):
        self.tmp = Path(tempfile.mkdtemp(prefix="iosched-presets-"))
        root = presets.presets_dir()
        for sub in ("devices", "hosts"):
            shutil.copytree(root / sub, self.tmp / sub)
        self.device = self._add(device, "device", "devices", "--preset")
        self.host = self._add(host, "host", "hosts", "--host") if host else None
        self.old = os.environ.get("IOSCHED_PRESETS")
        os.environ["IOSCHED_PRESETS"] = str(self.tmp)

    def _add(self, given: str, kind: str, sub: str, flag: str) -> str:
        if given.endswith(".toml") or "/" in given:
            path = Path(given)
            if not path.is_file():
                raise SpecError(flag, None, f"no such preset file: {given}")
            presets.load_preset_file(path, kind)
            shutil.copy(path, self.tmp / sub / path.name)
            return path.stem
        return given

    def close(self) -> None:
        if self.old is None:
            os.environ.pop("IOSCHED_PRESETS", None)
        else:
            os.environ["IOSCHED_PRESETS"] = self.old
        presets._cache.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
