"""Goodput: how many of a run's requests met a latency objective (an SLO), and how many such requests a second.

An SLO is written ``ttft=500ms,itl=50ms``: each key a per-request limit, a request good only when it
meets every one of them.

- ``ttft``: time to first token (``RequestResult.ttft_s``).
- ``itl``: mean latency between tokens of the request, per token (``RequestResult.itl_token_ms``: the
  time from the first token chunk to the last over the tokens after the first chunk, so a chunk of
  several tokens under speculative decoding counts each of them).
- ``e2e``: the whole request, from sending it to its last byte (``RequestResult.e2e_s``).

Values take ``ms`` or ``s``; a bare number is refused, since the tools below read it in milliseconds and
a reader may not.

The definitions this follows, in their own words:

- AIPerf, https://github.com/ai-dynamo/aiperf/blob/main/docs/tutorials/goodput.md (also
  https://docs.nvidia.com/aiperf/tutorials/metrics-analysis/benchmark-goodput-with-ai-perf): "Goodput is
  defined as the number of completed requests per second that meet specified metric constraints, also
  called service level objectives." Its metric: "Goodput = Good request count / Benchmark Duration
  (seconds)", a request counted good when it satisfies "all user-provided SLO thresholds" (one without a
  value for a constrained metric is not good). Its ``good_request_fraction``
  (src/aiperf/metrics/types/good_request_fraction_metric.py) is "good_request_count / (request_count +
  error_request_count)": "The denominator counts failed requests". AIPerf's ``inter_token_latency`` is
  (request latency - time to first token) / (output tokens - 1), which is what ``itl`` reads here.
- GuideLLM, https://github.com/vllm-project/guidellm/blob/main/docs/guides/service_level_objectives.md:
  "a request conforms only when it meets all of them"; it reports "SLO attainment, the share of requests
  meeting every objective, and request goodput, the rate of those conforming requests. Errored requests
  count against attainment". Its ``goodput`` profile finds the highest concurrency whose attainment
  reaches ``target_attainment``, which is what ``Sweep.max_load`` does over the concurrencies measured.
- vLLM's ``vllm bench serve --goodput`` (its help, in
  https://github.com/vllm-project/vllm/blob/main/vllm/benchmarks/serve.py): "Specify
  service level objectives for goodput as "KEY:VALUE" pairs, where the key is a metric name, and the
  value is in milliseconds", keys ``ttft``, ``tpot``, ``e2el``, after the DistServe paper
  (https://arxiv.org/pdf/2401.09670); it reports ``request_goodput`` in requests per second.

How the kit maps to them: ``Goodput.fraction`` is AIPerf's ``good_request_fraction`` and GuideLLM's SLO
attainment (good requests over every measured request, failed ones included as not good);
``Goodput.per_s`` is AIPerf's goodput and GuideLLM's request goodput (good requests over the run's
duration, ``BenchRun.duration_s``). A successful request without a value for a constrained metric
(``itl`` of a request whose decode tokens arrived at once, or of one token) is counted not good, as AIPerf
does, and counted apart (``unmeasured``) so that it is not mistaken for a slow one; GuideLLM leaves such a
request undetermined instead. The run's warmup requests are never measured, so never counted.
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from kit.errors import BenchError

from .config import RequestResult

__all__ = ["SLO", "Constraint", "Goodput", "goodput", "parse_slo"]

# key -> (what it is, the RequestResult field read, its unit in that field)
KEYS = {
    "ttft": ("time to first token", "ttft_s", 1.0),
    "itl": ("mean latency between tokens", "itl_token_ms", 1e-3),
    "e2e": ("whole request latency", "e2e_s", 1.0),
}
_FORM = ("KEY=VALUE pairs joined by commas, KEY one of ttft (time to first token), itl (mean latency "
         "between tokens, per token) or e2e (whole request), VALUE a number with ms or s: ttft=500ms,itl=50ms")
_VALUE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)$", re.IGNORECASE)


@dataclass(frozen=True)
class Constraint:
    """One objective: ``key``'s value at most ``limit_s`` seconds."""

    key: str
    limit_s: float

    @property
    def text(self) -> str:
        """``500ms`` or ``2s``: the limit as it reads best."""
        if self.limit_s < 1:
            return f"{self.limit_s * 1e3:g}ms"
        return f"{self.limit_s:g}s"

    def value_s(self, result: RequestResult) -> float | None:
        """The request's value for this key in seconds, or None when it has none."""
        _, name, scale = KEYS[self.key]
        value = getattr(result, name)
        return None if value is None else float(value) * scale

    def __str__(self) -> str:
        return f"{self.key}<={self.text}"


@dataclass(frozen=True)
class SLO:
    """A request meets it when it succeeded and meets every constraint."""

    constraints: tuple[Constraint, ...]

    @property
    def spec(self) -> str:
        """The form ``parse_slo`` reads back: ``ttft=500ms,itl=50ms``."""
        return ",".join(f"{c.key}={c.text}" for c in self.constraints)

    def __str__(self) -> str:
        return ", ".join(str(c) for c in self.constraints)

    def tightened(self, key: str, factor: float) -> SLO:
        """The same SLO with ``key``'s limit multiplied by ``factor`` (below 1: stricter)."""
        return SLO(tuple(Constraint(c.key, c.limit_s * factor) if c.key == key else c for c in self.constraints))


