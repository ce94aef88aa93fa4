"""ServerArgsSnapshot: the fields of one `server_args` line or `/server_info`, and where they came from."""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .common import MISSING, pandas
from .values import NonLiteral


@dataclass(eq=False)
class ServerArgsSnapshot:
    """One set of server arguments, as a log line or /server_info reported it.

    `fields` keeps the logged order. `raw` holds the text of every value that is not a
    Python literal. `stage` says whether the values are SGLang's input ("raw") or what
    it resolved them to ("resolved"). `truncated` means the line was cut off: `fields`
    then holds everything before the cut, and `stopped_at` says where that was.
    """

    fields: dict[str, Any]
    raw: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    form: str = "ServerArgs"
    stage: str = "unknown"
    truncated: bool = False
    source: str = ""
    line: int | None = None
    offset: int | None = None
    stopped_at: int | None = None
    process: str = ""
    timestamp: str | None = None
    internal_differences: list[tuple[int, str, Any, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """A field, or a dotted path into a nested value: `get("cuda_graph_config.prefill.backend")`."""
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        head, _, rest = name.partition(".")
        value = self.fields[head]
        for part in rest.split(".") if rest else ():
            value = _child(value, part)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name, MISSING) is not MISSING

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def keys(self):
        return self.fields.keys()

    def items(self):
        return self.fields.items()

    def to_dict(self) -> dict:
        """JSON-safe: values that are not literals appear as their logged text."""
        return {"form": self.form, "stage": self.stage, "version": self.version, "truncated": self.truncated,
                "stopped_at": self.stopped_at, "source": self.source, "line": self.line,
                "fields": {k: self.raw.get(k, v) for k, v in self.fields.items()},
                "not_literal": sorted(self.raw),
                "internal_differences": [list(d) for d in self.internal_differences]}

    def to_frame(self):
        """One row per field: flag, value, and whether the value is a Python literal."""
        pd = pandas()
        rows = [(k, v, k not in self.raw) for k, v in self.fields.items()]
        return pd.DataFrame(rows, columns=["flag", "value", "literal"])

    def _summary(self) -> str:
        bits = [self.form, self.stage, f"sglang {self.version}" if self.version else "version unknown"]
        head = f"{len(self.fields)} fields"
        if self.raw:
            head += f", {len(self.raw)} not literal"
        if self.truncated:
            head += ", TRUNCATED"
        if self.internal_differences:
            head += f", {len(self.internal_differences)} changed after start"
        where = f" from {self.source}" if self.source else ""
        return f"{' '.join(bits)}: {head}{where}"

    def __repr__(self) -> str:
        return f"<ServerArgsSnapshot {self._summary()}>"

    def _repr_html_(self) -> str:
        table = self.to_frame().to_html(index=False, max_rows=400)
        return f"<div><b>ServerArgsSnapshot</b> {html.escape(self._summary())}{table}</div>"


def _child(value: Any, key: str) -> Any:
    if isinstance(value, NonLiteral):
        return value.kwargs[key]
    if isinstance(value, Mapping):
        return value[key]
    if isinstance(value, (list, tuple)) and key.lstrip("-").isdigit():
        try:
            return value[int(key)]
        except IndexError:
            raise KeyError(key) from None
    raise KeyError(key)
