"""The dry-run's parts that need no sglang environment: profiles, versions, launches, messages, setup steps.

The incident itself, resolved by the real sglang 0.5.11 code, is in test_dryrun_incident.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kit.dryrun as dryrun
from kit.cli import build_parser
from kit.dryrun import _env, _inside, _requirements
from kit.dryrun._result import Change, LogMessage, attach_messages, build_changes, in_place_changes
from kit.dryrun._run import _prepare
from kit.errors import KitError, ModelConfigError

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "data" / "provenance" / "qwen3.6-27b" / "config.json"


# --------------------------------------------------------------------------- GPU profiles


def test_the_table_keeps_the_dry_run_s_profiles_and_their_probe_figures():
    profiles = dryrun.gpu_profiles()
    assert {"a6000", "a100-40gb", "a100-80gb", "l40s", "h100", "h200", "rtx4090"} <= set(profiles)
    a6000 = profiles["a6000"]
    assert (a6000.name, a6000.memory_mib, a6000.sm, a6000.hopper, a6000.blackwell) == (
        "NVIDIA RTX A6000", 49140, 86, False, False)
    assert (profiles["h100"].memory_mib, profiles["h100"].sm, profiles["h100"].hopper) == (81559, 90, True)
    for p in profiles.values():
        assert p.bandwidth_gbs > 100 and (p.bf16_tflops is None or p.bf16_tflops > 50), p
        # The flags follow the SM (an AMD entry has none: it has a gfx target instead).
        assert p.hopper == (p.sm is not None and p.sm // 10 == 9), p
        assert p.blackwell == (p.sm is not None and p.sm // 10 in (10, 11, 12)), p


@pytest.mark.parametrize("name", ["a6000", "A6000", "RTX A6000", "NVIDIA RTX A6000", "rtx-a6000"])
def test_gpu_names_are_forgiving(name):
    assert dryrun.gpu_profile(name).key == "a6000"


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(dryrun.UnknownGPU) as err:
        dryrun.gpu_profile("NVIDIA GeForce RTX 2080 Ti")
    assert "'NVIDIA GeForce RTX 2080 Ti'" in err.value.message and "bandwidth is unknown" in err.value.message
    for key in dryrun.gpu_profiles():
        assert key in err.value.message
    assert isinstance(err.value, KitError) and "gpus.yaml" in err.value.hint


def test_probe_answers_follow_the_profile():
    a6000 = _inside.probe_answers(dryrun.gpu_profile("a6000").probe_request())
    assert a6000["get_device_memory_capacity"] == 49140.0 and a6000["get_device_sm"] == 86
    assert not any(a6000[k] for k in ("is_sm90_supported", "is_sm100_supported", "is_blackwell_supported",
                                      "is_hopper_with_cuda_12_3"))
    assert a6000["is_cuda"] is True and a6000["get_device_name"] == "NVIDIA RTX A6000"
    h100 = _inside.probe_answers(dryrun.gpu_profile("h100").probe_request())
    assert h100["is_sm90_supported"] and h100["is_hopper_with_cuda_12_3"] and not h100["is_sm100_supported"]
    old_cuda = dict(dryrun.gpu_profile("h100").probe_request(), cuda_version="12.2")
    assert not _inside.probe_answers(old_cuda)["is_sm90_supported"]  # sglang also wants CUDA >= 12.3
    assert set(a6000) == set(_inside.PROBES) | set(_inside.MORE_PROBES)
    # Newer releases' probes: SM86 is Ampere, so the SM80 family answers yes.
    assert a6000["is_sm80_supported"] and a6000["is_ampere_with_cuda_12_3"] and not a6000["is_sm110_supported"]
    assert a6000["get_device_capability"] == (8, 6) and h100["get_device_capability"] == (9, 0)


# --------------------------------------------------------------------------- versions and pins


def test_three_versions_are_supported_and_others_are_refused_clearly():
    assert {"0.5.10.post1", "0.5.11", "0.5.12"} <= set(dryrun.supported_versions())
    for version in ("0.4.0", "0.5.5", "0.6.0", "0.5.x", "../0.5.11"):
        with pytest.raises(dryrun.UnsupportedVersion) as err:
            dryrun.dry_run("--x", model=CONFIG, gpu="a6000", sglang=version)
        assert repr(version) in err.value.message and "0.5.11" in err.value.message
        assert "0.5.6 <= version < 0.6" in err.value.message
        assert "Adding an sglang version" in err.value.hint


def test_versions_from_0_5_6_on_are_best_effort_and_the_pinned_ones_verified():
    check = _requirements.check_version
    assert [check(v) for v in ("0.5.10.post1", "0.5.11", "0.5.12")] == ["verified"] * 3
    assert [check(v) for v in ("0.5.6", "0.5.6.post2", "0.5.9", "0.5.18", "0.5.23")] == ["best-effort"] * 5
    rows = {row.version: row for row in dryrun.versions()}
    assert {"0.5.10.post1", "0.5.11", "0.5.12"} <= set(rows)
    assert all(rows[v].status == "verified" for v in ("0.5.10.post1", "0.5.11", "0.5.12"))
    assert all(row.state in ("ready", "partial", "not set up") for row in rows.values())


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.11", "0.5.12"])
def test_pins_are_exact_and_torch_is_the_cpu_pin(version):
    pins = dryrun.requirements(version)
    assert pins[0] == "torch==2.13.0"
    names = [p.split("==")[0].lower().replace("_", "-") for p in pins]
    assert len(names) == len(set(names))
    assert "sglang" not in names and "torchvision" not in names and "triton" not in names
    assert all("==" in p for p in pins)


def test_sglang_s_own_pins_are_kept():
    assert "transformers==5.6.0" in dryrun.requirements("0.5.11")
    assert "transformers==5.3.0" in dryrun.requirements("0.5.10.post1")
    assert "openai==2.6.1" in dryrun.requirements("0.5.12")


def test_a_missing_environment_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path))
    with pytest.raises(dryrun.EnvironmentMissing) as err:
        dryrun.dry_run("--speculative-algorithm EAGLE", model=CONFIG, gpu="a6000", sglang="0.5.11")
    assert "sgl-kit dryrun setup --sglang 0.5.11" in err.value.hint
    assert str(tmp_path) in err.value.message


def test_dryrun_versions_lists_status_and_environment(tmp_path):
    """`sgl-kit dryrun versions` in an empty cache: the verified versions, none set up."""
    env = dict(os.environ, SGL_KIT_CACHE=str(tmp_path))
    script = Path(sys.executable).with_name("sgl-kit")
    proc = subprocess.run([script, "dryrun", "versions"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["VERSION", "STATUS", "ENVIRONMENT"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:4]}
    assert set(rows) == {"0.5.10.post1", "0.5.11", "0.5.12"}
    for version, cells in rows.items():
        assert cells[:3] == ["verified", "not", "set"], cells
        assert f"(sgl-kit dryrun setup --sglang {version})" in " ".join(cells)
    assert "Any other sglang 0.5.x from 0.5.6 on is best-effort" in proc.stdout
    # A best-effort environment this machine has started on is listed too.
    (tmp_path / "dryrun" / f"sglang-0.5.18-py311-{_env._fingerprint('0.5.18')}").mkdir(parents=True)
    proc = subprocess.run([script, "dryrun", "versions", "--json"], capture_output=True, text=True, timeout=60,
                          env=env)
    data = {row["version"]: row for row in json.loads(proc.stdout)}
    assert data["0.5.18"]["status"] == "best-effort" and data["0.5.18"]["state"] == "partial"
    assert data["0.5.11"] == {**data["0.5.11"], "status": "verified", "state": "not set up", "ready": False}


# --------------------------------------------------------------------------- lists made from the wheel


def test_the_0_5_23_list_is_made_from_its_wheel_s_own_requirements():
    """Real metadata of the real wheel (downloaded once with pip --no-deps, then cached)."""
    made = dryrun.plan("0.5.23")
    assert made.wheel.startswith("sglang-0.5.23-") and made.wheel.endswith(".whl")
    names = {_requirements.canonical(r.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0])
             for r in made.requires}
    # sglang's own pins that the argument code needs are kept exactly as the wheel says.
    assert {"transformers==5.19.0", "openai==2.8.0", "tokenizers==0.23.2", "compressed-tensors==0.18.0"} <= set(
        made.keep)
    assert "msgspec" in made.keep  # ServerArgs is a msgspec Struct from 0.5.2x on
    assert "apache-tvm-ffi==0.1.11" in made.keep  # sglang.kernels imports tvm_ffi on the way to server_args
    # GPU-only packages are dropped, each group with its reason.
    gpu = set(made.dropped_names("gpu"))
    assert {"sglang-kernel", "flashinfer-python", "cuda-python", "nvidia-cutlass-dsl", "sgl-deep-gemm",
            "torch-memory-saver", "torchaudio", "torchcodec", "torchvision", "tilelang"} <= gpu
    assert {"fastapi", "uvicorn", "datasets", "scipy", "outlines", "numba"} <= set(made.dropped_names("serving"))
    reasons = {d.group: d.reason for d in made.dropped}
    assert "GPU" in reasons["gpu"] and "ServerArgs.__post_init__" in reasons["serving"]
    # torch: sglang pins a CUDA build; the CPU build stands in.
    (torch,) = [d for d in made.dropped if d.group == "torch"]
    assert torch.requirement == "torch==2.14.1" and "2.13.0" in torch.reason and made.torch == "2.13.0"
    # What comes with a dropped package but is imported on the argument path is added back.
    assert set(made.added) == {"starlette", "dill"} and "fastapi" in made.added["starlette"]
    assert set(made.stubbed) == {"triton", "torchvision"}  # sgl_kernel: up to 0.5.9 only
    assert rules_stubs("0.5.6") == ["triton", "torchvision", "sgl_kernel"] and rules_stubs("0.5.11") == [
        "triton", "torchvision"]
    # Every requirement is accounted for exactly once.
    kept = {_requirements.canonical(k.split("=")[0].split("<")[0].split(">")[0]) for k in made.keep}
    assert kept - set(made.added) | set(made.dropped_names()) == names
    assert not (kept & set(made.dropped_names()))
    header = "\n".join(made.header())
    assert "dropped (gpu: " in header and "stand-in for `import triton`" in header and "added starlette" in header


def rules_stubs(version: str) -> list[str]:
    return dryrun.load_rules().stubs_for(version)


def test_rules_name_the_package_behind_a_failed_import():
    rules = dryrun.load_rules()
    assert rules.dropped_by("nvidia-nccl-cu13") == "gpu" and rules.dropped_by("sgl_kernel") == "gpu"
    assert rules.dropped_by("transformers") is None and rules.dropped_by("uvloop") == "serving"
    assert rules.package_for_module("PIL.Image") == "pillow" and rules.package_for_module("tvm_ffi") == "apache-tvm-ffi"
    assert rules.package_for_module("starlette.responses") == "starlette"
    assert rules.covers("0.5.6") and rules.covers("0.5.23") and not rules.covers("0.5.5.post3")


# --------------------------------------------------------------------------- preparing a launch


def test_launch_gets_the_model_copy_the_device_and_tp(tmp_path):
    prepared = _prepare(["--model-path", "/root/models/Q", "--port", "8998"], CONFIG, 2, tmp_path / "m")
    argv = prepared["launch"]["argv"]
    assert argv == ["--model-path", str(tmp_path / "m"), "--device", "cuda", "--tp-size", "2", "--port", "8998"]
    assert prepared["display"] == "/root/models/Q"
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["config.json"]
    assert json.loads((tmp_path / "m" / "config.json").read_text()) == json.loads(CONFIG.read_text())


def test_launch_keeps_an_explicit_device_and_names_the_model_by_its_folder(tmp_path):
    prepared = _prepare(["--device=cpu"], CONFIG.parent, None, tmp_path / "m")
    assert prepared["launch"]["argv"] == ["--model-path", str(tmp_path / "m"), "--device=cpu"]
    assert prepared["display"] == str(CONFIG.parent)


@pytest.mark.parametrize("flag", [["--tp", "4"], ["--tp-size=4"], ["--tensor-parallel-size", "4"]])
def test_tp_given_twice_is_refused(tmp_path, flag):
    with pytest.raises(dryrun.DryRunError, match="given twice"):
        _prepare(flag, CONFIG, 2, tmp_path / "m")


def test_model_problems_are_named(tmp_path):
    with pytest.raises(dryrun.DryRunError, match="needs the model's config.json"):
        _prepare(["--model-path", "/nowhere/model"], None, None, tmp_path / "a")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ModelConfigError, match="not a JSON object"):
        _prepare([], tmp_path / "bad.json", None, tmp_path / "b")
    with pytest.raises(ModelConfigError, match="no model config"):
        _prepare([], tmp_path, None, tmp_path / "c")


# --------------------------------------------------------------------------- changes and their messages


def _write(seq, field, before, after, line, activation=1, is_field=True):
    return {"kind": "write", "seq": seq, "field": field, "is_field": is_field, "activation": activation,
            "before": {"repr": repr(before), "json": before, "exact": True},
            "after": {"repr": repr(after), "json": after, "exact": True},
            "changed": before != after, "function": "ServerArgs._f", "file": "sglang/srt/server_args.py",
            "line": line}


def _log(seq, message, line, activation=1):
    return {"kind": "log", "seq": seq, "level": "WARNING", "message": message, "activation": activation,
            "function": "ServerArgs._f", "file": "sglang/srt/server_args.py", "line": line}


def test_a_message_that_names_the_field_announces_it_and_others_stay_silent():
    events = [
        _write(1, "max_running_requests", None, 48, 3455, activation=16),
        _log(2, "Max running requests is reset to 48 for speculative decoding.", 3456, activation=16),
        _log(3, "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.", 3481,
             activation=16),
        _write(4, "speculative_num_steps", None, 3, 3524, activation=16),
        _write(5, "disable_piecewise_cuda_graph", False, True, 1230, activation=7),
    ]
    changes, writes, messages = build_changes(events, explicit=set())
    by_field = {c.field: c for c in changes}
    assert [m.line for m in by_field["max_running_requests"].messages] == [3456]
    assert by_field["speculative_num_steps"].silent  # the spec-v2 note is 43 lines away and names nothing
    assert by_field["disable_piecewise_cuda_graph"].silent
    assert len(messages) == 2


def test_a_neighbouring_message_counts_only_in_the_same_call():
    events = [
        _write(1, "page_size", None, 64, 1750, activation=3),
        _log(2, "Setting page size to 64 for DeepSeek DSA.", 1751, activation=3),
        _log(3, "Using a different thing.", 1752, activation=4),
        _write(4, "kv_cache_dtype", "auto", "fp8_e4m3", 1753, activation=5),
    ]
    changes, _, _ = build_changes(events, explicit=set())
    page, kv = changes
    assert [m.seq for m in page.messages] == [2]
    assert kv.silent  # a record from another call is no announcement, however close


def test_the_verb_of_a_field_name_is_not_needed_to_name_it():
    writes = [Change("disable_piecewise_cuda_graph", False, True, "False", "True", "f", "x.py", 10, seq=1,
                     activation=1)]
    attach_messages(writes, [LogMessage("INFO", "Piecewise CUDA graph is disabled for this model.",
                                        line=40, seq=2, activation=1)])
    assert not writes[0].silent


def test_writes_that_keep_the_value_are_writes_but_not_changes():
    changes, writes, _ = build_changes([_write(1, "disable_piecewise_cuda_graph", False, False, 1197),
                                        _write(2, "model_config", None, "x", 6735, is_field=False)], set())
    assert changes == [] and [w.line for w in writes] == [1197]


def test_a_value_changed_in_place_is_reported_without_a_site():
    initial = {"cuda_graph_bs": {"repr": "[1, 2]", "json": [1, 2]}, "port": {"repr": "1", "json": 1}}
    final = {"cuda_graph_bs": {"repr": "[1, 2, 4]", "json": [1, 2, 4]}, "port": {"repr": "1", "json": 1}}
    (change,) = in_place_changes(initial, final, [], {"cuda_graph_bs"})
    assert (change.field, change.kind, change.after, change.explicit, change.where) == (
        "cuda_graph_bs", "in place", [1, 2, 4], True, "-")


def test_describe_keeps_json_values_and_the_repr_of_others():
    assert _inside.describe([1, "a", None]) == {"repr": "[1, 'a', None]", "json": [1, "a", None], "exact": True}
    assert _inside.describe((1, 2))["exact"] is False
    nan = _inside.describe(float("nan"))
    assert nan["json"] is None and nan["repr"] == "nan"


# --------------------------------------------------------------------------- command line


def test_the_documented_command_forms_parse():
    parser = build_parser()
    setup = parser.parse_args(["dryrun", "setup", "--sglang", "0.5.11"])
    assert (setup.action, setup.sglang) == ("setup", "0.5.11")
    run = parser.parse_args(["dryrun", "--sglang", "0.5.11", "--model", "c.json", "--gpu", "a6000", "--tp", "2",
                             "--json"])
    assert (run.action, run.model, run.gpu, run.tp, run.json) == ("run", "c.json", "a6000", 2, True)
    why = parser.parse_args(["why", "disable_piecewise_cuda_graph", "--dryrun", "--model", "c.json", "--tp", "2"])
    assert why.dryrun and why.tp == 2 and why.target == "local"


def test_cli_lists_gpus_and_refuses_unknown_ones():
    script = Path(sys.executable).with_name("sgl-kit")
    proc = subprocess.run([script, "dryrun", "gpus"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "NVIDIA RTX A6000" in proc.stdout and "49140 MiB" in proc.stdout
    proc = subprocess.run([script, "dryrun", "--sglang", "0.5.11", "--gpu", "rtx2080", "--model", str(CONFIG), "--",
                           "--tp-size", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown GPU 'rtx2080'" in proc.stderr and "h100" in proc.stderr


def test_the_gpu_and_the_version_are_required_not_defaulted(monkeypatch):
    """No GPU or sglang version stands in for the target's: each missing one is an error saying how to give it."""
    with pytest.raises(dryrun.NotGiven) as err:
        dryrun.dry_run("--tp-size 2", model=CONFIG, sglang="0.5.11")
    assert "GPU" in err.value.message and "gpu='h100'" in err.value.hint and "--gpu" in err.value.cli_hint
    with pytest.raises(dryrun.NotGiven) as err:
        dryrun.dry_run("--tp-size 2", model=CONFIG, gpu="h100")
    assert "sglang version" in err.value.message and "--sglang VERSION" in err.value.cli_hint
    script = Path(sys.executable).with_name("sgl-kit")
    proc = subprocess.run([script, "dryrun", "--model", str(CONFIG), "--", "--tp-size", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--sglang VERSION" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([script, "dryrun", "--sglang", "0.5.11", "--model", str(CONFIG), "--", "--tp-size", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--gpu KEY" in proc.stderr and "sgl-kit dryrun gpus" in proc.stderr


def test_an_amd_gpu_is_refused_by_the_dry_run_but_known_to_the_table():
    mi300x = dryrun.gpu_profile("AMD Instinct MI300X")
    assert (mi300x.vendor, mi300x.gfx, mi300x.bandwidth_gbs) == ("amd", "gfx942", 5300)
    with pytest.raises(dryrun.DryRunError) as err:
        dryrun.dry_run("--tp-size 2", model=CONFIG, gpu="mi300x", sglang="0.5.11")
    assert "does not emulate ROCm" in err.value.message and "5300 GB/s" in err.value.hint
    script = Path(sys.executable).with_name("sgl-kit")
    proc = subprocess.run([script, "dryrun", "--sglang", "0.5.11", "--gpu", "mi300x", "--model", str(CONFIG), "--",
                           "--tp-size", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "ROCm" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- setup: steps, markers, failures


def test_setup_fails_naming_the_step_and_package_and_resumes_from_markers(tmp_path, monkeypatch):
    """A real venv and a real pip, kept off the network: the index is off and find-links is empty."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "requirements-9.9.9.txt").write_text("torch==2.13.0\nsix==1.17.0\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setattr(_requirements, "DATA_DIR", data)
    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    seen = []
    with pytest.raises(dryrun.SetupFailed) as err:
        dryrun.setup("9.9.9", progress=lambda step: seen.append((step.name, step.state)))
    assert (err.value.step, err.value.package) == ("torch", "torch==2.13.0")
    assert "torch==2.13.0" in err.value.message and "finished steps are kept" in err.value.hint
    assert seen == [("venv", "running"), ("venv", "done"), ("torch", "running")]
    env = dryrun.environment("9.9.9")
    assert (env.markers / "venv.done").is_file() and not env.ready

    seen.clear()
    with pytest.raises(dryrun.SetupFailed):
        dryrun.setup("9.9.9", progress=lambda step: seen.append((step.name, step.state)))
    assert seen[:2] == [("venv", "cached"), ("torch", "running")]

    # A package step that fails names the one package pip could not get.
    with pytest.raises(dryrun.SetupFailed) as err:
        _env._install_chunk(env, ["six==1.17.0"], "packages-1")
    assert (err.value.step, err.value.package) == ("packages-1", "six==1.17.0")


def test_setup_refuses_a_python_that_is_not_3_11(monkeypatch):
    with pytest.raises(dryrun.SetupFailed) as err:
        _env.find_python("/bin/true")
    assert "Python 3.11" in err.value.message and "SGL_KIT_DRYRUN_PYTHON" in err.value.hint


def test_errors_from_below_sglang_are_limits_of_the_dry_run_not_startup_errors():
    from traceback import FrameSummary

    torch_frame = FrameSummary("/env/site-packages/torch/cuda/__init__.py", 400, "_lazy_init")
    assert _inside._from_missing_hardware(AssertionError("Torch not compiled with CUDA enabled"), torch_frame)
    stub = FrameSummary(_inside.__file__, 90, "__call__")
    assert _inside._from_missing_hardware(RuntimeError("x is a dry-run stand-in"), stub)
    rule = FrameSummary("/env/site-packages/sglang/srt/server_args.py", 2453, "_handle_mamba_radix_cache")
    assert not _inside._from_missing_hardware(ValueError("not compatible with radix cache"), rule)
    assert not _inside._from_missing_hardware(ValueError("--x needs CUDA 12.8"), rule)  # sglang's own check
    config = FrameSummary("/env/site-packages/transformers/configuration_utils.py", 700, "get_config_dict")
    assert not _inside._from_missing_hardware(ValueError("Unrecognized model in /m"), config)
