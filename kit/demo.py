"""``make demo``: the kit's main job, on this machine, with no GPU.

It lays out a box shaped like the incident's (a real sglang 0.5.11 source
tree under ``ml-env/lib/python3.12/site-packages``), connects to it as the
``local`` target, and shows the code that silently disabled piecewise CUDA
graphs, found by name rather than by line number.

    python -m kit.demo [--version 0.5.11] [--target local]
"""

from __future__ import annotations

import argparse
import re
import sys

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


def _explain_resolved(console, tree) -> None:
    """Evaluate every rule against the incident's resolved arguments (a committed dry-run snapshot)."""
    import json
    from pathlib import Path

    from .provenance import explain
    from .server_args import parse_log

    data = Path(__file__).parent / "data" / "resolved"
    launch = data / f"incident-new-{tree.version}.json"
    if not launch.is_file():
        return
    record = json.loads(launch.read_text())
    snapshot = parse_log(record["server_args_line"])
    result = explain(tree, "disable_piecewise_cuda_graph", snapshot, data / "models" / "qwen3.6-27b" / "config.json")
    console.print(f"\n[bold]Which rule fired for the incident's launch[/] (resolved by `{record['made_by'][:60]}...`):")
    console.print(result.headline)
    for site in result.fired:
        console.print(f"  [green]fired[/] {site.where}  {site.function}  {site.rule}")


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
    _explain_resolved(console, tree)
    console.print(
        f"\n[bold]{label}[/] at {snippet.path}:{marked[0]}-{marked[-1]}: a model whose architecture SGLang "
        "counts as multimodal (Qwen3_5ForConditionalGeneration, even used text-only) gets "
        "disable_piecewise_cuda_graph=True with no flag asking for it.\n"
        "In 0.5.11 the way out is --enforce-piecewise-cuda-graph (the early return at the top). "
        "--language-only is not it: there it belongs to encoder/language disaggregation and "
        "needs --encoder-urls."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
