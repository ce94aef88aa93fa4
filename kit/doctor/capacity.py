"""sglang's capacity arithmetic for one launch, from that release's own lines.

``report(case_or_evidence)`` runs four checks, each with the ``file:line`` of the formula in this version's source
(found by grep and ast when the check runs, never a stored line number), its inputs with where each came from, and
a conclusion:

- ``decode-graph-ceiling``: the largest captured decode batch against the requests the scheduler admits (and the
  Decode batch lines' ``#running-req``); above it the decode runner's ``can_run`` refuses the graph, and the batch
  runs eagerly;
- ``kv-pool``: ``max_total_num_tokens`` (the ready line, a ``--max-total-tokens`` cap, or the release's cell-size
  formula with the model's config) against ``context_len``, the load and the token usage seen;
- ``state-pool``: the mamba/linear-attention state pool of a hybrid model, and the cap it puts on running requests;
- ``chunked-prefill``: ``chunked_prefill_size`` and ``max_prefill_tokens`` against the prompt lengths seen.

An input the evidence does not give is shown as unknown with why, and the check says what it would conclude at the
values it can take; no check concludes from a value it did not read.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kit._text import short_path
from kit.errors import KitError

from .case import Case
from .evidence import Evidence

__all__ = ["CapacityCheck", "CapacityReport", "Input", "Site", "report"]

FULL_POOL = 0.9  # token usage at or above this: the pool is near full and sglang may retract requests

FINDING, FINE, UNKNOWN, NOT_APPLICABLE = "finding", "fine", "unknown", "not applicable"


@dataclass
class Input:
    name: str
    value: Any  # None: not known (``source`` says why)
    source: str

    def text(self) -> str:
        shown = "unknown" if self.value is None else self.value
        return f"{self.name} = {shown} ({self.source})"


@dataclass
class Site:
    where: str  # "srt/...py:N" of this version
    text: str  # that line, stripped
    what: str  # what it does in this check

    def show(self) -> str:
        return f"{self.where}  {self.what}: `{self.text}`"


@dataclass
class CapacityCheck:
    id: str
    title: str
    status: str  # finding, fine, unknown, not applicable
    conclusion: str
    inputs: list[Input] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    impact: str = ""

    def input(self, name: str) -> Any:
        return next((i.value for i in self.inputs if i.name == name), None)

    def text(self) -> str:
        out = [f"[{self.status}] {self.title}: {self.conclusion}"]
        out += [f"    input  {i.text()}" for i in self.inputs]
        out += [f"    source {s.show()}" for s in self.sites]
        out += [f"    note   {n}" for n in self.notes]
        if self.impact:
            out.append(f"    impact {self.impact}")
        return "\n".join(out)


@dataclass
class CapacityReport:
    version: str | None
    checks: list[CapacityCheck]
    basis: str | None = None  # how the version is known: given, reported, stated, inferred, assumed

    def check(self, id: str) -> CapacityCheck:
        return next(c for c in self.checks if c.id == id)

    @property
    def findings(self) -> list[CapacityCheck]:
        return [c for c in self.checks if c.status == FINDING]

    def text(self) -> str:
        if self.version is None:
            head = "capacity (sglang version unknown: no line of its source is cited)"
        elif self.basis in ("inferred", "assumed"):  # the lines cited are of the release assumed, not one known
            head = f"capacity (sglang {self.version} assumed ({self.basis}): the lines cited are of that release)"
        else:
            head = f"capacity (sglang {self.version})"
        return "\n".join([head] + [c.text() for c in self.checks])

    def to_dict(self) -> dict:
        return {"version": self.version, "version_basis": self.basis, "checks": [asdict(c) for c in self.checks]}


def report(case_or_evidence: Case | Evidence) -> CapacityReport:
    """The four capacity checks for a Case (or Evidence) of the doctor."""
    case = case_or_evidence if isinstance(case_or_evidence, Case) else Case(case_or_evidence)
    done = case.__dict__.get("_capacity_report")  # the rules ask for it several times per diagnosis
    if done is not None:
        return done
    src = _Source(case.ev.tree)
    checks = [_graph_ceiling(case, src), _kv_pool(case, src), _state_pool(case, src), _chunked_prefill(case, src)]
    case.__dict__["_capacity_report"] = done = CapacityReport(case.ev.version, checks, case.ev.version_basis)
    return done


# --------------------------------------------------------------------------- the source of this version


class _Source:
    """Lines of one release found by grep, checked with ast to be inside the function named."""

    def __init__(self, tree) -> None:
        self.tree = tree
        self._parsed: dict[str, ast.Module | None] = {}

    def find(self, pattern: str, what: str, *, files: tuple[str, ...] = (), within: tuple[str, ...] = (),
             fixed: bool = False, skip: tuple[str, ...] = ("/test", "npu", "cpu_graph", "xpu", "hpu")) -> list[Site]:
        if self.tree is None:
            return []
        try:
            hits = self.tree.grep(pattern, fixed=fixed, max_matches=400)
        except KitError:
            return []
        out = []
        for h in hits:
            path = short_path(h.path)
            if any(s in path for s in skip) or (files and not any(path.endswith(f) for f in files)):
                continue
            if within and self.function_at(h.path, h.line) not in within:
                continue
            out.append(Site(f"{path}:{h.line}", h.text.strip(), what))
        return out

    def first(self, *args, **kw) -> list[Site]:
        return self.find(*args, **kw)[:1]

    def function_at(self, path: str, line: int) -> str | None:
        """The name of the innermost def holding ``line``."""
        if path not in self._parsed:
            try:
                self._parsed[path] = ast.parse(self.tree.read_text(path))
            except (KitError, SyntaxError, ValueError):
                self._parsed[path] = None
        module = self._parsed[path]
        best = None
        for node in ast.walk(module) if module is not None else []:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno <= line <= node.end_lineno:
                if best is None or node.lineno > best.lineno:
                    best = node
        return best.name if best is not None else None

    def function(self, names: tuple[str, ...], files: tuple[str, ...] = ()):
        """(path, def node) of the first of ``names`` defined in the tree (in a file ending with one of ``files``)."""
        for name in names:
            for site in self.find(rf"^[[:space:]]*def {name}\(", f"def {name}", files=files):
                path = "sglang/" + site.where.rsplit(":", 1)[0]
                self.function_at(path, 1)
                module = self._parsed.get(path)
                for node in ast.walk(module) if module is not None else []:
                    if isinstance(node, ast.FunctionDef) and node.name == name \
                            and node.lineno == int(site.where.rsplit(":", 1)[1]):
                        return path, node
        return None


# --------------------------------------------------------------------------- inputs


def _ready(case: Case, key: str) -> Input | None:
    value = (case.ev.capacity or {}).get(key)
    if value is None:
        return None
    return Input(key, value, f"the ready line ({case.ev.sources.get('capacity', 'the log')})")


def _arg(case: Case, name: str, *, default_ok: bool = True) -> Input:
    """A server argument: its value and where it came from; None when the evidence does not tell it."""
    if case.unknown(name) and not case.has(name):
        return Input(name, None, f"not known: {case.unknown(name)}")
    value = case.value(name)
    if value is None:
        return Input(name, None, "not in the evidence (left to sglang's resolution at startup)"
                     if case.has(name) else "not in the evidence")
    if case.asked(name):
        return Input(name, value, "the launch command")
    if not default_ok:
        return Input(name, None, f"not asked for; {value!r} is the flag's default before sglang's resolution")
    return Input(name, value, case.origin(name) if case.ev.tree is not None else "the server arguments")


def _dp(case: Case) -> tuple[int, str]:
    """The DP attention size: sglang sets dp_size = tp_size with DP attention in 0.4.x (the write is cited)."""
    if case.value("enable_dp_attention") is not True:
        return 1, "no DP attention"
    dp = int(case.value("dp_size") or 1)
    if dp == 1 and case.ev.tree is not None:
        writes = _Source(case.ev.tree).first(r"self\.dp_size = self\.tp_size", "DP attention sets dp_size",
                                             files=("server_args.py",))
        if writes:
            return case.tp, f"DP attention on; dp_size = tp_size = {case.tp} ({writes[0].where})"
    return dp, f"DP attention on; dp_size {dp}"


def _gpu_mib(case: Case) -> tuple[int | None, str]:
    gpus = getattr(case.ev.hardware, "gpus", None) or []
    if gpus and gpus[0].memory_total_mib:
        return gpus[0].memory_total_mib, f"{gpus[0].name}, {gpus[0].memory_total_mib} MiB (the GPU table read)"
    profile = case.gpu_profile()
    if profile is not None and getattr(profile, "memory_mib", None):
        return int(profile.memory_mib), f"{profile.key}, {profile.memory_mib} MiB (the kit's GPU table)"
    name = getattr(case.ev.hardware, "gpu_name", None)
    if name:
        from kit.hardware import match_gpu

        p = match_gpu(name)
        if p is not None:
            mib = getattr(p, "memory_mib", None) or int(p.memory_gb * 1024)
            return mib, f"{name}: {p.key}, {mib} MiB (the kit's GPU table, {p.source})"
    return None, "no GPU in the evidence"


def _literal_writes(src: _Source, field_name: str) -> list[tuple[int, Site]]:
    """``self.<field> = <int>`` writes of server_args.py: the values sglang's own resolution can give it."""
    out = []
    for s in src.find(rf"self\.{field_name} = [0-9]+$", f"sglang's default for {field_name}",
                      files=("server_args.py",)):
        out.append((int(s.text.rsplit("=", 1)[1]), s))
    return out


