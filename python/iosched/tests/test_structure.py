"""The package's shape: every module imports on its own, the import graph has no cycle (imports inside functions
included), and `python -m iosched.cli --help` lists every command. Each check has a negative control: a made-up
case it must flag."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]          # python/iosched
ROOT = PACKAGE.parent                                  # python/


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(package: Path) -> dict[str, Path]:
    """Every module of the package (tests excepted), by dotted name."""
    root = package.parent
    return {module_name(p, root): p for p in sorted(package.rglob("*.py"))
            if "tests" not in p.relative_to(package).parts}


# ---------------------------------------------------------------- the import graph

def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports, anywhere in it (inside functions and
    under `if TYPE_CHECKING` too), relative imports resolved; ``from pkg import mod`` counts as importing pkg.mod."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()

    def add(target: str) -> None:
        # The module itself, or (for `import a.b.c` of something not a module) its nearest known parent.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                full = f"{prefix}.{alias.name}"
                if full in known:
                    add(full)        # `from . import store`: the submodule
                else:
                    add(prefix)      # `from .store import load`: the module holding the name
    return found


def extension_modules(package: Path) -> set[str]:
    """Compiled modules of the package (iosched._native): leaves of the graph, imported by name."""
    root = package.parent
    return {module_name(p.with_name(p.name.split(".")[0] + ".py"), root) for p in package.rglob("*.so")}


def import_graph(modules: dict[str, Path], leaves: set[str] = frozenset()) -> dict[str, set[str]]:
    known = set(modules) | set(leaves)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_package_has_no_import_cycle():
    modules = package_modules(PACKAGE)
    assert "iosched.cli" in modules and "iosched.papers.registry" in modules
    graph = import_graph(modules, extension_modules(PACKAGE) | {"iosched._native"})   # built or not
    assert "iosched.store" in graph["iosched.report.build"], "the walker sees imports"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_check_flags_a_cycle_hidden_in_a_function(tmp_path):
    """Negative control: a made-up two-module package whose cycle is closed by an import inside a function."""
    pkg = tmp_path / "made_up"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rows.py").write_text("from .files import write\n\ndef row():\n    return 1\n")
    (pkg / "files.py").write_text("def write():\n    from . import rows\n    return rows.row()\n")
    graph = import_graph(package_modules(pkg))
    assert graph["made_up.rows"] == {"made_up.files"} and graph["made_up.files"] == {"made_up.rows"}
    assert find_cycle(graph) in (["made_up.files", "made_up.rows", "made_up.files"],
                                 ["made_up.rows", "made_up.files", "made_up.rows"])
    (pkg / "files.py").write_text("def write():\n    return 1\n")
    assert find_cycle(import_graph(package_modules(pkg))) is None


def test_relative_imports_resolve_to_modules(tmp_path):
    for rel in ("p/__init__.py", "p/a.py", "p/sub/__init__.py", "p/sub/c.py", "p/sub/d.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "p/sub/b.py").write_text("from .. import a\nfrom .c import y\n\ndef f():\n    import p.sub.d.x\n")
    graph = import_graph(package_modules(tmp_path / "p"))
    assert graph["p.sub.b"] == {"p.a", "p.sub.c", "p.sub.d"}
    (tmp_path / "p/sub/__init__.py").write_text("from . import b\n")
    assert graph["p.sub"] == set() and import_graph(package_modules(tmp_path / "p"))["p.sub"] == {"p.sub.b"}


def importers(graph: dict[str, set[str]], target: str) -> set[str]:
    return {name for name, deps in graph.items() if target in deps}


def test_only_the_facade_imports_the_native_module():
    modules = package_modules(PACKAGE)
    modules.update({module_name(p, ROOT): p for p in (PACKAGE / "tests").glob("*.py")})    # the tests too
    graph = import_graph(modules, {"iosched._native"})
    assert importers(graph, "iosched._native") == {"iosched.native"}


def test_the_facade_check_flags_another_importer(tmp_path):
    """Negative control: a made-up module that imports the native module itself, inside a function."""
    pkg = tmp_path / "iosched"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "native.py").write_text("def simulate():\n    from . import _native\n")
    (pkg / "sweep.py").write_text("def run():\n    from iosched import _native\n")
    graph = import_graph(package_modules(pkg), {"iosched._native"})
    assert importers(graph, "iosched._native") == {"iosched.native", "iosched.sweep"}


# ---------------------------------------------------------------- each module alone

@pytest.mark.parametrize("name", sorted(package_modules(PACKAGE)))
def test_each_module_imports_alone_in_a_fresh_interpreter(name):
    res = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0, res.stderr


def test_a_module_that_fails_alone_is_flagged(tmp_path):
    """Negative control: a module that works only after another has been imported (a partial import cycle) fails
    when imported alone."""
    pkg = tmp_path / "made_up"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\nVALUE = 1\n")
    (pkg / "b.py").write_text("from .a import VALUE\n")
    res = subprocess.run([sys.executable, "-c", "import made_up.a"], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0 and "partially initialized module" in res.stderr


# ---------------------------------------------------------------- the CLI as a module

def help_commands(module: str, cwd: Path) -> set[str]:
    """The commands `python -m MODULE --help` lists."""
    res = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=cwd,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split("Commands:", 1)[1].splitlines()
    return {line.split()[0] for line in lines if line.startswith("  ") and line.split()}


def test_python_m_iosched_cli_help_lists_every_command():
    from iosched.cli import main

    assert set(main.commands) >= {"run", "reproduce", "report", "calibrate", "validate"}
    assert help_commands("iosched.cli", ROOT) == set(main.commands)


def test_the_help_check_flags_commands_declared_after_main(tmp_path):
    """Negative control: `if __name__ == "__main__": main()` before a command hides it from `python -m`."""
    (tmp_path / "made_up_cli.py").write_text(textwrap.dedent('''
        import click

        @click.group()
        def main():
            """A made-up CLI."""

        @main.command()
        def first():
            """Declared before the entry point."""

        if __name__ == "__main__":
            main()

        @main.command()
        def late():
            """Declared after it."""
        '''))
    assert help_commands("made_up_cli", tmp_path) == {"first"}


# ---------------------------------------------------------------- dependencies

def third_party_imports(paths: list[Path]) -> set[str]:
    """Top-level names of the modules imported (anywhere) by these files, other than the standard library's and
    iosched's own."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            found.update(n.split(".")[0] for n in names)
    return {n for n in found if n not in sys.stdlib_module_names and n != "iosched"}


