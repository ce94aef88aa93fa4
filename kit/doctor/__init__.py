"""Rules over the evidence: the throughput a server leaves on the table, with evidence and the fix.

    import kit.doctor
    d = kit.doctor.doctor("lab", baseline="old.cmd")        # a live target
    d = kit.doctor.doctor(log="server.log", nvidia_smi="smi.txt", topo="topo.txt",
                          model_config="config.json")       # files a colleague sent
    d.findings[0].fix, d.roofline.ceiling_tok_s, d.to_dict()

- ``evidence.py``: gathering (a live server, or files); ``case.py``: the questions rules ask;
- ``rulebase.py``: what a rule is; ``rules.py``, ``rules_hw.py``: the rules, each a small declarative object;
- ``roofline.py``: the single-stream decode ceiling from config.json and the GPUs' bandwidth;
- ``result.py``: Finding and Diagnosis (text, HTML, JSON).
"""

from __future__ import annotations

from collections.abc import Callable

from kit.errors import KitError

from . import rules, rules_hw  # noqa: F401  (they register their rules)
from .case import Case
from .evidence import Evidence, from_files, from_server
from .result import Change, Diagnosis, Finding
from .roofline import ModelSize, Roofline, model_size, roofline
from .rulebase import RULES, Rule, version_in

__all__ = ["Case", "Change", "Diagnosis", "Evidence", "Finding", "ModelSize", "RULES", "Roofline", "Rule",
           "diagnose", "doctor", "from_files", "from_server", "model_size", "roofline", "roofline_of"]


def doctor(target: str | None = None, *, host=None, pid: int | None = None, port: int | None = None,
           baseline: str | None = None, bench: str | None = None,
           progress: Callable[[str], None] | None = None, **files) -> Diagnosis:
    """Diagnose a live target (``lab``, ``local``, an SSH target; ``host`` reuses a connection already
    open to it), or the files given as keywords (log, server_info, command, nvidia_smi, topo,
    model_config, sglang, package_dir, gpu, environ)."""
    if target is None:
        return diagnose(from_files(baseline=baseline, bench=bench, progress=progress, **files))
    from kit.target import connect

    if host is not None:
        return _doctor_on(host, target, pid, port, baseline, bench, progress)
    with connect(target) as opened:
        return _doctor_on(opened, target, pid, port, baseline, bench, progress)


def _doctor_on(host, target, pid, port, baseline, bench, progress) -> Diagnosis:
    from kit.lab import find_target_server

    server = find_target_server(host, target, pid=pid, port=port)
    evidence = from_server(host, server, baseline=baseline, bench=bench, progress=progress)
    evidence.target = target if target == host.name else f"{target} (pid {server.pid} on {host.name})"
    return diagnose(evidence)


def diagnose(evidence: Evidence, only: list[Rule] | None = None, *, context_tokens: int = 1024) -> Diagnosis:
    """Run every rule (or ``only`` these) over the evidence; findings ordered by estimated impact."""

    case = Case(evidence)
    case.roofline = _roofline(case, context_tokens)
    findings, skipped, checked = [], [], []
    problems = list(evidence.problems)
    if evidence.version is None:
        problems.append("the sglang version is not known: every rule ran, version ranges unchecked "
                        "(give --sglang VERSION)")
    ordered = sorted(only or RULES, key=lambda r: r.id == "differs-from-baseline")  # the baseline rule last
    for r in ordered:
        if evidence.version is not None and not version_in(evidence.version, r.versions):
            skipped.append((r.id, f"written for sglang {r.versions}; this server runs {evidence.version}"))
            continue
        try:
            lines = r.when(case)
            checked.append(r.id)
            if not lines:
                continue
            impact, reason = r.impact(case)
            changes, advice, avoid = r.fix(case)
            sites = r.sites(case)
        except KitError as err:
            problems.append(f"rule {r.id} could not finish: {err.message}")
            continue
        findings.append(Finding(r.id, r.title, impact, reason, lines, sites, changes, advice, avoid, r.versions))
        case.covered |= _fields_of(case, changes) | {_name(line) for line in lines[:1]}
        case.found.append(r.id)
    return Diagnosis(evidence.target, evidence.version, findings, evidence.hardware, case.roofline, problems,
                     skipped, checked, dict(evidence.sources), evidence.command)


def roofline_of(evidence: Evidence, context_tokens: int = 1024) -> Roofline:
    """The decode roofline for this evidence: its model, GPUs, tp and (when measured) accept length."""
    return _roofline(Case(evidence), context_tokens)


def _roofline(case: Case, context_tokens: int):
    ev = case.ev
    profile = case.gpu_profile()
    gpu = profile if profile is not None else getattr(ev.hardware, "gpu_name", None)
    accept, _ = case.accept_length
    measured, _ = case.measured_tok_s
    return roofline(ev.model_config, gpu, tp=case.tp, accept_length=accept if case.speculative and accept
                    else 1.0, context_tokens=context_tokens, measured_tok_s=measured)


def _fields_of(case: Case, changes: list[Change]) -> set[str]:
    flags = case.flags
    out = set()
    for c in changes:
        spec = next((s for s in flags if s.name == c.option), None) if flags is not None and c.option else None
        if spec is not None:
            out.add(spec.field)
    return out


def _name(line: str) -> str:
    return line.split(" ", 1)[0].split("=", 1)[0].strip()
