import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from iosched import presets
from iosched.cli import main
from iosched.errors import SpecError

from .conftest import DATA, REPO


def test_repo_presets_load_with_full_provenance(monkeypatch):
    """Every preset shipped in presets/ loads, matches config.rs's fields and has provenance for every leaf."""
    root = REPO / "presets"
    files = sorted(root.glob("*/*.toml")) if root.is_dir() else []
    if not files:
        pytest.skip("presets/ has no presets yet")
    monkeypatch.setenv("IOSCHED_PRESETS", str(root))
    loaded = presets.list_presets(root)
    assert len(loaded) == len(files)
    for p in loaded:
        for key, _ in p.leaves():
            assert p.provenance_for(key), f"{p.path}: {key} has no provenance"


def test_fixture_presets():
    loaded = presets.list_presets(DATA / "presets")
    assert {(p.kind, p.name) for p in loaded} == {("device", "samsung-980pro-1tb"), ("host", "xeon-silver-4210r-10c")}
    host = presets.load_preset("host", "xeon-silver-4210r-10c")
    assert host.provenance["io_uring.submit_ns"] == "fixture"
    assert host.params["io_uring"]["submit_ns"] == 1500


def _copy(tmp_path):
    dst = tmp_path / "presets"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(DATA / "presets", dst)
    return dst / "hosts" / "xeon-silver-4210r-10c.toml"


def test_missing_provenance_is_an_error(tmp_path):
    f = _copy(tmp_path)
    f.write_text(f.read_text().replace('"io_uring.complete_ns" = "fixture"\n', ""))
    with pytest.raises(SpecError) as e:
        presets.load_preset_file(f, "host")
    assert str(e.value) == f"{f}: provenance.io_uring.complete_ns: missing provenance for this parameter"


def test_unknown_param_and_stray_provenance(tmp_path):
    f = _copy(tmp_path)
    f.write_text(f.read_text().replace("cores = 10\n", "cores = 10\nturbo = 1\n", 1))
    with pytest.raises(SpecError, match="params.turbo: unknown parameter"):
        presets.load_preset_file(f, "host")
    f = _copy(tmp_path)
    f.write_text(f.read_text() + 'bogus = "x"\n')
    with pytest.raises(SpecError, match="provenance.bogus: provenance for a parameter that is not in"):
        presets.load_preset_file(f, "host")


def test_device_features_that_are_off_when_left_out_refuse_zero(tmp_path):
    """gc_step_copies, gc_step_units, buffer_fill_bytes_per_s, read_buffer_bytes and read_suspend_limit switch a
    mechanism on; 0 would mean nothing sensible, so the preset names the parameter and the file (the simulator
    refuses it too)."""
    dst = tmp_path / "presets"
    shutil.copytree(DATA / "presets", dst)
    f = dst / "devices" / "samsung-980pro-1tb.toml"
    text = f.read_text()
    presets.load_preset_file(f, "device")  # positive control: the fixture leaves them out
    for key in ("gc_step_copies", "gc_step_units", "buffer_fill_bytes_per_s", "read_buffer_bytes",
                "read_suspend_limit"):
        f.write_text(text.replace("[provenance]\n", f'[provenance]\n{key} = "fixture"\n', 1)
                     .replace("[params]\n", f"[params]\n{key} = 0\n", 1))
        with pytest.raises(SpecError) as e:
            presets.load_preset_file(f, "device")
        assert str(e.value) == f"{f}: params.{key}: expected an integer >= 1, got 0"
        f.write_text(text.replace("[provenance]\n", f'[provenance]\n{key} = "fixture"\n', 1)
                     .replace("[params]\n", f"[params]\n{key} = 4\n", 1))
        presets.load_preset_file(f, "device")


