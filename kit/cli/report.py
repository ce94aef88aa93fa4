"""``sgl-kit report NOTEBOOK... -o report.html``: executed notebooks to a shareable page, secrets removed."""

from __future__ import annotations

import sys

from .common import common_options, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="turn executed notebooks into one shareable HTML page (or Markdown), secrets removed",
        usage="sgl-kit report NOTEBOOK... [-o FILE] [--no-input] [--redact-hosts] [--markdown [--code]] "
              "[--title TEXT] [--strict] [--json]",
        description="Write one self-contained HTML page from executed notebooks: it opens anywhere with no "
                    "network and no Jupyter (styles and plotly.js inlined, figures drawn). API keys, tokens, "
                    "passwords, private keys and their base64 or URL-encoded forms are replaced by "
                    "<redacted:KIND> (detect-secrets' detectors and the kit's own rules); the page ends with how "
                    "many of each kind were removed, and where long random-looking strings that no rule "
                    "recognised were kept (--strict removes them too). --markdown writes a short summary for a "
                    "ticket instead.")
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="executed .ipynb files, in report order")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write (default: report.html, or report.md with --markdown)")
    p.add_argument("--no-input", action="store_true", help="hide the code cells, show only prose and outputs")
    p.add_argument("--redact-hosts", action="store_true",
                   help="also replace host names and IP addresses by placeholders (host-1, 10.x.x.1)")
    p.add_argument("--markdown", action="store_true",
                   help="write a Markdown summary for a ticket: prose, text outputs and tables, no code")
    p.add_argument("--code", action="store_true", help="with --markdown, include the code cells")
    p.add_argument("--title", metavar="TEXT", help="the report's title (default: from the notebooks' target)")
    p.add_argument("--strict", action="store_true",
                   help="also remove long random-looking strings that no rule recognised (listed otherwise)")
    p.set_defaults(func=cmd_report)
    common_options(p)


def cmd_report(args) -> int:
    from kit.report import build_report, hosts_summary, kept_summary, redaction_summary

    out = args.output or ("report.md" if args.markdown else "report.html")
    result = build_report(args.notebooks, out, no_input=args.no_input, hosts=args.redact_hosts,
                          markdown=args.markdown, title=args.title, code=args.code, strict=args.strict)
    if getattr(args, "json", False):
        emit_json(result.to_dict())
        return 0
    kind = "Markdown summary" if result.format == "markdown" else "HTML report"
    lines = [f"wrote {result.path} ({_size(result.bytes)}): {kind} of {len(result.notebooks)} "
             f"notebook{'' if len(result.notebooks) == 1 else 's'}",
             f"  {redaction_summary(result.counts)}"]
    kept = kept_summary(result.kept, result.strict, result.kept_strings)
    if kept:
        lines.append(f"  {kept}")
    if hosts_summary(result.counts):
        lines.append(f"  {hosts_summary(result.counts)}")
    lines += [f"  note: {note}" for note in result.notes]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B"
