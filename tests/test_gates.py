"""kit.provenance.gates on real sglang releases: every refusal of a fast path, read from the release's
source and evaluated against a launch that sglang's own dry-run resolved.

The launches are the incident's (kit/data/resolved/incident-*-0.5.11.json, and the 0.5.23 ones in
tests/data/resolved/, each made by `sgl-kit dryrun` with the command in its `made_by`). The expected
sites were read in each release's source by hand; the chain must find them without being told where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.provenance.gates import FAST_PATHS, gate_chain

REPO = Path(__file__).resolve().parent.parent
RESOLVED = REPO / "kit" / "data" / "resolved"
CONFIG = json.loads((REPO / "kit" / "data" / "lab" / "Qwen3.6-27B" / "config.json").read_text())
NVIDIA = {"is_cuda": True, "is_hip": False, "is_npu": False, "is_cpu": False, "is_xpu": False}


def _args(name: str, **changes) -> dict:
    path = RESOLVED / name if (RESOLVED / name).exists() else REPO / "tests" / "data" / "resolved" / name
    return {**json.loads(path.read_text())["final"], **changes}


@pytest.fixture(scope="module")
def tree(sglang_trees):
    return sglang_trees


def _step(chain, where: str):
    found = [s for s in chain.steps if s.where == where]
    assert found, f"no refusal at {where}; the chain has {[s.where for s in chain.steps]}"
    return found[0]


# --------------------------------------------------------------------------- the prefill graph


def test_0511_the_incident_launch_has_it_off_at_setup_by_the_auto_disabled_flag(tree):
    chain = gate_chain(tree("0.5.11"), "prefill-graph", _args("incident-new-0.5.11.json"), CONFIG, probes=NVIDIA)
    assert chain.verdict == "never"
    assert chain.blocking.stage == "setup"
    assert chain.blocking.where == "srt/model_executor/model_runner.py:2805"
    assert "disable_piecewise_cuda_graph" in chain.blocking.text
    assert chain.blocking.message == "Disable piecewise CUDA graph because --disable-piecewise-cuda-graph is set"


def test_0511_enforcing_it_under_eagle_captures_a_graph_that_the_hidden_state_check_always_refuses(tree):
    # --enforce-piecewise-cuda-graph: the dry-run resolves disable_piecewise_cuda_graph=False
    args = _args("incident-fixed-0.5.11.json")
    assert args["disable_piecewise_cuda_graph"] is False and args["speculative_algorithm"] == "EAGLE"
    chain = gate_chain(tree("0.5.11"), "prefill-graph", args, CONFIG, probes=NVIDIA)
    assert chain.verdict == "never"
    block = chain.blocking
    assert (block.where, block.stage) == ("srt/model_executor/piecewise_cuda_graph_runner.py:454", "gate")
    assert block.text == "forward_batch.capture_hidden_mode != self.capture_hidden_mode"
    # both sides of the comparison come from the source, with their sites
    facts = " ".join(chain.facts)
    assert "capture_hidden_mode = FULL (2)" in facts and "srt/speculative/eagle_worker_v2.py:707" in facts
    assert "srt/speculative/eagle_worker.py:559" in facts
    assert "self.capture_hidden_mode = 0" in facts and "piecewise_cuda_graph_runner.py:217" in facts
    # the earlier checks of can_run pass for a plain text request, and say what would change that
    embeds = _step(chain, "srt/model_executor/piecewise_cuda_graph_runner.py:444")
    assert (embeds.verdict, embeds.typical, embeds.reads) == ("depends", "passes", ["input_embeds"])
    verify = _step(chain, "srt/model_executor/piecewise_cuda_graph_runner.py:449")
    assert verify.verdict == "passes"  # a prefill batch is EXTEND, not TARGET_VERIFY


def test_0511_without_speculative_decoding_the_same_graph_replays_for_text_requests(tree):
    args = _args("incident-fixed-0.5.11.json", speculative_algorithm=None)
    chain = gate_chain(tree("0.5.11"), "prefill-graph", args, CONFIG, probes=NVIDIA)
    assert chain.blocking is None
    hidden = _step(chain, "srt/model_executor/piecewise_cuda_graph_runner.py:454")
    assert hidden.verdict == "passes"
    assert any("asks no hidden states" in f for f in chain.facts)
    # what it cannot know without the live server is said, not guessed: the model object's layers
    assert {s.where for s in chain.undecided} >= {"srt/model_executor/model_runner.py:2816"}
    assert chain.verdict == "unknown"


def test_the_server_log_decides_the_setup_checks_it_logs(tree):
    args = _args("incident-fixed-0.5.11.json", speculative_algorithm=None)
    log = ("[2026-05-01 10:00:00] Capture piecewise CUDA graph begin. avail mem=12.00 GB\n"
           "[2026-05-01 10:00:31] Capture piecewise CUDA graph end. Time elapsed: 31.02 s. mem usage=0.41 GB.\n")
    chain = gate_chain(tree("0.5.11"), "prefill-graph", args, CONFIG, probes=NVIDIA, log_text=log)
    assert not [s for s in chain.steps if s.stage == "setup" and s.verdict == "unknown"]
    refused = ("Disable piecewise CUDA graph because some layers do not apply Standard GQA")
    chain = gate_chain(tree("0.5.11"), "prefill-graph", args, CONFIG, probes=NVIDIA, log_text=refused)
    assert chain.blocking.where == "srt/model_executor/model_runner.py:2896"
    assert "the server's log says it" in chain.blocking.reason


def test_0523_the_eagle_target_captures_full_hidden_states_and_passes_that_check(tree):
    args = _args("incident-new-0.5.23.json")
    assert args["cuda_graph_config"]["prefill"]["backend"] == "breakable"  # what 0.5.23 resolves for this launch
    chain = gate_chain(tree("0.5.23"), "prefill-graph", args, CONFIG, probes=NVIDIA)
    assert chain.blocking is None
    hidden = [s for s in chain.steps if "capture_hidden_mode" in s.text and s.via == "can_replay_locally"]
    assert hidden and hidden[0].verdict == "passes"
    assert any("eagle_worker_v2.py" in f and "FULL" in f for f in chain.facts)


def test_0523_on_tc_piecewise_the_setup_still_skips_the_eagle_target(tree):
    args = _args("incident-new-0.5.23.json")
    args["cuda_graph_config"] = {**args["cuda_graph_config"],
                                 "prefill": {**args["cuda_graph_config"]["prefill"], "backend": "tc_piecewise"}}
    chain = gate_chain(tree("0.5.23"), "prefill-graph", args, CONFIG, probes=NVIDIA)
    assert chain.verdict == "never"
    block = chain.blocking
    assert block.where.startswith("srt/model_executor/model_runner_components/cuda_graph_setup.py:")
    assert "is_eagle()" in block.text and "TC_PIECEWISE" in block.text
    assert "EAGLE target on tc_piecewise" in block.message


# --------------------------------------------------------------------------- custom all-reduce


@pytest.mark.parametrize("tp, facts, where", [
    (4, {"p2p": True, "full_nvlink": False, "same_node": True},
     "srt/distributed/device_communicators/custom_all_reduce_utils.py:462"),  # > 2 PCIe-only GPUs
    (2, {"p2p": False, "full_nvlink": False, "same_node": True},
     "srt/distributed/device_communicators/custom_all_reduce_utils.py:474"),  # no P2P
])
def test_0511_custom_all_reduce_is_refused_at_setup_where_the_source_says(tree, tp, facts, where):
    args = _args("incident-new-0.5.11.json", tp_size=tp)
    chain = gate_chain(tree("0.5.11"), "custom-all-reduce", args, CONFIG, probes=NVIDIA, facts=facts)
    assert chain.blocking is not None and chain.blocking.where == where
    assert chain.blocking.via == "__init__"  # read through CustomAllreduce.__init__'s `full_nvlink is None`


def test_0511_custom_all_reduce_runs_on_two_gpus_with_p2p_and_unknown_without_the_evidence(tree):
    args = _args("incident-new-0.5.11.json")
    chain = gate_chain(tree("0.5.11"), "custom-all-reduce", args, CONFIG, probes=NVIDIA,
                       facts={"p2p": True, "full_nvlink": False, "same_node": True})
    assert chain.blocking is None and chain.verdict == "runs for plain text requests"
    sizes = [s for s in chain.steps if s.verdict == "depends"]
    assert sizes and all("all-reduced tensor" in " ".join(s.reads) for s in sizes)
    chain = gate_chain(tree("0.5.11"), "custom-all-reduce", args, CONFIG, probes=NVIDIA, facts={"same_node": True})
    p2p = _step(chain, "srt/distributed/device_communicators/custom_all_reduce_utils.py:474")
    assert p2p.verdict == "unknown" and "nvidia-smi topo -p2p r" in p2p.reason


# --------------------------------------------------------------------------- decode graph and torch.compile


def test_0511_decode_graph_off_by_flag_is_refused_at_setup(tree):
    args = _args("incident-new-0.5.11.json", disable_cuda_graph=True)
    chain = gate_chain(tree("0.5.11"), "decode-graph", args, CONFIG, probes=NVIDIA)
    assert chain.blocking.where == "srt/model_executor/model_runner.py:2761"
    on = gate_chain(tree("0.5.11"), "decode-graph", _args("incident-new-0.5.11.json"), CONFIG, probes=NVIDIA)
    assert on.blocking is None and _step(on, "srt/model_executor/model_runner.py:2761").verdict == "passes"
    # the runner sets its hidden-state mode again while capturing: not read as its __init__ value
    hidden = [s for s in on.steps if "capture_hidden_mode" in s.text]
    assert hidden and hidden[0].verdict in ("unknown", "depends")


def test_0511_torch_compile_needs_its_flag_and_covers_the_captured_sizes_up_to_its_max(tree):
    off = gate_chain(tree("0.5.11"), "torch-compile", _args("incident-new-0.5.11.json"), CONFIG, probes=NVIDIA)
    assert off.verdict == "never" and "enable_torch_compile" in off.blocking.text
    on = gate_chain(tree("0.5.11"), "torch-compile", _args("incident-new-0.5.11.json", enable_torch_compile=True),
                    CONFIG, probes=NVIDIA)
    assert on.blocking is None
    assert any(s.verdict == "depends" and "torch_compile_max_bs" in s.text for s in on.steps)
    assert on.requires is not None and on.requires.fast_path == "decode-graph"


def test_every_fast_path_reads_on_both_layouts_and_says_where_it_looked(tree):
    for version in ("0.5.11", "0.5.23"):
        args = _args("incident-new-0.5.11.json" if version == "0.5.11" else "incident-new-0.5.23.json")
        for name in FAST_PATHS:
            chain = gate_chain(tree(version), name, args, CONFIG, probes=NVIDIA,
                               facts={"p2p": True, "full_nvlink": False, "same_node": True})
            assert chain.read, f"{name} on {version}: {chain.notes}"
            for step in chain.steps:
                path, line = step.where.rsplit(":", 1)
                text = (Path(tree(version).root) / path.removeprefix("srt/").join(["srt/", ""])).read_text()
                assert 0 < int(line) <= len(text.splitlines()), step
            assert chain.to_dict()["verdict"] == chain.verdict


def test_an_unknown_fast_path_is_refused_with_the_known_ones(tree):
    from kit.errors import KitError

    with pytest.raises(KitError, match="prefill-graph"):
        gate_chain(tree("0.5.11"), "prefil-graph", {}, None)
