"""Rendering for notebooks: the one module that imports IPython, ipywidgets and plotly, and only lazily.

Importing this module costs nothing: every rendering library is imported inside the
function that needs it, so the rest of the kit (and the CLI) never loads them.
"""

from __future__ import annotations

import html
import re
import shlex
import sys
import time
from typing import Any

from kit._text import wrap

__all__ = ["ProgressWidget", "Text", "ab_comparison", "breakable", "diagnosis_view", "filtered_table", "html_table",
           "hypothesis_picker", "in_notebook", "metrics_timeline", "pre", "rate_distribution", "steps_chart",
           "sweep_fronts", "td", "timeline"]

_OK, _FAILED, _WAIT = "#1f77b4", "#d62728", "#bbbbbb"


# --------------------------------------------------------------------------- HTML for tables and text
#
# JupyterLab right-aligns table cells and lets <pre> break anywhere; its sanitizer keeps inline styles and
# <wbr> (not <style>), so the layout is inline. Text wraps only at spaces and at the break points
# breakable() adds: an identifier, a path or a flag is never cut mid-word.

CELL_STYLE = "text-align:left;vertical-align:top;padding:3px 8px 3px 0"
TABLE_STYLE = "width:100%;table-layout:fixed;border-collapse:collapse;word-break:normal;overflow-wrap:normal"
PRE_STYLE = "white-space:pre-wrap;word-break:normal;overflow-wrap:break-word"
# A token up to _LONGEST characters is never broken: one with a hyphen (a flag such as --tp-size, where the
# browser would break) is held on one line. Inside a longer token a line may break after these: the end of a
# dotted part, a path step, an opening bracket, a separator; and, inside a part still longer, after `_`
# (each part with a hyphen held whole, as a short token is).
# Never between two letters or digits: the browser fills each line greedily and uses every break offered.
_LONGEST = 36
_BREAK_AFTER = re.compile(r"(?<=\S)[./(\[,:=](?=[^\s./(\[,:=)\]])")
_BREAK_SNAKE = re.compile(r"(?<=[^\s_])_(?=[^\s_.])")
_NOWRAP = "<span style='white-space:nowrap'>{}</span>"


def _split_after(text: str, pattern: re.Pattern) -> list[str]:
    """``text`` in pieces, each ending where ``pattern`` matches (the break points of a long token)."""
    ends = [m.end() for m in pattern.finditer(text)]
    return [text[a:b] for a, b in zip([0, *ends], [*ends, len(text)], strict=True) if b > a]


def _whole(part: str) -> str:
    """``part`` escaped, held on one line when it has a hyphen the browser would break at."""
    return _NOWRAP.format(html.escape(part)) if "-" in part.strip("-") else html.escape(part)


def _token(token: str) -> str:
    if not token.strip():
        return html.escape(token)
    if len(token) <= _LONGEST:
        return _whole(token)
    parts = [p for part in _split_after(token, _BREAK_AFTER)
             for p in (_split_after(part, _BREAK_SNAKE) if len(part) > _LONGEST else [part])]
    return "<wbr>".join(_whole(p) for p in parts)


def breakable(text: str) -> str:
    """``text`` as HTML (escaped) that wraps at spaces, and inside a long token only at the ``<wbr>`` break
    points added after ``. / ( [ , : =`` (and ``_`` in a long part): ``self.enforce_piecewise_cuda_graph``
    may break after ``self.``, never inside a word; a short token with a hyphen is kept whole."""
    return "".join(_token(t) for t in re.split(r"(\s+)", str(text)))


def pre(text: str) -> str:
    """Preformatted text (a command, a log) that wraps where breakable() does, keeping its spaces."""
    return f"<pre style='{PRE_STYLE}'>{breakable(text)}</pre>"


