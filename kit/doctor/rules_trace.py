"""Rules that read a torch-profiler trace's summary: what the server did in its steps, measured.

:func:`add_trace` puts the summaries (kit.metrics.trace.summarize_trace, one per rank) and their
logical collectives (kit.metrics.collectives.group_collectives) into ``Evidence.trace``; a file
that cannot be read is a problem of the evidence, and the other files still count.

Each rule's impact is measured from the trace, with the numbers it used as its inputs:

- **trace-decode-eager**: decode steps launched kernels one by one (``cudaLaunchKernel``) and no
  CUDA graph while this launch expects decode graphs; the GPU time left idle in those steps is the
  most that graph replay can give back there (it removes launch gaps, not kernel time).
- **trace-communication-share**: communication took a large share of the step time; the arrival
  skew (the wait for the last rank) is measured apart from transfer, and is the impact.
- **trace-cpu-bound**: the GPU sat idle in most steps while the step's CPU thread was busy; the
  idle share of step time is the impact.

A CPU trace ("CPU trace: no CUDA events") fires none of them: it cannot tell graphs from eager, and
it has no GPU time to be idle.
"""

from __future__ import annotations

from kit.errors import KitError

from .case import Case
from .rulebase import ALL_VERSIONS as _ALL
from .rulebase import Fix, Impact, Rule, not_estimated, rule

__all__ = ["COMM_SHARE", "add_trace"]

# The kit's own thresholds, not sglang's.
COMM_SHARE = 0.2  # communication wall time at or above this share of step time is worth a finding
CPU_BOUND_STEPS = 0.5  # this share of steps or more CPU-bound (kit.metrics.trace.CPU_BOUND_IDLE) fires


def add_trace(ev, traces) -> None:
    """Summarize ``traces`` (paths, or kit.metrics.trace.TraceSummary) into ``ev.trace``."""
    from kit.metrics.collectives import group_collectives
    from kit.metrics.trace import TraceSummary, summarize_trace

    summaries = []
    for item in [traces] if isinstance(traces, (str, TraceSummary)) else list(traces or []):
        if isinstance(item, TraceSummary):
            summaries.append(item)
            continue
        try:
            summaries.append(summarize_trace(item))
        except KitError as err:
            ev.problem(f"--trace {item}", err)
    if not summaries:
        return
    for s in summaries:
        ev.problems += [f"--trace {s.path}: {p}" for p in s.problems]
    ev.trace = {"summaries": summaries, "collectives": group_collectives(summaries)}
    ev.sources["trace"] = ", ".join(s.path for s in summaries)


def _summaries(case: Case) -> list:
    return list((getattr(case.ev, "trace", None) or {}).get("summaries") or [])


def _where(case: Case) -> str:
    return case.ev.sources.get("trace", "the trace")


# --------------------------------------------------------------------------- decode eager

def _eager_decode(case: Case) -> tuple[int, int, float | None, float, list[str]]:
    """(eager decode steps, their kernel launches, GPU idle us in them or None, their time us, lines)."""
    steps = launches = 0
    idle: float | None = None
    total = 0.0
    lines = []
    for s in _summaries(case):
        if s.cpu_only:
            continue
        for key, st in s.steps.items():
            if not key.startswith("DECODE") or st.get("graph_launches") or not st.get("kernel_launches"):
                continue
            steps += st["count"]
            launches += st["kernel_launches"]
            total += st["total_us"]
            if st.get("gpu_idle_us") is not None:
                idle = (idle or 0.0) + st["gpu_idle_us"]
            lines.append(f"{s.path}: {st['count']} step(s) {key}: {st['kernel_launches']} cudaLaunchKernel, "
                         "no cudaGraphLaunch")
    return steps, launches, idle, total, lines


def _graphs_expected(case: Case) -> tuple[bool, str]:
    off = case.value("disable_cuda_graph")
    if off is True:
        return False, "disable_cuda_graph = True"
    if off is False:
        return True, "disable_cuda_graph = False in the server's arguments"
    return True, ("the server's arguments are not known (give --log or --server-info): this finding assumes "
                  "decode graphs were on")


