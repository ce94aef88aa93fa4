"""A launch resolved with its release's own code (kit.doctor.resolve), read by the offline doctor.

Real launches only: the DP-attention launch of sglang issue 2882 on the release it ran (0.4.1.post4,
downloaded once), and the incident's Qwen3.6-27B launches against the dry-runs recorded with sglang's
own ``prepare_server_args`` (kit/data/resolved/, tests/data/resolved/).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kit.doctor import diagnose, from_files
from kit.doctor.resolve import from_dry_run

ROOT = Path(__file__).resolve().parent.parent
INCIDENT = ROOT / "data" / "incidents" / "sglang-2882-dp-attention-slower" / "issue.md"
MODEL = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
LOG = ROOT / "tests" / "data" / "provenance" / "incident-0.5.11.log"
RECORDED = sorted((ROOT / "kit" / "data" / "resolved").glob("*.json")) + sorted(
    (ROOT / "tests" / "data" / "resolved").glob("*.json"))


@pytest.fixture(scope="module")
def dp_command(tmp_path_factory) -> str:
    """The docker run line of the issue, as posted."""
    text = INCIDENT.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("docker run") and "--enable-dp-attention" in ln)
    path = tmp_path_factory.mktemp("dp") / "launch.sh"
    path.write_text(line + "\n")
    return str(path)


@pytest.fixture(scope="module")
def dp_h200(dp_command):
    return from_files(command=dp_command, sglang="0.4.1.post4", gpu="h200")


def test_dp_attention_on_0_4_1_resolves_overlap_and_chunked_prefill_at_their_sites(dp_h200):
    ev = dp_h200
    res = ev.resolution
    assert res is not None and res.how in ("static", "dry-run")
    overlap = res.change("disable_overlap_schedule")
    assert (overlap.resolved, overlap.site, overlap.decided) == (True, "srt/server_args.py:243", True)
    assert "enable_dp_attention" in overlap.guard and overlap.asked is None and not overlap.was_asked
    # 0.4.1.post4 server_args.py:198 sets 8192 (GPU memory >= 25 GB), then :241 halves it under DP attention
    chunked = res.change("chunked_prefill_size")
    assert (chunked.resolved, chunked.site) == (4096, "srt/server_args.py:241")
    assert res.change("dp_size").resolved == 8 and res.change("dp_size").site == "srt/server_args.py:240"
    assert ev.args["disable_overlap_schedule"] is True and ev.args["chunked_prefill_size"] == 4096
    assert ev.args["dp_size"] == 8
    assert "disable_overlap_schedule" not in ev.explicit and ev.explicit["enable_dp_attention"] is True
    assert "resolved by its own code" in ev.sources["args"]


def test_the_doctor_reports_what_sglang_changed_with_the_site(dp_h200):
    d = diagnose(dp_h200)
    by_id = {f.id: f for f in d.findings}
    assert "srt/server_args.py:243" in by_id["overlap-scheduler-off"].sites
    # what sglang changed on its own describes the launch: it is context, not a cause ranked with the findings
    assert "sglang-changed-settings" not in by_id
    changed = next(f for f in d.context if f.id == "sglang-changed-settings")
    text = "\n".join(changed.evidence)
    assert "chunked_prefill_size = 4096" in text and "srt/server_args.py:241" in text
    assert "dp_size = 8" in text and "srt/server_args.py:240" in text
    assert "disable_overlap_schedule" not in text  # the overlap rule reports it
    assert changed.estimate.basis == "not estimated"
    assert "srt/server_args.py:241" in changed.sites


def test_an_undecided_guard_says_what_input_it_needs(dp_command):
    ev = from_files(command=dp_command, sglang="0.4.1.post4")  # no GPU named: gpu_mem is not known
    chunked = ev.resolution.change("chunked_prefill_size")
    assert not chunked.decided and "GPU" in chunked.needs
    assert ev.args["chunked_prefill_size"] is None  # not applied: the default stays
    assert ev.resolution.change("disable_overlap_schedule").decided  # what does not depend on it is


def test_a_server_args_line_is_not_resolved_again():
    from kit.server_args import parse_log

    ev = from_files(log=str(LOG), sglang="0.5.11")
    assert ev.resolution is not None and ev.resolution.how == "read"
    assert ev.resolution.changes == []
    snap = parse_log(LOG.read_text())
    assert all(ev.args[k] == v for k, v in snap.fields.items())


def _incident_command(tmp_path: Path, record: dict) -> str:
    argv = list(record["argv"])
    if not any(a in ("--tp", "--tp-size", "--tensor-parallel-size") for a in argv):
        argv += ["--tp-size", str(record["tp"])]
    path = tmp_path / "launch.sh"
    path.write_text("python -m sglang.launch_server " + " ".join(argv) + "\n")
    return str(path)


def test_the_incident_launch_resolves_the_prefill_graph_off_by_the_multimodal_rule(tmp_path):
    record = json.loads((ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json").read_text())
    ev = from_files(command=_incident_command(tmp_path, record), sglang="0.5.11", gpu="a6000",
                    model_config=str(MODEL))
    change = ev.resolution.change("disable_piecewise_cuda_graph")
    assert (change.resolved, change.decided) == (True, True)
    dry = next(c for c in record["changes"] if c["field"] == "disable_piecewise_cuda_graph")
    assert change.site == dry["where"] == "srt/server_args.py:1230"
    assert re.search(r"Multimodal", change.rule)
    assert ev.args["disable_piecewise_cuda_graph"] is True


# 0.5.19 and later resolve through hook modules (arg_groups/*_hook.py: `declare_resolution(...)`, and passes that
# return their decisions as a dict): the static resolution follows them, and the hooks' callers in other modules.
@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_static_resolution_agrees_with_the_recorded_dry_run(path, tmp_path):
    record = json.loads(path.read_text())
    gpu = record["gpu"]["key"] if isinstance(record["gpu"], dict) and "key" in record["gpu"] else record["gpu"]["name"]
    ev = from_files(command=_incident_command(tmp_path, record), sglang=record["sglang"], gpu=gpu,
                    model_config=str(MODEL))
    assert ev.resolution.how == "static"
    dry = from_dry_run(record, ev.explicit, record["sglang"])
    final = record["final"]
    differ, undecided, outside = [], [], []
    prefill = "cuda_graph_config" if "cuda_graph_config" in final else "disable_piecewise_cuda_graph"  # 0.5.14+
    assert ev.resolution.walked and set(ev.resolution.walked) >= {prefill, "speculative_num_steps",
                                                                   "disable_overlap_schedule", "chunked_prefill_size"}
    for c in dry.changes:
        if c.field not in ev.resolution.walked:  # no rule reads it and no walked guard depends on it
            outside.append(c.field)
            continue
        mine = ev.resolution.change(c.field)
        if mine is not None and not mine.decided:
            undecided.append(c.field)
            continue
        if json.dumps(ev.args.get(c.field), default=str) != json.dumps(final[c.field], default=str):
            differ.append((c.field, ev.args.get(c.field), final[c.field], c.site))
    for mine in ev.resolution.decided:  # nothing static decided disagrees with sglang's own run
        if mine.field in final and ev.resolution.change(mine.field) is mine:
            if json.dumps(mine.resolved, default=str) != json.dumps(final[mine.field], default=str):
                differ.append((mine.field, mine.resolved, final[mine.field], mine.site))
    agreed = [c.field for c in dry.changes if c.field in ev.resolution.walked and c.field not in undecided
              and ev.resolution.change(c.field) is not None]
    print(f"{path.name}: static decides {sorted(agreed)} as sglang's run did; stays undecided on {sorted(undecided)};"
          f" not walked: {sorted(set(outside))}")
    assert differ == []
    assert agreed, "the static resolution decided none of the changes sglang's own run made"


def _pass_line(ev, path: str, function: str, key: str) -> int:
    """The line of ``"key":`` in the dict a resolution pass of that release returns, read from its source."""
    lines = ev.tree.read_text(path).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"def {function}("))
    return next(i for i in range(start, len(lines)) if f'"{key}"' in lines[i]) + 1


def test_0_5_23_passes_and_hooks_are_followed_with_the_gpu_answers(tmp_path):
    """0.5.23 decides through `declare_resolution` hooks and passes that return a dict; with the GPU named, the
    platform facts (`get_platform().has_flashinfer`, `get_device()`) are answered from the kit's GPU table by
    sglang's own fact-to-probe table."""
    launch = tmp_path / "launch.sh"
    launch.write_text("python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp-size 2\n")
    ev = from_files(command=str(launch), sglang="0.5.23", gpu="a6000", model_config=str(MODEL))
    res = ev.resolution
    sampling = res.change("sampling_backend")
    where = _pass_line(ev, "srt/arg_groups/overrides.py", "_sampling_backend_default", "sampling_backend")
    assert (sampling.resolved, sampling.decided, sampling.site) == (
        "flashinfer", True, f"srt/arg_groups/overrides.py:{where}")
    device = res.change("device")
    assert (device.resolved, device.decided) == ("cuda", True) and "serving_hook.py" in device.site
    # no speculative algorithm: the hooks that sglang's dispatcher runs for one are not reached (their caller,
    # `algo.handle_server_args(server_args)` in speculative_hook.py, runs under `if cfg.speculative_algorithm ...`)
    assert not [c for c in res.changes if "speculative_hook.py" in c.site and c.field == "max_running_requests"]
    assert ev.args.get("speculative_algorithm") is None and "speculative_algorithm" not in ev.unknown