def import_name(requirement: str) -> str:
    """The module a requirement provides: "dask[distributed]" -> distributed, "dask-jobqueue>=1" -> dask_jobqueue."""
    name = requirement
    for sep in "<>=!~; ":
        name = name.split(sep)[0]
    if "[" in name:
        name = name.split("[")[1].rstrip("]")
    return name.lower().replace("-", "_")


def dependency_mismatch(declared: set[str], imported: set[str]) -> tuple[set[str], set[str]]:
    """(declared but never imported, imported but not declared)."""
    return declared - imported, imported - declared


def test_declared_dependencies_are_exactly_those_imported():
    import tomllib

    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["project"]
    runtime = {import_name(r) for r in project["dependencies"] + project["optional-dependencies"]["cluster"]}
    sources = [p for p in PACKAGE.rglob("*.py") if "tests" not in p.relative_to(PACKAGE).parts]
    assert dependency_mismatch(runtime, third_party_imports(sources)) == (set(), set())
    tests = [p for p in PACKAGE.rglob("*.py") if "tests" in p.relative_to(PACKAGE).parts]
    test_extra = {import_name(r) for r in project["optional-dependencies"]["test"]}
    unused, _ = dependency_mismatch(test_extra, third_party_imports(tests + sources))
    assert unused == set()


def test_the_dependency_check_flags_unused_and_undeclared(tmp_path):
    """Negative control: a made-up module that declares pydantic without importing it, and imports numpy (inside a
    function) without declaring it."""
    source = tmp_path / "made_up.py"
    source.write_text("import os\nimport click\nfrom . import sibling\n\ndef f():\n    import numpy.linalg\n")
    assert import_name("dask[distributed]") == "distributed" and import_name("pydantic>=2") == "pydantic"
    declared = {import_name(r) for r in ("click>=8", "pydantic>=2")}
    assert dependency_mismatch(declared, third_party_imports([source])) == ({"pydantic"}, {"numpy"})
