"""The lab's scheduler: when each request's tokens are due, and sending them on time.

Each running request has its own schedule: prefill, then one speculative round (or decode
step) after another, each as long as the throughput model says for the number of requests
running at that moment. A timer fires at each scheduled time and hands the round's tokens
to the request's sink, which writes them to the client. The scheduled time never drifts
with lateness: the next round is due a round after the previous *scheduled* time.

Requests beyond the running cap wait, as in sglang's scheduler. A request whose client
went away is cancelled: its timer is removed and it leaves the running set.
"""

from __future__ import annotations

import array
import asyncio
import bisect
import hashlib
import heapq
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from .throughput import ThroughputModel

__all__ = ["EmissionStats", "Engine", "Filler", "Generation", "Histogram", "PrefixCache"]

scheduler_log = logging.getLogger("kit.lab.scheduler")

_WORDS = (
    "the lab streams these words at a modelled speed so that clients notebooks and benchmarks "
    "see the timing of a real server while no model runs and no GPU is used every token is one "
    "word and every chunk carries as many tokens as a speculative round accepted latency and "
    "throughput follow the scenario file which says where each number comes from"
).split()


class Filler:
    """Deterministic filler text: token i is word i of a fixed pseudo-random sequence.

    Text and token ids of any token range are slices of precomputed bytes, so a cumulative
    ``text`` of thousands of tokens costs one copy, not one string join per token.
    """

    def __init__(self, length: int = 1 << 17, vocab_size: int = 248320, seed: int = 20260430) -> None:
        rng = random.Random(seed)
        words = [rng.choice(_WORDS) for _ in range(length)]
        pieces = [" " + w for w in words]
        id_of = {w: str(1000 + hash_word(w) % (vocab_size - 2000)) for w in set(words)}
        ids = [id_of[w] for w in words]
        self.length = length
        self.text_bytes = "".join(pieces).encode()
        self.text_off = _offsets(len(p) for p in pieces)
        self.ids_bytes = "".join("," + i for i in ids).encode()
        self.ids_off = _offsets(len(i) + 1 for i in ids)
        self.id_values = [int(i) for i in ids]

    @property
    def max_tokens(self) -> int:
        """The longest output a request may ask for; start words stay below 4096."""
        return self.length - 4096

    def text(self, start: int, stop: int) -> bytes:
        return self.text_bytes[self.text_off[start]:self.text_off[stop]]

    def ids_json(self, start: int, stop: int) -> bytes:
        """``1,2,3`` for tokens start..stop (no brackets)."""
        return self.ids_bytes[self.ids_off[start] + 1:self.ids_off[stop]] if stop > start else b""

    def ids(self, start: int, stop: int) -> list[int]:
        return self.id_values[start:stop]


