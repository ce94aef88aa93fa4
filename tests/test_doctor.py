"""kit.doctor: every rule, firing and not firing, on real inputs.

Where the inputs come from:
- server_args lines: printed by sglang 0.5.11's own code for each launch below, made once per
  module by the dry-run (real ``ServerArgs.__post_init__`` on CPU, GPU probes answering like an
  RTX A6000). Written by hand: only the ``[2026-11-30 10:00:00] `` prefix, sglang's log format;
- Decode batch lines: tests/data/logs/decode_lines.txt, public threads (its SOURCES.md);
- nvidia-smi outputs: tests/data/hardware, public threads (its SOURCES.md);
- the source: the real sglang wheels (0.5.10.post1, 0.5.11, 0.5.23);
- the model: kit/data/resolved/models/qwen3.6-27b/config.json, the incident's model.
Inputs written by hand are said to be, where they are used.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kit.doctor import RULES, diagnose, from_files
from kit.doctor.roofline import roofline
from kit.hosts import LocalHost
from kit.provenance import choice
from kit.source import SourceTree

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b"
HW = Path(__file__).parent / "data" / "hardware"
DECODE = (Path(__file__).parent / "data" / "logs" / "decode_lines.txt").read_text().splitlines()
PREFIX = "[2026-11-30 10:00:00] "

BASE = "--model-path /root/models/Qwen3.6-27B --tp-size 2 --trust-remote-code --mem-fraction-static 0.85"
SPEC = ("--speculative-algorithm EAGLE --mamba-scheduler-strategy extra_buffer --speculative-num-steps {steps} "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens {draft}")
NEW = f"{BASE} {SPEC.format(steps=1, draft=2)}"
OLD = f"{BASE} {SPEC.format(steps=3, draft=4)}"
LAUNCHES = {
    "new": NEW,
    "old": OLD,
    "fixed": f"{OLD} --enforce-piecewise-cuda-graph",
    "asked-off": f"{OLD} --disable-piecewise-cuda-graph",
    "no-cuda-graph": f"{OLD} --disable-cuda-graph",
    "torch-native": f"{OLD} --attention-backend torch_native",
    "no-buffer": "--model-path /root/models/Qwen3.6-27B --tp-size 2 --mamba-scheduler-strategy no_buffer",
    "no-radix": "--model-path /root/models/Qwen3.6-27B --tp-size 2 --mamba-scheduler-strategy no_buffer "
                "--disable-radix-cache",
    "no-custom-ar": f"{OLD} --disable-custom-all-reduce",
    "auto-mem": "--model-path /root/models/Qwen3.6-27B --tp-size 2 --speculative-algorithm EAGLE "
                "--mamba-scheduler-strategy extra_buffer --speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4",
    "max-running-64": f"{OLD} --max-running-requests 64",
    "chunked-2048": f"{OLD} --chunked-prefill-size 2048",
    "tp1": "--model-path /root/models/Qwen3.6-27B --mem-fraction-static 0.85 "
           + SPEC.format(steps=3, draft=4),
    "nospec": BASE,
    "tp4-no-custom-ar": "--model-path /root/models/Qwen3.6-27B --tp-size 4 --mem-fraction-static 0.85 "
                        "--disable-custom-all-reduce",
}


@pytest.fixture(scope="module")
def launches(env_0511, tmp_path_factory) -> dict[str, tuple[str, str]]:
    """name -> (log file, command file), the log line printed by sglang 0.5.11 itself."""
    from kit.dryrun import dry_run_many

    out = tmp_path_factory.mktemp("launches")
    results = dry_run_many(list(LAUNCHES.values()), model=QWEN, gpu="a6000", sglang="0.5.11")
    files = {}
    for (name, flags), result in zip(LAUNCHES.items(), results, strict=True):
        assert result.ok, f"{name}: {result.error and result.error.headline}"
        (out / f"{name}.log").write_text(PREFIX + result.server_args_line + "\n")
        (out / f"{name}.cmd").write_text("python -m sglang.launch_server " + flags + "\n")
        files[name] = (str(out / f"{name}.log"), str(out / f"{name}.cmd"))
    return files


@pytest.fixture(scope="module")
def pkg(sglang_source) -> str:
    return sglang_source("0.5.11")


@pytest.fixture(scope="module")
def tree(pkg):
    """One parsed 0.5.11 source for the module: the rules' answers do not depend on re-reading it."""
    return SourceTree.at(LocalHost(), pkg)