def test_0_5_23_a_hook_behind_the_speculative_dispatch_is_followed_through_the_enum(tmp_path):
    """With EAGLE, `_handle_eagle_family` runs where sglang's dispatcher says so: `algo.handle_server_args(
    server_args)` (speculative_hook.py) on `algo = SpeculativeAlgorithm.from_string(...)`, whose method tests
    `self.is_eagle()` (spec_info.py). The enum is read from the source, so its cap of 48 requests is decided."""
    launch = tmp_path / "launch.sh"
    launch.write_text("python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp-size 2 "
                      "--speculative-algorithm EAGLE --speculative-num-steps 1\n")
    ev = from_files(command=str(launch), sglang="0.5.23", gpu="a6000", model_config=str(MODEL))
    lines = ev.tree.read_text("srt/arg_groups/speculative_hook.py").splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("def _handle_eagle_family("))
    cap = next(i for i in range(start, len(lines)) if "max_running_requests=48" in lines[i]) + 1
    change = ev.resolution.change("max_running_requests")
    assert (change.resolved, change.decided, change.site) == (48, True, f"srt/arg_groups/speculative_hook.py:{cap}")
    assert ev.args["max_running_requests"] == 48 and ev.explicit["speculative_algorithm"] == "EAGLE"
    # the other algorithms' handlers are not reached: none of their writes is a change, decided or not
    others = [c for c in ev.resolution.changes if "speculative_hook.py" in c.site and c.field == "max_running_requests"
              and c is not change]
    assert others == []