class Text(str):
    """Text for a notebook cell's result: shown like print() in a terminal and as its plain text, and in
    JupyterLab as preformatted text that wraps at spaces, never inside a word (print()'s output may)."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        return pre(str(self))


def td(inner: str, *, colspan: int = 1, head: bool = False, style: str = "") -> str:
    """One left-aligned, top-aligned cell of ``inner`` (HTML)."""
    tag = "th" if head else "td"
    span = f" colspan='{colspan}'" if colspan > 1 else ""
    return f"<{tag}{span} style='{CELL_STYLE};{style}'>{inner}</{tag}>"


def html_table(head: list[str], rows: list[str | list[str]], widths: list[str] | None = None,
               row_styles: list[str] | None = None) -> str:
    """A table that fills the output's width: ``head`` the column titles (text), each row a list of cells'
    HTML (or a row already made of td() cells), ``widths`` the CSS width of each column ("" for the rest)."""
    cols = "".join(f"<col style='width:{w}'>" if w else "<col>" for w in widths) if widths else ""
    out = [f"<table style='{TABLE_STYLE}'>", f"<colgroup>{cols}</colgroup>" if cols else "",
           "<tr>" + "".join(td(html.escape(h), head=True) for h in head) + "</tr>"]
    for n, row in enumerate(rows):
        style = f" style='{row_styles[n]}'" if row_styles and row_styles[n] else ""
        cells = row if isinstance(row, str) else "".join(td(c) for c in row)
        out.append(f"<tr{style}>{cells}</tr>")
    return "".join(out) + "</table>"


class DiagnosisView:
    """A doctor's Diagnosis laid out for a notebook: findings one to a block (title, impact and fix on one
    row, the evidence across the table below it), left-aligned; with no finding, no empty table but what
    kept the rules from asking; the launch with every fix only when it changes the launch. Everything
    else (its text, its findings, its attributes) is the Diagnosis's own."""

    def __init__(self, diagnosis: Any) -> None:
        self.diagnosis = diagnosis

    def __getattr__(self, name: str) -> Any:
        return getattr(self.diagnosis, name)

    def __repr__(self) -> str:
        return self.diagnosis.to_text()

    def _repr_html_(self) -> str:
        d, e = self.diagnosis, html.escape
        n = len(d.findings)
        count = f"{n} finding{'s' if n != 1 else ''}" if n else "no finding"
        out = [f"<p><b>sgl-kit doctor</b>: {e(str(d.target))}, sglang {e(d.version or '?')}: {count}</p>"]
        if d.problems:
            out.append("<p>could not read everything:</p>" + _items(d.problems))
        answer = getattr(d, "answer", None)
        if answer is not None:  # the answer's shape, above the findings' details
            rows = [td(f"<b>{e(label)}</b>") + td(breakable(text)) for label, text in answer.rows()]
            out.append(html_table(["the answer", ""], rows, ["11em", ""], [""] * len(rows)))
        if getattr(d, "load_seen", None):
            out.append("<p>the load seen:</p>" + _items(d.load_seen))
        if d.findings:
            out.append(_findings_table(d.findings))
        elif answer is not None and answer.verdict == "fine":
            pass
        elif d.unanswered:
            out.append("<p>no finding from the evidence given; the rules could not ask these questions "
                       "(each with the evidence that would answer it):</p>" + _items(d.unanswered))
        else:
            out.append("<p>no rule found throughput left on the table.</p>")
        apart = getattr(d, "not_applicable", None) or []
        if apart:
            out.append(_details(f"found, but not on this hardware or workload ({len(apart)}; not causes)",
                                _items([f"{f.id}: {f.title}: does not apply: {f.not_here}" for f in apart])))
        out.append(_fixed_launch(d))
        if d.roofline is not None:
            out.append(d.roofline._repr_html_() if hasattr(d.roofline, "_repr_html_") else pre(d.roofline.to_text()))
        if d.findings and d.unanswered:
            out.append(_details(f"questions left open ({len(d.unanswered)})", _items(d.unanswered)))
        own, known = d.own_questions, d.known_issue_questions
        if own:
            out.append(_details(f"what else to check ({len(own)})", _items(own)))
        if known:
            out.append(_details(f"known issues of this release that may apply ({len(known)})",
                                _items(known)))
        return "<div>" + "".join(out) + "</div>"