def _eager_when(case: Case) -> list[str] | None:
    steps, _, _, _, lines = _eager_decode(case)
    expected, why = _graphs_expected(case)
    if not steps or not expected:
        return None
    max_bs = case.value("cuda_graph_max_bs")
    extra = [f"cuda_graph_max_bs = {max_bs}: batch sizes above it run eager by design"] if max_bs else []
    return lines + [f"graphs expected: {why}"] + extra


def _eager_impact(case: Case) -> Impact:
    steps, launches, idle, total, _ = _eager_decode(case)
    if idle is None or total <= 0:
        return not_estimated(f"{steps} decode step(s) ran eager; the trace has no GPU kernels to measure "
                             "their launch gaps", "decode tok/s", "a trace with GPU activities (--steps N on a GPU)")
    return Impact(idle / total, "measured",
                  f"in the {steps} eager decode step(s) the GPU sat idle {idle / 1000:.2f} ms of "
                  f"{total / 1000:.2f} ms ({idle / total:.0%}) between {launches} one-by-one kernel launches: "
                  "the most that CUDA graph replay can give back there", "decode tok/s",
                  (f"{steps} eager decode steps", f"{launches} cudaLaunchKernel", f"GPU idle {idle:.0f} us",
                   f"decode step time {total:.0f} us", _where(case)))


def _eager_fix(case: Case) -> Fix:
    max_bs = case.value("cuda_graph_max_bs")
    advice = ["check the startup log for the CUDA graph capture (and its batch sizes) and that decode batch "
              "sizes stay within them" + (f" (cuda_graph_max_bs = {max_bs})" if max_bs else "")]
    return [], advice, ["do not read a CPU-only trace as 'graphs off'"]


rule(Rule(
    "trace-decode-eager", "Decode steps ran eager (kernel by kernel) where CUDA graphs were expected", _ALL,
    ("trace",), when=_eager_when, impact=_eager_impact, fix=_eager_fix,
    affects=("decode step",), covers=lambda case: set(), gpu_only=True,
    uses=("args",)))


# --------------------------------------------------------------------------- communication share

def _step_us(case: Case) -> float:
    """The step time of the busiest rank: the sum of its steps' durations."""
    per_rank: dict = {}
    for s in _summaries(case):
        label = (s.rank or {}).get("tp")
        per_rank[label] = per_rank.get(label, 0.0) + sum(st["total_us"] for st in s.steps.values())
    return max(per_rank.values(), default=0.0)


def _collectives(case: Case):
    return (getattr(case.ev, "trace", None) or {}).get("collectives")


def _comm_when(case: Case) -> list[str] | None:
    c, step = _collectives(case), _step_us(case)
    if c is None or not c.kernels or step <= 0 or c.wall_us / step < COMM_SHARE:
        return None
    skew = "skew not measured (one rank's trace)" if c.skew_us is None else f"arrival skew {c.skew_us / 1000:.2f} ms"
    return [f"{c.kernels} communication kernels on {len(c.ranks)} rank(s) are {c.collectives} collectives: "
            f"{c.wall_us / 1000:.2f} ms wall = {skew} + transfer {c.transfer_us / 1000:.2f} ms, "
            f"{c.wall_us / step:.0%} of {step / 1000:.2f} ms of steps ({_where(case)})",
            f"kernel time summed over ranks: {c.summed_us / 1000:.2f} ms (it counts each rank's wait)"]


def _comm_impact(case: Case) -> Impact:
    c, step = _collectives(case), _step_us(case)
    if c.skew_us is None:
        return not_estimated(f"communication is {c.wall_us / step:.0%} of step time on one rank; the wait for the "
                             "last rank needs every rank's trace", "decode tok/s",
                             "the traces of every rank of the same profile (sgl-kit profile TARGET copies them all)")
    return Impact(c.skew_us / step, "measured",
                  f"ranks waited {c.skew_us / 1000:.2f} ms for the last one to arrive, over {c.collectives} "
                  f"collectives: {c.skew_us / step:.0%} of {step / 1000:.2f} ms of steps; the transfer itself "
                  f"({c.transfer_us / 1000:.2f} ms) is not counted", "decode tok/s",
                  (f"{c.collectives} collectives", f"arrival skew {c.skew_us:.0f} us",
                   f"transfer {c.transfer_us:.0f} us", f"step time {step:.0f} us", _where(case)))


