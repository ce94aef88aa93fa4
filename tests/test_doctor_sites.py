"""Every rule over every fixture of the repository: a site a finding cites is one whose guards are not
false for that launch, and a write it cites can have produced the value it explains.

The fixtures: each case of the real-incident corpus (data/incidents/, read as benchmarks/incident_hit_rate.py
reads it), and the incident's own files (the three launches of kit/data/resolved/incident-*-0.5.11.json,
each the server_args line sglang 0.5.11 printed in the dry-run, with its command and the model's
config.json; tests/data/provenance/incident-0.5.11.log; the real CPU server's excerpt
tests/data/real_server/qwen3_5-cpu-0.5.11.log). The incident's launches are also read against the
source of 0.5.23, as ``sgl-kit doctor --sglang 0.5.23`` reads a log of another release.

Each cited site is checked here against what the kit reads of the source, fresh for the launch
(kit.provenance.explain for the fields the finding speaks of, kit.provenance.Reacher for every line),
not against what the doctor kept.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest

from kit.doctor import RULES, diagnose, from_files
from kit.provenance import Reacher, explain

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT / "kit" / "data" / "resolved" / "models" / "qwen3.6-27b" / "config.json"
RESOLVED = sorted((ROOT / "kit" / "data" / "resolved").glob("incident-*-0.5.11.json"))

_SPEC = importlib.util.spec_from_file_location("incident_hit_rate", ROOT / "benchmarks" / "incident_hit_rate.py")
hits = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("incident_hit_rate", hits)
_SPEC.loader.exec_module(hits)


@pytest.fixture(scope="module")
def trees(sglang_trees):
    return sglang_trees


def _incident_launch(path: Path, tmp: Path) -> dict:
    """The files of one resolved launch: its server_args line as a log, its argv as a command."""
    data = json.loads(path.read_text())
    log = tmp / f"{path.stem}.log"
    log.write_text(f"[2026-05-01 10:00:00] {data['server_args_line']}\n")
    command = tmp / f"{path.stem}.cmd"
    command.write_text("python -m sglang.launch_server " + shlex.join(data["argv"]) + "\n")
    return {"log": str(log), "command": str(command), "model_config": str(QWEN), "gpu": data["gpu"]["key"]}


def _check(diagnosis, evidence) -> list[str]:
    """What is wrong with the sites the findings cite: a site whose guards are false for this launch,
    or a write of a literal other than the value the evidence shows."""
    tree = evidence.tree
    if tree is None:
        return []
    from kit.doctor.case import Case

    case = Case(evidence)  # for its probes (GPUs seen) only: every answer below is computed fresh
    reacher = Reacher(tree, evidence.args, evidence.model_config, command=evidence.explicit,
                      environ=evidence.environ, probes=case.probes)
    rules = {r.id: r for r in RULES}
    wrong = []
    for f in diagnosis.findings:
        fields = sorted(rules[f.id].covers(Case(evidence)))
        writes = {}
        for name in fields:
            exp = explain(tree, name, evidence.args, evidence.model_config, command=evidence.explicit,
                          environ=evidence.environ, probes=case.probes)
            writes.update({s.where.removeprefix("sglang/"): (name, s) for s in exp.sites})
        for where in f.sites:
            if where in writes:
                name, site = writes[where]
                reach = reacher.reach(where, site=site, shadowed={name.split(".")[0]})
                value = evidence.args.get(name) if "." not in name else None
                try:
                    literal = eval(site.value_text, {"__builtins__": {}})  # noqa: S307 - literals only
                except Exception:  # noqa: BLE001 - not a literal: any value
                    literal = value
                if value is not None and literal != value and name not in evidence.unknown:
                    wrong.append(f"{f.id}: {where} writes {name} = {site.value_text}, the launch has {value!r}")
            else:
                reach = reacher.reach(where, shadowed={n.split(".")[0] for n in fields})
            if reach.status == "not fired":
                wrong.append(f"{f.id}: {where} cited, but {reach.why_not()}")
    return wrong


@pytest.mark.parametrize("path", hits.cases(), ids=[p.name for p in hits.cases()])
def test_no_cited_site_is_false_for_a_corpus_case(path):
    import yaml

    data = yaml.safe_load((path / "case.yaml").read_text())
    files = list(dict.fromkeys(str(path / item["file"]) for item in data["evidence"]))
    evidence = from_files(paste=files, sglang=data.get("reader_version"))
    diagnosis = diagnose(evidence)
    assert not _check(diagnosis, evidence), diagnosis.to_text()


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
@pytest.mark.parametrize("path", RESOLVED, ids=[p.stem for p in RESOLVED])
def test_no_cited_site_is_false_for_the_incidents_launches(path, version, trees, tmp_path):
    evidence = from_files(tree=trees(version), **_incident_launch(path, tmp_path))
    diagnosis = diagnose(evidence)
    if "nospec" not in path.stem:  # the launches without speculative decoding may leave nothing to find
        assert diagnosis.findings, "the incident's launches have findings: this checks their sites"
    assert not _check(diagnosis, evidence), diagnosis.to_text()


@pytest.mark.parametrize("name", ["provenance/incident-0.5.11.log", "real_server/qwen3_5-cpu-0.5.11.log"])
def test_no_cited_site_is_false_for_the_incident_logs(name, trees):
    evidence = from_files(log=str(ROOT / "tests" / "data" / name), model_config=str(QWEN), tree=trees("0.5.11"))
    diagnosis = diagnose(evidence)
    assert not _check(diagnosis, evidence), diagnosis.to_text()


def test_a_deepseek_v4_default_is_not_the_cause_of_48_on_a_qwen_launch(trees, tmp_path):
    # sglang 0.5.23 writes max_running_requests = 256 in apply_deepseek_v4_defaults
    # (srt/arg_groups/deepseek_v4_hook.py:142), which model_hook.py calls only
    # `if model_arch in ["DeepseekV4ForCausalLM"]` (srt/arg_groups/model_hook.py:257-265).
    files = _incident_launch(ROOT / "kit" / "data" / "resolved" / "incident-old-0.5.11.json", tmp_path)
    d = diagnose(from_files(tree=trees("0.5.23"), **files))
    (f,) = [f for f in d.findings if f.id == "speculative-capped-running-requests"]
    assert not [s for s in f.sites if "deepseek_v4_hook" in s]
    assert "deepseek_v4_hook" not in " ".join(f.evidence)
    (dropped,) = [s for s in f.dropped if s.startswith("srt/arg_groups/deepseek_v4_hook.py:")]
    assert "model_arch in ['DeepseekV4ForCausalLM']" in dropped and "model_hook.py" in dropped
    assert "writes max_running_requests = 256" in dropped and "this launch has 48" in dropped
    assert "not the cause here: srt/arg_groups/deepseek_v4_hook.py:" in d.to_text(width=300)
    assert f.to_dict()["sites_dropped"] == f.dropped