def diagnosis_view(diagnosis: Any) -> DiagnosisView:
    """``diagnosis`` (kit.doctor's) laid out for a notebook: see DiagnosisView."""
    return DiagnosisView(diagnosis)


def _items(texts: Any) -> str:
    return "<ul style='margin:0 0 0.5em 0'>" + "".join(f"<li>{breakable(t)}</li>" for t in texts) + "</ul>"


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>{body}</details>"


def _findings_table(findings: Any) -> str:
    e = html.escape
    rows, styles = [], []
    for n, f in enumerate(findings, 1):
        est = f.estimate
        impact = "not estimated" if est.share is None else f"~{est.share:.0%} of {est.metric} ({est.basis})"
        # A flag and its value stay on one line when they fit (a flag may hold hyphens the browser would break at).
        fixes = [f"<code style='white-space:{'nowrap' if len(str(c)) <= _LONGEST else 'normal'}'>"
                 f"{breakable(str(c))}</code>" for c in f.changes] + [breakable(a) for a in f.advice]
        fixes += [f"<i>do not:</i> {breakable(a)}" for a in f.avoid]
        fixes += [f"<i>check:</i> <code>{e(str(c))}</code> is predicted to change nothing here ({breakable(why)})"
                  for c, why in getattr(f, "checks", []) or []]
        rows.append(td(str(n)) + td(f"<b>{e(f.title)}</b><br><code>{e(f.id)}</code>"
                                     + (f" <small>{e(', '.join(f.affects))}</small>" if f.affects else ""))
                    + td(f"{e(impact)}<br><small>{breakable(est.reason)}</small>")
                    + td("<br>".join(fixes) or "<small>no change of flags</small>"))
        styles.append("border-top:1px solid #ccc")
        sites = f"<small>source: {breakable(', '.join(f.sites))}</small>" if f.sites else ""
        rows.append(td("") + td(_items(f.evidence) + sites, colspan=3, style="padding-bottom:8px"))
        styles.append("")
    return html_table(["#", "finding", "impact", "fix"], rows, ["2em", "30%", "34%", ""], styles)


def _fixed_launch(d: Any) -> str:
    """The launch with every fix, only when it differs from the launch as found."""
    fixed, command, check = d.fixed_command, d.command, d.fix_check
    if not fixed or (command and fixed == shlex.join(command)):
        return ""
    if check is not None and check.status in ("refused", "may be refused"):
        return (f"<p>the launch with every fix is not offered: {breakable(check.detail)}; apply the fixes one "
                "at a time</p>")
    status = f"<p><small>({html.escape(check.status)}: {breakable(check.detail)})</small></p>" \
        if check is not None else ""
    return "<p>the launch with every fix:</p>" + pre(fixed) + status


