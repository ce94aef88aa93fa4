"""The incident's launch under sglang 0.5.23, a best-effort version: its list made from its wheel, its
ServerArgs a msgspec record resolved by arg_groups hooks that declare their decisions.

The environment (about 1.3 GB, about 90 s to build with a warm pip cache on 2 cores) is built
once per machine by the first test that needs it, like env_0511, and reused after that.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import kit.dryrun as dryrun
from kit.dryrun._worker import RUN_DIR_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b"
VERSION = "0.5.23"


@pytest.fixture(scope="module")
def env_0523(tmp_path_factory):
    env = dryrun.environment(VERSION)
    if not env.ready:  # built once per machine, like env_0511: `make test` checks what it claims
        env = dryrun.setup(VERSION).env
    patch = pytest.MonkeyPatch()
    patch.setenv(RUN_DIR_ENV, str(tmp_path_factory.mktemp("dryrun-run")))
    yield env
    dryrun.stop_workers()
    patch.undo()


def _incident_flags() -> list[str]:
    made_by = json.loads((ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json").read_text())["made_by"]
    argv = shlex.split(made_by)
    return argv[argv.index("--") + 1 :]


@pytest.fixture(scope="module")
def results(env_0523) -> dict[str, dryrun.DryRunResult]:
    recorded = _incident_flags()
    renamed = ["--mamba-radix-cache-strategy" if f == "--mamba-scheduler-strategy" else f for f in recorded]
    launches = {"recorded": recorded, "renamed": renamed,
                "prefill-graph": [*renamed, "--cuda-graph-backend-prefill", "breakable"]}
    out = dict(zip(launches, dryrun.dry_run_many(list(launches.values()), model=MODEL, tp=2, gpu="a6000", sglang=VERSION),
                   strict=True))
    out["cold"] = dryrun.dry_run(renamed, model=MODEL, tp=2, gpu="a6000", sglang=VERSION, warm=False)
    return out


def test_the_environment_holds_the_list_made_from_the_wheel(env_0523):
    listed = (env_0523.path / "requirements.txt").read_text()
    assert "made from sglang-0.5.23-" in listed and "dropped (gpu: " in listed
    pins = dryrun.requirements(VERSION)
    assert pins[0] == "torch==2.13.0" and "transformers==5.19.0" in pins and "msgspec==" in " ".join(pins)
    assert not any(p.startswith(("sglang-kernel==", "flashinfer", "nvidia-", "triton==", "torchvision==")) for p in pins)
    info = env_0523.check_info()
    assert info["versions"]["sglang"] == VERSION and info["probes_missing"] == []
    rows = {row.version: row for row in dryrun.versions()}
    assert (rows[VERSION].status, rows[VERSION].state) == ("best-effort", "ready")


def test_the_0_5_11_flag_name_is_refused_by_0_5_23(results):
    error = results["recorded"].error
    assert (error.kind, error.type) == ("arguments", "SystemExit")
    assert "unrecognized arguments: --mamba-scheduler-strategy extra_buffer" in error.message


def test_hooks_declare_the_changes_with_their_sites(results):
    result = results["renamed"]
    assert result.ok, result.error
    assert result.server_args_line.startswith("server_args={'model_path': '/root/models/Qwen3.6-27B', ")
    (running,) = result.changes_to("max_running_requests")
    assert running.after == 48
    assert (running.file, running.function) == ("sglang/srt/arg_groups/speculative_hook.py", "_handle_eagle_family")
    assert result.final["mamba_radix_cache_strategy"] == "extra_buffer"
    assert result.probes_missing == []


def test_the_prefill_cuda_graph_defaults_to_breakable_on_cuda(results):
    """On an NVIDIA GPU 0.5.23's default prefill backend is `breakable` (`default_prefill_backend` asks
    `sglang.srt.utils.is_cuda` when it runs: the dry-run answers it there), and Qwen3.5 is on the
    breakable allowlist, so no rule turns it off; a prefill backend asked for is kept (it is
    "locked", so the incompatibility cascade, multimodal rule included, is skipped)."""
    result = results["renamed"]
    assert result.final["cuda_graph_config"]["prefill"]["backend"] == "breakable"
    assert result.final["cuda_graph_config"]["decode"]["backend"] == "full"
    parse = [c for c in result.changes_to("cuda_graph_config") if c.function == "parse_cuda_graph_config"]
    assert parse and parse[0].file == "sglang/srt/arg_groups/cuda_graph_hook.py"
    asked = results["prefill-graph"]
    assert asked.ok and asked.final["cuda_graph_config"]["prefill"]["backend"] == "breakable"
    assert "disable_breakable_cudagraph_if_incompatible" not in [c.function for c in asked.changes]
    assert not [m for m in asked.messages if "Breakable CUDA graph is incompatible" in m.message]


def test_warm_and_cold_agree(results):
    warm, cold = results["renamed"], results["cold"]
    assert warm.warm and not cold.warm
    strip = ("seconds", "import_seconds", "warm", "notes", "console")
    assert {k: v for k, v in warm.to_dict().items() if k not in strip} == {
        k: v for k, v in cold.to_dict().items() if k not in strip}
