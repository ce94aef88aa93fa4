"""What kit.provenance.gates finds: one refusal of a fast path (``GateStep``) and all of them for one
launch (``GateChain``), with the fast paths it knows (``kit/data/fast_paths.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit._data import DATA, load_yaml
from kit._text import wrap
from kit.errors import DataFileError

__all__ = ["BATCHES", "FAST_PATHS", "GateChain", "GateStep", "REQUEST", "fast_path_names", "spec_data"]

_SPEC = DATA / "fast_paths.yaml"

# What the batch a gate is asked about carries, besides what the source says (forward mode, hidden
# states): a plain text request, its fields at their ForwardBatch defaults. Request-dependent fields
# read by a refusal make it "depends".
BATCHES = {
    "target-prefill": "the target model's prefill (extend) batch of a text request",
    "decode": "a decode step (with speculative decoding: the target's verify step)",
    "all-reduce": "the all-reduce of a layer's output",
}
REQUEST = "set by the request"  # the `why` of request-dependent batch fields


@dataclass
class GateStep:
    """One refusal: where it is, its condition (the path does not run when it holds), its verdict."""

    where: str  # srt/...py:LINE
    function: str
    text: str
    stage: str  # "setup" | "gate"
    verdict: str = "unknown"  # refuses | passes | depends | unknown
    typical: str = ""  # for "depends": "refuses" / "passes" for a plain text request, "" unknown
    reads: list[str] = field(default_factory=list)  # request fields it depends on
    reason: str = ""  # what decided it, or what would
    message: str = ""  # the log line sglang writes when it refuses here, if any
    via: str = ""  # the helper it was read through (`can_replay_locally`)

    def __repr__(self) -> str:
        return f"<GateStep {self.verdict} {self.where} {self.text[:60]}>"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class GateChain:
    """Every refusal of one fast path in one release, evaluated for one launch."""

    fast_path: str
    title: str
    version: str | None
    batch: str
    steps: list[GateStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)  # what the batch and runner were read as, with sites
    requires: GateChain | None = None

    def __repr__(self) -> str:
        return f"<GateChain {self.fast_path} sglang {self.version}: {self.verdict}, {len(self.steps)} refusals>"

    @property
    def read(self) -> bool:
        return bool(self.steps)

    @property
    def blocking(self) -> GateStep | None:
        """The first refusal that holds for every request: the path never runs for this launch."""
        own = next((s for s in self.steps if s.verdict == "refuses"), None)
        if own is None and self.requires is not None:
            return self.requires.blocking
        return own

    @property
    def verdict(self) -> str:
        """never (a refusal always holds) | runs | runs for some requests | unknown | not read."""
        if self.blocking is not None:
            return "never"
        if not self.read:
            return "not read"
        steps = self.steps + (self.requires.steps if self.requires is not None else [])
        if any(s.verdict == "unknown" for s in steps):
            return "unknown"
        if any(s.verdict == "depends" and s.typical == "refuses" for s in steps):
            return "not for a plain text request"
        if any(s.verdict == "depends" for s in steps):
            return "runs for plain text requests"
        return "runs"

    @property
    def undecided(self) -> list[GateStep]:
        return [s for s in self.steps if s.verdict == "unknown"]

    def sentence(self) -> str:
        block = self.blocking
        if block is not None:
            return (f"{self.title} never runs for this launch in sglang {self.version}: {block.function} refuses "
                    f"at {block.where} (`{block.text}`{': ' + block.reason if block.reason else ''})")
        if self.verdict == "unknown":
            open_ = "; ".join(f"`{s.text}` ({s.where})" for s in self.undecided[:3])
            return f"whether {self.title} runs in sglang {self.version} is not decided by the evidence: {open_}"
        if self.verdict == "not read":
            return f"{self.title}: its setup and gate were not found in sglang {self.version}"
        cond = [s for s in self.steps if s.verdict == "depends"]
        tail = ("; it refuses some requests: " + "; ".join(f"`{s.text}` ({s.where})" for s in cond[:3])) if cond else ""
        return f"{self.title} runs for this launch's text requests in sglang {self.version}{tail}"

    def to_text(self, width: int = 100, every: bool = False, restored: bool = False) -> str:
        """The chain for a person: the verdict, then each check in order (passing ones folded unless
        ``every``), each with its site, condition, verdict and why; then what the batch was read as."""
        head = f"{self.title}, sglang {self.version}" + (" (the launch with it turned back on)" if restored else "")
        out = [head, wrap(f"verdict: {self.verdict}: {self.sentence()}", width, "", "  "), ""]
        marks = {"refuses": "REFUSES", "passes": "passes", "depends": "depends", "unknown": "unknown"}
        folded = 0
        for stage, label in (("setup", "at startup (the path is built, or not)"),
                             ("gate", "for every batch (" + (self.batch or "the batch") + ")")):
            steps = [s for s in self.steps if s.stage == stage]
            if not steps:
                continue
            out.append(f"{label}:")
            for s in steps:
                if s.verdict == "passes" and not every:
                    folded += 1
                    continue
                via = f" (in {s.via})" if s.via else ""
                typical = ""
                out.append(wrap(f"{marks[s.verdict]:8} {s.where}{via}: {s.text}", width, "  ", "           "))
                why = s.reason if s.verdict != "passes" else ""
                if why or typical:
                    out.append(wrap((why + typical).lstrip("; "), width, "           ", "           "))
                if s.message and s.verdict in ("refuses", "unknown"):
                    out.append(wrap(f"its log line: {s.message!r}", width, "           ", "           "))
        if folded:
            out.append(f"  ({folded} checks pass for this launch; --all lists them)")
        if self.requires is not None:
            out += ["", f"it runs inside {self.requires.title}: {self.requires.verdict} "
                        f"({self.requires.sentence()})"]
        if self.facts:
            out += ["", "read as:"] + [wrap(f"- {f}", width, "  ", "    ") for f in self.facts]
        if self.notes:
            out += ["", "notes:"] + [wrap(f"- {n}", width, "  ", "    ") for n in self.notes]
        return "\n".join(out) + "\n"

    def to_dict(self) -> dict:
        return {"fast_path": self.fast_path, "title": self.title, "version": self.version, "batch": self.batch,
                "verdict": self.verdict, "sentence": self.sentence(),
                "blocking": self.blocking.to_dict() if self.blocking else None,
                "steps": [s.to_dict() for s in self.steps], "facts": list(self.facts), "notes": list(self.notes),
                "requires": self.requires.to_dict() if self.requires is not None else None}


def fast_path_names() -> list[str]:
    return list(FAST_PATHS)


def _load() -> dict:
    data = load_yaml(_SPEC)
    if not isinstance(data, dict):
        raise DataFileError(f"{_SPEC} is not a mapping of fast paths")
    return data






def spec_data() -> dict:
    """The whole of kit/data/fast_paths.yaml (the fast paths and the tables beside them)."""
    return _DATA


_DATA = _load()
FAST_PATHS: dict[str, dict] = {k: v for k, v in _DATA.items() if isinstance(v, dict) and "title" in v}