def _resolution_site(case: Case, name: str, src: _Source) -> list[Site]:
    """The write of sglang's resolution that gave a field the launch left unset its value (kit.doctor.resolve)."""
    change = case.ev.resolution.change(name) if getattr(case.ev, "resolution", None) is not None else None
    if change is None or not change.decided or case.asked(name) or not change.site:
        return []
    path, _, line = change.site.rpartition(":")
    try:
        text = src.tree.read_text("sglang/" + path).splitlines()[int(line) - 1].strip()
    except (KitError, ValueError, IndexError, AttributeError):
        return []
    return [Site(change.site, text, f"sglang's resolution sets it ({change.how})")]


def _resolved_write(case: Case, field_name: str, src: _Source) -> tuple[int | None, list[Site], str]:
    """The value sglang's resolution gives a field the launch left unset: the fired write when provenance decides
    it, else every literal write it can take (value None) with the sites."""
    writes = _literal_writes(src, field_name)
    fired = []
    try:
        fired = [s for s in case.resolved_by(field_name) if s.status == "fired"]
    except KitError:
        fired = []
    for s in fired:
        for value, site in writes:
            if site.where == short_path(s.where):
                return value, [site], f"sglang's resolution ({site.where}, its guards hold for this launch)"
    if not writes:
        return None, [], "no literal default for it in this release's server_args.py"
    values = sorted({v for v, _ in writes})
    return None, [s for _, s in writes], (f"not decided from the evidence: this release's server_args.py sets one "
                                          f"of {values} by the GPU's memory and tp_size")


