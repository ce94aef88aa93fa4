"""``sgl-kit``: the kit's functions from a terminal.

Every command takes a TARGET (``local``, ``lab``, ``ssh://user@host:port``,
``user@host`` or an ~/.ssh/config alias) and prints for a person, or JSON
with ``--json`` for scripts. Errors go to stderr with what to do next, and
the exit status is 2 for kit errors, the command's own status for ``run``.

One module per command group registers its sub-commands (``register(sub)``);
this is the only place in ``kit/`` that builds the command line.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence

from kit.errors import KitError

from . import (
    args,
    bench,
    capture,
    case,
    doctor,
    dryrun,
    fleet,
    known_issues,
    lab,
    metrics,
    practice,
    remote,
    report,
    upgrade,
    why,
)
from .common import Parser, common_options

__all__ = ["build_parser", "main"]

EXAMPLES = """\
examples:
  sgl-kit doctor gpu-box --baseline old-launch.sh
  sgl-kit run gpu-box -- nvidia-smi
  sgl-kit run ssh://root@10.0.0.5:22 -- 'ps aux | grep sglang'
  sgl-kit source gpu-box srt/server_args.py:1222-1260 --python /root/ml-env/bin/python
  sgl-kit source gpu-box --function ServerArgs._handle_piecewise_cuda_graph
  sgl-kit grep gpu-box 'disable_piecewise_cuda_graph ='
  sgl-kit known-issues --sglang 0.5.9 --gpu h100 --upgrade-to 0.5.23
  sgl-kit upgrade-diff --from 0.5.11 --to 0.5.23 --model ./config.json --tp 2 -- --mamba-scheduler-strategy extra_buffer
  sgl-kit report out/*.ipynb -o report.html --no-input
"""

# In help order.
GROUPS = (remote, doctor, known_issues, why, args, lab, bench, metrics, dryrun, upgrade, capture, case, fleet, report,
          practice)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="sgl-kit",
        description="Find out why an SGLang server is slow.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    _know_own_parser(parser)
    return parser


def _know_own_parser(parser: argparse.ArgumentParser) -> None:
    """Each sub-command remembers its parser, so its usage errors print its own usage."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(_parser=child)
                _know_own_parser(child)


def _report(exc: KitError) -> None:
    sys.stderr.write(f"sgl-kit: error: {exc.message}\n")
    hint = exc.cli_hint or exc.hint
    if hint:
        sys.stderr.write(f"  -> {hint}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a remote command, never our options.
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    parsed, extra = parser.parse_known_args(args.route_target(argv))
    if extra:  # argparse would blame the top-level parser; the sub-command's usage is the useful one
        getattr(parsed, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    parsed.cmd = rest
    func: Callable = parsed.func
    from kit._pysource import freeze_parsed

    # Parsed source trees need no cyclic collection while one command runs. Undone on the way out,
    # so a caller that runs main() inside its own process (a notebook, a test) keeps a normal collector.
    freeze_parsed()
    try:
        code = int(func(parsed) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except KitError as exc:
        _report(exc)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("sgl-kit: interrupted\n")
        return 130
    finally:
        freeze_parsed(False)
        gc.unfreeze()


def _pipe_closed() -> int:
    """The reader went away (`sgl-kit ... | head`): stop quietly, as coreutils do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit cannot fail again
    except OSError:
        pass
    return 128 + signal.SIGPIPE
