"""Keep the packaging files, the public API and the README layout honest."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import kit

ROOT = Path(__file__).resolve().parent.parent
# Rendering libraries are for display.py alone, imported inside functions (docs/architecture.md, floor 0).
RENDERING_MODULES = ("IPython", "ipywidgets", "plotly")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _by_name(lines: list[str], source: str) -> dict[str, tuple]:
    """name -> (extras, specifier, marker); a package listed twice is an error in itself."""
    table: dict[str, tuple] = {}
    for line in lines:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name not in table, f"{name} is listed twice in {source}"
        table[name] = (frozenset(req.extras), req.specifier, str(req.marker or ""))
    return table


def _conda_parts(env: dict) -> tuple[list[str], list[str]]:
    conda, pip = [], []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            pip.extend(entry["pip"])
        else:
            conda.append(entry)
    return conda, pip


def test_environment_yml_pins_what_pyproject_pins():
    project = _pyproject()["project"]
    wanted = _by_name(project["dependencies"] + project["optional-dependencies"]["dev"], "pyproject.toml")
    _, pip = _conda_parts(_environment())
    # "-e ." installs the kit itself; it is not a dependency.
    listed = _by_name([line for line in pip if not line.startswith("-")], "environment.yml")
    assert listed == wanted


def test_environment_yml_python_matches_requires_python():
    env = _environment()
    conda, pip = _conda_parts(env)
    assert env["name"] == "sglang-investigation-kit"
    assert "-e ." in pip
    pythons = [entry for entry in conda if re.match(r"python\b", entry)]
    assert len(pythons) == 1, conda
    assert SpecifierSet(pythons[0].removeprefix("python")) == SpecifierSet(
        _pyproject()["project"]["requires-python"]
    )
    assert {entry for entry in conda if entry not in pythons} == {"pip"}


def test_dunder_all_is_sorted_and_unique():
    names = getattr(kit, "__all__", None)
    assert names is not None, "kit/__init__.py must define __all__ (the one public API list)"
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    # Same order as httpx: case-insensitive.
    assert list(names) == sorted(names, key=str.casefold)


def test_dunder_all_names_resolve():
    missing = [name for name in getattr(kit, "__all__", ()) if not hasattr(kit, name)]
    assert not missing


def test_every_public_top_level_name_is_in_dunder_all():
    exported = set(getattr(kit, "__all__", ()))
    public = {
        name
        for name, value in vars(kit).items()
        if not name.startswith("_") and not isinstance(value, type(kit)) and name != "annotations"
    }
    assert public <= exported, sorted(public - exported)


def _public_modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(kit.__path__, "kit.")
        if not any(part.startswith("_") for part in info.name.split("."))
    )


@pytest.mark.parametrize("module_name", _public_modules())
def test_public_module_imports_and_its_dunder_all_resolves(module_name):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", [])
    assert len(names) == len(set(names)), f"duplicates in {module_name}.__all__"
    assert [name for name in names if not hasattr(module, name)] == []


def test_importing_kit_does_not_pull_in_rendering_libraries():
    code = (
        "import importlib, sys\n"
        f"for name in {_public_modules()!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {RENDERING_MODULES!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# --- references to kit.* from code that pytest does not import: notebooks, benchmarks, lazy imports


def _sources() -> list[tuple[Path, str]]:
    found = []
    for folder in ("kit", "notebooks", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.append((path, path.read_text()))
        for path in sorted((ROOT / folder).rglob("*.ipynb")):
            cells = json.loads(path.read_text()).get("cells", [])
            code = "\n".join("".join(c["source"]) for c in cells if c.get("cell_type") == "code")
            # IPython magics and shell escapes are not Python.
            found.append((path, "\n".join(line for line in code.splitlines() if line[:1] not in "%!")))
    return found


def _package_of(path: Path) -> str:
    """The package a relative import in this file starts from (a package's __init__ is its own)."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def _resolve(dotted: str) -> bool:
    """True when kit.a.b... names something, importing submodules on the way."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        if not hasattr(obj, part):
            try:
                importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError:
                return False
        obj = getattr(obj, part, None)
        if obj is None:
            return False
        if not isinstance(obj, type(kit)):
            return True  # attributes of classes and functions are not module API
    return True


class _KitReferences(ast.NodeVisitor):
    def __init__(self, package: str) -> None:
        self.package = package
        self.aliases: dict[str, str] = {}
        self.refs: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "kit":
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    self.aliases["kit"] = "kit"
                self.refs.append((node.lineno, alias.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            package = self.package.split(".")
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        if base.split(".")[0] == "kit":
            self.refs.extend((node.lineno, f"{base}.{a.name}") for a in node.names if a.name != "*")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain, inner = [], node
        while isinstance(inner, ast.Attribute):
            chain.append(inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and inner.id in self.aliases:
            self.refs.append((node.lineno, ".".join([self.aliases[inner.id], *reversed(chain)])))
        else:
            self.generic_visit(node)


def test_kit_references_in_code_resolve():
    broken = []
    for path, text in _sources():
        visitor = _KitReferences(_package_of(path))
        visitor.visit(ast.parse(text, filename=str(path)))
        rel = path.relative_to(ROOT)
        broken += [f"{rel}:{line}: {ref}" for line, ref in visitor.refs if not _resolve(ref)]
    assert broken == []


# --- README


def test_readme_layout_matches_the_tree():
    """The Layout table marks each kit module `yes` or `planned`; both must be true."""
    rows = re.findall(r"^\| `((?:kit|docs)/[^`]+)` \| (yes|planned) \|", (ROOT / "README.md").read_text(), re.M)
    assert rows, "README.md has no Layout table"
    listed = {path.rstrip("/"): mark for path, mark in rows}
    wrong = {path: mark for path, mark in listed.items() if (ROOT / path).exists() != (mark == "yes")}
    assert wrong == {}, "README Layout marks disagree with the tree"
    on_disk = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "kit").iterdir()
        if not p.name.startswith(".") and p.name != "__init__.py"
        and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert on_disk <= set(listed), f"modules missing from README Layout: {sorted(on_disk - set(listed))}"