def in_notebook() -> bool:
    """True inside a Jupyter kernel. Looks only at modules already loaded, so it imports nothing."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class ProgressWidget:
    """A notebook progress bar for a benchmark: requests done, failures, aggregate tok/s.

    Called with each finished request (anything with ``ok`` and ``output_tokens``).
    """

    def __init__(self, total: int, description: str = "bench") -> None:
        import ipywidgets as widgets
        from IPython.display import display

        self.total = total
        self.bar = widgets.IntProgress(value=0, min=0, max=max(1, total), description=description[:24],
                                       bar_style="info", layout=widgets.Layout(width="60%"))
        self.label = widgets.Label(value=f"0/{total}")
        self.box = widgets.HBox([self.bar, self.label])
        self.done = self.failed = self.tokens = 0
        self.started = time.perf_counter()
        self.handle = display(self.box, display_id=True)

    def __call__(self, result: Any) -> None:
        self.done += 1
        self.failed += not result.ok
        self.tokens += result.output_tokens
        elapsed = time.perf_counter() - self.started
        self.bar.value = self.done
        if self.failed:
            self.bar.bar_style = "warning"
        rate = f"{self.tokens / elapsed:.0f} tok/s" if elapsed > 0 else ""
        self.label.value = f"{self.done}/{self.total}, {self.failed} failed, {rate}"

    def close(self) -> None:
        self.bar.bar_style = "danger" if self.failed == self.done and self.done else (
            "warning" if self.failed else "success")
        # The saved output keeps the live bar for JupyterLab and, for a report or a viewer without the
        # widgets' JavaScript, the same facts as text (instead of the widget's repr).
        if self.handle is not None:
            bundle = dict(self.box._repr_mimebundle_() or {})
            bundle["text/plain"] = self.summary()
            self.handle.update(bundle, raw=True)

    def summary(self) -> str:
        elapsed = time.perf_counter() - self.started
        rate = f", {self.tokens / elapsed:.0f} tok/s in all" if elapsed > 0 else ""
        return (f"{self.bar.description}: {self.done}/{self.total} requests, {self.failed} failed, "
                f"{self.tokens} output tokens{rate}, {elapsed:.1f} s")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def rate_distribution(runs: dict) -> Any:
    """Per-request decode tok/s of one or more runs: a box with every request as a point."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, run in runs.items():
        rates = [r.decode_tok_s for r in run.results if r.ok and r.decode_tok_s is not None]
        fig.add_trace(go.Box(y=rates, name=str(name), boxpoints="all", jitter=0.4, pointpos=0,
                             boxmean=True, hovertemplate="%{y:.2f} tok/s<extra></extra>"))
    fig.update_layout(title="Decode tok/s per request (tokens after the first chunk / time after it)",
                      yaxis_title="tok/s", showlegend=False, template="plotly_white")
    return fig


def timeline(run: Any) -> Any:
    """Each request as a line: waiting (grey), to the first token, then decoding; failures in red."""
    import plotly.graph_objects as go

    fig = go.Figure()
    segments = {"wait": ([], []), "decode": ([], []), "failed": ([], [])}
    for r in run.results:
        start = r.start_s
        end = start + (r.e2e_s or 0.0)
        if r.wait_s:
            _segment(segments["wait"], start - r.wait_s, start, r.index)
        _segment(segments["failed" if not r.ok else "decode"], start, end, r.index)
    styles = {"wait": (_WAIT, "waiting to be sent"), "decode": (_OK, "in flight"), "failed": (_FAILED, "failed")}
    for key, (xs, ys) in segments.items():
        if xs:
            colour, label = styles[key]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": colour, "width": 3}, name=label))
    firsts = [(r.start_s + r.ttft_s, r.index) for r in run.results if r.ttft_s is not None]
    if firsts:
        fig.add_trace(go.Scatter(x=[x for x, _ in firsts], y=[y for _, y in firsts], mode="markers",
                                 marker={"symbol": "line-ns-open", "size": 10, "color": "black"},
                                 name="first token"))
    fig.update_layout(title=f"Timeline of {run.name}", xaxis_title="seconds since the run started",
                      yaxis_title="request", template="plotly_white")
    return fig


def _segment(store: tuple[list, list], x0: float, x1: float, y: int) -> None:
    xs, ys = store
    xs.extend([x0, x1, None])
    ys.extend([y, y, None])


