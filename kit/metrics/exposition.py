"""A server's ``/metrics`` page (Prometheus text format) as a DataFrame, read by ``prometheus_client``'s parser."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from kit.errors import MetricsError

from .series import label_text

__all__ = ["parse_metrics_text", "scrape"]


def parse_metrics_text(text: str, source: str = "/metrics"):
    """One row per sample: family, type, sample (the series name), series (labels), value, help.

    Raises MetricsError naming the line when the text is not the exposition format.
    """
    import pandas as pd
    from prometheus_client.parser import text_string_to_metric_families

    rows = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                rows.append((family.name, family.type, sample.name, label_text(sample.labels),
                             float(sample.value), family.documentation))
    except (ValueError, TypeError, IndexError) as err:
        raise MetricsError(f"{source} is not in Prometheus text format: {err}", url=source,
                           hint="give the server's /metrics page (sglang needs --enable-metrics)") from None
    return pd.DataFrame(rows, columns=["family", "type", "sample", "series", "value", "help"])


def scrape(url: str, timeout: float = 10.0):
    """GET a ``/metrics`` page and parse it (``url`` without a path gets ``/metrics``)."""
    if "://" not in url:
        raise MetricsError(f"not a URL: {url!r}", url=url, hint="e.g. http://127.0.0.1:30000/metrics")
    if url.rstrip("/").count("/") == 2:
        url = url.rstrip("/") + "/metrics"
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) checked above
            text = resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        hint = ("sglang serves /metrics only with --enable-metrics" if err.code == 404
                else "check the server's address and that it is up")
        raise MetricsError(f"GET {url} answered HTTP {err.code}", url=url, hint=hint) from None
    except (urllib.error.URLError, OSError) as err:
        raise MetricsError(f"cannot read {url}: {getattr(err, 'reason', err)} (timeout {timeout:g}s)", url=url,
                           hint="check the server's address and that it is up") from None
    frame = parse_metrics_text(text, source=url)
    frame.attrs["seconds"] = time.perf_counter() - started
    return frame
