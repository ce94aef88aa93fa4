"""The HTML report: nbconvert's lab template, self-contained, plotly figures drawn by an inlined plotly.js.

The page loads nothing from the network, so it opens on a laptop with no connection and
no Jupyter:

- nbconvert's template is extended with the CDN parts left out (require.js, MathJax,
  mermaid, the widgets HTML manager); its styles are already inlined by the lab template;
- a plotly figure (``application/vnd.plotly.v1+json``) becomes a ``<div>`` and a
  ``Plotly.newPlot(...)`` call; plotly.js itself, from the installed ``plotly`` package, is
  inlined once in the head (its ``http://`` string literals written ``http:\\/\\/``, the
  same string in JavaScript, so no ``href="http..."`` text stands in the page);
- plotly's own notebook-mode outputs keep working: the output that carries plotly.js is
  dropped (the head has it) and a small ``require`` stand-in hands their
  ``require(["plotly"], ...)`` the inlined library;
- a widget output is shown by its text fallback, since its live view needs the widgets
  JavaScript from a CDN; the page says so;
- an output script that names a URL it could load (anything but SVG namespaces and
  plotly's own config), or configures require.js paths, is left out, and the page says so;
- a last pass over every tag removes ``<script src>``, ``<link href>`` and ``<base>`` that
  point at the network, turns other such ``src``/``href``/``srcset``... into
  ``data-remote-url`` (a link keeps its address as a tooltip), and removes ``@import`` and
  ``url(http...)`` from styles.
"""

from __future__ import annotations

import html
import json
import re
import uuid

