"""The incident, resolved by the real sglang 0.5.11 code in the dry-run environment.

The environment (about 1.3 GB) is built once per machine under the kit cache, where CI
keeps it between runs; a cold build takes about two minutes here. The only test double
is the GPU: sglang's hardware probes answer like two RTX A6000s (SM86, 49140 MiB).

All launches of the incident go to one dry-run process (sglang's import costs ~10 s;
each launch then runs in a fresh fork), so this module stays well under a minute once
the environment exists.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import kit.dryrun as dryrun
from kit.cli import build_parser, main
from kit.server_args import format_server_args, parse_log

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parent.parent
RESOLVED = ROOT / "kit" / "data" / "resolved"
SNAPSHOTS = {name: RESOLVED / f"incident-{name}-0.5.11.json" for name in ("new", "old", "fixed")}
PIECEWISE = "disable_piecewise_cuda_graph"
SERVER_ARGS = "sglang/srt/server_args.py"


def _recorded_command(name: str):
    """The `sgl-kit dryrun ...` command a committed snapshot says made it, parsed by the real CLI."""
    made_by = json.loads(SNAPSHOTS[name].read_text())["made_by"]
    argv = shlex.split(made_by)
    assert argv[:2] == ["sgl-kit", "dryrun"], made_by
    cut = argv.index("--")
    args = build_parser().parse_args(argv[1:cut])
    args.cmd = argv[cut + 1 :]
    return args


@pytest.fixture(scope="module", autouse=True)
def _own_workers(tmp_path_factory):
    """Dry-runs go to a warm worker by default: this module's live in its own run directory, stopped after."""
    from kit.dryrun._worker import RUN_DIR_ENV

    patch = pytest.MonkeyPatch()
    patch.setenv(RUN_DIR_ENV, str(tmp_path_factory.mktemp("dryrun-run")))
    yield
    dryrun.stop_workers()
    patch.undo()


@pytest.fixture(scope="module")
def incident(env_0511) -> dict[str, dryrun.DryRunResult]:
    commands = {name: _recorded_command(name) for name in SNAPSHOTS}
    first = commands["new"]
    assert all((c.sglang, c.model, c.gpu, c.tp) == (first.sglang, first.model, first.gpu, first.tp)
               for c in commands.values())
    base = _drop_option_values(commands["new"].cmd, ("--speculative-num-steps", "--speculative-eagle-topk",
                                                     "--speculative-num-draft-tokens"))
    launches = {
        **{name: c.cmd for name, c in commands.items()},
        # No step count given: sglang 0.5.11 picks its own.
        "default-steps": base,
        # Without extra_buffer, 0.5.11 refuses mamba's no_buffer strategy with speculative decoding.
        "no-extra-buffer": _drop_option_values(base, ("--mamba-scheduler-strategy",)),
        # check_server_args, which the server runs before it logs its args, refuses this one.
        "page-size-check": [*base, "--page-size", "16", "--chunked-prefill-size", "100"],
    }
    results = dryrun.dry_run_many(list(launches.values()), model=ROOT / first.model, gpu=first.gpu,
                                  tp=first.tp, sglang=first.sglang)
    return dict(zip(launches, results, strict=True))


def _drop_option_values(tokens: list[str], options: tuple[str, ...]) -> list[str]:
    out, skip = [], False
    for tok in tokens:
        if skip:
            skip = False
        elif tok in options:
            skip = True
        else:
            out.append(tok)
    return out


def _source_line(env: dryrun.DryRunEnv, line: int) -> str:
    return (env.sglang_dir / "srt" / "server_args.py").read_text().splitlines()[line - 1].strip()


# --------------------------------------------------------------------------- the incident's launches


