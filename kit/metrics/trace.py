"""An offline summary of torch-profiler traces (Chrome trace JSON, ``.json`` or ``.json.gz``), streamed.

sglang writes one file per rank on ``/start_profile``: ``<id>-TP-<rank>[-DP-..][-EXTEND|-DECODE].trace.json.gz``
(0.5.11 ``srt/utils/profile_utils.py:306``), and names each forward step
``step[EXTEND bs=N toks=T]`` or ``step[DECODE bs=N]`` (``srt/model_executor/model_runner.py:3469-3476``).

The file is read event by event (``json.JSONDecoder.raw_decode`` over a sliding buffer), so
memory stays bounded by the largest single event, whatever the file's size. A file cut off
mid-way gives the summary of what was read, ``truncated`` set and a problem saying where;
a file that is no Chrome trace raises :class:`~kit.errors.TraceError`.

What is summarised: the steps by mode and batch size; CUDA graph launches against kernel
launches (one ``cudaGraphLaunch`` per replay, one ``cudaLaunchKernel`` per eager kernel); GPU
kernel time by class (GEMM, attention, MoE, norm, sampling, communication, other); NCCL and
custom all-reduce kernels, kept as (start, duration, stream) so that :mod:`kit.metrics.collectives`
can group them into logical collectives across ranks; per step, the GPU time left idle while the
step's CPU thread was in it (:func:`_idle_by_step`); the CPU ops that took longest.

Memory: the reader holds one event at a time; what the summary keeps grows with the number of
GPU kernels (two floats each, for the idle gaps), communication kernels and steps, never with
CPU ops or Python frames, which make most of a CPU trace's size.

Times: Kineto writes ``ts`` in microseconds and ``baseTimeNanoseconds`` such that
``baseTimeNanoseconds + ts * 1000`` is the epoch time (checked on a real sglang 0.5.11 trace: it
gives the profile id in the file name); collectives across ranks are aligned on that.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kit.errors import TraceError

__all__ = ["CPU_ONLY", "KERNEL_CLASSES", "TraceSummary", "iter_events", "kernel_class", "summarize_trace"]

_RUNS: dict = {}  # characters to skip -> the compiled run of them
_CHUNK = 1 << 16  # a gzip stream cut off loses at most this much of what was decompressed
_NAME = re.compile(r"-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-(?P<stage>EXTEND|DECODE))?")
_STEP = re.compile(r"^step\[(?P<mode>[A-Z_]+) bs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?\]$")
# First match wins; names as they appear in CUDA kernel names.
KERNEL_CLASSES = (
    ("communication", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device|custom_ar|all_?to_?all",
                                 re.I)),
    ("attention", re.compile(r"flash|fmha|attn|attention|paged|mla|decode_kernel|prefill_kernel", re.I)),
    ("moe", re.compile(r"moe|expert|topk_softmax|fused_experts", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|cublas|sm\d+_xmma|ampere_|hopper_|matmul|gemv|splitk", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("sampling", re.compile(r"sampl|argmax|softmax|top_?k|top_?p", re.I)),
)
_GRAPH_LAUNCH = {"cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch"}
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation"}
CPU_ONLY = "CPU trace: no CUDA events"
_KERNEL_LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel"}


CPU_BOUND_IDLE = 0.5  # the kit's own threshold: a step whose GPU sat idle this share of it counts as CPU-bound


@dataclass
class TraceSummary:
    path: str
    rank: dict = field(default_factory=dict)  # tp, dp, stage from the file name
    events: int = 0
    truncated: bool = False
    problems: list[str] = field(default_factory=list)
    # "DECODE bs=4" -> {"count", "total_us", "median_us", "graph_launches", "kernel_launches",
    #                   "gpu_idle_us", "cpu_bound"}: the last two None without GPU kernels
    steps: dict = field(default_factory=dict)
    graph_launches: int = 0
    kernel_launches: int = 0
    kernels: int = 0
    cuda_events: int = 0  # CUDA runtime/driver calls, kernels, memcpy/memset, GPU annotations
    kernel_us_by_class: dict = field(default_factory=dict)
    nccl: dict = field(default_factory=dict)  # {"kernels", "summed_us"}: NCCL and custom all-reduce kernels
    top_cpu_ops: list = field(default_factory=list)  # (name, count, total_us)
    devices: list = field(default_factory=list)
    world: dict = field(default_factory=dict)  # distributedInfo: rank, world_size, backend
    base_us: float = 0.0  # baseTimeNanoseconds / 1000: add to ts for epoch microseconds
    idle: dict = field(default_factory=dict)  # over all steps: step_us, gpu_idle_us, largest_gap_us, cpu_bound
    # (epoch us start, dur us, stream, kernel name) of each communication kernel; not in to_dict
    comm_kernels: list = field(default_factory=list, repr=False)

    @property
    def cpu_only(self) -> bool:
        return self.cuda_events == 0

    @property
    def graphs(self) -> str:
        """Whether CUDA graphs replayed, in one sentence (or why it cannot tell)."""
        if self.cpu_only:
            return (f"{CPU_ONLY} (no CUDA runtime call, no GPU kernel): whether CUDA graphs replay cannot be told "
                    "from it; this is not 'graphs off'")
        if not (self.graph_launches or self.kernel_launches):
            return "no CUDA launch recorded (GPU events without cuda_runtime calls: the CPU side was not traced)"
        if self.graph_launches and not self.kernel_launches:
            return f"CUDA graphs replayed: {self.graph_launches} graph launches, no eager kernel launch"
        if not self.graph_launches:
            return f"eager: {self.kernel_launches} kernel launches, no CUDA graph launch"
        return (f"mixed: {self.graph_launches} CUDA graph launches and {self.kernel_launches} eager kernel "
                "launches")

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "comm_kernels"}
        out["graphs"] = self.graphs
        out["cpu_only"] = self.cpu_only
        return out

    def to_text(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in self.rank.items() if v is not None) or "rank not in the name"
        lines = [f"{self.path}: {self.events} events ({where})" + (", CUT OFF" if self.truncated else "")]
        if self.cpu_only:
            lines.append(f"{CPU_ONLY}: CPU ops and annotations only")
        if self.steps:
            lines.append("steps:")
            for key, s in self.steps.items():
                extra = ""
                if s.get("gpu_idle_us") is not None:
                    extra = (f"  GPU idle {s['gpu_idle_us'] / max(s['total_us'], 1e-9):.0%}, "
                             f"{s['cpu_bound']} CPU-bound")
                if s.get("graph_launches") or s.get("kernel_launches"):
                    extra += f"  launches: {s['graph_launches']} graph, {s['kernel_launches']} eager"
                lines.append(f"  {key:<24} {s['count']:>6} x  median {s['median_us'] / 1000:.3f} ms  "
                             f"total {s['total_us'] / 1000:.1f} ms{extra}")
        else:
            lines.append("steps: none annotated (sglang names them step[...] while profiling)")
        lines.append(f"graphs: {self.graphs}")
        if self.kernels:
            total = sum(self.kernel_us_by_class.values()) or 1
            lines.append(f"GPU kernels: {self.kernels}, by class:")
            for cls, us in sorted(self.kernel_us_by_class.items(), key=lambda x: -x[1]):
                lines.append(f"  {cls:<14} {us / 1000:>10.2f} ms  {us / total:>6.1%}")
        if self.idle.get("step_us"):
            i = self.idle
            lines.append(f"CPU side: the GPU sat idle {i['gpu_idle_us'] / 1000:.2f} ms of {i['step_us'] / 1000:.2f} ms "
                         f"of steps ({i['gpu_idle_us'] / i['step_us']:.0%}; largest gap {i['largest_gap_us']:.0f} us), "
                         f"{i['cpu_bound']} of {i['steps']} steps CPU-bound (GPU idle >= {CPU_BOUND_IDLE:.0%})")
        elif self.steps and self.cpu_only:
            lines.append("CPU side: GPU idle gaps not measurable (no GPU kernels in the trace)")
        if self.nccl.get("kernels"):
            lines.append(f"communication: {self.nccl['kernels']} kernels, {self.nccl['summed_us'] / 1000:.2f} ms "
                         "summed kernel time (see collectives: the wait for the last rank is inside it)")
        if self.top_cpu_ops:
            lines.append("CPU ops by total time:")
            for name, count, us in self.top_cpu_ops:
                lines.append(f"  {name[:48]:<48} {count:>6} x  {us / 1000:>9.2f} ms")
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines) + "\n"


def _open(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rt", encoding="utf-8", errors="replace") if magic == b"\x1f\x8b" else \
        open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by the caller's with


class _Reader:
    """A sliding text buffer over a file with JSON values decoded one at a time."""

    def __init__(self, fh) -> None:
        self.fh, self.buf, self.pos, self.offset, self.eof = fh, "", 0, 0, False
        self.dec = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        try:
            more = self.fh.read(_CHUNK)
        except (OSError, EOFError) as err:  # gzip stream cut off
            self.eof = True
            raise _Cut(str(err)) from None
        if not more:
            self.eof = True
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos:] + more
        self.pos = 0
        return True

    def skip(self, chars: str = " \t\r\n") -> str:
        """The next character that is not in ``chars`` (not consumed), or '' at the end."""
        run = _RUNS.get(chars) or _RUNS.setdefault(chars, re.compile(f"[{re.escape(chars)}]*"))
        while True:
            self.pos = run.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def expect(self, char: str) -> None:
        if self.skip() != char:
            raise _NotTrace(f"expected {char!r} at character {self.offset + self.pos}")
        self.pos += 1

    def value(self):
        self.skip()
        while True:
            try:
                value, end = self.dec.raw_decode(self.buf, self.pos)
                if end == len(self.buf) and not self.eof:  # a number may go on in the next chunk
                    raise ValueError
                self.pos = end
                return value
            except ValueError:
                if not self._fill():
                    raise _Cut(f"a value starting at character {self.offset + self.pos} never ends") from None


class _Cut(Exception):
    pass


class _NotTrace(Exception):
    pass


def iter_events(path: str | Path, meta: dict | None = None) -> Iterator[dict]:
    """Each event of ``traceEvents``, in file order; other top-level keys go into ``meta``.

    Raises TraceError when the file is not a Chrome trace; a file cut off mid-way raises
    ``TraceError`` only after the events before the cut were yielded, with ``truncated`` in its message.
    """
    path = Path(path)
    meta = {} if meta is None else meta
    try:
        fh = _open(path)
    except OSError as err:
        raise TraceError(f"cannot read {path}: {err}", path=str(path), hint="give a .trace.json(.gz) file") from None
    seen_events = False
    with fh:
        r = _Reader(fh)
        try:
            r.expect("{")
            while True:
                c = r.skip(" \t\r\n,")
                if c == "}":
                    break
                if c != '"':
                    raise _NotTrace(f"expected a key at character {r.offset + r.pos}")
                key = r.value()
                r.expect(":")
                if key != "traceEvents":
                    meta[key] = r.value()
                    continue
                seen_events = True
                r.expect("[")
                while True:
                    c = r.skip(" \t\r\n,")
                    if c == "]":
                        r.pos += 1
                        break
                    if c == "":
                        raise _Cut("the traceEvents array never closes")
                    event = r.value()
                    if isinstance(event, dict):
                        yield event
        except _NotTrace as err:
            raise TraceError(f"{path} is not a Chrome trace (torch profiler JSON): {err}", path=str(path),
                             hint="sglang writes them as *-TP-<rank>*.trace.json.gz on /start_profile") from None
        except _Cut as err:
            raise TraceError(f"{path} is cut off: {err}", path=str(path),
                             hint="copy the file again once the profiler has finished writing it") from None
    if not seen_events:
        raise TraceError(f"{path} has no traceEvents: it is JSON, but not a torch-profiler trace", path=str(path),
                         hint="sglang writes them as *-TP-<rank>*.trace.json.gz on /start_profile")


@lru_cache(maxsize=8192)  # kernel names repeat: one regex pass per distinct name
def kernel_class(name: str) -> str:
    for cls, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return "other"


def summarize_trace(path: str | Path, top: int = 10) -> TraceSummary:
    """The summary of one trace file (see the module docstring); a cut-off file gives what was read."""
    from .collectives import comm_kind

    path = Path(path)
    m = _NAME.search(path.name)
    out = TraceSummary(str(path), {"tp": int(m["tp"]) if m else None,
                                   "dp": int(m["dp"]) if m and m["dp"] else None,
                                   "stage": m["stage"] if m else None})
    steps: list[tuple[float, float, str]] = []  # (ts, dur, key)
    by_class: Counter = Counter()
    cpu: dict[str, list] = {}
    meta: dict = {}
    kernel_iv = array("d")  # start, end of every GPU kernel, flat
    launches = {True: array("d"), False: array("d")}  # graph launch?, ts
    comm: list = []
    try:
        for ev in iter_events(path, meta):
            out.events += 1
            if ev.get("ph") != "X":
                continue
            cat = ev.get("cat", "")
            if cat == "python_function":
                continue
            name, dur = str(ev.get("name", "")), float(ev.get("dur") or 0.0)
            if cat in _GPU_CATS:
                out.cuda_events += 1
            if cat == "user_annotation" and (s := _STEP.match(name)):
                steps.append((float(ev.get("ts") or 0.0), dur, f"{s['mode']} bs={s['bs']}"))
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                if name in _GRAPH_LAUNCH:
                    out.graph_launches += 1
                    launches[True].append(float(ev.get("ts") or 0.0))
                elif name in _KERNEL_LAUNCH:
                    out.kernel_launches += 1
                    launches[False].append(float(ev.get("ts") or 0.0))
            elif cat == "kernel":
                out.kernels += 1
                cls = kernel_class(name)
                by_class[cls] += dur
                ts = float(ev.get("ts") or 0.0)
                kernel_iv.append(ts)
                kernel_iv.append(ts + dur)
                if comm_kind(name):
                    out.nccl["kernels"] = out.nccl.get("kernels", 0) + 1
                    out.nccl["summed_us"] = out.nccl.get("summed_us", 0.0) + dur
                    comm.append((ts, dur, ev.get("tid"), name))
            elif cat == "cpu_op":
                cell = cpu.setdefault(name, [0, 0.0])
                cell[0] += 1
                cell[1] += dur
    except TraceError as err:
        if out.events == 0 or "cut off" not in err.message:
            raise
        out.truncated = True
        out.problems.append(f"{err.message} (after {out.events} events)")
    out.base_us = float(meta.get("baseTimeNanoseconds") or 0) / 1000.0
    out.comm_kernels = [(out.base_us + ts, dur, tid, name) for ts, dur, tid, name in comm]
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        out.world = {k: info.get(k) for k in ("rank", "world_size", "backend")}
    out.steps, out.idle = _steps(steps, kernel_iv, launches)
    out.kernel_us_by_class = dict(by_class)
    out.top_cpu_ops = [(n, c, us) for n, (c, us) in sorted(cpu.items(), key=lambda x: -x[1][1])[:top]]
    out.devices = [d.get("name") for d in meta.get("deviceProperties") or [] if isinstance(d, dict)]
    return out


def _union(flat: array) -> tuple[list[float], list[float]]:
    """The union of [start, end) intervals given flat (s0, e0, s1, e1, ...), as sorted starts and ends."""
    pairs = sorted(zip(flat[0::2], flat[1::2], strict=True))
    starts: list[float] = []
    ends: list[float] = []
    for a, b in pairs:
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends


def _idle_in(starts: list[float], ends: list[float], a: float, b: float) -> tuple[float, float]:
    """GPU idle time within [a, b] given the union of kernel intervals, and the largest gap."""
    i = max(bisect_left(ends, a), 0)
    busy, cursor, largest = 0.0, a, 0.0
    while i < len(starts) and starts[i] < b:
        s, e = max(starts[i], a), min(ends[i], b)
        if e > s:
            largest = max(largest, s - cursor)
            busy += e - s
            cursor = e
        i += 1
    largest = max(largest, b - cursor)
    return max(b - a - busy, 0.0), largest


def _steps(steps: list, kernel_iv: array, launches: dict) -> tuple[dict, dict]:
    """Per step key: count, total, median, the launches inside the steps and the GPU idle time in them.

    GPU idle within a step: the part of the step's CPU span (the ``step[...]`` annotation on the
    scheduler thread) with no kernel on any stream of the trace's device: the GPU waited while the
    CPU thread was busy in that step.
    """
    starts, ends = _union(kernel_iv) if len(kernel_iv) else ([], [])
    graph_ts, eager_ts = sorted(launches[True]), sorted(launches[False])
    by_key: dict[str, list] = defaultdict(list)
    idle_all = {"steps": 0, "step_us": 0.0, "gpu_idle_us": 0.0, "largest_gap_us": 0.0, "cpu_bound": 0}
    for ts, dur, key in steps:
        g = bisect_left(graph_ts, ts + dur) - bisect_left(graph_ts, ts)
        k = bisect_left(eager_ts, ts + dur) - bisect_left(eager_ts, ts)
        idle = largest = None
        if starts:
            idle, largest = _idle_in(starts, ends, ts, ts + dur)
            idle_all["steps"] += 1
            idle_all["step_us"] += dur
            idle_all["gpu_idle_us"] += idle
            idle_all["largest_gap_us"] = max(idle_all["largest_gap_us"], largest)
            idle_all["cpu_bound"] += dur > 0 and idle / dur >= CPU_BOUND_IDLE
        by_key[key].append((dur, g, k, idle))
    out = {}
    for key in sorted(by_key):
        rows = by_key[key]
        measured = [r[3] for r in rows if r[3] is not None]
        out[key] = {"count": len(rows), "total_us": sum(r[0] for r in rows),
                    "median_us": statistics.median(r[0] for r in rows),
                    "graph_launches": sum(r[1] for r in rows), "kernel_launches": sum(r[2] for r in rows),
                    "gpu_idle_us": sum(measured) if measured else None,
                    "cpu_bound": (sum(1 for r in rows if r[3] is not None and r[0] > 0
                                      and r[3] / r[0] >= CPU_BOUND_IDLE) if measured else None)}
    return out, (idle_all if idle_all["steps"] else {})
