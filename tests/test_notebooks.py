"""Every notebook runs with papermill against the lab on a box reached over real SSH (docs/architecture.md, "Where to add things").

The guided notebooks 00-05 run through `python -m kit.demo`, as `make demo` runs them.

The sshd fixture is the "remote": the lab is started there with `Lab(host).up()` (python3
only on that side; the kit travels as a wheel), in its own directory and on a free port.
Executed copies go to the git-ignored notebooks/_executed/. The structure rules of §6
are checked on the committed files.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _notebook_support import cells as _cells
from _notebook_support import outputs as _outputs
from _notebook_support import source as _source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
EXECUTED = NOTEBOOKS / "_executed"
PATHS = sorted(p for p in NOTEBOOKS.rglob("*.ipynb") if "_executed" not in p.parts and ".ipynb_checkpoints" not in p.parts)
IDS = [str(p.relative_to(NOTEBOOKS)) for p in PATHS]
GUIDED = ["00_connect", "01_symptom", "02_config", "03_auto_disable", "04_fix_and_validate", "05_upgrade"]


def test_there_are_notebooks():
    assert {f"{n}.ipynb" for n in GUIDED} <= set(IDS) and "templates/investigation.ipynb" in IDS
    assert "08_case.ipynb" in IDS  # a case read offline (tests/test_case_notebook.py runs it)


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
    if path.stem != "06_practice":  # the practice reads posted evidence, not a server
        assert any(n.target.id == "target" and n.value.value == "lab" for n in tree.body)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_no_cell_defines_a_function_or_class(path):
    """Notebooks hold prose and calls: what they compute lives in kit/, where it is tested."""
    for cell in _cells(path):
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(_source(cell))):
            assert not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)), (
                f"{path.name}: a {type(node).__name__} in a cell; move it to kit/")


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_each_notebook_is_paired_with_its_py_percent_file(path):
    import jupytext

    py = path.with_suffix(".py")
    assert py.is_file(), f"{py} missing: run `jupytext --sync {path}`"
    paired = jupytext.read(py)
    assert json.loads(path.read_text())["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    assert [_source(c) for c in _cells(path)] == [c.source for c in paired.cells]


def test_each_region_make_screenshots_cuts_is_one_cell_of_its_notebook():
    """`make screenshots` finds each region by a piece of its cell's code: a notebook edit that drops or
    duplicates one must fail here, not only in a browser."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "tests" / "browser"))
    try:
        spec = importlib.util.spec_from_file_location("screenshots", ROOT / "tests" / "browser" / "screenshots.py")
        shots = importlib.util.module_from_spec(spec)
        sys.modules["screenshots"] = shots  # its dataclasses look their module up there
        spec.loader.exec_module(shots)
    finally:
        sys.path.remove(str(ROOT / "tests" / "browser"))
        sys.modules.pop("screenshots", None)
    assert set(shots.NOTEBOOKS) == {"01", "03", "04", "06"}
    for name, regions in shots.NOTEBOOKS.values():
        code = [_source(c) for c in _cells(NOTEBOOKS / name) if c["cell_type"] == "code"]
        for region in regions:
            assert sum(region.cell in c for c in code) == 1, f"{name}: {region.cell!r}"
        assert len({r.name for r in regions}) == len(regions)


# -- execution over SSH -------------------------------------------------------------------------------
#
# `python -m kit.demo` (what `make demo` runs) executes 00-05 in order against the lab on the test
# sshd's box, over real SSH, as a user would; the tests below read what it wrote. The template runs
# on its own.


# The story's run, set up inside whichever of its tests comes first: the test's own timeout must
# cover it (about 90 s alone; several minutes on a machine busy with other tests or other work).
STORY_TIMEOUT = 900