@pytest.mark.parametrize("name", ["new", "old"])
def test_piecewise_cuda_graph_is_turned_off_silently_by_the_multimodal_rule(incident, env_0511, name):
    (change,) = incident[name].changes_to(PIECEWISE)
    assert (change.before, change.after) == (False, True)
    assert (change.function, change.file, change.line) == (
        "ServerArgs._handle_piecewise_cuda_graph", SERVER_ARGS, 1230)
    assert change.silent and not change.explicit and change.messages == []
    # Line 1230 of the installed 0.5.11 source is rule 8's assignment, guarded by is_multimodal.
    assert _source_line(env_0511, 1230) == "self.disable_piecewise_cuda_graph = True"
    assert _source_line(env_0511, 1229) == "if self.get_model_config().is_multimodal:"
    assert incident[name].final[PIECEWISE] is True


def test_enforce_keeps_piecewise_cuda_graph_on(incident, env_0511):
    fixed = incident["fixed"]
    assert fixed.changes_to(PIECEWISE) == []
    (write,) = fixed.writes_to(PIECEWISE)  # the enforce branch stores False and returns early
    assert (write.line, write.before, write.after, write.changed) == (1197, False, False, False)
    assert _source_line(env_0511, 1196) == "if self.enforce_piecewise_cuda_graph:"
    assert fixed.final[PIECEWISE] is False and fixed.ok


def test_the_speculative_step_counts_given_are_kept(incident):
    for name, (steps, drafts) in {"new": (1, 2), "old": (3, 4), "fixed": (3, 4)}.items():
        result = incident[name]
        assert (result.final["speculative_num_steps"], result.final["speculative_num_draft_tokens"]) == (
            steps, drafts), name
        assert result.changes_to("speculative_num_steps") == [], name
        assert "speculative_num_steps" in result.explicit