def run(launches, tree, name, *, extra_log: list[str] = (), command: bool = True, **files):
    log, cmd = launches[name]
    if extra_log:
        log = _with_lines(log, extra_log)
    options = {"log": log, "model_config": str(QWEN / "config.json"), "tree": tree, "gpu": "a6000"}
    if command:
        options["command"] = cmd
    options.update(files)
    return diagnose(from_files(**options))


def _with_lines(log: str, lines: list[str]) -> str:
    path = Path(log).with_suffix(f".{len(lines)}-{abs(hash(tuple(lines)))}.log")
    path.write_text(Path(log).read_text() + "\n".join(lines) + "\n")
    return str(path)


def ids(diagnosis) -> list[str]:
    return [f.id for f in diagnosis.findings]


def finding(diagnosis, rule_id):
    (found,) = [f for f in diagnosis.findings if f.id == rule_id]
    return found


def test_there_are_at_least_fifteen_rules_with_unique_ids_and_valid_ranges():
    from kit.doctor.rulebase import version_in

    assert len(RULES) >= 15
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        assert version_in("0.5.11", r.versions), r  # every rule covers the incident's release


# --------------------------------------------------------------------------- CUDA graphs


def test_prefill_graph_rule_names_the_chain_and_that_restoring_it_buys_nothing_under_eagle(launches, tree, pkg):
    d = run(launches, tree, "new")
    f = finding(d, "prefill-cuda-graph-off")
    assert "the launch command does not ask for it" in f.evidence[0]
    assert f.evidence[1].startswith("rule '8. Multimodal / VLM models' fired at srt/server_args.py:1230")
    assert "Qwen3_5ForConditionalGeneration is in multimodal_model_archs" in f.evidence[1]
    chain = f.evidence[2]
    assert chain.index("1. Disable Model Arch") < chain.index("3. Torch compile") < chain.index("7. LoRA")
    assert f.sites == ["srt/server_args.py:1230"]
    # turned back on, 0.5.11's own gate refuses every EAGLE target prefill: the fix is not offered as a gain
    assert "never replayed" in f.evidence[3] and "piecewise_cuda_graph_runner.py:454" in f.evidence[3]
    assert f.changes == [] and "--enforce-piecewise-cuda-graph" not in (d.fixed_command or "")
    assert (f.impact, f.impact_basis, f.estimate.metric) == (0.0, "from the source", "time to first token")
    assert "restoring it buys nothing here" in f.impact_reason
    assert "srt/speculative/eagle_worker_v2.py:707" in f.impact_reason  # the batch asks for FULL hidden states
    assert f.fix[0].startswith("restoring it would not help in sglang 0.5.11")
    later = [x for x in f.fix if x.startswith("from sglang")]
    assert later and "0.5.14 with --cuda-graph-backend-prefill breakable" in later[-1]
    assert "pull/28870" in later[-1]
    risk, language_only = f.avoid
    assert risk.startswith("--enforce-piecewise-cuda-graph") and "Used for testing" in risk
    assert "srt/server_args.py:1196" in risk and "never replays" in risk
    assert language_only.startswith("--language-only") and "--encoder-urls" in language_only
    ((change, why),) = f.checks
    assert str(change) == "--enforce-piecewise-cuda-graph" and "piecewise_cuda_graph_runner.py:454" in why
    assert f.to_dict()["checks"][0]["predicted"] == "no change"
    assert "check: --enforce-piecewise-cuda-graph is predicted to change nothing here" in d.to_text()
    assert f.affects == ("prefill/extend",)


def test_without_speculative_decoding_the_escape_is_the_fix_and_its_risk_is_said(launches, tree, pkg):
    d = run(launches, tree, "nospec")
    f = finding(d, "prefill-cuda-graph-off")
    assert [str(c) for c in f.changes] == ["--enforce-piecewise-cuda-graph"]
    assert f.impact is None and f.estimate.metric == "time to first token"
    assert "no refusal of its gate holds for every request of this launch" in f.impact_reason
    assert f.checks == []
    (risk,) = [x for x in f.fix if x.startswith("its risk:")]
    assert "Used for testing" in risk and "for speed or for correctness" in risk


def test_offline_without_a_model_config_the_escape_holds_for_every_rule(pkg):
    log = Path(__file__).parent / "data" / "provenance" / "incident-0.5.11.log"
    d = diagnose(from_files(log=str(log), package_dir=pkg))
    f = finding(d, "prefill-cuda-graph-off")
    # the log's launch runs EAGLE: turned back on, 0.5.11's gate would refuse its prefill, config.json or not
    assert f.changes == [] and f.fix[0].startswith("restoring it would not help in sglang 0.5.11")
    assert "no flag that skips" not in d.to_text()
    unknown = next(e for e in f.evidence if e.startswith("without the model's config.json"))
    assert "8. Multimodal / VLM models" in unknown and "--model-config" in unknown
    # The roofline knows speculative decoding is on and says the accept length is unknown.
    assert "no speculative decoding" not in d.to_text() and d.roofline.speculative_steps == 1


