"""`build_report`: executed notebooks to one shareable file, HTML or Markdown, with no secret left in it."""

from __future__ import annotations

import html
import json
import os
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kit._version import __version__
from kit.errors import ReportError

from .redaction import HOST_KINDS, Redactor, redact_notebooks, secret_count
from .scanner import detect_secrets_version
from .survivors import survivors

__all__ = ["ReportResult", "build_report", "check_writable", "hosts_summary", "kept_summary", "redaction_summary", "scope_note",
           "unwritable"]


@dataclass
class ReportResult:
    """What `build_report` wrote: where, how big, and what it removed (kinds and counts, never values)."""

    path: Path
    bytes: int
    counts: Counter
    notebooks: list[str]
    format: str = "html"
    plots: int = 0
    widgets: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # where long random-looking strings no rule removed are
    strict: bool = False
    kept_strings: int = 0  # how many strings those places hold

    @property
    def secrets(self) -> int:
        return secret_count(self.counts)

    def summary(self) -> str:
        """What was removed and, unless --strict removed them, where random-looking strings were kept: one line."""
        kept = kept_summary(self.kept, self.strict, self.kept_strings)
        return redaction_summary(self.counts) + (f"; {kept}" if kept else "")

    def to_dict(self) -> dict:
        return {"path": str(self.path), "bytes": self.bytes, "format": self.format, "notebooks": self.notebooks,
                "secrets_removed": self.secrets,
                "redacted": {k: n for k, n in sorted(self.counts.items()) if k not in HOST_KINDS},
                "hosts_replaced": {k: n for k, n in sorted(self.counts.items()) if k in HOST_KINDS},
                "plots": self.plots, "widgets": self.widgets, "seconds": round(self.seconds, 3),
                "kept_random_strings": [] if self.strict else self.kept,
                "removed_random_strings": self.kept if self.strict else [], "strict": self.strict,
                "scanner": f"detect-secrets {detect_secrets_version()}",
                "summary": self.summary(), "notes": self.notes}

    def __str__(self) -> str:
        return f"{self.path} ({_size(self.bytes)}): {self.summary()}"

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (f"<div><b>report written</b>: <code>{html.escape(str(self.path))}</code> ({_size(self.bytes)}, "
                f"{self.format}, {len(self.notebooks)} notebook{'' if len(self.notebooks) == 1 else 's'})<br>"
                f"{html.escape(self.summary())}{f'<ul>{notes}</ul>' if notes else ''}</div>")


def redaction_summary(counts: Counter) -> str:
    """``"3 secrets removed: 2 api_key, 1 hf_token"``: kinds and counts only (``"no secret found by the rules"``)."""
    kinds = sorted(((k, n) for k, n in counts.items() if k not in HOST_KINDS and n), key=lambda kn: (-kn[1], kn[0]))
    total = sum(n for _, n in kinds)
    if not total:
        return "no secret found by the rules"
    return f"{total} secret{'' if total == 1 else 's'} removed: " + ", ".join(f"{n} {k}" for k, n in kinds)


def kept_summary(kept: list[str], strict: bool = False, n: int | None = None) -> str:
    """Where long random-looking strings that no rule removed are (places, never values); "" when none or --strict."""
    if strict or not kept:
        return ""
    n = len(kept) if n is None else n
    return (f"{n} long random-looking string{'' if n == 1 else 's'} that no rule recognised kept, check "
            f"{'it' if n == 1 else 'them'} before sharing (or use --strict): " + "; ".join(kept))


def scope_note() -> str:
    """What the rules cover, and what that does not promise."""
    return (f"The rules are detect-secrets {detect_secrets_version()}'s detectors plus the kit's own (kit.report."
            "redaction): API keys, tokens, passwords and private keys of the shapes and names they know, in plain, "
            "escaped, base64 and percent-encoded forms, and every value seen under a secret's name wherever else it "
            "occurs. A secret of another shape under a neutral name can remain: read the page before sharing it.")


