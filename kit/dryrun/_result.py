"""What a dry-run found: the resolved server args, each automatic change, and startup errors."""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kit._text import clip, short_path
from kit.dryrun._gpus import GpuProfile

# Words that say what happens to a feature rather than name it: `disable_piecewise_cuda_graph`
# is announced by "... piecewise CUDA graph ...".
_VERBS = {"disable", "enable", "enforce", "use", "is", "allow", "skip"}
_NEAR_LINES = 5


@dataclass
class LogMessage:
    """A log record or warning emitted while `ServerArgs.__post_init__` or `check_server_args` ran."""

    level: str
    message: str
    logger: str = ""
    function: str = ""
    file: str = ""
    line: int | None = None
    seq: int = 0
    activation: int | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return f"{short_path(self.file)}:{self.line}"

    def __repr__(self) -> str:
        return f"<LogMessage {self.level} {self.where}: {clip(self.message, 60)!r}>"


@dataclass
class Change:
    """One write to a ServerArgs field during `__post_init__` or `check_server_args` that changed its value.

    `before`/`after` hold the value when JSON can (lists for tuples), else None;
    `before_text`/`after_text` always hold Python's repr. `messages` are the log records
    the same call emitted about it; a change without any is silent.
    """

    field: str
    before: Any
    after: Any
    before_text: str
    after_text: str
    function: str
    file: str
    line: int | None
    messages: list[LogMessage] = field(default_factory=list)
    explicit: bool = False  # the command line set this field, and sglang changed it anyway
    seq: int = 0
    kind: str = "assign"  # assign, or "in place" (the value changed with no assignment seen)
    changed: bool = True  # False for a write that stored the value the field already had
    activation: int | None = field(default=None, repr=False)

    @property
    def silent(self) -> bool:
        return not self.messages

    @property
    def where(self) -> str:
        return f"{short_path(self.file)}:{self.line}" if self.line else "-"

    @property
    def fills_default(self) -> bool:
        """The field was unset (None) and sglang chose its value, rather than replacing one."""
        return self.before_text == "None"

    def __repr__(self) -> str:
        loud = "silent" if self.silent else f"{len(self.messages)} message(s)"
        return f"<Change {self.field}: {self.before_text} -> {self.after_text} at {self.where} {self.function} ({loud})>"


@dataclass
class StartupError:
    """What sglang raised while resolving its arguments.

    kind: `startup` (sglang's own code refused: the server would not start),
    `arguments` (sglang's argument parser refused the flags), or `environment`
    (the error came from below sglang, e.g. torch without a GPU: a limit of the dry-run).
    """

    kind: str
    type: str
    message: str
    function: str = ""
    file: str = ""
    line: int | None = None
    traceback: str = field(default="", repr=False)

    @property
    def where(self) -> str:
        return f"{short_path(self.file)}:{self.line}" if self.line else ""

    @property
    def headline(self) -> str:
        label = {
            "startup": "sglang would refuse to start",
            "arguments": "sglang's argument parser refuses these flags",
            "environment": "the dry-run could not follow this path (not an sglang error)",
        }.get(self.kind, self.kind)
        where = f" in {self.function} ({self.where})" if self.where else ""
        return f"{label}: {self.type}{where}: {self.message}"

    def __repr__(self) -> str:
        return f"<StartupError {self.kind} {self.type} {self.where}: {clip(self.message, 60)!r}>"


