"""The facts a rule may declare (``Rule.reads``: needed; ``Rule.uses``: read when present), what each
is on an :class:`kit.doctor.evidence.Evidence`, and how a user gets it.

The engine checks a rule's needed facts before it runs it: a rule whose facts are missing is
reported "not checked: needs ..." with how to get them, and the questions left open (``unanswered``)
are generated from the same declarations. In strict mode (``SGL_KIT_STRICT_RULES=1``, the test run)
:class:`Watched` records which facts a rule touches, and the engine raises when one was not declared.
docs/guide.md's table of the facts is generated from :data:`FACTS` (:func:`fact_table`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FACTS", "Fact", "UndeclaredFact", "Watched", "fact_of", "fact_table", "missing", "names", "strict"]

STRICT_ENV = "SGL_KIT_STRICT_RULES"


def strict() -> bool:
    """Strict mode: a rule that raises, or reads a fact it did not declare, fails the diagnosis."""
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


@dataclass(frozen=True)
class Fact:
    name: str
    what: str  # in the words of a question: "the model's config.json"
    attrs: tuple[str, ...]  # the Evidence attributes that hold it
    present: Callable[[Any], bool]
    how: str  # the option or command that gives it
    ask: bool = True  # listed among the questions left open when missing (False: an investigation of its own,
    # whose rules are listed as not checked)
    given_by: str = ""  # a fact that brings this one with it: while that one is missing too, only it is asked


def _hw(ev, attr: str) -> bool:
    return getattr(ev.hardware, attr, None) is not None


def _log_read(ev) -> bool:
    return bool(ev.notices or ev.messages or ev.startup or ev.decode or ev.capacity or ev.prefill)


FACTS: dict[str, Fact] = {f.name: f for f in (
    Fact("args", "how the server was launched (the arguments it runs with)", ("args", "unknown"),
         lambda ev: bool(ev.args),
         "the log from the server's start (its `server_args=` line, --log), `curl HOST:PORT/server_info` "
         "(--server-info) or the launch command (--command)"),
    Fact("command", "what the launch command asked for", ("explicit", "asked_unknown", "command", "launch"),
         lambda ev: ev.explicit is not None or ev.launch is not None,
         "the launch command as run (--command FILE), or a live target"),
    Fact("version", "the sglang version", ("version",), lambda ev: ev.version is not None,
         "`python -m sglang.check_env` or the log's first lines"),
    Fact("source", "the sglang source of that version", ("tree", "probes"), lambda ev: ev.tree is not None,
         "--sglang VERSION (the release's source, downloaded once) or --package-dir DIR", given_by="version"),
    Fact("model_config", "the model's config.json", ("model_config",), lambda ev: ev.model_config is not None,
         "--model-config FILE (the config.json beside the weights)"),
    Fact("hardware", "the GPUs", ("hardware",), lambda ev: ev.hardware is not None,
         "`nvidia-smi` (--nvidia-smi FILE), or --gpu NAME, or a live target"),
    Fact("topology", "the GPUs' links", (), lambda ev: _hw(ev, "topology"),
         "`nvidia-smi topo -m` (--topo FILE)"),
    Fact("p2p", "peer-to-peer access between the GPUs", (), lambda ev: _hw(ev, "p2p"),
         "`nvidia-smi topo -p2p r` (--topo FILE)"),
    Fact("environ", "the server's environment", ("environ",), lambda ev: ev.environ is not None,
         "`env` or /proc/PID/environ of the server (--environ FILE), or a live target"),
    Fact("decode", "the server's Decode batch lines (queues, token usage, accept length, throughput)", ("decode",),
         lambda ev: bool(ev.decode),
         "~50 lines of the server's log while it serves (--log FILE)"),
    Fact("prefill", "the server's Prefill batch lines", ("prefill",), lambda ev: bool(ev.prefill),
         "the server's log while it takes new requests (--log FILE)"),
    Fact("notices", "what sglang said at startup (its notices and warnings)", ("notices", "messages", "startup"),
         _log_read, "the server's log from its start (--log FILE)"),
    Fact("capacity", "the KV pool and request limits sglang chose (its ready line)", ("capacity",),
         lambda ev: ev.capacity is not None,
         "the server's log from its start to `The server is fired up` (--log FILE)"),
    Fact("runtime", "what the server did, from its metrics", ("runtime",), lambda ev: ev.runtime is not None,
         "--prometheus URL, or a live server launched with --enable-metrics (sgl-kit doctor TARGET)", ask=False),
    Fact("trace", "a torch-profiler trace of the server", ("trace",), lambda ev: ev.trace is not None,
         "`sgl-kit profile TARGET`, then --trace FILE", ask=False),
    Fact("bench", "the client's view: a benchmark next to the log's Decode batch lines of the same run shows time "
         "spent outside the GPU step (tokenizer, detokenizer, HTTP)", ("bench", "bench_serving"),
         lambda ev: ev.bench is not None,  # a pasted bench_serving result is read too, for its concurrency
         "`sgl-kit bench TARGET`, then --bench FILE"),
    Fact("baseline", "a known-good launch to compare with", ("baseline",), lambda ev: ev.baseline is not None,
         "--baseline FILE (its log, /server_info or launch command)"),
)}

_BY_ATTR = {a: f.name for f in FACTS.values() for a in f.attrs}
_HW_FACTS = {"topology": "topology", "p2p": "p2p"}


def fact_of(attr: str) -> str | None:
    """The fact an Evidence attribute holds (None: bookkeeping such as ``sources`` or ``problems``)."""
    return _BY_ATTR.get(attr)


def names(declared) -> set[str]:
    """The fact names of a declaration: ``reads`` entries may be alternatives, ``"decode|bench"``."""
    return {n for entry in declared for n in entry.split("|")}


def missing(ev, declared) -> list[tuple[Fact, ...]]:
    """The needed facts (``Rule.reads``) this evidence lacks, each entry as its alternatives (one of
    ``"decode|bench"`` is enough). Names the registry does not know are not checked."""
    out = []
    for entry in declared:
        alts = tuple(FACTS[n] for n in entry.split("|") if n in FACTS)
        if alts and not any(f.present(ev) for f in alts):
            out.append(alts)
    return out


class UndeclaredFact(Exception):
    """Strict mode: a rule read a fact it did not declare."""


class Watched:
    """An Evidence that records, in ``seen``, the fact of each attribute read (strict mode)."""

    def __init__(self, ev, seen: set[str]) -> None:
        object.__setattr__(self, "_ev", ev)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str):
        value = getattr(self._ev, name)
        fact = _BY_ATTR.get(name)
        if name == "hardware" and value is not None:
            return _WatchedHardware(value, self._seen)
        if fact is not None:
            self._seen.add(fact)
        return value

    def __setattr__(self, name: str, value) -> None:
        setattr(self._ev, name, value)


class _WatchedHardware:
    """``ev.hardware``: its links are facts of their own (``topology``, ``p2p``), the rest is ``hardware``."""

    def __init__(self, hw, seen: set[str]) -> None:
        object.__setattr__(self, "_hw", hw)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str):
        self._seen.add(_HW_FACTS.get(name, "hardware"))
        return getattr(self._hw, name)


def fact_table() -> str:
    """The Markdown table of the facts (docs/guide.md)."""
    rows = ["| fact | what it is | how to get it |", "| --- | --- | --- |"]
    rows += [f"| `{f.name}` | {f.what} | {f.how} |" for f in FACTS.values()]
    return "\n".join(rows)
