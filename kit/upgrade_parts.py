"""Pieces of kit.upgrade's diff: the versions and the tensor parallelism given, and the fast paths each
release runs for the launch (kit.provenance.gates over the launch each release resolved)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ._text import wrap
from .errors import DryRunError, KitError, UsageError

__all__ = ["PATHS", "fast_paths", "paths_text", "version_list", "with_tp"]

_TP_OPTIONS = ("--tp-size", "--tensor-parallel-size", "--tp")
# The paths whose change between releases the diff shows: what a rule would ask "does it run here?"
PATHS = ("prefill-graph", "decode-graph")
_CUDA = {"is_cuda": True, "is_hip": False, "is_npu": False, "is_cpu": False, "is_xpu": False}


def version_list(versions: str | Sequence[str]) -> list[str]:
    from packaging.version import InvalidVersion, Version

    items = [versions] if isinstance(versions, str) else list(versions)
    names = list(dict.fromkeys(n for item in items for n in re.split(r"[\s,]+", str(item).strip()) if n))
    for name in names:
        try:
            Version(name)
        except InvalidVersion:
            raise UsageError(f"not an sglang version: {name!r}", hint="give versions such as 0.5.11") from None
    if len(names) < 2:
        raise UsageError(f"an upgrade diff needs two versions or more, got {names}",
                         hint="give the version upgraded from and at least one to upgrade to")
    return names


def with_tp(tokens: list[str], tp: int | None) -> list[str]:
    """``tp`` as ``--tp-size N`` among the flags, where every version (static ones too) reads it."""
    from ._argv import option_values

    given = option_values(tokens, _TP_OPTIONS)[0]
    if tp is None or str(given) == str(tp):
        return tokens
    if given is not None:
        raise DryRunError(f"tensor parallelism is given twice, differently: tp={tp} and {given} among the flags",
                          hint="give it once: --tp N, or --tp-size N among the flags")
    return [*tokens, "--tp-size", str(tp)]



def fast_paths(sides: dict, live: list[str], model) -> dict[str, dict]:
    """For each release read, whether each of PATHS runs for its resolution of the launch: the verdict,
    the first refusal that holds for every request (with its site), and how many checks stay open."""
    from .model_config import load_model_config
    from .provenance.gates import gate_chain

    try:
        config = load_model_config(model) if model is not None else None
    except KitError:
        config = None
    out: dict[str, dict] = {}
    for version in live:
        side = sides[version]
        args = _nested(side.values)
        out[version] = {}
        for name in PATHS:
            try:
                chain = gate_chain(side.tree, name, args, config, probes=_CUDA)
            except KitError as exc:
                out[version][name] = {"verdict": "not read", "why": exc.message}
                continue
            block = chain.blocking
            out[version][name] = {"verdict": chain.verdict, "title": chain.title,
                                  "blocking": f"{block.where}: {block.text}" if block else None,
                                  "open": len(chain.undecided)}
    return out


def paths_text(paths: dict[str, dict], versions: list[str], width: int) -> list[str]:
    """The diff's FAST PATHS section: one line per path, its verdict in each release."""
    if not paths:
        return []
    out = ["", "FAST PATHS (sglang's own checks for this launch, `sgl-kit gates` for each one)"]
    for name in PATHS:
        cells = []
        for v in versions:
            p = (paths.get(v) or {}).get(name) or {}
            verdict = p.get("verdict", "not read")
            if p.get("blocking"):
                cells.append(f"{v}: never ({p['blocking']})")
            elif verdict == "unknown":
                cells.append(f"{v}: no check refuses every request ({p['open']} the evidence cannot decide)")
            else:
                cells.append(f"{v}: {verdict}")
        title = next((p[name]["title"] for p in paths.values() if name in p and "title" in p[name]), name)
        out.append(wrap(f"{title}: " + " -> ".join(cells), width, "  ", "      "))
    return out


def _nested(values: dict[str, Any]) -> dict[str, Any]:
    """Flattened fields (cuda_graph_config.prefill.backend) back into nested dicts."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[parts[-1]] = value
    return out
