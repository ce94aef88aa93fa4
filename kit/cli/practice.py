"""``sgl-kit practice list|show|reveal|score|add``: real incidents (data/incidents/) and the team's own
resolved cases (its practice library) as exercises."""

from __future__ import annotations

import sys

from kit._text import clip
from kit.practice import DEFAULT_LIBRARY, LIBRARY_ENV

from .common import common_options, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "practice", help="practise on real incidents: the evidence as posted, then the thread's answer",
        usage="sgl-kit practice {list,show,reveal,score} [CASE] [--corpus DIR] [--library DIR] [--json]\n"
              "       sgl-kit practice add CASE_DIR [--library DIR] [--name NAME] [--force]",
        description="The incident corpus (data/incidents/ of the repository: real public threads, the evidence "
                    "as posted) and the team's own resolved cases as exercises. `list` names the cases and where "
                    "each comes from (corpus or team), `show CASE` prints the evidence without "
                    "the answer (CASE may be `first`, an easy case with a cause the doctor finds, or `random`: "
                    "both pick from the corpus), `reveal CASE` prints the thread's stated cause, its "
                    "link, the fix and what evidence would have settled it faster, `score` runs the doctor on "
                    "every case and says, case by case, whether it named the thread's cause. `add CASE_DIR` "
                    "copies a case of `sgl-kit capture`, once resolved (`sgl-kit case resolve`), into the team "
                    "library: --library DIR, else $SGL_KIT_PRACTICE_LIBRARY, else "
                    "~/.local/share/sglang-investigation-kit/practice. The notebook "
                    "notebooks/06_practice walks through one case with a hypothesis to pick.",
        epilog="examples:\n  sgl-kit practice list\n  sgl-kit practice show first\n"
               "  sgl-kit practice show random --seed 3\n"
               "  sgl-kit practice reveal sglang-38846-mamba-cap-notice --json\n"
               "  sgl-kit practice add cases/slow-tuesday --library /shared/sgl-practice\n"
               "  sgl-kit practice show slow-tuesday --library /shared/sgl-practice",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="practice_command", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="the cases, with version, GPU and difficulty")
    show = actions.add_parser("show", help="a case's evidence as posted, without the answer")
    reveal = actions.add_parser("reveal", help="a case's answer: the stated cause, the link, the fix")
    score = actions.add_parser("score", help="the doctor over every case: did it name the thread's cause?")
    add = actions.add_parser("add", help="copy a resolved case (sgl-kit capture) into the team's practice library",
                             usage="sgl-kit practice add CASE_DIR [--library DIR] [--name NAME] [--title TEXT] [--force] [--json]",
                             description="Copy a case directory of `sgl-kit capture`, resolved with `sgl-kit case "
                                         "resolve`, into the team library as a practice case: its captured files "
                                         "are the evidence, its resolution the answer (`practice reveal`).",
                             epilog="examples:\n  sgl-kit practice add cases/slow-tuesday\n"
                                    "  sgl-kit practice add cases/slow-tuesday --library /shared/sgl-practice "
                                    "--name graph-off-under-eagle",
                             formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    add.add_argument("case_dir", metavar="CASE_DIR", help="the directory `sgl-kit capture TARGET -o DIR` wrote")
    add.add_argument("--name", metavar="NAME", default=None, help="the practice case's name (default: the case's id)")
    add.add_argument("--title", metavar="TEXT", default=None,
                     help="the exercise's title (default: the case's id, sglang and model; nothing that gives a "
                          "finding away)")
    add.add_argument("--force", action="store_true", help="replace a team case of that name")
    add.add_argument("--library", metavar="DIR", default=None,
                     help=f"the team library (default: ${LIBRARY_ENV}, or {DEFAULT_LIBRARY}; made when missing)")
    add.set_defaults(func=cmd_add)
    common_options(add)
    for action, func in ((listing, cmd_list), (show, cmd_show), (reveal, cmd_reveal), (score, cmd_score)):
        if action is show or action is reveal:
            action.add_argument("case", metavar="CASE", help="a case name (sgl-kit practice list), first (a first exercise: an easy case "
                                                         "with a cause the doctor finds) or random")
            action.add_argument("--seed", type=int, default=None, help="with random: the same seed, the same case")
        action.add_argument("--corpus", metavar="DIR", default=None,
                            help="the incident corpus (default: $SGL_KIT_CORPUS, or data/incidents/ of the checkout)")
        action.add_argument("--library", metavar="DIR", default=None,
                            help=(f"the team library (default: ${LIBRARY_ENV}, or {DEFAULT_LIBRARY}); score reads it "
                                  f"only when given here or by ${LIBRARY_ENV}" if action is score else
                                  f"the team library, read after the corpus (default: ${LIBRARY_ENV}, or "
                                  f"{DEFAULT_LIBRARY})"))
        action.set_defaults(func=func)
        common_options(action)


def cmd_list(args) -> int:
    from kit.practice import TEAM, cases, library_dir

    found = cases(args.corpus, library=args.library, team=True)
    if args.json:
        emit_json([{"name": c.name, "from": c.origin, "title": c.title, "difficulty": c.difficulty,
                    "version": c.version, "gpu": c.gpu, "date": c.date} for c in found])
        return 0
    name_w = max(len(c.name) for c in found)
    lines = [f"{'case':<{name_w}}  {'from':<6}  {'difficulty':<10}  {'sglang':<30}  {'GPU':<34}  title"]
    for c in found:
        lines.append(f"{c.name:<{name_w}}  {c.origin:<6}  {c.difficulty:<10}  {clip(c.version, 30):<30}  "
                     f"{clip(c.gpu, 34):<34}  {c.title}")
    team = sum(c.origin == TEAM for c in found)
    library = library_dir(args.library)
    lines.append(f"{len(found)} cases ({len(found) - team} of the corpus, {team} of the team library {library}"
                 + ("" if library.is_dir() else ": not made yet, `sgl-kit practice add CASE_DIR` makes it")
                 + "); `sgl-kit practice show CASE` for one (or `first`, or `random`)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_show(args) -> int:
    from kit.practice import choices, load

    case = load(args.case, seed=args.seed, corpus=args.corpus, library=args.library)
    if args.json:
        emit_json(case.to_dict() | {"hypotheses": [{"id": c.id, "title": c.title} for c in choices()]})
        return 0
    sys.stdout.write(case.text() + f"\nwhat is the cause? the hypotheses are the doctor's rules "
                                   f"(`sgl-kit doctor --help`), something else, or nothing is wrong.\n"
                                   f"the answer: sgl-kit practice reveal {case.name}"
                                   + (f" --library {args.library}" if args.library else "") + "\n")
    return 0


def cmd_reveal(args) -> int:
    from kit.practice import load, reveal, run_doctor, settle, verdict

    case = load(args.case, seed=args.seed, corpus=args.corpus, library=args.library)
    diagnosis = run_doctor(case)
    told, doctor, more = reveal(case), verdict(case, diagnosis).doctor, settle(case, diagnosis)
    if args.json:
        emit_json({"name": case.name, **told.to_dict(), "doctor": doctor.outcome, "doctor_why": doctor.text,
                   "doctor_named": [f.id for f in diagnosis.findings], "settle": list(more.items)})
        return 0
    sys.stdout.write(told.text() + f"\n{doctor}\n\n{more.text()}")
    return 0


def cmd_score(args) -> int:
    from kit.practice import hit_rate

    result = hit_rate(args.corpus, library=args.library)
    if args.json:
        emit_json(result)
        return 0
    name_w = max(len(r["case"]) for r in result["cases"])
    team = any(r["from"] != "corpus" for r in result["cases"])
    lines = [f"{'case':<{name_w}}  " + ("from    " if team else "") + f"{'answer':<26}  {'doctor':<9}  named"]
    for r in result["cases"]:
        lines.append(f"{r['case']:<{name_w}}  " + (f"{r['from']:<6}  " if team else "")
                     + f"{r['answer']:<26}  {r['doctor']:<9}  {', '.join(r['named']) or '-'}")
    rate = f"{result['rate']:.0%}" if result["rate"] is not None else "not estimated"
    lines.append(f"the doctor named the thread's cause in {result['right']} of {result['graded']} graded cases "
                 f"({rate}); {len(result['cases']) - result['graded']} cases state no cause and are not graded")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_add(args) -> int:
    from kit.practice import add, load

    dest = add(args.case_dir, library=args.library, name=args.name, force=args.force, title=args.title)
    case = load(dest.name, library=dest.parent)
    if args.json:
        emit_json({"name": case.name, "path": str(dest), "library": str(dest.parent), "title": case.title,
                   "evidence": [{"file": f, "kind": k} for f, k in case.files], "answer": case.answer})
        return 0
    lib = f" --library {args.library}" if args.library else ""
    sys.stdout.write(f"added {case.name} to the team library {dest.parent} ({len(case.files)} evidence files: "
                     f"{', '.join(f for f, _ in case.files)})\n"
                     f"  title: {case.title}\n"
                     f"  practise on it: sgl-kit practice show {case.name}{lib}; the answer: "
                     f"sgl-kit practice reveal {case.name}{lib}\n")
    return 0