def test_cache_program_is_true_or_false(tmp_path):
    """cache_program switches a mechanism on or off: a number (1, as another flag might be written) is refused with
    the file and the parameter named; true and false load."""
    dst = tmp_path / "presets"
    shutil.copytree(DATA / "presets", dst)
    f = dst / "devices" / "samsung-980pro-1tb.toml"
    text = f.read_text().replace("[provenance]\n", '[provenance]\ncache_program = "fixture"\n', 1)
    for value in ("true", "false"):
        f.write_text(text.replace("[params]\n", f"[params]\ncache_program = {value}\n", 1))
        assert presets.load_preset_file(f, "device").params["cache_program"] is (value == "true")
    f.write_text(text.replace("[params]\n", "[params]\ncache_program = 1\n", 1))
    with pytest.raises(SpecError) as e:
        presets.load_preset_file(f, "device")
    assert str(e.value) == f"{f}: params.cache_program: expected true or false, got 1"


def test_presets_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("IOSCHED_PRESETS", str(tmp_path))
    assert presets.presets_dir() == tmp_path
    monkeypatch.delenv("IOSCHED_PRESETS")
    assert presets.presets_dir().name == "presets"


def test_presets_cli():
    res = CliRunner().invoke(main, ["presets"])
    assert res.exit_code == 0, res.output
    assert "samsung-980pro-1tb" in res.output and "xeon-silver-4210r-10c" in res.output
    res = CliRunner().invoke(main, ["presets", "xeon-silver-4210r-10c"])
    assert res.exit_code == 0 and "io_uring.submit_ns" in res.output and "fixture" in res.output
    res = CliRunner().invoke(main, ["presets", "nope"])
    assert res.exit_code == 2 and res.output.startswith('error: unknown preset "nope"')


def test_scheduler_costs_for_a_scheduler_without_an_elevator_are_refused(tmp_path):
    from .conftest import native_or_skip
    native_or_skip()
    f = _copy(tmp_path)
    presets.load_preset_file(f, "host")  # positive control: the fixture's costs are all for elevators
    text = f.read_text()
    f.write_text(text.replace("[params.scheduler_costs.bfq]", "[params.scheduler_costs.none]")
                 .replace('"scheduler_costs.bfq" = "fixture"', '"scheduler_costs.none" = "fixture"'))
    with pytest.raises(SpecError) as e:
        presets.load_preset_file(f, "host")
    assert str(e.value) == (f"{f}: params.scheduler_costs.none: none has no elevator and runs no scheduler hooks, "
                            "so it costs nothing: remove the entry")



def test_every_host_preset_names_the_kernel_its_paper_ran():
    """The kernel key of each host preset, as its seed's paper states it (seed 003 ran on seed 000's machine), and
    the VM lab's own kernel for its guest."""
    root = REPO / "presets"
    kernels = {p.name: p.params["kernel"] for p in presets.list_presets(root) if p.kind == "host"}
    assert kernels == {"xeon-silver-4210r-10c": "6.3", "i5-4590-4c": "4.15", "2x-e5-2620-16c": "5.2",
                       "i7-3517u-4c": "4.19", "lab-tcg-2vcpu": "6.12.117"}


def test_a_host_preset_without_a_kernel_or_with_a_bad_one_is_refused(tmp_path):
    f = _copy(tmp_path)
    presets.load_preset_file(f, "host")  # positive control
    f.write_text(f.read_text().replace('kernel = "6.3"\n', "", 1).replace('kernel = "fixture"\n', ""))
    with pytest.raises(SpecError) as e:
        presets.load_preset_file(f, "host")
    assert str(e.value) == f"{f}: params.kernel: missing parameter"
    f = _copy(tmp_path)
    f.write_text(f.read_text().replace('kernel = "6.3"\n', 'kernel = "6.3.8.1"\n', 1))
    with pytest.raises(SpecError) as e:
        presets.load_preset_file(f, "host")
    assert str(e.value) == (f'{f}: params.kernel: expected a kernel version "MAJOR.MINOR" or "MAJOR.MINOR.PATCH" '
                            'such as "6.3" or "6.12.117", got "6.3.8.1"')


