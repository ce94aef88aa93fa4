"""What `why` returns: each assignment site, its guards, and whether it fired."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .render import is_atom, render_html, render_text

_STATUS_ORDER = {"fired": 0, "unknown": 1, "not fired": 2}


@dataclass
class Guard:
    """One condition on the way to an assignment.

    `result` is the truth of `text` as written (None: unknown); `negated` means the
    assignment runs only when `text` is false (an early return, an `else`, an
    earlier rule that did not match).
    """

    text: str
    line: int
    negated: bool = False
    result: bool | None = None
    reason: str = ""
    kind: str = "if"  # if, else, early return, rule, earlier rule, loop, except, call, caller
    notes: list[str] = field(default_factory=list)  # lookups that decided `result`
    rule: str = ""  # for an earlier rule of a table: its name
    where: str = ""  # for a caller's guard: the calling function and line

    def __repr__(self) -> str:
        mark = {True: "holds", False: "fails", None: "unknown"}[self.passes]
        return f"<Guard {self.condition} (line {self.line}) {mark}>"

    @property
    def passes(self) -> bool | None:
        return None if self.result is None else self.result != self.negated

    @property
    def condition(self) -> str:
        """The condition the assignment needs, e.g. `not self.enforce_piecewise_cuda_graph`."""
        if not self.negated:
            return self.text
        if self.text.startswith("not ") and is_atom(self.text[4:]):
            return self.text[4:]
        return f"not {self.text}" if is_atom(self.text) else f"not ({self.text})"


@dataclass
class AssignmentSite:
    file: str  # with the package: "sglang/srt/server_args.py"
    line: int  # the assignment, or for a rules table the rule's entry
    function: str  # qualname, e.g. "ServerArgs._handle_piecewise_cuda_graph"
    value_text: str
    guards: list[Guard] = field(default_factory=list)
    rule: str = ""
    rule_line: int | None = None
    status: str = "unknown"
    status_reason: str = ""
    evidence: list[str] = field(default_factory=list)  # what was looked up to decide
    kind: str = "assign"  # assign, setattr, keyword, setter call, rules table
    target: str = ""  # the dotted field written; shorter than the flag for whole-object writes
    write_line: int | None = None  # where the value is written, when `line` is a rule entry
    snippet: str = field(default="", repr=False)

    def __repr__(self) -> str:
        rule = f" {self.rule!r}" if self.rule else ""
        return f"<AssignmentSite {self.status} {self.where} {self.function}{rule} = {self.value_text}>"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def fired(self) -> bool:
        return self.status == "fired"


@dataclass
class FlagExplanation:
    flag: str
    version: str | None
    sites: list[AssignmentSite] = field(default_factory=list)
    observed: str | None = None  # the flag's value in the snapshot, as text
    evaluated: bool = False  # False when no snapshot was given
    hint: str = ""
    origin: str = ""  # when nothing assigns the flag: where its value comes from instead
    resolved: str = ""  # a nested config: what the resolution's writes leave it as, followed in order
    lineage: str = ""  # what the name asked for is in this version, when it is not the field explained
    asked: str = ""  # the name as asked (a flag of another version), when it is not `flag`
    notes: list[str] = field(default_factory=list)  # what else the reader must know (an unknown architecture)

    @property
    def fired(self) -> list[AssignmentSite]:
        return [s for s in self.sites if s.fired]

    def ordered(self) -> list[AssignmentSite]:
        """Fired first, then unknown, then not fired; source order within each."""
        return sorted(self.sites, key=lambda s: (_STATUS_ORDER.get(s.status, 3), s.file, s.line))

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in _STATUS_ORDER}
        for s in self.sites:
            out[s.status] = out.get(s.status, 0) + 1
        return out

    @property
    def headline(self) -> str:
        c = self.counts()
        version = f"sglang {self.version}" if self.version else "sglang (version unknown)"
        seen = f"; value in the log: {self.observed}" if self.observed is not None else ""
        if self.lineage and not self.sites and self.flag == self.asked:
            return f"{self.flag} in {version}: no such setting"
        return (
            f"{self.flag} in {version}: {len(self.sites)} assignment sites, "
            f"{c['fired']} fired, {c['unknown']} unknown, {c['not fired']} not fired{seen}"
        )

    def __repr__(self) -> str:
        fired = ", ".join(f"{s.where} {s.rule or s.function}".strip() for s in self.fired[:3])
        more = f" [{fired}]" if fired else ""
        return f"<FlagExplanation {self.flag} sglang {self.version}: {len(self.sites)} sites, {len(self.fired)} fired{more}>"

    def to_text(self, width: int = 110) -> str:
        return render_text(self, width)

    def to_dict(self) -> dict:
        out = asdict(self)
        for site, data in zip(self.sites, out["sites"], strict=True):
            for guard, g in zip(site.guards, data["guards"], strict=True):
                g["condition"] = guard.condition
                g["passes"] = guard.passes
        out["fired"] = [s.where for s in self.fired]
        return out

    def _repr_html_(self) -> str:
        return render_html(self)
