"""``upgrade_diff`` / ``sgl-kit upgrade-diff``: the incident's launch under two real sglang releases.

The dry-run environments of 0.5.11 and 0.5.23 (about 1.2 and 1.3 GB, 1-2 minutes each on 2 cores)
are used when they are built here; CI (CI=true) builds them, like tests/test_dryrun_0523.py. Elsewhere
these tests are skipped with the command that builds them. The static fallback reads the real wheels
of sglang 0.4.6 and 0.4.8 (``pip download --no-deps``, once).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import kit.dryrun as dryrun
from kit.errors import DryRunError, EnvironmentMissing, KitError
from kit.upgrade import UpgradeDiff, upgrade_diff

pytestmark = [pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b"
FROM, TO = "0.5.11", "0.5.23"
ROW_KEYS = {"setting", "kind", "fields", "values", "sites", "lineage"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _incident_argv() -> list[str]:
    return json.loads((ROOT / "kit" / "data" / "resolved" / "incident-new-0.5.11.json").read_text())["argv"]


@pytest.fixture(scope="module")
def environments():
    for version in (FROM, TO):
        if not dryrun.environment(version).ready:
            if not _in_ci():
                pytest.skip(f"the sglang {version} dry-run environment is not built here; "
                            f"`sgl-kit dryrun setup --sglang {version}` builds it (1-2 minutes, about 1.3 GB); "
                            "CI always does")
            dryrun.setup(version)


@pytest.fixture(scope="module")
def incident(environments) -> UpgradeDiff:
    return upgrade_diff(_incident_argv(), [FROM, TO], model=MODEL, gpu="a6000", tp=2)


def _row(diff: UpgradeDiff, field: str, version: str = FROM):
    return next(r for r in diff.rows if r.fields[version] == field)


# --------------------------------------------------------------------------- the incident, 0.5.11 -> 0.5.23


@pytest.mark.slow
def test_the_prefill_graph_is_one_row_across_the_rename_with_each_sites(incident):
    assert incident.method == {FROM: "dry-run", TO: "dry-run"}
    row = _row(incident, "disable_piecewise_cuda_graph")
    assert row.fields == {FROM: "disable_piecewise_cuda_graph", TO: "cuda_graph_config.prefill.backend"}
    assert row.setting == "prefill (piecewise) CUDA graph" and "lineage.yaml" in row.lineage
    old, new = row.sites[FROM], row.sites[TO]
    assert (old.origin, old.where, old.function) == (
        "sglang", "srt/server_args.py:1230", "ServerArgs._handle_piecewise_cuda_graph")
    assert new.origin == "sglang" and new.where.startswith("srt/arg_groups/cuda_graph_hook.py:")
    assert new.function == "parse_cuda_graph_config"
    assert row.values[FROM] is True and row.states[FROM] == "off"
    # The dry-run answers sglang's probes in the argument code only; what 0.5.23 resolves here decides
    # whether the row is a rename alone (off in both) or a change too.
    assert row.kind == ("renamed" if row.values[TO] == "disabled" else "renamed-changed")
    text = incident.to_text()
    assert "prefill (piecewise) CUDA graph: off (disable_piecewise_cuda_graph=True) -> " in text
    assert "srt/server_args.py:1230 ServerArgs._handle_piecewise_cuda_graph" in text


@pytest.mark.slow
def test_the_renamed_mamba_flag_does_not_parse_in_0_5_23_and_is_retried_with_its_new_name(incident):
    [entry] = incident.unparsed
    assert (entry.version, entry.flag, entry.values) == (TO, "--mamba-scheduler-strategy", ["extra_buffer"])
    assert "unrecognized arguments: --mamba-scheduler-strategy extra_buffer" in entry.error  # sglang's own words
    assert entry.new_flag == "--mamba-radix-cache-strategy"
    assert entry.action == "resolved with --mamba-radix-cache-strategy extra_buffer instead"
    launch = incident.launches[TO]
    assert "--mamba-scheduler-strategy" not in launch
    assert launch[launch.index("--mamba-radix-cache-strategy") + 1] == "extra_buffer"
    row = _row(incident, "mamba_scheduler_strategy")  # the two fields, paired as one setting
    assert row.fields[TO] == "mamba_radix_cache_strategy" and row.kind == "renamed"
    assert row.sites[FROM].origin == row.sites[TO].origin == "asked"
    assert incident.refused and TO not in incident.errors
    assert "ASKED FLAGS THAT NO LONGER PARSE (1)" in incident.to_text()


@pytest.mark.slow
def test_fields_of_one_release_only_are_listed_apart_and_the_random_seed_is_hidden(incident):
    assert incident.hidden == ["random_seed"]
    everywhere = [r.fields[v] for r in incident.rows for v in r.fields] + [
        o.field for o in incident.added + incident.removed]
    assert "random_seed" not in everywhere
    added = {o.field: o for o in incident.added}
    assert added["uses_mamba_radix_cache"].versions == [TO]
    assert added["cuda_graph_config.decode.backend"].lineage.startswith("in sglang 0.5.11")
    assert any(o.lineage == "(no lineage known)" for o in incident.added)
    row_fields = {r.fields[TO] for r in incident.rows}
    assert not row_fields & set(added)


@pytest.mark.slow
def test_the_json_schema(incident):
    data = json.loads(json.dumps(incident.to_dict()))
    assert {"versions", "rows", "unparsed", "added", "removed", "method"} <= set(data)
    assert data["versions"] == [FROM, TO] and data["method"] == {FROM: "dry-run", TO: "dry-run"}
    for row in data["rows"]:
        assert set(row) == ROW_KEYS and row["kind"] in ("changed", "renamed", "renamed-changed")
        assert set(row["fields"]) == set(row["values"]) == set(row["sites"]) == {FROM, TO}
        for site in row["sites"].values():
            assert set(site) == {"origin", "where", "function", "text"}
    assert set(data["unparsed"][0]) >= {"version", "flag", "values", "error", "new_flag", "how", "action"}
    assert set(data["added"][0]) == {"field", "versions", "values", "lineage"}
    frame = incident.to_frame()
    assert list(frame.columns[:4]) == ["setting", "kind", FROM, TO] and len(frame) == len(incident.rows)
    assert "<table" in incident._repr_html_() and "no longer parse" in incident._repr_html_()


@pytest.mark.slow
def test_without_renaming_the_flag_is_left_out_and_the_model_may_be_a_dict(environments):
    config = json.loads((MODEL / "config.json").read_text())
    diff = upgrade_diff(_incident_argv(), f"{FROM}, {TO}", model=config, gpu="a6000", rename=False)
    [entry] = diff.unparsed
    assert entry.action == "resolved without it" and entry.new_flag == "--mamba-radix-cache-strategy"
    assert not any(t.startswith("--mamba") for t in diff.launches[TO])


@pytest.mark.slow
def test_the_command_line(environments, capsys, monkeypatch):
    import kit.cli
    from kit.cli import upgrade

    if upgrade not in kit.cli.GROUPS:
        monkeypatch.setattr(kit.cli, "GROUPS", (*kit.cli.GROUPS, upgrade))
    argv = ["upgrade-diff", "--from", FROM, "--to", TO, "--model", str(MODEL), "--gpu", "a6000", "--tp", "2"]
    assert kit.cli.main([*argv, "--json", "--", *_incident_argv()]) == 1  # 0.5.23 refuses the launch as given
    data = json.loads(capsys.readouterr().out)
    assert data["unparsed"][0]["new_flag"] == "--mamba-radix-cache-strategy"
    assert kit.cli.main([*argv, "--", *_incident_argv()]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"sglang {FROM} -> {TO}: ") and "CHANGED BY THE UPGRADE" in out


# --------------------------------------------------------------------------- without a dry-run


def _not_built() -> str:
    for version in ("0.5.13", "0.5.15", "0.5.17", "0.5.19", "0.5.21"):
        if not dryrun.environment(version).ready:
            return version
    pytest.skip("every candidate version has a dry-run environment here")


def test_a_version_without_an_environment_names_the_setup_command(capsys, monkeypatch):
    version = _not_built()
    diff = upgrade_diff(["--tp-size", "2"], [FROM, version], model=MODEL, gpu="a6000")
    assert version in [m["version"] for m in diff.missing]
    assert f"sgl-kit dryrun setup --sglang {version}" in diff.to_text()
    assert f"sgl-kit dryrun setup --sglang {version}" in diff._repr_html_()
    with pytest.raises(EnvironmentMissing) as raised:
        upgrade_diff(["--tp-size", "2"], [FROM, version], model=MODEL, gpu="a6000", missing="raise")
    assert f"sgl-kit dryrun setup --sglang {version}" in raised.value.hint
    import kit.cli
    from kit.cli import upgrade

    if upgrade not in kit.cli.GROUPS:
        monkeypatch.setattr(kit.cli, "GROUPS", (*kit.cli.GROUPS, upgrade))
    assert kit.cli.main(["upgrade-diff", "--from", FROM, "--to", version, "--", "--tp-size", "2"]) == 2
    err = capsys.readouterr().err
    assert f"sgl-kit dryrun setup --sglang {version}" in err and "--setup" in err


@pytest.mark.slow
def test_the_known_issues_the_upgrade_fixes_are_those_of_the_known_issues_command(incident):
    from kit.doctor import known_issues
    from kit.doctor.known_report import report

    fixed = {m.id: m.status for m in incident.known.fixes}
    # 0.5.11 resolved disable_piecewise_cuda_graph=True for the Qwen3.6 (Qwen3_5ForConditionalGeneration) model
    assert fixed.get("ki-qwen35-prefill-graph-off-as-multimodal") == "matches"
    alone = report(known_issues.evidence_for(FROM, "a6000", str(MODEL), count=2), upgrade_to=TO)
    assert {m.id for m in alone.fixes if m.status == "matches"} <= set(fixed)  # the launch narrows, never widens
    text = incident.to_text()
    assert "KNOWN ISSUES FIXED BY THE UPGRADE" in text and "ki-qwen35-prefill-graph-off-as-multimodal" in text
    data = json.loads(json.dumps(incident.to_dict()))
    assert "ki-qwen35-prefill-graph-off-as-multimodal" in {m["id"] for m in data["known"]["fixes"]}
    assert "Known issues fixed by the upgrade" in incident._repr_html_()


def test_the_static_fallback_reads_each_release_s_source_and_says_it_is_not_resolved():
    """0.4.6 -> 0.4.8, where users reported throughput regressions: before the dry-run's reach."""
    launch = ["--model-path", "/models/x", "--tp-size", "2", "--pp-size", "2", "--mem-fraction-static", "0.8"]
    diff = upgrade_diff(launch, ["0.4.6", "0.4.8"])
    assert diff.method == {"0.4.6": "static", "0.4.8": "static"}
    assert any("not resolved" in n and "no __post_init__ ran" in n for n in diff.notes)
    [entry] = diff.unparsed  # --pp-size is new in 0.4.8
    assert (entry.version, entry.flag, entry.action) == ("0.4.6", "--pp-size", "resolved without it")
    added = {o.field: o for o in diff.added}
    assert added["pp_size"].values == {"0.4.8": 2}
    assert [o.field for o in diff.removed] == ["n_share_experts_fusion"]
    assert diff.rows == []  # the two releases' flags and defaults agree: the change is in the code that runs
    text = diff.to_text()
    assert "read statically (not resolved)" in text and "no __post_init__ ran" in text
    assert diff.to_dict()["method"] == {"0.4.6": "static", "0.4.8": "static"}


def test_bad_arguments_are_refused_before_anything_runs():
    with pytest.raises(KitError, match="two versions or more"):
        upgrade_diff(["--tp-size", "2"], ["0.5.11"])
    with pytest.raises(KitError, match="not an sglang version"):
        upgrade_diff(["--tp-size", "2"], ["0.5.11", "latest"])
    with pytest.raises(DryRunError, match="given twice"):
        upgrade_diff(["--tp-size", "2"], ["0.5.11", "0.5.23"], tp=4)
    with pytest.raises(DryRunError, match="cannot reach sglang 0.4.6"):
        upgrade_diff(["--tp-size", "2"], ["0.4.6", "0.5.11"], method="dry-run")