def test_scheduler_dispatch_is_inline_or_kblockd(tmp_path):
    """host.scheduler_dispatch: optional (the simulator's default is "inline"); any other value is one clear line."""
    f = _copy(tmp_path)
    text = f.read_text()
    good = text.replace("cores = 10\n", 'cores = 10\nscheduler_dispatch = "kblockd"\n', 1) + \
        'scheduler_dispatch = "fixture"\n'
    f.write_text(good)
    assert presets.load_preset_file(f, "host").params["scheduler_dispatch"] == "kblockd"
    f.write_text(good.replace('scheduler_dispatch = "kblockd"', 'scheduler_dispatch = "sync"'))
    with pytest.raises(SpecError) as e:
        presets.load_preset_file(f, "host")
    assert str(e.value) == f'{f}: params.scheduler_dispatch: expected "inline" or "kblockd", got \'sync\''


def test_hz_is_the_kernels_tick_rate(tmp_path):
    """host.hz: optional (the simulator's default is 1000); the lab's preset has its guest kernel's CONFIG_HZ, 250.
    A rate no kernel has (0, or 20000 ticks per second) is one clear line."""
    assert presets.load_preset("host", "lab-tcg-2vcpu").params["hz"] == 250
    assert "hz" not in presets.load_preset("host", "xeon-silver-4210r-10c").params
    f = _copy(tmp_path)
    text = f.read_text().replace("cores = 10\n", "cores = 10\nhz = 300\n", 1) + 'hz = "fixture"\n'
    f.write_text(text)
    assert presets.load_preset_file(f, "host").params["hz"] == 300
    for bad in (0, 20000):
        f.write_text(text.replace("hz = 300", f"hz = {bad}"))
        with pytest.raises(SpecError) as e:
            presets.load_preset_file(f, "host")
        assert str(e.value) == (f"{f}: params.hz: expected the kernel's tick rate, 1 to 10000 per second "
                                f"(CONFIG_HZ: 100, 250, 300 or 1000), got {bad}")


@pytest.mark.parametrize("field", ["timer_lateness", "wake_lateness"])
def test_timer_and_wake_lateness_are_tables_of_quantiles_by_duration(tmp_path, field):
    """host.timer_lateness and wake_lateness: optional; ascending quantiles in (0, 1), ascending durations, one
    non-decreasing row per duration. The lab's own preset has both; made-up tables of the wrong shape are one clear
    line each, naming the field."""
    assert presets.load_preset("host", "lab-tcg-2vcpu").params[field]["durations_ns"][0] == 500_000
    f = _copy(tmp_path)
    base = f.read_text().replace("[provenance]", f"[provenance]\n{field} = \"fixture\"", 1)
    table = (f"\n[params.{field}]\nquantiles = {{q}}\ndurations_ns = [1000000, 2000000]\n"
             "late_ns = {late}\n")
    ok = {"q": "[0.1, 0.5, 0.9]", "late": "[[1, 2, 3], [2, 4, 6]]"}
    head, sep, tail = base.partition("\n[provenance]")

    def write(**kw):
        f.write_text(head + table.format(**dict(ok, **kw)) + sep + tail)

    write()
    assert presets.load_preset_file(f, "host").params[field]["late_ns"] == [[1, 2, 3], [2, 4, 6]]
    for kw, key in (({"q": "[0.5, 0.1, 0.9]"}, "quantiles"), ({"q": "[0.1, 0.5, 1.0]"}, "quantiles"),
                    ({"late": "[[1, 2, 3]]"}, "late_ns"), ({"late": "[[3, 2, 1], [2, 4, 6]]"}, "late_ns")):
        write(**kw)
        with pytest.raises(SpecError) as e:
            presets.load_preset_file(f, "host")
        assert str(e.value).startswith(f"{f}: params.{field}.{key}: expected"), str(e.value)


def _own_device(folder, name="my-ssd", command_ns=999):
    """A device preset of one's own: the fixture's 980 PRO under another name and command_ns."""
    text = (DATA / "presets" / "devices" / "samsung-980pro-1tb.toml").read_text()
    path = folder / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = next(line for line in text.splitlines() if line.startswith("command_ns = "))
    path.write_text(text.replace('name = "samsung-980pro-1tb"', f'name = "{name}"')
                    .replace(old, f"command_ns = {command_ns}"))
    return path


SPEC = 'duration = "5ms"\n{devices}\n[[job]]\nname = "r"\nrw = "randread"\n'