# --------------------------------------------------------------------------- 1. decode CUDA-graph ceiling


def _graph_ceiling(case: Case, src: _Source) -> CapacityCheck:
    check = CapacityCheck("decode-graph-ceiling", "Decode CUDA-graph ceiling against admitted requests", UNKNOWN, "")
    if case.no_gpu or case.value("disable_cuda_graph") is True:
        check.status, check.conclusion = NOT_APPLICABLE, ("no decode graph: " + (case.no_gpu or "disable_cuda_graph"
                                                                                  " is set"))
        return check
    name = "cuda_graph_max_bs_decode" if case.has("cuda_graph_max_bs_decode") else "cuda_graph_max_bs"
    ceiling = _arg(case, name)
    candidates: list[int] = []
    if ceiling.value is None and case.ev.tree is not None:
        value, sites, how = _resolved_write(case, name, src)
        check.sites += sites
        ceiling = Input(name, value, how)
        candidates = [value] if value is not None else sorted({int(s.text.rsplit("=", 1)[1]) for s in sites})
        if value is None and sites and _gpu_decides(case):
            mib, where = _gpu_mib(case)
            decided = _decide_by_memory(src, name, mib, case.tp)
            if decided is not None:
                ceiling = Input(name, decided[0], f"{decided[1].where} for {where}, tp_size {case.tp}")
                check.sites = [decided[1]]
                candidates = [decided[0]]
        if ceiling.value is None and sites:
            reach = _reachable_by_tp(src, name, case.tp)
            if reach:
                candidates = sorted({v for v, _ in reach})
                check.sites = [s for _, s in reach]
                ceiling = Input(name, None, f"not decided: the GPU's memory is not in the evidence; with tp_size "
                                f"{case.tp} this release sets one of {candidates} "
                                f"({', '.join(s.where for _, s in reach)})")
    elif ceiling.value is not None:
        candidates = [int(ceiling.value)]
        check.sites += _resolution_site(case, name, src)
    check.inputs.append(ceiling)
    dp, dp_how = _dp(case)
    check.inputs.append(Input("dp (attention)", dp, dp_how))
    admitted = _ready(case, "max_running_requests") or _arg(case, "max_running_requests")
    check.inputs.append(admitted)
    decode = case.ev.decode or {}
    peak = decode.get("max_running_req")
    check.inputs.append(Input("peak #running-req", peak, case.ev.sources.get("decode", "no Decode batch lines")))
    concurrency = (case.ev.bench or {}).get("concurrency")
    check.inputs.append(Input("requested concurrency", concurrency, "the benchmark" if concurrency else
                              "not in the evidence (the benchmark's --max-concurrency or request rate)"))
    runner = ("cuda_graph_runner.py", "decode_cuda_graph_runner.py")
    check.sites += src.first(r"<= self\.max_bs", "above the largest captured batch the decode graph is refused "
                             "and the batch runs eagerly", files=runner, within=("can_run", "can_run_graph"))
    if dp > 1:
        check.sites += src.first(r"global_num_tokens", "with DP attention the batch compared is the largest DP "
                                 "rank's: the ceiling is per DP rank", files=runner, within=("can_run", "can_run_graph"))
    check.sites += src.first(r"bs <= (num_max_requests|model_runner\.server_args\.cuda_graph_max_bs)",
                             "the captured sizes are clamped", files=runner + ("base_cuda_graph_runner.py",),
                             within=("get_batch_sizes_to_capture", "__init__"))
    if not candidates:
        check.conclusion = "the largest captured decode batch is not known: " + ceiling.source
        return check
    top, low = max(candidates), min(candidates)
    shown = f"{top}" if top == low else f"{low} or {top}"
    per = " per DP rank" if dp > 1 else ""
    if peak is not None and peak > top:
        check.status = FINDING
        check.conclusion = (f"the Decode batch lines reach {peak} running requests, above the largest captured batch "
                            f"({shown}){per}: those decode steps run eagerly")
    elif concurrency and admitted.value and admitted.value > low and concurrency / dp > low:
        check.status = FINDING
        check.conclusion = (f"max_running_requests {admitted.value} admits more than the largest captured batch "
                            f"({shown}){per}, and the benchmark runs {concurrency} at once: above {low} decode runs "
                            "eagerly")
    elif admitted.value is not None and admitted.value <= low:
        check.status = FINE
        check.conclusion = f"every admitted batch ({admitted.value}{per}) fits the captured graphs (up to {shown})"
    elif peak is not None:
        check.status = FINE
        check.conclusion = f"the Decode batch lines peak at {peak} running, within the captured graphs (up to {shown})"
    else:
        limit = (f"max_running_requests {admitted.value} admits more" if admitted.value else
                 "whether max_running_requests admits more is not known (the ready line tells it)")
        check.conclusion = (f"the graphs cover batches up to {shown}{per}; {limit}; decode runs eagerly whenever more "
                            f"than {low} requests run{per}; the load served is not in the evidence")
    if check.status == FINDING:
        check.impact = ("not estimated: what an eager decode step costs against a graph replay at that batch size; "
                        "would tell: a load benchmark within and above the ceiling (sgl-kit bench --concurrency N)")
    return check


