"""How the load is spread across the replicas, over time: requests, tokens, queue and prefix-cache hits
per worker, from one Prometheus over all of them or from each worker's own ``/metrics`` read every few
seconds; the router's view (``GET /workers``: each worker's load now); an imbalance finding with the
router's policy as its launch set it; and, for a prefill/decode split, each role's queues and the KV
transfer speed where the release declares them.

The families are sglang's (kit/metrics/names.py): ``num_requests_total``, ``generation_tokens_total``,
``prompt_tokens_total`` (counters, read as rates), ``num_queue_reqs``, ``num_running_reqs`` and
``cache_hit_rate`` (gauges). The prefill/decode queues are the "PD disaggregation" gauges of
``srt/observability/metrics_collector.py`` (0.5.11: lines 343-374).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.metrics import names as N

from .member import Member
from .members import Fleet

__all__ = ["Balance", "IMBALANCE_RATIO", "balance", "imbalance", "pd_waits"]

# A worker with more than this multiple of the fair share (1/n of the fleet's requests) is a finding. The
# router's own spill gate uses 1.5 times the healthy-fleet mean (smg `--balance-rel-threshold`, default 1.5).
IMBALANCE_RATIO = 1.5
MIN_REQUESTS_PER_WORKER = 4  # fewer requests in the window than 4 per worker: too few to call a spread

# panel: (family, how it is read: "rate" for a counter, "gauge" for a gauge)
PANELS = {
    "requests/s": (N.NUM_REQUESTS, "rate"),
    "generated tok/s": (N.GENERATION_TOKENS, "rate"),
    "prompt tok/s": (N.PROMPT_TOKENS, "rate"),
    "queued requests": (N.NUM_QUEUE_REQS, "gauge"),
    "running requests": (N.NUM_RUNNING_REQS, "gauge"),
    "cache hit rate": (N.CACHE_HIT_RATE, "gauge"),
}
PD_PANELS = {
    "prefill prealloc queue": (N.PREFILL_PREALLOC_QUEUE, "gauge"),
    "prefill bootstrap queue": (N.PREFILL_BOOTSTRAP_QUEUE, "gauge"),
    "prefill inflight queue": (N.PREFILL_INFLIGHT_QUEUE, "gauge"),
    "decode prealloc queue": (N.DECODE_PREALLOC_QUEUE, "gauge"),
    "decode transfer queue": (N.DECODE_TRANSFER_QUEUE, "gauge"),
}

# What a policy does, in the words of smg 1.13's `launch --help` (the only policy whose effect on a skew is
# stated there is cache_aware; for the others the finding names the policy and says no more).
POLICY_SAYS = {
    "cache_aware": "cache_aware sends a request to the worker whose prefix tree matches at least --cache-threshold "
                   "(default 0.3) of it, and spills to the least-loaded worker only when the matched one's load "
                   "exceeds the fleet mean by --balance-abs-threshold requests AND --balance-rel-threshold times "
                   "(default 1.5) (smg `launch --help`): traffic that shares a prefix (a common system prompt, "
                   "the same document) stays on one worker until that gate trips",
}


@dataclass
class Balance:
    """``frame``: time, worker, panel, value (one row per point); ``totals`` each worker's requests and
    tokens over the window; ``router`` the router's view and launch; ``findings`` sentences with their
    inputs; ``pd`` the prefill/decode queues per role when the split was seen."""

    frame: Any
    totals: dict[str, dict]
    source: str
    window_s: float
    router: dict | None = None
    findings: list[str] = field(default_factory=list)
    pd: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    load_run: Any = None  # the kit.bench run sent while the pages were read (balance(load=...))

    def shares(self) -> dict[str, float]:
        total = sum(t["requests"] for t in self.totals.values())
        return {w: (t["requests"] / total if total else 0.0) for w, t in self.totals.items()}

    def to_text(self) -> str:
        lines = [f"load across {len(self.totals)} worker(s) over {self.window_s:.0f} s ({self.source})"]
        shares = self.shares()
        for w, t in sorted(self.totals.items(), key=lambda kv: -kv[1]["requests"]):
            load = (self.router or {}).get("loads", {}).get(w)
            lines.append(f"  {w:<24} {t['requests']:>7.0f} requests ({shares[w]:.0%})  "
                         f"{t['generated_tokens']:>9.0f} generated tokens  max queue {t['max_queue']:.0f}"
                         + (f"  router load now {load}" if load is not None else ""))
        lines += [f"- {f}" for f in self.findings] or ["- no imbalance: every worker within "
                                                        f"{IMBALANCE_RATIO:g} times its fair share"]
        lines += [f"- {s}" for s in self.pd.get("says", [])]
        lines += [f"  ({n})" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"totals": self.totals, "shares": self.shares(), "source": self.source, "window_s": self.window_s,
                "router": self.router, "findings": self.findings, "pd": self.pd, "notes": self.notes}

    def plot(self):
        """One panel per quantity, one line per worker (plotly)."""
        from plotly.subplots import make_subplots

        panels = [p for p in [*PANELS, *PD_PANELS] if not self.frame.empty and (self.frame["panel"] == p).any()]
        fig = make_subplots(rows=max(1, (len(panels) + 1) // 2), cols=2, subplot_titles=panels,
                            shared_xaxes=True)
        colors = {}
        for i, panel in enumerate(panels):
            part = self.frame[self.frame["panel"] == panel]
            for worker, rows in part.groupby("worker"):
                color = colors.setdefault(worker, len(colors))
                fig.add_scatter(x=rows["time"], y=rows["value"], name=worker, legendgroup=worker,
                                showlegend=i == 0, mode="lines",
                                line={"color": _palette(color)}, row=i // 2 + 1, col=i % 2 + 1)
        fig.update_layout(title="load per worker" + (f": {self.findings[0][:90]}" if self.findings else ""),
                          height=260 * max(1, (len(panels) + 1) // 2))
        return fig

    def save_html(self, path: str | Path) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.plot().write_html(out, include_plotlyjs=True, full_html=True)
        return out

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.to_text())}</pre>"


def _palette(i: int) -> str:
    return ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")[i % 8]


def balance(fleet: Fleet, *, prometheus: str | None = None, since: str | float = "10m", window: float = 30.0,
            interval: float = 2.0, timeout: float = 10.0, step: str | float = "5s", end: float | None = None,
            selector: str | None = None, load: dict | None = None) -> Balance:
    """The spread of load across ``fleet``'s workers. With ``prometheus`` (a URL), the series over ``since``
    (up to ``end``); without it, each worker's ``/metrics`` read every ``interval`` s for ``window`` s. The
    router's loads and policy come with the fleet when it was listed from a router. ``load``: the keywords of
    :func:`kit.bench.bench` (``target`` the router's URL) to send while the pages are read; its run is
    ``Balance.load_run``."""
    workers = [m for m in fleet.members if m.url]
    sender = _send(load) if load else None
    if prometheus:
        frame, totals, span, notes = _from_prometheus(workers, prometheus, since, step, timeout, end, selector)
        source = f"Prometheus at {prometheus}"
    else:
        frame, totals, span, notes = _from_pages(workers, window, interval, timeout)
        source = f"each worker's /metrics every {interval:g} s"
    load_run = sender() if sender else None
    router = _router_view(fleet, timeout)
    result = Balance(frame, totals, source, span, router, notes=notes)
    result.load_run = load_run
    result.findings = imbalance(totals, router)
    result.pd = pd_waits(frame, {m.name: m.role for m in fleet.members})
    return result


def imbalance(totals: dict[str, dict], router: dict | None) -> list[str]:
    """A finding when one worker took more than IMBALANCE_RATIO times its fair share of the requests."""
    n = len(totals)
    total = sum(t["requests"] for t in totals.values())
    if n < 2 or total < MIN_REQUESTS_PER_WORKER * n:
        return []
    fair = total / n
    worst, t = max(totals.items(), key=lambda kv: kv[1]["requests"])
    ratio = t["requests"] / fair
    if ratio <= IMBALANCE_RATIO:
        return []
    idle = [w for w, v in totals.items() if v["requests"] < 0.5 * fair]
    policy = (router or {}).get("policy")
    origin = (router or {}).get("policy_origin")
    read = (router or {}).get("read", "")
    how = {"explicit": "set by --policy", "default": "its default: no --policy", "log": "as the router logged it"}
    said = (f"the router's policy is {policy} ({how.get(origin or '', 'read')}; {read})" if policy
            else f"the router's policy was not read ({read or 'no router given'})")
    why = POLICY_SAYS.get(policy or "", "")
    text = (f"imbalance: {worst} took {t['requests']:.0f} of {total:.0f} requests ({t['requests'] / total:.0%}, "
            f"{ratio:.1f} times the fair share of {1 / n:.0%})"
            + (f"; {', '.join(idle)} took less than half a share" if idle else "")
            + f"; {said}" + (f": {why}" if why else ""))
    if t.get("max_queue", 0) > 0:
        text += f". {worst} queued up to {t['max_queue']:.0f} request(s) while others had room"
    return [text]


def pd_waits(frame, roles: dict[str, str]) -> dict:
    """Each role's queues (mean and peak over the window) and which side waits, when prefill or decode
    workers are in the fleet and their pages carry the queues."""
    if frame is None or frame.empty or not any(r in ("prefill", "decode") for r in roles.values()):
        return {}
    out: dict[str, Any] = {"queues": {}, "says": []}
    for panel in PD_PANELS:
        part = frame[frame["panel"] == panel]
        for worker, rows in part.groupby("worker"):
            out["queues"].setdefault(roles.get(worker, "regular"), {}).setdefault(panel, []).append(
                {"worker": worker, "mean": float(rows["value"].mean()), "peak": float(rows["value"].max())})
    peak = {panel: max((q["peak"] for role in out["queues"].values() for q in role.get(panel, [])), default=0.0)
            for panel in PD_PANELS}
    if peak["decode transfer queue"] > 0:
        out["says"].append(f"decode waits for KV transfers: up to {peak['decode transfer queue']:.0f} request(s) in "
                           "the decode transfer queue (their KV cache is still arriving from prefill)")
    if peak["decode prealloc queue"] > 0:
        out["says"].append(f"decode waits for memory: up to {peak['decode prealloc queue']:.0f} request(s) in the "
                           "decode prealloc queue (no KV space reserved for them yet); prefill is ahead of decode")
    for panel in ("prefill prealloc queue", "prefill bootstrap queue"):
        if peak[panel] > 0:
            out["says"].append(f"prefill waits for decode to accept: up to {peak[panel]:.0f} request(s) in the "
                               f"{panel} (the handshake with a decode worker)")
    if peak["prefill inflight queue"] > 0:
        out["says"].append(f"prefill holds up to {peak['prefill inflight queue']:.0f} finished request(s) in its "
                           "inflight queue until their KV cache is sent")
    if not out["says"]:
        seen = sorted({p for role in out["queues"].values() for p in role})
        out["says"].append("no prefill/decode queue held a request in the window" if seen else
                           "the workers' pages carry no prefill/decode queue (the release or the launch does not "
                           "export them)")
    return out


def _send(load: dict):
    """Start kit.bench with ``load`` in a thread now; the returned call waits for its run (or raises its error)."""
    import threading

    from kit.bench import bench

    box: dict = {}

    def go() -> None:
        try:
            box["run"] = bench(**{"progress": None, **load})
        except Exception as exc:  # noqa: BLE001 -- raised in the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=go, name="fleet-balance-load", daemon=True)
    thread.start()

    def wait():
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["run"]

    return wait


def _router_view(fleet: Fleet, timeout: float) -> dict | None:
    if not fleet.router:
        return None
    from .members import from_router

    view = {k: v for k, v in fleet.router.items() if k != "argv"}
    try:
        now, _ = from_router(fleet.router["url"], timeout=timeout)
        view["loads"] = {m.name: m.facts.get("load") for m in now}
        view["health"] = {m.name: m.facts.get("is_healthy") for m in now}
    except Exception as exc:  # noqa: BLE001 -- the router's view is a supplement; say why it is missing
        view["loads_problem"] = str(getattr(exc, "message", exc))
    return view


def _from_pages(workers: list[Member], window: float, interval: float, timeout: float):
    import pandas as pd

    from kit.errors import MetricsError
    from kit.metrics.exposition import scrape

    pages: dict[str, list[tuple[float, Any]]] = {m.name: [] for m in workers}
    notes: list[str] = []
    failed: dict[str, str] = {}
    started = time.time()
    while True:
        for m in workers:
            if m.name in failed:
                continue
            try:
                pages[m.name].append((time.time(), scrape(m.url + "/metrics", timeout=timeout)))
            except MetricsError as exc:
                failed[m.name] = exc.message
        if time.time() - started >= window:
            break
        time.sleep(max(0.0, min(interval, window - (time.time() - started))))
    notes += [f"{w}: {why}" for w, why in failed.items()]
    rows, totals = [], {}
    for worker, seq in pages.items():
        if not seq:
            continue
        for (t0, a), (t1, b) in zip(seq, seq[1:], strict=False):
            for panel, (family, how) in {**PANELS, **PD_PANELS}.items():
                vb = _sum(b, family)
                if vb is None:
                    continue
                value = vb if how == "gauge" else max(0.0, vb - (_sum(a, family) or 0.0)) / max(t1 - t0, 1e-9)
                rows.append((pd.Timestamp(t1, unit="s", tz="UTC"), worker, panel, value))
        first, last = seq[0][1], seq[-1][1]
        queue = [v for (_, p) in seq for v in [_sum(p, N.NUM_QUEUE_REQS)] if v is not None]
        totals[worker] = {"requests": max(0.0, (_sum(last, N.NUM_REQUESTS) or 0) - (_sum(first, N.NUM_REQUESTS) or 0)),
                          "generated_tokens": max(0.0, (_sum(last, N.GENERATION_TOKENS) or 0)
                                                  - (_sum(first, N.GENERATION_TOKENS) or 0)),
                          "max_queue": max(queue, default=0.0)}
    frame = pd.DataFrame(rows, columns=["time", "worker", "panel", "value"])
    return frame, totals, time.time() - started, notes


def _sum(page, family: str) -> float | None:
    rows = page[page["sample"] == family]
    return float(rows["value"].sum()) if len(rows) else None


def _from_prometheus(workers: list[Member], url: str, since, step, timeout: float, end: float | None,
                     selector: str | None):
    import pandas as pd

    from kit.metrics.prometheus import Prometheus
    from kit.metrics.series import parse_duration

    prom = Prometheus.from_env(url, timeout=timeout)
    stop = time.time() if end is None else float(end)
    span = parse_duration(since)
    start = stop - span
    step_s = parse_duration(step)
    rate_w = f"{max(4 * step_s, 15):g}s"
    match = "{" + selector.strip().strip("{}") + "}" if selector else ""
    names = {m.name for m in workers}
    rows, notes = [], []
    for panel, (family, how) in {**PANELS, **PD_PANELS}.items():
        q = (f"sum by (instance) (rate({family}{match}[{rate_w}]))" if how == "rate"
             else f"sum by (instance) ({family}{match})")
        res = prom.range(q, start, stop, step_s)
        for _, r in res.frame.iterrows():
            inst = _instance(r["series"])
            rows.append((r["time"], inst, panel, float(r["value"])))
    totals: dict[str, dict] = {}
    # When Prometheus first scraped each worker in the window (its `up` series).
    up = prom.range("min by (instance) (timestamp(up))", start, stop, step_s).frame
    scraped_from = {_instance(series): part["time"].min().timestamp() for series, part in up.groupby("series")} \
        if not up.empty else {}
    for key, family in (("requests", N.NUM_REQUESTS), ("generated_tokens", N.GENERATION_TOKENS)):
        # The counter's rise over the window, as scraped. sglang's labelled counters come into being at their
        # first increment (prometheus_client): a series that first appears after scrapes of its worker that
        # did not have it rose from 0; one that appears with the worker's first scrape rose from its first value.
        res = prom.range(f"sum by (instance) ({family}{match})", start, stop, step_s)
        if res.frame.empty:
            continue
        for series, part in res.frame.groupby("series"):
            part = part.sort_values("time")
            first_at = part["time"].iloc[0].timestamp()
            seen = scraped_from.get(_instance(series))
            base = 0.0 if seen is not None and first_at > seen + 1.5 * step_s else float(part["value"].iloc[0])
            totals.setdefault(_instance(series), {"requests": 0.0, "generated_tokens": 0.0, "max_queue": 0.0})[
                key] = max(0.0, float(part["value"].iloc[-1]) - base)
    frame = pd.DataFrame(rows, columns=["time", "worker", "panel", "value"])
    for worker in totals:
        q = frame[(frame["worker"] == worker) & (frame["panel"] == "queued requests")]["value"]
        totals[worker]["max_queue"] = float(q.max()) if len(q) else 0.0
    unknown = sorted(set(totals) - names)
    if names and unknown:
        notes.append(f"Prometheus also holds {', '.join(unknown)}, not in the fleet listed (kept)")
    missing = sorted(names - set(totals))
    if missing:
        notes.append(f"Prometheus holds no {N.NUM_REQUESTS} of {', '.join(missing)} in the window: is it scraped "
                     "(its instance label must be host:port as listed)?")
    return frame, totals, span, notes


def _instance(series: str) -> str:
    for part in str(series).split(","):
        if part.startswith("instance="):
            return part.split("=", 1)[1]
    return str(series) or "(no instance label)"
