"""The doctor on partial evidence: it never refuses a launch, an unknown GPU or a cut-off log.

Each class is shown on a real thread of data/incidents/ where one exists, posted without an sglang
version: before, the doctor said "the launch command ... is not read: no sglang version anywhere in the
evidence ... add --sglang VERSION" and read nothing of it; now the release is inferred from the evidence
(or assumed, said at the top) and the flags are read with its flag table. Inputs that no thread holds
(a bash array, a sentence naming flags, an unknown GPU name in nvidia-smi output, a command beside a
server_args line cut mid-way) are written for this test, and say so where they are built.

The releases read are sglang wheels from the kit's cache (pip download --no-deps, once).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from kit.doctor import diagnose, from_files
from kit.doctor.infer import guess_version, launch_options, text_dates
from kit.server_args import stated_versions

ROOT = Path(__file__).resolve().parent.parent
INCIDENTS = ROOT / "data" / "incidents"
SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"
OLD_REFUSAL = "is not read: no sglang version anywhere"


def sgl_kit(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([SGL_KIT, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _guessed(ev) -> None:
    """The version is not given and is said to be a guess, in Evidence and in its sources."""
    assert ev.version and ev.version_basis in ("inferred", "assumed"), (ev.version, ev.version_basis)
    assert ev.sources["version"].startswith(f"sglang {ev.version} assumed (")
    assert "no version stated" in ev.sources["version"]
    assert not any(OLD_REFUSAL in p for p in ev.problems), ev.problems


# --------------------------------------------------------------------------- the version, inferred


def test_the_release_is_narrowed_by_a_flag_only_some_releases_accept():
    # --enable-piecewise-cuda-graph: a field in 0.5.4-0.5.9, accepted and ignored in 0.5.10-0.5.13, gone in 0.5.14
    guess = guess_version(options=["--enable-piecewise-cuda-graph", "--tp"], releases=["0.4.6.post5", "0.5.11", "0.5.23"])
    assert (guess.version, guess.basis, guess.fits) == ("0.5.11", "inferred", ["0.5.11"])
    assert guess.line().startswith("sglang 0.5.11 assumed (inferred from the flags")


def test_a_date_in_the_text_leaves_out_releases_published_after_it():
    guess = guess_version(dates=[date(2025, 6, 12)], releases=["0.4.6.post5", "0.5.11", "0.5.23"])
    assert (guess.version, guess.basis) == ("0.4.6.post5", "inferred")  # published before 2025-06-12
    assert "the date 2025-06-12" in guess.line()


def test_nothing_to_narrow_assumes_the_newest_release_considered_and_says_so():
    guess = guess_version(releases=["0.4.6.post5", "0.5.11", "0.5.23"])
    assert (guess.version, guess.basis) == ("0.5.23", "assumed")
    assert "the newest release considered" in guess.line()
    # the range spans releases the rules tell apart: known issues (kit/data/known_issues) that affect some of them
    assert any("known issue(s) affect some of these releases and not others" in s for s in guess.spans), guess.spans


def test_the_releases_considered_are_the_same_in_an_empty_cache(tmp_path, monkeypatch):
    """Every release since 0.3 comes from kit/data/releases.json, not from what the cache holds: a paste that
    states no release gets the same reading on every machine."""
    from kit.doctor.infer import known_releases
    from kit.doctor.releases import releases

    before = guess_version(options=["--enable-dp-attention", "--tp", "--disable-radix-cache"])
    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "empty"))
    assert known_releases() == list(releases()) and len(known_releases()) >= 100
    assert known_releases()[0] == "0.3.0" and "0.4.1.post4" in known_releases()
    after = guess_version(options=["--enable-dp-attention", "--tp", "--disable-radix-cache"])
    assert (after.version, after.fits) == (before.version, before.fits)
    assert after.fits[0] == releases_with("--enable-dp-attention")[0]


def releases_with(option: str) -> list[str]:
    from kit.doctor.releases import releases, table_of

    return [v for v, r in releases().items() if table_of(r).match(option) is not None]


@pytest.mark.parametrize("version", ["0.4.1.post4", "0.5.11", "0.5.23"])
def test_the_table_of_releases_holds_what_each_wheel_parses(version):
    """The committed table against a fresh read of the release's own source with the kit's flag reader."""
    from kit.doctor.releases import releases
    from kit.launch_file import source_tree
    from kit.server_args import defaults, flag_table

    tree = source_tree(None, version)
    row = releases()[version]
    options = {o for spec in flag_table(tree).flags for o in spec.option_strings}
    assert {o for entry in row.flags for o in entry.rpartition(":")[0].split(",")} == options
    assert set(defaults(tree)) <= row.fields
    assert row.published is not None and date(2024, 1, 1) <= row.published <= date.today()


def test_the_docker_latest_tag_states_no_version_and_the_flags_are_read():
    """sgl-project/sglang#3927: `lmsysorg/sglang:latest` and a vLLM flag (--max_num_batched_tokens)."""
    path = INCIDENTS / "sglang-3927-docker-run" / "docker-run.sh"
    assert stated_versions(path.read_text()) == []
    ev = from_files(command=str(path))
    _guessed(ev)
    assert ev.explicit["tp_size"] == 2 and ev.explicit["context_length"] == 2048
    assert any("--max_num_batched_tokens" in p and "not a flag of sglang" in p for p in ev.problems), ev.problems
    text = diagnose(ev).to_text()
    assert text.splitlines()[1].startswith(f"sglang {ev.version} assumed (")