def _gpu_decides(case: Case) -> bool:
    return _gpu_mib(case)[0] is not None


def _decide_by_memory(src: _Source, name: str, mib: int | None, tp: int) -> tuple[int, Site] | None:
    """Follow a 0.4.x-style ``if gpu_mem is not None and gpu_mem < N: (if self.tp_size < M: a else b) else c``
    block of server_args.py for this GPU's memory (MiB, as sglang reads it) and tp_size, from the parsed source."""
    if mib is None:
        return None
    writes = _literal_writes(src, name)
    if not writes:
        return None
    path = "sglang/" + writes[0][1].where.rsplit(":", 1)[0]
    src.function_at(path, 1)
    module = src._parsed.get(path)  # noqa: SLF001 - the parse this helper class keeps
    lines = {int(s.where.rsplit(":", 1)[1]): (v, s) for v, s in writes}
    env = {"gpu_mem": mib, "self.tp_size": tp}
    for node in ast.walk(module) if module is not None else []:
        if isinstance(node, ast.If) and any(isinstance(n, ast.Assign) and n.lineno in lines for n in ast.walk(node)) \
                and _mentions(node.test, "gpu_mem"):
            return _follow(node, env, lines)
    return None


def _reachable_by_tp(src: _Source, name: str, tp: int) -> list[tuple[int, Site]]:
    """The writes of the gpu_mem block that tp_size alone leaves possible (the GPU's memory not known)."""
    writes = _literal_writes(src, name)
    if not writes:
        return []
    path = "sglang/" + writes[0][1].where.rsplit(":", 1)[0]
    src.function_at(path, 1)
    module = src._parsed.get(path)  # noqa: SLF001 - the parse this helper class keeps
    lines = {int(s.where.rsplit(":", 1)[1]): (v, s) for v, s in writes}
    for node in ast.walk(module) if module is not None else []:
        if isinstance(node, ast.If) and any(isinstance(n, ast.Assign) and n.lineno in lines for n in ast.walk(node)) \
                and _mentions(node.test, "gpu_mem"):
            return _collect(node.body + node.orelse, {"self.tp_size": tp}, lines)
    return []


