"""The one shape of a time series in the kit: a long DataFrame, one row per point.

Columns: ``time`` (UTC timestamps), ``metric`` (the sglang metric name, or the log field),
``series`` (the label set as ``k=v,k=v``, empty for none), ``value`` (float) and ``source``
(``prometheus``, ``log`` or a ``/metrics`` URL). Prometheus range queries, the decode log
and a scraped page all come out in it, so one plot can show them together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["COLUMNS", "empty_frame", "epochs", "label_text", "parse_duration", "series_frame"]

COLUMNS = ("time", "metric", "series", "value", "source")


def label_text(labels: Mapping[str, str], drop: Iterable[str] = ("__name__",)) -> str:
    """``k=v,k=v`` in key order, without the names in ``drop``."""
    skip = set(drop)
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels) if k not in skip)


def epochs(times):
    """Epoch seconds (a float array) of a column of UTC times, whatever its resolution."""
    import numpy as np
    import pandas as pd

    delta = pd.to_datetime(times, utc=True) - pd.Timestamp(0, tz="UTC")
    return np.asarray(delta / pd.Timedelta(seconds=1), dtype=float)


def empty_frame():
    import pandas as pd

    return pd.DataFrame({
        "time": pd.Series([], dtype="datetime64[ns, UTC]"),
        "metric": pd.Series([], dtype=object),
        "series": pd.Series([], dtype=object),
        "value": pd.Series([], dtype=float),
        "source": pd.Series([], dtype=object),
    })


def series_frame(blocks: Iterable[tuple[str, str, object, object]], source: str):
    """A frame from (metric, series, epoch-seconds array, value array) blocks."""
    import numpy as np
    import pandas as pd

    parts = []
    for metric, series, times, values in blocks:
        t = np.asarray(times, dtype=float)
        if not len(t):
            continue
        parts.append(pd.DataFrame({
            "time": pd.to_datetime(np.round(t * 1000).astype("int64"), unit="ms", utc=True),
            "metric": metric,
            "series": series,
            "value": np.asarray(values, dtype=float),
            "source": source,
        }))
    if not parts:
        return empty_frame()
    return pd.concat(parts, ignore_index=True)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``90``, ``15s``, ``5m``, ``24h``, ``7d`` or ``1h30m``."""
    import re

    if isinstance(text, (int, float)):
        return float(text)
    raw = str(text).strip()
    try:
        return float(raw)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", raw)
    if not parts or "".join(a + b for a, b in parts) != raw:
        raise ValueError(f"not a duration: {text!r} (use e.g. 90s, 15m, 24h, 7d)")
    return sum(float(n) * _UNITS[u] for n, u in parts)
