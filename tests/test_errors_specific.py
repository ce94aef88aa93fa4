"""Every error the kit raises on purpose is a specific class of kit/errors.py, never the bare base.

`except KitError` still catches them all (the CLI turns any of them into exit code 2); the
class says which family a failure belongs to, so a caller can catch one family and let the
others through. That every class is drawn in the docstring of kit/errors.py is checked by
tests/test_layers.py (test_errors_py_draws_and_exports_every_error).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kit.errors import DataFileError, KitError, LabError, ReportError, UsageError

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "kit"

# Places where the bare KitError is the right class, as "path:function" with the reason.
# Empty: every raise in kit/ has a family of its own. Add one only with a comment saying why
# no class of kit/errors.py (nor a new one) names what went wrong.
ALLOWED: set[str] = set()


def _bare_calls(source: str) -> list[tuple[str, int]]:
    """(outermost function, line) of each `KitError(...)` in ``source``, spelled bare or through a module."""
    tree = ast.parse(source)
    scopes: dict[ast.AST, str] = {}
    for node in ast.walk(tree):  # breadth first: an outer function is seen before the ones inside it
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                scopes.setdefault(inner, node.name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "KitError":
                found.append((scopes.get(node, "<module>"), node.lineno))
    return sorted(found, key=lambda f: f[1])


def _bare_constructions() -> list[str]:
    """`KitError(...)` called anywhere in kit/ outside kit/errors.py, as "path:function:line"."""
    found = []
    for path in sorted(KIT.rglob("*.py")):
        if path == KIT / "errors.py":
            continue
        rel = path.relative_to(ROOT).as_posix()
        found += [f"{rel}:{function}:{line}" for function, line in _bare_calls(path.read_text(encoding="utf-8"))]
    return found


def test_no_bare_kit_error_is_raised():
    bare = [f for f in _bare_constructions() if f.rsplit(":", 1)[0] not in ALLOWED]
    assert bare == [], (
        "raise the class of kit/errors.py that names the failure (UsageError for a bad argument or option, "
        f"ReportError, DataFileError, LabError, HostError, ...), or add one there: {bare}")


def test_the_allowance_list_holds_only_places_that_still_exist():
    seen = {f.rsplit(":", 1)[0] for f in _bare_constructions()}
    assert ALLOWED <= seen, f"allowed but gone (drop them from ALLOWED): {sorted(ALLOWED - seen)}"


def test_the_scan_sees_every_spelling():
    source = ("import kit.errors as e\nfrom kit.errors import KitError\n"
              "def a():\n    raise KitError('x')\n"
              "def b():\n    def inner():\n        raise e.KitError('x')\n"
              "def c():\n    return KitError('x')\n"
              "def d():\n    raise e.UsageError('x')\n")
    assert _bare_calls(source) == [("a", 4), ("b", 7), ("c", 9)]


# --- a few raises, pinned to their class


def test_bad_input_is_a_usage_error():
    from kit.cli.common import local_file
    from kit.upgrade_parts import version_list

    with pytest.raises(UsageError, match="two versions or more"):
        version_list("0.5.10")
    with pytest.raises(UsageError, match="not an sglang version"):
        version_list("0.5.10 banana")
    with pytest.raises(UsageError, match="no such file"):
        local_file(str(ROOT / "no-such-file.log"))


def test_a_report_of_nothing_is_a_report_error(tmp_path):
    from kit.report import build_report

    with pytest.raises(ReportError, match="no notebook to report on"):
        build_report([], tmp_path / "report.html")
    with pytest.raises(ReportError, match="no such notebook"):
        build_report([tmp_path / "missing.ipynb"], tmp_path / "report.html")


def test_an_unknown_lab_scenario_is_a_lab_error():
    from kit.lab.throughput import load_scenario

    with pytest.raises(LabError, match="no lab scenario"):
        load_scenario("no-such-scenario")


def test_the_new_families_are_kit_errors_and_nothing_else():
    for cls in (UsageError, ReportError, DataFileError):
        assert issubclass(cls, KitError)
        assert not issubclass(cls, ValueError)  # an `except ValueError` must not start catching them
