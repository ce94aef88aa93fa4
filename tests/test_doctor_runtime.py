"""The rules of kit.doctor.rules_runtime, each firing and not firing on real posted text from the
incident corpus (data/incidents/), read the way the doctor reads a paste; and the honest empty
result (questions left open, with the evidence that would answer each)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kit.doctor
from kit.doctor import RULES, diagnose, from_files
from kit.hosts import LocalHost
from kit.source import SourceTree

ROOT = Path(__file__).resolve().parent.parent / "data" / "incidents"
EVIDENCE = {
    "38846": "sglang-38846-mamba-cap-notice/issue.md",
    "dgx7": "dgx-spark-7-mamba-cap-wrapped/issue.md",
    "29575": "sglang-29575-ready-line-fine/issue.md",
    "4048": "sglang-4048-context-over-pool/issue.md",
    "26248": "sglang-26248-hybrid-retraction/server.log",
    "14972": "sglang-14972-overlap-retract/issue.md",
    "6778": "sglang-6778-token-usage-096/issue.md",
    "1612": "sglang-1612-prefill-queue/engine.log",
    "4759": "sglang-4759-spec-throughput/server.log",
    "10053": "sglang-10053-fine-single-stream/server.log",
    "1338": "sglang-1338-decode-only/server.log",
    "23393": "sglang-23393-tokenizer-bottleneck/issue.md",
    "12343": "sglang-12343-moe-default-config/pr.md",
}
READER = {"4048": "0.4.6.post5", "12343": "0.5.11"}  # launch text in the post: read with that flag table


def _rule(rule_id: str):
    return next(r for r in RULES if r.id == rule_id)


def _run(case: str, rule_id: str):
    ev = from_files(paste=str(ROOT / EVIDENCE[case]), sglang=READER.get(case))
    found = diagnose(ev, only=[_rule(rule_id)]).findings
    return found[0] if found else None


FIRES = [
    ("running-requests-capped", "38846", "capped to 9 by the mamba state cache"),
    ("running-requests-capped", "dgx7", "capped to 12 by the mamba state cache"),
    ("context-exceeds-kv-pool", "4048", "context length 163840"),
    ("kv-pool-full", "26248", "token usage reaches 1.00"),
    ("kv-pool-full", "14972", "token usage reaches 0.94"),
    ("kv-pool-full", "6778", "token usage reaches 0.96 with 36 running"),
    ("requests-queued", "1612", "#queue-req reaches 38"),
    ("requests-queued", "26248", "the KV pool is full"),
    ("speculative-under-load", "4759", "32 requests decode at once"),
    ("slow-tokenizer", "23393", "Using a slow tokenizer"),
    ("moe-default-kernel-config", "12343", "E=32,N=768,device_name=NVIDIA_H200"),
]
QUIET = [
    ("running-requests-capped", "29575"),  # a ready line, no cap notice, nothing asked
    ("running-requests-capped", "26248"),
    ("context-exceeds-kv-pool", "29575"),  # context_len 256000 < max_total_num_tokens 2086558
    ("kv-pool-full", "10053"),
    ("kv-pool-full", "4759"),  # token usage 0.01
    ("requests-queued", "10053"),
    ("requests-queued", "1338"),
    ("speculative-under-load", "10053"),  # no accept length: not speculative
    ("speculative-under-load", "26248"),
    ("slow-tokenizer", "38846"),
    ("moe-default-kernel-config", "23393"),
]


@pytest.mark.parametrize(("rule_id", "case", "needle"), FIRES, ids=[f"{r}-{c}" for r, c, _ in FIRES])
def test_the_rule_fires_on_the_real_text(rule_id, case, needle):
    finding = _run(case, rule_id)
    assert finding is not None, (rule_id, case)
    assert any(needle in line for line in finding.evidence), finding.evidence
    e = finding.estimate
    assert e.basis in ("measured", "modelled", "not estimated")
    if e.basis == "not estimated":
        assert e.inputs, "a finding not estimated says what evidence would estimate it"
    assert finding.fix or finding.advice


@pytest.mark.parametrize(("rule_id", "case"), QUIET, ids=[f"{r}-{c}" for r, c in QUIET])
def test_the_rule_stays_quiet_on_the_real_text(rule_id, case):
    assert _run(case, rule_id) is None


def test_the_mamba_cap_quotes_sglangs_own_advice():
    finding = _run("38846", "running-requests-capped")
    assert any("--max-mamba-cache-size" in a for a in finding.advice), finding.advice
    assert finding.estimate.metric == "throughput under load"


def test_the_context_fix_is_the_pool_sglang_reported():
    finding = _run("4048", "context-exceeds-kv-pool")
    assert [str(c) for c in finding.changes] == ["--context-length 59862"]


def test_the_slow_tokenizer_asks_for_a_benchmark_when_only_the_warning_is_there():
    finding = _run("23393", "slow-tokenizer")
    assert finding.estimate.basis == "not estimated"
    assert any("--bench FILE" in i for i in finding.estimate.inputs)


def test_the_rules_are_gated_by_evidence_not_by_a_version_floor():
    # 0.4.x Decode batch lines carry `accept len` (case 4759, 2025-03): the evidence rules run on them
    for rule_id in ("speculative-under-load", "kv-pool-full", "requests-queued", "speculative-accept-low",
                    "running-requests-capped", "context-exceeds-kv-pool", "slow-tokenizer"):
        assert kit.doctor.version_in("0.4.6.post5", _rule(rule_id).versions), rule_id
    ev = from_files(paste=str(ROOT / EVIDENCE["4759"]), sglang="0.4.6.post5")
    d = diagnose(ev)
    assert "speculative-under-load" in [f.id for f in d.findings]
    assert "speculative-under-load" not in [i for i, _ in d.skipped]


def test_an_empty_result_lists_the_open_questions_not_no_rule_found():
    ev = from_files(paste=str(ROOT / "sglang-3196-nvidia-smi-h200/comment.md"))
    d = diagnose(ev)
    text = d.to_text()
    assert d.findings == []
    assert "no rule found throughput left on the table" not in text
    assert any("server_args" in q for q in d.unanswered)
    assert "the rules could not ask these questions" in text
    assert d.to_dict()["unanswered"] == d.unanswered
    # problems (what could not be read) come first
    assert text.index("could not read everything") < text.index("the rules could not ask these questions")


def test_no_rule_found_only_when_every_rule_had_its_evidence(tmp_path):
    from kit.doctor.result import Diagnosis

    assert "no rule found throughput left on the table" in Diagnosis("t", "0.5.11", []).to_text()
    assert "no rule found" not in Diagnosis("t", "0.5.11", [], unanswered=["the GPUs: send `nvidia-smi`"]).to_text()


# --------------------------------------------------------------------------- the launch with every fix, checked

def _fix_case(version: str | None, args: dict):
    from kit.doctor.case import Case
    from kit.doctor.evidence import Evidence
    from kit.launch_file import source_tree
    from kit.server_args import cli_defaults

    ev = Evidence("t")
    if version:
        ev.tree = source_tree(None, version)
        ev.version = version
        ev.args = {k: f.value for k, f in cli_defaults(ev.tree).items() if f.known}
    ev.args.update(args)
    return Case(ev)


def _finding(*changes):
    from kit.doctor import Finding, Impact

    return Finding("x", "x", Impact(None, "not estimated", "x"), changes=list(changes))


def test_a_fix_sglang_refuses_together_is_not_offered():
    # sglang 0.5.11 srt/server_args.py: `if self.enable_mamba_extra_buffer(): if self.disable_radix_cache:
    # raise ValueError("mamba extra_buffer is not compatible with --disable-radix-cache ...")`
    from kit.doctor import Change, Diagnosis
    from kit.doctor.fixcheck import check_fixed_launch

    case = _fix_case("0.5.11", {"disable_radix_cache": True})
    findings = [_finding(Change("--mamba-scheduler-strategy", "extra_buffer"))]
    d = Diagnosis("t", "0.5.11", findings, command=["python", "-m", "sglang.launch_server", "--model-path", "m",
                                                     "--disable-radix-cache"])
    d.fix_check = check_fixed_launch(case, d.findings, d.fixed_command)
    assert d.fix_check.status in ("refused", "may be refused"), d.fix_check
    assert "not compatible with --disable-radix-cache" in d.fix_check.detail
    assert "srt/server_args.py:" in d.fix_check.detail
    text = d.to_text()
    assert "the launch with every fix is not offered" in text and "the launch with every fix:" not in text


def test_a_fix_that_passes_is_marked_checked_and_without_source_unchecked():
    from kit.doctor import Change, Diagnosis
    from kit.doctor.fixcheck import check_fixed_launch

    command = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--context-length", "163840"]
    findings = [_finding(Change("--context-length", 59862))]
    d = Diagnosis("t", "0.4.6.post5", findings, command=command)
    check = check_fixed_launch(_fix_case("0.4.6.post5", {}), d.findings, d.fixed_command)
    assert check.status == "checked", check
    assert check_fixed_launch(_fix_case(None, {}), d.findings, d.fixed_command).status == "unchecked"


def test_the_dry_run_refuses_the_combination_where_its_environment_exists(env_0511):
    # the same combination through sglang 0.5.11's own argument resolution (the dry-run), for a
    # hybrid model (Qwen3.6-27B's config.json) on a stand-in A6000
    import json

    from kit.doctor import Change, Diagnosis
    from kit.doctor.evidence import _stand_in
    from kit.doctor.fixcheck import check_fixed_launch

    case = _fix_case("0.5.11", {"disable_radix_cache": True})
    case.ev.model_config = json.loads((ROOT.parent.parent / "tests/data/provenance/qwen3.6-27b/config.json").read_text())
    case.ev.hardware = _stand_in("a6000", 1, "the test")
    findings = [_finding(Change("--mamba-scheduler-strategy", "extra_buffer"))]
    d = Diagnosis("t", "0.5.11", findings, command=["python", "-m", "sglang.launch_server", "--model-path", "m",
                                                     "--disable-radix-cache"])
    check = check_fixed_launch(case, d.findings, d.fixed_command)
    assert check.status == "refused" and "dry-run" in check.detail, check
    assert "not compatible with --disable-radix" in check.detail
    ok = check_fixed_launch(case, [_finding(Change("--disable-radix-cache", remove=True),
                                            Change("--mamba-scheduler-strategy", "extra_buffer"))],
                            Diagnosis("t", "0.5.11", [_finding(Change("--disable-radix-cache", remove=True),
                                                               Change("--mamba-scheduler-strategy", "extra_buffer"))],
                                      command=d.command).fixed_command)
    assert ok.status == "checked" and "dry-run" in ok.detail, ok


def test_dp_attention_without_the_concurrency_served_is_an_open_question():
    # sglang#2882: --enable-dp-attention on 8xH200, "the output throughput is only half"; the
    # maintainer asks for the request rate. The post has no concurrency: the doctor asks for it.
    ev = from_files(paste=str(ROOT / "sglang-2882-dp-attention-slower/issue.md"), sglang="0.4.6.post5")
    asked = [q for q in diagnose(ev).unanswered if q.startswith("DP attention is on")]
    assert asked and "bench_serving" in asked[0] and "tp_size 8" in asked[0], asked
    # with the Decode batch lines' concurrency in the evidence, or without DP attention, it does not ask
    ev.decode = dict(from_files(paste=str(ROOT / EVIDENCE["4759"])).decode)
    assert not [q for q in diagnose(ev).unanswered if q.startswith("DP attention is on")]
    plain = from_files(paste=str(ROOT / EVIDENCE["4048"]), sglang="0.4.6.post5")
    assert not [q for q in diagnose(plain).unanswered if q.startswith("DP attention is on")]


def test_without_config_json_the_speculative_steps_check_is_an_open_question():
    # The incident's new launch (speculative_num_steps=1), as sglang 0.5.11 printed it: without the
    # model's config.json sglang's own choice of steps (it depends on the architecture) is unknown,
    # so speculative-steps-low cannot fire, and the doctor says so instead of staying silent.
    log = Path(__file__).parent / "data" / "provenance" / "incident-0.5.11.log"
    ev = from_files(log=str(log), sglang="0.5.11")
    d = diagnose(ev)
    assert "speculative-steps-low" not in [f.id for f in d.findings]
    asked = [q for q in d.unanswered if q.startswith("the model's config.json")]  # generated from Rule.uses
    assert asked and "speculative-steps-low" in asked[0] and "--model-config" in asked[0], d.unanswered
    # with the config, the rule answers and the question is gone
    config = Path(__file__).parent / "data" / "provenance" / "qwen3.6-27b" / "config.json"
    d = diagnose(from_files(log=str(log), sglang="0.5.11", model_config=str(config)))
    assert "speculative-steps-low" in [f.id for f in d.findings]
    assert not [q for q in d.unanswered if q.startswith("the model's config.json")]


# --------------------------------------------------------------------------- the MoE kernel's tuned-config lookup

DATA = Path(__file__).resolve().parent / "data"


def test_a_down_projection_without_its_own_file_is_not_the_default_config(sglang_source):
    # Real lines printed by sglang 0.5.11's own lookup (tests/data/logs/SOURCES.md): the up projection found a
    # tuned file of another Triton release, the down projection none of its own. get_moe_configs prints
    # "Using MoE kernel config with down_moe=False" when `down_moe` is true and returns None
    # (fused_moe_triton_config.py:119-126); the down GEMM then runs with the up projection's config
    # (`down_config or config`, fused_moe.py:628), not get_default_config.
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.11"))
    source = tree.read_text("srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py").splitlines()
    assert source[118].strip() == "if down_moe:" and "down_moe=False" in source[121]
    assert "down_config or config" in tree.read_text("srt/layers/moe/moe_runner/triton_utils/fused_moe.py")
    ev = from_files(paste=str(DATA / "logs" / "moe-down-config-0.5.11.log"), tree=tree)
    assert any("down_moe=False" in n.text for n in ev.messages)  # the line is read: the rule decides
    assert diagnose(ev, only=[_rule("moe-default-kernel-config")]).findings == []


def test_the_deterministic_notice_names_its_own_cause(sglang_source, tmp_path):
    # The notice text is sglang 0.5.11's own literal (fused_moe_triton_config.py:56-58), in a log line written
    # for the test in sglang's default format.
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.11"))
    text = "Deterministic inference is enabled, using default MoE kernel config."
    assert text in tree.read_text("srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py")
    log = tmp_path / "server.log"
    log.write_text(f"[2026-05-01 10:00:00] {text}\n")
    (f,) = diagnose(from_files(paste=str(log), tree=tree), only=[_rule("moe-default-kernel-config")]).findings
    assert "--enable-deterministic-inference" in f.evidence[0] and "tuning_fused_moe_triton" not in " ".join(f.fix)
    assert f.sites and f.sites[0].startswith("srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py:")


# --------------------------------------------------------------------------- running requests capped, per release

REAL = DATA / "real_server"


def test_a_real_0511_cap_is_the_mamba_state_cap_not_the_kv_pool(sglang_source):
    # A real 0.5.11 server (tests/data/real_server/SOURCES.md) asked for 128 and ran 85: the ready line's
    # max_running_requests. 0.5.11 computes min(128 // dp_size, estimated) then, for a hybrid model,
    # min(that, max_mamba_cache_size // ratio) (srt/model_executor/model_runner_kv_cache_mixin.py:698-717):
    # 256 // 3 = 85. It prints no "is capped to" notice (that message is 0.5.17's).
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.11"))
    assert not tree.grep("max_running_requests is capped to", fixed=True, max_matches=5)
    ev = from_files(log=str(REAL / "qwen3_5-cpu-0.5.11-mrr128.log"), command=str(REAL / "qwen3_5-cpu-0.5.11-mrr128.cmd"),
                    tree=tree)
    (f,) = diagnose(ev, only=[_rule("running-requests-capped")]).findings
    text = " ".join(f.evidence)
    assert "capped by the mamba state cache" in f.evidence[0] and "KV cache pool" not in text + f.impact_reason
    assert "max_mamba_cache_size // ratio = 256 // 3 = 85" in text
    assert "srt/model_executor/model_runner_kv_cache_mixin.py:698-717" in text
    assert f.sites == ["srt/model_executor/model_runner_kv_cache_mixin.py:713"]
    assert any("--max-mamba-cache-size" in a for a in f.advice)


def _ready(tmp_path, asked: int, ready: int, extra: str = ""):
    """A launch and its ready line, written for the test in sglang's format (scheduler.py's logger.info)."""
    log = tmp_path / "server.log"
    log.write_text(f"[2026-05-01 10:00:01] max_total_num_tokens=16384, chunked_prefill_size=2048, max_prefill_tokens="
                   f"16384, max_running_requests={ready}, context_len=4096, available_gpu_mem=10.00 GB\n")
    cmd = tmp_path / "launch.cmd"
    cmd.write_text(f"python -m sglang.launch_server --model-path m --max-running-requests {asked} {extra}\n")
    return str(log), str(cmd)


@pytest.mark.parametrize(("version", "explained"), [("0.5.11", True), ("0.5.17", False)])
def test_the_cap_follows_each_releases_own_arithmetic(version, explained, sglang_source, tmp_path):
    # 5000 asked, 2048 run, 16384 tokens of 4096 context: 0.5.11 bounds an ask by `estimated` =
    # max(min(16384 / 4096 * 512, 4096), 2048) = 2048; 0.5.17 by token_capacity // 2 = 8192, which leaves 5000.
    tree = SourceTree.at(LocalHost(), sglang_source(version))
    log, cmd = _ready(tmp_path, 5000, 2048)
    (f,) = diagnose(from_files(log=log, command=cmd, tree=tree), only=[_rule("running-requests-capped")]).findings
    if explained:
        assert "capped by this release's token-pool bound (2048" in f.evidence[0]
        assert any("estimated = 2048" in e for e in f.evidence)
    else:
        assert "capped by a bound this release's arithmetic does not explain" in f.evidence[0]
        assert any("2048 is not what this release's arithmetic gives (5000)" in e for e in f.evidence)


def test_a_cap_split_across_dp_ranks_is_named(sglang_source, tmp_path):
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.11"))
    log, cmd = _ready(tmp_path, 128, 64, "--tp-size 2 --dp-size 2 --enable-dp-attention")
    (f,) = diagnose(from_files(log=log, command=cmd, tree=tree), only=[_rule("running-requests-capped")]).findings
    assert "the ask split across 2 DP ranks" in f.evidence[0] and "nothing is lost" in f.advice[0]


def test_014s_reduced_message_is_read_by_the_arithmetic_not_by_its_words(sglang_source, tmp_path):
    # 0.5.14 warns "max_running_requests was reduced from the requested %d to %d (per dp worker) due to the
    # available KV cache capacity." whenever the result is below the ask (model_runner_kv_cache_mixin.py:1011-1017),
    # the mamba cap included. The lines are written for the test in sglang's format, the warning from the
    # release's own format string; no launch command: the message gives the ask.
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.14"))
    source = tree.read_text("srt/model_executor/model_runner_kv_cache_mixin.py")
    text = ("max_running_requests was reduced from the requested %d to %d (per dp worker) due to the available KV "
            "cache capacity.")
    assert '"max_running_requests was reduced from the requested %d to %d "' in source
    log = tmp_path / "server.log"
    log.write_text("[2026-05-01 10:00:00] Mamba Cache is allocated. max_mamba_cache_size: 256, conv_state size: "
                   "0.00GB, ssm_state size: 0.00GB \n"
                   f"[2026-05-01 10:00:00] {text % (128, 85)}\n"
                   "[2026-05-01 10:00:01] max_total_num_tokens=16384, chunked_prefill_size=2048, max_prefill_tokens="
                   "16384, max_running_requests=85, context_len=4096, available_gpu_mem=10.00 GB\n")
    (f,) = diagnose(from_files(paste=str(log), tree=tree), only=[_rule("running-requests-capped")]).findings
    assert "capped by the mamba state cache" in f.evidence[0], f.evidence
    assert "KV cache capacity" in f.evidence[1]  # sglang's words are quoted, and the arithmetic says otherwise
    assert any("256 // 3 = 85" in e for e in f.evidence)
