"""A run as data: ``BenchRun`` (tables, totals, rendering) and its JSONL run file, written and read back."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from kit.errors import BenchError

from .config import BenchConfig, RequestResult
from .stream import judge_decode

__all__ = ["BenchRun", "RunWriter"]

_FORMAT = 1  # in every header line, so that a later reader can tell an older file layout apart


@dataclass
class BenchRun:
    """A finished (or crashed) run: its configuration, one row per request, and server snapshots.

    ``server_pages`` are the server's own ``/metrics`` pages taken during the run, ``(epoch seconds,
    raw text)`` in the order taken (kit/bench/server_pages.py); ``server_metrics_problem`` is why the
    first read of them failed (None when none did), ``server_metrics_failures`` how many reads failed.
    ``clock_origin_at`` is ``clock_origin_ns`` on the epoch clock, to line requests up with the pages.
    """

    config: BenchConfig
    url: str
    results: list[RequestResult]
    started_at: str = ""
    duration_s: float | None = None  # None: the run did not finish (crash or interrupt)
    server_info_before: dict | None = None
    server_info_after: dict | None = None
    path: str | None = None
    kit_version: str = ""
    clock_origin_ns: int | None = None  # time.perf_counter_ns() at the run's start, to line up with other logs
    server_pages: list[tuple[float, str]] = field(default_factory=list)
    server_metrics_problem: str | None = None
    server_metrics_failures: int = 0
    clock_origin_at: float | None = None  # time.time() at the run's start (the same instant as clock_origin_ns)
    prefix_reuse: dict | None = None  # how much the run's prompts share prefixes (kit.bench.client.prefix_reuse)
    cache_flush: str | None = None  # "flushed", why not, or None (not asked: BenchConfig.flush_cache)

    # -- tables ------------------------------------------------------------------
    @property
    def requests(self):
        """One row per measured request (a pandas DataFrame)."""
        import pandas as pd

        columns = [f.name for f in fields(RequestResult)]
        return pd.DataFrame([r.to_dict() for r in self.results], columns=columns)

    def summary(self):
        """Mean, median, p90 and p99 of each per-request metric over the successful requests."""
        import numpy as np
        import pandas as pd

        ok = [r for r in self.results if r.ok]
        series = {
            "ttft_ms": [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None],
            "e2e_s": [r.e2e_s for r in ok if r.e2e_s is not None],
            "decode_tok_s": [r.decode_tok_s for r in ok if r.decode_tok_s is not None],
            "itl_token_ms": _itl_samples(ok, per_token=True),
            "itl_chunk_ms": _itl_samples(ok, per_token=False),
            "tokens_per_chunk": [t for r in ok for t in r.chunk_tokens[1:]],
            "output_tokens": [r.output_tokens for r in ok],
            "wait_ms": [r.wait_s * 1e3 for r in ok],
        }
        rows = {}
        for name, values in series.items():
            arr = np.asarray(values, dtype=float)
            if arr.size:
                rows[name] = {"mean": arr.mean(), "median": np.median(arr), "p90": np.percentile(arr, 90),
                              "p99": np.percentile(arr, 99), "n": arr.size}
            else:
                rows[name] = {"mean": np.nan, "median": np.nan, "p90": np.nan, "p99": np.nan, "n": 0}
        return pd.DataFrame.from_dict(rows, orient="index")

    @property
    def totals(self) -> dict:
        """Counts over the whole run: successes, failures by kind, tokens, aggregate rates."""
        ok = [r for r in self.results if r.ok]
        failures: dict[str, int] = {}
        for r in self.results:
            if not r.ok:
                failures[r.error_kind or "unknown"] = failures.get(r.error_kind or "unknown", 0) + 1
        tokens = sum(r.output_tokens for r in ok)
        verified = [r for r in ok if r.spec_verify_ct]
        rates = [r.decode_tok_s for r in ok if r.decode_tok_s is not None]
        return {
            "requests": len(self.results),
            "ok": len(ok),
            "failed": len(self.results) - len(ok),
            "failures": failures,
            "output_tokens": tokens,
            "duration_s": self.duration_s,
            "output_tok_s": tokens / self.duration_s if self.duration_s else None,
            "mean_decode_tok_s": sum(rates) / len(rates) if rates else None,
            "accept_length": (sum(r.output_tokens for r in verified) / sum(r.spec_verify_ct for r in verified)
                              if verified else None),
            "flagged_counts": sum(1 for r in self.results if r.count_source != "server"),
            "no_decode_rate": sum(1 for r in ok if r.decode_note),
            "finished": self.duration_s is not None,
        }

    # -- files -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike) -> BenchRun:
        """Read a run file; a run that crashed reads back with what it had finished."""
        return _load_run(Path(path))

    def to_jsonl(self, path: str | os.PathLike) -> Path:
        """Write the whole run to ``path`` (runs normally write themselves as they go)."""
        writer = RunWriter(Path(path))
        writer.header(self)
        for r in self.results:
            writer.request(r)
        for at, text in self.server_pages:
            writer.server_page(at, text)
        if self.server_metrics_problem:
            writer.server_metrics_unavailable(self.server_metrics_problem)
        if self.duration_s is not None:
            writer.end(self.duration_s, self.server_info_after, self.server_metrics_failures)
        writer.close()
        return Path(path)

    # -- plots (plotly, through kit.display) ---------------------------------------
    def plot_rates(self):
        from kit.display import rate_distribution

        return rate_distribution({self.name: self})

    def plot_timeline(self):
        from kit.display import timeline

        return timeline(self)

    # -- rendering -----------------------------------------------------------------
    @property
    def name(self) -> str:
        if self.config.label:
            return self.config.label
        return Path(self.path).stem if self.path else f"{self.config.api}@{self.url}"

    def _headline(self) -> str:
        t = self.totals
        rated = sum(1 for r in self.results if r.ok and r.decode_tok_s is not None)
        rate = f"{t['mean_decode_tok_s']:.2f}" if t["mean_decode_tok_s"] is not None else "n/a"
        left = (f"; {t['no_decode_rate']} request{'s' * (t['no_decode_rate'] > 1)} without a decode rate, see below"
                if t["no_decode_rate"] else "")
        state = "" if t["finished"] else ", did not finish"
        return (f"{t['ok']}/{t['requests']} ok, {t['failed']} failed, decode {rate} tok/s per request (mean of "
                f"{rated}{left}), {self.config.api} c={self.config.concurrency}{state}")

    def notes(self) -> list[str]:
        t = self.totals
        out = []
        if t["failures"]:
            out.append("failures: " + ", ".join(f"{k} x{v}" for k, v in sorted(t["failures"].items())))
            first = next(r for r in self.results if not r.ok)
            out.append(f"first failure (request {first.index}): {first.error}")
        if t["no_decode_rate"]:
            left = [r for r in self.results if r.ok and r.decode_note]
            out.append(f"{len(left)} request(s) without a decode rate, left out of decode_tok_s and the latencies "
                       "between tokens (their time to first token and tokens still count): their decode tokens "
                       "arrived at once, so the arrival times do not show the decode (the client read many events "
                       "in one go, or the server sent many steps' tokens in one event; a decode needs two or more "
                       "arrivals, none with more than half of its tokens)")
            out += [f"  request {r.index}: {r.decode_note}" for r in left[:5]]
            if len(left) > 5:
                out.append(f"  ... and {len(left) - 5} more (decode_note in the run file)")
        if t["flagged_counts"]:
            reasons = sorted({r.count_note for r in self.results if r.count_note})
            out.append(f"{t['flagged_counts']} request(s) not counted by the server: " + "; ".join(reasons))
        if t["accept_length"] is not None:
            out.append(f"accept length over this run: {t['accept_length']:.3f} "
                       "(sum of completion tokens / sum of spec_verify_ct)")
        server = self._server_line()
        if server:
            out.append(server)
        side = self.server_side()
        if side:
            out.append("the server's side of the same minutes (its /metrics pages), beside the client's:")
            width, wide = max(len(what) for what, _, _ in side), max(len(srv) for _, srv, _ in side)
            out += [f"  {what:<{width}}  server {srv:<{wide}}  client {cli}" for what, srv, cli in side]
        return out

    def server_side(self) -> list[tuple[str, str, str]]:
        """(what, the server's number, the client's) over this run, from the server's /metrics pages the run
        kept (counters: the last page less the first; gauges: the most any page showed). Empty without two
        pages. A number the server did not report is said so, not zero."""
        if len(self.server_pages) < 2:
            return []
        from kit.errors import KitError
        from kit.metrics import pages_facts, parse_metrics_text

        try:
            facts = pages_facts([(at, parse_metrics_text(text)) for at, text in self.server_pages],
                                source="the run's pages")
        except KitError:
            return []

        def total(key: str) -> float | None:
            fact = facts.get(key) or {}
            return sum(fact["values"].values()) if fact.get("status") == "measured" else None

        def most(key: str) -> str:
            value = total(key) if (facts.get(key) or {}).get("sampled") is False else \
                max((facts.get(key) or {}).get("values", {}).values(), default=None)
            return "not reported" if value is None else f"{value:g}"

        ok = [r for r in self.results if r.ok]
        sent = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
        prompt, cached, queued = total("prompt_tokens"), total("cached_tokens"), total("queue_time_count")
        waited, ttft = total("queue_time_sum"), total("ttft_sum")
        ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
        return [
            ("requests", "not reported" if queued is None else f"{queued:g} through the queue", f"{len(ok)} ok of "
             f"{len(self.results)}, {self.config.concurrency} at once"),
            ("prompt tokens", "not reported" if prompt is None else f"{prompt:g}",
             f"{sum(sent)} counted by the server's replies" if sent else "not in the replies"),
            ("cached prompt tokens", "not reported" if cached is None or not prompt
             else f"{cached:g} ({cached / prompt:.0%})",
             f"prompts share {self.prefix_reuse['share']:.0%} of a prefix" if self.prefix_reuse else "-"),
            ("mean queue time", "not reported" if not queued or waited is None else f"{waited / queued * 1e3:.1f} ms",
             "-"),
            ("mean time to first token", "not reported" if not queued or ttft is None
             else f"{ttft / queued * 1e3:.1f} ms", f"{sum(ttfts) / len(ttfts) * 1e3:.1f} ms" if ttfts else "-"),
            ("most running at once", most("running_max"), "-"),
            ("most queued at once", most("queue_max"), "-"),
            ("most KV token usage", most("token_usage_max"), "-"),
            ("requests retracted", most("retracted_requests"), "-"),
        ]

    def _server_line(self) -> str | None:
        """One line on the server's /metrics pages of this run: how many, over how long, or why there are none."""
        pages, problem = self.server_pages, self.server_metrics_problem
        if not pages:
            return f"server /metrics: {problem}" if problem else None
        span = pages[-1][0] - pages[0][0]
        every = self.config.server_metrics_interval
        kept = span / (len(pages) - 1) if len(pages) > 2 else 0.0
        spacing = f"every {every:g} s" + (f"; kept about every {kept:.3g} s" if every and kept > 1.5 * every else "")
        line = f"server /metrics: {len(pages)} page{'s' * (len(pages) != 1)} over {span:.1f} s ({spacing})"
        if problem:
            failed = max(self.server_metrics_failures, 1)
            line += f"; {failed} read{'s' * (failed != 1)} failed, the first: {problem}"
        return line

    def __repr__(self) -> str:
        return f"<BenchRun {self.name}: {self._headline()}>"

    def to_text(self) -> str:
        if not self.totals["ok"]:  # nothing succeeded: a table of NaN says nothing the failures do not
            return "\n".join([repr(self)[1:-1], *self.notes()])
        table = self.summary().round(3).to_string()
        return "\n".join([repr(self)[1:-1], *self.notes(), table])

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes())
        table = self.summary().round(3).to_html() if self.totals["ok"] else ""
        return (f"<div><b>BenchRun {html.escape(self.name)}</b>: {html.escape(self._headline())}"
                f"<ul>{notes}</ul>{table}</div>")


