"""What the server did: its ``/metrics`` page, a Prometheus server's series, and the decode log over time.

- ``parse_metrics_text`` / ``scrape``: one ``/metrics`` page as a DataFrame (prometheus_client's parser);
- ``Prometheus``: instant and range queries (credentials from the environment, a timeout on every call);
- ``metric_names(version)``: the families that release declares, read from its wheel's source;
- ``log_series``: the ``Decode batch``/``Prefill batch`` lines in the same shape as the metrics;
- ``timeline`` / ``server_timeline``: throughput, accept length, queue and token usage over time, restarts marked;
- ``runtime_facts`` / ``page_facts``: graph passes by mode, queueing, retraction, cache hits, accept length, as
  plain data (from Prometheus over a span, or from one ``/metrics`` page since the process started).

Every series is a long DataFrame of ``kit.metrics.series.COLUMNS``.
"""

from .decode_log import log_series, startup_times
from .exposition import parse_metrics_text, scrape
from .names import COLLECTOR_PATHS, MetricDecl, MetricNames, declared_metrics, metric_names
from .prometheus import ENV_PASSWORD, ENV_TOKEN, ENV_USER, Prometheus, QueryResult
from .runtime import FACTS, page_facts, pages_facts, runtime_facts
from .series import COLUMNS, parse_duration
from .server import server_timeline
from .timeline import PANELS, Restart, Timeline, timeline

__all__ = [
    "COLLECTOR_PATHS",
    "COLUMNS",
    "ENV_PASSWORD",
    "ENV_TOKEN",
    "ENV_USER",
    "FACTS",
    "PANELS",
    "MetricDecl",
    "MetricNames",
    "Prometheus",
    "QueryResult",
    "Restart",
    "Timeline",
    "declared_metrics",
    "log_series",
    "metric_names",
    "parse_duration",
    "page_facts",
    "pages_facts",
    "parse_metrics_text",
    "runtime_facts",
    "scrape",
    "server_timeline",
    "startup_times",
    "timeline",
]