def test_prefill_graph_rule_is_silent_once_enforced_and_its_remove_is_moot_under_the_vlm_rule(launches, tree, pkg):
    assert "prefill-cuda-graph-off" not in ids(run(launches, tree, "fixed"))
    # asked off, for a model that counts as a VLM: removing the flag changes nothing, since the VLM rule
    # of the chain turns the graph off anyway (kit.doctor.reconcile sets the finding aside and says why)
    rule8 = finding(run(launches, tree, "new"), "prefill-cuda-graph-off").sites[0]
    d = run(launches, tree, "asked-off")
    assert "prefill-cuda-graph-off" not in ids(d)
    (note,) = [n for n in d.set_aside if n.startswith("prefill-cuda-graph-off")]
    assert f"forces disable_piecewise_cuda_graph = True ({rule8}, read statically)" in note
    assert "self.get_model_config().is_multimodal" in note and "remove --disable-piecewise-cuda-graph" in note
    assert "--disable-piecewise-cuda-graph" in (d.fixed_command or "")


def test_decode_graph_off_when_asked_and_when_sglang_turns_it_off(launches, tree, pkg):
    asked = finding(run(launches, tree, "no-cuda-graph"), "decode-cuda-graph-off")
    assert "the launch command sets it" in asked.evidence[0] and asked.fix == ["remove --disable-cuda-graph"]
    auto = finding(run(launches, tree, "torch-native"), "decode-cuda-graph-off")
    assert "sglang set it at srt/server_args.py:2557" in auto.evidence[0]
    assert auto.sites == ["srt/server_args.py:2557"]
    assert "decode-cuda-graph-off" not in ids(run(launches, tree, "old"))


def test_decode_batches_above_the_graph_ceiling(launches, tree, pkg):
    # Real decode lines of a server whose batches ran eagerly (sglang PR 13023), after the launch's line.
    eager = run(launches, tree, "old", extra_log=DECODE[4:6])
    f = finding(eager, "decode-batches-above-graph-ceiling")
    assert "cuda_graph_max_bs = 32" in f.evidence[0]
    assert f.fix == ["--cuda-graph-max-bs 48"]
    graphs = run(launches, tree, "old", extra_log=DECODE[6:7])  # cuda graph: True
    assert "decode-batches-above-graph-ceiling" not in ids(graphs)


# --------------------------------------------------------------------------- speculative decoding


@pytest.mark.parametrize("version, where", [("0.5.10.post1", "srt/server_args.py:"),
                                             ("0.5.11", "srt/server_args.py:7506"),
                                             ("0.5.23", "srt/arg_groups/speculative_hook.py:")])
def test_sglang_own_speculative_choice_is_read_on_every_layout(sglang_source, version, where):
    tree = SourceTree.at(LocalHost(), sglang_source(version))
    names = ("auto_choose_speculative_params", "_auto_choose_speculative_params")
    args = {"speculative_algorithm": "EAGLE"}
    qwen = choice(tree, names, args, QWEN / "config.json", parameters={"model_arch": "Qwen3_5ForConditionalGeneration"})
    llama = choice(tree, names, args, {"architectures": ["LlamaForCausalLM"]},
                   parameters={"model_arch": "LlamaForCausalLM"})
    assert (qwen.value, qwen.known) == ((3, 1, 4), True) and qwen.where.startswith(where)
    assert llama.value == (5, 4, 8)  # sglang's own choice for Llama: the rule reads it, it knows no table