def hosts_summary(counts: Counter) -> str:
    names, ips = counts.get("hostname", 0), counts.get("ip_address", 0)
    if not (names or ips):
        return ""
    return (f"Host names and IP addresses replaced by placeholders: {names} host name{'' if names == 1 else 's'}, "
            f"{ips} IP address{'' if ips == 1 else 'es'}.")


def build_report(paths, out, *, no_input: bool = False, hosts: bool = False, markdown: bool = False,
                 title: str | None = None, code: bool = False, strict: bool = False,
                 links: list[tuple[str, str]] | None = None) -> ReportResult:
    """Executed notebooks (.ipynb) to one self-contained HTML page (or a Markdown summary), secrets removed.

    `no_input` hides the code cells of the HTML page; the Markdown summary leaves code out
    unless `code` is true. `hosts` replaces host names and IP addresses by placeholders.
    Long random-looking strings that no rule removed are listed by place (`kept`);
    `strict` removes them too. `links` ((label, relative path) pairs) are listed in the page's header as
    "see also" (a case's page beside it, `sgl-kit report --case`).
    Raises ReportError naming the file when an input is missing or not a notebook, or the
    output cannot be written.
    """
    start = time.perf_counter()
    paths = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    if not paths:
        raise ReportError("no notebook to report on", hint="give one or more executed .ipynb files")
    out = Path(out)
    raw = [_read(p) for p in paths]
    _check_output(out, paths)
    from .page import drop_library_outputs

    stats = {"plots": 0, "widgets": 0, "scripts": 0, "maps": 0}
    raw = [drop_library_outputs(nb, stats) for nb in raw]

    redactor = Redactor(hosts=hosts)
    for nb in raw:
        target = _param(nb, "target")
        if redactor.hosts is not None and isinstance(target, str):
            redactor.hosts.add_target(target)
    nbs = redact_notebooks(raw, redactor)
    names = [redactor.text(p.name) for p in paths]
    kept, kept_strings = survivors(nbs, names, redactor, strict=strict)
    facts = _facts(nbs)
    title = redactor.text(title) if title else (
        f"SGLang investigation: {facts['target']}" if facts["target"] != "unknown" else "SGLang investigation")
    notes: list[str] = []
    kept_line = kept_summary(kept, strict, kept_strings)
    if markdown:
        document = _markdown(nbs, names, redactor, facts, title, code, stats, kept_line)
    else:
        document = _html(nbs, names, redactor, facts, title, no_input, stats, notes, kept_line, links or [])
    data = document.encode("utf-8")
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise unwritable(out, exc.strerror or str(exc)) from None
    return ReportResult(out, len(data), Counter(redactor.counts), [str(p) for p in paths],
                        "markdown" if markdown else "html", stats["plots"], stats["widgets"],
                        time.perf_counter() - start, notes, kept, strict, kept_strings)


# --- inputs and output


def _read(path: Path) -> dict:
    import nbformat

    hint = "give the path of an executed Jupyter notebook (.ipynb), e.g. notebooks/_executed/00_connect.ipynb"
    if not path.exists():
        raise ReportError(f"no such notebook: {path}", hint=hint)
    if path.is_dir():
        raise ReportError(f"{path} is a directory, not a notebook", hint=f"give the .ipynb files in it: {path}/*.ipynb")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReportError(f"{path} is not a Jupyter notebook: it is not text (UTF-8)", hint=hint) from None
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror or exc}", hint="check the file's permissions") from None
    try:
        obj = json.loads(text)
    except ValueError:
        raise ReportError(f"{path} is not a Jupyter notebook: it is not JSON", hint=hint) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("cells"), list) or not isinstance(obj.get("nbformat"), int):
        raise ReportError(f"{path} is not a Jupyter notebook: its JSON has no cells or nbformat", hint=hint)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises many kinds on malformed notebooks
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise ReportError(f"{path} is not a readable Jupyter notebook: {reason}", hint=hint) from None


