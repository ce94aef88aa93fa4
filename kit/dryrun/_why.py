"""`why FLAG` twice over: the static explanation (kit.provenance) checked against a dry-run.

The static side reads the source and says which assignments to FLAG fire, given the
final server args; the dry-run ran the same source and saw which assignments ran.
Where both name a site, they must agree; `checks` says, site by site, whether they do.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kit._text import short_path
from kit.dryrun._result import Change, DryRunResult


@dataclass
class SiteCheck:
    """One assignment site as the static explanation and the dry-run each see it.

    `static` is the provenance status (fired, not fired, unknown) or None when the static
    reading did not find the site; `ran` says whether the dry-run saw the write run there.
    `agree` is None when the static side could not decide (the dry-run then settles it).
    """

    where: str
    function: str
    static: str | None
    ran: bool
    writes: list[Change] = field(default_factory=list, repr=False)

    @property
    def agree(self) -> bool | None:
        if self.static is None:
            return False if self.ran else None
        if self.static == "unknown":
            return None
        return (self.static == "fired") == self.ran

    @property
    def verdict(self) -> str:
        ran = "ran in the dry-run" if self.ran else "did not run in the dry-run"
        if self.static is None:
            return f"{ran}, but the static reading did not find this site"
        label = {True: "agree", False: "DISAGREE", None: "dry-run decides"}[self.agree]
        return f"static: {self.static}; {ran} -> {label}"

    def __repr__(self) -> str:
        return f"<SiteCheck {self.where} {self.verdict}>"


@dataclass
class DryRunWhy:
    flag: str
    explanation: object  # kit.provenance.FlagExplanation
    result: DryRunResult
    checks: list[SiteCheck] = field(default_factory=list)

    @property
    def disagreements(self) -> list[SiteCheck]:
        return [c for c in self.checks if c.agree is False]

    @property
    def agree(self) -> bool:
        return not self.disagreements

    @property
    def headline(self) -> str:
        named = [c for c in self.checks if c.agree is not None]
        state = "agree" if self.agree else f"DISAGREE at {len(self.disagreements)} site(s)"
        return (
            f"{self.flag}: static reading and dry-run {state} "
            f"({len(named)} site(s) named by both, {len(self.checks) - len(named)} settled by the dry-run only)"
        )

    def to_text(self) -> str:
        out = [self.headline, ""]
        out += _dry_run_lines(self.flag, self.result)
        out += ["", "site by site:"]
        out += [f"  {c.where:<28} {c.function:<44} {c.verdict}" for c in self.checks]
        out += ["", "static explanation, evaluated against the dry-run's resolved args:"]
        out.append(self.explanation.to_text())
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {
            "flag": self.flag,
            "agree": self.agree,
            "checks": [
                {"where": c.where, "function": c.function, "static": c.static, "ran": c.ran, "agree": c.agree}
                for c in self.checks
            ],
            "dry_run": {
                "headline": self.result.headline,
                "error": self.result.error.headline if self.result.error else None,
                "writes": [_write_dict(w) for w in self.result.writes_to(self.flag)],
                "value": self.result.final.get(self.flag),
            },
            "explanation": self.explanation.to_dict(),
        }

    def __repr__(self) -> str:
        return f"<DryRunWhy {self.headline}>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><code>{html.escape(c.where)}</code></td><td><code>{html.escape(c.function)}</code></td>"
            f"<td>{html.escape(c.verdict)}</td></tr>"
            for c in self.checks
        )
        return (
            f"<div><p><b>{html.escape(self.headline)}</b></p><table>{rows}</table>"
            f"{self.explanation._repr_html_()}</div>"
        )


def _write_dict(change: Change) -> dict:
    return {"where": change.where, "function": change.function, "before": change.before_text,
            "after": change.after_text, "silent": change.silent,
            "messages": [m.message for m in change.messages]}


def _dry_run_lines(flag: str, result: DryRunResult) -> list[str]:
    out = [result.headline]
    writes = result.writes_to(flag)
    if not writes:
        value = result.final.get(flag, "(unknown)")
        out.append(f"dry-run: nothing wrote {flag} during __post_init__; it stays {value!r}")
    for w in writes:
        what = f"{w.before_text} -> {w.after_text}" if w.changed else f"set to {w.after_text} (unchanged)"
        loud = "silent" if w.silent else "logged: " + w.messages[0].message
        out.append(f"dry-run: {flag} {what} at {w.where} in {w.function} ({loud})")
    if result.error is not None:
        out.append(result.error.headline)
    return out


def compare(flag: str, explanation, result: DryRunResult) -> list[SiteCheck]:
    """Pair the static sites with the dry-run's writes to the same file and line."""
    writes = result.writes_to(flag)
    checks, matched = [], set()
    for site in explanation.ordered():
        lines = {site.line, site.write_line} - {None}
        hits = [w for w in writes if w.file == site.file and w.line in lines]
        matched.update(id(w) for w in hits)
        checks.append(SiteCheck(f"{short_path(site.file)}:{site.line}", site.function, site.status, bool(hits), hits))
    for w in writes:
        if id(w) not in matched:
            checks.append(SiteCheck(w.where, w.function, None, True, [w]))
    return checks


def why_with_dryrun(
    flag: str,
    flags: str | Sequence[str] = (),
    *,
    model,
    gpu=None,
    tp: int | None = None,
    sglang: str | None = None,
    env: Mapping[str, str] | None = None,
    install: bool = False,
    result: DryRunResult | None = None,
) -> DryRunWhy:
    """Explain `flag` statically against the dry-run's resolved args, and check both name the same sites.

    The source read is the dry-run environment's own sglang, so both sides see the same lines.
    Pass `result=` to reuse a dry-run already made with the same model and version (its GPU and
    version are then used when `gpu` and `sglang` are not given). Otherwise both are required: the
    target's GPU and the sglang version it runs.
    """
    from kit._argv import option_value
    from kit.dryrun._env import require_environment, setup
    from kit.dryrun._run import MODEL_OPTIONS, dry_run, flag_tokens, model_source
    from kit.hosts import LocalHost
    from kit.model_config import load_model_config
    from kit.provenance import explain, normalize_flag
    from kit.source import SourceTree

    name = normalize_flag(flag)
    if result is not None:
        sglang, gpu = sglang or result.sglang, gpu or result.gpu
    if result is None:
        result = dry_run(flags, model=model, gpu=gpu, tp=tp, sglang=sglang, env=env, install=install)
    runtime = setup(sglang).env if install else require_environment(sglang)
    declared = option_value(flag_tokens(flags), MODEL_OPTIONS)
    config = load_model_config(model_source(model, declared))
    with LocalHost() as host:
        tree = SourceTree.at(host, str(runtime.sglang_dir))
        explanation = explain(tree, name, result.snapshot, config)
    return DryRunWhy(name, explanation, result, compare(name, explanation, result))
