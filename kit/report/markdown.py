"""The Markdown summary, for a ticket: headings and prose, text outputs and tables as text.

Code cells are left out unless asked for (``code=True``); figures, images and widgets
become one line saying what was there. The notebooks are redacted before this runs, and
the whole document once more after.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from .page import PLOTLY_MIME, WIDGET_STATE, WIDGET_VIEW

__all__ = ["render_markdown"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def render_markdown(nbs: list[dict], names: list[str], *, code: bool, stats: dict) -> str:
    parts: list[str] = []
    for nb, name in zip(nbs, names, strict=True):
        parts.append(f"## Notebook: {name}\n")
        state = ((nb.get("metadata") or {}).get("widgets") or {}).get(WIDGET_STATE, {}).get("state", {})
        for cell in nb.get("cells", []):
            kind, source = cell.get("cell_type"), _text(cell.get("source", ""))
            if kind == "markdown" and source.strip():
                parts.append(source.strip() + "\n")
            elif kind == "code":
                if code and source.strip():
                    parts.append(_fence(source.rstrip(), "python"))
                for output in cell.get("outputs", []) or []:
                    text = _output(output, state, stats)
                    if text:
                        parts.append(text)
    return "\n".join(parts)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _fence(text: str, lang: str = "text") -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}\n"


def _output(output: dict, state: dict, stats: dict) -> str:
    kind = output.get("output_type")
    if kind == "stream":
        text = _ANSI.sub("", _text(output.get("text"))).rstrip()
        return _fence(text) if text.strip() else ""
    if kind == "error":
        trace = _ANSI.sub("", "\n".join(_text(t) for t in output.get("traceback", []) or []))
        head = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
        return _fence(trace.rstrip() if head.strip(": ") in trace else f"{head}\n{trace}".rstrip())
    data = output.get("data") or {}
    if PLOTLY_MIME in data:
        stats["plots"] += 1
        return f"*[figure{_figure_title(data[PLOTLY_MIME])}: an interactive chart, in the HTML report]*\n"
    if WIDGET_VIEW in data:
        stats["widgets"] += 1
        if "text/plain" not in data:
            return f"*[{_widget_name(data[WIDGET_VIEW], state)} widget: interactive, not included]*\n"
    if "text/markdown" in data:
        return _text(data["text/markdown"]).strip() + "\n"
    page = _text(data.get("text/html", ""))
    if "text/plain" in data:
        plain = _text(data["text/plain"]).rstrip()
        if re.fullmatch(r"<[\w.]+ (?:object|at) [^>]*>", plain.strip()) and "<table" in page:
            return _html_tables(page)  # a repr that says nothing, a table that says it all
        return _fence(_ANSI.sub("", plain)) if plain.strip() else ""
    if page:
        return _html_tables(page) if "<table" in page else _fence(_strip(page))
    if any(m.startswith("image/") for m in data):
        return "*[image: in the HTML report]*\n"
    return ""


def _figure_title(figure) -> str:
    layout = figure.get("layout", {}) if isinstance(figure, dict) else {}
    title = layout.get("title") if isinstance(layout, dict) else None
    title = title.get("text") if isinstance(title, dict) else title
    return f" «{_strip(str(title))}»" if title else ""


def _widget_name(view, state: dict) -> str:
    model = state.get(view.get("model_id"), {}) if isinstance(view, dict) else {}
    return str(model.get("model_name", "a")).removesuffix("Model")


def _strip(page: str) -> str:
    page = re.sub(r"<script\b.*?</script\s*>|<style\b.*?</style\s*>", "", page, flags=re.S | re.I)
    page = re.sub(r"<br\s*/?>|</p>|</div>|</tr>|</li>", "\n", page, flags=re.I)
    return html.unescape(re.sub(r"<[^>]*>", "", page)).strip()


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.row: list[str] | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
        elif tag == "br" and self.cell is not None:
            self.cell.append(" ")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None and self.tables:
            self.tables[-1].append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def _html_tables(page: str) -> str:
    parser = _Tables()
    parser.feed(page)
    out = []
    for rows in parser.tables:
        rows = [r for r in rows if r]
        if not rows:
            continue
        width = max(len(r) for r in rows)
        rows = [[c.replace("|", "\\|") for c in r] + [""] * (width - len(r)) for r in rows]
        out.append("| " + " | ".join(rows[0]) + " |")
        out.append("|" + " --- |" * width)
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        out.append("")
    return "\n".join(out) + "\n" if out else _fence(_strip(page))
