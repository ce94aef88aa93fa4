"""``sgl-kit report NOTEBOOK... -o report.html``: executed notebooks to a shareable page, secrets removed;
``sgl-kit report --case DIR``: a captured case (``sgl-kit capture``) as one page."""

from __future__ import annotations

import argparse
import sys

from kit._text import wrap
from kit.errors import UsageError

from .common import common_options, emit_json

__all__ = ["register"]

EPILOG = """\
examples:
  sgl-kit report out/*.ipynb -o report.html --no-input
  sgl-kit report out/*.ipynb --markdown -o summary.md
  sgl-kit report --case cases/slow-decode                 # writes cases/slow-decode/report.html
  sgl-kit report --case cases/slow-decode --replay -o today.html --redact-hosts
"""
# what only a notebook report takes, by option
NOTEBOOK_ONLY = (("no_input", "--no-input"), ("markdown", "--markdown"), ("code", "--code"), ("title", "--title"),
                 ("strict", "--strict"))


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="turn executed notebooks (or a captured case, --case DIR) into one shareable HTML page, "
                       "secrets removed",
        usage="sgl-kit report NOTEBOOK... [-o FILE] [--no-input] [--redact-hosts] [--markdown [--code]] "
              "[--title TEXT] [--strict] [--json]\n       sgl-kit report --case DIR [--replay] [-o FILE] "
              "[--redact-hosts] [--json]",
        description=wrap("Write one self-contained HTML page from executed notebooks: it opens anywhere with no "
                    "network and no Jupyter (styles and plotly.js inlined, figures drawn). API keys, tokens, "
                    "passwords, private keys and their base64 or URL-encoded forms are replaced by "
                    "<redacted:KIND> (detect-secrets' detectors and the kit's own rules); the page ends with how "
                    "many of each kind were removed, and where long random-looking strings that no rule "
                    "recognised were kept (--strict removes them too). --markdown writes a short summary for a "
                    "ticket instead. With --case DIR it writes the page of a case `sgl-kit capture` wrote: the "
                    "resolution, the doctor's findings with the notes written on each beside it, the source lines "
                    "they cite, every evidence file (collapsed), what could not be collected and what was "
                    "redacted (default: DIR/report.html); --replay runs the doctor on the case's files now and "
                    "shows that answer instead of the one saved at capture.", 100),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="executed .ipynb files, in report order")
    p.add_argument("--case", metavar="DIR", help="a case directory (sgl-kit capture TARGET -o DIR) instead of notebooks")
    p.add_argument("--replay", action="store_true",
                   help="with --case, run the doctor on the case's files now and show that answer, not findings.json")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write (default: report.html, or report.md with --markdown; DIR/report.html "
                        "with --case)")
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

    _check_inputs(args)
    if args.case is not None:
        return cmd_case_report(args)
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


def _check_inputs(args) -> None:
    """Notebooks or --case, exactly one; the options of the other kind refused by name."""
    if bool(args.notebooks) == (args.case is not None):
        raise UsageError("give executed notebooks or --case DIR, not both" if args.notebooks
                         else "nothing to report on: give executed notebooks or --case DIR",
                         hint="sgl-kit report out/*.ipynb -o report.html, or sgl-kit report --case DIR")
    if args.case is None and args.replay:
        raise UsageError("--replay goes with --case DIR: it runs the doctor on a case's files",
                         hint="sgl-kit report --case DIR --replay")
    if args.case is not None:
        given = [flag for name, flag in NOTEBOOK_ONLY if getattr(args, name)]
        if given:
            raise UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for notebook reports, not "
                             "for --case", hint="leave it out: the case page shows everything, redacted")


def cmd_case_report(args) -> int:
    from kit.report import hosts_summary, redaction_summary
    from kit.report.case_page import case_report

    diagnosis = None
    if args.replay:
        from kit.case.replay import replay

        diagnosis = replay(args.case)
    result = case_report(args.case, args.output, hosts=args.redact_hosts, diagnosis=diagnosis)
    if getattr(args, "json", False):
        emit_json(result.to_dict())
        return 0
    lines = [f"wrote {result.path} ({_size(result.bytes)}): {result.headline()}",
             f"  {redaction_summary(result.counts)}"]
    if hosts_summary(result.counts):
        lines.append(f"  {hosts_summary(result.counts)}")
    lines += [f"  note: {name} is shown in part (at most 200 kB of each file); the whole file is in the case"
              for name in result.cut]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n} B"