def test_a_script_with_variables_is_read_without_a_version():
    """sgl-project/sglang#8024's launch script ($(( )) arithmetic, ${VARS}, cut off at `--e`)."""
    ev = from_files(command=str(INCIDENTS / "sglang-8024-script-vars" / "launch.sh"))
    _guessed(ev)
    assert ev.explicit["tp_size"] == 8 and ev.explicit["page_size"] == 64
    assert ev.explicit["max_running_requests"] == 512  # 8 * 2 * (32 * 8 / 8)
    assert any("--e" in p and "cut off" in p for p in ev.problems)


def test_a_wrapper_line_in_a_comment_is_read_without_a_version():
    """sgl-project/sglang#6017: env prefix and nohup around the launch, quoted in a comment, cut off."""
    ev = from_files(paste=str(INCIDENTS / "sglang-6017-inline-cut" / "comment.md"))
    _guessed(ev)
    assert ev.explicit["dp_size"] == 16 and ev.explicit["chunked_prefill_size"] == 524288
    assert ev.environ["SGLANG_TBO_DEBUG"] == "1"


def test_launch_options_and_dates_read_from_text():
    text = (INCIDENTS / "sglang-7212-script-cut-server-args" / "issue.md").read_text()
    assert "--tp-size" in launch_options([text]) and date(2025, 6, 12) in text_dates(text)


# --------------------------------------------------------------------------- a cut log beside a command


def test_a_cut_server_args_line_beside_its_script_is_read():
    """sgl-project/sglang#7212: the script and its log, whose server_args line is cut before any field."""
    ev = from_files(paste=str(INCIDENTS / "sglang-7212-script-cut-server-args" / "issue.md"))
    _guessed(ev)
    assert "2025-06-12" in ev.sources["version"]  # the log's timestamps bound the release
    assert ev.explicit["tp_size"] == 4 and ev.args["max_running_requests"] == 128
    assert any("cut off before its first field" in p for p in ev.problems)


def test_a_command_fills_the_fields_a_cut_lost(tmp_path):
    log = ROOT / "tests" / "data" / "server_args" / "cut-mid-field.log"
    command = tmp_path / "launch.sh"  # written for this test: the launch that log's fields belong to
    command.write_text("python -m sglang.launch_server --model-path /models/Qwen3.6-27B --tp 2 "
                       "--max-running-requests 48 --context-length 32768\n")
    ev = from_files(log=str(log), command=str(command), sglang="0.5.11")
    assert ev.args["max_running_requests"] == 48 and ev.args["context_length"] == 32768
    assert "max_running_requests" not in ev.unknown and "chunked_prefill_size" in ev.unknown
    assert "fields the cut lost from the launch command" in ev.sources["args"]


