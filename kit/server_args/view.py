"""``kit.args(target)``: the arguments a server runs with, each with its default, the flag that set it and its origin.

    import kit
    a = kit.args("lab")            # or kit.args(server=server) for a server already found
    a.auto_changed                 # ['disable_piecewise_cuda_graph', ...]: SGLang decided, no flag asked
    a["speculative_num_steps"]     # the effective value
    print(a.to_text())             # the table of the fields not at their default

The effective values come from ``/server_info`` when it answers, else the log's ``server_args`` line;
the explicit ones from the argv, read with the flag table of the server's own sglang source; the
defaults from that source (kit.server_args.server.classify_server_rows). ``sgl-kit args TARGET``
prints :meth:`ServerArgs.to_text`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from kit._text import clip

from .compare import CLASSIFY_COLUMNS
from .server import classify_server_rows, effective_args
from .snapshot import ServerArgsSnapshot

__all__ = ["ServerArgs", "args"]


@dataclass
class ServerArgs:
    """What :func:`args` found: the server, its effective arguments and one row per field."""

    server: Any
    snapshot: ServerArgsSnapshot
    rows: list[dict] = field(default_factory=list)  # one per field: CLASSIFY_COLUMNS, None for NA

    def __getitem__(self, name: str) -> Any:
        return self.snapshot.get(name)

    @property
    def auto_changed(self) -> list[str]:
        """The fields SGLang changed on its own: not at their default, and no flag asked for it."""
        return [row["flag"] for row in self.rows if row["origin"] == "auto-changed"]

    def shown(self, every: bool = False) -> list[dict]:
        """The rows not at their default (``every``: all of them)."""
        return self.rows if every else [row for row in self.rows if row["origin"] != "default"]

    def frame(self):
        """The rows as a pandas DataFrame (the notebook's table)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(CLASSIFY_COLUMNS))

    def table(self, start: str = "auto-changed"):
        """The rows in a table with a drop-down on their origin (a widget; a report shows every row)."""
        from kit.display import filtered_table

        return filtered_table(self.frame(), "origin", start=start,
                              title=f"{len(self.rows)} arguments of pid {self.server.pid}")

    def headline(self) -> list[str]:
        server = self.server
        return [f"{'lab stand-in' if server.kind == 'lab' else 'sglang'} {server.sglang_version or '?'}, "
                f"pid {server.pid} on {server.host_name}",
                f"effective args from {self.snapshot.source or 'the log'}; explicit ones from its argv, read with the "
                f"flag table of {server.sglang_dir}; defaults from that source"]

    def to_text(self, every: bool = False, every_is: str = "every=True") -> str:
        """The table of the fields not at their default (``every``: all), and the auto-changed ones by name;
        ``every_is`` says how to ask for every field where the text is read (``--all`` on the command line)."""
        shown = self.shown(every)
        lines = [f"{len(shown)} of {len(self.rows)} fields shown"
                 + ("" if every else f" (those not at their default; {every_is} for every field)"), ""]
        if not shown:
            return "\n".join(lines) + "every field is at its default\n"
        columns = ["flag", "default", "cli", "effective", "origin"]
        cells = [[str(row[c]) if row[c] is not None else "-" for c in columns] for row in shown]
        for cell, row in zip(cells, shown, strict=True):
            if cell[4] == "default" and row.get("default_from"):
                cell[4] = f"default ({row['default_from']})"
        widths = [min(48, max(len(c[i]) for c in cells + [columns])) for i in range(5)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True)))
        lines += ["  ".join(clip(v, w).ljust(w) for v, w in zip(c, widths, strict=True)) for c in cells]
        lines += ["", f"auto-changed (SGLang decided, no flag asked): {', '.join(self.auto_changed) or 'none'}"]
        return "\n".join(lines) + "\n"

    def to_dict(self, every: bool = False) -> dict:
        return {"server": self.server.to_dict(), "source": self.snapshot.source, "fields": self.shown(every)}

    def __repr__(self) -> str:
        return (f"<ServerArgs pid {self.server.pid}: {len(self.rows)} fields, "
                f"{len(self.auto_changed)} auto-changed>")

    def _repr_html_(self) -> str:
        shown = sorted(self.shown(), key=lambda row: row["origin"] != "auto-changed")
        columns = ["flag", "default", "cli", "effective", "origin"]
        head = "".join(f"<th>{c}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(clip('-' if row[c] is None else str(row[c]), 80))}</td>"
                                        for c in columns) + "</tr>" for row in shown)
        first, second = self.headline()
        return (f"<div><b>{html.escape(first)}</b><br>{html.escape(second)}<br>"
                f"{len(shown)} of {len(self.rows)} fields not at their default; auto-changed first"
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def args(target: str = "local", *, host=None, server=None, pid: int | None = None, port: int | None = None,
         tree=None) -> ServerArgs:
    """The arguments of the SGLang server at ``target`` (``lab``, ``local``, an SSH target; ``host`` reuses an
    open connection, ``server`` a server already found), each with its default and origin. ``tree`` is the
    sglang source to read flags and defaults from (default: the server's own, copied once when remote)."""
    from kit.source import source_for_server
    from kit.target import connect, resolve_server

    opened = connect(target) if server is None and host is None else None
    try:
        if server is None:
            server = resolve_server(host or opened, target, pid=pid, port=port, prefetch={"server_info": 10.0})
        snapshot = effective_args(server)
        tree = tree if tree is not None else source_for_server(server)
        rows = [dict(zip(CLASSIFY_COLUMNS, row, strict=True)) for row in classify_server_rows(server, tree, snapshot)]
        return ServerArgs(server=server, snapshot=snapshot, rows=rows)
    finally:
        if opened is not None:
            opened.close()
