"""The server's side of a run: its own ``/metrics`` page, read while the load runs (``ServerPages``).

A run reads ``{url}/metrics`` once before its first measured request (after the warmup,
before the run's clock starts), then every ``BenchConfig.server_metrics_interval``
seconds, and once after its last request finished. Each page is kept as it came, raw
Prometheus text, with the time it was taken (``time.time()``, epoch seconds), so a later
reader can line the server's counters up with the requests of the same minutes.
Nothing here interprets a page: ``kit.metrics`` and the doctor do.

- At most ``MAX_PAGES`` (200) pages are kept, however long the run. When a run reaches that
  many, every other page after the first is dropped and reads from then on come half as
  often, so what is kept stays evenly spaced over the whole run; the first page and the
  one taken after the last request are always kept.
- The pages are held in memory and written to the run file when the run ends (also when
  it ends by an error or Ctrl-C), after its request lines and before its end record, as
  ``{"kind": "server_metrics", "at": ..., "text": ...}`` in the order taken. A process
  killed outright keeps its finished requests, not the pages.
- A page that cannot be read (HTTP 404 from a server started without
  ``--enable-metrics``, a refused connection, no answer in time, an answer that is not
  Prometheus text) never stops the run. The first such failure is kept as one
  ``{"kind": "server_metrics_unavailable", "why": ...}`` record, written after the pages;
  later ones are only counted (``server_metrics_failures`` in the end record). When the
  very first read fails, no more are tried.
- A label value under a secret-looking label name (kit/_secrets.py) is written as
  ``<redacted>``; the rest of a page is kept as read.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

__all__ = ["MAX_PAGES", "ServerPages", "mask_labels"]

MAX_PAGES = 200
_EDGE_TIMEOUT = 10.0  # the reads before and after the load: nothing measured waits on them
_HINT = "start the server with --enable-metrics to record its side"
_PAGE_START = re.compile(r"\s*(#|[A-Za-z_:][A-Za-z0-9_:]*[\s{])")
_LABEL_NAME = re.compile(r"[{,]\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*\"")
_LABEL = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*=\s*\")((?:[^\"\\\n]|\\.)*)\"")


class ServerPages:
    """Reads a server's ``/metrics`` through the run's aiohttp session: ``first()`` before the clock starts,
    ``start()`` for the reads while the load runs, ``finish()`` after the last request, ``close()`` to write.

    ``interval`` 0 reads nothing. ``pages`` holds ``(epoch seconds, text)`` in the order taken.
    """

    def __init__(self, session: Any, base: str, interval: float, *, cap: int = MAX_PAGES) -> None:
        if cap < 2:
            raise ValueError("cap must keep at least the first and the last page")
        self.session = session
        self.url = base.rstrip("/") + "/metrics"
        self.interval = float(interval)
        self.every = self.interval  # doubles each time the pages are thinned
        self.cap = cap
        self.pages: list[tuple[float, str]] = []
        self.problem: str | None = None
        self.failures = 0
        self.reads = 0
        self.writer: Any = None
        self._task: asyncio.Task | None = None
        self._written = False

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    # -- reading ------------------------------------------------------------------------
    async def first(self) -> None:
        """The page before the load; it must parse as Prometheus text (``kit.metrics.parse_metrics_text``)."""
        if self.enabled:
            await self._take(_EDGE_TIMEOUT, full_check=True)

    def start(self) -> None:
        """Read every ``interval`` seconds in the background, when the first read gave a page."""
        if self.enabled and self.pages and self._task is None:
            self._task = asyncio.ensure_future(self._every())

    async def finish(self) -> None:
        """Stop the background reads and take the page after the last request."""
        self._stop()
        if self.enabled and self.pages:
            await self._take(_EDGE_TIMEOUT)

    async def _every(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += self.every
            await asyncio.sleep(max(0.0, due - loop.time()))
            await self._take(max(1.0, min(self.every, 10.0)))
            due = max(due, loop.time() - self.every)  # a slow answer delays the next read, never bunches them

    async def _take(self, timeout: float, *, full_check: bool = False) -> None:
        import aiohttp

        self.reads += 1
        at = time.time()
        try:
            async with self.session.get(self.url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                if response.status != 200:
                    await response.read()
                    raise _Unreadable(f"HTTP {response.status} {response.reason or ''}".strip())
                text = (await response.read()).decode("utf-8", errors="replace")
        except _Unreadable as exc:
            return self._failed(str(exc))
        except asyncio.TimeoutError:
            return self._failed(f"no answer within {timeout:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}".rstrip(": "))
        except Exception as exc:  # noqa: BLE001 - a page is never worth the run
            return self._failed(f"unexpected {type(exc).__name__}: {exc}".rstrip(": "))
        why = _not_a_page(text, full_check)
        if why:
            return self._failed(why)
        self._keep(at, text)

    def _keep(self, at: float, text: str) -> None:
        if len(self.pages) >= self.cap:
            self.pages = self.pages[::2]  # evenly, from the first: the spacing doubles
            self.every *= 2
        self.pages.append((at, text))

    def _failed(self, what: str) -> None:
        self.failures += 1
        if self.problem is not None:
            return
        tail = (_HINT if not self.pages else
                f"{len(self.pages)} page{'s' * (len(self.pages) != 1)} read before it are kept")
        self.problem = f"GET {self.url}: {what}; {tail}"

    # -- writing ------------------------------------------------------------------------
    def attach(self, writer: Any) -> None:
        """Write the pages and the first failure through ``writer`` (a RunWriter) at ``close``."""
        self.writer = writer

    def _stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def close(self) -> None:
        """Stop reading and write the pages kept and the first failure (once); safe however the run ended."""
        self._stop()
        if self._written or self.writer is None:
            return
        self._written = True
        self.pages = [(at, mask_labels(text)) for at, text in self.pages]  # as the file will hold them
        for at, text in self.pages:
            self.writer.server_page(at, text)
        if self.problem is not None:
            self.writer.server_metrics_unavailable(self.problem)


class _Unreadable(Exception):
    pass


def _not_a_page(text: str, full_check: bool) -> str | None:
    """Why ``text`` is not a Prometheus page, or None. The first page is parsed in full before the clock
    starts; later ones, read while requests stream in the same loop, only have their start looked at."""
    if not text.strip():
        return "an empty page"
    if not full_check:
        return None if _PAGE_START.match(text) else "the page is not in Prometheus text format"
    from kit.errors import MetricsError
    from kit.metrics import parse_metrics_text

    try:
        parse_metrics_text(text, source="the page")
    except MetricsError as exc:
        return exc.message
    return None


def mask_labels(text: str) -> str:
    """``text`` with the value of every label under a secret-looking name (``api_key="..."``) as ``<redacted>``."""
    from kit._secrets import is_secret_name

    names = {name for name in _LABEL_NAME.findall(text) if is_secret_name(name)}
    if not names:
        return text
    return _LABEL.sub(lambda m: f'{m[1]}{m[2]}{m[3]}<redacted>"' if m[2] in names else m[0], text)
