"""One question asked of every replica at once: a thread per replica, at most ``concurrency`` running,
each given ``timeout`` seconds from when it starts. What fails is named with its replica; what answers is
kept. A replica past its timeout is reported at once and its slot given to the next; its thread (a daemon)
is left to end on its own, so it never holds the command open (every remote call the kit makes has its own
timeout as well)."""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.errors import KitError, UsageError

from .member import Member

__all__ = ["FanOut", "fanout"]


@dataclass
class FanOut:
    """``results`` and ``failures`` (what was tried and what it said) by replica name, in the order listed;
    ``errors`` the exceptions behind the failures; ``seconds`` each replica took; ``elapsed`` the whole."""

    what: str
    results: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict, repr=False)
    seconds: dict[str, float] = field(default_factory=dict)
    elapsed: float = 0.0
    concurrency: int = 1

    @property
    def partial(self) -> bool:
        return bool(self.failures) and bool(self.results)

    def failure_text(self, cli: bool = False) -> dict[str, str]:
        """The failures, with the command line's advice (``cli``) where an error has its own."""
        return {name: why_failed(self.errors[name], cli) if name in self.errors else why
                for name, why in self.failures.items()}

    def summary(self, cli: bool = False) -> str:
        n = len(self.results) + len(self.failures)
        line = f"{self.what}: {len(self.results)} of {n} replica(s) answered in {self.elapsed:.1f} s " \
               f"({self.concurrency} at a time)"
        return line + "".join(f"\n  ! {name}: {why}" for name, why in self.failure_text(cli).items())


def why_failed(exc: BaseException, cli: bool = False) -> str:
    """One line: the error's message and its advice (the command line's, with ``cli``)."""
    if isinstance(exc, KitError):
        hint = (exc.cli_hint or exc.hint) if cli else exc.hint
        return exc.message + (f" ({hint})" if hint else "")
    return f"{type(exc).__name__}: {exc}"


def fanout(members: list[Member], fn: Callable[[Member], Any], *, what: str = "", concurrency: int = 8,
           timeout: float = 120.0, progress: Any = "auto") -> FanOut:
    """``fn(member)`` for every member, ``concurrency`` at a time, each within ``timeout`` seconds.
    ``progress``: ``"auto"`` (a bar on stderr when it is a terminal), None, or a callable given
    (member, ok, done, total) after each replica."""
    if concurrency < 1:
        raise UsageError(f"concurrency must be 1 or more, not {concurrency}", hint="e.g. concurrency=8",
                         cli_hint="e.g. --concurrency 8")
    out = FanOut(what or getattr(fn, "__name__", "fan-out"), concurrency=concurrency)
    total = len(members)
    report = _progress(progress, out.what, total)
    started = time.monotonic()
    finished: queue.Queue = queue.Queue()
    waiting = list(members)
    running: dict[str, tuple[Member, float]] = {}

    def run(member: Member) -> None:
        try:
            finished.put((member.name, True, fn(member)))
        except BaseException as exc:  # noqa: BLE001 -- any failure of one replica is named, not raised
            finished.put((member.name, False, exc))

    def start_more() -> None:
        while waiting and len(running) < concurrency:
            member = waiting.pop(0)
            running[member.name] = (member, time.monotonic())
            threading.Thread(target=run, args=(member,), name=f"fleet-{member.name}", daemon=True).start()

    def done(member: Member, at: float) -> None:
        out.seconds[member.name] = round(time.monotonic() - at, 3)
        del running[member.name]
        report(member, member.name in out.results, len(out.results) + len(out.failures), total)

    start_more()
    while running:
        try:
            name, ok, value = finished.get(timeout=0.1)
        except queue.Empty:
            name = None
        if name is not None and name in running:
            member, at = running[name]
            if ok:
                out.results[name] = value
            else:
                out.errors[name] = value
                out.failures[name] = why_failed(value)
            done(member, at)
        now = time.monotonic()
        for member, at in list(running.values()):
            if now - at > timeout:
                out.failures[member.name] = f"no answer within {timeout:g} s (the per-replica time limit)"
                done(member, at)
        start_more()
    out.elapsed = time.monotonic() - started
    order = {m.name: i for i, m in enumerate(members)}
    out.results = dict(sorted(out.results.items(), key=lambda kv: order.get(kv[0], 0)))
    out.failures = dict(sorted(out.failures.items(), key=lambda kv: order.get(kv[0], 0)))
    return out


def _progress(progress: Any, what: str, total: int) -> Callable[[Member, bool, int, int], None]:
    if callable(progress):
        return progress
    if progress != "auto" or not sys.stderr.isatty() or total < 2:
        return lambda member, ok, done, total: None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=what, unit="replica", file=sys.stderr, leave=False)

    def tick(member: Member, ok: bool, done: int, total: int) -> None:
        bar.update(1)
        if not ok:
            bar.write(f"{member.name}: failed", file=sys.stderr)
        if done == total:
            bar.close()

    return tick