# --------------------------------------------------------------------------- wrappers and prose (written for the test)


def test_a_bash_array_wrapper_is_read_with_each_flags_line(tmp_path):
    script = tmp_path / "serve.sh"  # written for this test
    script.write_text('#!/bin/bash\nMODEL=/models/llama\nARGS=(\n  --model-path "$MODEL"\n  --tp 8\n'
                      '  --mem-fraction-static 0.85\n)\nEXTRA_ARGS="--chunked-prefill-size 4096"\n'
                      'python -m sglang.launch_server "${ARGS[@]}" $EXTRA_ARGS --port 30000\n')
    ev = from_files(command=str(script), sglang="0.5.11")
    launch = ev.launch.primary
    assert ev.explicit["tp_size"] == 8 and ev.explicit["mem_fraction_static"] == 0.85
    assert ev.explicit["chunked_prefill_size"] == 4096 and ev.explicit["model_path"] == "/models/llama"
    origin = {flag.field: flag.origin for flag in launch.flags}  # each flag read says where it was written
    assert origin["tp_size"] == f"{script}:9 via ${{ARGS[@]}} ({script}:5)"
    assert origin["chunked_prefill_size"] == f"{script}:9 via $EXTRA_ARGS ({script}:8)"


def test_sglang_serve_takes_its_model_without_a_flag(tmp_path):
    cmd = tmp_path / "cmd.txt"  # written for this test
    cmd.write_text("sglang serve Qwen/Qwen3-8B --tp 2 --port 30000\n")
    ev = from_files(command=str(cmd), sglang="0.5.23")
    assert ev.explicit["model_path"] == "Qwen/Qwen3-8B" and ev.explicit["tp_size"] == 2
    assert not any("a value where a flag was expected" in p for p in ev.problems)


def test_flags_and_numbers_named_in_sentences_are_read(tmp_path):
    post = tmp_path / "post.md"  # written for this test
    post.write_text("We serve DeepSeek-V3 on 8 x H200 with `--tp 8 --dp 8 --enable-dp-attention`, after "
                    "pip install --upgrade.\nThe log shows #running-req: 15 most of the time.\n")
    ev = from_files(paste=str(post), sglang="0.5.11")
    assert ev.args == {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}
    assert "line 1" in ev.sources["prose flags"] and "--upgrade" not in ev.sources["prose flags"]
    assert ev.explicit is None  # a sentence is not the launch: what it does not name stays unknown
    assert ev.decode["max_running_req"] == 15 and "line 2" in ev.sources["decode"]


@pytest.mark.parametrize("sentence, expected", [
    ("We launch with `--speculative-algorithm EAGLE --speculative-num-steps 5` on H100.",
     {"speculative_algorithm": "EAGLE", "speculative_num_steps": 5}),  # a choice in capitals
    ("Set --attention-backend fa3.", {"attention_backend": "fa3"}),  # the sentence's full stop is not the value's
    ("with --mem-fraction-static 0.8.", {"mem_fraction_static": 0.8}),
    ("the `--fp4-gemm-backend` help now says", None),  # a word that is none of the flag's choices is no value
])
def test_flag_values_in_sentences(sentence, expected, tmp_path):
    from kit.launch_file import source_tree
    from kit.server_args import flag_table
    from kit.server_args.prose import prose_flags

    read = prose_flags(sentence, flag_table(source_tree(sglang="0.5.11")))
    assert (None if read is None else dict(read.explicit)) == expected


def test_the_gpus_of_a_posted_check_env_are_read():
    ev = from_files(paste=str(ROOT / "tests" / "data" / "known_issue_evidence" / "sglang-7070-v047-qwen3" / "comment.md"))
    assert [g.name for g in ev.hardware.gpus] == ["NVIDIA RTX 6000 Ada Generation"] * 4  # "GPU 0,1,2,3: ..."
    assert "check_env output" in ev.sources["hardware"]
    assert ev.version == "0.4.7"  # its "sglang: 0.4.7" line