def _itl_samples(results: Iterable[RequestResult], *, per_token: bool) -> list[float]:
    """Gaps between token chunks in ms; per token, a gap counts once for each token of its chunk."""
    out: list[float] = []
    for r in results:
        if r.decode_note:  # its arrival times do not show the decode (stream.judge_decode)
            continue
        t, k = r.chunk_t_ms, r.chunk_tokens
        for i in range(1, len(t)):
            gap = t[i] - t[i - 1]
            if per_token and k[i] > 0:
                n = max(1, round(k[i]))
                out.extend([gap / k[i]] * n)
            elif not per_token:
                out.append(gap)
    return out


# -- the run file ------------------------------------------------------------------------


class RunWriter:
    """Appends one JSON line per finished request and flushes it, so a crash loses nothing done."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def _write(self, record: dict) -> None:
        self.fh.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
        self.fh.flush()

    def header(self, run: BenchRun) -> None:
        self._write({"kind": "run", "format": _FORMAT, "kit_version": run.kit_version, "url": run.url,
                     "started_at": run.started_at, "clock_origin_ns": run.clock_origin_ns,
                     "clock_origin_at": run.clock_origin_at, "prefix_reuse": run.prefix_reuse,
                     "cache_flush": run.cache_flush, "config": asdict(run.config),
                     "server_info_before": run.server_info_before})

    def request(self, result: RequestResult) -> None:
        self._write({"kind": "request", **result.to_dict()})

    def server_page(self, at: float, text: str) -> None:
        """One page of the server's /metrics: when it was taken (epoch seconds) and its raw text."""
        self._write({"kind": "server_metrics", "at": at, "text": text})

    def server_metrics_unavailable(self, why: str) -> None:
        self._write({"kind": "server_metrics_unavailable", "why": why})

    def end(self, duration_s: float, server_info_after: dict | None, server_metrics_failures: int = 0) -> None:
        self._write({"kind": "end", "duration_s": duration_s, "server_info_after": server_info_after,
                     "server_metrics_failures": server_metrics_failures})

    def close(self) -> None:
        self.fh.close()


