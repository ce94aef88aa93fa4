"""The doctor's rules against the source of the releases 0.5.19-0.5.23 (real wheels, downloaded
once with pip download --no-deps and cached): every flag a finding tells the user to set is one
that release's parser takes, every sglang message a rule reads is one that release prints, and the
renames of 0.5.20 (``--cuda-graph-max-bs``, ``--disable-piecewise-cuda-graph``,
``--mamba-scheduler-strategy`` gone) are followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit.doctor import RULES, diagnose, from_files
from kit.server_args import flag_table

RELEASES = ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
ROOT = Path(__file__).resolve().parent.parent / "data" / "incidents"
# Real posted text on which each rule of kit/doctor/rules_runtime.py fires (see tests/test_doctor_runtime.py).
FIRING = {
    "running-requests-capped": "sglang-38846-mamba-cap-notice/issue.md",
    "context-exceeds-kv-pool": "sglang-4048-context-over-pool/issue.md",
    "kv-pool-full": "sglang-26248-hybrid-retraction/server.log",
    "requests-queued": "sglang-1612-prefill-queue/engine.log",
    "speculative-under-load": "sglang-4759-spec-throughput/server.log",
    "slow-tokenizer": "sglang-23393-tokenizer-bottleneck/issue.md",
    "moe-default-kernel-config": "sglang-12343-moe-default-config/pr.md",
}
# What sglang prints that each rule reads; each must be in that release's source.
PRINTS = {
    "running-requests-capped": "max_running_requests is capped to",
    "context-exceeds-kv-pool": "the maximum allowed length",
    "kv-pool-full": "KV cache pool is full. Retract requests",
    "slow-tokenizer": "Using a slow tokenizer",
    "moe-default-kernel-config": "Using default MoE kernel config",
}
# Flags in the advice that are not the server's: sgl-kit's own and sglang's MoE tuning script's.
NOT_SERVER = {"--bench", "--log", "--concurrency", "--model", "--tune", "--prometheus"}


@pytest.fixture(scope="module")
def trees(sglang_trees):
    return sglang_trees


def _rule(rule_id):
    return next(r for r in RULES if r.id == rule_id)


@pytest.mark.parametrize("version", RELEASES)
def test_every_flag_the_new_rules_name_is_one_the_release_takes(version, trees):
    tree = trees(version)
    names = {s.name for s in flag_table(tree)}
    for rule_id, evidence in FIRING.items():
        ev = from_files(paste=str(ROOT / evidence), tree=tree)
        found = diagnose(ev, only=[_rule(rule_id)]).findings
        assert found, (rule_id, version)
        words = " ".join(found[0].fix + found[0].avoid + [found[0].estimate.reason, *found[0].estimate.inputs])
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", words)) - NOT_SERVER
        missing = {flag for flag in named if flag not in names}
        assert not missing, (rule_id, version, missing)


@pytest.mark.parametrize("version", RELEASES)
def test_every_message_a_rule_reads_is_printed_by_the_release(version, trees):
    tree = trees(version)
    for rule_id, text in PRINTS.items():
        assert tree.grep(text, fixed=True, max_matches=5), (rule_id, version, text)


@pytest.mark.parametrize("version", RELEASES)
def test_the_renamed_graph_and_mamba_flags(version, trees):
    by_name = {s.name: s.field for s in flag_table(trees(version))}
    renamed = ("--cuda-graph-max-bs", "--disable-piecewise-cuda-graph", "--mamba-scheduler-strategy",
               "--enforce-piecewise-cuda-graph")
    if version == "0.5.19":  # kept as aliases of the new fields
        assert by_name["--cuda-graph-max-bs"] == "cuda_graph_max_bs_decode"
        assert by_name["--mamba-scheduler-strategy"] == "mamba_radix_cache_strategy"
        assert by_name["--disable-piecewise-cuda-graph"] == "cuda_graph_backend_prefill"
    else:
        assert not set(renamed) & set(by_name)
    # kept to 0.5.23
    assert by_name["--disable-cuda-graph"] == "disable_cuda_graph"
    assert by_name["--enable-dp-attention"] == "enable_dp_attention"
    assert by_name["--cuda-graph-max-bs-decode"] == "cuda_graph_max_bs_decode"


@pytest.mark.parametrize("version", RELEASES)
def test_speculative_decoding_leaves_the_overlap_scheduler_on_gpus(version, trees):
    # 0.5.11 turned it off for some speculative launches (ServerArgs._handle_speculative_decoding);
    # from the arg_groups rewrite on, speculative_hook only turns it off on CPU: the doctor, which
    # reads the value and the site that set it, must not find a speculative site firing on a GPU.
    from kit.provenance import CUDA_PROBES, explain
    from kit.server_args import cli_defaults

    tree = trees(version)
    args = {k: f.value for k, f in cli_defaults(tree).items() if f.known}
    args.update(speculative_algorithm="EAGLE", device="cuda")
    exp = explain(tree, "disable_overlap_schedule", args, None, command={"speculative_algorithm": "EAGLE"},
                  probes=CUDA_PROBES)
    speculative = [s for s in exp.sites if "specul" in (s.function + s.where).lower()]
    assert speculative, "the speculative sites were read"
    assert all(s.function.endswith("_for_cpu") for s in speculative), [(s.where, s.function) for s in speculative]
    assert not [s for s in speculative if s.fired]


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_graph_ceiling_rule_follows_the_renamed_field(version, trees, tmp_path):
    # real Decode batch lines with `cuda graph: False` at 48 running (tests/data/logs/decode_lines.txt,
    # see its SOURCES.md); the launch is written here, in the release's own flag
    from kit.doctor import RULES as all_rules

    log = Path(__file__).resolve().parent / "data" / "logs" / "decode_lines.txt"
    command = tmp_path / "launch.sh"
    command.write_text("python -m sglang.launch_server --model-path m --cuda-graph-max-bs-decode 32\n")
    ev = from_files(log=str(log), command=str(command), tree=trees(version))
    rule = next(r for r in all_rules if r.id == "decode-batches-above-graph-ceiling")
    found = diagnose(ev, only=[rule]).findings
    assert found and "= 32" in found[0].evidence[0], found
    assert [c.option for c in found[0].changes] == ["--cuda-graph-max-bs-decode"]
