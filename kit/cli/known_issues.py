"""``sgl-kit known-issues``: what sglang's known performance issues (kit/data/known_issues) say of one deployment.

The work is :mod:`kit.doctor.known_issues` (``evidence_for``, ``report``); a launch given as files is read
by the doctor's evidence (kit.doctor.from_files).
"""

from __future__ import annotations

import argparse
import sys

from .common import emit_json

__all__ = ["register"]

USAGE = ("sgl-kit known-issues --sglang VERSION [--gpu GPU] [--model DIR_OR_CONFIG_JSON_OR_HUB_ID] "
         "[--command FILE] [--log FILE] [--upgrade-to VERSION] [--json]")

DESCRIPTION = """\
List sglang's known performance issues that affect one deployment, from the kit's database
(kit/data/known_issues, each entry with its public PR or issue and a quoted excerpt; docs/known-issues.md).

  matches    every condition of the entry holds: the release is in its affected range, and the GPU,
             model, flags and environment it names are those of this deployment
  may apply  every condition the kit could check holds, some it could not (no GPU, no config.json,
             no launch given): each says what to send

With --upgrade-to VERSION: the issues the upgrade fixes (they affect this release and not that one)
and those it brings (the reverse), for this deployment.

Without --command/--log the server's flags are not known, so entries that name flags stay "may apply".
A launch given as files is read with that release's flag table (its wheel is downloaded once).
A GPU the kit's table does not know is kept: its vendor and SM are then unknown, and said so.
"""

EXAMPLES = """\
examples:
  sgl-kit known-issues --sglang 0.5.9 --gpu h100
  sgl-kit known-issues --sglang 0.5.11 --gpu a6000 --model Qwen/Qwen3.6-27B --upgrade-to 0.5.23
  sgl-kit known-issues --sglang 0.5.11 --command launch.sh --log server.log --json
"""


def register(sub) -> None:
    p = sub.add_parser("known-issues", help="sglang's known performance issues that affect a deployment",
                       usage=USAGE, description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sglang", required=True, metavar="VERSION", help="the sglang release the server runs (0.5.9)")
    p.add_argument("--gpu", metavar="GPU", help="the GPU: a key of `sgl-kit dryrun gpus` (h100) or the name "
                                                "nvidia-smi prints")
    p.add_argument("--model", metavar="DIR_OR_CONFIG_JSON", help="the model: its config.json, its directory, or a "
                                                                  "hub id (Qwen/Qwen3-32B)")
    p.add_argument("--upgrade-to", metavar="VERSION", help="a release to upgrade to: what it fixes and what it brings")
    p.add_argument("--command", metavar="FILE", help="the launch command (read with the release's flag table)")
    p.add_argument("--log", metavar="FILE", help="the server log (its server_args line)")
    # SUPPRESS keeps `sgl-kit --json known-issues ...` working: the top-level parser owns the default.
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")
    p.set_defaults(func=cmd_known_issues)


def cmd_known_issues(args) -> int:
    from kit.doctor import known_issues

    version = known_issues.release(args.sglang, "--sglang")
    upgrade = known_issues.release(args.upgrade_to, "--upgrade-to") if args.upgrade_to else None
    evidence = None
    if args.command or args.log:
        from kit.doctor import from_files

        evidence = from_files(command=args.command, log=args.log, sglang=version,
                              package_dir=getattr(args, "package_dir", None))
    evidence = known_issues.evidence_for(version, args.gpu, args.model, evidence=evidence)
    from kit.doctor.known_report import report

    found = report(evidence, upgrade_to=upgrade)
    if getattr(args, "json", False):
        emit_json(found.to_dict())
    else:
        sys.stdout.write(found.to_text())
    return 0