def hash_word(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")


def _offsets(lengths) -> list[int]:
    out, total = [0], 0
    for n in lengths:
        total += n
        out.append(total)
    return out


class PrefixCache:
    """Which prompt prefixes were seen, in blocks of ``block`` tokens, like a radix cache."""

    def __init__(self, block: int = 16, capacity: int = 1 << 20) -> None:
        self.block = block
        self.capacity = capacity
        self.seen: set[bytes] = set()

    def match_and_insert(self, tokens: bytes, n_tokens: int) -> int:
        """Cached tokens of this prompt (a multiple of the block), then remember its blocks."""
        per = max(1, len(tokens) // max(1, n_tokens)) * self.block
        h = hashlib.blake2b(digest_size=12)
        cached, hit = 0, True
        for i in range(0, len(tokens) - per + 1, per):
            h.update(tokens[i:i + per])
            key = h.digest()
            if hit and key in self.seen:
                cached += self.block
                continue
            hit = False
            if len(self.seen) < self.capacity:
                self.seen.add(key)
        # sglang always computes the last prompt token, so at most n-1 come from the cache.
        return min(cached, max(0, n_tokens - 1))

    def flush(self) -> None:
        self.seen.clear()


class Sink(Protocol):
    def chunk(self, gen: Generation, new_tokens: int, finished: bool) -> None: ...


class Generation:
    """One request's progress through prefill and decode."""

    __slots__ = ("rid", "prompt_tokens", "cached_tokens", "target", "finish", "produced", "rounds",
                 "accepted_drafts", "histogram", "t_arrival", "t_admitted", "t_first", "t_done", "next_at",
                 "sink", "rng", "start_word", "state", "wall_arrival", "last_emit", "accept_pos")

    def __init__(self, rid: str, prompt_tokens: int, cached_tokens: int, target: int, finish: str,
                 sink: Sink, seed: int, start_word: int) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.target = max(1, target)
        self.finish = finish            # "length" or "stop": why it ends when it reaches target
        self.produced = 0
        self.rounds = 0
        self.accepted_drafts = 0
        self.histogram: list[int] = []
        self.t_arrival = self.t_admitted = self.t_first = self.t_done = self.next_at = 0.0
        self.last_emit = 0.0
        self.wall_arrival = time.time()
        self.sink = sink
        self.rng = random.Random(seed)
        self.accept_pos = seed & 4095
        self.start_word = start_word
        self.state = "new"

    def __repr__(self) -> str:
        return f"<Generation {self.rid} {self.state}: {self.produced}/{self.target} tokens>"

    @property
    def e2e_latency(self) -> float:
        return (self.t_done or time.monotonic()) - self.t_arrival


# sglang 0.5.11's default buckets (srt/observability/metrics_collector.py).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
               1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
               0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)


class Histogram:
    """Cumulative-bucket histogram in the shape Prometheus exports."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1


COALESCE = 0.0003  # seconds: chunks due this soon after one being sent leave with it


class EmissionStats:
    """How far from its scheduled time each chunk left (late or early), in 10 µs buckets up to 1 s."""

    BUCKET = 1e-5
    SIZE = 100_000

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        # An array, not a list: the garbage collector never has to walk its 100,000 counters.
        self.counts = array.array("q", bytes(8 * self.SIZE))
        self.n = 0
        self.total = 0.0
        self.worst = 0.0
        self.tokens = 0

    def add(self, late: float, tokens: int) -> None:
        late = -late if late < 0 else late
        self.counts[min(int(late / self.BUCKET), self.SIZE - 1)] += 1
        self.n += 1
        self.total += late
        self.tokens += tokens
        if late > self.worst:
            self.worst = late

    def quantile(self, q: float) -> float:
        if not self.n:
            return 0.0
        rank, seen = q * self.n, 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= rank:
                return (i + 1) * self.BUCKET
        return self.worst

    def summary(self) -> dict[str, Any]:
        return {"emissions": self.n, "tokens": self.tokens,
                "mean_ms": self.total / self.n * 1e3 if self.n else 0.0,
                "p50_ms": self.quantile(0.5) * 1e3, "p99_ms": self.quantile(0.99) * 1e3,
                "p999_ms": self.quantile(0.999) * 1e3, "max_ms": self.worst * 1e3}


_GOLDEN_STEP = 2531  # round(4096 / golden ratio), odd: the walk visits all 4096 slots before repeating


def acceptance_table(model: ThroughputModel, size: int = 4096) -> list[int]:
    """Tokens per round, laid out so that a uniform index draws the model's distribution.

    Each outcome k fills round(P(k) * size) slots, so the table's mean matches the model's
    to within 1/size of a token.
    """
    if not model.steps:
        return [1] * size
    probs, chain = [], 1.0
    for p in model.accept_probs:
        probs.append(chain * (1 - p))
        chain *= p
    probs.append(chain)  # every draft accepted
    table: list[int] = []
    cumulative = 0.0
    for k, p in enumerate(probs, start=1):
        cumulative += p
        table += [k] * (round(cumulative * size) - len(table))
    return table[:size] + [len(probs)] * (size - len(table))


class Engine:
    """Running and waiting requests, their timers, and the counters sglang reports."""

    def __init__(self, model: ThroughputModel, fields: Mapping[str, Any], max_total_tokens: int,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.model = model
        self.fields = fields
        self.loop = loop or asyncio.get_event_loop()
        self.max_total_tokens = max_total_tokens
        self.running: set[Generation] = set()
        self.used_tokens = 0  # KV tokens of the running requests: prompt plus output so far
        self.waiting: deque[Generation] = deque()
        self.stats = EmissionStats()
        self.cache = PrefixCache()
        self.counters = {"prompt_tokens": 0, "generation_tokens": 0, "requests": 0, "aborted": 0,
                         "cached_tokens": 0, "verify_rounds": 0, "accepted_tokens": 0}
        self.histograms = {"ttft": Histogram(TTFT_BUCKETS), "e2e": Histogram(E2E_BUCKETS),
                           "itl": Histogram(ITL_BUCKETS)}
        self.iv_tokens = self.iv_rounds = self.iv_round_tokens = 0
        self.iv_since = time.monotonic()
        self.itl = self.histograms["itl"]
        self.last_gen_throughput = 0.0
        self._ticker: asyncio.TimerHandle | None = None
        self.graph_max_bs = int(fields.get("cuda_graph_max_bs") or 0)
        # sglang:cuda_graph_passes_total by mode (kit/lab/metrics.py); a mode appears on its first pass
        self.graph_passes: dict[str, int] = {}
        self._heap: list[tuple[float, int, Generation]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._firing = False
        noise_rng = random.Random(1)
        # 4096 draws of the model's log-normal jitter, picked by random index on the hot path.
        self._noise = [model._noise(noise_rng) for _ in range(4096)]
        self._accept = acceptance_table(model)

    # -- admission ----------------------------------------------------------
    def submit(self, gen: Generation) -> None:
        gen.t_arrival = self.loop.time()
        gen.histogram = [0] * (self.model.steps + 1)
        gen.state = "waiting"
        self.waiting.append(gen)
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        batch: list[Generation] = []
        while self.waiting and len(self.running) < self.model.max_running:
            gen = self.waiting.popleft()
            batch.append(gen)
            self._prefill(gen)
        if batch:
            mode = "prefill_cuda_graph" if self.model.prefill_in_graph else "prefill_none"
            self.graph_passes[mode] = self.graph_passes.get(mode, 0) + 1
            self._log_prefill(batch)
            self._ensure_ticker()

    def _prefill(self, gen: Generation) -> None:
        """Schedule the first token: the next step boundary of the running batch, then prefill."""
        now = self.loop.time()
        busy = len(self.running)
        wait = self.model.round_s * self.model.batch_factor(busy) * gen.rng.random() if busy else 0.0
        self.running.add(gen)
        self.used_tokens += gen.prompt_tokens
        gen.state = "prefill"
        gen.t_admitted = now
        new_tokens = gen.prompt_tokens - gen.cached_tokens
        gen.next_at = now + wait + self.model.prefill_time(gen.rng, new_tokens, len(self.running))
        self._schedule(gen)

    # -- the timer ----------------------------------------------------------
    def _schedule(self, gen: Generation) -> None:
        # One asyncio timer for the earliest due request, not one per request: a chunk
        # then costs a heap push and pop instead of a TimerHandle and a loop iteration.
        self._seq += 1
        heapq.heappush(self._heap, (gen.next_at, self._seq, gen))
        if not self._firing and (self._timer is None or gen.next_at < self._timer_at):
            self._arm(gen.next_at)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._fire)

    def catch_up(self) -> None:
        """Send what is due before other work: a burst of new requests must not delay chunks."""
        if self._heap and not self._firing and self._heap[0][0] <= time.monotonic() + COALESCE:
            if self._timer is not None:
                self._timer.cancel()
            self._fire()

    def _fire(self) -> None:
        self._timer = None
        self._firing = True
        heap, clock, pop = self._heap, time.monotonic, heapq.heappop
        # Yield to the event loop after a few milliseconds of work, so that an overloaded
        # lab still reads requests and notices closed connections.
        budget = clock() + 0.005
        try:
            while heap:
                when, _, gen = heap[0]
                now = clock()
                # Chunks due within COALESCE go out in this wake-up, a little early: one wake-up
                # costs more than the chunk, and the early ones count as error in EmissionStats.
                if when > now + COALESCE or now > budget:
                    break
                pop(heap)
                if gen.state != "done" and gen.next_at == when:
                    self._emit(gen)
        finally:
            self._firing = False
        if heap:
            self._arm(max(heap[0][0], self.loop.time()))

    # -- decode -------------------------------------------------------------
    def _emit(self, gen: Generation) -> None:
        # The hot path: one call per chunk sent. Random draws come from precomputed tables
        # (acceptance and jitter), indexed by one getrandbits call.
        model = self.model
        bits = gen.rng.getrandbits(24)
        produced = gen.produced
        n = 1
        if produced and model.steps:
            # A golden-ratio walk through the sorted acceptance table, not independent draws: a
            # request's mean accept length then matches the model's within a few rounds. With
            # independent draws a 32-token answer (11 rounds) read 8% slow for a seed that drew
            # short, and the same prompts draw the same seeds run after run.
            gen.accept_pos = (gen.accept_pos + _GOLDEN_STEP) & 4095
            n = self._accept[gen.accept_pos]
            gen.rounds += 1
            gen.accepted_drafts += n - 1
            gen.histogram[n - 1] += 1
            self.iv_rounds += 1
            self.iv_round_tokens += n
        if produced:  # a decode chunk: one pass, in the graph when the running batch is within its size
            mode = "decode_cuda_graph" if self._graph(len(self.running)) else "decode_none"
            self.graph_passes[mode] = self.graph_passes.get(mode, 0) + 1
        left = gen.target - produced
        if n > left:
            n = left
        produced += n
        gen.produced = produced
        self.used_tokens += n
        finished = produced >= gen.target
        now = time.monotonic()
        if produced == n:
            gen.t_first = now
            gen.state = "decode"
        else:
            itl = self.itl
            v = (now - gen.last_emit) / n
            itl.counts[bisect.bisect_left(itl.buckets, v)] += 1
            itl.sum += v
            itl.count += 1
        gen.last_emit = now
        if finished:
            gen.t_done = now
            gen.state = "done"
        gen.sink.chunk(gen, n, finished)
        self.stats.add(time.monotonic() - gen.next_at, n)
        self.iv_tokens += n
        if finished:
            self._finish(gen)
            return
        factor = 1.0 + model.batch_slowdown * (len(self.running) - 1)
        gen.next_at += model.round_s * factor * self._noise[bits >> 12]
        self._seq += 1
        heapq.heappush(self._heap, (gen.next_at, self._seq, gen))
        if not self._firing and (self._timer is None or gen.next_at < self._timer_at):
            self._arm(gen.next_at)

    def _finish(self, gen: Generation) -> None:
        self.running.discard(gen)
        self.used_tokens -= gen.prompt_tokens + gen.produced
        c = self.counters
        c["requests"] += 1
        c["generation_tokens"] += gen.produced
        c["prompt_tokens"] += gen.prompt_tokens
        c["cached_tokens"] += gen.cached_tokens
        c["verify_rounds"] += gen.rounds
        c["accepted_tokens"] += gen.produced if gen.rounds else 0
        self.histograms["ttft"].observe(gen.t_first - gen.t_arrival)
        self.histograms["e2e"].observe(gen.t_done - gen.t_arrival)
        self._admit_waiting()

    def cancel(self, gen: Generation) -> None:
        """The client went away: drop the request; its heap entry is skipped when it comes up."""
        if gen.state == "done":
            return
        if gen in self.running:
            self.running.discard(gen)
            self.used_tokens -= gen.prompt_tokens + gen.produced
        try:
            self.waiting.remove(gen)
        except ValueError:
            pass
        gen.state = "done"
        self.counters["aborted"] += 1
        self.counters["generation_tokens"] += gen.produced
        self._admit_waiting()

    # -- what sglang reports -------------------------------------------------
    def avg_spec_accept_length(self) -> float | None:
        c = self.counters
        return c["accepted_tokens"] / c["verify_rounds"] if c["verify_rounds"] else None

    def flush_cache(self) -> bool:
        if self.running or self.waiting:
            return False
        self.cache.flush()
        return True

    def _ensure_ticker(self) -> None:
        if self._ticker is None and self.running:
            self.iv_since = time.monotonic()
            self._ticker = self.loop.call_later(self._log_every(), self._tick)

    def _log_every(self) -> float:
        every = int(self.fields.get("decode_log_interval") or 40)
        return every * self.model.round_s * self.model.batch_factor(len(self.running))

    def _tick(self) -> None:
        self._ticker = None
        now = time.monotonic()
        gap = max(1e-9, now - self.iv_since)
        self.last_gen_throughput = self.iv_tokens / gap
        if self.running and scheduler_log.isEnabledFor(logging.INFO):
            scheduler_log.info(self._decode_line())
        self.iv_tokens = self.iv_rounds = self.iv_round_tokens = 0
        self.iv_since = now
        self._ensure_ticker()

    def _decode_line(self) -> str:
        used = self.used_tokens
        msg = (f"Decode batch, #running-req: {len(self.running)}, #token: {used}, "
               f"token usage: {used / self.max_total_tokens:.2f}, ")
        if self.model.speculative:
            rounds, tokens = self.iv_rounds, self.iv_round_tokens
            accept = tokens / rounds if rounds else 0.0
            drafts = max(1, self.model.draft_tokens - 1)
            rate = (tokens - rounds) / (rounds * drafts) if rounds else 0.0
            msg += f"accept len: {accept:.2f}, accept rate: {rate:.2f}, "
        return msg + (f"cuda graph: {self._graph(len(self.running))}, "
                      f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}")

    def _graph(self, batch: int) -> bool:
        return self.model.cuda_graph and batch <= max(self.graph_max_bs, 1)

    def _log_prefill(self, batch: list[Generation]) -> None:
        if not scheduler_log.isEnabledFor(logging.INFO):
            return
        new = sum(g.prompt_tokens - g.cached_tokens for g in batch)
        cached = sum(g.cached_tokens for g in batch)
        usage = self.used_tokens / self.max_total_tokens
        seconds = max(1e-6, max(g.next_at for g in batch) - self.loop.time())
        scheduler_log.info(
            f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: {len(self.running) - len(batch)}, "
            f"#queue-req: {len(self.waiting)}, #pending-token: 0, "
            f"cuda graph: {self.model.prefill_in_graph}, input throughput (token/s): {new / seconds:.2f}"
        )