def _collect(body, env: dict, lines: dict) -> list:
    out = []
    for stmt in body:
        if isinstance(stmt, ast.Assign) and stmt.lineno in lines:
            out.append(lines[stmt.lineno])
        elif isinstance(stmt, ast.If):
            verdict = _test(stmt.test, env)
            if verdict is not False:
                out += _collect(stmt.body, env, lines)
            if verdict is not True:
                out += _collect(stmt.orelse, env, lines)
    return out


def _mentions(node, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _follow(node, env: dict, lines: dict):
    while node is not None:
        if isinstance(node, ast.If):
            verdict = _test(node.test, env)
            if verdict is None:
                return None
            body = node.body if verdict else node.orelse
        else:
            body = node
        nxt = None
        for stmt in body:
            if isinstance(stmt, ast.Assign) and stmt.lineno in lines:
                return lines[stmt.lineno]
            if isinstance(stmt, ast.If):
                nxt = stmt
                break
        node = nxt
    return None


def _test(node, env: dict):
    """A guard of names in ``env`` (``gpu_mem is not None and gpu_mem < 25_000``), or None when it reads more."""
    if isinstance(node, ast.BoolOp):
        values = [_test(v, env) for v in node.values]
        if None in values:
            return None
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _operand(node.left, env), _operand(node.comparators[0], env)
        op = node.ops[0]
        if isinstance(op, ast.IsNot):
            return left is not right
        if isinstance(op, ast.Is):
            return left is right
        if not isinstance(left, int | float) or not isinstance(right, int | float):
            return None
        return {ast.Lt: left < right, ast.LtE: left <= right, ast.Gt: left > right,
                ast.GtE: left >= right, ast.Eq: left == right}.get(type(op))
    return None


def _operand(node, env: dict):
    if isinstance(node, ast.Constant):
        return node.value
    return env.get(ast.unparse(node), _Missing)


class _Missing:
    pass


# --------------------------------------------------------------------------- 2. KV pool


def _kv_pool(case: Case, src: _Source) -> CapacityCheck:
    check = CapacityCheck("kv-pool", "KV pool against context length and load", UNKNOWN, "")
    tokens = _ready(case, "max_total_num_tokens")
    check.sites += src.first(r"max_total_num_tokens=\{", "the ready line prints the pool", files=("scheduler.py",))
    cap = _arg(case, "max_total_tokens")
    at_most = None
    if tokens is None and cap.value is not None:
        at_most = int(cap.value)
        check.sites += src.first(r"min\(self\.max_total_num_tokens, max_total_tokens\)|max_total_tokens <",
                                 "--max-total-tokens caps the profiled pool", files=("model_runner.py",
                                                                                    "model_runner_kv_cache_mixin.py",
                                                                                    "kv_cache_configurator.py"))
    formula = _cell_size(case, src)
    if formula is not None:
        check.sites += formula["sites"]
        check.notes += formula["notes"]
    if tokens is None:
        if at_most is not None:
            tokens = Input("max_total_num_tokens", None, f"no ready line; at most {at_most}, the launch's "
                                                        "--max-total-tokens, which caps the profiled pool")
        else:
            tokens = Input("max_total_num_tokens", None, "no ready line in the evidence")
    check.inputs.append(tokens)
    if formula is not None:
        check.inputs += formula["inputs"]
    context = _ready(case, "context_len") or _arg(case, "context_length")
    config = case.text_config
    if context.value is None and config.get("max_position_embeddings"):
        context = Input("context_len", config["max_position_embeddings"],
                        "the model's max_position_embeddings (config.json), sglang's default when --context-length "
                        "is not given")
    check.inputs.append(context)
    usage = _max_usage(case)
    check.inputs.append(usage)
    pool = tokens.value if tokens.value is not None else at_most
    bound = "" if tokens.value is not None else "at most "
    lines = []
    status = UNKNOWN
    if pool and context.value:
        fit = pool // int(context.value)
        lines.append(f"the pool holds {bound}{pool} tokens: {fit} request(s) of the full context_len "
                     f"{context.value}")
        status = FINDING if pool < int(context.value) else FINE
        if pool < int(context.value):
            lines[-1] += " — a request near context_len cannot be admitted"
    elif pool:
        lines.append(f"the pool holds {bound}{pool} tokens; context_len is not known")
    elif formula is not None and formula.get("estimate"):
        lines.append(formula["estimate"])
    else:
        lines.append("the pool's size is not known: the ready line (max_total_num_tokens=...) tells it")
    if usage.value is not None and usage.value >= FULL_POOL:
        status = FINDING
        lines.append(f"token usage reached {usage.value:.2f}: the pool runs full, new requests queue and running ones "
                     "can be retracted (recomputed later)")
        check.sites += src.first(r"def retract_decode", "retraction when the pool cannot hold the next decode step",
                                 files=("schedule_batch.py",))
    elif usage.value is not None and status != FINDING:
        status = FINE if pool or status == FINE else status
        lines.append(f"token usage peaks at {usage.value:.2f}, below {FULL_POOL}")
    check.status, check.conclusion = status, "; ".join(lines)
    if status == FINDING:
        check.impact = ("not estimated: how many requests queue or retract depends on the prompt and output lengths "
                        "served; would tell: the Decode batch lines' token usage and #queue-req under the real load")
    return check


def _max_usage(case: Case) -> Input:
    decode = case.ev.decode or {}
    best, where = decode.get("max_token_usage"), case.ev.sources.get("decode", "the Decode batch lines")
    for s in case.ev.prefill or []:
        if s.token_usage is not None and (best is None or s.token_usage > best):
            best, where = s.token_usage, f"Prefill batch line {s.line}"
    return Input("peak token usage", best, where if best is not None else "no Decode or Prefill batch lines")


def _cell_size(case: Case, src: _Source) -> dict | None:
    """This release's per-token KV size (``cell_size = ...``), evaluated from config.json for this launch."""
    found = src.function(("_compute_cell_size", "profile_max_num_token"),
                         files=("pool_configurator.py", "model_runner.py"))
    if found is None:
        return None
    path, node = found
    short = short_path(path)
    config = case.text_config
    mla = bool(config.get("kv_lora_rank"))
    assigns = [n for n in ast.walk(node) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "cell_size" for t in n.targets)]
    chosen = next((a for a in assigns if ("kv_lora_rank" in ast.unparse(a.value)) == mla), None)
    if chosen is None:
        return None
    site = Site(f"{short}:{chosen.lineno}", _line(case, path, chosen.lineno),
                f"bytes of KV per token, cell_size = {ast.unparse(chosen.value)}")
    out = {"sites": [site], "inputs": [], "notes": []}
    if not config:
        out["notes"].append(f"config.json is not in the evidence: {site.where} needs the model's layers and "
                            + ("kv_lora_rank + qk_rope_head_dim" if mla else "KV heads and head_dim"))
        return out
    kv_dtype = case.value("kv_cache_dtype")
    top = case.ev.model_config or {}
    dtype = str(config.get("torch_dtype") or config.get("dtype") or top.get("torch_dtype") or top.get("dtype") or "")
    size = 1 if kv_dtype and "fp8" in str(kv_dtype) else {"bfloat16": 2, "float16": 2, "float32": 4}.get(dtype)
    heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
    tp = case.tp
    names = {"kv_lora_rank": config.get("kv_lora_rank"), "qk_rope_head_dim": config.get("qk_rope_head_dim"),
             "num_hidden_layers": config.get("num_hidden_layers"), "num_layers": config.get("num_hidden_layers"),
             "num_effective_layers": config.get("num_hidden_layers"),
             "head_dim": config.get("head_dim") or (config.get("hidden_size", 0) // (config.get("num_attention_heads")
                                                                                     or 1) or None),
             "get_num_kv_heads": max(1, (heads or 0) // tp) if heads else None,
             "_element_size": size, "kv_size": size}
    names["v_head_dim"] = names["head_dim"]
    value = _evaluate(chosen.value, names)
    used = sorted({n for n in _names(chosen.value) if n in names})
    out["inputs"].append(Input("cell_size (bytes/token)", value,
                               f"{site.where} with " + ", ".join(f"{n} {names[n]}" for n in used)
                               + f" (config.json; kv_cache_dtype {kv_dtype!r}, model dtype {dtype or 'unknown'})"))
    mib, where = _gpu_mib(case)
    fraction = case.value("mem_fraction_static")
    if value and mib and fraction:
        tokens = int(mib * (1 << 20) * float(fraction) // value)
        out["estimate"] = (f"not read: with {where} and mem_fraction_static {fraction}, and the weights and "
                           f"activations left out, the pool would hold fewer than {tokens} tokens per GPU")
    elif value:
        out["notes"].append(f"{value} bytes per token per GPU: a GPU's memory x mem_fraction_static, less the weights, "
                            "over that, is the pool (the ready line's max_total_num_tokens says what it was)")
    return out


def _names(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _evaluate(node, names: dict):
    """An arithmetic expression of names, attributes and calls named in ``names`` (by their last name)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.Name | ast.Attribute):
        return names.get(node.id if isinstance(node, ast.Name) else node.attr)
    if isinstance(node, ast.Call):
        func = node.func
        return names.get(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if left is None or right is None:
            return None
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b if b else None}
        op = ops.get(type(node.op))
        return op(left, right) if op is not None else None
    return None


# --------------------------------------------------------------------------- 3. state pool


def _state_pool(case: Case, src: _Source) -> CapacityCheck:
    from .rules_runtime import _CAPPED, _cap, _said

    check = CapacityCheck("state-pool", "Mamba/state pool of a hybrid model against running requests", UNKNOWN, "")
    size = (case.ev.capacity or {}).get("max_mamba_cache_size")
    notices = _said(case, _CAPPED)
    slots = None
    if notices:
        m = re.search(r"max_mamba_cache_size=(\d+), (\d+) state slots per request", notices[0].text)
        if m:
            size, slots = int(m.group(1)), int(m.group(2))
    hybrid = case.hybrid_linear or size is not None or bool(notices)
    if not hybrid:
        check.status = NOT_APPLICABLE
        check.conclusion = ("no state pool: the model is not hybrid" if case.text_config else
                            "no sign of a hybrid model (no config.json, no `Mamba Cache` line, no state-cache notice)")
        return check
    where = "sglang's notice" if notices else case.ev.sources.get("capacity", "the log's `Mamba Cache is allocated`")
    check.inputs.append(Input("max_mamba_cache_size", size, where if size is not None else
                              "not in the evidence (the `Mamba Cache is allocated` line tells it)"))
    if slots is not None:
        check.inputs.append(Input("state slots per request", slots, "sglang's notice"))
    asked = (case.ev.explicit or {}).get("max_running_requests")
    check.inputs.append(Input("max_running_requests asked", asked, "the launch command" if asked else
                              "not in the evidence (no launch command)"))
    got = _ready(case, "max_running_requests")
    check.inputs.append(got or Input("max_running_requests", None, "no ready line"))
    peak = (case.ev.decode or {}).get("max_mamba_usage")
    if peak is not None:
        check.inputs.append(Input("peak mamba usage", peak, case.ev.sources.get("decode", "the Decode batch lines")))
    check.sites += src.first("is capped to", "sglang's notice of the cap", fixed=True)
    found = _cap(case)
    if found is not None and not found.sites:
        check.sites += src.first(r"max_mamba_cache_size //", "the cap: state slots over slots per request",
                                 within=("resolve_max_num_reqs", "_resolve_max_num_reqs"))
    if found is not None:
        for w in found.sites:
            path, _, span = w.partition(":")
            first = int(span.split("-")[0]) if span.split("-")[0].isdigit() else 0
            text = _line(case, path, first)
            check.sites.append(Site(f"{short_path(path)}:{first}", text,
                                    "this release's max_running_requests arithmetic"))
        check.notes += found.how
    if found is not None and found.mamba:
        check.status = FINDING
        check.conclusion = f"running requests are capped to {found.cap} by {found.by}"
        if size is not None and slots:
            check.conclusion += f": {size} // {slots} = {size // slots}"
        check.impact = ("not estimated: requests above the cap queue; how much throughput that costs depends on the "
                        "load; would tell: #queue-req of the Decode batch lines under the real load")
    elif found is not None:
        check.status = FINE
        check.conclusion = f"the state pool is not the bound: max_running_requests {found.cap} is set by {found.by}"
    elif got is not None and size is not None:
        check.status = FINE
        check.conclusion = (f"max_running_requests {got.value} is not below what was asked (or nothing was asked); "
                            f"the state pool holds {size} slots")
    else:
        check.conclusion = "hybrid model; the cap is not known: the ready line and the `Mamba Cache` line tell it"
    return check


def _line(case: Case, path: str, line: int) -> str:
    try:
        return case.ev.tree.read(path if path.startswith("sglang/") else "sglang/" + path, line, line).lines[0].strip()
    except (KitError, AttributeError, IndexError):
        return ""


# --------------------------------------------------------------------------- 4. chunked prefill


def _chunked_prefill(case: Case, src: _Source) -> CapacityCheck:
    check = CapacityCheck("chunked-prefill", "Chunked prefill against the prompt lengths seen", UNKNOWN, "")
    chunk = _ready(case, "chunked_prefill_size") or _arg(case, "chunked_prefill_size")
    if chunk.value is None and case.ev.tree is not None:
        value, sites, how = _resolved_write(case, "chunked_prefill_size", src)
        decided = _decide_by_memory(src, "chunked_prefill_size", _gpu_mib(case)[0], case.tp) if value is None else None
        if decided is not None:
            value, sites, how = decided[0], [decided[1]], f"{decided[1].where} for {_gpu_mib(case)[1]}"
        check.sites += sites
        chunk = Input("chunked_prefill_size", value, how)
    elif chunk.value is not None and not _ready(case, "chunked_prefill_size"):
        check.sites += _resolution_site(case, "chunked_prefill_size", src)
    dp, dp_how = _dp(case)
    resolved = getattr(case.ev, "resolution", None) is not None and any(
        c.field == "chunked_prefill_size" and c.decided for c in case.ev.resolution.changes)
    if dp > 1 and chunk.value and not _ready(case, "chunked_prefill_size") and not resolved:
        halve = src.first(r"self\.chunked_prefill_size = self\.chunked_prefill_size // ", "DP attention divides it",
                          files=("server_args.py",))
        if halve:
            div = halve[0].text.rsplit("//", 1)[1].strip()
            by = dp if "dp_size" in div else int(div) if div.isdigit() else None
            if by:
                chunk = Input("chunked_prefill_size", int(chunk.value) // by,
                              f"{chunk.value} ({chunk.source}) // {div} with DP attention ({halve[0].where})")
                check.sites += halve
    check.inputs.append(chunk)
    check.inputs.append(_ready(case, "max_prefill_tokens") or _arg(case, "max_prefill_tokens"))
    check.inputs.append(Input("dp (attention)", dp, dp_how))
    lines = case.ev.prefill or []
    seen = [s.new_token for s in lines if s.new_token is not None]
    check.inputs.append(Input("largest #new-token", max(seen) if seen else None,
                              case.ev.sources.get("prefill", "no Prefill batch lines")))
    check.sites += src.first(r"trunc_len = self\.rem_chunk_tokens", "a prompt longer than the chunk left is cut there",
                             files=("schedule_policy.py",))
    check.sites += src.first(r"enable_mixed_chunk", "decode waits for a prefill batch unless mixed chunks are on",
                             files=("scheduler.py",))
    size = chunk.value if isinstance(chunk.value, int) and chunk.value > 0 else None
    if chunk.value is not None and not size:
        check.status, check.conclusion = NOT_APPLICABLE, f"chunked prefill is off (chunked_prefill_size {chunk.value})"
        return check
    if size is None:
        check.conclusion = "chunked_prefill_size is not known: " + chunk.source
        return check
    full = [s for s in lines if s.new_token == size]
    blocking = [s for s in full if (s.running_req or 0) > 0]
    mixed = case.value("enable_mixed_chunk") is True
    if blocking and not mixed:
        check.status = FINDING
        check.conclusion = (f"{len(full)} Prefill batch line(s) are full {size}-token chunks, {len(blocking)} of them "
                            f"while requests were running (up to {max(s.running_req for s in blocking)}): each such "
                            "chunk holds those requests' decode for its duration (no --enable-mixed-chunk)")
        check.impact = ("not estimated: a chunk's time is not in the Prefill lines; would tell: the Decode batch "
                        "lines' gen throughput around the chunks, or a profile (sgl-kit profile)")
    elif seen:
        longest = max(seen)
        check.status = FINE
        check.conclusion = (f"the prefills seen fit one chunk of {size} (largest {longest} new tokens)" if longest < size
                            else f"prompts take up to {math.ceil(longest / size)} chunks of {size}; no decode was "
                            "running while they did")
    else:
        check.conclusion = (f"a prompt of N tokens takes ceil(N / {size}) prefill chunks; no Prefill batch lines or "
                            "benchmark input lengths show the prompts")
    return check