def test_without_step_counts_sglang_0_5_11_picks_3_steps_topk_1_and_4_draft_tokens(incident):
    result = incident["default-steps"]
    picked = {c.field: c for c in result.changes if c.field.startswith("speculative_")}
    assert {f: picked[f].after for f in ("speculative_num_steps", "speculative_eagle_topk",
                                          "speculative_num_draft_tokens")} == {
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    assert {picked[f].function for f in ("speculative_num_steps", "speculative_num_draft_tokens")} == {
        "ServerArgs._handle_speculative_decoding"}
    # max_running_requests is changed in the same call, and that one is logged.
    (running,) = result.changes_to("max_running_requests")
    assert running.after == 48 and not running.silent
    assert "Max running requests is reset to 48" in running.messages[0].message


def test_without_extra_buffer_sglang_refuses_to_start_and_that_is_reported(incident):
    result = incident["no-extra-buffer"]
    assert not result.ok and result.server_args_line is None
    error = result.error
    assert (error.kind, error.type) == ("startup", "ValueError")
    assert "no_buffer" in error.message and "radix cache" in error.message
    assert error.function == "ServerArgs._handle_mamba_radix_cache" and error.file == SERVER_ARGS
    assert "sglang would refuse to start" in result.to_text()
    # The changes made before the error are still there, the culprit among them.
    (strategy,) = result.changes_to("mamba_scheduler_strategy")
    assert (strategy.before, strategy.after) == ("auto", "no_buffer")


def test_check_server_args_runs_too_and_its_refusal_is_a_startup_error(incident):
    error = incident["page-size-check"].error
    assert (error.kind, error.type, error.function) == ("startup", "AssertionError", "ServerArgs.check_server_args")
    assert error.message == "chunked_prefill_size must be divisible by page_size"


# --------------------------------------------------------------------------- the server_args line


@pytest.mark.parametrize("name", ["new", "old", "fixed"])
def test_server_args_line_round_trips_through_the_log_parser(incident, name):
    result = incident[name]
    line = result.server_args_line
    assert line.startswith("server_args=ServerArgs(model_path='/root/models/Qwen3.6-27B', ")
    snap = parse_log("[2026-04-30 21:14:03] " + line)
    assert not snap.truncated and snap.form == "ServerArgs"
    assert "server_args=" + format_server_args(snap.fields) == line
    assert list(snap.fields) == list(result.final)
    exact = {k: v for k, v in result.final.items() if k not in snap.raw and not isinstance(v, str | type(None))}
    assert {k: snap.fields[k] for k in exact} == exact
    assert result.snapshot.fields == snap.fields


def test_results_render_as_a_table(incident):
    frame = incident["new"].to_frame()
    assert list(frame.columns[:5]) == ["field", "before", "after", "function", "where"]
    row = frame[frame.field == PIECEWISE].iloc[0]
    cells = (row["before"], row["after"], row["where"], bool(row["silent"]))
    assert cells == ("False", "True", "srt/server_args.py:1230", True)
    html = incident["new"]._repr_html_()
    assert "<table" in html and PIECEWISE in html
    assert repr(incident["new"]).startswith("<DryRunResult sglang 0.5.11 dry-run on 2x NVIDIA RTX A6000")


# --------------------------------------------------------------------------- lab snapshots


@pytest.mark.parametrize("name", ["new", "old", "fixed"])
def test_committed_lab_snapshots_are_what_their_command_makes(incident, name):
    saved = json.loads(SNAPSHOTS[name].read_text())
    fresh = incident[name].to_dict()
    assert saved["server_args_line"] == fresh["server_args_line"]
    keys = ("field", "before_text", "after_text", "function", "file", "line", "silent")
    assert [[c[k] for k in keys] for c in saved["changes"]] == [[c[k] for k in keys] for c in fresh["changes"]]
    assert saved["sglang"] == "0.5.11" and saved["gpu"]["key"] == "a6000" and saved["tp"] == 2


# --------------------------------------------------------------------------- the CLI and `why --dryrun`


def test_cli_prints_the_line_and_the_changes(env_0511, capsys):
    args = _recorded_command("new")
    code = main(["dryrun", "--sglang", args.sglang, "--model", str(ROOT / args.model), "--gpu", args.gpu,
                 "--tp", str(args.tp), "--", *args.cmd])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("sglang 0.5.11 dry-run on 2x NVIDIA RTX A6000 (SM86, 49140 MiB)")
    assert lines[1] == json.loads(SNAPSHOTS["new"].read_text())["server_args_line"]
    (row,) = [line for line in lines if line.startswith(PIECEWISE + " ")]
    assert row.split() == [PIECEWISE, "False", "True", "srt/server_args.py:1230",
                           "ServerArgs._handle_piecewise_cuda_graph", "SILENT"]


def test_why_dryrun_and_the_static_reading_name_the_same_sites(env_0511, incident, capsys):
    args = _recorded_command("new")
    code = main(["why", PIECEWISE, "--dryrun", "--sglang", args.sglang, "--model", str(ROOT / args.model),
                 "--gpu", args.gpu, "--tp", str(args.tp), "--json", "--", *args.cmd])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["agree"] is True
    both = [c for c in data["checks"] if c["agree"] is not None]
    assert both and all(c["agree"] for c in both)
    (fired,) = [c for c in data["checks"] if c["static"] == "fired"]
    assert fired["where"] == "srt/server_args.py:1230" and fired["ran"]
    assert data["explanation"]["fired"] == ["sglang/srt/server_args.py:1230"]
    assert [w["where"] for w in data["dry_run"]["writes"]] == ["srt/server_args.py:1230"]
    # With --enforce-piecewise-cuda-graph both name the early-return branch instead.
    fixed = dryrun.why_with_dryrun(PIECEWISE, _recorded_command("fixed").cmd, model=ROOT / args.model,
                                   result=incident["fixed"])
    assert fixed.agree
    assert [c.where for c in fixed.checks if c.static == "fired"] == ["srt/server_args.py:1197"]
    assert [c.where for c in fixed.checks if c.ran] == ["srt/server_args.py:1197"]
