"""kit.server_args.read_launch_text: launch evidence as pasted, one flag at a time, with origins.

Real texts come from the incident corpus (data/incidents/, each with its URL); the short
texts marked "written for this test" stand for forms no corpus thread holds (a systemd unit, a
LeaderWorkerSet with EXTRA_ARGS, compose, a wrapper with `exec ... "$@"`). The flags are read
with the flag table of real sglang 0.5.11 source.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.hosts import LocalHost
from kit.server_args import (
    choose_version,
    flag_table,
    parse_command,
    read_launch_text,
    split_paste,
    stated_versions,
    strip_markdown,
)
from kit.source import SourceTree

INCIDENTS = Path(__file__).resolve().parent.parent / "data" / "incidents"


@pytest.fixture(scope="module")
def flags(sglang_source):
    return flag_table(SourceTree.at(LocalHost(), sglang_source("0.5.11")))


def _one(text, flags, **kw):
    found = read_launch_text(text, flags, **kw)
    assert found.launches, [str(p) for p in found.all_problems()]
    return found, found.launches[0]


# --------------------------------------------------------------------------- real pasted texts


def test_a_script_with_variables_expands_them_and_says_from_where(flags):
    text = (INCIDENTS / "sglang-7212-script-cut-server-args" / "issue.md").read_text()
    _, launch = _one(text, flags, where="issue.md")
    assert launch.explicit["tp_size"] == 4 and launch.explicit["max_running_requests"] == 128
    tp = next(f for f in launch.flags if f.field == "tp_size")
    assert "$GPU_NUM" in tp.origin and "issue.md:13" in tp.origin  # GPU_NUM=4 is set on line 13


def test_an_unknown_variable_is_a_problem_naming_the_flag_and_the_rest_is_kept(flags):
    text = (INCIDENTS / "sglang-8024-script-vars" / "launch.sh").read_text()
    found, launch = _one(text, flags)
    port = [p for p in found.all_problems() if p.flag == "--port"]
    assert port and "${DEFAULT_PORT}" in port[0].text
    assert "port" in launch.unreadable and "port" not in launch.explicit
    # $(( ... )) over variables the script sets is computed, and says so
    mrr = next(f for f in launch.flags if f.field == "max_running_requests")
    assert mrr.value == 512 and "= 512" in mrr.origin
    # the cut-off last token `--e` is named, not silently matched
    assert any(p.flag == "--e" for p in found.all_problems())


def test_a_command_cut_off_mid_flag_keeps_every_flag_before_the_cut(flags):
    text = (INCIDENTS / "sglang-7116-env-prefix-cut" / "commands.md").read_text()
    found, launch = _one(text, flags)
    cut = [p for p in found.all_problems() if p.flag == "--conte"]
    assert cut and "cut off" in cut[0].why
    assert launch.explicit["max_running_requests"] == 4096 and "context_length" not in launch.explicit
    assert launch.env["NCCL_CUMEM_ENABLE"] == "1"


def test_an_unclosed_quote_and_inline_code_in_a_quoted_reply(flags):
    text = (INCIDENTS / "sglang-6017-inline-cut" / "comment.md").read_text()
    found, launch = _one(text, flags)
    assert launch.explicit["chunked_prefill_size"] == 524288 and launch.explicit["dp_size"] == 16
    assert any("never closed" in p.why for p in found.all_problems())


def test_two_launches_in_one_post_with_tab_continuations(flags):
    text = (INCIDENTS / "sglang-3888-int8-tabs-comments" / "post.md").read_text()
    found = read_launch_text(text, flags)
    assert [r.explicit["node_rank"] for r in found.launches] == [0, 1]
    assert all(r.explicit["trust_remote_code"] is True for r in found.launches)  # `--trust-remote`: an abbreviation


def test_an_invalid_yaml_paste_is_said_and_read_as_lines(flags):
    text = (INCIDENTS / "sglang-10216-k8s-statefulset" / "statefulset.yaml").read_text()
    found, launch = _one(text, flags)
    assert any("not valid YAML" in p.why for p in found.all_problems())
    assert launch.explicit["tp_size"] == 16 and "node_rank" in launch.unreadable
    node = [p for p in found.all_problems() if p.flag == "--node-rank"][0]
    assert "only the shell computes" in node.why  # POD_INDEX=$(echo $POD_NAME | awk ...)


def test_sglang_serve_after_env_assignments_on_continued_lines(flags):
    text = (INCIDENTS / "lsglang-25-sglang-serve-env" / "run.sh").read_text()
    _, launch = _one(text, flags)
    assert launch.launcher == "sglang serve"
    assert launch.env["SGLANG_WARMUP_TIMEOUT"] == "290000"
    assert launch.explicit["context_length"] == 1048576


def test_engine_keyword_arguments(flags):
    text = (INCIDENTS / "sglang-1872-engine-kwargs" / "bench.py").read_text()
    _, launch = _one(text, flags)
    assert launch.launcher == "sgl.Engine"
    assert launch.explicit == {"model_path": "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8",
                               "mem_fraction_static": 0.8, "tp_size": 8}


def test_flags_after_a_docker_image_without_a_launcher_are_no_launch(flags):
    text = (INCIDENTS / "sglang-3855-docker-image-flags" / "issue.md").read_text()
    found = read_launch_text(text, flags)
    assert not found.launches and "no sglang launch" in str(found.problems[0])


# --------------------------------------------------------------------------- forms no thread holds
# (each text below is written for this test)


def test_a_comment_inside_a_continued_command_ends_it_as_bash_does(flags):
    text = "python -m sglang.launch_server --model-path m \\\n  # --enable-torch-compile \\\n  --tp 2\n"
    found, launch = _one(text, flags)
    assert "tp_size" not in launch.explicit
    assert any("never got" in p.why and "--tp 2" in p.text for p in found.all_problems())


def test_a_wrapper_that_execs_with_its_own_flags_and_the_scripts_arguments(flags):
    text = '#!/bin/sh\nset -e\nPORT="${PORT:-30000}"\nexec python3 -m sglang.launch_server --port "$PORT" --tp 2 "$@"\n'
    found, launch = _one(text, flags)
    assert launch.explicit == {"port": 30000, "tp_size": 2}
    assert any("$@" in n for n in launch.notes)


def test_a_systemd_unit(flags):
    text = ("[Unit]\nDescription=sglang\n[Service]\nEnvironment=\"CUDA_VISIBLE_DEVICES=0,1\" \"TP=2\"\n"
            "EnvironmentFile=/etc/sglang.env\nExecStart=/opt/venv/bin/python -m sglang.launch_server \\\n"
            "  --model-path /models/m --tp ${TP} --port 8000\nRestart=always\n")
    found, launch = _one(text, flags, where="sglang.service")
    assert found.form == "systemd"
    assert launch.explicit == {"model_path": "/models/m", "tp_size": 2, "port": 8000}
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert any("/etc/sglang.env" in n for n in found.notes)


def test_a_leaderworkerset_with_flags_in_an_env_variable(flags):
    text = """apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