def test_speculative_steps_below_sglang_own_choice(launches, tree, pkg):
    f = finding(run(launches, tree, "new"), "speculative-steps-low")
    # 7506 is the `else` of auto_choose_speculative_params: reached when none of its 4 conditions names the
    # architecture, a generic fallback, not a choice for this model
    assert f.evidence[1] == ("sglang 0.5.11's default when the launch sets no steps (auto_choose_speculative_params, "
                             "srt/server_args.py:7506: the fallback it returns when none of its 4 conditions matches, "
                             "not a value chosen for Qwen3_5ForConditionalGeneration) is 3 steps and 4 draft tokens")
    assert "for this model" not in " ".join(f.evidence)
    # the cost beside the gain: 0.5.11 reserves mamba_cache_per_req x max_running_requests x draft tokens
    # (model_runner_kv_cache_mixin.py:85-88); per request 48 layers x ((5120 x 3) x 2 + (24 x 128 x 128) x 4) bytes
    per_req = 48 * (5120 * 3 * 2 + 24 * 128 * 128 * 4)
    assert per_req == 76_972_032
    cost = f.evidence[2]
    assert cost.startswith(f"cost: 2 -> 4 draft tokens raises sglang's intermediate-state reserve from "
                           f"{per_req * 48 * 2 / 2**30:.2f} GiB to {per_req * 48 * 4 / 2**30:.2f} GiB per GPU (+6.88 GiB")
    assert "srt/model_executor/model_runner_kv_cache_mixin.py:85" in cost and "48 running requests" in cost
    assert "the cost beside it: 2 -> 4 draft tokens adds 6.88 GiB per GPU" in f.impact_reason
    assert f.impact_reason.index("p 0.9: 38%") < f.impact_reason.index("the cost beside it")  # the gain, then the cost
    assert f.fix[:2] == ["--speculative-num-steps 3", "--speculative-num-draft-tokens 4"]
    assert "weigh the memory" in f.fix[2] and "--max-running-requests" in f.fix[2]
    # 7506 runs only when the launch sets no steps (`if self.speculative_num_steps is None`, 3523): this
    # launch sets 1, so it is not the cause of the value and is not cited as a source
    assert f.sites == [] and f.dropped == ["srt/server_args.py:7506: `self.speculative_num_steps is None` is false "
                                           "for this launch (ServerArgs._handle_speculative_decoding:3523)"]
    assert "speculative-steps-low" not in ids(run(launches, tree, "old"))


def test_speculative_steps_below_the_baseline_use_the_measured_accept_length(launches, tree, pkg):
    lab_line = ("[2026-11-30 19:04:16 TP0] Decode batch, #running-req: 1, #token: 140, token usage: 0.00, "
                "accept len: 1.85, accept rate: 0.85, cuda graph: True, gen throughput (token/s): 31.93, "
                "#queue-req: 0, ")  # the lab's line (kit.lab prints sglang's format); written by the kit
    d = run(launches, tree, "new", extra_log=[lab_line], baseline=launches["old"][1])
    f = finding(d, "speculative-steps-low")
    assert f.evidence[1].startswith("the baseline ") and "3 steps and 4 draft tokens" in f.evidence[1]
    # p = 0.85 from 1 + p = 1.85; 3 steps: 1 + .85 + .85^2 + .85^3 = 3.19 tokens per round
    assert "acceptance of 0.85" in f.impact_reason and "1.85 -> 3.19" in f.impact_reason
    assert 0.25 < f.impact < 0.45


def test_low_accept_length(launches, tree, pkg):
    # Real lines: accept len 1.00 (mit-han-lab/fastrl#4) and 2.54 (sglang#4759), after a 3-step launch.
    low = finding(run(launches, tree, "old", extra_log=DECODE[2:3]), "speculative-accept-low")
    assert low.evidence == [f"accept length 1.00 of a possible 4 per round ({low.evidence[0].split('(', 1)[1]}"]
    healthy = run(launches, tree, "old", extra_log=DECODE[1:2])
    assert "speculative-accept-low" not in ids(healthy)


# --------------------------------------------------------------------------- scheduler and caches


def test_overlap_scheduler_turned_off_by_mamba_no_buffer(launches, tree, pkg):
    d = run(launches, tree, "no-buffer")
    overlap = finding(d, "overlap-scheduler-off")
    # 2433 holds `if self.speculative_algorithm is None: self.disable_overlap_schedule = True` under
    # mamba no_buffer; the caller's guards need hardware and file probes the log cannot answer.
    assert "not asked for and not the default (False): sglang set it" in overlap.evidence[0]
    assert "srt/server_args.py:2433" in overlap.evidence[0]
    mamba = finding(d, "mamba-no-buffer")
    assert mamba.fix == ["--mamba-scheduler-strategy extra_buffer"]
    assert "overlap scheduler is off" in " ".join(mamba.evidence)
    clean = run(launches, tree, "old")
    assert "overlap-scheduler-off" not in ids(clean) and "mamba-no-buffer" not in ids(clean)


def test_radix_cache_off_when_asked(launches, tree, pkg):
    f = finding(run(launches, tree, "no-radix"), "radix-cache-off")
    assert f.fix == ["remove --disable-radix-cache"]
    assert "radix-cache-off" not in ids(run(launches, tree, "old"))


