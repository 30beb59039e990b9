"""`iosched export --bench-fio OUT DIR`: a results folder in bench-fio's layout, for fio-plot.

bench-fio (fio-plot's benchmark driver) writes, per device and block size, one fio JSON per (rw, iodepth, numjobs)
and fio's logs named after them; fio-plot reads that layout (`-i OUT/<experiment>/<variant>/<bs> -r randread -L`,
`-g` for the logs). Each run's first job is the one bench-fio would have run: its rw, bs, iodepth and numjobs name
the files, and its logs (IOPS, bandwidth, latency) are written from the run's samples at the run's sample
interval; a measured run (kernel or VM backend) brings fio's own json+ and logs, renamed. A variant is what else
tells runs apart (the scheduler, its tunables, the other swept variables)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from . import store
from .errors import SpecError
from .results import log_files


def _bs(nbytes: int) -> str:
    for unit, size in (("m", 1 << 20), ("k", 1 << 10)):
        if nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return str(nbytes)


def _variant(spec: dict[str, Any], first_job: str) -> str:
    """The scheduler, its tunables and every swept variable but the first job's iodepth and numjobs."""
    parts = [spec["scheduler"]] + [f"{k}-{v}" for k, v in sorted(spec.get("tunables", {}).items())]
    for k, v in sorted(spec.get("sweep_point", {}).items()):
        if k in ("scheduler.name", f"job.{first_job}.iodepth", f"job.{first_job}.numjobs") or \
                k.startswith("scheduler."):
            continue
        parts.append(f"{k}-{v}")
    return re.sub(r"[^A-Za-z0-9._+-]", "_", "_".join(str(p) for p in parts))


def export_bench_fio(results: Path, out: Path) -> tuple[list[Path], dict[str, int]]:
    """Write every finished run of ``results`` (repetition 0) into ``out`` in bench-fio's layout; returns the JSON
    files written and how many runs were left out, by why (other repetitions; runs without recorded job configs;
    runs whose first job replays a trace, which has no rw and iodepth to be named by)."""
    results, out = Path(results), Path(out)
    rids = store.finished_runs(results)
    if not rids:
        raise SpecError(str(results), None, "no finished runs here (the --out folder of iosched run)")
    written: list[Path] = []
    left_out: dict[str, int] = {}
    for rid in rids:
        spec = store.load_run_spec(results, rid)
        measured = "sim_config" not in spec
        jobs = [j["config"] for j in spec.get("jobs", [])] if measured else spec["sim_config"]["jobs"]
        why = ("a repetition other than 0" if spec.get("repetition", 0) != 0 else
               "no job configs recorded (a run of an older iosched)" if not jobs or "rw" not in jobs[0] else
               "a trace replay" if "trace" in jobs[0] else None)
        if why:
            left_out[why] = left_out.get(why, 0) + 1
            continue
        first = jobs[0]
        rw, depth, numjobs = first["rw"], first["iodepth"], first["numjobs"]
        folder = f"{spec['experiment']}/{_variant(spec, first['name'])}/{_bs(first['bs_bytes'])}"
        doc = json.loads((store.run_dir(results, rid) / "fio.json").read_text())
        for job in doc["jobs"]:
            # bench-fio always sets them, and fio-plot reads them from every job's options.
            config = next((c for c in jobs if c["name"] == job["jobname"]), first)
            opts = job["job options"]
            opts.setdefault("rw", config["rw"])
            opts.setdefault("bs", _bs(config["bs_bytes"]))
            opts.setdefault("iodepth", str(config["iodepth"]))
            opts.setdefault("numjobs", str(config["numjobs"]))
        name = f"{rw}-{depth}-{numjobs}"
        written.append(store.write_text(out, f"{folder}/{name}.json", json.dumps(doc, indent=2) + "\n"))
        prefix = f"{rw}-iodepth-{depth}-numjobs-{numjobs}"
        if measured:
            # fio's own logs of the first job (iosched's IOPS log j0, or the job's own logs), renamed.
            own = spec["jobs"][0]
            for path in sorted((store.run_dir(results, rid) / "logs").glob("*.log")):
                match = re.fullmatch(r"(.+)_(bw|iops|lat|clat|slat)\.(\d+)\.log", path.name)
                if match and match[1] in ("j0", *_own_prefixes(own)):
                    store.write_file(out, f"{folder}/{prefix}_{match[2]}.{match[3]}.log", path.read_bytes())
            continue
        result = json.loads(gzip.decompress((store.run_dir(results, rid) / "result.json.gz").read_bytes()))
        logs = log_files([(first, {"bw": prefix, "iops": prefix, "lat": prefix})] +
                         [(c, {}) for c in jobs[1:]], result)
        for rel, text in logs.items():
            store.write_text(out, f"{folder}/{Path(rel).name}", text)
    return written, left_out


def _own_prefixes(job: dict[str, Any]) -> list[str]:
    """The log prefixes a measured run's first job set itself (write_*_log in its options)."""
    opts = job.get("options", {})
    return [v or job["name"] for k, v in opts.items() if k in ("write_bw_log", "write_iops_log", "write_lat_log")]
