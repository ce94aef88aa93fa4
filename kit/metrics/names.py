"""The metric families an sglang release declares, read from its own source.

sglang declares them as ``Gauge(name="sglang:...", documentation=..., labelnames=...)``
(and ``Counter``, ``Histogram``, ``Summary``) in ``srt/observability/metrics_collector.py``
(0.5.11 already has it there) or ``srt/metrics/collector.py`` (older releases). Only string
literals count: the source is parsed, never run. A counter's series carry ``_total`` and a
histogram's ``_bucket``/``_sum``/``_count``, as prometheus_client writes them.

The families the kit itself reads are named here once, one constant each (``GEN_THROUGHPUT`` ...):
the decode log's fields, the timeline's panels and the runtime facts name them through these.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

__all__ = ["COLLECTOR_PATHS", "KIT_READS", "PD_READS", "MetricDecl", "MetricNames", "declared_metrics", "metric_names"]

COLLECTOR_PATHS = ("srt/observability/metrics_collector.py", "srt/metrics/collector.py")

# The families the kit reads, as sglang declares them (both collector files; all of them from 0.5.11).
# Gauges:
GEN_THROUGHPUT = "sglang:gen_throughput"
NUM_RUNNING_REQS = "sglang:num_running_reqs"
NUM_QUEUE_REQS = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"
SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"
IS_CUDA_GRAPH = "sglang:is_cuda_graph"
CACHE_HIT_RATE = "sglang:cache_hit_rate"
NUM_RETRACTED_REQS = "sglang:num_retracted_reqs"
# Counters (declared with their ``_total``, or given it by prometheus_client):
NUM_REQUESTS = "sglang:num_requests_total"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
GENERATION_TOKENS = "sglang:generation_tokens_total"
CACHED_TOKENS = "sglang:cached_tokens_total"
CUDA_GRAPH_PASSES = "sglang:cuda_graph_passes_total"
NUM_RETRACTED_REQUESTS = "sglang:num_retracted_requests_total"
NUM_RETRACTED_INPUT_TOKENS = "sglang:num_retracted_input_tokens_total"
NUM_RETRACTED_OUTPUT_TOKENS = "sglang:num_retracted_output_tokens_total"
# Histograms (series ``_bucket``, ``_sum``, ``_count``):
QUEUE_TIME = "sglang:queue_time_seconds"
TIME_TO_FIRST_TOKEN = "sglang:time_to_first_token_seconds"
KIT_READS = (GEN_THROUGHPUT, NUM_RUNNING_REQS, NUM_QUEUE_REQS, TOKEN_USAGE, SPEC_ACCEPT_LENGTH, IS_CUDA_GRAPH,
             CACHE_HIT_RATE, NUM_RETRACTED_REQS, NUM_REQUESTS, PROMPT_TOKENS, GENERATION_TOKENS, CACHED_TOKENS,
             CUDA_GRAPH_PASSES, NUM_RETRACTED_REQUESTS, NUM_RETRACTED_INPUT_TOKENS, NUM_RETRACTED_OUTPUT_TOKENS,
             QUEUE_TIME, TIME_TO_FIRST_TOKEN)
# Prefill/decode disaggregation (srt/observability/metrics_collector.py, "PD disaggregation"). Not in KIT_READS:
# the families change between releases (0.5.11 declares the prefill prealloc queue, 0.5.23 the prefill
# bootstrap queue in its place), so a reader asks the release's own declarations which of these it has.
PREFILL_PREALLOC_QUEUE = "sglang:num_prefill_prealloc_queue_reqs"
PREFILL_BOOTSTRAP_QUEUE = "sglang:num_prefill_bootstrap_queue_reqs"
PREFILL_INFLIGHT_QUEUE = "sglang:num_prefill_inflight_queue_reqs"
DECODE_PREALLOC_QUEUE = "sglang:num_decode_prealloc_queue_reqs"
DECODE_TRANSFER_QUEUE = "sglang:num_decode_transfer_queue_reqs"
KV_TRANSFER_SPEED = "sglang:kv_transfer_speed_gb_s"
KV_TRANSFER_LATENCY = "sglang:kv_transfer_latency_ms"
BOOTSTRAP_FAILED = "sglang:num_bootstrap_failed_reqs_total"
TRANSFER_FAILED = "sglang:num_transfer_failed_reqs_total"
PD_READS = (PREFILL_PREALLOC_QUEUE, PREFILL_BOOTSTRAP_QUEUE, PREFILL_INFLIGHT_QUEUE, DECODE_PREALLOC_QUEUE,
            DECODE_TRANSFER_QUEUE, KV_TRANSFER_SPEED, KV_TRANSFER_LATENCY, BOOTSTRAP_FAILED, TRANSFER_FAILED)
_KINDS = {"Gauge", "Counter", "Histogram", "Summary"}


@dataclass(frozen=True)
class MetricDecl:
    name: str  # the family as declared, e.g. "sglang:cuda_graph_passes_total"
    kind: str  # gauge, counter, histogram, summary
    documentation: str
    labels: tuple[str, ...]  # literal extra label names (e.g. "mode"); the collector's own labels are not literal
    site: str  # sglang/srt/...:line

    @property
    def series(self) -> tuple[str, ...]:
        """The series names a scrape shows for this family."""
        if self.kind == "counter":
            return (self.name if self.name.endswith("_total") else self.name + "_total",)
        if self.kind in ("histogram", "summary"):
            tails = ("_bucket", "_sum", "_count") if self.kind == "histogram" else ("_sum", "_count")
            return tuple(self.name + t for t in tails)
        return (self.name,)


@dataclass
class MetricNames:
    """What one release declares: ``names[name]`` -> MetricDecl, and which files were read."""

    version: str | None
    files: list[str]
    decls: dict[str, MetricDecl] = field(default_factory=dict)

    def __contains__(self, name: str) -> bool:
        return self.find(name) is not None

    def find(self, name: str) -> MetricDecl | None:
        """The family that declares a family or series name (``..._total``, ``..._bucket`` included)."""
        if name in self.decls:
            return self.decls[name]
        for decl in self.decls.values():
            if name in decl.series:
                return decl
        return None

    def missing(self, name: str) -> str | None:
        """None when declared, else a sentence naming the release and the files read."""
        if name in self:
            return None
        where = " and ".join(f"sglang/{f}" for f in self.files) or "no metrics collector file"
        return f"{name} is not declared by sglang {self.version or '(unknown version)'} ({where} read)"

    def frame(self):
        import pandas as pd

        return pd.DataFrame([(d.name, d.kind, ", ".join(d.labels), d.site, d.documentation)
                             for d in self.decls.values()],
                            columns=["name", "kind", "extra_labels", "site", "documentation"])


def declared_metrics(tree) -> MetricNames:
    """The families declared in ``tree`` (a SourceTree or anything with ``read_text``)."""
    from kit._pysource import modules_for

    modules = modules_for(tree)
    out = MetricNames(getattr(tree, "version", None), [])
    for path in COLLECTOR_PATHS:
        module = modules.get(path)
        if module is None:
            continue
        out.files.append(path)
        for node in ast.walk(module.tree):
            decl = _declaration(node, module)
            if decl is not None and decl.name not in out.decls:
                out.decls[decl.name] = decl
    return out


def _declaration(node: ast.AST, module) -> MetricDecl | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    kind = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if kind not in _KINDS:
        return None
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    args = list(node.args)
    name = kw.get("name", args[0] if args else None)
    doc = kw.get("documentation", args[1] if len(args) > 1 else None)
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    labels = ()
    names = kw.get("labelnames")
    if isinstance(names, ast.BinOp) and isinstance(names.right, (ast.List, ast.Tuple)):
        names = names.right  # list(labels.keys()) + ["mode"]
    if isinstance(names, (ast.List, ast.Tuple)):
        labels = tuple(e.value for e in names.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    text = doc.value if isinstance(doc, ast.Constant) and isinstance(doc.value, str) else ""
    return MetricDecl(name.value, kind.lower(), text, labels, module.where(node))


def metric_names(version: str) -> MetricNames:
    """The families of sglang ``version``, from its real wheel (downloaded once into the kit's cache)."""
    from kit._paths import tree_dir
    from kit._wheels import install_package_source
    from kit.hosts import LocalHost
    from kit.source import SourceTree

    package_dir = install_package_source("sglang", version, prefix=str(tree_dir("sglang", version)))
    tree = SourceTree.at(LocalHost(), package_dir)
    names = declared_metrics(tree)
    names.version = names.version or version
    return names
