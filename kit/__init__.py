"""sglang-investigation-kit: find out why an SGLang server is slow, and prove the fix.

    import kit
    d = kit.doctor("lab")                      # a live target, or files: kit.doctor(log="server.log")
    kit.why("disable_piecewise_cuda_graph", "lab")
    kit.args("lab").auto_changed
    run = kit.bench("lab", requests=16)
    kit.compare(run_before, run)

The public API is what ``__all__`` lists: the verbs (``connect``, ``discover``, ``doctor``,
``why``, ``args``, ``bench``, ``compare``, ``sweep``, ``compare_sweeps``, ``goodput``, ``report``,
``upgrade_diff``, ``dry_run``, ``Lab``, ``timeline``), what they return, the notebooks' namespaces (``kit.notebook``,
``kit.investigation``, ``kit.display``, ``kit.practice``) and the error tree (``kit.errors``).
The ``sgl-kit`` commands are a thin layer over the same verbs. ``import kit`` loads almost
nothing: each name is imported from its module on first use, so a notebook that only
connects does not pay for pandas, aiohttp or paramiko. Modules whose names start with an
underscore are private and may change without notice. The map of the package is
``docs/architecture.md``.
"""

from __future__ import annotations

from importlib import import_module as _import_module

from ._version import __version__ as __version__

# The verbs: what an investigation does. Each returns a result object that prints as text
# (``to_text``), as JSON data (``to_dict``) and in a notebook as HTML (``_repr_html_``).
# ``kit.doctor``, ``kit.bench`` and ``kit.report`` are packages that are also their verb
# (kit._verbs): ``kit.doctor("lab")`` and ``kit.doctor.rules`` both work.
_VERBS = {
    "args": "kit.server_args.view",          # the arguments a server runs with, each with its origin
    "bench": None,                           # kit.bench(target, concurrency=..., requests=...) -> BenchRun
    "capture": "kit.case",                   # a live target's evidence, kept in a case directory -> CaptureResult
    "compare": "kit.bench",                  # compare(run_a, run_b) -> Comparison (bootstrap interval)
    "compare_sweeps": "kit.bench",           # compare_sweeps(sweep_a, sweep_b) -> SweepComparison (Pareto fronts)
    "connect": "kit.target",                 # a target string -> Host
    "discover": "kit.target",                # the SGLang servers on a Host
    "doctor": None,                          # kit.doctor(target or files) -> Diagnosis
    "dry_run": "kit.dryrun",                 # sglang's own argument resolution on CPU -> DryRunResult
    "goodput": "kit.bench",                  # goodput(run, "ttft=500ms,itl=50ms") -> Goodput (share meeting an SLO)
    "inventory": "kit.target",               # what a Host has: OS, CPUs, memory, GPUs
    "Lab": "kit.lab",                        # the built-in stand-in server
    "report": None,                          # kit.report([notebooks], out) -> ReportResult
    "resolve_server": "kit.target",          # a target (and --pid/--port) -> the one ServerProcess
    "sweep": "kit.bench",                    # sweep(target, [1, 2, 4, 8]) -> Sweep (one run per concurrency)
    "timeline": "kit.metrics.server",        # what a server did over time (its log, Prometheus)
    "upgrade_diff": "kit.upgrade",           # one launch across sglang releases -> UpgradeDiff
    "why": "kit.provenance",                 # why a flag has its value -> FlagExplanation
}
# Namespaces the guided notebooks use, and the error tree.
_NAMESPACES = ("case", "display", "errors", "fleet", "investigation", "notebook", "practice")
# What the verbs return, and the readers of a launch's evidence.
_TYPES = {
    "BenchConfig": "kit.bench",
    "BenchRun": "kit.bench",
    "CaptureResult": "kit.case",
    "Comparison": "kit.bench",
    "Diagnosis": "kit.doctor",
    "DryRunResult": "kit.dryrun",
    "effective_args": "kit.server_args",
    "FlagExplanation": "kit.provenance",
    "Goodput": "kit.bench",
    "from_server_info": "kit.server_args",
    "Host": "kit.hosts",
    "HostInventory": "kit.target",
    "LabStatus": "kit.lab",
    "model_config_beside": "kit.model_config",
    "parse_command": "kit.server_args",
    "parse_log": "kit.server_args",
    "parse_log_file": "kit.server_args",
    "parse_target": "kit.target",
    "ReportResult": "kit.report",
    "ServerArgs": "kit.server_args.view",
    "ServerArgsSnapshot": "kit.server_args",
    "server_flags": "kit.server_args",
    "ServerProcess": "kit.target",
    "source_for_server": "kit.source",
    "SourceTree": "kit.source",
    "Sweep": "kit.bench",
    "SweepComparison": "kit.bench",
    "UpgradeDiff": "kit.upgrade",
}
# a few names under another name in their module
_ALIASES = {("timeline", "kit.metrics.server"): "server_timeline"}

__all__ = sorted([*_VERBS, *_NAMESPACES, *_TYPES], key=str.lower)


def __getattr__(name: str):
    if name in _NAMESPACES or _VERBS.get(name, "") is None:
        value = _import_module(f"kit.{name}")  # a package (a verb package is callable)
    elif name in _VERBS or name in _TYPES:
        module = _VERBS.get(name) or _TYPES[name]
        value = getattr(_import_module(module), _ALIASES.get((name, module), name))
    else:
        raise AttributeError(f"module 'kit' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
