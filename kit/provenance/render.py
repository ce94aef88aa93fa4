"""An explanation as text for a terminal and as HTML for a notebook."""

from __future__ import annotations

import html
import re

from kit._text import clip, short_path, wrap


def _mark(guard) -> str:  # a Guard
    return {True: "ok", False: "NO", None: "?"}[guard.passes]


def render_text(exp, width: int) -> str:  # exp: a FlagExplanation
    out = [wrap(exp.lineage, width, "", "  ")] if exp.lineage else []
    out.append(exp.headline)
    if exp.resolved:
        out.append(wrap(exp.resolved, width, "", "  "))
    out.extend(wrap(note, width, "", "  ") for note in exp.notes)
    if exp.origin:
        out.append(exp.origin)
    if exp.hint:
        out.append(exp.hint)
    if not exp.sites:
        return "\n".join(out)
    if not exp.evaluated:
        out.append("guards not evaluated: pass snapshot= (the server args from the log) and model_config=")
    rows = [
        (s.status, f"{short_path(s.file)}:{s.line}", s.function, s.rule or "-", s.value_text)
        for s in exp.ordered()
    ]
    heads = ("STATUS", "WHERE", "FUNCTION", "RULE", "VALUE")
    widths = [
        max(len(h), *(len(clip(r[i], 48)) for r in rows)) if rows else len(h) for i, h in enumerate(heads)
    ]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out.append(fmt.format(*heads).rstrip())
    for site, row in zip(exp.ordered(), rows, strict=True):
        out.append(fmt.format(*(clip(c, 48) for c in row)).rstrip())
        out.extend(_site_detail(site, width))
    return "\n".join(out)


def _site_detail(site, width: int) -> list[str]:  # an AssignmentSite
    pad = "    "
    lines = [pad + clip(line, width - len(pad)) for line in _caller_lines(site.guards)]
    guards = " and ".join(
        f"{_paren(g.condition)} [{_mark(g)}]" for g in site.guards if g.kind not in ("earlier rule", "caller")
    )
    earlier = sum(1 for g in site.guards if g.kind == "earlier rule")
    if earlier:
        guards += f" (after {earlier} earlier rules)"
    lines += [pad + clip("if " + guards, width - len(pad))] if guards else []
    if site.fired:
        lines += [wrap(f"- {note}", width, pad, pad + "  ") for note in site.evidence]
    elif site.status_reason:
        lines.append(wrap(f"why: {site.status_reason}", width, pad, pad + "     "))
    return lines


def _caller_lines(guards) -> list[str]:
    """`called at F:LINE if COND [ok]`, one line per calling function, outermost first."""
    groups: dict[str, list] = {}
    for g in guards:
        if g.kind == "caller":
            groups.setdefault(g.where, []).append(g)
    lines = []
    for where, members in groups.items():
        conds = [g for g in members if g.rule != "(call)"]  # "(call)": the call itself, unconditional
        tail = " and ".join(f"{_paren(g.condition)} [{_mark(g)}]" for g in conds)
        lines.append(f"called at {short_path(where)}" + (f" if {tail}" if tail else ""))
    return lines


def render_html(exp) -> str:  # exp: a FlagExplanation
    """The sites as a table that fits the output: one row per site (where, function and rule stacked in one
    cell), each guard once on its own line with its mark and what decided it. Guards every shown site
    shares (the caller's, an early return) are said once above the table instead of on every row."""
    from kit.display import breakable, html_table

    e = html.escape
    head = ((f"<p><i>{e(exp.lineage)}</i></p>" if exp.lineage else "")
            + f"<p><b>{e(exp.headline)}</b></p>"
            + (f"<p>{e(exp.resolved)}</p>" if exp.resolved else "")
            + "".join(f"<p>{e(note)}</p>" for note in exp.notes)
            + (f"<p>{e(exp.origin)}</p>" if exp.origin else "")
            + (f"<p>{e(exp.hint)}</p>" if exp.hint else ""))

    def guard_html(g) -> str:
        mark = {"ok": "#1a7f37", "NO": "#cf222e", "?": "#9a6700"}[_mark(g)]
        where = f"called at {breakable(short_path(g.where))} if " if g.kind == "caller" else ""
        kind = "(early return) " if g.kind == "early return" else (
            f"(earlier rule {e(g.rule)} did not match) " if g.kind == "earlier rule" else "")
        why = [r for r in (g.reason.split("; ") if g.reason else list(g.notes)) if r]
        reasons = "".join(f"<br><small>{breakable(r)}</small>" for r in why)
        return (f"<div style='margin-bottom:3px'><b style='color:{mark}'>[{_mark(g)}]</b> <small>{kind}</small>"
                f"{where}<code>{breakable(g.condition)}</code>{reasons}</div>")

    def key(g) -> tuple:
        return g.kind, g.where, g.line, g.condition, g.passes

    def status(s) -> str:
        """What the guards do not already say: an unevaluated site's reason; else nothing more."""
        if not exp.evaluated:
            return f"<small><i>{e(s.status_reason)}</i></small>"
        if s.status == "fired":
            return "<small><i>every guard holds</i></small>" if s.guards else \
                "<small><i>unconditional in its function</i></small>"
        return ""

    def table(sites) -> str:
        shared = [g for g in sites[0].guards if all(any(key(g) == key(h) for h in s.guards) for s in sites[1:])] \
            if len(sites) > 1 else []
        common = {key(g) for g in shared}
        rows, styles = [], []
        for s in sites:
            own = [g for g in s.guards if key(g) not in common]
            rows.append([
                e(s.status),
                f"<code>{breakable(short_path(s.where))}</code><br><code>{breakable(s.function)}</code>"
                + (f"<br>{e(s.rule)}" if s.rule else "")
                + f"<details><summary>source</summary><pre style='white-space:pre;overflow-x:auto'>"
                  f"{e(s.snippet)}</pre></details>",
                f"<code>{breakable(s.value_text)}</code>",
                "".join(guard_html(g) for g in own) + status(s),
            ])
            styles.append("background:" + {"fired": "#d4f7d4", "not fired": "#f6f6f6"}.get(s.status, "#fff3cd"))
        said = ("<p style='margin:4px 0'>every site below is reached only when:</p>"
                + "".join(guard_html(g) for g in shared)) if shared else ""
        return said + html_table(["status", "where", "value", "guards"], rows, ["6em", "34%", "6em", ""], styles)

    ordered = exp.ordered()
    shown = [s for s in ordered if s.status != "not fired"]  # fired first, then unknown
    folded = [s for s in ordered if s.status == "not fired"]
    body = table(shown) if shown else "<p>No site fired or stayed unknown.</p>"
    if folded:
        body += (f"<details><summary>{len(folded)} site(s) that did not fire, with the guard that failed"
                 f"</summary>{table(folded)}</details>")
    return f"<div>{head}{body}</div>"


def _paren(text: str) -> str:
    return f"({text})" if " or " in text or " and " in text or " if " in text else text


def is_atom(text: str) -> bool:
    return re.fullmatch(r"[\w.()\[\]'\"]+", text) is not None