def ab_comparison(comparison: Any) -> Any:
    """A and B side by side, and the distribution of B - A with its interval: the bootstrap's for two runs, the
    pairs' differences (with the noise floor shaded) for interleaved blocks.

    The boxes are labelled A and B; which run each is (its id) is in the legend and on hover, so the
    plot keeps its area for the data."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    c = comparison
    unit = getattr(c, "unit", "tok/s")
    what = "Time to first token" if unit == "ms" else "Decode tok/s"
    paired = getattr(c, "method", "") == "interleaved blocks"
    titles = ((f"{what}, mean of each block", f"Each pair's B - A: {c.verdict}") if paired else
              (f"{what} per request", f"Bootstrap of B - A: {c.verdict}"))
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55], subplot_titles=titles)
    for side, run, rates in (("A", c.a, c.rates_a), ("B", c.b, c.rates_b)):
        fig.add_trace(go.Box(y=rates, x=[side] * len(rates), name=f"{side}: {run}", boxpoints="all", jitter=0.4,
                             pointpos=0, boxmean=True,
                             hovertemplate=f"{side}: {html.escape(str(run))}<br>%{{y:.2f}} {unit}<extra></extra>"),
                      row=1, col=1)
    fig.add_trace(go.Histogram(x=c.boot_diffs, nbinsx=12 if paired else 60, name="B - A", marker_color="#7f7f7f",
                               showlegend=False), row=1, col=2)
    floor = getattr(c, "noise_floor", None)
    if floor:
        fig.add_vrect(x0=-floor, x1=floor, fillcolor="#bbbbbb", opacity=0.25, line_width=0, row=1, col=2,
                      annotation_text="noise floor", annotation_position="top left")
    for x, dash in ((c.ci_low, "dash"), (c.ci_high, "dash"), (c.diff, "solid")):
        fig.add_vline(x=x, line_dash=dash, line_color="black", row=1, col=2)
    fig.add_vline(x=0, line_color=_FAILED, row=1, col=2)
    fig.update_layout(template="plotly_white", showlegend=True, height=420,
                      legend={"orientation": "h", "x": 0, "y": -0.22, "xanchor": "left", "yanchor": "top"},
                      margin={"b": 90},
                      title=f"B - A = {c.diff:+.3f} {unit} ({c.rel_diff:+.2%}), "
                            f"{c.confidence:.0%} CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}]")
    fig.update_xaxes(type="category", tickangle=0, row=1, col=1)
    fig.update_yaxes(title_text=unit, row=1, col=1)
    fig.update_xaxes(title_text=f"B - A, {unit}", row=1, col=2)
    return fig


_SWEEP_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")


def sweep_fronts(sweeps: dict, *, fronts: dict | None = None, title: str = "") -> Any:
    """One or more sweeps side by side. Left: per-request decode tok/s (y) against total output tok/s (x), each
    point labelled by its concurrency, the Pareto front of each sweep drawn as a line through its points.
    Right: time to first token against concurrency (mean, and p90 dotted).

    ``sweeps`` maps a name to a kit.bench Sweep (anything with ``points`` of ``concurrency``,
    ``per_request_tok_s``, ``total_tok_s``, ``ttft_mean_ms``, ``ttft_p90_ms``); ``fronts`` maps the same
    names to the points on each one's front."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45],
                        subplot_titles=("Decode tok/s per request against total (labels: concurrency)",
                                        "Time to first token"))
    levels: set[int] = set()
    for n, (name, sweep) in enumerate(sweeps.items()):
        colour = _SWEEP_COLOURS[n % len(_SWEEP_COLOURS)]
        rated = [p for p in sweep.points if p.per_request_tok_s is not None and p.total_tok_s is not None]
        fig.add_trace(go.Scatter(
            x=[p.total_tok_s for p in rated], y=[p.per_request_tok_s for p in rated], mode="markers+text",
            text=[f"c={p.concurrency}" for p in rated], textposition="top center", name=str(name),
            legendgroup=str(name), marker={"color": colour, "size": 9},
            hovertemplate=f"{html.escape(str(name))}<br>%{{text}}<br>total %{{x:.1f}} tok/s<br>"
                          "per request %{y:.2f} tok/s<extra></extra>"), row=1, col=1)
        front = sorted((fronts or {}).get(name, []), key=lambda p: p.total_tok_s)
        if len(front) > 1:
            fig.add_trace(go.Scatter(x=[p.total_tok_s for p in front], y=[p.per_request_tok_s for p in front],
                                     mode="lines", line={"color": colour, "dash": "dot"},
                                     name=f"{name}: Pareto front", legendgroup=str(name), hoverinfo="skip"),
                          row=1, col=1)
        timed = [p for p in sweep.points if p.ttft_mean_ms is not None]
        levels.update(p.concurrency for p in sweep.points)
        fig.add_trace(go.Scatter(x=[p.concurrency for p in timed], y=[p.ttft_mean_ms for p in timed],
                                 mode="lines+markers", name=f"{name}: mean", legendgroup=str(name),
                                 line={"color": colour}, showlegend=False,
                                 hovertemplate="c=%{x}: mean %{y:.1f} ms<extra></extra>"), row=1, col=2)
        fig.add_trace(go.Scatter(x=[p.concurrency for p in timed], y=[p.ttft_p90_ms for p in timed],
                                 mode="lines", name=f"{name}: p90", legendgroup=str(name),
                                 line={"color": colour, "dash": "dot"}, showlegend=False,
                                 hovertemplate="c=%{x}: p90 %{y:.1f} ms<extra></extra>"), row=1, col=2)
    fig.update_xaxes(title_text="total output tok/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="decode tok/s per request", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="concurrency (dotted: p90)", type="log", tickvals=sorted(levels),
                     ticktext=[str(c) for c in sorted(levels)], row=1, col=2)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=2)
    fig.update_layout(template="plotly_white", height=460, title=title or "Sweep: per request and in all",
                      legend={"orientation": "h", "x": 0, "y": -0.2, "xanchor": "left", "yanchor": "top"},
                      margin={"b": 90})
    return fig


