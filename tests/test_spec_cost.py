"""What more draft tokens cost a hybrid model's GPU memory (kit.doctor.spec_cost), against sglang itself.

The kit reads sglang's reserve (mamba_cache_per_req x max_running_requests x draft tokens) and the state's
shape from the release's source and runs them statically. Here sglang 0.5.11's own objects compute the same
numbers: its Qwen3_5TextConfig built from the incident's config.json, its mamba2_cache_params and
mamba_cache_per_req, in the kit's real-server environment of 0.5.11 (PyPI's sglang on CPU; built once under
the kit cache). Two answers are given to it, as on the incident's GPUs: the attention tensor-parallel size (2)
and that the process is not on a CPU (`_is_cpu`, which on CPU rounds the heads per rank).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from kit.doctor import diagnose, from_files
from kit.doctor.case import Case
from kit.doctor.spec_cost import reserve_cost
from kit.hosts import LocalHost
from kit.source import SourceTree

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
NEW = ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json"

_SGLANG_SAYS = """
import json, sys
import sglang.srt.layers.dp_attention as dpa
dpa.get_attention_tp_size = lambda: 2
import sglang.srt.configs.qwen3_next as qn
qn._is_cpu = False
from sglang.srt.configs.qwen3_5 import Qwen3_5TextConfig
params = Qwen3_5TextConfig(**json.load(open(sys.argv[1]))["text_config"]).mamba2_cache_params
print(json.dumps({"per_req": params.mamba_cache_per_req, "layers": len(params.layers),
                  "conv": [list(c) for c in params.shape.conv], "temporal": list(params.shape.temporal)}))
"""


def _incident(tmp_path, tree):
    data = json.loads(NEW.read_text())
    log, cmd = tmp_path / "new.log", tmp_path / "new.cmd"
    log.write_text(f"[2026-05-01 10:00:00] {data['server_args_line']}\n")
    cmd.write_text("python -m sglang.launch_server " + shlex.join(data["argv"]) + "\n")
    return from_files(log=str(log), command=str(cmd), model_config=str(QWEN), gpu="a6000", tree=tree)


@pytest.fixture(scope="module")
def tree_0511(sglang_source):
    return SourceTree.at(LocalHost(), sglang_source("0.5.11"))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_reserve_is_what_sglangs_own_objects_compute(tree_0511, tmp_path):
    from kit.dryrun.serve_env import SERVE_ENV, setup_serve

    env = setup_serve("0.5.11").env
    done = subprocess.run([str(env.python), "-c", _SGLANG_SAYS, str(QWEN)], capture_output=True, text=True,
                          timeout=600, cwd=str(tmp_path), env={**os.environ, **SERVE_ENV, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    cost = reserve_cost(Case(_incident(tmp_path, tree_0511)), 2, 4)
    assert cost.per_req == said["per_req"]  # 76,972,032 bytes: 48 layers of conv (5120, 3) and temporal (24, 128, 128)
    assert f"{said['layers']} linear-attention layers" in " ".join(cost.inputs)
    assert f"conv {tuple(said['conv'][0])}" in " ".join(cost.inputs)
    assert f"temporal {tuple(said['temporal'])}" in " ".join(cost.inputs)
    # model_runner_kv_cache_mixin.py:85-88: mamba_cache_per_req x max_running_requests (48) x draft tokens
    assert (cost.now, cost.then, cost.requests) == (said["per_req"] * 48 * 2, said["per_req"] * 48 * 4, 48)


def test_the_reserve_is_not_estimated_without_the_models_config(tree_0511, tmp_path):
    ev = _incident(tmp_path, tree_0511)
    ev.model_config = None
    cost = reserve_cost(Case(ev), 2, 4)
    assert cost.delta is None and "--model-config" in cost.why


def test_a_release_whose_reserve_reads_what_the_log_lacks_says_so(sglang_source, tmp_path):
    # 0.5.23's _handle_max_mamba_cache reads the ReplaySSM settings and the runtime context: not in a log
    tree = SourceTree.at(LocalHost(), sglang_source("0.5.23"))
    cost = reserve_cost(Case(_incident(tmp_path, tree)), 2, 4)
    assert cost.delta is None and "srt/mem_cache/kv_cache_configurator.py:" in cost.why
    assert "Mamba Cache is allocated" in cost.why
    f = next(f for f in diagnose(_incident(tmp_path, tree)).findings if f.id == "speculative-steps-low")
    assert "the memory it costs is not estimated" in f.impact_reason
