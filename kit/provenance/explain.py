"""explain(): every assignment to a flag, with its guards, evaluated against the server's args."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from kit._pysource import Environment, Evaluator, ModuleInfo
from kit.errors import KitError, UnknownFlag
from kit.model_config import load_model_config, model_config_beside
from kit.server_args import cli_defaults, defaults, effective_args, flag_table, parse_command
from kit.source import SourceTree
from kit.target import ENV_PREFIXES

from .guards import explain_write
from .result import AssignmentSite, FlagExplanation
from .sites import TreeIndex, index_for, write_lines, writes_in


def explain(
    tree, flag: str, snapshot=None, model_config=None, *, under: str | None = "srt", command=None,
    environ=None,
) -> FlagExplanation:
    """Every assignment to `flag` in `tree`, with its guards, evaluated when a snapshot is given.

    `flag` is a ServerArgs field (`disable_piecewise_cuda_graph`, `--disable-piecewise-cuda-graph`)
    or a dotted path into one (`cuda_graph_config.prefill.backend`). `snapshot` is a
    ServerArgsSnapshot or a dict of field values; `model_config` a path to config.json or a dict.
    `command` is the server's launch command (argv, a string, or the explicit fields it set):
    with it the flag's value at launch is known, so guards that test it (`self.x is None`)
    are decided. `environ` is the server's environment (a dict, or a kit._pysource.Environment
    saying which variables were read), for guards like `envs.SGLANG_USE_MODELSCOPE.get()`.
    `under` limits the search to the server runtime (`srt/`); None searches benchmarks and tools too.
    Raises UnknownFlag, with the names it may have meant, when the tree has no such field or flag.
    """
    flag = normalize_flag(flag)
    parts = flag.split(".")
    cache = index_for(tree)
    values = _snapshot_values(snapshot)
    config = load_model_config(model_config)
    known = _Known(tree)
    explicit = known.explicit(command)
    # The flag itself is shadowed: the log holds its final value, not the one a guard saw;
    # the launch command gives its value at launch, which is what the first guards see.
    ev = (Evaluator(cache.modules, values, config, {parts[0]}, defaults=_Defaults(tree),
                    environ=_environment(environ), initial=known.initial(parts[0], explicit))
          if values is not None else None)
    sites = _find_sites(cache, parts, ev, under)
    origin = ""
    if not sites:
        known.check_name(flag)
        origin = known.origin(parts[0], explicit)
    return FlagExplanation(
        flag=flag,
        version=getattr(tree, "version", None),
        sites=sites,
        observed=_observed(values, parts),
        evaluated=ev is not None,
        hint="" if origin else _hint(flag, sites),
        origin=origin,
    )


def explain_server(server, flag: str, tree=None, **options) -> FlagExplanation:
    """explain() for a server found by kit.target.discover: its own sglang source, its effective
    arguments, its model's config.json, its launch command and its environment."""
    tree = tree if tree is not None else SourceTree.of_server(server)
    snapshot = options.pop("snapshot", None) or effective_args(server)
    config = options.pop("model_config", None)
    if config is None and server.host is not None:
        config = model_config_beside(server.host, snapshot.get("model_path"))
    environ = options.pop("environ", None)
    if environ is None and server.env_readable:
        environ = Environment(server.env, prefixes=ENV_PREFIXES, where=f"/proc/{server.pid}/environ")
    return explain(tree, flag, snapshot, config, command=options.pop("command", None) or server.argv,
                   environ=environ, **options)


def _environment(environ):
    if environ is None or isinstance(environ, Environment):
        return environ
    return Environment(dict(environ), where="the given environment")


class _Known:
    """What the tree declares: fields, flags and their defaults, for names and values at launch."""

    def __init__(self, tree) -> None:
        self.tree = tree
        try:
            self.flags = flag_table(tree)
            self.defaults = cli_defaults(tree)
        except KitError:  # not an sglang tree with ServerArgs: nothing to check names against
            self.flags, self.defaults = None, {}

    def explicit(self, command) -> dict:
        if command is None or self.flags is None:
            return {}
        if isinstance(command, Mapping):
            return dict(command)
        return parse_command(command, self.flags, strict=False)

    def initial(self, name: str, explicit: dict) -> dict:
        if name in explicit:
            return {name: (explicit[name], "set by a flag on the launch command")}
        fd = self.defaults.get(name)
        if self.flags is None or fd is None or not fd.known or not explicit:
            return {}
        return {name: (fd.value, f"not on the launch command: its {fd.origin} default, {fd.source}")}

    def check_name(self, flag: str) -> None:
        if self.flags is None:
            return
        head = flag.split(".")[0]
        names = set(self.defaults) | {s.dest for s in self.flags} | {s.field for s in self.flags}
        if head in names or self.flags.has_option("--" + head.replace("_", "-")):
            return
        version = getattr(self.tree, "version", None) or "(version unknown)"
        close = difflib.get_close_matches(head, sorted(names), n=1, cutoff=0.75)
        raise UnknownFlag(
            f"no field {head} in sglang {version}",
            hint=(f"did you mean {close[0]}?" if close
                  else "`sgl-kit args parse LOG` lists the fields this version logs"),
            suggestions=close,
        )

    def origin(self, name: str, explicit: dict) -> str:
        """Where a field nothing assigns after launch gets its value: the command, or its default."""
        fd = self.defaults.get(name)
        if name in explicit:
            return f"nothing in this tree changes {name} after launch: the launch command sets it to {explicit[name]!r}"
        if fd is not None and fd.known:
            return (f"nothing in this tree changes {name} after launch: it keeps its {fd.origin} default "
                    f"{fd.value!r} ({fd.source}) unless a flag sets it")
        return ""


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
        sites.extend(explain_write(module, write, parents, ev, cache.calls))
    return sites