@pytest.fixture(scope="module")
def story(remote_lab, sshd, tmp_path_factory):
    out = tmp_path_factory.mktemp("story")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kit.demo", "--target", sshd.alias, "--ssh-config",
                           str(sshd.ssh_config), "--port", str(remote_lab.port), "--out", str(out),
                           "--requests", "4", "--max-tokens", "64"],
                          capture_output=True, text=True, timeout=STORY_TIMEOUT - 60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"notebooks 00-05 over SSH: {time.monotonic() - started:.0f} s")
    return out, proc.stdout


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(STORY_TIMEOUT)
def test_the_story_runs_every_guided_notebook_in_order(story):
    out, printed = story
    for name in GUIDED:
        assert (out / f"{name}.ipynb").is_file()
        _outputs(out / f"{name}.ipynb")  # no cell ended in an error
    assert "The symptom:" in printed and "The causes, found in the source" in printed
    # the steps finding cites no source line: the launch sets the steps, so 7506 (sglang's fallback when a launch
    # sets none) did not run for it
    assert "srt/server_args.py:1230" in printed and "(speculative-steps-low): no line of sglang set it for this launch" in printed
    assert (out / "investigation.html").stat().st_size > 10_000
    # the notebooks kept the server's case as they went, and the demo wrote its page beside theirs
    assert (out / "case" / "case.yaml").is_file() and (out / "case" / "findings.json").is_file()
    assert (out / "case.html").stat().st_size > 10_000
    assert '<a href="case.html">' in (out / "investigation.html").read_text()  # the demo's page links the case's
    assert f"sgl-kit doctor --case {out / 'case'} --compare" in " ".join(printed.split())
    assert "case: captured to " in "\n".join(_outputs(out / "01_symptom.ipynb"))
    # the fix across loads: two sweeps of the lab, their comparison computed from the sweeps' own run files
    from kit.bench import compare_sweeps

    front = json.loads((out / "validation-front.json").read_text())
    assert [v["concurrency"] for v in front["levels"]] == [1, 4, 8]
    again = compare_sweeps(front["a"]["manifest"], front["b"]["manifest"])
    assert again.statements == front["statements"] and again.dominates == front["dominates"]
    assert all(line in " ".join(printed.split()) for line in front["statements"])
    assert "plotly" in (out / "validation-front.html").read_text()[:2_000_000]


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(STORY_TIMEOUT)
def test_each_notebook_shows_what_it_teaches(story, remote_lab):
    out, _ = story
    text = {name: "\n".join(_outputs(out / f"{name}.ipynb")) for name in GUIDED}
    assert f"sglang 0.5.11 at {remote_lab.lab_dir}/ml-env/lib/python3." in text["00_connect"]
    assert "-m kit.lab.launch_server" in text["00_connect"] and "<HostInventory" in text["00_connect"]
    assert "tok/s per request (median of 4)" in text["01_symptom"] and "single-stream ceiling" in text["01_symptom"]
    assert "368 fields" in text["02_config"] and "disable_piecewise_cuda_graph" in text["02_config"]
    assert "8. Multimodal / VLM models" in text["03_auto_disable"]
    # the incident's story, computed from its findings: the architecture that makes it a VLM
    assert "its architecture, `Qwen3_5ForConditionalGeneration`, is in SGLang's list" in text["03_auto_disable"]
    assert "--enforce-piecewise-cuda-graph" in text["03_auto_disable"]
    assert "--encoder-urls" in text["03_auto_disable"]
    # turned back on, 0.5.11's own gate would refuse every speculative prefill: read from the source, said in 03
    assert "But turned back on, the graph would not run for this launch" in text["03_auto_disable"]
    assert "piecewise_cuda_graph_runner.py:454" in text["03_auto_disable"]
    assert "Before:" in text["04_fix_and_validate"] and "The symptom is" in text["04_fix_and_validate"]
    kinds = {name: _kinds(out / f"{name}.ipynb") for name in GUIDED}
    assert "application/vnd.plotly.v1+json" in kinds["01_symptom"] and "application/vnd.plotly.v1+json" in kinds[
        "04_fix_and_validate"]
    assert "application/vnd.jupyter.widget-view+json" in kinds["01_symptom"]  # the progress bar
    assert "application/vnd.jupyter.widget-view+json" in kinds["02_config"]  # the origin filter


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(STORY_TIMEOUT)
def test_the_conclusion_of_04_comes_from_its_runs(story):
    """Every number of 04's conclusion, computed again from the run files its blocks wrote: each block's
    mean from its own file, each step's interval from the blocks (kit.bench.interleave.paired_comparison)."""
    from kit.bench import BenchRun
    from kit.bench.interleave import Block, paired_comparison

    out, _ = story
    data = json.loads((out / "validation.json").read_text())
    conclusion = "\n".join(_outputs(out / "04_fix_and_validate.ipynb"))
    for step in data["steps"][1:]:
        kept = step["blocks"]
        blocks = [Block(**b) for b in kept["blocks"]]
        assert [b.arm for b in blocks][:3] == ["A", "A", "B"] and len(blocks) >= 7
        for block in blocks:
            run = BenchRun.load(block.run)
            assert block.values["decode_tok_s"] == pytest.approx(float(run.summary().loc["decode_tok_s", "mean"]))
        for metric, key in (("decode_tok_s", "vs_previous"), ("ttft_ms", "ttft_vs_previous")):
            c = paired_comparison(blocks, metric, a="A", b="B")
            assert (c.ci_low, c.ci_high, c.verdict) == pytest.approx(
                (step[key]["ci_low"], step[key]["ci_high"], step[key]["verdict"]))
        c = paired_comparison(blocks, "decode_tok_s", a="A", b="B")
        assert step["rate_tok_s"] == pytest.approx(c.mean_b) and f"{c.mean_b:.1f} tok/s" in conclusion
        assert f"[{c.ci_low:+.1f}, {c.ci_high:+.1f}]" in conclusion
    assert "in interleaved blocks" in conclusion and "noise floor" in conclusion
    steps = {s["finding"]: s for s in data["steps"][1:]}
    assert steps["speculative-steps-low"]["vs_previous"]["verdict"] == "improved"  # decode speed regained
    assert not steps["speculative-steps-low"]["predicted"]
    # the prefill graph is a check: the doctor predicts no change (0.5.11's gate refuses the EAGLE target's
    # prefill), and the run agrees within the noise of a few requests
    check = steps["prefill-cuda-graph-off"]
    assert check["predicted"].startswith("no change") and "piecewise_cuda_graph_runner.py:454" in check["predicted"]
    assert check["changes"] == ["--enforce-piecewise-cuda-graph"]
    assert abs(check["ttft_vs_previous"]["rel_diff"]) < 0.08 and abs(check["vs_previous"]["rel_diff"]) < 0.08
    assert ("the measurement agrees, a validated negative" in conclusion) == check["prediction_holds"]
    # where it pays: the same launch without speculative decoding, where nothing refuses a text request
    pays = json.loads((out / "validation-nospec.json").read_text())
    (enforce,) = pays["steps"][1:]
    assert enforce["finding"] == "prefill-cuda-graph-off" and enforce["changes"] == ["--enforce-piecewise-cuda-graph"]
    assert not enforce["predicted"]  # offered as the fix there, not as a check
    assert enforce["ttft_vs_previous"]["verdict"] == "improved" and enforce["ttft_vs_previous"]["rel_diff"] < -0.1
    gone = data["after_tok_s"] >= 0.9 * data["baseline_tok_s"]
    assert data["symptom_gone"] is gone
    assert f"The symptom is {'gone' if gone else 'still there'}" in conclusion
    if not gone:
        assert "is unexplained" in conclusion and data["open_questions"]


