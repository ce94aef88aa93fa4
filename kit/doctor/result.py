"""What the doctor says: findings, each with evidence, sites, fix and what not to do; and the whole diagnosis.

The JSON form (``Diagnosis.to_dict``) is an interface, documented in the README:
``findings`` (each: ``id``, ``title``, ``impact``, ``impact_reason``, ``evidence``, ``sites``,
``fix``, ``avoid``, ``versions``), ``hardware``, ``roofline`` (``ceiling_tok_s``,
``assumptions``, ...), ``problems``, ``skipped``, ``sources``, ``fixed_command``.
"""

from __future__ import annotations

import html
import shlex
import textwrap
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Change", "Diagnosis", "Finding", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Change:
    """One edit to the launch: set a flag (``option`` ``value``), remove one, or unset a variable."""

    option: str = ""
    value: Any = None
    remove: bool = False
    unset: str = ""  # an environment variable to unset
    setenv: tuple[str, str] | None = None

    def apply(self, argv: list[str]) -> list[str]:
        """``argv`` (a launch's flags) with this change made: the option set or removed. Environment
        changes leave argv alone."""
        return _apply(list(argv), self) if self.option else list(argv)

    def __str__(self) -> str:
        if self.unset:
            return f"unset {self.unset} in the server's environment"
        if self.setenv:
            return f"{self.setenv[0]}={shlex.quote(self.setenv[1])} in the server's environment"
        if self.remove:
            return f"remove {self.option}"
        return self.option if self.value is None else f"{self.option} {shlex.quote(str(self.value))}"


@dataclass
class Finding:
    id: str
    title: str
    impact: float  # estimated share of single-stream decode throughput lost, 0..1
    impact_reason: str
    evidence: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # "path:line" in this version's source
    changes: list[Change] = field(default_factory=list)  # the fix as edits to the launch
    advice: list[str] = field(default_factory=list)  # fixes that are not a flag (BIOS, drivers)
    avoid: list[str] = field(default_factory=list)
    versions: str = ""

    @property
    def fix(self) -> list[str]:
        return [str(c) for c in self.changes] + list(self.advice)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "impact": round(self.impact, 3),
                "impact_reason": self.impact_reason, "evidence": list(self.evidence), "sites": list(self.sites),
                "fix": self.fix, "avoid": list(self.avoid), "versions": self.versions}


