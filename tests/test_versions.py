"""What `why` says about the incident's prefill CUDA graph on every layout from 0.5.4 to 0.5.23.

Each release is the real wheel (the `sglang_source` fixture downloads it once and unpacks it);
nothing of sglang is imported or run. The launch is the incident's (Qwen3.6-27B, architecture
`Qwen3_5ForConditionalGeneration`, tp 2, EAGLE with one step) and the hardware an NVIDIA GPU
(`CUDA_PROBES`). The asked name is always 0.5.11's `disable_piecewise_cuda_graph`: each
release answers with what holds that setting there. Expectations were checked by reading
each release's source (see the table in the comments of VERSIONS).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from test_cli import sgl_kit

from kit._remote.locate import declared_version, file_version
from kit.hosts import LocalHost
from kit.provenance import CUDA_PROBES, FlagExplanation, explain
from kit.server_args import lineage, lineage_data
from kit.source import SourceTree

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "versions"
MODEL = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
INCIDENT = ("python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp-size 2 --trust-remote-code "
            "--host 0.0.0.0 --port 30000 --mem-fraction-static 0.85 --speculative-algorithm EAGLE "
            "--mamba-scheduler-strategy extra_buffer --speculative-num-steps 1 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 2")

PREFILL = "cuda_graph_config.prefill.backend"

# version: (layout, the field explained, lineage status of disable_piecewise_cuda_graph,
#           fired sites as (file:line, rule), unknown sites, the value the steps leave, arch known)
VERSIONS = {
    # opt-in era: a plain field, default False, nothing in sglang writes it; no Qwen3.5 model yet.
    "0.5.4": ("opt-in field", "enable_piecewise_cuda_graph", "not yet", [], [], None, False),
    "0.5.6": ("opt-in field", "enable_piecewise_cuda_graph", "not yet", [], [], None, False),
    # 0.5.9 knows Qwen3.5 (srt/models/qwen3_5.py) but piecewise is still opt-in.
    "0.5.9": ("opt-in field", "enable_piecewise_cuda_graph", "not yet", [], [], None, True),
    # if chain in ServerArgs._handle_piecewise_cuda_graph: rule 8 (multimodal) turns it off.
    "0.5.11": ("if chain", "disable_piecewise_cuda_graph", "field",
               [("srt/server_args.py:1230", "8. Multimodal / VLM models")],
               ["srt/server_args.py:1237", "srt/server_args.py:3047"], None, True),
    # rules table of lambdas, no stop: tc_piecewise by default, and both the model-arch blacklist
    # (is_piecewise_cuda_graph_disabled_model includes unsupported multimodal archs) and the
    # multimodal rule turn it off.
    "0.5.14": ("rules table", PREFILL, "alias",
               [("srt/server_args.py:2980", ""), ("srt/server_args.py:3003", "model-arch blacklist"),
                ("srt/server_args.py:3021", "multimodal model")],
               ["srt/server_args.py:3026", "srt/server_args.py:4499", "srt/server_args.py:4506"], "disabled", True),
    # breakable by default on CUDA; Qwen3.5 is on the breakable allowlist (since 0.5.16), so no
    # rule fires; _handle_model_capability_adjustments only touches EmbeddingGemma/HRM-Text.
    "0.5.18": ("rules table + _handle_model_capability_adjustments", PREFILL, "alias",
               [("srt/server_args.py:4545", "")], ["srt/server_args.py:3912"], "breakable", True),
    # arg_groups hooks with declare_resolution: the same answer from cuda_graph_hook.py.
    "0.5.23": ("arg_groups hooks", PREFILL, "removed", [("srt/arg_groups/cuda_graph_hook.py:99", "")],
               ["srt/arg_groups/cuda_graph_hook.py:117", "srt/arg_groups/memory_hook.py:274",
                "srt/arg_groups/model_hook.py:932", "srt/arg_groups/model_hook.py:975"], "breakable", True),
}


@pytest.fixture(scope="module")
def trees(sglang_source):
    made: dict[str, SourceTree] = {}

    def get(version: str) -> SourceTree:
        if version not in made:
            made[version] = SourceTree.at(LocalHost(), sglang_source(version))
        return made[version]

    return get


@pytest.fixture(scope="module")
def incident(trees):
    done: dict[str, tuple[FlagExplanation, float]] = {}

    def get(version: str) -> tuple[FlagExplanation, float]:
        if version not in done:
            tree = trees(version)
            started = time.monotonic()
            exp = explain(tree, "disable_piecewise_cuda_graph", None, MODEL, command=INCIDENT, probes=CUDA_PROBES)
            done[version] = exp, time.monotonic() - started
        return done[version]

    return get


# --------------------------------------------------------------------------- the version of a tree


@pytest.mark.parametrize(("name", "version"), [("_version-0.5.9.py.txt", "0.5.9"), ("_version-0.5.18.py.txt", "0.5.18"),
                                               ("version-0.5.1.py.txt", "0.5.1")])
def test_the_version_files_of_real_releases(name, version):
    assert declared_version((DATA / name).read_text()) == version


def test_a_package_without_dist_info_takes_its_version_from_version_py(tmp_path):
    for name, rel, version in [("_version-0.5.18.py.txt", "_version.py", "0.5.18"), ("version-0.5.1.py.txt", "version.py", "0.5.1")]:
        pkg = tmp_path / version / "sglang"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / rel).write_text((DATA / name).read_text())
        tree = SourceTree.at(LocalHost(), str(pkg))
        assert (tree.version, tree.version_from) == (version, rel)
        assert file_version(str(pkg)) == (version, rel)  # the locate script, as it runs on a target


def test_a_real_tree_without_its_dist_info_still_knows_its_version(trees, tmp_path):
    # `--package-dir` pointing at a copied or vendored sglang: no dist-info beside it.
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(trees("0.5.18").root, site / "sglang")
    tree = SourceTree.at(LocalHost(), str(site / "sglang"))
    assert (tree.version, tree.version_from, tree.dist_info) == ("0.5.18", "_version.py", None)
    exp = explain(tree, "disable_piecewise_cuda_graph")
    assert exp.version == "0.5.18" and "version unknown" not in exp.to_text()
    assert len(exp.sites) == 45


# --------------------------------------------------------------------------- the incident, release by release


@pytest.mark.parametrize("version", list(VERSIONS))
def test_why_the_prefill_graph_is_off_or_on_for_the_incident(incident, trees, version):
    _layout, field, status, fired, unknown, ends, arch_known = VERSIONS[version]
    exp, seconds = incident(version)
    assert exp.version == version
    assert exp.flag == field
    assert lineage(trees(version), "disable_piecewise_cuda_graph").status == status
    assert [(s.where.removeprefix("sglang/"), s.rule) for s in exp.fired] == fired
    assert [s.where.removeprefix("sglang/") for s in exp.sites if s.status == "unknown"] == unknown
    if ends is None:
        assert exp.resolved == ""
    else:
        assert f"ends as {ends!r}" in exp.resolved
    unknown_arch = [n for n in exp.notes if "Qwen3_5ForConditionalGeneration is unknown to sglang" in n]
    assert bool(unknown_arch) is not arch_known
    assert seconds < 30


def test_opt_in_releases_say_the_field_of_that_time_and_its_default(incident):
    exp, _ = incident("0.5.6")
    assert exp.lineage.startswith("in sglang 0.5.6 disable_piecewise_cuda_graph does not exist yet (a field in "
                                  ">=0.5.10,<0.5.14; a deprecated alias of --cuda-graph-backend-prefill=disabled in "
                                  ">=0.5.14,<0.5.20); the prefill (piecewise) CUDA graph is enable_piecewise_cuda_graph")
    assert exp.lineage.endswith("explaining enable_piecewise_cuda_graph")
    assert exp.sites == [] and exp.origin.startswith(
        "nothing in this tree changes enable_piecewise_cuda_graph after launch: it keeps its argparse default False")
    text = exp.to_text()
    assert text.splitlines()[0].startswith("in sglang 0.5.6 disable_piecewise_cuda_graph does not exist yet")
    assert "Qwen3_5ForConditionalGeneration is unknown to sglang 0.5.6" in text


def test_0_5_11_is_the_chain_the_kit_always_knew(incident):
    exp, _ = incident("0.5.11")
    assert exp.lineage == "" and exp.asked == ""
    # With the GPU known, the hardware rules are decided: they do not fire on CUDA.
    assert {s.line: s.status for s in exp.sites}[1215] == "not fired"
    assert {s.line: s.status for s in exp.sites}[1221] == "not fired"


def test_0_5_14_rules_table_turns_it_off_twice(incident):
    exp, _ = incident("0.5.14")
    assert exp.lineage.startswith("in sglang 0.5.14 --disable-piecewise-cuda-graph is a deprecated alias of "
                                  "--cuda-graph-backend-prefill=disabled (srt/server_args.py:6389: it stores "
                                  "'disabled' into cuda_graph_backend_prefill, which folds into "
                                  "cuda_graph_config.prefill.backend)")
    build = next(s for s in exp.fired if s.line == 2980)
    assert build.kind == "assign" and build.target == "cuda_graph_config"
    mm = next(s for s in exp.fired if s.rule == "multimodal model")
    assert mm.kind == "rules table" and mm.function == "ServerArgs._disable_tc_piecewise_cudagraph_if_incompatible"
    assert ("cuda_graph_config.prefill.backend is 'tc_piecewise' at this point: built by srt/server_args.py:2980 "
            "(ServerArgs._parse_cuda_graph_config) from its defaults") in mm.evidence
    assert any("Qwen3_5ForConditionalGeneration is not in multimodal_piecewise_cuda_graph_supported_model_archs"
               in e for e in mm.evidence)


def test_0_5_18_keeps_the_breakable_graph_and_says_why(incident):
    exp, _ = incident("0.5.18")
    assert exp.to_text().splitlines()[0] == (
        "in sglang 0.5.18 --disable-piecewise-cuda-graph is a deprecated alias of --cuda-graph-backend-prefill=disabled")
    assert exp.resolved.startswith("in the steps ServerArgs.__post_init__ runs, cuda_graph_config.prefill.backend "
                                   "ends as 'breakable': built by srt/server_args.py:4545 "
                                   "(ServerArgs._parse_cuda_graph_config) from its defaults (is_cuda() = True")
    rule = next(s for s in exp.sites if s.line == 4703)
    assert (rule.rule, rule.status) == ("multimodal model", "not fired")
    assert any("Qwen3_5ForConditionalGeneration is in multimodal_breakable_cuda_graph_supported_model_archs" in e
               for e in rule.evidence)
    tc = next(s for s in exp.sites if s.rule == "multimodal model" and s.line == 4620)
    assert tc.status_reason.startswith("line 4576: self.cuda_graph_config.prefill.backend == Backend.TC_PIECEWISE "
                                       "is False")
    # _handle_model_capability_adjustments (0.5.18) is read too: its EmbeddingGemma branch writes
    # the value the field already has, so it cannot change the answer.
    embed = next(s for s in exp.sites if s.line == 3912)
    assert embed.function == "ServerArgs._handle_model_capability_adjustments" and embed.status == "unknown"


def test_0_5_23_says_the_flag_was_removed_and_what_turns_the_graph_off_now(incident):
    exp, _ = incident("0.5.23")
    assert "in sglang 0.5.23 disable_piecewise_cuda_graph was removed" in exp.lineage
    assert ("to turn it off in this release: --disable-prefill-cuda-graph or --cuda-graph-backend-prefill disabled; "
            "explaining cuda_graph_config.prefill.backend") in exp.lineage
    data = json.loads(json.dumps(exp.to_dict()))
    assert data["asked"] == "disable_piecewise_cuda_graph" and data["flag"] == PREFILL


def test_the_deprecated_alias_on_the_launch_locks_the_prefill_backend(trees):
    tree = trees("0.5.18")
    exp = explain(tree, "--disable-piecewise-cuda-graph", None, MODEL,
                  command=INCIDENT + " --disable-piecewise-cuda-graph", probes=CUDA_PROBES)
    assert [s.line for s in exp.fired] == [4523, 4545]
    assert "ends as 'disabled': set by srt/server_args.py:4523 (ServerArgs._parse_cuda_graph_config)" in exp.resolved
    rules = [s for s in exp.sites if s.function.startswith("ServerArgs._disable_") and "cudagraph" in s.function]
    assert rules and {s.status for s in rules} == {"not fired"}
    # _apply_cuda_graph_compatibility returns at once: the launch set the prefill backend itself.
    assert all(s.status_reason.startswith(
        "line 4555: (Phase.PREFILL, 'backend') in self._cuda_graph_config_locked is True (('prefill', 'backend') is "
        "in _cuda_graph_config_locked (from ServerArgs._parse_cuda_graph_config): set by srt/server_args.py:4523")
        for s in rules)


def test_without_the_hardware_the_default_backend_is_unknown_and_says_why(trees):
    exp = explain(trees("0.5.18"), "disable_piecewise_cuda_graph", None, MODEL, command=INCIDENT)
    assert exp.resolved.startswith("in the steps ServerArgs.__post_init__ runs, cuda_graph_config.prefill.backend "
                                   "is not known")
    assert "is_cuda(): hardware probe, not in the log" in exp.resolved


def test_why_on_the_command_line_takes_a_name_from_another_release(trees, tmp_path):
    command = tmp_path / "launch.sh"
    command.write_text(INCIDENT + "\n")
    proc = sgl_kit("why", "disable_piecewise_cuda_graph", "--package-dir", trees("0.5.18").root, "--command",
                   str(command), "--model-config", str(MODEL), "--cuda")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("in sglang 0.5.18 --disable-piecewise-cuda-graph is a deprecated alias")
    assert any(line.startswith("cuda_graph_config.prefill.backend in sglang 0.5.18: 45 assignment sites, 1 fired")
               for line in lines)
    bad = sgl_kit("why", "disable_piecewise_cuda_graph", "--package-dir", trees("0.5.18").root, "--probe", "is_cuda")
    assert bad.returncode == 2 and "--probe takes NAME=true|false" in bad.stderr


# --------------------------------------------------------------------------- lineage.yaml against the wheels


def test_lineage_data_agrees_with_every_release_read_here(trees):
    """Each span of kit/data/lineage.yaml that lists one of these releases as checked says what its tree says."""
    from packaging.specifiers import SpecifierSet

    names = {name: body for setting in lineage_data()["settings"].values() for name, body in setting["names"].items()}
    seen = 0
    for name, body in names.items():
        for span in body["history"]:
            for version in (str(v) for v in span.get("checked", [])):
                if version not in VERSIONS:
                    continue
                assert SpecifierSet(span["versions"]).contains(version), (name, span, version)
                found = lineage(trees(version), name).status
                expected = {"field": {"field"}, "alias": {"alias"}, "ignored": {"ignored"},
                            "absent": {"not yet", "removed"}}[span["is"]]
                assert found in expected, (name, version, found, span)
                seen += 1
    assert seen >= 25