def test_max_running_requests_set_to_48_by_speculative_decoding(launches, tree, pkg):
    f = finding(run(launches, tree, "old"), "speculative-capped-running-requests")
    assert f.sites == ["srt/server_args.py:3455"] and f.affects == ("queueing",)
    assert f.impact is None and f.impact_basis == "not estimated" and "concurrency" in f.impact_reason
    assert "speculative-capped-running-requests" not in ids(run(launches, tree, "max-running-64"))


def test_mem_fraction_lowered_for_a_vlm(launches, tree, pkg):
    f = finding(run(launches, tree, "auto-mem"), "mem-fraction-lowered-for-vlm")
    assert f.sites == ["srt/server_args.py:7171"] and "adjust_mem_fraction_for_vlm" in f.evidence[0]
    # The value before sglang's adjustment, by 0.5.11's own formula: 0.95 x clamp(1 - 0.1 x (r - 1), 0.8, 1.05),
    # r = layers x hidden^2 / (24 x 1024^2), with the layers read by `getattr(vision_config, "num_hidden_layers",
    # 24)` (srt/server_args.py:7147): the Qwen3.6 vision config has `depth` (27), not num_hidden_layers, so
    # sglang reads 24 layers (x 1152 hidden): r = 1152^2 / 1024^2.
    r = 24 * 1152**2 / (24 * 1024**2)
    factor = 0.95 * max(0.8, min(1.05, 1 - 0.1 * (r - 1)))
    value = float(f.evidence[0].split("mem_fraction_static = ")[1].split(",")[0])
    assert f.fix[0] == f"--mem-fraction-static {round(value / factor, 3)}"
    assert "reads a vision tower of 24 layers x 1152 hidden" in f.evidence[1] and "srt/server_args.py:7147" in f.evidence[1]
    assert "`depth` = 27" in f.evidence[1] and "srt/server_args.py:7137" in f.evidence[1]
    assert "mem-fraction-lowered-for-vlm" not in ids(run(launches, tree, "old"))  # --mem-fraction-static 0.85


def test_the_value_before_the_vlm_factor_is_what_sglang_itself_started_from(pkg, tmp_path):
    # The dry-run (real ServerArgs.__post_init__ of 0.5.11, tests/data/dryrun/SOURCES.md) recorded each write of
    # mem_fraction_static: 0.775 at _handle_gpu_memory_settings, then 0.716693359375 at
    # adjust_mem_fraction_for_vlm. The kit, reading the formula, must get back to sglang's own 0.775.
    saved = json.loads((Path(__file__).parent / "data" / "dryrun" / "incident-automem-0.5.11.json").read_text())
    (before, after) = [w for w in saved["writes"] if w["field"] == "mem_fraction_static"]
    assert (before["function"], after["function"]) == ("ServerArgs._handle_gpu_memory_settings",
                                                       "ServerArgs.adjust_mem_fraction_for_vlm")
    log, cmd = tmp_path / "server.log", tmp_path / "launch.cmd"
    log.write_text(PREFIX + saved["server_args_line"] + "\n")
    cmd.write_text("python -m sglang.launch_server " + shlex.join(saved["argv"]) + "\n")
    d = diagnose(from_files(log=str(log), command=str(cmd), model_config=str(QWEN / "config.json"), package_dir=pkg))
    f = finding(d, "mem-fraction-lowered-for-vlm")
    assert f.fix[0] == f"--mem-fraction-static {before['after']}"  # 0.775, not 0.788 (27 layers)
    assert f"{after['after']}" in f.evidence[0]


def test_chunked_prefill_off_for_a_vlm_sglang_cannot_chunk(launches, tree, pkg, tmp_path):
    # Written by hand: only `architectures` matters here; sglang's own lists decide, read statically.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["MllamaForConditionalGeneration"], "model_type": "mllama"}))
    d = diagnose(from_files(command=launches["old"][1], model_config=str(config), package_dir=pkg))
    f = finding(d, "chunked-prefill-off-for-vlm")
    assert "MllamaForConditionalGeneration is multimodal to sglang 0.5.11" in f.evidence[0]
    assert f.sites and f.sites[0].startswith("srt/configs/model_config.py:")
    assert "chunked-prefill-off-for-vlm" not in ids(run(launches, tree, "old"))  # Qwen3.5 chunks fine


# --------------------------------------------------------------------------- the machine


def test_custom_all_reduce_off(launches, tree, pkg):
    f = finding(run(launches, tree, "no-custom-ar"), "custom-all-reduce-off")
    assert f.fix == ["remove --disable-custom-all-reduce"]
    assert "custom-all-reduce-off" not in ids(run(launches, tree, "old"))


