"""Findings that contradict each other, settled before they are printed.

Two kinds, both read from the release's own source:

- **moot**: finding A changes a flag (``remove --disable-overlap-schedule``) whose field sglang writes
  anyway for this launch (``self.disable_overlap_schedule = True`` under mamba ``no_buffer``). A write
  of the field, in the argument resolution, that does not read the field itself and runs for the launch
  with A's change applied (its guards hold, read statically; where they cannot be decided, sglang's own
  resolution on CPU, kit.dryrun, decides when it can run) makes A's change moot. If another finding B
  changes what that write tests (its change makes the write's guards fail), B wins: A leaves the
  ranked findings, and its change joins B's fix, where it takes effect. Else A's change is dropped.
- **conflict**: two findings set the same field to different values: the higher-ranked one wins.

The loser is kept as a note (``Diagnosis.set_aside``) that says why, with the ``file:line``.
A write whose guards cannot be decided either way leaves both findings ranked, each told that the
other may make it moot and what decides it.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass

from kit._text import short_path
from kit.errors import KitError

from .case import Case
from .fixcheck import _without_model
from .result import Finding

__all__ = ["reconcile"]

_RESOLUTION = ("server_args", "arg_groups")
_ARGS = ("self", "server_args", "cfg", "args", "view")


@dataclass
class _Forced:
    field: str
    value_text: str
    where: str  # "srt/server_args.py:2433"
    condition: str
    how: str  # "read statically" or "sglang's own resolution (dry-run)"
    decided: bool


def reconcile(findings: list[Finding], case: Case) -> tuple[list[Finding], list[str]]:
    """(the findings to rank, notes on those set aside). ``findings`` are in rank order."""
    kept = list(findings)
    notes: list[str] = []
    for a in list(kept):
        if a not in kept:
            continue
        for field, change, target in _changed_fields(case, a):
            found = _forced(case, a, field, target)
            if not found:
                continue
            # the write another finding's fix undoes, if any (of several undecided ones, that one is named)
            pairs = [(forced, next((b for b in kept if b is not a and _undoes(case, b, a, forced)), None))
                     for forced in found]
            forced, winner = next((p for p in pairs if p[1] is not None), pairs[0])
            why = (f"{forced.condition} forces {field} = {forced.value_text} ({forced.where}, "
                   f"{forced.how})")
            if not forced.decided:
                a.evidence.append(f"may be moot: {why}, undecided here; "
                                  + (f"the fix of {winner.id} would make it certain not to" if winner else
                                     "a dry-run of the launch with this change decides it"))
                continue
            kept.remove(a)
            if winner is not None:
                winner.evidence.append(f"it makes '{a.title}' ({a.id}) moot: {why}; with this fix, {change} takes "
                                       "effect, so it is part of this fix")
                winner.changes.extend(c for c in a.changes if c not in winner.changes)
                notes.append(f"{a.id} ({a.title}): moot: {why}; the fix of {winner.id} changes what that line "
                             f"tests, and {change} is kept in its fix")
            else:
                notes.append(f"{a.id} ({a.title}): moot: {why}; {change} would change nothing, so it is not in "
                             "the launch with every fix")
            break
    notes += _conflicts(case, kept)
    notes += _shared_with_baseline(case, kept)
    return kept, notes


# --------------------------------------------------------------------------- what a fix changes


def _changed_fields(case: Case, finding: Finding):
    """(field, change, value after it) for each flag change of the finding; a removed flag goes back to
    this release's default."""
    flags = case.flags or []
    for c in finding.changes:
        spec = next((s for s in flags if s.name == c.option), None) if c.option else None
        if spec is None:
            continue
        if c.remove:
            default = case.cli_defaults.get(spec.field)
            if default is None or not default.known:
                continue
            yield spec.field, c, default.value
        else:
            yield spec.field, c, True if c.value is None else c.value


def _setting(case: Case, *findings: Finding) -> dict:
    out = {}
    for f in findings:
        for field, _, value in _changed_fields(case, f):
            out[field] = value
    return out


# --------------------------------------------------------------------------- moot


def _forced(case: Case, a: Finding, field: str, target) -> list[_Forced]:
    """Writes of ``field`` in the resolution that run for the launch with ``a``'s change applied and
    write another value than ``target``, whatever the flag says (they do not read ``field``): the one
    that does (decided), or those that may (undecided), or none."""
    exp = case.explain(field)
    if exp is None or case.ev.tree is None:
        return []
    from kit.provenance.startup import write_status

    values = {**case.ev.args, **_setting(case, a)}
    undecided = []
    for site in exp.sites:
        if site.status == "not fired" or not any(r in site.file for r in _RESOLUTION):
            continue
        value = _literal(site.value_text)
        if value is _NO or value == target or any(_reads(g.text, field) for g in site.guards):
            continue
        where = short_path(site.where)
        status, reason = write_status(case.ev.tree, where, values, case.ev.model_config)
        if status == "fired":
            return [_Forced(field, site.value_text, where, _condition(site), "read statically", True)]
        if status == "unknown":
            undecided.append((site, where, value, reason))
    if not undecided:
        return []
    ran = _dry_run(case, a, field)
    if ran is not None:  # sglang's own resolution decides: the write that set the value, if one of these
        final, line = ran
        for site, where, value, _ in undecided:
            if value == final and line is not None and where.endswith(f":{line}"):
                return [_Forced(field, site.value_text, where, _condition(site),
                                f"sglang {case.ev.version}'s own resolution of the launch with this change "
                                f"writes {final!r} there (dry-run)", True)]
        return []
    return [_Forced(field, site.value_text, where, _condition(site), f"undecided: {reason[:200]}", False)
            for site, where, _, reason in undecided]


