"""The shape of kit/: the floors of docs/architecture.md, no import cycles, no borrowed private names.

The floor table in docs/architecture.md is the rule; this test reads it and scans every
import in kit/ with ast, lazy ones inside functions included.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "kit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 900


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(KIT.rglob("*.py"))}


def _floors() -> dict[str, int]:
    """{"kit/hosts/": 1, "kit/target.py": 2, ...} from the floor table of docs/architecture.md."""
    floors = {}
    for floor, cells in re.findall(r"^\| (\d+) \| (.+?) \|", ARCHITECTURE.read_text(), re.M):
        for path in re.findall(r"`(kit/[^`]+)`", cells):
            floors[path] = int(floor)
    return floors


FLOORS = _floors()


def _floor_of(module: str) -> int | None:
    path = MODULES[module].relative_to(ROOT).as_posix()
    for prefix, floor in FLOORS.items():
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            return floor
    return None


def _imports(module: str) -> list[tuple[int, str, str | None]]:
    """(line, imported module, name or None) for every import of a kit module, anywhere in the file."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "kit"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "kit":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # `from kit.x import y` imports module kit.x.y when y is a submodule, else a name of kit.x
                found.append((node.lineno, sub, None) if sub in MODULES else (node.lineno, base, alias.name))
    return found


def _edges() -> dict[str, set[str]]:
    return {m: {target for _, target, _ in _imports(m) if target in MODULES and target != m} for m in MODULES}


def test_the_floor_table_is_read_and_names_real_paths():
    assert len(FLOORS) >= 15, "docs/architecture.md lost its floor table"
    assert [p for p in FLOORS if not (ROOT / p).exists()] == []


def test_every_module_has_a_floor():
    assert [m for m in MODULES if m != "kit" and _floor_of(m) is None] == []


def test_no_module_imports_a_higher_floor():
    upward = []
    for module in MODULES:
        if module == "kit":
            continue
        for line, target, _ in _imports(module):
            if target in MODULES and target != "kit" and _floor_of(target) > _floor_of(module):
                upward.append(f"{module}:{line} (floor {_floor_of(module)}) imports {target} "
                              f"(floor {_floor_of(target)})")
    assert upward == []


def test_nothing_imports_the_root_package():
    offenders = [f"{m}:{line} imports {name or 'kit'} from the root package"
                 for m in MODULES if m != "kit"
                 for line, target, name in _imports(m) if target == "kit"]
    assert offenders == []


def test_there_is_no_import_cycle():
    edges = _edges()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    for module in sorted(edges):
        if module not in index:
            visit(module)
    assert cycles == []


def _top(module: str) -> str:
    """The part of kit a module belongs to: kit.hosts.ssh -> kit.hosts, kit.target -> kit.target."""
    return ".".join(module.split(".")[:2])


def test_no_private_name_is_borrowed_from_another_package():
    borrowed = [f"{m}:{line} takes {name} from {target}"
                for m in MODULES
                for line, target, name in _imports(m)
                if name and name.startswith("_") and not name.startswith("__") and _top(target) != _top(m)]
    assert borrowed == []


def test_the_lab_never_imports_bench():
    assert [f"{m} imports {t}" for m in MODULES if m.startswith("kit.lab")
            for _, t, _ in _imports(m) if t.startswith("kit.bench")] == []


_SERVER_FINDERS = {"find_lab_server"}


