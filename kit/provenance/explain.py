"""explain(): every assignment to a flag, with its guards, evaluated against the server's args."""

from __future__ import annotations

from collections.abc import Mapping

from kit._pysource import Evaluator, ModuleInfo
from kit.errors import KitError
from kit.model_config import load_model_config
from kit.server_args import defaults

from .guards import explain_write
from .result import AssignmentSite, FlagExplanation
from .sites import TreeIndex, index_for, write_lines, writes_in


def explain(
    tree, flag: str, snapshot=None, model_config=None, *, under: str | None = "srt"
) -> FlagExplanation:
    """Every assignment to `flag` in `tree`, with its guards, evaluated when a snapshot is given.

    `flag` is a ServerArgs field (`disable_piecewise_cuda_graph`, `--disable-piecewise-cuda-graph`)
    or a dotted path into one (`cuda_graph_config.prefill.backend`). `snapshot` is a
    ServerArgsSnapshot or a dict of field values; `model_config` a path to config.json or a dict.
    `under` limits the search to the server runtime (`srt/`); None searches benchmarks and tools too.
    """
    flag = normalize_flag(flag)
    parts = flag.split(".")
    cache = index_for(tree)
    values = _snapshot_values(snapshot)
    config = load_model_config(model_config)
    # The flag itself is shadowed: the log holds its final value, not the one a guard saw.
    ev = (Evaluator(cache.modules, values, config, {parts[0]}, defaults=_Defaults(tree))
          if values is not None else None)
    sites = _find_sites(cache, parts, ev, under)
    return FlagExplanation(
        flag=flag,
        version=getattr(tree, "version", None),
        sites=sites,
        observed=_observed(values, parts),
        evaluated=ev is not None,
        hint=_hint(flag, sites),
    )


def _find_sites(cache: TreeIndex, parts: list[str], ev: Evaluator | None, under: str | None):
    sites: list[AssignmentSite] = []
    for path in cache.candidates(parts):
        if under and not path.startswith(under.rstrip("/") + "/"):
            continue
        module = cache.modules.get(path)
        if module is not None:
            sites.extend(_sites_in(module, parts, ev, cache))
    return sorted(sites, key=lambda s: (s.file, s.line))


def normalize_flag(flag: str) -> str:
    """`--disable-piecewise-cuda-graph` and `disable_piecewise_cuda_graph` name the same field."""
    if not isinstance(flag, str) or not flag.strip().lstrip("-"):
        raise ValueError(f"not a flag name: {flag!r}")
    return flag.strip().lstrip("-").replace("-", "_")


def _snapshot_values(snapshot) -> dict | None:
    if snapshot is None:
        return None
    if isinstance(snapshot, Mapping):
        return dict(snapshot)
    for attr in ("fields", "values"):
        values = getattr(snapshot, attr, None)
        if isinstance(values, Mapping):
            return dict(values)
    raise TypeError(f"snapshot must be a ServerArgsSnapshot or a dict, not {type(snapshot).__name__}")


class _Defaults:
    """The tree's field defaults (kit.server_args.defaults), computed on the first lookup.

    A tree that is not an sglang package with ServerArgs has none: lookups say unknown.
    """

    def __init__(self, tree) -> None:
        self.tree = tree
        self.found: dict | None = None

    def get(self, name: str):
        if self.found is None:
            try:
                self.found = dict(defaults(self.tree))
            except KitError:
                self.found = {}
        return self.found.get(name)


def _observed(values: dict | None, parts: list[str]) -> str | None:
    """The flag's logged value, following nested configs (`CudaGraphConfig(prefill=...)`)."""
    node = values
    for part in parts:
        kwargs = getattr(node, "kwargs", None)
        node = kwargs if not isinstance(node, Mapping) and isinstance(kwargs, Mapping) else node
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    text = getattr(node, "text", None)
    return text if isinstance(text, str) else repr(node)


def _hint(flag: str, sites: list[AssignmentSite]) -> str:
    if sites:
        return ""
    return (
        f"nothing in this tree assigns {flag}; check the name for this version "
        f"(tree.grep({flag.split('.')[-1]!r}) shows where it is read)"
    )


def _sites_in(module: ModuleInfo, parts: list[str], ev: Evaluator | None, cache: TreeIndex):
    lines = write_lines(module, parts)
    if not lines:
        return []
    writes = list(writes_in(module, parts, cache.setters(module), lines))
    if not writes:
        return []
    parents = cache.parents(module)
    sites: list[AssignmentSite] = []
    for write in writes:
        sites.extend(explain_write(module, write, parents, ev))
    return sites