spec:
  leaderWorkerTemplate:
    leaderTemplate:
      spec:
        containers:
          - name: leader
            image: lmsysorg/sglang:latest
            env:
              - name: EXTRA_ARGS
                value: "--disable-radix-cache --max-running-requests 64"
              - name: TP
                value: "16"
            envFrom:
              - configMapRef:
                  name: sglang-config
            command: ["sh", "-c", "python3 -m sglang.launch_server --model-path /m --tp $TP --port ${PORT}"]
"""
    found, launch = _one(text, flags, where="lws.yaml")
    assert found.form == "yaml"
    assert launch.explicit == {"model_path": "/m", "tp_size": 16, "disable_radix_cache": True,
                               "max_running_requests": 64}
    assert "port" in launch.unreadable
    extra = next(f for f in launch.flags if f.field == "disable_radix_cache")
    assert "leaderTemplate.spec.containers[0].env[0]" in extra.origin and "EXTRA_ARGS" in extra.origin
    assert any("sglang-config" in n for n in found.notes)


def test_compose_with_entrypoint_command_and_environment(flags):
    text = ("services:\n  sglang:\n    image: lmsysorg/sglang:latest\n    environment:\n      NCCL_P2P_DISABLE: 1\n"
            "    entrypoint: python3 -m sglang.launch_server\n    command: --model-path m --tp 2 --port 30000\n")
    found, launch = _one(text, flags)
    assert launch.explicit == {"model_path": "m", "tp_size": 2, "port": 30000}
    assert launch.env["NCCL_P2P_DISABLE"] == "1"


def test_a_bad_value_is_a_problem_and_does_not_drop_the_other_flags(flags):
    found, launch = _one("python -m sglang.launch_server --tp two --port 30000 --no-such-flag 3 --context-length 4096",
                         flags)
    assert launch.explicit == {"port": 30000, "context_length": 4096}
    assert {p.flag for p in found.all_problems()} == {"--tp-size", "--no-such-flag"}


def test_markdown_emphasis_is_taken_off_prose_not_flags():
    assert strip_markdown("run with _--tp 2_ and **--port 8000**") == "run with --tp 2 and --port 8000"
    assert strip_markdown("--model_path a_b_c") == "--model_path a_b_c"
    assert strip_markdown("```bash\n--tp_size 2 _x_\n```").split("\n")[1] == "--tp_size 2 _x_"


def test_a_paste_says_where_each_piece_is():
    text = (INCIDENTS / "sglang-3488-check-env-topo" / "issue.md").read_text()
    paste = split_paste(text)
    assert paste.of("launch")[0].start == 5 and paste.of("launch")[0].end == 9
    assert paste.of("check_env")[0].text.count("\n") > 30 and paste.of("topo")


# --------------------------------------------------------------------------- properties

_POOL = [
    ("--tp-size", st.integers(1, 16).map(str)),
    ("--max-running-requests", st.integers(1, 4096).map(str)),
    ("--chunked-prefill-size", st.integers(-1, 65536).map(str)),
    ("--mem-fraction-static", st.floats(0.1, 0.95).map(lambda x: f"{x:.3f}")),
    ("--attention-backend", st.sampled_from(["flashinfer", "triton", "fa3"])),
    ("--model-path", st.sampled_from(["/models/a", "Qwen/Qwen3-8B", "/m/with space"])),
    ("--port", st.integers(1024, 65535).map(str)),
    ("--context-length", st.integers(128, 1 << 20).map(str)),
    ("--disable-radix-cache", st.none()),
    ("--enable-torch-compile", st.none()),
]
_commands = st.lists(st.sampled_from(range(len(_POOL))), min_size=1, max_size=8, unique=True).flatmap(
    lambda idx: st.tuples(*[st.tuples(st.just(_POOL[i][0]), _POOL[i][1]) for i in idx]))


def _render(pairs, style: int) -> str:
    parts = [" ".join([opt] + ([shlex.quote(v)] if v is not None else [])) for opt, v in pairs]
    head = "python3 -m sglang.launch_server"
    if style == 0:
        return " ".join([head, *parts])
    if style == 1:
        return " \\\n    ".join([head, *parts]) + "\n"
    return "```bash\n$ " + " \\\n\t".join([head, *parts]) + "\n```\n"


@given(pairs=_commands, style=st.integers(0, 2))
def test_any_formatting_reads_the_same_as_the_strict_parser(flags, pairs, style):
    strict = parse_command(["python3", "-m", "sglang.launch_server",
                            *[t for o, v in pairs for t in ([o] if v is None else [o, v])]], flags)
    found = read_launch_text(_render(pairs, style), flags)
    assert found.launches[0].explicit == strict
    assert not found.all_problems()


@given(pairs=_commands, which=st.integers(0, 7))
def test_one_unreadable_value_drops_only_that_flag(flags, pairs, which):
    valued = [i for i, (_, v) in enumerate(pairs) if v is not None]
    if not valued:
        return
    k = valued[which % len(valued)]
    edited = [(o, "${SOME_VAR}" if i == k else v) for i, (o, v) in enumerate(pairs)]
    found = read_launch_text(_render(edited, 1), flags)
    launch = found.launches[0]
    field = flags[pairs[k][0]].field
    assert launch.unreadable == [field] and field not in launch.explicit
    others = [t for i, (o, v) in enumerate(pairs) if i != k for t in ([o] if v is None else [o, v])]
    assert launch.explicit == (parse_command(others, flags) if others else {})


@given(pairs=_commands, cut=st.integers(0, 400))
def test_a_command_cut_anywhere_never_raises_and_keeps_what_is_whole(flags, pairs, cut):
    text = _render(pairs, 0)
    head = text[:max(len("python3 -m sglang.launch_server "), min(cut, len(text)))]
    found = read_launch_text(head, flags)
    if not found.launches:
        return
    launch = found.launches[0]
    whole = [(o, v) for o, v in pairs if f" {o}" + (f" {shlex.quote(v)}" if v is not None else "") + " " in head + " "]
    for opt, _value in whole[:-1]:  # the last whole-looking one may itself be cut (a value cut short)
        assert flags[opt].field in launch.explicit


def test_sgl_kit_args_read_prints_each_flag_with_its_origin(sglang_source):
    import json
    import subprocess
    import sys

    script = INCIDENTS / "sglang-8024-script-vars" / "launch.sh"
    sgl_kit = str(Path(sys.executable).parent / "sgl-kit")
    proc = subprocess.run([sgl_kit, "args", "read", str(script), "--package-dir", sglang_source("0.5.11"), "--json"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    launch = json.loads(proc.stdout)["reads"][0]["launches"][0]
    mrr = next(f for f in launch["flags"] if f["field"] == "max_running_requests")
    assert mrr["value"] == 512 and mrr["origin"].startswith(f"{script}:27")
    assert any("--port" in p and "${DEFAULT_PORT}" in p for p in launch["problems"])
    plain = subprocess.run([sgl_kit, "args", "read", "-"], input=script.read_text(), capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 0 and "flags read by their shape" in plain.stdout and "could not read:" in plain.stdout


def test_sgl_kit_args_masks_the_secrets_of_a_launch_and_a_log(sglang_source, tmp_path):
    import json
    import subprocess
    import sys

    secrets = ["sk-live-9f8e7d6c5b4a3210", "adm-77aa88bb99cc", "hf_AbCdEfGhIjKlMnOpQrSt"]  # planted
    script = tmp_path / "launch.sh"  # written for this test
    script.write_text(f"export HF_TOKEN={secrets[2]}\npython -m sglang.launch_server --model-path m --tp 2 \\\n"
                      f"  --api-key {secrets[0]} --admin-api-key={secrets[1]}\n")
    log = tmp_path / "server.log"  # a server_args line as sglang 0.5.11 prints it, with the key in it
    log.write_text(f"[2026-12-05 10:00:00] server_args=ServerArgs(model_path='m', tp_size=2, api_key='{secrets[0]}', "
                   "port=30000)\n")
    sgl_kit = str(Path(sys.executable).parent / "sgl-kit")
    runs = [[sgl_kit, "args", "read", str(script)],
            [sgl_kit, "args", "read", str(script), "--package-dir", sglang_source("0.5.11"), "--json"],
            [sgl_kit, "args", "parse", str(log)], [sgl_kit, "args", "parse", str(log), "--json"]]
    for argv in runs:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        assert not [s for s in secrets if s in proc.stdout + proc.stderr], argv
        assert "redacted" in proc.stdout, argv
    text = subprocess.run(runs[0], capture_output=True, text=True, timeout=120).stderr
    assert "masked 3 secret values" in text
    data = json.loads(subprocess.run(runs[1], capture_output=True, text=True, timeout=120).stdout)
    fields = {f["field"]: f["value"] for f in data["reads"][0]["launches"][0]["flags"]}
    assert fields["api_key"] == "<redacted>" and fields["tp_size"] == 2  # only the secret's value goes


def test_sglang_serve_is_said_when_the_version_has_none(sglang_source):
    """0.4.6.post5 has no sglang/cli/serve.py; 0.5.11 has (written for this test)."""
    old = flag_table(SourceTree.at(LocalHost(), sglang_source("0.4.6.post5")))
    found = read_launch_text("sglang serve --model-path m --tp 2", old)
    assert found.launches[0].explicit == {"model_path": "m", "tp_size": 2}
    assert any("has no `sglang serve`" in p.why for p in found.all_problems())
    new = flag_table(SourceTree.at(LocalHost(), sglang_source("0.5.11")))
    assert not read_launch_text("sglang serve --model-path m --tp 2", new).all_problems()


def test_a_benchmark_wrapper_and_docker_env(flags):
    """Written for this test: bench_one_batch takes ServerArgs plus its own flags (kept aside, not
    problems); docker's -e/--env are the server's environment."""
    found, launch = _one("python -m sglang.bench_one_batch --model-path m --tp 2 --batch-size 1 --input-len 256", flags)
    assert launch.launcher == "python -m sglang.bench_one_batch"
    assert launch.explicit == {"model_path": "m", "tp_size": 2}
    assert launch.ignored == ["--batch-size", "--input-len"] and not found.all_problems()
    _, launch = _one("docker run --gpus all -e NCCL_P2P_DISABLE=1 --env=SGLANG_X=2 lmsysorg/sglang:latest "
                     "python3 -m sglang.launch_server --model-path m", flags)
    assert launch.env == {"NCCL_P2P_DISABLE": "1", "SGLANG_X": "2"}
    assert launch.head[0] == "docker" and launch.command[-2:] == ["--model-path", "m"]


def test_a_rolebasedgroup_reads_each_role(flags):
    """Written for this test: a RoleBasedGroup with prefill and decode roles, args as a list."""
    text = """apiVersion: workloads.x-k8s.io/v1alpha1