__all__ = ["PLOTLY_MIME", "drop_library_outputs", "plotly_script", "prepare_notebook", "render_html", "require_shim",
           "sanitize_network"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block rawcell scoped %}
{%- if cell.metadata.get('kit_report_html') -%}{{ cell.source }}{%- else -%}{{ super() }}{%- endif -%}
{% endblock rawcell %}
"""

_CSS = """
.kit-report-header { padding: 16px 24px 8px; border-bottom: 1px solid #ddd; font-family: var(--jp-ui-font-family); }
.kit-report-header h1 { margin: 0 0 8px; font-size: 1.6em; }
.kit-report-meta td, .kit-report-meta th { text-align: left; padding: 2px 12px 2px 0; }
.kit-report-footer { padding: 12px 24px; border-top: 1px solid #ddd; font-family: var(--jp-ui-font-family); }
.kit-report-notebook { margin: 24px 0 8px; padding: 6px 12px; background: #f3f3f3; font-weight: bold;
  font-family: var(--jp-ui-font-family); }
.kit-report-note { color: #555; font-size: 0.9em; }
.kit-plot { width: 100%; }
"""

# Lets `require(["plotly"], f)` in plotly's own notebook output run against the inlined library.
_REQUIRE_SHIM = """<script type="text/javascript">
window.PlotlyConfig = {MathJaxConfig: 'local'};
if (typeof window.require !== 'function') {
  window.require = function (deps, callback) {
    if (typeof deps === 'function') { return deps(); }
    var mods = (deps || []).map(function (d) { return d === 'plotly' ? window.Plotly : undefined; });
    if (callback) { callback.apply(null, mods); }
  };
  window.require.config = function () {};
  window.require.undef = function () {};
  window.requirejs = window.require;
}
</script>"""

_PLOTLY_BUNDLE = re.compile(r"plotly\.js v\d|define\(\s*['\"]plotly['\"]")
# A URL in a script: what it may fetch. SVG/XHTML namespace names are no fetch; plotly's figure
# scripts name plot.ly in their config without fetching it.
_JS_URL = re.compile(r"(?:(?:https?|wss?|ftp):)?//(?P<host>[A-Za-z0-9.-]+\.[A-Za-z]{2,})", re.I)
_NOT_FETCHED = re.compile(r"(?:^|\.)(?:w3\.org|plot\.ly|plotly\.com)$", re.I)
_REQUIRE_PATHS = re.compile(r"\brequire(?:js)?\.config\s*\(")
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.S | re.I)


# --- outputs made offline


def prepare_notebook(nb: dict, index: int, name: str, stats: dict) -> list[dict]:
    """The cells of one redacted notebook, ready for the exporter: a heading cell, figures, widget text."""
    widget_state = ((nb.get("metadata") or {}).get("widgets") or {}).get(WIDGET_STATE, {}).get("state", {})
    cells = [{"cell_type": "raw", "id": f"kit-nb{index}", "metadata": {"kit_report_html": True},
              "source": f'<div class="kit-report-notebook">{html.escape(name)}</div>'}]
    for n, cell in enumerate(nb.get("cells", [])):
        cell = dict(cell)
        cell["id"] = f"nb{index}-{n}"
        cell["metadata"] = {k: v for k, v in (cell.get("metadata") or {}).items() if k != "kit_report_html"}
        if cell.get("cell_type") == "code":
            cell["outputs"] = [o for o in (_offline(dict(o), widget_state, stats) for o in cell.get("outputs", []))
                               if o is not None]
        cells.append(cell)
    return cells


def drop_library_outputs(nb, stats: dict):
    """Outputs that only carry plotly.js itself (plotly's notebook mode): the page inlines it once anyway."""
    for cell in nb.get("cells", []):
        outputs = cell.get("outputs")
        if not outputs:
            continue
        kept = [o for o in outputs if not _is_library(o)]
        stats["scripts"] += len(outputs) - len(kept)
        cell["outputs"] = kept
    return nb


def _is_library(output) -> bool:
    page = (output.get("data") or {}).get("text/html")
    page = "".join(page) if isinstance(page, list) else page
    return isinstance(page, str) and len(page) > 1_000_000 and bool(_PLOTLY_BUNDLE.search(page[:200_000]))


_MAP_TRACES = {"scattergeo", "choropleth", "scattermapbox", "choroplethmapbox", "densitymapbox", "scattermap",
               "choroplethmap", "densitymap"}


def _offline(output: dict, widget_state: dict, stats: dict) -> dict | None:
    data = output.get("data")
    if not isinstance(data, dict):
        return output
    data = dict(data)
    output["data"] = data
    if PLOTLY_MIME in data:
        stats["plots"] += 1
        traces = (data[PLOTLY_MIME] or {}).get("data", []) if isinstance(data[PLOTLY_MIME], dict) else []
        if any(isinstance(t, dict) and t.get("type") in _MAP_TRACES for t in traces):
            stats["maps"] = stats.get("maps", 0) + 1
        return {**output, "data": {"text/html": _figure_html(data[PLOTLY_MIME])}}
    if WIDGET_VIEW in data:
        view = data.pop(WIDGET_VIEW)
        stats["widgets"] += 1
        if not any(k.startswith(("text/", "image/")) for k in data):
            data["text/plain"] = _widget_text(view, widget_state)
    data.pop(WIDGET_STATE, None)  # the state of widgets, shown by none of them here
    if "application/json" in data and not any(k.startswith(("text/", "image/")) for k in data):
        data["text/plain"] = json.dumps(data["application/json"], indent=2, default=str)
    if "application/javascript" in data and _fetches(str(data["application/javascript"])):
        del data["application/javascript"]
        stats["scripts"] += 1
        if not data:
            data["text/plain"] = "[a script that loads code from the network, left out of this offline report]"
    page = data.get("text/html")
    if isinstance(page, str):
        if _is_library(output):
            stats["scripts"] += 1
            return None
        if "Plotly.newPlot" in page or "require([\"plotly\"]" in page:
            stats["plots"] += 1
        data["text/html"] = _SCRIPT.sub(lambda m: _drop_network_script(m.group(0), stats), page)
    return output


def _fetches(script: str) -> bool:
    """Whether a script names a URL it may load (anything but namespaces and plotly's config), or configures
    require.js paths."""
    return bool(_REQUIRE_PATHS.search(script)) or any(
        not _NOT_FETCHED.search(m.group("host")) for m in _JS_URL.finditer(script))


def _drop_network_script(script: str, stats: dict) -> str:
    if _fetches(script):
        stats["scripts"] += 1
        return "<!-- a script that loads code from the network, left out of this offline report -->"
    return script


def _figure_html(figure) -> str:
    if isinstance(figure, str):
        try:
            figure = json.loads(figure)
        except ValueError:
            figure = {}
    figure = figure if isinstance(figure, dict) else {}
    layout = figure.get("layout") if isinstance(figure.get("layout"), dict) else {}
    height = layout.get("height") if isinstance(layout.get("height"), (int, float)) else 450
    div = f"kit-plot-{uuid.uuid4().hex[:12]}"
    payload = _script_json({"data": figure.get("data") or [], "layout": layout, "config": figure.get("config") or {}})
    return (f'<div id="{div}" class="kit-plot" style="height:{int(height)}px"></div>\n'
            f'<script type="text/javascript">(function () {{ var fig = {payload};\n'
            f'  var config = Object.assign({{responsive: true, displaylogo: false}}, fig.config);\n'
            f'  if (window.Plotly) {{ Plotly.newPlot("{div}", fig.data, fig.layout, config); }}\n'
            f'}})();</script>')


def _script_json(obj) -> str:
    """JSON that is safe inside <script>: no `</script>`, no `<!--`, no HTML entities in play."""
    text = json.dumps(obj, separators=(",", ":"), default=str)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _widget_text(view, state: dict) -> str:
    model_id = view.get("model_id") if isinstance(view, dict) else None
    model = state.get(model_id, {}) if model_id else {}
    name = str(model.get("model_name", "widget")).removesuffix("Model")
    values = model.get("state", {}) if isinstance(model.get("state"), dict) else {}
    bits = [f"{k}={values[k]!r}" for k in ("description", "value", "max") if values.get(k) not in (None, "")]
    return f"[{name} widget{': ' + ', '.join(bits) if bits else ''} (interactive view not included offline)]"


# --- the page


def render_html(cells: list[dict], *, metadata: dict, title: str, no_input: bool) -> str:
    """The nbconvert lab page of all cells, with no CDN loads and the kit's styles."""
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook()
    nb.metadata = nbformat.from_dict({k: v for k, v in metadata.items() if k in ("kernelspec", "language_info")})
    nb.metadata["title"] = title
    nb.cells = [nbformat.from_dict(c) for c in cells]
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"kit_report.html.j2": _TEMPLATE})],
                            template_file="kit_report.html.j2", exclude_input=no_input)
    body, _ = exporter.from_notebook_node(nb)
    # CommonMark reads a marker in a markdown cell as an autolink: show it as the text it is
    body = re.sub(r'<a href="redacted:([a-z0-9_]+)">redacted:\1</a>', r"&lt;redacted:\1&gt;", body)
    return body.replace("</head>", f'<style type="text/css">{_CSS}</style>\n</head>', 1)


