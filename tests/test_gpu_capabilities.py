"""GPU capabilities as data (kit/data/gpu_capabilities.yaml, kit.hardware_caps) and the quantization
facts mined from each release's source (kit/data/gpu_support.json, kit.doctor.gpu_support), and what the
doctor makes of them when the GPU is named but its links were not read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kit.doctor import diagnose, from_files
from kit.doctor.gpu_support import (
    ARCH_GPUS,
    MODELS,
    _attention_defaults,
    _cuda_returns,
    attention_default,
    gpu_lines,
    mine,
    runs_on,
    support,
)
from kit.hardware import GPU, P2P, Hardware, gpu_profiles
from kit.hardware_caps import NVLINK_VALUES, P2P_VALUES, _load, capabilities, link_note, p2p_from_model

ROOT = Path(__file__).resolve().parent.parent


def test_every_gpu_of_the_table_has_its_links_and_architecture_with_a_source():
    archs, links = _load()
    assert set(links) == set(gpu_profiles()), "gpu_capabilities.yaml and gpus.yaml list other GPUs"
    for key, entry in links.items():
        assert entry.p2p in P2P_VALUES and entry.nvlink in NVLINK_VALUES, key
        assert re.search(r"https?://", entry.source), f"{key}: a link fact without its source"
        assert entry.gbs is None or entry.nvlink != "none", f"{key}: an NVLink rate on a model without NVLink"
    for key, profile in gpu_profiles().items():
        caps = capabilities(key)
        assert caps.architecture is not None, f"{key} ({profile.arch}) matches no architecture"
        assert re.search(r"https?://", caps.architecture.source)
    assert all(a.fp8 for a in archs if a.fp4), "an architecture with FP4 but not FP8"


def test_the_tensor_formats_follow_the_architecture():
    assert (capabilities("a6000").fp8, capabilities("rtx4090").fp8, capabilities("h100").fp4) == (False, True, False)
    assert capabilities("b200").fp4 and capabilities("rtx5090").fp4 and capabilities("mi355x").fp4
    assert capabilities("no such gpu") is None


def _hw(key: str, count: int) -> Hardware:
    name = gpu_profiles()[key].name
    return Hardware(f"--gpu {key}", [GPU(i, name) for i in range(count)])


def test_peer_access_is_decided_by_the_model_only_where_the_model_decides_it():
    refused = p2p_from_model(_hw("rtx4090", 2))
    assert refused.supported("GPU0", "GPU1") is False and "gpu_capabilities.yaml" in refused.basis
    assert "sglang/issues/4814" in refused.basis
    assert p2p_from_model(_hw("h100", 8)).supported("GPU3", "GPU7") is True
    assert p2p_from_model(_hw("a6000", 2)) is None  # offered over PCIe: the platform may still block it
    assert p2p_from_model(_hw("rtx3090", 2)) is None  # a bridge may or may not be fitted
    assert p2p_from_model(_hw("rtx4090", 1)) is None
    read = _hw("rtx4090", 2)
    read.p2p = P2P(["GPU0", "GPU1"], {"GPU0-GPU1": "OK", "GPU1-GPU0": "OK"})
    assert p2p_from_model(read) is None, "what nvidia-smi read on the box is never replaced"
    assert "112.5 GB/s" in link_note(_hw("a6000", 2))


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    def write(line: str):
        path = tmp_path_factory.mktemp("launch") / "launch.sh"
        path.write_text(f"python -m sglang.launch_server --model-path /models/Qwen3-32B {line}\n")
        return str(path)
    return write


def test_two_rtx_4090s_without_topo_get_the_p2p_finding_said_as_the_models(launch):
    ev = from_files(command=launch("--tp 2"), sglang="0.5.11", gpu="rtx4090")
    d = diagnose(ev)
    found = [f for f in d.findings if f.id == "p2p-unavailable"]
    assert found, [f.id for f in d.findings]
    text = "\n".join(found[0].evidence)
    assert "the GPU model's capabilities" in text and "not read on the box" in text
    assert not any("nvidia-smi topo -p2p:" in line for line in found[0].evidence)
    assert not any("peer-to-peer access between the tensor-parallel GPUs was not read" in q for q in d.open_questions)


def test_two_a6000s_keep_the_question_with_what_the_model_says(launch):
    d = diagnose(from_files(command=launch("--tp 2"), sglang="0.5.11", gpu="a6000"))
    assert "p2p-unavailable" not in [f.id for f in d.findings]
    asked = [q for q in d.open_questions if "peer-to-peer access between the tensor-parallel GPUs was not read" in q]
    assert asked and "what the GPU model says" in asked[0] and "112.5 GB/s" in asked[0]


# --------------------------------------------------------------------------- quantization mined per release


def test_only_the_returns_a_cuda_gpu_reaches_count():
    """Parser check on a function written here (not sglang's): another platform's branch is left out."""
    func = ast.parse("def get_min_capability(self):\n    if _is_musa:\n        return 31\n"
                     "    if is_npu():\n        return 0\n    return 100 if self.use_mxfp8 else 80\n").body[0]
    assert [ast.unparse(r.value) for r in _cuda_returns(func)] == ["100 if self.use_mxfp8 else 80"]


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.11", "0.5.23"])
def test_the_committed_table_is_what_the_release_source_says(version):
    from kit.launch_file import source_tree

    tree = source_tree(sglang=version)
    committed = support()[version]
    assert mine(tree) == {k: v for k, v in committed.items() if k not in ("attention", "attention_defaults")}
    assert _attention_defaults(tree) == committed["attention_defaults"]
    for method, entry in committed["methods"].items():
        if entry.get("min_capability") is None:
            continue
        path, line = entry["site"].rsplit(":", 1)
        body = "\n".join(tree.read_text(path).splitlines()[int(line) - 1:int(line) + 12])
        assert "def get_min_capability" in body, (method, entry)
        assert str(entry["min_capability"]) in body or ".get_min_capability()" in body, (method, entry)


def test_what_a_release_does_with_fp8_on_each_architecture():
    on_a6000 = runs_on("0.5.11", "fp8", 86)
    assert on_a6000["marlin"] and not on_a6000["refused"] and on_a6000["marlin_site"].startswith("srt/layers/")
    assert runs_on("0.5.11", "fp8", 75)["refused"]
    h100 = runs_on("0.5.11", "fp8", 90)
    assert not h100["refused"] and not h100["marlin"]
    assert runs_on("0.5.11", "w8a8_fp8", 86)["refused"]
    assert runs_on("0.5.10", "fp8", 86)["release"] == "0.5.10.post1"
    assert runs_on("0.5.11", "no-such-method", 86) is None and runs_on("9.9.9", "fp8", 86) is None
    assert runs_on("0.3.6.post3", "fp8", 86) is None  # vllm's configs: not in sglang's source


def test_the_doctor_names_fp8_on_marlin_on_an_ampere_gpu_and_nothing_on_hopper(launch):
    d = diagnose(from_files(command=launch("--tp 2 --quantization fp8"), sglang="0.5.11", gpu="a6000"))
    found = [f for f in d.findings if f.id == "quantization-not-native-on-gpu"]
    assert found and any("Marlin" in e for e in found[0].evidence)
    assert found[0].estimate.basis == "not estimated"
    hopper = diagnose(from_files(command=launch("--tp 2 --quantization fp8"), sglang="0.5.11", gpu="h100"))
    assert "quantization-not-native-on-gpu" not in [f.id for f in hopper.findings]
    refused = diagnose(from_files(command=launch("--quantization w8a8_fp8"), sglang="0.5.11", gpu="a6000"))
    f = next(f for f in refused.findings if f.id == "quantization-not-native-on-gpu")
    assert any("does not start" in e for e in f.evidence)


def test_a_recorded_attention_default_is_what_a_dry_run_of_that_release_picks(env_0511):
    """The table's dry-run records against a new dry-run of 0.5.11 on two architectures."""
    from kit.dryrun import dry_run

    configs = ROOT / "kit" / "data" / "model_configs"
    for gpu, sm in (("a6000", 86), ("h100", 90)):
        assert gpu in ARCH_GPUS
        got = dry_run([], model=str(configs / MODELS["dense"]), gpu=gpu, sglang="0.5.11")
        recorded = attention_default("0.5.11", sm, mla=False)
        assert recorded["backend"] == got.final["attention_backend"]
        assert recorded["site"] == [c for c in got.changes if c.field == "attention_backend"][-1].where


def test_the_known_issues_report_says_what_the_release_does_on_the_gpu():
    lines = gpu_lines("0.5.9", "h100")
    assert any(line.startswith("attention backend by default in sglang 0.5.9 (its dry-run on h100") for line in lines)
    assert any("modelopt_fp4 (needs SM100)" in line for line in lines)
    old = gpu_lines("0.4.6", "h100")
    assert any("model_runner.py" in line and "the dry-run does not run this release" in line for line in old)
    ampere = " ".join(gpu_lines("0.5.11", "a6000"))
    assert "FP8 no" in ampere and "Marlin" in ampere and "w8a8_fp8 (needs SM89)" in ampere
    assert gpu_lines("0.5.11", "no such gpu") == []
    takes = [line for line in gpu_lines("0.5.11", "a6000") if line.startswith("awq_marlin takes over")]
    assert takes and "--quantization is none, awq_marlin, marlin" in takes[0] and "awq/awq.py:" in takes[0]
    assert not any(line.startswith("awq_marlin takes over") for line in gpu_lines("0.5.11", "t4"))  # below SM80


def test_an_upgrade_report_shows_both_releases_on_the_gpu():
    from kit.doctor import known_issues, known_report

    found = known_report.report(known_issues.evidence_for("0.5.11", "a6000"), upgrade_to="0.5.23")
    text = "\n".join(found.upgrade_lines())
    assert "SGLANG 0.5.11 ON THIS GPU" in text and "SGLANG 0.5.23 ON THIS GPU" in text
    assert "srt/arg_groups/overrides.py" in text  # 0.5.23 picks its attention backend in its arg groups
    assert found.to_dict()["upgrade"]["hardware"] == found.hardware_after
    assert "<li>" in found.hardware_html()
    assert known_report.report(known_issues.evidence_for("0.5.11", None)).hardware == []


def test_an_unknown_tp_size_over_gpus_without_peer_access_is_a_question():
    """sgl-project/sglang#4723 as posted: a server_args line cut before tp_size, 'two 4090s' in a sentence."""
    d = diagnose(from_files(paste=str(ROOT / "data" / "incidents" / "sglang-4723-two-4090-tp-slower" / "issue.md")))
    asked = [q for q in d.open_questions if q.startswith("the tensor-parallel size is not known")]
    assert asked and "no peer access" in asked[0] and "gpu_capabilities.yaml" in asked[0]
    assert "p2p-unavailable" not in [f.id for f in d.findings], "an unknown tp_size is a question, not a finding"


def test_the_table_s_command_names_what_it_knows_for_a_method_it_does_not(capsys):
    from kit.doctor.gpu_support import main

    assert main(["--method", "fp9"]) == 2
    err = capsys.readouterr().err
    assert "no release registers --quantization 'fp9'" in err and "fp8" in err
    assert main(["--method", "fp8"]) == 0 and "0.5.11" in capsys.readouterr().out
