"""`case_report`: a captured case (``sgl-kit capture``) as one self-contained HTML page to share.

The page reads top to bottom as an investigation is told::

    the case            its id, the sglang version, when and from where it was captured
    the resolution      the cause, the fix, who settled it and when, the run that showed it (when recorded)
    the answer          the doctor's findings (findings.json, or a replay passed as ``diagnosis``), each
                        with the notes written on it beside it; general notes above them
    the source lines    the sglang source excerpts the findings cite, checked against their hashes
    the evidence        each file of the case, collapsed (``<details>``), at most ~200 kB of each shown
    not collected       what the capture could not collect, and why
    redacted            what the capture masked (case.yaml), and what this page's own pass removed

Every text on the page (the case's files, the notes, the findings, even the excerpts) goes through
the report's redactor again (``kit.report.redaction``: the capture masked secrets already; this is
the second lock) and is HTML-escaped. The page needs nothing else: inline CSS, no script, and a
Content-Security-Policy that forbids any fetch::

    from kit.report.case_page import case_report
    page = case_report("cases/slow-decode")       # writes cases/slow-decode/report.html
    print(page)                                   # .../report.html (48.2 kB): case slow-decode, 3 findings, ...
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kit._text import short_path
from kit._version import __version__
from kit.case.layout import FINDINGS_FILE, CaseDir, open_case
from kit.errors import ReportError

from .build import check_writable, hosts_summary, redaction_summary, unwritable
from .redaction import HOST_KINDS, Redactor, secret_count

__all__ = ["MAX_FILE_CHARS", "CaseReport", "case_report"]

MAX_FILE_CHARS = 200_000  # of one evidence file shown on the page; the rest stays in the case directory
REPORT_FILE = "report.html"
NO_ANSWER = "no answer recorded: run `sgl-kit doctor --case DIR`"


@dataclass
class CaseReport:
    """What `case_report` wrote: where, how big, the case, and what its redaction removed (kinds, never values)."""

    path: Path
    bytes: int
    counts: Counter
    case: str
    findings: int = 0
    notes: int = 0
    answer: str | None = None  # "findings.json", "replayed", or None: no answer recorded
    cut: list[str] = field(default_factory=list)  # evidence files shown only in part

    @property
    def secrets(self) -> int:
        return secret_count(self.counts)

    def summary(self) -> str:
        return redaction_summary(self.counts)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "bytes": self.bytes, "case": self.case, "answer": self.answer,
                "findings": self.findings, "notes": self.notes, "secrets_removed": self.secrets,
                "redacted": {k: n for k, n in sorted(self.counts.items()) if k not in HOST_KINDS},
                "hosts_replaced": {k: n for k, n in sorted(self.counts.items()) if k in HOST_KINDS},
                "cut": list(self.cut), "summary": self.summary()}

    def headline(self) -> str:
        """``the case ID, 3 findings, 2 notes`` (or what stands in for the findings)."""
        if self.answer is None:
            found = "no answer recorded"
        else:
            found = f"{self.findings} finding{'' if self.findings == 1 else 's'}"
            found += " (replayed now)" if self.answer == "replayed" else ""
        return f"the case {self.case}, {found}, {self.notes} note{'' if self.notes == 1 else 's'}"

    def __str__(self) -> str:
        return f"{self.path} ({_size(self.bytes)}): {self.headline()}; {self.summary()}"

    def _repr_html_(self) -> str:
        return (f"<div><b>case page written</b>: <code>{html.escape(str(self.path))}</code> ({_size(self.bytes)}): "
                f"{html.escape(self.headline())}<br>{html.escape(self.summary())}</div>")


def case_report(case_dir, out=None, *, hosts: bool = False, diagnosis=None) -> CaseReport:
    """The case at ``case_dir`` as one self-contained HTML page, written to ``out`` (default
    ``<case_dir>/report.html``).

    The answer shown is ``diagnosis`` (findings.json's shape, ``Diagnosis.to_dict()``, or a Diagnosis:
    a replay of the case) or else the case's findings.json; with neither the page says so. ``hosts``
    also replaces host names and IP addresses by placeholders. Raises CaseError when ``case_dir`` is
    not a readable case or an excerpt changed after capture, ReportError when ``out`` cannot be written.
    """
    case = open_case(case_dir)
    if diagnosis is not None and hasattr(diagnosis, "to_dict"):
        diagnosis = diagnosis.to_dict()
    answer_kind = "replayed" if diagnosis is not None else None
    answer = diagnosis
    if answer is None:
        answer = case.findings
        answer_kind = FINDINGS_FILE if answer is not None else None
    target = Path(out).expanduser() if out is not None else case.path / REPORT_FILE
    _check_output(target, case)

    page = _Page(Redactor(hosts=hosts))
    if page.redactor.hosts is not None:  # the target the case was captured from is a host wherever it appears
        captured = case.meta.get("captured") if isinstance(case.meta.get("captured"), dict) else {}
        server = captured.get("server") if isinstance(captured.get("server"), dict) else {}
        for where in (captured.get("target"), server.get("url")):
            if isinstance(where, str) and where and not where.startswith("<"):  # "<redacted host>" already
                page.redactor.hosts.add_target(where)
    body = [_title(page, case), _resolution(page, case), _answer(page, case, answer, answer_kind),
            _excerpts(page, case), _evidence(page, case), _missing(page, case)]
    text = page.render("".join(body), lambda: _redacted(page, case, answer))
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise unwritable(target, err.strerror or str(err), "the case page") from None
    findings = len(answer.get("findings") or []) if isinstance(answer, dict) else 0
    return CaseReport(target, len(text.encode("utf-8")), page.redactor.counts, case.id, findings, len(case.notes),
                      answer_kind, page.cut)


# --- the text on the page: collected raw, redacted together, then escaped


class _Page:
    """The page's texts, each registered where it stands (``t``) and redacted in one pass over all of them:
    a value one rule finds anywhere (a key in the log) is removed from every other text (a note that quotes it)."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.texts: list[tuple[str, bool]] = []
        self.marked: set[int] = set()  # excerpts: their cited lines marked once escaped
        self.cut: list[str] = []

    def t(self, text, *, code: bool = False, cited: bool = False) -> str:
        """A placeholder for ``text``: redacted and escaped when the page is rendered."""
        self.texts.append(("" if text is None else str(text).replace("\x00", "\ufffd"), code))  # NUL marks places
        if cited:
            self.marked.add(len(self.texts) - 1)
        return f"\x00{len(self.texts) - 1}\x00"

    def render(self, body: str, tail) -> str:
        from .taint import learn

        r = self.redactor
        learn(r, [text for text, _ in self.texts])
        firsts = [r.first(text, code=code) for text, code in self.texts]
        done = [html.escape(r.second(text, code=code)) for text, (_, code) in zip(firsts, self.texts, strict=True)]
        for i in self.marked:
            done[i] = _CITED.sub(r'<span class="cited">\g<0></span>', done[i])
        body = _fill(body, done)
        # the last section reports this pass' counts; its own few texts are redacted like the rest
        start = len(self.texts)
        section = tail()
        extra = [html.escape(r.text(text, code=code)) for text, code in self.texts[start:]]
        section = _fill(section, [""] * start + extra)
        return _DOCUMENT.format(title=done[0], css=_CSS, body=body + section, version=html.escape(__version__))