def _notebook_imports(path: Path) -> list[tuple[int, str, str | None]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kit"):
            found += [(node.lineno, node.module, a.name) for a in node.names]
    return found


def test_only_the_lab_imports_kit_lab_to_find_a_server():
    """A target string becomes a server through kit.target.resolve_server alone: nothing outside
    kit/lab/ and kit/cli/lab.py (modules and notebooks) finds a server through kit.lab."""
    outside = [m for m in MODULES if not m.startswith("kit.lab") and m != "kit.cli.lab"]
    found = [f"{m}:{line} takes {name or target} from kit.lab" for m in outside
             for line, target, name in _imports(m)
             if target.startswith("kit.lab") and (name in _SERVER_FINDERS or target == "kit.lab" and name is None
                                                  and _uses_a_finder(MODULES[m]))]
    notebooks = sorted((ROOT / "notebooks").glob("*.py")) + sorted((ROOT / "notebooks").glob("*/*.py"))
    assert notebooks
    found += [f"{p.relative_to(ROOT)}:{line} takes {name} from {module}" for p in notebooks
              for line, module, name in _notebook_imports(p) if module.startswith("kit.lab") and name in _SERVER_FINDERS]
    found += [f"{p.relative_to(ROOT)} calls kit.lab.{name}" for p in notebooks for name in _SERVER_FINDERS
              if _uses_a_finder(p, name)]
    assert found == []


def _uses_a_finder(path: Path, only: str | None = None) -> bool:
    """Whether the file reads ``kit.lab.find_...`` (or ``lab.find_...``) as an attribute."""
    return any(isinstance(n, ast.Attribute) and n.attr in ({only} if only else _SERVER_FINDERS)
               and isinstance(n.value, ast.Name | ast.Attribute)
               for n in ast.walk(ast.parse(path.read_text())))


def test_modules_stay_under_the_size_limit():
    big = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}


# --- errors