@dataclass
class DryRunResult:
    """The effective server arguments of one launch, resolved by sglang's own code.

    `changes` lists, in order, every write during `ServerArgs.__post_init__` (and the
    `check_server_args` the server runs next) that gave a field a new value; `writes`
    also keeps the writes that stored the value already there.
    """

    sglang: str
    gpu: GpuProfile
    tp: int | None
    model: str
    argv: list[str]
    server_args_line: str | None
    changes: list[Change] = field(default_factory=list)
    writes: list[Change] = field(default_factory=list, repr=False)
    messages: list[LogMessage] = field(default_factory=list, repr=False)
    error: StartupError | None = None
    explicit: list[str] = field(default_factory=list, repr=False)
    initial: dict[str, Any] = field(default_factory=dict, repr=False)
    final: dict[str, Any] = field(default_factory=dict, repr=False)
    env: dict[str, str] = field(default_factory=dict)
    probes: dict[str, str] = field(default_factory=dict, repr=False)
    probes_missing: list[str] = field(default_factory=list, repr=False)
    seconds: float = 0.0
    import_seconds: float = 0.0
    console: str = field(default="", repr=False)
    warm: bool = False  # resolved by the warm worker (sglang imported already), not a new process
    notes: list[str] = field(default_factory=list)  # e.g. why the warm worker was not used

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def silent_changes(self) -> list[Change]:
        return [c for c in self.changes if c.silent]

    def changes_to(self, name: str) -> list[Change]:
        return [c for c in self.changes if c.field == name]

    def writes_to(self, name: str) -> list[Change]:
        return [c for c in self.writes if c.field == name]

    @property
    def snapshot(self):
        """The `server_args=` line as kit.server_args reads a server log (None after a startup error)."""
        if self.server_args_line is None:
            return None
        from kit.server_args import parse_log

        snap = parse_log(self.server_args_line)
        snap.version = snap.version or self.sglang
        snap.source = "dry-run"
        return snap

    def to_frame(self):
        """The ordered changes as a DataFrame, one row per change."""
        import pandas as pd

        rows = [
            {
                "field": c.field,
                "before": c.before_text,
                "after": c.after_text,
                "function": c.function,
                "where": c.where,
                "silent": c.silent,
                "fills_default": c.fills_default,
                "explicit": c.explicit,
                "message": " | ".join(m.message for m in c.messages),
            }
            for c in self.changes
        ]
        columns = ["field", "before", "after", "function", "where", "silent", "fills_default", "explicit",
                   "message"]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["gpu"] = {"key": self.gpu.key, **self.gpu.probe_request()}
        for data, change in zip(out["changes"], self.changes, strict=True):
            data["silent"] = change.silent
            data["fills_default"] = change.fills_default
            data["where"] = change.where
        out["ok"] = self.ok
        if self.error is not None:
            out["error"]["headline"] = self.error.headline
        return out

    @property
    def headline(self) -> str:
        tp = f"{self.tp}x " if self.tp else ""
        state = f"{len(self.changes)} automatic changes, {len(self.silent_changes)} silent"
        if self.error is not None:
            state += f"; {self.error.kind} error"
        return f"sglang {self.sglang} dry-run on {tp}{self.gpu.summary}, model {self.model}: {state}"

    def to_text(self, width: int = 48) -> str:
        out = [self.headline]
        if self.server_args_line:
            out.append(self.server_args_line)
        out.append("")
        out.append(f"automatic changes while sglang resolved its arguments ({len(self.changes)}), in order:")
        out.extend(_change_table(self.changes, width))
        if self.error is not None:
            out += ["", self.error.headline]
        return "\n".join(out)

    def __repr__(self) -> str:
        return f"<DryRunResult {self.headline}>"

    def _repr_html_(self) -> str:
        e = html.escape
        head = f"<p><b>{e(self.headline)}</b></p>"
        if self.error is not None:
            head += f"<p style='color:#a00'><b>{e(self.error.headline)}</b></p>"
        table = self.to_frame().to_html(index=False, max_rows=500) if self.changes else "<p>no changes</p>"
        line = ""
        if self.server_args_line:
            line = f"<details><summary>server_args line</summary><pre>{e(self.server_args_line)}</pre></details>"
        return f"<div>{head}{table}{line}</div>"


def _change_table(changes: list[Change], width: int) -> list[str]:
    heads = ("FIELD", "BEFORE", "AFTER", "WHERE", "FUNCTION", "LOG")
    rows = [
        (
            c.field + (" (your flag)" if c.explicit else ""),
            clip(c.before_text, width),
            clip(c.after_text, width),
            c.where,
            c.function,
            _log_cell(c),
        )
        for c in changes
    ]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    return [fmt.format(*heads)] + [fmt.format(*row).rstrip() for row in rows]