_CITED = re.compile(r"^ *\d+&gt; .*$", re.M)  # an excerpt's cited line: `  2557> ...` (kit.case.capture)


def _fill(markup: str, texts: list[str]) -> str:
    parts = markup.split("\x00")
    return "".join(texts[int(p)] if i % 2 else p for i, p in enumerate(parts))


# --- the sections


def _title(page: _Page, case: CaseDir) -> str:
    meta = case.meta
    captured = meta.get("captured") if isinstance(meta.get("captured"), dict) else {}
    server = captured.get("server") if isinstance(captured.get("server"), dict) else {}
    sg = meta.get("sglang") if isinstance(meta.get("sglang"), dict) else {}
    title = page.t(f"case {case.id}")  # the first text: the <title> too
    rows = [("sglang", case.version or "unknown"),
            ("captured at", captured.get("at") or meta.get("date") or "unknown"),
            ("target", captured.get("target") or meta.get("url") or "unknown")]
    if server:
        rows.append(("server", ", ".join(f"{k} {server[k]}" for k in ("pid", "port", "url")
                                         if server.get(k) not in (None, ""))))
    if captured.get("interval") is not None:
        rows.append(("between the /metrics pages", f"{captured['interval']} s"))
    if captured.get("kit"):
        rows.append(("captured by", f"sgl-kit {captured['kit']}"))
    if sg.get("record_sha256"):
        rows.append(("sglang RECORD sha256", str(sg["record_sha256"])[:16]))
    if sg.get("wheel_sha256"):
        rows.append(("sglang wheel sha256", str(sg["wheel_sha256"])[:16]))
    rows.append(("page written", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")))
    table = "".join(f"<tr><th>{page.t(k)}</th><td>{page.t(v)}</td></tr>" for k, v in rows)
    return (f'<header><h1>{title}</h1><table class="meta">{table}</table>'
            '<p class="lead">Every text below went through the kit\'s secret rules once more before this page was '
            "written; what they removed is at the end.</p></header>\n")


def _resolution(page: _Page, case: CaseDir) -> str:
    res = case.resolution
    if not isinstance(res, dict):
        return ""
    rows = [(label, res.get(key)) for label, key in (("cause", "cause"), ("fix", "fix"), ("run", "run"))
            if res.get(key)]
    who = ", ".join(str(x) for x in (res.get("by"), res.get("at")) if x)
    body = "".join(f"<tr><th>{page.t(k)}</th><td>{page.t(v)}</td></tr>" for k, v in rows)
    by = f'<p class="by">settled by {page.t(who)}</p>' if who else ""
    return f'<section class="resolution"><h2>The resolution</h2><table class="meta">{body}</table>{by}</section>\n'


ANSWER_ROWS = (("verdict", "verdict"), ("problem class", "problem_class"), ("strongest signal", "strongest_signal"),
               ("best guess", "best_guess"), ("next step", "next_step"), ("risk", "risk"))


def _answer(page: _Page, case: CaseDir, answer: dict | None, kind: str | None) -> str:
    notes = [n for n in case.notes if isinstance(n, dict)]
    out = ['<section class="answer"><h2>The answer</h2>']
    if answer is None:
        out.append(f'<p class="empty">{page.t(NO_ANSWER.replace("DIR", str(case.path)))}</p>')
        out.append(_notes(page, notes, "notes"))
        return "".join(out) + "</section>\n"
    where = ("the doctor's answer now, replayed on this case's files" if kind == "replayed"
             else "the doctor's answer at capture time (findings.json)")
    version = answer.get("sglang_version") or case.version or "unknown"
    lead = f"{where}: sglang {version}, target {answer.get('target') or 'unknown'}"
    out.append(f'<p class="lead">{page.t(lead)}</p>')
    findings = [f for f in answer.get("findings") or [] if isinstance(f, dict)]
    context = [f for f in answer.get("context") or [] if isinstance(f, dict)]
    apart = [f for f in answer.get("not_applicable") or [] if isinstance(f, dict)]
    shown = {str(f.get("id")) for f in findings + context + apart}
    said = answer.get("answer")
    if isinstance(said, dict):  # the answer's shape (kit.doctor.answer.Answer.to_dict), above the findings
        rows = [(label, said.get(key)) for label, key in ANSWER_ROWS if said.get(key)]
        rows += [("checked", "; ".join(map(str, said.get("ruled_out") or [])) or f"{len(said.get('checked') or [])} rules")]
        body = "".join(f"<tr><th>{page.t(k)}</th><td>{page.t(str(v))}</td></tr>" for k, v in rows)
        out.append(f'<table class="meta answer-shape">{body}</table>')
    if answer.get("load_seen"):
        out.append(_list(page, "the load seen", answer["load_seen"]))
    general = [n for n in notes if not n.get("finding")]
    stray = [n for n in notes if n.get("finding") and str(n["finding"]) not in shown]
    out.append(_notes(page, general, "notes on the case"))
    if stray:
        out.append(_notes(page, stray, "notes on findings this answer does not have"))
    if answer.get("problems"):
        out.append(_list(page, "could not read everything", answer["problems"]))
    sites = _excerpt_anchors(case)
    taken: set[str] = set()
    if findings:
        out.append(f'<p class="lead">{page.t(answer.get("ordering") or "")}</p>' if answer.get("ordering") else "")
        for n, f in enumerate(findings, 1):
            out.append(_finding(page, n, f, _beside(notes, f, taken), sites))
    else:
        out.append(f'<p class="empty">{page.t("no rule found throughput left on the table")}</p>')
    for f in context:
        out.append(_finding(page, None, f, _beside(notes, f, taken), sites))
    for f in apart:
        out.append(_finding(page, None, f, _beside(notes, f, taken), sites,
                            head=f"found, but not on this hardware or workload ({f.get('not_here') or ''}): "))
    if answer.get("set_aside"):
        out.append(_list(page, "set aside (moot given another finding)", answer["set_aside"]))
    if answer.get("unanswered"):
        out.append(_list(page, "questions left open (the evidence that would answer each)", answer["unanswered"]))
    fixed = answer.get("fixed_command")
    if fixed and findings:
        out.append(f'<h3>the launch with every fix</h3><pre class="cmd">{page.t(fixed)}</pre>')
    return "".join(out) + "</section>\n"


def _beside(notes: list[dict], finding: dict, taken: set[str]) -> list[dict]:
    """The notes on this finding's id; a finding id that occurs twice gets them once, beside its first."""
    fid = str(finding.get("id"))
    if fid in taken:
        return []
    taken.add(fid)
    return [n for n in notes if str(n.get("finding") or "") == fid]


def _finding(page: _Page, n: int | None, f: dict, notes: list[dict], sites: dict[str, str],
             head: str | None = None) -> str:
    head = head or (f"{n}. " if n is not None else "context, not ranked as a cause: ")
    lines = [f'<h3 class="finding-title">{page.t(head + str(f.get("title") or ""))} '
             f'<code class="fid">{page.t(f.get("id") or "")}</code></h3>']
    if f.get("affects"):
        lines.append(f'<p class="affects">affects: {page.t(", ".join(map(str, f["affects"])))}</p>')
    lines.append(f'<p class="estimate">impact: {page.t(_estimate(f))}</p>')
    lines.append(_items(page, "evidence", f.get("evidence")))
    cited = [str(s) for s in f.get("sites") or []]
    if cited:
        links = ", ".join(f'<a href="#{sites[_site_file(s)]}">{page.t(s)}</a>' if _site_file(s) in sites
                          else page.t(s) for s in cited)
        lines.append(f'<p class="sites">source: {links}</p>')
    lines.append(_items(page, "fix", f.get("fix"), "fix"))
    lines.append(_items(page, "do not", f.get("avoid"), "avoid"))
    aside = _notes(page, notes, "notes on this finding") if notes else ""
    return (f'<article class="finding{" with-notes" if notes else ""}"><div class="body">{"".join(lines)}</div>'
            + (f'<aside class="notes-beside">{aside}</aside>' if aside else "") + "</article>\n")


def _estimate(f: dict) -> str:
    """The estimate in words, as ``Impact.text()`` says it."""
    share, reason = f.get("impact"), str(f.get("impact_reason") or "")
    if share is None:
        return f"not estimated: {reason}"
    inputs = f" (from {'; '.join(map(str, f.get('impact_inputs') or []))})" if f.get("impact_inputs") else ""
    try:
        amount = f"~{float(share):.0%}"
    except (TypeError, ValueError):
        amount = str(share)
    return f"{amount} of {f.get('impact_metric') or 'decode tok/s'}, {f.get('impact_basis') or ''}{inputs}: {reason}"


def _items(page: _Page, label: str, values, cls: str = "evidence") -> str:
    values = [v for v in values or [] if v not in (None, "")]
    if not values:
        return ""
    items = "".join(f"<li>{page.t(v)}</li>" for v in values)
    return f'<div class="{cls}"><span class="label">{page.t(label)}</span><ul>{items}</ul></div>'


def _list(page: _Page, title: str, values) -> str:
    items = "".join(f"<li>{page.t(v)}</li>" for v in values or [])
    return f"<h3>{page.t(title)}</h3><ul>{items}</ul>"


def _notes(page: _Page, notes: list[dict], title: str) -> str:
    if not notes:
        return ""
    items = []
    for note in notes:
        when = str(note.get("at") or "undated")
        who = str(note.get("by") or "unknown")
        items.append(f'<li class="note"><span class="note-meta">{page.t(f"{when}, {who}")}</span>'
                     f'<span class="note-text">{page.t(note.get("text") or "")}</span></li>')
    return f'<div class="notes"><h4>{page.t(title)}</h4><ul>{"".join(items)}</ul></div>'


def _site_file(site: str) -> str:
    return short_path(site).rsplit(":", 1)[0]


def _excerpt_anchors(case: CaseDir) -> dict[str, str]:
    return {short_path(e.file): f"excerpt-{i}" for i, e in enumerate(case.excerpts)}


def _excerpts(page: _Page, case: CaseDir) -> str:
    excerpts = case.excerpts
    out = ['<section class="excerpts"><h2>The source lines cited</h2>']
    if not excerpts:
        out.append(f'<p class="empty">{page.t("the case holds no source excerpt")}</p>')
    for i, e in enumerate(excerpts):
        text = case.excerpt_text(e)  # CaseError when it changed after capture
        cited = f", lines {', '.join(map(str, e.lines))} cited" if e.lines else ""
        head = f"{short_path(e.file)} (sha256 {e.sha256[:12]}{cited})"
        out.append(f'<div class="excerpt" id="excerpt-{i}"><h3>{page.t(head)}</h3>'
                   f"<pre>{page.t(text, code=True, cited=True)}</pre></div>")
    return "".join(out) + "</section>\n"


def _evidence(page: _Page, case: CaseDir) -> str:
    files = case.files
    out = ['<section class="evidence"><h2>The evidence</h2>']
    endpoints = case.meta.get("endpoints")
    if isinstance(endpoints, dict) and endpoints:
        out.append(_list(page, "endpoints", [f"{k}: {v}" for k, v in endpoints.items()]))
    if not files:
        out.append(f'<p class="empty">{page.t("the case lists no evidence file")}</p>')
    excerpts = {e.path: i for i, e in enumerate(case.excerpts)}
    for name, what in files.items():
        path = case.path / name
        size = path.stat().st_size
        summary = (f'{page.t(name)} <span class="what">{page.t(what)}</span> '
                   f'<span class="size">{page.t(_size(size))}</span>')
        if name in excerpts:  # its text is above, checked against its hash
            out.append(f'<details><summary>{summary}</summary><p><a href="#excerpt-{excerpts[name]}">'
                       f'{page.t("shown above, under the source lines cited")}</a></p></details>')
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        cut = ""
        if len(text) > MAX_FILE_CHARS:
            end = text.rfind("\n", 0, MAX_FILE_CHARS) + 1 or MAX_FILE_CHARS
            cut = (f"cut here: the first {_size(len(text[:end].encode('utf-8')))} of {_size(size)} are shown; "
                   f"the whole file is {name} in the case directory")
            text = text[:end]
            page.cut.append(name)
        note = f'<p class="cut">{page.t(cut)}</p>' if cut else ""
        out.append(f"<details><summary>{summary}</summary><pre>{page.t(text)}</pre>{note}</details>")
    return "".join(out) + "</section>\n"


def _missing(page: _Page, case: CaseDir) -> str:
    missing = case.missing
    if missing:
        body = "<ul>" + "".join(f"<li><b>{page.t(k)}</b>: {page.t(v)}</li>" for k, v in missing.items()) + "</ul>"
    else:
        body = f'<p class="empty">{page.t("nothing: every piece was collected")}</p>'
    return f'<section class="missing"><h2>What could not be collected</h2>{body}</section>\n'


def _redacted(page: _Page, case: CaseDir, answer: dict | None) -> str:
    lines = []
    for entry in case.meta.get("redacted") or []:
        if isinstance(entry, dict):
            names = ", ".join(map(str, entry.get("names") or [])) or "values"
            count = entry.get("count")
            lines.append(f"{entry.get('file') or 'a file'}: {names}" + (f" ({count})" if count is not None else ""))
    masked = answer.get("masked") if isinstance(answer, dict) else None
    if isinstance(masked, dict) and masked:
        lines.append("the doctor's answer: " + ", ".join(f"{n} {k}" for k, n in sorted(masked.items())))
    counts = page.redactor.counts
    at_capture = (_list(page, "masked before the files were written", lines) if lines
                  else f'<p>{page.t("the capture masked nothing (case.yaml lists no redaction)")}</p>')
    own = [f'<p class="summary"><strong>{page.t("this page: " + redaction_summary(counts))}</strong></p>']
    if hosts_summary(counts):
        own.append(f"<p>{page.t(hosts_summary(counts))}</p>")
    return (f'<section class="redacted"><h2>What was redacted</h2>{at_capture}{"".join(own)}'
            f'<p class="scope">{page.t(_SCOPE)}</p></section>\n')


_SCOPE = ("Values are never listed, only names and kinds. The rules (kit.report.redaction) remove the API keys, "
          "tokens, passwords and private keys of the shapes and names they know, in plain, escaped, base64 and "
          "percent-encoded forms; a secret of another shape under a neutral name can remain: read the page before "
          "sharing it.")


# --- writing


def _check_output(out: Path, case: CaseDir) -> None:
    if out.is_dir():
        raise ReportError(f"cannot write the case page to {out}: it is a directory",
                          hint=f"give a file name, e.g. {out / REPORT_FILE}")
    own = {(case.path / n).resolve() for n in (*case.files, "case.yaml", FINDINGS_FILE)}
    own |= {(case.path / e.path).resolve() for e in case.excerpts}
    if out.resolve() in own:
        raise ReportError(f"the case page would overwrite {out}, a file of the case",
                          hint=f"write it elsewhere, e.g. {case.path / REPORT_FILE}",
                          cli_hint=f"choose another file with -o, e.g. -o {case.path / REPORT_FILE}")
    check_writable(out, "the case page")


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B"


_DOCUMENT = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style></head>
<body><main>
{body}<footer><p>Written by sgl-kit {version}; it opens with no network.</p></footer>
</main></body></html>
"""

_CSS = """
body{margin:0;background:#f6f7f9;color:#1d2330;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:26px;margin:0 0 10px}h2{font-size:20px;margin:34px 0 10px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
h3{font-size:16px;margin:14px 0 6px}h4{font-size:13px;margin:0 0 6px;text-transform:uppercase;color:#5b6474;letter-spacing:.04em}
table.meta{border-collapse:collapse;margin:6px 0}table.meta th{text-align:left;padding:3px 14px 3px 0;color:#5b6474;font-weight:600;vertical-align:top;white-space:nowrap}
table.meta td{padding:3px 0;white-space:pre-wrap;word-break:break-word}
.lead{color:#3c4454}.empty{color:#6b7385;font-style:italic}
.resolution{background:#eaf6ee;border:1px solid #b8dcc3;border-radius:8px;padding:4px 18px 12px}.resolution h2{border:0}
.by{color:#3c4454;margin:6px 0 0}
.finding{display:grid;grid-template-columns:1fr;gap:18px;background:#fff;border:1px solid #d5d9e0;border-radius:8px;padding:10px 18px;margin:12px 0}
.finding.with-notes{grid-template-columns:minmax(0,3fr) minmax(0,2fr)}
@media (max-width:820px){.finding.with-notes{grid-template-columns:1fr}}
.fid{font-size:12px;color:#5b6474;background:#eef0f4;padding:1px 6px;border-radius:4px}
.affects,.estimate,.sites{margin:4px 0}.label{font-weight:600;color:#3c4454}
.evidence ul,.fix ul,.avoid ul{margin:2px 0 6px;padding-left:22px}.fix li{color:#14532d}.avoid li{color:#7c2d12}
.notes-beside{background:#fff8e1;border-left:4px solid #e0b040;border-radius:4px;padding:8px 12px;align-self:start}
.notes{margin:8px 0}.notes ul{list-style:none;margin:0;padding:0}.note{margin:0 0 8px}
.note-meta{display:block;font-size:12px;color:#6b5a20}.note-text{white-space:pre-wrap}
section.answer>.notes{background:#fff8e1;border-left:4px solid #e0b040;border-radius:4px;padding:8px 12px}
pre{background:#11151c;color:#e6e9ef;padding:10px 12px;border-radius:6px;overflow:auto;max-height:560px;font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre}
pre .cited{background:#3a3210;color:#ffe9a8;display:inline-block;min-width:100%}
pre.cmd{white-space:pre-wrap;word-break:break-all}
details{background:#fff;border:1px solid #d5d9e0;border-radius:6px;margin:6px 0;padding:4px 12px}
summary{cursor:pointer;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:14px}
.what{font-family:system-ui,sans-serif;color:#3c4454;margin-left:8px}.size{color:#6b7385;margin-left:8px;font-size:12px}
.cut{color:#7c2d12;font-style:italic}
a{color:#1f5fbf}footer{margin-top:40px;color:#6b7385;font-size:13px}
"""