@pytest.mark.ssh
@pytest.mark.slow
def test_the_template_runs_against_the_lab_over_ssh(remote_lab, sshd):
    import papermill

    path = NOTEBOOKS / "templates" / "investigation.ipynb"
    out = EXECUTED / "templates" / "investigation.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(path), str(out), kernel_name="python3", progress_bar=False, cwd=str(NOTEBOOKS),
        parameters={"target": sshd.alias, "ssh_config": str(sshd.ssh_config), "server_port": remote_lab.port},
        execution_timeout=120,
    )
    text = "\n".join(_outputs(out))
    assert "<ServerProcess lab 0.5.11" in text and f"on {remote_lab.host}" in text


@pytest.mark.slow
def test_a_slower_fix_changes_the_conclusion(tmp_path, monkeypatch):
    """A lab whose scenario gives the prefill graph no effect on prefill either: 04 must say so, from its runs."""
    import papermill
    import yaml
    from _lab_support import free_port

    from kit.lab.control import Lab

    scenario = yaml.safe_load((ROOT / "kit" / "data" / "scenarios" / "incident.yaml").read_text())
    for key in ("base_ms", "ms_per_token"):  # the flag buys nothing here, not even time to first token
        table = scenario["prefill"][key]
        table["piecewise_cuda_graph_on"] = table["piecewise_cuda_graph_off"]
    path = tmp_path / "no-gain.yaml"  # written by the test: the incident's scenario with one number changed
    path.write_text(yaml.safe_dump(scenario))
    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")
    lab = Lab()
    lab.up(variant="new", port=free_port(), scenario=str(path))
    try:
        out = tmp_path / "04.ipynb"
        summary = tmp_path / "validation.json"
        papermill.execute_notebook(str(NOTEBOOKS / "04_fix_and_validate.ipynb"), str(out), kernel_name="python3",
                                   progress_bar=False, cwd=str(NOTEBOOKS), execution_timeout=300,
                                   parameters={"requests": 4, "max_tokens": 64, "summary_path": str(summary),
                                               "pays_launch": "", "front_concurrency": ""})
    finally:
        lab.down()
    data = json.loads(summary.read_text())
    steps = {s["finding"]: s for s in data["steps"][1:]}
    assert steps["speculative-steps-low"]["vs_previous"]["verdict"] == "improved"
    assert steps["prefill-cuda-graph-off"]["vs_previous"]["verdict"] != "improved"
    assert steps["prefill-cuda-graph-off"]["ttft_vs_previous"]["verdict"] != "improved"
    assert data["symptom_gone"] is False and data["unexplained_tok_s"] > 10 and data["open_questions"]
    conclusion = "\n".join(_outputs(out))
    assert "The symptom is still there" in conclusion and "is unexplained" in conclusion