def _error_classes() -> set[str]:
    tree = ast.parse((KIT / "errors.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)}


def test_every_kit_error_is_defined_in_errors_py():
    errors = _error_classes()
    elsewhere = []
    for module, path in MODULES.items():
        if module == "kit.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & errors:
                    elsewhere.append(f"{module}.{node.name}")
    assert elsewhere == []


def test_errors_py_draws_and_exports_every_error():
    import kit.errors

    errors = _error_classes()
    drawn = set(re.findall(r"[├└]── (\w+)|^    (KitError)", kit.errors.__doc__, re.M))
    drawn = {a or b for a, b in drawn}
    assert errors == drawn, f"not drawn: {sorted(errors - drawn)}; drawn but gone: {sorted(drawn - errors)}"
    assert set(kit.errors.__all__) == errors and kit.errors.__all__ == sorted(kit.errors.__all__)
    for name in errors:
        assert issubclass(getattr(kit.errors, name), kit.errors.KitError)


# --- the command line


def test_only_kit_cli_registers_commands():
    outside = []
    for module, path in MODULES.items():
        if module.startswith("kit.cli"):
            continue
        text = path.read_text()
        if re.search(r"\.add_subparsers\(|\.add_parser\(", text):
            outside.append(module)
    assert outside == []


def test_cli_json_is_printed_by_one_function():
    printing = re.compile(r"json\.dump\([^)]*sys\.stdout|print\(json\.dumps|sys\.stdout\.write\(json\.dumps")
    dumps = [m for m, p in MODULES.items() if m.startswith("kit.cli") and printing.search(p.read_text())]
    assert dumps == ["kit.cli.common"]


# --- what importing costs


def _loaded(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(sorted(sys.modules))"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return ast.literal_eval(proc.stdout.strip().splitlines()[-1])


def test_import_kit_loads_almost_nothing():
    kit_modules = [m for m in _loaded("import kit") if m.split(".")[0] == "kit"]
    assert kit_modules == ["kit", "kit._version"]


@pytest.mark.parametrize("heavy", ["kit.bench", "kit.provenance", "kit.dryrun", "kit.cli", "pandas", "paramiko",
                                   "aiohttp", "IPython"])
def test_the_lab_server_imports_only_what_it_serves(heavy):
    loaded = _loaded("import kit.lab.launch_server")
    assert [m for m in loaded if m == heavy or m.startswith(heavy + ".")] == []


def test_the_remote_lab_wheel_carries_only_what_the_server_imports(tmp_path, monkeypatch):
    import zipfile

    from kit.lab.packaging import kit_wheel, server_modules

    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path))
    names = zipfile.ZipFile(kit_wheel()).namelist()
    assert "kit/lab/launch_server.py" in names and "kit/_remote/locate.py" in names
    assert "kit/data/resolved/incident-new-0.5.11.json" in names
    for absent in ("kit/bench/", "kit/dryrun/", "kit/cli/", "kit/lab/control.py", "kit/doctor/"):
        assert not any(n.startswith(absent) for n in names), absent
    # the server reads sglang's own checks of its fast paths when it starts (kit.lab.throughput.prefill_replay)
    assert "kit/provenance/gates.py" in names and "kit/data/fast_paths.yaml" in names
    modules = {n[:-3].replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py")}
    scripts = {m for m in modules if m.startswith("kit._remote.")}  # shipped whole: kit.hosts reads them as text
    assert modules - scripts == set(server_modules()) - scripts


def test_the_wheel_for_a_host_that_builds_the_real_engine_imports_the_build_on_its_own(tmp_path, monkeypatch):
    """`lab up --engine sglang --on HOST` runs kit.dryrun.serve_env there: its wheel carries it, and the
    package lists it reads, and nothing else of this checkout is needed to import it and name the same
    environment (the name is a hash of those lists: a missing file would name another)."""
    import zipfile

    import yaml

    from kit.dryrun.serve_env import serve_environment
    from kit.lab.packaging import build_modules, kit_wheel

    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "cache"))
    wheel = kit_wheel(build=True)
    assert wheel != kit_wheel() and wheel.parent.name == "kit-build"
    names = zipfile.ZipFile(wheel).namelist()
    assert {"kit/dryrun/serve_env.py", "kit/lab/launch_server.py", "kit/data/gpus.yaml"} <= set(names)
    assert any(n.startswith("kit/data/serve/stand_ins/") for n in names)
    assert any(n.startswith("kit/data/dryrun/requirements-") for n in names)
    modules = {n[:-3].replace("/", ".").removesuffix(".__init__") for n in names if n.endswith(".py")}
    scripts = {m for m in modules if m.startswith("kit._remote.")}  # shipped whole: kit.hosts reads them as text
    assert modules - scripts == set(build_modules()) - scripts
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # -I -S: no site-packages, no working directory, no PYTHON* variables: the wheel and PyYAML only
    yaml_dir = str(Path(yaml.__file__).resolve().parent.parent)
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
            "import kit; from kit.dryrun.serve_env import serve_environment\n"
            "print(kit.__file__); print(serve_environment('0.5.11').path.name)")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(site), yaml_dir], capture_output=True,
                          text=True, timeout=120, env={"SGL_KIT_CACHE": str(tmp_path / "host-cache"),
                                                       "PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 0, proc.stderr
    where, name = proc.stdout.split()
    assert where.startswith(str(site)) and name == serve_environment("0.5.11").path.name


def _owner_rows() -> list[tuple[str, str, str]]:
    """(concept, owner, checked by) of the one-owner table in docs/architecture.md."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("One owner per concept"):]
    table = table[:table.index("\n\n", table.index("| --- |"))]
    rows = re.findall(r"^  \| (.+?) \| (.+?) \| (.+?) \|$", table, re.M)
    return [r for r in rows if r[0] != "concept" and not r[0].startswith("---")]


def _resolves(name: str) -> bool:
    """`kit/x.py`, `kit/x/`, or a dotted `kit.a.b.name` that imports and resolves."""
    if "/" in name:
        return (ROOT / name).exists()
    for split in range(len(name.split(".")), 0, -1):
        module, rest = ".".join(name.split(".")[:split]), name.split(".")[split:]
        try:
            value = importlib.import_module(module)
        except ImportError:
            continue
        for part in rest:
            if not hasattr(value, part):
                return False
            value = getattr(value, part)
        return True
    return False


def test_each_concept_has_one_owner_and_a_test_that_keeps_it_so():
    rows = _owner_rows()
    assert len(rows) >= 12, "docs/architecture.md lost its one-owner table"
    problems = []
    for concept, owner, checked in rows:
        owners = re.findall(r"`(kit[./][\w./]*?)/?`", owner)
        if not owners or not all(_resolves(o.rstrip("/")) for o in owners):
            problems.append(f"{concept[:40]}: owner {owner} does not name a real module or function")
        tests = re.findall(r"`(tests/test_\w+\.py)`", checked)
        if not tests or not all((ROOT / t).is_file() and "def test_" in (ROOT / t).read_text() for t in tests):
            problems.append(f"{concept[:40]}: {checked} does not name a test file that exists")
    assert problems == []
