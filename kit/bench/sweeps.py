"""Sweeps: one run per concurrency, in order, with a manifest; what each level gives per request and in all.

``sweep(target, [1, 2, 4, 8])`` runs :func:`kit.bench.bench` once per concurrency and writes each run
file and a manifest, ``sweep.json``, into one directory (default ``runs/sweep-<time>/``). The manifest is
rewritten after every point, so a sweep that stops (the server went down, Ctrl-C) keeps what finished.
``Sweep.load(dir)`` reads it back. Each point has the mean per-request decode tok/s (what one user
sees), the total output tok/s (output tokens over the run's duration: what the server gives in all), the
time to first token and, with an SLO, the goodput fraction (kit/bench/slo.py). ``max_load(slo)`` is
the highest concurrency whose goodput fraction reaches a target, as GuideLLM's ``goodput`` profile
searches for it (``target_attainment``), over the concurrencies measured.

``compare_sweeps`` (kit/bench/fronts.py) compares two sweeps.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kit._version import __version__
from kit.errors import BenchError

from .config import BenchConfig
from .slo import SLO, Goodput, goodput, parse_slo

__all__ = ["MANIFEST", "MaxLoad", "Sweep", "SweepPoint", "is_sweep_path", "pareto_front", "rated", "sweep",
           "sweep_dir"]

MANIFEST = "sweep.json"
_FORMAT = 1
_FIELDS = {f.name for f in fields(BenchConfig)}


@dataclass
class SweepPoint:
    """One concurrency of a sweep: its run file (relative to the sweep's directory) and what it measured."""

    concurrency: int
    run: str
    requests: int
    ok: int
    duration_s: float | None
    output_tokens: int
    per_request_tok_s: float | None  # mean of the requests' decode tok/s
    total_tok_s: float | None  # output tokens of the successful requests / the run's duration
    ttft_mean_ms: float | None
    ttft_p90_ms: float | None
    goodput: float | None = None  # fraction of the measured requests that met the SLO (None: no SLO)
    goodput_per_s: float | None = None
    good: int | None = None
    misses: dict | None = None  # per SLO key, the successful requests over its limit
    unmeasured: dict | None = None  # per SLO key, the successful requests without a value for it

    @classmethod
    def of(cls, run: Any, run_file: str, slo: SLO | None) -> SweepPoint:
        """The numbers of one finished run."""
        import numpy as np

        t = run.totals
        ttfts = np.asarray([r.ttft_s * 1e3 for r in run.results if r.ok and r.ttft_s is not None], dtype=float)
        point = cls(run.config.concurrency, run_file, t["requests"], t["ok"], t["duration_s"], t["output_tokens"],
                    t["mean_decode_tok_s"], t["output_tok_s"],
                    float(ttfts.mean()) if ttfts.size else None,
                    float(np.percentile(ttfts, 90)) if ttfts.size else None)
        if slo is not None:
            point.judge(goodput(run, slo))
        return point

    def judge(self, result: Goodput) -> None:
        self.goodput, self.goodput_per_s, self.good = result.fraction, result.per_s, result.good
        self.misses, self.unmeasured = dict(result.misses), dict(result.unmeasured)

    @property
    def failed(self) -> int:
        return self.requests - self.ok


@dataclass
class MaxLoad:
    """The highest concurrency measured whose goodput fraction reached ``fraction`` (None when none did), and why."""

    concurrency: int | None
    why: str
    slo: str
    fraction: float
    points: list[tuple[int, float | None]] = field(default_factory=list)  # (concurrency, goodput fraction)

    def to_text(self) -> str:
        return self.why

    def to_dict(self) -> dict:
        return {"concurrency": self.concurrency, "why": self.why, "slo": self.slo, "fraction": self.fraction,
                "points": [{"concurrency": c, "goodput": g} for c, g in self.points]}

    def __repr__(self) -> str:
        return f"<MaxLoad {self.concurrency}: {self.why}>"

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(self.why)}</div>"