def _log_cell(change: Change) -> str:
    if change.messages:
        return clip(change.messages[0].message, 70)
    # An unset field (None) getting its value is how sglang fills defaults; a value replaced is news.
    return "silent (default filled in)" if change.fills_default else "SILENT"


# --------------------------------------------------------------------------- building results


def _value(described: dict | None) -> tuple[Any, str]:
    if described is None:
        return None, "<unset>"
    return described.get("json"), described.get("repr", "")


def _message(event: dict) -> LogMessage:
    return LogMessage(
        level=event.get("level", ""),
        message=event.get("message", ""),
        logger=event.get("logger", ""),
        function=event.get("function", ""),
        file=event.get("file", ""),
        line=event.get("line"),
        seq=event.get("seq", 0),
        activation=event.get("activation"),
    )


def _write(event: dict, explicit: set[str]) -> Change:
    before, before_text = _value(event.get("before"))
    after, after_text = _value(event.get("after"))
    return Change(
        field=event["field"],
        before=before,
        after=after,
        before_text=before_text,
        after_text=after_text,
        function=event.get("function", ""),
        file=event.get("file", ""),
        line=event.get("line"),
        explicit=event["field"] in explicit,
        seq=event.get("seq", 0),
        changed=bool(event.get("changed", True)),
        activation=event.get("activation"),
    )


def build_changes(events: list[dict], explicit: set[str]) -> tuple[list[Change], list[Change], list[LogMessage]]:
    """(changes, all field writes, messages) from the inside's event list, messages attached."""
    writes = [_write(e, explicit) for e in events if e.get("kind") == "write" and e.get("is_field")]
    messages = [_message(e) for e in events if e.get("kind") == "log"]
    attach_messages(writes, messages)
    return [w for w in writes if w.changed], writes, messages


def in_place_changes(initial: dict, final: dict, changes: list[Change], explicit: set[str]) -> list[Change]:
    """Fields whose value differs at the end although no assignment changed it (e.g. list.append)."""
    assigned = {c.field for c in changes}
    out = []
    for name, start in (initial or {}).items():
        end = (final or {}).get(name)
        if name in assigned or end is None or start.get("repr") == end.get("repr"):
            continue
        out.append(Change(name, start.get("json"), end.get("json"), start.get("repr", ""), end.get("repr", ""),
                          function="", file="", line=None, explicit=name in explicit, kind="in place"))
    return out


def attach_messages(writes: list[Change], messages: list[LogMessage]) -> None:
    """Give each write the log records that announce it.

    A record belongs to a write when the same call of the same function emitted both,
    and the record names the field (`max_running_requests` in "Max running requests is
    reset to 48"), or it sits right next to the write: no other write or record of that
    call in between, and within a few source lines. Anything else stays unattached, so
    a change is called silent only when nothing its own code logged is about it.
    """
    by_activation: dict[int | None, list] = {}
    for item in sorted([*writes, *messages], key=lambda x: x.seq):
        by_activation.setdefault(item.activation, []).append(item)
    for items in by_activation.values():
        if items[0].activation is None:
            continue
        for i, item in enumerate(items):
            if not isinstance(item, LogMessage):
                continue
            named = [w for w in items if isinstance(w, Change) and _names(item.message, w.field)]
            targets = named or _neighbours(items, i)
            for write in targets:
                write.messages.append(item)


def _neighbours(items: list, i: int) -> list[Change]:
    record = items[i]
    out = []
    for j in (i - 1, i + 1):
        if 0 <= j < len(items) and isinstance(items[j], Change):
            write = items[j]
            if write.line and record.line and abs(write.line - record.line) <= _NEAR_LINES:
                out.append(write)
    return out


def _names(message: str, field_name: str) -> bool:
    text = message.lower()
    if field_name.lower() in text or "--" + field_name.replace("_", "-") in text:
        return True
    words = re.findall(r"[a-z0-9]+", text)
    wanted = [w for w in field_name.lower().split("_") if w]
    while len(wanted) > 1 and wanted[0] in _VERBS:
        wanted = wanted[1:]
    if len(wanted) < 2:
        return False  # one word ("port", "device") is too common to count as naming the field
    n = len(wanted)
    return any(words[k : k + n] == wanted for k in range(len(words) - n + 1))
