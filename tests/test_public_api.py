"""The public API is the verbs: ``kit.doctor``, ``kit.why``, ``kit.args``, ``kit.bench``, ... Notebooks use nothing else.

What is checked here: the names of ``kit.__all__`` (verbs, what they return, the notebooks' namespaces; the
errors only under ``kit.errors``), that the packages named like their verb are callable and stay packages,
that every verb's result renders in a notebook (``_repr_html_``), that the guided notebooks import only
``kit`` and reach only public names, that no notebook names its own file, and that ``kit.notebook.share``
finds the notebook it runs in when papermill runs it through ``kit.notebook.execute``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kit
import kit.errors

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.py")) + [ROOT / "notebooks" / "templates" / "investigation.py"]
FIXTURES = ROOT / "tests" / "data"

# The verbs the issue of a public API named (capture, the case directory, is not built yet).
VERBS = ["args", "bench", "compare", "connect", "doctor", "dry_run", "Lab", "report", "upgrade_diff", "why"]


def test_the_verbs_are_public_and_the_errors_live_under_kit_errors():
    assert set(VERBS) <= set(kit.__all__)
    errors = {name for name, value in vars(kit.errors).items() if isinstance(value, type)
              and issubclass(value, kit.errors.KitError)}
    assert len(errors) > 20
    assert not errors & set(kit.__all__), "errors are reached as kit.errors.X, not from the top level"
    assert "errors" in kit.__all__ and kit.errors.KitError is importlib.import_module("kit.errors").KitError


def test_no_rename_shims_are_left():
    source = (ROOT / "kit" / "__init__.py").read_text()
    assert "_RENAMED" not in source
    for module in ("kit.dryrun", "kit.lab", "kit.target"):
        m = importlib.import_module(module)
        assert not {"resolve", "resolve_many", "find_target_server"} & set(getattr(m, "__all__", [])), module


@pytest.mark.parametrize("name", ["doctor", "bench", "report"])
def test_a_package_named_like_its_verb_is_callable_and_stays_a_package(name):
    module = importlib.import_module(f"kit.{name}")  # imported the way any submodule import does it
    assert getattr(kit, name) is module and callable(module)
    verb = getattr(module, module.__verb__)
    assert inspect.isfunction(verb)
    # a submodule imported later does not replace the verb
    sub = {"doctor": "kit.doctor.rules", "bench": "kit.bench.comparison", "report": "kit.report.redaction"}[name]
    importlib.import_module(sub)
    assert callable(getattr(kit, name)) and getattr(kit, name) is module


def test_calling_the_doctor_package_runs_the_doctor_on_files():
    log = next(FIXTURES.rglob("*.log"))
    via_package = kit.doctor(log=str(log))
    via_function = kit.doctor.doctor(log=str(log))
    assert type(via_package).__name__ == "Diagnosis"
    assert [f.id for f in via_package.findings] == [f.id for f in via_function.findings]
    assert "<" in via_package._repr_html_()


def test_the_doctor_refuses_what_cannot_work_and_says_what_to_give():
    with pytest.raises(kit.errors.UsageError, match="nothing to examine") as err:
        kit.doctor()
    assert "log" in err.value.hint
    with pytest.raises(kit.errors.UsageError, match="evidence files go without a target"):
        kit.doctor("lab", log="server.log")
    with pytest.raises(kit.errors.UsageError, match="goes with a target"):
        kit.doctor(port=30000, log="server.log")


def test_every_verb_returns_an_object_that_renders_in_a_notebook():
    from kit.lab.control import Lab

    returned = {
        "args": kit.ServerArgs, "bench": kit.BenchRun, "compare": kit.Comparison, "connect": kit.Host,
        "doctor": kit.Diagnosis, "dry_run": kit.DryRunResult, "report": kit.ReportResult,
        "upgrade_diff": kit.UpgradeDiff, "why": kit.FlagExplanation, "Lab": Lab,
    }
    assert set(returned) == set(VERBS)
    assert [name for name, cls in returned.items() if not callable(getattr(cls, "_repr_html_", None))] == []


def _kit_chains(tree: ast.AST) -> list[list[str]]:
    """Every attribute chain that starts at the name ``kit``: kit.doctor.runtime_diagnosis -> [doctor, ...]."""
    chains = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "kit":
                chains.append(parts[::-1])
    return chains


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_imports_only_kit_and_uses_only_public_names(path):
    import jupytext

    code = "\n".join(cell.source for cell in jupytext.read(path).cells
                     if cell.cell_type == "code" and not cell.source.lstrip().startswith("%"))
    tree = ast.parse(code)
    imports = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imports == ["import kit"], imports
    chains = _kit_chains(tree)
    assert chains, "the notebook uses the kit"
    for chain in chains:
        head = chain[0]
        assert head in kit.__all__, f"kit.{head} is not public"
        value = getattr(kit, head)
        if inspect.ismodule(value) and len(chain) > 1:
            assert chain[1] in getattr(value, "__all__", ()), f"kit.{head}.{chain[1]} is not in kit.{head}.__all__"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_notebook_names_its_own_file(path):
    text = path.read_text()
    assert "notebook_file" not in text
    assert path.stem + ".ipynb" not in text.replace(f'"{path.stem}.html"', "")


def test_current_notebook_says_what_it_tried(tmp_path, monkeypatch):
    from kit.notebook import SESSION_VARIABLE, current_notebook

    monkeypatch.delenv(SESSION_VARIABLE, raising=False)
    with pytest.raises(kit.errors.ReportError, match=r"not known.*JPY_SESSION_NAME: not set") as err:
        current_notebook()
    assert "share(to, notebook=" in err.value.hint
    monkeypatch.setenv(SESSION_VARIABLE, str(tmp_path / "gone.ipynb"))
    with pytest.raises(kit.errors.ReportError, match="gone.ipynb .not a saved .ipynb file"):
        current_notebook()
    saved = tmp_path / "here.ipynb"
    saved.write_text("{}")
    monkeypatch.setenv(SESSION_VARIABLE, str(saved))
    assert current_notebook() == saved.resolve()


def test_share_in_a_notebook_run_by_execute_finds_its_own_file(tmp_path):
    """A real kernel: the notebook only calls kit.notebook.share(to); the report holds the notebook's own output."""
    import nbformat

    source = tmp_path / "scratch.ipynb"
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell('share_to = ""', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell('print("the answer is 42, api_key=sk-live-0123456789abcdefABCDEF")'),
                nbformat.v4.new_code_cell("import kit\nkit.notebook.share(share_to)")]
    nbformat.write(nb, source)
    page = tmp_path / "shared.html"
    from kit.notebook import execute

    execute(source, tmp_path / "ran.ipynb", {"share_to": str(page)}, cwd=tmp_path, timeout=120)
    text = page.read_text()
    assert "the answer is 42" in text and "sk-live-0123456789abcdefABCDEF" not in text
    ran = json.loads((tmp_path / "ran.ipynb").read_text())
    shown = json.dumps(ran["cells"][-1]["outputs"])
    assert "report written" in shown and "shared.html" in shown