kind: RoleBasedGroup
spec:
  roles:
    - name: prefill
      template:
        spec:
          containers:
            - name: sglang
              image: lmsysorg/sglang:latest
              command: ["python3", "-m", "sglang.launch_server"]
              args: ["--model-path", "/m", "--disaggregation-mode", "prefill", "--tp", "8"]
    - name: decode
      template:
        spec:
          containers:
            - name: sglang
              image: lmsysorg/sglang:latest
              command: ["python3", "-m", "sglang.launch_server"]
              args: ["--model-path", "/m", "--disaggregation-mode", "decode", "--tp", "4"]
"""
    found = read_launch_text(text, flags, where="rbg.yaml")
    assert [(r.explicit["disaggregation_mode"], r.explicit["tp_size"]) for r in found.launches] == \
        [("prefill", 8), ("decode", 4)]
    tp = next(f for f in found.launches[1].flags if f.field == "tp_size")
    assert tp.origin == "rbg.yaml: spec.roles[1].template.spec.containers[0].args[4], " \
                        "rbg.yaml: spec.roles[1].template.spec.containers[0].args[5]"


_PASTE_BITS = st.sampled_from(["python -m sglang.launch_server", " --tp ", "2", " \\\n", "\n", "'", '"', "$(", ")",
                               "${X}", "`", "#", "```", "_", "*", "--crash-", "exec ", '"$@"', "X=1 ", "- name: A\n",
                               "  value: '--port 1'\n", "command: [", "]", "sgl.Engine(", "tp_size=2", ",", "=", " "])


@given(parts=st.lists(_PASTE_BITS, max_size=40))
def test_any_paste_is_read_without_raising(flags, parts):
    text = "".join(parts)
    found = read_launch_text(text, flags)
    for launch in found.launches:
        assert all(f.origin for f in launch.flags)
    split_paste(text)


def test_a_config_file_is_named_as_evidence_not_in_the_text(flags):
    """Written for this test: `--config FILE` (0.5.11 ConfigArgumentMerger) hides flags in a file."""
    found, launch = _one("python -m sglang.launch_server --config /etc/sglang.yaml --tp 2", flags)
    assert launch.explicit == {"config": "/etc/sglang.yaml", "tp_size": 2}
    assert any(p.flag == "--config" and "not in the text" in p.why for p in found.all_problems())


# --------------------------------------------------------------------------- a whole issue, as pasted

PASTES = Path(__file__).resolve().parent / "data" / "paste"


def test_the_incident_paste_is_split_with_its_prompt_and_its_version():
    """tests/data/paste/incident-issue.md (written for the tests from the incident's facts)."""
    paste = split_paste((PASTES / "incident-issue.md").read_text())
    assert [(p.kind, p.where) for p in paste.pieces] == [
        ("launch", "lines 15-31"), ("decode", "lines 37-40"), ("nvidia_smi", "lines 48-73")]
    smi = paste.of("nvidia_smi")[0]
    assert smi.command == "nvidia-smi" and smi.prompt == 48 and smi.start == 49  # the prompt starts the output
    assert paste.not_understood == []
    # line 2 says 0.5.11 too, inside the HTML comment that labels the file: comments are not read
    assert [(s.version, s.line, s.form) for s in paste.versions] == [("0.5.11", 7, "text"), ("0.5.11", 45, "text")]


@pytest.mark.parametrize("prompt", ["$ nvidia-smi", "# nvidia-smi", "user@host:~$ nvidia-smi",
                                    "(venv) root@gpu-box:/workspace# nvidia-smi", "% nvidia-smi"])
def test_a_shell_prompt_introduces_the_output_below_it(prompt):
    """The incident paste's nvidia-smi table under each kind of prompt (the prompt lines written for this test)."""
    table = (PASTES / "incident-issue.md").read_text().split("\n")[48:73]
    paste = split_paste("```\n" + prompt + "\n" + "\n".join(table) + "\n```\n")
    assert [(p.kind, p.command, p.where) for p in paste.pieces] == [("nvidia_smi", "nvidia-smi", "lines 2-27")]
    assert paste.not_understood == []


def test_a_prompt_with_no_output_under_it_is_still_not_understood():
    paste = split_paste("```\n$ free -h\n              total        used\nMem:  503Gi  12Gi\n```\n")
    assert paste.pieces == [] and paste.not_understood[0][2] == "$ free -h"


# Each form a user writes the version in (lines written for this test; the check_env lines follow
# sglang 0.5.11's check_env.py:131-141, `f"{k}: {v}"` in the order of PACKAGE_LIST at :21).
VERSION_FORMS = [
    ("pip", "pip freeze says sglang==0.5.11", "0.5.11"),
    ("pip", 'pip install "sglang[all]==0.5.12.post1"', "0.5.12.post1"),
    ("text", "sglang 0.5.11 (pip), torch 2.9.1", "0.5.11"),
    ("text", "SGLang version: v0.5.11", "0.5.11"),
    ("text", "[Bug] v0.5.11 decode is slow with MTP", "0.5.11"),
    ("text", "after upgrading sglang from 0.5.9 to 0.5.11 decode got slower", "0.5.11"),
    ("docker image", "we run lmsysorg/sglang:v0.5.11-cu129 on both boxes", "0.5.11"),
    ("wheel", "Successfully installed sglang-0.5.11-py3-none-any.whl", "0.5.11"),
    ("pip show", "Name: sglang\nVersion: 0.5.11\nSummary: SGLang is a fast serving framework", "0.5.11"),
    ("check_env", "Python: 3.12.3 (main, Nov  6 2025, 13:44:16) [GCC 13.3.0]\nCUDA available: True\n"
                  "GPU 0,1: NVIDIA RTX A6000\nPyTorch: 2.9.1+cu129\nsglang: 0.5.11\nsglang-kernel: 0.3.21\n"
                  "flashinfer_python: 0.6.3", "0.5.11"),
]


@pytest.mark.parametrize("form, text, version", VERSION_FORMS, ids=[f"{f}:{t[:24]}" for f, t, _ in VERSION_FORMS])
def test_each_way_of_stating_the_version(form, text, version):
    found = stated_versions(text)
    assert [(s.form, s.version) for s in found] == [(form, version)]


@pytest.mark.parametrize("text", ["flashinfer v0.2.14", "flashinfer version v0.2.14", "sgl-kernel 0.3.16",
                                  "sglang-kernel: 0.3.21", "python -m sglang.check_env", "CUDA Version: 13.1",
                                  "| NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1 |",
                                  "<!-- e.g. sglang 0.4.0 -->"])
def test_what_is_not_an_sglang_version(text):
    assert stated_versions(strip_markdown(text)) == []


def test_statements_that_disagree_are_said_and_the_strongest_form_wins():
    chosen, conflict = choose_version(stated_versions("We moved to sglang 0.5.12 last week.\nsglang: 0.5.11\n"))
    assert (chosen.version, chosen.form, chosen.line) == ("0.5.11", "check_env", 2)
    assert "0.5.12 at line 1" in conflict and "check_env output ranks above the rest" in conflict
    chosen, conflict = choose_version(stated_versions("sglang 0.5.9 is fine\nsglang 0.5.11 is slow\n"))
    assert chosen.version == "0.5.9" and "pass --sglang VERSION to choose" in conflict
    assert choose_version(stated_versions("sglang 0.5.11\nsglang==0.5.11\n"))[1] is None


def test_html_comments_are_blanked_and_lines_kept():
    text = "a <!-- x --> b\n<!-- a template's\nsglang 0.4.0 -->after\n```\n<!-- in code -->\n```"
    out = strip_markdown(text).split("\n")
    assert out[:3] == ["a  b", "", "after"] and out[4] == "<!-- in code -->" and len(out) == 6


def test_sglangs_own_warning_about_its_entrypoint_is_not_a_launch():
    """sglang 0.5.11's log (the real CPU server) warns with a quoted launch and a usage line: neither is one."""
    from kit.server_args.paste import split_paste

    log = ("[2026-12-06 10:40:13] The current platform does not support Intel AMX, will fallback to torch_native.\n"
           "/opt/venv/lib/python3.11/site-packages/sglang/launch_server.py:54: UserWarning: 'python -m "
           "sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.\n"
           "  Example: sglang serve --model-path <model> [options]\n"
           "  warnings.warn(\n")
    assert split_paste(log).of("launch") == []
    launch = "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2\n"
    assert len(split_paste(log + launch).of("launch")) == 1
