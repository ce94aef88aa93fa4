"""kit/data/fast_path_history.yaml, recomputed: every entry's verdict and site on the releases it says
were checked, from each release's own source (kit.provenance.gates) with the incident's launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from kit._data import DATA, load_yaml
from kit.hosts import LocalHost
from kit.provenance.gates import gate_chain
from kit.source import SourceTree

REPO = Path(__file__).resolve().parent.parent
CONFIG = json.loads((DATA / "lab" / "Qwen3.6-27B" / "config.json").read_text())
FIXED = json.loads((DATA / "resolved" / "incident-fixed-0.5.11.json").read_text())["final"]
GRAPHS = json.loads((REPO / "tests" / "data" / "resolved" / "incident-new-0.5.23.json").read_text())["final"][
    "cuda_graph_config"]
NVIDIA = {"is_cuda": True, "is_hip": False, "is_npu": False, "is_cpu": False, "is_xpu": False}
HISTORY = load_yaml(DATA / "fast_path_history.yaml")
CASES = [(name, i, version) for name, entries in HISTORY.items() for i, entry in enumerate(entries)
         for version in entry["checked"]]


def _launch(entry: dict, version: str) -> dict:
    args = dict(FIXED)
    if Version(version) >= Version("0.5.14"):
        args["cuda_graph_config"] = {**GRAPHS, "prefill": {**GRAPHS["prefill"], "backend": entry["backend"]}}
    elif entry["backend"] == "breakable":
        args["enable_breakable_cuda_graph"] = True
    return args


@pytest.mark.parametrize("name, index, version", CASES, ids=[f"{n}-{i}-{v}" for n, i, v in CASES])
def test_each_history_entry_holds_in_the_releases_it_names(sglang_source, name, index, version):
    entry = HISTORY[name][index]
    assert Version(version) in SpecifierSet(entry["versions"]), "a checked release outside the entry's range"
    tree = SourceTree.at(LocalHost(), sglang_source(version))
    chain = gate_chain(tree, name, _launch(entry, version), CONFIG, probes=NVIDIA)
    site_file, site_line = entry["site"].rsplit(":", 1)
    if entry["verdict"] == "never":
        assert chain.blocking is not None, chain.steps
        assert chain.blocking.where.rsplit(":", 1)[0].rsplit("/", 1)[-1] in (site_file.rsplit("/", 1)[-1],
                                                                              "cuda_graph_setup.py")
        if version == entry["first"]:
            assert chain.blocking.where == entry["site"]
    else:
        assert chain.blocking is None, chain.blocking
        hidden = [s for s in chain.steps if "capture_hidden_mode" in s.text]
        assert hidden and all(s.verdict == "passes" for s in hidden)
        if version == entry["first"]:
            assert any(entry["site"] in f for f in chain.facts), chain.facts


def test_the_history_names_its_sources():
    for entries in HISTORY.values():
        for entry in entries:
            assert "https://github.com/sgl-project/sglang/pull/" in entry["source"]
            assert entry["first"] in entry["checked"]
