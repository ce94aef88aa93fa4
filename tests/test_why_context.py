"""What `why` and `args` know besides the log: argparse defaults, the launch command, the caller's
guards and the server's environment. Real sglang sources; the incident's launch as the dry-run
resolved it (kit/data/resolved/incident-new-0.5.11.json)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kit.errors import UnknownFlag
from kit.hosts import LocalHost
from kit.provenance import explain
from kit.server_args import classify, cli_defaults, defaults, flag_table, parse_command, parse_log
from kit.source import SourceTree

ROOT = Path(__file__).resolve().parent.parent
NEW = json.loads((ROOT / "kit/data/resolved/incident-new-0.5.11.json").read_text())
CONFIG = ROOT / "kit/data/resolved/models/qwen3.6-27b/config.json"
# The flags a person typed for the incident's new launch (after `--` in the dry-run's command).
COMMAND = ["python", "-m", "sglang.launch_server", *shlex.split(NEW["made_by"].split(" -- ", 1)[1]), "--tp-size", "2"]


@pytest.fixture(scope="module")
def tree(sglang_source):
    return SourceTree.at(LocalHost(), sglang_source("0.5.11"))


@pytest.fixture(scope="module")
def snapshot():
    return parse_log(NEW["server_args_line"])


# --------------------------------------------------------------------------- argparse defaults


@pytest.mark.parametrize(("version", "disagree"), [
    ("0.5.10.post1", {"model_path", "kt_method", "kt_threadpool_count", "pre_warm_nccl"}),
    ("0.5.11", {"model_path", "kt_method", "kt_threadpool_count", "pre_warm_nccl"}),
    ("0.5.23", set()),
])
def test_fields_whose_argparse_default_is_not_the_dataclass_default(sglang_source, version, disagree):
    tree = SourceTree.at(LocalHost(), sglang_source(version))
    dataclass, cli = defaults(tree), cli_defaults(tree)
    assert set(dataclass) == set(cli)
    found = {n for n in dataclass if cli[n].origin == "argparse"
             and (dataclass[n].known != cli[n].known or (cli[n].known and dataclass[n].value != cli[n].value))}
    assert found == disagree


def test_kt_method_starts_from_its_argparse_default(tree):
    cli = cli_defaults(tree)
    assert (cli["kt_method"].value, cli["kt_method"].origin) == ("AMXINT4", "argparse")
    assert cli["kt_method"].source == "srt/server_args.py:5894"
    assert defaults(tree)["kt_method"].value is None
    assert (cli["kt_threadpool_count"].value, cli["pre_warm_nccl"].value) == (2, False)


def test_classify_labels_argparse_defaults_as_defaults(tree, snapshot):
    frame = classify(snapshot, parse_command(COMMAND, flag_table(tree)), cli_defaults(tree)).set_index("flag")
    assert tuple(frame.loc["kt_method", ["origin", "default_from"]]) == ("default", "argparse")
    assert tuple(frame.loc["kt_threadpool_count", ["origin", "default_from"]]) == ("default", "argparse")
    # ...and what SGLang did change is still named: the incident's silent switch.
    assert frame.loc["disable_piecewise_cuda_graph", "origin"] == "auto-changed"
    assert frame.loc["speculative_num_steps", "origin"] == "explicit"
    auto = set(frame.index[frame["origin"] == "auto-changed"])
    assert "kt_method" not in auto and "kt_threadpool_count" not in auto


# --------------------------------------------------------------------------- the launch command


def _site(explanation, line):
    (site,) = [s for s in explanation.sites if s.line == line]
    return site


def test_the_launch_command_decides_a_guard_on_the_explained_flag(tree, snapshot):
    without = explain(tree, "tokenizer_path", snapshot, CONFIG)
    assert _site(without, 1062).status == "unknown"
    assert "is the flag being explained" in _site(without, 1062).status_reason
    known = explain(tree, "tokenizer_path", snapshot, CONFIG, command=COMMAND, environ={})
    site = _site(known, 1062)
    assert site.status == "fired"
    assert "tokenizer_path is None at launch (not on the launch command: its argparse default, " \
           "srt/server_args.py:4197)" in site.evidence


def test_a_flag_given_on_the_command_is_its_value_at_launch(tree, snapshot):
    given = explain(tree, "tokenizer_path", snapshot, CONFIG, command=[*COMMAND, "--tokenizer-path", "/tok"],
                    environ={})
    site = _site(given, 1062)
    assert site.status == "not fired"
    assert "tokenizer_path is '/tok' at launch (set by a flag on the launch command)" in site.status_reason


# --------------------------------------------------------------------------- the caller's guard


def test_a_write_in_a_method_called_under_an_environment_guard(tree, snapshot):
    """_handle_modelscope_paths runs only `if envs.SGLANG_USE_MODELSCOPE.get():` (0.5.11 :1075)."""
    unknown_env = _site(explain(tree, "tokenizer_path", snapshot, CONFIG, command=COMMAND), 1145)
    assert unknown_env.status == "unknown"
    assert "SGLANG_USE_MODELSCOPE: reads the server's environment, which is not known here" in \
        unknown_env.status_reason
    caller = [g for g in unknown_env.guards if g.kind == "caller"]
    assert [(g.where, g.text) for g in caller][-1] == (
        "ServerArgs._handle_missing_default_values:1076", "envs.SGLANG_USE_MODELSCOPE.get()")

    unset = _site(explain(tree, "tokenizer_path", snapshot, CONFIG, command=COMMAND, environ={}), 1145)
    assert unset.status == "not fired"
    assert "SGLANG_USE_MODELSCOPE is not set in the given environment: its default False applies " \
           "(sglang/srt/environ.py:163)" in unset.status_reason

    on = explain(tree, "tokenizer_path", snapshot, CONFIG, command=COMMAND, environ={"SGLANG_USE_MODELSCOPE": "1"})
    guard = [g for g in _site(on, 1145).guards if g.kind == "caller"][-1]
    assert guard.passes is True
    assert "SGLANG_USE_MODELSCOPE='1' in the given environment, read as True (sglang/srt/environ.py:163)" \
        in guard.notes


def test_an_invalid_boolean_falls_back_to_the_default_as_sglang_does(tree, snapshot):
    site = _site(explain(tree, "tokenizer_path", snapshot, CONFIG, command=COMMAND,
                         environ={"SGLANG_USE_MODELSCOPE": "maybe"}), 1145)
    assert site.status == "not fired"


# --------------------------------------------------------------------------- names


def test_a_misspelled_flag_is_an_error_that_suggests_the_name(tree, snapshot):
    with pytest.raises(UnknownFlag) as err:
        explain(tree, "disable_piecewise_cuda_grpah", snapshot)
    assert err.value.message == "no field disable_piecewise_cuda_grpah in sglang 0.5.11"
    assert err.value.hint == "did you mean disable_piecewise_cuda_graph?"


def test_a_field_nothing_assigns_says_where_its_value_comes_from(tree, snapshot):
    result = explain(tree, "kt_method", snapshot, CONFIG, command=COMMAND)
    assert result.sites == []
    assert result.origin == ("nothing in this tree changes kt_method after launch: it keeps its argparse default "
                             "'AMXINT4' (srt/server_args.py:5894) unless a flag sets it")


def test_the_cli_exits_2_for_a_misspelled_flag(tree, tmp_path):
    log = tmp_path / "server.log"
    log.write_text(NEW["server_args_line"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "why", "disable_piecewise_cuda_grpah", "local",
                           "--package-dir", tree.root, "--log", str(log)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("sgl-kit: error: no field disable_piecewise_cuda_grpah in sglang 0.5.11\n"
                           "  -> did you mean disable_piecewise_cuda_graph?\n")