def filtered_table(frame: Any, column: str, *, start: str | None = None, title: str = "") -> Any:
    """A table with a drop-down that shows only the rows of one value of ``column`` (or all of them)."""
    import ipywidgets as widgets
    from IPython.display import display

    values = ["(all)"] + sorted(str(v) for v in frame[column].dropna().unique())
    choice = widgets.Dropdown(options=values, value=start if start in values else "(all)",
                              description=column, layout=widgets.Layout(width="320px"))
    count = widgets.Label()
    out = widgets.Output()

    def show(change=None) -> None:
        rows = frame if choice.value == "(all)" else frame[frame[column].astype(str) == choice.value]
        count.value = f"{len(rows)} of {len(frame)} rows"
        out.clear_output(wait=True)
        with out:
            display(rows.style.hide(axis="index") if hasattr(rows, "style") else rows)

    choice.observe(show, names="value")
    show()
    header = [widgets.HTML(f"<b>{title}</b>")] if title else []
    return WithStatic(widgets.VBox([*header, widgets.HBox([choice, count]), out]),
                      (f"<p><b>{html.escape(title)}</b></p>" if title else "")
                      + (frame.to_html(index=False) if hasattr(frame, "to_html") else html.escape(str(frame))))


class WithStatic:
    """A widget that also carries its data as HTML: JupyterLab shows the live widget, while a shared report
    or a viewer without the widgets' JavaScript shows the data (every row), not the widget's repr."""

    def __init__(self, widget: Any, static_html: str) -> None:
        self.widget = widget
        self.static_html = static_html

    def __getattr__(self, name: str) -> Any:
        return getattr(self.widget, name)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        bundle["text/html"] = self.static_html
        bundle["text/plain"] = "(the table above, as HTML)"
        return bundle


def step_label(step: Any, width: int = 32) -> str:
    """A step's tick label: what it changes (its flags, or the machine), never the problem it fixes: each
    flag on its own line, anything else wrapped at spaces to ``width`` characters (plotly breaks at <br>)."""
    if step is None:
        return "as found"
    flags = [f"+ {c}" for c in getattr(step, "changes", [])]
    lines = flags or wrap(getattr(step, "label", "") or step.title, width).split("\n")
    return "<br>".join(html.escape(line) for line in lines)


