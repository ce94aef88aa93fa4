"""Whether "the launch with every fix" would start: that version's own flag parser (its flag table,
read flag by flag) and the startup checks read from its source (every ``raise`` and ``assert`` of
``ServerArgs``' resolution, ``check_server_args`` and the ``arg_groups`` hooks, through
kit.provenance.startup_checks), each evaluated for the fixed launch; a check the evaluator cannot
decide is counted as unchecked, never as passed. Without the source the launch is marked
unchecked. A launch sglang refuses (or may refuse, on a guard the source alone cannot decide) is
not offered as the fix."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit._text import short_path
from kit.errors import KitError

__all__ = ["FixCheck", "check_fixed_launch"]


@dataclass(frozen=True)
class FixCheck:
    status: str  # "checked", "refused", "may be refused", "unchecked"
    detail: str
    checks: dict | None = None  # the startup checks read: counts, refusals and each unchecked one's needs

    def to_dict(self) -> dict:
        return {"status": self.status, "detail": self.detail, **({"checks": self.checks} if self.checks else {})}


def _setting(case, findings) -> dict:
    """field -> value the fixes give it (a removed flag goes back to this version's default)."""
    flags = case.flags or []
    out = {}
    for f in findings:
        for c in f.changes:
            spec = next((s for s in flags if s.name == c.option), None) if c.option else None
            if spec is None:
                continue
            if c.remove:
                default = case.cli_defaults.get(spec.field)
                out[spec.field] = default.value if default is not None and default.known else None
            else:
                out[spec.field] = True if c.value is None else c.value
    return out


def check_fixed_launch(case, findings, fixed_command: str | None) -> FixCheck | None:
    if not fixed_command or not any(c.option for f in findings for c in f.changes):
        return None  # no flag changed: the launch is the one that ran
    tree = case.ev.tree
    if tree is None or case.flags is None:
        return FixCheck("unchecked", "no sglang source for this version: its parser and startup checks were not "
                                     "read (give --sglang VERSION)")
    from kit.provenance import startup_checks
    from kit.server_args import read_launch_text

    found = read_launch_text(fixed_command, case.flags, where="the launch with every fix")
    problems = [str(p) for p in found.all_problems()]
    setting = _setting(case, findings)
    bad = [p for p in problems if any(c.option and c.option in p for f in findings for c in f.changes)]
    version = getattr(tree, "version", None) or case.ev.version
    if bad:
        return FixCheck("refused", f"sglang {version}'s parser: " + "; ".join(bad[:3]))
    if problems:
        return FixCheck("may be refused", f"sglang {version}'s parser does not take the launch as it stands (of flags "
                        "the fixes do not touch): " + "; ".join(problems[:3]))
    ran = _dry_run(case, found.primary.readable_argv if found.primary is not None else None, version)
    if ran is not None:
        return ran
    launch = found.primary
    together = {**(launch.explicit if launch is not None else {}), **setting}  # a refusal of a combination names both
    values = {**(case.ev.args or {}), **together}
    try:
        report = startup_checks(tree, values, case.ev.model_config, ran=_ran(case))
    except KitError as err:
        return FixCheck("unchecked", f"the startup checks were not read: {err.message}")
    read = f"{len(report.files)} file(s) of sglang {version}: " + ", ".join(
        short_path(f) for f in report.files[:4]) + (", ..." if len(report.files) > 4 else "")
    if report.refused:
        return FixCheck("refused", f"sglang {version} refuses it at startup: refused by "
                        + "; ".join(f"{c.where} (`{c.condition}` -> {c.message})" for c in report.refused[:3]),
                        _checks_dict(report))
    # an undecided check counts when it speaks of what the fixes change (``enable_mamba_extra_buffer()``
    # reads mamba_scheduler_strategy): the launch's own flags passed sglang's checks when it ran
    # (a field's name, or a long word of it: a method such as ``enable_mamba_extra_buffer()`` reads it)
    fields = set(values) | set(case.ev.args or {})
    touching = [c for c in report.unchecked if touches(c.condition, setting, fields)]
    if touching:
        return FixCheck("may be refused", f"sglang {version} may refuse it at startup: of "
                        f"{len(report.checks)} checks read, {len(report.unchecked)} are unchecked, these on the changed "
                        "fields: "
                        + "; ".join(map(str, touching[:3])), _checks_dict(report))
    shown = "; ".join(map(str, report.unchecked[:3])) + ("; ..." if len(report.unchecked) > 3 else "")
    return FixCheck("checked", f"passes sglang {version}'s flag parser; startup checks: {report.summary()}, "
                    f"every raise and assert of the resolution read from {read}"
                    + (f" ({shown})" if shown else "")
                    + "; read statically (no dry-run: " + _why_no_dry_run(case, version) + ")", _checks_dict(report))


def touches(condition: str, setting, fields) -> bool:
    """Whether a startup check's condition reads a field of ``setting``: the field's name, or a long word of it
    inside a name that is no other field (``enable_mamba_extra_buffer()`` reads mamba_scheduler_strategy, but a
    check on ``speculative_moe_runner_backend`` does not read speculative_num_steps)."""
    parts = {w for name in setting for w in name.split("_") if len(w) > 4}
    for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", condition):
        if name in setting or (name not in fields and any(w in name for w in parts)):
            return True
    return False


def _ran(case) -> dict | None:
    """The values of the launch as it ran, when the evidence shows it started (its server_args line,
    /server_info, a live server): it passed every startup check, so a check that refuses it too is one
    whose guard is outside what the reader sees."""
    where = case.ev.sources.get("args", "")
    if case.ev.args and ("server_args line" in where or "/server_info" in where):
        return dict(case.ev.args)
    return None


def _checks_dict(report) -> dict:
    return {"files": list(report.files), "checked": len(report.passed), "unchecked": len(report.unchecked),
            "refused": [{"where": c.where, "condition": c.condition, "message": c.message} for c in report.refused],
            "unchecked_checks": [{"where": c.where, "needs": c.needs} for c in report.unchecked]}


def _why_no_dry_run(case, version) -> str:
    from kit.dryrun import environment, supported_versions

    if version not in supported_versions() or not environment(version).ready:
        return f"no dry-run environment for sglang {version}"
    if case.ev.model_config is None:
        return "no config.json"
    return "no GPU profile" if case.gpu_profile() is None else "the dry-run did not decide"


def _dry_run(case, argv, version) -> FixCheck | None:
    """sglang's own argument resolution on this CPU (kit.dryrun), where its environment, the model's
    config.json and the GPU are known; None when it cannot run or fails below sglang."""
    import json
    import tempfile
    from pathlib import Path

    from kit.dryrun import DryRunError, dry_run, environment, supported_versions
    from kit.server_args import server_flags

    profile = case.gpu_profile()
    if argv is None or case.ev.model_config is None or profile is None:
        return None
    if version not in supported_versions() or not environment(version).ready:
        return None
    flags = server_flags(argv)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(case.ev.model_config))
        try:
            result = dry_run(_without_model(flags), model=tmp, gpu=profile, sglang=version, timeout=180)
        except (DryRunError, KitError):
            return None
    if result.ok:
        return FixCheck("checked", f"sglang {version}'s own argument resolution accepts it (dry-run on "
                                   f"{profile.name}, the model's config.json)")
    if result.error is not None and result.error.kind in ("startup", "arguments"):
        return FixCheck("refused", f"sglang {version} refuses it (dry-run): {result.error.headline}")
    return None


def _without_model(flags: list[str]) -> list[str]:
    out, skip = [], False
    for tok in flags:
        if skip:
            skip = False
            continue
        if tok in ("--model-path", "--model"):
            skip = True
            continue
        if tok.startswith(("--model-path=", "--model=")):
            continue
        out.append(tok)
    return out
