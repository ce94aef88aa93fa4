"""``sgl-kit practice list|show|reveal|score``: real incidents (data/incidents/) as exercises."""

from __future__ import annotations

import sys

from kit._text import clip

from .common import common_options, emit_json

__all__ = ["register"]


def register(sub) -> None:
    p = sub.add_parser(
        "practice", help="practise on real incidents: the evidence as posted, then the thread's answer",
        usage="sgl-kit practice {list,show,reveal,score} [CASE] [--corpus DIR] [--json]",
        description="The incident corpus (data/incidents/ of the repository: real public threads, the evidence "
                    "as posted) as exercises. `list` names the cases, `show CASE` prints the evidence without "
                    "the answer (CASE may be `first`, an easy case with a cause the doctor finds, or `random`), `reveal CASE` prints the thread's stated cause, its "
                    "link, the fix and what evidence would have settled it faster, `score` runs the doctor on "
                    "every case and says, case by case, whether it named the thread's cause. The notebook "
                    "notebooks/06_practice walks through one case with a hypothesis to pick.",
        epilog="examples:\n  sgl-kit practice list\n  sgl-kit practice show first\n"
               "  sgl-kit practice show random --seed 3\n"
               "  sgl-kit practice reveal sglang-38846-mamba-cap-notice --json",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="practice_command", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="the cases, with version, GPU and difficulty")
    show = actions.add_parser("show", help="a case's evidence as posted, without the answer")
    reveal = actions.add_parser("reveal", help="a case's answer: the stated cause, the link, the fix")
    score = actions.add_parser("score", help="the doctor over every case: did it name the thread's cause?")
    for action, func in ((listing, cmd_list), (show, cmd_show), (reveal, cmd_reveal), (score, cmd_score)):
        if action is show or action is reveal:
            action.add_argument("case", metavar="CASE", help="a case name (sgl-kit practice list), first (a first exercise: an easy case "
                                                         "with a cause the doctor finds) or random")
            action.add_argument("--seed", type=int, default=None, help="with random: the same seed, the same case")
        action.add_argument("--corpus", metavar="DIR", default=None,
                            help="the incident corpus (default: $SGL_KIT_CORPUS, or data/incidents/ of the checkout)")
        action.set_defaults(func=func)
        common_options(action)


def cmd_list(args) -> int:
    from kit.practice import cases

    found = cases(args.corpus)
    if args.json:
        emit_json([{"name": c.name, "title": c.title, "difficulty": c.difficulty, "version": c.version,
                    "gpu": c.gpu, "date": c.date} for c in found])
        return 0
    name_w = max(len(c.name) for c in found)
    lines = [f"{'case':<{name_w}}  {'difficulty':<10}  {'sglang':<30}  {'GPU':<34}  title"]
    for c in found:
        lines.append(f"{c.name:<{name_w}}  {c.difficulty:<10}  {clip(c.version, 30):<30}  "
                     f"{clip(c.gpu, 34):<34}  {c.title}")
    lines.append(f"{len(found)} cases; `sgl-kit practice show CASE` for one (or `first`, or `random`)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_show(args) -> int:
    from kit.practice import choices, load

    case = load(args.case, seed=args.seed, corpus=args.corpus)
    if args.json:
        emit_json(case.to_dict() | {"hypotheses": [{"id": c.id, "title": c.title} for c in choices()]})
        return 0
    sys.stdout.write(case.text() + f"\nwhat is the cause? the hypotheses are the doctor's rules "
                                   f"(`sgl-kit doctor --help`), something else, or nothing is wrong.\n"
                                   f"the answer: sgl-kit practice reveal {case.name}\n")
    return 0


def cmd_reveal(args) -> int:
    from kit.practice import load, reveal, run_doctor, settle, verdict

    case = load(args.case, seed=args.seed, corpus=args.corpus)
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

    result = hit_rate(args.corpus)
    if args.json:
        emit_json(result)
        return 0
    name_w = max(len(r["case"]) for r in result["cases"])
    lines = [f"{'case':<{name_w}}  {'answer':<26}  {'doctor':<9}  named"]
    for r in result["cases"]:
        lines.append(f"{r['case']:<{name_w}}  {r['answer']:<26}  {r['doctor']:<9}  {', '.join(r['named']) or '-'}")
    rate = f"{result['rate']:.0%}" if result["rate"] is not None else "not estimated"
    lines.append(f"the doctor named the thread's cause in {result['right']} of {result['graded']} graded cases "
                 f"({rate}); {len(result['cases']) - result['graded']} cases state no cause and are not graded")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