def parse_slo(text: str | SLO | dict) -> SLO:
    """``"ttft=500ms,itl=50ms"`` (or ``ttft:500ms``, or a dict of the same) to an ``SLO``; a typo is a
    BenchError that names the part it could not read and the accepted form."""
    if isinstance(text, SLO):
        return text
    if isinstance(text, dict):
        text = ",".join(f"{k}={v}" for k, v in text.items())
    if not isinstance(text, str) or not text.strip():
        raise BenchError(f"no SLO in {text!r}", hint=f"give {_FORM}")
    seen: dict[str, Constraint] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            key, sep, value = part.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep or not key or not value:
            raise BenchError(f"cannot read {part!r} in the SLO {text!r}: it is not KEY=VALUE", hint=f"give {_FORM}")
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.5)
            guess = f" (did you mean {close[0]}?)" if close else ""
            raise BenchError(f"unknown SLO key {key!r} in {text!r}{guess}", hint=f"give {_FORM}")
        match = _VALUE.match(value)
        if not match:
            why = "it has no unit" if re.fullmatch(r"[\d.]+", value) else "it is not a number with ms or s"
            raise BenchError(f"cannot read the {key} limit {value!r} in the SLO {text!r}: {why}",
                             hint=f"give {_FORM}")
        number, unit = float(match[1]), match[2].lower()
        limit = number / 1e3 if unit == "ms" else number
        if not limit > 0 or not math.isfinite(limit):
            raise BenchError(f"the {key} limit in the SLO {text!r} must be above zero", hint=f"give {_FORM}")
        if key in seen:
            raise BenchError(f"{key} is given twice in the SLO {text!r}", hint=f"give each key once: {_FORM}")
        seen[key] = Constraint(key, limit)
    if not seen:
        raise BenchError(f"no SLO in {text!r}", hint=f"give {_FORM}")
    return SLO(tuple(seen[k] for k in KEYS if k in seen))


@dataclass
class Goodput:
    """A run against an SLO: how many of its measured requests met every constraint, and how many a second.

    ``fraction`` is good / requests (failed requests count as not good; None without requests), ``per_s``
    good requests per second of the run's duration (None when the run did not finish). ``misses`` counts,
    per key, the successful requests over its limit, ``unmeasured`` those without a value for it (both
    can count one request under several keys); ``failed`` the requests that failed.
    """

    slo: SLO
    requests: int
    good: int
    failed: int
    duration_s: float | None
    misses: dict[str, int] = field(default_factory=dict)
    unmeasured: dict[str, int] = field(default_factory=dict)
    run: str = ""

    @property
    def fraction(self) -> float | None:
        return self.good / self.requests if self.requests else None

    @property
    def per_s(self) -> float | None:
        return self.good / self.duration_s if self.duration_s else None

    def line(self) -> str:
        """One line: the share, the count, the rate, and why the others missed."""
        if not self.requests:
            return f"goodput ({self.slo}): no measured request"
        rate = f", {self.per_s:.3g} good requests/s over {self.duration_s:.2f} s" if self.per_s is not None else \
            " (the run did not finish: no rate)"
        why = [f"{k} over {self.misses[k]}" for k in KEYS if self.misses.get(k)]
        why += [f"{k} not measured {self.unmeasured[k]}" for k in KEYS if self.unmeasured.get(k)]
        why += [f"failed {self.failed}"] if self.failed else []
        return (f"goodput ({self.slo}): {self.good} of {self.requests} requests met every objective "
                f"({self.fraction:.1%}){rate}" + (f"; missed: {', '.join(why)}" if why else ""))

    def to_text(self) -> str:
        out = [self.line()]
        if any(self.unmeasured.values()):
            out.append("  a request not measured for a key has no value for it (itl: its decode tokens arrived "
                       "at once, or it had one token); it counts as not meeting the objective, as in AIPerf")
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo.spec, "requests": self.requests, "good": self.good, "failed": self.failed,
                "fraction": self.fraction, "per_s": self.per_s, "duration_s": self.duration_s,
                "misses": dict(self.misses), "unmeasured": dict(self.unmeasured), "run": self.run}

    def __repr__(self) -> str:
        return f"<Goodput {self.line()}>"

    def _repr_html_(self) -> str:
        return "<div>" + "<br>".join(html.escape(line) for line in self.to_text().splitlines()) + "</div>"


def judge(results: list[RequestResult], slo: SLO) -> tuple[int, dict[str, int], dict[str, int]]:
    """(good, misses per key, unmeasured per key) of ``results`` against ``slo``."""
    good = 0
    misses = {c.key: 0 for c in slo.constraints}
    unmeasured = {c.key: 0 for c in slo.constraints}
    for r in results:
        if not r.ok:
            continue
        met = True
        for c in slo.constraints:
            value = c.value_s(r)
            if value is None:
                unmeasured[c.key] += 1
                met = False
            elif value > c.limit_s:
                misses[c.key] += 1
                met = False
        good += met
    return good, misses, unmeasured


def goodput(run: Any, slo: str | SLO | dict) -> Goodput:
    """``run`` (a BenchRun or its run file) against ``slo`` (``"ttft=500ms,itl=50ms"``): see the module."""
    from .results import BenchRun

    rule = parse_slo(slo)
    if isinstance(run, (str, os.PathLike)):
        run = BenchRun.load(run)
    good, misses, unmeasured = judge(run.results, rule)
    return Goodput(rule, len(run.results), good, sum(1 for r in run.results if not r.ok), run.duration_s,
                   misses, unmeasured, run.name)
