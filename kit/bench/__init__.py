"""Streaming load against SGLang's ``/generate`` or the OpenAI API; per-request metrics; A/B comparison.

What this client does that common benchmark clients get wrong:

- Token counts come from the server, per chunk: deltas of ``meta_info.completion_tokens``
  on ``/generate``, and of ``usage.completion_tokens`` with ``continuous_usage_stats`` on
  the OpenAI API. Nothing is tokenized on the client. When the server gives no counts,
  the request is flagged (``count_source``) and the reason recorded; the fallback is never
  silent.
- A chunk under speculative decoding (MTP/EAGLE) carries several tokens. Latency between
  tokens is the chunk's gap split over its tokens, and the gap per chunk is kept too.
- Decode tok/s of a request is the tokens after the first chunk over the time after the
  first chunk, so tokens that arrived before the clock started are not counted. When the
  decode tokens arrive at once (one read of many events, or one event of many steps), the
  arrival times do not show the decode: such a request has no decode rate, and says why
  (``decode_note``), rather than entering the mean at thousands of tok/s.
- One pooled ``aiohttp`` session with a large read buffer and ``perf_counter_ns``
  timestamps taken as each read returns. Per event there is one ``json.loads`` (for a
  large ``/generate`` event, of its ``meta_info`` only); each request's bookkeeping waits
  until the reads that are already due have been timestamped.
- The time a request waited for its scheduled start or a concurrency slot is recorded
  (``wait_s``), not hidden.
- Speculative accept length is scoped to the run: sum of completion tokens over sum of
  ``spec_verify_ct`` of its requests, not the server's lifetime average.

Results are written as JSONL as each request finishes, so a crash loses nothing that
finished. ``compare(a, b)`` puts a bootstrap confidence interval on the difference in
mean per-request decode tok/s.

Modules (each imported on first use of one of its names, so ``import kit.bench`` and
``import kit.bench.config`` load neither aiohttp nor pandas, numpy or tqdm):

- ``config``: ``BenchConfig``, ``RequestResult``, ``API_PATHS``, ``DEFAULT_PORT`` and the
  other constants; standard library only, for the command line's help.
- ``stream``: the SSE stream of one request, parsed into token chunks with arrival times
  (``StreamParser``, ``native_tail``), and the per-request metrics and token-count
  resolution computed from them (``fill_metrics``).
- ``client``: the HTTP side of one request (``Client``, ``one_request``, failure
  classification), server look-ups, prompts and request bodies (``payload``).
- ``load``: the load driver (``bench``, ``bench_async``, warmup, fixed concurrency or
  Poisson arrivals, the recorder), ``resolve_url``, ``run_path``, ``run_sync`` and
  ``progress_for`` with the terminal progress bar.
- ``results``: ``BenchRun`` (tables, totals, plots, rendering) and the JSONL run-file
  writer and loader.
- ``server_pages``: the server's own ``/metrics`` pages, read before, during and after a
  run and kept raw in its run file (``BenchRun.server_pages``) for the doctor to read.
- ``interleave``: ``interleaved`` (two arms in alternating blocks, Student's t over the pairs,
  an A/A noise floor, the machine's load per block), ``compare_live`` (two live servers) and
  ``Interleaved``.
- ``slo``: ``parse_slo`` (``"ttft=500ms,itl=50ms"``), ``goodput(run, slo)`` -> ``Goodput``: the share
  of a run's requests that met every objective and how many such requests a second, as AIPerf and
  GuideLLM define them (their words and addresses are in the module).
- ``sweeps``: ``sweep(target, [1, 2, 4, 8])`` -> ``Sweep``: one run per concurrency and a manifest,
  ``sweep.json``; ``Sweep.load``, ``max_load(slo)``, ``plot()``.
- ``fronts``: ``compare_sweeps(a, b)`` -> ``SweepComparison``: each sweep's Pareto front (per-request
  against total tok/s) and where one dominates the other, computed from the numbers.
- ``comparison``: ``Comparison``, ``compare`` and the bootstrap. (Not named ``compare``: a
  submodule of that name, once imported, would replace the ``compare`` function on this
  package, and ``from kit.bench import compare`` would give the module; ``slo`` and ``sweeps``
  are named as they are for the same reason.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kit._verbs import make_callable

if TYPE_CHECKING:
    from kit.errors import BenchError

    from .comparison import Comparison, compare
    from .config import API_PATHS, DEFAULT_PORT, BenchConfig, RequestResult
    from .fronts import SweepComparison, compare_sweeps
    from .interleave import Arm, Interleaved, compare_live, interleaved
    from .load import bench, bench_async, progress_for, resolve_url, run_path, run_sync
    from .results import BenchRun
    from .slo import SLO, Goodput, goodput, parse_slo
    from .sweeps import MaxLoad, Sweep, sweep

__all__ = [
    "API_PATHS",
    "Arm",
    "Interleaved",
    "compare_live",
    "interleaved",
    "BenchConfig",
    "BenchError",
    "BenchRun",
    "Comparison",
    "DEFAULT_PORT",
    "Goodput",
    "MaxLoad",
    "RequestResult",
    "SLO",
    "Sweep",
    "SweepComparison",
    "bench",
    "bench_async",
    "compare",
    "compare_sweeps",
    "describe_endpoint",
    "goodput",
    "parse_slo",
    "progress_for",
    "resolve_url",
    "run_path",
    "run_sync",
    "sweep",
]

# Where each public name lives; the module is imported when the name is first used.
_HOMES = {
    "Arm": "kit.bench.interleave",
    "Interleaved": "kit.bench.interleave",
    "compare_live": "kit.bench.interleave",
    "interleaved": "kit.bench.interleave",
    "API_PATHS": "kit.bench.config",
    "BenchConfig": "kit.bench.config",
    "BenchError": "kit.errors",
    "BenchRun": "kit.bench.results",
    "Comparison": "kit.bench.comparison",
    "DEFAULT_PORT": "kit.bench.config",
    "Goodput": "kit.bench.slo",
    "MaxLoad": "kit.bench.sweeps",
    "RequestResult": "kit.bench.config",
    "SLO": "kit.bench.slo",
    "Sweep": "kit.bench.sweeps",
    "SweepComparison": "kit.bench.fronts",
    "bench": "kit.bench.load",
    "bench_async": "kit.bench.load",
    "compare": "kit.bench.comparison",
    "compare_sweeps": "kit.bench.fronts",
    "describe_endpoint": "kit.bench.load",
    "goodput": "kit.bench.slo",
    "parse_slo": "kit.bench.slo",
    "progress_for": "kit.bench.load",
    "resolve_url": "kit.bench.load",
    "run_path": "kit.bench.load",
    "run_sync": "kit.bench.load",
    "sweep": "kit.bench.sweeps",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


make_callable(__name__, "bench")  # kit.bench(target, ...) is bench(target, ...)