def _condition(site) -> str:
    return " and ".join(g.condition for g in site.guards if g.kind != "caller") or site.function


def _undoes(case: Case, b: Finding, a: Finding, forced: _Forced) -> bool:
    """Whether ``b``'s change makes the forcing write not run (with ``a``'s change applied too)."""
    setting = _setting(case, b)
    if not setting or not (set(setting) & _guard_fields(case, forced)):
        return False
    from kit.provenance.startup import write_status

    values = {**case.ev.args, **_setting(case, a), **setting}
    status, _ = write_status(case.ev.tree, forced.where, values, case.ev.model_config)
    return status == "not fired"


def _guard_fields(case: Case, forced: _Forced) -> set[str]:
    """The fields the forcing write's conditions read, through ServerArgs methods one call deep
    (``self.enable_mamba_extra_buffer()`` reads mamba_scheduler_strategy)."""
    names = _attributes(forced.condition)
    from kit.provenance.startup import method_reads

    for name in list(names):
        names |= method_reads(case.ev.tree, name)
    return names


def _attributes(text: str) -> set[str]:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return set()
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id in _ARGS}


def _reads(text: str, field: str) -> bool:
    return field in _attributes(text)


_NO = object()


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return _NO


def _dry_run(case: Case, a: Finding, field: str):
    """(the field's value, the line of the write that set it) after sglang's own resolution of the launch with ``a``'s change, on
    CPU (kit.dryrun), or None when it cannot run here."""
    import json
    import tempfile
    from pathlib import Path

    from kit.dryrun import DryRunError, dry_run, environment, supported_versions
    from kit.server_args import read_launch_text, server_flags

    profile, version, command = case.gpu_profile(), case.ev.version, case.ev.command
    if profile is None or case.ev.model_config is None or not command or case.flags is None:
        return None
    if version not in supported_versions() or not environment(version).ready:
        return None
    argv = list(command)
    for c in a.changes:
        argv = c.apply(argv)
    found = read_launch_text(shlex.join(argv), case.flags, where="the launch with this fix")
    if found.primary is None:
        return None
    flags = _without_model(server_flags(found.primary.readable_argv))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(case.ev.model_config))
        try:
            result = dry_run(flags, model=tmp, gpu=profile, sglang=version, timeout=180)
        except (DryRunError, KitError):
            return None
    if not result.ok or field not in result.final:
        return None
    last = result.changes_to(field)
    return result.final[field], (last[-1].line if last else None)


# --------------------------------------------------------------------------- conflicts


def _conflicts(case: Case, kept: list[Finding]) -> list[str]:
    """Two fixes that set one field to different values: the higher-ranked one stays."""
    notes = []
    owner: dict[str, tuple[Finding, object]] = {}
    for f in sorted(kept, key=lambda f: f.estimate.rank):
        clash = None
        for field, change, value in _changed_fields(case, f):
            if field in owner and owner[field][1] != value:
                clash = (field, change, owner[field][0])
                break
        if clash is not None:
            field, change, winner = clash
            kept.remove(f)
            notes.append(f"{f.id} ({f.title}): its fix {change} sets {field} otherwise than the fix of {winner.id} "
                         f"({', '.join(str(c) for c in winner.changes)}), which ranks first; moot once that is applied")
            continue
        for field, _, value in _changed_fields(case, f):
            owner.setdefault(field, (f, value))
    return notes


# --------------------------------------------------------------------------- the baseline


def _shared_with_baseline(case: Case, kept: list[Finding]) -> list[str]:
    """With a baseline, a finding whose every field has the same value on both sides is a cost of both,
    never the cause of the difference between them: it leaves the ranked findings, with why. A field
    the baseline does not tell (a command read without sglang's resolution tells only what it asked)
    keeps the finding. A known issue's fields are those of its trigger (one without any is kept)."""
    base = case.ev.baseline
    if base is None:
        return []
    from kit.server_args.values import same_value

    from .rulebase import RULES
    from .rules_known import trigger_fields

    unresolved = base.kind == "command" and "not resolved" in (base.method or "")
    notes = []
    for f in list(kept):
        rule = next((r for r in RULES if r.id == f.id), None)
        if f.id == "known-issue":
            fields = trigger_fields(f)
        elif rule is None or rule.after == "findings":
            continue
        else:
            try:
                fields = set(rule.covers(case)) | {field for field, _, _ in _changed_fields(case, f)}
            except KitError:
                continue
        fields = {x for x in fields if x and case.has(x)}
        if not fields:
            continue
        shared = []
        for name in sorted(fields):
            top = name.split(".")[0]
            if base.lacks(name) or (unresolved and not (base.explicit and top in base.explicit
                                                        and case.asked(top))):
                break
            theirs, mine = _dotted(base.resolved, name), case.value(name)
            if theirs is _NO or not same_value(theirs, mine):
                break
            shared.append(f"{name} = {mine!r}")
        else:
            kept.remove(f)
            notes.append(f"{f.id} ({f.title}): not a cause of the difference from the baseline ({base.label}): both "
                         f"have {', '.join(shared)}; a cost of both launches, if any")
    return notes


def _dotted(values, name: str):
    node = values
    for part in name.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _NO
    return node