def test_nccl_p2p_disabled_in_the_environment(launches, tree, pkg, tmp_path):
    environ = tmp_path / "environ"  # written by hand: a server's environment as `env` prints it
    environ.write_text("NCCL_P2P_DISABLE=1\nCUDA_VISIBLE_DEVICES=0,1\nSGLANG_API_KEY=s3cret\nHOME=/root\n")
    d = run(launches, tree, "old", environ=str(environ))
    f = finding(d, "nccl-p2p-disabled")
    assert f.fix[0] == "unset NCCL_P2P_DISABLE in the server's environment"
    assert d.fixed_command.startswith("env -u NCCL_P2P_DISABLE ")
    assert "s3cret" not in json.dumps(d.to_dict())
    environ.write_text("CUDA_VISIBLE_DEVICES=0,1\n")
    assert "nccl-p2p-disabled" not in ids(run(launches, tree, "old", environ=str(environ)))


def test_p2p_unavailable_between_the_tp_gpus(launches, tree, pkg):
    p2p = str(HW / "topo_p2p_rw_2x_rtx5090.txt")  # GNS between GPU0 and GPU1
    f = finding(run(launches, tree, "old", topo=[p2p]), "p2p-unavailable")
    assert "GPU0-GPU1: GNS" in f.evidence[0]
    # GNS: the GPUs offer no peer access, so no BIOS or driver fix is offered
    assert f.changes == [] and f.advice == [] and "GNS (GPU not supported)" in f.avoid[0]
    # the site is found although 0.5.11 splits the warning's text over two string literals
    assert f.sites == ["srt/distributed/device_communicators/custom_all_reduce_utils.py:474"]
    assert "p2p-unavailable" not in ids(run(launches, tree, "tp1", topo=[p2p]))  # one GPU: no peers needed


def test_custom_all_reduce_on_more_than_two_pcie_gpus_is_not_a_fix_sglang_refuses_it(launches, tree, pkg):
    # 8x RTX 4090 on PCIe (a real capture): tp 4 on GPU0-3, no NVLink between them
    pcie = str(HW / "topo_8x_rtx4090_pcie_2nic_tabs_nolegend.txt")
    f = finding(run(launches, tree, "tp4-no-custom-ar", topo=[pcie], command=True), "custom-all-reduce-off")
    assert (f.impact, f.impact_basis) == (0.0, "from the source")
    assert "srt/distributed/device_communicators/custom_all_reduce_utils.py:462" in f.impact_reason
    assert "more than two PCIe-only GPUs" in f.impact_reason
    assert f.changes == [] and f.fix[0].startswith("turning it back on would not make it run here")
    # without the links the chain cannot decide it: not estimated, and the evidence that would tell is named
    f = finding(run(launches, tree, "tp4-no-custom-ar"), "custom-all-reduce-off")
    assert f.impact is None and "nvidia-smi topo -m" in f.impact_reason
    # 8x H100 joined by NVLink: the custom kernel would run, so removing the flag is the fix
    nvlink = str(HW / "topo_8x_h100_nv18_matrix_only.txt")
    f = finding(run(launches, tree, "tp4-no-custom-ar", topo=[nvlink]), "custom-all-reduce-off")
    assert [str(c) for c in f.changes] == ["remove --disable-custom-all-reduce"]


def test_tp_across_numa_while_a_closer_pair_exists(launches, tree, pkg, tmp_path):
    topo = str(HW / "topo_5x_gpu_pcie_2numa.txt")
    f = finding(run(launches, tree, "old", topo=[topo]), "tp-across-slow-link")
    assert "GPU0, GPU1" in f.evidence[0] and "SYS" in f.evidence[0]
    assert "GPU1, GPU2 are joined by PHB" in f.evidence[1]
    assert f.fix[0] == "CUDA_VISIBLE_DEVICES=1,2 in the server's environment"
    environ = tmp_path / "environ"  # written by hand
    environ.write_text("CUDA_VISIBLE_DEVICES=1,2\n")
    assert "tp-across-slow-link" not in ids(run(launches, tree, "old", topo=[topo], environ=str(environ)))
    nvlink = str(HW / "topo_2x_rtx3090_nvlink_nv4.txt")
    assert "tp-across-slow-link" not in ids(run(launches, tree, "old", topo=[nvlink]))


def test_attention_backend_torch_native(launches, tree, pkg):
    f = finding(run(launches, tree, "torch-native"), "attention-backend-mismatch")
    assert f.fix == ["remove --attention-backend", "let sglang choose: it picks per model and GPU"]
    assert "attention-backend-mismatch" not in ids(run(launches, tree, "old"))


