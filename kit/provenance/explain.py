"""explain(): every assignment to a flag, with its guards, evaluated against the server's args."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from kit._pysource import Environment, Evaluator, ModuleInfo
from kit.errors import KitError, UnknownFlag
from kit.model_config import load_model_config, model_config_beside
from kit.server_args import cli_defaults, defaults, effective_args, flag_table, lineage, parse_command
from kit.source import SourceTree

from .guards import explain_write
from .result import AssignmentSite, FlagExplanation
from .sequence import sequenced
from .sites import TreeIndex, index_for, write_lines, writes_in

# sglang's hardware probes as a server on NVIDIA GPUs answers them (`explain(..., probes=CUDA_PROBES)`).
CUDA_PROBES = {
    "is_cuda": True, "is_cuda_alike": True, "is_hip": False, "is_npu": False, "is_cpu": False, "is_mps": False,
    "is_xpu": False, "is_musa": False, "is_hpu": False, "current_platform.is_out_of_tree": False,
}


def explain(
    tree, flag: str, snapshot=None, model_config=None, *, under: str | None = "srt", command=None,
    environ=None, probes=None,
) -> FlagExplanation:
    """Every assignment to `flag` in `tree`, with its guards, evaluated when a snapshot is given.

    `flag` is a ServerArgs field (`disable_piecewise_cuda_graph`, `--disable-piecewise-cuda-graph`)
    or a dotted path into one (`cuda_graph_config.prefill.backend`). `snapshot` is a
    ServerArgsSnapshot or a dict of field values; `model_config` a path to config.json or a dict.
    `command` is the server's launch command (argv, a string, or the explicit fields it set):
    with it the flag's value at launch is known, so guards that test it (`self.x is None`)
    are decided; without a snapshot, guards are evaluated against the command and this
    release's defaults (what a launch of another release's command would start from). `environ` is the server's environment (a dict, or a kit._pysource.Environment
    saying which variables were read), for guards like `envs.SGLANG_USE_MODELSCOPE.get()`.
    `probes` answers sglang's hardware probes when the server's hardware is known
    (`{"is_cuda": True}`; `CUDA_PROBES` for an NVIDIA GPU); the others stay unknown.
    `under` limits the search to the server runtime (`srt/`); None searches benchmarks and tools too.
    A name from another release is taken too (kit.server_args.lineage): a deprecated alias is
    followed to the field it sets (0.5.18 `--disable-piecewise-cuda-graph` ->
    `cuda_graph_config.prefill.backend`), a name not there yet or removed to the field of this
    release (0.5.9: `enable_piecewise_cuda_graph`), and `lineage` says so. When the release has
    no such setting at all (0.5.3 has no prefill CUDA graph), the explanation has no sites and says why.
    Raises UnknownFlag, with the names it may have meant, when neither the tree nor the kit's
    lineage data know the name.
    """
    asked = normalize_flag(flag)
    line = lineage(tree, asked)
    flag = line.field if line.redirected and line.field else asked
    notes = ([line.note] if line.folds and not line.redirected else []) + _architecture_notes(tree, model_config)
    if line.redirected and line.status != "unknown" and line.field is None:
        return FlagExplanation(flag=asked, version=getattr(tree, "version", None), evaluated=snapshot is not None,
                               lineage=line.note, asked=asked, notes=notes)
    parts = flag.split(".")
    cache = index_for(tree)
    values = _snapshot_values(snapshot)
    config = load_model_config(model_config)
    known = _Known(tree)
    explicit = known.explicit(command)
    if values is None and command is not None:
        # No log: the launch command's fields, and this release's defaults for the rest.
        values = dict(explicit)
    # The flag itself is shadowed: the log holds its final value, not the one a guard saw;
    # the launch command gives its value at launch, which is what the first guards see.
    ev = (Evaluator(cache.modules, values, config, {parts[0]}, defaults=_Defaults(tree),
                    environ=_environment(environ), initial=known.initial(parts[0], explicit), probes=probes)
          if values is not None else None)
    sites, resolved = _find_sites(cache, parts, ev, under)
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
        resolved=resolved,
        lineage=line.note if line.redirected and line.status != "unknown" else "",
        asked=asked if flag != asked else "",
        notes=notes,
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
        # imported here: the stand-in lab server imports this module, and does not ship kit.target
        from kit.target import ENV_PREFIXES

        environ = Environment(server.env, prefixes=ENV_PREFIXES, where=f"/proc/{server.pid}/environ")
    # the host's machine and its torch's own answers, under whatever probes the caller gives
    from .host_probes import host_probes

    options["probes"] = {**host_probes(server), **(options.get("probes") or {})}
    return explain(tree, flag, snapshot, config, command=options.pop("command", None) or server.argv,
                   environ=environ, **options)


def why(flag: str, target: str = "local", *, host=None, server=None, pid: int | None = None,
        port: int | None = None, tree=None, **options) -> FlagExplanation:
    """Why ``flag`` has its value on the SGLang server at ``target`` (``lab``, ``local``, an SSH target;
    ``host`` reuses an open connection, ``server`` a server already found): :func:`explain_server` with
    the server's own sglang source (copied once to this machine when remote), effective arguments,
    model config, launch command and environment. ``options`` go to :func:`explain` (``snapshot``,
    ``model_config``, ``command``, ``probes``). ``kit.why`` is this function; ``sgl-kit why`` prints it."""
    from kit.source import source_for_server
    from kit.target import connect, resolve_server

    opened = connect(target) if host is None and server is None else None
    try:
        if server is None:
            server = resolve_server(host or opened, target, pid=pid, port=port, prefetch={"probes": True})
        return explain_server(server, flag, tree if tree is not None else source_for_server(server), **options)
    finally:
        if opened is not None:
            opened.close()


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
    found = []
    for path in cache.candidates(parts):
        if under and not path.startswith(under.rstrip("/") + "/"):
            continue
        module = cache.modules.get(path)
        if module is not None:
            found.extend((module, write) for write in _writes_of(module, parts, cache))
    resolved = ""
    if ev is not None and len(parts) > 1:
        # A nested config (cuda_graph_config.prefill.backend) is built, then tested, during the
        # resolution: guards that read it need its value where they run.
        sites, resolved = sequenced(cache, parts, ev, found)
    else:
        sites = [site for module, write in found
                 for site in explain_write(module, write, cache.parents(module), ev, cache.calls)]
    return sorted(sites, key=lambda s: (s.file, s.line)), resolved


def normalize_flag(flag: str, tree=None) -> str:
    """`--disable-piecewise-cuda-graph` and `disable_piecewise_cuda_graph` name the same field.

    With ``tree``, the field that name stands for in that tree, whatever release the name is
    from (kit.server_args.lineage): 0.5.18 `--disable-piecewise-cuda-graph` is
    `cuda_graph_config.prefill.backend`, 0.5.9 `disable_piecewise_cuda_graph` is
    `enable_piecewise_cuda_graph`. The name itself when the tree has no field for it.
    """
    if not isinstance(flag, str) or not flag.strip().lstrip("-"):
        raise ValueError(f"not a flag name: {flag!r}")
    name = flag.strip().lstrip("-").replace("-", "_")
    if tree is None:
        return name
    found = lineage(tree, name)
    return found.field if found.redirected and found.field else name


def _architecture_notes(tree, model_config) -> list[str]:
    """Says so when this release has no model class for the model's architecture (0.5.6 and Qwen3.5)."""
    grep = getattr(tree, "grep", None)
    if model_config is None or not callable(grep):
        return []
    try:
        config = load_model_config(model_config)
    except KitError:
        return []
    out = []
    version = getattr(tree, "version", None) or "(version unknown)"
    known = index_for(tree).modules.scratch.setdefault("architectures", {})
    for arch in (config or {}).get("architectures") or []:
        if not isinstance(arch, str) or not arch.isidentifier():
            continue
        if arch not in known:
            known[arch] = index_for(tree).stored("architectures", arch, lambda arch=arch: any(
                m.path.startswith("srt/models/") for m in grep(arch, fixed=True, max_matches=200)),
                lambda found: type(found) is bool)
        if not known[arch]:
            out.append(f"{arch} is unknown to sglang {version}: no model in srt/models/ names it, so this "
                       "release would try its Transformers fallback or refuse to load the model; rules keyed "
                       "on the architecture in later releases do not exist here")
    return out


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


def _writes_of(module: ModuleInfo, parts: list[str], cache: TreeIndex):
    lines = write_lines(module, parts)
    return list(writes_in(module, parts, cache.setters(module), lines)) if lines else []