def plotly_script() -> str:
    """plotly.js from the installed plotly package, as one inline <script> (its URLs escaped, same JS)."""
    import plotly.offline

    js = plotly.offline.get_plotlyjs()
    js = re.sub(r"(https?:|ftp:)//", r"\1\\/\\/", js).replace("</script", "<\\/script").replace("<!--", "<\\!--")
    return f'<script type="text/javascript">{js}</script>'


def require_shim() -> str:
    """A stand-in for require.js, so plotly's own notebook outputs draw with the inlined plotly.js."""
    return _REQUIRE_SHIM


# --- nothing from the network

_TAG = re.compile(r"<(?P<name>[A-Za-z][A-Za-z0-9:-]*)(?P<attrs>(?:[^>\"']|\"[^\"]*\"|'[^']*')*)>", re.S)
_ATTR = re.compile(r"(?P<pre>\s)(?P<name>[A-Za-z_:][-A-Za-z0-9_:.]*)\s*=\s*(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"'=<>`]+)")
_URL_ATTRS = {"src", "href", "srcset", "imagesrcset", "poster", "data", "action", "formaction", "background",
              "xlink:href", "ping", "manifest", "codebase", "cite", "longdesc", "lowsrc", "dynsrc", "content"}
_STARTS_REMOTE = re.compile(r"\s*(?:(?:https?|ftp|wss?):|[/\\]{2})", re.I)
_MAYBE_REMOTE = re.compile(r"[/\\]{2}|url\(|(?:https?|ftp|wss?):|srcdoc", re.I)
_CSS_IMPORT = re.compile(r"@import[^;]*;?", re.I)
_CSS_URL = re.compile(r"url\(\s*(?:['\"]|&quot;|&\#3[49];)?\s*(?:(?:https?|ftp):)?[/\\]{2}[^)]*\)", re.I)
_CSS_STRING = re.compile(r"(['\"])\s*(?:(?:https?|ftp):)?//[^'\"]*\1", re.I)
_STYLE_BLOCK = re.compile(r"(<style\b[^>]*>)(.*?)(</style\s*>)", re.S | re.I)


def _remote(attr: str, value: str) -> bool:
    text = re.sub(r"[\t\n\r]", "", html.unescape(value.strip("\"'")))
    if attr in ("srcset", "imagesrcset", "ping"):
        return any(_STARTS_REMOTE.match(part) for part in re.split(r"[,\s]\s*", text) if part)
    if attr == "content":
        return bool(re.search(r"url\s*=\s*['\"]?\s*(?:(?:https?|ftp):|[/\\]{2})", text, re.I))
    return bool(_STARTS_REMOTE.match(text))


def sanitize_network(page: str, notes: list[str]) -> str:
    """Every way the page could reach the network, removed or disarmed (see the module docstring)."""
    removed: list[str] = []

    def tag(m: re.Match) -> str:
        name, attrs = m.group("name").lower(), m.group("attrs")
        if "=" not in attrs or not _MAYBE_REMOTE.search(attrs):
            return m.group(0)
        remote = [a for a in _ATTR.finditer(attrs) if a.group("name").lower() in _URL_ATTRS
                  and (a.group("name").lower() != "content" or name == "meta")
                  and _remote(a.group("name").lower(), a.group("value"))]
        if name in ("script", "link", "base", "meta") and remote:
            removed.append(name)
            return "<script-removed hidden>" if name == "script" else ""
        for a in reversed(remote):
            value = a.group("value")
            repl = f'{a.group("pre")}data-remote-url={value}' + (f" title={value}" if name == "a" else "")
            attrs = attrs[:a.start()] + repl + attrs[a.end():]
        attrs = _ATTR.sub(lambda a: _clean_attr(a, notes), attrs)
        return f"<{m.group('name')}{attrs}>"

    page = _TAG.sub(tag, page)
    page = re.sub(r"<script-removed hidden>.*?</script\s*>", "", page, flags=re.S | re.I)
    page = page.replace("<script-removed hidden>", "")
    page = _STYLE_BLOCK.sub(lambda m: m.group(1) + _clean_css(m.group(2)) + m.group(3), page)
    if removed:
        notes.append(f"{len(removed)} reference(s) to scripts or styles on the network were removed: "
                     "this page loads nothing from the network.")
    return page


def _clean_attr(a: re.Match, notes: list[str]) -> str:
    name = a.group("name").lower()
    if name == "style":
        return a.group("pre") + a.group("name") + "=" + _clean_css(a.group("value"))
    if name == "srcdoc":  # an HTML document in an attribute: the same rules inside
        quote = a.group("value")[0] if a.group("value")[:1] in "\"'" else ""
        inner = html.unescape(a.group("value").strip("\"'"))
        return f'{a.group("pre")}srcdoc="{html.escape(sanitize_network(inner, notes), quote=True)}"' if quote or inner \
            else a.group(0)
    return a.group(0)


def _clean_css(css: str) -> str:
    css = _CSS_IMPORT.sub(lambda m: "" if re.search(r"(?:(?:https?|ftp):)?[/\\]{2}", m.group(0), re.I) else m.group(0),
                          css)
    return _CSS_STRING.sub('""', _CSS_URL.sub("url(data:,)", css))
