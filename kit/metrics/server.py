"""One discovered server's timeline: its log, its release's metric names, its port as the selector.

What ``sgl-kit timeline TARGET`` and notebook 01's "when did it drop" step share. ``server`` is
a ``kit.target.ServerProcess`` (or None, for files only); every piece it cannot read becomes
a problem in the result and the rest goes on.
"""

from __future__ import annotations

import gzip
import posixpath
import re

from kit.errors import KitError

__all__ = ["earlier_logs", "server_timeline"]

_ROTATED = re.compile(r"\.(\d+)(\.gz)?$")


def server_timeline(server=None, prometheus=None, *, since: str | float = "24h", end: float | None = None,
                    step: str | float | None = None, selector: str | None = None, log_text: str | None = None,
                    version: str | None = None, log_tz: str = "UTC", timeout: float = 10.0):
    """The :class:`~kit.metrics.Timeline` of ``server`` over ``since``.

    ``prometheus`` is a URL (credentials from ``$SGL_KIT_PROMETHEUS_TOKEN`` or
    ``$SGL_KIT_PROMETHEUS_USER``/``_PASSWORD``), a :class:`~kit.metrics.Prometheus`, or None
    (the log only). ``selector`` defaults to the server's port (``{instance=~".+:30000"}``);
    ``log_text`` to the server's log file and its rotated predecessors (:func:`earlier_logs`);
    ``version`` to the server's sglang release.
    """
    from .names import metric_names
    from .prometheus import Prometheus
    from .timeline import timeline

    problems: list[str] = []
    started = None
    if server is not None:
        version = version or getattr(server, "sglang_version", None)
        started = getattr(server, "started_at", None)
        if log_text is None:
            try:
                log_text = earlier_logs(server, problems) + server.log_text()
            except KitError as err:
                problems.append(f"the server's log: {err.message}")
        if selector is None and getattr(server, "port", None):
            selector = f'{{instance=~".+:{int(server.port)}"}}'
    names = None
    if version:
        try:
            names = metric_names(version)
        except KitError as err:
            problems.append(f"metric names of sglang {version}: {err.message}")
    if isinstance(prometheus, str):
        prometheus = Prometheus.from_env(prometheus, timeout=timeout) if prometheus else None
    result = timeline(prometheus, since=since, end=end, step=step, selector=selector or "", names=names,
                      log_text=log_text, log_tz=log_tz, process_started=started)
    result.problems[:0] = problems
    return result


def earlier_logs(server, problems: list[str] | None = None) -> str:
    """The server's rotated logs, oldest first, as one text: ``server.log.2.gz``, ``server.log.1`` beside
    ``server.log`` (logrotate's names; the lab keeps its last runs so), so a restart that began a new log
    still shows, with the launch before it. '' when there are none; one that cannot be read is a problem."""
    path = getattr(server, "log_path", None)
    host = getattr(server, "host", None)
    if not path or host is None:
        return ""
    folder, name = posixpath.split(path)
    res = host.run(["find", folder or ".", "-maxdepth", "1", "-name", f"{name}.[0-9]*"], timeout=30)
    found = []
    for line in res.stdout.splitlines():
        match = _ROTATED.search(line[len(path):]) if line.startswith(path) else None
        if match and line[len(path):] == match.group(0):
            found.append((int(match.group(1)), line))
    texts = []
    for _, rotated in sorted(found, reverse=True):
        try:
            data = host.read_bytes(rotated)
            if rotated.endswith(".gz"):
                data = gzip.decompress(data)
        except (KitError, OSError, EOFError) as err:
            if problems is not None:
                problems.append(f"the rotated log {rotated}: {getattr(err, 'message', err)}")
            continue
        text = data.decode("utf-8", "replace")
        texts.append(text if text.endswith("\n") else text + "\n")
    return "".join(texts)