def _device(tmp_path, devices, name="s.toml", **overrides):
    from iosched.spec import Overrides, expand_runs, load_experiment
    spec = tmp_path / name
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(SPEC.format(devices=devices))
    (run,) = expand_runs(load_experiment(str(spec), Overrides(**overrides)))
    return run


def test_a_preset_file_is_taken_wherever_a_name_is(tmp_path, monkeypatch):
    """A spec's preset file is relative to the spec's folder, --device's to the working directory; the file must
    be a preset of the kind asked for, named after itself (the negative controls)."""
    _own_device(tmp_path / "spec" / "presets")
    run = _device(tmp_path, 'devices = [{ preset = "presets/my-ssd.toml" }]', name="spec/s.toml")
    assert run.devices[0]["command_ns"] == 999 and run.device_presets == ["my-ssd"]
    monkeypatch.chdir(tmp_path)
    _own_device(tmp_path / "mine", command_ns=1234)
    run = _device(tmp_path, "", name="spec/t.toml", device="mine/my-ssd.toml")
    assert run.devices[0]["command_ns"] == 1234
    with pytest.raises(SpecError, match=r"devices\[0\].preset: no such preset file \"nope.toml\" \(relative to "):
        _device(tmp_path, 'devices = [{ preset = "nope.toml" }]')
    host = DATA / "presets" / "hosts" / "xeon-silver-4210r-10c.toml"
    with pytest.raises(SpecError, match=r'kind: expected "device" for a file in devices/, got .host.'):
        _device(tmp_path, f'devices = [{{ preset = "{host}" }}]')


def test_iosched_presets_adds_folders_before_the_shipped_ones(tmp_path, monkeypatch):
    """IOSCHED_PRESETS=A:B: a name is A's, else B's, else a shipped preset's; one's own folder adds presets
    without hiding the others."""
    mine = tmp_path / "mine"
    _own_device(mine / "devices")
    monkeypatch.setenv("IOSCHED_PRESETS", f"{mine}{os.pathsep}{DATA / 'presets'}")
    presets._cache.clear()
    assert presets.load_preset("device", "my-ssd").params["command_ns"] == 999
    assert presets.load_preset("host", "xeon-silver-4210r-10c").provenance["io_uring.submit_ns"] == "fixture"
    names = {(p.kind, p.name) for p in presets.list_presets()}
    shipped = {(p.kind, p.name) for p in presets.list_presets(REPO / "presets")}
    assert ("device", "my-ssd") in names and shipped <= names
    assert presets.preset_roots()[:2] == [mine, DATA / "presets"]
    with pytest.raises(SpecError, match='unknown device preset "nope" .have: .*my-ssd'):
        presets.load_preset("device", "nope")


def test_a_spec_overrides_single_preset_parameters(tmp_path):
    """devices = [{ preset = ..., set = { command_ns = 1400 } }] and [host] set = {...}: the run's config has
    the values and its record names them; each value is checked as in a preset, and an unknown key, the
    interface or a bad value is one line naming it (the negative controls)."""
    plain = _device(tmp_path, "")
    run = _device(tmp_path, 'devices = [{ preset = "samsung-980pro-1tb", set = { command_ns = 1400 } }]\n'
                            '[host]\nset = { context_switch_ns = 2500 }')
    assert plain.devices[0]["command_ns"] != 1400 and run.devices[0]["command_ns"] == 1400
    assert run.host["context_switch_ns"] == 2500 and plain.host["context_switch_ns"] != 2500
    assert run.device_presets == ["samsung-980pro-1tb (set command_ns=1400)"]
    assert run.host_preset == "xeon-silver-4210r-10c (set context_switch_ns=2500)"
    for table, why in [("{ bogus = 1 }", r"devices\[0\].set.bogus: unknown device parameter"),
                       ('{ interface = "sata" }', r"devices\[0\].set.interface: unknown device parameter"),
                       ("{ command_ns = -5 }", r"devices\[0\].set.command_ns: expected an integer >= 0, got -5"),
                       ("{ trimmed_fraction = 2.0 }", r"devices\[0\].set.trimmed_fraction: expected a number in")]:
        with pytest.raises(SpecError, match=why):
            _device(tmp_path, f'devices = [{{ preset = "samsung-980pro-1tb", set = {table} }}]')
    with pytest.raises(SpecError, match=r"host.set.cores: expected an integer >= 1, got 0"):
        _device(tmp_path, "[host]\nset = { cores = 0 }")


