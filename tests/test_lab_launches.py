"""Flags to effective args: sglang's flag table, the dry-run's snapshots, and the errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit._argv import option_value as _flag_value
from kit.cli.args import route_target as route_args_target
from kit.errors import LabArgsError
from kit.lab.control import _rewrite, _with_defaults
from kit.lab.launches import LocalSource, load_launches
from kit.lab.launches import effective_args_for as resolve

MODEL = "/srv/lab/models/Qwen3.6-27B"


@pytest.fixture(scope="module")
def tree(sglang_source):
    return LocalSource(sglang_source("0.5.11"), "0.5.11")


@pytest.fixture(autouse=True)
def no_dryrun(monkeypatch):
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")


def _variant_flags(variant: str) -> list[str]:
    launch = {x.variant: x for x in load_launches("0.5.11")}[variant]
    return _rewrite(launch.flags(), MODEL, "127.0.0.1", 31999)


def test_the_committed_snapshots_are_the_incidents_launches():
    launches = {x.variant: x for x in load_launches("0.5.11")}
    assert list(launches) == ["new", "old", "fixed", "nospec", "nospec_fixed"]
    got = {v: (x.fields["speculative_num_steps"], x.fields["speculative_num_draft_tokens"],
               x.fields["disable_piecewise_cuda_graph"]) for v, x in launches.items()}
    assert got == {"new": (1, 2, True), "old": (3, 4, True), "fixed": (3, 4, False),
                   "nospec": (None, None, True), "nospec_fixed": (None, None, False)}
    assert launches["nospec"].fields["speculative_algorithm"] is None
    assert "--enforce-piecewise-cuda-graph" in launches["nospec_fixed"].flags()
    assert "--enforce-piecewise-cuda-graph" in launches["fixed"].flags()
    assert "--device" not in launches["new"].flags()  # the dry-run's own flag, not the launch's


@pytest.mark.parametrize("variant", ["new", "old", "fixed"])
def test_variant_flags_resolve_to_the_snapshot_with_this_servers_path_and_port(tree, variant):
    res = resolve(_variant_flags(variant), tree)
    assert (res.method, res.variant) == ("snapshot", variant)
    assert res.fields["model_path"] == MODEL and res.fields["tokenizer_path"] == MODEL
    assert res.fields["port"] == 31999 and res.fields["host"] == "127.0.0.1"
    assert res.fields["disable_piecewise_cuda_graph"] is (variant != "fixed")
    assert res.explicit["tp_size"] == 2


def test_free_flags_and_restated_defaults_keep_the_match(tree):
    flags = _variant_flags("new") + ["--enable-metrics", "--decode-log-interval", "5", "--schedule-policy", "fcfs"]
    res = resolve(flags, tree)
    assert res.variant == "new" and res.fields["enable_metrics"] is True and res.fields["decode_log_interval"] == 5


def test_an_unknown_flag_fails_the_way_sglang_fails(tree, capsys):
    with pytest.raises(SystemExit) as exc:
        resolve(_variant_flags("new") + ["--no-such-flag"], tree)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "launch_server.py: error: unrecognized arguments: --no-such-flag"
    assert err.startswith("usage: launch_server.py")


def test_a_bad_choice_fails_the_way_sglang_fails(tree, capsys):
    with pytest.raises(SystemExit):
        resolve(_variant_flags("new") + ["--mamba-scheduler-strategy", "sideways"], tree)
    assert "argument --mamba-scheduler-strategy: invalid choice: 'sideways'" in capsys.readouterr().err


def test_an_unsupported_combination_names_the_supported_ones_and_the_dry_run(tree):
    flags = _variant_flags("new")
    flags[flags.index("--speculative-num-steps") + 1] = "2"
    with pytest.raises(LabArgsError) as err:
        resolve(flags, tree)
    text = err.value.message
    assert all(f"  {v}: " in text for v in ("new", "old", "fixed"))
    assert "differs from yours in: speculative_num_steps" in text
    assert "--model-path" not in text and "--port" not in text  # free flags are not part of a launch
    assert "sgl-kit dryrun setup --sglang 0.5.11" in err.value.hint


def test_requiring_the_dry_run_without_its_environment_is_a_clear_error(tree, monkeypatch, tmp_path):
    from kit import dryrun

    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "empty-cache"))  # where no dry-run environment exists
    assert not dryrun.environment("0.5.11").ready
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "1")
    with pytest.raises(LabArgsError) as err:
        resolve(_variant_flags("new"), tree)
    assert "dryrun setup" in err.value.hint


# -- the command lines the lab builds (lists, never a shell string) ---------------------------------

_token = st.one_of(st.sampled_from(["--model", "--model-path", "--host", "--port", "--port=1", "--tp", "2", "--"]),
                   st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12))


@settings(max_examples=200, deadline=None)
@given(st.lists(_token, max_size=12), st.integers(1, 65535))
def test_rewrite_gives_this_labs_model_host_and_port_and_keeps_the_rest(tokens, port):
    flags = _with_defaults(_rewrite(tokens, MODEL, "127.0.0.1", port), MODEL, "127.0.0.1", port)
    assert _flag_value(flags, "--port") == str(port) and _flag_value(flags, "--host") == "127.0.0.1"
    assert (_flag_value(flags, "--model-path") or _flag_value(flags, "--model")) == MODEL
    kept, i = [], 0
    while i < len(tokens):  # every token but these options and the value each takes
        head = tokens[i].split("=", 1)[0]
        if head in ("--model-path", "--model", "--host", "--port"):
            i += 1 if "=" in tokens[i] else 2
            continue
        kept.append(tokens[i])
        i += 1
    rest = iter(flags)
    assert all(any(t == f for f in rest) for t in kept)  # kept, in order
    ours = {"--model-path": MODEL, "--model": MODEL, "--host": "127.0.0.1", "--port": str(port)}
    for i, tok in enumerate(flags[:-1]):  # every occurrence carries this lab's value, none other
        if tok in ours and (i == 0 or flags[i - 1] not in ours):
            assert flags[i + 1] == ours[tok]


@settings(max_examples=200, deadline=None)
@given(st.lists(_token, max_size=6))
def test_routing_args_target_is_idempotent_and_touches_only_args(tokens):
    once = route_args_target(tokens)
    assert route_args_target(once) == once
    if "args" not in tokens:
        assert once == tokens


def test_routing_args_target_examples():
    assert route_args_target(["args", "lab"]) == ["args", "show", "lab"]
    assert route_args_target(["--json", "args", "lab"]) == ["--json", "args", "show", "lab"]
    assert route_args_target(["--python", "args", "args", "x"]) == ["--python", "args", "args", "show", "x"]
    assert route_args_target(["args", "parse", "f.log"]) == ["args", "parse", "f.log"]
    assert route_args_target(["grep", "lab", "args"]) == ["grep", "lab", "args"]