def steps_chart(validation: Any) -> Any:
    """Decode tok/s per request at each step of a validation, with the baseline and the ceiling as lines.

    Each step is labelled by its fix (``+ --speculative-num-steps 3``); the problem it fixes is on hover."""
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = []
    for r in validation.results:
        label = step_label(r.step)
        labels.append(label)
        rates = [x.decode_tok_s for x in r.run.results if x.ok and x.decode_tok_s is not None]
        fixes = "the launch as found" if r.step is None else html.escape(r.step.title)
        fig.add_trace(go.Box(y=rates, x=[label] * len(rates), name=label, boxpoints="all", jitter=0.4, pointpos=0,
                             boxmean=True, hovertemplate=f"{fixes}<br>%{{y:.2f}} tok/s<extra></extra>"))
    # The two references sit on opposite sides (one label above its line at the left, one below at the
    # right), so they never cover each other however close the two values are.
    if validation.baseline_tok_s:
        fig.add_hline(y=validation.baseline_tok_s, line_dash="dash", annotation_position="top left",
                      annotation_text=f"baseline {validation.baseline_tok_s:g} tok/s")
    if validation.ceiling_tok_s:
        fig.add_hline(y=validation.ceiling_tok_s, line_dash="dot", annotation_position="bottom right",
                      annotation_text=f"roofline {validation.ceiling_tok_s:.1f} tok/s")
    lines = max((label.count("<br>") + 1 for label in labels), default=1)
    fig.update_layout(title="Decode tok/s per request, one fix at a time", yaxis_title="decode tok/s per request",
                      showlegend=False, template="plotly_white", height=420 + 18 * lines,
                      margin={"b": 40 + 18 * lines})
    fig.update_xaxes(type="category", tickangle=0, automargin=True)
    return fig


def metrics_timeline(frame: Any, *, restarts: Any = (), panels: Any = None, title: str = "What the server did") -> Any:
    """Time series in the kit.metrics shape (time, metric, series, value, source), one panel per metric.

    ``panels`` maps a panel title to a metric name (default: one panel per metric in the frame);
    each series of each source is its own line (Prometheus solid, the decode log dotted), and
    each restart time (epoch seconds) a dashed vertical line across all panels.
    """
    import datetime as dt

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if panels is None:
        panels = {m: m for m in dict.fromkeys(frame["metric"])} if len(frame) else {}
    shown = {label: metric for label, metric in panels.items() if len(frame) and (frame["metric"] == metric).any()}
    rows = max(1, len(shown))
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=list(shown) or ["no series in this span"])
    for row, (label, metric) in enumerate(shown.items(), 1):
        part = frame[frame["metric"] == metric]
        for (source, series), points in part.groupby(["source", "series"], sort=False):
            name = f"{label} [{source}]" + (f" {series}" if series and len(part["series"].unique()) > 1 else "")
            fig.add_trace(go.Scattergl(x=points["time"], y=points["value"], mode="lines", name=name[:80],
                                       line={"dash": "dot" if source == "log" else "solid", "width": 1.5},
                                       connectgaps=False), row=row, col=1)
    for at in restarts:
        x = dt.datetime.fromtimestamp(float(at), tz=dt.timezone.utc)
        fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=1, xref="x", yref="paper",
                      line={"color": _FAILED, "dash": "dash", "width": 1})
    fig.update_layout(title=title, template="plotly_white", height=max(320, 190 * rows), showlegend=True,
                      legend={"orientation": "h", "y": -0.08})
    return fig


def hypothesis_picker(choices: Any, start: Any = None, *, description: str = "hypothesis") -> Any:
    """A drop-down of hypotheses (kit.practice.choices()) to pick the suspected cause from. Its ``value`` is
    the Choice picked, or None while it shows "(pick one)"; ``start`` (a Choice) is picked at first."""
    import ipywidgets as widgets

    options = [("(pick one)", None)] + [(c.title, c) for c in choices]
    picker = widgets.Dropdown(options=options, value=start if start in [c for _, c in options] else None,
                              description=description, layout=widgets.Layout(width="720px"),
                              style={"description_width": "initial"})
    picked = start.title if start is not None else "(none yet: pick one above)"
    return WithStatic(picker, f"<p><b>{html.escape(description)}</b>: {html.escape(picked)}</p>")
