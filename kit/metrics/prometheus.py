"""Instant and range queries against a Prometheus server's HTTP API (``/api/v1``).

Credentials come from the environment only, never from a command line, where ``ps`` and
shell history would keep them:

- ``SGL_KIT_PROMETHEUS_TOKEN``: sent as ``Authorization: Bearer ...``;
- ``SGL_KIT_PROMETHEUS_USER`` and ``SGL_KIT_PROMETHEUS_PASSWORD``: HTTP basic auth.

Every call has a timeout. A Prometheus that is down, refuses the credentials or the query
raises a :class:`~kit.errors.MetricsError` subclass that says which and what to do; an
empty answer is an empty frame, never zeros.

Names are asked as sglang declares them (``sglang:gen_throughput``). A Prometheus may hold them as
``sglang_gen_throughput``: prometheus_client 0.26.0 (sglang 0.5.11's), asked for OpenMetrics as
Prometheus asks by default, writes each sample's name with its escaping for legacy label names,
which has no ``:`` (prometheus_client/openmetrics/exposition.py:150-152), while its HELP and TYPE
lines keep the ``:`` (lines 64-66). A query is sent with the spelling this Prometheus holds, and
the answer names each metric as sglang declares it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from kit.errors import MetricsError, PrometheusAuthRequired, PrometheusQueryError, PrometheusUnreachable

from .series import label_text, parse_duration, series_frame

__all__ = ["ENV_PASSWORD", "ENV_TOKEN", "ENV_USER", "Prometheus", "QueryResult"]

ENV_TOKEN = "SGL_KIT_PROMETHEUS_TOKEN"
ENV_USER = "SGL_KIT_PROMETHEUS_USER"
ENV_PASSWORD = "SGL_KIT_PROMETHEUS_PASSWORD"  # noqa: S105 - the variable's name, not a password
_MAX_POINTS = 11000  # Prometheus refuses a range query of more than 11,000 points per series
_SGLANG_NAME = re.compile(r"\bsglang:[A-Za-z0-9_]+")
_RENAMED = "sglang_"  # the escaped prefix of sglang:... (see the module docstring)


@dataclass
class QueryResult:
    """One query's answer: the points (``kit.metrics.series`` shape) and what Prometheus said."""

    query: str
    frame: object  # pandas.DataFrame
    warnings: list[str]
    seconds: float

    @property
    def empty(self) -> bool:
        return self.frame.empty


