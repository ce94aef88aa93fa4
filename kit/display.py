"""Rendering for notebooks: the one module that imports IPython, ipywidgets and plotly, and only lazily.

Importing this module costs nothing: every rendering library is imported inside the
function that needs it, so the rest of the kit (and the CLI) never loads them.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any

__all__ = ["ProgressWidget", "ab_comparison", "filtered_table", "hypothesis_picker", "in_notebook", "metrics_timeline",
           "rate_distribution", "steps_chart", "timeline"]

_OK, _FAILED, _WAIT = "#1f77b4", "#d62728", "#bbbbbb"


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
    """A and B side by side, and the bootstrap distribution of B - A with its interval."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    c = comparison
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55],
                        subplot_titles=("Decode tok/s per request", f"Bootstrap of B - A: {c.verdict}"))
    for name, rates in ((f"A {c.a}", c.rates_a), (f"B {c.b}", c.rates_b)):
        fig.add_trace(go.Box(y=rates, name=name, boxpoints="all", jitter=0.4, pointpos=0, boxmean=True),
                      row=1, col=1)
    fig.add_trace(go.Histogram(x=c.boot_diffs, nbinsx=60, name="B - A", marker_color="#7f7f7f",
                               showlegend=False), row=1, col=2)
    for x, dash in ((c.ci_low, "dash"), (c.ci_high, "dash"), (c.diff, "solid")):
        fig.add_vline(x=x, line_dash=dash, line_color="black", row=1, col=2)
    fig.add_vline(x=0, line_color=_FAILED, row=1, col=2)
    fig.update_layout(template="plotly_white", showlegend=False,
                      title=f"B - A = {c.diff:+.3f} tok/s ({c.rel_diff:+.2%}), "
                            f"{c.confidence:.0%} CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}]")
    fig.update_xaxes(title_text="tok/s", row=1, col=2)
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


def steps_chart(validation: Any) -> Any:
    """Decode tok/s per request at each step of a validation, with the baseline and the ceiling as lines."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in validation.results:
        name = "as found" if r.step is None else f"+ {r.step.title}"
        rates = [x.decode_tok_s for x in r.run.results if x.ok and x.decode_tok_s is not None]
        fig.add_trace(go.Box(y=rates, name=name[:48], boxpoints="all", jitter=0.4, pointpos=0, boxmean=True,
                             hovertemplate="%{y:.2f} tok/s<extra></extra>"))
    if validation.baseline_tok_s:
        fig.add_hline(y=validation.baseline_tok_s, line_dash="dash", annotation_text="baseline")
    if validation.ceiling_tok_s:
        fig.add_hline(y=validation.ceiling_tok_s, line_dash="dot", annotation_text="roofline")
    fig.update_layout(title="Decode tok/s per request, one fix at a time", yaxis_title="tok/s",
                      showlegend=False, template="plotly_white")
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