def test_importing_kit_stays_cheap():
    code = "import sys, kit; print(sorted(m for m in sys.modules if m.startswith('kit')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout.replace("'", '"'))) <= {"kit", "kit._version"}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_verbs_on_the_real_sglang_server(real_server, tmp_path):
    """kit.args, kit.why, kit.bench and kit.doctor against the real sglang 0.5.11 on CPU (target "lab" names it)."""
    server = real_server.server()
    found = kit.args("lab")
    assert found.server.pid == server.pid and found["device"] == "cpu"
    assert {row["flag"] for row in found.rows} >= {"device", "tp_size", "disable_cuda_graph"}
    shown = {row["flag"]: row for row in found.shown()}
    assert shown["device"]["cli"] == "cpu" and shown["device"]["origin"] != "default"
    assert "device" in found.to_text() and "<table>" in found._repr_html_()
    explained = kit.why("device", "lab")
    assert explained.flag == "device" and explained.sites, explained.to_text()
    run = kit.bench("lab", requests=3, max_tokens=8, warmup=0, out=tmp_path / "run.jsonl", progress=None)
    assert run.totals["ok"] == 3 and (tmp_path / "run.jsonl").is_file()
    same = kit.compare(run, run, metric="ttft_ms")  # every request has a first token; a decode rate needs two reads
    assert same.n_a == 3 and same.verdict == "no significant change"
    diagnosis = kit.doctor("lab")
    assert diagnosis.to_dict()["target"] and "<" in diagnosis._repr_html_()


def test_the_cli_goes_through_the_verbs():
    """One orchestration per verb: `sgl-kit doctor`, `bench`, `why` and `args show` call kit.doctor.gather,
    kit.bench.bench, kit.why and kit.args; no command assembles their steps itself."""
    steps = {"from_server", "add_runtime", "add_trace", "bench_async", "run_sync", "explain_server",
             "classify_server_rows", "resolve_url"}
    found = []
    for path in sorted((ROOT / "kit" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.ImportFrom) else
                     [node.id] if isinstance(node, ast.Name) else [node.attr] if isinstance(node, ast.Attribute) else [])
            found += [f"{path.name}:{node.lineno} {name}" for name in names if name in steps]
    assert found == []
