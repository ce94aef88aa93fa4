"""``make demo``: the kit's main job, on this machine, with no GPU.

It lays out a box shaped like the incident's (a real sglang 0.5.11 source
tree under ``ml-env/lib/python3.12/site-packages``), connects to it as the
``local`` target, and shows the code that silently disabled piecewise CUDA
graphs, found by name rather than by line number.

    python -m kit.demo [--version 0.5.11] [--target local]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ._paths import cache_dir
from ._wheels import install_package_source
from .errors import KitError
from .source import SourceSnippet, SourceTree
from .target import connect

__all__ = ["mark_rules", "main"]

FUNCTION = "ServerArgs._handle_piecewise_cuda_graph"
_RULE_COMMENT = re.compile(r"^\s*#\s*(?P<number>\d+[a-z]?)\.\s*(?P<title>.+)$")


def mark_rules(snippet: SourceSnippet, pattern: str = r"is_multimodal\b") -> list[int]:
    """Mark the numbered rule whose guard matches ``pattern``: its comment, guard and assignment.

    The rule number and title come from the comment above the guard in the
    installed source, so the same call works on releases that renumbered it.
    """
    marked = []
    for guard in snippet.find(rf"^\s*(el)?if .*{pattern}"):
        comment = guard - 1 if guard > snippet.start else None
        match = _RULE_COMMENT.match(snippet.line(comment)) if comment else None
        label = f"rule {match['number']}: {match['title']}" if match else "matching rule"
        for n in (comment, guard, guard + 1):
            if n is not None and snippet.start <= n <= snippet.end:
                snippet.mark(n, label)
                marked.append(n)
    return marked


_DATA = Path(__file__).parent / "data" / "resolved"
_MODEL = _DATA / "models" / "qwen3.6-27b" / "config.json"


def _incident_snapshot(version: str):
    """The incident's resolved arguments for this version (a committed dry-run snapshot), if there is one."""
    from .server_args import parse_log

    launch = _DATA / f"incident-new-{version}.json"
    if not launch.is_file():
        return None, None
    record = json.loads(launch.read_text())
    return parse_log(record["server_args_line"]), record["made_by"]


def _explain_resolved(console, tree, snapshot, made_by):
    """Evaluate every rule against the incident's resolved arguments (or, for a version without a
    recorded launch, the defaults); the explanation."""
    from .provenance import explain

    launch = snapshot if snapshot is not None else {"model_path": "/root/models/Qwen3.6-27B"}
    result = explain(tree, "disable_piecewise_cuda_graph", launch, _MODEL)
    if made_by:
        console.print("\n[bold]Which rule fired for the incident's launch[/], resolved by:")
        console.print(f"  {made_by}", soft_wrap=True, markup=False)
    else:
        console.print(f"\n[bold]Which rule fires[/] for the incident's model with sglang {tree.version}'s defaults "
                      "and --model-path only (no resolved launch is recorded for this version):", soft_wrap=True)
    console.print(result.headline, soft_wrap=True)
    for site in result.fired:
        console.print(f"  [green]fired[/] {site.where}  {site.function}  {site.rule}", soft_wrap=True)
    return result


def _the_way_out(tree, result, snapshot) -> str:
    """The fix and the pitfall, read from this version's source: the early return that skips the
    rule, and what sglang says when --language-only is tried instead."""
    from .provenance import escapes, refusals
    from .server_args import cli_defaults

    out = []
    found = escapes(tree, result) if result is not None else []
    if found:
        out.append(f"In {tree.version} the way out is {found[0].option} (the early return "
                   f"`if {found[0].condition}` at {found[0].where}).")
    if "language_only" in cli_defaults(tree):
        refused = [r for r in refusals(tree, snapshot or {}, {"language_only": True}, _MODEL) if r.status == "fired"]
        if refused:
            out.append(f"--language-only is not it: in {tree.version} sglang refuses it at startup "
                       f"({refused[0].where}: \"{refused[0].message}\").")
    return " ".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kit.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.5.11", help="sglang release to lay out (default: 0.5.11)")
    parser.add_argument("--target", default="local", help="where the box is (default: local)")
    args = parser.parse_args(argv)

    from rich.console import Console

    console = Console(highlight=False)
    try:
        prefix = cache_dir() / "demo" / f"sglang-{args.version}" / "ml-env"
        with console.status(f"preparing a real sglang {args.version} source tree (pip download --no-deps)"):
            package_dir = install_package_source("sglang", args.version, prefix=str(prefix))
        with connect(args.target) as host:
            tree = SourceTree.at(host, package_dir)
            console.print(
                f"[bold]target[/]: {host.name}   [bold]sglang[/]: {tree.version}   "
                f"[bold]package[/]: {tree.root}"
            )
            snippet = tree.function(FUNCTION)
            marked = mark_rules(snippet)
            console.print(snippet)
    except KitError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    if not marked:
        console.print(f"[yellow]no multimodal rule found in {FUNCTION} of sglang {tree.version}[/]")
        return 1
    label = snippet.marks[marked[0]]
    snapshot, made_by = _incident_snapshot(tree.version)
    result = _explain_resolved(console, tree, snapshot, made_by)
    console.print(
        f"\n[bold]{label}[/] at {snippet.path}:{marked[0]}-{marked[-1]}: a model whose architecture SGLang "
        "counts as multimodal (Qwen3_5ForConditionalGeneration, even used text-only) gets "
        "disable_piecewise_cuda_graph=True with no flag asking for it.", soft_wrap=True)
    way_out = _the_way_out(tree, result, snapshot)
    if way_out:
        console.print(way_out, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