class Prometheus:
    """A Prometheus server at ``url`` (``http://host:9090``, a path prefix allowed)."""

    def __init__(self, url: str, *, timeout: float = 10.0, token: str | None = None,
                 username: str | None = None, password: str | None = None) -> None:
        if not url or "://" not in url:
            raise PrometheusUnreachable(f"not a Prometheus URL: {url!r}", url=str(url),
                                        hint="give the server's base URL, e.g. http://127.0.0.1:9090")
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self._auth = None
        self.auth_kind = "none"
        self._held: set[str] | None = None  # the names Prometheus holds, as stored
        self._held_at = 0.0
        if token:
            self._auth, self.auth_kind = f"Bearer {token}", f"a bearer token (${ENV_TOKEN})"
        elif username is not None:
            pair = f"{username}:{password or ''}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode()
            self.auth_kind = f"basic auth as {username!r} (${ENV_USER}/${ENV_PASSWORD})"

    @classmethod
    def from_env(cls, url: str, *, timeout: float = 10.0, env: Mapping[str, str] | None = None) -> Prometheus:
        """Credentials from ``$SGL_KIT_PROMETHEUS_TOKEN`` or ``$SGL_KIT_PROMETHEUS_USER``/``_PASSWORD``."""
        env = os.environ if env is None else env
        return cls(url, timeout=timeout, token=env.get(ENV_TOKEN) or None,
                   username=env.get(ENV_USER) or None, password=env.get(ENV_PASSWORD))

    def __repr__(self) -> str:
        return f"<Prometheus {self.url} auth={self.auth_kind.split(' (')[0]}>"

    # -- the API -----------------------------------------------------------------------------------

    def instant(self, query: str, at: float | None = None) -> QueryResult:
        """``/api/v1/query``: the value of each series at ``at`` (epoch seconds; default now)."""
        params = {"query": self._spelled(query)}
        if at is not None:
            params["time"] = f"{float(at):.3f}"
        started = time.perf_counter()
        data, warnings = self._call("query", params)
        return QueryResult(query, _declared_names(_frame(data)), warnings, time.perf_counter() - started)

    def range(self, query: str, start: float, end: float | None = None, step: float | str = 15) -> QueryResult:
        """``/api/v1/query_range`` from ``start`` to ``end`` (epoch seconds) every ``step``.

        A span of more than 11,000 steps (Prometheus' own limit) is asked in pieces and joined.
        """
        end = time.time() if end is None else float(end)
        step_s = parse_duration(step)
        if step_s <= 0:
            raise PrometheusQueryError(f"a range query needs a positive step, not {step!r}", url=self.url,
                                       hint="give a step such as 15s")
        started = time.perf_counter()
        frames, warnings = [], []
        sent = self._spelled(query)
        lo = float(start)
        while lo <= end:
            hi = min(end, lo + step_s * (_MAX_POINTS - 1))
            data, warn = self._call("query_range", {"query": sent, "start": f"{lo:.3f}", "end": f"{hi:.3f}",
                                                    "step": f"{step_s:g}"})
            frames.append(_declared_names(_frame(data)))
            warnings += warn
            lo = hi + step_s
        import pandas as pd

        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        return QueryResult(query, frame, warnings, time.perf_counter() - started)

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus holds a series of (``/api/v1/label/__name__/values``), and for a
        ``sglang_...`` name held escaped, the ``sglang:...`` name sglang declares."""
        data, _ = self._call("label/__name__/values", {})
        self._held, self._held_at = set(data or ()), time.monotonic()
        return self._held | {_declared(n) for n in self._held}

    def _spelled(self, query: str) -> str:
        """``query`` with each sglang:... name in the spelling this Prometheus holds."""
        names = set(_SGLANG_NAME.findall(query))
        if not names:
            return query
        held = self._held
        stale = held is None or time.monotonic() - self._held_at > 2.0
        if stale and (held is None or any(n not in held and _escaped(n) not in held for n in names)):
            try:
                self.metric_names()
            except MetricsError:
                return query  # the query itself will say what is wrong
            held = self._held
        if not held:
            return query
        return _SGLANG_NAME.sub(lambda m: _escaped(m[0]) if m[0] not in held and _escaped(m[0]) in held else m[0],
                                query)

    def check(self) -> dict:
        """Prometheus' build info: proves the URL is a Prometheus and the credentials work."""
        data, _ = self._call("status/buildinfo", {})
        return dict(data or {})

    # -- HTTP --------------------------------------------------------------------------------------

    def _call(self, endpoint: str, params: dict) -> tuple[object, list[str]]:
        url = f"{self.url}/api/v1/{endpoint}"
        body = urllib.parse.urlencode(params).encode() if params else None
        req = urllib.request.Request(url, data=body, method="POST" if body else "GET")
        if body:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self._auth:
            req.add_header("Authorization", self._auth)
        what = f"Prometheus at {self.url}"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - http(s) checked above
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raw = err.read() or b""
            if err.code in (401, 403):
                raise self._auth_error(err.code) from None
            raise PrometheusQueryError(
                f"{what} answered HTTP {err.code} to {endpoint}: {_api_error(raw) or err.reason}",
                url=self.url, hint=_query_hint(params)) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                detail = f"no answer within {self.timeout:g}s"
            elif isinstance(reason, ConnectionRefusedError):
                detail = "connection refused (nothing listens there)"
            else:
                detail = str(reason)
            raise PrometheusUnreachable(
                f"cannot reach {what}: {detail}", url=self.url,
                hint="check the --prometheus URL and that Prometheus runs (its /-/ready page answers)") from None
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or "status" not in doc:
            raise PrometheusQueryError(f"{url} did not answer with Prometheus' API JSON ({len(raw)} bytes)",
                                       url=self.url, hint="give the base URL of a Prometheus server, "
                                                          "without /api/v1 or /graph")
        if doc["status"] != "success":
            raise PrometheusQueryError(f"{what} refused the query: {doc.get('error') or doc}",
                                       url=self.url, hint=_query_hint(params))
        return doc.get("data"), list(doc.get("warnings") or ())

    def _auth_error(self, code: int) -> PrometheusAuthRequired:
        if self._auth is None:
            return PrometheusAuthRequired(
                f"Prometheus at {self.url} needs authentication (HTTP {code}) and none was given", url=self.url,
                hint=f"export {ENV_TOKEN}=... (bearer token) or {ENV_USER}=... and {ENV_PASSWORD}=... "
                     "(basic auth); credentials are read from the environment only")
        return PrometheusAuthRequired(
            f"Prometheus at {self.url} refused {self.auth_kind} (HTTP {code})", url=self.url,
            hint=f"check the credentials in ${ENV_TOKEN} or ${ENV_USER}/${ENV_PASSWORD}")


def _escaped(name: str) -> str:
    return _RENAMED + name.removeprefix("sglang:")


def _declared(name: str) -> str:
    return "sglang:" + name.removeprefix(_RENAMED) if name.startswith(_RENAMED) else name


def _declared_names(frame):
    if len(frame) and frame["metric"].str.startswith(_RENAMED).any():
        frame["metric"] = frame["metric"].map(_declared)
    return frame


def _api_error(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()[:300]
    if isinstance(doc, dict):
        return f"{doc.get('errorType', '')}: {doc.get('error', '')}".strip(": ")
    return ""


def _query_hint(params: dict) -> str:
    query = params.get("query")
    return (f"check the PromQL {query!r}; metric names with ':' are fine, label values need quotes"
            if query else "check the URL")


def _frame(data) -> object:
    """A vector, matrix or scalar result in the series shape."""
    if not isinstance(data, dict):
        return series_frame((), "prometheus")
    kind, result = data.get("resultType"), data.get("result") or []
    if kind == "scalar" or kind == "string":
        return series_frame([("scalar", "", [result[0]], [_num(result[1])])], "prometheus")
    blocks = []
    for item in result:
        labels = item.get("metric") or {}
        name = labels.get("__name__", "")
        if kind == "matrix":
            points = item.get("values") or []
            times = [p[0] for p in points]
            values = [_num(p[1]) for p in points]
        else:
            t, v = item.get("value") or (None, None)
            times, values = ([t], [_num(v)]) if t is not None else ([], [])
        blocks.append((name, label_text(labels), times, values))
    return series_frame(blocks, "prometheus")


def _num(text) -> float:
    return float(text)  # Prometheus writes NaN, +Inf, -Inf, which float() reads