@dataclass
class Sweep:
    """A sweep as data: its points in the order run, where its files are, and what was asked."""

    points: list[SweepPoint]
    dir: Path
    slo: SLO | None = None
    label: str | None = None
    url: str = ""
    started_at: str = ""
    planned: list[int] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    stopped: str | None = None  # why the sweep stopped before its last point, or None
    kit_version: str = ""

    # -- files ---------------------------------------------------------------------
    @property
    def manifest(self) -> Path:
        return self.dir / MANIFEST

    @classmethod
    def load(cls, path: str | os.PathLike) -> Sweep:
        """A sweep from its ``sweep.json`` or the directory that holds it."""
        where = Path(path)
        manifest = where / MANIFEST if where.is_dir() else where
        if not manifest.is_file():
            raise BenchError(f"no sweep manifest at {manifest}",
                             hint="give a sweep's directory or its sweep.json, written by `sgl-kit bench sweep`")
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise BenchError(f"{manifest} is not JSON ({exc})", hint="the manifest is damaged; run the sweep again") \
                from None
        if not isinstance(data, dict) or data.get("kind") != "sweep":
            raise BenchError(f"{manifest} is not a sweep manifest (no \"kind\": \"sweep\")",
                             hint="give a sweep's directory or its sweep.json, written by `sgl-kit bench sweep`")
        known = {f.name for f in fields(SweepPoint)}
        points = [SweepPoint(**{k: v for k, v in p.items() if k in known}) for p in data.get("points", [])]
        return cls(points, manifest.parent, parse_slo(data["slo"]) if data.get("slo") else None, data.get("label"),
                   data.get("url", ""), data.get("started_at", ""), list(data.get("planned", [])),
                   dict(data.get("config", {})), data.get("stopped"), data.get("kit_version", ""))

    def write(self) -> Path:
        """Write the manifest (``sweep.json``) into the sweep's directory; written whole, then renamed."""
        self.dir.mkdir(parents=True, exist_ok=True)
        record = {"kind": "sweep", "format": _FORMAT, **self.to_dict(for_file=True)}
        scratch = self.manifest.with_suffix(".json.tmp")
        scratch.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        scratch.replace(self.manifest)
        return self.manifest

    def run(self, point: SweepPoint | int):
        """The BenchRun of a point (or of the point at that concurrency), read from its run file."""
        from .results import BenchRun

        if isinstance(point, int):
            found = [p for p in self.points if p.concurrency == point]
            if not found:
                raise BenchError(f"the sweep {self.name} has no point at concurrency {point}",
                                 hint=f"its concurrencies: {', '.join(str(p.concurrency) for p in self.points)}")
            point = found[0]
        return BenchRun.load(self.dir / point.run)

    # -- what it says ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.label or self.dir.name

    @property
    def concurrencies(self) -> list[int]:
        return [p.concurrency for p in self.points]

    def with_slo(self, slo: str | SLO) -> Sweep:
        """The same sweep with each point's goodput against ``slo``, read from its run file."""
        rule = parse_slo(slo)
        points = []
        for p in self.points:
            point = replace(p)
            point.judge(goodput(self.run(p), rule))
            points.append(point)
        return replace(self, points=points, slo=rule)

    def max_load(self, slo: str | SLO | None = None, fraction: float = 0.9) -> MaxLoad:
        """The highest concurrency whose goodput fraction against ``slo`` (default: the sweep's) is at least
        ``fraction``, or None, with why; each point's fraction is read from its run file when ``slo`` is
        not the sweep's own."""
        if not 0 < fraction <= 1:
            raise BenchError(f"the goodput fraction must be in (0, 1], not {fraction!r}", hint="e.g. 0.9 (90%)")
        if slo is None and self.slo is None:
            raise BenchError(f"the sweep {self.name} was run without an SLO, and none was given",
                             hint="pass one: max_load(\"ttft=500ms,itl=50ms\"); in the CLI, --slo")
        judged = self if slo is None or (self.slo and parse_slo(slo) == self.slo) else self.with_slo(slo)
        rule = judged.slo
        pairs = [(p.concurrency, p.goodput) for p in judged.points]
        want = f"{rule} for at least {fraction:.0%} of requests"
        if not pairs:
            return MaxLoad(None, f"no point measured, so no concurrency is known to meet {want}", rule.spec,
                           fraction, pairs)
        passing = [c for c, g in pairs if g is not None and g >= fraction]
        shown = ", ".join(f"c={c}: {_pct(g)}" for c, g in pairs)
        if not passing:
            best = max(pairs, key=lambda cg: (cg[1] or 0.0, -cg[0]))
            return MaxLoad(None, f"no concurrency measured meets {want}: the best was concurrency {best[0]} at "
                                 f"{_pct(best[1])} ({shown}); measure lower concurrency, or relax the SLO",
                           rule.spec, fraction, pairs)
        top = max(passing)
        why = f"concurrency {top} is the highest measured that meets {want} ({shown})"
        below = [c for c, g in pairs if c < top and c not in passing]
        if below:
            why += f"; concurrency {', '.join(map(str, below))} fell short below it (noise, or too few requests)"
        if top == max(c for c, _ in pairs):
            why += "; it is the highest measured, so the limit may be higher: sweep further"
        return MaxLoad(top, why, rule.spec, fraction, pairs)

    def to_dict(self, for_file: bool = False) -> dict:
        """The manifest's content (run files relative to the sweep's directory, which ``dir`` names)."""
        out = {"kit_version": self.kit_version, "label": self.label, "url": self.url, "started_at": self.started_at,
               "slo": self.slo.spec if self.slo else None, "planned": list(self.planned),
               "config": dict(self.config), "stopped": self.stopped,
               "points": [_finite(asdict(p)) for p in self.points]}
        if not for_file:
            out["dir"] = str(self.dir)
            out["name"] = self.name
        return out

    def rows(self) -> list[list[str]]:
        """The table's rows, as text."""
        rows = []
        for p in self.points:
            row = [str(p.concurrency), f"{p.ok}/{p.requests}", _num(p.per_request_tok_s), _num(p.total_tok_s),
                   _num(p.ttft_mean_ms, 1), _num(p.ttft_p90_ms, 1)]
            if self.slo is not None:
                row.append(_pct(p.goodput))
            rows.append(row)
        return rows

    def head(self) -> list[str]:
        head = ["concurrency", "ok", "per-request tok/s", "total tok/s", "TTFT mean ms", "TTFT p90 ms"]
        return head + (["goodput"] if self.slo is not None else [])

    def headline(self) -> str:
        n = len(self.points)
        cfg = self.config
        what = f"{cfg.get('api', 'native')}, {cfg.get('max_tokens', '?')} tokens per request"
        slo = f", SLO {self.slo}" if self.slo else ""
        return f"sweep {self.name}: {n} point{'s' * (n != 1)} at {self.url or '?'} ({what}){slo}"

    def notes(self) -> list[str]:
        out = []
        for p in self.points:
            if p.failed:
                out.append(f"concurrency {p.concurrency}: {p.failed} of {p.requests} requests failed (in {p.run})")
            if self.slo is not None and p.goodput is not None and p.goodput < 1:
                why = [f"{k} over {n}" for k, n in (p.misses or {}).items() if n]
                why += [f"{k} not measured {n}" for k, n in (p.unmeasured or {}).items() if n]
                why += [f"failed {p.failed}"] if p.failed else []
                out.append(f"concurrency {p.concurrency}: {p.requests - (p.good or 0)} of {p.requests} requests "
                           f"missed the SLO ({', '.join(why)})")
        if self.stopped:
            out.append(f"stopped: {self.stopped}")
        out.append("per-request tok/s: mean decode rate of one request (what a user sees); total tok/s: output "
                   "tokens of the run over its duration (what the server gives in all)"
                   + ("; goodput: the share of measured requests that met every objective, failed ones as not"
                      if self.slo else ""))
        return out

    def to_text(self) -> str:
        table = _table(self.head(), self.rows())
        return "\n".join([self.headline(), table, *self.notes(), f"manifest: {self.manifest}"])

    def __repr__(self) -> str:
        return f"<Sweep {self.name}: concurrency {', '.join(map(str, self.concurrencies)) or 'none'}>"

    def _repr_html_(self) -> str:
        from kit.display import html_table

        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes())
        return (f"<div><b>{html.escape(self.headline())}</b>"
                + html_table(self.head(), [[html.escape(c) for c in row] for row in self.rows()])
                + f"<ul>{notes}</ul><small>manifest: {html.escape(str(self.manifest))}</small></div>")

    def plot(self):
        """Per-request tok/s against total tok/s (each point labelled by its concurrency), and time to first
        token against concurrency (kit.display.sweep_fronts)."""
        from kit.display import sweep_fronts

        return sweep_fronts({self.name: self}, fronts={self.name: pareto_front(self.points)})


