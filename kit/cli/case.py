"""``sgl-kit case note|resolve|show``: annotate a case of ``sgl-kit capture`` and read it back."""

from __future__ import annotations

import argparse
import sys

from .common import common_options, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "case", help="annotate a captured case: notes, the resolution, a summary",
        usage='sgl-kit case note DIR "TEXT" [--finding ID]\n'
              '       sgl-kit case resolve DIR --cause "..." --fix "..." [--run FILE]\n'
              "       sgl-kit case show DIR [--json]",
        description="A case is the directory `sgl-kit capture TARGET -o DIR` writes. `note` adds a dated, "
                    "signed note to its case.yaml (tied to one finding at capture time with --finding), "
                    "`resolve` records the cause and the fix (and the comparison run that shows it, copied "
                    "into the case), `show` prints what the case holds. Secrets in the text are masked "
                    "before it is written. The signature is $SGL_KIT_USER, else the login name.",
        epilog="examples:\n"
               '  sgl-kit case note cases/slow-tuesday "decode at 38 tok/s from 14:02"\n'
               '  sgl-kit case note cases/slow-tuesday "off since the 0.5.11 upgrade" --finding decode-cuda-graph-off\n'
               '  sgl-kit case resolve cases/slow-tuesday --cause "the prefill graph was off under EAGLE" \\\n'
               '      --fix "launch with --enforce-piecewise-cuda-graph" --run runs/after.jsonl\n'
               "  sgl-kit case show cases/slow-tuesday\n"
               "  sgl-kit practice add cases/slow-tuesday   # then the team practises on it",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="case_command", metavar="ACTION", prog="sgl-kit case")
    actions.required = True

    note = actions.add_parser(
        "note", help="add a dated note to the case (secrets masked)",
        usage='sgl-kit case note DIR "TEXT" [--finding ID] [--by NAME] [--json]',
        description="Append a note to the case's case.yaml: the time (UTC), who ($SGL_KIT_USER, else the login "
                    "name) and the text, secrets masked. --finding ties it to a finding at capture time "
                    "(`sgl-kit case show DIR` lists their ids).",
        epilog='examples:\n  sgl-kit case note cases/slow-tuesday "users see it from 14:02"\n'
               '  sgl-kit case note cases/slow-tuesday "expected on A6000" --finding p2p-unavailable',
        formatter_class=argparse.RawDescriptionHelpFormatter)
    note.add_argument("dir", metavar="DIR", help="the case directory (sgl-kit capture TARGET -o DIR)")
    note.add_argument("text", metavar="TEXT", help="the note (quote it)")
    note.add_argument("--finding", metavar="ID", default=None, help="the id of the finding at capture time it is about")
    note.add_argument("--by", metavar="NAME", default=None, help="who writes it (default: $SGL_KIT_USER, or the login name)")
    note.set_defaults(func=cmd_note)

    resolve = actions.add_parser(
        "resolve", help="record the cause and the fix (and the run that shows it)",
        usage='sgl-kit case resolve DIR --cause "TEXT" --fix "TEXT" [--run FILE] [--by NAME] [--json]',
        description="Set the case's resolution: the cause, the fix, when and who. --run FILE is a saved run "
                    "(`sgl-kit bench TARGET --out FILE`, or `sgl-kit bench compare A B --json` saved): kept where "
                    "it is when inside the case, else copied in as run.json (run.jsonl for JSON lines), so the "
                    "case stays self-contained. Resolving again keeps the earlier resolution in "
                    "resolution_history. A resolved case can join the team's practice library "
                    "(`sgl-kit practice add DIR`).",
        epilog='examples:\n  sgl-kit case resolve cases/slow-tuesday --cause "no P2P between the two A6000" \\\n'
               '      --fix "NVLink bridge; custom all-reduce back on" --run runs/after.jsonl',
        formatter_class=argparse.RawDescriptionHelpFormatter)
    resolve.add_argument("dir", metavar="DIR", help="the case directory")
    resolve.add_argument("--cause", metavar="TEXT", required=True, help="what it was, in one or two sentences")
    resolve.add_argument("--fix", metavar="TEXT", required=True, help="what changed it")
    resolve.add_argument("--run", metavar="FILE", default=None,
                         help="a saved bench run or comparison that shows the fix (JSON or JSON lines)")
    resolve.add_argument("--by", metavar="NAME", default=None,
                         help="who resolved it (default: $SGL_KIT_USER, or the login name)")
    resolve.set_defaults(func=cmd_resolve)

    show = actions.add_parser(
        "show", help="what the case holds: files, what is missing, notes, resolution, findings",
        usage="sgl-kit case show DIR [--json]",
        description="Print the case: its id, when and from where it was captured, the sglang version, its "
                    "files (name, what, size), what could not be collected, the notes, the resolution and the "
                    "findings at capture time (the first five; --json lists all).",
        epilog="examples:\n  sgl-kit case show cases/slow-tuesday\n  sgl-kit case show cases/slow-tuesday --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("dir", metavar="DIR", help="the case directory")
    show.set_defaults(func=cmd_show)

    for action in (note, resolve, show):
        common_options(action)


def _masked(out: dict, where: str) -> str:
    if not out.get("masked"):
        return ""
    n = out["masked"]
    return (f"  masked {n} secret value{'s' if n != 1 else ''} in the {where} ({', '.join(out['masked_kinds'])}); "
            "the values were not written\n")


def cmd_note(args) -> int:
    from kit.case.notes import note

    out = note(args.dir, args.text, finding=args.finding, by=args.by)
    if args.json:
        emit_json(out)
        return 0
    on = f" on {out['finding']}" if out.get("finding") else ""
    sys.stdout.write(f"noted{on} in {args.dir}/case.yaml by {out['by']} at {out['at']}\n" + _masked(out, "note"))
    return 0


def cmd_resolve(args) -> int:
    from kit.case.notes import resolve

    out = resolve(args.dir, cause=args.cause, fix=args.fix, run=args.run, by=args.by)
    if args.json:
        emit_json(out)
        return 0
    run = f"; run: {out['run']}" if out.get("run") else ""
    sys.stdout.write(f"resolved {args.dir} by {out['by']} at {out['at']}{run}\n" + _masked(out, "resolution")
                     + f"  the team can practise on it: sgl-kit practice add {args.dir}\n")
    return 0


def cmd_show(args) -> int:
    from kit.case.notes import show, summary

    if args.json:
        emit_json(summary(args.dir))
        return 0
    sys.stdout.write(show(args.dir))
    return 0
