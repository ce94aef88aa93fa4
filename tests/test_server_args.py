"""kit.server_args against real sglang sources (0.5.10.post1, 0.5.11, 0.5.23) and constructed logs."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from _server_args_support import (
    INCIDENT_VALUES,
    NEW_ARGV,
    OLD_ARGV,
    default_values,
    incident_line,
    incident_values,
)

from kit.errors import ParseError
from kit.hosts import LocalHost
from kit.server_args import (
    FieldDefault,
    FlagTable,
    NonLiteral,
    ServerArgsSnapshot,
    classify,
    defaults,
    diff,
    flag_table,
    format_server_args,
    from_server_info,
    parse_command,
    parse_log,
    parse_log_all,
    parse_log_file,
    parse_log_file_all,
)
from kit.source import SourceTree

DATA = Path(__file__).parent / "data" / "server_args"


@pytest.fixture(scope="module")
def host():
    h = LocalHost()
    yield h
    h.close()


@pytest.fixture(scope="module")
def tree_0511(host, sglang_source):
    return SourceTree.at(host, sglang_source("0.5.11"))


@pytest.fixture(scope="module")
def tree_0510(host, sglang_source):
    return SourceTree.at(host, sglang_source("0.5.10.post1"))


@pytest.fixture(scope="module")
def tree_0523(host, sglang_source):
    return SourceTree.at(host, sglang_source("0.5.23"))


@pytest.fixture(scope="module")
def defaults_0511(tree_0511):
    return defaults(tree_0511)


@pytest.fixture(scope="module")
def flags_0511(tree_0511):
    return flag_table(tree_0511)


@pytest.fixture(scope="module")
def flags_0523(tree_0523):
    return flag_table(tree_0523)


@pytest.fixture(scope="module")
def line_0511(defaults_0511):
    return incident_line(defaults_0511)


class PatchedTree:
    """A source tree whose files can be edited in memory: proof that tables follow the source."""

    def __init__(self, tree, edits: dict[str, tuple[str, str]]):
        self.tree, self.edits, self.version = tree, edits, tree.version

    def read_text(self, path: str) -> str:
        text = self.tree.read_text(path)
        if path in self.edits:
            old, new = self.edits[path]
            assert old in text
            text = text.replace(old, new, 1)
        return text

    def files(self, pattern: str = "**/*.py") -> list[str]:
        return self.tree.files(pattern)


# ---------------------------------------------------------------------------
# Log lines


def test_generated_0511_line_has_every_field_in_dataclass_order(defaults_0511, line_0511):
    assert line_0511.startswith(
        "[2026-05-01 10:00:00] server_args=ServerArgs(model_path='/models/Qwen3.6-27B', "
    )
    assert 10_000 < len(line_0511) < 13_000
    snap = parse_log(line_0511)
    assert len(snap) == 368
    assert list(snap.fields) == list(defaults_0511)
    assert snap.fields == incident_values(defaults_0511)
    assert snap.fields["disable_piecewise_cuda_graph"] is True
    assert snap.fields["speculative_num_steps"] == 1
    assert (snap.form, snap.stage, snap.truncated, snap.raw) == ("ServerArgs", "resolved", False, {})
    assert (snap.line, snap.offset, snap.timestamp, snap.source) == (1, 22, "2026-05-01 10:00:00", "line 1")


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "[2026-05-01 10:00:00] ",
        "[2026-05-01 10:00:00.123 TP0] ",
        "[TP0] ",
        "INFO engine.py:188: ",
        "2026-05-01T10:00:00.123456789Z ",
        "May 01 10:00:00 gpu-box python[1234]: [2026-05-01 10:00:00] ",
        "2026-05-01T10:00:00.123456789Z stdout F [2026-05-01 10:00:00 DP0 TP1] ",
    ],
)
def test_any_prefix(prefix, defaults_0511):
    values = incident_values(defaults_0511)
    text = "some earlier line\n" + prefix + "server_args=" + format_server_args(values) + "\r\nlater line\n"
    snap = parse_log(text)
    assert snap.fields == values
    assert snap.line == 2
    assert snap.offset == len("some earlier line\n") + len(prefix)


def test_version_comes_from_the_log(line_0511):
    assert parse_log("sglang==0.5.11\n" + line_0511).version == "0.5.11"
    assert parse_log(line_0511 + "\nSGLang version: 0.5.11\n").version == "0.5.11"
    assert parse_log(line_0511).version is None


def test_non_literal_values_are_kept_structured():
    snap = parse_log_file(DATA / "nonliteral.log")
    lora = snap["lora_paths"][0]
    assert lora == NonLiteral(
        "LoRARef(lora_id='0a1b', lora_name='sql', lora_path='/loras/sql', pinned=False)"
    )
    assert (lora.call, dict(lora.kwargs)) == (
        "LoRARef",
        {"lora_id": "0a1b", "lora_name": "sql", "lora_path": "/loras/sql", "pinned": False},
    )
    assert snap["lora_target_modules"] == {"q_proj", "v_proj"}  # a set is a literal
    assert snap["custom_sigquit_handler"] == NonLiteral("<function handler at 0x7f3a2c1e5d30>")
    assert snap["custom_sigquit_handler"].call is None
    assert snap["attention_backend"].text == "<Backend.DISABLED: 'disabled'>"
    assert (snap["download_dir"].call, snap["download_dir"].args) == ("PosixPath", ("/data/hf",))
    assert snap["weird"].text == "<function ServerArgs.<lambda> at 0x7f00>"
    assert snap["quoted"] == "a, b) ] } ' \" <x>"
    assert snap["inf_value"] == float("inf")
    assert snap["tp_size"] == 2
    assert set(snap.raw) == {
        "lora_paths",
        "custom_sigquit_handler",
        "attention_backend",
        "download_dir",
        "cuda_graph_config",
        "weird",
        "inf_value",
    }
    assert snap.raw["download_dir"] == "PosixPath('/data/hf')"
    assert snap.process == "[TP0] INFO engine.py:"


def test_nested_objects_and_dotted_access():
    snap = parse_log_file(DATA / "nonliteral.log")
    cfg = snap["cuda_graph_config"]
    assert cfg.call == "CudaGraphConfig"
    assert cfg.kwargs["decode"].call == "PhaseConfig"
    assert snap.get("cuda_graph_config.prefill.backend") == "breakable"
    assert snap.get("cuda_graph_config.decode.bs") == [1, 2, 4]
    assert snap.get("cuda_graph_config.decode.bs.2") == 4
    assert snap.get("lora_paths.0.lora_name") == "sql"
    assert snap.get("cuda_graph_config.nope", "missing") == "missing"
    assert "cuda_graph_config.decode.max_bs" in snap and "cuda_graph_config.x" not in snap
    with pytest.raises(KeyError):
        snap["no_such_field"]


def test_incident_line_cut_mid_field_keeps_fields_before_the_cut():
    text = (DATA / "cut-mid-field.log").read_text()
    snap = parse_log(text)
    assert snap.truncated
    assert snap.fields == {
        "model_path": "/models/Qwen3.6-27B",
        "tp_size": 2,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 1,
        "disable_piecewise_cuda_graph": True,
    }
    assert text[snap.stopped_at :].lstrip().startswith("piecewise_cuda_graph_tokens=[4, 8, 16, 3")
    assert "TRUNCATED" in repr(snap)


def test_generated_line_cut_inside_a_field(line_0511, defaults_0511):
    cut = line_0511.index("disable_piecewise_cuda_graph=") + len("disable_piecewise_cuda_graph=Tr")
    snap = parse_log(line_0511[:cut])
    names = list(defaults_0511)
    assert list(snap.fields) == names[: names.index("disable_piecewise_cuda_graph")]
    assert snap.truncated and snap.stopped_at == line_0511.index("disable_piecewise_cuda_graph=")


def test_interleaved_output_counts_as_a_cut():
    text = "[2026-05-01 10:00:00] server_args=ServerArgs(a=1, b=[2, [2026-05-01 10:00:01 TP1] Load weight begin.\n"
    snap = parse_log(text)
    assert (snap.fields, snap.truncated) == ({"a": 1}, True)


def test_sglang_0_2_line_with_fields_of_its_day():
    snap = parse_log_file(DATA / "sglang-0.2.x-docker.log")
    assert snap["additional_ports"] == [30001, 30002, 30003, 30004]
    assert snap["chunked_prefill_size"] == -1
    assert (snap.version, snap.stage, len(snap)) == ("0.2.9", "resolved", 47)
    assert snap.timestamp == "2024-08-01T09:00:00.123456789Z"


def test_0523_dict_lines_raw_then_resolved(tree_0523):
    snaps = parse_log_file_all(DATA / "sglang-0.5.23-journald.log")
    assert [(s.form, s.stage, s.line) for s in snaps] == [
        ("dict", "raw", 2),
        ("dict", "resolved", 5),
        ("dict", "resolved", 8),
    ]
    assert {s.version for s in snaps} == {"0.5.23"}
    raw, resolved, serve = snaps
    assert raw.process == resolved.process == "gpu-box python3[4242]:" != serve.process
    assert (raw["speculative_algorithm"], resolved["speculative_algorithm"]) == ("NEXTN", "EAGLE")
    assert raw["cuda_graph_config"] is None
    assert resolved.get("cuda_graph_config.prefill.backend") == "disabled"
    assert set(resolved.fields) <= set(defaults(tree_0523))  # the fixture uses real 0.5.23 field names
    picked = parse_log_file(DATA / "sglang-0.5.23-journald.log")
    assert picked is not None and picked.line == 8 and picked["speculative_num_steps"] == 1


def test_dict_lines_of_two_processes_are_both_resolved():
    line = "May 01 10:00:00 box python3[{}]: [2026-05-01 10:00:00] server_args={{'tp_size': {}}}"
    snaps = parse_log_all("\n".join([line.format(1, 1), line.format(2, 2)]))
    assert [s.stage for s in snaps] == ["resolved", "resolved"]
    assert parse_log("\n".join([line.format(1, 1), line.format(1, 2)]))["tp_size"] == 2


def test_serverargs_repr_of_a_new_version_is_raw_input():
    snaps = parse_log_all("sglang==0.5.23\nserver_args=ServerArgs(tp_size=2)\n")
    assert snaps[0].stage == "raw"
    assert parse_log("sglang==0.5.18\nserver_args=ServerArgs(tp_size=2)").stage == "resolved"


def test_parse_log_returns_last_resolved(line_0511):
    first = line_0511.replace("speculative_num_steps=1,", "speculative_num_steps=3,")
    assert parse_log(first + "\n" + line_0511)["speculative_num_steps"] == 1
    assert [s["speculative_num_steps"] for s in parse_log_all(first + "\n" + line_0511)] == [3, 1]


def test_file_streaming_matches_text(tmp_path, line_0511):
    noise = "".join(
        f"[2026-05-01 10:00:{i % 60:02d}] Decode batch. #running-req: 1, gen throughput (token/s): 37.{i}\n"
        for i in range(5000)
    )
    text = noise + line_0511 + "\n" + noise
    path = tmp_path / "server.log"
    path.write_text(text, encoding="utf-8")
    from_text = parse_log(text)
    from_path = parse_log_file(path)
    from_binary = parse_log_file(io.BytesIO(text.encode()))
    from_textio = parse_log_file(io.StringIO(text))
    for snap in (from_path, from_binary, from_textio):
        assert snap.fields == from_text.fields
        assert (snap.line, snap.offset) == (from_text.line, from_text.offset) == (5001, len(noise) + 22)
    assert from_path.source == f"{path}:5001"


def test_line_longer_than_the_limit_is_cut_and_the_next_line_still_parses(line_0511):
    text = line_0511 + "\n" + "[2026-05-01 10:00:01] server_args=ServerArgs(tp_size=4)\n"
    snaps = parse_log_file_all(io.BytesIO(text.encode()), max_line_chars=2000)
    assert snaps[0].truncated and 10 < len(snaps[0]) < 100
    assert (snaps[1].fields, snaps[1].line) == ({"tp_size": 4}, 2)


def test_bytes_that_are_not_utf8():
    snap = parse_log(b"\xff\xfe garbage\nserver_args=ServerArgs(model_path='/m\xc3\xa9', x=1)\n")
    assert snap.fields == {"model_path": "/m\u00e9", "x": 1}


def test_no_server_args_line_is_a_parse_error_at_the_end():
    text = "hello\nworld\n"
    with pytest.raises(ParseError) as err:
        parse_log(text)
    assert err.value.position == len(text)
    assert "no `server_args=" in str(err.value) and "2 lines read" in str(err.value)


def test_garbled_first_field_is_a_parse_error_where_it_stopped():
    text = "x\nserver_args=ServerArgs(1 + 2, tp_size=2)"
    with pytest.raises(ParseError) as err:
        parse_log(text)
    assert err.value.position == text.index("1 + 2")


# ---------------------------------------------------------------------------
# /server_info


def _server_info_0511(values: dict) -> dict:
    # entrypoints/http_server.py server_info(): asdict(server_args) | scheduler_info | internal_states | version
    args = json.loads(json.dumps(values))
    states = []
    for rank in range(2):
        state = dict(args, chunked_prefill_size=-1, enable_torch_compile=False)
        state.update(
            last_gen_throughput=37.5 + rank,
            memory_usage={"weight": 26.9, "kvcache": 14.1, "token_capacity": 191_488, "graph": 0.82},
            effective_max_running_requests_per_dp=48,
            avg_spec_accept_length=1.71,
        )
        states.append(state)
    states[1]["disable_radix_cache"] = True
    info = dict(args, enable_torch_compile=True)
    info.update(status="ready", max_total_num_tokens=191_488, max_req_input_len=262_138)
    return {**info, "internal_states": states, "version": "0.5.11"}


def test_server_info_prefers_internal_states_and_reports_changes(defaults_0511):
    data = _server_info_0511(incident_values(defaults_0511))
    for given in (data, json.dumps(data), json.dumps(data).encode()):
        snap = from_server_info(given)
        assert (snap.form, snap.stage, snap.version, snap.source) == (
            "dict",
            "resolved",
            "0.5.11",
            "server_info",
        )
        assert len(snap) == 368
        assert snap["chunked_prefill_size"] == -1 and snap["enable_torch_compile"] is False
        assert snap["disable_radix_cache"] is False  # rank 0 is the effective view
        assert sorted(snap.internal_differences) == [
            (0, "chunked_prefill_size", 8192, -1),
            (0, "enable_torch_compile", True, False),
            (1, "chunked_prefill_size", 8192, -1),
            (1, "disable_radix_cache", False, True),
            (1, "enable_torch_compile", True, False),
        ]
        assert snap.extras["max_total_num_tokens"] == 191_488 and snap.extras["status"] == "ready"
        assert snap.extras["internal_states"][1]["last_gen_throughput"] == 38.5
        assert "status" not in snap.fields and "last_gen_throughput" not in snap.fields


def test_server_info_that_is_not_json():
    with pytest.raises(ParseError) as err:
        from_server_info('{"tp_size": 2,')
    assert err.value.position == 14
    with pytest.raises(ParseError):
        from_server_info("[1, 2]")


# ---------------------------------------------------------------------------
# Defaults


def test_defaults_0511_counts_and_values(defaults_0511, tree_0511):
    kinds = [fd.kind for fd in defaults_0511.values()]
    assert len(defaults_0511) == 368
    assert (
        kinds.count("literal"),
        kinds.count("expression"),
        kinds.count("factory"),
        kinds.count("required"),
    ) == (363, 2, 2, 1)
    d = defaults_0511
    assert d["model_path"].kind == "required" and not d["model_path"].known
    assert (d["speculative_ngram_capacity"].value, d["speculative_ngram_capacity"].text) == (
        10_000_000,
        "10 * 1000 * 1000",
    )
    assert d["encoder_transfer_backend"].value == "zmq_to_scheduler"  # ENCODER_TRANSFER_BACKEND_CHOICES[0]
    assert (d["encoder_urls"].kind, d["encoder_urls"].value) == ("literal", [])  # default_factory=list
    assert (
        d["uvicorn_access_log_exclude_prefixes"].kind,
        d["uvicorn_access_log_exclude_prefixes"].value,
    ) == ("factory", [])
    assert d["pre_warm_nccl"].kind == "factory" and not d["pre_warm_nccl"].known  # lambda: is_hip()
    assert (d["disable_piecewise_cuda_graph"].value, d["tp_size"].value) == (False, 1)
    path, line = d["disable_piecewise_cuda_graph"].source.split(":")
    assert (
        tree_0511.read_text(path).splitlines()[int(line) - 1].strip()
        == "disable_piecewise_cuda_graph: bool = False"
    )


def test_defaults_0523_come_from_arg_group_namespaces(tree_0523):
    d = defaults(tree_0523)
    kinds = [fd.kind for fd in d.values()]
    assert len(d) == 546
    assert (kinds.count("literal"), kinds.count("expression"), kinds.count("required")) == (543, 2, 1)
    assert all(fd.source.startswith("srt/arg_groups/fields/") for fd in d.values())
    order_src = ast.parse(tree_0523.read_text("srt/arg_groups/field_order.py"))
    order = next(ast.literal_eval(n.value) for n in order_src.body if isinstance(n, ast.Assign))
    known = [n for n in order if n in d]
    assert list(d)[: len(known)] == known and known[:2] == ["model_path", "tokenizer_path"]
    assert "disable_piecewise_cuda_graph" not in d and d["disable_prefill_cuda_graph"].value is False
    assert d["http2_initial_connection_window_size"].value == 1024 * 1024
    assert d["cuda_graph_config"].annotation.startswith("A[")


def test_defaults_differ_between_0510_and_0511(tree_0510, defaults_0511):
    old = defaults(tree_0510)
    assert len(old) == 349
    assert "tokenizer_backend" in defaults_0511 and "tokenizer_backend" not in old
    assert "enable_double_sparsity" in old and "enable_double_sparsity" not in defaults_0511


# ---------------------------------------------------------------------------
# Flag tables


def test_flag_table_0511(flags_0511):
    assert isinstance(flags_0511, FlagTable) and flags_0511.version == "0.5.11"
    tp, opt, _ = flags_0511.match("--tp")
    assert (opt, tp.dest, tp.field) == ("--tp-size", "tensor_parallel_size", "tp_size")
    assert tp.option_strings == ("--tensor-parallel-size", "--tp-size") and tp.type == "int"
    assert flags_0511.match("--model")[0].field == "model_path" and flags_0511["--model-path"].required
    assert flags_0511.match("--ep")[0].field == "ep_size"
    assert flags_0511["--tokenizer-path"].default == "ServerArgs.tokenizer_path"
    assert flags_0511["--context-length"].type == "human_readable_int"
    assert "safetensors" in flags_0511["--load-format"].choices
    stream = flags_0511["--stream-output"]  # DeprecatedStoreTrueAction, dest= given explicitly
    assert (stream.field, stream.kind, stream.const, stream.nargs) == (
        "incremental_streaming_output",
        "store_const",
        True,
        0,
    )
    assert flags_0511["--fp8-gemm-backend"].field == "fp8_gemm_runner_backend"
    lora = flags_0511["--lora-paths"]
    assert (lora.kind, lora.nargs, lora.action) == ("store", "*", "LoRAPathAction")
    ignored = [f for f in flags_0511 if f.kind == "ignore"]
    assert len(ignored) == 4 and all(f.action == "DeprecatedAction" for f in ignored)
    booleans = [f for f in flags_0511 if f.kind == "boolean_optional"]
    assert len(booleans) == 3
    assert all(
        f"--no-{o[2:]}" in f.option_strings
        for f in booleans
        for o in f.option_strings
        if not o.startswith("--no-")
    )
    assert (
        "--enforce-piecewise-cuda-graph" in flags_0511
        and flags_0511["disable_piecewise_cuda_graph"].kind == "store_true"
    )


def test_flag_table_follows_the_source(tree_0511):
    edit = {
        "srt/server_args.py": (
            '"--tensor-parallel-size",\n            "--tp-size",',
            '"--tensor-parallel-size",\n            "--tpx",',
        )
    }
    patched = flag_table(PatchedTree(tree_0511, edit))
    assert patched.match("--tpx")[0].field == "tp_size"
    assert patched.match("--tp-size") is None
    assert patched.match("--tp")[1] == "--tpx"


def test_flag_tables_differ_between_versions(tree_0510, flags_0511, flags_0523):
    flags_0510 = flag_table(tree_0510)
    assert (len(flags_0510), len(flags_0511), len(flags_0523)) == (354, 374, 531)
    assert "--enable-double-sparsity" in flags_0510 and "--enable-double-sparsity" not in flags_0511
    assert "--tokenizer-backend" in flags_0511 and "--tokenizer-backend" not in flags_0510
    assert (
        "--disable-piecewise-cuda-graph" in flags_0511 and "--disable-piecewise-cuda-graph" not in flags_0523
    )
    prefill = flags_0523["--cuda-graph-backend-prefill"]
    assert prefill.choices == ("full", "breakable", "disabled")  # Backend.ALL, read from its class
    assert prefill.source.startswith("srt/arg_groups/fields/exec_.py:")
    tp = flags_0523.match("--tp")[0]
    assert (tp.dest, tp.field, tp.option_strings) == (
        "tp_size",
        "tp_size",
        ("--tp-size", "--tensor-parallel-size"),
    )
    mono = flags_0523["--monokernel-backend"]  # DeprecatedStoreConstAction(nargs=None, const_value=True)
    assert (mono.field, mono.kind, mono.const, mono.arity) == (
        "enable_amd_monokernel",
        "store_const",
        True,
        (1, 1),
    )
    assert "--no-enable-tf32-matmul" in flags_0523["--enable-tf32-matmul"].option_strings


def test_every_flag_lands_in_a_field(defaults_0511, flags_0511, tree_0523, flags_0523):
    for flags, fields in ((flags_0511, defaults_0511), (flags_0523, defaults(tree_0523))):
        assert {f.field for f in flags if f.kind != "ignore"} - set(fields) == {"config"}


def test_ambiguous_abbreviation(flags_0511):
    with pytest.raises(ParseError, match="ambiguous option --speculative"):
        flags_0511.match("--speculative")


# ---------------------------------------------------------------------------
# Launch commands

EXPECTED_OLD = {
    "model_path": "/models/Qwen3.6-27B",
    "tp_size": 2,
    "trust_remote_code": True,
    "host": "0.0.0.0",
    "port": 30000,
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "mem_fraction_static": 0.85,
}


@pytest.mark.parametrize(
    "launcher",
    [
        ["python", "-m", "sglang.launch_server"],
        ["/usr/bin/python3", "-u", "-m", "sglang.launch_server"],
        ["sglang", "serve", "--model-type", "llm"],
        ["/root/ml-env/bin/python3", "/root/ml-env/bin/sglang", "serve", "--model-type=llm"],
        ["CUDA_VISIBLE_DEVICES=0,1", "python3", "-m", "sglang.launch_server"],
        [],
    ],
)
def test_launch_command_forms(launcher, flags_0511):
    assert parse_command(launcher + OLD_ARGV[3:], flags_0511) == EXPECTED_OLD


def test_launch_command_as_one_string(flags_0511):
    import shlex

    assert parse_command(shlex.join(OLD_ARGV), flags_0511) == EXPECTED_OLD


def test_values_are_typed_like_argparse(flags_0511):
    argv = [
        "--model",
        "m",
        "--context-length",
        "32k",
        "--chunked-prefill-size",
        "-1",
        "--tp=2",
        "--lora-paths",
        "a",
        "b=/x",
        "--enable-lora",
        "--stream-output",
        "--json-model-override-args",
        "{}",
        "--hybrid-kvcache-ratio",
        "--tokenizer-path",
        "None",
    ]
    got = parse_command(argv, flags_0511)
    assert got == {
        "model_path": "m",
        "context_length": 32_000,
        "chunked_prefill_size": -1,
        "tp_size": 2,
        "lora_paths": ["a", "b=/x"],
        "enable_lora": True,
        "incremental_streaming_output": True,
        "json_model_override_args": "{}",
        "tokenizer_path": "None",
    }
    boolean = next(f for f in flags_0511 if f.kind == "boolean_optional")
    no = next(o for o in boolean.option_strings if o.startswith("--no-"))
    assert parse_command([no], flags_0511) == {boolean.field: False}


def test_config_file_merged_like_sglang(flags_0511):
    argv = ["python", "-m", "sglang.launch_server", "--config", "launch.yaml", "--speculative-num-steps", "1"]
    got = parse_command(argv, flags_0511, cwd=str(DATA))
    assert got == {
        "model_path": "/models/Qwen3.6-27B",
        "tp_size": 2,
        "trust_remote_code": True,
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 1,
        "speculative_num_draft_tokens": 4,
        "cuda_graph_bs": [1, 2, 4, 8],
        "mem_fraction_static": 0.8,
    }
    assert "disable_radix_cache" not in got  # store_true with false: left out, as sglang does


def test_config_file_read_through_a_reader_or_the_tree_host(flags_0511):
    seen = []

    def reader(path):
        seen.append(path)
        return "tp-size: 4\n"

    assert parse_command(["--config", "/etc/sgl/x.yml"], flags_0511, read_text=reader) == {"tp_size": 4}
    assert seen == ["/etc/sgl/x.yml"]
    assert (
        parse_command(["--config", str(DATA / "launch.yaml")], flags_0511)["tp_size"] == 2
    )  # LocalHost of the tree
    with pytest.raises(ParseError, match="cannot read config file"):
        parse_command(["--config", str(DATA / "missing.yaml")], flags_0511)


@pytest.mark.parametrize(
    ("argv", "position"),
    [
        (["--model", "m", "--no-such-flag", "1"], 2),
        (["--model", "m", "stray"], 2),
        (["--config", "a.json"], 0),
        (["--config", "a.yaml", "--config", "b.yaml"], 2),
        (["--tp-size", "two"], 0),
        (["--trust-remote-code=yes"], 0),
        (["--model"], 0),
    ],
)
def test_bad_commands_say_where(argv, position, flags_0511):
    with pytest.raises(ParseError) as err:
        parse_command(argv, flags_0511, read_text=lambda p: "a: 1\n")
    assert err.value.position == position


def test_unsupported_config_action_and_lenient_mode(flags_0511):
    boolean = next(f for f in flags_0511 if f.kind == "boolean_optional")
    with pytest.raises(ParseError, match="config merger refuses"):
        parse_command(["--config", "c.yaml"], flags_0511, read_text=lambda p: f"{boolean.field}: true\n")
    assert parse_command(["--model", "m", "--no-such-flag", "--tp", "2"], flags_0511, strict=False) == {
        "model_path": "m",
        "tp_size": 2,
    }
    with pytest.raises(ParseError) as err:
        parse_command(["/usr/bin/python3", "train.py", "--tp", "2"], flags_0511)
    assert err.value.position == 0


# ---------------------------------------------------------------------------
# Classify and diff


def test_classify_finds_the_incidents_auto_disable(line_0511, flags_0511, defaults_0511):
    table = classify(parse_log(line_0511), parse_command(NEW_ARGV, flags_0511), defaults_0511)
    assert list(table.columns) == ["flag", "default", "default_from", "cli", "effective", "origin"]
    assert len(table) == 368
    rows = table.set_index("flag")
    piecewise = rows.loc["disable_piecewise_cuda_graph"]
    assert (piecewise["default"], piecewise["effective"], piecewise["origin"]) == (
        False,
        True,
        "auto-changed",
    )
    assert pd.isna(piecewise["cli"])
    assert rows.loc["speculative_algorithm", "origin"] == "explicit-overridden"  # NEXTN -> EAGLE
    assert rows.loc["speculative_num_steps", ["cli", "effective", "origin"]].tolist() == [1, 1, "explicit"]
    assert rows.loc["tp_size", "origin"] == "explicit"
    assert rows.loc["enforce_piecewise_cuda_graph", "origin"] == "default"
    assert rows.loc["pre_warm_nccl", "origin"] == "default"  # is_hip(): unknown from source
    changed = set(rows.index[rows.origin == "auto-changed"])
    assert changed == set(INCIDENT_VALUES) - set(parse_command(NEW_ARGV, flags_0511)) - {
        "speculative_algorithm"
    }


def test_classify_with_server_info(defaults_0511, flags_0511):
    snap = from_server_info(_server_info_0511(incident_values(defaults_0511)))
    rows = classify(snap, parse_command(NEW_ARGV, flags_0511), defaults_0511).set_index("flag")
    assert rows.loc["chunked_prefill_size", ["cli", "effective", "origin"]].tolist() == [
        8192,
        -1,
        "explicit-overridden",
    ]
    assert rows.loc["enable_torch_compile", "origin"] == "default"


def test_classify_accepts_plain_dicts():
    table = classify({"a": 1, "b": 5}, {"c": 3}, {"a": 1, "b": 2})
    assert table.values.tolist()[0] == ["a", 1, "", pd.NA, 1, "default"]  # plain defaults: whose is not known
    assert table.origin.tolist() == ["default", "auto-changed", "explicit"]


def test_diff_old_and_new_deployment(flags_0511):
    table = diff(parse_command(OLD_ARGV, flags_0511), parse_command(NEW_ARGV, flags_0511))
    assert list(table.columns) == ["flag", "a", "b"]
    rows = table.set_index("flag")
    assert rows.loc["speculative_num_steps"].tolist() == [3, 1]
    assert rows.loc["speculative_num_draft_tokens"].tolist() == [4, 2]
    assert "tp_size" not in rows.index  # `--tp 2` and `--tp-size 2` are the same field
    assert pd.isna(rows.loc["chunked_prefill_size", "a"]) and rows.loc["chunked_prefill_size", "b"] == 8192


def test_diff_compares_nested_values_leaf_by_leaf():
    a = parse_log_file(DATA / "nonliteral.log")
    b = parse_log(
        "server_args={'tp_size': 2, 'cuda_graph_config': {'decode': {'backend': 'full', 'max_bs': 64, 'bs': [1, 2, 4]}, "
        "'prefill': {'backend': 'breakable', 'max_bs': None, 'bs': None}}}"
    )
    rows = diff(a, b).set_index("flag")
    assert rows.loc["cuda_graph_config.decode.max_bs"].tolist() == [48, 64]
    assert "cuda_graph_config.prefill.backend" not in rows.index and "tp_size" not in rows.index
    assert pd.isna(rows.loc["model_path", "b"])


# ---------------------------------------------------------------------------
# Display


def test_reprs_are_short_and_nothing_prints(capsys, line_0511, flags_0511, defaults_0511):
    snap = parse_log(line_0511)
    objects = [
        snap,
        flags_0511,
        flags_0511["--tp-size"],
        defaults_0511,
        defaults_0511["tp_size"],
        NonLiteral("x" * 500),
    ]
    for obj in objects:
        assert len(repr(obj)) < 160, repr(obj)
    assert repr(snap) == "<ServerArgsSnapshot ServerArgs resolved version unknown: 368 fields from line 1>"
    assert repr(flags_0511) == "<FlagTable sglang 0.5.11: 374 flags, 387 option strings>"
    assert repr(defaults_0511) == (
        "<FieldDefaults sglang 0.5.11: 368 fields (363 literal, 2 expression, 2 factory, 1 required)>"
    )
    assert "<table" in defaults_0511._repr_html_() and defaults_0511.to_frame().shape == (368, 5)
    assert "<code>" in flags_0511["--tp-size"]._repr_html_() and "<code>" in NonLiteral("<f>")._repr_html_()
    assert (
        repr(flags_0511["--tp-size"])
        == "<FlagSpec --tensor-parallel-size/--tp-size -> tensor_parallel_size -> tp_size (store int)>"
    )
    assert "<table" in snap._repr_html_() and "disable_piecewise_cuda_graph" in snap._repr_html_()
    assert "<table" in flags_0511._repr_html_() and "<code>" in defaults_0511["tp_size"]._repr_html_()
    assert isinstance(snap.to_frame(), pd.DataFrame) and snap.to_frame().shape == (368, 3)
    assert capsys.readouterr() == ("", "")


def test_default_values_helper_uses_defaults(defaults_0511):
    values = default_values(defaults_0511)
    assert values["tp_size"] == 1 and values["pre_warm_nccl"] is False and values["model_path"] is None
    assert isinstance(defaults_0511["tp_size"], FieldDefault)
    assert isinstance(parse_log("server_args={'a': 1}"), ServerArgsSnapshot)


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    lora_target_modules: set
    cuda_graph_bs: list
    extra: dict
    ratio: float
    pair: tuple


def test_format_server_args_matches_dataclass_repr():
    obj = ServerArgs("/m", {"q_proj"}, [1, 2], {"a": (1,)}, float("inf"), (1,))
    assert format_server_args(dataclasses.asdict(obj)) == repr(obj)
    assert re.fullmatch(r"\{'a': 1\}", format_server_args({"a": 1}, "dict"))