def rated(points: list[SweepPoint]) -> list[SweepPoint]:
    """The points with both a per-request and a total tok/s."""
    return [p for p in points if p.per_request_tok_s is not None and p.total_tok_s is not None]


def _covers(q: SweepPoint, p: SweepPoint) -> bool:
    """q has at least as much of both as p, and more of one (exactly: a front is of one sweep's numbers)."""
    ge = q.per_request_tok_s >= p.per_request_tok_s and q.total_tok_s >= p.total_tok_s
    return ge and (q.per_request_tok_s > p.per_request_tok_s or q.total_tok_s > p.total_tok_s)


def pareto_front(points: list[SweepPoint]) -> list[SweepPoint]:
    """The points no other point of the same sweep beats on both per-request and total tok/s (a point is on
    it when nothing has at least as much of both and more of one), in order of concurrency."""
    candidates = rated(points)
    return sorted((p for p in candidates if not any(_covers(q, p) for q in candidates if q is not p)),
                  key=lambda p: p.concurrency)


def is_sweep_path(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a sweep manifest or a directory holding one."""
    where = Path(path)
    manifest = where / MANIFEST if where.is_dir() else where
    if not manifest.is_file() or manifest.suffix != ".json":
        return False
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("kind") == "sweep"
    except (ValueError, OSError, AttributeError):
        return False


def sweep(target: Any, concurrencies: Iterable[int], *, config: BenchConfig | None = None,
          out_dir: str | os.PathLike | None = None, progress: Any = "auto", slo: str | SLO | None = None,
          requests: int | None = None, label: str | None = None, **bench_kwargs) -> Sweep:
    """Run :func:`kit.bench.bench` once per concurrency, in the order given; see the module.

    ``config`` is a BenchConfig template (its concurrency is replaced per point); BenchConfig fields may
    also be given as keywords, and the rest (``server``, ``port``, ``ssh_options``) go to ``bench``.
    Requests per point: ``requests`` when given, else the template's, else ``max(8, 2 * concurrency)``.
    ``progress``: ``"auto"`` (a line per point on stderr and bench's own bar), None, or a callable given
    each point's line (``"concurrency 4: 3 of 5"``). A point that cannot run, or whose requests all fail,
    stops the sweep with a BenchError naming it and what finished; the manifest keeps the finished points.
    """
    from .load import bench

    levels = _levels(concurrencies)
    rule = parse_slo(slo) if slo is not None else None
    fields_given = {k: bench_kwargs.pop(k) for k in list(bench_kwargs) if k in _FIELDS}
    for name in ("concurrency", "requests"):
        if name in fields_given:
            raise BenchError(f"{name} is set per point by the sweep", hint="pass concurrencies, and requests=N")
    if requests is not None and (not isinstance(requests, int) or requests < 1):
        raise BenchError(f"requests must be a positive integer, not {requests!r}", hint="or leave it out: "
                         "max(8, 2 * concurrency) per point")
    template = replace(config, **fields_given) if config is not None else BenchConfig(**fields_given)
    per_point = requests if requests is not None else (config.requests if config is not None else None)
    where = Path(out_dir) if out_dir is not None else sweep_dir()
    kept = {k: v for k, v in asdict(template).items() if k not in ("concurrency", "requests", "label")}
    result = Sweep([], where, rule, label or template.label, "", _dt.datetime.now(_dt.timezone.utc)
                   .isoformat(timespec="seconds"), levels, kept, None, __version__)
    say = _announcer(progress)
    result.write()
    for number, level in enumerate(levels, 1):
        count = per_point if per_point is not None else max(8, 2 * level)
        tag = f"{result.label}-c{level}" if result.label else None
        cfg = replace(template, concurrency=level, requests=count, label=tag)
        run_file = f"c{level}.jsonl"
        say(f"concurrency {level}: {number} of {len(levels)} ({count} requests)")
        try:
            run = bench(target, out=where / run_file, config=cfg, progress="auto" if progress == "auto" else None,
                        **bench_kwargs)
        except BenchError as exc:
            raise _stopped(result, level, number, exc.message, exc.hint) from None
        except KeyboardInterrupt:
            result.stopped = f"interrupted at concurrency {level} ({number} of {len(levels)})"
            result.write()
            raise
        result.url = result.url or run.url
        if not run.totals["ok"]:
            failures = ", ".join(f"{k} x{v}" for k, v in sorted(run.totals["failures"].items()))
            first = next((r.error for r in run.results if not r.ok), None)
            raise _stopped(result, level, number, f"all {len(run.results)} requests failed ({failures}); "
                           f"the first: {first}; its run is {where / run_file}",
                           "check the server (`curl URL/health`) and run the sweep again")
        result.points.append(SweepPoint.of(run, run_file, rule))
        result.write()
    return result


def sweep_dir() -> Path:
    """Where a sweep is written when no ``out_dir`` is given: ``runs/sweep-<time>/``."""
    return Path("runs") / f"sweep-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _stopped(result: Sweep, level: int, number: int, message: str, hint: str) -> BenchError:
    finished = (f"finished: concurrency {', '.join(map(str, result.concurrencies))}, kept in {result.manifest}"
                if result.points else f"no point finished; the manifest {result.manifest} has none")
    result.stopped = f"concurrency {level} ({number} of {len(result.planned)}): {message}"
    result.write()
    return BenchError(f"the sweep stopped at concurrency {level} ({number} of {len(result.planned)}): {message}",
                      hint=f"{finished}. {hint}" if hint else finished)


def _levels(concurrencies: Iterable[int]) -> list[int]:
    try:
        levels = list(concurrencies)
    except TypeError:
        raise BenchError(f"concurrencies must be a list of positive integers, not {concurrencies!r}",
                         hint="e.g. [1, 2, 4, 8]") from None
    bad = [c for c in levels if isinstance(c, bool) or not isinstance(c, int) or c < 1]
    if not levels or bad:
        raise BenchError(f"concurrencies must be positive integers, not {levels!r}", hint="e.g. [1, 2, 4, 8]")
    if len(set(levels)) != len(levels):
        raise BenchError(f"a concurrency is given twice in {levels}", hint="give each once: e.g. [1, 2, 4, 8]")
    return levels


def _announcer(progress: Any) -> Callable[[str], None]:
    if progress is None:
        return lambda line: None
    if callable(progress):
        return progress
    if progress == "auto":
        return lambda line: (sys.stderr.write(f"sweep: {line}\n"), sys.stderr.flush())
    raise BenchError(f"progress must be \"auto\", None or a callable, not {progress!r}",
                     hint="progress=None runs quietly")


def _finite(record: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)