# --------------------------------------------------------------------------- the release and the baseline


def test_known_issue_on_the_qwen35_prefill_graph(launches, tree, pkg):
    (known,) = [r for r in RULES if r.id == "known-issue"]
    d = diagnose(from_files(log=launches["new"][0], command=launches["new"][1], model_config=str(QWEN / "config.json"),
                            package_dir=pkg), only=[known])
    (f,) = [f for f in d.findings if f.id == "known-issue" and "ki-qwen35-prefill-graph-off-as-multimodal" in f.title]
    assert any(line.startswith("sglang 0.5.11 (") and line.endswith(") is in >=0.5.10,<0.5.16") for line in f.evidence)
    assert any("sgl-project/sglang/pull/30620" in line for line in f.evidence)
    assert "--enforce-piecewise-cuda-graph" in f.fix  # in 0.5.11's flag table, so offered as a change
    qwen35 = "ki-qwen35-prefill-graph-off-as-multimodal"
    assert not [f for f in run(launches, tree, "fixed").findings if qwen35 in f.title]  # the workaround is on
    full = run(launches, tree, "new")
    assert not [f for f in full.findings if qwen35 in f.title]  # the prefill rule already names the cause ...
    assert any("ki-qwen35-prefill-graph-off-as-multimodal" in q for q in full.open_questions)  # ... and it is said


def test_differences_from_a_baseline_log(launches, tree, pkg):
    d = run(launches, tree, "chunked-2048", baseline=launches["old"][0])
    f = finding(d, "differs-from-baseline")
    assert f.evidence[0] == "chunked_prefill_size: baseline 4096 (not the default) -> here 2048 (asked)"
    # sglang derives the piecewise token ceiling from the chunk size: a resolved difference, named too
    assert "piecewise_cuda_graph_max_tokens: baseline 4096 (not the default) -> here 2048 (resolved)" in f.evidence
    assert f.fix[0] == "to match the baseline: --chunked-prefill-size 4096"
    assert "--chunked-prefill-size 4096" not in d.fixed_command  # advice, not an edit
    same = run(launches, tree, "old", baseline=launches["old"][0])
    assert "differs-from-baseline" not in ids(same)


def test_the_fixed_launch_against_the_old_one_shows_neither_cause(launches, tree, pkg):
    d = run(launches, tree, "fixed", baseline=launches["old"][1])
    assert not {"speculative-steps-low", "prefill-cuda-graph-off", "differs-from-baseline"} & set(ids(d))


def test_new_against_the_old_baseline_puts_steps_then_prefill_first(launches, tree, pkg):
    d = run(launches, tree, "new", baseline=launches["old"][1])
    assert ids(d)[0] == "speculative-steps-low" and ids(d)[-1] == "prefill-cuda-graph-off"  # it buys nothing: last
    fixed = d.fixed_command
    assert "--speculative-num-steps 3" in fixed and "--speculative-num-steps 1" not in fixed
    assert "--enforce-piecewise-cuda-graph" not in fixed  # under EAGLE on 0.5.11 it would not replay


# --------------------------------------------------------------------------- bad input


def test_a_log_without_server_args_still_runs_the_hardware_rules(pkg, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(DECODE) + "\n")  # real lines, but no server_args line
    d = diagnose(from_files(log=str(log), package_dir=pkg, topo=[str(HW / "topo_2x_rtx3090_nvlink_nv4.txt")]))
    assert any(p.startswith(f"--log {log}: ") and "server_args" in p for p in d.problems)
    assert d.hardware.topology.link("GPU0", "GPU1") == "NV4"
    assert "tp-across-slow-link" in d.checked and len(d.checked) >= 8
    # the rules that need the arguments are not run, and say so (kit.doctor.facts)
    why = dict(d.skipped)
    assert why["overlap-scheduler-off"].startswith("not checked: needs how the server was launched")
    assert any(q.startswith("how the server was launched") and "overlap-scheduler-off" in q for q in d.unanswered)


def test_a_truncated_topology_is_named_and_the_rest_runs(launches, tree, pkg, tmp_path):
    lines = (HW / "topo_8x_h100_nv18_matrix_only.txt").read_text().splitlines()
    cut = tmp_path / "topo.txt"
    cut.write_text("\n".join(lines[:4]) + "\n")
    d = run(launches, tree, "new", topo=[str(cut)])
    assert any(p.startswith(f"--topo {cut}: ") and "cut off" in p for p in d.problems)
    assert ids(d)[0] == "speculative-steps-low" and ids(d)[-1] == "prefill-cuda-graph-off"  # it buys nothing: last