def _check_output(out: Path, inputs: list[Path]) -> None:
    if out.is_dir():
        raise ReportError(f"cannot write the report to {out}: it is a directory",
                          hint=f"give a file name, e.g. {out / 'report.html'}")
    resolved = {p.resolve() for p in inputs}
    if out.resolve() in resolved:
        raise ReportError(f"the report would overwrite its input notebook {out}", hint="write the report to another file",
                          cli_hint="choose another file with -o, e.g. -o report.html")
    check_writable(out, "the report")


def check_writable(out: Path, what: str) -> None:
    """A ReportError naming ``out`` when its directory is missing or not writable (``what``: "the report")."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise unwritable(out, f"{parent} is a file, not a directory" if parent.exists() else f"{parent} does not exist",
                         what)
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise unwritable(out, "permission denied", what)


def unwritable(out: Path, reason: str, what: str = "the report") -> ReportError:
    return ReportError(f"cannot write {what} to {out}: {reason}",
                       hint="choose a path in a directory you can write to",
                       cli_hint="choose a path in a directory you can write to with -o FILE")


# --- what the title block says


def _param(nb: dict, name: str):
    params = ((nb.get("metadata") or {}).get("papermill") or {}).get("parameters") or {}
    return params.get(name) if isinstance(params, dict) else None


_VERSION = re.compile(r"\bsglang(?:[ \t]+version)?(?:[ \t]*(?:==|=|:)[ \t]*|[ \t]+v?)"
                      r"(\d+\.\d+(?:\.\d+)*(?:\.?(?:post|rc|dev|a|b)\d+)?)(?![\w.])", re.I)
_SERVER_REPR = re.compile(r"<ServerProcess \S+ (\d+\.\d+(?:\.\d+)*\S*?) pid")


def _facts(nbs: list[dict]) -> dict:
    targets, versions, dates = [], [], []
    for nb in nbs:
        target = _param(nb, "target")
        if isinstance(target, str) and target.strip():
            targets.append(target.strip())
        version = _param(nb, "sglang_version") or _param(nb, "sglang")
        found = [str(version)] if version else _versions_in_outputs(nb)
        versions += found[:1]
        dates += _executed(nb)[:1]
    return {"target": _listed(targets), "sglang": _listed(versions), "date": _listed(dates)}


def _listed(values: list[str]) -> str:
    return ", ".join(dict.fromkeys(values)) or "unknown"


def _versions_in_outputs(nb: dict) -> list[str]:
    found = []
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            texts = [output.get("text", "")] + [(output.get("data") or {}).get("text/plain", "")]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text or "")
                found += _VERSION.findall(text) + _SERVER_REPR.findall(text)
    return found


def _executed(nb: dict) -> list[str]:
    papermill = (nb.get("metadata") or {}).get("papermill") or {}
    stamps = [papermill.get("end_time"), papermill.get("start_time")]
    for cell in reversed(nb.get("cells", [])):
        execution = (cell.get("metadata") or {}).get("execution") or {}
        stamps.append(execution.get("shell.execute_reply"))
    for stamp in stamps:
        if isinstance(stamp, str):
            try:
                when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
            when = when.astimezone(timezone.utc) if when.tzinfo else when
            return [when.strftime("%Y-%m-%d %H:%M UTC")]
    return []


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B"


# --- the two formats


def _meta_rows(facts: dict, names: list[str]) -> list[tuple[str, str]]:
    built = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [("target", facts["target"]), ("sglang", facts["sglang"]), ("date", facts["date"]),
            ("kit", f"sgl-kit {__version__}"), ("notebooks", ", ".join(names)), ("report built", built)]


def _html(nbs, names, redactor: Redactor, facts, title, no_input, stats, notes, kept_line: str,
          links: list[tuple[str, str]]) -> str:
    from .page import plotly_script, prepare_notebook, render_html, require_shim, sanitize_network

    cells = [c for i, (nb, name) in enumerate(zip(nbs, names, strict=True))
             for c in prepare_notebook(nb, i, name, stats)]
    page = render_html(cells, metadata=nbs[0].get("metadata") or {}, title=title, no_input=no_input)
    rows = "".join(f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in _meta_rows(facts, names))
    if links:
        rows += "<tr><th>see also</th><td>" + ", ".join(
            f'<a href="{html.escape(href, quote=True)}">{html.escape(redactor.text(label))}</a>'
            for label, href in links) + "</td></tr>"
    header = (f'<header class="kit-report-header"><h1>{html.escape(title)}</h1>'
              f'<table class="kit-report-meta">{rows}</table>'
              '<p class="kit-report-note">Before this page was written, every cell went through the kit\'s '
              "secret rules; what they removed, and where they kept random-looking strings, is at the end of the "
              "page.</p></header>\n")
    head, _, rest = page.partition("<main>")
    main, _, tail = rest.partition("</main>")
    # the whole page once more, as it reads, a cell at a time (so a fallback to plain text stays in its cell)
    main = "".join(redactor.second(chunk, mime="text/html") for chunk in _CELL_START.split(header + main))
    head, main = sanitize_network(head, notes), sanitize_network(main, notes)
    if stats["widgets"]:
        notes.append(f"{stats['widgets']} interactive widget output(s) are shown as text: their live view needs "
                     "the Jupyter widgets JavaScript from a CDN, which this offline page does not load.")
    if stats["maps"]:
        notes.append(f"{stats['maps']} figure(s) draw maps, whose shapes or tiles plotly fetches from the network: "
                     "offline they show without the map.")
    if stats["scripts"]:
        notes.append(f"{stats['scripts']} output script(s) that load code from the network were left out.")
    if stats["plots"]:
        head = head.replace("</head>", require_shim() + "\n" + plotly_script() + "\n</head>", 1)
    footer = _html_footer(redactor.counts, notes, kept_line)
    return f"{head}<main>{main}{footer}</main>{tail}"


_CELL_START = re.compile(r'(?=<div\b[^>]*\bclass="jp-Cell )')


def _html_footer(counts: Counter, notes: list[str], kept_line: str) -> str:
    lines = [f'<p class="kit-redaction-summary"><strong>{html.escape(redaction_summary(counts))}</strong></p>']
    if kept_line:
        lines.append(f'<p class="kit-redaction-kept">{html.escape(kept_line)}</p>')
    lines.append(f'<p class="kit-redaction-scope">{html.escape(scope_note())}</p>')
    if hosts_summary(counts):
        lines.append(f'<p class="kit-redaction-hosts">{html.escape(hosts_summary(counts))}</p>')
    lines += [f'<p class="kit-report-note">{html.escape(n)}</p>' for n in notes]
    lines.append(f'<p class="kit-report-note">Written by sgl-kit {__version__}; it opens with no network '
                 "and no Jupyter.</p>")
    return '<footer class="kit-report-footer">' + "".join(lines) + "</footer>\n"


def _markdown(nbs, names, redactor: Redactor, facts, title, code, stats, kept_line: str) -> str:
    from .markdown import render_markdown

    meta = "\n".join(f"| {k} | {v.replace('|', '/')} |" for k, v in _meta_rows(facts, names))
    body = render_markdown(nbs, names, code=code, stats=stats)
    document = f"# {title}\n\n| | |\n| --- | --- |\n{meta}\n\n{body}"
    document = redactor.second(document)
    tail = [redaction_summary(redactor.counts) + "."] + ([kept_line + "."] if kept_line else []) + [scope_note()]
    if hosts_summary(redactor.counts):
        tail.append(hosts_summary(redactor.counts))
    return document.rstrip() + "\n\n---\n\n" + "\n\n".join(tail) + "\n"
