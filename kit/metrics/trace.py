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
kernel time by class (GEMM, attention, MoE, norm, sampling, communication, other); NCCL kernels
(count and summed kernel time: summed over kernels, not grouped into logical collectives, so it
overstates wall time when ranks arrive at different times); the CPU ops that took longest.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kit.errors import TraceError

__all__ = ["KERNEL_CLASSES", "TraceSummary", "iter_events", "summarize_trace"]

_CHUNK = 1 << 16  # a gzip stream cut off loses at most this much of what was decompressed
_NAME = re.compile(r"-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-(?P<stage>EXTEND|DECODE))?")
_STEP = re.compile(r"^step\[(?P<mode>[A-Z_]+) bs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?\]$")
# First match wins; names as they appear in CUDA kernel names.
KERNEL_CLASSES = (
    ("communication", re.compile(r"nccl|all_?reduce|allgather|reduce_?scatter|cross_device|custom_ar", re.I)),
    ("attention", re.compile(r"flash|fmha|attn|attention|paged|mla|decode_kernel|prefill_kernel", re.I)),
    ("moe", re.compile(r"moe|expert|topk_softmax|fused_experts", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|cublas|sm\d+_xmma|ampere_|hopper_|matmul|gemv|splitk", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("sampling", re.compile(r"sampl|argmax|softmax|top_?k|top_?p", re.I)),
)
_GRAPH_LAUNCH = {"cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch"}
_KERNEL_LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "hipLaunchKernel"}


@dataclass
class TraceSummary:
    path: str
    rank: dict = field(default_factory=dict)  # tp, dp, stage from the file name
    events: int = 0
    truncated: bool = False
    problems: list[str] = field(default_factory=list)
    steps: dict = field(default_factory=dict)  # "DECODE bs=4" -> {"count", "total_us", "median_us"}
    graph_launches: int = 0
    kernel_launches: int = 0
    kernels: int = 0
    kernel_us_by_class: dict = field(default_factory=dict)
    nccl: dict = field(default_factory=dict)  # {"kernels", "summed_us"}
    top_cpu_ops: list = field(default_factory=list)  # (name, count, total_us)
    devices: list = field(default_factory=list)

    @property
    def graphs(self) -> str:
        """Whether CUDA graphs replayed, in one sentence (or why it cannot tell)."""
        if not (self.graph_launches or self.kernel_launches):
            return "no CUDA launches in this trace (CPU-only activities, or the GPU was not traced)"
        if self.graph_launches and not self.kernel_launches:
            return f"CUDA graphs replayed: {self.graph_launches} graph launches, no eager kernel launch"
        if not self.graph_launches:
            return f"eager: {self.kernel_launches} kernel launches, no CUDA graph launch"
        return (f"mixed: {self.graph_launches} CUDA graph launches and {self.kernel_launches} eager kernel "
                "launches")

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()}
        out["graphs"] = self.graphs
        return out

    def to_text(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in self.rank.items() if v is not None) or "rank not in the name"
        lines = [f"{self.path}: {self.events} events ({where})" + (", CUT OFF" if self.truncated else "")]
        if self.steps:
            lines.append("steps:")
            for key, s in self.steps.items():
                lines.append(f"  {key:<24} {s['count']:>6} x  median {s['median_us'] / 1000:.3f} ms  "
                             f"total {s['total_us'] / 1000:.1f} ms")
        else:
            lines.append("steps: none annotated (sglang names them step[...] while profiling)")
        lines.append(f"graphs: {self.graphs}")
        if self.kernels:
            total = sum(self.kernel_us_by_class.values()) or 1
            lines.append(f"GPU kernels: {self.kernels}, by class:")
            for cls, us in sorted(self.kernel_us_by_class.items(), key=lambda x: -x[1]):
                lines.append(f"  {cls:<14} {us / 1000:>10.2f} ms  {us / total:>6.1%}")
        if self.nccl.get("kernels"):
            lines.append(f"NCCL: {self.nccl['kernels']} kernels, {self.nccl['summed_us'] / 1000:.2f} ms summed "
                         "(kernel time, not grouped into collectives: arrival skew between ranks counts too)")
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
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in chars:
                self.pos += 1
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


def kernel_class(name: str) -> str:
    for cls, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return "other"


def summarize_trace(path: str | Path, top: int = 10) -> TraceSummary:
    """The summary of one trace file (see the module docstring); a cut-off file gives what was read."""
    path = Path(path)
    m = _NAME.search(path.name)
    out = TraceSummary(str(path), {"tp": int(m["tp"]) if m else None,
                                   "dp": int(m["dp"]) if m and m["dp"] else None,
                                   "stage": m["stage"] if m else None})
    steps: dict[str, list[float]] = defaultdict(list)
    by_class: Counter = Counter()
    cpu: dict[str, list] = {}
    meta: dict = {}
    try:
        for ev in iter_events(path, meta):
            out.events += 1
            if ev.get("ph") != "X":
                continue
            name, cat, dur = str(ev.get("name", "")), ev.get("cat", ""), float(ev.get("dur") or 0.0)
            if cat == "user_annotation" and (s := _STEP.match(name)):
                steps[f"{s['mode']} bs={s['bs']}"].append(dur)
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                if name in _GRAPH_LAUNCH:
                    out.graph_launches += 1
                elif name in _KERNEL_LAUNCH:
                    out.kernel_launches += 1
            elif cat == "kernel":
                out.kernels += 1
                cls = kernel_class(name)
                by_class[cls] += dur
                if "nccl" in name.lower():
                    out.nccl["kernels"] = out.nccl.get("kernels", 0) + 1
                    out.nccl["summed_us"] = out.nccl.get("summed_us", 0.0) + dur
            elif cat == "cpu_op":
                cell = cpu.setdefault(name, [0, 0.0])
                cell[0] += 1
                cell[1] += dur
    except TraceError as err:
        if out.events == 0 or "cut off" not in err.message:
            raise
        out.truncated = True
        out.problems.append(f"{err.message} (after {out.events} events)")
    import statistics

    out.steps = {k: {"count": len(v), "total_us": sum(v), "median_us": statistics.median(v)}
                 for k, v in sorted(steps.items())}
    out.kernel_us_by_class = dict(by_class)
    out.top_cpu_ops = [(n, c, us) for n, (c, us) in sorted(cpu.items(), key=lambda x: -x[1][1])[:top]]
    out.devices = [d.get("name") for d in meta.get("deviceProperties") or [] if isinstance(d, dict)]
    return out