def _comm_fix(case: Case) -> Fix:
    c = _collectives(case)
    advice = []
    if c.skew_us is not None and c.skew_us > c.transfer_us:
        advice.append("most of it is waiting for the last rank: compare the ranks' CPU side (trace-cpu-bound "
                      "per rank) and what else runs on the slow rank's CPU cores")
    advice.append("for the transfer: the GPUs' links (sgl-kit doctor --topo FILE) and whether the custom "
                  "all-reduce kernels ran (custom AllReduce in the collectives) or NCCL did")
    return [], advice, ["do not add up kernel time across ranks: it counts the wait once per waiting rank"]


rule(Rule(
    "trace-communication-share", "Communication takes a large share of the step time", _ALL,
    ("trace",), when=_comm_when, impact=_comm_impact, fix=_comm_fix,
    affects=("all-reduce",), covers=lambda case: set()))


# --------------------------------------------------------------------------- CPU-bound steps

def _idle_totals(case: Case) -> dict:
    out = {"steps": 0, "step_us": 0.0, "gpu_idle_us": 0.0, "cpu_bound": 0, "largest_gap_us": 0.0}
    for s in _summaries(case):
        for k in out:
            if k == "largest_gap_us":
                out[k] = max(out[k], (s.idle or {}).get(k, 0.0))
            else:
                out[k] += (s.idle or {}).get(k, 0)
    return out


def _cpu_when(case: Case) -> list[str] | None:
    t = _idle_totals(case)
    if not t["steps"] or t["cpu_bound"] / t["steps"] < CPU_BOUND_STEPS:
        return None
    lines = [f"{t['cpu_bound']} of {t['steps']} steps CPU-bound: the GPU sat idle {t['gpu_idle_us'] / 1000:.2f} ms "
             f"of {t['step_us'] / 1000:.2f} ms of steps (largest gap {t['largest_gap_us']:.0f} us) while the "
             f"step's CPU thread was in it ({_where(case)})"]
    for s in _summaries(case):
        for key, st in s.steps.items():
            if st.get("cpu_bound"):
                lines.append(f"  {s.path}: {key}: {st['cpu_bound']} of {st['count']} CPU-bound, GPU idle "
                             f"{st['gpu_idle_us'] / max(st['total_us'], 1e-9):.0%}")
    return lines


def _cpu_impact(case: Case) -> Impact:
    t = _idle_totals(case)
    share = t["gpu_idle_us"] / t["step_us"]
    return Impact(share, "measured",
                  f"the GPU waited on the CPU {t['gpu_idle_us'] / 1000:.2f} ms of {t['step_us'] / 1000:.2f} ms of "
                  f"steps ({share:.0%})", "decode tok/s",
                  (f"{t['steps']} steps", f"{t['cpu_bound']} CPU-bound", f"GPU idle {t['gpu_idle_us']:.0f} us",
                   f"step time {t['step_us']:.0f} us", _where(case)))


def _cpu_fix(case: Case) -> Fix:
    advice = ["look at the CPU ops by total time in `sgl-kit profile` for what the scheduler thread did in the "
              "gaps"]
    if case.value("disable_overlap_schedule") is True:
        advice.append("this launch sets disable_overlap_schedule = True")
    return [], advice, []


rule(Rule(
    "trace-cpu-bound", "The GPU waited on the CPU in most steps", _ALL,
    ("trace",), when=_cpu_when, impact=_cpu_impact, fix=_cpu_fix,
    affects=("scheduling",), covers=lambda case: set(), uses=("args",)))
