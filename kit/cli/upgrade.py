"""``sgl-kit upgrade-diff``: one launch resolved by two sglang versions (or more), and what differs.

Everything after ``--`` on the command line (``args.cmd``) is sglang's own flags, or a whole
launch command. The work is :func:`kit.upgrade.upgrade_diff`.
"""

from __future__ import annotations

import argparse
import sys

from .common import emit_json, launch_options, masks_secrets

__all__ = ["register"]

USAGE = ("sgl-kit upgrade-diff --from VERSION --to VERSION [--to VERSION ...] [--model DIR_OR_CONFIG_JSON] "
         "[--gpu GPU] [--tp N] [--env K=V] [--setup] [--static] [--no-rename] [--cold] [--json] -- SGLANG_FLAGS...")

DESCRIPTION = """\
Resolve ONE launch under two sglang versions (or more) with each version's own argument
resolution (the dry-run: `sgl-kit dryrun -h`), and show every effective setting that differs:

  changed by the upgrade   each value per version, with the code that set it in each version
                           (file:line and function), or "asked" / "default". A flag renamed
                           between the versions is one row, paired through its lineage
                           (kit/data/lineage.yaml and each version's own flag table).
  no longer parse          asked flags a version refuses (its argparse error), with the new name
                           when it is known; the launch is then resolved with the new name
                           (--no-rename: without the flag), and the output says so.
  added / removed          fields only some versions have, kept apart; random_seed is hidden.

A version the dry-run cannot reach (before 0.5.6) is read statically: the launch's flags over the
defaults in that version's source, not resolved (no __post_init__ ran), and then every version is
read that way. A version whose dry-run environment is not built here is an error naming
`sgl-kit dryrun setup --sglang X`; --setup builds it first (1-2 minutes, about 1.3 GB each).

exit status: 0 every version takes the launch, 1 a version refuses it (a flag no longer parses, or
sglang would stop with an error), 2 the kit could not do it.
"""

EXAMPLES = """\
examples:
  sgl-kit upgrade-diff --from 0.5.11 --to 0.5.23 --model ./Qwen3.6-27B --gpu a6000 --tp 2 -- \\
      --model-path /root/models/Qwen3.6-27B --speculative-algorithm EAGLE --mamba-scheduler-strategy extra_buffer
  sgl-kit upgrade-diff --from 0.5.12 --to 0.5.18 --to 0.5.23 --model ./config.json --json -- --tp-size 2
  sgl-kit upgrade-diff --from 0.4.6 --to 0.4.8 -- --model-path /models/x --tp-size 2   # static: not resolved
"""


def register(sub) -> None:
    p = sub.add_parser("upgrade-diff", help="what changes when you upgrade sglang: one launch under two versions",
                       usage=USAGE, description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="from_version", required=True, metavar="VERSION",
                   help="the sglang version you run now")
    p.add_argument("--to", dest="to_versions", action="append", required=True, metavar="VERSION",
                   help="a version to upgrade to (repeatable)")
    launch_options(p)
    p.add_argument("--setup", action="store_true",
                   help="build a missing dry-run environment first (1-2 minutes, about 1.3 GB each; progress on stderr)")
    p.add_argument("--static", action="store_true",
                   help="read every version statically (flags over defaults, not resolved) instead of the dry-run")
    p.add_argument("--no-rename", action="store_true",
                   help="resolve a flag a version no longer takes by leaving it out, not under its new name")
    p.add_argument("--cold", action="store_true",
                   help="run each dry-run in a new process, not in the warm worker (also: SGL_KIT_DRYRUN_WARM=0)")
    # SUPPRESS keeps `sgl-kit --json upgrade-diff ...` working: the top-level parser owns the default.
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")
    p.set_defaults(func=cmd_upgrade_diff)


def _progress(text) -> None:
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()


@masks_secrets
def cmd_upgrade_diff(args) -> int:
    from kit.errors import UsageError
    from kit.upgrade import upgrade_diff

    env = {}
    for pair in args.env:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--env takes KEY=VALUE, not {pair!r}")
        env[key] = value
    if not args.cmd:
        raise UsageError("no launch given", hint="put sglang's flags (or the launch command) after --")
    diff = upgrade_diff(args.cmd, [args.from_version, *args.to_versions], model=args.model, gpu=args.gpu,
                        tp=args.tp, env=env, method="static" if args.static else "auto",
                        rename=not args.no_rename, setup=args.setup, progress=_progress, missing="raise",
                        warm=False if args.cold else None)
    if getattr(args, "json", False):
        emit_json(diff.to_dict())
    else:
        sys.stdout.write(diff.to_text() + "\n")
    return 1 if diff.refused else 0
