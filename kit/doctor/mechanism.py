"""What sglang's own runtime does, read from the source of the server's version: which forward
modes each CUDA graph runner covers.

A rule that says what a setting affects must not take it from a table in the kit: the decode
graph runner, the prefill (piecewise) graph runner and ``ForwardMode`` change between releases.
:func:`graph_coverage` reads them from the tree (``kit.source``), with ``file:line``:

- ``ForwardMode.is_cuda_graph``: the modes the decode graph runner may replay;
- ``CudaGraphRunner.__init__``: ``capture_forward_mode = ForwardMode.TARGET_VERIFY`` when
  speculative decoding is on (so verify runs in the decode graph);
- ``PiecewiseCudaGraphRunner.can_run``: the modes it refuses (``is_target_verify(): return False``).

A release laid out otherwise gives an answer with fewer facts, never a guessed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kit.errors import KitError

__all__ = ["GraphCoverage", "graph_coverage"]

_MODE = re.compile(r"ForwardMode\.([A-Z_]+)")
_REFUSE = re.compile(r"forward_mode\.is_([a-z_]+)\(\)")


@dataclass
class GraphCoverage:
    """Forward modes per graph runner in one sglang version, each fact with its site."""

    version: str | None
    decode_modes: list[str] = field(default_factory=list)  # ForwardMode.is_cuda_graph
    decode_modes_site: str = ""
    verify_in_decode_graph: str = ""  # the site where the decode runner captures TARGET_VERIFY ("" : not found)
    piecewise_refuses: dict[str, str] = field(default_factory=dict)  # mode -> site of `return False`
    notes: list[str] = field(default_factory=list)

    @property
    def verify_outside_piecewise(self) -> bool:
        """Verify runs in the decode graph and the piecewise graph refuses it: the prefill graph does
        not touch speculative decode."""
        return bool(self.verify_in_decode_graph) and "target_verify" in self.piecewise_refuses

    def sentence(self) -> str:
        parts = []
        if self.verify_in_decode_graph:
            parts.append(f"the decode graph captures TARGET_VERIFY with speculative decoding "
                         f"({self.verify_in_decode_graph})")
        elif self.decode_modes:
            parts.append(f"the decode graph covers {', '.join(self.decode_modes)} ({self.decode_modes_site})")
        if "target_verify" in self.piecewise_refuses:
            parts.append(f"PiecewiseCudaGraphRunner.can_run returns False for it "
                         f"({self.piecewise_refuses['target_verify']})")
        return "; ".join(parts)


def graph_coverage(tree) -> GraphCoverage | None:
    """The graph runners' forward modes in ``tree`` (a kit.source.SourceTree), or None without a tree."""
    if tree is None:
        return None
    out = GraphCoverage(getattr(tree, "version", None))
    snippet = _function(tree, "ForwardMode.is_cuda_graph", out)
    if snippet is not None:
        out.decode_modes = list(dict.fromkeys(_MODE.findall(snippet.text)))
        out.decode_modes_site = f"{_short(snippet.path)}:{snippet.start}"
    init = _function(tree, "CudaGraphRunner.__init__", out)
    if init is not None:
        for n in init.find(r"capture_forward_mode\s*=\s*ForwardMode\.TARGET_VERIFY"):
            out.verify_in_decode_graph = f"{_short(init.path)}:{n}"
            break
    can_run = _function(tree, "PiecewiseCudaGraphRunner.can_run", out)
    if can_run is not None:
        for n in range(can_run.start, can_run.end + 1):
            match = _REFUSE.search(can_run.line(n))
            if match and n + 1 <= can_run.end and "return False" in can_run.line(n + 1):
                out.piecewise_refuses.setdefault(match.group(1), f"{_short(can_run.path)}:{n}-{n + 1}")
    return out


def _function(tree, qualname: str, out: GraphCoverage):
    try:
        return tree.function(qualname)
    except KitError as err:
        out.notes.append(f"{qualname} not read in sglang {out.version}: {err.message}")
        return None


def _short(path: str) -> str:
    return path.removeprefix("sglang/")