def _kinds(path: Path) -> set[str]:
    return {kind for cell in _cells(path) for out in cell.get("outputs", []) for kind in out.get("data", {})}


def test_04_on_the_p2p_scenario_models_the_cost_and_plans_no_fix_for_gns(tmp_path, monkeypatch):
    """lab_scenario = "p2p-pcie": the doctor finds P2P missing from the lab's topo -p2p (GNS: the GPUs offer no
    peer access), models what it costs, and prescribes nothing: 04 measures the launch as found and says so."""
    import papermill
    from _lab_support import free_port

    from kit.lab.control import Lab

    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")
    Lab().up(variant="new", port=free_port())  # the incident's: the notebook restarts it in its scenario
    out, summary = tmp_path / "04.ipynb", tmp_path / "validation.json"
    try:
        papermill.execute_notebook(str(NOTEBOOKS / "04_fix_and_validate.ipynb"), str(out), kernel_name="python3",
                                   progress_bar=False, cwd=str(NOTEBOOKS), execution_timeout=300,
                                   parameters={"requests": 6, "max_tokens": 96, "summary_path": str(summary),
                                               "lab_scenario": "p2p-pcie", "baseline_tok_s": 0.0})
    finally:
        Lab().down()
    data = json.loads(summary.read_text())
    assert data["planned"] == 0 and len(data["steps"]) == 1
    (unfixable,) = data["unfixable"]
    assert unfixable.startswith("GPUs used by tensor parallelism cannot reach each other peer to peer") and "GNS" in unfixable
    conclusion = "\n".join(_outputs(out))
    assert "Nothing to fix" in conclusion and "nothing to change on this machine" in conclusion
    assert "has no 'nospec' launch" in conclusion  # section 4: the scenario has no launch to compare