GREEDY_GC = REPO / "scripts" / "greedy-gc"


def _greedy_gc(*args: str) -> list[str]:
    """scripts/greedy-gc's result lines (its header dropped), on 400 blocks to keep it to a second or so."""
    return subprocess.run([sys.executable, str(GREEDY_GC), *args, "--blocks", "400"], check=True,
                          capture_output=True, text=True).stdout.splitlines()[1:]


def test_the_drives_gc_formula_follows_greedy_gc_simulated_page_by_page():
    """scripts/greedy-gc simulates greedy garbage collection page by page. The device model's victims' valid
    fraction (greedy's large-block limit, u = exp(-(1 - u) / rho)) follows it where the live data fills most of the
    flash (rho = 0.91, the 980 PRO with nothing freed: 0.826 against ~0.82) and where half of it is spare (rho =
    0.455, the 970 EVO half trimmed: 0.157 against ~0.15); the first-order formula the model used before (the
    negative control) follows it only in the first case and gives 0 in the second, as docs/simulator.md says."""
    rows = [[float(x) for x in line.replace("/", " ").split()] for line in _greedy_gc("0.91", "0.455")]
    (rho_full, greedy_full, model_full, old_full, _, _), (rho_half, greedy_half, model_half, old_half, _, _) = rows
    assert (rho_full, rho_half) == (0.91, 0.455)
    assert model_full == pytest.approx(0.826, abs=1e-3) and model_half == pytest.approx(0.157, abs=1e-3)
    assert abs(greedy_full - model_full) < 0.02 and abs(greedy_half - model_half) < 0.02
    assert abs(greedy_full - old_full) < 0.02 and old_half == 0.0 and greedy_half > 0.12
    bad = subprocess.run([sys.executable, str(GREEDY_GC), "1.5"], capture_output=True, text=True)
    assert bad.returncode == 2 and "rho 1.5: must be in (0, 1)" in bad.stderr


def test_lockstep_writers_cost_greedy_gc_less_only_with_the_collectors_blocks_apart():
    """Eight writers of one random sequence (each page written 8 times in a row), rho 0.91: with the collector's moved
    pages in the host's open block greedy GC copies more per host write than for one writer (docs/simulator.md: ~9.7
    against ~5.4), with them in blocks of their own far less (~1.7), the growth docs/papers.md compares with the
    ICPE'24 artifact's writers."""
    def wa(*flags: str) -> float:
        return float(_greedy_gc("0.91", *flags)[0].split()[-3])
    one, mixed, apart = wa(), wa("--writers", "8"), wa("--writers", "8", "--gc-blocks-apart")
    assert 5.0 < one < 6.0 and mixed > 1.5 * one and apart < 2.0


def test_the_drives_young_rewrite_formula_follows_greedy_gc_with_lockstep_writers():
    """Two and three writers in lockstep, the collector's blocks apart, with 256-page blocks: the write amplification
    greedy GC gives page by page and the young-rewrite formula (docs/simulator.md; its second regime at rho 0.5, v0
    above u1 = 0.203, its first at 0.8 with three, v0 = 0.333 below u1 = 0.629) agree within 0.02: 1.451 / 1.453 and
    1.897 / 1.898 on 1,500 blocks. Negative control: one writer's cost at the same rho, 1.255 and 2.693, is off by
    more than 0.15."""
    def row(rho: str, writers: str) -> list[float]:
        line = _greedy_gc(rho, "--writers", writers, "--gc-blocks-apart", "--block-pages", "256")[0]
        return [float(x) for x in line.replace("/", " ").split()]
    for rho, writers, single in (("0.5", "2", 1.255), ("0.8", "3", 2.693)):
        *_, simulated, formula = row(rho, writers)
        assert abs(simulated - formula) < 0.02, (rho, writers, simulated, formula)
        assert abs(simulated - single) > 0.15