@dataclass
class Diagnosis:
    target: str
    version: str | None
    findings: list[Finding]
    hardware: Any = None  # kit.hardware.Hardware
    roofline: Any = None  # kit.doctor.roofline.Roofline
    problems: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rule id, why not checked)
    checked: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    command: list[str] | None = None

    def __post_init__(self) -> None:
        self.findings.sort(key=lambda f: -f.impact)

    @property
    def fixed_command(self) -> str | None:
        """The launch command with every fix applied (flags and environment), or None without a command."""
        if not self.command:
            return None
        argv = list(self.command)
        env_unset, env_set = [], []
        for finding in self.findings:
            for change in finding.changes:
                if change.unset:
                    env_unset.append(change.unset)
                elif change.setenv:
                    env_set.append(f"{change.setenv[0]}={shlex.quote(change.setenv[1])}")
                elif change.option:
                    argv = _apply(argv, change)
        prefix = "".join(f"env -u {name} " for name in dict.fromkeys(env_unset)) + "".join(
            f"{kv} " for kv in dict.fromkeys(env_set))
        return prefix + shlex.join(argv)

    def to_dict(self) -> dict[str, Any]:
        hw = self.hardware.to_dict() if self.hardware is not None else None
        return {
            "schema": SCHEMA_VERSION,
            "target": self.target,
            "sglang_version": self.version,
            "findings": [f.to_dict() for f in self.findings],
            "hardware": hw,
            "roofline": self.roofline.to_dict() if self.roofline is not None else {"ceiling_tok_s": None,
                                                                                   "assumptions": []},
            "problems": list(self.problems),
            "checked": list(self.checked),
            "skipped": [{"id": i, "why": why} for i, why in self.skipped],
            "sources": dict(self.sources),
            "fixed_command": self.fixed_command,
        }

    # ---- text

    def to_text(self, width: int = 100) -> str:
        out = [f"sgl-kit doctor: {self.target}, sglang {self.version or '(version unknown)'}: "
               f"{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} from {len(self.checked)} rules"]
        for n, f in enumerate(self.findings, 1):
            out.append("")
            out.append(_wrap(f"{n}. [{f.id}] {f.title}", width, "", "   "))
            out.append(_wrap(f"impact: ~{f.impact:.0%} of single-stream decode; {f.impact_reason}", width,
                             "   ", "     "))
            for line in f.evidence:
                out.append(_wrap(f"- {line}", width, "   ", "     "))
            if f.sites:
                out.append(_wrap("source: " + ", ".join(f.sites), width, "   ", "     "))
            for line in f.fix:
                out.append(_wrap(f"fix: {line}", width, "   ", "     "))
            for line in f.avoid:
                out.append(_wrap(f"do not: {line}", width, "   ", "     "))
        if not self.findings:
            out.append("\nno rule found throughput left on the table.")
        if self.fixed_command:
            out += ["", "the launch with every fix:", _wrap(self.fixed_command, width, "  ", "    ")]
        out += ["", "hardware: " + _hardware_line(self.hardware)]
        if self.roofline is not None:
            out.append(_indent(self.roofline.to_text(), "  ") if hasattr(self.roofline, "to_text") else "")
        if self.problems:
            out += ["", "could not read everything:"] + [_wrap(f"- {p}", width, "  ", "    ") for p in self.problems]
        if self.skipped:
            out += ["", "rules not checked:"] + [_wrap(f"- {i}: {why}", width, "  ", "    ")
                                                   for i, why in self.skipped]
        return "\n".join(out) + "\n"

    def __repr__(self) -> str:
        top = ", ".join(f.id for f in self.findings[:3])
        return f"<Diagnosis {self.target} sglang {self.version}: {len(self.findings)} findings [{top}]>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{n}</td><td><b>{html.escape(f.title)}</b><br><code>{html.escape(f.id)}</code></td>"
            f"<td>~{f.impact:.0%}<br><small>{html.escape(f.impact_reason)}</small></td>"
            f"<td><ul>{''.join(f'<li>{html.escape(e)}</li>' for e in f.evidence)}</ul>"
            f"{'<small>' + html.escape(', '.join(f.sites)) + '</small>' if f.sites else ''}</td>"
            f"<td>{'<br>'.join(f'<code>{html.escape(x)}</code>' for x in f.fix)}"
            f"{''.join(f'<br><i>do not:</i> {html.escape(a)}' for a in f.avoid)}</td></tr>"
            for n, f in enumerate(self.findings, 1))
        head = (f"<p><b>sgl-kit doctor</b>: {html.escape(self.target)}, sglang "
                f"{html.escape(self.version or '?')}: {len(self.findings)} findings</p>")
        table = ("<table><tr><th>#</th><th>finding</th><th>impact</th><th>evidence</th><th>fix</th></tr>"
                 f"{rows}</table>")
        roof = f"<pre>{html.escape(self.roofline.to_text())}</pre>" if self.roofline is not None else ""
        fixed = f"<p>the launch with every fix:</p><pre>{html.escape(self.fixed_command)}</pre>" \
            if self.fixed_command else ""
        problems = "".join(f"<li>{html.escape(p)}</li>" for p in self.problems)
        return head + table + fixed + roof + (f"<p>could not read everything:</p><ul>{problems}</ul>"
                                              if problems else "")


def _apply(argv: list[str], change: Change) -> list[str]:
    """``argv`` with ``change.option`` set to its value (replacing any earlier value), or removed."""
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token == change.option or token.startswith(change.option + "="):
            takes_value = token == change.option and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 2 if takes_value else 1
            continue
        out.append(token)
        i += 1
    if not change.remove:
        out.append(change.option)
        if change.value is not None:
            out.append(str(change.value))
    return out


def _hardware_line(hw) -> str:
    if hw is None:
        return "not read (give --nvidia-smi and --topo, or a live target)"
    if not hw.gpus:
        return hw.note or "no GPU visible"
    links = ""
    if hw.topology is not None:
        pairs = hw.topology.gpu_links()
        links = "; links " + ", ".join(f"{k} {v}" for k, v in list(pairs.items())[:6])
    note = f" ({hw.note})" if hw.note else ""
    return f"{len(hw.gpus)}x {hw.gpu_name or 'mixed'}{links}{note}"


def _wrap(text: str, width: int, first: str, rest: str) -> str:
    return "\n".join(textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                                   break_long_words=False, break_on_hyphens=False)) or first


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())
