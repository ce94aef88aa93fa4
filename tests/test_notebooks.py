"""Every notebook runs with papermill against the lab on a box reached over real SSH (docs/architecture.md, "Where to add things").

The sshd fixture is the "remote": the lab is started there with `Lab(host).up()` (python3
only on that side; the kit travels as a wheel), in its own directory and on a free port.
Executed copies go to the git-ignored notebooks/_executed/. The structure rules of §6
are checked on the committed files.
"""

from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = NOTEBOOKS / "_executed"
PATHS = sorted(p for p in NOTEBOOKS.rglob("*.ipynb") if "_executed" not in p.parts and ".ipynb_checkpoints" not in p.parts)
IDS = [str(p.relative_to(NOTEBOOKS)) for p in PATHS]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_there_are_notebooks():
    assert "00_connect.ipynb" in IDS and "templates/investigation.ipynb" in IDS


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_committed_notebooks_carry_no_outputs(path):
    for cell in _cells(path):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_the_first_cells_follow_the_standard_header(path):
    title, intro, imports, params = _cells(path)[:4]
    assert title["cell_type"] == "markdown" and _source(title).startswith("# ") and "\n" not in _source(title).strip()
    assert intro["cell_type"] == "markdown"
    assert "**What you will learn**" in _source(intro) and "**What you need**" in _source(intro)
    assert imports["cell_type"] == "code" and "parameters" in params["metadata"].get("tags", [])
    for node in ast.parse(_source(imports)).body:
        assert isinstance(node, (ast.Import, ast.ImportFrom)), f"{path.name}: the imports cell holds more than imports"
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            top = name.split(".")[0]
            assert top == "kit" or top in sys.stdlib_module_names, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_exactly_one_parameters_cell_of_typed_literals_with_comments(path):
    tagged = [c for c in _cells(path) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1
    source = _source(tagged[0])
    tree = ast.parse(source)
    assert tree.body and all(isinstance(node, ast.AnnAssign) and node.simple for node in tree.body)
    lines = source.splitlines()
    for node in tree.body:
        ast.literal_eval(node.value)  # a literal, not a derived value
        assert "#" in lines[node.lineno - 1].split("=", 1)[1], f"no comment on {node.target.id}"
    assert any(n.target.id == "target" and n.value.value == "lab" for n in tree.body)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_each_notebook_is_paired_with_its_py_percent_file(path):
    import jupytext

    py = path.with_suffix(".py")
    assert py.is_file(), f"{py} missing: run `jupytext --sync {path}`"
    paired = jupytext.read(py)
    assert json.loads(path.read_text())["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    assert [_source(c) for c in _cells(path)] == [c.source for c in paired.cells]


# -- execution over SSH -------------------------------------------------------------------------------


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_notebook_runs_against_the_lab_over_ssh(path, remote_lab, sshd):
    import papermill

    out = EXECUTED / path.relative_to(NOTEBOOKS)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    papermill.execute_notebook(
        str(path), str(out), kernel_name="python3", progress_bar=False, cwd=str(NOTEBOOKS),
        parameters={"target": sshd.alias, "ssh_config": str(sshd.ssh_config), "server_port": remote_lab.port},
        execution_timeout=120,
    )
    seconds = time.monotonic() - started
    text = "\n".join(_outputs(out))
    assert "<ServerProcess lab 0.5.11" in text and f"on {remote_lab.host}" in text
    if path.name == "00_connect.ipynb":
        assert f"sglang 0.5.11 at {remote_lab.lab_dir}/ml-env/lib/python3." in text
        assert "-m kit.lab.launch_server" in text and "The server is fired up and ready to roll!" in text
        assert "<HostInventory" in text
    print(f"{path.name}: papermill over SSH in {seconds:.1f} s")


def _outputs(path: Path) -> list[str]:
    texts = []
    for cell in _cells(path):
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"
            texts.append("".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", "")))
    return texts
