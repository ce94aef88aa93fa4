"""The fast paths of the server's own sglang, for this case: whether each runs, read from that version's
source by :mod:`kit.provenance.gates`, with the case's facts.

``chain(case, "prefill-graph")`` evaluates every refusal of the path's setup and per-batch gate against
the case's resolved arguments, its config.json, the GPUs' probes, links and peer access, and the log's
startup lines. ``chain(case, "prefill-graph", restored=True)`` asks the same of the launch with the path
turned back on (the switch a rule would flip), which is how a rule tells a fix that pays from one that
"buys nothing here": a refusal that holds for every request of this launch.

A release laid out otherwise gives a chain with fewer facts and says so, never a guessed one.
"""

from __future__ import annotations

import itertools
from typing import Any

from kit.errors import KitError

__all__ = ["RESTORE", "chain", "machine_facts", "restored_args"]

# The switch that turns each path back on, per layout: a field and its "on" value. A field the
# release does not have is skipped; a nested one (cuda_graph_config.prefill.backend) keeps its parent.
RESTORE: dict[str, list[tuple[str, Any]]] = {
    "prefill-graph": [("disable_piecewise_cuda_graph", False), ("enable_piecewise_cuda_graph", True),
                      ("cuda_graph_config.prefill.backend", "breakable")],
    "decode-graph": [("disable_cuda_graph", False), ("cuda_graph_config.decode.backend", "full")],
    "custom-all-reduce": [("disable_custom_all_reduce", False)],
    "torch-compile": [("enable_torch_compile", True)],
}


def chain(case, fast_path: str, *, restored: bool = False, changes: dict | None = None,
          facts: dict | None = None):
    """The kit.provenance.gates chain of ``fast_path`` for this case (None without a source tree).
    ``restored``: with the path's switch turned back on; ``changes``: other field values to try;
    ``facts``: the machine as it would be after a change (``{"p2p": True}``), over what the evidence says."""
    with case.reading("source"):  # a cached answer: it counts as reading the source, whoever asked first
        return _chain(case, fast_path, restored, changes, facts)


def _chain(case, fast_path, restored, changes, facts):
    if case.ev.tree is None:
        return None
    memo = case.__dict__.setdefault("_gate_chains", {})
    key = (fast_path, restored, tuple(sorted((changes or {}).items(), key=lambda kv: kv[0])),
           tuple(sorted((facts or {}).items())))
    if key not in memo:
        from kit._pysource import unknown
        from kit.provenance.gates import gate_chain

        args = restored_args(case, fast_path) if restored else dict(case.ev.args)
        switched = {name for name, _ in RESTORE.get(fast_path, [])} if restored else set()
        for name, why in case.ev.unknown.items():  # not known is not the default: a check that reads it is unknown
            if name not in switched and name not in (changes or {}):
                args[name] = unknown(f"server_args.{name}", why)
        for name, value in (changes or {}).items():
            _set(args, name, value)
        try:
            memo[key] = gate_chain(case.ev.tree, fast_path, args, case.ev.model_config,
                                   facts={**machine_facts(case), **(facts or {})},
                                   probes=case.probes, log_text="\n".join(case.ev.startup) or None)
        except KitError:
            memo[key] = None
    return memo[key]


def restored_args(case, fast_path: str) -> dict:
    """The case's arguments with the path's switch on (the first of RESTORE's fields this launch has)."""
    args = _copy(case.ev.args)
    for name, value in RESTORE.get(fast_path, []):
        if case.has(name):
            _set(args, name, value)
            break
    return args


def machine_facts(case) -> dict:
    """What the evidence says of the GPUs the tensor-parallel ranks use: peer access between every pair
    (``p2p``), NVLink between every pair (``full_nvlink``), all on one node (``same_node``); None where
    the evidence does not tell."""
    hw = case.ev.hardware
    used, _ = case.tp_gpus()
    pairs = list(itertools.combinations(used, 2))
    p2p = getattr(hw, "p2p", None)
    topo = getattr(hw, "topology", None)
    facts: dict[str, Any] = {"p2p": None, "full_nvlink": None, "same_node": None}
    if p2p is not None and pairs:
        seen = [p2p.supported(a, b) for a, b in pairs]
        facts["p2p"] = False if False in seen else (True if all(s is True for s in seen) else None)
    if topo is not None and pairs and all(g in topo.gpus for g in used):
        facts["full_nvlink"] = all(str(topo.link(a, b) or "").startswith("NV") for a, b in pairs)
    nnodes = case.value("nnodes")
    if nnodes is not None:
        facts["same_node"] = int(nnodes or 1) == 1
    return facts


def _copy(args: dict) -> dict:
    out = dict(args)
    for key, value in out.items():
        if isinstance(value, dict):
            out[key] = {k: dict(v) if isinstance(v, dict) else v for k, v in value.items()}
    return out


def _set(args: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = args
    for part in parts[:-1]:
        nxt = node.get(part) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            return
        node = nxt
    node[parts[-1]] = value