def test_a_gpu_named_in_a_real_posts_sentences_is_read_as_named():
    ev = from_files(paste=str(INCIDENTS / "sglang-40346-rtx5090-graph-bs-48" / "pr.md"), sglang="0.5.20")
    assert [g.name for g in ev.hardware.gpus] == ["NVIDIA GeForce RTX 5090"]
    assert "line 3: 'RTX 5090'" in ev.sources["hardware"] and "not read from nvidia-smi" in ev.sources["hardware"]
    assert "1 assumed" in ev.sources["hardware"]  # the post writes no count
    assert not any("no evidence recognised" in p for p in ev.problems)


@pytest.mark.parametrize("sentence, expected", [
    ("We serve it on two RTX 4090s with tp 2", [("rtx4090", 2)]),
    ("an 8xH100 box", [("h100", 8)]),
    ("running on 2 x A6000 (48 GB)", [("a6000", 2)]),
    ("Qwen/Qwen3-8B on an A100 80GB", [("a100-80gb", None)]),
    ("the server listens on port 4090 and 5090", []),  # a bare number is no GPU
    ("weights from https://host/h100/a100/model", []),  # nor a URL's path
    ("H20 vs H200", [("h20", None), ("h200", None)]),  # whole names: H200 is no H20
])
def test_gpu_names_and_counts_in_sentences(sentence, expected):
    from kit.hardware import prose_gpus

    assert [(g.profile.key, g.count) for g in prose_gpus(sentence)] == expected


def test_several_gpu_models_named_stand_for_none(tmp_path):
    post = tmp_path / "post.md"  # written for this test
    post.write_text("On an H100 it runs at 70 tok/s, on an A6000 at 35 tok/s, with `--tp 1`.\n")
    ev = from_files(paste=str(post), sglang="0.5.11")
    assert not getattr(ev.hardware, "gpus", None)
    assert any("several GPU models (h100, a6000)" in p for p in ev.problems), ev.problems


# --------------------------------------------------------------------------- unknown hardware


def test_an_unknown_gpu_in_nvidia_smi_output_leaves_a_problem_and_the_rest_runs(tmp_path):
    smi = tmp_path / "smi.csv"  # written for this test: a GPU name the kit's table does not hold
    smi.write_text("index, name, memory.total [MiB], memory.used [MiB]\n0, Radeon AI PRO R9700, 32624 MiB, 0 MiB\n")
    ev = from_files(command=str(INCIDENTS / "sglang-3927-docker-run" / "docker-run.sh"), nvidia_smi=str(smi),
                    sglang="0.4.6.post5")
    assert any("'Radeon AI PRO R9700': not a GPU the kit knows" in p for p in ev.problems), ev.problems
    d = diagnose(ev)
    assert d.roofline is not None and "bandwidth unknown" in d.roofline.to_text()


# --------------------------------------------------------------------------- the CLI


@pytest.mark.slow
def test_cli_doctor_reads_a_command_with_no_version():
    path = INCIDENTS / "sglang-3927-docker-run" / "docker-run.sh"
    proc = sgl_kit("doctor", "--command", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert " (assumed): " in lines[0] and lines[1].startswith("sglang ") and " assumed (" in lines[1]
    assert OLD_REFUSAL not in proc.stdout
    assert "finding" in lines[0] and ("no rule found" in proc.stdout or "no finding" in proc.stdout
                                      or "1. [" in proc.stdout)
    data = json.loads(sgl_kit("doctor", "--command", str(path), "--json").stdout)
    assert data["sglang_version_basis"] in ("inferred", "assumed")


@pytest.mark.slow
def test_cli_doctor_continues_past_an_unknown_gpu():
    path = INCIDENTS / "sglang-8024-script-vars" / "launch.sh"
    proc = sgl_kit("doctor", "--command", str(path), "--gpu", "r9700")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "--gpu r9700: not a GPU the kit knows" in text and "a6000" in text
    assert "hardware: 8x r9700" in text