def _load_run(path: Path) -> BenchRun:
    if not path.is_file():
        raise BenchError(f"no run file at {path}", hint="give a .jsonl written by `sgl-kit bench --out`")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # a line torn by a crash mid-write
            raise BenchError(f"{path}:{number} is not JSON",
                             hint="the run file is damaged; re-run the benchmark") from None
    if not records or records[0].get("kind") != "run":
        raise BenchError(f"{path} is not a bench run file (no header line)",
                         hint="give a .jsonl written by `sgl-kit bench`")
    head = records[0]
    known = {f.name for f in fields(BenchConfig)}
    config = BenchConfig(**{k: v for k, v in head.get("config", {}).items() if k in known})
    result_fields = {f.name for f in fields(RequestResult)}
    results = [RequestResult(**{k: v for k, v in r.items() if k in result_fields})
               for r in records[1:] if r.get("kind") == "request"]
    for record, result in zip((r for r in records[1:] if r.get("kind") == "request"), results, strict=True):
        if "decode_note" not in record:  # written before the rule: judged by it now, from its own chunk times
            judge_decode(result)
    results.sort(key=lambda r: r.index)  # written as they finished; a finished run holds them by index
    end = next((r for r in records if r.get("kind") == "end"), None)
    # A file written before the server's pages were kept has none of these records: no pages, no problem.
    pages = [(float(r["at"]), r["text"]) for r in records[1:]
             if r.get("kind") == "server_metrics" and isinstance(r.get("text"), str) and r.get("at") is not None]
    problem = next((r.get("why") for r in records[1:] if r.get("kind") == "server_metrics_unavailable"), None)
    return BenchRun(config, head.get("url", ""), results, head.get("started_at", ""),
                    end["duration_s"] if end else None, head.get("server_info_before"),
                    end.get("server_info_after") if end else None, str(path), head.get("kit_version", ""),
                    head.get("clock_origin_ns"), pages, problem,
                    int(end.get("server_metrics_failures") or 0) if end else int(problem is not None),
                    head.get("clock_origin_at"), head.get("prefix_reuse"), head.get("cache_flush"))