def test_an_unknown_gpu_leaves_the_bandwidth_unknown(launches, tree, pkg, tmp_path):
    smi = (HW / "smi_classic_1x_h100_590.txt").read_text().replace("NVIDIA H100 80GB HBM3", "NVIDIA H999 Mystery")
    path = tmp_path / "smi.txt"
    path.write_text(smi)  # a real table with the GPU's name changed by hand
    d = run(launches, tree, "new", nvidia_smi=str(path))
    assert d.roofline.ceiling_tok_s is None and "bandwidth unknown" in d.roofline.note and "H999" in d.roofline.note
    assert "speculative-steps-low" in ids(d)


def test_a_model_config_without_sizes(launches, tree, pkg, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"]}))  # written by hand
    d = run(launches, tree, "new", model_config=str(config))
    assert d.roofline.ceiling_tok_s is None and "hidden_size" in d.roofline.note
    assert "prefill-cuda-graph-off" in ids(d)  # sglang's multimodal list still decides from the architecture


def test_a_version_outside_a_rule_range_is_skipped_with_the_reason(launches, tree, pkg, tmp_path):
    log = tmp_path / "old-release.log"
    log.write_text("sglang==0.4.6\n" + Path(launches["old"][0]).read_text())
    d = diagnose(from_files(log=str(log), model_config=str(QWEN / "config.json")))
    skipped = dict(d.skipped)
    assert skipped["prefill-cuda-graph-off"] == "written for sglang >=0.5.10; this server runs 0.4.6"
    assert "decode-cuda-graph-off" in d.checked


# --------------------------------------------------------------------------- roofline and output


def test_roofline_of_the_incident_launches(launches, tree, pkg):
    plain = roofline(QWEN / "config.json", "a6000", tp=2).ceiling_tok_s
    assert 27 < plain < 31  # 1536 GB/s over ~51.6 GB per step
    for name, steps in (("new", 1), ("old", 3), ("fixed", 3)):
        d = run(launches, tree, name)  # no Decode batch lines: the accept length is not known
        roof = d.roofline
        assert roof.tp == 2 and roof.gpu == "NVIDIA RTX A6000" and roof.speculative_steps == steps
        assert roof.ceiling_tok_s is None and roof.accept_length is None
        assert roof.bytes_per_round == pytest.approx(roof.bytes_per_step + steps * roof.draft_bytes_per_step)
        assert "no speculative decoding" not in d.to_text() and "accept length unknown" in d.to_text()
    measured = run(launches, tree, "new", extra_log=DECODE[3:4])  # a real line with accept len
    assert measured.roofline.accept_length == pytest.approx(float(DECODE[3].split("accept len: ")[1].split(",")[0]))
    assert measured.roofline.ceiling_tok_s is not None


def test_json_schema_keys(launches, tree, pkg):
    data = run(launches, tree, "new").to_dict()
    json.dumps(data)
    assert {"findings", "hardware", "roofline"} <= set(data)
    assert {"ceiling_tok_s", "assumptions"} <= set(data["roofline"])
    for item in data["findings"]:
        assert {"id", "title", "impact", "impact_basis", "impact_inputs", "affects", "evidence", "sites", "fix",
                "avoid"} <= set(item)
        assert item["impact_basis"] in ("measured", "from the source", "modelled", "not estimated")
        assert item["affects"]
        assert (item["impact"] is None) == (item["impact_basis"] == "not estimated")
        assert all(":" in s and s.rsplit(":", 1)[1].replace("-", "").isdigit() for s in item["sites"])
    assert data["schema"] == 2
    shlex.split(data["fixed_command"])  # a command a shell can take


def test_the_guide_lists_every_rule_with_its_versions():
    import re

    text = (ROOT / "docs" / "guide.md").read_text()  # the doctor's part of the tour
    table = dict(re.findall(r"^\| `([a-z0-9-]+)` \| ([^|]+?) \|", text, re.M))
    assert {r.id: r.versions for r in RULES} == {k: v for k, v in table.items() if k in {r.id for r in RULES}}
    assert len([k for k in table if k in {r.id for r in RULES}]) == len(RULES)
    assert f"`doctor` runs {len(RULES)} rules" in text


def test_attention_rule_skips_a_profile_without_sm():
    from types import SimpleNamespace

    from kit.doctor.rules_hw import _attention

    case = SimpleNamespace(value=lambda name: "fa3" if name == "attention_backend" else None,
                           gpu_profile=lambda: SimpleNamespace(name="AMD Instinct MI300X", sm=None))
    assert _attention(case) is None  # no TypeError comparing an SM range with None
